"""How much CPU the tor processes of a run got, and how long their threads waited for it.

`sample RUN OUT.csv` appends, every 30 s until the run's tor processes are gone, each relay's and
authority's summed per-thread /proc/PID/task/TID/schedstat (ns on a CPU, ns runnable but waiting on
a run queue) with the host's 1-minute load. `summarise OUT.csv --step 120` prints, per time bin and
group, the cores each relay used and the share of its threads' runnable time spent waiting.

The load average counts every runnable thread on the host (other users' work included); these
figures are the measured relays' own: a relay whose threads wait most of their runnable time is
CPU-starved whatever the load says. Used for issue 26 (docs/lab/results.md).
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import os
import re
import sys
import time

RELAY_DIR = re.compile(rb"/(?:replicas/([^/]+)|tor-network/([^/]+))/")


def _tor_processes(run: str) -> dict[str, int]:
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) < 3 or not argv[0].endswith(b"/tor") or run.encode() not in argv[2]:
            continue
        m = RELAY_DIR.search(argv[2])
        if m:
            found[(m.group(1) or m.group(2)).decode()] = int(pid)
    return found


def _schedstat(pid: int) -> tuple[int, int, int]:
    run_ns = wait_ns = threads = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            on_cpu, waiting, _ = open(path).read().split()
        except (OSError, ValueError):
            continue  # a thread that exited between the listing and the read
        run_ns, wait_ns, threads = run_ns + int(on_cpu), wait_ns + int(waiting), threads + 1
    return run_ns, wait_ns, threads


def sample(run: str, out_path: str, period: float) -> None:
    with open(out_path, "a") as out:
        while procs := _tor_processes(os.path.abspath(run)):
            now, load = time.time(), os.getloadavg()[0]
            for name, pid in sorted(procs.items()):
                out.write(f"{now:.0f},{name},{','.join(map(str, _schedstat(pid)))},{load:.2f}\n")
            out.flush()
            time.sleep(period)


def _group(name: str) -> str:
    head, _, tail = name.rpartition("-")
    return head if head and tail.isdigit() else name


def summarise(path: str, step: int) -> None:
    series = collections.defaultdict(list)
    for t, name, run_ns, wait_ns, _threads, load in csv.reader(open(path)):
        series[name].append((int(t), int(run_ns), int(wait_ns), float(load)))
    if not series:
        sys.exit(f"{path}: no samples; run `sample` beside a run first")
    t0 = min(p[0][0] for p in series.values())
    bins = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
    loads = collections.defaultdict(list)
    for name, pts in series.items():
        pts.sort()
        for (ta, ra, wa, _), (tb, rb, wb, lb) in zip(pts, pts[1:]):
            acc = bins[(ta - t0) // step][_group(name)]
            acc[0], acc[1], acc[2] = acc[0] + rb - ra, acc[1] + wb - wa, acc[2] + tb - ta
            loads[(ta - t0) // step].append(lb)
    for b in sorted(bins):
        load = sorted(loads[b])[len(loads[b]) // 2]
        cells = [
            f"{g}: {r / 1e9 / dt:.2f} cores a process, wait {w / max(r + w, 1):.0%}"
            for g, (r, w, dt) in sorted(bins[b].items())
        ]
        print(f"min {b * step // 60:3d}-{(b + 1) * step // 60:3d} load {load:5.1f} | " + "; ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("sample", help="sample a running run's tor processes until they are gone")
    s.add_argument("run", help="the run's output directory (alloclab run -o RUN)")
    s.add_argument("out", help="CSV to append to")
    s.add_argument("--period", type=float, default=30.0, help="seconds between samples (default 30)")
    m = sub.add_parser("summarise", help="cores and run-queue wait per group and time bin")
    m.add_argument("csv")
    m.add_argument("--step", type=int, default=600, help="bin width in seconds (default 600)")
    args = ap.parse_args()
    if args.verb == "sample":
        sample(args.run, args.out, args.period)
    else:
        summarise(args.csv, args.step)


if __name__ == "__main__":
    main()
