"""Provisioning through real registries: Debian binary, Debian source, crate, PyPI wheel.
Each build is verified by the probe and then runs a real program under LD_PRELOAD."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from alloclab.allocators import catalog, library, options, resolution, tunables
from alloclab.common.errors import UserError
from tests.conftest import own_cache, run_cli
from tests.registries import registry_or_skip
from tests.waiting import wait_until_mapped

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them

ROUTES = {
    "mimalloc@3.0.1": ("debian-binary", "3.0.1", 0),
    "mimalloc@2.0.9+secure": ("debian-source", "2.0.9", 4),
    "mimalloc@2.1.7": ("crate", "2.1.7", 0),
    "jemalloc@5.2.1": ("crate", "5.2.1", None),
    "mimalloc@3.2.8": ("pypi-wheel", "3.2.8", 0),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory, native_dir):
    """A cache of our own, so the routes are really exercised, not found from earlier runs (the
    native programs are the session's: the CLI below would otherwise build them all again)."""
    root = own_cache(tmp_path_factory.mktemp("cache"), native_dir)
    old = os.environ.get("ALLOCLAB_CACHE")
    os.environ["ALLOCLAB_CACHE"] = str(root)
    yield root
    if old is None:
        del os.environ["ALLOCLAB_CACHE"]
    else:
        os.environ["ALLOCLAB_CACHE"] = old


@pytest.fixture(scope="module")
def builds(cache):
    """Every route built at once, as `alloclab allocators build --jobs N` builds (threads): the
    downloads and jemalloc's single-threaded configure overlap the other routes' compilers."""
    with registry_or_skip("the routes' sources (Debian's archive, crates, PyPI)"):
        with ThreadPoolExecutor(max_workers=len(ROUTES)) as pool:
            started = {i: pool.submit(catalog.build, catalog.pinned(i)) for i in ROUTES}
        return {i: f.result() for i, f in started.items()}


@pytest.mark.parametrize("allocator_id", list(ROUTES))
def test_route_builds_verifies_and_runs(builds, allocator_id, native_dir):
    kind, version, secure = ROUTES[allocator_id]
    b = builds[allocator_id]
    assert b.provenance["source"]["kind"] == kind
    assert b.provenance["reported"]["version"] == version
    assert b.provenance["reported"]["secure_level"] == secure
    assert b.provenance["library_sha256"] == library.sha256_file(b.path)
    assert len(b.provenance["source"]["sha256"]) == 64
    # a real program under it maps exactly this file
    spec = resolution.resolve(allocator_id)
    assert spec.path == str(b.path) and spec.version == version
    p = subprocess.Popen(
        [str(native_dir / "frag"), "--load", "2", "--mb", "4"],
        env={**os.environ, "LD_PRELOAD": str(b.path)},
        stdout=subprocess.PIPE,
    )
    try:
        wait_until_mapped(p.pid, os.path.realpath(b.path), timeout=30)
        assert library.verify_process(p.pid, spec).verified is True
    finally:
        out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and b"frag: ops=" in out
    if allocator_id.startswith("mimalloc"):  # its options as it prints them (3.2.8: no "mimalloc: " before them)
        read = options.library_options("mimalloc", str(b.path), {"MIMALLOC_MAX_WARNINGS": "7"})
        assert read.get("max_warnings") == "7" and "show_errors" in read, read


def test_cli_verify_and_path(builds):
    proc = run_cli("allocators", "verify", "mimalloc@2.0.9+secure")
    assert proc.returncode == 0 and "secure level 4" in proc.stdout
    proc = run_cli("allocators", "path", "mimalloc@3.0.1")
    assert proc.stdout.strip() == str(builds["mimalloc@3.0.1"].path)


def test_changed_bytes_are_refused(builds, tmp_path):
    b = builds["mimalloc@2.1.7"]
    saved = tmp_path / "saved.so"
    shutil.copy2(b.path, saved)
    try:
        with open(b.path, "ab") as f:
            f.write(b"\0")
        with pytest.raises(UserError, match="changed after it was built"):
            resolution.BUILDS.library("mimalloc@2.1.7")
        proc = run_cli("allocators", "verify", "mimalloc@2.1.7")
        assert proc.returncode == 2 and "changed after it was built" in proc.stderr
    finally:
        shutil.copy2(saved, b.path)
        b.path.chmod(0o644)
    assert resolution.BUILDS.library("mimalloc@2.1.7") == b.path


def test_world_writable_copy_is_refused(builds):
    b = builds["mimalloc@3.0.1"]
    try:
        b.path.chmod(0o666)
        with pytest.raises(UserError, match="world-writable"):
            resolution.BUILDS.library("mimalloc@3.0.1")
    finally:
        b.path.chmod(0o644)


@pytest.mark.parametrize(
    "bad,needles",
    [
        ("nosuch@1.0", ["unknown allocator family", "jemalloc"]),
        ("mimalloc-2.0.9", ["not a catalog id"]),
    ],
)
def test_bad_ids_list_the_valid_choices(bad, needles):
    proc = run_cli("allocators", "build", bad)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and all(n in line for n in needles), line


def test_tunables_are_checked_against_the_very_library(builds):
    old = str(builds["mimalloc@2.0.9+secure"].path)
    new = str(builds["mimalloc@2.1.7"].path)
    tunables.validate({"MIMALLOC_PURGE_DELAY": "0"}, "mimalloc", new, "g")  # 2.1 has purge_delay
    with pytest.raises(UserError, match="not an option of this mimalloc") as err:
        tunables.validate({"MIMALLOC_PURGE_DELAY": "0"}, "mimalloc", old, "g")  # 2.0.9 called it reset_delay
    assert "MIMALLOC_RESET_DELAY" in str(err.value)
    je = str(builds["jemalloc@5.2.1"].path)
    tunables.validate({"MALLOC_CONF": "dirty_decay_ms:1000,background_thread:true"}, "jemalloc", je, "g")
    with pytest.raises(UserError, match="dirty_decay:1000"):
        tunables.validate({"MALLOC_CONF": "dirty_decay:1000"}, "jemalloc", je, "g")
    with pytest.raises(UserError, match="is a mimalloc option"):
        tunables.validate({"MIMALLOC_PURGE_DELAY": "0"}, "jemalloc", je, "g")
    with pytest.raises(UserError, match="unknown tunable glibc.malloc.arena_maxx"):
        tunables.validate({"GLIBC_TUNABLES": "glibc.malloc.arena_maxx=2"}, "glibc", None, "g")
    tunables.validate(
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "MALLOC_ARENA_MAX": "2", "APP_FLAG": "x"}, "glibc", None, "g"
    )


def test_experiment_with_catalog_ids_and_unknown_tunable(builds, tmp_path, native_dir):
    exp = tmp_path / "exp.toml"
    exp.write_text(f"""
name = "cat"
command = ["{native_dir / "frag"}", "--load", "3", "--mb", "4"]
interval = "0.5s"
[[group]]
name = "v301"
allocator = "mimalloc@3.0.1"
[[group]]
name = "v209s"
allocator = "mimalloc@2.0.9+secure"
env = {{ MIMALLOC_PURGE_DELAY = "0" }}
""")
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "bad"))
    assert proc.returncode == 2 and "MIMALLOC_PURGE_DELAY is not an option of this mimalloc" in proc.stderr
    exp.write_text(exp.read_text().replace('MIMALLOC_PURGE_DELAY = "0"', 'MIMALLOC_RESET_DELAY = "0"'))
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "good"))
    assert proc.returncode == 0, proc.stderr
    import sqlite3

    db = sqlite3.connect(tmp_path / "good" / "run.db")
    rows = db.execute("SELECT name, version, provenance_json FROM groups ORDER BY id").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("v301", "3.0.1"), ("v209s", "2.0.9")]
    assert all('"library_sha256"' in r[2] for r in rows)
    assert db.execute("SELECT COUNT(*) FROM replicas WHERE verified = 1").fetchone()[0] == 2
