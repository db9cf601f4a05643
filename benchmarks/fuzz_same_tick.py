"""Random same-tick traces through a sanitizer build of the replayer: the tick-ordering code
(replay_order.c `prepare`: merge_tick for up to 64 threads in a tick, merge_crowded above that, the
by-rank fallback when a merge runs out of budget).

    python benchmarks/fuzz_same_tick.py [--cases 300] [--seed 1]

Even cases: 2–300 threads, 1–12 random events each (malloc, free, realloc) over a pool of 4, 50
or 500 addresses, most in one tick — inconsistent, as a crafted file may be. Odd cases: a
program's true interleaving (2–200 threads, 200 or 2,000 steps, freed addresses reused at once by
any thread, hand-offs between threads, moving reallocs stamped when they return) recorded with
ticks of 50 or 500 steps or one tick for all. The order the replayer makes of such a trace should
be one the program could have run (not necessarily its own: three threads that free X, allocate X
with 6 bytes and allocate X with 9 bytes in one tick allow two orders, and the clock cannot tell
them apart); finding one is a search the replayer does greedily, so this is measured, not
required. The replayer is built
with -fsanitize=address,undefined into a temporary directory and run three ways (`--info`,
threaded `--speed 0`, `--direct`). A failure: a non-zero exit, a sanitizer report, or the three
modes disagreeing on the final live bytes (they share one global order, so they must agree).
Measured, per tick size, on the consistent cases: how many got an order with an event the program
could not have run there (`untracked_frees` + `allocations_over_live` of `--info`), and that
count as a share of their events.
Exit status 1 if any case failed. Not part of the default test run; figures in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from alloclab.native import build as native_build

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.trace_codec: the format in Python
from tests.trace_codec import FREE, MALLOC, REALLOC, Trace, encode_blocks, ev


def build(d: Path) -> Path:
    src = Path(native_build.__file__).parent
    out = d / "replay_asan"
    subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(src),
            f"OUT={d}",
            f"{d}/replay",
            "CFLAGS=-g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE",
        ],
        check=True,
    )
    (d / "replay").rename(out)
    return out


def random_trace(rng: random.Random) -> list:
    nthreads = rng.choice([2, 5, 40, 65, 80, 130, 300])
    pool = [0x1000 * (i + 1) for i in range(rng.choice([4, 50, 500]))]
    threads = []
    for tid in range(1, nthreads + 1):
        evs = []
        for _ in range(rng.randint(1, 12)):
            op, ts = rng.choice([MALLOC, FREE, REALLOC]), rng.choice([5, 5, 5, 6])
            if op == MALLOC:
                evs.append(ev(MALLOC, ts, rng.randint(1, 5000), rng.choice(pool)))
            elif op == FREE:
                evs.append(ev(FREE, ts, ptr=rng.choice(pool)))
            else:
                evs.append(ev(REALLOC, ts, rng.randint(1, 5000), rng.choice(pool), rng.choice(pool)))
        threads.append((tid, sorted(evs, key=lambda e: e[1])))
    return threads


def consistent_trace(rng: random.Random) -> tuple[list, str]:
    """A program's true interleaving, recorded as the recorder stamps it with a coarse clock:
    threads allocate, grow in place or move, free, and hand blocks to each other; freed addresses
    are reused at once (LIFO, any thread), so a tick is full of cross-thread reuse. A realloc that
    moves releases its old address when it starts but is stamped when it returns (the recorder
    stamps after the call, so that its new address is never seen before another thread's free of
    it): other threads may take the old address meanwhile, in earlier ticks."""
    nthreads = rng.choice([2, 8, 40, 64, 65, 100, 200])
    steps, per_tick = rng.choice([200, 2000]), rng.choice([50, 500, 10**9])
    pool: list[int] = []
    fresh = iter(range(0x10000, 1 << 40, 0x100))
    owned: list[list[list[int]]] = [[] for _ in range(nthreads)]
    events: list[list] = [[] for _ in range(nthreads)]
    busy_until = [0] * nthreads  # inside a realloc that has released its old block
    for step in range(steps):
        t, r = rng.randrange(nthreads), rng.random()
        if busy_until[t] > step:
            continue
        ts, mine = 5 + step // per_tick, owned[t]
        if r < 0.4 or not mine:
            addr, size = pool.pop() if pool and rng.random() < 0.9 else next(fresh), rng.randint(1, 4000)
            mine.append([addr, size])
            events[t].append(ev(MALLOC, ts, size, addr))
        elif r < 0.7:
            addr, size = mine.pop(rng.randrange(len(mine)))
            pool.append(addr)
            events[t].append(ev(FREE, ts, ptr=addr))
        elif r < 0.85:
            block = mine[rng.randrange(len(mine))]
            size = rng.randint(1, 8000)
            new = block[0] if rng.random() < 0.5 else (pool.pop() if pool else next(fresh))
            returns = step + (0 if new == block[0] else rng.choice([0, 0, 3, 60]))
            events[t].append(ev(REALLOC, 5 + returns // per_tick, size, block[0], new))
            if new != block[0]:
                pool.append(block[0])
            busy_until[t] = returns + 1
            block[:] = [new, size]
        else:
            owned[rng.randrange(nthreads)].append(mine.pop(rng.randrange(len(mine))))  # a hand-off: no event
    tick = "one tick" if per_tick > steps else f"{per_tick} steps a tick"
    return [(t + 1, evs) for t, evs in enumerate(events) if evs], tick


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}  # the replay keeps its blocks, as the program did
    failures = 0
    orders: dict[str, dict[str, int]] = {}  # consistent cases by tick size: cases, misordered, events
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        replay = build(d)
        path = d / "case.trace"
        for case in range(args.cases):
            consistent = bool(case % 2)
            threads, tick = consistent_trace(rng) if consistent else (random_trace(rng), None)
            path.write_bytes(Trace(encode_blocks(threads)).to_bytes())
            live, problem = {}, None
            for mode in (["--info"], ["--speed", "0"], ["--direct", "--speed", "0"]):
                r = subprocess.run(
                    [str(replay), str(path), *mode], capture_output=True, text=True, timeout=120, env=env
                )
                if r.returncode != 0 or "ERROR: AddressSanitizer" in r.stderr or "runtime error" in r.stderr:
                    problem = f"{mode[0]}: exit {r.returncode} {r.stderr.strip()[-400:]}"
                    break
                out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("{")))
                live[mode[0]] = out.get("final_live_bytes", out.get("live_bytes_end"))
                if consistent and mode[0] == "--info":
                    row = orders.setdefault(tick, {"cases": 0, "misordered_cases": 0, "events": 0, "misplaced": 0})
                    misplaced = out["untracked_frees"] + out["allocations_over_live"]
                    row["cases"] += 1
                    row["misordered_cases"] += misplaced > 0
                    row["events"] += out["events"]
                    row["misplaced"] += misplaced
            if problem is None and len(set(live.values())) != 1:
                problem = f"final live bytes differ: {live}"
            if problem:
                failures += 1
                print(f"case {case}: {problem}", file=sys.stderr)
            if (case + 1) % 50 == 0:
                print(f"{case + 1}/{args.cases} cases, {failures} failed", file=sys.stderr, flush=True)
    print(json.dumps({"cases": args.cases, "seed": args.seed, "failed": failures, "consistent_cases": orders}))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
