"""Issue 28 item 1: an allocator id is looked up through explicit providers, with no registry in a
module. Before, `catalog.entry` knew a published id only after `versions.entry` had written it into
`catalog._registered`: every later lookup in the process then saw it, whoever asked.

The registry's answer (`apt-cache madison`, the .dsc's verdict) is fixed here, as in
test_versions_fetchable, since the archive's state cannot be chosen from here."""
from __future__ import annotations

import pytest

from alloclab.allocators import catalog, resolution, versions
from alloclab.errors import UserError

PUBLISHED = "mimalloc@3.4.9"          # not pinned in data/catalog.toml


@pytest.fixture
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(versions, "debian_suites", lambda: ["trixie-backports"])
    monkeypatch.setattr(versions, "_crate_offers", lambda family, refresh, progress: [])
    monkeypatch.setattr(versions, "_madison", lambda suite, packages: [
        ("mimalloc", "3.4.9+ds-1~bpo13+1", "Sources", None)])
    monkeypatch.setattr(versions, "_source_fetchable", lambda suite, package, version: True)


def test_two_resolvers_share_no_state(archive):
    published = resolution.Resolver((resolution.Pinned(), resolution.Published()))
    e = published.entry(PUBLISHED)
    assert (e.id, e.family, e.version, e.sources[0]["kind"]) == (PUBLISHED, "mimalloc", "3.4.9", "debian-source")
    assert published.entry(PUBLISHED + "+secure").sources[0]["secure"] is True
    # a resolver of pinned ids only still does not know it, and the catalog holds only its own
    with pytest.raises(UserError, match=r"mimalloc@3\.4\.9 is not in the catalog"):
        resolution.Resolver((resolution.Pinned(),)).entry(PUBLISHED)
    assert catalog.pinned(PUBLISHED) is None and catalog.pinned("mimalloc@3.6.1").id == "mimalloc@3.6.1"
    assert not hasattr(catalog, "_registered") and not hasattr(catalog, "register")


def test_the_first_provider_that_owns_an_id_answers(archive):
    e = resolution.DEFAULT.entry("mimalloc@3.6.1")
    assert e == catalog.pinned("mimalloc@3.6.1")          # the catalog's pinned sources, not the listing's
    with pytest.raises(UserError, match="unknown allocator family 'nosuch'"):
        resolution.DEFAULT.entry("nosuch@1.0")
    with pytest.raises(UserError, match="no reachable registry publishes mimalloc 3.4.8"):
        resolution.DEFAULT.entry("mimalloc@3.4.8")
