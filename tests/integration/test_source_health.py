"""Issue 45: pins that cannot rot unnoticed. Every catalog source is asked of its real registry
(Debian's archive through the machine's own mirror, the crates' index, PyPI) whether it is still
served; a registry that answers "gone" fails here, the day it answers so. Only a registry that
does not answer at all skips.

The "gone" cases are real answers about versions that do not exist (or no longer do): Debian's
mimalloc 3.6.1 left trixie-backports, libmimalloc-sys 0.1.41 is yanked, 0.1.99 was never
published, cmeel-mimalloc never shipped 3.6.1. "No answer" is made by pointing the clients at a
closed loopback port through their proxy settings."""

from __future__ import annotations

import json
import os

import pytest

from alloclab.allocators import catalog, resolution, sourcehealth
from tests.conftest import run_cli
from tests.registries import no_registry_answered

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them

GONE_SOURCES = (
    {
        "kind": "debian-binary",
        "suite": "trixie-backports",
        "package": "libmimalloc3",
        "version": "3.6.1+ds-1~bpo13+1",
        "library": "libmimalloc.so.3*",
    },
    {
        "kind": "crate",
        "crate": "libmimalloc-sys",
        "version": "0.1.41",
        "subdir": "c_src/mimalloc",
        "recipe": "mimalloc-unity",
    },
    {
        "kind": "crate",
        "crate": "libmimalloc-sys",
        "version": "0.1.99",
        "subdir": "c_src/mimalloc",
        "recipe": "mimalloc-unity",
    },
    {"kind": "pypi-wheel", "package": "cmeel-mimalloc", "version": "3.6.1", "library": "libmimalloc.so*"},
)
ROTTEN = catalog.Entry("mimalloc@3.6.1", "mimalloc", "3.6.1", None, GONE_SOURCES)


@pytest.fixture
def rotten_catalog(monkeypatch, tmp_path):
    """The real catalog plus one entry whose every source is gone, in a cache of the test's own."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path / "cache"))
    real = dict(catalog.entries())
    monkeypatch.setattr(catalog, "entries", lambda: {**real, ROTTEN.id: ROTTEN})
    return ROTTEN


def _skip_if_nothing_answered(found: list[sourcehealth.EntryHealth]) -> None:
    if all(
        s.status == sourcehealth.UNREACHABLE for h in found for s in h.sources if s.status != sourcehealth.NOT_ASKED
    ):
        pytest.skip(f"no registry answered: {found[0].sources[0].detail}")


def test_every_catalog_source_is_still_served():
    proc = run_cli("allocators", "check", "--json", timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    found = json.loads(proc.stdout)
    assert {h["id"] for h in found} == set(catalog.entries())
    gone = [(h["id"], s) for h in found for s in h["sources"] if s["status"] == "gone"]
    assert not gone, f"the catalog no longer follows its registries (update data/catalog.toml): {gone}"
    assert proc.returncode == 0
    unanswered = [h["id"] for h in found if h["status"] == "unreachable"]
    if unanswered:
        pytest.skip(f"no answer for {unanswered}: their sources could not be vouched for")


def test_a_registry_that_answers_gone_is_told_from_one_that_does_not_answer(rotten_catalog, monkeypatch):
    [health] = sourcehealth.check_catalog([rotten_catalog.id])
    _skip_if_nothing_answered([health])
    assert [s.status for s in health.sources] == ["gone"] * 4, health
    assert "yanked" in health.sources[1].detail and "does not list" in health.sources[2].detail
    # the same questions with every client's proxy on a closed loopback port: no answer, not "gone"
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("CARGO_NET_RETRY", "0")
    [offline] = sourcehealth.check_catalog([rotten_catalog.id])
    assert {s.status for s in offline.sources} == {"unreachable"}, offline


def test_provisioning_a_gone_pin_fails_and_is_never_a_skip(rotten_catalog):
    with pytest.raises(catalog.ProvisioningFailed) as caught:
        resolution.BUILDS.library(rotten_catalog.id)
    exc = caught.value
    if exc.unreachable_only:
        pytest.skip(f"no registry answered: {exc}")
    assert not no_registry_answered(exc)  # what tests/registries.py skips on
    assert {a.status for a in exc.attempts} == {"gone"}, exc.attempts
    line = str(exc)
    assert "\n" not in line
    for source in (
        "debian trixie-backports libmimalloc3 3.6.1",
        "crate libmimalloc-sys 0.1.41",
        "crate libmimalloc-sys 0.1.99",
        "wheel cmeel-mimalloc 3.6.1",
    ):
        assert source in line, line
    assert "nearest that can be had: mimalloc@3.6.0" in line, line


def test_run_and_check_refuse_a_version_no_registry_serves(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(
        'name = "x"\ncommand = ["sleep", "1"]\nreplicas = 1\n'
        '[[group]]\nname = "a"\nallocator = "glibc"\n[[group]]\nname = "b"\nallocator = "mimalloc@3.6.1"\n'
    )
    for verb in ("check", "run"):
        proc = (
            run_cli(verb, str(exp), "-o", str(tmp_path / "run"), timeout=600)
            if verb == "run"
            else run_cli(verb, str(exp), timeout=600)
        )
        err = [line for line in proc.stderr.splitlines() if line.startswith("alloclab: error")]
        if proc.returncode == 2 and "could be listed" in proc.stderr:
            pytest.skip(f"no registry answered: {err}")
        assert proc.returncode == 2 and len(err) == 1, proc.stderr
        assert (
            "group b" in err[0] and "mimalloc 3.6.1" in err[0] and "nearest that can be had: mimalloc@3.6.0" in err[0]
        ), err
    assert not (tmp_path / "run" / "run.db").exists()


def test_provenance_says_which_source_served(monkeypatch, tmp_path):
    """The first source that works serves, and the build records which one (a dead first source
    falls through to the next)."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path / "cache"))
    real = catalog.pinned("mimalloc@2.0.9")
    entry = catalog.Entry("mimalloc@2.0.9", "mimalloc", "2.0.9", None, (GONE_SOURCES[2], *real.sources))
    b = catalog.build(entry)
    assert b.provenance["source_index"] == 1 and b.provenance["source"]["kind"] == real.sources[0]["kind"]
    assert os.path.exists(b.path)
