/* quantize_impl.h — the body of the quantize kernel (kernels.h nrv_quantize_fn), written once
 * with GCC vector extensions over QZ_LANES float lanes and instantiated per ISA: 4 lanes in
 * kernels/quantize.c (the reference: SSE2 / NEON), 8 in x86/quantize_avx2.c, 16 in
 * x86/quantize_avx512.c. Each lane runs the same IEEE steps in the same order (ISO C: no
 * contraction), so every width gives the same bits. Define QZ_LANES and QZ_NAME before
 * including. */
#include <string.h>

#include "kernels.h"

#define QZ_CAT2(a, b) a##b
#define QZ_CAT(a, b) QZ_CAT2(a, b)
#define QZ_F QZ_CAT(qz_vf_, QZ_LANES)
#define QZ_I QZ_CAT(qz_vi_, QZ_LANES)
#define QZ_B QZ_CAT(qz_vb_, QZ_LANES)

typedef float QZ_F __attribute__((vector_size(4 * QZ_LANES)));
typedef int32_t QZ_I __attribute__((vector_size(4 * QZ_LANES)));
typedef uint8_t QZ_B __attribute__((vector_size(QZ_LANES)));

static inline QZ_F qz_select(QZ_I mask, QZ_F a, QZ_F b) { return (QZ_F)((mask & (QZ_I)a) | (~mask & (QZ_I)b)); }

static inline QZ_F qz_splat(float v) { /* lane 0 everywhere (a per-lane loop compiled to inserts) */
    const QZ_F r = {v};
    const QZ_I zero = {0};
    return __builtin_shuffle(r, zero);
}

/* q as floats: round_half_even(x / s) + zq (x / s clamped to ±2^22 first, where every value
 * already saturates alike; the rounding adds and subtracts 1.5·2^23), then Cast's
 * truncation and saturation to [lo, hi], NaN -> 0. */
static inline QZ_F qz_q(QZ_F x, float s, float zq, float below, float lo, float hi) {
    const QZ_F big = qz_splat(0x1p22f), nbig = qz_splat(-0x1p22f), magic = qz_splat(0x1.8p23f);
    QZ_F v = x / qz_splat(s);
    v = qz_select(v < nbig, nbig, qz_select(v > big, big, v)); /* NaN stays NaN */
    v = (v + magic) - magic;
    v = v + qz_splat(zq);
    QZ_F t = qz_select(v > qz_splat(below), v, qz_select(v == v, qz_splat(lo), qz_splat(0.0f)));
    t = qz_select(t < qz_splat(hi), t, qz_splat(hi));
    return __builtin_convertvector(__builtin_convertvector(t, QZ_I), QZ_F);
}

/* 64 values from x to y (floats, or bytes when to_int). Whole vectors in and out: a byte
 * copy into a staging block would stall every vector load on store forwarding. */
static inline void qz_block(const float *x, const nrv_quant_params *p, float below, void *y) {
    const float lo = (float)p->lo, hi = (float)p->hi;
    if (!p->to_int) {
        for (int j = 0; j < 64; j += QZ_LANES) {
            QZ_F v;
            memcpy(&v, x + j, sizeof v);
            v = (qz_q(v, p->s, p->zq, below, lo, hi) - qz_splat(p->zd)) * qz_splat(p->sd);
            memcpy((float *)y + j, &v, sizeof v);
        }
        return;
    }
    /* q is an integer in [lo, hi]: its low byte (two's complement for int8), narrowed in
     * registers (a scalar byte loop over a staged int32 block took 3x the conversion's time) */
    for (int j = 0; j < 64; j += QZ_LANES) {
        QZ_F v;
        memcpy(&v, x + j, sizeof v);
        const QZ_B b = __builtin_convertvector(__builtin_convertvector(qz_q(v, p->s, p->zq, below, lo, hi), QZ_I), QZ_B);
        memcpy((uint8_t *)y + j, &b, sizeof b);
    }
}

void QZ_NAME(const float *x, int64_t n, const nrv_quant_params *p, void *y) {
    const float below = p->lo == 0 ? -1.0f : -128.0f;
    const size_t el = p->to_int ? 1 : sizeof(float);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) qz_block(x + i, p, below, (uint8_t *)y + (size_t)i * el);
    if (i < n) { /* the tail, zero-padded through a block */
        float in[64] = {0}, out[64];
        memcpy(in, x + i, (size_t)(n - i) * sizeof(float));
        qz_block(in, p, below, out);
        memcpy((uint8_t *)y + (size_t)i * el, out, (size_t)(n - i) * el);
    }
}

#undef QZ_F
#undef QZ_I
#undef QZ_B
#undef QZ_CAT
#undef QZ_CAT2
