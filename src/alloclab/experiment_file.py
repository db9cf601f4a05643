"""Experiment files (TOML): parsed strictly into dataclasses, every mistake one clear line.

The runner, sampler and analysis read only these dataclasses, never the raw TOML, so a key
that is accepted here is a key that does something. A hostile file is refused here, before
anything is created: every limit below is one a machine can honour, and docs/reference/security.md
("Hostile experiment files") lists them.
"""

from __future__ import annotations

import math
import os
import re
import stat
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common.errors import UserError, did_you_mean
from .common.text import CONTROL as _CONTROL  # incl. U+0085, U+2028/9: no line break in any path

# ---- limits (documented in docs/reference/security.md; tests/unit/test_experiment_file.py holds each one) ----
MAX_FILE_BYTES = 1 << 20  # an experiment file is a page of settings, not data
MAX_DEPTH = 16  # tables/arrays inside each other (tomllib recurses; 1,000 deep overflows)
MIN_INTERVAL = 0.1  # seconds: one sampling pass over /proc takes milliseconds per process
MAX_INTERVAL = 3600.0
MAX_DURATION = 366 * 86400.0  # any duration: phases, max_duration, verify_every, --max-duration
MAX_GRACE = 3600.0
MAX_REPLICAS = 256  # per group
MAX_GROUPS = 64
MAX_TOTAL_REPLICAS = 1024  # groups x replicas: processes, cgroups and ports on one host
MAX_SEED = 2**48  # seed * 1000 + replica must fit SQLite's 64-bit integers
MAX_ARGS = 1024  # per command
MAX_ARG_BYTES = 32 * 1024  # per argument (Linux refuses one over 128 KiB)
MAX_COMMAND_BYTES = 256 * 1024  # a whole command; with the environment it must stay under ARG_MAX
MAX_PLACEHOLDERS = 32  # per command: each may grow by a path once substituted
MAX_ENV_VARS = 256  # per group
MAX_ENV_VALUE_BYTES = 32 * 1024
PATH_MAX = 4096  # Linux's limits on a path and on one of its components
NAME_MAX = 255

_DURATION = re.compile(
    r"[ \t]*(\d+(?:\.\d+)?)[ \t]*(ms|s|m|h|d)?[ \t]*", re.ASCII
)  # no newline: values reach unit files
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", re.ASCII)  # used in directory names
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}", re.ASCII)  # a POSIX variable name
METRICS = ("rss", "pss", "uss", "anon")
PLACEHOLDERS = ("replica", "group", "port", "workdir", "seed")  # seed: per replica, same across groups
RESERVED_ENV = ("LD_PRELOAD", "ALLOCLAB_REPLICA", "ALLOCLAB_GROUP", "ALLOCLAB_STATS")
_PLACEHOLDER_HELP = f"use one of {' '.join('{' + p + '}' for p in PLACEHOLDERS)} as written (no format spec), and {{{{ }}}} for literal braces"


def show(value: Any, limit: int = 60) -> str:
    """A user's value inside a one-line message: repr (escapes control characters), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_duration(value: Any, what: str, minimum: float | None = None, maximum: float = MAX_DURATION) -> float:
    """'90s', '5m', '2h', '1d', '250ms' or a number of seconds -> seconds: finite, > 0, at least
    `minimum` and at most `maximum` (a year by default)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{what} must be a duration, not {show(value)}", 'write e.g. "30s", "5m" or "2h"')
    if isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if not m:
            raise UserError(f"{what} = {show(value)} is not a duration", 'write e.g. "30s", "5m", "2h" or "1d"')
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]  # a 400-digit number is inf, not an error
    else:
        seconds = (
            (math.inf if value > 0 else -math.inf) if isinstance(value, int) and abs(value) > 10**300 else float(value)
        )
    if math.isnan(seconds):
        raise UserError(f"{what} = {show(value)} is not a number", 'give a duration such as "10s"')
    if seconds <= 0:
        raise UserError(
            f"{what} must be longer than zero (got {show(value)})", 'give a positive duration such as "10s"'
        )
    if minimum is not None and seconds < minimum:
        raise UserError(
            f"{what} = {show(value)} is shorter than the minimum of {minimum:g}s", f'give at least "{minimum:g}s"'
        )
    if seconds > maximum:
        raise UserError(
            f"{what} = {show(value)} is longer than the maximum of {_span(maximum)}", f'give at most "{_span(maximum)}"'
        )
    return seconds


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def check_path_text(path: str, what: str) -> None:
    """A path the kernel can take: no NUL or control characters, within PATH_MAX and NAME_MAX."""
    if _CONTROL.search(path):
        raise UserError(f"{what} {show(path)} contains a control character", "remove it from the path")
    if len(os.fsencode(path)) >= PATH_MAX:
        raise UserError(f"{what} is {len(os.fsencode(path)):,} bytes long", f"use a path under {PATH_MAX} bytes")
    longest = max((len(os.fsencode(p)) for p in path.split("/")), default=0)
    if longest > NAME_MAX:
        raise UserError(f"{what} has a {longest}-byte component", f"use names of at most {NAME_MAX} bytes")


@dataclass(frozen=True)
class Phases:
    warmup: float = 0.0
    load: float | None = None  # None: until every replica exits
    idle: float = 0.0

    @property
    def total(self) -> float | None:
        return None if self.load is None else self.warmup + self.load + self.idle

    def at(self, elapsed: float) -> str:
        """Name of the phase `elapsed` seconds after the start."""
        if elapsed < self.warmup:
            return "warmup"
        if self.load is None or elapsed < self.warmup + self.load or not self.idle:
            return "load"  # no idle phase configured: the last tick still belongs to the load
        return "idle"


@dataclass(frozen=True)
class Group:
    name: str
    allocator: str  # "glibc", "bundled", a library path or a catalog id
    env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None  # another build of the program, instead of the default
    torrc: tuple[str, ...] = ()  # tor-network scenario: this group's own torrc options


@dataclass(frozen=True)
class Workload:
    name: str  # a built-in model (alloclab.run.workloads) or "trace"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScenarioSettings:
    """The [scenario] table: which built-in scenario (alloclab.run.scenarios; "tor-network" is
    alloclab.tor.network) and its settings. The scenario provides the replicas' command, their load and
    supporting processes the runner starts, owns and stops with the replicas."""

    name: str  # "tor-network"
    tor: str = "tor"  # the relays' (and authorities') tor binary
    authorities: int = 3
    voting_interval: float = 20.0  # seconds between consensuses (V3AuthVotingInterval)
    consensus_timeout: float = 240.0  # how long to wait for the first consensus
    torrc: tuple[str, ...] = ()  # options for every relay (a group's torrc comes after)
    load_rate: float = 4.0  # directory requests per second per relay, at most
    load_requests: int = 1_000_000  # per relay, at most
    routers: int = 0  # descriptor-only routers in the directory (tor_routers); 0: none
    router_churn: float = 0.1  # share of them publishing a new descriptor every voting interval
    variant: str = "dircache"  # "co-guard": the relays are voted Guard and default to DirCache 0
    traffic: float = 0.0  # KB a second per group through circuits of its relays (tor/traffic.py); 0: none
    num_cpus: int = (
        0  # tor's NumCPUs for every relay (its worker threads); 0: tor's own count (this machine's cores, at most 16)
    )


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
    smaps_budget: float = 0.02  # share of one core the full smaps_rollup tier may use
    verify_every: float = 30.0
    port_base: int = 20000
    max_duration: float | None = None
    introspect: bool = False  # preload the introspection helper after each group's allocator
    introspect_budget: float = 0.01  # share of one core each process's helper may spend
    scenario: ScenarioSettings | None = None
    source_text: str = ""  # the file as given, stored with the run
    base_dir: Path = Path(".")

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    def planned_duration(self, max_duration: float | None = None) -> float | None:
        """How long a run lasts unless its replicas all exit first: the phases, capped by
        `max_duration` (--max-duration) or else the file's own max_duration; None: until they exit."""
        limit = max_duration or self.max_duration
        planned = self.phases.total
        if limit is not None:
            planned = min(planned, limit) if planned is not None else limit
        return planned

    def placeholder_values(self, group: str, replica: int, port: int, workdir: Path | str) -> dict[str, str]:
        """What each of PLACEHOLDERS stands for in one replica's commands."""
        return {
            "replica": str(replica),
            "group": group,
            "port": str(port),
            "workdir": str(workdir),
            "seed": str(self.seed * 1000 + replica),
        }


def substitute(argv: tuple[str, ...] | list[str], values: dict[str, str]) -> list[str]:
    """A command with its placeholders filled in (parse_experiment allowed only PLACEHOLDERS as
    written, so format_map can neither fail nor reach an attribute or a format spec)."""
    return [a.format_map(values) if "{" in a else a for a in argv]


_TOP_KEYS = {
    "name",
    "command",
    "replicas",
    "interval",
    "baseline",
    "seed",
    "phases",
    "load",
    "group",
    "workload",
    "metric",
    "grace",
    "smaps_budget",
    "verify_every",
    "port_base",
    "max_duration",
    "introspect",
    "introspect_budget",
    "scenario",
}
_GROUP_KEYS = {"name", "allocator", "env", "command", "torrc"}
SCENARIOS = ("tor-network",)
_SCENARIO_KEYS = {
    "name",
    "tor",
    "authorities",
    "voting_interval",
    "consensus_timeout",
    "torrc",
    "load_rate",
    "load_requests",
    "routers",
    "router_churn",
    "variant",
    "traffic",
    "num_cpus",
}
SCENARIO_VARIANTS = ("dircache", "co-guard")
MAX_ROUTERS = 20_000
MAX_TRAFFIC_KB = 100_000
MAX_NUM_CPUS = 128  # tor's own ceiling for NumCPUs
TRAFFIC_MIN_RELAYS = 3  # a circuit's three hops, all relays of one group
MAX_TORRC_LINES = 64
MAX_TORRC_LINE = 1024
_TORRC_LINE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}(?:[ \t]+[^\x00-\x1f\x7f]*)?", re.ASCII)
# the scenario's own wiring: a user's line for one of these would take a relay off the test network
TORRC_RESERVED = (
    "DataDirectory",
    "ORPort",
    "DirPort",
    "DirAuthority",
    "AlternateDirAuthority",
    "TestingTorNetwork",
    "Nickname",
    "PidFile",
    "RunAsDaemon",
    "Address",
    "SocksPort",
    "ControlPort",
    "Log",
    "SyslogIdentityTag",
    "User",
    "Sandbox",
    "%include",
)
_PHASE_KEYS = {"warmup", "load", "idle"}
_KIND = {int: "an integer", float: "a number", str: "a string", dict: "a table", list: "a list"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)


def _where(path: str, key: Any) -> str:
    part = key if isinstance(key, str) and _BARE_KEY.fullmatch(key) else show(key, 40)
    return f"{path}.{part}" if path else str(part)


def _check_tree(data: dict, src: str) -> None:
    """Checks that hold anywhere in the file, before any key is read: nesting depth, finite numbers
    within 64 bits, no NUL in a string or key. Iterative, so depth itself cannot overflow it."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UserError(
                f"{src}: {path.split('.')[0].split('[')[0]} is nested more than {MAX_DEPTH} deep",
                "flatten it: experiment settings are a few tables of plain values",
            )
        if isinstance(node, dict):
            for key, value in node.items():
                if "\x00" in key:
                    raise UserError(f"{src}: the key {show(key)} contains a NUL byte", "remove the \\u0000 from it")
                stack.append((value, _where(path, key), depth + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise UserError(
                f"{src}: {path} = {node} is not a finite number", "give a finite value (nan and inf are refused)"
            )
        elif isinstance(node, int) and not isinstance(node, bool) and not -(2**63) <= node < 2**63:
            raise UserError(f"{src}: {path} = {show(node, 30)} does not fit in 64 bits", "give a smaller number")
        elif isinstance(node, str) and "\x00" in node:
            raise UserError(f"{src}: {path} contains a NUL byte", "remove the \\u0000 from the value")


def _check_keys(table: dict, known: set[str], where: str, src: str) -> None:
    for key in table:
        if key not in known:
            raise UserError(
                f"{src}: unknown key {show(key, 40)} in {where}",
                f"{did_you_mean(key, known)}use one of: {', '.join(sorted(known))}",
            )


def _placeholders(arg: str, what: str, src: str) -> int:
    """How many placeholders `arg` holds; each must be one of PLACEHOLDERS as written, so the
    runner's str.format_map can neither fail nor reach an attribute, an index or a format spec."""
    try:
        parts = list(string.Formatter().parse(arg))
    except ValueError:
        raise UserError(f"{src}: {what} argument {show(arg)} has an unmatched brace", _PLACEHOLDER_HELP) from None
    count = 0
    for _literal, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise UserError(f"{src}: {what} uses unknown placeholder {show(written, 40)[1:-1]}", _PLACEHOLDER_HELP)
        count += 1
    return count


def _argv(value: Any, what: str, src: str) -> tuple[str, ...]:
    if isinstance(value, str):
        hint = ", ".join(f'"{p}"' for p in value.split()[:4]) + (", ..." if len(value.split()) > 4 else "")
        raise UserError(
            f"{src}: {what} must be a list of arguments, not a string", show(f"write {what} = [{hint}]", 120)[1:-1]
        )
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise UserError(
            f"{src}: {what} must be a non-empty list of strings", 'write e.g. command = ["./app", "--flag"]'
        )
    if len(value) > MAX_ARGS:
        raise UserError(f"{src}: {what} has {len(value):,} arguments", f"use at most {MAX_ARGS}")
    if not value[0]:
        raise UserError(f"{src}: {what} starts with an empty program name", 'write e.g. command = ["./app", "--flag"]')
    check_path_text(value[0], f"{src}: {what} program")
    sizes = [len(a.encode()) for a in value]
    if max(sizes) > MAX_ARG_BYTES or sum(sizes) > MAX_COMMAND_BYTES:
        raise UserError(
            f"{src}: {what} is too long ({max(sizes):,} bytes in one argument, {sum(sizes):,} in all)",
            f"keep each argument under {MAX_ARG_BYTES // 1024} KiB and the command under {MAX_COMMAND_BYTES // 1024} KiB",
        )
    _placeholders(value[0], what, src)
    if "workdir" in (name for _, name, _, _ in string.Formatter().parse(value[0])):
        raise UserError(
            f"{src}: {what} runs a program inside {{workdir}}, which is empty when the run starts",
            "give the program's own path; pass {workdir} as an argument instead",
        )
    if sum(_placeholders(arg, what, src) for arg in value) > MAX_PLACEHOLDERS:
        raise UserError(
            f"{src}: {what} holds more than {MAX_PLACEHOLDERS} placeholders", "use each placeholder a few times at most"
        )
    return tuple(value)


def _typed(table: dict, key: str, kind: type | tuple, src: str, where: str, default: Any = None) -> Any:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = " or ".join(_KIND.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise UserError(
            f"{src}: {where}{key} must be {names}, not {type(value).__name__} {show(value, 40)}",
            f"fix the value of {key}",
        )
    return value


def _bounded_int(data: dict, key: str, low: int, high: int, default: int, src: str, fix: str) -> int:
    value = _typed(data, key, int, src, "", default=default)
    if not low <= value <= high:
        raise UserError(f"{src}: {key} = {value} is out of range", fix)
    return value


def _env(env: dict, gname: str, src: str) -> dict[str, str]:
    if len(env) > MAX_ENV_VARS:
        raise UserError(f"{src}: group {gname!r} sets {len(env)} environment variables", f"set at most {MAX_ENV_VARS}")
    out = {}
    for k, v in env.items():
        if not _ENV_KEY.fullmatch(k):
            raise UserError(
                f"{src}: group {gname!r} env key {show(k, 40)} is not a variable name",
                "use letters, digits and '_', not starting with a digit (no '=', spaces or dots)",
            )
        if k in RESERVED_ENV:
            fix = (
                'name the library with allocator = "..." instead'
                if k == "LD_PRELOAD"
                else "remove it: alloclab sets it per replica"
            )
            raise UserError(f"{src}: group {gname!r} sets {k} in env", fix)
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise UserError(
                f"{src}: group {gname!r} env {k} must be a string, not {type(v).__name__}",
                show(f'write {k} = "{v}"', 80)[1:-1],
            )
        out[k] = str(v)
        if len(out[k].encode()) > MAX_ENV_VALUE_BYTES:
            raise UserError(
                f"{src}: group {gname!r} env {k} is {len(out[k].encode()):,} bytes long",
                f"keep values under {MAX_ENV_VALUE_BYTES // 1024} KiB",
            )
    return out


def _torrc(value: Any, what: str, src: str) -> tuple[str, ...]:
    """torrc options as a list of lines, one option each: no newline or control character (no
    option can smuggle in another), no option the scenario wires itself."""
    if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(
            f"{src}: {what} must be a list of torrc lines", 'write e.g. torrc = ["DirCache 0", "MaxMemInQueues 64 MB"]'
        )
    if len(value) > MAX_TORRC_LINES:
        raise UserError(f"{src}: {what} has {len(value)} lines", f"give at most {MAX_TORRC_LINES}")
    for line in value:
        if len(line.encode()) > MAX_TORRC_LINE:
            raise UserError(f"{src}: {what} line {show(line)} is longer than {MAX_TORRC_LINE} bytes", "shorten it")
        if _CONTROL.sub("", line.replace("\t", " ")) != line.replace("\t", " "):
            raise UserError(
                f"{src}: {what} line {show(line)} contains a newline or control character",
                'give one option per list item, e.g. ["DirCache 0", "MaxMemInQueues 64 MB"]',
            )
        if line.rstrip().endswith("\\"):
            raise UserError(
                f"{src}: {what} line {show(line)} ends with a backslash, which joins the next torrc line to it",
                "remove the trailing backslash",
            )
        if not _TORRC_LINE.fullmatch(line.strip()):
            raise UserError(
                f"{src}: {what} line {show(line)} is not a torrc option",
                'write "OptionName value", e.g. "MaxMemInQueues 64 MB"',
            )
        option = line.split()[0]
        if option.lower() in (r.lower() for r in TORRC_RESERVED):
            raise UserError(
                f"{src}: {what} sets {option}, which the tor-network scenario sets itself",
                "remove it: alloclab wires addresses, ports, directories and logs of the test network",
            )
    return tuple(line.strip() for line in value)


def _scenario(table: Any, src: str) -> ScenarioSettings:
    if not isinstance(table, dict):
        raise UserError(f"{src}: scenario must be a table", '[scenario] name = "tor-network"')
    _check_keys(table, _SCENARIO_KEYS, "[scenario]", src)
    name = _typed(table, "name", str, src, "scenario.")
    if name not in SCENARIOS:
        raise UserError(f"{src}: scenario {show(name, 40)} is not known", f'use name = "{SCENARIOS[0]}"')
    tor = _typed(table, "tor", str, src, "scenario.", default="tor")
    if not tor:
        raise UserError(f"{src}: scenario.tor is empty", 'name a tor binary, e.g. tor = "/usr/sbin/tor"')
    check_path_text(tor, f"{src}: scenario.tor")
    authorities = _typed(table, "authorities", int, src, "scenario.", default=3)
    if not 1 <= authorities <= 9:
        raise UserError(
            f"{src}: scenario.authorities = {authorities} is out of range", "use 1 to 9 directory authorities"
        )
    voting = parse_duration(table.get("voting_interval", 20), f"{src}: scenario.voting_interval", 10, 86400)
    if voting != int(voting) or 86400 % int(voting):
        raise UserError(
            f"{src}: scenario.voting_interval = {show(table['voting_interval'])} does not divide a day "
            "into whole seconds",
            'use e.g. "10s", "20s", "30s", "1m" or "5m"',
        )
    timeout = parse_duration(table.get("consensus_timeout", 240), f"{src}: scenario.consensus_timeout", 10, 3600)
    rate = _typed(table, "load_rate", (int, float), src, "scenario.", default=4.0)
    if not 0 < rate <= 1000:
        raise UserError(
            f"{src}: scenario.load_rate = {rate} is out of range", "give 0.01 to 1000 requests per second per relay"
        )
    requests = _typed(table, "load_requests", int, src, "scenario.", default=1_000_000)
    if not 1 <= requests <= 10**9:
        raise UserError(
            f"{src}: scenario.load_requests = {requests} is out of range", "give 1 to 1e9 requests per relay"
        )
    routers = _typed(table, "routers", int, src, "scenario.", default=0)
    if not 0 <= routers <= MAX_ROUTERS:
        raise UserError(
            f"{src}: scenario.routers = {routers} is out of range",
            f"give 0 to {MAX_ROUTERS:,} routers (the public network lists about 7,000)",
        )
    churn = _typed(table, "router_churn", (int, float), src, "scenario.", default=0.1)
    if not 0 <= churn <= 1:
        raise UserError(
            f"{src}: scenario.router_churn = {churn} is out of range",
            "give the share of routers publishing anew each voting interval, 0 to 1",
        )
    variant = _typed(table, "variant", str, src, "scenario.", default="dircache")
    if variant not in SCENARIO_VARIANTS:
        raise UserError(
            f"{src}: scenario.variant = {show(variant, 40)} is not known",
            'use "dircache" (directory caches under load) or "co-guard" (guard relays with DirCache 0)',
        )
    traffic = _typed(table, "traffic", (int, float), src, "scenario.", default=0)
    if not (traffic == 0 or 1 <= traffic <= MAX_TRAFFIC_KB):
        raise UserError(
            f"{src}: scenario.traffic = {traffic} is out of range",
            f"give 0 (no circuits) or 1 to {MAX_TRAFFIC_KB:,} KB a second per group",
        )
    num_cpus = _typed(table, "num_cpus", int, src, "scenario.", default=0)
    if not 0 <= num_cpus <= MAX_NUM_CPUS:
        raise UserError(
            f"{src}: scenario.num_cpus = {num_cpus} is out of range",
            f"give 0 (tor counts this machine's cores, at most 16) to {MAX_NUM_CPUS} worker threads",
        )
    torrc = _torrc(table["torrc"], "scenario.torrc", src) if "torrc" in table else ()
    if num_cpus:  # before the scenario's own lines, so a torrc NumCPUs line still wins
        torrc = (f"NumCPUs {num_cpus}", *torrc)
    if variant == "co-guard":  # 1AEO's co-guard relays: DirCache 0 unless a group's torrc says otherwise
        torrc = ("DirCache 0", *torrc)
    return ScenarioSettings(
        name,
        tor,
        authorities,
        voting,
        timeout,
        torrc,
        float(rate),
        requests,
        routers,
        float(churn),
        variant,
        float(traffic),
        num_cpus,
    )


# Before parsing: tomllib's cost grows with the square of a dotted key's length (a 40 KB key
# `a.a.a...` takes ~6 s, 1 MiB would take an hour), so the depth limit is checked on the raw text
# first, in one linear pass: strings and comments are blanked, then no run of more than MAX_DEPTH
# dot-separated key parts may remain (outside strings only keys are dot-separated words).
_STRINGS_AND_COMMENTS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*+"|\'[^\'\n]*+\'|#[^\n]*+')
_KEY_PART = r'(?:(?<![A-Za-z0-9_-])[A-Za-z0-9_-]++|"")'
_DEEP_KEY = re.compile(_KEY_PART + r"(?:[ \t]*+\.[ \t]*+" + _KEY_PART + rf"){{{MAX_DEPTH}}}")


def _check_dotted_keys(text: str, source: str) -> None:
    deep = _DEEP_KEY.search(_STRINGS_AND_COMMENTS.sub('""', text))
    if deep:
        raise UserError(
            f"{source}: the dotted key {show(deep.group(), 40)}... is nested more than {MAX_DEPTH} deep",
            "flatten it: experiment settings are a few tables of plain values",
        )


def parse_experiment(
    text: str, source: str = "<experiment>", base_dir: Path = Path("."), fleet: bool = False
) -> Experiment:
    """`fleet`: the groups of a fleet experiment (alloclab fleet plan), whose services already run
    under systemd: no command is needed. The steps below read the file in the order its problems
    are named."""
    data = _toml_tree(text, source)
    name = _typed(data, "name", str, source, "", default=Path(source).stem or "experiment")
    if not _NAME.fullmatch(name):
        raise UserError(
            f"{source}: name {show(name, 40)} must be 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit",
            'write name = "..." (it names the run directory)',
        )
    command = _argv(data["command"], "command", source) if "command" in data else None
    workload = _workload(data, source, command)
    scenario = _scenario_alone(data, source)
    replicas = _bounded_int(data, "replicas", 1, MAX_REPLICAS, 1, source, f"use 1 to {MAX_REPLICAS} replicas per group")
    if scenario is not None and scenario.traffic and replicas < TRAFFIC_MIN_RELAYS:
        raise UserError(
            f"{source}: scenario.traffic needs at least {TRAFFIC_MIN_RELAYS} relays per group (replicas = {replicas}): "
            "a circuit's three hops are relays of one group",
            f"set replicas = {TRAFFIC_MIN_RELAYS} or more, or traffic = 0",
        )
    sampling = _sampling(data, source)
    phases = _phases(data, source)
    load_command = _load_command(data, source)
    groups = _groups(data, source, replicas, scenario)
    if (
        not fleet
        and command is None
        and workload is None
        and scenario is None
        and any(g.command is None for g in groups)
    ):
        raise UserError(f"{source}: no command to run", 'add command = ["./app", ...] or a [workload] table')
    baseline = _typed(data, "baseline", str, source, "", default=groups[0].name)
    if baseline not in {g.name for g in groups}:
        raise UserError(
            f"{source}: baseline {show(baseline, 40)} is not a group",
            f"use one of: {', '.join(g.name for g in groups)}",
        )
    return Experiment(
        name=name,
        command=command,
        groups=tuple(groups),
        replicas=replicas,
        baseline=baseline,
        phases=phases,
        load_command=load_command,
        workload=workload,
        scenario=scenario,
        source_text=text,
        base_dir=base_dir,
        **sampling,
    )


def _toml_tree(text: str, source: str) -> dict:
    """The file as a checked TOML tree: its size, dotted keys, syntax, depth and top-level keys."""
    if len(text) > MAX_FILE_BYTES:
        raise UserError(
            f"{source}: the file is larger than {MAX_FILE_BYTES // 1024} KiB", "an experiment file holds settings only"
        )
    _check_dotted_keys(text, source)
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{source}: not valid TOML ({exc})", "fix the syntax at that line") from None
    except RecursionError:
        raise UserError(
            f"{source}: a value is nested more than {MAX_DEPTH} deep",
            "flatten it: experiment settings are a few tables of plain values",
        ) from None
    _check_tree(data, source)
    _check_keys(data, _TOP_KEYS, "the top level", source)
    return data


def _workload(data: dict, source: str, command: list[str] | None) -> Workload | None:
    """[workload]: a built-in model by name, or a trace to replay; not together with command."""
    if "workload" not in data:
        return None
    wl = _typed(data, "workload", dict, source, "")
    if "name" not in wl and "trace" not in wl:
        raise UserError(
            f'{source}: [workload] needs name = "..." or trace = "file.trace"',
            "see `alloclab workloads` for the built-in models",
        )
    wl = dict(wl)
    wname = "trace" if "trace" in wl and "name" not in wl else _typed(wl, "name", str, source, "workload.")
    wl.pop("name", None)
    if "trace" in wl:
        _typed(wl, "trace", str, source, "workload.")
        check_path_text(wl["trace"], f"{source}: workload.trace")
    if command is not None:
        raise UserError(f"{source}: give either command or [workload], not both", "remove one of them")
    return Workload(wname, wl)


def _scenario_alone(data: dict, source: str) -> ScenarioSettings | None:
    """[scenario], which provides the command and the load itself: refused beside either."""
    scenario = _scenario(data["scenario"], source) if "scenario" in data else None
    if scenario is not None:
        for key, what in (("command", "command"), ("workload", "[workload]"), ("load", "[load]")):
            if key in data:
                raise UserError(
                    f"{source}: the {scenario.name} scenario provides the relays' command and load; remove {what}",
                    'name another tor binary with [scenario] tor = "..." or a group\'s command = ["/path/to/tor"]',
                )
    return scenario


def _sampling(data: dict, source: str) -> dict:
    """The run's sampling and limits, as Experiment's keyword arguments."""
    interval = parse_duration(data.get("interval", "1s"), f"{source}: interval", MIN_INTERVAL, MAX_INTERVAL)
    seed = _bounded_int(data, "seed", 0, MAX_SEED, 0, source, f"use a seed from 0 to {MAX_SEED}")
    metric = _typed(data, "metric", str, source, "", default="rss")
    if metric not in METRICS:
        raise UserError(f"{source}: metric = {show(metric, 40)} is not known", f"use one of: {', '.join(METRICS)}")
    grace = parse_duration(data.get("grace", "5s"), f"{source}: grace", maximum=MAX_GRACE)
    verify_every = parse_duration(data.get("verify_every", "30s"), f"{source}: verify_every", MIN_INTERVAL)
    budget = _typed(data, "smaps_budget", (int, float), source, "", default=0.02)
    if not 0 < budget <= 1:
        raise UserError(
            f"{source}: smaps_budget = {budget} must be a share of one core in (0, 1]", "e.g. smaps_budget = 0.02 (2%)"
        )
    introspect = _typed(data, "introspect", bool, source, "", default=False)
    introspect_budget = _typed(data, "introspect_budget", (int, float), source, "", default=0.01)
    if isinstance(introspect_budget, bool) or not 0 < introspect_budget <= 0.5:
        raise UserError(
            f"{source}: introspect_budget = {introspect_budget} must be a share of one core in (0, 0.5]",
            "e.g. introspect_budget = 0.01 (1%)",
        )
    port_base = _bounded_int(
        data, "port_base", 1024, 60000, 20000, source, "use a port between 1024 and 60000"
    )  # + 1,024 replicas < 65,536
    max_duration = parse_duration(data["max_duration"], f"{source}: max_duration") if "max_duration" in data else None
    return dict(
        interval=interval,
        seed=seed,
        metric=metric,
        grace=grace,
        verify_every=verify_every,
        smaps_budget=float(budget),
        introspect=introspect,
        introspect_budget=float(introspect_budget),
        port_base=port_base,
        max_duration=max_duration,
    )


def _phases(data: dict, source: str) -> Phases:
    """[phases]: warm-up, load and idle; idle needs a load phase, and all of them a bound."""
    phases_t = _typed(data, "phases", dict, source, "", default={})
    _check_keys(phases_t, _PHASE_KEYS, "[phases]", source)
    phases = Phases(
        warmup=parse_duration(phases_t["warmup"], f"{source}: phases.warmup") if "warmup" in phases_t else 0.0,
        load=parse_duration(phases_t["load"], f"{source}: phases.load") if "load" in phases_t else None,
        idle=parse_duration(phases_t["idle"], f"{source}: phases.idle") if "idle" in phases_t else 0.0,
    )
    if phases.idle and phases.load is None:
        raise UserError(f"{source}: phases.idle needs phases.load", "say how long the load phase lasts")
    if (phases.total or 0) > MAX_DURATION:
        raise UserError(
            f"{source}: the phases last {_span(phases.total)} in all, longer than the maximum of {_span(MAX_DURATION)}",
            "shorten them",
        )
    return phases


def _load_command(data: dict, source: str) -> list[str] | None:
    """[load] command: the load generator's argv."""
    if "load" not in data:
        return None
    load_t = _typed(data, "load", dict, source, "")
    _check_keys(load_t, {"command"}, "[load]", source)
    if "command" not in load_t:
        raise UserError(f"{source}: [load] needs command = [...]", "give the load generator's argv")
    return _argv(load_t["command"], "load.command", source)


def _groups(data: dict, source: str, replicas: int, scenario: ScenarioSettings | None) -> list[Group]:
    """The [[group]] tables: at least one, within the limits, each with its own name."""
    raw_groups = data.get("group")
    if not isinstance(raw_groups, list) or not raw_groups:
        raise UserError(
            f"{source}: no [[group]] tables", 'add at least one: [[group]] name = "glibc" allocator = "glibc"'
        )
    if len(raw_groups) > MAX_GROUPS:
        raise UserError(f"{source}: {len(raw_groups)} groups", f"compare at most {MAX_GROUPS} groups in one experiment")
    if len(raw_groups) * replicas > MAX_TOTAL_REPLICAS:
        raise UserError(
            f"{source}: {len(raw_groups)} groups x {replicas} replicas = {len(raw_groups) * replicas} processes",
            f"run at most {MAX_TOTAL_REPLICAS} replicas in all",
        )
    groups: list[Group] = []
    for i, g in enumerate(raw_groups, 1):
        groups.append(_group(g, i, source, scenario, {x.name for x in groups}))
    return groups


def _group(g, i: int, source: str, scenario: ScenarioSettings | None, taken: set[str]) -> Group:
    """One [[group]] table (the i-th); `taken`: the names of the groups before it."""
    if not isinstance(g, dict):
        raise UserError(f"{source}: group #{i} must be a table", "write it as [[group]]")
    where = f"[[group]] #{i}"
    _check_keys(g, _GROUP_KEYS, where, source)
    gname = _typed(g, "name", str, source, f"{where} ")
    if gname is None or not _NAME.fullmatch(gname):
        raise UserError(
            f"{source}: {where} needs a name of 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit",
            'write name = "..." (it names directories)',
        )
    if gname in taken:
        raise UserError(f"{source}: two groups are named {gname!r}", "give every group its own name")
    allocator = _typed(g, "allocator", str, source, f"group {gname}: ", default=None)
    if not allocator:
        raise UserError(
            f"{source}: group {gname!r} has no allocator",
            'add allocator = "glibc", a library path, a catalog id, or "bundled"',
        )
    check_path_text(allocator, f"{source}: group {gname!r} allocator")
    env = _env(_typed(g, "env", dict, source, f"group {gname}: ", default={}), gname, source)
    gcommand = _argv(g["command"], f"group {gname} command", source) if "command" in g else None
    if "torrc" in g and scenario is None:
        raise UserError(
            f"{source}: group {gname!r} sets torrc without a tor scenario", 'add [scenario] name = "tor-network"'
        )
    gtorrc = _torrc(g["torrc"], f"group {gname} torrc", source) if "torrc" in g else ()
    return Group(gname, allocator, env, gcommand, gtorrc)


def is_fleet_groups(exp: Experiment) -> bool:
    """A fleet groups file (read with fleet=True): nothing for alloclab to start (no command,
    [workload], [scenario] or [load], no group's command): its groups are for services already running
    under systemd (alloclab fleet plan, the Ansible collection)."""
    return (
        exp.command is None
        and exp.workload is None
        and exp.scenario is None
        and exp.load_command is None
        and all(g.command is None for g in exp.groups)
    )


def load_experiment(path: Path, fleet: bool = False) -> Experiment:
    """Read and parse an experiment file: a regular UTF-8 file of at most MAX_FILE_BYTES."""
    check_path_text(str(path), "the experiment file path")
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"experiment file {path} is not a regular file", "give the path of a .toml file")
        if info.st_size > MAX_FILE_BYTES:
            raise UserError(
                f"experiment file {path} is {info.st_size:,} bytes",
                f"an experiment file holds settings only (at most {MAX_FILE_BYTES // 1024} KiB)",
            )
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"experiment file {path} does not exist", "check the path") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"experiment file {path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot read experiment file {path}: {exc.strerror}", "check its permissions") from None
    return parse_experiment(text, str(path), path.resolve().parent, fleet)
