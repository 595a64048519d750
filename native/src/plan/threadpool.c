/* threadpool.c — the small pool of worker threads a session owns for its big ops.
 *
 * nrv_parallel_for hands out task indices from an atomic counter to the workers and to the
 * calling thread, and returns when every task has finished. Which thread runs which task is
 * not fixed; ops make results independent of the thread count by deriving their task split
 * from the problem's shape only (see op_linalg.c, op_conv.c), so threads = 1 and threads = N
 * compute every element with the same instructions in the same order.
 *
 * The caller waits for tasks, never for threads: a worker the OS has not scheduled (its core
 * busy with another process: an audio thread, a control loop) has claimed nothing, and the
 * caller simply runs every task itself. Waiting for each worker to check in cost a whole
 * scheduler slice, ~1 ms, per parallel op on a 2-core machine with one core busy (measured:
 * openWakeWord's 30 us classifiers took 1 ms at 2 threads). So a claim names its job: the
 * job number and the next task index share one 64-bit word, claimed by compare-and-swap, and
 * a worker that wakes late finds its job's tasks all claimed (or a newer job) and claims
 * nothing it should not.
 *
 * A worker checks a claim against n_tasks before its compare-and-swap, and may read the
 * next job's n_tasks while the word still names the finished job. So the caller first
 * closes the finished job's word (task index TASK_CLOSED: past any n_tasks, and no longer
 * the value a stale compare-and-swap expects), then writes the next job's fields, then
 * publishes it: a worker that sees the new n_tasks sees the closed word too.
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
    /* (job number << 32) | next task index; a new job is published by storing it (release)
     * after the fields below are set. */
    atomic_ullong claim;
    atomic_int stop;
    atomic_int sleepers; /* workers blocked on `wake` */
    atomic_int caller_asleep; /* the caller is blocked on `done` */
    /* the current job: fn and ctx are read only by a thread holding one of its tasks */
    nrv_task_fn fn;
    void *ctx;
    atomic_llong n_tasks;
    atomic_llong finished; /* tasks of the current job that have returned */
};

#define JOB_OF(word) ((word) >> 32)
#define TASK_OF(word) ((long long)((word) & 0xffffffffull))
#define TASK_CLOSED 0xffffffffull /* a job's word once the job is over: nothing to claim */

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

/* Runs tasks of job `job` until none is left to claim. A task is claimed only while `job` is
 * the current one, and the caller cannot publish another while a claimed task is unfinished,
 * so fn, ctx and n_tasks are that job's for as long as this thread holds a task. */
static void run_tasks(nrv_threadpool *p, unsigned long long job) {
    unsigned long long word = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if (JOB_OF(word) != job) return;
        /* acquire, against the caller's release store: a newer job's n_tasks comes with the
         * closed word, so the compare-and-swap below fails for it */
        const long long t = TASK_OF(word), n_tasks = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
        if (t >= n_tasks) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &word, word + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* `word` now holds the current value: try again */
        p->fn(p->ctx, (int64_t)t);
        /* seq_cst, against the caller's store of caller_asleep then load of finished */
        if (atomic_fetch_add(&p->finished, 1) + 1 == n_tasks && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
        word = atomic_load_explicit(&p->claim, memory_order_acquire);
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
    unsigned long long seen = 0; /* the last job this worker looked at */
    (void)nrv_fp_flush_begin(); /* the pool only runs plan ops (plan_ops.h) */
    for (;;) {
        for (int i = 0; i < SPIN_ROUNDS && JOB_OF(atomic_load(&p->claim)) == seen && !atomic_load(&p->stop); i++)
            cpu_relax();
        if (JOB_OF(atomic_load(&p->claim)) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (JOB_OF(atomic_load(&p->claim)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = JOB_OF(atomic_load_explicit(&p->claim, memory_order_acquire));
        run_tasks(p, seen);
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
    atomic_init(&p->claim, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_asleep, 0);
    atomic_init(&p->n_tasks, 0);
    atomic_init(&p->finished, 0);
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
    /* (a task index must fit the claim word's low 32 bits) */
    if (!p || n_tasks <= 1 || n_tasks > (int64_t)0x7fffffff) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t);
        return;
    }
    /* Every task of the previous job has finished, so no thread runs one of them now; a
     * worker may still be about to try a claim on that job: close it before touching its
     * fields (see the top of this file). */
    const unsigned long long previous = JOB_OF(atomic_load(&p->claim));
    atomic_store(&p->claim, (previous << 32) | TASK_CLOSED);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    /* job numbers wrap at 2^32 (a robot's session runs 2^32 parallel ops in about a day at
     * 20 us each): kept in the word's 32 bits, so the caller's claims still name its job */
    const unsigned long long job = (previous + 1) & 0xffffffffull;
    atomic_store(&p->claim, job << 32); /* publishes the job (seq_cst: after the fields) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    run_tasks(p, job);
    /* Every task is claimed; wait only for those still running on a worker. */
    for (int i = 0; i < SPIN_ROUNDS && atomic_load(&p->finished) < n_tasks; i++) cpu_relax();
    if (atomic_load(&p->finished) < n_tasks) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->caller_asleep, 1);
        while (atomic_load(&p->finished) < n_tasks) pthread_cond_wait(&p->done, &p->lock);
        atomic_store(&p->caller_asleep, 0);
        pthread_mutex_unlock(&p->lock);
    }
}
