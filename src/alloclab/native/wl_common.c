/* wl_common.c — see wl_common.h. */
#include "wl_common.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

_Atomic uint64_t wl_live_bytes, wl_peak_bytes, wl_ops, wl_digest;
_Atomic uint32_t wl_phase;

static long publishes, crash_after = -1, fds_at_start = -1;

/* Open file descriptors of this process (for the leak check printed by wl_report). */
static long count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;   /* the directory stream itself */
}

static void account_growth(uint64_t n) {
    uint64_t live = atomic_fetch_add_explicit(&wl_live_bytes, n, memory_order_relaxed) + n;
    uint64_t peak = atomic_load_explicit(&wl_peak_bytes, memory_order_relaxed);
    while (live > peak && !atomic_compare_exchange_weak(&wl_peak_bytes, &peak, live)) {}
}

size_t wl_logsize(wl_rng *r, size_t lo, size_t hi) {
    double u = (double)(wl_next(r) >> 11) / 9007199254740992.0;
    double v = exp(log((double)lo) + u * (log((double)hi) - log((double)lo)));
    size_t n = (size_t)v;
    return n < lo ? lo : (n > hi ? hi : n);
}

double wl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void wl_sleep(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

void *wl_alloc(size_t n) {
    void *p = malloc(n);
    if (!p) { fprintf(stderr, "workload: out of memory allocating %zu bytes\n", n); abort(); }
    memset(p, 0xA5, n);                      /* use it all, as real programs do: RSS follows */
    account_growth(n);
    wl_note(1, n);
    return p;
}

void *wl_realloc(void *p, size_t old, size_t n) {
    void *q = realloc(p, n);
    if (!q) { fprintf(stderr, "workload: out of memory reallocating %zu bytes\n", n); abort(); }
    if (n > old) {
        memset((char *)q + old, 0x5A, n - old);
        account_growth(n - old);
    } else {
        atomic_fetch_sub_explicit(&wl_live_bytes, old - n, memory_order_relaxed);
    }
    wl_note(3, n);
    return q;
}

void wl_free(void *p, size_t n) {
    if (!p) return;
    free(p);
    atomic_fetch_sub_explicit(&wl_live_bytes, n, memory_order_relaxed);
    wl_note(2, n);
}

void wl_report(const char *name) {
    printf("%s: fds start=%ld end=%ld\n", name, fds_at_start, count_fds());
    printf("%s: ops=%llu live=%llu peak=%llu digest=%016llx\n", name, (unsigned long long)atomic_load(&wl_ops),
           (unsigned long long)atomic_load(&wl_live_bytes), (unsigned long long)atomic_load(&wl_peak_bytes),
           (unsigned long long)atomic_load(&wl_digest));
    fflush(stdout);
}

void wl_sleep_until(double deadline) {
    double now = wl_now();
    if (deadline > now) wl_sleep(deadline - now);
}

struct alloclab_stats *alloclab_stats_open(void) {
    const char *path = getenv("ALLOCLAB_STATS");
    if (!path || !*path) return NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    if (ftruncate(fd, sizeof(struct alloclab_stats)) != 0) { close(fd); return NULL; }
    void *m = mmap(NULL, sizeof(struct alloclab_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return NULL;
    struct alloclab_stats *s = m;
    s->magic = ALLOCLAB_STATS_MAGIC;
    s->version = ALLOCLAB_STATS_VERSION;
    return s;
}

void alloclab_stats_publish(struct alloclab_stats *s, uint32_t phase, uint64_t ops,
                            uint64_t live, uint64_t peak) {
    if (!s) return;
    uint64_t seq = s->seq + 1;              /* odd: write in progress */
    __atomic_store_n(&s->seq, seq, __ATOMIC_RELEASE);
    s->phase = phase;
    s->ops = ops;
    s->live_bytes = live;
    s->peak_live_bytes = peak;
    s->updated_ns = (uint64_t)(wl_now() * 1e9);
    __atomic_store_n(&s->seq_end, seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELEASE);
}

static struct alloclab_stats *channel;

static pthread_t publisher;
static _Atomic int publisher_run;
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;

void wl_publish(uint32_t phase) {
    pthread_mutex_lock(&publish_lock);    /* the channel has one writer at a time */
    if (!channel) channel = alloclab_stats_open();
    if (channel && crash_after >= 0 && ++publishes > crash_after) {
        /* fault injection for tests (ALLOCLAB_STATS_CRASH_AFTER=N): die in the middle of a write */
        __atomic_store_n(&channel->seq, channel->seq + 1, __ATOMIC_RELEASE);
        channel->live_bytes = 0xdeadbeef;
        raise(SIGKILL);
    }
    atomic_store(&wl_phase, phase);
    alloclab_stats_publish(channel, phase, atomic_load(&wl_ops), atomic_load(&wl_live_bytes),
                           atomic_load(&wl_peak_bytes));
    pthread_mutex_unlock(&publish_lock);
}

static void *publisher_main(void *arg) {
    (void)arg;
    while (atomic_load(&publisher_run)) {
        wl_publish(atomic_load(&wl_phase));
        wl_sleep(0.1);
    }
    return NULL;
}

void wl_start_publisher(void) {
    const char *crash = getenv("ALLOCLAB_STATS_CRASH_AFTER");
    if (crash && *crash) crash_after = atol(crash);
    fds_at_start = count_fds();
    atomic_store(&publisher_run, 1);
    wl_publish(WL_WARMUP);
    pthread_create(&publisher, NULL, publisher_main, NULL);
}

void wl_stop_publisher(void) {
    atomic_store(&publisher_run, 0);
    pthread_join(publisher, NULL);
    wl_publish(WL_DONE);
}

static const char *opt_value(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

double wl_opt_double(int argc, char **argv, const char *name, double dflt) {
    const char *v = opt_value(argc, argv, name);
    return v ? atof(v) : dflt;
}

long wl_opt_long(int argc, char **argv, const char *name, long dflt) {
    const char *v = opt_value(argc, argv, name);
    return v ? atol(v) : dflt;
}
