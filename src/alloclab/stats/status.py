"""Status words of one replica's steady window.

Rules, in STATUS_ORDER order (thresholds in RULES, see docs/method/index.md):
- Unverified: the replica did not run the group's allocator.
- Too short: fewer than min_samples samples or a window shorter than min_window_s.
- Bloating: growing (below) by ≥ bloating_window_share of the level within the window.
- Growing in steps (the shape "steps"; the word retired as "Ratcheting"): climbing in steps without
  giving back (stats.steps: step_fit, ratchet_in_noise): a
  piecewise-constant mean fitted under AR(1) noise by generalised least squares has
  ≥ ratchet_min_steps up-steps, all steps together ≥ ratchet_min_climb_share of the level, no down-step of
  ≥ ratchet_max_drawdown of that climb, and one step sharper than a smooth curve explains
  (t ≥ ratchet_step_t / ratchet_sharp_t). A flat series has no such steps; a cycle gives back; a
  smooth leak or a slow wander has no sharp step (it is Growing, or nothing); a tor-dircache
  staircase has all of these. Checked before Growing because it is the more specific diagnosis:
  the word is Growing, StatusCall.shape "steps" (status_phrase: "Growing in steps"); the action for
  an operator is the same as for any growth. In a group of ≥ ratchet_group_min_replicas,
  steps.ratchet_group also lends the replicas each other's step evidence, each against its own
  simulated null (analysis re-words Growing/Variable/Flat replicas with it).
- Growing: the change over the window (growth()) has a 95% interval above zero, is
  > growth_bar_share of the level (5% of the level, or over a day or more 2% a day where that is
  lower: a rate) and ≥ growing_min_change_mb.
- Variable: IQR > variable_iqr_share of the median.
- Flat: none of the above.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .growth import (
    Growth,
    change_phrase,
    growth as _growth,
    growth_bar_share,
    rate_phrase,
)
from .rules import RULES
from .steps import StepEvidence, robust_sd, step_evidence_at

STATUS_ORDER = ["Unverified", "Too short", "Bloating", "Growing", "Variable", "Flat"]
GROWTH_WORDS = ("Growing", "Bloating")  # the words of a series that climbs ("Growing in steps" is Growing, shape STEPS)
STEPS = "steps"  # StatusCall.shape / the reports' growth_shape: Growing, and the step evidence holds


def status_phrase(word: str, shape: str | None = None) -> str:
    """The status as an operator reads it: the word, with the qualifier "in steps" on a Growing
    series whose step evidence holds ("Growing in steps"). Every reporter shows this."""
    return f"{word} in steps" if word == "Growing" and shape == STEPS else word


@dataclass(frozen=True)
class Releases:
    count: int  # release events in the window
    largest_mb: float  # the largest fall from a running peak (counted or not)
    threshold_mb: float  # the fall that counts as a release here
    last_release_s: float | None  # time (from window start) of the last release's trough, None if none
    quiet_s: float  # time from the last release's trough (or window start) to the window end


@dataclass(frozen=True)
class StatusCall:
    word: str  # one of STATUS_ORDER
    reason: str  # plain words: which rule fired and on what figures
    growth: Growth | None
    releases: Releases | None
    iqr_share: float | None
    ratchet: StepEvidence | None = (
        None  # the step fit and its verdict (None: not reached), for classify(earlier=) and ratchet_group
    )
    shape: str | None = None  # STEPS: Growing in steps (the step evidence holds); None otherwise


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
            med[k] = np.median(y[order[bounds[k] : bounds[k + 1]]])
    return idx, med


def noise_mb(t: np.ndarray, y: np.ndarray) -> float:
    """Robust short-term noise: MAD of the deviations from the median of each sample's time bin
    (1/50 of the window), so steps and slow trends are not noise."""
    if len(y) < 8:
        return 0.0
    idx, med = bin_medians(t, y)
    return robust_sd(y - med[idx])


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
    # alternately outside a release (the running peak since the last one ended) and in one (the
    # running trough since it began), each scanned with numpy over chunks that double: about one
    # pass over the samples (the per-sample loop it replaces: 7–13 ms a 9-day 15-s window)
    count, largest, last = 0, 0.0, None  # last: the index of the last release's trough
    i, peak = 0, float(y[0])
    while True:
        start_at, peak, fall = _until_fall(y, i, peak, thr)
        largest = max(largest, fall)
        if start_at is None:
            break
        count += 1
        end_at, trough, last = _until_climb(y, start_at, thr)
        largest = max(largest, peak - trough)
        if end_at is None:
            break
        i, peak = end_at + 1, float(y[end_at])
    start, stop = float(t_s[0]), float(t_s[-1])
    last_t = None if last is None else float(t_s[last])
    return Releases(
        count,
        float(largest),
        float(thr),
        None if last_t is None else last_t - start,
        stop - (start if last_t is None else last_t),
    )


def _chunks(n: int, i: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of chunks from i to n, each twice the last: a scan that stops early reads
    little, one that runs to the end reads every sample once."""
    w = 256
    while i < n:
        yield i, min(i + w, n)
        i, w = i + w, w * 2


def _until_fall(y: np.ndarray, i: int, peak: float, thr: float) -> tuple[int | None, float, float]:
    """From index i with this running peak: the first index whose fall below the running peak is
    ≥ thr (None: none), the peak there (or at the end), and the largest fall up to it."""
    largest = 0.0
    for a, b in _chunks(len(y), i):
        seg = y[a:b]
        run = np.maximum(np.maximum.accumulate(seg), peak)
        fall = run - seg
        hit = np.flatnonzero(fall >= thr)
        k = int(hit[0]) + 1 if hit.size else len(seg)
        largest = max(largest, float(fall[:k].max()))
        peak = float(run[k - 1])
        if hit.size:
            return a + k - 1, peak, largest
    return None, peak, largest


def _until_climb(y: np.ndarray, i: int, thr: float) -> tuple[int | None, float, int]:
    """A release that began at index i: the first later index that climbs ≥ thr above the running
    trough (None: none), the trough, and the index where it was first reached."""
    trough, at = float(y[i]), i
    for a, b in _chunks(len(y), i + 1):
        seg = y[a:b]
        run = np.minimum(np.minimum.accumulate(seg), trough)
        hit = np.flatnonzero(seg >= run + thr)
        k = int(hit[0]) if hit.size else len(seg)
        if k:
            low = int(np.argmin(seg[:k]))
            if seg[low] < trough:
                trough, at = float(seg[low]), a + low
        if hit.size:
            return a + k, trough, at
    return None, trough, at


def classify(
    t_s: np.ndarray,
    y: np.ndarray,
    *,
    verified: bool | None = True,
    growth: Growth | None = None,
    seed: int = 0,
    earlier: StatusCall | None = None,
) -> StatusCall:
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
    growing = bool(
        g is not None
        and g.significant
        and g.change_mb > 0
        and g.change_share > growth_bar_share(window)
        and g.change_mb >= RULES["growing_min_change_mb"]
    )
    grown = g if growing else None
    rate = rate_phrase(grown.change_share, *_share_interval(grown), window) if grown is not None else ""
    grew = (
        (
            f"grew {grown.change_mb:.1f} MB ({grown.change_share:.1%}) over {window:.0f} s, 95% interval "
            f"{grown.change_lo:.1f}–{grown.change_hi:.1f} MB"
            + (f", {rate}" if rate else "")
            + (f", {grown.pooled}" if grown.pooled else "")
        )
        if grown is not None
        else ""
    )
    if grown is not None and grown.change_share >= RULES["bloating_window_share"]:
        return StatusCall("Bloating", grew, g, rel, iqr, known)
    ratchet = known or step_evidence_at(t_s, y, level)
    if ratchet.ratcheting:
        return StatusCall("Growing", ratchet.reason, g, rel, iqr, ratchet, STEPS)
    if growing:
        return StatusCall("Growing", grew, g, rel, iqr, ratchet)
    if iqr is not None and iqr > RULES["variable_iqr_share"]:
        return StatusCall("Variable", f"interquartile range {iqr:.0%} of the median", g, rel, iqr, ratchet)
    return StatusCall(
        "Flat", "; ".join(x for x in (_not_growing(g, window), ratchet.reason) if x), g, rel, iqr, ratchet
    )


def _share_interval(g: Growth) -> tuple[float | None, float | None]:
    """g's change interval as shares of its level (None: no interval)."""
    if g.change_lo is None or g.change_hi is None or not g.level_mb:
        return None, None
    return g.change_lo / g.level_mb, g.change_hi / g.level_mb


def _not_growing(g: Growth | None, window_s: float = 0.0) -> str:
    """Why a replica's change is not Growing, for its Flat word: a +8% staircase in 2% AR(1) noise
    over 1.5 days is Flat on its own interval in about 7 of 10 replicas, and "Flat" beside a climb
    of 8% read as a contradiction until the reason said its interval spans zero."""
    if g is None:
        return ""
    if not g.significant:
        why = "not shown beyond its noise"
    elif g.change_mb <= 0:
        why = "a fall, not growth"
    else:
        bar = growth_bar_share(window_s)
        rate = rate_phrase(g.change_share, *_share_interval(g), window_s)
        why = (
            f"under the {bar:.1%} of the level and {RULES['growing_min_change_mb']:g} MB that Growing needs over this window"
            + (
                f" (a rate of {rate}; the bar: {RULES['growing_min_rate_share_day']:.0%}/day over a day or more, "
                f"at most {RULES['flat_max_growth_share']:.0%})"
                if rate
                else ""
            )
        )
    return f"{change_phrase(g)}: {why}"
