/* alloclab_stats.h — the side channel from a workload to alloclab.
 *
 * A workload that wants alloclab to know its throughput and its live requested bytes maps the
 * file named by $ALLOCLAB_STATS (64 bytes) and updates it under a sequence lock: `seq` is odd
 * while a write is under way. alloclab reads the file with one pread and keeps a snapshot only
 * when `seq` is even and equal at both ends, so a workload killed mid-write leaves the last good
 * value readable. The layout is mirrored in alloclab/run/workloads.py (STATS_FORMAT); change both.
 * Test hook: with ALLOCLAB_STATS_CRASH_AFTER=N the built-in workloads SIGKILL themselves in the
 * middle of their (N+1)th write, leaving a torn record behind.
 */
#ifndef ALLOCLAB_STATS_H
#define ALLOCLAB_STATS_H
#include <stdint.h>

#define ALLOCLAB_STATS_MAGIC 0x3154415453434c41ULL /* "ALCSTAT1" little-endian */
#define ALLOCLAB_STATS_VERSION 1

struct alloclab_stats {
    uint64_t magic;
    uint32_t version;
    uint32_t phase;          /* 0 warm-up, 1 load, 2 idle, 3 done */
    uint64_t seq;            /* odd while being written */
    uint64_t ops;            /* operations completed since start */
    uint64_t live_bytes;     /* bytes currently allocated and not freed, as requested */
    uint64_t peak_live_bytes;
    uint64_t updated_ns;     /* CLOCK_MONOTONIC of the last update */
    uint64_t seq_end;        /* copy of seq written last */
};

/* Open (creating) the channel named by $ALLOCLAB_STATS; NULL when unset or on error. */
struct alloclab_stats *alloclab_stats_open(void);
/* Publish a snapshot; single writer. */
void alloclab_stats_publish(struct alloclab_stats *s, uint32_t phase, uint64_t ops,
                            uint64_t live, uint64_t peak);
#endif
