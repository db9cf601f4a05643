"""The per-tick store writer: what one sampling tick saw, written to a run's store.

Used by the runner (replicas), `run --resume` (survivors) and the fleet collector (services).
A process is known by (pid, start ticks); it is verified (its maps read) when first seen and every
`verify_every` seconds after, and a verdict read while its pid was reused is thrown away.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from ..allocators import library
from ..allocators.library import AllocatorSpec
from ..store import Store
from . import sampler

VERIFY_MIN_AGE = 0.2  # seconds: a younger process may not have exec'd / mapped its preload yet
# a process's first verdict that is not "verified" is taken only once it is this old: before, it
# is read again at the next tick (replicas run below alloclab's priority, priority.py, so on a busy
# machine the dynamic loader may still be mapping libraries well after VERIFY_MIN_AGE)
VERIFY_SETTLE_S = 2.0


@dataclass(kw_only=True)
class Tracked:
    """What the recorder keeps per sampled unit (a replica, or a fleet's service)."""

    id: int
    name: str
    group_name: str
    spec: AllocatorSpec
    processes: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, start) -> process row id
    verified_at: dict[tuple[int, int], float] = field(default_factory=dict)
    verdicts: dict[tuple[int, int], bool | None] = field(default_factory=dict)
    details: dict[tuple[int, int], str] = field(default_factory=dict)
    embedded: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)  # families a process carries itself
    state: bool | None = None  # verified? (None: not yet known)
    last_metric_kb: int | None = None
    current: set[tuple[int, int]] = field(default_factory=set)  # processes seen last tick


class Recorder:
    """Stores what one sampling tick saw: new processes, their verification (with history, so a
    changed allocator is seen), a row per process and a row per replica. Used by the runner and by
    the fleet collector."""

    SAMPLE_COLUMNS = (
        "t",
        "replica_id",
        "phase",
        "nprocs",
        "rss_kb",
        "pss_kb",
        "uss_kb",
        "anon_kb",
        "swap_kb",
        "cpu_s",
        "cgroup_kb",
        "cgroup_peak_kb",
        "live_bytes",
        "ops",
        "tier",
        "vmsize_kb",
        "lazyfree_kb",
    )
    METRIC_INDEX = {c[:-3]: i for i, c in enumerate(SAMPLE_COLUMNS) if c.endswith("_kb")}
    PROCESS_COLUMNS = (
        "t",
        "process_id",
        "tier",
        "rss_kb",
        "pss_kb",
        "uss_kb",
        "anon_kb",
        "swap_kb",
        "cpu_user_s",
        "cpu_sys_s",
        "minflt",
        "majflt",
        "threads",
        "lazyfree_kb",
    )

    def __init__(self, store: Store, verify_every: float, metric: str, single_process_rows: bool = True):
        """`single_process_rows=False` (the fleet collector): a unit with one process gets a
        per-process row only on the tick it is first seen and when its full tier ran; its cheap
        figures are the unit's own row (issue 25: 2,000 units a second)."""
        self.store, self.verify_every, self.metric = store, verify_every, metric
        self.single_process_rows = single_process_rows
        self.proc_rows: list[tuple] = []
        self.replica_rows: list[tuple] = []
        self.seen: list[int] = []  # processes rows sampled this tick (last_seen, at flush)

    def verify(self, r: Tracked, key: tuple[int, int], proc_id: int, now: float) -> None:
        try:
            verdict = library.verify_process(key[0], r.spec)
        except OSError:
            return
        if not sampler.is_alive(key):  # the pid was reused while its maps were read
            return
        if verdict.verified is not True and key not in r.verdicts and sampler.process_age(key[1]) < VERIFY_SETTLE_S:
            return  # maybe still loading: read again next tick
        previous = r.verdicts.get(key, "unset")
        r.verdicts[key] = verdict.verified
        r.details[key] = verdict.detail
        r.embedded[key] = verdict.embedded if verdict.state == "embedded" else ()
        r.verified_at[key] = now
        if previous != verdict.verified:
            self.store.add_verification(
                t=now,
                process_id=proc_id,
                verified=verdict.verified,
                detail=verdict.detail,
                mapped_allocator=verdict.mapped_allocator,
            )
            self.store.update_process(
                proc_id,
                verified=verdict.verified,
                verify_detail=verdict.detail,
                mapped_allocator=verdict.mapped_allocator,
            )
            if previous is True and verdict.verified is not True:
                self.store.add_event(now, "allocator_changed", f"pid {key[0]}: {verdict.detail}", r.id, r.group_name)
        states = list(r.verdicts.values())
        state = False if False in states else (None if None in states else True)
        if state != r.state:
            r.state = state
            detail = "; ".join(sorted({r.details[k] for k, v in r.verdicts.items() if v is state}))
            # stored as data beside the words, so the analysis never parses verify_detail
            carried = sorted({f for k, v in r.verdicts.items() if v is state for f in r.embedded.get(k, ())})
            self.store.update_replica(r.id, verified=state, verify_detail=detail, embedded_json=json.dumps(carried))
            if state is False:
                self.store.add_event(now, "unverified", f"{r.name}: {detail}", r.id, r.group_name)

    def process_id(self, r: Tracked, rd: sampler.ProcReading, now: float) -> int:
        key = (rd.stat.pid, rd.stat.start_ticks)
        proc_id = r.processes.get(key)
        if proc_id is None:
            proc_id = self.store.process_row(*key) or self.store.add_process(
                replica_id=r.id,
                pid=key[0],
                start_ticks=key[1],
                ppid=rd.stat.ppid,
                comm=rd.stat.comm,
                cmdline=sampler.read_cmdline(key[0]),
                first_seen=now,
                last_seen=now,
            )
            r.processes[key] = proc_id
        return proc_id

    def observe(
        self,
        r: Tracked,
        readings: list[sampler.ProcReading],
        now: float,
        phase: str,
        cgroup: sampler.Cgroup | None = None,
        stats=None,
    ) -> None:
        seen = {rd.stat.identity for rd in readings}
        if seen != r.current:
            for pid, _ in r.current - seen:  # gone since last tick: close its cached /proc files
                sampler.forget(pid)
            r.current = seen
        rows_for_all = self.single_process_rows or len(readings) > 1
        for rd in readings:
            st = rd.stat
            key = st.identity
            proc_id = r.processes.get(key)
            new = proc_id is None
            if new:
                proc_id = self.process_id(r, rd, now)
            if (
                now - r.verified_at.get(key, -1e18) >= self.verify_every
                and sampler.process_age(st.start_ticks) >= VERIFY_MIN_AGE
            ):
                self.verify(r, key, proc_id, now)
            f = rd.full
            if rows_for_all or new or f:
                f = f or {}
                self.proc_rows.append(
                    (
                        now,
                        proc_id,
                        "full" if rd.full else "cheap",
                        rd.rss_kb,
                        f.get("pss_kb"),
                        f.get("uss_kb"),
                        f.get("anon_kb"),
                        f.get("swap_kb"),
                        st.utime_s,
                        st.stime_s,
                        st.minflt,
                        st.majflt,
                        st.threads,
                        f.get("lazyfree_kb"),
                    )
                )
            self.seen.append(proc_id)
        cg_usage, cg_peak = (cgroup.usage_kb(), cgroup.peak_kb()) if cgroup else (None, None)
        if len(readings) == 1 and not readings[0].full and stats is None:  # the fleet's common case, kept short
            rd = readings[0]
            row = (
                now,
                r.id,
                phase,
                1,
                rd.rss_kb,
                None,
                None,
                None,
                None,
                rd.stat.utime_s + rd.stat.stime_s,
                cg_usage,
                cg_peak,
                None,
                None,
                "cheap",
                rd.vmsize_kb,
                None,
            )
        else:
            full = bool(readings) and all(rd.full for rd in readings)
            total = lambda k: sum(rd.full[k] for rd in readings) if full else None
            row = (
                now,
                r.id,
                phase,
                len(readings),
                sum(rd.rss_kb for rd in readings),
                total("pss_kb"),
                total("uss_kb"),
                total("anon_kb"),
                total("swap_kb"),
                sum(rd.stat.utime_s + rd.stat.stime_s for rd in readings),
                cg_usage,
                cg_peak,
                stats.live_bytes if stats else None,
                stats.ops if stats else None,
                "full" if full else "cheap",
                sum(rd.vmsize_kb for rd in readings),
                total("lazyfree_kb"),
            )
        self.replica_rows.append(row)
        value = row[self.METRIC_INDEX[self.metric]]
        r.last_metric_kb = value if value is not None else r.last_metric_kb

    def flush(self, now: float) -> None:
        self.store.add_process_samples(self.PROCESS_COLUMNS, self.proc_rows)
        self.store.add_samples(self.SAMPLE_COLUMNS, self.replica_rows)
        self.store.processes_seen(now, self.seen)
        self.proc_rows, self.replica_rows, self.seen = [], [], []
        mem = sampler.read_meminfo()
        self.store.add_host_sample(t=now, load1=os.getloadavg()[0], sampler_cpu_s=time.process_time(), **mem)
