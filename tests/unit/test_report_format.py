"""report.md prints build provenance for a reader, never as Python reprs (issue 27)."""

from __future__ import annotations

from alloclab.reporters.markdown import provenance_value
from alloclab.reporters.tables import KEY_COLUMNS, TABLE_HEADERS


def test_provenance_values_are_formatted():
    assert provenance_value("built_at", 1795473836.308816) == "2026-11-23 22:43:56 UTC"
    assert "None" not in provenance_value("build", {"compiler": None, "cc": "gcc 12", "flags": ["-O2", "-g"]})
    assert provenance_value("build", {"compiler": None, "flags": ["-O2", "-g"]}) == "flags=`-O2`, `-g`"
    assert provenance_value("sha256", "ab" * 4) == "`abababab`" and provenance_value("jobs", 4) == "4"


def test_key_columns_come_first():
    assert TABLE_HEADERS[:KEY_COLUMNS] == ["group", "level MB", "vs baseline [CI]", "status"]
