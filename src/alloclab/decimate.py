"""Series thinned for drawing: at most two points (the minimum and the maximum, in time order) per
pixel-wide bucket of time, so a chart of 200 replicas x 50,000 samples draws ~2,000 points per
line instead of 50,000 and still shows every spike and dip (a mean or a stride would hide them).
For the PNG and HTML reporters; the analysis always uses the full series.
"""
from __future__ import annotations

import numpy as np


def min_max(t: np.ndarray, y: np.ndarray, buckets: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(t, y) thinned to the first-in-time of each bucket's minimum and maximum; series of at most
    2 x buckets points, or with NaNs only, come back unchanged. t must be increasing."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    n = len(t)
    if n <= 2 * buckets or buckets < 1:
        return t, y
    span = t[-1] - t[0]
    if not span > 0:
        return t, y
    b = np.minimum(((t - t[0]) / span * buckets).astype(np.int64), buckets - 1)
    finite = np.isfinite(y)
    if not finite.any():
        return t, y
    idx = np.flatnonzero(finite)
    bb, yy = b[idx], y[idx]
    # within each bucket (idx is sorted by bucket, since t is increasing): argmin and argmax
    starts = np.flatnonzero(np.r_[True, bb[1:] != bb[:-1]])
    order_min = np.lexsort((idx, yy, bb))             # by bucket, then value, then time
    order_max = np.lexsort((idx, -yy, bb))
    # sorting by bucket first keeps each bucket's rows where they were: its first row after the
    # sort is its minimum (maximum), the earliest of equals
    lo = idx[order_min[starts]]
    hi = idx[order_max[starts]]
    keep = np.unique(np.concatenate([lo, hi]))
    return t[keep], y[keep]
