/* replay_exec.c — the replay program: the ordered trace compiled into compact per-thread ops,
 * checked against the limits, then executed by one thread per recorded thread (or one, --direct). */
#include "replay.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#define REPLAY_STACK (1u << 20)            /* replay threads call only malloc and memset */

double speed = 1.0, start_time;

/* ---- the replay program: compact per-thread operations (threaded replay and --direct) ----
 * An object whose whole history is on one recorded thread (most of them: 100% in a malloc/free
 * loop) needs no synchronisation at all: it lives in its thread's own slot array, never shared
 * with another core, and a freed slot is reused by the thread's next object (LIFO), so the array
 * stays as small and as warm as the thread's live set. Only objects touched by two or more
 * threads (cross-thread frees, hand-offs) live in `shared` and carry a turn number.
 * --direct gets the same layout with every object private to its one thread, so that the ratio
 * replay / direct measures the cost of threads and turns, not of a data layout. */
#define OP_SHIFT 48                 /* cop.word: requested size in bits 0-47 (TRACE_MAX_SIZE is 2^40) */
#define SHARED_BIT (1ull << 51)     /* op in bits 48-50, shared in 51, log2(alignment) in 52-56 */
#define ALIGN_SHIFT 52
_Static_assert(TRACE_MAX_SIZE < (1ull << OP_SHIFT), "sizes must fit below the op bits");
typedef struct { uint64_t word; uint32_t slot, expect; } cop;   /* expect: shared objects only */
typedef struct { void *p; uint64_t size; } slot_t;

struct rthread {
    cop *ops;
    uint64_t *due;                  /* per op, only when the timing is kept (speed > 0) */
    size_t n;
    uint32_t nslots;                /* the most private objects this thread holds at once */
    uint32_t chunk_next, chunk_left;   /* preprocessing: this thread's current chunk of shared objects */
    _Atomic int64_t live;           /* requested bytes this thread's ops added (one writer) */
    uint64_t waits, sleeps;         /* shared ops that found the object's turn not yet come; futex sleeps */
    double waited;                  /* seconds spent in those waits */
    char pad[64];                   /* no two threads' counters on one cache line */
};

static object *shared;
static uint32_t nshared;
rthread *rthreads;
uint32_t nrunners;
size_t nshared_ops;
uint32_t nshared_objects;           /* nshared counts the chunks' unused places too */

/* Shared objects are numbered in chunks of 8 per creating thread (8 x 24 bytes = 3 cache lines,
 * the array 64-byte aligned), so two threads' new objects never share a cache line. */
#define SHARED_CHUNK 8u
_Static_assert(SHARED_CHUNK * sizeof(object) % 64 == 0, "a chunk must fill whole cache lines");
#define UNSET UINT32_MAX
#define MIXED (UINT32_MAX - 1)

/* Turn `global` into per-runner arrays of compact ops (a runner is a recorded thread, or the one
 * thread of --direct), classifying objects as private or shared on the way. Frees `global`. */
void compile_ops(int direct) {
    nrunners = direct ? 1 : nrthreads;
    uint32_t *owner = malloc((nobjects ? nobjects : 1) * sizeof *owner);
    uint32_t *slot_of = malloc((nobjects ? nobjects : 1) * sizeof *slot_of);
    rthreads = calloc(nrunners ? nrunners : 1, sizeof *rthreads);
    uint32_t **freed = calloc(nrunners ? nrunners : 1, sizeof *freed);   /* per runner: stack of free slots */
    size_t *nfreed = calloc(nrunners ? nrunners : 1, sizeof *nfreed), *capfreed = calloc(nrunners ? nrunners : 1, sizeof *capfreed);
    if (!owner || !slot_of || !rthreads || !freed || !nfreed || !capfreed) { fprintf(stderr, "replay: out of memory\n"); exit(5); }
    for (uint32_t o = 0; o < nobjects; o++) owner[o] = slot_of[o] = UNSET;
    for (size_t g = 0; g < nglobal; g++) {
        const rop *r = &global[g];
        if (r->op == OP_THREAD_EXIT) continue;
        uint32_t th = direct ? 0 : r->thread;
        rthreads[th].n++;
        if (owner[r->obj] == UNSET) owner[r->obj] = th;
        else if (owner[r->obj] != th) owner[r->obj] = MIXED;
    }
    for (uint32_t i = 0; i < nrunners; i++) {
        rthreads[i].ops = malloc((rthreads[i].n + 1) * sizeof(cop));
        rthreads[i].due = speed > 0 && !direct ? malloc((rthreads[i].n + 1) * sizeof(uint64_t)) : NULL;
        if (!rthreads[i].ops || (speed > 0 && !direct && !rthreads[i].due)) { fprintf(stderr, "replay: out of memory\n"); exit(5); }
        rthreads[i].n = 0;
    }
    for (size_t g = 0; g < nglobal; g++) {
        const rop *r = &global[g];
        if (r->op == OP_THREAD_EXIT) continue;     /* nothing to do: a thread's exit is its array's end */
        uint32_t th = direct ? 0 : r->thread;
        rthread *t = &rthreads[th];
        uint64_t word = r->size | (uint64_t)r->op << OP_SHIFT;
        if (r->op == OP_MEMALIGN) word |= (uint64_t)__builtin_ctz(r->align ? r->align : 1) << ALIGN_SHIFT;
        if (owner[r->obj] == MIXED) {
            if (slot_of[r->obj] == UNSET) {                     /* from the creating thread's chunk */
                if (t->chunk_left == 0) { t->chunk_next = nshared; nshared += SHARED_CHUNK; t->chunk_left = SHARED_CHUNK; }
                slot_of[r->obj] = t->chunk_next++;
                t->chunk_left--;
                nshared_objects++;
            }
            word |= SHARED_BIT;
            nshared_ops++;
        } else if (slot_of[r->obj] == UNSET) {
            slot_of[r->obj] = nfreed[th] ? freed[th][--nfreed[th]] : t->nslots++;
        }
        if (t->due) t->due[t->n] = r->due;
        t->ops[t->n++] = (cop){word, slot_of[r->obj], r->expect};
        if (r->op == OP_FREE && owner[r->obj] != MIXED) {       /* a free ends its object: the slot is reusable */
            if (nfreed[th] == capfreed[th]) {
                capfreed[th] = capfreed[th] ? capfreed[th] * 2 : 1024;
                freed[th] = realloc(freed[th], capfreed[th] * sizeof **freed);
                if (!freed[th]) { fprintf(stderr, "replay: out of memory\n"); exit(5); }
            }
            freed[th][nfreed[th]++] = slot_of[r->obj];
        }
    }
    for (uint32_t i = 0; i < nrunners; i++) free(freed[i]);
    free(freed); free(nfreed); free(capfreed); free(owner); free(slot_of);
    free(global);
    global = NULL;
    shared = aligned_alloc(64, (nshared ? nshared : SHARED_CHUNK) * sizeof *shared);
    if (shared) memset(shared, 0, (nshared ? nshared : SHARED_CHUNK) * sizeof *shared);
    if (!shared) { fprintf(stderr, "replay: out of memory for %u shared objects\n", nshared); exit(5); }
}

/* ---- limits (docs/reference/trace-format.md, "Limits") ---- */
/* The replay schedule: each op's due time (ns of recorded time), every idle gap longer than
 * max_gap replay seconds shortened to it. */
plan schedule(const limits *lim) {
    plan p = {0};
    uint64_t cap = UINT64_MAX, prev_ts = 0, due = 0;
    if (speed > 0) {
        double c = lim->max_gap * speed * 1e9;
        cap = c >= 1.8e19 ? UINT64_MAX : (uint64_t)c;
    }
    for (size_t g = 0; g < nglobal; g++) {
        uint64_t gap = global[g].ts >= prev_ts ? global[g].ts - prev_ts : 0;
        if (gap > cap) { gap = cap; p.gaps_shortened++; }
        due = gap > UINT64_MAX - due ? UINT64_MAX : due + gap;
        if (global[g].ts > prev_ts) prev_ts = global[g].ts;
        global[g].due = due;
    }
    p.schedule_s = speed > 0 ? (double)due * 1e-9 / speed : 0;
    uint64_t *sizes = calloc(nobjects ? nobjects : 1, sizeof *sizes), live = 0;
    if (!sizes) { fprintf(stderr, "replay: out of memory\n"); exit(5); }
    for (size_t g = 0; g < nglobal; g++) {
        const rop *r = &global[g];
        if (r->op == OP_THREAD_EXIT) continue;
        uint64_t after = r->op == OP_FREE ? 0 : r->size;
        if (after > p.largest) p.largest = after;
        live = live - sizes[r->obj] + after;
        sizes[r->obj] = after;
        if (live > p.peak_live) p.peak_live = live;
    }
    free(sizes);
    return p;
}

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

/* 0, or exit code 4 with one line naming the limit and the option that raises it. */
int check_limits(const limits *lim, const plan *p, int threaded) {
    if (p->largest > lim->max_alloc) {
        fprintf(stderr, "replay: the trace requests %llu bytes (%.1f GiB) at once; the limit is %.1f GiB (--max-alloc)\n",
                (unsigned long long)p->largest, gib(p->largest), gib(lim->max_alloc));
        return 4;
    }
    if (p->peak_live > lim->max_live) {
        fprintf(stderr, "replay: the trace holds up to %.1f GiB live; the limit is %.1f GiB (--max-live)\n",
                gib(p->peak_live), gib(lim->max_live));
        return 4;
    }
    if (threaded && nrthreads > lim->max_threads) {
        fprintf(stderr, "replay: the trace has %u threads; the limit is %u (--max-threads)\n", nrthreads, lim->max_threads);
        return 4;
    }
    if (threaded && p->schedule_s > lim->max_duration) {
        fprintf(stderr, "replay: at --speed %g the replay would take %.0f s even with idle gaps cut to %g s; the limit is "
                "%g s (--max-duration; or a shorter --max-gap, a higher --speed, or --speed 0)\n", speed, p->schedule_s, lim->max_gap, lim->max_duration);
        return 4;
    }
    return 0;
}
/* ---- executing one operation ---- */
static void touch(void *p, uint64_t n) { memset(p, 0xA5, n); }

void perform(const rop *r) {
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

/* User + system CPU seconds of the whole process (all threads). */
double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* One compact op on a block (*p, *size); returns the change in live requested bytes. */
static inline int64_t perform_word(void **p, uint64_t *size, uint64_t word) {
    uint64_t n = word & ((1ull << OP_SHIFT) - 1), before = *size;
    switch ((word >> OP_SHIFT) & 7) {
    case OP_MALLOC: *p = malloc(n); if (*p) touch(*p, n); break;
    case OP_CALLOC: *p = calloc(1, n); break;
    case OP_MEMALIGN: {
        size_t align = (size_t)1 << ((word >> ALIGN_SHIFT) & 31);
        if (posix_memalign(p, align < sizeof(void *) ? sizeof(void *) : align, n)) *p = NULL;
        else touch(*p, n);
        break;
    }
    case OP_REALLOC: {
        void *q = realloc(*p, n);
        if (q && n > before) touch((char *)q + before, n - before);
        if (q || n == 0) *p = q;
        break;
    }
    case OP_FREE: free(*p); *p = NULL; n = 0; break;
    default: return 0;
    }
    *size = n;
    return (int64_t)(n - before);
}

/* Threads are all created before any starts, so a failed pthread_create replays nothing. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate;                    /* 0: wait, 1: go, -1: give up */

/* Another thread has not reached this object's turn yet: spin briefly, then sleep on the object
 * (a futex) so that, with more replay threads than cores, the CPU goes to the thread we wait for
 * instead of to yields (0.67x of direct calls with sched_yield, 4 threads on 2 cores).
 * No lost wake-up: the waiter stores `waiting` and then reads `seq` (in our re-check, and in the
 * kernel's futex check, which compares `seq` under the futex lock the waker's FUTEX_WAKE also
 * takes); the waker stores `seq` and then reads `waiting`. That is a store followed by a load on
 * each side (Dekker): with release/acquire alone both loads may see the old values and the waiter
 * would sleep through its turn, so both pairs are seq_cst (a full barrier between store and
 * load). Measured: a release store + relaxed load instead (unsafe) saved no measurable CPU on
 * worker-pool or xmalloc, so the barrier stays on the waker's side too (no membarrier tricks).
 * The waker clears `waiting` with an exchange, so a second waiter's flag set between its load and
 * the clear is still followed by a wake of all. The timeout is only a safety net; it doubles up to
 * 64 ms, since a legitimate wait can be long (larson: a thread of round 8 waits for round 7). */
static void wait_turn(object *o, uint32_t expect, uint64_t *sleeps) {
    for (int spin = 0; spin < 200; spin++) {
        if (atomic_load_explicit(&o->seq, memory_order_acquire) == expect) return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    long limit_ns = 2000000;
    for (;;) {
        atomic_store_explicit(&o->waiting, 1, memory_order_seq_cst);
        uint32_t now = atomic_load_explicit(&o->seq, memory_order_seq_cst);
        if (now == expect) return;
        struct timespec limit = {limit_ns / 1000000000, limit_ns % 1000000000};
        ++*sleeps;
        syscall(SYS_futex, &o->seq, FUTEX_WAIT_PRIVATE, now, &limit, NULL, 0);
        if (atomic_load_explicit(&o->seq, memory_order_acquire) == expect) return;
        if (limit_ns < 64000000) limit_ns *= 2;
    }
}

/* The object's next turn: seq_cst store, then a seq_cst load of `waiting` (see wait_turn). */
static inline void pass_turn(object *o, uint32_t next) {
    atomic_store_explicit(&o->seq, next, memory_order_seq_cst);
    if (atomic_load_explicit(&o->waiting, memory_order_seq_cst) &&      /* rare: someone sleeps on it */
        atomic_exchange_explicit(&o->waiting, 0, memory_order_seq_cst))
        syscall(SYS_futex, &o->seq, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* Execute one runner's ops; `slots` is its private objects' array. Flat out, live bytes are
 * counted in the runner's own counter (a shared atomic per op would cost more than the op) and
 * summed for $ALLOCLAB_STATS every 4096 ops of the publishing runner, then every 20 ms while the
 * others finish; paced (timed), each op also updates the shared total at once. */
static void execute(rthread *th, int timed, int publisher) {
    slot_t *slots = calloc(th->nslots ? th->nslots : 1, sizeof *slots);   /* first touched by its own thread */
    if (!slots) { fprintf(stderr, "replay: out of memory for %u objects\n", th->nslots); exit(5); }
    int64_t live = 0;
    uint64_t done = 0;
    const cop *ops = th->ops;
    for (size_t i = 0; i < th->n; i++) {
        if (timed) {                                       /* keep the recorded timing, scaled, gaps capped */
            double due = start_time + (double)th->due[i] * 1e-9 / speed;
            double now = wl_now();
            if (due - now > 50e-6) wl_sleep(due - now);
        }
        cop c = ops[i];
        int64_t delta;
        if (!(c.word & SHARED_BIT)) {
            delta = perform_word(&slots[c.slot].p, &slots[c.slot].size, c.word);
        } else {
            /* Every op is performed, none skipped, so each wait ends: the op it waits for is
             * earlier in the global order, and so is everything its thread does before it. */
            object *o = &shared[c.slot];
            if (atomic_load_explicit(&o->seq, memory_order_acquire) != c.expect) {
                double w0 = wl_now();
                th->waits++;
                wait_turn(o, c.expect, &th->sleeps);
                th->waited += wl_now() - w0;
            }
            delta = perform_word(&o->p, &o->size, c.word);
            pass_turn(o, c.expect + 1);
        }
        live += delta;
        if (timed)          /* paced: the ops are sparse, and an experiment samples live bytes as they go */
            atomic_fetch_add_explicit(&wl_live_bytes, (uint64_t)delta, memory_order_relaxed);
        if (++done == 4096) {
            wl_count_ops(done);
            done = 0;
            atomic_store_explicit(&th->live, live, memory_order_relaxed);
            if (publisher && !timed) publish_live();
        }
    }
    wl_count_ops(done);
    atomic_store_explicit(&th->live, live, memory_order_relaxed);
    free(slots);   /* the blocks themselves stay allocated, as in the recording */
}

static void *replay_thread(void *arg) {
    rthread *th = arg;
    pthread_mutex_lock(&gate_lock);
    while (gate == 0) pthread_cond_wait(&gate_cond, &gate_lock);
    int go = gate > 0;
    pthread_mutex_unlock(&gate_lock);
    if (go) execute(th, speed > 0, 0);
    return NULL;
}

/* Live bytes for the publisher: the runners' counters summed (transiently a free may be counted
 * before the allocation it follows, so a negative sum reads as 0). */
void publish_live(void) {
    int64_t sum = 0;
    for (uint32_t i = 0; i < nrunners; i++) sum += atomic_load_explicit(&rthreads[i].live, memory_order_relaxed);
    atomic_store(&wl_live_bytes, sum > 0 ? (uint64_t)sum : 0);
}

static void open_gate(int value) {
    pthread_mutex_lock(&gate_lock);
    gate = value;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

/* 0, or exit code 5 after joining the threads already made. The calling thread replays the
 * recorded thread with the most operations itself: one thread fewer to wake (on a loaded machine a
 * wake-up can cost milliseconds), and it publishes the live bytes as it goes. */
int run_threads(void) {
    pthread_t *tids = calloc(nrthreads ? nrthreads : 1, sizeof *tids);
    uint32_t own = 0;
    for (uint32_t i = 1; i < nrthreads; i++) if (rthreads[i].n > rthreads[own].n) own = i;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, REPLAY_STACK);
    uint32_t made = 0;
    int rc = tids ? 0 : ENOMEM;
    for (; !rc && made < nrthreads; made++)
        if (made != own && (rc = pthread_create(&tids[made], &attr, replay_thread, &rthreads[made])) != 0) break;
    pthread_attr_destroy(&attr);
    if (rc) {
        open_gate(-1);
        for (uint32_t i = 0; i < made; i++) if (i != own) pthread_join(tids[i], NULL);
        fprintf(stderr, "replay: cannot start thread %u of %u: %s (raise the process or memory limits: ulimit -u, "
                "ulimit -v, or /proc/sys/kernel/threads-max)\n", made + 1, nrthreads, strerror(rc));
        free(tids);
        return 5;
    }
    start_time = wl_now();
    open_gate(1);
    if (nrthreads) execute(&rthreads[own], speed > 0, 1);
    for (uint32_t i = 0; i < nrthreads; i++) {          /* keep publishing while the others finish */
        if (i == own) continue;
        struct timespec until;
        do {
            if (speed == 0) publish_live();
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 20000000;
            if (until.tv_nsec >= 1000000000) { until.tv_sec++; until.tv_nsec -= 1000000000; }
        } while (pthread_timedjoin_np(tids[i], NULL, &until) == ETIMEDOUT);
    }
    if (speed == 0) publish_live();
    free(tids);
    return 0;
}

void run_direct(void) {
    execute(&rthreads[0], 0, 1);
    publish_live();
}

void wait_totals(uint64_t *waits, uint64_t *sleeps, double *waited) {
    *waits = *sleeps = 0;
    *waited = 0;
    for (uint32_t i = 0; i < nrunners; i++) { *waits += rthreads[i].waits; *sleeps += rthreads[i].sleeps; *waited += rthreads[i].waited; }
}
