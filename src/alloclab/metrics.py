"""Prometheus exposition of what a collector sampled: `/metrics` in the text format, served by the
official client library (prometheus_client).

The collector publishes one `Snapshot` per sampling tick (the very rows it writes to its store)
and swaps it in whole, so every scrape reads one tick: per-unit and per-group figures of one
scrape always agree. Names follow Prometheus conventions (base units, `_bytes`, `_seconds_total`)
and process-exporter's where they overlap (`memory_bytes` with a `memtype` label: `resident`,
`proportionalResident`, `swapped`; `num_procs`; `cpu_seconds_total`). The table is in
docs/fleet.md; `import prometheus` reads these names back.
"""
from __future__ import annotations

import ipaddress
import subprocess
import threading
from dataclasses import dataclass, field

from .companion import Companion, become_companion, companion_args, serve_on_fd
from .errors import UserError

PREFIX = "alloclab_"
# store column -> memtype label value (process-exporter's names where it has the figure)
MEMTYPES = {"rss_kb": "resident", "pss_kb": "proportionalResident", "uss_kb": "unique", "anon_kb": "anonymous",
            "lazyfree_kb": "lazyfree", "swap_kb": "swapped", "cgroup_kb": "cgroup"}
UNIT_LABELS = ("host", "group", "allocator", "version", "unit")
GROUP_LABELS = ("host", "group", "allocator", "version")


@dataclass
class UnitFigures:
    """One unit (fleet) or replica (run) at one tick; kB as stored, None where not measured."""
    unit: str
    group: str
    allocator: str
    version: str
    nprocs: int
    memory_kb: dict[str, int | None]           # store column -> kB
    cpu_s: float | None
    verified: bool | None
    restarts: int


@dataclass
class Snapshot:
    t: float
    host: str
    units: list[UnitFigures] = field(default_factory=list)


class Exposition:
    """The latest snapshot, and a prometheus_client Collector over it."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def describe(self):      # no describe-time metrics: registration must not call collect()
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        snap = self.latest()
        if snap is None:
            return
        unit_mem = GaugeMetricFamily(PREFIX + "unit_memory_bytes", "Memory of a unit's processes (summed), by memtype.",
                                     labels=[*UNIT_LABELS, "memtype"])
        group_mem = GaugeMetricFamily(PREFIX + "group_memory_bytes", "Memory of a group's units on this host (summed), by memtype.",
                                      labels=[*GROUP_LABELS, "memtype"])
        procs = GaugeMetricFamily(PREFIX + "unit_num_procs", "Processes sampled in the unit.", labels=list(UNIT_LABELS))
        cpu = CounterMetricFamily(PREFIX + "unit_cpu_seconds", "CPU time (user + system) of the unit's live processes.",
                                  labels=list(UNIT_LABELS))
        verified = GaugeMetricFamily(PREFIX + "unit_allocator_verified",
                                     "1 when every process maps the group's allocator, 0 when one does not (absent: not yet known).",
                                     labels=list(UNIT_LABELS))
        restarts = CounterMetricFamily(PREFIX + "unit_restarts", "Main-process changes seen by the collector.",
                                       labels=list(UNIT_LABELS))
        units = GaugeMetricFamily(PREFIX + "group_units", "Units of the group sampled on this host.", labels=list(GROUP_LABELS))
        sampled = GaugeMetricFamily(PREFIX + "last_sample_timestamp_seconds", "Unix time of the tick these figures are from.",
                                    labels=["host"])
        sampled.add_metric([snap.host], snap.t)
        sums: dict[tuple, dict[str, int]] = {}
        counts: dict[tuple, int] = {}
        for u in snap.units:
            labels = [snap.host, u.group, u.allocator, u.version, u.unit]
            gkey = tuple(labels[:4])
            counts[gkey] = counts.get(gkey, 0) + 1
            for col, memtype in MEMTYPES.items():
                kb = u.memory_kb.get(col)
                if kb is None:
                    continue
                unit_mem.add_metric([*labels, memtype], kb * 1024)
                sums.setdefault(gkey, {})
                sums[gkey][memtype] = sums[gkey].get(memtype, 0) + kb * 1024
            procs.add_metric(labels, u.nprocs)
            if u.cpu_s is not None:
                cpu.add_metric(labels, u.cpu_s)
            if u.verified is not None:
                verified.add_metric(labels, 1.0 if u.verified else 0.0)
            restarts.add_metric(labels, u.restarts)
        for gkey, by_type in sums.items():
            for memtype, value in by_type.items():
                group_mem.add_metric([*gkey, memtype], value)
        for gkey, n in counts.items():
            units.add_metric(list(gkey), n)
        yield from (unit_mem, group_mem, procs, cpu, verified, restarts, units, sampled)


def parse_listen(addr: str, option: str = "--listen") -> tuple[str, int]:
    """"PORT", ":PORT", "HOST:PORT" or "[V6]:PORT"; a bare port binds to loopback only."""
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
        raise UserError(f"{option} {addr!r} is not an address to serve on",
                        "give PORT (loopback), or HOST:PORT with an IP address, e.g. 127.0.0.1:9464") from None
    return host, number


def serve(exposition: Exposition, addr: str):
    """Serve /metrics on ADDR in a daemon thread; returns (server, bound port). The server stops
    with the process (or server.shutdown())."""
    from prometheus_client import CollectorRegistry, start_http_server
    host, port = parse_listen(addr)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exposition)
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise UserError(f"cannot serve metrics on {host}:{port}: {exc.strerror}", "choose a free port with --listen") from None
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
        if row is None:
            continue
        g = groups[r["group"]]
        snap.units.append(UnitFigures(unit=r["name"], group=r["group"], allocator=g["allocator"] or g["kind"],
                                      version=g["version"] or "", nprocs=row["nprocs"] or 0,
                                      memory_kb={c: row[c] for c in MEMTYPES}, cpu_s=row["cpu_s"],
                                      verified=None if r["verified"] is None else bool(r["verified"]),
                                      restarts=restarts.get(r["id"], 0)))
    return snap


class StoreExposition(Exposition):
    """The exposition of a run in its companion process: each scrape reads the run's last committed
    tick from the store (read-only)."""

    def __init__(self, store, host: str):
        super().__init__()
        self.store, self.host = store, host

    def latest(self) -> Snapshot | None:
        with self._lock:                 # one connection, scrapes served by several threads
            return snapshot_from_store(self.store, self.host)


class MetricsServer(Companion):
    """`alloclab run --metrics ADDR`: the exposition in its own process beside the run
    (companion.py: the runner forks replicas, so no server thread in it). Bound now, started
    once the run's store exists, stopped with the run."""

    def __init__(self, addr: str):
        super().__init__(parse_listen(addr, "--metrics"), "metrics", "choose a free port with --metrics")

    def start(self, db, log, host: str) -> "subprocess.Popen":
        return super().start("alloclab.metrics", db, log, ["--host", host])


def main() -> None:
    """The companion process of `run --metrics` (`python -m alloclab.metrics --fd N --db RUN.db ...`)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import MetricsHandler
    from .store import Store
    ap = companion_args("alloclab's Prometheus exposition of a run (started by `alloclab run --metrics`).")
    ap.add_argument("--host", required=True, help="the host label")
    args = ap.parse_args()
    become_companion(args.parent)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreExposition(Store.open_readonly(args.db), args.host))
    serve_on_fd(args.fd, MetricsHandler.factory(registry))


if __name__ == "__main__":
    main()
