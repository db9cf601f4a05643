/* fuzz_trace_reader — libFuzzer target for the trace reader: any byte string must give either a
 * decoded trace or an error message, never a crash, hang or sanitizer report.
 *   make -C tests/fuzz OUT=$PWD/build/fuzz && build/fuzz/fuzz_trace_reader -max_total_time=300
 * (see benchmarks/README.md; not part of the default test run) */
#include "trace_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    trace_data t;
    trace_parse(data, size, &t);
    trace_data_free(&t);
    return 0;
}
