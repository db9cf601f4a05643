/* replay_order.c — the recorded events in one global order: each thread's events keep their order,
 * frees and reallocs of an address come before its reuse, and addresses become object ids with
 * the operations on each counted (the turns of the threaded replay). O(n log n) whatever the file
 * holds (replay.c, "The input is not trusted"). */
#include "replay.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

object *objects;
uint32_t nobjects;
rop *global;
size_t nglobal, untracked;
uint32_t nrthreads;
uint32_t trace_pid;
uint64_t trace_start_ns;
size_t trace_events, trace_truncated;

/* ---- preprocessing: global order, object ids, dependencies ---- */
typedef struct { uint64_t key; uint32_t obj; } slot;
static slot *table;
static size_t table_cap, table_len;

uint64_t hash_seed;
static size_t hash(uint64_t k) { k ^= hash_seed; k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; return (size_t)k; }
static void table_grow(void);
size_t over_live;                  /* allocations placed at an address still live: an order the program could not have run */
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
void prepare(trace_data *t) {
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

void forget_addresses(void) {
    free(table);
    table = NULL;
    table_cap = table_len = 0;
}
