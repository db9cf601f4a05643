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
 * The input is not trusted (docs/reference/trace-format.md, "Limits"): reading and ordering are O(n log n)
 * whatever the file holds; idle gaps over --max-gap are shortened and a schedule over
 * --max-duration refused; requests over --max-alloc, peaks over --max-live and more threads than
 * --max-threads are refused before anything is allocated; every thread is created before any
 * replays, so a failed pthread_create replays nothing and exits 5.
 * Exit codes: 0 done, 2 bad options, 3 unreadable or corrupt trace, 4 over a limit, 5 cannot run
 * here (threads, memory). Every error is one line on stderr, starting "replay: ".
 * Memory is written in full after each allocation, as the recorded program presumably did.
 * With $ALLOCLAB_STATS set, live bytes and operations are published like any built-in workload.
 */
#include "replay.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Defaults of the limits (docs/reference/trace-format.md, "Limits"); each has an option. */
#define DEFAULT_MAX_GAP 3600.0             /* s: a longer idle gap is shortened to this */
#define DEFAULT_MAX_DURATION 604800.0      /* s (7 days): a longer schedule is refused */
#define DEFAULT_MAX_THREADS 4096u
#define DEFAULT_MAX_ALLOC (1ull << 30)     /* bytes in one request: above any tor or server request seen; --max-alloc raises it */
#define DEFAULT_MAX_LIVE_CAP (1ull << 40)  /* live bytes: 3/4 of physical memory, at most this */

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
    forget_addresses();             /* addresses are objects now */
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
        run_direct();
    } else if ((rc = run_threads()) != 0) {
        wl_stop_publisher();
        return rc;
    }
    double secs = wl_now() - t0, cpu = cpu_seconds() - cpu0;
    atomic_store(&wl_phase, WL_IDLE);
    uint64_t ops = atomic_load(&wl_ops), waits, sleeps;
    double waited;
    wait_totals(&waits, &sleeps, &waited);
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
