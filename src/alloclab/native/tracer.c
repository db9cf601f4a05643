/* tracer — alloclab's allocation recorder, loaded with LD_PRELOAD (liballoclab_trace.so).
 *
 * Interposes malloc, calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and malloc_usable_size; forwards every call to the next allocator in the chain
 * (RTLD_NEXT), so a program can be recorded under any allocator. Events go to a per-thread buffer
 * (mmap()ed, so recording never allocates through the hooks) and are written, zstd-compressed, a
 * block at a time to $ALLOCLAB_TRACE_FILE. Safe cases:
 *  - dynamic-loader bootstrap: while dlsym() resolves the real functions it may itself call calloc;
 *    those calls are served from a static arena and never recorded or passed on;
 *  - fork: the child stops recording (it shares the parent's file; a child trace would interleave);
 *  - thread exit: a pthread key destructor writes the thread's last block with a THREAD_EXIT event;
 *  - exit: a destructor writes every thread's pending events.
 */
#include "trace_format.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))
#define BUF_SIZE (1u << 20)
#define FLUSH_AT (BUF_SIZE - 64)

typedef struct tbuf {
    uint8_t data[BUF_SIZE];
    size_t len;
    uint32_t thread, events;
    uint64_t first_ts, last_ts, last_ptr;
    struct tbuf *next;          /* all buffers, for the exit flush */
    _Atomic int writing;        /* an event is being appended: the exit flush leaves it alone */
} tbuf;

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
static _Atomic int enabled;
static uint64_t start_mono;
static _Atomic uint32_t next_thread;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static tbuf *all_buffers;
static pthread_key_t exit_key;
static int level = 3;           /* zstd level ($ALLOCLAB_TRACE_LEVEL): 3 measured best bytes/CPU here */
static TLS tbuf *mine;
static TLS int busy;            /* inside our own code: do not record */

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

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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

/* ---- writing blocks ---- */
static void write_all(const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(out_fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return; }
        p += w;
        n -= (size_t)w;
    }
}

/* Split the row-encoded events into the four columns of the format (ops, times, sizes, pointers). */
static size_t to_columns(const tbuf *b, uint8_t *out) {
    const uint8_t *p = b->data, *end = b->data + b->len;
    uint8_t *col[4];
    size_t n[4] = {0};
    size_t cap = b->len;                     /* no column is longer than all the rows */
    for (int c = 0; c < 4; c++) col[c] = out + 4 * (size_t)(c + 1) + cap * (size_t)c;
    while (p < end) {
        uint8_t op = *p++;
        const uint8_t *q;
        uint64_t v;
        int64_t d;
        col[0][n[0]++] = op;
        q = get_varint(p, end, &v); memcpy(col[1] + n[1], p, (size_t)(q - p)); n[1] += (size_t)(q - p); p = q;
        if (op == OP_MEMALIGN) { q = get_varint(p, end, &v); memcpy(col[2] + n[2], p, (size_t)(q - p)); n[2] += (size_t)(q - p); p = q; }
        if (op == OP_MALLOC || op == OP_CALLOC || op == OP_MEMALIGN) {
            q = get_varint(p, end, &v); memcpy(col[2] + n[2], p, (size_t)(q - p)); n[2] += (size_t)(q - p); p = q;
        }
        if (op != OP_THREAD_EXIT) { q = get_svarint(p, end, &d); memcpy(col[3] + n[3], p, (size_t)(q - p)); n[3] += (size_t)(q - p); p = q; }
        if (op == OP_REALLOC) {
            q = get_varint(p, end, &v); memcpy(col[2] + n[2], p, (size_t)(q - p)); n[2] += (size_t)(q - p); p = q;
            q = get_svarint(p, end, &d); memcpy(col[3] + n[3], p, (size_t)(q - p)); n[3] += (size_t)(q - p); p = q;
        }
    }
    size_t at = 0;                           /* pack: length, bytes, length, bytes ... */
    for (int c = 0; c < 4; c++) {
        put_u32(out + at, (uint32_t)n[c]);
        memmove(out + at + 4, col[c], n[c]);
        at += 4 + n[c];
    }
    return at;
}

static void flush_buffer(tbuf *b) {
    if (!b->events || out_fd < 0) { b->len = 0; b->events = 0; return; }
    size_t cols_cap = 4 * b->len + 16;
    uint8_t *cols = mmap(NULL, cols_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cols == MAP_FAILED) return;
    size_t raw_len = to_columns(b, cols);
    size_t bound = ZSTD_compressBound(raw_len);
    uint8_t *z = mmap(NULL, bound + TRACE_BLOCK_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (z == MAP_FAILED) { munmap(cols, cols_cap); return; }
    size_t zn = ZSTD_compress(z + TRACE_BLOCK_HEADER_SIZE, bound, cols, raw_len, level);
    munmap(cols, cols_cap);
    if (!ZSTD_isError(zn)) {
        uint8_t *h = z;
        memset(h, 0, TRACE_BLOCK_HEADER_SIZE);
        put_u32(h, TRACE_BLOCK_MAGIC);
        put_u32(h + 4, (uint32_t)zn);
        put_u32(h + 8, (uint32_t)raw_len);
        put_u32(h + 12, b->thread);
        put_u32(h + 16, b->events);
        put_u64(h + 24, b->first_ts);
        pthread_mutex_lock(&write_lock);
        write_all(z, zn + TRACE_BLOCK_HEADER_SIZE);
        pthread_mutex_unlock(&write_lock);
    }
    munmap(z, bound + TRACE_BLOCK_HEADER_SIZE);
    b->len = 0;
    b->events = 0;
}

static void thread_done(void *arg) {
    tbuf *b = arg;
    if (!b || !atomic_load(&enabled)) return;
    busy++;
    uint64_t ts = (now_ns() - start_mono) / TRACE_TICK_NS;
    if (!b->events) { b->first_ts = b->last_ts = ts; b->last_ptr = 0; }
    uint8_t *p = b->data + b->len;
    *p++ = OP_THREAD_EXIT;
    p = put_varint(p, ts - b->last_ts);
    b->len = (size_t)(p - b->data);
    b->events++;
    flush_buffer(b);
    pthread_mutex_lock(&write_lock);            /* forget the buffer: threads come and go */
    for (tbuf **at = &all_buffers; *at; at = &(*at)->next)
        if (*at == b) { *at = b->next; break; }
    pthread_mutex_unlock(&write_lock);
    mine = NULL;
    munmap(b, sizeof *b);
    busy--;
}

static tbuf *buffer(void) {
    if (mine) return mine;
    tbuf *b = mmap(NULL, sizeof(tbuf), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return NULL;
    b->thread = atomic_fetch_add(&next_thread, 1) + 1;
    pthread_mutex_lock(&write_lock);
    b->next = all_buffers;
    all_buffers = b;
    pthread_mutex_unlock(&write_lock);
    mine = b;
    pthread_setspecific(exit_key, b);
    return b;
}

/* Append one event; ts is taken by the caller (after an allocation, before a free). */
static void record(uint8_t op, uint64_t ts, uint64_t size, const void *ptr, const void *new_ptr, size_t align) {
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || busy || resolving) return;
    busy++;
    tbuf *b = buffer();
    if (b) {
        atomic_store_explicit(&b->writing, 1, memory_order_relaxed);
        ts = (ts - start_mono) / TRACE_TICK_NS;
        if (!b->events) { b->first_ts = b->last_ts = ts; b->last_ptr = 0; }
        uint8_t *p = b->data + b->len;
        *p++ = op;
        p = put_varint(p, ts >= b->last_ts ? ts - b->last_ts : 0);
        b->last_ts = ts > b->last_ts ? ts : b->last_ts;
        uint64_t a = (uint64_t)(uintptr_t)ptr >> 4;
        if (op == OP_MEMALIGN) p = put_varint(p, align);
        if (op != OP_FREE && op != OP_REALLOC) p = put_varint(p, size);
        p = put_svarint(p, (int64_t)(a - b->last_ptr));
        b->last_ptr = a;
        if (op == OP_REALLOC) {
            uint64_t n = (uint64_t)(uintptr_t)new_ptr >> 4;
            p = put_varint(p, size);
            p = put_svarint(p, (int64_t)(n - a));
            b->last_ptr = n;
        }
        b->len = (size_t)(p - b->data);
        b->events++;
        if (b->len >= FLUSH_AT) flush_buffer(b);
        atomic_store_explicit(&b->writing, 0, memory_order_release);
    }
    busy--;
}

static void at_fork_child(void) { atomic_store(&enabled, 0); }

__attribute__((constructor)) static void tracer_init(void) {
    if (!real_malloc) resolve();
    const char *path = getenv("ALLOCLAB_TRACE_FILE");
    if (!path || !*path) return;
    const char *lvl = getenv("ALLOCLAB_TRACE_LEVEL");
    if (lvl && *lvl) level = atoi(lvl);
    out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) return;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    start_mono = now_ns();
    uint8_t h[TRACE_HEADER_SIZE] = {0};
    memcpy(h, TRACE_MAGIC, 8);
    put_u32(h + 8, TRACE_VERSION);
    put_u32(h + 12, TRACE_ZSTD);
    put_u64(h + 16, (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec);
    put_u64(h + 24, start_mono);
    put_u32(h + 32, (uint32_t)getpid());
    put_u32(h + 36, TRACE_TICK_NS);
    write_all(h, sizeof h);
    pthread_key_create(&exit_key, thread_done);
    pthread_atfork(NULL, NULL, at_fork_child);
    atomic_store(&enabled, 1);
}

__attribute__((destructor)) static void tracer_fini(void) {
    if (!atomic_load(&enabled)) return;
    busy++;
    atomic_store(&enabled, 0);                  /* no new events from here on */
    pthread_mutex_lock(&write_lock);
    tbuf *list = all_buffers;
    pthread_mutex_unlock(&write_lock);
    for (tbuf *b = list; b; b = b->next) {
        for (int spin = 0; spin < 1000 && atomic_load(&b->writing); spin++) sched_yield();
        if (!atomic_load(&b->writing)) flush_buffer(b);   /* a thread still mid-event loses its last block */
    }
    busy--;
}

/* ---- the interposed functions ---- */
#define ENSURE() do { if (!real_malloc) { if (resolving) break; resolve(); } } while (0)

EXPORT void *malloc(size_t n) {
    if (!real_malloc) { if (resolving) return boot_alloc(n); resolve(); }
    void *p = real_malloc(n);
    if (p) record(OP_MALLOC, now_ns(), n, p, NULL, 0);
    return p;
}

EXPORT void *calloc(size_t n, size_t m) {
    if (!real_calloc) { if (resolving) return boot_alloc(n * m); resolve(); }
    void *p = real_calloc(n, m);
    if (p) record(OP_CALLOC, now_ns(), (uint64_t)n * m, p, NULL, 0);
    return p;
}

EXPORT void free(void *p) {
    if (!p || from_boot(p)) return;
    ENSURE();
    record(OP_FREE, now_ns(), 0, p, NULL, 0);
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
    uint64_t before = now_ns();
    void *q = real_realloc(p, n);
    if (n == 0 && !q) { record(OP_FREE, before, 0, p, NULL, 0); return q; }
    if (q) record(OP_REALLOC, now_ns(), n, p, q, 0);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t m) {
    if (m && n > (size_t)-1 / m) { errno = ENOMEM; return NULL; }
    return realloc(p, n * m);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    ENSURE();
    int rc = real_posix_memalign(out, align, n);
    if (rc == 0 && *out) record(OP_MEMALIGN, now_ns(), n, *out, NULL, align);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n) {
    ENSURE();
    void *p = real_aligned_alloc(align, n);
    if (p) record(OP_MEMALIGN, now_ns(), n, p, NULL, align);
    return p;
}

EXPORT void *memalign(size_t align, size_t n) {
    ENSURE();
    void *p = real_memalign(align, n);
    if (p) record(OP_MEMALIGN, now_ns(), n, p, NULL, align);
    return p;
}

EXPORT void *valloc(size_t n) {
    ENSURE();
    void *p = real_valloc(n);
    if (p) record(OP_MEMALIGN, now_ns(), n, p, NULL, (size_t)sysconf(_SC_PAGESIZE));
    return p;
}

EXPORT void *pvalloc(size_t n) {
    ENSURE();
    void *p = real_pvalloc(n);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (p) record(OP_MEMALIGN, now_ns(), (n + page - 1) / page * page, p, NULL, page);
    return p;
}

EXPORT size_t malloc_usable_size(void *p) {
    if (!p) return 0;
    if (from_boot(p)) return *(size_t *)((char *)p - 16);
    ENSURE();
    return real_usable ? real_usable(p) : 0;
}
