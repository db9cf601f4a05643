"""Every output of alloclab. A run's report: one small module per format, all behind one interface
(hyperfine's export/ style), and what they share (input, tables, sections, hosts, decomposition,
chartdata with decimate, plots); `report` analyses once and runs them. Other outputs beside it:
two runs side by side (two_runs), bisect and sweep (bisect, sweep), fleet status (fleet_status),
a trace's chart (trace).

A reporter has a `name` and `write(report_input, out_dir) -> list[Path]` (the files it wrote). Every
reporter takes the same ReportInput, built once from the store and the analysis (`build_input`, the
only reading of the store here; `report` also analyses): no reporter opens the store or analyses.
`write_all` runs the default set in order (charts before markdown, which links them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from .input import GroupRecord, ReportInput, Section, Table, build_input, register_section

# registration order is the report's section order: not sorted
# isort: off
from . import sections  # noqa: F401  (registers the contributed sections)
from . import hosts  # noqa: F401  (the host-as-a-factor section)
from . import fleet_status  # noqa: F401  (a fleet run's "Decided?" section)
# isort: on


@runtime_checkable
class Reporter(Protocol):
    name: str

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        """Write this reporter's files into out_dir; return their paths (none for the terminal)."""
        ...


def default_reporters() -> list[Reporter]:
    """What `alloclab report` and the end of `alloclab run` write (report.md, report.html, summary.json,
    summary.csv, replicas.csv, charts/*.png)."""
    from .csv_tables import CsvReporter
    from .html import HtmlReporter
    from .json_summary import JsonReporter
    from .markdown import MarkdownReporter
    from .png import PngReporter

    return [JsonReporter(), CsvReporter(), PngReporter(), MarkdownReporter(), HtmlReporter()]


def write_all(report: ReportInput, out_dir: Path, reporters: list[Reporter] | None = None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for r in reporters if reporters is not None else default_reporters():
        written += r.write(report, out_dir)
    return written


__all__ = [
    "Reporter",
    "ReportInput",
    "GroupRecord",
    "Section",
    "Table",
    "build_input",
    "register_section",
    "default_reporters",
    "write_all",
]
