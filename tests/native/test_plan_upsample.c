/* test_plan_upsample.c — conv_transpose, resize and grid_sample (op_upsample.c).
 *
 * conv_transpose against a naive double-precision scatter (every x·w added where it lands),
 * at random awkward geometries, under every runnable "gemm" variant. resize against
 * properties that do not restate its formulas: nearest at integer scales repeats every
 * element, linear with aligned corners at 2n-1 keeps the inputs and averages neighbours,
 * cubic and linear reproduce a constant. grid_sample at the pixel centres reproduces x in
 * every mode, a constant stays constant, and NaN, infinite and huge grid values read
 * nothing outside x in any mode and padding. Scratch is allocated to exactly what the op asks
 * (an ASan build catches any access past it); failed calls must leave the output untouched.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_plan_run.h"
#include "nrv_plan_views.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

static int64_t rand_in(int64_t lo, int64_t hi) { return lo + rnd(hi - lo + 1); }

static nrv_status run(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out, const int64_t *ia,
                      int n_ia, const float *fa, int n_fa, size_t scratch_bytes) {
    void *scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
    const nrv_status st = nrv_plan_run_op(type, in, n_in, out, ia, n_ia, fa, n_fa, scratch, scratch_bytes, NULL);
    free(scratch);
    return st;
}

/* ------------------------------------------------------------------ conv_transpose */

typedef struct convt_case {
    int64_t n, c, m, group, sr;
    int64_t in[2], k[2], s[2], d[2], pb[2], pe[2]; /* pe may be negative (output_padding) */
} convt_case;

static int64_t convt_out(const convt_case *t, int i) {
    return t->s[i] * (t->in[i] - 1) + t->d[i] * (t->k[i] - 1) + 1 - t->pb[i] - t->pe[i];
}

static void convt_check(const convt_case *t, const char *variant) {
    const int64_t sr = t->sr, mg = t->m / t->group, cg = t->c / t->group;
    int64_t xd[4] = {t->n, t->c, 0, 0}, wd[4] = {t->c, mg, 0, 0}, yd[4] = {t->n, t->m, 0, 0}, bd[1] = {t->m};
    int64_t hw = 1, kk = 1, ohw = 1;
    for (int i = 0; i < sr; i++) {
        xd[2 + i] = t->in[i], wd[2 + i] = t->k[i], yd[2 + i] = convt_out(t, i);
        hw *= t->in[i], kk *= t->k[i], ohw *= yd[2 + i];
    }
    nrv_tview x = mk(NRV_F32, (int)(2 + sr), xd), w = mk(NRV_F32, (int)(2 + sr), wd), b = mk(NRV_F32, 1, bd);
    nrv_tview y = mk(NRV_F32, (int)(2 + sr), yd);
    nrv_test_fill(x.data, x.numel, -1, 1), nrv_test_fill(w.data, w.numel, -1, 1), nrv_test_fill(b.data, b.numel, -1, 1);
    int64_t ia[11] = {sr, t->group, NRV_PLAN_ACT_NONE};
    for (int i = 0; i < sr; i++) {
        ia[3 + i] = t->s[i], ia[3 + sr + i] = t->d[i], ia[3 + 2 * sr + i] = t->pb[i], ia[3 + 3 * sr + i] = t->pe[i];
    }
    const float fa[2] = {0, 0};
    const nrv_tview *ins[3] = {&x, &w, &b};
    NRV_EXPECT_STATUS(run("conv_transpose", ins, 3, &y, ia, (int)(3 + 4 * sr), fa, 2, (size_t)(4 * mg * kk * hw)),
                      NRV_OK);

    /* reference: y = bias, then x[n][c][iy][ix] * w[c][mo][ki][kj] added at its landing spot */
    double *ref = calloc((size_t)y.numel, sizeof(double));
    const float *xf = x.data, *wf = w.data, *bf = b.data;
    const int64_t ih = sr == 2 ? t->in[0] : 1, iw = t->in[sr - 1], kh = sr == 2 ? t->k[0] : 1, kw = t->k[sr - 1];
    const int64_t oh = sr == 2 ? yd[2] : 1, ow = yd[1 + sr];
    const int64_t sh = sr == 2 ? t->s[0] : 1, sw = t->s[sr - 1], dh = sr == 2 ? t->d[0] : 1, dw = t->d[sr - 1];
    const int64_t ph = sr == 2 ? t->pb[0] : 0, pw = t->pb[sr - 1];
    for (int64_t n = 0; n < t->n; n++)
        for (int64_t mo = 0; mo < t->m; mo++)
            for (int64_t q = 0; q < ohw; q++) ref[(n * t->m + mo) * ohw + q] = bf[mo];
    for (int64_t n = 0; n < t->n; n++)
        for (int64_t c = 0; c < t->c; c++) {
            const int64_t gi = c / cg;
            for (int64_t mo = 0; mo < mg; mo++)
                for (int64_t iy = 0; iy < ih; iy++)
                    for (int64_t ix = 0; ix < iw; ix++)
                        for (int64_t ki = 0; ki < kh; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                const int64_t oy = iy * sh + ki * dh - ph, ox = ix * sw + kj * dw - pw;
                                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                                ref[((n * t->m + gi * mg + mo) * oh + oy) * ow + ox] +=
                                    (double)xf[((n * t->c + c) * ih + iy) * iw + ix] *
                                    wf[((c * mg + mo) * kh + ki) * kw + kj];
                            }
        }
    const float *yf = y.data;
    double worst = 0;
    for (int64_t i = 0; i < y.numel; i++) {
        const double e = fabs(yf[i] - ref[i]) / (1e-5 + 1e-4 * fabs(ref[i]));
        if (!(e <= worst)) worst = e;
    }
    NRV_EXPECT(worst <= 1.0, "conv_transpose [%s] sr %lld c %lld m %lld g %lld: error %.2f x tolerance", variant,
               (long long)sr, (long long)t->c, (long long)t->m, (long long)t->group, worst);
    free(ref), freev(&x), freev(&w), freev(&b), freev(&y);
}

static void test_conv_transpose(void) {
    const convt_case fixed[] = {
        {2, 3, 4, 1, 2, {5, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},   /* output_padding 1 */
        {1, 6, 4, 2, 2, {4, 5}, {3, 2}, {1, 3}, {2, 1}, {0, 1}, {2, 0}},
        {1, 4, 5, 1, 1, {13}, {4}, {4}, {1}, {0}, {0}},
        {2, 5, 5, 5, 1, {9}, {5}, {2}, {1}, {2}, {1}},        /* depthwise, pe = 2 - 1 */
        {1, 2, 3, 1, 1, {4}, {1}, {3}, {1}, {0}, {-2}},        /* stride > kernel: gaps */
    };
    const int n_var = nrv_kernel_variant_count("gemm");
    int ran = 0;
    for (int v = 0; v < n_var; v++) {
        const char *name = nrv_kernel_variant_name("gemm", v);
        if (!nrv_kernel_variant_runnable("gemm", v)) continue;
        NRV_EXPECT_STATUS(nrv_kernel_force("gemm", name), NRV_OK);
        nrv_test_seed(4321); /* the same cases for every variant */
        ran++;
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) convt_check(&fixed[i], name);
        for (int r = 0; r < 25; r++) {
            convt_case t;
            memset(&t, 0, sizeof t);
            t.sr = rand_in(1, 2);
            t.group = rand_in(1, 3);
            t.c = t.group * rand_in(1, 4);
            t.m = t.group * rand_in(1, 4);
            t.n = rand_in(1, 2);
            for (int i = 0; i < t.sr; i++) {
                t.in[i] = rand_in(1, 9), t.k[i] = rand_in(1, 5), t.s[i] = rand_in(1, 4), t.d[i] = rand_in(1, 3);
                const int64_t full = t.s[i] * (t.in[i] - 1) + t.d[i] * (t.k[i] - 1) + 1;
                t.pb[i] = rand_in(0, (full - 1) / 2);
                t.pe[i] = rand_in(-(t.s[i] - 1), (full - 1) / 2); /* negative: output_padding */
            }
            convt_check(&t, name);
        }
    }
    NRV_EXPECT(ran > 0, "no runnable gemm variant");
    NRV_EXPECT_STATUS(nrv_kernel_force("gemm", NULL), NRV_OK);

    /* errors: a clear status, y untouched */
    int64_t xd[3] = {1, 2, 6}, wd[3] = {2, 3, 3}, yd[3] = {1, 3, 13};
    nrv_tview x = mk(NRV_F32, 3, xd), w = mk(NRV_F32, 3, wd), y = mk(NRV_F32, 3, yd);
    nrv_test_fill(x.data, x.numel, -1, 1), nrv_test_fill(w.data, w.numel, -1, 1);
    const nrv_tview *ins[2] = {&x, &w};
    const float fa[2] = {0, 0};
    const size_t sb = 4 * 3 * 3 * 6;
#define CONVT_ERR(want, sbytes, ...)                                                                  \
    do {                                                                                               \
        int64_t ia[7] = {1, 1, 0, 2, 1, 0, 0};                                                         \
        __VA_ARGS__;                                                                                   \
        memset(y.data, SENTINEL, nbytes(&y));                                                          \
        NRV_EXPECT_STATUS(run("conv_transpose", ins, 2, &y, ia, 7, fa, 2, sbytes), want);              \
        NRV_EXPECT(untouched(&y), "conv_transpose error case wrote y");                                \
    } while (0)
    {   /* the valid call the cases below break */
        const int64_t ia[7] = {1, 1, 0, 2, 1, 0, 0};
        NRV_EXPECT_STATUS(run("conv_transpose", ins, 2, &y, ia, 7, fa, 2, sb), NRV_OK);
        NRV_EXPECT(!untouched(&y), "valid conv_transpose wrote nothing");
    }
    CONVT_ERR(NRV_ERR_INVALID_ARG, sb - 1, (void)0);
    CONVT_ERR(NRV_ERR_SHAPE, sb, ia[6] = 1);        /* output one shorter than the attributes say */
    CONVT_ERR(NRV_ERR_INVALID_ARG, sb, ia[3] = 0);  /* stride 0 */
    CONVT_ERR(NRV_ERR_INVALID_ARG, sb, ia[1] = 3);  /* group does not divide C */
    CONVT_ERR(NRV_ERR_INVALID_ARG, sb, ia[2] = 99); /* activation code */
    CONVT_ERR(NRV_ERR_SHAPE, sb, ia[5] = 20);       /* pads larger than the output */
#undef CONVT_ERR
    freev(&x), freev(&w), freev(&y);
}

/* ------------------------------------------------------------------ resize */

/* The scratch resize asks for: tap table for the longest resized axis (extent or scale
 * changes) + an intermediate per resized axis but the last (op_upsample.c). */
static size_t resize_scratch_for(int r, const int64_t *xd, const int64_t *yd, const float *scales) {
    size_t table = 0, inter = 0;
    int64_t shape[8];
    int last = -1, resized[8];
    for (int i = 0; i < r; i++) {
        resized[i] = xd[i] != yd[i] || (scales[i] != 0.0f && scales[i] != 1.0f);
        if (resized[i]) last = i;
    }
    memcpy(shape, xd, sizeof(int64_t) * (size_t)r);
    for (int i = 0; i < r; i++) {
        if (!resized[i]) continue;
        if ((size_t)yd[i] * 48 > table) table = (size_t)yd[i] * 48;
        shape[i] = yd[i];
        if (i == last) break;
        size_t n = 4;
        for (int j = 0; j < r; j++) n *= (size_t)shape[j];
        inter += (n + 63) / 64 * 64;
    }
    return table + inter;
}

static nrv_status resize(const nrv_tview *x, nrv_tview *y, int64_t mode, int64_t coord, int64_t nearest,
                         int64_t exclude, const float *scales, size_t scratch) {
    int64_t ia[5] = {mode, coord, nearest, exclude, x->rank};
    float fa[9] = {-0.75f};
    for (int i = 0; i < x->rank; i++) fa[1 + i] = scales[i];
    const nrv_tview *ins[1] = {x};
    return run("resize", ins, 1, y, ia, 5, fa, 1 + x->rank, scratch);
}

/* The innermost resized axis' pass first (iattr[5] = 1) gives the axes-in-order result up to
 * float rounding (the separable passes commute), for growing and shrinking axes; with too
 * little scratch for that order, a clear failure. */
static void test_resize_pass_order(void) {
    for (int rep = 0; rep < 40; rep++) {
        const int64_t xd[3] = {rand_in(1, 3), rand_in(1, 12), rand_in(1, 12)};
        const float sc[3] = {1.0f, 0.4f + (float)rnd(30) / 10.0f, 0.4f + (float)rnd(30) / 10.0f};
        const int64_t yd[3] = {xd[0], (int64_t)((float)xd[1] * sc[1]), (int64_t)((float)xd[2] * sc[2])};
        if (yd[1] == 0 || yd[2] == 0) continue;
        nrv_tview x = mk(NRV_F32, 3, xd), y1 = mk(NRV_F32, 3, yd), y2 = mk(NRV_F32, 3, yd);
        nrv_test_fill(x.data, x.numel, -1, 1);
        const int64_t mode = 1 + (int64_t)rnd(2), coord = (int64_t)rnd(5);
        const size_t roomy = 48 * 64 + 4 * (size_t)(xd[0] * (xd[1] > yd[1] ? xd[1] : yd[1]) *
                                                    (xd[2] > yd[2] ? xd[2] : yd[2])) + 64;
        NRV_EXPECT_STATUS(resize(&x, &y1, mode, coord, 0, 0, sc, roomy), NRV_OK);
        int64_t ia[6] = {mode, coord, 0, 0, 3, 1};
        float fa[4] = {-0.75f, sc[0], sc[1], sc[2]};
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run("resize", ins, 1, &y2, ia, 6, fa, 4, roomy), NRV_OK);
        double worst = 0;
        for (int64_t i = 0; i < y1.numel; i++) {
            const double e = fabs((double)((float *)y1.data)[i] - ((float *)y2.data)[i]);
            if (e > worst) worst = e;
        }
        NRV_EXPECT(worst < 1e-5, "resize mode %lld coord %lld: the two pass orders differ by %g", (long long)mode,
                   (long long)coord, worst);
        NRV_EXPECT_STATUS(run("resize", ins, 1, &y2, ia, 6, fa, 4, 16), NRV_ERR_INVALID_ARG);
        freev(&x), freev(&y1), freev(&y2);
    }
}

static void test_resize(void) {
    for (int rep = 0; rep < 30; rep++) {
        /* nearest, asymmetric, integer scales on every axis of a rank-3 tensor: a repeat */
        int64_t xd[3], yd[3], f[3];
        float sc[3];
        for (int i = 0; i < 3; i++) {
            xd[i] = rand_in(1, 7), f[i] = rand_in(1, 3), yd[i] = xd[i] * f[i], sc[i] = (float)f[i];
        }
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 3, yd);
        nrv_test_fill(x.data, x.numel, -1, 1);
        NRV_EXPECT_STATUS(resize(&x, &y, 0, 3, 2, 0, sc, resize_scratch_for(3, xd, yd, sc)), NRV_OK);
        const float *xf = x.data, *yf = y.data;
        int bad = 0;
        for (int64_t a = 0; a < yd[0]; a++)
            for (int64_t b = 0; b < yd[1]; b++)
                for (int64_t c = 0; c < yd[2]; c++)
                    bad += yf[(a * yd[1] + b) * yd[2] + c] != xf[((a / f[0]) * xd[1] + b / f[1]) * xd[2] + c / f[2]];
        NRV_EXPECT(bad == 0, "nearest x%lldx%lldx%lld: %d elements not the repeated input", (long long)f[0],
                   (long long)f[1], (long long)f[2], bad);
        freev(&x), freev(&y);

        /* linear, align_corners, sizes 2n - 1 on the last two axes: inputs kept, midpoints averaged */
        int64_t xl[3] = {rand_in(1, 3), rand_in(2, 9), rand_in(2, 9)};
        int64_t yl[3] = {xl[0], 2 * xl[1] - 1, 2 * xl[2] - 1};
        const float sizes_given[3] = {0, 0, 0};
        x = mk(NRV_F32, 3, xl), y = mk(NRV_F32, 3, yl);
        nrv_test_fill(x.data, x.numel, -1, 1);
        NRV_EXPECT_STATUS(resize(&x, &y, 1, 2, 0, 0, sizes_given, resize_scratch_for(3, xl, yl, sizes_given)), NRV_OK);
        xf = x.data, yf = y.data;
        double worst = 0;
        for (int64_t a = 0; a < yl[0]; a++)
            for (int64_t i = 0; i < yl[1]; i++)
                for (int64_t j = 0; j < yl[2]; j++) {
                    const int64_t i0 = i / 2, i1 = (i + 1) / 2, j0 = j / 2, j1 = (j + 1) / 2;
                    const float *p = xf + a * xl[1] * xl[2];
                    const double want = 0.25 * ((double)p[i0 * xl[2] + j0] + p[i0 * xl[2] + j1] +
                                                p[i1 * xl[2] + j0] + p[i1 * xl[2] + j1]);
                    const double e = fabs(yf[(a * yl[1] + i) * yl[2] + j] - want);
                    if (e > worst) worst = e;
                }
        NRV_EXPECT(worst < 1e-6, "linear align_corners at 2n-1: off by %g", worst);
        freev(&x), freev(&y);

        /* cubic (both edge rules) and linear on a constant tensor, any scale: the constant */
        int64_t xc[2] = {rand_in(1, 11), rand_in(1, 11)};
        const float scc[2] = {0.3f + (float)rnd(40) / 10.0f, 0.3f + (float)rnd(40) / 10.0f};
        int64_t yc[2] = {(int64_t)((float)xc[0] * scc[0]), (int64_t)((float)xc[1] * scc[1])};
        if (yc[0] == 0 || yc[1] == 0) continue;
        x = mk(NRV_F32, 2, xc), y = mk(NRV_F32, 2, yc);
        for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = 0.75f;
        for (int mode = 1; mode <= 3; mode++) {
            const int64_t m = mode == 1 ? 1 : 2, excl = mode == 3;
            NRV_EXPECT_STATUS(resize(&x, &y, m, rnd(5), 0, excl, scc, resize_scratch_for(2, xc, yc, scc)), NRV_OK);
            worst = 0;
            for (int64_t i = 0; i < y.numel; i++) {
                const double e = fabs(((float *)y.data)[i] - 0.75);
                if (e > worst) worst = e;
            }
            NRV_EXPECT(worst < 1e-5, "mode %lld exclude %lld on a constant: off by %g", (long long)m,
                       (long long)excl, worst);
        }
        freev(&x), freev(&y);
    }

    /* errors: a clear status, y untouched */
    int64_t xd[2] = {4, 5}, yd[2] = {8, 10};
    nrv_tview x = mk(NRV_F32, 2, xd), y = mk(NRV_F32, 2, yd);
    nrv_test_fill(x.data, x.numel, -1, 1);
    const float two[2] = {2, 2}, bad_scale[2] = {-2, 2}, wrong[2] = {2, 3};
    const size_t sb = resize_scratch_for(2, xd, yd, two);
#define RESIZE_ERR(want, ...)                                                                         \
    do {                                                                                               \
        memset(y.data, SENTINEL, nbytes(&y));                                                          \
        NRV_EXPECT_STATUS(__VA_ARGS__, want);                                                          \
        NRV_EXPECT(untouched(&y), "resize error case wrote y");                                        \
    } while (0)
    RESIZE_ERR(NRV_ERR_INVALID_ARG, resize(&x, &y, 1, 0, 0, 0, two, sb - 1)); /* scratch one short */
    RESIZE_ERR(NRV_ERR_INVALID_ARG, resize(&x, &y, 1, 0, 0, 0, bad_scale, sb));
    RESIZE_ERR(NRV_ERR_SHAPE, resize(&x, &y, 1, 0, 0, 0, wrong, sb));         /* 5 x 3 is not 10 */
    RESIZE_ERR(NRV_ERR_INVALID_ARG, resize(&x, &y, 3, 0, 0, 0, two, sb));     /* mode */
    RESIZE_ERR(NRV_ERR_INVALID_ARG, resize(&x, &y, 1, 5, 0, 0, two, sb));     /* coordinate mode */
    RESIZE_ERR(NRV_ERR_INVALID_ARG, resize(&x, &y, 0, 0, 5, 0, two, sb));     /* nearest mode */
    NRV_EXPECT_STATUS(resize(&x, &y, 1, 0, 0, 0, two, sb), NRV_OK);
#undef RESIZE_ERR
    freev(&x), freev(&y);
}

/* ------------------------------------------------------------------ grid_sample */

static void test_grid_sample(void) {
    for (int rep = 0; rep < 36; rep++) {
        const int mode = rep % 3, padding = (rep / 3) % 3, align = (rep / 9) % 2;
        const int64_t n = rand_in(1, 2), c = rand_in(1, 3), h = rand_in(1, 6), w = rand_in(1, 7);
        const int64_t xd[4] = {n, c, h, w}, gd[4] = {n, h, w, 2}, yd[4] = {n, c, h, w};
        nrv_tview x = mk(NRV_F32, 4, xd), g = mk(NRV_F32, 4, gd), y = mk(NRV_F32, 4, yd);
        nrv_test_fill(x.data, x.numel, -2, 2);
        /* the grid of pixel centres: every mode gives x back */
        float *gv = g.data;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < h; i++)
                for (int64_t j = 0; j < w; j++) {
                    float *p = gv + ((b * h + i) * w + j) * 2;
                    p[0] = align ? (w > 1 ? 2.0f * (float)j / (float)(w - 1) - 1 : 0.0f) : (2.0f * (float)j + 1) / (float)w - 1;
                    p[1] = align ? (h > 1 ? 2.0f * (float)i / (float)(h - 1) - 1 : 0.0f) : (2.0f * (float)i + 1) / (float)h - 1;
                }
        const nrv_tview *ins[2] = {&x, &g};
        const int64_t ia[3] = {mode, padding, align};
        NRV_EXPECT_STATUS(run("grid_sample", ins, 2, &y, ia, 3, NULL, 0, 0), NRV_OK);
        double worst = 0;
        const float *yv = y.data, *xv = x.data;
        for (int64_t i = 0; i < x.numel; i++) {
            const double d = fabs((double)yv[i] - (double)xv[i]);
            if (!(d <= worst)) worst = d; /* NaN counts as worst; fmax() here crashed aarch64 GCC 12 */
        }
        NRV_EXPECT(worst < 1e-4, "grid_sample mode %d padding %d align %d: centres off by %g", mode, padding, align,
                   worst);
        /* hostile grid values: NaN, infinities, huge; nothing read outside x (ASan), finite out */
        const float bad[6] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e7f};
        for (int64_t i = 0; i < g.numel; i++) gv[i] = bad[rnd(6)];
        NRV_EXPECT_STATUS(run("grid_sample", ins, 2, &y, ia, 3, NULL, 0, 0), NRV_OK);
        int64_t nonfinite = 0;
        for (int64_t i = 0; i < y.numel; i++)
            if (!isfinite(((float *)y.data)[i])) nonfinite = i + 1; /* the last one, 1-based */
        NRV_EXPECT(nonfinite == 0, "grid_sample mode %d padding %d: output %lld is not finite", mode, padding,
                   (long long)nonfinite - 1);
        freev(&x), freev(&g), freev(&y);
    }
    /* a grid of the wrong batch: NRV_ERR_SHAPE, y untouched */
    const int64_t xd[4] = {2, 1, 3, 3}, gd[4] = {1, 2, 2, 2}, yd[4] = {2, 1, 2, 2};
    nrv_tview x = mk(NRV_F32, 4, xd), g = mk(NRV_F32, 4, gd), y = mk(NRV_F32, 4, yd);
    memset(y.data, SENTINEL, nbytes(&y));
    const nrv_tview *ins[2] = {&x, &g};
    const int64_t ia[3] = {0, 0, 0};
    NRV_EXPECT_STATUS(run("grid_sample", ins, 2, &y, ia, 3, NULL, 0, 0), NRV_ERR_SHAPE);
    NRV_EXPECT(untouched(&y), "a failed grid_sample wrote y");
    freev(&x), freev(&g), freev(&y);
}

/* col2im against a naive scatter at random geometries; a column count that does not match
 * the block grid fails and writes nothing. */
static void test_col2im(void) {
    for (int rep = 0; rep < 30; rep++) {
        const int64_t C = rand_in(1, 3), H = rand_in(1, 9), W = rand_in(1, 9), kh = rand_in(1, 3), kw = rand_in(1, 3);
        const int64_t sh = rand_in(1, 3), sw = rand_in(1, 3), dh = rand_in(1, 2), dw = rand_in(1, 2);
        const int64_t pbh = rand_in(0, 2), pbw = rand_in(0, 2), peh = rand_in(0, 2), pew = rand_in(0, 2);
        const int64_t sph = dh * (kh - 1) + 1, spw = dw * (kw - 1) + 1;
        if (H + pbh + peh < sph || W + pbw + pew < spw) continue;
        const int64_t gh = (H + pbh + peh - sph) / sh + 1, gw = (W + pbw + pew - spw) / sw + 1;
        const int64_t xd[3] = {2, C * kh * kw, gh * gw}, yd[4] = {2, C, H, W};
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 4, yd);
        nrv_test_fill(x.data, x.numel, -1, 1);
        const int64_t ia[10] = {kh, kw, sh, sw, dh, dw, pbh, pbw, peh, pew};
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run("col2im", ins, 1, &y, ia, 10, NULL, 0, 0), NRV_OK);
        double *want = calloc((size_t)y.numel, sizeof(double)), worst = 0;
        const float *xv = x.data;
        for (int64_t n = 0; n < 2; n++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++)
                        for (int64_t by = 0; by < gh; by++)
                            for (int64_t bx = 0; bx < gw; bx++) {
                                const int64_t r = by * sh + i * dh - pbh, q = bx * sw + j * dw - pbw;
                                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                                want[((n * C + c) * H + r) * W + q] +=
                                    xv[((n * C * kh * kw) + (c * kh + i) * kw + j) * gh * gw + by * gw + bx];
                            }
        for (int64_t i = 0; i < y.numel; i++) { /* if, not fmax: aarch64 gcc 12 cannot vectorise that reduction */
            const double e = fabs(want[i] - ((float *)y.data)[i]);
            if (e > worst) worst = e;
        }
        NRV_EXPECT(worst < 1e-5, "col2im: off by %g", worst);
        free(want);
        freev(&x), freev(&y);
        const int64_t bad[3] = {2, C * kh * kw, gh * gw + 1};
        x = mk(NRV_F32, 3, bad), y = mk(NRV_F32, 4, yd);
        const nrv_tview *bins[1] = {&x};
        NRV_EXPECT_STATUS(run("col2im", bins, 1, &y, ia, 10, NULL, 0, 0), NRV_ERR_SHAPE);
        NRV_EXPECT(untouched(&y), "a failed col2im wrote y");
        freev(&x), freev(&y);
    }
}

/* roi_align and deform_conv refuse what a plan or a run could get wrong before writing. */
static void test_sampling_ops_refuse(void) {
    const int64_t xd[4] = {2, 3, 5, 6}, rd[2] = {2, 4}, bd[1] = {2}, yd[4] = {2, 3, 2, 2};
    nrv_tview x = mk(NRV_F32, 4, xd), rois = mk(NRV_F32, 2, rd), bi = mk(NRV_I64, 1, bd), y = mk(NRV_F32, 4, yd);
    nrv_test_fill(x.data, x.numel, -1, 1), nrv_test_fill(rois.data, rois.numel, 0, 4);
    int64_t *b = bi.data;
    b[0] = 1, b[1] = 2; /* x has 2 images */
    const nrv_tview *ins[3] = {&x, &rois, &bi};
    const int64_t ia[3] = {0, 2, 1};
    const float fa[1] = {1.0f};
    NRV_EXPECT_STATUS(run("roi_align", ins, 3, &y, ia, 3, fa, 1, 0), NRV_ERR_INDEX);
    NRV_EXPECT(untouched(&y), "a failed roi_align wrote y");
    b[1] = 0;
    ((float *)rois.data)[0] = NAN; /* a NaN region samples nothing: no crash, no NaN index */
    NRV_EXPECT_STATUS(run("roi_align", ins, 3, &y, ia, 3, fa, 1, 0), NRV_OK);
    freev(&rois), freev(&bi), freev(&y);

    /* deform_conv: an offset tensor of the wrong shape, too little scratch */
    const int64_t wd[4] = {4, 3, 3, 3}, od[4] = {2, 18, 3, 4}, ydc[4] = {2, 4, 3, 4};
    nrv_tview w = mk(NRV_F32, 4, wd), off = mk(NRV_F32, 4, od), yc = mk(NRV_F32, 4, ydc);
    nrv_test_fill(w.data, w.numel, -1, 1), nrv_test_fill(off.data, off.numel, -3, 3);
    const nrv_tview *dins[3] = {&x, &w, &off};
    const int64_t dia[10] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
    const size_t need = 4 * 27 * 12;
    NRV_EXPECT_STATUS(run("deform_conv", dins, 3, &yc, dia, 10, NULL, 0, need), NRV_OK);
    memset(yc.data, SENTINEL, nbytes(&yc));
    NRV_EXPECT_STATUS(run("deform_conv", dins, 3, &yc, dia, 10, NULL, 0, need - 4), NRV_ERR_INVALID_ARG);
    const int64_t od_bad[4] = {2, 17, 3, 4};
    nrv_tview off_bad = mk(NRV_F32, 4, od_bad);
    const nrv_tview *bad_ins[3] = {&x, &w, &off_bad};
    NRV_EXPECT_STATUS(run("deform_conv", bad_ins, 3, &yc, dia, 10, NULL, 0, need), NRV_ERR_SHAPE);
    NRV_EXPECT(untouched(&yc), "a failed deform_conv wrote y");
    freev(&x), freev(&w), freev(&off), freev(&off_bad), freev(&yc);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("conv_transpose") && nrv_plan_op_find("resize"), "upsample ops not registered");
    test_col2im();
    test_sampling_ops_refuse();
    test_conv_transpose();
    test_resize();
    test_resize_pass_order();
    test_grid_sample();
    return nrv_test_summary("test_plan_upsample");
}
