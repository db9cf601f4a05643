"""`alloclab sweep`: settings (allocators × tunables) run in batches beside one baseline (alloclab.studies.sweep)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from ..common import outputs, timefmt
from ..common.errors import UserError
from ..experiment_file import MAX_GROUPS, parse_duration
from ..run import preflight
from .bisect import _params


def sweep_command(
    target: str,
    allocators: tuple[str, ...],
    settings: tuple[str, ...],
    replicas: int | None,
    interval: str | None,
    warmup: str | None,
    load: str | None,
    workload_params: tuple[str, ...],
    max_groups: int | None,
    no_report: bool,
    output: Path | None,
    console: Console,
) -> int:
    from ..studies import derive, sweep

    preflight.check_output(output)
    if output is not None:
        outputs.new_output(output)  # a used -o is refused before the steps are resolved (registries asked)
    load_s = parse_duration(load, "--load") if load else None
    if max_groups is not None and not 2 <= max_groups <= MAX_GROUPS:
        raise UserError(f"--max-groups-per-batch {max_groups} is out of range", f"use 2 to {MAX_GROUPS}")
    loaded = sweep.load_sweep_file(Path(target)) if target.endswith(".toml") else None
    if loaded is not None:
        if allocators or settings or workload_params:
            raise UserError(
                f"{target} is a sweep file: its [sweep] table says what to run",
                "drop --allocator/--set/--workload-param, or edit the file",
            )
        base, spec = loaded
        if any(v is not None for v in (replicas, interval, warmup)):
            exp = derive._reparse(base.experiment, replicas=replicas, interval=interval, warmup=warmup)
            base = replace(base, experiment=exp)
    else:
        base = derive.base_experiment(
            target, replicas=replicas, interval=interval, warmup=warmup, params=_params(workload_params)
        )  # a broken file: refused in its words first
        if not settings and len(allocators) < 2:
            raise UserError(
                "nothing to sweep", "give --set NAME=V1,V2,... and/or two or more --allocator, or a sweep file"
            )
        spec = sweep.spec_from_flags(allocators, settings, base)
        if load_s is None and base.experiment.workload is not None and not target.endswith(".toml"):
            load_s = 120.0
    if max_groups is not None:
        spec.max_groups_per_batch = max_groups
    out = output or Path("runs") / f"{timefmt.local_stamp()}-sweep-{base.experiment.name}"
    err = Console(stderr=True)
    err.print(f"sweep: {len(spec.points)} settings (baseline {spec.points[0].label})")
    progress = {"p": None}

    def on_batch(k: int, n: int, runner) -> None:
        from .run import Progress

        close()
        err.rule(f"batch {k}: {n} groups")
        progress["p"] = Progress(err, runner.exp, runner.exp.planned_duration(runner.max_duration))
        progress["p"].__enter__()
        runner.on_tick = progress["p"].tick

    def close() -> None:
        if progress["p"] is not None:
            progress["p"].__exit__(None, None, None)
            progress["p"] = None

    try:
        res = sweep.run_sweep(base, spec, out, load_s=load_s, write_reports=not no_report, on_batch=on_batch)
    finally:
        close()
    front = [p.label for p in res.points if p.on_front]
    console.print(
        f"sweep: {len(res.points)} settings in {len(res.batch_dirs)} batch(es); Pareto front: {'; '.join(front)}",
        markup=False,
        highlight=False,
    )
    console.print(f"sweep: {out}/sweep.md")
    return 0
