"""No false "verified": real programs that carry their own allocator (issue 17, item 6).

tests/data/embedded-rust is a small Rust program whose #[global_allocator] is mimalloc (the
`mimalloc` crate) or jemalloc (`tikv-jemallocator`), stripped like shipped binaries. It is built
once with cargo into the cache (keyed by the hash of its sources and Cargo.lock), so later runs
start at once. A shared object that embeds mimalloc and exports nothing of it (like rolldown's
binding) is linked here from the same build, and loaded into a Python process.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.allocators import embedded, library, resolution
from tests.conftest import run_cli
from tests.prebuild import BuildFailed, embedded_rust

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them


def build(binary: str, feature: str) -> Path:
    """The built program (tests/prebuild.py builds it before the suite runs; built here otherwise)."""
    try:
        return embedded_rust(binary, feature)
    except BuildFailed as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def rust_mimalloc() -> Path:
    return build("embedded-mimalloc", "mimalloc")


@pytest.fixture(scope="module")
def rust_jemalloc() -> Path:
    return build("embedded-jemalloc", "tikv-jemallocator")


@pytest.fixture(scope="module")
def hidden_mimalloc_object(rust_mimalloc, tmp_path_factory) -> Path:
    """A shared object with mimalloc linked in and every symbol of it hidden: only `binding_work` is exported."""
    archives = glob.glob(str(rust_mimalloc.parent / "build" / "libmimalloc-sys-*" / "out" / "libmimalloc.a"))
    assert archives, "the mimalloc crate's build left no libmimalloc.a"
    d = tmp_path_factory.mktemp("binding")
    (d / "binding.c").write_text(
        "#include <stddef.h>\nvoid *mi_malloc(size_t);\nvoid *binding_work(size_t n) { return mi_malloc(n); }\n"
    )
    (d / "binding.map").write_text("{ global: binding_work; local: *; };\n")
    so = d / "rolldown-like-binding.linux-x64-gnu.node"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            str(so),
            str(d / "binding.c"),
            archives[0],
            f"-Wl,--version-script={d / 'binding.map'}",
            "-lpthread",
        ],
        check=True,
        capture_output=True,
    )
    dyn = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "binding_work" in dyn and "mi_malloc" not in dyn  # exports nothing of mimalloc
    return so


@contextlib.contextmanager
def running(argv, env=None, ready=b"ready", drop=()):
    """A real process, waited for until it says it is ready (its heap allocated); killed afterwards."""
    full = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    p = subprocess.Popen([str(a) for a in argv], env=full, stdout=subprocess.PIPE)
    try:
        line = p.stdout.readline()
        assert ready in line, line
        yield p.pid
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def test_embedded_mimalloc_under_glibc_is_not_verified(rust_mimalloc):
    with running([rust_mimalloc]) as pid:
        v = library.verify_process(pid, resolution.resolve("glibc"))
    assert v.verified is False and v.state == "embedded" and v.embedded == ("mimalloc",)
    assert v.detail == (
        "embedded allocator: the executable embeds mimalloc (statically linked): "
        "its allocations do not go through glibc malloc"
    )
    assert v.mapped_allocator == "embedded:mimalloc"


def test_embedded_mimalloc_under_preloaded_jemalloc_is_not_verified(rust_mimalloc, jemalloc):
    spec = resolution.resolve(jemalloc)
    with running([rust_mimalloc], {"LD_PRELOAD": jemalloc}) as pid:
        assert any(library._same_file(m, spec) for m in library.mapped_files(pid))  # the preload did load
        v = library.verify_process(pid, spec)
    assert v.state == "embedded" and v.embedded == ("mimalloc",)  # the preloaded jemalloc itself does not count
    assert f"the executable embeds mimalloc (statically linked): LD_PRELOAD of {spec.label} does not reach" in v.detail
    assert "not mapped" not in v.detail


def test_embedded_mimalloc_under_preloaded_mimalloc_is_still_not_verified(rust_mimalloc, mimalloc):
    spec = resolution.resolve(mimalloc)
    with running([rust_mimalloc], {"LD_PRELOAD": mimalloc}) as pid:
        v = library.verify_process(pid, spec)
    assert v.state == "embedded" and "the executable embeds mimalloc" in v.detail


def test_embedded_jemalloc_is_named(rust_jemalloc, mimalloc):
    spec = resolution.resolve(mimalloc)
    with running([rust_jemalloc], {"LD_PRELOAD": mimalloc}) as pid:
        v = library.verify_process(pid, spec)
    assert v.state == "embedded" and v.embedded == ("jemalloc",)
    assert f"the executable embeds jemalloc (statically linked): LD_PRELOAD of {spec.label}" in v.detail


def test_bundled_group_finds_the_embedded_allocator(rust_mimalloc):
    with running([rust_mimalloc]) as pid:
        v = library.verify_process(pid, resolution.resolve("bundled"))
    assert v.verified is True and v.detail == "bundled allocator found: mimalloc in the executable"


def test_allocator_hidden_in_a_loaded_object(hidden_mimalloc_object):
    """The rolldown case: the executable (python) is clean; a loaded object carries mimalloc."""
    code = (
        "import ctypes, sys, time\nlib = ctypes.CDLL(sys.argv[1])\nlib.binding_work.restype = ctypes.c_void_p\n"
        "assert lib.binding_work(1000)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    with running([sys.executable, "-c", code, hidden_mimalloc_object]) as pid:
        v = library.verify_process(pid, resolution.resolve("glibc"))
    assert v.state == "embedded"
    assert v.detail.startswith(f"embedded allocator: {hidden_mimalloc_object.name} embeds mimalloc (statically linked)")


def test_plain_programs_are_still_verified(native_dir, mimalloc):
    """No false positives: python (which mentions malloc everywhere), C workloads, the preloaded library itself."""
    code = "import sqlite3, ssl, json, ctypes; print('ready', flush=True); import time; time.sleep(60)"
    with running([sys.executable, "-c", code]) as pid:
        v = library.verify_process(pid, resolution.resolve("glibc"))
        assert (v.verified, v.embedded) == (True, ())
    spec = resolution.resolve(mimalloc)
    with running([sys.executable, "-c", code], {"LD_PRELOAD": mimalloc}) as pid:
        v = library.verify_process(pid, spec)
        assert (v.verified, v.embedded) == (True, ())


def test_scan_is_done_once_per_file(rust_mimalloc):
    """Periodic verification reads a mapped object once: later passes are answered from the cache."""
    with running([rust_mimalloc]) as pid:
        spec = resolution.resolve("glibc")
        library.verify_process(pid, spec)
        calls = []
        real = embedded.scan_file
        embedded.scan_file = lambda fd: calls.append(fd) or real(fd)
        try:
            t0 = time.perf_counter()
            for _ in range(20):
                assert library.verify_process(pid, spec).state == "embedded"
            per_pass = (time.perf_counter() - t0) / 20
        finally:
            embedded.scan_file = real
    assert calls == [] and per_pass < 0.05, (calls, per_pass)


def test_signature_scan_on_real_libraries(jemalloc, mimalloc):
    """Positive controls (the libraries themselves, with their symbols) and negative ones."""
    assert [f.family for f in embedded.scan_path(mimalloc)] == ["mimalloc"]
    assert [f.family for f in embedded.scan_path(jemalloc)] == ["jemalloc"]
    assert "mallctl" in embedded.scan_path(jemalloc)[0].evidence  # a defined symbol
    libc = next(p for p in glob.glob("/usr/lib/*/libc.so.6"))
    for clean in (sys.executable, os.path.realpath(sys.executable), libc, "/bin/sh"):
        assert embedded.scan_path(clean) == (), clean


def test_run_reports_the_embedded_allocator(rust_mimalloc, jemalloc, tmp_path):
    """Through the real CLI: a glibc group and a jemalloc group, neither verified, both saying why."""
    exp = tmp_path / "exp.toml"
    exp.write_text(f"""
name = "embedded"
command = ["{rust_mimalloc}"]
replicas = 1
interval = "0.5s"
[phases]
warmup = "0.5s"
load = "2s"
[[group]]
name = "glibc"
allocator = "glibc"
[[group]]
name = "jemalloc"
allocator = "{jemalloc}"
""")
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    rows = dict(
        db.execute(
            "SELECT g.name, r.verified || '|' || r.verify_detail FROM replicas r JOIN groups g ON g.id = r.group_id"
        ).fetchall()
    )
    assert rows["glibc"] == (
        "0|embedded allocator: the executable embeds mimalloc (statically linked): "
        "its allocations do not go through glibc malloc"
    )
    assert rows["jemalloc"].startswith(
        "0|embedded allocator: the executable embeds mimalloc (statically linked): LD_PRELOAD of jemalloc"
    )
    recorded = db.execute("SELECT DISTINCT verified, mapped_allocator FROM verifications").fetchall()
    assert recorded == [(0, "embedded:mimalloc")]
    # the families as data beside the words: what the analysis reads (it never parses verify_detail)
    assert db.execute("SELECT DISTINCT embedded_json FROM replicas").fetchall() == [('["mimalloc"]',)]
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.count("embedded allocator: the executable embeds mimalloc (statically linked)") >= 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    [warning] = [w for w in summary["warnings"] if w["kind"] == "embedded-allocator"]
    assert sorted(warning["replicas"]) == ["glibc-1", "jemalloc-1"] and warning["severity"] == "serious"


def _python_with_mimalloc() -> str | None:
    """A CPython 3.13+ on PATH (which compiles mimalloc in, used only when PYTHONMALLOC selects it);
    nothing in the user's home is searched."""
    cands = [shutil.which(f"python3.{v}") for v in range(13, 20)]
    for c in filter(None, cands):
        out = subprocess.run(
            [c, "-c", "import sysconfig; print(sysconfig.get_config_var('WITH_MIMALLOC'))"],
            capture_output=True,
            text=True,
        )
        if out.stdout.strip() == "1":
            return c
    return None


@pytest.mark.skipif(
    _python_with_mimalloc() is None,
    reason="no CPython 3.13+ built with mimalloc on PATH as python3.13 ... python3.19 "
    "(Debian 12 has none; e.g. PATH=$(pyenv prefix 3.13.0)/bin:$PATH runs this test)",
)
def test_cpython_mimalloc_counts_only_when_selected():
    py = _python_with_mimalloc()
    code = "print('ready', flush=True); import time; time.sleep(60)"
    glibc = resolution.resolve("glibc")
    with running([py, "-c", code], drop=("PYTHONMALLOC",)) as pid:
        v = library.verify_process(pid, glibc)
    assert (v.verified, v.embedded) == (True, ()), v  # default pymalloc + malloc: glibc serves it
    with running([py, "-c", code], {"PYTHONMALLOC": "mimalloc"}) as pid:
        v = library.verify_process(pid, glibc)
    assert v.state == "embedded" and "embeds mimalloc" in v.detail
