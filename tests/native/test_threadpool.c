/* test_threadpool.c — nrv_parallel_for runs every task of every job exactly once, with that
 * job's function and context, whatever the workers' timing.
 *
 * The pool lets a worker that wakes late find its job finished (the caller ran the tasks
 * itself) and go on to a newer one; a claim that mixed two jobs would run a task twice,
 * skip one, or run it with the wrong context. So: many short jobs back to back (workers
 * are mostly late for them), tasks of uneven length, pools of 2-5 threads, and after each
 * job every count checked while the next job's memory is a different buffer.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nrv_test.h"
#include "plan/plan_ops.h"

#define MAX_TASKS 300

typedef struct job {
    uint32_t id;
    atomic_int runs[MAX_TASKS];     /* times each task ran */
    atomic_uint seen_id[MAX_TASKS]; /* the job id each run found in its context */
    int spin;                       /* busy work per task: uneven task lengths */
} job;

static void task(void *ctx, int64_t t) {
    job *j = ctx;
    volatile uint64_t sink = 0;
    for (int i = 0; i < j->spin * (int)(t % 7 + 1); i++) sink += (uint64_t)i * 2654435761u;
    atomic_fetch_add(&j->runs[t], 1);
    atomic_store(&j->seen_id[t], j->id);
}

/* Runs `n_jobs` jobs on a pool of `threads`; returns the number of jobs that went wrong. */
static int stress(int threads, int n_jobs, int max_spin) {
    nrv_threadpool *pool = NULL;
    NRV_EXPECT_STATUS(nrv_threadpool_create(threads, &pool), NRV_OK);
    NRV_EXPECT(nrv_threadpool_size(pool) == threads, "pool of %d reports %d", threads, nrv_threadpool_size(pool));
    static job jobs[2]; /* alternated, so a stale task would land in the other one's counts */
    static const int64_t sizes[] = {2, 3, 5, 8, 13, 64, 97, MAX_TASKS};
    int bad = 0;
    for (int k = 0; k < n_jobs; k++) {
        job *j = &jobs[k & 1];
        const int64_t n = sizes[nrv_test_u64() % (sizeof sizes / sizeof sizes[0])];
        j->id = (uint32_t)k + 1;
        j->spin = (int)(nrv_test_u64() % (uint64_t)(max_spin / 50 + 1)) * 50;
        for (int t = 0; t < MAX_TASKS; t++) {
            atomic_store(&j->runs[t], 0);
            atomic_store(&j->seen_id[t], 0);
        }
        nrv_parallel_for(pool, n, task, j);
        int wrong = 0;
        for (int64_t t = 0; t < MAX_TASKS; t++) {
            const int want = t < n ? 1 : 0;
            if (atomic_load(&j->runs[t]) != want || (want && atomic_load(&j->seen_id[t]) != j->id)) wrong++;
        }
        if (wrong && bad < 5)
            fprintf(stderr, "threads %d job %d (%lld tasks): %d tasks ran other than once with their job\n", threads,
                    k, (long long)n, wrong);
        bad += wrong != 0;
    }
    nrv_threadpool_free(pool);
    return bad;
}

/* The workers do take part (the pool is not running everything on the caller): a task on the
 * caller waits, up to 10 s, for a worker to take one of the others. Counted, not timed. */
typedef struct slow_job {
    atomic_int on_workers;
    pthread_t caller;
} slow_job;

static void slow_task(void *ctx, int64_t t) {
    slow_job *j = ctx;
    (void)t;
    if (!pthread_equal(pthread_self(), j->caller)) {
        atomic_fetch_add(&j->on_workers, 1);
        return;
    }
    const struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 10000 && atomic_load(&j->on_workers) == 0; i++) nanosleep(&ms, NULL);
}

static void test_workers_take_part(void) {
    nrv_threadpool *pool = NULL;
    NRV_EXPECT_STATUS(nrv_threadpool_create(4, &pool), NRV_OK);
    slow_job j;
    atomic_init(&j.on_workers, 0);
    j.caller = pthread_self();
    nrv_parallel_for(pool, 8, slow_task, &j);
    NRV_EXPECT(atomic_load(&j.on_workers) > 0, "no worker took any of 8 tasks in 10 s");
    nrv_threadpool_free(pool);
}

int main(void) {
    nrv_test_seed(0x7e57);
    for (int threads = 2; threads <= 5; threads++) {
        const int bad = stress(threads, 4000, 150);
        NRV_EXPECT(bad == 0, "%d of 4000 jobs on %d threads ran a task other than once", bad, threads);
        /* empty tasks: the caller publishes the next job while workers are still trying to
         * claim in the last one, the window where a stale claim would land */
        const int bad_empty = stress(threads, 20000, 0);
        NRV_EXPECT(bad_empty == 0, "%d of 20000 empty jobs on %d threads ran a task other than once", bad_empty,
                   threads);
    }
    test_workers_take_part();
    /* one thread: no pool, tasks run in order on the caller */
    nrv_threadpool *none = (nrv_threadpool *)1;
    NRV_EXPECT_STATUS(nrv_threadpool_create(1, &none), NRV_OK);
    NRV_EXPECT(none == NULL && nrv_threadpool_size(none) == 1, "one thread makes no pool");
    NRV_EXPECT_STATUS(nrv_threadpool_create(0, &none), NRV_ERR_INVALID_ARG);
    return nrv_test_summary("test_threadpool");
}
