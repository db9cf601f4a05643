"""Provisioning: pinned allocator builds by catalog id, cached by content, with provenance.

The catalog (data/catalog.toml) names each pinned id's sources (`pinned`); registries publish
the others (alloclab.allocators.versions); `resolution` asks both. `build(entry)` fetches the first source
that works (Debian package from the machine's own mirror, Debian source, crate, PyPI wheel),
builds it with a named recipe, proves with the probe that the result is the allocator and version
the id promises (and secure, for +secure), and stores it under
<cache>/allocators/builds/<id>/<key>/ with provenance.json. The key is a hash of everything that
went in (download hashes, recipe, flags, compiler), so identical inputs share one entry. A file
lock per id makes concurrent builds of one id wait for each other instead of racing.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..common import settings
from ..common.errors import UserError, did_you_mean
from ..native import build as native_build
from . import hardening
from .library import check_preload_safe, normalise_version, probe, sha256_file

CATALOG_FILE = Path(__file__).parent.parent / "data" / "catalog.toml"
ID_RE = re.compile(r"^(?P<family>[a-z]+)@(?P<version>\d+(?:\.\d+)*)(?:\+(?P<variant>[a-z]+))?$")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Entry:
    id: str
    family: str
    version: str
    variant: str | None
    sources: tuple[dict, ...]
    notes: str = ""


@cache
def entries() -> dict[str, Entry]:
    data = tomllib.loads(CATALOG_FILE.read_text())
    out = {}
    for a in data["allocator"]:
        m = ID_RE.match(a["id"])
        assert m, a["id"]
        out[a["id"]] = Entry(a["id"], m["family"], m["version"], m["variant"], tuple(a["sources"]), a.get("notes", ""))
    return out


def families() -> set[str]:
    return {e.family for e in entries().values()} | {"glibc"}


def pinned(allocator_id: str) -> Entry | None:
    """The catalog's own entry of an id, None when the catalog does not pin it (the registries may
    still publish it: alloclab.allocators.versions.published_entry)."""
    return entries().get(allocator_id)


def unknown(allocator_id: str) -> UserError:
    """The error for an id that no provider knows: not an id, an unknown family, or a version the
    catalog lacks (with the ids it has)."""
    known = entries()
    m = ID_RE.match(allocator_id)
    if allocator_id == "glibc":  # `allocators list` shows it beside the ids
        return UserError(
            "glibc is the system's allocator, not a catalog build: there is nothing to build, show, verify, "
            "package or locate",
            'a group runs on it with allocator = "glibc"',
        )
    if not m and allocator_id in families():
        same = sorted(i for i in known if i.startswith(allocator_id + "@"))
        return UserError(
            f"{allocator_id!r} names a family, not one build",
            f"give family@version, e.g. {', '.join(same[:6]) or allocator_id + '@VERSION'} "
            f"(alloclab allocators versions {allocator_id})",
        )
    if not m:
        return UserError(
            f"{allocator_id!r} is not a catalog id",
            "write family@version[+variant], e.g. mimalloc@2.0.9 or jemalloc@5.3.0+... (alloclab allocators list)",
        )
    same = sorted(i for i in known if i.startswith(m["family"] + "@"))
    if not same:
        return UserError(
            f"unknown allocator family {m['family']!r}",
            f"{did_you_mean(m['family'], families())}use one of: {', '.join(sorted(families()))}",
        )
    return UserError(
        f"{allocator_id} is not in the catalog",
        f"{did_you_mean(allocator_id, same)}known {m['family']} ids: {', '.join(same)}",
    )


def short_version(allocator_id: str) -> UserError | None:
    """The error for a version written short (jemalloc@5.3 where the catalog pins 5.3.0): refused
    at once, from the catalog alone, before any registry is asked or anything is built. None for
    anything else (a full version, an id the catalog's versions do not extend)."""
    m = ID_RE.match(allocator_id)
    if not m or pinned(allocator_id) is not None:
        return None
    suffix = f"+{m['variant']}" if m["variant"] else ""
    longer = sorted(
        {e.version for e in entries().values() if e.family == m["family"] and e.version.startswith(m["version"] + ".")},
        key=lambda v: [int(p) for p in v.split(".")],
    )
    if not longer:
        return None
    padded = m["version"] + ".0" * (longer[0].count(".") - m["version"].count("."))
    best = padded if padded in longer else longer[0]
    return UserError(
        f"{allocator_id} is a short version: versions are written in full",
        f"did you mean {m['family']}@{best}{suffix}? (every {m['family']} {m['version']}.x: "
        f"alloclab allocators versions {m['family']})",
    )


# ---- cache --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    return native_build.cache_root() / "allocators"


def _safe(allocator_id: str) -> str:
    return allocator_id.replace("@", "-").replace("+", "-")


@dataclass
class Build:
    path: Path  # the library
    provenance: dict[str, Any]

    @property
    def dir(self) -> Path:
        return self.path.parent


def find_build(allocator_id: str) -> Build | None:
    """The newest complete build of an id in the cache, if any."""
    found = []
    for prov in glob.glob(str(cache_dir() / "builds" / _safe(allocator_id) / "*" / "provenance.json")):
        data = json.loads(Path(prov).read_text())
        found.append((data.get("built_at", 0), Build(Path(prov).parent / data["library"], data)))
    return max(found, key=lambda x: x[0])[1] if found else None


def _run(cmd: list[str], log: Path, cwd: Path | None = None, env: dict | None = None, what: str = "") -> str:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(
            cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        f.write(proc.stdout)
    if proc.returncode != 0:
        tail = " | ".join(proc.stdout.strip().splitlines()[-2:])[:300]
        raise SourceFailed(f"{what or cmd[0]} failed: {tail} (log: {log})", failure_status(proc.stdout))
    return proc.stdout


# What a source's failure means: the one distinction the tests and `allocators check` rely on.
GONE = "gone"  # the registry answered: this version (or file) is not there
UNREACHABLE = "unreachable"  # no answer: offline, a registry down, a timeout
FAILED = "failed"  # fetched, but it did not match its pin, or building or verifying it failed

# The clients' own words (apt, cargo, pip) for "no answer", checked before those for "not there":
# pip says "No matching distribution" both when its index lacks a version and when it was never reached.
_UNREACHABLE_SIGNS = (
    "Could not connect",
    "Could not resolve",
    "Temporary failure resolving",
    "Connection timed out",
    "Connection refused",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Read timed out",
    "ReadTimeoutError",
    "ConnectTimeout",
    "ProxyError",
    "Network is unreachable",
    "failed to download from",
    "spurious network error",
    "Connection failed",
    "Unable to connect",
    "Name or service not known",
    "Operation timed out",
    "SSLError",
)
_GONE_SIGNS = (
    "was not found",
    "Unable to locate package",
    "404  Not Found",
    "404 Not Found",
    "410  Gone",
    "failed to select a version",
    "No matching distribution found",
    "no matching package named",
    "is yanked",
    "Can not find version",
    "Unable to find a source package",
)


def failure_status(client_output: str) -> str:
    """GONE, UNREACHABLE or FAILED for a registry client's failed output."""
    if any(sign in client_output for sign in _UNREACHABLE_SIGNS):
        return UNREACHABLE
    if any(sign in client_output for sign in _GONE_SIGNS):
        return GONE
    return FAILED


class SourceFailed(Exception):
    """One source could not be fetched or built; the next one is tried. `status` says why: GONE,
    UNREACHABLE or FAILED."""

    def __init__(self, message: str, status: str = FAILED):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Attempt:
    """One source tried for an id, and what became of it."""

    source: str  # describe_source's words
    status: str  # GONE, UNREACHABLE or FAILED
    detail: str


class ProvisioningFailed(UserError):
    """No source of an id could provide it: every attempt, and (the resolver fills them in) the
    nearest versions that can be had. A test may skip on it only when every attempt was UNREACHABLE."""

    def __init__(self, allocator_id: str, attempts: list[Attempt], nearest: list[str] | None = None):
        self.allocator_id, self.attempts, self.nearest = allocator_id, list(attempts), list(nearest or [])
        tried = "; ".join(f"{a.source}: {a.status} ({a.detail})" for a in self.attempts) or "no source"
        if self.unreachable_only:
            fix = "no registry answered: check that this machine reaches its package registries, then retry"
        else:
            fix = "choose a version that can be had"
        if self.nearest:
            fix += f" (nearest that can be had: {', '.join(self.nearest)})"
        elif not self.unreachable_only:
            fix += f" (alloclab allocators versions {allocator_id.split('@')[0]})"
        super().__init__(f"could not provision {allocator_id}: {tried}", fix)

    @property
    def unreachable_only(self) -> bool:
        return bool(self.attempts) and all(a.status == UNREACHABLE for a in self.attempts)

    def with_nearest(self, nearest: list[str]) -> ProvisioningFailed:
        return ProvisioningFailed(self.allocator_id, self.attempts, nearest)


def describe_source(src: dict) -> str:
    """A source in a few words: where it is published, at which version."""
    kind = src["kind"]
    if kind == "crate":
        return f"crate {src['crate']} {src['version']}"
    if kind == "debian-binary":
        return f"debian {src['suite']} {src['package']} {src['version']}"
    if kind == "debian-source":
        return f"debian {src['suite']} source {src['package']} {src['version']}"
    if kind == "pypi-wheel":
        return f"wheel {src['package']} {src['version']}"
    if kind == "upstream-git":
        return f"upstream {src['project']} {src['tag']}"
    return str(kind)


# ---- Debian: a private APT configuration that reuses the machine's own mirror ---------------------


def system_mirror() -> tuple[str, str]:
    """(URI, keyring) of the machine's main Debian archive, from its own apt sources."""
    entries_found: list[tuple[str, str, list[str]]] = []
    for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in Path(f).read_text().split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith("#"):
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
            if "deb" in fields.get("types", "").split() and fields.get("uris"):
                entries_found.append(
                    (fields["uris"].split()[0], fields.get("signed-by", ""), fields.get("suites", "").split())
                )
    for f in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if os.path.exists(f):
            for line in Path(f).read_text().splitlines():
                m = re.match(r"^deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)", line)
                if m:
                    key = re.search(r"signed-by=(\S+)", m["opts"] or "")
                    entries_found.append((m["uri"], key.group(1) if key else "", [m["suite"]]))
    for uri, key, suites in entries_found:
        if "security" not in uri and not any("security" in s for s in suites) and "debian" in uri:
            return uri.rstrip("/"), key or "/usr/share/keyrings/debian-archive-keyring.gpg"
    raise UserError(
        "no Debian archive found in this machine's apt sources",
        "Debian-package sources need a Debian system with a configured mirror",
    )


def apt_env(
    suite: str, log: Path, max_age: float = 86400, must_answer: bool = False, lists: str = "apt"
) -> dict[str, str]:
    """APT_CONFIG for one suite (deb + deb-src), its lists updated when older than `max_age`
    seconds (a day; 0: now); the system's own apt configuration and sources are never touched.
    An update that gets no answer keeps the older lists, unless `must_answer` (then UNREACHABLE).
    `lists` names the directory of lists under the cache: `allocators check` keeps its own, so its
    refresh never swaps the lists under a build reading them."""
    uri, key = system_mirror()
    root = cache_dir() / lists / suite
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "status").touch()
    _write_if_changed(
        root / "sources.list",
        f"deb [signed-by={key}] {uri} {suite} main\ndeb-src [signed-by={key}] {uri} {suite} main\n",
    )
    _write_if_changed(
        root / "apt.conf",
        "\n".join(
            [
                f'Dir::Etc::SourceList "{root}/sources.list";',
                f'Dir::Etc::SourceParts "{root}/parts";',
                f'Dir::State::Lists "{root}/lists";',
                f'Dir::State::status "{root}/status";',
                f'Dir::Cache "{root}/cache";',
                'Acquire::Languages "none";',
                'APT::Sandbox::User "root";',
                "",
            ]
        ),
    )
    env = {"APT_CONFIG": str(root / "apt.conf")}
    stamp = root / "updated"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or time.time() - stamp.stat().st_mtime > max_age:
            try:
                said = _run(["apt-get", "update", "-qq"], log, env=env, what=f"apt-get update ({suite})")
                if "Some index files failed to download" in said:  # apt exits 0 on an archive it did not reach
                    raise SourceFailed(
                        f"apt-get update ({suite}) failed: "
                        f"{next(iter(said.strip().splitlines()), '')[:200]} (log: {log})",
                        failure_status(said),
                    )
            except SourceFailed as exc:
                if must_answer or not _has_lists(root):
                    raise SourceFailed(str(exc), UNREACHABLE) from None
            else:
                stamp.touch()
        if not _has_lists(root):  # apt may report a mirror it could not reach with warnings only
            raise SourceFailed(f"apt-get update ({suite}) got no package lists (log: {log})", UNREACHABLE)
    return env


def _write_if_changed(path: Path, text: str) -> None:
    """Replace a file whole, and only when its text changes: an apt client reading it at that moment
    (a thread or process asking about another package) sees the old file or the new, never an empty one."""
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _has_lists(apt_root: Path) -> bool:
    return any((apt_root / "lists").glob("*_Packages*"))


def fetch_debian_binary(src: dict, work: Path, log: Path) -> tuple[Path, dict]:
    env = apt_env(src["suite"], log)
    dl = work / "deb"
    dl.mkdir()
    _run(
        ["apt-get", "download", "-qq", f"{src['package']}={src['version']}"],
        log,
        cwd=dl,
        env=env,
        what=f"apt-get download {src['package']}={src['version']} ({src['suite']})",
    )
    deb = next(dl.glob("*.deb"))
    digest = sha256_file(deb)
    _check_pin(src, "sha256", digest, deb.name)
    _run(["dpkg-deb", "-x", str(deb), str(work / "root")], log, what="dpkg-deb -x")
    return work / "root", {
        "kind": "debian-binary",
        "suite": src["suite"],
        "package": src["package"],
        "package_version": src["version"],
        "file": deb.name,
        "sha256": digest,
    }


def fetch_debian_source(src: dict, work: Path, log: Path) -> tuple[Path, dict]:
    env = apt_env(src["suite"], log)
    dl = work / "src"
    dl.mkdir()
    _run(
        ["apt-get", "source", "--download-only", "-qq", f"{src['package']}={src['version']}"],
        log,
        cwd=dl,
        env=env,
        what=f"apt-get source {src['package']}={src['version']} ({src['suite']})",
    )
    dsc = next(dl.glob("*.dsc"))
    _run(["dpkg-source", "-x", str(dsc), str(work / "tree")], log, what="dpkg-source -x")
    files = {p.name: sha256_file(p) for p in sorted(dl.iterdir()) if p.is_file()}
    return work / "tree", {
        "kind": "debian-source",
        "suite": src["suite"],
        "package": src["package"],
        "package_version": src["version"],
        "files": files,
        "sha256": sha256_file(dsc),
    }


def fetch_crate(src: dict, work: Path, log: Path, copy: bool = True) -> tuple[Path, dict]:
    """Fetch one crate through cargo the ordinary way: a throw-away project pinned to =VERSION.
    copy=False returns cargo's own unpacked sources (read-only use) instead of a copy in work."""
    if shutil.which("cargo") is None:
        raise SourceFailed("cargo is not installed (needed for crate sources)")
    proj = work / "fetch"
    proj.mkdir()
    (proj / "lib.rs").write_text("")
    (proj / "Cargo.toml").write_text(
        f'[package]\nname = "alloclab-fetch"\nversion = "0.0.0"\nedition = "2021"\n[lib]\npath = "lib.rs"\n'
        f'[dependencies]\n{src["crate"]} = {{ version = "={src["version"]}", default-features = false }}\n'
    )
    _run(["cargo", "fetch", "--quiet"], log, cwd=proj, what=f"cargo fetch {src['crate']} {src['version']}")
    lock = tomllib.loads((proj / "Cargo.lock").read_text())
    pkg = next(p for p in lock["package"] if p["name"] == src["crate"])
    cargo_home = settings.cargo_home()
    matches = glob.glob(str(cargo_home / "registry" / "src" / "*" / f"{src['crate']}-{pkg['version']}"))
    if not matches:
        raise SourceFailed(f"cargo fetched {src['crate']} but its sources are not under {cargo_home}")
    crate_file = glob.glob(str(cargo_home / "registry" / "cache" / "*" / f"{src['crate']}-{pkg['version']}.crate"))
    if crate_file and sha256_file(Path(crate_file[0])) != pkg["checksum"]:
        raise SourceFailed(f"{src['crate']} {pkg['version']}: .crate does not match the registry checksum")
    _check_pin(src, "cksum", pkg["checksum"], f"{src['crate']} {pkg['version']}")
    tree = work / "tree"
    if copy:
        shutil.copytree(matches[0], tree)
    else:
        tree = Path(matches[0])
    return tree, {"kind": "crate", "crate": src["crate"], "crate_version": pkg["version"], "sha256": pkg["checksum"]}


def fetch_pypi_wheel(src: dict, work: Path, log: Path) -> tuple[Path, dict]:
    import sys

    dl = work / "wheel"
    requirement = work / "requirement.txt"  # pip itself refuses a file that does not match the pin
    requirement.write_text(
        f"{src['package']}=={src['version']}" + (f" --hash=sha256:{src['sha256']}" if src.get("sha256") else "") + "\n"
    )
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--retries",
            "2",
            "--timeout",
            "20",
            *(["--require-hashes"] if src.get("sha256") else []),
            "-d",
            str(dl),
            "-r",
            str(requirement),
        ],
        log,
        what=f"pip download {src['package']}=={src['version']}",
    )
    wheel = next(dl.glob("*.whl"))
    digest = sha256_file(wheel)
    _check_pin(src, "sha256", digest, wheel.name)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(work / "root")
    return work / "root", {
        "kind": "pypi-wheel",
        "package": src["package"],
        "package_version": src["version"],
        "file": wheel.name,
        "sha256": digest,
    }


def fetch_upstream_git(src: dict, work: Path, log: Path) -> tuple[Path, dict]:
    raise SourceFailed(
        f"upstream {src['project']} tag {src['tag']} needs a git host, which these machines cannot reach", UNREACHABLE
    )


def _check_pin(src: dict, key: str, actual: str, what: str) -> None:
    """A download that the catalog pins (a crate's cksum, a file's sha256) must match the pin."""
    pinned = src.get(key)
    if pinned and actual != pinned:
        raise SourceFailed(f"{what}: sha256 {actual[:16]}… is not the catalog's pin {pinned[:16]}…", FAILED)


FETCHERS = {
    "debian-binary": fetch_debian_binary,
    "debian-source": fetch_debian_source,
    "crate": fetch_crate,
    "pypi-wheel": fetch_pypi_wheel,
    "upstream-git": fetch_upstream_git,
}


# ---- recipes: source tree -> one preloadable shared library --------------------------------------


def _find_library(root: Path, pattern: str) -> Path:
    hits = sorted(p for p in root.rglob(pattern) if p.is_file() and not p.is_symlink())
    if not hits:
        raise SourceFailed(f"no file matching {pattern} in the download")
    return hits[0]


MIMALLOC_FLAGS = [
    "-O3",
    "-DNDEBUG",
    "-DMI_MALLOC_OVERRIDE",
    "-DMI_SHARED_LIB",
    "-DMI_SHARED_LIB_EXPORT",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-ftls-model=initial-exec",
    "-fno-builtin-malloc",
    "-std=gnu11",
]


def recipe_prebuilt(tree: Path, src: dict, out: Path, log: Path) -> tuple[Path, list[str]]:
    lib = _find_library(tree, src["library"])
    dest = out / lib.name
    shutil.copy2(lib, dest)
    return dest, []


def recipe_mimalloc_unity(tree: Path, src: dict, out: Path, log: Path) -> tuple[Path, list[str]]:
    """mimalloc's own single-translation-unit build (src/static.c), the flags of its CMake release build."""
    base = tree / src.get("subdir", "")
    flags = MIMALLOC_FLAGS + (["-DMI_SECURE=4"] if src.get("secure") else [])
    dest = out / ("libmimalloc-secure.so" if src.get("secure") else "libmimalloc.so")
    _run(
        ["gcc", *flags, f"-I{base / 'include'}", str(base / "src" / "static.c"), "-o", str(dest), "-lpthread"],
        log,
        what="gcc mimalloc src/static.c",
    )
    return dest, flags


def recipe_jemalloc_configure(tree: Path, src: dict, out: Path, log: Path) -> tuple[Path, list[str]]:
    base = tree / src.get("subdir", "")
    if src.get("configure_dir"):
        for f in ("configure", "VERSION"):
            if (tree / src["configure_dir"] / f).exists():
                shutil.copy2(tree / src["configure_dir"] / f, base / f)
    configure = base / "configure"
    if not configure.exists():
        raise SourceFailed("no pre-generated configure script in the jemalloc sources")
    configure.chmod(0o755)
    flags = ["--disable-cxx", "--disable-static", "--enable-shared"]
    if not (base / "VERSION").exists():
        flags.append(f"--with-version={src.get('version_string', '0.0.0-0-g0')}")
    _run([str(configure), *flags], log, cwd=base, env={"CFLAGS": "-O2 -g"}, what="jemalloc configure")
    _run(["make", f"-j{os.cpu_count() or 2}", "build_lib_shared"], log, cwd=base, what="jemalloc make")
    lib = _find_library(base / "lib", "libjemalloc.so.*")
    dest = out / "libjemalloc.so.2"
    shutil.copy2(lib, dest)
    return dest, flags


def recipe_rpmalloc_gcc(tree: Path, src: dict, out: Path, log: Path) -> tuple[Path, list[str]]:
    base = tree / src.get("subdir", "")
    flags = ["-O2", "-fPIC", "-shared", "-DENABLE_OVERRIDE=1", "-DENABLE_PRELOAD=1", "-DNDEBUG"]
    source = _find_library(base, "rpmalloc.c")
    dest = out / "librpmalloc.so"
    _run(["gcc", *flags, str(source), "-o", str(dest), "-lpthread"], log, what="gcc rpmalloc.c")
    return dest, flags


def recipe_snmalloc_cmake(tree: Path, src: dict, out: Path, log: Path) -> tuple[Path, list[str]]:
    base = tree / src.get("subdir", "")
    build = tree / "_build"
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DSNMALLOC_BUILD_TESTING=OFF", "-DSNMALLOC_HEADER_ONLY_LIBRARY=OFF"]
    _run(["cmake", "-S", str(base), "-B", str(build), *flags], log, what="snmalloc cmake")
    _run(
        ["cmake", "--build", str(build), "--target", "snmallocshim", "-j", str(os.cpu_count() or 2)],
        log,
        what="snmalloc build",
    )
    lib = _find_library(build, "libsnmallocshim.so")
    dest = out / "libsnmallocshim.so"
    shutil.copy2(lib, dest)
    return dest, flags


RECIPES = {
    "prebuilt": recipe_prebuilt,
    "mimalloc-unity": recipe_mimalloc_unity,
    "jemalloc-configure": recipe_jemalloc_configure,
    "rpmalloc-gcc": recipe_rpmalloc_gcc,
    "snmalloc-cmake": recipe_snmalloc_cmake,
}


# ---- build, verify, use ---------------------------------------------------------------------------


def _compiler() -> str:
    try:
        return subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def build(e: Entry, progress: Progress = lambda s: None, force: bool = False) -> Build:
    """Fetch, build and verify one entry (or return the cached build of its id)."""
    allocator_id = e.id
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{_safe(allocator_id)}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another build of this id")
            fcntl.flock(lock, fcntl.LOCK_EX)
        existing = find_build(allocator_id)
        if existing and not force:
            progress("cached")
            return existing
        attempts = []
        for src in e.sources:
            try:
                return _build_from(e, src, progress)
            except SourceFailed as exc:
                attempts.append(Attempt(describe_source(src), exc.status, str(exc)))
                progress(f"{describe_source(src)}: {exc.status}")
        raise ProvisioningFailed(allocator_id, attempts)


def _build_from(e: Entry, src: dict, progress: Progress) -> Build:
    builds = cache_dir() / "builds" / _safe(e.id)
    builds.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with tempfile.TemporaryDirectory(dir=builds, prefix=".tmp-") as tmp:
        work = Path(tmp)
        log = work / "build.log"
        out = work / "out"
        out.mkdir()
        progress(f"fetching ({src['kind']})")
        tree, origin = FETCHERS[src["kind"]](src, work, log)
        recipe = src.get("recipe", "prebuilt")
        progress(f"building ({recipe})")
        lib, flags = RECIPES[recipe](tree, src, out, log)
        progress("verifying")
        try:
            reported = verify_library(e, lib)
        except UserError as exc:  # e.g. a newer suite's binary needing a newer glibc: try the next source
            raise SourceFailed(exc.problem, FAILED) from None
        provenance = {
            "id": e.id,
            "family": e.family,
            "version": e.version,
            "variant": e.variant,
            "notes": e.notes,
            "source": origin,
            "source_index": e.sources.index(src),
            "recipe": recipe,
            "flags": flags,
            "compiler": _compiler() if recipe != "prebuilt" else None,
            "library": lib.name,
            "library_sha256": sha256_file(lib),
            "reported": reported,
            "hardening": hardening.features(e.family, str(lib)),
            "built_at": time.time(),
            "build_seconds": round(time.time() - started, 1),
        }
        key = hashlib.sha256(
            json.dumps([origin.get("sha256"), recipe, flags, provenance["compiler"]], sort_keys=True).encode()
        ).hexdigest()[:16]
        final = builds / key
        shutil.copy2(log, out / "build.log")
        (out / "provenance.json").write_text(json.dumps(provenance, indent=2, sort_keys=True))
        for p in out.iterdir():
            p.chmod(0o644)
        out.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        os.rename(out, final)
    return Build(final / lib.name, provenance)


def verify_library(e: Entry, lib: Path) -> dict:
    """Prove the library is what the id says: malloc resolves to it, its own version call
    answers the catalog version, and a +secure build reports a secure level above zero."""
    info = probe(str(lib), {"MIMALLOC_VERBOSE": "1"} if e.family == "mimalloc" else None)
    served = os.path.realpath(info.get("malloc_file") or "")
    if served != os.path.realpath(lib):
        raise SourceFailed(f"malloc resolves to {served}, not to the built library")
    if info.get("family") != e.family:
        raise SourceFailed(f"the library answers as {info.get('family')}, not {e.family}")
    version = normalise_version(e.family, info.get("version"))
    if version is not None and version != e.version:
        raise SourceFailed(f"the library reports version {version}, the catalog says {e.version}")
    if version is None and e.family in ("mimalloc", "jemalloc", "tcmalloc"):
        raise SourceFailed(f"{e.family} did not report its version")
    secure = None
    if e.family == "mimalloc":
        m = re.search(r"secure level: (\d+)", info.get("stderr", ""))
        secure = int(m.group(1)) if m else None
        if e.variant == "secure" and not secure:
            raise SourceFailed(f"built as +secure but reports secure level {secure}")
        if e.variant != "secure" and secure:
            raise SourceFailed(f"reports secure level {secure} but the id is not +secure")
    return {
        "family": info.get("family"),
        "version": version,
        "raw_version": info.get("version"),
        "secure_level": secure,
        "malloc_resolves_to": os.path.basename(served),
    }


def verify(e: Entry) -> dict:
    """Re-verify a cached build: bytes unchanged since the build, safe to preload, still answers right."""
    allocator_id = e.id
    b = find_build(allocator_id)
    if b is None:
        raise UserError(f"{allocator_id} is not built", f"run: alloclab allocators build {allocator_id}")
    check_integrity(b)
    try:
        return verify_library(e, b.path)
    except SourceFailed as exc:
        raise UserError(
            f"{allocator_id} failed verification: {exc}", "rebuild it: alloclab allocators build --force ID"
        ) from None


def check_integrity(b: Build) -> None:
    if not b.path.exists():
        raise UserError(f"the build of {b.provenance['id']} lost its library ({b.path})", "rebuild it with --force")
    check_preload_safe(b.path)
    actual = sha256_file(b.path)
    if actual != b.provenance["library_sha256"]:
        raise UserError(
            f"{b.path} changed after it was built (sha256 {actual[:12]}… ≠ {b.provenance['library_sha256'][:12]}…)",
            f"do not preload it; rebuild: alloclab allocators build --force {b.provenance['id']}",
        )
