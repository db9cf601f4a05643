/* wl_common.h — shared helpers of alloclab's native workloads: seeded PRNG, time, the stats
 * side channel with exact live-bytes accounting, and phase timing. */
#ifndef WL_COMMON_H
#define WL_COMMON_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "alloclab_stats.h"

/* splitmix64: tiny, seedable, identical on every machine, so a seed fixes the op sequence. */
typedef struct { uint64_t s; } wl_rng;
static inline uint64_t wl_next(wl_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline uint64_t wl_below(wl_rng *r, uint64_t n) { return n ? wl_next(r) % n : 0; }
/* A size spread log-uniformly over [lo, hi]: allocators see every size class. */
size_t wl_logsize(wl_rng *r, size_t lo, size_t hi);

double wl_now(void);                 /* CLOCK_MONOTONIC seconds */
void wl_sleep(double seconds);

/* Exact accounting of live requested bytes (atomic: threads allocate and free). */
extern _Atomic uint64_t wl_live_bytes, wl_peak_bytes, wl_ops;
void *wl_alloc(size_t n);            /* malloc + account; aborts on OOM */
void *wl_realloc(void *p, size_t old, size_t n);   /* realloc + account */
void wl_free(void *p, size_t n);     /* free + account */

/* Operation digest: the sum of a hash of every (operation, size), so the same seed gives the same
 * digest whatever order threads happened to interleave in. Printed at exit for determinism tests. */
extern _Atomic uint64_t wl_digest;
static inline void wl_note(uint64_t op, uint64_t size) {
    uint64_t z = (op << 56) ^ size ^ 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
    atomic_fetch_add_explicit(&wl_digest, z ^ (z >> 29), memory_order_relaxed);
}
/* Print the closing line every workload prints: ops, live bytes, peak, digest. */
void wl_report(const char *name);

/* Phase-paced loop helper: sleep until `deadline` (monotonic seconds) if it is in the future. */
void wl_sleep_until(double deadline);
static inline void wl_count_ops(uint64_t n) { atomic_fetch_add_explicit(&wl_ops, n, memory_order_relaxed); }

/* Phases: warm-up and load are decided by the workload's own clock (--load, --idle seconds). */
enum { WL_WARMUP = 0, WL_LOAD = 1, WL_IDLE = 2, WL_DONE = 3 };
void wl_publish(uint32_t phase);     /* write a snapshot to the side channel, if one is open */
/* Start a thread that publishes every 100 ms until wl_stop_publisher(). */
void wl_start_publisher(void);
void wl_stop_publisher(void);
extern _Atomic uint32_t wl_phase;

/* Options: --name value pairs. */
double wl_opt_double(int argc, char **argv, const char *name, double dflt);
long wl_opt_long(int argc, char **argv, const char *name, long dflt);
#endif
