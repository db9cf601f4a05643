"""Trace memory follows the file's real content: at most 1 M + 4 events per byte of file (the most
compressible recording measured takes 0.43 byte/event), and one request over 1 GiB is refused by
default (docs/reference/trace-format.md, "Limits"; peak memory: benchmarks/trace_memory_ceiling.py)."""

from __future__ import annotations

import pytest

from alloclab.common.errors import UserError
from alloclab.run import trace
from tests.trace_codec import FREE, MALLOC, Block, Trace, ev, events_block


def _claiming(tmp_path, events: int):
    """A small file whose zstd frames unpack to `events` 16-byte mallocs: one block of 100,000,
    encoded once and repeated under distinct thread numbers."""
    per = 100_000
    one = Trace([Block(1, 0, ops=[MALLOC] * per, times=[0] * per, sizes=[16] * per, pointers=[1] * per)]).to_bytes()
    header, body = one[:64], one[64:]
    blocks = [body[:12] + t.to_bytes(4, "little") + body[16:] for t in range(1, events // per + 1)]
    p = tmp_path / "dense.trace"
    p.write_bytes(header + b"".join(blocks))
    return p


def test_a_file_claiming_more_events_than_its_bytes_can_carry_is_refused(tmp_path):
    p = _claiming(tmp_path, 1_500_000)  # ~10 KB: 150 events per byte (old ceiling: 4 M + 64/byte)
    assert p.stat().st_size < 20_000
    with pytest.raises(UserError, match="unpacks to over"):
        trace.info(p, points=2)


def test_a_request_over_one_gib_is_refused_by_default(tmp_path):
    p = tmp_path / "big.trace"
    p.write_bytes(Trace([events_block(1, [ev(MALLOC, 0, 2 << 30, 0x1000), ev(FREE, 1, ptr=0x1000)])]).to_bytes())
    with pytest.raises(UserError, match="--max-alloc"):
        trace.check(p)
    assert trace.check(p, limits={"max_alloc": 4 << 30})["operations"] == 2
