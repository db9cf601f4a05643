"""Servers that run beside a run in their own process: the live view (`run --serve`) and the
Prometheus exposition (`run --metrics`).

Why a process and not a thread in alloclab: the runner forks replicas and load clients with a
pre-exec hook, which is unsafe next to other threads (a thread holding a lock at fork time leaves
the child deadlocked before exec), and a busy server thread would hold the GIL between sampling
ticks. So alloclab binds the socket itself (a bad or busy address is refused before the run
directory exists), then hands it to `python -m alloclab.<module> --fd N --db RUN.db --parent PID`,
which serves from its own read-only connection to the store (SQLite WAL: it sees every committed
tick). The server dies with alloclab (PR_SET_PDEATHSIG and a parent check) and its owner stops it
when the run ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..common.errors import UserError

STOP_GRACE_S = 3.0
PR_SET_PDEATHSIG = 1


class Companion:
    """One server process for one run: bound now, started later, stopped with the run."""

    def __init__(self, address: tuple[str, int], what: str, fix: str):
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(address)
            self.sock.listen(16)
        except OSError as exc:
            self.sock.close()
            raise UserError(f"cannot serve {what} on {address[0]}:{address[1]}: {exc.strerror}", fix) from None
        self.host, self.port = self.sock.getsockname()[:2]
        self.popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{'[' + self.host + ']' if ':' in self.host else self.host}:{self.port}/"

    def start(self, module: str, db: Path, log: Path, extra: Sequence[str] = ()) -> subprocess.Popen:
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    module,
                    "--fd",
                    str(self.sock.fileno()),
                    "--db",
                    str(db),
                    "--parent",
                    str(os.getpid()),
                    *extra,
                ],
                pass_fds=(self.sock.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        self.sock.close()  # the server process holds it now
        return self.popen

    def stop(self) -> None:
        self.sock.close()  # never started: just release the port
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


# ---- in the server process ---------------------------------------------------------------------------


def become_companion(parent: int) -> None:
    """End with alloclab (`parent`): the parent-death signal, a watch on the parent as a second line,
    and a quiet exit on SIGTERM / Ctrl-C (which reaches the whole process group)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        sys.exit(0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, daemon=True).start()


def companion_args(description: str):
    """The argument parser every companion's `main` shares."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--fd", type=int, required=True, help="listening socket inherited from alloclab")
    ap.add_argument("--db", type=Path, required=True, help="the run's run.db")
    ap.add_argument("--parent", type=int, required=True, help="alloclab's pid: the server ends with it")
    return ap
