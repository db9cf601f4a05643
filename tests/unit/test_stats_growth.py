"""stats.growth: the change over a window and an interval that survives autocorrelation."""

import numpy as np
from hypothesis import given, settings, strategies as st

from alloclab.stats import classify, growth
from alloclab.stats.growth import ar1_slope_var, phi_for_lag1
from tests import simulated_series as sim


def test_flat_autocorrelated_series_are_rarely_growing():
    rng = np.random.default_rng(11)
    t = sim.times(6 * 3600.0, 60.0)
    ys = np.vstack([sim.flat(rng, 100, t, phi=0.9, sd_share=0.03), sim.flat(rng, 100, t, phi=0.99, sd_share=0.03)])
    growing = sum(classify(t, y).word in ("Growing", "Bloating") for y in ys)
    significant = sum(growth(t, y).significant for y in ys)
    assert growing <= 0.08 * len(ys)
    assert significant <= 0.08 * len(ys)  # the interval alone, without the 5% floor


def test_real_growth_is_found_and_sized():
    rng = np.random.default_rng(12)
    t = sim.times(6 * 3600.0, 10.0)
    ys = sim.growing(rng, 60, t, share=0.10, phi=0.9, sd_share=0.02)
    gs = [growth(t, y) for y in ys]
    assert np.mean([g.significant for g in gs]) >= 0.9
    assert abs(np.median([g.change_mb for g in gs]) - 10.0) < 1.0
    assert np.mean([g.change_lo <= 10.0 <= g.change_hi for g in gs]) >= 0.88


def test_no_rate_from_a_short_window():
    t = np.arange(0, 90, 1.0)
    g = growth(t, 100 + t * 0.5)
    assert g is not None and g.rate_mb_h is None and g.change_mb > 40
    t = np.arange(0, 12 * 3600, 60.0)
    rng = np.random.default_rng(1)
    g = growth(t, 100 + t / 3600 + rng.normal(0, 0.5, len(t)))
    assert g.rate_mb_h is not None and abs(g.rate_mb_h - 1.0) < 0.1


def test_too_few_samples_give_none():
    assert growth(np.arange(5.0), np.ones(5)) is None
    assert growth(np.zeros(10), np.arange(10.0)) is None


def test_a_random_walk_like_series_gets_no_confident_interval():
    """φ = 0.999 over a window a few autocorrelation times long: the bound on φ reaches the unit
    root and the interval widens to the random-walk limit."""
    rng = np.random.default_rng(5)
    t = sim.times(3600.0, 1.0)
    ys = sim.flat(rng, 40, t, phi=0.999, sd_share=0.05)
    assert sum(growth(t, y).significant for y in ys) <= 3


def test_short_persistent_windows_get_intervals_that_keep_their_level():
    """Two autocorrelation times in the window (φ = 0.99 at 60 s over 6 h): the case where an
    interval on the estimated φ, or gated on it, undercovered (66.7%). Every series gets one."""
    rng = np.random.default_rng(21)
    t = sim.times(6 * 3600.0, 60.0)
    gs = [growth(t, y) for y in sim.growing(rng, 120, t, share=0.05, phi=0.99, sd_share=0.02)]
    assert all(g.change_lo is not None for g in gs)
    assert np.mean([g.change_lo <= 5.0 <= g.change_hi for g in gs]) >= 0.9


def test_sparse_independent_samples_get_a_tight_enough_interval():
    rng = np.random.default_rng(22)
    t = np.arange(20.0) * 43200
    gs = [growth(t, 100 + rng.normal(0, 2, len(t)) + 10 * t / t[-1]) for _ in range(100)]
    assert all(g.change_lo is not None for g in gs)
    assert np.mean([g.change_lo <= 10.0 <= g.change_hi for g in gs]) >= 0.9
    assert np.mean([g.significant for g in gs]) >= 0.6  # not so wide that it says nothing (0.76 here)


def test_the_phi_bound_is_above_the_median_unbiased_phi_and_reaches_the_unit_root():
    for n in (20, 100, 361, 512):
        for rho in (0.0, 0.5, 0.9):
            assert phi_for_lag1(rho, n, 0.1) >= phi_for_lag1(rho, n, 0.5) >= rho - 0.05
    assert phi_for_lag1(0.999, 361, 0.1) == 1.0


def test_the_slope_variance_is_continuous_at_the_unit_root():
    tb = np.arange(50.0)
    assert np.isclose(ar1_slope_var(tb, 1 - 1e-7, 1.0), ar1_slope_var(tb, 1.0, 1.0), rtol=1e-3)
    assert ar1_slope_var(tb, 0.5, 1.0) < ar1_slope_var(tb, 0.9, 1.0) < ar1_slope_var(tb, 1.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(shift=st.floats(-50, 50), seed=st.integers(0, 10_000))
def test_growth_is_shift_invariant(shift, seed):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 7200, 300))
    y = 100 + t / 600 + rng.normal(0, 1, len(t))
    a, b = growth(t, y), growth(t, y + shift, level=a_level(y))
    assert np.isclose(a.change_mb, b.change_mb, atol=1e-6)
    assert a.significant == b.significant


def a_level(y):
    return float(np.median(y))
