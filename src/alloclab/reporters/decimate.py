"""Series thinned for drawing: at most two points (the minimum and the maximum, in time order) per
pixel-wide bucket of time and series, so a chart of 200 replicas x 50,000 samples draws ~2,000
points per line instead of 50,000 and still shows every spike and dip (a mean or a stride would
hide them). For the PNG and HTML reporters (reporters/chartdata.thin); the analysis always uses the
full series.
"""

from __future__ import annotations

import numpy as np


def min_max(t: np.ndarray, *ys: np.ndarray, buckets: int = 1000) -> tuple[np.ndarray, ...]:
    """(t, *ys) thinned to the samples that are the first-in-time minimum or maximum of some y in
    their bucket: at most 2 x len(ys) points per bucket. Samples where a y is NaN are no extreme of
    that y. Series of at most 2 x buckets points, or with NaNs only, come back unchanged. t must be
    increasing."""
    t = np.asarray(t, dtype=float)
    ys = tuple(np.asarray(y, dtype=float) for y in ys)
    n = len(t)
    if n <= 2 * buckets or buckets < 1:
        return (t, *ys)
    span = t[-1] - t[0]
    if not span > 0:
        return (t, *ys)
    b = np.minimum(((t - t[0]) / span * buckets).astype(np.int64), buckets - 1)
    keep = [_bucket_extremes(b, y) for y in ys]
    keep = np.unique(np.concatenate(keep)) if keep else np.empty(0, np.int64)
    if not len(keep):
        return (t, *ys)
    return (t[keep], *(y[keep] for y in ys))


def _bucket_extremes(b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of each bucket's first minimum and first maximum of y (NaNs skipped)."""
    idx = np.flatnonzero(np.isfinite(y))
    if not len(idx):
        return idx
    bb, yy = b[idx], y[idx]
    # within each bucket (idx is sorted by bucket, since t is increasing): argmin and argmax
    starts = np.flatnonzero(np.r_[True, bb[1:] != bb[:-1]])
    order_min = np.lexsort((idx, yy, bb))  # by bucket, then value, then time
    order_max = np.lexsort((idx, -yy, bb))
    # sorting by bucket first keeps each bucket's rows where they were: its first row after the
    # sort is its minimum (maximum), the earliest of equals
    return np.concatenate([idx[order_min[starts]], idx[order_max[starts]]])
