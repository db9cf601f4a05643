"""The recorder (format version 3; version 2 crafted too): every event kind round-trips, frees by allocation number,
and a trace survives fork, thread exit, a fatal signal and kill -9; the clock fallback path."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time

import pytest

from alloclab.common.errors import UserError
from alloclab.native import build
from alloclab.run import trace
from tests.trace_codec import (
    CALLOC,
    COMPLETE_FLAG,
    FREE,
    MALLOC,
    MEMALIGN,
    REALLOC,
    THREAD_EXIT,
    TSC_FLAG,
    Trace,
    decode_events,
    encode_blocks,
    ev,
    events_block,
    parse,
)


def _env(path, **extra):
    return {
        **os.environ,
        "ALLOCLAB_TRACE_FILE": str(path),
        "LD_PRELOAD": str(build.program("liballoclab_trace.so")),
        **extra,
    }


# Two threads; thread 2 frees (by address: its block comes first) what thread 1 allocates later in the
# file, reallocs of known and unknown addresses, frees in and out of allocation order, a reused address.
EVENTS = [
    (
        1,
        [
            ev(MALLOC, 0, 24, 0x10000),
            ev(CALLOC, 1, 4096, 0x20000),
            ev(MEMALIGN, 2, 100, 0x30000, align=64),
            ev(MALLOC, 3, 40, 0x40000),
            ev(MALLOC, 4, 48, 0x40040),
            ev(MALLOC, 5, 56, 0x40080),
            ev(FREE, 6, ptr=0x40000),
            ev(FREE, 7, ptr=0x40080),
            ev(FREE, 8, ptr=0x40040),  # out of order
            ev(REALLOC, 9, 5000, 0x10000, 0x50000),
            ev(REALLOC, 10, 70, 0x99990, 0x60000),  # known, unknown
            ev(MALLOC, 11, 40, 0x40000),
            ev(FREE, 12, ptr=0x40000),  # address reused
            ev(FREE, 13, ptr=0x77770),
        ],
    ),  # never allocated
    (2, [ev(FREE, 14, ptr=0x80000), ev(MALLOC, 15, 8, 0x90000), ev(THREAD_EXIT, 16)]),
    (
        1,
        [
            ev(MALLOC, 13, 64, 0x80000),
            ev(FREE, 17, ptr=0x30000),
            ev(FREE, 18, ptr=0x20000),
            ev(FREE, 19, ptr=0x60000),
            ev(FREE, 20, ptr=0x90000),
            ev(THREAD_EXIT, 21),
        ],
    ),
]


@pytest.mark.parametrize("version", [2, 3])
def test_every_event_kind_round_trips_with_frees_by_number(tmp_path, version):
    blocks = encode_blocks(EVENTS, version)
    codes = [c for b in blocks for c in b.slots]
    assert 0 in codes and any(c > 1 for c in codes)  # both encodings of a free are exercised
    if version == 3:  # reused blocks, cursors and deltas too
        reuse = [c for b in blocks for c in b.reuse]
        assert 0 in reuse and any(0 < c <= 16 for c in reuse) and any(c > 16 for c in reuse)
    p = tmp_path / "t.trace"
    p.write_bytes(Trace(blocks, version=version).to_bytes())
    decoded = decode_events(parse(p.read_bytes()))
    assert decoded == [(th, e) for th, evs in EVENTS for e in evs]
    d = trace.info(p)  # the native reader agrees
    assert d["events"] == sum(len(e) for _, e in EVENTS)
    # the realloc of an address never allocated counts (and replays) as a malloc
    assert (d["malloc"], d["calloc"], d["memalign"], d["realloc"], d["thread_exits"]) == (8, 1, 1, 1, 2)
    # 0x77770 was never allocated; 0x80000's free, by address in the file, still follows its
    # allocation in time, so the replayer pairs them
    assert d["untracked_frees"] == 1
    assert d["final_live_bytes"] == 5000
    assert trace.serial_curve(p, points=5) == trace.info(p, points=5)["live_curve"]


def test_a_free_of_an_allocation_that_is_not_live_is_refused(tmp_path):
    blocks = encode_blocks([(1, [ev(MALLOC, 0, 24, 0x10000), ev(FREE, 1, ptr=0x10000)])])
    blocks[0].slots[-1] = 7  # zigzag 6 = +3: allocation 3, never made
    p = tmp_path / "t.trace"
    p.write_bytes(Trace(blocks).to_bytes())
    with pytest.raises(UserError, match="names allocation 3, which is not live") as exc:
        trace.info(p)
    assert "\n" not in str(exc.value)


def test_version_1_traces_are_still_read(tmp_path):
    t = Trace([events_block(1, [ev(MALLOC, 0, 24, 0x1000), ev(FREE, 3, ptr=0x1000), ev(THREAD_EXIT, 4)])], version=1)
    p = tmp_path / "v1.trace"
    p.write_bytes(t.to_bytes())
    d = trace.info(p)
    assert d["events"] == 3 and d["untracked_frees"] == 0 and d["final_live_bytes"] == 0


SCRIPT = r"""
import ctypes, os, signal, sys, threading, time
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def work(n, size):
    ps = [libc.malloc(size) for _ in range(n)]
    for p in ps[::2]:
        libc.free(p)
ts = [threading.Thread(target=work, args=(3000, 777)) for _ in range(3)]
for t in ts: t.start()
for t in ts: t.join()
pid = os.fork()
if pid == 0:
    work(500, 555)
    os._exit(0)
os.waitpid(pid, 0)
work(2000, 999)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(0)
print("ready", flush=True)
time.sleep(60)
"""


def _signals_at_default() -> None:
    """Child setup: the signals these tests send back at their default disposition. A caller under
    nohup passes SIGHUP on ignored, a shell without job control SIGINT; the recorder (and Python's
    KeyboardInterrupt) rightly leave an ignored signal alone, so the test would wait in vain."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("end", ["exit", "SIGTERM", "SIGHUP"])
def test_fork_thread_exit_exit_and_signal_death_lose_nothing(tmp_path, end):
    p = tmp_path / "t.trace"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "exit" if end == "exit" else "wait"],
        env=_env(p),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_signals_at_default,
    )
    if end != "exit":
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(getattr(signal, end))
    rc = proc.wait(timeout=60)
    assert rc == (0 if end == "exit" else -getattr(signal, end))  # died of the signal, after writing
    d = trace.info(p)
    # the parent's own events, all of them: 3 threads x 3000 + 2000 mallocs of these sizes,
    # none of the forked child's 555-byte ones; the three threads' exit markers
    assert d["thread_exits"] >= 3
    hist = d["size_histogram_log2"]
    assert hist[9] >= 3 * 3000 + 2000  # 777 and 999 bytes: [512, 1024)
    t = parse(p.read_bytes())
    assert all(e[1][2] != 555 for e in decode_events(t))


def test_kill_9_leaves_a_trace_readable_up_to_its_last_block(tmp_path):
    p = tmp_path / "t.trace"
    proc = subprocess.Popen(
        [
            str(build.program("stressors")),
            "--pattern",
            "loop",
            "--threads",
            "2",
            "--rounds",
            "100000",
            "--slots",
            "20000",
        ],
        env=_env(p),
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while (not p.exists() or p.stat().st_size < 200_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    d = trace.info(p)
    assert d["events"] >= 32768 and d["events"] % 32768 == 0  # whole blocks only, the partial ones lost
    assert d["threads"] >= 1
    assert not struct.unpack_from("<I", p.read_bytes(), 12)[0] & COMPLETE_FLAG


def test_python_keeps_its_own_ctrl_c(tmp_path):
    """The recorder leaves SIGINT alone: Python still turns it into KeyboardInterrupt."""
    script = "import time\ntry:\n    print('ready', flush=True); time.sleep(30)\nexcept KeyboardInterrupt:\n    print('caught')"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=_env(tmp_path / "t.trace"),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_signals_at_default,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.communicate(timeout=30)[0].strip() == "caught" and proc.returncode == 0


def test_a_killed_recording_is_read_to_its_last_whole_block_a_finished_one_is_not(tmp_path):
    """kill -9 can land inside a block's write(): without the COMPLETE flag (set when the recorder
    finishes) the partial block is ignored; with it, a cut file is corrupt."""
    blocks = encode_blocks(
        [
            (1, [ev(MALLOC, i, 32, 0x1000 + 16 * i) for i in range(100)]),
            (1, [ev(FREE, 200 + i, ptr=0x1000 + 16 * i) for i in range(100)]),
        ]
    )
    finished = Trace(blocks).to_bytes()
    killed = Trace(blocks, flags=1).to_bytes()
    cut = len(finished) - 7
    p = tmp_path / "t.trace"
    p.write_bytes(killed[:cut])
    d = trace.info(p)
    assert d["events"] == 100 and d["truncated_bytes"] > 0 and d["final_live_bytes"] == 3200
    p.write_bytes(finished[:cut])
    with pytest.raises(UserError, match="needs .* bytes"):
        trace.info(p)


@pytest.mark.parametrize("clock", ["tsc", "monotonic"])
def test_timestamps_match_the_clock_on_both_paths(tmp_path, clock):
    """The TSC path (calibrated against CLOCK_MONOTONIC) and the fallback give the same durations."""
    p = tmp_path / "t.trace"
    extra = {"ALLOCLAB_TRACE_CLOCK": "monotonic"} if clock == "monotonic" else {}
    script = "import ctypes, time; l = ctypes.CDLL(None); l.malloc(100); time.sleep(1.0); l.malloc(200)"
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", script], env=_env(p, **extra), check=True)
    wall = time.monotonic() - start
    blob = p.read_bytes()
    flags, tsc_hz = struct.unpack_from("<I", blob, 12)[0], struct.unpack_from("<Q", blob, 40)[0]
    d = trace.info(p)
    assert 0.95 <= d["duration_s"] <= wall + 0.05
    if clock == "monotonic":
        assert not flags & TSC_FLAG and tsc_hz == 0
    elif flags & TSC_FLAG:  # an invariant TSC: its measured rate is recorded
        assert 1e8 < tsc_hz < 1e10
    else:
        pytest.skip("no invariant TSC here: the recorder used CLOCK_MONOTONIC (covered by the other case)")
