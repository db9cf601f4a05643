"""A chatty replica's logs stay within their cap (logcap: 2 x 8 MiB per stream, bounded by the
bytes written, not by a tick), the newest output kept."""

from __future__ import annotations

import subprocess
import time

from alloclab.process import logcap
from tests.conftest import run_cli
from tests.waiting import wait_for


def test_a_chatty_replica_does_not_fill_the_disk(tmp_path):
    exp = tmp_path / "exp.toml"
    # yes(1) writes as fast as the disk takes it: hundreds of MB within the run's 2 s
    exp.write_text(
        'name = "chatty"\ncommand = ["/usr/bin/yes", "0123456789abcdef"]\nreplicas = 1\ninterval = "0.2s"\n'
        '[phases]\nload = "2s"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    r = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--no-report")
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "run" / "replicas" / "a-1"
    sizes = {p.name: p.stat().st_size for p in logs.glob("stdout.log*")}
    assert "stdout.log.1" in sizes, f"never rotated: {sizes}"
    assert sizes["stdout.log.1"] == logcap.LOG_CAP_BYTES  # the newest 8 MiB of the rotated output
    # the live file: never past the cap, whatever yes wrote within a tick (issue 46)
    assert sizes["stdout.log"] <= logcap.LOG_CAP_BYTES, sizes
    assert b"0123456789abcdef\n" in (logs / "stdout.log.1").read_bytes()[-40:]
    assert not list(logs.glob(".*tmp")), list(logs.iterdir())


def test_the_pump_bounds_each_file_by_bytes_however_fast_the_writer(tmp_path):
    """Issue 46: one interval of flat-out writing once filled 600 MB; now no file passes the cap at
    any moment, and the pump ends with its streams."""
    cap = 1 << 20
    pumps = []
    logs = logcap.LogPump(pumps.append, cap=cap)
    out = tmp_path / "stdout.log"
    with logs.stream(out) as w:
        yes = subprocess.Popen(["/usr/bin/yes", "0123456789abcdef"], stdout=w, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "stdout.log.1").exists(), 20, "the first rotation")
        biggest, t_end = 0, time.monotonic() + 1.0
        while time.monotonic() < t_end:  # watched while yes writes: never over the cap
            for name in ("stdout.log", "stdout.log.1"):
                try:
                    biggest = max(biggest, (tmp_path / name).stat().st_size)
                except FileNotFoundError:  # between the rename and the new file
                    pass
    finally:
        yes.kill()
        yes.wait()
    logs.close()
    assert biggest <= cap and pumps and pumps[0].returncode == 0
    assert (tmp_path / "stdout.log.1").stat().st_size == cap
