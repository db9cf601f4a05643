"""--json on the verbs that report a result (issue 52): one JSON document on stdout whose figures
are the run's / the file's, nothing else on stdout; and piped output as wide as COLUMNS says, not a
fixed 160 columns. The CLI runs as a user runs it (a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from alloclab.allocators import catalog
from alloclab.run.workloads import MODELS
from tests.conftest import run_cli
from tests.unit.test_check_as_run import SHORT
from tests.unit.test_merge import host_run

TORUTILS = Path(__file__).parents[1] / "data" / "1aeo-torutils" / "co-guard-2025-09"


def _json(*args: str, **kw):
    p = run_cli(*args, **kw)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # the whole of stdout is the document


def test_merge_json_names_the_merged_runs_groups_and_hosts(tmp_path):
    a, b = host_run(tmp_path / "h1", "h1", 1000.0), host_run(tmp_path / "h2", "h2", 1000.3)
    doc = _json("merge", str(a), str(b), "-o", str(tmp_path / "merged"), "--json")
    assert doc["run"] == str((tmp_path / "merged").resolve()) and doc["hosts"] == ["h1", "h2"]
    assert {g["name"]: g["replicas"] for g in doc["groups"]} == {"glibc": 4, "jemalloc": 4}


def test_report_json_is_the_summary_json_it_wrote(tmp_path):
    run = host_run(tmp_path / "run", "h1", 1000.0)
    doc = _json("report", str(run), "--json")
    written = json.loads((run / "summary.json").read_text())
    assert doc == written and doc["baseline"] == "glibc" and {r["group"] for r in doc["groups"]} >= {"glibc"}


def test_check_json_lists_the_groups_and_the_warnings_run_would_print(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text(SHORT)
    doc = _json("check", str(exp), "--json")
    assert [g["name"] for g in doc["groups"]] == ["a", "b"] and doc["interval_s"] == 10
    assert [w["kind"] for w in doc["warnings"]] == ["design-cannot-show-difference", "too-short-planned"]
    assert doc["steady_allowance"]["samples_most"] == 6


def test_import_torutils_json_names_the_new_run(tmp_path):
    doc = _json("import", "torutils", str(TORUTILS), "-o", str(tmp_path / "imported"), "--json", timeout=600)
    assert doc["run"] == str((tmp_path / "imported").resolve()) and len(doc["groups"]) >= 2
    assert all(g["replicas"] >= 1 for g in doc["groups"])


def test_listings_json_hold_every_entry():
    listed = _json("workloads", "--json")
    assert [w["name"] for w in listed][: len(MODELS)] == list(MODELS)
    assert all(w["defaults"] == MODELS[w["name"]].defaults for w in listed[: len(MODELS)])
    ids = [a["id"] for a in _json("allocators", "list", "--json")]
    assert ids == [*catalog.entries(), "glibc"]


def test_piped_tables_follow_columns_and_a_log_gets_160():
    narrow = run_cli("workloads", env={"COLUMNS": "70"})
    assert narrow.returncode == 0 and max(map(len, narrow.stdout.splitlines())) <= 70
    assert "\x1b[" not in narrow.stdout  # plain: no colour codes in a pipe
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    log = subprocess.run(
        [sys.executable, "-m", "alloclab", "workloads"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        start_new_session=True,
    )  # no terminal anywhere
    widths = [len(line) for line in log.stdout.splitlines()]
    assert max(widths) <= 160 and max(widths) > 100
