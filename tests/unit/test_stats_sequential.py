"""stats.sequential: alpha spending over looks keeps the false-stop rate at alpha."""

import numpy as np

from alloclab.stats import SequentialTest
from tests import simulated_series as sim


def run(rng, ratio, n_sims=120):
    t = sim.times(8 * 3600.0, 120.0)[1:]
    stops = []
    for _ in range(n_sims):
        eff = sim.replica_levels(rng, 1, 10, 1.0, 0.05)[0]
        eff[5:] *= ratio
        ys = eff[:, None] * (1 + sim.ar1(rng, 10, len(t), 0.98, 0.05))
        mean = np.cumsum(ys, axis=1) / np.arange(1, len(t) + 1)
        test = SequentialTest(0.05, 1, max_looks=6, first_look_s=900.0)
        stop = None
        for i in range(4, len(t), 5):  # a look every 10 minutes
            d = test.update({"base": mean[:5, i], "a": mean[5:, i]}, "base", elapsed_s=float(t[i]))
            assert test.spent <= 0.05 + 1e-12
            if d.stop:
                stop = d
                break
        stops.append(stop)
    return stops


def test_null_false_stop_rate_is_at_most_alpha():
    stops = run(np.random.default_rng(41), 1.0)
    assert sum(s is not None for s in stops) <= 0.08 * len(stops)


def test_a_large_difference_stops_with_the_right_winner():
    stops = run(np.random.default_rng(42), 0.7, n_sims=40)
    hit = [s for s in stops if s is not None]
    assert len(hit) >= 30 and all(s.winner == "a" for s in hit)


def test_updates_between_looks_spend_nothing():
    test = SequentialTest(0.05, 1)
    lv = {"b": np.array([100.0, 101, 99]), "a": np.array([100.0, 102, 98])}
    first = test.update(lv, "b", elapsed_s=60)
    between = test.update(lv, "b", elapsed_s=100)
    assert first.look == 1 and between.look == 0 and not between.stop and test.looks == 1
    assert test.update(lv, "b", elapsed_s=121).look == 2
    assert abs(sum(test.alpha_at(k) for k in range(1, 10_000)) - 0.05) < 1e-4
