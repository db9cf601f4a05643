"""A fleet of simulated hosts for driving the alloclab.fleet Ansible collection over real SSH.

Each host is a network namespace made here, holding Debian's sshd on 127.0.0.1:22 (the
namespace's own loopback), a private mount namespace where the host's own tree is bound at one
common path (so every host sees "its" /etc, /var, /usr/lib/alloclab at the same place, as
separate machines do) and its own `systemd --user` (tests/integration/systemd_host.py). ssh
reaches each sshd through `ProxyCommand ip netns exec NS ...`, so no byte leaves a namespace's
loopback. The relays are real tor (Debian's, `DisableNetwork 1`) in `tor@NAME` units named and
configured as ansible-relayor does (one torrc per instance, /etc/tor/instances/NAME/torrc) and
hardened as Debian's tor@.service is (User=, ProtectHome=yes, ProtectSystem=full,
NoNewPrivileges=yes; PrivateTmp= is left out because the hosts' trees live under /tmp).

The one stand-in: the controller's catalog build of jemalloc@5.3.0 is Debian's own
libjemalloc.so.2 (Debian's 5.3.0 build, the bytes the catalog's debian-binary source yields)
placed in a private alloclab cache with its provenance, instead of fetching it again; the .deb
made from it by `alloclab allocators package` and everything after is real.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import own_cache
from tests.integration.systemd_host import Host, close_all

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "ansible" / "collections"
VENV_BIN = Path(sys.executable).parent
TOR = shutil.which("tor") or "/usr/sbin/tor"

UNIT_TEMPLATE = """[Unit]
Description=tor relay %i (instance config as ansible-relayor writes it)
[Service]
User=debian-tor
ExecStart={tor} -f {shared}/etc/tor/instances/%i/torrc
Restart=on-failure
NoNewPrivileges=yes
ProtectHome=yes
ProtectSystem=full
"""

TORRC = """DisableNetwork 1
SocksPort 0
AvoidDiskWrites 1
DataDirectory {shared}/var/lib/tor-instances/{name}
Log notice file {shared}/var/lib/tor-instances/{name}/notice.log
"""


@dataclass
class Fleet:
    base: Path                      # the test's directory (mode 0755: debian-tor traverses it)
    shared: Path                    # the path where each host sees its own tree
    hosts: dict[str, Host] = field(default_factory=dict)
    units: dict[str, list[str]] = field(default_factory=dict)
    inventory: Path | None = None
    controller: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    log_dir: Path | None = None     # each playbook's output, each line with its time (kept after the test)

    def playbook(self, name: str, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), f"alloclab.fleet.{name}", *extra]
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env, cwd=self.base)
        lines = []
        try:
            for line in proc.stdout:
                lines.append(f"{time.monotonic() - started:7.2f} {line}")
                if time.monotonic() - started > timeout:
                    proc.kill()
        finally:
            proc.wait()
        if self.log_dir is not None:
            (self.log_dir / f"ansible-{name}.log").write_text("".join(lines))
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(line[8:] for line in lines), "")

    def nsenter(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        """A command in a host's mount (and network) namespace, as its sshd sessions see it."""
        return subprocess.run(["nsenter", "-t", str(self.hosts[host].manager_pid()), "-m", "-n", *argv],
                              capture_output=True, text=True, timeout=60)

    def host_path(self, host: str, path: Path) -> Path:
        """Where a path under `shared`, as HOST sees it, lives on this machine."""
        return self.base / host / path.relative_to(self.shared)

    def main_pid(self, host: str, unit: str) -> int | None:
        out = self.hosts[host].systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip()
        return int(out) if out and out != "0" else None


def _relay_names(index: int, count: int) -> list[str]:
    # ansible-relayor names an instance after its address and ORPort: tor@192.0.2.1_9001
    return [f"192.0.2.{index}_{9001 + i}" for i in range(count)]


def _host_tree(root: Path, shared: Path, names: list[str]) -> None:
    tor = pwd.getpwnam("debian-tor")
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "tor@.service").write_text(UNIT_TEMPLATE.format(tor=TOR, shared=shared))
    for name in names:
        conf = root / "etc" / "tor" / "instances" / name
        conf.mkdir(parents=True)
        (conf / "torrc").write_text(TORRC.format(shared=shared, name=name))
        data = root / "var" / "lib" / "tor-instances" / name
        data.mkdir(parents=True, mode=0o700)
        os.chown(data, tor.pw_uid, tor.pw_gid)


def fake_catalog_build(cache: Path, allocator_id: str, library: str) -> Path:
    """The stand-in described in the module docstring: one catalog build in a private cache."""
    from alloclab.allocators import catalog, hardening
    lib = Path(os.path.realpath(library))
    sha = hashlib.sha256(lib.read_bytes()).hexdigest()
    family, version = allocator_id.split("@")
    package = subprocess.run(["dpkg", "-S", str(library)], capture_output=True, text=True).stdout.split(":")[0] or "libjemalloc2"
    pkg_version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True).stdout
    d = cache / "allocators" / "builds" / catalog._safe(allocator_id) / sha[:16]
    d.mkdir(parents=True)
    shutil.copy2(lib, d / lib.name)
    prov = {"id": allocator_id, "family": family, "version": version, "variant": None, "notes": None,
            "source": {"kind": "debian-installed", "suite": "this-host", "package": package, "package_version": pkg_version,
                       "sha256": sha},
            "recipe": "prebuilt", "flags": [], "compiler": None, "library": lib.name, "library_sha256": sha,
            "reported": {"family": family, "version": version}, "hardening": hardening.features(family, str(lib)),
            "built_at": time.time(), "build_seconds": 0}
    (d / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True))
    for p in [cache, *cache.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    return d / lib.name


@contextlib.contextmanager
def fleet(unit_counts: dict[str, int], native_dir: Path, jemalloc: str):
    """Hosts h1..hN with unit_counts[host] relays each, sshd and a manager each; everything (sshd,
    managers, units, namespaces, cgroups, the directory) is removed on the way out, also on failure."""
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    base = Path(f"/tmp/alloclab-fleet-{tag}")
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    shared = base / "host"
    shared.mkdir(mode=0o755)
    f = Fleet(base, shared)
    try:
        key = base / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorized = base / "authorized_keys"
        authorized.write_text((base / "id_ed25519.pub").read_text())
        for i, (host, count) in enumerate(sorted(unit_counts.items()), 1):
            root = base / host
            names = _relay_names(i, count)
            _host_tree(root, shared, names)
            h = Host(root / "manager", shared / "etc" / "systemd" / "system", netns=True, prepare=f"mount --bind {root} {shared}")
            f.hosts[host] = h
            h.start()
            h.start_sshd(authorized)
            f.units[host] = [f"tor@{n}.service" for n in names]
            for unit in f.units[host]:
                h.systemctl("start", "--no-block", unit)
        deadline = time.time() + 60
        for host, h in f.hosts.items():
            for unit in f.units[host]:
                while h.systemctl("is-active", unit).stdout.strip() != "active":
                    assert time.time() < deadline, f"{host} {unit} did not start: {h.systemctl('status', unit).stdout}"
                    time.sleep(0.2)
        # the controller: a private alloclab cache (native programs shared with the real one)
        cache = own_cache(base / "cache", native_dir)
        fake_catalog_build(cache, "jemalloc@5.3.0", jemalloc)
        f.controller = base / "controller"
        f.controller.mkdir()
        f.env = {**os.environ, "ALLOCLAB_CACHE": str(cache), "ANSIBLE_HOME": str(base / "ansible-home"),
                 "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
                 "ANSIBLE_LOCAL_TEMP": str(base / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                 "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
        f.env.pop("ALLOCLAB_PACKAGE_ROOT", None)
        yield f
    finally:
        try:
            close_all(f.hosts.values())          # every host, whatever closing one of them raised
        finally:
            shutil.rmtree(base, ignore_errors=True)


def write_inventory(f: Fleet, extra: dict | None = None) -> Path:
    """One host line per server, as an operator's inventory has it; how to reach each host (the
    ProxyCommand into its namespace) and where its tree is are host variables."""
    import yaml
    hosts = {}
    for host, h in f.hosts.items():
        hosts[host] = {
            "ansible_host": host, "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(f.base / "id_ed25519"),
            "ansible_ssh_common_args": f"-o ProxyCommand='{h.proxy_command()}' -o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null -o ControlMaster=auto -o ControlPersist=60s "
                                       f"-o ControlPath={f.base}/cm-%C",
            "alloclab_environment": {"XDG_RUNTIME_DIR": str(h.runtime), "ALLOCLAB_PACKAGE_ROOT": str(f.shared)},
        }
    group_vars = {
        "alloclab_install_method": "present", "alloclab_bin": str(VENV_BIN / "alloclab"),
        "alloclab_systemctl": "user", "alloclab_root": str(f.shared), "alloclab_units": "tor@*",
        "alloclab_deb_method": "extract", "alloclab_package_root": str(f.shared),
        "alloclab_controller_bin": str(VENV_BIN / "alloclab"), "alloclab_controller_dir": str(f.controller),
        "alloclab_controller_environment": {"ALLOCLAB_PACKAGE_ROOT": str(f.shared)},
        **(extra or {}),
    }
    inv = f.base / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"alloclab_fleet": {"hosts": hosts, "vars": group_vars}}}}))
    f.inventory = inv
    return inv
