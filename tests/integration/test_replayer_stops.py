"""`alloclab trace replay` stopped by SIGTERM or SIGKILL takes its replayer with it (its process
group on SIGTERM; PR_SET_PDEATHSIG when alloclab is killed outright)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.capture import sampler
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory) -> Path:
    """A recording with a 0.3 s gap between allocations: replayed at --speed 0.01 it takes ~30 s."""
    out = tmp_path_factory.mktemp("slowtrace") / "gap.trace"
    r = run_cli(
        "trace",
        "record",
        "-o",
        str(out),
        "--",
        sys.executable,
        "-c",
        "import time; a = [bytearray(99) for _ in range(9)]; time.sleep(0.3); b = [bytearray(99) for _ in range(9)]",
    )
    assert r.returncode == 0, r.stderr
    return out


def _replayer_of(pid: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        for p in sampler.all_processes():
            st = sampler.read_stat(p)
            try:
                if st and st.ppid == pid and Path(f"/proc/{p}/exe").resolve().name == "replay":
                    return p
            except OSError:  # that child ended between reading its stat and its exe (ci, session 13)
                continue
        time.sleep(0.05)
    raise AssertionError("the replayer never started")


def _gone(pid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_replayer_ends_with_alloclab(slow_trace, sig):
    proc = subprocess.Popen(
        [sys.executable, "-m", "alloclab", "trace", "replay", str(slow_trace), "--speed", "0.01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        replayer = _replayer_of(proc.pid, time.monotonic() + 30)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert _gone(replayer, time.monotonic() + 30), f"replayer {replayer} outlived alloclab ({sig.name})"
        if sig == signal.SIGTERM:
            assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
