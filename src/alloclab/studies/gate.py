"""A PR's memory gate in one run (`alloclab gate`): the baseline and the candidate as two groups of
one experiment, replicas interleaved in the runner's start order, looked at sequentially and
stopped as soon as the gate is decided.

Why one run rather than two compared (`alloclab compare`): a machine-wide shift between two runs
(another kernel, a busy neighbour) moves every replica of one side; side by side in one run both
sides see it. The decision is compare's own (stats.across_runs.compare_pairs, then .gate: "above"
when the ratio interval candidate/baseline lies wholly above 1 + PCT/100, "within" when it lies
wholly at or below it, else "inconclusive"), made at planned looks (stopping.planned_look_times:
doublings of the first look and a last one just before the time limit) with the interval of look
k at level α_k = α·t_k/Σt (stats.SequentialTest's planned spending). Since Σα_k = α and each of
"above" and "within" is one side of a two-sided interval, a true increase of exactly PCT% is
called above in at most α/2 = 2.5% of gates, and a true increase beyond PCT% within in at most
2.5%, whatever the dependence between looks (Bonferroni). Calibration: benchmarks/gate_decisive.py,
docs/tutorials/ci-memory-gate.md.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..common.errors import UserError
from ..experiment_file import Experiment, Group, Phases, Workload, parse_duration
from ..run import preflight
from ..run.stopping import SequentialStop, planned_look_times, replica_levels

BASELINE, CANDIDATE = "baseline", "candidate"
# A replica's level at a look: its median over the steady window so far (analysis' steady_mb), not
# the mean compare takes: a fixed-input program or a replay that is still building its heap on a
# busy machine when the warm-up ends moves a mean for the whole window, a median only while it
# fills less than half of it; on held memory both are the same figure.
LEVEL = "steady_mb"
OUTCOMES = ("within", "above", "inconclusive")
GATE_FILE = "gate.json"


@dataclass(frozen=True)
class Side:
    """What one side runs: a command (argv), a recorded trace, or the experiment's workload; under
    an allocator with an environment."""

    command: tuple[str, ...] | None = None
    trace: Path | None = None
    allocator: str = "glibc"
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    baseline: Side
    candidate: Side
    pct: float
    workload: str | None = None  # a built-in workload's name (both sides)
    replicas: int = 4
    interval_s: float = 1.0
    warmup_s: float = 10.0
    max_duration_s: float = 300.0
    first_look_s: float | None = None  # default: warm-up + 10 intervals
    metric: str = "rss"
    speed: float = 0.0  # trace replay speed (0: flat out, the same work every time)
    seed: int = 0


def parse_env(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {item!r} is not NAME=VALUE", f"write e.g. {option} MALLOC_ARENA_MAX=2")
        out[key] = value
    return out


def parse_command(text: str, option: str) -> tuple[str, ...]:
    try:
        argv = tuple(shlex.split(text))
    except ValueError as e:
        raise UserError(f"{option} {text!r} cannot be split into words ({e})", "quote it as a shell would") from None
    if not argv:
        raise UserError(
            f"{option} is empty", "give the program and its arguments, e.g. --baseline './app --input fixed.dat'"
        )
    return argv


def check_pct(pct: float) -> None:
    if not (0 <= pct < 1000):
        raise UserError(f"--fail-on-increase {pct:g} is out of range", "give a percentage from 0 to 999, e.g. 5")


def experiment(plan: Plan, base_dir: Path | None = None) -> Experiment:
    """The two-group experiment of the gate, checked as `alloclab check` checks a file (the derived
    file is written back and parsed again: experiments.derive.to_toml)."""
    from ..experiment_file import parse_experiment
    from .derive import to_toml

    check_pct(plan.pct)
    if plan.replicas < 2:
        raise UserError(
            f"--replicas {plan.replicas} is too few", "the gate needs at least 2 replicas a side (4 is the default)"
        )
    if plan.warmup_s + 10 * plan.interval_s >= plan.max_duration_s:
        raise UserError(
            f"--max-duration {plan.max_duration_s:g}s leaves no time after the warm-up for a look",
            "give a longer --max-duration or a shorter --warmup",
        )
    base_dir = base_dir or Path.cwd()
    workload = None
    if plan.workload is not None:
        workload = Workload(plan.workload)
    elif plan.baseline.trace is not None:
        workload = Workload("trace", {"trace": str(plan.baseline.trace.resolve()), "speed": plan.speed})
    exp = Experiment(
        name="gate",
        command=None,
        groups=(Group(BASELINE, "glibc"),),
        replicas=plan.replicas,
        interval=plan.interval_s,
        baseline=BASELINE,
        seed=plan.seed,
        phases=Phases(plan.warmup_s, plan.max_duration_s - plan.warmup_s, 0.0),
        workload=workload,
        metric=plan.metric,
    )
    groups = []
    for name, side in ((BASELINE, plan.baseline), (CANDIDATE, plan.candidate)):
        command = side.command
        if side.trace is not None:
            from ..run import trace

            command = trace.replay_command(
                replace(exp, workload=Workload("trace", {"trace": str(side.trace.resolve()), "speed": plan.speed}))
            )
        groups.append(Group(name, side.allocator, dict(side.env), command))
    exp = replace(exp, groups=tuple(groups))
    return parse_experiment(to_toml(exp), "gate (derived)", base_dir)


def from_file(exp: Experiment, pct: float) -> Experiment:
    """An experiment file as a gate: exactly two groups, its baseline and the candidate."""
    check_pct(pct)
    if len(exp.groups) != 2:
        raise UserError(
            f"the experiment has {len(exp.groups)} groups; a gate compares two",
            "keep the baseline group and one candidate group",
        )
    return exp


def candidate_of(exp: Experiment) -> str:
    return next(g.name for g in exp.groups if g.name != exp.baseline)


@dataclass
class Look:
    elapsed_s: float
    level: float  # this look's share of α (its interval is at 1 − level)
    baseline_mb: list[float]
    candidate_mb: list[float]
    outcome: str
    ratio: float | None
    ratio_ci: list[float] | None
    upper_pct: float | None
    detectable_pct: float | None
    reason: str


class GateStop(SequentialStop):
    """The runner's stop_check: at each planned look, the gate on the replicas' levels so far."""

    def __init__(
        self,
        pct: float,
        first_look_s: float,
        planned_s: float,
        interval: float,
        metric: str,
        baseline: str,
        candidate: str,
    ):
        from .. import analysis, stats

        times = planned_look_times(min(first_look_s, planned_s), planned_s, interval)
        self.plan = stats.SequentialTest(alpha=analysis.RULES["alpha"], look_times_s=times).look_plan()
        self.alpha = analysis.RULES["alpha"]
        self.pct, self.metric, self.baseline, self.candidate = pct, metric, baseline, candidate
        self.looks: list[Look] = []
        self.exited: list[str] = []

    def __call__(self, runner, elapsed: float) -> str | None:
        # a replica that ended is not measured after its end: its level would stand for less than
        # the others', so the gate stops undecided and says why (never compares what is left)
        gone = [r.name for r in runner.replicas if not r.alive]
        if gone:
            self.exited = gone
            reason = (
                f"replica(s) {', '.join(gone)} ended before the gate was decided: the gate measures memory "
                "held until alloclab stops the program (make it wait at the end, or gate a recorded trace)"
            )
            runner.store.add_event(time.time(), "sequential_stop", reason)
            return reason
        return super().__call__(runner, elapsed)

    def schedule(self) -> str:
        return ", ".join(f"{t:g} s at {level:.2g}" for t, level in self.plan)

    def due(self, elapsed: float) -> bool:
        return len(self.looks) < len(self.plan) and elapsed >= self.plan[len(self.looks)][0]

    def decide(self, a, elapsed: float) -> str | None:
        look = decide_look(
            replica_levels(a, self.metric, LEVEL),
            self.baseline,
            self.candidate,
            self.pct,
            self.plan[len(self.looks)][1],
            elapsed,
        )
        self.looks.append(look)
        if look.outcome == "inconclusive":
            return None
        return (
            f"gate decided {look.outcome} at look {len(self.looks)} ({elapsed:.0f} s): {look.reason} "
            f"(interval at {1 - look.level:.4g}; each wrong call ≤ {self.alpha / 2:g} over all looks)"
        )


def decide_look(
    levels: dict[str, np.ndarray], baseline: str, candidate: str, pct: float, level: float, elapsed: float
) -> Look:
    """One look: compare's comparison and gate of the candidate against the baseline, with the
    interval at this look's level."""
    from .. import analysis
    from ..stats.across_runs import compare_pairs, gate

    base, cand = levels.get(baseline, np.array([])), levels.get(candidate, np.array([]))
    c = compare_pairs({candidate: (base, cand)}, alpha=level, margin=analysis.RULES["equivalence_margin"])[candidate]
    g = gate(c, pct)
    return Look(
        round(elapsed, 1),
        level,
        [float(x) for x in base],
        [float(x) for x in cand],
        g.outcome,
        c.ratio,
        None if c.ratio_ci is None else [float(x) for x in c.ratio_ci],
        g.upper_pct,
        g.detectable_pct,
        g.reason,
    )


@dataclass
class GateResult:
    outcome: str  # within | above | inconclusive
    pct: float
    run_dir: str
    end_reason: str
    elapsed_s: float
    replicas: int
    baseline: str
    candidate: str
    looks: list[Look]
    schedule: list[tuple[float, float]]
    interrupted: bool = False
    cut_short: str | None = None
    replicas_ended: bool = False  # a replica ended by itself before the gate was decided

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None

    def as_dict(self) -> dict:
        d = asdict(self)
        last = self.last
        d["smallest_detectable_increase_pct"] = None if last is None else last.detectable_pct
        d["allows_up_to_pct"] = None if last is None else last.upper_pct
        d["ratio"] = None if last is None else last.ratio
        d["ratio_ci"] = None if last is None else last.ratio_ci
        return d

    def lines(self) -> list[str]:
        """The outcome for a terminal or a CI log; the last line starts `gate PASSED`, `gate FAILED`
        or `gate INCONCLUSIVE`, as compare's does."""
        limit = 1 + self.pct / 100
        out = [f"looks (elapsed s at level): {', '.join(f'{t:g} s at {lv:.2g}' for t, lv in self.schedule)}"]
        for k, lk in enumerate(self.looks, 1):
            ratio = "–" if lk.ratio is None else f"{lk.ratio:.4f}×"
            ci = "" if lk.ratio_ci is None else f" [{lk.ratio_ci[0]:.4f}–{lk.ratio_ci[1]:.4f}] at {1 - lk.level:.4g}"
            out.append(
                f"  look {k} at {lk.elapsed_s:g} s: {self.candidate}/{self.baseline} {ratio}{ci} "
                f"(n={len(lk.baseline_mb)}/{len(lk.candidate_mb)}): {lk.outcome}"
            )
        last = self.last
        out.append(f"run ended: {self.end_reason}; data in {self.run_dir}")
        if self.outcome == "above":
            head = f"gate FAILED (--fail-on-increase {self.pct:g}): {self.candidate} shown above {limit:g}× of {self.baseline}: {last.reason}"
        elif self.outcome == "within":
            head = f"gate PASSED (--fail-on-increase {self.pct:g}): {self.candidate} shown within {limit:g}× of {self.baseline}: {last.reason}"
        elif self.replicas_ended:
            head = f"gate INCONCLUSIVE (--fail-on-increase {self.pct:g}): {self.end_reason}" + (
                ""
                if "held until" in self.end_reason
                else ": the gate measures memory held until alloclab stops "
                "the program (make it wait at the end, or gate a recorded trace)"
            )
        elif last is None:
            head = (
                f"gate INCONCLUSIVE (--fail-on-increase {self.pct:g}): no look was reached ({self.end_reason}); "
                "give a longer --max-duration or a shorter --warmup"
            )
        else:
            det = (
                ""
                if last.detectable_pct is None
                else f"; the smallest increase these replicas would show above the limit (80% power) is {last.detectable_pct:+.1f}%"
            )
            head = (
                f"gate INCONCLUSIVE (--fail-on-increase {self.pct:g}): not decided within {self.elapsed_s:.0f} s: "
                f"{last.reason}{det}; more replicas (--replicas), a longer --max-duration or a steadier workload "
                "(a recorded trace) would settle it"
            )
        return out + [head]


def run(
    exp: Experiment,
    pct: float,
    out: Path | None,
    first_look_s: float | None = None,
    on_tick=None,
    on_setup=None,
    runner_hook=None,
) -> GateResult:
    """Run the gate's experiment with its sequential stop; writes gate.json in the run directory."""
    from ..run.runner import Runner

    preflight.check_output(out)
    planned = exp.planned_duration()
    if planned is None:
        raise UserError(
            "the gate's experiment has no planned end", "give the load phase a duration (or --max-duration)"
        )
    first = first_look_s if first_look_s is not None else exp.phases.warmup + 10 * exp.interval
    if first >= planned:
        raise UserError(
            f"the first look ({first:g} s) is not before the planned end ({planned:g} s)",
            "give a longer --max-duration or an earlier --first-look",
        )
    cand = candidate_of(exp)
    stop = GateStop(pct, first, planned, exp.interval, exp.metric, exp.baseline, cand)
    runner = Runner(exp, out, stop_check=stop)
    if on_tick:
        runner.on_tick = on_tick
    if on_setup:
        runner.on_setup = on_setup
    if runner_hook:
        runner_hook(runner, stop)
    started = time.monotonic()
    result = runner.run()
    last = stop.looks[-1] if stop.looks else None
    ended = stop.exited or result.end_reason == "all replicas exited"
    outcome = last.outcome if last is not None and not result.interrupted and not ended else "inconclusive"
    res = GateResult(
        outcome,
        pct,
        str(result.run_dir),
        result.end_reason,
        round(time.monotonic() - started, 1),
        exp.replicas,
        exp.baseline,
        cand,
        stop.looks,
        stop.plan,
        result.interrupted,
        result.cut_short,
        replicas_ended=bool(ended),
    )
    if result.cut_short is None:
        (Path(result.run_dir) / GATE_FILE).write_text(json.dumps(res.as_dict(), indent=2))
    return res


def plan_durations(
    max_duration: str, warmup: str, interval: str, first_look: str | None
) -> tuple[float, float, float, float | None]:
    return (
        parse_duration(max_duration, "--max-duration"),
        parse_duration(warmup, "--warmup"),
        parse_duration(interval, "--interval"),
        None if first_look is None else parse_duration(first_look, "--first-look"),
    )
