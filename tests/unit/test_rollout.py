"""The canary rollout's guard rules and option parsing (alloclab.fleet.rollout)."""

from __future__ import annotations

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import rollout


def test_batch_sizes_and_shares():
    assert rollout.batch_sizes("2", 5) == [2, 2, 1]
    assert rollout.batch_sizes(5, 3) == [3]
    assert rollout.batch_sizes("10%", 25) == [2] * 12 + [1]
    assert rollout.batch_sizes("1%", 7) == [1] * 7  # at least one unit a batch
    for bad in ("0", "-1", "x", "0%", "150%"):
        with pytest.raises(UserError, match="not a batch size"):
            rollout.batch_sizes(bad, 10)


def test_sizes_and_shares():
    assert rollout.parse_size_kb("512M", "--max-memory") == 512 * 1024
    assert rollout.parse_size_kb("1.5GiB", "--max-memory") == 1536 * 1024
    assert rollout.parse_size_kb("2048", "--max-memory") == 2
    assert rollout.parse_share("25%", "--max-increase") == 0.25 and rollout.parse_share("0.1", "x") == 0.1
    for bad in ("", "12Q", "M", "-5M"):
        with pytest.raises(UserError):
            rollout.parse_size_kb(bad, "--max-memory")
    with pytest.raises(UserError):
        rollout.parse_share("-3%", "--max-increase")


def test_memory_guard_needs_persistence_and_takes_the_lowest_bound():
    g = rollout.Guards(max_memory_kb=1000, max_increase=0.25, persist=3)
    assert g.memory_bound_kb(700) == 875 and g.memory_bound_kb(900) == 1000 and g.memory_bound_kb(None) == 1000
    assert rollout.memory_trip([900, 900, 800, 900, 900], 700, g) is None  # never 3 in a row above 875
    why = rollout.memory_trip([900, 900, 900], 700, g)
    assert why and "25% above its old level" in why
    assert "above the bound" in rollout.memory_trip([1100] * 3, 900, g)
    assert rollout.memory_trip([10**9] * 5, 100, rollout.Guards()) is None  # no memory guard set
    assert rollout.first_persistent_excess([1, 5, 5, 1, 5, 5, 5], 4, 3) == 6


def test_crash_loop_guard():
    g = rollout.Guards(max_restarts=3)
    assert rollout.restart_trip(2, g) is None and "crash loop" in rollout.restart_trip(3, g)


def test_the_increase_guard_compares_a_new_process_with_the_old_one_at_the_same_age():
    """Issue 25's case in numbers: a start-up at 28.4 MB against a settled 5.9 MB."""
    guards = rollout.Guards(max_increase=0.25, persist=3)
    ages = [1.0, 2.0, 3.0, 4.0, 5.0, 20.0, 40.0, 50.0]
    new = [28400, 28000, 27000, 20000, 12000, 6000, 5900, 5900]
    old_curve = [(1.0, 28000.0), (3.0, 27500.0), (5.0, 12500.0), (30.0, 6000.0), (45.0, 5900.0)]
    assert rollout.memory_trip(new, 5900, guards) is not None  # the rule before: a false trip
    assert rollout.memory_trip(new, 5900, guards, ages, 0.0, old_curve) is None  # same age: none
    assert rollout.memory_trip(new, 5900, guards, ages, 10.0) is None  # warm-up: start-up not compared
    assert "same age" in rollout.memory_trip([v * 2 for v in new], 5900, guards, ages, 0.0, old_curve)
    assert rollout.level_at(old_curve, 4.0) == 20000.0 and rollout.level_at(old_curve, 99.0) == 5900.0
    # a history that starts after the new process's age falls back to the warm-up rule
    late_curve = [(3600.0, 5900.0)]
    assert rollout.increase_bounds([2.0], 5900, guards, 10.0, late_curve)[0][0] == float("inf")
    assert rollout.effective_warmup(guards, 45.0, 60.0) == 30.0 and rollout.effective_warmup(guards, 12.0, 60.0) == 12.0
    assert rollout.effective_warmup(rollout.Guards(warmup=5.0), 45.0, 60.0) == 5.0
