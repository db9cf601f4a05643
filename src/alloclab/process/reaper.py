"""Nothing a run starts outlives it, however alloclab ends.

Three layers, each covering what the one before cannot:
- alloclab is a child subreaper (PR_SET_CHILD_SUBREAPER): a replica's double-forked background
  child reparents to alloclab instead of init, so it stays inside the tree alloclab walks;
- at the end of a run, `sweep` finds every process of the run (alloclab's descendants, the
  replicas' cgroup members, processes carrying the run's token in their environment, identities
  seen while sampling), SIGTERMs them, waits the grace period, SIGKILLs what is left, and repeats
  until none remain;
- `kill -9` of alloclab leaves no chance to do that in-process, so a watchdog (alloclab.process.watchdog,
  its own session) waits on a pipe only alloclab holds; end of file without a "done" line means
  alloclab died, and the watchdog does the sweep, removes the cgroups and marks the run cut short.

Processes are signalled through a pidfd opened after their start time was checked, so a pid
reused since it was found is never signalled.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..capture import sampler
from ..common import settings

PR_SET_CHILD_SUBREAPER = 36
TOKEN_VAR = "ALLOCLAB_RUN_TOKEN"  # set in every replica's (and load client's) environment
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def dies_with(parent: int, sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` the moment `parent` (alloclab) dies, however it dies
    (SIGKILL included), and exits at once if the parent died before the prctl took hold."""

    def setup() -> None:  # between fork and exec: no allocation-heavy work
        _libc.prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:
            os._exit(1)

    return setup


def become_subreaper() -> bool:
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children(pid: int) -> list[int]:
    """Direct children of a process (all its threads')."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def reap_adopted(keep: set[int]) -> None:
    """Collect the exit status of orphans adopted as subreaper (they would stay zombies);
    `keep` are children whose status their owner collects (subprocess.Popen, the watchdog)."""
    for pid in children(os.getpid()):
        if pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def signal_identity(identity: tuple[int, int], sig: int) -> bool:
    """Signal the process (pid, start ticks) if it still is that process."""
    try:
        fd = os.pidfd_open(identity[0])
    except OSError:
        return False
    try:
        st = sampler.read_stat(identity[0])  # checked after the pidfd pinned the process
        if st is None or st.start_ticks != identity[1]:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class RunProcesses:
    """Finds the live processes of one run. `under`: a live ancestor whose descendants all belong
    to the run (alloclab itself); `exclude`: pids never counted (the watchdog, alloclab)."""

    def __init__(
        self, token: str, cgroups: Iterable[sampler.Cgroup] = (), under: int | None = None, exclude: Iterable[int] = ()
    ):
        self.token = token.encode()
        self.cgroups = list(cgroups)
        self.under = under
        self.exclude = set(exclude)
        self.identities: set[tuple[int, int]] = set()  # seen while sampling
        self._replica_of: dict[tuple[int, int], str | None] = {}  # environment read once per process

    def replica_of(self, st: sampler.ProcStat) -> str | None:
        """The ALLOCLAB_REPLICA of a process carrying this run's token ("" if it names none); None
        for any other process. A process's initial environment never changes: read it once."""
        if st.identity not in self._replica_of:
            marks = sampler.environ_marks(st.pid, (TOKEN_VAR.encode(), b"ALLOCLAB_REPLICA"))
            mine = marks.get(TOKEN_VAR.encode()) == self.token
            self._replica_of[st.identity] = marks.get(b"ALLOCLAB_REPLICA", b"").decode() if mine else None
        return self._replica_of[st.identity]

    def find(self) -> set[tuple[int, int]]:
        procs = sampler.all_processes()
        pids: set[int] = set()
        if self.under is not None and self.under in procs:
            pids.update(sampler.tree({procs[self.under].identity}, procs))
            pids.discard(self.under)
        for cg in self.cgroups:
            pids.update(cg.procs())
        pids.update(pid for pid, start in self.identities if pid in procs and procs[pid].start_ticks == start)
        for pid in procs.keys() - pids - self.exclude:
            if self.replica_of(procs[pid]) is not None:
                pids.add(pid)
        return {procs[p].identity for p in pids - self.exclude if p in procs and procs[p].state not in ("Z", "X")}


@dataclass
class SweepResult:
    sigterm: int = 0  # processes sent SIGTERM
    killed: set[tuple[int, int]] = field(default_factory=set)  # still there after the grace period
    left: set[tuple[int, int]] = field(default_factory=set)  # still there when it gave up

    def describe(self) -> str:
        return f"{self.sigterm} sent SIGTERM, {len(self.killed)} needed SIGKILL, {len(self.left)} left"


def sweep(
    find: Callable[[], set[tuple[int, int]]],
    grace: float,
    kill_timeout: float = 10.0,
    on_poll: Callable[[], None] | None = None,
) -> SweepResult:
    """SIGTERM every process `find` returns, wait up to `grace` for them to go, then SIGKILL
    until none is left (processes forked meanwhile are found on the next pass). `on_poll` runs
    while waiting (e.g. to reap exited children). `left` is empty unless a process is stuck in
    the kernel for `kill_timeout` seconds."""
    out = SweepResult()
    for ident in find():
        out.sigterm += signal_identity(ident, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = find()
    while left and time.monotonic() < deadline:
        if on_poll:
            on_poll()
        time.sleep(0.05)
        left = find()
    deadline = time.monotonic() + kill_timeout
    while left and time.monotonic() < deadline:
        for ident in left:
            if signal_identity(ident, signal.SIGKILL):
                out.killed.add(ident)
        if on_poll:
            on_poll()
        time.sleep(0.02)
        left = find()
    out.left = left
    return out


class WatchdogLink:
    """alloclab's end of the pipe to its watchdog. Lines: `token T`, `db PATH`, `grace S`,
    `cgroup VERSION PATH`, `proc PID START`, `done`."""

    def __init__(self, run_dir: Path, token: str, db: Path, grace: float):
        read_end, self.fd = os.pipe()  # both non-inheritable: replicas never hold the pipe
        self.log_path = run_dir / "watchdog.log"
        log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "alloclab.process.watchdog", str(read_end)],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": _pythonpath()},
            )
        finally:
            os.close(read_end)
            log.close()
        self.lost = False
        self.send(f"token {token}", f"db {db}", f"grace {grace}", f"parent {os.getpid()}")

    def send(self, *lines: str) -> None:
        if self.lost:
            return
        try:
            os.write(self.fd, "".join(line + "\n" for line in lines).encode())
        except OSError:  # the watchdog is gone (killed by someone): run on without it
            self.lost = True

    def register_cgroup(self, cg: sampler.Cgroup) -> None:
        self.send(f"cgroup {cg.version} {cg.path}")

    def register_processes(self, identities: Iterable[tuple[int, int]]) -> None:
        lines = [f"proc {pid} {start}" for pid, start in identities]
        if lines:
            self.send(*lines)

    def close(self, timeout: float = 5.0) -> None:
        """The run cleaned up itself: tell the watchdog, and wait for it to exit."""
        self.send("done")
        os.close(self.fd)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        if self.log_path.exists() and self.log_path.stat().st_size == 0:
            self.log_path.unlink()  # the log exists only when the watchdog had work to do


def _pythonpath() -> str:
    """The watchdog imports this very alloclab, wherever it was imported from."""
    src = str(Path(__file__).resolve().parents[2])
    rest = settings.python_path()
    return src + (os.pathsep + rest if rest else "")
