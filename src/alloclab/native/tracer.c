/* tracer — alloclab's allocation recorder, loaded with LD_PRELOAD (liballoclab_trace.so).
 *
 * Interposes malloc, calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and malloc_usable_size; forwards every call to the next allocator in the chain
 * (RTLD_NEXT), so a program can be recorded under any allocator.
 *
 * The calling thread only appends a fixed 32-byte record (a TSC read, the pointer, size and
 * operation) to its own chunk (mmap()ed, so recording never allocates through the hooks). A full
 * chunk goes to a queue; one writer thread turns chunks into blocks of the format (trace_format.h:
 * timestamps converted to ticks, columns, frees by number, allocations by reuse: trace_encode.h),
 * compresses them with zstd (a frame per column) and writes
 * each block with one write() to $ALLOCLAB_TRACE_FILE. Timestamps: the TSC (rdtsc) when the CPU
 * says it is invariant, calibrated against CLOCK_MONOTONIC by the writer (the calibration only
 * improves with time; the header records the final frequency); CLOCK_MONOTONIC otherwise, or with
 * ALLOCLAB_TRACE_CLOCK=monotonic.
 *
 * Nothing is lost at:
 *  - dynamic-loader bootstrap: while dlsym() resolves the real functions it may itself call calloc;
 *    those calls are served from a static arena and never recorded or passed on;
 *  - fork: the child stops recording (it shares the parent's file; a child trace would interleave);
 *    the parent's chunks stay its own;
 *  - thread exit: a pthread key destructor appends THREAD_EXIT and queues the thread's chunk;
 *  - exit: a destructor queues every thread's partial chunk and waits for the writer to drain;
 *  - death by a signal whose action was the default (TERM, HUP, QUIT, ABRT, SEGV, BUS, FPE, ILL,
 *    PIPE, ALRM, USR1, USR2; not INT, see fatal_signals): a handler drains the same way, then dies
 *    of the signal;
 *  - kill -9: every block written so far is whole (one write() each), so the file reads up to its
 *    last written block; only the chunks still in memory are lost.
 */
#include "trace_encode.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define CHUNK_EVENTS 32768u          /* 1 MiB of records per chunk = one block */
#define MAX_QUEUED 48                /* chunks waiting for the writer before callers wait (48 MiB) */
#define SIZE_MASK ((1ull << 56) - 1)

typedef struct {
    uint64_t t;                      /* TSC or CLOCK_MONOTONIC ns */
    uint64_t ptr;                    /* the address; realloc: the old one */
    uint64_t size_op;                /* size | op << 56 */
    uint64_t aux;                    /* realloc: the new address; memalign: the alignment */
} rec;

typedef struct chunk {
    rec r[CHUNK_EVENTS];
    _Atomic uint32_t n;              /* records complete (published after each is written) */
    uint32_t thread;
    _Atomic int queued;              /* handed to the writer: by its thread, or by a drain */
    struct chunk *next;
} chunk;

typedef struct tstate {
    chunk *cur;
    uint32_t thread;
    struct tstate *next;             /* all live threads, for the drains */
} tstate;

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);
static size_t (*real_usable)(void *);

static int out_fd = -1;
static int write_errno;             /* the first failed write (ENOSPC...): nothing more is written, the file is never marked complete */
static _Atomic int enabled;
static int use_tsc;
static uint64_t start_mono, start_tsc;
static _Atomic uint32_t next_thread;
static pthread_key_t exit_key;
static int level = 1;                /* zstd level ($ALLOCLAB_TRACE_LEVEL): the columns are mostly varints; 3 saved 1% for more writer CPU */
static TLS tstate *mine;
static TLS int busy;                 /* inside our own code (or the writer thread): do not record */

/* queue (FIFO) and pool of chunks, live threads: one lock, taken once per chunk */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER, q_space = PTHREAD_COND_INITIALIZER;
static chunk *q_head, *q_tail, *pool;
static int q_len;
static tstate *threads;
static pthread_t writer;
static _Atomic int drain_request, drained;

/* ---- bootstrap arena for allocations made while dlsym() runs ---- */
static _Alignas(16) char boot_arena[64 << 10];
static _Atomic size_t boot_used;
static TLS int resolving;

static int from_boot(const void *p) { return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena; }
static void *boot_alloc(size_t n) {
    size_t need = ((n + 15) & ~(size_t)15) + 16;
    size_t at = atomic_fetch_add(&boot_used, need);
    if (at + need > sizeof boot_arena) return NULL;
    *(size_t *)(boot_arena + at) = n;
    return boot_arena + at + 16;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t stamp(void) {
#ifdef ALLOCLAB_TRACE_FAKE_CLOCK    /* benchmarks/recorder_floor.py only: recording without the clock read */
    static TLS uint64_t fake;
    return fake += 64;
#endif
#if HAVE_TSC
    if (LIKELY(use_tsc)) return __rdtsc();
#endif
    return mono_ns();
}

static int tsc_invariant(void) {
#if HAVE_TSC
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007) return 0;
    __get_cpuid(0x80000007, &a, &b, &c, &d);
    return (d >> 8) & 1;              /* "invariant TSC": constant rate, runs in every C-state */
#else
    return 0;
#endif
}

static void resolve(void) {
    resolving = 1;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    real_valloc = dlsym(RTLD_NEXT, "valloc");
    real_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    real_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
    resolving = 0;
}

/* ---- chunks ---- */
static chunk *chunk_get(uint32_t thread) {        /* q_lock held */
    chunk *c = pool;
    if (c) pool = c->next;
    else {
        c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c == MAP_FAILED) return NULL;
    }
    atomic_store_explicit(&c->n, 0, memory_order_relaxed);
    atomic_store_explicit(&c->queued, 0, memory_order_relaxed);
    c->thread = thread;
    c->next = NULL;
    return c;
}

static void enqueue(chunk *c) {                   /* q_lock held */
    c->next = NULL;
    if (q_tail) q_tail->next = c; else q_head = c;
    q_tail = c;
    q_len++;
    pthread_cond_signal(&q_work);
}

/* q_lock taken by a recording thread with the fatal signals held back: their handler drains on
 * the thread it interrupts, and would wait for a writer that waits for this lock. */
static sigset_t fatal_set;
static void q_lock_recording(sigset_t *old) {
    pthread_sigmask(SIG_BLOCK, &fatal_set, old);
    pthread_mutex_lock(&q_lock);
}
static void q_unlock_recording(const sigset_t *old) {
    pthread_mutex_unlock(&q_lock);
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* A full chunk: queue it (unless a drain already did) and take a fresh one. */
static void hand_off(tstate *s) {
    chunk *c = s->cur;
    sigset_t old;
    q_lock_recording(&old);
    if (!atomic_exchange(&c->queued, 1)) enqueue(c);
    while (q_len >= MAX_QUEUED && atomic_load(&enabled)) pthread_cond_wait(&q_space, &q_lock);
    s->cur = chunk_get(s->thread);
    q_unlock_recording(&old);
}

static tstate *thread_state(void) {
    tstate *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) return NULL;
    s->thread = atomic_fetch_add(&next_thread, 1) + 1;
    sigset_t old;
    q_lock_recording(&old);
    s->cur = chunk_get(s->thread);
    s->next = threads;
    threads = s;
    q_unlock_recording(&old);
    if (!s->cur) { munmap(s, sizeof *s); return NULL; }   /* stays listed with no chunk: skipped */
    mine = s;
    pthread_setspecific(exit_key, s);
    return s;
}

/* Append one record. The caller takes t (after an allocation returns, before a free is passed on). */
static inline void record(uint64_t t, unsigned op, uint64_t size, const void *ptr, uint64_t aux) {
    if (UNLIKELY(!atomic_load_explicit(&enabled, memory_order_relaxed) || busy || resolving)) return;
    tstate *s = mine;
    if (UNLIKELY(!s)) {
        busy++;
        s = thread_state();
        busy--;
        if (!s) return;
    }
    chunk *c = s->cur;
    if (UNLIKELY(!c)) return;
    uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
    rec *r = &c->r[n];
    r->t = t;
    r->ptr = (uint64_t)(uintptr_t)ptr;
    r->size_op = (size & SIZE_MASK) | (uint64_t)op << 56;
    r->aux = aux;
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    if (UNLIKELY(n + 1 == CHUNK_EVENTS)) {
        busy++;
        hand_off(s);
        busy--;
    }
}

/* ---- the writer thread: chunks -> blocks ---- */
static double ticks_per_unit;         /* TSC cycles (or ns) -> TRACE_TICK_NS ticks */
static uint64_t tsc_hz;
static ZSTD_CCtx *cctx;
static uint8_t *cols_buf, *out_buf;
static trace_encoder enc;             /* enc.broken: out of memory in the live table: stop writing (the reader would diverge) */
static size_t out_cap;

#define COL_CAP(per_event) ((size_t)CHUNK_EVENTS * (per_event))

static void write_all(const uint8_t *p, size_t n) {
    while (n && !write_errno) {
        ssize_t w = write(out_fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; write_errno = errno ? errno : EIO; return; }
        if (w == 0) { write_errno = ENOSPC; return; }
        p += w;
        n -= (size_t)w;
    }
}

/* The TSC's rate against CLOCK_MONOTONIC since the start: the longer the baseline, the better. */
static void calibrate(void) {
    if (!use_tsc) { ticks_per_unit = 1.0 / TRACE_TICK_NS; return; }
    uint64_t c0 = __rdtsc(), m = mono_ns(), c1 = __rdtsc();
    uint64_t cycles = (c0 + (c1 - c0) / 2) - start_tsc, ns = m - start_mono;
    if (ns > 0 && cycles > 0) {
        ticks_per_unit = (double)ns / (double)cycles / TRACE_TICK_NS;
        tsc_hz = (uint64_t)((double)cycles * 1e9 / (double)ns);
    }
}

static uint64_t to_ticks(uint64_t t) {
    uint64_t base = use_tsc ? start_tsc : start_mono;
    return t > base ? (uint64_t)((double)(t - base) * ticks_per_unit) : 0;
}

/* The last tick written for each thread: the calibration improves between blocks, and a thread's
 * times must never go back across one (the replayer orders by time). */
static uint64_t *thread_last;
static size_t thread_last_cap;
static uint64_t *last_tick_of(uint32_t thread) {
    if (thread >= thread_last_cap) {
        size_t cap = thread_last_cap ? thread_last_cap : 64;
        while (cap <= thread) cap *= 2;
        uint64_t *g = realloc(thread_last, cap * sizeof *g);
        if (!g) return NULL;
        memset(g + thread_last_cap, 0, (cap - thread_last_cap) * sizeof *g);
        thread_last = g;
        thread_last_cap = cap;
    }
    return &thread_last[thread];
}

static void encode_chunk(chunk *c) {
    uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
    if (!n || out_fd < 0) return;
    if (use_tsc) {                     /* a baseline of at least 20 ms before the first conversion */
        uint64_t since = mono_ns() - start_mono;
        if (since < 20000000) {
            struct timespec w = {0, (long)(20000000 - since)};
            nanosleep(&w, NULL);
        }
    }
    calibrate();
    uint64_t *thread_floor = last_tick_of(c->thread), floor_ts = thread_floor ? *thread_floor : 0;
    static const size_t cap[TRACE_COLUMNS] = {COL_CAP(1), COL_CAP(1), COL_CAP(10), COL_CAP(2), COL_CAP(20), COL_CAP(20), COL_CAP(1),
                                              COL_CAP(10), COL_CAP(10)};
    if (enc.broken) return;
    enc_begin(&enc, cols_buf, cap);
    uint64_t first = to_ticks(c->r[0].t);
    if (first < floor_ts) first = floor_ts;
    uint64_t last_ts = first;
    for (uint32_t i = 0; i < n; i++) {
        const rec *r = &c->r[i];
        unsigned op = (unsigned)(r->size_op >> 56);
        uint64_t ts = to_ticks(r->t);
        uint64_t dt = ts > last_ts ? ts - last_ts : 0;
        if (ts > last_ts) last_ts = ts;
        enc_event(&enc, op, dt, r->size_op & SIZE_MASK, op == OP_MEMALIGN ? r->aux : 0, r->ptr,
                  op == OP_REALLOC ? r->aux : 0);
    }
    if (thread_floor) *thread_floor = last_ts;
    size_t len = enc_pack(&enc, cctx, level, out_buf, out_cap, c->thread, n, first);
    if (len) write_all(out_buf, len);                  /* one write: a kill -9 leaves whole blocks */
}

/* Queue every thread's partial chunk (exit or a fatal signal). */
static void queue_partials(void) {
    for (tstate *s = threads; s; s = s->next)
        if (s->cur && atomic_load(&s->cur->n) && !atomic_exchange(&s->cur->queued, 1)) enqueue(s->cur);
}

static void *writer_main(void *arg) {
    (void)arg;
    busy = 1;                          /* zstd's own allocations are not the program's */
    for (;;) {
        pthread_mutex_lock(&q_lock);
        while (!q_head && !atomic_load(&drain_request)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 20000000;
            if (until.tv_nsec >= 1000000000) { until.tv_sec++; until.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&q_work, &q_lock, &until);
        }
        int draining = atomic_load(&drain_request);
        if (draining) queue_partials();
        chunk *c = q_head;
        if (c) {
            q_head = c->next;
            if (!q_head) q_tail = NULL;
            q_len--;
            pthread_cond_broadcast(&q_space);
        }
        pthread_mutex_unlock(&q_lock);
        if (c) {
            encode_chunk(c);
            pthread_mutex_lock(&q_lock);
            c->next = pool;             /* a partial chunk drained at exit is never reused */
            if (!draining) pool = c;
            pthread_mutex_unlock(&q_lock);
        } else if (draining) {
            if (use_tsc) {              /* the calibration, as it finally stood */
                uint8_t hz[8];
                put_u64(hz, tsc_hz);
                (void)!pwrite(out_fd, hz, 8, 40);
            }
            uint8_t fl[4];              /* finished: from now on a cut file is corrupt, not killed */
            if (write_errno) {          /* a block was lost (disk full): say why, never claim complete */
                put_u32(fl, (uint32_t)write_errno);
                (void)!pwrite(out_fd, fl, 4, TRACE_WRITE_ERRNO_AT);
            } else {
                put_u32(fl, TRACE_ZSTD | (use_tsc ? TRACE_TSC : 0) | TRACE_COMPLETE);
                (void)!pwrite(out_fd, fl, 4, 12);
            }
            atomic_store(&drained, 1);
            atomic_store(&drain_request, 0);
        }
    }
    return NULL;
}

/* Stop recording and wait (up to a limit of wall time: on a loaded machine a 1 ms sleep can take
 * several, so counting sleeps would stretch the limit) until the writer has written everything. */
static void drain(double seconds) {
    if (!atomic_exchange(&enabled, 0)) return;
    atomic_store(&drained, 0);
    atomic_store(&drain_request, 1);
    struct timespec tick = {0, 1000000};
    uint64_t until = mono_ns() + (uint64_t)(seconds * 1e9);
    while (!atomic_load(&drained) && mono_ns() < until) nanosleep(&tick, NULL);
}

/* Not SIGINT: Python (and others) install their own SIGINT handler only when they find the
 * default one, so taking it would change how a recorded program reacts to Ctrl-C. */
static const int fatal_signals[] = {SIGHUP, SIGQUIT, SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGPIPE,
                                    SIGALRM, SIGTERM, SIGUSR1, SIGUSR2};

static void on_fatal(int sig) {
    if (!pthread_equal(pthread_self(), writer)) drain(10);
    signal(sig, SIG_DFL);
    raise(sig);                        /* synchronous faults re-fault on return, with the default action */
}

static void thread_done(void *arg) {
    tstate *s = arg;
    if (!s || !atomic_load(&enabled)) return;
    busy++;
    chunk *c = s->cur;
    if (c) {
        uint32_t n = atomic_load(&c->n);
        c->r[n] = (rec){stamp(), 0, (uint64_t)OP_THREAD_EXIT << 56, 0};
        atomic_store_explicit(&c->n, n + 1, memory_order_release);
    }
    sigset_t old;
    q_lock_recording(&old);
    if (c && !atomic_exchange(&c->queued, 1)) enqueue(c);
    for (tstate **at = &threads; *at; at = &(*at)->next)   /* forget the thread: threads come and go */
        if (*at == s) { *at = s->next; break; }
    q_unlock_recording(&old);
    mine = NULL;
    munmap(s, sizeof *s);
    busy--;
}

static void at_fork_child(void) { atomic_store(&enabled, 0); }

__attribute__((constructor)) static void tracer_init(void) {
    if (!real_malloc) resolve();
    const char *path = getenv("ALLOCLAB_TRACE_FILE");
    if (!path || !*path) return;
    const char *lvl = getenv("ALLOCLAB_TRACE_LEVEL");
    if (lvl && *lvl) level = atoi(lvl);
    const char *clk = getenv("ALLOCLAB_TRACE_CLOCK");
    use_tsc = tsc_invariant() && !(clk && strcmp(clk, "monotonic") == 0);
    out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) return;
    busy++;
    out_cap = ZSTD_compressBound(COL_CAP(81)) + TRACE_COLUMNS * (8 + ZSTD_compressBound(0)) + TRACE_BLOCK_HEADER_SIZE;
    size_t need = COL_CAP(81) + out_cap;
    cols_buf = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cctx = ZSTD_createCCtx();
    busy--;
    if (cols_buf == MAP_FAILED || !cctx) { close(out_fd); out_fd = -1; return; }
    out_buf = cols_buf + COL_CAP(81);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    start_mono = mono_ns();
#if HAVE_TSC
    if (use_tsc) start_tsc = __rdtsc();
#endif
    uint8_t h[TRACE_HEADER_SIZE] = {0};
    memcpy(h, TRACE_MAGIC, 8);
    put_u32(h + 8, TRACE_VERSION);
    put_u32(h + 12, TRACE_ZSTD | (use_tsc ? TRACE_TSC : 0));
    put_u64(h + 16, (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec);
    put_u64(h + 24, start_mono);
    put_u32(h + 32, (uint32_t)getpid());
    put_u32(h + 36, TRACE_TICK_NS);
    write_all(h, sizeof h);
    pthread_key_create(&exit_key, thread_done);
    pthread_atfork(NULL, NULL, at_fork_child);
    sigset_t all, old;                 /* the writer takes no signals: a handler must never wait on itself */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    busy++;
    int rc = pthread_create(&writer, NULL, writer_main, NULL);
    busy--;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) { close(out_fd); out_fd = -1; return; }
    sigemptyset(&fatal_set);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) sigaddset(&fatal_set, fatal_signals[i]);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) {
        struct sigaction cur;
        if (sigaction(fatal_signals[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
            struct sigaction sa = {0};
            sa.sa_handler = on_fatal;
            sa.sa_flags = SA_RESETHAND | SA_NODEFER;
            sigemptyset(&sa.sa_mask);
            sigaction(fatal_signals[i], &sa, NULL);
        }
    }
    atomic_store(&enabled, 1);
}

__attribute__((destructor)) static void tracer_fini(void) {
    busy++;
    drain(60);                         /* a thread still mid-event at exit loses that one event */
    busy--;
}

/* ---- the interposed functions ---- */
#define ENSURE() do { if (!real_malloc) { if (resolving) break; resolve(); } } while (0)

EXPORT void *malloc(size_t n) {
    if (UNLIKELY(!real_malloc)) { if (resolving) return boot_alloc(n); resolve(); }
    void *p = real_malloc(n);
    if (LIKELY(p != NULL)) record(stamp(), OP_MALLOC, n, p, 0);
    return p;
}

EXPORT void *calloc(size_t n, size_t m) {
    if (!real_calloc) { if (resolving) return boot_alloc(n * m); resolve(); }
    void *p = real_calloc(n, m);
    if (p) record(stamp(), OP_CALLOC, (uint64_t)n * m, p, 0);
    return p;
}

EXPORT void free(void *p) {
    if (UNLIKELY(!p || from_boot(p))) return;
    ENSURE();
    record(stamp(), OP_FREE, 0, p, 0);
    real_free(p);
}

EXPORT void *realloc(void *p, size_t n) {
    if (p && from_boot(p)) {                    /* move a bootstrap block to the real allocator */
        void *q = malloc(n);
        if (q) memcpy(q, p, *(size_t *)((char *)p - 16) < n ? *(size_t *)((char *)p - 16) : n);
        return q;
    }
    if (!real_realloc) { if (resolving) return boot_alloc(n); resolve(); }
    if (!p) return malloc(n);
    uint64_t before = stamp();
    void *q = real_realloc(p, n);
    if (n == 0 && !q) { record(before, OP_FREE, 0, p, 0); return q; }
    if (q) record(stamp(), OP_REALLOC, n, p, (uint64_t)(uintptr_t)q);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t m) {
    if (m && n > (size_t)-1 / m) { errno = ENOMEM; return NULL; }
    return realloc(p, n * m);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    ENSURE();
    int rc = real_posix_memalign(out, align, n);
    if (rc == 0 && *out) record(stamp(), OP_MEMALIGN, n, *out, align);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n) {
    ENSURE();
    void *p = real_aligned_alloc(align, n);
    if (p) record(stamp(), OP_MEMALIGN, n, p, align);
    return p;
}

EXPORT void *memalign(size_t align, size_t n) {
    ENSURE();
    void *p = real_memalign(align, n);
    if (p) record(stamp(), OP_MEMALIGN, n, p, align);
    return p;
}

EXPORT void *valloc(size_t n) {
    ENSURE();
    void *p = real_valloc(n);
    if (p) record(stamp(), OP_MEMALIGN, n, p, (uint64_t)sysconf(_SC_PAGESIZE));
    return p;
}

EXPORT void *pvalloc(size_t n) {
    ENSURE();
    void *p = real_pvalloc(n);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (p) record(stamp(), OP_MEMALIGN, (n + page - 1) / page * page, p, page);
    return p;
}

EXPORT size_t malloc_usable_size(void *p) {
    if (!p) return 0;
    if (from_boot(p)) return *(size_t *)((char *)p - 16);
    ENSURE();
    return real_usable ? real_usable(p) : 0;
}
