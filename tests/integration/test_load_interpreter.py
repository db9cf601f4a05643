"""A [load] script (or any command) whose #! interpreter is missing is refused by check, as run
would fail on it, and run refuses it before creating anything (issue 30, item 8)."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize(
    "line", ["#!/nonexistent/interpreter-alloclab\n", "#!\n", "#!relative-sh\n", "#!/etc/hostname\n"]
)
def test_a_load_script_with_a_missing_interpreter_is_refused(tmp_path, line):
    script = tmp_path / "load.sh"
    script.write_text(line + "echo hi\n")
    script.chmod(0o755)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'name = "l"\ncommand = ["/bin/sleep", "5"]\nreplicas = 1\n[load]\ncommand = ["{script}"]\n'
        '[phases]\nload = "1s"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    r = run_cli("check", str(exp))
    assert r.returncode == 2 and "[load]" in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_run_refuses_it_before_creating_a_run_directory(tmp_path):
    script = tmp_path / "load.sh"
    script.write_text("#!/nonexistent/interpreter-alloclab\necho hi\n")
    script.chmod(0o755)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'name = "l"\ncommand = ["/bin/sleep", "5"]\nreplicas = 1\n[load]\ncommand = ["{script}"]\n'
        '[phases]\nload = "1s"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    r = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert r.returncode == 2 and "interpreter" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()
