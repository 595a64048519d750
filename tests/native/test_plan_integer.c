/* test_plan_integer.c — the exact integer plan ops (matmul_integer, conv_integer, requantize,
 * depthwise_integer)
 * against references written here, under every
 * variant of the dispatch ops they use, on 1 to 4 threads (integer sums are exact: every
 * thread count must give the same bits), and their error paths: a wrong dtype, a truncated
 * packed weight, a zero point of the wrong count or type, a bad attribute each fail with a
 * clear status naming the node and leave a sentinel-filled output untouched.
 * (tests/python/test_contrib_ops.py checks them against onnxruntime through sessions.)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

#define RTOL 0.0
#define ATOL 0.0
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"matmul_integer", "requant", "depthwise_q8"};
#include "nrv_plan_test.h"

#define I32_SENTINEL 0x5a5a5a5a

static int32_t *ibuf(int64_t n) {
    int32_t *p = xcalloc((size_t)(n + GUARD) * sizeof(int32_t));
    for (int64_t i = 0; i < n + GUARD; i++) p[i] = I32_SENTINEL;
    return p;
}

static int ibuf_untouched(const int32_t *p, int64_t from, int64_t n) {
    for (int64_t i = from; i < n + GUARD; i++)
        if (p[i] != I32_SENTINEL) return 0;
    return 1;
}

static uint8_t *rnd_bytes(int64_t n) {
    uint8_t *p = xcalloc((size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)(nrv_test_u64() % 256u);
    return p;
}

/* q [n, k] int8 packed by the pack_w8a8 op (as the compiler does). */
static int8_t *pack(const int8_t *q, int64_t n, int64_t k, int64_t *bytes) {
    *bytes = nrv_linear_w8a8_packed_bytes(n, k);
    int8_t *p = xcalloc((size_t)*bytes);
    const int64_t qd[2] = {n, k};
    nrv_tview qv = mkview((void *)q, NRV_I8, 2, qd), pv = mkview(p, NRV_I8, 1, bytes);
    const nrv_tview *in[1] = {&qv};
    NRV_EXPECT_STATUS(nrv_plan_run_op("pack_w8a8", in, 1, &pv, NULL, 0, NULL, 0, NULL, 0, NULL), NRV_OK);
    return p;
}

static int64_t xval(const uint8_t *x, int is_s8, int64_t i) { return is_s8 ? (int64_t)(int8_t)x[i] : (int64_t)x[i]; }

/* ------------------------------------------------------------------ matmul_integer */

static void matmul_case(int64_t rows, int64_t K, int64_t N, int is_s8, int per_row, int with_zq,
                        nrv_threadpool *const *pools) {
    uint8_t *a = rnd_bytes(rows * K), *za = rnd_bytes(rows);
    int8_t *q = (int8_t *)rnd_bytes(N * K);
    int32_t *zq = xcalloc((size_t)N * sizeof(int32_t));
    for (int64_t n = 0; n < N; n++) zq[n] = (int32_t)(nrv_test_u64() % 256u) - 128;
    int64_t pb;
    int8_t *packed = pack(q, N, K, &pb);
    const int64_t ad[2] = {rows, K}, zd[1] = {per_row ? rows : 1}, yd[2] = {rows, N};
    nrv_tview av = mkview(a, is_s8 ? NRV_I8 : NRV_U8, 2, ad), pv = mkview(packed, NRV_I8, 1, &pb),
              zav = mkview(za, is_s8 ? NRV_I8 : NRV_U8, 1, zd), zqv = mkview(zq, NRV_I32, 1, &N);
    const nrv_tview *in[4] = {&av, &pv, &zav, with_zq ? &zqv : NULL};
    const int64_t ia[2] = {N, K};
    int32_t *first = NULL;
    for (int t = 0; t < 4; t++) {
        int32_t *y = ibuf(rows * N);
        nrv_tview yv = mkview(y, NRV_I32, 2, yd);
        NRV_EXPECT_STATUS(nrv_plan_run_op("matmul_integer", in, 4, &yv, ia, 2, NULL, 0, NULL, 0, pools[t]), NRV_OK);
        NRV_EXPECT(ibuf_untouched(y, rows * N, rows * N), "matmul_integer: canary overwritten");
        if (!first) {
            first = y;
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t n = 0; n < N; n++) {
                    int64_t acc = 0;
                    const int64_t zr = xval(za, is_s8, per_row ? r : 0), zc = with_zq ? zq[n] : 0;
                    for (int64_t k = 0; k < K; k++) acc += (xval(a, is_s8, r * K + k) - zr) * (q[n * K + k] - zc);
                    bad += y[r * N + n] != (int32_t)acc;
                }
            NRV_EXPECT(bad == 0, "matmul_integer %lldx%lldx%lld s8=%d per_row=%d zq=%d (%s): %lld values wrong",
                       (long long)rows, (long long)K, (long long)N, is_s8, per_row, with_zq, round_desc, (long long)bad);
        } else {
            NRV_EXPECT(memcmp(first, y, (size_t)(rows * N) * sizeof(int32_t)) == 0,
                       "matmul_integer: %d threads differ from one", t + 1);
            free(y);
        }
    }
    free(first);
    free(a);
    free(za);
    free(q);
    free(zq);
    free(packed);
}

/* ------------------------------------------------------------------ conv_integer */

static void conv_case(int64_t B, int64_t C, int64_t H, int64_t W, int64_t M, const int64_t *ia12, int is_s8,
                      int with_zq, nrv_threadpool *const *pools) {
    const int64_t kh = ia12[2], kw = ia12[3], sh = ia12[4], sw = ia12[5], dh = ia12[6], dw = ia12[7];
    const int64_t pt = ia12[8], pl = ia12[9], pb_ = ia12[10], pr = ia12[11];
    const int64_t OH = (H + pt + pb_ - dh * (kh - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (kw - 1) - 1) / sw + 1;
    const int64_t K = C * kh * kw;
    uint8_t *x = rnd_bytes(B * C * H * W), zx = (uint8_t)(nrv_test_u64() % 256u);
    int8_t *w = (int8_t *)rnd_bytes(M * K), *q = xcalloc((size_t)(M * K));
    int32_t *zq = xcalloc((size_t)M * sizeof(int32_t));
    for (int64_t m = 0; m < M; m++) zq[m] = (int32_t)(nrv_test_u64() % 256u) - 128;
    /* W [M, C, kh, kw] -> q [M, kh·kw·C] (channel last, the op's K order) */
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < kh * kw; i++) q[m * K + i * C + c] = w[(m * C + c) * kh * kw + i];
    int64_t pbytes;
    int8_t *packed = pack(q, M, K, &pbytes);
    const int64_t xd[4] = {B, C, H, W}, one = 1, yd[4] = {B, M, OH, OW}, n = B * M * OH * OW;
    nrv_tview xv = mkview(x, is_s8 ? NRV_I8 : NRV_U8, 4, xd), pv = mkview(packed, NRV_I8, 1, &pbytes),
              zxv = mkview(&zx, is_s8 ? NRV_I8 : NRV_U8, 1, &one), zqv = mkview(zq, NRV_I32, 1, &M);
    const nrv_tview *in[4] = {&xv, &pv, &zxv, with_zq ? &zqv : NULL};
    int32_t *first = NULL;
    for (int t = 0; t < 4; t++) {
        int32_t *y = ibuf(n);
        nrv_tview yv = mkview(y, NRV_I32, 4, yd);
        NRV_EXPECT_STATUS(nrv_plan_run_op("conv_integer", in, 4, &yv, ia12, 12, NULL, 0, NULL, 0, pools[t]), NRV_OK);
        NRV_EXPECT(ibuf_untouched(y, n, n), "conv_integer: canary overwritten");
        if (!first) {
            first = y;
            int64_t bad = 0;
            const int64_t z0 = is_s8 ? (int64_t)(int8_t)zx : (int64_t)zx;
            for (int64_t b = 0; b < B; b++)
                for (int64_t m = 0; m < M; m++)
                    for (int64_t oh = 0; oh < OH; oh++)
                        for (int64_t ow = 0; ow < OW; ow++) {
                            int64_t acc = 0;
                            for (int64_t c = 0; c < C; c++)
                                for (int64_t i = 0; i < kh; i++)
                                    for (int64_t k = 0; k < kw; k++) {
                                        const int64_t ih = oh * sh - pt + i * dh, iw = ow * sw - pl + k * dw;
                                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue; /* x − zp = 0 */
                                        const int64_t xv_ = xval(x, is_s8, ((b * C + c) * H + ih) * W + iw) - z0;
                                        acc += xv_ * (w[((m * C + c) * kh + i) * kw + k] - (with_zq ? zq[m] : 0));
                                    }
                            bad += y[((b * M + m) * OH + oh) * OW + ow] != (int32_t)acc;
                        }
            NRV_EXPECT(bad == 0, "conv_integer C%lld %lldx%lld M%lld k%lldx%lld s8=%d (%s): %lld values wrong",
                       (long long)C, (long long)H, (long long)W, (long long)M, (long long)kh, (long long)kw, is_s8,
                       round_desc, (long long)bad);
        } else {
            NRV_EXPECT(memcmp(first, y, (size_t)n * sizeof(int32_t)) == 0, "conv_integer: %d threads differ", t + 1);
            free(y);
        }
    }
    /* requantized in the op (QLinearConv): the bytes of nrv_requant_ref on the int32 sums,
     * per channel (bias, a scale per channel or one, u8 or s8 output by case), on 1-4 threads */
    const int y_s8 = (int)(C % 2), per_channel = M % 3 != 0;
    int32_t *bias = xcalloc((size_t)M * sizeof(int32_t));
    float *scale = xcalloc((size_t)M * sizeof(float));
    for (int64_t m = 0; m < M; m++) {
        bias[m] = (int32_t)(nrv_test_u64() % 20001u) - 10000;
        scale[m] = (float)(1e-4 * (1.0 + (double)(nrv_test_u64() % 1000u)));
    }
    uint8_t zy = (uint8_t)(nrv_test_u64() % 256u);
    const int32_t z = y_s8 ? (int32_t)(int8_t)zy : (int32_t)zy;
    const int64_t nscale = per_channel ? M : 1;
    uint8_t *want = xcalloc((size_t)n + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t m = 0; m < M; m++) {
            const int64_t at = (b * M + m) * OH * OW;
            nrv_requant_ref(first + at, OH * OW, bias[m], scale[per_channel ? m : 0], (float)((y_s8 ? -128 : 0) - z),
                            (float)((y_s8 ? 127 : 255) - z), z, want + at);
        }
    nrv_tview bv = mkview(bias, NRV_I32, 1, &M), sv = mkview(scale, NRV_F32, 1, &nscale),
              zyv = mkview(&zy, y_s8 ? NRV_I8 : NRV_U8, 1, &one);
    const nrv_tview *rin[7] = {&xv, &pv, &zxv, with_zq ? &zqv : NULL, &bv, &sv, &zyv};
    int32_t *scratch = xcalloc((size_t)n * sizeof(int32_t)); /* the staged route's int32 sums */
    for (int t = 0; t < 4; t++) {
        uint8_t *yb = xcalloc((size_t)n + 64);
        memset(yb, 0xa5, (size_t)n + 64);
        nrv_tview yv = mkview(yb, y_s8 ? NRV_I8 : NRV_U8, 4, yd);
        NRV_EXPECT_STATUS(nrv_plan_run_op("conv_integer", rin, 7, &yv, ia12, 12, NULL, 0, scratch,
                                          (size_t)n * sizeof(int32_t), pools[t]),
                          NRV_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += yb[i] != want[i];
        for (int64_t i = n; i < n + 64; i++) bad += yb[i] != 0xa5;
        NRV_EXPECT(bad == 0, "conv_integer requantized C%lld M%lld k%lldx%lld s8 y=%d (%s, %d threads): %lld bytes wrong",
                   (long long)C, (long long)M, (long long)kh, (long long)kw, y_s8, round_desc, t + 1, (long long)bad);
        free(yb);
    }
    free(scratch);
    free(want);
    free(bias);
    free(scale);
    free(first);
    free(x);
    free(w);
    free(q);
    free(zq);
    free(packed);
}

/* ------------------------------------------------------------------ errors */

static void expect_int_fail(const char *what, const char *type, const nrv_tview *const *in, int n_in, nrv_tview *y,
                            const int64_t *ia, int nia, nrv_status want) {
    int32_t *p = ibuf(y->numel);
    y->data = p;
    const nrv_status s = nrv_plan_run_op(type, in, n_in, y, ia, nia, NULL, 0, NULL, 0, NULL);
    NRV_EXPECT(s == want, "%s: got %s, want %s (%s)", what, nrv_status_str(s), nrv_status_str(want), nrv_last_error());
    NRV_EXPECT(ibuf_untouched(p, 0, y->numel), "%s: output written on failure", what);
    if (s != NRV_OK)
        NRV_EXPECT(strstr(nrv_last_error(), "test_node") != NULL, "%s: message lacks the node name: %s", what,
                   nrv_last_error());
    nrv_clear_error();
    free(p);
}

static void test_errors(void) {
    const int64_t K = 13, N = 5, rows = 3;
    uint8_t *a = rnd_bytes(rows * K);
    int8_t *q = (int8_t *)rnd_bytes(N * K);
    int64_t pb;
    int8_t *packed = pack(q, N, K, &pb);
    float f[64] = {0};
    int32_t zq[8] = {0};
    uint8_t za[8] = {0};
    const int64_t ad[2] = {rows, K}, yd[2] = {rows, N}, short_pb = pb - 1, two = 2, n5 = N, n4 = 4;
    nrv_tview av = mkview(a, NRV_U8, 2, ad), fv = mkview(f, NRV_F32, 2, ad), pv = mkview(packed, NRV_I8, 1, &pb);
    nrv_tview pshort = mkview(packed, NRV_I8, 1, &short_pb), za2 = mkview(za, NRV_U8, 1, &two);
    nrv_tview zas8 = mkview(za, NRV_I8, 1, &two), zq5 = mkview(zq, NRV_I32, 1, &n5), zq4 = mkview(zq, NRV_I32, 1, &n4);
    nrv_tview y = mkview(NULL, NRV_I32, 2, yd), yf = mkview(NULL, NRV_F32, 2, yd);
    const int64_t ia[2] = {N, K}, ia_bad[2] = {N, K + 1};
    {
        const nrv_tview *in[2] = {&fv, &pv};
        expect_int_fail("matmul_integer float a", "matmul_integer", in, 2, &y, ia, 2, NRV_ERR_DTYPE);
    }
    {
        const nrv_tview *in[2] = {&av, &pshort};
        expect_int_fail("matmul_integer truncated weight", "matmul_integer", in, 2, &y, ia, 2, NRV_ERR_SHAPE);
    }
    {
        const nrv_tview *in[2] = {&av, &pv};
        expect_int_fail("matmul_integer K attribute vs a", "matmul_integer", in, 2, &y, ia_bad, 2, NRV_ERR_SHAPE);
        expect_int_fail("matmul_integer float output", "matmul_integer", in, 2, &yf, ia, 2, NRV_ERR_DTYPE);
    }
    {
        const nrv_tview *in[3] = {&av, &pv, &za2};
        expect_int_fail("matmul_integer 2 zero points for 3 rows", "matmul_integer", in, 3, &y, ia, 2, NRV_ERR_SHAPE);
    }
    {
        const nrv_tview *in[3] = {&av, &pv, &zas8};
        expect_int_fail("matmul_integer s8 zero point for u8 a", "matmul_integer", in, 3, &y, ia, 2, NRV_ERR_DTYPE);
    }
    {
        const nrv_tview *in[4] = {&av, &pv, NULL, &zq4};
        expect_int_fail("matmul_integer 4 weight zero points for 5 outputs", "matmul_integer", in, 4, &y, ia, 2,
                        NRV_ERR_SHAPE);
        (void)zq5;
    }
    /* conv_integer: C 2, 3x3 on 4x5, M 3 */
    const int64_t C = 2, M = 3, xd[4] = {1, C, 4, 5}, cyd[4] = {1, M, 4, 5}, cyd_bad[4] = {1, M, 3, 5}, one_ = 1;
    int64_t cpb;
    int8_t *cpacked = pack(q, M, C * 9, &cpb);
    nrv_tview xv = mkview(a, NRV_U8, 4, xd), cpv = mkview(cpacked, NRV_I8, 1, &cpb);
    nrv_tview cy = mkview(NULL, NRV_I32, 4, cyd), cy_bad = mkview(NULL, NRV_I32, 4, cyd_bad);
    const int64_t cia[12] = {M, C, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, cia_stride0[12] = {M, C, 3, 3, 0, 1, 1, 1, 1, 1, 1, 1};
    {
        const nrv_tview *in[2] = {&xv, &cpv};
        expect_int_fail("conv_integer wrong output extent", "conv_integer", in, 2, &cy_bad, cia, 12, NRV_ERR_SHAPE);
        expect_int_fail("conv_integer stride 0", "conv_integer", in, 2, &cy, cia_stride0, 12, NRV_ERR_INVALID_ARG);
        expect_int_fail("conv_integer 11 attributes", "conv_integer", in, 2, &cy, cia, 11, NRV_ERR_INVALID_ARG);
    }
    {
        const nrv_tview *in[3] = {&xv, &cpv, &za2};
        expect_int_fail("conv_integer 2 zero points", "conv_integer", in, 3, &cy, cia, 12, NRV_ERR_SHAPE);
    }
    {
        const nrv_tview *in[2] = {&xv, &pv};
        expect_int_fail("conv_integer weight of another shape", "conv_integer", in, 2, &cy, cia, 12, NRV_ERR_SHAPE);
    }
    { /* requantized: a bias without its scale, a zero scale, an int32 output, a zero point's dtype */
        const int64_t m3 = M;
        int32_t cbias[3] = {1, 2, 3};
        float zero_scale[3] = {0.5f, 0.0f, 0.5f}, good_scale[3] = {0.5f, 0.25f, 0.125f};
        int8_t zs8 = 0;
        nrv_tview bv = mkview(cbias, NRV_I32, 1, &m3), zsv = mkview(zero_scale, NRV_F32, 1, &m3),
                  gsv = mkview(good_scale, NRV_F32, 1, &m3), cyu8 = mkview(NULL, NRV_U8, 4, cyd),
                  zs8v = mkview(&zs8, NRV_I8, 1, &one_);
        const nrv_tview *no_scale[5] = {&xv, &cpv, NULL, NULL, &bv};
        expect_int_fail("conv_integer bias without scale", "conv_integer", no_scale, 5, &cyu8, cia, 12,
                        NRV_ERR_INVALID_ARG);
        const nrv_tview *zero[6] = {&xv, &cpv, NULL, NULL, &bv, &zsv};
        expect_int_fail("conv_integer zero requant scale", "conv_integer", zero, 6, &cyu8, cia, 12, NRV_ERR_INVALID_ARG);
        const nrv_tview *good[7] = {&xv, &cpv, NULL, NULL, &bv, &gsv, &zs8v};
        expect_int_fail("conv_integer requantized into int32", "conv_integer", good, 6, &cy, cia, 12, NRV_ERR_DTYPE);
        expect_int_fail("conv_integer s8 zero point for a u8 y", "conv_integer", good, 7, &cyu8, cia, 12,
                        NRV_ERR_DTYPE);
        expect_int_fail("conv_integer requantized without its scratch", "conv_integer", good, 6, &cyu8, cia, 12,
                        NRV_ERR_INVALID_ARG);
    }
    { /* depthwise_integer: a weight that is not an integer, a reach past the kernel's, a wrong
       * output extent, float codes, a weight of another shape */
        const int64_t dxd[4] = {1, C, 4, 5}, dyd[4] = {1, C, 4, 5}, dyd_bad[4] = {1, C, 3, 5}, wd[2] = {C, 9};
        const int64_t wd_bad[2] = {C, 8}, dia[10] = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
        const int64_t far[10] = {3, 3, 1, 1, 8, 1, 8, 1, 8, 1}; /* reach (3 - 1)·8 + 1 = 17 rows */
        float dw[18] = {0}, dw_half[18] = {0};
        dw_half[4] = 0.5f;
        float scale1 = 0.5f;
        uint8_t dx[40] = {0};
        nrv_tview dxv = mkview(dx, NRV_U8, 4, dxd), dwv = mkview(dw, NRV_F32, 2, wd);
        nrv_tview dhv = mkview(dw_half, NRV_F32, 2, wd);
        nrv_tview dwbad = mkview(dw, NRV_F32, 2, wd_bad), s1 = mkview(&scale1, NRV_F32, 1, &one_);
        nrv_tview dy = mkview(NULL, NRV_U8, 4, dyd), dy_bad = mkview(NULL, NRV_U8, 4, dyd_bad);
        nrv_tview fx = mkview(f, NRV_F32, 4, dxd);
        const nrv_tview *good[5] = {&dxv, &dwv, NULL, NULL, &s1}, *half[5] = {&dxv, &dhv, NULL, NULL, &s1};
        const nrv_tview *flt[5] = {&fx, &dwv, NULL, NULL, &s1}, *wbad[5] = {&dxv, &dwbad, NULL, NULL, &s1};
        expect_int_fail("depthwise_integer weight 0.5", "depthwise_integer", half, 5, &dy, dia, 10,
                        NRV_ERR_INVALID_ARG);
        expect_int_fail("depthwise_integer reach 17", "depthwise_integer", good, 5, &dy, far, 10, NRV_ERR_UNSUPPORTED);
        expect_int_fail("depthwise_integer wrong output extent", "depthwise_integer", good, 5, &dy_bad, dia, 10,
                        NRV_ERR_SHAPE);
        expect_int_fail("depthwise_integer float x", "depthwise_integer", flt, 5, &dy, dia, 10, NRV_ERR_DTYPE);
        expect_int_fail("depthwise_integer 8 taps for 3x3", "depthwise_integer", wbad, 5, &dy, dia, 10, NRV_ERR_SHAPE);
    }
    free(a);
    free(q);
    free(packed);
    free(cpacked);
}

/* ------------------------------------------------------------------ depthwise_integer */

/* One output byte of depthwise_integer as written here: the exact sum, then requantize's
 * arithmetic (test_requantize's reference). */
static uint8_t dw_ref(const uint8_t *x, int is_s8, int64_t H, int64_t W, const float *w, const int64_t *ia, int32_t xz,
                      int32_t bias, float scale, int32_t z, int64_t oy, int64_t ox) {
    int64_t acc = 0;
    for (int64_t ky = 0; ky < ia[0]; ky++)
        for (int64_t kx = 0; kx < ia[1]; kx++) {
            const int64_t iy = oy * ia[2] + ky * ia[4] - ia[6], ix = ox * ia[3] + kx * ia[5] - ia[7];
            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                acc += (xval(x, is_s8, iy * W + ix) - xz) * (int64_t)w[ky * ia[1] + kx];
        }
    float v = (float)(int32_t)((uint32_t)(int32_t)acc + (uint32_t)bias) * scale;
    const float lo = (float)((is_s8 ? -128 : 0) - z), hi = (float)((is_s8 ? 127 : 255) - z);
    v = v < lo ? lo : v > hi ? hi : v;
    return (uint8_t)((int32_t)nearbyintf(v) + z);
}

/* depthwise_integer on B images of C planes H x W (x and y of one type, u8 or s8) against
 * dw_ref, on 1 to 4 threads (each plane alone: the same bytes); ia: its 10 attributes. */
static void depthwise_case(int64_t B, int64_t C, int64_t H, int64_t W, const int64_t *ia, int is_s8,
                           nrv_threadpool *const *pools) {
    const int64_t OH = (H + ia[6] + ia[8] - (ia[0] - 1) * ia[4] - 1) / ia[2] + 1;
    const int64_t OW = (W + ia[7] + ia[9] - (ia[1] - 1) * ia[5] - 1) / ia[3] + 1;
    const int64_t taps = ia[0] * ia[1], xd[4] = {B, C, H, W}, wd[2] = {C, taps}, yd[4] = {B, C, OH, OW}, one = 1;
    const int64_t n = B * C * OH * OW;
    uint8_t *x = rnd_bytes(B * C * H * W), *y = xcalloc((size_t)(n + GUARD)), *first = xcalloc((size_t)n);
    float *w = xcalloc((size_t)(C * taps) * sizeof(float));
    int32_t *bias = xcalloc((size_t)C * sizeof(int32_t));
    float *scale = xcalloc((size_t)C * sizeof(float));
    for (int64_t i = 0; i < C * taps; i++) w[i] = (float)((int)(nrv_test_u64() % 511u) - 255);
    for (int64_t c = 0; c < C; c++) {
        bias[c] = (int32_t)(nrv_test_u64() % 20001u) - 10000;
        scale[c] = 40.0f / (sqrtf((float)taps) * 22500.0f) * (float)(1 + c % 3);
    }
    const uint8_t xz_byte = is_s8 ? (uint8_t)(int8_t)-7 : 131, z_byte = is_s8 ? (uint8_t)(int8_t)5 : 97;
    const int32_t xz = is_s8 ? -7 : 131, z = is_s8 ? 5 : 97;
    const nrv_dtype dt = is_s8 ? NRV_I8 : NRV_U8;
    nrv_tview xv = mkview(x, dt, 4, xd), wv = mkview(w, NRV_F32, 2, wd), xzv = mkview((void *)&xz_byte, dt, 1, &one);
    nrv_tview bv = mkview(bias, NRV_I32, 1, &C), sv = mkview(scale, NRV_F32, 1, &C);
    nrv_tview zv = mkview((void *)&z_byte, dt, 1, &one);
    nrv_tview yv = mkview(y, dt, 4, yd);
    const nrv_tview *in[6] = {&xv, &wv, &xzv, &bv, &sv, &zv};
    for (int t = 0; t < 4; t++) {
        memset(y, 0xa5, (size_t)(n + GUARD));
        NRV_EXPECT_STATUS(nrv_plan_run_op("depthwise_integer", in, 6, &yv, ia, 10, NULL, 0, NULL, 0, pools[t]), NRV_OK);
        int64_t bad = 0;
        for (int64_t i = n; i < n + GUARD; i++) bad += y[i] != 0xa5;
        for (int64_t b = 0; b < B && t == 0; b++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t oy = 0; oy < OH; oy++)
                    for (int64_t ox = 0; ox < OW; ox++)
                        bad += y[((b * C + c) * OH + oy) * OW + ox] != dw_ref(x + (b * C + c) * H * W, is_s8, H, W,
                                                                              w + c * taps, ia, xz, bias[c], scale[c],
                                                                              z, oy, ox);
        NRV_EXPECT(bad == 0, "depthwise_integer %lldx%lld k%lldx%lld s%lld s8=%d (%s, %d threads): %lld bytes wrong",
                   (long long)H, (long long)W, (long long)ia[0], (long long)ia[1], (long long)ia[2], is_s8, round_desc,
                   t + 1, (long long)bad);
        if (t == 0) memcpy(first, y, (size_t)n);
        else NRV_EXPECT(memcmp(first, y, (size_t)n) == 0, "depthwise_integer: %d threads differ", t + 1);
    }
    free(x);
    free(y);
    free(first);
    free(w);
    free(bias);
    free(scale);
}

/* requantize: a reference of its arithmetic on awkward values (ties, saturation both ways,
 * a wrapping bias), and its errors leave y untouched. */
static void test_requantize(void) {
    const int64_t xd[3] = {2, 3, 5}, c3 = 3, one = 1;
    int32_t x[30];
    for (int i = 0; i < 30; i++) x[i] = (int32_t)(nrv_test_u64() % 4001u) - 2000;
    x[0] = INT32_MAX, x[1] = INT32_MIN, x[2] = 25, x[3] = -25; /* 25·0.1 = 2.5: a tie (to 2) */
    int32_t bias[3] = {7, -900, INT32_MAX};
    float scale[3] = {0.1f, 0.013f, 1e-9f}, bad_scale[3] = {0.1f, 0.0f, 0.2f};
    int8_t zp = -3;
    uint8_t y[30 + GUARD];
    nrv_tview xv = mkview(x, NRV_I32, 3, xd), bv = mkview(bias, NRV_I32, 1, &c3), sv = mkview(scale, NRV_F32, 1, &c3);
    nrv_tview zv = mkview(&zp, NRV_I8, 1, &one), badv = mkview(bad_scale, NRV_F32, 1, &c3), b2 = mkview(bias, NRV_I32, 1, &one);
    nrv_tview yv = mkview(y, NRV_I8, 3, xd), yf = mkview(y, NRV_F32, 3, xd);
    const int64_t axis[1] = {1};
    const nrv_tview *in[4] = {&xv, &bv, &sv, &zv};
    memset(y, 0xa5, sizeof y);
    NRV_EXPECT_STATUS(nrv_plan_run_op("requantize", in, 4, &yv, axis, 1, NULL, 0, NULL, 0, NULL), NRV_OK);
    int bad = 0;
    for (int i = 0; i < 30; i++) {
        const int c = i / 5 % 3;
        float v = (float)(int32_t)((uint32_t)x[i] + (uint32_t)bias[c]) * scale[c];
        const float lo = -128.0f - zp, hi = 127.0f - zp;
        v = v < lo ? lo : v > hi ? hi : v;
        bad += (int8_t)y[i] != (int8_t)((int32_t)nearbyintf(v) + zp);
    }
    for (int i = 30; i < 30 + GUARD; i++) bad += y[i] != 0xa5;
    NRV_EXPECT(bad == 0, "requantize: %d bytes differ from the reference (or past y)", bad);
    struct {
        const char *what;
        const nrv_tview *in[4];
        nrv_tview *y;
        nrv_status want;
    } cases[] = {
        {"requantize zero scale", {&xv, &bv, &badv, &zv}, &yv, NRV_ERR_INVALID_ARG},
        {"requantize 1 bias for 3 channels", {&xv, &b2, &sv, &zv}, &yv, NRV_ERR_SHAPE},
        {"requantize float output", {&xv, &bv, &sv, &zv}, &yf, NRV_ERR_DTYPE},
        {"requantize float x", {&sv, &bv, &sv, &zv}, &yv, NRV_ERR_DTYPE},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(y, 0xa5, sizeof y);
        const nrv_status st = nrv_plan_run_op("requantize", cases[k].in, 4, cases[k].y, axis, 1, NULL, 0, NULL, 0, NULL);
        NRV_EXPECT(st == cases[k].want, "%s: got %s, want %s (%s)", cases[k].what, nrv_status_str(st),
                   nrv_status_str(cases[k].want), nrv_last_error());
        int touched = 0;
        for (size_t i = 0; i < sizeof y; i++) touched |= y[i] != 0xa5;
        NRV_EXPECT(!touched, "%s: output written on failure", cases[k].what);
        nrv_clear_error();
    }
}

/* requantize along the last axis (a QLinearMatMul's columns: one value per channel and row,
 * run 8 channels a vector): the same reference bytes per channel scale and bias, per-tensor
 * scale, u8 and i8, without a bias, rows of 21 channels (two vectors and a tail). */
static void test_requantize_last_axis(void) {
    enum { ROWS = 3, C = 21, N = ROWS * C };
    const int64_t xd[2] = {ROWS, C}, cd = C, one = 1;
    int32_t x[N], bias[C];
    float scale[C];
    for (int i = 0; i < N; i++) x[i] = (int32_t)(nrv_test_u64() % 60001u) - 30000;
    x[0] = INT32_MAX, x[1] = INT32_MIN, x[9] = 25, x[C + 9] = -25; /* a wrap each way, ties */
    for (int c = 0; c < C; c++) {
        bias[c] = (int32_t)(nrv_test_u64() % 2001u) - 1000;
        scale[c] = 0.001f + 0.01f * (float)(nrv_test_u64() % 100u) / 100.0f;
    }
    bias[0] = 1000, bias[1] = -1000, bias[9] = 0, scale[9] = 0.1f; /* 2.5 and -2.5 */
    for (int form = 0; form < 4; form++) { /* i8 with bias, u8 with bias, u8 without, per-tensor scale */
        const int s8 = form == 0, with_bias = form < 2, per_tensor = form == 3;
        int8_t zi = -3;
        uint8_t zu = 131, y[N + GUARD];
        nrv_tview xv = mkview(x, NRV_I32, 2, xd), bv = mkview(bias, NRV_I32, 1, &cd);
        nrv_tview sv = mkview(scale, NRV_F32, 1, per_tensor ? &one : &cd);
        nrv_tview zv = s8 ? mkview(&zi, NRV_I8, 1, &one) : mkview(&zu, NRV_U8, 1, &one);
        nrv_tview yv = mkview(y, s8 ? NRV_I8 : NRV_U8, 2, xd);
        const int64_t axis[1] = {-1};
        const nrv_tview *in[4] = {&xv, with_bias ? &bv : NULL, &sv, &zv};
        memset(y, 0xa5, sizeof y);
        NRV_EXPECT_STATUS(nrv_plan_run_op("requantize", in, 4, &yv, axis, 1, NULL, 0, NULL, 0, NULL), NRV_OK);
        const int32_t z = s8 ? zi : zu, lo_q = s8 ? -128 : 0, hi_q = s8 ? 127 : 255;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const int c = i % C;
            const float sc = scale[per_tensor ? 0 : c];
            float v = (float)(int32_t)((uint32_t)x[i] + (uint32_t)(with_bias ? bias[c] : 0)) * sc;
            const float lo = (float)(lo_q - z), hi = (float)(hi_q - z);
            v = v < lo ? lo : v > hi ? hi : v;
            const int32_t want = (int32_t)nearbyintf(v) + z;
            bad += s8 ? (int8_t)y[i] != (int8_t)want : y[i] != (uint8_t)want;
        }
        for (int i = N; i < N + GUARD; i++) bad += y[i] != 0xa5;
        NRV_EXPECT(bad == 0, "requantize last axis form %d: %d bytes differ from the reference (or past y)", form,
                   bad);
    }
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("matmul_integer") &&
                   !strcmp(nrv_plan_op_find("matmul_integer")->kernel_op, "matmul_integer"),
               "matmul_integer registered");
    NRV_EXPECT(nrv_plan_op_find("conv_integer") != NULL, "conv_integer registered");
    nrv_threadpool *pools[4] = {NULL, NULL, NULL, NULL};
    for (int t = 1; t < 4; t++) NRV_EXPECT_STATUS(nrv_threadpool_create(t + 1, &pools[t]), NRV_OK);
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0x1e7u + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        matmul_case(1, 1, 1, 0, 0, 0, pools);
        matmul_case(1, 257, 300, 1, 0, 1, pools);
        matmul_case(5, 97, 300, 0, 1, 1, pools);
        matmul_case(70, 131, 45, 1, 1, 0, pools);
        matmul_case(130, 3, 17, 0, 0, 1, pools);
        const int64_t c3[12] = {0, 0, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, c1[12] = {0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
        const int64_t odd[12] = {0, 0, 3, 2, 2, 1, 1, 2, 3, 0, 1, 4}, wide[12] = {0, 0, 1, 5, 1, 3, 1, 2, 0, 2, 0, 1};
        int64_t ia[12];
        memcpy(ia, c3, sizeof ia), ia[0] = 7, ia[1] = 5;
        conv_case(2, 5, 9, 11, 7, ia, 0, 1, pools);
        memcpy(ia, c1, sizeof ia), ia[0] = 24, ia[1] = 24;
        conv_case(1, 24, 6, 70, 24, ia, 1, 0, pools);
        /* pointwise: x's planes read in place where the variant has a planes kernel (several
         * 256-position blocks, C past 4·k, u8 with zq, s8 without), and a stride-2 1x1 that stages */
        memcpy(ia, c1, sizeof ia), ia[0] = 96, ia[1] = 16;
        conv_case(2, 16, 23, 29, 96, ia, 0, 1, pools);
        memcpy(ia, c1, sizeof ia), ia[0] = 17, ia[1] = 130;
        conv_case(1, 130, 5, 9, 17, ia, 1, 0, pools);
        memcpy(ia, c1, sizeof ia), ia[0] = 5, ia[1] = 7, ia[4] = 2, ia[5] = 2;
        conv_case(1, 7, 9, 10, 5, ia, 0, 1, pools);
        memcpy(ia, odd, sizeof ia), ia[0] = 13, ia[1] = 3;
        conv_case(2, 3, 6, 7, 13, ia, 1, 1, pools);
        memcpy(ia, wide, sizeof ia), ia[0] = 4, ia[1] = 6;
        conv_case(1, 6, 1, 150, 4, ia, 0, 1, pools);
        /* small windows (K <= 4·M), requantized: the planes route on the window's planes (a
         * stem's 3 channels x 3x3 at stride 2, and stride 3) */
        memcpy(ia, c3, sizeof ia), ia[0] = 16, ia[1] = 3, ia[4] = 2, ia[5] = 2;
        conv_case(2, 3, 23, 37, 16, ia, 1, 1, pools);
        memcpy(ia, c3, sizeof ia), ia[0] = 8, ia[1] = 2, ia[4] = 3, ia[5] = 3, ia[9] = 0;
        conv_case(1, 2, 17, 40, 8, ia, 0, 0, pools);
        /* depthwise_integer: [kh, kw, sh, sw, dh, dw, pt, pl, pb, pr] */
        const int64_t dw3[10] = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, dw3s2[10] = {3, 3, 2, 2, 1, 1, 1, 0, 1, 1};
        const int64_t dw5d[10] = {5, 3, 1, 2, 2, 1, 4, 1, 4, 2};
        depthwise_case(2, 5, 14, 14, dw3, 0, pools);
        depthwise_case(1, 3, 29, 57, dw3s2, 1, pools);
        depthwise_case(1, 4, 11, 300, dw5d, 0, pools);
        depthwise_case(1, 2, 120, 130, dw3, 1, pools); /* too big for a whole plane: the ring of rows */
        test_requantize();
        test_requantize_last_axis();
    }
    unforce();
    test_errors();
    for (int t = 1; t < 4; t++) nrv_threadpool_free(pools[t]);
    return nrv_test_summary("test_plan_integer");
}
