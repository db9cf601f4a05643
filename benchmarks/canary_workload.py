"""A long-running service with a known memory level, for the canary-against-peers measurements
(benchmarks/canary_peers.py, tests/integration/test_fleet_canary.py): a real process whose RSS
follows a start-up regrowth towards its level, with slow noise on it.

    python benchmarks/canary_workload.py --mb 30 [--regrow 2] [--noise 0.02] [--tick 0.2] [--seed N]

Its RSS (all of it, the interpreter's own included) is held at
    level(age) = MB · SCALE · (1 − 0.5 · e^(−age / regrow)) · (1 + x_t),
x_t an AR(1) with marginal SD `noise` (φ 0.9 a tick): the level a process regrows to after a
restart, like a relay's caches filling again. SCALE is $CANARY_WORKLOAD_SCALE (default 1): a
deploy that sets it to 1.25 makes a canary that uses 25% more memory. The memory is anonymous
mmap chunks of 256 KiB, every page written, given back with munmap, so RSS follows the target
whatever the allocator. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import math
import mmap
import os
import random
import signal
import sys
import time

CHUNK = 256 * 1024
PAGE = mmap.PAGESIZE


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, required=True, help="settled RSS, MB (before $CANARY_WORKLOAD_SCALE)")
    ap.add_argument("--regrow", type=float, default=2.0, help="start-up regrowth time constant, s")
    ap.add_argument("--noise", type=float, default=0.02, help="marginal SD of the slow noise, share of the level")
    ap.add_argument("--tick", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    scale = float(os.environ.get("CANARY_WORKLOAD_SCALE", "1") or 1)
    rng = random.Random(args.seed if args.seed is not None else os.getpid())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    chunks: list[mmap.mmap] = []
    base = rss_bytes()  # the interpreter's own share of the level
    phi, x = 0.9, rng.gauss(0, args.noise)
    start = time.monotonic()
    while True:
        age = time.monotonic() - start
        x = phi * x + math.sqrt(1 - phi * phi) * args.noise * rng.gauss(0, 1)
        target = args.mb * 2**20 * scale * (1 - 0.5 * math.exp(-age / max(args.regrow, 1e-3))) * (1 + x)
        want = max(0, int((target - base) // CHUNK))
        while len(chunks) < want:
            m = mmap.mmap(-1, CHUNK)
            for off in range(0, CHUNK, PAGE):
                m[off] = 1
            chunks.append(m)
        while len(chunks) > want:
            chunks.pop().close()
        time.sleep(args.tick)


if __name__ == "__main__":
    sys.exit(main())
