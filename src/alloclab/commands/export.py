"""`alloclab export RUN --csv DIR`: a run as CSV in the 1AEO TorUtils layout."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..store import resolve_run


def export_command(run_dir: Path, csv_dir: Path, console: Console) -> None:
    resolve_run(run_dir)
    from ..torutils.export import export_csv  # (here, once the path is a run)

    for p in export_csv(run_dir, csv_dir):
        console.print(f"wrote {p}")
