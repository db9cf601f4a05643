/* alloclab_introspect.h — the record the introspection helper (introspect.c) publishes.
 *
 * One file per process, $ALLOCLAB_INTROSPECT/<pid>-<start ticks>.bin, mapped shared by the
 * helper and rewritten in place at every collection under a sequence lock: `seq` is odd while a
 * collection is being written. A reader takes seq (one read), the whole record (a second read),
 * seq again (a third read) and keeps the record only when both are equal and even.
 * Figures are bytes; -1 means the allocator does not tell. Mirrored in alloclab/capture/introspect.py
 * (HEADER, FIELDS); change both.
 */
#ifndef ALLOCLAB_INTROSPECT_H
#define ALLOCLAB_INTROSPECT_H
#include <stdint.h>

#define ALLOCLAB_INTROSPECT_MAGIC 0x3154434550534e49ULL /* "INSPECT1" little-endian */
#define ALLOCLAB_INTROSPECT_VERSION 1
#define ALLOCLAB_INTROSPECT_TEXT (28 * 1024)

enum { AI_FAMILY_UNKNOWN = 0, AI_FAMILY_GLIBC = 1, AI_FAMILY_JEMALLOC = 2, AI_FAMILY_MIMALLOC = 3,
       AI_FAMILY_TCMALLOC = 4 };
enum { AI_TEXT_NONE = 0, AI_TEXT_MALLOC_INFO = 1, AI_TEXT_MI_STATS = 2 };

enum {
    AI_IN_USE,          /* handed to the program (allocator's view; size classes included) */
    AI_BINS,            /* free in bins / within active pages: glibc free chunks below top, jemalloc active-allocated, tcmalloc caches */
    AI_TOP,             /* glibc: releasable top of the main arena (keepcost) */
    AI_DIRTY,           /* jemalloc dirty pages; tcmalloc page heap free */
    AI_MUZZY,           /* jemalloc muzzy pages (MADV_FREE'd, still counted until reclaimed) */
    AI_RETAINED,        /* jemalloc retained / tcmalloc unmapped: virtual, not resident */
    AI_MAPPED,          /* total the allocator has mapped for the heap */
    AI_RESIDENT,        /* the allocator's own resident estimate (jemalloc) */
    AI_COMMITTED,       /* mimalloc committed */
    AI_METADATA,        /* jemalloc metadata */
    AI_ARENAS,          /* arena count (jemalloc; glibc from the malloc_info text) */
    AI_MMAPPED,         /* glibc: chunks served by mmap directly */
    AI_FREE_CHUNKS,     /* glibc: number of free chunks (ordblks + smblks) */
    AI_FREE_TOTAL,      /* glibc fordblks: all free bytes in the arenas, top included */
    AI_DIRTY_DECAY_MS,  /* jemalloc opt.dirty_decay_ms */
    AI_MUZZY_DECAY_MS,  /* jemalloc opt.muzzy_decay_ms */
    AI_PEAK_COMMITTED,  /* mimalloc peak commit */
    AI_NFIELDS = 24
};

struct alloclab_introspect {
    uint64_t magic;
    uint32_t version;
    uint32_t family;
    uint64_t seq;               /* odd while being written */
    uint64_t t_ns;              /* CLOCK_REALTIME of this collection */
    uint64_t collections;
    uint64_t helper_cpu_ns;     /* the helper thread's CPU time so far (all collections) */
    uint64_t last_cost_ns;      /* CPU time of the last collection */
    uint64_t interval_ns;       /* cadence in force: the requested one, or slower to stay in budget */
    int64_t field[AI_NFIELDS];
    char malloc_file[192];      /* the object that serves malloc (dladdr) */
    uint32_t text_kind;
    uint32_t text_len;
    char text[ALLOCLAB_INTROSPECT_TEXT];
};
#endif
