/* nrv_plan_test.h — helpers shared by the plan-op tests that sweep dispatch variants
 * (test_plan_linalg.c, test_plan_rnn.c, test_linear_w8*.c): views, guarded output buffers, a
 * tolerance check that records the worst error, the fused activations' reference, and
 * "variant rounds": round k forces every dispatch op in
 * the includer's kOps[] to its k-th runnable variant (the last one when it has fewer).
 * The includer defines RTOL, ATOL, GUARD, SENTINEL and kOps[] before including this. */
#ifndef NRV_PLAN_TEST_H
#define NRV_PLAN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_plan_run.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

/* ------------------------------------------------------------------ views, buffers */

static nrv_tview mkview(void *data, nrv_dtype dt, int rank, const int64_t *dims) {
    nrv_tview v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.rank = rank;
    v.numel = 1;
    for (int i = 0; i < rank; i++) {
        v.dims[i] = dims[i];
        v.numel *= dims[i];
    }
    return v;
}

static void *xcalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline float *rnd(int64_t n, float scale) {
    float *p = xcalloc((size_t)n * sizeof(float));
    nrv_test_fill(p, n, -scale, scale);
    return p;
}

static inline float *outbuf(int64_t n) {
    float *p = xcalloc((size_t)(n + GUARD) * sizeof(float));
    for (int64_t i = 0; i < n + GUARD; i++) p[i] = SENTINEL;
    return p;
}

static inline int tail_intact(const float *p, int64_t n) {
    for (int64_t i = n; i < n + GUARD; i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

static inline int all_sentinel(const float *p, int64_t n) {
    for (int64_t i = 0; i < n + GUARD; i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

static double worst_seen = 0.0;

static inline void check_close(const char *what, const float *got, const double *want, int64_t n) {
    double worst = 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        double e;
        if (isnan(g) || isnan(w)) e = (isnan(g) && isnan(w)) ? 0.0 : INFINITY;
        else e = fabs(g - w) / (ATOL + RTOL * fabs(w));
        if (e > worst) {
            worst = e;
            at = i;
        }
    }
    if (worst > worst_seen) worst_seen = worst;
    NRV_EXPECT(worst <= 1.0, "%s: err %.3g of tolerance at %lld: got %.9g want %.9g", what, worst, (long long)at,
               n ? (double)got[at] : 0.0, n ? want[at] : 0.0);
}

/* ------------------------------------------------------------------ fused activations */

/* The fused activation act (nrv_plan_act code) in double. */
static inline double act_ref(int64_t act, double x, double p0, double p1) {
    switch (act) {
    case 0: return x;
    case 1: return x > 0 ? x : 0;
    case 2: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case 3: return 1.0 / (1.0 + exp(-x));
    case 4: return tanh(x);
    case 5: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case 6: return x < 0 ? x * p0 : x;
    case 7: return x < p0 ? p0 : (x > p1 ? p1 : x);
    case 8: return x * fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0);
    case 9: return x / (1.0 + exp(-x));
    default: return NAN;
    }
}

/* fattr for activation act: leaky slope, clip bounds */
static inline void act_params(int64_t act, float *p0, float *p1) {
    *p0 = 0.0f;
    *p1 = 0.0f;
    if (act == 6) *p0 = 0.1f;
    if (act == 7) {
        *p0 = -0.3f;
        *p1 = 0.4f;
    }
}

/* ------------------------------------------------------------------ variant rounds */

#define N_OPS ((int)(sizeof kOps / sizeof kOps[0]))

static int runnable_variants(const char *op, const char **names, int cap) {
    int n = 0;
    for (int i = 0; i < nrv_kernel_variant_count(op) && n < cap; i++)
        if (nrv_kernel_variant_runnable(op, i)) names[n++] = nrv_kernel_variant_name(op, i);
    return n;
}

static int rounds(void) {
    int r = 1;
    for (int o = 0; o < N_OPS; o++) {
        const char *names[16];
        const int n = runnable_variants(kOps[o], names, 16);
        if (n > r) r = n;
    }
    return r;
}

static char round_desc[256];

static void force_round(int k) {
    int len = 0;
    round_desc[0] = '\0';
    for (int o = 0; o < N_OPS; o++) {
        const char *names[16];
        const int n = runnable_variants(kOps[o], names, 16);
        if (n == 0) continue;
        const char *v = names[k < n ? k : n - 1];
        NRV_EXPECT_STATUS(nrv_kernel_force(kOps[o], v), NRV_OK);
        if (len < 200)
            len += snprintf(round_desc + len, sizeof round_desc - (size_t)len, "%s%s=%s", o ? "," : "", kOps[o], v);
    }
}

static void unforce(void) {
    for (int o = 0; o < N_OPS; o++) NRV_EXPECT_STATUS(nrv_kernel_force(kOps[o], NULL), NRV_OK);
}

#endif /* NRV_PLAN_TEST_H */
