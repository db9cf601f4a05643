"""Resolution and verification against real libraries in real processes."""

import contextlib
import os
import shutil
import subprocess

import pytest

from alloclab.allocators import library, resolution
from alloclab.common.errors import UserError
from tests.waiting import wait_until_mapped


def test_glibc_reports_its_version():
    spec = resolution.resolve("glibc")
    assert spec.kind == "glibc" and spec.family == "glibc"
    assert spec.version == os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def test_jemalloc_and_mimalloc_report_themselves(jemalloc, mimalloc):
    je = resolution.resolve(jemalloc)
    mi = resolution.resolve(mimalloc)
    assert (je.family, mi.family) == ("jemalloc", "mimalloc")
    assert je.version.count(".") == 2 and mi.version.count(".") == 2
    assert je.sha256 == library.sha256_file(jemalloc) and je.inode == os.stat(jemalloc).st_ino


@pytest.mark.parametrize(
    "raw,family,want",
    [
        ("209", "mimalloc", "2.0.9"),
        ("30600", "mimalloc", "3.6.0"),
        ("301", "mimalloc", "3.0.1"),
        ("5.3.0-0-g54eaed1d", "jemalloc", "5.3.0"),
        ("gperftools 2.10", "tcmalloc", "2.10"),
    ],
)
def test_version_normalisation(raw, family, want):
    assert library.normalise_version(family, raw) == want


def test_a_library_that_is_not_an_allocator_is_refused(tmp_path):
    libm = next(
        p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6") if os.path.exists(p)
    )
    with pytest.raises(UserError, match="malloc still resolves to"):
        resolution.resolve(libm)


def test_world_writable_library_is_refused(tmp_path, jemalloc):
    copy = tmp_path / "libjemalloc.so.2"
    shutil.copy(jemalloc, copy)
    tmp_path.chmod(0o755)
    copy.chmod(0o666)
    with pytest.raises(UserError, match=f"library {copy} is group- or world-writable"):
        resolution.resolve(str(copy))
    copy.chmod(0o644)
    tmp_path.chmod(0o777)
    with pytest.raises(UserError, match=f"directory {tmp_path} is group- or world-writable"):
        resolution.resolve(str(copy))


# ---- preload safety: owners and modes of the whole chain, with real files and a real other user ----

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")


@pytest.fixture
def tree(tmp_path, jemalloc):
    """tmp/a/b/lib.so, all root-owned 0755/0644: safe until a test spoils one step."""
    tmp_path.chmod(0o755)
    b = tmp_path / "a" / "b"
    b.mkdir(parents=True)
    for d in (tmp_path / "a", b):
        d.chmod(0o755)
    lib = b / "libjemalloc.so.2"
    shutil.copy(jemalloc, lib)
    lib.chmod(0o644)
    library.check_preload_safe(lib)  # the baseline passes
    return tmp_path, lib


def refused(lib, *needles):
    with pytest.raises(UserError) as e:
        library.check_preload_safe(lib)
    msg = str(e.value)
    assert "\n" not in msg and " — " in msg  # one line: the problem, then the fix
    for n in needles:
        assert n in msg, msg
    return msg


def test_world_writable_grandparent_is_refused(tree):
    root, lib = tree
    (root / "a").chmod(0o777)
    refused(
        lib,
        f"directory {root / 'a'} is group- or world-writable",
        "world-writable, mode 0777",
        f"chmod go-w {root / 'a'}",
    )
    (root / "a").chmod(0o775)
    refused(lib, f"directory {root / 'a'}", "group-writable, mode 0775")


def test_sticky_world_writable_directory_owned_by_root_is_accepted(tree):
    root, lib = tree
    (root / "a").chmod(0o1777)  # like /tmp: others may add entries, not replace ours
    library.check_preload_safe(lib)
    assert resolution.resolve(str(lib)).family == "jemalloc"


@pytest.mark.root
@needs_root
def test_library_owned_by_another_user_is_refused(tree):
    root, lib = tree
    os.chown(lib, NOBODY, -1)
    refused(lib, f"library {lib} is owned by uid {NOBODY}", "not by root", f"chown root {lib}")
    with pytest.raises(UserError, match="owned by uid"):
        resolution.resolve(str(lib))  # the path experiments take


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("step", ["a", "a/b"])
def test_directory_owned_by_another_user_is_refused(tree, step):
    root, lib = tree
    os.chown(root / step, NOBODY, -1)  # mode 0755: only its owner can write, but that owner is not us
    refused(lib, f"directory {root / step} is owned by uid {NOBODY}")


@pytest.mark.root
@needs_root
def test_sticky_directory_owned_by_another_user_is_refused(tree):
    root, lib = tree
    (root / "a").chmod(0o1777)
    os.chown(root / "a", NOBODY, -1)
    refused(lib, f"directory {root / 'a'} is owned by uid {NOBODY}")


def test_symlink_chain_is_checked_where_it_leads(tree, tmp_path_factory):
    root, lib = tree
    safe = tmp_path_factory.mktemp("links")
    safe.chmod(0o755)
    link = safe / "libjemalloc.so"
    link.symlink_to(lib)
    library.check_preload_safe(link)
    assert resolution.resolve(str(link)).path == str(lib)
    (root / "a").chmod(0o777)  # the target's grandparent: the link's own directory is fine
    refused(link, f"directory {root / 'a'} is group- or world-writable")
    (root / "a").chmod(0o755)
    hop = safe / "hop"  # a relative link to a directory, then ".." across it
    hop.symlink_to(os.path.relpath(root / "a" / "b", safe))
    library.check_preload_safe(safe / "hop" / ".." / "b" / lib.name)
    (root / "a").chmod(0o777)
    refused(safe / "hop" / lib.name, f"directory {root / 'a'}")


@pytest.mark.root
@needs_root
def test_symlink_owned_by_another_user_is_refused(tree, tmp_path_factory):
    root, lib = tree
    sticky = tmp_path_factory.mktemp("sticky")
    sticky.chmod(0o1777)
    link = sticky / "libjemalloc.so"
    link.symlink_to(lib)
    os.lchown(link, NOBODY, -1)  # in a sticky directory its owner may re-point it at will
    refused(link, f"symbolic link {link} is owned by uid {NOBODY}")


def test_not_a_regular_file_is_refused(tree):
    root, lib = tree
    fifo = lib.parent / "libfifo.so"
    os.mkfifo(fifo, 0o644)
    refused(fifo, f"{fifo} is not a regular file")
    refused(lib.parent, f"{lib.parent} is not a regular file")


@pytest.mark.root
@needs_root
def test_cli_refuses_an_unsafe_library_in_one_line(tree, tmp_path_factory):
    from tests.conftest import run_cli

    root, lib = tree
    os.chown(root / "a", NOBODY, -1)
    work = tmp_path_factory.mktemp("exp")
    exp = work / "exp.toml"
    exp.write_text(f'name = "unsafe"\ncommand = ["/bin/sleep", "1"]\n[[group]]\nname = "je"\nallocator = "{lib}"\n')
    proc = run_cli("run", str(exp), "-o", str(work / "run"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"directory {root / 'a'} is owned by uid {NOBODY}" in lines[0] and "chown root" in lines[0]
    assert not (work / "run").exists() or not any((work / "run").iterdir())


def test_missing_library(tmp_path):
    with pytest.raises(UserError, match="not found"):
        resolution.resolve(str(tmp_path / "nope.so"))


@contextlib.contextmanager
def running(argv, mapped: str, env=None):
    """A real process, once its /proc/PID/maps shows `mapped` (its libraries are loaded); killed afterwards."""
    p = subprocess.Popen(argv, env={**os.environ, **(env or {})})
    try:
        wait_until_mapped(p.pid, mapped)
        yield p.pid
    finally:
        p.kill()
        p.wait()


def frag(native_dir, static=False):
    return [str(native_dir / ("frag-static" if static else "frag")), "--load", "3", "--mb", "4"]


def test_verify_preloaded_process(jemalloc, native_dir):
    spec = resolution.resolve(jemalloc)
    with running(frag(native_dir), os.path.realpath(jemalloc), {"LD_PRELOAD": jemalloc}) as pid:
        v = library.verify_process(pid, spec)
    assert v.verified is True and "libjemalloc" in v.mapped_allocator


def test_static_binary_is_unverified(jemalloc, test_native_dir):
    spec = resolution.resolve(jemalloc)
    with running(frag(test_native_dir, static=True), "frag-static", {"LD_PRELOAD": jemalloc}) as pid:  # nothing to load
        v = library.verify_process(pid, spec)
    assert v.verified is False and "statically linked" in v.detail


def test_glibc_group_notices_a_foreign_allocator(mimalloc, native_dir):
    with running(frag(native_dir), os.path.realpath(mimalloc), {"LD_PRELOAD": mimalloc}) as pid:
        v = library.verify_process(pid, resolution.resolve("glibc"))
    assert v.verified is False and "libmimalloc" in v.detail


def test_bundled_detection(native_dir):
    with running(frag(native_dir), "libc.so") as pid:
        v = library.verify_process(pid, resolution.resolve("bundled"))
    assert v.verified is None and "could not verify" in v.detail
