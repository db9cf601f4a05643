"""A real `systemd --user` manager started by a test, optionally inside a network namespace the
test made, and an sshd listening inside that namespace: one simulated host of a fleet.

The manager refuses to start unless /run/systemd/system exists (the sign that systemd is PID 1),
so it runs in a private mount namespace with a tmpfs there; nothing of the machine's /run changes.
It takes the cgroup it starts in as its own and moves every process there into its init.scope,
so it starts in a cgroup made for it (the same path in every hierarchy); `close()` kills what is
left below that cgroup and removes it, whatever interrupts it (`close_all` for several hosts).
Everything is named with a random tag (the creating pid, a random suffix): other tests and other
people's tests run the same thing at the same time on this machine. A session killed outright
(SIGKILL: no teardown runs) leaves its cgroups; the next Host to start removes those whose pid
is gone and which hold no process (`remove_stale_cgroups`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

SYSTEMD = "/lib/systemd/systemd"
SSHD = "/usr/sbin/sshd"
# The nodes a system manager keeps under /run/systemd/inaccessible (ProtectHome=, InaccessiblePaths=
# mount them over what they hide); PID 1 makes them at boot, so the tmpfs gets them here.
INACCESSIBLE = (
    "mkdir -m 0755 /run/systemd/inaccessible && cd /run/systemd/inaccessible && mkdir -m 0 dir "
    "&& install -m 0 /dev/null reg && mkfifo -m 0 fifo && mknod -m 0 chr c 0 0 && mknod -m 0 blk b 0 0 && cd /"
)


CGROUP_PREFIX = "alloclab-systemd-"
STALE = re.compile(re.escape(CGROUP_PREFIX) + r"(\d+)-[0-9a-f]{8}")  # ...-{creating pid}-{random}
STOP_SECONDS = 30.0  # the manager stops its units on SIGTERM; SIGKILL after this
REMOVE_SECONDS = 30.0  # a killed process leaves its cgroup once it has exited

_open_hosts: set[Host] = set()  # closed at interpreter exit if a test's teardown did not


class Unavailable(Exception):
    """No systemd (or sshd) can run here; the message says why (tests skip with it)."""


def _hierarchies() -> list[Path]:
    return [
        Path(m)
        for m in re.findall(
            r"^\S+ \S+ \S+ \S+ (/sys/fs/cgroup\S*) .* - cgroup2? ", Path("/proc/self/mountinfo").read_text(), re.M
        )
        if not m.endswith("cpuset")
    ]  # systemd leaves v1 cpuset alone (and it needs cpus/mems set)


def _procs(cgroup: Path) -> list[int]:
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:  # removed meanwhile
        return []


def _deepest_first(top: Path) -> list[Path]:
    try:
        below = [p for p in top.rglob("*") if p.is_dir()]
    except OSError:  # a directory went while it was listed: the next round lists again
        below = []
    return sorted(below, key=lambda p: -len(p.parts)) + [top]


def remove_cgroup_tree(top: Path, deadline: float, kill: bool = True) -> bool:
    """Every process below cgroup `top` killed (kill=False: none touched, a tree holding one is
    left), then its directories removed, deepest first; retried until `deadline` (monotonic).
    True when `top` is gone."""
    while True:
        for d in _deepest_first(top):
            pids = _procs(d)
            if pids and not kill:
                return False
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                d.rmdir()
        if not top.exists():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_stale_cgroups() -> list[Path]:
    """Hosts' cgroups left by a test session that is gone (its pid, in the name, runs no more) and
    holding no process: removed (nothing is killed). Returns what was removed."""
    removed = []
    for h in _hierarchies():
        with contextlib.suppress(OSError):
            for top in h.iterdir():
                m = STALE.fullmatch(top.name)
                if m and top.is_dir() and not _pid_alive(int(m.group(1))) and remove_cgroup_tree(top, 0.0, kill=False):
                    removed.append(top)
    return removed


def close_all(hosts) -> None:
    """Close every host, each whatever the ones before raised; then raise the first error."""
    errors = []
    for h in list(hosts):
        try:
            h.close()
        except BaseException as exc:  # a test's timeout too: the next hosts are closed all the same
            errors.append(exc)
    if errors:
        raise errors[0]


@atexit.register
def _close_open_hosts() -> None:
    with contextlib.suppress(BaseException):
        close_all(_open_hosts)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unavailable(f"{' '.join(argv)}: {proc.stderr.strip()[-200:]}")


class Host:
    """One manager (and, with `netns`, its namespace and an sshd on ADDRESS:22 inside it)."""

    def __init__(
        self,
        workdir: Path,
        unit_dir: Path,
        netns: bool = False,
        address: str = "127.0.0.1",
        prepare: str = "",
        runtime_at: Path | None = None,
    ):
        """prepare: shell commands run in the host's private mount namespace before the manager
        starts (bind mounts, so every host sees its own tree at the same path as separate machines
        would; a tmpfs on /run). runtime_at: where the manager finds its runtime directory inside
        that namespace (bind-mounted there by `prepare`), when services must reach it (Type=notify
        under PrivateTmp=)."""
        self.tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.workdir, self.unit_dir, self.address = workdir, unit_dir, address
        self.runtime = workdir / "xdg"
        self.netns = f"alloclab-{self.tag}" if netns else None
        self.manager: subprocess.Popen | None = None
        self.sshd: subprocess.Popen | None = None
        self.cgroups: list[Path] = []
        self.prepare = f"{prepare} && " if prepare else ""
        self.runtime_at = runtime_at

    # -- start ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 20.0) -> Host:
        try:
            self._start(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, timeout: float) -> None:
        _open_hosts.add(self)
        remove_stale_cgroups()
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        own = f"{CGROUP_PREFIX}{self.tag}"
        try:
            for h in _hierarchies():
                (h / own).mkdir()
                self.cgroups.append(h / own)
        except OSError as exc:
            raise Unavailable(f"cannot make a cgroup for the manager ({exc.strerror})") from None
        prefix: list[str] = []
        if self.netns:
            _run(["ip", "netns", "add", self.netns])
            _run(["ip", "-n", self.netns, "link", "set", "lo", "up"])
            if self.address != "127.0.0.1":
                _run(["ip", "-n", self.netns, "addr", "add", f"{self.address}/32", "dev", "lo"])
            # nsenter --net, not `ip netns exec`: that remounts /sys, hiding the cgroup hierarchies
            prefix = ["nsenter", f"--net=/run/netns/{self.netns}"]
        env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(self.runtime_at or self.runtime),
            "HOME": str(self.workdir),
            "SYSTEMD_UNIT_PATH": f"{self.unit_dir}:",
        }
        enter = " && ".join(f"echo $$ > {d / 'cgroup.procs'}" for d in self.cgroups)
        script = f"{enter} && {self.prepare}mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system && {INACCESSIBLE} && exec {SYSTEMD} --user"
        self.manager = subprocess.Popen(
            [*prefix, "unshare", "-m", "--propagation", "private", "sh", "-c", script],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.manager.poll() is not None:
                raise Unavailable(f"no systemd user manager can run here: {self.manager.stderr.read().strip()[-300:]}")
            # (not is-system-running: that looks for /run/systemd/system in this namespace, where it is absent)
            if self.systemctl("show", "-p", "SystemState", "--value").stdout.strip() in ("running", "degraded"):
                # the system manager's notify socket is writable by every user (services that drop
                # privileges, tor among them, report readiness through it); a user manager's is
                # its owner's only, so it is opened up as PID 1's is
                notify = self.runtime / "systemd" / "notify"
                if notify.exists():
                    notify.chmod(0o777)
                return
            time.sleep(0.2)
        raise Unavailable(f"the systemd user manager did not come up in {timeout:g} s")

    def systemctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["systemctl", "--user", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(self.runtime)},
        )

    def manager_pid(self) -> int:
        """The manager's own pid (its namespaces are the host's): the child of unshare's sh."""
        for d in self.cgroups:
            for pid in (d / "init.scope" / "cgroup.procs").read_text().split() if (d / "init.scope").exists() else []:
                if Path(f"/proc/{pid}/exe").resolve() == Path(SYSTEMD).resolve():
                    return int(pid)
        raise Unavailable("the manager's pid is not in its init.scope")

    def start_sshd(self, authorized_keys: Path, timeout: float = 10.0) -> None:
        """Debian's sshd in the manager's network and mount namespaces, on ADDRESS:22 (inside the
        namespace nothing else listens), root login by key only, its own host key."""
        if not self.netns:
            raise ValueError("sshd runs only inside the host's own network namespace")
        key = self.workdir / "ssh_host_ed25519_key"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
        config = self.workdir / "sshd_config"
        config.write_text(
            f"ListenAddress {self.address}:22\nHostKey {key}\nPidFile {self.workdir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized_keys}\nPermitRootLogin prohibit-password\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"SetEnv XDG_RUNTIME_DIR={self.runtime}\nSubsystem sftp internal-sftp\n"
        )
        # sshd's privilege separation directory
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        pid = self.manager_pid()
        self.sshd = subprocess.Popen(
            ["nsenter", "-t", str(pid), "-m", "-n", SSHD, "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.sshd.poll() is not None:
                raise Unavailable(f"sshd did not start: {self.sshd.stderr.read().strip()[-300:]}")
            probe = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.netns,
                    "python3",
                    "-c",
                    f"import socket; socket.create_connection(('{self.address}', 22), 1).close()",
                ],
                capture_output=True,
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise Unavailable("sshd did not listen in 10 s")

    def proxy_command(self) -> str:
        """An ssh ProxyCommand that reaches this host's sshd from inside its namespace: the bytes
        go over the namespace's own loopback, never onto any other network."""
        bridge = Path(__file__).with_name("netns_bridge.py")
        return f"ip netns exec {self.netns} python3 {bridge} {self.address} 22"

    # -- stop ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """sshd and the manager stopped, whatever is left below its cgroups killed, the cgroups
        removed, the namespace deleted: each step runs whatever the one before raised. (Before, an
        exception while the manager stopped its units (a pytest-timeout's Failed in teardown, an
        interrupt) skipped the rest: the manager went on to exit by itself, leaving
        alloclab-systemd-{tag}/init.scope in every hierarchy.) Raises when a cgroup cannot be removed."""
        try:
            self._stop_processes()
        finally:
            try:
                self._remove_cgroups()
            finally:
                try:
                    self._remove_netns()
                finally:
                    _open_hosts.discard(self)

    def _stop_processes(self) -> None:
        for proc in (self.sshd, self.manager):  # sshd first: its sessions are in the manager's namespaces
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()  # the manager stops its units as it exits
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_SECONDS)

    def _remove_cgroups(self) -> None:
        """What is left below its cgroups (the manager too, when stopping it was cut short), then the cgroups."""
        deadline = time.monotonic() + REMOVE_SECONDS
        self.cgroups = [top for top in self.cgroups if not remove_cgroup_tree(top, deadline)]
        if self.manager is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.manager.wait(timeout=max(0.0, deadline - time.monotonic()))  # killed above: reaped here
        if self.cgroups:
            raise RuntimeError(f"cgroups not removed in {REMOVE_SECONDS:g} s: {', '.join(map(str, self.cgroups))}")

    def _remove_netns(self) -> None:
        if self.netns:
            # sshd's sessions left over, sshd itself when stopping it was cut short: the namespace's processes
            out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
            for pid in out.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            if self.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.sshd.wait(timeout=STOP_SECONDS)  # reaped
            subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True)
            self.netns = None
