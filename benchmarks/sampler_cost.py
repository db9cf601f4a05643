"""Sampler cost: CPU microseconds per process-sample, per tier, against a plain C loop reading the
same files (the floor) and against psrecord and procpath measuring the same processes.

    python benchmarks/sampler_cost.py [--small 200 --small-mb 30 --big 20 --big-mb 500 --rounds 20]

Needs the benchmark helpers (built here from benchmarks/native) and, for
the comparison, `pip install psrecord procpath`. Prints one JSON object; figures in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from native_helpers import build_helpers  # benchmarks/ is this script's directory

from alloclab.capture import sampler


def spawn(helpers: Path, count: int, mb: int) -> list[subprocess.Popen]:
    procs = [
        subprocess.Popen([str(helpers / "memhog"), str(mb)], stdout=subprocess.PIPE, text=True) for _ in range(count)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    return procs


def alloclab_cost(pids: list[int], rounds: int) -> dict:
    t0 = time.thread_time()
    for _ in range(rounds):
        for pid in pids:
            sampler.read_stat(pid)
            sampler.read_statm(pid)
    cheap = (time.thread_time() - t0) / rounds / len(pids) * 1e6
    t0 = time.thread_time()
    for _ in range(rounds):
        for pid in pids:
            sampler.read_smaps_rollup(pid)
    full = (time.thread_time() - t0) / rounds / len(pids) * 1e6
    return {"cheap_us": cheap, "full_us": full}


def floor_cost(helpers: Path, pids: list[int], rounds: int) -> dict:
    out = subprocess.run(
        [str(helpers / "sampler_floor"), str(rounds), *map(str, pids)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def child_cpu(cmd: list[str]) -> float:
    """CPU seconds (user + sys) a command used, from wait4."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(p.pid, 0)
    return usage.ru_utime + usage.ru_stime


def psrecord_cost(pid: int) -> float | None:
    """Marginal CPU per sample: a long and a short recording, the difference over the extra samples."""
    if not shutil.which("psrecord"):
        return None
    interval = 0.05
    short = child_cpu(["psrecord", str(pid), "--interval", str(interval), "--duration", "1"])
    long = child_cpu(["psrecord", str(pid), "--interval", str(interval), "--duration", "6"])
    return (long - short) / (5 / interval) * 1e6


def procpath_cost(pids: list[int]) -> float | None:
    if not shutil.which("procpath"):
        return None
    with tempfile.TemporaryDirectory() as d:
        query = "$..children[?(@.stat.pid in [{}])]".format(", ".join(map(str, pids)))

        def run(n: int) -> float:
            return child_cpu(["procpath", "record", "-i", "0.05", "-r", str(n), "-d", f"{d}/r{n}.sqlite", query])

        short, long = run(5), run(45)
    return (long - short) / 40 / len(pids) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--small-mb", type=int, default=30)
    ap.add_argument("--big", type=int, default=20)
    ap.add_argument("--big-mb", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    helpers = build_helpers()
    result = {"machine": {"cpus": os.cpu_count(), "kernel": os.uname().release}}
    for label, count, mb in (("small", args.small, args.small_mb), ("big", args.big, args.big_mb)):
        procs = spawn(helpers, count, mb)
        try:
            pids = [p.pid for p in procs]
            ours = alloclab_cost(pids, args.rounds)
            floor = floor_cost(helpers, pids, args.rounds)
            result[label] = {
                "processes": count,
                "mb_each": mb,
                "alloclab_cheap_us": round(ours["cheap_us"], 2),
                "floor_cheap_us": round(floor["cheap_us"], 2),
                "cheap_ratio": round(ours["cheap_us"] / floor["cheap_us"], 2),
                "alloclab_full_us": round(ours["full_us"], 1),
                "floor_full_us": round(floor["full_us"], 1),
                "full_ratio": round(ours["full_us"] / floor["full_us"], 2),
                "psrecord_us": psrecord_cost(pids[0]),
                "procpath_us": procpath_cost(pids[:10]),
            }
            print(json.dumps({label: result[label]}), file=sys.stderr)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    shutil.rmtree(helpers, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
