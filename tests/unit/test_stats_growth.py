"""stats.growth: the change over a window and an interval that survives autocorrelation."""
import numpy as np
from hypothesis import given, settings, strategies as st

from alloclab.stats import classify, growth
from alloclab.stats import calibration as sim


def test_flat_autocorrelated_series_are_rarely_growing():
    rng = np.random.default_rng(11)
    t = sim.times(6 * 3600.0, 60.0)
    ys = np.vstack([sim.flat(rng, 100, t, phi=0.9, sd_share=0.03), sim.flat(rng, 100, t, phi=0.99, sd_share=0.03)])
    growing = sum(classify(t, y).word in ("Growing", "Bloating") for y in ys)
    significant = sum(growth(t, y).significant for y in ys)
    assert growing <= 0.08 * len(ys)
    assert significant <= 0.08 * len(ys)       # the interval alone, without the 5% floor


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
    """φ = 0.999 over a window a few autocorrelation times long: too few independent batches."""
    rng = np.random.default_rng(5)
    t = sim.times(3600.0, 1.0)
    ys = sim.flat(rng, 40, t, phi=0.999, sd_share=0.05)
    assert sum(growth(t, y).significant for y in ys) <= 3


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
