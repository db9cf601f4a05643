"""summary.json: the summary figures, warnings and recommendation, with the run's metadata, the host,
the provenance of every group's allocator build and the experiment file — one machine-readable record."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.outputs import write_output
from ..store import decode_meta
from .input import ReportInput

FORMAT = 2  # 2: adds run, host, allocator_builds, experiment, sections


def summary_document(report: ReportInput) -> dict:
    a = report.analysis
    return {
        "format": FORMAT,
        "metric": a.metric,
        "baseline": a.baseline,
        "groups": report.rows,
        "basis": a.level_basis,
        "window": {"start": a.window.start, "end": a.window.end, "basis": a.window.basis} if a.window else None,
        "warnings": [w.as_dict() for w in a.warnings],
        "recommendation": a.recommendation.as_dict() if a.recommendation else None,
        "run": {"name": report.run_name, "dir": str(report.run_dir), "meta": decode_meta(report.meta)},
        "host": decode_meta(report.host),
        "allocator_builds": [g.as_dict() for g in report.groups],
        "experiment": report.experiment_text,
        "sections": {s.key: s.data for s in report.sections if s.data},
    }


class JsonReporter:
    name = "json"

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        return [write_output(out_dir, "summary.json", json.dumps(summary_document(report), indent=2, default=str))]
