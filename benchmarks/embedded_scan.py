"""How often the embedded-allocator scan fires, on every ELF file of a machine, and what it costs.

    .venv/bin/python benchmarks/embedded_scan.py [ROOT ...] [--expect PATH=FAMILY ...]

Scans each distinct ELF regular file under the roots (default: /usr /opt /root /work/main/.venv,
symlinks not followed, one scan per inode) with alloclab.allocators.embedded.scan_file, as verification does,
and prints: files and bytes scanned, time, every file in which an allocator was found (with the
evidence), split into allocator libraries (named by their file name, so verification never scans
them) and the rest, which must each be a real embedder: review that list. `--expect` adds positive
controls (a file known to embed a family) and fails if one is missed. Latest figures:
docs/how-to/allocators.md, "Allocators compiled into the program".
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from alloclab.allocators import embedded
from alloclab.allocators.library import KNOWN_LIBRARY, LIBC_OR_LOADER


def elf_files(roots):
    seen = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            if dirpath.startswith(("/proc", "/sys")):
                continue
            for name in filenames:
                p = os.path.join(dirpath, name)
                try:
                    st = os.lstat(p)
                    if not stat.S_ISREG(st.st_mode) or st.st_size < 64 or (st.st_dev, st.st_ino) in seen:
                        continue
                    with open(p, "rb") as f:
                        if f.read(4) != b"\x7fELF":
                            continue
                except OSError:
                    continue
                seen.add((st.st_dev, st.st_ino))
                yield p, st.st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=["/usr", "/opt", "/root", "/work/main/.venv"])
    ap.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="PATH=FAMILY",
        help="a positive control: this file embeds this family",
    )
    args = ap.parse_args()
    n = nbytes = 0
    hits: list[tuple[str, tuple]] = []
    t0 = time.perf_counter()
    slowest = (0.0, "")
    for path, size in elf_files([r for r in args.roots if os.path.exists(r)]):
        t1 = time.perf_counter()
        found = embedded.scan_path(path)
        dt = time.perf_counter() - t1
        slowest = max(slowest, (dt, path))
        n += 1
        nbytes += size
        if found:
            hits.append((path, found))
    elapsed = time.perf_counter() - t0
    libs = [(p, f) for p, f in hits if KNOWN_LIBRARY.search(os.path.basename(p))]
    rest = [(p, f) for p, f in hits if not KNOWN_LIBRARY.search(os.path.basename(p))]
    print(
        f"ELF files scanned: {n}, {nbytes / 2**20:.0f} MiB in {elapsed:.1f} s "
        f"({nbytes / 2**20 / max(elapsed, 1e-9):.0f} MiB/s); slowest {slowest[0]:.2f} s ({slowest[1]})"
    )
    print(
        f"findings: {len(hits)} files — {len(libs)} allocator libraries (skipped by name in verification), "
        f"{len(rest)} other files (each must be a real embedder)"
    )
    print("families:", dict(Counter(f.family for _, fs in hits for f in fs)))
    for title, group in (("allocator libraries", libs), ("other files: review", rest)):
        print(f"\n{title}:")
        for p, fs in group:
            libc = " [libc/loader: skipped]" if LIBC_OR_LOADER.search(p) else ""
            print(f"  {p}{libc}: " + "; ".join(f"{f.family} ({', '.join(f.evidence)})" for f in fs))
    missed = []
    for item in args.expect:
        path, family = item.rsplit("=", 1)
        got = [f.family for f in embedded.scan_path(path) or ()]
        print(f"control {path}: expected {family}, found {got or 'nothing'}")
        if family not in got:
            missed.append(path)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
