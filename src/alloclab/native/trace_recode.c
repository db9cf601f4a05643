/* trace_recode — re-encodes a trace (any version this alloclab reads) in the current format, block
 * for block as recorded, reads the result back and compares every event with the original.
 *   trace_recode IN [--out FILE] [--level N] [--tick NS]
 * Prints one JSON line: events, bytes per event of the re-encoded trace, overall and per column
 * (each column's frame and its 8-byte header), "round_trip": "identical" or where it differs, and
 * for an input in the current format "same_bytes": whether every block came out byte for byte as
 * the recorder wrote it (the encoder is deterministic, so a reader that misreads anything shows
 * here). How the trace-size figures of benchmarks/README.md are measured; tests use it for the
 * round trip of every built-in workload. --tick NS re-encodes the times in ticks of NS ns (the
 * header records it; each time rounds down to its tick, and the round trip compares against the
 * times so rounded): how the tick's cost in bytes per event was measured (docs/reference/trace-format.md).
 * Exit 0 when the round trip holds, 1 otherwise. */
#include "trace_reader.h"
#include "trace_encode.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define PER_BLOCK 32768u             /* the recorder's chunk */

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

static int same_event(const trace_event *a, const trace_event *b, uint64_t tick) {
    return a->op == b->op && a->ts == b->ts / tick * tick && a->size == b->size && a->ptr == b->ptr && a->new_ptr == b->new_ptr &&
           a->align == b->align && a->thread == b->thread;
}

int main(int argc, char **argv) {
    const char *in = NULL, *outp = NULL;
    int level = 1;
    long tick_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) outp = argv[++i];
        else if (strcmp(argv[i], "--level") == 0 && i + 1 < argc) level = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tick") == 0 && i + 1 < argc) tick_arg = atol(argv[++i]);
        else if (!in && argv[i][0] != '-') in = argv[i];
        else { fprintf(stderr, "usage: trace_recode IN [--out FILE] [--level N] [--tick NS]\n"); return 2; }
    }
    if (!in) { fprintf(stderr, "usage: trace_recode IN [--out FILE] [--level N] [--tick NS]\n"); return 2; }
    size_t n;
    uint8_t *buf = slurp(in, &n);
    trace_data t;
    if (!buf) { fprintf(stderr, "trace_recode: cannot read %s\n", in); return 2; }
    if (trace_parse(buf, n, &t) != 0) { fprintf(stderr, "trace_recode: %s\n", t.error); return 2; }
    uint32_t version = get_u32(buf + 8);
    if (tick_arg < 0 || tick_arg > 1000000) { fprintf(stderr, "trace_recode: --tick %ld: give 1 to 1000000 ns\n", tick_arg); return 2; }
    uint32_t tick = tick_arg ? (uint32_t)tick_arg : t.tick_ns;
    size_t *used = calloc(t.nthreads ? t.nthreads : 1, sizeof *used);
    static const char *names[TRACE_COLUMNS] = {"ops", "times", "times_hi", "sizes", "sizes_hi", "addresses", "frees",
                                               "frees_hi", "reuse"};
    size_t cap[TRACE_COLUMNS], colz[TRACE_COLUMNS] = {0}, events = 0, nblocks = 0;
    double encode_s = 0, pack_s = 0;             /* the writer thread's two steps, CPU time */
    for (int k = 0; k < TRACE_COLUMNS; k++) cap[k] = PER_BLOCK * 21;
    uint8_t *cols = malloc(PER_BLOCK * 21 * TRACE_COLUMNS);
    size_t block_cap = ZSTD_compressBound(PER_BLOCK * 21 * TRACE_COLUMNS) + 64 * TRACE_COLUMNS + TRACE_BLOCK_HEADER_SIZE;
    size_t out_cap = TRACE_HEADER_SIZE + block_cap, out_len = TRACE_HEADER_SIZE;
    uint8_t *out = malloc(out_cap);
    static trace_encoder e;
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!used || !cols || !out || !cctx) { fprintf(stderr, "trace_recode: out of memory\n"); return 2; }
    memcpy(out, buf, TRACE_HEADER_SIZE);
    put_u32(out + 8, TRACE_VERSION);
    put_u32(out + 36, tick);
    int same_bytes = version == TRACE_VERSION && tick == t.tick_ns;
    for (size_t at = TRACE_HEADER_SIZE; at + TRACE_BLOCK_HEADER_SIZE <= n;) {
        const uint8_t *h = buf + at;
        uint32_t plen = get_u32(h + 4), thread = get_u32(h + 12), cnt = get_u32(h + 16);
        if (plen > n - at - TRACE_BLOCK_HEADER_SIZE) break;            /* a killed recording's cut block */
        uint32_t ti = 0;
        while (ti < t.nthreads && t.threads[ti].id != thread) ti++;
        if (ti == t.nthreads || cnt > PER_BLOCK || used[ti] + cnt > t.threads[ti].n) {
            fprintf(stderr, "trace_recode: block at byte %zu: more than %u events\n", at, PER_BLOCK);
            return 2;
        }
        const trace_event *ev = t.threads[ti].ev + used[ti];
        used[ti] += cnt;
        double t0 = cpu_now();
        enc_begin(&e, cols, cap);
        uint64_t first = cnt ? ev[0].ts / tick : get_u64(h + 24) * t.tick_ns / tick, last = first;
        for (uint32_t i = 0; i < cnt; i++) {
            uint64_t ts = ev[i].ts / tick;
            enc_event(&e, ev[i].op, ts - last, ev[i].size, ev[i].align, ev[i].ptr << 4, ev[i].new_ptr << 4);
            last = ts;
        }
        if (out_cap - out_len < block_cap) {
            out_cap = out_cap * 2 + block_cap;
            uint8_t *g = realloc(out, out_cap);
            if (!g) { fprintf(stderr, "trace_recode: out of memory\n"); return 2; }
            out = g;
        }
        double t1 = cpu_now();
        size_t len = enc_pack(&e, cctx, level, out + out_len, out_cap - out_len, thread, cnt, first);
        encode_s += t1 - t0;
        pack_s += cpu_now() - t1;
        if (!len) { fprintf(stderr, "trace_recode: compression failed\n"); return 2; }
        for (int k = 0, off = TRACE_BLOCK_HEADER_SIZE; k < TRACE_COLUMNS; k++) {
            uint32_t stored = get_u32(out + out_len + off + 4);
            colz[k] += 8 + stored;
            off += 8 + (int)stored;
        }
        if (same_bytes && (len != TRACE_BLOCK_HEADER_SIZE + plen || memcmp(out + out_len, h, len) != 0)) same_bytes = 0;
        out_len += len;
        events += cnt;
        nblocks++;
        at += TRACE_BLOCK_HEADER_SIZE + plen;
    }
    trace_data back;
    char verdict[320] = "identical";
    if (trace_parse(out, out_len, &back) != 0) snprintf(verdict, sizeof verdict, "unreadable: %s", back.error);
    else if (back.nthreads != t.nthreads || back.nevents != t.nevents) snprintf(verdict, sizeof verdict, "different counts");
    else
        for (uint32_t i = 0; i < t.nthreads && !strcmp(verdict, "identical"); i++) {
            if (back.threads[i].id != t.threads[i].id || back.threads[i].n != t.threads[i].n) {
                snprintf(verdict, sizeof verdict, "thread %u differs", t.threads[i].id);
                break;
            }
            for (size_t j = 0; j < t.threads[i].n; j++)
                if (!same_event(&back.threads[i].ev[j], &t.threads[i].ev[j], tick)) {
                    snprintf(verdict, sizeof verdict, "thread %u event %zu differs", t.threads[i].id, j);
                    break;
                }
        }
    if (outp) {
        FILE *f = fopen(outp, "wb");
        if (!f || fwrite(out, 1, out_len, f) != out_len || fclose(f) != 0) { fprintf(stderr, "trace_recode: cannot write %s\n", outp); return 2; }
    }
    printf("{\"events\": %zu, \"blocks\": %zu, \"version_in\": %u, \"bytes_per_event\": %.3f", events, nblocks, version,
           events ? (double)out_len / (double)events : 0.0);
    for (int k = 0; k < TRACE_COLUMNS; k++) printf(", \"%s\": %.3f", names[k], events ? (double)colz[k] / (double)events : 0.0);
    printf(", \"encode_ns_per_event\": %.1f, \"compress_ns_per_event\": %.1f", events ? encode_s * 1e9 / (double)events : 0.0,
           events ? pack_s * 1e9 / (double)events : 0.0);
    printf(", \"tick_ns\": %u, \"round_trip\": \"%s\"", tick, verdict);
    int compare_bytes = version == TRACE_VERSION && tick == t.tick_ns;
    if (compare_bytes) printf(", \"same_bytes\": %s", same_bytes ? "true" : "false");
    printf("}\n");
    return strcmp(verdict, "identical") == 0 && (!compare_bytes || same_bytes) ? 0 : 1;
}
