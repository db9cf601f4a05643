"""False-alarm rate of the identical-series warning at fleet scale, and its power on a real
duplicate: 200 synthetic relays x 9 days sampled every minute (12,960 timestamps each), memory in
whole kB as /proc reports it, relays at close levels with AR(1) noise, restarts and plateaus
(stretches where a relay's memory does not move, the case that makes values coincide).
Run: .venv/bin/python benchmarks/identical_series_false_alarm.py [--relays 200] [--days 9]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from alloclab.analysis.load import Segment, Series
from alloclab.analysis.warnings import identical_pairs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim


def relays(rng: np.random.Generator, n: int, days: float) -> list[Series]:
    t = sim.times(days * 86400, 60.0)
    base = sim.flat(rng, n, t, level=1.0, sd_share=0.002, phi=0.99)  # shares of the level
    levels = rng.uniform(1_000_000, 1_050_000, n)[:, None]  # close levels, kB
    y = np.round(base * levels)
    for i in range(n):  # plateaus: memory not moving
        for start in rng.integers(0, len(t) - 600, 6):
            y[i, start : start + rng.integers(60, 600)] = y[i, start]
    out = []
    nan = np.full(len(t), np.nan)
    for i in range(n):
        out.append(
            Series(
                i,
                f"relay{i}",
                "g",
                None,
                t,
                y[i] / 1024,
                np.array([None] * len(t), dtype=object),
                nan,
                nan,
                nan,
                nan,
                [Segment(float(t[0]), float(t[-1]), "g", "whole")],
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relays", type=int, default=200)
    ap.add_argument("--days", type=float, default=9.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    fleet = relays(rng, args.relays, args.days)
    started = time.time()
    pairs = identical_pairs(fleet)
    n_pairs = args.relays * (args.relays - 1) // 2
    print(
        f"{args.relays} relays x {args.days:g} days: {len(pairs)} of {n_pairs} pairs flagged "
        f"({len(pairs) / n_pairs:.2e}) in {time.time() - started:.0f} s"
    )
    # power: a duplicate that began mid-run (relay0's process also read as relay1 from day 4)
    dup = fleet[1]
    k = len(dup.t) * 4 // 9
    dup.mb = np.concatenate([dup.mb[:k], fleet[0].mb[k:]])
    print(
        "mid-run duplicate detected:", any({a, b} == {"relay0", "relay1"} for a, b, _, _ in identical_pairs(fleet[:2]))
    )


if __name__ == "__main__":
    main()
