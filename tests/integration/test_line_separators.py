"""Characters str.splitlines() takes for line breaks (U+2028, U+2029, U+0085, \\v, \\f, \\x1c-\\x1e)
in library paths and env values: refused in one line by check, run and fleet plan; the drop-in
writer and its reader (the stand-in) agree on where a line ends."""

from __future__ import annotations

import json
import shutil

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import systemd, unitfile
from alloclab.fleet.plan import make_plan
from tests.conftest import run_cli

BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"]


def _exp(tmp_path, allocator="glibc", env=None):
    f = tmp_path / "exp.toml"
    env_line = f"env = {{ MALLOC_ARENA_MAX = {json.dumps(env)} }}\n" if env is not None else ""
    f.write_text(
        f'name = "u"\ncommand = ["/bin/sleep", "5"]\nreplicas = 1\n[[group]]\nname = "a"\n'
        f"allocator = {json.dumps(allocator)}\n{env_line}"
    )
    return f


def test_a_library_path_with_a_line_separator_is_refused_by_check_and_run(tmp_path, jemalloc):
    lib = tmp_path / "je\u2028x.so"
    shutil.copy(jemalloc, lib)
    exp = _exp(tmp_path, str(lib))
    for args in (["check", str(exp)], ["run", str(exp), "-o", str(tmp_path / "run"), "--max-duration", "2s"]):
        r = run_cli(*args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert "control character" in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("brk", BREAKS, ids=[f"U+{ord(c):04X}" for c in BREAKS])
def test_fleet_plan_refuses_a_line_separator_in_an_env_value_or_library(tmp_path, brk):
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "s.service").write_text("[Service]\nExecStart=/bin/sleep 30\n")
    with pytest.raises(UserError) as e:
        make_plan(systemd.LocalUnits(root), "s", _exp(tmp_path, env=f"2{brk}[Service]"), 0, tmp_path / "p.json")
    assert "control character" in str(e.value)
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(UserError):
        unitfile.check_preload_path(f"/usr/lib/a{brk}b.so", "library")


def test_the_dropin_reader_ends_lines_where_systemd_does():
    """systemd ends a unit-file line at \\n only; a U+2028 inside a value stays in the value."""
    text = '[Service]\nEnvironment="A=x\u2028y" "B=\x85z"\nExecStart=/bin/true\n'
    got = unitfile.settings(text)
    assert got == [("Service", "Environment", '"A=x\u2028y" "B=\x85z"'), ("Service", "ExecStart", "/bin/true")]
    assert unitfile.split_words(got[0][2]) == ["A=x\u2028y", "B=\x85z"]
