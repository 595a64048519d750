/* op_conv.c — plan ops of the conv family (see plan_ops.h for the contract):
 *   conv, conv_packed (+ pack_panels), conv_w8a8, conv_integer, depthwise_integer, rdft, pool,
 *   global_pool, channel_affine, instancenorm, pad.
 *
 * Spatial ops accept one or two spatial axes. A 1-D problem is run as a 2-D one whose
 * height is 1 (kernel 1, stride 1, dilation 1, no padding along it), so every loop below
 * is written once, for (H, W).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

/* Strides, dilations and pads beyond this are refused: no real model has them, and the
 * bound keeps every index computation below far from int64 overflow. */
#define ATTR_MAX ((int64_t)1 << 30)

/* ------------------------------------------------------------------ helpers */

static nrv_status check_act(const nrv_op_args *a, int64_t act) {
    if (act < NRV_PLAN_ACT_NONE || act > NRV_PLAN_ACT_LAST)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "unknown fused activation code %lld", (long long)act);
    return NRV_OK;
}

/* Number of o in [0, n) with o*step + off < end (step > 0). */
static inline int64_t count_below(int64_t off, int64_t step, int64_t end, int64_t n) {
    if (off >= end) return 0;
    const int64_t c = (end - 1 - off) / step + 1;
    return c < n ? c : n;
}

/* Span of a dilated window, dil*(k-1) + 1; -1 on overflow. */
static int64_t window_span(int64_t k, int64_t dil) {
    int64_t s;
    if (__builtin_mul_overflow(k - 1, dil, &s) || __builtin_add_overflow(s, 1, &s)) return -1;
    return s;
}

/* Checks one spatial attribute (stride, dilation: lo = 1; pad: lo = 0). */
static nrv_status check_attr(const nrv_op_args *a, const char *what, int axis, int64_t v, int64_t lo) {
    if (v < lo || v > ATTR_MAX)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%s[%d] = %lld, expected %lld..%lld", what, axis, (long long)v,
                           (long long)lo, (long long)ATTR_MAX);
    return NRV_OK;
}

/* ================================================================== conv */

typedef struct conv_geom {
    int64_t n, c, m, group, cg, mg;
    int64_t ih, iw, kh, kw, oh, ow;
    int64_t sh, sw, dh, dw, ph, pw; /* ph, pw: pads at the beginning */
    int64_t kdim;                   /* cg * kh * kw: rows of the im2col matrix */
    int64_t p;                      /* oh * ow: its columns */
    int64_t hw;                     /* ih * iw */
    int pointwise;
} conv_geom;

/* Convs with at most this many output positions take the few-positions path (below). */
#define CONV_ROWS_MAX_P 16

/* Expected output extent floor((in + pb + pe - dil*(k-1) - 1) / stride) + 1; -1 when the
 * dilated kernel is larger than the padded input (or on overflow). */
static int64_t conv_out_extent(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
    const int64_t span = window_span(k, d);
    int64_t padded;
    if (span < 0 || __builtin_add_overflow(in, pb + pe, &padded)) return -1;
    if (padded < span) return -1;
    return (padded - span) / s + 1;
}

typedef float conv_v4f __attribute__((vector_size(16)));

/* dst[i] = src[2*i] for i < n: the stride-2 columns of an im2col row, two vector loads and
 * one even-lane shuffle per 4 outputs (a scalar loop made stride-2 convs im2col-bound). */
static void copy_stride2(float *restrict dst, const float *restrict src, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        conv_v4f a, b;
        memcpy(&a, src + 2 * i, sizeof a);
        memcpy(&b, src + 2 * i + 4, sizeof b);
        const conv_v4f even = __builtin_shufflevector(a, b, 0, 2, 4, 6);
        memcpy(dst + i, &even, sizeof even);
    }
    for (; i < n; i++) dst[i] = src[2 * i];
}

/* The direct path: a convolution as an implicit GEMM (nrv_gemm_implicit_fn) over its
 * input, padded and split into stride phases once, with no im2col matrix.
 *
 * Padded input row r, column t (r, t >= 0) is x[r - ph][t - pw], 0 outside x. Phase
 * (a, b) of it (a < sh, b < sw) is the plane P_ab[r'][t'] = padded[r'·sh + a][t'·sw + b],
 * PH x PW for every phase. Output (oy, ox) under tap (ki, kj) reads
 *     padded[oy·sh + ki·dh][ox·sw + kj·dw] = P_ab[oy + ki·dh / sh][ox + kj·dw / sw],
 *     a = ki·dh mod sh, b = kj·dw mod sw,
 * so with GEMM column j = oy·PW + ox, B's row (c, ki, kj) is channel c's plane P_ab at
 * offset (ki·dh / sh)·PW + kj·dw / sw: a run of one buffer, read in place by the GEMM.
 * Columns with ox >= ow are junk (computed, then dropped): PW - ow = (kw-1)·dw / sw of
 * every PW, 2 of 42 for a 3x3 conv at 40 wide. A GEMM block covers whole output rows;
 * its product goes to a row buffer (row stride PW) and the epilogue writes y from it
 * with the bias and activation, or straight into y when a block has no junk columns
 * (PW == ow, or one output row: every 1-D conv).
 *
 * Scratch (conv_scratch_bytes; mirrored by the compiler, onnx_ops.py conv_scratch):
 *   [row offsets: K int64, rounded up to 64 bytes]
 *   [phases: cg·sh·sw·PH·PW floats; a depthwise conv (cg = mg = 1): CONV_DW_PLANES·sh·sw·PH·PW,
 *    room for the threads' per-channel planes (conv_dw_task)]
 *   [row buffer: min(mg·PW·oh, max(CONV_Y_BLOCK_FLOATS, mg·PW)) floats]
 *   [transposed im2col of the few-positions path: K·min(P, 16) floats]
 * conv_packed (weight panels, conv_panels_group): the row offsets, then the phases unless
 * the conv is pointwise (then the offsets are c·P into x itself); nothing else. */
#define CONV_Y_BLOCK_FLOATS ((int64_t)196608) /* 768 KiB: a block of y stays in L2 */
#define CONV_DW_PLANES 8                      /* depthwise: planes reserved for the threads */
typedef struct conv_direct {
    int64_t ph_rows, pw_cols; /* PH, PW */
    int64_t plane;            /* PH * PW */
    int64_t block_rows;       /* output rows per GEMM block */
    int64_t rowbuf;           /* floats of the row buffer */
    /* Where phase (a, b)'s row r of channel c lies in the phases, in floats:
     * c·sh·sw·plane + a·step_a + b·step_b + r·step_row. Planar (the implicit GEMM, whose
     * columns run across rows): step_a = sw·plane, step_b = plane, step_row = PW. The panel
     * kernel's layout (conv_rows_interleaved) puts the sh·sw phase rows r of a channel
     * next to each other instead. */
    int64_t step_a, step_b, step_row;
} conv_direct;

static void conv_direct_shape(const conv_geom *g, conv_direct *d) {
    /* the padded extent the output reads: (o-1)·s + (k-1)·d + 1, then ceil over the stride */
    const int64_t hn = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    const int64_t wn = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    d->ph_rows = (hn + g->sh - 1) / g->sh;
    d->pw_cols = (wn + g->sw - 1) / g->sw;
    d->plane = d->ph_rows * d->pw_cols;
    d->step_a = g->sw * d->plane, d->step_b = d->plane, d->step_row = d->pw_cols;
    const int64_t row_floats = (g->mg > 0 ? g->mg : 1) * d->pw_cols;
    const int64_t rows = CONV_Y_BLOCK_FLOATS / row_floats;
    d->block_rows = rows < 1 ? 1 : rows > g->oh ? g->oh : rows;
    d->rowbuf = d->block_rows * row_floats;
}

/* The phases with each channel's phase rows interleaved (row r of phases (0, 0), (0, 1), ...,
 * then row r + 1), for the panel kernel, which broadcasts single values and does not read
 * a phase's rows as one run. A tile of output positions then reads a few neighbouring rows
 * per input channel instead of 2 or 3 rows in each of sh·sw planes. 3x3 stride-2 convs
 * alone, one thread (Intel Xeon guest, AVX-512, old and new library alternated): 24 -> 48
 * channels at 208 x 208 2270-2286 -> 2029-2045 us, 48 -> 96 at 104 x 104 1861-1928 ->
 * 1710-1749 (ddddocr's detector). */
static void conv_rows_interleaved(const conv_geom *g, conv_direct *d) {
    d->step_b = d->pw_cols;
    d->step_a = g->sw * d->pw_cols;
    d->step_row = g->sh * g->sw * d->pw_cols;
}

/* Scratch bytes of the layout above; -1 on overflow. Bounded by the sizes of x, w and y
 * (checked by conv_run before), but computed with checks as the compiler's plan is input. */
static int conv_scratch_bytes(const conv_geom *g, int packed, uint64_t *bytes) {
    if (packed) { /* conv_packed: the row offsets, then the phases unless pointwise */
        conv_direct d;
        conv_direct_shape(g, &d);
        uint64_t offs, phases = 0;
        if (nrv_mul_overflow((uint64_t)g->kdim, 8, &offs) ||
            (!g->pointwise && (nrv_mul_overflow((uint64_t)(g->cg * g->sh * g->sw), (uint64_t)d.plane, &phases) ||
                               nrv_mul_overflow(phases, sizeof(float), &phases))))
            return -1;
        offs = (offs + 63) / 64 * 64;
        return __builtin_add_overflow(offs, phases, bytes) ? -1 : 0;
    }
    if (g->pointwise) {
        *bytes = 0;
        return 0;
    }
    conv_direct d;
    conv_direct_shape(g, &d);
    uint64_t offs, phases, rowbuf, few, total;
    const uint64_t p16 = (uint64_t)(g->p < CONV_ROWS_MAX_P ? g->p : CONV_ROWS_MAX_P);
    const uint64_t mpw = (uint64_t)(g->mg > 0 ? g->mg : 1) * (uint64_t)d.pw_cols;
    const uint64_t planes = g->cg == 1 && g->mg == 1 ? CONV_DW_PLANES : (uint64_t)g->cg;
    if (nrv_mul_overflow((uint64_t)g->kdim, 8, &offs) ||
        nrv_mul_overflow(planes * (uint64_t)(g->sh * g->sw), (uint64_t)d.plane, &phases) ||
        nrv_mul_overflow(mpw, (uint64_t)g->oh, &rowbuf) || nrv_mul_overflow((uint64_t)g->kdim, p16, &few))
        return -1;
    const uint64_t cap = mpw > (uint64_t)CONV_Y_BLOCK_FLOATS ? mpw : (uint64_t)CONV_Y_BLOCK_FLOATS;
    if (rowbuf > cap) rowbuf = cap;
    offs = (offs + 63) / 64 * 64;
    if (__builtin_add_overflow(phases, rowbuf, &total) || __builtin_add_overflow(total, few, &total) ||
        nrv_mul_overflow(total, sizeof(float), &total) || __builtin_add_overflow(total, offs, &total))
        return -1;
    *bytes = total;
    return 0;
}

/* Phases b = 0 and 1 of one padded row with column stride 2, from x's row xr in one pass:
 * phase b's column t is x's column 2t + b - pw, 0 outside x. One phase takes x's even
 * columns, the other its odd ones, so each 8 floats of x give 4 to each. (Filling the two
 * phases one after the other read every x row twice, in runs the prefetchers barely
 * followed: a quarter of a stride-2 3x3 conv's time.) */
static void conv_fill_row_stride2(float *const rows[2], const float *restrict xr, int64_t iw, int64_t pw,
                                  int64_t pw_cols) {
    int64_t lo[2], hi[2];
    for (int b = 0; b < 2; b++) {
        nrv_valid_range(b - pw, 2, iw, pw_cols, &lo[b], &hi[b]);
        memset(rows[b], 0, (size_t)lo[b] * sizeof(float));
        memset(rows[b] + hi[b], 0, (size_t)(pw_cols - hi[b]) * sizeof(float));
    }
    /* even[i] = x[2i] is phase be's column i + se; odd[i] = x[2i + 1] phase bo's i + so */
    const int be = (int)(pw & 1), bo = 1 - be;
    const int64_t se = (pw - be) / 2, so = (pw + be) / 2;
    float *restrict even = rows[be] + se, *restrict odd = rows[bo] + so;
    const int64_t ie0 = lo[be] - se, ie1 = hi[be] - se, io0 = lo[bo] - so, io1 = hi[bo] - so;
    /* [i0, iv): both columns of every pair inside x, 4 pairs per step */
    const int64_t i0 = ie0 > io0 ? ie0 : io0, i1 = ie1 < io1 ? ie1 : io1;
    const int64_t iv = i1 > i0 ? i0 + (i1 - i0) / 4 * 4 : i0;
    for (int64_t i = i0; i < iv; i += 4) {
        conv_v4f a, b;
        memcpy(&a, xr + 2 * i, sizeof a);
        memcpy(&b, xr + 2 * i + 4, sizeof b);
        const conv_v4f ev = __builtin_shufflevector(a, b, 0, 2, 4, 6), od = __builtin_shufflevector(a, b, 1, 3, 5, 7);
        memcpy(even + i, &ev, sizeof ev);
        memcpy(odd + i, &od, sizeof od);
    }
    for (int64_t i = ie0; i < (ie1 < i0 ? ie1 : i0); i++) even[i] = xr[2 * i];
    for (int64_t i = ie0 > iv ? ie0 : iv; i < ie1; i++) even[i] = xr[2 * i];
    for (int64_t i = io0; i < (io1 < i0 ? io1 : i0); i++) odd[i] = xr[2 * i + 1];
    for (int64_t i = io0 > iv ? io0 : iv; i < io1; i++) odd[i] = xr[2 * i + 1];
}

/* row[t] = xs[t] for t in [lo, hi), 0 elsewhere in [0, n): one padded row of a column stride
 * of 1, in vectors. The rows are often a few dozen floats (a 1x3 conv on 8 columns), where
 * three libc calls per row cost more than the copy. */
static inline __attribute__((always_inline)) void conv_fill_row_stride1(float *restrict row, const float *restrict xs,
                                                                       int64_t lo, int64_t hi, int64_t n) {
    const conv_v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t t = 0;
    for (; t + 4 <= lo; t += 4) memcpy(row + t, &zero, sizeof zero);
    for (; t < lo; t++) row[t] = 0.0f;
    for (; t + 4 <= hi; t += 4) {
        conv_v4f v;
        memcpy(&v, xs + t, sizeof v);
        memcpy(row + t, &v, sizeof v);
    }
    for (; t < hi; t++) row[t] = xs[t];
    for (; t + 4 <= n; t += 4) memcpy(row + t, &zero, sizeof zero);
    for (; t < n; t++) row[t] = 0.0f;
}

/* Fills the phase planes of channels [c0, c1) of one image's group (layout above), padded
 * row by padded row, so each channel of x is read once, front to back. (Built without
 * loop-distribute-patterns, which made the row copies memmove calls again, each costing
 * as much as a short row.) */
#define CONV_NO_LIBC_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
static CONV_NO_LIBC_LOOPS void conv_fill_phases(const conv_geom *g, const conv_direct *d, const float *x,
                                                float *phases, int64_t c0, int64_t c1) {
    const int64_t pwc = d->pw_cols;
    if (g->sh == 1 && g->sw == 1) { /* one phase, each row's valid columns the same */
        int64_t tlo, thi;
        nrv_valid_range(-g->pw, 1, g->iw, pwc, &tlo, &thi);
        for (int64_t c = c0; c < c1; c++)
            for (int64_t r = 0; r < d->ph_rows; r++) {
                const int64_t iy = r - g->ph;
                float *row = phases + c * d->plane + r * pwc;
                if (iy < 0 || iy >= g->ih) conv_fill_row_stride1(row, NULL, 0, 0, pwc);
                else conv_fill_row_stride1(row, x + c * g->hw + iy * g->iw - g->pw, tlo, thi, pwc);
            }
        return;
    }
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = x + c * g->hw;
        float *pc = phases + c * g->sh * g->sw * d->plane;
        for (int64_t r = 0; r < d->ph_rows; r++)
            for (int64_t a = 0; a < g->sh; a++) {
                float *pa = pc + a * d->step_a + r * d->step_row; /* phase (a, b)'s row r: pa + b·step_b */
                const int64_t iy = r * g->sh + a - g->ph;
                if (iy < 0 || iy >= g->ih) {
                    for (int64_t b = 0; b < g->sw; b++) memset(pa + b * d->step_b, 0, (size_t)pwc * sizeof(float));
                    continue;
                }
                const float *xr = xc + iy * g->iw;
                if (g->sw == 2) {
                    float *const rows[2] = {pa, pa + d->step_b};
                    conv_fill_row_stride2(rows, xr, g->iw, g->pw, pwc);
                    continue;
                }
                for (int64_t b = 0; b < g->sw; b++) {
                    float *row = pa + b * d->step_b;
                    const int64_t off = b - g->pw; /* x's column of phase column t: t·sw + off */
                    int64_t tlo, thi;
                    nrv_valid_range(off, g->sw, g->iw, pwc, &tlo, &thi);
                    if (g->sw == 1) {
                        conv_fill_row_stride1(row, xr + off, tlo, thi, pwc);
                        continue;
                    }
                    memset(row, 0, (size_t)tlo * sizeof(float));
                    for (int64_t t = tlo; t < thi; t++) row[t] = xr[t * g->sw + off];
                    memset(row + thi, 0, (size_t)(pwc - thi) * sizeof(float));
                }
            }
    }
}

/* The fill, in channel ranges for the threads (it runs before the product, which needs
 * all of it). */
typedef struct conv_fill_job {
    const conv_geom *g;
    const conv_direct *d;
    const float *x;
    float *phases;
    int64_t pieces;
} conv_fill_job;

static CONV_NO_LIBC_LOOPS void conv_fill_task(void *ctx, int64_t t) {
    const conv_fill_job *j = ctx;
    conv_fill_phases(j->g, j->d, j->x, j->phases, t * j->g->cg / j->pieces, (t + 1) * j->g->cg / j->pieces);
}

static void conv_fill_phases_parallel(const conv_geom *g, const conv_direct *d, const float *x, float *phases,
                                      nrv_threadpool *pool) {
    conv_fill_job j = {g, d, x, phases, nrv_plan_pieces(pool, g->cg * g->sh * g->sw * d->plane, 1 << 15, g->cg)};
    nrv_parallel_for(pool, j.pieces, conv_fill_task, &j);
}

/* The phases the GEMM reads: x itself when they would be a copy of it (strides 1, no
 * padding: one phase per channel, PH = ih rows of PW = iw columns, as x lies in memory;
 * the fill was a fifth of a 3x1 conv's time at 72 channels x 32 x 8), else the phases
 * filled into the scratch. */
static const float *conv_phases(const conv_geom *g, const conv_direct *d, const float *x, float *phases,
                                nrv_threadpool *pool) {
    if (g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && d->ph_rows <= g->ih && d->pw_cols == g->iw) return x;
    conv_fill_phases_parallel(g, d, x, phases, pool);
    return phases;
}

/* B's row offsets into the phases: row (c, ki, kj) -> plane (c, a, b), shifted by the tap. */
static void conv_row_offsets(const conv_geom *g, const conv_direct *d, int64_t *off) {
    for (int64_t c = 0, p = 0; c < g->cg; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++, p++) {
                const int64_t a = ki * g->dh % g->sh, b = kj * g->dw % g->sw;
                off[p] = c * g->sh * g->sw * d->plane + a * d->step_a + b * d->step_b +
                         ki * g->dh / g->sh * d->step_row + kj * g->dw / g->sw;
            }
}

/* One input channel into one output channel (depthwise): y[oy][ox] = bias + sum over the
 * kernel of w[ki][kj] * x[oy*sh + ki*dh - ph][ox*sw + kj*dw - pw]. One pass over the
 * output row per tap, over the columns where that tap is inside x: the loop GCC
 * vectorizes (register-blocking the taps instead measured 2x slower at SSE2). */
static void conv_direct_1ch(const conv_geom *g, const float *restrict x, const float *restrict w, float bias,
                            float *restrict y) {
    const int64_t ow = g->ow, sw = g->sw;
    for (int64_t i = 0; i < g->p; i++) y[i] = bias;
    for (int64_t oy = 0; oy < g->oh; oy++) {
        float *yr = y + oy * ow;
        for (int64_t ki = 0; ki < g->kh; ki++) {
            const int64_t iy = oy * g->sh + ki * g->dh - g->ph;
            if (iy < 0 || iy >= g->ih) continue;
            const float *xr = x + iy * g->iw;
            const float *wr = w + ki * g->kw;
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const float wv = wr[kj];
                const int64_t off = kj * g->dw - g->pw;
                int64_t lo, hi;
                nrv_valid_range(off, sw, g->iw, ow, &lo, &hi);
                if (sw == 1) {
                    for (int64_t ox = lo; ox < hi; ox++) yr[ox] += wv * xr[ox + off];
                } else {
                    for (int64_t ox = lo; ox < hi; ox++) yr[ox] += wv * xr[ox * sw + off];
                }
            }
        }
    }
}

/* Depthwise with stride 1 or a column stride of 2: the channel is copied once into a
 * zero-padded plane (in scratch), then every output vector accumulates its kh·kw taps in a
 * register and is stored once, with no bounds logic in the loop: the dispatched kernel
 * "depthwise" (kernels.h; AVX2/AVX-512 blocks of 8 accumulators, the 4-lane reference
 * elsewhere), given each tap's offset in the plane.
 * - Why a plane: the short per-tap row loops of conv_direct_1ch cost more than the
 *   arithmetic on small planes (a MobileNet block's 16x16: 58 us for 64 channels, 4.5x this).
 * - Column stride 2: the plane keeps each padded row as two phase rows, even columns then
 *   odd, so a tap's 4 outputs read 4 neighbours of one phase row. MobileNet/PP-LCNet
 *   downsampling blocks used to take the direct loop. Any row stride works. */
#define DW_TAPS_MAX NRV_DW_MAX_TAPS /* 7x7; larger kernels take conv_direct_1ch */

typedef struct dw_plane {
    int64_t phases; /* column stride: 1 or 2 */
    int64_t wpp;    /* floats per phase row */
    int64_t hp;     /* padded rows */
    /* each tap's offset in the plane from output (0, 0): its row, then (column stride 2) its
     * phase row and the column in it; set by dw_plane_taps, once per piece of channels */
    int64_t off[DW_TAPS_MAX];
} dw_plane;

/* The plane's shape; 0 when this path does not apply. */
static int dw_plane_shape(const conv_geom *g, dw_plane *pl) {
    if ((g->sw != 1 && g->sw != 2) || g->kh * g->kw > DW_TAPS_MAX) return 0;
    const int64_t ow4 = (g->ow + 3) / 4 * 4; /* outputs the vector loops may compute */
    pl->phases = g->sw;
    /* the last vector reads up to column ow4 - 1 + (kw - 1)·dw / sw; rows of whole vectors
     * keep every row 16-byte aligned */
    pl->wpp = (ow4 + ((g->kw - 1) * g->dw) / g->sw + 3) / 4 * 4;
    pl->hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    return 1;
}

/* Floats of the padded plane, or 0 if this path does not apply. */
static int64_t dw_plane_floats(const conv_geom *g) {
    dw_plane pl;
    return dw_plane_shape(g, &pl) ? pl.hp * pl.phases * pl.wpp : 0;
}

/* The plane's shape and tap offsets (the caller checked the path applies). */
static void dw_plane_taps(const conv_geom *g, dw_plane *pl) {
    (void)dw_plane_shape(g, pl);
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) {
            const int64_t c = kj * g->dw; /* padded column of output 0 */
            pl->off[ki * g->kw + kj] = ki * g->dh * pl->phases * pl->wpp + (c % pl->phases) * pl->wpp + c / pl->phases;
        }
}

static void conv_depthwise_plane(const conv_geom *g, const dw_plane *pl, const float *restrict x,
                                 const float *restrict w, float bias, float *restrict y, float *restrict plane) {
    const int64_t S = pl->phases, wpp = pl->wpp, hp = pl->hp, row_floats = S * wpp;
    memset(plane, 0, (size_t)(hp * row_floats) * sizeof(float));
    for (int64_t iy = 0; iy < g->ih && iy + g->ph < hp; iy++) {
        float *dst = plane + (iy + g->ph) * row_floats;
        const float *src = x + iy * g->iw;
        if (S == 1) {
            const int64_t cols = g->iw < wpp - g->pw ? g->iw : wpp - g->pw; /* input columns inside */
            if (cols > 0) memcpy(dst + g->pw, src, (size_t)cols * sizeof(float));
        } else {
            /* padded column c = ix + pw goes to phase c % 2, index c / 2 */
            for (int64_t ph = 0; ph < 2; ph++) {
                const int64_t ix0 = (ph - g->pw % 2 + 2) % 2, j0 = (ix0 + g->pw) / 2;
                int64_t n = (g->iw - ix0 + 1) / 2;
                if (n > wpp - j0) n = wpp - j0;
                if (n <= 0) continue;
                float *d = dst + ph * wpp + j0;
                copy_stride2(d, src + ix0, n - 1); /* its vector loads stay inside the row */
                d[n - 1] = src[ix0 + 2 * (n - 1)];
            }
        }
    }
    /* the dispatched taps (kernels.h nrv_depthwise_fn: the plane's slack is its contract) */
    nrv_kernel_get(NRV_OP_DEPTHWISE).depthwise(plane, g->sh * row_floats, g->oh, g->ow, pl->off, g->kh * g->kw, w, bias,
                                               y);
}

/* Depthwise convs, one image: channel ranges for the threads, each piece with its own
 * plane buffer (`planes` holds `pieces` of them; plane_floats 0: the direct loop, which
 * needs none), the activation run on each channel while it is in cache. Channels were
 * done one after another on the calling thread before. */
typedef struct conv_dw_job {
    const conv_geom *g;
    const nrv_dw_geom *dg; /* the channel-vector path's geometry (conv_dwc_task); unused by planes */
    const float *x, *w, *bias;
    float *y, *planes;
    int64_t plane_floats, pieces;
    const nrv_op_args *a;
    int64_t act;
    float p0, p1;
} conv_dw_job;

static void conv_dw_task(void *ctx, int64_t t) {
    const conv_dw_job *j = ctx;
    const conv_geom *g = j->g;
    dw_plane pl = {0};
    if (j->plane_floats) dw_plane_taps(g, &pl);
    for (int64_t c = t * g->c / j->pieces; c < (t + 1) * g->c / j->pieces; c++) {
        const float *xc = j->x + c * g->hw, *wc = j->w + c * g->kdim;
        const float bias = j->bias ? j->bias[c] : 0.0f;
        float *yc = j->y + c * g->p;
        if (j->plane_floats) conv_depthwise_plane(g, &pl, xc, wc, bias, yc, j->planes + t * j->plane_floats);
        else conv_direct_1ch(g, xc, wc, bias, yc);
        (void)nrv_plan_apply_act(j->a, j->act, j->p0, j->p1, yc, g->p); /* act checked by conv_run */
    }
}

/* Depthwise convs whose output rows are at most this wide run with their vectors across
 * channels (nrv_depthwise_channels_fn): along a row of 7-14 outputs most lanes of a 16-lane
 * vector idle, and each plane's setup costs about as much as its taps. Measured (one
 * thread, AVX-512, 3x3, against the plane path): 960 ch 7x7 92 -> 47 us, 384 ch 14x14 85 ->
 * 72, stride 2 to 7x7 102 -> 45; at 28 wide even (stride 1), at 56 slower (471 -> 552).
 * Column stride 2 splits each plane row into phases, which the channel path never does:
 * there it wins up to 56 wide (218 -> 197 us at 28, 591 -> 565 at 56). */
#define DW_CHANNELS_MAX_OW 16
#define DW_CHANNELS_MAX_OW_STRIDED 64

/* The channel-vector path applies: a narrow output, tiles that hold its rows, and not a
 * scalar reference standing in for a vector plane kernel (aarch64 has no channel variant). */
static int dw_use_channels(const nrv_dw_geom *dg) {
    if (dg->ow > (dg->sw > 1 ? DW_CHANNELS_MAX_OW_STRIDED : DW_CHANNELS_MAX_OW) || !nrv_dw_channels_fit(dg)) return 0;
    return strcmp(nrv_kernel_selected("depthwise_channels"), "ref") != 0 ||
           strcmp(nrv_kernel_selected("depthwise"), "ref") == 0;
}

/* Channel-vector pieces (conv_dw_job with dg set): whole blocks of 16 channels per piece
 * (a vector's lanes), the activation run on the piece's outputs while they are in cache. */
static void conv_dwc_task(void *ctx, int64_t t) {
    const conv_dw_job *j = ctx;
    const conv_geom *g = j->g;
    const int64_t blocks = (g->c + 15) / 16;
    const int64_t c0 = t * blocks / j->pieces * 16, c1_ = (t + 1) * blocks / j->pieces * 16;
    const int64_t c1 = c1_ < g->c ? c1_ : g->c;
    if (c1 <= c0) return;
    nrv_kernel_get(NRV_OP_DEPTHWISE_CHANNELS)
        .depthwise_channels(j->dg, c1 - c0, j->x + c0 * g->hw, j->w + c0 * g->kdim, j->bias ? j->bias + c0 : NULL,
                            j->y + c0 * g->p);
    (void)nrv_plan_apply_act(j->a, j->act, j->p0, j->p1, j->y + c0 * g->p, (c1 - c0) * g->p);
}

/* The rows path (nrv_depthwise_channels_fn contract, op "depthwise_rows") applies: a shape it
 * takes, and a vector variant of it (AVX2, AVX-512, NEON: the reference is the definition,
 * one output at a time, so with it the plane or channel path runs instead). */
static int dw_use_rows(const nrv_dw_geom *dg) {
    return nrv_dw_rows_fit(dg) && strcmp(nrv_kernel_selected("depthwise_rows"), "ref") != 0;
}

/* Rows pieces (conv_dw_job with dg set): channel ranges, the activation run on each piece's
 * outputs while they are in cache. */
static void conv_dwr_task(void *ctx, int64_t t) {
    const conv_dw_job *j = ctx;
    const conv_geom *g = j->g;
    const nrv_depthwise_channels_fn rows = nrv_kernel_get(NRV_OP_DEPTHWISE_ROWS).depthwise_channels;
    for (int64_t c = t * g->c / j->pieces; c < (t + 1) * g->c / j->pieces; c++) {
        rows(j->dg, 1, j->x + c * g->hw, j->w + c * g->kdim, j->bias ? j->bias + c : NULL, j->y + c * g->p);
        (void)nrv_plan_apply_act(j->a, j->act, j->p0, j->p1, j->y + c * g->p, g->p);
    }
}

/* One image of a depthwise conv: the rows path for the shapes it takes; the channel-vector
 * path for other narrow outputs; otherwise
 * as many pieces as planes fit in the scratch given (the compiler reserves
 * CONV_DW_PLANES), up to two per thread. */
static void conv_depthwise(const conv_geom *g, const nrv_op_args *a, const float *x, const float *w,
                           const float *bias, float *y, int64_t act, float p0, float p1) {
    const nrv_dw_geom dg = {g->ih, g->iw, g->oh, g->ow, g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->ph, g->pw};
    /* rows ahead of the channel path too: 960 ch 7x7 88 -> 39 us, 384 ch 28 -> 14 218 -> 49 */
    const int rows = dw_use_rows(&dg);
    if (rows || dw_use_channels(&dg)) {
        const int64_t units = rows ? g->c : (g->c + 15) / 16; /* channels, or blocks of 16 of them */
        const int64_t pieces = nrv_plan_pieces(a->pool, g->c * g->p * g->kdim, 1 << 16, units);
        conv_dw_job j = {.g = g, .dg = &dg, .x = x, .w = w, .bias = bias, .y = y, .pieces = pieces, .a = a,
                         .act = act, .p0 = p0, .p1 = p1};
        nrv_parallel_for(a->pool, pieces, rows ? conv_dwr_task : conv_dwc_task, &j);
        return;
    }
    const int64_t plane = dw_plane_floats(g);
    const int64_t fit = plane > 0 ? (int64_t)(a->scratch_bytes / ((size_t)plane * sizeof(float))) : 0;
    const int64_t units = fit > 0 && fit < g->c ? fit : g->c;
    const int64_t pieces = nrv_plan_pieces(a->pool, g->c * g->p * g->kdim, 1 << 16, units);
    conv_dw_job j = {.g = g, .x = x, .w = w, .bias = bias, .y = y, .planes = a->scratch,
                     .plane_floats = fit > 0 ? plane : 0, .pieces = pieces, .a = a, .act = act, .p0 = p0, .p1 = p1};
    nrv_parallel_for(a->pool, pieces, conv_dw_task, &j);
}

/* ---- few output positions (P = prod(out_spatial) <= CONV_ROWS_MAX_P)
 * The GEMM tiles C in 16-64 column panels, so a conv with a handful of output positions
 * (a streaming model's frames) would compute mostly padding: measured 60-80 us for the
 * VAD's [128, 387] x [387, 4] with AVX-512, against 5 us for the same product as a linear
 * layer. These convs build the transposed im2col matrix instead (one row of C/g*prod(k)
 * per output position, in the same scratch) and run y_g^T[P, M/g] = rows · W_g^T + bias
 * through the dispatch op "linear" (a dot kernel streaming W once), transposing its
 * output into y through a stack block. */
#define CONV_OUT_BLOCK 2048   /* floats of transposed output per linear call (8 KiB) */
#define CONV_PW_ROWS_MAX 4096 /* a pointwise conv's x^T staged on the stack (16 KiB) */

/* The body of conv_im2row for a kernel width kw_ that is a literal at the call sites
 * below (3, 5: the common widths) or the runtime width. With a literal, the copy of a
 * kernel row is a few moves; with a runtime width GCC turns a copy loop into a memcpy call,
 * which for 3 floats costs more than the copy (the VAD's [129, 4] conv, k 3: im2row took
 * 2.7 us written with memcpy/memset calls, 0.85 us like this). */
static inline __attribute__((always_inline)) void conv_im2row_body(const conv_geom *g, const float *restrict x,
                                                                   float *restrict rows, const int64_t kw_) {
    /* locals: the struct would be reloaded after every memcpy/memset call */
    const int64_t kh = g->kh, kw = kw_, cg = g->cg, ih = g->ih, iw = g->iw, hw = g->hw, kdim = g->kdim;
    const int64_t oh = g->oh, ow = g->ow, sh = g->sh, dh = g->dh, dw = g->dw, ph = g->ph;
    /* per output column: first input column and the valid kernel columns [jlo, jhi);
     * ow <= P <= CONV_ROWS_MAX_P */
    int64_t x0[CONV_ROWS_MAX_P], jlo[CONV_ROWS_MAX_P], jhi[CONV_ROWS_MAX_P];
    for (int64_t ox = 0; ox < ow; ox++) {
        x0[ox] = ox * g->sw - g->pw;
        nrv_valid_range(x0[ox], dw, iw, kw, &jlo[ox], &jhi[ox]);
    }
    for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
            float *r = rows + (oy * ow + ox) * kdim;
            const int64_t lo = jlo[ox], hi = jhi[ox], x0o = x0[ox];
            if (kh == 1 && dw == 1 && lo == 0 && hi == kw && oy * sh - ph >= 0 && oy * sh - ph < ih) {
                /* the whole window inside x, one kernel row (every interior 1-D position):
                 * kw floats per channel, channel after channel */
                const float *xs = x + (oy * sh - ph) * iw + x0o;
                for (int64_t c = 0; c < cg; c++, r += kw, xs += hw)
                    for (int64_t kj = 0; kj < kw; kj++) r[kj] = xs[kj];
                continue;
            }
            for (int64_t c = 0; c < cg; c++)
                for (int64_t ki = 0; ki < kh; ki++) {
                    float *seg = r + (c * kh + ki) * kw;
                    const int64_t iy = oy * sh + ki * dh - ph;
                    if (iy < 0 || iy >= ih) {
                        for (int64_t kj = 0; kj < kw; kj++) seg[kj] = 0.0f;
                        continue;
                    }
                    const float *xr = x + c * hw + iy * iw;
                    /* one loop with a condition, not three: those would become calls */
                    for (int64_t kj = 0; kj < kw; kj++) seg[kj] = kj >= lo && kj < hi ? xr[x0o + kj * dw] : 0.0f;
                }
        }
}

/* rows[(oy*ow + ox)][(c*kh + ki)*kw + kj] = x[c][oy*sh + ki*dh - ph][ox*sw + kj*dw - pw],
 * 0 in the padding (the transposed im2col matrix). */
static void conv_im2row(const conv_geom *g, const float *restrict x, float *restrict rows) {
    switch (g->kw) {
    case 3: conv_im2row_body(g, x, rows, 3); break;
    case 5: conv_im2row_body(g, x, rows, 5); break;
    default: conv_im2row_body(g, x, rows, g->kw); break;
    }
}

/* Whether this conv takes the few-positions path (same answer for every image and group). */
static int conv_use_rows(const conv_geom *g) {
    if (g->cg == 0 || g->p > CONV_ROWS_MAX_P) return 0;
    return !g->pointwise || g->cg * g->p <= CONV_PW_ROWS_MAX;
}

/* y_g[M/g, P] = W_g · col + bias_g for one image and group, via "linear" on the transposed
 * im2col matrix (built in scratch, or for a pointwise conv x^T on the stack). */
/* One block of output channels [m0, m0 + mb) of conv_group_rows: "linear" on the transposed
 * im2col rows into a stack tile, then transposed into y. */
typedef struct conv_rows_job {
    const conv_geom *g;
    const float *rows, *wg, *bg;
    float *yg;
    int64_t pieces;
} conv_rows_job;

/* y's channels [m0, m0 + mb) from a row product's tile out [P, mb] (transposed). */
static void conv_rows_store(const conv_geom *g, const float *out, int64_t m0, int64_t mb, float *yg) {
    for (int64_t jj = 0; jj < mb; jj++) {
        float *yr = yg + (m0 + jj) * g->p;
        for (int64_t q = 0; q < g->p; q++) yr[q] = out[q * mb + jj];
    }
}

static void conv_rows_task(void *ctx, int64_t t) {
    const conv_rows_job *j = ctx;
    const conv_geom *g = j->g;
    float out[CONV_OUT_BLOCK];
    const int64_t m0 = t * g->mg / j->pieces, mb = (t + 1) * g->mg / j->pieces - m0;
    nrv_kernel_get(NRV_OP_LINEAR).linear(j->rows, g->p, g->kdim, j->wg + m0 * g->kdim, j->bg ? j->bg + m0 : NULL, mb,
                                         out);
    conv_rows_store(g, out, m0, mb, j->yg);
}

/* Pieces of the output channels: enough for each to fit the stack tile (tile_floats;
 * 0 = no limit), more with threads. Each piece keeps >= NRV_LINEAR_SPLIT_MIN_OUT channels
 * where it can, so the kernel takes the same path for it as for all channels and the thread
 * count does not change results. */
static int64_t conv_channel_pieces(const conv_geom *g, nrv_threadpool *pool, int64_t tile_floats) {
    const int64_t fit = tile_floats ? (g->mg * g->p + tile_floats - 1) / tile_floats : 1;
    const int threads = nrv_threadpool_size(pool);
    if (threads > 1 && g->mg * g->kdim * g->p >= (1 << 16)) {
        const int64_t par = nrv_plan_output_pieces(threads, g->p, g->mg, tile_floats ? tile_floats : INT64_MAX / 2);
        if (par > fit) return par;
    }
    return fit;
}

/* conv_packed's few positions: whole panels of output channels [t0, t1) per piece, through
 * the gemm variant's linear_panels (broadcast-FMA, no horizontal sum per output: 1.2-1.6x the
 * dot kernel at 4 rows, bench/RESULTS.md stop 33), into the stack tile, transposed into y. */
typedef struct conv_rows_panels_job {
    const conv_geom *g;
    const float *rows, *wp, *bg;
    float *yg;
    int64_t panels, pieces;
} conv_rows_panels_job;

static void conv_rows_panels_task(void *ctx, int64_t t) {
    const conv_rows_panels_job *j = ctx;
    const conv_geom *g = j->g;
    float out[CONV_OUT_BLOCK];
    const int64_t m0 = t * j->panels / j->pieces * NRV_PANEL_COLS, m1e = (t + 1) * j->panels / j->pieces * NRV_PANEL_COLS;
    const int64_t mb = (m1e < g->mg ? m1e : g->mg) - m0;
    if (mb <= 0) return;
    nrv_kernel_get_rows_panels(NRV_OP_GEMM)
        .linear_panels(j->rows, g->p, g->kdim, g->kdim, NULL, NULL, 0.0f, j->wp + m0 * g->kdim, mb,
                       j->bg ? j->bg + m0 : NULL, out, mb);
    conv_rows_store(g, out, m0, mb, j->yg);
}

/* y_g = W_g · col + bias_g for one image and group with at most CONV_ROWS_MAX_P positions:
 * the transposed im2col rows (in scratch; a pointwise conv's x^T on the stack), then "linear"
 * on W_g, or linear_panels on its panels wp (conv_packed). */
static void conv_group_rows(const conv_geom *g, const float *xg, const float *wg, const float *wp, const float *bg,
                            float *scratch, float *yg, nrv_threadpool *pool) {
    float xt[CONV_PW_ROWS_MAX];
    const float *rows;
    if (g->pointwise) {
        for (int64_t c = 0; c < g->cg; c++)
            for (int64_t q = 0; q < g->p; q++) xt[q * g->cg + c] = xg[c * g->p + q];
        rows = xt;
    } else {
        conv_im2row(g, xg, scratch);
        rows = scratch;
    }
    if (wp) {
        const int64_t panels = (g->mg + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS;
        const int64_t per = CONV_OUT_BLOCK / (NRV_PANEL_COLS * CONV_ROWS_MAX_P); /* panels a tile holds (2) */
        const int64_t pieces = (panels + per - 1) / per;
        int64_t par, one;
        nrv_plan_grid(pool, g->mg * g->kdim * g->p, 1 << 16, panels, 1, &par, &one); /* whole panels, evenly */
        conv_rows_panels_job j = {g, rows, wp, bg, yg, panels, par > pieces ? par : pieces};
        nrv_parallel_for(pool, j.pieces, conv_rows_panels_task, &j);
        return;
    }
    conv_rows_job j = {g, rows, wg, bg, yg, conv_channel_pieces(g, pool, CONV_OUT_BLOCK)};
    nrv_parallel_for(pool, j.pieces, conv_rows_task, &j);
}

/* y[m][i] += b[m] over [rows, cols]. noinline: inlined into conv_run, GCC 12 left this
 * loop scalar (measured: 40% of a depthwise conv's time). */
static __attribute__((noinline)) void add_bias_rows(float *restrict y, const float *restrict b, int64_t rows,
                                                    int64_t cols) {
    for (int64_t m = 0; m < rows; m++) {
        float *restrict yr = y + m * cols;
        const float bv = b[m];
        for (int64_t i = 0; i < cols; i++) yr[i] += bv;
    }
}

/* The GEMM paths (pointwise, direct) for one block of output positions, cut into pieces
 * for the threads (conv_gemm_split): ranges of whole output rows (direct path, blocks of
 * several rows) or of 64-column panels, each piece a full-height GEMM sharing W; or, when
 * the block has too few positions for that (a 10 x 10 output), ranges of channels.
 * Channels were the only split before, at no fewer than 64 per piece, which left convs
 * of fewer than 128 channels on one thread (most of YOLOv8n). Per output the arithmetic
 * does not depend on the piece, so results are bit-identical for any thread count. */
enum { CONV_SPLIT_ROWS, CONV_SPLIT_PANELS, CONV_SPLIT_CHANNELS };
typedef struct conv_gemm_job {
    const float *wg;          /* A = W_g [mg, k] */
    const float *b;           /* pointwise: x's block, rows of stride ldb; direct: the phase planes */
    const int64_t *b_row_off; /* direct: B's row offsets into b (NULL: pointwise) */
    float *c;                 /* the product: np columns per channel, rows of stride ldc */
    float *yg;                /* the block's first output position in y's channel 0 */
    const float *sum;         /* in[3] at yg's position (laid out as y), or NULL */
    int64_t mg, np, k, ldb, ldc, pieces;
    int split;                /* CONV_SPLIT_*: what the pieces are ranges of */
    int64_t y_stride;         /* floats between y's channels (P) */
    int64_t rows, ow, c_row;  /* the block's output rows, y's width, c's row stride (PW) */
    const float *bias;        /* [mg] added to each output, or NULL */
    const nrv_op_args *a;     /* for the fused activation */
    int64_t act;
    float p0, p1;
} conv_gemm_job;

/* One piece: the product, then bias and activation on the outputs just written, while
 * they are still in cache (a separate pass over y each cost a trip to memory); the direct
 * path's junk columns are dropped on the way from the row buffer to y. */
static void conv_gemm_task(void *ctx, int64_t t) {
    const conv_gemm_job *j = ctx;
    int64_t col0 = 0, ncols = j->np, y0 = 0, rows = j->rows, m0 = 0, mb = j->mg;
    if (j->split == CONV_SPLIT_ROWS) {
        const int64_t r0 = t * j->rows / j->pieces, r1 = (t + 1) * j->rows / j->pieces;
        rows = r1 - r0;
        col0 = r0 * j->c_row, ncols = rows > 0 ? (rows - 1) * j->c_row + j->ow : 0, y0 = r0 * j->ow;
    } else if (j->split == CONV_SPLIT_PANELS) {
        const int64_t panels = (j->np + 63) / 64, p1 = (t + 1) * panels / j->pieces;
        col0 = t * panels / j->pieces * 64;
        ncols = (p1 * 64 < j->np ? p1 * 64 : j->np) - col0, y0 = col0;
    } else {
        m0 = t * j->mg / j->pieces, mb = (t + 1) * j->mg / j->pieces - m0;
    }
    if (ncols <= 0 || mb <= 0) return;
    float *c = j->c + m0 * j->ldc + col0;
    if (j->b_row_off)
        nrv_kernel_get_implicit(NRV_OP_GEMM).gemm_implicit(mb, ncols, j->k, j->wg + m0 * j->k, j->k, j->b + col0,
                                                           j->b_row_off, c, j->ldc);
    else
        nrv_kernel_get(NRV_OP_GEMM).gemm(0, 0, mb, ncols, j->k, 1.0f, j->wg + m0 * j->k, j->k, j->b + col0, j->ldb,
                                         0.0f, c, j->ldc);
    const int compact = j->c != j->yg;
    const int64_t count = compact ? rows * j->ow : ncols; /* outputs per channel in this piece */
    for (int64_t m = m0; m < m0 + mb; m++) {
        float *yr = j->yg + y0 + m * j->y_stride;
        const float *sr = j->sum ? j->sum + y0 + m * j->y_stride : NULL, *br = j->bias ? j->bias + m : NULL;
        if (compact) {
            const float *cr = c + (m - m0) * j->ldc, bv = br ? *br : 0.0f;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t ox = 0; ox < j->ow; ox++) yr[r * j->ow + ox] = cr[r * j->c_row + ox] + bv;
            br = NULL;
        }
        (void)nrv_plan_epilogue(j->a, j->act, j->p0, j->p1, br, sr, yr, count); /* act checked by conv_run */
    }
}

/* How a block of a GEMM path is shared out (sets j->split and j->pieces): two pieces per
 * thread (some balance), one when the block is too small to share. Positions are split
 * while each piece keeps at least two 64-column panels; else channels, in pieces of at
 * least 12 (two register tiles), as a split into a few columns would run mostly partial
 * tiles, and at most one per thread: every piece of channels packs the block's whole x
 * (2 threads, 64 -> 64 1x1 at 56x56: 180 -> 148-154 us with two pieces instead of four). */
static void conv_gemm_split(conv_gemm_job *j, nrv_threadpool *pool, int split_rows) {
    const int64_t work = j->mg * j->k * j->np, want = 2 * (int64_t)nrv_threadpool_size(pool);
    const int64_t units = split_rows ? j->rows : (j->np + 63) / 64;
    const int few_positions = j->np < 128 * want && (j->mg >= 12 * want || units < want);
    /* A pointwise conv with at least as many outputs as inputs per position shares out
     * channels: ranges of positions then wrote short row pieces of every channel and barely
     * scaled (2 threads, 1x1 + Clip: 32 -> 192 at 28x28 77 -> 74 us by positions, 44 by
     * channels; 16 -> 96 at 112x112 451 -> 318; 64 -> 256 at 56x56 554 -> 396), while a
     * deep, narrow one keeps positions (144 -> 24 at 56x56: 90 against 116). */
    const int wide = !split_rows && j->mg >= j->k;
    j->split = split_rows ? CONV_SPLIT_ROWS : CONV_SPLIT_PANELS;
    if ((few_positions || wide) && j->mg >= 12 * 2) {
        j->split = CONV_SPLIT_CHANNELS;
        const int64_t threads = nrv_threadpool_size(pool), ranges = j->mg / 12;
        j->pieces = nrv_plan_pieces(pool, work, 1 << 16, ranges < threads ? ranges : threads);
    } else {
        j->pieces = nrv_plan_pieces(pool, work, 1 << 16, units);
    }
}

/* ---- conv_packed: the weight as panels (kernels.h, nrv_gemm_panels_fn), packed once at
 * compile time; the kernel streams them with output channels as the vector lanes and
 * writes y directly (no junk columns, no row buffer). */

/* The panels hold group · nrv_panels_floats(M/group, K) floats (K = C/group·kh·kw, the
 * kernel dims from iattr, each <= ATTR_MAX: checked products), and are 64-byte aligned
 * (the kernels load whole aligned vectors). */
static nrv_status conv_check_panels(const nrv_op_args *a, const conv_geom *g, const nrv_tview *w) {
    int64_t taps = 0, kdim = 0, bound, want = -1;
    const int ok = !__builtin_mul_overflow(g->kh, g->kw, &taps) && !__builtin_mul_overflow(g->cg, taps, &kdim) &&
                   !__builtin_mul_overflow(g->mg + NRV_PANEL_ALIGN, kdim, &bound) && /* >= the panels' floats */
                   !__builtin_mul_overflow(nrv_panels_floats(g->mg, kdim), g->group, &want);
    if (!ok || w->numel != want)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "weight panels have %lld floats, expected %lld for M %lld, K %lld, group %lld",
                           (long long)w->numel, (long long)want, (long long)g->m, (long long)kdim, (long long)g->group);
    if ((uintptr_t)w->data % 64 != 0)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "weight panels are not 64-byte aligned");
    return NRV_OK;
}

typedef struct conv_panels_job {
    const conv_geom *g;
    const float *x;       /* the phases (or x itself, pointwise) */
    const int64_t *k_off; /* (channel, tap) -> offset into x */
    const float *wp, *bias;
    const float *sum; /* the group's sum (in[3], laid out as y), or NULL */
    float *yg;
    int64_t ow, pw, act;
    int64_t panel_pieces, pos_pieces; /* piece t: panel range t / pos_pieces, position range t % pos_pieces */
    const nrv_op_args *a;
    float p0, p1;
} conv_panels_job;

/* Where piece t of `pieces` ranges of n output positions starts. When every channel's plane
 * of y starts on a cache line (n a multiple of 16 floats), the cuts are rounded to the
 * nearest multiple of 16, so two threads never write one line of y at once: a line written
 * by both bounced between their caches (2 threads, a 1x1 128 -> 128 at 28x28 in four
 * pieces: 158 -> 136 us). Only with at least 64 positions a piece (a piece then differs from
 * the even share by at most 8). */
static int64_t conv_position_cut(int64_t t, int64_t n, int64_t pieces) {
    if (t >= pieces) return n;
    const int64_t cut = t * n / pieces;
    return n % 16 == 0 && n >= 64 * pieces ? (cut + 8) / 16 * 16 : cut;
}

/* One piece: a range of 64-channel panels (a weight of their own, kernels.h: panel t at
 * t·64·k) over a range of output positions, then the activation on the outputs just
 * written. The kernel sums each output in the same order in any piece. */
static void conv_panels_task(void *ctx, int64_t t) {
    const conv_panels_job *j = ctx;
    const nrv_gemm_panels_fn kernel = nrv_kernel_get_panels(NRV_OP_GEMM).gemm_panels;
    const int64_t p = j->g->p, k = j->g->kdim, panels = (j->g->mg + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS;
    const int64_t ta = t / j->pos_pieces, tq = t % j->pos_pieces;
    const int64_t t0 = ta * panels / j->panel_pieces, t1 = (ta + 1) * panels / j->panel_pieces;
    const int64_t m0 = t0 * NRV_PANEL_COLS, mo = (t1 * NRV_PANEL_COLS < j->g->mg ? t1 * NRV_PANEL_COLS : j->g->mg) - m0;
    const int64_t q_begin = conv_position_cut(tq, p, j->pos_pieces), end = conv_position_cut(tq + 1, p, j->pos_pieces);
    if (mo <= 0) return;
    /* positions per kernel call: the call's outputs (a block of y, CONV_Y_BLOCK_FLOATS) are
     * in L2 for the activation, and each call streams its panels once */
    int64_t chunk = CONV_Y_BLOCK_FLOATS / mo;
    chunk = chunk < 240 ? 240 : chunk;
    /* ReLU, Clip and LeakyRelu (without a residual sum to add first) go into the kernel's
     * store: a second pass over each block took 7% of a C = 3 stem conv, 5% of a 72-channel
     * 3x1 one */
    const nrv_panels_act fused = {j->act == NRV_PLAN_ACT_RELU         ? NRV_PANELS_RELU
                                  : j->act == NRV_PLAN_ACT_LEAKY_RELU ? NRV_PANELS_LEAKY
                                                                      : NRV_PANELS_CLIP,
                                  j->p0, j->p1};
    const int in_kernel = !j->sum && (j->act == NRV_PLAN_ACT_RELU || j->act == NRV_PLAN_ACT_CLIP ||
                                      j->act == NRV_PLAN_ACT_LEAKY_RELU);
    for (int64_t q0 = q_begin; q0 < end; q0 += chunk) {
        const int64_t np = end - q0 < chunk ? end - q0 : chunk;
        kernel(np, mo, k, j->x, q0, j->ow, j->pw, j->k_off, j->wp + m0 * k, j->bias ? j->bias + m0 : NULL,
               j->yg + m0 * p + q0, p, in_kernel ? &fused : NULL, j->g->pointwise);
        if (!in_kernel && (j->act != NRV_PLAN_ACT_NONE || j->sum))
            for (int64_t m = m0; m < m0 + mo; m++) /* act checked by conv_run */
                (void)nrv_plan_epilogue(j->a, j->act, j->p0, j->p1, NULL, j->sum ? j->sum + m * p + q0 : NULL,
                                        j->yg + m * p + q0, np);
    }
}

/* One image's group through the panel kernel: pointwise convs read x itself (row offsets
 * c·P), others its stride phases (filled here, as the implicit GEMM's). The threads share
 * out what each would otherwise read again: ranges of positions (at least 48) re-read the
 * weight, ranges of panels re-read the input, so the panels are split when the weight is the
 * larger (a 14x14 or 7x7 conv with hundreds of channels: split by positions it ran slower
 * at 2 threads than at 1). When the panels do not spread evenly over the threads, each is
 * also cut into ranges of positions (nrv_plan_grid: 384 -> 192 channels at 6 x 16 positions,
 * 3 panels x 2 halves of the positions, took 95 -> 72 us at 2 threads in PP-OCRv6's
 * recogniser, 1.24x -> 1.33x). Any split computes every output with the same bits. */
static void conv_panels_group(const conv_geom *g, const nrv_op_args *a, const float *xg, const float *wp,
                              const float *bias, const float *sum, float *yg, int64_t act, float p0, float p1) {
    int64_t *offs = a->scratch;
    conv_panels_job j = {.g = g, .k_off = offs, .wp = wp, .bias = bias, .sum = sum, .yg = yg, .act = act, .a = a,
                         .p0 = p0, .p1 = p1};
    if (g->pointwise) {
        for (int64_t c = 0; c < g->cg; c++) offs[c] = c * g->p;
        j.x = xg, j.ow = j.pw = g->p;
    } else {
        conv_direct d;
        conv_direct_shape(g, &d);
        float *phases = (float *)((char *)a->scratch + ((size_t)g->kdim * 8 + 63) / 64 * 64);
        conv_rows_interleaved(g, &d);
        conv_row_offsets(g, &d, offs);
        j.x = conv_phases(g, &d, xg, phases, a->pool), j.ow = g->ow, j.pw = d.step_row;
    }
    const int64_t panels = (g->mg + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS, work = g->mg * g->kdim * g->p;
    if (g->mg * g->kdim > g->cg * g->hw) { /* panels, then blocks of >= 24 positions */
        nrv_plan_grid(a->pool, work, 1 << 16, panels, g->p / 24, &j.panel_pieces, &j.pos_pieces);
    } else { /* blocks of >= 48 positions */
        j.panel_pieces = 1;
        j.pos_pieces = nrv_plan_pieces(a->pool, work, 1 << 16, (g->p + 47) / 48);
    }
    nrv_parallel_for(a->pool, j.panel_pieces * j.pos_pieces, conv_panels_task, &j);
}

/* Output positions per pointwise GEMM block: the block of y (mg rows) stays in L2 for the
 * bias and activation (CONV_Y_BLOCK_FLOATS, whole 64-column panels). */
static int64_t conv_block_positions(const conv_geom *g) {
    const int64_t per = CONV_Y_BLOCK_FLOATS / (g->mg > 0 ? g->mg : 1) / 64 * 64;
    return per < 64 ? 64 : per > g->p ? g->p : per;
}

/* conv: N-image, grouped, dilated, padded convolution over 1 or 2 spatial axes, with
 * bias and a fused activation.
 *   in[0]  x    f32 [N, C, *spatial]                 sr = 1 or 2 spatial axes
 *   in[1]  w    f32 [M, C/group, *kernel]            kernel dims > 0
 *   in[2]  bias f32 [M], optional (NULL or absent: no bias)
 *   in[3]  sum  f32 shaped as y, optional: added after the bias and before the activation
 *               (a residual Add the compiler fused, fuse_conv_sum), y = act(conv + b + sum),
 *               with the bits of the unfused Add; it must not share y's bytes
 *   out[0] y    f32 [N, M, *out_spatial], out_spatial[i] =
 *               floor((in[i] + pads_begin[i] + pads_end[i] - dilations[i]*(kernel[i]-1) - 1)
 *                     / strides[i]) + 1
 *   iattr (3 + 4*sr): [sr, group, act, strides[sr], dilations[sr], pads_begin[sr], pads_end[sr]]
 *                     group >= 1 divides C and M; strides, dilations >= 1; pads >= 0;
 *                     act: nrv_plan_act code
 *   fattr (2): [p0, p1] activation parameters (LEAKY_RELU: alpha = p0; CLIP: [p0, p1];
 *              ignored otherwise), applied after the bias.
 *   scratch: conv_scratch_bytes above: 0 for a pointwise conv (every kernel dim 1, strides 1,
 *            dilations 1, pads 0), else the direct path's layout (row offsets, stride
 *            phases, row buffer, the few-positions path's rows). scratch_bytes below that
 *            fails with INVALID_ARG.
 * Per image and group: pointwise convs run the GEMM (dispatch op "gemm") on x itself;
 * depthwise convs (group == C == M) take a direct loop (no GEMM); convs with at most
 * CONV_ROWS_MAX_P = 16 output positions per image use the transposed im2col and the
 * dispatch op "linear" (see conv_group_rows); the others are the implicit GEMM over the
 * stride phases (conv_direct above, the gemm variant's `implicit` entry).
 * Not in place.
 *
 * conv_packed: the same convolution with the weight as panels (op pack_panels, kernels.h),
 *   in[1] f32 [group · nrv_panels_floats(M/group, C/group·Πkernel)], 64-byte aligned;
 *   iattr (4 + 5*sr): conv's, then [M, kernel[sr]]; scratch: conv_scratch_bytes (packed).
 *   Every image and group runs the gemm variant's `panels` entry (conv_panels_group), except
 *   with at most CONV_ROWS_MAX_P output positions when the scratch also holds the transposed
 *   im2col rows after the row offsets (roundup64(8·K) + 4·K·P bytes; a pointwise conv needs
 *   none): those rows through the `rows_panels` entry (linear_panels, conv_group_rows). */
static nrv_status conv_run_impl(const nrv_op_args *a, int packed) {
    NRV_TRY(nrv_op_expect(a, 2, 4, 1, -1, 2));
    int64_t sr;
    NRV_TRY(nrv_op_spatial_rank(a, packed ? 4 : 3, packed ? 5 : 4, &sr));
    const nrv_tview *x, *w, *b;
    nrv_tview *y;
    NRV_TRY(nrv_op_conv_operands(a, sr, packed ? 1 : (int)(2 + sr), &x, &w, &b, &y)); /* packed: panels, rank 1 */
    const int64_t *wdims = packed ? a->iattr + 3 + 4 * sr : w->dims; /* [M, (C/group,) kernel...] */

    conv_geom g;
    g.n = x->dims[0];
    g.c = x->dims[1];
    g.m = wdims[0];
    g.group = a->iattr[1];
    const int64_t act = a->iattr[2];
    NRV_TRY(check_act(a, act));
    if (g.group < 1 || g.group > ATTR_MAX || g.c % g.group != 0 || g.m % g.group != 0)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "group %lld must be >= 1 and divide C = %lld and M = %lld",
                           (long long)g.group, (long long)g.c, (long long)g.m);
    g.cg = g.c / g.group;
    g.mg = g.m / g.group;
    if (!packed && w->dims[1] != g.cg)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "weight has %lld input channels, expected C/group = %lld/%lld",
                           (long long)w->dims[1], (long long)g.c, (long long)g.group);
    if (y->dims[0] != g.n || y->dims[1] != g.m)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output is [%lld, %lld, ...], expected [N, M] = [%lld, %lld]",
                           (long long)y->dims[0], (long long)y->dims[1], (long long)g.n, (long long)g.m);
    if (b && (b->rank != 1 || b->dims[0] != g.m))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "bias must be [M] = [%lld] (rank %d, %lld elements)", (long long)g.m,
                           (int)b->rank, (long long)b->numel);
    const nrv_tview *sum = a->n_in > 3 ? a->in[3] : NULL;
    if (sum) {
        NRV_TRY(nrv_op_check_view(a, sum, "sum"));
        NRV_TRY(nrv_op_expect_dtype(a, sum, "sum", NRV_F32));
        NRV_TRY(nrv_op_same_dims(a, sum, "sum", y, "the output"));
        if (sum->numel && sum->data == y->data)
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "sum and the output share their bytes");
    }

    /* spatial axes: (h, w) for sr = 2, (1, w) for sr = 1 */
    int64_t in_[2] = {1, 1}, k_[2] = {1, 1}, o_[2] = {1, 1}, s_[2] = {1, 1}, d_[2] = {1, 1}, pb_[2] = {0, 0};
    g.pointwise = 1;
    for (int i = 0; i < (int)sr; i++) {
        const int ax = (int)(2 - sr) + i; /* slot in the (h, w) arrays */
        const int64_t s = a->iattr[3 + i], d = a->iattr[3 + sr + i];
        const int64_t pb = a->iattr[3 + 2 * sr + i], pe = a->iattr[3 + 3 * sr + i];
        NRV_TRY(check_attr(a, "strides", i, s, 1));
        NRV_TRY(check_attr(a, "dilations", i, d, 1));
        NRV_TRY(check_attr(a, "pads_begin", i, pb, 0));
        NRV_TRY(check_attr(a, "pads_end", i, pe, 0));
        const int64_t k = wdims[packed ? 1 + i : 2 + i];
        if (k < 1) return nrv_op_fail(a, NRV_ERR_SHAPE, "kernel dim %d is %lld, expected > 0", i, (long long)k);
        const int64_t want = conv_out_extent(x->dims[2 + i], k, s, d, pb, pe);
        if (want < 0)
            return nrv_op_fail(a, NRV_ERR_SHAPE,
                               "spatial axis %d: kernel %lld dilated by %lld exceeds padded input %lld+%lld+%lld", i,
                               (long long)k, (long long)d, (long long)x->dims[2 + i], (long long)pb, (long long)pe);
        if (y->dims[2 + i] != want)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "output spatial dim %d is %lld, expected %lld", i,
                               (long long)y->dims[2 + i], (long long)want);
        in_[ax] = x->dims[2 + i];
        k_[ax] = k;
        o_[ax] = want;
        s_[ax] = s;
        d_[ax] = d;
        pb_[ax] = pb;
        if (k != 1 || s != 1 || d != 1 || pb != 0 || pe != 0) g.pointwise = 0;
    }
    g.ih = in_[0], g.iw = in_[1], g.kh = k_[0], g.kw = k_[1], g.oh = o_[0], g.ow = o_[1];
    g.sh = s_[0], g.sw = s_[1], g.dh = d_[0], g.dw = d_[1], g.ph = pb_[0], g.pw = pb_[1];
    if (packed) NRV_TRY(conv_check_panels(a, &g, w)); /* bounds K = C/group·kh·kw by the panels' size */
    if (y->numel == 0) return NRV_OK;
    /* N, M >= 1 from here, so these products are bounded by numel of w (or its panels), y and x */
    g.kdim = g.cg * g.kh * g.kw;
    g.p = g.oh * g.ow;
    g.hw = g.c > 0 ? g.ih * g.iw : 0;
    uint64_t need = 0;
    if (g.iw == 1 && g.kw == 1 && g.ow == 1 && g.pw == 0 && g.ih > 1) {
        /* A [kh, 1] kernel over [H, 1] planes (1-D models exported in 2-D, jax2tf's) is a 1-D
         * conv along H: run it along w, as 1-D convs run, when the scratch has room for that
         * shape (the compiler reserves it: onnx_ops.py conv_scratch). [C, H, 1] is [C, 1, H]
         * in memory and the weight's K order (c, kh) is unchanged; as [H, 1] the direct
         * path's output rows were one column wide (magika's conv: 8.2 -> 6.8 ms, the time of
         * the same conv written 1-D). */
        conv_geom h = g;
        h.iw = g.ih, h.kw = g.kh, h.ow = g.oh, h.sw = g.sh, h.dw = g.dh, h.pw = g.ph;
        h.ih = h.kh = h.oh = h.sh = h.dh = 1, h.ph = 0;
        if (conv_scratch_bytes(&h, packed, &need) == 0 && need <= (uint64_t)a->scratch_bytes) g = h;
    }
    if (conv_scratch_bytes(&g, packed, &need) != 0 || need > (uint64_t)a->scratch_bytes ||
        (need > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, needs %llu (K = %lld, P = %lld)",
                           a->scratch_bytes, (unsigned long long)need,
                           (long long)g.kdim, (long long)g.p);

    const float *xd = x->data, *wd = w->data, *bd = b ? b->data : NULL, *sd = sum ? sum->data : NULL;
    float *yd = y->data, *col = a->scratch;
    const float p0 = a->fattr[0], p1 = a->fattr[1];
    if (packed) {
        const int64_t per_group = nrv_panels_floats(g.mg, g.kdim);
        /* few positions: the transposed im2col rows (after the row offsets' room) on the
         * panels, when the scratch holds them (the compiler reserves it for convs with at most
         * CONV_ROWS_MAX_P positions at the dims' bounds) */
        const uint64_t rows_at = ((uint64_t)g.kdim * 8 + 63) / 64 * 64;
        const int few = conv_use_rows(&g) &&
                        (g.pointwise || rows_at + (uint64_t)g.kdim * (uint64_t)g.p * sizeof(float) <= a->scratch_bytes);
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t gi = 0; gi < g.group; gi++) {
                float *yg = yd + (n * g.m + gi * g.mg) * g.p;
                const float *sg = sd ? sd + (n * g.m + gi * g.mg) * g.p : NULL;
                if (g.cg == 0) { /* no input channel: the bias alone */
                    for (int64_t m = 0; m < g.mg; m++)
                        for (int64_t q = 0; q < g.p; q++) yg[m * g.p + q] = bd ? bd[gi * g.mg + m] : 0.0f;
                    NRV_TRY(nrv_plan_epilogue(a, act, p0, p1, NULL, sg, yg, g.mg * g.p));
                    continue;
                }
                if (few) {
                    conv_group_rows(&g, xd + (n * g.c + gi * g.cg) * g.hw, NULL, wd + gi * per_group,
                                    bd ? bd + gi * g.mg : NULL, (float *)((char *)a->scratch + rows_at), yg, a->pool);
                    NRV_TRY(nrv_plan_epilogue(a, act, p0, p1, NULL, sg, yg, g.mg * g.p));
                    continue;
                }
                conv_panels_group(&g, a, xd + (n * g.c + gi * g.cg) * g.hw, wd + gi * per_group,
                                  bd ? bd + gi * g.mg : NULL, sg, yg, act, p0, p1);
            }
        return NRV_OK;
    }
    const int depthwise = g.cg == 1 && g.mg == 1;
    const int use_rows = !depthwise && conv_use_rows(&g);
    const int bias_done = use_rows;                   /* that path adds the bias itself */
    const int finished = depthwise || (!use_rows && g.cg > 0); /* bias and activation done in the path */
    for (int64_t n = 0; n < g.n; n++) {
        float *yn = yd + n * g.m * g.p;
        const float *sn = sd ? sd + n * g.m * g.p : NULL;
        if (g.cg == 0) {
            memset(yn, 0, (size_t)(g.m * g.p) * sizeof(float)); /* no input channel: bias only */
        } else if (depthwise) { /* with a sum, the activation after it, in a pass of its own */
            conv_depthwise(&g, a, xd + n * g.c * g.hw, wd, bd, yn, sn ? NRV_PLAN_ACT_NONE : act, p0, p1);
            if (sn) NRV_TRY(nrv_plan_epilogue(a, act, p0, p1, NULL, sn, yn, g.m * g.p));
        } else {
            for (int64_t gi = 0; gi < g.group; gi++) {
                const float *xg = xd + (n * g.c + gi * g.cg) * g.hw;
                const float *wg = wd + gi * g.mg * g.kdim;
                float *yg = yn + gi * g.mg * g.p;
                if (use_rows) {
                    conv_group_rows(&g, xg, wg, NULL, bd ? bd + gi * g.mg : NULL, col, yg, a->pool);
                } else {
                    /* blocks of output positions: the product, bias and activation, each
                     * block while it is in cache; pointwise convs read x itself as B */
                    const float *sg = sn ? sn + gi * g.mg * g.p : NULL;
                    conv_gemm_job j = {.wg = wg, .mg = g.mg, .y_stride = g.p, .bias = bd ? bd + gi * g.mg : NULL,
                                       .a = a, .act = act, .p0 = p0, .p1 = p1};
                    if (g.pointwise) {
                        const int64_t step = conv_block_positions(&g);
                        for (int64_t q0 = 0; q0 < g.p; q0 += step) {
                            j.np = g.p - q0 < step ? g.p - q0 : step;
                            j.b = xg + q0, j.ldb = g.p, j.k = g.cg;
                            j.c = j.yg = yg + q0, j.ldc = g.p;
                            j.sum = sg ? sg + q0 : NULL;
                            j.rows = 1;
                            conv_gemm_split(&j, a->pool, 0);
                            nrv_parallel_for(a->pool, j.pieces, conv_gemm_task, &j);
                        }
                        continue;
                    }
                    conv_direct d;
                    conv_direct_shape(&g, &d);
                    int64_t *offs = a->scratch;
                    float *phases = (float *)((char *)a->scratch + ((size_t)g.kdim * 8 + 63) / 64 * 64);
                    float *rowbuf = phases + g.cg * g.sh * g.sw * d.plane;
                    conv_row_offsets(&g, &d, offs);
                    const float *src = conv_phases(&g, &d, xg, phases, a->pool);
                    j.b_row_off = offs, j.k = g.kdim, j.ow = g.ow, j.c_row = d.pw_cols;
                    for (int64_t oy0 = 0; oy0 < g.oh; oy0 += d.block_rows) {
                        j.rows = g.oh - oy0 < d.block_rows ? g.oh - oy0 : d.block_rows;
                        j.np = (j.rows - 1) * d.pw_cols + g.ow;
                        j.b = src + oy0 * d.pw_cols;
                        j.yg = yg + oy0 * g.ow;
                        j.sum = sg ? sg + oy0 * g.ow : NULL;
                        if (d.pw_cols == g.ow || j.rows == 1) /* no junk columns: straight into y */
                            j.c = j.yg, j.ldc = g.p;
                        else j.c = rowbuf, j.ldc = d.block_rows * d.pw_cols;
                        conv_gemm_split(&j, a->pool, j.rows > 1);
                        nrv_parallel_for(a->pool, j.pieces, conv_gemm_task, &j);
                    }
                }
            }
        }
        if (!finished) { /* the GEMM and depthwise paths added bias, sum and activation as they went */
            if (bd && !bias_done) add_bias_rows(yn, bd, g.m, g.p);
            NRV_TRY(nrv_plan_epilogue(a, act, p0, p1, NULL, sn, yn, g.m * g.p));
        }
    }
    return NRV_OK;
}

static nrv_status conv_run(const nrv_op_args *a) { return conv_run_impl(a, 0); }
static nrv_status conv_packed_run(const nrv_op_args *a) { return conv_run_impl(a, 1); }

/* ---- pack_panels: a weight as panels (run once, at compile time, by the compiler's
 * select_conv_panels and select_linear_panels; the layout is kernels.h's, written by
 * nrv_panels_pack).
 *   in[0] w f32 [M, C/group, *kernel] (rank 3 or 4; a linear's [M, K]: rank 2, group 1);
 *   iattr (1): [group], group >= 1 divides M
 *   out[0] f32 [group · nrv_panels_floats(M/group, C/group·Πkernel)]: group g's panels at
 *          g · nrv_panels_floats(...) */
static nrv_status pack_panels_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "weight"));
    const nrv_tview *w = a->in[0];
    nrv_tview *out = a->out[0];
    NRV_TRY(nrv_op_check_view(a, out, "output"));
    NRV_TRY(nrv_op_expect_dtype(a, w, "weight", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, out, "output", NRV_F32));
    const int64_t group = a->iattr[0];
    if (w->rank < 2 || w->rank > 4)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "weight has rank %d, expected 2 to 4", (int)w->rank);
    if (group < 1 || group > ATTR_MAX || w->dims[0] % group != 0)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "group %lld must be >= 1 and divide M = %lld", (long long)group,
                           (long long)w->dims[0]);
    const int64_t mg = w->dims[0] / group, k = mg > 0 ? w->numel / w->dims[0] : 0;
    const int64_t per_group = nrv_panels_floats(mg, k); /* <= numel + 15·k·group: no overflow */
    if (out->rank != 1 || out->dims[0] != group * per_group)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output has %lld floats, expected %lld", (long long)out->numel,
                           (long long)(group * per_group));
    for (int64_t gi = 0; gi < group; gi++)
        nrv_panels_pack((const float *)w->data + gi * mg * k, mg, k, (float *)out->data + gi * per_group);
    return NRV_OK;
}

/* ================================================================== pool */

/* Pooling shared out across threads in ranges of (image, channel) planes. */
typedef struct pool_job {
    const void *x; /* f32, or (max only) u8/i8 codes: code */
    void *y;       /* x's dtype */
    int code;      /* POOL_F32, POOL_U8, POOL_I8 */
    int64_t ih, iw, oh, ow, kh, kw, kind, cip, planes, pieces;
    int64_t s[2], d[2], pb[2], pe[2];
} pool_job;

/* Pooling by bands of output rows. A band's input rows are copied, once, between their
 * padding (the fold's identity: -FLT_MAX for max, +0 for average) into a stack buffer, split
 * into the s0·s1 stride phases P_ab[r][t] = padded[r·s0 + a][t·s1 + b] of the band, each
 * phase row pw floats long. Output (oy, ox) under tap (j, i) then reads phase
 * (j·d0 mod s0, i·d1 mod s1) at row (oy - band start) + j·d0 / s0 and column ox + i·d1 / s1:
 * a fixed offset per tap from the output's own position, so POOL_LANES neighbouring outputs of
 * a row fold each tap from one contiguous run, in registers, with no bounds to test.
 * The terms are folded in the direct loop's order (rows down, then taps across) and the
 * padding adds nothing (max: -FLT_MAX never wins; average: x + 0 = x, and a sum started at +0
 * is never -0), so the bits are the direct loop's, and onnxruntime's. Inception's 3x3
 * stride-1 average pools over 14x14 planes ran at 6.7 ns an output through the direct loop
 * (onnxruntime: 0.5). */
enum { POOL_F32, POOL_U8, POOL_I8 };

/* Max pooling of 8-bit codes (onnxruntime's QOperator format pools uint8 directly) runs the
 * same float fold: the band fill widens the codes exactly, and each output row is narrowed
 * back from a row of floats (an empty window's -FLT_MAX becomes the type's lowest code). */
static inline float pool_code_at(const pool_job *job, const void *plane, int64_t i) {
    return job->code == POOL_U8 ? (float)((const uint8_t *)plane)[i] : (float)((const int8_t *)plane)[i];
}

/* dst[t] = code i0 + t·s of plane, t < n, widened: one loop per type and common stride, so each
 * vectorizes (a per-element type test measured the fill at twice the float pool's time). */
#define POOL_WIDEN(T)                                                      \
    do {                                                                   \
        const T *restrict src = (const T *)plane + i0;                     \
        if (s == 1)                                                        \
            for (int64_t t = 0; t < n; t++) dst[t] = (float)src[t];        \
        else if (s == 2)                                                   \
            for (int64_t t = 0; t < n; t++) dst[t] = (float)src[2 * t];    \
        else                                                               \
            for (int64_t t = 0; t < n; t++) dst[t] = (float)src[t * s];    \
    } while (0)
static void pool_codes_widen(int code, float *restrict dst, const void *plane, int64_t i0, int64_t s, int64_t n) {
    if (code == POOL_U8) POOL_WIDEN(uint8_t);
    else POOL_WIDEN(int8_t);
}
#undef POOL_WIDEN

static void pool_codes_store(const pool_job *job, const float *row, void *plane, int64_t i0, int64_t n) {
    if (job->code == POOL_U8) {
        uint8_t *y = (uint8_t *)plane + i0;
        for (int64_t k = 0; k < n; k++) y[k] = row[k] < 0.0f ? 0 : (uint8_t)row[k];
    } else {
        int8_t *y = (int8_t *)plane + i0;
        for (int64_t k = 0; k < n; k++) y[k] = row[k] < -128.0f ? -128 : (int8_t)row[k];
    }
}

#define POOL_LANES 16
#define POOL_VECS (POOL_LANES / 4)
#define POOL_BAND_FLOATS 8192 /* the band, the lanes' overshoot, the column counts: 32 KiB of stack */
#define POOL_TAPS 256
typedef float pool_v4f __attribute__((vector_size(16)));
typedef int32_t pool_v4i __attribute__((vector_size(16)));

/* x > acc ? x : acc, lane by lane: the direct loop's max (a NaN in x never wins), which is
 * exactly SSE's maxps(x, acc); elsewhere a compare and a blend (NEON's fmax would pass NaN). */
static inline pool_v4f pool_max(pool_v4f x, pool_v4f acc) {
#if defined(__SSE__)
    return __builtin_ia32_maxps(x, acc);
#else
    const pool_v4i take = x > acc;
    return (pool_v4f)(((pool_v4i)x & take) | ((pool_v4i)acc & ~take));
#endif
}

/* POOL_LANES accumulators all set to v (the fold's identity) */
static inline void pool_splat(pool_v4f *acc, float v) {
    for (int k = 0; k < POOL_VECS; k++) acc[k] = (pool_v4f){v, v, v, v};
}

/* one tap of POOL_LANES outputs: src's run folded in (a sum, or the direct loop's max) */
static inline void pool_fold(pool_v4f *acc, const float *src, int average) {
    for (int k = 0; k < POOL_VECS; k++) {
        pool_v4f x;
        memcpy(&x, src + 4 * k, sizeof x);
        acc[k] = average ? acc[k] + x : pool_max(x, acc[k]);
    }
}

/* the first n (<= POOL_LANES) lanes into y: whole vectors when all are outputs */
static inline void pool_store(const pool_v4f *acc, float *y, int64_t n) {
    float out[POOL_LANES];
    memcpy(out, acc, sizeof out);
    if (n >= POOL_LANES) memcpy(y, out, sizeof out); /* a fixed size: vector stores */
    else
        for (int64_t k = 0; k < n; k++) y[k] = out[k];
}

typedef struct pool_band_geom {
    int64_t pw;     /* floats a phase row holds: ceil(width / s1), width the padded columns read */
    int64_t halo;   /* phase rows a window reaches below its output's row: (kh-1)·d0 / s0 */
    int64_t rows;   /* output rows a band holds */
    int64_t phase;  /* floats a phase of the band holds: (rows + halo)·pw */
    int64_t counts; /* where the average's column counts start: after the phases and the lanes' overshoot */
    int64_t vmax;   /* where the separable max's row of column maxima starts (s1 phases of vpw floats) */
    int64_t vpw;    /* pw + POOL_LANES: its phases' length */
    int separable;  /* max with many taps: down the window's rows first, then across (kh + kw per output) */
    int64_t floats; /* all of it: the counts hold ow + POOL_LANES floats (the last lanes read past ow) */
    int64_t taps;
    int32_t off[POOL_TAPS]; /* tap j·kw + i: offset of its phase run from the output's position */
    int32_t across[POOL_TAPS]; /* tap i of the separable max: its offset in the vmax row */
} pool_band_geom;

/* 0 when the geometry does not fit (the direct loop takes it); the bounds also keep every
 * index product far from overflow and the counts exact floats. */
static int pool_band_plan(const pool_job *job, pool_band_geom *g) {
    const int64_t s0 = job->s[0], s1 = job->s[1], d0 = job->d[0], d1 = job->d[1], lim = POOL_BAND_FLOATS;
    /* codes: an output row of floats, then narrowed, in a second buffer of lim floats */
    if (job->kh > POOL_TAPS || job->kw > POOL_TAPS || job->kh * job->kw > POOL_TAPS || s0 >= lim || s1 >= lim ||
        d0 >= lim || d1 >= lim || job->ow >= lim - POOL_LANES)
        return 0;
    const int64_t width = (job->ow - 1) * s1 + (job->kw - 1) * d1 + 1;
    g->pw = (width + s1 - 1) / s1;
    g->halo = (job->kh - 1) * d0 / s0;
    g->vpw = g->pw + POOL_LANES;
    const int64_t per_row = s0 * s1 * g->pw, room = lim - 2 * POOL_LANES - job->ow - s1 * g->vpw;
    if (per_row > room) return 0;
    g->rows = room / per_row - g->halo;
    if (g->rows < 1) return 0;
    if (g->rows > job->oh) g->rows = job->oh;
    g->phase = (g->rows + g->halo) * g->pw;
    g->counts = s0 * s1 * g->phase + POOL_LANES;
    g->vmax = g->counts + job->ow + POOL_LANES;
    g->floats = g->vmax + s1 * g->vpw;
    /* kh·kw folds of an output row against kh·s1 of a phase row and kw of it: measured on
     * 20x20 planes, 5x5 ran 1.15x faster separable, 13x13 2.7x; 3x3 (both ways alike) stays direct */
    g->separable = job->kind == 0 && job->kh > 1 && job->kw > 1 && job->kh * job->kw >= 16;
    g->taps = job->kh * job->kw;
    for (int64_t j = 0; j < job->kh; j++)
        for (int64_t i = 0; i < job->kw; i++) {
            const int64_t a = j * d0 % s0, b = i * d1 % s1;
            g->off[j * job->kw + i] = (int32_t)((a * s1 + b) * g->phase + j * d0 / s0 * g->pw + i * d1 / s1);
            if (j == 0) g->across[i] = (int32_t)(b * g->vpw + i * d1 / s1);
        }
    return 1;
}

/* Every float of the buffer starts as the fold's identity (the columns no input reaches keep
 * it; no stale bits reach a lane), then the average's column counts after the phases. */
static void pool_band_setup(const pool_job *job, const pool_band_geom *g, float *buf) {
    const float empty = job->kind == 1 ? 0.0f : -FLT_MAX;
    for (int64_t c = 0; c < g->floats; c++) buf[c] = empty;
    if (job->kind != 1) return;
    float *col_count = buf + g->counts;
    const int64_t s1 = job->s[1], d1 = job->d[1];
    for (int64_t ox = 0; ox < job->ow; ox++) {
        const int64_t x0 = ox * s1 - job->pb[1];
        int64_t ilo, ihi;
        nrv_valid_range(x0, d1, job->iw, job->kw, &ilo, &ihi);
        col_count[ox] = (float)(job->cip ? count_below(x0, d1, job->iw + job->pe[1], job->kw) : ihi - ilo);
    }
}

/* The phases of band rows [oy0, oy0 + rows + halo) of plane xp (floats, or codes widened). */
static void pool_band_fill(const pool_job *job, const pool_band_geom *g, float *buf, const void *xp, int64_t oy0,
                           int64_t rows) {
    const int64_t s0 = job->s[0], s1 = job->s[1], iw = job->iw;
    const float empty = job->kind == 1 ? 0.0f : -FLT_MAX;
    for (int64_t b = 0; b < s1; b++) {
        int64_t tlo, thi; /* phase columns t with input column t·s1 + b - pb1 inside the row */
        nrv_valid_range(b - job->pb[1], s1, iw, g->pw, &tlo, &thi);
        const int64_t n = thi - tlo;
        for (int64_t a = 0; a < s0; a++)
            for (int64_t r = 0; r < rows + g->halo; r++) {
                const int64_t xi = (oy0 + r) * s0 + a - job->pb[0]; /* input row, or padding */
                float *dst = buf + (a * s1 + b) * g->phase + r * g->pw;
                if (xi < 0 || xi >= job->ih) {
                    for (int64_t t = 0; t < g->pw; t++) dst[t] = empty;
                    continue;
                }
                if (n <= 0) continue;
                const int64_t i0 = xi * iw + tlo * s1 + b - job->pb[1];
                if (job->code != POOL_F32) {
                    pool_codes_widen(job->code, dst + tlo, xp, i0, s1, n);
                    continue;
                }
                const float *src = (const float *)xp + i0;
                if (s1 == 1) memcpy(dst + tlo, src, (size_t)n * sizeof(float));
                else if (s1 == 2) { /* the vector loads read src[2n - 3] at most: inside the row */
                    copy_stride2(dst + tlo, src, n - 1);
                    dst[tlo + n - 1] = src[2 * (n - 1)];
                } else
                    for (int64_t t = 0; t < n; t++) dst[tlo + t] = src[t * s1];
            }
    }
}

static void pool_band_row_max(const pool_job *job, const pool_band_geom *g, float *buf, int64_t ry, float *yr) {
    const int64_t s1 = job->s[1], ow = job->ow;
    float *vmax = buf + g->vmax; /* the row of column maxima, in this task's buffer */
    for (int64_t b = 0; b < s1; b++)
        for (int64_t t0 = 0; t0 < g->pw; t0 += POOL_LANES) {
            pool_v4f acc[POOL_VECS];
            pool_splat(acc, -FLT_MAX);
            for (int64_t j = 0; j < job->kh; j++) /* tap (j, 0) */
                pool_fold(acc, buf + g->off[j * job->kw] + b * g->phase + ry * g->pw + t0, 0);
            memcpy(vmax + b * g->vpw + t0, acc, sizeof acc);
        }
    for (int64_t ox0 = 0; ox0 < ow; ox0 += POOL_LANES) {
        pool_v4f acc[POOL_VECS];
        pool_splat(acc, -FLT_MAX);
        for (int64_t i = 0; i < job->kw; i++) pool_fold(acc, vmax + g->across[i] + ox0, 0);
        pool_store(acc, yr + ox0, ow - ox0);
    }
}

/* One plane by bands. Codes (rowf != NULL): each output row is folded into rowf, then
 * narrowed into y's plane yp. */
static inline __attribute__((always_inline)) void pool_band_plane(const pool_job *job, const pool_band_geom *g,
                                                                  float *buf, const void *xp, void *yp,
                                                                  float *rowf, const int average) {
    const int64_t oh = job->oh, ow = job->ow, taps = g->taps;
    const float empty = average ? 0.0f : -FLT_MAX;
    const float *col_count = buf + g->counts;
    const pool_v4f ones = {1.0f, 1.0f, 1.0f, 1.0f};
    for (int64_t oy0 = 0; oy0 < oh; oy0 += g->rows) {
        const int64_t rows = oh - oy0 < g->rows ? oh - oy0 : g->rows;
        pool_band_fill(job, g, buf, xp, oy0, rows);
        for (int64_t ry = 0; ry < rows; ry++) {
            const int64_t oy = oy0 + ry, y0 = oy * job->s[0] - job->pb[0];
            float row_count = 1.0f;
            if (average) {
                int64_t jlo, jhi;
                nrv_valid_range(y0, job->d[0], job->ih, job->kh, &jlo, &jhi);
                row_count = (float)(job->cip ? count_below(y0, job->d[0], job->ih + job->pe[0], job->kh) : jhi - jlo);
            }
            float *yr = rowf ? rowf : (float *)yp + oy * ow;
            if (!average && g->separable) {
                pool_band_row_max(job, g, buf, ry, yr);
                if (rowf) pool_codes_store(job, rowf, yp, oy * ow, ow);
                continue;
            }
            for (int64_t ox0 = 0; ox0 < ow; ox0 += POOL_LANES) {
                const float *at = buf + ry * g->pw + ox0;
                pool_v4f acc[POOL_VECS];
                pool_splat(acc, empty);
                for (int64_t t = 0; t < taps; t++) pool_fold(acc, at + g->off[t], average);
                if (average) /* sum / (rows · columns): exact floats, so one rounding, as the direct loop's */
                    for (int v = 0; v < POOL_VECS; v++) {
                        pool_v4f cols;
                        memcpy(&cols, col_count + ox0 + 4 * v, sizeof cols);
                        const pool_v4f cnt = row_count * cols;
                        const pool_v4i some = cnt > 0.0f; /* an empty window gives 0 */
                        const pool_v4f div = (pool_v4f)(((pool_v4i)cnt & some) | ((pool_v4i)ones & ~some));
                        acc[v] = (pool_v4f)((pool_v4i)(acc[v] / div) & some);
                    }
                pool_store(acc, yr + ox0, ow - ox0);
            }
            if (rowf) pool_codes_store(job, rowf, yp, oy * ow, ow);
        }
    }
}

static void pool_band_max(const pool_job *job, const pool_band_geom *g, float *buf, const void *xp, void *yp,
                          float *rowf) {
    pool_band_plane(job, g, buf, xp, yp, rowf, 0);
}
static void pool_band_average(const pool_job *job, const pool_band_geom *g, float *buf, const void *xp, void *yp,
                              float *rowf) {
    pool_band_plane(job, g, buf, xp, yp, rowf, 1);
}

/* Max pools of dilation 1, planes [pl0, pl1), through the dispatched kernel "maxpool"
 * (separable, full vector width, its own padding) when a vector variant runs (its scalar
 * reference is the definition, slower than the band path below). bench/RESULTS.md, stop 31. */
static void pool_max_planes(const pool_job *job, int64_t pl0, int64_t pl1) {
    const int dtype = job->code == POOL_U8 ? NRV_U8 : job->code == POOL_I8 ? NRV_I8 : NRV_F32;
    const int64_t esz = job->code == POOL_F32 ? (int64_t)sizeof(float) : 1;
    const nrv_dw_geom g = {.ih = job->ih, .iw = job->iw, .oh = job->oh, .ow = job->ow, .kh = job->kh, .kw = job->kw,
                           .sh = job->s[0], .sw = job->s[1], .dh = 1, .dw = 1, .ph = job->pb[0], .pw = job->pb[1]};
    nrv_kernel_get(NRV_OP_MAXPOOL).maxpool(dtype, &g, pl1 - pl0, (const char *)job->x + pl0 * g.ih * g.iw * esz,
                                           (char *)job->y + pl0 * g.oh * g.ow * esz);
}

static void pool_task(void *ctx, int64_t t) {
    const pool_job *job = ctx;
    const int64_t ih = job->ih, iw = job->iw, oh = job->oh, ow = job->ow, kh = job->kh, kw = job->kw;
    const int64_t kind = job->kind, cip = job->cip;
    const int64_t *s_ = job->s, *d_ = job->d, *pb_ = job->pb, *pe_ = job->pe;
    const int64_t pl0 = t * job->planes / job->pieces, pl1 = (t + 1) * job->planes / job->pieces;
    const size_t esz = job->code == POOL_F32 ? sizeof(float) : 1;
    if (kind == 0 && d_[0] == 1 && d_[1] == 1 && strcmp(nrv_kernel_selected("maxpool"), "ref") != 0) {
        pool_max_planes(job, pl0, pl1);
        return;
    }
    pool_band_geom g;
    if (pool_band_plan(job, &g)) {
        float buf[POOL_BAND_FLOATS];
        float rowf[POOL_BAND_FLOATS]; /* codes: an output row (ow < its size, pool_band_plan) */
        pool_band_setup(job, &g, buf);
        for (int64_t pl = pl0; pl < pl1; pl++)
            (kind == 1 ? pool_band_average : pool_band_max)(job, &g, buf, (const char *)job->x + pl * ih * iw * esz,
                                                          (char *)job->y + pl * oh * ow * esz,
                                                          job->code == POOL_F32 ? NULL : rowf);
        return;
    }
    for (int64_t pl = pl0; pl < pl1; pl++) { /* the direct loop: windows too wide or too many taps for the band */
        const void *xv = (const char *)job->x + pl * ih * iw * esz;
        void *yv = (char *)job->y + pl * oh * ow * esz;
        const float *xp = xv; /* f32 planes */
        float *yp = yv;
        for (int64_t oy = 0; oy < oh; oy++) {
            const int64_t y0 = oy * s_[0] - pb_[0];
            int64_t jlo, jhi;
            nrv_valid_range(y0, d_[0], ih, kh, &jlo, &jhi);
            const int64_t npad_h = count_below(y0, d_[0], ih + pe_[0], kh);
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t x0 = ox * s_[1] - pb_[1];
                int64_t ilo, ihi;
                nrv_valid_range(x0, d_[1], iw, kw, &ilo, &ihi);
                float r;
                if (kind == 0) {
                    float mx = -FLT_MAX;
                    for (int64_t j = jlo; j < jhi; j++) {
                        const int64_t row = (y0 + j * d_[0]) * iw;
                        for (int64_t i = ilo; i < ihi; i++) {
                            const float v = job->code == POOL_F32 ? xp[row + x0 + i * d_[1]]
                                                                  : pool_code_at(job, xv, row + x0 + i * d_[1]);
                            mx = v > mx ? v : mx;
                        }
                    }
                    if (job->code != POOL_F32) {
                        pool_codes_store(job, &mx, yv, oy * ow + ox, 1);
                        continue;
                    }
                    r = mx;
                } else {
                    float sum = 0.0f;
                    for (int64_t j = jlo; j < jhi; j++) {
                        const float *xr = xp + (y0 + j * d_[0]) * iw;
                        for (int64_t i = ilo; i < ihi; i++) sum += xr[x0 + i * d_[1]];
                    }
                    const int64_t cnt = cip ? npad_h * count_below(x0, d_[1], iw + pe_[1], kw)
                                            : (jhi - jlo) * (ihi - ilo);
                    r = cnt > 0 ? sum / (float)cnt : 0.0f;
                }
                yp[oy * ow + ox] = r;
            }
        }
    }
}

/* pool: max or average pooling over 1 or 2 spatial axes.
 *   in[0]  x f32 [N, C, *spatial]         sr = 1 or 2 spatial axes; max also of u8 / i8 codes
 *   out[0] y [N, C, *out_spatial], x's dtype; out_spatial computed by the compiler (ceil_mode
 *          included); accepted when between the floor and the ceil of
 *          (in + pads_begin + pads_end - dilation*(kernel-1) - 1) / stride, plus 1; a window
 *          larger than the padded input, by less than a stride, gives 1 (ceil_mode).
 *   iattr (3 + 5*sr): [kind, sr, count_include_pad, kernel[sr], strides[sr], dilations[sr],
 *                      pads_begin[sr], pads_end[sr]]
 *          kind: 0 = max, 1 = average; count_include_pad: 0 or 1 (average only);
 *          kernel, strides, dilations >= 1; 0 <= pads < kernel (onnxruntime's rule).
 *   fattr: none. scratch: none.
 * Windows running past the padded end (ceil_mode) are clipped to it. Max ignores padding.
 * Average divides the sum of the real (non-pad) elements by: their number
 * (count_include_pad = 0), or the number of window positions inside
 * [-pads_begin, in + pads_end) (count_include_pad = 1; onnxruntime's rule).
 * A window holding no real element (possible only through dilation or ceil_mode) gives
 * -FLT_MAX for max (codes: the type's lowest) and 0 for average. */
static nrv_status pool_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    if (a->n_iattr < 3)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes, expected 3 + 5*sr", a->n_iattr);
    const int64_t kind = a->iattr[0], sr = a->iattr[1], cip = a->iattr[2];
    if (sr != 1 && sr != 2)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%lld spatial axes, expected 1 or 2", (long long)sr);
    if (a->n_iattr != 3 + 5 * sr)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes, expected %lld", a->n_iattr,
                           (long long)(3 + 5 * sr));
    if (kind != 0 && kind != 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "kind %lld, expected 0 (max) or 1 (average)", (long long)kind);
    if (cip != 0 && cip != 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "count_include_pad %lld, expected 0 or 1", (long long)cip);
    NRV_TRY(nrv_op_require_input(a, 0));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    const int code = x->dtype == NRV_U8 ? POOL_U8 : x->dtype == NRV_I8 ? POOL_I8 : POOL_F32;
    if (code == POOL_F32) NRV_TRY(nrv_op_expect_dtype(a, x, "input", NRV_F32));
    else if (kind != 0)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "average pooling of %s codes is not defined (max only)",
                           nrv_dtype_str((nrv_dtype)x->dtype));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", (nrv_dtype)x->dtype));
    const int rank = (int)(2 + sr);
    if (x->rank != rank || y->rank != rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "ranks x %d, y %d; expected %d for %lld spatial axes", (int)x->rank,
                           (int)y->rank, rank, (long long)sr);
    if (y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output is [%lld, %lld, ...], input [%lld, %lld, ...]",
                           (long long)y->dims[0], (long long)y->dims[1], (long long)x->dims[0], (long long)x->dims[1]);
    /* (h, w) slots; sr = 1 leaves h as a trivial axis */
    int64_t in_[2] = {1, 1}, o_[2] = {1, 1}, k_[2] = {1, 1}, s_[2] = {1, 1}, d_[2] = {1, 1}, pb_[2] = {0, 0},
            pe_[2] = {0, 0};
    for (int i = 0; i < (int)sr; i++) {
        const int ax = (int)(2 - sr) + i;
        const int64_t k = a->iattr[3 + i], s = a->iattr[3 + sr + i], d = a->iattr[3 + 2 * sr + i];
        const int64_t pb = a->iattr[3 + 3 * sr + i], pe = a->iattr[3 + 4 * sr + i];
        NRV_TRY(check_attr(a, "kernel", i, k, 1));
        NRV_TRY(check_attr(a, "strides", i, s, 1));
        NRV_TRY(check_attr(a, "dilations", i, d, 1));
        NRV_TRY(check_attr(a, "pads_begin", i, pb, 0));
        NRV_TRY(check_attr(a, "pads_end", i, pe, 0));
        const int64_t span = window_span(k, d); /* <= 2^60: no overflow */
        if (pb >= k || pe >= k)
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "pads %lld, %lld on axis %d must be below the kernel size %lld",
                               (long long)pb, (long long)pe, i, (long long)k);
        const int64_t in = x->dims[2 + i], padded = in + pb + pe;
        const int64_t o = y->dims[2 + i];
        if (padded < span) { /* ceil_mode alone gives one window, when the short fall is under a stride */
            if (span - padded >= s || o != 1)
                return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %d: window %lld exceeds padded input %lld", i,
                                   (long long)span, (long long)padded);
        } else {
            const int64_t lo = (padded - span) / s + 1, hi = (padded - span + s - 1) / s + 1;
            if (o < lo || o > hi)
                return nrv_op_fail(a, NRV_ERR_SHAPE,
                                   "output spatial dim %d is %lld, expected %lld (floor) or %lld (ceil)", i,
                                   (long long)o, (long long)lo, (long long)hi);
        }
        in_[ax] = in, o_[ax] = o, k_[ax] = k, s_[ax] = s, d_[ax] = d, pb_[ax] = pb, pe_[ax] = pe;
    }
    if (y->numel == 0) return NRV_OK;
    pool_job j = {.x = x->data, .y = y->data, .code = code, .ih = in_[0], .iw = in_[1], .oh = o_[0], .ow = o_[1],
                  .kh = k_[0], .kw = k_[1], .kind = kind, .cip = cip};
    for (int i = 0; i < 2; i++) j.s[i] = s_[i], j.d[i] = d_[i], j.pb[i] = pb_[i], j.pe[i] = pe_[i];
    const int64_t planes = x->dims[0] * x->dims[1];
    j.planes = planes;
    j.pieces = nrv_plan_pieces(a->pool, y->numel * j.kh * j.kw, 1 << 16, planes);
    nrv_parallel_for(a->pool, j.pieces, pool_task, &j);
    return NRV_OK;
}

/* ================================================================== global_pool */

typedef double gp_v2d __attribute__((vector_size(16)));

/* Σ x[i]: runs of 8 values per lane added in float across 16 lanes (4 vectors), each run's
 * sum then added in double. A single running sum was one dependent add per element (the SE
 * blocks' global pools of MobileNetV3 took 1.8 ms of 25, onnxruntime 0.27); converting every
 * element to double before adding still cost a conversion per two elements (960 x 20x20:
 * 97 us, against 38 for a Mul over the same tensor). A run's float sum is off by at most
 * 7 roundings of 8 values' magnitude: far below the float result's own rounding for any
 * plane that does not cancel to near zero. */
static double global_sum(const float *x, int64_t n) {
    enum { RUN = 8, STEP = 16 };
    gp_v2d wide[8] = {{0, 0}};
    int64_t i = 0;
    while (i + STEP <= n) { /* a run of up to RUN steps */
        pool_v4f acc[4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
        for (int r = 0; r < RUN && i + STEP <= n; r++, i += STEP)
            for (int k = 0; k < 4; k++) {
                pool_v4f v;
                memcpy(&v, x + i + 4 * k, sizeof v);
                acc[k] += v;
            }
        for (int k = 0; k < 4; k++) {
            wide[2 * k] += __builtin_convertvector(__builtin_shufflevector(acc[k], acc[k], 0, 1), gp_v2d);
            wide[2 * k + 1] += __builtin_convertvector(__builtin_shufflevector(acc[k], acc[k], 2, 3), gp_v2d);
        }
    }
    gp_v2d t = {0, 0};
    for (int k = 0; k < 8; k++) t += wide[k];
    double s = t[0] + t[1];
    for (; i < n; i++) s += x[i];
    return s;
}

/* The scalar fold mx = x[i] > mx ? x[i] : mx from mx = x[0], in 8 lanes: a NaN never wins
 * but in x[0], which every lane starts from, so the result is the scalar loop's. */
static float global_max(const float *x, int64_t n) {
    pool_v4f acc[2] = {{x[0], x[0], x[0], x[0]}, {x[0], x[0], x[0], x[0]}};
    int64_t i = 1;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 2; k++) {
            pool_v4f v;
            memcpy(&v, x + i + 4 * k, sizeof v);
            acc[k] = pool_max(v, acc[k]);
        }
    float lanes[8], mx = x[0];
    memcpy(lanes, acc, sizeof lanes);
    for (int k = 0; k < 8; k++) mx = lanes[k] > mx ? lanes[k] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

typedef struct global_pool_job {
    const float *x;
    float *y;
    int64_t sp, planes, kind, pieces;
} global_pool_job;

static void global_pool_task(void *ctx, int64_t t) {
    const global_pool_job *j = ctx;
    for (int64_t pl = t * j->planes / j->pieces; pl < (t + 1) * j->planes / j->pieces; pl++) {
        const float *xp = j->x + pl * j->sp;
        j->y[pl] = j->kind == 0 ? global_max(xp, j->sp) : (float)(global_sum(xp, j->sp) / (double)j->sp);
    }
}

/* global_pool: max or average over all spatial positions.
 *   in[0]  x f32 [N, C, *spatial]      spatial rank >= 1, at least one position
 *   out[0] y f32 [N, C, 1, ...]        same rank as x, every spatial dim 1
 *   iattr (1): [kind]   0 = max, 1 = average (summed in double)
 *   fattr: none. scratch: none. */
static nrv_status global_pool_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 1, -1));
    const int64_t kind = a->iattr[0];
    if (kind != 0 && kind != 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "kind %lld, expected 0 (max) or 1 (average)", (long long)kind);
    NRV_TRY(nrv_op_require_input(a, 0));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, x, "input", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    if (x->rank < 3 || y->rank != x->rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "ranks x %d, y %d; expected equal and >= 3", (int)x->rank, (int)y->rank);
    if (y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output is [%lld, %lld, ...], input [%lld, %lld, ...]",
                           (long long)y->dims[0], (long long)y->dims[1], (long long)x->dims[0], (long long)x->dims[1]);
    for (int i = 2; i < y->rank; i++)
        if (y->dims[i] != 1)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "output dim %d is %lld, expected 1", i, (long long)y->dims[i]);
    const int64_t planes = x->dims[0] * x->dims[1], sp = nrv_dims_product(x->dims, 2, x->rank);
    if (planes == 0) return NRV_OK;
    if (sp == 0) return nrv_op_fail(a, NRV_ERR_SHAPE, "empty spatial extent: nothing to pool");
    global_pool_job j = {x->data, y->data, sp, planes, kind,
                         nrv_plan_pieces(a->pool, planes * sp, 1 << 16, planes)};
    nrv_parallel_for(a->pool, j.pieces, global_pool_task, &j);
    return NRV_OK;
}

/* ================================================================== channel_affine */

/* Shared check of [C] per-channel parameter vectors. */
static nrv_status check_channel_vec(const nrv_op_args *a, const nrv_tview *v, const char *what, int64_t c) {
    NRV_TRY(nrv_op_expect_dtype(a, v, what, NRV_F32));
    if (v->rank != 1 || v->dims[0] != c)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "%s must be [C] = [%lld] (rank %d, %lld elements)", what, (long long)c,
                           (int)v->rank, (long long)v->numel);
    return NRV_OK;
}

/* Shared check of x [N, C, ...] against y of the same shape. */
static nrv_status check_same_shape(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, int min_rank) {
    if (x->rank < min_rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "input rank %d, expected >= %d", (int)x->rank, min_rank);
    int same = y->rank == x->rank;
    for (int i = 0; same && i < x->rank; i++) same = y->dims[i] == x->dims[i];
    if (!same) return nrv_op_fail(a, NRV_ERR_SHAPE, "output shape differs from the input's");
    return NRV_OK;
}

/* channel_affine: y = act(x * scale[c] + shift[c]) (BatchNormalization in inference mode
 * that could not be folded into a conv).
 *   in[0]  x     f32 [N, C, *rest]   rank >= 2
 *   in[1]  scale f32 [C]
 *   in[2]  shift f32 [C]
 *   out[0] y     f32, same shape as x; in place ok (y may be x)
 *   iattr (1): [act]   nrv_plan_act code
 *   fattr (2): [p0, p1] activation parameters (as conv)
 *   scratch: none. */
static nrv_status channel_affine_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, 1, 2));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    const int64_t act = a->iattr[0];
    NRV_TRY(check_act(a, act));
    NRV_TRY(nrv_op_expect_dtype(a, x, "input", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    NRV_TRY(check_same_shape(a, x, y, 2));
    const int64_t n = x->dims[0], c = x->dims[1], rest = nrv_dims_product(x->dims, 2, x->rank);
    NRV_TRY(check_channel_vec(a, a->in[1], "scale", c));
    NRV_TRY(check_channel_vec(a, a->in[2], "shift", c));
    if (y->numel == 0) return NRV_OK;
    const float *xd = x->data, *sc = a->in[1]->data, *sh = a->in[2]->data;
    float *yd = y->data;
    for (int64_t in = 0; in < n; in++) {
        for (int64_t ic = 0; ic < c; ic++) {
            const float *xp = xd + (in * c + ic) * rest;
            float *yp = yd + (in * c + ic) * rest;
            const float s = sc[ic], t = sh[ic];
            for (int64_t i = 0; i < rest; i++) yp[i] = xp[i] * s + t;
        }
        NRV_TRY(nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], yd + in * c * rest, c * rest));
    }
    return NRV_OK;
}

/* ================================================================== instancenorm */

/* instancenorm: per (n, c), y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c], mean and
 * population variance over the positions of that (n, c), accumulated in double.
 *   in[0]  x     f32 [N, C, *rest]   rank >= 2 (ONNX: >= 3)
 *   in[1]  scale f32 [C]
 *   in[2]  bias  f32 [C]
 *   out[0] y     f32, same shape as x (the statistics are taken before y is written, so y
 *                may be x)
 *   iattr: none. fattr (1): [eps], eps >= 0. scratch: none. */
/* Σ x[i] (squares = 0) or Σ (x[i] - shift)² (squares = 1) in double, over 8 independent
 * accumulators: one running sum is a chain of dependent adds (~4 cycles each), eight let
 * the adds overlap (and vectorise). */
static double sum_f64(const float *x, int64_t n, double shift, int squares) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            const double v = (double)x[i + k] - shift;
            acc[k] += squares ? v * v : v;
        }
    double total = 0.0;
    for (; i < n; i++) {
        const double v = (double)x[i] - shift;
        total += squares ? v * v : v;
    }
    for (int k = 0; k < 8; k++) total += acc[k];
    return total;
}

static nrv_status instancenorm_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, 0, 1));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    const float eps = a->fattr[0];
    if (!(eps >= 0.0f) || isinf(eps))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "epsilon %g, expected a finite value >= 0", (double)eps);
    NRV_TRY(nrv_op_expect_dtype(a, x, "input", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    NRV_TRY(check_same_shape(a, x, y, 2));
    const int64_t n = x->dims[0], c = x->dims[1], rest = nrv_dims_product(x->dims, 2, x->rank);
    NRV_TRY(check_channel_vec(a, a->in[1], "scale", c));
    NRV_TRY(check_channel_vec(a, a->in[2], "bias", c));
    if (y->numel == 0) return NRV_OK;
    const float *xd = x->data, *sc = a->in[1]->data, *bi = a->in[2]->data;
    float *yd = y->data;
    for (int64_t in = 0; in < n; in++) {
        for (int64_t ic = 0; ic < c; ic++) {
            const float *xp = xd + (in * c + ic) * rest;
            float *yp = yd + (in * c + ic) * rest;
            const double mean = sum_f64(xp, rest, 0.0, 0) / (double)rest;
            const double rstd = 1.0 / sqrt(sum_f64(xp, rest, mean, 1) / (double)rest + (double)eps);
            /* (x - mean) first: folding the mean into the shift cancels catastrophically
             * when the variance is small next to eps */
            const float mul = (float)(rstd * sc[ic]), mf = (float)mean, add = bi[ic];
            for (int64_t i = 0; i < rest; i++) yp[i] = (xp[i] - mf) * mul + add;
        }
    }
    return NRV_OK;
}

/* ================================================================== pad */

typedef struct pad_ctx {
    int rank;
    int mode;
    size_t es;                          /* element size in bytes */
    int64_t lo[NRV_PLAN_MAX_RANK];      /* first x index kept (negative pads_begin crop) */
    int64_t cd[NRV_PLAN_MAX_RANK];      /* x extent kept after cropping */
    int64_t pb[NRV_PLAN_MAX_RANK];      /* positive part of pads_begin */
    int64_t xs[NRV_PLAN_MAX_RANK];      /* x stride of axis, in elements */
    int64_t ys[NRV_PLAN_MAX_RANK];      /* y stride of axis, in elements */
    int64_t yd[NRV_PLAN_MAX_RANK];      /* y dims */
    unsigned char value[8];             /* the constant, in y's dtype */
} pad_ctx;

/* Index into the kept (cropped) range [0, cd) that pad position j (< 0 or >= cd) copies,
 * for reflect (1), edge (2) and wrap (3). Validation guarantees the result is in range. */
static inline int64_t pad_source(int mode, int64_t j, int64_t cd) {
    if (mode == 1) return j < 0 ? -j : 2 * (cd - 1) - j;
    if (mode == 3) return ((j % cd) + cd) % cd;
    return j < 0 ? 0 : cd - 1;
}

/* Fills n elements at dst with the constant (copies of doubling size). */
static void pad_fill(const pad_ctx *p, unsigned char *dst, int64_t n) {
    if (n <= 0) return;
    const size_t total = (size_t)n * p->es;
    memcpy(dst, p->value, p->es);
    size_t done = p->es;
    while (done < total) {
        const size_t chunk = done < total - done ? done : total - done;
        memcpy(dst + done, dst, chunk);
        done += chunk;
    }
}

/* Innermost axis, reflect or edge: y[o] for o outside the kept run [pb, pb + cd) copies the
 * element it mirrors (es a literal at the f32 call: the copies inline to moves). */
static inline __attribute__((always_inline)) void pad_border(unsigned char *dst, int64_t pb, int64_t cd, int64_t yd,
                                                             int mode, size_t es) {
    for (int64_t o = 0; o < pb; o++)
        memcpy(dst + (size_t)o * es, dst + (size_t)(pb + pad_source(mode, o - pb, cd)) * es, es);
    for (int64_t o = pb + cd; o < yd; o++)
        memcpy(dst + (size_t)o * es, dst + (size_t)(pb + pad_source(mode, o - pb, cd)) * es, es);
}

static void pad_axis(const pad_ctx *p, int axis, const unsigned char *src, unsigned char *dst) {
    const size_t es = p->es;
    const int64_t cd = p->cd[axis], pb = p->pb[axis], yd = p->yd[axis];
    const unsigned char *s0 = src + (size_t)(p->lo[axis] * p->xs[axis]) * es;
    if (axis == p->rank - 1) {
        /* innermost: the kept run is contiguous in x and in y */
        if (cd > 0) memcpy(dst + (size_t)pb * es, s0, (size_t)cd * es);
        if (p->mode == 0) {
            pad_fill(p, dst, pb);
            pad_fill(p, dst + (size_t)(pb + cd) * es, yd - pb - cd);
        } else if (es == 4) { /* f32 (the VAD's reflect pad): element copies of a literal size */
            pad_border(dst, pb, cd, yd, p->mode, 4);
        } else {
            pad_border(dst, pb, cd, yd, p->mode, es);
        }
        return;
    }
    /* outer axis: build the kept slices, then make each pad slice from the constant or
     * from a copy of the finished slice it mirrors */
    const size_t ybytes = (size_t)p->ys[axis] * es, xbytes = (size_t)p->xs[axis] * es;
    for (int64_t j = 0; j < cd; j++) pad_axis(p, axis + 1, s0 + (size_t)j * xbytes, dst + (size_t)(pb + j) * ybytes);
    for (int64_t o = 0; o < yd; o++) {
        if (o == pb && cd > 0) o = pb + cd; /* skip the kept slices */
        if (o >= yd) break;
        unsigned char *d = dst + (size_t)o * ybytes;
        if (p->mode == 0) pad_fill(p, d, p->ys[axis]);
        else memcpy(d, dst + (size_t)(pb + pad_source(p->mode, o - pb, cd)) * ybytes, ybytes);
    }
}

/* Converts the pad constant to dtype dt (bytes into out); 0 for an unsupported dtype. */
static int pad_value(nrv_dtype dt, float v, unsigned char out[8]) {
    const double d = isnan(v) ? 0.0 : (double)v; /* NaN only survives in float dtypes */
    switch (dt) {
    case NRV_F32: memcpy(out, &v, 4); return 1;
    case NRV_F64: { const double f = v; memcpy(out, &f, 8); return 1; }
    case NRV_F16: { const uint16_t h = nrv_float_to_half(v); memcpy(out, &h, 2); return 1; }
    case NRV_I8: {
        const int8_t i = (int8_t)(d < -128.0 ? -128.0 : d > 127.0 ? 127.0 : d);
        memcpy(out, &i, 1);
        return 1;
    }
    case NRV_U8: {
        const uint8_t u = (uint8_t)(d < 0.0 ? 0.0 : d > 255.0 ? 255.0 : d);
        memcpy(out, &u, 1);
        return 1;
    }
    case NRV_BOOL: { const uint8_t u = v != 0.0f; memcpy(out, &u, 1); return 1; }
    case NRV_I32: {
        const int32_t i = (int32_t)(d < -2147483648.0 ? -2147483648.0 : d > 2147483647.0 ? 2147483647.0 : d);
        memcpy(out, &i, 4);
        return 1;
    }
    case NRV_I64: {
        /* 2^63 is not representable as int64: clamp just below it */
        const int64_t i = d <= -9223372036854775808.0  ? INT64_MIN
                          : d >= 9223372036854775808.0 ? INT64_MAX
                                                       : (int64_t)d;
        memcpy(out, &i, 8);
        return 1;
    }
    default: return 0;
    }
}

/* pad: constant / reflect / edge / wrap padding of any rank and dtype; negative pads crop.
 *   in[0]  x any dtype, rank r
 *   out[0] y same dtype, rank r, dims[i] = x.dims[i] + pads_begin[i] + pads_end[i] (>= 0)
 *   iattr (2 + 2*r): [mode, r, pads_begin[r], pads_end[r]], or (2): [mode, r] with the pads
 *          in dattr (2*r, evaluated per run: pads that follow the sizes)
 *          mode: 0 = constant, 1 = reflect (mirror excluding the edge), 2 = edge,
 *          3 = wrap (the far end repeats: as many times as the pad needs)
 *   fattr (1): [value], the constant (mode 0), converted to x's dtype (integers: truncated
 *          toward zero and clamped to the dtype's range; bool: value != 0)
 *   scratch: none.
 * Negative pads first crop x (onnxruntime's order); reflect, edge and wrap then mirror /
 * repeat the cropped extent, which must be > the pad on each side for reflect and > 0 for
 * edge and wrap where that axis gets a positive pad (else NRV_ERR_INVALID_ARG).
 * Rows of the innermost axis are copied with memcpy, pad elements one by one; pad slices
 * of outer axes are copies of the finished slices they mirror. Not in place. */
static nrv_status pad_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, 1));
    if (a->n_iattr < 2)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes, expected 2 + 2*rank", a->n_iattr);
    const int64_t mode = a->iattr[0], r = a->iattr[1];
    if (mode < 0 || mode > 3)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "mode %lld, expected 0 (constant), 1 (reflect), 2 (edge) or "
                           "3 (wrap)", (long long)mode);
    NRV_TRY(nrv_op_require_input(a, 0));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    if (r != x->rank || r != y->rank || r < 0 || r > NRV_PLAN_MAX_RANK)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "rank attribute %lld, x rank %d, y rank %d", (long long)r, (int)x->rank,
                           (int)y->rank);
    const int64_t *pads = a->n_iattr == 2 + 2 * r ? a->iattr + 2 : a->n_iattr == 2 && a->n_dattr == 2 * r ? a->dattr : NULL;
    if (!pads)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes and %d run-time ones, expected %lld pads",
                           a->n_iattr, a->n_dattr, (long long)(2 * r));
    if (y->dtype != x->dtype)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "output is %s, input %s", nrv_dtype_str((nrv_dtype)y->dtype),
                           nrv_dtype_str((nrv_dtype)x->dtype));
    pad_ctx p;
    memset(&p, 0, sizeof p);
    p.rank = (int)r;
    p.mode = (int)mode;
    p.es = nrv_dtype_size((nrv_dtype)x->dtype);
    if (p.es == 0 || !pad_value((nrv_dtype)x->dtype, a->fattr[0], p.value))
        return nrv_op_fail(a, NRV_ERR_DTYPE, "unsupported dtype %s", nrv_dtype_str((nrv_dtype)x->dtype));
    for (int i = 0; i < p.rank; i++) {
        const int64_t pb = pads[i], pe = pads[r + i], xd = x->dims[i];
        int64_t want;
        if (__builtin_add_overflow(xd, pb, &want) || __builtin_add_overflow(want, pe, &want) || want < 0 ||
            y->dims[i] != want)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %d: output dim %lld, expected %lld %+lld %+lld", i,
                               (long long)y->dims[i], (long long)xd, (long long)pb, (long long)pe);
        p.lo[i] = pb < 0 ? -pb : 0;
        p.pb[i] = pb > 0 ? pb : 0;
        const int64_t pep = pe > 0 ? pe : 0;
        p.cd[i] = want - p.pb[i] - pep; /* >= 0: lo + cd <= xd since want >= 0 */
        if (p.cd[i] < 0)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %d: pads %lld, %lld crop more than the dim %lld", i,
                               (long long)pb, (long long)pe, (long long)xd);
        p.yd[i] = want;
        if (mode == 1 && ((p.pb[i] > 0 && p.pb[i] >= p.cd[i]) || (pep > 0 && pep >= p.cd[i])))
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "reflect: pads %lld, %lld on axis %d must be below the dim %lld",
                               (long long)p.pb[i], (long long)pep, i, (long long)p.cd[i]);
        if ((mode == 2 || mode == 3) && p.cd[i] == 0 && (p.pb[i] > 0 || pep > 0))
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%s: axis %d is empty and cannot be padded",
                               mode == 2 ? "edge" : "wrap", i);
    }
    if (y->numel == 0) return NRV_OK;
    if (p.rank == 0) {
        memcpy(y->data, x->data, p.es);
        return NRV_OK;
    }
    p.xs[p.rank - 1] = p.ys[p.rank - 1] = 1;
    for (int i = p.rank - 2; i >= 0; i--) {
        p.xs[i] = p.xs[i + 1] * x->dims[i + 1];
        p.ys[i] = p.ys[i + 1] * y->dims[i + 1];
    }
    pad_axis(&p, 0, x->data, y->data);
    return NRV_OK;
}

/* ---- conv_w8a8: a 1-D convolution whose weight is int8 in the model, with int8 activations
 * (precision "int8"; the compiler picks it for a group-1 1-D conv with an int8-folded
 * weight). Output positions go in blocks of CONV_W8A8_ROWS: their im2row rows (one per
 * position, C*K values in the weight's [M, C, K] order) through linear_w8a8, transposed
 * into y. Every position's row is quantised on its own, so the blocking and the thread count
 * do not change results.
 *   in[0] x f32 [N, C, W]; in[1] packed i8 (nrv_linear_w8a8_pack of q [M, C*K]);
 *   in[2] s f32 [1] or [M]; in[3] z f32 like s, optional; in[4] bias f32 [M], optional
 *   out[0] y f32 [N, M, OW], OW = floor((W + pb + pe - d*(K-1) - 1) / stride) + 1
 *   iattr [act, M, C, K, stride, dilation, pad_begin, pad_end]; fattr [p0, p1] (as conv)
 *   scratch: 4 * CONV_W8A8_ROWS * (C*K + M) bytes. */
#define CONV_W8A8_ROWS 32

static nrv_status conv_w8a8_run(const nrv_op_args *a) {
    nrv_w8_operands o;
    NRV_TRY(nrv_op_w8_operands(a, 8, &o));
    const nrv_tview *x = o.x, *pk = o.w, *sv = o.s, *zv = o.z, *bias = o.bias;
    nrv_tview *y = o.y;
    const int64_t act = a->iattr[0], M = a->iattr[1], C = a->iattr[2], K = a->iattr[3];
    const int64_t st = a->iattr[4], dl = a->iattr[5], pb = a->iattr[6], pe = a->iattr[7];
    NRV_TRY(check_act(a, act));
    NRV_TRY(nrv_op_expect_dtype(a, x, "input x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, pk, "packed weight", NRV_I8));
    NRV_TRY(nrv_op_expect_dtype(a, sv, "s", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    if (M < 1 || C < 1 || K < 1 || st < 1 || dl < 1 || pb < 0 || pe < 0 || C > NRV_W8A8_MAX_K ||
        C * K > NRV_W8A8_MAX_K || M > ATTR_MAX)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "attributes M %lld, C %lld, K %lld, stride %lld, dilation %lld, "
                           "pads %lld %lld out of range", (long long)M, (long long)C, (long long)K, (long long)st,
                           (long long)dl, (long long)pb, (long long)pe);
    const int64_t kdim = C * K;
    if (x->rank != 3 || x->dims[1] != C || y->rank != 3 || y->dims[0] != x->dims[0] || y->dims[1] != M)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x must be [N, %lld, W] and y [N, %lld, OW]", (long long)C, (long long)M);
    const int64_t W = x->dims[2], OW = y->dims[2];
    if (OW != conv_out_extent(W, K, st, dl, pb, pe))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output width %lld, expected %lld", (long long)OW,
                           (long long)conv_out_extent(W, K, st, dl, pb, pe));
    if (pk->rank != 1 || pk->dims[0] != nrv_linear_w8a8_packed_bytes(M, kdim))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "packed weight has %lld bytes, expected %lld", (long long)pk->numel,
                           (long long)nrv_linear_w8a8_packed_bytes(M, kdim));
    if (nrv_op_check_w8_params(a, sv, zv, bias, M) != NRV_OK) /* s is f32 (above): any failure is a shape one */
        return nrv_op_fail(a, NRV_ERR_SHAPE, "s/z must be [1] or [M], bias [M] (f32)");
    const uint64_t need = 4u * CONV_W8A8_ROWS * (uint64_t)(kdim + M);
    if (!a->scratch || a->scratch_bytes < need)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch of %zu bytes, needs %llu", a->scratch_bytes,
                           (unsigned long long)need);
    const nrv_linear_w8a8_fn kernel = nrv_kernel_get(NRV_OP_LINEAR_W8A8).linear_w8a8;
    float *rows = a->scratch, *out = rows + CONV_W8A8_ROWS * kdim;
    const int64_t sz = sv->dims[0] == 1 ? 0 : 1;
    for (int64_t n = 0; n < x->dims[0]; n++) {
        const float *xn = (const float *)x->data + n * C * W;
        float *yn = (float *)y->data + n * M * OW;
        for (int64_t p0 = 0; p0 < OW; p0 += CONV_W8A8_ROWS) {
            const int64_t nr = OW - p0 < CONV_W8A8_ROWS ? OW - p0 : CONV_W8A8_ROWS;
            for (int64_t r = 0; r < nr; r++) {
                float *row = rows + r * kdim;
                const int64_t base = (p0 + r) * st - pb;
                for (int64_t c = 0; c < C; c++) {
                    const float *xc = xn + c * W;
                    for (int64_t k = 0; k < K; k++) {
                        const int64_t ix = base + k * dl;
                        row[c * K + k] = ix >= 0 && ix < W ? xc[ix] : 0.0f;
                    }
                }
            }
            kernel(rows, nr, kdim, pk->data, M, sv->data, zv ? zv->data : NULL, sz, bias ? bias->data : NULL, out);
            for (int64_t m = 0; m < M; m++)
                for (int64_t r = 0; r < nr; r++) yn[m * OW + p0 + r] = out[r * M + m];
        }
    }
    return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y->data, y->numel);
}

/* ---- conv_integer: ONNX ConvInteger (group 1, 2-D; a 1-D conv as H = 1) on a constant
 * weight, exact in int32 like onnxruntime's: y = conv(x − x_zp, W − w_zp) with the padding
 * at x_zp (so x − x_zp is 0 there). Each task takes a run of output positions along one
 * output row: the input window those positions read (the kernel's rows of x, the run's
 * columns, padding at the zero point's byte) is staged channel-last on the stack, so each
 * position's im2row row is kh·kw copies of C bytes (the weight's K order is (i, k, c)), and
 * for a pointwise conv the window is the rows themselves. The rows go through the
 * matmul_integer kernel and are transposed into y. Integer sums are exact, so neither the
 * blocking nor the thread count changes a bit.
 *   in[0] x u8/i8 [N, C, H, W]; in[1] packed i8 (nrv_linear_w8a8_pack of q [M, kh·kw·C],
 *   q[m, (i·kw + k)·C + c] = W[m, c, i, k]); in[2] x_zero_point, x's dtype, one value,
 *   optional (absent: 0); in[3] zq i32 [M], optional
 *   in[4] bias i32 [M], in[5] scale f32 [M] or [1], in[6] y_zero_point (u8/i8, one value):
 *   optional, and together (scale present) they requantize y as op requantize does
 *   (QLinearConv: onnxruntime's MlasRequantizeOutput arithmetic, the requant kernel's)
 *   out[0] y i32 [N, M, OH, OW] (conv extents), or u8/i8 when requantized
 *   scratch: when requantized, 4·numel(y) bytes (the int32 sums of the staged route; the
 *   planes route requantizes in registers and uses it only for a small window's planes,
 *   conv_integer_windows)
 *   iattr [M, C, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, pad_bottom, pad_right]
 *   The windows are staged on the stack: NRV_ERR_UNSUPPORTED when one output position's
 *   window (kh rows x kw columns x C) or M sums do not fit CONV_INT_STAGE bytes. */
#define CONV_INT_RUN 64      /* output positions per block (along one output row) */
#define CONV_INT_STAGE 32768 /* bytes of the window, of the rows and of the sums each */

typedef struct conv_integer_job {
    const uint8_t *x;
    const int8_t *packed;
    const int32_t *zq;
    int32_t *y;
    int64_t C, H, W, M, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW;
    int64_t run, runs_per_row; /* positions per task along an output row */
    int32_t za;   /* the kernel's zero point (s8: + 128) */
    uint8_t pad;  /* the zero point's raw byte: what padding holds */
    uint8_t flip; /* 0x80 for s8 x */
} conv_integer_job;

/* Output positions per task: whole runs of CONV_INT_RUN whose window fits the stage (from the
 * shape alone). 0 when not even one position's fits. */
static int64_t conv_integer_run_len(int64_t C, int64_t kh, int64_t kw, int64_t sw, int64_t dh, int64_t dw,
                                    int64_t OW) {
    const int64_t rows = (kh - 1) * dh + 1;
    int64_t run = OW < CONV_INT_RUN ? OW : CONV_INT_RUN;
    while (run > 0 && rows * ((run - 1) * sw + (kw - 1) * dw + 1) * C > CONV_INT_STAGE) run /= 2;
    return run;
}

/* dst[q·C + c] = src[c·stride + q] for c < C, q < n: bytes from channel rows to channel-last,
 * four channels per 4-byte store. */
static void conv_integer_interleave(const uint8_t *src, int64_t stride, int64_t C, int64_t n, uint8_t *dst) {
    int64_t c = 0;
    for (; c + 4 <= C; c += 4) {
        const uint8_t *s0 = src + c * stride, *s1 = s0 + stride, *s2 = s1 + stride, *s3 = s2 + stride;
        for (int64_t q = 0; q < n; q++) {
            const uint32_t v = (uint32_t)s0[q] | (uint32_t)s1[q] << 8 | (uint32_t)s2[q] << 16 | (uint32_t)s3[q] << 24;
            memcpy(dst + q * C + c, &v, 4); /* little-endian: byte i is channel c + i */
        }
    }
    for (; c < C; c++)
        for (int64_t q = 0; q < n; q++) dst[q * C + c] = src[c * stride + q];
}

/* y[m·ldy + r] = out[r·M + m] for r < nr, m < M: the kernel's [positions, M] sums into the
 * output's channel planes, 4 x 4 blocks transposed in registers. */
static void conv_integer_scatter(const int32_t *out, int64_t nr, int64_t M, int32_t *y, int64_t ldy) {
    typedef int32_t v4i __attribute__((vector_size(16)));
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4) {
            v4i a0, a1, a2, a3;
            memcpy(&a0, out + r * M + m, 16);
            memcpy(&a1, out + (r + 1) * M + m, 16);
            memcpy(&a2, out + (r + 2) * M + m, 16);
            memcpy(&a3, out + (r + 3) * M + m, 16);
            const v4i b0 = __builtin_shuffle(a0, a1, (v4i){0, 4, 1, 5}), b1 = __builtin_shuffle(a2, a3, (v4i){0, 4, 1, 5});
            const v4i b2 = __builtin_shuffle(a0, a1, (v4i){2, 6, 3, 7}), b3 = __builtin_shuffle(a2, a3, (v4i){2, 6, 3, 7});
            const v4i c0 = __builtin_shuffle(b0, b1, (v4i){0, 1, 4, 5}), c1 = __builtin_shuffle(b0, b1, (v4i){2, 3, 6, 7});
            const v4i c2 = __builtin_shuffle(b2, b3, (v4i){0, 1, 4, 5}), c3 = __builtin_shuffle(b2, b3, (v4i){2, 3, 6, 7});
            memcpy(y + m * ldy + r, &c0, 16);
            memcpy(y + (m + 1) * ldy + r, &c1, 16);
            memcpy(y + (m + 2) * ldy + r, &c2, 16);
            memcpy(y + (m + 3) * ldy + r, &c3, 16);
        }
        for (; r < nr; r++)
            for (int64_t i = 0; i < 4; i++) y[(m + i) * ldy + r] = out[r * M + m + i];
    }
    for (; m < M; m++)
        for (int64_t r = 0; r < nr; r++) y[m * ldy + r] = out[r * M + m];
}

static void conv_integer_task(void *ctx, int64_t t) {
    const conv_integer_job *j = ctx;
    const int64_t rows_per_image = j->OH * j->runs_per_row;
    const int64_t n = t / rows_per_image, oh = t % rows_per_image / j->runs_per_row;
    const int64_t ow0 = t % j->runs_per_row * j->run, nw = j->OW - ow0 < j->run ? j->OW - ow0 : j->run;
    const int64_t C = j->C, K = C * j->kh * j->kw, P = j->OH * j->OW;
    const int64_t wrows = (j->kh - 1) * j->dh + 1, wcols = (nw - 1) * j->sw + (j->kw - 1) * j->dw + 1;
    const int64_t ih0 = oh * j->sh - j->pt, iw0 = ow0 * j->sw - j->pl;
    _Alignas(64) uint8_t win[CONV_INT_STAGE], rows[CONV_INT_STAGE];
    _Alignas(64) int32_t out[CONV_INT_STAGE / 4];
    const uint8_t *xn = j->x + n * C * j->H * j->W;
    /* the window, channel last: win[(r·wcols + q)·C + c] = x[c, ih0 + r, iw0 + q] or pad */
    for (int64_t r = 0; r < wrows; r++) {
        const int64_t ih = ih0 + r;
        uint8_t *wr = win + r * wcols * C;
        if (ih < 0 || ih >= j->H) {
            memset(wr, j->pad, (size_t)(wcols * C));
            continue;
        }
        /* columns [q_lo, q_hi) are inside x, the rest padding */
        const int64_t q_lo = iw0 < 0 ? (-iw0 < wcols ? -iw0 : wcols) : 0;
        const int64_t q_hi = j->W - iw0 < wcols ? (j->W - iw0 > q_lo ? j->W - iw0 : q_lo) : wcols;
        memset(wr, j->pad, (size_t)(q_lo * C));
        memset(wr + q_hi * C, j->pad, (size_t)((wcols - q_hi) * C));
        if (q_hi > q_lo)
            conv_integer_interleave(xn + ih * j->W + iw0 + q_lo, j->H * j->W, C, q_hi - q_lo, wr + q_lo * C);
    }
    const nrv_matmul_integer_fn kernel = nrv_kernel_get(NRV_OP_MATMUL_INTEGER).matmul_integer;
    const int direct = j->kh == 1 && j->kw == 1 && j->sw == 1; /* the window is the rows */
    int64_t rb = CONV_INT_STAGE / K < CONV_INT_STAGE / (4 * j->M) ? CONV_INT_STAGE / K : CONV_INT_STAGE / (4 * j->M);
    if (direct) rb = CONV_INT_STAGE / (4 * j->M);
    const int64_t at = n * j->M * P + oh * j->OW + ow0; /* y's element of (n, m = 0, this run's first position) */
    /* taps of one kernel row that are contiguous in the window (dilation 1 along w): one copy */
    const int64_t seg = j->dw == 1 ? j->kw * C : C, segs = j->dw == 1 ? 1 : j->kw;
    for (int64_t p0 = 0; p0 < nw; p0 += rb) {
        const int64_t nr = nw - p0 < rb ? nw - p0 : rb;
        const uint8_t *a = win + p0 * C;
        if (!direct) {
            for (int64_t r = 0; r < nr; r++)
                for (int64_t i = 0; i < j->kh; i++)
                    for (int64_t k = 0; k < segs; k++) {
                        const uint8_t *src = win + ((i * j->dh) * wcols + (p0 + r) * j->sw + k * j->dw) * C;
                        uint8_t *dst = rows + r * K + (i * j->kw + k) * C;
                        if (seg < 16) /* a call per few bytes cost more than the bytes (C = 3: the stem) */
                            for (int64_t b = 0; b < seg; b++) dst[b] = src[b];
                        else
                            memcpy(dst, src, (size_t)seg);
                    }
            a = rows;
        }
        kernel(a, j->flip, nr, K, &j->za, 0, j->packed, j->M, 0, j->M, j->zq, out);
        conv_integer_scatter(out, nr, j->M, j->y + at + p0, P);
    }
}

/* A pointwise conv (1x1, stride 1, no padding) where the selected matmul_integer variant has
 * a planes entry point: x's channel planes are the product's rows as they lie and the sums
 * come out as y's planes, with no window staged and no transpose. Each task takes a range of
 * CONV_INT_PLANES_BLOCK-position blocks of the images laid end to end. */
#define CONV_INT_PLANES_BLOCK 256
typedef struct conv_integer_planes_job {
    nrv_matmul_integer_planes_fn planes;
    const uint8_t *x;
    const int8_t *packed;
    const int32_t *zq;
    const nrv_requant_out *rq;
    void *y; /* int32 sums, or bytes when rq is set */
    int64_t C, M, P, blocks_per_image, pieces, blocks;
    int32_t za;
    uint8_t flip;
} conv_integer_planes_job;

static void conv_integer_planes_task(void *ctx, int64_t t) {
    const conv_integer_planes_job *j = ctx;
    const int64_t bpi = j->blocks_per_image, b1 = (t + 1) * j->blocks / j->pieces, width = j->rq ? 1 : 4;
    for (int64_t b = t * j->blocks / j->pieces; b < b1;) { /* one call per image the range touches */
        const int64_t img = b / bpi, stop = b1 < (img + 1) * bpi ? b1 : (img + 1) * bpi;
        const int64_t p0 = (b - img * bpi) * CONV_INT_PLANES_BLOCK;
        const int64_t p1 = (stop - img * bpi) * CONV_INT_PLANES_BLOCK < j->P ? (stop - img * bpi) * CONV_INT_PLANES_BLOCK
                                                                              : j->P;
        j->planes(j->x + img * j->C * j->P + p0, j->P, j->flip, p1 - p0, j->C, j->za, j->packed, j->M, j->zq, j->rq,
                  (uint8_t *)j->y + (img * j->M * j->P + p0) * width, j->P);
        b = stop;
    }
}

/* A conv's window as planes (im2col with the positions last): plane t = (i·kw + k)·C + c of
 * image n holds x[n, c, oh·sh + i·dh − pt, ow·sw + k·dw − pl] at oh·OW + ow, the zero point's
 * byte where that is padding, so matmul_integer_planes reads the planes in place as a pointwise
 * conv's channels (the weight's K order is the same (i, k, c)). */
typedef struct conv_integer_windows_job {
    const uint8_t *x;
    uint8_t *planes;
    int64_t C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW;
    uint8_t pad;
} conv_integer_windows_job;

static void conv_integer_windows(void *ctx, int64_t p0, int64_t p1) {
    const conv_integer_windows_job *j = ctx;
    const int64_t K = j->C * j->kh * j->kw;
    for (int64_t p = p0; p < p1; p++) { /* p = n·K + t */
        const int64_t n = p / K, t = p % K, c = t % j->C, i = t / j->C / j->kw, k = t / j->C % j->kw;
        const uint8_t *xc = j->x + (n * j->C + c) * j->H * j->W;
        uint8_t *dst = j->planes + p * j->OH * j->OW;
        /* output columns [lo, hi) read inside x */
        const int64_t off = k * j->dw - j->pl;
        int64_t lo = off < 0 ? (-off + j->sw - 1) / j->sw : 0;
        int64_t hi = j->W - off > 0 ? (j->W - off + j->sw - 1) / j->sw : 0;
        lo = lo > j->OW ? j->OW : lo;
        hi = hi > j->OW ? j->OW : hi < lo ? lo : hi;
        for (int64_t oh = 0; oh < j->OH; oh++, dst += j->OW) {
            const int64_t ih = oh * j->sh + i * j->dh - j->pt;
            if (ih < 0 || ih >= j->H) {
                memset(dst, j->pad, (size_t)j->OW);
                continue;
            }
            memset(dst, j->pad, (size_t)lo);
            if (hi > lo) {
                const uint8_t *in = xc + ih * j->W + off + lo * j->sw; /* output column lo's input */
                uint8_t *out = dst + lo;
                if (j->sw == 1) memcpy(out, in, (size_t)(hi - lo));
                else if (j->sw == 2) /* vectorises (SSE2 pand + packuswb, NEON ld2) */
                    for (int64_t q = 0; q < hi - lo; q++) out[q] = in[2 * q];
                else
                    for (int64_t q = 0; q < hi - lo; q++) out[q] = in[q * j->sw];
            }
            memset(dst + hi, j->pad, (size_t)(j->OW - hi));
        }
    }
}

static nrv_status conv_integer_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 7, 1, 12, 0));
    const int64_t *ia = a->iattr;
    const int64_t M = ia[0], C = ia[1], kh = ia[2], kw = ia[3];
    static const char *const names[] = {"M", "C", "kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h",
                                        "dilation_w", "pad_top", "pad_left", "pad_bottom", "pad_right"};
    for (int i = 0; i < 12; i++) NRV_TRY(check_attr(a, names[i], 0, ia[i], i < 8 ? 1 : 0));
    const int64_t run = conv_integer_run_len(C, kh, kw, ia[5], ia[6], ia[7], 1);
    if (C * kh * kw > NRV_W8A8_MAX_K || 4 * M > CONV_INT_STAGE || run < 1)
        return nrv_op_fail(a, NRV_ERR_UNSUPPORTED, "C·kh·kw %lld or M %lld too large for the staging (%d bytes)",
                           (long long)(C * kh * kw), (long long)M, CONV_INT_STAGE);
    nrv_int_operands o;
    NRV_TRY(nrv_op_int_operands(a, 7, 12, M, nrv_linear_w8a8_packed_bytes(M, C * kh * kw), &o));
    nrv_requant_out rq;
    const int requantized = a->n_in > 5 && a->in[5] != NULL;
    if (a->n_in > 4 && !requantized)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "a bias or an output zero point without the requantization scale");
    if (requantized) NRV_TRY(nrv_op_requant_out(a, 4, 5, 6, o.y, M, &rq));
    if (requantized && (a->scratch_bytes < (size_t)o.y->numel * sizeof(int32_t) || (uintptr_t)a->scratch % 4 != 0))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "requantized: scratch of %zu bytes, expected %lld (the int32 sums)",
                           a->scratch_bytes, (long long)(o.y->numel * 4));
    const nrv_tview *x = o.x, *pk = o.w, *zav = o.xz, *zqv = o.wz;
    nrv_tview *y = o.y;
    if (x->rank != 4 || x->dims[1] != C || y->rank != 4 || y->dims[0] != x->dims[0] || y->dims[1] != M)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x must be [N, %lld, H, W] and y [N, %lld, OH, OW]", (long long)C,
                           (long long)M);
    const int64_t H = x->dims[2], W = x->dims[3];
    const int64_t OH = conv_out_extent(H, kh, ia[4], ia[6], ia[8], ia[10]);
    const int64_t OW = conv_out_extent(W, kw, ia[5], ia[7], ia[9], ia[11]);
    if (y->dims[2] != OH || y->dims[3] != OW)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output is %lldx%lld, expected %lldx%lld", (long long)y->dims[2],
                           (long long)y->dims[3], (long long)OH, (long long)OW);
    if (zav && zav->numel != 1)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x_zero_point has %lld values, expected 1 (per tensor)",
                           (long long)zav->numel);
    if (y->numel == 0) return NRV_OK;
    const uint8_t flip = x->dtype == NRV_I8 ? 0x80 : 0, pad = zav ? *(const uint8_t *)zav->data : 0;
    const nrv_matmul_integer_planes_fn planes = nrv_kernel_get_implicit(NRV_OP_MATMUL_INTEGER).matmul_integer_planes;
    const int pointwise = kh == 1 && kw == 1 && ia[4] == 1 && ia[5] == 1 && ia[8] == 0 && ia[9] == 0 &&
                          ia[10] == 0 && ia[11] == 0;
    /* a small window (the stem: 3 channels x 3x3) becomes planes too: its kh·kw·C shifted
     * planes written into the scratch, which the requantized op holds for its int32 sums
     * (4·M bytes a position: room for K <= 4·M bytes of window) */
    const int64_t K = C * kh * kw, Pout = OH * OW;
    const int windows = planes && !pointwise && requantized && K <= 4 * M && K <= NRV_MI_PLANES_MAX_K &&
                        (uint64_t)a->scratch_bytes >= (uint64_t)(x->dims[0] * K * Pout);
    if (planes && ((pointwise && C <= NRV_MI_PLANES_MAX_K) || windows)) {
        const uint8_t *src = x->data;
        if (windows) {
            conv_integer_windows_job w = {x->data, a->scratch, C, H, W, kh, kw, ia[4], ia[5], ia[6], ia[7], ia[8],
                                          ia[9], OH, OW, pad};
            nrv_plan_for_rows(a->pool, x->dims[0] * K, Pout, conv_integer_windows, &w);
            src = a->scratch;
        }
        const int64_t P = windows ? Pout : H * W, in = windows ? K : C;
        const int64_t bpi = (P + CONV_INT_PLANES_BLOCK - 1) / CONV_INT_PLANES_BLOCK;
        conv_integer_planes_job j = {planes, src, pk->data, zqv ? zqv->data : NULL, requantized ? &rq : NULL,
                                     y->data, in, M, P, bpi, 1, x->dims[0] * bpi, (int32_t)(uint8_t)(pad ^ flip),
                                     flip};
        j.pieces = nrv_plan_pieces(a->pool, x->dims[0] * P * M * in, 1 << 17, j.blocks);
        nrv_parallel_for(j.pieces > 1 ? a->pool : NULL, j.pieces, conv_integer_planes_task, &j);
        return NRV_OK;
    }
    const int64_t len = conv_integer_run_len(C, kh, kw, ia[5], ia[6], ia[7], OW), runs = (OW + len - 1) / len;
    /* the staged route: int32 sums into y, or when requantized into the scratch, then each
     * plane through the requant kernel as op requantize does (requantizing each run of
     * positions as it was staged measured slower than this pass over whole planes) */
    int32_t *sums = requantized ? a->scratch : y->data;
    conv_integer_job j = {x->data, pk->data, zqv ? zqv->data : NULL, sums, C, H, W, M, kh, kw, ia[4], ia[5],
                          ia[6], ia[7], ia[8], ia[9], OH, OW, len, runs, (int32_t)(uint8_t)(pad ^ flip), pad, flip};
    nrv_parallel_for(OH * OW * M * C * kh * kw >= (1 << 17) ? a->pool : NULL, x->dims[0] * OH * runs,
                     conv_integer_task, &j);
    if (requantized) nrv_requant_planes(a->pool, &rq, sums, x->dims[0], M, OH * OW, y->data);
    return NRV_OK;
}

/* ---- depthwise_integer: a depthwise QLinearConv (group = C = M, one output per channel) in
 * onnxruntime's integer arithmetic, bytes in and bytes out, one pass per channel plane (the
 * dispatch kernel depthwise_q8: the exact sum of (x − x_zp)·w over the taps, requantized as
 * op requantize does it, so the same bytes as conv_integer's route and onnxruntime's).
 *   in[0] x u8/i8 [N, C, H, W]
 *   in[1] w f32 [C, kh·kw]: the taps less the weight's zero point (integers, |w| <= 255)
 *   in[2] x_zp, x's dtype, one value, optional (absent: 0)
 *   in[3] bias i32 [C], optional; in[4] scale f32 [C] or [1], finite and > 0; in[5] y_zp,
 *         y's dtype, one value, optional (op requantize's parameters)
 *   out[0] y u8/i8 [N, C, OH, OW], OH = (H + pt + pb − dh·(kh − 1) − 1) / sh + 1, OW likewise
 *   iattr (10): [kh, kw, sh, sw, dh, dw, pt, pl, pb, pr]; the kernel's reach (k − 1)·d + 1 at
 *   most NRV_DWQ8_MAX_REACH, strides at most NRV_DWQ8_MAX_STRIDE.
 * Planes are shared out among the threads; each plane is computed alone, so the thread
 * count changes no byte. */
typedef struct depthwise_integer_job {
    nrv_dwq8_plane g;
    const uint8_t *x;
    const float *w;
    int32_t xz;
    const nrv_requant_out *rq;
    uint8_t *y;
    int64_t C;
} depthwise_integer_job;

static void depthwise_integer_planes(void *ctx, int64_t p0, int64_t p1) {
    const depthwise_integer_job *j = ctx;
    const nrv_depthwise_q8_fn kernel = nrv_kernel_get(NRV_OP_DEPTHWISE_Q8).depthwise_q8;
    const int64_t taps = j->g.kh * j->g.kw, in_plane = j->g.h * j->g.w, out_plane = j->g.oh * j->g.ow;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t c = p % j->C;
        kernel(&j->g, j->x + p * in_plane, j->xz, j->w + c * taps, j->rq->bias ? j->rq->bias[c] : 0,
               j->rq->scale[c * j->rq->scale_stride], j->rq->lo, j->rq->hi, j->rq->z, j->y + p * out_plane);
    }
}

static nrv_status depthwise_integer_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 5, 6, 1, 10, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "w"));
    const nrv_tview *x = a->in[0], *w = a->in[1];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    const int64_t *ia = a->iattr;
    static const char *const names[] = {"kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h",
                                        "dilation_w", "pad_top", "pad_left", "pad_bottom", "pad_right"};
    for (int i = 0; i < 10; i++) NRV_TRY(check_attr(a, names[i], 0, ia[i], i < 6 ? 1 : 0));
    const int64_t kh = ia[0], kw = ia[1];
    if ((kh - 1) * ia[4] + 1 > NRV_DWQ8_MAX_REACH || (kw - 1) * ia[5] + 1 > NRV_DWQ8_MAX_REACH ||
        ia[2] > NRV_DWQ8_MAX_STRIDE || ia[3] > NRV_DWQ8_MAX_STRIDE)
        return nrv_op_fail(a, NRV_ERR_UNSUPPORTED, "kernel %lldx%lld, dilations %lldx%lld, strides %lldx%lld: the "
                           "kernel reaches at most %d rows and columns, strides at most %d", (long long)kh,
                           (long long)kw, (long long)ia[4], (long long)ia[5], (long long)ia[2], (long long)ia[3],
                           NRV_DWQ8_MAX_REACH, NRV_DWQ8_MAX_STRIDE);
    if (x->dtype != NRV_U8 && x->dtype != NRV_I8)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s, expected u8 or i8", nrv_dtype_str(x->dtype));
    NRV_TRY(nrv_op_expect_dtype(a, w, "w", NRV_F32));
    if (x->rank != 4 || y->rank != 4)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x and y must be [N, C, H, W] (ranks %d and %d)", (int)x->rank,
                           (int)y->rank);
    const int64_t C = x->dims[1], taps = kh * kw;
    if (w->rank != 2 || w->dims[0] != C || w->dims[1] != taps)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "w must be [%lld, %lld] (the taps of each channel)", (long long)C,
                           (long long)taps);
    const float *wd = w->data;
    for (int64_t i = 0; i < w->numel; i++) /* the sums are exact only on such taps */
        if (!(wd[i] >= -255.0f && wd[i] <= 255.0f) || wd[i] != (float)(int32_t)wd[i])
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "w[%lld] is %g: an integer in [-255, 255] expected",
                               (long long)i, (double)wd[i]);
    int32_t xz;
    NRV_TRY(nrv_op_code_zero_point(a, 2, "x_zero_point", (nrv_dtype)x->dtype, &xz));
    nrv_requant_out rq;
    NRV_TRY(nrv_op_requant_out(a, 3, 4, 5, y, C, &rq));
    const int64_t OH = conv_out_extent(x->dims[2], kh, ia[2], ia[4], ia[6], ia[8]);
    const int64_t OW = conv_out_extent(x->dims[3], kw, ia[3], ia[5], ia[7], ia[9]);
    if (y->dims[0] != x->dims[0] || y->dims[1] != C || y->dims[2] != OH || y->dims[3] != OW)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "y is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                           (long long)y->dims[0], (long long)y->dims[1], (long long)y->dims[2], (long long)y->dims[3],
                           (long long)x->dims[0], (long long)C, (long long)OH, (long long)OW);
    if (y->numel == 0) return NRV_OK;
    depthwise_integer_job j = {{x->dims[2], x->dims[3], OH, OW, kh, kw, ia[2], ia[3], ia[4], ia[5], ia[6], ia[7],
                                x->dtype == NRV_I8},
                               x->data, wd, xz, &rq, y->data, C};
    nrv_plan_for_rows(a->pool, x->dims[0] * C, OH * OW * taps / 4, depthwise_integer_planes, &j);
    return NRV_OK;
}

/* ---- rdft: a windowed real DFT of strided frames — what a 1-D conv computes when its
 * weight is a DFT basis (the compiler's select_rdft proves that and swaps this in; the FFT
 * and its table are in kernels/fft.c).
 *   in[0]  x      f32 [B, 1, L]
 *   in[1]  window f32 [N], N a power of two in [4, NRV_RDFT_MAX_N]
 *   in[2]  table  f32 [nrv_rdft_table_floats(N)] twiddles (kernels/fft.c)
 *   out[0] y      f32 [B, 2K, F], F = (L + pad_begin + pad_end - N) / stride + 1: channel k < K
 *                 the real part of bin k of each frame, channel K + k its imaginary part
 *                 times im_sign
 *   iattr (5): [stride >= 1, pad_begin >= 0, pad_end >= 0, K in [1, N/2 + 1], im_sign ±1]
 *   scratch: nrv_rdft_work_bytes(N) bytes (18·N), 16-byte aligned
 * Not in place. */
static nrv_status rdft_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, 5, -1));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    const nrv_tview *x = a->in[0], *win = a->in[1], *table = a->in[2];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, x, "input x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, win, "window", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, table, "twiddle table", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_F32));
    const int64_t stride = a->iattr[0], pb = a->iattr[1], pe = a->iattr[2], bins = a->iattr[3], sign = a->iattr[4];
    NRV_TRY(check_attr(a, "stride", 0, stride, 1));
    NRV_TRY(check_attr(a, "pad_begin", 0, pb, 0));
    NRV_TRY(check_attr(a, "pad_end", 0, pe, 0));
    if (sign != 1 && sign != -1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "im_sign %lld, expected 1 or -1", (long long)sign);
    if (win->rank != 1) return nrv_op_fail(a, NRV_ERR_SHAPE, "window has rank %d, expected 1", (int)win->rank);
    const int64_t n = win->dims[0];
    if (n < 4 || n > NRV_RDFT_MAX_N || (n & (n - 1)) != 0)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "window length %lld: a power of two in [4, %d] expected", (long long)n,
                           NRV_RDFT_MAX_N);
    if (table->rank != 1 || table->dims[0] != nrv_rdft_table_floats(n))
        return nrv_op_fail(a, NRV_ERR_SHAPE, "twiddle table has %lld elements, expected %lld", (long long)table->numel,
                           (long long)nrv_rdft_table_floats(n));
    if (bins < 1 || bins > n / 2 + 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%lld bins, expected 1..%lld", (long long)bins,
                           (long long)(n / 2 + 1));
    if (x->rank != 3 || x->dims[1] != 1)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "input must be [B, 1, L] (rank %d)", (int)x->rank);
    const int64_t frames = conv_out_extent(x->dims[2], n, stride, 1, pb, pe);
    if (frames < 0)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "window %lld exceeds the padded input %lld+%lld+%lld", (long long)n,
                           (long long)x->dims[2], (long long)pb, (long long)pe);
    if (y->rank != 3 || y->dims[0] != x->dims[0] || y->dims[1] != 2 * bins || y->dims[2] != frames)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "output must be [%lld, %lld, %lld]", (long long)x->dims[0],
                           (long long)(2 * bins), (long long)frames);
    if (a->scratch_bytes < (size_t)nrv_rdft_work_bytes(n) || ((uintptr_t)a->scratch & 15) != 0)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, needs %lld, 16-byte aligned",
                           a->scratch_bytes, (long long)nrv_rdft_work_bytes(n));
    const int64_t len = x->dims[2];
    for (int64_t b = 0; b < x->dims[0]; b++) {
        float *yb = (float *)y->data + b * 2 * bins * frames;
        nrv_rdft_frames_ref((const float *)x->data + b * len, len, stride, pb, frames, n, win->data, table->data, bins,
                            (float)sign, yb, yb + bins * frames, frames, a->scratch);
    }
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_conv[] = {
    {"conv", conv_run, "gemm"},
    {"conv_packed", conv_packed_run, "gemm"},
    {"pack_panels", pack_panels_run, NULL},
    {"conv_w8a8", conv_w8a8_run, "linear_w8a8"},
    {"conv_integer", conv_integer_run, "matmul_integer"},
    {"depthwise_integer", depthwise_integer_run, "depthwise_q8"},
    {"rdft", rdft_run, NULL},
    {"pool", pool_run, NULL},
    {"global_pool", global_pool_run, NULL},
    {"channel_affine", channel_affine_run, NULL},
    {"instancenorm", instancenorm_run, NULL},
    {"pad", pad_run, NULL},
    {NULL, NULL, NULL},
};
