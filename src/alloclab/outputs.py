"""Directories alloclab writes into (runs, demos, imports): checked before anything is written."""
from __future__ import annotations

from pathlib import Path

from .errors import UserError


def refuse_nonempty(path: Path, what: str = "output directory") -> None:
    """An output must not hold anything yet: a run or an import never mixes with older files."""
    if any(path.iterdir()):
        raise UserError(f"{what} {path} already exists and is not empty", "choose another with -o")


def new_output(path: Path) -> None:
    """Refused when `path` exists and is not empty (a missing path is fine: it is created later)."""
    if path.exists():
        refuse_nonempty(path)
