"""Issue 46, item 8: memory figures in a store from elsewhere that are not figures (text, 9.9e307,
inf, negative) are damage said in one line by `report` and `export`, never an internal error."""

from __future__ import annotations

import sqlite3

import pytest

from tests.conftest import run_cli
from tests.unit.test_two_runs import make_run


@pytest.mark.parametrize("value", [9.9e307, "text", float("inf"), -5])
def test_damaged_memory_figures_are_one_line(tmp_path, value):
    run = make_run(tmp_path / "run", {"g": [100, 101], "h": [60, 61]})
    conn = sqlite3.connect(run / "run.db")
    conn.execute("UPDATE samples SET rss_kb = ? WHERE rowid % 7 = 0", (value,))
    conn.commit()
    conn.close()
    for argv in (["report", str(run)], ["export", str(run), "--csv", str(tmp_path / "csv")]):
        r = run_cli(*argv)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (argv, r.stderr)
        assert "samples.rss_kb" in lines[0] and "not a memory figure" in lines[0], lines
