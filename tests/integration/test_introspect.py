"""The introspection helper in real processes under real allocators (docs/how-to/introspection.md).

Tolerances (why):
- in use vs live requested bytes (medians over 8 helper collections once `frag`, 2 threads,
  48 MB of survivors, has done WARM_OPS of its load): 0.95 x live - 2 MB <= in use <= 1.30 x live + 8 MB. The allocator counts
  whole size classes (jemalloc's spacing rounds up to 25%, mimalloc's 12.5%, glibc adds an 8-byte
  header and 16-byte alignment; frag's sizes are log-uniform 16 B..8 KiB, ~10% on average), and
  the two figures are read up to 100 ms apart while each thread churns a burst of ~5 MB.
- in use + held vs RSS: within 15% of RSS + 6 MB. RSS also holds the program, its libraries and
  stacks (~2-4 MB), and a heap page the allocator counts as mapped may not be touched yet. For
  mimalloc, in use + held is its committed memory, which runs ahead of RSS by pages committed but
  not yet touched: up to 25% of RSS + 6 MB above (seen: +3% to +15% over 5 runs of 3.6.1).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.allocators import tunables
from alloclab.analysis import analyse
from alloclab.analysis.decomposition import decompose
from alloclab.capture import introspect
from alloclab.experiment_file import parse_experiment
from alloclab.native import build
from alloclab.reporters.decomposition import decomposition_data, decomposition_rows, draw_decomposition
from alloclab.reporters.json_summary import summary_document
from alloclab.reporters.report import prepare
from alloclab.reporters.sections import decomposition as decomposition_section
from alloclab.run import workloads
from alloclab.run.runner import Runner
from alloclab.store import Store
from tests.conftest import DATASETS, system_lib
from tests.registries import published_library
from tests.waiting import wait_for

pytestmark = [pytest.mark.network]  # allocators or listings from the registries when alloclab's cache lacks them

MB = 1 << 20


def _env(directory: Path, lib: str | None, interval: float = 0.25) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(introspect.helper_env(directory, interval, 0.05))
    env["LD_PRELOAD"] = introspect.preload_with_helper(lib, introspect.helper_path())
    return env


def _mimalloc_with_stats() -> str:
    """A mimalloc that counts bytes in use in a release build (3.1+), from the catalog."""
    return published_library("mimalloc@3.7.0")


@pytest.fixture(scope="module")
def frag():
    return str(build.program("frag"))


# frag's survivor set fills like a coupon collector: ~128 survivors a round of ~2,560 ops, into
# 48 MB / 1.3 KiB slots; after 1.5 M ops ~86% of the slots hold one (~41 MB). Counting work, not
# seconds, puts every observation past the same point however loaded the machine is.
WARM_OPS = 1_500_000


def _observe(frag: str, lib: str | None, tmp: Path, n: int = 8, timeout: float = 120.0) -> list[tuple]:
    """Run frag under `lib` + the helper; once it has done WARM_OPS of its load, `n` pairs of
    (live bytes, account, RSS bytes), one per helper collection."""
    env = _env(tmp, lib)
    env["ALLOCLAB_STATS"] = str(tmp / "stats.bin")
    # the load outlasts any wait below; the process is killed once the pairs are in
    proc = subprocess.Popen(
        [frag, "--load", "600", "--idle", "30", "--mb", "48", "--threads", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pairs, seen = [], set()
    try:
        deadline = time.monotonic() + timeout
        wait_for(
            lambda: (s := workloads.read_stats(tmp / "stats.bin")) is not None and s.ops >= WARM_OPS,
            timeout,
            f"frag to do {WARM_OPS} ops of its load",
        )
        # a collection made before that point is not one of them
        seen.update(r.collections for st in tmp.glob(f"{proc.pid}-*.bin") if (r := introspect.read_record(st)))
        while len(pairs) < n and time.monotonic() < deadline:
            time.sleep(0.05)
            st = next(iter(p for p in tmp.glob(f"{proc.pid}-*.bin")), None)
            rec = introspect.read_record(st) if st else None
            stats = workloads.read_stats(tmp / "stats.bin")
            if rec is None or stats is None or rec.collections in seen:
                continue
            seen.add(rec.collections)
            rss = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            pairs.append((stats.live_bytes, introspect.account(rec), rss))
    finally:
        proc.kill()
        proc.wait()
    assert len(pairs) == n, f"{len(pairs)} of {n} collections observed in {timeout:g} s"
    return pairs


@pytest.mark.parametrize("family", ["glibc", "jemalloc", "mimalloc"])
def test_in_use_tracks_live_bytes_and_adds_up_to_rss(family, frag, tmp_path):
    lib = {"glibc": None, "jemalloc": system_lib("libjemalloc.so.2"), "mimalloc": _mimalloc_with_stats()}[family]
    pairs = _observe(frag, lib, tmp_path)
    assert {a.family for _, a, _ in pairs} == {family}
    live = statistics.median(p[0] for p in pairs)
    in_use = statistics.median(p[1].in_use for p in pairs)
    held = statistics.median(p[1].held_total for p in pairs)
    rss = statistics.median(p[2] for p in pairs)
    assert live > 30 * MB
    assert 0.95 * live - 2 * MB <= in_use <= 1.30 * live + 8 * MB, (live / MB, in_use / MB)
    ahead = 0.25 if family == "mimalloc" else 0.15  # mimalloc commits ahead of touching (see the module doc)
    assert -(0.15 * rss + 6 * MB) <= in_use + held - rss <= ahead * rss + 6 * MB, (in_use / MB, held / MB, rss / MB)
    if family == "glibc":
        assert pairs[-1][1].arenas >= 2  # two churning threads: malloc_info names their arenas
    if family == "jemalloc":
        assert pairs[-1][1].tunables.get("dirty_decay_ms") == 10000


def test_mimalloc_without_byte_counts_says_so(frag, tmp_path):
    """Debian's mimalloc 2.0.9 counts no bytes in use in a release build: in use is absent (not 0),
    committed and abandoned pages are there."""
    pairs = _observe(frag, system_lib("libmimalloc.so.2"), tmp_path, n=2)
    a = pairs[-1][1]
    assert a.family == "mimalloc" and a.in_use is None and a.held == {}
    # reserved counts arena reservations; committed also counts small OS allocations outside them
    assert a.committed and a.committed > 30 * MB and a.reserved >= 0.99 * a.committed


def test_tcmalloc_best_effort(frag, tmp_path):
    pairs = _observe(frag, system_lib("libtcmalloc_minimal.so.4"), tmp_path, n=2)
    live, a, rss = pairs[-1]
    assert a.family == "tcmalloc" and a.in_use > 0.8 * live and a.mapped >= a.in_use


# ---- fork, exec, exit, static ------------------------------------------------------------------

FORK_EXEC = r"""
import os, sys, time
keep = [bytearray(1 << 20) for _ in range(8)]
pid = os.fork()
if pid == 0:
    more = [bytearray(1 << 20) for _ in range(16)]
    time.sleep(1.2)
    os.execv(sys.argv[1], [sys.argv[1], *sys.argv[2:]])
time.sleep(0.8)
os._exit(0)          # the parent exits while the child lives on
"""


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def test_fork_exec_and_exit(tmp_path, frag, test_native_dir):
    """A forked child gets its own record (not the parent's); exec into a static binary leaves the
    record stale (never read as current); the parent exiting mid-run leaves a readable record; no
    read waits on a process."""
    static = os.path.realpath(test_native_dir / "frag-static")
    env = _env(tmp_path, system_lib("libjemalloc.so.2"), interval=0.2)
    proc = subprocess.Popen(
        [sys.executable, "-c", FORK_EXEC, static, "--load", "3", "--mb", "4"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def record_pids():
        pids = {int(f.name.split("-")[0]) for f in tmp_path.glob("*.bin")}
        return pids if len(pids) >= 2 else None

    pids = wait_for(record_pids, 10, "the forked child's first record (one interval after fork)")
    assert proc.pid in pids and len(pids) == 2, pids  # parent and child, each its own
    child = next(p for p in pids if p != proc.pid)
    try:
        proc.wait(timeout=10)
        t0 = time.monotonic()
        parent_rec = introspect.read_record(next(tmp_path.glob(f"{proc.pid}-*.bin")))
        assert parent_rec is not None and parent_rec.family == "jemalloc"  # exited: still readable
        wait_for(lambda: _exe(child) == static, 10, "the child to exec the static frag")
        child_file = next(tmp_path.glob(f"{child}-*.bin"))
        rec = introspect.read_record(child_file)
        assert rec is not None
        # three of its intervals on the record's own clock, the child alive (and static) throughout
        wait_for(lambda: time.time() > rec.t + 3 * rec.interval_s, 10, "three intervals past the child's last record")
        again = introspect.read_record(child_file)
        assert _exe(child) == static and again.collections == rec.collections  # nobody rewrites it after exec
        assert introspect.is_stale(rec, rec.t + 3 * rec.interval_s + 2.1) and not introspect.is_stale(rec, rec.t + 1)
        assert time.monotonic() - t0 < 5
    finally:
        Path(f"/proc/{child}").exists() and os.kill(child, signal.SIGKILL)


def test_exec_into_dynamic_program_reinitialises(tmp_path):
    env = _env(tmp_path, None, interval=0.2)
    # the shell execs python3 once told to, after its own record has been read
    proc = subprocess.Popen(
        ["/bin/sh", "-c", "read go; exec python3 -c 'import time; x=bytearray(8<<20); time.sleep(6)'"],
        env=env,
        stdin=subprocess.PIPE,
    )

    def record():
        path = next(tmp_path.glob(f"{proc.pid}-*.bin"), None)
        return introspect.read_record(path) if path else None

    try:
        before = wait_for(record, 15, "the shell's first record")
        assert before.fields["in_use"] < 8 * MB  # the shell
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        # python3 starts slowly on a loaded machine
        after = wait_for(
            lambda: (r := record()) is not None and r.fields["in_use"] > 8 * MB and r,
            15,
            "python3's heap in the record after the exec",
        )
        assert after.family == "glibc" and after.t > before.t  # the helper began again after exec
    finally:
        proc.kill()
        proc.wait()


def test_torn_record_is_never_returned(tmp_path):
    path = tmp_path / "1-1.bin"
    body = bytearray(introspect.RECORD_SIZE)
    struct.pack_into("<QIIQQQ", body, 0, introspect.MAGIC, 1, 1, 7, int(time.time() * 1e9), 3)  # seq odd: mid-write
    path.write_bytes(bytes(body))
    t0 = time.monotonic()
    assert introspect.read_record(path) is None and time.monotonic() - t0 < 0.5
    struct.pack_into("<Q", body, 16, 8)
    path.write_bytes(bytes(body))
    rec = introspect.read_record(path)
    assert rec is not None and rec.family == "glibc" and rec.collections == 3
    assert introspect.read_record(tmp_path / "absent.bin") is None


# ---- a real run: injected, verified, stored, decomposed ----------------------------------------

EXPERIMENT = """
name = "introspect-test"
interval = "0.5s"
introspect = true
baseline = "glibc"
[phases]
load = "5s"
idle = "2s"
[workload]
name = "frag"
threads = 2
mb = 32
[[group]]
name = "glibc"
allocator = "glibc"
[[group]]
name = "jemalloc"
allocator = "{jemalloc}"
[[group]]
name = "mimalloc"
allocator = "{mimalloc}"
[[group]]
name = "static"
allocator = "glibc"
command = ["{static}", "--load", "5", "--idle", "30", "--mb", "8"]
"""


@pytest.fixture(scope="module")
def decomposed_run(tmp_path_factory, jemalloc, mimalloc, test_native_dir) -> Path:
    """One real run (glibc, jemalloc and mimalloc with the helper; a static binary without): the
    preloaded libraries are copies in their own directory, so a test can take them away."""
    tmp = tmp_path_factory.mktemp("decomposed")
    libs = tmp / "libs"
    libs.mkdir()
    for lib in (jemalloc, mimalloc):
        shutil.copyfile(lib, libs / Path(lib).name)
    text = EXPERIMENT.format(
        jemalloc=libs / Path(jemalloc).name, mimalloc=libs / Path(mimalloc).name, static=test_native_dir / "frag-static"
    )
    return Runner(parse_experiment(text, "introspect.toml", tmp), tmp / "run").run().run_dir


def test_run_stores_and_decomposes(decomposed_run, tmp_path):
    store = Store.open(decomposed_run)
    rows = store.alloc_stats()
    fams = {(r["group"], r["family"]) for r in rows}
    assert fams == {
        ("glibc", "glibc"),
        ("jemalloc", "jemalloc"),
        ("mimalloc", "mimalloc"),
    }  # nothing from the static binary
    absent = store.events(["introspect_absent"])
    assert [e["group_name"] for e in absent] == ["static"]
    a = analyse(store)
    d = {g.group: g for g in a.decomposition}
    assert set(d) == {"glibc", "jemalloc", "mimalloc"}
    assert "in free chunks of" in d["glibc"].summary or "held under 1 MB" in d["glibc"].summary
    assert d["jemalloc"].end.held.get("dirty", 0) > 0 and "dirty pages" in d["jemalloc"].summary
    assert 0 <= d["glibc"].helper_cpu_share < 0.05
    section = decomposition_section(store, a)
    assert section.title == "Why the memory is held" and any(r[:2] == ["glibc", "end"] for r in decomposition_rows(a))
    assert section.figures and section.data["groups"] and any("glibc" in p for p in section.paragraphs)
    assert decomposition_data(a)[0]["group"] in ("glibc", "jemalloc")
    assert draw_decomposition(a, tmp_path / "d.png").stat().st_size > 1000
    store.close()


def test_a_stored_run_reports_the_same_without_its_libraries(decomposed_run):
    """The analysis is a pure function of the store (issue 28): what it needs from the allocator
    libraries (the options each knows, its hardening) was recorded at run time with its provenance,
    so the same summary.json comes out after the libraries are gone."""
    store = Store.open_checked(decomposed_run)
    groups = {g["name"]: g for g in store.groups()}
    store.conn.close()
    for name in ("jemalloc", "mimalloc"):
        facts = json.loads(groups[name]["tunables_json"])
        assert (
            facts["read_from"] == groups[name]["library_path"]
            and facts["library_sha256"] == groups[name]["library_sha256"]
        )
        assert facts["known"] == tunables.known_options(name, groups[name]["library_path"])  # read while it exists
    assert groups["glibc"]["tunables_json"] is None
    before = summary_document(prepare(decomposed_run))
    libs = Path(groups["mimalloc"]["library_path"]).parent
    shutil.rmtree(libs)
    after = summary_document(prepare(decomposed_run))
    assert not libs.exists() and after == before
    # a library that knows no purge_delay (mimalloc before 2.1) is suggested reset_delay: recorded, not re-read
    mi = next(g for g in before["sections"]["decomposition"]["groups"] if g["group"] == "mimalloc")
    known = set(json.loads(groups["mimalloc"]["tunables_json"])["known"])
    for s in mi["suggestions"]:
        if s["tunable"] in ("MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"):
            assert s["tunable"] == ("MIMALLOC_PURGE_DELAY" if "purge_delay" in known else "MIMALLOC_RESET_DELAY")


def test_imported_data_has_no_decomposition(tmp_path):
    from alloclab.torutils.importer import import_torutils

    run = import_torutils(DATASETS / "co-guard-2025-09", tmp_path / "run")
    store = Store.open(run)
    assert store.alloc_stats() == [] and decompose(store) is None
    a = analyse(store)
    assert a.decomposition is None and decomposition_section(store, a) is None and decomposition_data(a) is None


def test_descriptor_reused_by_the_program_is_left_alone(tmp_path):
    """A daemon that closes every descriptor and opens its own file under the same number: the
    helper must not write malloc_info into the program's file (it checks the memfd's identity)."""
    target = tmp_path / "program-own.txt"
    code = (
        "import os, time, sys\nos.closerange(3, 65536)\nfds = [os.open(sys.argv[1] + str(i), os.O_WRONLY | os.O_CREAT) "
        "for i in range(8)]\nx = [bytearray(1 << 20) for _ in range(4)]\ntime.sleep(1.5)\n"
    )
    env = _env(tmp_path, None, interval=0.2)
    subprocess.run([sys.executable, "-c", code, str(target)], env=env, timeout=30, check=True)
    written = [p for p in tmp_path.glob("program-own.txt*") if p.stat().st_size]
    assert not written, [p.read_text()[:80] for p in written]
    rec = introspect.read_record(next(tmp_path.glob("*-*.bin")))
    assert rec is not None and rec.family == "glibc" and rec.fields["in_use"] > 4 * (1 << 20)


def test_a_store_older_than_the_recorded_facts_still_reports(decomposed_run, tmp_path):
    """A schema-6 store (no tunables_json, no embedded_json) reports, and says what it lacks: the
    decomposition's note for the preloaded mimalloc, the facts-not-recorded warning for an
    unverified replica, which the report cannot tell apart from one carrying its own allocator."""
    import sqlite3

    old = tmp_path / "old"
    old.mkdir()
    src = sqlite3.connect(decomposed_run / "run.db")
    src.backup(dst := sqlite3.connect(old / "run.db"))
    src.close()
    dst.executescript(
        "ALTER TABLE groups DROP COLUMN tunables_json; ALTER TABLE replicas DROP COLUMN embedded_json; "
        "UPDATE meta SET value = '6' WHERE key = 'schema_version'; "
        "UPDATE replicas SET verified = 0 WHERE name = 'static-1'"
    )
    dst.close()
    doc = summary_document(prepare(old))
    [w] = [w for w in doc["warnings"] if w["kind"] == "facts-not-recorded"]
    assert w["replicas"] == ["static-1"] and w["data"] == {"missing": ["replicas.embedded_json"]}
    mi = next(g for g in doc["sections"]["decomposition"]["groups"] if g["group"] == "mimalloc")
    assert any("before alloclab stored the options its library knows" in n for n in mi["notes"])
    jem = next(g for g in doc["sections"]["decomposition"]["groups"] if g["group"] == "jemalloc")
    assert not any("options its library knows" in n for n in jem["notes"])  # only where it changes a suggestion
