/* depthwise_neon.c — the op "depthwise_rows" (nrv_depthwise_channels_fn contract, kernels.h)
 * with 4-lane NEON vectors along each output row: square 3x3, 5x5 and 7x7 kernels, stride 1
 * or 2, or dilation 2 at stride 1; the x86 variants' design (x86/depthwise_impl.h), which there replaced a
 * padded plane per channel (its copy, zeroing and stride-2 phase split cost more than the
 * taps). A block is R output rows of one vector; its input rows are read once each, top to
 * bottom, and each row's tap vectors feed every output row whose window holds it. Stride 2
 * reads its even and odd columns with vld2q (one load splits them). NEON has no masked
 * loads: narrow rows are staged zero-padded (below); in wide ones the vectors whose taps
 * reach outside x are assembled lane by lane; rows outside x are zero vectors.
 *
 * Arithmetic: a multiply then an add per tap, in order k = ki·kw + kj from the bias, which is
 * what the reference plane kernel (kernels/depthwise.c, the variant aarch64 runs for
 * "depthwise") does, so op conv gives the same bits on either path.
 */
#include <arm_neon.h>
#include <string.h>

#include "neon_kernels.h"

#define DWRN_MAX_K 7

/* Columns c .. c+3 of one row of x, 0 outside [0, iw). */
static inline float32x4_t dwrn_edge4(const float *row, int64_t c, int64_t iw) {
    float t[4];
    for (int j = 0; j < 4; j++) t[j] = c + j >= 0 && c + j < iw ? row[c + j] : 0.0f;
    return vld1q_f32(t);
}

/* Columns c .. c+7 of one row of x split into even and odd lanes, 0 outside [0, iw). */
static inline float32x4x2_t dwrn_edge8(const float *row, int64_t c, int64_t iw) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = c + j >= 0 && c + j < iw ? row[c + j] : 0.0f;
    return vld2q_f32(t);
}

/* Narrow rows (outputs a few vectors wide, where every column block touches an edge) are
 * staged per block of rows into a zero-padded tile: stage[t][b] = x[r0 + t][b - pw], 0
 * outside x, so every load is a plain vector load. Wider rows read x in place and assemble
 * only their edge blocks lane by lane. */
#define DWRN_STAGE_FLOATS 2048

static inline __attribute__((always_inline)) void dwrn_channel(const int K, const int S, const int D,
                                                               const nrv_dw_geom *g, const float *x, const float *w,
                                                               float bias, float *y) {
    const int R = K == 3 ? 8 : 4;
    const int P = (K + 1) / 2; /* stride 2: pairs of 4 columns per input row */
    const int T = (R - 1) * S + (K - 1) * D + 1; /* input rows of a block */
    const int64_t ih = g->ih, iw = g->iw, oh = g->oh, ow = g->ow, pw = g->pw;
    /* staged row length: up to the last column the last block's loads reach */
    const int64_t ow4 = (ow + 3) / 4 * 4, span = (ow4 - 4) * S + (S == 1 ? (K - 1) * D + 4 : 2 * (P - 1) + 8);
    const int staged = ow4 <= 16 && T * span <= DWRN_STAGE_FLOATS;
    float stage[DWRN_STAGE_FLOATS];
    for (int64_t oy0 = 0; oy0 < oh; oy0 += R) {
        const int64_t r0 = oy0 * S - g->ph;
        if (staged)
            for (int t = 0; t < T; t++) {
                const int64_t r = r0 + t;
                float *dst = stage + t * span;
                /* x's columns land at [lo, hi) of the staged row; the rest is padding */
                const int64_t lo = r >= 0 && r < ih ? (pw < span ? pw : span) : span;
                const int64_t hi = lo < span ? (pw + iw < span ? pw + iw : span) : span;
                memset(dst, 0, (size_t)lo * sizeof(float));
                if (hi > lo) memcpy(dst + lo, x + r * iw, (size_t)(hi - lo) * sizeof(float));
                memset(dst + hi, 0, (size_t)(span - hi) * sizeof(float));
            }
        for (int64_t ox0 = 0; ox0 < ow; ox0 += 4) {
            const int64_t c0 = ox0 * S - pw; /* input column of tap 0, output lane 0 */
            /* every load of this column block inside the row: plain vector loads from x */
            const int inside = c0 >= 0 && (S == 1 ? c0 + (K - 1) * D + 3 < iw : c0 + 2 * (P - 1) + 7 < iw);
            float32x4_t acc[8];
            for (int i = 0; i < R; i++) acc[i] = vdupq_n_f32(bias);
#pragma GCC unroll 32
            for (int t = 0; t < T; t++) {
                const int64_t r = r0 + t;
                float32x4_t xk[DWRN_MAX_K];
                if (staged || (r >= 0 && r < ih)) {
                    const float *row = staged ? NULL : x + r * iw;
                    /* column c0 of the row: in the stage, or in x */
                    const float *src = staged ? stage + t * span + ox0 * S : row + c0;
                    const int plain = staged || inside;
                    if (S == 1) {
#pragma GCC unroll 8
                        for (int kj = 0; kj < K; kj++)
                            xk[kj] = plain ? vld1q_f32(src + kj * D) : dwrn_edge4(row, c0 + kj * D, iw);
                    } else {
#pragma GCC unroll 8
                        for (int p = 0; p < P; p++) {
                            const float32x4x2_t eo = plain ? vld2q_f32(src + 2 * p) : dwrn_edge8(row, c0 + 2 * p, iw);
                            xk[2 * p] = eo.val[0];
                            if (2 * p + 1 < K) xk[2 * p + 1] = eo.val[1];
                        }
                    }
                } else {
#pragma GCC unroll 8
                    for (int kj = 0; kj < K; kj++) xk[kj] = vdupq_n_f32(0.0f);
                }
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) {
                    const int d = t - i * S, ki = d / D; /* this row is tap row ki of output row i */
                    if (d < 0 || d % D || ki >= K) continue;
#pragma GCC unroll 8
                    for (int kj = 0; kj < K; kj++) acc[i] = vaddq_f32(acc[i], vmulq_n_f32(xk[kj], w[ki * K + kj]));
                }
            }
            const int64_t n = ow - ox0 < 4 ? ow - ox0 : 4;
            for (int i = 0; i < R && oy0 + i < oh; i++) {
                float *dst = y + (oy0 + i) * ow + ox0;
                if (n == 4) {
                    vst1q_f32(dst, acc[i]);
                } else {
                    float t4[4];
                    vst1q_f32(t4, acc[i]);
                    for (int64_t j = 0; j < n; j++) dst[j] = t4[j];
                }
            }
        }
    }
}

void nrv_depthwise_rows_neon(const nrv_dw_geom *g, int64_t c, const float *x, const float *w, const float *bias,
                             float *y) {
    NRV_DW_ROWS_CHANNELS(g, c, x, w, bias, y, dwrn_channel);
}
