"""What a run records about the machine it ran on (kept in the store's meta table)."""

from __future__ import annotations

import os
import platform
import socket

from .. import __version__
from . import sampler


def host_metadata() -> dict:
    """Host, kernel, OS, glibc, CPU, memory and the versions of alloclab and Python."""
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
        "cpu": cpu,
        "ncpu": os.cpu_count(),
        "mem_total_kb": sampler.read_meminfo().get("mem_total_kb"),
        "alloclab_version": __version__,
        "python": platform.python_version(),
    }
