"""The built-in workload models: determinism, exact live bytes, no crash or fd leak under the
default allocators, and a side channel that survives a workload killed mid-write."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess

import pytest

from alloclab.run.workloads import MODELS, read_stats
from tests.conftest import run_cli
from tests.registries import published_library

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them

QUICK = {
    "tor-dircache": [
        "--load",
        "2",
        "--hour",
        "0.5",
        "--tph",
        "10",
        "--relays",
        "500",
        "--doc-kb",
        "200",
        "--clients",
        "300",
        "--circuits",
        "100",
        "--keep",
        "3",
    ],
    "worker-pool": ["--builds", "2", "--modules", "200", "--gap", "0", "--threads", "3"],
    "larson": ["--rounds", "3", "--slots", "2000"],
    "xmalloc": ["--rounds", "3", "--slots", "2000"],
    "sawtooth": ["--load", "1", "--period", "0.5", "--mb", "8"],
    "frag": ["--load", "1", "--mb", "4"],
}
DETERMINISTIC = [w for w in QUICK if w != "frag"]  # frag is time-driven by design
DEFAULT_ALLOCATORS = ["glibc", "jemalloc@5.3.0", "mimalloc@2.0.9", "mimalloc@3.0.1", "mimalloc@3.7.0"]


def run_workload(native_dir, name, *extra, env=None):
    model = MODELS[name]
    proc = subprocess.run(
        [str(native_dir / model.program), *model.fixed, *QUICK[name], *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, (name, proc.stderr)
    return proc.stdout


def field(out: str, key: str) -> str:
    return re.search(rf"{key}=(\S+)", out).group(1)


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_same_seed_same_operations(native_dir, name):
    a = run_workload(native_dir, name, "--seed", "11")
    b = run_workload(native_dir, name, "--seed", "11")
    c = run_workload(native_dir, name, "--seed", "12")
    assert field(a, "digest") == field(b, "digest") != field(c, "digest")
    assert field(a, "ops") == field(b, "ops")


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_live_bytes_are_exact(native_dir, name):
    """The running counter equals a fresh walk over everything the workload still holds."""
    out = run_workload(native_dir, name, "--verify-live", "1")
    walked, counter = int(field(out, "walked")), int(field(out, "counter"))
    assert walked == counter
    if name not in ("xmalloc",):
        assert counter > 0


@pytest.fixture(scope="module")
def default_libraries():
    return {a: None if a == "glibc" else published_library(a) for a in DEFAULT_ALLOCATORS}


@pytest.mark.parametrize("allocator", DEFAULT_ALLOCATORS)
def test_every_workload_under_every_default_allocator(native_dir, default_libraries, allocator):
    env = {"LD_PRELOAD": default_libraries[allocator]} if default_libraries[allocator] else {}
    for name in QUICK:
        out = run_workload(native_dir, name, env=env)
        start, end = re.search(r"fds start=(-?\d+) end=(-?\d+)", out).groups()
        assert start == end and int(start) > 0, (name, allocator, out)


def test_side_channel_survives_a_kill_mid_write(tmp_path, native_dir):
    """A workload dies in the middle of publishing: alloclab keeps what it had and finishes."""
    stats = tmp_path / "stats.bin"
    proc = subprocess.run(
        [str(native_dir / "frag"), "--load", "5", "--mb", "4"],
        env={**os.environ, "ALLOCLAB_STATS": str(stats), "ALLOCLAB_STATS_CRASH_AFTER": "5"},
    )
    assert proc.returncode == -9
    assert stats.stat().st_size == 64 and read_stats(stats) is None  # torn, and recognised as torn
    exp = tmp_path / "exp.toml"
    exp.write_text("""
name = "torn"
interval = "0.2s"
[phases]
load = "10s"
[workload]
name = "frag"
mb = 4
threads = 1
[[group]]
name = "g"
allocator = "glibc"
env = { ALLOCLAB_STATS_CRASH_AFTER = "15" }
""")
    run = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    live = [r[0] for r in db.execute("SELECT live_bytes FROM samples ORDER BY t")]
    assert any(v for v in live) and 0xDEADBEEF not in live
    # killed by a signal mid-write: the runner records it as a crash (docs/reference/store.md)
    assert db.execute("SELECT COUNT(*) FROM events WHERE kind = 'replica_crash'").fetchone()[0] == 1
    assert (tmp_path / "run" / "report.md").exists()


def test_workload_parameters_are_checked(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(
        'name = "w"\n[workload]\nname = "tor-dircache"\nrelays = -3\n[[group]]\nname = "g"\nallocator = "glibc"\n'
    )
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "r"))
    assert proc.returncode == 2 and "relays = -3 must be a non-negative number" in proc.stderr
    exp.write_text(
        'name = "w"\n[workload]\nname = "tor-dircache"\nrelayz = 3\n[[group]]\nname = "g"\nallocator = "glibc"\n'
    )
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "r"))
    assert proc.returncode == 2 and "no parameter 'relayz'" in proc.stderr and "relays" in proc.stderr
