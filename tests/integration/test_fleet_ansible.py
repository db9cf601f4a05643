"""The alloclab.fleet Ansible collection driving three hosts over real SSH (ansible-core, Debian's
sshd in network namespaces made here, a `systemd --user` per host with real tor relays in
`tor@NAME` units hardened with User=debian-tor and ProtectHome=yes): install the groups' .deb,
one fleet-wide plan, apply, collectors as services, a fleet-wide canary deploy tripped on the
last host (every host rolled back, play stopped), and a fleet-wide rollback.
tests/integration/ansible_fleet.py says how the hosts are made."""
from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.integration import systemd_host
from tests.integration.ansible_fleet import VENV_BIN, fleet, write_inventory

pytestmark = pytest.mark.skipif(
    not (Path(systemd_host.SYSTEMD).exists() and Path(systemd_host.SSHD).exists() and (VENV_BIN / "ansible-playbook").exists()
         and shutil.which("ip") and shutil.which("tor")),
    reason="needs systemd, openssh-server, tor, iproute2 and ansible-core: run scripts/install.sh --test")


def environ(pid: int) -> dict[str, str]:
    return dict(i.decode().partition("=")[::2] for i in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if i)


def maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def uid(pid: int) -> int:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))


@pytest.fixture
def three_hosts(native_dir, jemalloc):
    try:
        with fleet({"h1": 4, "h2": 4, "h3": 5}, native_dir, jemalloc) as f:
            yield f
    except systemd_host.Unavailable as exc:
        pytest.skip(str(exc))


def test_ansible_runs_the_experiment_deploy_and_rollback_across_three_hosts(three_hosts, tmp_path, mimalloc):
    f = three_hosts
    f.log_dir = tmp_path
    debian_tor = __import__("pwd").getpwnam("debian-tor").pw_uid
    # the groups: a catalog id rolled out as its .deb (twice: plain, and with a tunable), a
    # library at a system path, and glibc; no command (the services already run)
    groups = f.base / "relays.toml"
    groups.write_text('name = "relays"\n'
                      '[[group]]\nname = "glibc"\nallocator = "glibc"\n'
                      '[[group]]\nname = "jemalloc"\nallocator = "jemalloc@5.3.0"\n'
                      '[[group]]\nname = "jemalloc-bg"\nallocator = "jemalloc@5.3.0"\nenv = { MALLOC_CONF = "background_thread:true" }\n'
                      f'[[group]]\nname = "mimalloc"\nallocator = "{mimalloc}"\n')
    debs = f.base / "debs"
    proc = __import__("subprocess").run([str(VENV_BIN / "alloclab"), "allocators", "package", "jemalloc@5.3.0", "-o", str(debs)],
                                        capture_output=True, text=True, env=f.env)
    assert proc.returncode == 0, proc.stderr
    deb = next(debs.glob("*.deb"))
    write_inventory(f, {"alloclab_groups_file": str(groups), "alloclab_seed": 7, "alloclab_batch": "2",
                        "alloclab_debs": [str(deb)], "alloclab_collect_interval": "1s", "alloclab_listen": "9464"})

    started = time.monotonic()
    run = f.playbook("experiment")
    experiment_s = time.monotonic() - started
    print(f"experiment playbook: {experiment_s:.1f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]

    plan = json.loads((f.controller / "plan.json").read_text())
    assert plan["seed"] == 7 and sorted(plan["hosts"]) == ["h1", "h2", "h3"]
    assert len(plan["assignments"]) == 13
    for host, units in f.units.items():
        mine = [a for a in plan["assignments"] if a["host"] == host]
        assert sorted(a["unit"] for a in mine) == sorted(units)
        # balanced within each host: every host carries every group (4 groups, >= 4 units each)
        assert {a["group"] for a in mine} == {"glibc", "jemalloc", "jemalloc-bg", "mimalloc"}, mine
    groups_by_name = {g["name"]: g for g in plan["groups"]}
    jemalloc_lib = groups_by_name["jemalloc"]["library"]
    assert jemalloc_lib == str(f.shared / "usr/lib/alloclab/jemalloc-5.3.0/libjemalloc.so.2")   # the .deb's path
    for a in plan["assignments"]:
        host, unit, group = a["host"], a["unit"], groups_by_name[a["group"]]
        pid = f.main_pid(host, unit)
        assert pid and uid(pid) == debian_tor                     # User= honoured: the relay runs as debian-tor
        env = environ(pid)
        assert env.get("LD_PRELOAD") == group["library"], (host, unit, a["group"])
        if group["library"]:
            assert group["library"] in maps(pid)                  # ld.so loaded it despite ProtectHome=yes
        if a["group"] == "jemalloc-bg":
            assert env.get("MALLOC_CONF") == "background_thread:true"
    # collectors: a service per host, with --listen and --host, sampling its share of the plan
    for host in f.hosts:
        unit_text = f.host_path(host, f.shared / "etc/systemd/system/alloclab-collector.service").read_text()
        assert f"--listen 9464 --host {host}" in unit_text
        # the role built the native reader on this host, into the service's cache, before the service started
        [reader] = f.host_path(host, f.shared / "var/cache/alloclab/native").glob("*/liballoclab_fleet.so")
        started = f.hosts[host].systemctl("show", "-p", "ExecMainStartTimestamp", "--value", "--timestamp=us+utc",
                                          "alloclab-collector.service").stdout.strip()
        started_at = datetime.datetime.strptime(started, "%a %Y-%m-%d %H:%M:%S.%f %Z").replace(tzinfo=datetime.timezone.utc)
        assert reader.stat().st_mtime < started_at.timestamp(), (host, reader.stat().st_mtime, started)
        deadline = time.time() + 60           # its start and first tick (the reader is built: no compiler to wait on)
        while True:
            scrape = f.nsenter(host, "python3", "-c", "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9464/metrics', timeout=2).read().decode())")
            if scrape.returncode == 0 and f'host="{host}"' in scrape.stdout and "alloclab_unit_memory_bytes" in scrape.stdout:
                break
            assert time.time() < deadline, (host, scrape.stderr[-500:], f.hosts[host].systemctl("status", "alloclab-collector.service").stdout)
            time.sleep(0.5)
        assert scrape.stdout.count('memtype="resident"') >= len(f.units[host])
    before = {host: {u: f.host_path(host, f.shared / "etc/systemd/system" / f"{u}.d/50-alloclab.conf").read_bytes()
                     for u in f.units[host]} for host in f.hosts}

    # a relay on h3 that crashes whenever jemalloc is preloaded: the fleet's deploy trips there
    crashy = "tor@192.0.2.3_9099.service"
    dropin = f.base / "h3/etc/systemd/system" / f"{crashy}.d"
    dropin.mkdir(parents=True)
    (dropin / "10-test.conf").write_text(
        "[Unit]\nStartLimitIntervalSec=0\n[Service]\nRestart=always\nRestartSec=0.2\nExecStart=\n"
        "ExecStart=/bin/sh -c 'case \"$$LD_PRELOAD\" in *jemalloc*) sleep 0.5; exit 1;; esac; exec sleep 3600'\n")
    f.hosts["h3"].systemctl("daemon-reload")
    f.hosts["h3"].systemctl("start", crashy)
    started = time.monotonic()
    run = f.playbook("deploy", "-e", "alloclab_deploy_allocator=jemalloc@5.3.0", "-e", "alloclab_deploy_batch=100%",
                     "-e", "alloclab_deploy_settle=2s", "-e", "alloclab_deploy_max_restarts=1", "-e", "alloclab_deploy_guard_interval=0.3s", "-e", "alloclab_deploy_max_increase=")
    deploy_s = time.monotonic() - started
    print(f"deploy playbook: {deploy_s:.1f} s")
    assert run.returncode != 0, run.stdout[-3000:]
    assert "canary deploy stopped" in run.stdout and crashy in run.stdout, run.stdout[-3000:]
    assert "rolled back h1, h2" in run.stdout, run.stdout[-3000:]
    for host in f.hosts:                 # every host is back on the experiment's drop-ins, byte for byte
        for u in f.units[host]:
            assert f.host_path(host, f.shared / "etc/systemd/system" / f"{u}.d/50-alloclab.conf").read_bytes() == before[host][u]
            pid = f.main_pid(host, u)
            assert pid and environ(pid).get("LD_PRELOAD") == groups_by_name[next(
                a["group"] for a in plan["assignments"] if a["host"] == host and a["unit"] == u)]["library"]
    assert not (dropin.parent / f"{crashy}.d" / "50-alloclab.conf").exists()

    started = time.monotonic()
    run = f.playbook("rollback")
    rollback_s = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:]
    for host in f.hosts:
        for u in f.units[host]:
            assert not f.host_path(host, f.shared / "etc/systemd/system" / f"{u}.d/50-alloclab.conf").exists()
            pid = f.main_pid(host, u)
            assert pid and "LD_PRELOAD" not in environ(pid) and uid(pid) == debian_tor
    print(f"\nthree hosts, 13 relays: experiment {experiment_s:.1f} s, deploy (tripped on h3) {deploy_s:.1f} s, "
          f"rollback {rollback_s:.1f} s (playbook logs with times: {tmp_path})")


def test_the_report_playbook_parses(tmp_path):
    """(the other playbooks run for real above)"""
    playbook = "report"
    from tests.integration.ansible_fleet import COLLECTIONS, REPO
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    out = __import__("subprocess").run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check",
                                        f"alloclab.fleet.{playbook}"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout[-1500:] + out.stderr[-1500:]
