/* introspect — asks the allocator a process runs on for its own account, over time.
 *
 * liballoclab_introspect.so is preloaded AFTER the allocator under test. Its constructor finds,
 * with dlsym(RTLD_DEFAULT), which object serves malloc and which stats API that same object has
 * (jemalloc mallctl, mimalloc mi_stats_print_out/mi_process_info, gperftools
 * MallocExtension_GetNumericProperty, glibc mallinfo2/malloc_info), all before main() so the
 * lookups (dlsym may malloc on failure) happen in the main thread. A helper thread then collects
 * every $ALLOCLAB_INTROSPECT_INTERVAL seconds — slower when a collection costs more than
 * $ALLOCLAB_INTROSPECT_BUDGET of one core — into $ALLOCLAB_INTROSPECT/<pid>-<start ticks>.bin
 * (layout: alloclab_introspect.h).
 *
 * Not perturbing what is measured: the helper thread never calls malloc itself (its record is a
 * shared mapping whose blocks are reserved up front, so a full disk cannot SIGBUS the process;
 * glibc's malloc_info writes to a FILE made in the constructor onto a memfd, buffered in a static
 * buffer), so glibc gives it no arena. jemalloc and mimalloc set up their per-thread state for it
 * on the first stats call (a few KiB, measured: benchmarks/introspect_overhead.py). It blocks
 * every signal, so the program's signal handling is untouched.
 * fork: the child unmaps the parent's record and starts its own helper, which writes its first
 * record one interval later (a child that execs first leaves no file). exec: the new image loads
 * the helper again and rewrites the record of the same (pid, start ticks) from scratch.
 */
#include "alloclab_introspect.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MALLCTL_ARENAS_ALL 4096

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef void mi_output_fn(const char *msg, void *arg);
typedef void (*mi_stats_print_out_fn)(mi_output_fn *out, void *arg);
typedef void (*mi_process_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *);
typedef int (*tc_numeric_fn)(const char *, size_t *);
typedef struct mallinfo2 (*mallinfo2_fn)(void);
typedef int (*malloc_info_fn)(int, FILE *);

static struct {
    uint32_t family;
    mallctl_fn mallctl;
    mi_stats_print_out_fn mi_print;
    mi_process_info_fn mi_info;
    tc_numeric_fn tc_get;
    mallinfo2_fn mallinfo2;
    malloc_info_fn malloc_info;
    char malloc_file[192];
    char dir[512];
    double interval, budget;
} cfg;

static struct alloclab_introspect *rec;   /* this process's record, NULL until the first collection */
static FILE *info_file;                    /* glibc malloc_info output: a memfd, static buffer */
static char info_buf[8192];
static dev_t info_dev;                     /* the memfd's identity: a program that closes every */
static ino_t info_ino;                     /* descriptor may reuse its number for a file of its own */
static pthread_t helper;

static const char *object_of(void *sym) {
    Dl_info info;
    return (sym && dladdr(sym, &info) && info.dli_fname) ? info.dli_fname : NULL;
}

/* A stats function counts only if it lives in the object that serves malloc: an allocator merely
 * loaded beside another one (or linked into the program without exporting malloc) says nothing. */
/* Whether info_file's descriptor is still our memfd (never write into a descriptor the program reused). */
static int info_fd_ours(void) {
    struct stat st;
    return info_file && fstat(fileno(info_file), &st) == 0 && st.st_dev == info_dev && st.st_ino == info_ino;
}

static void remember_info_fd(int fd) {
    struct stat st;
    if (fstat(fd, &st) == 0) {
        info_dev = st.st_dev;
        info_ino = st.st_ino;
    }
}

static void *same_object(const char *name, const char *malloc_obj) {
    void *f = dlsym(RTLD_DEFAULT, name);
    const char *obj = object_of(f);
    return (f && obj && malloc_obj && strcmp(obj, malloc_obj) == 0) ? f : NULL;
}

static void resolve(void) {
    const char *mobj = object_of(dlsym(RTLD_DEFAULT, "malloc"));
    snprintf(cfg.malloc_file, sizeof cfg.malloc_file, "%s", mobj ? mobj : "");
    if ((cfg.mallctl = (mallctl_fn)same_object("mallctl", mobj)) ||
        (cfg.mallctl = (mallctl_fn)same_object("je_mallctl", mobj))) {
        cfg.family = AI_FAMILY_JEMALLOC;
    } else if ((cfg.mi_info = (mi_process_info_fn)same_object("mi_process_info", mobj))) {
        cfg.family = AI_FAMILY_MIMALLOC;
        cfg.mi_print = (mi_stats_print_out_fn)same_object("mi_stats_print_out", mobj);
    } else if ((cfg.tc_get = (tc_numeric_fn)same_object("MallocExtension_GetNumericProperty", mobj))) {
        cfg.family = AI_FAMILY_TCMALLOC;
    } else if ((cfg.mallinfo2 = (mallinfo2_fn)same_object("mallinfo2", mobj))) {
        cfg.family = AI_FAMILY_GLIBC;
        cfg.malloc_info = (malloc_info_fn)same_object("malloc_info", mobj);
    }
}

static uint64_t ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This process's start time in clock ticks (field 22 of /proc/self/stat): with the pid, the
 * identity alloclab knows a process by. */
static long long start_ticks(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    int field = 2;              /* p points at the end of field 2 (comm) */
    for (p++; *p && field < 22; p++)
        if (*p == ' ') field++;
    return strtoll(p, NULL, 10);
}

static struct alloclab_introspect *open_record(void) {
    char path[600];
    long long st = start_ticks();
    if (st < 0 || !cfg.dir[0]) return NULL;
    snprintf(path, sizeof path, "%s/%d-%lld.bin", cfg.dir, (int)getpid(), st);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    /* blocks reserved now: a full disk fails here, not as SIGBUS on a later store */
    if (ftruncate(fd, 0) != 0 || posix_fallocate(fd, 0, sizeof(struct alloclab_introspect)) != 0) {
        close(fd);
        unlink(path);
        return NULL;
    }
    void *m = mmap(NULL, sizeof(struct alloclab_introspect), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return NULL;
    struct alloclab_introspect *r = m;
    r->version = ALLOCLAB_INTROSPECT_VERSION;
    r->family = cfg.family;
    memcpy(r->malloc_file, cfg.malloc_file, sizeof r->malloc_file);
    atomic_store_explicit((_Atomic uint64_t *)&r->magic, ALLOCLAB_INTROSPECT_MAGIC, memory_order_release);
    return r;
}

struct text_sink { char *buf; uint32_t len, cap; };

static void mi_out(const char *msg, void *arg) {
    struct text_sink *s = arg;
    size_t n = strlen(msg);
    if (n > s->cap - s->len) n = s->cap - s->len;
    memcpy(s->buf + s->len, msg, n);
    s->len += (uint32_t)n;
}

static int64_t je_size(const char *name) {
    size_t v = 0, sz = sizeof v;
    return cfg.mallctl(name, &v, &sz, NULL, 0) == 0 ? (int64_t)v : -1;
}

static int64_t je_ssize(const char *name) {
    ssize_t v = 0;
    size_t sz = sizeof v;
    return cfg.mallctl(name, &v, &sz, NULL, 0) == 0 ? (int64_t)v : -1;
}

static int64_t tc_prop(const char *name) {
    size_t v = 0;
    return cfg.tc_get(name, &v) ? (int64_t)v : -1;
}

static void collect(struct alloclab_introspect *r) {
    int64_t *f = r->field;
    for (int i = 0; i < AI_NFIELDS; i++) f[i] = -1;
    r->text_kind = AI_TEXT_NONE;
    r->text_len = 0;
    switch (cfg.family) {
    case AI_FAMILY_JEMALLOC: {
        uint64_t epoch = 1;
        size_t sz = sizeof epoch;
        cfg.mallctl("epoch", &epoch, &sz, &epoch, sz);     /* refresh the cached stats */
        int64_t page = je_size("arenas.page");
        unsigned narenas = 0;
        size_t usz = sizeof narenas;
        if (cfg.mallctl("arenas.narenas", &narenas, &usz, NULL, 0) == 0) f[AI_ARENAS] = narenas;
        f[AI_IN_USE] = je_size("stats.allocated");
        int64_t active = je_size("stats.active");
        if (active >= 0 && f[AI_IN_USE] >= 0) f[AI_BINS] = active - f[AI_IN_USE];
        f[AI_RESIDENT] = je_size("stats.resident");
        f[AI_MAPPED] = je_size("stats.mapped");
        f[AI_RETAINED] = je_size("stats.retained");
        f[AI_METADATA] = je_size("stats.metadata");
        char name[64];
        snprintf(name, sizeof name, "stats.arenas.%d.pdirty", MALLCTL_ARENAS_ALL);
        int64_t pd = je_size(name);
        snprintf(name, sizeof name, "stats.arenas.%d.pmuzzy", MALLCTL_ARENAS_ALL);
        int64_t pm = je_size(name);
        if (page > 0 && pd >= 0) f[AI_DIRTY] = pd * page;
        if (page > 0 && pm >= 0) f[AI_MUZZY] = pm * page;
        f[AI_DIRTY_DECAY_MS] = je_ssize("opt.dirty_decay_ms");
        f[AI_MUZZY_DECAY_MS] = je_ssize("opt.muzzy_decay_ms");
        break;
    }
    case AI_FAMILY_MIMALLOC: {
        size_t el, ut, st, rss, prss, commit, pcommit, faults;
        cfg.mi_info(&el, &ut, &st, &rss, &prss, &commit, &pcommit, &faults);
        f[AI_COMMITTED] = (int64_t)commit;
        f[AI_PEAK_COMMITTED] = (int64_t)pcommit;
        if (cfg.mi_print) {          /* the one stats API every version has; parsed by alloclab */
            struct text_sink s = {r->text, 0, ALLOCLAB_INTROSPECT_TEXT};
            cfg.mi_print(mi_out, &s);
            r->text_len = s.len;
            r->text_kind = AI_TEXT_MI_STATS;
        }
        break;
    }
    case AI_FAMILY_TCMALLOC: {
        f[AI_IN_USE] = tc_prop("generic.current_allocated_bytes");
        f[AI_MAPPED] = tc_prop("generic.heap_size");
        f[AI_DIRTY] = tc_prop("tcmalloc.pageheap_free_bytes");
        f[AI_RETAINED] = tc_prop("tcmalloc.pageheap_unmapped_bytes");
        int64_t c = tc_prop("tcmalloc.central_cache_free_bytes"), t = tc_prop("tcmalloc.transfer_cache_free_bytes"),
                th = tc_prop("tcmalloc.thread_cache_free_bytes");
        if (c >= 0 && t >= 0 && th >= 0) f[AI_BINS] = c + t + th;
        break;
    }
    case AI_FAMILY_GLIBC: {
        struct mallinfo2 mi = cfg.mallinfo2();
        f[AI_IN_USE] = (int64_t)(mi.uordblks + mi.hblkhd);
        f[AI_MMAPPED] = (int64_t)mi.hblkhd;
        f[AI_FREE_TOTAL] = (int64_t)mi.fordblks;
        f[AI_TOP] = (int64_t)mi.keepcost;
        f[AI_BINS] = (int64_t)(mi.fordblks - mi.keepcost);
        f[AI_MAPPED] = (int64_t)(mi.arena + mi.hblkhd);
        f[AI_FREE_CHUNKS] = (int64_t)(mi.ordblks + mi.smblks);
        if (cfg.malloc_info && info_fd_ours()) {      /* per-arena detail, parsed by alloclab */
            int fd = fileno(info_file);
            rewind(info_file);
            if (ftruncate(fd, 0) == 0 && cfg.malloc_info(0, info_file) == 0 && fflush(info_file) == 0) {
                ssize_t n = pread(fd, r->text, ALLOCLAB_INTROSPECT_TEXT, 0);
                if (n > 0) {
                    r->text_len = (uint32_t)n;
                    r->text_kind = AI_TEXT_MALLOC_INFO;
                }
            }
        }
        break;
    }
    default:
        break;
    }
}

static void sleep_ns(uint64_t d) {
    struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0) {}
}

static void *helper_main(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint64_t interval = (uint64_t)(cfg.interval * 1e9);
    uint64_t wait = interval;
    for (;;) {
        sleep_ns(wait);                /* first record one interval in: a child that execs at once leaves none */
        uint64_t c0 = ns(CLOCK_THREAD_CPUTIME_ID);
        if (!rec && !(rec = open_record())) return NULL;      /* no record: stay out of the way */
        _Atomic uint64_t *seq = (_Atomic uint64_t *)&rec->seq;
        uint64_t s = atomic_load_explicit(seq, memory_order_relaxed);
        atomic_store_explicit(seq, s | 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        collect(rec);
        uint64_t cost = ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        /* the budget: a collection that cost C may come again only after C / budget */
        wait = interval;
        if (cfg.budget > 0 && (double)cost / cfg.budget > (double)wait) wait = (uint64_t)((double)cost / cfg.budget);
        rec->t_ns = ns(CLOCK_REALTIME);
        rec->collections++;
        rec->last_cost_ns = cost;
        rec->helper_cpu_ns = ns(CLOCK_THREAD_CPUTIME_ID);
        rec->interval_ns = wait;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(seq, (s | 1) + 1, memory_order_release);
    }
    return NULL;
}

static void start_helper(void) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&helper, &attr, helper_main, NULL) != 0) helper = 0;
    pthread_attr_destroy(&attr);
}

static void in_child(void) {
    /* the parent's record and helper are the parent's: unmap, start afresh (no thread survived fork) */
    if (rec) munmap(rec, sizeof *rec);
    rec = NULL;
    if (info_fd_ours()) {        /* same FILE, new memfd under its descriptor: no malloc needed */
        int fd = memfd_create("alloclab-malloc-info", MFD_CLOEXEC);
        if (fd >= 0 && dup3(fd, fileno(info_file), O_CLOEXEC) >= 0) {
            remember_info_fd(fileno(info_file));
            close(fd);
        } else {
            if (fd >= 0) close(fd);
            info_file = NULL;
        }
    } else {
        info_file = NULL;
    }
    start_helper();
}

__attribute__((constructor)) static void introspect_init(void) {
    const char *dir = getenv("ALLOCLAB_INTROSPECT");
    if (!dir || !*dir || strlen(dir) >= sizeof cfg.dir) return;
    snprintf(cfg.dir, sizeof cfg.dir, "%s", dir);
    const char *iv = getenv("ALLOCLAB_INTROSPECT_INTERVAL");
    const char *bd = getenv("ALLOCLAB_INTROSPECT_BUDGET");
    cfg.interval = iv ? strtod(iv, NULL) : 1.0;
    if (!(cfg.interval >= 0.01 && cfg.interval <= 3600)) cfg.interval = 1.0;
    cfg.budget = bd ? strtod(bd, NULL) : 0.01;
    if (!(cfg.budget > 0 && cfg.budget <= 1)) cfg.budget = 0.01;
    resolve();
    if (cfg.family == AI_FAMILY_GLIBC && cfg.malloc_info) {
        int fd = memfd_create("alloclab-malloc-info", MFD_CLOEXEC);
        if (fd >= 0 && (info_file = fdopen(fd, "w+")) != NULL) {
            setvbuf(info_file, info_buf, _IOFBF, sizeof info_buf);
            remember_info_fd(fd);
        }
        else if (fd >= 0)
            close(fd);
    }
    pthread_atfork(NULL, NULL, in_child);
    start_helper();
}

/* For tests and tools: the family this helper found (0 when inactive). */
EXPORT int alloclab_introspect_family(void) { return (int)cfg.family; }
