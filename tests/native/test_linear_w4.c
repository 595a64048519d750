/* test_linear_w4.c — INT4-weight linear layers (kernels "linear_w4a32" and "linear_w4a8",
 * every variant compiled in and runnable here) and the W4 helpers (nrv_w4_pack / unpack /
 * check, nrv_linear_w4).
 *
 * Layout: nrv_w4_pack's bytes against nerve.h's description, unpack(pack(q)) == q.
 * Kernel sweep: rows 1 2 3 5 8 x widths 32 64 96 160 416 1024 4096 x groups 32 64 128
 * (those that divide the width), outputs cycling 1 3 13 97 127 257, symmetric and with zero
 * points, bias on and off, a zero row and an outlier. References in double:
 *  - w4a32: Σ_k x·scale·(q - zero) (the dequantise-then-multiply product). Budget:
 *    4·sqrt(K)·FLT_EPSILON·M with M = Σ_k |x_k|·|scale|·(|q - zero| + 16) — fp32 sums in any
 *    order, a variant may also split (q - zero) into q + 8 and -(8 + zero);
 *  - w4a8: the quantised math (xq, sx from nrv_w8a8_quantise_row_ref, which every variant
 *    reproduces, the group sums exact in int64) with budget 4·sqrt(G + K/G)·FLT_EPSILON·sx·
 *    Σ_g |scale_g|·(Σ_k |xq·(q - zero)| + 16·Σ_k |xq|); and the dequantise-then-multiply
 *    product above within the activation quantisation error Σ_k |w_k|·sx/2 (+ the budget).
 * Every variant: the packed and unpacked layouts bit-identical, outputs split in two calls
 * (nrv_w4_rows) and rows split in two calls (at a multiple of NRV_W4_ROW_BLOCK) bit-identical
 * to one call, nothing written past y.
 * Bad input: each nrv_w4_check / nrv_w4_pack / nrv_linear_w4 error, y untouched. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_test.h"

#define GUARD 16
#define SENTINEL 12345.5f

static void *xcalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static float *outbuf(int64_t n) {
    float *p = xcalloc((size_t)(n + GUARD) * sizeof(float));
    for (int64_t i = 0; i < n + GUARD; i++) p[i] = SENTINEL;
    return p;
}

static int tail_intact(const float *p, int64_t n) {
    for (int64_t i = n; i < n + GUARD; i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

typedef struct w4_case {
    int64_t rows, N, K, G;
    float *x, *b;
    int8_t *q, *zero;
    uint8_t *packed;
    uint16_t *scales;
} w4_case;

static void case_make(w4_case *c, int64_t rows, int64_t N, int64_t K, int64_t G, int with_zero, int with_bias) {
    memset(c, 0, sizeof *c);
    c->rows = rows, c->N = N, c->K = K, c->G = G;
    const int64_t ng = K / G;
    c->x = xcalloc((size_t)(rows * K) * sizeof(float));
    nrv_test_fill(c->x, rows * K, -1.0f, 1.0f);
    if (rows > 2) memset(c->x + 2 * K, 0, (size_t)K * sizeof(float)); /* a zero row */
    if (rows > 1) c->x[K + K / 3] = 25.0f;                             /* an outlier */
    c->q = xcalloc((size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) c->q[i] = (int8_t)((int)(nrv_test_u64() % 16u) - 8);
    c->packed = xcalloc((size_t)(N * K / 2));
    NRV_EXPECT_STATUS(nrv_w4_pack(c->q, N, K, c->packed), NRV_OK);
    c->scales = xcalloc((size_t)(N * ng) * 2);
    for (int64_t i = 0; i < N * ng; i++) {
        float s = nrv_test_uniform(0.002f, 0.05f);
        if (nrv_test_u64() & 1) s = -s; /* negative scales are valid */
        c->scales[i] = nrv_float_to_half(s);
    }
    if (with_zero) {
        c->zero = xcalloc((size_t)(N * ng));
        for (int64_t i = 0; i < N * ng; i++) c->zero[i] = (int8_t)((int)(nrv_test_u64() % 16u) - 8);
    }
    if (with_bias) {
        c->b = xcalloc((size_t)N * sizeof(float));
        nrv_test_fill(c->b, N, -1.0f, 1.0f);
    }
}

static void case_free(w4_case *c) {
    free(c->x), free(c->b), free(c->q), free(c->zero), free(c->packed), free(c->scales);
}

static nrv_w4_weight case_weight(const w4_case *c, int layout) {
    nrv_w4_weight w = {c->N, c->K, (int32_t)c->G, layout, layout == NRV_W4_PACKED ? (const void *)c->packed
                                                                                   : (const void *)c->q,
                       c->scales, c->zero};
    return w;
}

/* w4a32's reference: the dequantised product in double, its budget and the weight magnitude
 * Σ|w| per output (for w4a8's activation error). */
static void ref_a32(const w4_case *c, double *want, double *tol, double *wabs) {
    const int64_t K = c->K, G = c->G, ng = K / G;
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t o = 0; o < c->N; o++) {
            double acc = 0.0, mag = 0.0, wa = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const int64_t g = k / G;
                const double s = nrv_half_to_float(c->scales[o * ng + g]);
                const int z = c->zero ? c->zero[o * ng + g] : 0;
                const double wv = s * (c->q[o * K + k] - z), xv = c->x[r * K + k];
                acc += xv * wv;
                mag += fabs(xv) * fabs(s) * (abs(c->q[o * K + k] - z) + 16);
                wa += fabs(wv);
            }
            want[r * c->N + o] = acc + (c->b ? c->b[o] : 0.0);
            tol[r * c->N + o] = 4.0 * sqrt((double)K) * FLT_EPSILON * mag + 1e-30;
            if (wabs) wabs[o] = wa;
        }
}

/* w4a8's reference: the quantised math in double, its budget, and sx per row. */
static void ref_a8(const w4_case *c, double *want, double *tol, float *sx) {
    const int64_t K = c->K, G = c->G, ng = K / G;
    int8_t *xq = xcalloc((size_t)K);
    for (int64_t r = 0; r < c->rows; r++) {
        sx[r] = nrv_w8a8_quantise_row_ref(c->x + r * K, K, xq);
        for (int64_t o = 0; o < c->N; o++) {
            double acc = 0.0, mag = 0.0;
            for (int64_t g = 0; g < ng; g++) {
                const double s = nrv_half_to_float(c->scales[o * ng + g]);
                const int z = c->zero ? c->zero[o * ng + g] : 0;
                int64_t d = 0, dabs = 0, xabs = 0;
                for (int64_t k = g * G; k < (g + 1) * G; k++) {
                    d += (int64_t)xq[k] * (c->q[o * K + k] - z);
                    dabs += llabs((int64_t)xq[k] * (c->q[o * K + k] - z));
                    xabs += abs(xq[k]);
                }
                acc += s * (double)d;
                mag += fabs(s) * (double)(dabs + 16 * xabs);
            }
            want[r * c->N + o] = sx[r] * acc + (c->b ? c->b[o] : 0.0);
            tol[r * c->N + o] = 4.0 * sqrt((double)(G + ng)) * FLT_EPSILON * sx[r] * mag + 1e-30;
        }
    }
    free(xq);
}

static double worst_err(const float *got, const double *want, const double *tol, int64_t n, int64_t *at) {
    double worst = 0.0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]) / tol[i];
        if (e > worst) worst = e, *at = i;
    }
    return worst;
}

static const char *const kW4Ops[] = {"linear_w4a32", "linear_w4a8"};
static double kernel_worst[2];

/* One case through every runnable variant of both ops. */
static void sweep_case(int64_t rows, int64_t N, int64_t K, int64_t G, int with_zero, int with_bias) {
    w4_case c;
    case_make(&c, rows, N, K, G, with_zero, with_bias);
    const int64_t n = rows * N;
    double *want = xcalloc((size_t)n * sizeof(double)), *tol = xcalloc((size_t)n * sizeof(double));
    double *want32 = xcalloc((size_t)n * sizeof(double)), *tol32 = xcalloc((size_t)n * sizeof(double));
    double *wabs = xcalloc((size_t)N * sizeof(double));
    float *sx = xcalloc((size_t)rows * sizeof(float));
    ref_a32(&c, want32, tol32, wabs);
    float *y = outbuf(n), *y2 = outbuf(n), *y3 = outbuf(n);
    for (int a8 = 0; a8 < 2; a8++) {
        const char *op = kW4Ops[a8];
        if (a8) {
            ref_a8(&c, want, tol, sx);
        } else {
            memcpy(want, want32, (size_t)n * sizeof(double));
            memcpy(tol, tol32, (size_t)n * sizeof(double));
        }
        for (int v = 0; v < nrv_kernel_variant_count(op); v++) {
            if (!nrv_kernel_variant_runnable(op, v)) continue;
            const char *name = nrv_kernel_variant_name(op, v);
            NRV_EXPECT_STATUS(nrv_kernel_force(op, name), NRV_OK);
            const nrv_linear_w4_fn f = nrv_kernel_get(a8 ? NRV_OP_LINEAR_W4A8 : NRV_OP_LINEAR_W4A32).linear_w4;
            const nrv_w4_weight wu = case_weight(&c, NRV_W4_UNPACKED), wp = case_weight(&c, NRV_W4_PACKED);
            f(c.x, rows, &wu, c.b, y, N);
            f(c.x, rows, &wp, c.b, y2, N);
            int64_t at;
            const double e = worst_err(y, want, tol, n, &at);
            if (e > kernel_worst[a8]) kernel_worst[a8] = e;
            NRV_EXPECT(e <= 1.0, "%s %s rows=%lld N=%lld K=%lld G=%lld zero=%d: err %.3g of budget at %lld "
                       "(got %.9g want %.9g)", op, name, (long long)rows, (long long)N, (long long)K, (long long)G,
                       with_zero, e, (long long)at, (double)y[at], want[at]);
            NRV_EXPECT(memcmp(y, y2, (size_t)n * sizeof(float)) == 0,
                       "%s %s rows=%lld N=%lld K=%lld G=%lld: packed and unpacked layouts differ", op, name,
                       (long long)rows, (long long)N, (long long)K, (long long)G);
            NRV_EXPECT(tail_intact(y, n) && tail_intact(y2, n), "%s %s wrote past y", op, name);
            if (a8) { /* against the fp32 product: the activation quantisation error */
                double worst = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    const double bound = wabs[i % N] * sx[i / N] / 2.0 + tol[i] + tol32[i];
                    const double d = fabs(y[i] - want32[i]) / bound;
                    worst = d > worst ? d : worst;
                }
                NRV_EXPECT(worst <= 1.0, "%s %s rows=%lld N=%lld K=%lld: %.3g of the activation error bound", op,
                           name, (long long)rows, (long long)N, (long long)K, worst);
            }
            /* outputs in two calls, then rows in two calls (at a multiple of NRV_W4_ROW_BLOCK,
             * the kernels.h contract), each bit-identical */
            const int64_t o1 = N / 2, r1 = rows / 2 / NRV_W4_ROW_BLOCK * NRV_W4_ROW_BLOCK;
            const nrv_w4_weight lo = nrv_w4_rows(&wp, 0, o1), hi = nrv_w4_rows(&wp, o1, N - o1);
            if (o1) f(c.x, rows, &lo, c.b, y3, N);
            f(c.x, rows, &hi, c.b ? c.b + o1 : NULL, y3 + o1, N);
            NRV_EXPECT(memcmp(y2, y3, (size_t)n * sizeof(float)) == 0, "%s %s N=%lld: outputs split in two differ",
                       op, name, (long long)N);
            if (r1) f(c.x, r1, &wu, c.b, y3, N);
            f(c.x + r1 * K, rows - r1, &wu, c.b, y3 + r1 * N, N);
            NRV_EXPECT(memcmp(y, y3, (size_t)n * sizeof(float)) == 0, "%s %s rows=%lld: rows split in two differ",
                       op, name, (long long)rows);
        }
        NRV_EXPECT_STATUS(nrv_kernel_force(op, NULL), NRV_OK);
    }
    free(y), free(y2), free(y3), free(want), free(tol), free(want32), free(tol32), free(wabs), free(sx);
    case_free(&c);
}

static void test_sweep(void) {
    static const int64_t rows_set[] = {1, 2, 3, 5, 8, 13, 24}; /* 8+: full row blocks, 13: and a tail */
    static const int64_t k_set[] = {32, 64, 96, 160, 416, 1024, 2080, 4096}; /* 2080: slices + a partial quad */
    static const int64_t n_set[] = {1, 3, 13, 97, 127, 257};
    static const int64_t g_set[] = {32, 64, 128};
    int cases = 0, t = 0;
    for (size_t ki = 0; ki < sizeof k_set / sizeof *k_set; ki++)
        for (size_t gi = 0; gi < 3; gi++) {
            const int64_t K = k_set[ki], G = g_set[gi];
            if (K % G) continue;
            for (size_t ri = 0; ri < sizeof rows_set / sizeof *rows_set; ri++, t++) {
                const int64_t N = K >= 4096 ? n_set[t % 3] : n_set[t % 6];
                sweep_case(rows_set[ri], N, K, G, t % 2, (t / 2) % 2);
                cases++;
            }
        }
    printf("kernel linear_w4a32/w4a8 cases=%d worst err %.2f / %.2f of budget\n", cases, kernel_worst[0],
           kernel_worst[1]);
}

static void test_layout(void) {
    enum { N = 3, K = 64 };
    int8_t q[N * K], back[N * K];
    uint8_t p[N * K / 2];
    for (int i = 0; i < N * K; i++) q[i] = (int8_t)((i * 7 + i / 5) % 16 - 8);
    NRV_EXPECT_STATUS(nrv_w4_pack(q, N, K, p), NRV_OK);
    int bad = 0;
    for (int o = 0; o < N; o++)
        for (int blk = 0; blk < K / 32; blk++)
            for (int j = 0; j < 16; j++) {
                const int k0 = blk * 32, byte = p[o * K / 2 + blk * 16 + j];
                bad += (byte & 15) != q[o * K + k0 + j] + 8 || (byte >> 4) != q[o * K + k0 + 16 + j] + 8;
            }
    NRV_EXPECT(bad == 0, "packed bytes differ from the documented layout in %d places", bad);
    NRV_EXPECT_STATUS(nrv_w4_unpack(p, N, K, back), NRV_OK);
    NRV_EXPECT(memcmp(q, back, sizeof q) == 0, "unpack(pack(q)) != q");
}

static void test_errors(void) {
    enum { N = 2, K = 64 };
    int8_t q[N * K] = {0}, zero[N * 2] = {0};
    uint8_t p[N * K / 2];
    uint16_t s[N * 2];
    for (int i = 0; i < N * 2; i++) s[i] = nrv_float_to_half(0.5f);
    const float x[K] = {0};
    float y[N + GUARD];
    nrv_w4_weight w = {N, K, 32, NRV_W4_UNPACKED, q, s, zero};
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_OK);
    q[K + 5] = 8;
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(strstr(nrv_last_error(), "q[1, 5] = 8") != NULL, "names the element: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_w4_pack(q, N, K, p), NRV_ERR_INVALID_ARG);
    q[K + 5] = 0;
    const uint16_t bad_scales[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00};
    for (size_t i = 0; i < sizeof bad_scales / sizeof *bad_scales; i++) {
        s[3] = bad_scales[i];
        NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_INVALID_ARG);
        NRV_EXPECT(strstr(nrv_last_error(), "scale[1, group 1]") != NULL, "names the scale: %s", nrv_last_error());
    }
    s[3] = nrv_float_to_half(0.5f);
    zero[2] = -9;
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_INVALID_ARG);
    zero[2] = 0;
    w.group = 48;
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_INVALID_ARG);
    w.group = 128; /* does not divide 64 */
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_SHAPE);
    NRV_EXPECT(strstr(nrv_last_error(), "does not divide") != NULL, "%s", nrv_last_error());
    for (int i = 0; i < N + GUARD; i++) y[i] = SENTINEL;
    NRV_EXPECT_STATUS(nrv_linear_w4(x, 1, &w, NULL, 0, y), NRV_ERR_SHAPE);
    w.group = 32;
    w.layout = 2;
    NRV_EXPECT_STATUS(nrv_linear_w4(x, 1, &w, NULL, 0, y), NRV_ERR_INVALID_ARG);
    w.layout = NRV_W4_UNPACKED;
    NRV_EXPECT_STATUS(nrv_linear_w4(x, 1, &w, NULL, 2, y), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_linear_w4(NULL, 1, &w, NULL, 0, y), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_linear_w4(x, 1, NULL, NULL, 0, y), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_linear_w4(x, -1, &w, NULL, 0, y), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(tail_intact(y, 0), "a failed call wrote y");
    w.in = 32768, w.out = 1;
    NRV_EXPECT_STATUS(nrv_w4_check(&w), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT_STATUS(nrv_w4_pack(q, 1, 33, p), NRV_ERR_SHAPE);
    /* a valid call */
    w.in = K, w.out = N;
    NRV_EXPECT_STATUS(nrv_linear_w4(x, 1, &w, NULL, 1, y), NRV_OK);
    NRV_EXPECT(y[0] == 0.0f && y[1] == 0.0f && tail_intact(y, N), "zero x gives 0, nothing past y");
}

int main(void) {
    nrv_test_seed(4);
    test_layout();
    test_errors();
    test_sweep();
    return nrv_test_summary("test_linear_w4");
}
