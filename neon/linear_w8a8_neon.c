/* linear_w8a8_neon.c — NEON int8 x int8 linear layer (w8a8), baseline ARMv8.0 Advanced SIMD
 * (smull + sadalp; no dotprod needed).
 *
 * Math and epilogue order: native/src/kernels/linear_w8a8.c (bit-identical to that
 * reference for finite x); packed weight layout: kernels.h. Rows are quantised to signed
 * int8 (no +128, so the colsum after the blocks is not used) into a stack buffer, then a
 * register tile of 2 rows x 16 outputs: per 4 k, the four 16-byte groups of a weight block
 * (4 outputs x 4 k each) are multiplied (vmull_s8, exact in int16: |xq·q| <= 127·128)
 * against the row's 4 int8 repeated twice, and vpadalq_s16 adds adjacent products into
 * int32 (two lanes per output); vpaddq_s32 joins each output's two lanes at the end.
 *
 * This file also holds its one-entry dispatch table (nrv_variants_neon_w8a8, added by
 * dispatch.c after nrv_variants_neon).
 */
#include <arm_neon.h>
#include <string.h>

#include <math.h>

#include "kernels.h"

#define W8A8_MR 2
#define W8A8_XQ_BYTES 32768

/* Quantises row x (n floats) into xq (kp int8, pad 0); returns sx, sets *rsum (when want_sum). */
static float quantise_row(const float *x, int64_t n, int64_t kp, int8_t *xq, int want_sum, float *rsum) {
    float32x4_t m = vdupq_n_f32(0.0f);
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) {
        const float32x4_t a = vld1q_f32(x + p), b = vld1q_f32(x + p + 4), c = vld1q_f32(x + p + 8),
                          d = vld1q_f32(x + p + 12);
        m = vmaxq_f32(m, vmaxq_f32(vmaxq_f32(vabsq_f32(a), vabsq_f32(b)), vmaxq_f32(vabsq_f32(c), vabsq_f32(d))));
    }
    for (; p < n; p++) m = vmaxq_f32(m, vdupq_n_f32(fabsf(x[p])));
    const float amax = vmaxvq_f32(m);
    float inv, sx;
    nrv_w8a8_row_scale(amax, &inv, &sx);
    const float32x4_t vinv = vdupq_n_f32(inv), hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
    for (p = 0; p < kp; p += 8) {
        float t[8] = {0};
        const float *src = x + p;
        if (p + 8 > n) {
            if (p < n) memcpy(t, x + p, (size_t)(n - p) * sizeof(float));
            src = t;
        }
        const float32x4_t a = vmaxq_f32(vminq_f32(vmulq_f32(vld1q_f32(src), vinv), hi), lo);
        const float32x4_t b = vmaxq_f32(vminq_f32(vmulq_f32(vld1q_f32(src + 4), vinv), hi), lo);
        const int16x8_t h = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(a)), vmovn_s32(vcvtnq_s32_f32(b)));
        const int8x8_t q = vmovn_s16(h);
        if (kp - p >= 8) vst1_s8(xq + p, q);
        else { /* kp - p == 4 */
            const int32_t lo4 = vget_lane_s32(vreinterpret_s32_s8(q), 0);
            memcpy(xq + p, &lo4, 4);
        }
    }
    *rsum = 0.0f;
    if (want_sum) { /* sx·Σ xq, as the reference */
        int32_t isum = 0;
        for (p = 0; p < n; p++) isum += xq[p];
        *rsum = sx * (float)isum;
    }
    return sx;
}

static inline __attribute__((always_inline)) void tile(const int R, const int8_t *xq, int64_t kp, const int8_t *packed,
                                                       int64_t n0, int64_t nvalid, const float *sx, const float *rsum,
                                                       const float *s, const float *z, int64_t st, const float *b,
                                                       float *y, int64_t ldy) {
    const int64_t kb_n = kp / 4;
    const int8_t *w = packed + (n0 / 16) * kb_n * 64;
    int32x4_t acc[W8A8_MR][8];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 8; i++) acc[r][i] = vdupq_n_s32(0);
    for (int64_t kb = 0; kb < kb_n; kb++) {
        const int8x16_t w0 = vld1q_s8(w + kb * 64), w1 = vld1q_s8(w + kb * 64 + 16), w2 = vld1q_s8(w + kb * 64 + 32),
                        w3 = vld1q_s8(w + kb * 64 + 48);
        for (int r = 0; r < R; r++) {
            int32_t xv;
            memcpy(&xv, xq + r * kp + kb * 4, 4);
            const int8x8_t xp = vreinterpret_s8_s32(vdup_n_s32(xv));
            acc[r][0] = vpadalq_s16(acc[r][0], vmull_s8(vget_low_s8(w0), xp));
            acc[r][1] = vpadalq_s16(acc[r][1], vmull_s8(vget_high_s8(w0), xp));
            acc[r][2] = vpadalq_s16(acc[r][2], vmull_s8(vget_low_s8(w1), xp));
            acc[r][3] = vpadalq_s16(acc[r][3], vmull_s8(vget_high_s8(w1), xp));
            acc[r][4] = vpadalq_s16(acc[r][4], vmull_s8(vget_low_s8(w2), xp));
            acc[r][5] = vpadalq_s16(acc[r][5], vmull_s8(vget_high_s8(w2), xp));
            acc[r][6] = vpadalq_s16(acc[r][6], vmull_s8(vget_low_s8(w3), xp));
            acc[r][7] = vpadalq_s16(acc[r][7], vmull_s8(vget_high_s8(w3), xp));
        }
    }
    float sb[16], zb[16], bb[16];
    for (int j = 0; j < 16; j++) {
        const int64_t o = n0 + j;
        sb[j] = o < n0 + nvalid ? s[st ? o : 0] : 0.0f;
        zb[j] = z && o < n0 + nvalid ? z[st ? o : 0] : 0.0f;
        bb[j] = b && o < n0 + nvalid ? b[o] : 0.0f;
    }
    for (int r = 0; r < R; r++) {
        float out[16];
        for (int g = 0; g < 4; g++) {
            const float32x4_t a = vcvtq_f32_s32(vpaddq_s32(acc[r][2 * g], acc[r][2 * g + 1]));
            const float32x4_t sc = vmulq_f32(vld1q_f32(sb + 4 * g), vdupq_n_f32(sx[r]));
            const float32x4_t t = z ? vmulq_f32(vld1q_f32(zb + 4 * g), vdupq_n_f32(rsum[r])) : vdupq_n_f32(0.0f);
            float32x4_t v = vfmaq_f32(t, sc, a);
            if (b) v = vaddq_f32(v, vld1q_f32(bb + 4 * g));
            vst1q_f32(out + 4 * g, v);
        }
        memcpy(y + r * ldy + n0, out, (size_t)nvalid * sizeof(float));
    }
}

void nrv_linear_w8a8_neon(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y) {
    const int64_t kp = (in + 3) / 4 * 4;
    int64_t mr = W8A8_XQ_BYTES / kp;
    if (mr > W8A8_MR) mr = W8A8_MR;
    int8_t xq[W8A8_XQ_BYTES];
    float sx[W8A8_MR], rsum[W8A8_MR];
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int R = (int)(rows - r0 < mr ? rows - r0 : mr);
        for (int r = 0; r < R; r++) sx[r] = quantise_row(x + (r0 + r) * in, in, kp, xq + r * kp, z != NULL, &rsum[r]);
        for (int64_t n0 = 0; n0 < out; n0 += 16) {
            const int64_t nv = out - n0 < 16 ? out - n0 : 16;
            if (R == 2) tile(2, xq, kp, packed, n0, nv, sx, rsum, s, z, sz_stride, b, y + r0 * out, out);
            else tile(1, xq, kp, packed, n0, nv, sx, rsum, s, z, sz_stride, b, y + r0 * out, out);
        }
    }
}

const nrv_kernel_variant nrv_variants_neon_w8a8[] = {
    {.op = NRV_OP_LINEAR_W8A8, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON,
     .fn.linear_w8a8 = nrv_linear_w8a8_neon},
    {.name = NULL},
};
