"""`alloclab check`: an experiment file checked as `run` checks it, nothing created."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .. import preflight
from ..config import load_experiment


def check_command(experiment: Path, console: Console) -> int:
    exp = load_experiment(experiment)
    specs = preflight.prepare(exp).specs
    planned = exp.planned_duration()
    length = f"{planned:g}s planned" if planned is not None else "until the replicas exit"
    console.print(f"ok: {exp.name}: {len(exp.groups)} groups ({', '.join(f'{g.name}={specs[g.name].kind}' for g in exp.groups)}) "
                  f"x {exp.replicas} replicas, sampled every {exp.interval:g}s, {length}")
    return 0
