/* simd_avx2.h — the 8-lane AVX2 + FMA + F16C layer under the x86 kernel templates.
 *
 * The kernels (*_impl.h) are written once against this small vocabulary and compiled
 * twice: a *_avx2.c file includes this header, a *_avx512.c file includes simd_avx512.h,
 * which defines the same names for 16 lanes. Only what differs between the two ISAs is
 * here: vector width, tail masks, comparisons/selects, 2^n scaling, reductions and the
 * f16 / int8 loads. Include only from files built with -mavx2 -mfma -mf16c.
 */
#ifndef NRV_SIMD_AVX2_H
#define NRV_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VL 8                    /* floats per vector */
#define X86FN(name) name##_avx2 /* exported names get the ISA as suffix */
#define NRV_X86_ISA_NAME "avx2"

typedef __m256 vf;    /* 8 floats */
typedef __m256 vbool; /* per-lane comparison result (all-ones lanes) */
typedef __m256i vtail; /* "first n lanes" mask for loads/stores of a partial vector */

static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float a) { return _mm256_set1_ps(a); }
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
/* Non-temporal store: p must be 32-byte aligned. Callers end with vstream_fence(). */
static inline void vstream(float *p, vf v) { _mm256_stream_ps(p, v); }
static inline void vstream_fence(void) { _mm_sfence(); }

/* Masks for a partial vector of n lanes, 0 < n <= VL. Masked-off lanes are never
 * touched in memory (no fault, no data race) and load as 0. */
static inline vtail vtail_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vload_tail(const float *p, vtail m) { return _mm256_maskload_ps(p, m); }
/* Masked-off lanes read as `fill` (e.g. -inf for a running max). */
static inline vf vload_tail_or(const float *p, vtail m, vf fill) {
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
static inline void vstore_tail(float *p, vtail m, vf v) { _mm256_maskstore_ps(p, m, v); }
/* v in the first n lanes of m, 0 elsewhere. */
static inline vf vselect_tail(vtail m, vf v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }
/* Lanes [lo, hi), clamped to [0, VL] (empty when hi <= lo). */
static inline vtail vrange_mask(int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : (lo > VL ? VL : lo);
    hi = hi < 0 ? 0 : (hi > VL ? VL : hi);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)lo), iota),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), iota));
}
/* Elements 0, 2, 4, ... (vevens) and 1, 3, 5, ... (vodds) of the 2·VL floats a then b. */
static inline vf vevens(vf a, vf b) {
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline vf vodds(vf a, vf b) {
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
/* Lane i of p[i·step] (vstride_index(step)); the masked form reads only the first lanes of
 * m and gives 0 in the others. */
typedef __m256i vindex;
static inline vindex vstride_index(int32_t step) {
    return _mm256_mullo_epi32(_mm256_set1_epi32(step), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vgather(const float *p, vindex i) { return _mm256_i32gather_ps(p, i, 4); }
static inline vf vgather_tail(const float *p, vindex i, vtail m) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, i, _mm256_castsi256_ps(m), 4);
}

static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }   /* a*b + c */
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a*b */
/* min/max with the x86 rule: if either lane is NaN the SECOND operand is returned.
 * So vmin(const, x) lets a NaN in x through, vmax(acc, x) too. */
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
/* |mag| with the sign of s (mag must be >= 0 or NaN). */
static inline vf vcopysign(vf mag, vf s) {
    return _mm256_or_ps(mag, _mm256_and_ps(s, _mm256_set1_ps(-0.0f)));
}

/* Ordered comparisons: false when either side is NaN. */
static inline vbool vlt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vbool vgt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vf vselect(vbool m, vf if_true, vf if_false) { return _mm256_blendv_ps(if_false, if_true, m); }

static inline vf vround_nearest(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* p · 2^n for integral n in [-150, 128] (as floats). 2^n is applied in two halves, each
 * a normal float, so results that overflow become inf and results below FLT_MIN become
 * correctly rounded subnormals (one rounding, at the second multiply) instead of
 * garbage exponent bits. */
static inline vf vldexp(vf p, vf n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const vf s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const vf s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* p · 2^n for integral n in [-126, 127] (as floats): one scale, built from n's bits (4 uops
 * where vldexp takes 9; sigmoid and tanh, whose exponents stay in range, use it). */
static inline vf vldexp_normal(vf p, vf n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float vhsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The four horizontal sums of a, b, c, d as one 4-float vector (for dot-product
 * kernels that finish four outputs at once). */
static inline __m128 vhsum4(vf a, vf b, vf c, vf d) {
    const __m256 ab = _mm256_hadd_ps(a, b);
    const __m256 cd = _mm256_hadd_ps(c, d);
    const __m256 abcd = _mm256_hadd_ps(ab, cd); /* per 128-bit half: a b c d partial sums */
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Embedding loads: VL halves / VL int8 to floats; the _part forms read only n < VL
 * elements (the rest as 0) and never touch memory past them. F16C's conversion is
 * exact for every half, subnormals included (MXCSR.DAZ does not apply to it). */
static inline vf vload_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* (n clamped to [0, 8] for the compiler's sake: it cannot see the callers' n < VL) */
static inline size_t vpart_count(int64_t n) { return (size_t)(n < 0 ? 0 : (n > 8 ? 8 : n)); }
static inline vf vload_f16_part(const uint16_t *p, int64_t n) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, vpart_count(n) * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}
static inline vf vload_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vf vload_i8_part(const int8_t *p, int64_t n) {
    int8_t tmp[8] = {0};
    memcpy(tmp, p, vpart_count(n));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)tmp)));
}


/* Byte vectors (max pooling of uint8 / int8 codes, pool_impl.h). */
#define VB 32
typedef __m256i vbytes;
static inline vbytes vb_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void vb_store(void *p, vbytes v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline vbytes vb_set1(uint8_t a) { return _mm256_set1_epi8((char)a); }
static inline vbytes vb_xor(vbytes a, vbytes b) { return _mm256_xor_si256(a, b); }
static inline vbytes vb_max_u8(vbytes a, vbytes b) { return _mm256_max_epu8(a, b); }
/* The first n (< VB) bytes of v to p (no byte past p + n is written). */
static inline void vb_store_part(void *p, vbytes v, int64_t n) {
    uint8_t t[VB];
    vb_store(t, v);
    for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = t[i];
}
/* The first n (< VB) bytes at p, the rest 0 (no byte past p + n is read). */
static inline vbytes vb_load_part(const void *p, int64_t n) {
    uint8_t t[VB] = {0};
    memcpy(t, p, (size_t)n);
    return vb_load(t);
}
/* Bytes 0, 2, 4, ... (vb_evens) and 1, 3, 5, ... (vb_odds) of the 2·VB bytes a then b: each
 * 16-bit lane narrowed (packus of values <= 255 is exact), then the 64-bit quarters that
 * packus interleaves per 128-bit half put back in order. */
static inline vbytes vb_pack_lanes(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}
static inline vbytes vb_evens(vbytes a, vbytes b) {
    const __m256i low = _mm256_set1_epi16(0x00FF);
    return vb_pack_lanes(_mm256_and_si256(a, low), _mm256_and_si256(b, low));
}
static inline vbytes vb_odds(vbytes a, vbytes b) { return vb_pack_lanes(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8)); }

#endif /* NRV_SIMD_AVX2_H */
