"""run --until-significant with a planned end: looks at doublings of the first look plus a last
look just before the end, alpha in proportion to each look's elapsed time, never more than alpha."""

import numpy as np
import pytest

from alloclab.run.stopping import SignificanceStop, planned_look_times
from alloclab.stats import SequentialTest
from tests import simulated_series as sim


def test_looks_are_doublings_then_the_planned_end():
    assert planned_look_times(60, 720, 2) == [60, 120, 240, 480, 710]
    assert planned_look_times(140, 720, 2) == [140, 280, 560, 710]
    assert planned_look_times(60, 60, 2) == [60]  # the first look is never moved earlier
    assert planned_look_times(60, None, 2) is None
    assert planned_look_times(5, 100, 0.5) == [5, 10, 20, 40, 80, 90]


def test_alpha_is_proportional_to_elapsed_time_and_sums_to_alpha():
    test = SequentialTest(0.05, 1, look_times_s=[140, 280, 560, 710])
    levels = [test.alpha_at(k) for k in range(1, 6)]
    assert levels[-1] == 0.0
    assert sum(levels) == pytest.approx(0.05)
    assert levels[3] == pytest.approx(0.05 * 710 / 1690) and levels[0] == pytest.approx(0.05 * 140 / 1690)
    with pytest.raises(ValueError):
        SequentialTest(0.05, 1, look_times_s=[120, 60])


def test_looks_are_spent_at_the_planned_times_only():
    test = SequentialTest(0.05, 1, look_times_s=[60, 120, 710])
    lv = {"b": np.array([100.0, 101, 99]), "a": np.array([100.0, 102, 98])}
    assert test.next_look_s() == 60
    assert test.update(lv, "b", elapsed_s=30).look == 0
    assert test.update(lv, "b", elapsed_s=61).look == 1 and test.next_look_s() == 120
    assert test.update(lv, "b", elapsed_s=300).look == 2  # 240 is not a look: the next is 710
    assert test.update(lv, "b", elapsed_s=500).look == 0 and test.next_look_s() == 710
    assert test.update(lv, "b", elapsed_s=711).look == 3
    assert test.next_look_s() is None
    last = test.update(lv, "b", elapsed_s=900)
    assert not last.stop and last.look == 0 and test.spent == pytest.approx(0.05)


def test_the_run_stop_check_uses_the_plan_and_prints_it():
    stop = SignificanceStop(60, 1, planned_s=720, interval=2)
    assert stop.test.look_times_s == [60, 120, 240, 480, 710]
    assert stop.schedule().startswith("60 s at 0.0019") and "710 s at 0.022" in stop.schedule()
    unplanned = SignificanceStop(60, 1)
    assert unplanned.test.look_times_s is None and "no planned end" in unplanned.schedule()


def test_planned_looks_keep_the_false_stop_rate_on_drifting_null_replicas():
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 721, 2.0)
    looks = planned_look_times(60, 720, 2)
    idx = [int(np.searchsorted(t, x)) for x in looks]
    stops = 0
    for _ in range(150):
        eff = sim.replica_levels(rng, 1, 8, 1.0, 0.04)[0]
        ys = eff[:, None] * (1 - 0.06 * np.exp(-t / 120))[None, :] * (1 + sim.ar1(rng, 8, len(t), 0.95, 0.02))
        mean = np.cumsum(ys, axis=1) / np.arange(1, len(t) + 1)
        test = SequentialTest(0.05, 1, look_times_s=looks)
        for i in idx:
            if test.update({"base": mean[:4, i], "a": mean[4:, i]}, "base", elapsed_s=float(t[i])).stop:
                stops += 1
                break
        assert test.spent <= 0.05 + 1e-12
    assert stops <= 0.1 * 150


def test_a_last_look_close_after_a_doubling_is_still_made(monkeypatch):
    """A 500 s plan: looks at 60, 120, 240, 480 and 490 s; each is analysed when due (2 s ticks),
    the last one too, though it comes 10 s after the one before."""
    from alloclab import analysis
    from alloclab.stats.sequential import SequentialDecision

    stop = SignificanceStop(60, 1, planned_s=500, interval=2)
    assert stop.test.look_times_s == [60, 120, 240, 480, 490]
    made = []

    def update(levels, baseline, *, elapsed_s):
        made.append(elapsed_s)
        stop.test.looks += 1
        return SequentialDecision(False, None, {}, 0.0, stop.test.looks, "recorded")

    monkeypatch.setattr(stop.test, "update", update)
    monkeypatch.setattr(
        analysis, "analyse", lambda store, metric=None: type("A", (), {"groups": [], "replicas": [], "baseline": "b"})()
    )
    events = []
    runner = type("R", (), {"store": type("S", (), {"add_event": lambda self, t, kind, text: events.append(kind)})()})()
    for tick in np.arange(0, 500, 2.0):
        assert stop(runner, float(tick)) is None
    assert made == [60, 120, 240, 480, 490]
    assert events == ["sequential_look"] * 5  # each look that did not stop, recorded with what it left open


def test_look_plan_lists_planned_looks_and_their_levels():
    planned = SequentialTest(0.05, 1, look_times_s=[60, 120, 710])
    plan = planned.look_plan()
    assert [t for t, _ in plan] == [60, 120, 710]
    assert abs(sum(level for _, level in plan) - 0.05) < 1e-12  # all of alpha by the last look
    assert plan[2][1] == planned.alpha_at(3)
    doubling = SequentialTest(0.05, 1, first_look_s=30)
    assert [t for t, _ in doubling.look_plan(3)] == [30, 60, 120]
    assert [level for _, level in doubling.look_plan(3)] == [0.05 / 2, 0.05 / 6, 0.05 / 12]


def test_a_stop_looks_only_at_the_replicas_the_comparison_keeps(monkeypatch):
    """An excluded replica (ended early, restarted) is left out of the final comparison, so the
    stop must not count it either: here it alone would make the groups differ."""
    from types import SimpleNamespace

    from alloclab.analysis.replica import ReplicaStats
    from alloclab.stats.sequential import SequentialDecision

    stop = SignificanceStop(60, 1, planned_s=500, interval=2)
    seen = {}

    def update(levels, baseline, *, elapsed_s):
        seen.update(levels)
        return SequentialDecision(False, None, {}, 0.0, 1, "recorded")

    monkeypatch.setattr(stop.test, "update", update)
    reps = [ReplicaStats(f"b{i}", "base", True, 10, steady_mb=100.0, steady_mean_mb=100.0) for i in range(3)]
    reps += [ReplicaStats(f"a{i}", "a", None, 10, steady_mb=100.0, steady_mean_mb=100.0) for i in range(3)]
    reps.append(ReplicaStats("a-restarted", "a", True, 10, steady_mb=20.0, steady_mean_mb=20.0, excluded="restarted"))
    reps.append(ReplicaStats("a-other", "a", False, 10, steady_mb=20.0, steady_mean_mb=20.0))
    a = SimpleNamespace(
        groups=[SimpleNamespace(name="base"), SimpleNamespace(name="a")], replicas=reps, baseline="base"
    )
    assert stop.decide(a, 60.0) is None
    assert sorted(seen["a"]) == [100.0, 100.0, 100.0]
    assert len(seen["base"]) == 3
