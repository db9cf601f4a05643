"""Fixtures shared by unit tests."""

from __future__ import annotations

import pytest

from alloclab.allocators import versions


@pytest.fixture
def archive(tmp_path, monkeypatch):
    """trixie-backports lists two mimalloc sources; 3.5.3's files are gone, 3.6.1's first check gets no answer."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(versions, "debian_suites", lambda: ["trixie-backports"])
    monkeypatch.setattr(versions, "_crate_offers", lambda family, refresh, progress: [])
    monkeypatch.setattr(
        versions,
        "_madison",
        lambda suite, packages: [
            ("mimalloc", "3.5.3+ds-1~bpo13+1", "Sources", None),
            ("mimalloc", "3.6.1+ds-1~bpo13+1", "Sources", None),
            ("mimalloc", "3.5.3+ds-1~bpo13+1", "Sources", None),
        ],
    )  # madison repeats Sources rows
    state = {"3.5.3+ds-1~bpo13+1": False, "3.6.1+ds-1~bpo13+1": None, "asked": []}

    def fetchable(suite, package, version):
        state["asked"].append(version)
        return state[version]

    monkeypatch.setattr(versions, "source_fetchable", fetchable)
    return state
