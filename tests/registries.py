"""Allocators that only a registry publishes (the catalog's and registries' versions, not Debian's
installed packages): provisioned as a user's alloclab would, from alloclab's allocator cache
($ALLOCLAB_CACHE, else ~/.cache/alloclab) when built before, else downloaded and built from the
live registry. A test that needs one is skipped, saying which library and why, where neither
the cache nor the registry can provide it (an offline machine, a registry down)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from alloclab.allocators import catalog, resolution
from alloclab.errors import UserError


def _why(what: str, exc: UserError) -> str:
    return (f"needs {what} from alloclab's allocator cache ({catalog.cache_dir()}) or its live registry, "
            f"neither could provide it here: {exc}")


def published_library(allocator_id: str) -> str:
    """The library file of a catalog or registry-published allocator id, or a skip that says why."""
    with registry_or_skip(allocator_id):
        return resolution.resolve(allocator_id).path
    raise AssertionError("unreachable")       # pytest.skip raised above


# What alloclab's one-line error says when a download step failed or no registry answered; any
# other provisioning failure (a build or its verification) is the test's business and fails it.
UNREACHABLE = ("apt-get download", "apt-get source", "cargo fetch", "pip download", "no reachable registry",
               "no reachable source")


@contextmanager
def registry_or_skip(what: str) -> Iterator[None]:
    """Around provisioning from a registry: a failure to download (an unreachable registry) becomes
    a skip naming `what` and the reason."""
    try:
        yield
    except UserError as exc:
        if not any(step in str(exc) for step in UNREACHABLE):
            raise
        pytest.skip(_why(what, exc))
