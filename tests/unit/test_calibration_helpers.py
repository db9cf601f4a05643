"""The calibration's own statistics (benchmarks/calibration.py): the grouped interval the group
routes' detection rows carry, and the ungated null behind --part ratchet-combine. Seeded."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import calibration as cal  # noqa: E402

from alloclab.stats import calibration as sim, step_evidence  # noqa: E402
from alloclab.stats.status import _group_shape, _null_p  # noqa: E402


def test_grouped_rate_widens_with_calls_that_come_by_group():
    def interval(text: str) -> tuple[float, float]:
        lo, hi = text.split("[")[1].split("]")[0].split("–")
        return float(lo.rstrip("%")), float(hi.rstrip("%"))
    scattered = [1] * 50 + [2] * 50                  # 150 of 500, spread over every group
    clustered = [5] * 30 + [0] * 70                  # 150 of 500, whole groups
    lo_s, hi_s = interval(cal.grouped_rate(scattered, 5))
    lo_c, hi_c = interval(cal.grouped_rate(clustered, 5))
    assert "design effect 1.0" in cal.grouped_rate(scattered, 5)
    assert hi_c - lo_c > 1.8 * (hi_s - lo_s)
    assert lo_c < 30.0 < hi_c
    # no call at all: bounded as if each group were one trial (100 groups), not 500 replicas; one
    # call more never narrows the interval
    none, one = interval(cal.grouped_rate([0] * 100, 5)), interval(cal.grouped_rate([1] + [0] * 99, 5))
    assert none[1] > 3.0 and one[1] >= none[1]
    assert "design effect 5.0" in cal.grouped_rate(clustered, 5)      # never above the group's size


def test_an_ungated_null_counts_at_least_the_simulations_the_gated_one_counts():
    t = sim.times(1.5 * 86400, 600.0)
    rng = np.random.default_rng(3)
    pairs = []
    for y in sim.staircase(rng, 12, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9):
        e = step_evidence(t, y)
        if e.fit is None or not _group_shape(e.fit):
            continue
        # the same simulations (one seed): the ungated null counts every one the gated null counts
        pairs.append((_null_p(e.x, e.fit.sharp_t, np.random.default_rng(11), 99)[0],
                      _null_p(e.x, e.fit.sharp_t, np.random.default_rng(11), 99, gated=False)[0]))
    assert len(pairs) >= 4 and all(ungated >= gated for gated, ungated in pairs)
    # and some simulations as sharp as the data lack the staircase's shape: the gate is applied
    assert sum(ungated > gated for gated, ungated in pairs) >= 2, pairs
