"""Data checks that are statistics: one process sampled under two names."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rules import RULES


@dataclass(frozen=True)
class SeriesMatch:
    shared: int        # shared timestamps
    equal: int         # of which the values are equal
    share: float       # equal / shared
    identical: bool    # the verdict of the rule

    def __bool__(self) -> bool:
        return self.identical


def identical_series(a_t: np.ndarray, a_y: np.ndarray, b_t: np.ndarray, b_y: np.ndarray) -> SeriesMatch:
    """Two series are one process sampled twice when they share ≥ identical_min_shared
    timestamps, are equal at ≥ identical_min_share of them, and the equal values take
    ≥ identical_min_distinct distinct values (moving together, not two plateaus)."""
    raise NotImplementedError
