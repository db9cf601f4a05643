"""`fleet deploy` judges its canary against untouched peers (fleet.canary) on real processes standing
in for systemd units (the LocalUnits seam): a same-allocator redeploy (A/A) passes and goes on to
the next batch; a canary whose environment makes it hold 25% more memory fails against its peers
and is rolled back, the peers never moved off their own drop-ins."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from alloclab.fleet import deploy, systemd
from tests.conftest import run_cli
from tests.integration.test_fleet import _environ
from tests.waiting import wait_for

WORKLOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "canary_workload.py"
PER_COHORT = 5
LEVELS_MB = [22, 26, 30, 24, 28, 21, 27, 31, 25, 23]  # units differ, as relays do


@pytest.fixture
def fleet(tmp_path):
    root = tmp_path / "root"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    names = [f"svc@{i:02d}.service" for i in range(2 * PER_COHORT)]
    for name, mb in zip(names, LEVELS_MB):
        (unit_dir / name).write_text(
            f"[Service]\nExecStart={sys.executable} {WORKLOAD} --mb {mb} --regrow 1 --tick 0.1\n"
        )
    units = systemd.LocalUnits(root)
    for name in names:
        units.restart(name)
    # settled before alloclab arrives: four regrowth time constants old (the old level a deploy reads)
    wait_for(
        lambda: all((deploy.old_process(units, n, None)["age"] or 0) > 4 for n in names), 60, "every unit to settle"
    )
    yield root, units, names
    _stop_every_unit(root)


def _stop_every_unit(root: Path) -> None:
    for pidfile in (root / "run" / "alloclab-units").glob("*.pid"):
        try:
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _deploy(root: Path, out: Path, *extra: str):
    return run_cli(
        "fleet",
        "deploy",
        "glibc",
        "--units",
        "svc@*",
        "--batch",
        str(PER_COHORT),
        "--settle",
        "2s",
        "--max-settle",
        "16s",
        "--guard-interval",
        "0.2s",
        "--root",
        str(root),
        "--systemctl",
        "local",
        "-o",
        str(out),
        "--json",
        *extra,
        timeout=120,
    )


def test_a_same_allocator_redeploy_passes_against_its_peers(fleet, tmp_path):
    root, _, names = fleet
    p = _deploy(root, tmp_path / "deploy.json")
    assert p.returncode == 0, p.stderr + p.stdout[-3000:]
    result = json.loads(p.stdout)
    judged = result["canary"]
    assert judged["outcome"] == "pass" and judged["action"] == "pass", judged["line"]
    assert judged["canary"] == names[:PER_COHORT] and len(judged["baseline"]) == PER_COHORT
    assert set(judged["baseline"]) <= set(names[PER_COHORT:]) and judged["baseline_restarted"]
    last = judged["looks"][-1]
    assert last["interval"][1] < 1.10 and 0.9 < last["ratio"] < 1.1, last
    assert result["units"] == len(names) and result["tripped"] is None
    assert "PASS" in p.stderr
    record = json.loads((Path(result["generation"]) / "canary.json").read_text())  # kept with the deployment
    assert record["outcome"] == "pass" and record["looks"] == json.loads(json.dumps(judged["looks"]))


def test_a_canary_25_percent_above_its_peers_fails_and_is_rolled_back(fleet, tmp_path):
    root, units, names = fleet
    before = {n: units.main_pid(n) for n in names}
    p = _deploy(root, tmp_path / "deploy.json", "--env", "CANARY_WORKLOAD_SCALE=1.25")
    assert p.returncode == 1, p.stderr + p.stdout[-3000:]
    result = json.loads(p.stdout)
    judged = result["canary"]
    assert judged["outcome"] == "fail", judged["line"]
    assert judged["interval"][0] > 1.10 and 1.15 < judged["ratio"] < 1.35, judged
    trip = result["tripped"]
    assert trip["unit"] == "the canary" and trip["why"].startswith(f"failed against its {PER_COHORT} peers"), trip
    assert trip["rolled_back"] == names[:PER_COHORT]
    for n in names:  # nobody keeps the deploy's drop-in or its environment
        assert not deploy.dropin_path(root, n).exists()
        assert "CANARY_WORKLOAD_SCALE" not in _environ(units.main_pid(n))
    restarted = {n for n in names if units.main_pid(n) != before[n]}
    assert restarted == set(names[:PER_COHORT]) | set(judged["baseline"])  # the rest never restarted
    gens = list((root / "var/lib/alloclab/fleet/applied").iterdir())
    assert len(gens) == 1 and gens[0].name.endswith(".rolled-back")
    assert json.loads((gens[0] / "canary.json").read_text())["outcome"] == "fail"


def test_a_canary_still_undecided_at_the_maximum_settle_is_held(tmp_path):
    """Peers that give nothing to compare with (here: stopped, and not restarted) leave every look
    undecided: at --max-settle the deploy holds (exit 4), the canary kept, nothing else changed,
    and `fleet rollback` undoes the canary."""
    root = tmp_path / "root"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    names = [f"svc@{i}.service" for i in range(4)]
    for name in names:
        unit_dir.joinpath(name).write_text(
            f"[Service]\nExecStart={sys.executable} {WORKLOAD} --mb 20 --regrow 0.2 --tick 0.1\n"
        )
    units = systemd.LocalUnits(root)
    try:
        for name in names[:2]:  # the peers, svc@2 and svc@3, are stopped
            units.restart(name)
        p = run_cli(
            "fleet",
            "deploy",
            "glibc",
            "--units",
            "svc@*",
            "--batch",
            "2",
            "--settle",
            "1s",
            "--max-settle",
            "2s",
            "--guard-interval",
            "0.2s",
            "--no-baseline-restart",
            "--root",
            str(root),
            "--systemctl",
            "local",
            "-o",
            str(tmp_path / "deploy.json"),
            timeout=120,
        )
        assert p.returncode == 4, p.stdout + p.stderr
        assert "MORE TIME" in p.stdout and "deploy held after the canary" in p.stdout, p.stdout
        assert all(deploy.dropin_path(root, n).exists() for n in names[:2])
        assert not any(deploy.dropin_path(root, n).exists() for n in names[2:])
        assert all(units.main_pid(n) for n in names[:2]) and not any(
            units.main_pid(n) for n in names[2:]
        )  # peers not started
        record = json.loads(next((root / "var/lib/alloclab/fleet/applied").glob("*/canary.json")).read_text())
        assert record["outcome"] == "more-time" and record["action"] == "hold" and len(record["looks"]) == 3
        p = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
        assert p.returncode == 0, p.stderr
        assert not any(deploy.dropin_path(root, n).exists() for n in names)
    finally:
        _stop_every_unit(root)
