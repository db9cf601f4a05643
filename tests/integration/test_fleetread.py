"""The fleet collector's native reader (native/fleet_reader.c through fleetread.py) on real
cgroups and real processes: each tick it sees a member that joined since the last one (on cgroup
v2 through a descriptor kept open, on v1 by opening afresh), reads the same figures /proc shows,
drops a member that left and closes its descriptor, and reads only the units asked for."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from alloclab.capture import sampler
from alloclab.fleet import fleetread
from tests.waiting import wait_for


def _cgroups() -> list[tuple[str, Path]]:
    """A fresh cgroup of each kind this host lets us make: v2 (the unified hierarchy) and v1
    (the memory controller's, as the runner makes them)."""
    made = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, rel = line.split(":", 2)
        if hid == "0" and controllers == "":
            for mount in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
                if (Path(mount) / "cgroup.procs").exists() and (Path(mount) / "cgroup.controllers").exists():
                    path = Path(mount + rel) / f"alloclab-fleetread-{os.getpid()}-{uuid.uuid4().hex[:6]}"
                    try:
                        path.mkdir()
                        made.append(("v2", path))
                    except OSError:
                        pass
                    break
    cg, _ = sampler.make_cgroup(f"alloclab-fleetread-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    if cg is not None and cg.version == 1:
        made.append(("v1", cg.path))
    return made


def _join(cgroup: Path, proc: subprocess.Popen) -> None:
    (cgroup / "cgroup.procs").write_text(str(proc.pid))


@pytest.fixture
def reader():
    r, why = fleetread.open_reader(64)
    if r is None:
        pytest.skip(f"native reader unavailable: {why}")
    yield r
    r.close()


def _asleep(pid: int) -> bool:
    """The process waits in its nanosleep (the kernel's wait channel, else the syscall it is in)."""
    try:
        if "nanosleep" in Path(f"/proc/{pid}/wchan").read_text():
            return True
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] in ("35", "230")  # x86-64 nanosleep, clock_nanosleep
    except (OSError, IndexError):
        return False


@pytest.fixture
def cgroups():
    """(made, started): fresh cgroups (skipped where none can be made), and a function that starts
    one `sleep` in each and returns them; every process killed and every cgroup removed after."""
    made = _cgroups()
    if not made:
        pytest.skip("no cgroup can be made here")
    procs: list[subprocess.Popen] = []

    def started() -> list[subprocess.Popen]:
        new = [subprocess.Popen(["sleep", "600"]) for _ in made]
        procs.extend(new)
        for (_, path), p in zip(made, new):
            _join(path, p)
        # in its sleep, not still loading: a reading taken while the loader maps libc differs from
        # statm read a moment later (the CI run saw 420 kB against 2,408 kB)
        wait_for(lambda: all(_asleep(p.pid) for p in new), 30, "the sleeps in their nanosleep")
        return new

    yield made, started
    for p in procs:
        p.kill()
        p.wait()
    for _, path in made:
        path.rmdir()


def test_members_that_join_and_leave_are_seen_on_the_next_tick(reader, cgroups):
    made, started = cgroups
    reader.set_units(len(made) + 1)
    for i, (_, path) in enumerate(made):
        reader.set_unit(i, str(path / "cgroup.procs"))
    reader.set_unit(len(made), None)  # a unit without a cgroup: not read here
    first = started()
    got = reader.read()
    for i, ((kind, _), p) in enumerate(zip(made, first)):
        (rd,) = got[i]
        st, (vmsize, resident) = sampler.read_stat(p.pid), sampler.read_statm(p.pid)
        assert rd.stat.identity == st.identity and rd.stat.comm == "sleep", kind
        assert (rd.vmsize_kb, rd.rss_kb) == (vmsize, resident), kind  # the figures statm shows
    assert len(made) not in got
    second = started()
    got = reader.read()
    for i, ((kind, _), a, b) in enumerate(zip(made, first, second)):
        assert sorted(rd.stat.pid for rd in got[i]) == sorted([a.pid, b.pid]), (
            f"{kind}: a member that joined was not seen"
        )
    assert reader.open_processes() == 2 * len(made)
    for p in first:
        p.kill()
        p.wait()
    got = reader.read()
    for i, ((kind, _), b) in enumerate(zip(made, second)):
        assert [rd.stat.pid for rd in got[i]] == [b.pid], kind
    assert reader.open_processes() == len(made), "the descriptor of a process that left stayed open"
    assert set(reader.read(only=[0])) == {0}  # a second read in one tick: the units asked for


def test_between_membership_reads_a_restart_is_seen_at_once_and_a_new_child_within_the_period(reader, cgroups):
    """With cgroup.procs read every 3 ticks: a member that exits is noticed in the tick it goes (its
    kept statm descriptor reads zeros or fails) and the unit's new member is read in that same tick;
    a child that joins while the known member still runs is seen within 3 ticks, never later."""
    made, started = cgroups
    reader.membership_every(3)
    reader.set_units(len(made))
    for i, (_, path) in enumerate(made):
        reader.set_unit(i, str(path / "cgroup.procs"))
    first = started()
    for _ in range(3):
        reader.read()  # every unit past its first membership read
    joined = started()
    seen_at = {}
    for tick in range(1, 4):
        got = reader.read()
        for i, p in enumerate(joined):
            if i not in seen_at and p.pid in {rd.stat.pid for rd in got.get(i, [])}:
                seen_at[i] = tick
    assert len(seen_at) == len(made), f"a child that joined was not seen within 3 ticks: {seen_at}"
    reader.read()  # (a read of every unit: the new children's descriptors kept)
    for p in first:  # the known members exit, a replacement joins: one tick sees both
        p.kill()
        p.wait()
    again = started()
    got = reader.read()
    for i, ((kind, _), old, new) in enumerate(zip(made, first, again)):
        pids = {rd.stat.pid for rd in got.get(i, [])}
        assert old.pid not in pids and new.pid in pids, f"{kind}: a restart was not seen in the tick it happened"


def test_fleet_prepare_builds_the_reader_alone_into_the_given_cache(tmp_path):
    """`alloclab fleet prepare` (the Ansible role's step before the collector first starts) builds
    the reader into ALLOCLAB_CACHE, and only it: a host without the workloads' static libc or zstd
    still gets the native reader. The collector then loads that build, not a new one."""
    from tests.conftest import run_cli

    out = run_cli("fleet", "prepare", "--json", env={"ALLOCLAB_CACHE": str(tmp_path)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"reader": "native", "why_not": None}
    [built] = (tmp_path / "native").iterdir()
    assert sorted(p.name for p in built.iterdir() if not p.name.startswith(".") and p.name != "build.log") == [
        fleetread.LIBRARY
    ]
    again = run_cli("fleet", "prepare", env={"ALLOCLAB_CACHE": str(tmp_path)}, timeout=60)
    assert again.returncode == 0 and "native reader is built" in again.stdout, again.stderr
    assert [p.name for p in (tmp_path / "native").iterdir()] == [built.name]
