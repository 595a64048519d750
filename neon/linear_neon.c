/* linear_neon.c — NEON linear layer y = x·Wᵀ + b and the fused layernorm + linear.
 *
 * W is [out, in], so x rows and W rows are both contiguous along k: every output is a dot
 * product of two contiguous vectors, no packing needed. The register tile is 4 rows × 4
 * outputs: per 4 k it loads 4 x vectors and 4 W vectors and issues 16 FMAs into 16
 * independent accumulators (enough chains to hide FMA latency on both pipes, and 24 of the
 * 32 vector registers). Each W row is thus streamed once per 4 rows of x instead of once
 * per row. At the end the 4 accumulators of a row collapse into the 4 outputs with a
 * pairwise-add tree, which also lands them in one vector ready to store.
 *
 * Cache blocking: k is cut into chunks of LIN_KC (a 4-row x chunk is 8 KiB and stays in
 * L1 while W streams past it) and outputs into panels of LIN_NC (a 64 × 512 W panel,
 * 128 KiB, stays in L2 while every row block sweeps it). Partial sums of later chunks are
 * added into y, so the bias is added once, with the first chunk.
 */
#include "neon_common.h"
#include "neon_kernels.h"

#define LIN_KC 512 /* k per chunk; a multiple of 4 so only the last chunk has a k tail */
#define LIN_NC 64  /* outputs per W panel */
#define LNL_ROWS 8 /* rows the fused kernel normalises per block: 8 × LIN_KC floats = 16 KiB of stack */

/* Accumulates an MR × NR tile (MR, NR in 1..4, compile-time constants after inlining):
 * y[i][j] (+)= Σ_k x[i][k]·w[j][k] for k < len; x rows are ldx apart, w rows ldw apart,
 * y rows ldy apart. first: y = sum + bias[j] (bias may be NULL); else y += sum. */
NRV_NEON_INLINE void linear_tile(const int MR, const int NR, const float *x, int64_t ldx, const float *w,
                                 int64_t ldw, int64_t len, float *y, int64_t ldy, const float *bias,
                                 int first) {
    float32x4_t acc[4][4];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = vdupq_n_f32(0.0f);
    int64_t k = 0;
    if (MR == 1) {
        /* One row (batch-1 decode, the common edge case) gives only NR accumulator chains:
         * a second set over the next 4 k doubles the FMAs in flight. */
        float32x4_t acc2[4];
        for (int j = 0; j < NR; j++) acc2[j] = vdupq_n_f32(0.0f);
        for (; k + 8 <= len; k += 8) {
            const float32x4_t x0 = vld1q_f32(x + k), x1 = vld1q_f32(x + k + 4);
            for (int j = 0; j < NR; j++) {
                acc[0][j] = vfmaq_f32(acc[0][j], x0, vld1q_f32(w + j * ldw + k));
                acc2[j] = vfmaq_f32(acc2[j], x1, vld1q_f32(w + j * ldw + k + 4));
            }
        }
        for (int j = 0; j < NR; j++) acc[0][j] = vaddq_f32(acc[0][j], acc2[j]);
    }
    for (; k + 4 <= len; k += 4) {
        float32x4_t xv[4], wv[4];
        for (int i = 0; i < MR; i++) xv[i] = vld1q_f32(x + i * ldx + k);
        for (int j = 0; j < NR; j++) wv[j] = vld1q_f32(w + j * ldw + k);
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = vfmaq_f32(acc[i][j], xv[i], wv[j]);
    }
    /* k tail (< 4 elements, last chunk only). */
    float tail[4][4] = {{0.0f}};
    for (; k < len; k++)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) tail[i][j] += x[i * ldx + k] * w[j * ldw + k];
    for (int i = 0; i < MR; i++) {
        float *yi = y + i * ldy;
        if (NR == 4) {
            /* [Σacc0, Σacc1, Σacc2, Σacc3] in two rounds of pairwise adds. */
            float32x4_t s = vpaddq_f32(vpaddq_f32(acc[i][0], acc[i][1]), vpaddq_f32(acc[i][2], acc[i][3]));
            s = vaddq_f32(s, vld1q_f32(tail[i]));
            if (!first) s = vaddq_f32(vld1q_f32(yi), s);
            else if (bias) s = vaddq_f32(s, vld1q_f32(bias));
            vst1q_f32(yi, s);
        } else {
            for (int j = 0; j < NR; j++) {
                const float s = vaddvq_f32(acc[i][j]) + tail[i][j];
                yi[j] = !first ? yi[j] + s : (bias ? s + bias[j] : s);
            }
        }
    }
}

/* One k chunk of rows [0, rows) × outputs [0, out): x rows ldx apart starting at the
 * chunk, w rows `in` apart starting at the chunk, y rows `out` apart. Row blocks of 4,
 * output blocks of 4, then the 1-wide edges. */
static void linear_chunk(const float *x, int64_t ldx, int64_t rows, const float *w, int64_t in, int64_t len,
                         int64_t o_begin, int64_t o_end, float *y, int64_t out, const float *b, int first) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *xr = x + r * ldx;
        float *yr = y + r * out;
        int64_t o = o_begin;
        for (; o + 4 <= o_end; o += 4)
            linear_tile(4, 4, xr, ldx, w + o * in, in, len, yr + o, out, b ? b + o : NULL, first);
        for (; o < o_end; o++)
            linear_tile(4, 1, xr, ldx, w + o * in, in, len, yr + o, out, b ? b + o : NULL, first);
    }
    for (; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * out;
        int64_t o = o_begin;
        for (; o + 4 <= o_end; o += 4)
            linear_tile(1, 4, xr, ldx, w + o * in, in, len, yr + o, out, b ? b + o : NULL, first);
        for (; o < o_end; o++)
            linear_tile(1, 1, xr, ldx, w + o * in, in, len, yr + o, out, b ? b + o : NULL, first);
    }
}

void nrv_linear_neon(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                     float *y) {
    for (int64_t k0 = 0; k0 < in; k0 += LIN_KC) {
        const int64_t len = in - k0 < LIN_KC ? in - k0 : LIN_KC;
        for (int64_t o0 = 0; o0 < out; o0 += LIN_NC) {
            const int64_t o1 = out - o0 < LIN_NC ? out : o0 + LIN_NC;
            linear_chunk(x + k0, in, rows, w + k0, in, len, o0, o1, y, out, b, k0 == 0);
        }
    }
}

/* Fused layernorm + linear. Per block of up to LNL_ROWS rows: the mean and rstd of each
 * row (two passes over x, as in layernorm), then per k chunk the normalised values
 * (x - mean)·rstd·gamma + beta go into a 16 KiB stack block that stays in L1 and feeds
 * the same register tiles as linear, for every output. No normalised tensor is written to
 * memory, and each x element is normalised once per call, not once per output. */
void nrv_layernorm_linear_neon(const float *x, int64_t rows, int64_t in, const float *gamma,
                               const float *beta, float eps, const float *w, const float *b, int64_t out,
                               float *y) {
    float xn[LNL_ROWS * LIN_KC] __attribute__((aligned(64)));
    float mean[LNL_ROWS], rstd[LNL_ROWS];
    for (int64_t r0 = 0; r0 < rows; r0 += LNL_ROWS) {
        const int64_t nr = rows - r0 < LNL_ROWS ? rows - r0 : LNL_ROWS;
        for (int64_t i = 0; i < nr; i++) nrv_neon_row_stats(x + (r0 + i) * in, in, eps, &mean[i], &rstd[i]);
        for (int64_t k0 = 0; k0 < in; k0 += LIN_KC) {
            const int64_t len = in - k0 < LIN_KC ? in - k0 : LIN_KC;
            for (int64_t i = 0; i < nr; i++)
                nrv_neon_normalise(x + (r0 + i) * in + k0, len, mean[i], rstd[i], gamma + k0,
                                   beta ? beta + k0 : NULL, xn + i * LIN_KC);
            /* Outputs outer, one W tile (4 × len) at a time, rows inner: the tile is read
             * from memory once per block of rows and reused from L1 by both row groups. */
            for (int64_t o0 = 0; o0 < out; o0 += 4) {
                const int64_t o1 = out - o0 < 4 ? out : o0 + 4;
                linear_chunk(xn, LIN_KC, nr, w + k0, in, len, o0, o1, y + r0 * out, out, b, k0 == 0);
            }
        }
    }
}
