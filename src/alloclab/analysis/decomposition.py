"""Why the memory is held: each group's allocator account beside the kernel's, over time.

Layers, bottom to top: live requested bytes (when the workload publishes them) -> allocator in
use -> free but held by the allocator, by kind (glibc bins/top, jemalloc dirty/muzzy/bins,
mimalloc committed-not-in-use, tcmalloc caches) -> the rest of RSS (program text, stacks,
untouched or unaccounted pages), with LazyFree beside it. Read from `alloc_stats` (the
introspection helper, docs/how-to/introspection.md); absent for runs without it and for imported data.

Per group: a timeline (median across replicas at each interval since their start), two
snapshots (late load phase, end of run), one plain-words summary, and suggestions: a tunable and
the sweep that would test it, named only when the decomposition points at it — never a verdict.

A pure function of the store: the options a library knows are those recorded at run time
(groups.tunables_json), never read from the library at report time. How it is drawn and laid
out is reporters/decomposition.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import stats
from ..common.errors import StoreError
from ..store import HELD_KINDS, Store

if TYPE_CHECKING:  # (for the annotations only)
    from . import Analysis

MB = 1024 * 1024
# A held kind is worth a suggestion when it is at least this share of RSS and this many bytes.
SUGGEST_SHARE, SUGGEST_MIN = 0.15, 8 * MB
# How a suggested sweep is written (the sweep verb's syntax, docs/how-to/bisect-sweep.md; one place to change).
SWEEP_COMMAND = "alloclab sweep EXPERIMENT --allocator {allocator} --set {var}={values}"

KIND_WORDS: dict[str, str | dict[str, str]] = {
    "bins": {
        "glibc": "in free chunks of {arenas} arena(s) ({chunks} free chunks) that could not be returned: glibc "
        "gives back only an arena's top, or a whole secondary heap",
        "jemalloc": "free inside active slabs (fragmentation of size-class pages)",
        "default": "free in bins",
    },
    "top": "at the top of glibc's main arena, returned only above the trim threshold",
    "dirty": {
        "jemalloc": "in dirty pages waiting out dirty_decay_ms{decay}",
        "tcmalloc": "in the page heap's free spans",
        "default": "in dirty pages",
    },
    "muzzy": "in muzzy pages (MADV_FREE'd: counted in RSS until the kernel reclaims them)",
    "cached": "in tcmalloc's thread, transfer and central caches",
    "committed_free": "committed but not in use{abandoned}",
    "metadata": "in the allocator's own metadata",
    "abandoned": "in pages abandoned by threads that exited",
}


@dataclass
class Suggestion:
    group: str
    tunable: str  # the environment variable to vary
    values: list[str]
    evidence: str  # the figure that points at it
    current: str | None = None  # the setting in force, when the allocator reported it
    allocator: str = ""  # the group's allocator as the experiment asks for it (the sweep's --allocator)

    def command(self) -> str:
        return SWEEP_COMMAND.format(
            allocator=self.allocator or self.group, var=self.tunable, values=",".join(self.values)
        )

    def text(self) -> str:
        now = f" (now {self.current})" if self.current else ""
        return (
            f"{self.evidence}: a sweep of {self.tunable} over {', '.join(self.values)}{now} would show whether "
            f"it returns that memory, and at what CPU cost — `{self.command()}`. A suggestion, not a verdict."
        )


@dataclass
class Snapshot:
    """Medians across replicas (bytes; None: not known)."""

    live: float | None
    in_use: float | None
    held: dict[str, float]
    rss: float | None
    lazyfree: float | None
    committed: float | None = None
    arenas: float | None = None
    free_chunks: float | None = None
    pages_abandoned: float | None = None
    tunables: dict[str, float] = field(default_factory=dict)

    @property
    def held_total(self) -> float | None:
        return sum(self.held.values()) if self.held else None

    @property
    def other(self) -> float | None:
        """RSS not accounted for by in-use + held (program, stacks, untouched heap); may be negative
        when the allocator counts mapped memory not yet touched."""
        if self.rss is None or self.in_use is None:
            return None
        return self.rss - self.in_use - (self.held_total or 0)


@dataclass
class GroupDecomposition:
    group: str
    label: str  # "glibc 2.36", "mimalloc 3.0.1"
    family: str
    replicas: int  # replicas with allocator figures
    times: list[float]  # seconds since the replicas' start (interval bins)
    layers: dict[str, list[float | None]]  # live, in_use, held_<kind>, rss, lazyfree: MB medians per bin
    load: Snapshot | None
    end: Snapshot | None
    summary: str
    suggestions: list[Suggestion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    helper_cpu_share: float | None = None  # helper CPU / the replicas' CPU
    helper_interval_s: float | None = None  # median cadence the helper kept

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["suggestions"] = [{**asdict(s), "command": s.command(), "text": s.text()} for s in self.suggestions]
        return d


def _mb(x: float | None) -> str:
    return "–" if x is None else f"{x / MB:,.1f} MB"


_median = stats.median_present  # the median of the figures present (None, NaN left out)


def _replica_points(rows: list[dict[str, Any]], samples: dict[str, list[Any]], interval: float) -> list[dict[str, Any]]:
    """One point per collection time: every process's latest figures (processes whose record is
    not stale) summed, joined with the replica's sample nearest in time (RSS, LazyFree, live)."""
    latest: dict[int, dict[str, Any]] = {}
    points = []
    st = np.array(samples["t"], dtype=float) if samples["t"] else np.array([])
    for r in rows:
        latest[r["process_id"]] = r
        t = r["t"]
        fresh = [x for x in latest.values() if t - x["t"] <= 3 * max(x["interval_s"] or interval, 0.01) + 2.0]
        p: dict[str, Any] = {"t": t, "family": r["family"]}
        for col in (
            "in_use",
            "committed",
            "arenas",
            "free_chunks",
            "pages_abandoned",
            "helper_cpu_s",
            *(f"held_{k}" for k in HELD_KINDS),
        ):
            vals = [x[col] for x in fresh if x[col] is not None]
            p[col] = sum(vals) if vals else None
        p["interval_s"] = r["interval_s"]
        p["tunables"] = json.loads(r["detail_json"] or "{}").get("tunables", {})
        if len(st):
            i = int(np.argmin(np.abs(st - t)))
            if abs(st[i] - t) <= max(interval, 1.0) * 1.5:
                # called in this iteration only
                kb: Callable[[str], Any] = lambda c: samples[c][i] * 1024 if samples[c][i] is not None else None  # noqa: B023
                p.update(
                    rss=kb("rss_kb"),
                    lazyfree=kb("lazyfree_kb"),
                    live=samples["live_bytes"][i],
                    phase=samples["phase"][i],
                    cpu_s=samples["cpu_s"][i],
                )
        points.append(p)
    return points


def _snapshot(points: list[list[dict[str, Any]]]) -> Snapshot | None:
    """Medians across replicas of each replica's median over its points."""
    per = [p for p in points if p]
    if not per:
        return None

    def med(col: str, ps: list[dict[str, Any]]) -> float | None:
        return _median([p.get(col) for p in ps])

    reps = [
        {
            c: med(c, ps)
            for c in (
                "live",
                "in_use",
                "rss",
                "lazyfree",
                "committed",
                "arenas",
                "free_chunks",
                "pages_abandoned",
                *(f"held_{k}" for k in HELD_KINDS),
            )
        }
        for ps in per
    ]
    held = {k: v for k in HELD_KINDS if (v := _median([r[f"held_{k}"] for r in reps])) is not None}
    tun: dict[str, Any] = {}
    for ps in per:
        for k, v in (ps[-1].get("tunables") or {}).items():
            tun[k] = v
    return Snapshot(
        _median(r["live"] for r in reps),
        _median(r["in_use"] for r in reps),
        held,
        _median(r["rss"] for r in reps),
        _median(r["lazyfree"] for r in reps),
        _median(r["committed"] for r in reps),
        _median(r["arenas"] for r in reps),
        _median(r["free_chunks"] for r in reps),
        _median(r["pages_abandoned"] for r in reps),
        tun,
    )


def _kind_phrase(kind: str, family: str, snap: Snapshot) -> str:
    w = KIND_WORDS[kind]
    if isinstance(w, dict):
        w = w.get(family, w["default"])
    decay = snap.tunables.get("dirty_decay_ms")
    ab = snap.pages_abandoned
    return w.format(
        arenas=f"{snap.arenas:.0f}" if snap.arenas else "its",
        chunks=f"{snap.free_chunks:,.0f}" if snap.free_chunks else "?",
        decay=f" ({decay:.0f} ms)" if decay is not None else "",
        abandoned=f"; {ab:,.0f} pages were abandoned by threads and wait to be reclaimed" if ab else "",
    )


def _words(label: str, family: str, load: Snapshot | None, end: Snapshot | None) -> str:
    parts = []
    for when, s in (("late in the load phase", load), ("at the end of the run", end)):
        if s is None:
            continue
        if s.in_use is None:
            if s.committed is not None:
                ab = f", {s.pages_abandoned:,.0f} pages abandoned by exited threads" if s.pages_abandoned else ""
                parts.append(
                    f"{when}, {label} had {_mb(s.committed)} committed (RSS {_mb(s.rss)}{ab}); this version "
                    "does not count the bytes it has handed out, so what it holds free cannot be split off"
                )
            continue
        live = f" (the program's live requested bytes: {_mb(s.live)})" if s.live is not None else ""
        text = f"{when}, {label} had {_mb(s.in_use)} in use{live}"
        held = sorted(s.held.items(), key=lambda kv: -kv[1])
        big = [(k, v) for k, v in held if v >= 1 * MB]
        if big:
            text += "; it held " + "; ".join(f"{_mb(v)} {_kind_phrase(k, family, s)}" for k, v in big)
        else:
            text += "; it held under 1 MB free"
        text += f"; RSS {_mb(s.rss)}" + (f" (LazyFree {_mb(s.lazyfree)})" if s.lazyfree else "")
        parts.append(text)
    return (". ".join(p[0].upper() + p[1:] for p in parts) + ".") if parts else ""


def _suggest(group: str, family: str, known: set[str], s: Snapshot | None) -> list[Suggestion]:
    """`known`: the options the group's library knows (recorded at run time; empty: not known)."""
    if s is None or s.rss is None:
        return []
    rss = s.rss
    big: Callable[[float | None], bool] = lambda v: v is not None and v >= max(SUGGEST_MIN, SUGGEST_SHARE * rss)
    out: list[Suggestion] = []
    h = s.held
    if family == "glibc":
        if big(h.get("bins")) and (s.arenas or 0) >= 2:
            out.append(
                Suggestion(
                    group,
                    "MALLOC_ARENA_MAX",
                    ["1", "2", "4"],
                    f"{_mb(h['bins'])} held in free chunks across {s.arenas:.0f} arenas",
                )
            )
        if big(h.get("top")):
            out.append(
                Suggestion(
                    group,
                    "MALLOC_TRIM_THRESHOLD_",
                    ["131072", "1048576", "16777216"],
                    f"{_mb(h['top'])} held at the top of the main arena",
                )
            )
    elif family == "jemalloc":
        if big(h.get("dirty")):
            cur = s.tunables.get("dirty_decay_ms")
            out.append(
                Suggestion(
                    group,
                    "MALLOC_CONF",
                    ["dirty_decay_ms:0", "dirty_decay_ms:1000", "dirty_decay_ms:10000"],
                    f"{_mb(h['dirty'])} held in dirty pages",
                    f"dirty_decay_ms:{cur:.0f}" if cur is not None else None,
                )
            )
        if big(h.get("muzzy")):
            cur = s.tunables.get("muzzy_decay_ms")
            out.append(
                Suggestion(
                    group,
                    "MALLOC_CONF",
                    ["muzzy_decay_ms:0", "muzzy_decay_ms:1000", "muzzy_decay_ms:10000"],
                    f"{_mb(h['muzzy'])} held in muzzy pages",
                    f"muzzy_decay_ms:{cur:.0f}" if cur is not None else None,
                )
            )
        if big(h.get("bins")) and (s.arenas or 0) >= 4:
            out.append(
                Suggestion(
                    group,
                    "MALLOC_CONF",
                    ["narenas:1", "narenas:2", "narenas:4"],
                    f"{_mb(h['bins'])} free inside active slabs of {s.arenas:.0f} arenas",
                )
            )
    elif family == "mimalloc":
        gap = h.get("committed_free")
        if gap is None and s.in_use is None and s.committed is not None and s.live is not None:
            gap = s.committed - s.live  # live requested bytes: a lower bound on in use, so an upper bound here
            what = f"{_mb(gap)} committed beyond the program's live requested bytes"
        else:
            what = f"{_mb(gap)} committed but not in use" if gap is not None else ""
        if big(gap):
            var = "purge_delay" if "purge_delay" in known or not known else "reset_delay"
            out.append(Suggestion(group, f"MIMALLOC_{var.upper()}", ["0", "10", "100", "1000"], what))
            if s.pages_abandoned and "abandoned_reclaim_on_free" in known:
                out.append(
                    Suggestion(
                        group,
                        "MIMALLOC_ABANDONED_RECLAIM_ON_FREE",
                        ["0", "1"],
                        f"{s.pages_abandoned:,.0f} pages abandoned by exited threads",
                    )
                )
    elif family == "tcmalloc":
        if big(h.get("dirty")):
            out.append(
                Suggestion(
                    group, "TCMALLOC_RELEASE_RATE", ["0", "1", "10"], f"{_mb(h['dirty'])} in free page-heap spans"
                )
            )
        if big(h.get("cached")):
            out.append(
                Suggestion(
                    group,
                    "TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES",
                    ["4194304", "16777216", "67108864"],
                    f"{_mb(h['cached'])} in thread/central caches",
                )
            )
    return out


def decompose(store: Store, analysis: Analysis | None = None) -> list[GroupDecomposition] | None:
    """Every group's decomposition, or None when the run has no allocator figures (introspection
    off, or imported data)."""
    try:
        rows = store.alloc_stats()
    except StoreError:  # no alloc_stats table (a store not migrated): simply absent
        return None
    if not rows:
        return None
    meta = store.meta()
    interval = float(meta.get("interval", 1) or 1)
    groups = {g["name"]: g for g in store.groups()}
    replicas = {r["id"]: r for r in store.replicas()}
    excluded = set()
    if analysis is not None:
        excluded = {r.name for r in analysis.replicas if r.verified is False}
    by_replica: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_replica.setdefault(r["replica_id"], []).append(r)
    out = []
    for gname, g in groups.items():
        reps = [
            rid
            for rid, rr in replicas.items()
            if rr["group"] == gname and rid in by_replica and rr["name"] not in excluded
        ]
        notes = []
        per_rep: list[list[dict[str, Any]]] = []
        starts = []
        for rid in reps:
            rrows = by_replica[rid]
            fam = {r["family"] for r in rrows}
            if g["family"] and fam - {g["family"]}:
                notes.append(
                    f"{replicas[rid]['name']}: the helper found {', '.join(sorted(fam))} serving malloc, "
                    f"not {g['family']}; left out"
                )
                continue
            samples = store.series(rid, ["rss_kb", "lazyfree_kb", "live_bytes", "phase", "cpu_s"])
            per_rep.append(_replica_points(rrows, samples, interval))
            starts.append(replicas[rid]["started_at"] or rrows[0]["t"])
        if not per_rep:
            if notes:
                out.append(
                    GroupDecomposition(gname, _label(g), g["family"] or "", 0, [], {}, None, None, "", notes=notes)
                )
            continue
        family = g["family"] or per_rep[0][0]["family"]
        # late load: the second half of each replica's load-phase points; end: its last point
        load_pts = []
        for ps in per_rep:
            lp = [p for p in ps if p.get("phase") == "load"]
            load_pts.append(lp[len(lp) // 2 :] if lp else [])
        load = _snapshot(load_pts) if any(load_pts) else None
        end = _snapshot([[ps[-1]] for ps in per_rep])
        times, layers = _timeline(per_rep, starts, interval)
        cpu = [(ps[-1].get("helper_cpu_s"), ps[-1].get("cpu_s")) for ps in per_rep]
        shares = [h / c for h, c in cpu if h is not None and c]
        label = _label(g)
        d = GroupDecomposition(
            gname,
            label,
            family,
            len(per_rep),
            times,
            layers,
            load,
            end,
            _words(label, family, load, end),
            notes=notes,
            helper_cpu_share=_median(shares),
            helper_interval_s=_median(p["interval_s"] for ps in per_rep for p in ps),
        )
        known, missing = _known_options(g)
        if missing and family == "mimalloc":
            d.notes.append(missing)
        seen = set()
        for s in _suggest(gname, family, known, end) + _suggest(gname, family, known, load):
            if (s.tunable, tuple(s.values)) not in seen:
                seen.add((s.tunable, tuple(s.values)))
                s.allocator = g["allocator"]
                d.suggestions.append(s)
        if family == "mimalloc" and (snap := load or end) is not None and snap.in_use is None:
            d.notes.append(
                f"{label} does not count bytes in use in a release build (only mimalloc 3.1+ does): "
                "in use and free-but-held are not split; committed is shown against RSS"
            )
        out.append(d)
    return out or None


def _known_options(g: dict[str, Any]) -> tuple[set[str], str | None]:
    """The options the group's preloaded library knows, as recorded at run time, and a note when a
    library was preloaded but the run predates that record (schema < 7)."""
    facts = g.get("tunables_json")
    if facts:
        return set(json.loads(facts).get("known") or ()), None
    if g.get("library_path") and g.get("kind") == "preload":
        return set(), (
            "this run was recorded before alloclab stored the options its library knows: suggestions "
            "use the current option names and omit those a version may lack"
        )
    return set(), None


def _label(g: dict[str, Any]) -> str:
    return f"{g['family'] or g['allocator']} {g['version'] or ''}".strip()


def _timeline(
    per_rep: list[list[dict[str, Any]]], starts: list[float], interval: float
) -> tuple[list[float], dict[str, list[float | None]]]:
    step = max(interval, 1.0)
    bins: dict[int, list[dict[str, Any]]] = {}
    for ps, t0 in zip(per_rep, starts):
        for p in ps:
            bins.setdefault(int((p["t"] - t0) // step), []).append(p)
    cols = ("live", "in_use", *(f"held_{k}" for k in HELD_KINDS), "committed", "rss", "lazyfree")
    times: list[float] = []
    layers: dict[str, list[float | None]] = {c: [] for c in cols}
    for b in sorted(bins):
        times.append(b * step)
        for c in cols:
            m = _median(p.get(c) for p in bins[b])
            layers[c].append(None if m is None else m / MB)
    layers = {c: v for c, v in layers.items() if any(x is not None for x in v)}
    return times, layers
