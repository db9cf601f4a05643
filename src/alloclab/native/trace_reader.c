/* trace_reader.c — see trace_reader.h. */
#include "trace_reader.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

enum { MAX_THREADS = 1 << 16 };

static int fail(trace_data *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return -1;
}

static trace_thread *thread_for(trace_data *t, uint32_t id) {
    for (uint32_t i = 0; i < t->nthreads; i++)
        if (t->threads[i].id == id) return &t->threads[i];
    if (t->nthreads >= MAX_THREADS) return NULL;
    trace_thread *grown = realloc(t->threads, (t->nthreads + 1) * sizeof *grown);
    if (!grown) return NULL;
    t->threads = grown;
    t->threads[t->nthreads] = (trace_thread){id, NULL, 0, 0};
    return &t->threads[t->nthreads++];
}

typedef struct { const uint8_t *p, *end; } column;

static int decode_block(trace_data *t, const uint8_t *raw, size_t raw_len, uint32_t thread, uint32_t events,
                        uint64_t first_ts, size_t offset) {
    trace_thread *th = thread_for(t, thread);
    if (!th) return fail(t, "block at byte %zu: too many threads", offset);
    column col[4];
    const uint8_t *p = raw, *end = raw + raw_len;
    for (int c = 0; c < 4; c++) {                 /* ops, times, sizes, pointers */
        if (end - p < 4) return fail(t, "block at byte %zu: column %d is cut short", offset, c);
        uint32_t n = get_u32(p);
        p += 4;
        if (n > (size_t)(end - p)) return fail(t, "block at byte %zu: column %d longer than the block", offset, c);
        col[c] = (column){p, p + n};
        p += n;
    }
    if (p != end) return fail(t, "block at byte %zu: %zu stray bytes after the columns", offset, (size_t)(end - p));
    if ((size_t)(col[0].end - col[0].p) != events) return fail(t, "block at byte %zu: %u events but %zu operations", offset, events, (size_t)(col[0].end - col[0].p));
    if (th->n + events > th->cap) {
        size_t cap = (th->n + events) * 2;
        trace_event *ev = realloc(th->ev, cap * sizeof *ev);
        if (!ev) return fail(t, "out of memory reading the trace");
        th->ev = ev;
        th->cap = cap;
    }
    uint64_t ts = first_ts, last_ptr = 0, v;
    int64_t d;
    for (uint32_t i = 0; i < events; i++) {
        trace_event e = {0};
        e.op = *col[0].p++;
        e.thread = thread;
        if (e.op < OP_MALLOC || e.op > OP_THREAD_EXIT) return fail(t, "block at byte %zu: unknown operation %u", offset, e.op);
        if (!(col[1].p = get_varint(col[1].p, col[1].end, &v))) goto truncated;
        if (v > UINT64_MAX - ts) return fail(t, "block at byte %zu: timestamp overflow", offset);
        ts += v;
        if (ts > UINT64_MAX / t->tick_ns) return fail(t, "block at byte %zu: timestamp overflow", offset);
        e.ts = ts * t->tick_ns;
        if (e.op == OP_MEMALIGN) {
            if (!(col[2].p = get_varint(col[2].p, col[2].end, &v))) goto truncated;
            if (v == 0 || v > (1u << 30) || (v & (v - 1))) return fail(t, "block at byte %zu: alignment %llu is not a power of two", offset, (unsigned long long)v);
            e.align = (uint32_t)v;
        }
        if (e.op != OP_FREE && e.op != OP_THREAD_EXIT) {
            if (!(col[2].p = get_varint(col[2].p, col[2].end, &e.size))) goto truncated;
            if (e.size > (1ull << 40)) return fail(t, "block at byte %zu: implausible size %llu", offset, (unsigned long long)e.size);
        }
        if (e.op != OP_THREAD_EXIT) {
            if (!(col[3].p = get_svarint(col[3].p, col[3].end, &d))) goto truncated;
            last_ptr += (uint64_t)d;
            e.ptr = last_ptr;
        }
        if (e.op == OP_REALLOC) {
            if (!(col[3].p = get_svarint(col[3].p, col[3].end, &d))) goto truncated;
            last_ptr += (uint64_t)d;
            e.new_ptr = last_ptr;
        }
        th->ev[th->n++] = e;
    }
    for (int c = 1; c < 4; c++)
        if (col[c].p != col[c].end) return fail(t, "block at byte %zu: column %d has bytes left after its events", offset, c);
    t->nevents += events;
    return 0;
truncated:
    return fail(t, "block at byte %zu: an event is cut short", offset);
}

int trace_parse(const uint8_t *buf, size_t n, trace_data *t) {
    memset(t, 0, sizeof *t);
    if (n < TRACE_HEADER_SIZE || memcmp(buf, TRACE_MAGIC, 8) != 0)
        return fail(t, "not an alloclab trace (no ALCTRACE header)");
    uint32_t version = get_u32(buf + 8), flags = get_u32(buf + 12);
    if (version != TRACE_VERSION) return fail(t, "trace format version %u; this alloclab reads version %u", version, TRACE_VERSION);
    t->start_realtime_ns = get_u64(buf + 16);
    t->pid = get_u32(buf + 32);
    t->tick_ns = get_u32(buf + 36);
    if (t->tick_ns == 0 || t->tick_ns > 1000000) return fail(t, "corrupt header: timestamp unit %u ns", t->tick_ns);
    size_t at = TRACE_HEADER_SIZE;
    uint8_t *raw = NULL;
    while (at < n) {
        if (n - at < TRACE_BLOCK_HEADER_SIZE) { free(raw); return fail(t, "truncated: a block header at byte %zu is cut short", at); }
        const uint8_t *h = buf + at;
        if (get_u32(h) != TRACE_BLOCK_MAGIC) { free(raw); return fail(t, "corrupt: no block marker at byte %zu", at); }
        uint32_t plen = get_u32(h + 4), rlen = get_u32(h + 8), thread = get_u32(h + 12), events = get_u32(h + 16);
        uint64_t first = get_u64(h + 24);
        if (plen > n - at - TRACE_BLOCK_HEADER_SIZE) { free(raw); return fail(t, "truncated: the block at byte %zu needs %u bytes, %zu remain", at, plen, n - at - TRACE_BLOCK_HEADER_SIZE); }
        if (rlen > TRACE_MAX_RAW_BLOCK || thread == 0) { free(raw); return fail(t, "corrupt: block at byte %zu has impossible sizes", at); }
        const uint8_t *payload = h + TRACE_BLOCK_HEADER_SIZE;
        if (flags & TRACE_ZSTD) {
            uint8_t *grown = realloc(raw, rlen ? rlen : 1);
            if (!grown) { free(raw); return fail(t, "out of memory reading the trace"); }
            raw = grown;
            size_t got = ZSTD_decompress(raw, rlen, payload, plen);
            if (ZSTD_isError(got) || got != rlen) { free(raw); return fail(t, "corrupt: the block at byte %zu does not decompress", at); }
            payload = raw;
        } else if (plen != rlen) {
            free(raw);
            return fail(t, "corrupt: block at byte %zu has different raw and stored sizes", at);
        }
        if (decode_block(t, payload, rlen, thread, events, first, at) != 0) { free(raw); return -1; }
        at += TRACE_BLOCK_HEADER_SIZE + plen;
    }
    free(raw);
    return 0;
}

int trace_read_file(const char *path, trace_data *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(t, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (size <= 0 || !buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(buf);
        return fail(t, size <= 0 ? "%s is empty" : "cannot read %s", path);
    }
    fclose(f);
    int rc = trace_parse(buf, (size_t)size, t);
    free(buf);
    return rc;
}

void trace_data_free(trace_data *t) {
    for (uint32_t i = 0; i < t->nthreads; i++) free(t->threads[i].ev);
    free(t->threads);
    t->threads = NULL;
    t->nthreads = 0;
}
