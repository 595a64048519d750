/* linear_f16_neon.c — NEON fp16-weight linear layer (precision "fp16"), baseline ARMv8.0
 * Advanced SIMD: y[r, o] = Σ_k x[r, k]·float(w[o, k]) + b[o], the template
 * neon/linear_w8_neon_impl.h with half weights widened by fcvtl / fcvtl2 (vcvt_f32_f16,
 * vcvt_high_f32_f16: part of every AArch64 NEON unit, exact for every half) and s = 1, no z.
 *
 * This file also holds its one-entry dispatch table (nrv_variants_neon_f16, added by
 * dispatch.c after nrv_variants_neon_w8). */
#include <arm_neon.h>
#include <stdint.h>

#include "kernels.h"

#define W8_WT uint16_t
/* Prefetch the next group into L2, not L1: fp16 rows are twice the bytes, and on x86 a group of
 * long rows prefetched into L1 overflowed it (linear_w8_impl.h); not yet measured on an ARM
 * board. */
#define W8_PF_LOCALITY 2

static inline void w8_widen8(const uint16_t *p, float32x4_t *lo, float32x4_t *hi) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}
static inline float w8_widen1(uint16_t v) { return nrv_half_to_float(v); }

#include "linear_w8_neon_impl.h"

void nrv_linear_f16_neon(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                         float *y, int64_t ldy) {
    static const float one = 1.0f; /* s: 1·dot is dot exactly */
    w8_drive(w8_no_of_rows[rows < W8_R ? rows : W8_R], 1, w8_rows, w8_row_sum, x, rows, in, w, &one, NULL, 0, b,
             out, y, ldy);
}

const nrv_kernel_variant nrv_variants_neon_f16[] = {
    {.op = NRV_OP_LINEAR_F16, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON,
     .fn.linear_f16 = nrv_linear_f16_neon},
    {.name = NULL},
};
