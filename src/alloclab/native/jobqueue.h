/* jobqueue.h — a mutex/condvar FIFO of pointers, the hand-off between a main thread and workers
 * (Tor's cpuworker reply queue, a build tool's task queue). */
#ifndef JOBQUEUE_H
#define JOBQUEUE_H
#include <pthread.h>
#include <stdlib.h>

typedef struct jq_node { void *item; struct jq_node *next; } jq_node;
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    jq_node *head, *tail;
    int closed;
    size_t len;
} jobqueue;

static inline void jq_init(jobqueue *q) {
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->head = q->tail = NULL;
    q->closed = 0;
    q->len = 0;
}

/* Queue nodes are bookkeeping, not workload memory: plain malloc, not accounted. */
static inline void jq_push(jobqueue *q, void *item) {
    jq_node *n = malloc(sizeof *n);
    if (!n) abort();
    n->item = item;
    n->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = n; else q->head = n;
    q->tail = n;
    q->len++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Blocking pop; NULL once the queue is closed and empty. */
static inline void *jq_pop(jobqueue *q, int block) {
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closed && block) pthread_cond_wait(&q->cv, &q->mu);
    jq_node *n = q->head;
    void *item = NULL;
    if (n) {
        q->head = n->next;
        if (!q->head) q->tail = NULL;
        q->len--;
        item = n->item;
    }
    pthread_mutex_unlock(&q->mu);
    free(n);
    return item;
}

static inline void jq_close(jobqueue *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
#endif
