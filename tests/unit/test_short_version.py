"""A version written short (`jemalloc@5.3`) is refused in one line with "did you mean
jemalloc@5.3.0", exit 2, before any registry is asked or anything is built (issue 52: it printed
29 provisioning lines and no suggestion)."""

from __future__ import annotations

import pytest

from alloclab.allocators import catalog
from tests.conftest import run_cli


@pytest.mark.parametrize(
    "given,meant",
    [
        ("jemalloc@5.3", "jemalloc@5.3.0"),  # the padded version, when the catalog pins it
        ("jemalloc@5", "jemalloc@5.1.0"),  # else the lowest the catalog pins that extends it
        ("mimalloc@2.1+secure", "mimalloc@2.1.2+secure"),
    ],
)
def test_a_short_version_gets_the_version_meant(given, meant):
    err = catalog.short_version(given)
    assert err is not None and f"did you mean {meant}?" in str(err)


@pytest.mark.parametrize("given", ["jemalloc@5.3.0", "jemalloc@5.3.1", "tcmalloc@2.1", "nosuch@1.2", "jemalloc"])
def test_a_full_or_unrelated_id_is_not_short(given):
    assert catalog.short_version(given) is None


@pytest.mark.parametrize("argv", [["allocators", "build", "jemalloc@5.3"], ["allocators", "path", "jemalloc@5.3"]])
def test_the_cli_says_it_in_one_line_and_asks_no_registry(tmp_path, argv):
    p = run_cli(
        *argv,
        env={
            "ALLOCLAB_CACHE": str(tmp_path / "cache"),
            "http_proxy": "http://127.0.0.1:9",
            "https_proxy": "http://127.0.0.1:9",
        },
        timeout=60,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "did you mean jemalloc@5.3.0?" in p.stderr and "provisioning" not in p.stderr
    assert not (tmp_path / "cache").exists()  # nothing built, no registry listing read or cached
