"""`alloclab import ...`: other tools' data read into an alloclab run (`import` is a Python keyword,
hence the module's name)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..torutils import import_torutils, naive_timezone


def torutils_command(folder: Path, output: Path, naive_utc_offset: float, baseline: str | None, console: Console) -> None:
    out = import_torutils(folder, output, naive_timezone(naive_utc_offset), baseline)
    console.print(f"imported into {out}; next: alloclab report {out}")
