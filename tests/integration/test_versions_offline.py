"""An unknown version is refused from the listing alone when it cannot be a new release (older
than the newest known of its line): no second round of registry queries (issue 30, item 11)."""

from __future__ import annotations

import pytest

from alloclab.allocators import catalog, versions
from alloclab.common.errors import UserError

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them


def test_an_unknown_old_version_is_refused_without_asking_the_registries_again(monkeypatch):
    real = versions.available_versions
    try:
        known = real("mimalloc")  # the cached listing (registries only when stale)
    except (UserError, catalog.SourceFailed) as exc:
        if catalog.failure_status(str(exc)) != catalog.UNREACHABLE:  # an answer, not silence: fail
            raise
        pytest.skip(f"no mimalloc listing here: {exc}")
    newest = max(known, key=lambda v: versions.version_key(v.version))
    bogus = f"{versions.version_key(newest.version)[0]}.0.0.7"  # four parts: never published, older than the newest
    calls = []

    def spy(family, refresh=False, progress=lambda s: None):
        calls.append(refresh)
        return real(family, refresh=refresh, progress=progress)

    monkeypatch.setattr(versions, "available_versions", spy)
    with pytest.raises(UserError, match="no reachable registry publishes"):
        versions.published_entry(f"mimalloc@{bogus}")
    assert calls == [False], f"the registries were asked again: {calls}"
    assert versions.could_be_new("999.0", known) and not versions.could_be_new(bogus, known)
