/* objvec.h — a growable list of (pointer, size) allocations whose own array is accounted too, so
 * a workload's live bytes can be re-counted by walking its lists (--verify-live). */
#ifndef OBJVEC_H
#define OBJVEC_H
#include "wl_common.h"

typedef struct { void **p; size_t *n; size_t len, cap; } objvec;

static inline void ov_push(objvec *v, void *p, size_t n) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        v->p = wl_realloc(v->p, v->cap * sizeof(void *), cap * sizeof(void *));
        v->n = wl_realloc(v->n, v->cap * sizeof(size_t), cap * sizeof(size_t));
        v->cap = cap;
    }
    v->p[v->len] = p;
    v->n[v->len++] = n;
}

static inline void *ov_alloc(objvec *v, size_t n) {
    void *p = wl_alloc(n);
    ov_push(v, p, n);
    return p;
}

/* Free element i (swap-remove). */
static inline void ov_drop(objvec *v, size_t i) {
    wl_free(v->p[i], v->n[i]);
    v->p[i] = v->p[--v->len];
    v->n[i] = v->n[v->len];
}

static inline void ov_clear(objvec *v) {
    for (size_t i = 0; i < v->len; i++) wl_free(v->p[i], v->n[i]);
    wl_free(v->p, v->cap * sizeof(void *));
    wl_free(v->n, v->cap * sizeof(size_t));
    *v = (objvec){0};
}

static inline uint64_t ov_bytes(const objvec *v) {
    uint64_t sum = (uint64_t)v->cap * (sizeof(void *) + sizeof(size_t));
    for (size_t i = 0; i < v->len; i++) sum += v->n[i];
    return sum;
}
#endif
