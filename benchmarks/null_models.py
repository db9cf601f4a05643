"""Which noise model the group route's null should simulate (steps.curve_null_p): replica p's of
the group route (steps.levelling_null_p, as ratchet_group runs it) on flat and climbing series,
under several models of the noise beside the replica's smooth curve.

    python benchmarks/null_models.py [--series 400 --seed 7 --models whittle,lags,oracle]

Series (each its own, no group): a smooth +10% climb in AR(1) 2% φ 0.9 over 1.5 days at 10 minutes
(217 bins), and flat AR(1) 1% φ 0.9 plus 2% white noise over 3 days at 5 minutes (865 bins) and
over 9 days at 15 minutes. A replica the own route calls Ratcheting, or without the staircase's
shape, gets p = 1 as in ratchet_group. Models:

  whittle        the rule: AR(1) + white by Whittle's likelihood on every Fourier frequency (whittle_noise)
  whittle-drop   the same above the k lowest frequencies, k the curve's columns
  lags           session 16's: step_noise's lag-1 and lag-2 reading (no lag-2 floor) at the residuals' SD
  oracle         the noise as generated (φ, white share and SD known)

Prints, per series kind and model, the share of series given p ≤ 0.01 / 0.05 / 0.25 (valid p's:
at most 1%, 5%, 25% of all series — p = 1 for those without the shape), the medians of φ and SD the model read, and
the share of 400 simulations of that model beside a straight +10% climb that have the staircase's
shape (a null that wanders more has more down-steps, fewer simulations with the shape, so fewer
as extreme as the data: its p's come out smaller). Seeded; calibration's streams are untouched.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.stats import step_evidence, steps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from alloclab.stats.rules import RULES
from tests import simulated_series as sim

KINDS = {  # name: (window s, interval s, make(rng, n, t), the generated noise (φ, white share, SD))
    # the step fit reads a series as shares of its median, ~1.05 × the climb's start: the noise's SD there is 2% / 1.05
    "climb +10%, AR(1) 2% φ 0.9, 1.5 d": (
        1.5 * 86400,
        600.0,
        lambda r, n, t: sim.growing(r, n, t, share=0.10, phi=0.9, sd_share=0.02),
        (0.9, 0.0, 0.02 / 1.05),
    ),
    "flat AR(1) 1% φ 0.9 + 2% white, 3 d": (
        3 * 86400,
        300.0,
        lambda r, n, t: sim.jittered(r, n, t, sd_share=0.01, phi=0.9, white_share=0.02),
        (0.9, 0.8, math.hypot(0.01, 0.02)),
    ),
    "flat AR(1) 1% φ 0.9 + 2% white, 9 d": (
        9 * 86400,
        900.0,
        lambda r, n, t: sim.jittered(r, n, t, sd_share=0.01, phi=0.9, white_share=0.02),
        (0.9, 0.8, math.hypot(0.01, 0.02)),
    ),
}


def lags_model(r: np.ndarray, k: int) -> tuple[float, float, float]:
    """Session 16's null: step_noise's reading without its lag-2 floor, at the residuals' SD."""
    saved = RULES["ratchet_white_min_lag2_se"]
    RULES["ratchet_white_min_lag2_se"] = -math.inf
    try:
        phi, white = steps.step_noise(r)
    finally:
        RULES["ratchet_white_min_lag2_se"] = saved
    return min(phi, 0.999), white, float(np.std(r, ddof=k))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=400, help="series per kind (default 400)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--models",
        default="whittle,whittle-drop,lags,oracle",
        help="comma-separated, of: whittle, whittle-drop, lags, oracle",
    )
    ap.add_argument("--kinds", default="", help="only the kinds whose names start with this")
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in ("whittle", "whittle-drop", "lags", "oracle")]
    kinds = [k for k in KINDS if k.startswith(args.kinds)]
    problem = (
        "unknown model " + ", ".join(unknown)
        if unknown
        else "no model given"
        if not models
        else f"no kind starts with {args.kinds!r}"
        if not kinds
        else "--series must be ≥ 1"
        if args.series < 1
        else ""
    )
    if problem:
        print(
            f"null_models.py: {problem} — give --models from whittle, whittle-drop, lags, oracle, --kinds a prefix of "
            f"{'; '.join(KINDS)}, and --series ≥ 1",
            file=sys.stderr,
        )
        return 2
    curve_null = steps.curve_null_p
    for kind in kinds:
        window, dt, make, truth = KINDS[kind]
        t = sim.times(window, dt)
        for model in models:
            read: list[tuple[float, float, float]] = []

            def null_p(x, basis, as_extreme, rng, sims, decide_at=None, unbiased_phi=False):
                curve = basis @ np.linalg.lstsq(basis, x, rcond=None)[0]
                res = x - curve
                k = basis.shape[1]
                phi, white, sd = {
                    "whittle": lambda: steps.whittle_noise(res),
                    "whittle-drop": lambda: steps.whittle_noise(res, k),
                    "lags": lambda: lags_model(res, k),
                    "oracle": lambda: truth,
                }[model]()
                read.append((phi, white, sd))
                return steps.simulated_p(curve, phi, sd, as_extreme, rng, sims, decide_at, white)

            steps.curve_null_p = null_p
            rng = np.random.default_rng(args.seed)  # every model sees the same series
            started = time.monotonic()
            ps = []
            try:
                for y in make(rng, args.series, t):
                    e = step_evidence(t, y)
                    if e.fit is None or e.ratcheting or not steps.group_shape(e.fit):
                        ps.append(1.0)
                        continue
                    ps.append(
                        steps.levelling_null_p(e.x, e.fit, rng, int(RULES["ratchet_group_sims"]), steps.cycle_of(e)).p
                    )
            finally:
                steps.curve_null_p = curve_null
            p = np.array(ps)
            m = np.array(read) if read else np.full((1, 3), np.nan)
            bins = len(step_evidence(t, make(np.random.default_rng(0), 1, t)[0]).x)
            climb = 0.10 * np.linspace(-0.5, 0.5, bins)
            phi, white, sd = np.median(m, axis=0)
            noise = sim.ar1(
                np.random.default_rng(args.seed), 400, bins, min(phi, 0.999), sd * math.sqrt(1 - white)
            ) + np.random.default_rng(args.seed + 1).normal(scale=sd * math.sqrt(white), size=(400, bins))
            shaped = np.mean([(f := steps.step_fit_x(climb + e)) is not None and steps.group_shape(f) for e in noise])
            print(
                f"{kind} | {model:12s} | p ≤ 0.01 / 0.05 / 0.25: {np.mean(p <= 0.01):.1%} / {np.mean(p <= 0.05):.1%} / "
                f"{np.mean(p <= 0.25):.1%} of {len(p)} ({len(read)} with the shape) | read φ {phi:.3f}, white {white:.2f}, "
                f"SD {sd:.2%} | its simulations beside a +10% climb with the shape {shaped:.0%} | {time.monotonic() - started:.0f} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
