/* replay_info.c — what a trace holds without running it (--info: counts, sizes, the exact
 * live-bytes curve from the requested sizes) and the same curve as executed (--serial). */
#include "replay.h"
#include <stdio.h>
#include <stdlib.h>

void print_curve(const char *key, uint64_t *t, uint64_t *v, size_t n) {
    printf("\"%s\": [", key);
    for (size_t i = 0; i < n; i++) printf("%s[%llu, %llu]", i ? ", " : "", (unsigned long long)t[i], (unsigned long long)v[i]);
    printf("]");
}

void curve_points(size_t points, uint64_t **ts, uint64_t **vals, size_t *n, int execute) {
    *ts = calloc(points + 1, sizeof **ts);
    *vals = calloc(points + 1, sizeof **vals);
    uint64_t *sizes = calloc(nobjects ? nobjects : 1, sizeof *sizes);
    uint64_t live = 0;
    size_t out = 0, step = nglobal / points + 1;
    for (size_t g = 0; g < nglobal; g++) {
        const rop *r = &global[g];
        if (execute) { perform(r); live = atomic_load(&wl_live_bytes); }
        else if (r->op != OP_THREAD_EXIT) {
            uint64_t after = r->op == OP_FREE ? 0 : r->size;
            live = live - sizes[r->obj] + after;
            sizes[r->obj] = after;
        }
        if (g % step == step - 1 || g + 1 == nglobal) { (*ts)[out] = r->ts; (*vals)[out++] = live; }
    }
    *n = out;
    free(sizes);
}

int info(size_t points) {
    uint64_t count[8] = {0}, hist[48] = {0}, last = 0, peak = 0, live = 0;
    uint64_t *sizes = calloc(nobjects ? nobjects : 1, sizeof *sizes);
    for (size_t g = 0; g < nglobal; g++) {
        const rop *r = &global[g];
        count[r->op]++;
        if (r->ts > last) last = r->ts;
        if (r->op == OP_THREAD_EXIT) continue;
        if (r->op != OP_FREE) { int b = 0; while (b < 47 && (1ull << (b + 1)) <= r->size) b++; hist[b]++; }
        uint64_t after = r->op == OP_FREE ? 0 : r->size;
        live = live - sizes[r->obj] + after;
        sizes[r->obj] = after;
        if (live > peak) peak = live;
    }
    free(sizes);
    uint64_t *ts, *vals;
    size_t n;
    curve_points(points, &ts, &vals, &n, 0);
    printf("{\"pid\": %u, \"start_realtime_ns\": %llu, \"threads\": %u, \"events\": %zu, \"operations\": %zu, "
           "\"truncated_bytes\": %zu, \"untracked_frees\": %zu, \"allocations_over_live\": %zu, \"duration_s\": %.6f, \"malloc\": %llu, \"calloc\": %llu, \"realloc\": %llu, "
           "\"memalign\": %llu, \"free\": %llu, \"thread_exits\": %llu, \"objects\": %u, \"peak_live_bytes\": %llu, "
           "\"final_live_bytes\": %llu, \"size_histogram_log2\": [", trace_pid, (unsigned long long)trace_start_ns,
           nrthreads, trace_events, nglobal, trace_truncated, untracked, over_live, (double)last * 1e-9, (unsigned long long)count[OP_MALLOC],
           (unsigned long long)count[OP_CALLOC], (unsigned long long)count[OP_REALLOC], (unsigned long long)count[OP_MEMALIGN],
           (unsigned long long)count[OP_FREE], (unsigned long long)count[OP_THREAD_EXIT], nobjects, (unsigned long long)peak,
           (unsigned long long)live);
    for (int b = 0; b < 48; b++) printf("%s%llu", b ? ", " : "", (unsigned long long)hist[b]);
    printf("], ");
    print_curve("live_curve", ts, vals, n);
    printf("}\n");
    return 0;
}
