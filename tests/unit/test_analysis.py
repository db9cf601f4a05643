"""Estimators and rules on synthetic series with known truth (property-based where it fits)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from alloclab import analysis
from alloclab.analysis import RULES, ReplicaStats, Series, classify, replica_stats


def series(y: np.ndarray, dt: float = 60.0, phase: str = "load", name: str = "r") -> Series:
    n = len(y)
    t = 1_700_000_000 + np.arange(n) * dt
    nan = np.full(n, np.nan)
    return Series(1, name, "g", True, t, np.asarray(y, float), np.array([phase] * n, dtype=object), nan, nan,
                  np.zeros(n), float(t[0]))


@settings(max_examples=150, deadline=None)
@given(level=st.floats(100, 5000), slope_share=st.floats(-0.5, 2.0), noise_share=st.floats(0, 0.03),
       n=st.integers(30, 200), outlier_share=st.floats(0, 0.1), seed=st.integers(0, 2**32 - 1))
def test_theil_sen_recovers_the_slope(level, slope_share, noise_share, n, outlier_share, seed):
    """Within 0.5% of the level per hour plus 10% of the slope, despite noise and 10% outliers."""
    rng = np.random.default_rng(seed)
    t_h = np.arange(n) / 10.0                       # 6-minute samples
    slope = slope_share * level / (t_h[-1] or 1)    # total change: slope_share of the level
    y = level + slope * t_h + rng.normal(0, noise_share * level, n)
    k = int(outlier_share * n)
    idx = rng.choice(n, k, replace=False)
    y[idx] += rng.choice([-1, 1], k) * level * rng.uniform(0.2, 1.0, k)
    est, lo, hi = analysis.theil_sen(t_h, y)
    assert abs(est - slope) <= 0.005 * level + 0.1 * abs(slope) + 6 * noise_share * level / t_h[-1]
    assert lo <= est <= hi


@settings(max_examples=60, deadline=None)
@given(plateau=st.floats(50, 2000), ramp=st.integers(3, 15), seed=st.integers(0, 2**32 - 1))
def test_warmup_is_excluded_and_the_plateau_found(plateau, ramp, seed):
    rng = np.random.default_rng(seed)
    n = 60
    y = plateau * (1 - np.exp(-np.arange(n) / ramp * 3)) + rng.normal(0, 0.01 * plateau, n)
    r = replica_stats(series(y))
    assert r.steady_mb == pytest.approx(plateau, rel=0.05)
    assert r.warmup_end_s > 0


def test_growing_false_positive_rate_on_flat_noisy_series():
    """Documented level (docs/analysis.md): under 5% of flat series are called Growing or worse."""
    rng = np.random.default_rng(42)
    calls = 0
    trials = 400
    for _ in range(trials):
        y = 1000 + rng.normal(0, 30, 72) + 20 * np.sin(np.arange(72) / 5 + rng.uniform(0, 6))   # noise + wobble
        calls += replica_stats(series(y)).status in ("Growing", "Bloating")
    assert calls / trials < 0.05, calls / trials


def test_growth_and_bloat_are_called():
    n = 72
    t = np.arange(n)
    assert replica_stats(series(1000 + 2.0 * t)).status == "Growing"          # +14% over the window
    assert replica_stats(series(1000 + 8.0 * t)).status == "Bloating"         # +57%
    assert replica_stats(series(1000 + 0.2 * t + np.random.default_rng(1).normal(0, 1, n))).status != "Growing"


def test_ratcheting_and_release_events():
    stairs = np.repeat([100, 100, 130, 130, 160, 160, 180, 180, 200, 200, 200, 200.0], 3)
    r = replica_stats(series(stairs))
    assert r.release_events == 0 and r.status in ("Ratcheting", "Growing", "Bloating")
    flat_ratchet = np.concatenate([np.linspace(100, 150, 10), np.full(30, 150.0)])
    assert replica_stats(series(flat_ratchet)).status == "Ratcheting"
    saw = np.tile(np.concatenate([np.linspace(100, 200, 10), [100.0]]), 4)
    r = replica_stats(series(saw))
    assert r.release_events == 4 and r.largest_release_mb == pytest.approx(100) and r.status != "Ratcheting"


def test_idle_release():
    load = np.full(20, 500.0)
    idle = np.concatenate([np.full(3, 500.0), np.linspace(500, 200, 5), np.full(12, 200.0)])
    s = series(np.concatenate([load, idle]))
    s.phase = np.array(["load"] * 20 + ["idle"] * 20, dtype=object)
    r = replica_stats(s)
    assert r.end_of_load_mb == 500 and r.idle_final_mb == 200
    assert r.idle_released_share == pytest.approx(0.6)
    assert r.idle_half_release_s == pytest.approx(5 * 60)


def test_permutation_test_exact_values():
    rng = np.random.default_rng(0)
    a, b = np.array([1.0, 2, 3, 4, 5]), np.array([11.0, 12, 13, 14, 15])
    p, pmin = analysis.permutation_test(a, b, rng)
    assert p == pytest.approx(2 / 252) and pmin == pytest.approx(2 / 252)
    p, _ = analysis.permutation_test(a, a.copy(), rng)
    assert p == 1.0


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_is_monotone_and_bounded(ps):
    adj = analysis.holm(ps)
    assert all(a >= p - 1e-12 for a, p in zip(adj, ps)) and all(a <= 1 for a in adj)
    order = np.argsort(ps)
    assert all(adj[order[i]] <= adj[order[i + 1]] + 1e-12 for i in range(len(ps) - 1))


def test_groups_compared_and_ranked_with_ties():
    levels = {"base": np.array([100.0, 102, 98, 101, 99]), "same": np.array([100.5, 101, 99, 98.5, 100]),
              "small": np.array([50.0, 51, 49, 50.5, 49.5])}
    comps = analysis.compare_groups(levels, "base", seed=1)
    assert comps["small"].significant and comps["small"].ratio == pytest.approx(0.5, rel=0.02)
    lo, hi = comps["small"].ratio_ci
    assert lo < 0.5 < hi + 0.01
    assert not comps["same"].significant
    assert comps["small"].rank == 1 and comps["base"].rank == comps["same"].rank == 2
    assert comps["small"].cliffs_delta == -1.0


def test_classify_order():
    r = ReplicaStats("x", "g", False, 100, steady_mb=10)
    assert classify(r) == "Unverified"
    r = ReplicaStats("x", "g", True, RULES["min_steady_samples"] - 1, steady_mb=10)
    assert classify(r) == "Too short"
