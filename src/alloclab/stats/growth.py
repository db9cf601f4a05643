"""Growth over a steady window, with an interval that survives autocorrelation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rules import RULES


@dataclass(frozen=True)
class Growth:
    window_s: float            # length of the window analysed
    n: int                     # samples in it
    level_mb: float            # median level (the denominator of change_share)
    change_mb: float           # Theil–Sen slope × window
    change_lo: float | None    # 95% interval of the change (None: too few independent batches)
    change_hi: float | None
    change_share: float        # change_mb / level_mb
    rate_mb_h: float | None    # only where the window supports a rate (RULES rate_min_*)
    rate_lo: float | None
    rate_hi: float | None
    significant: bool          # the interval excludes 0
    blocks: int                # independent batches the interval rests on
    tau_s: float               # estimated autocorrelation time of the residuals, seconds


def growth(t_s: np.ndarray, y: np.ndarray, *, level: float | None = None, seed: int = 0) -> Growth | None:
    """Change of y over the window t_s (seconds, increasing). None when fewer than
    RULES["min_samples"] finite samples or a zero-length window. `seed` is accepted for API
    stability (the interval is analytic, not resampled)."""
    raise NotImplementedError
