"""`fleet deploy --from-run RUN`: the group a decided fleet run recommends is deployed exactly as it
was tested (its library by sha256, its env) on real processes standing in for systemd units (the
LocalUnits seam), and the deployment records which run and verdict it deployed."""

from __future__ import annotations

import json
import os

from alloclab.fleet import systemd
from tests.conftest import run_cli
from tests.integration.test_fleet import NAMES, _environ, root  # noqa: F401  (root: the units under a temporary root)
from tests.unit.test_fleet_decision import fleet_run


def test_deploy_from_a_decided_run_deploys_the_tested_group_and_records_the_verdict(root, tmp_path, jemalloc):
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1, library=os.path.realpath(jemalloc))
    out = tmp_path / "deploy.json"
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(run),
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "-o",
        str(out),
        "--root",
        str(root),
        "--systemctl",
        "local",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    assert "deploying group jemalloc-bg" in p.stderr and "MALLOC_CONF=background_thread:true" in p.stderr
    result = json.loads(p.stdout)
    units = systemd.LocalUnits(root)
    for n in NAMES:
        env = _environ(units.main_pid(f"{n}.service"))
        assert env.get("LD_PRELOAD") == os.path.realpath(jemalloc)
        assert env.get("MALLOC_CONF") == "background_thread:true"
    for recorded in (result["deployed_from"], json.loads(out.read_text())["deployed_from"]):
        assert recorded["run"] == str(run.resolve()) and recorded["group"] == "jemalloc-bg" and recorded["recommended"]
        assert recorded["verdict"]["decided"] and recorded["verdict"]["comparisons"][0]["outcome"] == "lower"
        assert recorded["env"] == {"MALLOC_CONF": "background_thread:true"}
    p = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
    assert p.returncode == 0, p.stderr


def test_deploy_even_if_undecided_deploys_the_named_group_and_says_so(root, tmp_path, jemalloc):
    run = fleet_run(tmp_path / "run", 1.0, 4, 1.0, seed=5, library=os.path.realpath(jemalloc))
    out = tmp_path / "deploy.json"
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(run),
        "--even-if-undecided",
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "-o",
        str(out),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert p.returncode == 2 and "--group NAME" in p.stderr, p.stderr  # undecided: no recommendation to default to
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(run),
        "--even-if-undecided",
        "--group",
        "jemalloc-bg",
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "-o",
        str(out),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert p.returncode == 0, p.stderr
    assert "UNDECIDED run" in p.stdout
    recorded = json.loads(out.read_text())["deployed_from"]
    assert recorded["even_if_undecided"] and not recorded["verdict"]["decided"]
    p = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
    assert p.returncode == 0, p.stderr


def test_deploy_from_a_status_file_where_the_run_is_not(root, tmp_path, jemalloc):
    """What a playbook does: `fleet status RUN --json` on the controller, the small file copied to
    the host, deployed from there (the run itself is not on the host)."""
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1, library=os.path.realpath(jemalloc))
    status = tmp_path / "verdict.json"
    status.write_text(run_cli("fleet", "status", str(run), "--json").stdout)
    import shutil

    shutil.rmtree(run)
    out = tmp_path / "deploy.json"
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(status),
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "-o",
        str(out),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert p.returncode == 0, p.stderr
    units = systemd.LocalUnits(root)
    assert all(_environ(units.main_pid(f"{n}.service")).get("MALLOC_CONF") == "background_thread:true" for n in NAMES)
    recorded = json.loads(out.read_text())["deployed_from"]
    assert (
        recorded["run"] == str(run.resolve()) and recorded["from"] == str(status) and recorded["group"] == "jemalloc-bg"
    )
    assert recorded["library_sha256"] and recorded["verdict"]["decided"]
    p = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
    assert p.returncode == 0, p.stderr
