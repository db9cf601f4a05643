"""What a fleet host runs needs none of the analysis' packages, and the way back is said and
complete: the fleet verbs (facts, apply, collect, deploy, rollback) run for real (LocalUnits, real
processes) in a Python where numpy, scipy, matplotlib and plotly cannot be imported, as on a host
where the Ansible role installed the wheel without dependencies (docs/tutorials/relays-with-ansible.md); `rollback` says
which state it returns to, and `rollback --all` returns to the state before alloclab, twice over."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from alloclab.fleet import deploy, systemd
from tests.integration.test_fleet import NAMES, _environ, root  # noqa: F401  (root: the fixture)

HEAVY = ("numpy", "scipy", "matplotlib", "plotly")

# the CLI in a child Python where importing any of HEAVY fails as it does where they are not installed
BLOCKED = f"""
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, NotInstalled())
sys.argv = ["alloclab", *sys.argv[1:]]
from alloclab.cli import main
main()
"""


def light(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_blocker_blocks():
    p = subprocess.run(
        [sys.executable, "-c", BLOCKED.replace("from alloclab.cli import main\nmain()", "import numpy")],
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "No module named 'numpy'" in p.stderr


def test_fleet_verbs_run_without_the_analysis_packages(root, tmp_path, mimalloc):
    common = ["--root", str(root), "--systemctl", "local"]
    p = light("fleet", "facts", "--units", "tor@*", "--host", "h1", "--json", *common)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["units"]) == len(NAMES)
    # the plan is made on the controller (the full install); the host applies it
    plan = tmp_path / "plan.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "alloclab",
            "fleet",
            "plan",
            "--units",
            "tor@*",
            "--groups",
            str(tmp_path / "groups.toml"),
            "-o",
            str(plan),
            *common,
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    p = light("fleet", "apply", str(plan), "--batch", "6", "--json", *common)
    assert p.returncode == 0, p.stderr
    p = light("fleet", "prepare", "--json")
    assert p.returncode == 0, p.stderr
    p = light(
        "fleet",
        "collect",
        "--plan",
        str(plan),
        "-o",
        str(tmp_path / "run"),
        "--interval",
        "0.2s",
        "--duration",
        "1.5s",
        "--json",
        *common,
    )
    assert p.returncode == 0, p.stderr
    collected = json.loads(p.stdout)
    assert (
        collected["durations_s"]["count"] >= 3
        and collected["durations_s"]["p99"] >= collected["durations_s"]["median"] > 0
    )
    p = light(
        "fleet",
        "deploy",
        mimalloc,
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "-o",
        str(tmp_path / "deploy.json"),
        "--json",
        *common,
    )
    assert p.returncode == 0, p.stderr
    p = light("fleet", "rollback", "--batch", "6", "--json", *common)
    assert p.returncode == 0, p.stderr
    back = json.loads(p.stdout)
    assert back["plan"].endswith("deploy.json") and back["returns_to"].startswith("the drop-ins of ")
    assert str(plan) in back["returns_to"]
    units = systemd.LocalUnits(root)
    assert {_environ(units.main_pid(f"{n}.service")).get("LD_PRELOAD") for n in NAMES} != {os.path.realpath(mimalloc)}


def test_rollback_all_returns_to_before_alloclab_and_again_changes_nothing(root, tmp_path, mimalloc):
    common = ["--root", str(root), "--systemctl", "local"]
    keep = deploy.dropin_path(root, f"{NAMES[0]}.service")
    keep.parent.mkdir(parents=True)
    original = b'# the operator\'s own\n[Service]\nEnvironment="FOO=1"\n'
    keep.write_bytes(original)
    plan = tmp_path / "plan.json"
    for argv in (
        ["plan", "--units", "tor@*", "--groups", str(tmp_path / "groups.toml"), "-o", str(plan)],
        ["apply", str(plan), "--batch", "6"],
        [
            "deploy",
            mimalloc,
            "--units",
            "tor@*",
            "--batch",
            "6",
            "--settle",
            "0.3s",
            "--guard-interval",
            "0.1s",
            "-o",
            str(tmp_path / "deploy.json"),
        ],
    ):
        p = light("fleet", *argv, *common)
        assert p.returncode == 0, p.stderr
    p = light("fleet", "rollback", "--all", "--batch", "6", "--json", *common)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [step["plan"] for step in out["undone"]] == [str(tmp_path / "deploy.json"), str(plan)]
    assert out["returns_to"] == "the state before alloclab" and "the state before alloclab" in p.stderr
    assert keep.read_bytes() == original
    units = systemd.LocalUnits(root)
    for n in NAMES:
        assert "LD_PRELOAD" not in _environ(units.main_pid(f"{n}.service"))
        if n != NAMES[0]:
            assert not deploy.dropin_path(root, f"{n}.service").parent.exists()
    p = light("fleet", "rollback", "--all", "--json", *common)  # again: nothing to undo, no error
    assert p.returncode == 0 and json.loads(p.stdout)["undone"] == [], p.stderr
    p = light("fleet", "rollback", *common)  # one step asked for: there is none
    assert p.returncode == 2 and "nothing to roll back" in p.stderr
