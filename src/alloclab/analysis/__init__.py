"""Statistics and verdicts, the same for fresh runs and imported data.

One module per job: `load` (store -> series, segments by the allocator that really ran, event
labels mapped by evidence), `windows` (the comparable window, levels at its end, published-style
beside clean figures, the process-age table), `replica` (per-replica estimators on clean spans),
`comparisons` (groups against the baseline via alloclab.stats), `growth_beside` (each group's growth
in MB beside the baseline's), `regrowth` (how a restarted process climbs back), `hosts` (the host
factor of a fleet run), `duplicates` (replicas that report the same series), `decomposition` (where
the memory went), `warnings` (typed confounds), `verdict` (the structured recommendation), `design`
(a planned experiment judged before it runs) and `two_runs` (two runs side by side). Thresholds:
`stats.rules.RULES` (docs/method/index.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

import numpy as np

from .. import stats
from ..common.errors import UserError, did_you_mean
from ..common.signalname import how_ended
from ..common.timefmt import utc
from ..stats import STATUS_ORDER
from ..stats.added_growth import BEYOND
from ..stats.rules import RULES
from ..stats.status import GROWTH_WORDS
from ..store import Store
from . import regrowth
from .comparisons import GroupComparison, compare_groups
from .duplicates import Duplicate, drop_duplicates
from .growth_beside import growth_beside
from .hosts import HostFactor, host_factor
from .load import METRIC_COLUMN, LabelMapping, Segment, Series, is_imported, load_series, segment
from .replica import (
    ReplicaStats,
    SteadyGrowth,
    detect_warmup,
    replica_stats,
    replica_stats_steady,
    repooled,
    theil_sen,
    usable,
)
from .verdict import Recommendation, recommend
from .warnings import Warning, collect
from .windows import (
    AgeTable,
    EndFigure,
    Window,
    age_table,
    clean_in_window,
    cut_before_restarts,
    day_levels,
    end_figures,
    treatment_window,
)

if TYPE_CHECKING:  # (for the annotations only)
    from .decomposition import GroupDecomposition

__all__ = [
    "analyse",
    "Analysis",
    "GroupSummary",
    "GroupComparison",
    "ReplicaStats",
    "Series",
    "Segment",
    "Warning",
    "Recommendation",
    "RULES",
    "STATUS_ORDER",
    "METRIC_COLUMN",
    "replica_stats",
    "theil_sen",
    "detect_warmup",
    "compare_groups",
]


@dataclass
class GroupSummary:
    name: str
    allocator: str
    version: str | None
    is_baseline: bool
    replicas: int
    verified: int
    usable: int  # replicas whose level enters the comparison
    level_mb: float | None  # the headline level (see Analysis.level_basis)
    steady_mean_mb: float | None
    steady_median_mb: float | None
    peak_mb: float | None
    final_mb: float | None
    change_mb: float | None  # median change over the replicas' steady windows
    change_share: float | None
    window_h: float | None
    growth_mb_h: float | None  # median rate, only where every window supports one
    footprint_mb: float | None  # steady level minus LazyFree (None: LazyFree not sampled)
    lazyfree_share: float | None
    idle_released_share: float | None
    release_events: float | None
    frag_overhead_mb: float | None
    ops_per_s: float | None
    cpu_us_per_op: float | None
    status: str
    comparison: GroupComparison | None = None
    published_mb: float | None = None  # published-style figure (every listed replica), imported data
    growth: stats.GroupGrowth | None = None  # change over the group's common window, tested across replicas
    growth_span: tuple[float, float] | None = None
    growth_beside: stats.GrowthBeside | None = None  # its change in MB against the baseline's (stats.added_growth)
    excluded: list[str] = field(default_factory=list)  # replicas left out of the comparison (ended early), by name
    status_reason: str = ""  # why the group's word: its replicas' votes, or the across-replica test and why it differs
    growth_shape: str | None = None  # stats.STEPS: Growing in steps (stats.status_phrase); None otherwise


@dataclass
class Analysis:
    metric: str
    baseline: str
    replicas: list[ReplicaStats]
    groups: list[GroupSummary]
    warnings: list[Warning] = field(default_factory=list)
    recommendation: Recommendation | None = None
    series: list[Series] = field(default_factory=list)
    window: Window | None = None
    end_figures: dict[str, EndFigure] = field(default_factory=dict)
    ages: AgeTable | None = None
    label_mapping: dict[str, LabelMapping] = field(default_factory=dict)
    level_basis: str = ""
    metric_note: str | None = None
    duplicates: list[Duplicate] = field(default_factory=list)
    decomposition: list[GroupDecomposition] | None = None  # per group; None: no allocator figures
    levels: dict[str, np.ndarray] = field(default_factory=dict)  # per group: the replica levels compared (MB)
    hosts: HostFactor | None = None  # group effects within hosts and host effects (replicas on ≥ 2 hosts)
    imported: bool = False  # data alloclab did not record itself (load.is_imported)

    def group(self, name: str) -> GroupSummary:
        return next(g for g in self.groups if g.name == name)

    def warning(self, kind: str) -> list[Warning]:
        return [w for w in self.warnings if w.kind == kind]


_median = stats.median_present  # the median of the figures present (None, NaN left out)


def _mean_present(xs: Iterable[float | None]) -> float | None:
    """The mean of the figures present (None, NaN left out), as the group level averages replicas."""
    v = [x for x in xs if x is not None and not math.isnan(x)]
    return float(np.mean(v)) if v else None


def _group_status(
    words: list[str],
    verified: int,
    growth: stats.GroupGrowth | None = None,
    shapes: list[str | None] | None = None,
    beside: stats.GrowthBeside | None = None,
) -> tuple[str, str, str | None]:
    """(word, why, shape). The most common replica word (ties: the more severe); a group whose replicas
    grow significantly beyond the flat threshold across replicas (stats.group_growth, a daily
    cycle fitted out) is Growing or Bloating even where single replicas' intervals are too wide
    to show it — the reason then says so; replicas growing by their own intervals that the
    across-replica test does not confirm keep their word, with that reason, when they are a
    majority (a tie goes to the most common other word). A Growing group is
    "in steps" (shape stats.STEPS) when more of its Growing replicas climb in steps than smoothly
    (`shapes`, each replica's). A group that would be Flat while it "grows beyond the baseline"
    (`beside`, significant) is Growing when its own change is at least half the growth bar
    (growing_beside_bar_share) and either shown across its replicas or at least the baseline's fall;
    else its reason says why the excess is not growth of its own."""
    if verified == 0:
        return "Unverified", "no replica verified", None
    if not words:
        return "Too short", "no replica with a steady window", None
    shapes = shapes if shapes is not None else [None] * len(words)
    counts = {w: words.count(w) for w in set(words)}
    top = max(counts.values())
    word = min((w for w, c in counts.items() if c == top), key=STATUS_ORDER.index)
    stepped = sum(w == "Growing" and sh == stats.STEPS for w, sh in zip(words, shapes))
    shape = stats.STEPS if 2 * stepped > words.count("Growing") else None
    votes = f"{counts[word]} of {len(words)} replicas {word}" + (
        f" ({stepped} in steps)" if word == "Growing" and stepped else ""
    )
    growing = sum(w in GROWTH_WORDS for w in words)
    if growth is not None and growth.word is not None and (growth.word == "Bloating" or word != "Bloating"):
        alone = (
            f"; {growing} of {len(words)} replicas show growth by their own intervals"
            + (f", {stepped} in steps" if stepped and growth.word == "Growing" else "")
            + (" (each alone too noisy to)" if growing < len(words) else "")
        )
        return growth.word, f"across replicas: {growth.reason}{alone}", shape if growth.word == "Growing" else None
    if word in GROWTH_WORDS and growth is not None and growth.p_adj is not None and not growth.significant:
        rest = {w: c for w, c in counts.items() if w not in GROWTH_WORDS}
        if 2 * counts[word] <= len(words) and rest:
            # a tie, not a majority, against a test that did not show it: the tie goes to the word
            # the test supports (2 of 5 Growing beside 2 Flat called flat fleets Growing); when every
            # replica has a growth word there is no calmer word to give, and the vote stands
            calm = min((w for w, c in rest.items() if c == max(rest.values())), key=STATUS_ORDER.index)
            return (
                calm,
                (
                    f"{counts[calm]} of {len(words)} replicas {calm}; {counts[word]} {word} by their own "
                    f"intervals, not a majority, and across replicas not shown ({growth.reason})"
                ),
                None,
            )
        return (
            word,
            f"{votes} by their own intervals; across replicas not shown ({growth.reason})",
            shape if word == "Growing" else None,
        )
    if (
        word == "Flat"
        and beside is not None
        and beside.word == BEYOND
        and growth is not None
        and growth.change_share is not None
    ):
        # shown beyond the baseline's growth, and the excess is growth of its own: its change is above
        # zero and shown on its own, or at least as large as the baseline's fall (a start-up or workload
        # rise every group shares cancels beside the baseline; a baseline that fell is no growth of the group's)
        least = stats.RULES["growing_beside_bar_share"] * stats.growth_bar_share(growth.window_s)
        own = growth.change_share >= least and beside.change_mb > 0
        if own and (growth.significant or beside.change_mb >= -beside.baseline_change_mb):
            return "Growing", f"grows beyond the baseline ({beside.reason}); on its own: {growth.reason}", None
        why = (
            f"its own change {beside.change_mb:+.1f} MB a replica is less than the baseline's fall"
            if own
            else f"its own change {growth.change_share:+.1%} is under {least:.1%} over this window, too small to be a leak"
        )
        return word, f"{votes}; it grows beyond the baseline ({beside.reason}), but {why} ({growth.reason})", None
    return word, votes, shape if word == "Growing" else None


def _ended_early(s: Series, window: Window | None, interval: float) -> str | None:
    """Why a replica that ended by itself before the comparison window's end is excluded (docs/reference/store.md)."""
    if window is None or not len(s.t):
        return None
    crashed = s.end_kind in ("crashed", "exited-early") or (s.end_kind is None and s.exit_code not in (None, 0))
    last = float(s.t[-1])
    if not crashed or last >= window.end - max(interval, 1.0):
        return None
    return (
        f"{s.end_kind or 'exited'} ({how_ended(s.exit_code)}) at {utc(s.ended_at or last, minutes=True)}, "
        f"{(window.end - last) / 3600:.2f} h before the comparison window's end"
    )


def _growth_members(
    series: list[Series], by: dict[str, ReplicaStats], groups: list[str], window: Window | None, interval: float
) -> dict[str, list[Series]]:
    """Per group, the replicas its growth is measured on (`by`: the replicas by name): usable and
    clean throughout the window."""
    if window is None:
        return {}
    return {
        g: [
            s
            for s in series
            if s.group == g
            and (r := by.get(s.name)) is not None
            and usable(r)
            and clean_in_window(s, window, max(interval, 1.0))
        ]
        for g in groups
    }


def _group_growth(
    members: dict[str, list[Series]], by: dict[str, ReplicaStats], window: Window | None
) -> tuple[dict[str, stats.GroupGrowth], dict[str, tuple[float, float]]]:
    """Each group's change over its common window (the comparable window, narrowed to where every
    included replica is past its warm-up and still in its load phase), across its clean replicas
    (`by`: the replicas by name)."""
    if window is None:
        return {}, {}
    starts, ends, spans, lengths = {}, {}, {}, {}
    for g, inc in members.items():
        if not inc:
            continue
        # (an included replica has a steady window)
        lo = max([window.start] + [cast(float, by[s.name].steady_start) for s in inc])
        hi = min([window.end] + [cast(float, by[s.name].steady_end) for s in inc])
        if hi <= lo:
            continue
        edge = RULES["growth_edge_share"] * (hi - lo)
        lv = [e[:2] for s in inc if (e := stats.trend_edges(s.t, s.mb, lo, hi, edge)) is not None]
        starts[g], ends[g] = np.array([a for a, _ in lv]), np.array([b for _, b in lv])
        spans[g], lengths[g] = (lo, hi), hi - lo
    return stats.group_growth(starts, ends, lengths), spans


def _pooled_growth(reps: list[ReplicaStats], steady: list[SteadyGrowth | None]) -> list[ReplicaStats]:
    """The replicas again, each growth interval narrowed by its group's spread of changes where
    that is narrower (stats.growth_pool / stats.pooled; the group: its usable replicas with an
    interval), from the first pass's growth (replica.repooled: the word is decided again, the
    growth not computed again). Replicas outside a pooled group get their own interval with its slow
    part widened (stats.pooled with no pool)."""
    pools = {}
    for g in {r.group for r in reps}:
        rs = [r for r in reps if r.group == g and usable(r) and r.change_lo is not None and r.change_share is not None]
        pool = stats.growth_pool(
            [cast(float, r.change_share) for r in rs], [r.window_h * 3600 for r in rs], [r.name for r in rs]
        )
        if pool is not None:
            pools[g] = pool
    return [repooled(r, st, pools.get(r.group)) if r.change_lo is not None else r for r, st in zip(reps, steady)]


def _group_ratchet(reps: list[ReplicaStats], steady: list[SteadyGrowth | None]) -> list[ReplicaStats]:
    """The replicas again, Growing in steps where their group's step evidence together says so
    (stats.ratchet_group: each replica against its own simulated null, the group's p's combined by the truncated product;
    stats.ratchet_shared: steps the replicas share in time, each replica climbing at them on its
    own series; the group: its usable replicas with a steady window). Only Growing, Variable and
    Flat words change; Bloating, the more severe word, stays."""
    out = list(reps)
    for g in {r.group for r in reps}:
        at = [
            i
            for i, (r, st) in enumerate(zip(reps, steady))
            if r.group == g and usable(r) and st is not None and len(st.y)
        ]
        sts = [cast(SteadyGrowth, steady[i]) for i in at]  # at: where there is one
        calls = (
            stats.ratchet_group([st.step_evidence() for st in sts]),
            stats.ratchet_shared([(st.t, st.y) for st in sts]),
        )
        for call in calls:
            if call is None:
                continue
            for i, called, why in zip(at, call.called, call.reasons):
                if called and out[i].status in ("Growing", "Variable", "Flat") and out[i].growth_shape != stats.STEPS:
                    out[i] = replace(out[i], status="Growing", status_reason=why, growth_shape=stats.STEPS)
    return out


def analyse(store: Store, metric: str | None = None, baseline: str | None = None) -> Analysis:
    """The run's analysis; `baseline` compares every group with another group than the run's."""
    meta = store.meta()
    metric = metric or meta.get("metric", "rss")
    groups = store.groups()
    names = [g["name"] for g in groups]
    if baseline is not None and baseline not in names:
        raise UserError(
            f"baseline {baseline!r} is not a group of this run",
            f"{did_you_mean(baseline, names)}give one of: {', '.join(names)}",
        )
    baseline = baseline or next((g["name"] for g in groups if g["is_baseline"]), names[0] if names else "")
    imported = is_imported(store)
    phases = json.loads(meta.get("phases", "{}") or "{}") if meta.get("phases", "").startswith("{") else {}
    series = load_series(store, metric)
    duplicates = drop_duplicates(series)  # one process sampled twice counts once (before segmenting)
    mapping = segment(store, series)
    window = treatment_window(series, names)
    window, restarts = cut_before_restarts(series, window) if window else (None, [])
    by_series = {s.name: s for s in series}
    measured = {
        r.replica: seg
        for r in restarts
        if r.after_end and window is not None
        for seg in by_series[r.replica].segments
        if seg.start <= window.end <= seg.end
    }
    firsts = [
        replica_stats_steady(s, idle_configured=bool(phases.get("idle")), span=measured.get(s.name)) for s in series
    ]
    reps, steady = [r for r, _ in firsts], [st for _, st in firsts]
    interval = float(meta.get("interval", 0) or 0)
    early = {r.replica: r for r in restarts if r.excluded}
    for r in reps:
        r.excluded = _ended_early(by_series[r.name], window, interval) or (
            f"process restarted inside the comparison window ({early[r.name].reason}, "
            f"{utc(early[r.name].t, minutes=True)}): its level is a young process's"
            if r.name in early
            else None
        )
    listed: dict[str, set[str]] = {}
    for m in store.memberships():
        listed.setdefault(m["group_name"], set()).add(m["replica"])
    reps = _group_ratchet(_pooled_growth(reps, steady), steady)
    # a young process's series with its fitted regrowth added back (analysis/regrowth.py): its growth
    # and its clean level are those of the level it regrows to
    regrown = {
        r.name: regrowth.series_adjusted(by_series[r.name], st.regrowth)
        for r, st in zip(reps, steady)
        if st is not None and st.regrowth is not None
    }
    figures = end_figures(series, names, window, listed, set(early), regrown) if window else {}
    # the level each replica enters the comparison with
    levels: dict[str, np.ndarray] = {}
    if imported and window:
        for g in names:
            levels[g] = np.array(figures[g].clean_levels)
        basis = (
            f"mean of hourly means over the last day of the comparable window, {window.hours / 24:.1f} days, "
            f"{_fmt_span(window)}"
            if day_levels(window)
            else f"level at the end of the comparable window, {window.hours / 24:.1f} days, {_fmt_span(window)}"
        )
    else:
        for g in names:
            levels[g] = np.array([r.steady_mean_mb for r in reps if r.group == g and usable(r)])
        basis = "steady mean over the load phase after warm-up"
    comps = compare_groups(levels, baseline, seed=int(meta.get("seed", "0") or 0))
    rep_of = {r.name: r for r in reps}
    members = _growth_members([regrown.get(s.name, s) for s in series], rep_of, names, window, interval)
    growths, spans = _group_growth(members, rep_of, window)
    besides = growth_beside(members, spans, baseline)
    summaries = []
    status_of = {
        g: _group_status(
            [r.status for r in reps if r.group == g and usable(r)],
            len([r for r in reps if r.group == g and r.verified is not False]),
            growths.get(g),
            [r.growth_shape for r in reps if r.group == g and usable(r)],
            besides.get(g),
        )
        for g in names
    }
    for g in groups:
        rs = [r for r in reps if r.group == g["name"]]
        ok = [r for r in rs if usable(r)]
        rates = [r.slope_mb_h for r in ok]
        lv = levels[g["name"]]
        fig = figures.get(g["name"])
        summaries.append(
            GroupSummary(
                name=g["name"],
                allocator=g["family"] or g["allocator"],
                version=g["version"],
                is_baseline=g["name"] == baseline,
                replicas=len(rs),
                verified=sum(1 for r in rs if r.verified is True),
                usable=len(lv),
                level_mb=(fig.clean_mb if imported and fig else (float(np.mean(lv)) if len(lv) else None)),
                steady_mean_mb=_median(r.steady_mean_mb for r in ok)
                if imported
                else (float(np.mean(lv)) if len(lv) else None),
                steady_median_mb=_median(r.steady_mb for r in ok),
                peak_mb=_median(r.peak_mb for r in ok),
                final_mb=_median(r.final_mb for r in ok),
                change_mb=_median(r.change_mb for r in ok),
                change_share=_median(r.change_share for r in ok),
                window_h=_median(r.window_h for r in ok),
                growth_mb_h=_median(rates) if rates and all(x is not None for x in rates) else None,
                footprint_mb=_mean_present(r.footprint_mb for r in ok),  # level − LazyFree, averaged as the level is
                lazyfree_share=_median(r.lazyfree_share for r in ok),
                idle_released_share=_median(r.idle_released_share for r in ok),
                release_events=_median(float(r.release_events) for r in ok),
                frag_overhead_mb=_median(r.frag_overhead_mb for r in ok),
                ops_per_s=_median(r.ops_per_s for r in ok),
                cpu_us_per_op=_median(r.cpu_us_per_op for r in ok),
                status=status_of[g["name"]][0],
                status_reason=status_of[g["name"]][1],
                growth_shape=status_of[g["name"]][2],
                comparison=comps.get(g["name"]),
                published_mb=fig.published_mb if fig else None,
                growth=growths.get(g["name"]),
                growth_span=spans.get(g["name"]),
                growth_beside=besides.get(g["name"]),
                excluded=[r.name for r in rs if r.excluded],
            )
        )
    a = Analysis(
        metric,
        baseline,
        reps,
        summaries,
        series=series,
        window=window,
        end_figures=figures,
        ages=age_table(series, names),
        label_mapping=mapping,
        level_basis=basis,
        duplicates=duplicates,
        levels=levels,
        imported=imported,
    )
    lazy = [g for g in summaries if g.lazyfree_share is not None]
    if lazy:
        a.metric_note = (
            f"The verdict uses {metric.upper()}; the footprint ({metric.upper()} − LazyFree) is shown beside it "
            f"(LazyFree up to {max(cast(float, g.lazyfree_share) for g in lazy):.1%} of {metric.upper()})."
        )
    else:
        a.metric_note = f"The verdict uses {metric.upper()} (LazyFree was not sampled, so no footprint is shown)."
    if not imported:  # the same replica levels as the headline comparison, with their hosts
        host_of = {r["name"]: r.get("host") for r in store.replicas()}
        a.hosts = host_factor([(r.group, host_of.get(r.name), r.steady_mean_mb) for r in reps if usable(r)], baseline)
    a.warnings = collect(store, series, reps, window, figures, mapping, names, imported, duplicates, restarts, regrown)
    a.recommendation = recommend(a)
    from .decomposition import decompose

    a.decomposition = decompose(store, a)
    return a


def _fmt_span(w: Window) -> str:
    return f"{utc(w.start, minutes=True)} to {utc(w.end, minutes=True)}"
