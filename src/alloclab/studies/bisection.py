"""`alloclab bisect`: the first bad version (or tunable value, or workload parameter) on an
ordered axis, found by binary search over real runs.

Every step is one ordinary run (its own directory, store and report) of the candidate against the
good end of the axis, replicas side by side. A step stops as soon as the sequential rule of `run
--until-significant` decides (stats.ThresholdTest: stats.SequentialTest on the candidate's levels
divided by the threshold ratio):

- "bad":  candidate/good is shown above the threshold ratio -> the first bad is at or before it;
- "good": candidate/good is shown below the threshold ratio -> the first bad is after it;
- neither by the step's maximum duration: "undecided". The search then stops and says so, with
  the range it had narrowed down to; it never guesses a side.

The bad end is checked first (unless told not to): a "first bad version" claim rests on it. The
axis is assumed monotone (good up to some point, bad after it), as any bisection does; a step
that contradicts an earlier one cannot be seen by a binary search, so the summary lists every
step's ratio for the reader to check.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..allocators import options
from ..common import outputs
from ..common.errors import UserError
from ..run.runner import Runner
from ..run.stopping import ThresholdStop
from .derive import Base, Point, derive

MEMORY_METRICS = ("rss", "pss", "uss", "anon")
METRICS = MEMORY_METRICS + ("cpu_per_op",)
GOOD, CANDIDATE = "good", "candidate"


@dataclass(frozen=True)
class Axis:
    kind: str  # "version" (catalog ids), "tunable" (an environment variable), "param" (workload)
    name: str  # the family, the variable or the parameter
    values: tuple[str, ...]
    allocator: str  # tunable/param axes: the allocator every point runs

    def point(self, value: str) -> Point:
        if self.kind == "version":
            return Point(value)
        if self.kind == "tunable":
            return Point(self.allocator, {self.name: value})
        number = float(value)
        return Point(self.allocator, {}, {self.name: int(number) if number.is_integer() else number})


def parse_values(text: str, what: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(","))
    if len(values) < 2 or not all(values):
        raise UserError(
            f"{what} {text!r} needs at least two comma-separated values", f"write e.g. {what} 0,10,100,1000"
        )
    if len(set(values)) != len(values):
        raise UserError(f"{what} {text!r} repeats a value", "give each value once, in order from good to bad")
    return values


@dataclass
class Step:
    index: int  # position on the axis
    value: str
    run_dir: str
    verdict: str  # "bad", "good" or "undecided"
    reason: str
    ratio: float | None
    p: float | None
    looks: int
    elapsed_s: float
    end_reason: str
    good_levels: list[float] = field(default_factory=list)
    candidate_levels: list[float] = field(default_factory=list)
    candidate_version: str | None = None


@dataclass
class BisectResult:
    axis: Axis
    metric: str
    threshold: float
    status: str  # "found", "undecided", "bad-end-not-bad", "interrupted"
    first_bad: str | None
    last_good: str | None
    steps: list[Step]
    lo: int  # the narrowed range: values[lo] known good, values[hi] known (or given) bad
    hi: int
    changed: dict[str, Any] = field(default_factory=dict)

    @property
    def exhaustive_steps(self) -> int:
        return len(self.axis.values) - 1  # every value but the good end

    def as_dict(self) -> dict[str, Any]:
        return {
            "axis": asdict(self.axis),
            "metric": self.metric,
            "threshold_ratio": self.threshold,
            "status": self.status,
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "narrowed_to": [self.axis.values[self.lo], self.axis.values[self.hi]],
            "steps_run": len(self.steps),
            "exhaustive_steps": self.exhaustive_steps,
            "steps": [asdict(s) for s in self.steps],
            "changed": self.changed,
        }


@dataclass
class Plan:
    base: Base
    axis: Axis
    metric: str
    threshold: float
    max_step_s: float
    first_look_s: float
    check_bad: bool = True
    write_reports: bool = True


def _dirname(k: int, value: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._+-" else "-" for c in value)
    return f"step-{k:02d}-{safe}"[:80]


def run_step(plan: Plan, out: Path, k: int, index: int, on_tick: Callable | None) -> Step:
    axis, base = plan.axis, plan.base
    value = axis.values[index]
    exp = derive(
        base,
        f"bisect-{k:02d}",
        [(GOOD, axis.point(axis.values[0])), (CANDIDATE, axis.point(value))],
        GOOD,
        load_s=max(1.0, plan.max_step_s - base.experiment.phases.warmup),
    )
    run_dir = out / "steps" / _dirname(k, value)
    planned = exp.planned_duration()
    first = max(plan.first_look_s, exp.phases.warmup + 10 * exp.interval)
    stop = ThresholdStop(plan.threshold, min(first, planned), planned, exp.interval, plan.metric, GOOD, CANDIDATE)
    runner = Runner(exp, run_dir, stop_check=stop)
    if on_tick:
        runner.on_tick = lambda r, elapsed, phase: on_tick(k, value, r, elapsed, phase)
    started = time.monotonic()
    result = runner.run()
    d = stop.last
    verdict = d.verdict if d is not None and d.verdict else ("interrupted" if result.interrupted else "undecided")
    reason = d.reason if d is not None else "no look was reached"
    if verdict == "undecided":
        reason = f"not decided within {planned:g} s ({result.end_reason}); last look: {reason}"
    if plan.write_reports and not result.cut_short:
        from ..reporters import report

        report.write_report(run_dir)
    spec = runner.specs[CANDIDATE]
    return Step(
        index,
        value,
        str(run_dir),
        verdict,
        reason,
        d.ratio if d else None,
        d.p if d else None,
        stop.test.looks,
        round(time.monotonic() - started, 1),
        result.end_reason,
        [float(x) for x in stop.levels.get(GOOD, [])],
        [float(x) for x in stop.levels.get(CANDIDATE, [])],
        spec.version,
    )


def search(
    plan: Plan, out: Path, on_step: Callable[[Step], None] | None = None, on_tick: Callable | None = None
) -> BisectResult:
    """Binary search for the first bad value; writes bisect.json after every step."""
    outputs.new_output(out)
    outputs.writable_directory(out)
    values = plan.axis.values
    lo, hi = 0, len(values) - 1
    res = BisectResult(plan.axis, plan.metric, plan.threshold, "found", None, None, [], lo, hi)

    def record(step: Step) -> None:
        res.steps.append(step)
        (out / "bisect.json").write_text(json.dumps(res.as_dict(), indent=2))
        if on_step:
            on_step(step)

    if plan.check_bad:
        step = run_step(plan, out, 1, hi, on_tick)
        record(step)
        if step.verdict != "bad":
            res.status = "interrupted" if step.verdict == "interrupted" else "bad-end-not-bad"
            return finish(plan, out, res)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = run_step(plan, out, len(res.steps) + 1, mid, on_tick)
        record(step)
        if step.verdict == "bad":
            hi = mid
        elif step.verdict == "good":
            lo = mid
        else:
            res.status = step.verdict  # undecided or interrupted: stop, say where
            break
        res.lo, res.hi = lo, hi
    res.lo, res.hi = lo, hi
    if res.status == "found":
        res.first_bad, res.last_good = values[hi], values[lo]
    return finish(plan, out, res)


def finish(plan: Plan, out: Path, res: BisectResult) -> BisectResult:
    """What changed between the last good and the first bad (or the narrowed range's ends), then
    bisect.json, bisect.md and the chart."""
    from ..reporters import bisect as bisect_report

    res.changed = what_changed(plan, res.axis.values[res.lo], res.axis.values[res.hi])
    (out / "bisect.json").write_text(json.dumps(res.as_dict(), indent=2))
    bisect_report.write(res, out)
    return res


def what_changed(plan: Plan, before: str, after: str) -> dict[str, Any]:
    """The two points' upstream versions and the options whose values the libraries report
    differently (allocator_options)."""
    from ..allocators import resolution

    sides = {}
    for label, value in (("before", before), ("after", after)):
        p = plan.axis.point(value)
        try:
            spec = resolution.resolve(p.allocator, plan.base.experiment.base_dir)
        except UserError as exc:
            sides[label] = {"point": p.label, "error": str(exc)}
            continue
        env = {**plan.base.env, **p.env}
        sides[label] = {
            "point": p.label,
            "family": spec.family,
            "version": spec.version,
            "library": spec.path,
            "options": options.library_options(spec.family, spec.path, env),
        }
    b, a = sides["before"], sides["after"]
    diff = options.differences(b.get("options", {}), a.get("options", {}))
    return {
        "before": {k: v for k, v in b.items() if k != "options"},
        "after": {k: v for k, v in a.items() if k != "options"},
        "options_reported": bool(b.get("options") or a.get("options")),
        "options_differing": diff,
    }


def check_plan(plan: Plan) -> None:
    """Every point of a tunable or parameter axis (the two ends of a version axis: the others are
    built when reached) passes `alloclab check`'s checks before anything is created."""
    from ..run import preflight

    values = plan.axis.values
    chosen = [values[0], values[-1]] if plan.axis.kind == "version" else list(values)
    exp = derive(
        plan.base,
        "bisect-check",
        [(f"v{i:02d}", plan.axis.point(v)) for i, v in enumerate(chosen)],
        "v00",
        load_s=max(1.0, plan.max_step_s - plan.base.experiment.phases.warmup),
    )
    preflight.prepare(exp)
