"""The TorUtils CSV layout (memory.csv, events.csv, diagnostics.csv, experiment.json) as a reporter.

Not in the default set: the export reads every raw sample (not the analysis) and is written on
request (`alloclab export RUN --csv DIR`) into its own directory; this adapter lets code that
drives reporters ask for it too."""

from __future__ import annotations

from pathlib import Path

from ..torutils.export import export_csv
from .input import ReportInput


class TorUtilsCsvReporter:
    name = "torutils-csv"

    def __init__(self, subdir: str = "torutils") -> None:
        self.subdir = subdir

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        return export_csv(report.run_dir, out_dir / self.subdir)
