/* probe — asks the malloc this process really uses who it is.
 *
 * Run with LD_PRELOAD=LIB. Prints one JSON object: the file that serves `malloc` (dladdr), the
 * allocator family found by its own API, and the version the library reports about itself
 * (mi_version, mallctl("version"), tc_version, gnu_get_libc_version). Nothing is guessed from
 * file names here; alloclab compares these answers with what the experiment asked for.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*mi_version_fn)(void);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef const char *(*tc_version_fn)(int *, int *, const char **);

static void json_str(const char *key, const char *v, int comma) {
    printf("\"%s\": ", key);
    if (!v) { printf("null"); }
    else {
        putchar('"');
        for (const char *c = v; *c; c++) {
            if (*c == '"' || *c == '\\') putchar('\\');
            if ((unsigned char)*c >= 0x20) putchar(*c);
        }
        putchar('"');
    }
    if (comma) printf(", ");
}

int main(void) {
    void *p = malloc(100);                 /* make sure the allocator is initialised */
    free(p);
    Dl_info info = {0};
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    const char *malloc_file = (m && dladdr(m, &info)) ? info.dli_fname : NULL;

    char version[128] = "";
    const char *family = "glibc";
    mi_version_fn miv = (mi_version_fn)dlsym(RTLD_DEFAULT, "mi_version");
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    if (!mallctl) mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "je_mallctl");
    tc_version_fn tcv = (tc_version_fn)dlsym(RTLD_DEFAULT, "tc_version");
    if (miv) {
        family = "mimalloc";
        snprintf(version, sizeof version, "%d", miv());
    } else if (mallctl) {
        const char *v = NULL;
        size_t sz = sizeof v;
        family = "jemalloc";
        if (mallctl("version", &v, &sz, NULL, 0) == 0 && v) snprintf(version, sizeof version, "%s", v);
    } else if (tcv) {
        int major = 0, minor = 0;
        const char *patch = NULL;
        family = "tcmalloc";
        snprintf(version, sizeof version, "%s", tcv(&major, &minor, &patch));
    } else if (dlsym(RTLD_DEFAULT, "rpmalloc_initialize")) {
        family = "rpmalloc";
    } else if (dlsym(RTLD_DEFAULT, "sn_rust_alloc") || dlsym(RTLD_DEFAULT, "sn_malloc") ||
               (malloc_file && strstr(malloc_file, "snmalloc"))) {
        family = "snmalloc";
    } else {
        snprintf(version, sizeof version, "%s", gnu_get_libc_version());
    }
    printf("{");
    json_str("malloc_file", malloc_file, 1);
    json_str("family", family, 1);
    json_str("version", version[0] ? version : NULL, 1);
    json_str("glibc", gnu_get_libc_version(), 0);
    printf("}\n");
    return 0;
}
