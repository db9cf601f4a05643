"""SQLite's share of a sampling tick at fleet scale: the writes `capture.recorder.Recorder.flush` makes
each tick (one `samples` row per unit, `processes_seen` for every process, a host sample, the
commit), timed apart on a real store file, as the store grows.

    python benchmarks/store_tick_cost.py [--units 2000 --ticks 300]

Each unit is one replica with one process (the fleet's common case: a `tor@NAME` unit); rows carry
the cheap tier's figures (RSS, VmSize, CPU, cgroup). Prints one JSON object: per phase, the median
and p90 milliseconds a tick, CPU time of the writing thread and wall time (which waits for the disk
and, on a loaded machine, for a core), over the first and the last 100 ticks (the samples index
grows with the store), and the store's size. Figures in benchmarks/README.md ("SQLite at fleet scale").
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from alloclab.capture.recorder import Recorder
from alloclab.store import DB_NAME, Store

PHASES = ("samples", "processes_seen", "host_sample", "commit")


def build(path: Path, units: int) -> tuple[Store, list[int], list[int]]:
    store = Store.create(path)
    with store.transaction():
        gid = store.add_group(name="glibc", allocator="glibc", is_baseline=1)
        rids = [store.add_replica(group_id=gid, name=f"tor@relay{i}", idx=i) for i in range(units)]
        pids = [
            store.add_process(replica_id=r, pid=10_000 + i, start_ticks=1_000 + i, first_seen=0.0, last_seen=0.0)
            for i, r in enumerate(rids)
        ]
    return store, rids, pids


def tick(
    store: Store, t: float, rids: list[int], pids: list[int], rng: random.Random
) -> dict[str, tuple[float, float]]:
    """One tick's writes; phase -> (CPU ms of this thread, wall ms)."""
    rows = [
        (
            t,
            r,
            "load",
            1,
            200_000 + rng.randrange(50_000),
            None,
            None,
            None,
            None,
            t * 0.01,
            210_000,
            None,
            None,
            None,
            "cheap",
            400_000,
            None,
        )
        for r in rids
    ]
    steps = (
        lambda: store.add_samples(Recorder.SAMPLE_COLUMNS, rows),
        lambda: store.processes_seen(t, pids),
        lambda: store.add_host_sample(
            t=t, mem_total_kb=24 << 20, mem_available_kb=20 << 20, load1=1.0, sampler_cpu_s=t * 0.05
        ),
        store.commit,
    )
    spent = {}
    store.begin()
    for name, step in zip(PHASES, steps):
        c0, w0 = time.thread_time(), time.perf_counter()
        step()
        spent[name] = ((time.thread_time() - c0) * 1000, (time.perf_counter() - w0) * 1000)
    return spent


def summary(ticks: list[dict[str, tuple[float, float]]]) -> dict:
    out = {}
    for name in PHASES + ("all",):
        row = {}
        for k, kind in enumerate(("cpu", "wall")):
            v = sorted(sum(x[k] for x in t.values()) if name == "all" else t[name][k] for t in ticks)
            row[f"{kind}_median_ms"] = round(statistics.median(v), 3)
            row[f"{kind}_p90_ms"] = round(v[int(0.9 * (len(v) - 1))], 3)
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="alloclab-store-tick-") as tmp:
        path = Path(tmp) / DB_NAME
        store, rids, pids = build(path, args.units)
        spent = [tick(store, 1_700_000_000.0 + k, rids, pids, rng) for k in range(args.ticks)]
        store.close()
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
    window = min(100, args.ticks)
    print(
        json.dumps(
            {
                "units": args.units,
                "ticks": args.ticks,
                "rows": args.units * args.ticks,
                "first_ticks": summary(spent[:window]),
                "last_ticks": summary(spent[-window:]),
                "store_mb": round(size / 2**20, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
