/* memhog — benchmark helper: allocate and touch N MiB, then sleep (a process of a known size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long mb = argc > 1 ? atol(argv[1]) : 30;
    size_t chunk = 1 << 20;
    for (long i = 0; i < mb; i++) {          /* many 1 MiB blocks: a realistic page-table spread */
        char *p = malloc(chunk);
        if (!p) return 1;
        memset(p, (int)i, chunk);
    }
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
