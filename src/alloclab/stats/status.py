"""Status words of one replica's steady window."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .growth import Growth, growth as _growth
from .rules import RULES

STATUS_ORDER = ["Unverified", "Too short", "Bloating", "Growing", "Ratcheting", "Variable", "Flat"]


@dataclass(frozen=True)
class Releases:
    count: int                 # release events in the window
    largest_mb: float          # the largest fall from a running peak
    threshold_mb: float        # the fall that counts as a release here
    last_release_s: float | None   # time (from window start) of the last release, None if none
    quiet_s: float             # time from the last release (or window start) to the window end


@dataclass(frozen=True)
class StatusCall:
    word: str                  # one of STATUS_ORDER
    reason: str                # plain words: which rule fired and on what figures
    growth: Growth | None
    releases: Releases | None
    iqr_share: float | None


def release_events(t_s: np.ndarray, y: np.ndarray, level: float) -> Releases:
    """Release events in a window: falls from the running peak (since the previous release) of at
    least max(RULES release_min_mb, release_min_share × level, release_noise_k × noise), where
    noise is a robust estimate of the sample-to-sample noise. A fall counts however many samples
    it spans, so the count does not depend on the sampling interval."""
    raise NotImplementedError


def classify(t_s: np.ndarray, y: np.ndarray, *, verified: bool | None = True,
             growth: Growth | None = None, seed: int = 0) -> StatusCall:
    """The status word of one replica from its steady window (t_s seconds, y MB). Rules in
    STATUS_ORDER order; see RULES and docs/analysis.md."""
    raise NotImplementedError
