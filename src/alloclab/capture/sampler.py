"""Reads memory and CPU of whole process trees from /proc and cgroups, in cost tiers.

Cheap tier (every interval): /proc/PID/stat and /proc/PID/statm, a few microseconds each.
Full tier: /proc/PID/smaps_rollup (PSS, USS, anonymous, swap, LazyFree), which costs the kernel a walk of
the page tables (~3 ms for a 500 MB process), so it runs only while its CPU time stays under a
budget (a share of one core); processes take turns, stalest first. Each figure is stored with
the tier it came from.
A process is identified by (pid, start time in clock ticks), so a reused pid is a new process.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
SMAPS_FIELDS = {
    "Rss": "rss_kb",
    "Pss": "pss_kb",
    "Anonymous": "anon_kb",
    "Swap": "swap_kb",
    "Private_Clean": "uss_kb",
    "Private_Dirty": "uss_kb",
    # pages freed with MADV_FREE: still counted in Rss until the kernel reclaims them
    "LazyFree": "lazyfree_kb",
}


class ProcStat(NamedTuple):
    """One /proc/PID/stat reading (a named tuple: the collector builds thousands a tick)."""

    pid: int
    ppid: int
    comm: str
    start_ticks: int
    utime_s: float
    stime_s: float
    minflt: int
    majflt: int
    threads: int
    pgrp: int = 0
    state: str = ""

    @property
    def identity(self) -> tuple[int, int]:
        return self.pid, self.start_ticks


_open_files: dict[str, int] = {}  # /proc path -> open descriptor, reused across ticks
# pids with a descriptor opened afresh since sample_processes last cleared this: only their readings
# can mix two processes (a descriptor kept open reads only the process it was opened on: ESRCH after)
_opened_pids: set[str] = set()
# at most half the descriptors the process may open: the rest stay free for everything else
MAX_OPEN_FILES = max(32, min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2))


def _read(path: str) -> bytes | None:
    """Read a small /proc file. Descriptors stay open between ticks and are re-read with pread:
    open and close cost more than the kernel's work on these files. A descriptor of a process
    that has exited fails with ESRCH and is dropped (so a reused pid is opened afresh)."""
    fd = _open_files.get(path)
    if fd is not None:
        try:
            data = os.pread(fd, 4096, 0)
            if data:
                return data
        except OSError:
            pass
        os.close(fd)
        del _open_files[path]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        _opened_pids.add(path.split("/", 3)[2])
    except OSError as exc:
        if exc.errno != errno.EMFILE or not _open_files:
            return None
        for victim in list(_open_files)[: len(_open_files) // 2 + 1]:  # out of descriptors: make room
            os.close(_open_files.pop(victim))
        return _read(path)
    try:
        data = os.pread(fd, 4096, 0)
    except OSError:
        os.close(fd)
        return None
    if len(_open_files) >= MAX_OPEN_FILES:  # bounded: drop the oldest
        old_path, old_fd = next(iter(_open_files.items()))
        os.close(old_fd)
        del _open_files[old_path]
    _open_files[path] = fd
    return data or None


def forget(pid: int) -> None:
    """Close the cached descriptors of a process that is gone."""
    for name in ("stat", "statm", "smaps_rollup"):
        fd = _open_files.pop(f"/proc/{pid}/{name}", None)
        if fd is not None:
            os.close(fd)


def read_stat(pid: int) -> ProcStat | None:
    """Parse /proc/PID/stat; None if the process is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    # comm may contain spaces and parentheses: it ends at the last ')'.
    rpar = raw.rfind(b")")
    rest = raw[rpar + 2 :].split()
    return ProcStat(
        pid,
        int(rest[1]),
        raw[raw.find(b"(") + 1 : rpar].decode(errors="replace"),
        int(rest[19]),
        int(rest[11]) / CLK_TCK,
        int(rest[12]) / CLK_TCK,
        int(rest[7]),
        int(rest[9]),
        int(rest[17]),
        int(rest[2]),
        rest[0].decode(),
    )


def uptime() -> float:
    """Seconds since the host booted (/proc/uptime)."""
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def process_age(start_ticks: int) -> float:
    """Seconds since a process started, from its start time in /proc/PID/stat."""
    return uptime() - start_ticks / CLK_TCK


def is_alive(identity: tuple[int, int]) -> bool:
    """Whether the process (pid, start ticks) still runs (not a zombie, pid not reused)."""
    st = read_stat(identity[0])
    return st is not None and st.start_ticks == identity[1] and st.state not in ("Z", "X")


def read_statm(pid: int) -> tuple[int, int] | None:
    """(virtual size, resident) in kB from /proc/PID/statm; None if gone."""
    raw = _read(f"/proc/{pid}/statm")
    if not raw:
        return None
    size, resident = raw.split(None, 2)[:2]
    return int(size) * PAGE_KB, int(resident) * PAGE_KB


def read_smaps_rollup(pid: int) -> dict[str, int] | None:
    """RSS, PSS, USS (private clean + dirty), anonymous, swap and LazyFree in kB; None if gone.
    A kernel without a field (LazyFree is 4.12+) reads it as 0."""
    raw = _read(f"/proc/{pid}/smaps_rollup")
    if not raw:
        return None
    out = dict.fromkeys(set(SMAPS_FIELDS.values()), 0)
    for line in raw.splitlines():
        key, _, rest = line.partition(b":")
        name = SMAPS_FIELDS.get(key.decode())
        if name:
            out[name] += int(rest.split()[0])
    return out


def read_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(a.decode(errors="replace") for a in f.read().split(b"\0") if a)
    except OSError:
        return ""


def all_processes() -> dict[int, ProcStat]:
    """pid -> stat of every process on the host (one pass over /proc)."""
    out: dict[int, ProcStat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st:
                out[st.pid] = st
    return out


def tree(roots: set[tuple[int, int]], procs: dict[int, ProcStat]) -> list[int]:
    """Every live root, matched by (pid, start ticks) so a reused pid is not one of them, and
    every process below it. A child never starts before its parent: a pid whose process started
    earlier than the parent it names was reused while /proc was being read, and is skipped."""
    children: dict[int, list[ProcStat]] = {}
    for st in procs.values():
        children.setdefault(st.ppid, []).append(st)
    todo = [procs[pid] for pid, start in roots if pid in procs and procs[pid].start_ticks == start]
    out: set[int] = set()
    while todo:
        st = todo.pop()
        if st.pid in out:
            continue
        out.add(st.pid)
        todo.extend(c for c in children.get(st.pid, ()) if c.start_ticks >= st.start_ticks)
    return sorted(out)


def environ_marks(pid: int, names: tuple[bytes, ...]) -> dict[bytes, bytes]:
    """The values of some variables in a process's initial environment ({} if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return {}
    out = {}
    for item in env.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key in names:
            out[key] = value
    return out


def read_meminfo() -> dict[str, int]:
    want = {
        "MemTotal": "mem_total_kb",
        "MemAvailable": "mem_available_kb",
        "SwapTotal": "swap_total_kb",
        "SwapFree": "swap_free_kb",
    }
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in want:
                out[want[key]] = int(rest.split()[0])
    return out


# ---- cgroups ------------------------------------------------------------------------------------


def read_small(path: str) -> bytes:
    """A small kernel file read afresh (open, one read, close: no Python file object). For files a
    kept descriptor would not refresh (cgroup v1's cgroup.procs) or that outlive their cgroup."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


class Cgroup:
    """One replica's memory cgroup (v2 or v1 memory controller) under alloclab's own cgroup."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def procs(self) -> list[int]:
        try:
            return sorted({int(x) for x in (self.path / "cgroup.procs").read_text().split()})
        except OSError:
            return []

    def _read_int(self, name: str) -> int | None:
        try:
            return int(read_small(f"{self.path}/{name}").split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def usage_kb(self) -> int | None:
        v = self._read_int("memory.current" if self.version == 2 else "memory.usage_in_bytes")
        return None if v is None else v // 1024

    def peak_kb(self) -> int | None:
        v = self._read_int("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")
        return None if v is None else v // 1024

    def signal_all(self, sig: int) -> None:
        """Send a signal to every member; SIGKILL through cgroup.kill where the kernel has it (v2,
        Linux 5.14+), which also reaches processes forked while the list is read."""
        if sig == signal.SIGKILL and self.version == 2 and (self.path / "cgroup.kill").exists():
            try:
                (self.path / "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        for pid in self.procs():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self, wait: float = 0.0) -> bool:
        """rmdir the cgroup. Run after the sweep, so it should be empty; whatever member is still
        there (one the sweep could not name) is killed through the cgroup first, then the rmdir is
        retried until `wait` runs out (a killed member leaves it a moment later)."""
        deadline = time.monotonic() + wait
        killed = False
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if not killed:
                    self.signal_all(signal.SIGKILL)
                    killed = True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)


def _own_cgroup_dirs() -> list[tuple[Path, int]]:
    """Candidate parent dirs for replica cgroups: v2 unified first, then v1 memory."""
    out: list[tuple[Path, int]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        hid, controllers, rel = line.split(":", 2)
        if hid == "0" and controllers == "":
            for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                base = Path(mount + rel)
                ctl = Path(mount) / "cgroup.controllers"
                if ctl.exists() and "memory" in ctl.read_text().split():
                    out.insert(0, (base, 2))
        elif "memory" in controllers.split(","):
            out.append((Path("/sys/fs/cgroup/memory" + rel), 1))
    return out


def make_cgroup(name: str) -> tuple[Cgroup | None, str]:
    """Create a memory cgroup for one replica; (None, reason) when the kernel will not let us."""
    reasons = []
    for parent, version in _own_cgroup_dirs():
        path = parent / name
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            reasons.append(f"v{version} {parent}: {exc.strerror}")
            continue
        if version == 2 and not (path / "memory.current").exists():
            path.rmdir()
            reasons.append(f"v2 {parent}: memory controller not delegated")
            continue
        return Cgroup(path, version), ""
    return None, "; ".join(reasons) or "no writable memory cgroup hierarchy"


# ---- the tiered sampler -------------------------------------------------------------------------


@dataclass(slots=True)
class ProcReading:
    stat: ProcStat
    vmsize_kb: int
    rss_kb: int
    full: dict[str, int] | None  # smaps_rollup figures, when the full tier ran this time


@dataclass
class SmapsBudget:
    """Lets the full tier spend at most `share` of one core, measured, over the run."""

    share: float
    started: float = field(default_factory=time.monotonic)
    spent: float = 0.0
    grace: float = 0.05  # seconds allowed up front so the first interval gets a full read
    last_full: dict[tuple[int, int], float] = field(default_factory=dict)
    per_tick: float | None = None  # CPU seconds one tick may spend (from begin_tick); None: no cap
    tick_mark: float = 0.0

    def allowed(self) -> bool:
        return self.spent <= self.share * (time.monotonic() - self.started) + self.grace and (
            self.per_tick is None or self.spent - self.tick_mark < self.per_tick
        )

    def begin_tick(self) -> None:
        """A tick starts: with `per_tick`, what slots skipped under load accrued is not spent at once
        (the fleet collector's ticks fell further behind, each catching up on the full tier)."""
        self.tick_mark = self.spent

    def order(self, keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Stalest full reading first, so every process gets its turn."""
        return sorted(keys, key=lambda k: self.last_full.get(k, -1.0))


def full_tier(readings: list[ProcReading], budget: SmapsBudget) -> None:
    """smaps_rollup for the stalest readings first while the budget allows (in place: `full`,
    and `rss_kb` from the same read)."""
    if not budget.allowed():  # nothing to order this tick
        return
    by_key = {r.stat.identity: r for r in readings}
    for key in budget.order(list(by_key)):
        if not budget.allowed():
            break
        t0 = time.thread_time()
        full = read_smaps_rollup(key[0])
        if full is not None and ((now := read_stat(key[0])) is None or now.identity != key):
            full = None  # the pid is another process's now (a fresh open)
        budget.spent += time.thread_time() - t0
        if full is not None:
            by_key[key].full = full
            by_key[key].rss_kb = full["rss_kb"]
            budget.last_full[key] = time.monotonic()
    if len(budget.last_full) > 2 * len(by_key) + 1024:  # processes gone: bounded by those read now
        budget.last_full = {k: t for k, t in budget.last_full.items() if k in by_key}


def sample_replicas(
    members: list[tuple[list[int], dict[int, int] | None]], budget: SmapsBudget | None
) -> list[list[ProcReading]]:
    """sample_processes for each replica's (pids, expected), then one full tier over all of them,
    stalest first: a full tier per replica spent the budget on the replicas sampled first each
    tick, and those sampled last got no full reading for most of a run."""
    out = [sample_processes(pids, None, expected) for pids, expected in members]
    if budget is not None:
        full_tier([r for rs in out for r in rs], budget)
    return out


def sample_processes(
    pids: list[int], budget: SmapsBudget | None, expected: dict[int, int] | None = None
) -> list[ProcReading]:
    """Cheap tier for every pid, full tier in stalest-first order while the budget allows.
    `expected` (pid -> start ticks) names the processes the caller matched; a reading of another
    process under one of those pids is dropped. A reading that opened a /proc file afresh is
    re-checked at the end: a pid reused between two reads would otherwise mix two processes'
    figures (descriptors kept open since an earlier tick read their own process or fail)."""
    _opened_pids.clear()
    readings = []
    for pid in pids:
        st = read_stat(pid)
        if (
            st is None
            or st.state == "Z"
            or (expected is not None and expected.get(pid, st.start_ticks) != st.start_ticks)
        ):
            continue
        statm = read_statm(pid)
        if statm is not None and statm[0] > 0:  # no address space: exiting, its memory already released
            readings.append(ProcReading(st, statm[0], statm[1], None))
    if budget is not None:  # None: the cheap tier only
        full_tier(readings, budget)
    return [
        r
        for r in readings
        if str(r.stat.pid) not in _opened_pids
        or ((again := read_stat(r.stat.pid)) is not None and again.start_ticks == r.stat.start_ticks)
    ]
