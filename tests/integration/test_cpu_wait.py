"""The measured processes' own wait for a CPU, from real processes through the sampler, the tick
writer and a real store to the cpu-saturated warning. Contention is made inside the test's own
process tree: a "replica" (a busy loop with a second, sleeping thread) and two busy loops at the
same nice, all pinned to one CPU, so the replica can run at most about a third of the time it is
runnable whatever else the machine does (other work on that CPU only makes it wait more)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab import sampler
from alloclab.allocators.library import AllocatorSpec
from alloclab.analysis import warnings
from alloclab.analysis.rules import RULES
from alloclab.analysis.windows import Window
from alloclab.store import Store
from alloclab.tickwriter import Recorder, Tracked
from tests.waiting import wait_for

REPLICA = "import threading, time\nthreading.Thread(target=time.sleep, args=(1e6,), daemon=True).start()\nwhile True: pass"
HOG = "while True: pass"


@pytest.fixture
def one_cpu():
    """(start a busy program pinned to one CPU, that CPU); everything started is killed after."""
    cpu = max(os.sched_getaffinity(0))
    started: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        started.append(p)
        return p
    yield start
    for p in started:
        p.kill()
        p.wait()


def _record(tmp_path: Path, pid: int, cgroup: sampler.Cgroup | None, runnable_s: float) -> Store:
    """Sample the replica (one process) every 0.2 s into a new store until its processes were
    runnable (waiting or running) for `runnable_s` seconds since the first tick."""
    store = Store.create(tmp_path / "run.db")
    gid = store.add_group(name="glibc", allocator="glibc", is_baseline=1)
    rep = Tracked(id=store.add_replica(group_id=gid, name="glibc-1", idx=1), name="glibc-1", group_name="glibc",
                  spec=AllocatorSpec(kind="glibc", request="glibc"))
    recorder = Recorder(store, float("inf"), "rss")
    first: list[float] = []

    def tick() -> bool:
        now = time.time()
        with store.tick():
            readings = sampler.sample_processes([pid], None, schedstat=cgroup is None)
            recorder.observe(rep, readings, now, "load", cgroup)
            row = recorder.replica_rows[-1]
            recorder.flush(now)
        total = row[-2] + row[-1]
        first.append(first[0] if first else total)
        return total - first[0] >= runnable_s
    wait_for(lambda: tick() and len(first) >= 3, timeout=30, what=f"{runnable_s} s of runnable time", interval=0.2)
    return store


def _cpu_warning(store: Store) -> warnings.Warning:
    c = warnings.Context(store, [], [], Window(0.0, time.time() + 1, {}, "test"), {}, {}, ["glibc"], False)
    [w] = list(warnings.cpu_load(c))
    return w


def test_a_replica_sharing_its_cpu_with_two_busy_loops_is_cpu_saturated_by_its_threads_schedstat(tmp_path, one_cpu):
    replica = one_cpu(REPLICA)
    one_cpu(HOG)
    one_cpu(HOG)
    wait_for(lambda: len(os.listdir(f"/proc/{replica.pid}/task")) == 2, what="the replica's second thread")
    store = _record(tmp_path, replica.pid, None, runnable_s=1.5)
    assert [r["cpu_wait_source"] for r in store.replicas()] == ["schedstat"]
    w = _cpu_warning(store)
    share = w.data["replica_share"]["glibc-1"]
    assert w.kind == "cpu-saturated" and w.groups == ["glibc"] and w.replicas == ["glibc-1"], w.message
    assert share > RULES["cpu_wait_share"] and share > 0.55, share       # a third of the CPU at most: ~2/3 waited
    assert "schedstat" in w.message


def _v2_mount() -> Path | None:
    """Where this process's cgroup v2 directory is (hybrid layouts mount it at .../unified)."""
    mounts = {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if line.split()[2] == "cgroup2"}
    rel = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), None)
    for mount in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if mount in mounts and rel is not None:
            return Path(mount + rel.rstrip("/"))
    return None


def test_a_replica_cgroup_v2_reports_its_wait_from_psi(tmp_path, one_cpu):
    base = _v2_mount()
    if base is None:
        pytest.skip("no cgroup v2 hierarchy here")
    path = base / f"alloclab-cpuwait-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup v2 here: {exc.strerror}")
    cgroup = sampler.Cgroup(path, 2)
    try:
        if not cgroup.has_cpu_pressure:
            pytest.skip("this kernel keeps no CPU pressure (PSI) for cgroups")
        replica = one_cpu(REPLICA)
        (path / "cgroup.procs").write_text(str(replica.pid))
        one_cpu(HOG)
        one_cpu(HOG)
        store = _record(tmp_path, replica.pid, cgroup, runnable_s=1.5)
        assert [r["cpu_wait_source"] for r in store.replicas()] == ["psi"]
        w = _cpu_warning(store)
        assert w.kind == "cpu-saturated" and "PSI" in w.message, w.message
        assert w.data["replica_share"]["glibc-1"] > 0.55
    finally:
        for p in cgroup.procs():
            os.kill(p, 9)
        wait_for(lambda: cgroup.remove(), timeout=10, what=f"{path} removed")
