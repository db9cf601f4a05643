"""Confounds as typed data: each check returns Warning objects naming the replicas and groups it
concerns; the verdict cites the ones it rests on. Rules are in RULES (docs/analysis.md)."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import stats
from ..store import Store
from .load import LabelMapping, Series
from .replica import ReplicaStats
from .rules import RULES
from .windows import EndFigure, Window, fmt_time

SEVERITIES = ("info", "caution", "serious")


@dataclass
class Warning:                     # noqa: A001  (the analysis' own warning type, not the builtin)
    kind: str                      # e.g. "mixed-allocators", "identical-series"
    severity: str                  # info | caution | serious
    replicas: list[str]
    groups: list[str]
    message: str                   # plain words
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "replicas": self.replicas, "groups": self.groups,
                "message": self.message, "data": self.data}


def _names(xs: list[str], k: int = 8) -> str:
    return ", ".join(xs[:k]) + (f" and {len(xs) - k} more" if len(xs) > k else "")


def identical_pairs(series: list[Series]) -> list[tuple[str, str, int, int]]:
    """Pairs sampled as one process: stats.identical_series over the whole series (equal at a
    large share of shared timestamps), or for part of the run: equal at RULES
    identical_min_points or more *consecutive* shared timestamps taking 3+ distinct values
    (a pgrep prefix match that started mid-run). Two processes coincide at scattered timestamps
    by chance, never along a moving run."""
    out = []
    k = RULES["identical_min_points"]
    for a, b in itertools.combinations([s for s in series if len(s.t) >= k], 2):
        _, ia, ib = np.intersect1d(a.t, b.t, return_indices=True)
        if len(ia) < k:
            continue
        m = stats.identical_series(a.t, a.mb, b.t, b.mb)
        same = a.mb[ia] == b.mb[ib]
        hit = bool(m)
        if not hit and same.sum() >= k:
            run, best_vals = 0, 0
            for i, eq in enumerate(same):
                run = run + 1 if eq else 0
                if run >= k:
                    best_vals = max(best_vals, len(np.unique(a.mb[ia][i - run + 1:i + 1])))
            hit = best_vals >= 3
        if hit:
            out.append((a.name, b.name, int(same.sum()), len(ia)))
    return out


def collect(store: Store, series: list[Series], reps: list[ReplicaStats], window: Window | None,
            figures: dict[str, EndFigure], mapping: dict[str, LabelMapping], groups: list[str],
            imported: bool) -> list[Warning]:
    meta = store.meta()
    out: list[Warning] = []
    # mixed allocators: a group's published figure includes data from other allocators
    for g, f in figures.items():
        if f.why:
            moved = [w.split(":")[0] for w in f.why]
            out.append(Warning("mixed-allocators", "caution", moved, [g],
                               f"group {g}'s published-style figure (every listed replica) includes {len(moved)} "
                               f"replicas not on {g}'s allocator throughout the window: {'; '.join(f.why[:6])}"
                               + (" …" if len(f.why) > 6 else ""),
                               {"published_mb": f.published_mb, "clean_mb": f.clean_mb}))
    # segments: unknown-allocator spans excluded, level shifts at events
    unknown = [s.name for s in series if any(seg.group is None for seg in s.segments)]
    if unknown:
        out.append(Warning("unknown-allocator-excluded", "info", unknown, sorted({s.group for s in series if s.name in unknown}),
                           f"{len(unknown)} replicas have spans whose allocator the evidence does not establish "
                           f"(excluded from every figure): {_names(unknown)}"))
    shifted = [s.name for s in series if any(not seg.reason.startswith("unrecorded") for seg in s.segments[1:])]
    if shifted:
        out.append(Warning("level-shift", "info", shifted, sorted({s.group for s in series if s.name in shifted}),
                           f"{len(shifted)} replicas change level at a recorded event (an allocator change or "
                           f"restart): their series are cut there, e.g. {_names(shifted, 6)}"))
    offclean = [s.name for s in series if s.clean is None and len(s.t)]
    if offclean:
        out.append(Warning("not-on-allocator-at-end", "caution", offclean, sorted({s.group for s in series if s.name in offclean}),
                           f"{len(offclean)} replicas do not end on their group's allocator and are left out: {_names(offclean)}"))
    # start / age skew per replica
    if window is not None:
        late = [s.name for s in series if s.clean is not None and s.treatment_start and s.treatment_start > window.start + 1]
        if late:
            out.append(Warning("started-late", "caution", late, sorted({s.group for s in series if s.name in late}),
                               f"{len(late)} replicas began their treatment after the comparable window opened "
                               f"({fmt_time(window.start)}) and are left out of its figures: {_names(late)}"))
        ages = {s.name: window.start - s.clean.start for s in series if s.clean is not None and s.clean.start <= window.start}
        if ages and window.end > window.start:
            spread = max(ages.values()) - min(ages.values())
            if spread > RULES["age_skew_share"] * (window.end - window.start):
                young = sorted(ages, key=ages.get)[:5]
                out.append(Warning("age-skew", "caution", sorted(ages), sorted({s.group for s in series if s.name in ages}),
                                   f"process ages at the window's start differ by {spread / 3600:.1f} h "
                                   f"(youngest: {', '.join(young)}): compare at matched age too (the age table)",
                                   {"spread_h": spread / 3600}))
        starts = window.group_starts
        if starts and max(starts.values()) - min(starts.values()) > RULES["start_skew_intervals"] * float(meta.get("interval", 1) or 1):
            first = min(starts, key=starts.get)
            out.append(Warning("groups-started-apart", "caution", [], sorted(starts),
                               f"groups began their treatments up to {(max(starts.values()) - min(starts.values())) / 3600:.1f} h "
                               f"apart ({', '.join(f'{g}: {fmt_time(t)}' for g, t in sorted(starts.items(), key=lambda x: x[1]))}); "
                               f"figures use the common window only (earliest: {first})"))
    # lists
    several = json.loads(meta.get("replicas_in_several_groups", "[]") or "[]")
    if several:
        out.append(Warning("replica-in-several-groups", "caution", several, [],
                           f"{len(several)} replicas are listed in more than one group (e.g. {_names(several, 6)}); "
                           "each is analysed in the group of its current list, on the spans the evidence attributes to it"))
    for a, b, equal, shared in identical_pairs(series):
        out.append(Warning("identical-series", "serious", [a, b], sorted({s.group for s in series if s.name in (a, b)}),
                           f"{a} = {b}: equal at {equal} of {shared} shared timestamps (one process sampled twice "
                           "under two names?)", {"equal": equal, "shared": shared}))
    # design and verification
    small = [g for g in groups if sum(1 for r in reps if r.group == g and r.steady_mb is not None) < RULES["min_replicas"]]
    if small:
        out.append(Warning("too-few-replicas", "caution", [], small,
                           f"fewer than {RULES['min_replicas']} usable replicas in {', '.join(small)}: "
                           "a difference may not be shown significant"))
    short = [r.name for r in reps if r.status == "Too short"]
    if short:
        out.append(Warning("too-short", "info", short, sorted({r.group for r in reps if r.name in short}),
                           f"{len(short)} replicas have too few steady samples: run longer or sample more often"))
    unverified = [r.name for r in reps if r.verified is False]
    if unverified:
        out.append(Warning("unverified", "serious", unverified, sorted({r.group for r in reps if r.verified is False}),
                           f"excluded, not running the expected allocator: {_names(unverified)}"))
    crashed = [s.name for s in series if s.exit_code not in (None, 0) and not imported]
    if crashed:
        out.append(Warning("replica-exited", "serious", crashed, sorted({s.group for s in series if s.name in crashed}),
                           f"{len(crashed)} replicas exited with an error before the end: {_names(crashed)}"))
    reason = meta.get("end_reason", "")
    if reason and not imported and reason not in ("planned duration reached", "all replicas exited") \
            and not reason.startswith("stopped early"):
        out.append(Warning("run-cut-short", "caution", [], [], f"the run ended early ({reason}): figures cover less than planned"))
    # memory accounting and host
    lazy = [r for r in reps if r.lazyfree_share is not None and r.lazyfree_share > RULES["lazyfree_material_share"]]
    if lazy:
        out.append(Warning("lazyfree-material", "caution", [r.name for r in lazy], sorted({r.group for r in lazy}),
                           f"LazyFree (pages freed with MADV_FREE, reclaimable) is over {RULES['lazyfree_material_share']:.0%} "
                           f"of the metric in {len(lazy)} replicas: RSS overstates what they hold; see the footprint column",
                           {"max_share": max(r.lazyfree_share for r in lazy)}))
    host = store.host_summary()
    if host["samples"]:
        if host["min_available_share"] is not None and host["min_available_share"] < 0.1:
            out.append(Warning("memory-pressure", "caution", [], [], f"host memory available fell to "
                               f"{host['min_available_share']:.0%}: the kernel may have reclaimed pages"))
        if host["max_swap_used_kb"]:
            out.append(Warning("swap-used", "caution", [], [], f"up to {host['max_swap_used_kb'] / 1024:.0f} MB of swap in "
                               "use: RSS understates memory"))
        ncpu = int(meta.get("ncpu", "0") or 0)
        if ncpu and host["max_load1"] and host["max_load1"] > RULES["cpu_saturated_load_per_core"] * ncpu:
            out.append(Warning("cpu-saturated", "caution", [], [], f"load average reached {host['max_load1']:.1f} on {ncpu} "
                               "cores: throughput and time-based allocator behaviour are distorted"))
    guessed = [m for m in mapping.values() if m.evidence.startswith(("label is", "no evidence"))]
    if guessed:
        out.append(Warning("event-label-unmapped", "info", [], [], "event labels mapped without evidence: "
                           + "; ".join(f"{m.label} → {', '.join(m.groups) or 'none'}" for m in guessed)))
    return out
