"""The demo's stop rule (`run --until-decided`: stop once every comparison with the baseline is
decided) by simulation: its false-decision rate under the repeated looks, its power and when it
stops, on the demo's plan. Figures and their history: benchmarks/demo_stop_rule.md.

    nice -n 10 python benchmarks/demo_stop_rule.py                 # 1,000 simulated runs a cell
    nice -n 10 python benchmarks/demo_stop_rule.py --sims 200      # a quick look (wider intervals)

The demo's plan (commands/demo.py): 5 groups × 3 relays, 2 s samples, warm-up 30 s, the first look
at 100 s, looks at doublings and a last one 10 s before the run's planned end (stopping.
planned_look_times), α in proportion to each look's elapsed time, Holm over the 4 comparisons
(stats.SequentialTest until="every", the code the demo runs). A relay's level at a look is its mean
since the warm-up (the analysis's steady mean). Two plans: the run as planned (243 s: set-up took
its allowance) and one a busy machine's set-up shortened by 60 s (Runner.deadline).

The series are shaped like the real relays' (23 real demo runs, this machine, measured on their
stored samples: between-relay log-sd, within-relay noise and its lag-1 correlation, the drift over
the load; the table GROUPS below). Each relay: a persistent offset, a drift of its own, two noise
time scales (a slow AR(1), time constant ~100 s, and a fast one with Student-t(3) innovations:
heavy tails), a ±3% level shift at a random time in a quarter of the relays, and in 5% of relays an
early end at a random time (the analysis then leaves the relay out, so the rule sees 2 relays from
then on). Daily cycles do not enter a 4-minute run. Seeded (--seed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from calibration_parts.common import clopper_pearson

from alloclab.commands import demo
from alloclab.run.stopping import planned_look_times
from alloclab.stats import SequentialTest
from alloclab.stats.group_tests import compare_to_baseline
from alloclab.stats.rules import RULES
from alloclab.stats.sequential import DECIDED
from tests import simulated_series as sim

INTERVAL = 2.0
WARMUP = float(demo.REAL_WARMUP_S)
FIRST_LOOK = float(demo.REAL_FIRST_LOOK_S)
RUN_S = 300 - 2 - demo.SETUP_ALLOWANCE_S - demo.REPORT_ALLOWANCE_S  # the demo's run with cached provisioning
N = 3
MARGIN = RULES["equivalence_margin"]

# Per group, from the stored samples of 23 real demo runs (benchmarks/demo_stop_rule.md, "The
# series"): (persistent between-relay log-sd, slow noise sd (φ 0.98 a sample), fast noise sd (φ 0.2,
# t(3)), mean drift over the load, the drift's spread between relays), set so that the relays'
# spread at the first look matches the real runs' (MEASURED_SD; the realism lines of the output).
GROUPS = {
    "glibc": (0.013, 0.012, 0.003, 0.010, 0.015),
    "jemalloc-5.3.0": (0.003, 0.005, 0.050, 0.040, 0.006),
    "mimalloc-2.0.9": (0.008, 0.008, 0.080, 0.045, 0.010),
    "mimalloc-3.0.1": (0.028, 0.030, 0.010, 0.075, 0.030),
    "mimalloc-3.6.0": (0.030, 0.050, 0.090, 0.180, 0.050),
}
MEASURED_SD = {
    "glibc": 0.015,
    "jemalloc-5.3.0": 0.009,
    "mimalloc-2.0.9": 0.018,
    "mimalloc-3.0.1": 0.031,
    "mimalloc-3.6.0": 0.051,
}  # median over the 23 runs of the between-relay log-sd of the load's mean
NAMES = list(GROUPS)


def relays(
    rng: np.random.Generator, n_sims: int, shape: str, level: float, t: np.ndarray, drift: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(n_sims, N, len(t)) series of one group's relays drawn with `shape`'s noise at `level` (and
    `shape`'s mean drift unless `drift` is given), and (n_sims, N) the time each relay ends early
    (inf: it does not)."""
    between, slow, fast, own_drift, spread = GROUPS[shape]
    k = n_sims * N
    off = np.exp(rng.normal(0, between, (n_sims, N)))
    d = rng.normal(own_drift if drift is None else drift, spread, (n_sims, N))
    frac = np.clip((t - WARMUP) / (t[-1] - WARMUP), 0, None)
    noise = (sim.ar1(rng, k, len(t), 0.98, slow) + sim.ar1(rng, k, len(t), 0.2, fast, df=3)).reshape(n_sims, N, len(t))
    ys = level * off[..., None] * (1 + d[..., None] * frac) * np.exp(noise)
    shifted = rng.random((n_sims, N)) < 0.25
    at = rng.uniform(WARMUP, t[-1], (n_sims, N))
    ys *= 1 + (shifted * rng.choice([-0.03, 0.03], (n_sims, N)))[..., None] * (t >= at[..., None])
    ends = np.where(rng.random((n_sims, N)) < 0.05, rng.uniform(WARMUP, t[-1], (n_sims, N)), np.inf)
    return ys, ends


def wrong(status: str, ratio: float) -> bool:
    """A decision the truth contradicts: lower/higher on the wrong side of 1 (or at 1), equivalent
    outside the ±margin."""
    if status == "lower":
        return ratio >= 1.0
    if status == "higher":
        return ratio <= 1.0
    return not 1 / (1 + MARGIN) <= ratio <= 1 + MARGIN


def simulate(rng, n_sims: int, cell: dict[str, tuple[str, float]], run_s: float) -> dict:
    """Each group's (shape, true ratio to glibc) in `cell`; the every rule on the plan for `run_s`.
    A group at ratio 1 takes glibc's mean drift (its own noise, spread and drift spread), so its
    true level stays glibc's the whole run; the others drift as their shape does (the ratio holds
    at the load's start). Per simulated run: stopped or not and at which look; a false decision
    in the stop (some group decided wrongly: `wrong`) or anywhere (a group decided wrongly, the
    run stopped or not); the naive rule beside it (no spending: stop at the first look where
    every comparison's status at 0.05 is lower, higher or equivalent)."""
    looks = planned_look_times(FIRST_LOOK, run_s, INTERVAL)
    t = np.arange(0.0, run_s + INTERVAL / 2, INTERVAL)
    base_drift = GROUPS["glibc"][3]
    drawn = {
        g: relays(rng, n_sims, shape, 100.0 * ratio, t, base_drift if ratio == 1.0 else None)
        for g, (shape, ratio) in cell.items()
    }
    w = t >= WARMUP
    at = [int(np.searchsorted(t, x)) for x in looks]
    out = {
        "stop": 0,
        "false": 0,
        "false_any": 0,
        "naive_false": 0,
        "naive_stop": 0,
        "when": [],
        "looks": looks,
        "cap_open": {},
        "sd": {g: [] for g in cell},
    }
    for i in range(n_sims):
        test = SequentialTest(0.05, len(cell) - 1, look_times_s=looks, until="every")
        naive_done = stopped = False
        for j, x in zip(at, looks):
            levels = {}
            for g, (ys, ends) in drawn.items():
                keep = ends[i] > t[j]  # a relay that ended early is left out from then on
                levels[g] = ys[i][:, w & (t <= t[j])][keep].mean(axis=1)
            if j == at[0]:  # at the first look: the relays' spread
                for g, v in levels.items():
                    out["sd"][g].append(np.std(np.log(v), ddof=1) if len(v) > 1 else np.nan)
            if not stopped:
                d = test.update(levels, "glibc", elapsed_s=x)
                if d.stop:
                    stopped = True
                    out["stop"] += 1
                    out["when"].append(x)
                    out["false"] += any(wrong(status, cell[g][1]) for g, (status, _, _) in test.decided.items())
                elif j == at[-1]:
                    for g in d.evidence:
                        if g not in test.decided:
                            out["cap_open"][g] = out["cap_open"].get(g, 0) + 1
            if not naive_done:
                naive = {g: c for g, c in compare_to_baseline(levels, "glibc", alpha=0.05).items() if g != "glibc"}
                if all(c.status in DECIDED for c in naive.values()):
                    naive_done = True
                    out["naive_stop"] += 1
                    out["naive_false"] += any(wrong(c.status, cell[g][1]) for g, c in naive.items())
        out["false_any"] += any(wrong(status, cell[g][1]) for g, (status, _, _) in test.decided.items())
    return out


DEMO_MEASURED = {
    "glibc": ("glibc", 1.0),
    "jemalloc-5.3.0": ("jemalloc-5.3.0", 0.45),
    "mimalloc-2.0.9": ("mimalloc-2.0.9", 0.48),
    "mimalloc-3.0.1": ("mimalloc-3.0.1", 1.28),
    "mimalloc-3.6.0": ("mimalloc-3.6.0", 1.42),
}
CELLS = {
    "null: every group glibc-shaped, at glibc's level": {g: ("glibc", 1.0) for g in NAMES},
    "null: each group its own shape, all at glibc's level": {g: (g, 1.0) for g in NAMES},
    "one null: 3.6.0 at glibc's level (its noisy, drifting shape), the rest as measured": {
        **DEMO_MEASURED,
        "mimalloc-3.6.0": ("mimalloc-3.6.0", 1.0),
    },
    "one null: 3.0.1 at glibc's level (its shape), the rest as measured": {
        **DEMO_MEASURED,
        "mimalloc-3.0.1": ("mimalloc-3.0.1", 1.0),
    },
    "one null: 2.0.9 at glibc's level (spiky, heavy-tailed), the rest as measured": {
        **DEMO_MEASURED,
        "mimalloc-2.0.9": ("mimalloc-2.0.9", 1.0),
    },
    "the demo as measured (0.45, 0.48, 1.28, 1.42)": DEMO_MEASURED,
    "3.0.1 closer (1.10), the rest as measured": {**DEMO_MEASURED, "mimalloc-3.0.1": ("mimalloc-3.0.1", 1.10)},
    "just outside the margin: 3.0.1 at 1.06 with glibc's shape, the rest as measured": {
        **DEMO_MEASURED,
        "mimalloc-3.0.1": ("glibc", 1.06),
    },
}


def pct(k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{k / n:.1%} [{lo:.1%}–{hi:.1%}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated runs per cell and plan")
    ap.add_argument("--seed", type=int, default=20261128)
    a = ap.parse_args()
    started = time.monotonic()
    print(
        "| plan | cell | false decision in a stop | any false decision (stopped or not) | stopped by the rule "
        "| median stop | left open at the cap | naive peeking: false decision / stopped |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k, (plan, run_s) in enumerate((("as planned", RUN_S), ("set-up 60 s over", RUN_S - 60))):
        for c, (name, cell) in enumerate(CELLS.items()):
            rng = np.random.default_rng([a.seed, k, c])
            r = simulate(rng, a.sims, cell, float(run_s))
            looks = "/".join(f"{x:g}" for x in r["looks"])
            when = f"{np.median(r['when']):.0f} s" if r["when"] else "–"
            open_ = (
                ", ".join(f"{g} {n / a.sims:.0%}" for g, n in sorted(r["cap_open"].items(), key=lambda x: -x[1])) or "–"
            )
            print(
                f"| {plan} ({run_s} s, looks {looks} s) | {name} | {pct(r['false'], a.sims)} | "
                f"{pct(r['false_any'], a.sims)} | {pct(r['stop'], a.sims)} | {when} | {open_} | "
                f"{r['naive_false'] / a.sims:.1%} / {r['naive_stop'] / a.sims:.0%} |",
                flush=True,
            )
    print(
        "\nrealism: between-relay log-sd of the level at the first look, simulated (median, the demo as measured, "
        "as planned) against the real runs' median"
    )
    r = simulate(np.random.default_rng([a.seed, 9]), min(a.sims, 500), DEMO_MEASURED, float(RUN_S))
    for g in NAMES:
        print(f"  {g}: simulated {np.nanmedian(r['sd'][g]):.3f}, measured {MEASURED_SD[g]:.3f}")
    print(f"\nseed {a.seed}, {a.sims} simulated runs a cell, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
