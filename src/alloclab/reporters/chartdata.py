"""What the PNG and HTML charts share: the time axis, group colours, per-group bands over
replicas, phase and event marks, thinning long series to their extremes. Pure numpy on the
analysis' series."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..analysis import Analysis, Series
from .decimate import min_max

# an interquartile band from fewer replicas says nothing: draw each replica's line instead
MIN_BAND_REPLICAS = 4
# matplotlib's tab10, so the PNGs and the HTML page colour a group alike
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def group_colors(groups: list[str]) -> dict[str, str]:
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}


@dataclass
class TimeAxis:
    t0: float  # Unix s at x = 0
    unit: str  # "seconds", "minutes", "hours", "days"
    scale: float  # seconds per unit

    def x(self, t):
        return (np.asarray(t, dtype=float) - self.t0) / self.scale

    @property
    def label(self) -> str:
        return f"time since start ({self.unit})"


def time_axis(series: list[Series]) -> TimeAxis | None:
    drawn = [s for s in series if len(s.t)]
    if not drawn:
        return None
    t0 = min(float(s.t[0]) for s in drawn)
    span = max(float(s.t[-1]) for s in drawn) - t0
    for name, sec in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if span >= 3 * sec:
            return TimeAxis(t0, name, sec)
    return TimeAxis(t0, "seconds", 1.0)


def treatment_series(a: Analysis, group: str) -> list[Series]:
    """The group's verified replicas that end on its own allocator (each drawn from when that began)."""
    return [
        s
        for s in a.series
        if s.group == group and len(s.t) and s.verified is not False and s.treatment_start is not None
    ]


@dataclass
class Band:
    t: np.ndarray  # Unix s grid
    median: np.ndarray
    q1: np.ndarray
    q3: np.ndarray
    n: int  # replicas


def band(ss: list[Series], values: str = "mb", points: int = 300) -> Band | None:
    """Median and quartiles over replicas on a common grid, each replica only over its treatment span."""
    if not ss:
        return None
    lo, hi = min(s.treatment_start for s in ss), max(float(s.t[-1]) for s in ss)
    grid = np.linspace(lo, hi, points)
    stack = np.vstack(
        [
            np.where((grid >= s.treatment_start) & (grid <= s.t[-1]), np.interp(grid, s.t, getattr(s, values)), np.nan)
            for s in ss
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(stack, axis=0)
        q1, q3 = np.nanpercentile(stack, [25, 75], axis=0)
    return Band(grid, med, q1, q3, len(ss))


@dataclass
class Mark:
    t: float
    label: str
    is_phase: bool


def marks(events: list[dict], limit: int = 40) -> list[Mark]:
    """Phase starts (labelled with the phase's name) and other events, at most `limit` of the latter."""
    out, others = [], 0
    for e in events:
        if e["kind"] == "phase":
            desc = e.get("description") or ""
            out.append(Mark(float(e["t"]), desc.replace(" phase begins", "") or "phase", True))
        elif others < limit:
            others += 1
            out.append(Mark(float(e["t"]), f"{e['kind']}: {e.get('description') or ''}"[:80], False))
    return out


# buckets of time per chart line: at most 2 points per bucket and series, ~600 per line as before
CHART_BUCKETS = 300


def thin(x: np.ndarray, *ys: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each series' minimum and maximum per bucket of x (decimate.min_max): charts stay light and a
    one-sample spike or dip still shows (an even sample dropped it)."""
    return min_max(x, *ys, buckets=CHART_BUCKETS)


def has_values(arr: np.ndarray) -> bool:
    return bool(len(arr)) and bool(np.any(~np.isnan(arr)))
