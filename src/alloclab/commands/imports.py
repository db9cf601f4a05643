"""`alloclab import ...`: other tools' data read into an alloclab run (`import` is a Python keyword,
hence the module's name)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from ..torutils.importer import import_torutils, naive_timezone
from .conventions import emit_json
from .merge import new_run_document


def torutils_command(
    folder: Path, output: Path, naive_utc_offset: float, baseline: str | None, console: Console, as_json: bool = False
) -> None:
    progress = Console(stderr=True, highlight=False)  # a line per million rows: long imports show they move
    out = import_torutils(folder, output, naive_timezone(naive_utc_offset), baseline, progress=progress.print)
    if as_json:
        emit_json(new_run_document(out))
        return
    console.print(f"imported into {out}; next: alloclab report {out}")


def prometheus_command(
    url: str,
    output: Path,
    start: str,
    end: str,
    step: str,
    query: str | None,
    match: str | None,
    group_label: str,
    unit_label: str,
    host_label: str,
    baseline: str | None,
    timeout: str,
    max_answer_mb: float,
    console: Console,
    as_json: bool = False,
) -> None:
    from ..experiment_file import parse_duration
    from ..interchange import prometheus_import

    now = time.time()
    labels = prometheus_import.Labels(group=group_label, unit=unit_label, host=host_label)
    seconds = parse_duration(step, "--step")
    limits = prometheus_import.Limits(
        max_bytes=int(max_answer_mb * 2**20), deadline_s=parse_duration(timeout, "--timeout")
    )
    progress = Console(stderr=True, highlight=False, soft_wrap=True)  # a line per query answered
    out = prometheus_import.import_prometheus(
        url,
        output,
        prometheus_import.parse_time(start, "--from", now),
        prometheus_import.parse_time(end, "--to", now),
        seconds,
        prometheus_import.default_queries(query, match or "", seconds),
        labels,
        baseline,
        progress.print,
        limits,
    )
    if as_json:
        emit_json(new_run_document(out))
        return
    console.print(f"next: alloclab report {out}")
