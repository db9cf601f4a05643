"""The option values an allocator library reports about itself, so two versions (or settings) can
be compared option by option: "what changed" beside a bisect's first bad version.

Each family is asked in its own words, by running a trivial program (`true`) with the library
preloaded: mimalloc prints every option with MIMALLOC_VERBOSE=1 ("mimalloc: option 'purge_delay':
2500"; from 3.2 "option 'purge_delay': 2500"), jemalloc prints its opt.* values with
MALLOC_CONF=stats_print:true, and glibc's dynamic loader lists its tunables (`ld.so
--list-tunables`). Other families report nothing (an empty dict).
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess

from ..common import settings

# "mimalloc: option 'purge_delay': 10"; from 3.2 (printed by _mi_fprintf) without the "mimalloc: "
_MIMALLOC = re.compile(r"^(?:mimalloc: )?option '([a-z_]+)': (.*?)\s*$", re.M)
_JEMALLOC = re.compile(r"^  opt\.([a-z_0-9]+): (.*?)\s*$", re.M)
_GLIBC = re.compile(r"^(glibc\.malloc\.[a-z_]+): (.*?)\s*$", re.M)
TIMEOUT_S = 20.0


def _run(argv: list[str], env: dict[str, str]) -> str:
    try:
        proc = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace"
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def library_options(family: str | None, library: str | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """{option: value as the library prints it} under `env` (a group's tunables), or {}."""
    base = settings.environment_without_preload()
    base.update(env or {})
    true = shutil.which("true") or "/bin/true"
    if family == "mimalloc" and library:
        out = _run([true], {**base, "LD_PRELOAD": library, "MIMALLOC_VERBOSE": "1"})
        return {k: v for k, v in _MIMALLOC.findall(out) if k != "verbose"}
    if family == "jemalloc" and library:
        conf = ",".join(filter(None, [base.get("MALLOC_CONF", ""), "stats_print:true"]))
        out = _run([true], {**base, "LD_PRELOAD": library, "MALLOC_CONF": conf})
        # the first of each (stats_print appears twice); stats_print is ours, not a difference
        found: dict[str, str] = {}
        for k, v in _JEMALLOC.findall(out):
            found.setdefault(k, v)
        found.pop("stats_print", None)
        return found
    if family == "glibc":
        loaders = sorted(glob.glob("/lib64/ld-linux-*.so.*") + glob.glob("/lib/ld-linux*.so.*"))
        if loaders:
            return dict(_GLIBC.findall(_run([loaders[0], "--list-tunables"], base)))
    return {}


def differences(before: dict[str, str], after: dict[str, str]) -> list[dict[str, str | None]]:
    """Options whose value differs (or exist on one side only), by name."""
    return [
        {"option": k, "before": before.get(k), "after": after.get(k)}
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    ]
