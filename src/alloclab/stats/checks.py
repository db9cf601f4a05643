"""Data checks that are statistics: one process sampled under two names."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .rules import RULES


@dataclass(frozen=True)
class SeriesMatch:
    shared: int  # shared timestamps
    equal: int  # of which the values are equal
    share: float  # equal / shared
    identical: bool  # the verdict of the rule

    def __bool__(self) -> bool:
        return self.identical


def identical_series(a_t: np.ndarray, a_y: np.ndarray, b_t: np.ndarray, b_y: np.ndarray) -> SeriesMatch:
    """Two series are one process sampled twice when they share ≥ identical_min_shared
    timestamps, are equal at ≥ identical_min_share of them, and the equal values take
    ≥ identical_min_distinct distinct values (moving together, not two plateaus). Two distinct
    processes coincide now and then (5 of 12,960 timestamps is chance); one process read twice
    agrees almost everywhere."""
    a_t, a_y = np.asarray(a_t, dtype=float), np.asarray(a_y, dtype=float)
    b_t, b_y = np.asarray(b_t, dtype=float), np.asarray(b_y, dtype=float)
    _, ia, ib = np.intersect1d(a_t, b_t, return_indices=True)
    shared = len(ia)
    eq = a_y[ia] == b_y[ib]
    equal = int(eq.sum())
    share = equal / shared if shared else 0.0
    identical = (
        shared >= RULES["identical_min_shared"]
        and share >= RULES["identical_min_share"]
        and len(np.unique(a_y[ia][eq])) >= RULES["identical_min_distinct"]
    )
    return SeriesMatch(shared, equal, float(share), bool(identical))


def median_present(values: Iterable[float | None]) -> float | None:
    """Median of the values that are there (None and NaN left out); None when none is."""
    v = [float(x) for x in values if x is not None]
    v = [x for x in v if x == x]  # NaN is the one value not equal to itself
    return float(np.median(v)) if v else None
