"""The canary judged against its peers (alloclab.fleet.canary): the looks, the baseline's size, and
the rule's calls on seeded series like a settle watch's (start-up regrowth both cohorts share,
units that differ 20%, 2% slow noise)."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import canary
from tests import simulated_series as sim


def test_looks_double_from_half_the_settle_time_up_to_the_maximum():
    rule = canary.rule_for(60.0, None)
    assert rule.look_times() == [30.0, 60.0, 120.0, 240.0] and rule.max_looks == 4
    assert canary.rule_for(10.0, 25.0).look_times() == [5.0, 10.0, 20.0]
    with pytest.raises(UserError, match="shorter than --settle"):
        canary.rule_for(60.0, 30.0)
    with pytest.raises(UserError, match="--undecided"):
        canary.rule_for(60.0, None, undecided="maybe")


def test_baseline_size_auto_takes_as_many_as_the_canary_where_there_are_enough():
    assert canary.baseline_size("auto", 5, 20)[0] == 5
    assert canary.baseline_size("auto", 5, 3)[0] == 3  # all there are
    n, why = canary.baseline_size("auto", 5, 1)
    assert n == 0 and "guards alone" in why
    assert canary.baseline_size("auto", 1, 20)[0] == 0  # one canary unit: no Welch
    assert canary.baseline_size("none", 5, 20)[0] == 0
    assert canary.baseline_size("50%", 5, 20)[0] == 10
    with pytest.raises(UserError, match="asks for 30 units; 20 are untouched"):
        canary.baseline_size("30", 5, 20)
    with pytest.raises(UserError, match="is not a count"):
        canary.baseline_size("many", 5, 20)
    assert canary.choose_baseline([f"u{i}" for i in range(20)], 5, seed=0) == canary.choose_baseline(
        [f"u{i}" for i in reversed(range(20))], 5, seed=0
    )  # seeded, order-free


def _judge(rng, n: int, effect: float, rule: canary.PeerRule, every: float = 1.0) -> canary.PeerJudge:
    """A settle watch's samples, simulated: each unit's own level (units differ 20%), one reading of
    its old process before the restart, then a new process regrowing to effect × (canary) or 1 ×
    (baseline) its level along 1 − 0.5·e^(−age/τ), τ 20 s, with AR(1) noise (2%, φ 0.9 a sample)."""
    names_c, names_b = [f"c{i}" for i in range(n)], [f"b{i}" for i in range(n)]
    judge = canary.PeerJudge(rule, names_c, names_b, True)
    t = sim.times(rule.max_settle_s, every)[1:]
    for names, scale in ((names_c, effect), (names_b, 1.0)):
        level = 100.0 * np.exp(0.2 * rng.normal(size=len(names)))
        series = (
            level[:, None]
            * scale
            * (1 - 0.5 * np.exp(-t / 20.0))[None, :]
            * (1 + sim.ar1(rng, len(names), len(t), 0.9, 0.02))
        )
        for name, lv, ys in zip(names, level, series):
            judge.old_kb[name] = lv * (1 + 0.02 * rng.normal())
            judge.samples[name] = list(zip(t, ys))
    for at in rule.look_times():
        judge.look_at(at)
    return judge


def test_a_same_allocator_canary_passes_and_a_25_percent_one_fails_seeded():
    rule = canary.rule_for(60.0, None)
    rng = np.random.default_rng(20261128)
    same = _judge(rng, 5, 1.0, rule)
    assert same.outcome == canary.PASS and same.action == "pass", same.verdict_line()
    last = same.looks[-1]
    assert last.interval[1] < 1.10 and last.interval[0] < last.ratio < last.interval[1]
    worse = _judge(rng, 5, 1.25, rule)
    assert worse.outcome == canary.FAIL and worse.action == "fail", worse.verdict_line()
    assert worse.looks[-1].interval[0] > 1.10 and "FAIL" in worse.verdict_line()
    assert worse.as_dict()["looks"][-1]["outcome"] == "fail"


def test_a_canary_at_the_tolerance_is_not_decided_and_the_operators_choice_applies():
    """A true ratio of exactly 1 + tolerance: neither shown above nor below (within alpha); the
    last look leaves it MORE TIME and the deploy does what --undecided says."""
    undecided = 0
    for seed in range(5):
        for choice in ("hold", "fail"):
            judge = _judge(np.random.default_rng(seed), 5, 1.10, canary.rule_for(60.0, None, undecided=choice))
            assert len(judge.looks) <= judge.rule.max_looks
            if judge.outcome == canary.MORE_TIME:
                undecided += 1
                assert judge.action == choice and len(judge.looks) == judge.rule.max_looks
                assert "MORE TIME" in judge.verdict_line()
    assert undecided >= 8


def test_false_fails_and_false_passes_stay_under_alpha_seeded():
    """The rule's two errors on 200 seeded settle watches each (the full calibration, with Wilson
    intervals, is benchmarks/canary_peers.py --part sim): a same-allocator canary shown worse than
    ×1.10, a +25% one shown better."""
    rule = canary.rule_for(60.0, None)
    rng = np.random.default_rng(7)
    false_fail = sum(_judge(rng, 5, 1.0, rule).outcome == canary.FAIL for _ in range(200))
    false_pass = sum(_judge(rng, 5, 1.25, rule).outcome == canary.PASS for _ in range(200))
    assert false_fail <= 10 and false_pass <= 10, (false_fail, false_pass)


def test_unit_change_is_the_second_half_mean_over_the_old_level():
    samples = [(1.0, 50.0), (2.0, 60.0), (3.0, 90.0), (4.0, 110.0)]
    assert canary.unit_change(samples, 100.0, 4.0) == pytest.approx(1.0)  # (90 + 110) / 2 over 100
    assert canary.unit_change(samples, None, 4.0) is None
    assert canary.unit_change(samples, 100.0, 0.5) is None


def test_a_host_without_the_statistics_packages_leaves_the_canary_to_the_guards(monkeypatch):
    """A fleet host may run alloclab without numpy and scipy (the Ansible role installs neither):
    auto falls back to the guards and says why; an explicit baseline is refused in one line."""
    monkeypatch.setattr(canary, "missing_packages", lambda: ["scipy"])
    n, why = canary.baseline_size("auto", 5, 20)
    assert n == 0 and "no scipy" in why and "guards alone" in why
    with pytest.raises(UserError, match="--baseline 5: this host has no scipy"):
        canary.baseline_size("5", 5, 20)
    assert canary.baseline_size("none", 5, 20)[0] == 0
