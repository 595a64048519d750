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

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

struct nrv_threadpool {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_t *threads;
    int n_workers;
    int started; /* workers actually created */
    atomic_ullong generation; /* bumped (release) once the job below is set */
    atomic_int stop;
    atomic_int sleepers; /* workers blocked on `wake` */
    /* the current job */
    nrv_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    atomic_int busy; /* workers still inside the current job */
};

/* A parallel region of a plan lasts microseconds: waking a sleeping thread through the
 * kernel costs tens of them in a VM. So workers (and the caller, waiting for them) spin on
 * the atomics for a while first and only then sleep; an idle session's threads sleep. */
#define SPIN_ROUNDS 20000
#define NRV_WORKER_STACK ((size_t)2 << 20) /* bytes of stack per worker thread */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_tasks(nrv_threadpool *p) {
    for (;;) {
        const long long t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) return;
        p->fn(p->ctx, (int64_t)t);
    }
}

nrv_fp_mode nrv_fp_flush_begin(void) {
#if defined(__x86_64__)
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15), DAZ (bit 6) */
    return csr;
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | ((uint64_t)1 << 24))); /* FZ */
    return fpcr;
#else
    return 0;
#endif
}

void nrv_fp_flush_end(nrv_fp_mode saved) {
#if defined(__x86_64__)
    _mm_setcsr((unsigned)saved);
#elif defined(__aarch64__)
    __asm__ __volatile__("msr fpcr, %0" : : "r"(saved));
#else
    (void)saved;
#endif
}

static void *worker(void *arg) {
    nrv_threadpool *p = arg;
    unsigned long long seen = 0;
    (void)nrv_fp_flush_begin(); /* the pool only runs plan ops (plan_ops.h) */
    for (;;) {
        for (int i = 0; i < SPIN_ROUNDS && atomic_load(&p->generation) == seen && !atomic_load(&p->stop); i++)
            cpu_relax();
        if (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = atomic_load(&p->generation);
        run_tasks(p);
        if (atomic_fetch_sub(&p->busy, 1) == 1) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->busy, 0);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n_workers = n_threads - 1;
    /* Kernels stage blocks on the stack (up to ~100 KiB: conv_integer, linear_w8a8): workers
     * get NRV_WORKER_STACK whatever the C library's default (musl's is 128 KiB). */
    pthread_attr_t attr;
    const int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, NRV_WORKER_STACK);
    for (int i = 0; i < p->n_workers; i++) {
        if (pthread_create(&p->threads[i], have_attr ? &attr : NULL, worker, p) != 0) {
            if (have_attr) pthread_attr_destroy(&attr);
            nrv_threadpool_free(p);
            return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "thread pool: cannot start thread %d of %d", i + 1, n_threads);
        }
        p->started++;
    }
    if (have_attr) pthread_attr_destroy(&attr);
    *out = p;
    return NRV_OK;
}

void nrv_threadpool_free(nrv_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
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
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->started);
    atomic_fetch_add(&p->generation, 1); /* publishes the job (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    run_tasks(p);
    for (int i = 0; i < SPIN_ROUNDS && atomic_load(&p->busy) > 0; i++) cpu_relax();
    if (atomic_load(&p->busy) > 0) {
        pthread_mutex_lock(&p->lock);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
}
