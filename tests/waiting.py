"""Waiting on a condition with a deadline, never a fixed sleep racing a child process: a test goes on
the moment the condition holds (fast on an idle machine) and still passes on a loaded one."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, what: str = "the condition", interval: float = 0.02
) -> T:
    """predicate's first truthy value, polled every `interval` s; AssertionError naming `what` once
    `timeout` s pass without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}, in vain")
        time.sleep(interval)


def maps(pid: int) -> str:
    """The process's /proc/PID/maps ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def wait_until_mapped(pid: int, library: str, timeout: float = 10.0) -> None:
    """Until the process maps a file whose path contains `library` (the dynamic loader has loaded it)."""
    wait_for(lambda: library in maps(pid), timeout, f"process {pid} to map {library}")


def stored_ticks(db: Path) -> int:
    """How many ticks (distinct sample times) a run store another process writes holds; 0 until
    it exists. Read-only: never creates the file a starting writer looks for."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT COUNT(DISTINCT t) FROM samples").fetchone()[0]
    except sqlite3.OperationalError:  # not there yet, or its schema not yet written
        return 0


def wait_for_ticks(db: Path, n: int, timeout: float = 60.0) -> int:
    """Until the run store DB holds at least n ticks (however long a loaded machine's ticks take,
    up to `timeout` s); the count it reached."""
    return wait_for(lambda: (k := stored_ticks(db)) >= n and k, timeout, f"{n} ticks in {db}", interval=0.05)
