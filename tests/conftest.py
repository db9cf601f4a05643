"""Shared fixtures: real allocator libraries from Debian's packages, the built native programs,
and a helper to run the real `alloclab` CLI."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATASETS = REPO / "tests" / "data" / "1aeo-torutils"  # copied in, see tests/data/README.md


def system_lib(soname: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/*/{soname}"))
    if not found:
        pytest.fail(f"{soname} missing: run scripts/install.sh --test")
    return found[0]


@pytest.fixture(scope="session")
def jemalloc() -> str:
    return system_lib("libjemalloc.so.2")


@pytest.fixture(scope="session")
def mimalloc() -> str:
    return system_lib("libmimalloc.so.2")


@pytest.fixture(scope="session")
def native_dir() -> Path:
    from alloclab.native import build

    return build.build_dir()


@pytest.fixture(scope="session")
def test_native_dir() -> Path:
    """The tests' own native programs (tests/native): lazyfree, frag-static."""
    from tests.prebuild import native_tooling

    return native_tooling()


def own_cache(path: Path, native_dir: Path) -> Path:
    """An alloclab cache of a test's own (for ALLOCLAB_CACHE): its allocator builds and registry
    listings start empty; its native programs are the session's, not built again for it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "native").symlink_to(native_dir.parent)
    return path


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """The real CLI in a child process, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "alloclab", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in the main thread while the test runs. Tests that end a
    blocking call with `_thread.interrupt_main()` need it: that call does nothing when SIGINT is
    ignored, as it is for pytest started in the background by a shell without job control
    (`nohup ... &`), and the call under test would then never end."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
