"""Sequential stopping with a guaranteed false-stop rate."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SequentialDecision:
    stop: bool
    winner: str | None              # the group with the lowest level, shown different from the baseline
    evidence: dict[str, float]      # Holm-adjusted p of each group vs the baseline at this look
    boundary: float                 # the level this look is tested at (its share of alpha)
    look: int                       # index of this look (1-based); 0 when no test was spent
    reason: str


class SequentialTest:
    """Group-sequential test of "some group differs from the baseline" with Bonferroni alpha
    spending over looks: look k is tested (Holm across n_comparisons) at alpha_k, with
    Σ alpha_k ≤ alpha. With max_looks, alpha_k = alpha / max_looks; otherwise
    alpha_k = alpha / (k (k + 1)). With elapsed_s given to update(), looks are spent only at
    doublings of the elapsed time from first_look_s (updates in between return the last
    decision's evidence without spending alpha)."""

    def __init__(self, alpha: float = 0.05, n_comparisons: int = 1, *, max_looks: int | None = None,
                 first_look_s: float | None = None) -> None:
        raise NotImplementedError

    def update(self, levels_by_group: dict[str, np.ndarray], baseline: str, *,
               elapsed_s: float | None = None) -> SequentialDecision:
        raise NotImplementedError
