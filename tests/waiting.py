"""Waiting on a condition with a deadline, never a fixed sleep racing a child process: a test goes on
the moment the condition holds (fast on an idle machine) and still passes on a loaded one."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "the condition",
             interval: float = 0.02) -> T:
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
