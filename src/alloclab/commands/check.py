"""`alloclab check`: an experiment file checked as `run` checks it, nothing created."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from .. import preflight
from ..analysis.rules import RULES
from ..config import load_experiment


def check_command(experiment: Path, console: Console) -> int:
    exp = load_experiment(experiment)
    specs = preflight.prepare(exp).specs
    preflight.check_load_command(exp)
    planned = exp.planned_duration()
    length = f"{planned:g}s planned" if planned is not None else "until the replicas exit"
    warnings = preflight.planned_warnings(exp)
    verdict = "ok" if not warnings else f"ok, with {len(warnings)} warning{'s' * (len(warnings) > 1)} (below)"
    console.print(f"{verdict}: {exp.name}: {len(exp.groups)} groups ({', '.join(f'{g.name}={specs[g.name].kind}' for g in exp.groups)}) "
                  f"x {exp.replicas} replicas, sampled every {exp.interval:g}s, {length}", highlight=False)
    allowed = preflight.steady_samples_allowed(exp)
    if allowed is not None:
        most, least = allowed
        console.print(f"steady samples per replica the phases allow: {most if most == least else f'{least}–{most}'} "
                      f"(the analysis needs {RULES['min_steady_samples']})", highlight=False)
    # every warning `run` would print before it starts, on the same stream
    err = Console(stderr=True)
    for w in warnings:
        err.print(Text.assemble(("warning", "yellow"), f" {w.kind}: {w.message}"), highlight=False)   # no markup in messages
    return 0
