"""Every allocator version the reachable registries publish, as buildable catalog entries.

The catalog (data/catalog.toml) pins a few ids; this module adds every other version a registry
publishes: the crates that bundle an allocator's C sources (libmimalloc-sys, libmimalloc-sys2,
tikv-jemalloc-sys, jemalloc-sys, snmalloc-sys, rpmalloc-sys) and Debian's binary and source
packages in the suites the catalog already uses. Each package version is mapped to the upstream
allocator version it bundles (mimalloc: MI_MALLOC_VERSION in the bundled mimalloc.h; jemalloc:
the crate's build metadata or the bundled VERSION file; Debian: the upstream part of the package
version), and the build of an id proves that mapping: `catalog.verify_library` refuses a library
whose own version call answers anything else.

Registries are reached only through their ordinary clients: cargo (`cargo info` refreshes the
crate's entry in cargo's own index cache, which is then read; `cargo fetch` downloads sources) and
apt (`apt-cache madison` over the private APT configuration the catalog already uses; a Debian
source is offered only while its .dsc, at the URI `apt-get source --print-uris` names, answers a
HEAD request: an archive keeps a removed source in its index for a while). Listings
are cached for a day under <cache>/allocators/versions/; what a published crate version bundles
never changes and is cached for good.

API for other modules (bisect, sweep):
    available_versions(family) -> list[VersionInfo]   ascending by version
    between(family, low, high) -> list[VersionInfo]   buildable versions low..high, both included
    newer_than(family, version) -> list[VersionInfo]  released after a pinned version
    published_entry(allocator_id) -> catalog.Entry    a published id's entry (None: not a family served here)
The lookup of an id asks this module as one of its providers (alloclab.allocators.resolution).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..common import settings
from ..common.errors import UserError, did_you_mean
from . import catalog
from .library import version_key

LISTING_MAX_AGE = 86400  # a registry listing is refreshed at most once a day
RECHECK_AFTER = 600  # ...but one whose source files could not be checked, after 10 minutes
FILE_CHECK_TIMEOUT = 5.0  # seconds for one HEAD request on a source's .dsc

# Crates that ship an allocator's C sources, per family.
CRATES = {
    "mimalloc": ("libmimalloc-sys", "libmimalloc-sys2"),
    "jemalloc": ("tikv-jemalloc-sys", "jemalloc-sys"),
    "snmalloc": ("snmalloc-sys",),
    "rpmalloc": ("rpmalloc-sys",),
}
# Debian binary packages per family: (package, the library inside it).
DEBIAN_BINARIES = {
    "mimalloc": (("libmimalloc2.0", "libmimalloc.so.2*"), ("libmimalloc3", "libmimalloc.so.3*")),
    "jemalloc": (("libjemalloc2", "libjemalloc.so.2"),),
    "tcmalloc": (
        ("libtcmalloc-minimal4", "libtcmalloc_minimal.so.4*"),
        ("libtcmalloc-minimal4t64", "libtcmalloc_minimal.so.4*"),
    ),
}
# Debian source packages that alloclab can build itself (for the +secure variant).
DEBIAN_SOURCES = {"mimalloc": "mimalloc"}
SECURE_FAMILIES = {"mimalloc"}  # families with a hardened build of their own (MI_SECURE)
FAMILIES = sorted(set(CRATES) | set(DEBIAN_BINARIES) | {"glibc"})

VERSION_RE = re.compile(r"^\d+(?:\.\d+)*$")


@dataclass(frozen=True)
class VersionInfo:
    """One upstream version of a family that can be had, and from where."""

    family: str
    version: str  # the upstream allocator version the packages bundle
    sources: tuple[dict, ...]  # catalog-style sources, preferred first
    secure_sources: tuple[dict, ...] = ()  # sources for the +secure variant (empty: none buildable)
    published_as: tuple[str, ...] = ()  # "crate libmimalloc-sys 0.1.39", "debian trixie libmimalloc3 3.0.1+ds-2.1"
    in_catalog: bool = False
    not_usable: tuple[str, ...] = ()  # published but not usable here, and why (e.g. needs a newer glibc)

    @property
    def buildable(self) -> bool:
        return bool(self.sources)

    @property
    def id(self) -> str:
        return f"{self.family}@{self.version}"

    @property
    def ids(self) -> list[str]:
        return ([self.id] if self.sources else []) + ([self.id + "+secure"] if self.secure_sources else [])

    def to_dict(self) -> dict:
        return {**asdict(self), "id": self.id, "ids": self.ids, "buildable": self.buildable}


# ---- cache of listings ------------------------------------------------------------------------------


def _dir() -> Path:
    d = catalog.cache_dir() / "versions"
    d.mkdir(parents=True, exist_ok=True)
    return d


def registry_log() -> Path:
    return _dir() / "registry.log"


def _fresh(path: Path, max_age: float = LISTING_MAX_AGE) -> bool:
    return path.exists() and time.time() - path.stat().st_mtime < max_age


# ---- crates: cargo's own index cache ------------------------------------------------------------------


def _index_prefix(name: str) -> str:
    n = name.lower()
    if len(n) <= 2:
        return str(len(n))
    if len(n) == 3:
        return f"3/{n[0]}"
    return f"{n[:2]}/{n[2:4]}"


def _index_cache_file(crate: str) -> Path | None:
    hits = glob.glob(
        str(settings.cargo_home() / "registry" / "index" / "*" / ".cache" / _index_prefix(crate) / crate.lower())
    )
    return Path(max(hits, key=os.path.getmtime)) if hits else None


def crate_versions(crate: str, refresh: bool = False, must_answer: bool = False) -> list[dict]:
    """Every published version of a crate: [{"vers", "yanked", "cksum", "links"}], from cargo's
    index cache, refreshed through `cargo info` (cargo's own registry access) when stale.
    must_answer: a refresh that gets no answer raises instead of reading the older cache."""
    stamp = _dir() / f"index-{crate}.stamp"
    if refresh or not _fresh(stamp) or _index_cache_file(crate) is None:
        if shutil.which("cargo") is None:
            raise catalog.SourceFailed("cargo is not installed (needed to list crate versions)")
        with tempfile.TemporaryDirectory() as tmp:  # outside any project, so cargo asks the registry
            proc = subprocess.run(
                ["cargo", "info", "--quiet", crate], cwd=tmp, capture_output=True, text=True, timeout=300
            )
        with open(registry_log(), "a") as f:
            f.write(f"$ cargo info {crate}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            if must_answer or _index_cache_file(crate) is None:
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise catalog.SourceFailed(f"cargo info {crate} failed: {last}", catalog.failure_status(proc.stderr))
        else:
            stamp.touch()
    path = _index_cache_file(crate)
    if path is None:
        raise catalog.SourceFailed(f"cargo did not record an index entry for {crate}")
    out = []
    # cargo's index cache: a small header, then NUL-separated (version, JSON line) pairs
    for part in path.read_bytes().split(b"\0"):
        if part.startswith(b"{"):
            try:
                v = json.loads(part)
            except ValueError:
                continue
            out.append(
                {"vers": v["vers"], "yanked": bool(v.get("yanked")), "cksum": v.get("cksum"), "links": v.get("links")}
            )
    return out


def crate_source_dir(crate: str, version: str) -> Path:
    """The unpacked sources of one crate version, fetched with cargo (checksum checked by cargo)."""
    hits = glob.glob(str(settings.cargo_home() / "registry" / "src" / "*" / f"{crate}-{version}"))
    if hits:
        return Path(hits[0])
    with tempfile.TemporaryDirectory() as tmp:
        tree, _ = catalog.fetch_crate({"crate": crate, "version": version}, Path(tmp), registry_log(), copy=False)
    return tree


def _bundled(crate: str, version: str) -> list[dict]:
    """What one crate version bundles: [{"version", "subdir", ...recipe fields}], cached for good
    (a published crate version never changes)."""
    cache_file = _dir() / f"crate-{crate}.json"
    known = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    if version in known:
        return known[version]
    found = _scan_crate(crate, version)
    known = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    known[version] = found
    tmp = cache_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    os.replace(tmp, cache_file)
    return found


MI_VERSION_RE = re.compile(rb"#define\s+MI_MALLOC_VERSION\s+(\d+)")


def _scan_crate(crate: str, version: str) -> list[dict]:
    from .library import normalise_version

    meta = version.split("+", 1)[1] if "+" in version else ""
    if crate in CRATES["jemalloc"]:
        # the crate's build script passes its build metadata to configure as --with-version
        m = re.match(r"^(\d+\.\d+\.\d+)-0-g[0-9a-f]+$", meta) or re.match(r"^(\d+\.\d+\.\d+)$", meta)
        if meta and not m:
            return []  # "5.3.0-patched", "5.3.0-1-g...": not an upstream release
        if m:
            vs = meta if "-g" in meta else f"{meta}-0-g0000000000000000000000000000000000000000"
            return [
                {
                    "version": m.group(1),
                    "subdir": "jemalloc",
                    "configure_dir": "configure",
                    "version_string": vs,
                    "recipe": "jemalloc-configure",
                }
            ]
        tree = crate_source_dir(crate, version)
        for vf in ("configure/VERSION", "jemalloc/VERSION"):
            if (tree / vf).exists():
                mv = re.match(r"^(\d+\.\d+\.\d+)-0-g", (tree / vf).read_text().strip())
                if mv and (tree / "jemalloc").is_dir():
                    return [
                        {
                            "version": mv.group(1),
                            "subdir": "jemalloc",
                            "configure_dir": "configure",
                            "recipe": "jemalloc-configure",
                        }
                    ]
        return []
    if crate in CRATES["mimalloc"]:
        tree = crate_source_dir(crate, version)
        out = []
        for header in sorted(tree.rglob("include/mimalloc.h")):
            base = header.parent.parent
            m = MI_VERSION_RE.search(header.read_bytes())
            if m and (base / "src" / "static.c").exists():
                out.append(
                    {
                        "version": normalise_version("mimalloc", m.group(1).decode()),
                        "subdir": str(base.relative_to(tree)),
                        "recipe": "mimalloc-unity",
                    }
                )
        return out
    if crate == "snmalloc-sys":
        tree = crate_source_dir(crate, version)
        if (tree / "upstream" / "CMakeLists.txt").exists():
            return [{"version": version.split("+")[0], "subdir": "upstream", "recipe": "snmalloc-cmake"}]
        return []
    if crate == "rpmalloc-sys":
        if VERSION_RE.match(meta):
            return [{"version": meta, "subdir": "rpmalloc", "recipe": "rpmalloc-gcc"}]
        return []
    return []


def _crate_offers(family: str, refresh: bool, progress) -> list[tuple[str, dict, str]]:
    """(upstream version, catalog source, where published) for every crate version of a family."""
    offers = []
    for crate in CRATES.get(family, ()):
        listed = [v for v in crate_versions(crate, refresh) if not v["yanked"]]
        if family == "snmalloc":  # older snmalloc-sys crates predate the bundled CMake shim
            listed = [v for v in listed if version_key(v["vers"]) >= (0, 3)]
        for n, v in enumerate(listed, 1):
            cache_file = _dir() / f"crate-{crate}.json"
            if not (cache_file.exists() and v["vers"] in json.loads(cache_file.read_text())):
                progress(f"reading {crate} {v['vers']} ({n}/{len(listed)})")
            try:
                bundled = _bundled(crate, v["vers"])
            except catalog.SourceFailed:
                continue
            for b in bundled:
                src = {
                    "kind": "crate",
                    "crate": crate,
                    "version": v["vers"],
                    **{k: val for k, val in b.items() if k != "version"},
                }
                offers.append((b["version"], src, catalog.describe_source(src)))
    return offers


# ---- Debian: apt-cache madison over the catalog's private APT configuration -----------------------


def debian_suites() -> list[str]:
    """The Debian suites the catalog already draws from (its data decides, not this code)."""
    return sorted({s["suite"] for e in catalog.entries().values() for s in e.sources if "suite" in s})


def debian_upstream(version: str) -> str | None:
    """2.0.9+ds-2 -> 2.0.9; 1:5.3.0-1 -> 5.3.0; 3.6.1+ds-1~bpo13+1 -> 3.6.1."""
    v = version.split(":", 1)[-1]
    v = v.rsplit("-", 1)[0] if "-" in v else v
    m = re.match(r"^(\d+(?:\.\d+)*)", v)
    return m.group(1) if m else None


def _madison(suite: str, packages: list[str]) -> list[tuple[str, str, str, str | None]]:
    """(package, version, 'Packages'|'Sources', glibc the binary needs) in one suite."""
    env = {**os.environ, **catalog.apt_env(suite, registry_log())}
    proc = subprocess.run(["apt-cache", "madison", *packages], env=env, capture_output=True, text=True, timeout=120)
    out = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3:
            kind = "Sources" if parts[2].endswith("Sources") else "Packages"
            needs = None
            if kind == "Packages":
                show = subprocess.run(
                    ["apt-cache", "show", f"{parts[0]}={parts[1]}"], env=env, capture_output=True, text=True, timeout=60
                ).stdout
                m = re.search(r"^(?:Pre-)?Depends:.*\blibc6 \(>= ([\d.]+)\)", show, re.M)
                needs = m.group(1) if m else None
            out.append((parts[0], parts[1], kind, needs))
    return out


def system_glibc() -> str:
    return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def uri_answers(uri: str, timeout: float = FILE_CHECK_TIMEOUT) -> bool | None:
    """Whether a file apt would download is there: True, False (the server says 404/410: gone),
    None (no verdict: timeout, no answer, another error, a URI scheme this cannot ask)."""
    if uri.startswith("file:"):
        return Path(urllib.request.url2pathname(uri[len("file:") :])).is_file()
    if not uri.startswith(("http:", "https:")):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(uri, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        return False if exc.code in (404, 410) else None
    except (OSError, ValueError):  # URLError, timeouts, refused connections
        return None


def source_fetchable(suite: str, package: str, version: str, lists: str = "apt") -> bool | None:
    """Whether `apt-get source PACKAGE=VERSION` can fetch its files: apt names the .dsc's URI
    (its own mirror and configuration), one HEAD request asks whether it is still there.
    An archive keeps a source in its index for a while after removing its files."""
    env = {**os.environ, **catalog.apt_env(suite, registry_log(), lists=lists)}
    try:
        proc = subprocess.run(
            ["apt-get", "source", "--print-uris", "-qq", f"{package}={version}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tempfile.gettempdir(),
        )
    except subprocess.SubprocessError:
        return None
    dsc = [m.group(1) for m in re.finditer(r"^'([^']+\.dsc)'", proc.stdout, re.M)]
    verdict = uri_answers(dsc[0]) if proc.returncode == 0 and dsc else None
    with open(registry_log(), "a") as f:
        f.write(
            f"$ apt-get source --print-uris {package}={version} ({suite}): {dsc[:1]} -> "
            f"{ {True: 'there', False: 'gone (404)', None: 'no verdict'}[verdict] }\n"
        )
    return verdict


def _check_sources(rows: list) -> list:
    """Rows with a 6th field: for Sources rows, whether their files can be fetched (None: unknown)."""
    wanted = sorted({(r[0], r[1], r[2]) for r in rows if r[3] == "Sources"})
    with ThreadPoolExecutor(max_workers=4) as pool:  # an unreachable mirror costs one timeout, not one per row
        verdicts = dict(zip(wanted, pool.map(lambda k: source_fetchable(*k), wanted)))
    return [[*r[:5], verdicts.get((r[0], r[1], r[2]))] for r in rows]


def _debian_offers(family: str, refresh: bool) -> tuple[list, list, list]:
    binaries = dict(DEBIAN_BINARIES.get(family, ()))
    source = DEBIAN_SOURCES.get(family)
    if not binaries and not source:
        return [], [], []
    listing = _dir() / f"debian-{family}.json"
    rows = json.loads(listing.read_text()) if listing.exists() else []
    # a Sources row whose files could not be checked (6th field None, or a listing from before the
    # check) is offered, but that verdict is not kept a day: it is asked again after RECHECK_AFTER
    unchecked = any(r[3] == "Sources" and (len(r) < 6 or r[5] is None) for r in rows)
    if refresh or not _fresh(listing) or (unchecked and not _fresh(listing, RECHECK_AFTER)):
        rows = []
        for suite in debian_suites():
            try:
                rows += [(suite, *r) for r in _madison(suite, sorted(binaries) + ([source] if source else []))]
            except (catalog.SourceFailed, UserError, subprocess.SubprocessError) as exc:
                with open(registry_log(), "a") as f:
                    f.write(f"apt-cache madison in {suite} failed: {exc}\n")
        rows = _check_sources(rows)
        listing.write_text(json.dumps(rows))
    plain, secure, unusable = [], [], []
    for suite, package, version, kind, needs, *checked in rows:
        up = debian_upstream(version)
        if not up:
            continue
        if kind == "Packages" and needs and version_key(needs) > version_key(system_glibc()):
            unusable.append(
                (up, f"debian {suite} {package} {version} needs glibc {needs} (this machine: {system_glibc()})")
            )
            continue
        if kind == "Packages" and package in binaries:
            src = {
                "kind": "debian-binary",
                "suite": suite,
                "package": package,
                "version": version,
                "library": binaries[package],
            }
            plain.append((up, src, catalog.describe_source(src)))
        elif kind == "Sources" and package == source:
            src = {
                "kind": "debian-source",
                "suite": suite,
                "package": package,
                "version": version,
                "recipe": "mimalloc-unity",
            }
            where = catalog.describe_source(src)
            if checked and checked[0] is False:
                unusable.append((up, f"{where}: its files are no longer in the archive (404)"))
                continue
            plain.append((up, src, where))
            secure.append((up, {**src, "secure": True}, where))
    return plain, secure, unusable


# ---- the listing --------------------------------------------------------------------------------------


def _source_rank(src: dict) -> tuple:
    """Preferred first: the distribution's own binary, then crates (newest first), then Debian sources."""
    order = {"debian-binary": 0, "crate": 1, "pypi-wheel": 2, "debian-source": 3}
    return (order.get(src["kind"], 9), tuple(-x for x in version_key(src.get("version", "0"))))


def available_versions(family: str, refresh: bool = False, progress=lambda s: None) -> list[VersionInfo]:
    """Every upstream version of `family` the reachable registries publish (plus the catalog's),
    ascending. Raises UserError for an unknown family."""
    if family not in FAMILIES:
        raise UserError(
            f"unknown allocator family {family!r}", f"{did_you_mean(family, FAMILIES)}use one of: {', '.join(FAMILIES)}"
        )
    if family == "glibc":
        from .library import probe

        v = probe(None).get("glibc")
        return [VersionInfo("glibc", v, (), (), ("the system's C library",), True)] if v else []
    lock_path = _dir() / f".{family}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        plain: dict[str, list] = {}
        secure: dict[str, list] = {}
        failures = []
        try:
            for up, src, where in _crate_offers(family, refresh, progress):
                plain.setdefault(up, []).append((src, where))
                if family in SECURE_FAMILIES:
                    secure.setdefault(up, []).append(({**src, "secure": True}, where))
        except catalog.SourceFailed as exc:
            failures.append(str(exc))
        dplain, dsecure, dunusable = _debian_offers(family, refresh)
        unusable: dict[str, list[str]] = {}
        for up, why in dunusable:
            unusable.setdefault(up, []).append(why)
            plain.setdefault(up, [])
        for up, src, where in dplain:
            plain.setdefault(up, []).append((src, where))
        for up, src, where in dsecure:
            secure.setdefault(up, []).append((src, where))
    catalog_ids = {e.id: e for e in catalog.entries().values() if e.family == family}
    for e in catalog_ids.values():
        plain.setdefault(e.version, [])
    out = []
    for up in sorted(plain, key=version_key):
        if not VERSION_RE.match(up):
            continue
        srcs = sorted(plain[up], key=lambda x: _source_rank(x[0]))
        ssrcs = sorted(secure.get(up, []), key=lambda x: _source_rank(x[0]))
        in_cat = f"{family}@{up}" in catalog_ids
        if in_cat:  # the catalog's pinned sources come first
            srcs = [(s, "catalog") for s in catalog_ids[f"{family}@{up}"].sources] + srcs
            if f"{family}@{up}+secure" in catalog.entries():
                ssrcs = [(s, "catalog") for s in catalog.entries()[f"{family}@{up}+secure"].sources] + ssrcs
        published = tuple(dict.fromkeys(w for _, w in srcs + ssrcs if w != "catalog"))
        out.append(
            VersionInfo(
                family,
                up,
                tuple(_dedupe(s for s, _ in srcs)),
                tuple(_dedupe(s for s, _ in ssrcs)),
                published,
                in_cat,
                tuple(dict.fromkeys(unusable.get(up, ()))),
            )
        )
    if not out and failures:
        raise UserError(
            f"no {family} versions could be listed: {failures[0]}",
            "check that cargo and apt can reach their registries (alloclab allocators versions --refresh)",
        )
    return out


def _dedupe(sources) -> list[dict]:
    seen, out = set(), []
    for s in sources:
        key = json.dumps(s, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def newer_than(family: str, pinned: str, refresh: bool = False, progress=lambda s: None) -> list[VersionInfo]:
    """Versions published after a pinned one (the operators' "monitor releases for fixes")."""
    if not VERSION_RE.match(pinned):
        raise UserError(f"--newer-than {pinned!r} is not a version", "write it as digits and dots, e.g. 2.1.7")
    return [v for v in available_versions(family, refresh, progress) if version_key(v.version) > version_key(pinned)]


def between(family: str, low: str, high: str, refresh: bool = False, progress=lambda s: None) -> list[VersionInfo]:
    """Buildable versions from low to high, both included, ascending (a bisect's axis)."""
    for v in (low, high):
        if not VERSION_RE.match(v):
            raise UserError(f"{v!r} is not a version", "write it as digits and dots, e.g. 2.1.7")
    lo, hi = sorted((version_key(low), version_key(high)))
    return [
        v for v in available_versions(family, refresh, progress) if lo <= version_key(v.version) <= hi and v.buildable
    ]


# ---- ids -----------------------------------------------------------------------------------------------


def published_entry(allocator_id: str, progress=lambda s: None) -> catalog.Entry | None:
    """The entry of an id made from what registries publish; None for an id whose family no
    registry here serves (or no id at all), UserError when the family is served but the version
    cannot be had. Nothing is remembered: each call reads the (cached) listing."""
    m = catalog.ID_RE.match(allocator_id)
    if not m or m["family"] not in CRATES and m["family"] not in DEBIAN_BINARIES:
        return None
    family, version, variant = m["family"], m["version"], m["variant"]
    infos = available_versions(family, progress=progress)
    info = next((v for v in infos if v.version == version), None)
    asked = _dir() / f"refreshed-for-new-{family}.stamp"
    if info is None and could_be_new(version, infos) and not _fresh(asked, RECHECK_AFTER):
        asked.touch()  # asked once for a while, answered or not: a missing version is then refused at once
        infos = available_versions(family, refresh=True, progress=progress)  # released since the last listing?
        info = next((v for v in infos if v.version == version), None)
    if info is None:
        near = ", ".join(nearest(allocator_id, infos=infos)) or ", ".join(v.id for v in infos[-6:])
        raise UserError(
            f"{allocator_id} is not in the catalog and no reachable registry publishes {family} {version}",
            f"{did_you_mean(version, [v.version for v in infos])}nearest that can be had: {near} "
            f"(alloclab allocators versions {family})",
        )
    if variant not in (None, "secure"):
        raise UserError(f"{allocator_id}: variant +{variant} exists only for catalog ids", "use +secure or no variant")
    sources = info.secure_sources if variant == "secure" else info.sources
    if not sources:
        why = f" ({'; '.join(info.not_usable)})" if info.not_usable else ""
        raise UserError(
            f"no reachable source can build {allocator_id} on this machine{why}",
            f"buildable: {', '.join(info.ids)}"
            if info.ids
            else "choose another version (alloclab allocators versions)",
        )
    return catalog.Entry(
        allocator_id,
        family,
        version,
        variant,
        tuple(sources),
        f"published version (from: {'; '.join(info.published_as[:3])})",
    )


def nearest(allocator_id: str, count: int = 3, infos: list[VersionInfo] | None = None) -> list[str]:
    """The buildable ids of the same family and variant closest to an id's version (same major line
    first), from the listing (cached for a day): what an error offers instead. Never raises: an
    unlisted family, or registries that cannot be listed, give []."""
    m = catalog.ID_RE.match(allocator_id)
    if not m or (m["family"] not in CRATES and m["family"] not in DEBIAN_BINARIES):
        return []
    try:
        infos = available_versions(m["family"]) if infos is None else infos
    except (UserError, catalog.SourceFailed, OSError, subprocess.SubprocessError):
        return []
    key, suffix = version_key(m["version"]), f"+{m['variant']}" if m["variant"] else ""
    usable = [v for v in infos if v.version != m["version"] and f"{v.id}{suffix}" in v.ids]

    def as_number(k: tuple) -> int:  # 3.6.1 -> 3_006_001: 3.7.0 is nearer to it than 3.5.1
        return sum(part * 1000 ** (3 - i) for i, part in enumerate((k + (0, 0, 0, 0))[:4]))

    def distance(v: VersionInfo) -> tuple:
        other = version_key(v.version)
        return (other[:1] != key[:1], abs(as_number(other) - as_number(key)))

    return [f"{v.id}{suffix}" for v in sorted(usable, key=distance)[:count]]


def could_be_new(version: str, known: list[VersionInfo]) -> bool:
    """Whether a version missing from the listing may have been released since: only one newer
    than every known version of its major line can be. An older one that the listing lacks was
    never published, which is known offline: refused at once, without waiting on registries."""
    key = version_key(version)
    same_line = [version_key(v.version) for v in known if version_key(v.version)[:1] == key[:1]]
    return not same_line or key > max(same_line)
