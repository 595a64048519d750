/* depthwise_impl.h — the depthwise taps (nrv_depthwise_fn, kernels.h) with VL-lane vectors
 * and FMA, written once against the vector layer (depthwise_avx2.c / depthwise_avx512.c).
 *
 * A register block of R output rows x V vectors of columns (8 accumulators: V = 1..4
 * vectors of a row, R = 8, 4, 2, 2 rows; wider rows in pieces of 4 vectors) takes every
 * tap with its weight broadcast once, so 8 independent FMA chains hide the FMA latency (the
 * reference's two chains of 49 taps ran latency-bound at 4 lanes). The last vector of a
 * row is masked: nothing past column ow is read (beyond the tap's offset) or written. */
#include "x86_kernels.h"

#define DW_ACC 8

static inline __attribute__((always_inline)) void dw_block(const int R, const int V, const float *plane,
                                                           int64_t row_step, int64_t ow, const int64_t *off,
                                                           int64_t taps, const vf *wv, float bias, float *y,
                                                           int64_t ldy, int64_t oy) {
    const vtail last = vtail_mask(ow - (int64_t)(V - 1) * VL); /* lanes of the row's last vector */
    vf acc[DW_ACC];
    for (int i = 0; i < R * V; i++) acc[i] = vset1(bias);
    for (int64_t k = 0; k < taps; k++) {
        const vf wk = wv[k];
        for (int r = 0; r < R; r++) {
            const float *src = plane + (oy + r) * row_step + off[k];
            for (int v = 0; v < V; v++) {
                const vf xv = v + 1 < V ? vload(src + v * VL) : vload_tail(src + v * VL, last);
                acc[r * V + v] = vfmadd(wk, xv, acc[r * V + v]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *yr = y + (oy + r) * ldy;
        for (int v = 0; v + 1 < V; v++) vstore(yr + v * VL, acc[r * V + v]);
        vstore_tail(yr + (V - 1) * VL, last, acc[r * V + V - 1]);
    }
}

/* R rows (a constant 1..8 at each call) of V vectors from row oy. */
#define DW_ROWS(V_, R_) dw_block(R_, V_, plane, row_step, cols, off, taps, wv, bias, y, ldy, oy)
static __attribute__((noinline)) void dw_rows(int V, int R, const float *plane, int64_t row_step, int64_t cols,
                                              const int64_t *off, int64_t taps, const vf *wv, float bias, float *y,
                                              int64_t ldy, int64_t oy) {
    switch (V * 8 + R) {
    case 8 + 8: DW_ROWS(1, 8); break;
    case 8 + 7: DW_ROWS(1, 7); break;
    case 8 + 6: DW_ROWS(1, 6); break;
    case 8 + 5: DW_ROWS(1, 5); break;
    case 8 + 4: DW_ROWS(1, 4); break;
    case 8 + 3: DW_ROWS(1, 3); break;
    case 8 + 2: DW_ROWS(1, 2); break;
    case 8 + 1: DW_ROWS(1, 1); break;
    case 16 + 4: DW_ROWS(2, 4); break;
    case 16 + 3: DW_ROWS(2, 3); break;
    case 16 + 2: DW_ROWS(2, 2); break;
    case 16 + 1: DW_ROWS(2, 1); break;
    case 24 + 2: DW_ROWS(3, 2); break;
    case 24 + 1: DW_ROWS(3, 1); break;
    case 32 + 2: DW_ROWS(4, 2); break;
    default: DW_ROWS(4, 1); break;
    }
}
#undef DW_ROWS

void X86FN(nrv_depthwise)(const float *plane, int64_t row_step, int64_t oh, int64_t ow, const int64_t *tap_off,
                          int64_t taps, const float *w, float bias, float *y) {
    vf wv[NRV_DW_MAX_TAPS];
    for (int64_t k = 0; k < taps; k++) wv[k] = vset1(w[k]);
    /* a row wider than 4 vectors goes in pieces of 4 vectors (plane and y offset views) */
    for (int64_t x0 = 0; x0 < ow; x0 += 4 * VL) {
        const int64_t cols = ow - x0 < 4 * VL ? ow - x0 : 4 * VL;
        const int V = (int)((cols + VL - 1) / VL), R = DW_ACC / (V < 3 ? V : 4);
        for (int64_t oy = 0; oy < oh; oy += R)
            dw_rows(V, oh - oy < R ? (int)(oh - oy) : R, plane + x0, row_step, cols, tap_off, taps, wv, bias, y + x0,
                    ow, oy);
    }
}

/* ---- channel vectors (nrv_depthwise_channels_fn): lane l of every vector is channel
 * c0 + l. Per block of VL channels and band of output rows: the band's padded input rows
 * are gathered into a tile (tile[t][u] = the VL channels' x at row t, column u of the
 * padded band; zeros in the padding), every output is bias + the taps' FMAs in order on
 * whole vectors, into an output tile, which is gathered back into each channel's plane.
 * Both tiles stay in L1; the taps' loads are plain vector loads. */
#define DW_CH_OUT_FLOATS 4096 /* the output tile: 16 KiB */
#define DW_CH_J 8             /* outputs of a row per register block */

/* J outputs (a constant 1..8 at each call) from the tile position `src` (step floats apart). */
static inline __attribute__((always_inline)) void dw_ch_block(const int J, const float *src, int64_t step,
                                                              const int64_t *off, int64_t taps, const vf *wv, vf bias,
                                                              float *out) {
    vf acc[DW_CH_J];
    for (int j = 0; j < J; j++) acc[j] = bias;
    for (int64_t k = 0; k < taps; k++) {
        const float *s = src + off[k];
        for (int j = 0; j < J; j++) acc[j] = vfmadd(wv[k], vload(s + j * step), acc[j]);
    }
    for (int j = 0; j < J; j++) vstore(out + j * VL, acc[j]);
}

#define DW_CH(J_) dw_ch_block(J_, src, step, off, taps, wv, bias, out)
static __attribute__((noinline)) void dw_ch_outputs(int J, const float *src, int64_t step, const int64_t *off,
                                                    int64_t taps, const vf *wv, vf bias, float *out) {
    switch (J) {
    case 1: DW_CH(1); break;
    case 2: DW_CH(2); break;
    case 3: DW_CH(3); break;
    case 4: DW_CH(4); break;
    case 5: DW_CH(5); break;
    case 6: DW_CH(6); break;
    case 7: DW_CH(7); break;
    default: DW_CH(8); break;
    }
}
#undef DW_CH

void X86FN(nrv_depthwise_channels)(const nrv_dw_geom *g, int64_t c, const float *x, const float *w,
                                   const float *bias, float *y) {
    const int64_t taps = g->kh * g->kw, plane = g->ih * g->iw, P = g->oh * g->ow;
    const int64_t wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1, span_h = (g->kh - 1) * g->dh + 1;
    /* output rows per band: their input rows fit the input tile, their outputs the output
     * tile (nrv_dw_channels_fit leaves room for one row at 16 lanes) */
    int64_t rb = (NRV_DW_CH_TILE_FLOATS / VL / wp - span_h) / g->sh + 1;
    if (rb > DW_CH_OUT_FLOATS / VL / g->ow) rb = DW_CH_OUT_FLOATS / VL / g->ow;
    if (rb > g->oh) rb = g->oh;
    float tile[NRV_DW_CH_TILE_FLOATS] __attribute__((aligned(64)));
    float out[DW_CH_OUT_FLOATS] __attribute__((aligned(64)));
    int64_t off[NRV_DW_MAX_TAPS]; /* each tap's tile offset (floats) from its output's first */
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) off[ki * g->kw + kj] = (ki * g->dh * wp + kj * g->dw) * VL;
    /* tile columns [u_lo, u_hi) hold x's columns u - pw; the others are padding */
    const int64_t u_lo = g->pw < wp ? g->pw : wp;
    const int64_t u_hi = g->pw + g->iw < u_lo ? u_lo : (g->pw + g->iw > wp ? wp : g->pw + g->iw);
    const vindex planes = vstride_index((int32_t)plane), lanes = vstride_index(VL);
    const vindex wstep = vstride_index((int32_t)taps);
    for (int64_t c0 = 0; c0 < c; c0 += VL) {
        const int64_t nc = c - c0 < VL ? c - c0 : VL;
        const vtail m = vtail_mask(nc);
        vf wv[NRV_DW_MAX_TAPS];
        for (int64_t k = 0; k < taps; k++) wv[k] = vgather_tail(w + c0 * taps + k, wstep, m);
        const vf bv = bias ? vload_tail(bias + c0, m) : vzero();
        const float *xc = x + c0 * plane;
        for (int64_t oy0 = 0; oy0 < g->oh; oy0 += rb) {
            const int64_t rows = g->oh - oy0 < rb ? g->oh - oy0 : rb, hn = (rows - 1) * g->sh + span_h;
            for (int64_t t = 0; t < hn; t++) {
                const int64_t iy = oy0 * g->sh - g->ph + t;
                float *trow = tile + t * wp * VL;
                if (iy < 0 || iy >= g->ih) {
                    for (int64_t u = 0; u < wp; u++) vstore(trow + u * VL, vzero());
                    continue;
                }
                const float *xrow = xc + iy * g->iw;
                int64_t u = 0;
                for (; u < u_lo; u++) vstore(trow + u * VL, vzero());
                for (; u < u_hi; u++) vstore(trow + u * VL, vgather_tail(xrow + (u - g->pw), planes, m));
                for (; u < wp; u++) vstore(trow + u * VL, vzero());
            }
            for (int64_t r = 0; r < rows; r++)
                for (int64_t ox = 0; ox < g->ow; ox += DW_CH_J) {
                    const int J = g->ow - ox < DW_CH_J ? (int)(g->ow - ox) : DW_CH_J;
                    dw_ch_outputs(J, tile + (r * g->sh * wp + ox * g->sw) * VL, g->sw * VL, off, taps, wv, bv,
                                  out + (r * g->ow + ox) * VL);
                }
            /* the output tile back into each channel's plane */
            const int64_t n = rows * g->ow;
            for (int64_t l = 0; l < nc; l++) {
                float *dst = y + (c0 + l) * P + oy0 * g->ow;
                int64_t p = 0;
                for (; p + VL <= n; p += VL) vstore(dst + p, vgather(out + p * VL + l, lanes));
                if (p < n) {
                    const vtail mt = vtail_mask(n - p);
                    vstore_tail(dst + p, mt, vgather_tail(out + p * VL + l, lanes, mt));
                }
            }
        }
    }
}

/* ---- rows straight from x (nrv_depthwise_channels_fn contract, the op "depthwise_rows"):
 * square kernels of 3, 5 or 7, stride 1 or 2 both ways, or dilation 2 at stride 1 (the
 * dilated last stage of a segmentation backbone: LR-ASPP and DeepLabV3 on MobileNetV3,
 * whose 5x5 convs over 20x20 took 2.4x as long on the plane path). A register block is
 * R output rows x one vector of VL columns (R = 8 for 3x3: 8 FMA chains hide the FMA
 * latency; 4 for 5x5 and 7x7, whose K·K memory-operand weights make them load-bound, and
 * 8 rows measured slower there); the block's input rows are read once each, top to bottom,
 * and each row's tap vectors (stride 2: pairs of vectors split into even and odd columns)
 * feed every output row whose window holds it. Columns outside x load as 0 (masked loads:
 * nothing outside a row is touched), rows outside it are 0 vectors, so each output is
 * bias + every tap's FMA in order k = ki·kw + kj, padding included: the bits of
 * nrv_depthwise on the padded plane, with no plane built (its copy, zeroing and, at stride
 * 2, the split into phases cost more than the taps: 3x3 stride 2, 96 ch 112 -> 56, went
 * from 1000 to 200 us). */
#define DWR_MAX_K 7

/* One register block: output rows [oy0, oy0 + R) x columns [ox0, ox0 + VL), m the column
 * block's load masks (stride 1: tap kj's vector; stride 2: pair p's two) and out_mask its
 * output lanes. FULL (a constant): every input column the block reads is inside x and all
 * VL outputs exist, so plain loads and stores, and no masks: a masked load costs several
 * plain ones on AMD (16 ch 112x112 3x3: 204 -> 121 us with interior blocks unmasked). */
static inline __attribute__((always_inline)) void dwr_block(const int K, const int S, const int D, const int R,
                                                            const int FULL, const nrv_dw_geom *g, const float *x,
                                                            const vf *wv, float bias, float *y, int64_t oy0,
                                                            int64_t ox0, const vtail *m, vtail out_mask) {
    const int64_t ih = g->ih, iw = g->iw, oh = g->oh, ow = g->ow;
    const int P = (K + 1) / 2; /* stride 2: vector pairs per input row */
    const int64_t c0 = ox0 * S - g->pw; /* input column of tap 0, output lane 0 */
    vf acc[8];
    for (int i = 0; i < R; i++) acc[i] = vset1(bias);
    const int64_t r0 = oy0 * S - g->ph;
#pragma GCC unroll 32
    for (int t = 0; t < (R - 1) * S + (K - 1) * D + 1; t++) {
        const int64_t r = r0 + t;
        vf xk[DWR_MAX_K];
        if (r >= 0 && r < ih) {
            const float *row = x + r * iw + c0;
            if (S == 1) {
#pragma GCC unroll 8
                for (int kj = 0; kj < K; kj++) xk[kj] = FULL ? vload(row + kj * D) : vload_tail(row + kj * D, m[kj]);
            } else {
#pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    const vf lo = FULL ? vload(row + 2 * p) : vload_tail(row + 2 * p, m[2 * p]);
                    const vf hi = FULL ? vload(row + 2 * p + VL) : vload_tail(row + 2 * p + VL, m[2 * p + 1]);
                    xk[2 * p] = vevens(lo, hi);
                    if (2 * p + 1 < K) xk[2 * p + 1] = vodds(lo, hi);
                }
            }
        } else {
#pragma GCC unroll 8
            for (int kj = 0; kj < K; kj++) xk[kj] = vzero();
        }
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const int d = t - i * S, ki = d / D; /* this row is tap row ki of output row i */
            if (d < 0 || d % D || ki >= K) continue;
#pragma GCC unroll 8
            for (int kj = 0; kj < K; kj++) acc[i] = vfmadd(wv[ki * K + kj], xk[kj], acc[i]);
        }
    }
    for (int i = 0; i < R && oy0 + i < oh; i++) {
        if (FULL) vstore(y + (oy0 + i) * ow + ox0, acc[i]);
        else vstore_tail(y + (oy0 + i) * ow + ox0, out_mask, acc[i]);
    }
}

/* One channel: column blocks of VL outputs, each swept down the rows in register blocks of
 * R rows (masks once per column block). */
static inline __attribute__((always_inline)) void dwr_channel(const int K, const int S, const int D,
                                                              const nrv_dw_geom *g, const float *x, const float *w,
                                                              float bias, float *y) {
    const int R = K == 3 ? 8 : 4;
    const int64_t iw = g->iw;
    const int P = (K + 1) / 2;
    /* the weights broadcast once, read by the FMAs as memory operands (broadcast in the
     * loop, GCC hoists all K·K of them into registers and spills) */
    vf wv[DWR_MAX_K * DWR_MAX_K];
    for (int k = 0; k < K * K; k++) wv[k] = vset1(w[k]);
    /* input columns a block reads from its tap-0 column on: stride 1 (K-1)·D + VL, stride 2
     * the last pair's two vectors */
    const int64_t span = S == 1 ? (K - 1) * D + VL : 2 * (P - 1) + 2 * VL;
    for (int64_t ox0 = 0; ox0 < g->ow; ox0 += VL) {
        const int64_t c0 = ox0 * S - g->pw; /* input column of tap 0, output lane 0 */
        if (c0 >= 0 && c0 + span <= iw && ox0 + VL <= g->ow) {
            for (int64_t oy0 = 0; oy0 < g->oh; oy0 += R)
                dwr_block(K, S, D, R, 1, g, x, wv, bias, y, oy0, ox0, NULL, vtail_mask(VL));
            continue;
        }
        vtail m[2 * DWR_MAX_K];
        if (S == 1)
            for (int kj = 0; kj < K; kj++) m[kj] = vrange_mask(-(c0 + kj * D), iw - (c0 + kj * D));
        else
            for (int u = 0; u < 2 * P; u++) {
                const int64_t c = c0 + 2 * (u / 2) + (u % 2) * VL;
                m[u] = vrange_mask(-c, iw - c);
            }
        const vtail out_mask = vrange_mask(0, g->ow - ox0);
        for (int64_t oy0 = 0; oy0 < g->oh; oy0 += R)
            dwr_block(K, S, D, R, 0, g, x, wv, bias, y, oy0, ox0, m, out_mask);
    }
}

void X86FN(nrv_depthwise_rows)(const nrv_dw_geom *g, int64_t c, const float *x, const float *w, const float *bias,
                               float *y) {
    NRV_DW_ROWS_CHANNELS(g, c, x, w, bias, y, dwr_channel);
}
