"""Store -> per-replica series, cut into segments by the allocator that really served them.

A segment is a span of one replica's samples during which one allocator ran one process
lineage. Cuts come from evidence only:
- runs: processes (a new pid is a new process) and verification history (a process whose
  mapped allocator changes or stops verifying);
- imported data: recorded events confirmed by the replica's own series (a step of
  RULES['segment_step_share'] or more between the samples around the event), group lists
  (a relay in another group's historical list ran that group's allocator before it moved), and
  unexplained drops (a process restart, same allocator).
Each segment is attributed to the group whose allocator ran, or to None (unknown, excluded by name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..stats.rules import RULES
from ..store import Store

METRIC_COLUMN = {"rss": "rss_kb", "pss": "pss_kb", "uss": "uss_kb", "anon": "anon_kb"}
RESTART_KINDS = {"restart", "process_restart"}  # a new process, same allocator
NOT_CHANGES = RESTART_KINDS | {"phase", "start", "end", "replica_end", "note", "sequential_stop", "experiment_end"}


@dataclass
class Segment:
    start: float  # first sample time in the segment
    end: float  # last sample time
    group: str | None  # the group whose allocator ran; None: unknown
    reason: str  # the evidence for the cut that opens it
    new_process: bool = True  # a process (re)start opens it: memory and age start over

    @property
    def label(self) -> str:
        return self.group if self.group is not None else "unknown allocator"


@dataclass
class Series:
    replica_id: int
    name: str
    group: str
    verified: bool | None
    t: np.ndarray  # Unix seconds, the whole series
    mb: np.ndarray  # the metric in MB
    phase: np.ndarray  # phase name per sample (None where not recorded: no phase is invented)
    live_mb: np.ndarray  # NaN where the workload does not report
    ops: np.ndarray  # NaN where not reported
    cpu_s: np.ndarray
    lazyfree_mb: np.ndarray  # NaN where not sampled
    segments: list[Segment] = field(default_factory=list)
    exit_code: int | None = None
    ended_at: float | None = None
    end_kind: str | None = (
        None  # replicas.end_kind: crashed, exited-early, ended, stopped, cut-short (docs/reference/store.md)
    )

    @property
    def clean(self) -> Segment | None:
        """The replica's last process on its own group's allocator (None: it ends elsewhere)."""
        if not self.segments or self.segments[-1].group != self.group:
            return None
        return self.segments[-1]

    @property
    def treatment_start(self) -> float | None:
        """When the replica's final stretch on its group's allocator began (across process restarts)."""
        start = None
        for seg in reversed(self.segments):
            if seg.group != self.group:
                break
            start = seg.start
        return start

    @property
    def segment_start(self) -> float:
        c = self.clean
        return c.start if c else (float(self.t[-1]) if len(self.t) else 0.0)

    @property
    def interval(self) -> float:
        """The replica's own typical sampling interval (s): the median gap between its samples (1 s with
        fewer than 2)."""
        if len(self.t) < 2:
            return 1.0
        return float(np.median(np.diff(self.t)))

    def mask(self, start: float, end: float) -> np.ndarray:
        return (self.t >= start) & (self.t <= end) & ~np.isnan(self.mb)

    def segment_at(self, t: float) -> Segment | None:
        """The segment (process on one allocator) the replica was in at time t: the last to start at or before it."""
        return next((g for g in reversed(self.segments) if g.start <= t), None)


@dataclass
class LabelMapping:
    label: str  # as written in the events file
    groups: list[str]  # the groups it is taken to mean
    evidence: str  # why


def _scaled(values: np.ndarray | None, n: int, scale: float = 1.0) -> np.ndarray:
    if values is None:  # an empty column is not read: all NaN
        return np.full(n, np.nan)
    return values * scale if scale != 1.0 else values


def load_series(store: Store, metric: str) -> list[Series]:
    col = METRIC_COLUMN[metric]
    out = []
    extra = ["phase", "live_bytes", "ops", "cpu_s", "lazyfree_kb"]
    filled = store.sample_columns_with_values(extra)  # an empty column is not read 10 M times
    for rep in store.replicas():
        d = store.series_arrays(rep["id"], [col, *(c for c in extra if c in filled)], not_null=col)
        n = len(d["t"])
        phase = d["phase"] if "phase" in d else np.full(n, None, dtype=object)
        verified = None if rep["verified"] is None else bool(rep["verified"])
        out.append(
            Series(
                rep["id"],
                rep["name"],
                rep["group"],
                verified,
                d["t"],
                _scaled(d[col], n, 1 / 1024),
                phase,
                _scaled(d.get("live_bytes"), n, 1 / 1048576),
                _scaled(d.get("ops"), n),
                _scaled(d.get("cpu_s"), n),
                _scaled(d.get("lazyfree_kb"), n, 1 / 1024),
                exit_code=rep.get("exit_code"),
                ended_at=rep.get("ended_at"),
                end_kind=rep.get("end_kind"),
            )
        )
    return out


def is_imported(store: Store) -> bool:
    """Data alloclab did not record itself (no verification history): segmented by evidence. An
    alloclab run that went through export and import keeps its origin and is read as a run, and so
    is an import of alloclab's own records (meta records = alloclab: a Prometheus import of the
    collector's series, restarts and verification included; a merge of run stores)."""
    meta = store.meta()
    if meta.get("records") == "alloclab":
        return False
    origin = meta.get("original_source") or meta.get("source", "")
    return origin.startswith("import") or any(g["kind"] == "imported" for g in store.groups())


# ---- event labels -> groups, by evidence --------------------------------------------------------


def _group_names(groups: list[dict[str, Any]]) -> dict[str, list[str]]:
    """group -> the phrases that name its allocator in free text ("mimalloc 2.0.9", "2.0.9", "jemalloc")."""
    out = {}
    for g in groups:
        family, version = (g["family"] or g["allocator"] or "").lower(), (g["version"] or "").lower()
        names = [f"{family} {version}".strip()] if version else [family]
        if version:
            names.append(version)
        out[g["name"]] = [n for n in names if n]
    return out


def _named(text: str, phrases: dict[str, list[str]]) -> list[str]:
    text = text.lower()
    hits = []
    for g, names in phrases.items():
        if any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", text) for n in names):
            hits.append(g)
    # a version names one group; a bare family only counts when no version-specific match exists
    specific = [
        g
        for g in hits
        if any(n[-1:].isdigit() and re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", text) for n in phrases[g])
    ]
    return specific or hits


def _split_move(text: str) -> tuple[str, str]:
    """'60 relays from mimalloc 3.0.1 → 2.0.9' -> ('... 3.0.1', '2.0.9'); no arrow: ('', text)."""
    for arrow in ("→", "->", " to "):
        if arrow in text:
            left, right = text.split(arrow, 1)
            return left, right
    return "", text


def map_event_labels(store: Store, series: list[Series]) -> dict[str, LabelMapping]:
    """Imported event labels ('group_c', 'mimalloc_original', 'group_B', ...) -> groups. Evidence,
    strongest first: the description names a group's allocator (the destination of a move);
    a composite label ('group_c_d') is the union of its parts; which groups' relays shift level
    at the event; last, a label that is literally a group name."""
    groups = store.groups()
    phrases = _group_names(groups)
    names = {g["name"].lower(): g["name"] for g in groups}
    # restarts are read too: a group's relays restarted together carry the group's label (issue 49)
    events = [
        e
        for e in store.events(exclude=NOT_CHANGES - {"experiment_end"} - RESTART_KINDS)
        if (e["group_name"] or "all").lower() != "all"
    ]
    by_label: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_label.setdefault(e["group_name"], []).append(e)
    out: dict[str, LabelMapping] = {}
    for label, evs in by_label.items():
        named: list[str] = []
        for e in evs:
            _, dest = _split_move(e["description"] or "")
            named += [g for g in _named(dest, phrases) if g not in named]
        if named:
            out[label] = LabelMapping(
                label, named, "description names " + "; ".join(f"{g} ({phrases[g][0]})" for g in named)
            )
    for label, evs in by_label.items():
        if label in out:
            continue
        parts = [p for p in re.split(r"[_\s]+", label) if p and p.lower() != "group"]
        part_maps = [out[f"group_{p}"] for p in parts if f"group_{p}" in out]  # same spelling, same case
        if len(parts) >= 2 and len(part_maps) == len(parts):
            gs = sorted({g for m in part_maps for g in m.groups})
            out[label] = LabelMapping(label, gs, "union of " + ", ".join(m.label for m in part_maps))
            continue
        shifted = _groups_shifting_at(series, [e["t"] for e in evs])
        if shifted:
            out[label] = LabelMapping(label, shifted, "most of these groups' relays change level at the event")
        elif label.lower().removeprefix("group_") in names:
            g = names[label.lower().removeprefix("group_")]
            out[label] = LabelMapping(label, [g], "label is the group's name (no other evidence)")
        else:
            out[label] = LabelMapping(label, [], "no evidence: applies to no group")
    return out


def _step_at(s: Series, t: float) -> tuple[int, float] | None:
    """(index of the first sample after t, relative step across t), or None at the series' edges."""
    i = int(np.searchsorted(s.t, t, side="left"))
    if not 1 <= i < len(s.t) or s.mb[i - 1] <= 0:
        return None
    return i, float((s.mb[i] - s.mb[i - 1]) / s.mb[i - 1])


def _groups_shifting_at(series: list[Series], times: list[float]) -> list[str]:
    share = RULES["segment_step_share"]
    counts: dict[str, list[int]] = {}
    for s in series:
        hit = any((st := _step_at(s, t)) is not None and abs(st[1]) >= share for t in times)
        c = counts.setdefault(s.group, [0, 0])
        c[0] += hit
        c[1] += 1
    return sorted(g for g, (h, n) in counts.items() if n and h / n > 0.5)


# ---- segments -----------------------------------------------------------------------------------


def _applies(e: dict[str, Any], group: str, mapping: dict[str, LabelMapping]) -> bool:
    label = e["group_name"] or "all"
    if label.lower() == "all":
        return True
    m = mapping.get(label)
    return bool(m and group in m.groups)


def _unrecorded_restarts(mb: np.ndarray, rels: np.ndarray) -> list[int]:
    """Sample indices where a process restarted with no event recorded: a fall of ≥
    RULES restart_fall_share between two samples to a level the series stays near (the median of
    that sample and the next two is still ≥ half that fall below the level before it) — a young
    process, not a one-sample dip; or any fall of ≥ unexplained_drop_share."""
    fall = RULES["restart_fall_share"]
    out = []
    for i in (np.flatnonzero(rels <= -fall) + 1).tolist():
        before = mb[i - 1]
        after = float(np.nanmedian(mb[i : i + 3]))
        if rels[i - 1] <= -RULES["unexplained_drop_share"] or after <= before * (1 - fall / 2):
            out.append(i)
    return out


def segments_imported(store: Store, series: list[Series], mapping: dict[str, LabelMapping]) -> None:
    """Cut imported series at confirmed steps; attribute each piece (see the module docstring)."""
    events = [e for e in store.events(exclude=NOT_CHANGES - RESTART_KINDS)]
    phrases = _group_names(store.groups())
    historical: dict[int, list[str]] = {}
    for m in store.memberships():
        if m["list_kind"] == "historical":
            historical.setdefault(m["replica_id"], []).append(m["group_name"])
    step = RULES["segment_step_share"]
    for s in series:
        n = len(s.t)
        if n == 0:
            continue
        cuts: list[tuple[int, bool, bool, str, str | None]] = []  # (index, changed, own event, reason, source)
        at: dict[int, list[dict[str, Any]]] = {}  # sample index i -> events with t[i-1] < t <= t[i], in order
        for e in events:
            if e.get("replica_id") is not None and e["replica_id"] != s.replica_id:
                continue  # an event naming a relay is that relay's alone
            i = int(np.searchsorted(s.t, e["t"], side="left"))
            if 1 <= i < n and _applies(e, s.group, mapping):
                at.setdefault(i, []).append(e)
        prev = s.mb[:-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            rels = np.where(prev > 0, (s.mb[1:] - prev) / np.where(prev > 0, prev, 1.0), 0.0)
        # only samples with an event or a drop can be cut: visit those, not every sample
        drops = _unrecorded_restarts(s.mb, rels)
        for i in sorted(set(at) | set(drops)):
            evs = at.get(i, [])
            rel = float(rels[i - 1])
            if evs and abs(rel) >= step:
                changes = [e for e in evs if e["kind"] not in RESTART_KINDS]
                own = [e for e in changes if (e["group_name"] or "all").lower() != "all"]
                sources = {g for e in own for g in _named(_split_move(e["description"] or "")[0], phrases)}
                desc = "; ".join(f"{e['kind']} '{e['description']}' ({e['group_name']})" for e in evs)
                cuts.append(
                    (
                        i,
                        bool(changes),
                        bool(own),
                        f"{desc}; level {rel:+.0%}",
                        sources.pop() if len(sources) == 1 else None,
                    )
                )
            elif i in drops:
                cuts.append((i, False, False, f"unrecorded restart: level {rel:+.0%}", None))
        lists = historical.get(s.replica_id, [])
        moved_from = [g for g in lists if g != s.group]  # it ran that group's allocator before it moved
        if moved_from and not any(c[1] for c in cuts):
            # the lists say it moved but no step confirms when: cut at the latest event for its group
            own = [
                e
                for e in events
                if e["kind"] not in RESTART_KINDS
                and (e["group_name"] or "all").lower() != "all"
                and _applies(e, s.group, mapping)
                and s.t[0] < e["t"] <= s.t[-1]
            ]
            if own:
                e = own[-1]
                i = int(np.searchsorted(s.t, e["t"], side="left"))
                cuts = [c for c in cuts if c[0] != i] + [
                    (
                        i,
                        True,
                        True,
                        f"{e['kind']} '{e['description']}' "
                        f"({e['group_name']}); group lists say it moved from {', '.join(moved_from)}",
                        None,
                    )
                ]
                cuts.sort(key=lambda c: c[0])
        # attribute backwards from the end: the last stretch ran the group's current allocator
        bounds = [0] + [c[0] for c in cuts] + [n]
        owner: str | None = s.group
        original = s.group in lists  # it was in this group's original list
        segs: list[Segment] = []
        for k in range(len(bounds) - 2, -1, -1):
            a, b = bounds[k], bounds[k + 1] - 1
            reason = cuts[k - 1][3] if k >= 1 else "first sample"
            segs.append(Segment(float(s.t[a]), float(s.t[b]), owner, reason, True))
            if k >= 1 and cuts[k - 1][1]:
                _, _, owned, _, source = cuts[k - 1]
                if owner is None:
                    continue
                if moved_from:
                    owner = moved_from.pop(0)
                elif owned and original and source is not None and source != s.group:
                    pass  # relays moved in from `source`; it was already here
                elif owned:
                    owner = source if source != owner else None  # this group's allocator started here
                elif original:
                    original = False  # a general event: it was in the original list
                else:
                    owner = None
        s.segments = list(reversed(segs))


def segments_run(store: Store, series: list[Series]) -> None:
    """Runs: one segment per process, cut again where verification changes within a process."""
    by_replica: dict[int, list[dict[str, Any]]] = {}
    for v in store.verifications():
        by_replica.setdefault(v["replica_id"], []).append(v)
    restarts = store.events(kinds=RESTART_KINDS)
    for s in series:
        if not len(s.t):
            continue
        marks: list[tuple[float, str | None, str, bool]] = []  # (t, group or None, reason, new process)
        seen: set[int] = set()
        for v in by_replica.get(s.replica_id, []):
            new = v["process_id"] not in seen
            seen.add(v["process_id"])
            group = s.group if v["verified"] else None
            what = f"pid {v['pid']} " + (
                "verified" if v["verified"] else f"not verified ({v['detail'] or v['mapped_allocator']})"
            )
            if marks and marks[-1][1] == group and not new:
                continue
            marks.append((float(v["first_seen"] if new and v["first_seen"] else v["t"]), group, what, new))
        if not marks:
            group = s.group if s.verified is not False else None
            marks = [(float(s.t[0]), group, "whole run" if group else "replica not verified", True)]
        for e in restarts:
            if (
                e["replica_id"] == s.replica_id
                and (st := _step_at(s, e["t"]))
                and st[1] <= -RULES["unexplained_drop_share"]
            ):
                prev = [m for m in marks if m[0] <= e["t"]]
                marks.append(
                    (float(s.t[st[0]]), prev[-1][1] if prev else s.group, f"restart '{e['description']}'", True)
                )
        marks.sort(key=lambda m: m[0])
        segs: list[Segment] = []
        for j, (t0, group, reason, new) in enumerate(marks):
            t1 = marks[j + 1][0] if j + 1 < len(marks) else np.inf
            inside = s.t[(s.t >= t0) & (s.t < t1)]
            if j == 0:
                inside = s.t[s.t < t1]
            if len(inside):
                segs.append(Segment(float(inside[0]), float(inside[-1]), group, reason, new))
        s.segments = segs


def segment(store: Store, series: list[Series]) -> dict[str, LabelMapping]:
    """Cut the series into segments (in place); the event-label mapping used (imported data)."""
    if is_imported(store):
        mapping = map_event_labels(store, series)
        segments_imported(store, series, mapping)
        return mapping
    segments_run(store, series)
    return {}


def load(store: Store, metric: str) -> tuple[list[Series], dict[str, LabelMapping]]:
    """Series cut into segments, as stored (analyse() drops duplicated samples before segmenting)."""
    series = load_series(store, metric)
    return series, segment(store, series)
