/* trace_encode.h — the block encoder of format version 3 (trace_format.h), used by the recorder's
 * writer thread (tracer.c) and by trace_recode.c (re-encodes a recorded trace: the size figures in
 * benchmarks/README.md). The reader (trace_reader.c) mirrors it event by event. */
#ifndef TRACE_ENCODE_H
#define TRACE_ENCODE_H
#include "trace_format.h"
#include <zstd.h>

typedef struct {
    live_table live;                 /* by_addr: address -> seq << TRACE_CLASS_BITS | size class */
    uint64_t pending_addr, pending_val;  /* the latest allocation waits outside the hash (see enc_alloc) */
    int pending, broken;
    uint8_t *col[TRACE_COLUMNS], *p[TRACE_COLUMNS];
    block_state st;
    /* How many of the recently freed blocks (all classes) hash to each bucket: an allocation whose
     * bucket is empty skips the scan of its class's list (most allocations reuse nothing). The
     * encoder's own shortcut, not part of the format. */
    uint16_t freed_filter[4096];
} trace_encoder;

static inline unsigned enc_bucket(uint64_t a) { return (unsigned)((a * 0x9e3779b97f4a7c15ULL) >> 52); }

/* The latest allocation waits outside the hash until the next one, so the commonest pattern (free
 * what was just allocated) costs no hash operation; the numbers are live_table's rules. */
static inline void enc_alloc(trace_encoder *e, uint64_t a, unsigned cls) {
    if (e->pending && e->pending_addr == a) e->pending = 0;     /* forgotten, as live_alloc forgets it */
    else {
        size_t i = um_find(&e->live.by_addr, a);
        if (i != (size_t)-1) um_delete_at(&e->live.by_addr, i);
    }
    if (e->pending && um_put(&e->live.by_addr, e->pending_addr, e->pending_val) != 0) e->broken = 1;
    e->pending = 1;
    e->pending_addr = a;
    e->pending_val = ++e->live.next_seq << TRACE_CLASS_BITS | cls;
}

/* seq << TRACE_CLASS_BITS | class of the live allocation at a (forgotten), or 0 */
static inline uint64_t enc_free(trace_encoder *e, uint64_t a) {
    if (e->pending && e->pending_addr == a) { e->pending = 0; return e->pending_val; }
    return live_free_addr(&e->live, a);
}

static inline void enc_begin(trace_encoder *e, uint8_t *cols, const size_t *caps) {
    for (int k = 0; k < TRACE_COLUMNS; k++) { e->col[k] = e->p[k] = cols; cols += caps[k]; }
    block_state_reset(&e->st);
    memset(e->freed_filter, 0, sizeof e->freed_filter);
}

/* One event; dt = tick delta from the previous event of the block. */
static inline void enc_event(trace_encoder *e, unsigned op, uint64_t dt, uint64_t size, uint64_t align,
                             uint64_t ptr, uint64_t new_ptr) {
    uint8_t **p = e->p;
    block_state *s = &e->st;
    *p[COL_OPS]++ = (uint8_t)op;
    put_split(p, COL_TIMES, dt);
    if (op == OP_THREAD_EXIT) return;
    if (op == OP_FREE || op == OP_REALLOC) {
        uint64_t a = ptr >> 4, val = enc_free(e, a);
        uint64_t seq = val >> TRACE_CLASS_BITS;
        put_split(p, COL_FREES, seq ? seq_code(seq, s->prev_seq) : 0);
        if (seq) {
            unsigned cls = (unsigned)(val & ((1u << TRACE_CLASS_BITS) - 1));
            s->prev_seq = seq;
            if (s->nrecent[cls] == TRACE_RECENT) e->freed_filter[enc_bucket(RECENT_AT(s, cls, TRACE_RECENT))]--;
            recent_push(s, cls, a);
            e->freed_filter[enc_bucket(a)]++;
        }
        else p[COL_ADDRS] = put_svarint(p[COL_ADDRS], (int64_t)(a - s->last_ptr));
        s->last_ptr = a;
        if (op == OP_FREE) return;
    }
    if (op == OP_MEMALIGN) put_split(p, COL_SIZES, align);
    put_split(p, COL_SIZES, size);
    unsigned cls = size_class(size);
    uint64_t a = (op == OP_REALLOC ? new_ptr : ptr) >> 4;
    unsigned k = 0, bucket = enc_bucket(a);
    if (e->freed_filter[bucket] && (k = recent_take(s, cls, a)) != 0) e->freed_filter[bucket]--;
    if (!k) {                        /* near where a recent allocation ended, or a delta */
        unsigned best = s->ncursors;
        uint64_t best_dist = TRACE_CURSOR_REACH;
        for (unsigned j = 0; j < s->ncursors; j++) {
            int64_t r = (int64_t)(a - s->cursor[j]);
            uint64_t dist = r < 0 ? -(uint64_t)r : (uint64_t)r;
            if (dist <= 1) { best = j; break; }            /* where it ended, or 16 bytes on */
            if (dist < best_dist) { best_dist = dist; best = j; }
        }
        if (best < s->ncursors) {
            k = TRACE_RECENT + 1 + best;
            p[COL_ADDRS] = put_svarint(p[COL_ADDRS], (int64_t)(a - s->cursor[best]));
        } else p[COL_ADDRS] = put_svarint(p[COL_ADDRS], (int64_t)(a - s->last_ptr));
        cursor_use(s, best, a + ((size + 15) >> 4));
    }
    p[COL_REUSE] = put_varint(p[COL_REUSE], k);
    s->last_ptr = a;
    enc_alloc(e, a, cls);
}

/* The block of the events encoded since enc_begin, header included, into out: its length, or 0.
 * Each column is its own zstd frame (u32 raw length, u32 stored length, frame): one frame over
 * all of them costs ~0.2 byte/event more, its entropy tables mixing the columns' statistics. */
static inline size_t enc_pack(const trace_encoder *e, ZSTD_CCtx *cctx, int level, uint8_t *out, size_t cap,
                              uint32_t thread, uint32_t events, uint64_t first_ts) {
    size_t raw_len = 0, at = TRACE_BLOCK_HEADER_SIZE;
    for (int k = 0; k < TRACE_COLUMNS; k++) {
        size_t len = (size_t)(e->p[k] - e->col[k]), stored = 0;
        if (cap - at < 8) return 0;
        if (len) {
            stored = ZSTD_compressCCtx(cctx, out + at + 8, cap - at - 8, e->col[k], len, level);
            if (ZSTD_isError(stored)) return 0;
        }
        put_u32(out + at, (uint32_t)len);
        put_u32(out + at + 4, (uint32_t)stored);
        at += 8 + stored;
        raw_len += 4 + len;
    }
    memset(out, 0, TRACE_BLOCK_HEADER_SIZE);
    put_u32(out, TRACE_BLOCK_MAGIC);
    put_u32(out + 4, (uint32_t)(at - TRACE_BLOCK_HEADER_SIZE));
    put_u32(out + 8, (uint32_t)raw_len);
    put_u32(out + 12, thread);
    put_u32(out + 16, events);
    put_u64(out + 24, first_ts);
    return at;
}
#endif
