"""Growth over a steady window, with an interval that survives autocorrelation.

Point estimate: Theil–Sen slope (median of pairwise slopes; robust to spikes and steps) × window.
Interval: non-overlapping batch means. The residuals' lag-1 autocorrelation (bias-corrected for
the short, detrended series) gives an AR(1) model; batches are made just long enough that
neighbouring batch means correlate ≤ RULES["growth_batch_corr"] under it; the slope's standard
error comes from the trend through the batch means (inflated by the remaining neighbour
correlation), with a t reference on (batches − 2) degrees of freedom. Batch means are what a
sceptic would compute by hand ("hour 1 average, hour 2 average, ..."), need no resampling, and
degrade honestly: a series whose autocorrelation time is a large part of the window yields too
few batches, and then no interval (never significant). Calibration: benchmarks/calibration.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ..timefmt import span
from .rules import RULES


@dataclass(frozen=True)
class Growth:
    window_s: float            # length of the window analysed
    n: int                     # samples in it
    level_mb: float            # median level (the denominator of change_share)
    change_mb: float           # Theil–Sen slope × window
    change_lo: float | None    # 95% interval of the change (None: too few independent batches)
    change_hi: float | None
    change_share: float        # change_mb / level_mb
    rate_mb_h: float | None    # only where the window supports a rate (RULES rate_min_*)
    rate_lo: float | None
    rate_hi: float | None
    significant: bool          # the interval excludes 0
    blocks: int                # independent batches the interval rests on
    tau_s: float               # estimated autocorrelation time of the residuals, seconds


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


def ar1_batch_corr(rho: float, lengths: np.ndarray) -> np.ndarray:
    """Correlation of neighbouring means of batches of `lengths` samples under AR(1) with rho."""
    L = lengths.astype(float)
    if rho <= 0:
        return np.zeros_like(L)
    cov = rho * (1 - rho ** L) ** 2 / (1 - rho) ** 2
    var = L * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho ** L) / (1 - rho) ** 2
    return cov / var


def growth(t_s: np.ndarray, y: np.ndarray, *, level: float | None = None, seed: int = 0) -> Growth | None:
    """Change of y over the window t_s (seconds, increasing). None when fewer than
    RULES["min_samples"] finite samples or a zero-length window. `seed` is accepted for API
    stability (the interval is analytic, not resampled)."""
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
    # residual autocorrelation with a small-sample correction (a detrended AR(1) estimate is
    # biased low by roughly (2 + 4ρ)/n); clipped below 1 so the batch search stays finite
    coef = np.polyfit(tb, yb, 1)
    r = yb - np.polyval(coef, tb)
    denom = float(np.sum(r * r))
    scale = max(abs(level), float(np.ptp(yb)), 1e-300)
    if denom <= nb * (RULES["growth_exact_rel"] * scale) ** 2:
        # an exact line (or a constant): nothing is noise, the change is known exactly
        lo = hi = change
        significant = abs(change) > RULES["growth_exact_rel"] * scale
        rate = rate_lo = rate_hi = (change / window * 3600 if window >= RULES["rate_min_window_s"] else None)
        return Growth(window, int(len(y)), level, float(change), float(lo), float(hi),
                      float(change / level) if level > 0 else math.inf, rate, rate_lo, rate_hi,
                      bool(significant), int(nb), 0.0)
    rho_hat = float(np.sum(r[1:] * r[:-1]) / denom)
    rho = min(0.995, max(0.0, rho_hat + (2 + 4 * max(rho_hat, 0.0)) / nb))
    tau = (1 + rho) / (1 - rho)
    spacing = window / max(nb - 1, 1)
    lengths = np.arange(1, nb + 1)
    corr = ar1_batch_corr(rho, lengths)
    good = np.nonzero(corr <= RULES["growth_batch_corr"])[0]
    batch = int(lengths[good[0]]) if len(good) else nb
    k = min(int(RULES["growth_max_blocks"]), nb // batch)
    lo = hi = None
    rate = rate_lo = rate_hi = None
    significant = False
    # too few autocorrelation times in the window: no interval (it would undercover badly)
    # (batches of one sample: the samples are farther apart than the autocorrelation time)
    enough = nb / tau >= RULES["growth_min_taus"] or batch == 1
    if k >= RULES["growth_min_blocks"] and enough:
        parts_t = np.array_split(tb, k)
        parts_y = np.array_split(yb, k)
        bt = np.array([p.mean() for p in parts_t])
        by = np.array([p.mean() for p in parts_y])
        corr_k = float(ar1_batch_corr(rho, np.array([nb // k]))[0])
        sxx = float(np.sum((bt - bt.mean()) ** 2))
        b_coef = np.polyfit(bt, by, 1)
        s2 = float(np.sum((by - np.polyval(b_coef, bt)) ** 2)) / (k - 2)
        se = math.sqrt(s2 / sxx * (1 + corr_k) / (1 - corr_k)) if sxx > 0 else math.inf
        half = float(sps.t.ppf(0.975, k - 2)) * se * window
        lo, hi = change - half, change + half
        significant = bool(lo > 0 or hi < 0)
        if window >= RULES["rate_min_window_s"] and k >= RULES["rate_min_blocks"]:
            rate, rate_lo, rate_hi = (v / window * 3600 for v in (change, lo, hi))
    return Growth(window, int(len(y)), level, float(change), lo, hi,
                  float(change / level) if level > 0 else math.inf, rate, rate_lo, rate_hi,
                  significant, int(k), float(tau * spacing))


# ---- across replicas ------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupGrowth:
    """A group's growth over a common window, tested across its replicas (the independent units)."""
    n: int                        # replicas tested
    window_s: float               # the common window
    start_mb: float | None        # geometric mean level at the window's start
    end_mb: float | None          # ... and at its end
    change_mb: float | None       # end_mb − start_mb
    change_share: float | None    # geometric-mean ratio end/start − 1
    share_lo: float | None        # interval of change_share at ci_level (Holm level; excludes 0 ⇔ significant)
    share_hi: float | None
    ci_level: float | None
    p_raw: float | None           # one-sample t on log(end/start), two-sided
    p_adj: float | None           # Holm across the groups tested together
    significant: bool
    word: str | None              # "Bloating" / "Growing" when the group grows beyond the flat threshold, else None
    reason: str = ""


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


def group_growth(start_mb: dict[str, np.ndarray], end_mb: dict[str, np.ndarray], window_s: dict[str, float], *,
                 alpha: float | None = None) -> dict[str, GroupGrowth]:
    """Each group's change over its common window, tested across replicas: d_i = log(end_i / start_i)
    per clean replica (replica effects cancel; replicas are independent, so the within-series
    autocorrelation does not matter), one-sample t, Holm across the groups (a group with fewer than
    2 replicas is untested). The group grows when Holm-significant, the geometric-mean change exceeds
    RULES flat_max_growth_share and growing_min_change_mb; Bloating from bloating_window_share."""
    from .compare import holm, holm_levels
    alpha = RULES["alpha"] if alpha is None else alpha
    tests, out = {}, {}
    for g in start_mb:
        a, b = np.asarray(start_mb[g], dtype=float), np.asarray(end_mb[g], dtype=float)
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        a, b = a[ok], b[ok]
        if not len(a):
            out[g] = GroupGrowth(0, window_s.get(g, 0.0), None, None, None, None, None, None, None, None, None, False,
                                 None, "no replica with a level at both ends of the window")
            continue
        d = np.log(b / a)
        tests[g] = _log_change_test(d)
        gs, ge = float(np.exp(np.log(a).mean())), float(np.exp(np.log(b).mean()))
        out[g] = GroupGrowth(len(a), window_s.get(g, 0.0), gs, ge, ge - gs, float(np.exp(d.mean()) - 1), None, None,
                             None, None, None, False, None,
                             "one replica: untested" if len(a) < 2 else "")
    tested = [g for g in tests if out[g].n >= 2]
    p = [tests[g][3] for g in tested]
    for g, pa, gam in zip(tested, holm(p), holm_levels(p, alpha)):
        m, se, df, pr = tests[g]
        half = float(sps.t.ppf(1 - gam / 2, df)) * se if se > 0 else 0.0
        lo, hi = float(np.exp(m - half) - 1), float(np.exp(m + half) - 1)
        o = out[g]
        sig = bool(pa < alpha)
        grows = sig and m > 0 and o.change_share > RULES["flat_max_growth_share"] \
            and o.change_mb >= RULES["growing_min_change_mb"]
        word = ("Bloating" if o.change_share >= RULES["bloating_window_share"] else "Growing") if grows else None
        reason = (f"{o.n} replicas changed {o.change_share:+.1%} (geometric mean, {o.change_mb:+.1f} MB) over "
                  f"{span(o.window_s)}, {1 - gam:.1%} interval {lo:+.1%} to {hi:+.1%}, Holm p = {pa:.2g}")
        out[g] = GroupGrowth(o.n, o.window_s, o.start_mb, o.end_mb, o.change_mb, o.change_share, lo, hi, 1 - gam,
                             pr, pa, sig, word, reason)
    return out
