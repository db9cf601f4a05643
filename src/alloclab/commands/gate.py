"""`alloclab gate`: a PR's memory gate, baseline and candidate side by side in one run (alloclab.studies.gate)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..common import exitcodes
from ..common.errors import UserError
from ..experiment_file import METRICS, load_experiment
from .compare import GATE_STYLE, exit_code
from .conventions import emit_json


def _source(
    experiment: Path | None,
    command: str | None,
    baseline: str | None,
    candidate: str | None,
    trace: Path | None,
    baseline_trace: Path | None,
    candidate_trace: Path | None,
    workload: str | None,
) -> str:
    given = [
        name
        for name, on in (
            ("an experiment file", experiment),
            ("a command", command or baseline or candidate),
            ("a trace", trace or baseline_trace or candidate_trace),
            ("--workload", workload),
        )
        if on
    ]
    if len(given) != 1:
        raise UserError(
            "say what the gate runs: --baseline CMD --candidate CMD (or --command CMD), --baseline-trace F "
            "--candidate-trace F (or --trace F), --workload NAME, or an experiment file"
            if not given
            else f"give one of {' and '.join(given)}",
            "see `alloclab gate --help`",
        )
    return given[0]


def _pair(both, base, cand, what: str, option: str):
    if both is not None:
        if base is not None or cand is not None:
            raise UserError(
                f"--{option} runs the same {what} on both sides; --baseline{'-' + option if option != 'command' else ''}"
                f"/--candidate{'-' + option if option != 'command' else ''} give one each",
                "give one form",
            )
        return both, both
    if base is None or cand is None:
        raise UserError(
            f"a gate needs the baseline's and the candidate's {what}",
            f"give both --baseline{'-' + option if option != 'command' else ''} and "
            f"--candidate{'-' + option if option != 'command' else ''}, or --{option} for both",
        )
    return base, cand


def gate_command(
    experiment: Path | None,
    fail_on_increase: float | None,
    command: str | None,
    baseline: str | None,
    candidate: str | None,
    trace: Path | None,
    baseline_trace: Path | None,
    candidate_trace: Path | None,
    workload: str | None,
    baseline_allocator: str,
    candidate_allocator: str,
    baseline_env: tuple[str, ...],
    candidate_env: tuple[str, ...],
    replicas: int,
    max_duration: str,
    warmup: str,
    interval: str,
    first_look: str | None,
    speed: float,
    metric: str,
    output: Path | None,
    as_json: bool,
    no_report: bool,
    allow_inconclusive: bool,
    console: Console,
) -> int:
    from ..studies import gate as g

    if fail_on_increase is None:
        raise UserError("the gate needs its threshold", "add --fail-on-increase PCT, e.g. 5")
    if metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    source = _source(experiment, command, baseline, candidate, trace, baseline_trace, candidate_trace, workload)
    max_s, warmup_s, interval_s, first_s = g.plan_durations(max_duration, warmup, interval, first_look)
    if source == "an experiment file":
        exp = g.from_file(load_experiment(experiment), fail_on_increase)
    else:
        sides = {}
        if source == "a command":
            b, c = _pair(command, baseline, candidate, "command", "command")
            sides = {"command": (g.parse_command(b, "--baseline"), g.parse_command(c, "--candidate"))}
        elif source == "a trace":
            b, c = _pair(trace, baseline_trace, candidate_trace, "trace", "trace")
            for p in (b, c):
                if not Path(p).is_file():
                    raise UserError(
                        f"trace {p} is not a file", "record one with `alloclab trace record -o FILE -- CMD`"
                    )
            sides = {"trace": (Path(b), Path(c))}
        base_side = g.Side(
            allocator=baseline_allocator,
            env=g.parse_env(baseline_env, "--baseline-env"),
            **{k: v[0] for k, v in sides.items()},
        )
        cand_side = g.Side(
            allocator=candidate_allocator,
            env=g.parse_env(candidate_env, "--candidate-env"),
            **{k: v[1] for k, v in sides.items()},
        )
        exp = g.experiment(
            g.Plan(
                base_side,
                cand_side,
                fail_on_increase,
                workload,
                replicas,
                interval_s,
                warmup_s,
                max_s,
                first_s,
                metric,
                speed,
            )
        )
    err = Console(stderr=True)
    from .run import EXIT_CUT_SHORT, Progress, _SetupProgress

    planned = exp.planned_duration()

    def hook(runner, stop):
        err.print(
            f"gate: {exp.replicas} replicas a side, interleaved; looks (elapsed s at level): {stop.schedule()}",
            markup=False,
            highlight=False,
        )
        runner.on_setup = _SetupProgress(err)

    with Progress(err, exp, planned) as progress:
        res = g.run(exp, fail_on_increase, output, first_s, on_tick=progress.tick, runner_hook=hook)
    if res.cut_short == "disk-full":
        err.print(
            f"alloclab: error: the disk holding {res.run_dir} is full: the gate's run is cut short (disk-full) — "
            "free space, then run the gate again",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_CUT_SHORT
    if not no_report and not res.interrupted:
        from ..reporters import report

        report.write_report(res.run_dir)
    if as_json:
        emit_json(res.as_dict())
    else:
        for line in res.lines():
            style = next((v for k, v in GATE_STYLE.items() if line.startswith(k)), None)
            console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
        if not no_report and not res.interrupted:
            console.print(f"report: {res.run_dir}/report.html", markup=False, highlight=False)
    return exitcodes.INTERRUPTED if res.interrupted else exit_code(res.outcome, allow_inconclusive)
