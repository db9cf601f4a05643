"""`alloclab merge H1/run H2/run ... -o RUN`: hosts' run stores as one run (alloclab.merge)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..merge import merge_runs


def merge_command(runs: tuple[Path, ...], output: Path, console: Console) -> None:
    progress = Console(stderr=True, highlight=False)
    out = merge_runs(list(runs), output, progress.print)
    console.print(f"next: alloclab report {out}")
