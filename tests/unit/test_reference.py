"""The generated reference (docs/reference/cli.md, docs/reference/exit-codes.md) is what the code
says now: regenerate it with `python -m alloclab.docsgen.reference` when the CLI or the exit-code table
changes (issue 52: the reference cannot drift from the CLI)."""

from __future__ import annotations

from pathlib import Path

import click

from alloclab.cli import app
from alloclab.commands.conventions import commands
from alloclab.docsgen import reference

DOCS = Path(__file__).parents[2] / "docs"


def test_the_committed_reference_is_the_generated_one():
    stale = [
        str(p.relative_to(DOCS.parent))
        for p, text in reference.files(DOCS).items()
        if not p.exists() or p.read_text() != text
    ]
    assert not stale, f"out of date: {stale} — run: .venv/bin/python -m alloclab.docsgen.reference"


def test_the_reference_names_every_command_and_option():
    text = reference.cli_markdown()
    missing = []
    for path, cmd in [((), app), *commands(app)]:
        if f"`{' '.join(('alloclab', *path))}`" not in text:
            missing.append(" ".join(path))
        missing += [
            f"{' '.join(path)} {p.opts[-1]}"
            for p in cmd.params
            if isinstance(p, click.Option) and p.opts[-1] not in text
        ]
    assert not missing, missing


def test_check_mode_reports_a_stale_file(tmp_path):
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "cli.md").write_text("old\n")
    assert reference.main(["--docs", str(tmp_path), "--check"]) == 1
    assert not (tmp_path / "reference" / "exit-codes.md").exists()  # --check writes nothing
    assert reference.main(["--docs", str(tmp_path)]) == 0
    assert reference.main(["--docs", str(tmp_path), "--check"]) == 0


def test_the_man_page_renders_without_a_warning_and_names_every_command():
    import shutil
    import subprocess

    page = reference.man_page()
    missing = [
        " ".join(p)
        for p, cmd in commands(app)
        if not isinstance(cmd, click.Group) and f'.SS "alloclab {" ".join(p)}'.replace("-", "\\-") not in page
    ]
    assert not missing, missing
    if shutil.which("groff"):
        p = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0 and p.stderr == "", p.stderr


def test_the_completion_lines_the_reference_shows_work():
    import os
    import subprocess
    import sys

    for shell, line in reference.COMPLETION.items():
        assert line in reference.cli_markdown()
        var = f"{shell}_source"
        entry = Path(sys.executable).parent / "alloclab"  # the installed command: its name picks the variable
        p = subprocess.run(
            [str(entry)], env={**os.environ, "_ALLOCLAB_COMPLETE": var}, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0 and "_ALLOCLAB_COMPLETE" in p.stdout, (shell, p.stderr)
