"""The shipped Prometheus alert rules and Grafana dashboard (monitoring/): promtool checks the rules
and runs their unit tests; every query of the dashboard parses (promtool, as recording rules);
every alloclab metric they name is one the collector really exports (a real scrape)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from alloclab.serve import metrics

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
RULES = MONITORING / "prometheus" / "alloclab-rules.yml"
DASHBOARD = MONITORING / "grafana" / "alloclab-fleet.json"
QUESTIONS = (
    "Is every unit on its allocator?",
    "Which group uses less memory?",
    "Did a deploy raise memory?",
    "Units on every axis",
)
pytestmark = [
    pytest.mark.prometheus,  # promtool
    pytest.mark.skipif(not shutil.which("promtool"), reason="promtool missing: run scripts/install.sh --test"),
]


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def exported_names() -> set[str]:
    """Every sample name a collector's /metrics has (one unit of each state, the collector's own)."""
    exp = metrics.Exposition(metrics.CollectorHealth())
    exp.publish(
        metrics.Snapshot(
            t=1.0,
            host="h",
            units=[
                metrics.UnitFigures(
                    "u.service",
                    "g",
                    "glibc",
                    "",
                    1,
                    {c: 1 for c in metrics.MEMTYPES},
                    1.0,
                    True,
                    0,
                    start_time=1.0,
                    generation="20260101-000000",
                    generation_number=1,
                    generation_time=1.0,
                    pre_deploy_kb=1.0,
                )
            ],
        )
    )
    server, port = metrics.serve(exp, "127.0.0.1:0")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    finally:
        server.shutdown()
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}


def dashboard_queries(dash: dict) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return out + [a["expr"] for a in dash["annotations"]["list"] if "expr" in a]


def test_the_alert_rules_pass_promtool_and_their_unit_tests():
    check = promtool("check", "rules", str(RULES))
    assert check.returncode == 0, check.stdout + check.stderr
    tests = promtool("test", "rules", "alloclab-rules.test.yml", cwd=RULES.parent)
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr


def test_the_dashboard_asks_the_four_questions_of_any_prometheus(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    [ds] = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert ds["query"] == "prometheus"
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert all(q in rows for q in QUESTIONS), rows
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and all(
                t["datasource"]["uid"] == "${datasource}" for t in p["targets"]
            )
    queries = dashboard_queries(dash)
    # each query, with Grafana's variables filled in, as a recording rule: promtool parses it
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": dashboard_query(q)} for i, q in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "queries.yml").write_text(json.dumps(rules))  # JSON is YAML
    check = promtool("check", "rules", str(tmp_path / "queries.yml"))
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_metric_the_rules_and_dashboard_name_is_exported():
    exported = exported_names()
    named = set(re.findall(r"\b(?:alloclab_[a-z_]+|process_[a-z_]+)\b", RULES.read_text() + DASHBOARD.read_text()))
    assert named and not named - exported, f"named but never exported: {sorted(named - exported)}"


def generation_panel(dash: dict) -> dict:
    """The panel that answers "what did this deploy do to memory": before and after, per generation."""
    [panel] = [
        p for p in dash["panels"] if p.get("targets") and {t["refId"] for t in p["targets"]} >= {"before", "after"}
    ]
    return panel


def dashboard_query(expr: str) -> str:
    """A dashboard query as Prometheus runs it with every host and group chosen."""
    return expr.replace("$__rate_interval", "5m").replace("$host", ".*").replace("$group", ".*")


def test_the_dashboard_shows_before_and_after_per_generation():
    """Keyed by generation, the same units on both sides (their level before it, their memory now);
    tests/integration/test_watch_after_deploy.py runs these queries on a real Prometheus."""
    panel = generation_panel(json.loads(DASHBOARD.read_text()))
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    for ref in ("before", "after"):
        assert exprs[ref].startswith("sum by (generation) ("), exprs[ref]
        assert "alloclab_unit_pre_deploy_bytes" in exprs[ref] and "alloclab_unit_memory_bytes" in exprs[ref]


def test_the_metrics_reference_names_every_exported_metric_and_every_alert():
    """docs/reference/metrics-and-alerts.md (generated: tests/unit/test_reference.py keeps it current)
    against a real scrape and the rules file."""
    import yaml

    text = (MONITORING.parent / "docs" / "reference" / "metrics-and-alerts.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)`", text, re.M))
    # a histogram's samples and every counter's _created, by the name of the family
    families = {
        re.sub(r"_(bucket|sum|count|created)$", "", n) if "tick_duration" in n else re.sub(r"_created$", "_total", n)
        for n in exported_names()
        if n.startswith("alloclab_")
    }
    assert families and not families - documented, f"exported, not in the reference: {sorted(families - documented)}"
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert alerts and all(f"| `{a}` |" in text for a in alerts), alerts
