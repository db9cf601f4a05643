"""False-fail, false-pass and inconclusive rates and power of the CI gate `alloclab compare A B
--fail-on-increase PCT` (three outcomes: within / above / inconclusive), on simulated and on real
series (outside the default test run).

    python benchmarks/compare_gate.py              # full: the figures in docs/how-to/compare.md
    python benchmarks/compare_gate.py --quick      # smoke test, 100 pairs per cell

Real pairs: the per-relay end levels of the two 1AEO TorUtils experiments in tests/data (15 groups,
9–80 relays each, imported and analysed as `alloclab import torutils` + `report` do). A pair of
runs draws 3 groups and, in each, two disjoint random sets of n relays (A/A: same allocator, same
days, real relay-to-relay spread); B is then multiplied by the true ratio of the cell (A/B).

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
from datetime import timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from alloclab.stats.across_runs import compare_pairs, gate, rose_beyond
from tests import simulated_series as sim

DATASETS = Path(__file__).resolve().parents[1] / "tests" / "data" / "1aeo-torutils"

GROUPS = 3
PST = timezone(timedelta(hours=-8))  # the 1AEO CSVs write naive Pacific standard times (tests do the same)
T = sim.times(6 * 3600.0, 60.0)


def replica_levels(
    rng: np.random.Generator, sims: int, n: int, ratios: list[float], run_sd: float, quiet: bool = False
) -> np.ndarray:
    """(sims, GROUPS, n) steady levels of realistic series (quiet: flat series only, replica cv 1%)."""
    k = sims * GROUPS * n
    shapes = np.stack(
        [
            sim.flat(rng, k, T, level=1.0, sd_share=0.02, phi=0.99),
            sim.restarts(rng, k, T, level=1.0, low_share=0.4, regrow_s=1800.0, sd_share=0.01, phi=0.9),
            sim.level_shift(rng, k, T, level=1.0, shift_share=0.10, sd_share=0.01, phi=0.9),
        ]
    )
    pick = rng.choice(3, size=k, p=[1.0, 0, 0] if quiet else [0.6, 0.2, 0.2])
    series = shapes[pick, np.arange(k)]
    steady = series[:, len(T) // 10 :].mean(axis=1).reshape(sims, GROUPS, n)
    replica = np.exp((0.01 if quiet else 0.05) * rng.normal(size=(sims, GROUPS, n)))
    run = np.exp(run_sd * rng.normal(size=(sims, 1, 1)))
    return 100.0 * steady * replica * run * np.asarray(ratios)[None, :, None]


def gate_rate(
    rng,
    sims: int,
    n: int,
    ratios: list[float],
    pct: float,
    run_sd: float = 0.0,
    rule: str = "interval",
    quiet: bool = False,
) -> float:
    """Share of simulated (A, B) pairs where the gate fails the build (any group)."""
    a = replica_levels(rng, sims, n, [1.0] * GROUPS, run_sd, quiet)
    b = replica_levels(rng, sims, n, ratios, run_sd, quiet)
    hits = 0
    for i in range(sims):
        cs = compare_pairs({f"g{j}": (a[i, j], b[i, j]) for j in range(GROUPS)})
        if rule == "interval":
            hits += any(rose_beyond(c, pct) for c in cs.values())
        else:  # the rejected alternative: significant and point estimate above 1 + PCT
            hits += any(c.significant and (c.ratio or 0) > 1 + pct / 100 for c in cs.values())
    return hits / sims


def real_levels() -> list[np.ndarray]:
    """Every group's per-relay levels (MB) of the two 1AEO experiments, as the analysis compares them."""
    import tempfile

    from alloclab.analysis import analyse
    from alloclab.store import Store
    from alloclab.torutils.importer import import_torutils

    out = []
    for ds in ("5way-2026-01", "co-unified-2025-12"):
        with tempfile.TemporaryDirectory(prefix="alloclab-gate-") as d:
            store = Store.open(import_torutils(DATASETS / ds, Path(d) / "run", PST))
            out += [v for v in analyse(store).levels.values() if len(v) >= 2 * 5]
            store.close()
    return out


def real_pair(rng, groups: list[np.ndarray], sims: int, n: int, ratios: list[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.empty((sims, GROUPS, n))
    b = np.empty((sims, GROUPS, n))
    for i in range(sims):
        for j, k in enumerate(rng.choice(len(groups), GROUPS, replace=False)):
            pick = rng.permutation(groups[k])[: 2 * n]
            a[i, j], b[i, j] = pick[:n], pick[n:] * ratios[j]
    return a, b


def outcomes(a: np.ndarray, b: np.ndarray, pct: float) -> dict[str, float]:
    """Shares of the whole comparison's outcome (above if any group is above; within if every group
    is; else inconclusive), plus the old rule's pass rate (pass whenever no group is above)."""
    counts = dict.fromkeys(("within", "above", "inconclusive"), 0)
    for i in range(len(a)):
        cs = compare_pairs({f"g{j}": (a[i, j], b[i, j]) for j in range(GROUPS)})
        got = [gate(c, pct).outcome for c in cs.values()]
        counts["above" if "above" in got else "inconclusive" if "inconclusive" in got else "within"] += 1
    return {k: v / len(a) for k, v in counts.items()}


def three_outcome_table(rng, sims: int, pct: float = 5.0) -> list[tuple[str, ...]]:
    """Rows: source, n, true change of one group, within / above / inconclusive shares, and what the
    cell's error is (false fail: above with a true change <= pct; false pass: within with > pct)."""
    rows = []
    groups = real_levels()
    print(f"  real: {len(groups)} groups of {min(map(len, groups))}–{max(map(len, groups))} relays", file=sys.stderr)
    for source in ("simulated", "simulated quiet", "real 1AEO"):
        for n in (3, 5) if source != "real 1AEO" else (3, 5):
            for up in (1.0, 1.05, 1.10, 1.20):
                ratios = [up, 1.0, 1.0]
                if source == "real 1AEO":
                    a, b = real_pair(rng, groups, sims, n, ratios)
                else:
                    quiet = source == "simulated quiet"
                    a = replica_levels(rng, sims, n, [1.0] * GROUPS, 0.0, quiet)
                    b = replica_levels(rng, sims, n, ratios, 0.0, quiet)
                o = outcomes(a, b, pct)
                error = (
                    f"false fail {o['above']:.1%}" if up <= 1 + pct / 100 + 1e-9 else f"false pass {o['within']:.1%}"
                )
                rows.append(
                    (
                        source,
                        str(n),
                        f"{up - 1:+.0%}",
                        f"{o['within']:.1%}",
                        f"{o['above']:.1%}",
                        f"{o['inconclusive']:.1%}",
                        error,
                        f"{1 - o['above']:.1%}",
                    )
                )
                print("  " + " | ".join(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 100 simulations per cell")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument(
        "--outcomes-only", action="store_true", help="only the three-outcome table (within/above/inconclusive)"
    )
    args = ap.parse_args()
    sims = 100 if args.quick else 1000
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    rows = []

    def row(name, value, target):
        rows.append((name, value, target))
        print(f"  {name}: {value} (target {target})", file=sys.stderr, flush=True)

    outcome_rows = three_outcome_table(rng, sims)
    print("| series | n | true change (one of 3 groups) | within | above | inconclusive | error | old rule's pass |")
    print("|---|---|---|---|---|---|---|---|")
    for r in outcome_rows:
        print("| " + " | ".join(r) + " |")
    if args.outcomes_only:
        print(f"\n{sims} pairs of runs per cell, seed {args.seed}, {time.monotonic() - started:.0f} s")
        return 0
    for n in (3, 5):
        row(f"gate false alarms, no change, PCT 5, n={n}", f"{gate_rate(rng, sims, n, [1, 1, 1], 5):.2%}", "≤ 2.5%")
        row(
            f"gate false alarms, no change, PCT 0 (= significantly higher), n={n}",
            f"{gate_rate(rng, sims, n, [1, 1, 1], 0):.2%}",
            "≤ 2.5%",
        )
        row(
            f"gate false alarms, one group up exactly 5%, PCT 5, n={n}",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5):.2%}",
            "≤ 2.5%",
        )
        row(
            f"… the rejected rule (significant and estimate > 1.05), same data design, n={n}",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, rule='point'):.1%}",
            "(why it was rejected)",
        )
        row(
            f"gate false alarms, no change but a 2% run-to-run shift of the whole run, PCT 5, n={n}",
            f"{gate_rate(rng, sims, n, [1, 1, 1], 5, run_sd=0.02):.2%}",
            "≤ 2.5%",
        )
        row(
            f"… the same with PCT 0, n={n}",
            f"{gate_rate(rng, sims, n, [1, 1, 1], 0, run_sd=0.02):.1%}",
            "stated (PCT 0 tests for any change, day effects included)",
        )
        row(
            f"quiet series (flat only, replica cv 1%), one group up exactly 5%, PCT 5, n={n}: interval rule / rejected rule",
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, quiet=True):.2%} / "
            f"{gate_rate(rng, sims, n, [1.05, 1, 1], 5, rule='point', quiet=True):.1%}",
            "≤ 2.5% / (≈ 50% expected)",
        )
        for up in (1.10, 1.20):
            row(
                f"gate power, one group up {up - 1:.0%}, PCT 5, n={n}",
                f"{gate_rate(rng, sims, n, [up, 1, 1], 5):.1%}",
                "stated",
            )
    print("| figure | measured | target |\n|---|---|---|")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    print(f"\n{sims} simulated pairs of runs per cell, seed {args.seed}, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
