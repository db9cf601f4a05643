/* trace_reader.h — decodes a whole trace (trace_format.h) into per-thread event arrays, checking
 * every length and value so that a truncated or corrupted file yields an error message, never a
 * crash. Used by the replayer and by the fuzz target. */
#ifndef TRACE_READER_H
#define TRACE_READER_H
#include "trace_format.h"

/* Limits a file must respect to be read at all (docs/reference/trace-format.md, "Limits"):
 *  - threads: at most TRACE_MAX_THREADS distinct thread numbers;
 *  - events: at most TRACE_EVENTS_BASE + TRACE_EVENTS_PER_BYTE x the file's size, and never over
 *    TRACE_MAX_EVENTS. Recordings measured here take 0.43-3.5 bytes per event (at most 2.3 events
 *    per byte, a bare malloc/free loop; benchmarks/README.md); a zstd frame of zeros can claim
 *    ~100,000 events per byte, and decoded events cost memory (~143 bytes each through the reader
 *    and the replay schedule, benchmarks/trace_memory_ceiling.py), so a file claiming more is
 *    refused as not a recording. 1 M + 4 per byte keeps any file of at most 1 MB under 1 GB.
 *  - a block's raw length at most 20 + TRACE_MAX_EVENT_BYTES per event it declares (checked
 *    before decompressing, so decompression work is bounded by the event budget too). */
#define TRACE_MAX_THREADS (1u << 16)
#define TRACE_EVENTS_BASE ((size_t)1 << 20)
#define TRACE_EVENTS_PER_BYTE ((size_t)4)
#define TRACE_MAX_EVENTS ((size_t)1 << 31)
#define TRACE_MAX_EVENT_BYTES 64u          /* REALLOC: op, 3 split values (ts, free code, size: 11 bytes each), 3 varints (old, reuse, new) */
/* Requests above this are corruption, not a recording (the replayer's own, lower, limits are
 * policy: replay --max-alloc). */
#define TRACE_MAX_SIZE (1ull << 40)

typedef struct {
    uint32_t id;           /* the recorder's thread number */
    trace_event *ev;
    size_t n, cap;
    int exited;            /* its THREAD_EXIT was read: nothing may follow */
} trace_thread;

typedef struct {
    uint64_t start_realtime_ns;
    uint32_t pid, tick_ns;       /* event timestamps are converted to ns while reading */
    trace_thread *threads;
    uint32_t nthreads, threads_cap, last_thread;
    uint32_t *id_slots;          /* thread number -> index + 1 (open addressing) */
    size_t id_cap;
    size_t nevents;
    uint32_t version;
    size_t truncated_bytes;      /* an unfinished recording's partial last block, ignored */
    live_table live;             /* versions 2-3: live allocations while reading (trace_format.h) */
    block_state *block_state;    /* version 3: the block's recently freed blocks, while reading */
    char error[256];
} trace_data;

/* 0 on success; -1 with out->error set. The buffer is not kept. */
int trace_parse(const uint8_t *buf, size_t n, trace_data *out);
int trace_read_file(const char *path, trace_data *out);
void trace_data_free(trace_data *t);
#endif
