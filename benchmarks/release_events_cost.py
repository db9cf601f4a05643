"""Cost of stats.release_events (a replica's release events, once per report) on 9-day windows.

    python benchmarks/release_events_cost.py [--days 9 --interval 15 --repeat 7]

Three kinds of window sampled every --interval s over --days (51,841 samples at the defaults):
flat AR(1) 2% φ 0.9, a daily cycle ±4% in AR(1) 1% φ 0.9 (a few releases), and a sawtooth that
climbs 20% in a day and releases it. Prints, per kind, the CPU milliseconds of one
release_events call and of release_threshold alone inside it (median of --repeat after one
untimed call; CPU, so other work on the machine does not count), and the release events found. Before/after a change: run it with the old tree's `src` on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from alloclab.stats.status import release_events, release_threshold
from tests import simulated_series as sim


def cpu_ms(f, repeat: int) -> float:
    f()
    runs = []
    for _ in range(repeat):
        start = time.process_time()
        f()
        runs.append(time.process_time() - start)
    return statistics.median(runs) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=9.0, help="window in days (default 9)")
    ap.add_argument("--interval", type=float, default=15.0, help="sampling interval in s (default 15)")
    ap.add_argument("--repeat", type=int, default=7, help="timed calls a kind, the median is shown (default 7)")
    ap.add_argument("--seed", type=int, default=20261124)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t = sim.times(args.days * 86400.0, args.interval)
    kinds = {
        "flat AR(1) 2% φ 0.9": sim.flat(rng, 1, t, phi=0.9, sd_share=0.02)[0],
        "daily cycle ±4%, AR(1) 1% φ 0.9": 100
        * (1 + 0.04 * np.sin(2 * np.pi * t / 86400.0) + sim.ar1(rng, 1, len(t), 0.9, 0.01)[0]),
        "sawtooth +20% released daily": 100 * (1 + 0.2 * (t % 86400) / 86400 + sim.ar1(rng, 1, len(t), 0.5, 0.002)[0]),
    }
    print(
        f"| window ({len(t)} samples) | release_events CPU ms | of which release_threshold | releases |\n|---|---|---|---|"
    )
    for name, y in kinds.items():
        level = float(np.median(y))
        whole = cpu_ms(lambda: release_events(t, y, level), args.repeat)
        thr = cpu_ms(lambda: release_threshold(t, y, level), args.repeat)
        print(f"| {name} | {whole:.1f} | {thr:.1f} | {release_events(t, y, level).count} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
