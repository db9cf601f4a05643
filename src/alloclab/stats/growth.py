"""Growth over a steady window, with an interval that survives autocorrelation.

Point estimate: Theil–Sen slope (median of pairwise slopes; robust to spikes and steps) × window.
Interval: the variance of the trend slope under an AR(1) model of the residuals, evaluated at a
*conservative* autocorrelation — a 90% upper confidence bound on φ (RULES growth_phi_bound),
found by inverting simulated quantiles of the detrended lag-1 estimate (Andrews 1993's
median-unbiased construction, taken at the 10% quantile instead of the median). A 95% bound
covers 97–100% but costs power on short windows; an 80% bound falls to 93.5% at two
autocorrelation times; the median-unbiased φ itself to ≈ 83%. Why a bound, not a point estimate: in a window only a few autocorrelation times long, the fitted trend absorbs
slow noise, φ is underestimated, and any interval built on the estimate (or gated on it) is given
exactly for the series whose autocorrelation was underestimated — they undercover. Overstating φ
only widens the interval (at φ = 1 it is the random-walk-with-drift interval, still finite), so
every series gets an honest interval, none withheld. Innovation variance from the residuals
quasi-differenced at that φ; normal reference. Noise on two time scales (a fast AR(1) beside a
slow wander) defeats one AR(1) fitted at the finest scale, so the same variance is also taken on
the series averaged into 128, 32 and 16 bins, and the largest kept where the fine model fails
there (see growth()); that protection costs power on every series, and a group's replicas give it
back where they scatter less than it assumes, and widen it where their changes scatter more than
it allows (a wander slower than its coarse scales could see; pooled()); before either, the part of
the variance the coarse scales add is widened, since one series under-states it (pooled(), with or
without a pool). Calibration:
benchmarks/calibration.py.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps
from scipy.signal import lfilter

from ..common.timefmt import span
from .rules import RULES


@dataclass(frozen=True)
class Growth:
    window_s: float  # length of the window analysed
    n: int  # samples in it
    level_mb: float  # median level (the denominator of change_share)
    change_mb: float  # Theil–Sen slope × window
    change_lo: float | None  # 95% interval of the change (None: no finite interval)
    change_hi: float | None
    change_share: float  # change_mb / level_mb
    rate_mb_h: float | None  # only where the window supports a rate (RULES rate_min_*)
    rate_lo: float | None
    rate_hi: float | None
    significant: bool  # the interval excludes 0
    blocks: int  # effective independent samples the interval rests on, n·(1−φ)/(1+φ) at the bound
    tau_s: float  # autocorrelation time of the residuals (median-unbiased φ), seconds
    se_fine: float | None = None  # SE of change_mb from the finest scale's AR(1) bound alone (before the coarse scales)
    pooled: str = ""  # how pooled() set the interval (the group's replicas, or the slow part widened), "" if it did not


def change_phrase(g: Growth) -> str:
    """A growth's change as a replica's reason states it: its share of the level and its interval."""
    interval = "" if g.change_lo is None else f" (95% interval {g.change_lo:+.1f} to {g.change_hi:+.1f} MB)"
    return f"changed {g.change_share:+.1%} of the level{interval}"


def growth_bar_share(window_s: float) -> float:
    """The smallest change, as a share of the level, that counts as growth over a window this long:
    flat_max_growth_share (5%), or over a window of at least growing_rate_min_window_s (a day) the
    rate growing_min_rate_share_day (2%) a day times the window where that is lower. One bar for a
    replica (status.classify) and a group (group_growth): a leak is judged by its rate, so +3%/day
    over a day is not "Flat" because 3% is under 5%, while a long window keeps the 5% bar."""
    bar = RULES["flat_max_growth_share"]
    if window_s >= RULES["growing_rate_min_window_s"]:
        bar = min(bar, RULES["growing_min_rate_share_day"] * window_s / 86400.0)
    return float(bar)


def rate_phrase(share: float, lo: float | None, hi: float | None, window_s: float, level: float = 0.95) -> str:
    """A change over a window as a rate a day with its interval at `level` ("+3.1%/day, 95% interval
    +1.0 to +5.2%/day"; shares of the level), or "" under rate_min_window_s (no rate there)."""
    if window_s < RULES["rate_min_window_s"] or window_s <= 0:
        return ""
    days = window_s / 86400.0
    interval = "" if lo is None or hi is None else f", {level:.1%} interval {lo / days:+.1%} to {hi / days:+.1%}/day"
    return f"{share / days:+.1%}/day{interval}"


def theil_sen_slope(t: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(t), 1)
    dt = t[j] - t[i]
    ok = dt > 0
    return float(np.median((y[j] - y[i])[ok] / dt[ok])) if ok.any() else 0.0


def bin_series(t: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Means over max_points equal time bins (empty bins dropped); short series unchanged."""
    if len(t) <= max_points:
        return t, y
    span = t[-1] - t[0]
    idx = np.minimum(((t - t[0]) / span * max_points).astype(int), max_points - 1)
    counts = np.bincount(idx, minlength=max_points)
    ok = counts > 0
    tb = np.bincount(idx, weights=t, minlength=max_points)[ok] / counts[ok]
    yb = np.bincount(idx, weights=y, minlength=max_points)[ok] / counts[ok]
    return tb, yb


def detrended_lag1(y: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of the residuals from a straight line on the index (last axis); 0
    where there are none (a constant or a straight line: nothing wanders, and 0/0 is no φ)."""
    n = y.shape[-1]
    i = np.arange(n) - (n - 1) / 2
    r = y - y.mean(-1, keepdims=True)
    r = r - (r @ i / (i @ i))[..., None] * i
    lagged, total = np.sum(r[..., 1:] * r[..., :-1], -1), np.sum(r * r, -1)
    return np.divide(lagged, total, out=np.zeros_like(total), where=total > 0)


# φ values tabulated (dense towards the unit root, which is included) and series lengths
PHI_GRID = np.concatenate([np.linspace(-0.6, 0.9, 31)[:-1], 1 - np.geomspace(0.1, 1e-3, 25), [1.0]])
N_GRID = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def _table_file(n: int, q: float, reps: int) -> Path:
    """Where a simulated table is kept between processes (the cache directory, common/settings.py)."""
    import hashlib

    from ..common.settings import cache_root

    key = hashlib.sha256(f"lag1-v1 {n} {q!r} {reps} {PHI_GRID.tobytes().hex()}".encode()).hexdigest()[:20]
    return cache_root() / "stats" / f"lag1-{key}.npy"


@functools.cache
def lag1_quantiles(n: int, q: float, reps: int = 1000) -> np.ndarray:
    """Quantile q of the detrended lag-1 estimate of a length-n Gaussian AR(1) at each PHI_GRID φ
    (φ = 1: a random walk). Simulated with a fixed seed and common random numbers across φ, so
    the table is deterministic and monotone in φ (≈ 0.1–2 s per n); kept in the cache directory,
    so a report does not pay the simulation again (5–10 s of CPU on a busy machine)."""
    path = _table_file(n, q, reps)
    try:
        table = np.load(path)
        if table.shape == PHI_GRID.shape and np.all(np.isfinite(table)):
            return table
    except (OSError, ValueError):
        pass
    table = _simulate_lag1_quantiles(n, q, reps)
    try:
        import os

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, table)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: simulate each time
    return table


def _simulate_lag1_quantiles(n: int, q: float, reps: int) -> np.ndarray:
    e = np.random.default_rng([20261122, n]).normal(size=(reps, n))
    out = np.empty(len(PHI_GRID))
    for k, phi in enumerate(PHI_GRID):
        x = e.copy()
        if phi < 1:
            x[:, 0] /= math.sqrt(1 - phi * phi)
        out[k] = np.quantile(detrended_lag1(lfilter([1.0], [1.0, -phi], x, axis=1)), q)
    return np.maximum.accumulate(out)


def phi_for_lag1(rho_hat: float, n: int, q: float) -> float:
    """The φ at which rho_hat is the q-quantile of the detrended lag-1 estimate (q = 0.5: the
    median-unbiased φ; q = 0.1: a 90% upper confidence bound), interpolated in log n."""
    n = min(max(n, N_GRID[0]), N_GRID[-1])
    j = int(np.searchsorted(N_GRID, n))
    if N_GRID[j] == n:
        pairs = [(n, 1.0)]
    else:
        a, b = N_GRID[j - 1], N_GRID[j]
        w = math.log(n / a) / math.log(b / a)
        pairs = [(a, 1 - w), (b, w)]
    phi = 0.0
    for m, w in pairs:
        table = lag1_quantiles(m, q)
        phi += w * (1.0 if rho_hat >= table[-1] else float(np.interp(rho_hat, table, PHI_GRID)))
    return phi


def ar1_slope_var(tb: np.ndarray, phi: float, innov_var: float) -> float:
    """Variance of the least-squares slope on tb under stationary AR(1) noise (on the index) with
    this φ and innovation variance; at φ → 1 the random-walk limit (the weights sum to zero, so
    the constant part of the correlation cancels: computed with expm1 to keep precision)."""
    c = tb - tb.mean()
    c = c / float(c @ c)
    if phi <= 0:
        return innov_var / (1 - phi * phi) * float(c @ c) if phi > -1 else math.inf
    lags = np.abs(np.subtract.outer(np.arange(len(tb)), np.arange(len(tb))))
    if phi >= 1 - 1e-9:  # random walk: Var = −σ²/2 · c'|i−j|c
        return innov_var * -0.5 * float(c @ lags @ c)
    q = float(c @ np.expm1(lags * math.log(phi)) @ c)
    return innov_var / (1 - phi * phi) * q


def bin_scales(nb: int) -> list[int]:
    """Numbers of bins the interval is evaluated at: the series' own, then 1/4, 1/16 and 1/32 of
    RULES growth_max_points (128, 32, 16), while they hold ≥ RULES growth_min_scale_points."""
    out = [nb]
    for div in (4, 16, 32):
        k = int(RULES["growth_max_points"]) // div
        if RULES["growth_min_scale_points"] <= k < nb:
            out.append(k)
    return out


def ar1_bound_var(tb: np.ndarray, yb: np.ndarray, bound: float | None = None) -> tuple[float, float, float]:
    """(variance of the least-squares slope at the 90% upper bound on φ, that bound, the
    median-unbiased φ) for the series (tb, yb) under AR(1) noise on its index."""
    nb = len(tb)
    coef = np.polyfit(tb, yb, 1)
    r = yb - np.polyval(coef, tb)
    denom = float(np.sum(r * r))
    if denom <= 0:
        return 0.0, 0.0, 0.0
    rho_hat = float(np.sum(r[1:] * r[:-1]) / denom)
    phi_mid = max(0.0, phi_for_lag1(rho_hat, nb, 0.5))
    phi_hi = max(0.0, phi_for_lag1(rho_hat, nb, 1 - (RULES["growth_phi_bound"] if bound is None else bound)))
    # innovations at the bound: the residuals quasi-differenced with it (3 parameters used up)
    e = r[1:] - phi_hi * r[:-1]
    innov_var = float(np.sum(e * e)) / max(nb - 3, 1)
    return ar1_slope_var(tb, phi_hi, innov_var), phi_hi, phi_mid


def var_white(tb: np.ndarray, r: np.ndarray) -> float:
    """Variance of the least-squares slope were the residuals r independent."""
    c = tb - tb.mean()
    return float(np.sum(r * r)) / max(len(tb) - 2, 1) / float(c @ c)


def growth(t_s: np.ndarray, y: np.ndarray, *, level: float | None = None, seed: int = 0) -> Growth | None:
    """Change of y over the window t_s (seconds, increasing). None when fewer than
    RULES["min_samples"] finite samples or a zero-length window. `seed` is accepted for API
    stability (the interval is analytic; the φ tables use their own fixed seed)."""
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(t_s) & np.isfinite(y)
    t_s, y = t_s[ok], y[ok]
    if len(y) < RULES["min_samples"] or t_s[-1] <= t_s[0]:
        return None
    t = t_s - t_s[0]
    window = float(t[-1])
    level = float(np.median(y)) if level is None else float(level)
    tb, yb = bin_series(t, y, int(RULES["growth_max_points"]))
    nb = len(tb)
    slope = theil_sen_slope(tb, yb)
    change = slope * window
    coef = np.polyfit(tb, yb, 1)
    r = yb - np.polyval(coef, tb)
    denom = float(np.sum(r * r))
    scale = max(abs(level), float(np.ptp(yb)), 1e-300)
    rate_ok = window >= RULES["rate_min_window_s"]
    if denom <= nb * (RULES["growth_exact_rel"] * scale) ** 2:
        # an exact line (or a constant): nothing is noise, the change is known exactly
        lo: float | None
        hi: float | None
        lo = hi = change
        significant = abs(change) > RULES["growth_exact_rel"] * scale
        rate: float | None
        rate = rate_lo = rate_hi = change / window * 3600 if rate_ok else None
        return Growth(
            window,
            int(len(y)),
            level,
            float(change),
            float(lo),
            float(hi),
            float(change / level) if level > 0 else math.inf,
            rate,
            rate_lo,
            rate_hi,
            bool(significant),
            int(nb),
            0.0,
        )
    # the AR(1)-bound variance at several time scales (the series averaged into fewer, longer
    # bins), the largest kept: noise on two scales (a fast wander beside a slow one) shows its
    # slow part only where the fast one has averaged out, and one AR(1) fitted at the finest
    # scale stands for the fast part alone (coverage 79% under 2% fast + 3% slow wander)
    var, phi_hi, phi_mid = ar1_bound_var(tb, yb)
    var_fine = var
    spacing = window / max(nb - 1, 1)
    for points in bin_scales(nb)[1:]:
        tk, yk = bin_series(tb, yb, points)
        # the fine AR(1) fails at this scale when the median-unbiased φ here gives more than
        # RULES growth_coarse_trigger × its variance: this scale's own bound then stands for the
        # slow part (trigger 1: coverage 87% under two scales; 0.25: 94%, power 94% -> 64%)
        if ar1_bound_var(tk, yk, 0.5)[0] > RULES["growth_coarse_trigger"] * var:
            v, ph, _ = ar1_bound_var(tk, yk, RULES["growth_phi_bound_coarse"])
            if v > var:
                var, _phi_hi = v, ph
    tau = (1 + phi_mid) / max(1 - phi_mid, 1e-9)
    lo = hi = rate = rate_lo = rate_hi = None
    significant = False
    blocks = int(min(nb, nb * var_white(tb, r) / var)) if var > 0 else nb
    if math.isfinite(var) and var >= 0:
        half = float(sps.norm.ppf(0.5 + RULES["growth_level"] / 2)) * math.sqrt(var) * window
        lo, hi = change - half, change + half
        significant = bool(lo > 0 or hi < 0)
        if rate_ok and blocks >= RULES["rate_min_blocks"]:
            rate, rate_lo, rate_hi = (v / window * 3600 for v in (change, lo, hi))
    return Growth(
        window,
        int(len(y)),
        level,
        float(change),
        lo,
        hi,
        float(change / level) if level > 0 else math.inf,
        rate,
        rate_lo,
        rate_hi,
        significant,
        blocks,
        float(tau * spacing),
        se_fine=math.sqrt(var_fine) * window if math.isfinite(var_fine) and var_fine >= 0 else None,
    )


# ---- one replica's interval, set by its group's replicas ------------------------------------------


@dataclass(frozen=True)
class GrowthPool:
    """How far a group's replicas' changes scatter over windows of about the same length: a direct,
    model-free measurement of the change estimate's sampling spread at every time scale the window
    holds (a slow wander that one series cannot tell from a trend shows as spread across replicas)."""

    share_sd: float  # SD of the replicas' change shares (ddof 1)
    n: int  # replicas it rests on (df = n − 1)
    window_s: float  # their median window
    shares: tuple[float, ...] = ()  # the change shares themselves (each replica's peers: others_sd)
    keys: tuple[Hashable, ...] = ()  # whose each share is (growth_pool's keys)

    def others_sd(self, key: Hashable) -> tuple[float, int] | None:
        """(SD, count) of the change shares of the members other than replica `key` (the replica
        asking: the pool was built from these very figures), all of them when it is not a member
        (an excluded replica, or one outside the pool's windows); None below 2. By key, not by
        share: a non-member whose share equals a member's would leave that member out."""
        rest = [c for c, k in zip(self.shares, self.keys, strict=True) if k != key]
        return (float(np.std(rest, ddof=1)), len(rest)) if len(rest) >= 2 else None


def growth_pool(shares: list[float], windows_s: list[float], keys: list[Hashable] | None = None) -> GrowthPool | None:
    """The pool of a group's replicas (change shares over their windows; `keys`: whose each is,
    their positions unless given); None below RULES growth_pool_min_replicas replicas whose windows
    are within RULES growth_pool_window_ratio of the median window (a change over a longer window
    scatters more)."""
    keys = list(range(len(shares))) if keys is None else keys
    ok = [
        (c, w, key)
        for c, w, key in zip(shares, windows_s, keys, strict=True)
        if c is not None and w and math.isfinite(c) and w > 0
    ]
    if not ok:
        return None
    mid = float(np.median([w for _, w, _ in ok]))
    k = RULES["growth_pool_window_ratio"]
    members = [(c, key) for c, w, key in ok if mid / k <= w <= mid * k]
    c = np.array([c for c, _ in members])
    if len(c) < RULES["growth_pool_min_replicas"]:
        return None
    return GrowthPool(
        float(c.std(ddof=1)), int(len(c)), mid, tuple(float(x) for x in c), tuple(key for _, key in members)
    )


def pooled(
    g: Growth | None,
    pool: GrowthPool | None,
    *,
    key: Hashable,
    widen: float | None = None,
    slow_widen: float | None = None,
) -> Growth | None:
    """g's interval set by its group's spread: narrowed where the group scatters less than g's own
    interval assumes, widened where its peers scatter more; with no pool (fewer than 3 replicas,
    or unlike windows), its own interval with the slow part widened.

    Own interval, slow part widened: where a coarse scale set g's interval, the variance it adds
    to the finest scale's AR(1) bound (the slow component) counts RULES growth_slow_widen² times
    (3: its SD tripled). Why: that part rests on 16–128 bins of a wander the window holds only
    1–5 autocorrelation times of, so one series under-states it exactly where the wander looks
    like a trend — flat two-scale noise at 3 days: 1.9% of lone replicas Growing, and in pooled
    groups most Growing calls were the own interval binding. A calculation on g's own figures
    (se_fine and the half width), not a new model: no information the series lacks is invented,
    so it costs a lone replica power on every design (docs/lab/calibration.md: +10% at 3 days 55% ->
    22%); pooled groups get it back by narrowing (`slow_widen`: the multiplier, 1 gives
    session 9's own interval, as the calibration's comparison does).

    Narrowed: the half width becomes max(z · the finest scale's AR(1)-bound SE, t(n−1) · pool SD ×
    level) where that is below g's own (coarse-scale) half width. Why: the coarse scales protect
    one series against a slow wander it cannot tell from a trend, and cost power on every series
    (54% for +10% at 3 days against 94%). Replicas of one group run the same program on the same
    kind of host, so their changes' spread measures the estimate's sampling SD at every time scale,
    with n − 1 degrees of freedom. Assumptions: the replicas' noise is independent with a common
    share-of-level scale, and their true changes are alike (unlike changes only widen the pool:
    conservative). A component every replica shares (a daily cycle) is not in the spread: the
    finest scale's AR(1) bound is the floor.

    Widened: the half width is at least RULES growth_pool_widen (2.5) × the SD of the *other*
    replicas' change shares × level. Why: where one series' own interval misses a slow wander (its
    coarse scales did not see it), its peers' changes still scatter with it — 10 of the 11 flat
    two-scale replicas called Growing at 3 days had their own interval binding while their
    group's spread was 2–4× wider. The others only (leave-one-out): a lone grower among flat
    replicas is not widened by its own growth, so it keeps its own interval (`key`: g's replica,
    as growth_pool's keys name it, left out of its peers; `widen`: the
    multiplier, RULES growth_pool_widen unless given; 0 narrows only, as the calibration's
    comparison with the earlier rule does). A floor, not an
    interval of its own: 1.96 left 1.1% Growing at 1.5 days; t(n − 2) quantiles (a prediction
    interval on the peers alone: 3.18 at n = 5, 12.7 at n = 3) cost groups of 3 their power
    (+10% at 3 days: 90% -> 38%); 2.5 costs < 1 point (docs/lab/calibration.md)."""
    if g is None or g.change_lo is None or g.se_fine is None or g.level_mb <= 0:
        return g
    z = float(sps.norm.ppf(0.5 + RULES["growth_level"] / 2))
    assert g.change_hi is not None  # set with change_lo
    own = g.change_hi - g.change_mb
    fine = z * g.se_fine
    k = RULES["growth_slow_widen"] if slow_widen is None else slow_widen
    half, how = own, ""
    if own > fine * (1 + 1e-9) and k != 1:  # a coarse scale set it (rounding aside)
        half = math.sqrt(fine * fine + k * k * (own * own - fine * fine))
        how = (
            f"widened: the part a slow wander adds to it counted {k:g}× (one series under-states a wander "
            "its window holds few autocorrelation times of)"
        )
    if pool is None or not (
        pool.window_s / RULES["growth_pool_window_ratio"]
        <= g.window_s
        <= pool.window_s * RULES["growth_pool_window_ratio"]
    ):
        return _with_half(g, half, how) if half != own else g
    tq = float(sps.t.ppf(0.5 + RULES["growth_level"] / 2, pool.n - 1))
    narrow = max(fine, tq * pool.share_sd * g.level_mb)
    if narrow < half:
        half, how = (
            narrow,
            (
                f"narrowed by the spread of {pool.n} replicas' changes over their windows "
                f"(SD {pool.share_sd:.1%} of the level, t with {pool.n - 1} df)"
            ),
        )
    peers = pool.others_sd(key)
    k = RULES["growth_pool_widen"] if widen is None else widen
    if peers is not None and k * peers[0] * g.level_mb > half:
        half, how = (
            k * peers[0] * g.level_mb,
            (
                f"widened to the spread of the other {peers[1]} replicas' changes (SD {peers[0]:.1%} of the level: "
                "a wander slower than this series shows)"
            ),
        )
    return _with_half(g, half, how) if half != own else g


def _with_half(g: Growth, half: float, how: str) -> Growth:
    """g with its interval (and rate interval) half width `half` about its change, and why."""
    from dataclasses import replace

    lo, hi = g.change_mb - half, g.change_mb + half
    scale = 3600 / g.window_s if g.rate_mb_h is not None else None
    return replace(
        g,
        change_lo=lo,
        change_hi=hi,
        significant=bool(lo > 0 or hi < 0),
        rate_lo=lo * scale if scale else None,
        rate_hi=hi * scale if scale else None,
        pooled=how,
    )


# ---- across replicas ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupGrowth:
    """A group's growth over a common window, tested across its replicas (the independent units)."""

    n: int  # replicas tested
    window_s: float  # the common window
    start_mb: float | None  # geometric mean level at the window's start
    end_mb: float | None  # ... and at its end
    change_mb: float | None  # end_mb − start_mb
    change_share: float | None  # geometric-mean ratio end/start − 1
    share_lo: float | None  # interval of change_share at ci_level (Holm level; excludes 0 ⇔ significant)
    share_hi: float | None
    ci_level: float | None
    p_raw: float | None  # one-sample t on log(end/start), two-sided
    p_adj: float | None  # Holm across the groups tested together
    significant: bool
    word: str | None  # "Bloating" / "Growing" when the group grows beyond the growth bar (growth_bar_share), else None
    reason: str = ""


def cycle_columns(t_s: np.ndarray) -> np.ndarray:
    """cos/sin(2πkt/P), k = 1..growth_cycle_harmonics, P = growth_cycle_period_s (a day): the daily
    cycle a fit takes out (n × 2k; t_s in seconds)."""
    w = 2 * math.pi * np.asarray(t_s, dtype=float) / RULES["growth_cycle_period_s"]
    return np.column_stack(
        [f(j * w) for j in range(1, int(RULES["growth_cycle_harmonics"]) + 1) for f in (np.cos, np.sin)]
        or [np.zeros((len(w), 0))]
    )


def trend_edges(
    t_s: np.ndarray, y: np.ndarray, start: float, end: float, edge_s: float
) -> tuple[float, float, str] | None:
    """A replica's level at a span's start and end, free of a cycle shared by every replica.

    Span at least RULES growth_cycle_period_s (a day) long: the trend of a least-squares fit of
    log y on [1, t, cos/sin(2πkt/P), k = 1..growth_cycle_harmonics], evaluated at both ends —
    a daily cycle enters every replica's change with the same sign (the clock is shared, so
    replicas' independence does not protect the group test; 17.5% of flat groups were called
    Growing with ±4% cycles over 1.5 days), the fitted harmonics take it out. Shorter spans:
    medians over the first and last edge_s (a cycle longer than the span cannot be told from a
    trend; the returned basis says which). None: fewer than 2 samples (or a level ≤ 0)."""
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    m = (t_s >= start) & (t_s <= end) & np.isfinite(y) & (y > 0)
    if m.sum() < 2:
        return None
    t, v = t_s[m], y[m]
    period = RULES["growth_cycle_period_s"]
    k = int(RULES["growth_cycle_harmonics"])
    if end - start >= period and len(t) >= 2 + 2 * k + RULES["min_samples"]:
        tb, lb = bin_series(t - start, np.log(v), int(RULES["growth_max_points"]))
        x = np.column_stack([np.ones_like(tb), tb / (end - start), cycle_columns(tb)])
        coef = np.linalg.lstsq(x, lb, rcond=None)[0]
        return float(math.exp(coef[0])), float(math.exp(coef[0] + coef[1])), "trend beside a fitted daily cycle"
    head = v[t <= start + edge_s] if np.any(t <= start + edge_s) else v[:1]
    tail = v[t >= end - edge_s] if np.any(t >= end - edge_s) else v[-1:]
    return float(np.median(head)), float(np.median(tail)), "medians at the span's edges (shorter than a day)"


def _log_change_test(d: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, se, df, p) of a one-sample t on d; zero spread gives the degenerate clear answer."""
    n = len(d)
    m = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < 2:
        return m, math.nan, 0.0, math.nan
    if sd <= 1e-12 * max(abs(m), 1e-300) or sd == 0.0:
        return m, 0.0, float(n - 1), (0.0 if abs(m) > 1e-12 else 1.0)
    se = sd / math.sqrt(n)
    return m, se, float(n - 1), float(2 * sps.t.sf(abs(m / se), n - 1))


def group_growth(
    start_mb: dict[str, np.ndarray],
    end_mb: dict[str, np.ndarray],
    window_s: dict[str, float],
    *,
    alpha: float | None = None,
) -> dict[str, GroupGrowth]:
    """Each group's change over its common window, tested across replicas: d_i = log(end_i / start_i)
    per clean replica (replica effects cancel; replicas are independent, so the within-series
    autocorrelation does not matter), one-sample t, Holm across the groups (a group with fewer than
    2 replicas is untested). The group grows when Holm-significant, the geometric-mean change exceeds
    growth_bar_share (RULES flat_max_growth_share, or the rate a day over a day or more) and growing_min_change_mb; Bloating from bloating_window_share."""
    from .group_tests import holm, holm_levels

    alpha = RULES["alpha"] if alpha is None else alpha
    tests, out = {}, {}
    for g in start_mb:
        a, b = np.asarray(start_mb[g], dtype=float), np.asarray(end_mb[g], dtype=float)
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        a, b = a[ok], b[ok]
        if not len(a):
            out[g] = GroupGrowth(
                0,
                window_s.get(g, 0.0),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                False,
                None,
                "no replica with a level at both ends of the window",
            )
            continue
        d = np.log(b / a)
        tests[g] = _log_change_test(d)
        gs, ge = float(np.exp(np.log(a).mean())), float(np.exp(np.log(b).mean()))
        out[g] = GroupGrowth(
            len(a),
            window_s.get(g, 0.0),
            gs,
            ge,
            ge - gs,
            float(np.exp(d.mean()) - 1),
            None,
            None,
            None,
            None,
            None,
            False,
            None,
            "one replica: untested" if len(a) < 2 else "",
        )
    tested = [g for g in tests if out[g].n >= 2]
    p = [tests[g][3] for g in tested]
    for g, pa, gam in zip(tested, holm(p), holm_levels(p, alpha)):
        m, se, df, pr = tests[g]
        half = float(sps.t.ppf(1 - gam / 2, df)) * se if se > 0 else 0.0
        lo, hi = float(np.exp(m - half) - 1), float(np.exp(m + half) - 1)
        o = out[g]
        assert o.change_share is not None and o.change_mb is not None  # a tested group has its change
        sig = bool(pa < alpha)
        grows = (
            sig
            and m > 0
            and o.change_share > growth_bar_share(o.window_s)
            and o.change_mb >= RULES["growing_min_change_mb"]
        )
        word = ("Bloating" if o.change_share >= RULES["bloating_window_share"] else "Growing") if grows else None
        reason = (
            f"{o.n} replicas changed {o.change_share:+.1%} (geometric mean, {o.change_mb:+.1f} MB) over "
            f"{span(o.window_s)}, {1 - gam:.1%} interval {lo:+.1%} to {hi:+.1%}, Holm p = {pa:.2g}"
        )
        rate = rate_phrase(o.change_share, lo, hi, o.window_s, 1 - gam)
        reason += f"; a rate of {rate}" if rate else ""
        out[g] = GroupGrowth(
            o.n,
            o.window_s,
            o.start_mb,
            o.end_mb,
            o.change_mb,
            o.change_share,
            lo,
            hi,
            1 - gam,
            pr,
            pa,
            sig,
            word,
            reason,
        )
    return out
