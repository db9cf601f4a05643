"""Calibration of `alloclab bisect`'s step rule (stats.ThresholdTest) and of whole bisections, by
simulation on realistic series (outside the default test run).

    .venv/bin/python benchmarks/bisect_calibration.py            # the figures in docs/how-to/bisect-sweep.md
    .venv/bin/python benchmarks/bisect_calibration.py --quick    # smoke test, wider error bars

A step is simulated as the runner sees it: n replicas a side, each a series sampled every 2 s (AR(1)
noise φ = 0.95 with a 2% marginal SD, or a tor-dircache-like staircase that climbs 8% in uneven
steps and never comes down) times a lognormal replica effect (cv 5%); the candidate's series are
the same kind times the true ratio. At each look (first at 60 s, then at doublings, the last before
the 10-minute maximum: the defaults of `alloclab bisect`) every replica's level is its mean from the
end of a 20 s warm-up to the look, as the analysis computes it, and ThresholdTest decides.
Prints one markdown table (figure, measured, target, n); seeded (--seed).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.stats import ThresholdTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim

INTERVAL, WARMUP, FIRST, MAX = 2.0, 20.0, 60.0, 600.0
THRESHOLD = 1.10
ROWS: list[tuple[str, str, str, int]] = []


def row(name: str, value: str, target: str, n: int) -> None:
    ROWS.append((name, value, target, n))
    print(f"  {name}: {value} (target {target}, n={n})", file=sys.stderr, flush=True)


def series(rng: np.random.Generator, n: int, t: np.ndarray, kind: str, ratio: float) -> np.ndarray:
    effect = sim.replica_levels(rng, 1, n, ratio, 0.05)[0][:, None] / 100.0
    base = (
        sim.flat(rng, n, t, sd_share=0.02, phi=0.95)
        if kind == "ar1"
        else sim.staircase(rng, n, t, climb_share=0.08, steps=6)
    )
    return effect * base


def step(rng: np.random.Generator, n: int, kind: str, ratio: float) -> tuple[str, int]:
    """One simulated step: ("bad" | "good" | "undecided", looks spent)."""
    t = sim.times(MAX, INTERVAL)
    good, cand = series(rng, n, t, kind, 1.0), series(rng, n, t, kind, ratio)
    max_looks = int(math.floor(math.log2((MAX - 2 * INTERVAL) / FIRST))) + 1
    test = ThresholdTest(THRESHOLD, 0.05, max_looks=max_looks, first_look_s=FIRST)
    w = t >= WARMUP
    for k in range(max_looks):
        at = FIRST * 2**k
        m = w & (t <= at)
        d = test.update(good[:, m].mean(axis=1), cand[:, m].mean(axis=1), elapsed_s=at)
        if d.verdict:
            return d.verdict, test.looks
    return "undecided", test.looks


def steps(rng: np.random.Generator, sims: int) -> None:
    for kind in ("ar1", "staircase"):
        for n in (3, 5, 8):
            for ratio in (1.0, THRESHOLD, 1.21, 1.5):
                out = [step(rng, n, kind, ratio) for _ in range(sims)]
                share = {v: sum(o[0] == v for o in out) / sims for v in ("bad", "good", "undecided")}
                decided = [o[1] for o in out if o[0] != "undecided"]
                looks = f", mean looks to decide {np.mean(decided):.1f}" if decided else ""
                wrong = ("bad" if ratio <= THRESHOLD else "") + ("good" if ratio >= THRESHOLD else "")
                target = {"bad": "bad ≤ 5%", "good": "good ≤ 5%", "badgood": "bad ≤ 5% and good ≤ 5%"}[wrong]
                row(
                    f"step, true ratio {ratio:g} (threshold {THRESHOLD:g}), {kind}, n={n} a side",
                    f"bad {share['bad']:.1%} / good {share['good']:.1%} / undecided {share['undecided']:.1%}{looks}",
                    target,
                    sims,
                )


def bisection(rng: np.random.Generator, sims: int, n: int, kind: str, values: int = 8) -> None:
    """Whole searches over `values` versions (the good end first, the bad end last, checked first):
    the first bad at a random position; good versions at true ratios U(0.95, 1.05), bad ones at
    U(1.25, 1.6)."""
    right = wrong = undecided = 0
    used = []
    for _ in range(sims):
        first_bad = int(rng.integers(1, values))
        ratios = [rng.uniform(0.95, 1.05) if i < first_bad else rng.uniform(1.25, 1.6) for i in range(values)]
        lo, hi, count, status = 0, values - 1, 0, "found"
        v, _ = step(rng, n, kind, ratios[hi])
        count += 1
        if v != "bad":
            status = "undecided"
        while status == "found" and hi - lo > 1:
            mid = (lo + hi) // 2
            v, _ = step(rng, n, kind, ratios[mid])
            count += 1
            if v == "bad":
                hi = mid
            elif v == "good":
                lo = mid
            else:
                status = "undecided"
        used.append(count)
        if status != "found":
            undecided += 1
        elif hi == first_bad:
            right += 1
        else:
            wrong += 1
    row(
        f"whole bisect over {values} versions, {kind}, n={n} a side (bad end checked first)",
        f"right {right / sims:.1%} / wrong {wrong / sims:.1%} / undecided {undecided / sims:.1%}; "
        f"mean {np.mean(used):.2f} steps (exhaustive: {values - 1})",
        "wrong ≤ 5%",
        sims,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    sims = 100 if args.quick else 400
    started = time.monotonic()
    steps(rng, sims)
    for n in (3, 5) if args.quick else (3, 5, 8):
        for kind in ("ar1", "staircase"):
            bisection(rng, sims // 2 if args.quick else 200, n, kind)
    print(f"\n(seed {args.seed}, {time.monotonic() - started:.0f} s)\n")
    print("| figure | measured | target | n |\n|---|---|---|---|")
    for name, value, target, n in ROWS:
        print(f"| {name} | {value} | {target} | {n} |")


if __name__ == "__main__":
    main()
