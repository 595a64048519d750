/* quantize_x86.h — the quantize kernel (kernels.h nrv_quantize_fn) on whole vectors with
 * x86 intrinsics, the tail through kernels/quantize_impl.h; included by quantize_avx2.c
 * and quantize_avx512.c after their simd header.
 *
 * The template (quantize_impl.h) spells every step in vector-extension C, which GCC lowers
 * to compares and masked xors: ~28 instructions a vector, 0.33 ns an element on Zen 4. The
 * same steps here in ~10: rounding by the conversion itself (cvtps2dq rounds half to even,
 * as the template's add-and-subtract of 1.5·2^23 does, both under the default rounding
 * mode), then the zero point and the saturation in integers. That is exact, so the bits are
 * the template's: x / s is clamped to ±2^22 first in both (beyond it every value saturates
 * alike), so the rounded value and its sum with an integral zq (|zq| <= 2^16, checked, else
 * the template runs) are exact in float and int32 alike; max(q, lo) is the template's
 * "q > lo − 1 (u8: -1, s8: -128)" on integers; a NaN gives 0 in both. */
#include "kernels.h"

#if VL == 16
typedef __m512i qx_vi;
typedef __mmask16 qx_ord;
static inline qx_ord qx_ordered(vf v) { return _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q); }
static inline qx_vi qx_round(vf v) { return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline qx_vi qx_set1(int32_t a) { return _mm512_set1_epi32(a); }
static inline qx_vi qx_add(qx_vi a, qx_vi b) { return _mm512_add_epi32(a, b); }
static inline qx_vi qx_clamp(qx_vi q, qx_vi lo, qx_vi hi) { return _mm512_min_epi32(_mm512_max_epi32(q, lo), hi); }
static inline qx_vi qx_keep(qx_ord m, qx_vi q) { return _mm512_maskz_mov_epi32(m, q); }
static inline vf qx_float(qx_vi q) { return _mm512_cvtepi32_ps(q); }
static inline void qx_store_bytes(void *y, qx_vi q) { _mm_storeu_si128((__m128i *)y, _mm512_cvtepi32_epi8(q)); }
#else
typedef __m256i qx_vi;
typedef __m256i qx_ord;
static inline qx_ord qx_ordered(vf v) { return _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)); }
static inline qx_vi qx_round(vf v) { return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
static inline qx_vi qx_set1(int32_t a) { return _mm256_set1_epi32(a); }
static inline qx_vi qx_add(qx_vi a, qx_vi b) { return _mm256_add_epi32(a, b); }
static inline qx_vi qx_clamp(qx_vi q, qx_vi lo, qx_vi hi) { return _mm256_min_epi32(_mm256_max_epi32(q, lo), hi); }
static inline qx_vi qx_keep(qx_ord m, qx_vi q) { return _mm256_and_si256(m, q); }
static inline vf qx_float(qx_vi q) { return _mm256_cvtepi32_ps(q); }
/* q in [-128, 255]: packs to 16 bits, then to bytes (signed or unsigned saturation alike
 * for values already in the byte's range; the low byte is the two's complement for s8) */
static inline void qx_store_bytes(void *y, qx_vi q) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64((__m128i *)y, _mm_packus_epi16(_mm_and_si128(w, _mm_set1_epi16(0xFF)), w));
}
#endif

#define QX_CAT2(a, b) a##b
#define QX_CAT(a, b) QX_CAT2(a, b)
#define QX_TAIL QX_CAT(QX_NAME, _template)

/* the template at this width: the tail, and zero points the fast path does not take */
#define QZ_LANES VL
#define QZ_NAME QX_TAIL
void QZ_NAME(const float *x, int64_t n, const nrv_quant_params *p, void *y);
#include "quantize_impl.h"

void QX_NAME(const float *x, int64_t n, const nrv_quant_params *p, void *y) {
    const float zq = p->zq;
    if (!(zq == (float)(int32_t)zq && zq >= -65536.0f && zq <= 65536.0f)) {
        QX_TAIL(x, n, p, y);
        return;
    }
    const vf s = vset1(p->s), big = vset1(0x1p22f), nbig = vset1(-0x1p22f), zd = vset1(p->zd), sd = vset1(p->sd);
    const qx_vi z = qx_set1((int32_t)zq), lo = qx_set1(p->lo), hi = qx_set1(p->hi);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        const vf v = vdiv(vload(x + i), s);
        const qx_vi q = qx_keep(qx_ordered(v), qx_clamp(qx_add(qx_round(vmin(vmax(v, nbig), big)), z), lo, hi));
        if (p->to_int) qx_store_bytes((uint8_t *)y + i, q);
        else vstore((float *)y + i, vmul(vsub(qx_float(q), zd), sd));
    }
    if (i < n) QX_TAIL(x + i, n - i, p, (uint8_t *)y + (size_t)i * (p->to_int ? 1u : sizeof(float)));
}

#undef QX_TAIL
#undef QX_CAT
#undef QX_CAT2
