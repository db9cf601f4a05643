/* fleet_reader.c — liballoclab_fleet.so: the fleet collector's cheap tier in one call a tick.
 * For every unit (a cgroup.procs file) it reads the member pids, then /proc/PID/stat and
 * /proc/PID/statm of each (statm for the sizes: stat's rss is the kernel's per-CPU approximation,
 * measured 10% below statm on a fresh 1 MiB process), into one array of records (fleet_record.h)
 * that alloclab/fleet/fleetread.py unpacks. Why native: the same reads cost ~50 us a unit-tick in Python, ~10 in C
 * (benchmarks/fleet_collector.py), and a 2,000-unit fleet at 1 s must stay under 5% of a core.
 *
 * /proc descriptors stay open between ticks and are re-read with pread (open and close cost more
 * than the kernel's work on these small files); a descriptor reads only the process it was opened
 * on (ESRCH after it exits), so a reused pid is opened afresh. A reading whose descriptors were
 * opened this tick is re-checked (stat read again after statm was opened: the process it names
 * was still alive, so statm is of the same process). Descriptors of processes not seen in a tick
 * are closed at its end. A unit's cgroup.procs is kept open too on cgroup v2 (a read at offset 0
 * walks the cgroup's members again; an empty read is retried on a fresh descriptor, as the unit may
 * have a new cgroup at the same path), and opened afresh each tick on v1, which keeps the pid list
 * of an open file while it is read at least once a second, so a kept descriptor would not see new
 * members. Measured on 2,000 units (v2): open+read+close 10.9 us, a kept descriptor's read ~3 us.
 *
 * Membership is re-read only every `membership_every` ticks (alloclab_fleet_membership_every; each
 * unit on its own phase, so the re-reads spread over the ticks between): in the ticks between, a
 * unit's members are the pids of its last read, through their kept descriptors. A kept /proc
 * descriptor reads only the process it was opened on: after that process exits, statm reads all
 * zeros (zombie) or fails with ESRCH (reaped), never another process under a reused pid. So a member
 * gone is noticed in the tick it goes, and that unit's cgroup.procs is re-read at once, in the same
 * tick; what can go unseen for up to `membership_every` ticks is a process newly forked into a unit
 * whose known members all still run (docs/how-to/fleet.md). Why: cgroup.procs was the costliest read of a
 * one-process unit (the kernel walks the cgroup's tasks): ~3 us kept, against ~1 for stat and ~0.4
 * for statm (sampler_floor -b, benchmarks/fleet_collector.py).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fleet_record.h"

#define API __attribute__((visibility("default")))

struct proc_fds {
    int32_t pid;          /* 0: free slot */
    int fd, statm_fd;     /* its /proc/PID/stat and statm; -1 once one failed */
    uint64_t seen;        /* the tick it was last read in */
    struct alloclab_fleet_record last;   /* its last full reading (stat's fields between stat reads) */
};

#define CGROUP2_MAGIC 0x63677270

struct unit_file {
    char *path;                      /* its cgroup.procs, or NULL: the unit is not read here */
    int fd;                          /* kept open on cgroup v2; -1 */
    int32_t *members;                /* pids of its last cgroup.procs read */
    int nmembers, members_cap;
    uint64_t due;                    /* the tick its cgroup.procs is read again (0: not read yet) */
};

struct fleet_reader {
    struct unit_file *procs;
    int nunits;
    struct proc_fds *table;          /* open addressing on pid, capacity a power of two */
    size_t cap, used;                /* slots taken */
    size_t open;                     /* processes with descriptors open */
    size_t max_open;                 /* processes whose descriptors may stay open (2 each) */
    uint64_t tick;
    uint64_t membership_every;       /* ticks between reads of a unit's cgroup.procs (1: every tick) */
    struct alloclab_fleet_record *out;
    size_t out_len, out_cap;
    char *buf;                       /* cgroup.procs contents */
    size_t buf_cap;
};

#define LAYOUT(type, name, dims, code) #name ":" code " "
static const char layout[] = ALLOCLAB_FLEET_RECORD_FIELDS(LAYOUT);
#undef LAYOUT

API const char *alloclab_fleet_record_layout(void) { return layout; }
API size_t alloclab_fleet_record_size(void) { return sizeof(struct alloclab_fleet_record); }

API struct fleet_reader *alloclab_fleet_new(size_t max_open) {
    struct fleet_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->cap = 1024;
    r->table = calloc(r->cap, sizeof *r->table);
    r->buf_cap = 65536;
    r->buf = malloc(r->buf_cap);
    r->max_open = max_open;
    r->membership_every = 1;
    if (!r->table || !r->buf) { free(r->table); free(r->buf); free(r); return NULL; }
    return r;
}

static void close_fds(struct proc_fds *e) {
    if (e->fd >= 0) close(e->fd);
    if (e->statm_fd >= 0) close(e->statm_fd);
    e->fd = e->statm_fd = -1;
}


/* Units 0..n-1 (paths reset to NULL when the count changes). 0, or -1 out of memory. */
static void forget_unit(struct unit_file *u) {
    if (u->fd >= 0) close(u->fd);
    free(u->path);
    free(u->members);
    u->path = NULL;
    u->members = NULL;
    u->nmembers = u->members_cap = 0;
    u->due = 0;
    u->fd = -1;
}

API int alloclab_fleet_units(struct fleet_reader *r, int n) {
    for (int i = 0; i < r->nunits; i++) forget_unit(&r->procs[i]);
    free(r->procs);
    r->procs = calloc((size_t)(n > 0 ? n : 1), sizeof *r->procs);
    r->nunits = r->procs ? n : 0;
    for (int i = 0; i < r->nunits; i++) r->procs[i].fd = -1;
    return r->procs ? 0 : -1;
}

API void alloclab_fleet_free(struct fleet_reader *r) {
    if (!r) return;
    for (size_t i = 0; i < r->cap; i++)
        if (r->table[i].pid) close_fds(&r->table[i]);
    alloclab_fleet_units(r, 0);
    free(r->procs); free(r->table); free(r->out); free(r->buf); free(r);
}

/* A unit's cgroup.procs file; NULL: the unit is not read here (no cgroup). 0, or -1. */
API int alloclab_fleet_set_unit(struct fleet_reader *r, int unit, const char *procs) {
    if (unit < 0 || unit >= r->nunits) return -1;
    forget_unit(&r->procs[unit]);
    r->procs[unit].path = procs ? strdup(procs) : NULL;
    return procs && !r->procs[unit].path ? -1 : 0;
}

/* Ticks between reads of each unit's cgroup.procs (at least 1). */
API void alloclab_fleet_membership_every(struct fleet_reader *r, int ticks) {
    r->membership_every = ticks > 1 ? (uint64_t)ticks : 1;
}

static size_t slot_of(const struct fleet_reader *r, int32_t pid) {
    size_t i = ((uint32_t)pid * 2654435761u) & (r->cap - 1);
    while (r->table[i].pid && r->table[i].pid != pid) i = (i + 1) & (r->cap - 1);
    return i;
}

/* The table at capacity keep_cap with only the processes seen this tick that have descriptors
 * (the others closed). Mid-tick (to grow), every entry is kept: all are seen or about to be. */
static int rebuild(struct fleet_reader *r, size_t keep_cap, int tick_end) {
    struct proc_fds *old = r->table;
    size_t old_cap = r->cap;
    struct proc_fds *fresh = calloc(keep_cap, sizeof *fresh);
    if (!fresh) return -1;
    r->table = fresh;
    r->cap = keep_cap;
    r->used = r->open = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].pid) continue;
        if (tick_end && (old[i].seen != r->tick || old[i].fd < 0)) { close_fds(&old[i]); continue; }
        r->table[slot_of(r, old[i].pid)] = old[i];
        r->used++;
        r->open += old[i].fd >= 0;
    }
    free(old);
    return 0;
}

static int parse_stat(const char *buf, ssize_t n, struct alloclab_fleet_record *rec) {
    const char *lpar = memchr(buf, '(', (size_t)n), *rpar = NULL;
    for (const char *p = buf + n - 1; p > buf; p--)
        if (*p == ')') { rpar = p; break; }
    if (!lpar || !rpar || rpar + 2 >= buf + n) return -1;
    size_t len = (size_t)(rpar - lpar - 1);
    memset(rec->comm, 0, sizeof rec->comm);
    memcpy(rec->comm, lpar + 1, len < sizeof rec->comm ? len : sizeof rec->comm);
    const char *p = rpar + 2;
    rec->state = *p;
    char *end;
    unsigned long long field[19];                 /* fields 4..22 of proc(5): ppid .. starttime */
    p++;
    for (int k = 0; k < 19; k++) {
        field[k] = strtoull(p, &end, 10);
        if (end == p) return -1;
        p = end;
    }
    rec->ppid = (int32_t)field[0];
    rec->pgrp = (int32_t)field[1];
    rec->minflt = field[6];
    rec->majflt = field[8];
    rec->utime_ticks = field[10];
    rec->stime_ticks = field[11];
    rec->threads = (int32_t)field[16];
    rec->start_ticks = field[18];
    return 0;
}

static int parse_statm(const char *buf, struct alloclab_fleet_record *rec) {
    char *end;
    rec->vmsize_pages = strtoull(buf, &end, 10);
    if (end == buf) return -1;
    const char *p = end;
    rec->resident_pages = strtoull(p, &end, 10);
    return end == p ? -1 : 0;
}

static ssize_t read_fd(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    if (n > 0) buf[n] = 0;
    return n;
}

/* One process into rec; 0, or -1 when it is gone, a zombie, exiting, or unreadable. A process
 * whose descriptor fails keeps its slot (descriptor -1) until the tick's end, so probe chains hold.
 * kept_only: a pid not listed this tick (a unit's known member) is read only through descriptors
 * kept since it was listed, which cannot name another process under a reused pid, and only its
 * statm (sizes; stat's fields, CPU times among them, are those of its last listed tick). */
static int read_process(struct fleet_reader *r, int32_t pid, struct alloclab_fleet_record *rec, int kept_only) {
    char stat[1024], statm[256], path[64];
    struct proc_fds *e = &r->table[slot_of(r, pid)];
    if (e->pid == pid && e->seen == r->tick) return -1;          /* listed twice in one tick */
    if (kept_only) {
        if (!(e->pid == pid && e->fd >= 0)) return -1;
        int32_t unit = rec->unit;
        *rec = e->last;
        rec->unit = unit;
        e->seen = r->tick;
        if (read_fd(e->statm_fd, statm, sizeof statm) > 0 && parse_statm(statm, rec) == 0 && rec->vmsize_pages > 0)
            return 0;
        close_fds(e);                              /* zeros: a zombie; ESRCH: reaped */
        r->open--;
        return -1;
    }
    ssize_t n = -1;
    if (e->pid == pid && e->fd >= 0) {
        n = read_fd(e->fd, stat, sizeof stat);
        if (n <= 0) { close_fds(e); r->open--; }
        if (n <= 0 && kept_only) return -1;
    }
    int fresh = !(e->pid == pid && e->fd >= 0);
    struct proc_fds f = fresh ? (struct proc_fds){pid, -1, -1, 0} : *e;
    if (fresh) {
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        f.fd = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof path, "/proc/%d/statm", pid);
        f.statm_fd = f.fd >= 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        if (f.statm_fd < 0) { if (f.fd >= 0) close(f.fd); return -1; }
        n = read_fd(f.fd, stat, sizeof stat);
    }
    int ok = n > 0 && parse_stat(stat, n, rec) == 0 && rec->state != 'Z'
             && read_fd(f.statm_fd, statm, sizeof statm) > 0 && parse_statm(statm, rec) == 0
             && rec->vmsize_pages > 0                /* no address space: exiting, its memory already released */
             && (!fresh || read_fd(f.fd, stat, sizeof stat) > 0);   /* still the process statm was opened on */
    if (!fresh) {
        e->seen = r->tick;
        if (ok) e->last = *rec;
        return ok ? 0 : -1;
    }
    if (!ok || r->open >= r->max_open) {          /* not kept: read once, closed */
        close_fds(&f);
        return ok ? 0 : -1;
    }
    if (e->pid != pid) r->used++;
    f.seen = r->tick;
    f.last = *rec;
    *e = f;
    r->open++;
    return r->used * 2 > r->cap ? rebuild(r, r->cap * 2, 0) : 0;
}

static int push(struct fleet_reader *r, const struct alloclab_fleet_record *rec) {
    if (r->out_len == r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap * 2 : 1024;
        struct alloclab_fleet_record *grown = realloc(r->out, cap * sizeof *grown);
        if (!grown) return -1;
        r->out = grown;
        r->out_cap = cap;
    }
    r->out[r->out_len++] = *rec;
    return 0;
}

/* The whole of fd's file into r->buf from offset 0: its length, or -1 out of memory, -2 unreadable. */
static long read_all(struct fleet_reader *r, int fd) {
    size_t len = 0;
    for (;;) {                                      /* a cgroup with many members: read to the end */
        if (r->buf_cap - len < 4096) {
            char *grown = realloc(r->buf, r->buf_cap * 2);
            if (!grown) return -1;
            r->buf = grown;
            r->buf_cap *= 2;
        }
        ssize_t n = pread(fd, r->buf + len, r->buf_cap - len - 1, (off_t)len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -2;
        if (n == 0) break;
        len += (size_t)n;
    }
    r->buf[len] = 0;
    return (long)len;
}

/* A unit's members into r->buf: the length (0: none, or its cgroup is gone), -1 out of memory. */
static long read_members(struct fleet_reader *r, struct unit_file *u) {
    if (u->fd >= 0) {                               /* kept (v2) */
        long len = read_all(r, u->fd);
        if (len > 0 || len == -1) return len;
        close(u->fd);                               /* empty or unreadable: the unit may have a new cgroup at that path */
        u->fd = -1;
    }
    r->buf[0] = 0;
    u->fd = open(u->path, O_RDONLY | O_CLOEXEC);
    if (u->fd < 0) return 0;
    long len = read_all(r, u->fd);
    struct statfs fs;
    if (len < 0 || fstatfs(u->fd, &fs) != 0 || fs.f_type != CGROUP2_MAGIC) {   /* kept only on v2 (see the top) */
        close(u->fd);
        u->fd = -1;
    }
    return len == -2 ? 0 : len;
}

/* The unit's processes into r->out: its known members while they all still run and its membership
 * is not due; else (or when one of them is gone) its cgroup.procs read, and each member not read yet
 * this tick. 0, or -1 out of memory. */
static int read_unit(struct fleet_reader *r, int index) {
    struct unit_file *u = &r->procs[index];
    if (u->nmembers > 0 && r->tick < u->due) {
        int gone = 0;
        for (int i = 0; i < u->nmembers; i++) {
            struct alloclab_fleet_record rec = {.unit = index, .pid = u->members[i]};
            if (read_process(r, u->members[i], &rec, 1) != 0) gone = 1;
            else if (push(r, &rec) != 0) return -1;
        }
        if (!gone) return 0;                      /* else: who is in it now (a restart, a new child) */
    }
    long len = read_members(r, u);
    if (len < 0) return -1;
    r->buf[len] = 0;
    u->nmembers = 0;
    u->due = r->tick + (u->due ? r->membership_every : 1 + (uint64_t)index % r->membership_every);
    char *p = r->buf, *end;
    for (;;) {
        long pid = strtol(p, &end, 10);
        if (end == p) break;
        p = end;
        if (pid <= 0) continue;
        if (u->nmembers == u->members_cap) {
            int cap = u->members_cap ? u->members_cap * 2 : 4;
            int32_t *grown = realloc(u->members, (size_t)cap * sizeof *grown);
            if (!grown) return -1;
            u->members = grown;
            u->members_cap = cap;
        }
        u->members[u->nmembers++] = (int32_t)pid;
        struct alloclab_fleet_record rec = {.unit = index, .pid = (int32_t)pid};
        if (read_process(r, (int32_t)pid, &rec, 0) == 0 && push(r, &rec) != 0) return -1;
    }
    return 0;
}

/* Read the n units listed in `only` (none given: every unit, and then the descriptors of processes
 * not seen are closed); returns the number of records (then alloclab_fleet_records), or -1 out of
 * memory. A unit whose file is gone, or not set, has no records. */
API long alloclab_fleet_read(struct fleet_reader *r, const int32_t *only, int n) {
    r->tick++;
    r->out_len = 0;
    for (int k = 0; k < (only ? n : r->nunits); k++) {
        int u = only ? only[k] : k;
        if (u >= 0 && u < r->nunits && r->procs[u].path && read_unit(r, u) != 0) return -1;
    }
    if (!only && rebuild(r, r->used < r->cap / 8 && r->cap > 1024 ? r->cap / 2 : r->cap, 1) != 0)   /* closes what was not seen */
        return -1;
    return (long)r->out_len;
}

API const struct alloclab_fleet_record *alloclab_fleet_records(const struct fleet_reader *r) { return r->out; }

/* Descriptors held open (tests: processes that left are closed). */
API size_t alloclab_fleet_open_processes(const struct fleet_reader *r) { return r->open; }
