"""Status words of one replica's steady window.

Rules, in STATUS_ORDER order (thresholds in RULES, see docs/analysis.md):
- Unverified: the replica did not run the group's allocator.
- Too short: fewer than min_samples samples or a window shorter than min_window_s.
- Bloating: growing (below) by ≥ bloating_window_share of the level within the window.
- Ratcheting: climbing in steps without giving back (step_fit, _ratchet_in_noise): a
  piecewise-constant mean fitted under AR(1) noise by generalised least squares has
  ≥ ratchet_min_steps up-steps, all steps together ≥ ratchet_min_climb_share of the level, no down-step of
  ≥ ratchet_max_drawdown of that climb, and one step sharper than a straight line explains
  (t ≥ ratchet_step_t / ratchet_sharp_t). A flat series has no such steps; a cycle gives back; a
  smooth leak or a slow wander has no sharp step (it is Growing, or nothing); a tor-dircache
  staircase has all of these. Checked before Growing because it is the more specific diagnosis
  (STATUS_ORDER, the severity order, is unchanged).
- Growing: the change over the window (growth()) has a 95% interval above zero, is
  > flat_max_growth_share of the level and ≥ growing_min_change_mb.
- Variable: IQR > variable_iqr_share of the median.
- Flat: none of the above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .growth import Growth, bin_series, detrended_lag1, growth as _growth, phi_for_lag1
from .rules import RULES

STATUS_ORDER = ["Unverified", "Too short", "Bloating", "Growing", "Ratcheting", "Variable", "Flat"]


@dataclass(frozen=True)
class Releases:
    count: int                 # release events in the window
    largest_mb: float          # the largest fall from a running peak (counted or not)
    threshold_mb: float        # the fall that counts as a release here
    last_release_s: float | None   # time (from window start) of the last release's trough, None if none
    quiet_s: float             # time from the last release's trough (or window start) to the window end


@dataclass(frozen=True)
class StatusCall:
    word: str                  # one of STATUS_ORDER
    reason: str                # plain words: which rule fired and on what figures
    growth: Growth | None
    releases: Releases | None
    iqr_share: float | None
    ratchet: tuple[bool, str] | None = None   # the step fit's verdict (None: not reached), for classify(earlier=)


def bin_medians(t: np.ndarray, y: np.ndarray, bins: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin medians over `bins` equal shares of the span (fewer when there are few samples:
    at least 4 samples a bin on average). The same time resolution whatever the sampling interval."""
    span = float(t[-1] - t[0]) if len(t) else 0.0
    b = max(1, min(bins, len(t) // 4))
    if span <= 0:
        return np.zeros(1, dtype=int), np.array([float(np.median(y))])
    idx = np.minimum(((t - t[0]) / span * b).astype(int), b - 1)
    med = np.full(b, np.nan)
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(b + 1))
    for k in range(b):
        if bounds[k + 1] > bounds[k]:
            med[k] = np.median(y[order[bounds[k]:bounds[k + 1]]])
    return idx, med


def noise_mb(t: np.ndarray, y: np.ndarray) -> float:
    """Robust short-term noise: MAD of the deviations from the median of each sample's time bin
    (1/50 of the window), so steps and slow trends are not noise."""
    if len(y) < 8:
        return 0.0
    idx, med = bin_medians(t, y)
    return _robust_sd(y - med[idx])


def release_threshold(t: np.ndarray, y: np.ndarray, level: float) -> float:
    """max(release_min_mb, release_min_share × level, release_noise_k × noise × extreme factor):
    the range of n noisy samples grows like 2·√(2 ln n) noise SDs, so the noise part scales with
    that (a fall must exceed what noise alone produces in a window of this many samples)."""
    n = max(len(y), 2)
    noise = noise_mb(t, y) * RULES["release_noise_k"] * (2 * math.sqrt(2 * math.log(n)) + 1) / 3
    return max(RULES["release_min_mb"], RULES["release_min_share"] * level, noise)


def release_events(t_s: np.ndarray, y: np.ndarray, level: float) -> Releases:
    """Release events in a window: falls from the running peak of at least release_threshold()
    (1 MB, 1% of the level, and well beyond what the noise alone produces). A release lasts
    until the series climbs back by that threshold above its trough, so a fall spread over many
    samples is one event and the count does not depend on the sampling interval."""
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    thr = release_threshold(t_s, y, level)
    if len(y) == 0:
        return Releases(0, 0.0, thr, None, 0.0)
    tl, yl = t_s.tolist(), y.tolist()
    peak, trough, in_release = yl[0], yl[0], False
    count, largest, last_t = 0, 0.0, None
    for ti, yi in zip(tl, yl):
        if in_release:
            if yi < trough:
                trough, last_t = yi, ti
                largest = max(largest, release_peak - trough)
            elif yi >= trough + thr:
                in_release, peak = False, yi
            continue
        if yi > peak:
            peak = yi
        largest = max(largest, peak - yi)
        if peak - yi >= thr:
            count += 1
            in_release, release_peak, trough, last_t = True, peak, yi, ti
    start, end = tl[0], tl[-1]
    last = None if last_t is None else last_t - start
    return Releases(count, float(largest), float(thr), last, float(end - (start if last_t is None else last_t)))


def _quasi_difference(m: np.ndarray, phi: float) -> np.ndarray:
    """Rows of m (index = time) prewhitened for AR(1) noise with this φ (Prais–Winsten): least
    squares on the result is generalised least squares under that noise."""
    out = m.copy()
    out[1:] = m[1:] - phi * m[:-1]
    out[0] = m[0] * math.sqrt(max(1 - phi * phi, 1e-6))
    return out


def _robust_sd(r: np.ndarray) -> float:
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
    num = against(r)                                 # r is orthogonal to the base already
    qz = against(q)
    den = 1 + (1 - phi) ** 2 * (n - 1 - cand) - np.einsum("ij,ij->i", qz, qz)
    sd = max(_robust_sd(r), 1e-12)
    return np.where(den > 1e-9, num / np.sqrt(np.maximum(den, 1e-300)), 0.0) / sd


@dataclass(frozen=True)
class StepFit:
    phi: float                 # AR(1) φ of the noise between the steps (per bin, median-unbiased)
    sizes: np.ndarray          # the fitted steps as shares of the level, in time order
    t: np.ndarray              # their t statistics (generalised least squares at φ)
    at: np.ndarray             # their bins
    bins: int                  # bins the window was averaged into
    sharp_t: float             # the largest t of one up-step beside a straight line


def step_fit(t: np.ndarray, y: np.ndarray, level: float) -> StepFit | None:
    """A piecewise-constant mean under AR(1) noise, fitted on the window averaged into
    ≤ ratchet_step_points equal time bins: steps enter one at a time (the largest |t| first, each
    ≥ 2 bins from the last) while |t| ≥ ratchet_step_t, up to ratchet_max_steps. φ is the
    median-unbiased lag-1 of the residuals of a first fit (at the φ of a straight line's
    residuals, which steps inflate), so the wander between steps is noise, not steps. Also the
    sharpest single up-step beside a straight line instead of the steps: a smooth climb (a leak, a
    cycle's rise, a slow wander) has none beyond the noise, a staircase has its tallest step there.
    None with fewer than 12 bins or no positive level."""
    if level <= 0:
        return None
    _, yb = bin_series(t, y, int(RULES["ratchet_step_points"]))
    x = yb / level - 1
    n = len(x)
    if n < 12:
        return None
    idx = np.arange(n)
    cand = np.arange(2, n - 1)                       # a step at the very edge is one odd bin, not a step

    def steps(phi: float, chosen: list[int]) -> np.ndarray:
        # the prewhitened step columns at the chosen candidates: 0 before s, 1 at s, 1 − φ after
        return (1 - phi) * (idx[:, None] > cand[chosen][None, :]) + (idx[:, None] == cand[chosen][None, :])

    def fit(phi: float) -> tuple[list[int], np.ndarray, np.ndarray]:
        xt = _quasi_difference(x, phi)
        ones = _quasi_difference(np.ones((n, 1)), phi)
        chosen: list[int] = []
        for _ in range(int(RULES["ratchet_max_steps"])):
            tz = _step_scan(xt, np.column_stack([ones, steps(phi, chosen)]), phi, cand)
            for c in chosen:
                tz[max(c - 1, 0):c + 2] = 0.0
            best = int(np.argmax(np.abs(tz)))
            if abs(tz[best]) < RULES["ratchet_step_t"]:
                break
            chosen.append(best)
        chosen.sort()
        design = np.column_stack([ones, steps(phi, chosen)])
        beta, *_ = np.linalg.lstsq(design, xt, rcond=None)
        sd = max(_robust_sd(xt - design @ beta), 1e-12)
        se = np.sqrt(np.diag(np.linalg.pinv(design.T @ design))) * sd
        return chosen, beta[1:], beta[1:] / se[1:]

    phi = max(0.0, phi_for_lag1(float(detrended_lag1(x)), n, 0.5))
    chosen, _, _ = fit(phi)
    levels = np.column_stack([np.ones(n)] + [(idx >= cand[c]).astype(float) for c in chosen])
    coef, *_ = np.linalg.lstsq(levels, x, rcond=None)
    r = x - levels @ coef
    denom = float(r @ r)
    rho = float(np.sum(r[1:] * r[:-1]) / denom) if denom > 0 else 0.0
    phi = max(0.0, phi_for_lag1(rho, n, 0.5))
    chosen, sizes, tt = fit(phi)
    line = _quasi_difference(np.column_stack([np.ones(n), idx / n]), phi)
    tl = _step_scan(_quasi_difference(x, phi), line, phi, cand)
    return StepFit(phi, sizes, tt, cand[chosen] if chosen else np.zeros(0, dtype=int), n, float(tl.max()))


def _ratchet_in_noise(t: np.ndarray, y: np.ndarray, level: float) -> tuple[bool, str]:
    """Ratcheting where the noise is as tall as the steps (1–2% AR noise against +1.6% steps),
    from step_fit: ≥ ratchet_min_steps up-steps; all steps together climbing ≥ ratchet_min_climb_share
    of the level; no down-step (|t| ≥ ratchet_step_t) of ≥ ratchet_max_drawdown of that climb (a release); and
    a step sharper than a straight line explains (sharp_t ≥ ratchet_sharp_t, raised by
    √(2 ln n) − √(2 ln 256) for n > 256 bins), which a smooth leak, a daily cycle's rise or a slow
    wander do not have."""
    fit = step_fit(t, y, level)
    if fit is None:
        return False, ""
    up = fit.sizes > 0
    climb = float(fit.sizes.sum())                   # net: what the steps added up to, down-steps taken off
    falls = (fit.sizes < 0) & (fit.t <= -RULES["ratchet_step_t"]) & (-fit.sizes >= RULES["ratchet_max_drawdown"] * climb)
    if int(up.sum()) < RULES["ratchet_min_steps"] or climb < RULES["ratchet_min_climb_share"]:
        return False, f"{int(up.sum())} up-step(s) beyond the noise, {climb:+.1%} together"
    if falls.any():
        return False, f"climbed {climb:.1%} in steps but fell back {float(-fit.sizes[falls].max()):.1%} in one"
    # the largest of n noise t's grows like √(2 ln n): the bar rises with the positions scanned beyond 256
    sharp = RULES["ratchet_sharp_t"] + max(0.0, math.sqrt(2 * math.log(fit.bins)) - math.sqrt(2 * math.log(256)))
    if fit.sharp_t < sharp:
        return False, (f"climbed {climb:.1%}, but no step sharper than a steady climb "
                       f"(t {fit.sharp_t:.1f} < {sharp:.2f}): a smooth climb, not steps")
    return True, (f"climbed {climb * level:.1f} MB ({climb:.1%}) in {int(up.sum())} steps without a release beyond "
                  f"its noise (sharpest step t {fit.sharp_t:.1f} beside a steady climb; AR(1) φ {fit.phi:.2f} "
                  f"per 1/{fit.bins} of the window)")


def classify(t_s: np.ndarray, y: np.ndarray, *, verified: bool | None = True,
             growth: Growth | None = None, seed: int = 0, earlier: StatusCall | None = None) -> StatusCall:
    """The status word of one replica from its steady window (t_s seconds, y MB). `earlier`: a call
    on the same t_s and y whose release events and step fit (they depend on t_s and y alone, not on
    `growth`) are reused: the word decided again on another growth interval (analysis' pooled pass)."""
    if verified is False:
        return StatusCall("Unverified", "did not run the group's allocator", None, None, None)
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(t_s) & np.isfinite(y)
    t_s, y = t_s[ok], y[ok]
    window = float(t_s[-1] - t_s[0]) if len(t_s) else 0.0
    if len(y) < RULES["min_samples"] or window < RULES["min_window_s"]:
        return StatusCall("Too short", f"{len(y)} steady samples over {window:.0f} s", None, None, None)
    level = float(np.median(y))
    g = growth if growth is not None else _growth(t_s, y, level=level, seed=seed)
    q1, q3 = np.percentile(y, [25, 75])
    iqr = float((q3 - q1) / level) if level > 0 else None
    rel = earlier.releases if earlier is not None and earlier.releases is not None else release_events(t_s, y, level)
    known = earlier.ratchet if earlier is not None else None
    growing = bool(g is not None and g.significant and g.change_mb > 0 and g.change_share > RULES["flat_max_growth_share"] \
            and g.change_mb >= RULES["growing_min_change_mb"])
    grew = (f"grew {g.change_mb:.1f} MB ({g.change_share:.1%}) over {window:.0f} s, 95% interval "
            f"{g.change_lo:.1f}–{g.change_hi:.1f} MB" + (f", {g.pooled}" if g.pooled else "")) if growing else ""
    if growing and g.change_share >= RULES["bloating_window_share"]:
        return StatusCall("Bloating", grew, g, rel, iqr, known)
    ratchet = known or _ratchet_in_noise(t_s, y, level)
    ratcheting, why = ratchet
    if ratcheting:
        return StatusCall("Ratcheting", why, g, rel, iqr, ratchet)
    if growing:
        return StatusCall("Growing", grew, g, rel, iqr, ratchet)
    if iqr is not None and iqr > RULES["variable_iqr_share"]:
        return StatusCall("Variable", f"interquartile range {iqr:.0%} of the median", g, rel, iqr, ratchet)
    return StatusCall("Flat", why, g, rel, iqr, ratchet)
