"""Every `alloclab ...` command line the documentation shows (README.md, docs/**/*.md,
benchmarks/README.md; shell code blocks and inline code) names verbs and options the CLI has, and a
complete one in a code block parses as written: the docs and the CLI cannot drift apart unseen."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from alloclab.cli import app

REPO = Path(__file__).parents[2]
ROOT = click.Context(app, info_name="alloclab", **app.context_settings)
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "benchmarks/README.md"]
NOT_SHELL = {"toml", "yaml", "python", "json", "ini"}  # fences whose text is no command line
SHELL_END = re.compile(r"\s(?:&&|\|\||;|\||&|\d?>>?|<)(?:\s|$)")
AT_COMMAND = re.compile(r"(?:^|[\s;&|(`$])(?:[\w./-]*/)?alloclab ([a-z].*)")
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:\.\.\.)?|…|\.\.\.|[A-Z][A-Z_]*=.*)$")  # RUN, FILE..., KEY=VALUE


def documented_commands():
    """(file:line, 'alloclab ...', whole) for each command line shown; whole: from a shell block."""
    for doc in DOCS:
        fence = None
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            line, where = lines[i], f"{doc.relative_to(REPO)}:{i + 1}"
            i += 1
            if line.strip().startswith("```"):
                fence = None if fence is not None else line.strip()[3:].strip()
                continue
            if fence is not None:
                if fence in NOT_SHELL:
                    continue
                while line.rstrip().endswith("\\") and i < len(lines):  # continued lines
                    line, i = line.rstrip()[:-1] + " " + lines[i], i + 1
                line = re.split(r"(?:^|\s)#", line)[0]  # a shell comment
                for m in AT_COMMAND.finditer(line):
                    yield where, "alloclab " + m.group(1), True
            else:
                for m in re.finditer(r"`(?:[\w./-]*/)?alloclab ([a-z][^`]*)`", line):
                    yield where, "alloclab " + m.group(1), False


def problems(text: str, whole: bool) -> list[str]:
    text = SHELL_END.split(text + " ")[0]
    argv = shlex.split(text.replace("[", " ").replace("]", " ").replace(")", " "))[1:]
    found, todo = [], [(app, [], argv)]
    while todo:
        cmd, path, rest = todo.pop()
        if isinstance(cmd, click.Group):
            if rest:  # `a|b|c`: each named verb must exist (a list of verbs, not one command)
                whole = whole and "|" not in rest[0]
                for name in rest[0].split("|"):
                    if name not in cmd.commands:
                        return [f"no verb {name!r} under `{' '.join(['alloclab', *path])}`"]
                    todo.append((cmd.commands[name], path + [name], rest[1:]))
            continue
        options = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts}
        own = rest[: rest.index("--")] if "--" in rest else rest
        found += [
            f"`{' '.join(path)}` has no option {a.split('=')[0]}"
            for a in own
            if a.startswith("-") and len(a) > 1 and not re.match(r"-\d", a) and a.split("=")[0] not in options
        ]
        if whole and not any(PLACEHOLDER.match(a) for a in rest):
            try:
                # under the root's context, as the CLI runs it: a context without a parent would
                # leave the command's (cached) help option without the app's -h
                with cmd.make_context(" ".join(path), list(rest), parent=ROOT):
                    pass
            except click.UsageError as exc:
                found.append(f"`{' '.join(path)}`: {exc.format_message()}")
    return found


def test_every_documented_command_line_names_real_verbs_and_options():
    shown = list(documented_commands())
    assert len(shown) > 100  # the extraction still finds the docs' commands
    wrong = [f"{where}: {text!r}: {p}" for where, text, whole in shown for p in problems(text, whole)]
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_wrong_verb_option_or_value():
    assert problems("alloclab trace check app.trace", False) == ["no verb 'check' under `alloclab trace`"]
    assert problems("alloclab report RUN --baseline-group glibc", False) == ["`report` has no option --baseline-group"]
    assert problems("alloclab compare a b --fail-on-increase five", True)
    assert not problems("alloclab compare a b --fail-on-increase 5 > gate.txt", True)


def test_report_help_names_every_file_it_writes():
    from click.testing import CliRunner

    from alloclab.common.outputs import REPORT_FILES

    shown = " ".join(CliRunner().invoke(app, ["report", "--help"], terminal_width=400).output.split())
    assert not [f for f in REPORT_FILES if f.rstrip("/") not in shown], shown  # replicas.csv was missing
