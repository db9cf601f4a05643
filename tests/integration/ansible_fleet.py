"""A fleet of simulated hosts for driving the alloclab.fleet Ansible collection over real SSH.

Each host is a network namespace made here, holding Debian's sshd on 127.0.0.1:22 (the
namespace's own loopback), a private mount namespace and its own `systemd --user`
(tests/integration/systemd_host.py). ssh reaches each sshd through `ProxyCommand ip netns exec NS
...`, so no byte leaves a namespace's loopback. In its mount namespace a host is a fresh machine
without alloclab: /usr, /etc, /var, /opt, /home and /root are overlays on this machine's (what the
host writes, apt and dpkg included, lands in its own upper layer, `Fleet.upper`), its
/etc/systemd/system is its own directory (the manager's unit path), it has a user (the inventory's
`ansible_user`) with sudo, and its tree is also bound at one common path (`shared`: the relays'
torrcs and data). The relays are real tor (Debian's, `DisableNetwork 1`) in `tor@NAME` units named
and configured as ansible-relayor does (one torrc per instance) and hardened as Debian's
tor@.service is (User=debian-tor, ProtectHome=yes, ProtectSystem=full, NoNewPrivileges=yes;
PrivateTmp= is left out because the hosts' trees live under /tmp).

The one stand-in: the controller's catalog build of jemalloc@5.3.0 is Debian's own
libjemalloc.so.2 (Debian's 5.3.0 build, the bytes the catalog's debian-binary source yields)
placed in a private alloclab cache with its provenance, instead of fetching it again; the .deb
made from it by `alloclab allocators package` and everything after is real.

`doc_route()` reads the Ansible route out of docs/tutorials/relays-with-ansible.md (its commands and inventory, as a user
copies them); `Fleet.run_step` runs them in a copy of the checkout (`Fleet.checkout`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import shlex
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
    base: Path  # the test's directory (mode 0755: debian-tor traverses it)
    shared: Path  # the path where each host sees its own tree
    hosts: dict[str, Host] = field(default_factory=dict)
    units: dict[str, list[str]] = field(default_factory=dict)
    inventory: Path | None = None
    controller: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    log_dir: Path | None = None  # each playbook's output, each line with its time (kept after the test)
    checkout: Path | None = None  # a copy of the checkout, where the doc's commands run

    def _logged(
        self, argv: list[str], env: dict, cwd: Path, timeout: float, log_name: str, head: list[str] = ()
    ) -> subprocess.CompletedProcess:
        """argv's output (stderr with it), each line with its time since the start, kept in
        log_dir/log_name; killed past `timeout` seconds."""
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        lines = [f"{0:7.2f} {line}\n" for line in head]
        try:
            for line in proc.stdout:
                lines.append(f"{time.monotonic() - started:7.2f} {line}")
                if time.monotonic() - started > timeout:
                    proc.kill()
        finally:
            proc.wait()
        if self.log_dir is not None:
            (self.log_dir / log_name).write_text("".join(lines))
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(line[8:] for line in lines), "")

    def playbook(self, name: str, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), f"alloclab.fleet.{name}", *extra]
        return self._logged(argv, self.env, self.base, timeout, f"ansible-{name}.log")

    def nsenter(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        """A command in a host's mount (and network) namespace, as its sshd sessions see it."""
        return subprocess.run(
            ["nsenter", "-t", str(self.hosts[host].manager_pid()), "-m", "-n", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def host_path(self, host: str, path: Path) -> Path:
        """Where a path under `shared`, as HOST sees it, lives on this machine."""
        return self.base / host / path.relative_to(self.shared)

    def upper(self, host: str, path: str) -> Path:
        """Where what HOST wrote at an absolute path lives on this machine: its unit directory, or
        the upper layer of its overlay (files this machine has and the host did not change are not there)."""
        rel = Path(path).relative_to("/")
        if Path(path).is_relative_to("/etc/systemd/system"):
            return self.base / host / rel
        return self.base / host / "ovl" / rel.parts[0] / "u" / Path(*rel.parts[1:])

    def run_step(
        self, route: DocRoute, playbook: str, first: bool, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """The doc's commands up to and including its `alloclab.fleet.PLAYBOOK` line (first=True:
        with everything before that line, e.g. the wheel, the .debs and the inventory), in bash, in
        the checkout's copy, with the controller's PATH; its output kept in log_dir with times."""
        script = route.script(playbook, first)
        # ansible finds its configuration and the collection as the doc says: ansible.cfg in the working directory
        env = {k: v for k, v in self.env.items() if k not in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH")}
        n = len(list(self.log_dir.glob("step-*.log"))) if self.log_dir is not None else 0
        return self._logged(
            ["bash", "-euo", "pipefail", "-c", script],
            env,
            self.checkout,
            timeout,
            f"step-{n + 1:02d}-{playbook}.log",
            [f"$ {line}" for line in script.splitlines()],
        )

    def main_pid(self, host: str, unit: str) -> int | None:
        out = self.hosts[host].systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip()
        return int(out) if out and out != "0" else None


def _relay_names(index: int, count: int) -> list[str]:
    # ansible-relayor names an instance after its address and ORPort: tor@192.0.2.1_9001
    return [f"192.0.2.{index}_{9001 + i}" for i in range(count)]


OVERLAID = ("usr", "etc", "var", "opt", "home", "root")  # a host's own layer over this machine's


def _host_tree(root: Path, shared: Path, names: list[str]) -> None:
    tor = pwd.getpwnam("debian-tor")
    unit_dir = root / "etc" / "systemd" / "system"  # bound at the host's /etc/systemd/system
    unit_dir.mkdir(parents=True)
    for top in OVERLAID:
        for layer in ("u", "w"):
            (root / "ovl" / top / layer).mkdir(parents=True)
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
    package = (
        subprocess.run(["dpkg", "-S", str(library)], capture_output=True, text=True).stdout.split(":")[0]
        or "libjemalloc2"
    )
    pkg_version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True).stdout
    d = cache / "allocators" / "builds" / catalog._safe(allocator_id) / sha[:16]
    d.mkdir(parents=True)
    shutil.copy2(lib, d / lib.name)
    prov = {
        "id": allocator_id,
        "family": family,
        "version": version,
        "variant": None,
        "notes": None,
        "source": {
            "kind": "debian-installed",
            "suite": "this-host",
            "package": package,
            "package_version": pkg_version,
            "sha256": sha,
        },
        "recipe": "prebuilt",
        "flags": [],
        "compiler": None,
        "library": lib.name,
        "library_sha256": sha,
        "reported": {"family": family, "version": version},
        "hardening": hardening.features(family, str(lib)),
        "built_at": time.time(),
        "build_seconds": 0,
    }
    (d / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True))
    for p in [cache, *cache.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    return d / lib.name


@contextlib.contextmanager
def fleet(unit_counts: dict[str, int], native_dir: Path, jemalloc: str, user: str = "relayop"):
    """Hosts named as unit_counts' keys with unit_counts[host] relays each, sshd and a manager each,
    `user` with sudo on each; everything (sshd, managers, units, namespaces, cgroups, the
    directory) is removed on the way out, also on failure."""
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
            h = Host(root / "manager", Path("/etc/systemd/system"), netns=True, prepare=_fresh_host(root, shared, user))
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
        f.env = {
            **os.environ,
            "ALLOCLAB_CACHE": str(cache),
            "ANSIBLE_HOME": str(base / "ansible-home"),
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(base / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        }
        f.env.pop("ALLOCLAB_PACKAGE_ROOT", None)
        yield f
    finally:
        try:
            close_all(f.hosts.values())  # every host, whatever closing one of them raised
        finally:
            shutil.rmtree(base, ignore_errors=True)


def _fresh_host(root: Path, shared: Path, user: str) -> str:
    """The shell commands that make a host's mount namespace a fresh machine (the module's docstring)."""
    overlays = " && ".join(
        f"mount -t overlay overlay -o lowerdir=/{top},upperdir={root}/ovl/{top}/u,workdir={root}/ovl/{top}/w /{top}"
        for top in OVERLAID
    )
    sudoers = f"/etc/sudoers.d/{user}"
    return (
        f"mount --bind {root} {shared} && {overlays} && mount --bind {root}/etc/systemd/system /etc/systemd/system"
        f" && useradd --create-home --shell /bin/sh --password '*' {shlex.quote(user)}"
        f" && echo {shlex.quote(f'{user} ALL=(ALL:ALL) NOPASSWD: ALL')} > {sudoers} && chmod 0440 {sudoers}"
    )


def write_host_vars(f: Fleet, directory: Path, extra: dict | None = None) -> None:
    """Beside the operator's inventory (docs/tutorials/relays-with-ansible.md's, unchanged), what only these simulated
    hosts need, one host_vars file each: how ssh reaches the host (its key, the ProxyCommand into
    its namespace) and its user manager (systemctl --user, found through XDG_RUNTIME_DIR)."""
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    for host, h in f.hosts.items():
        (directory / f"{host}.yml").write_text(
            yaml.safe_dump(
                {
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": str(f.base / "id_ed25519"),
                    "ansible_ssh_common_args": f"-o ProxyCommand='{h.proxy_command()}' -o StrictHostKeyChecking=no "
                    "-o UserKnownHostsFile=/dev/null -o ControlMaster=auto -o ControlPersist=60s "
                    f"-o ControlPath={f.base}/cm-%C",
                    "alloclab_systemctl": "user",
                    "alloclab_environment": {"XDG_RUNTIME_DIR": str(h.runtime)},
                    **(extra or {}),
                }
            )
        )


def copy_checkout(f: Fleet) -> Path:
    """The checkout as a user has it (its files as they are now, tracked or new), beside the
    hosts; its .venv is this one (the controller's alloclab and ansible-core)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    dest = f.base / "alloclab"
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(VENV_BIN.parent)
    f.checkout = dest
    return dest


@dataclass
class DocRoute:
    """docs/tutorials/relays-with-ansible.md's Ansible route: its one `sh` block, the inventory in it, split at each
    `ansible-playbook ... alloclab.fleet.NAME` line."""

    block: str
    hosts: list[str]
    user: str

    def lines(self) -> list[str]:
        return self.block.splitlines()

    def script(self, playbook: str, first: bool) -> str:
        lines = self.lines()
        at = next(
            i
            for i, line in enumerate(lines)
            if re.match(rf"ansible-playbook .*alloclab\.fleet\.{playbook}(\s|$)", line)
        )
        if first:
            return "\n".join(lines[: at + 1]) + "\n"
        cds = [line for line in lines[:at] if line.startswith("cd ")]
        return "\n".join([*cds, lines[at]]) + "\n"


def doc_route(doc: Path = REPO / "docs" / "tutorials" / "relays-with-ansible.md") -> DocRoute:
    text = doc.read_text()
    section = text[text.index("## Many hosts") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    inventory = re.search(r"cat > inventory.ini <<'INI'\n(.*?)\nINI\n", block, re.S).group(1)
    hosts = re.search(r"^\[alloclab_fleet\]\n(.*?)(?:^\[|\Z)", inventory, re.S | re.M).group(1).split()
    user = re.search(r"^ansible_user=(\S+)$", inventory, re.M).group(1)
    return DocRoute(block, hosts, user)


def write_inventory(f: Fleet, extra: dict | None = None) -> Path:
    """An inventory of the hosts as root, with alloclab present (this checkout's): for
    benchmarks/fleet_ansible.py, which measures the experiment, not the install."""
    import yaml

    hosts = {}
    for host, h in f.hosts.items():
        hosts[host] = {
            "ansible_host": host,
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(f.base / "id_ed25519"),
            "ansible_ssh_common_args": f"-o ProxyCommand='{h.proxy_command()}' -o StrictHostKeyChecking=no "
            "-o UserKnownHostsFile=/dev/null -o ControlMaster=auto -o ControlPersist=60s "
            f"-o ControlPath={f.base}/cm-%C",
            "alloclab_environment": {"XDG_RUNTIME_DIR": str(h.runtime)},
        }
    group_vars = {
        "alloclab_install_method": "present",
        "alloclab_bin": str(VENV_BIN / "alloclab"),
        "alloclab_systemctl": "user",
        "alloclab_units": "tor@*",
        "alloclab_controller_bin": str(VENV_BIN / "alloclab"),
        "alloclab_controller_dir": str(f.controller),
        **(extra or {}),
    }
    inv = f.base / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"alloclab_fleet": {"hosts": hosts, "vars": group_vars}}}}))
    f.inventory = inv
    return inv
