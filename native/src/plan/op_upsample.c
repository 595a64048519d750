/* op_upsample.c — plan ops that make a tensor larger or resample it (see plan_ops.h for the
 * contract): conv_transpose (ONNX ConvTranspose), resize (ONNX Resize / Upsample),
 * grid_sample (ONNX GridSample).
 *
 * conv_transpose is the adjoint of conv: one GEMM per image and group (Wᵀ·x, every input
 * position times every kernel tap) into a column matrix, then a col2im that adds each
 * column into the output position it lands on. resize runs one 1-D pass per resized axis
 * (nearest, linear and cubic are all separable), each from a per-axis table of source
 * indices and weights computed once per run, exactly as onnxruntime computes coordinates
 * (in float32), so nearest picks the same pixel.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

#define ATTR_MAX ((int64_t)1 << 30)

/* ================================================================== conv_transpose */

typedef struct convt_geom {
    int64_t c, m, group, cg, mg;
    int64_t ih, iw, kh, kw, oh, ow;
    int64_t sh, sw, dh, dw, ph, pw;
    int64_t taps; /* mg * kh * kw: rows of the column matrix */
    int64_t hw;   /* ih * iw: its columns */
} convt_geom;

/* Column matrix of one image and group: col[mg*kh*kw, ih*iw] = W_gᵀ · x_g, W_g being
 * [cg, mg*kh*kw] row-major; rows are cut into pieces for the threads. */
typedef struct convt_gemm_job {
    const convt_geom *g;
    const float *wg, *xg;
    float *col;
    int64_t pieces;
} convt_gemm_job;

static void convt_gemm_task(void *ctx, int64_t t) {
    const convt_gemm_job *j = ctx;
    const convt_geom *g = j->g;
    const int64_t r0 = t * g->taps / j->pieces, rn = (t + 1) * g->taps / j->pieces - r0;
    nrv_kernel_get(NRV_OP_GEMM).gemm(1, 0, rn, g->hw, g->cg, 1.0f, j->wg + r0, g->taps, j->xg, g->hw, 0.0f,
                                     j->col + r0 * g->hw, g->hw);
}

/* col2im for output channels [m0, m1) of one image and group: y starts as the bias, then
 * every column value is added at (iy*sh + ki*dh - ph, ix*sw + kj*dw - pw) when inside. */
typedef struct convt_scatter_job {
    const convt_geom *g;
    const float *col, *bias;
    float *yg;
    int64_t pieces;
} convt_scatter_job;

/* Kernel == stride, no dilation, padding or output padding (the 2x2 stride-2 upsampling of
 * U-Nets and text detectors' DB heads): the taps tile y, each output receiving exactly one,
 * so y is written once with the bias instead of filled with it and then added to tap by tap
 * through strided loads and stores (24 -> 24 channels, 80 x 120 -> 160 x 240: 1231 us,
 * onnxruntime 823). The same sums, so the same bits. */
static int convt_taps_tile(const convt_geom *g) {
    return g->kh == g->sh && g->kw == g->sw && g->dh == 1 && g->dw == 1 && g->ph == 0 && g->pw == 0 &&
           g->oh == g->sh * g->ih && g->ow == g->sw * g->iw;
}

typedef float convt_v4f __attribute__((vector_size(16)));

static __attribute__((noinline)) void convt_tile_channel(const convt_geom *g, const float *colm, float bv, float *ym) {
    const convt_v4f b4 = {bv, bv, bv, bv};
    for (int64_t iy = 0; iy < g->ih; iy++)
        for (int64_t ki = 0; ki < g->kh; ki++) {
            float *yrow = ym + (iy * g->sh + ki) * g->ow;
            const float *src = colm + ki * g->kw * g->hw + iy * g->iw; /* tap (ki, 0)'s row iy */
            int64_t ix = 0;
            if (g->kw == 2) /* the two taps' rows interleaved, 4 pairs per step */
                for (; ix + 4 <= g->iw; ix += 4) {
                    convt_v4f a, b;
                    memcpy(&a, src + ix, sizeof a);
                    memcpy(&b, src + g->hw + ix, sizeof b);
                    const convt_v4f lo = __builtin_shufflevector(a, b, 0, 4, 1, 5) + b4;
                    const convt_v4f hi = __builtin_shufflevector(a, b, 2, 6, 3, 7) + b4;
                    memcpy(yrow + 2 * ix, &lo, sizeof lo);
                    memcpy(yrow + 2 * ix + 4, &hi, sizeof hi);
                }
            for (; ix < g->iw; ix++)
                for (int64_t kj = 0; kj < g->kw; kj++) yrow[ix * g->kw + kj] = bv + src[kj * g->hw + ix];
        }
}

static void convt_scatter_task(void *ctx, int64_t t) {
    const convt_scatter_job *j = ctx;
    const convt_geom *g = j->g;
    const int64_t m0 = t * g->mg / j->pieces, m1 = (t + 1) * g->mg / j->pieces;
    if (convt_taps_tile(g)) {
        for (int64_t m = m0; m < m1; m++)
            convt_tile_channel(g, j->col + m * g->kh * g->kw * g->hw, j->bias ? j->bias[m] : 0.0f,
                               j->yg + m * g->oh * g->ow);
        return;
    }
    for (int64_t m = m0; m < m1; m++) {
        float *ym = j->yg + m * g->oh * g->ow;
        const float bv = j->bias ? j->bias[m] : 0.0f;
        for (int64_t i = 0; i < g->oh * g->ow; i++) ym[i] = bv;
        for (int64_t ki = 0; ki < g->kh; ki++) {
            int64_t y_lo, y_hi;
            nrv_valid_range(ki * g->dh - g->ph, g->sh, g->oh, g->ih, &y_lo, &y_hi); /* iy landing inside y */
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const int64_t offx = kj * g->dw - g->pw;
                int64_t x_lo, x_hi;
                nrv_valid_range(offx, g->sw, g->ow, g->iw, &x_lo, &x_hi);
                const float *crow = j->col + ((m * g->kh + ki) * g->kw + kj) * g->hw;
                for (int64_t iy = y_lo; iy < y_hi; iy++) {
                    float *yrow = ym + (iy * g->sh + ki * g->dh - g->ph) * g->ow + offx;
                    const float *src = crow + iy * g->iw;
                    if (g->sw == 1) {
                        for (int64_t ix = x_lo; ix < x_hi; ix++) yrow[ix] += src[ix];
                    } else {
                        for (int64_t ix = x_lo; ix < x_hi; ix++) yrow[ix * g->sw] += src[ix];
                    }
                }
            }
        }
    }
}

/* conv_transpose: the transposed (fractionally strided) convolution over 1 or 2 spatial
 * axes, grouped and dilated, with bias and a fused activation.
 *   in[0]  x    f32 [N, C, *spatial]                 sr = 1 or 2 spatial axes
 *   in[1]  w    f32 [C, M/group, *kernel]            (ONNX ConvTranspose layout)
 *   in[2]  bias f32 [M], optional
 *   out[0] y    f32 [N, M, *out_spatial], out_spatial[i] =
 *               strides[i]*(in[i]-1) + dilations[i]*(kernel[i]-1) + 1 - pads_begin[i] - pads_end[i]
 *   iattr (3 + 4*sr): [sr, group, act, strides[sr], dilations[sr], pads_begin[sr], pads_end[sr]]
 *          pads_begin >= 0; pads_end may be negative: ONNX's output_padding enters as
 *          pads_end - output_padding (extra positions at the end that only the bias reaches).
 *   fattr (2): activation parameters, as for conv.
 *   scratch: 4 * (M/group) * prod(kernel) * prod(spatial) bytes (one column matrix).
 * Output position o along an axis receives x[i]·w[k] for every i*stride + k*dilation -
 * pads_begin == o. Not in place. */
static nrv_status conv_transpose_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 3, 1, -1, 2));
    int64_t sr;
    NRV_TRY(nrv_op_spatial_rank(a, 3, 4, &sr));
    const nrv_tview *x, *w, *b;
    nrv_tview *y;
    NRV_TRY(nrv_op_conv_operands(a, sr, (int)(2 + sr), &x, &w, &b, &y));
    const int64_t act = a->iattr[2];
    if (act < NRV_PLAN_ACT_NONE || act > NRV_PLAN_ACT_LAST)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "unknown fused activation code %lld", (long long)act);

    convt_geom g;
    const int64_t n_img = x->dims[0];
    g.c = x->dims[1];
    g.group = a->iattr[1];
    if (g.group < 1 || g.group > ATTR_MAX || g.c % g.group != 0)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "group %lld must be >= 1 and divide C = %lld", (long long)g.group,
                           (long long)g.c);
    if (w->dims[0] != g.c)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "weight is [%lld, ...], expected [C = %lld, M/group, ...]",
                           (long long)w->dims[0], (long long)g.c);
    g.cg = g.c / g.group;
    g.mg = w->dims[1];
    if (__builtin_mul_overflow(g.mg, g.group, &g.m))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "M/group %lld x group %lld overflows", (long long)g.mg,
                           (long long)g.group);
    if (y->dims[0] != n_img || y->dims[1] != g.m)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output is [%lld, %lld, ...], expected [N, M] = [%lld, %lld]",
                           (long long)y->dims[0], (long long)y->dims[1], (long long)n_img, (long long)g.m);
    if (b && (b->rank != 1 || b->dims[0] != g.m))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "bias must be [M] = [%lld] (rank %d, %lld elements)", (long long)g.m,
                           (int)b->rank, (long long)b->numel);

    int64_t in_[2] = {1, 1}, k_[2] = {1, 1}, o_[2] = {1, 1}, s_[2] = {1, 1}, d_[2] = {1, 1}, pb_[2] = {0, 0};
    for (int i = 0; i < (int)sr; i++) {
        const int ax = (int)(2 - sr) + i;
        const int64_t s = a->iattr[3 + i], d = a->iattr[3 + sr + i];
        const int64_t pb = a->iattr[3 + 2 * sr + i], pe = a->iattr[3 + 3 * sr + i];
        if (s < 1 || s > ATTR_MAX || d < 1 || d > ATTR_MAX || pb < 0 || pb > ATTR_MAX || pe < -ATTR_MAX ||
            pe > ATTR_MAX)
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG,
                               "axis %d: stride %lld, dilation %lld, pads %lld/%lld out of range", i, (long long)s,
                               (long long)d, (long long)pb, (long long)pe);
        const int64_t k = w->dims[2 + i], in = x->dims[2 + i];
        if (k < 1) return nrv_op_fail(a, NRV_ERR_SHAPE, "kernel dim %d is %lld, expected > 0", i, (long long)k);
        int64_t want, span;
        if (in < 1 || __builtin_mul_overflow(s, in - 1, &want) || __builtin_mul_overflow(d, k - 1, &span) ||
            __builtin_add_overflow(want, span, &want) || __builtin_sub_overflow(want, pb + pe - 1, &want) ||
            want < 0)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "spatial axis %d: input %lld gives no valid output extent", i,
                               (long long)in);
        if (y->dims[2 + i] != want)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "output spatial dim %d is %lld, expected %lld", i,
                               (long long)y->dims[2 + i], (long long)want);
        in_[ax] = in, k_[ax] = k, o_[ax] = want, s_[ax] = s, d_[ax] = d, pb_[ax] = pb;
    }
    g.ih = in_[0], g.iw = in_[1], g.kh = k_[0], g.kw = k_[1], g.oh = o_[0], g.ow = o_[1];
    g.sh = s_[0], g.sw = s_[1], g.dh = d_[0], g.dw = d_[1], g.ph = pb_[0], g.pw = pb_[1];
    if (y->numel == 0) return NRV_OK;
    /* y and w are non-empty here, so these products are bounded by numel of w and x */
    g.taps = g.mg * g.kh * g.kw;
    g.hw = g.ih * g.iw;
    uint64_t need;
    if (nrv_mul_overflow((uint64_t)g.taps, (uint64_t)g.hw, &need) || nrv_mul_overflow(need, sizeof(float), &need) ||
        need > (uint64_t)a->scratch_bytes || (need > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, needs 4 * %lld * %lld", a->scratch_bytes,
                           (long long)g.taps, (long long)g.hw);

    const float *xd = x->data, *wd = w->data, *bd = b ? b->data : NULL;
    float *col = a->scratch;
    const int threads = nrv_threadpool_size(a->pool);
    const int64_t gemm_pieces = threads > 1 && g.taps * g.hw * g.cg >= (1 << 16) ? (g.taps < threads ? g.taps : threads)
                                                                                  : 1;
    const int64_t scatter_pieces = threads > 1 && g.mg > 1 ? (g.mg < threads ? g.mg : threads) : 1;
    for (int64_t n = 0; n < n_img; n++) {
        float *yn = (float *)y->data + n * g.m * g.oh * g.ow;
        for (int64_t gi = 0; gi < g.group; gi++) {
            float *yg = yn + gi * g.mg * g.oh * g.ow;
            const float *bias = bd ? bd + gi * g.mg : NULL;
            if (g.cg == 0) {
                memset(col, 0, (size_t)need);
            } else {
                convt_gemm_job j = {&g, wd + gi * g.cg * g.taps, xd + (n * g.c + gi * g.cg) * g.hw, col, gemm_pieces};
                nrv_parallel_for(a->pool, j.pieces, convt_gemm_task, &j);
            }
            convt_scatter_job s = {&g, col, bias, yg, scatter_pieces};
            nrv_parallel_for(a->pool, s.pieces, convt_scatter_task, &s);
        }
        NRV_TRY(nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], yn, g.m * g.oh * g.ow));
    }
    return NRV_OK;
}

/* ================================================================== resize */

enum { RESIZE_NEAREST, RESIZE_LINEAR, RESIZE_CUBIC };
enum { COORD_HALF_PIXEL, COORD_PYTORCH_HALF_PIXEL, COORD_ALIGN_CORNERS, COORD_ASYMMETRIC, COORD_HALF_PIXEL_SYMMETRIC };
/* NEAREST_LEGACY: Upsample and Resize-10 in onnxruntime: truncate when enlarging, ceil when
 * shrinking. */
enum { NEAREST_ROUND_PREFER_FLOOR, NEAREST_ROUND_PREFER_CEIL, NEAREST_FLOOR, NEAREST_CEIL, NEAREST_LEGACY };

#define RESIZE_TAPS 4
/* One output index's sources along an axis: up to 4 (index, weight) pairs. */
typedef struct resize_tap {
    int64_t idx[RESIZE_TAPS];
    float w[RESIZE_TAPS];
} resize_tap;

typedef struct resize_cfg {
    int64_t mode, coord, nearest, exclude_outside;
    float cubic_a;
} resize_cfg;

/* Output index o's position in the input, as onnxruntime computes it (float32). */
static float resize_source_coord(const resize_cfg *c, float o, float scale, int64_t len_in, int64_t len_out) {
    switch (c->coord) {
    case COORD_PYTORCH_HALF_PIXEL: return len_out > 1 ? (o + 0.5f) / scale - 0.5f : 0.0f;
    case COORD_ALIGN_CORNERS: return len_out == 1 ? 0.0f : o * (float)(len_in - 1) / (float)(len_out - 1);
    case COORD_ASYMMETRIC: return o / scale;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        const float adjustment = (float)len_out / (scale * (float)len_in);
        const float center = (float)len_in / 2.0f;
        return center * (1.0f - adjustment) + (o + 0.5f) / scale - 0.5f;
    }
    default: return (o + 0.5f) / scale - 0.5f;
    }
}

static int64_t clamp_index(int64_t i, int64_t len) { return i < 0 ? 0 : i >= len ? len - 1 : i; }

static int64_t nearest_index(int64_t mode, float x, float scale) {
    switch (mode) {
    case NEAREST_LEGACY: return scale < 1.0f ? (int64_t)ceilf(x) : (int64_t)x;
    case NEAREST_ROUND_PREFER_CEIL: return (int64_t)roundf(x);
    case NEAREST_FLOOR: return (int64_t)floorf(x);
    case NEAREST_CEIL: return (int64_t)ceilf(x);
    default: return x == (float)(int64_t)x + 0.5f ? (int64_t)floorf(x) : (int64_t)roundf(x);
    }
}

/* The input index nearest output index o reads along an axis. */
static int64_t nearest_source(const resize_cfg *c, float scale, int64_t len_in, int64_t len_out, int64_t o) {
    return clamp_index(nearest_index(c->nearest, resize_source_coord(c, (float)o, scale, len_in, len_out), scale),
                       len_in);
}

/* The taps of every output index along one axis (len_in >= 1). */
static void resize_table(const resize_cfg *c, float scale, int64_t len_in, int64_t len_out, resize_tap *t) {
    for (int64_t o = 0; o < len_out; o++) {
        resize_tap *r = &t[o];
        memset(r, 0, sizeof *r);
        const float x = resize_source_coord(c, (float)o, scale, len_in, len_out);
        if (c->mode == RESIZE_NEAREST) {
            r->idx[0] = nearest_source(c, scale, len_in, len_out, o);
            r->w[0] = 1.0f;
        } else if (c->mode == RESIZE_LINEAR) {
            const float xc = x < 0.0f ? 0.0f : x > (float)(len_in - 1) ? (float)(len_in - 1) : x;
            const int64_t i0 = (int64_t)xc < len_in - 1 ? (int64_t)xc : len_in - 1;
            const int64_t i1 = i0 + 1 < len_in ? i0 + 1 : len_in - 1;
            r->idx[0] = i0, r->idx[1] = i1;
            if (i0 == i1) {
                r->w[0] = r->w[1] = 0.5f;
            } else {
                r->w[1] = xc - (float)i0;
                r->w[0] = 1.0f - r->w[1];
            }
        } else {
            const float a = c->cubic_a, fl = floorf(x), s = x - fl;
            const float d[RESIZE_TAPS] = {s + 1.0f, s, 1.0f - s, 2.0f - s}; /* distances to the 4 taps */
            float sum = 0.0f;
            for (int k = 0; k < RESIZE_TAPS; k++) {
                const float u = d[k];
                float wk = u <= 1.0f ? ((a + 2.0f) * u - (a + 3.0f)) * u * u + 1.0f
                                     : ((a * u - 5.0f * a) * u + 8.0f * a) * u - 4.0f * a;
                const int64_t i = (int64_t)fl - 1 + k;
                if (c->exclude_outside && (i < 0 || i >= len_in)) wk = 0.0f;
                r->idx[k] = clamp_index(i, len_in);
                r->w[k] = wk;
                sum += wk;
            }
            if (c->exclude_outside && sum != 0.0f)
                for (int k = 0; k < RESIZE_TAPS; k++) r->w[k] /= sum;
        }
    }
}

/* One 1-D pass: src [outer, len_in, inner] -> dst [outer, len_out, inner]. */
static void resize_pass(const resize_tap *t, int taps, const float *src, float *dst, int64_t outer, int64_t len_in,
                        int64_t len_out, int64_t inner) {
    for (int64_t b = 0; b < outer; b++) {
        const float *s = src + b * len_in * inner;
        float *d = dst + b * len_out * inner;
        if (inner == 1) {
            if (taps == 2) /* linear, the common case: no loop over the taps */
                for (int64_t o = 0; o < len_out; o++) d[o] = t[o].w[0] * s[t[o].idx[0]] + t[o].w[1] * s[t[o].idx[1]];
            else
                for (int64_t o = 0; o < len_out; o++) {
                    float acc = 0.0f;
                    for (int k = 0; k < taps; k++) acc += t[o].w[k] * s[t[o].idx[k]];
                    d[o] = acc;
                }
            continue;
        }
        for (int64_t o = 0; o < len_out; o++) {
            float *restrict dr = d + o * inner;
            const float *s0 = s + t[o].idx[0] * inner, *s1 = s + t[o].idx[1] * inner;
            const float w0 = t[o].w[0], w1 = t[o].w[1];
            if (taps == 1) {
                memcpy(dr, s0, (size_t)inner * sizeof(float));
            } else if (taps == 2) { /* one pass over the output row, in the inner == 1 order */
                for (int64_t i = 0; i < inner; i++) dr[i] = w0 * s0[i] + w1 * s1[i];
            } else {
                const float *s2 = s + t[o].idx[2] * inner, *s3 = s + t[o].idx[3] * inner;
                const float w2 = t[o].w[2], w3 = t[o].w[3];
                for (int64_t i = 0; i < inner; i++) dr[i] = w0 * s0[i] + w1 * s1[i] + w2 * s2[i] + w3 * s3[i];
            }
        }
    }
}

/* One pass shared out across threads in ranges of its outer rows (independent blocks). */
typedef struct resize_job {
    const resize_tap *t;
    int taps;
    const float *src;
    float *dst;
    int64_t outer, len_in, len_out, inner, pieces;
} resize_job;

static void resize_task(void *ctx, int64_t i) {
    const resize_job *j = ctx;
    const int64_t b0 = i * j->outer / j->pieces, b1 = (i + 1) * j->outer / j->pieces;
    resize_pass(j->t, j->taps, j->src + b0 * j->len_in * j->inner, j->dst + b0 * j->len_out * j->inner, b1 - b0,
                j->len_in, j->len_out, j->inner);
}

/* Nearest over the last one or two axes (a detector's FPN upsampling), in one pass with no
 * intermediate: each output row is its source row gathered through the column table, or a
 * copy of the output row above when both read the same source row (every other row of a 2x
 * upsample); a whole-factor column table is a repeat, 2x by vector shuffles. (The per-axis
 * passes wrote and re-read an intermediate and went through the taps' weights: PP-OCRv6's
 * detector spent 2.0 ms in six 2x upsamples, onnxruntime 0.6.) */
typedef float resize_v4f __attribute__((vector_size(16)));
typedef struct nearest_job {
    const int64_t *rows;  /* source row of each output row; NULL: the rows are not resized */
    const int64_t *cols;  /* source column of each output column */
    const float *x;
    float *y;
    int64_t ih, iw, oh, ow; /* per plane */
    int64_t repeat;       /* k when cols[o] == o / k for every o, else 0 */
    int64_t planes, pieces;
} nearest_job;

static void nearest_row(const nearest_job *j, const float *restrict s, float *restrict d) {
    int64_t o = 0;
    if (j->repeat == 1) {
        memcpy(d, s, (size_t)j->ow * sizeof(float));
        return;
    }
    if (j->repeat == 2) /* reads s up to (o + 7) / 2 <= (ow - 1) / 2, a column the table reads */
        for (; o + 8 <= j->ow; o += 8) {
            resize_v4f v;
            memcpy(&v, s + o / 2, sizeof v);
            const resize_v4f lo = __builtin_shufflevector(v, v, 0, 0, 1, 1), hi = __builtin_shufflevector(v, v, 2, 2, 3, 3);
            memcpy(d + o, &lo, sizeof lo);
            memcpy(d + o + 4, &hi, sizeof hi);
        }
    for (; o < j->ow; o++) d[o] = s[j->cols[o]];
}

static void nearest_task(void *ctx, int64_t t) {
    const nearest_job *j = ctx;
    for (int64_t p = t * j->planes / j->pieces; p < (t + 1) * j->planes / j->pieces; p++) {
        const float *xp = j->x + p * j->ih * j->iw;
        float *yp = j->y + p * j->oh * j->ow;
        for (int64_t r = 0; r < j->oh; r++) {
            float *d = yp + r * j->ow;
            const int64_t src = j->rows ? j->rows[r] : r;
            if (r > 0 && j->rows && j->rows[r - 1] == src) memcpy(d, d - j->ow, (size_t)j->ow * sizeof(float));
            else nearest_row(j, xp + src * j->iw, d);
        }
    }
}

/* Runs the one-pass nearest resize when the resized axes are among the last two and the
 * scratch's tap table has room for the index tables (it always has: 48 bytes per entry of
 * the longest resized axis); 0 when it does not apply. */
static int resize_nearest_trailing(const resize_cfg *c, const nrv_tview *x, const nrv_tview *y, const float *scales,
                                   int n_resized, const int *order, void *scratch, uint64_t table_bytes,
                                   nrv_threadpool *pool) {
    const int r = x->rank;
    for (int k = 0; k < n_resized; k++)
        if (order[k] < r - 2) return 0;
    const int64_t ih = r >= 2 ? x->dims[r - 2] : 1, oh = r >= 2 ? y->dims[r - 2] : 1;
    const int64_t iw = x->dims[r - 1], ow = y->dims[r - 1];
    if ((uint64_t)(ow + oh) * sizeof(int64_t) > table_bytes) return 0;
    int64_t *cols = scratch, *rows = NULL;
    const float sw = scales[r - 1] > 0.0f ? scales[r - 1] : (float)ow / (float)iw;
    int64_t repeat = ow % iw == 0 ? ow / iw : 0;
    for (int64_t o = 0; o < ow; o++) {
        cols[o] = nearest_source(c, sw, iw, ow, o);
        if (repeat && cols[o] != o / repeat) repeat = 0;
    }
    if (r >= 2 && (oh != ih || (scales[r - 2] != 0.0f && scales[r - 2] != 1.0f))) {
        rows = cols + ow;
        const float sh = scales[r - 2] > 0.0f ? scales[r - 2] : (float)oh / (float)ih;
        for (int64_t o = 0; o < oh; o++) rows[o] = nearest_source(c, sh, ih, oh, o);
    }
    nearest_job j = {rows, cols, x->data, y->data, ih, iw, oh, ow, repeat, r > 2 ? nrv_dims_product(x->dims, 0, r - 2) : 1, 1};
    j.pieces = nrv_plan_pieces(pool, j.planes * oh * ow, 1 << 16, j.planes);
    nrv_parallel_for(pool, j.pieces, nearest_task, &j);
    return 1;
}

/* Which axes a resize passes over and where its scratch goes. */
typedef struct resize_layout {
    int order[NRV_PLAN_MAX_RANK]; /* the axes that change (output extent or scale not 1), in
                                   * the order their passes run; the last pass writes y */
    int n;                        /* how many */
    uint64_t table_bytes;         /* the tap table, for the longest resized output axis */
    uint64_t bytes;               /* all of the scratch: table, then the intermediates */
} resize_layout;

/* Bytes of scratch a resize needs: a tap table for the longest resized output axis, then
 * one intermediate tensor per pass but the last, in *L with the passes' order: the axes in
 * order, or with last_first the innermost resized axis first (its pass reads one element at
 * a time, the others whole rows: on the smaller tensor when the other axes grow). -1 on
 * overflow. */
static int resize_scratch(const nrv_tview *x, const nrv_tview *y, const float *scales, int last_first,
                          resize_layout *L) {
    uint64_t table = 0, inter = 0, cur = 1;
    L->n = 0;
    for (int i = 0; i < x->rank; i++)
        if (y->dims[i] != x->dims[i] || (scales[i] != 0.0f && scales[i] != 1.0f)) L->order[L->n++] = i;
    if (last_first && L->n > 1) {
        const int inner = L->order[L->n - 1];
        memmove(L->order + 1, L->order, sizeof(int) * (size_t)(L->n - 1));
        L->order[0] = inner;
    }
    int64_t shape[NRV_PLAN_MAX_RANK];
    memcpy(shape, x->dims, sizeof(int64_t) * (size_t)x->rank);
    for (int k = 0; k < L->n; k++) {
        const int i = L->order[k];
        if ((uint64_t)y->dims[i] > table) table = (uint64_t)y->dims[i];
        shape[i] = y->dims[i];
        if (k == L->n - 1) break;
        cur = 1;
        for (int j = 0; j < x->rank; j++)
            if (nrv_mul_overflow(cur, (uint64_t)shape[j], &cur)) return -1;
        if (nrv_mul_overflow(cur, sizeof(float), &cur) ||
            __builtin_add_overflow(inter, (cur + 63) & ~(uint64_t)63, &inter))
            return -1;
    }
    if (nrv_mul_overflow(table, sizeof(resize_tap), &L->table_bytes) ||
        __builtin_add_overflow(L->table_bytes, inter, &L->bytes))
        return -1;
    return 0;
}

/* resize: nearest / linear / cubic resampling of any axes of a float32 tensor.
 *   in[0]  x f32 [*] (rank r >= 1)
 *   out[0] y f32, rank r; along an axis with scales[i] > 0, y[i] = (int64)(x[i] * scales[i])
 *          computed in float32 (onnxruntime's rule), or that product rounded (sizes under a
 *          keep_aspect_ratio_policy: one scale for the axes); scales[i] == 0: y[i] is the
 *          given size and the scale is y[i] / x[i]
 *   iattr (5 or 6): [mode, coordinate_transformation_mode, nearest_mode, exclude_outside, r
 *          (, last_first: 1 = the innermost resized axis' pass first; see resize_scratch)]
 *          mode: 0 nearest, 1 linear, 2 cubic; coordinate mode: 0 half_pixel,
 *          1 pytorch_half_pixel, 2 align_corners, 3 asymmetric, 4 half_pixel_symmetric;
 *          nearest_mode: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 legacy
 *   fattr (1 + r): [cubic_coeff_a, scales[r]]
 *   scratch: resize_scratch above: sizeof(resize_tap) (48) x the longest resized output
 *          extent, plus 64-byte-rounded float32 intermediates for every pass but the last.
 * Linear clamps the source coordinate to [0, len-1]; nearest and cubic clamp indices to the
 * edge (cubic with exclude_outside drops taps outside and renormalises). Not in place. */
static nrv_status resize_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    if (a->n_iattr != 5 && a->n_iattr != 6)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes, expected 5 or 6", a->n_iattr);
    const int last_first = a->n_iattr == 6 && a->iattr[5] != 0;
    NRV_TRY(nrv_op_check_in(a, 0, "input x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "output"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "input x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    const resize_cfg c = {a->iattr[0], a->iattr[1], a->iattr[2], a->iattr[3], a->n_fattr > 0 ? a->fattr[0] : 0.0f};
    const int64_t r = a->iattr[4];
    if (c.mode < RESIZE_NEAREST || c.mode > RESIZE_CUBIC || c.coord < COORD_HALF_PIXEL ||
        c.coord > COORD_HALF_PIXEL_SYMMETRIC || c.nearest < NEAREST_ROUND_PREFER_FLOOR || c.nearest > NEAREST_LEGACY ||
        (c.exclude_outside != 0 && c.exclude_outside != 1))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "attributes mode %lld, coordinate mode %lld, nearest mode %lld, "
                           "exclude_outside %lld out of range", (long long)c.mode, (long long)c.coord,
                           (long long)c.nearest, (long long)c.exclude_outside);
    if (r != x->rank || y->rank != x->rank || a->n_fattr != 1 + r)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "ranks x %d, y %d, attribute %lld, %d float attributes; expected equal "
                           "ranks and 1 + rank floats", (int)x->rank, (int)y->rank, (long long)r, a->n_fattr);
    const float *scales = a->fattr + 1;
    for (int i = 0; i < x->rank; i++) {
        const float s = scales[i];
        if (!(s >= 0.0f) || isinf(s))
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scale %d is %g, expected > 0 (or 0: size given)", i, (double)s);
        if (s > 0.0f) {
            /* truncated (scales), or rounded (sizes under keep_aspect_ratio_policy, which share
             * one scale across the axes) */
            const float want = (float)x->dims[i] * s;
            if (!(want < 9.0e18f) || (y->dims[i] != (int64_t)want && y->dims[i] != (int64_t)(want + 0.5f)))
                return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %d: output extent %lld, expected %lld x %g", i,
                                   (long long)y->dims[i], (long long)x->dims[i], (double)s);
        }
        if (x->dims[i] == 0 && y->dims[i] != 0)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %d: cannot resize an empty axis to %lld", i,
                               (long long)y->dims[i]);
    }
    if (y->numel == 0) return NRV_OK;
    resize_layout L;
    if (resize_scratch(x, y, scales, last_first, &L) != 0 || L.bytes > (uint64_t)a->scratch_bytes ||
        (L.bytes > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, less than this resize needs",
                           a->scratch_bytes);
    if (L.n == 0) {
        memcpy(y->data, x->data, (size_t)x->numel * sizeof(float));
        return NRV_OK;
    }
    if (c.mode == RESIZE_NEAREST &&
        resize_nearest_trailing(&c, x, y, scales, L.n, L.order, a->scratch, L.table_bytes, a->pool))
        return NRV_OK;
    resize_tap *table = a->scratch;
    unsigned char *inter = (unsigned char *)a->scratch + L.table_bytes;
    const int taps = c.mode == RESIZE_NEAREST ? 1 : c.mode == RESIZE_LINEAR ? 2 : RESIZE_TAPS;
    int64_t shape[NRV_PLAN_MAX_RANK];
    memcpy(shape, x->dims, sizeof(int64_t) * (size_t)x->rank);
    const float *src = x->data;
    for (int k = 0; k < L.n; k++) {
        const int i = L.order[k], last = k == L.n - 1;
        const int64_t len_in = shape[i], len_out = y->dims[i];
        const float scale = scales[i] > 0.0f ? scales[i] : (float)len_out / (float)len_in;
        resize_table(&c, scale, len_in, len_out, table);
        const int64_t outer = nrv_dims_product(shape, 0, i), inner = nrv_dims_product(shape, i + 1, x->rank);
        shape[i] = len_out;
        float *dst = last ? (float *)y->data : (float *)inter;
        resize_job j = {table, taps, src, dst, outer, len_in, len_out, inner,
                        nrv_plan_pieces(a->pool, outer * len_out * inner * taps, 1 << 16, outer)};
        nrv_parallel_for(a->pool, j.pieces, resize_task, &j);
        if (!last) {
            const uint64_t n = (uint64_t)nrv_dims_product(shape, 0, x->rank) * sizeof(float);
            inter += (n + 63) & ~(uint64_t)63;
        }
        src = dst;
    }
    return NRV_OK;
}

/* ================================================================== grid_sample */

enum { GS_LINEAR = 0, GS_NEAREST = 1, GS_CUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

/* A coordinate reflected by the near border until it lies in [lo, hi] (as onnxruntime and
 * PyTorch do); a non-finite one goes to lo. */
static double gs_reflect(double v, double lo, double hi) {
    if (!isfinite(v)) return lo;
    const double range = hi - lo;
    if (range <= 0) return lo;
    if (v < lo) {
        const double dx = lo - v, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2.0) == 0 ? lo + r : hi - r;
    }
    if (v > hi) {
        const double dx = v - hi, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2.0) == 0 ? hi - r : lo + r;
    }
    return v;
}

/* The pixel index of tap i on an axis of extent d, or -1 when it reads zero padding. */
static int64_t gs_tap(int64_t i, int64_t d, int padding, double lo, double hi) {
    if (i >= 0 && i < d) return i;
    if (padding == GS_ZEROS) return -1;
    if (padding == GS_BORDER) return i < 0 ? 0 : d - 1;
    int64_t r = (int64_t)gs_reflect((double)i, lo, hi);
    return r < 0 ? 0 : r >= d ? d - 1 : r;
}

/* Keys' cubic convolution weights (A = -0.75) for the 4 taps around fraction t. */
static void gs_cubic_weights(double t, double w[4]) {
    const double A = -0.75;
    const double x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;
    w[0] = ((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A;
    w[1] = ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1;
    w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
    w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

/* The taps (index or -1, weight) of one axis for denormalised coordinate v: 1 (nearest),
 * 2 (linear) or 4 (cubic). The coordinate is first brought inside the borders (border,
 * reflection; cubic with border clamps only its taps, as onnxruntime and PyTorch do), then
 * limited to [-4, d + 3]: beyond, every tap reads the padding or the border either way, and
 * the integer conversions stay defined for any input (NaN and infinities included). */
static int gs_axis_taps(double v, int64_t d, int mode, int padding, int align, int64_t *idx, double *w) {
    const double lo = align ? 0.0 : -0.5, hi = align ? (double)d - 1 : (double)d - 0.5;
    if (mode == GS_NEAREST) v = nearbyint(v); /* half to even, as onnxruntime */
    if (isnan(v)) v = padding == GS_ZEROS ? -4.0 : 0.0;
    if (!(v >= lo && v <= hi)) {
        if (padding == GS_BORDER && mode != GS_CUBIC) v = v < 0 ? 0.0 : (double)d - 1;
        else if (padding == GS_REFLECTION) v = gs_reflect(v, lo, hi);
    }
    if (v < -4.0) v = -4.0;
    if (v > (double)d + 3) v = (double)d + 3;
    if (mode == GS_NEAREST) {
        idx[0] = gs_tap((int64_t)v, d, padding, lo, hi);
        w[0] = 1.0;
        return 1;
    }
    const double f = floor(v), t = v - f;
    const int64_t i0 = (int64_t)f;
    if (mode == GS_LINEAR) {
        idx[0] = gs_tap(i0, d, padding, lo, hi);
        idx[1] = gs_tap(i0 + 1, d, padding, lo, hi);
        w[0] = 1.0 - t;
        w[1] = t;
        return 2;
    }
    gs_cubic_weights(t, w);
    for (int k = 0; k < 4; k++) idx[k] = gs_tap(i0 - 1 + k, d, padding, lo, hi);
    return 4;
}

/* grid_sample (ONNX GridSample, 2 spatial axes): y[n, c, i, j] samples x[n, c] at the point
 * grid[n, i, j] = (x, y) in [-1, 1] (align_corners: the corner pixels' centres; else their
 * outer edges), interpolating with mode and reading outside through padding.
 *   in[0] x (f32 [N, C, H, W]); in[1] grid (f32 [N, Ho, Wo, 2]); out[0] y (f32 [N, C, Ho, Wo]).
 *   iattr [mode (0 linear, 1 nearest, 2 cubic), padding (0 zeros, 1 border, 2 reflection),
 *   align_corners]. Taps and weights are computed once per output point, for every channel. */
static nrv_status grid_sample_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 3, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "input x"));
    NRV_TRY(nrv_op_check_in(a, 1, "grid"));
    const nrv_tview *x = a->in[0], *grid = a->in[1];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "output"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "input x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, grid, "grid", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    const int64_t mode = a->iattr[0], padding = a->iattr[1], align = a->iattr[2];
    if (mode < GS_LINEAR || mode > GS_CUBIC || padding < GS_ZEROS || padding > GS_REFLECTION || (align & ~1))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "mode %lld, padding %lld, align_corners %lld out of range",
                           (long long)mode, (long long)padding, (long long)align);
    if (x->rank != 4 || grid->rank != 4 || y->rank != 4 || grid->dims[3] != 2 || grid->dims[0] != x->dims[0] ||
        y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1] || y->dims[2] != grid->dims[1] ||
        y->dims[3] != grid->dims[2]) {
        char b1[128], b2[128], b3[128];
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x %s, grid %s, y %s: expected [N, C, H, W], [N, Ho, Wo, 2], "
                           "[N, C, Ho, Wo]", nrv_op_fmt_dims(b1, sizeof b1, x), nrv_op_fmt_dims(b2, sizeof b2, grid),
                           nrv_op_fmt_dims(b3, sizeof b3, y));
    }
    const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t P = grid->dims[1] * grid->dims[2], plane = H * W;
    const float *xs = x->data, *gs = grid->data;
    float *ys = y->data;
    if (plane == 0) { /* nothing to read: every sample is padding (zeros) */
        memset(ys, 0, (size_t)y->numel * sizeof(float));
        return NRV_OK;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < P; p++) {
            const float *g = gs + (n * P + p) * 2;
            const double gx = g[0], gy = g[1];
            const double vx = align ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
            const double vy = align ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
            int64_t ix[4], iy[4];
            double wx[4], wy[4];
            const int kx = gs_axis_taps(vx, W, (int)mode, (int)padding, (int)align, ix, wx);
            const int ky = gs_axis_taps(vy, H, (int)mode, (int)padding, (int)align, iy, wy);
            int64_t off[16];
            float wt[16];
            int taps = 0;
            for (int u = 0; u < ky; u++)
                for (int v = 0; v < kx; v++)
                    if (iy[u] >= 0 && ix[v] >= 0) {
                        off[taps] = iy[u] * W + ix[v];
                        wt[taps++] = (float)(wy[u] * wx[v]);
                    }
            const float *xn = xs + n * C * plane;
            float *yn = ys + n * C * P + p;
            for (int64_t c = 0; c < C; c++) {
                const float *xc = xn + c * plane;
                float acc = 0.0f;
                for (int k = 0; k < taps; k++) acc += wt[k] * xc[off[k]];
                yn[c * P] = acc;
            }
        }
    return NRV_OK;
}

/* col2im (ONNX Col2Im; torch's nn.Fold, the overlap-add of an iSTFT): blocks back into an
 * image, overlapping values summed — conv_transpose's scatter with the columns given.
 *   in[0]  x f32 [N, C*kh*kw, L], column (c, i, j) of block l read at (c*kh + i)*kw + j;
 *          L = gh*gw blocks, row-major over the block grid
 *   out[0] y f32 [N, C, H, W]
 *   iattr (10): [kh, kw, sh, sw, dh, dw, pads_begin_h, pads_begin_w, pads_end_h, pads_end_w];
 *          gh = (H + pbh + peh - dh*(kh-1) - 1) / sh + 1 (>= 1), gw likewise
 * Block l = (by, bx), tap (i, j) lands at (by*sh + i*dh - pbh, bx*sw + j*dw - pbw) when inside
 * y; the rest falls in the padding. Not in place. */
static nrv_status col2im_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 10, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    const int64_t *ia = a->iattr;
    for (int i = 0; i < 10; i++)
        if (ia[i] < (i < 6 ? 1 : 0) || ia[i] > ATTR_MAX)
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "attribute %d is %lld, out of range", i, (long long)ia[i]);
    if (x->rank != 3 || y->rank != 4 || y->dims[0] != x->dims[0])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x must be [N, C*kh*kw, L] and y [N, C, H, W]");
    convt_geom g;
    memset(&g, 0, sizeof g);
    g.kh = ia[0], g.kw = ia[1], g.sh = ia[2], g.sw = ia[3], g.dh = ia[4], g.dw = ia[5], g.ph = ia[6], g.pw = ia[7];
    g.mg = y->dims[1], g.oh = y->dims[2], g.ow = y->dims[3];
    int64_t span_h = g.dh * (g.kh - 1) + 1, span_w = g.dw * (g.kw - 1) + 1;
    const int64_t padded_h = g.oh + g.ph + ia[8], padded_w = g.ow + g.pw + ia[9];
    if (padded_h < span_h || padded_w < span_w)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "the block (%lld x %lld with dilations) is larger than the padded image "
                           "(%lld x %lld)", (long long)span_h, (long long)span_w, (long long)padded_h,
                           (long long)padded_w);
    g.ih = (padded_h - span_h) / g.sh + 1, g.iw = (padded_w - span_w) / g.sw + 1;
    int64_t rows;
    if (__builtin_mul_overflow(g.ih, g.iw, &g.hw) || __builtin_mul_overflow(g.mg, g.kh * g.kw, &rows) ||
        x->dims[1] != rows || x->dims[2] != g.hw)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x is [%lld, %lld, %lld], expected [N, C*kh*kw = %lld, L = %lld blocks]",
                           (long long)x->dims[0], (long long)x->dims[1], (long long)x->dims[2],
                           (long long)(g.mg * g.kh * g.kw), (long long)g.hw);
    g.taps = rows;
    if (y->numel == 0) return NRV_OK;
    const int threads = nrv_threadpool_size(a->pool);
    const int64_t pieces = threads > 1 && g.mg > 1 ? (g.mg < threads ? g.mg : threads) : 1;
    for (int64_t n = 0; n < x->dims[0]; n++) {
        convt_scatter_job j = {&g, (const float *)x->data + n * rows * g.hw, NULL,
                               (float *)y->data + n * g.mg * g.oh * g.ow, pieces};
        nrv_parallel_for(a->pool, j.pieces, convt_scatter_task, &j);
    }
    return NRV_OK;
}

#define ROI_MAX_SAMPLES 1024

/* One bilinear sample of a RoiAlign bin: four positions in the plane and their weights
 * (all 0 when the point falls outside [-1, extent]). */
typedef struct roi_sample {
    int64_t pos[4];
    float w[4];
} roi_sample;

static roi_sample roi_bilinear(float y, float x, int64_t h, int64_t w) {
    roi_sample r;
    memset(&r, 0, sizeof r);
    if (!(y >= -1.0f && y <= (float)h && x >= -1.0f && x <= (float)w)) return r; /* outside, or NaN */
    if (y <= 0.0f) y = 0.0f;
    if (x <= 0.0f) x = 0.0f;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= h - 1) y1 = y0 = h - 1, y = (float)y0;
    else y1 = y0 + 1;
    if (x0 >= w - 1) x1 = x0 = w - 1, x = (float)x0;
    else x1 = x0 + 1;
    const float ly = y - (float)y0, lx = x - (float)x0, hy = 1.0f - ly, hx = 1.0f - lx;
    r.pos[0] = y0 * w + x0, r.pos[1] = y0 * w + x1, r.pos[2] = y1 * w + x0, r.pos[3] = y1 * w + x1;
    r.w[0] = hy * hx, r.w[1] = hy * lx, r.w[2] = ly * hx, r.w[3] = ly * lx;
    return r;
}

/* roi_align (ONNX RoiAlign, onnxruntime's arithmetic): each region of interest pooled to a
 * fixed grid of bins, each bin the average (or max) of bilinear samples on a regular grid.
 *   in[0] x f32 [N, C, H, W]; in[1] rois f32 [R, 4] (x1, y1, x2, y2 in x's scale before
 *   spatial_scale); in[2] batch_indices i64 [R], each in [0, N) (checked before anything is
 *   written); out[0] y f32 [R, C, oh, ow].
 *   iattr [max_mode, sampling_ratio (0: ceil(bin extent)), half_pixel]; fattr [spatial_scale].
 * half_pixel: coordinates shift by -0.5 (opset 16's default); else a region is at least 1x1
 * (opset 10). Max mode takes, per sample, the largest weighted corner (as onnxruntime).
 * Samples per bin and axis are capped at ROI_MAX_SAMPLES (a region over 1024 bins wide). */
static nrv_status roi_align_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, 3, 1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "rois"));
    NRV_TRY(nrv_op_check_in(a, 2, "batch_indices"));
    const nrv_tview *x = a->in[0], *rois = a->in[1], *bi = a->in[2];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, rois, "rois", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, bi, "batch_indices", NRV_I64));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 || bi->dims[0] != rois->dims[0] ||
        y->rank != 4 || y->dims[0] != rois->dims[0] || y->dims[1] != x->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "expected x [N, C, H, W], rois [R, 4], batch_indices [R], y [R, C, oh, ow]");
    const int max_mode = a->iattr[0] != 0, half_pixel = a->iattr[2] != 0;
    const int64_t ratio = a->iattr[1];
    if (ratio < 0 || ratio > ATTR_MAX) return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "sampling_ratio %lld", (long long)ratio);
    const float scale = a->fattr[0];
    NRV_TRY(nrv_op_check_indices(a, bi, x->dims[0], "the batch"));
    const int64_t *bv = bi->data;
    for (int64_t r = 0; r < bi->numel; r++)
        if (bv[r] < 0)
            return nrv_op_fail(a, NRV_ERR_INDEX, "batch index %lld of region %lld is negative", (long long)bv[r],
                               (long long)r);
    const int64_t C = x->dims[1], H = x->dims[2], W = x->dims[3], oh = y->dims[2], ow = y->dims[3];
    if ((H < 1 || W < 1) && y->numel > 0)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x's planes are %lld x %lld: nothing to sample", (long long)H, (long long)W);
    const float *rv = rois->data, *xv = x->data;
    float *yv = y->data;
    for (int64_t r = 0; r < rois->dims[0]; r++) {
        const float off = half_pixel ? 0.5f : 0.0f;
        const float x1 = rv[4 * r] * scale - off, y1 = rv[4 * r + 1] * scale - off;
        float rw = rv[4 * r + 2] * scale - off - x1, rh = rv[4 * r + 3] * scale - off - y1;
        if (!half_pixel) rw = rw > 1.0f ? rw : 1.0f, rh = rh > 1.0f ? rh : 1.0f;
        const float bh = rh / (float)oh, bw = rw / (float)ow;
        /* samples per bin along each axis, at most ROI_MAX_SAMPLES: a region of absurd size (or
         * NaN) cannot make one run take forever */
        const float gh_f = ratio > 0 ? (float)ratio : ceilf(rh / (float)oh);
        const float gw_f = ratio > 0 ? (float)ratio : ceilf(rw / (float)ow);
        const int64_t gh = !(gh_f >= 1.0f) ? 1 : gh_f > ROI_MAX_SAMPLES ? ROI_MAX_SAMPLES : (int64_t)gh_f;
        const int64_t gw = !(gw_f >= 1.0f) ? 1 : gw_f > ROI_MAX_SAMPLES ? ROI_MAX_SAMPLES : (int64_t)gw_f;
        const float count = (float)(gh * gw);
        const float *plane0 = xv + bv[r] * C * H * W;
        for (int64_t c = 0; c < C; c++) {
            const float *plane = plane0 + c * H * W;
            float *out = yv + (r * C + c) * oh * ow;
            for (int64_t ph = 0; ph < oh; ph++)
                for (int64_t pw = 0; pw < ow; pw++) {
                    float acc = 0.0f;
                    int first = 1;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        const float sy = y1 + (float)ph * bh + ((float)iy + 0.5f) * bh / (float)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            const float sx = x1 + (float)pw * bw + ((float)ix + 0.5f) * bw / (float)gw;
                            const roi_sample s = roi_bilinear(sy, sx, H, W);
                            if (max_mode) {
                                float v = s.w[0] * plane[s.pos[0]];
                                for (int k = 1; k < 4; k++) v = fmaxf(v, s.w[k] * plane[s.pos[k]]);
                                acc = first ? v : fmaxf(acc, v);
                                first = 0;
                            } else {
                                for (int k = 0; k < 4; k++) acc += s.w[k] * plane[s.pos[k]];
                            }
                        }
                    }
                    out[ph * ow + pw] = max_mode ? acc : acc / count;
                }
        }
    }
    return NRV_OK;
}

/* x's plane sampled at (y, x) bilinearly, zero outside (DeformConv's rule: a point beyond
 * one cell outside reads nothing, a corner outside reads zero). */
static float deform_sample(const float *plane, int64_t h, int64_t w, float y, float x) {
    if (!(y > -1.0f && y < (float)h && x > -1.0f && x < (float)w)) return 0.0f; /* NaN too */
    const float fy = floorf(y), fx = floorf(x);
    const int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    const float ly = y - fy, lx = x - fx;
    float v = 0.0f;
    if (y0 >= 0 && x0 >= 0) v += (1.0f - ly) * (1.0f - lx) * plane[y0 * w + x0];
    if (y0 >= 0 && x0 + 1 < w) v += (1.0f - ly) * lx * plane[y0 * w + x0 + 1];
    if (y0 + 1 < h && x0 >= 0) v += ly * (1.0f - lx) * plane[(y0 + 1) * w + x0];
    if (y0 + 1 < h && x0 + 1 < w) v += ly * lx * plane[(y0 + 1) * w + x0 + 1];
    return v;
}

/* deform_conv (ONNX DeformConv, 2-D): a convolution whose taps read x at learned offsets
 * (bilinear samples), optionally scaled by a mask; as im2col of the samples, then a GEMM per
 * group.
 *   in[0] x f32 [N, C, H, W]; in[1] w f32 [M, C/group, kh, kw]; in[2] offset f32
 *   [N, og*2*kh*kw, oh, ow] ((dy, dx) per offset group and tap); in[3] bias f32 [M]
 *   (optional); in[4] mask f32 [N, og*kh*kw, oh, ow] (optional); out[0] y f32 [N, M, oh, ow].
 *   iattr [group, offset_group, sh, sw, dh, dw, pads_begin_h, pads_begin_w, pads_end_h, pads_end_w].
 *   scratch: 4 * C*kh*kw * oh*ow bytes (the sampled columns of one image).
 * Tap (i, j) of output (p, q) reads channel c (offset group c / (C/og)) at
 * (p*sh - ph + i*dh + dy, q*sw - pw + j*dw + dx). */
static nrv_status deform_conv_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 5, 1, 10, 0));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_check_in(a, i, i == 0 ? "x" : i == 1 ? "w" : "offset"));
    const nrv_tview *x = a->in[0], *w = a->in[1], *off = a->in[2];
    const nrv_tview *bias = a->n_in > 3 ? a->in[3] : NULL, *mask = a->n_in > 4 ? a->in[4] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    const nrv_tview *f32s[5] = {x, w, off, bias, mask};
    static const char *const f32_names[5] = {"x", "w", "offset", "bias", "mask"};
    for (int i = 0; i < 5; i++)
        if (f32s[i]) NRV_TRY(nrv_op_expect_dtype(a, f32s[i], f32_names[i], NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    const int64_t *ia = a->iattr;
    const int64_t group = ia[0], og = ia[1], sh = ia[2], sw = ia[3], dh = ia[4], dw = ia[5], ph = ia[6], pw = ia[7];
    const int64_t peh = ia[8], pew = ia[9];
    if (x->rank != 4 || w->rank != 4 || off->rank != 4 || y->rank != 4)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x, w, offset and y must be 4-D");
    const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t M = w->dims[0], kh = w->dims[2], kw = w->dims[3], oh = y->dims[2], ow = y->dims[3];
    if (group < 1 || og < 1 || group > ATTR_MAX || og > ATTR_MAX || sh < 1 || sw < 1 || dh < 1 || dw < 1 ||
        sh > ATTR_MAX || sw > ATTR_MAX || dh > ATTR_MAX || dw > ATTR_MAX || ph < 0 || pw < 0 || ph > ATTR_MAX ||
        pw > ATTR_MAX || peh < 0 || pew < 0 || peh > ATTR_MAX || pew > ATTR_MAX || C % group || M % group ||
        C % og || w->dims[1] * group != C || kh < 1 || kw < 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "group %lld, offset_group %lld, strides, dilations or pads out of "
                           "range for C %lld, M %lld", (long long)group, (long long)og, (long long)C, (long long)M);
    const int64_t taps = kh * kw;
    if (y->dims[0] != N || y->dims[1] != M || off->dims[0] != N || off->dims[1] != og * 2 * taps ||
        off->dims[2] != oh || off->dims[3] != ow ||
        (mask && (mask->rank != 4 || mask->dims[0] != N || mask->dims[1] != og * taps || mask->dims[2] != oh ||
                  mask->dims[3] != ow)) ||
        (bias && (bias->rank != 1 || bias->dims[0] != M)))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "offset must be [N, offset_group*2*kh*kw, oh, ow], mask [N, "
                           "offset_group*kh*kw, oh, ow], bias [M], y [N, M, oh, ow]");
    const int64_t want_h = (H + ph + peh - dh * (kh - 1) - 1) / sh + 1;
    const int64_t want_w = (W + pw + pew - dw * (kw - 1) - 1) / sw + 1;
    if (oh != want_h || ow != want_w)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output %lld x %lld, expected %lld x %lld", (long long)oh, (long long)ow,
                           (long long)want_h, (long long)want_w);
    const int64_t hw = oh * ow, rows = C * taps;
    uint64_t need;
    if (nrv_mul_overflow((uint64_t)rows, (uint64_t)hw, &need) || nrv_mul_overflow(need, sizeof(float), &need) ||
        need > (uint64_t)a->scratch_bytes || (need > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, needs 4 * %lld * %lld", a->scratch_bytes,
                           (long long)rows, (long long)hw);
    if (y->numel == 0) return NRV_OK;
    float *col = a->scratch;
    const int64_t cpg = C / og, cg = C / group, mg = M / group;
    for (int64_t n = 0; n < N; n++) {
        const float *xn = (const float *)x->data + n * C * H * W;
        const float *offn = (const float *)off->data + n * og * 2 * taps * hw;
        const float *maskn = mask ? (const float *)mask->data + n * og * taps * hw : NULL;
        for (int64_t c = 0; c < C; c++) {
            const int64_t g = c / cpg;
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++) {
                    const int64_t t = i * kw + j;
                    const float *dy = offn + (g * 2 * taps + 2 * t) * hw, *dx = dy + hw;
                    const float *mk = maskn ? maskn + (g * taps + t) * hw : NULL;
                    float *crow = col + (c * taps + t) * hw;
                    for (int64_t p = 0; p < oh; p++)
                        for (int64_t q = 0; q < ow; q++) {
                            const int64_t o = p * ow + q;
                            const float sy = (float)(p * sh - ph + i * dh) + dy[o];
                            const float sx = (float)(q * sw - pw + j * dw) + dx[o];
                            const float v = deform_sample(xn + c * H * W, H, W, sy, sx);
                            crow[o] = mk ? v * mk[o] : v;
                        }
                }
        }
        float *yn = (float *)y->data + n * M * hw;
        for (int64_t gi = 0; gi < group; gi++)
            nrv_kernel_get(NRV_OP_GEMM).gemm(0, 0, mg, hw, cg * taps, 1.0f, (const float *)w->data + gi * mg * cg * taps,
                                             cg * taps, col + gi * cg * taps * hw, hw, 0.0f, yn + gi * mg * hw, hw);
        if (bias)
            for (int64_t m = 0; m < M; m++)
                for (int64_t o = 0; o < hw; o++) yn[m * hw + o] += ((const float *)bias->data)[m];
    }
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_upsample[] = {
    {"conv_transpose", conv_transpose_run, "gemm"},
    {"resize", resize_run, NULL},
    {"grid_sample", grid_sample_run, NULL},
    {"col2im", col2im_run, NULL},
    {"roi_align", roi_align_run, NULL},
    {"deform_conv", deform_conv_run, "gemm"},
    {NULL, NULL, NULL},
};
