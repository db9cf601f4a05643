/* replay — replays an alloclab trace under whatever allocator is preloaded.
 *
 *   replay FILE [--speed X]      one thread per recorded thread; each waits for its events' times
 *                                (idle gaps scaled by 1/X; --speed 0: as fast as possible) and for
 *                                the objects it frees or reallocates to exist (cross-thread frees
 *                                keep their recorded order); prints one JSON line with ops/s
 *   replay FILE --info [--points N]   JSON: operations, threads, duration, size histogram, the
 *                                live-bytes curve (exact, from the requested sizes)
 *   replay FILE --check [--speed X]   JSON: what a replay at this speed would need (threads,
 *                                schedule length, peak live bytes), or the limit it exceeds
 *   replay FILE --serial [--points N] the same operations in recorded global order on one thread,
 *                                printing the live-bytes curve as executed (must equal --info's)
 *   replay FILE --direct         the same operations in a plain loop on one thread, no timing or
 *                                turns, the same compact layout: the yardstick for replay speed
 * A replay or --direct prints ops/s, cpu_seconds (all threads, replay phase only), objects and
 * shared_objects (touched by more than one thread: only their ops wait for turns), shared_ops,
 * waits (turns not yet come), sleeps (futex sleeps) and waited_s (summed over threads).
 * The input is not trusted (docs/trace-format.md, "Limits"): reading and ordering are O(n log n)
 * whatever the file holds; idle gaps over --max-gap are shortened and a schedule over
 * --max-duration refused; requests over --max-alloc, peaks over --max-live and more threads than
 * --max-threads are refused before anything is allocated; every thread is created before any
 * replays, so a failed pthread_create replays nothing and exits 5.
 * Exit codes: 0 done, 2 bad options, 3 unreadable or corrupt trace, 4 over a limit, 5 cannot run
 * here (threads, memory). Every error is one line on stderr, starting "replay: ".
 * Memory is written in full after each allocation, as the recorded program presumably did.
 * With $ALLOCLAB_STATS set, live bytes and operations are published like any built-in workload.
 */
#include "trace_reader.h"
#include "wl_common.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* Defaults of the limits (docs/trace-format.md, "Limits"); each has an option. */
#define DEFAULT_MAX_GAP 3600.0             /* s: a longer idle gap is shortened to this */
#define DEFAULT_MAX_DURATION 604800.0      /* s (7 days): a longer schedule is refused */
#define DEFAULT_MAX_THREADS 4096u
#define DEFAULT_MAX_ALLOC (1ull << 30)     /* bytes in one request: above any tor or server request seen; --max-alloc raises it */
#define DEFAULT_MAX_LIVE_CAP (1ull << 40)  /* live bytes: 3/4 of physical memory, at most this */
#define REPLAY_STACK (1u << 20)            /* replay threads call only malloc and memset */

typedef struct {
    uint64_t ts, due, size;         /* recorded time; time on the replay schedule (ns, gaps capped) */
    uint32_t obj, expect, align, thread;
    uint8_t op;
} rop;                              /* a replay operation on object `obj` (ops on it so far: expect) */

typedef struct { void *p; uint64_t size; _Atomic uint32_t seq, waiting; } object;

static object *objects;             /* --serial: every object; threaded and --direct use `shared` */
static uint32_t nobjects;
static rop *global;                 /* every op in recorded global order */
static size_t nglobal, untracked;
static uint32_t nrthreads;
static double speed = 1.0, start_time;
static uint32_t trace_pid;
static uint64_t trace_start_ns;
static size_t trace_events, trace_truncated;

/* ---- preprocessing: global order, object ids, dependencies ---- */
typedef struct { uint64_t key; uint32_t obj; } slot;
static slot *table;
static size_t table_cap, table_len;

static uint64_t hash_seed;          /* random per run: a crafted file cannot aim addresses at one slot */
static size_t hash(uint64_t k) { k ^= hash_seed; k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; return (size_t)k; }
static void table_grow(void);
static size_t over_live;           /* allocations placed at an address still live: an order the program could not have run */
static void table_put(uint64_t k, uint32_t obj) {
    if ((table_len + 1) * 2 > table_cap) table_grow();
    size_t i = hash(k) & (table_cap - 1);
    while (table[i].key && table[i].key != k) i = (i + 1) & (table_cap - 1);
    if (!table[i].key) table_len++;
    else over_live++;
    table[i] = (slot){k, obj};
}
static void table_grow(void) {
    slot *old = table;
    size_t oldcap = table_cap;
    table_cap = table_cap ? table_cap * 2 : 1 << 16;
    table = calloc(table_cap, sizeof *table);
    if (!table) { fprintf(stderr, "replay: out of memory mapping addresses\n"); exit(5); }
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
static int by_thread_order(const void *a, const void *b) {   /* each thread's events keep their order */
    const order_key *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}
static int by_time(const void *a, const void *b) {   /* the fallback for a crowded tick */
    const order_key *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;   /* frees before allocations */
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* Allocations of one clock tick, by the address they return: built only for a tick in which a
 * free or realloc names an address not yet allocated, so finding "the allocation of this address
 * later in the same tick" costs a binary search instead of a scan of the tick. */
typedef struct { uint64_t addr; size_t pos; } made_at;
static int by_addr(const void *a, const void *b) {
    const made_at *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}
typedef struct {
    size_t lo, hi;              /* the tick's positions in the sorted keys; hi == 0: not built */
    made_at *made;
    size_t *cursor;             /* per address run: first entry not yet used (amortised O(1)) */
    size_t n, cap;
} tick_index;

static int is_allocation(uint8_t op) { return op != OP_FREE && op != OP_THREAD_EXIT; }
static uint64_t made_addr(const trace_event *e) { return e->op == OP_REALLOC ? e->new_ptr : e->ptr; }

static void tick_index_build(tick_index *x, trace_data *t, const order_key *keys, size_t k, size_t g) {
    size_t lo = g, hi = g;
    while (lo > 0 && keys[lo - 1].ts == keys[g].ts) lo--;
    while (hi < k && keys[hi].ts == keys[g].ts) hi++;
    x->lo = lo;
    x->hi = hi;
    x->n = 0;
    for (size_t j = lo; j < hi; j++) {
        trace_event *a = &t->threads[keys[j].thread].ev[keys[j].idx];
        if (!is_allocation(a->op)) continue;
        if (x->n == x->cap) {
            x->cap = x->cap ? x->cap * 2 : 64;
            x->made = realloc(x->made, x->cap * sizeof *x->made);
            x->cursor = realloc(x->cursor, x->cap * sizeof *x->cursor);
            if (!x->made || !x->cursor) { fprintf(stderr, "replay: out of memory ordering the trace\n"); exit(5); }
        }
        x->made[x->n++] = (made_at){made_addr(a), j};
    }
    qsort(x->made, x->n, sizeof *x->made, by_addr);
    for (size_t i = 0; i < x->n; i++) x->cursor[i] = i;
}

/* The first allocation of `addr` after position g in g's tick that has not been used, or SIZE_MAX. */
static size_t tick_index_find(tick_index *x, uint64_t addr, size_t g, const uint8_t *used) {
    size_t lo = 0, hi = x->n;
    while (lo < hi) { size_t mid = lo + (hi - lo) / 2; if (x->made[mid].addr < addr) lo = mid + 1; else hi = mid; }
    if (lo == x->n || x->made[lo].addr != addr) return SIZE_MAX;
    size_t c = x->cursor[lo];
    while (c < x->n && x->made[c].addr == addr && (x->made[c].pos <= g || used[x->made[c].pos])) c++;
    x->cursor[lo] = c;
    return c < x->n && x->made[c].addr == addr ? x->made[c].pos : SIZE_MAX;
}

static uint32_t *seq;
static size_t seq_cap;

/* Reallocs pulled forward. The recorder stamps a realloc when it returns, but the block it moves
 * away from is released inside the call: another thread can get that address and be stamped
 * first, even many ticks earlier (the copy, or a preemption inside the call, takes time). Frees
 * are stamped before the call, so only a realloc's release can come late. An allocation placed at
 * an address still live therefore looks ahead (PULL_WINDOW_NS, in the time the events are read
 * in) for the next realloc away from that address by another thread whose earlier events are all
 * placed, and places that realloc first. Each event is placed once: `placed` marks events placed
 * ahead of their turn. The index of moving reallocs is built at the first such allocation. */
#define PULL_WINDOW_NS 10000000ull
typedef struct { uint64_t addr, ts; uint32_t thread, idx; } release_at;   /* a moving realloc */
static struct {
    trace_data *t;
    size_t *base;            /* per thread: index of its first event in `placed` */
    size_t *next;            /* per thread: its first event not yet placed */
    uint8_t *placed;
    release_at *rel;         /* moving reallocs by (address, time); NULL until first needed */
    size_t nrel, pulled;
    int depth;
} ahead;

static int by_release(const void *a, const void *b) {
    const release_at *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static int table_has(uint64_t k);
static void place(trace_event *e, uint32_t thread);

static void index_moving_reallocs(void) {
    trace_data *t = ahead.t;
    size_t n = 0;
    for (uint32_t i = 0; i < t->nthreads; i++)
        for (size_t j = 0; j < t->threads[i].n; j++) n += t->threads[i].ev[j].op == OP_REALLOC;
    ahead.rel = malloc((n + 1) * sizeof *ahead.rel);
    if (!ahead.rel) { fprintf(stderr, "replay: out of memory ordering the trace\n"); exit(5); }
    for (uint32_t i = 0; i < t->nthreads; i++)
        for (size_t j = 0; j < t->threads[i].n; j++) {
            const trace_event *e = &t->threads[i].ev[j];
            if (e->op == OP_REALLOC && e->new_ptr != e->ptr) ahead.rel[ahead.nrel++] = (release_at){e->ptr, e->ts, i, (uint32_t)j};
        }
    qsort(ahead.rel, ahead.nrel, sizeof *ahead.rel, by_release);
}

static void pull_release(uint64_t addr, uint64_t ts, uint32_t me) {
    if (!ahead.rel) index_moving_reallocs();
    size_t lo = 0, hi = ahead.nrel;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ahead.rel[mid].addr < addr || (ahead.rel[mid].addr == addr && ahead.rel[mid].ts < ts)) lo = mid + 1; else hi = mid;
    }
    for (size_t i = lo; i < ahead.nrel && ahead.rel[i].addr == addr && ahead.rel[i].ts <= ts + PULL_WINDOW_NS; i++) {
        const release_at *r = &ahead.rel[i];
        if (ahead.placed[ahead.base[r->thread] + r->idx] || r->thread == me || ahead.next[r->thread] != r->idx)
            continue;                                /* placed, or its thread is not there yet */
        ahead.pulled++;
        place(&ahead.t->threads[r->thread].ev[r->idx], r->thread);
        return;
    }
}

/* Give event e its object and its place in that object's history; append it to the global order. */
static void place(trace_event *e, uint32_t thread) {
    if (ahead.placed) {
        size_t idx = (size_t)(e - ahead.t->threads[thread].ev), *next = &ahead.next[thread];
        uint8_t *mine = ahead.placed + ahead.base[thread];
        if (mine[idx]) return;                       /* pulled forward earlier */
        mine[idx] = 1;                               /* before pulling: a pull may lead back to e */
        while (*next < ahead.t->threads[thread].n && mine[*next]) ++*next;
        uint64_t made = e->op == OP_REALLOC ? (e->new_ptr != e->ptr ? e->new_ptr : 0)
                      : is_allocation(e->op) ? e->ptr : 0;
        if (made && ahead.depth < 4 && table_has(made)) {
            ahead.depth++;
            pull_release(made, e->ts, thread);
            ahead.depth--;
        }
    }
    rop r = {e->ts, 0, e->size, 0, 0, e->align, thread, e->op};
    uint32_t obj;
    if (e->op == OP_MALLOC || e->op == OP_CALLOC || e->op == OP_MEMALIGN ||
        (e->op == OP_REALLOC && !table_take(e->ptr, &obj))) {
        if (e->op == OP_REALLOC) { r.op = OP_MALLOC; e->ptr = e->new_ptr; }   /* old block predates the trace */
        obj = nobjects++;
        if (nobjects > seq_cap) {
            seq_cap = seq_cap ? seq_cap * 2 : 1 << 16;
            seq = realloc(seq, seq_cap * sizeof *seq);
            if (!seq) { fprintf(stderr, "replay: out of memory ordering the trace\n"); exit(5); }
        }
        seq[obj] = 0;
        table_put(e->ptr ? e->ptr : 1, obj);
    } else if (e->op == OP_FREE) {
        if (!table_take(e->ptr, &obj)) { untracked++; return; }
    } else if (e->op == OP_REALLOC) {
        table_put(e->new_ptr ? e->new_ptr : 1, obj);
    } else {
        obj = 0;     /* thread exit */
    }
    r.obj = obj;
    if (e->op != OP_THREAD_EXIT) r.expect = seq[obj]++;
    global[nglobal++] = r;
}

static int table_has(uint64_t k) {
    if (!table_cap) return 0;
    size_t i = hash(k) & (table_cap - 1);
    while (table[i].key && table[i].key != k) i = (i + 1) & (table_cap - 1);
    return table[i].key == k;
}

/* A crowded tick's order, as before threads' runs were merged: frees and reallocs first, then by
 * thread; a free (or realloc) of an address that no earlier event allocated, in the same tick as
 * an allocation of that address, is a hand-off the clock could not order: the allocation is
 * placed first. ks: one tick's unplaced events, sorted by_time; used: m zeroed bytes. */
static void place_by_rank(trace_data *t, const order_key *ks, size_t m, uint8_t *used, tick_index *tick) {
    tick->hi = 0;
    for (size_t g = 0; g < m; g++) {
        if (used[g]) continue;                     /* already placed ahead of its tick-mates */
        trace_event *e = &t->threads[ks[g].thread].ev[ks[g].idx];
        while ((e->op == OP_FREE || e->op == OP_REALLOC) && !table_has(e->ptr)) {
            if (g + 1 >= m || ks[g + 1].ts != ks[g].ts) break;   /* alone in its tick: nothing to pull */
            if (!(tick->hi && g >= tick->lo && g < tick->hi)) tick_index_build(tick, t, ks, m, g);
            size_t j = tick_index_find(tick, e->ptr, g, used);
            if (j == SIZE_MAX) break;
            used[j] = 1;
            place(&t->threads[ks[j].thread].ev[ks[j].idx], ks[j].thread);
        }
        place(e, ks[g].thread);
    }
}

/* ---- merging the threads' runs of one clock tick ----
 * Events of one address in a tick, by (address, position); run: which thread's run holds it.
 * A run's events before its head are placed, so "an unplaced event of X in another run" is
 * found by binary searches, at most two per run, without marking anything. */
typedef struct { uint64_t addr; size_t pos; uint32_t run; } addr_at;
static int by_addr_pos(const void *a, const void *b) {
    const addr_at *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}
static size_t lower_bound(const addr_at *v, size_t n, uint64_t addr, size_t pos) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].addr < addr || (v[mid].addr == addr && v[mid].pos < pos)) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#define MERGE_MAX_RUNS 64    /* more threads in one tick: merge_crowded (no rescans of every run) */
#define MERGE_WORK_PER_EVENT 16   /* searches per event before a tick falls back likewise */
typedef struct {
    size_t *head, *end;      /* per run: next unplaced position, one past its last */
    addr_at *made, *freed;   /* the tick's allocations (by the address made) and frees/reallocs */
    size_t nmade, nfreed, cap, runs_cap;
    size_t work;             /* searches so far in this tick */
} tick_merge;

/* Does a run other than `me` have an unplaced event of addr in v? */
static int other_run_has(tick_merge *m, const addr_at *v, size_t n, uint64_t addr, uint32_t me) {
    size_t i = lower_bound(v, n, addr, 0);
    while (i < n && v[i].addr == addr) {
        m->work++;
        uint32_t u = v[i].run;
        if (u != me) {
            if (v[i].pos >= m->head[u]) return 1;
            size_t j = lower_bound(v, n, addr, m->head[u]);
            if (j < n && v[j].addr == addr && v[j].pos < m->end[u]) return 1;
        }
        i = lower_bound(v, n, addr, m->end[u]);
    }
    return 0;
}

/* Does the run holding position pos free (or realloc away) addr after pos, within the tick?
 * A run's events are one contiguous range of positions, so one binary search answers. */
static int run_frees_later(tick_merge *m, uint64_t addr, size_t pos, uint32_t run) {
    size_t j = lower_bound(m->freed, m->nfreed, addr, pos + 1);
    m->work++;
    return j < m->nfreed && m->freed[j].addr == addr && m->freed[j].pos < m->end[run];
}

/* Does a run other than `me` next do, to addr, an allocation it frees again itself later in the
 * tick (a closed pair)? Such a pair must come before an allocation that keeps addr to the end. */
static int other_run_has_closed_pair(tick_merge *m, uint64_t addr, uint32_t me) {
    size_t i = lower_bound(m->made, m->nmade, addr, 0);
    while (i < m->nmade && m->made[i].addr == addr) {
        m->work++;
        uint32_t u = m->made[i].run;
        size_t next_made = lower_bound(m->made, m->nmade, addr, m->head[u]);   /* u's first unplaced allocation of addr */
        if (u != me && next_made < m->nmade && m->made[next_made].addr == addr && m->made[next_made].pos < m->end[u]) {
            size_t pos = m->made[next_made].pos;
            size_t f = lower_bound(m->freed, m->nfreed, addr, m->head[u]);        /* ... with no free of addr before it */
            int freed_first = f < m->nfreed && m->freed[f].addr == addr && m->freed[f].pos < pos;
            if (!freed_first && run_frees_later(m, addr, pos, u)) return 1;
        }
        i = lower_bound(m->made, m->nmade, addr, m->end[u]);
    }
    return 0;
}

/* May run u's head be placed now? Not if (a) it frees an address not live that another run
 * makes in this tick (a hand-off the clock could not order), (b) it makes an address still live
 * that another run frees later in this tick, or (c) it makes an address not live that it keeps
 * to the end of the tick while another run has a closed pair of that address still to do (the
 * pair must have come first). Returns 0 when it may, else that address. */
static int placed_ahead(const order_key *key) { return ahead.placed && ahead.placed[ahead.base[key->thread] + key->idx]; }

static uint64_t head_blocker(tick_merge *m, trace_data *t, const order_key *keys, uint32_t u) {
    size_t pos = m->head[u];
    if (placed_ahead(&keys[pos])) return 0;            /* pulled forward already: placing it is a no-op */
    const trace_event *e = &t->threads[keys[pos].thread].ev[keys[pos].idx];
    if ((e->op == OP_FREE || e->op == OP_REALLOC) && e->ptr && !table_has(e->ptr) &&
        other_run_has(m, m->made, m->nmade, e->ptr, u)) return e->ptr;
    if (is_allocation(e->op) && !(e->op == OP_REALLOC && e->new_ptr == e->ptr)) {
        uint64_t x = made_addr(e);
        if (!x) return 0;
        if (table_has(x)) return other_run_has(m, m->freed, m->nfreed, x, u) ? x : 0;
        if (!run_frees_later(m, x, pos, u) && other_run_has_closed_pair(m, x, u)) return x;
    }
    return 0;
}

static void *grow_or_die(void *p, size_t bytes) {
    if (!(p = realloc(p, bytes))) { fprintf(stderr, "replay: out of memory ordering the trace\n"); exit(5); }
    return p;
}

/* The tick's runs (head/end) and its allocations and frees by address, for keys[lo, hi). */
static void merge_index(tick_merge *m, trace_data *t, const order_key *keys, size_t lo, size_t hi, uint32_t nruns) {
    if (hi - lo > m->cap) {
        m->cap = hi - lo;
        m->made = grow_or_die(m->made, m->cap * sizeof *m->made);
        m->freed = grow_or_die(m->freed, m->cap * sizeof *m->freed);
    }
    if (nruns > m->runs_cap) {
        m->runs_cap = nruns;
        m->head = grow_or_die(m->head, nruns * sizeof *m->head);
        m->end = grow_or_die(m->end, nruns * sizeof *m->end);
    }
    m->nmade = m->nfreed = 0;
    m->work = 0;
    uint32_t u = 0;
    for (size_t g = lo; g < hi; g++) {
        if (g > lo && keys[g].thread != keys[g - 1].thread) { m->end[u] = g; m->head[++u] = g; }
        else if (g == lo) m->head[0] = g;
        const trace_event *e = &t->threads[keys[g].thread].ev[keys[g].idx];
        if (placed_ahead(&keys[g])) continue;           /* done: nobody waits for it */
        int in_place = e->op == OP_REALLOC && e->new_ptr == e->ptr;     /* neither frees nor makes an address */
        if ((e->op == OP_FREE || e->op == OP_REALLOC) && !in_place) m->freed[m->nfreed++] = (addr_at){e->ptr, g, u};
        if (is_allocation(e->op) && !in_place) m->made[m->nmade++] = (addr_at){made_addr(e), g, u};
    }
    m->end[u] = hi;
    qsort(m->made, m->nmade, sizeof *m->made, by_addr_pos);
    qsort(m->freed, m->nfreed, sizeof *m->freed, by_addr_pos);
}

/* Place keys[lo, hi), one tick holding nruns thread runs (2..MERGE_MAX_RUNS), each run in its
 * recorded order. Returns 0 when the work budget ran out; the unplaced events are then in
 * m->head[u] .. m->end[u] for the caller to order otherwise. */
static int merge_tick(tick_merge *m, trace_data *t, const order_key *keys, size_t lo, size_t hi, uint32_t nruns) {
    merge_index(m, t, keys, lo, hi, nruns);
    size_t budget = MERGE_WORK_PER_EVENT * (hi - lo) + 256, left = hi - lo;
    while (left) {
        uint32_t pick = UINT32_MAX, first = UINT32_MAX;
        for (int pass = 0; pass < 2 && pick == UINT32_MAX; pass++)   /* frees and reallocs first */
            for (uint32_t r = 0; r < nruns && pick == UINT32_MAX; r++) {
                if (m->head[r] == m->end[r]) continue;
                if (first == UINT32_MAX) first = r;
                uint8_t op = t->threads[keys[m->head[r]].thread].ev[keys[m->head[r]].idx].op;
                if ((op == OP_FREE || op == OP_REALLOC) != (pass == 0)) continue;
                if (!head_blocker(m, t, keys, r)) pick = r;
                if (m->work > budget) return 0;
            }
        if (pick == UINT32_MAX) pick = first;      /* inconsistent data: every head waits; go on */
        size_t g = m->head[pick]++;
        place(&t->threads[keys[g].thread].ev[keys[g].idx], keys[g].thread);
        left--;
    }
    return 1;
}

/* A crowded tick (more than MERGE_MAX_RUNS threads): the same rules as merge_tick without its
 * rescans of every run per event. A run is drained while its head may be placed; a head that may
 * not waits ("parks") on the address it depends on and its run is woken when an event of that
 * address is placed. When every unfinished run waits (inconsistent data), the first of them goes
 * on anyway, as in merge_tick. Unconstrained events of different threads within one tick come in
 * run order rather than frees first: any order the dependencies allow is one the program could
 * have run. Same search budget and return as merge_tick. */
#define NO_RUN UINT32_MAX
typedef struct {
    uint64_t *key;           /* open addressing: address -> first run parked on it (0: empty slot) */
    uint32_t *first;
    size_t cap, used;
    uint32_t *next, *ready;  /* per run: next parked on the same address; stack of runs to drain */
    uint64_t *on;            /* per run: the address it is parked on, 0 if not parked */
    uint32_t nready, runs_cap;
} park_table;

static size_t park_slot(const park_table *p, uint64_t addr) {
    size_t i = hash(addr) & (p->cap - 1);
    while (p->key[i] && p->key[i] != addr) i = (i + 1) & (p->cap - 1);
    return i;
}

static void park_insert(park_table *p, uint32_t u, uint64_t addr) {
    size_t i = park_slot(p, addr);
    if (!p->key[i]) { p->key[i] = addr; p->first[i] = NO_RUN; p->used++; }
    p->next[u] = p->first[i];
    p->first[i] = u;
}

static void park(park_table *p, uint32_t u, uint64_t addr, uint32_t nruns) {
    if (2 * (p->used + 1) > p->cap) {          /* addresses pile up: rebuild from the runs parked now */
        memset(p->key, 0, p->cap * sizeof *p->key);
        p->used = 0;
        for (uint32_t r = 0; r < nruns; r++) if (p->on[r]) park_insert(p, r, p->on[r]);
    }
    p->on[u] = addr;
    park_insert(p, u, addr);
}

static void wake(park_table *p, uint64_t addr) {
    if (!addr) return;
    size_t i = park_slot(p, addr);
    if (!p->key[i]) return;
    for (uint32_t u = p->first[i]; u != NO_RUN; u = p->next[u]) { p->on[u] = 0; p->ready[p->nready++] = u; }
    p->first[i] = NO_RUN;
}

static void unpark(park_table *p, uint32_t u) {
    uint32_t *at = &p->first[park_slot(p, p->on[u])];
    while (*at != u) at = &p->next[*at];
    *at = p->next[u];
    p->on[u] = 0;
}

static void place_and_wake(park_table *p, trace_data *t, const order_key *key) {
    trace_event *e = &t->threads[key->thread].ev[key->idx];
    uint64_t freed = e->op == OP_FREE || e->op == OP_REALLOC ? e->ptr : 0, made = is_allocation(e->op) ? made_addr(e) : 0;
    place(e, key->thread);
    wake(p, freed);
    if (made != freed) wake(p, made);
}

static int merge_crowded(tick_merge *m, park_table *p, trace_data *t, const order_key *keys, size_t lo, size_t hi,
                         uint32_t nruns) {
    merge_index(m, t, keys, lo, hi, nruns);
    if (nruns > p->runs_cap) {
        p->runs_cap = nruns;
        p->next = grow_or_die(p->next, nruns * sizeof *p->next);
        p->ready = grow_or_die(p->ready, nruns * sizeof *p->ready);
        p->on = grow_or_die(p->on, nruns * sizeof *p->on);
    }
    size_t cap = 16;
    while (cap < 4 * (size_t)nruns) cap *= 2;
    if (cap > p->cap) {
        p->cap = cap;
        p->key = grow_or_die(p->key, cap * sizeof *p->key);
        p->first = grow_or_die(p->first, cap * sizeof *p->first);
    }
    memset(p->key, 0, p->cap * sizeof *p->key);
    memset(p->on, 0, nruns * sizeof *p->on);
    p->used = 0;
    p->nready = 0;
    for (uint32_t r = nruns; r-- > 0;) p->ready[p->nready++] = r;     /* run 0 drains first */
    size_t budget = MERGE_WORK_PER_EVENT * (hi - lo) + 256, left = hi - lo;
    uint32_t stuck_from = 0;
    while (left) {
        uint32_t u;
        if (p->nready) u = p->ready[--p->nready];
        else {                                  /* everyone waits: the first unfinished run goes on */
            while (m->head[stuck_from] == m->end[stuck_from]) { stuck_from++; m->work++; }
            u = stuck_from;
            unpark(p, u);
            place_and_wake(p, t, &keys[m->head[u]++]);
            left--;
        }
        while (m->head[u] < m->end[u]) {
            uint64_t waits_on = head_blocker(m, t, keys, u);
            if (m->work > budget) return 0;
            if (waits_on) { park(p, u, waits_on, nruns); break; }
            place_and_wake(p, t, &keys[m->head[u]++]);
            left--;
        }
    }
    return 1;
}

/* Global order in O(n log n): sort by (time, thread, index), so each thread's events keep their
 * recorded order, and walk it once. Within a clock tick holding several threads' events their
 * runs are merged: frees and reallocs first, then by thread, except that an event whose address
 * another thread has yet to free (or to make, for a free) in the tick waits for it (merge_tick).
 * A tick of more than MERGE_MAX_RUNS threads is merged by the same rules with runs parked on the
 * address they wait for (merge_crowded). A tick whose merge exceeds its search budget (hostile
 * input) is ordered by_time instead (place_by_rank), which may break a thread's order inside the
 * tick but keeps the cost bounded. */
static void prepare(trace_data *t) {
    order_key *keys = malloc((t->nevents + 1) * sizeof *keys);
    order_key *rest = NULL;        /* a crowded tick's unplaced events (grown to the largest) */
    size_t rest_cap = 0;
    global = malloc((t->nevents + 1) * sizeof *global);
    uint8_t *used = calloc(t->nevents + 1, 1);
    if (!keys || !global || !used) { fprintf(stderr, "replay: out of memory ordering %zu events\n", t->nevents); exit(5); }
    size_t k = 0;
    for (uint32_t i = 0; i < t->nthreads; i++)
        for (size_t j = 0; j < t->threads[i].n; j++) {
            uint8_t op = t->threads[i].ev[j].op;
            keys[k++] = (order_key){t->threads[i].ev[j].ts, i, (uint32_t)j, (uint8_t)(op == OP_FREE || op == OP_REALLOC ? 0 : 1)};
        }
    qsort(keys, k, sizeof *keys, by_thread_order);
    ahead.t = t;
    ahead.base = malloc((t->nthreads + 1) * sizeof *ahead.base);
    ahead.next = calloc(t->nthreads + 1, sizeof *ahead.next);
    ahead.placed = calloc(t->nevents + 1, 1);
    ahead.rel = NULL;
    ahead.nrel = 0;
    if (!ahead.base || !ahead.next || !ahead.placed) { fprintf(stderr, "replay: out of memory ordering %zu events\n", t->nevents); exit(5); }
    size_t at = 0;
    for (uint32_t i = 0; i < t->nthreads; at += t->threads[i].n, i++) ahead.base[i] = at;
    tick_index tick = {0};
    tick_merge merge = {0};
    park_table parking = {0};
    for (size_t lo = 0, hi; lo < k; lo = hi) {
        uint32_t nruns = 1;
        for (hi = lo + 1; hi < k && keys[hi].ts == keys[lo].ts; hi++) nruns += keys[hi].thread != keys[hi - 1].thread;
        size_t nrest = 0;
        if (nruns == 1) {
            for (size_t g = lo; g < hi; g++) place(&t->threads[keys[g].thread].ev[keys[g].idx], keys[g].thread);
            continue;
        }
        if (hi - lo > rest_cap) {
            rest_cap = hi - lo;
            free(rest);
            if (!(rest = malloc(rest_cap * sizeof *rest))) { fprintf(stderr, "replay: out of memory ordering the trace\n"); exit(5); }
        }
        if (!(nruns > MERGE_MAX_RUNS ? merge_crowded(&merge, &parking, t, keys, lo, hi, nruns)
                                     : merge_tick(&merge, t, keys, lo, hi, nruns))) {
            for (uint32_t u = 0; u < nruns; u++)
                for (size_t g = merge.head[u]; g < merge.end[u]; g++) rest[nrest++] = keys[g];
        }
        if (nrest) {
            qsort(rest, nrest, sizeof *rest, by_time);
            memset(used, 0, nrest);
            place_by_rank(t, rest, nrest, used, &tick);
        }
    }
    free(merge.head);
    free(merge.end);
    free(ahead.base);
    free(ahead.next);
    free(ahead.placed);
    free(ahead.rel);
    ahead.placed = NULL;
    free(parking.key);
    free(parking.first);
    free(parking.next);
    free(parking.ready);
    free(parking.on);
    free(merge.made);
    free(merge.freed);
    free(tick.made);
    free(tick.cursor);
    free(keys);
    free(rest);
    free(used);
    free(seq);
}

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

typedef struct {
    cop *ops;
    uint64_t *due;                  /* per op, only when the timing is kept (speed > 0) */
    size_t n;
    uint32_t nslots;                /* the most private objects this thread holds at once */
    uint32_t chunk_next, chunk_left;   /* preprocessing: this thread's current chunk of shared objects */
    _Atomic int64_t live;           /* requested bytes this thread's ops added (one writer) */
    uint64_t waits, sleeps;         /* shared ops that found the object's turn not yet come; futex sleeps */
    double waited;                  /* seconds spent in those waits */
    char pad[64];                   /* no two threads' counters on one cache line */
} rthread;

static object *shared;
static uint32_t nshared;
static rthread *rthreads;
static uint32_t nrunners;           /* threads executing: nrthreads, or 1 for --direct */
static size_t nshared_ops;
static uint32_t nshared_objects;    /* nshared counts the chunks' unused places too */

/* Shared objects are numbered in chunks of 8 per creating thread (8 x 24 bytes = 3 cache lines,
 * the array 64-byte aligned), so two threads' new objects never share a cache line. */
#define SHARED_CHUNK 8u
_Static_assert(SHARED_CHUNK * sizeof(object) % 64 == 0, "a chunk must fill whole cache lines");
#define UNSET UINT32_MAX
#define MIXED (UINT32_MAX - 1)

/* Turn `global` into per-runner arrays of compact ops (a runner is a recorded thread, or the one
 * thread of --direct), classifying objects as private or shared on the way. Frees `global`. */
static void compile_ops(int direct) {
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

/* ---- limits (docs/trace-format.md, "Limits") ---- */
typedef struct {
    double max_gap, max_duration;      /* replay seconds */
    uint64_t max_alloc, max_live;
    uint32_t max_threads;
} limits;

typedef struct { uint64_t peak_live, largest; double schedule_s; size_t gaps_shortened; } plan;

/* The replay schedule: each op's due time (ns of recorded time), every idle gap longer than
 * max_gap replay seconds shortened to it. */
static plan schedule(const limits *lim) {
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
static int check_limits(const limits *lim, const plan *p, int threaded) {
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

static void publish_live(void);

/* User + system CPU seconds of the whole process (all threads). */
static double cpu_seconds(void) {
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
static void publish_live(void) {
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
static int run_threads(void) {
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

static int info(size_t points) {
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

/* ---- options: every number checked, unknown options refused ---- */
static int bad_usage(const char *what) {
    fprintf(stderr, "replay: %s\n", what);
    return 2;
}

static int opt_number(const char *name, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s %s: give a number from %g to %g", name, text, lo, hi);
        bad_usage(msg);
        return -1;
    }
    *out = v;
    return 0;
}

static uint64_t default_max_live(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return DEFAULT_MAX_LIVE_CAP;
    uint64_t three_quarters = (uint64_t)pages / 4 * 3 * (uint64_t)page;
    return three_quarters < DEFAULT_MAX_LIVE_CAP ? three_quarters : DEFAULT_MAX_LIVE_CAP;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        return bad_usage("usage: replay FILE [--speed X] [--info | --check | --serial | --direct] [--points N] [--max-gap S] "
                         "[--max-duration S] [--max-threads N] [--max-alloc BYTES] [--max-live BYTES] [--linger S]");
    limits lim = {DEFAULT_MAX_GAP, DEFAULT_MAX_DURATION, DEFAULT_MAX_ALLOC, default_max_live(), DEFAULT_MAX_THREADS};
    double points_d = 200, linger = 0, v;
    int mode_info = 0, mode_serial = 0, mode_direct = 0, mode_check = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--info")) mode_info = 1;
        else if (!strcmp(a, "--serial")) mode_serial = 1;
        else if (!strcmp(a, "--direct")) mode_direct = 1;
        else if (!strcmp(a, "--check")) mode_check = 1;
        else if (i + 1 < argc && !strcmp(a, "--speed")) { if (opt_number(a, argv[++i], 0, 1e9, &speed)) return 2; }
        else if (i + 1 < argc && !strcmp(a, "--points")) { if (opt_number(a, argv[++i], 1, 100000, &points_d)) return 2; }
        else if (i + 1 < argc && !strcmp(a, "--linger")) { if (opt_number(a, argv[++i], 0, 1e8, &linger)) return 2; }
        else if (i + 1 < argc && !strcmp(a, "--max-gap")) { if (opt_number(a, argv[++i], 0.001, 1e8, &lim.max_gap)) return 2; }
        else if (i + 1 < argc && !strcmp(a, "--max-duration")) { if (opt_number(a, argv[++i], 0.001, 1e9, &lim.max_duration)) return 2; }
        else if (i + 1 < argc && !strcmp(a, "--max-threads")) {
            if (opt_number(a, argv[++i], 1, TRACE_MAX_THREADS, &v)) return 2;
            lim.max_threads = (uint32_t)v;
        } else if (i + 1 < argc && !strcmp(a, "--max-alloc")) {
            if (opt_number(a, argv[++i], 1, (double)TRACE_MAX_SIZE, &v)) return 2;
            lim.max_alloc = (uint64_t)v;
        } else if (i + 1 < argc && !strcmp(a, "--max-live")) {
            if (opt_number(a, argv[++i], 1, 1e15, &v)) return 2;
            lim.max_live = (uint64_t)v;
        } else {
            char msg[120];
            snprintf(msg, sizeof msg, "unknown or incomplete option %.60s", a);
            return bad_usage(msg);
        }
    }
    if (mode_info + mode_serial + mode_direct + mode_check > 1) return bad_usage("give at most one of --info, --check, --serial, --direct");
    size_t points = (size_t)points_d;
    {
        uint64_t r = 0;
        FILE *u = fopen("/dev/urandom", "rb");
        if (!u || fread(&r, sizeof r, 1, u) != 1) r = (uint64_t)wl_now() * 0x9e3779b97f4a7c15ULL;
        if (u) fclose(u);
        hash_seed = r;
    }
    trace_data t;
    if (trace_read_file(argv[1], &t) != 0) {
        fprintf(stderr, "replay: %s: %s\n", argv[1], t.error);
        trace_data_free(&t);
        return 3;
    }
    trace_pid = t.pid;
    trace_start_ns = t.start_realtime_ns;
    trace_events = t.nevents;
    trace_truncated = t.truncated_bytes;
    nrthreads = t.nthreads;
    prepare(&t);
    trace_data_free(&t);
    free(table);                    /* addresses are objects now */
    table = NULL;
    table_cap = table_len = 0;
    if (mode_info) return info(points);
    plan p = schedule(&lim);
    int threaded = !mode_serial && !mode_direct;
    int rc = check_limits(&lim, &p, threaded || mode_check);
    if (rc) return rc;
    if (mode_check) {
        printf("{\"ok\": true, \"threads\": %u, \"operations\": %zu, \"schedule_s\": %.6f, \"gaps_shortened\": %zu, "
               "\"peak_live_bytes\": %llu, \"largest_request\": %llu}\n", nrthreads, nglobal, p.schedule_s, p.gaps_shortened,
               (unsigned long long)p.peak_live, (unsigned long long)p.largest);
        return 0;
    }
    if (mode_serial) {
        objects = calloc(nobjects ? nobjects : 1, sizeof *objects);
        if (!objects) { fprintf(stderr, "replay: out of memory for %u objects\n", nobjects); exit(5); }
        uint64_t *ts, *vals;
        size_t n;
        curve_points(points, &ts, &vals, &n, 1);
        printf("{");
        print_curve("live_curve", ts, vals, n);
        printf("}\n");
        return 0;
    }
    compile_ops(mode_direct);
    wl_start_publisher();
    atomic_store(&wl_phase, WL_LOAD);
    double t0 = wl_now(), cpu0 = cpu_seconds();
    start_time = t0;
    if (mode_direct) {
        execute(&rthreads[0], 0, 1);
        publish_live();
    } else if ((rc = run_threads()) != 0) {
        wl_stop_publisher();
        return rc;
    }
    double secs = wl_now() - t0, cpu = cpu_seconds() - cpu0;
    atomic_store(&wl_phase, WL_IDLE);
    uint64_t ops = atomic_load(&wl_ops), waits = 0, sleeps = 0;
    double waited = 0;
    for (uint32_t i = 0; i < nrunners; i++) { waits += rthreads[i].waits; sleeps += rthreads[i].sleeps; waited += rthreads[i].waited; }
    printf("{\"mode\": \"%s\", \"threads\": %u, \"operations\": %llu, \"seconds\": %.6f, \"ops_per_s\": %.1f, "
           "\"cpu_seconds\": %.6f, \"live_bytes_end\": %llu, \"untracked_frees\": %zu, \"gaps_shortened\": %zu, "
           "\"objects\": %u, \"shared_objects\": %u, \"shared_ops\": %zu, \"waits\": %llu, \"sleeps\": %llu, \"waited_s\": %.6f}\n",
           mode_direct ? "direct" : "threads", nrthreads, (unsigned long long)ops, secs, secs > 0 ? (double)ops / secs : 0.0, cpu,
           (unsigned long long)atomic_load(&wl_live_bytes), untracked, p.gaps_shortened, nobjects, nshared_objects, nshared_ops,
           (unsigned long long)waits, (unsigned long long)sleeps, waited);
    fflush(stdout);
    /* stay alive while alloclab samples an idle tail, if asked */
    wl_sleep(linger);
    wl_stop_publisher();
    return 0;
}
