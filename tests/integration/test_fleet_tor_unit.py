"""Debian's own tor unit (/lib/systemd/system/tor@default.service, copied byte for byte) run by a
real systemd manager, with its hardening honoured: ProtectHome=yes, PrivateTmp=yes,
ProtectSystem=full, ReadOnlyDirectories=/; tor starts as root and runs as debian-tor (its
torrc defaults say `User debian-tor`), offline (`DisableNetwork 1`, and in a network namespace
made here). The manager is a `systemd --user` running as root in a private mount namespace
(tests/integration/systemd_host.py): it applies User= and the sandbox as the system manager does.
That namespace has its own /run, /etc/tor and /var/lib/tor, so nothing of this machine's tor
changes.

What is shown: `fleet plan` refuses, in one line naming the unit, the user and the path, a
library under a home directory (the per-user cache the issue hit); ld.so really refuses it too
when the drop-in is written by hand (its own message, captured from the unit's stderr, and the
library absent from the maps); a library at a system path passes the check and tor really runs
on it as debian-tor."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration import systemd_host

DEBIAN_UNIT = Path("/lib/systemd/system/tor@default.service")
UNIT = "tor@default.service"
pytestmark = [
    pytest.mark.root,
    pytest.mark.tor,  # Debian's tor unit under systemd in a namespace
    pytest.mark.skipif(
        not (DEBIAN_UNIT.exists() and Path(systemd_host.SYSTEMD).exists() and shutil.which("ip")),
        reason="needs Debian's tor and systemd: run scripts/install.sh --test",
    ),
]
ALLOCLAB = str(Path(sys.executable).parent / "alloclab")


def status_uid(pid: int) -> int:
    return next(
        int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")
    )


@pytest.fixture
def tor_host(tmp_path):
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    base = Path(f"/tmp/alloclab-tor-{tag}")  # outside pytest's 0700 tree: the manager's socket is reached from here
    base.mkdir(mode=0o755)
    home_cache = Path.home() / ".cache" / f"alloclab-fleet-test-{tag}"  # a per-user cache under a home directory
    root = base / "root"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    shutil.copy(DEBIAN_UNIT, unit_dir / UNIT)  # Debian's unit, as installed
    etc_tor = base / "etc-tor"
    etc_tor.mkdir()
    (etc_tor / "torrc").write_text("DisableNetwork 1\nSocksPort 0\n")
    data = base / "var-lib-tor"
    data.mkdir(mode=0o700)
    tor = pwd.getpwnam("debian-tor")
    os.chown(data, tor.pw_uid, tor.pw_gid)
    (base / "xdg").mkdir(mode=0o755)
    # this host's own /run (the unit writes /run/tor), /etc/tor and /var/lib/tor; the manager's
    # runtime directory where PrivateTmp= does not hide it (tor reports readiness to it)
    prepare = (
        f"mount -t tmpfs -o mode=0755 tmpfs /run && mkdir /run/alloclab-xdg && mount --bind {base / 'xdg'} /run/alloclab-xdg"
        f" && mount --bind {etc_tor} /etc/tor && mount --bind {data} /var/lib/tor"
    )
    host = systemd_host.Host(base, unit_dir, netns=True, prepare=prepare, runtime_at=Path("/run/alloclab-xdg"))
    try:
        try:
            host.start()
        except systemd_host.Unavailable as exc:
            pytest.skip(str(exc))
        host.systemctl("start", UNIT)
        yield host, root, base, home_cache, data
    finally:
        host.close()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(home_cache, ignore_errors=True)


def alloclab(host: systemd_host.Host, *args: str) -> subprocess.CompletedProcess:
    """The CLI as an operator runs it on that host: in its mount and network namespaces."""
    return subprocess.run(
        [
            "nsenter",
            "-t",
            str(host.manager_pid()),
            "-m",
            "-n",
            "env",
            f"XDG_RUNTIME_DIR={host.runtime}",
            ALLOCLAB,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def main_pid(host: systemd_host.Host) -> int:
    deadline = time.time() + 60
    while True:
        out = host.systemctl("show", "-p", "MainPID,ActiveState", "--value", UNIT).stdout.split()
        if len(out) == 2 and out[1] == "active" and out[0] != "0":
            return int(out[0])
        assert time.time() < deadline, host.systemctl("status", UNIT).stdout
        time.sleep(0.2)


def test_debian_tor_unit_refuses_a_home_library_and_runs_on_a_system_one(tor_host, jemalloc):
    host, root, base, home_cache, data = tor_host
    debian_tor = pwd.getpwnam("debian-tor").pw_uid
    pid = main_pid(host)
    assert status_uid(pid) == debian_tor  # Debian's tor, as debian-tor
    common = ["--root", str(root), "--systemctl", "user"]
    facts = alloclab(host, "fleet", "facts", "--units", "tor@*", "--host", "relay1", "--json", *common)
    assert facts.returncode == 0, facts.stderr
    sandbox = __import__("json").loads(facts.stdout)["units"][0]["sandbox"]
    assert (sandbox["protect_home"], sandbox["protect_system"], sandbox["private_tmp"]) == ("yes", "full", True)

    home_cache.mkdir(parents=True)
    cached = home_cache / "libjemalloc.so.2"
    shutil.copy2(os.path.realpath(jemalloc), cached)
    (base / "home.toml").write_text(f'name = "relays"\n[[group]]\nname = "jemalloc"\nallocator = "{cached}"\n')
    refused = alloclab(
        host,
        "fleet",
        "plan",
        "--units",
        "tor@*",
        "--groups",
        str(base / "home.toml"),
        "-o",
        str(base / "p.json"),
        *common,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert UNIT in line and "User=root" in line and str(cached) in line and "ProtectHome=yes" in line, line

    # what ld.so does with it: the same drop-in written by hand (no alloclab), tor restarted
    dropin = root / "etc/systemd/system" / f"{UNIT}.d" / "50-by-hand.conf"
    dropin.parent.mkdir(parents=True)
    err = data / "stderr.log"  # /var/lib/tor inside: writable by the unit
    dropin.write_text(f'[Service]\nEnvironment="LD_PRELOAD={cached}"\nStandardError=file:/var/lib/tor/stderr.log\n')
    host.systemctl("daemon-reload")
    host.systemctl("restart", UNIT)
    pid = main_pid(host)
    assert str(cached) not in Path(f"/proc/{pid}/maps").read_text()  # tor runs, on glibc
    deadline = time.time() + 10
    while "cannot be preloaded" not in (err.read_text() if err.exists() else ""):
        assert time.time() < deadline, err.read_text() if err.exists() else "no stderr"
        time.sleep(0.1)
    assert str(cached) in err.read_text()
    dropin.unlink()
    host.systemctl("daemon-reload")

    # the library at a system path: planned, applied, verified; tor runs on it as debian-tor
    (base / "system.toml").write_text(f'name = "relays"\n[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n')
    plan = alloclab(
        host,
        "fleet",
        "plan",
        "--units",
        "tor@*",
        "--groups",
        str(base / "system.toml"),
        "-o",
        str(base / "p.json"),
        *common,
    )
    assert plan.returncode == 0, plan.stderr
    applied = alloclab(host, "fleet", "apply", str(base / "p.json"), "--batch", "1", "--json", *common)
    assert applied.returncode == 0, applied.stderr
    change = __import__("json").loads(applied.stdout)["changed"]
    assert [c["unit"] for c in change] == [UNIT]
    pid = main_pid(host)
    assert pid == change[0]["main_pid"] and status_uid(pid) == debian_tor
    assert os.path.realpath(jemalloc) in Path(f"/proc/{pid}/maps").read_text()
    back = alloclab(host, "fleet", "rollback", "--json", *common)
    assert back.returncode == 0, back.stderr
    assert os.path.realpath(jemalloc) not in Path(f"/proc/{main_pid(host)}/maps").read_text()
