"""False-trip and detection rates of the canary rollout's memory guards (alloclab.rollout), by
simulation on realistic series (outside the default test run).

    python benchmarks/guard_calibration.py [--n 20000] [--seed 20261122]

A healthy unit: its level on the old allocator is one reading of a flat AR(1) series (what
`fleet deploy` reads just before the restart); after the restart the new allocator holds the same
level, again AR(1) around it (alloclab.stats.calibration.flat: marginal SD a share of the level,
phi per guard sample). A guard trips when `persist` consecutive samples exceed the bound. The
false-trip rate is per unit per settle window; a fleet of 100 units is 1 - (1 - p)^100. Detection:
the same with a true increase of the level. Prints one markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab import rollout  # noqa: E402
from alloclab.stats import calibration as sim  # noqa: E402


def trip_rate(rng, n: int, samples: int, *, margin: float, persist: int, sd: float, phi: float, truth: float = 1.0,
              absolute: bool = False) -> float:
    t = sim.times(samples - 1, 1.0)
    old_series = sim.flat(rng, n, np.arange(8.0), sd_share=sd, phi=phi)
    old = old_series[:, -1]                                # one reading before the restart
    new = sim.flat(rng, n, t, sd_share=sd, phi=phi, level=100.0 * truth)
    trips = 0
    for i in range(n):
        bound = 100.0 * (1 + margin) if absolute else old[i] * (1 + margin)
        trips += rollout.first_persistent_excess(list(new[i]), bound, persist) is not None
    return trips / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| guard | noise (SD, phi) | settle samples | persist | false trips per unit | per 100 units | detects +50% |")
    print("|---|---|---|---|---|---|---|")
    for margin, absolute in ((0.10, False), (0.25, False), (0.25, True)):
        for sd, phi in ((0.02, 0.9), (0.02, 0.99), (0.05, 0.95)):
            for samples in (12, 60):
                for persist in (1, 3):
                    p = trip_rate(rng, args.n, samples, margin=margin, persist=persist, sd=sd, phi=phi, absolute=absolute)
                    power = trip_rate(rng, max(2000, args.n // 10), samples, margin=margin, persist=persist, sd=sd,
                                      phi=phi, truth=1.5, absolute=absolute)
                    name = f"--max-memory at 1.{int(margin * 100)}x the level" if absolute else f"--max-increase {margin:.0%}"
                    print(f"| {name} | {sd:.0%}, {phi} | {samples} | {persist} | {p:.3%} | {1 - (1 - p) ** 100:.1%} | "
                          f"{power:.1%} |", flush=True)


if __name__ == "__main__":
    main()
