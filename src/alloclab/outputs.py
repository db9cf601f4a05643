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


# The Tor test network's directory inside a run (tornet writes it; the report names it).
TOR_NETWORK_DIR = "tor-network"

# What `alloclab report` (and the end of `alloclab run`) writes, into the run's directory or -o DIR.
REPORT_FILES = {
    "report.md": "the report: recommendation, summary with intervals, warnings, charts, groups, replicas",
    "report.html": "the same as one self-contained page with interactive charts (no network when opened)",
    "summary.json": "summary figures, warnings, recommendation, run and host metadata, allocator provenance, "
                    "the experiment file",
    "summary.csv": "one row per group: the summary table's figures",
    "replicas.csv": "one row per replica: its figures and status",
    "charts/": "PNG charts: timeseries, distribution, trajectories, idle_release, fragmentation (where data exist)",
}
