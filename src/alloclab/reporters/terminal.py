"""The terminal summary (rich): the summary table narrowed to the console's width, warnings coloured
by severity, the recommendation. Group, level, ratio with its interval and status always show in
full: secondary columns are dropped first, and cells wrap at spaces rather than being cut."""

from __future__ import annotations

from pathlib import Path

from ..analysis import Analysis
from .input import ReportInput
from .tables import TABLE_HEADERS, summary_rows, table_cells

# (column in TABLE_HEADERS, terminal header, priority: lower is kept longer; 0 is never dropped)
COLUMNS = [
    ("group", "group", 0),
    ("allocator", "allocator", 2),
    ("verified", "verified", 3),
    ("level MB", "level MB", 0),
    ("final MB", "final MB", 4),
    ("change over window", "change", 5),
    ("vs baseline [CI]", "× baseline [CI]", 0),
    ("p (Holm)", "p Holm", 1),
    ("letters", "letters", 1),
    ("status", "status", 0),
]
SEVERITY_STYLE = {"serious": "bold red", "caution": "yellow", "info": "cyan"}


def summary_table(a: Analysis, rows: list[dict], width: int, console):
    """The widest table of COLUMNS that fits `width` (columns dropped by priority)."""
    from rich import box
    from rich.table import Table

    cells_of = [table_cells(r) for r in rows]
    kept = list(COLUMNS)
    while True:
        table = Table(
            title=f"{a.metric.upper()} by group (baseline: {a.baseline}; {a.level_basis})",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            title_justify="left",
        )
        for key, header, _ in kept:
            numeric = key not in ("group", "allocator", "status")
            # a number, a status word or the ratio never splits mid-token: wrap only at spaces
            table.add_column(
                header,
                justify="right" if numeric else "left",
                overflow="fold",
                no_wrap=key in ("level MB", "status", "p (Holm)", "final MB"),
            )
        for cells in cells_of:
            table.add_row(*(cells[TABLE_HEADERS.index(key)] for key, _, _ in kept))
        droppable = [c for c in kept if c[2] > 0]
        if _natural_width(console, table) <= width or not droppable:
            return table
        kept.remove(max(droppable, key=lambda c: c[2]))


def _natural_width(console, table) -> int:
    """The width the table takes when nothing wraps; above the console's width it would wrap cells."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def print_summary(a: Analysis, console, rows: list[dict] | None = None) -> None:
    """The summary table (rows: summary_rows(a), computed when not given), warnings, recommendation."""
    console.print(summary_table(a, rows if rows is not None else summary_rows(a), console.width, console))
    from rich.text import Text

    for w in a.warnings:  # one Text per warning: wrapped as a whole, nothing read as markup
        console.print(
            Text.assemble((w.severity, SEVERITY_STYLE.get(w.severity, "")), f" {w.kind}: {w.message}"), highlight=False
        )
    if a.recommendation:
        rec = a.recommendation
        console.print(plain(rec.headline()), style="bold", markup=False, highlight=False)
        console.print(plain(rec.detail("the warnings printed above")), markup=False, highlight=False)


def plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("*", "")


class TerminalReporter:
    """Prints the summary; writes no file."""

    name = "terminal"

    def __init__(self, console) -> None:
        self.console = console

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        print_summary(report.analysis, self.console, report.rows)
        return []
