"""bisect's step rule, version ranges, sweep files, batches and the Pareto front (no runs)."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.allocators import version_range
from alloclab.common.errors import UserError
from alloclab.reporters.sweep import pareto_front
from alloclab.stats import ThresholdTest
from alloclab.studies import derive, sweep


def levels(geo: float, n: int = 5, cv: float = 0.01, seed: int = 0) -> np.ndarray:
    return geo * np.exp(cv * np.random.default_rng(seed).standard_normal(n))


def test_threshold_bad_good_and_undecided():
    good = levels(100, seed=1)
    assert ThresholdTest(1.10).update(good, levels(150, seed=2)).verdict == "bad"
    assert ThresholdTest(1.10).update(good, levels(100, seed=3)).verdict == "good"
    # on the threshold itself neither side can be shown
    d = ThresholdTest(1.10).update(good, good * 1.10)
    assert d.verdict is None and d.ratio == pytest.approx(1.10)
    # 1.5x is bad against 1.10 but good against 2.0: the threshold moves the null, not the data
    assert ThresholdTest(2.0).update(good, levels(150, seed=2)).verdict == "good"


def test_threshold_spends_looks_at_doublings_only():
    t = ThresholdTest(1.10, max_looks=3, first_look_s=10)
    good, same = levels(100, n=3, cv=0.2, seed=4), levels(104, n=3, cv=0.2, seed=5)
    assert t.update(good, same, elapsed_s=10).look == 1
    assert t.update(good, same, elapsed_s=15).look == 0  # between looks: nothing spent
    assert not t.due(19) and t.due(20)


def test_versions_between_orders_and_refuses():
    v = version_range.versions_between("mimalloc", "2.0.9", "3.0.1")
    assert v[0] == "mimalloc@2.0.9" and v[-1] == "mimalloc@3.0.1" and len(v) > 2
    assert [version_range.version_key(x.split("@")[1]) for x in v] == sorted(
        version_range.version_key(x.split("@")[1]) for x in v
    )
    assert version_range.versions_between("mimalloc", "3.0.1", "2.0.9") == v[::-1]
    with pytest.raises(UserError, match="not a known version"):
        version_range.versions_between("mimalloc", "2.0.9", "9.9.9")


def test_grid_applies_each_axis_to_its_family_with_defaults():
    spec = sweep.parse_sweep_table(
        {
            "allocators": ["mimalloc@3.0.1", "glibc"],
            "tunables": {"MIMALLOC_PURGE_DELAY": [0, 10], "MALLOC_ARENA_MAX": [1, 2, 4]},
        },
        "s.toml",
    )
    labels = [p.label for p in spec.points]
    assert labels[0] == "mimalloc@3.0.1"  # the baseline: first allocator, defaults
    assert len(spec.points) == 3 + 4  # mimalloc: default, 0, 10; glibc: default, 1, 2, 4
    assert "mimalloc@3.0.1 MIMALLOC_PURGE_DELAY=0" in labels and "glibc MALLOC_ARENA_MAX=4" in labels
    assert not any("MALLOC_ARENA_MAX" in label and "mimalloc" in label for label in labels)


@pytest.mark.parametrize(
    "table, message",
    [
        ({"allocators": ["glibc"], "tunables": {"MIMALLOC_PURGE_DELAY": [0]}}, "no allocator of the sweep is mimalloc"),
        ({"allocators": ["glibc"], "tunables": {"MALLOC_ARENA_MAX": [1, 1]}}, "repeats a value"),
        ({"allocators": ["glibc"], "colour": 1}, "unknown key 'colour' in [sweep]"),
        ({"allocators": ["glibc"]}, "only its baseline"),
        ({"allocators": ["glibc"], "tunables": {"MALLOC_ARENA_MAX": []}}, "non-empty list"),
        ({"allocators": ["glibc"], "tunables": {"MALLOC_ARENA_MAX": [1]}, "max_groups_per_batch": 1}, "out of range"),
        (
            {"allocators": ["glibc"], "tunables": {"MALLOC_ARENA_MAX": [1]}, "baseline": "jemalloc@5.3.0"},
            "not an allocator of the sweep",
        ),
    ],
)
def test_sweep_table_mistakes_are_one_line(table, message):
    with pytest.raises(UserError) as exc:
        sweep.parse_sweep_table(table, "s.toml")
    assert message in str(exc.value) and "\n" not in str(exc.value) and str(exc.value).startswith("s.toml")


def test_batches_share_the_baseline_and_cover_every_point_once():
    points = [derive.Point("glibc", {"MALLOC_ARENA_MAX": str(i)}) for i in range(8)]
    chunks = sweep.batches(points, 4)
    assert all(c[0] == points[0] and len(c) <= 4 for c in chunks)
    rest = [p for c in chunks for p in c[1:]]
    assert sorted(rest, key=str) == sorted(points[1:], key=str) and len(chunks) == 3
    assert sweep.batches(points, 64) == [points]


def test_batch_limit_from_cores_and_memory():
    assert sweep.batch_limit(3, 256, cores=2, available_mb=64000) == 4  # 12 replicas on 2 cores
    assert sweep.batch_limit(3, 4000, cores=32, available_mb=48000) == 2  # memory-bound: never below 2
    assert sweep.batch_limit(1, 10, cores=64, available_mb=1e6) == 64  # capped at MAX_GROUPS


def test_pareto_front():
    pts = [(1.0, 1.0), (2.9, 0.7), (1.5, 1.2), (3.0, 0.7), (0.9, 1.3)]
    assert pareto_front(pts) == {0, 1, 4}


def test_derived_experiment_round_trips(tmp_path):
    base = derive.base_experiment("sawtooth", replicas=2, interval="0.5s", warmup="2s", params={"period": 100})
    exp = derive.derive(
        base,
        "t",
        [
            ("a", derive.Point("glibc", {"MALLOC_ARENA_MAX": "2"}, {"mb": 8})),
            ("b", derive.Point("glibc", {}, {"mb": 16})),
        ],
        "a",
        load_s=20,
    )
    again = derive.parse_experiment(derive.to_toml(exp), "again", exp.base_dir)
    assert again.groups == exp.groups and again.phases == exp.phases and again.replicas == 2
    assert "--mb" in exp.group("b").command and "16" in exp.group("b").command
    assert exp.group("a").env == {"MALLOC_ARENA_MAX": "2"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"param": "colour", "values": "1,2"}, "workload sawtooth has no parameter 'colour'"),
        ({"target": "nosuch", "param": "mb", "values": "1,2"}, "neither an experiment file nor a built-in workload"),
        ({"param": "mb", "values": "1,2", "first_look": "30s", "max_step": "20s"}, "is not shorter than --max-step"),
        ({"param": "mb", "values": "1,x"}, "is not a number"),
        ({"param": "mb", "values": "1,2", "good": "1"}, "--good/--bad go with --family"),
        ({"family": "mimalloc", "good": "2.0.9"}, "--family needs --good VERSION and --bad VERSION"),
        ({"param": "mb", "values": "1,2", "metric": "vsz"}, "--metric 'vsz' is not known"),
    ],
)
def test_bisect_command_refuses_before_creating_anything(tmp_path, kwargs, message):
    from rich.console import Console

    from alloclab.commands.bisect import bisect_command

    args = dict(
        target="sawtooth",
        family=None,
        good=None,
        bad=None,
        variant=None,
        tunable=None,
        param=None,
        values=None,
        allocator=None,
        metric="rss",
        threshold_ratio=1.1,
        replicas=None,
        interval=None,
        warmup=None,
        workload_params=(),
        max_step="60s",
        first_look="10s",
        check_bad=True,
        no_report=True,
        output=tmp_path / "out",
        console=Console(),
    )
    args.update(kwargs)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        bisect_command(**args)
    assert not (tmp_path / "out").exists()
