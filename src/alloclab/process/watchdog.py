"""The watchdog of one run: `python -m alloclab.process.watchdog FD` (started by alloclab, never by hand).

It reads registrations from the pipe FD (see reaper.WatchdogLink) until end of file. A `done`
line means alloclab cleaned up itself: the watchdog exits. End of file without `done` means
alloclab died (kill -9, OOM killer): the watchdog ends every process of the run (reaper.sweep),
removes the run's cgroups, marks the run cut short in its store (end_reason 'killed', event
'cut_short'), and exits. It runs in its own session, so signals to alloclab's terminal or
process group do not reach it, and it keeps nothing open but the pipe and its log.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from ..capture import sampler
from . import reaper


def _read_registrations(fd: int) -> tuple[dict, bool]:
    state: dict = {"token": "", "db": None, "grace": 5.0, "parent": None, "cgroups": {}, "procs": set()}
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return state, False
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            word, _, rest = raw.decode(errors="replace").partition(" ")
            if word == "done":
                return state, True
            if word == "token":
                state["token"] = rest
            elif word == "db":
                state["db"] = Path(rest)
            elif word == "grace":
                state["grace"] = float(rest)
            elif word == "parent":
                state["parent"] = int(rest)
            elif word == "cgroup":
                version, _, path = rest.partition(" ")
                state["cgroups"][path] = sampler.Cgroup(Path(path), int(version))
            elif word == "proc":
                pid, start = rest.split()
                state["procs"].add((int(pid), int(start)))


def _mark_cut_short(db: Path, parent: int | None, swept: reaper.SweepResult, leaked: int) -> None:
    from ..store import Store

    store = Store.open(db)
    try:
        detail = (
            f"alloclab (pid {parent}) died without ending the run; the watchdog ended what it left "
            f"({swept.describe()}; {leaked} cgroups could not be removed)"
        )
        store.mark_cut_short("killed", time.time(), detail)
    finally:
        store.close()


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)
    state, done = _read_registrations(int(argv[0]))
    if done or not state["token"]:
        return 0
    found = reaper.RunProcesses(state["token"], state["cgroups"].values(), exclude={os.getpid()})
    found.identities = state["procs"]
    swept = reaper.sweep(found.find, min(state["grace"], 5.0))
    leaked = sum(not cg.remove(wait=5.0) for cg in state["cgroups"].values())
    print(
        f"{time.strftime('%Y-%m-%dT%H:%M:%S')} alloclab pid {state['parent']} died: {swept.describe()}, "
        f"{leaked} cgroups left",
        flush=True,
    )
    if state["db"] is not None and state["db"].exists():
        try:
            _mark_cut_short(state["db"], state["parent"], swept, leaked)
        except Exception as exc:  # the store is the run's; a failure here must not hide the sweep
            print(f"could not mark the run cut short: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
