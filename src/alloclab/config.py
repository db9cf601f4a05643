"""Experiment files (TOML): parsed strictly into dataclasses, every mistake one clear line.

The runner, sampler and analysis read only these dataclasses, never the raw TOML, so a key
that is accepted here is a key that does something.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
METRICS = ("rss", "pss", "uss", "anon")
PLACEHOLDERS = ("replica", "group", "port", "workdir", "seed")  # seed: per replica, same across groups


def parse_duration(value: Any, what: str) -> float:
    """'90s', '5m', '2h', '1d', '250ms' or a number of seconds -> seconds (> 0)."""
    if isinstance(value, bool):
        raise UserError(f"{what} must be a duration, not {value!r}", "write e.g. \"30s\", \"5m\" or \"2h\"")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise UserError(f"{what} = {value!r} is not a duration", "write e.g. \"30s\", \"5m\", \"2h\" or \"1d\"")
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    if seconds <= 0:
        raise UserError(f"{what} must be longer than zero (got {value!r})", "give a positive duration such as \"10s\"")
    return seconds


@dataclass(frozen=True)
class Phases:
    warmup: float = 0.0
    load: float | None = None      # None: until every replica exits
    idle: float = 0.0

    @property
    def total(self) -> float | None:
        return None if self.load is None else self.warmup + self.load + self.idle

    def at(self, elapsed: float) -> str:
        """Name of the phase `elapsed` seconds after the start."""
        if elapsed < self.warmup:
            return "warmup"
        if self.load is None or elapsed < self.warmup + self.load:
            return "load"
        return "idle"


@dataclass(frozen=True)
class Group:
    name: str
    allocator: str                          # "glibc", "bundled", a library path or a catalog id
    env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None  # another build of the program, instead of the default


@dataclass(frozen=True)
class Workload:
    name: str                               # a built-in model (alloclab.workloads) or "trace"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    name: str
    command: tuple[str, ...] | None
    groups: tuple[Group, ...]
    replicas: int = 1
    interval: float = 1.0
    baseline: str = ""
    seed: int = 0
    phases: Phases = Phases()
    load_command: tuple[str, ...] | None = None
    workload: Workload | None = None
    metric: str = "rss"
    grace: float = 5.0
    smaps_budget: float = 0.02             # share of one core the full smaps_rollup tier may use
    verify_every: float = 30.0
    port_base: int = 20000
    max_duration: float | None = None
    source_text: str = ""                  # the file as given, stored with the run
    base_dir: Path = Path(".")

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)


_TOP_KEYS = {"name", "command", "replicas", "interval", "baseline", "seed", "phases", "load", "group",
             "workload", "metric", "grace", "smaps_budget", "verify_every", "port_base", "max_duration"}
_GROUP_KEYS = {"name", "allocator", "env", "command"}
_PHASE_KEYS = {"warmup", "load", "idle"}


def _check_keys(table: dict, known: set[str], where: str, src: str) -> None:
    for key in table:
        if key not in known:
            raise UserError(f"{src}: unknown key {key!r} in {where}",
                            f"use one of: {', '.join(sorted(known))}")


def _argv(value: Any, what: str, src: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise UserError(f"{src}: {what} must be a list of arguments, not a string",
                        f"write {what} = [{', '.join(repr(p) for p in value.split())}]".replace("'", '"'))
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise UserError(f"{src}: {what} must be a non-empty list of strings", 'write e.g. command = ["./app", "--flag"]')
    for arg in value:
        for name in re.findall(r"\{(\w+)\}", arg):
            if name not in PLACEHOLDERS:
                raise UserError(f"{src}: {what} uses unknown placeholder {{{name}}}",
                                f"use one of: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    return tuple(value)


def _typed(table: dict, key: str, kind: type | tuple, src: str, where: str, default: Any = None) -> Any:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UserError(f"{src}: {where}{key} must be a {names}, not {type(value).__name__} {value!r}",
                        f"fix the value of {key}")
    return value


def parse_experiment(text: str, source: str = "<experiment>", base_dir: Path = Path(".")) -> Experiment:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{source}: not valid TOML ({exc})", "fix the syntax at that line") from None
    _check_keys(data, _TOP_KEYS, "the top level", source)

    name = _typed(data, "name", str, source, "", default=Path(source).stem or "experiment")
    if not _NAME.match(name):
        raise UserError(f"{source}: name {name!r} must be letters, digits, '.', '_', '+' or '-'", "rename the experiment")
    command = _argv(data["command"], "command", source) if "command" in data else None

    workload = None
    if "workload" in data:
        wl = _typed(data, "workload", dict, source, "")
        if "name" not in wl and "trace" not in wl:
            raise UserError(f"{source}: [workload] needs name = \"...\" or trace = \"file.trace\"",
                            "see `alloclab workloads list` for the built-in models")
        wl = dict(wl)
        wname = "trace" if "trace" in wl and "name" not in wl else wl.pop("name")
        workload = Workload(str(wname), wl)
        if command is not None:
            raise UserError(f"{source}: give either command or [workload], not both", "remove one of them")

    replicas = _typed(data, "replicas", int, source, "", default=1)
    if replicas < 1 or replicas > 1000:
        raise UserError(f"{source}: replicas = {replicas} is out of range", "use 1 to 1000 replicas per group")
    interval = parse_duration(data.get("interval", "1s"), f"{source}: interval")
    seed = _typed(data, "seed", int, source, "", default=0)
    metric = _typed(data, "metric", str, source, "", default="rss")
    if metric not in METRICS:
        raise UserError(f"{source}: metric = {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    grace = parse_duration(data.get("grace", "5s"), f"{source}: grace")
    verify_every = parse_duration(data.get("verify_every", "30s"), f"{source}: verify_every")
    budget = _typed(data, "smaps_budget", (int, float), source, "", default=0.02)
    if not 0 < budget <= 1:
        raise UserError(f"{source}: smaps_budget = {budget} must be a share of one core in (0, 1]", "e.g. smaps_budget = 0.02 (2%)")
    port_base = _typed(data, "port_base", int, source, "", default=20000)
    if not 1024 <= port_base <= 60000:
        raise UserError(f"{source}: port_base = {port_base} is out of range", "use a port between 1024 and 60000")
    max_duration = parse_duration(data["max_duration"], f"{source}: max_duration") if "max_duration" in data else None

    phases_t = _typed(data, "phases", dict, source, "", default={})
    _check_keys(phases_t, _PHASE_KEYS, "[phases]", source)
    phases = Phases(
        warmup=parse_duration(phases_t["warmup"], f"{source}: phases.warmup") if "warmup" in phases_t else 0.0,
        load=parse_duration(phases_t["load"], f"{source}: phases.load") if "load" in phases_t else None,
        idle=parse_duration(phases_t["idle"], f"{source}: phases.idle") if "idle" in phases_t else 0.0,
    )
    if phases.idle and phases.load is None:
        raise UserError(f"{source}: phases.idle needs phases.load", "say how long the load phase lasts")

    load_command = None
    if "load" in data:
        load_t = _typed(data, "load", dict, source, "")
        _check_keys(load_t, {"command"}, "[load]", source)
        if "command" not in load_t:
            raise UserError(f"{source}: [load] needs command = [...]", "give the load generator's argv")
        load_command = _argv(load_t["command"], "load.command", source)

    raw_groups = data.get("group")
    if not isinstance(raw_groups, list) or not raw_groups:
        raise UserError(f"{source}: no [[group]] tables", 'add at least one: [[group]] name = "glibc" allocator = "glibc"')
    groups: list[Group] = []
    for i, g in enumerate(raw_groups, 1):
        if not isinstance(g, dict):
            raise UserError(f"{source}: group #{i} must be a table", "write it as [[group]]")
        where = f"[[group]] #{i}"
        _check_keys(g, _GROUP_KEYS, where, source)
        gname = _typed(g, "name", str, source, f"{where} ")
        if gname is None or not _NAME.match(gname):
            raise UserError(f"{source}: {where} needs a name of letters, digits, '.', '_', '+' or '-'", 'add name = "..."')
        if any(x.name == gname for x in groups):
            raise UserError(f"{source}: two groups are named {gname!r}", "give every group its own name")
        allocator = _typed(g, "allocator", str, source, f"group {gname}: ", default=None)
        if not allocator:
            raise UserError(f"{source}: group {gname!r} has no allocator",
                            'add allocator = "glibc", a library path, a catalog id, or "bundled"')
        env = _typed(g, "env", dict, source, f"group {gname}: ", default={})
        for k, v in env.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise UserError(f"{source}: group {gname!r} env {k} must be a string", f'write {k} = "{v}"')
        if "LD_PRELOAD" in env:
            raise UserError(f"{source}: group {gname!r} sets LD_PRELOAD in env", "name the library with allocator = \"...\" instead")
        gcommand = _argv(g["command"], f"group {gname} command", source) if "command" in g else None
        groups.append(Group(gname, allocator, {k: str(v) for k, v in env.items()}, gcommand))

    if command is None and workload is None and any(g.command is None for g in groups):
        raise UserError(f"{source}: no command to run", 'add command = ["./app", ...] or a [workload] table')
    baseline = _typed(data, "baseline", str, source, "", default=groups[0].name)
    if baseline not in {g.name for g in groups}:
        raise UserError(f"{source}: baseline {baseline!r} is not a group",
                        f"use one of: {', '.join(g.name for g in groups)}")
    return Experiment(name=name, command=command, groups=tuple(groups), replicas=replicas, interval=interval,
                      baseline=baseline, seed=seed, phases=phases, load_command=load_command, workload=workload,
                      metric=metric, grace=grace, smaps_budget=float(budget), verify_every=verify_every,
                      port_base=port_base, max_duration=max_duration, source_text=text, base_dir=base_dir)


def load_experiment(path: Path) -> Experiment:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"experiment file {path} does not exist", "check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read experiment file {path}: {exc}", "check its permissions and encoding") from None
    return parse_experiment(text, str(path), path.resolve().parent)
