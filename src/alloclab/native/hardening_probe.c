/* hardening_probe — what the malloc this process runs does with heap misuse.
 *
 * Run with LD_PRELOAD=LIB and one mode; alloclab runs each mode in its own process and reads the
 * outcome (exit status, the allocator's own message on stderr, and this program's JSON line):
 *   info          the allocator's own hardening settings it can report (jemalloc mallctl opt.junk,
 *                 opt.zero, config.debug); prints one JSON object
 *   double-free   frees one block twice, then asks for two blocks of that size: an allocator that
 *                 detects it aborts or complains; one that does not may hand the same block out twice
 *   invalid-free  frees a pointer into the middle of a block
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

/* volatile: keeps the compiler from reasoning about the misuse below */
static void *volatile sink;

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "info";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (strcmp(mode, "info") == 0) {
        mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
        if (!mallctl) mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "je_mallctl");
        printf("{");
        if (mallctl) {
            const char *junk = NULL;
            bool zero = false, debug = false;
            size_t sz = sizeof junk;
            if (mallctl("opt.junk", &junk, &sz, NULL, 0) == 0 && junk) printf("\"jemalloc_opt_junk\": \"%s\", ", junk);
            sz = sizeof zero;
            if (mallctl("opt.zero", &zero, &sz, NULL, 0) == 0) printf("\"jemalloc_opt_zero\": %s, ", zero ? "true" : "false");
            sz = sizeof debug;
            if (mallctl("config.debug", &debug, &sz, NULL, 0) == 0) printf("\"jemalloc_config_debug\": %s, ", debug ? "true" : "false");
        }
        printf("\"ok\": true}\n");
        return 0;
    }
    if (strcmp(mode, "double-free") == 0) {
        char *p = malloc(48);
        sink = p;
        free(p);
        free(sink);
        void *a = malloc(48), *b = malloc(48);
        printf("{\"same_block_twice\": %s}\n", a == b ? "true" : "false");
        return 0;
    }
    if (strcmp(mode, "invalid-free") == 0) {
        char *p = malloc(256);
        sink = p + 24;
        free(sink);
        void *a = malloc(200);
        printf("{\"returned_interior\": %s}\n", a == (void *)(p + 24) ? "true" : "false");
        return 0;
    }
    fprintf(stderr, "usage: hardening_probe info|double-free|invalid-free\n");
    return 2;
}
