"""Status words of one replica's steady window.

Rules, in STATUS_ORDER order (thresholds in RULES, see docs/analysis.md):
- Unverified: the replica did not run the group's allocator.
- Too short: fewer than min_samples samples or a window shorter than min_window_s.
- Bloating: growing (below) by ≥ bloating_window_share of the level within the window.
- Ratcheting: climbing in steps without ever giving back: the release-free span that ends the
  window lasts ≥ ratchet_min_quiet_s and ≥ ratchet_min_quiet_share of the window, the series
  climbs ≥ ratchet_min_climb_share of the level over it, never falls back by more than
  ratchet_max_drawdown of that climb, and half of the rise happens within
  ratchet_step_time_share of the time. A flat series does not climb; a sinusoid gives back; an
  autocorrelated wander falls back about as much as it climbs; a smooth leak climbs evenly (it
  is Growing); a tor-dircache staircase does none of these. Checked before Growing because it
  is the more specific diagnosis (STATUS_ORDER, the severity order, is unchanged).
- Growing: the change over the window (growth()) has a 95% interval above zero, is
  > flat_max_growth_share of the level and ≥ growing_min_change_mb.
- Variable: IQR > variable_iqr_share of the median.
- Flat: none of the above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .growth import Growth, growth as _growth
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
    dev = y - med[idx]
    return float(1.4826 * np.median(np.abs(dev - np.median(dev))))


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


def step_time_share(t: np.ndarray, y: np.ndarray) -> float:
    """Share of the span's time in which the series made half of its rise, fastest rises first:
    ~0.5 for a steady climb, near 0 for a staircase. Computed on the running peak of the bin
    medians (denoised, and the same whatever the sampling interval)."""
    if len(t) < 3 or t[-1] <= t[0]:
        return 1.0
    _, med = bin_medians(t, y)
    med = med[np.isfinite(med)]
    peak = np.maximum.accumulate(med)
    rise = np.sort(np.diff(peak))[::-1]
    total = float(peak[-1] - peak[0])
    if total <= 0:
        return 1.0
    k = int(np.searchsorted(np.cumsum(rise), 0.5 * total))
    return float((k + 1) / max(len(med) - 1, 1))


def _ratchet(t: np.ndarray, y: np.ndarray, level: float, rel: Releases) -> tuple[bool, str]:
    window = float(t[-1] - t[0])
    need = max(RULES["ratchet_min_quiet_s"], RULES["ratchet_min_quiet_share"] * window)
    if rel.quiet_s < need:
        return False, f"released memory {rel.count} time(s); quiet for {rel.quiet_s:.0f} s of {window:.0f} s"
    span = t >= t[-1] - rel.quiet_s
    ts, ys = t[span], y[span]
    edge = 0.1 * (ts[-1] - ts[0])
    start = float(np.median(ys[ts <= ts[0] + edge]))
    end = float(np.median(ys[ts >= ts[-1] - edge]))
    climb = end - start
    _, med = bin_medians(ts, ys)
    med = med[np.isfinite(med)]
    drawdown = float(np.max(np.maximum.accumulate(med) - med))
    if climb < max(RULES["ratchet_min_climb_share"] * level, rel.threshold_mb):
        return False, f"climbed {climb:+.1f} MB over its release-free span"
    if drawdown > RULES["ratchet_max_drawdown"] * climb:
        return False, f"climbed {climb:.1f} MB but fell back {drawdown:.1f} MB on the way"
    steps = step_time_share(ts, ys)
    if steps > RULES["ratchet_step_time_share"]:
        return False, (f"climbed {climb:.1f} MB steadily (half of the rise took {steps:.0%} of the time): "
                       "a smooth climb, not steps")
    return True, (f"climbed {climb:.1f} MB ({climb / level:.1%}) over {rel.quiet_s:.0f} s without a release "
                  f"(largest fall back {drawdown:.1f} MB)")


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing least-squares fit of y (pool adjacent violators)."""
    vals, counts = [], []
    for v in y.tolist():
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            c = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / c
            counts[-2] = c
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def _sudden_steps(med: np.ndarray, first: int, sd: float, rho: float) -> list[float]:
    """Sizes of the separate sudden rises of the bin medians from index `first` on: peaks of
    D_j = mean(med[j:j+w]) − mean(med[j−w:j]) (w = k/12 bins) beyond √(2 ln(k/w)) + 0.5 times
    the SD of D under AR(1) noise of marginal SD `sd` and lag-1 correlation `rho` between bins,
    at least w apart, largest first."""
    k = len(med)
    w = max(2, k // 12)
    c = np.concatenate([[0.0], np.cumsum(med)])
    j = np.arange(max(first, w), k - w + 1)
    if len(j) < 3:
        return []
    dj = (c[j + w] - c[j]) / w - (c[j] - c[j - w]) / w
    rho = min(max(rho, 0.0), 0.95)
    sd_d = sd * math.sqrt(2 / w * (1 + rho) / (1 - rho))
    # a smooth climb lifts D everywhere: the baseline is D's lower quartile plus where that
    # quartile sits in noise alone (0.674 SD), ≈ 0 for steps on a flat floor, the slope for a climb
    base = max(float(np.percentile(dj, 25)) + 0.674 * sd_d, 0.0)
    cut = base + (math.sqrt(2 * math.log(max(k / w, 2.0))) + 0.5) * sd_d
    out, taken = [], []
    for idx in np.argsort(dj)[::-1]:
        if dj[idx] <= cut:
            break
        if all(abs(int(idx) - t) >= w for t in taken):
            taken.append(int(idx))
            out.append(float(dj[idx] - base))
    return out


def _median_noise(med: np.ndarray) -> tuple[float, float]:
    """(robust SD of the medians' differences / √2, their lag-1 autocorrelation around a non-decreasing fit)."""
    d = np.diff(med)
    sd = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)
    r = med - isotonic(med)
    r = r - r.mean()
    return sd, float(np.sum(r[1:] * r[:-1]) / max(float(np.sum(r * r)), 1e-300))


def ratchet_noise(t: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """The noise _ratchet_in_noise reads from one series' per-bin medians, the SD as a share of
    the series' median (so replicas at other levels can pool it); None with fewer than 12 bins."""
    _, med = bin_medians(t, y)
    med = med[np.isfinite(med)]
    if len(med) < 12:
        return None
    sd, rho = _median_noise(med)
    return sd / max(abs(float(np.median(y))), 1e-300), rho


def _ratchet_in_noise(t: np.ndarray, y: np.ndarray, level: float,
                      noise: tuple[float, float] | None = None) -> tuple[bool, str]:
    """Ratcheting where the noise wanders more than the steps are tall (1–2% AR noise against
    +1.6% steps): on the per-bin medians (1/50 of the window), whose noise is estimated from their
    differences (robust to the few steps) and scaled up by their lag-1 autocorrelation around a
    non-decreasing fit (a wander is not independent bin to bin). A release is a fall from the
    medians' running peak beyond what two noisy medians differ by (the max over the bins); the
    release-free stretch up to the end lasts ≥ ratchet_min_quiet_s and ≥ ratchet_min_quiet_share
    of the window; over it the non-decreasing fit climbs ≥ ratchet_min_climb_share of the level
    and ≥ ratchet_noise_climb × the noise, half of it in ≥ 2 sudden steps (bin-to-bin rises beyond
    the largest the bin-to-bin noise gives). `noise`: (SD share, lag-1) from elsewhere (e.g. the
    group's replicas, ratchet_noise) instead of this series' own."""
    _, med = bin_medians(t, y)
    ok = np.isfinite(med)
    med = med[ok]
    k = len(med)
    if k < 12:
        return False, ""
    sd, rho = _median_noise(med) if noise is None else (noise[0] * abs(float(np.median(y))), noise[1])
    sd = max(sd / math.sqrt(max(1 - rho, 0.05)), 1e-9 * max(level, 1.0))     # marginal, from differences
    q = math.sqrt(2 * math.log(k)) + 1
    falls = np.maximum.accumulate(med) - med
    out = np.flatnonzero(falls > q * sd * math.sqrt(2))
    first = int(out[-1]) + 1 if len(out) else 0
    window = float(t[-1] - t[0])
    quiet = window * (k - first) / k
    if first >= k - 3 or quiet < max(RULES["ratchet_min_quiet_s"], RULES["ratchet_min_quiet_share"] * window):
        return False, "released memory in its noise-level medians"
    fit = isotonic(med[first:])
    climb = float(fit[-1] - fit[0])
    if climb < max(RULES["ratchet_min_climb_share"] * level, RULES["ratchet_noise_climb"] * q * sd):
        return False, f"climbed {climb:+.1f} MB in its medians, within the noise ({sd:.1f} MB)"
    # steps: rises between the means of w bins before and after a point, beyond what the noise
    # gives there (robust spread of that difference over the window, the largest of k/w), carrying
    # half of the climb; a smooth climb or a wander rises about as much
    # everywhere and has no such peaks
    steps = _sudden_steps(med, first, sd, rho)
    if not steps or sum(steps) < 0.5 * climb:
        return False, (f"climbed {climb:.1f} MB, {len(steps)} sudden step(s) carrying {sum(steps):.1f} MB: "
                       "a smooth climb, not steps")
    return True, (f"climbed {climb:.1f} MB ({climb / level:.1%}) in steps over the last {quiet / window:.0%} of the window "
                  f"without a release beyond its noise ({sd:.1f} MB per 1/{k} of the window)")


def classify(t_s: np.ndarray, y: np.ndarray, *, verified: bool | None = True,
             growth: Growth | None = None, seed: int = 0) -> StatusCall:
    """The status word of one replica from its steady window (t_s seconds, y MB)."""
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
    rel = release_events(t_s, y, level)
    growing = bool(g is not None and g.significant and g.change_mb > 0 and g.change_share > RULES["flat_max_growth_share"] \
            and g.change_mb >= RULES["growing_min_change_mb"])
    grew = (f"grew {g.change_mb:.1f} MB ({g.change_share:.1%}) over {window:.0f} s, 95% interval "
            f"{g.change_lo:.1f}–{g.change_hi:.1f} MB" + (f", {g.pooled}" if g.pooled else "")) if growing else ""
    if growing and g.change_share >= RULES["bloating_window_share"]:
        return StatusCall("Bloating", grew, g, rel, iqr)
    ratchet, why = _ratchet(t_s, y, level, rel)
    if not ratchet:
        noisy, why_noisy = _ratchet_in_noise(t_s, y, level)
        if noisy:
            ratchet, why = True, why_noisy
    if ratchet:
        return StatusCall("Ratcheting", why, g, rel, iqr)
    if growing:
        return StatusCall("Growing", grew, g, rel, iqr)
    if iqr is not None and iqr > RULES["variable_iqr_share"]:
        return StatusCall("Variable", f"interquartile range {iqr:.0%} of the median", g, rel, iqr)
    return StatusCall("Flat", why, g, rel, iqr)
