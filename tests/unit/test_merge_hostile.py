"""Issue 46, item 8: `merge` names the source, not its own output, when a source's replica belongs
to no group or two hosts' replicas would get the same merged name (HOST/NAME)."""

from __future__ import annotations

import sqlite3

import pytest

from alloclab.common.errors import UserError
from alloclab.interchange.merge import merge_runs
from tests.unit.test_two_runs import make_run


def _run(path, host: str, sql: str | None = None):
    run = make_run(path, {"g": [100, 101], "h": [60, 61]})
    conn = sqlite3.connect(run / "run.db")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'host'", (host,))
    if sql:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return run


def test_a_replica_of_no_group_is_the_sources_damage(tmp_path):
    a = _run(tmp_path / "a", "h1")
    b = _run(tmp_path / "b", "h2", "UPDATE replicas SET group_id = 99 WHERE name = 'g-1'")
    with pytest.raises(UserError, match=r"b/run\.db is damaged: replica 'g-1' belongs to no group") as e:
        merge_runs([a, b], tmp_path / "m", say=lambda *_: None)
    assert str(tmp_path / "m") not in e.value.problem and not (tmp_path / "m").exists()


def test_colliding_merged_names_are_refused_before_writing(tmp_path):
    a = _run(tmp_path / "a", "x/g-1")
    b = _run(tmp_path / "b", "x", "UPDATE replicas SET name = 'g-1/g-1' WHERE name = 'g-1'")
    with pytest.raises(UserError, match="'x/g-1/g-1' .* same merged name"):
        merge_runs([a, b], tmp_path / "m", say=lambda *_: None)
    assert not (tmp_path / "m").exists()
