"""Threaded replay keeps turns only where threads share an object (issue 16, item 3).

Objects whose whole history is on one thread replay with no synchronisation; objects touched by
two or more threads (cross-thread frees, reallocs of another thread's block) keep their recorded
order. Both kinds, mixed, must end where the serial replay ends: same operations, same live bytes.
"""

from __future__ import annotations

import random

import pytest

from alloclab.run import trace
from tests.trace_codec import CALLOC, FREE, MALLOC, MEMALIGN, REALLOC, Trace, ev, events_block


def mixed_trace(seed: int, threads: int = 4, steps: int = 20_000):
    """Events on `threads` threads, one per tick: private churn (malloc, calloc, memalign, realloc,
    free by the same thread) and hand-offs (freed or reallocated by another thread). Addresses are
    reused after a free, as allocators do. Returns the trace, its expected final live bytes, the
    number of operations and the number of objects touched by more than one thread."""
    rng = random.Random(seed)
    events = {t: [] for t in range(1, threads + 1)}
    live: dict[int, tuple[int, int, set]] = {}  # address -> (size, owner thread, threads that touched it)
    free_addrs, next_addr, shared = [], 0x10000, 0
    for ts in range(1, steps + 1):
        t = rng.randint(1, threads)
        if live and rng.random() < 0.48:
            addr = rng.choice(list(live)) if rng.random() < 0.3 else max(live)  # mostly recent blocks
            size, owner, touched = live[addr]
            other = rng.random() < 0.25  # a hand-off: another thread frees or reallocs it
            t = rng.choice([x for x in events if x != owner]) if other else owner
            touched = touched | {t}
            if rng.random() < 0.2:
                new = free_addrs.pop() if free_addrs else (next_addr := next_addr + 4096)
                size = rng.randint(1, 3000)
                events[t].append(ev(REALLOC, ts, size, addr, new))
                del live[addr]
                live[new] = (size, owner, touched)
                if new != addr:
                    free_addrs.append(addr)
            else:
                events[t].append(ev(FREE, ts, ptr=addr))
                del live[addr]
                free_addrs.append(addr)
                shared += len(touched) > 1
        else:
            addr = free_addrs.pop() if free_addrs and rng.random() < 0.5 else (next_addr := next_addr + 4096)
            op, size = rng.choice([MALLOC, MALLOC, CALLOC, MEMALIGN]), rng.randint(1, 2000)
            events[t].append(ev(op, ts, size, addr, align=64 if op == MEMALIGN else 0))
            live[addr] = (size, t, {t})
    shared += sum(len(touched) > 1 for _, _, touched in live.values())
    ops = sum(len(e) for e in events.values())
    blocks = [events_block(t, e) for t, e in events.items() if e]
    return Trace(blocks), sum(size for size, _, _ in live.values()), ops, shared


@pytest.mark.parametrize("seed", [1, 2])
def test_cross_thread_and_single_thread_objects_end_like_the_serial_replay(tmp_path, seed):
    t, final_live, ops, shared = mixed_trace(seed)
    path = tmp_path / "mixed.trace"
    path.write_bytes(t.to_bytes())
    info = trace.info(path, points=3)
    assert info["final_live_bytes"] == final_live and info["operations"] == ops and info["untracked_frees"] == 0
    serial_end = trace.serial_curve(path, points=3)[-1][1]
    assert serial_end == final_live
    for _ in range(3):  # interleavings differ run to run
        threaded = trace.replay(path, speed=0, timeout=60)
        assert threaded["operations"] == ops and threaded["live_bytes_end"] == final_live
        assert threaded["shared_objects"] == shared > 0  # only these keep turns
        assert threaded["objects"] - threaded["shared_objects"] > 1000  # the rest replay unsynchronised
    direct = trace.replay(path, speed=0, direct=True, timeout=60)
    assert direct["operations"] == ops and direct["live_bytes_end"] == final_live and direct["shared_objects"] == 0


def test_recorded_cross_thread_frees_end_like_the_serial_replay(tmp_path, native_dir, jemalloc):
    """xmalloc: every block is freed by another thread than the one that allocated it."""
    path = tmp_path / "x.trace"
    rec = trace.record(
        path,
        [str(native_dir / "stressors"), "--pattern", "xmalloc", "--threads", "4", "--rounds", "2", "--slots", "5000"],
    )
    assert rec["exit_code"] == 0
    info = trace.info(path, points=3)
    expected_ops = info["operations"] - info["thread_exits"]
    assert trace.serial_curve(path, points=3)[-1][1] == info["final_live_bytes"]
    for lib in (None, jemalloc):
        r = trace.replay(path, speed=0, allocator_lib=lib)
        assert r["operations"] == expected_ops and r["live_bytes_end"] == info["final_live_bytes"]
        assert r["shared_objects"] >= 20_000  # 4 threads x 2 rounds x 5000 slots, handed over
