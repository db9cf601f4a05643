"""The same groups in two runs: run B against run A, group by group (replicas are the units).

The pieces of `compare_to_baseline`, arranged for pairs: each group of B is tested against the
same group of A with Welch's t on log levels, Holm across the groups, the ratio B/A with its
interval at each group's Holm level (so it excludes 1 exactly when the adjusted p is below
alpha), equivalence within the margin. `rose_beyond` is the CI gate on top of it.
"""
from __future__ import annotations

import math

import numpy as np

from .compare import Comparison, _clean, holm, holm_levels, settle, test_pair


def compare_pairs(pairs: dict[str, tuple[np.ndarray, np.ndarray]], *, alpha: float = 0.05, margin: float = 0.05,
                  seed: int = 0) -> dict[str, Comparison]:
    """pairs: group -> (levels in run A, levels in run B), MB per replica. Returns B's comparison
    with A per group (ratio = geometric mean B / A). A side with fewer than 2 replicas is
    "untestable", never "no change"."""
    rng = np.random.default_rng(seed)
    out: dict[str, Comparison] = {}
    tests = {}
    for g, (a_raw, b_raw) in pairs.items():
        a, b = _clean(a_raw), _clean(b_raw)
        c = Comparison(g, len(b), float(np.exp(np.log(b).mean())) if len(b) else None,
                       float(b.mean()) if len(b) else None, margin=margin)
        out[g] = c
        w = test_pair(c, b, a, rng, ("run B", "run A"), f"a change of {g} cannot be tested")
        if c.testable:
            tests[g] = w
    tested = [g for g in out if out[g].testable]
    p = [out[g].p_raw for g in tested]
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
