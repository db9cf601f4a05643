"""The trace format (native/trace_format.h) in Python, field by field, to craft and mutate traces.

Version 2 adds a fifth column, slots: a FREE or REALLOC names its allocation by its sequence
number (a delta code) in the table of live allocations both sides keep in file order (LiveTable),
or 0 followed by the address. Version 3 (the recorder's) adds a sixth, reuse: an allocation is
one of the blocks of its size class freed recently in the block (code 1..RECENT), or near where a
recent allocation ended (a cursor, code RECENT+1.., the pointer column holding the difference),
or 0 and a delta; times, sizes and slots are stored as two planes each (low byte, varint of the
rest), and every column is its own zstd frame. A Block holds the values, whatever the version.
`events_block` writes every free by address and every allocation by delta (codes 0), valid on its
own in any version; `encode_blocks` is the recorder's encoder, `decode_events` the reader. Versions
1 (four columns, every free by address) and 2 are still read and written.

alloclab reads traces only through the native reader; this module exists so that tests and the
fuzz campaign (benchmarks/fuzz_traces.py) can build hostile traces event by event and change one
field of a recorded one (a count, a size, a timestamp, a thread number) and still write a file
whose every other byte is valid. zstd comes from the system's libzstd (already needed to build
the recorder), through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from dataclasses import dataclass, field
from functools import cache

MAGIC = b"ALCTRACE"
BLOCK_MAGIC = 0x314B4C42
HEADER = struct.Struct("<8sIIQQII24x")  # 64 bytes
BLOCK_HEADER = struct.Struct("<IIIIIIQ")  # 32 bytes
ZSTD_FLAG = 1
TSC_FLAG = 2
COMPLETE_FLAG = 4  # the recorder finished writing (version 2); absent: a killed recording
VERSION = 3
OLDEST_VERSION = 1
TICK_NS = 1000  # ns per timestamp tick of a new recording (TRACE_TICK_NS)
MALLOC, FREE, CALLOC, REALLOC, MEMALIGN, THREAD_EXIT = 1, 2, 3, 4, 5, 6
MASK64 = (1 << 64) - 1


@cache
def _zstd() -> ctypes.CDLL:
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    lib = ctypes.CDLL(name)
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


def compress(raw: bytes, level: int = 3) -> bytes:
    lib = _zstd()
    cap = lib.ZSTD_compressBound(len(raw))
    out = ctypes.create_string_buffer(cap)
    n = lib.ZSTD_compress(out, cap, raw, len(raw), level)
    if lib.ZSTD_isError(n):
        raise ValueError("zstd compression failed")
    return out.raw[:n]


def decompress(frame: bytes, raw_len: int) -> bytes:
    lib = _zstd()
    out = ctypes.create_string_buffer(max(1, raw_len))
    n = lib.ZSTD_decompress(out, raw_len, frame, len(frame))
    if lib.ZSTD_isError(n) or n != raw_len:
        raise ValueError("block does not decompress")
    return out.raw[:n]


def put_varint(v: int) -> bytes:
    v &= MASK64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _encode(values: list[int]) -> bytes:
    if values and min(values) >= 0 and max(values) < 0x80:  # one byte each: the common crafted case
        return bytes(values)
    return b"".join(map(put_varint, values))


def _varints(buf: bytes) -> list[int]:
    out, v, shift = [], 0, 0
    for b in buf:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    if shift:
        raise ValueError("column ends inside a varint")
    return out


def _unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def _split(values: list[int]) -> tuple[bytes, bytes]:
    """Version 3's two planes of a column: the low bytes, then the rest as varints."""
    return bytes(v & 0xFF for v in values), _encode([(v & MASK64) >> 8 for v in values])


def _unsplit(lo: bytes, hi: bytes) -> list[int]:
    his = _varints(hi)
    if len(his) != len(lo):
        raise ValueError("the planes of a column differ in length")
    return [h << 8 | b for b, h in zip(lo, his)]


ALLOCATING = (MALLOC, CALLOC, MEMALIGN, REALLOC)
COLUMNS = {1: 4, 2: 5, 3: 9}


@dataclass
class Block:
    """One block: a thread's events as the four columns hold them (values, not bytes)."""

    thread: int
    first_ts: int  # ticks
    ops: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # tick deltas, the first from first_ts
    sizes: list[int] = field(default_factory=list)  # alignment, size (MEMALIGN); size (MALLOC, CALLOC, REALLOC)
    pointers: list[int] = field(default_factory=list)  # zigzag-decoded deltas of address >> 4
    slots: list[int] | None = None  # version 2: per FREE/REALLOC, seq_code or 0; None: all 0
    reuse: list[int] | None = None  # version 3: per allocation, its code; None: all 0
    events: int | None = None  # the header's count; None: len(ops)
    raw_len: int | None = None  # the header's raw length; None: the real one

    def columns(self, version: int = VERSION) -> list[bytes]:
        zigzag = [((v << 1) ^ (v >> 63)) & MASK64 for v in self.pointers]
        ops = bytes(op & 0xFF for op in self.ops)
        slots = self.slots if self.slots is not None else [0] * sum(op in (FREE, REALLOC) for op in self.ops)
        if version < 3:
            cols = [ops, _encode(self.times), _encode(self.sizes), _encode(zigzag)]
            return cols + [_encode(slots)] if version >= 2 else cols
        reuse = self.reuse if self.reuse is not None else [0] * sum(op in ALLOCATING for op in self.ops)
        return [ops, *_split(self.times), *_split(self.sizes), _encode(zigzag), *_split(slots), _encode(reuse)]

    def payload(self, version: int = VERSION) -> bytes:
        return b"".join(struct.pack("<I", len(c)) + c for c in self.columns(version))


@dataclass
class Trace:
    blocks: list[Block] = field(default_factory=list)
    flags: int = ZSTD_FLAG | COMPLETE_FLAG
    version: int = VERSION
    start_realtime_ns: int = 1_700_000_000 * 10**9
    start_monotonic_ns: int = 10**12
    pid: int = 4242
    tick_ns: int = TICK_NS
    tsc_hz: int = 0

    def to_bytes(self) -> bytes:
        out = [
            HEADER.pack(
                MAGIC, self.version, self.flags, self.start_realtime_ns, self.start_monotonic_ns, self.pid, self.tick_ns
            )
        ]
        if self.tsc_hz:
            out[0] = out[0][:40] + struct.pack("<Q", self.tsc_hz) + out[0][48:]
        done: dict[int, tuple[bytes, bytes]] = {}  # a block repeated is encoded once
        for b in self.blocks:
            if id(b) not in done:
                raw = b.payload(self.version)
                if self.version >= 3:  # each column its own frame, after its two lengths
                    frames = [compress(c) if self.flags & ZSTD_FLAG and c else c for c in b.columns(self.version)]
                    stored = b"".join(
                        struct.pack("<II", len(c), len(f)) + f for c, f in zip(b.columns(self.version), frames)
                    )
                else:
                    stored = compress(raw) if self.flags & ZSTD_FLAG else raw
                done[id(b)] = raw, stored
            raw, stored = done[id(b)]
            events = len(b.ops) if b.events is None else b.events
            raw_len = len(raw) if b.raw_len is None else b.raw_len
            out.append(
                BLOCK_HEADER.pack(
                    BLOCK_MAGIC,
                    len(stored),
                    raw_len & 0xFFFFFFFF,
                    b.thread & 0xFFFFFFFF,
                    events & 0xFFFFFFFF,
                    0,
                    b.first_ts & MASK64,
                )
            )
            out.append(stored)
        return b"".join(out)


def parse(data: bytes) -> Trace:
    """Decode a well-formed trace (ValueError otherwise): the starting point of mutations."""
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise ValueError("not an alloclab trace")
    _, version, flags, rt, mono, pid, tick = HEADER.unpack_from(data)
    t = Trace([], flags, version, rt, mono, pid, tick, struct.unpack_from("<Q", data, 40)[0])
    if version not in COLUMNS:
        raise ValueError(f"format version {version}")
    ncols = COLUMNS[version]
    at = HEADER.size
    while at < len(data):
        magic, plen, rlen, thread, events, _, first = BLOCK_HEADER.unpack_from(data, at)
        if magic != BLOCK_MAGIC:
            raise ValueError(f"no block marker at byte {at}")
        body = data[at + BLOCK_HEADER.size : at + BLOCK_HEADER.size + plen]
        cols, p = [], 0
        if version >= 3:
            for _ in range(ncols):
                n, stored = struct.unpack_from("<II", body, p)
                frame = body[p + 8 : p + 8 + stored]
                cols.append(decompress(frame, n) if flags & ZSTD_FLAG and n else frame)
                p += 8 + stored
        else:
            raw = decompress(body, rlen) if flags & ZSTD_FLAG else body
            for _ in range(ncols):
                (n,) = struct.unpack_from("<I", raw, p)
                cols.append(raw[p + 4 : p + 4 + n])
                p += 4 + n
        if version >= 3:
            b = Block(
                thread,
                first,
                list(cols[0]),
                _unsplit(cols[1], cols[2]),
                _unsplit(cols[3], cols[4]),
                [_unzigzag(u) for u in _varints(cols[5])],
                _unsplit(cols[6], cols[7]),
                _varints(cols[8]),
            )
        else:
            b = Block(
                thread,
                first,
                list(cols[0]),
                _varints(cols[1]),
                _varints(cols[2]),
                [_unzigzag(u) for u in _varints(cols[3])],
                _varints(cols[4]) if ncols == 5 else None,
            )
        t.blocks.append(b)
        at += BLOCK_HEADER.size + plen
    return t


def events_block(thread: int, events: list[tuple], first_ts: int | None = None) -> Block:
    """A block from absolute events: (op, ts_ticks, size, ptr, new_ptr, align); the unused fields
    of an operation are ignored."""
    first = events[0][1] if first_ts is None and events else (first_ts or 0)
    b = Block(thread, first)
    last_ts, last_ptr = first, 0
    for op, ts, size, ptr, new_ptr, align in events:
        b.ops.append(op)
        b.times.append(ts - last_ts)
        last_ts = ts
        if op == MEMALIGN:
            b.sizes.append(align)
        if op in (MALLOC, CALLOC, MEMALIGN):
            b.sizes.append(size)
        if op != THREAD_EXIT:
            a = ptr >> 4
            b.pointers.append(a - last_ptr)
            last_ptr = a
        if op == REALLOC:
            b.sizes.append(size)
            n = new_ptr >> 4
            b.pointers.append(n - last_ptr)
            last_ptr = n
    return b


def ev(op: int, ts: int, size: int = 0, ptr: int = 0, new_ptr: int = 0, align: int = 0) -> tuple:
    return (op, ts, size, ptr, new_ptr, align)


class LiveTable:
    """The live-allocation table of format versions 2 and 3 (trace_format.h, live_table), keyed by
    address >> 4 as the columns hold it: every allocation numbered in turn from 1; a free by
    number is written as seq_code(number, previous). It keeps each allocation's size class (used
    from version 3 on)."""

    def __init__(self) -> None:
        self.seq_of: dict[int, tuple[int, int]] = {}  # address -> (number, size class)
        self.addr_of: dict[int, int] = {}
        self.next_seq = 0

    def alloc(self, addr: int, cls: int = 0) -> None:
        old = self.seq_of.pop(addr, None)  # its free came first in the file, by address
        if old is not None:
            self.addr_of.pop(old[0], None)
        self.next_seq += 1
        self.seq_of[addr] = (self.next_seq, cls)
        self.addr_of[self.next_seq] = addr

    def free_addr(self, addr: int) -> tuple[int, int]:
        """The writer's side: the allocation's (number, class), or (0, 0) when addr is not live."""
        seq, cls = self.seq_of.pop(addr, (0, 0))
        self.addr_of.pop(seq, None)
        return seq, cls

    def free_seq(self, seq: int) -> tuple[int, int]:
        """The reader's side: (address, class) of allocation seq (ValueError when it is not live)."""
        if seq not in self.addr_of:
            raise ValueError(f"a free names allocation {seq}, which is not live")
        addr = self.addr_of.pop(seq)
        return addr, self.seq_of.pop(addr)[1]


def seq_code(seq: int, prev: int) -> int:
    d = (seq - prev) & MASK64
    d = d - (1 << 64) if d >> 63 else d
    return (((d << 1) ^ (d >> 63)) & MASK64) + 1


def seq_decode(code: int, prev: int) -> int:
    return (prev + _unzigzag(code - 1)) & MASK64


# Version 3's per-block state (trace_format.h, block_state).
RECENT = 16  # freed blocks remembered per size class
CURSORS = 16  # where the latest allocations ended
CURSOR_REACH = 256  # in 16-byte units


def size_class(size: int) -> int:
    if size <= 1024:
        return (size + 23) >> 4
    e = (size - 1).bit_length() - 1
    return 66 + (e - 10) * 4 + (((size - 1) >> (e - 2)) & 3)


class BlockState:
    def __init__(self) -> None:
        self.last_ptr = self.prev_seq = 0
        self.recent: dict[int, list[int]] = {}  # class -> freed addresses, oldest first
        self.cursors: list[int] = []  # latest first

    def push(self, cls: int, addr: int) -> None:
        r = self.recent.setdefault(cls, [])
        if len(r) == RECENT:
            r.pop(0)
        r.append(addr)

    def take(self, cls: int, addr: int) -> int:
        r = self.recent.get(cls, [])
        for i in range(len(r) - 1, -1, -1):
            if r[i] == addr:
                del r[i]
                return len(r) + 1 - i
        return 0

    def get(self, cls: int, k: int) -> int:
        r = self.recent.get(cls, [])
        if k > len(r):
            raise ValueError(f"an allocation reuses freed block {k} of its class, which has fewer")
        return r.pop(len(r) - k)

    def use_cursor(self, j: int, end: int) -> None:
        if j < len(self.cursors):
            del self.cursors[j]
        elif len(self.cursors) == CURSORS:
            self.cursors.pop()
        self.cursors.insert(0, end & MASK64)


def encode_blocks(blocks: list[tuple[int, list[tuple]]], version: int = VERSION) -> list[Block]:
    """Blocks as the recorder writes them (trace_encode.h): (thread, absolute events) in file
    order, frees by number where the table knows the address; version 2 or 3."""
    table, out = LiveTable(), []
    for thread, events in blocks:
        first = events[0][1] if events else 0
        b = Block(thread, first, slots=[], reuse=[] if version >= 3 else None)
        st, last_ts = BlockState(), first
        for op, ts, size, ptr, new_ptr, align in events:
            b.ops.append(op)
            b.times.append(ts - last_ts)
            last_ts = ts
            if op == THREAD_EXIT:
                continue
            if op in (FREE, REALLOC):
                a = ptr >> 4
                seq, cls = table.free_addr(a)
                b.slots.append(seq_code(seq, st.prev_seq) if seq else 0)
                if seq:
                    st.prev_seq = seq
                    st.push(cls, a)
                else:
                    b.pointers.append(a - st.last_ptr)
                st.last_ptr = a  # deltas continue from the block just freed
                if op == FREE:
                    continue
            if op == MEMALIGN:
                b.sizes.append(align)
            b.sizes.append(size)
            a = (new_ptr if op == REALLOC else ptr) >> 4
            cls = size_class(size)
            if version >= 3:
                k = st.take(cls, a)
                if not k:
                    # the first cursor within 16 bytes, else the nearest within reach
                    near = [(abs(a - c), j) for j, c in enumerate(st.cursors) if abs(a - c) < CURSOR_REACH]
                    close = [j for d, j in near if d <= 1]
                    j = close[0] if close else min(near)[1] if near else len(st.cursors)
                    if near:
                        k = RECENT + 1 + j
                        b.pointers.append(a - st.cursors[j])
                    else:
                        b.pointers.append(a - st.last_ptr)
                    st.use_cursor(j, a + ((size + 15) >> 4))
                b.reuse.append(k)
            else:
                b.pointers.append(a - st.last_ptr)
            st.last_ptr = a
            table.alloc(a, cls)
        out.append(b)
    return out


def decode_events(t: Trace) -> list[tuple[int, tuple]]:
    """Every event of a parsed trace as (thread, (op, ts_ticks, size, ptr, new_ptr, align)), in file
    order, pointers as the reader resolves them (addresses >> 4 << 4)."""
    table, out = LiveTable(), []
    for b in t.blocks:
        ts, st = b.first_ts, BlockState()
        sizes, pointers, slots, reuse = iter(b.sizes), iter(b.pointers), iter(b.slots or []), iter(b.reuse or [])
        for op, dt in zip(b.ops, b.times):
            ts += dt
            size = ptr = new_ptr = align = 0
            if op in (FREE, REALLOC):
                v = next(slots, 0) if t.version >= 2 else 0
                if v:
                    st.prev_seq = seq_decode(v, st.prev_seq)
                    st.last_ptr, cls = table.free_seq(st.prev_seq)
                    st.push(cls, st.last_ptr)
                else:
                    st.last_ptr = (st.last_ptr + next(pointers)) & MASK64
                ptr = st.last_ptr << 4
            if op == MEMALIGN:
                align = next(sizes)
            if op in ALLOCATING:
                size = next(sizes)
                cls = size_class(size)
                k = next(reuse, 0) if t.version >= 3 else 0
                if 0 < k <= RECENT:
                    a = st.get(cls, k)
                else:
                    j = k - RECENT - 1 if k else len(st.cursors)
                    if k and j >= len(st.cursors):
                        raise ValueError(f"an allocation code {k} names no cursor")
                    a = ((st.cursors[j] if k else st.last_ptr) + next(pointers)) & MASK64
                    if t.version >= 3:
                        st.use_cursor(j, a + ((size + 15) >> 4))
                st.last_ptr = a
                if op == REALLOC:
                    new_ptr = a << 4
                else:
                    ptr = a << 4
                if t.version >= 2:
                    table.alloc(a, cls)
            out.append((b.thread, (op, ts, size, ptr, new_ptr, align)))
    return out
