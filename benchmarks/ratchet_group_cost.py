"""Cost of the group routes of Ratcheting (stats.ratchet_group, stats.ratchet_shared) on one group of replicas.

    python benchmarks/ratchet_group_cost.py [--replicas 20 --days 9 --groups 3]

One group of --replicas series over --days, sampled every 15 minutes (865 samples a series over 9
days) and every 15 s (34,560, averaged into the step fit's 1,024 bins), in four kinds: +8% five-step
staircases under AR(1) 2% φ 0.9 (each replica its own step times: the costly case, most replicas
simulated), a smooth +10% climb the group shares (AR(1) 2% φ 0.9: simulated, stopped early), flat
AR(1) 2% φ 0.9, a daily cycle ±4% (the pre-screen: nothing simulated) and +8% five-step staircases
whose step times the group shares. Prints, per kind, the CPU seconds of one ratchet_group call and
of one ratchet_shared call (median of --groups groups; CPU, so other work on the
machine does not count), the simulated step fits, and the CPU seconds of classify on every
replica of the group beside it (what a report already spends on those replicas' words). As in a
report, ratchet_group is given the step evidence classify found (StatusCall.ratchet), so its
CPU is the simulations' and the pre-screen's alone; ratchet_shared (steps the group shares in time,
the last kind) bins the replicas' windows on one grid itself, so its CPU includes that.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.stats import classify, ratchet_group, ratchet_shared, step_evidence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=20, help="replicas in the group (default 20)")
    ap.add_argument("--days", type=float, default=9.0, help="window in days (default 9)")
    ap.add_argument("--groups", type=int, default=3, help="groups per kind, the median is shown (default 3)")
    ap.add_argument("--seed", type=int, default=20261124)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    m = args.replicas
    kinds = {
        "+8% five-step staircases, AR(1) 2% φ 0.9": lambda t: sim.staircase(
            rng, m, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9
        ),
        "smooth +10% climb shared, AR(1) 2% φ 0.9": lambda t: sim.growing(
            rng, m, t, share=0.10, phi=0.9, sd_share=0.02
        ),
        "flat AR(1) 2% φ 0.9": lambda t: sim.flat(rng, m, t, phi=0.9, sd_share=0.02),
        "daily cycle ±4% shared, AR(1) 1% φ 0.9": lambda t: sim.sinusoid(
            rng, m, t, amplitude_share=0.04, period_s=86400.0, sd_share=0.01, phi=0.9
        ),
        "+8% five-step staircases at shared times, AR(1) 2% φ 0.9": lambda t: sim.shared_staircase(
            rng, m, t, sd_share=0.02, phi=0.9
        ),
    }
    print(
        f"| {m} replicas × {args.days:g} d | sampling | group route CPU s (median of {args.groups}) | simulated fits | "
        f"shared route CPU s | simulated fits | classify on the {m} replicas, CPU s |\n|---|---|---|---|---|---|---|"
    )
    for interval in (900.0, 15.0):
        t = sim.times(args.days * 86400.0, interval)
        for name, make in kinds.items():
            cpu, fits, words_cpu, shared_cpu, shared_fits = [], [], [], [], []
            for _ in range(args.groups):
                ys = make(t)
                if "cycle" in name:  # one phase for the group: the clock
                    ys = 100 * (
                        1
                        + 0.04 * np.sin(2 * np.pi * t / 86400.0 + rng.uniform(0, 2 * np.pi))
                        + sim.ar1(rng, m, len(t), 0.9, 0.01)
                    )
                start = time.process_time()
                calls = [classify(t, y) for y in ys]
                words_cpu.append(time.process_time() - start)
                start = time.process_time()
                g = ratchet_group([c.ratchet or step_evidence(t, y) for c, y in zip(calls, ys)])
                cpu.append(time.process_time() - start)
                fits.append(g.simulations)
                start = time.process_time()
                sh = ratchet_shared([(t, y) for y in ys])
                shared_cpu.append(time.process_time() - start)
                shared_fits.append(sh.simulations)
                print(
                    f"  {name}, every {interval:g} s: {cpu[-1]:.2f} s, {fits[-1]} fits; shared {shared_cpu[-1]:.2f} s, "
                    f"{shared_fits[-1]} fits",
                    file=sys.stderr,
                    flush=True,
                )
            print(
                f"| {name} | every {interval:g} s ({len(t)} samples) | {statistics.median(cpu):.2f} "
                f"({min(cpu):.2f}–{max(cpu):.2f}) | {statistics.median(fits):.0f} | {statistics.median(shared_cpu):.2f} "
                f"({min(shared_cpu):.2f}–{max(shared_cpu):.2f}) | {statistics.median(shared_fits):.0f} | "
                f"{statistics.median(words_cpu):.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
