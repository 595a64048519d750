/* simd_math.h — vectorised exp, sigmoid, tanh and the two GELUs, plus the layernorm row
 * statistics, written once against the vector layer (include simd_avx2.h or
 * simd_avx512.h first).
 *
 * Accuracy, measured against double-precision libm on 4M evenly spaced inputs over
 * [-100, 100], [-20, 20] and [-1, 1] (max relative error, AVX2 and AVX-512 alike):
 *   sigmoid 2.0e-7, tanh 1.4e-7, gelu (erf) 4.0e-7 (also on [-13, -5], where the
 *   reference, 1 + erff, has no correct bit left), gelu_tanh 2.0e-6 for x >= -5, growing
 *   in the far negative tail with |u|·ulp (1.4e-5 at x = -10, a value of 1e-37): the
 *   float rounding of the argument u itself, which a float-only evaluation keeps.
 * Results below FLT_MIN are within 1e-45 absolute (gelu: 3e-45). inf saturates correctly, NaN
 * propagates (no clamp drops it: every min/max below puts x as the second operand, see
 * vmin/vmax).
 *
 * Polynomial coefficients: our own near-minimax fits (iteratively reweighted least
 * squares, Lawson's method, on 3000-4000 Chebyshev nodes, reference values from mpmath at
 * 40 digits), rounded to float. The fitting error of each is noted next to it; the
 * float evaluation adds rounding of a few ulp on top.
 */
#ifndef NRV_SIMD_MATH_H
#define NRV_SIMD_MATH_H

#include <math.h>

/* Horner's rule, highest coefficient first: c[0]·x^(n-1) + ... + c[n-1]. */
#define NRV_POLY2(x, a, b) vfmadd(vset1(a), (x), vset1(b))
#define NRV_POLY3(x, a, b, c) vfmadd(NRV_POLY2(x, a, b), (x), vset1(c))
#define NRV_POLY4(x, a, b, c, d) vfmadd(NRV_POLY3(x, a, b, c), (x), vset1(d))
#define NRV_POLY5(x, a, b, c, d, e) vfmadd(NRV_POLY4(x, a, b, c, d), (x), vset1(e))
#define NRV_POLY6(x, a, b, c, d, e, f) vfmadd(NRV_POLY5(x, a, b, c, d, e), (x), vset1(f))
#define NRV_POLY9(x, a, b, c, d, e, f, g, h, i) \
    vfmadd(vfmadd(vfmadd(vfmadd(NRV_POLY5(x, a, b, c, d, e), (x), vset1(f)), (x), vset1(g)), (x), vset1(h)), (x), vset1(i))

/* The Cody–Waite constants: ln2 split into a 15-bit head, so n·ln2_hi is exact for the
 * |n| <= 256 the callers reach, and a tail. */
#define NRV_LOG2E 1.44269504088896341f
#define NRV_LN2_HI 0.693145751953125f /* 0x3f317200 */
#define NRV_LN2_LO 1.42860682030941723e-6f /* ln2 - ln2_hi */

/* e^r · 2^n for |r| <= ln2/2, the callers having reduced their argument to n·ln2 + r:
 * e^r = 1 + r + r²·Q(r), Q(r) ≈ (e^r - 1 - r)/r², relative error of e^r from the fit 6.3e-9.
 * Q in Estrin's order (3 FMAs deep, not Horner's 5): GELU's chain runs through it (Horner
 * there: 1.13 -> 1.16 ns per element); sigmoid and tanh measured the same either way. */
static inline vf v_exp_poly(vf r) {
    const vf r2 = vmul(r, r);
    const vf q = vfmadd(vfmadd(vfmadd(vset1(1.381461276e-03f), r, vset1(8.368710056e-03f)), r2,
                               vfmadd(vset1(4.166838899e-02f), r, vset1(1.666652113e-01f))),
                        r, vset1(4.999999404e-01f));
    return vadd(vfmadd(r2, q, r), vset1(1.0f));
}
static inline vf v_exp_reduced(vf r, vf n) { return vldexp(v_exp_poly(r), n); }
/* The same for n in [-126, 127]. */
static inline vf v_exp_reduced_normal(vf r, vf n) { return vldexp_normal(v_exp_poly(r), n); }

/* r = x - n·ln2, ln2 in two parts (Cody–Waite): n·ln2_hi is exact, so r keeps x's bits. */
static inline vf v_exp_residual(vf x, vf n) {
    return vfnmadd(n, vset1(NRV_LN2_LO), vfnmadd(n, vset1(NRV_LN2_HI), x));
}

/* e^x. x = n·ln2 + r with |r| <= ln2/2 (Cody–Waite), then v_exp_reduced.
 * x is first clamped to [-104, 88.8]: below -104, e^x is under half the smallest
 * subnormal (rounds to 0); above 88.73 it overflows, and 88.8 still gives n = 128, so
 * vldexp produces inf. The clamp also keeps r small for huge |x|. */
static inline vf v_exp(vf x) {
    x = vmax(vset1(-104.0f), vmin(vset1(88.8f), x));
    const vf n = vround_nearest(vmul(x, vset1(NRV_LOG2E)));
    return v_exp_reduced(v_exp_residual(x, n), n);
}

/* n = round(x·log2e) as x·log2e + 1.5·2^23 - 1.5·2^23: the FMA's sum has ulp 1 for
 * |x·log2e| < 2^22, so it rounds to the integer (to even at ties); one FMA and one add where
 * vround_nearest(vmul) is a multiply and a 3-cycle round. */
#define NRV_ROUND_SHIFTER 12582912.0f /* 1.5 · 2^23 */
static inline vf v_exp_n(vf x) {
    return vsub(vfmadd(x, vset1(NRV_LOG2E), vset1(NRV_ROUND_SHIFTER)), vset1(NRV_ROUND_SHIFTER));
}

/* e^x for x <= 0 (NaN propagates): v_exp's reduction with the exponent in a normal range.
 * x >= -104 gives n >= -150: 2^(n + 24) is normal, the product is then scaled by 2^-24,
 * which rounds a subnormal result once, as vldexp's second multiply does. */
static inline vf v_exp_nonpos(vf x) {
    x = vmax(vset1(-104.0f), x);
    const vf n = v_exp_n(x);
    return vmul(v_exp_reduced_normal(v_exp_residual(x, n), vadd(n, vset1(24.0f))),
                vset1(5.9604644775390625e-08f)); /* 2^-24 */
}

/* e^x for 0 <= x <= 88 (NaN propagates), finite: n <= 127 keeps 2^n normal. */
static inline vf v_exp_upto88(vf x) {
    const vf n = v_exp_n(x);
    return v_exp_reduced_normal(v_exp_residual(x, n), n);
}

/* 1 / (1 + e^-x), split by sign like the reference so e^-|x| never overflows:
 * x >= 0: 1/(1+e), x < 0: e/(1+e) with e = e^-|x|. Relative accuracy holds down to the
 * subnormal results of x ~ -100. NaN: e is NaN, both forms give NaN. */
static inline vf v_sigmoid(vf x) {
    const vf e = v_exp_nonpos(vsub(vzero(), vabs(x)));
    const vf r = vdiv(vset1(1.0f), vadd(vset1(1.0f), e));
    return vselect(vlt(x, vzero()), vmul(e, r), r);
}

/* tanh: for |x| < 0.625 the odd polynomial x + x³·Q(x²) (the exp form below would lose
 * bits to cancellation there); above, 1 - 2/(1 + e^{2|x|}), which is exactly 1 from
 * |x| ~ 9 on, so 2|x| is capped at 88 (e stays finite); NaN passes the cap (vmin returns
 * its second operand). Sign restored last. */
static inline vf v_tanh(vf x) {
    const vf a = vabs(x);
    const vf s = vmul(a, a);
    /* Q(s) ≈ (tanh(a)/a - 1)/s on s in [0, 0.625²]; relative error of tanh 4.4e-9. */
    const vf q = NRV_POLY5(s, -5.704986397e-03f, 2.063908614e-02f, -5.373971537e-02f, 1.333144158e-01f,
                           -3.333328068e-01f);
    const vf small = vfmadd(vmul(a, s), q, a);
    const vf e = v_exp_upto88(vmin(vset1(88.0f), vadd(a, a)));
    const vf large = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(vset1(1.0f), e)));
    return vcopysign(vselect(vlt(a, vset1(0.625f)), small, large), x);
}

/* GELU, tanh form: x/2 · (1 + tanh(u)) = x · sigmoid(2u), u = √(2/π)·(x + 0.044715x³).
 * The sigmoid form has no 1 + tanh cancellation for negative x (the reference does; the
 * difference stays within its own error). Overflow of x³ gives ±inf in 2u: sigmoid
 * saturates to 1 or 0, as tanh does. */
static inline vf v_gelu_tanh(vf x) {
    const float two_k = 1.59576912160573072f; /* 2·√(2/π) */
    const vf z = vmul(x, vfmadd(vmul(x, x), vset1(two_k * 0.044715f), vset1(two_k)));
    return vmul(x, v_sigmoid(z));
}

/* c[0]·t^11 + ... + c[11] by Estrin's scheme: pairs, then quads, then t^8. Four FMA
 * latencies deep instead of Horner's eleven, for polynomials on a kernel's critical path. */
#define NRV_ESTRIN12(t, t2, t4, t8, c)                                                                  \
    vfmadd(vfmadd(vfmadd(vset1(c[0]), t, vset1(c[1])), t2, vfmadd(vset1(c[2]), t, vset1(c[3]))), t8,   \
           vfmadd(vfmadd(vfmadd(vset1(c[4]), t, vset1(c[5])), t2, vfmadd(vset1(c[6]), t, vset1(c[7]))), \
                  t4, vfmadd(vfmadd(vset1(c[8]), t, vset1(c[9])), t2, vfmadd(vset1(c[10]), t, vset1(c[11])))))

/* G(t) ≈ erfc(a)·e^(a²)/2 with t = 1/(1 + a/2), for a in [0, 10.1] (t in [0.165, 1]); relative
 * error of the fit 1.7e-9, 2.2e-7 once the coefficients and the evaluation are in float. */
static const float nrv_gelu_erfcx_half[12] = {
    1.217612531e-02f, -6.001575291e-02f, 9.307702631e-02f, 1.157692820e-02f, -1.726881862e-01f, 1.308153719e-01f,
    -2.704836801e-02f, 1.108345464e-01f, 1.185759380e-01f, 1.416971385e-01f, 1.409975737e-01f, 1.662117825e-06f};

/* GELU, exact: x · Φ(x), Φ(x) = erfc(-x/√2)/2. With a = |x|/√2:
 *   erfc(a)/2 = e^(-a²) · G(t), so Φ = 1 - e^(-a²)·G for x > 0 and e^(-a²)·G for x <= 0.
 * One formula for every a (no small-argument branch: Φ >= 0.3 there, so 1 - e·G keeps its
 * relative accuracy), and the negative tail is computed directly, never as 1 + erf (which
 * cancels: the reference loses all its bits below x ~ -5.5 and returns -0).
 * The division for t and the polynomial run alongside e^(-a²), whose exponent is the
 * critical path: a² = x²/2 rounds to float with a relative error of u·a² in the result (1e-5
 * at x = -13), so x²/2 is split exactly into h + l (FMA residual; |x| capped at 16, where the
 * result has long underflowed, so x² cannot overflow) and both go into the Cody–Waite
 * reduction of e^(-h-l): -h - n·ln2_hi is exact (Sterbenz), then l and n·ln2_lo come off.
 * The negative branch is (x·G)·e, so a result below FLT_MIN is rounded once, not via a
 * subnormal Φ. NaN propagates (vmin keeps it, see vmin); ±inf: Φ is 1 or 0, so
 * gelu(-inf) = -inf·0 = NaN, as in the reference. Written for a short dependency chain
 * (~70 cycles from x to y) rather than fewest operations: the kernel is latency-bound,
 * the out-of-order window holding only two or three elements' chains (1.86 → 1.13 ns per
 * element on a Zen core with AVX2, same accuracy or better). */
static inline vf v_gelu_erf(vf x) {
    const vf xa = vmin(vset1(16.0f), vabs(x));
    const vf a = vmul(xa, vset1(0.70710678118654752f));
    const vf t = vdiv(vset1(1.0f), vfmadd(a, vset1(0.5f), vset1(1.0f)));
    const vf t2 = vmul(t, t), t4 = vmul(t2, t2), t8 = vmul(t4, t4);
    const vf g = NRV_ESTRIN12(t, t2, t4, t8, nrv_gelu_erfcx_half);
    /* e = e^(-x²/2) = 2^n · e^r, |r| <= ln2/2 */
    const vf xx = vmul(xa, xa);
    const vf h = vmul(xx, vset1(0.5f));
    const vf l = vmul(vfmadd(xa, xa, vsub(vzero(), xx)), vset1(0.5f));
    const vf n = vround_nearest(vmul(h, vset1(-NRV_LOG2E)));
    const vf r = vfnmadd(n, vset1(NRV_LN2_LO), vsub(vfnmadd(n, vset1(NRV_LN2_HI), vsub(vzero(), h)), l));
    const vf e = v_exp_reduced(r, n);
    const vf positive = vmul(x, vfnmadd(e, g, vset1(1.0f)));
    const vf negative = vmul(vmul(x, g), e);
    return vselect(vgt(x, vzero()), positive, negative);
}

/* Mean and 1/sqrt(var + eps) of one row, the reference's two-pass form (mean first, then
 * the mean of squared deviations: stays accurate when |mean| >> std, unlike E[x²]-E[x]²).
 * Four accumulators per pass hide the add latency. */
static inline void v_row_stats(const float *x, int64_t n, float eps, float *mean_out, float *rstd_out) {
    vf s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
    int64_t j = 0;
    for (; j + 4 * VL <= n; j += 4 * VL) {
        s0 = vadd(s0, vload(x + j));
        s1 = vadd(s1, vload(x + j + VL));
        s2 = vadd(s2, vload(x + j + 2 * VL));
        s3 = vadd(s3, vload(x + j + 3 * VL));
    }
    for (; j + VL <= n; j += VL) s0 = vadd(s0, vload(x + j));
    if (j < n) s1 = vadd(s1, vload_tail(x + j, vtail_mask(n - j)));
    const float mean = vhsum(vadd(vadd(s0, s1), vadd(s2, s3))) / (float)n;
    const vf m = vset1(mean);
    s0 = s1 = s2 = s3 = vzero();
    for (j = 0; j + 4 * VL <= n; j += 4 * VL) {
        const vf d0 = vsub(vload(x + j), m), d1 = vsub(vload(x + j + VL), m);
        const vf d2 = vsub(vload(x + j + 2 * VL), m), d3 = vsub(vload(x + j + 3 * VL), m);
        s0 = vfmadd(d0, d0, s0);
        s1 = vfmadd(d1, d1, s1);
        s2 = vfmadd(d2, d2, s2);
        s3 = vfmadd(d3, d3, s3);
    }
    for (; j + VL <= n; j += VL) {
        const vf d = vsub(vload(x + j), m);
        s0 = vfmadd(d, d, s0);
    }
    if (j < n) {
        const vtail t = vtail_mask(n - j);
        /* masked-off lanes read as the mean, so they add 0 */
        const vf d = vload_tail_or(x + j, t, m);
        const vf dm = vsub(d, m);
        s1 = vfmadd(dm, dm, s1);
    }
    const float var = vhsum(vadd(vadd(s0, s1), vadd(s2, s3)));
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var / (float)n + eps);
}

/* out = (x - mean)·rstd·gamma + beta over n floats (beta may be NULL); out may be x. */
static inline void v_normalise_row(const float *x, int64_t n, float mean, float rstd, const float *gamma,
                                   const float *beta, float *out) {
    const vf m = vset1(mean), rs = vset1(rstd);
    int64_t j = 0;
    if (beta) {
        for (; j + VL <= n; j += VL)
            vstore(out + j, vfmadd(vmul(vsub(vload(x + j), m), rs), vload(gamma + j), vload(beta + j)));
        if (j < n) {
            const vtail t = vtail_mask(n - j);
            const vf d = vmul(vsub(vload_tail(x + j, t), m), rs);
            vstore_tail(out + j, t, vfmadd(d, vload_tail(gamma + j, t), vload_tail(beta + j, t)));
        }
    } else {
        for (; j + VL <= n; j += VL) vstore(out + j, vmul(vmul(vsub(vload(x + j), m), rs), vload(gamma + j)));
        if (j < n) {
            const vtail t = vtail_mask(n - j);
            vstore_tail(out + j, t, vmul(vmul(vsub(vload_tail(x + j, t), m), rs), vload_tail(gamma + j, t)));
        }
    }
}

#endif /* NRV_SIMD_MATH_H */
