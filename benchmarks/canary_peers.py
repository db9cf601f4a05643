"""The canary judged against its peers (alloclab.fleet.canary, `fleet deploy --baseline`): false
FAILs on a same-allocator redeploy (A/A) and detection of a +25% canary, by simulation and on real
processes. Outside the default test run; figures in benchmarks/canary_peers.md.

    nice -n 10 python benchmarks/canary_peers.py --part sim [--reps 1000] [--seed 20261128]
    nice -n 10 python benchmarks/canary_peers.py --part sim-realism [--reps 1000] [--conditions out-of-step restarts-10 restarts-30]
    nice -n 10 python benchmarks/canary_peers.py --part real [--units 5 20] [--reps-real 10 4] [--effects 1.0 1.25]

--part sim: the rule exactly as `fleet deploy` applies it (canary.PeerJudge.look_at on the settle
watch's samples), --settle 10 min (looks at 5, 10, 20 and 40 min, --max-settle 40 min, a sample
every 5 s), tolerance 10%, α 0.05, 5 and 20 units a cohort. Each unit's log memory:
    its own level (relays differ: N(0, 0.2), ~20%) + the canary's effect (1.0 or 1.25)
  + a daily cycle (amplitude 6%, common phase, each unit's jittered by N(0, 0.3) rad; the deploy at
    a random hour, so the settle window catches a random part of the cycle)
  + fast noise: AR(1), τ 30 s, SD 2%                          (two noise time scales)
  + slow wander: AR(1), τ 2 days, SD 8% (drawn once at the old reading, moved over the window)
  + the regrowth of a restarted process: −0.4·e^(−age/τ_u), each unit its own τ_u (lognormal
    around 10 min, ×/÷ 1.5: start-up curves differ), its old process settled.
The old level is one reading of the old process just before the restarts (what the deploy reads).
Scenarios: the baseline restarted with the canary (the default), or not (--no-baseline-restart:
the baseline's processes keep their settled level, so the canary's regrowth counts against it).
Per cell: PASS / FAIL / MORE TIME shares with Wilson 95% intervals and the median elapsed time of
the decision; for contrast, the false trips of the --max-increase 25% guard alone (warmup auto,
persist 3, old processes 1 day old) on the same canaries.

--part sim-realism: the same model and rule, judged the same way, on series unlike --part sim's in
one way a real fleet has (the guard-alone column left out), each condition its own seeded RNG
([--seed, i]), so one condition can be run alone with the same figures:
  out-of-step  each unit sampled at its own times: its own phase within the 5 s interval, each
               interval jittered ±20% (the noise is AR(1) in continuous time, so it holds at
               uneven steps); 5% of samples lost at random, and in 10% of units one gap of 2–5 min
               inside the watch (a lost collector tick, a failing scrape). The judge holds each
               unit's own (time, kB) samples and unit_change averages whatever falls in (T/2, T], so
               this is the rule's own input; the old reading is always there.
  restarts-10, restarts-30
               sampled in step as --part sim, but in 10% (30%) of watches one unit, canary or
               baseline at random, restarts once at a uniform time in the watch (up to --max-settle):
               its regrowth starts over from −0.4 at its own τ_u.

--part real: real processes standing in for units (systemd.LocalUnits under a temporary root),
2·N units of benchmarks/canary_workload.py (levels 20–32 MB, units differing; regrowth τ 1 s;
2% slow noise). Each trial is one real `fleet deploy glibc --batch N --settle 2s --max-settle 8s
--guard-interval 0.2s --max-increase 25%` (the role's guard on beside the judgement): A/A (the same
allocator redeployed) and +25% (the deploy's env sets CANARY_WORKLOAD_SCALE=1.25), then `fleet
rollback --all`. Counts: outcome of the judgement, guard trips, the decision's time. Run time:
about 10 s a trial at N = 5, 25 s at N = 20 on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab.fleet import canary, deploy, rollout, systemd
from benchmarks.fleet_decision import wilson
from tests import simulated_series as sim

DAY = 86400.0
WORKLOAD = Path(__file__).resolve().parent / "canary_workload.py"


def cohort(
    rng, n: int, effect: float, t: np.ndarray, restarted: bool, hour: float, every: float
) -> tuple[np.ndarray, np.ndarray]:
    """(old readings (n,), samples (n, len(t))) of one cohort, MB; t: seconds since the restarts."""
    level = np.log(100.0) + rng.normal(0, 0.2, n)
    psi = rng.normal(0, 0.3, n)
    clock = hour * 3600.0 + np.concatenate([[-every], t])  # the old reading, then the watch
    cycle = 0.06 * np.sin(2 * math.pi * clock[None, :] / DAY + psi[:, None])
    fast = sim.ar1(rng, n, len(clock), math.exp(-every / 30.0), 0.02)
    slow = sim.ar1(rng, n, len(clock), math.exp(-every / (2 * DAY)), 0.08)
    tau = 600.0 * np.exp(rng.normal(0, math.log(1.5), n))
    regrow = -0.4 * np.exp(-t[None, :] / tau[:, None]) if restarted else np.zeros((n, len(t)))
    log_mb = level[:, None] + cycle + fast + slow
    return np.exp(log_mb[:, 0]), np.exp(log_mb[:, 1:] + regrow + math.log(effect))


def one_sim(rng, n: int, effect: float, rule: canary.PeerRule, restart_baseline: bool, every: float = 5.0) -> dict:
    t = sim.times(rule.max_settle_s, every)[1:]
    hour = rng.uniform(0, 24)
    judge = canary.PeerJudge(rule, [f"c{i}" for i in range(n)], [f"b{i}" for i in range(n)], restart_baseline)
    guard_trips = 0
    guards = rollout.Guards(max_increase=0.25, persist=3)
    for names, effect_here, restarted in ((judge.canary, effect, True), (judge.baseline, 1.0, restart_baseline)):
        old, series = cohort(rng, n, effect_here, t, restarted, hour, every)
        for name, o, ys in zip(names, old, series):
            judge.old_kb[name] = float(o)
            judge.samples[name] = list(zip(t, ys))
            if names is judge.canary:  # the guard alone on the same canary, over --settle
                inside = t <= 2 * rule.first_look_s
                warm = rollout.effective_warmup(guards, DAY, 2 * rule.first_look_s)
                guard_trips += (
                    rollout.memory_trip(list(ys[inside]), float(o), guards, list(t[inside]), warm) is not None
                )
    for at in rule.look_times():
        judge.look_at(at)
    return {
        "outcome": judge.outcome,
        "at": judge.looks[-1].elapsed_s if judge.looks else None,
        "guard_trip": guard_trips > 0,
    }


def outcomes(rows: list[dict]) -> tuple[dict[str, int], list[float]]:
    """How many watches ended in each outcome, and the minutes of those that decided."""
    k = {o: sum(r["outcome"] == o for r in rows) for o in (canary.PASS, canary.FAIL, canary.MORE_TIME)}
    return k, [r["at"] / 60 for r in rows if r["outcome"] in (canary.PASS, canary.FAIL)]


def rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:.3f} [{lo:.3f}–{hi:.3f}]"


def part_sim(args) -> None:
    rule = canary.rule_for(600.0, 2400.0)
    rng = np.random.default_rng(args.seed)
    print(
        f"settle 600 s, looks at {', '.join(f'{x:g}' for x in rule.look_times())} s, tolerance {rule.tolerance:.0%}, "
        f"reps {args.reps} a cell, seed {args.seed}\n"
    )
    print(
        "| baseline | units a cohort | canary | PASS | FAIL | MORE TIME | median decision (min) | guard alone trips (batch) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for restart in (True, False):
        for n in args.units:
            for effect in (1.0, 1.25):
                t0 = time.time()
                rows = [one_sim(rng, n, effect, rule, restart) for _ in range(args.reps)]
                k, decided = outcomes(rows)
                trips = sum(r["guard_trip"] for r in rows)
                print(
                    f"| {'restarted' if restart else 'not restarted'} | {n} | {'A/A' if effect == 1.0 else '+25%'} | "
                    f"{rate(k[canary.PASS], args.reps)} | {rate(k[canary.FAIL], args.reps)} | "
                    f"{rate(k[canary.MORE_TIME], args.reps)} | {np.median(decided) if decided else math.nan:.0f} | "
                    f"{rate(trips, args.reps)} |",
                    flush=True,
                )
                print(f"<!-- {time.time() - t0:.0f} s -->", file=sys.stderr, flush=True)


# --part sim-realism: the same rule on series unlike the plain simulation's in two ways real fleets
# have (each on its own, so a cell's figure says which one moved it).
CONDITIONS = ("out-of-step", "restarts-10", "restarts-30")


def ar1_at(rng, t: np.ndarray, tau: float, sd: float) -> np.ndarray:
    """Stationary AR(1) (Ornstein–Uhlenbeck) noise of marginal SD sd sampled at each row's own times
    t (n, k), increasing along a row: x_i = e^(−Δt_i/τ)·x_(i−1) + sd·√(1 − e^(−2Δt_i/τ))·z_i."""
    phi = np.exp(-np.diff(t, axis=1) / tau)
    z = rng.normal(size=t.shape)
    w = np.concatenate([z[:, :1], np.sqrt(1 - phi**2) * z[:, 1:]], axis=1) * sd
    # the recursion in closed form, x_i = Σ_(j≤i) e^(−(t_i − t_j)/τ)·w_j (t_i − t_0 ≤ 3τ here)
    since = t - t[:, :1]
    return np.exp(-since / tau) * np.cumsum(np.exp(since / tau) * w, axis=1)


def unit_times(rng, n: int, window: float, every: float, out_of_step: bool) -> np.ndarray:
    """(n, k) sample times since the restarts, the old reading's first (t < 0). In step: every unit at
    every·1, 2, … (the plain simulation's grid). Out of step: each unit its own phase within the
    interval and each interval jittered ±20%; times past the window are dropped by the caller."""
    if not out_of_step:
        grid = sim.times(window, every)[1:]
        return np.tile(np.concatenate([[-every], grid]), (n, 1))
    k = int(window / (0.8 * every)) + 2
    first = rng.uniform(0, every, n)
    steps = every * rng.uniform(0.8, 1.2, (n, k - 1))
    t = first[:, None] + np.concatenate([np.zeros((n, 1)), np.cumsum(steps, axis=1)], axis=1)
    old = -rng.uniform(0, every, n)  # the old reading, just before the restarts
    return np.concatenate([old[:, None], t], axis=1)


def present(rng, t: np.ndarray, window: float) -> np.ndarray:
    """Which samples of t (n, k) arrive (the old reading, column 0, always does): 5% lost at random,
    and in 10% of units one gap of 2–5 min inside the watch (a lost collector tick, a failing scrape)."""
    n = t.shape[0]
    keep = (rng.random(t.shape) >= 0.05) & (t <= window)
    gap = rng.random(n) < 0.10
    length = rng.uniform(120, 300, n)
    start = rng.uniform(0, window - length)
    keep &= ~(gap[:, None] & (t >= start[:, None]) & (t < (start + length)[:, None]))
    keep[:, 0] = True
    return keep


def cohort_at(
    rng, n: int, effect: float, t: np.ndarray, restarted: bool, hour: float, again: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """cohort()'s model at each unit's own times t (n, k; column 0 the old reading): (old readings (n,),
    samples (n, k − 1)) in MB. again (n,): the time of a unit's unplanned restart (NaN: none); from
    it the unit's regrowth starts over, −0.4·e^(−(t − again)/τ_u)."""
    level = np.log(100.0) + rng.normal(0, 0.2, n)
    psi = rng.normal(0, 0.3, n)
    cycle = 0.06 * np.sin(2 * math.pi * (hour * 3600.0 + t) / DAY + psi[:, None])
    fast = ar1_at(rng, t, 30.0, 0.02)
    slow = ar1_at(rng, t, 2 * DAY, 0.08)
    tau = 600.0 * np.exp(rng.normal(0, math.log(1.5), n))
    w = t[:, 1:]
    age = np.where(w >= again[:, None], w - np.nan_to_num(again, nan=0.0)[:, None], w if restarted else np.inf)
    regrow = -0.4 * np.exp(-age / tau[:, None])
    log_mb = level[:, None] + cycle + fast + slow
    return np.exp(log_mb[:, 0]), np.exp(log_mb[:, 1:] + regrow + math.log(effect))


def one_realism(
    rng, n: int, effect: float, rule: canary.PeerRule, restart_baseline: bool, condition: str, every: float = 5.0
) -> dict:
    """One settle watch of the plain simulation's model under `condition`, judged by PeerJudge.look_at
    on each unit's own (time, kB) samples, as the deploy's judge holds them."""
    window = rule.max_settle_s
    hour = rng.uniform(0, 24)
    judge = canary.PeerJudge(rule, [f"c{i}" for i in range(n)], [f"b{i}" for i in range(n)], restart_baseline)
    again = np.full(2 * n, np.nan)  # canary units, then the baseline's
    if condition.startswith("restarts-") and rng.random() < int(condition.split("-")[1]) / 100:
        again[rng.integers(2 * n)] = rng.uniform(0, window)
    out_of_step = condition == "out-of-step"
    for side, (names, effect_here, restarted) in enumerate(
        ((judge.canary, effect, True), (judge.baseline, 1.0, restart_baseline))
    ):
        t = unit_times(rng, n, window, every, out_of_step)
        keep = present(rng, t, window) if out_of_step else t <= window
        old, series = cohort_at(rng, n, effect_here, t, restarted, hour, again[side * n : (side + 1) * n])
        for i, name in enumerate(names):
            judge.old_kb[name] = float(old[i])
            k = keep[i, 1:]
            judge.samples[name] = list(zip(t[i, 1:][k].tolist(), series[i][k].tolist()))
    for at in rule.look_times():
        judge.look_at(at)
    return {"outcome": judge.outcome, "at": judge.looks[-1].elapsed_s if judge.looks else None}


def part_sim_realism(args) -> None:
    rule = canary.rule_for(600.0, 2400.0)
    print(
        f"settle 600 s, looks at {', '.join(f'{x:g}' for x in rule.look_times())} s, tolerance {rule.tolerance:.0%}, "
        f"reps {args.reps} a cell, seed {args.seed} (condition i: seed [{args.seed}, i])\n"
    )
    print("| condition | baseline | units a cohort | canary | PASS | FAIL | MORE TIME | median decision (min) |")
    print("|---|---|---|---|---|---|---|---|")
    for condition in args.conditions:
        rng = np.random.default_rng([args.seed, CONDITIONS.index(condition)])
        for restart in (True, False):
            for n in args.units:
                for effect in (1.0, 1.25):
                    t0 = time.time()
                    rows = [one_realism(rng, n, effect, rule, restart, condition) for _ in range(args.reps)]
                    k, decided = outcomes(rows)
                    print(
                        f"| {condition} | {'restarted' if restart else 'not restarted'} | {n} | "
                        f"{'A/A' if effect == 1.0 else '+25%'} | {rate(k[canary.PASS], args.reps)} | "
                        f"{rate(k[canary.FAIL], args.reps)} | {rate(k[canary.MORE_TIME], args.reps)} | "
                        f"{np.median(decided) if decided else math.nan:.0f} |",
                        flush=True,
                    )
                    print(f"<!-- {time.time() - t0:.0f} s -->", file=sys.stderr, flush=True)


def loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def real_fleet(root: Path, n: int, seed: int) -> tuple[systemd.LocalUnits, list[str]]:
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    names = [f"svc@{i:02d}.service" for i in range(2 * n)]
    for name in names:
        mb = float(np.clip(25 * math.exp(rng.normal(0, 0.2)), 20, 32))
        (unit_dir / name).write_text(
            f"[Service]\nExecStart={sys.executable} {WORKLOAD} --mb {mb:.1f} --regrow 1 --tick 0.1\n"
        )
    units = systemd.LocalUnits(root)
    for name in names:
        units.restart(name)
    return units, names


def settled(units, names, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ages = [deploy.old_process(units, u, None)["age"] or 0 for u in names]
        if min(ages) > 5:  # five regrowth time constants: settled
            return
        time.sleep(0.2)
    raise SystemExit("the units did not settle")


def part_real(args) -> None:
    guards = rollout.Guards(max_increase=0.25)
    rule = canary.rule_for(2.0, 8.0)
    print(f"load before: {loadavg()}")
    print(
        "| units a cohort | canary | trials | PASS | FAIL | MORE TIME | guard trips | median decision (s) | s a trial |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, reps in zip(args.units, args.reps_real):
        with tempfile.TemporaryDirectory(prefix="alloclab-canary-bench-") as tmp:
            units, names = real_fleet(Path(tmp) / "root", n, args.seed + n)
            try:
                for effect in args.effects:
                    outcomes, trips, at, took = [], 0, [], []
                    for r in range(reps):
                        settled(units, names)
                        t0 = time.monotonic()
                        env = {"CANARY_WORKLOAD_SCALE": f"{effect:g}"} if effect != 1.0 else None
                        result = deploy.deploy(
                            units,
                            "glibc",
                            "svc@*",
                            n,
                            False,
                            Path(tmp) / f"deploy-{r}.json",
                            say=lambda s: None,
                            env=env,
                            guards=guards,
                            settle=2.0,
                            sample_every=0.2,
                            peer_rule=rule,
                            baseline="auto",
                        )
                        took.append(time.monotonic() - t0)
                        judged = result["canary"]
                        outcomes.append(judged.get("outcome"))
                        trip = result.get("tripped")
                        trips += bool(trip and trip["unit"] != deploy.CANARY)
                        if judged.get("looks") and judged["outcome"] in (canary.PASS, canary.FAIL):
                            at.append(judged["looks"][-1]["elapsed_s"])
                        deploy.rollback(units, 2 * n, say=lambda s: None, every=True)
                    k = {o: outcomes.count(o) for o in (canary.PASS, canary.FAIL, canary.MORE_TIME)}
                    print(
                        f"| {n} | {'A/A' if effect == 1.0 else f'{effect - 1:+.0%}'} | {reps} | {rate(k[canary.PASS], reps)} | "
                        f"{rate(k[canary.FAIL], reps)} | {rate(k[canary.MORE_TIME], reps)} | {rate(trips, reps)} | "
                        f"{np.median(at) if at else math.nan:.1f} | {np.mean(took):.1f} |",
                        flush=True,
                    )
            finally:
                for pidfile in (Path(tmp) / "root" / "run" / "alloclab-units").glob("*.pid"):
                    try:
                        os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
    print(f"load after: {loadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["sim", "sim-realism", "real"], required=True)
    ap.add_argument("--reps", type=int, default=1000, help="--part sim: settle watches a cell")
    ap.add_argument("--reps-real", type=int, nargs="+", default=[10, 4], help="--part real: trials a cell, per --units")
    ap.add_argument("--units", type=int, nargs="+", default=[5, 20])
    ap.add_argument(
        "--effects",
        type=float,
        nargs="+",
        default=[1.0, 1.25],
        help="--part real: the canary's scale (1.0: the same allocator redeployed, A/A)",
    )
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument(
        "--conditions",
        nargs="+",
        choices=CONDITIONS,
        default=list(CONDITIONS),
        help="--part sim-realism: out-of-step sampling with gaps, or unplanned restarts in 10%% / 30%% of watches",
    )
    args = ap.parse_args()
    if len(args.reps_real) != len(args.units) and args.part == "real":
        raise SystemExit("--reps-real takes one count per --units")
    {"sim": part_sim, "sim-realism": part_sim_realism, "real": part_real}[args.part](args)


if __name__ == "__main__":
    main()
