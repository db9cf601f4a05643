/* tor_dircache — the memory pattern of a Tor relay that is a directory cache (DirCache 1).
 *
 * Time is logical: a simulated hour is --tph ticks paced to --hour real seconds, so one seed always
 * performs the same operations; a slow machine falls behind instead of doing less. Each modelled
 * behaviour names the Tor code it stands for:
 *
 *  - Consensus arrival, hourly (networkstatus.c): each flavour ("ns" --doc-kb, "microdesc" 45% of it)
 *    is parsed into one routerstatus object per relay (--relays, 250-450 B plus a 60-160 B string),
 *    kept until the next consensus replaces them. The body is assembled in a heap buffer and then
 *    stored in the consensus cache (consdiffmgr.c / conscache.c), which keeps it as a file that is
 *    mmap()ed: the last --keep bodies per flavour stay mapped (file pages, not heap).
 *  - Diff and compression jobs (consdiffmgr.c, consdiff.c, compress.c) run in --workers threads
 *    (cpuworker.c): a diff between the new body and each kept one (line index arrays, 64 KiB
 *    memarea-like scratch chunks, an output string grown by realloc); compression of the new body
 *    and of every diff in three codecs, each job with codec state sized like the codec (zlib
 *    ~256 KiB, zstd ~1 MiB, lzma ~3 MiB) and an output grown by doubling realloc then shrunk.
 *    Results travel back through the reply queue; the main thread writes them to the cache and
 *    frees them: large blocks allocated in a worker and freed in the main thread.
 *  - Descriptors and microdescriptors (routerlist.c, microdesc.c): --relays of each, 0.5-2.5 KiB
 *    and 200-600 B, --churn of them replaced per hour; many small objects, most long-lived.
 *  - Directory connections (directory.c, dirserv.c spooling): --clients arrive per hour and are
 *    served within 1-3 ticks; a consensus request spools pre-compressed data, a descriptor request
 *    compresses on the fly with per-connection codec state (zlib/zstd/lzma sized as above, held for
 *    the connection's life); buffers are 4-16 KiB chunks (buffers.c) freed as they are flushed.
 *  - Circuits (relay.c, circuitlist.c): --circuits live circuits, each with a cell queue of
 *    packed cells (~530 B each, allocated per cell and freed when flushed) that grow and shrink in
 *    bursts; 2% of circuits close and reopen per hour.
 *
 * Options: --load S --idle S --seed N --hour S --tph N --workers N --relays N --doc-kb N --keep N
 *          --clients N (per hour) --circuits N --churn F --verify-live 1
 */
#include "jobqueue.h"
#include "objvec.h"
#include "wl_common.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { CODECS = 3, FLAVOURS = 2, MAX_KEEP = 48, CELL = 530 };
static const size_t codec_state[CODECS] = {256 << 10, 1 << 20, 3 << 20};
static const double codec_ratio[CODECS] = {0.32, 0.27, 0.22};

typedef struct { char *p; size_t n; } blob;

typedef struct job {
    int kind;                  /* 0 compress, 1 diff */
    int flavour, codec, age;   /* age: hours between the diffed bodies */
    uint64_t id;
    blob in, base;             /* inputs: mapped bodies, or a diff kept alive until compressed */
    blob out;                  /* result, allocated by the worker */
    struct pending_diff *owner;/* for compress-of-diff jobs: the diff to release afterwards */
    long hour;
} job;

typedef struct pending_diff { blob b; int refs; } pending_diff;

static jobqueue jobs, replies;
static uint64_t seed;
static uint64_t bytes_written;    /* what went to the consensus cache on disk */

/* ---- workers (cpuworker.c): compression and diff jobs ---- */

/* An output that grows as results come: `want` bytes copied from `in` in steps of lo..lo+span,
 * the buffer doubled by realloc from `cap` as needed, then shrunk to fit (as Tor does). */
static blob grow_output(wl_rng *r, blob in, size_t want, size_t cap, size_t lo, size_t span) {
    size_t used = 0;
    char *out = wl_alloc(cap);
    while (used < want) {
        size_t step = lo + wl_below(r, span);
        if (used + step > want) step = want - used;
        if (step > in.n) step = in.n;
        while (used + step > cap) { out = wl_realloc(out, cap, cap * 2); cap *= 2; }
        memcpy(out + used, in.p + wl_below(r, in.n - step + 1), step);
        used += step;
    }
    return (blob){wl_realloc(out, cap, used), used};
}

static void do_compress(job *j) {
    wl_rng r = {seed ^ j->id};
    size_t state_n = codec_state[j->codec];
    char *state = wl_alloc(state_n);                   /* codec context, written in full */
    size_t want = (size_t)((double)j->in.n * codec_ratio[j->codec]) + wl_below(&r, 4096) + 64;
    j->out = grow_output(&r, j->in, want, 8192, 4096, 12288);
    wl_free(state, state_n);
    wl_count_ops(1);
}

static void do_diff(job *j) {
    wl_rng r = {seed ^ j->id};
    size_t idx_a = (j->base.n / 96 + 1) * 16, idx_b = (j->in.n / 96 + 1) * 16;
    char *ia = wl_alloc(idx_a), *ib = wl_alloc(idx_b);   /* line index of both bodies */
    enum { CHUNK = 64 << 10 };
    objvec scratch = {0};                                /* memarea chunks while matching */
    for (size_t i = 0; i < 2 + (j->in.n >> 18); i++) ov_alloc(&scratch, CHUNK);
    size_t want = (size_t)((double)j->in.n * (0.03 + 0.02 * j->age)) + wl_below(&r, 8192) + 64;
    j->out = grow_output(&r, j->in, want, 16384, 200, 2000);
    ov_clear(&scratch);
    wl_free(ia, idx_a);
    wl_free(ib, idx_b);
    wl_count_ops(1);
}

static void *worker_main(void *arg) {
    (void)arg;
    job *j;
    while ((j = jq_pop(&jobs, 1)) != NULL) {
        if (j->kind == 0) do_compress(j); else do_diff(j);
        jq_push(&replies, j);
    }
    return NULL;
}

/* ---- main thread state ---- */
typedef struct { char *p; size_t n; char *md; size_t mdn; } descriptor;
typedef struct {
    char *obj; size_t objn;            /* dir_connection_t */
    char *state; size_t staten;        /* on-the-fly compression state, or NULL */
    objvec outbuf;                     /* buffer chunks in flight (buffers.c) */
    size_t remaining;
    int ticks_left;
} dirconn;
typedef struct { char *obj; size_t objn; objvec cells; } circuit;

static blob history[FLAVOURS][MAX_KEEP];       /* mapped consensus bodies, newest last */
static long history_hour[FLAVOURS][MAX_KEEP];
static int history_len[FLAVOURS];
static objvec routerstatus[FLAVOURS];          /* parsed current consensus */
static dirconn *conns;
static size_t nconns, conns_cap;
static circuit *circs;
static long ncircs;
static int outstanding;

static void submit(int kind, int flavour, int codec, int age, blob in, blob base, pending_diff *owner, long hour) {
    job *j = calloc(1, sizeof *j);
    /* the job's random stream follows from what it is, not from when a reply happened to arrive */
    uint64_t id = ((uint64_t)hour << 24) ^ ((uint64_t)kind << 20) ^ ((uint64_t)flavour << 16) ^ ((uint64_t)codec << 12) ^ (uint64_t)age;
    *j = (job){kind, flavour, codec, age, id * 0x9e3779b97f4a7c15ULL + 1, in, base, {0, 0}, owner, hour};
    outstanding++;
    jq_push(&jobs, j);
}

/* Store a body in the consensus cache: a file, mapped read-only (conscache.c). */
static blob store_mapped(const char *data, size_t n, int flavour, long hour) {
    /* an unnamed file in the working directory: no name to collide with another replica, and
     * nothing left behind if the process is killed */
    int fd = open(".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    char name[96] = "";
    if (fd < 0) {                                   /* filesystem without O_TMPFILE */
        snprintf(name, sizeof name, "consensus-%d-%d-%ld.tmp", (int)getpid(), flavour, hour);
        fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0 || write(fd, data, n) != (ssize_t)n) { perror("tor_dircache: consensus cache"); exit(1); }
    char *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (name[0]) unlink(name);                      /* the mapping keeps it */
    if (m == MAP_FAILED) { perror("tor_dircache: mmap"); exit(1); }
    return (blob){m, n};
}

static void new_consensus(wl_rng *r, long hour, size_t doc_bytes, long relays, int keep) {
    for (int f = 0; f < FLAVOURS; f++) {
        size_t size = f == 0 ? doc_bytes : doc_bytes * 45 / 100;
        /* parse: one routerstatus (+ its string) per relay replaces the previous consensus' */
        ov_clear(&routerstatus[f]);
        for (long i = 0; i < relays; i++) {
            ov_alloc(&routerstatus[f], 250 + wl_below(r, 200));
            ov_alloc(&routerstatus[f], 60 + wl_below(r, 100));
        }
        char *body = wl_alloc(size);                  /* the body, as received */
        blob doc = store_mapped(body, size, f, hour);
        wl_free(body, size);
        if (history_len[f] == keep) {
            munmap(history[f][0].p, history[f][0].n);
            memmove(&history[f][0], &history[f][1], (size_t)(keep - 1) * sizeof(blob));
            memmove(&history_hour[f][0], &history_hour[f][1], (size_t)(keep - 1) * sizeof(long));
            history_len[f]--;
        }
        for (int c = 0; c < CODECS; c++) submit(0, f, c, 0, doc, (blob){0, 0}, NULL, hour);
        for (int k = 0; k < history_len[f]; k++)
            submit(1, f, 0, (int)(hour - history_hour[f][k]), doc, history[f][k], NULL, hour);
        history[f][history_len[f]] = doc;
        history_hour[f][history_len[f]] = hour;
        history_len[f]++;
    }
}

static void take_replies(int block) {
    job *j;
    while (outstanding > 0 && (j = jq_pop(&replies, block)) != NULL) {
        outstanding--;
        bytes_written += j->out.n;                    /* written to the cache on disk ... */
        if (j->kind == 1) {                           /* ... a diff is also compressed, three ways */
            pending_diff *pd = malloc(sizeof *pd);
            *pd = (pending_diff){j->out, CODECS};
            for (int c = 0; c < CODECS; c++) submit(0, j->flavour, c, j->age, j->out, (blob){0, 0}, pd, j->hour);
        } else {
            wl_free(j->out.p, j->out.n);              /* ... and freed: allocated in a worker */
            if (j->owner && --j->owner->refs == 0) {
                wl_free(j->owner->b.p, j->owner->b.n);
                free(j->owner);
            }
        }
        free(j);
    }
}

static void close_conn(dirconn *c) {
    ov_clear(&c->outbuf);
    wl_free(c->state, c->staten);
    wl_free(c->obj, c->objn);
}

/* A tick is a couple of simulated minutes: a directory response is spooled within 1-3 ticks. */
static void tick_dirconns(wl_rng *r, int accept, long per_tick_x100) {
    long arrivals = accept ? (long)(wl_below(r, (uint64_t)(2 * per_tick_x100 + 1)) / 100) : 0;
    for (long a = 0; a < arrivals; a++) {
        if (nconns == conns_cap) { conns_cap = conns_cap ? conns_cap * 2 : 256; conns = realloc(conns, conns_cap * sizeof *conns); }
        dirconn c = {0};
        c.objn = 700 + wl_below(r, 500);
        c.obj = wl_alloc(c.objn);
        if (wl_below(r, 10) < 4) {                    /* descriptor request: compressed on the fly */
            int codec = wl_below(r, 10) < 5 ? 0 : (wl_below(r, 4) ? 1 : 2);
            c.staten = codec_state[codec];
            c.state = wl_alloc(c.staten);
            c.remaining = 20000 + wl_below(r, 400000);
        } else {                                      /* consensus or diff: pre-compressed, spooled */
            c.remaining = 30000 + wl_below(r, 700000);
        }
        c.ticks_left = 1 + (int)wl_below(r, 3);
        conns[nconns++] = c;
    }
    size_t w = 0;
    for (size_t i = 0; i < nconns; i++) {
        dirconn *c = &conns[i];
        ov_clear(&c->outbuf);                         /* last tick's chunks were flushed */
        size_t budget = c->ticks_left > 0 ? c->remaining / (size_t)c->ticks_left : c->remaining;
        while (budget && c->remaining) {              /* spool this tick's share into 4-16 KiB chunks */
            size_t n = 4096 + wl_below(r, 12288);
            if (n > budget) n = budget;
            ov_alloc(&c->outbuf, n);
            budget -= n;
            c->remaining -= n;
        }
        wl_count_ops(1);
        if (c->ticks_left-- <= 0 && c->remaining == 0) close_conn(c);
        else conns[w++] = *c;
    }
    nconns = w;
}

static void tick_circuits(wl_rng *r, int active, long reopen) {
    for (long i = 0; i < reopen && ncircs; i++) {    /* circuits close; new ones open */
        circuit *c = &circs[wl_below(r, (uint64_t)ncircs)];
        ov_clear(&c->cells);
        wl_free(c->obj, c->objn);
        c->objn = 900 + wl_below(r, 400);
        c->obj = wl_alloc(c->objn);
    }
    for (long i = 0; i < ncircs; i++) {
        circuit *c = &circs[i];
        uint64_t in = active ? wl_below(r, 6) : 0;
        if (active && wl_below(r, 50) == 0) in += 40 + wl_below(r, 200);   /* a burst */
        for (uint64_t k = 0; k < in; k++) ov_alloc(&c->cells, CELL);
        uint64_t out = wl_below(r, 8) + (c->cells.len > 64 ? c->cells.len / 4 : 0);
        for (uint64_t k = 0; k < out && c->cells.len; k++) ov_drop(&c->cells, c->cells.len - 1);
        wl_count_ops(in + out);
    }
}

static void churn_descriptors(wl_rng *r, descriptor *d, long relays, long n) {
    for (long i = 0; i < n; i++) {
        descriptor *x = &d[wl_below(r, (uint64_t)relays)];
        wl_free(x->p, x->n);
        x->n = 512 + wl_below(r, 2048);
        x->p = wl_alloc(x->n);
        if (wl_below(r, 2) == 0) {
            wl_free(x->md, x->mdn);
            x->mdn = 200 + wl_below(r, 400);
            x->md = wl_alloc(x->mdn);
        }
    }
}

static uint64_t walk_live(descriptor *d, long relays) {
    uint64_t sum = ov_bytes(&routerstatus[0]) + ov_bytes(&routerstatus[1]);
    for (long i = 0; i < relays; i++) sum += d[i].n + d[i].mdn;
    for (size_t i = 0; i < nconns; i++) {
        sum += conns[i].objn + conns[i].staten + ov_bytes(&conns[i].outbuf);
    }
    for (long i = 0; i < ncircs; i++) sum += circs[i].objn + ov_bytes(&circs[i].cells);
    return sum;
}

int main(int argc, char **argv) {
    double load = wl_opt_double(argc, argv, "--load", 60), idle = wl_opt_double(argc, argv, "--idle", 0);
    double hour_s = wl_opt_double(argc, argv, "--hour", 6);
    long tph = wl_opt_long(argc, argv, "--tph", 20), workers = wl_opt_long(argc, argv, "--workers", 2);
    long relays = wl_opt_long(argc, argv, "--relays", 7000), doc_kb = wl_opt_long(argc, argv, "--doc-kb", 2400);
    long keep = wl_opt_long(argc, argv, "--keep", 3), clients = wl_opt_long(argc, argv, "--clients", 1000);
    long ncirc = wl_opt_long(argc, argv, "--circuits", 1500);
    double churn = wl_opt_double(argc, argv, "--churn", 0.1);
    int verify = (int)wl_opt_long(argc, argv, "--verify-live", 0);
    seed = (uint64_t)wl_opt_long(argc, argv, "--seed", 1);
    if (workers < 1 || workers > 64 || keep < 1 || keep > MAX_KEEP - 1 || tph < 1 || relays < 10 || doc_kb < 16 ||
        hour_s <= 0 || ncirc < 0 || clients < 0) {
        fprintf(stderr, "tor_dircache: out-of-range option (workers 1..64, keep 1..%d, tph >= 1, relays >= 10, "
                        "doc-kb >= 16, hour > 0)\n", MAX_KEEP - 1);
        return 2;
    }
    wl_rng r = {seed};
    jq_init(&jobs);
    jq_init(&replies);
    pthread_t *tids = calloc((size_t)workers, sizeof *tids);
    for (long i = 0; i < workers; i++) pthread_create(&tids[i], NULL, worker_main, NULL);
    wl_start_publisher();

    descriptor *desc = calloc((size_t)relays, sizeof *desc);
    for (long i = 0; i < relays; i++) {
        desc[i].n = 512 + wl_below(&r, 2048);
        desc[i].p = wl_alloc(desc[i].n);
        desc[i].mdn = 200 + wl_below(&r, 400);
        desc[i].md = wl_alloc(desc[i].mdn);
    }
    ncircs = ncirc;
    circs = calloc((size_t)(ncircs ? ncircs : 1), sizeof *circs);
    for (long i = 0; i < ncircs; i++) { circs[i].objn = 900 + wl_below(&r, 400); circs[i].obj = wl_alloc(circs[i].objn); }
    atomic_store(&wl_phase, WL_LOAD);
    double tick_s = hour_s / (double)tph;
    long load_ticks = (long)(load / tick_s), idle_ticks = (long)(idle / tick_s);
    long per_tick_churn = (long)((double)relays * churn / (double)tph) + 1;
    long reopen = ncircs / 50 / tph + 1;
    double start = wl_now();
    for (long t = 0; t < load_ticks + idle_ticks; t++) {
        int loading = t < load_ticks;
        long hour = t / tph;
        if (t == load_ticks) atomic_store(&wl_phase, WL_IDLE);
        if (loading && t % tph == 0) new_consensus(&r, hour, (size_t)doc_kb * 1024, relays, (int)keep);
        if (loading) churn_descriptors(&r, desc, relays, per_tick_churn);
        tick_dirconns(&r, loading, clients * 100 / tph);
        tick_circuits(&r, loading, loading ? reopen : 0);
        take_replies(0);
        wl_sleep_until(start + (double)(t + 1) * tick_s);
    }
    take_replies(1);                                  /* finish outstanding jobs: deterministic end state */
    if (verify) {
        uint64_t walked = walk_live(desc, relays), counter = atomic_load(&wl_live_bytes);
        printf("live_check walked=%llu counter=%llu\n", (unsigned long long)walked, (unsigned long long)counter);
    }
    jq_close(&jobs);
    for (long i = 0; i < workers; i++) pthread_join(tids[i], NULL);
    wl_stop_publisher();
    printf("tor_dircache: cache_bytes_written=%llu\n", (unsigned long long)bytes_written);
    wl_report("tor_dircache");
    return 0;
}
