/* sampler_floor — benchmark helper: the cost floor of sampling, a plain C loop that reads the same
 * /proc files alloclab reads (stat + statm for the cheap tier, smaps_rollup for the full tier) and
 * pulls one number out of each. Prints CPU microseconds per process-sample for both tiers.
 *   sampler_floor ROUNDS PID...
 * With -c, the floor of the fleet collector's cheap tier: each unit's cgroup.procs read, then stat +
 * statm of every pid in it; prints CPU microseconds per unit-sample.
 *   sampler_floor -c ROUNDS CGROUP_PROCS_FILE...
 * With -b, the same reads one kind at a time (CPU microseconds per unit-sample each): cgroup.procs
 * opened/read/closed and re-read through a kept descriptor, stat and statm both ways, and the
 * unit's cgroup.events and pids.current (kept) where they exist (-1 where not).
 *   sampler_floor -b ROUNDS CGROUP_PROCS_FILE...
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long read_first_number(const char *path, const char *after) {
    static char buf[8192];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *p = after ? strstr(buf, after) : buf;
    return p ? strtol(p + (after ? strlen(after) : 0), NULL, 10) : -1;
}

static int cgroup_floor(int rounds, int n, char **files) {
    static char buf[65536];
    char path[64];
    long sink = 0;
    double t0 = cpu_now();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            int fd = open(files[i], O_RDONLY);
            if (fd < 0) continue;
            ssize_t len = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (len <= 0) continue;
            buf[len] = 0;
            for (char *p = buf, *end; *p; p = end) {
                long pid = strtol(p, &end, 10);
                if (end == p) break;
                snprintf(path, sizeof path, "/proc/%ld/stat", pid);
                sink += read_first_number(path, ") ");
                snprintf(path, sizeof path, "/proc/%ld/statm", pid);
                sink += read_first_number(path, NULL);
            }
        }
    printf("{\"unit_us\": %.3f, \"sink\": %ld}\n", (cpu_now() - t0) / rounds / n * 1e6, sink & 1);
    return 0;
}

/* pids of the units' members (read once), one file kind's kept descriptors, and timing */
static double per_unit(int rounds, int n, int *fds, int kept, char **paths) {
    static char buf[65536];
    int counted = 0;
    double t0 = cpu_now();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            if (!paths[i]) continue;
            if (kept) {
                if (fds[i] >= 0 && pread(fds[i], buf, sizeof buf - 1, 0) > 0) counted += r == 0;
            } else {
                int fd = open(paths[i], O_RDONLY);
                if (fd < 0) continue;
                if (read(fd, buf, sizeof buf - 1) > 0) counted += r == 0;
                close(fd);
            }
        }
    return counted ? (cpu_now() - t0) / rounds / n * 1e6 : -1;
}

static int breakdown(int rounds, int n, char **files) {
    enum { PROCS, STAT, STATM, EVENTS, PIDS, KINDS };
    static const char *names[KINDS] = {"cgroup.procs", "stat", "statm", "cgroup.events", "pids.current"};
    char buf[65536];
    char **paths[KINDS];
    int *fds[KINDS];
    for (int k = 0; k < KINDS; k++) { paths[k] = calloc(n, sizeof(char *)); fds[k] = calloc(n, sizeof(int)); }
    for (int i = 0; i < n; i++) {
        paths[PROCS][i] = files[i];
        size_t dir = strlen(files[i]) - strlen("cgroup.procs");
        paths[EVENTS][i] = malloc(dir + 32);
        snprintf(paths[EVENTS][i], dir + 32, "%.*scgroup.events", (int)dir, files[i]);
        paths[PIDS][i] = malloc(dir + 32);
        snprintf(paths[PIDS][i], dir + 32, "%.*spids.current", (int)dir, files[i]);
        int fd = open(files[i], O_RDONLY);
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) close(fd);
        long pid = len > 0 ? (buf[len] = 0, strtol(buf, NULL, 10)) : 0;    /* the first member (one-process units) */
        if (pid > 0) {
            paths[STAT][i] = malloc(64);
            snprintf(paths[STAT][i], 64, "/proc/%ld/stat", pid);
            paths[STATM][i] = malloc(64);
            snprintf(paths[STATM][i], 64, "/proc/%ld/statm", pid);
        }
    }
    printf("{");
    for (int k = 0; k < KINDS; k++) {
        for (int i = 0; i < n; i++) fds[k][i] = paths[k][i] ? open(paths[k][i], O_RDONLY) : -1;
        double opened = per_unit(rounds, n, fds[k], 0, paths[k]), kept = per_unit(rounds, n, fds[k], 1, paths[k]);
        printf("%s\"%s\": {\"open_read_close_us\": %.3f, \"kept_pread_us\": %.3f}", k ? ", " : "", names[k], opened, kept);
        for (int i = 0; i < n; i++) if (fds[k][i] >= 0) close(fds[k][i]);
    }
    printf("}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 3 && strcmp(argv[1], "-b") == 0) return breakdown(atoi(argv[2]), argc - 3, argv + 3);
    if (argc > 3 && strcmp(argv[1], "-c") == 0) return cgroup_floor(atoi(argv[2]), argc - 3, argv + 3);
    if (argc < 3) { fprintf(stderr, "usage: sampler_floor ROUNDS PID...\n"); return 2; }
    int rounds = atoi(argv[1]), n = argc - 2;
    char path[64];
    long sink = 0;
    double t0 = cpu_now();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "/proc/%s/stat", argv[2 + i]);
            sink += read_first_number(path, ") ");
            snprintf(path, sizeof path, "/proc/%s/statm", argv[2 + i]);
            sink += read_first_number(path, NULL);
        }
    double cheap = (cpu_now() - t0) / rounds / n * 1e6;
    t0 = cpu_now();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "/proc/%s/smaps_rollup", argv[2 + i]);
            sink += read_first_number(path, "Pss:");
        }
    double full = (cpu_now() - t0) / rounds / n * 1e6;
    printf("{\"cheap_us\": %.3f, \"full_us\": %.3f, \"sink\": %ld}\n", cheap, full, sink & 1);
    return 0;
}
