"""Allocators that only a registry publishes (the catalog's and registries' versions, not Debian's
installed packages): provisioned as a user's alloclab would, from alloclab's allocator cache
($ALLOCLAB_CACHE, else ~/.cache/alloclab) when built before, else downloaded and built from the
live registry.

A test that needs one is skipped only when no registry answered (an offline machine, a registry
down): every source tried was UNREACHABLE. A registry that answered that the pinned version is
gone fails the test, so a pin that rots fails the suite the day it rots."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from alloclab.allocators import catalog, resolution
from alloclab.common.errors import UserError


def _why(what: str, exc: UserError) -> str:
    return (
        f"needs {what} from alloclab's allocator cache ({catalog.cache_dir()}) or its live registry, "
        f"and no registry answered here: {exc}"
    )


def published_library(allocator_id: str) -> str:
    """The library file of a catalog or registry-published allocator id, or a skip that says why."""
    with registry_or_skip(allocator_id):
        return resolution.resolve(allocator_id).path
    raise AssertionError("unreachable")  # pytest.skip raised above


def no_registry_answered(exc: UserError) -> bool:
    """Whether a provisioning or listing failure is only registries not answering (never a
    registry's answer that a version or file is gone, nor a failed build or pin)."""
    if isinstance(exc, catalog.ProvisioningFailed):
        return exc.unreachable_only
    return "could be listed" in exc.problem and catalog.failure_status(str(exc)) == catalog.UNREACHABLE


@contextmanager
def registry_or_skip(what: str) -> Iterator[None]:
    """Around provisioning from a registry: a skip naming `what` when no registry answered; any
    other failure (gone, a pin mismatch, a build or its verification) fails the test."""
    try:
        yield
    except UserError as exc:
        if not no_registry_answered(exc):
            raise
        pytest.skip(_why(what, exc))
