"""Synthetic TorUtils experiment folders for calibration through the user path
(`alloclab import torutils` then the analysis `alloclab report` renders).

Each scenario draws relays (lognormal or heavy-tailed offsets between relays), noise (AR(1) and
an optional slow wander), a daily cycle tied to the UTC clock (shared by every relay), process
restarts with no recorded event, and staircases; `write_folder` writes memory.csv (co-unified
layout, a `group` column) and experiment.json. `analyse_folder` imports it into a temporary run
and returns `alloclab.analysis.analyse` of it — the object `report` renders into summary.json,
replicas.csv and report.md (tests/unit/test_stats_scenarios.py checks the rendered files agree).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from tests import simulated_series as sim

GROUPS = {"A": ("jemalloc", "5.3.0"), "B": ("mimalloc", "2.1.2"), "C": ("tcmalloc", "2.15"), "Z": ("glibc", None)}
T0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC


@dataclass
class Scenario:
    """One dataset's design (every field drawn by the caller, so parameters vary between datasets)."""

    n: int = 5  # relays per group
    days: float = 1.5  # window length
    step_s: float = 600.0  # sampling interval (TorUtils: 5-15 min)
    start_hour: float = 0.0  # UTC hour of the first sample
    level_mb: float = 300.0
    cv: float = 0.10  # relay-to-relay spread (log-sd)
    heavy: bool = False  # t(4) offsets instead of lognormal
    ar_share: float = 0.02  # AR(1) noise, marginal SD share of the level
    ar_phi: float = 0.95  # per sample
    slow_share: float = 0.0  # slow wander (marginal SD share) ...
    slow_tau_s: float = 1.7 * 86400  # ... and its autocorrelation time
    cycle_share: float = 0.0  # daily cycle amplitude (shared phase: the clock)
    cycle_period_s: float = 86400.0
    cycle_phase: float = 0.0
    ratio: dict[str, float] = field(default_factory=dict)  # group -> true level ratio (default 1)
    growth: dict[str, float] = field(default_factory=dict)  # group -> true linear growth over the window
    restart_before_end_s: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # group -> restart window before the end
    restart_share: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # group -> restart window, shares of the window from its start
    restart_relays: dict[str, int] = field(
        default_factory=dict
    )  # group -> how many of its relays restart (default: all)
    restart_recorded: bool = False  # write each restart to events.csv (event_type restart, the relay named)
    restart_low: float = 0.35  # a young process starts at this share of the level ...
    restart_regrow_s: float = 8 * 3600  # ... and regrows with this time constant
    staircase: dict[str, tuple[int, float]] = field(default_factory=dict)  # group -> (steps, climb share)
    shared_growth_mb: float = 0.0  # the workload's own growth: the same MB in every group, linear over the window ...
    shared_growth_cv: float = 0.0  # ... each relay's drawn around it with this spread (share of it)


def series(
    rng: np.random.Generator, sc: Scenario
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, list[float | None]]]:
    """(times, group -> (n, samples) MB, group -> restart time per relay or None)."""
    t = T0 + sc.start_hour * 3600 + sim.times(sc.days * 86400, sc.step_s)
    rel = t - t[0]
    out, restarts = {}, {}
    for g in GROUPS:
        off = sim.replica_levels(
            rng, 1, sc.n, sc.ratio.get(g, 1.0), sc.cv, dist="heavy" if sc.heavy else "lognormal", level=sc.level_mb
        )[0]
        shape = np.ones((sc.n, len(t)))
        shape += sc.growth.get(g, 0.0) * rel / rel[-1]
        if sc.cycle_share:
            shape += sc.cycle_share * np.sin(2 * np.pi * t / sc.cycle_period_s + sc.cycle_phase)
        shape += sim.ar1(rng, sc.n, len(t), sc.ar_phi, sc.ar_share)
        if sc.slow_share:
            shape += sim.ar1(rng, sc.n, len(t), float(np.exp(-sc.step_s / sc.slow_tau_s)), sc.slow_share)
        if g in sc.staircase:
            steps, climb = sc.staircase[g]
            for i in range(sc.n):
                at = np.sort(rng.uniform(rel[-1] * 0.05, rel[-1] * 0.9, steps))
                size = rng.dirichlet(np.ones(steps)) * climb
                shape[i] += np.sum(size[:, None] * (rel[None, :] >= at[:, None]), axis=0)
        rs: list[float | None] = [None] * sc.n
        if g in sc.restart_before_end_s or g in sc.restart_share:
            a, b = sc.restart_before_end_s.get(g, (0.0, 0.0))
            for i in range(min(sc.n, sc.restart_relays.get(g, sc.n))):
                if g in sc.restart_share:
                    lo, hi = sc.restart_share[g]
                    when = t[0] + rng.uniform(lo, hi) * rel[-1]
                else:
                    when = t[-1] - rng.uniform(a, b)
                since = t - when
                young = sc.restart_low + (1 - sc.restart_low) * (
                    1 - np.exp(-np.maximum(since, 0) / sc.restart_regrow_s)
                )
                shape[i] = np.where(since >= 0, shape[i] * young, shape[i])
                rs[i] = float(when)
        out[g] = off[:, None] * np.maximum(shape, 0.05)
        if sc.shared_growth_mb:
            each = sc.shared_growth_mb * (1 + sc.shared_growth_cv * rng.standard_normal(sc.n))
            out[g] += each[:, None] * rel[None, :] / rel[-1]
        restarts[g] = rs
    return t, out, restarts


def relay_name(group: str, i: int) -> str:
    return f"{group.lower()}relay{i:02d}"


def write_folder(
    folder: Path, t: np.ndarray, mb: dict[str, np.ndarray], restarts: dict[str, list[float | None]] | None = None
) -> Path:
    """memory.csv and experiment.json; with `restarts` (group -> restart time per relay or None) also
    events.csv, one `restart` event per restart naming its relay (a recorded restart)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["timestamp,server,type,fingerprint,nickname,group,rss_kb"]
    stamps = [datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M:%S") for x in t]
    for k, stamp in enumerate(stamps):
        for g, ys in mb.items():
            for i in range(ys.shape[0]):
                lines.append(f"{stamp},syn,relay,,{relay_name(g, i)},{g},{int(ys[i, k] * 1024)}")
    (folder / "memory.csv").write_text("\n".join(lines) + "\n")
    if restarts:
        rows = ["timestamp,event_type,description,group,replica"]
        for g, times in restarts.items():
            for i, when in enumerate(times):
                if when is not None:
                    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S")
                    rows.append(f"{stamp},restart,{relay_name(g, i)} restarted,{g},{relay_name(g, i)}")
        (folder / "events.csv").write_text("\n".join(rows) + "\n")
    return write_experiment(folder)


def write_experiment(folder: Path) -> Path:
    """experiment.json naming GROUPS' allocators (glibc the default)."""
    groups = {
        g: {"name": f"{a} {v}" if v else a, "config": {"allocator": a, **({"version": v} if v else {})}}
        for g, (a, v) in GROUPS.items()
    }
    (folder / "experiment.json").write_text(
        json.dumps({"id": "synthetic", "name": "synthetic", "server": "syn", "groups": groups, "allocator": "glibc"})
    )
    return folder


def analyse_folder(folder: Path):
    """Import the folder as `alloclab import torutils` does and analyse it as `report` does."""
    from alloclab.analysis import analyse
    from alloclab.store import Store
    from alloclab.torutils.importer import import_torutils

    with tempfile.TemporaryDirectory(prefix=f"alloclab-cal-{folder.name}-") as tmp:
        run = import_torutils(folder, Path(tmp) / "run")
        store = Store.open(run)
        try:
            return analyse(store)
        finally:
            close = getattr(store, "close", None)
            if close:
                close()


def run_scenario(rng: np.random.Generator, sc: Scenario, work: Path):
    t, mb, restarts = series(rng, sc)
    folder = write_folder(
        Path(tempfile.mkdtemp(prefix="syn-", dir=work)), t, mb, restarts if sc.restart_recorded else None
    )
    try:
        return analyse_folder(folder), restarts
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
