/* linear_w8_neon.c — NEON int8-weight linear layer (w8a32), baseline ARMv8.0 Advanced SIMD:
 *   y[r, o] = s[o] · Σ_k x[r, k]·q[o, k] + z[o] · Σ_k x[r, k] + b[o],
 * the template neon/linear_w8_neon_impl.h with int8 weights (s8 → s16 → s32 → f32, exact).
 *
 * This file also holds its one-entry dispatch table (nrv_variants_neon_w8, added by
 * dispatch.c after nrv_variants_neon). */
#include <arm_neon.h>
#include <stdint.h>

static inline void w8_widen8(const int8_t *p, float32x4_t *lo, float32x4_t *hi) {
    const int16x8_t w16 = vmovl_s8(vld1_s8(p));
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w16)));
    *hi = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w16)));
}
static inline float w8_widen1(int8_t v) { return (float)v; }

#include "linear_w8_neon_impl.h"

void nrv_linear_w8_neon(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s, const float *z,
                        int64_t sz_stride, const float *b, int64_t out, float *y) {
    w8_drive(w8_no_of_rows[rows < W8_R ? rows : W8_R], 1, w8_rows, w8_row_sum, x, rows, in, q, s, z, sz_stride, b,
             out, y, out);
}

const nrv_kernel_variant nrv_variants_neon_w8[] = {
    {.op = NRV_OP_LINEAR_W8, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON,
     .fn.linear_w8 = nrv_linear_w8_neon},
    {.name = NULL},
};
