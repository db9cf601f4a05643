"""The seam to systemd: every fleet verb reaches the units through `Units`, and only through it.

`Systemd` drives the real systemctl; `LocalUnits` stands in where systemd cannot be PID 1 (tests,
these machines): each unit is a real process started from a unit file under the root, with the
Environment= lines of its drop-ins. Also systemd's unit-name rules (validate_unit), a unit's
cgroup files, and the choice --systemctl makes (units_from).
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..capture import sampler
from ..common import rootfs, settings
from ..common.errors import UserError
from ..process import reaper
from . import unitaccess, unitfile

UNIT_STATES_TIMEOUT = 30.0  # seconds one batched `systemctl show` may take before the collector moves on
# the collector's first question, before any tick is due: a manager on a loaded host (load 60-100)
# answered one `systemctl show` of 2,000 units after more than 30 s (benchmarks/fleet_collector.py)
START_STATES_TIMEOUT = 600.0
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$")  # "a@.service" is a template, not a unit


def validate_unit(name: str) -> str:
    """systemd unit name rules (unit names, escaped instance names); .service only."""
    if not name.endswith(".service"):
        name += ".service"
    if len(name) > 255 or not UNIT_NAME.match(name) or "/" in name or name.startswith(".") or ".." in name:
        raise UserError(
            f"{name!r} is not a valid systemd service name",
            "use letters, digits and :_.-\\ (escape others with systemd-escape), one @ for instances",
        )
    return name


@dataclass(frozen=True)
class UnitState:
    """What systemd says about a unit at one moment: its main process and its cgroup (relative to a
    hierarchy's root, "" when it has none, e.g. while stopped)."""

    main_pid: int | None
    control_group: str = ""
    sandbox: unitaccess.Sandbox | None = None  # asked for with unit_states(..., sandbox=True)


class Units(Protocol):
    root: Path

    def list_units(self) -> list[str]: ...
    def unit_states(
        self, units: list[str], sandbox: bool = False, timeout: float | None = None
    ) -> dict[str, UnitState]: ...
    def main_pid(self, unit: str) -> int | None: ...
    def pids(self, unit: str) -> list[int]: ...
    def is_active(self, unit: str) -> bool: ...
    def daemon_reload(self) -> None: ...
    def restart(self, unit: str) -> None: ...
    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None: ...
    def sandbox(self, unit: str) -> unitaccess.Sandbox: ...


class Systemd:
    """The real thing: systemctl, drop-ins under ROOT/etc/systemd/system. `user=True` drives a user
    manager (`systemctl --user`, found through XDG_RUNTIME_DIR) whose unit path is that directory
    (SYSTEMD_UNIT_PATH): how the tests reach a real systemd where none is PID 1."""

    def __init__(self, root: Path = Path("/"), user: bool = False):
        self.root, self.user = root, user

    def _ctl(self, *args: str, timeout: float | None = None) -> str:
        try:
            # dies with alloclab: the collector exits on SIGTERM without waiting for a query under way
            proc = subprocess.run(
                ["systemctl", *(["--user"] if self.user else []), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                preexec_fn=reaper.dies_with(os.getpid()),
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"systemctl {args[0]} did not answer in {timeout:g} s", "check the manager's load"
            ) from None
        if proc.returncode not in (0, 3):  # 3: inactive, for is-active
            raise UserError(
                f"systemctl {' '.join(args)} failed: {proc.stderr.strip()[:200]}", "check the unit and your rights"
            )
        return proc.stdout

    def list_units(self) -> list[str]:
        out = self._ctl("list-units", "--type=service", "--all", "--no-legend", "--plain")
        return sorted(line.split()[0] for line in out.splitlines() if line.strip())

    def main_pid(self, unit: str) -> int | None:
        pid = int(self._ctl("show", "-p", "MainPID", "--value", unit).strip() or 0)
        return pid or None

    def unit_states(
        self, units: list[str], sandbox: bool = False, timeout: float | None = None
    ) -> dict[str, UnitState]:
        """Main process and cgroup (and with `sandbox`, User= and the sandbox settings as systemd
        resolved them) of many units in one `systemctl show` (the collector asks only about units
        whose main process it lost; plan and apply check every unit's sandbox): one child process,
        not one per unit. Bounded by `timeout` (default UNIT_STATES_TIMEOUT)."""
        states: dict[str, UnitState] = {}
        props_asked = "Id,MainPID,ControlGroup" + ("," + ",".join(unitaccess.PROPERTIES) if sandbox else "")
        manager_user = _user_name(os.getuid()) if self.user else "root"  # a user manager runs its services as its user
        for start in range(0, len(units), 4000):  # well under the kernel's argument limit
            # bounded: a manager busy with a crash loop on a loaded host answered after minutes
            out = self._ctl(
                "show", "-p", props_asked, *units[start : start + 4000], timeout=timeout or UNIT_STATES_TIMEOUT
            )
            for block in out.split("\n\n"):
                props = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
                if props.get("Id"):
                    states[props["Id"]] = UnitState(
                        int(props.get("MainPID") or 0) or None,
                        props.get("ControlGroup", ""),
                        unitaccess.from_properties(props, manager_user) if sandbox else None,
                    )
        return {u: states.get(u, UnitState(None)) for u in units}

    def pids(self, unit: str) -> list[int]:
        procs, _ = cgroup_files(self._ctl("show", "-p", "ControlGroup", "--value", unit).strip())
        if procs is not None:
            return read_cgroup_procs(procs) or []
        return _tree_of(self.main_pid(unit))

    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None:
        """The unit's cgroup where it has a memory controller (v2, or v1's memory hierarchy)."""
        return cgroup_files(self._ctl("show", "-p", "ControlGroup", "--value", unit).strip())[1]

    def is_active(self, unit: str) -> bool:
        return self._ctl("is-active", unit).strip() == "active"

    def sandbox(self, unit: str) -> unitaccess.Sandbox:
        """User= and the sandbox settings as systemd resolved them (unit file, drop-ins, defaults)."""
        return self.unit_states([unit], sandbox=True)[unit].sandbox

    def daemon_reload(self) -> None:
        self._ctl("daemon-reload")

    def restart(self, unit: str) -> None:
        # a unit that hit its start limit (a crash loop being rolled back) refuses a plain restart
        subprocess.run(["systemctl", *(["--user"] if self.user else []), "reset-failed", unit], capture_output=True)
        self._ctl("restart", unit)


def cgroup_files(control_group: str) -> tuple[str | None, sampler.Cgroup | None]:
    """A unit's cgroup.procs file (v2, v1's systemd hierarchy) and its memory cgroup (v2, or v1's
    memory hierarchy), where they exist; (None, None) for a unit without a cgroup."""
    if not control_group:
        return None, None
    procs = next(
        (
            f
            for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
            if os.path.exists(f := f"{base}{control_group}/cgroup.procs")
        ),
        None,
    )
    for base, version in (("/sys/fs/cgroup", 2), ("/sys/fs/cgroup/unified", 2), ("/sys/fs/cgroup/memory", 1)):
        path = Path(base + control_group)
        if (path / ("memory.current" if version == 2 else "memory.usage_in_bytes")).exists():
            return procs, sampler.Cgroup(path, version)
    return procs, None


def read_cgroup_procs(path: str) -> list[int] | None:
    """The pids in a cgroup.procs file ([] when empty), None when the cgroup is gone."""
    try:
        return [int(x) for x in sampler.read_small(path).split()]
    except OSError:
        return None


class LocalUnits:
    """Stand-in for systemd: unit files ROOT/etc/systemd/system/NAME.service with ExecStart= (and
    optional Environment=); drop-ins in NAME.service.d/*.conf are applied on restart; a unit is a
    real process in its own session; its identity, "pid start_ticks", lives in
    ROOT/run/alloclab-units/NAME.pid, so a pid reused by another process is never taken for the unit."""

    def __init__(self, root: Path):
        self.root = root
        self.fs = rootfs.Root(root)
        self.unit_dir = root / "etc" / "systemd" / "system"
        self.run_dir = root / "run" / "alloclab-units"
        self.fs.mkdirs(self.run_dir)
        self.log: list[tuple[float, str, str]] = []  # (time, action, unit): restart order for tests

    def list_units(self) -> list[str]:
        return sorted(p.name for p in self.unit_dir.glob("*.service") if p.is_file())

    def _settings(self, unit: str) -> tuple[list[str], dict[str, str]]:
        """ExecStart= and the environment, read with systemd's quoting rules (unitfile.split_words)."""
        dropins = self.unit_dir / f"{unit}.d"
        files = [self.unit_dir / unit] + [dropins / n for n in self.fs.listdir(dropins) if n.endswith(".conf")]
        argv: list[str] = []
        env: dict[str, str] = {}
        for f in files:
            for section, key, value in unitfile.settings(self.fs.read_text(f)):
                if section != "Service":
                    continue
                if key == "ExecStart":
                    argv = unitfile.split_words(value, command=True)
                elif key == "Environment":
                    for item in unitfile.split_words(value):
                        k, _, v = item.partition("=")
                        env[k] = v
                elif key == "UnsetEnvironment":
                    for k in unitfile.split_words(value):
                        env.pop(k, None)
        return argv, env

    def main_pid(self, unit: str) -> int | None:
        try:
            pid, start_ticks = (int(x) for x in self.fs.read_text(self.run_dir / f"{unit}.pid").split())
        except (OSError, ValueError, UserError):  # missing, or not "pid start_ticks"
            return None
        return pid if sampler.is_alive((pid, start_ticks)) else None

    def pids(self, unit: str) -> list[int]:
        return _tree_of(self.main_pid(unit))

    def unit_states(
        self, units: list[str], sandbox: bool = False, timeout: float | None = None
    ) -> dict[str, UnitState]:
        # no cgroups: the collector walks the tree
        return {u: UnitState(self.main_pid(u), sandbox=self.sandbox(u) if sandbox else None) for u in units}

    def is_active(self, unit: str) -> bool:
        return self.main_pid(unit) is not None

    def daemon_reload(self) -> None:
        self.log.append((time.time(), "daemon-reload", ""))

    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None:
        return None  # the stand-in's units share the caller's cgroup

    def sandbox(self, unit: str) -> unitaccess.Sandbox:
        """The sandbox settings as written in the unit file and its drop-ins (the stand-in does not
        apply them: it says what systemd would)."""
        props: dict[str, str] = {}
        for f in [self.unit_dir / unit] + sorted((self.unit_dir / f"{unit}.d").glob("*.conf")):
            for section, key, value in unitfile.settings(f.read_text()):
                if section == "Service" and key in unitaccess.PROPERTIES:
                    many = key in ("InaccessiblePaths", "TemporaryFileSystem", "SupplementaryGroups")
                    props[key] = (props.get(key, "") + " " + value).strip() if many and value else value
        return unitaccess.from_properties(props, _user_name(os.getuid()))

    def stop(self, unit: str) -> None:
        pid = self.main_pid(unit)
        if pid:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            for _ in range(100):
                if self.main_pid(unit) is None:
                    break
                time.sleep(0.02)
            else:
                os.killpg(pid, signal.SIGKILL)

    def restart(self, unit: str) -> None:
        self.log.append((time.time(), "restart", unit))
        self.stop(unit)
        argv, env = self._settings(unit)
        if not argv:
            raise UserError(f"unit {unit} has no ExecStart", "fix the unit file")
        p = subprocess.Popen(
            argv,
            env={**settings.environment_without_preload(), **env},
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        st = sampler.read_stat(p.pid)  # not reaped yet: the pid is still this process's
        self.fs.write(self.run_dir / f"{unit}.pid", f"{p.pid} {st.start_ticks if st else -1}")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _tree_of(pid: int | None) -> list[int]:
    """A unit's main process and everything below it, matched by (pid, start time)."""
    st = sampler.read_stat(pid) if pid else None
    return sampler.tree({st.identity}, sampler.all_processes()) if st else []


def units_from(spec: str | None, root: Path) -> Units:
    """--systemctl: "systemd" (default where systemd runs), "user" (a user manager: systemctl
    --user) or "local" (the stand-in). The root is made absolute here, so every path stored in a
    manifest is absolute."""
    root = Path(root).resolve()
    if not root.is_dir():  # a typo: else "no unit matches", or drop-ins written under a new tree
        raise UserError(
            f"--root {root} is not a directory", "give the directory the units' files live under (default /)"
        )
    if spec in (None, "auto"):
        spec = "systemd" if Path("/run/systemd/system").is_dir() else "local"
    if spec == "systemd":
        return Systemd(root)
    if spec == "user":
        return Systemd(root, user=True)
    if spec == "local":
        return LocalUnits(root)
    raise UserError(f"--systemctl {spec!r} is not known", "use systemd, user or local")
