"""stats.group_tests: Welch on log levels, Holm-consistent intervals, letters, design checks."""

import itertools

import numpy as np
from hypothesis import given, settings, strategies as st

from alloclab.stats import compare_to_baseline, design_min_p, design_warning, letters
from alloclab.stats.group_tests import design_power
from tests import simulated_series as sim


def test_three_tor_relays_a_side_at_0_44x_are_significant():
    c = compare_to_baseline(
        {
            "glibc": np.array([100.0, 103.0, 98.0]),
            "jemalloc": np.array([43.0, 45.0, 44.5]),
            "mimalloc": np.array([99.0, 104.0, 101.0]),
        },
        "glibc",
    )
    j = c["jemalloc"]
    assert j.significant and j.status == "lower" and j.p_permutation >= 0.1
    assert 0.40 < j.ratio_ci[0] < j.ratio < j.ratio_ci[1] < 0.48
    assert c["mimalloc"].status in ("inconclusive", "equivalent") and c["mimalloc"].replicas_needed


def test_one_replica_is_untestable_never_tied():
    c = compare_to_baseline({"b": np.array([100.0, 101.0, 99.0]), "x": np.array([50.0])}, "b")["x"]
    assert not c.testable and c.status == "untestable" and c.p_adj is None and not c.significant
    assert "untestable" in design_warning({"b": 3, "x": 1}, "b")
    assert design_min_p({"b": 3, "x": 1}, "b") == 1.0


def test_family_wise_error_and_coverage():
    rng = np.random.default_rng(31)
    false = 0
    lv = [sim.replica_levels(rng, 200, 3, 1.0, 0.1, dist="heavy") for _ in range(4)]
    for i in range(200):
        cs = compare_to_baseline({f"g{k}": lv[k][i] for k in range(4)}, "g0")
        false += any(c.significant for c in cs.values())
    assert false <= 16  # ≤ 8% of 200
    a, b = sim.replica_levels(rng, 300, 5, 0.8, 0.1), sim.replica_levels(rng, 300, 5, 1.0, 0.1)
    cover = [
        lo <= 0.8 <= hi for lo, hi in (compare_to_baseline({"b": y, "a": x}, "b")["a"].ratio_ci for x, y in zip(a, b))
    ]
    assert np.mean(cover) >= 0.92


def test_equivalence_is_claimed_only_inside_the_margin():
    c = compare_to_baseline(
        {"b": np.array([100.0, 100.5, 99.5, 100.2, 99.8]), "a": np.array([100.1, 99.9, 100.4, 99.7, 100.0])}, "b"
    )["a"]
    assert c.equivalent and c.status == "equivalent" and c.ratio_ci[0] >= 1 / 1.05 and c.ratio_ci[1] <= 1.05
    rng = np.random.default_rng(32)
    a, b = sim.replica_levels(rng, 200, 5, 1.06, 0.03), sim.replica_levels(rng, 200, 5, 1.0, 0.03)
    assert sum(compare_to_baseline({"b": y, "a": x}, "b")["a"].equivalent for x, y in zip(a, b)) <= 10


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(10, 1000), min_size=2, max_size=6), min_size=2, max_size=4))
def test_interval_excludes_one_exactly_when_significant(groups):
    levels = {f"g{i}": np.array(v) for i, v in enumerate(groups)}
    for c in compare_to_baseline(levels, "g0").values():
        if c.ratio_ci is not None:
            excludes = c.ratio_ci[0] > 1 or c.ratio_ci[1] < 1
            # equal only up to rounding at the boundary
            if abs(c.p_adj - 0.05) > 1e-9:
                assert excludes == c.significant, c


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(10, 1000), min_size=1, max_size=5), min_size=2, max_size=5))
def test_letters_never_chain(groups):
    from alloclab.stats.group_tests import _clean, _pairwise_significant

    levels = {f"g{i}": np.array(v) for i, v in enumerate(groups)}
    lt = letters(levels)
    sig = _pairwise_significant({g: _clean(v) for g, v in levels.items()}, 0.05)
    for a, b in itertools.combinations(levels, 2):
        share = bool(set(lt[a]) & set(lt[b]))
        assert share == (frozenset((a, b)) not in sig), (lt, sig)


def test_design_checks():
    assert design_min_p((4, 3)) == 0.0
    assert abs(design_min_p((4, 3), method="permutation") - 3 * 2 / 20) < 1e-12  # Holm factor 3 × 2/C(6,3)
    # 3 replicas per group of 4: fine for relays 3% apart, not for relays 20% apart (issue 29)
    assert design_warning((4, 3), cv=0.03) is None
    w = design_warning((4, 3))
    assert "differ by 20%" in w and "about 18% of runs" in w and "about 9 replicas per group" in w, w
    assert design_warning((4, 9)) is None
    assert design_power(3, 3, 0.7, 0.2, gamma=0.05 / 3) < design_power(9, 9, 0.7, 0.2, gamma=0.05 / 3)
    assert "2 replicas" in design_warning({"a": 2, "b": 3}, "b")


def test_letters_without_any_data_give_no_letters():
    from alloclab.stats import letters

    assert letters({"a": np.array([]), "b": np.array([])}) == {"a": "", "b": ""}
