"""One convention per concept across every verb (issue 52): the test walks the whole CLI through
click and fails on a verb that breaks one. The conventions are alloclab.commands.conventions'; the
exit codes alloclab.common.exitcodes' (one table)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from alloclab.cli import app
from alloclab.commands.conventions import OUTPUT_DIR, OUTPUT_FILE, Batch, Duration, verbs
from alloclab.common import exitcodes
from alloclab.common.errors import UserError

VERBS = verbs(app)
IDS = [" ".join(p) for p, _ in VERBS]

# Verbs with no result to report as JSON, and why. Every other verb has --json.
NO_JSON = {
    ("bundle",): "writes one archive and says where",
    ("export",): "writes CSV files and says where",
    ("demo",): "a guided tour; its run has `alloclab report RUN --json`",
    ("allocators", "build"): "builds; `allocators show ID` prints the build's provenance as JSON",
    ("allocators", "show"): "prints JSON always",
    ("allocators", "package"): "writes one .deb and says where",
    ("allocators", "path"): "prints one path",
    ("trace", "record"): "writes one trace; `trace info --json` reads it",
    ("bisect",): "its result is bisect.json in its -o directory",
    ("sweep",): "its result is sweep.json in its -o directory",
}
# Options that take a duration (by name, or shown as DURATION); every one must parse with config.parse_duration.
DURATION_NAMES = {
    "interval",
    "warmup",
    "max_duration",
    "stable_for",
    "first_look",
    "max_step",
    "settle",
    "guard_interval",
    "look_every",
    "horizon",
    "duration",
    "step",
    "timeout",
    "max_gap",
    "load",
    "max_settle",
}


def _options(cmd):
    return [p for p in cmd.params if isinstance(p, click.Option)]


def test_the_walk_finds_every_verb():
    assert len(VERBS) >= 30 and ("fleet", "rollback") in dict(VERBS) and ("import", "prometheus") in dict(VERBS)


@pytest.mark.parametrize("path,cmd", VERBS, ids=IDS)
def test_help_ends_with_the_verbs_exit_codes_from_the_one_table(path, cmd):
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=200).output
    codes = exitcodes.codes_for(path)
    assert cmd.epilog == exitcodes.epilog(path)
    assert "Exit codes:" in shown and all(f"{c.code} {c.name}" in " ".join(shown.split()) for c in codes)
    assert "Exit codes:" not in (cmd.help or ""), "exit codes written by hand in the docstring: the table says them"


@pytest.mark.parametrize("path,cmd", VERBS, ids=IDS)
def test_a_verb_that_reports_a_result_has_json(path, cmd):
    has_json = any("--json" in p.opts for p in _options(cmd))
    assert has_json != (path in NO_JSON), f"{' '.join(path)}: " + (
        "no --json" if not has_json else "has --json now: take it out of NO_JSON"
    )


@pytest.mark.parametrize("path,cmd", VERBS, ids=IDS)
def test_duration_options_parse_with_the_one_parser(path, cmd):
    for p in _options(cmd):
        if p.name in DURATION_NAMES or p.metavar == "DURATION":
            assert isinstance(p.type, Duration), f"{' '.join(path)} {p.opts[-1]}: not a Duration"


@pytest.mark.parametrize("path,cmd", VERBS, ids=IDS)
def test_output_option_says_file_or_directory(path, cmd):
    for p in _options(cmd):
        if "-o" in p.opts:
            assert "--output" in p.opts, f"{' '.join(path)}: -o is not --output"
            assert p.help.split(":")[0].split()[0] in (OUTPUT_DIR, OUTPUT_FILE), (
                f"{' '.join(path)} -o: its help must start with {OUTPUT_DIR!r} or {OUTPUT_FILE!r}: {p.help!r}"
            )


@pytest.mark.parametrize("path,cmd", VERBS, ids=IDS)
def test_batch_options_take_a_count_or_a_share(path, cmd):
    for p in _options(cmd):
        if p.name == "batch":
            assert isinstance(p.type, Batch), f"{' '.join(path)} --batch"


def test_a_duration_is_refused_in_one_line_and_a_bare_number_is_seconds():
    replay = dict(VERBS)[("trace", "replay")]
    with replay.make_context("trace replay", ["t.trace", "--timeout", "90", "--max-gap", "5m"]) as ctx:
        assert ctx.params["timeout"] == 90.0 and ctx.params["max_gap"] == 300.0
    with pytest.raises(UserError, match=r"--timeout = 'soon' is not a duration"):
        replay.make_context("trace replay", ["t.trace", "--timeout", "soon"])
    deploy = dict(VERBS)[("fleet", "deploy")]
    with deploy.make_context("fleet deploy", ["--units", "x@*", "--warmup", "auto", "--settle", "2m"]) as ctx:
        assert ctx.params["warmup"] == "auto" and ctx.params["settle"] == "2m"  # the text, checked


def test_rollback_takes_a_share_like_apply_and_deploy_and_refuses_a_bad_batch():
    rollback = dict(VERBS)[("fleet", "rollback")]
    with rollback.make_context("fleet rollback", ["--batch", "10%"]) as ctx:
        assert ctx.params["batch"] == "10%"
    with pytest.raises(UserError, match="--batch '0%' is not a batch size"):
        rollback.make_context("fleet rollback", ["--batch", "0%"])


def test_export_takes_o_and_keeps_csv():
    export = dict(VERBS)[("export",)]
    for flag in ("-o", "--output", "--csv"):
        with export.make_context("export", ["runs/x", flag, "out"]) as ctx:
            assert str(ctx.params["csv_dir"]) == "out"


def test_exit_codes_in_code_are_the_tables():
    from alloclab.cli import INTERNAL_ERROR_EXIT
    from alloclab.commands import bisect, compare, run
    from alloclab.common.errors import CutShortError

    assert (UserError("x").exit_code, CutShortError("x").exit_code) == (exitcodes.BAD_INPUT, exitcodes.CUT_SHORT)
    assert INTERNAL_ERROR_EXIT == exitcodes.INTERNAL_ERROR and run.EXIT_CUT_SHORT == exitcodes.CUT_SHORT
    assert (compare.EXIT_GATE_ABOVE, compare.EXIT_GATE_INCONCLUSIVE, bisect.EXIT_NOT_FOUND) == (
        exitcodes.OUTCOME,
        exitcodes.INCONCLUSIVE,
        exitcodes.OUTCOME,
    )
    assert set(exitcodes.VERB_OUTCOMES) <= {p for p, _ in VERBS}  # no table row for a verb that is gone
