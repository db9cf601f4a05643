/* stressors — classic allocator stress patterns, for coverage (one program, --pattern NAME):
 *
 *  larson    a server simulation (Larson & Krishnan): each thread owns --slots objects and keeps
 *            replacing random ones (16 B-1 KiB); every round a new thread inherits the slots of
 *            the previous one and that one exits, so objects die in threads that did not make them.
 *  xmalloc   producer/consumer: --threads/2 producers allocate (16 B-8 KiB) and hand objects
 *            through a queue to consumers that free them (every free is cross-thread).
 *  sawtooth  retain/drain: the live set grows to --mb with churn, then drains to 5%, repeatedly
 *            (--period seconds a tooth): does memory come back after each drain?
 *  loop      the tight loop of allocator benchmarks: each of --threads threads does --rounds x
 *            --slots malloc/free pairs of 16-64 B (for recorder overhead measurements).
 *
 * Options: --pattern larson|xmalloc|sawtooth --load S --idle S --seed N --threads N --slots N
 *          --rounds N --mb N --period S --verify-live 1
 */
#include "jobqueue.h"
#include "objvec.h"
#include "wl_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed;
static long nthreads, slots, rounds, mb;
static double period, load_s;

/* ---- larson ---- */
typedef struct { void **p; size_t *n; long round, id; } larson_slots;

static void *larson_thread(void *arg) {
    larson_slots *s = arg;
    wl_rng r = {seed ^ ((uint64_t)s->id << 32) ^ (uint64_t)s->round * 0x9e3779b97f4a7c15ULL};
    for (long i = 0; i < slots * 4; i++) {
        long k = (long)wl_below(&r, (uint64_t)slots);
        wl_free(s->p[k], s->n[k]);
        s->n[k] = wl_logsize(&r, 16, 1024);
        s->p[k] = wl_alloc(s->n[k]);
    }
    wl_count_ops((uint64_t)slots * 4);
    return NULL;
}

static int run_larson(int verify) {
    larson_slots *s = calloc((size_t)nthreads, sizeof *s);
    for (long t = 0; t < nthreads; t++) {
        s[t].id = t;
        s[t].p = calloc((size_t)slots, sizeof(void *));
        s[t].n = calloc((size_t)slots, sizeof(size_t));
    }
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    for (long round = 0; round < rounds; round++) {
        for (long t = 0; t < nthreads; t++) {             /* a fresh thread inherits the slots */
            s[t].round = round;
            pthread_create(&tids[t], NULL, larson_thread, &s[t]);
        }
        for (long t = 0; t < nthreads; t++) pthread_join(tids[t], NULL);
    }
    if (verify) {
        uint64_t walked = 0;
        for (long t = 0; t < nthreads; t++)
            for (long k = 0; k < slots; k++) walked += s[t].n[k];
        printf("live_check walked=%llu counter=%llu\n", (unsigned long long)walked, (unsigned long long)atomic_load(&wl_live_bytes));
    }
    return 0;
}

/* ---- xmalloc ---- */
typedef struct { void *p; size_t n; } item;
static jobqueue handoff;
static _Atomic uint64_t in_flight_bytes;

static void *producer(void *arg) {
    long id = (long)(intptr_t)arg;
    wl_rng r = {seed ^ ((uint64_t)id << 40)};
    for (long i = 0; i < rounds * slots; i++) {
        item *it = malloc(sizeof *it);
        it->n = wl_logsize(&r, 16, 8192);
        it->p = wl_alloc(it->n);
        atomic_fetch_add(&in_flight_bytes, it->n);
        jq_push(&handoff, it);
    }
    wl_count_ops((uint64_t)(rounds * slots));
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    item *it;
    while ((it = jq_pop(&handoff, 1)) != NULL) {
        atomic_fetch_sub(&in_flight_bytes, it->n);
        wl_free(it->p, it->n);
        free(it);
    }
    return NULL;
}

static int run_xmalloc(int verify) {
    jq_init(&handoff);
    long np = nthreads / 2 > 0 ? nthreads / 2 : 1, nc = nthreads - np > 0 ? nthreads - np : 1;
    pthread_t *p = calloc((size_t)np, sizeof *p), *c = calloc((size_t)nc, sizeof *c);
    for (long i = 0; i < nc; i++) pthread_create(&c[i], NULL, consumer, NULL);
    for (long i = 0; i < np; i++) pthread_create(&p[i], NULL, producer, (void *)(intptr_t)i);
    for (long i = 0; i < np; i++) pthread_join(p[i], NULL);
    jq_close(&handoff);
    for (long i = 0; i < nc; i++) pthread_join(c[i], NULL);
    if (verify)   /* checked once quiet: mid-flight the two counters are updated at different instants */
        printf("live_check walked=%llu counter=%llu\n", (unsigned long long)atomic_load(&in_flight_bytes),
               (unsigned long long)atomic_load(&wl_live_bytes));
    return 0;
}

/* ---- loop ---- */
static void *loop_thread(void *arg) {
    wl_rng r = {seed ^ (uint64_t)(intptr_t)arg};
    long n = rounds * slots;
    for (long i = 0; i < n; i++) {
        size_t sz = 16 + wl_below(&r, 49);
        void *p = malloc(sz);               /* raw malloc: this pattern measures call overhead */
        if (!p) abort();
        *(volatile char *)p = 1;
        free(p);
    }
    wl_count_ops((uint64_t)n);
    return NULL;
}

static int run_loop(void) {
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    for (long i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, loop_thread, (void *)(intptr_t)i);
    for (long i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    return 0;
}

/* ---- sawtooth ---- */
static int run_sawtooth(int verify) {
    wl_rng r = {seed};
    objvec live = {0};
    size_t target = (size_t)mb << 20;
    long teeth = load_s > 0 && period > 0 ? (long)(load_s / period) : rounds;
    if (teeth < 1) teeth = 1;
    double start = wl_now();
    for (long t = 0; t < teeth; t++) {
        double half = start + ((double)t + 0.5) * period;
        uint64_t grown = 0;
        while (ov_bytes(&live) < target) {              /* retain, with some churn */
            size_t n = wl_logsize(&r, 16, 16384);
            ov_alloc(&live, n);
            if (live.len > 8 && wl_below(&r, 4) == 0) ov_drop(&live, wl_below(&r, live.len));
            grown++;
        }
        wl_count_ops(grown);
        wl_sleep_until(half);
        while (live.len && ov_bytes(&live) > target / 20) ov_drop(&live, wl_below(&r, live.len));   /* drain */
        wl_sleep_until(start + (double)(t + 1) * period);
    }
    if (verify)
        printf("live_check walked=%llu counter=%llu\n", (unsigned long long)ov_bytes(&live), (unsigned long long)atomic_load(&wl_live_bytes));
    return 0;
}

int main(int argc, char **argv) {
    const char *pattern = "larson";
    for (int i = 1; i + 1 < argc; i++) if (strcmp(argv[i], "--pattern") == 0) pattern = argv[i + 1];
    load_s = wl_opt_double(argc, argv, "--load", 30);
    double idle = wl_opt_double(argc, argv, "--idle", 0);
    seed = (uint64_t)wl_opt_long(argc, argv, "--seed", 1);
    nthreads = wl_opt_long(argc, argv, "--threads", 4);
    slots = wl_opt_long(argc, argv, "--slots", 20000);
    rounds = wl_opt_long(argc, argv, "--rounds", 20);
    mb = wl_opt_long(argc, argv, "--mb", 64);
    period = wl_opt_double(argc, argv, "--period", 10);
    int verify = (int)wl_opt_long(argc, argv, "--verify-live", 0);
    if (nthreads < 1 || nthreads > 256 || slots < 1 || rounds < 1 || mb < 1 || period <= 0) {
        fprintf(stderr, "stressors: out-of-range option\n");
        return 2;
    }
    wl_start_publisher();
    atomic_store(&wl_phase, WL_LOAD);
    int rc;
    if (strcmp(pattern, "larson") == 0) rc = run_larson(verify);
    else if (strcmp(pattern, "xmalloc") == 0) rc = run_xmalloc(verify);
    else if (strcmp(pattern, "sawtooth") == 0) rc = run_sawtooth(verify);
    else if (strcmp(pattern, "loop") == 0) rc = run_loop();
    else { fprintf(stderr, "stressors: unknown --pattern %s (larson, xmalloc, sawtooth, loop)\n", pattern); return 2; }
    atomic_store(&wl_phase, WL_IDLE);
    wl_sleep(idle);
    wl_stop_publisher();
    wl_report(pattern);
    return rc;
}
