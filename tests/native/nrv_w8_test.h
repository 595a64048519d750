/* nrv_w8_test.h — what test_linear_w8.c and test_linear_w8a8.c share: the random layer
 * (x, an int8 q, quantisation-like s, optional z and bias), a tolerance check against a
 * per-element tolerance, the plan op run at 1..4 threads (2..4 bit-identical to 1) and the
 * error-path check. Included after nrv_plan_test.h. */
#ifndef NRV_W8_TEST_H
#define NRV_W8_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_plan_test.h"

typedef struct w8_case {
    int64_t rows, K, N;
    int per_row; /* s, z of N floats (else 1) */
    int with_z, with_bias;
    float *x, *s, *z, *b;
    int8_t *q, *packed; /* packed: test_linear_w8a8.c's, else NULL */
} w8_case;

/* x [rows, K] in [-1, 1), q [N, K] in -128..127, s in [0.001, 0.011), z in [-0.5, 0.5),
 * b in [-1, 1), drawn in that order. */
static inline void w8_case_make(w8_case *c, int64_t rows, int64_t K, int64_t N, int per_row, int with_z,
                                int with_bias) {
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->K = K;
    c->N = N;
    c->per_row = per_row;
    c->with_z = with_z;
    c->with_bias = with_bias;
    const int64_t ns = per_row ? N : 1;
    c->x = rnd(rows * K, 1.0f);
    c->q = xcalloc((size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) c->q[i] = (int8_t)((int)(nrv_test_u64() % 256u) - 128); /* -128..127 */
    c->s = rnd(ns, 1.0f);
    for (int64_t i = 0; i < ns; i++) c->s[i] = 0.001f + 0.01f * fabsf(c->s[i]); /* quantisation-like scales */
    if (with_z) c->z = rnd(ns, 0.5f);
    if (with_bias) c->b = rnd(N, 1.0f);
}

static inline void w8_case_free(w8_case *c) {
    free(c->x);
    free(c->q);
    free(c->s);
    free(c->z);
    free(c->b);
    free(c->packed);
}

/* max |got - want| / tol over n values (NaN in got: infinite), its index in *at. */
static inline double w8_worst_err(const float *got, const double *want, const double *tol, int64_t n, int64_t *at) {
    double worst = 0.0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]) / tol[i];
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

/* Plan op `type` at threads 1..4 (pools[0] NULL): each call must keep the output's canary
 * tail, and threads 2..4 give one thread's values bit for bit. Returns one thread's output
 * (outbuf of y's numel, the caller frees it). */
static inline float *w8_op_threads(const char *type, const nrv_tview *const *in, int n_in, const int64_t *ia,
                                   int n_ia, const float *fa, int rank, const int64_t *yd,
                                   nrv_threadpool *const *pools) {
    float *y1 = NULL;
    for (int t = 0; t < 4; t++) {
        nrv_tview y = mkview(outbuf(nrv_dims_product(yd, 0, rank)), NRV_F32, rank, yd);
        NRV_EXPECT_STATUS(nrv_plan_run_op(type, in, n_in, &y, ia, n_ia, fa, 2, NULL, 0, pools[t]), NRV_OK);
        NRV_EXPECT(tail_intact(y.data, y.numel), "%s op: wrote past the output", type);
        if (t == 0) {
            y1 = y.data;
        } else {
            NRV_EXPECT(memcmp(y.data, y1, (size_t)y.numel * sizeof(float)) == 0,
                       "%s op [%lld,%lld,...]x[%lld]: %d threads differ from 1", type, (long long)yd[0],
                       (long long)yd[1], (long long)yd[rank - 1], t + 1);
            free(y.data);
        }
    }
    return y1;
}

/* Pools of 2..4 threads in pools[1..3] (pools[0] NULL: one thread). */
static inline void w8_pools_make(nrv_threadpool **pools) {
    pools[0] = NULL;
    for (int t = 1; t < 4; t++) NRV_EXPECT_STATUS(nrv_threadpool_create(t + 1, &pools[t]), NRV_OK);
}

static inline void w8_pools_free(nrv_threadpool **pools) {
    for (int t = 1; t < 4; t++) nrv_threadpool_free(pools[t]);
}

/* Plan op `type` (fattr {0, 0}) must return want; on failure leave y untouched and name the node. */
static inline void w8_expect_fail(const char *type, const char *what, const nrv_tview *const *in, int n_in,
                                  nrv_tview *y, const int64_t *ia, int n_ia, nrv_status want) {
    float *py = outbuf(y->numel);
    y->data = py;
    const float fa[2] = {0, 0};
    const nrv_status s = nrv_plan_run_op(type, in, n_in, y, ia, n_ia, fa, 2, NULL, 0, NULL);
    NRV_EXPECT(s == want, "%s: got %s, want %s (%s)", what, nrv_status_str(s), nrv_status_str(want), nrv_last_error());
    if (want != NRV_OK) NRV_EXPECT(all_sentinel(py, y->numel), "%s: output written on failure", what);
    if (s != NRV_OK)
        NRV_EXPECT(strstr(nrv_last_error(), "test_node") != NULL, "%s: message lacks the node name: %s", what,
                   nrv_last_error());
    free(py);
}

#endif /* NRV_W8_TEST_H */
