"""`alloclab merge H1/run H2/run ... -o RUN`: hosts' run stores as one run (alloclab.interchange.merge)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..interchange.merge import merge_runs
from ..store import Store
from .conventions import emit_json


def merge_command(runs: tuple[Path, ...], output: Path, console: Console, as_json: bool = False) -> None:
    progress = Console(stderr=True, highlight=False)
    out = merge_runs(list(runs), output, progress.print)
    if as_json:
        emit_json(new_run_document(out))
        return
    console.print(f"next: alloclab report {out}")


def new_run_document(run_dir: Path) -> dict:
    """--json of a verb that made a run (merge, import): where it is, its groups with their
    replicas, its hosts, and the command that analyses it."""
    store = Store.open_checked(run_dir)
    try:
        replicas = store.replicas()
        groups = [
            {"name": g["name"], "allocator": g["allocator"], "replicas": sum(r["group"] == g["name"] for r in replicas)}
            for g in store.groups()
        ]
    finally:
        store.close()
    return {
        "run": str(Path(run_dir).resolve()),
        "groups": groups,
        "hosts": sorted({r["host"] for r in replicas if r.get("host")}),
        "next": f"alloclab report {run_dir}",
    }
