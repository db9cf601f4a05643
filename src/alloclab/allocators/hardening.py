"""An allocator's heap hardening, measured: what it does with a double free and an invalid free,
and the hardening settings it reports, under a group's own environment.

Each check runs `hardening_probe MODE` (native/hardening_probe.c) in its own process under
LD_PRELOAD=library with the group's allocator settings; the outcome is read from the process
(killed by a signal or not), the allocator's own message on stderr, and the probe's JSON line:

    aborts      the allocator detected the misuse and stopped the process (glibc's tcache
                double-free check, mimalloc secure's "buffer overflow in heap block")
    reports     it printed an error and carried on (mimalloc secure: "double free detected")
    undetected  nothing said, and the same block was handed out twice (the heap is now corrupt)
    crashes     the process died of a signal other than SIGABRT (corruption noticed late)
    tolerated   nothing said, nothing visibly corrupted

Declared settings: mimalloc's secure level (MIMALLOC_VERBOSE output), jemalloc's opt.junk,
opt.zero and config.debug (mallctl), glibc's malloc.check, malloc.perturb and mem.tagging tunables
(the loader's own --list-tunables). Stored per group (groups.hardening_json) and per build
(provenance "hardening"), so a report can put "secure mode costs X% CPU" beside what it buys;
the one-line summary of a stored record is hardening_summary.summary.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from typing import Any

from ..common import settings
from ..common.signalname import how_ended
from ..native import build
from . import tunables

MODES = ("double-free", "invalid-free")
FIRST_MESSAGE = re.compile(
    r"^(free\(\)|double free|munmap_chunk|realloc\(\)|malloc\(\)|mimalloc: (error|warning)|<jemalloc>|"
    r"src/tcmalloc|Attempt to free invalid pointer|corrupted|tcache)",
    re.I,
)


TIMEOUT = 10  # seconds; a corrupted free list can loop forever


def _run(mode: str, library: str | None, env: dict[str, str]) -> subprocess.CompletedProcess | None:
    """The probe's process, or None when it did not finish in time (killed: nothing outlives us)."""
    run_env = {**settings.environment_without_preload(), **env}
    if library:
        run_env["LD_PRELOAD"] = library
    try:
        return subprocess.run(
            [str(build.program("hardening_probe")), mode], env=run_env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return None


def _outcome(proc: subprocess.CompletedProcess | None) -> tuple[str, str | None]:
    if proc is None:
        return "hangs", f"no exit within {TIMEOUT} s"
    said = next((ln.strip() for ln in proc.stderr.splitlines() if FIRST_MESSAGE.search(ln.strip())), None)
    if proc.returncode == -signal.SIGABRT or proc.returncode == 128 + signal.SIGABRT:
        return "aborts", said
    if proc.returncode < 0:
        return "crashes", said or how_ended(proc.returncode)
    if said:
        return "reports", said
    out: dict[str, Any] = next((json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")), {})
    if out.get("same_block_twice") or out.get("returned_interior"):
        return "undetected", None
    return "tolerated", None


def features(family: str | None, library: str | None, env: dict[str, str] | None = None) -> dict:
    """The hardening of one allocator under one environment (see the module docstring)."""
    owned = {k: v for k, v in (env or {}).items() if any(rx.match(k) for rx, _ in tunables.FAMILY_OF_KEY)}
    fam = family or "glibc"
    probe_env = dict(owned)
    if fam == "mimalloc":
        probe_env.setdefault("MIMALLOC_SHOW_ERRORS", "1")  # its messages are silent otherwise
    out: dict = {"family": fam}
    for mode in MODES:
        outcome, message = _outcome(_run(mode, library, probe_env))
        key = mode.replace("-", "_")
        out[key] = outcome
        if message:
            out[f"{key}_message"] = message[:200]
    if fam == "mimalloc":
        verbose = _run("info", library, {**owned, "MIMALLOC_VERBOSE": "1"})
        m = re.search(r"secure level: (\d+)", verbose.stderr if verbose else "")
        out["mimalloc_secure_level"] = int(m.group(1)) if m else None
    elif fam == "jemalloc":
        info = _run("info", library, owned)
        line = next((ln for ln in (info.stdout if info else "").splitlines() if ln.startswith("{")), "{}")
        out.update({k: v for k, v in json.loads(line).items() if k.startswith("jemalloc_")})
    effective = tunables.glibc_effective(owned) if fam == "glibc" else {}
    for name in ("glibc.malloc.check", "glibc.malloc.perturb", "glibc.mem.tagging"):
        if name in effective:
            out[name] = effective[name][0]
    return out
