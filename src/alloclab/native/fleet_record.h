/* fleet_record.h — the one definition of the fleet collector's process record: written by
 * fleet_reader.c (liballoclab_fleet.so), read by alloclab/fleet/fleetread.py, which builds its struct
 * layout from alloclab_fleet_record_layout() (generated from this list) and checks the size.
 * X(C type, name, array suffix, Python struct code). The record is packed: no padding. */
#ifndef ALLOCLAB_FLEET_RECORD_H
#define ALLOCLAB_FLEET_RECORD_H

#include <stdint.h>

#define ALLOCLAB_FLEET_RECORD_FIELDS(X) \
    X(int32_t, unit, , "i")              /* index of the unit, as set with alloclab_fleet_set_unit */ \
    X(int32_t, pid, , "i") \
    X(int32_t, ppid, , "i") \
    X(int32_t, pgrp, , "i") \
    X(int32_t, threads, , "i") \
    X(uint64_t, start_ticks, , "Q")      /* with pid, the process's identity */ \
    X(uint64_t, utime_ticks, , "Q") \
    X(uint64_t, stime_ticks, , "Q") \
    X(uint64_t, minflt, , "Q") \
    X(uint64_t, majflt, , "Q") \
    X(uint64_t, vmsize_pages, , "Q") \
    X(uint64_t, resident_pages, , "Q") \
    X(char, state, , "c") \
    X(char, comm, [16], "16s")           /* TASK_COMM_LEN; NUL-padded */

#define ALLOCLAB_FLEET_FIELD(type, name, dims, code) type name dims;
struct __attribute__((packed)) alloclab_fleet_record {
    ALLOCLAB_FLEET_RECORD_FIELDS(ALLOCLAB_FLEET_FIELD)
};
#undef ALLOCLAB_FLEET_FIELD

#endif
