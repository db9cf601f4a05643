"""The reference pages that list what the code defines: docs/reference/experiment-file.md names
every key the parser accepts (and none it refuses), docs/reference/ansible-variables.md lists the
collection's variables exactly as the collection's README does (whose list
tests/unit/test_fleet_collection.py holds to what the roles and playbooks read)."""

from __future__ import annotations

import re
from pathlib import Path

from alloclab import experiment_file

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"
COLLECTION = REPO / "ansible/collections/ansible_collections/alloclab/fleet"


def _section_keys(text: str, heading: str) -> set[str]:
    """The keys in the first column of the table under `## heading` (up to the next heading)."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))


def test_the_experiment_file_page_lists_every_key_the_parser_accepts():
    text = (REFERENCE / "experiment-file.md").read_text()
    assert _section_keys(text, "Top level") == experiment_file._TOP_KEYS
    assert _section_keys(text, "`[phases]`") == experiment_file._PHASE_KEYS
    assert _section_keys(text, "`[load]`") == {"command"}
    assert _section_keys(text, "`[scenario]`") == experiment_file._SCENARIO_KEYS
    assert _section_keys(text, "`[[group]]`") == experiment_file._GROUP_KEYS
    assert all(f"`{{{p}}}`" in text for p in experiment_file.PLACEHOLDERS)
    assert all(f"`{m}`" in text for m in experiment_file.METRICS)


def _rows(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `(alloclab_\w+)` \|.*\|$", text, re.M)}


def test_the_ansible_variables_page_is_the_collections_table():
    """Row for row the collection README's table, which test_fleet_collection.py holds to the role's
    defaults and to every variable a task or template reads: so the page lists every one."""
    page = _rows((REFERENCE / "ansible-variables.md").read_text())
    assert len(page) >= 40
    assert page == _rows((COLLECTION / "README.md").read_text())


def test_the_key_check_notices_a_missing_key():
    text = (REFERENCE / "experiment-file.md").read_text().replace("| `grace` |", "| grace |")
    assert _section_keys(text, "Top level") == experiment_file._TOP_KEYS - {"grace"}
