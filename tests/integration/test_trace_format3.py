"""Format version 3 (issue 16, trace size): every built-in workload's recording reads back exactly
(the reader's events, encoded again, give the recorder's bytes; they also survive a second round
trip), the Python codec is the recorder's encoder, a format-2 recording made by the previous
alloclab reads as it did, and a killed recording reads up to its last whole block."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from alloclab.common.errors import UserError
from alloclab.run import trace
from tests.trace_codec import COMPLETE_FLAG, TICK_NS, decode_events, encode_blocks, parse

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"

# Every built-in workload, briefly (benchmarks/trace_overhead.py runs them at full length).
WORKLOADS = {
    "loop": ("stressors", ["--pattern", "loop", "--threads", "2", "--rounds", "20", "--slots", "5000"]),
    "worker-pool": ("worker_pool", ["--builds", "1", "--modules", "200", "--gap", "0", "--threads", "3"]),
    "larson": ("stressors", ["--pattern", "larson", "--threads", "3", "--rounds", "2", "--slots", "5000"]),
    "xmalloc": ("stressors", ["--pattern", "xmalloc", "--threads", "4", "--rounds", "1", "--slots", "5000"]),
    "sawtooth": ("stressors", ["--pattern", "sawtooth", "--load", "0.4", "--period", "0.2", "--mb", "8"]),
    "frag": ("frag", ["--load", "0.3", "--mb", "4", "--threads", "2"]),
    "tor-dircache": ("tor_dircache", ["--load", "0.5", "--hour", "0.1"]),
}


def recode(native_dir, path: Path, *args: str) -> dict:
    proc = subprocess.run(
        [str(native_dir / "trace_recode"), str(path), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory, native_dir):
    d = tmp_path_factory.mktemp("v3")
    out = {}
    for name, (prog, argv) in WORKLOADS.items():
        out[name] = d / f"{name}.trace"
        made = trace.record(out[name], [str(native_dir / prog), *argv])
        assert made["exit_code"] == 0 and made["events"] > 1000
    return out


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_builtin_workload_round_trips_exactly(recordings, native_dir, tmp_path, name):
    path = recordings[name]
    assert int.from_bytes(path.read_bytes()[8:12], "little") == 3
    r = recode(native_dir, path, "--out", str(tmp_path / "again.trace"))
    # the events read, encoded again, are the recorder's bytes, block for block
    assert r["round_trip"] == "identical" and r["same_bytes"] is True
    assert r["events"] == trace.info(path, points=2)["events"]
    again = recode(native_dir, tmp_path / "again.trace")
    assert again["round_trip"] == "identical" and again["same_bytes"] is True
    assert (tmp_path / "again.trace").read_bytes() == path.read_bytes()


def test_python_codec_is_the_recorders_encoder(recordings):
    t = parse(recordings["worker-pool"].read_bytes())
    events, groups, at = decode_events(t), [], 0
    for b in t.blocks:
        groups.append((b.thread, [e for _, e in events[at : at + len(b.ops)]]))
        at += len(b.ops)
    assert at == len(events) > 1000
    for mine, recorded in zip(encode_blocks(groups), t.blocks, strict=True):
        assert (mine.ops, mine.times, mine.sizes, mine.pointers, mine.slots, mine.reuse) == (
            recorded.ops,
            recorded.times,
            recorded.sizes,
            recorded.pointers,
            recorded.slots,
            recorded.reuse,
        )
    reuse = [c for b in t.blocks for c in b.reuse]
    assert sum(0 < c <= 16 for c in reuse) > len(reuse) // 10  # freed blocks reused, by their class


def test_a_format_2_recording_reads_as_it_did(native_dir):
    """worker_pool.v2.trace was recorded by the format-2 recorder (commit b5a2729); its .info.json
    is that version's own `replay --info --points 200` of it: every field it gave, the same (fields
    added since, such as allocations_over_live, come on top)."""
    path = DATA / "worker_pool.v2.trace"
    assert int.from_bytes(path.read_bytes()[8:12], "little") == 2
    then, now = json.loads((DATA / "worker_pool.v2.info.json").read_text()), trace.info(path, points=200)
    assert {k: now[k] for k in then} == then
    assert now["allocations_over_live"] == 0
    r = recode(native_dir, path)
    assert r["version_in"] == 2 and r["round_trip"] == "identical"
    assert r["bytes_per_event"] < path.stat().st_size / r["events"]  # and it is smaller in format 3


def test_a_killed_recording_reads_up_to_its_last_whole_block(recordings, tmp_path):
    blob = recordings["larson"].read_bytes()
    starts, at = [], 64
    while at < len(blob):
        starts.append(at)
        at += 32 + int.from_bytes(blob[at + 4 : at + 8], "little")
    assert len(starts) >= 3
    flags = int.from_bytes(blob[12:16], "little")
    assert flags & COMPLETE_FLAG
    killed = blob[:12] + (flags & ~COMPLETE_FLAG).to_bytes(4, "little") + blob[16:]
    last = starts[-1]
    cut = last + 32 + (len(blob) - last - 32) // 2  # inside the last block's columns
    p = tmp_path / "killed.trace"
    p.write_bytes(killed[:cut])
    d = trace.info(p, points=2)
    whole = sum(int.from_bytes(blob[s + 16 : s + 20], "little") for s in starts[:-1])
    assert d["events"] == whole and d["truncated_bytes"] == cut - last
    # the same cut with the COMPLETE flag is corrupt, not killed
    p.write_bytes(blob[:cut])
    with pytest.raises(UserError, match="needs .* bytes"):
        trace.info(p, points=2)
    assert len(parse(killed[:last]).blocks) == len(starts) - 1  # the codec reads the whole blocks


def test_a_trace_is_read_in_the_tick_its_header_names(recordings, native_dir, tmp_path):
    """`trace_recode --tick` (how the coarser-tick sizes of benchmarks/README.md were measured)
    writes its tick in the header; the reader and the codec honour it: every time is the original
    rounded down to the tick, and the durations agree to within one tick."""
    path, coarse = recordings["sawtooth"], tmp_path / "coarse.trace"
    assert int.from_bytes(path.read_bytes()[36:40], "little") == TICK_NS
    r = recode(native_dir, path, "--tick", "4000", "--out", str(coarse))
    assert r["round_trip"] == "identical" and r["tick_ns"] == 4000 and "same_bytes" not in r
    assert coarse.stat().st_size < path.stat().st_size
    fine, us = parse(path.read_bytes()), parse(coarse.read_bytes())
    assert (fine.tick_ns, us.tick_ns) == (TICK_NS, 4000)
    fine_ev, us_ev = decode_events(fine), decode_events(us)
    assert len(fine_ev) == len(us_ev) > 1000
    assert all(
        a[0] == b[0] and b[1][1] == a[1][1] * TICK_NS // 4000 and a[1][2:] == b[1][2:] for a, b in zip(fine_ev, us_ev)
    )
    before, after = trace.info(path, points=2), trace.info(coarse, points=2)
    assert after["events"] == before["events"]
    assert abs(after["duration_s"] - before["duration_s"]) <= 4.001e-6
    back = recode(native_dir, coarse)  # a coarse-tick file re-encodes as itself
    assert back["round_trip"] == "identical" and back["same_bytes"] is True and back["tick_ns"] == 4000
