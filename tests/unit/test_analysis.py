"""Estimators and rules on synthetic series with known truth (property-based where it fits)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from alloclab import analysis
from alloclab.analysis import ReplicaStats, Segment, Series, replica_stats
from alloclab.analysis.replica import word_without_samples


def series(y: np.ndarray, dt: float = 60.0, phase: str | None = "load", name: str = "r") -> Series:
    n = len(y)
    t = 1_700_000_000 + np.arange(n) * dt
    nan = np.full(n, np.nan)
    return Series(
        1,
        name,
        "g",
        True,
        t,
        np.asarray(y, float),
        np.array([phase] * n, dtype=object),
        nan,
        nan,
        np.zeros(n),
        nan,
        [Segment(float(t[0]), float(t[-1]), "g", "whole run")],
    )


@settings(max_examples=150, deadline=None)
@given(
    level=st.floats(100, 5000),
    slope_share=st.floats(-0.5, 2.0),
    noise_share=st.floats(0, 0.03),
    n=st.integers(30, 200),
    outlier_share=st.floats(0, 0.1),
    seed=st.integers(0, 2**32 - 1),
)
def test_theil_sen_recovers_the_slope(level, slope_share, noise_share, n, outlier_share, seed):
    """Within 0.5% of the level per hour plus 10% of the slope, despite noise and 10% outliers."""
    rng = np.random.default_rng(seed)
    t_h = np.arange(n) / 10.0  # 6-minute samples
    slope = slope_share * level / (t_h[-1] or 1)  # total change: slope_share of the level
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
        y = 1000 + rng.normal(0, 30, 72) + 20 * np.sin(np.arange(72) / 5 + rng.uniform(0, 6))  # noise + wobble
        calls += replica_stats(series(y)).status in ("Growing", "Bloating")
    assert calls / trials < 0.05, calls / trials


def test_growth_and_bloat_are_called():
    n = 72
    t = np.arange(n)
    noise = np.random.default_rng(2).normal(0, 1, n)  # exact lines have no noise to estimate
    assert replica_stats(series(1000 + 2.0 * t + noise)).status == "Growing"  # +14% over the window
    assert replica_stats(series(1000 + 8.0 * t + noise)).status == "Bloating"  # +57%
    assert replica_stats(series(1000 + 0.2 * t + np.random.default_rng(1).normal(0, 1, n))).status != "Growing"


def test_ratcheting_and_release_events():
    """A series that climbs and then holds its peak with no release is Growing, in steps or not (the
    issue's complaint: such a replica was called Flat); a sawtooth that gives memory back is not in steps."""
    rng = np.random.default_rng(3)
    climb = np.concatenate([np.linspace(1000, 1200, 60), np.full(120, 1200.0)]) + rng.normal(0, 0.5, 180)
    assert replica_stats(series(climb, dt=30.0)).status in ("Growing", "Bloating")
    saw = np.tile(np.concatenate([np.linspace(100, 200, 10), [100.0]]), 4)
    r = replica_stats(series(saw))
    assert r.release_events >= 3 and r.growth_shape != "steps"
    constant = np.full(60, 500.0)
    assert replica_stats(series(constant)).status == "Flat"  # was "Ratcheting" (now: in steps) before the re-basing


def test_flat_workload_is_never_growing_or_ratcheting():
    """A flat workload (AR(1) noise around a level, plus a slow wobble): no Growing, in steps or not."""
    rng = np.random.default_rng(11)
    bad = 0
    for _ in range(100):
        e = np.zeros(240)
        for i in range(1, 240):
            e[i] = 0.9 * e[i - 1] + rng.normal(0, 3)
        y = 800 + e + 5 * np.sin(np.arange(240) / 20 + rng.uniform(0, 6))
        bad += replica_stats(series(y, dt=60.0)).status in ("Growing", "Bloating")
    assert bad <= 5, bad


def test_growth_is_a_change_over_the_window_and_a_rate_only_where_supported():
    noise = np.random.default_rng(4).normal(0, 1, 200)
    short = replica_stats(series(1000 + 2.0 * np.arange(90) + noise[:90], dt=1.0))  # 90 s window
    assert short.change_mb == pytest.approx(178, rel=0.05) and short.slope_mb_h is None  # never MB/h from 90 s
    long = replica_stats(series(1000 + 2.0 * np.arange(200) + noise, dt=600.0))  # 33 h window
    assert long.slope_mb_h == pytest.approx(12.0, rel=0.05)


def test_no_phase_is_invented():
    """Samples without a phase count as load; idle release only when an idle phase was configured."""
    y = np.concatenate([np.full(20, 500.0), np.full(5, 200.0)])
    s = series(y, phase=None)
    r = replica_stats(s)
    assert r.idle_released_share is None and r.n_samples > 0
    s.phase = np.array(["load"] * 20 + ["idle"] * 5, dtype=object)
    assert replica_stats(s).idle_released_share is None  # idle not configured
    assert replica_stats(s, idle_configured=True).idle_released_share == pytest.approx(0.6)


def test_idle_release():
    load = np.full(20, 500.0)
    idle = np.concatenate([np.full(3, 500.0), np.linspace(500, 200, 5), np.full(12, 200.0)])
    s = series(np.concatenate([load, idle]))
    s.phase = np.array(["load"] * 20 + ["idle"] * 20, dtype=object)
    r = replica_stats(s, idle_configured=True)
    assert r.end_of_load_mb == 500 and r.idle_final_mb == 200
    assert r.idle_released_share == pytest.approx(0.6)
    assert r.idle_half_release_s == pytest.approx(5 * 60)


def test_idle_release_counts_memory_given_back_as_the_load_winds_down():
    """The rolldown case: builds hold ~500 MB, the last build ends before the load phase does and the
    allocator gives memory back then, so the idle phase starts (and ends) low. Measured from the
    load's last samples that was "0% released" beside a final RSS 42% below the level."""
    rng = np.random.default_rng(27)
    load = np.concatenate([500 + rng.normal(0, 5, 45), 250 + rng.normal(0, 2, 15)])  # winding down
    idle = 250 + rng.normal(0, 2, 20)
    s = series(np.concatenate([load, idle]))
    s.phase = np.array(["load"] * 60 + ["idle"] * 20, dtype=object)
    r = replica_stats(s, idle_configured=True)
    assert r.end_of_load_mb == pytest.approx(r.idle_final_mb, rel=0.03)  # nothing more left during idle itself
    assert r.final_mb < 0.6 * r.steady_mean_mb  # 42%+ below the level
    assert r.idle_released_share == pytest.approx(1 - r.idle_final_mb / r.steady_mean_mb)
    assert r.idle_released_share > 0.4
    assert r.idle_half_release_s == 0.0  # already below half-way when idle began


def test_groups_compared_with_letters_and_untestable_singletons():
    levels = {
        "base": np.array([100.0, 102, 98, 101, 99]),
        "same": np.array([100.5, 101, 99, 98.5, 100]),
        "small": np.array([50.0, 51, 49, 50.5, 49.5]),
        "one": np.array([40.0]),
    }
    comps = analysis.compare_groups(levels, "base", seed=1)
    assert comps["small"].significant and comps["small"].ratio == pytest.approx(0.5, rel=0.02)
    lo, hi = comps["small"].ratio_ci
    assert lo < 0.5 < hi + 0.01
    assert not comps["same"].significant and comps["same"].equivalent  # within ±5%: said so
    assert comps["one"].untestable and not comps["one"].significant
    assert not set(comps["small"].letters) & set(comps["base"].letters)
    assert set(comps["same"].letters) & set(comps["base"].letters)
    assert comps["small"].rank == 1 and comps["base"].rank == comps["same"].rank == 2


def test_two_groups_on_the_same_allocator_are_not_significant():
    """Same allocator, same workload: replicas from one distribution in both groups. Over many
    designs the comparison is significant at most at about the nominal rate."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(200):
        lv = rng.lognormal(np.log(1000), 0.05, 10)
        hits += analysis.compare_groups({"a": lv[:5], "b": lv[5:]}, "a", seed=0)["b"].significant
    assert hits <= 200 * 0.05 * 2, hits


def test_a_replica_without_a_steady_sample_is_unverified_or_too_short():
    assert word_without_samples(ReplicaStats("x", "g", False, 0)) == "Unverified"
    assert word_without_samples(ReplicaStats("x", "g", True, 0)) == "Too short"
