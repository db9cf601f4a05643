"""`alloclab compare RUN_A RUN_B`: run B against run A group by group (alloclab.runcompare)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..config import METRICS
from ..errors import UserError

EXIT_GATE_FAILED = 1


def compare_command(run_a: Path, run_b: Path, by: str, metric: str | None, fail_on_increase: float | None,
                    as_json: bool, console: Console) -> int:
    if metric and metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    from .. import runcompare
    rc = runcompare.compare_runs(run_a, run_b, metric=metric, by=by, fail_on_increase=fail_on_increase)
    if as_json:
        print(runcompare.to_json(rc))
    else:
        for line in runcompare.text_lines(rc):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_GATE_FAILED if rc.failed else 0
