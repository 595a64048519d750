/* requant_lanes.h — the requantization steps over RQ_LANES lanes (GCC vector extensions),
 * shared by every kernel that turns int32 sums into bytes as onnxruntime does
 * (MlasRequantizeOutput): the requant kernel (requant_impl.h) and depthwise_q8
 * (depthwise_q8_impl.h). Define RQ_LANES before including; include once per file (the
 * including header undefines RQ_F, RQ_I, RQ_U, RQ_CAT and RQ_CAT2 when done). */
#include <stdint.h>
#include <string.h>

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

/* The steps of one vector of sums: bias and scale per lane. */
static inline RQ_I rq_requant_v(RQ_I sums, RQ_U bias, RQ_F scale, RQ_F lo, RQ_F hi, RQ_I z) {
    const RQ_U u = (RQ_U)sums + bias; /* wraps, as the hardware's int32 */
    RQ_F v = __builtin_convertvector((RQ_I)u, RQ_F) * scale;
    const RQ_I below = v < lo, above = v > hi;
    v = (RQ_F)((below & (RQ_I)lo) | (~below & (RQ_I)v));
    v = (RQ_F)((above & (RQ_I)hi) | (~above & (RQ_I)v));
    const RQ_F magic = rq_splat_f(0x1.8p23f); /* half to even: |v| <= 383 */
    return __builtin_convertvector((v + magic) - magic, RQ_I) + z;
}

/* The same steps on RQ_LANES sums read from x. */
static inline RQ_I rq_lanes_v(const int32_t *x, RQ_U bias, RQ_F scale, RQ_F lo, RQ_F hi, RQ_I z) {
    RQ_I sums;
    memcpy(&sums, x, sizeof sums);
    return rq_requant_v(sums, bias, scale, lo, hi, z);
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

