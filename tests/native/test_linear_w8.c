/* test_linear_w8.c — the int8-weight linear layer (kernel "linear_w8", every variant compiled
 * in, and the plan op "linear_w8") against a double-precision reference written here.
 *
 * Kernel sweep: each runnable variant is forced (nrv_kernel_force) and called through the
 * dispatch table at awkward sizes (rows 1 2 3 7 16 33, K 1 3 13 97 416 1025, N 1 3 13 97
 * 257 1664: every (rows, K) pair with two N, rotated), with per-tensor and per-row s / z,
 * z absent, bias present or not. Inputs are allocated to their exact size (an ASan build
 * catches reads past them) and outputs carry a canary tail. Tolerance: 1e-5 relative plus
 * 4·sqrt(K)·FLT_EPSILON times the magnitude of the terms summed (|s|·Σ|x·q| + |z|·Σ|x|),
 * since a different summation order legitimately moves the last bits.
 * Then: computing a call's outputs in pieces gives bit-identical values (the contract in
 * kernels.h that the threaded op relies on); the plan op with fused activations, rank-3 x,
 * threads 1..4 (bit-identical to one thread), K == 0 and rows == 0; and its error paths,
 * which must leave the output untouched.
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

#define KERNEL_RTOL 1e-5 /* kernel sweep: plus the summation-order term, see tol_err */
#define RTOL 1e-4        /* plan op (check_close, after the activations) */
#define ATOL 1e-4
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"linear_w8", "relu", "gelu", "sigmoid", "tanh"};
#include "nrv_plan_test.h"
#include "nrv_w8_test.h"

/* ------------------------------------------------------------------ inputs */

/* want[r, o] in double and the magnitude of its terms, for the tolerance */
static void case_ref(const w8_case *c, double *want, double *mag) {
    const int64_t st = c->per_row ? 1 : 0;
    for (int64_t r = 0; r < c->rows; r++) {
        const float *xr = c->x + r * c->K;
        double sum = 0.0, sabs = 0.0;
        for (int64_t k = 0; k < c->K; k++) {
            sum += xr[k];
            sabs += fabs(xr[k]);
        }
        for (int64_t o = 0; o < c->N; o++) {
            double acc = 0.0, aabs = 0.0;
            for (int64_t k = 0; k < c->K; k++) {
                acc += (double)xr[k] * c->q[o * c->K + k];
                aabs += fabs((double)xr[k] * c->q[o * c->K + k]);
            }
            const double s = c->s[o * st], z = c->z ? c->z[o * st] : 0.0;
            want[r * c->N + o] = s * acc + z * sum + (c->b ? c->b[o] : 0.0);
            mag[r * c->N + o] = fabs(s) * aabs + fabs(z) * sabs + (c->b ? fabs(c->b[o]) : 0.0);
        }
    }
}

/* the kernel sweep's tolerance from the terms' magnitude, in place */
static void mag_to_tol(const double *want, double *mag, int64_t n, int64_t K) {
    for (int64_t i = 0; i < n; i++)
        mag[i] = KERNEL_RTOL * fabs(want[i]) + 4.0 * sqrt((double)K + 1.0) * FLT_EPSILON * mag[i] + 1e-30;
}

/* ------------------------------------------------------------------ kernel sweep */

static const int64_t kRows[] = {1, 2, 3, 7, 16, 33};
static const int64_t kK[] = {1, 3, 13, 97, 416, 1025};
static const int64_t kN[] = {1, 3, 13, 97, 257, 1664};

static double kernel_worst = 0.0;

static void kernel_case(const char *variant, int64_t rows, int64_t K, int64_t N, int mode) {
    w8_case c;
    const int per_row = mode & 1, with_bias = (mode >> 1) & 1, with_z = mode != 6; /* mode 6: no z */
    w8_case_make(&c, rows, K, N, per_row, with_z, with_bias);
    float *y = outbuf(rows * N);
    nrv_kernel_get(NRV_OP_LINEAR_W8).linear_w8(c.x, rows, K, c.q, c.s, c.z, per_row ? 1 : 0, c.b, N, y);
    double *want = xcalloc((size_t)(rows * N) * sizeof(double)), *mag = xcalloc((size_t)(rows * N) * sizeof(double));
    case_ref(&c, want, mag);
    int64_t at;
    mag_to_tol(want, mag, rows * N, K);
    const double e = w8_worst_err(y, want, mag, rows * N, &at);
    if (e > kernel_worst) kernel_worst = e;
    NRV_EXPECT(e <= 1.0, "linear_w8 %s rows=%lld K=%lld N=%lld per_row=%d z=%d bias=%d: err %.3g of tolerance at %lld "
               "(got %.9g want %.9g)", variant, (long long)rows, (long long)K, (long long)N, per_row, with_z,
               with_bias, e, (long long)at, (double)y[at], want[at]);
    NRV_EXPECT(tail_intact(y, rows * N), "linear_w8 %s rows=%lld K=%lld N=%lld: wrote past the output", variant,
               (long long)rows, (long long)K, (long long)N);
    free(want);
    free(mag);
    free(y);
    w8_case_free(&c);
}

/* The outputs of one call computed in pieces [o0, o1) give bit-identical values. */
static void split_case(const char *variant, int64_t rows, int64_t K, int64_t N, int per_row) {
    w8_case c;
    w8_case_make(&c, rows, K, N, per_row, 1, 1);
    const nrv_linear_w8_fn f = nrv_kernel_get(NRV_OP_LINEAR_W8).linear_w8;
    const int64_t st = per_row ? 1 : 0;
    float *whole = outbuf(rows * N), *piece = outbuf(rows * N);
    f(c.x, rows, K, c.q, c.s, c.z, st, c.b, N, whole);
    static const int64_t cuts[] = {1, 5, 7, 64, 3};
    int64_t o0 = 0;
    for (int i = 0; o0 < N; i++) {
        const int64_t w = cuts[i % 5], nb = N - o0 < w ? N - o0 : w;
        float *tile = outbuf(rows * nb);
        f(c.x, rows, K, c.q + o0 * K, c.s + o0 * st, c.z + o0 * st, st, c.b + o0, nb, tile);
        NRV_EXPECT(tail_intact(tile, rows * nb), "split %s: wrote past a piece", variant);
        for (int64_t r = 0; r < rows; r++) memcpy(piece + r * N + o0, tile + r * nb, (size_t)nb * sizeof(float));
        free(tile);
        o0 += nb;
    }
    NRV_EXPECT(memcmp(whole, piece, (size_t)(rows * N) * sizeof(float)) == 0,
               "linear_w8 %s rows=%lld K=%lld N=%lld: outputs computed in pieces differ from one call", variant,
               (long long)rows, (long long)K, (long long)N);
    free(whole);
    free(piece);
    w8_case_free(&c);
}

static void sweep_kernel(void) {
    const int nv = nrv_kernel_variant_count("linear_w8");
    NRV_EXPECT(nv >= 1 && !strcmp(nrv_kernel_variant_name("linear_w8", nv - 1), "ref"),
               "linear_w8: the reference must be the last variant");
    for (int v = 0; v < nv; v++) {
        const char *variant = nrv_kernel_variant_name("linear_w8", v);
        if (!nrv_kernel_variant_runnable("linear_w8", v)) {
            printf("skip linear_w8 variant=%s: not runnable on this CPU\n", variant);
            NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8", variant), NRV_ERR_UNSUPPORTED);
            continue;
        }
        NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8", variant), NRV_OK);
        kernel_worst = 0.0;
        nrv_test_seed(0x5eed0008u); /* every variant sees the same inputs */
        const int failed_before = nrv_test_failed;
        int cases = 0;
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++)
                for (int t = 0; t < 2; t++) {
                    const int64_t N = kN[(i + j + 3 * t) % 6];
                    kernel_case(variant, kRows[i], kK[j], N, (i + 2 * j + 5 * t) % 7);
                    cases++;
                }
        /* every size on every axis with the largest of the others, both s/z layouts */
        kernel_case(variant, 1, 1025, 1664, 0);
        kernel_case(variant, 1, 416, 1664, 1);
        kernel_case(variant, 16, 1025, 257, 3);
        kernel_case(variant, 33, 97, 1664, 2);
        cases += 4;
        split_case(variant, 1, 416, 257, 0);
        split_case(variant, 3, 97, 97, 1);
        split_case(variant, 7, 13, 13, 1);
        split_case(variant, 16, 1025, 70, 0);
        printf("kernel linear_w8 variant=%s cases=%d max_err=%.2f %s\n", variant, cases, kernel_worst,
               nrv_test_failed == failed_before ? "OK" : "FAILED");
        fflush(stdout);
    }
    NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8", NULL), NRV_OK);
}

/* ------------------------------------------------------------------ the plan op */

static nrv_status run_w8(const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia, const float *fa) {
    return nrv_plan_run_op("linear_w8", in, n_in, y, ia, 1, fa, 2, NULL, 0, NULL);
}

/* x [d0, d1, K] (rank 3), through the op, with act; then threads 2..4 bit-identical to 1. */
static void op_case(int64_t d0, int64_t d1, int64_t K, int64_t N, int per_row, int with_z, int with_bias,
                    int64_t act, nrv_threadpool *const *pools) {
    w8_case c;
    w8_case_make(&c, d0 * d1, K, N, per_row, with_z, with_bias);
    const int64_t xd[3] = {d0, d1, K}, qd[2] = {N, K}, ns = per_row ? N : 1, yd[3] = {d0, d1, N};
    nrv_tview x = mkview(c.x, NRV_F32, 3, xd), q = mkview(c.q, NRV_I8, 2, qd);
    nrv_tview s = mkview(c.s, NRV_F32, 1, &ns), z = mkview(c.z, NRV_F32, 1, &ns), b = mkview(c.b, NRV_F32, 1, &N);
    const nrv_tview *in[5] = {&x, &q, &s, with_z ? &z : NULL, with_bias ? &b : NULL};
    float p0, p1;
    act_params(act, &p0, &p1);
    const int64_t ia[1] = {act};
    const float fa[2] = {p0, p1};
    float *y1 = w8_op_threads("linear_w8", in, 5, ia, 1, fa, 3, yd, pools);
    const int64_t n = d0 * d1 * N;
    double *want = xcalloc((size_t)(n + 1) * sizeof(double));
    double *mag = xcalloc((size_t)(n + 1) * sizeof(double));
    case_ref(&c, want, mag);
    for (int64_t i = 0; i < n; i++) want[i] = act_ref(act, want[i], p0, p1);
    char what[512];
    snprintf(what, sizeof what, "linear_w8 op [%lld,%lld,%lld]x[%lld] per_row=%d z=%d bias=%d act=%lld (%s)",
             (long long)d0, (long long)d1, (long long)K, (long long)N, per_row, with_z, with_bias, (long long)act,
             round_desc);
    check_close(what, y1, want, n);
    free(want);
    free(mag);
    free(y1);
    w8_case_free(&c);
}

static void test_op(void) {
    nrv_threadpool *pools[4];
    w8_pools_make(pools);
    /* small magnitudes so the activations are not saturated: scale the output by s */
    op_case(1, 1, 416, 1664, 0, 1, 1, 0, pools);
    op_case(1, 1, 416, 1664, 1, 1, 1, 1, pools);
    op_case(2, 3, 97, 257, 1, 1, 0, 2, pools);
    op_case(1, 16, 64, 130, 0, 0, 1, 3, pools);
    op_case(3, 1, 13, 97, 1, 1, 1, 4, pools);
    op_case(1, 7, 1025, 300, 0, 1, 1, 6, pools);
    op_case(1, 2, 33, 65, 1, 0, 0, 7, pools);
    w8_pools_free(pools);
}

/* K == 0: y = bias (or 0); rows == 0: nothing written. */
static void test_op_edges(void) {
    const int64_t N = 5, one = 1;
    float sv[1] = {0.5f}, zv[1] = {2.0f}, bv[5] = {1, 2, 3, 4, 5};
    int8_t qv[1] = {0};
    const int64_t xd0[2] = {3, 0}, qd0[2] = {N, 0}, yd[2] = {3, N};
    nrv_tview x = mkview(sv, NRV_F32, 2, xd0), q = mkview(qv, NRV_I8, 2, qd0), s = mkview(sv, NRV_F32, 1, &one);
    nrv_tview z = mkview(zv, NRV_F32, 1, &one), b = mkview(bv, NRV_F32, 1, &N);
    nrv_tview y = mkview(outbuf(15), NRV_F32, 2, yd);
    const int64_t ia[1] = {0};
    const float fa[2] = {0, 0};
    const nrv_tview *in[5] = {&x, &q, &s, &z, &b};
    NRV_EXPECT_STATUS(run_w8(in, 5, &y, ia, fa), NRV_OK);
    int ok = 1;
    for (int64_t i = 0; i < 15; i++) ok &= ((float *)y.data)[i] == bv[i % 5];
    NRV_EXPECT(ok && tail_intact(y.data, 15), "linear_w8 K == 0: y must be the bias");
    const nrv_tview *in_nob[4] = {&x, &q, &s, &z};
    NRV_EXPECT_STATUS(run_w8(in_nob, 4, &y, ia, fa), NRV_OK);
    ok = 1;
    for (int64_t i = 0; i < 15; i++) ok &= ((float *)y.data)[i] == 0.0f;
    NRV_EXPECT(ok, "linear_w8 K == 0 without bias: y must be 0");
    free(y.data);
    const int64_t xr0[2] = {0, 4}, qd[2] = {N, 4}, yr0[2] = {0, N};
    int8_t q4[20] = {0};
    x = mkview(sv, NRV_F32, 2, xr0);
    q = mkview(q4, NRV_I8, 2, qd);
    y = mkview(outbuf(0), NRV_F32, 2, yr0);
    NRV_EXPECT_STATUS(run_w8(in, 5, &y, ia, fa), NRV_OK);
    NRV_EXPECT(all_sentinel(y.data, 0), "linear_w8 rows == 0 wrote something");
    free(y.data);
}

static void expect_fail(const char *what, const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia,
                        nrv_status want) {
    w8_expect_fail("linear_w8", what, in, n_in, y, ia, 1, want);
}

static void test_errors(void) {
    float fbuf[64] = {0};
    int8_t qbuf[64] = {0};
    const int64_t act0[1] = {0}, act_bad[1] = {99};
    const int64_t xd[2] = {2, 4}, qd[2] = {3, 4}, qbad[2] = {3, 5}, yd[2] = {2, 3}, ybad[2] = {2, 4};
    const int64_t n3 = 3, n1 = 1, n2 = 2, n4 = 4;
    nrv_tview x = mkview(fbuf, NRV_F32, 2, xd), q = mkview(qbuf, NRV_I8, 2, qd), s = mkview(fbuf, NRV_F32, 1, &n3);
    nrv_tview z = mkview(fbuf, NRV_F32, 1, &n3), b = mkview(fbuf, NRV_F32, 1, &n3), y = mkview(NULL, NRV_F32, 2, yd);
    const nrv_tview *in[5] = {&x, &q, &s, &z, &b};
    expect_fail("ok", in, 5, &y, act0, NRV_OK);
    nrv_tview qf = mkview(fbuf, NRV_F32, 2, qd);
    in[1] = &qf;
    expect_fail("q f32", in, 5, &y, act0, NRV_ERR_DTYPE);
    nrv_tview qk = mkview(qbuf, NRV_I8, 2, qbad);
    in[1] = &qk;
    expect_fail("q K mismatch", in, 5, &y, act0, NRV_ERR_SHAPE);
    in[1] = &q;
    nrv_tview s2 = mkview(fbuf, NRV_F32, 1, &n2);
    in[2] = &s2;
    expect_fail("s of 2 for N 3", in, 5, &y, act0, NRV_ERR_SHAPE);
    nrv_tview s1 = mkview(fbuf, NRV_F32, 1, &n1);
    in[2] = &s1;
    expect_fail("s of 1, z of 3", in, 5, &y, act0, NRV_ERR_SHAPE);
    nrv_tview z1 = mkview(fbuf, NRV_F32, 1, &n1);
    in[3] = &z1;
    expect_fail("s, z of 1", in, 5, &y, act0, NRV_OK);
    in[2] = &s;
    in[3] = &z;
    nrv_tview si = mkview(qbuf, NRV_I8, 1, &n3);
    in[2] = &si;
    expect_fail("s int8", in, 5, &y, act0, NRV_ERR_DTYPE);
    in[2] = NULL;
    expect_fail("s absent", in, 5, &y, act0, NRV_ERR_INVALID_ARG);
    in[2] = &s;
    nrv_tview b4 = mkview(fbuf, NRV_F32, 1, &n4);
    in[4] = &b4;
    expect_fail("bias of 4", in, 5, &y, act0, NRV_ERR_SHAPE);
    in[4] = &b;
    nrv_tview yb = mkview(NULL, NRV_F32, 2, ybad);
    expect_fail("y of N 4", in, 5, &yb, act0, NRV_ERR_SHAPE);
    expect_fail("bad activation", in, 5, &y, act_bad, NRV_ERR_INVALID_ARG);
    expect_fail("two inputs", in, 2, &y, act0, NRV_ERR_INVALID_ARG);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("linear_w8") && !strcmp(nrv_plan_op_find("linear_w8")->kernel_op, "linear_w8"),
               "linear_w8 registered with its kernel op");
    sweep_kernel();
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0x7788u + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        test_op();
    }
    unforce();
    printf("worst op error: %.3f of tolerance (rtol %g, atol %g)\n", worst_seen, RTOL, ATOL);
    test_op_edges();
    test_errors();
    return nrv_test_summary("test_linear_w8");
}
