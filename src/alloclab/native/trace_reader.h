/* trace_reader.h — decodes a whole trace (trace_format.h) into per-thread event arrays, checking
 * every length and value so that a truncated or corrupted file yields an error message, never a
 * crash. Used by the replayer and by the fuzz target. */
#ifndef TRACE_READER_H
#define TRACE_READER_H
#include "trace_format.h"

typedef struct {
    uint32_t id;           /* the recorder's thread number */
    trace_event *ev;
    size_t n, cap;
} trace_thread;

typedef struct {
    uint64_t start_realtime_ns;
    uint32_t pid, tick_ns;       /* event timestamps are converted to ns while reading */
    trace_thread *threads;
    uint32_t nthreads;
    size_t nevents;
    char error[256];
} trace_data;

/* 0 on success; -1 with out->error set. The buffer is not kept. */
int trace_parse(const uint8_t *buf, size_t n, trace_data *out);
int trace_read_file(const char *path, trace_data *out);
void trace_data_free(trace_data *t);
#endif
