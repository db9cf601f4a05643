"""Analysis at scale: `alloclab import torutils` and `alloclab report` on a multi-day fleet.

    python benchmarks/analysis_scale.py [--relays 200 --days 9 --interval 15 --repeat 3] [--keep DIR]
    python benchmarks/analysis_scale.py --analyse-only --relays 20 --days 9 --repeat 5   # analyse() CPU alone

Generates a TorUtils co-unified experiment (experiment.json and memory_measurements.csv: one
`relay` row per relay per sampling time plus the `aggregate` row, 200 relays x 9 days at 15 s =
10.4 million samples) whose relays grow, restart and level off like Tor relays do: five groups
(glibc control, jemalloc, mimalloc, tcmalloc, and a restart group), an AR(1) noise around a
saturating growth that differs per allocator, a daily restart in the restart group. Then times, as
separate processes, `alloclab import torutils` and `alloclab report` on the imported run: wall
seconds and peak RSS (wait4's ru_maxrss), medians of --repeat. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

GROUPS = {
    "Z": ("control", {"allocator": "glibc"}, 1.00),
    "A": ("jemalloc 5.3.0", {"allocator": "jemalloc", "version": "5.3.0"}, 0.80),
    "B": ("mimalloc 2.1.2", {"allocator": "mimalloc", "version": "2.1.2"}, 0.85),
    "C": ("tcmalloc 2.15", {"allocator": "tcmalloc", "version": "2.15"}, 0.92),
    "F": ("restart-24h", {"restart_interval": "24h"}, 1.00),
}


def generate(out: Path, relays: int, days: float, interval: float, seed: int = 1) -> int:
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(
        json.dumps(
            {
                "id": "scale-benchmark",
                "name": "analysis scale benchmark",
                "server": "bench",
                "start_date": "2026-01-01",
                "groups": {k: {"name": n, "config": c} for k, (n, c, _) in GROUPS.items()},
                "allocator": "glibc",
            }
        )
    )
    n = int(days * 86400 / interval)
    letters = list(GROUPS)
    group_of = [letters[i % len(letters)] for i in range(relays)]
    t = np.arange(n) * interval
    # per relay: saturating growth (allocator-dependent ceiling) + AR(1) noise, restarts in group F
    rss = np.empty((relays, n), dtype=np.int64)
    for r in range(relays):
        g = group_of[r]
        base = 200_000 + rng.normal(0, 10_000)
        ceiling = 1_500_000 * GROUPS[g][2] * (1 + rng.normal(0, 0.05))
        age = t % 86400 if g == "F" else t
        level = base + (ceiling - base) * (1 - np.exp(-age / (2.5 * 86400)))
        e = rng.normal(0, 8_000, n)
        noise = np.empty(n)
        acc = 0.0
        phi = 0.95
        # AR(1) by a cheap filter: scipy-free, vectorised in blocks
        noise = e.copy()
        for k in range(1, 64):
            noise[k:] += (phi**k) * e[:-k]
        rss[r] = (level + noise).astype(np.int64)
        del acc
    vms = rss * 7 + 1_000_000
    start = datetime(2026, 1, 1, tzinfo=UTC)
    names = [f"relay{r:04d}" for r in range(relays)]
    with open(out / "memory_measurements.csv", "w") as f:
        f.write(
            "timestamp,server,type,fingerprint,nickname,group,rss_kb,vmsize_kb,hwm_kb,frag_ratio,count,total_kb,"
            "avg_kb,min_kb,max_kb\n"
        )
        for i in range(n):
            ts = (start + timedelta(seconds=float(t[i]))).strftime("%Y-%m-%dT%H:%M:%S")
            col = rss[:, i]
            vcol = vms[:, i]
            lines = [
                f"{ts},bench,aggregate,,,,,,,,{relays},{int(col.sum())},{int(col.mean())},{int(col.min())},{int(col.max())}"
            ]
            lines += [
                f"{ts},bench,relay,,{names[r]},{group_of[r]},{col[r]},{vcol[r]},{col[r]},{vcol[r] / col[r]:.2f},,,,,"
                for r in range(relays)
            ]
            f.write("\n".join(lines))
            f.write("\n")
    return n * relays


def synthesise_store(run: Path, relays: int, days: float, interval: float, seed: int = 1) -> int:
    """The same fleet written straight into a run.db through the store API, as `import torutils`
    would write it (for a report at a scale whose CSV import does not fit in memory)."""
    from alloclab.store import DB_NAME, Store
    from alloclab.torutils.layout import SAMPLE_COLUMNS

    rng = np.random.default_rng(seed)
    n = int(days * 86400 / interval)
    t = 1_767_225_600.0 + np.arange(n) * interval
    run.mkdir(parents=True, exist_ok=True)
    store = Store.create(run / DB_NAME)
    store.begin()
    store.set_meta(
        name="scale-benchmark",
        metric="rss",
        seed=0,
        interval=interval,
        started_at=float(t[0]),
        ended_at=float(t[-1]),
        host="bench",
        end_reason="imported",
        source="import torutils (synthesised)",
        baseline="Z",
        replicas_in_several_groups=[],
        unlisted_relays=[],
    )
    gid = {
        g: store.add_group(
            name=g,
            allocator=c.get("allocator", name),
            kind="imported",
            family=c.get("allocator", name),
            version=c.get("version"),
            env_json="{}",
            command_json="[]",
            is_baseline=int(g == "Z"),
        )
        for g, (name, c, _) in GROUPS.items()
    }
    letters = list(GROUPS)
    nulls = (None,) * (len(SAMPLE_COLUMNS) - 6)
    for r in range(relays):
        g = letters[r % len(letters)]
        rid = store.add_replica(
            group_id=gid[g],
            idx=r,
            name=f"relay{r:04d}",
            start_order=r,
            started_at=float(t[0]),
            ended_at=float(t[-1]),
            verified=None,
            verify_detail="imported: allocator not verified by alloclab",
        )
        base = 200_000 + rng.normal(0, 10_000)
        ceiling = 1_500_000 * GROUPS[g][2] * (1 + rng.normal(0, 0.05))
        age = (t - t[0]) % 86400 if g == "F" else t - t[0]
        e = rng.normal(0, 8_000, n)
        noise = e.copy()
        for k in range(1, 64):
            noise[k:] += (0.95**k) * e[:-k]
        rss = (base + (ceiling - base) * (1 - np.exp(-age / (2.5 * 86400))) + noise).astype(np.int64)
        # columns: t, replica_id, phase, tier, rss_kb, vmsize_kb, then the rest empty; nprocs 1
        store.add_samples(
            SAMPLE_COLUMNS,
            (
                (tt, rid, None, "imported", v, v * 7 + 1_000_000, *nulls[:-1], 1)
                for tt, v in zip(t.tolist(), rss.tolist())
            ),
        )
    store.commit()
    store.close()
    return n * relays


def timed(cmd: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate()
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-500:]}")
    return {"wall_s": wall}


def run_measured(cmd: list[str]) -> dict:
    """Wall time and peak RSS of one command (a fresh process; RUSAGE_CHILDREN's maxrss is the
    largest child so far, so each command runs from a fresh helper process)."""
    helper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
        "w = time.perf_counter() - t\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': p.returncode, 'wall_s': w, 'cpu_s': r.ru_utime + r.ru_stime, 'max_rss_mb': r.ru_maxrss / 1024, 'err': p.stderr[-400:]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    if d["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {d['err']}")
    return d


def analyse_cpu(args: argparse.Namespace) -> None:
    """analyse() alone, in-process: the statistics' cost without the report's imports and charts."""
    from alloclab.analysis import analyse
    from alloclab.store import Store

    work = args.keep or Path(tempfile.mkdtemp(prefix="alloclab-scale-"))
    run = work / "run-store"
    if not (run / "run.db").exists():
        synthesise_store(run, args.relays, args.days, args.interval)
    store = Store.open(run)
    analyse(store)
    cpu = []
    for _ in range(args.repeat):
        c0 = time.process_time()
        analyse(store)
        cpu.append(time.process_time() - c0)
        print(json.dumps({"analyse_cpu_s": round(cpu[-1], 2)}), flush=True)
    store.close()
    print(
        json.dumps(
            {
                "relays": args.relays,
                "days": args.days,
                "interval_s": args.interval,
                "analyse_cpu_s_median": round(statistics.median(cpu), 2),
                "load_average": os.getloadavg(),
            }
        )
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relays", type=int, default=200)
    ap.add_argument("--days", type=float, default=9)
    ap.add_argument("--interval", type=float, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    ap.add_argument(
        "--store-only",
        action="store_true",
        help="write run.db through the store API and time only the report (no CSV, no import)",
    )
    ap.add_argument(
        "--analyse-only",
        action="store_true",
        help="write run.db through the store API and time alloclab.analysis.analyse on it in this process "
        "(CPU seconds, after one untimed call)",
    )
    args = ap.parse_args()
    if args.analyse_only:
        analyse_cpu(args)
        return
    if args.store_only:
        work = args.keep or Path(tempfile.mkdtemp(prefix="alloclab-scale-"))
        run = work / "run-store"
        t0 = time.perf_counter()
        samples = (
            synthesise_store(run, args.relays, args.days, args.interval)
            if not (run / "run.db").exists()
            else args.relays * int(args.days * 86400 / args.interval)
        )
        result = {
            "samples": samples,
            "synthesise_s": round(time.perf_counter() - t0, 1),
            "load_average_before": os.getloadavg(),
        }
        reports = []
        for _ in range(args.repeat):
            reports.append(
                run_measured([sys.executable, "-m", "alloclab", "report", str(run), "-o", str(work / "report")])
            )
            print(json.dumps({"report": reports[-1]}), flush=True)
        result["report_wall_s_median"] = round(statistics.median(r["wall_s"] for r in reports), 1)
        result["report_cpu_s_median"] = round(statistics.median(r["cpu_s"] for r in reports), 1)
        result["report_max_rss_mb_median"] = round(statistics.median(r["max_rss_mb"] for r in reports))
        result["load_average_after"] = os.getloadavg()
        print(json.dumps(result, indent=2))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="alloclab-scale-"))
    alloclab = [sys.executable, "-m", "alloclab"]
    try:
        data = work / "torutils"
        t0 = time.perf_counter()
        samples = (
            generate(data, args.relays, args.days, args.interval)
            if not (data / "memory_measurements.csv").exists()
            else args.relays * int(args.days * 86400 / args.interval)
        )
        gen_s = time.perf_counter() - t0
        result = {
            "samples": samples,
            "csv_mb": round((data / "memory_measurements.csv").stat().st_size / 2**20),
            "generate_s": round(gen_s, 1),
            "load_average_before": os.getloadavg(),
        }
        imports, reports = [], []
        for i in range(args.repeat):
            run = work / f"run{i}"
            shutil.rmtree(run, ignore_errors=True)
            imports.append(run_measured([*alloclab, "import", "torutils", str(data), "-o", str(run)]))
            print(json.dumps({"import": imports[-1]}), flush=True)
            reports.append(run_measured([*alloclab, "report", str(run)]))
            print(json.dumps({"report": reports[-1]}), flush=True)
            if i:
                shutil.rmtree(run, ignore_errors=True)
        for name, rows in (("import", imports), ("report", reports)):
            result[f"{name}_wall_s_median"] = round(statistics.median(r["wall_s"] for r in rows), 1)
            result[f"{name}_cpu_s_median"] = round(statistics.median(r["cpu_s"] for r in rows), 1)
            result[f"{name}_max_rss_mb_median"] = round(statistics.median(r["max_rss_mb"] for r in rows))
        result["run_db_mb"] = round(sum(f.stat().st_size for f in (work / "run0").glob("*.db*")) / 2**20)
        result["load_average_after"] = os.getloadavg()
        print(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
