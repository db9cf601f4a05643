"""After a deploy the watch follows it: a real collector over real units (the local stand-in for
systemd, real processes under real allocators) and a real Prometheus evaluating the shipped rules,
across apply -> deploy -> a unit reverted by hand -> rollback. The labels follow the generation
each unit runs; the memory series keep their identity (host and unit) throughout; no unit that
followed the deploy, nor one the rollout had not restarted yet, is ever "off its allocator"; the
unit reverted by hand is; each unit's level before the deploy is its collector's own mean."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from alloclab.fleet import deploy, systemd
from tests.conftest import run_cli
from tests.integration.test_monitoring import DASHBOARD, RULES, dashboard_query, generation_panel
from tests.integration.test_prometheus import free_port, make_host, query, start_prometheus, stop_servers, stop_units
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus missing: run scripts/install.sh --test"),
]

TICK = 0.5  # the collector's interval
SCRAPE = 1.0  # Prometheus' scrape and rule evaluation interval
OFF = 'ALERTS{alertname="AlloclabUnitOffItsAllocator"}'
HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "watch-after-deploy.md"


def how_to_queries() -> list[str]:
    """The how-to's PromQL block, each line a query run here verbatim."""
    block = re.search(r"```promql\n(.*?)```", HOW_TO.read_text(), re.DOTALL).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def range_query(url: str, promql: str, start: float, end: float) -> list:
    args = urllib.parse.urlencode(
        {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{SCRAPE:g}s"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{args}", timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def by_unit(url: str, promql: str) -> dict[str, dict]:
    """unit -> {labels..., "value": float} of an instant query (nothing while Prometheus starts)."""
    try:
        return {r["metric"]["unit"]: {**r["metric"], "value": float(r["value"][1])} for r in query(url, promql)}
    except OSError:
        return {}


def generations(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "var/lib/alloclab/fleet/applied").iterdir())


def test_labels_follow_apply_deploy_and_rollback_and_memory_series_keep_their_identity(tmp_path, native_dir, jemalloc):
    groups = (
        f'name = "relays"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f'[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n'
    )
    root, plan_file = make_host(tmp_path, "h1", groups, 4, native_dir)  # plan + apply: generation 1
    plan = {a["unit"]: a["group"] for a in json.loads(plan_file.read_text())["assignments"]}
    [first] = generations(root)
    port = free_port()
    run = tmp_path / "run"
    collector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alloclab",
            "fleet",
            "collect",
            "--plan",
            str(plan_file),
            "-o",
            str(run),
            "--interval",
            f"{TICK}s",
            "--root",
            str(root),
            "--systemctl",
            "local",
            "--listen",
            f"127.0.0.1:{port}",
            "--host",
            "h1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    prom, url = start_prometheus(tmp_path, [port], SCRAPE, rules=RULES)
    try:
        t0 = time.time()
        # generation 1, as applied: each unit in its plan group, every one verified
        wait_for(
            lambda: (
                len(by_unit(url, f'alloclab_unit_info{{generation="{first}"}}')) == 4
                and len(by_unit(url, "alloclab_unit_allocator_verified == 1")) == 4
            ),
            40,
            "generation 1 scraped, verified",
        )
        assert {u: i["group"] for u, i in by_unit(url, "alloclab_unit_info").items()} == plan
        assert {i["value"] for i in by_unit(url, "alloclab_unit_generation").values()} == {1.0}

        # the deploy: two batches, each settling 3 s (the second batch waits on the old allocator meanwhile)
        deploy_start = time.time()
        p = run_cli(
            "fleet",
            "deploy",
            jemalloc,
            "--units",
            "relay@*",
            "--batch",
            "2",
            "--settle",
            "3s",
            "--guard-interval",
            "0.5s",
            "--baseline",
            "none",
            "-o",
            str(tmp_path / "deploy.json"),
            "--root",
            str(root),
            "--systemctl",
            "local",
        )
        assert p.returncode == 0, p.stderr
        second = generations(root)[-1]
        wait_for(
            lambda: (
                len(by_unit(url, f'alloclab_unit_info{{generation="{second}"}}')) == 4
                and len(by_unit(url, "alloclab_unit_allocator_verified == 1")) == 4
            ),
            30,
            "generation 2 scraped, verified",
        )
        deploy_end = time.time()
        deployed = by_unit(url, "alloclab_unit_info")
        assert {(i["group"], i["allocator"]) for i in deployed.values()} == {("deploy", "jemalloc")}
        assert {i["value"] for i in by_unit(url, "alloclab_unit_generation").values()} == {2.0}
        # no unit was ever off its allocator through the deploy: not the ones that followed it, not the
        # second batch while the first settled
        off_during = range_query(url, "alloclab_unit_allocator_verified == 0", deploy_start - 1, deploy_end)
        assert not off_during, (
            [(r["metric"]["unit"], plan[r["metric"]["unit"]], r["values"]) for r in off_during],
            deploy_start,
            sqlite3.connect(run / "run.db").execute("SELECT t, kind, description FROM events").fetchall(),
        )
        assert not range_query(url, OFF, t0, deploy_end)
        # each unit's level before the deploy: the mean of its stored resident memory in the day before
        applied_at = json.loads((root / "var/lib/alloclab/fleet/applied" / second / "manifest.json").read_text())[
            "applied_at"
        ]
        db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
        stored = dict(
            db.execute(
                "SELECT r.name, AVG(s.rss_kb) * 1024 FROM samples s JOIN replicas r ON r.id = s.replica_id "
                "WHERE s.t >= ? AND s.t < ? GROUP BY r.name",
                (applied_at - 86400, applied_at),
            ).fetchall()
        )
        db.close()
        before = {u: i["value"] for u, i in by_unit(url, "alloclab_unit_pre_deploy_bytes").items()}
        assert before.keys() == stored.keys() == set(plan)
        assert all(abs(before[u] - stored[u]) <= 1e-6 * stored[u] for u in plan), (before, stored)
        # the dashboard's before/after panel, as Prometheus answers it: one row, generation 2, the same four units
        panel = {
            t["refId"]: dashboard_query(t["expr"])
            for t in generation_panel(json.loads(DASHBOARD.read_text()))["targets"]
        }
        answers = {
            ref: {r["metric"]["generation"]: float(r["value"][1]) for r in query(url, expr)}
            for ref, expr in panel.items()
        }
        assert answers["units"] == {second: 4.0}
        assert answers["before"].keys() == {second}
        assert answers["before"][second] == pytest.approx(sum(before.values()), rel=1e-6)
        assert answers["after"].keys() == {second} and answers["after"][second] > 0
        # the how-to's queries, verbatim: now before / after by generation, each unit's ratio, none off
        now, was, ratio, off_query = how_to_queries()
        assert (
            {r["metric"]["generation"] for r in query(url, now)}
            == {r["metric"]["generation"] for r in query(url, was)}
            == {second}
        )
        assert sorted(r["metric"]["unit"] for r in query(url, ratio)) == sorted(plan)
        assert query(url, off_query) == []

        # a glibc unit reverted by hand (its drop-in removed, restarted): off the deployed allocator
        reverted = min(u for u, g in plan.items() if g == "glibc")
        deploy.dropin_path(root, reverted).unlink()
        systemd.LocalUnits(root).restart(reverted)
        off = wait_for(lambda: by_unit(url, OFF), 30, "the reverted unit's alert pending")
        assert (
            list(off) == [reverted]
            and off[reverted]["generation"] == second
            and off[reverted]["alertstate"] == "pending"
        )
        assert off[reverted]["allocator"] == deployed[reverted]["allocator"]
        assert [(r["metric"]["unit"], r["metric"]["generation"]) for r in query(url, off_query)] == [(reverted, second)]

        # the rollback: every unit back on generation 1 (its labels, its groups), verified again
        rollback_at = time.time()
        p = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
        assert p.returncode == 0, p.stderr
        wait_for(
            lambda: (
                len(by_unit(url, f'alloclab_unit_info{{generation="{first}"}}')) == 4
                and len(by_unit(url, "alloclab_unit_allocator_verified == 1")) == 4
            ),
            30,
            "generation 1 again, verified",
        )
        assert {u: i["group"] for u, i in by_unit(url, "alloclab_unit_info").items()} == plan
        assert {i["value"] for i in by_unit(url, "alloclab_unit_generation").values()} == {1.0}
        span = int(time.time() - t0) + 5
        # one memory series per unit through it all; two identities (generation 1's series came back)
        memory = f'alloclab_unit_memory_bytes{{memtype="resident"}}[{span}s]'
        assert {u: i["value"] for u, i in by_unit(url, f"count by (unit) (last_over_time({memory}))").items()} == {
            u: 1.0 for u in plan
        }
        assert {
            u: i["value"]
            for u, i in by_unit(url, f"count by (unit) (last_over_time(alloclab_unit_info[{span}s]))").items()
        } == {u: 2.0 for u in plan}
        series = query(url, memory)  # their raw samples
        assert sorted(r["metric"]["unit"] for r in series) == sorted(plan)
        assert all(float(r["values"][0][0]) < deploy_start and float(r["values"][-1][0]) > rollback_at for r in series)
    finally:
        stop_servers([collector], prom)
        stop_units({"h1": (root, plan_file)})
    # the run keeps the experiment, and each move as an event
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    moves = [d for (d,) in db.execute("SELECT description FROM events WHERE kind = 'deployed_state' ORDER BY t")]
    db.close()
    for unit in plan:
        assert [m.split(": ")[1] for m in moves if m.startswith(f"{unit}:")] == [
            f"generation {second}",
            f"generation {first}",
        ], moves
