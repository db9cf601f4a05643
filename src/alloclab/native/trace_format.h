/* trace_format.h — alloclab's allocation trace format, version 1: the one definition shared by
 * the recorder (tracer.c), the reader (trace_reader.c) and, through them, the replayer and
 * `alloclab trace info`. docs/trace-format.md describes it in prose.
 *
 *   file   := header block*
 *   header := 64 bytes: magic "ALCTRACE", u32 version, u32 flags, u64 start_realtime_ns,
 *             u64 start_monotonic_ns, u32 pid, u32 tick_ns (timestamp unit), 24 zero bytes
 *             (all little-endian)
 *   block  := 32-byte block header + payload (zstd frame when flags & TRACE_ZSTD, else raw)
 *             header: u32 magic "BLK1", u32 payload_len, u32 raw_len, u32 thread, u32 events,
 *                     u32 reserved, u64 first_ts (ticks since start_monotonic_ns)
 *   payload (after decompression) := four columns, each u32 length + bytes, in this order:
 *             ops (one byte per event), timestamps (varint tick delta from the previous event of
 *             the block, the first from first_ts), sizes (varints: alignment then size for
 *             MEMALIGN, size for MALLOC/CALLOC/REALLOC), pointers (svarints as below).
 *             Like data side by side compresses far better than interleaved rows.
 *   event  := op, ts delta, then by op:
 *             MALLOC, CALLOC  varint size, svarint ptr delta
 *             FREE            svarint ptr delta
 *             REALLOC         svarint old-ptr delta, varint size, svarint new-ptr delta (to old)
 *             (the recorder writes rows in its per-thread buffer and splits them into the columns
 *             when it writes a block)
 *             MEMALIGN        varint alignment, varint size, svarint ptr delta
 *             THREAD_EXIT     nothing
 *   Pointers are stored >> 4 as zigzag deltas from the previous pointer of the block.
 * A block holds the events of one thread in order. Threads are numbered from 1 in the order they
 * first allocate. Timestamps are CLOCK_MONOTONIC, taken after an allocation returns and before a
 * free is passed on, so an address freed in one thread and handed out in another is always seen
 * freed first.
 */
#ifndef TRACE_FORMAT_H
#define TRACE_FORMAT_H
#include <stddef.h>
#include <stdint.h>

#define TRACE_MAGIC "ALCTRACE"
#define TRACE_VERSION 1u
#define TRACE_ZSTD 1u
#define TRACE_HEADER_SIZE 64
#define TRACE_BLOCK_MAGIC 0x314b4c42u /* "BLK1" */
#define TRACE_BLOCK_HEADER_SIZE 32
#define TRACE_MAX_RAW_BLOCK (8u << 20)
/* Timestamps are stored in ticks of 32 ns: finer than any allocator's timing matters, and 5 bits
 * of noise less per event on disk. */
#define TRACE_TICK_NS 32u

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
#endif
