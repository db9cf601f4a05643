"""The fleet collector's cheap tier in native code (native/fleet_reader.c, liballoclab_fleet.so):
one call a tick reads every unit's members' /proc/PID/statm (and, every `membership_every` ticks
or when a member is gone, the unit's cgroup.procs and each member's stat), with descriptors kept
open across ticks, into records whose layout the library itself describes
(native/fleet_record.h, the one definition; checked here against the library's record size).

Why: the same reads in Python cost ~50 us a unit-tick, most of it interpreter work around the
system calls; a 2,000-unit fleet at a 1 s interval has 25 us (5% of a core) for all of it
(benchmarks/fleet_collector.py). Where the library cannot be built (no compiler on the host),
`open_reader` says why and the collector reads in Python (sampler.sample_processes).
"""

from __future__ import annotations

import ctypes
import operator
import struct

from ..capture import sampler
from ..common.errors import UserError
from ..native import build

LIBRARY = "liballoclab_fleet.so"


class NativeReader:
    """Units 0..n-1, each a cgroup.procs file or None (not read here); `read` gives each read
    unit's processes, in the cheap tier (full readings are the caller's: sampler.full_tier)."""

    USED = (
        "unit",
        "pid",
        "ppid",
        "comm",
        "start_ticks",
        "utime_ticks",
        "stime_ticks",
        "minflt",
        "majflt",
        "threads",
        "pgrp",
        "state",
        "vmsize_pages",
        "resident_pages",
    )

    def __init__(self, path: str, max_open: int):
        lib = ctypes.CDLL(path)
        lib.alloclab_fleet_record_layout.restype = ctypes.c_char_p
        lib.alloclab_fleet_record_size.restype = ctypes.c_size_t
        lib.alloclab_fleet_new.restype = ctypes.c_void_p
        lib.alloclab_fleet_new.argtypes = [ctypes.c_size_t]
        lib.alloclab_fleet_free.argtypes = [ctypes.c_void_p]
        lib.alloclab_fleet_units.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.alloclab_fleet_set_unit.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
        lib.alloclab_fleet_membership_every.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.alloclab_fleet_read.restype = ctypes.c_long
        lib.alloclab_fleet_read.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
        lib.alloclab_fleet_records.restype = ctypes.c_void_p
        lib.alloclab_fleet_records.argtypes = [ctypes.c_void_p]
        lib.alloclab_fleet_open_processes.restype = ctypes.c_size_t
        lib.alloclab_fleet_open_processes.argtypes = [ctypes.c_void_p]
        fields = [f.split(":") for f in lib.alloclab_fleet_record_layout().decode().split()]
        self.record = struct.Struct("=" + "".join(code for _, code in fields))
        names = [name for name, _ in fields]
        # the fields `read` uses, in its order, picked from each unpacked tuple (no object a record)
        self.pick = operator.itemgetter(*(names.index(n) for n in self.USED))
        if self.record.size != lib.alloclab_fleet_record_size():
            raise RuntimeError(
                f"{LIBRARY}: record layout {self.record.format!r} is not its {lib.alloclab_fleet_record_size()} bytes"
            )
        self.lib = lib
        self.handle = lib.alloclab_fleet_new(max_open)
        if not self.handle:
            raise MemoryError(LIBRARY)
        self.units = 0
        self.names: dict[bytes, str] = {}

    def set_units(self, n: int) -> None:
        if self.lib.alloclab_fleet_units(self.handle, n) != 0:
            raise MemoryError(LIBRARY)
        self.units = n

    def set_unit(self, unit: int, procs: str | None) -> None:
        if self.lib.alloclab_fleet_set_unit(self.handle, unit, procs.encode() if procs is not None else None) != 0:
            raise MemoryError(LIBRARY)

    def membership_every(self, ticks: int) -> None:
        """Read each unit's cgroup.procs (and its members' stat) every `ticks` reads, and only the
        known members' statm in between; a member gone makes its unit's cgroup.procs read at once
        (native/fleet_reader.c says why and what can go unseen)."""
        self.lib.alloclab_fleet_membership_every(self.handle, ticks)

    def open_processes(self) -> int:
        return self.lib.alloclab_fleet_open_processes(self.handle)

    def read(self, only: list[int] | None = None) -> dict[int, list[sampler.ProcReading]]:
        """unit index -> its processes' cheap readings (units without a record: none readable), of
        every unit or `only` those (a second read in one tick: descriptors are closed only after a
        read of every unit)."""
        chosen = (ctypes.c_int32 * len(only))(*only) if only is not None else None
        n = self.lib.alloclab_fleet_read(self.handle, chosen, len(only) if only is not None else 0)
        if n < 0:
            raise MemoryError(LIBRARY)
        data = ctypes.string_at(self.lib.alloclab_fleet_records(self.handle), n * self.record.size) if n else b""
        out: dict[int, list[sampler.ProcReading]] = {}
        tck, page_kb, stat, reading = sampler.CLK_TCK, sampler.PAGE_KB, sampler.ProcStat, sampler.ProcReading
        names = self.names  # decoded once: a fleet has few distinct names and states
        for (
            unit,
            pid,
            ppid,
            comm_b,
            start,
            utime,
            stime,
            minflt,
            majflt,
            threads,
            pgrp,
            state_b,
            vmsize,
            resident,
        ) in map(self.pick, self.record.iter_unpack(data)):
            comm = names.get(comm_b)
            if comm is None:
                comm = names[comm_b] = comm_b.rstrip(b"\0").decode(errors="replace")
            state = names.get(state_b)
            if state is None:
                state = names[state_b] = state_b.decode(errors="replace")
            rd = reading(
                stat(pid, ppid, comm, start, utime / tck, stime / tck, minflt, majflt, threads, pgrp, state),
                vmsize * page_kb,
                resident * page_kb,
                None,
            )
            got = out.get(unit)
            if got is None:
                out[unit] = [rd]
            else:
                got.append(rd)
        return out

    def close(self) -> None:
        if self.handle:
            self.lib.alloclab_fleet_free(self.handle)
            self.handle = None


def open_reader(max_open: int) -> tuple[NativeReader | None, str]:
    """The native reader, or (None, why not) where it cannot be built or loaded."""
    try:
        return NativeReader(str(build.target(LIBRARY)), max_open), ""
    except (UserError, OSError, RuntimeError) as exc:
        return None, exc.problem if isinstance(exc, UserError) else str(exc)
