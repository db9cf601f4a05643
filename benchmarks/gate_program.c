/* A program with a fixed input for benchmarks/gate_decisive.py: a compiler-like pass over N
 * "modules" (a fixed-seed PRNG: the same work every run), each allocating mixed-size objects of
 * which most are freed and ~5% survive, so the heap ends fragmented as a real build's does.
 *   gate_program N [hold]     N modules; "hold": keep the memory until stopped (else exit)
 * The candidate of a +10% comparison runs 1.1 N modules. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }

int main(int argc, char **argv) {
    long modules = argc > 1 ? atol(argv[1]) : 2000;
    int hold = argc > 2 && !strcmp(argv[2], "hold");
    enum { PER = 400 };
    void **kept = calloc((size_t)modules * PER, sizeof *kept);
    void *tmp[PER];
    long nkept = 0;
    for (long m = 0; m < modules; m++) {
        for (int i = 0; i < PER; i++) {
            size_t size = 16 + (next() % 8 == 0 ? next() % 4096 : next() % 256);
            tmp[i] = malloc(size);
            memset(tmp[i], (int)i, size);
        }
        for (int i = 0; i < PER; i++) {
            if (next() % 20 == 0) kept[nkept++] = tmp[i];
            else free(tmp[i]);
        }
    }
    if (hold)
        for (;;) pause();
    return kept[0] == NULL;
}
