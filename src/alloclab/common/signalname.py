"""A signal number, and how a process ended, as people read them, for the runner's live notices
and the analysis's warnings alike (a low-level module: the runner must not import analysis, data
flows the other way)."""

from __future__ import annotations

import signal


def signal_name(sig: int) -> str:
    """SIGSEGV for 11; "signal 42" for a number with no name here (a real-time signal)."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def how_ended(exit_code: int | None) -> str:
    """How a process ended, in words: "killed by SIGSEGV" for -11 (a negative code is the signal,
    as subprocess and the store keep it), "exit code 3" for 3, "exit code unknown" for None."""
    if exit_code is None:
        return "exit code unknown"
    return f"killed by {signal_name(-exit_code)}" if exit_code < 0 else f"exit code {exit_code}"
