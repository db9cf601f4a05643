"""docs/tutorials/relays-with-ansible.md's Ansible route, run as written, on three fresh hosts over real SSH.

The doc's commands and inventory are taken from the doc itself (`doc_route`): build the wheel in
the checkout, package the catalog id as a .deb, write the inventory and the groups file, check the
groups file, run the experiment playbook (first with a path-given library that differs on one host:
refused there before anything is applied; then for real; and again: nothing changes), the report (twice: each a
fresh snapshot), a deploy that trips on the last host (every host rolled back, play stopped), the
fleet rollback (which says the state it returns to) and the teardown (every host as it was before
alloclab; again: nothing changes). The hosts (tests/integration/ansible_fleet.py) start without
alloclab, each a network namespace with Debian's sshd, its own overlay of the machine's system and
its own `systemd --user` running real tor relays in hardened `tor@NAME` units (User=debian-tor,
ProtectHome=yes); ansible logs in as the inventory's non-root user and becomes root with sudo. The
only additions to the doc's inventory are host_vars beside it: how ssh reaches each namespace, the
user manager, and short intervals (collect 1 s, settle 2 s).

Slow (several minutes): `-m slow`."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration import systemd_host
from tests.integration.ansible_fleet import (
    COLLECTIONS,
    REPO,
    VENV_BIN,
    copy_checkout,
    doc_route,
    fleet,
    write_host_vars,
)

pytestmark = [
    pytest.mark.ssh,
    pytest.mark.root,
    pytest.mark.tor,  # Ansible over SSH to hosts in network namespaces, running tor
    pytest.mark.skipif(
        not (
            Path(systemd_host.SYSTEMD).exists()
            and Path(systemd_host.SSHD).exists()
            and (VENV_BIN / "ansible-playbook").exists()
            and shutil.which("ip")
            and shutil.which("tor")
            and shutil.which("sudo")
        ),
        reason="needs systemd, openssh-server, sudo, tor, iproute2 and ansible-core: run scripts/install.sh --test",
    ),
]

GROUPS = {"glibc", "jemalloc", "jemalloc-bg", "mimalloc"}
# what a host needs besides alloclab's venv (docs/tutorials/relays-with-ansible.md): Debian's packages for the fleet verbs,
# with what they pull in that a Debian server with python3 may lack
HOST_DEBIAN = (
    "python3-click",
    "python3-rich",
    "python3-prometheus-client",
    "python3-pygments",
    "python3-markdown-it",
    "python3-mdurl",
    "python3-venv",
    "python3.11-venv",
    "python3-pip-whl",
    "python3-setuptools-whl",
)


def environ(pid: int) -> dict[str, str]:
    return dict(i.decode().partition("=")[::2] for i in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if i)


def maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def uid(pid: int) -> int:
    return next(
        int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")
    )


def recap(out: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {ok, changed, failed, ...}."""
    tail = out[out.rindex("PLAY RECAP") :]
    return {
        m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        for m in re.finditer(r"^(\S+)\s+:\s+(.*)$", tail, re.M)
    }


def tree(top: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file() and not p.is_symlink()
    }


def du(top: Path) -> int:
    return sum(p.lstat().st_size for p in top.rglob("*") if p.is_file() and not p.is_symlink())


def newest_sample(run_db: Path) -> float:
    with sqlite3.connect(f"file:{run_db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT max(t) FROM samples").fetchone()[0]


@pytest.fixture
def route():
    return doc_route()


@pytest.fixture
def three_hosts(route, native_dir, jemalloc):
    a, b, c = route.hosts
    try:
        with fleet({a: 4, b: 4, c: 5}, native_dir, jemalloc, user=route.user) as f:
            yield f
    except systemd_host.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_documented_route_from_fresh_hosts_to_teardown(route, three_hosts, tmp_path):
    f = three_hosts
    f.log_dir = tmp_path
    hosts = list(f.hosts)
    debian_tor = __import__("pwd").getpwnam("debian-tor").pw_uid
    checkout = copy_checkout(f)
    write_host_vars(
        f,
        checkout / "ansible" / "host_vars",
        {
            "alloclab_collect_interval": "1s",
            "alloclab_batch": "2",
            "alloclab_deploy_batch": "100%",
            "alloclab_deploy_settle": "2s",
            "alloclab_deploy_max_restarts": 1,
            "alloclab_deploy_guard_interval": "0.3s",
            "alloclab_deploy_max_increase": "",
        },
    )
    units_before = {host: tree(f.upper(host, "/etc/systemd/system")) for host in hosts}
    for host in hosts:  # fresh: no alloclab on any host
        assert f.nsenter(host, "test", "-e", "/opt/alloclab").returncode == 1
    timings = {}

    def step(playbook: str, first: bool = False) -> subprocess.CompletedProcess:
        started = time.monotonic()
        run = f.run_step(route, playbook, first)
        timings.setdefault(playbook, []).append(time.monotonic() - started)
        return run

    # --- experiment: the wheel, the .deb, the inventory, check, the playbook -----------------------
    # first with the last host's mimalloc not the controller's (a path-given library): refused there,
    # in one line, before anything is applied anywhere
    mimalloc = os.path.realpath("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2")
    assert (
        f.nsenter(hosts[2], "sh", "-c", f"cp {mimalloc} /root/mimalloc.keep && printf x >> {mimalloc}").returncode == 0
    )
    run = step("experiment", first=True)
    assert "fleet groups file" in run.stdout  # `alloclab check relays.toml` accepted it
    assert run.returncode != 0
    assert f"{hosts[2]}: group mimalloc's library {mimalloc} differs from the controller's" in run.stdout, run.stdout[
        -3000:
    ]
    assert not [d for host in hosts for d in f.upper(host, "/etc/systemd/system").glob("*.d/50-alloclab.conf")]
    assert (
        f.nsenter(hosts[2], "sh", "-c", f"cp /root/mimalloc.keep {mimalloc} && rm /root/mimalloc.keep").returncode == 0
    )
    run = step("experiment")
    assert run.returncode == 0, run.stdout[-4000:]
    assert all(r["changed"] > 0 and r["failed"] == 0 for r in recap(run.stdout).values()), run.stdout[-1500:]
    controller = checkout / "ansible" / "alloclab-fleet"
    plan = json.loads((controller / "plan.json").read_text())
    assert plan["seed"] == 7 and sorted(plan["hosts"]) == sorted(hosts)
    assert len(plan["assignments"]) == 13
    for host, units in f.units.items():
        mine = [a for a in plan["assignments"] if a["host"] == host]
        assert sorted(a["unit"] for a in mine) == sorted(units)
        assert {a["group"] for a in mine} == GROUPS, mine  # every host carries every group
    groups_by_name = {g["name"]: g for g in plan["groups"]}
    assert (
        groups_by_name["jemalloc"]["library"] == "/usr/lib/alloclab/jemalloc-5.3.0/libjemalloc.so.2"
    )  # the .deb's path
    for a in plan["assignments"]:
        host, unit, group = a["host"], a["unit"], groups_by_name[a["group"]]
        pid = f.main_pid(host, unit)
        assert pid and uid(pid) == debian_tor  # User= honoured: the relay runs as debian-tor
        env = environ(pid)
        assert env.get("LD_PRELOAD") == group["library"], (host, unit, a["group"])
        if group["library"]:
            assert group["library"] in maps(pid)  # ld.so loaded it despite ProtectHome=yes
        if a["group"] == "jemalloc-bg":
            assert env.get("MALLOC_CONF") == "background_thread:true"
    sizes = {}
    for host in hosts:
        # installed by apt from the .deb: in the host's own dpkg database, its library under /usr/lib/alloclab
        status = f.nsenter(host, "dpkg-query", "-W", "-f=${Status}", "alloclab-jemalloc-5.3.0")
        assert status.stdout == "install ok installed", status
        assert f.upper(host, "/usr/lib/alloclab/jemalloc-5.3.0/libjemalloc.so.2").is_file()
        # the light install: alloclab's venv, without the analysis' packages, without pip's own copy
        venv = f.upper(host, "/opt/alloclab")
        site = next(venv.glob("lib/python3*/site-packages"))
        assert (site / "alloclab").is_dir() and not any(
            (site / name).exists() for name in ("numpy", "scipy", "matplotlib", "plotly", "pip")
        )
        sizes[host] = du(venv)
        # the collector: a service with --listen and --host, its native reader built before it started
        unit_text = f.upper(host, "/etc/systemd/system/alloclab-collector.service").read_text()
        assert (
            f"--listen 9464 --host {host}" in unit_text
            and "ExecStart=/opt/alloclab/bin/alloclab fleet collect" in unit_text
        )
        [reader] = f.upper(host, "/var/cache/alloclab/native").glob("*/liballoclab_fleet.so")
        started = (
            f.hosts[host]
            .systemctl(
                "show", "-p", "ExecMainStartTimestamp", "--value", "--timestamp=us+utc", "alloclab-collector.service"
            )
            .stdout.strip()
        )
        started_at = datetime.datetime.strptime(started, "%a %Y-%m-%d %H:%M:%S.%f %Z").replace(tzinfo=datetime.UTC)
        assert reader.stat().st_mtime < started_at.timestamp(), (host, reader.stat().st_mtime, started)
        deadline = time.time() + 60  # its start and first tick (the reader is built: no compiler to wait on)
        while True:
            scrape = f.nsenter(
                host,
                "python3",
                "-c",
                "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9464/metrics', timeout=2).read().decode())",
            )
            if (
                scrape.returncode == 0
                and f'host="{host}"' in scrape.stdout
                and "alloclab_unit_memory_bytes" in scrape.stdout
            ):
                break
            assert time.time() < deadline, (
                host,
                scrape.stderr[-500:],
                f.hosts[host].systemctl("status", "alloclab-collector.service").stdout,
            )
            time.sleep(0.5)
        assert scrape.stdout.count('memtype="resident"') >= len(f.units[host])
    debian = subprocess.run(
        ["dpkg-query", "-W", "-f=${Installed-Size}\n", *HOST_DEBIAN], capture_output=True, text=True
    )
    debian_kb = sum(int(x) for x in debian.stdout.split())
    host_install_mb = (max(sizes.values()) + debian_kb * 1024) / 1e6
    print(
        f"\nhost install: alloclab's venv {max(sizes.values()) / 1e6:.1f} MB + Debian packages {debian_kb * 1024 / 1e6:.1f} MB "
        f"({', '.join(HOST_DEBIAN)}) = {host_install_mb:.1f} MB"
    )
    assert host_install_mb <= 30
    before = {
        host: {u: f.upper(host, f"/etc/systemd/system/{u}.d/50-alloclab.conf").read_bytes() for u in f.units[host]}
        for host in hosts
    }
    pids = {(host, u): f.main_pid(host, u) for host in hosts for u in f.units[host]}

    # --- again: nothing changes ------------------------------------------------------------------
    run = step("experiment")
    assert run.returncode == 0, run.stdout[-4000:]
    assert {h: r["changed"] for h, r in recap(run.stdout).items()} == {h: 0 for h in hosts}, run.stdout[-3000:]
    assert {(host, u): f.main_pid(host, u) for host in hosts for u in f.units[host]} == pids  # nothing restarted

    # --- report: a fresh snapshot each time --------------------------------------------------------
    run = step("report")
    assert run.returncode == 0, run.stdout[-4000:]
    first = newest_sample(controller / "merged" / "run.db")
    assert (controller / "report" / "report.md").is_file()
    deadline = time.time() + 60
    while newest_sample(f.upper(hosts[0], "/var/lib/alloclab/ansible/runs/relays/run.db")) < first + 2:
        assert time.time() < deadline
        time.sleep(0.5)
    run = step("report")
    assert run.returncode == 0, run.stdout[-4000:]
    assert newest_sample(controller / "merged" / "run.db") >= first + 2  # not the first snapshot again

    # --- deploy: trips on the last host; every host rolled back, the play stopped ------------------
    crashy = f"tor@{f.units[hosts[2]][0].removeprefix('tor@').rsplit('_', 1)[0]}_9099.service"
    dropin = f.upper(hosts[2], f"/etc/systemd/system/{crashy}.d")
    dropin.mkdir()
    (dropin / "10-test.conf").write_text(
        "[Unit]\nStartLimitIntervalSec=0\n[Service]\nRestart=always\nRestartSec=0.2\nExecStart=\n"
        "ExecStart=/bin/sh -c 'case \"$$LD_PRELOAD\" in *jemalloc*) sleep 0.5; exit 1;; esac; exec sleep 3600'\n"
    )
    f.hosts[hosts[2]].systemctl("daemon-reload")
    f.hosts[hosts[2]].systemctl("start", crashy)
    run = step("deploy")
    assert run.returncode != 0, run.stdout[-3000:]
    assert "canary deploy stopped" in run.stdout and crashy in run.stdout, run.stdout[-3000:]
    assert f"rolled back {hosts[0]}, {hosts[1]}" in run.stdout, run.stdout[-3000:]
    for host in hosts:  # every host is back on the experiment's drop-ins, byte for byte
        for u in f.units[host]:
            assert f.upper(host, f"/etc/systemd/system/{u}.d/50-alloclab.conf").read_bytes() == before[host][u]
            pid = f.main_pid(host, u)
            assert (
                pid
                and environ(pid).get("LD_PRELOAD")
                == groups_by_name[
                    next(a["group"] for a in plan["assignments"] if a["host"] == host and a["unit"] == u)
                ]["library"]
            )
    assert not (dropin / "50-alloclab.conf").exists()
    f.hosts[hosts[2]].systemctl("stop", crashy)  # the test's own unit goes before the way out
    shutil.rmtree(dropin)
    f.hosts[hosts[2]].systemctl("daemon-reload")

    # --- rollback: the experiment undone, and said so -------------------------------------------------
    run = step("rollback")
    assert run.returncode == 0, run.stdout[-3000:]
    for host in hosts:
        assert f"{host}: {len(f.units[host])} units back to the state before alloclab" in run.stdout, run.stdout[-3000:]
        for u in f.units[host]:
            assert not f.upper(host, f"/etc/systemd/system/{u}.d").exists()
            pid = f.main_pid(host, u)
            assert pid and "LD_PRELOAD" not in environ(pid) and uid(pid) == debian_tor

    # --- teardown: every host as before alloclab; again: nothing changes ----------------------------
    run = step("teardown")
    assert run.returncode == 0, run.stdout[-4000:]
    for host in hosts:
        assert tree(f.upper(host, "/etc/systemd/system")) == units_before[host]  # units and drop-ins as they were
        assert f.hosts[host].systemctl("is-active", "alloclab-collector.service").stdout.strip() != "active"
        for path in ("/opt/alloclab", "/var/lib/alloclab", "/var/cache/alloclab", "/usr/lib/alloclab"):
            assert f.nsenter(host, "test", "-e", path).returncode == 1, (host, path)
        status = f.nsenter(host, "dpkg-query", "-W", "-f=${Status}", "alloclab-jemalloc-5.3.0")
        assert "ok installed" not in status.stdout, status
        for u in f.units[host]:
            pid = f.main_pid(host, u)
            assert pid and "LD_PRELOAD" not in environ(pid)
    run = step("teardown")
    assert run.returncode == 0, run.stdout[-4000:]
    assert {h: r["changed"] for h, r in recap(run.stdout).items()} == {h: 0 for h in hosts}, run.stdout[-3000:]
    print(
        "three hosts, 13 relays: "
        + ", ".join(f"{name} {' / '.join(f'{t:.0f}' for t in ts)} s" for name, ts in timings.items())
        + f"; load average {os.getloadavg()[0]:.1f} (playbook logs with times: {tmp_path})"
    )


def test_every_playbook_parses(tmp_path):
    """(each runs for real above, with -m slow)"""
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
    }
    playbooks = sorted(p.stem for p in (COLLECTIONS / "ansible_collections/alloclab/fleet/playbooks").glob("*.yml"))
    assert {"experiment", "report", "deploy", "rollback", "teardown"} <= set(playbooks)
    for playbook in playbooks:
        out = subprocess.run(
            [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", f"alloclab.fleet.{playbook}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, (playbook, out.stdout[-1500:] + out.stderr[-1500:])


def test_the_doc_route_names_every_playbook_and_builds_the_wheel(route):
    """The route the slow test runs is the doc's whole route: from the wheel to the teardown."""
    text = route.block
    assert ".venv/bin/python -m pip wheel --no-deps --no-build-isolation -w dist ." in text
    for playbook in ("experiment", "report", "deploy", "rollback", "teardown"):
        assert re.search(rf"^ansible-playbook -i inventory.ini alloclab\.fleet\.{playbook}", text, re.M), playbook
    assert "…" not in text and "..." not in text.replace("# ...", "")  # no placeholders to fill in
    assert route.user != "root" and len(route.hosts) == 3
