"""Calibration of `alloclab fleet status` (alloclab/fleet/decision.py) on production-like fleets,
and the 1AEO replay: on which day would alloclab have let the operators stop?

    nice -n 10 python benchmarks/fleet_decision.py --part sim [--reps-null 300] [--reps-alt 150] [--naive-reps 60] [--seed 20261128]
    nice -n 10 python benchmarks/fleet_decision.py --part regrowth --units 5 20 80 --reps-null 100
    nice -n 10 python benchmarks/fleet_decision.py --part replay

--part sim: two groups of N units (N = 5, 20, 80), 14 days at 10-minute samples, a candidate whose
level is 1.0× (null), 0.7× or 1.3× the baseline's. Each unit's log memory is
    its own level (relays differ: N(0, 0.2), ~20%) + the group's effect
  + a daily cycle (amplitude 6%, common phase, each unit's phase jittered by N(0, 0.3) rad)
  + fast noise: AR(1), τ 1 h, SD 3%, heavy-tailed innovations (Student t, 3 df)
  + slow wander: AR(1), τ 2 days, SD 8%                        (two noise time scales)
  + regrowth after every process start: −0.4·e^(−age/8 h) (all units restarted at t = 0 by apply,
    and again at Poisson times, one per 10 days on average: restarts anywhere, each a new segment)
  + a network-wide level shift (+10% for every unit at a random time).
The status is computed exactly as `fleet status` does (decision.look_data and decision.decide, the
default LookPlan: looks every 12 h, horizon 14 d, settle 1 h, α 0.05). An operator looking every
hour sees, at hour h, the outcome of the grid looks up to h (the status between looks is the last
look's, tests/unit/test_fleet_decision.py checks it), so "decided by hour h under hourly looks" is
"decided at a grid look ≤ h". For contrast, the naive rule: Welch's t at 0.05 on the same levels at
every hourly look, stopping at the first p < 0.05.

Measured per cell: false decisions (lower or higher when the truth is 1.0×, or the wrong way;
`equivalent` decisions are counted apart), power (decided the true way by day 14), the median day
of decision among those, and how the projection made at day 2 ("expected at day X") compares with
the day the decision came. Intervals: Wilson 95%.

--part regrowth: equal steady levels, the baseline regrowing after the start with τ 24 h and the
candidate with τ 2 h; how often the status decides anyway, at settle 1 h and 1 d.

--part replay: the 1AEO TorUtils data in tests/data (5way-2026-01, co-unified-2025-12) imported
as alloclab would, and `fleet status` asked at every hour of it: the first hour each comparison
is decided, and the first hour every comparison is (the day alloclab would have said stop).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from datetime import UTC

from alloclab.analysis.load import Segment
from alloclab.fleet import decision
from alloclab.stats.group_tests import welch

DAY = 86400.0
STEP = 600.0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, c - h), min(1.0, c + h))


def ar1(rng, n_units: int, n: int, tau_s: float, sd: float, heavy: bool = False) -> np.ndarray:
    phi = math.exp(-STEP / tau_s)
    scale = sd * math.sqrt(1 - phi * phi)
    if heavy:
        e = rng.standard_t(3, size=(n_units, n)) / math.sqrt(3.0)  # unit variance, heavy tails
    else:
        e = rng.standard_normal((n_units, n))
    x = np.empty((n_units, n))
    x[:, 0] = rng.standard_normal(n_units) * sd
    for i in range(1, n):
        x[:, i] = phi * x[:, i - 1] + scale * e[:, i]
    return x


def fleet(rng, n_units: int, effect: float, days: float = 14.0, regrowth_h: tuple[float, float] = (8.0, 8.0)) -> list:
    n = int(days * DAY / STEP)
    t = np.arange(1, n + 1) * STEP
    series = []
    shift_at = rng.uniform(0, days * DAY)
    for (group, mu), tau_h in zip((("base", 0.0), ("cand", math.log(effect))), regrowth_h):
        u = rng.normal(0, 0.2, n_units)
        psi = rng.normal(0, 0.3, n_units)
        fast = ar1(rng, n_units, n, 3600.0, 0.03, heavy=True)
        slow = ar1(rng, n_units, n, 2 * DAY, 0.08)
        for i in range(n_units):
            starts = [0.0]
            while True:
                nxt = starts[-1] + rng.exponential(10 * DAY)
                if nxt >= days * DAY:
                    break
                starts.append(nxt)
            start_of = np.array(starts)[np.searchsorted(starts, t, side="right") - 1]
            age = t - start_of
            log_mb = (
                math.log(100.0)
                + mu
                + u[i]
                + 0.06 * np.sin(2 * math.pi * t / DAY + psi[i])
                + fast[i]
                + slow[i]
                - 0.4 * np.exp(-age / (tau_h * 3600.0))
                + np.where(t >= shift_at, math.log(1.1), 0.0)
            )
            segs = []
            for k, s0 in enumerate(starts):
                s1 = starts[k + 1] if k + 1 < len(starts) else math.inf
                inside = t[(t > s0) & (t <= s1)]
                if len(inside):
                    segs.append(Segment(float(inside[0]), float(inside[-1]), group, "restart" if k else "apply"))
            series.append(SimpleNamespace(t=t, mb=np.exp(log_mb), group=group, segments=segs))
    return series


def one(
    rng, n_units: int, effect: float, plan: decision.LookPlan, naive: bool, regrowth_h: tuple[float, float] = (8.0, 8.0)
) -> dict:
    series = fleet(rng, n_units, effect, regrowth_h=regrowth_h)
    looks = [(lt, decision.look_data(series, 0.0, lt, plan.settle_s)) for lt in plan.times()]
    final = decision.decide(looks, "base", plan).comparisons[0]
    early = decision.decide(looks[:4], "base", plan).comparisons[0]  # the status at day 2
    # the naive rule: a fixed-level Welch test at every hourly look
    naive_day = None
    for h in range(1, 14 * 24 + 1 if naive else 0):
        lv = decision.unit_levels(series, 0.0, h * 3600.0, plan.settle_s)
        if len(lv.get("base", [])) >= 2 and len(lv.get("cand", [])) >= 2:
            w = welch(np.log(lv["cand"]), np.log(lv["base"]))
            if w is not None and w.p < 0.05:
                naive_day = h / 24
                break
    return {
        "outcome": final.outcome,
        "day": None if final.look_s is None or final.state != "decided" else final.look_s / DAY,
        "early_state": early.state,
        "early_expected_day": None if early.expected_decision_s is None else early.expected_decision_s / DAY,
        "naive_day": naive_day,
    }


def part_sim(args) -> None:
    plan = decision.LookPlan()
    rng = np.random.default_rng(args.seed)
    cells = []
    for n_units in args.units:
        for effect in (1.0, 0.7, 1.3):
            reps = args.reps_null if effect == 1.0 else args.reps_alt
            t0 = time.process_time()
            rows = [one(rng, n_units, effect, plan, effect == 1.0 and k < args.naive_reps) for k in range(reps)]
            truth = None if effect == 1.0 else ("lower" if effect < 1 else "higher")
            wrong = sum(r["outcome"] in ("lower", "higher") and r["outcome"] != truth for r in rows)
            right = sum(r["outcome"] == truth for r in rows) if truth else 0
            equiv = sum(r["outcome"] == "equivalent" for r in rows)
            naive_n = min(reps, args.naive_reps)
            naive_false = sum(r["naive_day"] is not None for r in rows) if truth is None else None
            days = [r["day"] for r in rows if r["outcome"] == truth and r["day"] is not None] if truth else []
            proj = [
                (r["early_expected_day"], r["day"])
                for r in rows
                if r["early_state"] == "undecided"
                and r["early_expected_day"] is not None
                and r["day"] is not None
                and r["outcome"] == truth
            ]
            cell = {
                "units": n_units,
                "effect": effect,
                "reps": reps,
                "false_decisions": wrong,
                "false_rate": wrong / reps,
                "false_ci": wilson(wrong, reps),
                "equivalent": equiv,
                "power": right / reps if truth else None,
                "power_ci": wilson(right, reps) if truth else None,
                "median_day": float(np.median(days)) if days else None,
                "naive_hourly_reps": naive_n if truth is None else None,
                "naive_hourly_false_rate": None if naive_false is None else naive_false / naive_n,
                "naive_hourly_false_ci": None if naive_false is None else wilson(naive_false, naive_n),
                "projection_at_day2": {
                    "n": len(proj),
                    "median_expected_minus_actual_days": float(np.median([e - a for e, a in proj])) if proj else None,
                    "within_1_day": sum(abs(e - a) <= 1.0 for e, a in proj),
                },
                "cpu_s": round(time.process_time() - t0, 1),
            }
            cells.append(cell)
            print(json.dumps(cell), flush=True)
    print(json.dumps({"seed": args.seed, "load": open("/proc/loadavg").read().split()[:3], "cells": cells}))


def part_regrowth(args) -> None:
    """The same steady level, regrowth at different speeds after apply's restart (the baseline's
    τ 24 h, the candidate's 2 h): a decision here is about start-up, not the level; with the default
    settle (1 h) and with --settle 1d."""
    rng = np.random.default_rng(args.seed)
    for settle_h in (1.0, 24.0):
        plan = decision.LookPlan(settle_s=settle_h * 3600.0)
        for n_units in args.units:
            t0 = time.process_time()
            rows = [one(rng, n_units, 1.0, plan, False, regrowth_h=(24.0, 2.0)) for _ in range(args.reps_null)]
            wrong = sum(r["outcome"] in ("lower", "higher") for r in rows)
            days = [r["day"] for r in rows if r["outcome"] in ("lower", "higher")]
            print(
                json.dumps(
                    {
                        "settle_h": settle_h,
                        "units": n_units,
                        "reps": args.reps_null,
                        "decided": wrong,
                        "rate": wrong / args.reps_null,
                        "ci": wilson(wrong, args.reps_null),
                        "median_day": float(np.median(days)) if days else None,
                        "cpu_s": round(time.process_time() - t0, 1),
                    }
                ),
                flush=True,
            )
    print(json.dumps({"seed": args.seed, "load": open("/proc/loadavg").read().split()[:3]}))


def part_replay(args) -> None:
    from datetime import timedelta, timezone

    from alloclab.store import Store
    from alloclab.torutils.importer import import_torutils
    from tests.conftest import DATASETS

    plan = decision.LookPlan()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tz in (("5way-2026-01", timezone(timedelta(hours=-8))), ("co-unified-2025-12", UTC)):
            store = Store.open(import_torutils(DATASETS / name, Path(tmp) / name, tz))
            run = decision.load_run(store)
            first: dict[str, float] = {}
            stop_day, rec, hours = None, None, int((run.t_last - run.t0) // 3600) + 1
            for h in range(1, hours + 1):
                st = decision.status_at(run, plan, run.t0 + h * 3600.0)
                for c in st.comparisons:
                    if c.state == "decided" and c.group not in first:
                        first[c.group] = h / 24
                if st.recommended is not None and stop_day is None:
                    stop_day, rec = h / 24, st.recommended
            final = decision.status_at(run, plan)
            out[name] = {
                "days": (run.t_last - run.t0) / DAY,
                "baseline": run.baseline,
                "hourly_looks": hours,
                "first_decided_day": first,
                "stop_day": stop_day,
                "recommended_then": rec,
                "final": [decision.status_line(c, plan) for c in final.comparisons],
            }
            store.close()
            print(json.dumps({name: out[name]}, indent=1), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["sim", "regrowth", "replay"], required=True)
    ap.add_argument("--units", type=int, nargs="+", default=[5, 20, 80])
    ap.add_argument("--reps-null", type=int, default=300)
    ap.add_argument("--reps-alt", type=int, default=150)
    ap.add_argument(
        "--naive-reps", type=int, default=60, help="null replications that also run the naive hourly test (costly)"
    )
    ap.add_argument("--seed", type=int, default=20261128)
    args = ap.parse_args()
    {"sim": part_sim, "regrowth": part_regrowth, "replay": part_replay}[args.part](args)


if __name__ == "__main__":
    main()
