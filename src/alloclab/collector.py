"""The fleet collector (`alloclab fleet collect`): samples a plan's systemd units into a run store,
resumable, and optionally publishes every tick for Prometheus (metrics.py). Units are reached
through fleet's `Units` seam."""
from __future__ import annotations

import json
import signal
import socket
import sys
import time
from pathlib import Path

from . import allocators, metrics, sampler, unitfile
from .config import parse_duration
from .errors import UserError
from .fleet import Plan, Units, _dev_inode
from .host import host_metadata
from .recorder import Recorder, Tracked
from .store import DB_NAME, Store


def install_collector(units: Units, plan: Path, run: Path, interval: str) -> Path:
    """A systemd unit that runs the collector (it resumes the same run after restarts). The
    interval is parsed and written back in seconds; paths are absolute and quoted."""
    seconds = parse_duration(interval, "--interval")
    argv = [sys.executable, "-m", "alloclab", "fleet", "collect", "--plan", str(plan.resolve()), "-o", str(run.resolve()),
            "--interval", f"{seconds:g}s", "--root", str(units.root.resolve())]
    unit = units.root / "etc" / "systemd" / "system" / "alloclab-collector.service"
    text = ("[Unit]\nDescription=alloclab fleet collector\nAfter=network.target\n\n[Service]\n"
            + unitfile.exec_line("ExecStart", argv, "collector command")
            + "\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n")
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(text)
    units.daemon_reload()
    return unit


def collect(units: Units, plan: Plan, run: Path, interval: float, duration: float | None, say=print,
            smaps_budget: float = 0.02, verify_every: float = 300.0, exposition: "metrics.Exposition | None" = None,
            host: str | None = None) -> dict:
    """Sample every unit of the plan into RUN until stopped (or for `duration` seconds). A run that
    exists is resumed: same groups and replicas, a `collector_resumed` event marks the gap. With an
    `exposition`, every tick's rows are also published for Prometheus (metrics.py), labelled `host`
    (default: this machine's name, also stored with each replica)."""
    groups = {g["name"]: g for g in plan.data["groups"]}
    host = host or socket.gethostname()
    resumed = (run / DB_NAME).exists()
    if resumed:
        store = Store.open(run)
        if store.meta().get("source") != "fleet":
            raise UserError(f"{run} is not a fleet run", "give a new directory or the collector's own run")
    else:
        run.mkdir(parents=True, exist_ok=True)
        store = Store.create(run / DB_NAME)
    store.begin()
    last = store.last_sample_time()
    if resumed:
        store.event(time.time(), "collector_resumed", f"collector restarted; no samples for {time.time() - (last or time.time()):.0f} s")
    else:
        store.set_meta(name=plan.data["name"], source="fleet", metric="rss", interval=interval, seed=plan.data["seed"],
                       baseline=plan.data["groups"][0]["name"], experiment=plan.data["experiment"], plan=str(plan.path),
                       started_at=time.time(), **{**host_metadata(), "host": host})
        for g in plan.data["groups"]:
            store.insert("groups", name=g["name"], allocator=g["allocator"], kind=g["kind"], library_path=g["library"],
                         library_sha256=g["sha256"], family=g["family"], version=g["version"], env_json=json.dumps(g["env"]),
                         command_json="[]", is_baseline=int(g["name"] == plan.data["groups"][0]["name"]))
        gid = {r["name"]: r["id"] for r in store.groups()}
        for i, a in enumerate(plan.assignments):
            store.insert("replicas", group_id=gid[a["group"]], idx=i, name=a["unit"], start_order=i, started_at=time.time(),
                         host=host)
    store.commit()
    recorder = Recorder(store, verify_every, "rss")
    tracked = {}
    for row in store.replicas():
        g = groups[row["group"]]
        spec = allocators.AllocatorSpec(kind=g["kind"], request=g["allocator"], path=g["library"], sha256=g["sha256"],
                                        family=g["family"], version=g["version"], **_dev_inode(g["library"]))
        tracked[row["name"]] = Tracked(id=row["id"], name=row["name"], group_name=row["group"], spec=spec)
    # each unit's main process identity, kept in the store so a resumed collector sees restarts
    mains = {u: tuple(v) for u, v in json.loads(store.meta().get("fleet_main_processes", "{}")).items()}
    restarts = {unit: 0 for unit in tracked}
    for e in store.events(kinds=["process_restart"]):
        unit = e["description"].split(":")[0]
        if unit in restarts:
            restarts[unit] += 1
    budget = sampler.SmapsBudget(smaps_budget)
    stop = {"now": False}
    previous = signal.signal(signal.SIGTERM, lambda *a: stop.update(now=True))
    started, ticks = time.monotonic(), 0
    try:
        while not stop["now"] and (duration is None or time.monotonic() - started < duration):
            now = time.time()
            if last is not None and now <= last:       # never two samples at one time, even across restarts
                time.sleep(0.01)
                continue
            store.begin()
            for unit, t in tracked.items():
                pid = units.main_pid(unit)
                st = sampler.read_stat(pid) if pid else None
                ident = (pid, st.start_ticks) if st else None
                if ident and mains.get(unit) and mains[unit] != ident:
                    store.event(now, "process_restart", f"{unit}: main process {mains[unit][0]} -> {pid}", t.id, t.group_name)
                    restarts[unit] += 1
                if ident:
                    mains[unit] = ident
                readings = sampler.sample_processes(units.pids(unit), budget)
                recorder.observe(t, readings, now, "load", cgroup=units.memory_cgroup(unit) if ident else None)
            if exposition is not None:
                exposition.publish(_snapshot(now, host, tracked, groups, recorder.replica_rows, restarts))
            recorder.flush(now)
            store.set_meta(fleet_main_processes=mains)
            store.commit()
            last = now
            ticks += 1
            time.sleep(max(0.0, interval - (time.time() - now)))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        store.set_meta(ended_at=time.time(), end_reason="collector stopped")
        store.close()
    say(f"collected {ticks} rounds of {len(tracked)} units into {run}")
    return {"ticks": ticks, "resumed": resumed}


def _snapshot(now: float, host: str, tracked: dict, groups: dict, rows: list[tuple], restarts: dict[str, int]) -> "metrics.Snapshot":
    """This tick's replica rows (exactly what goes to the store) as one exposition snapshot."""
    cols = Recorder.SAMPLE_COLUMNS
    by_id = {row[cols.index("replica_id")]: row for row in rows}
    snap = metrics.Snapshot(t=now, host=host)
    for unit, t in tracked.items():
        row = by_id.get(t.id)
        if row is None:
            continue
        g = groups[t.group_name]
        snap.units.append(metrics.UnitFigures(
            unit=unit, group=t.group_name, allocator=g["allocator"], version=g["version"] or "",
            nprocs=row[cols.index("nprocs")], memory_kb={c: row[cols.index(c)] for c in metrics.MEMTYPES},
            cpu_s=row[cols.index("cpu_s")], verified=t.state, restarts=restarts[unit]))
    return snap
