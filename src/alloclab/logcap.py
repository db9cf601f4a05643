"""Replica and load-client logs kept to a cap, so a chatty command cannot fill the disk.

Every stream (RUN/replicas/NAME/stdout.log, stderr.log, load.stdout.log, load.stderr.log) is
opened by the runner with O_APPEND. At every sampling tick a log over LOG_CAP_BYTES is rotated the
way logrotate's `copytruncate` does it: its newest 8 MiB are copied to NAME.1 (the previous NAME.1
and anything older are dropped) and the file is truncated; the child's next O_APPEND write lands
at the new end, so no process needs to reopen anything (what it writes between the copy and the
truncation is lost, as with logrotate). Per stream the disk holds NAME.1 (at most
8 MiB) and NAME (8 MiB plus what the command writes within one interval) (docs/security.md).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

LOG_CAP_BYTES = 8 << 20
STREAMS = ("stdout.log", "stderr.log", "load.stdout.log", "load.stderr.log")


def rotate_over_cap(paths: Iterable[Path], cap: int = LOG_CAP_BYTES) -> list[Path]:
    """Rotate every log in `paths` that is over `cap`; returns those rotated."""
    rotated = []
    for path in paths:
        try:
            size = os.stat(path).st_size
            if size <= cap:
                continue
            older = path.with_name(path.name + ".1")
            tmp = path.with_name(f".{path.name}.1.tmp")
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                src.seek(size - cap)             # the newest `cap` bytes as of now; older output is dropped
                left = cap
                while left and (chunk := src.read(min(left, 1 << 20))):
                    dst.write(chunk)
                    left -= len(chunk)
            os.replace(tmp, older)
            os.truncate(path, 0)
            rotated.append(path)
        except FileNotFoundError:
            continue
    return rotated
