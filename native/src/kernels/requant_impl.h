/* requant_impl.h — the body of the requant kernel (kernels.h nrv_requant_fn), written once with
 * GCC vector extensions over RQ_LANES lanes and instantiated per ISA: 4 lanes in
 * kernels/requant.c (the reference: SSE2 / NEON), 8 in x86/requant_avx2.c, 16 in
 * x86/requant_avx512.c. Every lane runs the same steps (int32 wrap, one conversion, one fp32
 * product, the clamp, the rounding), so every width gives the same bytes. Define RQ_LANES and
 * RQ_NAME (the requant kernel) and RQ_CHANNELS_NAME (its requant_channels entry) before
 * including. */
#include <string.h>

#include "kernels.h"

#include "requant_lanes.h"

void RQ_NAME(const int32_t *x, int64_t n, int32_t bias, float scale, float lo, float hi, int32_t z, uint8_t *y) {
    typedef uint8_t RQ_B __attribute__((vector_size(RQ_LANES)));
    const RQ_F sv = rq_splat_f(scale), lov = rq_splat_f(lo), hiv = rq_splat_f(hi);
    const RQ_I zv = rq_splat_i(z);
    int64_t i = 0;
    for (; i + RQ_LANES <= n; i += RQ_LANES) { /* whole vectors in and out */
        const RQ_B b = __builtin_convertvector(rq_lanes(x + i, (uint32_t)bias, sv, lov, hiv, zv), RQ_B);
        memcpy(y + i, &b, sizeof b); /* the low byte: an int8's two's complement too */
    }
    for (; i < n; i++) /* the tail, each lane's steps in scalars (a staged vector stalled on store
                          forwarding: conv_integer's 7- to 56-wide rows end in tails) */
        y[i] = rq_one(x[i], bias, scale, lo, hi, z);
}

void RQ_CHANNELS_NAME(const int32_t *x, int64_t n, const int32_t *bias, const float *scale,
                      int64_t scale_stride, float lo, float hi, int32_t z, uint8_t *y) {
    typedef uint8_t RQ_B __attribute__((vector_size(RQ_LANES)));
    const RQ_F lov = rq_splat_f(lo), hiv = rq_splat_f(hi), one_scale = rq_splat_f(scale[0]);
    const RQ_I zv = rq_splat_i(z);
    int64_t i = 0;
    for (; i + RQ_LANES <= n; i += RQ_LANES) {
        RQ_U b = (RQ_U)rq_splat_i(0);
        RQ_F s = one_scale;
        if (bias) memcpy(&b, bias + i, sizeof b);
        if (scale_stride) memcpy(&s, scale + i, sizeof s);
        const RQ_B q = __builtin_convertvector(rq_lanes_v(x + i, b, s, lov, hiv, zv), RQ_B);
        memcpy(y + i, &q, sizeof q);
    }
    for (; i < n; i++) y[i] = rq_one(x[i], bias ? bias[i] : 0, scale[i * scale_stride], lo, hi, z);
}

#undef RQ_F
#undef RQ_I
#undef RQ_U
#undef RQ_CAT
#undef RQ_CAT2
