"""Replicas run below alloclab's own CPU priority, so its sampler keeps its share of the CPU when
replicas are CPU-bound (issue 46: 128 busy replicas under half a core left one tick recorded in
226 s, the first after 159 s; the figures were then the replicas' scheduling, not their memory).

A replica is started REPLICA_NICE steps nicer than alloclab (19: the lowest there is, weight 15
against alloclab's 1024, so 96 busy replicas on one CPU still leave alloclab ~40% of it; at nice
10, weight 110, they left it ~9% and the first tick came 10.7 s late, benchmarks/README.md, issue
46). Under no contention nothing changes. Nice alone is not enough: each
replica starts its own session, and with autogroup scheduling (sched_autogroup_enabled) each
session is its own scheduling group whose share ignores its processes' nice values, so the
replica's autogroup is given the same nice too. When the machine is saturated anyway, the
`ticks-skipped` warning says so.
"""

from __future__ import annotations

import os

REPLICA_NICE = 19


def lower_this_process() -> None:
    """In a replica's child between fork and exec (after setsid): no allocation-heavy work."""
    nice = os.nice(REPLICA_NICE)
    try:
        fd = os.open("/proc/self/autogroup", os.O_WRONLY)
    except OSError:  # no autogroup scheduling: nice is what counts
        return
    try:
        os.write(fd, str(nice).encode())
    except OSError:
        pass
    finally:
        os.close(fd)
