"""Every bad input: one line naming the problem and the fix, exit code 2, no traceback, no run."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import run_cli

BASE = """
name = "bad"
command = ["/bin/sleep", "1"]
[[group]]
name = "a"
allocator = "glibc"
"""


def check_one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "text,needles",
    [
        (BASE.replace('name = "bad"', 'name = "bad"\ncolour = "red"'), ["unknown key 'colour'", "use one of"]),
        (
            BASE.replace('command = ["/bin/sleep", "1"]', 'command = ["/bin/sleep", "1"]\nreplicas = "3"'),
            ["replicas must be an integer"],
        ),
        (
            BASE.replace('command = ["/bin/sleep", "1"]', 'command = ["/bin/sleep", "1"]\ninterval = "0s"'),
            ["longer than zero"],
        ),
        (BASE + '[phases]\nload = "-5m"\n', ["is not a duration"]),
        (BASE.replace('allocator = "glibc"', 'allocator = "/nonexistent/libfoo.so"'), ["not found"]),
        (BASE.replace('"/bin/sleep"', '"{tmp}/data.txt"'), ["not executable", "chmod +x"]),
        (BASE.replace('"/bin/sleep"', '"{tmp}/data.sh"'), ["neither a program nor a script"]),
        (BASE.replace('"/bin/sleep"', '"./missing-program"'), ["not found"]),
        (
            BASE.replace('allocator = "glibc"', 'allocator = "nosuch@1.0"'),
            ["unknown allocator family 'nosuch'", "mimalloc"],
        ),
    ],
)
def test_bad_experiment_files(tmp_path, text, needles):
    (tmp_path / "data.txt").write_text("plain text")
    (tmp_path / "data.sh").write_text("no shebang")
    (tmp_path / "data.sh").chmod(0o755)
    exp = tmp_path / "exp.toml"
    exp.write_text(text.replace("{tmp}", str(tmp_path)))
    out = tmp_path / "run"
    proc = run_cli("run", str(exp), "-o", str(out))
    check_one_line_error(proc, *needles)
    assert not out.exists() or not any(out.iterdir())  # no half-written run


def test_unreadable_library(tmp_path, jemalloc):
    """A real allocator library with mode 000. Root reads every file through CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH: as root the CLI runs without them (setpriv), held to the mode bits like
    any other user."""
    lib = tmp_path / "libjemalloc-copy.so"
    shutil.copyfile(jemalloc, lib)
    lib.chmod(0o000)
    exp = tmp_path / "exp.toml"
    exp.write_text(BASE.replace('allocator = "glibc"', f'allocator = "{lib}"'))
    drop = (
        ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search", "--"]
        if os.geteuid() == 0
        else []
    )
    proc = subprocess.run(
        [*drop, sys.executable, "-m", "alloclab", "run", str(exp), "-o", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    check_one_line_error(proc, f"allocator library {lib} is not a readable file", "permissions")
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_missing_experiment_file(tmp_path):
    check_one_line_error(run_cli("run", str(tmp_path / "nope.toml")), "does not exist")


def test_unwritable_output_dir(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(BASE)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    check_one_line_error(run_cli("run", str(exp), "-o", str(blocker / "run")), "cannot write to output directory")


def test_output_dir_not_empty(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(BASE)
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    check_one_line_error(run_cli("run", str(exp), "-o", str(out)), "not empty")
    assert (out / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("verb", [["report"], ["export", "--csv", "/tmp/alloclab-x"]])
def test_not_a_run(tmp_path, verb):
    check_one_line_error(run_cli(verb[0], str(tmp_path), *verb[1:]), "is not an alloclab run")


# One fresh interpreter runs the verbs one after another as the CLI does (alloclab.cli.main): a
# module any of them loads stays in sys.modules, so none of them may load the statistics.
REFUSED_BEFORE_IMPORTS = """
import contextlib, io, json, sys
from alloclab.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    sys.argv, err = ["alloclab", *argv], io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    out.append({"code": code, "stderr": err.getvalue(), "loaded": [m for m in ("numpy", "scipy") if m in sys.modules]})
print(json.dumps(out))
"""


def test_a_bad_run_path_is_refused_before_the_statistics_load(tmp_path):
    """report, compare and export check the path before importing numpy/scipy (~1 s of CPU a
    bad path need not wait for), as run and check do with a bad experiment file."""
    import json

    run = tmp_path / "no-run"
    verbs = [
        ["report", str(run)],
        ["compare", str(run), str(tmp_path)],
        ["export", str(run), "--csv", str(tmp_path / "csv")],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", REFUSED_BEFORE_IMPORTS, json.dumps(verbs)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    for argv, got in zip(verbs, json.loads(proc.stdout)):
        assert got["code"] == 2 and got["stderr"].count("\n") == 1 and "is not an alloclab run" in got["stderr"], (
            argv,
            got,
        )
        assert got["loaded"] == [], f"{argv[0]} imported {got['loaded']} before refusing a bad path"
    assert not (tmp_path / "csv").exists()


def test_garbage_store(tmp_path):
    (tmp_path / "run.db").write_bytes(b"this is not sqlite" * 100)
    check_one_line_error(run_cli("report", str(tmp_path)), "not an alloclab run store")


def test_unknown_option_is_one_line(tmp_path):
    check_one_line_error(run_cli("run", "--frobnicate", "x.toml"), "No such option")


def test_the_installed_entry_point_has_help():
    """The real CLI in a child process; every verb's help is read in process below."""
    proc = run_cli("--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout


def _all_command_paths():
    """Every verb and sub-verb of the CLI, read from click's own command tree (a new command
    cannot be forgotten here)."""
    import click

    from alloclab.cli import app

    def walk(cmd, path):
        yield path
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, path + [name])

    return list(walk(app, []))


def test_every_command_and_sub_command_has_help():
    from click.testing import CliRunner

    from alloclab.cli import app

    paths = _all_command_paths()
    assert len(paths) > 25 and ["bisect"] in paths and ["import", "prometheus"] in paths
    for path in paths:
        out = CliRunner().invoke(app, [*path, "--help"], terminal_width=400)
        assert out.exit_code == 0 and "Usage" in out.output, (path, out.output[-300:])
        assert out.output.count("\n") > 2, path  # more than a bare usage line
        # defaults in one style, click's "[default: …]" (a description in parentheses inside it)
        described = re.sub(r"\[default: [^\]]*\]", "", out.output)
        assert not re.search(r"\(default|default:|; default ", described), (path, described)


def test_every_option_with_a_default_shows_it():
    import click

    from alloclab.cli import app

    for path in _all_command_paths():
        cmd = app
        for name in path:
            cmd = cmd.commands[name]
        ctx = click.Context(cmd)
        for p in cmd.params:
            default = p.get_default(ctx, call=False)
            unset = default in (None, ()) or type(default).__name__ == "Sentinel"  # click 8.3+: UNSET
            if isinstance(p, click.Option) and not p.is_flag and not p.hidden and not unset:
                assert p.show_default, (path, p.name, p.default)
