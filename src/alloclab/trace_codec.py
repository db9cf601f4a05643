"""The trace format (native/trace_format.h) in Python, field by field, to craft and mutate traces.

Version 2 (the recorder's) adds a fifth column, slots: a FREE or REALLOC names its allocation by
its sequence number (a delta code) in the table of live allocations both sides keep in file order
(LiveTable), or 0 followed by the address. `events_block` writes every free by address (slot 0), valid on its own;
`encode_blocks` uses the table across blocks, as the recorder does. Version 1 files (four
columns, every free by address) are still read.

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
HEADER = struct.Struct("<8sIIQQII24x")          # 64 bytes
BLOCK_HEADER = struct.Struct("<IIIIIIQ")         # 32 bytes
ZSTD_FLAG = 1
TSC_FLAG = 2
COMPLETE_FLAG = 4            # the recorder finished writing (version 2); absent: a killed recording
VERSION = 2
TICK_NS = 32
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
    if values and 0 <= min(values) and max(values) < 0x80:      # one byte each: the common crafted case
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


@dataclass
class Block:
    """One block: a thread's events as the four columns hold them (values, not bytes)."""
    thread: int
    first_ts: int                                   # ticks
    ops: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # tick deltas, the first from first_ts
    sizes: list[int] = field(default_factory=list)  # alignment, size (MEMALIGN); size (MALLOC, CALLOC, REALLOC)
    pointers: list[int] = field(default_factory=list)   # zigzag-decoded deltas of address >> 4
    slots: list[int] | None = None                  # version 2: per FREE/REALLOC, seq_code or 0; None: all 0
    events: int | None = None                       # the header's count; None: len(ops)
    raw_len: int | None = None                      # the header's raw length; None: the real one

    def payload(self, version: int = VERSION) -> bytes:
        zigzag = [((v << 1) ^ (v >> 63)) & MASK64 for v in self.pointers]
        cols = [bytes(op & 0xFF for op in self.ops), _encode(self.times), _encode(self.sizes), _encode(zigzag)]
        if version >= 2:
            slots = self.slots if self.slots is not None else [0] * sum(op in (FREE, REALLOC) for op in self.ops)
            cols.append(_encode(slots))
        return b"".join(struct.pack("<I", len(c)) + c for c in cols)


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
        out = [HEADER.pack(MAGIC, self.version, self.flags, self.start_realtime_ns, self.start_monotonic_ns,
                           self.pid, self.tick_ns)]
        if self.tsc_hz:
            out[0] = out[0][:40] + struct.pack("<Q", self.tsc_hz) + out[0][48:]
        done: dict[int, tuple[bytes, bytes]] = {}         # a block repeated is encoded once
        for b in self.blocks:
            if id(b) not in done:
                raw = b.payload(self.version)
                done[id(b)] = raw, compress(raw) if self.flags & ZSTD_FLAG else raw
            raw, stored = done[id(b)]
            events = len(b.ops) if b.events is None else b.events
            raw_len = len(raw) if b.raw_len is None else b.raw_len
            out.append(BLOCK_HEADER.pack(BLOCK_MAGIC, len(stored), raw_len & 0xFFFFFFFF, b.thread & 0xFFFFFFFF,
                                         events & 0xFFFFFFFF, 0, b.first_ts & MASK64))
            out.append(stored)
        return b"".join(out)


def parse(data: bytes) -> Trace:
    """Decode a well-formed trace (ValueError otherwise): the starting point of mutations."""
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise ValueError("not an alloclab trace")
    _, version, flags, rt, mono, pid, tick = HEADER.unpack_from(data)
    t = Trace([], flags, version, rt, mono, pid, tick, struct.unpack_from("<Q", data, 40)[0])
    ncols = 5 if version >= 2 else 4
    at = HEADER.size
    while at < len(data):
        magic, plen, rlen, thread, events, _, first = BLOCK_HEADER.unpack_from(data, at)
        if magic != BLOCK_MAGIC:
            raise ValueError(f"no block marker at byte {at}")
        body = data[at + BLOCK_HEADER.size: at + BLOCK_HEADER.size + plen]
        raw = decompress(body, rlen) if flags & ZSTD_FLAG else body
        cols, p = [], 0
        for _ in range(ncols):
            (n,) = struct.unpack_from("<I", raw, p)
            cols.append(raw[p + 4: p + 4 + n])
            p += 4 + n
        t.blocks.append(Block(thread, first, list(cols[0]), _varints(cols[1]), _varints(cols[2]),
                              [_unzigzag(u) for u in _varints(cols[3])], _varints(cols[4]) if ncols == 5 else None))
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
    """The live-allocation table of format version 2 (trace_format.h, live_table), keyed by
    address >> 4 as the columns hold it: every allocation numbered in turn from 1; a free by
    number is written as seq_code(number, previous)."""

    def __init__(self) -> None:
        self.seq_of: dict[int, int] = {}
        self.addr_of: dict[int, int] = {}
        self.next_seq = 0

    def alloc(self, addr: int) -> None:
        old = self.seq_of.pop(addr, None)           # its free came first in the file, by address
        if old is not None:
            self.addr_of.pop(old, None)
        self.next_seq += 1
        self.seq_of[addr] = self.next_seq
        self.addr_of[self.next_seq] = addr

    def free_addr(self, addr: int) -> int:
        """The writer's side: the allocation's number, or 0 when addr is not live."""
        seq = self.seq_of.pop(addr, 0)
        self.addr_of.pop(seq, None)
        return seq

    def free_seq(self, seq: int) -> int:
        """The reader's side: the address of allocation seq (ValueError when it is not live)."""
        if seq not in self.addr_of:
            raise ValueError(f"a free names allocation {seq}, which is not live")
        addr = self.addr_of.pop(seq)
        del self.seq_of[addr]
        return addr


def seq_code(seq: int, prev: int) -> int:
    d = (seq - prev) & MASK64
    d = d - (1 << 64) if d >> 63 else d
    return (((d << 1) ^ (d >> 63)) & MASK64) + 1


def seq_decode(code: int, prev: int) -> int:
    return (prev + _unzigzag(code - 1)) & MASK64


def encode_blocks(blocks: list[tuple[int, list[tuple]]]) -> list[Block]:
    """Blocks as the recorder writes them: (thread, absolute events) in file order, frees by slot
    where the table knows the address."""
    table, out = LiveTable(), []
    for thread, events in blocks:
        first = events[0][1] if events else 0
        b = Block(thread, first, slots=[])
        last_ts, last_ptr, prev = first, 0, 0
        for op, ts, size, ptr, new_ptr, align in events:
            b.ops.append(op)
            b.times.append(ts - last_ts)
            last_ts = ts
            if op == THREAD_EXIT:
                continue
            if op in (FREE, REALLOC):
                seq = table.free_addr(ptr >> 4)
                b.slots.append(seq_code(seq, prev) if seq else 0)
                prev = seq or prev
                if not seq:
                    b.pointers.append((ptr >> 4) - last_ptr)
                last_ptr = ptr >> 4                     # deltas continue from the block just freed
                if op == FREE:
                    continue
            if op == MEMALIGN:
                b.sizes.append(align)
            b.sizes.append(size)
            addr = new_ptr if op == REALLOC else ptr
            b.pointers.append((addr >> 4) - last_ptr)
            last_ptr = addr >> 4
            table.alloc(addr >> 4)
        out.append(b)
    return out


def decode_events(t: Trace) -> list[tuple[int, tuple]]:
    """Every event of a parsed trace as (thread, (op, ts_ticks, size, ptr, new_ptr, align)), in file
    order, pointers as the reader resolves them (addresses >> 4 << 4)."""
    table, out = LiveTable(), []
    for b in t.blocks:
        ts, last_ptr, prev = b.first_ts, 0, 0
        sizes, pointers, slots = iter(b.sizes), iter(b.pointers), iter(b.slots or [])
        for op, dt in zip(b.ops, b.times):
            ts += dt
            size = ptr = new_ptr = align = 0
            if op in (FREE, REALLOC):
                v = next(slots, 0) if t.version >= 2 else 0
                if v:
                    prev = seq_decode(v, prev)
                    last_ptr = table.free_seq(prev)
                else:
                    last_ptr += next(pointers)
                ptr = last_ptr << 4
            if op == MEMALIGN:
                align = next(sizes)
            if op in (MALLOC, CALLOC, MEMALIGN, REALLOC):
                size = next(sizes)
                last_ptr += next(pointers)
                addr = last_ptr << 4
                if op == REALLOC:
                    new_ptr = addr
                else:
                    ptr = addr
                if t.version >= 2:
                    table.alloc(last_ptr)
            out.append((b.thread, (op, ts, size, ptr, new_ptr, align)))
    return out
