"""Prometheus exposition of what a collector sampled: `/metrics` in the text format, served by the
official client library (prometheus_client).

The collector publishes one `Snapshot` per sampling tick (the very rows it writes to its store)
and swaps it in whole, so every scrape reads one tick: per-unit and per-group figures of one
scrape always agree. Layout (docs/how-to/fleet.md, "Metrics"): figures are labelled by `host` and `unit`
only, so a unit's series survive a deploy; what the unit runs (group, allocator, version, library
sha256) is one `alloclab_unit_info` series joined by host and unit. A unit without a process is
absent from every figure and `alloclab_unit_up` 0, never 0 bytes. Names follow Prometheus
conventions (base units, `_bytes`, `_seconds_total`) and process-exporter's where they overlap
(`memory_bytes` with a `memtype` label: `resident`, `proportionalResident`, `swapped`;
`num_procs`; `cpu_seconds_total`). The collector adds its own health (tick durations, late ticks,
errors, build info, `process_*`). `import prometheus` reads these names back.
"""

from __future__ import annotations

import ipaddress
import subprocess
import threading
from dataclasses import dataclass, field

from .. import __version__
from ..common.errors import UserError
from ..process.companion import Companion, become_companion, companion_args
from .httpguard import serve_on_fd

PREFIX = "alloclab_"
# store column -> memtype label value (process-exporter's names where it has the figure)
MEMTYPES = {
    "rss_kb": "resident",
    "pss_kb": "proportionalResident",
    "uss_kb": "unique",
    "anon_kb": "anonymous",
    "lazyfree_kb": "lazyfree",
    "swap_kb": "swapped",
    "cgroup_kb": "cgroup",
}
UNIT_LABELS = ("host", "unit")
INFO_LABELS = ("host", "unit", "group", "allocator", "version", "library_sha256", "generation")
GROUP_LABELS = ("host", "group")
# tick durations: from a few ms (a handful of units) to past a 1 s interval (thousands on a busy host)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def allocator_label(group: dict) -> str:
    """The allocator a group runs, as a stable id: the catalog id or name it was asked for, or its
    family (e.g. jemalloc) where it was asked for by file path (the path is in the plan)."""
    request = group.get("allocator") or group.get("kind") or ""
    if "/" in request:
        return group.get("family") or "custom"
    return request


@dataclass
class UnitFigures:
    """One unit (fleet) or replica (run) at one tick; kB as stored, None where not measured."""

    unit: str
    group: str
    allocator: str
    version: str
    nprocs: int
    memory_kb: dict[str, int | None]  # store column -> kB
    cpu_s: float | None
    verified: bool | None
    restarts: int
    up: bool = True
    sha256: str = ""
    start_time: float | None = None  # unix time the unit's main process started
    # the deployed state the unit follows (fleet/deployed.py): which apply or deploy, its number
    # (0: none), when it was applied, and the unit's mean resident memory in the day before it
    generation: str = "none"
    generation_number: int = 0
    generation_time: float | None = None
    pre_deploy_kb: float | None = None


@dataclass
class Snapshot:
    t: float
    host: str
    units: list[UnitFigures] = field(default_factory=list)


class CollectorHealth:
    """The collector's own figures: tick durations, late ticks, errors by kind, build info, and
    the standard process_* of the collector's process."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.durations = Histogram(
            PREFIX + "collector_tick_duration_seconds",
            "Time one collector tick took (reading every unit, storing, publishing).",
            buckets=TICK_BUCKETS,
            registry=None,
        )
        self.ticks_late = Counter(
            PREFIX + "collector_ticks_late",
            "Ticks that started more than 10% of the interval after their slot.",
            registry=None,
        )
        self.errors = Counter(
            PREFIX + "collector_errors", "Errors the collector survived, by kind.", ["kind"], registry=None
        )
        for kind in ("systemd",):
            self.errors.labels(kind)  # present at 0 from the start, so rate() works from the first scrape

    def tick(self, seconds: float) -> None:
        self.durations.observe(seconds)

    def late(self) -> None:
        self.ticks_late.inc()

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def collectors(self) -> list:
        return [self.durations, self.ticks_late, self.errors]


def build_info():
    import platform

    from prometheus_client.core import GaugeMetricFamily

    info = GaugeMetricFamily(
        PREFIX + "collector_build_info", "alloclab's version and Python's, 1.", labels=["version", "python_version"]
    )
    info.add_metric([__version__, platform.python_version()], 1.0)
    return info


class Exposition:
    """The latest snapshot, and a prometheus_client Collector over it."""

    def __init__(self, health: CollectorHealth | None = None) -> None:
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self.health = health

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def describe(self):  # no describe-time metrics: registration must not call collect()
        return []

    def collect(self):
        yield build_info()
        snap = self.latest()
        if snap is not None:
            yield from families(snap)


def families(snap: Snapshot):
    """The metric families of one snapshot (the layout in docs/how-to/fleet.md)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    up = GaugeMetricFamily(
        PREFIX + "unit_up",
        "1 when the unit has a running process this tick, 0 when it has none.",
        labels=list(UNIT_LABELS),
    )
    info = GaugeMetricFamily(
        PREFIX + "unit_info",
        "What the unit runs (group, allocator, version, library sha256) in "
        "the generation it follows, 1; join on host and unit.",
        labels=list(INFO_LABELS),
    )
    generation = GaugeMetricFamily(
        PREFIX + "unit_generation",
        "Number of the apply or deploy the unit follows (1, 2, ... in the order applied; 0: none).",
        labels=list(UNIT_LABELS),
    )
    generation_time = GaugeMetricFamily(
        PREFIX + "unit_generation_timestamp_seconds",
        "Unix time the apply or deploy the unit follows began (absent: none).",
        labels=list(UNIT_LABELS),
    )
    pre_deploy = GaugeMetricFamily(
        PREFIX + "unit_pre_deploy_bytes",
        "The unit's mean memory in the day before the "
        "apply or deploy it follows, from the collector's run (absent: not sampled then).",
        labels=[*UNIT_LABELS, "memtype"],
    )
    unit_mem = GaugeMetricFamily(
        PREFIX + "unit_memory_bytes",
        "Memory of a unit's processes (summed), by memtype; absent when not measured.",
        labels=[*UNIT_LABELS, "memtype"],
    )
    procs = GaugeMetricFamily(PREFIX + "unit_num_procs", "Processes of the unit this tick.", labels=list(UNIT_LABELS))
    cpu = CounterMetricFamily(
        PREFIX + "unit_cpu_seconds", "CPU time (user + system) of the unit's live processes.", labels=list(UNIT_LABELS)
    )
    verified = GaugeMetricFamily(
        PREFIX + "unit_allocator_verified",
        "1 when every process maps the allocator of the generation the unit follows, 0 when one does not "
        "(absent: not yet known).",
        labels=list(UNIT_LABELS),
    )
    restarts = CounterMetricFamily(
        PREFIX + "unit_restarts", "Main-process changes seen by the collector.", labels=list(UNIT_LABELS)
    )
    started = GaugeMetricFamily(
        PREFIX + "unit_process_start_time_seconds",
        "Unix time the unit's main process started.",
        labels=list(UNIT_LABELS),
    )
    group_mem = GaugeMetricFamily(
        PREFIX + "group_memory_bytes",
        "Memory of a group's units on this host (summed over alloclab_group_units of them), by memtype.",
        labels=[*GROUP_LABELS, "memtype"],
    )
    group_units = GaugeMetricFamily(
        PREFIX + "group_units",
        "Units in the group's memory sum of that memtype this tick.",
        labels=[*GROUP_LABELS, "memtype"],
    )
    expected = GaugeMetricFamily(
        PREFIX + "group_units_expected",
        "Units in the group on this host (each as the generation it follows puts it).",
        labels=list(GROUP_LABELS),
    )
    sampled = GaugeMetricFamily(
        PREFIX + "last_sample_timestamp_seconds", "Unix time of the tick these figures are from.", labels=["host"]
    )
    sampled.add_metric([snap.host], snap.t)
    sums: dict[tuple[str, str], list[int]] = {}  # (group, memtype) -> [bytes, units]
    counts: dict[str, int] = {}
    for u in snap.units:
        labels = [snap.host, u.unit]
        counts[u.group] = counts.get(u.group, 0) + 1
        up.add_metric(labels, 1.0 if u.up else 0.0)
        info.add_metric([*labels, u.group, u.allocator, u.version, u.sha256, u.generation], 1.0)
        generation.add_metric(labels, u.generation_number)
        if u.generation_time is not None:
            generation_time.add_metric(labels, u.generation_time)
        if u.pre_deploy_kb is not None:
            pre_deploy.add_metric([*labels, MEMTYPES["rss_kb"]], u.pre_deploy_kb * 1024)
        restarts.add_metric(labels, u.restarts)
        if not u.up:
            continue
        for col, memtype in MEMTYPES.items():
            kb = u.memory_kb.get(col)
            if kb is None:
                continue
            unit_mem.add_metric([*labels, memtype], kb * 1024)
            total = sums.setdefault((u.group, memtype), [0, 0])
            total[0] += kb * 1024
            total[1] += 1
        procs.add_metric(labels, u.nprocs)
        if u.cpu_s is not None:
            cpu.add_metric(labels, u.cpu_s)
        if u.verified is not None:
            verified.add_metric(labels, 1.0 if u.verified else 0.0)
        if u.start_time is not None:
            started.add_metric(labels, u.start_time)
    for (group, memtype), (value, n) in sorted(sums.items()):
        group_mem.add_metric([snap.host, group, memtype], value)
        group_units.add_metric([snap.host, group, memtype], n)
    for group, n in sorted(counts.items()):
        expected.add_metric([snap.host, group], n)
    yield from (
        up,
        info,
        generation,
        generation_time,
        pre_deploy,
        unit_mem,
        procs,
        cpu,
        verified,
        restarts,
        started,
        group_mem,
        group_units,
        expected,
        sampled,
    )


def parse_listen(addr: str, option: str = "--listen") -> tuple[str, int]:
    """ "PORT", ":PORT", "HOST:PORT" or "[V6]:PORT"; a bare port binds to loopback only."""
    text = addr.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError
        if host != "localhost":
            ipaddress.ip_address(host)
    except ValueError:
        raise UserError(
            f"{option} {addr!r} is not an address to serve on",
            "give PORT (loopback), or HOST:PORT with an IP address, e.g. 127.0.0.1:9464",
        ) from None
    return host, number


def registry_for(exposition: Exposition):
    """A registry with the exposition, its collector's health and the standard process_* metrics."""
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(exposition)
    ProcessCollector(registry=registry)
    for c in exposition.health.collectors() if exposition.health else []:
        registry.register(c)
    return registry


def serve(exposition: Exposition, addr: str):
    """Serve /metrics on ADDR in a daemon thread (the guarded server every endpoint shares:
    httpguard); returns (server, bound port). The server stops with the process (or server.shutdown())."""
    from prometheus_client.exposition import MetricsHandler

    from .httpguard import serve_in_thread

    host, port = parse_listen(addr)
    registry = registry_for(exposition)
    try:
        server = serve_in_thread((host, port), MetricsHandler.factory(registry))
    except OSError as exc:
        raise UserError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}", "choose a free port with --listen"
        ) from None
    return server, server.server_address[1]


def snapshot_from_store(store, host: str) -> Snapshot | None:
    """`alloclab run --metrics`: each replica's newest stored sample (the last committed tick; one
    read transaction, so one tick) with its group's allocator and its verification as stored."""
    with store.read_snapshot():
        rows = {r["replica"]: r for r in store.latest_samples()}
        if not rows:
            return None
        groups = {g["name"]: g for g in store.groups()}
        replicas = store.replicas()
        restarts: dict[int, int] = {}
        for e in store.events(kinds=["restart", "process_restart"]):
            if e["replica_id"] is not None:
                restarts[e["replica_id"]] = restarts.get(e["replica_id"], 0) + 1
    snap = Snapshot(t=max(r["t"] for r in rows.values()), host=host)
    for r in replicas:
        row = rows.get(r["name"])
        g = groups[r["group"]]
        up = row is not None and row["t"] >= snap.t and not r["ended_at"]  # sampled in the last tick
        snap.units.append(
            UnitFigures(
                unit=r["name"],
                group=r["group"],
                allocator=allocator_label(g),
                version=g["version"] or "",
                sha256=g["library_sha256"] or "",
                up=up,
                nprocs=row["nprocs"] or 0 if up else 0,
                memory_kb={c: row[c] for c in MEMTYPES} if up else {},
                cpu_s=row["cpu_s"] if up else None,
                verified=None if not up or r["verified"] is None else bool(r["verified"]),
                restarts=restarts.get(r["id"], 0),
            )
        )
    return snap


class StoreExposition(Exposition):
    """The exposition of a run in its companion process: each scrape reads the run's last committed
    tick from the store (read-only)."""

    def __init__(self, store, host: str):
        super().__init__()
        self.store, self.host = store, host

    def latest(self) -> Snapshot | None:
        with self._lock:  # one connection, scrapes served by several threads
            return snapshot_from_store(self.store, self.host)


class MetricsServer(Companion):
    """`alloclab run --metrics ADDR`: the exposition in its own process beside the run
    (process/companion.py: the runner forks replicas, so no server thread in it). Bound now, started
    once the run's store exists, stopped with the run."""

    def __init__(self, addr: str):
        super().__init__(parse_listen(addr, "--metrics"), "metrics", "choose a free port with --metrics")

    def start(self, db, log, host: str) -> subprocess.Popen:
        return super().start("alloclab.serve.metrics", db, log, ["--host", host])


def main() -> None:
    """The companion process of `run --metrics` (`python -m alloclab.serve.metrics --fd N --db RUN.db ...`)."""
    from prometheus_client.exposition import MetricsHandler

    from ..store import Store

    ap = companion_args("alloclab's Prometheus exposition of a run (started by `alloclab run --metrics`).")
    ap.add_argument("--host", required=True, help="the host label")
    args = ap.parse_args()
    become_companion(args.parent)
    registry = registry_for(StoreExposition(Store.open_readonly(args.db), args.host))
    serve_on_fd(args.fd, MetricsHandler.factory(registry))


if __name__ == "__main__":
    main()
