"""The ordered versions of one allocator family between a good and a bad one: the "versions"
`alloclab bisect` searches.

`versions_between` is the one place that says which versions exist: the catalog's pinned ids plus
every version the reachable registries publish and alloclab can build (`versions.available_versions`,
`alloclab allocators versions FAMILY`); with no registry reachable, the catalog's alone.
"""

from __future__ import annotations

from ..common.errors import UserError
from . import catalog
from .library import version_key


def _id(family: str, version: str, variant: str | None) -> str:
    return f"{family}@{version}" + (f"+{variant}" if variant else "")


def versions_between(family: str, good: str, bad: str, variant: str | None = None) -> list[str]:
    """Allocator ids of `family` (and `variant`, e.g. "secure"; None: the plain builds) from `good`
    to `bad` inclusive, in version order (either direction: a regression may be a downgrade).
    `good` and `bad` are versions ("2.0.9") or ids ("mimalloc@2.0.9"); both must be known."""
    good, bad = good.removeprefix(f"{family}@"), bad.removeprefix(f"{family}@")
    known = {e.version: e.id for e in catalog.entries().values() if e.family == family and e.variant == variant}
    try:
        from . import versions

        for info in versions.available_versions(family):
            vid = _id(family, info.version, variant)
            if vid in info.ids:
                known.setdefault(info.version, vid)
    except UserError:
        pass  # no registry reachable: the catalog's pinned versions only
    if not known:
        raise UserError(
            f"no {family}{'+' + variant if variant else ''} versions are known",
            f"use one of the families: {', '.join(sorted(catalog.families() - {'glibc'}))}",
        )
    listed = ", ".join(sorted(known, key=version_key))
    for v, what in ((good, "--good"), (bad, "--bad")):
        if v not in known:
            raise UserError(f"{what} {family} {v} is not a known version", f"known {family} versions: {listed}")
    if good == bad:
        raise UserError(f"--good and --bad are both {family} {good}", "give two different versions")
    lo, hi = sorted((version_key(good), version_key(bad)))
    inside = sorted((v for v in known if lo <= version_key(v) <= hi), key=version_key)
    if version_key(good) > version_key(bad):
        inside.reverse()
    return [_id(family, v, variant) for v in inside]
