/* neon_common.h — building blocks shared by the NEON kernels: vectorised exp, tanh and
 * erfc, the two-pass row statistics of layer normalisation, and the per-row normalise step.
 *
 * Everything here is static inline (always_inline: the callers rely on the constants and
 * small helpers folding into their loops) and uses only baseline AArch64 Advanced SIMD, so
 * it runs on every ARMv8.0 board as well as on Orin.
 *
 * The polynomial coefficients below are our own fits: least squares on Chebyshev nodes,
 * reweighted (Lawson's iteration) towards minimax relative error, then rounded to float.
 * Fit error is far below float rounding; measured against a double-precision libm under
 * qemu, exp is within ~1 ulp and tanh / erfc within ~3e-7 relative over the whole range.
 *
 * FPCR is assumed to be the Linux default (no flush-to-zero, no default-NaN mode).
 */
#ifndef NERVE_NEON_COMMON_H
#define NERVE_NEON_COMMON_H

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>

#define NRV_NEON_INLINE static inline __attribute__((always_inline))

/* e^x for every float input, ~1 ulp: overflows to +inf above ~88.72, underflows gradually
 * through the subnormals to +0 below ~-103.97, and NaN in gives NaN out. */
NRV_NEON_INLINE float32x4_t nrv_neon_exp(float32x4_t x) {
    /* Clamping keeps n = round(x / ln2) in [-150, 128], so 2^n can be built from two
     * normal-range halves below. vmaxq/vminq (FMAX/FMIN, not the *NM forms) return NaN
     * when either input is NaN, so a NaN input survives the clamp. */
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269502f)); /* round(x · log2 e) */
    /* r = x - n·ln2 in two FMA steps (Cody–Waite): ln2_hi = float(ln2), ln2_lo = the rest. */
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693147182f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-1.90465421e-09f));
    /* e^r on |r| <= ln2/2 as 1 + r + r²·q(r), q of degree 4. */
    float32x4_t q = vdupq_n_f32(0.00138146045f);
    q = vfmaq_f32(vdupq_n_f32(0.00836871065f), q, r);
    q = vfmaq_f32(vdupq_n_f32(0.0416683875f), q, r);
    q = vfmaq_f32(vdupq_n_f32(0.166665207f), q, r);
    q = vfmaq_f32(vdupq_n_f32(0.499999935f), q, r);
    const float32x4_t p = vaddq_f32(vfmaq_f32(r, q, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
    /* 2^n = 2^n1 · 2^n2 with n1 = floor(n/2): both factors stay normal floats for every n
     * in [-150, 128], so e^x near FLT_MAX does not overflow early and subnormal results
     * are rounded once, in the last multiply. A NaN n converts to 0 (factors of 1). */
    const int32x4_t ni = vcvtq_s32_f32(n);
    const int32x4_t n1 = vshrq_n_s32(ni, 1);
    const int32x4_t n2 = vsubq_s32(ni, n1);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* Copies the sign bit of `from` onto `to` (NaN payloads and -0 preserved). */
NRV_NEON_INLINE float32x4_t nrv_neon_copysign(float32x4_t to, float32x4_t from) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), from, to);
}

/* tanh(x), ~3e-7 relative: odd polynomial near 0 (where 1 - e^-2|x| would cancel),
 * (1 - e)/(1 + e) with e = e^-2|x| <= 1 elsewhere (no overflow; saturates to ±1);
 * keeps the sign of x, including -0; NaN gives NaN. */
NRV_NEON_INLINE float32x4_t nrv_neon_tanh(float32x4_t x) {
    const float32x4_t ax = vabsq_f32(x);
    /* |x| < 0.625: |x| + |x|³·P(x²), P of degree 4. */
    const float32x4_t x2 = vmulq_f32(ax, ax);
    float32x4_t poly = vdupq_n_f32(-0.00570500024f);
    poly = vfmaq_f32(vdupq_n_f32(0.0206391006f), poly, x2);
    poly = vfmaq_f32(vdupq_n_f32(-0.0537397198f), poly, x2);
    poly = vfmaq_f32(vdupq_n_f32(0.133314423f), poly, x2);
    poly = vfmaq_f32(vdupq_n_f32(-0.333332819f), poly, x2);
    const float32x4_t small = vfmaq_f32(ax, vmulq_f32(ax, x2), poly);
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = nrv_neon_exp(vmulq_n_f32(ax, -2.0f));
    const float32x4_t large = vdivq_f32(vsubq_f32(one, e), vaddq_f32(one, e));
    /* A NaN fails the compare and takes the exp path, which returns NaN. */
    const float32x4_t y = vbslq_f32(vcltq_f32(ax, vdupq_n_f32(0.625f)), small, large);
    return nrv_neon_copysign(y, x);
}

/* erf(z) for 0 <= z < 0.875 as z·Q(z²), Q of degree 6 (relative accuracy near 0). */
NRV_NEON_INLINE float32x4_t nrv_neon_erf_small(float32x4_t z) {
    const float32x4_t z2 = vmulq_f32(z, z);
    float32x4_t q = vdupq_n_f32(8.67569498e-05f);
    q = vfmaq_f32(vdupq_n_f32(-0.000821117969f), q, z2);
    q = vfmaq_f32(vdupq_n_f32(0.00520675471f), q, z2);
    q = vfmaq_f32(vdupq_n_f32(-0.0268615881f), q, z2);
    q = vfmaq_f32(vdupq_n_f32(0.112837331f), q, z2);
    q = vfmaq_f32(vdupq_n_f32(-0.376126361f), q, z2);
    q = vfmaq_f32(vdupq_n_f32(1.12837917f), q, z2);
    return vmulq_f32(z, q);
}

/* erfc(z) for z >= 0.875 (any larger z, +inf included; NaN gives NaN), ~3e-7 relative down
 * to the subnormal range: erfc(z) = e^(-z²)·R(t) with t = 1/(1 + z/2), R a degree-8
 * polynomial fitted on z in [0.875, 10.5]. Computed directly, not as 1 - erf, so the
 * tiny values keep their relative accuracy. */
NRV_NEON_INLINE float32x4_t nrv_neon_erfc_large(float32x4_t z) {
    /* erfc(10.5) is below the smallest subnormal: clamping there keeps the fit in range
     * and z² finite (an infinite z² would turn the correction term below into NaN). */
    z = vminq_f32(z, vdupq_n_f32(10.5f));
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t t = vdivq_f32(one, vfmaq_n_f32(one, z, 0.5f));
    float32x4_t r = vdupq_n_f32(0.0744803065f);
    r = vfmaq_f32(vdupq_n_f32(-0.165523477f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-7.49338148e-05f), r, t);
    r = vfmaq_f32(vdupq_n_f32(0.123180036f), r, t);
    r = vfmaq_f32(vdupq_n_f32(0.150432553f), r, t);
    r = vfmaq_f32(vdupq_n_f32(0.254960005f), r, t);
    r = vfmaq_f32(vdupq_n_f32(0.28067863f), r, t);
    r = vfmaq_f32(vdupq_n_f32(0.282226093f), r, t);
    r = vfmaq_f32(vdupq_n_f32(-5.05505172e-06f), r, t);
    /* z² rounded to float is off by up to z²·2^-24 (6e-6 at z = 10), an error e^-z² would
     * inherit in full. The FMA gives the exact rounding error d = z·z - fl(z²), and
     * e^-(fl(z²) + d) = e^-fl(z²) · (1 - d) to first order. */
    const float32x4_t zz = vmulq_f32(z, z);
    const float32x4_t d = vfmaq_f32(vnegq_f32(zz), z, z);
    const float32x4_t ez = nrv_neon_exp(vnegq_f32(zz));
    return vmulq_f32(vfmsq_f32(ez, ez, d), r);
}

/* Mean and 1/sqrt(var + eps) of one row, two passes like the reference (the variance of
 * x - mean stays accurate when |mean| >> std, unlike E[x²] - E[x]²). Four accumulators
 * per pass: independent FMA chains, and pairwise-style partial sums that are more
 * accurate than one running sum. */
NRV_NEON_INLINE void nrv_neon_row_stats(const float *x, int64_t n, float eps, float *mean_out,
                                        float *rstd_out) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        s0 = vaddq_f32(s0, vld1q_f32(x + j));
        s1 = vaddq_f32(s1, vld1q_f32(x + j + 4));
        s2 = vaddq_f32(s2, vld1q_f32(x + j + 8));
        s3 = vaddq_f32(s3, vld1q_f32(x + j + 12));
    }
    for (; j + 4 <= n; j += 4) s0 = vaddq_f32(s0, vld1q_f32(x + j));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; j < n; j++) sum += x[j];
    const float mean = sum / (float)n;

    const float32x4_t m = vdupq_n_f32(mean);
    float32x4_t v0 = vdupq_n_f32(0.0f), v1 = v0, v2 = v0, v3 = v0;
    j = 0;
    for (; j + 16 <= n; j += 16) {
        const float32x4_t d0 = vsubq_f32(vld1q_f32(x + j), m);
        const float32x4_t d1 = vsubq_f32(vld1q_f32(x + j + 4), m);
        const float32x4_t d2 = vsubq_f32(vld1q_f32(x + j + 8), m);
        const float32x4_t d3 = vsubq_f32(vld1q_f32(x + j + 12), m);
        v0 = vfmaq_f32(v0, d0, d0);
        v1 = vfmaq_f32(v1, d1, d1);
        v2 = vfmaq_f32(v2, d2, d2);
        v3 = vfmaq_f32(v3, d3, d3);
    }
    for (; j + 4 <= n; j += 4) {
        const float32x4_t d = vsubq_f32(vld1q_f32(x + j), m);
        v0 = vfmaq_f32(v0, d, d);
    }
    float var = vaddvq_f32(vaddq_f32(vaddq_f32(v0, v1), vaddq_f32(v2, v3)));
    for (; j < n; j++) {
        const float d = x[j] - mean;
        var += d * d;
    }
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var / (float)n + eps);
}

/* y[j] = (x[j] - mean)·rstd·gamma[j] + beta[j] (beta may be NULL) for j < n; y may be x.
 * Shared by layernorm and the fused layernorm + linear so both normalise identically. */
NRV_NEON_INLINE void nrv_neon_normalise(const float *x, int64_t n, float mean, float rstd,
                                        const float *gamma, const float *beta, float *y) {
    const float32x4_t m = vdupq_n_f32(mean);
    int64_t j = 0;
    if (beta) {
        for (; j + 8 <= n; j += 8) {
            const float32x4_t t0 = vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), rstd);
            const float32x4_t t1 = vmulq_n_f32(vsubq_f32(vld1q_f32(x + j + 4), m), rstd);
            vst1q_f32(y + j, vfmaq_f32(vld1q_f32(beta + j), t0, vld1q_f32(gamma + j)));
            vst1q_f32(y + j + 4, vfmaq_f32(vld1q_f32(beta + j + 4), t1, vld1q_f32(gamma + j + 4)));
        }
        for (; j + 4 <= n; j += 4) {
            const float32x4_t t = vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), rstd);
            vst1q_f32(y + j, vfmaq_f32(vld1q_f32(beta + j), t, vld1q_f32(gamma + j)));
        }
        for (; j < n; j++) y[j] = fmaf((x[j] - mean) * rstd, gamma[j], beta[j]);
    } else {
        for (; j + 8 <= n; j += 8) {
            const float32x4_t t0 = vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), rstd);
            const float32x4_t t1 = vmulq_n_f32(vsubq_f32(vld1q_f32(x + j + 4), m), rstd);
            vst1q_f32(y + j, vmulq_f32(t0, vld1q_f32(gamma + j)));
            vst1q_f32(y + j + 4, vmulq_f32(t1, vld1q_f32(gamma + j + 4)));
        }
        for (; j + 4 <= n; j += 4)
            vst1q_f32(y + j, vmulq_f32(vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), rstd), vld1q_f32(gamma + j)));
        for (; j < n; j++) y[j] = (x[j] - mean) * rstd * gamma[j];
    }
}

#endif /* NERVE_NEON_COMMON_H */
