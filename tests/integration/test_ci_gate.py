"""The CI templates' memory gate, run as they run it: examples/ci/memory-gate.sh builds the baseline
commit and the checkout of a small C program's repository and runs `alloclab gate` on both. A
candidate that allocates 15% more fails the gate (exit 1); an identical one passes (exit 0); each
leaves report.html and gate.json where the templates publish them from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SCRIPT = REPO / "examples" / "ci" / "memory-gate.sh"
TEMPLATES = (REPO / "examples" / "ci" / "github-actions.yml", REPO / "examples" / "ci" / "gitlab-ci.yml")

PROGRAM = r"""/* Allocates a fixed amount (its input) in 64 KiB blocks, writes it, then holds it until stopped. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long blocks = (argc > 1 ? atol(argv[1]) : 16) * 16 * (100 + EXTRA_PCT) / 100;
    for (long i = 0; i < blocks; i++) {
        char *p = malloc(65536);
        if (!p) return 1;
        memset(p, (int)i, 65536);
    }
    for (;;) pause();
}
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        },
    ).stdout.strip()


def _write_program(repo: Path, extra_pct: int) -> None:
    (repo / "hold.c").write_text(PROGRAM.replace("EXTRA_PCT", str(extra_pct)))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "Makefile").write_text("app: hold.c\n\tcc -O2 -o app hold.c\n")
    (repo / ".gitignore").write_text("app\nmemory-gate*/\n")
    _write_program(repo, 0)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "baseline")
    _git(repo, "tag", "baseline")
    return repo


def _gate(repo: Path, out: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "GATE_BASE_REF": "baseline",
        "GATE_RUN": "./app 24",
        "GATE_OUT": out,
        "ALLOCLAB": str(Path(sys.executable).parent / "alloclab"),
        # short phases for the test (a 5-minute limit is the default); 3 replicas a side
        "GATE_ARGS": "--replicas 3 --warmup 3s --max-duration 60s",
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], check=False, cwd=repo, env=env, capture_output=True, text=True, timeout=240
    )


def test_the_gate_fails_a_candidate_allocating_15_percent_more_and_passes_an_identical_one(project: Path):
    _write_program(project, 15)  # the pull request: 15% more allocated
    _git(project, "commit", "-q", "-am", "allocate 15% more")
    more = _gate(project, "memory-gate-more")
    assert more.returncode == 1, more.stdout + more.stderr
    assert "gate FAILED (--fail-on-increase 5)" in more.stdout
    j = json.loads((project / "memory-gate-more" / "gate.json").read_text())
    assert j["outcome"] == "above" and 1.10 < j["ratio"] < 1.20
    assert (project / "memory-gate-more" / "report.html").stat().st_size > 1000

    _git(project, "reset", "-q", "--hard", "baseline")  # an identical candidate: the baseline itself
    same = _gate(project, "memory-gate-same")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "gate PASSED (--fail-on-increase 5)" in same.stdout
    j = json.loads((project / "memory-gate-same" / "gate.json").read_text())
    assert j["outcome"] == "within" and j["ratio_ci"][1] <= 1.05
    assert (project / "memory-gate-same" / "report.html").is_file()
    # the baseline's worktree is removed again: nothing of the gate stays in the project's git
    assert _git(project, "worktree", "list").count("\n") == 0


def test_the_templates_call_the_tested_script_and_publish_the_report():
    for path in TEMPLATES:
        text = path.read_text()
        yaml.safe_load(text)  # well-formed
        assert "bash ci/memory-gate.sh" in text and "memory-gate/report.html" in text, path
        assert "ALLOCLAB_CACHE" in text and 'pip install "$ALLOCLAB_SPEC"' in text and "ALLOCLAB_SPEC: " in text, path


def test_a_program_that_exits_is_undecided_never_a_silent_pass(tmp_path: Path):
    """A batch program that ends before the gate is decided is not compared on what is left: the
    gate says why and exits 4 (exit 0 only when the caller allows an undecided gate)."""
    from tests.conftest import run_cli

    args = [
        "gate",
        "--command",
        "/bin/sleep 2",
        "--fail-on-increase",
        "5",
        "--replicas",
        "2",
        "--warmup",
        "1s",
        "--max-duration",
        "40s",
        "--no-report",
    ]
    p = run_cli(*args, "-o", str(tmp_path / "run"))
    assert p.returncode == 4, p.stdout + p.stderr
    assert "gate INCONCLUSIVE" in p.stdout and "held until alloclab stops the program" in p.stdout
    assert json.loads((tmp_path / "run" / "gate.json").read_text())["outcome"] == "inconclusive"
    allowed = run_cli(*args, "--allow-inconclusive", "-o", str(tmp_path / "run2"))
    assert allowed.returncode == 0 and "gate INCONCLUSIVE" in allowed.stdout, allowed.stdout + allowed.stderr
