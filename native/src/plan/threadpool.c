/* threadpool.c — the small pool of worker threads a session owns for its big ops.
 *
 * nrv_parallel_for hands out task indices from an atomic counter to the workers and to the
 * calling thread, and returns when every task has finished. Which thread runs which task is
 * not fixed; ops make results independent of the thread count by deriving their task split
 * from the problem's shape only (see op_linalg.c, op_conv.c), so threads = 1 and threads = N
 * compute every element with the same instructions in the same order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "plan_ops.h"

struct nrv_threadpool {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_t *threads;
    int n_workers;
    int started;      /* workers actually created */
    uint64_t generation;
    int stop;
    /* the current job */
    nrv_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    int busy; /* workers still inside the current job */
};

static void run_tasks(nrv_threadpool *p) {
    for (;;) {
        const long long t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) return;
        p->fn(p->ctx, (int64_t)t);
    }
}

static void *worker(void *arg) {
    nrv_threadpool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        run_tasks(p);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

nrv_status nrv_threadpool_create(int n_threads, nrv_threadpool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return nrv_fail(NRV_ERR_INVALID_ARG, "threads must be in [1, 256], got %d", n_threads);
    if (n_threads == 1) return NRV_OK; /* no pool: ops run serially */
    nrv_threadpool *p = nrv_sys_alloc(64, sizeof *p);
    if (!p) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    memset(p, 0, sizeof *p);
    p->threads = nrv_sys_alloc(64, (size_t)(n_threads - 1) * sizeof(pthread_t));
    if (!p->threads) {
        nrv_sys_free(p);
        return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n_workers = n_threads - 1;
    for (int i = 0; i < p->n_workers; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            nrv_threadpool_free(p);
            return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "thread pool: cannot start thread %d of %d", i + 1, n_threads);
        }
        p->started++;
    }
    *out = p;
    return NRV_OK;
}

void nrv_threadpool_free(nrv_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    nrv_sys_free(p->threads);
    nrv_sys_free(p);
}

int nrv_threadpool_size(const nrv_threadpool *p) { return p ? p->n_workers + 1 : 1; }

void nrv_parallel_for(nrv_threadpool *p, int64_t n_tasks, nrv_task_fn fn, void *ctx) {
    if (!p || n_tasks <= 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
