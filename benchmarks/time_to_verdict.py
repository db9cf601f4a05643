"""Time to verdict: wall time from `alloclab run --until-significant` starting until it stops with
a verdict (the best group beats the baseline, significantly, by the sequential rule), beside the
9 days of the TorUtils relay comparison it replaces.

    python benchmarks/time_to_verdict.py [--repeat 3] [--replicas 4] [--tor-replicas 16] [--stable-for 60s]
                                         [--max-duration 20m] [--only KIND]

Experiments (KIND), each glibc against jemalloc 5.3.0 unless said:
  tor-dircache  the built-in Tor directory-cache model (docs/how-to/workloads.md), --tor-replicas a group,
                warm-up 120 s (under glibc the model's level climbs for its first ~2 minutes);
  tor-null      the same design, glibc against glibc: the real null check (a verdict is a false stop);
  tor-mimalloc  the same model, mimalloc 3.0.1 (baseline, what the relays ran) against 2.0.9, the
                Tor story; --replicas a group;
  user-command  a user's own program: a Python service that keeps a churning cache of 1-64 KiB
                byte strings (allocated by malloc, not pymalloc), as `command = [...]`, --replicas;
  real-tor      real tor relays (the tor-network scenario, as root): the seeds' comparison, glibc
                (baseline), jemalloc 5.3.0, mimalloc 2.0.9 and 3.0.1, --replicas relays each, warm-up
                60 s, 2 minutes of directory load planned (--max-duration 3m keeps the looks inside it);
                --routers descriptor-only routers in the directory (0: the relays and authorities only);
  real-tor-null the same network, glibc against glibc (a verdict is a false stop).
Each run: `alloclab run EXP -o DIR --until-significant --stable-for T --max-duration D --no-report`;
measured: wall seconds from launch to exit, the end reason (a `sequential_stop` means a verdict),
the look at which it stopped. Medians of --repeat. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVICE = r"""
import os, random, time
rng = random.Random(int(os.environ.get("SEED", "1")))
cache = []
while True:
    for _ in range(2000):
        cache.append(bytes(rng.randint(1024, 65536)))
        if len(cache) > 3000:
            cache[rng.randrange(len(cache))] = cache[-1]
            cache.pop()
    time.sleep(0.05)
"""

EXPERIMENT = """
name = "{name}"
replicas = {replicas}
interval = "2s"
baseline = "{base}"
seed = 7
metric = "rss"
{command}
[phases]
warmup = "{warmup}"
load = "2h"
idle = "5s"

{workload}
[[group]]
name = "{base}"
allocator = "{base_allocator}"

[[group]]
name = "{other}"
allocator = "{other_allocator}"
"""

REAL_TOR = """
name = "{name}"
replicas = {replicas}
interval = "2s"
baseline = "glibc"
seed = {seed}
[scenario]
name = "tor-network"
voting_interval = "20s"
routers = {routers}
consensus_timeout = "15m"
[phases]
warmup = "60s"
load = "2m"
{groups}"""
REAL_GROUPS = {
    "real-tor": [
        ("glibc", "glibc"),
        ("jemalloc-5.3.0", "jemalloc@5.3.0"),
        ("mimalloc-2.0.9", "mimalloc@2.0.9"),
        ("mimalloc-3.0.1", "mimalloc@3.0.1"),
    ],
    "real-tor-null": [("glibc", "glibc"), ("glibc-b", "glibc")],
}

PAIRS = {
    "tor-dircache": ("glibc", "glibc", "jemalloc-5.3.0", "jemalloc@5.3.0"),
    "tor-null": ("glibc", "glibc", "glibc-b", "glibc"),
    "tor-mimalloc": ("mimalloc-3.0.1", "mimalloc@3.0.1", "mimalloc-2.0.9", "mimalloc@2.0.9"),
    "user-command": ("glibc", "glibc", "jemalloc-5.3.0", "jemalloc@5.3.0"),
}


def experiment(kind: str, d: Path, replicas: int, routers: int = 0, seed: int = 7) -> Path:
    if kind in REAL_GROUPS:
        groups = "".join(f'[[group]]\nname = "{n}"\nallocator = "{a}"\n' for n, a in REAL_GROUPS[kind])
        path = d / f"{kind}-{seed}.toml"
        path.write_text(
            REAL_TOR.format(name=f"ttv-{kind}", replicas=replicas, seed=seed, routers=routers, groups=groups)
        )
        return path
    base, base_alloc, other, other_alloc = PAIRS[kind]
    groups = dict(base=base, base_allocator=base_alloc, other=other, other_allocator=other_alloc)
    if kind.startswith("tor-"):
        text = EXPERIMENT.format(
            name=f"ttv-{kind}",
            replicas=replicas,
            command="",
            warmup="120s",
            workload='[workload]\nname = "tor-dircache"\nhour = 6\n',
            **groups,
        )
    else:
        script = d / "service.py"
        script.write_text(SERVICE)
        text = EXPERIMENT.format(
            name="ttv-user",
            replicas=replicas,
            workload="",
            warmup="20s",
            command=f'command = ["{sys.executable}", "{script}"]\n',
            **groups,
        )
    path = d / f"{kind}.toml"
    path.write_text(text)
    return path


def one_run(exp: Path, out: Path, stable_for: str, max_duration: str) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(exp),
            "-o",
            str(out),
            "--until-significant",
            "--stable-for",
            stable_for,
            "--max-duration",
            max_duration,
            "--no-report",
        ],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    if not (out / "run.db").exists():
        raise SystemExit(f"alloclab run failed: {proc.stderr.strip()[-500:]}")
    db = sqlite3.connect(out / "run.db")
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    stop = db.execute("SELECT t, description FROM events WHERE kind = 'sequential_stop'").fetchall()
    started = float(meta.get("started_at") or 0)
    warmup = float(re.search(r'warmup = "(\d+)s"', exp.read_text()).group(1))
    db.close()
    look = re.search(r"look (\d+)", stop[0][1]) if stop else None
    return {
        "wall_s": round(wall, 1),
        "load_s_at_stop": round(stop[0][0] - started - warmup, 1) if stop and started else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "exit": proc.returncode,
        "verdict": bool(stop),
        "look": int(look.group(1)) if look else None,
        "end_reason": meta.get("end_reason", "")[:200],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument(
        "--tor-replicas",
        type=int,
        default=16,
        help="replicas per group for tor-dircache and tor-null (glibc and jemalloc differ by ~4%%; 16 a side: "
        "90%% verdicts within 12 min in benchmarks/calibration.py --part tor-verdict)",
    )
    ap.add_argument("--stable-for", default="60s")
    ap.add_argument("--max-duration", default="20m")
    ap.add_argument(
        "--only", action="append", choices=[*PAIRS, *REAL_GROUPS], help="run only this experiment (repeatable)"
    )
    ap.add_argument("--routers", type=int, default=0, help="real-tor: descriptor-only routers in the directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="alloclab-ttv-"))
    out = {"load_average_before": os.getloadavg(), "replaces_s": 9 * 86400}
    try:
        for kind in args.only or ["tor-dircache", "user-command"]:
            exp = experiment(kind, work, args.tor_replicas if kind in ("tor-dircache", "tor-null") else args.replicas)
            runs = []
            for i in range(args.repeat):
                if kind in REAL_GROUPS:  # each run its own seed (the relays' load and the routers' keys)
                    exp = experiment(kind, work, args.replicas, args.routers, seed=7 + i)
                r = one_run(exp, work / f"{kind}-{i}", args.stable_for, args.max_duration)
                runs.append(r)
                print(json.dumps({kind: r}), flush=True)
                shutil.rmtree(work / f"{kind}-{i}", ignore_errors=True)
            walls = [r["wall_s"] for r in runs]
            out[kind] = {
                "replicas": args.tor_replicas if kind in ("tor-dircache", "tor-null") else args.replicas,
                "runs": runs,
                "verdicts": sum(r["verdict"] for r in runs),
                "wall_s_median": statistics.median(walls),
                "fraction_of_9_days": round(statistics.median(walls) / (9 * 86400), 6),
            }
        out["load_average_after"] = os.getloadavg()
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
