"""Every verb's --help ends with an example that the CLI parses, every option is described,
and `alloclab --version` answers (issue 27)."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from alloclab.cli import EXAMPLES, app
from alloclab.commands.conventions import verbs


@pytest.mark.parametrize("path,cmd", verbs(app), ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_verb_has_a_parsable_example_and_described_options(path, cmd):
    assert "Example:" in (cmd.help or ""), f"{' '.join(path)} has no example"
    example = EXAMPLES.get(path) or cmd.help.split("Example:")[1].strip().splitlines()[0]
    argv = shlex.split(example.strip().split("&&")[0])
    assert argv[0] == "alloclab" and tuple(argv[1 : 1 + len(path)]) == path
    with cmd.make_context(" ".join(path), argv[1 + len(path) :]):  # the verb parses it: options and arguments exist
        pass
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=100).output
    assert "Example:" in shown and "     " not in shown.split("Options:")[0].replace(
        "Usage:", ""
    )  # no stray indentation
    undocumented = [p.name for p in cmd.params if isinstance(p, click.Option) and not p.help]
    assert not undocumented, f"{' '.join(path)}: options without a description: {undocumented}"


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("alloclab ")
