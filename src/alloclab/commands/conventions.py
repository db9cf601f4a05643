"""The command line's conventions, one definition each, used by every verb in cli.py (and checked
for every verb by tests/unit/test_cli_conventions.py):

- a duration is one syntax everywhere: experiment_file.parse_duration's ("90s", "5m", "2h", "1d", "250ms";
  a bare number is seconds, as the options that took a number of seconds accepted);
- a unit batch is N units or a share "P%" (fleet.rollout.batch_sizes);
- `-o/--output` is a directory for a verb that writes several files and a file for a verb that
  writes one; its help says which (OUTPUT_DIR / OUTPUT_FILE start it);
- `--json`: one JSON document on stdout; what else the verb says goes to stderr;
- output is plain (no colour) and as wide as the terminal the user looks at (COLUMNS first).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import click

OUTPUT_DIR = "Directory"  # the first word of an -o help: what -o names
OUTPUT_FILE = "File"
# Not a terminal anywhere (a CI log, cron): wide enough that the summary table does not wrap.
LOG_WIDTH = 160


class Duration(click.ParamType):
    """A duration option, parsed by experiment_file.parse_duration (bad input: its one line, exit 2).
    `seconds`: the value as float seconds (options that took a number of seconds); otherwise the
    text as given, checked (the command parses it with its own bounds). `words`: other values
    allowed as they are (e.g. "auto")."""

    name = "duration"

    def __init__(self, seconds: bool = False, words: tuple[str, ...] = ()):
        self.seconds, self.words = seconds, words

    def get_metavar(self, param, ctx=None) -> str:
        return "DURATION"

    def convert(self, value, param, ctx):
        if value is None or (ctx is not None and ctx.resilient_parsing) or (self.seconds and isinstance(value, float)):
            return value
        text = str(value)
        if text in self.words:
            return text
        from ..experiment_file import parse_duration

        seconds = parse_duration(text, option_name(param))
        return seconds if self.seconds else text


class Batch(click.ParamType):
    """Units restarted at once: N, or a share of the units "P%" (refused before anything changes)."""

    name = "batch"

    def get_metavar(self, param, ctx=None) -> str:
        return "N|P%"

    def convert(self, value, param, ctx):
        if value is None or (ctx is not None and ctx.resilient_parsing):
            return value
        from ..fleet.rollout import batch_sizes

        batch_sizes(str(value), 1)
        return str(value)


def commands(group: click.Group, path: tuple[str, ...] = ()):
    """(path, command) of every command below `group`, groups included, in declaration order: the
    one walk the exit-code epilogs, the reference and the convention tests take."""
    for name, sub in group.commands.items():
        yield path + (name,), sub
        if isinstance(sub, click.Group):
            yield from commands(sub, path + (name,))


def verbs(group: click.Group):
    """(path, command) of every command that runs (no group)."""
    return [(path, cmd) for path, cmd in commands(group) if not isinstance(cmd, click.Group)]


def option_name(param) -> str:
    """The long name of an option as users write it (--max-duration), for messages."""
    opts = getattr(param, "opts", None) or [getattr(param, "name", "value")]
    return max(opts, key=len)


def output_width() -> int:
    """The width to write at: COLUMNS, else the terminal on stdout, stderr or stdin (`alloclab
    report RUN | less` in a terminal gets the terminal's width), else LOG_WIDTH."""
    columns = shutil.get_terminal_size((0, 0)).columns  # COLUMNS, else stdout's terminal
    if columns > 0:
        return columns
    for stream in (sys.stderr, sys.stdin):
        try:
            if stream is not None and stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            continue
    return LOG_WIDTH


def output_console(stderr: bool = False):
    """The console a verb writes its human output on: colour only on a terminal (rich's own rule;
    NO_COLOR is honoured), the width output_width() says."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)  # a terminal: rich follows its size (and COLUMNS)
    return Console(stderr=stderr, width=output_width(), no_color=True)


def emit_json(data) -> None:
    """--json: one JSON document on stdout (progress, if any, went to stderr)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
