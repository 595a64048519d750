/* requant_impl.h — the body of the requant kernel (kernels.h nrv_requant_fn), written once with
 * GCC vector extensions over RQ_LANES lanes and instantiated per ISA: 4 lanes in
 * kernels/requant.c (the reference: SSE2 / NEON), 8 in x86/requant_avx2.c, 16 in
 * x86/requant_avx512.c. Every lane runs the same steps (int32 wrap, one conversion, one fp32
 * product, the clamp, the rounding), so every width gives the same bytes. Define RQ_LANES and
 * RQ_NAME (the requant kernel) and RQ_CHANNELS_NAME (its requant_channels entry) before
 * including. */
#include <string.h>

#include "kernels.h"

#define RQ_CAT2(a, b) a##b
#define RQ_CAT(a, b) RQ_CAT2(a, b)
#define RQ_F RQ_CAT(rq_vf_, RQ_LANES)
#define RQ_I RQ_CAT(rq_vi_, RQ_LANES)
#define RQ_U RQ_CAT(rq_vu_, RQ_LANES)

typedef float RQ_F __attribute__((vector_size(4 * RQ_LANES)));
typedef int32_t RQ_I __attribute__((vector_size(4 * RQ_LANES)));
typedef uint32_t RQ_U __attribute__((vector_size(4 * RQ_LANES)));

/* lane 0 everywhere (a per-lane loop compiles to inserts) */
static inline RQ_F rq_splat_f(float v) {
    const RQ_F r = {v};
    const RQ_I zero = {0};
    return __builtin_shuffle(r, zero);
}

static inline RQ_I rq_splat_i(int32_t v) {
    const RQ_I r = {v}, zero = {0};
    return __builtin_shuffle(r, zero);
}

/* The steps of one vector: bias and scale per lane. */
static inline RQ_I rq_lanes_v(const int32_t *x, RQ_U bias, RQ_F scale, RQ_F lo, RQ_F hi, RQ_I z) {
    RQ_U u;
    memcpy(&u, x, sizeof u);
    u = u + bias; /* wraps, as the hardware's int32 */
    RQ_F v = __builtin_convertvector((RQ_I)u, RQ_F) * scale;
    const RQ_I below = v < lo, above = v > hi;
    v = (RQ_F)((below & (RQ_I)lo) | (~below & (RQ_I)v));
    v = (RQ_F)((above & (RQ_I)hi) | (~above & (RQ_I)v));
    const RQ_F magic = rq_splat_f(0x1.8p23f); /* half to even: |v| <= 383 */
    return __builtin_convertvector((v + magic) - magic, RQ_I) + z;
}

static inline RQ_I rq_lanes(const int32_t *x, uint32_t bias, RQ_F scale, RQ_F lo, RQ_F hi, RQ_I z) {
    return rq_lanes_v(x, (RQ_U)rq_splat_i((int32_t)bias), scale, lo, hi, z);
}

/* One value's steps in scalars (the tails). */
static inline uint8_t rq_one(int32_t x, int32_t bias, float scale, float lo, float hi, int32_t z) {
    float v = (float)(int32_t)((uint32_t)x + (uint32_t)bias) * scale;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    return (uint8_t)((int32_t)((v + 0x1.8p23f) - 0x1.8p23f) + z);
}

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
