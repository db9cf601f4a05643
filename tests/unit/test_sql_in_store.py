"""SQL lives only in `store`: every other module reads and writes through its API."""
from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "alloclab"
SQL = re.compile(r"\b(SELECT\s+[\w*(]|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX))")
RAW = re.compile(r"\.(query|execute|executemany|executescript)\(")


def test_no_sql_outside_store():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "store.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if SQL.search(line) or RAW.search(line):
                offenders.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not offenders, "SQL outside store.py:\n" + "\n".join(offenders)


def test_the_check_can_fail():
    assert SQL.search('rows = conn.execute("SELECT t FROM samples")') and RAW.search("store.query(")
