"""Replica and load-client logs bounded by the bytes written, so a chatty command cannot fill the disk.

Every stream (RUN/replicas/NAME/stdout.log, stderr.log, load.stdout.log, load.stderr.log) is a
pipe, not the file: one small process beside the run (the pump, `python -m alloclab.process.logcap`)
reads every pipe and appends to the file, and the moment a file holds LOG_CAP_BYTES it is renamed
to NAME.1 (the previous NAME.1 dropped) and a new NAME begun. So per stream the disk holds at most
2 x LOG_CAP_BYTES, however fast the command writes: the bound is on bytes, not on a sampling tick
(issue 46: copy-truncate once per tick let one replica fill 600 MB in under a second). When the
disk is full a chunk is dropped rather than blocking the command.

Why a process: the runner forks replicas with a pre-exec hook, which is unsafe next to other
threads (process/companion.py). The runner creates each pipe and the log file (O_NOFOLLOW: never through
a link), hands both descriptors to the pump over a socket (SCM_RIGHTS), and keeps only the pipe's
write end for the child. The pump ends once the runner closes its socket and every pipe is at
end of file (every writer gone), or with alloclab (parent-death signal). docs/reference/security.md.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

LOG_CAP_BYTES = 8 << 20
CHUNK = 1 << 16
DRAIN_S = 5.0  # the pump's time to write what is still in the pipes at the end
_FILE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class LogPump:
    """The runner's side: `stream(path)` gives a write end for a child's stdout or stderr."""

    def __init__(self, on_start: Callable[[subprocess.Popen], None] = lambda p: None, cap: int = LOG_CAP_BYTES):
        self.on_start, self.cap = on_start, cap
        self.sock: socket.socket | None = None
        self.popen: subprocess.Popen | None = None

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "alloclab.process.logcap",
                    "--fd",
                    str(theirs.fileno()),
                    "--cap",
                    str(self.cap),
                    "--parent",
                    str(os.getpid()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # not the terminal's Ctrl-C: it drains until the run's end
        finally:
            theirs.close()
        self.sock = ours
        self.on_start(self.popen)

    @contextlib.contextmanager
    def stream(self, path: Path) -> Iterator[int]:
        """The write end of a pipe whose bytes land in `path` (capped); closed on leaving (the
        child holds its own copy)."""
        if self.sock is None:
            self._start()
        fd = os.open(path, _FILE_FLAGS, 0o644)
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            socket.send_fds(self.sock, [os.fsencode(path)], [r, fd])
        finally:
            os.close(r)
            os.close(fd)
        try:
            yield w
        finally:
            os.close(w)

    def close(self, timeout: float = DRAIN_S) -> None:
        """No more streams: the pump writes what the pipes still hold, then ends (killed past `timeout`:
        an escaped process that keeps a pipe open does not hold up the run's end)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.popen is not None and self.popen.poll() is None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class CappedFile:
    """One stream's file on the pump's side: appended to, renamed to NAME.1 once it holds `cap` bytes."""

    def __init__(self, path: bytes, fd: int, cap: int):
        self.path, self.fd, self.cap = path, fd, cap
        self.size = os.fstat(fd).st_size

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.size >= self.cap:
                self._rotate()
            n = min(len(view), self.cap - self.size)
            try:
                os.write(self.fd, view[:n])
            except OSError:
                return  # a full disk: this chunk is dropped, the command never blocks on it
            self.size += n
            view = view[n:]

    def _rotate(self) -> None:
        os.replace(self.path, self.path + b".1")  # a rename replaces a link at NAME.1, never follows it
        os.close(self.fd)
        self.fd = os.open(self.path, _FILE_FLAGS | os.O_TRUNC, 0o644)
        self.size = 0

    def close(self) -> None:
        os.close(self.fd)


def pump(control: socket.socket, cap: int) -> None:
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, None)
    open_control = True
    files: dict[int, CappedFile] = {}
    while open_control or files:
        for key, _ in sel.select():
            if key.data is None:
                msg, fds, _flags, _addr = socket.recv_fds(control, 4096, 2)
                if not msg and not fds:
                    sel.unregister(control)
                    open_control = False
                    continue
                r, fd = fds
                files[r] = CappedFile(msg, fd, cap)
                sel.register(r, selectors.EVENT_READ, r)
                continue
            r = key.data
            data = os.read(r, CHUNK)
            if data:
                files[r].write(data)
            else:  # every writer gone
                sel.unregister(r)
                os.close(r)
                files.pop(r).close()


def main() -> None:
    import argparse

    from .companion import become_companion

    ap = argparse.ArgumentParser(description="alloclab's log pump (started by `alloclab run`).")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--cap", type=int, required=True)
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args()
    become_companion(args.parent)
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # two descriptors per stream, four streams a replica
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    pump(socket.socket(fileno=args.fd), args.cap)


if __name__ == "__main__":
    main()
