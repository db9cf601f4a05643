"""stats.checks: one process sampled twice, not two processes that coincide now and then."""

import numpy as np

from alloclab.stats import identical_series


def test_chance_coincidences_are_not_one_process():
    t = np.arange(12_960, dtype=float) * 60
    rng = np.random.default_rng(51)
    a = 400_000 + 4 * rng.integers(0, 1000, len(t))
    b = 400_000 + 4 * rng.integers(0, 1000, len(t))
    b[:5] = a[:5]
    m = identical_series(t, a, t, b)
    assert m.equal >= 5 and not m


def test_one_process_sampled_twice_is_found():
    t = np.arange(500, dtype=float)
    y = 1000 + np.cumsum(np.random.default_rng(52).integers(-3, 4, len(t)))
    keep = np.arange(len(t)) % 7 != 0
    assert identical_series(t, y, t[keep], y[keep])
    assert not identical_series(t, np.full(len(t), 5.0), t, np.full(len(t), 5.0))  # one plateau: not enough
    assert not identical_series(t[:10], y[:10], t[:10], y[:10])  # too few shared stamps
