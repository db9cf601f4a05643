"""Issue 28 item 1: an allocator id is looked up through explicit providers, with no registry in a
module. Before, `catalog.entry` knew a published id only after `versions.entry` had written it into
`catalog._registered`: every later lookup in the process then saw it, whoever asked.

The registry's answer (`apt-cache madison`, the .dsc's verdict) is fixed by the `archive` fixture
(conftest.py), since the archive's state cannot be chosen from here."""

from __future__ import annotations

import pytest

from alloclab.allocators import catalog, resolution
from alloclab.common.errors import UserError

PUBLISHED = "mimalloc@3.5.3"  # not pinned in data/catalog.toml
SOURCE = "3.5.3+ds-1~bpo13+1"


def test_two_resolvers_share_no_state(archive):
    archive[SOURCE] = True  # its files are there: buildable
    published = resolution.Resolver((resolution.Pinned(), resolution.Published()))
    e = published.entry(PUBLISHED)
    assert (e.id, e.family, e.version, e.sources[0]["kind"]) == (PUBLISHED, "mimalloc", "3.5.3", "debian-source")
    assert published.entry(PUBLISHED + "+secure").sources[0]["secure"] is True
    # a resolver of pinned ids only still does not know it, and the catalog holds only its own
    with pytest.raises(UserError, match=r"mimalloc@3\.5\.3 is not in the catalog"):
        resolution.Resolver((resolution.Pinned(),)).entry(PUBLISHED)
    assert catalog.pinned(PUBLISHED) is None and catalog.pinned("mimalloc@3.7.0").id == "mimalloc@3.7.0"
    assert not hasattr(catalog, "_registered") and not hasattr(catalog, "register")


def test_the_first_provider_that_owns_an_id_answers(archive):
    e = resolution.DEFAULT.entry("mimalloc@3.7.0")
    assert e == catalog.pinned("mimalloc@3.7.0")  # the catalog's pinned sources, not the listing's
    with pytest.raises(UserError, match="unknown allocator family 'nosuch'"):
        resolution.DEFAULT.entry("nosuch@1.0")
    with pytest.raises(UserError, match="no reachable registry publishes mimalloc 3.4.8"):
        resolution.DEFAULT.entry("mimalloc@3.4.8")
