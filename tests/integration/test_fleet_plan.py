"""One fleet-wide plan from several hosts' facts; the library check at plan time; the installed
.deb preferred over a cached build; --json for scripts (real processes behind LocalUnits)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from alloclab.allocators import resolution
from alloclab.common.errors import UserError
from alloclab.fleet import systemd
from alloclab.fleet.plan import load_plan
from tests.conftest import own_cache, run_cli
from tests.integration.ansible_fleet import fake_catalog_build


def facts_file(tmp_path: Path, host: str, n: int, protect_home: str = "no") -> Path:
    units = [
        {
            "unit": f"tor@192.0.2.{i}_9001.service",
            "memory_kb": 30_000 + 1000 * i,
            "uptime_s": 3600.0 * i,
            "main_pid": None,
            "sandbox": {
                "user": "debian-tor",
                "protect_home": protect_home,
                "protect_system": "full",
                "private_tmp": True,
            },
        }
        for i in range(n)
    ]
    p = tmp_path / f"{host}.json"
    p.write_text(
        json.dumps(
            {
                "version": 1,
                "kind": "alloclab-fleet-facts",
                "host": host,
                "pattern": "tor@*",
                "root": "/",
                "units": units,
            }
        )
    )
    return p


@pytest.fixture
def groups(tmp_path, jemalloc, mimalloc):
    g = tmp_path / "groups.toml"
    g.write_text(
        f'name = "relays"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f'[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n[[group]]\nname = "mimalloc"\nallocator = "{mimalloc}"\n'
    )
    return g


def test_a_fleet_plan_is_one_plan_each_host_applies_its_share_of(tmp_path, groups):
    files = [facts_file(tmp_path, "h1", 3), facts_file(tmp_path, "h2", 4), facts_file(tmp_path, "h3", 2)]
    out = run_cli(
        "fleet",
        "plan",
        *[f"--facts={f}" for f in files],
        "--groups",
        str(groups),
        "--seed",
        "11",
        "-o",
        str(tmp_path / "plan.json"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["seed"] == 11 and sorted(plan["hosts"]) == ["h1", "h2", "h3"] and len(plan["assignments"]) == 9
    for host in ("h1", "h2"):
        assert {a["group"] for a in plan["assignments"] if a["host"] == host} == {"glibc", "jemalloc", "mimalloc"}
    assert len({a["group"] for a in plan["assignments"] if a["host"] == "h3"}) == 2
    share = load_plan(tmp_path / "plan.json", "h2")
    assert len(share.assignments) == 4 and share.data["units"] == sorted(
        f"tor@192.0.2.{i}_9001.service" for i in range(4)
    )
    with pytest.raises(UserError, match="without host 'h9'"):
        load_plan(tmp_path / "plan.json", "h9")
    # the same facts through stdin (the Ansible route), same seed: the same assignments
    stdin = json.dumps([json.loads(f.read_text()) for f in files])
    again = __import__("subprocess").run(
        [
            __import__("sys").executable,
            "-m",
            "alloclab",
            "fleet",
            "plan",
            "--facts",
            "-",
            "--groups",
            str(groups),
            "--seed",
            "11",
            "-o",
            str(tmp_path / "p2.json"),
            "--json",
        ],
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["assignments"] == plan["assignments"]


def test_a_library_hidden_from_a_hosts_unit_is_refused_at_plan_time(tmp_path, jemalloc):
    home_lib = Path.home() / ".cache" / f"alloclab-plan-test-{os.getpid()}" / "libjemalloc.so.2"
    home_lib.parent.mkdir(parents=True)
    try:
        shutil.copy2(os.path.realpath(jemalloc), home_lib)
        g = tmp_path / "g.toml"
        g.write_text(
            f'name = "r"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n[[group]]\nname = "je"\nallocator = "{home_lib}"\n'
        )
        files = [facts_file(tmp_path, "h1", 2), facts_file(tmp_path, "h2", 2, protect_home="yes")]
        out = run_cli(
            "fleet", "plan", *[f"--facts={f}" for f in files], "--groups", str(g), "-o", str(tmp_path / "p.json")
        )
        assert out.returncode == 2
        line = out.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("alloclab: error: host h2: tor@192.0.2."), line
        assert "(User=debian-tor)" in line and str(home_lib) in line and "ProtectHome=yes hides /root" in line, line
        assert not (tmp_path / "p.json").exists()
    finally:
        shutil.rmtree(home_lib.parent)


def test_facts_of_another_kind_are_refused_in_one_line(tmp_path, groups):
    bad = tmp_path / "bad.json"
    bad.write_text('{"units": []}')
    out = run_cli("fleet", "plan", "--facts", str(bad), "--groups", str(groups))
    assert (
        out.returncode == 2
        and "is not the output of alloclab fleet facts --json" in out.stderr
        and "Traceback" not in out.stderr
    )


def test_an_installed_package_is_preferred_over_a_cached_build_of_the_same_id(
    tmp_path, monkeypatch, native_dir, jemalloc
):
    cache = own_cache(tmp_path / "cache", native_dir)
    cached = fake_catalog_build(cache, "jemalloc@5.3.0", jemalloc)
    monkeypatch.setenv("ALLOCLAB_CACHE", str(cache))
    monkeypatch.setenv("ALLOCLAB_PACKAGE_ROOT", str(tmp_path / "pkgroot"))
    assert resolution.resolve("jemalloc@5.3.0").path == str(cached)  # no package: the cache
    debs = tmp_path / "debs"
    out = run_cli("allocators", "package", "jemalloc@5.3.0", "-o", str(debs), env={"ALLOCLAB_CACHE": str(cache)})
    assert out.returncode == 0, out.stderr
    deb = next(debs.glob("*.deb"))
    assert f"install: dpkg -i {deb};" in " ".join(
        out.stdout.split()
    )  # a command that runs from here, not the bare name
    __import__("subprocess").run(["dpkg-deb", "-x", str(deb), str(tmp_path / "pkgroot")], check=True)
    spec = resolution.resolve("jemalloc@5.3.0")
    assert spec.path == str(
        tmp_path / "pkgroot/usr/lib/alloclab/jemalloc-5.3.0/libjemalloc.so.2"
    )  # the package's bytes
    assert json.loads(resolution.provenance(spec))["installed_at"] == spec.path


def test_plan_apply_rollback_say_what_they_did_in_json(tmp_path, native_dir, groups):
    root = tmp_path / "root"
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    for i in range(3):
        (units / f"tor@r{i}.service").write_text(
            f"[Service]\nExecStart={native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 1 --mb 2\n"
        )
    local = systemd.LocalUnits(root)
    for i in range(3):
        local.restart(f"tor@r{i}.service")
    try:
        common = ["--root", str(root), "--systemctl", "local"]
        facts = run_cli("fleet", "facts", "--units", "tor@*", "--host", "relay1", "--json", *common)
        assert facts.returncode == 0, facts.stderr
        assert [u["unit"] for u in json.loads(facts.stdout)["units"]] == [f"tor@r{i}.service" for i in range(3)]
        plan = run_cli(
            "fleet",
            "plan",
            "--units",
            "tor@*",
            "--groups",
            str(groups),
            "-o",
            str(tmp_path / "p.json"),
            "--json",
            *common,
        )
        assert plan.returncode == 0, plan.stderr
        assignments = {a["unit"]: a["group"] for a in json.loads(plan.stdout)["assignments"]}
        applied = run_cli("fleet", "apply", str(tmp_path / "p.json"), "--batch", "3", "--json", *common)
        assert applied.returncode == 0, applied.stderr
        result = json.loads(applied.stdout)  # progress went to stderr
        assert "batch 1/1" in applied.stderr and result["tripped"] is None
        assert {c["unit"]: c["group"] for c in result["changed"]} == assignments
        assert all(c["main_pid"] == local.main_pid(c["unit"]) for c in result["changed"])
        back = run_cli("fleet", "rollback", "--json", *common)
        assert back.returncode == 0 and sorted(json.loads(back.stdout)["restored"]) == sorted(assignments)
    finally:
        for i in range(3):
            local.stop(f"tor@r{i}.service")
