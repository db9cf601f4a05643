"""A real `systemd --user` manager started by a test, optionally inside a network namespace the
test made, and an sshd listening inside that namespace: one simulated host of a fleet.

The manager refuses to start unless /run/systemd/system exists (the sign that systemd is PID 1),
so it runs in a private mount namespace with a tmpfs there; nothing of the machine's /run changes.
It takes the cgroup it starts in as its own and moves every process there into its init.scope,
so it starts in a cgroup made for it (the same path in every hierarchy); `close()` kills what is
left below that cgroup and removes it. Everything is named with a random tag: other tests and
other people's tests run the same thing at the same time on this machine.
"""
from __future__ import annotations

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
INACCESSIBLE = ("mkdir -m 0755 /run/systemd/inaccessible && cd /run/systemd/inaccessible && mkdir -m 0 dir "
                "&& install -m 0 /dev/null reg && mkfifo -m 0 fifo && mknod -m 0 chr c 0 0 && mknod -m 0 blk b 0 0 && cd /")


class Unavailable(Exception):
    """No systemd (or sshd) can run here; the message says why (tests skip with it)."""


def _hierarchies() -> list[Path]:
    return [Path(m) for m in re.findall(r"^\S+ \S+ \S+ \S+ (/sys/fs/cgroup\S*) .* - cgroup2? ",
                                        Path("/proc/self/mountinfo").read_text(), re.M)
            if not m.endswith("cpuset")]          # systemd leaves v1 cpuset alone (and it needs cpus/mems set)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unavailable(f"{' '.join(argv)}: {proc.stderr.strip()[-200:]}")


class Host:
    """One manager (and, with `netns`, its namespace and an sshd on ADDRESS:22 inside it)."""

    def __init__(self, workdir: Path, unit_dir: Path, netns: bool = False, address: str = "127.0.0.1",
                 prepare: str = "", runtime_at: Path | None = None):
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
    def start(self, timeout: float = 20.0) -> "Host":
        try:
            self._start(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        own = f"alloclab-systemd-{self.tag}"
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
        env = {**os.environ, "XDG_RUNTIME_DIR": str(self.runtime_at or self.runtime), "HOME": str(self.workdir),
               "SYSTEMD_UNIT_PATH": f"{self.unit_dir}:"}
        enter = " && ".join(f"echo $$ > {d / 'cgroup.procs'}" for d in self.cgroups)
        script = f"{enter} && {self.prepare}mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system && {INACCESSIBLE} && exec {SYSTEMD} --user"
        self.manager = subprocess.Popen([*prefix, "unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
        return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True,
                              env={**os.environ, "XDG_RUNTIME_DIR": str(self.runtime)})

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
        config.write_text(f"ListenAddress {self.address}:22\nHostKey {key}\nPidFile {self.workdir / 'sshd.pid'}\n"
                          f"AuthorizedKeysFile {authorized_keys}\nPermitRootLogin prohibit-password\nStrictModes no\n"
                          "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                          f"SetEnv XDG_RUNTIME_DIR={self.runtime}\nSubsystem sftp internal-sftp\n")
        # sshd's privilege separation directory
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        pid = self.manager_pid()
        self.sshd = subprocess.Popen(["nsenter", "-t", str(pid), "-m", "-n", SSHD, "-D", "-e", "-f", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.sshd.poll() is not None:
                raise Unavailable(f"sshd did not start: {self.sshd.stderr.read().strip()[-300:]}")
            probe = subprocess.run(["ip", "netns", "exec", self.netns, "python3", "-c",
                                    f"import socket; socket.create_connection(('{self.address}', 22), 1).close()"],
                                   capture_output=True)
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
        for proc in (self.sshd, self.manager):       # sshd first: its sessions are in the manager's namespaces
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()                          # the manager stops its units as it exits
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for top in self.cgroups:                      # whatever is left below its cgroup, then the cgroup
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                for pid in (d / "cgroup.procs").read_text().split() if (d / "cgroup.procs").exists() else []:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except OSError:
                        time.sleep(0.1)
        self.cgroups = []
        if self.netns:
            if self.sshd is not None:                # sessions left over (killed with the namespace's processes)
                out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
                for pid in out.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True)
            self.netns = None
