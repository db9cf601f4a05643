/* frag — alloclab's demo program: a churning heap that fragments a naive allocator.
 *
 * Each round allocates a burst of objects spread over 16 B..8 KiB, keeps a few of them as
 * long-lived survivors scattered through the burst, and frees the rest. The survivors pin pages
 * that are otherwise empty: an allocator that cannot reuse or return those pages grows. After the
 * load phase the program frees most survivors and idles, showing whether memory goes back to the
 * OS. Options: --load S (seconds of churn), --idle S, --mb N (survivor budget), --seed N.
 */
#include "wl_common.h"
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>

struct obj { void *p; size_t n; };

struct worker { wl_rng rng; size_t cap; struct obj *keep; double end; };

/* One churning thread: with several, glibc spreads survivors over several arenas. */
static void *churn(void *arg) {
    struct worker *w = arg;
    struct obj *burst = calloc(4096, sizeof *burst);
    if (!burst) abort();
    struct obj big = {0};
    while (wl_now() < w->end) {
        /* A transient large buffer per round (64 KiB..4 MiB, like a document being built):
         * small survivors allocated around it can leave its hole unusable for the next one. */
        wl_free(big.p, big.n);
        big.n = wl_logsize(&w->rng, 64 * 1024, 4 * 1024 * 1024);
        big.p = wl_alloc(big.n);
        int n = 1024 + (int)wl_below(&w->rng, 3072);
        for (int i = 0; i < n; i++) {
            burst[i].n = wl_logsize(&w->rng, 16, 8192);
            burst[i].p = wl_alloc(burst[i].n);
        }
        for (int i = 0; i < n; i++) {
            if (wl_below(&w->rng, 16) == 0) {      /* 1 in 16 survives, replacing an old one */
                size_t slot = wl_below(&w->rng, w->cap);
                wl_free(w->keep[slot].p, w->keep[slot].n);
                w->keep[slot] = burst[i];
            } else {
                wl_free(burst[i].p, burst[i].n);
            }
        }
        wl_count_ops((uint64_t)n + 1);
    }
    wl_free(big.p, big.n);
    free(burst);
    return NULL;
}

int main(int argc, char **argv) {
    double load = wl_opt_double(argc, argv, "--load", 10);
    double idle = wl_opt_double(argc, argv, "--idle", 0);
    long budget_mb = wl_opt_long(argc, argv, "--mb", 32);
    long nthreads = wl_opt_long(argc, argv, "--threads", 2);
    uint64_t seed = (uint64_t)wl_opt_long(argc, argv, "--seed", 1);
    if (nthreads < 1 || nthreads > 64 || budget_mb < 1) {
        fprintf(stderr, "frag: --threads must be 1..64 and --mb at least 1\n");
        return 2;
    }

    wl_start_publisher();
    atomic_store(&wl_phase, WL_LOAD);
    struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    /* survivors average ~1.3 KiB (log-uniform 16 B..8 KiB) */
    size_t cap = (size_t)budget_mb * 1024 * 1024 / 1300 / (size_t)nthreads;
    for (long t = 0; t < nthreads; t++) {
        ws[t] = (struct worker){{seed * 1000003u + (uint64_t)t}, cap, calloc(cap, sizeof(struct obj)), wl_now() + load};
        pthread_create(&tids[t], NULL, churn, &ws[t]);
    }
    for (long t = 0; t < nthreads; t++) pthread_join(tids[t], NULL);

    /* Idle: drop 99% of the survivors, then sit still and let the allocator give memory back. */
    atomic_store(&wl_phase, WL_IDLE);
    for (long t = 0; t < nthreads; t++)
        for (size_t i = 0; i < ws[t].cap; i++)
            if (i % 100) { wl_free(ws[t].keep[i].p, ws[t].keep[i].n); ws[t].keep[i].p = NULL; }
    wl_sleep(idle);
    wl_stop_publisher();
    wl_report("frag");
    return 0;
}
