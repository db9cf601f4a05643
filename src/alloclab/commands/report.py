"""`alloclab report RUN`: analyse a run once, write report.md, report.html, summary.csv/json,
replicas.csv and charts, print the summary."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

from ..common.errors import UserError
from ..common.outputs import writable_directory
from ..experiment_file import METRICS
from ..store import Store, resolve_run


def refuse_unrecorded_metric(store: Store, metric: str | None) -> None:
    """--metric M of a run that never recorded M (a TorUtils import holds RSS only) is refused by
    name: its analysis would call every group 'Too short'."""
    if not metric:
        return
    recorded = [m for m in METRICS if f"{m}_kb" in store.sample_columns_with_values(f"{k}_kb" for k in METRICS)]
    if metric not in recorded:
        raise UserError(
            f"--metric {metric}: {store.run_dir} recorded no {metric.upper()} samples",
            f"use --metric {' or '.join(recorded)}" if recorded else "this run recorded no memory samples",
        )


def report_command(
    run_dir: Path,
    output: Path | None,
    metric: str | None,
    baseline: str | None,
    console: Console,
    as_json: bool = False,
) -> None:
    if metric and metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    store = Store.open_checked(resolve_run(run_dir))  # once: checked, then read by the whole report
    try:
        refuse_unrecorded_metric(store, metric)
        # before the analysis (seconds on a long run): a file in the way or a read-only run directory
        made = output is not None and not output.exists()
        writable_directory(output or store.run_dir, "report directory" if output else "the run directory")
        try:
            from ..reporters import (
                report,  # (here, once the path is a run: the statistics and charts take ~1 s to import)
            )

            path, written = report.report_run(store, output, metric, None if as_json else console, baseline=baseline)
        except BaseException:  # refused (a baseline not in the run), interrupted: no half-written -o left behind
            if made:  # (made by this command: everything in it is this report's)
                shutil.rmtree(output, ignore_errors=True)
            raise
    finally:
        store.close()
    if as_json:  # summary.json's document, as written beside report.md
        from ..reporters.json_summary import summary_document
        from .conventions import emit_json

        emit_json(summary_document(written))
        return
    console.print(f"report: {path} (interactive: {path.with_name('report.html')})")
