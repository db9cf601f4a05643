"""Fleet mode's plan: pick units by glob, assign them to groups at random, stratified by memory and
uptime, seeded; one host's units (make_plan) or, from each host's `fleet facts`, a whole fleet's
(make_fleet_plan). A plan is read back from disk (load_plan) and checked again in full.
"""

from __future__ import annotations

import fnmatch
import json
import random
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..allocators import debpackage, loaderenv, resolution, tunables
from ..capture import sampler
from ..common import settings
from ..common.errors import UserError
from ..experiment_file import load_experiment
from . import factschema, unitaccess, unitfile
from .systemd import Units, cgroup_files, read_cgroup_procs, validate_unit


@dataclass
class Plan:
    path: Path
    data: dict

    @property
    def assignments(self) -> list[dict]:
        return self.data["assignments"]


def _unit_facts(units: Units, names: list[str], sandbox: bool = False) -> list[dict]:
    """Memory and uptime of each unit now (and with `sandbox`, its Sandbox): systemd asked once
    for all of them (unit_states), the members read from each unit's cgroup (or its main process's
    tree where it has none)."""
    states = units.unit_states(names, sandbox=sandbox)
    table = None
    out = []
    for unit in names:
        pid = states[unit].main_pid
        st = sampler.read_stat(pid) if pid else None
        members = read_cgroup_procs(procs) if (procs := cgroup_files(states[unit].control_group)[0]) else None
        if members is None and st:
            table = table if table is not None else sampler.all_processes()
            members = sampler.tree({st.identity}, table)
        rss = sum((sampler.read_statm(p) or (0, 0))[1] for p in members or []) if st else 0
        uptime = sampler.process_age(st.start_ticks) if st else 0.0
        out.append(
            {
                "unit": unit,
                "memory_kb": rss,
                "uptime_s": round(uptime, 1),
                "main_pid": pid,
                **({"sandbox": states[unit].sandbox} if sandbox else {}),
            }
        )
    return out


def matching_units(units: Units, pattern: str) -> list[str]:
    present = units.list_units()
    glob = pattern if pattern.endswith(".service") or pattern.endswith("*") else pattern + ".service"
    chosen = [
        validate_unit(u) for u in present if fnmatch.fnmatchcase(u, glob) or fnmatch.fnmatchcase(u, glob + ".service")
    ]
    if not chosen:
        raise UserError(f"no unit matches {pattern!r}", f"units present: {', '.join(present[:10]) or 'none'}")
    return chosen


def unit_facts(units: Units, pattern: str, host: str | None = None) -> dict:
    """What the controller needs to plan this host's share of a fleet-wide experiment
    (`alloclab fleet facts --json`): each matching unit's memory, age and sandbox."""
    host = host or socket.gethostname()
    unitfile.check_value(host, "--host")
    return {
        "version": 1,
        "kind": "alloclab-fleet-facts",
        "host": host,
        "pattern": pattern,
        "root": str(units.root),
        "collected": time.time(),
        "units": [
            {**f, "sandbox": f["sandbox"].as_dict()}
            for f in _unit_facts(units, matching_units(units, pattern), sandbox=True)
        ],
    }


def load_facts(source: Path) -> list[dict]:
    """Hosts' facts from a file, or from stdin when SOURCE is "-" (the Ansible route pipes every
    host's facts as one JSON list): each checked in full before a plan is made from it."""
    where = "stdin" if str(source) == "-" else str(source)
    try:
        text = sys.stdin.read() if str(source) == "-" else Path(source).read_text()
    except (OSError, ValueError):
        text = "null"
    data = factschema.parse(text, where)
    found = data if isinstance(data, list) else [data]
    if not found:  # `[]`: the hosts' facts gathered from none of them
        raise UserError(
            f"{where} holds no host's facts (an empty list)",
            "gather them on each host with: alloclab fleet facts --units GLOB --host NAME --json",
        )
    for facts in found:
        factschema.check_host_facts(facts, where, validate_unit)  # every field the plan uses, typed; no unit twice
        if not facts["units"]:
            raise UserError(f"{where}: host {facts['host']} reported no units", "check the --units glob on that host")
    return found


def plan_groups(groups_file: Path, for_hosts: bool = False) -> tuple[object, list[dict]]:
    """The experiment's groups as a plan records them: each library resolved (an installed
    package's path under /usr/lib/alloclab before any cached build) with its sha256.
    `for_hosts` (a fleet-wide plan, made on a controller): a catalog id is recorded at the path
    its package installs it on the hosts (`alloclab allocators package ID`, then dpkg -i),
    /usr/lib/alloclab/ID/LIBRARY under the package root, with the build's sha256; each host
    checks those bytes when it applies."""
    exp = load_experiment(groups_file, fleet=True)
    groups = []
    for g in exp.groups:
        loaderenv.check(g.env, f"group {g.name}: env")
        unitfile.check_env(g.env, f"{groups_file}: group {g.name}")  # a unit file's limits before any value's type
        spec = resolution.resolve(g.allocator, exp.base_dir, g.env)
        if spec.kind == "bundled":
            raise UserError(
                f"group {g.name}: fleet mode preloads libraries; 'bundled' does not apply",
                "use glibc, a path or a catalog id",
            )
        tunables.validate(g.env, spec.family, spec.path, g.name, spec.version)
        library = spec.path
        if for_hosts and "@" in g.allocator and "/" not in g.allocator:
            library = str(settings.package_root() / debpackage.install_dir(g.allocator) / Path(spec.path).name)
        groups.append(
            {
                "name": g.name,
                "allocator": g.allocator,
                "kind": spec.kind,
                "library": library,
                "sha256": spec.sha256,
                "family": spec.family,
                "version": spec.version,
                "env": g.env,
            }
        )
        check_group(groups[-1], str(groups_file))
    return exp, groups


def assign(facts_by_host: dict[str, list[dict]], names: list[str], seed: int) -> list[dict]:
    """Stratified random assignment, host by host (host is a blocking factor): a host's units are
    ranked by memory (then uptime) and each consecutive block of len(names) units gets every group
    once, in a random order, so within every host the groups start with similar memory and age and
    every host carries every group where its unit count allows. A last, smaller block takes the
    groups that have the fewest units fleet-wide so far (ties at random). One seeded generator
    for the whole fleet, hosts in sorted order: the same seed gives the same plan."""
    rng = random.Random(seed)
    counts = {n: 0 for n in names}
    out = []
    for host in sorted(facts_by_host):
        facts = sorted(facts_by_host[host], key=lambda f: (f["memory_kb"], f["uptime_s"], f["unit"]))
        for start in range(0, len(facts), len(names)):
            block = facts[start : start + len(names)]
            order = list(names)
            if len(block) < len(names):
                order = sorted(order, key=lambda n: (counts[n], rng.random()))[: len(block)]
            rng.shuffle(order)
            for f, name in zip(block, order):
                out.append({**f, "group": name, "host": host})
                counts[name] += 1
    return out


def check_loadable(assignments: list[dict], groups: dict[str, dict], sandbox_of, check_files: bool) -> None:
    """Refuse, in one line naming the unit, its user and the path, a group library a unit cannot load."""
    for a in assignments:
        lib = groups[a["group"]]["library"]
        if not lib:
            continue
        sandbox = sandbox_of(a)
        why = unitaccess.refusal(sandbox, lib, check_files)
        if why:
            user = sandbox.user or sandbox.manager_user
            where = f"host {a['host']}: " if a.get("host") else ""
            raise UserError(
                f"{where}{a['unit']} (User={user}) cannot load {lib}: {why}",
                "install the library where the service can read it: alloclab allocators package ID, "
                "then dpkg -i the .deb (it goes under /usr/lib/alloclab), and plan again",
            )


def make_plan(units: Units, pattern: str, groups_file: Path, seed: int, out: Path) -> Plan:
    """One host's plan (the units of this host's manager)."""
    exp, groups = plan_groups(groups_file)
    facts = _unit_facts(units, matching_units(units, pattern), sandbox=True)
    sandboxes = {f["unit"]: f.pop("sandbox") for f in facts}
    assignments = [
        {k: v for k, v in a.items() if k != "host"} for a in assign({"": facts}, [g["name"] for g in groups], seed)
    ]
    check_loadable(assignments, {g["name"]: g for g in groups}, lambda a: sandboxes[a["unit"]], True)
    data = {
        "version": 1,
        "created": time.time(),
        "seed": seed,
        "pattern": pattern,
        "groups": groups,
        "assignments": sorted(assignments, key=lambda f: f["unit"]),
        "units": sorted(f["unit"] for f in facts),
        "experiment": groups_file.read_text(),
        "name": exp.name,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return Plan(out, data)


def make_fleet_plan(facts_files: list[Path], groups_file: Path, seed: int, out: Path) -> Plan:
    """ONE plan over every host's units, from each host's `fleet facts`: assignments balanced
    within each host, one seed (recorded), the sandbox of every unit checked against its group's
    library here (each host checks file permissions again when it applies)."""
    exp, groups = plan_groups(groups_file, for_hosts=True)
    facts = [one for f in facts_files for one in load_facts(f)]
    hosts = [f["host"] for f in facts]
    if len(set(hosts)) != len(hosts):
        raise UserError(
            f"two facts files are from the same host ({', '.join(sorted({h for h in hosts if hosts.count(h) > 1}))})",
            "give each host's facts once (each host reports --host with its inventory name)",
        )
    by_host = {
        f["host"]: [{k: u[k] for k in ("unit", "memory_kb", "uptime_s", "main_pid", "sandbox")} for u in f["units"]]
        for f in facts
    }
    assignments = assign(by_host, [g["name"] for g in groups], seed)
    check_loadable(assignments, {g["name"]: g for g in groups}, lambda a: unitaccess.from_dict(a["sandbox"]), False)
    data = {
        "version": 1,
        "created": time.time(),
        "seed": seed,
        "pattern": facts[0]["pattern"],
        "groups": groups,
        "assignments": sorted(assignments, key=lambda f: (f["host"], f["unit"])),
        "hosts": {f["host"]: {"units": sorted(u["unit"] for u in f["units"]), "root": f["root"]} for f in facts},
        "experiment": groups_file.read_text(),
        "name": exp.name,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return Plan(out, data)


def load_plan(path: Path, host: str | None = None) -> Plan:
    """A plan as this host applies it. A fleet-wide plan (with `hosts`) is narrowed to HOST's
    share (default: this machine's name): its units and assignments, the groups and seed as they are."""
    if not path.exists():
        raise UserError(f"plan {path} does not exist", "check the path, or make one with: alloclab fleet plan")
    try:
        data = json.loads(path.read_text())
        assert data.get("version") == 1 and data["assignments"]
        if "hosts" in data:
            assert isinstance(data["hosts"], dict)
    except (OSError, ValueError, AssertionError, KeyError, AttributeError):
        raise UserError(f"{path} is not an alloclab fleet plan", "make one with: alloclab fleet plan") from None
    if "hosts" in data:
        host = host or socket.gethostname()
        if host not in data["hosts"]:
            raise UserError(
                f"{path} is a fleet plan without host {host!r} (hosts: {', '.join(sorted(data['hosts']))[:200]})",
                "give --host with this host's name in the plan (its inventory name)",
            )
        try:
            data = {
                **data,
                "host": host,
                "units": data["hosts"][host]["units"],
                "assignments": [a for a in data["assignments"] if a.get("host") == host],
            }
        except (KeyError, TypeError, AttributeError):
            raise UserError(
                f"{path} is not a complete alloclab fleet plan", "make a new plan with: alloclab fleet plan"
            ) from None
    check_plan(data, path)
    return Plan(path, data)


GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+@-]{0,63}$")


def check_group(g: dict, where: str) -> None:
    """Every value of a plan's group that ends up in a unit file, checked before anything is written."""
    if not isinstance(g, dict) or not isinstance(g.get("name"), str) or not GROUP_NAME.match(g["name"]):
        raise UserError(
            f"{where}: group name {g.get('name') if isinstance(g, dict) else g!r} is not valid",
            "use letters, digits and _.+@- (at most 64)",
        )
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
        raise UserError(f"{what}: env sets LD_PRELOAD", 'name the library with allocator = "..." instead')


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
                raise UserError(
                    f"{path}: assignment {a['unit']!r} -> {a['group']!r} names an unknown unit or group",
                    "make a new plan with: alloclab fleet plan",
                )
    except (KeyError, TypeError, AttributeError):
        raise UserError(
            f"{path} is not a complete alloclab fleet plan", "make a new plan with: alloclab fleet plan"
        ) from None
