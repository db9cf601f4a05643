"""`alloclab report RUN`: analyse a run, write report.md, summary.csv/json and charts."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .. import report
from ..config import METRICS
from ..errors import UserError


def report_command(run_dir: Path, output: Path | None, metric: str | None, console: Console) -> None:
    if metric and metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    path, analysed = report.write_report(run_dir, output, metric)
    report.print_summary(analysed, console)
    console.print(f"report: {path}")
