"""Events that share one timestamp tick must replay in an order the program could have run them.
The replayer (replay_order.c, prepare) used to sort a tick's frees and reallocs before its allocations and
pull the allocation of a hand-off forward; two cases that got wrong at the 32 ns tick, and that a
coarser tick (1 us: sawtooth 3.49 -> 2.82 bytes/event, benchmarks/README.md) would make ~11x more
frequent (worker-pool, 4.8 M events: 5 -> 57 allocations placed over a live address, counted by a
Python model of prepare's rules; `trace info` final live bytes 33.28 -> 34.19 MB, benchmarks/
trace_tick.py). Now a tick's events keep each thread's recorded order (prepare merges the threads' runs)."""

from __future__ import annotations

from alloclab.run import trace
from tests.trace_codec import FREE, MALLOC, REALLOC, Trace, encode_blocks, ev


def replayed(tmp_path, groups):
    p = tmp_path / "t.trace"
    p.write_bytes(Trace(encode_blocks(groups)).to_bytes())
    return trace.info(p, points=2), trace.replay(p, speed=0, timeout=20)


def test_one_thread_malloc_then_in_place_reallocs_in_one_tick(tmp_path):
    # worker-pool does this: malloc, then two reallocs that grow the block in place, within 1 us
    x = 0x10000
    info, r = replayed(
        tmp_path,
        [(1, [ev(MALLOC, 5, 4096, x), ev(REALLOC, 5, 8192, x, x), ev(REALLOC, 5, 16384, x, x), ev(FREE, 9, ptr=x)])],
    )
    assert info["final_live_bytes"] == 0 and r["live_bytes_end"] == 0 and r["untracked_frees"] == 0


def test_realloc_to_an_address_another_thread_reallocs_away_in_the_same_tick(tmp_path):
    p, x, y = 0x20000, 0x10000, 0x30000
    info, r = replayed(
        tmp_path,
        [
            (1, [ev(MALLOC, 1, 100, p), ev(REALLOC, 5, 200, p, x), ev(FREE, 9, ptr=x)]),
            (2, [ev(MALLOC, 1, 300, x), ev(REALLOC, 5, 400, x, y), ev(FREE, 9, ptr=y)]),  # X leaves before 1 gets it
        ],
    )
    assert info["final_live_bytes"] == 0 and r["live_bytes_end"] == 0 and r["untracked_frees"] == 0


def test_a_tick_of_more_threads_than_the_merge_scans_keeps_each_threads_order(tmp_path):
    # 100 threads (over MERGE_MAX_RUNS, 64) each allocating and twice growing a block in place
    # within one tick (worker-pool does this), thread k + 1 taking over a block thread k frees:
    # ordered frees-first (the old fallback for such ticks) this left 409,600 bytes live and 299
    # objects instead of 199 (the second realloc taken for an allocation of its own)
    threads = []
    for tid in range(1, 101):
        mine, handed = 0x100000 * tid, 0x100000 * (tid - 1) + 0x80000
        evs = [
            ev(MALLOC, 5, 4096, mine),
            ev(REALLOC, 5, 8192, mine, mine),
            ev(REALLOC, 5, 16384, mine, mine),
            ev(FREE, 5, ptr=mine),
        ]
        if tid > 1:
            evs.append(ev(FREE, 5, ptr=handed))  # frees the block thread tid - 1 made at handed
        if tid < 100:
            evs.append(ev(MALLOC, 5, 64, mine + 0x80000))  # ... which is this one
        threads.append((tid, evs))
    info, r = replayed(tmp_path, threads)
    assert info["untracked_frees"] == 0 and r["untracked_frees"] == 0
    assert info["final_live_bytes"] == 0 and r["live_bytes_end"] == 0
    assert info["objects"] == 100 + 99


def test_a_realloc_stamped_after_another_thread_reused_its_old_address(tmp_path):
    # the recorder stamps a realloc when it returns; the old block is released inside the call, so
    # another thread can take that address (and free it again) ticks before the realloc's stamp.
    # Worker-pool recordings do this a few times per run (preempted inside realloc): before, the
    # reuse was placed over a live block, that block leaked and a later free was "untracked"
    p, s = 0x10000, 0x90000
    info, r = replayed(
        tmp_path,
        [
            (2, [ev(MALLOC, 1, 100, p), ev(REALLOC, 50, 200, p, s), ev(FREE, 90, ptr=s)]),
            (1, [ev(MALLOC, 10, 300, p), ev(FREE, 20, ptr=p)]),
        ],
    )
    assert info["untracked_frees"] == 0 and info["allocations_over_live"] == 0
    assert info["final_live_bytes"] == 0 and r["live_bytes_end"] == 0 and r["untracked_frees"] == 0
    assert info["peak_live_bytes"] == 200 + 300  # S and the reuse of P; never P twice


def test_a_free_is_never_pulled_forward(tmp_path):
    # frees are stamped before the call, so an allocation over a live address is not explained by
    # a free that comes later: that free stays where it was recorded, and the count says so
    p = 0x10000
    info, _ = replayed(
        tmp_path,
        [(2, [ev(MALLOC, 1, 100, p), ev(FREE, 50, ptr=p)]), (1, [ev(MALLOC, 10, 300, p), ev(FREE, 20, ptr=p)])],
    )
    assert info["allocations_over_live"] == 1 and info["untracked_frees"] == 1
