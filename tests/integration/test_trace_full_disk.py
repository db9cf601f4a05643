"""`trace record` on a disk that fills: the file is never marked complete, and the user is told
the disk was full (exit 3), not to record again because the trace is unreadable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import run_cli
from tests.trace_codec import COMPLETE_FLAG, HEADER

pytestmark = [pytest.mark.root]  # mounts a tmpfs


@pytest.fixture
def tiny_disk(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_a_recording_cut_by_a_full_disk_is_not_marked_complete(tiny_disk):
    out = tiny_disk / "big.trace"
    program = "import random\nkeep = [bytearray(random.randrange(1, 5000)) for _ in range(150_000)]\n"
    r = run_cli("trace", "record", "-o", str(out), "--", sys.executable, "-c", program)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "disk was full" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (
        r.stderr
    )
    flags = HEADER.unpack(out.read_bytes()[: HEADER.size])[2]
    assert not flags & COMPLETE_FLAG, "a truncated recording was marked complete"
