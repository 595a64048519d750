/* test_linear_f16.c — the fp16-weight linear layer (kernel "linear_f16", every variant compiled
 * in, and the plan op "linear_f16") against a double-precision reference written here.
 *
 * Kernel sweep: each runnable variant is forced (nrv_kernel_force) and called through the
 * dispatch table at awkward sizes (rows 1 3 13 97, K 1 3 13 97 127 257 1025, N from the same
 * list: every (rows, K) pair with two N, rotated), bias present or not. The weights are
 * halves: uniform in [-1, 1), every 13th a subnormal half, every 29th a large one (1024 ..
 * 65504, the top of the fp16 range), so the widening is checked over the whole range.
 * Reference: Σ_k x·double(half) + b in double, the halves widened by a decoder written here
 * (not half.c's). Budget: the widened weights are exact, so the only error is fp32 summation:
 * |got - want| <= 1e-5·|want| + 4·sqrt(K + 1)·FLT_EPSILON·Σ_k |x·w| (+|b|) — the same
 * budget as linear_w8's sweep (a wrong or missing term is orders larger).
 * Then: a call's outputs computed in pieces, each written in place through ldy, are
 * bit-identical to one call (kernels.h contract), and a row stride ldy > out leaves the gap
 * between rows untouched; the plan op at rank 3 with fused activations (rows 1 .. 200: one and
 * several 64-row tasks), threads 1..4 bit-identical to one thread, every variant in rounds;
 * K == 0 and rows == 0; and its error paths, which must leave the output untouched.
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

#define KERNEL_RTOL 1e-5
#define RTOL 1e-5 /* plan op (check_close, after the activations; outputs O(1), terms Σ|x·w| <= 8) */
#define ATOL 2e-5
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"linear_f16", "relu", "gelu", "sigmoid", "tanh"};
#include "nrv_plan_test.h"
#include "nrv_w8_test.h"

/* ------------------------------------------------------------------ inputs */

/* IEEE half -> double, independently of half.c: (-1)^s · 2^(e-15) · (1 + m/1024), subnormals
 * 2^-14 · m/1024. */
static double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

/* n halves, |value| < 1 scaled by `scale` (a power of two: exact), with subnormals and large
 * values as in the header when `wide`. */
static uint16_t *half_weights(int64_t n, float scale, int wide) {
    uint16_t *w = xcalloc((size_t)n * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++) {
        w[i] = nrv_float_to_half(scale * nrv_test_uniform(-1.0f, 1.0f));
        if (wide && i % 13 == 5) w[i] = (uint16_t)((nrv_test_u64() & 0x83ffu) | 1u);
        if (wide && i % 29 == 11) w[i] = nrv_float_to_half(copysignf(nrv_test_uniform(1024.0f, 65504.0f),
                                                                     nrv_test_uniform(-1.0f, 1.0f)));
    }
    return w;
}

/* want[r, o] in double and the magnitude of its terms, for the tolerance */
static void case_ref(const float *x, const uint16_t *w, const float *b, int64_t rows, int64_t K, int64_t N,
                     double *want, double *mag) {
    double *wd = xcalloc((size_t)(N * K + 1) * sizeof(double));
    for (int64_t i = 0; i < N * K; i++) wd[i] = half_value(w[i]);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < N; o++) {
            double acc = 0.0, aabs = 0.0;
            for (int64_t k = 0; k < K; k++) {
                acc += (double)x[r * K + k] * wd[o * K + k];
                aabs += fabs((double)x[r * K + k] * wd[o * K + k]);
            }
            want[r * N + o] = acc + (b ? b[o] : 0.0);
            mag[r * N + o] = aabs + (b ? fabs(b[o]) : 0.0);
        }
    free(wd);
}

static void mag_to_tol(const double *want, double *mag, int64_t n, int64_t K) {
    for (int64_t i = 0; i < n; i++)
        mag[i] = KERNEL_RTOL * fabs(want[i]) + 4.0 * sqrt((double)K + 1.0) * FLT_EPSILON * mag[i] + 1e-30;
}

/* ------------------------------------------------------------------ kernel sweep */

static const int64_t kRows[] = {1, 3, 13, 97};
static const int64_t kSizes[] = {1, 3, 13, 97, 127, 257, 1025};

static double kernel_worst = 0.0;

static void kernel_case(const char *variant, int64_t rows, int64_t K, int64_t N, int with_bias) {
    float *x = rnd(rows * K, 1.0f), *b = with_bias ? rnd(N, 1.0f) : NULL;
    uint16_t *w = half_weights(N * K, 1.0f, 1);
    float *y = outbuf(rows * N);
    nrv_kernel_get(NRV_OP_LINEAR_F16).linear_f16(x, rows, K, w, b, N, y, N);
    double *want = xcalloc((size_t)(rows * N) * sizeof(double)), *tol = xcalloc((size_t)(rows * N) * sizeof(double));
    case_ref(x, w, b, rows, K, N, want, tol);
    mag_to_tol(want, tol, rows * N, K);
    int64_t at;
    const double e = w8_worst_err(y, want, tol, rows * N, &at);
    if (e > kernel_worst) kernel_worst = e;
    NRV_EXPECT(e <= 1.0, "linear_f16 %s rows=%lld K=%lld N=%lld bias=%d: err %.3g of tolerance at %lld (got %.9g want "
               "%.9g)", variant, (long long)rows, (long long)K, (long long)N, with_bias, e, (long long)at,
               (double)y[at], want[at]);
    NRV_EXPECT(tail_intact(y, rows * N), "linear_f16 %s rows=%lld K=%lld N=%lld: wrote past the output", variant,
               (long long)rows, (long long)K, (long long)N);
    free(want);
    free(tol);
    free(y);
    free(x);
    free(b);
    free(w);
}

/* The outputs of one call computed in pieces [o0, o1), each written in place into y (row
 * stride ldy = N + gap), give bit-identical values, and the gap after each row stays intact. */
static void split_case(const char *variant, int64_t rows, int64_t K, int64_t N, int64_t gap) {
    float *x = rnd(rows * K, 1.0f), *b = rnd(N, 1.0f);
    uint16_t *w = half_weights(N * K, 1.0f, 1);
    const nrv_linear_f16_fn f = nrv_kernel_get(NRV_OP_LINEAR_F16).linear_f16;
    const int64_t ldy = N + gap;
    float *whole = outbuf(rows * N), *piece = outbuf(rows * ldy);
    f(x, rows, K, w, b, N, whole, N);
    static const int64_t cuts[] = {1, 5, 7, 64, 3};
    int64_t o0 = 0;
    for (int i = 0; o0 < N; i++) {
        const int64_t c = cuts[i % 5], nb = N - o0 < c ? N - o0 : c;
        f(x, rows, K, w + o0 * K, b + o0, nb, piece + o0, ldy);
        o0 += nb;
    }
    int same = 1, gap_ok = tail_intact(piece, rows * ldy);
    for (int64_t r = 0; r < rows; r++) {
        same &= memcmp(whole + r * N, piece + r * ldy, (size_t)N * sizeof(float)) == 0;
        for (int64_t g = N; g < ldy; g++) gap_ok &= piece[r * ldy + g] == SENTINEL;
    }
    NRV_EXPECT(same, "linear_f16 %s rows=%lld K=%lld N=%lld: outputs computed in pieces differ from one call",
               variant, (long long)rows, (long long)K, (long long)N);
    NRV_EXPECT(gap_ok, "linear_f16 %s rows=%lld K=%lld N=%lld ldy=%lld: wrote outside its rows", variant,
               (long long)rows, (long long)K, (long long)N, (long long)ldy);
    free(whole);
    free(piece);
    free(x);
    free(b);
    free(w);
}

static void sweep_kernel(void) {
    const int nv = nrv_kernel_variant_count("linear_f16");
    NRV_EXPECT(nv >= 1 && !strcmp(nrv_kernel_variant_name("linear_f16", nv - 1), "ref"),
               "linear_f16: the reference must be the last variant");
    for (int v = 0; v < nv; v++) {
        const char *variant = nrv_kernel_variant_name("linear_f16", v);
        if (!nrv_kernel_variant_runnable("linear_f16", v)) {
            printf("skip linear_f16 variant=%s: not runnable on this CPU\n", variant);
            NRV_EXPECT_STATUS(nrv_kernel_force("linear_f16", variant), NRV_ERR_UNSUPPORTED);
            continue;
        }
        NRV_EXPECT_STATUS(nrv_kernel_force("linear_f16", variant), NRV_OK);
        kernel_worst = 0.0;
        nrv_test_seed(0x5eed0f16u); /* every variant sees the same inputs */
        const int failed_before = nrv_test_failed;
        int cases = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 7; j++)
                for (int t = 0; t < 2; t++) {
                    kernel_case(variant, kRows[i], kSizes[j], kSizes[(i + j + 3 * t + 1) % 7], (i + j + t) % 3 != 0);
                    cases++;
                }
        /* the extremes of every axis together */
        kernel_case(variant, 1, 1025, 1025, 1);
        kernel_case(variant, 97, 1025, 257, 0);
        kernel_case(variant, 16, 4096, 13, 1);
        cases += 3;
        split_case(variant, 1, 416, 257, 0);
        split_case(variant, 3, 97, 97, 3);
        split_case(variant, 13, 13, 13, 1);
        split_case(variant, 97, 1025, 70, 17);
        printf("kernel linear_f16 variant=%s cases=%d max_err=%.2f %s\n", variant, cases, kernel_worst,
               nrv_test_failed == failed_before ? "OK" : "FAILED");
        fflush(stdout);
    }
    NRV_EXPECT_STATUS(nrv_kernel_force("linear_f16", NULL), NRV_OK);
}

/* ------------------------------------------------------------------ the plan op */

static nrv_status run_f16(const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia, int n_ia) {
    const float fa[2] = {0, 0};
    return nrv_plan_run_op("linear_f16", in, n_in, y, ia, n_ia, fa, 2, NULL, 0, NULL);
}

/* x [d0, d1, K] through the op with act at threads 1..4 (2..4 bit-identical to 1), against the
 * double reference. Weights scaled by 2^-5 so the outputs stay O(1) (the activations then
 * matter and ATOL is meaningful). */
static void op_case(int64_t d0, int64_t d1, int64_t K, int64_t N, int with_bias, int64_t act,
                    nrv_threadpool *const *pools) {
    const int64_t rows = d0 * d1, n = rows * N;
    float *xv = rnd(rows * K, 1.0f), *bv = rnd(N, 1.0f);
    uint16_t *wv = half_weights(N * K, 0.03125f, 0);
    const int64_t xd[3] = {d0, d1, K}, wd[2] = {N, K}, yd[3] = {d0, d1, N};
    nrv_tview x = mkview(xv, NRV_F32, 3, xd), w = mkview(wv, NRV_F16, 2, wd), b = mkview(bv, NRV_F32, 1, &N);
    const nrv_tview *in[3] = {&x, &w, with_bias ? &b : NULL};
    float p0, p1;
    act_params(act, &p0, &p1);
    const int64_t ia[1] = {act};
    const float fa[2] = {p0, p1};
    float *y1 = w8_op_threads("linear_f16", in, 3, ia, 1, fa, 3, yd, pools);
    double *want = xcalloc((size_t)(n + 1) * sizeof(double)), *mag = xcalloc((size_t)(n + 1) * sizeof(double));
    case_ref(xv, wv, with_bias ? bv : NULL, rows, K, N, want, mag);
    for (int64_t i = 0; i < n; i++) want[i] = act_ref(act, want[i], p0, p1);
    char what[512];
    snprintf(what, sizeof what, "linear_f16 op [%lld,%lld,%lld]x[%lld] bias=%d act=%lld (%s)", (long long)d0,
             (long long)d1, (long long)K, (long long)N, with_bias, (long long)act, round_desc);
    check_close(what, y1, want, n);
    free(want);
    free(mag);
    free(y1);
    free(xv);
    free(bv);
    free(wv);
}

static void test_op(void) {
    nrv_threadpool *pools[4];
    w8_pools_make(pools);
    op_case(1, 1, 1025, 1025, 1, 0, pools); /* decode step: threads split the outputs */
    op_case(1, 1, 416, 1664, 1, 1, pools);
    op_case(2, 3, 97, 257, 0, 2, pools);
    op_case(1, 16, 64, 130, 1, 3, pools);
    op_case(1, 17, 127, 129, 1, 4, pools);
    op_case(3, 33, 257, 97, 0, 6, pools);   /* 99 rows: two 64-row tasks, the last not whole */
    op_case(1, 200, 1025, 300, 1, 7, pools); /* four tasks, outputs cut when threads > tasks */
    op_case(1, 97, 13, 3, 1, 0, pools);     /* small: one thread whatever the pool */
    op_case(2, 40, 3, 65, 1, 5, pools);
    w8_pools_free(pools);
}

/* K == 0: y = bias (or 0); rows == 0: nothing written. */
static void test_op_edges(void) {
    const int64_t N = 5;
    float bv[5] = {1, 2, 3, 4, 5}, dummy[1] = {0};
    uint16_t wv[20] = {0};
    const int64_t xd0[2] = {3, 0}, wd0[2] = {N, 0}, yd[2] = {3, N};
    nrv_tview x = mkview(dummy, NRV_F32, 2, xd0), w = mkview(wv, NRV_F16, 2, wd0), b = mkview(bv, NRV_F32, 1, &N);
    nrv_tview y = mkview(outbuf(15), NRV_F32, 2, yd);
    const int64_t ia[1] = {0};
    const nrv_tview *in[3] = {&x, &w, &b};
    NRV_EXPECT_STATUS(run_f16(in, 3, &y, ia, 1), NRV_OK);
    int ok = 1;
    for (int64_t i = 0; i < 15; i++) ok &= ((float *)y.data)[i] == bv[i % 5];
    NRV_EXPECT(ok && tail_intact(y.data, 15), "linear_f16 K == 0: y must be the bias");
    NRV_EXPECT_STATUS(run_f16(in, 2, &y, ia, 1), NRV_OK);
    ok = 1;
    for (int64_t i = 0; i < 15; i++) ok &= ((float *)y.data)[i] == 0.0f;
    NRV_EXPECT(ok, "linear_f16 K == 0 without bias: y must be 0");
    free(y.data);
    const int64_t xr0[2] = {0, 4}, wd[2] = {N, 4}, yr0[2] = {0, N};
    x = mkview(dummy, NRV_F32, 2, xr0);
    w = mkview(wv, NRV_F16, 2, wd);
    y = mkview(outbuf(0), NRV_F32, 2, yr0);
    NRV_EXPECT_STATUS(run_f16(in, 3, &y, ia, 1), NRV_OK);
    NRV_EXPECT(all_sentinel(y.data, 0), "linear_f16 rows == 0 wrote something");
    free(y.data);
}

/* The op must return want; on failure leave y untouched and name the node. */
static void expect_fail(const char *what, const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia,
                        int n_ia, nrv_status want) {
    float *py = outbuf(y->numel);
    y->data = py;
    const nrv_status s = run_f16(in, n_in, y, ia, n_ia);
    NRV_EXPECT(s == want, "%s: got %s, want %s (%s)", what, nrv_status_str(s), nrv_status_str(want), nrv_last_error());
    if (want != NRV_OK) NRV_EXPECT(all_sentinel(py, y->numel), "%s: output written on failure", what);
    if (s != NRV_OK)
        NRV_EXPECT(strstr(nrv_last_error(), "test_node") != NULL, "%s: message lacks the node name: %s", what,
                   nrv_last_error());
    free(py);
}

static void test_errors(void) {
    float fbuf[64] = {0};
    uint16_t hbuf[64] = {0};
    const int64_t act0[1] = {0}, act_bad[1] = {99}, two[2] = {0, 0};
    const int64_t xd[2] = {2, 4}, wd[2] = {3, 4}, wbad[2] = {3, 5}, w3[3] = {3, 4, 1}, yd[2] = {2, 3}, ybad[2] = {2, 4};
    const int64_t n3 = 3, n4 = 4;
    nrv_tview x = mkview(fbuf, NRV_F32, 2, xd), w = mkview(hbuf, NRV_F16, 2, wd), b = mkview(fbuf, NRV_F32, 1, &n3);
    nrv_tview y = mkview(NULL, NRV_F32, 2, yd);
    const nrv_tview *in[3] = {&x, &w, &b};
    expect_fail("ok", in, 3, &y, act0, 1, NRV_OK);
    nrv_tview wf = mkview(fbuf, NRV_F32, 2, wd);
    in[1] = &wf;
    expect_fail("w f32", in, 3, &y, act0, 1, NRV_ERR_DTYPE);
    nrv_tview wk = mkview(hbuf, NRV_F16, 2, wbad);
    in[1] = &wk;
    expect_fail("w K mismatch", in, 3, &y, act0, 1, NRV_ERR_SHAPE);
    nrv_tview wr = mkview(hbuf, NRV_F16, 3, w3);
    in[1] = &wr;
    expect_fail("w rank 3", in, 3, &y, act0, 1, NRV_ERR_SHAPE);
    in[1] = NULL;
    expect_fail("w absent", in, 3, &y, act0, 1, NRV_ERR_INVALID_ARG);
    in[1] = &w;
    nrv_tview xh = mkview(hbuf, NRV_F16, 2, xd);
    in[0] = &xh;
    expect_fail("x f16", in, 3, &y, act0, 1, NRV_ERR_DTYPE);
    in[0] = &x;
    nrv_tview b4 = mkview(fbuf, NRV_F32, 1, &n4);
    in[2] = &b4;
    expect_fail("bias of 4", in, 3, &y, act0, 1, NRV_ERR_SHAPE);
    nrv_tview bh = mkview(hbuf, NRV_F16, 1, &n3);
    in[2] = &bh;
    expect_fail("bias f16", in, 3, &y, act0, 1, NRV_ERR_DTYPE);
    in[2] = &b;
    nrv_tview yb = mkview(NULL, NRV_F32, 2, ybad);
    expect_fail("y of N 4", in, 3, &yb, act0, 1, NRV_ERR_SHAPE);
    nrv_tview yh = mkview(NULL, NRV_F16, 2, yd);
    expect_fail("y f16", in, 3, &yh, act0, 1, NRV_ERR_DTYPE);
    expect_fail("bad activation", in, 3, &y, act_bad, 1, NRV_ERR_INVALID_ARG);
    expect_fail("two integer attributes", in, 3, &y, two, 2, NRV_ERR_INVALID_ARG);
    expect_fail("one input", in, 1, &y, act0, 1, NRV_ERR_INVALID_ARG);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("linear_f16") && !strcmp(nrv_plan_op_find("linear_f16")->kernel_op, "linear_f16"),
               "linear_f16 registered with its kernel op");
    sweep_kernel();
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0x7716u + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        test_op();
    }
    unforce();
    printf("worst op error: %.3f of tolerance (rtol %g, atol %g)\n", worst_seen, RTOL, ATOL);
    test_op_edges();
    test_errors();
    return nrv_test_summary("test_linear_f16");
}
