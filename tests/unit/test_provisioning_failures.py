"""Issue 45: "the registry did not answer" and "the registry answered that this version does not
exist" are told apart (catalog.failure_status, on the clients' real words), a failed pinned id
falls through to the next provider, and the one-line error names every source tried and the
nearest versions that can be had."""

from __future__ import annotations

from pathlib import Path

import pytest

from alloclab.allocators import catalog, resolution, versions
from alloclab.common.errors import UserError
from tests.registries import no_registry_answered

# Real output of the clients (captured on this project's machines), one per case.
SAID = {
    catalog.GONE: [
        "E: Version '3.6.1+ds-1~bpo13+1' for 'libmimalloc3' was not found",
        "E: Unable to locate package libjemalloc9",
        'error: failed to select a version for the requirement `libmimalloc-sys = "=0.1.99"`\n'
        "candidate versions found which didn't match: 0.1.49, 0.1.48, 0.1.47, ...",
        "ERROR: Could not find a version that satisfies the requirement cmeel-mimalloc==3.6.1 (from versions: 3.2.8, 3.4.3)\n"
        "ERROR: No matching distribution found for cmeel-mimalloc==3.6.1",
        "Err:1 http://mirror/debian trixie/main amd64 libmimalloc3 amd64 3.0.1+ds-2.1\n  404  Not Found [IP: 1.2.3.4 80]",
    ],
    catalog.UNREACHABLE: [
        "WARNING: Retrying (Retry(total=0, ...)) after connection broken by 'NewConnectionError(\"HTTPSConnection("
        "host='127.0.0.1', port=9): Failed to establish a new connection: [Errno 111] Connection refused\")'\n"
        "ERROR: Could not find a version that satisfies the requirement cmeel-mimalloc==3.2.8 (from versions: none)\n"
        "ERROR: No matching distribution found for cmeel-mimalloc==3.2.8",
        "  failed to download from `https://index/config.json`\n\nCaused by:\n  [7] Could not connect to server",
        "W: Failed to fetch http://mirror/debian/dists/trixie/InRelease  Could not connect to 127.0.0.1:9 (127.0.0.1). "
        "- connect (111: Connection refused)\nW: Some index files failed to download.",
        "Err:1 http://mirror/debian bookworm/main amd64 libjemalloc2\n  Temporary failure resolving 'mirror'",
    ],
    catalog.FAILED: ["configure: error: C compiler cannot create executables", ""],
}


@pytest.mark.parametrize("status,output", [(s, o) for s, outs in SAID.items() for o in outs])
def test_client_words_are_classified(status, output):
    assert catalog.failure_status(output) == status


def _failure(*statuses: str) -> catalog.ProvisioningFailed:
    return catalog.ProvisioningFailed(
        "mimalloc@3.6.1", [catalog.Attempt(f"source {i}", s, "why") for i, s in enumerate(statuses)]
    )


def test_only_a_registry_that_never_answered_is_skippable():
    assert no_registry_answered(_failure(catalog.UNREACHABLE, catalog.UNREACHABLE))
    assert not no_registry_answered(_failure(catalog.UNREACHABLE, catalog.GONE))
    assert not no_registry_answered(_failure(catalog.FAILED))
    assert not no_registry_answered(
        UserError("mimalloc@9.9 is not in the catalog and no reachable registry publishes it")
    )
    offline = "no mimalloc versions could be listed: cargo info x failed: [7] Could not connect to server"
    assert no_registry_answered(UserError(offline, "check"))


def test_the_line_names_every_source_and_the_nearest_versions():
    exc = _failure(catalog.GONE, catalog.UNREACHABLE).with_nearest(["mimalloc@3.6.0", "mimalloc@3.7.0"])
    line = str(exc)
    assert "\n" not in line and exc.exit_code == 2
    assert "source 0: gone (why)" in line and "source 1: unreachable (why)" in line
    assert line.endswith("(nearest that can be had: mimalloc@3.6.0, mimalloc@3.7.0)")
    assert "no registry answered" in str(_failure(catalog.UNREACHABLE))


def test_a_pin_that_differs_is_refused():
    with pytest.raises(catalog.SourceFailed) as caught:
        catalog._check_pin({"cksum": "a" * 64}, "cksum", "b" * 64, "libmimalloc-sys 0.1.30")
    assert caught.value.status == catalog.FAILED and "not the catalog's pin" in str(caught.value)
    catalog._check_pin({}, "cksum", "b" * 64, "unpinned")  # nothing pinned: nothing to compare


class _Fails:
    def __init__(self, *statuses):
        self.statuses = statuses

    def entry(self, allocator_id, progress):
        return None

    def library(self, allocator_id, progress):
        raise _failure(*self.statuses)


class _Has:
    def __init__(self, path):
        self.path = path

    def entry(self, allocator_id, progress):
        return None

    def library(self, allocator_id, progress):
        return self.path


class _DoesNotKnow:
    def entry(self, allocator_id, progress):
        return None

    def library(self, allocator_id, progress):
        raise UserError(f"{allocator_id} is not in the catalog and no reachable registry publishes it")


def test_a_failed_provider_falls_through_to_the_next(monkeypatch):
    monkeypatch.setattr(versions, "nearest", lambda allocator_id, count=3, infos=None: ["mimalloc@3.6.0"])
    assert resolution.Resolver((_Fails(catalog.GONE), _Has(Path("/lib.so")))).library("mimalloc@3.6.1") == Path(
        "/lib.so"
    )
    with pytest.raises(catalog.ProvisioningFailed) as caught:  # the pinned failure, not "not published"
        resolution.Resolver((_Fails(catalog.GONE), _DoesNotKnow())).library("mimalloc@3.6.1")
    assert caught.value.nearest == ["mimalloc@3.6.0"] and "source 0: gone" in str(caught.value)
    with pytest.raises(catalog.ProvisioningFailed) as caught:  # both providers' sources, each once
        resolution.Resolver((_Fails(catalog.GONE), _Fails(catalog.GONE, catalog.UNREACHABLE))).library("mimalloc@3.6.1")
    assert [a.source for a in caught.value.attempts] == ["source 0", "source 1"]


def test_nearest_prefers_the_same_line_and_the_closest_release(monkeypatch):
    infos = [
        versions.VersionInfo("mimalloc", v, ({"kind": "crate"},)) for v in ("2.0.9", "3.5.1", "3.6.0", "3.7.0", "3.9.0")
    ]
    assert versions.nearest("mimalloc@3.6.1", infos=infos) == ["mimalloc@3.6.0", "mimalloc@3.7.0", "mimalloc@3.5.1"]
    assert versions.nearest("mimalloc@3.6.1+secure", infos=infos) == []  # none of them has a secure build
    assert versions.nearest("nosuch@1.0", infos=infos) == []


def test_the_docs_table_lists_every_catalog_entry_and_its_sources_in_order():
    """docs/how-to/allocators.md's table of sources (made by `allocators check --markdown`) is the catalog's."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "allocators.md").read_text()
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `") and line.count("|") == 4:
            ident, sources, _seen = (c.strip() for c in line.strip("|").split("|"))
            rows[ident.strip("`")] = sources
    expected = {
        e.id: "; ".join(catalog.describe_source(s) for s in e.sources if s["kind"] != "upstream-git")
        for e in catalog.entries().values()
    }
    assert rows == expected


def test_a_version_newer_than_any_published_is_asked_for_once_then_refused_at_once(archive, monkeypatch):
    """jemalloc@9.9.9 took 27-59 s to refuse, every time: each lookup refreshed every listing."""
    real, refreshed = versions.available_versions, []

    def counting(family, refresh=False, progress=lambda s: None):
        refreshed.append(refresh)
        return real(family, refresh, progress)

    monkeypatch.setattr(versions, "available_versions", counting)
    for _ in range(3):
        with pytest.raises(UserError, match="no reachable registry publishes mimalloc 9.9.9"):
            versions.published_entry("mimalloc@9.9.9")
    assert refreshed.count(True) == 1, refreshed
