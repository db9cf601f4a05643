"""SQL lives only in `store`: every other module reads and writes through its API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "alloclab"
SQL = re.compile(
    r"\b(SELECT\s+[\w*(]|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX))"
)
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


# ---- the store's write API is typed: nobody else builds table names or holds the connection ----
TABLES = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", (SRC / "store.py").read_text()))
ROW_WRITES = {"insert", "insert_many", "update", "_insert", "_insert_many", "_update"}


def store_bypasses(source: str) -> list[str]:
    """What in `source` goes around the store's API: importing sqlite3 (its errors arrive as
    StoreError), touching a `.conn`, or naming a table in a row write (`insert("replicas", …)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "sqlite3" for a in node.names)
            or isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "sqlite3"
        ):
            found.append(f"{node.lineno}: imports sqlite3")
        elif isinstance(node, ast.Attribute) and node.attr == "conn":
            found.append(f"{node.lineno}: uses .conn")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ROW_WRITES
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in TABLES
        ):
            found.append(f"{node.lineno}: {node.func.attr}({node.args[0].value!r}, …)")
    return found


# a cheap text filter first: only files that could hold a bypass are parsed
SUSPECT = re.compile(r"sqlite3|\.conn\b|\(\s*[\"'](" + "|".join(sorted(TABLES)) + r")[\"']")


def test_no_module_goes_around_the_store_api():
    texts = {path: path.read_text() for path in sorted(SRC.rglob("*.py")) if path.name != "store.py"}
    offenders = [
        f"{path.relative_to(SRC)}:{where}"
        for path, text in texts.items()
        if SUSPECT.search(text)
        for where in store_bypasses(text)
    ]
    assert not offenders, (
        "outside store.py (use Store.add_*/update_*, transaction()/tick(), StoreError):\n" + "\n".join(offenders)
    )


def test_the_api_check_can_fail():
    old_runner = (
        'import sqlite3\nrid = st.insert("replicas", group_id=1, name="a")\n'
        'self.store.conn.rollback()\nstore.insert_many("samples", cols, rows)\n'
    )
    assert sorted(store_bypasses(old_runner)) == [
        "1: imports sqlite3",
        "2: insert('replicas', …)",
        "3: uses .conn",
        "4: insert_many('samples', …)",
    ]
    assert store_bypasses("from sqlite3 import OperationalError\n")
    assert not store_bypasses('store.add_replica(group_id=1, name="a")\nitems.insert(0, "samples")\n')
    assert all(SUSPECT.search(line) for line in old_runner.splitlines())
