"""A group's `allocator` string made into a verified AllocatorSpec: "glibc", "bundled", a library
path, or an allocator id, whose library comes from explicit providers asked in order.

Providers of an id (each answers None for an id that is not its own):
    InstalledPackage   an installed alloclab package of the id (debpackage): those exact bytes
    Pinned             the catalog's pinned ids (data/catalog.toml): its cached build, else built now
    Published          every other version a reachable registry publishes (versions): likewise
`Resolver` composes them; `DEFAULT` is the three in that order, and `resolve()` uses it unless
given another. Nothing is registered anywhere: two resolvers share no state, and an id's entry is
looked up afresh by whoever needs it (build, verify, show).

This layer sits above both `library` (what a library is, whether it may be preloaded, how a
process is verified) and `catalog` (which builds libraries with library's helpers), so neither
of them imports the other's caller: the imports run one way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..common.errors import UserError, did_you_mean
from . import catalog, debpackage, hardening, tunables, versions
from .library import AllocatorSpec, check_preload_safe, normalise_version, probe, sha256_file

Progress = Callable[[str], None]


def _quiet(step: str) -> None:
    pass


class Provider(Protocol):
    """One place an allocator id's library can come from."""

    def entry(self, allocator_id: str, progress: Progress) -> catalog.Entry | None:
        """The id's sources, None when the id is not this provider's."""

    def library(self, allocator_id: str, progress: Progress) -> Path | None:
        """The id's verified library (built now if need be), None when the id is not this provider's."""


class InstalledPackage:
    """An installed alloclab package of the id: one path every service user can read, unlike a
    cache under the invoking user's home (fleet use), so it is preferred even to a cached build."""

    def entry(self, allocator_id: str, progress: Progress) -> catalog.Entry | None:
        return None

    def library(self, allocator_id: str, progress: Progress) -> Path | None:
        installed = debpackage.installed_library(allocator_id)
        return installed[0] if installed else None


class Pinned:
    """The catalog's pinned ids: the cached build, else built now."""

    def entry(self, allocator_id: str, progress: Progress) -> catalog.Entry | None:
        return catalog.pinned(allocator_id)

    def library(self, allocator_id: str, progress: Progress) -> Path | None:
        e = catalog.pinned(allocator_id)
        return None if e is None else _verified_build(catalog.find_build(allocator_id) or catalog.build(e, progress))


class Published:
    """Every other version a reachable registry publishes: the cached build (which needs no
    registry: the cache holds only ids that were buildable when built), else built now."""

    def entry(self, allocator_id: str, progress: Progress) -> catalog.Entry | None:
        return versions.published_entry(allocator_id, progress)

    def library(self, allocator_id: str, progress: Progress) -> Path | None:
        b = catalog.find_build(allocator_id)
        if b is None:
            e = self.entry(allocator_id, progress)
            if e is None:
                return None
            b = catalog.build(e, progress)
        return _verified_build(b)


def _merged(first: catalog.ProvisioningFailed | None, later: catalog.ProvisioningFailed) -> catalog.ProvisioningFailed:
    """One failure naming every source tried by every provider, each once."""
    if first is None:
        return later
    seen = {a.source for a in first.attempts}
    return catalog.ProvisioningFailed(
        first.allocator_id, first.attempts + [a for a in later.attempts if a.source not in seen]
    )


def _verified_build(b: catalog.Build) -> Path:
    catalog.check_integrity(b)
    return b.path


@dataclass(frozen=True)
class Resolver:
    """Allocator ids looked up through explicit providers, asked in order; the first that owns an
    id answers for it."""

    providers: tuple[Provider, ...]

    def entry(self, allocator_id: str, progress: Progress = _quiet) -> catalog.Entry:
        """The id's sources (pinned or published), or UserError naming the ids that exist."""
        if (short := catalog.short_version(allocator_id)) is not None:
            raise short
        for p in self.providers:
            e = p.entry(allocator_id, progress)
            if e is not None:
                return e
        raise catalog.unknown(allocator_id)

    def library(self, allocator_id: str, progress: Progress = _quiet) -> Path:
        """The verified library of an id, built on demand (cached)."""
        if allocator_id.startswith("glibc@"):
            raise UserError("glibc is the system's", 'write allocator = "glibc"')
        if (short := catalog.short_version(allocator_id)) is not None:
            raise short  # before any registry is asked: one line
        failed: catalog.ProvisioningFailed | None = None
        for p in self.providers:
            try:
                path = p.library(allocator_id, progress)
            except catalog.ProvisioningFailed as exc:  # every source of this provider: the next one may have it
                failed = _merged(failed, exc)
                continue
            except UserError:
                if failed is None:
                    raise
                continue  # a later provider that does not know the id either
            if path is not None:
                return path
        if failed is not None:
            raise failed.with_nearest(versions.nearest(allocator_id))
        raise catalog.unknown(allocator_id)

    def build(self, allocator_id: str, progress: Progress = _quiet, force: bool = False) -> catalog.Build:
        return catalog.build(self.entry(allocator_id, progress), progress, force=force)

    def verify(self, allocator_id: str) -> dict:
        return catalog.verify(self.entry(allocator_id))

    def resolve(self, request: str, base_dir: Path = Path("."), env: dict[str, str] | None = None) -> AllocatorSpec:
        """Turn a group's allocator string into a verified spec, or raise UserError."""
        if request == "bundled":
            return AllocatorSpec(kind="bundled", request=request)
        if request == "glibc":
            info = probe(None)
            return AllocatorSpec(kind="glibc", request=request, family="glibc", version=info.get("glibc"))
        if "/" not in request and "@" in request:
            path = self.library(
                request, lambda step: print(f"alloclab: provisioning {request}: {step}", file=sys.stderr, flush=True)
            )
        else:
            path = (base_dir / request) if not os.path.isabs(request) else Path(request)
        return _verified(request, path, env)


DEFAULT = Resolver((InstalledPackage(), Pinned(), Published()))
BUILDS = Resolver((Pinned(), Published()))  # cached or built here, never an installed package


def resolve(
    request: str, base_dir: Path = Path("."), env: dict[str, str] | None = None, resolver: Resolver = DEFAULT
) -> AllocatorSpec:
    """Turn a group's allocator string into a verified spec, or raise UserError."""
    return resolver.resolve(request, base_dir, env)


def _verified(request: str, path: Path, env: dict[str, str] | None) -> AllocatorSpec:
    """The spec of a library path: it exists, may be preloaded, and malloc resolves to it."""
    given, path = path, Path(os.path.realpath(path))
    if not path.exists():
        raise UserError(
            f"allocator library {request} not found ({path})",
            f"{did_you_mean(request, ('glibc', 'bundled', *catalog.entries())) if '/' not in request else ''}"
            'give an existing .so path, "glibc", "bundled", or a catalog id (alloclab allocators list)',
        )
    if path.is_dir():
        raise UserError(f"allocator library {path} is a directory", "give the library file in it (a .so)")
    if not os.access(path, os.R_OK) or not path.is_file():
        raise UserError(f"allocator library {path} is not a readable file", "check the path and its permissions")
    with open(path, "rb") as f:  # the loader skips a preload that is no ELF object, with only a warning
        if f.read(4) != b"\x7fELF":
            raise UserError(
                f"allocator library {path} is not a shared library (no ELF header)",
                'give the allocator\'s .so file, a catalog id or "glibc"',
            )
    check_preload_safe(given)  # the path as given: every link and directory on the way is checked
    info = probe(str(path), env)
    served = info.get("malloc_file")
    if not served or os.path.realpath(served) != str(path):
        raise UserError(
            f"{path} was preloaded but malloc still resolves to {served}",
            "give a library that exports malloc (a real allocator build)",
        )
    st = path.stat()
    return AllocatorSpec(
        kind="preload",
        request=request,
        path=str(path),
        sha256=sha256_file(path),
        dev=st.st_dev,
        inode=st.st_ino,
        family=info.get("family"),
        version=normalise_version(info.get("family"), info.get("version")),
    )


def provenance(spec: AllocatorSpec) -> str | None:
    """The catalog's provenance record of a catalog or published id (JSON), stored with the run."""
    if spec.kind != "preload" or "@" not in spec.request or "/" in spec.request:
        return None
    installed = debpackage.installed_library(spec.request)  # preferred by DEFAULT, so first here too
    if installed and os.path.realpath(installed[0]) == spec.path:
        return json.dumps({**installed[1], "installed_at": str(installed[0])}, sort_keys=True)
    build = catalog.find_build(spec.request)
    return json.dumps(build.provenance, sort_keys=True) if build else None


def tunables_json(spec: AllocatorSpec) -> str | None:
    """The options the group's preloaded library knows (tunables.known_options), stored with the run
    so the analysis names a tunable without reading the library again (docs/reference/store.md); None when
    nothing is preloaded."""
    if spec.kind != "preload" or not spec.path:
        return None
    return json.dumps(
        {
            "family": spec.family,
            "known": tunables.known_options(spec.family, spec.path),
            "read_from": spec.path,
            "library_sha256": spec.sha256,
        },
        sort_keys=True,
    )


def hardening_json(spec: AllocatorSpec, env: dict[str, str] | None = None) -> str | None:
    """The group's heap hardening under its own environment (alloclab.allocators.hardening), stored with the
    run; None for "bundled", whose allocator LD_PRELOAD does not choose."""
    if spec.kind == "bundled":
        return None
    return json.dumps(hardening.features(spec.family, spec.path, env), sort_keys=True)
