"""`alloclab bisect`: find the first bad version / tunable value / workload parameter (alloclab.studies.bisection)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..common import exitcodes, outputs, timefmt
from ..common.errors import UserError
from ..experiment_file import parse_duration
from ..run import preflight

EXIT_NOT_FOUND = exitcodes.OUTCOME  # undecided, or the bad end not shown bad: the report says why


def _params(items: tuple[str, ...]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or not key or number is None:
            raise UserError(f"--workload-param {item!r} is not NAME=NUMBER", "write e.g. --workload-param hour=6")
        out[key] = int(number) if number.is_integer() else number
    return out


def bisect_command(
    target: str,
    family: str | None,
    good: str | None,
    bad: str | None,
    variant: str | None,
    tunable: str | None,
    param: str | None,
    values: str | None,
    allocator: str | None,
    metric: str,
    threshold_ratio: float,
    replicas: int | None,
    interval: str | None,
    warmup: str | None,
    workload_params: tuple[str, ...],
    max_step: str,
    first_look: str,
    check_bad: bool,
    no_report: bool,
    output: Path | None,
    console: Console,
) -> int:
    from ..allocators import version_range
    from ..studies import bisection as bisect, derive

    axes = [name for name, given in (("--family", family), ("--tunable", tunable), ("--param", param)) if given]
    if len(axes) != 1:
        raise UserError(
            "say what to bisect: --family F --good V --bad V, or --tunable NAME --values ..., "
            "or --param NAME --values ..."
            if not axes
            else f"give one axis, not {' and '.join(axes)}",
            "see `alloclab bisect --help`",
        )
    if metric not in bisect.METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(bisect.METRICS)}")
    if not threshold_ratio > 0:
        raise UserError(
            f"--threshold-ratio {threshold_ratio:g} must be positive", "e.g. --threshold-ratio 1.10 (10% above good)"
        )
    max_step_s = parse_duration(max_step, "--max-step")
    first_look_s = parse_duration(first_look, "--first-look")
    preflight.check_output(output)
    if output is not None:
        outputs.new_output(output)  # a used -o is refused before the steps are resolved (registries asked)
    base = derive.base_experiment(
        target,
        replicas=replicas,
        interval=interval,
        warmup=warmup,
        metric=metric if metric in bisect.MEMORY_METRICS else None,
        params=_params(workload_params),
    )
    if family:
        if not good or not bad:
            raise UserError(
                "--family needs --good VERSION and --bad VERSION", "e.g. --family mimalloc --good 2.0.9 --bad 3.0.1"
            )
        if values or allocator:
            raise UserError("--values and --allocator go with --tunable or --param, not --family", "remove them")
        axis = bisect.Axis("version", family, tuple(version_range.versions_between(family, good, bad, variant)), "")
    else:
        if good or bad:
            raise UserError(
                "--good/--bad go with --family", "for a tunable or parameter, order --values from good to bad"
            )
        if not values:
            raise UserError(f"{axes[0]} needs --values GOOD,...,BAD", "e.g. --values 0,10,100,1000 (good end first)")
        vals = bisect.parse_values(values, "--values")
        if param:
            for v in vals:
                try:
                    float(v)
                except ValueError:
                    raise UserError(f"--values {v!r} is not a number", "workload parameters are numbers") from None
        axis = bisect.Axis("tunable" if tunable else "param", tunable or param, vals, allocator or base.allocator)
    if first_look_s >= max_step_s:
        raise UserError(
            f"--first-look {first_look} is not shorter than --max-step {max_step}",
            "give a first look well inside the step (looks follow at doublings of it)",
        )
    plan = bisect.Plan(base, axis, metric, threshold_ratio, max_step_s, first_look_s, check_bad, not no_report)
    bisect.check_plan(plan)
    out = output or Path("runs") / f"{timefmt.local_stamp()}-bisect-{axis.name}"
    err = Console(stderr=True)
    err.print(
        f"bisect over {len(axis.values)} {axis.kind} values {', '.join(axis.values)}; "
        f"each step ≤ {max_step_s:g}s, first look at {first_look_s:g}s"
    )
    ticker = _Ticker(err)
    try:
        res = bisect.search(plan, out, on_step=lambda s: ticker.step_done(s), on_tick=ticker.tick)
    finally:
        ticker.close()
    from ..reporters.bisect import headline

    console.print(headline(res).replace("**", ""), markup=False, highlight=False)
    console.print(f"bisect: {out}/bisect.md (steps in {out}/steps)")
    if res.status == "interrupted":
        return exitcodes.INTERRUPTED
    return exitcodes.OK if res.status == "found" else EXIT_NOT_FOUND


class _Ticker:
    """One live panel per step (the run's own progress display)."""

    def __init__(self, console: Console):
        self.console, self.progress, self.step = console, None, None

    def tick(self, k, value, runner, elapsed, phase) -> None:
        from .run import Progress

        if self.step != k:
            self.close()
            self.console.rule(f"step {k}: {value}")
            self.progress = Progress(self.console, runner.exp, runner.exp.planned_duration(runner.max_duration))
            self.progress.__enter__()
            self.step = k
        self.progress.tick(runner, elapsed, phase)

    def step_done(self, s) -> None:
        self.close()
        self.console.print(f"step {s.value}: [bold]{s.verdict}[/bold] — {s.reason}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None
