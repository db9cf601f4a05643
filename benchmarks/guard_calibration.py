"""False-trip and detection rates of the canary rollout's memory guards (alloclab.fleet.rollout), by
simulation on realistic series (outside the default test run).

    python benchmarks/guard_calibration.py [--n 20000] [--seed 20261122]

A healthy unit: its level on the old allocator is one reading of a flat AR(1) series (what
`fleet deploy` reads just before the restart); after the restart the new allocator holds the same
level, again AR(1) around it (tests/simulated_series.py flat: marginal SD a share of the level,
phi per guard sample). A guard trips when `persist` consecutive samples exceed the bound. The
false-trip rate is per unit per settle window; a fleet of 100 units is 1 - (1 - p)^100. Detection:
the same with a true increase of the level. Prints one markdown table.

`--startup` (issue 25): the same allocator redeployed onto units with a start-up curve like the
issue's case, level(age) = L * (1 + k * exp(-age / tau)) (k = 4 and tau 10 s: 5x the settled level
at start, as 28.4 MB against 5.9 MB; also k = 1, tau 30 s), AR(1) noise (2%, phi 0.9 per guard
sample). The old process ran A seconds (45 s, 5 min, 1 h); `fleet deploy` reads its level at A.
Three rules, each with --max-increase 25%, persist 3, settle 60 s: every sample against the old
level (the rule before), from --warmup auto on (min(A, settle / 2)), and the same-age comparison
with the old process's curve from the collector's store (sampled every 5 s from age 1 s, with
its own noise). False trips per unit, and detection of a true +50% on the same curve. Prints a
second markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.fleet import rollout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim


def trip_rate(
    rng,
    n: int,
    samples: int,
    *,
    margin: float,
    persist: int,
    sd: float,
    phi: float,
    truth: float = 1.0,
    absolute: bool = False,
) -> float:
    t = sim.times(samples - 1, 1.0)
    old_series = sim.flat(rng, n, np.arange(8.0), sd_share=sd, phi=phi)
    old = old_series[:, -1]  # one reading before the restart
    new = sim.flat(rng, n, t, sd_share=sd, phi=phi, level=100.0 * truth)
    trips = 0
    for i in range(n):
        bound = 100.0 * (1 + margin) if absolute else old[i] * (1 + margin)
        trips += rollout.first_persistent_excess(list(new[i]), bound, persist) is not None
    return trips / n


def startup_trip_rate(
    rng,
    n: int,
    *,
    rule: str,
    old_age: float,
    k: float,
    tau: float,
    truth: float = 1.0,
    settle: float = 60.0,
    every: float = 5.0,
    sd: float = 0.02,
    phi: float = 0.9,
) -> float:
    guards = rollout.Guards(max_increase=0.25, persist=3)
    ages = sim.times(settle, every)[1:]  # the settle watch's samples of the new process
    shape = lambda a: 100.0 * (1 + k * np.exp(-a / tau))
    new = truth * shape(ages)[None, :] * (1 + sim.ar1(rng, n, len(ages), phi, sd))
    old_ages = np.arange(1.0, old_age + 1e-9, every)  # what the collector stored of the old process
    old_curve = shape(old_ages)[None, :] * (1 + sim.ar1(rng, n, len(old_ages), phi, sd))
    old_level = shape(np.array([old_age]))[0] * (1 + sd * rng.normal(size=n))
    warmup = rollout.effective_warmup(guards, old_age, settle)
    trips = 0
    for i in range(n):
        if rule == "old":
            why = rollout.memory_trip(list(new[i]), old_level[i], guards)
        elif rule == "warmup":
            why = rollout.memory_trip(list(new[i]), old_level[i], guards, list(ages), warmup)
        else:
            why = rollout.memory_trip(
                list(new[i]), old_level[i], guards, list(ages), warmup, list(zip(old_ages, old_curve[i]))
            )
        trips += why is not None
    return trips / n


def startup_table(rng, n: int) -> None:
    print("| start-up curve | old process ran | rule | false trips per unit | per 100 units | detects +50% |")
    print("|---|---|---|---|---|---|")
    for k, tau in ((4.0, 10.0), (1.0, 30.0)):
        for old_age in (45.0, 300.0, 3600.0):
            for rule, name in (
                ("old", "every sample vs the old level (before)"),
                ("warmup", "--warmup auto"),
                ("curve", "same age, from --history"),
            ):
                p = startup_trip_rate(rng, n, rule=rule, old_age=old_age, k=k, tau=tau)
                power = startup_trip_rate(rng, max(1000, n // 10), rule=rule, old_age=old_age, k=k, tau=tau, truth=1.5)
                print(
                    f"| {1 + k:g}x at start, tau {tau:g} s | {old_age:g} s | {name} | {p:.3%} | "
                    f"{1 - (1 - p) ** 100:.1%} | {power:.1%} |",
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--startup", action="store_true", help="only the start-up table (issue 25)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.startup:
        startup_table(rng, args.n)
        return
    print(
        "| guard | noise (SD, phi) | settle samples | persist | false trips per unit | per 100 units | detects +50% |"
    )
    print("|---|---|---|---|---|---|---|")
    for margin, absolute in ((0.10, False), (0.25, False), (0.25, True)):
        for sd, phi in ((0.02, 0.9), (0.02, 0.99), (0.05, 0.95)):
            for samples in (12, 60):
                for persist in (1, 3):
                    p = trip_rate(
                        rng, args.n, samples, margin=margin, persist=persist, sd=sd, phi=phi, absolute=absolute
                    )
                    power = trip_rate(
                        rng,
                        max(2000, args.n // 10),
                        samples,
                        margin=margin,
                        persist=persist,
                        sd=sd,
                        phi=phi,
                        truth=1.5,
                        absolute=absolute,
                    )
                    name = (
                        f"--max-memory at 1.{int(margin * 100)}x the level"
                        if absolute
                        else f"--max-increase {margin:.0%}"
                    )
                    print(
                        f"| {name} | {sd:.0%}, {phi} | {samples} | {persist} | {p:.3%} | {1 - (1 - p) ** 100:.1%} | "
                        f"{power:.1%} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
