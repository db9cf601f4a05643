"""Is a candidate's level above a known-good one's times a threshold ratio? Decided sequentially.

`alloclab bisect` asks this at every step. It is `SequentialTest` (the rule of `run
--until-significant`: Welch's t on log levels, Bonferroni alpha spending over looks at doublings
of the elapsed time) applied to the candidate's levels divided by the threshold, against the good
group's: dividing by the threshold moves the null hypothesis from "ratio = 1" to "ratio =
threshold", so the same valid test, with the same guarantee, answers

- "bad"  — the ratio candidate/good is shown above the threshold (the baseline, good, is shown
  below candidate/threshold);
- "good" — the ratio is shown below the threshold;
- nothing yet — neither at this look's share of alpha: the run goes on, and at the end of the
  planned looks the step is "undecided" (never guessed).

Each wrong call (bad when the true ratio is at or below the threshold, good when it is at or above)
has probability ≤ alpha whatever the dependence between looks. Calibrated in
benchmarks/bisect_calibration.py (docs/method/index.md, calibration table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sequential import SequentialTest

GOOD, CANDIDATE = "good", "candidate"


@dataclass(frozen=True)
class ThresholdDecision:
    verdict: str | None  # "bad", "good", or None (no decision at this look)
    ratio: float | None  # geometric-mean ratio candidate / good
    p: float | None  # adjusted p of "ratio = threshold" at this look
    boundary: float  # this look's share of alpha (0: between looks)
    look: int  # 1-based; 0 when no test was spent
    reason: str


def _geo(a: np.ndarray) -> float | None:
    a = np.asarray(a, dtype=float)
    a = a[np.isfinite(a) & (a > 0)]
    return float(np.exp(np.log(a).mean())) if len(a) else None


class ThresholdTest:
    """Sequential test of candidate/good against `threshold` (> 0), family-wise error ≤ alpha."""

    def __init__(
        self, threshold: float, alpha: float = 0.05, *, max_looks: int | None = None, first_look_s: float | None = None
    ) -> None:
        if not threshold > 0:
            raise ValueError("threshold must be positive")
        self.threshold = float(threshold)
        self.test = SequentialTest(alpha=alpha, n_comparisons=1, max_looks=max_looks, first_look_s=first_look_s)

    @property
    def looks(self) -> int:
        return self.test.looks

    def due(self, elapsed_s: float) -> bool:
        """Whether a look would be spent at this elapsed time (callers skip the analysis otherwise)."""
        first = self.test.first_look_s
        return first is None or elapsed_s >= first * 2**self.test.looks

    def update(self, good: np.ndarray, candidate: np.ndarray, *, elapsed_s: float | None = None) -> ThresholdDecision:
        good, candidate = np.asarray(good, dtype=float), np.asarray(candidate, dtype=float)
        g, c = _geo(good), _geo(candidate)
        ratio = c / g if g and c else None
        d = self.test.update({GOOD: good, CANDIDATE: candidate / self.threshold}, GOOD, elapsed_s=elapsed_s)
        p = d.evidence.get(CANDIDATE)
        shown = f"ratio {ratio:.3f}" if ratio is not None else "no ratio yet"
        if not d.stop:
            why = (
                f"adjusted p {p:.3g} at look {d.look}, which is tested at {d.boundary:.3g}"
                if d.look and p is not None
                else d.reason
            )
            return ThresholdDecision(
                None, ratio, p, d.boundary, d.look, f"{shown}: not shown above or below ×{self.threshold:g} ({why})"
            )
        verdict = "good" if d.winner == CANDIDATE else "bad"
        side = "below" if verdict == "good" else "above"
        return ThresholdDecision(
            verdict,
            ratio,
            p,
            d.boundary,
            d.look,
            f"{shown} shown {side} ×{self.threshold:g} at look {d.look} (adjusted p {p:.3g} < {d.boundary:.3g})",
        )
