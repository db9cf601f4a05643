"""`alloclab check`: an experiment file checked as `run` checks it, nothing created."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from .. import preflight
from ..config import load_experiment


def check_command(experiment: Path, console: Console) -> int:
    exp = load_experiment(experiment)
    specs = preflight.prepare(exp).specs
    preflight.check_load_command(exp)
    # (here, once the file passed: the statistics' imports take ~0.8 s a bad file need not wait for)
    from ..analysis.design import planned_warnings, steady_allowance
    from ..stats.rules import RULES as STATS_RULES
    planned = exp.planned_duration()
    length = f"{planned:g}s planned" if planned is not None else "until the replicas exit"
    warnings = planned_warnings(exp)
    serious = [w for w in warnings if w.severity != "info"]
    notes = len(warnings) - len(serious)
    said = [f"{len(serious)} warning{'s' * (len(serious) > 1)}"] * bool(serious) + [f"{notes} note{'s' * (notes > 1)}"] * bool(notes)
    verdict = "ok" if not warnings else f"ok, with {' and '.join(said)} (below)"
    console.print(f"{verdict}: {exp.name}: {len(exp.groups)} groups ({', '.join(f'{g.name}={specs[g.name].kind}' for g in exp.groups)}) "
                  f"x {exp.replicas} replicas, sampled every {exp.interval:g}s, {length}", highlight=False)
    a = steady_allowance(exp)
    if a is not None:
        samples = a.samples_most if a.samples_most == a.samples_least else f"{a.samples_least}–{a.samples_most}"
        window = f"{a.window_most_s:g}" if a.samples_most == a.samples_least else f"{a.window_least_s:g}–{a.window_most_s:g}"
        console.print(f"steady samples per replica the phases allow: {samples} over {window}s (the status rules need "
                      f"{STATS_RULES['min_samples']:g} over at least {STATS_RULES['min_window_s']:g}s)", highlight=False)
    # every warning `run` would print before it starts, on the same stream
    print_planned_warnings(warnings, Console(stderr=True))
    return 0


def print_planned_warnings(warnings, console: Console) -> None:
    """The planned warnings as `check` and `run` print them: cautions as warnings, info as notes."""
    for w in warnings:
        label = ("note", "dim") if w.severity == "info" else ("warning", "yellow")
        console.print(Text.assemble(label, f" {w.kind}: {w.message}"), highlight=False)   # no markup in messages
