"""A real systemd user manager (`systemd --user`, Debian's package) for tests and benchmarks, where
systemd is not PID 1: it runs in a private mount namespace with a tmpfs at /run/systemd (its sign
that systemd runs), in a cgroup made for it, with its unit path at a given directory. Nothing of
the host's /run changes; the manager, its units and its cgroup are gone when the context ends."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

SYSTEMD = "/lib/systemd/systemd"


class Unavailable(Exception):
    """No systemd user manager can run here (the reason is the message)."""


@contextlib.contextmanager
def user_manager(unit_dir: Path, scratch: Path, monkeypatch=None):
    """Start the manager; inside the context `systemctl --user` reaches it (XDG_RUNTIME_DIR is set
    in os.environ, or through `monkeypatch` when given)."""
    tag = uuid.uuid4().hex[:8]
    # The manager takes the cgroup it starts in as its own and moves every process found there into
    # its init.scope: so it starts in a cgroup made for it (the same path in every hierarchy), never
    # in a cgroup shared with other processes; the cgroup is removed afterwards.
    own = f"alloclab-systemd-{tag}-{os.getpid()}"
    hierarchies = [Path(m) for m in re.findall(r"^\S+ \S+ \S+ \S+ (/sys/fs/cgroup\S*) .* - cgroup2? ",
                                                 Path("/proc/self/mountinfo").read_text(), re.M)
                   if not m.endswith("cpuset")]          # systemd leaves v1 cpuset alone (and it needs cpus/mems set)
    made = []
    try:
        for h in hierarchies:
            (h / own).mkdir()
            made.append(h / own)
    except OSError as exc:
        for d in made:
            d.rmdir()
        raise Unavailable(f"cannot make a cgroup for the manager ({exc.strerror}): no systemd can run here") from None
    runtime = scratch / f"xdg-{tag}"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(scratch), "SYSTEMD_UNIT_PATH": f"{unit_dir}:"}
    enter = " && ".join(f"echo $$ > {d / 'cgroup.procs'}" for d in made)
    script = f"{enter} && mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system && exec {SYSTEMD} --user"
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    old_runtime = os.environ.get("XDG_RUNTIME_DIR")
    if monkeypatch is not None:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))     # for systemctl --user, as a user's session has it
    else:
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            if proc.poll() is not None:
                raise Unavailable(f"no systemd user manager can run here: {proc.stderr.read().strip()[-300:]}")
            # (not is-system-running: that looks for /run/systemd/system in this namespace, where it is absent)
            if subprocess.run(["systemctl", "--user", "show", "-p", "SystemState", "--value"], capture_output=True,
                              text=True).stdout.strip() in ("running", "degraded"):
                break
            time.sleep(0.2)
        else:
            raise Unavailable("the systemd user manager did not come up in 20 s")
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()                          # the manager stops its units as it exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if monkeypatch is None:
            if old_runtime is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = old_runtime
        for top in made:                          # whatever is left below its cgroup, then the cgroup
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
