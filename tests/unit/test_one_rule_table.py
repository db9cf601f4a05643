"""One definition of every rule (issue 53): one thresholds table, one status classifier. A second
table or a second classify — the analysis once kept its own RULES (two keys disagreeing with the
statistics' table) and a fallback classify — fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import alloclab
from alloclab.stats.rules import RULES

PACKAGE = Path(alloclab.__file__).parent


def _definitions(predicate) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if predicate(node):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def _is_rules_table(node) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return (
        any(isinstance(t, ast.Name) and t.id.endswith("RULES") for t in targets)
        and isinstance(node.value, ast.Dict)
        and any(
            isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and isinstance(v.value, (int, float))
            for k, v in zip(node.value.keys, node.value.values)
        )
    )


def test_there_is_one_table_of_thresholds():
    defs = _definitions(_is_rules_table)
    assert [d.split(":")[0] for d in defs] == ["stats/rules.py"], defs


def test_there_is_one_classify():
    defs = _definitions(lambda n: isinstance(n, ast.FunctionDef) and n.name == "classify")
    assert [d.split(":")[0] for d in defs] == ["stats/status.py"], defs


def test_every_key_of_the_table_is_read_somewhere():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "rules.py")
    unread = [k for k in RULES if f'"{k}"' not in source and f"'{k}'" not in source]
    assert not unread, f"rules no code reads: {unread}"


def test_there_is_one_release_events():
    defs = _definitions(lambda n: isinstance(n, ast.FunctionDef) and n.name == "release_events")
    assert [d.split(":")[0] for d in defs] == ["stats/status.py"], defs
