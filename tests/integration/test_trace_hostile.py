"""Hostile traces: the replayer distrusts its input (issue 17, item 3).

Each case is a file built event by event (tests.trace_codec) or cut from a real recording, run
through the real native reader and replayer. Outcomes: accepted (and replayed deterministically,
quickly), refused as corrupt, refused over a documented limit, or refused because the machine
cannot run it — always one line, never a hang. The fuzz campaign with thousands of mutations is
benchmarks/fuzz_traces.py (outside the default run).
"""

from __future__ import annotations

import os
import random
import re
import resource
import struct
import subprocess
import sys
import time

import pytest

from alloclab.common.errors import UserError
from alloclab.run import trace
from tests.conftest import run_cli
from tests.trace_codec import (
    BLOCK_HEADER,
    BLOCK_MAGIC,
    CALLOC,
    FREE,
    MALLOC,
    MEMALIGN,
    REALLOC,
    THREAD_EXIT,
    TICK_NS,
    Block,
    Trace,
    compress,
    ev,
    events_block,
    parse,
)


@pytest.fixture(autouse=True, scope="module")
def built(native_dir):
    """Build the native programs before any case is timed."""
    return native_dir


YEAR_TICKS = 365 * 86400 * 10**9 // TICK_NS
FAST = {"max_gap": 0.2}  # a replay in these tests never waits long


def write(tmp_path, t: Trace | bytes, name="t.trace"):
    p = tmp_path / name
    p.write_bytes(t if isinstance(t, bytes) else t.to_bytes())
    return p


def refused(fn, match: str):
    with pytest.raises(UserError, match=match) as exc:
        fn()
    assert "\n" not in str(exc.value)
    return str(exc.value)


def replayed_fast(path, **kw):
    """A threaded replay (after its --check) that must finish in well under a second."""
    start = time.monotonic()
    r = trace.replay(path, speed=kw.pop("speed", 1.0), limits={**FAST, **kw.pop("limits", {})}, timeout=20, **kw)
    assert time.monotonic() - start < 5
    return r


# ---- linear time: the quadratic same-tick hand-off, many threads, many blocks ----


def test_same_tick_untracked_frees_are_linear(tmp_path):
    """300,000 frees of a never-allocated address in one tick used to scan the tick each (~1 h)."""
    t = Trace(
        [
            events_block(1, [ev(FREE, 0, ptr=0x1000)] * 300_000),
            events_block(2, [ev(MALLOC, 0, 16, 0x2000 + 16 * i) for i in range(50)]),
        ]
    )
    p = write(tmp_path, t)
    assert p.stat().st_size < 1000
    start = time.monotonic()
    d = trace.info(p, points=2)
    assert time.monotonic() - start < 1.0
    assert d["untracked_frees"] == 300_000 and d["operations"] == 50
    start = time.monotonic()
    r = trace.replay(p, speed=0, timeout=20)
    assert time.monotonic() - start < 2.0 and r["operations"] == 50


def test_same_tick_handoffs_are_linear_and_ordered(tmp_path):
    """100,000 hand-offs in one tick: thread 1 frees what thread 2 allocates, both at tick 0."""
    n = 100_000
    t = Trace(
        [
            events_block(1, [ev(FREE, 0, ptr=0x10000 + 16 * i) for i in range(n)]),
            events_block(2, [ev(MALLOC, 0, 32, 0x10000 + 16 * i) for i in range(n)]),
        ]
    )
    p = write(tmp_path, t)
    start = time.monotonic()
    d = trace.info(p, points=4)
    assert time.monotonic() - start < 1.0
    assert d["untracked_frees"] == 0 and d["final_live_bytes"] == 0 and d["peak_live_bytes"] >= 32
    r = trace.replay(p, speed=0, timeout=20)
    assert r["operations"] == 2 * n and r["live_bytes_end"] == 0
    assert trace.serial_curve(p, points=4) == d["live_curve"]


def test_same_tick_realloc_of_a_later_allocation(tmp_path):
    n = 50_000
    t = Trace(
        [
            events_block(1, [ev(REALLOC, 0, 64, 0x10000 + 16 * i, 0x900000 + 16 * i) for i in range(n)]),
            events_block(2, [ev(MALLOC, 0, 32, 0x10000 + 16 * i) for i in range(n)]),
        ]
    )
    p = write(tmp_path, t)
    d = trace.info(p, points=2)
    assert d["objects"] == n and d["final_live_bytes"] == 64 * n
    assert trace.replay(p, speed=0, timeout=20)["live_bytes_end"] == 64 * n


@pytest.mark.parametrize("threads, n", [(60, 5_000), (1_000, 200)])
def test_same_tick_merge_of_blocked_threads_stays_bounded(tmp_path, threads, n):
    """Threads whose heads all wait on each other in one tick (frees of an address the last thread
    allocates last): 60 go through merge_tick, which gives up after its search budget and orders
    the tick by rank; 1,000 through merge_crowded, whose parked runs are woken by address."""
    x = 0x1000
    blocks = [events_block(tid, [ev(FREE, 0, ptr=x)] * n) for tid in range(1, threads)]
    blocks.append(events_block(threads, [ev(FREE, 0, ptr=x)] * n + [ev(MALLOC, 0, 16, x)]))
    p = write(tmp_path, Trace(blocks))
    start = time.monotonic()
    d = trace.info(p, points=2)
    assert time.monotonic() - start < 3.0
    assert d["operations"] == 2 and d["final_live_bytes"] == 0  # the malloc pulled ahead of one free


def test_same_tick_of_more_threads_than_the_merge_scans(tmp_path):
    """100 threads in one tick (over the merge's 64 runs: merged with parked runs), hand-offs ordered."""
    blocks = [
        events_block(tid, [ev(FREE, 0, ptr=0x1000 * tid), ev(MALLOC, 0, 32, 0x1000 * (tid + 1))])
        for tid in range(1, 101)
    ]
    p = write(tmp_path, Trace(blocks))
    d = trace.info(p, points=2)
    assert d["untracked_frees"] == 1 and d["final_live_bytes"] == 32


def test_many_threads_many_blocks_read_linearly(tmp_path):
    """10,000 threads, 4 blocks each, interleaved: the reader finds a thread by hash, not a scan."""
    blocks = [Block(tid, r, [MALLOC], [0], [8], [tid * 4 + r]) for r in range(4) for tid in range(1, 10_001)]
    p = write(tmp_path, Trace(blocks, flags=0))
    start = time.monotonic()
    d = trace.info(p, points=2)
    assert time.monotonic() - start < 3.0
    assert d["threads"] == 10_000 and d["malloc"] == 40_000
    refused(lambda: trace.check(p), r"10000 threads; the limit is 4096 \(--max-threads\)")


def test_more_threads_than_the_format_allows(tmp_path):
    blocks = [Block(tid, 0, [MALLOC], [0], [8], [tid]) for tid in range(1, (1 << 16) + 2)]
    p = write(tmp_path, Trace(blocks, flags=0))
    refused(lambda: trace.info(p), "more than 65536 threads")


def test_a_decompression_bomb_is_refused_by_its_event_count(tmp_path):
    """A few hundred bytes claiming millions of events per block: not a recording."""
    n = 1_300_000  # frees at tick 0 of one address: 6 bytes each raw (< 8 MiB)
    # format 3: ops, times (2 planes), sizes (2), pointers, free codes (2), reuse; a frame per column
    cols = (b"\2" * n, b"\0" * n, b"\0" * n, b"", b"", b"\0" * n, b"\0" * n, b"\0" * n, b"")
    frames = [compress(c) if c else c for c in cols]
    stored = b"".join(struct.pack("<II", len(c), len(f)) + f for c, f in zip(cols, frames))
    raw_len = sum(4 + len(c) for c in cols)
    block = BLOCK_HEADER.pack(BLOCK_MAGIC, len(stored), raw_len, 1, n, 0, 0) + stored
    p = write(tmp_path, Trace([]).to_bytes() + block * 4)
    assert p.stat().st_size < 4000
    start = time.monotonic()
    refused(lambda: trace.info(p), "unpacks to over .* events")
    assert time.monotonic() - start < 2.0


# ---- threads: exit markers, unknown threads, order across threads ----


@pytest.mark.parametrize("layout", ["exit-first-same-block", "events-after-exit-block", "duplicated-exit-block"])
def test_events_after_a_thread_exit_are_refused(tmp_path, layout):
    other = events_block(2, [ev(FREE, 9, ptr=0x1000)])
    if layout == "exit-first-same-block":
        blocks = [events_block(1, [ev(THREAD_EXIT, 0), ev(MALLOC, 5, 10, 0x1000)]), other]
    elif layout == "events-after-exit-block":
        blocks = [
            events_block(1, [ev(MALLOC, 0, 10, 0x2000), ev(THREAD_EXIT, 1)]),
            events_block(1, [ev(MALLOC, 5, 10, 0x1000)]),
            other,
        ]
    else:
        exit_block = events_block(1, [ev(MALLOC, 0, 10, 0x1000), ev(THREAD_EXIT, 1)])
        blocks = [exit_block, exit_block, other]
    p = write(tmp_path, Trace(blocks))
    for call in (lambda: trace.info(p), lambda: trace.replay(p, timeout=10)):
        refused(call, "thread 1 has events after its exit")


def test_an_exit_marker_timed_before_the_threads_events_does_not_stall(tmp_path):
    """Blocks of one thread whose times run backwards put its exit first in time order: the exit
    ends nothing early, so the thread waiting on its allocation is not left spinning."""
    t = Trace(
        [
            events_block(1, [ev(MALLOC, 100, 10, 0x1000)]),
            events_block(1, [ev(THREAD_EXIT, 0)]),
            events_block(2, [ev(FREE, 200, ptr=0x1000)]),
        ]
    )
    p = write(tmp_path, t)
    r = replayed_fast(p)
    assert r["operations"] == 2 and r["live_bytes_end"] == 0


def test_free_before_the_allocation_in_another_thread_is_untracked(tmp_path):
    t = Trace([events_block(1, [ev(FREE, 10, ptr=0x1000)]), events_block(2, [ev(MALLOC, 20, 10, 0x1000)])])
    p = write(tmp_path, t)
    d = trace.info(p)
    assert d["untracked_frees"] == 1 and d["final_live_bytes"] == 10
    assert replayed_fast(p)["live_bytes_end"] == 10


@pytest.mark.parametrize("thread_id", [1, 7, 2**31, 2**32 - 1])
def test_any_nonzero_thread_number_is_a_thread(tmp_path, thread_id):
    p = write(tmp_path, Trace([events_block(thread_id, [ev(MALLOC, 0, 10, 0x1000), ev(FREE, 3, ptr=0x1000)])]))
    assert replayed_fast(p)["operations"] == 2


def test_thread_number_zero_is_corrupt(tmp_path):
    p = write(tmp_path, Trace([events_block(0, [ev(MALLOC, 0, 10, 0x1000)])]))
    refused(lambda: trace.info(p), "cannot use the trace: .*impossible sizes")


def test_thread_limit_is_enforced_and_adjustable(tmp_path):
    blocks = [events_block(tid, [ev(MALLOC, tid, 8, 0x1000 * tid)]) for tid in range(1, 6)]
    p = write(tmp_path, Trace(blocks))
    refused(lambda: trace.replay(p, limits={"max_threads": 4}), r"5 threads; the limit is 4 \(--max-threads\)")
    assert replayed_fast(p, limits={"max_threads": 5})["threads"] == 5


def test_4097_threads_are_over_the_default_limit(tmp_path):
    blocks = [Block(tid, 0, [MALLOC], [0], [8], [tid]) for tid in range(1, 4098)]
    p = write(tmp_path, Trace(blocks, flags=0))
    assert trace.info(p)["threads"] == 4097
    refused(lambda: trace.replay(p), r"4097 threads; the limit is 4096")


def _as_limit(limit_bytes):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def test_failed_thread_creation_is_an_error(tmp_path, native_dir):
    """Under a 1 GiB address-space limit, 2,000 threads' stacks cannot all be mapped: the replayer
    says which thread it could not start and exits 5 having replayed nothing."""
    blocks = [events_block(tid, [ev(MALLOC, tid, 8, 0x1000 * tid)]) for tid in range(1, 2001)]
    p = write(tmp_path, Trace(blocks))
    proc = subprocess.run(
        [str(native_dir / "replay"), str(p), "--speed", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_as_limit(1 << 30),
    )
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.startswith("replay: cannot start thread ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
    # and through the CLI: one line, exit 2
    cli = subprocess.run(
        [
            "/bin/sh",
            "-c",
            f'ulimit -v {1 << 20}; exec "$0" -m alloclab trace replay "$1" --speed 0',
            sys.executable,
            str(p),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2, cli.stderr
    assert "cannot replay the trace here: cannot start thread" in cli.stderr and cli.stderr.count("\n") == 1


# ---- time: gaps, schedules, overflow ----


def test_a_gap_of_centuries_is_shortened(tmp_path):
    t = Trace([events_block(1, [ev(MALLOC, 0, 100, 0x1000), ev(FREE, 300 * YEAR_TICKS, ptr=0x1000)])])
    p = write(tmp_path, t)
    assert trace.info(p)["duration_s"] > 300 * 365 * 86400 * 0.99
    plan = trace.check(p)
    assert plan["gaps_shortened"] == 1 and plan["schedule_s"] == pytest.approx(3600)
    start = time.monotonic()
    r = trace.replay(p, limits={"max_gap": 0.3}, timeout=20)
    assert 0.25 < time.monotonic() - start < 5 and r["gaps_shortened"] == 1 and r["live_bytes_end"] == 0


def test_a_schedule_over_the_duration_limit_is_refused(tmp_path):
    events = [ev(MALLOC, (i + 1) * YEAR_TICKS, 8, 0x1000 * (i + 1)) for i in range(200)]  # 200 gaps of a year
    p = write(tmp_path, Trace([events_block(1, events)]))
    msg = refused(lambda: trace.replay(p), r"would take 720000 s .* the limit is 604800 s \(--max-duration")
    assert "--max-gap" in msg
    assert trace.check(p, limits={"max_gap": 1})["schedule_s"] == pytest.approx(200)
    assert trace.check(p, speed=2, limits={"max_gap": 1})["schedule_s"] == pytest.approx(200)  # gaps are replay seconds
    assert replayed_fast(p, speed=0)["operations"] == 200


def test_speed_scales_a_shortened_schedule(tmp_path):
    t = Trace([events_block(1, [ev(MALLOC, 0, 100, 0x1000), ev(FREE, 10**9 // TICK_NS, ptr=0x1000)])])  # 1 s apart
    p = write(tmp_path, t)
    assert trace.check(p, speed=1)["schedule_s"] == pytest.approx(1.0, rel=1e-3)
    assert trace.check(p, speed=4)["schedule_s"] == pytest.approx(0.25, rel=1e-3)
    assert trace.check(p, speed=4, limits={"max_gap": 0.1})["schedule_s"] == pytest.approx(0.1, rel=1e-3)
    start = time.monotonic()
    trace.replay(p, speed=4, timeout=20)
    assert 0.2 < time.monotonic() - start < 3


@pytest.mark.parametrize("first_ts,delta", [(2**64 - 1, 1), (2**59, 0), (0, 2**64 - 1)])
def test_timestamp_overflow_is_corrupt(tmp_path, first_ts, delta):
    b = Block(1, first_ts, [MALLOC, FREE], [0, delta], [8], [0x100, 0])
    p = write(tmp_path, Trace([b]))
    refused(lambda: trace.info(p), "timestamp overflow")


# ---- sizes ----


@pytest.mark.parametrize("op", [MALLOC, CALLOC, MEMALIGN, REALLOC])
def test_one_tebibyte_request_is_over_the_limit(tmp_path, op):
    e = ev(op, 0, 1 << 40, 0x1000, 0x2000, 64)
    p = write(tmp_path, Trace([events_block(1, [e, ev(FREE, 5, ptr=0x2000 if op == REALLOC else 0x1000)])]))
    assert trace.info(p)["peak_live_bytes"] == 1 << 40  # inspecting allocates nothing
    for call in (lambda: trace.replay(p), lambda: trace.serial_curve(p), lambda: trace.replay(p, direct=True)):
        refused(call, r"requests 1099511627776 bytes .* \(--max-alloc\)")


def test_a_size_beyond_the_format_is_corrupt(tmp_path):
    p = write(tmp_path, Trace([events_block(1, [ev(MALLOC, 0, (1 << 40) + 1, 0x1000)])]))
    refused(lambda: trace.info(p), "implausible size")


def test_peak_live_bytes_over_the_limit(tmp_path):
    events = [ev(MALLOC, i, 1 << 30, 0x100000 * (i + 1)) for i in range(40)]  # 40 GiB live, 1 GiB each
    p = write(tmp_path, Trace([events_block(1, events)]))
    assert trace.info(p)["peak_live_bytes"] == 40 << 30
    refused(lambda: trace.replay(p), r"holds up to 40.0 GiB live; .* \(--max-live\)")
    small = write(
        tmp_path, Trace([events_block(1, [ev(MALLOC, 0, 3 << 20, 0x1000), ev(FREE, 1, ptr=0x1000)])]), "s.trace"
    )
    refused(lambda: trace.replay(small, limits={"max_live": 2 << 20}), r"\(--max-live\)")
    assert replayed_fast(small, limits={"max_live": 4 << 20})["live_bytes_end"] == 0


def test_realloc_growth_counts_toward_the_limits(tmp_path):
    events = [ev(MALLOC, 0, 16, 0x1000), ev(REALLOC, 1, 20 << 30, 0x1000, 0x1000)]
    p = write(tmp_path, Trace([events_block(1, events)]))
    refused(lambda: trace.replay(p), r"\(--max-alloc\)")


@pytest.mark.parametrize("align", [0, 3, 1 << 31])
def test_bad_alignment_is_corrupt(tmp_path, align):
    p = write(tmp_path, Trace([events_block(1, [ev(MEMALIGN, 0, 64, 0x1000, 0, align)])]))
    refused(lambda: trace.info(p), "alignment")


# ---- addresses ----


def test_address_oddities_replay_deterministically(tmp_path):
    """Double free, free of the unknown, realloc of the unknown, an address allocated twice, size 0,
    pointer deltas at the extremes: each has a documented meaning and the replay finishes."""
    ev_list = [
        ev(MALLOC, 0, 10, 0x1000),
        ev(FREE, 1, ptr=0x1000),
        ev(FREE, 2, ptr=0x1000),  # double free
        ev(FREE, 3, ptr=0xDEAD0),
        ev(REALLOC, 4, 50, 0xBEEF0, 0x3000),  # unknown, unknown
        ev(MALLOC, 5, 7, 0x5000),
        ev(MALLOC, 6, 9, 0x5000),  # twice, no free
        ev(MALLOC, 7, 0, 0x6000),
        ev(REALLOC, 8, 0, 0x6000, 0x6000),
        ev(MALLOC, 9, 5, 2**64 - 16),
        ev(MALLOC, 10, 5, 0),
    ]
    p = write(tmp_path, Trace([events_block(1, ev_list)]))
    d = trace.info(p)
    assert d["untracked_frees"] == 2 and d["final_live_bytes"] == 50 + 7 + 9 + 5 + 5
    r = replayed_fast(p, speed=0)
    assert r["live_bytes_end"] == d["final_live_bytes"] and r["untracked_frees"] == 2
    assert trace.serial_curve(p, points=50) == d["live_curve"]


def test_duplicated_and_reordered_blocks_replay(tmp_path):
    a = events_block(1, [ev(MALLOC, 0, 10, 0x1000), ev(MALLOC, 1, 20, 0x2000)])
    b = events_block(1, [ev(FREE, 5, ptr=0x1000), ev(FREE, 6, ptr=0x2000)])
    c = events_block(2, [ev(MALLOC, 3, 30, 0x1000)])
    for i, blocks in enumerate(([a, a, b, c], [b, a, c], [c, b, a, b])):
        p = write(tmp_path, Trace(blocks), f"{i}.trace")
        d = trace.info(p)
        r = replayed_fast(p, speed=0)
        assert r["live_bytes_end"] == d["final_live_bytes"]


# ---- structure: truncation, headers, counts ----


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, native_dir):
    path = tmp_path_factory.mktemp("rec") / "x.trace"
    trace.record(path, [str(native_dir / "stressors"), "--pattern", "xmalloc", "--rounds", "1", "--slots", "500"])
    return path.read_bytes()


def _block_offsets(blob: bytes) -> list[tuple[int, int]]:
    """(start, payload length) of each block of a well-formed trace."""
    out, at = [], 64
    while at < len(blob):
        plen = int.from_bytes(blob[at + 4 : at + 8], "little")
        out.append((at, plen))
        at += 32 + plen
    return out


@pytest.mark.parametrize(
    "where",
    [
        "in-magic",
        "in-header",
        "block-header-start",
        "block-header-mid",
        "block-header-end",
        "payload-first-byte",
        "payload-middle",
        "last-byte",
        "last-block-header",
        "last-payload-middle",
    ],
)
def test_truncated_recordings_are_corrupt(tmp_path, recorded, where):
    blocks = _block_offsets(recorded)
    first, (last, last_len) = blocks[0][0], blocks[-1]
    n = {
        "in-magic": 5,
        "in-header": 40,
        "block-header-start": first + 1,
        "block-header-mid": first + 16,
        "block-header-end": first + 31,
        "payload-first-byte": first + 33,
        "payload-middle": first + 32 + blocks[0][1] // 2,
        "last-byte": len(recorded) - 1,
        "last-block-header": last + 20,
        "last-payload-middle": last + 32 + last_len // 2,
    }[where]
    p = write(tmp_path, recorded[:n])
    refused(lambda: trace.info(p), "cannot use the trace: .*(cut short|not an alloclab trace|needs .* bytes)")
    refused(lambda: trace.replay(p, timeout=10), "cannot use the trace")


@pytest.mark.parametrize("seed", range(8))
def test_bit_flips_give_an_answer_or_one_line(tmp_path, recorded, seed):
    rng = random.Random(seed)
    blob = bytearray(recorded)
    for _ in range(1 + seed % 4):
        i = rng.randrange(len(blob))
        blob[i] ^= 1 << rng.randrange(8)
    p = write(tmp_path, bytes(blob))
    for call in (lambda: trace.info(p), lambda: trace.replay(p, speed=0, timeout=20)):
        try:
            call()
        except UserError as exc:
            assert "\n" not in str(exc) and "signal" not in str(exc)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda t: setattr(t, "version", 4), "format version 4"),
        (lambda t: setattr(t, "tick_ns", 0), "timestamp unit 0"),
        (lambda t: setattr(t, "tick_ns", 10**7), "timestamp unit"),
        (lambda t: setattr(t.blocks[0], "events", len(t.blocks[0].ops) + 1), "events but"),
        (lambda t: setattr(t.blocks[0], "events", 0), "impossible sizes|events but"),
        (lambda t: setattr(t.blocks[0], "raw_len", 8 << 20), "impossible sizes"),
        (lambda t: setattr(t.blocks[0], "raw_len", t.blocks[0].raw_len or 5), "does not decompress|impossible"),
        (lambda t: t.blocks[0].ops.__setitem__(0, 9), "unknown operation 9"),
        (lambda t: t.blocks[0].ops.__setitem__(0, 0), "unknown operation 0"),
        (lambda t: t.blocks[0].pointers.pop(), "cut short"),
        (lambda t: t.blocks[0].pointers.append(1), "bytes left"),
        (lambda t: t.blocks[0].times.append(1), "bytes left"),
        (lambda t: t.blocks[0].sizes.pop(), "cut short"),
        (lambda t: t.to_bytes()[:12] + b"\0\0\0\0" + t.to_bytes()[16:], "different raw and stored"),
    ],
    ids=[
        "version",
        "tick0",
        "tickhuge",
        "events+1",
        "events0",
        "rawhuge",
        "rawlen",
        "op9",
        "op0",
        "ptr-missing",
        "ptr-extra",
        "time-extra",
        "size-missing",
        "zstd-flag-cleared",
    ],
)
def test_field_damage_is_named(tmp_path, recorded, change, match):
    t = parse(recorded)
    damaged = change(t)  # changes t in place, or returns the damaged bytes
    p = write(tmp_path, damaged if isinstance(damaged, bytes) else t)
    refused(lambda: trace.info(p), match)


def test_header_only_trace_is_an_empty_recording(tmp_path):
    p = write(tmp_path, Trace([]))
    d = trace.info(p)
    assert d["events"] == 0 and d["live_curve"] == []
    assert replayed_fast(p, speed=0)["operations"] == 0


@pytest.mark.parametrize("kind", ["directory", "fifo", "empty"])
def test_not_a_trace_file(tmp_path, kind):
    p = tmp_path / "x.trace"
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.write_bytes(b"")
    refused(lambda: trace.info(p), "not a regular file|is empty")


# ---- the CLI: deadlines, exit 2, one line, nothing left behind ----


def test_a_timeout_stops_the_replayer_and_its_group(tmp_path):
    t = Trace([events_block(1, [ev(MALLOC, 0, 100, 0x1000), ev(FREE, 3600 * 10**9 // TICK_NS, ptr=0x1000)])])
    p = write(tmp_path, t, "slow-unique-name.trace")
    start = time.monotonic()
    refused(lambda: trace.replay(p, timeout=1), "did not finish within 1 s")
    assert time.monotonic() - start < 5
    left = subprocess.run(["pgrep", "-f", "slow-unique-name.trace"], capture_output=True, text=True)
    assert left.stdout == ""


@pytest.mark.parametrize(
    "args,match",
    [
        (["replay", "{tib}"], r"--max-alloc"),
        (["replay", "{gap}", "--max-duration", "10"], r"--max-duration"),
        (["replay", "{gap}", "--timeout", "1"], r"did not finish within 1 s"),
        (["replay", "{gap}", "--speed", "nan"], r"--speed nan is not a finite number"),
        (["replay", "{gap}", "--max-gap", "-1"], r"--max-gap = '-1' is not a duration"),
        (["info", "{early}"], r"thread 1 has events after its exit"),
        (["info", "{dir}"], r"not a regular file"),
    ],
)
def test_cli_gives_one_line_and_exit_2(tmp_path, args, match):
    files = {
        "tib": write(tmp_path, Trace([events_block(1, [ev(MALLOC, 0, 1 << 40, 0x1000)])]), "tib.trace"),
        "gap": write(
            tmp_path,
            Trace([events_block(1, [ev(MALLOC, 0, 1, 0x10), ev(FREE, 10 * YEAR_TICKS, ptr=0x10)])]),
            "gap.trace",
        ),
        "early": write(tmp_path, Trace([events_block(1, [ev(THREAD_EXIT, 0), ev(MALLOC, 1, 1, 0x10)])]), "early.trace"),
        "dir": tmp_path,
    }
    proc = run_cli("trace", *[a.format(**files) for a in args], timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert re.search(match, proc.stderr), proc.stderr


def test_replayer_refuses_bad_options(tmp_path, native_dir):
    p = write(tmp_path, Trace([events_block(1, [ev(MALLOC, 0, 1, 0x10)])]))
    for args in (
        ["--speed", "-1"],
        ["--speed", "inf"],
        ["--points", "0"],
        ["--points", "1e9"],
        ["--bogus"],
        ["--max-threads", "0"],
        ["--info", "--serial"],
        ["--speed"],
    ):
        proc = subprocess.run([str(native_dir / "replay"), str(p), *args], capture_output=True, text=True, timeout=10)
        assert proc.returncode == 2 and proc.stderr.startswith("replay: "), (args, proc.stderr)
