"""`alloclab workloads`: the built-in workload models and their parameters."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..workloads import describe


def list_command(console: Console) -> None:
    t = Table("name", "what it models", "parameters (defaults)")
    for row in describe():
        t.add_row(*row)
    console.print(t)
