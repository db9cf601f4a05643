"""The main job's experiment files, as `alloclab demo` writes them (commands/demo.py), the
published figures its closing lines quote, recomputed from the operators' data, and its stop rule
(`run --until-decided`: every comparison decided) and time plan."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from alloclab.commands import demo
from alloclab.commands.demo import DEMOS, experiment_text, real_experiment_text
from alloclab.experiment_file import parse_experiment
from alloclab.run.stopping import SignificanceStop
from alloclab.stats import SequentialTest

FIVE_WAY = Path(__file__).resolve().parents[1] / "data" / "1aeo-torutils" / "5way-2026-01"


@pytest.mark.parametrize("label,template,share", DEMOS)
def test_each_model_part_at_the_default_length_is_a_valid_experiment_of_its_share(label, template, share):
    total = int(270 * share)
    exp = parse_experiment(experiment_text(template, total), f"{label}.toml")
    assert exp.phases.warmup + exp.phases.load + exp.phases.idle == total
    assert exp.phases.load > 0 and exp.workload.name == label


def test_the_tor_model_part_runs_the_replicas_its_verdict_was_measured_with():
    """5 replicas per group: significant in 10 of 13 runs; 8 were significant in 10 of 10 but on a quiet
    machine loaded 2 cores to a median load of 6.6 (cpu-saturated on both parts), where 5 stay at 2.6
    (benchmarks/README.md "The main job"). Changing the count needs those runs again."""
    exp = parse_experiment(experiment_text("demo-tor.toml", 148), "tor.toml")
    assert exp.replicas == 5 and len(exp.groups) == 5


def test_the_real_demo_is_the_tor_network_scenario_under_the_published_allocators():
    exp = parse_experiment(real_experiment_text(237), "real.toml")
    assert exp.scenario.name == "tor-network" and exp.replicas == 3 and exp.baseline == "glibc"
    assert [g.allocator for g in exp.groups] == [
        "glibc",
        "jemalloc@5.3.0",
        "mimalloc@2.0.9",
        "mimalloc@3.0.1",
        "mimalloc@3.6.0",
    ]
    assert exp.phases.warmup + exp.phases.load == 237


def test_a_group_left_out_is_not_in_the_experiment():
    kept = [demo.BASELINE, ("mimalloc-2.0.9", "mimalloc@2.0.9")]
    for text in (real_experiment_text(200, kept), experiment_text("demo-pool.toml", 120, kept)):
        assert [g.name for g in parse_experiment(text, "x.toml").groups] == ["glibc", "mimalloc-2.0.9"]


def test_the_published_figures_are_the_operators_data_at_its_last_collection():
    """PUBLISHED_GB: each group's mean RSS over its relays (groups/ lists) at the 5-way
    experiment's last collection, in GB (2^30 bytes)."""
    letters = {
        "E_glibc": "glibc",
        "D_jemalloc": "jemalloc-5.3.0",
        "B_mimalloc209": "mimalloc-2.0.9",
        "A_mimalloc301": "mimalloc-3.0.1",
    }
    group_of = {
        nick: letters[f.stem[len("group_") :]]
        for f in (FIVE_WAY / "groups").glob("group_*.txt")
        if f.stem[len("group_") :] in letters
        for nick in f.read_text().split()
    }
    rows = [r for r in csv.DictReader(open(FIVE_WAY / "memory.csv")) if r["type"] == "relay"]
    last = max(r["timestamp"] for r in rows)
    assert last.replace("T", " ")[:16] == demo.PUBLISHED_AT[:16]
    rss: dict[str, list[float]] = {}
    for r in rows:
        if r["timestamp"] == last and r["nickname"] in group_of:
            rss.setdefault(group_of[r["nickname"]], []).append(int(r["rss_kb"]) / 2**20)
    assert {g: len(v) for g, v in rss.items()} == demo.PUBLISHED_RELAYS
    assert {g: round(statistics.mean(v), 2) for g, v in rss.items()} == demo.PUBLISHED_GB


# The demo's stop rule (`run --until-decided`): every comparison with the baseline decided.
def _levels(rng, base_sd=0.01, **groups):
    """3 replicas a group: glibc at 100 MB, base_sd apart; each other group (ratio to glibc, log-sd)."""
    return {
        "glibc": 100 * np.exp(rng.normal(0, base_sd, 3)),
        **{g: 100 * r * np.exp(rng.normal(0, sd, 3)) for g, (r, sd) in groups.items()},
    }


def test_every_rule_waits_for_the_comparison_the_best_rule_does_not():
    """jemalloc far below glibc decides the best-group rule; the every rule goes on while
    mimalloc-3.0.1, at glibc's level and spread 10%, is neither shown different nor equivalent."""
    levels = _levels(np.random.default_rng(3), jemalloc=(0.45, 0.01), mimalloc301=(1.0, 0.10))
    best = SequentialTest(0.05, 2, look_times_s=[100, 200])
    every = SequentialTest(0.05, 2, look_times_s=[100, 200], until="every")
    assert best.update(levels, "glibc", elapsed_s=100).stop
    d = every.update(levels, "glibc", elapsed_s=100)
    assert not d.stop and d.look == 1
    assert d.reason.startswith("look 1: not decided at 0.0167: mimalloc301 (adjusted p "), d.reason
    assert "jemalloc" not in d.reason


def test_every_rule_stops_when_each_group_is_shown_either_way_or_equivalent():
    levels = _levels(np.random.default_rng(4), 0.002, jemalloc=(0.45, 0.01), mimalloc301=(1.4, 0.01), same=(1.0, 0.002))
    d = SequentialTest(0.05, 3, look_times_s=[100, 200], until="every").update(levels, "glibc", elapsed_s=100)
    assert d.stop and d.winner == "jemalloc"
    assert d.reason.startswith("every comparison decided against glibc by look 1: jemalloc lower (adjusted p "), (
        d.reason
    )
    assert "mimalloc301 higher (adjusted p " in d.reason and "same equivalent (adjusted p " in d.reason


def test_a_comparison_once_decided_stays_decided():
    """jemalloc decided lower at look 1; at look 2 its relays spread out (not shown any more) while
    mimalloc-3.0.1 is now shown higher: every comparison is decided, jemalloc at look 1."""
    rng = np.random.default_rng(6)
    every = SequentialTest(0.05, 2, look_times_s=[100, 200], until="every")
    assert not every.update(_levels(rng, jemalloc=(0.45, 0.01), mimalloc301=(1.0, 0.10)), "glibc", elapsed_s=100).stop
    d = every.update(_levels(rng, jemalloc=(0.9, 0.3), mimalloc301=(1.4, 0.01)), "glibc", elapsed_s=200)
    assert d.stop and "jemalloc lower (adjusted p " in d.reason and ", look 1)" in d.reason
    assert "mimalloc301 higher (adjusted p " in d.reason and d.reason.endswith(", look 2)")


def test_every_rule_counts_a_group_without_a_level_as_undecided():
    """Three comparisons planned, two groups have levels: no stop, and no decision on the smaller family."""
    levels = _levels(np.random.default_rng(5), jemalloc=(0.45, 0.01), mimalloc301=(1.4, 0.01))
    test = SequentialTest(0.05, 3, look_times_s=[100, 200], until="every")
    d = test.update(levels, "glibc", elapsed_s=100)
    assert not d.stop and d.reason.endswith("1 group without a level") and test.decided == {}
    with pytest.raises(ValueError):
        SequentialTest(0.05, 1, until="all")


def _runner(planned: float, warmup: float, held_warmup: float, events: list):
    store = SimpleNamespace(add_event=lambda t, kind, text: events.append((kind, text)))
    return SimpleNamespace(
        store=store,
        planned=planned,
        exp=SimpleNamespace(phases=SimpleNamespace(warmup=warmup)),
        phases=SimpleNamespace(warmup=held_warmup),
    )


def test_the_looks_follow_the_run_as_it_turned_out_before_any_is_spent():
    """The demo's cap includes the network's set-up (a slow one shortens the run) and the relays'
    warm-up is held until they hold the directory (the load starts later): at the first check
    the looks are laid out again, so the first still has 70 s of load behind it and the last comes
    before the new end; recorded as an event. Seen at load 25: warm-up held 64 s, run 199 s."""
    events = []
    stop = SignificanceStop(100, 2, planned_s=243, interval=2, every=True)
    assert stop.test.look_times_s == [100, 200, 233] and stop.test.until == "every"
    runner = _runner(199.0, 30.0, 94.0, events)
    assert stop(runner, 94.0) is None  # the first check: re-planned, no look due yet
    assert stop.test.look_times_s == [164, 189] and events[0][0] == "sequential_plan"
    assert events[0][1].startswith(
        "looks laid out again (the warm-up held 64 s longer; the run's planned end at 199 s)"
    )
    runner.planned = 150.0  # only the first check re-plans
    stop(runner, 96.0)
    assert stop.test.look_times_s == [164, 189] and len(events) == 1


def test_a_run_as_planned_keeps_its_looks():
    events = []
    stop = SignificanceStop(100, 2, planned_s=243, interval=2, every=True)
    assert stop(_runner(243.0, 30.0, 30.0, events), 30.0) is None
    assert stop.test.look_times_s == [100, 200, 233] and events == []


def _ended(tmp_path, reason: str, looks: list[str]):
    from alloclab.store import DB_NAME, Store

    store = Store.create(tmp_path / DB_NAME)
    with store.transaction():
        store.set_meta(end_reason=reason)
        for i, text in enumerate(looks):
            store.add_event(1000.0 + i, "sequential_look", text)
    store.close()
    return demo.how_it_ended(tmp_path)


def test_the_demo_says_why_the_run_ended(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    decided = (
        "stopped early at look 1: every comparison decided against glibc by look 1: jemalloc-5.3.0 lower "
        "(adjusted p 0.0006, look 1) (sequential test, total false-stop rate ≤ 0.05)"
    )
    assert _ended(tmp_path / "a", decided, []) == f"stopped as soon as every comparison was decided: {decided}"
    capped = _ended(
        tmp_path / "b",
        "max duration reached",
        [
            "look 1: not decided at 0.0099: mimalloc-3.0.1 (adjusted p 0.2)",
            "look 2: not decided at 0.02: mimalloc-3.0.1 (adjusted p 0.03)",
        ],
    )
    assert capped == (
        "ran to the cap (max duration reached), not every comparison decided — at the last look 2: not "
        "decided at 0.02: mimalloc-3.0.1 (adjusted p 0.03)"
    )
    assert _ended(tmp_path / "c", "max duration reached", []).endswith("no look of the sequential rule was reached")


def test_the_network_waits_for_its_consensus_only_as_long_as_the_cap_leaves():
    exp = parse_experiment(real_experiment_text(243, consensus_timeout=163), "real.toml")
    assert exp.scenario.consensus_timeout == 163
