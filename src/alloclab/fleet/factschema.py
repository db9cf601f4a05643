"""The schema of `alloclab fleet facts --json`, checked in full before a plan is made from it.

Facts come from other hosts (or anything that claims to be one), so nothing in them is trusted:
every field the plan uses is present with its type and range (a memory figure is a whole number
of kB, an uptime a finite number of seconds, main_pid a pid or null, the sandbox's fields what
unitaccess.Sandbox.as_dict writes), a unit appears once per host (listed twice, it was planned
into two groups with its memory counted in both), and nesting deeper than the format's own is
refused (issue 46). Each refusal is one line naming the file, the host, the unit and the field.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable

from ..common.errors import UserError
from . import unitfile

KIND = "alloclab-fleet-facts"
MAX_UNITS = 100_000  # per host
MAX_DEPTH = 8  # list of hosts > host > units > unit > sandbox > list > string: 7
MAX_KB = 1 << 50  # 1 EiB in kB: past any machine
MAX_PID = 1 << 22  # the kernel's pid_max limit
PROTECT_HOME = ("no", "yes", "read-only", "tmpfs")
PROTECT_SYSTEM = ("no", "yes", "full", "strict")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
FIX = "gather it on each host with: alloclab fleet facts --units GLOB --host NAME --json"


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse(text: str, where: str):
    """JSON without NaN/Infinity, nested at most MAX_DEPTH deep."""
    # before parsing: the parser recurses (100,000 deep overflows); strings blanked, then the
    # brackets' running depth
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text))
    if brackets and max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets)) > MAX_DEPTH:
        raise UserError(
            f"{where} is nested more than {MAX_DEPTH} deep: not the output of alloclab fleet facts --json", FIX
        )
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        raise UserError(
            f"{where} is not JSON (or holds NaN/Infinity): not the output of alloclab fleet facts --json", FIX
        ) from None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field(ok: bool, where: str, what: str, expected: str) -> None:
    if not ok:
        raise UserError(f"{where}: {what} must be {expected}", FIX)


def check_unit(u, where: str, validate_unit: Callable[[str], str]) -> None:
    _field(isinstance(u, dict), where, "each unit", "an object")
    name = u.get("unit")
    _field(isinstance(name, str), where, "unit", "a systemd service name")
    validate_unit(name)
    _field(name.endswith(".service"), where, f"unit {name!r}", "a full service name (NAME.service)")
    here = f"{where}: unit {name}"
    m, up, pid = u.get("memory_kb"), u.get("uptime_s"), u.get("main_pid", KeyError)
    _field(_is_int(m) and 0 <= m <= MAX_KB, here, "memory_kb", f"a whole number of kB from 0 to {MAX_KB}")
    _field(
        (_is_int(up) or isinstance(up, float)) and math.isfinite(up) and up >= 0,
        here,
        "uptime_s",
        "a finite number of seconds >= 0",
    )
    _field(pid is None or (_is_int(pid) and 0 <= pid <= MAX_PID), here, "main_pid", "a process id or null")
    sb = u.get("sandbox")
    _field(isinstance(sb, dict), here, "sandbox", "an object")
    for key, ok, expected in (
        ("user", lambda v: isinstance(v, str), "a user name"),
        ("root_directory", lambda v: isinstance(v, str), "a path"),
        ("protect_home", lambda v: v in PROTECT_HOME, " or ".join(PROTECT_HOME)),
        ("protect_system", lambda v: v in PROTECT_SYSTEM, " or ".join(PROTECT_SYSTEM)),
        ("private_tmp", lambda v: isinstance(v, bool), "true or false"),
        ("dynamic_user", lambda v: isinstance(v, bool), "true or false"),
        ("inaccessible", lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v), "a list of paths"),
        ("temporary", lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v), "a list of paths"),
    ):
        if key in sb:
            _field(ok(sb[key]), here, f"sandbox.{key}", expected)


def check_host_facts(facts, where: str, validate_unit: Callable[[str], str]) -> None:
    """One host's facts, as `fleet facts --json` writes them; `validate_unit`: systemd's name rules
    (systemd.validate_unit)."""
    if not isinstance(facts, dict) or facts.get("kind") != KIND or not isinstance(facts.get("units"), list):
        raise UserError(f"{where} is not the output of alloclab fleet facts --json", FIX)
    _field(facts.get("version") == 1, where, "version", "1 (made by this alloclab's fleet facts)")
    _field(isinstance(facts.get("host"), str), where, "host", "a host name")
    unitfile.check_value(facts["host"], f"{where}: host")
    where = f"{where}: host {facts['host']}"
    for key in ("pattern", "root"):
        _field(isinstance(facts.get(key), str), where, key, "a string")
    if "collected" in facts:
        c = facts["collected"]
        _field((_is_int(c) or isinstance(c, float)) and math.isfinite(c), where, "collected", "a time (Unix seconds)")
    units = facts["units"]
    _field(len(units) <= MAX_UNITS, where, "units", f"at most {MAX_UNITS} units")
    seen: set[str] = set()
    for u in units:
        check_unit(u, where, validate_unit)
        if u["unit"] in seen:
            raise UserError(
                f"{where}: unit {u['unit']} is listed twice (it would be planned into two groups)",
                f"{FIX}, or remove the duplicate",
            )
        seen.add(u["unit"])
