"""Builds alloclab's native programs (workload models, probe, trace tools) on first use.

One entry point: the Makefile in alloclab/native. The output lives in the user's cache under a
key made of the sources and the compiler version, so an edited source or a new gcc rebuilds, and a
file lock lets several alloclab processes ask at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from functools import cache
from pathlib import Path

from ..common import settings
from ..common.errors import UserError

SOURCE_DIR = Path(__file__).parent


def cache_root() -> Path:
    return settings.cache_root()


def _compiler_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        raise UserError(f"no working C compiler ({cc})", "install one: apt-get install gcc make libc6-dev") from None


@cache
def _output_dir(source: Path = SOURCE_DIR) -> Path:
    """This build's directory: keyed by the sources and the compiler, so either changing rebuilds.
    Another source directory (the tests' own programs, tests/native) is keyed by these sources too:
    its Makefile compiles some of them."""
    cc = settings.compiler()
    if shutil.which("make") is None:
        raise UserError("`make` is not installed", "install it: apt-get install make")
    h = hashlib.sha256(_compiler_version(cc).encode())
    for d in dict.fromkeys((SOURCE_DIR, source)):
        for f in sorted(d.iterdir()):
            if f.suffix in (".c", ".h") or f.name == "Makefile":
                h.update(f.name.encode() + b"\0" + f.read_bytes())
    return cache_root() / "native" / h.hexdigest()[:16]


def _make(goal: str, stamp_name: str, source: Path = SOURCE_DIR) -> Path:
    """`make GOAL` in `source` into the output directory once (a stamp says it is done; a file
    lock lets several processes ask at once)."""
    out = _output_dir(source)
    stamp = out / stamp_name
    if stamp.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            proc = subprocess.run(
                [
                    "make",
                    "-s",
                    "-C",
                    str(source),
                    f"OUT={out}",
                    f"CC={settings.compiler()}",
                    *([] if goal == "all" else [str(out / goal)]),
                ],
                capture_output=True,
                text=True,
            )
            (out / "build.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise UserError(
                    f"building alloclab's native programs failed: {last}",
                    f"see {out / 'build.log'}; install gcc, make and libc6-dev",
                )
            stamp.write_text("ok\n")
    return out


@cache
def build_dir(source: Path = SOURCE_DIR) -> Path:
    """Directory holding the built native programs (of `source`: alloclab's, or the tests' own);
    builds them if needed."""
    return _make("all", ".built", source)


def target(name: str) -> Path:
    """One native program, building only it if the whole set is not built yet: the fleet
    collector's reader needs a C compiler, not the workloads' zstd."""
    out = _output_dir()
    if not (out / ".built").exists():
        _make(name, f".built-{name}")
    return out / name


def program(name: str) -> Path:
    path = build_dir() / name
    if not path.exists():
        raise UserError(f"native program {name!r} was not built", f"see {build_dir() / 'build.log'}")
    return path
