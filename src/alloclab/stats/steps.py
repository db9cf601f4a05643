"""Step detection in one replica's steady window, and its tests of significance: what the status
word "Growing in steps" (stats.status.classify, shape STEPS; retired as "Ratcheting") rests on.

- step_fit / StepFit: a piecewise-constant mean fitted under AR(1) noise by generalised least
  squares on the window averaged into ≤ ratchet_step_points bins, the noise between the steps read
  from the fit's residuals (step_noise), and the sharpest up-step beside a smooth curve.
- step_evidence / StepEvidence: a window's step fit and Ratcheting's verdict on the replica's own
  evidence (ratchet_in_noise: the staircase's shape, _staircase_shape, and a step sharper than a
  smooth climb explains, _sharp_bar), fitted once: classify words the replica with it.
- ratchet_group / GroupRatchet: the group route, each replica's sharpest step beside its own
  levelling curve against simulations of its own null (levelling_null_p: that curve plus the
  noise of its residuals, AR(1) plus white by Whittle's likelihood, whittle_noise), their p's
  combined by the truncated product (truncated_product_p).
- the Monte Carlo p's those simulations give: simulated_p, sequential_p, besag_clifford_p (also
  used by stats.ratchet_shared).
Thresholds in RULES ratchet_*; figures in docs/lab/calibration.md, "Ratcheting".
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from scipy.signal import lfilter

from .growth import bin_series, cycle_columns, detrended_lag1, phi_for_lag1
from .rules import RULES


def ar1(
    rng: np.random.Generator, n_series: int, n: int, phi: float, sd: float = 1.0, df: float | None = None
) -> np.ndarray:
    """Stationary AR(1) noise (the null simulations below; tests/simulated_series.py builds on it) with marginal standard deviation sd; innovations normal, or (`df`)
    Student's t with df > 2 degrees of freedom scaled to unit variance (heavy tails)."""
    e = (
        rng.normal(size=(n_series, n))
        if df is None
        else rng.standard_t(df, size=(n_series, n)) / np.sqrt(df / (df - 2))
    )
    e[:, 0] /= np.sqrt(max(1 - phi**2, 1e-12))
    return np.asarray(lfilter([1.0], [1.0, -phi], e, axis=1)) * sd * np.sqrt(1 - phi**2)


def quasi_difference(m: np.ndarray, phi: float) -> np.ndarray:
    """Rows of m (index = time) prewhitened for AR(1) noise with this φ (Prais–Winsten): least
    squares on the result is generalised least squares under that noise."""
    out = m.copy()
    out[1:] = m[1:] - phi * m[:-1]
    out[0] = m[0] * math.sqrt(max(1 - phi * phi, 1e-6))
    return out


def robust_sd(r: np.ndarray) -> float:
    """The SD read from the median absolute deviation (1.4826 × MAD): steps and spikes barely move it."""
    return 1.4826 * float(np.median(np.abs(r - np.median(r))))


def _step_scan(xt: np.ndarray, base: np.ndarray, phi: float, cand: np.ndarray) -> np.ndarray:
    """t statistics of adding one step at each candidate bin to the prewhitened base design, in
    O(n × base columns): a step at s, prewhitened, is 1 at s and 1 − φ after, so its products with
    any column are that column at s plus (1 − φ) × its sum after s (reverse cumulative sums)."""
    q, _ = np.linalg.qr(base)
    r = xt - q @ (q.T @ xt)
    n = len(xt)

    def against(m: np.ndarray) -> np.ndarray:
        after = np.zeros_like(m)
        after[:-1] = np.cumsum(m[::-1], axis=0)[::-1][1:]
        return m[cand] + (1 - phi) * after[cand]

    num = against(r)  # r is orthogonal to the base already
    qz = against(q)
    den = 1 + (1 - phi) ** 2 * (n - 1 - cand) - np.einsum("ij,ij->i", qz, qz)
    sd = max(robust_sd(r), 1e-12)
    return np.where(den > 1e-9, num / np.sqrt(np.maximum(den, 1e-300)), 0.0) / sd


@dataclass(frozen=True)
class StepFit:
    """A replica's window fitted as steps on a noise model: the steps, their t statistics and the noise."""

    phi: float  # AR(1) φ of the noise between the steps (per bin; step_noise)
    sizes: np.ndarray  # the fitted steps as shares of the level, in time order
    t: np.ndarray  # their t statistics (generalised least squares at φ)
    at: np.ndarray  # their bins
    bins: int  # bins the window was averaged into
    sharp_t: float  # the largest t of one up-step beside a smooth curve (_smooth_basis)
    white: float = 0.0  # the share of the noise's variance that is white, beside that AR(1) (step_noise)


def step_fit(t: np.ndarray, y: np.ndarray, level: float) -> StepFit | None:
    """A piecewise-constant mean under AR(1) noise, fitted on the window averaged into
    ≤ ratchet_step_points equal time bins: steps enter one at a time (the largest |t| first, each
    ≥ 2 bins from the last) while |t| ≥ ratchet_step_t, up to ratchet_max_steps. φ is the
    median-unbiased lag-1 of the residuals of a first fit (at the φ of a straight line's
    residuals, which steps inflate), so the wander between steps is noise, not steps — or, where
    their lag-2 / lag-1 says the noise is a slow wander read with white noise, that wander's φ
    (step_noise). Also the
    sharpest single up-step beside a smooth curve (a cubic) instead of the steps: a smooth climb
    (a leak, a climb that levels off, a cycle's rise, a slow wander) has none beyond the noise, a
    staircase has its tallest step there.
    None with fewer than 12 bins or no positive level."""
    if level <= 0:
        return None
    return step_fit_x(_relative_bins(t, y, level)[1])


def _relative_bins(t: np.ndarray, y: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The window averaged into ≤ ratchet_step_points equal time bins: (their times in seconds from
    the window's start, their means as shares of the level above it)."""
    tb, yb = bin_series(t, y, int(RULES["ratchet_step_points"]))
    return tb - t[0], yb / level - 1


def step_fit_x(x: np.ndarray) -> StepFit | None:
    """step_fit on the binned window x (shares of the level): what a group's null simulations re-run."""
    n = len(x)
    if n < 12:
        return None
    idx = np.arange(n)
    cand = np.arange(2, n - 1)  # a step at the very edge is one odd bin, not a step

    def steps(phi: float, chosen: list[int]) -> np.ndarray:
        # the prewhitened step columns at the chosen candidates: 0 before s, 1 at s, 1 − φ after
        return (1 - phi) * (idx[:, None] > cand[chosen][None, :]) + (idx[:, None] == cand[chosen][None, :])

    def fit(phi: float) -> tuple[list[int], np.ndarray, np.ndarray]:
        xt = quasi_difference(x, phi)
        ones = quasi_difference(np.ones((n, 1)), phi)
        chosen: list[int] = []
        for _ in range(int(RULES["ratchet_max_steps"])):
            tz = _step_scan(xt, np.column_stack([ones, steps(phi, chosen)]), phi, cand)
            for c in chosen:
                tz[max(c - 1, 0) : c + 2] = 0.0
            best = int(np.argmax(np.abs(tz)))
            if abs(tz[best]) < RULES["ratchet_step_t"]:
                break
            chosen.append(best)
        chosen.sort()
        design = np.column_stack([ones, steps(phi, chosen)])
        beta, *_ = np.linalg.lstsq(design, xt, rcond=None)
        sd = max(robust_sd(xt - design @ beta), 1e-12)
        se = np.sqrt(np.diag(np.linalg.pinv(design.T @ design))) * sd
        return chosen, beta[1:], beta[1:] / se[1:]

    phi = max(0.0, phi_for_lag1(float(detrended_lag1(x)), n, 0.5))
    chosen, _, _ = fit(phi)
    levels = np.column_stack([np.ones(n)] + [(idx >= cand[c]).astype(float) for c in chosen])
    coef, *_ = np.linalg.lstsq(levels, x, rcond=None)
    phi, white = step_noise(x - levels @ coef)
    chosen, sizes, tt = fit(phi)
    return StepFit(
        phi,
        sizes,
        tt,
        cand[chosen] if chosen else np.zeros(0, dtype=int),
        n,
        _sharpest_beside(x, phi, _smooth_basis(n)),
        white,
    )


def _lag_corr(r: np.ndarray, k: int) -> float:
    """The lag-k autocorrelation of residuals r about zero (0 when they are all zero)."""
    denom = float(r @ r)
    return float(np.sum(r[k:] * r[:-k]) / denom) if denom > 0 else 0.0


def residual_phi(r: np.ndarray) -> float:
    """AR(1) φ of a fit's residuals r (≥ 0): median-unbiased from their lag-1 (0 when there are none)."""
    return max(0.0, phi_for_lag1(_lag_corr(r, 1), len(r), 0.5))


def step_noise(r: np.ndarray) -> tuple[float, float]:
    """The noise between a step fit's steps, from its residuals r: (AR(1) φ, the share of the
    variance that is white). AR(1) alone, φ from their lag-1 (residual_phi); or, where their
    lag-2 / lag-1 reads a φ ≥ ratchet_white_gap higher, a slow AR(1) wander at that φ plus white
    measurement noise (RSS sampled with jitter): lag-1 c·φ and lag-2 c·φ², c the wander's share.
    Read as AR(1), such noise gave φ ~0.45 where the wander's is 0.995 (the steps take part of the
    wander, the white part lowers lag-1), and prewhitened at that φ the wander's runs were sharp
    steps: own route 1.0–3.2% Ratcheting on AR(1) φ 0.995 plus 0.5% white, 0–2.0% at φ 0.98
    (--part staircases). At the wander's φ the white part is over-differenced, which only makes a
    step's t smaller. For AR(1) alone both read φ (the ratio is the noisier: at φ 0.5 within 0.14
    in 90% of +8% staircases), so the gap keeps such noise AR(1); and lag-2 ≥
    ratchet_white_min_lag2_se standard errors (1/√n) keeps white noise, and a missed step's remains
    in it, AR(1) (+8% staircases in 1% white noise, 1.5 d: group route 90% with the floor, 67%
    without). The step fit's reading (what its steps are prewhitened for); the group route's null
    reads its model by likelihood instead (whittle_noise)."""
    phi = residual_phi(r)
    if len(r) < 4:
        return phi, 0.0
    lag1, lag2 = _lag_corr(r, 1), _lag_corr(r, 2)  # both 0 for all-zero residuals: AR(1)
    # a wander shows at lag 2 beyond chance; in white noise lag-2 / lag-1 is noise, and the remains of
    # a step the fit missed read as a wander, which prewhitened at φ ≈ 1 costs staircases in
    # near-white noise their steps (+8% in 1% white, 1.5 d: 90.8% read as AR(1), 80.8% with this
    # floor; on an exploration's draw 88.6% → 46% without it)
    if lag1 <= 0 or lag2 <= 0 or lag2 < RULES["ratchet_white_min_lag2_se"] / math.sqrt(len(r)):
        return phi, 0.0
    persistent = min(phi_for_lag1(min(lag2 / lag1, 1.0), len(r), 0.5), 0.999)
    if persistent < phi + RULES["ratchet_white_gap"]:
        return phi, 0.0
    return persistent, 1.0 - phi / persistent


# the Whittle fit's starting grid (whittle_noise), every (φ, white share) pair: φ dense towards 1,
# where a slow wander's lies
_WHITTLE_GRID = np.stack(
    [g.ravel() for g in np.meshgrid(1.0 - np.logspace(0.0, -3.0, 61)[:-1], np.linspace(0.0, 1.0, 21), indexing="ij")],
    axis=1,
)


def whittle_noise(r: np.ndarray, dropped: int = 0) -> tuple[float, float, float]:
    """The noise of a curve's residuals r as AR(1) plus white noise (ARMA(1,1)): (φ, the share of
    the variance that is white, the marginal SD), by Whittle's likelihood on their periodogram.
    Unlike step_noise's lag-1 and lag-2 it reads every lag, so a white part and a wander are told
    apart: on AR(1) 1% φ 0.9 + 2% white over 3 days, the replicas with the staircase's shape got
    p ≤ 0.01 in 4.2% of series with step_noise's model (lag-2 / lag-1 read φ ≈ 0.999 in them),
    1.2% with this (benchmarks/null_models.py, 400 series; 0.8% with the noise as generated).
    Every Fourier frequency is read, the lowest too, which the curve's fit has taken part of: the
    φ read is then lower than the noise's, as the lag readings' were. Dropping them (`dropped`, as
    many as the curve's columns: that benchmark only) reads the noise's own φ, but on 217 bins the
    rest of the spectrum barely tells φ from the SD (AR(1) 2% φ 0.9 beside a +10% climb: φ 0.956,
    SD 2.9%), and a null that wanders more gives smaller p's (its down-steps break the staircase's
    shape, which a simulation needs to count): replica p ≤ 0.05 on 9.0% of climbing series, 5.0%
    reading every frequency. A grid, then L-BFGS-B from its best point. Fewer than 8 frequencies
    to read (under 18 residuals): AR(1) at their median-unbiased lag-1 φ and their SD."""
    if not np.all(np.isfinite(r)):
        raise ValueError("whittle_noise: residuals must be finite")
    n = len(r)
    power = np.abs(np.fft.rfft(r)) ** 2 / n
    cos = np.cos(2 * np.pi * np.arange(len(power)) / n)
    keep = slice(
        1 + dropped, len(power) - (1 if n % 2 == 0 else 0)
    )  # the mean is the curve's; the Nyquist term a half-weight one
    power, cos = power[keep], cos[keep]
    if len(power) < 8 or not np.any(power > 0):
        return residual_phi(r), 0.0, float(np.std(r))

    def shape(phi: Any, white: Any) -> Any:  # floats or arrays of them
        # the spectral density's shape at unit marginal variance: AR(1) part and white part
        return (1 - white) * (1 - phi * phi) / (1 - 2 * phi * cos + phi * phi) + white

    def objective(g: np.ndarray) -> np.ndarray:
        # Whittle's −2 log-likelihood with the scale profiled out, per shape along the last axis
        return len(power) * np.log(np.mean(power / g, axis=-1)) + np.log(g).sum(axis=-1)

    grid = objective(shape(_WHITTLE_GRID[:, :1], _WHITTLE_GRID[:, 1:]))
    start = _WHITTLE_GRID[int(np.argmin(grid))]
    best = minimize(
        lambda params: float(objective(shape(*params))), start, method="L-BFGS-B", bounds=[(0.0, 0.999), (0.0, 1.0)]
    )
    phi, white = (float(v) for v in (best.x if best.fun <= grid.min() else start))
    return phi, white, math.sqrt(float(np.mean(power / shape(phi, white))))


def _curve_phi(r: np.ndarray, basis: np.ndarray) -> float:
    """AR(1) φ of the residuals r of a least-squares fit on `basis` (n × k), unbiased for that fit:
    the φ whose expected lag-1 of such residuals (ratio of expectations, exact for the projection)
    equals theirs. residual_phi's map is a line's; a cubic takes more of the slow wander with it
    (AR(1) φ 0.9 on 217 bins: median 0.876 from residual_phi, 0.894 from this; a null simulated at
    the lower φ wanders less than the data and calls them steps)."""
    n = len(r)
    denom = float(r @ r)
    if n < 3 or denom <= 0:
        return 0.0
    observed = float(np.sum(r[1:] * r[:-1]) / denom)
    q, _ = np.linalg.qr(basis)

    def expected(phi: float) -> float:
        # Σ q (Σ the AR(1) correlation, φ^|i−j|) by a forward and a backward filter, O(n k)
        sq = lfilter([1.0], [1.0, -phi], q, axis=0) + lfilter([1.0], [1.0, -phi], q[::-1], axis=0)[::-1] - q
        c = q.T @ sq
        # trace and first off-diagonal of M Σ M, M = I − q qᵀ
        trace = n - float(np.trace(c))
        off = (
            (n - 1) * phi
            - float(np.einsum("ik,ik->", q[:-1], sq[1:]))
            - float(np.einsum("ik,ik->", sq[:-1], q[1:]))
            + float(np.einsum("ik,kl,il->", q[:-1], c, q[1:]))
        )
        return off / trace

    lo, hi = 0.0, 0.999
    if expected(lo) >= observed:
        return 0.0
    if expected(hi) <= observed:
        return hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < observed else (lo, mid)
    return (lo + hi) / 2


def _smooth_basis(n: int) -> np.ndarray:
    """The smooth curve a step must be sharper than: a polynomial of degree ratchet_smooth_degree in
    time (Legendre columns, well conditioned). A cubic, not a line: a climb that levels off (a relay
    growing towards its ceiling) leaves a bend beside a line that steps fit, and was called
    Ratcheting in up to 44% of series (--part staircases, saturating climbs)."""
    return np.polynomial.legendre.legvander(np.linspace(-1.0, 1.0, n), int(RULES["ratchet_smooth_degree"]))


def _staircase_shape(
    fit: StepFit, fall_t: float | None = None, min_steps: int | None = None
) -> tuple[bool, str, float, int]:
    """The shape part of Ratcheting: ≥ ratchet_min_steps (or `min_steps`) up-steps climbing ≥
    ratchet_min_climb_share of the level together, and no down-step (|t| ≥ fall_t, ratchet_step_t
    unless given) of ≥ ratchet_max_drawdown of that climb (a release). (ok, why not, the climb, the up-steps)."""
    up = int((fit.sizes > 0).sum())
    climb = float(fit.sizes.sum())  # net: what the steps added up to, down-steps taken off
    fall_t = RULES["ratchet_step_t"] if fall_t is None else fall_t
    falls = (fit.sizes < 0) & (fit.t <= -fall_t) & (-fit.sizes >= RULES["ratchet_max_drawdown"] * climb)
    if (
        up < (RULES["ratchet_min_steps"] if min_steps is None else min_steps)
        or climb < RULES["ratchet_min_climb_share"]
    ):
        return False, f"{up} up-step(s) beyond the noise, {climb:+.1%} together", climb, up
    if falls.any():
        return (
            False,
            f"climbed {climb:.1%} in steps but fell back {float(-fit.sizes[falls].max()):.1%} in one",
            climb,
            up,
        )
    return True, "", climb, up


def _sharp_bar(bins: int) -> float:
    """ratchet_sharp_t, raised by √(2 ln n) − √(2 ln 256) for n > 256 bins: the largest of n noise
    t's grows like √(2 ln n)."""
    return RULES["ratchet_sharp_t"] + max(0.0, math.sqrt(2 * math.log(bins)) - math.sqrt(2 * math.log(256)))


@dataclass(frozen=True, eq=False)
class StepEvidence:
    """A replica's step fit and Ratcheting's verdict on it (step_evidence), fitted once: classify
    words the replica with it, ratchet_group lends it to the replica's group."""

    x: np.ndarray | None  # the window averaged into ≤ ratchet_step_points bins, as shares of the level
    # (None: no positive level or fewer than 12 samples)
    tb: np.ndarray | None  # those bins' times, seconds from the window's start (the daily cycle's clock)
    span_s: float  # the window's span, seconds
    fit: StepFit | None  # the step fit on x (None: no x or fewer than 12 bins)
    ratcheting: bool  # Ratcheting on its own evidence (ratchet_in_noise)
    reason: str  # why, or why not ("" when there was no fit)


def step_evidence(t: np.ndarray, y: np.ndarray) -> StepEvidence:
    """The step evidence of one steady window (t s, y MB; non-finite samples left out), its level
    the median as in classify."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(t) & np.isfinite(y)
    t, y = t[ok], y[ok]
    return step_evidence_at(t, y, float(np.median(y)) if len(y) else 0.0)


def step_evidence_at(t: np.ndarray, y: np.ndarray, level: float) -> StepEvidence:
    """step_evidence at a level the caller has already read (classify's), not the window's median."""
    tb, x = _relative_bins(t, y, level) if level > 0 and len(y) >= 12 else (None, None)
    fit = step_fit_x(x) if x is not None else None
    return StepEvidence(x, tb, float(t[-1] - t[0]) if len(t) else 0.0, fit, *ratchet_in_noise(fit, level))


def ratchet_in_noise(fit: StepFit | None, level: float) -> tuple[bool, str]:
    """Ratcheting where the noise is as tall as the steps (1–2% AR noise against +1.6% steps),
    from the step fit: the staircase's shape (_staircase_shape) and a step sharper than a smooth
    curve explains (sharp_t ≥ _sharp_bar), which a smooth leak, a climb that levels off, a daily
    cycle's rise or a slow wander do not have. The one place that decides Ratcheting on a replica's own evidence."""
    if fit is None:
        return False, ""
    ok, why, climb, up = _staircase_shape(fit)
    if not ok:
        return False, why
    sharp = _sharp_bar(fit.bins)
    if fit.sharp_t < sharp:
        return False, (
            f"its step fit climbed {climb:.1%}, but no step sharper than a smooth climb's "
            f"(t {fit.sharp_t:.1f} < {sharp:.2f})"
        )
    return True, (
        f"climbed {climb * level:.1f} MB ({climb:.1%}) in {up} steps without a release beyond "
        f"its noise (sharpest step t {fit.sharp_t:.1f} beside a smooth climb; AR(1) φ {fit.phi:.2f} "
        f"per 1/{fit.bins} of the window"
        + (f" plus white noise, {fit.white:.0%} of its variance" if fit.white else "")
        + ")"
    )


@dataclass(frozen=True)
class GroupRatchet:
    """A group's replicas lending each other step evidence (ratchet_group)."""

    own: tuple[bool, ...]  # per replica: Ratcheting on its own evidence (StepEvidence.ratcheting)
    called: tuple[bool, ...]  # per replica: Ratcheting on the group's evidence (not on its own)
    reasons: tuple[str, ...]  # per replica: why, for those called
    p: float | None  # the group's combined p; None: not simulated (the pre-screen said it could not reach)
    own_p: tuple[float | None, ...]  # each replica's p against its own simulated null (None: not simulated)
    simulations: int  # step fits run on simulated series
    shaped_p: tuple[float | None, ...]  # each replica's p among those simulations with the staircase's shape (its call;
    # own-route replicas carry own_p's 1/(sims + 1), None: not simulated)


def group_shape(fit: StepFit, min_steps: int | None = None) -> bool:
    """The staircase's shape as the group route asks it: a release must be a down-step as sharp as
    the bar a step beside a line must pass on its own (_sharp_bar), not one at ratchet_step_t: AR(1)
    wander at φ 0.9 and 2% makes down-steps at t 3–4 in a sixth of the +8% staircases (1.5 days),
    while a daily cycle's fall is seen beside the simulated null anyway."""
    return _staircase_shape(fit, _sharp_bar(fit.bins), min_steps)[0]


def null_p(
    x: np.ndarray,
    sharp_t: float,
    rng: np.random.Generator,
    sims: int,
    *,
    unbiased_phi: bool = False,
    decide_at: float | None = None,
    gated: bool = True,
) -> tuple[float, int]:
    """The replica's p: where its step statistic (sharp_t, the fit having the staircase's shape)
    falls among simulations of its null — its own smooth curve (_smooth_basis: flat, a climb, one
    that levels off) plus the noise of the curve's residuals (whittle_noise's AR(1) plus white
    noise; `unbiased_phi`: AR(1) at φ unbiased for the curve's fit, _curve_phi), same length.
    step_fit runs in full on each, φ estimated again, so what the estimation does on this design
    is in the null too. Sequential (sequential_p, `decide_at` passed on): a valid p either way,
    and a replica far from a staircase costs ~10–30 fits, not `sims`. `gated` False: a simulation
    counts by its sharpest step alone, shape or not (calibration's --part ratchet-combine asks
    what a replica without the shape could be called). (p, simulations run)."""

    def as_sharp(series: np.ndarray) -> bool:
        fit = step_fit_x(series)
        return bool(fit is not None and (not gated or group_shape(fit)) and fit.sharp_t >= sharp_t)

    return curve_null_p(x, _smooth_basis(len(x)), as_sharp, rng, sims, decide_at, unbiased_phi)


def curve_null_p(
    x: np.ndarray,
    basis: np.ndarray,
    as_extreme: Callable[[np.ndarray], bool],
    rng: np.random.Generator,
    sims: int,
    decide_at: float | None = None,
    unbiased_phi: bool = False,
) -> tuple[float, int]:
    """simulated_p of x's least-squares curve on `basis` plus the noise of its residuals: AR(1)
    plus white noise fitted by Whittle's likelihood (whittle_noise: φ, white share, marginal SD) or,
    `unbiased_phi`, AR(1) at φ unbiased for this basis's fit (_curve_phi) at its upper
    one-standard-error bound √((1 − φ²)/n) and the residuals' SD — the data whose steps look
    sharpest are those whose φ reads low, and a null at the low reading wanders less than they do.
    Until session 17 the model was step_noise's, at the residuals' SD: on AR(1) 1% φ 0.9 + 2%
    white the group route erred in 1.8% / 1.3% of replicas over 3 days (noise-shapes; 0.3% / 0 with this)."""
    curve = basis @ np.linalg.lstsq(basis, x, rcond=None)[0]
    res = x - curve
    if unbiased_phi:
        phi = _curve_phi(res, basis)
        phi = min(phi + math.sqrt(max(1 - phi * phi, 0.0) / len(x)), 0.999)
        return simulated_p(curve, phi, float(np.std(res, ddof=basis.shape[1])), as_extreme, rng, sims, decide_at)
    phi, white, sd = whittle_noise(res)
    return simulated_p(curve, phi, sd, as_extreme, rng, sims, decide_at, white)


def simulated_p(
    mean: np.ndarray,
    phi: float,
    sd: float,
    as_extreme: Callable[[np.ndarray], bool],
    rng: np.random.Generator,
    sims: int,
    decide_at: float | None = None,
    white: float = 0.0,
) -> tuple[float, int]:
    """sequential_p over simulations of `mean` plus AR(1) noise (φ, marginal SD; `white`: that share
    of the variance white instead: whittle_noise's model), drawn ten at a time as they are needed;
    `as_extreme(series)`: whether that simulation is as extreme as the data."""

    def extreme() -> Iterator[bool]:
        done = 0
        while done < sims:
            k = min(10, sims - done)
            noise = ar1(rng, k, len(mean), phi, sd * math.sqrt(1.0 - white))
            if white > 0:
                noise += rng.normal(scale=sd * math.sqrt(white), size=noise.shape)
            for one in noise:
                done += 1
                yield as_extreme(mean + one)

    return sequential_p(extreme(), sims, decide_at)


def sequential_p(extreme: Iterable[bool], sims: int, decide_at: float | None = None) -> tuple[float, int]:
    """A Monte Carlo p from `extreme` (per simulation, drawn lazily: was it as extreme as the data),
    sequential (Besag & Clifford 1991): stops at the ratchet_group_stop-th as extreme, or
    (`decide_at`) once p must end above that level; p by besag_clifford_p. (p, simulations run)."""
    stop = int(RULES["ratchet_group_stop"])
    hits = done = 0
    for hit in extreme:
        done += 1
        hits += hit
        if hits >= stop or done >= sims or (decide_at is not None and (1 + hits) / (sims + 1) > decide_at):
            break
    return besag_clifford_p(hits, done, sims), done


def besag_clifford_p(hits: int, done: int, sims: int) -> float:
    """The sequential Monte Carlo p of `hits` as extreme in `done` draws of at most `sims`: hits /
    done once hits reached ratchet_group_stop (the run stopped there), else (1 + hits) / (sims + 1).
    Also a p among a subset of the draws (`done` = the subset's size, `sims` = its size had the run
    not stopped: LevellingP.shaped_p)."""
    return hits / done if hits >= int(RULES["ratchet_group_stop"]) else (1 + hits) / (sims + 1)


# the levelling-off curve's time constants, as shares of the window (levelling_basis): from a climb
# that bends within the window's first hours to one that bends over its whole span
LEVELLING_TAUS = (0.03, 0.06, 0.12, 0.25, 0.5)


def levelling_bases(n: int, cycle: np.ndarray | None = None) -> list[np.ndarray]:
    """The group route's candidate smooth curves on n bins: the cubic (_smooth_basis), `cycle`
    (cycle_of: the daily cycle's columns, or None) and 1 − exp(−u/τ) for each of LEVELLING_TAUS
    (u the bin's share of the bins, as the cubic's time axis)."""
    fixed = [_smooth_basis(n)] + ([] if cycle is None else [cycle])
    u = np.linspace(0.0, 1.0, n)
    return [np.column_stack(fixed + [1 - np.exp(-u / tau)]) for tau in LEVELLING_TAUS]


def levelling_basis(
    x: np.ndarray, cycle: np.ndarray | None = None, bases: list[np.ndarray] | None = None
) -> np.ndarray:
    """The group route's smooth curve: the one of levelling_bases (or `bases`, built for x's length
    and cycle) whose least-squares fit to x leaves the smallest residual. A climb that levels off
    early (a relay growing to its ceiling) bends more sharply than a cubic can, and beside a cubic
    that bend reads as a step (--part ratchet-curve)."""
    bases = levelling_bases(len(x), cycle) if bases is None else bases
    return min(bases, key=lambda b: float(np.sum((x - b @ np.linalg.lstsq(b, x, rcond=None)[0]) ** 2)))


def cycle_of(e: StepEvidence) -> np.ndarray | None:
    """The daily cycle's columns at e's bins (growth.cycle_columns) where its window spans a day
    (growth_cycle_period_s) and holds ≥ 4 bins a column, else None. A cycle every replica shares
    rises like steps beside a curve without it, and an AR(1) null does not cycle: over 9 days a
    ±4% cycle in 1% noise gave p ≤ 0.05 to 75% of the replicas with the staircase's shape and was
    called Ratcheting in 3% (groups of 5), 0.6% with these columns (--part ratchet-group). That
    was with an AR(1) null at the residuals' lag-1 φ; the null fitted by likelihood since session 17
    (whittle_noise) reads a cycle left in the residuals as a slower wander, and the unit test's
    cycling group is not found without these columns either. Kept: the columns were calibrated
    with the rule, and a curve that holds the cycle leaves the null less to guess."""
    cols = 2 * int(RULES["growth_cycle_harmonics"])
    if (
        e.tb is None
        or e.span_s < RULES["growth_cycle_period_s"]
        or len(e.tb) < 4 * (cols + int(RULES["ratchet_smooth_degree"]) + 2)
    ):
        return None
    return cycle_columns(e.tb)


def _sharpest_beside(x: np.ndarray, phi: float, basis: np.ndarray) -> float:
    """The largest t of one up-step added to `basis` (GLS at AR(1) φ), as StepFit.sharp_t is beside the cubic."""
    cand = np.arange(2, len(x) - 1)
    return float(_step_scan(quasi_difference(x, phi), quasi_difference(basis, phi), phi, cand).max())


@dataclass(frozen=True)
class LevellingP:
    """A replica's evidence in the group route (levelling_null_p)."""

    p: float  # among all simulations: the shape and a step as sharp (what the group's p combines)
    statistic: float  # its sharpest up-step's t beside its levelling curve
    simulations: int  # simulations run
    shaped: int  # of them, with the staircase's shape
    as_sharp: int  # of those, with a step as sharp

    @property
    def shaped_p(self) -> float:
        """Its p among the simulations with the staircase's shape (the replica's call): the run
        stopped (or not) on the same count of hits."""
        return besag_clifford_p(self.as_sharp, self.shaped, self.shaped)


def levelling_null_p(
    x: np.ndarray, fit: StepFit, rng: np.random.Generator, sims: int, cycle: np.ndarray | None = None
) -> LevellingP:
    """A replica's p in the group route: its sharpest up-step beside its own levelling curve
    (levelling_basis with `cycle`, at its step fit's φ) among simulations of that curve plus the
    noise of the curve's residuals (whittle_noise's model), same bins; each simulation is
    fitted in full (step_fit, φ again, the staircase's shape as the group route asks it, its own τ)
    and counts where it has the shape and a step as sharp. Sequential (sequential_p).
    Also its p among the simulations that have the shape (the same draws, Besag–Clifford's
    count over the shaped ones; never below p): a replica tested here has the shape, and where its
    null seldom has it (a flat replica with the shape: a median 9–21% of its simulations) p is
    small whatever its steps: such replicas had p ≤ ratchet_group_replica_p in 88–95% of cases,
    and were called wherever their group was found; among the shaped simulations, in 30–38%
    (session 19, docs/method/index.md)."""
    bases = levelling_bases(len(x), cycle)  # the simulations have x's bins: built once
    basis = levelling_basis(x, bases=bases)
    observed = _sharpest_beside(x, fit.phi, basis)
    shaped = hits = 0

    def as_sharp(series: np.ndarray) -> bool:
        nonlocal shaped, hits
        f = step_fit_x(series)
        if f is None or not group_shape(f):
            return False
        shaped += 1
        hit = _sharpest_beside(series, f.phi, levelling_basis(series, bases=bases)) >= observed
        hits += hit
        return bool(hit)

    p, done = curve_null_p(x, basis, as_sharp, rng, sims)
    return LevellingP(p, observed, done, shaped, hits)


@functools.cache
def _truncated_product_null(m: int, tau: float) -> np.ndarray:
    """The truncated product's statistic (Σ log p over the p's ≤ τ) of the m − 1 largest of m
    independent uniform p's: 400,000 draws seeded by m, sorted (its 0.25% point to ±0.00008), read-only."""
    u = np.sort(np.random.default_rng(m).uniform(size=(400_000, m)), axis=1)[:, 1:]
    null = np.sort(np.where(u <= tau, np.log(u), 0.0).sum(-1))
    null.flags.writeable = False  # cached: shared by every call
    return null


def truncated_product_p(ps: ArrayLike, m: int | None = None, tau: float | None = None) -> np.ndarray | float:
    """The group's p by the truncated product method (Zaykin et al. 2002) on the m − 1 largest of m
    replica p's (the last axis of `ps`; the smallest dropped: the evidence must not rest on one
    replica): where Σ log p over those ≤ τ (ratchet_group_tau) falls among _truncated_product_null's.
    Unlike Fisher's method, a replica without the staircase's shape (p = 1) costs the group
    nothing: a fifth of +8% staircases at 2% φ 0.9 show one up-step only. Valid for independent p's
    at least uniform (Monte Carlo p's are)."""
    tau = RULES["ratchet_group_tau"] if tau is None else tau
    arr = np.asarray(ps, dtype=float)
    if m is not None and m != arr.shape[-1]:
        raise ValueError(f"truncated_product_p: {arr.shape[-1]} p's a group, m = {m}")
    m = arr.shape[-1]
    arr = np.sort(arr, axis=-1)[..., 1:]
    null = _truncated_product_null(m, tau)
    out = (1 + np.searchsorted(null, np.where(arr <= tau, np.log(arr), 0.0).sum(-1), side="right")) / (len(null) + 1)
    return float(out) if np.ndim(out) == 0 else out


def ratchet_group(replicas: list[StepEvidence], *, sims: int | None = None) -> GroupRatchet | None:
    """Ratcheting on a group's combined step evidence (its replicas' step_evidence, as classify
    found it in their steady windows: only simulated series are fitted here). Each replica with
    the staircase's shape (group_shape; else p = 1) gets its p from its sharpest up-step beside
    its own levelling curve (with the daily cycle over a day or more: cycle_of), among `sims`
    simulations of its own null (levelling_null_p); one Ratcheting on its own counts the smallest
    p, 1/(sims + 1) (the own route errs on flat series in < 0.1% and on climbs in ≤ 1.3%; two such
    in one group — ~0.1% of groups of 5 on a climb — do find it, as the group's p drops only the
    smallest). The replicas' p's but the smallest are combined by the truncated product
    (truncated_product_p), and if the group's p ≤ ratchet_group_alpha every replica with the shape
    and its own p among its simulations with the shape (LevellingP.shaped_p) ≤ ratchet_group_replica_p
    is called Ratcheting. The p's are independent across
    replicas under their nulls whatever the design shares (a climb, a sampling interval), because
    each null is the replica's own fitted model re-estimated the same way.
    Cost bounded: the group is tested on its first ratchet_group_max_tested replicas, nothing is
    simulated unless the candidates among them at the smallest p could bring the group to
    ratchet_group_alpha, each replica's simulations stop early (sequential_p), and the other
    replicas are simulated only once the group is found Ratcheting; the simulations are seeded
    from the data (a report reproduces).
    None with fewer than ratchet_group_min_replicas replicas."""
    m = len(replicas)
    if m < RULES["ratchet_group_min_replicas"]:
        return None
    sims = int(RULES["ratchet_group_sims"] if sims is None else sims)
    p_min = 1.0 / (sims + 1)
    xs = [e.x for e in replicas]
    fits = [e.fit for e in replicas]
    shape = [bool(fit is not None and group_shape(fit)) for fit in fits]
    own = [e.ratcheting for e in replicas]
    alpha = RULES["ratchet_group_alpha"]
    none = GroupRatchet(tuple(own), (False,) * m, ("",) * m, None, (None,) * m, 0, (None,) * m)
    # the group is tested on its first ratchet_group_max_tested replicas (an order the data do not
    # choose, so their p's stay valid); the rest are simulated only when that test says Ratcheting
    tested = min(m, int(RULES["ratchet_group_max_tested"]))
    candidates = [a or b for a, b in zip(shape[:tested], own[:tested])]
    if sum(candidates) < 2 or truncated_product_p([p_min if c else 1.0 for c in candidates]) > alpha:
        return none  # even the smallest p's of the candidates could not reach it
    digest = hashlib.blake2b(b"".join(np.round(x, 9).tobytes() for x in xs if x is not None), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    done = 0
    evidence: dict[int, LevellingP] = {}  # per simulated replica: its evidence, and beside what
    beside: dict[int, str] = {}

    def replica_p(i: int) -> float | None:
        nonlocal done
        if own[i]:
            return p_min
        if not shape[i]:
            return None
        cycle = cycle_of(replicas[i])
        # (a replica with the shape has its fit and its series)
        e = evidence[i] = levelling_null_p(cast(np.ndarray, xs[i]), cast(StepFit, fits[i]), rng, sims, cycle)
        beside[i] = "a smooth climb that may level off" + ("" if cycle is None else " and the daily cycle")
        done += e.simulations
        return e.p

    own_p = [replica_p(i) for i in range(tested)]
    p = float(truncated_product_p([1.0 if q is None else q for q in own_p]))
    own_p += [replica_p(i) if p <= alpha else None for i in range(tested, m)]
    called, reasons = [], []
    shaped_p = [evidence[i].shaped_p if i in evidence else q for i, q in enumerate(own_p)]  # own route: p_min
    for i, (fit, sh, mine, q) in enumerate(zip(fits, shape, own, shaped_p)):
        call = bool(p <= alpha and sh and not mine and q is not None and q <= RULES["ratchet_group_replica_p"])
        called.append(call)
        e = evidence.get(i)
        if not call:
            reasons.append("")
            continue
        assert fit is not None and e is not None  # called: it has the shape and was simulated
        reasons.append(
            f"{_staircase_shape(fit)[3]} up-steps climbing {float(fit.sizes.sum()):.1%} without a release "
            f"beyond its noise; its sharpest step (t {e.statistic:.1f} beside {beside[i]}) "
            f"sharper than {e.shaped - e.as_sharp} of the {e.shaped} simulations of that curve in "
            f"its own noise that have the staircase's shape (p {q:.2g} among them), and {tested} of its "
            f"group's replicas together beyond theirs (combined p {p:.2g})"
        )
    return GroupRatchet(tuple(own), tuple(called), tuple(reasons), p, tuple(own_p), done, tuple(shaped_p))
