"""A replica whose processes are moved out of its cgroup by someone else (a service manager
re-homing init.scope did it to a 20-minute run here) is still sampled — by its process tree —
and the run says so, instead of recording an empty replica for the rest of the run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiments import frag, write_experiment


def test_sampling_follows_processes_moved_out_of_their_cgroup(tmp_path, native_dir):
    write_experiment(
        tmp_path / "e.toml",
        "moved",
        frag(native_dir, mb=4, load=60),
        {"a": "glibc"},
        interval="0.5s",
        phases={"load": "8s"},
    )
    run = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", "run", str(tmp_path / "e.toml"), "-o", str(run), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cgroup = None
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                db = sqlite3.connect(run / "run.db")
                row = db.execute("SELECT cgroup, root_pid FROM replicas").fetchone()
                ticks = db.execute("SELECT COUNT(*) FROM samples WHERE nprocs > 0").fetchone()[0]
                db.close()
            except sqlite3.OperationalError:
                row, ticks = None, 0
            if row and not row[0]:
                pytest.skip("no per-replica cgroups on this machine")
            if row and ticks >= 3:
                cgroup, pid = Path(row[0]), row[1]
                break
            time.sleep(0.2)
        assert cgroup is not None, "the run did not start"
        moved_at = time.time()
        (cgroup.parent / "cgroup.procs").write_text(str(pid))  # what a service manager did
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    db = sqlite3.connect(run / "run.db")
    events = [d for (d,) in db.execute("SELECT description FROM events WHERE kind = 'cgroup_lost'")]
    assert len(events) == 1 and "sampled by process tree" in events[0]
    after = db.execute("SELECT COUNT(*), MIN(nprocs), MIN(rss_kb) FROM samples WHERE t > ?", (moved_at + 1,)).fetchone()
    assert after[0] >= 5 and after[1] >= 1 and after[2] > 0, after
