"""Statistics and verdicts, the same for fresh runs and imported data.

Per replica (its last process segment): warm-up exclusion, steady level, robust growth slope with
a confidence interval, peak, final, idle release, release events, fragmentation overhead,
throughput. Per group against the baseline: ratio and difference with bootstrap intervals
(replicas are the units), an exact or sampled permutation test, Holm correction, Cliff's delta,
and a ranking that ties what is not significantly different. Confound checks and a plain-words
recommendation complete it. Every threshold is in RULES, documented in docs/analysis.md.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from scipy import stats as sps

from .store import Store

# Every threshold that turns numbers into words lives here (see docs/analysis.md).
RULES = {
    "min_steady_samples": 8,          # fewer post-warm-up samples: "Too short"
    "warmup_steepness": 3.0,          # a start 3x steeper than the second half is a warm-up ...
    "warmup_fraction": 0.9,           # ... which ends when the series first reaches 90% of its late level
    "warmup_max_share": 0.5,          # ... but never drops more than half of the window
    "flat_max_growth_share": 0.05,    # growth over the window below 5% of the level counts as flat
    "growing_min_mb_per_h": 1.0,      # and a slope below 1 MB/h never counts as growing
    "bloating_window_share": 0.25,    # Growing by 25% of the level or more within the window: "Bloating"
    "variable_iqr_share": 0.25,       # IQR above 25% of the median in the steady window: "Variable"
    "release_min_mb": 1.0,            # a drop between samples of at least 1 MB ...
    "release_min_share": 0.01,        # ... and 1% of the level counts as a release event
    "ratchet_min_samples": 20,        # ratcheting needs this many samples with no release at all
    "alpha": 0.05,                    # significance level after Holm correction
    "bootstrap_resamples": 5000,
    "permutation_exact_limit": 50000, # above this many splits, sample permutations instead
    "permutation_samples": 20000,
    "min_replicas": 3,                # fewer per group: a confound warning
    "identical_min_points": 5,        # two series equal at this many shared timestamps: one process twice
    "level_shift_share": 0.3,         # a level change of 30% around an event: allocator changed?
    "restart_drop_share": 0.3,        # a restart event counts when memory drops by 30% or more there
    "start_skew_intervals": 3,        # groups whose first samples differ by more: started apart
}
STATUS_ORDER = ["Unverified", "Too short", "Bloating", "Growing", "Ratcheting", "Variable", "Flat"]
METRIC_COLUMN = {"rss": "rss_kb", "pss": "pss_kb", "uss": "uss_kb", "anon": "anon_kb"}


@dataclass
class Series:
    replica_id: int
    name: str
    group: str
    verified: bool | None
    t: np.ndarray            # Unix seconds
    mb: np.ndarray           # the metric in MB
    phase: np.ndarray        # phase name per sample
    live_mb: np.ndarray      # NaN where the workload does not report
    ops: np.ndarray          # NaN where not reported
    cpu_s: np.ndarray
    segment_start: float     # start of the segment analysed (after the last restart)


@dataclass
class ReplicaStats:
    name: str
    group: str
    verified: bool | None
    n_samples: int                    # steady (post-warm-up) samples
    total_samples: int = 0
    steady_mb: float | None = None
    steady_mean_mb: float | None = None
    peak_mb: float | None = None
    final_mb: float | None = None
    slope_mb_h: float | None = None
    slope_lo: float | None = None
    slope_hi: float | None = None
    warmup_end_s: float | None = None
    window_h: float = 0.0
    iqr_share: float | None = None
    end_of_load_mb: float | None = None
    idle_final_mb: float | None = None
    idle_released_share: float | None = None
    idle_half_release_s: float | None = None
    release_events: int = 0
    largest_release_mb: float = 0.0
    frag_overhead_mb: float | None = None
    frag_ratio: float | None = None
    ops_per_s: float | None = None
    cpu_us_per_op: float | None = None
    status: str = "Too short"


@dataclass
class GroupComparison:
    group: str
    n: int
    mean_mb: float | None
    median_mb: float | None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    diff_mb: float | None = None
    diff_ci: tuple[float, float] | None = None
    p_raw: float | None = None
    p_holm: float | None = None
    min_p: float | None = None        # the smallest p this many replicas can give
    cliffs_delta: float | None = None
    significant: bool = False
    rank: int | None = None


@dataclass
class GroupSummary:
    name: str
    allocator: str
    version: str | None
    is_baseline: bool
    replicas: int
    verified: int
    steady_mean_mb: float | None
    steady_median_mb: float | None
    peak_mb: float | None
    final_mb: float | None
    growth_mb_h: float | None
    growth_ci: tuple[float, float] | None
    idle_released_share: float | None
    release_events: float | None
    frag_overhead_mb: float | None
    ops_per_s: float | None
    cpu_us_per_op: float | None
    status: str
    comparison: GroupComparison | None = None


@dataclass
class Analysis:
    metric: str
    baseline: str
    replicas: list[ReplicaStats]
    groups: list[GroupSummary]
    warnings: list[tuple[str, str]] = field(default_factory=list)   # (name, plain words)
    recommendation: str = ""
    series: list[Series] = field(default_factory=list)

    def group(self, name: str) -> GroupSummary:
        return next(g for g in self.groups if g.name == name)


# ---- loading ------------------------------------------------------------------------------------

def _event_applies(group_name: str | None, group: str) -> bool:
    g = (group_name or "all").lower()
    return g in ("all", group.lower(), f"group_{group.lower()}")


def segment_start(t: np.ndarray, y: np.ndarray, candidates: list[float]) -> float:
    """Start of the last segment: the latest restart event that the data confirms with a drop."""
    start = float(t[0]) if len(t) else 0.0
    for ev in sorted(candidates):
        i = int(np.searchsorted(t, ev))
        if 1 <= i < len(t):
            before, after = float(np.median(y[max(0, i - 3):i])), float(np.min(y[i:i + 2]))
            if before > 0 and after < (1 - RULES["restart_drop_share"]) * before:
                start = float(t[i])
    return start


def load_series(store: Store, metric: str) -> list[Series]:
    col = METRIC_COLUMN[metric]
    events = store.query("SELECT t, kind, replica_id, group_name FROM events WHERE kind IN ('restart', 'migration', 'process_restart')")
    out = []
    for rep in store.query("SELECT r.id, r.name, g.name AS grp, r.verified FROM replicas r JOIN groups g ON g.id = r.group_id ORDER BY g.id, r.idx, r.name"):
        rows = store.query(f"SELECT t, {col}, phase, live_bytes, ops, cpu_s FROM samples "
                           f"WHERE replica_id = ? AND {col} IS NOT NULL ORDER BY t", (rep["id"],))
        t = np.array([r[0] for r in rows], dtype=float)
        y = np.array([r[1] for r in rows], dtype=float)
        own = [e["t"] for e in events if e["replica_id"] == rep["id"]]
        shared = [e["t"] for e in events if e["replica_id"] is None and _event_applies(e["group_name"], rep["grp"])]
        seg = segment_start(t, y, own + shared)
        keep = t >= seg
        def arr(i: int, scale: float = 1.0) -> np.ndarray:
            return np.array([np.nan if r[i] is None else r[i] * scale for r in rows], dtype=float)[keep]
        verified = None if rep["verified"] is None else bool(rep["verified"])
        out.append(Series(rep["id"], rep["name"], rep["grp"], verified, t[keep], arr(1, 1 / 1024),
                          np.array([r[2] or "load" for r in rows], dtype=object)[keep],
                          arr(3, 1 / 1048576), arr(4), arr(5), seg))
    return out


# ---- per replica --------------------------------------------------------------------------------

def theil_sen(t_h: np.ndarray, y: np.ndarray, max_points: int = 400) -> tuple[float, float, float]:
    """Median-of-pairwise-slopes (Theil–Sen) with its 95% interval; thinned evenly for long series."""
    if len(t_h) > max_points:
        idx = np.linspace(0, len(t_h) - 1, max_points).round().astype(int)
        t_h, y = t_h[idx], y[idx]
    res = sps.theilslopes(y, t_h, alpha=0.95)
    return float(res.slope), float(res.low_slope), float(res.high_slope)


def detect_warmup(t: np.ndarray, y: np.ndarray) -> int:
    """Index of the first steady sample. A warm-up is a start much steeper than the rest (a ramp
    that flattens); it ends where the series first reaches 90% of its late level. A series that
    grows at one pace throughout has no warm-up: its growth is the finding, not a start-up effect."""
    n = len(y)
    if n < 8:
        return 0
    head = max(3, n // 5)
    early = np.polyfit(t[:head] - t[0], y[:head], 1)[0]
    late = theil_sen(t[n // 2:] - t[0], y[n // 2:])[0]
    if early <= 0 or early < RULES["warmup_steepness"] * max(late, 0.0):
        return 0
    late_level = float(np.median(y[n // 2:]))
    reached = np.nonzero(y >= RULES["warmup_fraction"] * late_level)[0]
    first = int(reached[0]) if len(reached) else 0
    return min(first, int(n * RULES["warmup_max_share"]))


def release_events(y: np.ndarray, level: float) -> tuple[int, float]:
    drops = -np.diff(y)
    threshold = max(RULES["release_min_mb"], RULES["release_min_share"] * level)
    events = drops[drops >= threshold]
    return int(len(events)), float(events.max()) if len(events) else 0.0


def classify(r: ReplicaStats) -> str:
    """The status word of one replica; the rules are RULES above, in this order."""
    if r.verified is False:
        return "Unverified"
    if r.steady_mb is None or r.n_samples < RULES["min_steady_samples"]:
        return "Too short"
    level = max(r.steady_mb, 1e-9)
    growth_share = (r.slope_mb_h or 0) * r.window_h / level
    growing = (r.slope_lo is not None and r.slope_lo > 0 and growth_share > RULES["flat_max_growth_share"]
               and (r.slope_mb_h or 0) >= RULES["growing_min_mb_per_h"])
    if growing and growth_share >= RULES["bloating_window_share"]:
        return "Bloating"
    if growing:
        return "Growing"
    if r.release_events == 0 and r.total_samples >= RULES["ratchet_min_samples"] and \
            r.final_mb is not None and r.peak_mb is not None and r.final_mb >= 0.99 * r.peak_mb:
        return "Ratcheting"
    if (r.iqr_share or 0) > RULES["variable_iqr_share"]:
        return "Variable"
    return "Flat"


def replica_stats(s: Series) -> ReplicaStats:
    r = ReplicaStats(s.name, s.group, s.verified, 0)
    if len(s.t) == 0:
        r.status = classify(r)
        return r
    load = np.array([p in ("warmup", "load") for p in s.phase])
    idle = np.array([p == "idle" for p in s.phase])
    lt, ly = s.t[load & ~np.isnan(s.mb)], s.mb[load & ~np.isnan(s.mb)]
    explicit_warmup = bool(np.any(s.phase == "warmup"))
    if explicit_warmup:
        steady = np.array([p == "load" for p in s.phase[load & ~np.isnan(s.mb)]])
        start = int(np.argmax(steady)) if steady.any() else len(ly)
    else:
        start = detect_warmup(lt, ly)
    st, sy = lt[start:], ly[start:]
    r.n_samples = len(sy)
    r.total_samples = int(np.sum(~np.isnan(s.mb)))
    r.peak_mb = float(np.nanmax(s.mb))
    r.final_mb = float(s.mb[~np.isnan(s.mb)][-1])
    if len(sy):
        r.warmup_end_s = float(st[0] - s.t[0])
        r.steady_mb = float(np.median(sy))
        r.steady_mean_mb = float(np.mean(sy))
        q1, q3 = np.percentile(sy, [25, 75])
        r.iqr_share = float((q3 - q1) / r.steady_mb) if r.steady_mb > 0 else None
        r.window_h = float((st[-1] - st[0]) / 3600)
    if len(sy) >= 3 and r.window_h > 0:
        r.slope_mb_h, r.slope_lo, r.slope_hi = theil_sen((st - st[0]) / 3600, sy)
    all_y = s.mb[~np.isnan(s.mb)]
    r.release_events, r.largest_release_mb = release_events(all_y, r.steady_mb or float(np.median(all_y)))
    # idle release: how much of the end-of-load memory went back, and how fast
    if idle.any() and len(ly):
        r.end_of_load_mb = float(np.median(ly[-3:]))
        iy, it = s.mb[idle], s.t[idle]
        r.idle_final_mb = float(np.median(iy[-3:]))
        released = r.end_of_load_mb - r.idle_final_mb
        r.idle_released_share = float(max(0.0, released) / r.end_of_load_mb) if r.end_of_load_mb > 0 else None
        if released > 0:
            half = np.nonzero(iy <= r.end_of_load_mb - released / 2)[0]
            r.idle_half_release_s = float(it[half[0]] - it[0]) if len(half) else None
    # fragmentation overhead where the workload reports its live bytes
    live = s.live_mb[load & ~np.isnan(s.mb)][start:]
    ok = ~np.isnan(live)
    if ok.sum() >= 3:
        r.frag_overhead_mb = float(np.median(sy[ok] - live[ok]))
        pos = live[ok] > 0
        r.frag_ratio = float(np.median(sy[ok][pos] / live[ok][pos])) if pos.any() else None
    ops = s.ops[load]
    ot, cpu = s.t[load], s.cpu_s[load]
    good = ~np.isnan(ops)
    if good.sum() >= 2:
        d_ops = ops[good][-1] - ops[good][0]
        d_t = ot[good][-1] - ot[good][0]
        if d_t > 0 and d_ops > 0:
            r.ops_per_s = float(d_ops / d_t)
            d_cpu = cpu[good][-1] - cpu[good][0]
            r.cpu_us_per_op = float(d_cpu / d_ops * 1e6) if not math.isnan(d_cpu) else None
    r.status = classify(r)
    return r


# ---- groups -------------------------------------------------------------------------------------

def permutation_test(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """Two-sided permutation test on the difference of means; returns (p, smallest possible p)."""
    pooled = np.concatenate([a, b])
    n, na = len(pooled), len(a)
    observed = abs(a.mean() - b.mean())
    total = math.comb(n, na)
    if total <= RULES["permutation_exact_limit"]:
        diffs = []
        s = pooled.sum()
        for idx in itertools.combinations(range(n), na):
            sa = pooled[list(idx)].sum()
            diffs.append(abs(sa / na - (s - sa) / (n - na)))
        diffs = np.array(diffs)
        p = float(np.mean(diffs >= observed - 1e-12))
        return p, 2.0 / total if total > 1 else 1.0
    k = RULES["permutation_samples"]
    hits = 0
    for _ in range(k):
        perm = rng.permutation(pooled)
        hits += abs(perm[:na].mean() - perm[na:].mean()) >= observed - 1e-12
    return (hits + 1) / (k + 1), 1.0 / (k + 1)


def bootstrap_ci(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[tuple[float, float], tuple[float, float]]:
    """95% percentile intervals of mean(a)/mean(b) and mean(a)-mean(b), resampling replicas."""
    k = RULES["bootstrap_resamples"]
    ma = rng.choice(a, size=(k, len(a))).mean(axis=1)
    mb = rng.choice(b, size=(k, len(b))).mean(axis=1)
    ratio = ma / np.where(mb == 0, np.nan, mb)
    diff = ma - mb
    return (float(np.nanpercentile(ratio, 2.5)), float(np.nanpercentile(ratio, 97.5))), \
           (float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5)))


def cliffs_delta(a: np.ndarray, b: np.ndarray) -> float:
    gt = sum(float(x > y) for x in a for y in b)
    lt = sum(float(x < y) for x in a for y in b)
    return (gt - lt) / (len(a) * len(b))


def holm(pvalues: list[float]) -> list[float]:
    order = np.argsort(pvalues)
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def compare_groups(levels: dict[str, np.ndarray], baseline: str, seed: int = 0) -> dict[str, GroupComparison]:
    rng = np.random.default_rng(seed)
    out: dict[str, GroupComparison] = {}
    base = levels.get(baseline, np.array([]))
    for name, a in levels.items():
        c = GroupComparison(name, len(a), float(a.mean()) if len(a) else None, float(np.median(a)) if len(a) else None)
        if name != baseline and len(a) and len(base) and base.mean() > 0:
            c.ratio = float(a.mean() / base.mean())
            c.diff_mb = float(a.mean() - base.mean())
            if len(a) >= 2 and len(base) >= 2:
                c.ratio_ci, c.diff_ci = bootstrap_ci(a, base, rng)
                c.p_raw, c.min_p = permutation_test(a, base, rng)
                c.cliffs_delta = cliffs_delta(a, base)
        out[name] = c
    tested = [n for n, c in out.items() if c.p_raw is not None]
    for n, p in zip(tested, holm([out[n].p_raw for n in tested])):
        out[n].p_holm = p
        out[n].significant = p < RULES["alpha"]
    _rank(levels, out, baseline, rng)
    return out


def _rank(levels: dict[str, np.ndarray], comps: dict[str, GroupComparison], baseline: str,
          rng: np.random.Generator) -> None:
    """Rank by mean level. Each rank is led by its smallest group; a later group opens a new rank
    only if it is significantly larger than that leader (permutation test, Bonferroni over the
    comparisons; against the baseline, the Holm-adjusted test of the baseline table), so "tied"
    always means "not shown different from the rank's leader"."""
    names = sorted((n for n in levels if len(levels[n])), key=lambda n: levels[n].mean())
    if not names:
        return
    factor = max(1, len(names) - 1)
    leader, rank = names[0], 1
    comps[leader].rank = 1
    for i, name in enumerate(names[1:], 2):
        other = leader if name == baseline else name if leader == baseline else None
        if other is not None and comps[other].p_holm is not None:
            p_adj = comps[other].p_holm          # the same test the baseline table shows: one verdict
        else:
            a, b = levels[name], levels[leader]
            p = permutation_test(a, b, rng)[0] if len(a) >= 2 and len(b) >= 2 else 1.0
            p_adj = min(1.0, p * factor)
        if p_adj < RULES["alpha"]:
            leader, rank = name, i
        comps[name].rank = rank


def _median(values: Iterable[float | None]) -> float | None:
    v = [x for x in values if x is not None and not math.isnan(x)]
    return float(np.median(v)) if v else None


def _group_status(words: list[str], verified: int) -> str:
    if verified == 0:
        return "Unverified"
    counts = {w: words.count(w) for w in set(words)}
    top = max(counts.values())
    return min((w for w, c in counts.items() if c == top), key=STATUS_ORDER.index)


# ---- confounds ----------------------------------------------------------------------------------

def confounds(store: Store, series: list[Series], reps: list[ReplicaStats], interval: float) -> list[tuple[str, str]]:
    warnings: list[tuple[str, str]] = []
    by_group: dict[str, list[Series]] = {}
    for s in series:
        by_group.setdefault(s.group, []).append(s)
    firsts = {g: min(s.t[0] for s in ss if len(s.t)) for g, ss in by_group.items() if any(len(s.t) for s in ss)}
    if firsts and max(firsts.values()) - min(firsts.values()) > RULES["start_skew_intervals"] * max(interval, 1):
        spread = max(firsts.values()) - min(firsts.values())
        warnings.append(("groups-started-apart",
                         f"groups' analysed data start up to {spread / 3600:.1f} h apart "
                         f"({', '.join(f'{g}: {_fmt_time(t)}' for g, t in sorted(firsts.items(), key=lambda x: x[1]))}); "
                         "differences in age or conditions may explain part of the gap"))
    changed = store.query("SELECT DISTINCT r.name FROM verifications v JOIN processes p ON p.id = v.process_id "
                          "JOIN replicas r ON r.id = p.replica_id WHERE v.verified = 0 AND EXISTS "
                          "(SELECT 1 FROM verifications v2 WHERE v2.process_id = v.process_id AND v2.verified = 1 AND v2.t < v.t)")
    if changed:
        warnings.append(("allocator-changed", f"allocator changed mid-run in {', '.join(r[0] for r in changed)}"))
    shifted = _level_shifts(store, series)
    if shifted:
        warnings.append(("level-shift-at-event", "memory level jumped around a recorded event in "
                         f"{len(shifted)} replicas, e.g. {', '.join(shifted[:6])}: they may have changed allocator or "
                         "restarted; only the data after the last restart is analysed"))
    multi = store.query("SELECT value FROM meta WHERE key = 'replicas_in_several_groups'")
    if multi and json.loads(multi[0][0]):
        names = json.loads(multi[0][0])
        warnings.append(("replica-in-several-groups", f"{len(names)} replicas are listed in more than one group "
                         f"(e.g. {', '.join(names[:6])}); each is analysed in the group of its current list, but its history may mix allocators"))
    dupes = _identical_series(series)
    if dupes:
        warnings.append(("identical-series", f"series equal at {RULES['identical_min_points']}+ shared timestamps (one process sampled "
                         f"twice under two names?): {', '.join(f'{a} = {b}' for a, b in dupes[:6])}"))
    small = [g for g, ss in by_group.items() if sum(1 for s in ss if s.verified is not False) < RULES["min_replicas"]]
    if small:
        warnings.append(("too-few-replicas", f"fewer than {RULES['min_replicas']} verified replicas in "
                         f"{', '.join(small)}: differences cannot be shown significant"))
    short = [r.name for r in reps if r.status == "Too short"]
    if short:
        warnings.append(("too-short", f"{len(short)} replicas have fewer than {RULES['min_steady_samples']} "
                         "steady samples: run longer or sample more often"))
    unverified = [r.name for r in reps if r.verified is False]
    if unverified:
        warnings.append(("unverified", f"excluded, not running the expected allocator: {', '.join(unverified)}"))
    host = store.query("SELECT MIN(mem_available_kb * 1.0 / mem_total_kb), MAX(swap_total_kb - swap_free_kb), "
                       "MAX(load1) FROM host_samples")
    meta = store.meta()
    if host and host[0][0] is not None:
        if host[0][0] < 0.1:
            warnings.append(("memory-pressure", f"host memory available fell to {host[0][0]:.0%}: the kernel may have reclaimed pages"))
        if host[0][1] and host[0][1] > 0:
            warnings.append(("swap-used", f"up to {host[0][1] / 1024:.0f} MB of swap in use: RSS understates memory"))
        ncpu = int(meta.get("ncpu", "0") or 0)
        if ncpu and host[0][2] and host[0][2] > 1.5 * ncpu:
            warnings.append(("cpu-saturated", f"load average reached {host[0][2]:.1f} on {ncpu} cores: throughput and "
                             "time-based allocator behaviour are distorted"))
    return warnings


def _fmt_time(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _level_shifts(store: Store, series: list[Series]) -> list[str]:
    """Replicas whose level moved by 30%+ right at a recorded non-restart event (a migration, a
    config change): the samples on either side differ, the move persists, and no restart lies
    between those samples to explain it."""
    events = store.query("SELECT t, group_name FROM events WHERE kind NOT IN "
                         "('phase', 'start', 'end', 'replica_end', 'restart', 'process_restart', 'note')")
    restarts = [r[0] for r in store.query("SELECT t FROM events WHERE kind IN ('restart', 'process_restart')")]
    share = RULES["level_shift_share"]
    out = []
    for s in series:
        rows = store.query("SELECT t, rss_kb FROM samples WHERE replica_id = ? ORDER BY t", (s.replica_id,))
        if len(rows) < 6:
            continue
        t = np.array([r[0] for r in rows], dtype=float)
        y = np.array([r[1] or 0 for r in rows], dtype=float)
        for e in events:
            if not _event_applies(e[1], s.group):
                continue
            i = int(np.searchsorted(t, e[0]))
            if not 3 <= i <= len(t) - 3 or any(t[i - 1] < r <= t[i] for r in restarts):
                continue
            before, after = np.median(y[i - 3:i]), np.median(y[i:i + 3])
            if y[i - 1] > 0 and before > 0 and abs(y[i] - y[i - 1]) / y[i - 1] > share and abs(after - before) / before > share:
                out.append(s.name)
                break
    return out


def _identical_series(series: list[Series]) -> list[tuple[str, str]]:
    """Pairs of replicas with the same value at several shared timestamps: one process sampled
    under two names (e.g. a `pgrep` prefix match). Memory in kB rarely coincides even once."""
    long_enough = [s for s in series if len(s.mb) >= RULES["identical_min_points"]]
    pairs = []
    for a, b in itertools.combinations(long_enough, 2):
        _, ia, ib = np.intersect1d(a.t, b.t, return_indices=True)
        equal = a.mb[ia][a.mb[ia] == b.mb[ib]]
        # equal at several timestamps *and* moving together: two plateaus at one value are not enough
        if len(equal) >= RULES["identical_min_points"] and len(np.unique(equal)) >= 3:
            pairs.append((a.name, b.name))
    return pairs


# ---- the whole analysis -------------------------------------------------------------------------

def analyse(store: Store, metric: str | None = None) -> Analysis:
    meta = store.meta()
    metric = metric or meta.get("metric", "rss")
    interval = float(meta.get("interval", "1") or 1)
    baseline_row = store.query("SELECT name FROM groups WHERE is_baseline = 1")
    groups = store.query("SELECT id, name, allocator, family, version, is_baseline FROM groups ORDER BY id")
    baseline = baseline_row[0][0] if baseline_row else (groups[0]["name"] if groups else "")
    series = load_series(store, metric)
    reps = [replica_stats(s) for s in series]
    levels = {g["name"]: np.array([r.steady_mean_mb for r in reps if r.group == g["name"] and r.verified is not False
                                    and r.steady_mean_mb is not None]) for g in groups}
    comps = compare_groups(levels, baseline, seed=int(meta.get("seed", "0") or 0))
    summaries = []
    for g in groups:
        rs = [r for r in reps if r.group == g["name"]]
        ok = [r for r in rs if r.verified is not False]
        slopes = [r.slope_mb_h for r in ok if r.slope_mb_h is not None]
        summaries.append(GroupSummary(
            name=g["name"], allocator=g["family"] or g["allocator"], version=g["version"], is_baseline=bool(g["is_baseline"]),
            replicas=len(rs), verified=sum(1 for r in rs if r.verified is True),
            steady_mean_mb=float(np.mean(levels[g["name"]])) if len(levels[g["name"]]) else None,
            steady_median_mb=_median(r.steady_mb for r in ok), peak_mb=_median(r.peak_mb for r in ok),
            final_mb=_median(r.final_mb for r in ok), growth_mb_h=_median(slopes),
            growth_ci=(float(np.percentile(slopes, 2.5)), float(np.percentile(slopes, 97.5))) if len(slopes) >= 2 else None,
            idle_released_share=_median(r.idle_released_share for r in ok),
            release_events=_median(float(r.release_events) for r in ok),
            frag_overhead_mb=_median(r.frag_overhead_mb for r in ok), ops_per_s=_median(r.ops_per_s for r in ok),
            cpu_us_per_op=_median(r.cpu_us_per_op for r in ok),
            status=_group_status([r.status for r in ok], len(ok)), comparison=comps.get(g["name"])))
    result = Analysis(metric, baseline, reps, summaries, confounds(store, series, reps, interval), series=series)
    result.recommendation = recommend(result)
    return result


def recommend(a: Analysis) -> str:
    usable = [g for g in a.groups if g.steady_mean_mb is not None and g.status != "Unverified"]
    if not usable:
        return "No group has verified, steady data: nothing can be recommended from this run."
    best = min(usable, key=lambda g: g.steady_mean_mb)
    base = next((g for g in a.groups if g.name == a.baseline), None)
    c = best.comparison
    parts = []
    if best.name == a.baseline or base is None or c is None or c.ratio is None:
        parts.append(f"The baseline **{a.baseline}** used the least memory ({a.metric.upper()}); no other group beat it.")
        confidence = "no group was better"
    else:
        ci = f" (95% CI {c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f})" if c.ratio_ci else ""
        parts.append(f"**{best.name}** used the least memory: {best.steady_mean_mb:.1f} MB steady {a.metric.upper()}, "
                     f"{c.ratio:.2f}× the baseline {a.baseline}{ci}, {abs(c.diff_mb or 0):.1f} MB less.")
        if c.significant:
            confidence = "high" if c.p_holm is not None and c.p_holm < 0.01 and not a.warnings else "moderate"
            parts.append(f"The difference is significant (permutation test, Holm-adjusted p = {c.p_holm:.3g}, "
                         f"Cliff's δ = {c.cliffs_delta:+.2f}).")
        elif c.p_raw is not None:
            confidence = "low"
            parts.append(f"The difference is **not** significant (Holm-adjusted p = {c.p_holm:.3g}; with "
                         f"{best.comparison.n} replicas the smallest possible p is {c.min_p:.3g}): run more replicas.")
        else:
            confidence = "low"
            parts.append("Too few replicas to test the difference: run at least 3 per group.")
    tied = [g.name for g in usable if g.comparison and g.comparison.rank == (c.rank if c else 1) and g.name != best.name]
    if tied:
        parts.append(f"Statistically tied with it: {', '.join(tied)}.")
    if best.status in ("Growing", "Bloating", "Ratcheting"):
        parts.append(f"Caution: {best.name} is *{best.status}* — its memory may keep climbing in a longer run.")
    trade = []
    if best.name == a.baseline:
        base = None            # no trade-off of the baseline against itself
    if base and best.ops_per_s and base.ops_per_s:
        trade.append(f"throughput {best.ops_per_s / base.ops_per_s:.2f}× baseline")
    if base and best.cpu_us_per_op and base.cpu_us_per_op:
        trade.append(f"CPU per operation {best.cpu_us_per_op / base.cpu_us_per_op:.2f}× baseline")
    if best.peak_mb and base and base.peak_mb:
        trade.append(f"peak {best.peak_mb / base.peak_mb:.2f}× baseline")
    if best.idle_released_share is not None:
        trade.append(f"returned {best.idle_released_share:.0%} of its memory when idle")
    if trade:
        parts.append("Trade-offs: " + "; ".join(trade) + ".")
    if a.warnings:
        parts.append("Caveats: " + "; ".join(name for name, _ in a.warnings) + " (see Warnings).")
    parts.append(f"Confidence: **{confidence}**.")
    return " ".join(parts)
