/* simd_avx512.h — the 16-lane AVX-512 (F, BW, VL, DQ) layer under the x86 kernel
 * templates; same vocabulary as simd_avx2.h (see there). Tails use the opmask
 * registers, 2^n scaling uses vscalefps, f16/int8 tails use masked byte/word loads
 * (BW + VL). Include only from files built with the AVX-512 flags (…_avx512.c).
 */
#ifndef NRV_SIMD_AVX512_H
#define NRV_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define VL 16
#define X86FN(name) name##_avx512
#define NRV_X86_ISA_NAME "avx512"

typedef __m512 vf;
typedef __mmask16 vbool;
typedef __mmask16 vtail;

static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float a) { return _mm512_set1_ps(a); }
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
/* Non-temporal store: p must be 64-byte aligned. Callers end with vstream_fence(). */
static inline void vstream(float *p, vf v) { _mm512_stream_ps(p, v); }
static inline void vstream_fence(void) { _mm_sfence(); }

/* First n lanes, 0 < n <= VL; masked-off lanes are never touched in memory. */
static inline vtail vtail_mask(int64_t n) { return (__mmask16)((1u << n) - 1u); }
static inline vf vload_tail(const float *p, vtail m) { return _mm512_maskz_loadu_ps(m, p); }
static inline vf vload_tail_or(const float *p, vtail m, vf fill) { return _mm512_mask_loadu_ps(fill, m, p); }
static inline void vstore_tail(float *p, vtail m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
static inline vf vselect_tail(vtail m, vf v) { return _mm512_maskz_mov_ps(m, v); }
/* Lanes [lo, hi), clamped to [0, VL] (empty when hi <= lo). */
static inline vtail vrange_mask(int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : (lo > VL ? VL : lo);
    hi = hi < 0 ? 0 : (hi > VL ? VL : hi);
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
/* Elements 0, 2, 4, ... (vevens) and 1, 3, 5, ... (vodds) of the 2·VL floats a then b. */
static inline vf vevens(vf a, vf b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
}
static inline vf vodds(vf a, vf b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}
/* Lane i of p[i·step] (vstride_index(step)); the masked form reads only the first lanes of
 * m and gives 0 in the others. */
typedef __m512i vindex;
static inline vindex vstride_index(int32_t step) {
    return _mm512_mullo_epi32(_mm512_set1_epi32(step),
                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
static inline vf vgather(const float *p, vindex i) { return _mm512_i32gather_ps(i, p, 4); }
static inline vf vgather_tail(const float *p, vindex i, vtail m) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, i, p, 4);
}

static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
/* Same NaN rule as AVX2 (vminps/vmaxps): a NaN lane returns the SECOND operand. */
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vabs(vf a) { return _mm512_abs_ps(a); }
static inline vf vcopysign(vf mag, vf s) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
}

static inline vbool vlt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vbool vgt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vf vselect(vbool m, vf if_true, vf if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }

static inline vf vround_nearest(vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* p · 2^n: vscalefps does exactly this with IEEE overflow and gradual underflow. */
static inline vf vldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }
static inline vf vldexp_normal(vf p, vf n) { return _mm512_scalef_ps(p, n); }

static inline float vhsum(vf v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(vf v) {
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __m256 vhalves(vf v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
static inline __m128 vhsum4(vf a, vf b, vf c, vf d) {
    const __m256 ab = _mm256_hadd_ps(vhalves(a), vhalves(b));
    const __m256 cd = _mm256_hadd_ps(vhalves(c), vhalves(d));
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Embedding loads (see simd_avx2.h); the partial forms use masked word/byte loads. */
static inline vf vload_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline vf vload_f16_part(const uint16_t *p, int64_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), p));
}
static inline vf vload_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline vf vload_i8_part(const int8_t *p, int64_t n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1u), p)));
}


/* Byte vectors (max pooling of uint8 / int8 codes, pool_impl.h; see simd_avx2.h). */
#define VB 64
typedef __m512i vbytes;
static inline vbytes vb_load(const void *p) { return _mm512_loadu_si512(p); }
static inline void vb_store(void *p, vbytes v) { _mm512_storeu_si512(p, v); }
static inline vbytes vb_set1(uint8_t a) { return _mm512_set1_epi8((char)a); }
static inline vbytes vb_xor(vbytes a, vbytes b) { return _mm512_xor_si512(a, b); }
static inline vbytes vb_max_u8(vbytes a, vbytes b) { return _mm512_max_epu8(a, b); }
static inline void vb_store_part(void *p, vbytes v, int64_t n) {
    _mm512_mask_storeu_epi8(p, (__mmask64)((1ull << n) - 1ull), v);
}
static inline vbytes vb_load_part(const void *p, int64_t n) {
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << n) - 1ull), p);
}
static inline vbytes vb_pack_lanes(__m512i a, __m512i b) {
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi16(a, b));
}
static inline vbytes vb_evens(vbytes a, vbytes b) {
    const __m512i low = _mm512_set1_epi16(0x00FF);
    return vb_pack_lanes(_mm512_and_si512(a, low), _mm512_and_si512(b, low));
}
static inline vbytes vb_odds(vbytes a, vbytes b) { return vb_pack_lanes(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8)); }

#endif /* NRV_SIMD_AVX512_H */
