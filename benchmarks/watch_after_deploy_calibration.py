"""False-alert and detection rates of AlloclabMemoryIncreaseAfterDeploy (monitoring/prometheus/
alloclab-rules.yml): a unit's resident memory above (1 + margin) x its level before the deploy,
held for an hour. The level before is the collector's mean over PRE_DEPLOY_S before the deploy
(alloclab.fleet.collector); this simulation is what chose that window. Outside the default test run.

    python benchmarks/watch_after_deploy_calibration.py [--n 1000] [--seed 20261128]

Each unit: 2 days before the deploy and 14 days after it, one sample every 5 minutes (the hour is
12 samples in a row); its level L x (1 + a daily cycle of amplitude A, the phase of the clock, +
fast AR(1) noise (SD 2%, phi 0.9 a sample) + a slow wander (SD 3%, autocorrelation 1.7 days) +
heavy tails where named). The deploy restarts it (memory drops to 40% and regrows with a 30-minute
time constant), and each unit restarts once more at a random time after it. A/A: the same
allocator after the deploy (every alert is false). Detection: the level truly 1.5x after it. The
deploy happens at a random time of day. Per unit, the share of units alerted within the 14 days,
for a window of 1 hour and of 24 hours before the deploy. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim

STEP = 300.0  # seconds between samples
BEFORE, AFTER = 2 * 86400.0, 14 * 86400.0
HOLD = 12  # samples: the rule's `for: 1h`
MARGIN = 0.25


def units(
    rng, n: int, *, amplitude: float, df: float | None, truth: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, series, deploy time): n units around a level of 100."""
    t = sim.times(BEFORE + AFTER, STEP)
    deploy = BEFORE + rng.uniform(0, 86400.0, size=(n, 1)) - 86400.0 / 2  # any time of day
    day = amplitude * np.sin(2 * np.pi * t[None, :] / 86400.0)
    slow = sim.ar1(rng, n, len(t), float(np.exp(-STEP / (1.7 * 86400))), 0.03)
    fast = sim.ar1(rng, n, len(t), 0.9, 0.02, df=df)
    level = np.where(t[None, :] >= deploy, truth, 1.0)
    # restarts: the deploy's, and one more at a random time after it, each regrowing from 40%
    again = deploy + rng.uniform(3600.0, AFTER - 86400.0, size=(n, 1))
    since = np.where(t[None, :] >= again, t[None, :] - again, t[None, :] - deploy)
    regrow = np.where(t[None, :] >= deploy, 1 - 0.6 * np.exp(-np.maximum(since, 0) / 1800.0), 1.0)
    return t, 100.0 * level * regrow * (1 + day) + 100.0 * (slow + fast), deploy


def alerted(t, x, deploy, window_s: float) -> np.ndarray:
    """Per unit: the time from the deploy to the alert (inf: none in the 14 days)."""
    before = (t[None, :] >= deploy - window_s) & (t[None, :] < deploy)
    level = np.nanmean(np.where(before, x, np.nan), axis=1, keepdims=True)
    above = ((x > (1 + MARGIN) * level) & (t[None, :] >= deploy)).astype(np.int32)
    run = np.cumsum(above, axis=1)
    held = np.zeros_like(above, dtype=bool)
    held[:, HOLD - 1 :] = (
        run[:, HOLD - 1 :] - np.concatenate([np.zeros((len(x), 1), np.int32), run[:, :-HOLD]], axis=1)
    ) == HOLD
    first = np.where(held.any(axis=1), t[np.argmax(held, axis=1)], np.inf)
    return first - deploy[:, 0]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="units per row")
    ap.add_argument("--seed", type=int, default=20261128)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = [
        ("A/A, no daily cycle", 0.0, None, 1.0),
        ("A/A, daily cycle ±10%", 0.10, None, 1.0),
        ("A/A, daily cycle ±20%", 0.20, None, 1.0),
        ("A/A, daily cycle ±10%, heavy tails (t, 3 df)", 0.10, 3.0, 1.0),
        ("truly 1.5x, daily cycle ±10%", 0.10, None, 1.5),
        ("truly 1.5x, daily cycle ±20%", 0.20, None, 1.5),
    ]
    print(
        f"| series ({args.n} units a row, 14 days after) | level before: mean of | units alerted | median time to alert |"
    )
    print("|---|---|---|---|")
    for name, amplitude, df, truth in rows:
        t, x, deploy = units(rng, args.n, amplitude=amplitude, df=df, truth=truth)
        for label, window in (("1 h before", 3600.0), ("24 h before", 86400.0)):
            when = alerted(t, x, deploy, window)
            hit = np.isfinite(when)
            median = f"{np.median(when[hit]) / 3600:.1f} h" if hit.any() else "—"
            print(f"| {name} | {label} | {hit.mean():.1%} | {median} |")


if __name__ == "__main__":
    main()
