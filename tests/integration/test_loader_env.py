"""Loader-affecting variables in a group's env are held to the preload rule, or refused
(loaderenv; docs/reference/security.md, "What is preloaded and why that is safe")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from alloclab.allocators import loaderenv
from alloclab.common.errors import UserError
from alloclab.fleet import systemd
from alloclab.fleet.plan import make_plan
from tests.conftest import run_cli


@pytest.fixture
def writable(tmp_path):
    """A world-writable directory (no sticky bit) holding a copy of libc: what an attacker plants."""
    d = tmp_path / "ww"
    d.mkdir()
    os.chmod(d, 0o777)
    return d


def _experiment(tmp_path: Path, env: dict[str, str]) -> Path:
    f = tmp_path / "exp.toml"
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    f.write_text(
        f'name = "loader"\ncommand = ["/bin/sleep", "30"]\nreplicas = 1\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f"env = {{ {table} }}\n"
    )
    return f


def test_check_run_and_fleet_plan_refuse_a_library_path_others_can_write(tmp_path, writable):
    exp = _experiment(tmp_path, {"LD_LIBRARY_PATH": f"/usr/lib:{writable}"})
    r = run_cli("check", str(exp))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert "LD_LIBRARY_PATH" in r.stderr and str(writable) in r.stderr and "world-writable" in r.stderr
    r = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--max-duration", "2s")
    assert r.returncode == 2 and "LD_LIBRARY_PATH" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "svc.service").write_text("[Service]\nExecStart=/bin/sleep 30\n")
    r = run_cli(
        "fleet",
        "plan",
        "--units",
        "svc",
        "--groups",
        str(exp),
        "-o",
        str(tmp_path / "plan.json"),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert r.returncode == 2 and "LD_LIBRARY_PATH" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "plan.json").exists()


def test_apply_refuses_a_plan_whose_env_was_changed_to_a_loader_variable(tmp_path, writable):
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "svc.service").write_text("[Service]\nExecStart=/bin/sleep 30\n")
    plan = make_plan(
        systemd.LocalUnits(root), "svc", _experiment(tmp_path, {"LD_BIND_NOW": "1"}), 0, tmp_path / "plan.json"
    )
    data = json.loads(plan.path.read_text())
    data["groups"][0]["env"]["GCONV_PATH"] = str(writable)
    plan.path.write_text(json.dumps(data))
    r = run_cli("fleet", "apply", str(plan.path), "--root", str(root), "--systemctl", "local")
    assert r.returncode == 2 and "GCONV_PATH" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (root / "etc" / "systemd" / "system" / "svc.service.d").exists()


@pytest.mark.parametrize(
    "name,value,says",
    [
        ("LD_LIBRARY_PATH", "{ww}", "world-writable"),
        ("LD_LIBRARY_PATH", "/usr/lib:", "empty entry"),
        ("LD_LIBRARY_PATH", "/usr/lib;;/lib", "empty entry"),
        ("LD_LIBRARY_PATH", "lib", "not an absolute path"),
        ("LD_LIBRARY_PATH", "$ORIGIN/../lib", "token"),
        ("LD_LIBRARY_PATH", "/nonexistent-dir-alloclab", "No such file"),
        ("LD_AUDIT", "{ww}/libaudit.so", "world-writable"),
        ("GCONV_PATH", "{ww}", "world-writable"),
        ("LOCPATH", "{ww}", "world-writable"),
        ("TZDIR", "{ww}", "world-writable"),
        ("HOSTALIASES", "{ww}/hosts", "world-writable"),
        ("MALLOC_TRACE", "/tmp/mtrace", "does not carry"),
        ("LD_DEBUG_OUTPUT", "/tmp/x", "does not carry"),
        ("LD_PROFILE", "libc.so.6", "does not carry"),
        ("NLSPATH", "/tmp/%N", "does not carry"),
        ("LD_SOMETHING_NEW", "1", "does not carry"),
    ],
)
def test_each_loader_variable_is_held_to_the_rule(writable, name, value, says):
    (writable / "libaudit.so").write_bytes(b"\x7fELF")
    (writable / "hosts").write_text("")
    with pytest.raises(UserError) as e:
        loaderenv.check({name: value.format(ww=writable)}, "group g: env")
    assert name in e.value.problem and says in e.value.problem, e.value.problem


def test_safe_loader_variables_pass():
    loaderenv.check(
        {
            "LD_LIBRARY_PATH": "/usr/lib:/lib",
            "LD_BIND_NOW": "1",
            "GCONV_PATH": "/usr/lib",
            "MALLOC_ARENA_MAX": "2",
            "GLIBC_TUNABLES": "glibc.malloc.arena_max=2",
        },
        "group g: env",
    )
