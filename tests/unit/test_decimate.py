import numpy as np

from alloclab.reporters.decimate import min_max


def test_extremes_are_kept_and_the_series_is_thinned():
    rng = np.random.default_rng(3)
    t = np.arange(50_000) * 15.0
    y = np.cumsum(rng.normal(size=t.size))
    y[12_345] = 1e6  # a one-sample spike
    y[40_000] = -1e6  # and a dip
    tt, yy = min_max(t, y, buckets=500)
    assert len(tt) <= 1000 and np.all(np.diff(tt) > 0)
    assert 1e6 in yy and -1e6 in yy
    # every bucket's extremes are there
    b = np.minimum((t / t[-1] * 500).astype(int), 499)
    for k in (0, 17, 499):
        assert y[b == k].max() in yy and y[b == k].min() in yy
    assert set(tt) <= set(t)


def test_short_or_empty_series_unchanged():
    t, y = np.arange(10.0), np.arange(10.0)
    assert min_max(t, y, buckets=100)[0] is not None and len(min_max(t, y, buckets=100)[0]) == 10
    y2 = np.full(5000, np.nan)
    assert len(min_max(np.arange(5000.0), y2, buckets=10)[1]) == 5000


def test_nans_are_skipped():
    t = np.arange(10_000.0)
    y = np.sin(t / 100)
    y[::7] = np.nan
    tt, yy = min_max(t, y, buckets=100)
    assert np.all(np.isfinite(yy)) and len(tt) <= 200


def test_each_series_keeps_its_own_extremes():
    t = np.arange(20_000.0)
    y = np.sin(t / 500)
    z = np.cos(t / 300)
    y[5_001] = 50.0  # a spike in one series only
    z[17_777] = -50.0  # a dip in the other
    tt, yy, zz = min_max(t, y, z, buckets=100)
    assert len(tt) <= 400 and np.all(np.diff(tt) > 0)
    assert 50.0 in yy and -50.0 in zz
    assert np.array_equal(yy, y[tt.astype(int)]) and np.array_equal(zz, z[tt.astype(int)])  # rows stay together
