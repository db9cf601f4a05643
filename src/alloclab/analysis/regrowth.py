"""A process's regrowth after it (re)started: recognised from the shape of its own series, left out
where it is steep and modelled where it is not, so start-up is not read as growth.

A young process (every relay `fleet apply` moved, a relay restarted by hand or by a crash) starts
below its level and climbs back to it along a saturating curve, level × (1 − D·e^(−u/τ)) at age u.
Over a window of a day or two that climb is still under way (τ up to 12 h): a warm-up that ends
at 90% of the late level (replica.detect_warmup) leaves ~+10% of regrowth inside the window, twice
the Flat bar (issue 49: 26 of 100 flat groups Growing when every relay started with the data).

Each segment that opens with a new process is fitted with
    y / level = a + b·u/U + c·e^(−u/τ) [+ the daily cycle's harmonics over a day or more]
on a grid of τ (RULES regrowth_tau_*), beside the same fit without the exponential. The regrowth
is recognised when c is a deficit of at least RULES regrowth_min_share of the level at the
process start, significantly (t ≤ −RULES regrowth_t, its standard error widened for the
residuals' lag-1 autocorrelation). The linear term b stays in the fit, so a real leak — a
straight climb has no curvature for the exponential to take — is kept: the adjusted series is
y − c·level·e^(−u/τ), which keeps b·u. The steep part (remaining deficit above RULES
regrowth_steady_share) is left out as a warm-up, never more than RULES warmup_max_share of the
segment; what remains of the regrowth after it is added back by the fitted curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..stats.growth import bin_series, cycle_columns
from ..stats.rules import RULES
from .load import Series


@dataclass(frozen=True)
class Regrowth:
    """A fitted regrowth: deficit(t) = deficit_mb · e^(−(t − t0)/τ) below the level the process regrows to."""

    t0: float  # the process's first sample
    tau_s: float
    deficit_share: float  # the deficit at t0, share of the level
    deficit_mb: float
    steady_from: float  # the steep part ends here (Unix s): the warm-up left out
    t_stat: float
    t1: float  # the process's last sample fitted

    def deficit(self, t: np.ndarray) -> np.ndarray:
        """MB below the regrown level at times t (0 before t0)."""
        u = np.maximum(np.asarray(t, dtype=float) - self.t0, 0.0)
        return self.deficit_mb * np.exp(-u / self.tau_s)

    def phrase(self) -> str:
        return (
            f"regrowth after its process started ({self.deficit_share:.0%} below its level, τ ≈ "
            f"{self.tau_s / 3600:.1f} h)"
        )


def fit(t: np.ndarray, y: np.ndarray, t0: float | None = None) -> Regrowth | None:
    """The regrowth of one process's samples (t ascending, y its metric), or None when its series
    does not show one (see the module docstring)."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(y) & (y > 0)
    t, y = t[ok], y[ok]
    if len(t) < RULES["regrowth_min_samples"]:
        return None
    t0 = float(t[0]) if t0 is None else float(t0)
    span = float(t[-1] - t0)
    if span < RULES["regrowth_min_window_s"]:
        return None
    tb, yb = bin_series(t, y, int(RULES["regrowth_max_points"]))
    level = float(np.median(yb[len(yb) // 2 :]))
    if level <= 0:
        return None
    r = yb / level
    u = tb - t0
    cols = [np.ones_like(u), u / span]
    if span >= RULES["growth_cycle_period_s"] and len(u) >= 4 * (2 + 2 * RULES["growth_cycle_harmonics"]):
        cols.append(cycle_columns(tb))
    base = np.column_stack(cols)
    dt = float(np.median(np.diff(tb))) if len(tb) > 1 else 1.0
    lo = max(RULES["regrowth_tau_min_s"], dt)
    hi = min(RULES["regrowth_tau_max_s"], RULES["regrowth_tau_max_share"] * span)
    if hi <= lo:
        return None
    best = None
    for tau in np.geomspace(lo, hi, int(RULES["regrowth_tau_grid"])):
        x = np.column_stack([base, np.exp(-u / tau)])
        coef, *_ = np.linalg.lstsq(x, r, rcond=None)
        res = r - x @ coef
        rss = float(res @ res)
        if best is None or rss < best[0]:
            best = (rss, tau, coef, x, res)
    assert best is not None  # at least one candidate is fitted
    rss, tau, coef, x, res = best
    c, a = float(coef[-1]), float(coef[0])
    if c >= 0 or a <= 0:
        return None
    n, p = x.shape
    if n <= p + 2:
        return None
    rho = float(np.clip(np.sum(res[1:] * res[:-1]) / max(float(res @ res), 1e-300), 0.0, 0.95))
    sigma2 = rss / (n - p) * (1 + rho) / (1 - rho)
    try:
        cov = np.linalg.inv(x.T @ x) * sigma2
    except np.linalg.LinAlgError:
        return None
    se = math.sqrt(max(float(cov[-1, -1]), 1e-300))
    t_stat = c / se
    share = -c / a
    if t_stat > -RULES["regrowth_t"] or share < RULES["regrowth_min_share"]:
        return None
    steep = tau * math.log(-c / RULES["regrowth_steady_share"]) if -c > RULES["regrowth_steady_share"] else 0.0
    steady_from = float(t0 + min(max(steep, 0.0), RULES["warmup_max_share"] * span))
    return Regrowth(t0, float(tau), float(share), float(-c * level), steady_from, float(t_stat), float(t[-1]))


def adjusted(t: np.ndarray, y: np.ndarray, reg: Regrowth | None) -> np.ndarray:
    """y with the fitted regrowth added back (the level the process regrows to); y itself when none."""
    if reg is None:
        return y
    t = np.asarray(t)
    return y + np.where((t >= reg.t0) & (t <= reg.t1), reg.deficit(t), 0.0)


def series_adjusted(s: Series, reg: Regrowth | None) -> Series:
    """The replica's series with its process's fitted regrowth added back (s itself when none)."""
    return s if reg is None else replace(s, mb=adjusted(s.t, s.mb, reg))
