/* trace_reader.c — see trace_reader.h. */
#include "trace_reader.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

static int fail(trace_data *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* Thread number -> index, open addressing. The seed makes colliding ids unpredictable, so a
 * crafted file cannot turn every lookup into a scan. */
static uint64_t id_seed;
static size_t id_slot(const trace_data *t, uint32_t id) {
    uint64_t k = (id ^ id_seed) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(k ^ (k >> 29)) & (t->id_cap - 1);
}
static int id_index_grow(trace_data *t) {
    size_t cap = t->id_cap ? t->id_cap * 2 : 64;
    uint32_t *slots = malloc(cap * sizeof *slots);        /* index + 1; 0 = empty */
    if (!slots) return -1;
    memset(slots, 0, cap * sizeof *slots);
    free(t->id_slots);
    t->id_slots = slots;
    t->id_cap = cap;
    for (uint32_t i = 0; i < t->nthreads; i++) {
        size_t s = id_slot(t, t->threads[i].id);
        while (slots[s]) s = (s + 1) & (cap - 1);
        slots[s] = i + 1;
    }
    return 0;
}

static trace_thread *thread_for(trace_data *t, uint32_t id) {
    if (t->last_thread < t->nthreads && t->threads[t->last_thread].id == id) return &t->threads[t->last_thread];
    if ((t->nthreads + 1) * 2 > t->id_cap && id_index_grow(t) != 0) return NULL;
    size_t s = id_slot(t, id);
    while (t->id_slots[s]) {
        uint32_t i = t->id_slots[s] - 1;
        if (t->threads[i].id == id) { t->last_thread = i; return &t->threads[i]; }
        s = (s + 1) & (t->id_cap - 1);
    }
    if (t->nthreads >= TRACE_MAX_THREADS) return NULL;
    if (t->nthreads == t->threads_cap) {
        uint32_t cap = t->threads_cap ? t->threads_cap * 2 : 16;
        trace_thread *grown = realloc(t->threads, cap * sizeof *grown);
        if (!grown) return NULL;
        t->threads = grown;
        t->threads_cap = cap;
    }
    t->threads[t->nthreads] = (trace_thread){id, NULL, 0, 0, 0};
    t->id_slots[s] = t->nthreads + 1;
    t->last_thread = t->nthreads;
    return &t->threads[t->nthreads++];
}

typedef struct { const uint8_t *p, *end; } column;


/* A value split in two planes (put_split): 0, or -1 when a column ends first or it overflows. */
static int get_split(column *col, int c, uint64_t *v) {
    uint64_t hi;
    if (col[c].p >= col[c].end) return -1;
    uint8_t lo = *col[c].p++;
    if (!(col[c + 1].p = get_varint(col[c + 1].p, col[c + 1].end, &hi)) || hi >> 56) return -1;
    *v = hi << 8 | lo;
    return 0;
}

/* Version 3 (trace_format.h): nine columns; an allocation's address is, by its reuse code, one of
 * the blocks of its size class freed recently in the block, or a delta. Mirrors enc_event. */
static int decode_block_v3(trace_data *t, trace_thread *th, const column *colp, uint32_t thread, uint32_t events,
                           uint64_t first_ts, size_t offset) {
    column col[TRACE_COLUMNS];
    memcpy(col, colp, sizeof col);
    block_state *s = t->block_state;
    block_state_reset(s);
    uint64_t ts = first_ts, v;
    int64_t d;
    for (uint32_t i = 0; i < events; i++) {
        trace_event e = {0};
        e.op = *col[COL_OPS].p++;
        e.thread = thread;
        if (e.op < OP_MALLOC || e.op > OP_THREAD_EXIT) return fail(t, "block at byte %zu: unknown operation %u", offset, e.op);
        if (e.op == OP_THREAD_EXIT) {
            if (i + 1 != events) return fail(t, "block at byte %zu: thread %u has events after its exit", offset, thread);
            th->exited = 1;
        }
        if (get_split(col, COL_TIMES, &v) != 0) goto truncated;
        if (v > UINT64_MAX - ts) return fail(t, "block at byte %zu: timestamp overflow", offset);
        ts += v;
        if (ts > UINT64_MAX / t->tick_ns) return fail(t, "block at byte %zu: timestamp overflow", offset);
        e.ts = ts * t->tick_ns;
        if (e.op == OP_FREE || e.op == OP_REALLOC) {
            uint64_t code;
            if (get_split(col, COL_FREES, &code) != 0) goto truncated;
            if (code) {
                unsigned cls;
                s->prev_seq = seq_decode(code, s->prev_seq);
                if (live_free_seq(&t->live, s->prev_seq, &e.ptr, &cls) != 0)
                    return fail(t, "block at byte %zu: a free names allocation %llu, which is not live", offset,
                                (unsigned long long)s->prev_seq);
                recent_push(s, cls, e.ptr);
            } else {
                if (!(col[COL_ADDRS].p = get_svarint(col[COL_ADDRS].p, col[COL_ADDRS].end, &d))) goto truncated;
                e.ptr = s->last_ptr + (uint64_t)d;
            }
            s->last_ptr = e.ptr;
        }
        if (e.op == OP_MEMALIGN) {
            if (get_split(col, COL_SIZES, &v) != 0) goto truncated;
            if (v == 0 || v > (1u << 30) || (v & (v - 1))) return fail(t, "block at byte %zu: alignment %llu is not a power of two", offset, (unsigned long long)v);
            e.align = (uint32_t)v;
        }
        if (e.op != OP_FREE && e.op != OP_THREAD_EXIT) {
            if (get_split(col, COL_SIZES, &e.size) != 0) goto truncated;
            if (e.size > TRACE_MAX_SIZE) return fail(t, "block at byte %zu: implausible size %llu", offset, (unsigned long long)e.size);
            unsigned cls = size_class(e.size);
            uint64_t k, a;
            if (!(col[COL_REUSE].p = get_varint(col[COL_REUSE].p, col[COL_REUSE].end, &k))) goto truncated;
            if (k && k <= TRACE_RECENT) {
                if (recent_get(s, cls, k, &a) != 0)
                    return fail(t, "block at byte %zu: an allocation reuses freed block %llu of its class, which has fewer", offset,
                                (unsigned long long)k);
            } else {
                uint64_t j = k ? k - TRACE_RECENT - 1 : s->ncursors;
                if (k && j >= s->ncursors)
                    return fail(t, "block at byte %zu: an allocation code %llu names no cursor", offset, (unsigned long long)k);
                if (!(col[COL_ADDRS].p = get_svarint(col[COL_ADDRS].p, col[COL_ADDRS].end, &d))) goto truncated;
                a = (k ? s->cursor[j] : s->last_ptr) + (uint64_t)d;
                cursor_use(s, (unsigned)j, a + ((e.size + 15) >> 4));
            }
            s->last_ptr = a;
            if (e.op == OP_REALLOC) e.new_ptr = a; else e.ptr = a;
            if (live_alloc(&t->live, a, cls) != 0) return fail(t, "out of memory reading the trace");
        }
        th->ev[th->n++] = e;
    }
    for (int c = 1; c < TRACE_COLUMNS; c++)
        if (col[c].p != col[c].end) return fail(t, "block at byte %zu: column %d has bytes left after its events", offset, c);
    t->nevents += events;
    return 0;
truncated:
    return fail(t, "block at byte %zu: an event is cut short", offset);
}

static int decode_block(trace_data *t, const uint8_t *raw, size_t raw_len, uint32_t thread, uint32_t events,
                        uint64_t first_ts, size_t offset) {
    trace_thread *th = thread_for(t, thread);
    if (!th) return fail(t, "block at byte %zu: more than %u threads", offset, TRACE_MAX_THREADS);
    /* The recorder gives a thread that allocates again after its exit marker a new number. */
    if (th->exited) return fail(t, "block at byte %zu: thread %u has events after its exit", offset, thread);
    column col[TRACE_COLUMNS] = {{0}};
    const uint8_t *p = raw, *end = raw + raw_len;
    int ncols = t->version >= 3 ? TRACE_COLUMNS : t->version >= 2 ? 5 : 4;
    for (int c = 0; c < ncols; c++) {             /* ops, times, sizes, pointers, slots (v2), reuse (v3) */
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
    if (t->version >= 3) return decode_block_v3(t, th, col, thread, events, first_ts, offset);
    uint64_t ts = first_ts, last_ptr = 0, prev_seq = 0, v;
    int64_t d;
    for (uint32_t i = 0; i < events; i++) {
        trace_event e = {0};
        e.op = *col[0].p++;
        e.thread = thread;
        if (e.op < OP_MALLOC || e.op > OP_THREAD_EXIT) return fail(t, "block at byte %zu: unknown operation %u", offset, e.op);
        if (e.op == OP_THREAD_EXIT) {
            if (i + 1 != events) return fail(t, "block at byte %zu: thread %u has events after its exit", offset, thread);
            th->exited = 1;
        }
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
            if (e.size > TRACE_MAX_SIZE) return fail(t, "block at byte %zu: implausible size %llu", offset, (unsigned long long)e.size);
        }
        if (e.op != OP_THREAD_EXIT) {
            uint64_t slot = 0;                    /* version 1: every free by address */
            if ((e.op == OP_FREE || e.op == OP_REALLOC) && ncols == 5) {
                if (!(col[4].p = get_varint(col[4].p, col[4].end, &slot))) goto truncated;
                if (slot) {
                    prev_seq = seq_decode(slot, prev_seq);
                    unsigned cls;
                    if (live_free_seq(&t->live, prev_seq, &e.ptr, &cls) != 0)
                        return fail(t, "block at byte %zu: a free names allocation %llu, which is not live", offset,
                                    (unsigned long long)prev_seq);
                    last_ptr = e.ptr;             /* deltas continue from the block just freed */
                }
            }
            if (!slot) {
                if (!(col[3].p = get_svarint(col[3].p, col[3].end, &d))) goto truncated;
                last_ptr += (uint64_t)d;
                e.ptr = last_ptr;
            }
        }
        if (e.op == OP_REALLOC) {
            if (!(col[3].p = get_svarint(col[3].p, col[3].end, &d))) goto truncated;
            last_ptr += (uint64_t)d;
            e.new_ptr = last_ptr;
        }
        if (ncols == 5 && e.op != OP_FREE && e.op != OP_THREAD_EXIT &&
            live_alloc(&t->live, e.op == OP_REALLOC ? e.new_ptr : e.ptr, 0) != 0)
            return fail(t, "out of memory reading the trace");
        th->ev[th->n++] = e;
    }
    for (int c = 1; c < ncols; c++)
        if (col[c].p != col[c].end) return fail(t, "block at byte %zu: column %d has bytes left after its events", offset, c);
    t->nevents += events;
    return 0;
truncated:
    return fail(t, "block at byte %zu: an event is cut short", offset);
}

/* Version 3: each column is stored as u32 raw length, u32 stored length, then its zstd frame (or
 * the raw bytes); unpacked to the layout decode_block reads (u32 length + bytes per column),
 * which must fill exactly the block header's raw length. NULL, or what is wrong. */
static const char *unpack_columns(const uint8_t *p, size_t plen, uint8_t *raw, size_t rlen, int zstd) {
    size_t at = 0, pos = 0;
    for (int c = 0; c < TRACE_COLUMNS; c++) {
        if (plen - at < 8) return "has fewer columns than the format's";
        uint32_t len = get_u32(p + at), stored = get_u32(p + at + 4);
        at += 8;
        if (stored > plen - at) return "has a column longer than the block";
        if (rlen - pos < 4 || len > rlen - pos - 4) return "has columns longer than its raw length";
        put_u32(raw + pos, len);
        pos += 4;
        if (!zstd || !len) {
            if (stored != len) return "has different raw and stored sizes";
            if (len) memcpy(raw + pos, p + at, len);
        } else {
            size_t got = ZSTD_decompress(raw + pos, len, p + at, stored);
            if (ZSTD_isError(got) || got != len) return "does not decompress";
        }
        pos += len;
        at += stored;
    }
    if (at != plen) return "has stray bytes after its columns";
    return pos == rlen ? NULL : "has columns shorter than its raw length";
}

int trace_parse(const uint8_t *buf, size_t n, trace_data *t) {
    memset(t, 0, sizeof *t);
    if (n < TRACE_HEADER_SIZE || memcmp(buf, TRACE_MAGIC, 8) != 0)
        return fail(t, "not an alloclab trace (no ALCTRACE header)");
    uint32_t version = get_u32(buf + 8), flags = get_u32(buf + 12);
    if (version < TRACE_OLDEST_VERSION || version > TRACE_VERSION)
        return fail(t, "trace format version %u; this alloclab reads versions %u to %u (record it again with this alloclab)",
                    version, TRACE_OLDEST_VERSION, TRACE_VERSION);
    t->version = version;
    t->start_realtime_ns = get_u64(buf + 16);
    t->pid = get_u32(buf + 32);
    t->tick_ns = get_u32(buf + 36);
    if (t->tick_ns == 0 || t->tick_ns > 1000000) return fail(t, "corrupt header: timestamp unit %u ns", t->tick_ns);
    size_t at = TRACE_HEADER_SIZE;
    uint8_t *raw = NULL;
    if (!id_seed) id_seed = ((uint64_t)(uintptr_t)&at ^ (uint64_t)time(NULL) * 0x2545f4914f6cdd1dULL) | 1;
    t->live.by_addr.seed = id_seed * 0x9e3779b97f4a7c15ULL;
    t->live.by_seq.seed = id_seed * 0xbf58476d1ce4e5b9ULL;
    t->live.reverse = 1;
    t->live.shift = version >= 3 ? TRACE_CLASS_BITS : 0;
    if (version >= 3 && !(t->block_state = malloc(sizeof *t->block_state))) return fail(t, "out of memory reading the trace");
    /* Memory follows events, not file bytes: cap the events a file may unpack to (trace_reader.h). */
    size_t budget = n > (TRACE_MAX_EVENTS - TRACE_EVENTS_BASE) / TRACE_EVENTS_PER_BYTE
                    ? TRACE_MAX_EVENTS : TRACE_EVENTS_BASE + TRACE_EVENTS_PER_BYTE * n;
    while (at < n) {
        /* A recording killed (kill -9) mid-write ends inside its last block and lacks the
         * COMPLETE flag its writer sets when it finishes: read it up to its last whole block. */
        if (!(flags & TRACE_COMPLETE) && version >= 2 &&
            (n - at < TRACE_BLOCK_HEADER_SIZE || get_u32(buf + at + 4) > n - at - TRACE_BLOCK_HEADER_SIZE)) {
            t->truncated_bytes = n - at;
            break;
        }
        if (n - at < TRACE_BLOCK_HEADER_SIZE) { free(raw); return fail(t, "truncated: a block header at byte %zu is cut short", at); }
        const uint8_t *h = buf + at;
        if (get_u32(h) != TRACE_BLOCK_MAGIC) { free(raw); return fail(t, "corrupt: no block marker at byte %zu", at); }
        uint32_t plen = get_u32(h + 4), rlen = get_u32(h + 8), thread = get_u32(h + 12), events = get_u32(h + 16);
        uint64_t first = get_u64(h + 24);
        if (plen > n - at - TRACE_BLOCK_HEADER_SIZE) { free(raw); return fail(t, "truncated: the block at byte %zu needs %u bytes, %zu remain", at, plen, n - at - TRACE_BLOCK_HEADER_SIZE); }
        if (rlen > TRACE_MAX_RAW_BLOCK || thread == 0 || rlen > 4 * TRACE_COLUMNS + (uint64_t)TRACE_MAX_EVENT_BYTES * events || events > rlen) {
            free(raw);
            return fail(t, "corrupt: block at byte %zu has impossible sizes", at);
        }
        if (events > budget - t->nevents) {
            free(raw);
            return fail(t, "block at byte %zu: the trace unpacks to over %zu events from %zu bytes; no recording is that "
                        "compressible, so the file is not one", at, budget, n);
        }
        const uint8_t *payload = h + TRACE_BLOCK_HEADER_SIZE;
        if (version >= 3) {
            uint8_t *grown = realloc(raw, rlen ? rlen : 1);
            if (!grown) { free(raw); return fail(t, "out of memory reading the trace"); }
            raw = grown;
            const char *wrong = unpack_columns(payload, plen, raw, rlen, flags & TRACE_ZSTD);
            if (wrong) { free(raw); return fail(t, "corrupt: the block at byte %zu %s", at, wrong); }
            payload = raw;
        } else if (flags & TRACE_ZSTD) {
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
    live_destroy(&t->live);                        /* events carry their addresses from here on */
    free(t->block_state);
    t->block_state = NULL;
    return 0;
}

int trace_read_file(const char *path, trace_data *t) {
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);     /* a FIFO must not block us */
    if (fd < 0) return fail(t, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(t, "%s is not a regular file", path);
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *buf = size ? malloc(size) : NULL;
    if (size && !buf) { close(fd); return fail(t, "cannot read %s: %zu bytes do not fit in memory", path, size); }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { close(fd); free(buf); return fail(t, "cannot read %s: %s", path, r ? strerror(errno) : "it shrank while being read"); }
        got += (size_t)r;
    }
    close(fd);
    if (!size) return fail(t, "%s is empty", path);
    int rc = trace_parse(buf, size, t);
    free(buf);
    return rc;
}

void trace_data_free(trace_data *t) {
    live_destroy(&t->live);
    free(t->block_state);
    t->block_state = NULL;
    for (uint32_t i = 0; i < t->nthreads; i++) free(t->threads[i].ev);
    free(t->threads);
    free(t->id_slots);
    t->threads = NULL;
    t->id_slots = NULL;
    t->nthreads = t->threads_cap = 0;
    t->id_cap = 0;
}
