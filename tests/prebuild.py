"""What the test suite builds, built once before it runs, in parallel, within a time budget of its
own: `python -m tests.prebuild` (scripts/install.sh --test runs it).

Without it a first run on a new machine builds inside the first test that needs a thing, under
that test's timeout: an allocator from a registry, or a Rust program that embeds one (cargo builds
jemalloc from source in it, minutes on 2 cores). Each job here is idempotent: what is in the
cache already takes no time. A job that fails is reported and left to its tests, which then fail
or skip as they say (registries.py); the budget only bounds the wait.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EMBEDDED_CRATE = REPO / "tests" / "data" / "embedded-rust"
TEST_NATIVE = REPO / "tests" / "native"  # the tests' own C programs (lazyfree, frag-static): not shipped
# Allocator ids the suite provisions from the default cache (tests that need their own cache build
# their routes themselves, on purpose).
ALLOCATOR_IDS = (
    "jemalloc@5.3.0",
    "mimalloc@2.0.9",
    "mimalloc@2.0.9+secure",
    "mimalloc@3.0.1",
    "mimalloc@3.7.0",
    "mimalloc@3.6.0",
    "mimalloc@2.1.7",
    "mimalloc@2.1.6",
    "mimalloc@2.1.6+secure",
    "jemalloc@5.3.1",
)
EMBEDDED_PROGRAMS = (("embedded-mimalloc", "mimalloc"), ("embedded-jemalloc", "tikv-jemallocator"))


class BuildFailed(Exception):
    pass


def _source_key() -> str:
    h = hashlib.sha256()
    for p in sorted(
        [EMBEDDED_CRATE / "Cargo.toml", EMBEDDED_CRATE / "Cargo.lock", *EMBEDDED_CRATE.glob("src/**/*.rs")]
    ):
        h.update(p.relative_to(EMBEDDED_CRATE).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def embedded_rust(binary: str, feature: str, timeout: float = 1200) -> Path:
    """tests/data/embedded-rust's program `binary` (its #[global_allocator] chosen by `feature`),
    from the cache when its sources did not change, else built with cargo."""
    from alloclab.native import build

    target = build.cache_root() / "test-builds" / f"embedded-rust-{_source_key()}"
    exe = target / "release" / binary
    if exe.exists():
        return exe
    if shutil.which("cargo") is None:
        raise BuildFailed(
            "cargo is not installed: run scripts/install.sh --test (it installs Debian's cargo when absent)"
        )
    proc = subprocess.run(
        [
            "cargo",
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--features",
            feature,
            "--bin",
            binary,
            "--target-dir",
            str(target),
        ],
        cwd=EMBEDDED_CRATE,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0 or not exe.exists():
        raise BuildFailed(f"building {binary} failed (cargo exit {proc.returncode}): {proc.stderr[-2000:]}")
    for old in target.parent.glob("embedded-rust-*"):  # builds of earlier sources: never used again
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return exe


def native_tooling() -> Path:
    """Directory holding tests/native's programs, built as alloclab builds its own (into the cache,
    keyed by their sources and the compiler) if needed."""
    from alloclab.native import build

    return build.build_dir(TEST_NATIVE)


def _jobs() -> dict[str, object]:
    from alloclab.allocators import resolution
    from alloclab.native import build

    jobs: dict[str, object] = {"native programs": build.build_dir, "the tests' native programs": native_tooling}
    for allocator_id in ALLOCATOR_IDS:
        jobs[allocator_id] = lambda i=allocator_id: resolution.BUILDS.library(i)
    # one job for both programs: one cargo at a time, they share a target directory
    jobs["embedded Rust programs"] = lambda: [embedded_rust(b, f) for b, f in EMBEDDED_PROGRAMS]
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1500, help="seconds to wait at most (default 1500)")
    parser.add_argument("--jobs", type=int, default=2, help="builds at once (default 2)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    jobs = _jobs()
    print(
        f"prebuild: {len(jobs)} jobs ({', '.join(jobs)}), {args.jobs} at once, budget {args.budget:.0f} s", flush=True
    )
    pool = ThreadPoolExecutor(max_workers=args.jobs)

    def timed(name: str, job) -> str:
        t0 = time.monotonic()
        try:
            job()
        except Exception as exc:
            return f"prebuild: {name}: FAILED after {time.monotonic() - t0:.0f} s: {str(exc)[:300]}"
        return f"prebuild: {name}: ready ({time.monotonic() - t0:.0f} s)"

    futures = [pool.submit(timed, name, job) for name, job in jobs.items()]
    pending = set(futures)
    while pending:
        left = args.budget - (time.monotonic() - started)
        if left <= 0:
            break
        done, pending = wait(pending, timeout=min(left, 30), return_when="FIRST_COMPLETED")
        for f in done:
            print(f.result(), flush=True)
        if pending and not done:
            print(f"prebuild: {len(pending)} still building ({time.monotonic() - started:.0f} s)", flush=True)
    pool.shutdown(wait=False, cancel_futures=True)
    failed = sum("FAILED" in f.result() for f in futures if f.done())
    print(
        f"prebuild: done in {time.monotonic() - started:.0f} s: {len(futures) - len(pending) - failed} ready, "
        f"{failed} failed, {len(pending)} not finished within the budget",
        flush=True,
    )
    if pending:  # what is still building is left to the tests (a build lock makes them wait)
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
