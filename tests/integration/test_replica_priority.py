"""Issue 46, item 6: replicas run below alloclab's CPU priority (nice and, with autogroup
scheduling, their session's autogroup), so CPU-bound replicas cannot starve the sampler."""

from __future__ import annotations

import os

from alloclab.process import priority
from tests.conftest import run_cli
from tests.experiments import write_experiment


def test_replicas_run_nicer_than_alloclab(tmp_path):
    exp = write_experiment(
        tmp_path / "exp.toml",
        "nice",
        ["/bin/sh", "-c", "nice; cat /proc/self/autogroup 2>/dev/null; sleep 1"],
        {"a": "glibc"},
        replicas=1,
        interval="0.2s",
        phases={"load": "2s"},
    )
    r = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--no-report")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "run" / "replicas" / "a-1" / "stdout.log").read_text().splitlines()
    expected = min(19, os.nice(0) + priority.REPLICA_NICE)  # 19: the lowest priority there is
    assert int(lines[0]) == expected
    if os.path.exists("/proc/self/autogroup"):
        assert lines[1].endswith(f"nice {expected}"), lines
