"""A signal number as people read it, for the runner's live notices and the analysis's warnings
alike (a low-level module: the runner must not import analysis, data flows the other way)."""
from __future__ import annotations

import signal


def signal_name(sig: int) -> str:
    """SIGSEGV for 11; "signal 42" for a number with no name here (a real-time signal)."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
