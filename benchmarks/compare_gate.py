"""False-alarm rate and power of the CI gate `alloclab compare A B --fail-on-increase PCT`, by
simulation (outside the default test run).

    python benchmarks/compare_gate.py              # full: the figures in docs/analysis.md
    python benchmarks/compare_gate.py --quick      # smoke test, a few seconds

Each simulated run has 3 groups of n replicas. A replica's series is 6 h sampled every 60 s, one of
(at random) flat AR(1) noise (φ = 0.99 per sample, 2% of the level), a restart with regrowth
(to 40%, time constant 30 min) or a +10% level shift at a random time, times a lognormal replica
effect (cv 5%), times (optionally) an effect shared by every replica of the run (machine state on
the day). Its level is the mean after the first 10% (warm-up), as the analysis' steady mean. Run B
is run A's design with the true ratios given; the gate is stats.across_runs.rose_beyond on
stats.across_runs.compare_pairs, exactly as `alloclab compare` calls them. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.stats import calibration as sim  # noqa: E402
from alloclab.stats.across_runs import compare_pairs, rose_beyond  # noqa: E402

GROUPS = 3
T = sim.times(6 * 3600.0, 60.0)


def replica_levels(rng: np.random.Generator, sims: int, n: int, ratios: list[float], run_sd: float,
                   quiet: bool = False) -> np.ndarray:
    """(sims, GROUPS, n) steady levels of realistic series (quiet: flat series only, replica cv 1%)."""
    k = sims * GROUPS * n
    shapes = np.stack([sim.flat(rng, k, T, level=1.0, sd_share=0.02, phi=0.99),
                       sim.restarts(rng, k, T, level=1.0, low_share=0.4, regrow_s=1800.0, sd_share=0.01, phi=0.9),
                       sim.level_shift(rng, k, T, level=1.0, shift_share=0.10, sd_share=0.01, phi=0.9)])
    pick = rng.choice(3, size=k, p=[1.0, 0, 0] if quiet else [0.6, 0.2, 0.2])
    series = shapes[pick, np.arange(k)]
    steady = series[:, len(T) // 10:].mean(axis=1).reshape(sims, GROUPS, n)
    replica = np.exp((0.01 if quiet else 0.05) * rng.normal(size=(sims, GROUPS, n)))
    run = np.exp(run_sd * rng.normal(size=(sims, 1, 1)))
    return 100.0 * steady * replica * run * np.asarray(ratios)[None, :, None]


def gate_rate(rng, sims: int, n: int, ratios: list[float], pct: float, run_sd: float = 0.0,
              rule: str = "interval", quiet: bool = False) -> float:
    """Share of simulated (A, B) pairs where the gate fails the build (any group)."""
    a = replica_levels(rng, sims, n, [1.0] * GROUPS, run_sd, quiet)
    b = replica_levels(rng, sims, n, ratios, run_sd, quiet)
    hits = 0
    for i in range(sims):
        cs = compare_pairs({f"g{j}": (a[i, j], b[i, j]) for j in range(GROUPS)})
        if rule == "interval":
            hits += any(rose_beyond(c, pct) for c in cs.values())
        else:    # the rejected alternative: significant and point estimate above 1 + PCT
            hits += any(c.significant and (c.ratio or 0) > 1 + pct / 100 for c in cs.values())
    return hits / sims


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 100 simulations per cell")
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    sims = 100 if args.quick else 1000
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    rows = []

    def row(name, value, target):
        rows.append((name, value, target))
        print(f"  {name}: {value} (target {target})", file=sys.stderr, flush=True)

    for n in (3, 5):
        row(f"gate false alarms, no change, PCT 5, n={n}", f"{gate_rate(rng, sims, n, [1, 1, 1], 5):.2%}", "≤ 2.5%")
        row(f"gate false alarms, no change, PCT 0 (= significantly higher), n={n}",
            f"{gate_rate(rng, sims, n, [1, 1, 1], 0):.2%}", "≤ 2.5%")
        row(f"gate false alarms, one group up exactly 5%, PCT 5, n={n}",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5):.2%}", "≤ 2.5%")
        row(f"… the rejected rule (significant and estimate > 1.05), same data design, n={n}",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, rule='point'):.1%}", "(why it was rejected)")
        row(f"gate false alarms, no change but a 2% run-to-run shift of the whole run, PCT 5, n={n}",
            f"{gate_rate(rng, sims, n, [1, 1, 1], 5, run_sd=0.02):.2%}", "≤ 2.5%")
        row(f"… the same with PCT 0, n={n}", f"{gate_rate(rng, sims, n, [1, 1, 1], 0, run_sd=0.02):.1%}",
            "stated (PCT 0 tests for any change, day effects included)")
        row(f"quiet series (flat only, replica cv 1%), one group up exactly 5%, PCT 5, n={n}: interval rule / rejected rule",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, quiet=True):.2%} / "
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, rule='point', quiet=True):.1%}", "≤ 2.5% / (≈ 50% expected)")
        for up in (1.10, 1.20):
            row(f"gate power, one group up {up - 1:.0%}, PCT 5, n={n}",
                f"{gate_rate(rng, sims, n, [up, 1, 1], 5):.1%}", "stated")
    print("| figure | measured | target |\n|---|---|---|")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    print(f"\n{sims} simulated pairs of runs per cell, seed {args.seed}, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
