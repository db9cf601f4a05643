"""The alloclab.fleet collection's variables: each one its README lists (type, default, meaning),
each one the README lists exists, and the defaults that stand for a CLI option are the CLI's
(one set of defaults: a relay operator gets the same batch and settle from either)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from alloclab import cli

COLLECTION = Path(__file__).resolve().parents[2] / "ansible/collections/ansible_collections/alloclab/fleet"
DEFAULTS = yaml.safe_load((COLLECTION / "roles/experiment/defaults/main.yml").read_text())
README = (COLLECTION / "README.md").read_text()
# variables read with `| default(...)` in a playbook rather than from the role's defaults
PLAYBOOK_ONLY = {"alloclab_hosts"}

# role variable -> (fleet subcommand, its option)
AS_CLI = {
    "alloclab_batch": ("apply", "batch"),
    "alloclab_collect_interval": ("collect", "interval"),
    "alloclab_deploy_batch": ("deploy", "batch"),
    "alloclab_deploy_settle": ("deploy", "settle"),
    "alloclab_deploy_max_restarts": ("deploy", "max_restarts"),
    "alloclab_deploy_guard_interval": ("deploy", "guard_interval"),
    "alloclab_rollback_batch": ("rollback", "batch"),
}


def readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in README.splitlines():
        m = re.match(r"^\| `(alloclab_\w+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_every_variable_is_listed_with_type_default_and_meaning():
    rows = readme_rows()
    assert set(rows) == set(DEFAULTS) | PLAYBOOK_ONLY
    for name, cells in rows.items():
        assert len(cells) == 3 and all(cells), (name, cells)


def test_the_cli_and_the_role_share_their_defaults():
    for var, (command, option) in AS_CLI.items():
        param = next(p for p in cli.fleet_group.commands[command].params if p.name == option)
        assert str(DEFAULTS[var]) == str(param.default), (var, DEFAULTS[var], command, option, param.default)
        assert f"`{var}`" in README and f"as `fleet {command} --{option.replace('_', '-')}`" in README


def test_every_variable_a_task_reads_has_a_default():
    used = set()
    for path in [*COLLECTION.rglob("*.yml"), *COLLECTION.rglob("*.j2")]:
        used |= set(re.findall(r"\b(alloclab_[a-z_]+)\b", path.read_text()))
    registered = set()
    for path in COLLECTION.rglob("*.yml"):
        registered |= set(re.findall(r"register: (alloclab_\w+)", path.read_text()))
        registered |= set(re.findall(r"^\s+(alloclab_\w+):", path.read_text(), re.M)) - set(DEFAULTS)  # set_fact
    missing = used - set(DEFAULTS) - registered - PLAYBOOK_ONLY - {"alloclab_fleet"}
    assert not missing, sorted(missing)
