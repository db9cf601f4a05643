"""Which allocator a group asks for, and which allocator each process really runs.

Resolution turns a group's `allocator` string into an AllocatorSpec (library path, sha256,
inode, the family and version the library reports about itself through the probe). Verification
reads /proc/PID/maps of a live process and decides whether that exact file (device + inode) is
mapped — never `ldd`, which only reads the binary's own dependencies and cannot see a preload.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, asdict
from pathlib import Path

from .errors import UserError
from . import native

# Names of allocator libraries we recognise when they are mapped where they were not asked for.
KNOWN_LIBRARY = re.compile(r"lib(jemalloc|mimalloc|tcmalloc(?:_minimal)?|snmalloc\w*|rpmalloc|hoard|scalloc|tbbmalloc)"
                           r"[\w.+-]*\.so")
# Byte markers of an allocator compiled into a binary (for allocator = "bundled").
BUNDLED_MARKERS = {
    "mimalloc": (b"mi_malloc", b"MIMALLOC_"),
    "jemalloc": (b"je_malloc", b"jemalloc"),
    "tcmalloc": (b"tcmalloc", b"TCMALLOC_"),
    "snmalloc": (b"snmalloc",),
    "rpmalloc": (b"rpmalloc",),
}


@dataclass(frozen=True)
class AllocatorSpec:
    kind: str                    # "glibc" (nothing preloaded), "preload", or "bundled"
    request: str                 # what the experiment file said
    path: str | None = None      # the preloaded library (resolved, real path)
    sha256: str | None = None
    dev: int | None = None
    inode: int | None = None
    family: str | None = None    # what the probe found: glibc, jemalloc, mimalloc, ...
    version: str | None = None   # what the library says about itself

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def label(self) -> str:
        if self.family and self.version:
            return f"{self.family} {self.version}"
        return self.family or self.request


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_preload_safe(path: Path) -> None:
    """Refuse a library that others could have changed: preloading it into a service hands them the service."""
    for p, what in ((path, "library"), (path.parent, "directory of the library")):
        st = p.stat()
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UserError(f"{what} {p} is group- or world-writable, so it is not safe to preload",
                            f"chmod go-w {p}, or copy the library somewhere only its owner can write")


def probe(library: str | None, env: dict[str, str] | None = None) -> dict:
    """Run the probe under LD_PRELOAD=library; return what malloc itself says it is."""
    run_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run_env.update(env or {})
    if library:
        run_env["LD_PRELOAD"] = library
    proc = subprocess.run([str(native.program("probe"))], env=run_env, capture_output=True, text=True, timeout=30)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"the allocator {library or 'glibc'} does not load: {err}",
                        "check that it is a shared library for this machine")
    result = json.loads(lines[-1])
    result["stderr"] = proc.stderr
    return result


def normalise_version(family: str | None, raw: str | None) -> str | None:
    """The library's own answer as a dotted version: mimalloc 209 -> 2.0.9, 3208 -> 3.2.8, 30600 -> 3.6.0;
    jemalloc "5.3.0-0-g54ea..." -> 5.3.0; gperftools "gperftools 2.10" -> 2.10."""
    if not raw:
        return raw
    if family == "mimalloc" and raw.isdigit():
        v = int(raw)   # three encodings over the years: 209, 3208, 30302
        if v >= 10000:
            return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        if v >= 1000:
            return f"{v // 1000}.{v // 100 % 10}.{v % 100}"
        return f"{v // 100}.{v // 10 % 10}.{v % 10}"
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", raw)
    return m.group(1) if m else raw


def resolve(request: str, base_dir: Path = Path("."), env: dict[str, str] | None = None) -> AllocatorSpec:
    """Turn a group's allocator string into a verified spec, or raise UserError."""
    if request == "bundled":
        return AllocatorSpec(kind="bundled", request=request)
    if request == "glibc":
        info = probe(None)
        return AllocatorSpec(kind="glibc", request=request, family="glibc", version=info.get("glibc"))
    if "/" not in request and "@" in request:
        from . import catalog  # provisioning: builds on demand, returns the verified cached library
        path = catalog.library_for(request, lambda step: print(f"alloclab: provisioning {request}: {step}",
                                                               file=sys.stderr, flush=True))
    else:
        path = (base_dir / request) if not os.path.isabs(request) else Path(request)
    path = Path(os.path.realpath(path))
    if not path.exists():
        raise UserError(f"allocator library {request} not found ({path})",
                        "give an existing .so path, \"glibc\", \"bundled\", or a catalog id (alloclab allocators list)")
    if not os.access(path, os.R_OK) or not path.is_file():
        raise UserError(f"allocator library {path} is not a readable file", "check the path and its permissions")
    check_preload_safe(path)
    info = probe(str(path), env)
    served = info.get("malloc_file")
    if not served or os.path.realpath(served) != str(path):
        raise UserError(f"{path} was preloaded but malloc still resolves to {served}",
                        "give a library that exports malloc (a real allocator build)")
    st = path.stat()
    return AllocatorSpec(kind="preload", request=request, path=str(path), sha256=sha256_file(path),
                         dev=st.st_dev, inode=st.st_ino, family=info.get("family"),
                         version=normalise_version(info.get("family"), info.get("version")))


# ---- verification of live processes -------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    path: str
    dev: int
    inode: int


def mapped_files(pid: int) -> list[Mapping]:
    """Distinct files mapped into a process, from /proc/PID/maps."""
    seen: dict[tuple[int, int, str], Mapping] = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            inode = int(parts[4])
            path = parts[5].rstrip("\n").removesuffix(" (deleted)")
            key = (os.makedev(major, minor), inode, path)
            seen.setdefault(key, Mapping(path, key[0], inode))
    return list(seen.values())


@dataclass(frozen=True)
class Verdict:
    verified: bool | None         # None: could not tell (bundled with nothing detected)
    detail: str                   # plain words, shown in the report
    mapped_allocator: str | None  # basename of the allocator library mapped, if any


def _same_file(m: Mapping, spec: AllocatorSpec) -> bool:
    # Device numbers in maps can differ from stat() on overlay filesystems; the inode plus the
    # path is then the evidence.
    return m.inode == spec.inode and (m.dev == spec.dev or os.path.realpath(m.path) == spec.path)


def verify_process(pid: int, spec: AllocatorSpec) -> Verdict:
    maps = mapped_files(pid)
    others = sorted({os.path.basename(m.path) for m in maps if KNOWN_LIBRARY.search(os.path.basename(m.path))})
    has_libc = any(re.search(r"/libc[.-][\w.]*so", m.path) for m in maps)
    if spec.kind == "preload":
        mine = [m for m in maps if _same_file(m, spec)]
        if mine:
            extra = [o for o in others if o != os.path.basename(spec.path)]
            note = f"; also mapped: {', '.join(extra)}" if extra else ""
            return Verdict(True, f"{os.path.basename(spec.path)} mapped (inode {spec.inode}){note}",
                           os.path.basename(spec.path))
        why = "statically linked: LD_PRELOAD cannot reach it" if not has_libc else \
              "the preloaded library is not mapped (setuid binary, cleared environment, or a wrapper that drops LD_PRELOAD)"
        return Verdict(False, why, others[0] if others else None)
    if spec.kind == "glibc":
        if others:
            return Verdict(False, f"expected glibc malloc but {', '.join(others)} is mapped", others[0])
        return Verdict(True, "glibc malloc (no other allocator mapped)" if has_libc else
                       "statically linked; no allocator library mapped", None)
    return _verify_bundled(pid, maps, others)


def _verify_bundled(pid: int, maps: list[Mapping], others: list[str]) -> Verdict:
    if others:
        return Verdict(True, f"allocator library mapped: {', '.join(others)}", others[0])
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/exe", "rb") as f:
            blob = f.read(64 << 20)
    except OSError:
        return Verdict(None, "could not read the executable to look for a bundled allocator", None)
    found = [fam for fam, marks in BUNDLED_MARKERS.items() if any(mk in blob for mk in marks)]
    if found:
        return Verdict(True, f"{'/'.join(found)} markers found in {os.path.basename(exe)}", found[0])
    return Verdict(None, f"no allocator markers in {os.path.basename(exe)}; could not verify", None)
