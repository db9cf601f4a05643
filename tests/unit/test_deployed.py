"""Which generation a unit follows (alloclab.fleet.deployed): the newest live one that lists it,
once it restarted the unit; the one before while the rollout has not reached it; the state before
alloclab once every generation that moved it was rolled back; the collector's plan when none ever did."""

from __future__ import annotations

import hashlib
import json

import pytest

from alloclab.fleet import deploy, deployed, systemd

GLIBC = {"name": "glibc", "allocator": "glibc", "kind": "system", "library": None, "sha256": None, "env": {}}
JEMALLOC = {
    "name": "deploy",
    "allocator": "jemalloc@5.3.0",
    "kind": "preload",
    "library": "/opt/libjemalloc.so.2",
    "sha256": "ab" * 32,
    "env": {},
}


def gen(number: int, at: float, groups: dict, rolled_back: bool = False) -> deployed.Generation:
    return deployed.Generation(f"2026110{number}-120000", number, at, rolled_back, groups)


def test_a_unit_follows_the_newest_generation_once_it_restarted_it():
    gens = [gen(1, 1000.0, {"a": GLIBC, "b": GLIBC}), gen(2, 2000.0, {"a": JEMALLOC, "b": JEMALLOC})]
    moved = deployed.following(gens, "a", GLIBC, started=2000.5)
    assert (moved.label, moved.number, moved.group) == ("20261102-120000", 2, JEMALLOC)
    waiting = deployed.following(gens, "b", GLIBC, started=1500.0)  # a later batch, not restarted yet
    assert (waiting.label, waiting.group) == ("20261101-120000", GLIBC)
    down = deployed.following(gens, "b", GLIBC, started=None)  # no process: no verdict either way
    assert down.label == "20261102-120000"


def test_a_rollback_returns_to_the_generation_before_and_then_to_before_alloclab():
    gens = [gen(1, 1000.0, {"a": GLIBC}), gen(2, 2000.0, {"a": JEMALLOC}, rolled_back=True)]
    back = deployed.following(gens, "a", GLIBC, started=3000.0)
    assert (back.label, back.number, back.group) == ("20261101-120000", 1, GLIBC)
    gens = [gen(1, 1000.0, {"a": GLIBC}, rolled_back=True)]
    before = deployed.following(gens, "a", JEMALLOC, started=3000.0)
    assert (before.label, before.number, before.group) == (deployed.NONE, 0, None)  # allocator unknown


def test_a_unit_no_generation_ever_listed_runs_as_the_plan_says():
    f = deployed.following([gen(1, 1000.0, {"a": GLIBC})], "z", JEMALLOC, started=5.0)
    assert (f.label, f.group) == (deployed.NONE, JEMALLOC)


def _generation_dir(root, name: str, plan_path, plan: dict, copy: bool) -> None:
    where = deploy.state_dir(root) / "applied" / name
    (where / "backup").mkdir(parents=True)
    plan_path.write_text(json.dumps(plan))
    manifest = {
        "plan": str(plan_path),
        "plan_id": hashlib.sha256(plan_path.read_bytes()).hexdigest()[:12],
        "units": {
            "a.service": {"dropin": str(deploy.dropin_path(root, "a.service")), "had_file": False, "dir_existed": False}
        },
    }
    (where / "manifest.json").write_text(json.dumps(manifest))
    if copy:
        (where / "plan.json").write_text(json.dumps(plan))


def test_generations_read_their_own_plan_copy_and_never_guess_a_rewritten_one(tmp_path):
    root = tmp_path / "root"
    plan = {
        "version": 1,
        "groups": [JEMALLOC],
        "units": ["a.service"],
        "assignments": [{"unit": "a.service", "group": "deploy"}],
        "deployed_from": {"group": "jemalloc-bg", "run": "/runs/fleet"},
    }
    _generation_dir(root, "20261102-120000", tmp_path / "deploy.json", plan, copy=True)
    (tmp_path / "deploy.json").write_text("{}")  # a later deploy rewrote the plan file
    gens, complete, problems = deployed.generations(root)
    assert complete and not problems and [g.name for g in gens] == ["20261102-120000"]
    assert gens[0].groups["a.service"]["name"] == "jemalloc-bg"  # the run's group it deploys
    assert gens[0].applied_at == pytest.approx(deployed._stamp_time("20261102-120000"))
    known: dict = {}
    assert deployed.generations(root, known=known)[0] == gens and list(known) == ["20261102-120000"]
    _generation_dir(root, "20261103-120000", tmp_path / "old.json", plan, copy=False)  # before generations kept a copy
    assert len(deployed.generations(root, known=known)[0]) == 2 and list(known) == ["20261102-120000"]
    (tmp_path / "old.json").write_text(json.dumps({**plan, "seed": 1}))
    gens, complete, problems = deployed.generations(root)  # its units listed, their group unknown
    assert gens[1].groups == {"a.service": None} and "rewritten since it was applied" in problems[0]
    assert deployed.following(gens, "a.service", GLIBC, started=None).group is None
    (deploy.state_dir(root) / "applied" / "20261104-120000").mkdir()  # an apply writing its manifest
    (tmp_path / "old.json").write_text(json.dumps(plan))
    assert deployed.generations(root)[1] is False


def test_the_collector_reads_a_generation_on_the_tick_its_manifest_appears(tmp_path):
    """An apply makes its directory, then writes its manifest, then restarts units: the collector
    must not wait before reading it again, or the first restarted units are judged by the
    generation before (seen as off their allocator)."""
    from alloclab.fleet import collector

    root = tmp_path / "root"
    follower = collector.Follower(systemd.LocalUnits(root), {}, None, 300.0, None)
    assert follower.gens == [] and not follower.refresh()
    (deploy.state_dir(root) / "applied" / "20261102-120000").mkdir(parents=True)  # no manifest yet
    follower.refresh()
    assert follower.gens == [] and not follower.complete
    plan = {
        "version": 1,
        "groups": [JEMALLOC],
        "units": ["a.service"],
        "assignments": [{"unit": "a.service", "group": "deploy"}],
    }
    (deploy.state_dir(root) / "applied" / "20261102-120000").rmdir()
    _generation_dir(root, "20261102-120000", tmp_path / "deploy.json", plan, copy=True)
    assert follower.refresh() and [g.name for g in follower.gens] == ["20261102-120000"]
    assert not follower.refresh()  # complete, unchanged: nothing read again
