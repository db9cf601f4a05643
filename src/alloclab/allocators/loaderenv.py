"""Environment variables that choose code or data for the dynamic loader and libc.

The preloaded library is checked by the preload rule (allocators.library.check_preload_safe: owned by root
or the user running alloclab, writable by no one else, every directory and link on the way too).
A replica or a service loads code through other variables as well: `LD_LIBRARY_PATH` picks where
libc itself comes from, `LD_AUDIT` loads auditing libraries, `GCONV_PATH` loads iconv modules,
`LOCPATH` feeds locale files to libc's parsers. So every variable glibc's ld.so and libc read
from the environment to load or read something, the list it drops for setuid programs
(glibc's `unsecvars.h`, "secure-execution mode", ld.so(8)), is held to the same rule here, or
refused:

- directory lists (`LD_LIBRARY_PATH`, `GCONV_PATH`, `LOCPATH`, ...): every entry an absolute,
  existing directory that passes the preload rule; no empty entry (the loader reads it as the
  current directory) and no `$ORIGIN`-style token (expanded by the loader);
- file lists (`LD_AUDIT`) and single files (`HOSTALIASES`, `RESOLV_HOST_CONF`): every entry a
  file that passes the preload rule;
- variables that make the loader or libc write files or profile code (`LD_DEBUG_OUTPUT`,
  `LD_PROFILE`, `MALLOC_TRACE`, ...), message catalogs (`NLSPATH`, templates) and every other
  `LD_` name: refused; a handful of `LD_` switches that load nothing (`LD_BIND_NOW`, ...) pass.

`check` is called for each group's environment by `alloclab check`, `run`, `fleet plan` (through
resolution.resolve) and again by `fleet apply` / `deploy` on the plan read back from disk.
docs/reference/security.md, "What is preloaded and why that is safe".
"""

from __future__ import annotations

import re

from ..common.errors import UserError
from .library import check_trusted_path

# name -> (kind, separators): "dirs" every entry a trusted directory; "files" every entry a trusted file
LOADED_FROM = {
    "LD_LIBRARY_PATH": ("dirs", ":;"),
    "GCONV_PATH": ("dirs", ":"),
    "LOCPATH": ("dirs", ":"),
    "TZDIR": ("dirs", ""),
    "GETCONF_DIR": ("dirs", ""),
    "LD_ORIGIN_PATH": ("dirs", ":"),
    "LD_AUDIT": ("files", ": "),
    "HOSTALIASES": ("files", ""),
    "RESOLV_HOST_CONF": ("files", ""),
}
# write files, profile code, or name templates; alloclab's experiments need none of them
REFUSED = {
    "LD_DEBUG_OUTPUT",
    "LD_PROFILE",
    "LD_PROFILE_OUTPUT",
    "MALLOC_TRACE",
    "NLSPATH",
    "NIS_PATH",
    "LD_TRACE_LOADED_OBJECTS",
    "LD_TRACE_PRELINKING",
    "LD_PREFER_MAP_32BIT_EXEC",
    "LD_PRELOAD",
}
# LD_ switches that load and write nothing
HARMLESS_LD = {
    "LD_BIND_NOW",
    "LD_BIND_NOT",
    "LD_DEBUG",
    "LD_WARN",
    "LD_VERBOSE",
    "LD_HWCAP_MASK",
    "LD_DYNAMIC_WEAK",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LD_POINTER_GUARD",
    "LD_ASSUME_KERNEL",
}
_TOKEN = re.compile(r"\$(\{?)(ORIGIN|LIB|PLATFORM)\b")


def affects_loading(name: str) -> bool:
    return name in LOADED_FROM or name in REFUSED or name.startswith("LD_")


def check(env: dict[str, str], where: str) -> None:
    """Refuse (one UserError) the first loader-affecting variable of `env` that breaks the rule."""
    for name, value in env.items():
        if not affects_loading(name) or name in HARMLESS_LD:
            continue
        subject = f"{where}: {name}"
        if name not in LOADED_FROM:
            raise UserError(
                f"{subject} changes what the dynamic loader or libc loads or writes, and alloclab does not carry it",
                f"remove {name} from env (alloclab passes only LD_ switches that load nothing, "
                "and checks LD_LIBRARY_PATH, LD_AUDIT, GCONV_PATH, LOCPATH... like the preloaded library)",
            )
        kind, seps = LOADED_FROM[name]
        entries = re.split(f"[{re.escape(seps)}]", value) if seps else [value]
        for entry in entries:
            if not entry:
                raise UserError(
                    f"{subject} has an empty entry, which the loader reads as the current directory",
                    f"remove the empty entry (a leading, trailing or doubled separator) from {name}",
                )
            if _TOKEN.search(entry) or "$" in entry:
                raise UserError(
                    f"{subject} entry {entry!r} holds a token the loader expands ($ORIGIN, $LIB, $PLATFORM)",
                    "give the absolute directory it stands for",
                )
            if not entry.startswith("/"):
                raise UserError(
                    f"{subject} entry {entry!r} is not an absolute path",
                    "give absolute paths (a relative one depends on the process's working directory)",
                )
            check_trusted_path(entry, directory=kind == "dirs", subject=f"cannot use {name} entry {entry} ({where})")
