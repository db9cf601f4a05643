"""Resolution and verification against real libraries in real processes."""
import contextlib
import os
import shutil
import stat
import subprocess
import time

import pytest

from alloclab import allocators
from alloclab.errors import UserError


def test_glibc_reports_its_version():
    spec = allocators.resolve("glibc")
    assert spec.kind == "glibc" and spec.family == "glibc"
    assert spec.version == os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def test_jemalloc_and_mimalloc_report_themselves(jemalloc, mimalloc):
    je = allocators.resolve(jemalloc)
    mi = allocators.resolve(mimalloc)
    assert (je.family, mi.family) == ("jemalloc", "mimalloc")
    assert je.version.count(".") == 2 and mi.version.count(".") == 2
    assert je.sha256 == allocators.sha256_file(jemalloc) and je.inode == os.stat(jemalloc).st_ino


@pytest.mark.parametrize("raw,family,want", [("209", "mimalloc", "2.0.9"), ("30600", "mimalloc", "3.6.0"),
                                             ("301", "mimalloc", "3.0.1"), ("5.3.0-0-g54eaed1d", "jemalloc", "5.3.0"),
                                             ("gperftools 2.10", "tcmalloc", "2.10")])
def test_version_normalisation(raw, family, want):
    assert allocators.normalise_version(family, raw) == want


def test_a_library_that_is_not_an_allocator_is_refused(tmp_path):
    libm = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6") if os.path.exists(p))
    with pytest.raises(UserError, match="malloc still resolves to"):
        allocators.resolve(libm)


def test_world_writable_library_is_refused(tmp_path, jemalloc):
    copy = tmp_path / "libjemalloc.so.2"
    shutil.copy(jemalloc, copy)
    tmp_path.chmod(0o755)
    copy.chmod(0o666)
    with pytest.raises(UserError, match="group- or world-writable"):
        allocators.resolve(str(copy))
    copy.chmod(0o644)
    tmp_path.chmod(0o777)
    with pytest.raises(UserError, match="directory of the library"):
        allocators.resolve(str(copy))


def test_missing_library(tmp_path):
    with pytest.raises(UserError, match="not found"):
        allocators.resolve(str(tmp_path / "nope.so"))


@contextlib.contextmanager
def running(argv, env=None):
    """A real process, given a moment to map its libraries; killed afterwards."""
    p = subprocess.Popen(argv, env={**os.environ, **(env or {})})
    time.sleep(0.3)
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def frag(native_dir, static=False):
    return [str(native_dir / ("frag-static" if static else "frag")), "--load", "3", "--mb", "4"]


def test_verify_preloaded_process(jemalloc, native_dir):
    spec = allocators.resolve(jemalloc)
    with running(frag(native_dir), {"LD_PRELOAD": jemalloc}) as pid:
        v = allocators.verify_process(pid, spec)
    assert v.verified is True and "libjemalloc" in v.mapped_allocator


def test_static_binary_is_unverified(jemalloc, native_dir):
    spec = allocators.resolve(jemalloc)
    with running(frag(native_dir, static=True), {"LD_PRELOAD": jemalloc}) as pid:
        v = allocators.verify_process(pid, spec)
    assert v.verified is False and "statically linked" in v.detail


def test_glibc_group_notices_a_foreign_allocator(mimalloc, native_dir):
    with running(frag(native_dir), {"LD_PRELOAD": mimalloc}) as pid:
        v = allocators.verify_process(pid, allocators.resolve("glibc"))
    assert v.verified is False and "libmimalloc" in v.detail


def test_bundled_detection(native_dir):
    with running(frag(native_dir)) as pid:
        v = allocators.verify_process(pid, allocators.resolve("bundled"))
    assert v.verified is None and "could not verify" in v.detail
