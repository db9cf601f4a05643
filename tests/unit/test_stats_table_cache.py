"""The simulated lag-1 quantile tables are kept in the cache directory and read back unchanged."""

import importlib

import numpy as np

growth = importlib.import_module("alloclab.stats.growth")


def test_cached_table_is_the_simulated_one(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    growth.lag1_quantiles.cache_clear()
    first = growth.lag1_quantiles(16, 0.1)
    files = list((tmp_path / "stats").glob("lag1-*.npy"))
    assert len(files) == 1
    growth.lag1_quantiles.cache_clear()
    assert np.array_equal(growth.lag1_quantiles(16, 0.1), first)
    assert np.array_equal(first, growth._simulate_lag1_quantiles(16, 0.1, 1000))
    files[0].write_bytes(b"garbage")  # a damaged cache file is simulated again
    growth.lag1_quantiles.cache_clear()
    assert np.array_equal(growth.lag1_quantiles(16, 0.1), first)
    growth.lag1_quantiles.cache_clear()
