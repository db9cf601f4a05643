"""A run's report: analyse once, read the store once into a ReportInput, run every reporter
(alloclab.reporters: report.md, report.html, summary.json, summary.csv, replicas.csv, charts/*.png,
the terminal summary)."""

from __future__ import annotations

from pathlib import Path

from ..analysis import Analysis, analyse
from ..store import Store
from . import ReportInput, Section, build_input, write_all
from .terminal import TerminalReporter


def prepare(
    run: str | Path | Store,
    metric: str | None = None,
    sections: list[Section] | None = None,
    baseline: str | None = None,
) -> ReportInput:
    """Analyse the run (against `baseline`, by default the run's) and read what the reporters need
    from its store, once. `run`: a run directory or run.db, or a store the caller opened (and closes)."""
    store = run if isinstance(run, Store) else Store.open_checked(run)
    try:
        return build_input(store, analyse(store, metric, baseline), sections)
    finally:
        if store is not run:
            store.close()


def report_run(
    run: str | Path | Store,
    out_dir: Path | None = None,
    metric: str | None = None,
    console=None,
    baseline: str | None = None,
) -> tuple[Path, ReportInput]:
    """Write every default report file into out_dir (the run's directory by default) and, given a
    console, print the terminal summary; returns report.md's path and the report input."""
    report = prepare(run, metric, baseline=baseline)
    out = Path(out_dir) if out_dir else report.run_dir
    write_all(report, out)
    if console is not None:
        TerminalReporter(console).write(report, out)
    return out / "report.md", report


def write_report(run: str | Path, out_dir: Path | None = None, metric: str | None = None) -> tuple[Path, Analysis]:
    """Write the report files; returns report.md's path and the analysis (older callers)."""
    path, report = report_run(run, out_dir, metric)
    return path, report.analysis
