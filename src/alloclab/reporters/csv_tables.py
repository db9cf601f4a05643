"""summary.csv (one row per group) and replicas.csv (one row per replica)."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path

from ..common.outputs import write_output
from .input import ReportInput


def _write(path: Path, rows: list[dict], empty_header: str) -> Path:
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [empty_header])
    w.writeheader()
    w.writerows(rows)
    return write_output(path.parent, path.name, f.getvalue())


class CsvReporter:
    name = "csv"

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        return [
            _write(out_dir / "summary.csv", report.rows, "group"),
            _write(out_dir / "replicas.csv", [asdict(r) for r in report.analysis.replicas], "name"),
        ]
