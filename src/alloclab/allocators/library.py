"""What an allocator library is, whether it may be preloaded, and which allocator each process really runs.

An AllocatorSpec records a library (path, sha256, inode, the family and version the library reports
about itself through the probe); `resolution.resolve` makes one from a group's `allocator` string
(this module is below the catalog: it never imports it). Verification
reads /proc/PID/maps of a live process and decides whether that exact file (device + inode) is
mapped — never `ldd`, which only reads the binary's own dependencies and cannot see a preload.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from ..common import settings
from ..common.errors import UserError
from ..native import build
from . import embedded

# Names of allocator libraries we recognise when they are mapped where they were not asked for.
KNOWN_LIBRARY = re.compile(
    r"lib(jemalloc|mimalloc|tcmalloc(?:_minimal)?|snmalloc\w*|rpmalloc|hoard|scalloc|tbbmalloc)"
    r"[\w.+-]*\.so"
)


@dataclass(frozen=True)
class AllocatorSpec:
    kind: str  # "glibc" (nothing preloaded), "preload", or "bundled"
    request: str  # what the experiment file said
    path: str | None = None  # the preloaded library (resolved, real path)
    sha256: str | None = None
    dev: int | None = None
    inode: int | None = None
    family: str | None = None  # what the probe found: glibc, jemalloc, mimalloc, ...
    version: str | None = None  # what the library says about itself

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


def _owner_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _check_trusted(p: str, st: os.stat_result, what: str, subject: str, trusted: set[int]) -> None:
    """One step of the chain: owned by a trusted user; writable by nobody else (a sticky directory
    such as /tmp excepted: others may add entries there but not rename or replace ours)."""
    if st.st_uid not in trusted:
        raise UserError(
            f"{subject}: {what} {p} is owned by {_owner_name(st.st_uid)}, "
            f"not by root or the user running alloclab, so its owner could change what is loaded",
            f"chown root {p}, or copy the files to a directory owned by root",
        )
    # A link's own mode is always 0777 and means nothing; its owner (checked above) is what counts.
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not stat.S_ISLNK(st.st_mode)
    if writable and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = "world" if st.st_mode & stat.S_IWOTH else "group"
        raise UserError(
            f"{subject}: {what} {p} is group- or world-writable ({who}-writable, mode {stat.S_IMODE(st.st_mode):04o})",
            f"chmod go-w {p}, or copy the files somewhere only root can write",
        )


def check_preload_safe(path: Path | str) -> None:
    """Refuse a library that someone else could have changed: preloading it hands them the process.

    The rule (that of OpenSSH's StrictModes and sudo's checks, plus symlinks): the library, every
    directory looked up on the way to it (the ancestors of the path as given and, through every
    symbolic link, of each link's target), and every link itself are owned by root or by the user
    running alloclab; none of them is group- or world-writable, except a directory with the sticky
    bit (such as /tmp), whose other users cannot rename or replace an entry they do not own. The
    library itself is a regular file."""
    check_trusted_path(path, directory=False, subject=f"cannot preload {path}")


def check_trusted_path(path: Path | str, directory: bool, subject: str) -> None:
    """The preload rule (check_preload_safe) for any file or directory the loader or libc reads
    code or data from: a library, or a directory of LD_LIBRARY_PATH, GCONV_PATH... (loaderenv)."""
    given = str(path)
    trusted = {0, os.geteuid()}
    kind = "directory" if directory else "library"
    full = given if os.path.isabs(given) else os.path.join(os.getcwd(), given)
    pending = [c for c in full.split("/") if c and c != "."]  # ".." is resolved physically, below
    current, hops = "/", 0
    while True:
        try:
            _check_trusted(current, os.stat(current), "directory", subject, trusted)
        except FileNotFoundError:
            raise UserError(f"{subject}: {current} does not exist", f"give an existing {kind} path") from None
        if not pending:
            if directory:
                return
            raise UserError(f"{subject}: it resolves to the directory {current}", "give the path of the library file")
        name = pending.pop(0)
        if name == "..":
            current = os.path.dirname(current)
            continue
        nxt = os.path.join(current, name)
        try:
            st = os.lstat(nxt)
        except OSError as e:
            raise UserError(f"{subject}: {nxt}: {e.strerror}", f"give an existing, readable {kind} path") from None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise UserError(f"{subject}: too many symbolic links", f"give the {kind}'s real path")
            _check_trusted(nxt, st, "symbolic link", subject, trusted)
            target = os.readlink(nxt)
            pending = [c for c in target.split("/") if c and c != "."] + pending
            if target.startswith("/"):
                current = "/"
            continue
        if not pending and not directory:
            if not stat.S_ISREG(st.st_mode):
                raise UserError(f"{subject}: {nxt} is not a regular file", "give the library file itself")
            _check_trusted(nxt, st, "library", subject, trusted)
            return
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(f"{subject}: {nxt} is not a directory", f"check the {kind} path")
        current = nxt


def probe(library: str | None, env: dict[str, str] | None = None) -> dict:
    """Run the probe under LD_PRELOAD=library; return what malloc itself says it is."""
    run_env = settings.environment_without_preload()
    run_env.update(env or {})
    if library:
        run_env["LD_PRELOAD"] = library
    proc = subprocess.run([str(build.program("probe"))], env=run_env, capture_output=True, text=True, timeout=30)
    lines = [ln for ln in proc.stdout.split("\n") if ln.startswith("{")]  # JSON may hold U+2028: \n ends a line
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"the allocator {library or 'glibc'} does not load: {err}",
            "check that it is a shared library for this machine",
        )
    result = json.loads(lines[-1])
    result["stderr"] = proc.stderr
    return result


def version_key(version: str) -> tuple[int, ...]:
    """A dotted version's numbers, for ordering and comparing: "2.1.7a" -> (2, 1, 7); "" -> ()."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


def normalise_version(family: str | None, raw: str | None) -> str | None:
    """The library's own answer as a dotted version: mimalloc 209 -> 2.0.9, 3208 -> 3.2.8, 30600 -> 3.6.0;
    jemalloc "5.3.0-0-g54ea..." -> 5.3.0; gperftools "gperftools 2.10" -> 2.10."""
    if not raw:
        return raw
    if family == "mimalloc" and raw.isdigit():
        v = int(raw)  # three encodings over the years: 209, 3208, 30302
        if v >= 10000:
            return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        if v >= 1000:
            return f"{v // 1000}.{v // 100 % 10}.{v % 100}"
        return f"{v // 100}.{v // 10 % 10}.{v % 10}"
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", raw)
    return m.group(1) if m else raw


# ---- verification of live processes -------------------------------------------------------------


@dataclass(frozen=True)
class Mapping:
    path: str
    dev: int
    inode: int
    span: str = ""  # "start-end" of its first mapping: /proc/PID/map_files/<span> opens that very file


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
            seen.setdefault(key, Mapping(path, key[0], inode, parts[0]))
    return list(seen.values())


# How verify_detail begins when the process carries its own allocator (see docs/how-to/allocators.md).
EMBEDDED_PREFIX = "embedded allocator: "


LIBC_OR_LOADER = re.compile(r"/(libc|ld-linux[\w-]*|ld)[.-][\w.-]*so")


@dataclass(frozen=True)
class Verdict:
    verified: bool | None  # None: could not tell (bundled with nothing detected)
    detail: str  # plain words, shown in the report
    mapped_allocator: str | None  # basename of the allocator library mapped, or "embedded:<family>"
    embedded: tuple[str, ...] = ()  # families compiled into the executable or a loaded object

    @property
    def state(self) -> str:
        """verified | embedded | unverified | unknown. "embedded" is a kind of unverified (verified
        is False): the group's allocator does not serve (all of) the program's heap."""
        if self.embedded and self.verified is False:
            return "embedded"
        return {True: "verified", False: "unverified", None: "unknown"}[self.verified]


def _same_file(m: Mapping, spec: AllocatorSpec) -> bool:
    # Device numbers in maps can differ from stat() on overlay filesystems; the inode plus the
    # path is then the evidence.
    return m.inode == spec.inode and (m.dev == spec.dev or os.path.realpath(m.path) == spec.path)


def _embedded_in(pid: int, maps: list[Mapping], spec: AllocatorSpec) -> list[embedded.Embedded]:
    """Allocators compiled into the program or its objects, leaving out libc and the loader, the
    preloaded library, and allocator libraries already named by their file name."""

    def skip(m: Mapping) -> bool:
        return bool(
            LIBC_OR_LOADER.search(m.path)
            or KNOWN_LIBRARY.search(os.path.basename(m.path))
            or os.path.basename(m.path) == "liballoclab_introspect.so"  # alloclab's own helper
            or (spec.kind == "preload" and _same_file(m, spec))
        )

    return embedded.scan_process(pid, maps, skip)


def _embedded_verdict(found: list[embedded.Embedded], spec: AllocatorSpec, note: str = "") -> Verdict:
    if spec.kind == "preload":
        unreached = f"LD_PRELOAD of {spec.label} does not reach its allocations"
    else:
        unreached = "its allocations do not go through glibc malloc"
    parts = sorted({f"{e.where} embeds {e.what} (statically linked): {unreached}" for e in found})
    families = tuple(sorted({e.family for e in found}))
    return Verdict(False, EMBEDDED_PREFIX + "; ".join(parts) + note, f"embedded:{families[0]}", families)


def verify_process(pid: int, spec: AllocatorSpec) -> Verdict:
    maps = mapped_files(pid)
    others = sorted({os.path.basename(m.path) for m in maps if KNOWN_LIBRARY.search(os.path.basename(m.path))})
    has_libc = any(re.search(r"/libc[.-][\w.]*so", m.path) for m in maps)
    if spec.kind == "bundled":
        return _verify_bundled(pid, maps, others, spec)
    found = _embedded_in(pid, maps, spec)
    if spec.kind == "preload":
        mine = [m for m in maps if _same_file(m, spec)]
        if found:
            return _embedded_verdict(found, spec, "" if mine else "; and the preloaded library is not mapped")
        if mine:
            extra = [o for o in others if o != os.path.basename(spec.path)]
            note = f"; also mapped: {', '.join(extra)}" if extra else ""
            return Verdict(
                True, f"{os.path.basename(spec.path)} mapped (inode {spec.inode}){note}", os.path.basename(spec.path)
            )
        why = (
            "statically linked: LD_PRELOAD cannot reach it"
            if not has_libc
            else "the preloaded library is not mapped (setuid binary, cleared environment, or a wrapper that drops LD_PRELOAD)"
        )
        return Verdict(False, why, others[0] if others else None)
    if others:
        return Verdict(False, f"expected glibc malloc but {', '.join(others)} is mapped", others[0])
    if found:
        return _embedded_verdict(found, spec)
    return Verdict(
        True,
        "glibc malloc (no other allocator mapped)" if has_libc else "statically linked; no allocator library mapped",
        None,
    )


def _verify_bundled(pid: int, maps: list[Mapping], others: list[str], spec: AllocatorSpec) -> Verdict:
    if others:
        return Verdict(True, f"allocator library mapped: {', '.join(others)}", others[0])
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return Verdict(None, "could not read the executable to look for a bundled allocator", None)
    found = _embedded_in(pid, maps, spec)
    if found:
        where = sorted({f"{e.what} in {e.where}" for e in found})
        return Verdict(
            True,
            f"bundled allocator found: {', '.join(where)}",
            f"embedded:{found[0].family}",
            tuple(sorted({e.family for e in found})),
        )
    return Verdict(None, f"no allocator markers in {exe} or its libraries; could not verify", None)
