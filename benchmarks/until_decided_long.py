"""`run --until-decided` on long services (hours to 2 days, a sample every 10–60 s) by simulation:
its false decisions under the repeated looks, how often and when it stops, its power on a 0.7×
group. benchmarks/demo_stop_rule.py calibrates the rule on the 5-minute demo only; figures and the
command: benchmarks/until_decided_long.md.

    nice -n 10 python benchmarks/until_decided_long.py                # 1,000 simulated runs a cell
    nice -n 10 python benchmarks/until_decided_long.py --sims 100     # a quick look (wider intervals)
    nice -n 10 python benchmarks/until_decided_long.py --without restart,shift   # what a breach comes from

The rule is the object `run --until-decided` gives the runner (commands/run.py): `stopping.
SignificanceStop(first, n_comparisons=3, planned_s, interval, every=True)` with first = max(60 s,
the default --stable-for, warm-up + 10 samples) and the planned end = --max-duration. The runner
calls it at every tick; it analyses only when a look is due. Here the simulated run's ticks at the
looks call the same object's `due` and `decide` (its analysis step, analysis.analyse on the store,
is replaced by the levels that step would give: below); its __call__'s re-plan is a no-op for a
warm-up that was not held and a planned end that did not move, so the plan is the one it made.

A replica's level at a look is the analysis's steady mean (analysis/replica.py, replica_stats_
steady): the mean of its samples after the warm-up phase; for a replica restarted before the look,
its last process only (Series.clean), the regrowth recognised and modelled as the analysis does
(regrowth.fit, regrowth.adjusted; replica.detect_warmup where no regrowth is recognised).

The series (multiplicative, per replica): a persistent offset (log-sd 2%); a daily cycle of
amplitude 5–10% (one draw a run), its phase one draw a run (the service's clock) jittered per
replica (sd 1 h); a slow wander (AR(1), time constant 1–6 h, marginal sd 3%); fast noise (AR(1),
time constant 10 s–5 min, marginal sd 2%, Student-t(3) innovations: heavy-tailed spikes); in every
group one replica restarted at a random time after the warm-up (memory down by 30–70%, regrowth
time constant 10 min–3 h, log-uniform) and another with a level shift of ±3–10% at a random time.
Every group, the baseline included, has the same disturbances, so a group at ratio 1 is equal to
the baseline in distribution. Seeded (--seed; each cell its own stream).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from calibration_parts.common import clopper_pearson
from demo_stop_rule import pct, wrong

from alloclab.analysis import regrowth
from alloclab.analysis.replica import detect_warmup
from alloclab.run.stopping import SignificanceStop
from tests import simulated_series as sim

WARMUP = 600.0  # the experiment's warm-up phase (s)
STABLE_FOR = 60.0  # --stable-for's default
DAY = 86400.0
PLANS = [("6 h @ 10 s", 6 * 3600.0, 10.0), ("24 h @ 30 s", DAY, 30.0), ("48 h @ 60 s", 2 * DAY, 60.0)]
COMPOSITIONS = {
    "A/A/0.7×": {"b": 1.0, "c": 1.0, "d": 0.7},
    "complete null": {"b": 1.0, "c": 1.0, "d": 1.0},
    "all different: 1.3×/0.85×/0.7×": {"b": 1.3, "c": 0.85, "d": 0.7},
}
DISTURBANCES = ("cycle", "restart", "shift", "tails")


def group_series(
    rng: np.random.Generator, n: int, t: np.ndarray, level: float, cycle: tuple[float, float], without: set[str]
) -> tuple[np.ndarray, int | None, int | None]:
    """(n, len(t)) series of one group's replicas at `level`, the replica that restarts and the
    index of its first sample as a new process (None, None: no restart)."""
    dt = float(t[1] - t[0])
    amp, phase = cycle
    log = rng.normal(0, 0.02, (n, 1))
    log = log + sim.ar1(rng, n, len(t), float(np.exp(-dt / rng.uniform(3600, 6 * 3600))), 0.03)
    log = log + sim.ar1(
        rng, n, len(t), float(np.exp(-dt / rng.uniform(10, 300))), 0.02, df=None if "tails" in without else 3
    )
    ys = level * np.exp(log)
    if "cycle" not in without:
        jitter = rng.normal(0, 2 * np.pi / 24, (n, 1))
        ys *= 1 + amp * np.sin(2 * np.pi * t[None, :] / DAY + phase + jitter)
    who = rng.permutation(n)
    if "shift" not in without:
        at = rng.uniform(WARMUP, t[-1])
        ys[who[1]] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.03, 0.10) * (t >= at)
    if "restart" in without:
        return ys, None, None
    at = rng.uniform(WARMUP, t[-1])
    tau = float(np.exp(rng.uniform(np.log(600), np.log(3 * 3600))))
    since = t - at
    ys[who[0]] *= np.where(since < 0, 1.0, 1 - rng.uniform(0.3, 0.7) * np.exp(-np.maximum(since, 0) / tau))
    return ys, int(who[0]), int(np.searchsorted(t, at))


def restarted_level(t: np.ndarray, y: np.ndarray) -> float | None:
    """The steady mean of a replica's last process (its samples from its restart on), as
    replica_stats_steady takes it: the regrowth recognised and its steep part left out, the rest
    adjusted; else detect_warmup's start."""
    reg = regrowth.fit(t, y, float(t[0]))
    start = int(np.searchsorted(t, reg.steady_from, side="left")) if reg else detect_warmup(t, y)
    sy = regrowth.adjusted(t[start:], y[start:], reg)
    return float(np.mean(sy)) if len(sy) else None


def simulate(
    rng: np.random.Generator, n_sims: int, n: int, ratios: dict, run_s: float, dt: float, without: set
) -> dict:
    """n_sims runs of a baseline and `ratios`' groups, n replicas each, on the plan for run_s."""
    t = np.arange(0.0, run_s + dt / 2, dt)
    first = max(STABLE_FOR, WARMUP + 10 * dt)
    steady0 = int(np.searchsorted(t, WARMUP))  # the first sample after the warm-up phase
    truth = {"a": 1.0, **ratios}
    out = {"stop": 0, "early": 0, "false": 0, "false_any": 0, "when": [], "power": 0, "looks": None, "open": {}}
    for _ in range(n_sims):
        stop = SignificanceStop(first, n_comparisons=len(ratios), planned_s=run_s, interval=dt, every=True)
        out["looks"] = stop.test.look_times_s
        cycle = (rng.uniform(0.05, 0.10), rng.uniform(0, 2 * np.pi))
        drawn = {g: group_series(rng, n, t, 100.0 * r, cycle, without) for g, r in truth.items()}
        cums = {g: np.cumsum(ys[:, steady0:], axis=1) for g, (ys, _, _) in drawn.items()}
        stopped_at = None
        for x in stop.test.look_times_s:
            j = int(np.searchsorted(t, x))  # the first tick at or after the look
            assert stop.due(t[j])
            reps = []
            for g, (ys, who, at) in drawn.items():
                for r in range(n):
                    if r == who and at <= j:
                        level = restarted_level(t[at : j + 1], ys[r, at : j + 1])
                    else:
                        level = cums[g][r, j - steady0] / (j - steady0 + 1)
                    reps.append(SimpleNamespace(group=g, steady_mean_mb=level, verified=True, excluded=None))
            a = SimpleNamespace(replicas=reps, groups=[SimpleNamespace(name=g) for g in truth], baseline="a")
            if stop.decide(a, float(t[j])):
                stopped_at = float(t[j])
                break
        decided = stop.test.decided
        if stopped_at is not None:
            out["stop"] += 1
            out["when"].append(stopped_at)
            out["early"] += stop.test.looks < len(stop.test.look_times_s)
            out["false"] += any(wrong(s, truth[g]) for g, (s, _, _) in decided.items())
        else:
            for g in ratios:
                if g not in decided:
                    out["open"][g] = out["open"].get(g, 0) + 1
        out["false_any"] += any(wrong(s, truth[g]) for g, (s, _, _) in decided.items())
        out["power"] += decided.get("d", ("",))[0] == "lower"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated runs a cell")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--without", default="", help=f"comma-separated disturbances left out: {', '.join(DISTURBANCES)}")
    ap.add_argument("--cells", default="", help="only cells whose name contains this")
    a = ap.parse_args()
    without = {w for w in a.without.split(",") if w}
    if without - set(DISTURBANCES):
        ap.error(f"--without takes {', '.join(DISTURBANCES)}")
    started = time.monotonic()
    print(
        "| plan | replicas | groups vs baseline | any false decision | false decision in a stop | stopped by the rule "
        "| of which before the last look | median stop (of the cap) | 0.7× decided lower | left open at the cap |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    c = 0
    for plan, run_s, dt in PLANS:
        for n in (3, 5):
            for comp, ratios in COMPOSITIONS.items():
                c += 1
                name = f"{plan} {n} {comp}"
                if a.cells not in name:
                    continue
                rng = np.random.default_rng([a.seed, c])
                r = simulate(rng, a.sims, n, ratios, run_s, dt, without)
                when = f"{np.median(r['when']) / 3600:.1f} h ({np.median(r['when']) / run_s:.0%})" if r["when"] else "–"
                power = pct(r["power"], a.sims) if ratios["d"] != 1.0 else "–"
                open_ = ", ".join(f"{g} ({ratios[g]:g}×) {k / a.sims:.0%}" for g, k in sorted(r["open"].items())) or "–"
                looks = "/".join(f"{x / 3600:.3g}" for x in r["looks"])
                print(
                    f"| {plan} (looks {looks} h) | {n} | {comp} | {pct(r['false_any'], a.sims)} | "
                    f"{pct(r['false'], a.sims)} | {pct(r['stop'], a.sims)} | {r['early'] / a.sims:.1%} | {when} | {power} | "
                    f"{open_} |",
                    flush=True,
                )
    lo, hi = clopper_pearson(0, a.sims)
    print(
        f"\nseed {a.seed}, {a.sims} simulated runs a cell, without: {', '.join(sorted(without)) or 'nothing'}, "
        f"{time.monotonic() - started:.0f} s (0 of {a.sims}: [{lo:.1%}–{hi:.1%}])"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
