"""Per-replica estimators on the replica's clean span (its last process on its group's allocator):
warm-up exclusion, steady level, growth over the window (MB and % of level, a rate only where the
window supports it), peak, final, idle release, release events, fragmentation overhead, throughput,
and the status word."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from .. import stats
from ..stats.rules import RULES
from ..stats.status import GROWTH_WORDS
from . import regrowth
from .load import Segment, Series


@dataclass
class ReplicaStats:
    name: str
    group: str
    verified: bool | None
    n_samples: int  # steady (post-warm-up) samples
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

    window_start: float | None = None  # the span analysed (Unix s)
    window_end: float | None = None
    change_mb: float | None = None  # level at the end minus level at the start of the steady window
    change_share: float | None = None  # ... as a share of the steady level
    change_lo: float | None = None  # 95% interval of the change (autocorrelation-robust, stats.growth)
    change_hi: float | None = None
    status_reason: str = ""
    slope_lo_ts: float | None = None  # Theil–Sen lower bound (MB/h), the fallback when growth has no interval
    rate_supported: bool = False  # the window is long enough for a rate (RULES rate_min_*)
    lazyfree_share: float | None = None  # median LazyFree / metric over the steady window (None: not sampled)
    footprint_mb: float | None = None  # steady level minus LazyFree (pages the kernel may take back)
    steady_start: float | None = None  # the steady window (Unix s): after warm-up, load phase only
    steady_end: float | None = None
    growth_shape: str | None = None  # stats.STEPS: Growing in steps (stats.status_phrase); None otherwise
    excluded: str | None = None  # why the replica is left out of its group's comparison (data still shown)
    regrowth_share: float | None = None  # its process's regrowth (analysis/regrowth.py): deficit at its start ...
    regrowth_tau_h: float | None = None  # ... and time constant; None: no regrowth recognised


def usable(r: ReplicaStats) -> bool:
    """Whether a replica enters its group's figures: not shown to run another allocator (unknown
    counts), with a steady level, and not excluded. replica_stats sets steady_mb, steady_mean_mb and
    steady_start together, so one of them says "has a level"."""
    return r.verified is not False and r.steady_mean_mb is not None and r.excluded is None


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
    late = theil_sen(t[n // 2 :] - t[0], y[n // 2 :])[0]
    if early <= 0 or early < RULES["warmup_steepness"] * max(late, 0.0):
        return 0
    late_level = float(np.median(y[n // 2 :]))
    reached = np.nonzero(y >= RULES["warmup_fraction"] * late_level)[0]
    first = int(reached[0]) if len(reached) else 0
    return min(first, int(n * RULES["warmup_max_share"]))


def drops_between_samples(y: np.ndarray, level: float) -> tuple[int, float]:
    """(count, largest MB) of falls from one sample to the next of at least max(release_min_mb,
    release_min_share × level): the report's "release events", how often the process gave memory
    back. Not stats.release_events, which the status words use: that one measures a fall from the
    running peak against the series' own noise, so a sawtooth whose teeth are its whole variation
    has none there, while here each tooth is one."""
    drops = -np.diff(y)
    threshold = max(RULES["release_min_mb"], RULES["release_min_share"] * level)
    events = drops[drops >= threshold]
    return int(len(events)), float(events.max()) if len(events) else 0.0


def word_without_samples(r: ReplicaStats) -> str:
    """The word of a replica with no steady sample: stats.classify words every series that has one."""
    return "Unverified" if r.verified is False else "Too short"


def _view(s: Series, start: float, end: float) -> Series:
    m = (s.t >= start) & (s.t <= end)
    return Series(
        s.replica_id,
        s.name,
        s.group,
        s.verified,
        s.t[m],
        s.mb[m],
        s.phase[m],
        s.live_mb[m],
        s.ops[m],
        s.cpu_s[m],
        s.lazyfree_mb[m],
        s.segments,
        s.exit_code,
        s.ended_at,
        s.end_kind,
    )


@dataclass(frozen=True)
class SteadyGrowth:
    """A replica's steady window and the growth of its own series, kept from replica_stats so a
    group's pooled interval (stats.pooled) re-decides the word without computing growth again, nor
    what stats.classify found in the series alone (`call`: the first pass's, its release events and
    step fit; None when it did not run)."""

    t: np.ndarray
    y: np.ndarray
    growth: stats.Growth | None
    call: stats.StatusCall | None = None
    regrowth: regrowth.Regrowth | None = None  # the process's regrowth, added back in y (analysis/regrowth.py)

    def step_evidence(self) -> stats.StepEvidence:
        """The step fit classify ran on this window, or (its word settled before it: Bloating, Too
        short) fitted now, for the group route (stats.ratchet_group)."""
        if self.call is not None and self.call.ratchet is not None:
            return self.call.ratchet
        return stats.step_evidence(self.t, self.y)


def replica_stats(
    s: Series, idle_configured: bool = False, span: Segment | None = None, pool: stats.GrowthPool | None = None
) -> ReplicaStats:
    """Statistics of the replica's clean span (none: the replica ends off its group's allocator),
    or of `span` (the process the comparison measures when the last one restarted inside the
    window: a partly regrown process is not Bloating). Samples with no recorded phase count as
    load; idle release is measured only when the run configured an idle phase (no phase is invented).
    `pool`: the group's replicas' spread of changes (stats.growth_pool), which may narrow the
    growth interval (stats.pooled)."""
    r, steady = replica_stats_steady(s, idle_configured, span)
    return repooled(r, steady, pool)


def repooled(r: ReplicaStats, steady: SteadyGrowth | None, pool: stats.GrowthPool | None) -> ReplicaStats:
    """r with its growth interval set by its group's pool, or with no pool its own interval's slow
    part widened (stats.pooled), and its word decided again on that interval; r itself when the
    interval is unchanged."""
    if steady is None:
        return r
    g = stats.pooled(steady.growth, pool, key=r.name)
    if g is steady.growth:
        return r
    out = replace(r)
    _set_growth_and_status(out, steady.t, steady.y, g, steady.call)
    own = steady.growth
    # pooled returns its input itself unless both have a finite interval
    assert g is not None and g.change_lo is not None and g.change_hi is not None
    assert own is not None and own.change_lo is not None and own.change_hi is not None
    if g.change_hi - g.change_lo > own.change_hi - own.change_lo and out.status not in GROWTH_WORDS:
        # the word an operator reads beside a wide interval: why it is wide, and what it cannot tell
        # (a Flat word's reason has stated the change already: stats.classify)
        change = "" if out.status == "Flat" else f"{stats.change_phrase(g)}, "
        out.status_reason = "; ".join(
            x
            for x in (
                out.status_reason,
                (
                    f"{change}the interval {g.pooled}: a change of this size over this window cannot be told from that wander"
                ),
            )
            if x
        )
    return out


def _set_growth_and_status(
    r: ReplicaStats, st: np.ndarray, sy: np.ndarray, g: stats.Growth | None, earlier: stats.StatusCall | None = None
) -> stats.StatusCall | None:
    """Sets r's growth fields and word; returns stats.classify's call (None: it did not run)."""
    if g is not None:
        r.change_mb, r.change_lo, r.change_hi, r.change_share = g.change_mb, g.change_lo, g.change_hi, g.change_share
        r.rate_supported = g.rate_mb_h is not None
        r.slope_mb_h, r.slope_lo, r.slope_hi = g.rate_mb_h, g.rate_lo, g.rate_hi  # only where supported
    if g is not None and g.change_lo is None and len(sy) >= 3:
        r.slope_lo_ts = theil_sen((st - st[0]) / 3600, sy)[1]
    call = stats.classify(st, sy, verified=r.verified, growth=g, earlier=earlier) if len(sy) else None
    r.status, r.status_reason = (call.word, call.reason) if call else (word_without_samples(r), "")
    r.growth_shape = call.shape if call else None
    return call


def replica_stats_steady(
    s: Series, idle_configured: bool = False, span: Segment | None = None
) -> tuple[ReplicaStats, SteadyGrowth | None]:
    """replica_stats on the replica's own series, with what repooled() needs (None: no steady window)."""
    clean = span or s.clean
    r = ReplicaStats(s.name, s.group, s.verified, 0)
    if clean is None or not len(s.t):
        r.status = word_without_samples(r)
        return r, None
    s = _view(s, clean.start, clean.end)
    ok = ~np.isnan(s.mb)
    load = np.array([p in ("warmup", "load", None) for p in s.phase]) & ok
    idle = np.array([p == "idle" for p in s.phase]) & ok if idle_configured else np.zeros(len(s.t), bool)
    lt, ly = s.t[load], s.mb[load]
    reg = None
    if np.any(s.phase == "warmup"):
        steady = np.array([p != "warmup" for p in s.phase[load]])
        start = int(np.argmax(steady)) if steady.any() else len(ly)
    else:
        # a process that (re)started regrows to its level: recognised by its shape, its steep part left
        # out and the rest modelled (analysis/regrowth.py), so start-up is not read as growth
        reg = regrowth.fit(lt, ly, clean.start) if clean.new_process else None
        start = int(np.searchsorted(lt, reg.steady_from, side="left")) if reg else detect_warmup(lt, ly)
    st, sy = lt[start:], regrowth.adjusted(lt[start:], ly[start:], reg)
    if reg is not None:
        r.regrowth_share, r.regrowth_tau_h = reg.deficit_share, reg.tau_s / 3600
    r.n_samples = len(sy)
    r.total_samples = int(ok.sum())
    r.window_start, r.window_end = float(s.t[0]), float(s.t[-1])
    r.peak_mb = float(np.nanmax(s.mb))
    r.final_mb = float(s.mb[ok][-1])
    if len(sy):
        r.warmup_end_s = float(st[0] - s.t[0])
        r.steady_mb = float(np.median(sy))
        r.steady_mean_mb = float(np.mean(sy))
        q1, q3 = np.percentile(sy, [25, 75])
        r.iqr_share = float((q3 - q1) / r.steady_mb) if r.steady_mb > 0 else None
        r.window_h = float((st[-1] - st[0]) / 3600)
        r.steady_start, r.steady_end = float(st[0]), float(st[-1])
        lf = s.lazyfree_mb[load][start:]
        if np.any(~np.isnan(lf)) and r.steady_mb > 0:
            r.lazyfree_share = float(np.nanmedian(lf / sy))
            r.footprint_mb = float(np.nanmean(sy - lf))  # the level's own estimator (a mean): footprint ≤ level
    g = stats.growth(st, sy, level=r.steady_mb) if len(sy) >= 3 and r.window_h > 0 else None
    r.release_events, r.largest_release_mb = drops_between_samples(sy, r.steady_mb or 0.0)  # steady window only
    if idle.any() and len(ly):
        # Idle release: the share of the load's level (its steady mean, the level every output
        # shows) no longer held once idle (median of the idle phase's last 3 samples). Measured
        # from the level, not from the load's last samples: a program that gives memory back as
        # its work winds down, before the idle phase starts (a bundler between builds), released
        # it as much as one that does so after.
        r.end_of_load_mb = float(np.median(ly[-3:]))
        iy, it = s.mb[idle], s.t[idle]
        r.idle_final_mb = float(np.median(iy[-3:]))
        level = r.steady_mean_mb
        if level is not None and level > 0:
            released = level - r.idle_final_mb
            r.idle_released_share = float(max(0.0, released) / level)
            if released > 0:
                half = np.nonzero(iy <= level - released / 2)[0]
                r.idle_half_release_s = float(it[half[0]] - it[0]) if len(half) else None
    live = s.live_mb[load][start:]
    good = ~np.isnan(live)
    if good.sum() >= 3:
        r.frag_overhead_mb = float(np.median(sy[good] - live[good]))
        pos = live[good] > 0
        r.frag_ratio = float(np.median(sy[good][pos] / live[good][pos])) if pos.any() else None
    ops, ot, cpu = s.ops[load], s.t[load], s.cpu_s[load]
    good = ~np.isnan(ops)
    if good.sum() >= 2:
        d_ops, d_t = ops[good][-1] - ops[good][0], ot[good][-1] - ot[good][0]
        if d_t > 0 and d_ops > 0:
            r.ops_per_s = float(d_ops / d_t)
            d_cpu = cpu[good][-1] - cpu[good][0]
            r.cpu_us_per_op = float(d_cpu / d_ops * 1e6) if not math.isnan(d_cpu) else None
    call = _set_growth_and_status(r, st, sy, g)
    return r, SteadyGrowth(st, sy, g, call, reg)
