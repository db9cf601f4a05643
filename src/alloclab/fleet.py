"""Fleet mode: allocator experiments on live systemd services, and a careful rollout.

Life cycle: `plan` (pick units by glob, assign them to groups at random, stratified by memory and
uptime, seeded) -> `apply` (one drop-in per unit, reload, restart in batches, verify each unit's
new main process maps its group's allocator, stop at the first failure) -> `collect` (sample the
units into a run store, resumable) -> `deploy` the winner the same way -> `rollback` restores the
previous drop-ins byte for byte.

systemd is reached only through the `Units` seam. `Systemd` drives the real systemctl; `LocalUnits`
stands in where systemd cannot be PID 1 (tests, these machines): each unit is a real process
started from a unit file under the root, with the Environment= lines of its drop-ins.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import allocators, loaderenv, metrics, resolution, rollout, rootfs, sampler, settings, timefmt, tunables, unitfile
from .config import load_experiment, parse_duration
from .errors import UserError
from .host import host_metadata
from .recorder import Recorder, Tracked
from .store import DB_NAME, Store

DROPIN_NAME = "50-alloclab.conf"
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$")   # "a@.service" is a template, not a unit


def validate_unit(name: str) -> str:
    """systemd unit name rules (unit names, escaped instance names); .service only."""
    if not name.endswith(".service"):
        name += ".service"
    if len(name) > 255 or not UNIT_NAME.match(name) or "/" in name or name.startswith(".") or ".." in name:
        raise UserError(f"{name!r} is not a valid systemd service name",
                        "use letters, digits and :_.-\\ (escape others with systemd-escape), one @ for instances")
    return name


# ---- the seam ---------------------------------------------------------------------------------------

class Units(Protocol):
    root: Path

    def list_units(self) -> list[str]: ...
    def main_pid(self, unit: str) -> int | None: ...
    def pids(self, unit: str) -> list[int]: ...
    def is_active(self, unit: str) -> bool: ...
    def daemon_reload(self) -> None: ...
    def restart(self, unit: str) -> None: ...
    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None: ...


class Systemd:
    """The real thing: systemctl, drop-ins under ROOT/etc/systemd/system. `user=True` drives a user
    manager (`systemctl --user`, found through XDG_RUNTIME_DIR) whose unit path is that directory
    (SYSTEMD_UNIT_PATH): how the tests reach a real systemd where none is PID 1."""

    def __init__(self, root: Path = Path("/"), user: bool = False):
        self.root, self.user = root, user

    def _ctl(self, *args: str) -> str:
        proc = subprocess.run(["systemctl", *(["--user"] if self.user else []), *args], capture_output=True, text=True)
        if proc.returncode not in (0, 3):          # 3: inactive, for is-active
            raise UserError(f"systemctl {' '.join(args)} failed: {proc.stderr.strip()[:200]}", "check the unit and your rights")
        return proc.stdout

    def list_units(self) -> list[str]:
        out = self._ctl("list-units", "--type=service", "--all", "--no-legend", "--plain")
        return sorted(line.split()[0] for line in out.splitlines() if line.strip())

    def main_pid(self, unit: str) -> int | None:
        pid = int(self._ctl("show", "-p", "MainPID", "--value", unit).strip() or 0)
        return pid or None

    def pids(self, unit: str) -> list[int]:
        cg = self._ctl("show", "-p", "ControlGroup", "--value", unit).strip()
        for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
            procs = Path(base + cg) / "cgroup.procs"
            if cg and procs.exists():
                return sorted(int(x) for x in procs.read_text().split())
        return _tree_of(self.main_pid(unit))

    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None:
        """The unit's cgroup where it has a memory controller (v2, or v1's memory hierarchy)."""
        cg = self._ctl("show", "-p", "ControlGroup", "--value", unit).strip()
        if not cg:
            return None
        for base, version in (("/sys/fs/cgroup", 2), ("/sys/fs/cgroup/unified", 2), ("/sys/fs/cgroup/memory", 1)):
            path = Path(base + cg)
            if (path / ("memory.current" if version == 2 else "memory.usage_in_bytes")).exists():
                return sampler.Cgroup(path, version)
        return None

    def is_active(self, unit: str) -> bool:
        return self._ctl("is-active", unit).strip() == "active"

    def daemon_reload(self) -> None:
        self._ctl("daemon-reload")

    def restart(self, unit: str) -> None:
        # a unit that hit its start limit (a crash loop being rolled back) refuses a plain restart
        subprocess.run(["systemctl", *(["--user"] if self.user else []), "reset-failed", unit], capture_output=True)
        self._ctl("restart", unit)


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
        self.log: list[tuple[float, str, str]] = []     # (time, action, unit): restart order for tests

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
        except (OSError, ValueError, UserError):      # missing, or not "pid start_ticks"
            return None
        return pid if sampler.is_alive((pid, start_ticks)) else None

    def pids(self, unit: str) -> list[int]:
        return _tree_of(self.main_pid(unit))

    def is_active(self, unit: str) -> bool:
        return self.main_pid(unit) is not None

    def daemon_reload(self) -> None:
        self.log.append((time.time(), "daemon-reload", ""))

    def memory_cgroup(self, unit: str) -> sampler.Cgroup | None:
        return None                       # the stand-in's units share the caller's cgroup

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
        p = subprocess.Popen(argv, env={**settings.environment_without_preload(), **env}, start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        st = sampler.read_stat(p.pid)        # not reaped yet: the pid is still this process's
        self.fs.write(self.run_dir / f"{unit}.pid", f"{p.pid} {st.start_ticks if st else -1}")


def _tree_of(pid: int | None) -> list[int]:
    """A unit's main process and everything below it, matched by (pid, start time)."""
    st = sampler.read_stat(pid) if pid else None
    return sampler.tree({st.identity}, sampler.all_processes()) if st else []


def units_from(spec: str | None, root: Path) -> Units:
    """--systemctl: "systemd" (default where systemd runs), "user" (a user manager: systemctl
    --user) or "local" (the stand-in). The root is made absolute here, so every path stored in a
    manifest is absolute."""
    root = Path(root).resolve()
    if spec in (None, "auto"):
        spec = "systemd" if Path("/run/systemd/system").is_dir() else "local"
    if spec == "systemd":
        return Systemd(root)
    if spec == "user":
        return Systemd(root, user=True)
    if spec == "local":
        return LocalUnits(root)
    raise UserError(f"--systemctl {spec!r} is not known", "use systemd, user or local")


# ---- plan -------------------------------------------------------------------------------------------

@dataclass
class Plan:
    path: Path
    data: dict

    @property
    def assignments(self) -> list[dict]:
        return self.data["assignments"]


def _unit_facts(units: Units, unit: str) -> dict:
    pid = units.main_pid(unit)
    rss = sum((sampler.read_statm(p) or (0, 0))[1] for p in units.pids(unit)) if pid else 0
    uptime = 0.0
    if pid:
        st = sampler.read_stat(pid)
        uptime = sampler.process_age(st.start_ticks) if st else 0.0
    return {"unit": unit, "memory_kb": rss, "uptime_s": round(uptime, 1), "main_pid": pid}


def make_plan(units: Units, pattern: str, groups_file: Path, seed: int, out: Path) -> Plan:
    exp = load_experiment(groups_file)
    present = units.list_units()
    glob = pattern if pattern.endswith(".service") or pattern.endswith("*") else pattern + ".service"
    chosen = [validate_unit(u) for u in present if fnmatch.fnmatchcase(u, glob) or fnmatch.fnmatchcase(u, glob + ".service")]
    if not chosen:
        raise UserError(f"no unit matches {pattern!r}", f"units present: {', '.join(present[:10]) or 'none'}")
    groups = []
    for g in exp.groups:
        loaderenv.check(g.env, f"group {g.name}: env")
        spec = resolution.resolve(g.allocator, exp.base_dir, g.env)
        if spec.kind == "bundled":
            raise UserError(f"group {g.name}: fleet mode preloads libraries; 'bundled' does not apply", "use glibc, a path or a catalog id")
        tunables.validate(g.env, spec.family, spec.path, g.name)
        groups.append({"name": g.name, "allocator": g.allocator, "kind": spec.kind, "library": spec.path,
                       "sha256": spec.sha256, "family": spec.family, "version": spec.version, "env": g.env})
        check_group(groups[-1], str(groups_file))
    facts = [_unit_facts(units, u) for u in chosen]
    # stratify: rank by memory (then uptime); each consecutive block of len(groups) units gets
    # every group once, in a seeded random order, so groups start with similar memory and age
    rng = random.Random(seed)
    facts.sort(key=lambda f: (f["memory_kb"], f["uptime_s"], f["unit"]))
    for start in range(0, len(facts), len(groups)):
        block = facts[start:start + len(groups)]
        names = [g["name"] for g in groups]
        rng.shuffle(names)
        for f, name in zip(block, names):
            f["group"] = name
    data = {"version": 1, "created": time.time(), "seed": seed, "pattern": pattern, "groups": groups,
            "assignments": sorted(facts, key=lambda f: f["unit"]), "units": sorted(chosen),
            "experiment": groups_file.read_text(), "name": exp.name}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return Plan(out, data)


def load_plan(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text())
        assert data.get("version") == 1 and data["assignments"]
    except (OSError, ValueError, AssertionError, KeyError, AttributeError):
        raise UserError(f"{path} is not an alloclab fleet plan", "make one with: alloclab fleet plan") from None
    check_plan(data, path)
    return Plan(path, data)


GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+@-]{0,63}$")


def check_group(g: dict, where: str) -> None:
    """Every value of a plan's group that ends up in a unit file, checked before anything is written."""
    if not isinstance(g, dict) or not isinstance(g.get("name"), str) or not GROUP_NAME.match(g["name"]):
        raise UserError(f"{where}: group name {g.get('name') if isinstance(g, dict) else g!r} is not valid",
                        "use letters, digits and _.+@- (at most 64)")
    what = f"{where}: group {g['name']}"
    for key in ("allocator", "kind"):
        if not isinstance(g.get(key), str):
            raise UserError(f"{what}: {key} must be a string", "make a new plan with: alloclab fleet plan")
        unitfile.check_value(g[key], f"{what}: {key}")
    if g.get("library") is not None:
        unitfile.check_preload_path(g["library"], f"{what}: library")
        if not (isinstance(g.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", g["sha256"])):
            raise UserError(f"{what}: the library has no sha256", "make a new plan with: alloclab fleet plan")
    unitfile.check_env(g.get("env", {}), what)
    if "LD_PRELOAD" in g.get("env", {}):
        raise UserError(f"{what}: env sets LD_PRELOAD", "name the library with allocator = \"...\" instead")


def check_plan(data: dict, path: Path) -> None:
    """A plan is read back from disk, so it is checked again in full: units, groups, assignments."""
    try:
        groups = data["groups"]
        for g in groups:
            check_group(g, str(path))
        names = {g["name"] for g in groups}
        units = [validate_unit(u) for u in data["units"]]
        for a in data["assignments"]:
            if a["unit"] not in units or a["group"] not in names:
                raise UserError(f"{path}: assignment {a['unit']!r} -> {a['group']!r} names an unknown unit or group",
                                "make a new plan with: alloclab fleet plan")
    except (KeyError, TypeError, AttributeError):
        raise UserError(f"{path} is not a complete alloclab fleet plan", "make a new plan with: alloclab fleet plan") from None


# ---- apply / deploy / rollback ----------------------------------------------------------------------

def dropin_path(root: Path, unit: str) -> Path:
    return root / "etc" / "systemd" / "system" / f"{validate_unit(unit)}.d" / DROPIN_NAME


def dropin_text(group: dict, plan_id: str) -> str:
    """The drop-in for one unit. Every value goes through unitfile, which refuses or escapes
    whatever systemd would read as more than a value (docs/security.md)."""
    check_group(group, f"plan {plan_id}")
    lines = [unitfile.comment_line(f"Written by alloclab fleet (plan {plan_id}, group {group['name']}: {group['allocator']})."),
             "# Remove with: alloclab fleet rollback", "[Service]"]
    if group["library"]:
        lines.append(unitfile.environment_line("LD_PRELOAD", group["library"], f"group {group['name']}"))
    else:
        lines.append("UnsetEnvironment=LD_PRELOAD")
    for k, v in sorted(group["env"].items()):
        lines.append(unitfile.environment_line(k, v, f"group {group['name']}"))
    return "\n".join(lines) + "\n"


def state_dir(root: Path) -> Path:
    return root / "var" / "lib" / "alloclab" / "fleet"


def _check_library(group: dict) -> None:
    loaderenv.check(group["env"], f"group {group['name']}: env")
    if group["library"]:
        lib = Path(group["library"])
        if not lib.exists():
            raise UserError(f"group {group['name']}: {lib} is gone", "rebuild it or make a new plan")
        allocators.check_preload_safe(lib)
        if allocators.sha256_file(lib) != group["sha256"]:
            raise UserError(f"group {group['name']}: {lib} changed since the plan was made", "make a new plan")


def apply_plan(units: Units, plan: Plan, batch: int | str, dry_run: bool, say=print, timeout: float = 30.0,
               guards: rollout.Guards | None = None, settle: float = 0.0, scope: str = "all",
               sample_every: float = 1.0) -> dict:
    """Back up every drop-in, then batch by batch: write the batch's drop-ins, reload, restart,
    verify. Without guards the first failure stops the rollout (undo: `fleet rollback`). With
    guards (a canary rollout, `fleet deploy`) each batch also settles for `settle` seconds under
    watch, and a failure or a tripped guard rolls back automatically: the tripped batch
    (scope "batch") or everything this apply restarted (scope "all"), byte for byte."""
    root = units.root
    present = set(units.list_units())
    missing = [u for u in plan.data["units"] if u not in present]
    if missing:
        raise UserError(f"the plan no longer matches the units present: {', '.join(missing[:5])} missing",
                        "make a new plan with: alloclab fleet plan")
    if scope not in ("all", "batch"):
        raise UserError(f"--rollback-scope {scope!r} is not known", "use all or batch")
    groups = {g["name"]: g for g in plan.data["groups"]}
    for g in groups.values():
        _check_library(g)
    plan_id = hashlib.sha256(plan.path.read_bytes()).hexdigest()[:12]
    writes = [(a["unit"], dropin_path(root, a["unit"]), dropin_text(groups[a["group"]], plan_id)) for a in plan.assignments]
    sizes = rollout.batch_sizes(batch, len(writes))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    batches = [writes[s:s + n] for s, n in zip(starts, sizes)]
    if dry_run:
        for unit, path, text in writes:
            say(f"would write {path}:\n" + "".join(f"    {ln}\n" for ln in text.splitlines()))
        for i, b in enumerate(batches, 1):
            say(f"batch {i}: write its drop-ins, systemctl daemon-reload, systemctl restart {' '.join(u for u, _, _ in b)}, "
                "then check active and allocator mapped" + (f", then settle {settle:g} s under the guards" if guards else ""))
        return {"dry_run": True, "units": len(writes), "batches": len(batches)}
    # back up what is there (or that nothing is), byte for byte, before touching anything; every
    # path under the root is reached without following links (rootfs)
    fs = rootfs.Root(root)
    for _, path, _ in writes:            # a planted link is refused before anything is written
        if fs.exists(path) and not fs.is_file(path):
            raise fs._refuse(fs._parts(path), "not a regular file (a symbolic link?)")
    generation = state_dir(root) / "applied" / timefmt.local_stamp()
    n = 0
    while fs.exists(generation):
        n += 1
        generation = generation.with_name(f"{generation.name.split('.')[0]}.{n}")
    fs.mkdirs(generation / "backup")
    manifest = {"plan": str(plan.path), "plan_id": plan_id, "units": {}}
    for unit, path, _ in writes:
        backup = generation / "backup" / unit
        if fs.exists(path):
            fs.write(backup, fs.read_bytes(path))
            manifest["units"][unit] = {"dropin": str(path), "had_file": True, "dir_existed": True}
        else:
            manifest["units"][unit] = {"dropin": str(path), "had_file": False, "dir_existed": fs.is_dir(path.parent)}
    fs.write(generation / "manifest.json", json.dumps(manifest, indent=2))
    done: list[str] = []
    for i, b in enumerate(batches, 1):
        names = [u for u, _, _ in b]
        old_kb = {u: _rss_kb(units, u) for u in names}          # each unit's level on its old allocator
        for unit, path, text in b:       # later batches keep their old drop-ins until their turn
            fs.write(path, text)
        units.daemon_reload()
        for unit in names:
            units.restart(unit)
        problem = None
        for unit in names:
            detail = _verify_unit(units, unit, groups[_group_of(plan, unit)], timeout)
            if detail:
                problem = (unit, f"failed verification after restart: {detail}")
                break
        if problem is None and guards is not None:
            problem = _settle(units, names, old_kb, guards, settle, sample_every)
        if problem is not None:
            unit, why = problem
            if guards is None:
                say(f"batch {i}: {unit}: {why}; stopping here ({len(done)} units done, "
                    f"{len(writes) - len(done) - len(b)} not restarted)")
                raise UserError(f"{unit} {why}", f"fix it, or undo everything with: alloclab fleet rollback --root {root}")
            undo = names if scope == "batch" else done + names
            say(f"batch {i}: {unit}: {why}: guard tripped; rolling back {len(undo)} units ({scope})")
            restore(units, generation, manifest, undo, max(sizes), say)
            if scope == "all":
                fs.rename(generation, generation.with_name(generation.name + ".rolled-back"))
            return {"dry_run": False, "units": len(done), "batches": len(batches), "generation": str(generation),
                    "tripped": {"batch": i, "unit": unit, "why": why, "rolled_back": undo, "scope": scope}}
        done.extend(names)
        say(f"batch {i}/{len(batches)}: {', '.join(names)} active and verified"
            + (f", settled {settle:g} s within the guards" if guards is not None else ""))
    return {"dry_run": False, "units": len(done), "batches": len(batches), "generation": str(generation), "tripped": None}


def _rss_kb(units: Units, unit: str) -> int | None:
    """RSS of a unit's processes now (kB), None when it has none."""
    pids = units.pids(unit)
    if not pids:
        return None
    return sum((sampler.read_statm(p) or (0, 0))[1] for p in pids)


def _settle(units: Units, names: list[str], old_kb: dict[str, int | None], guards: rollout.Guards, settle: float,
            sample_every: float) -> tuple[str, str] | None:
    """Watch a restarted batch for `settle` seconds; the first unit that trips a guard, and why."""
    memory: dict[str, list[int]] = {u: [] for u in names}
    identity = {u: _identity(units, u) for u in names}
    restarts = {u: 0 for u in names}
    deadline = time.monotonic() + settle
    while True:
        for unit in names:
            now = _identity(units, unit)
            if now is None:
                # not running: a crash, or between the restarts of a crash loop (systemd's Restart=)
                restarts[unit] += identity[unit] is not None
                identity[unit] = None
            elif identity[unit] is not None and now != identity[unit]:
                restarts[unit] += 1
            if now is not None:
                identity[unit] = now
                memory[unit].append(_rss_kb(units, unit) or 0)
            why = rollout.restart_trip(restarts[unit], guards) or rollout.memory_trip(memory[unit], old_kb[unit], guards)
            if why:
                return unit, why
        if time.monotonic() >= deadline:
            break
        time.sleep(min(sample_every, max(0.0, deadline - time.monotonic())))
    stopped = [u for u in names if identity[u] is None]
    if stopped:
        return stopped[0], "not running at the end of the settle time"
    return None


def _identity(units: Units, unit: str) -> tuple[int, int] | None:
    pid = units.main_pid(unit)
    st = sampler.read_stat(pid) if pid else None
    return st.identity if st else None


def _group_of(plan: Plan, unit: str) -> str:
    return next(a["group"] for a in plan.assignments if a["unit"] == unit)


def _verify_unit(units: Units, unit: str, group: dict, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while not units.is_active(unit):
        if time.monotonic() > deadline:
            return f"not active {timeout:g}s after restart"
        time.sleep(0.1)
    spec = allocators.AllocatorSpec(kind=group["kind"], request=group["allocator"], path=group["library"],
                                    sha256=group["sha256"], family=group["family"], version=group["version"],
                                    **_dev_inode(group["library"]))
    time.sleep(0.2)                      # let the new process map its libraries
    pid = units.main_pid(unit)
    if pid is None:
        return "no main process after restart"
    try:
        verdict = allocators.verify_process(pid, spec)
    except OSError as exc:
        return f"cannot read its maps ({exc.strerror})"
    return None if verdict.verified else verdict.detail


def _dev_inode(library: str | None) -> dict:
    if not library:
        return {}
    st = os.stat(library)
    return {"dev": st.st_dev, "inode": st.st_ino}


def deploy(units: Units, allocator: str, pattern: str, batch: int | str, dry_run: bool, out: Path, say=print,
           env: dict[str, str] | None = None, guards: rollout.Guards | None = None, settle: float = 0.0,
           scope: str = "all", sample_every: float = 1.0) -> dict:
    """Roll one allocator out to every matching unit: a one-group plan, applied in canary batches
    under the guards (rolled back automatically when one trips)."""
    groups_file = out.with_suffix(".toml")
    unitfile.check_env(env or {}, "deploy")
    env_line = "".join(f'\nenv = {{ {", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in (env or {}).items())} }}' if env else "")
    groups_file.write_text(f'name = "deploy"\ncommand = ["/bin/true"]\n[[group]]\nname = "deploy"\nallocator = {json.dumps(allocator)}{env_line}\n')
    plan = make_plan(units, pattern, groups_file, 0, out)
    return apply_plan(units, plan, batch, dry_run, say, guards=guards, settle=settle, scope=scope, sample_every=sample_every)


def load_manifest(path: Path, root: Path) -> dict:
    """An apply's manifest, checked before rollback trusts it: every unit valid, every drop-in path
    exactly the one alloclab writes for that unit under this root, every backup present."""
    fs = rootfs.Root(root)
    try:
        manifest = json.loads(fs.read_text(path))
        entries = manifest["units"].items()
        for unit, m in entries:
            if Path(m["dropin"]) != dropin_path(root, unit) or not isinstance(m["had_file"], bool) \
                    or not isinstance(m["dir_existed"], bool):
                raise UserError(f"{path}: the entry for {unit} does not name {dropin_path(root, unit)}",
                                "the manifest was edited or belongs to another --root; restore the drop-ins by hand")
            if m["had_file"] and not fs.is_file(path.parent / "backup" / unit):
                raise UserError(f"{path}: the backup of {unit} is missing", "restore its drop-in by hand")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{path} is not a readable alloclab apply manifest", "restore the drop-ins by hand") from None
    return manifest


def restore(units: Units, gen: Path, manifest: dict, names: list[str], batch: int, say=print) -> None:
    """Put back the drop-ins of `names` as the generation's backup has them (or remove what the
    apply created), reload, restart them in batches and wait until each is active."""
    fs = rootfs.Root(units.root)
    for unit in names:
        m = manifest["units"][unit]
        path = Path(m["dropin"])
        if m["had_file"]:
            fs.write(path, fs.read_bytes(gen / "backup" / unit))
        else:
            fs.unlink(path)
            if not m["dir_existed"]:
                fs.rmdir_if_empty(path.parent)
    units.daemon_reload()
    for i in range(0, len(names), batch):
        for unit in names[i:i + batch]:
            units.restart(unit)
        for unit in names[i:i + batch]:
            deadline = time.monotonic() + 30
            while not units.is_active(unit) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not units.is_active(unit):
                raise UserError(f"{unit} is not active after rollback", "check it with systemctl status")


def rollback(units: Units, batch: int, say=print) -> dict:
    """Undo the newest apply: restore each drop-in byte for byte (or remove what it created)."""
    fs = rootfs.Root(units.root)
    where = state_dir(units.root) / "applied"
    applied = sorted(where / g / "manifest.json" for g in fs.listdir(where)
                     if not g.endswith(".rolled-back") and fs.is_file(where / g / "manifest.json"))
    if not applied:
        raise UserError(f"nothing to roll back under {units.root}", "no alloclab fleet apply was recorded there")
    gen = applied[-1].parent
    manifest = load_manifest(applied[-1], units.root)
    names = list(manifest["units"])
    restore(units, gen, manifest, names, batch, say)
    fs.rename(gen, gen.with_name(gen.name + ".rolled-back"))
    say(f"rolled back {len(names)} units to their drop-ins before {gen.name}")
    return {"units": len(names), "generation": str(gen)}


# ---- collect ------------------------------------------------------------------------------------------

def install_collector(units: Units, plan: Path, run: Path, interval: str) -> Path:
    """A systemd unit that runs the collector (it resumes the same run after restarts). The
    interval is parsed and written back in seconds; paths are absolute and quoted."""
    seconds = parse_duration(interval, "--interval")
    argv = [sys.executable, "-m", "alloclab", "fleet", "collect", "--plan", str(plan.resolve()), "-o", str(run.resolve()),
            "--interval", f"{seconds:g}s", "--root", str(units.root.resolve())]
    unit = units.root / "etc" / "systemd" / "system" / "alloclab-collector.service"
    text = ("[Unit]\nDescription=alloclab fleet collector\nAfter=network.target\n\n[Service]\n"
            + unitfile.exec_line("ExecStart", argv, "collector command")
            + "\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n")
    rootfs.Root(units.root).write(unit, text)
    units.daemon_reload()
    return unit


def collect(units: Units, plan: Plan, run: Path, interval: float, duration: float | None, say=print,
            smaps_budget: float = 0.02, verify_every: float = 300.0, exposition: "metrics.Exposition | None" = None,
            host: str | None = None) -> dict:
    """Sample every unit of the plan into RUN until stopped (or for `duration` seconds). A run that
    exists is resumed: same groups and replicas, a `collector_resumed` event marks the gap. With an
    `exposition`, every tick's rows are also published for Prometheus (metrics.py), labelled `host`
    (default: this machine's name, also stored with each replica)."""
    groups = {g["name"]: g for g in plan.data["groups"]}
    host = host or socket.gethostname()
    resumed = (run / DB_NAME).exists()
    if resumed:
        store = Store.open(run)
        if store.meta().get("source") != "fleet":
            raise UserError(f"{run} is not a fleet run", "give a new directory or the collector's own run")
    else:
        run.mkdir(parents=True, exist_ok=True)
        store = Store.create(run / DB_NAME)
    store.begin()
    last = store.last_sample_time()
    if resumed:
        store.event(time.time(), "collector_resumed", f"collector restarted; no samples for {time.time() - (last or time.time()):.0f} s")
    else:
        store.set_meta(name=plan.data["name"], source="fleet", metric="rss", interval=interval, seed=plan.data["seed"],
                       baseline=plan.data["groups"][0]["name"], experiment=plan.data["experiment"], plan=str(plan.path),
                       started_at=time.time(), **{**host_metadata(), "host": host})
        for g in plan.data["groups"]:
            store.insert("groups", name=g["name"], allocator=g["allocator"], kind=g["kind"], library_path=g["library"],
                         library_sha256=g["sha256"], family=g["family"], version=g["version"], env_json=json.dumps(g["env"]),
                         command_json="[]", is_baseline=int(g["name"] == plan.data["groups"][0]["name"]))
        gid = {r["name"]: r["id"] for r in store.groups()}
        for i, a in enumerate(plan.assignments):
            store.insert("replicas", group_id=gid[a["group"]], idx=i, name=a["unit"], start_order=i, started_at=time.time(),
                         host=host)
    store.commit()
    recorder = Recorder(store, verify_every, "rss")
    tracked = {}
    for row in store.replicas():
        g = groups[row["group"]]
        spec = allocators.AllocatorSpec(kind=g["kind"], request=g["allocator"], path=g["library"], sha256=g["sha256"],
                                        family=g["family"], version=g["version"], **_dev_inode(g["library"]))
        tracked[row["name"]] = Tracked(id=row["id"], name=row["name"], group_name=row["group"], spec=spec)
    # each unit's main process identity, kept in the store so a resumed collector sees restarts
    mains = {u: tuple(v) for u, v in json.loads(store.meta().get("fleet_main_processes", "{}")).items()}
    restarts = {unit: 0 for unit in tracked}
    for e in store.events(kinds=["process_restart"]):
        unit = e["description"].split(":")[0]
        if unit in restarts:
            restarts[unit] += 1
    budget = sampler.SmapsBudget(smaps_budget)
    stop = {"now": False}
    previous = signal.signal(signal.SIGTERM, lambda *a: stop.update(now=True))
    started, ticks = time.monotonic(), 0
    try:
        while not stop["now"] and (duration is None or time.monotonic() - started < duration):
            now = time.time()
            if last is not None and now <= last:       # never two samples at one time, even across restarts
                time.sleep(0.01)
                continue
            store.begin()
            for unit, t in tracked.items():
                pid = units.main_pid(unit)
                st = sampler.read_stat(pid) if pid else None
                ident = (pid, st.start_ticks) if st else None
                if ident and mains.get(unit) and mains[unit] != ident:
                    store.event(now, "process_restart", f"{unit}: main process {mains[unit][0]} -> {pid}", t.id, t.group_name)
                    restarts[unit] += 1
                if ident:
                    mains[unit] = ident
                readings = sampler.sample_processes(units.pids(unit), budget)
                recorder.observe(t, readings, now, "load", cgroup=units.memory_cgroup(unit) if ident else None)
            if exposition is not None:
                exposition.publish(_snapshot(now, host, tracked, groups, recorder.replica_rows, restarts))
            recorder.flush(now)
            store.set_meta(fleet_main_processes=mains)
            store.commit()
            last = now
            ticks += 1
            time.sleep(max(0.0, interval - (time.time() - now)))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        store.set_meta(ended_at=time.time(), end_reason="collector stopped")
        store.close()
    say(f"collected {ticks} rounds of {len(tracked)} units into {run}")
    return {"ticks": ticks, "resumed": resumed}


def _snapshot(now: float, host: str, tracked: dict, groups: dict, rows: list[tuple], restarts: dict[str, int]) -> "metrics.Snapshot":
    """This tick's replica rows (exactly what goes to the store) as one exposition snapshot."""
    cols = Recorder.SAMPLE_COLUMNS
    by_id = {row[cols.index("replica_id")]: row for row in rows}
    snap = metrics.Snapshot(t=now, host=host)
    for unit, t in tracked.items():
        row = by_id.get(t.id)
        if row is None:
            continue
        g = groups[t.group_name]
        snap.units.append(metrics.UnitFigures(
            unit=unit, group=t.group_name, allocator=g["allocator"], version=g["version"] or "",
            nprocs=row[cols.index("nprocs")], memory_kb={c: row[cols.index(c)] for c in metrics.MEMTYPES},
            cpu_s=row[cols.index("cpu_s")], verified=t.state, restarts=restarts[unit]))
    return snap
