"""Record and replay: real programs under the recorder, the replayer under real allocators."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from alloclab.common.errors import UserError
from alloclab.native import build
from alloclab.run import trace
from tests.conftest import run_cli
from tests.experiments import write_experiment

JSON_SCRIPT = """
import json, random
random.seed(1)
docs = []
for round in range(6):
    d = {str(i): {"k": [random.random() for _ in range(8)], "s": "x" * random.randint(1, 300)} for i in range(15000)}
    docs.append(json.dumps(d))
    if len(docs) > 2:
        docs.pop(0)
    parsed = [json.loads(s) for s in docs]
"""


@pytest.fixture(scope="module")
def traces(tmp_path_factory, native_dir):
    d = tmp_path_factory.mktemp("traces")
    made = {}
    made["pool"] = trace.record(
        d / "pool.trace",
        [str(native_dir / "worker_pool"), "--builds", "2", "--modules", "300", "--gap", "0.2", "--threads", "3"],
    )
    made["python"] = trace.record(d / "python.trace", [sys.executable, "-c", JSON_SCRIPT])
    return d, made


def test_recording_is_complete(traces):
    d, made = traces
    pool = made["pool"]
    assert pool["exit_code"] == 0 and pool["threads"] >= 4  # main + 3 workers (+ publisher)
    # a free of memory the loader allocated before the recorder started is legitimately untracked
    assert pool["thread_exits"] >= 3 and pool["untracked_frees"] <= max(2, pool["free"] // 10000)
    assert pool["malloc"] > 10000 and pool["realloc"] > 100
    py = made["python"]
    assert py["exit_code"] == 0 and py["events"] > 1000 and py["peak_live_bytes"] > 5 << 20
    assert pool["bytes_per_event"] < 8


def test_serial_replay_curve_equals_the_recorded_one_exactly(traces, mimalloc):
    d, _ = traces
    recorded = trace.info(d / "pool.trace", points=50)["live_curve"]
    assert trace.serial_curve(d / "pool.trace", points=50) == recorded
    assert trace.serial_curve(d / "pool.trace", points=50, allocator_lib=mimalloc) == recorded


def test_threaded_replay_performs_every_operation(traces, jemalloc):
    d, _ = traces
    info = trace.info(d / "pool.trace")
    r = trace.replay(d / "pool.trace", speed=0, allocator_lib=jemalloc)
    assert r["threads"] == info["threads"]
    assert r["operations"] == info["operations"] - info["thread_exits"]
    assert r["live_bytes_end"] == info["final_live_bytes"]


def test_a_replay_does_not_inherit_the_callers_preload(traces, tmp_path, monkeypatch):
    """alloclab run under someone's LD_PRELOAD (here: the recorder, which writes a file whenever it
    is loaded): a "glibc" replay, its check and --info run without it."""
    d, _ = traces
    leak = tmp_path / "leak.trace"
    monkeypatch.setenv("LD_PRELOAD", str(build.program("liballoclab_trace.so")))
    monkeypatch.setenv("ALLOCLAB_TRACE_FILE", str(leak))
    r = trace.replay(d / "python.trace", speed=0)
    assert r["operations"] > 1000 and trace.info(d / "python.trace", points=5)["events"] > 1000
    assert not leak.exists(), "the replayer ran under the caller's LD_PRELOAD"


def test_replay_keeps_the_recorded_timing(tmp_path, native_dir):
    """sawtooth sleeps between teeth: a speed-1 replay lasts as long as the recording."""
    path = tmp_path / "saw.trace"
    rec = trace.record(
        path, [str(native_dir / "stressors"), "--pattern", "sawtooth", "--load", "2", "--period", "1", "--mb", "4"]
    )
    fast = trace.replay(path, speed=0)
    real = trace.replay(path, speed=1)
    half = trace.replay(path, speed=2)
    assert fast["seconds"] < 0.5 * rec["duration_s"]
    assert real["seconds"] == pytest.approx(rec["duration_s"], rel=0.25)
    assert half["seconds"] == pytest.approx(rec["duration_s"] / 2, rel=0.3)


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty"])
def test_damaged_traces_give_a_clear_error(traces, tmp_path, damage):
    d, _ = traces
    blob = bytearray((d / "pool.trace").read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) * 2 // 3]
    elif damage == "flip":
        for i in range(200, len(blob), 997):
            blob[i] ^= 0x5A
    elif damage == "header":
        blob[0:8] = b"NOTTRACE"
    else:
        blob = bytearray()
    bad = tmp_path / "bad.trace"
    bad.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="cannot use the trace"):
        trace.info(bad)
    proc = run_cli("trace", "info", str(bad))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_cli_record_info_replay(tmp_path, native_dir):
    out = tmp_path / "cli.trace"
    rec = run_cli(
        "trace",
        "record",
        "-o",
        str(out),
        "--under",
        "glibc",
        "--",
        str(native_dir / "stressors"),
        "--pattern",
        "xmalloc",
        "--rounds",
        "2",
        "--slots",
        "2000",
    )
    assert rec.returncode == 0, rec.stderr
    assert "bytes/event" in rec.stdout
    info = run_cli("trace", "info", str(out), "--chart", str(tmp_path / "c.png"))
    assert info.returncode == 0 and (tmp_path / "c.png").stat().st_size > 5000
    rep = run_cli("trace", "replay", str(out), "--speed", "0")
    assert rep.returncode == 0 and "ops/s" in rep.stdout
    js = json.loads(run_cli("trace", "info", str(out), "--json").stdout)
    assert js["threads"] >= 3


def test_trace_as_an_experiment_workload(traces, tmp_path, jemalloc):
    d, _ = traces
    exp = write_experiment(
        tmp_path / "exp.toml",
        "replay",
        None,
        {"glibc": "glibc", "jemalloc": jemalloc},
        interval="0.25s",
        replicas=2,
        phases={"load": "4s"},
        tables={"workload": {"trace": str(d / "python.trace"), "speed": 1}},
    )
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    assert db.execute("SELECT COUNT(*) FROM replicas WHERE verified = 1").fetchone()[0] == 4
    assert db.execute("SELECT MAX(live_bytes) FROM samples").fetchone()[0] > 1 << 20


def test_rss_of_a_replay_tracks_the_original(tmp_path, native_dir, jemalloc):
    """Fidelity: the paced replay of a sawtooth reaches the original's peak RSS. Both run under
    jemalloc with decay 0, which returns freed pages at once: a replay that dropped or misplaced
    frees would climb to several teeth (4 x 48 MB), one that dropped allocations would stay low.
    The peak (ru_maxrss) does not depend on when each process gets the CPU; the shape over time
    does, and is measured in benchmarks/replay_fidelity.py (r fell from > 0.9 to 0.2-0.5 at load
    16-20). The replayer also holds the trace's decoded operations: 1.09-1.10 x measured."""
    path = tmp_path / "saw.trace"
    argv = [str(native_dir / "stressors"), "--pattern", "sawtooth", "--load", "4", "--period", "1", "--mb", "48"]
    trace.record(path, argv)
    env = {**os.environ, "LD_PRELOAD": jemalloc, "MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}

    def peak_kb(cmd):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, cmd
        return usage.ru_maxrss

    original = peak_kb(argv)
    replayed = peak_kb([str(native_dir / "replay"), str(path), "--speed", "1"])
    assert original > 40 * 1024 and 0.95 <= replayed / original <= 1.25, (original, replayed)
