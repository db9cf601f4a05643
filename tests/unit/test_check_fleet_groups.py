"""`alloclab check` on a fleet groups file (no command: the services already run under systemd):
accepted, every group's library resolved, a path-given library checked to exist and said to be
needed on every host byte for byte; a missing one is one line and exit code 2."""

from __future__ import annotations

from tests.conftest import run_cli


def groups(tmp_path, library: str):
    f = tmp_path / "relays.toml"
    f.write_text(
        'name = "relays"                  # no command: the services already run\n'
        '[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f'[[group]]\nname = "mimalloc"\nallocator = "{library}"\n'
    )
    return f


def test_a_fleet_groups_file_is_checked(tmp_path, mimalloc):
    p = run_cli("check", str(groups(tmp_path, mimalloc)))
    assert p.returncode == 0, p.stderr
    assert "fleet groups file" in p.stdout and "2 groups" in p.stdout
    assert "must be on every host byte for byte" in p.stdout and "alloclab_libraries" in p.stdout


def test_a_missing_library_is_refused_in_one_line(tmp_path, mimalloc):
    p = run_cli("check", str(groups(tmp_path, mimalloc + ".9")))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "not found" in p.stderr and "Traceback" not in p.stderr


def test_an_experiment_without_anything_to_run_but_with_a_load_is_not_a_fleet_file(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text('name = "e"\n[load]\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n')
    p = run_cli("check", str(f))
    assert p.returncode == 2 and "no command to run" in p.stderr and "fleet groups file" not in p.stdout
