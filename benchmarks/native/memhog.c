/* memhog — benchmark helper: allocate and touch N MiB, optionally map M MiB more left untouched
 * (a multi-GB VmSize at no RSS cost), then sleep (a process of a known size).
 *   memhog MB [MAPPED_MB [READY_FD]]
 * With READY_FD it writes one byte there instead of "ready" on stdout (thousands of helpers share
 * one pipe), and it dies with its parent (PR_SET_PDEATHSIG): a benchmark killed leaves no helper. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long mb = argc > 1 ? atol(argv[1]) : 30;
    long mapped = argc > 2 ? atol(argv[2]) : 0;
    int ready_fd = argc > 3 ? atoi(argv[3]) : -1;
    if (ready_fd >= 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) return 1;       /* the parent is already gone */
    }
    size_t chunk = 1 << 20;
    for (long i = 0; i < mb; i++) {          /* many 1 MiB blocks: a realistic page-table spread */
        char *p = malloc(chunk);
        if (!p) return 1;
        memset(p, (int)i, chunk);
    }
    if (mapped > 0 && mmap(NULL, (size_t)mapped << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0) == MAP_FAILED)
        return 1;
    if (ready_fd >= 0) {
        if (write(ready_fd, "r", 1) != 1) return 1;
        close(ready_fd);
    } else {
        printf("ready\n");
        fflush(stdout);
    }
    pause();
    return 0;
}
