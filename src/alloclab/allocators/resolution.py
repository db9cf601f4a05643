"""A group's `allocator` string made into a verified AllocatorSpec: "glibc", "bundled", a library
path, or a catalog id (built on demand).

This layer sits above both `allocators` (what a library is, whether it may be preloaded, how a
process is verified) and `catalog` (which builds libraries with allocators' helpers), so neither
of them imports the other's caller: the imports run one way.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import catalog, debpackage, hardening, tunables, versions
from .library import AllocatorSpec, check_preload_safe, normalise_version, probe, sha256_file
from ..errors import UserError, did_you_mean


def resolve(request: str, base_dir: Path = Path("."), env: dict[str, str] | None = None) -> AllocatorSpec:
    """Turn a group's allocator string into a verified spec, or raise UserError."""
    if request == "bundled":
        return AllocatorSpec(kind="bundled", request=request)
    if request == "glibc":
        info = probe(None)
        return AllocatorSpec(kind="glibc", request=request, family="glibc", version=info.get("glibc"))
    if "/" not in request and "@" in request:
        # a host with the id's package installed (alloclab allocators package) uses those exact bytes,
        # even when a build of the id is cached too: the package's path under /usr/lib/alloclab is
        # one every service user can read, a cache under the invoking user's home is not (fleet use);
        # otherwise provisioning builds on demand and returns the verified cached library
        installed = debpackage.installed_library(request)
        path = installed[0] if installed else versions.library_for(
            request, lambda step: print(f"alloclab: provisioning {request}: {step}", file=sys.stderr, flush=True))
    else:
        path = (base_dir / request) if not os.path.isabs(request) else Path(request)
    given, path = path, Path(os.path.realpath(path))
    if not path.exists():
        raise UserError(f"allocator library {request} not found ({path})",
                        f"{did_you_mean(request, ('glibc', 'bundled', *catalog.entries())) if '/' not in request else ''}"
                        "give an existing .so path, \"glibc\", \"bundled\", or a catalog id (alloclab allocators list)")
    if not os.access(path, os.R_OK) or not path.is_file():
        raise UserError(f"allocator library {path} is not a readable file", "check the path and its permissions")
    check_preload_safe(given)   # the path as given: every link and directory on the way is checked
    info = probe(str(path), env)
    served = info.get("malloc_file")
    if not served or os.path.realpath(served) != str(path):
        raise UserError(f"{path} was preloaded but malloc still resolves to {served}",
                        "give a library that exports malloc (a real allocator build)")
    st = path.stat()
    return AllocatorSpec(kind="preload", request=request, path=str(path), sha256=sha256_file(path),
                         dev=st.st_dev, inode=st.st_ino, family=info.get("family"),
                         version=normalise_version(info.get("family"), info.get("version")))


def provenance(spec: AllocatorSpec) -> str | None:
    """The catalog's provenance record of a catalog or published id (JSON), stored with the run."""
    if spec.kind != "preload" or "@" not in spec.request or "/" in spec.request:
        return None
    installed = debpackage.installed_library(spec.request)      # preferred by resolve(), so first here too
    if installed and os.path.realpath(installed[0]) == spec.path:
        return json.dumps({**installed[1], "installed_at": str(installed[0])}, sort_keys=True)
    build = catalog.find_build(spec.request)
    return json.dumps(build.provenance, sort_keys=True) if build else None


def tunables_json(spec: AllocatorSpec) -> str | None:
    """The options the group's preloaded library knows (tunables.known_options), stored with the run
    so the analysis names a tunable without reading the library again (docs/store.md); None when
    nothing is preloaded."""
    if spec.kind != "preload" or not spec.path:
        return None
    return json.dumps({"family": spec.family, "known": tunables.known_options(spec.family, spec.path),
                       "read_from": spec.path, "library_sha256": spec.sha256}, sort_keys=True)


def hardening_json(spec: AllocatorSpec, env: dict[str, str] | None = None) -> str | None:
    """The group's heap hardening under its own environment (alloclab.allocators.hardening), stored with the
    run; None for "bundled", whose allocator LD_PRELOAD does not choose."""
    if spec.kind == "bundled":
        return None
    return json.dumps(hardening.features(spec.family, spec.path, env), sort_keys=True)
