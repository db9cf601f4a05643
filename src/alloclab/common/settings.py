"""Every environment variable alloclab itself reads, in one place (docs/reference/settings.md lists them).

Each is read when it is needed, not at import, so a test or a caller may set it in os.environ.
Variables alloclab *sets* for the processes it starts (ALLOCLAB_REPLICA, ALLOCLAB_STATS, ...) and
the knobs its native programs read are listed in docs/reference/settings.md too; they are not read here.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE = "ALLOCLAB_CACHE"  # where native programs and allocator builds are cached
CGROUPS = "ALLOCLAB_CGROUPS"  # "off": no per-replica cgroups (processes found by tree and identity)
COMPILER = "CC"  # the C compiler for alloclab's native programs
CARGO_HOME = "CARGO_HOME"  # where cargo keeps fetched crates (catalog crate sources)
XDG_CACHE_HOME = "XDG_CACHE_HOME"
PYTHONPATH = "PYTHONPATH"  # passed on to the watchdog, after alloclab's own source directory
DEBUG = "ALLOCLAB_DEBUG"  # on: an internal error shows its traceback instead of one line and a file

_OFF = ("off", "0", "no", "false")


def cache_root() -> Path:
    """$ALLOCLAB_CACHE, else $XDG_CACHE_HOME/alloclab, else ~/.cache/alloclab."""
    base = os.environ.get(CACHE) or os.path.join(
        os.environ.get(XDG_CACHE_HOME) or os.path.expanduser("~/.cache"), "alloclab"
    )
    return Path(base)


def compiler() -> str:
    return os.environ.get(COMPILER, "gcc")


def cargo_home() -> Path:
    return Path(os.environ.get(CARGO_HOME, os.path.expanduser("~/.cargo")))


def python_path() -> str:
    return os.environ.get(PYTHONPATH, "")


def cgroups_enabled() -> bool:
    """Per-replica cgroups unless ALLOCLAB_CGROUPS is off, 0, no or false (any case)."""
    return os.environ.get(CGROUPS, "").lower() not in _OFF


def debug() -> bool:
    """An internal error's traceback on the terminal (ALLOCLAB_DEBUG set, and not off, 0, no or false)."""
    return os.environ.get(DEBUG, "").lower() not in ("",) + _OFF


def environment_without_preload() -> dict[str, str]:
    """alloclab's own environment minus LD_PRELOAD: what every process it starts inherits, before
    the group's allocator (if any) is preloaded on purpose."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


PACKAGE_ROOT = "ALLOCLAB_PACKAGE_ROOT"  # where installed allocator packages are looked for (issue 13)


def package_root() -> Path:
    """The file-system root under which `alloclab allocators package` .debs are installed ("/")."""
    return Path(os.environ.get(PACKAGE_ROOT) or "/")
