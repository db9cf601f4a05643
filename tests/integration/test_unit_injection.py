"""Nothing a groups file, a plan or a CLI option holds can become a directive in a unit file.

Every generated file is read by systemd's own parser (`systemd-analyze verify`, from Debian's
systemd package) next to a minimal unit, and must draw no complaint about our file; the values
must read back exactly with systemd's quoting rules; hostile values that cannot be carried are
refused with one clear line, before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import collector, deploy, systemd, unitfile
from alloclab.fleet.plan import load_plan, make_plan
from tests.conftest import run_cli

# Values that must be carried verbatim (escaped), never interpreted.
CARRIED = [
    "plain:1,dirty_decay_ms:0",
    'quote"inside',
    'x" ExecStartPre=/nonexistent-alloclab-pwned "',
    "single'quote",
    "back\\slash",
    "ends with backslash\\",
    '\\"',
    "100%",
    "%n%h%Z",
    "%%",
    "$HOME ${PATH} $$",
    "[Unit]",
    "Requires=nonexistent.target",
    "; ExecStartPre=/nonexistent-alloclab-pwned",
    "# comment",
    "ünïcödé ✓",
    " leading and trailing spaces ",
    "",
    "=" * 20,
    "a" * 4000,
]
# Values that cannot be carried safely: refused.
REFUSED = [
    "x\nExecStartPre=/nonexistent-alloclab-pwned",
    'x"\nExecStartPre=/bin/touch /tmp/alloclab-pwned\nEnvironment="y',
    "x\n[Unit]\nRequires=nonexistent.target",
    "x\rExecStartPre=/nonexistent-alloclab-pwned",
    "nul\x00byte",
    "tab\tvalue",
    "escape\x1b[31m",
    "del\x7f",
    "a" * 5000,
]
BAD_NAMES = ["A=B", "A B", "1A", "A\nB", "", "A-B", "A;B", "A\x00", "ExecStartPre=/x"]

needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze missing: run scripts/install.sh --test"
)


def verify(unit_dir: Path, unit: str) -> str:
    """systemd's verdict on a unit and its drop-ins: everything it printed, or '' when silent."""
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit_dir / unit)],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{unit_dir}:", "SYSTEMD_LOG_LEVEL": "notice"},
        timeout=60,
    )
    out = (proc.stdout + proc.stderr).strip()
    # messages about the host (not our files) are not findings
    lines = [ln for ln in out.splitlines() if str(unit_dir) in ln or unit in ln]
    assert proc.returncode == 0 or lines, out
    return "\n".join(lines)


def group(env: dict, library: str | None = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") -> dict:
    return {
        "name": "g1",
        "allocator": "jemalloc@5.3.0",
        "kind": "catalog",
        "library": library,
        "sha256": "0" * 64,
        "family": "jemalloc",
        "version": "5.3.0",
        "env": env,
    }


@needs_systemd
def test_every_carried_value_reads_back_exactly_and_systemd_finds_nothing(tmp_path):
    units = tmp_path / "system"
    dropins = units / "probe.service.d"
    dropins.mkdir(parents=True)
    (units / "probe.service").write_text("[Unit]\nDescription=probe\n[Service]\nExecStart=/bin/true\n")
    env = {f"V{i}": v for i, v in enumerate(CARRIED)}
    text = deploy.dropin_text(group(env), "abc123")
    (dropins / deploy.DROPIN_NAME).write_text(text)
    assert verify(units, "probe.service") == ""
    # one Environment= line per variable plus LD_PRELOAD, and no other directive at all
    directives = unitfile.settings(text)
    assert {k for _, k, _ in directives} == {"Environment"}
    assert len(directives) == len(env) + 1
    parsed = {}
    for _, _, value in directives:
        [item] = unitfile.split_words(value)
        k, _, v = item.partition("=")
        parsed[k] = v
    assert parsed == {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", **env}


@needs_systemd
def test_an_unescaped_injection_is_what_systemd_would_run(tmp_path):
    """The check above can fail: the raw writing that alloclab used to do is caught by it."""
    units = tmp_path / "system"
    (units / "probe.service.d").mkdir(parents=True)
    (units / "probe.service").write_text("[Service]\nExecStart=/bin/true\n")
    raw = 'x"\nExecStartPre=/nonexistent-alloclab-pwned\nEnvironment="y'
    (units / "probe.service.d" / "50-alloclab.conf").write_text(f'[Service]\nEnvironment="A={raw}"\n')
    assert "nonexistent-alloclab-pwned" in verify(units, "probe.service")
    (units / "probe.service.d" / "50-alloclab.conf").write_text('[Service]\nEnvironment="A=%Z"\n')
    assert "specifier" in verify(units, "probe.service").lower()


@pytest.mark.parametrize("value", REFUSED, ids=range(len(REFUSED)))
def test_values_that_cannot_be_carried_are_refused(value):
    with pytest.raises(UserError) as e:
        deploy.dropin_text(group({"MALLOC_CONF": value}), "abc123")
    assert "MALLOC_CONF" in e.value.args[0] or "MALLOC_CONF" in str(e.value)


@pytest.mark.parametrize("name", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_bad_variable_names_are_refused(name):
    with pytest.raises(UserError):
        deploy.dropin_text(group({name: "1"}), "abc123")


@pytest.mark.parametrize(
    "library", ["/lib/a b.so", "/lib/a:b.so", "relative.so", "/lib/a\nExecStartPre=/x", "/lib/\tx.so"]
)
def test_library_paths_the_loader_would_split_are_refused(library):
    with pytest.raises(UserError):
        deploy.dropin_text(group({}, library=library), "abc123")


@pytest.mark.parametrize(
    "field,value", [("name", "g\n[Unit]"), ("name", "../x"), ("allocator", "x\nExecStartPre=/x"), ("kind", "a\rb")]
)
def test_group_fields_reaching_comments_are_checked(field, value):
    g = group({})
    g[field] = value
    with pytest.raises(UserError):
        deploy.dropin_text(g, "abc123")


@needs_systemd
def test_collector_unit_quotes_paths_and_refuses_an_injected_interval(tmp_path):
    root = tmp_path / "r o%o$t"
    units = systemd.LocalUnits(root)
    plan = tmp_path / 'plan "%h" $HOME.json'
    run = tmp_path / "run dir"
    path = collector.install_collector(units, plan, run, "90s")
    assert verify(path.parent, path.name) == ""
    [(_, _, value)] = [d for d in unitfile.settings(path.read_text()) if d[1] == "ExecStart"]
    argv = unitfile.split_words(value, command=True)
    assert argv == [
        sys.executable,
        "-m",
        "alloclab",
        "fleet",
        "collect",
        "--plan",
        str(plan.resolve()),
        "-o",
        str(run.resolve()),
        "--interval",
        "90s",
        "--root",
        str(root.resolve()),
    ]
    for hostile in ["5m\nExecStartPre=/nonexistent-alloclab-pwned", "5m ExecStartPre=/x", "%n", "nan", "-5s"]:
        with pytest.raises(UserError):
            collector.install_collector(units, plan, run, hostile)
    assert "pwned" not in path.read_text()


@pytest.fixture
def tampered_plan(tmp_path, jemalloc):
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "svc@a.service").write_text("[Service]\nExecStart=/bin/sleep 600\n")
    groups = tmp_path / "groups.toml"
    groups.write_text(
        f'name = "t"\ncommand = ["/bin/true"]\n[[group]]\nname = "je"\nallocator = "{jemalloc}"\n'
        'env = { MALLOC_CONF = "background_thread:true" }\n'
    )
    plan = make_plan(systemd.LocalUnits(root), "svc@*", groups, 1, tmp_path / "plan.json")
    return root, plan.path


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["groups"][0]["env"].update(
            MALLOC_CONF='x"\nExecStartPre=/nonexistent-alloclab-pwned\nEnvironment="y'
        ),
        lambda d: d["groups"][0]["env"].update({"A=B": "1"}),
        lambda d: d["groups"][0].update(library="/tmp/x\nExecStartPre=/nonexistent-alloclab-pwned"),
        lambda d: d["groups"][0].update(name="je\n[Unit]"),
        lambda d: d["assignments"][0].update(unit="svc@a.service\nExecStartPre=/x"),
        lambda d: d["units"].append("../../etc/passwd"),
        lambda d: d["groups"][0].update(env=["not", "a", "table"]),
    ],
    ids=["env-value", "env-key", "library", "group-name", "assignment-unit", "unit-path", "env-type"],
)
def test_a_tampered_plan_is_refused_at_apply_before_anything_is_written(tampered_plan, edit):
    root, plan = tampered_plan
    data = json.loads(plan.read_text())
    edit(data)
    plan.write_text(json.dumps(data))
    proc = run_cli("fleet", "apply", str(plan), "--root", str(root), "--systemctl", "local", timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) <= 2 and "Traceback" not in proc.stderr, proc.stderr
    assert not list(root.rglob("50-alloclab.conf")), "a drop-in was written from a tampered plan"
    assert not (root / "var" / "lib" / "alloclab").exists()


def test_a_hostile_groups_file_is_refused_at_plan(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "svc@a.service").write_text("[Service]\nExecStart=/bin/sleep 600\n")
    groups = tmp_path / "groups.toml"
    groups.write_text(
        'name = "t"\ncommand = ["/bin/true"]\n[[group]]\nname = "g"\nallocator = "glibc"\n'
        'env = { MALLOC_ARENA_MAX = "2\\"\\nExecStartPre=/nonexistent-alloclab-pwned" }\n'
    )
    proc = run_cli(
        "fleet",
        "plan",
        "svc@*",
        "--groups",
        str(groups),
        "-o",
        str(tmp_path / "plan.json"),
        "--root",
        str(root),
        "--systemctl",
        "local",
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["units"].__setitem__(
            next(iter(m["units"])), {"dropin": "/etc/passwd", "had_file": True, "dir_existed": True}
        ),
        lambda m: m["units"].__setitem__("../../x.service", {"dropin": "/x", "had_file": False, "dir_existed": True}),
        lambda m: m.update(units=[1, 2]),
    ],
    ids=["foreign-path", "bad-unit", "shape"],
)
def test_a_tampered_manifest_is_refused_by_rollback(tampered_plan, edit):
    root, plan = tampered_plan
    units = systemd.LocalUnits(root)
    deploy.apply_plan(units, load_plan(plan), batch=1, dry_run=False, say=lambda *_: None)
    [manifest] = (root / "var" / "lib" / "alloclab" / "fleet" / "applied").glob("*/manifest.json")
    data = json.loads(manifest.read_text())
    edit(data)
    manifest.write_text(json.dumps(data))
    passwd = Path("/etc/passwd").read_bytes()
    with pytest.raises(UserError):
        deploy.rollback(units, batch=1, say=lambda *_: None)
    assert Path("/etc/passwd").read_bytes() == passwd
    units.stop("svc@a.service")
