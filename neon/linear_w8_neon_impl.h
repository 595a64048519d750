/* linear_w8_neon_impl.h — the NEON weight-widening linear layer, baseline ARMv8.0 Advanced
 * SIMD, written once for every stored weight type: int8 (linear_w8_neon.c, w8a32)
 *   y[r, o] = s[o] · Σ_k x[r, k]·q[o, k] + z[o] · Σ_k x[r, k] + b[o]
 * and IEEE half (linear_f16_neon.c: s = 1, no z).
 *
 * The x86 template's scheme (native/src/x86/linear_w8_impl.h) with 4-lane vectors: q is
 * read in place ([out, in]), 8 values per step widened in registers (the includer's
 * w8_widen8: int8 s8 → s16 → s32 → f32, exact; fp16 fcvtl / fcvtl2, exact) and FMA'd into one
 * accumulator per (row, output) against two vectors of x; scale, zero point and bias are
 * applied once per output after the horizontal sum. NO rows of q (L1-resident) meet every
 * block of up to 4 rows of x, so q streams once per call, and the next group of NO rows is
 * prefetched while one is used (on x86 that took one row over a 13.6 MB q from 10 to 17-20
 * GB/s; not yet measured on an ARM board). NO comes from the row count alone (1 row: 8
 * outputs, 8 FMA chains), and each output has its own accumulator and k order, so splitting
 * the outputs across calls does not change any value.
 *
 * The includer defines W8_WT (the weight's element type, default int8_t), optionally
 * W8_PF_LOCALITY, and, before including this, static inline w8_widen8(const W8_WT *p, float32x4_t *lo, float32x4_t *hi)
 * (8 weights as floats) and float w8_widen1(W8_WT v) (one, for the k tail). */
#include "neon_common.h"
#include "kernels.h"

#define W8_R 4
#define W8_NO_MAX 8
#define W8_ROWS_CHUNK 64
#ifndef W8_PF_LOCALITY
#define W8_PF_LOCALITY 3 /* __builtin_prefetch locality of the next group: 3 = L1 */
#endif
/* 32 q registers: 8x1, 8x2, 6x3, 4x4 accumulators + 2 x vectors per row + 2 widened q */
static const int w8_no_of_rows[W8_R + 1] = {0, 8, 8, 6, 4};

#include "linear_w8_common.h"

static inline float w8_row_sum(const float *x, int64_t n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
    int64_t p = 0;
    for (; p + 8 <= n; p += 8) {
        a0 = vaddq_f32(a0, vld1q_f32(x + p));
        a1 = vaddq_f32(a1, vld1q_f32(x + p + 4));
    }
    float t = 0.0f;
    for (; p < n; p++) t += x[p];
    return vaddvq_f32(vaddq_f32(a0, a1)) + t;
}

NRV_NEON_INLINE void w8_block(const int R, const int NO, const float *x, int64_t in, const W8_WT *q,
                              const W8_WT *pf, int64_t nout, const float *s, const float *z, int64_t st,
                              const float *b, const float *rsum, float *y, int64_t ldy) {
    const W8_WT *qo[W8_NO_MAX];
    for (int o = 0; o < NO; o++) qo[o] = q + (o < nout ? o : 0) * in;
    float32x4_t acc[W8_R][W8_NO_MAX];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = vdupq_n_f32(0.0f);
    int64_t p = 0;
    for (; p + 8 <= in; p += 8) {
        if (pf) /* NO·8 weights of the next group per step: the rate this block consumes q */
            for (int j = 0; j < (NO * 8 * (int)sizeof(W8_WT) + 63) / 64; j++)
                __builtin_prefetch((const char *)(pf + p * NO) + 64 * j, 0, W8_PF_LOCALITY);
        float32x4_t x0[W8_R], x1[W8_R];
        for (int r = 0; r < R; r++) {
            x0[r] = vld1q_f32(x + r * in + p);
            x1[r] = vld1q_f32(x + r * in + p + 4);
        }
        for (int o = 0; o < NO; o++) {
            float32x4_t w0, w1;
            w8_widen8(qo[o] + p, &w0, &w1);
            for (int r = 0; r < R; r++) acc[r][o] = vfmaq_f32(vfmaq_f32(acc[r][o], x0[r], w0), x1[r], w1);
        }
    }
    /* k tail (< 8 elements) */
    float tail[W8_R][W8_NO_MAX];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) {
            float t = 0.0f;
            for (int64_t k = p; k < in; k++) t += x[r * in + k] * w8_widen1(qo[o][k]);
            tail[r][o] = t;
        }
    for (int r = 0; r < R; r++) {
        float *yr = y + r * ldy;
        for (int o = 0; o < NO && o < nout; o++) {
            yr[o] = w8_epilogue(vaddvq_f32(acc[r][o]) + tail[r][o], o, s, z, st, b, rsum[r]);
        }
    }
}

#define W8_CASE(R_, NO_)                                                                                     \
    if (rr == (R_) && no == (NO_)) {                                                                         \
        w8_block(R_, NO_, x, in, q, pf, nout, s, z, st, b, rsum, y, ldy);                                    \
        return;                                                                                              \
    }

static __attribute__((noinline)) void w8_rows(int64_t rr, int no, const float *x, int64_t in, const W8_WT *q,
                                              const W8_WT *pf, int64_t nout, const float *s, const float *z,
                                              int64_t st, const float *b, const float *rsum, float *y,
                                              int64_t ldy) {
    W8_CASE(1, 8)
    W8_CASE(2, 8)
    W8_CASE(3, 6)
    W8_CASE(4, 4)
    W8_CASE(1, 4) /* the last rows of a call with >= 4 rows */
    W8_CASE(2, 4)
    W8_CASE(3, 4)
}
#undef W8_CASE
