/* test_linear_w8a8.c — the int8 x int8 linear layer (kernel "linear_w8a8", every variant
 * compiled in, the packing function, and the plan ops "linear_w8a8" and "pack_w8a8").
 *
 * Packing: every byte of the packed weight against the layout of kernels.h (blocks
 * [N/16][K/4][16][4], zero padding, int32 colsum after them).
 * Kernel sweep: rows 1 2 3 7 16 33 130 x K 1 3 13 97 416 1025, each pair with two N of
 * 1 3 13 97 257 1664 (rotated), modes cycling per-tensor / per-output s and z, z absent,
 * bias on / off, a zero row and an outlier row. The reference's result is checked against a
 * double-precision evaluation of the same math written here (the quantisation done the
 * same way in fp32 — amax, nrv_w8a8_row_scale, clamp, nearbyintf — then the int8 products
 * summed exactly in int64 and the epilogue in double). Tolerance: 8·FLT_EPSILON times the
 * magnitude of the epilogue's terms (s·sx, sx·Σxq, z·rsum and the conversion of acc round,
 * the fma and the bias add round once each). The zero-point term uses the quantised row's
 * sum (sx·Σ xq), as kernels/linear_w8a8.c says; test_zero_point_sees_the_quantised_row
 * checks what that buys.
 * Every runnable variant must then be bit-identical to the reference, also when the rows
 * are computed in two calls. Inputs are allocated to their exact size (an ASan build
 * catches reads past them) and outputs carry a canary tail.
 * The plan op: rank-3 x with fused activations, threads 1..4 bit-identical to one thread and
 * to the reference kernel, K == 0, rows == 0, K above the limit, and its error paths, which
 * must leave the output untouched.
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

#define RTOL 1e-4 /* plan op after the activations (check_close) */
#define ATOL 1e-4
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"linear_w8a8", "relu", "gelu", "sigmoid", "tanh"};
#include "nrv_plan_test.h"
#include "nrv_w8_test.h"

/* ------------------------------------------------------------------ inputs */

/* mode bit 0: s, z per output; bit 1: bias; bit 2: no z. Then a zero row and an outlier
 * in x, and q packed. */
static void case_make(w8_case *c, int64_t rows, int64_t K, int64_t N, int mode) {
    w8_case_make(c, rows, K, N, mode & 1, !((mode >> 2) & 1), (mode >> 1) & 1);
    if (mode & 1 && rows > 2) memset(c->x + 2 * K, 0, (size_t)K * sizeof(float)); /* a zero row */
    if (rows > 1) c->x[K + (K - 1) / 2] = 40.0f;                                    /* an outlier */
    c->packed = xcalloc((size_t)nrv_linear_w8a8_packed_bytes(N, K));
    nrv_linear_w8a8_pack(c->q, N, K, c->packed);
}

/* want[r, n] in double and its tolerance */
static void case_ref(const w8_case *c, double *want, double *tol) {
    const int64_t st = c->per_row ? 1 : 0, K = c->K;
    int8_t *xq = xcalloc((size_t)K);
    for (int64_t r = 0; r < c->rows; r++) {
        const float *xr = c->x + r * K;
        float amax = 0.0f;
        for (int64_t k = 0; k < K; k++) amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
        float inv, sx;
        nrv_w8a8_row_scale(amax, &inv, &sx);
        for (int64_t k = 0; k < K; k++) {
            float v = xr[k] * inv;
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            xq[k] = (int8_t)nearbyintf(v);
        }
        int64_t isum = 0;
        for (int64_t k = 0; k < K; k++) isum += xq[k];
        const double sum = (double)sx * (double)isum;
        for (int64_t n = 0; n < c->N; n++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (int64_t)xq[k] * c->q[n * K + k];
            const double s = c->s[n * st], z = c->z ? c->z[n * st] : 0.0, b = c->b ? c->b[n] : 0.0;
            const double main = s * (double)sx * (double)acc;
            want[r * c->N + n] = main + z * sum + b;
            tol[r * c->N + n] = 8.0 * FLT_EPSILON * (fabs(main) + fabs(z * sum) + fabs(b)) + 1e-30;
        }
    }
    free(xq);
}

/* ------------------------------------------------------------------ packing */

static void test_pack(void) {
    const int64_t Ns[] = {1, 15, 16, 17, 40}, Ks[] = {1, 3, 4, 5, 13};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            const int64_t N = Ns[i], K = Ks[(i + j) % 5], np = (N + 15) / 16 * 16, kp = (K + 3) / 4 * 4;
            NRV_EXPECT(nrv_linear_w8a8_packed_bytes(N, K) == np * kp + 4 * np, "packed bytes N=%lld K=%lld",
                       (long long)N, (long long)K);
            int8_t *q = xcalloc((size_t)(N * K)), *p = xcalloc((size_t)(np * kp + 4 * np));
            for (int64_t t = 0; t < N * K; t++) q[t] = (int8_t)((int)(nrv_test_u64() % 256u) - 128);
            memset(p, 0x55, (size_t)(np * kp + 4 * np));
            nrv_linear_w8a8_pack(q, N, K, p);
            int bad = 0;
            for (int64_t n = 0; n < np; n++) {
                int32_t want_cs = 0, cs;
                for (int64_t k = 0; k < kp; k++) {
                    const int8_t want = n < N && k < K ? q[n * K + k] : 0;
                    want_cs += want;
                    bad += p[((n / 16) * (kp / 4) + k / 4) * 64 + (n % 16) * 4 + k % 4] != want;
                }
                memcpy(&cs, p + np * kp + 4 * n, 4);
                bad += cs != want_cs;
            }
            NRV_EXPECT(bad == 0, "pack N=%lld K=%lld: %d bytes / colsums off the documented layout", (long long)N,
                       (long long)K, bad);
            free(q);
            free(p);
        }
}

/* ------------------------------------------------------------------ kernel sweep */

static const int64_t kRows[] = {1, 2, 3, 7, 16, 33, 130};
static const int64_t kK[] = {1, 3, 13, 97, 416, 1025};
static const int64_t kN[] = {1, 3, 13, 97, 257, 1664};
static double kernel_worst = 0.0;

static void kernel_case(int64_t rows, int64_t K, int64_t N, int mode, const char **variants, int nv) {
    w8_case c;
    case_make(&c, rows, K, N, mode);
    const int64_t st = c.per_row ? 1 : 0, n = rows * N;
    float *yref = outbuf(n);
    nrv_linear_w8a8_ref(c.x, rows, K, c.packed, N, c.s, c.z, st, c.b, yref);
    double *want = xcalloc((size_t)n * sizeof(double)), *tol = xcalloc((size_t)n * sizeof(double));
    case_ref(&c, want, tol);
    int64_t at;
    const double worst = w8_worst_err(yref, want, tol, n, &at);
    if (worst > kernel_worst) kernel_worst = worst;
    NRV_EXPECT(worst <= 1.0 && tail_intact(yref, n),
               "w8a8 ref rows=%lld K=%lld N=%lld mode=%d: err %.3g of tolerance at %lld (got %.9g want %.9g)",
               (long long)rows, (long long)K, (long long)N, mode, worst, (long long)at, (double)yref[at], want[at]);
    for (int v = 0; v < nv; v++) {
        NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8a8", variants[v]), NRV_OK);
        const nrv_linear_w8a8_fn f = nrv_kernel_get(NRV_OP_LINEAR_W8A8).linear_w8a8;
        float *y = outbuf(n);
        f(c.x, rows, K, c.packed, N, c.s, c.z, st, c.b, y);
        NRV_EXPECT(memcmp(y, yref, (size_t)n * sizeof(float)) == 0 && tail_intact(y, n),
                   "w8a8 %s rows=%lld K=%lld N=%lld mode=%d: not bit-identical to the reference", variants[v],
                   (long long)rows, (long long)K, (long long)N, mode);
        if (rows > 1) { /* rows in two calls */
            const int64_t r1 = rows / 3 + 1;
            float *y2 = outbuf(n);
            f(c.x, r1, K, c.packed, N, c.s, c.z, st, c.b, y2);
            f(c.x + r1 * K, rows - r1, K, c.packed, N, c.s, c.z, st, c.b, y2 + r1 * N);
            NRV_EXPECT(memcmp(y2, yref, (size_t)n * sizeof(float)) == 0 && tail_intact(y2, n),
                       "w8a8 %s rows=%lld K=%lld N=%lld: rows in two calls differ", variants[v], (long long)rows,
                       (long long)K, (long long)N);
            free(y2);
        }
        free(y);
    }
    free(want);
    free(tol);
    free(yref);
    w8_case_free(&c);
}

static void sweep_kernel(void) {
    const int nv_all = nrv_kernel_variant_count("linear_w8a8");
    NRV_EXPECT(nv_all >= 1 && !strcmp(nrv_kernel_variant_name("linear_w8a8", nv_all - 1), "ref"),
               "linear_w8a8: the reference must be the last variant");
    const char *variants[16];
    const int nv = runnable_variants("linear_w8a8", variants, 16);
    for (int i = 0; i < nv_all; i++)
        if (!nrv_kernel_variant_runnable("linear_w8a8", i)) {
            printf("skip linear_w8a8 variant=%s: not runnable on this CPU\n", nrv_kernel_variant_name("linear_w8a8", i));
            NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8a8", nrv_kernel_variant_name("linear_w8a8", i)),
                              NRV_ERR_UNSUPPORTED);
        }
    int cases = 0, mode = 0;
    for (int ri = 0; ri < 7; ri++)
        for (int ki = 0; ki < 6; ki++)
            for (int j = 0; j < 2; j++) {
                const int64_t N = kN[(ri + ki + 3 * j) % 6];
                if (kRows[ri] * kK[ki] * N > 60000000) continue; /* keep the sanitizer builds quick */
                kernel_case(kRows[ri], kK[ki], N, mode++ % 8, variants, nv);
                cases++;
            }
    kernel_case(130, 416, 1664, 3, variants, nv); /* the encoder's shape class */
    kernel_case(33, 1664, 416, 4, variants, nv);
    /* rows wider than the stack holds 8 of: K cut in slices (the last 4 bytes / a partial one) */
    for (int m = 0; m < 8; m += 3) {
        kernel_case(11, 4099, 37, m, variants, nv);
        kernel_case(9, 10001, 21, m + 1, variants, nv);
    }
    /* the AMX variant's K slices (2048 bytes) with both row halves, one half partly filled,
     * a K that is a multiple of 64 and one that is not, an odd number of output blocks */
    kernel_case(40, 4099, 37, 2, variants, nv);
    kernel_case(17, 2049, 45, 5, variants, nv);
    kernel_case(32, 2112, 16, 6, variants, nv);
    NRV_EXPECT_STATUS(nrv_kernel_force("linear_w8a8", NULL), NRV_OK);
    printf("kernel linear_w8a8 variants=%d cases=%d ref max_err=%.2f of tolerance\n", nv, cases + 11, kernel_worst);
}

/* ------------------------------------------------------------------ the plan ops */

static nrv_status run_op(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia,
                         int n_ia, const float *fa, int n_fa) {
    return nrv_plan_run_op(type, in, n_in, y, ia, n_ia, fa, n_fa, NULL, 0, NULL);
}

/* x [d0, d1, K], weight packed by the pack_w8a8 op, through the op with act; threads 2..4
 * bit-identical to 1; act NONE bit-identical to the reference kernel. */
static void op_case(int64_t d0, int64_t d1, int64_t K, int64_t N, int mode, int64_t act, nrv_threadpool *const *pools) {
    w8_case c;
    case_make(&c, d0 * d1, K, N, mode);
    const int64_t xd[3] = {d0, d1, K}, qd[2] = {N, K}, ns = c.per_row ? N : 1, yd[3] = {d0, d1, N};
    const int64_t pb = nrv_linear_w8a8_packed_bytes(N, K);
    /* pack through the op */
    int8_t *packed = xcalloc((size_t)pb);
    nrv_tview qv = mkview(c.q, NRV_I8, 2, qd), pv = mkview(packed, NRV_I8, 1, &pb);
    const nrv_tview *pin[1] = {&qv};
    NRV_EXPECT_STATUS(run_op("pack_w8a8", pin, 1, &pv, NULL, 0, NULL, 0), NRV_OK);
    NRV_EXPECT(memcmp(packed, c.packed, (size_t)pb) == 0, "pack_w8a8 op differs from nrv_linear_w8a8_pack");
    nrv_tview x = mkview(c.x, NRV_F32, 3, xd);
    nrv_tview s = mkview(c.s, NRV_F32, 1, &ns), z = mkview(c.z, NRV_F32, 1, &ns), b = mkview(c.b, NRV_F32, 1, &N);
    const nrv_tview *in[5] = {&x, &pv, &s, c.with_z ? &z : NULL, c.with_bias ? &b : NULL};
    float p0, p1;
    act_params(act, &p0, &p1);
    const int64_t ia[3] = {act, N, K};
    const float fa[2] = {p0, p1};
    const int64_t n = d0 * d1 * N;
    float *y1 = w8_op_threads("linear_w8a8", in, 5, ia, 3, fa, 3, yd, pools);
    double *want = xcalloc((size_t)(n + 1) * sizeof(double)), *tol = xcalloc((size_t)(n + 1) * sizeof(double));
    case_ref(&c, want, tol);
    for (int64_t i = 0; i < n; i++) want[i] = act_ref(act, want[i], p0, p1);
    char what[512];
    snprintf(what, sizeof what, "linear_w8a8 op [%lld,%lld,%lld]x[%lld] mode=%d act=%lld (%s)", (long long)d0,
             (long long)d1, (long long)K, (long long)N, mode, (long long)act, round_desc);
    check_close(what, y1, want, n);
    if (act == 0) {
        float *yr = outbuf(n);
        nrv_linear_w8a8_ref(c.x, d0 * d1, K, c.packed, N, c.s, c.z, c.per_row, c.b, yr);
        NRV_EXPECT(memcmp(yr, y1, (size_t)n * sizeof(float)) == 0, "%s: not bit-identical to the reference", what);
        free(yr);
    }
    free(want);
    free(tol);
    free(y1);
    free(packed);
    w8_case_free(&c);
}

static void test_op(void) {
    nrv_threadpool *pools[4];
    w8_pools_make(pools);
    op_case(1, 123, 416, 416, 0, 0, pools);
    op_case(2, 65, 416, 1664, 1, 1, pools);
    op_case(2, 3, 97, 257, 3, 2, pools);
    op_case(1, 40, 64, 130, 4, 3, pools);
    op_case(3, 1, 13, 97, 5, 4, pools);
    op_case(1, 70, 1025, 300, 6, 6, pools);
    op_case(1, 2, 33, 65, 7, 7, pools);
    op_case(5, 7, 1664, 33, 2, 0, pools);
    w8_pools_free(pools);
}

static void expect_fail(const char *what, const nrv_tview *const *in, int n_in, nrv_tview *y, const int64_t *ia,
                        int n_ia, nrv_status want) {
    w8_expect_fail("linear_w8a8", what, in, n_in, y, ia, n_ia, want);
}

static void test_edges_and_errors(void) {
    /* K == 0: y = bias; rows == 0: nothing written */
    {
        const int64_t N = 5, xd[2] = {3, 0}, yd[2] = {3, 5}, pb = nrv_linear_w8a8_packed_bytes(5, 0), one = 1;
        int8_t packed[64] = {0};
        float bias[5] = {1, 2, 3, 4, 5}, sc = 1.0f, xdummy = 0.0f;
        nrv_tview x = mkview(&xdummy, NRV_F32, 2, xd), p = mkview(packed, NRV_I8, 1, &pb);
        nrv_tview s = mkview(&sc, NRV_F32, 1, &one), b = mkview(bias, NRV_F32, 1, &N);
        nrv_tview y = mkview(outbuf(15), NRV_F32, 2, yd);
        const nrv_tview *in[5] = {&x, &p, &s, NULL, &b};
        const int64_t ia[3] = {0, 5, 0};
        const float fa[2] = {0, 0};
        NRV_EXPECT_STATUS(run_op("linear_w8a8", in, 5, &y, ia, 3, fa, 2), NRV_OK);
        int ok = 1;
        for (int i = 0; i < 15; i++) ok &= ((float *)y.data)[i] == bias[i % 5];
        NRV_EXPECT(ok && tail_intact(y.data, 15), "linear_w8a8 K == 0: y must be the bias");
        free(y.data);
        const int64_t x0[2] = {0, 0}, y0[2] = {0, 5};
        x = mkview(&xdummy, NRV_F32, 2, x0);
        y = mkview(outbuf(0), NRV_F32, 2, y0);
        NRV_EXPECT_STATUS(run_op("linear_w8a8", in, 5, &y, ia, 3, fa, 2), NRV_OK);
        NRV_EXPECT(all_sentinel(y.data, 0), "linear_w8a8 rows == 0 wrote something");
        free(y.data);
    }
    float fbuf[64] = {0};
    int8_t pbuf[256] = {0};
    const int64_t xd[2] = {2, 4}, yd[2] = {2, 3}, ybad[2] = {2, 4}, xbad[2] = {2, 5};
    const int64_t n3 = 3, n1 = 1, n2 = 2, n4 = 4, pb = nrv_linear_w8a8_packed_bytes(3, 4), pbad = pb - 1;
    const int64_t ia[3] = {0, 3, 4}, ia_act[3] = {99, 3, 4}, ia_bigk[3] = {0, 3, NRV_W8A8_MAX_K + 4};
    const int64_t ia_negn[3] = {0, -1, 4};
    nrv_tview x = mkview(fbuf, NRV_F32, 2, xd), p = mkview(pbuf, NRV_I8, 1, &pb), s = mkview(fbuf, NRV_F32, 1, &n3);
    nrv_tview z = mkview(fbuf, NRV_F32, 1, &n3), b = mkview(fbuf, NRV_F32, 1, &n3), y = mkview(NULL, NRV_F32, 2, yd);
    const nrv_tview *in[5] = {&x, &p, &s, &z, &b};
    expect_fail("ok", in, 5, &y, ia, 3, NRV_OK);
    nrv_tview pf = mkview(fbuf, NRV_F32, 1, &pb);
    in[1] = &pf;
    expect_fail("packed f32", in, 5, &y, ia, 3, NRV_ERR_DTYPE);
    nrv_tview ps = mkview(pbuf, NRV_I8, 1, &pbad);
    in[1] = &ps;
    expect_fail("packed size", in, 5, &y, ia, 3, NRV_ERR_SHAPE);
    in[1] = &p;
    nrv_tview xk = mkview(fbuf, NRV_F32, 2, xbad);
    in[0] = &xk;
    expect_fail("x K mismatch", in, 5, &y, ia, 3, NRV_ERR_SHAPE);
    in[0] = &x;
    nrv_tview s2 = mkview(fbuf, NRV_F32, 1, &n2);
    in[2] = &s2;
    expect_fail("s of 2 for N 3", in, 5, &y, ia, 3, NRV_ERR_SHAPE);
    nrv_tview s1 = mkview(fbuf, NRV_F32, 1, &n1);
    in[2] = &s1;
    expect_fail("s of 1, z of 3", in, 5, &y, ia, 3, NRV_ERR_SHAPE);
    nrv_tview z1 = mkview(fbuf, NRV_F32, 1, &n1);
    in[3] = &z1;
    expect_fail("s, z of 1", in, 5, &y, ia, 3, NRV_OK);
    in[2] = &s;
    in[3] = &z;
    in[2] = NULL;
    expect_fail("s absent", in, 5, &y, ia, 3, NRV_ERR_INVALID_ARG);
    in[2] = &s;
    nrv_tview b4 = mkview(fbuf, NRV_F32, 1, &n4);
    in[4] = &b4;
    expect_fail("bias of 4", in, 5, &y, ia, 3, NRV_ERR_SHAPE);
    in[4] = &b;
    nrv_tview yb = mkview(NULL, NRV_F32, 2, ybad);
    expect_fail("y of N 4", in, 5, &yb, ia, 3, NRV_ERR_SHAPE);
    expect_fail("bad activation", in, 5, &y, ia_act, 3, NRV_ERR_INVALID_ARG);
    expect_fail("K above the limit", in, 5, &y, ia_bigk, 3, NRV_ERR_UNSUPPORTED);
    expect_fail("negative N", in, 5, &y, ia_negn, 3, NRV_ERR_INVALID_ARG);
    expect_fail("one iattr", in, 5, &y, ia, 1, NRV_ERR_INVALID_ARG);
    expect_fail("two inputs", in, 2, &y, ia, 3, NRV_ERR_INVALID_ARG);
    /* pack_w8a8: wrong output size writes nothing */
    {
        const int64_t qd[2] = {3, 4};
        int8_t q[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, outb[256];
        memset(outb, 0x5a, sizeof outb);
        nrv_tview qv = mkview(q, NRV_I8, 2, qd), ov = mkview(outb, NRV_I8, 1, &pbad);
        const nrv_tview *pin[1] = {&qv};
        NRV_EXPECT_STATUS(run_op("pack_w8a8", pin, 1, &ov, NULL, 0, NULL, 0), NRV_ERR_SHAPE);
        int untouched = 1;
        for (int i = 0; i < 256; i++) untouched &= outb[i] == 0x5a;
        NRV_EXPECT(untouched, "pack_w8a8: output written on failure");
    }
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("linear_w8a8") && !strcmp(nrv_plan_op_find("linear_w8a8")->kernel_op, "linear_w8a8"),
               "linear_w8a8 registered with its kernel op");
    NRV_EXPECT(nrv_plan_op_find("pack_w8a8") != NULL, "pack_w8a8 registered");
    test_pack();
    sweep_kernel();
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0x8a8au + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        test_op();
    }
    unforce();
    printf("worst op error: %.3f of tolerance (rtol %g, atol %g)\n", worst_seen, RTOL, ATOL);
    test_edges_and_errors();
    return nrv_test_summary("test_linear_w8a8");
}
