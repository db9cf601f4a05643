"""Bad input and environment failures through the CLI's one error path (alloclab.cli.main, in this
process): one line naming the problem and the fix, exit code 2 (3 only for a full disk), no
traceback, nothing recorded lost. The stores are made directly (test_merge.host_run)."""
from __future__ import annotations

import hashlib
import sqlite3

import pytest

from tests.unit.test_cli_outputs import alloclab, one_line
from tests.unit.test_merge import host_run


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def two_hosts(tmp_path):
    return host_run(tmp_path / "h1", "h1", 1000.0), host_run(tmp_path / "h2", "h2", 1000.3)


@pytest.mark.parametrize("damage", ["DROP TABLE events", "UPDATE samples SET t = 1e300 WHERE rowid = 3"])
def test_a_damaged_store_is_bad_input_to_every_reader(monkeypatch, capsys, tmp_path, two_hosts, damage):
    a, b = two_hosts
    conn = sqlite3.connect(b / "run.db")
    conn.execute(damage)
    conn.commit()
    conn.close()
    before = _digest(b / "run.db")
    for argv in (["merge", str(a), str(b), "-o", str(tmp_path / "m")], ["report", str(b)], ["compare", str(a), str(b)],
                 ["export", str(b), "--csv", str(tmp_path / "csv")]):
        one_line(*alloclab(monkeypatch, capsys, *argv), f"{b / 'run.db'} is damaged", "integrity_check", "restore it")
    assert _digest(b / "run.db") == before and not (tmp_path / "m").exists() and not (b / "report.md").exists()


@pytest.mark.parametrize("empty", ["0 bytes", "no tables"])
def test_an_empty_store_is_called_empty(monkeypatch, capsys, tmp_path, two_hosts, empty):
    a, _ = two_hosts
    db = tmp_path / "h3" / "run.db"
    db.parent.mkdir()
    db.touch()
    if empty == "no tables":                    # an SQLite file (header written) that holds nothing
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA user_version = 1")
        conn.close()
        assert db.stat().st_size > 0
    for argv in (["merge", str(a), str(db.parent), "-o", str(tmp_path / "m")], ["report", str(db.parent)]):
        one_line(*alloclab(monkeypatch, capsys, *argv), f"{db} is empty: no run was recorded in it",
                 "leave this one out")
    assert not (tmp_path / "m").exists()
