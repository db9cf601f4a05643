"""The workload side channel: only consistent snapshots are accepted (seqlock)."""

from alloclab.run.workloads import STATS_FORMAT, STATS_MAGIC, read_stats


def write(path, seq, seq_end, magic=STATS_MAGIC, live=1234, ops=99):
    path.write_bytes(STATS_FORMAT.pack(magic, 1, 1, seq, ops, live, 2000, 5, seq_end))


def test_consistent_snapshot(tmp_path):
    p = tmp_path / "s.bin"
    write(p, 4, 4)
    s = read_stats(p)
    assert (s.live_bytes, s.ops, s.phase, s.peak_live_bytes) == (1234, 99, "load", 2000)


def test_torn_write_is_rejected(tmp_path):
    p = tmp_path / "s.bin"
    write(p, 5, 4)  # writer died half way: seq odd
    assert read_stats(p) is None
    write(p, 6, 4)  # seq and its copy disagree
    assert read_stats(p) is None


def test_foreign_or_short_files(tmp_path):
    p = tmp_path / "s.bin"
    write(p, 2, 2, magic=1)
    assert read_stats(p) is None
    p.write_bytes(b"short")
    assert read_stats(p) is None
    assert read_stats(tmp_path / "absent") is None
