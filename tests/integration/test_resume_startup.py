"""A kill during start-up (after the store exists, before the run is recorded in it) leaves a
directory `run --resume` closes cleanly, never one it refuses (issue 30, item 10)."""

from __future__ import annotations

import sqlite3

from alloclab.store import DB_NAME, Store
from tests.conftest import run_cli


def test_resume_closes_a_store_only_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    Store.create(run / DB_NAME).close()  # exactly what a kill right after Store.create leaves
    r = run_cli("run", "--resume", str(run), "--no-report")
    assert r.returncode == 0, r.stdout + r.stderr
    meta = dict(sqlite3.connect(run / DB_NAME).execute("SELECT key, value FROM meta").fetchall())
    assert meta["end_reason"] == "killed" and meta["cut_short"] == "killed"
