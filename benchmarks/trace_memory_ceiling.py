"""Peak memory of the trace reader and replayer on the most compressible traces a file of a given
size may hold (issue 30, item 4): blocks of distinct mallocs (16 bytes each, addresses 16 bytes
apart, all at tick 0), every column one zstd frame, as many blocks as fit in the file.

    PYTHONPATH=src .venv/bin/python benchmarks/trace_memory_ceiling.py [--sizes 100000,1000000]

Prints, for each file size, the events the file claims, what `alloclab trace info` / `check` /
`replay --speed 0` answered, and each one's peak RSS (the replayer's, from wait4). The goal:
peak <= 1 GB on any input <= 1 MB."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alloclab.native import build

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.trace_codec: the format in Python
from tests.trace_codec import MALLOC, Block, Trace

PER_BLOCK = 100_000
HEADER_H = Path(__file__).resolve().parent.parent / "src" / "alloclab" / "native" / "trace_reader.h"


def budget(size: int) -> int:
    """The reader's event ceiling for a file of `size` bytes, from trace_reader.h's constants."""
    consts = {}
    for line in HEADER_H.read_text().splitlines():
        for name in ("TRACE_EVENTS_BASE", "TRACE_EVENTS_PER_BYTE", "TRACE_MAX_EVENTS"):
            if line.startswith(f"#define {name} "):
                consts[name] = eval(line.split(None, 2)[2].split("/*")[0].replace("(size_t)", ""))
    return min(consts["TRACE_MAX_EVENTS"], consts["TRACE_EVENTS_BASE"] + consts["TRACE_EVENTS_PER_BYTE"] * size)


def _frames(thread: int, n: int) -> bytes:
    blk = Block(thread, 0, ops=[MALLOC] * n, times=[0] * n, sizes=[16] * n, pointers=[1] * n)
    return Trace([blk]).to_bytes()[64:]


def craft(size: int, path: Path) -> int:
    """A trace of about `size` bytes claiming as many events as the reader allows for that size
    (distinct threads, each block the same frames), padded with one-event blocks; the events."""
    header = Trace([]).to_bytes()
    body, small = _frames(1, PER_BLOCK), _frames(1, 1)
    allowed = budget(size)
    n = min(allowed // PER_BLOCK, (size - 64) // len(body))
    out = bytearray(header)
    thread = 0
    for _ in range(n):
        thread += 1
        b = bytearray(body)
        b[12:16] = thread.to_bytes(4, "little")
        out += b
    events = n * PER_BLOCK
    while len(out) + len(small) <= size and events < allowed:  # padding: one event a block
        b = bytearray(small)
        b[12:16] = (thread + 1).to_bytes(4, "little")
        out += b
        events += 1
    path.write_bytes(bytes(out))
    return events


def peak(args: list[str], timeout: float) -> tuple[int | str, float, str]:
    """Exit code (or 'hang'), peak RSS in MB, last stderr line of one replayer run."""
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            err = p.stderr.read().strip().splitlines()
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, (err[-1] if err else "")[:120]
        if time.monotonic() - start > timeout:
            p.kill()
            p.wait()
            return "hang", 0.0, ""
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    replay = str(build.program("replay"))
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix=f"alloclab-memceiling-{os.getpid()}-") as d:
        for size in (int(s) for s in a.sizes.split(",")):
            path = Path(d) / f"bomb-{size}.trace"
            claimed = craft(size, path)
            print(f"file {path.stat().st_size:,} bytes claiming {claimed:,} events")
            for mode in (["--info", "--points", "2"], ["--check"], ["--speed", "0", "--linger", "0"]):
                code, mb, line = peak([replay, str(path), *mode], a.timeout)
                worst = max(worst, mb)
                print(f"  replay {' '.join(mode):22s} exit {code!s:5s} peak {mb:8.1f} MB  {line}")
    print(f"worst peak {worst:.1f} MB (goal <= 1000 MB)")
    return 0 if worst <= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
