/* activation_neon.c — NEON element-wise activations (relu, gelu, gelu_tanh, sigmoid, tanh)
 * and row-wise softmax, built on the vector exp / tanh / erfc of neon_common.h.
 *
 * Where the reference formula cancels catastrophically (1 + erf(z) and 1 + tanh(u) for
 * negative arguments), these kernels use an equivalent form without the cancellation
 * (erfc(|z|), 2e/(1 + e)); they agree with the reference within its own rounding and are
 * more accurate than it in the far negative tail. Infinities and NaN give the same
 * results as the reference formulas (e.g. gelu(-inf) is NaN in both, as 0.5·x·0).
 */
#include "neon_common.h"
#include "neon_kernels.h"

/* Applies f to n floats: 16 per iteration (4 independent vectors keep both FMA pipes busy
 * through the long polynomial chains), then 4, then the last 1-3 through a zero-padded
 * vector, so the tail gets exactly the same approximation as the body. Every element is
 * loaded before its result is stored: y may be x. f is a compile-time constant after
 * inlining, so the call is inlined, not indirect. */
NRV_NEON_INLINE void map_unary(const float *x, int64_t n, float *y, float32x4_t (*f)(float32x4_t)) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        const float32x4_t v2 = vld1q_f32(x + i + 8), v3 = vld1q_f32(x + i + 12);
        vst1q_f32(y + i, f(v0));
        vst1q_f32(y + i + 4, f(v1));
        vst1q_f32(y + i + 8, f(v2));
        vst1q_f32(y + i + 12, f(v3));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, f(vld1q_f32(x + i)));
    if (i < n) {
        float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t j = 0; i + j < n; j++) buf[j] = x[i + j];
        vst1q_f32(buf, f(vld1q_f32(buf)));
        for (int64_t j = 0; i + j < n; j++) y[i + j] = buf[j];
    }
}

/* x > 0 ? x : 0 as a bit mask, so NaN and -0 both give +0 exactly like the reference
 * (vmaxq would propagate NaN, and FMAXNM would keep -0). */
NRV_NEON_INLINE float32x4_t relu4(float32x4_t x) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), vcgtq_f32(x, vdupq_n_f32(0.0f))));
}

/* sigmoid with e = e^-|x| <= 1, so nothing overflows: 1/(1 + e) for x >= 0, e/(1 + e)
 * below (the reference's sign split). */
NRV_NEON_INLINE float32x4_t sigmoid4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = nrv_neon_exp(vnegq_f32(vabsq_f32(x)));
    const float32x4_t num = vbslq_f32(vcgeq_f32(x, vdupq_n_f32(0.0f)), one, e); /* NaN: e, i.e. NaN */
    return vdivq_f32(num, vaddq_f32(one, e));
}

NRV_NEON_INLINE float32x4_t tanh4(float32x4_t x) { return nrv_neon_tanh(x); }

/* x · sigmoid(x): sigmoid4's values times x, what the Sigmoid and Mul ops give. */
NRV_NEON_INLINE float32x4_t silu4(float32x4_t x) { return vmulq_f32(x, sigmoid4(x)); }

/* x · min(max(x·(1/6) + 1/2, 0), 1), the product and the sum rounded apart as in the
 * reference (vmulq then vaddq: no FMA); FMAX/FMIN propagate NaN, so NaN stays NaN. */
NRV_NEON_INLINE float32x4_t hard_swish4(float32x4_t x) {
    const float32x4_t t = vaddq_f32(vmulq_n_f32(x, 1.0f / 6.0f), vdupq_n_f32(0.5f));
    return vmulq_f32(x, vminq_f32(vmaxq_f32(t, vdupq_n_f32(0.0f)), vdupq_n_f32(1.0f)));
}

/* gelu(x) = x/2 · (1 + erf(x/√2)). With z = |x|/√2 the factor (1 + erf) is 1 ± erf(z) near
 * zero, and beyond 0.875 it is 2 - erfc(z) for x > 0 and erfc(z) itself for x < 0, which
 * keeps full relative accuracy where 1 + erf(z) would be a difference of nearly equal
 * numbers. */
NRV_NEON_INLINE float32x4_t gelu4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t z = vmulq_n_f32(vabsq_f32(x), 0.707106769f); /* == |x · (1/√2)|, as the reference rounds it */
    const float32x4_t near = vaddq_f32(one, nrv_neon_copysign(nrv_neon_erf_small(z), x));
    const float32x4_t c = nrv_neon_erfc_large(z);
    const float32x4_t far = vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0f)), c, vsubq_f32(vdupq_n_f32(2.0f), c));
    /* NaN fails the compare and takes the erfc path, which returns NaN. */
    const float32x4_t factor = vbslq_f32(vcltq_f32(z, vdupq_n_f32(0.875f)), near, far);
    return vmulq_f32(vmulq_n_f32(x, 0.5f), factor);
}

/* GPT-2 gelu: x/2 · (1 + tanh(u)), u = √(2/π)·(x + 0.044715x³), with u rounded exactly as
 * the reference computes it. With e = e^-2|u| <= 1: 1 + tanh(u) = 2/(1 + e) for u >= 0 and
 * 2e/(1 + e) for u < 0, so y = x·(u < 0 ? e : 1)/(1 + e): no cancellation, no overflow. */
NRV_NEON_INLINE float32x4_t gelu_tanh4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t cube = vmulq_n_f32(x, 0.044715f);
    cube = vmulq_f32(vmulq_f32(cube, x), x);
    const float32x4_t u = vmulq_n_f32(vaddq_f32(x, cube), 0.797884583f);
    const float32x4_t e = nrv_neon_exp(vmulq_n_f32(vabsq_f32(u), -2.0f));
    const float32x4_t num = vbslq_f32(vcltq_f32(u, vdupq_n_f32(0.0f)), e, one);
    return vdivq_f32(vmulq_f32(x, num), vaddq_f32(one, e));
}

void nrv_relu_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, relu4); }
void nrv_gelu_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, gelu4); }
void nrv_gelu_tanh_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, gelu_tanh4); }
void nrv_sigmoid_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, sigmoid4); }
void nrv_tanh_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, tanh4); }
void nrv_silu_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, silu4); }
void nrv_hard_swish_neon(const float *x, int64_t n, float *y) { map_unary(x, n, y, hard_swish4); }

/* Row-wise softmax in three passes: max (NaN-propagating, so a NaN anywhere in the row
 * makes the whole row NaN, as in the reference), exp(x - max) stored into y while summing,
 * then one multiply by 1/sum. y may be x: each pass is element-wise. */
void nrv_softmax_neon(const float *x, int64_t rows, int64_t dim, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;

        float32x4_t m0 = vdupq_n_f32(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        int64_t j = 0;
        for (; j + 16 <= dim; j += 16) {
            m0 = vmaxq_f32(m0, vld1q_f32(xr + j));
            m1 = vmaxq_f32(m1, vld1q_f32(xr + j + 4));
            m2 = vmaxq_f32(m2, vld1q_f32(xr + j + 8));
            m3 = vmaxq_f32(m3, vld1q_f32(xr + j + 12));
        }
        for (; j + 4 <= dim; j += 4) m0 = vmaxq_f32(m0, vld1q_f32(xr + j));
        float mx = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m0, m1), vmaxq_f32(m2, m3)));
        for (; j < dim; j++) mx = (xr[j] > mx || isnan(xr[j])) ? xr[j] : mx;

        const float32x4_t vmx = vdupq_n_f32(mx);
        float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
        j = 0;
        for (; j + 16 <= dim; j += 16) {
            const float32x4_t e0 = nrv_neon_exp(vsubq_f32(vld1q_f32(xr + j), vmx));
            const float32x4_t e1 = nrv_neon_exp(vsubq_f32(vld1q_f32(xr + j + 4), vmx));
            const float32x4_t e2 = nrv_neon_exp(vsubq_f32(vld1q_f32(xr + j + 8), vmx));
            const float32x4_t e3 = nrv_neon_exp(vsubq_f32(vld1q_f32(xr + j + 12), vmx));
            vst1q_f32(yr + j, e0);
            vst1q_f32(yr + j + 4, e1);
            vst1q_f32(yr + j + 8, e2);
            vst1q_f32(yr + j + 12, e3);
            s0 = vaddq_f32(s0, e0);
            s1 = vaddq_f32(s1, e1);
            s2 = vaddq_f32(s2, e2);
            s3 = vaddq_f32(s3, e3);
        }
        for (; j + 4 <= dim; j += 4) {
            const float32x4_t e = nrv_neon_exp(vsubq_f32(vld1q_f32(xr + j), vmx));
            vst1q_f32(yr + j, e);
            s0 = vaddq_f32(s0, e);
        }
        float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
        if (j < dim) { /* 1-3 left: the same vector exp on a padded vector, valid lanes only */
            float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t t = 0; j + t < dim; t++) buf[t] = xr[j + t];
            vst1q_f32(buf, nrv_neon_exp(vsubq_f32(vld1q_f32(buf), vmx)));
            for (int64_t t = 0; j + t < dim; t++) {
                yr[j + t] = buf[t];
                sum += buf[t];
            }
        }

        const float inv = 1.0f / sum;
        j = 0;
        for (; j + 4 <= dim; j += 4) vst1q_f32(yr + j, vmulq_n_f32(vld1q_f32(yr + j), inv));
        for (; j < dim; j++) yr[j] *= inv;
    }
}
