/* trace_format.h — alloclab's allocation trace format, version 3 (versions 1 and 2 still read):
 * the one definition shared by the recorder (tracer.c, encoding in trace_encode.h), the reader
 * (trace_reader.c) and, through them, the replayer and `alloclab trace info`.
 * docs/reference/trace-format.md describes it in prose; tests/trace_codec.py mirrors it.
 *
 *   file   := header block*
 *   header := 64 bytes: magic "ALCTRACE", u32 version, u32 flags, u64 start_realtime_ns,
 *             u64 start_monotonic_ns, u32 pid, u32 tick_ns (timestamp unit), u64 tsc_hz (the
 *             TSC's measured frequency when flags & TRACE_TSC, else 0), u32 write_errno (0;
 *             else the errno of the write that failed, ENOSPC for a full disk: the file then
 *             lacks TRACE_COMPLETE and holds the blocks before it), 12 zero bytes
 *             (all little-endian)
 *   block  := 32-byte block header + payload
 *             header: u32 magic "BLK1", u32 payload_len, u32 raw_len, u32 thread, u32 events,
 *                     u32 reserved, u64 first_ts (ticks since start_monotonic_ns)
 *   payload, version 3 := for each of the nine columns: u32 raw length, u32 stored length, then
 *             its own zstd frame (when flags & TRACE_ZSTD; else the raw bytes, stored == raw).
 *             raw_len = the sum of (4 + raw length). One frame per column: a frame over all of
 *             them costs ~0.2 byte/event more (its entropy tables mix the columns' statistics).
 *   payload, versions 1-2 := one zstd frame (or raw) of the columns, each u32 length + bytes.
 *   columns, version 3 (COL_*): ops (one byte per event); times, 2 planes (put_split: low
 *             byte, varint of the rest) of the tick delta from the previous event of the block,
 *             the first from first_ts; sizes, 2 planes (alignment then size for MEMALIGN, size
 *             for MALLOC/CALLOC/REALLOC); pointers (svarints); free codes, 2 planes; reuse codes
 *             (varints). Version 2: ops, times, sizes, pointers, free codes, all varints; version
 *             1: the first four.
 *   event  := op, ts delta, then by op:
 *             MALLOC, CALLOC  size, allocation (below)
 *             FREE            free code; svarint ptr delta only when the code is 0
 *             REALLOC         free code of the old pointer (svarint old-ptr delta only when 0),
 *                             size, allocation of the new pointer
 *             MEMALIGN        alignment, size, allocation
 *             THREAD_EXIT     nothing
 *             allocation, version 3: reuse code k, then as k says (the size is known first):
 *               1..TRACE_RECENT  the k-th latest of the blocks of the allocation's size class
 *                                (size_class) freed by number in this block (block_state.recent)
 *               TRACE_RECENT+1+j svarint: the difference from cursor j, where one of the latest
 *                                allocations ended (block_state.cursor: address + size/16
 *                                rounded up, latest first)
 *               0                svarint delta from the block's previous pointer
 *             an allocation coded by a cursor or a delta moves that cursor (or a new one) to
 *             the front. The encoder picks a freed block first, then the first cursor within 16
 *             bytes, else the nearest within TRACE_CURSOR_REACH (any choice decodes; this one is
 *             trace_codec.encode_blocks' too). Versions 1-2: svarint ptr delta.
 *   Pointers are stored >> 4 as zigzag deltas from the previous pointer of the block, a free's
 *   included even when it is written by number (version 2): an allocation that reuses the block
 *   just freed costs a zero. The live table's addresses are these >> 4 values too.
 *   Free codes (versions 2-3): writer and reader keep the same table of live allocations, updated
 *   in file order (live_table below), each allocation numbered in turn from 1. A FREE or REALLOC
 *   of an address in the table is written as seq_code(its number, the previous such number in
 *   the block or 0) — a zigzag delta + 1 — and leaves the table; an address not in it (allocated
 *   before recording began, or by a thread whose block comes later in the file) is written as 0
 *   and the address. Frees in allocation order cost ~0 bits, random-order frees log2(live
 *   objects) at worst; an address delta costs ~13 bits more (measured: worker-pool 3.4 -> 2.8
 *   bytes/event). Version 3's table also keeps each allocation's size class, so that a block
 *   freed by number joins its class's recently freed list. The per-block state (recent lists,
 *   cursors, previous pointer and number) starts empty in every block; the live table spans the
 *   file.
 * A block holds the events of one thread in order. Threads are numbered from 1 in the order they
 * first allocate. Timestamps are CLOCK_MONOTONIC (or the TSC calibrated against it, flags &
 * TRACE_TSC), taken after an allocation returns and before a free is passed on, so an address
 * freed in one thread and handed out in another is seen freed first.
 */
#ifndef TRACE_FORMAT_H
#define TRACE_FORMAT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TRACE_MAGIC "ALCTRACE"
#define TRACE_VERSION 3u
#define TRACE_OLDEST_VERSION 1u  /* version 1: no slot column, every free by address */
#define TRACE_ZSTD 1u
#define TRACE_TSC 2u             /* timestamps from the calibrated TSC (header: tsc_hz) */
#define TRACE_COMPLETE 4u        /* set by the recorder when it finished writing (v2); without it a
                                  * file cut inside its last block is a killed recording, read up to
                                  * its last whole block */
#define TRACE_HEADER_SIZE 64
#define TRACE_WRITE_ERRNO_AT 48
#define TRACE_BLOCK_MAGIC 0x314b4c42u /* "BLK1" */
#define TRACE_BLOCK_HEADER_SIZE 32
#define TRACE_MAX_RAW_BLOCK (8u << 20)
/* Timestamps are stored in ticks of 1 us: finer than replay pacing can honour (a sleep wakes
 * ~50 us late at best), and ~5 bits of timing noise less per event on disk than 32 ns
 * (benchmarks/README.md, "Format 3: a coarser tick"). The header records the tick. */
#define TRACE_TICK_NS 1000u
#define TRACE_CLASS_BITS 16          /* the live table's value: seq << 16 | class (version 3) */

enum trace_op { OP_MALLOC = 1, OP_FREE = 2, OP_CALLOC = 3, OP_REALLOC = 4, OP_MEMALIGN = 5, OP_THREAD_EXIT = 6 };

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}
static inline uint8_t *put_svarint(uint8_t *p, int64_t v) {
    return put_varint(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
/* Bounded decoding: returns NULL when the input ends inside a varint or it is over 10 bytes. */
static inline const uint8_t *get_varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return NULL;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return p; }
    }
    return NULL;
}
static inline const uint8_t *get_svarint(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t u;
    p = get_varint(p, end, &u);
    if (p) *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return p;
}
static inline void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint32_t get_u32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static inline uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

/* A decoded event, as the reader hands it out. */
typedef struct {
    uint64_t ts;        /* ns since the start of the trace */
    uint64_t size;      /* requested bytes (0 for free) */
    uint64_t ptr;       /* the address (free, malloc, memalign) or the old one (realloc) */
    uint64_t new_ptr;   /* realloc's result */
    uint32_t align;
    uint32_t thread;
    uint8_t op;
} trace_event;

/* ---- the live table (version 2), the same code in the recorder's writer and in the reader ----
 * Every allocation (MALLOC, CALLOC, MEMALIGN, REALLOC's result) takes the next sequence number,
 * from 1, in file order. addr -> seq (both sides) and seq -> addr (the reader). Only the numbers
 * are part of the format; the hash layout is not (the reader seeds it against crafted collisions).
 * Memory comes from malloc: the recorder's writer thread does not record its own allocations. */
#include <stdlib.h>
typedef struct {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, count;
    unsigned shift;
    uint64_t seed;
} u64map;

static inline size_t um_hash(const u64map *m, uint64_t k) { return (size_t)(((k ^ m->seed) * 0x9e3779b97f4a7c15ULL) >> m->shift); }

static inline int um_grow(u64map *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *keys = malloc(cap * sizeof *keys), *vals = malloc(cap * sizeof *vals);
    uint8_t *used = calloc(cap, 1);
    if (!keys || !vals || !used) { free(keys); free(vals); free(used); return -1; }
    unsigned shift = 64;
    for (size_t c = cap; c > 1; c >>= 1) shift--;
    u64map old = *m;
    m->keys = keys; m->vals = vals; m->used = used; m->cap = cap; m->shift = shift;
    for (size_t i = 0; i < old.cap; i++) if (old.used[i]) {
        size_t j = um_hash(m, old.keys[i]);
        while (used[j]) j = (j + 1) & (cap - 1);
        keys[j] = old.keys[i]; vals[j] = old.vals[i]; used[j] = 1;
    }
    free(old.keys); free(old.vals); free(old.used);
    return 0;
}

static inline size_t um_find(const u64map *m, uint64_t k) {    /* index, or (size_t)-1 */
    if (!m->cap) return (size_t)-1;
    for (size_t j = um_hash(m, k);; j = (j + 1) & (m->cap - 1)) {
        if (!m->used[j]) return (size_t)-1;
        if (m->keys[j] == k) return j;
    }
}

static inline void um_delete_at(u64map *m, size_t i) {       /* backward-shift deletion */
    size_t mask = m->cap - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        size_t k = um_hash(m, m->keys[j]);
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            m->keys[i] = m->keys[j]; m->vals[i] = m->vals[j]; i = j;
        }
    }
    m->used[i] = 0;
    m->count--;
}

static inline int um_put(u64map *m, uint64_t k, uint64_t v) {  /* k must not be present */
    if ((m->count + 1) * 2 > m->cap && um_grow(m) != 0) return -1;
    size_t j = um_hash(m, k);
    while (m->used[j]) j = (j + 1) & (m->cap - 1);
    m->keys[j] = k; m->vals[j] = v; m->used[j] = 1;
    m->count++;
    return 0;
}

static inline void um_destroy(u64map *m) {
    free(m->keys); free(m->vals); free(m->used);
    uint64_t seed = m->seed;
    memset(m, 0, sizeof *m);
    m->seed = seed;
}

typedef struct {
    u64map by_addr;          /* address -> sequence number */
    u64map by_seq;           /* sequence number -> address (the reader only) */
    uint64_t next_seq;
    int reverse;             /* keep by_seq */
    unsigned shift;          /* TRACE_CLASS_BITS from version 3: by_addr's value carries the size class */
} live_table;

/* An allocation at address a (of size class cls, kept from version 3 on): 0, or -1 when out of
 * memory. An address still in the table (its free was written, by address, before its allocation)
 * is forgotten first. by_addr holds seq << shift | cls (shift TRACE_CLASS_BITS from version 3, else 0). */
static inline int live_alloc(live_table *t, uint64_t a, unsigned cls) {
    size_t i = um_find(&t->by_addr, a);
    if (i != (size_t)-1) {
        if (t->reverse) { size_t r = um_find(&t->by_seq, t->by_addr.vals[i] >> t->shift); if (r != (size_t)-1) um_delete_at(&t->by_seq, r); }
        um_delete_at(&t->by_addr, i);
    }
    uint64_t seq = ++t->next_seq;
    if (um_put(&t->by_addr, a, seq << t->shift | (t->shift ? cls : 0)) != 0) return -1;
    if (t->reverse && um_put(&t->by_seq, seq, a) != 0) return -1;
    return 0;
}

/* The writer's free: the allocation's by_addr value (forgotten), or 0 when a is not live. */
static inline uint64_t live_free_addr(live_table *t, uint64_t a) {
    size_t i = um_find(&t->by_addr, a);
    if (i == (size_t)-1) return 0;
    uint64_t seq = t->by_addr.vals[i];
    um_delete_at(&t->by_addr, i);
    return seq;
}

/* The reader's free of sequence number seq: 0 with *addr (and *cls) set, -1 when no live
 * allocation has it. */
static inline int live_free_seq(live_table *t, uint64_t seq, uint64_t *addr, unsigned *cls) {
    size_t r = um_find(&t->by_seq, seq);
    if (r == (size_t)-1) return -1;
    uint64_t a = t->by_seq.vals[r];
    um_delete_at(&t->by_seq, r);
    size_t i = um_find(&t->by_addr, a);
    *cls = 0;
    if (i != (size_t)-1) { *cls = (unsigned)(t->by_addr.vals[i] & ((1u << TRACE_CLASS_BITS) - 1)); um_delete_at(&t->by_addr, i); }
    *addr = a;
    return 0;
}

/* The slots column: a free by sequence number is written as zigzag(seq - previous one of the
 * block) + 1, so frees in allocation order (or its reverse) cost next to nothing; 0 = by address. */
static inline uint64_t seq_code(uint64_t seq, uint64_t prev) {
    int64_t d = (int64_t)(seq - prev);
    return (((uint64_t)d << 1) ^ (uint64_t)(d >> 63)) + 1;
}
static inline uint64_t seq_decode(uint64_t code, uint64_t prev) {
    uint64_t u = code - 1;
    return prev + (uint64_t)((int64_t)(u >> 1) ^ -(int64_t)(u & 1));
}

/* ---- version 3: per-block state shared by the encoder (trace_encode.h) and the reader ----
 * Columns, in this order. */
enum { COL_OPS, COL_TIMES, COL_TIMES_HI, COL_SIZES, COL_SIZES_HI, COL_ADDRS, COL_FREES, COL_FREES_HI, COL_REUSE,
       TRACE_COLUMNS };
/* Times, sizes and free codes are split in two planes: the low byte in one column, the rest as a
 * varint in the next. zstd's order-0 entropy coding fits a plane of like bytes far better than
 * varints' mixed bytes (sawtooth: times 1.10 -> 0.98 byte/event, frees 1.13 -> 1.03). */
static inline void put_split(uint8_t **p, int col, uint64_t v) {
    *p[col]++ = (uint8_t)v;
    p[col + 1] = put_varint(p[col + 1], v >> 8);
}
/* Size classes: 16-byte steps up to 1 KiB, aligned as glibc's chunks are (size + 8 rounded up),
 * then 4 per power of two: an allocation is most often served a block of its class freed recently. */
#define TRACE_CLASSES 282
#define TRACE_RECENT 16              /* freed blocks remembered per class (a power of two) */
static inline unsigned size_class(uint64_t s) {
    if (s <= 1024) return (unsigned)((s + 23) >> 4);
    unsigned e = 63u - (unsigned)__builtin_clzll(s - 1);
    return 66 + (e - 10) * 4 + (unsigned)(((s - 1) >> (e - 2)) & 3);
}
#define TRACE_CURSORS 16             /* where the latest allocations ended */
#define TRACE_CURSOR_REACH 256       /* an address within this many 16-byte units of one is coded from it */
typedef struct {
    uint64_t last_ptr, prev_seq;
    uint64_t recent[TRACE_CLASSES][TRACE_RECENT];       /* its blocks freed by number: a ring */
    uint8_t nrecent[TRACE_CLASSES], head[TRACE_CLASSES]; /* how many; where the next one goes */
    uint64_t cursor[TRACE_CURSORS];                     /* where recent allocations ended, latest first */
    unsigned ncursors;
} block_state;
static inline void block_state_reset(block_state *s) {
    s->last_ptr = s->prev_seq = 0;
    memset(s->nrecent, 0, sizeof s->nrecent);
    memset(s->head, 0, sizeof s->head);
    s->ncursors = 0;
}
#define RECENT_AT(s, cls, k) (s)->recent[cls][((s)->head[cls] - (k)) & (TRACE_RECENT - 1)]  /* k-th latest, from 1 */
static inline void recent_push(block_state *s, unsigned cls, uint64_t a) {   /* the oldest of a full ring goes */
    s->recent[cls][s->head[cls]] = a;
    s->head[cls] = (uint8_t)((s->head[cls] + 1) & (TRACE_RECENT - 1));
    if (s->nrecent[cls] < TRACE_RECENT) s->nrecent[cls]++;
}
static inline void recent_remove(block_state *s, unsigned cls, unsigned k) {  /* the k-th latest leaves */
    for (unsigned m = k; m > 1; m--) RECENT_AT(s, cls, m) = RECENT_AT(s, cls, m - 1);
    s->head[cls] = (uint8_t)((s->head[cls] - 1) & (TRACE_RECENT - 1));
    s->nrecent[cls]--;
}
/* The encoder: 1 + how many blocks of the class were freed after a (which leaves the list), or 0. */
static inline unsigned recent_take(block_state *s, unsigned cls, uint64_t a) {
    unsigned n = s->nrecent[cls];
    for (unsigned k = 1; k <= n; k++)
        if (RECENT_AT(s, cls, k) == a) { recent_remove(s, cls, k); return k; }
    return 0;
}
/* The reader: the block named by code k >= 1 (it leaves the list); -1 when there is none. */
static inline int recent_get(block_state *s, unsigned cls, uint64_t k, uint64_t *a) {
    if (k > s->nrecent[cls]) return -1;
    *a = RECENT_AT(s, cls, (unsigned)k);
    recent_remove(s, cls, (unsigned)k);
    return 0;
}
/* Cursor j (0 = latest) moves to the front and now ends at end; j == ncursors adds one. */
static inline void cursor_use(block_state *s, unsigned j, uint64_t end) {
    if (j >= s->ncursors) { j = s->ncursors < TRACE_CURSORS ? s->ncursors++ : TRACE_CURSORS - 1; }
    memmove(s->cursor + 1, s->cursor, j * sizeof *s->cursor);
    s->cursor[0] = end;
}
static inline void live_destroy(live_table *t) { um_destroy(&t->by_addr); um_destroy(&t->by_seq); t->next_seq = 0; }
#endif
