"""Sampler scale: thousands of real processes sampled at 1 Hz, as the runner and fleet collector do
(`sampler.sample_processes`: cheap tier for every process every tick, full tier (smaps_rollup)
stalest-first within its CPU budget).

    python benchmarks/sampler_scale.py [--processes 2000 --seconds 90 --budget 0.01]

The processes are `memhog` helpers (benchmarks/native/memhog.c): mostly small (1 MiB touched), some medium
(8 MiB), a few with a multi-GB mapping (4 GiB mapped, 32 MiB of it touched: VmSize counts the
mapping, RSS and smaps_rollup only the touched part). Each helper dies with this script
(PR_SET_PDEATHSIG) and all are killed and reaped at the end; the script checks none is left.
Measured: CPU time of the sampling thread per tick (thread_time) as a share of one core, cheap-tier
completeness per tick, full-tier coverage (the longest time any process went without a full
reading, and the share covered within each 60 s). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from native_helpers import build_helpers  # benchmarks/ is this script's directory

from alloclab.capture import sampler


def spawn(memhog: Path, n: int) -> list[subprocess.Popen]:
    """n helpers: 1 in 100 with a 4 GiB mapping (32 MiB touched), 1 in 10 of 8 MiB, the rest 1 MiB."""
    r, w = os.pipe()
    procs = []
    try:
        for i in range(n):
            mb, mapped = (32, 4096) if i % 100 == 0 else (8, 0) if i % 10 == 0 else (1, 0)
            procs.append(
                subprocess.Popen(
                    [str(memhog), str(mb), str(mapped), str(w)],
                    pass_fds=(w,),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
        os.close(w)
        w = -1
        got = 0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            b = os.read(r, 65536)
            if not b:
                break
            got += len(b)
        if got < n:
            raise RuntimeError(f"only {got} of {n} helpers became ready")
        return procs
    except BaseException:
        stop(procs)
        raise
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)


def stop(procs: list[subprocess.Popen]) -> int:
    """Kill and reap every helper; the number still present afterwards (must be 0)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
    return sum(
        1
        for p in procs
        if Path(f"/proc/{p.pid}").exists() and sampler.read_stat(p.pid) and sampler.read_stat(p.pid).state != "Z"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--budget", type=float, default=0.01, help="full tier's share of one core (SmapsBudget)")
    args = ap.parse_args()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.processes + 256)), hard))
    sampler.MAX_OPEN_FILES = max(sampler.MAX_OPEN_FILES, 3 * args.processes + 64)  # every stat/statm/smaps stays open
    memhog = build_helpers() / "memhog"
    load_before = os.getloadavg()
    t0 = time.monotonic()
    procs = spawn(memhog, args.processes)
    spawn_s = time.monotonic() - t0
    pids = [p.pid for p in procs]
    left = None
    try:
        budget = sampler.SmapsBudget(args.budget)
        first_full: dict[int, float] = {}
        last_full: dict[int, float] = {}
        tick_cpu, full_cpu, cheap_counts, full_counts = [], [], [], []
        start = time.monotonic()
        tick = 0
        while time.monotonic() - start < args.seconds:
            due = start + tick
            c0, f0 = time.thread_time(), budget.spent
            readings = sampler.sample_processes(pids, budget)
            tick_cpu.append(time.thread_time() - c0)
            full_cpu.append(budget.spent - f0)
            now = time.monotonic()
            cheap_counts.append(len(readings))
            full = [r.stat.pid for r in readings if r.full is not None]
            full_counts.append(len(full))
            for pid in full:
                first_full.setdefault(pid, now)
                last_full[pid] = now
            tick += 1
            time.sleep(max(0.0, start + tick - time.monotonic()))
            del due
        end = time.monotonic()
        # the longest wait for a full reading: from the start (or the previous reading) to the next
        # one; a process never read fully counts the whole run
        gaps = {}
        for pid in pids:
            gaps[pid] = (first_full[pid] - start) if pid in first_full else end - start
        longest_first = max(gaps.values())
        # steady state: the full tier's cycle over all processes, from the readings per tick
        per_tick_full = statistics.mean(full_counts[5:]) if len(full_counts) > 5 else statistics.mean(full_counts)
        cycle_s = args.processes / per_tick_full if per_tick_full else float("inf")
        cpu = sorted(tick_cpu)
        out = {
            "processes": args.processes,
            "seconds": round(end - start, 1),
            "ticks": len(tick_cpu),
            "spawn_s": round(spawn_s, 1),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "cpu_share_of_one_core_median": round(statistics.median(cpu), 4),
            "cpu_share_of_one_core_mean": round(statistics.mean(cpu), 4),
            "cpu_share_p90": round(cpu[int(0.9 * (len(cpu) - 1))], 4),
            "full_tier_share_mean": round(statistics.mean(full_cpu), 4),
            "cheap_tier_share_mean": round(statistics.mean(tick_cpu) - statistics.mean(full_cpu), 4),
            "cheap_tier_us_per_process": round(
                (statistics.mean(tick_cpu) - statistics.mean(full_cpu)) / args.processes * 1e6, 1
            ),
            "cheap_tier_complete_ticks": sum(1 for c in cheap_counts if c == args.processes),
            "full_readings_per_tick": round(per_tick_full, 1),
            "full_tier_cycle_s": round(cycle_s, 1),
            "first_full_reading_of_every_process_within_s": round(longest_first, 1),
            "full_budget": args.budget,
        }
    finally:
        left = stop(procs)
    out["helpers_left_after_cleanup"] = left
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
