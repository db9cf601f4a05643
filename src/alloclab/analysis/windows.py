"""Comparable windows: when every group runs its treatment, which replicas are clean there, each
group's level at the window's end, a published-style figure beside the clean one, and the
per-group table at regular process ages ("day 1 / 3 / 5 / 7 / 9")."""

from __future__ import annotations

from collections.abc import Callable, Set as AbstractSet
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..common.timefmt import utc
from ..stats.rules import RULES
from .load import Segment, Series


@dataclass
class Window:
    start: float
    end: float
    group_starts: dict[str, float]  # when each group's last replica began its treatment
    basis: str  # plain words: why this window

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600


@dataclass
class EndFigure:
    group: str
    clean: list[str]  # replicas on the group's allocator throughout the window
    clean_mb: float | None  # median level at the window's end over them
    published: list[str]  # every replica listed for the group (any list), as published
    published_mb: float | None
    differs: bool = False
    why: list[str] = field(default_factory=list)  # "keithsweat: jemalloc (D) at the end"
    clean_levels: list[float] = field(default_factory=list)  # each clean replica's level at the window's end


@dataclass
class AgeTable:
    unit: str  # "day", "hour" or "minute"
    points: list[float]  # ages in that unit
    cells: dict[str, list[tuple[float | None, int]]]  # group -> (median MB, replicas) per point


def treatment_window(series: list[Series], groups: list[str]) -> Window | None:
    """The span in which every group with clean data runs its treatment: from the latest group
    start (a group starts when its last clean replica began its final stretch on the group's
    allocator) to the earliest group end."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for g in groups:
        ss = [s for s in series if s.group == g and s.clean is not None]
        if ss:  # (a replica with clean data has a clean segment and its treatment's start)
            starts[g] = max(cast(float, s.treatment_start) for s in ss)
            ends[g] = max(cast(Segment, s.clean).end for s in ss)  # replicas ending earlier drop out, by name
    if not starts:
        return None
    start, end = max(starts.values()), min(ends.values())
    last = max(starts, key=lambda g: starts[g])
    basis = (
        f"all groups run their treatment from {utc(start, minutes=True)} (when {last}'s last replica started it) "
        f"to {utc(end, minutes=True)}"
    )
    if end <= start:  # no overlap: fall back to each group's own clean data (said so)
        start, end = min(starts.values()), max(ends.values())
        basis = "the groups never run their treatments at the same time: each group's own clean span is used"
    return Window(start, end, starts, basis)


def sample_tolerance(s: Series, tolerance: float = 1.0) -> float:
    """How far from a time a replica's sample may lie and still stand for it: its own sampling
    interval × RULES sample_tolerance_intervals (collectors per host or per relay sample seconds
    apart, and miss a tick now and then), at least `tolerance` seconds."""
    return max(tolerance, RULES["sample_tolerance_intervals"] * s.interval)


def level_at(s: Series, t: float, span: float, clean_only: bool = True) -> float | None:
    """The replica's level at time t: median of its samples in [t - span, t], or (none there) its
    last sample at or before t — when clean_only, only within sample_tolerance of t and from the
    process segment covering t (its latest segment begun by t); else as published, however old."""
    lo, first = t - span, -np.inf
    if clean_only:
        seg = s.segment_at(t)
        if seg is None or seg.group != s.group:
            return None
        lo = max(lo, seg.start)
        first = seg.start
    m = (s.t >= lo) & (s.t <= t) & ~np.isnan(s.mb)
    if not m.any():
        before = np.nonzero((s.t <= t) & ~np.isnan(s.mb))[0]
        if not len(before):
            return None
        last = float(s.t[before[-1]])
        if last < first or (clean_only and last < t - max(span, sample_tolerance(s))):
            return None
        return float(s.mb[before[-1]])
    return float(np.median(s.mb[m]))


def day_level(s: Series, w: Window, clean_only: bool = True) -> float | None:
    """The replica's level over the window's last day, free of the hour: the mean of its hourly means
    over (end − RULES day_level_s, end], hours counted back from the end (each hour weighs the same
    however many samples it holds, so staggered or missed samples do not tilt it towards an hour).
    clean_only: from the process segment covering the end, and a segment that began within the last
    RULES day_level_min_hours (a young process) gives its level at the end (level_at); else as
    published, whatever ran (no sample in that day: its last sample, level_at)."""
    day = RULES["day_level_s"]
    first = -np.inf
    if clean_only:
        seg = s.segment_at(w.end)
        if seg is None or seg.group != s.group:
            return None
        if seg.start > w.end - RULES["day_level_min_hours"] * 3600:
            return level_at(s, w.end, RULES["end_span_share"] * (w.end - w.start))
        first = seg.start
    m = (s.t > w.end - day) & (s.t <= w.end) & (s.t >= first) & ~np.isnan(s.mb)
    if not m.any():
        return None if clean_only else level_at(s, w.end, 0.0, clean_only=False)
    hour = np.minimum((w.end - s.t[m]) // 3600, day // 3600 - 1).astype(int)
    sums, counts = np.bincount(hour, weights=s.mb[m]), np.bincount(hour)
    return float(np.mean(sums[counts > 0] / counts[counts > 0]))


def day_levels(w: Window) -> bool:
    """Whether levels are compared as day levels (day_level): windows of a day or more."""
    return w.end - w.start >= RULES["day_level_s"]


def daily_swing(s: Series, w: Window) -> float | None:
    """The replica's daily swing over the window (a day or more): the amplitude of its fitted 24-hour
    harmonic, as a share of its level (a least-squares fit of log level on a line and the daily
    cycle's harmonics, stats.growth.cycle_columns) over the window's part in the process covering its end;
    None when that part is shorter than a day or holds too few samples."""
    from ..stats.growth import cycle_columns

    seg = s.segment_at(w.end)
    start = max(w.start, seg.start) if seg is not None else w.start
    m = s.mask(start, w.end) & (s.mb > 0)
    if w.end - start < RULES["day_level_s"] or m.sum() < 24:
        return None
    t = s.t[m]
    x = np.column_stack([np.ones(len(t)), (t - w.start) / (w.end - w.start), cycle_columns(t)])
    coef = np.linalg.lstsq(x, np.log(s.mb[m]), rcond=None)[0]
    return float(np.hypot(coef[2], coef[3]))


def clean_in_window(s: Series, w: Window, tolerance: float = 1.0) -> bool:
    """On the group's allocator from the window's start to its end (restarts allowed), within
    sample_tolerance (its own sampling interval, at least `tolerance` seconds) at either end."""
    ts = s.treatment_start
    tol = sample_tolerance(s, tolerance)
    return s.clean is not None and ts is not None and ts <= w.start + tol and s.clean.end >= w.end - tol


def end_figures(
    series: list[Series],
    groups: list[str],
    w: Window,
    listed: dict[str, set[str]],
    left_out: AbstractSet[str] = frozenset(),
    modelled: dict[str, Series] | None = None,
) -> dict[str, EndFigure]:
    """Each group's level at the window's end over its clean replicas (`left_out`: replicas the
    analysis excludes by name, e.g. restarted inside the window), beside the published-style one.
    `modelled`: replicas whose clean level is read from another series (a young process's, with
    its regrowth added back: analysis/regrowth.py); the published-style figure stays as recorded."""
    span = RULES["end_span_share"] * (w.end - w.start)
    by_name = {s.name: s for s in series}
    modelled = modelled or {}
    out = {}
    for g in groups:
        clean = [s for s in series if s.group == g and clean_in_window(s, w) and s.name not in left_out]
        at: Callable[[Series], float | None] = (
            (lambda x: day_level(x, w)) if day_levels(w) else (lambda x: level_at(x, w.end, span))
        )
        vals = [v for s in clean if (v := at(modelled.get(s.name, s))) is not None]
        pub_names = sorted(listed.get(g, set()) | {s.name for s in series if s.group == g})
        pub_vals, why = [], []
        for n in pub_names:
            s = by_name.get(n)
            if s is None:
                continue
            v = day_level(s, w, clean_only=False) if day_levels(w) else level_at(s, w.end, span, clean_only=False)
            if v is None:
                continue
            pub_vals.append(v)
            if s not in clean:
                seg = s.segment_at(w.end)
                on = seg.label if seg else "no data"
                if s.group != g:
                    why.append(f"{n}: listed for {g} but in {s.group}'s current list, running {on} at the end")
                elif len(s.t) and s.t[-1] < w.end - 1:
                    why.append(f"{n}: its data end at {utc(float(s.t[-1]), minutes=True)}, before the window's end")
                elif s.treatment_start is None or s.treatment_start > w.start:
                    why.append(
                        f"{n}: on {g}'s allocator only from "
                        f"{utc(s.treatment_start, minutes=True) if s.treatment_start else 'never'}"
                    )
                else:
                    why.append(f"{n}: running {on} at the end")
        fig = EndFigure(
            g,
            [s.name for s in clean],
            float(np.median(vals)) if vals else None,
            pub_names,
            float(np.median(pub_vals)) if pub_vals else None,
        )
        if fig.clean_mb and fig.published_mb:
            fig.differs = abs(fig.published_mb / fig.clean_mb - 1) > RULES["published_differs_share"] and bool(why)
        fig.why, fig.clean_levels = why, vals
        out[g] = fig
    return out


def age_table(series: list[Series], groups: list[str]) -> AgeTable:
    """Median level per group at regular process ages on the treatment (time since the replica's
    last process on its group's allocator started), from clean segments only."""
    ages = [s.clean.end - s.clean.start for s in series if s.clean is not None]
    longest = max(ages, default=0.0)
    unit, sec = next(
        ((u, x) for u, x in (("day", 86400), ("hour", 3600), ("minute", 60)) if longest >= 3 * x), ("second", 1.0)
    )
    n_max = int(longest // sec)
    points = [float(p) for p in range(1, n_max + 1, 2)][:9]
    cells: dict[str, list[tuple[float | None, int]]] = {}
    for g in groups:
        row = []
        for p in points:
            vals = []
            for s in series:
                c = s.clean
                if s.group != g or c is None or c.end - c.start < p * sec:
                    continue
                m = (s.t >= c.start) & (s.t <= c.end) & ~np.isnan(s.mb)
                vals.append(float(np.interp(c.start + p * sec, s.t[m], s.mb[m])))
            row.append((float(np.median(vals)) if vals else None, len(vals)))
        cells[g] = row
    return AgeTable(unit, points, cells)


@dataclass
class Restart:
    replica: str
    group: str
    t: float  # first sample of the new process (segment)
    reason: str  # the segment's evidence ("unrecorded restart: level -62%", an event)
    recorded: bool
    excluded: bool = False  # left out of the comparison by name
    after_end: bool = False  # the window was cut to end before it


def restarts_in_window(series: list[Series], w: Window) -> list[Restart]:
    """Process restarts (recorded or not) and other same-allocator cuts inside the window, on
    replicas clean throughout it: a new segment of the replica's own group opened after the
    window's start."""
    out = []
    for s in series:
        if not clean_in_window(s, w):
            continue
        for prev, seg in zip(s.segments, s.segments[1:]):
            if prev.group == s.group == seg.group and seg.new_process and w.start < seg.start <= w.end:
                out.append(Restart(s.name, s.group, seg.start, seg.reason, not seg.reason.startswith("unrecorded")))
    return sorted(out, key=lambda r: r.t)


def cut_before_restarts(series: list[Series], w: Window) -> tuple[Window, list[Restart]]:
    """A restart late in the window makes that replica's level at the end a young process's: the
    comparison would measure age, not allocator (every relay of a group restarted 2-5 h before the
    end: 0.70x "significant" in 56% of null datasets). Acted on: restarts in the window's last
    (1 − RULES restart_keep_window_share), in groups that do not restart as a pattern (no replica
    restarted twice inside the window: periodic restarts are a treatment, e.g. "restart-24h").
    Those replicas are left out by name (Restart.excluded) where their group keeps ≥ RULES
    min_replicas and ≥ half of its clean replicas without them; otherwise the window ends just
    before the first such restart, so every level is a process that ran through it. Every
    restart inside the window is named in the warning, acted on or not."""
    found = restarts_in_window(series, w)
    if not found:
        return w, []
    clean: dict[str, int] = {}
    for s in series:
        if clean_in_window(s, w):
            clean[s.group] = clean.get(s.group, 0) + 1
    count: dict[tuple[str, str], int] = {}
    for r in found:
        count[(r.group, r.replica)] = count.get((r.group, r.replica), 0) + 1
    periodic = {g for (g, _), c in count.items() if c >= 2}
    keep = w.start + RULES["restart_keep_window_share"] * (w.end - w.start)
    late = [r for r in found if r.group not in periodic and r.t >= keep]
    restarted: dict[str, set[str]] = {}
    for r in late:
        restarted.setdefault(r.group, set()).add(r.replica)
    affordable = {
        g for g, names in restarted.items() if clean[g] - len(names) >= max(RULES["min_replicas"], clean[g] / 2)
    }
    for r in late:
        r.excluded = r.group in affordable
    cut = [r for r in late if not r.excluded]
    if not cut:
        return w, found
    by = {s.name: s for s in series}
    first = cut[0]
    before = by[first.replica].t[by[first.replica].t < first.t]
    end = max(float(before[-1]) if len(before) else first.t - 1.0, w.start)
    for r in found:
        r.excluded = r.excluded and r.t <= end  # after the new end: no longer inside the window
        r.after_end = r.t > end
    basis = (
        w.basis + f"; ended at {utc(end, minutes=True)}, before {first.replica}'s process restart "
        f"({first.reason}), so every level is a process that ran through the window"
    )
    return Window(w.start, end, w.group_starts, basis), found
