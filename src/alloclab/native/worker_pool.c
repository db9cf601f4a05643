/* worker_pool — the memory pattern of a multi-threaded bundler (rolldown / vite dev server).
 *
 * A persistent pool of --threads workers (tokio + rayon in rolldown) runs several builds; each
 * build processes --modules modules whose sizes follow a Pareto law, so the work is imbalanced and
 * threads pick modules dynamically. Per module, in the worker that picked it:
 *  - parse: many small AST nodes (16-256 B);
 *  - transform: half of the nodes die, medium objects (256 B-4 KiB) appear, vectors grow by realloc;
 *  - codegen: the output string grows by doubling realloc, source-map chunks of 4-64 KiB.
 * A sparse --survive share of the nodes is kept in the module graph cache until the module is
 * processed again in the next build (then freed by whichever thread gets it). At the end of a
 * build the main thread joins all outputs into the bundle (large realloc chain) and drops every
 * module's remaining data: objects allocated by one thread, freed by another. After the last build
 * the workers stay alive and idle (--idle seconds) — memory "after idle" is what a dev server sits on.
 *
 * Options: --load S --idle S --seed N --threads N --modules N --builds N (0: as many as fit in
 *          --load) --gap S --survive F --verify-live 1
 */
#include "objvec.h"
#include "wl_common.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    objvec nodes;        /* AST and transform objects of this build */
    objvec survivors;    /* kept across builds (module graph cache) */
    char *out; size_t outn;
} module;

static module *mods;
static long nmods;
static uint64_t seed;
static double survive;
static _Atomic long next_module;
static _Atomic long build_no;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static long started_build, finished_workers;
static int quitting;

static size_t module_kb(long m, long build) {
    wl_rng r = {seed * 7919 + (uint64_t)m * 104729 + (uint64_t)build};
    double u = ((double)(wl_next(&r) >> 11) + 1) / 9007199254740993.0;
    double kb = 2.0 / pow(u, 1.0 / 1.3);                 /* Pareto, alpha 1.3, min 2 KiB */
    return kb > 2048 ? 2048 : (size_t)kb;
}

static void process_module(long m, long build) {
    module *md = &mods[m];
    wl_rng r = {seed ^ ((uint64_t)m << 20) ^ (uint64_t)build * 0x9e3779b97f4a7c15ULL};
    size_t kb = module_kb(m, build);
    ov_clear(&md->survivors);        /* last build's survivors are replaced: freed here, maybe by another thread */
    size_t nodes = kb * 40;
    for (size_t i = 0; i < nodes; i++) ov_alloc(&md->nodes, wl_logsize(&r, 16, 256));          /* parse */
    for (size_t i = 0; i < nodes / 2 && md->nodes.len; i++) ov_drop(&md->nodes, wl_below(&r, md->nodes.len));
    for (size_t i = 0; i < nodes / 4; i++) ov_alloc(&md->nodes, wl_logsize(&r, 256, 4096));    /* transform */
    size_t cap = 4096, used = 0, want = kb * 1229;
    md->out = wl_alloc(cap);                                                                    /* codegen */
    while (used < want) {
        size_t step = 512 + wl_below(&r, 4096);
        while (used + step > cap) { md->out = wl_realloc(md->out, cap, cap * 2); cap *= 2; }
        used += step;
    }
    md->outn = cap;
    for (size_t i = 0; i < kb / 16 + 1; i++) ov_alloc(&md->nodes, wl_logsize(&r, 4096, 65536));  /* source maps */
    size_t keep = (size_t)((double)md->nodes.len * survive);
    for (size_t i = 0; i < keep && md->nodes.len; i++) {                      /* sparse survivors */
        size_t k = wl_below(&r, md->nodes.len);
        ov_push(&md->survivors, md->nodes.p[k], md->nodes.n[k]);
        md->nodes.p[k] = md->nodes.p[--md->nodes.len];
        md->nodes.n[k] = md->nodes.n[md->nodes.len];
    }
    wl_count_ops(1);
}

static void *worker(void *arg) {
    (void)arg;
    long seen = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (started_build == seen && !quitting) pthread_cond_wait(&start_cv, &mu);   /* idle: blocked, alive */
        if (quitting) { pthread_mutex_unlock(&mu); return NULL; }
        seen = started_build;
        pthread_mutex_unlock(&mu);
        long m;
        while ((m = atomic_fetch_add(&next_module, 1)) < nmods) process_module(m, seen);
        pthread_mutex_lock(&mu);
        finished_workers++;
        pthread_cond_broadcast(&done_cv);
        pthread_mutex_unlock(&mu);
    }
}

static uint64_t walk_live(char *bundle, size_t bundlen) {
    uint64_t sum = bundle ? bundlen : 0;
    for (long m = 0; m < nmods; m++) sum += ov_bytes(&mods[m].nodes) + ov_bytes(&mods[m].survivors) + mods[m].outn;
    return sum;
}

int main(int argc, char **argv) {
    double load = wl_opt_double(argc, argv, "--load", 60), idle = wl_opt_double(argc, argv, "--idle", 0);
    long threads = wl_opt_long(argc, argv, "--threads", 4), builds = wl_opt_long(argc, argv, "--builds", 0);
    double gap = wl_opt_double(argc, argv, "--gap", 1.0);
    nmods = wl_opt_long(argc, argv, "--modules", 1500);
    survive = wl_opt_double(argc, argv, "--survive", 0.05);
    seed = (uint64_t)wl_opt_long(argc, argv, "--seed", 1);
    int verify = (int)wl_opt_long(argc, argv, "--verify-live", 0);
    if (threads < 1 || threads > 256 || nmods < 1 || survive < 0 || survive > 1 || builds < 0) {
        fprintf(stderr, "worker_pool: out-of-range option (threads 1..256, modules >= 1, survive 0..1, builds >= 0)\n");
        return 2;
    }
    mods = calloc((size_t)nmods, sizeof *mods);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    for (long t = 0; t < threads; t++) pthread_create(&tids[t], NULL, worker, NULL);
    wl_start_publisher();
    atomic_store(&wl_phase, WL_LOAD);
    double end = wl_now() + load;
    char *bundle = NULL;
    size_t bundlen = 0;
    for (long b = 1; builds ? b <= builds : wl_now() < end; b++) {
        wl_free(bundle, bundlen);                     /* the previous bundle was written out */
        bundle = NULL;
        bundlen = 0;
        atomic_store(&next_module, 0);
        pthread_mutex_lock(&mu);
        finished_workers = 0;
        started_build = b;
        pthread_cond_broadcast(&start_cv);
        while (finished_workers < threads) pthread_cond_wait(&done_cv, &mu);
        pthread_mutex_unlock(&mu);
        size_t cap = 65536;                            /* join the chunks into the bundle */
        bundle = wl_alloc(cap);
        for (long m = 0; m < nmods; m++) {
            while (bundlen + mods[m].outn > cap) { bundle = wl_realloc(bundle, cap, cap * 2); cap *= 2; }
            bundlen += mods[m].outn;
            wl_free(mods[m].out, mods[m].outn);        /* cross-thread: allocated by a worker */
            mods[m].out = NULL;
            mods[m].outn = 0;
            ov_clear(&mods[m].nodes);
        }
        bundle = wl_realloc(bundle, cap, bundlen ? bundlen : 1);
        bundlen = bundlen ? bundlen : 1;
        atomic_store(&build_no, b);
        if (!builds || b < builds) wl_sleep(gap);      /* watch mode: wait for the next change */
    }
    atomic_store(&wl_phase, WL_IDLE);
    if (verify) {
        uint64_t walked = walk_live(bundle, bundlen), counter = atomic_load(&wl_live_bytes);
        printf("live_check walked=%llu counter=%llu\n", (unsigned long long)walked, (unsigned long long)counter);
    }
    wl_sleep(idle);
    pthread_mutex_lock(&mu);
    quitting = 1;
    pthread_cond_broadcast(&start_cv);
    pthread_mutex_unlock(&mu);
    for (long t = 0; t < threads; t++) pthread_join(tids[t], NULL);
    wl_stop_publisher();
    printf("worker_pool: builds=%ld\n", (long)atomic_load(&build_no));
    wl_report("worker_pool");
    return 0;
}
