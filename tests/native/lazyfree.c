/* Frees memory the way allocators that use MADV_FREE do, so the sampler's LazyFree figure can be
 * checked against a known size: maps --mb MB of anonymous memory, touches every page, hands
 * --free-mb of it back with madvise(MADV_FREE), prints "ready" and sleeps --seconds. The freed
 * pages stay in RSS (as LazyFree in smaps_rollup) until the kernel needs the memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long mb = 64, free_mb = 32, seconds = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--mb")) mb = v;
        else if (!strcmp(argv[i], "--free-mb")) free_mb = v;
        else if (!strcmp(argv[i], "--seconds")) seconds = v;
        else { fprintf(stderr, "usage: lazyfree [--mb N] [--free-mb N] [--seconds N]\n"); return 2; }
    }
    if (mb <= 0 || free_mb < 0 || free_mb > mb || seconds < 0) {
        fprintf(stderr, "lazyfree: need 0 <= --free-mb <= --mb, --mb > 0, --seconds >= 0\n");
        return 2;
    }
    size_t len = (size_t)mb << 20, free_len = (size_t)free_mb << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("lazyfree: mmap"); return 1; }
    long page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < len; off += (size_t)page) p[off] = 1;
    if (free_len && madvise(p, free_len, MADV_FREE) != 0) { perror("lazyfree: madvise(MADV_FREE)"); return 1; }
    printf("ready\n");
    fflush(stdout);
    sleep((unsigned)seconds);
    return 0;
}
