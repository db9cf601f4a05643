/* replay — replays an alloclab trace under whatever allocator is preloaded.
 *
 *   replay FILE [--speed X]      one thread per recorded thread; each waits for its events' times
 *                                (idle gaps scaled by 1/X; --speed 0: as fast as possible) and for
 *                                the objects it frees or reallocates to exist (cross-thread frees
 *                                keep their recorded order); prints one JSON line with ops/s
 *   replay FILE --info [--points N]   JSON: operations, threads, duration, size histogram, the
 *                                live-bytes curve (exact, from the requested sizes)
 *   replay FILE --serial [--points N] the same operations in recorded global order on one thread,
 *                                printing the live-bytes curve as executed (must equal --info's)
 *   replay FILE --direct         the same operations in a plain loop, no timing or dependency
 *                                checks: the yardstick for replay speed
 * Memory is written in full after each allocation, as the recorded program presumably did.
 * With $ALLOCLAB_STATS set, live bytes and operations are published like any built-in workload.
 */
#include "trace_reader.h"
#include "wl_common.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t ts, size;
    uint32_t obj, expect, align, thread;
    uint8_t op;
} rop;                              /* a replay operation on object `obj` (ops on it so far: expect) */

typedef struct { void *p; uint64_t size; _Atomic uint32_t seq; } object;
typedef struct { rop *ops; size_t n; } rthread;

static object *objects;
static uint32_t nobjects;
static rop *global;                 /* every op in recorded global order */
static size_t nglobal, untracked;
static rthread *rthreads;
static uint32_t nrthreads;
static double speed = 1.0, start_time;

/* ---- preprocessing: global order, object ids, dependencies ---- */
typedef struct { uint64_t key; uint32_t obj; } slot;
static slot *table;
static size_t table_cap, table_len;

static size_t hash(uint64_t k) { k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; return (size_t)k; }
static void table_grow(void);
static void table_put(uint64_t k, uint32_t obj) {
    if ((table_len + 1) * 2 > table_cap) table_grow();
    size_t i = hash(k) & (table_cap - 1);
    while (table[i].key && table[i].key != k) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) table_len++;
    table[i] = (slot){k, obj};
}
static void table_grow(void) {
    slot *old = table;
    size_t oldcap = table_cap;
    table_cap = table_cap ? table_cap * 2 : 1 << 16;
    table = calloc(table_cap, sizeof *table);
    table_len = 0;
    for (size_t i = 0; i < oldcap; i++) if (old[i].key) table_put(old[i].key, old[i].obj);
    free(old);
}
static int table_take(uint64_t k, uint32_t *obj) {   /* remove, with backward-shift deletion */
    if (!table_cap) return 0;
    size_t i = hash(k) & (table_cap - 1);
    while (table[i].key && table[i].key != k) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) return 0;
    *obj = table[i].obj;
    size_t j = i;
    for (;;) {
        j = (j + 1) & (table_cap - 1);
        if (!table[j].key) break;
        size_t home = hash(table[j].key) & (table_cap - 1);
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) { table[i] = table[j]; i = j; }
    }
    table[i].key = 0;
    table_len--;
    return 1;
}

typedef struct { uint64_t ts; uint32_t thread, idx; uint8_t rank; } order_key;
static int by_time(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;   /* frees before allocations */
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static void prepare(trace_data *t) {
    order_key *keys = malloc((t->nevents + 1) * sizeof *keys);
    size_t k = 0;
    for (uint32_t i = 0; i < t->nthreads; i++)
        for (size_t j = 0; j < t->threads[i].n; j++) {
            uint8_t op = t->threads[i].ev[j].op;
            keys[k++] = (order_key){t->threads[i].ev[j].ts, i, (uint32_t)j, (uint8_t)(op == OP_FREE || op == OP_REALLOC ? 0 : 1)};
        }
    qsort(keys, k, sizeof *keys, by_time);
    global = malloc((k + 1) * sizeof *global);
    uint32_t *seq = NULL;
    size_t seq_cap = 0;
    for (size_t g = 0; g < k; g++) {
        trace_event *e = &t->threads[keys[g].thread].ev[keys[g].idx];
        uint32_t probe;
        if ((e->op == OP_FREE || e->op == OP_REALLOC) && !(table_cap && table_take(e->ptr, &probe) && (table_put(e->ptr, probe), 1))) {
            /* Freed in the same clock tick as another thread allocated it (a hand-off): put the
             * allocation first. */
            for (size_t j = g + 1; j < k && keys[j].ts == keys[g].ts; j++) {
                trace_event *a = &t->threads[keys[j].thread].ev[keys[j].idx];
                uint64_t made = a->op == OP_REALLOC ? a->new_ptr : a->ptr;
                if (a->op != OP_FREE && a->op != OP_THREAD_EXIT && made == e->ptr) {
                    order_key moved = keys[j];
                    memmove(&keys[g + 1], &keys[g], (j - g) * sizeof *keys);
                    keys[g] = moved;
                    e = &t->threads[keys[g].thread].ev[keys[g].idx];
                    break;
                }
            }
        }
        rop r = {e->ts, e->size, 0, 0, e->align, keys[g].thread, e->op};
        uint32_t obj;
        if (e->op == OP_MALLOC || e->op == OP_CALLOC || e->op == OP_MEMALIGN ||
            (e->op == OP_REALLOC && !table_take(e->ptr, &obj))) {
            if (e->op == OP_REALLOC) { r.op = OP_MALLOC; e->ptr = e->new_ptr; }   /* old block predates the trace */
            obj = nobjects++;
            if (nobjects > seq_cap) { seq_cap = seq_cap ? seq_cap * 2 : 1 << 16; seq = realloc(seq, seq_cap * sizeof *seq); }
            seq[obj] = 0;
            table_put(e->ptr ? e->ptr : 1, obj);
        } else if (e->op == OP_FREE) {
            if (!table_take(e->ptr, &obj)) { untracked++; continue; }
        } else if (e->op == OP_REALLOC) {
            table_put(e->new_ptr ? e->new_ptr : 1, obj);
        } else {
            obj = 0;     /* thread exit */
        }
        r.obj = obj;
        if (e->op != OP_THREAD_EXIT) r.expect = seq[obj]++;
        global[nglobal++] = r;
    }
    free(keys);
    free(seq);
    objects = calloc(nobjects ? nobjects : 1, sizeof *objects);
    nrthreads = t->nthreads;
    rthreads = calloc(nrthreads ? nrthreads : 1, sizeof *rthreads);
    size_t *counts = calloc(nrthreads ? nrthreads : 1, sizeof *counts);
    for (size_t g = 0; g < nglobal; g++) counts[global[g].thread]++;
    for (uint32_t i = 0; i < nrthreads; i++) rthreads[i].ops = malloc((counts[i] + 1) * sizeof(rop));
    for (size_t g = 0; g < nglobal; g++) rthreads[global[g].thread].ops[rthreads[global[g].thread].n++] = global[g];
    free(counts);
}

/* ---- executing one operation ---- */
static void touch(void *p, uint64_t n) { memset(p, 0xA5, n); }

static void perform(const rop *r) {
    object *o = &objects[r->obj];
    switch (r->op) {
    case OP_MALLOC: o->p = malloc(r->size); if (o->p) touch(o->p, r->size); break;
    case OP_CALLOC: o->p = calloc(1, r->size); break;
    case OP_MEMALIGN:
        if (posix_memalign(&o->p, r->align < sizeof(void *) ? sizeof(void *) : r->align, r->size)) o->p = NULL;
        else touch(o->p, r->size);
        break;
    case OP_REALLOC: {
        void *q = realloc(o->p, r->size);
        if (q && r->size > o->size) touch((char *)q + o->size, r->size - o->size);
        if (q || r->size == 0) o->p = q;
        break;
    }
    case OP_FREE: free(o->p); o->p = NULL; break;
    default: return;
    }
    uint64_t before = o->size, after = r->op == OP_FREE ? 0 : r->size;
    o->size = after;
    if (after >= before) atomic_fetch_add_explicit(&wl_live_bytes, after - before, memory_order_relaxed);
    else atomic_fetch_sub_explicit(&wl_live_bytes, before - after, memory_order_relaxed);
}

static void *replay_thread(void *arg) {
    rthread *th = arg;
    uint64_t done = 0;
    for (size_t i = 0; i < th->n; i++) {
        const rop *r = &th->ops[i];
        if (speed > 0) {                                   /* keep the recorded timing, scaled */
            double due = start_time + (double)r->ts * 1e-9 / speed;
            double now = wl_now();
            if (due - now > 50e-6) wl_sleep(due - now);
        }
        if (r->op == OP_THREAD_EXIT) break;
        object *o = &objects[r->obj];
        for (unsigned spins = 0; atomic_load_explicit(&o->seq, memory_order_acquire) != r->expect; spins++)
            if (spins > 64) sched_yield();                 /* another thread has not made it yet */
        perform(r);
        atomic_store_explicit(&o->seq, r->expect + 1, memory_order_release);
        if (++done == 4096) { wl_count_ops(done); done = 0; }   /* a shared counter per op would cost more than the op */
    }
    wl_count_ops(done);
    return NULL;
}

/* ---- info ---- */
static void print_curve(const char *key, uint64_t *t, uint64_t *v, size_t n) {
    printf("\"%s\": [", key);
    for (size_t i = 0; i < n; i++) printf("%s[%llu, %llu]", i ? ", " : "", (unsigned long long)t[i], (unsigned long long)v[i]);
    printf("]");
}

static void curve_points(size_t points, uint64_t **ts, uint64_t **vals, size_t *n, int execute) {
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

static int info(trace_data *t, size_t points) {
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
           "\"untracked_frees\": %zu, \"duration_s\": %.6f, \"malloc\": %llu, \"calloc\": %llu, \"realloc\": %llu, "
           "\"memalign\": %llu, \"free\": %llu, \"thread_exits\": %llu, \"objects\": %u, \"peak_live_bytes\": %llu, "
           "\"final_live_bytes\": %llu, \"size_histogram_log2\": [", t->pid, (unsigned long long)t->start_realtime_ns,
           t->nthreads, t->nevents, nglobal, untracked, (double)last * 1e-9, (unsigned long long)count[OP_MALLOC],
           (unsigned long long)count[OP_CALLOC], (unsigned long long)count[OP_REALLOC], (unsigned long long)count[OP_MEMALIGN],
           (unsigned long long)count[OP_FREE], (unsigned long long)count[OP_THREAD_EXIT], nobjects, (unsigned long long)peak,
           (unsigned long long)live);
    for (int b = 0; b < 48; b++) printf("%s%llu", b ? ", " : "", (unsigned long long)hist[b]);
    printf("], ");
    print_curve("live_curve", ts, vals, n);
    printf("}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: replay FILE [--speed X | --info | --serial | --direct] [--points N]\n");
        return 2;
    }
    speed = wl_opt_double(argc, argv, "--speed", 1.0);
    size_t points = (size_t)wl_opt_long(argc, argv, "--points", 200);
    int mode_info = 0, mode_serial = 0, mode_direct = 0;
    for (int i = 2; i < argc; i++) {
        mode_info |= strcmp(argv[i], "--info") == 0;
        mode_serial |= strcmp(argv[i], "--serial") == 0;
        mode_direct |= strcmp(argv[i], "--direct") == 0;
    }
    if (speed < 0 || points < 1) { fprintf(stderr, "replay: --speed must be >= 0 and --points >= 1\n"); return 2; }
    trace_data t;
    if (trace_read_file(argv[1], &t) != 0) {
        fprintf(stderr, "replay: %s: %s\n", argv[1], t.error);
        trace_data_free(&t);
        return 3;
    }
    prepare(&t);
    if (mode_info) return info(&t, points);
    if (mode_serial) {
        uint64_t *ts, *vals;
        size_t n;
        curve_points(points, &ts, &vals, &n, 1);
        printf("{");
        print_curve("live_curve", ts, vals, n);
        printf("}\n");
        return 0;
    }
    wl_start_publisher();
    atomic_store(&wl_phase, WL_LOAD);
    double t0 = wl_now();
    start_time = t0;
    if (mode_direct) {
        for (size_t g = 0; g < nglobal; g++) { perform(&global[g]); }
        wl_count_ops(nglobal);
    } else {
        pthread_t *tids = calloc(nrthreads ? nrthreads : 1, sizeof *tids);
        for (uint32_t i = 0; i < nrthreads; i++) pthread_create(&tids[i], NULL, replay_thread, &rthreads[i]);
        for (uint32_t i = 0; i < nrthreads; i++) pthread_join(tids[i], NULL);
    }
    double secs = wl_now() - t0;
    atomic_store(&wl_phase, WL_IDLE);
    uint64_t ops = atomic_load(&wl_ops);
    printf("{\"mode\": \"%s\", \"threads\": %u, \"operations\": %llu, \"seconds\": %.6f, \"ops_per_s\": %.1f, "
           "\"live_bytes_end\": %llu, \"untracked_frees\": %zu}\n", mode_direct ? "direct" : "threads", nrthreads,
           (unsigned long long)ops, secs, secs > 0 ? (double)ops / secs : 0.0,
           (unsigned long long)atomic_load(&wl_live_bytes), untracked);
    fflush(stdout);
    /* stay alive while alloclab samples an idle tail, if asked */
    wl_sleep(wl_opt_double(argc, argv, "--linger", 0));
    wl_stop_publisher();
    return 0;
}
