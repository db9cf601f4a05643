/* replay.h — what the trace replayer's parts share (replay.c is the CLI and describes the program).
 *
 *   replay_order.c  the recorded events in one global order, addresses turned into object ids
 *   replay_exec.c   the replay program: compact per-thread ops, limits, threaded execution
 *   replay_info.c   --info's figures and the live-bytes curves (--info, --serial)
 *   replay.c        options and main
 *
 * The state below is the program's one trace, built once by prepare() and read by the rest. */
#ifndef ALLOCLAB_REPLAY_H
#define ALLOCLAB_REPLAY_H
#include "trace_reader.h"
#include "wl_common.h"
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t ts, due, size;         /* recorded time; time on the replay schedule (ns, gaps capped) */
    uint32_t obj, expect, align, thread;
    uint8_t op;
} rop;                              /* a replay operation on object `obj` (ops on it so far: expect) */

typedef struct { void *p; uint64_t size; _Atomic uint32_t seq, waiting; } object;

/* ---- the trace in global order (replay_order.c) ---- */
extern object *objects;             /* --serial: every object; threaded and --direct use `shared` */
extern uint32_t nobjects;
extern rop *global;                 /* every op in recorded global order */
extern size_t nglobal, untracked;
extern size_t over_live;            /* allocations placed at an address still live */
extern uint32_t nrthreads;
extern uint32_t trace_pid;
extern uint64_t trace_start_ns;
extern size_t trace_events, trace_truncated;
extern uint64_t hash_seed;          /* random per run: a crafted file cannot aim addresses at one slot */

/* Fills `global`, `nobjects` and `untracked` from the trace (which may be freed after). */
void prepare(trace_data *t);
/* Frees the address table prepare() built: addresses are objects now. */
void forget_addresses(void);

/* ---- the replay program (replay_exec.c) ---- */
typedef struct {
    double max_gap, max_duration;      /* replay seconds */
    uint64_t max_alloc, max_live;
    uint32_t max_threads;
} limits;

typedef struct { uint64_t peak_live, largest; double schedule_s; size_t gaps_shortened; } plan;

typedef struct rthread rthread;
extern double speed, start_time;
extern rthread *rthreads;
extern uint32_t nrunners;           /* threads executing: nrthreads, or 1 for --direct */
extern size_t nshared_ops;
extern uint32_t nshared_objects;

plan schedule(const limits *lim);
int check_limits(const limits *lim, const plan *p, int threaded);
void compile_ops(int direct);       /* turns `global` into per-runner ops; frees `global` */
void perform(const rop *r);         /* one op of `global` on `objects` (--serial) */
int run_threads(void);              /* the replay: 0, or 5 if a thread cannot start */
void run_direct(void);              /* --direct: every op on the calling thread */
void publish_live(void);
double cpu_seconds(void);
void wait_totals(uint64_t *waits, uint64_t *sleeps, double *waited);   /* summed over runners */

/* ---- figures (replay_info.c) ---- */
void print_curve(const char *key, uint64_t *t, uint64_t *v, size_t n);
void curve_points(size_t points, uint64_t **ts, uint64_t **vals, size_t *n, int execute);
int info(size_t points);

#endif
