"""The same groups in two runs: run B against run A, group by group (replicas are the units).

The pieces of `compare_to_baseline`, arranged for pairs: each group of B is tested against the
same group of A with Welch's t on log levels, Holm across the groups, the ratio B/A with its
interval at each group's Holm level (so it excludes 1 exactly when the adjusted p is below
alpha), equivalence within the margin. `gate` is the CI gate on top of it (three outcomes),
`rose_beyond` its "shown above" half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy import special

from .group_tests import Comparison, _clean, holm, holm_levels, settle, test_pair


def compare_pairs(
    pairs: dict[str, tuple[np.ndarray, np.ndarray]], *, alpha: float = 0.05, margin: float = 0.05, seed: int = 0
) -> dict[str, Comparison]:
    """pairs: group -> (levels in run A, levels in run B), MB per replica. Returns B's comparison
    with A per group (ratio = geometric mean B / A). A side with fewer than 2 replicas is
    "untestable", never "no change"."""
    rng = np.random.default_rng(seed)
    out: dict[str, Comparison] = {}
    tests = {}
    for g, (a_raw, b_raw) in pairs.items():
        a, b = _clean(a_raw), _clean(b_raw)
        c = Comparison(
            g,
            len(b),
            float(np.exp(np.log(b).mean())) if len(b) else None,
            float(b.mean()) if len(b) else None,
            margin=margin,
        )
        out[g] = c
        w = test_pair(c, b, a, rng, ("run B", "run A"), f"a change of {g} cannot be tested")
        if c.testable:
            tests[g] = w
    tested = [g for g in out if out[g].testable]
    p = [cast(float, out[g].p_raw) for g in tested]  # testable: p_raw is set
    for g, pa, gam in zip(tested, holm(p), holm_levels(p, alpha)):
        settle(out[g], tests[g], pa, gam, alpha, margin)
    return out


def rose_beyond(c: Comparison, pct: float) -> bool:
    """The CI gate: True when the lower end of the ratio interval (at the group's Holm level) lies
    above 1 + pct/100, i.e. the data exclude every increase of pct% or less. A one-sided test of
    "rose by at most pct%" at level (Holm level)/2, so a change of exactly pct% trips it in at most
    alpha/2 of runs; "significant and point estimate above 1 + pct" would trip it in about half of them."""
    if c.ratio_ci is None or not c.testable:
        return False
    return c.ratio_ci[0] > 1 + pct / 100 and not math.isclose(c.ratio_ci[0], 1 + pct / 100)


GATE_OUTCOMES = ("within", "above", "inconclusive")
GATE_POWER = 0.8  # the power at which the smallest detectable increase is stated


@dataclass(frozen=True)
class GateResult:
    outcome: str  # within | above | inconclusive
    limit: float  # 1 + pct/100
    upper_pct: float | None  # the interval rules out increases above this (%), None: no interval
    detectable_pct: float | None  # smallest true increase (%) this spread would show above the limit 80% of the time
    reason: str  # one plain line: why this outcome


def log_se(c: Comparison) -> float | None:
    """The standard error of the log ratio, recovered from the interval at the group's Holm level."""
    if c.ratio_ci is None or c.ci_level is None or c.df is None:
        return None
    half = (math.log(c.ratio_ci[1]) - math.log(c.ratio_ci[0])) / 2
    return half / float(special.stdtrit(c.df, 1 - (1 - c.ci_level) / 2))


def smallest_detectable(c: Comparison, pct: float, power: float = GATE_POWER) -> float | None:
    """The smallest true increase (percent) that the gate would show above 1 + pct/100 with the
    given power, for replicas as spread as these (the same df and Holm level): log r = log limit +
    (t_{1-γ/2} + t_power)·se. None when the comparison has no interval."""
    se = log_se(c)
    if se is None or c.ci_level is None:  # (no se without a ci_level)
        return None
    gamma = 1 - c.ci_level
    t = float(special.stdtrit(c.df, 1 - gamma / 2)) + float(special.stdtrit(c.df, power))
    return 100 * (math.exp(math.log1p(pct / 100) + t * se) - 1)


def gate(c: Comparison, pct: float) -> GateResult:
    """The CI gate on one group, three outcomes: "above" when the whole ratio interval lies above
    1 + pct/100 (rose_beyond), "within" when the whole interval lies at or below it (the data rule
    out any increase beyond pct%: a one-sided test at half the Holm level, as "above" is), and
    "inconclusive" otherwise: the interval straddles the limit, or there is no interval (fewer than
    2 usable replicas, or no spread at all). Calibration: benchmarks/compare_gate.py, docs/how-to/compare.md."""
    limit = 1 + pct / 100
    if not c.testable or c.ratio_ci is None:
        why = "; ".join(c.notes) or "no interval"
        return GateResult("inconclusive", limit, None, None, f"cannot be tested ({why})")
    lo, hi = c.ratio_ci
    upper, detect = 100 * (hi - 1), smallest_detectable(c, pct)
    if rose_beyond(c, pct):
        return GateResult("above", limit, upper, detect, f"the whole interval {lo:.3f}–{hi:.3f} lies above {limit:g}")
    if hi <= limit or math.isclose(hi, limit):
        return GateResult("within", limit, upper, detect, f"the interval rules out increases above {upper:+.1f}%")
    return GateResult(
        "inconclusive",
        limit,
        upper,
        detect,
        f"the interval {lo:.3f}–{hi:.3f} reaches past {limit:g}: it allows increases up to {upper:+.1f}%",
    )
