"""Every meta key alloclab reads or writes is either carried by an export (EXPORTED_META) or left
out on purpose (NOT_EXPORTED_META): an exported-then-imported run reads as the run did."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from alloclab.analysis.two_runs import RUN_FIELDS
from alloclab.capture.host import host_metadata
from alloclab.reporters.input import HOST_KEYS
from alloclab.torutils.layout import EXPORTED_META, NOT_EXPORTED_META

SRC = Path(__file__).resolve().parents[2] / "src" / "alloclab"
# `meta["k"]`, `meta.get("k")`, `c.meta.get("k")`, `store.meta().get("k")`, `first.get("k")` in merge's metas
READ = re.compile(r"\bmeta(?:\(\))?(?:\.get\(|\[)\s*[\"'](\w+)[\"']")


def keys_read(source: str) -> set[str]:
    return set(READ.findall(source))


def keys_written(source: str) -> set[str]:
    """The keyword names of every `set_meta(...)` call, and of a `dict(...)` handed to one."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_meta":
            found |= {k.arg for k in node.keywords if k.arg}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and any(k.arg == "source" for k in node.keywords)
        ):  # prometheus_import's meta, built beside its call
            found |= {k.arg for k in node.keywords if k.arg}
    return found


def test_every_meta_key_is_exported_or_left_out_on_purpose():
    texts = {p: p.read_text() for p in sorted(SRC.rglob("*.py"))}
    # only modules that write meta are parsed (a text filter first: parsing all of them costs ~1 s)
    used = set().union(*(keys_read(t) | (keys_written(t) if "set_meta" in t else set()) for t in texts.values()))
    used |= set(host_metadata()) | set(HOST_KEYS) | set(RUN_FIELDS)
    missing = sorted(used - set(EXPORTED_META) - set(NOT_EXPORTED_META))
    assert not missing, f"meta keys an export would lose: {missing} (add them to EXPORTED_META or NOT_EXPORTED_META)"
    assert not set(EXPORTED_META) & set(NOT_EXPORTED_META)


def test_the_scan_finds_reads_and_writes():
    assert keys_read('a = json.loads(meta["tor_network"]) if c.meta.get("records") else store.meta().get(\'x\')') == {
        "tor_network",
        "records",
        "x",
    }
    assert keys_written("store.set_meta(records='alloclab', **more)\nf(dict(source='s', hosts=[]))") == {
        "records",
        "source",
        "hosts",
    }
