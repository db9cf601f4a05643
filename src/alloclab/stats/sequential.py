"""Sequential stopping with a guaranteed false-stop rate.

Why alpha spending with a union bound rather than an e-process: the looks are repeated looks at
the *same* replicas, whose levels drift as the run goes on; they are not new independent samples,
so the martingale arguments behind mixture-SPRTs and e-processes do not apply. What does hold is
that each look's Welch-log test (Holm across the groups) is valid at its own level when, at that
moment, the replicas' log levels are independent within groups with a common mean under the null.
Testing look k at alpha_k with Σ alpha_k ≤ alpha then bounds the probability of *any* false stop
by alpha under arbitrary dependence between looks and under optional stopping (Bonferroni over
looks). Looks are cheap to make and costly to spend, so with elapsed time they are spent only at
doublings of the elapsed time (the information in a level grows with the window, not with the
number of peeks). Calibrated in benchmarks/calibration.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .group_tests import compare_to_baseline


@dataclass(frozen=True)
class SequentialDecision:
    stop: bool
    winner: str | None  # the group with the lowest level, shown different from the baseline
    evidence: dict[str, float]  # Holm-adjusted p of each group vs the baseline at this look
    boundary: float  # the level this look is tested at (its share of alpha)
    look: int  # index of this look (1-based); 0 when no test was spent
    reason: str


UNTIL = ("best", "every")  # what a look must show to stop (SequentialTest's until)
DECIDED = ("lower", "higher", "equivalent")  # a comparison's decided statuses (as fleet status's)


class SequentialTest:
    """Group-sequential test of "a group differs from the baseline" with Bonferroni alpha
    spending over looks: look k is tested (Holm across the groups, n_comparisons of them) at
    alpha_k, with Σ alpha_k ≤ alpha. With max_looks (known from a maximum duration:
    floor(log2(max_duration / first_look_s)) + 1), alpha_k = alpha · 2^(k−1) / (2^max_looks − 1),
    proportional to the look's elapsed time (levels get more precise as the window grows, so the
    late looks get most of alpha), and no test after the last; otherwise alpha_k = alpha / (k (k + 1)), which sums to alpha over an
    unbounded run. With elapsed_s given to update(), a look is spent at the first update at or
    after first_look_s × 2^(k−1) (first_look_s defaults to the elapsed time of the first update);
    updates in between return "continue" with the last look's p-values and spend nothing. Without
    elapsed_s every update is a look.

    look_times_s (planned before the run, e.g. doublings of the first look and a last look just
    before a planned end): look k is spent at the first update at or after look_times_s[k−1] and
    tested at alpha · t_k / Σ t (alpha in proportion to the look's elapsed time, all of it by the
    last planned look); max_looks is then their number.

    until: what a look must show to stop. "best" (run --until-significant): the lowest group is
    shown below the baseline (or every group above it). "every" (run --until-decided): every one
    of the n_comparisons groups is decided, as `fleet status` decides a comparison
    (fleet/decision.py): at a look where every group has a level, the comparison's status at the
    look's level after Holm is lower, higher, or equivalent (its ratio interval inside the ±5%
    margin), and a comparison once decided stays decided. There is no other futility bound: a
    comparison neither shown different nor equivalent stays undecided to the last look (the run
    goes on to its cap). A false decision needs a false rejection or a false equivalence at some
    look, which the same spending bounds by alpha over all looks (benchmarks/demo_stop_rule.py
    measures the "every" rule)."""

    def __init__(
        self,
        alpha: float = 0.05,
        n_comparisons: int = 1,
        *,
        max_looks: int | None = None,
        first_look_s: float | None = None,
        look_times_s: list[float] | None = None,
        until: str = "best",
    ) -> None:
        if not 0 < alpha < 1:
            raise ValueError("alpha must be between 0 and 1")
        if until not in UNTIL:
            raise ValueError(f"until must be one of {', '.join(UNTIL)}")
        self.until = until
        self.decided: dict[str, tuple[str, int, float]] = {}  # until="every": group -> (status, look, adjusted p)
        self.look_times_s = None
        if look_times_s is not None:
            times = [float(x) for x in look_times_s]
            if not times or any(x <= 0 for x in times) or any(b <= a for a, b in zip(times, times[1:])):
                raise ValueError("look_times_s must be positive and increasing")
            self.look_times_s, max_looks, first_look_s = times, len(times), times[0]
        self.alpha, self.n_comparisons, self.max_looks = alpha, max(1, int(n_comparisons)), max_looks
        self.first_look_s = first_look_s
        self.looks = 0
        self.spent = 0.0
        self._last: dict[str, float] = {}

    def next_look_s(self) -> float | None:
        """Elapsed time of the next look (None: no planned look left, or not yet anchored)."""
        if self.look_times_s is not None:
            return self.look_times_s[self.looks] if self.looks < len(self.look_times_s) else None
        if self.max_looks is not None and self.looks >= self.max_looks:
            return None
        return None if self.first_look_s is None else self.first_look_s * 2**self.looks

    def look_plan(self, unplanned: int = 4) -> list[tuple[float, float]]:
        """(elapsed seconds, level) of every planned look; without planned look times, of the first
        `unplanned` doublings (or up to max_looks) from first_look_s (0 s before it is anchored)."""
        if self.look_times_s is not None:
            times = self.look_times_s
        else:
            n = unplanned if self.max_looks is None else min(unplanned, self.max_looks)
            times = [(self.first_look_s or 0.0) * 2**k for k in range(n)]
        return [(t, self.alpha_at(k)) for k, t in enumerate(times, 1)]

    def alpha_at(self, k: int) -> float:
        if self.look_times_s is not None:
            return (
                self.alpha * self.look_times_s[k - 1] / sum(self.look_times_s) if k <= len(self.look_times_s) else 0.0
            )
        if self.max_looks is not None:  # share proportional to the look's elapsed time
            return self.alpha * 2 ** (k - 1) / (2**self.max_looks - 1) if k <= self.max_looks else 0.0
        return self.alpha / (k * (k + 1))

    def _due(self, elapsed_s: float | None) -> bool:
        if elapsed_s is None:
            return True
        if self.first_look_s is None:
            self.first_look_s = max(float(elapsed_s), 1e-9)
        if self.look_times_s is not None:
            return self.looks >= len(self.look_times_s) or elapsed_s >= self.look_times_s[self.looks]
        return elapsed_s >= self.first_look_s * 2.0**self.looks

    def update(
        self, levels_by_group: dict[str, np.ndarray], baseline: str, *, elapsed_s: float | None = None
    ) -> SequentialDecision:
        due = self._due(elapsed_s)
        if not due:  # cheap: nothing is computed or spent between looks
            return SequentialDecision(False, None, dict(self._last), 0.0, 0, "between looks: no test spent")
        k = self.looks + 1
        level = self.alpha_at(k)
        comps = compare_to_baseline(levels_by_group, baseline, alpha=level if level > 0 else self.alpha)
        # Holm at this look's level over n_comparisons (at least the groups present)
        evidence = {g: c.p_adj for g, c in comps.items() if c.p_adj is not None}
        m_present = max(1, len(evidence))
        if self.n_comparisons > m_present:  # groups not yet testable still count in the family
            evidence = {g: min(1.0, p * self.n_comparisons / m_present) for g, p in evidence.items()}
        self._last = evidence
        if level <= 0:
            return SequentialDecision(False, None, evidence, 0.0, 0, "all planned looks spent")
        self.looks += 1
        self.spent += level
        geo = {g: c.geo_mean_mb for g, c in comps.items() if c.geo_mean_mb is not None}
        shown = {g for g, p in evidence.items() if p < level}
        if not geo or baseline not in geo:
            return SequentialDecision(False, None, evidence, level, self.looks, "no baseline data yet")
        best = min(geo, key=lambda g: geo[g])
        if self.until == "every":
            return self._every_decided(comps, evidence, baseline, best, level)
        if best != baseline and best in shown and geo[best] < geo[baseline]:
            return SequentialDecision(
                True,
                best,
                evidence,
                level,
                self.looks,
                f"{best} below {baseline} at look {self.looks} (adjusted p {evidence[best]:.3g} < {level:.3g})",
            )
        others = [g for g in geo if g != baseline]
        if best == baseline and others and all(g in shown for g in others):
            return SequentialDecision(
                True,
                baseline,
                evidence,
                level,
                self.looks,
                f"every group above {baseline} at look {self.looks} (boundary {level:.3g})",
            )
        return SequentialDecision(
            False,
            None,
            evidence,
            level,
            self.looks,
            f"look {self.looks}: no group shown below the baseline at {level:.3g}",
        )

    def _every_decided(
        self, comps: dict[str, Any], evidence: dict[str, float], baseline: str, best: str, level: float
    ) -> SequentialDecision:
        """until="every": stop once each of the n_comparisons groups is decided (lower, higher or
        equivalent at some look's level, at a look where every group has a level)."""
        others = [g for g, c in comps.items() if g != baseline and c.p_adj is not None]
        missing = self.n_comparisons - len(others)  # groups with no level yet: undecided, and no decision
        if missing <= 0:  # is taken on a smaller family than planned
            for g in others:
                if g not in self.decided and comps[g].status in DECIDED:
                    self.decided[g] = (comps[g].status, self.looks, evidence[g])
        undecided = [g for g in others if g not in self.decided]
        if others and not undecided and missing <= 0:
            said = ", ".join(
                f"{g} {status} (adjusted p {p:.3g}, look {k})" for g, (status, k, p) in self.decided.items()
            )
            return SequentialDecision(
                True,
                best,
                evidence,
                level,
                self.looks,
                f"every comparison decided against {baseline} by look {self.looks}: {said}",
            )
        open_ = [f"{g} (adjusted p {evidence[g]:.3g})" for g in undecided]
        if missing > 0:
            open_.append(f"{missing} group{'s' if missing > 1 else ''} without a level")
        return SequentialDecision(
            False,
            None,
            evidence,
            level,
            self.looks,
            f"look {self.looks}: not decided at {level:.3g}: {', '.join(open_)}",
        )
