/* linear_w8a8_avx512.h — the AVX-512 pieces of the w8a8 kernels that quantise rows to u8
 * (xu = xq + 128) and run u8 x s8 dot products on the packed weight: the VNNI kernel
 * (linear_w8a8_vnni.c) and the AMX one (linear_w8a8_amx.c), which give bit-identical
 * results because both end in the same exact int32 sums and this one epilogue. The w4a8
 * VNNI kernel (linear_w4_vnni.c) takes its rows' scales from row_scale here too.
 * Include from a translation unit built with AVX-512 F/BW/VL. */
#ifndef NERVE_X86_LINEAR_W8A8_AVX512_H
#define NERVE_X86_LINEAR_W8A8_AVX512_H

#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "linear_w8a8_slices.h"

static inline __m512 abs_ps(__m512 v) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* w8a8_scale_fn (linear_w8a8_slices.h). */
static inline float row_scale(const float *x, int64_t n, float *inv) {
    __m512 m = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) m = _mm512_max_ps(abs_ps(_mm512_loadu_ps(x + p)), m);
    if (p < n) m = _mm512_max_ps(abs_ps(_mm512_maskz_loadu_ps((__mmask16)((1u << (n - p)) - 1), x + p)), m);
    float sx;
    nrv_w8a8_row_scale(_mm512_reduce_max_ps(m), inv, &sx);
    return sx;
}

/* w8a8_span_fn (linear_w8a8_slices.h): xu = xq + 128 (u8, for vpdpbusd). */
static inline int32_t quantise_span(const float *x, int64_t n, int64_t k0, int64_t w, float inv, void *dst,
                             int want_sum) {
    uint8_t *xu = dst;
    const __m512 vinv = _mm512_set1_ps(inv), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    const __m128i bias = _mm_set1_epi8((char)0x80);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t p = 0; p < w; p += 16) {
        const int64_t left = n - (k0 + p);
        const __mmask16 k = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + k0 + p), vinv);
        v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
        const __m512i qi = _mm512_cvtps_epi32(v);
        if (want_sum) sum = _mm512_add_epi32(sum, qi);
        const __m128i q = _mm_xor_si128(_mm512_cvtepi32_epi8(qi), bias);
        const int64_t c = w - p < 16 ? w - p : 16; /* w is a multiple of 4 */
        _mm_mask_storeu_epi8(xu + p, (__mmask16)(c == 16 ? 0xffff : (1u << c) - 1), q);
    }
    return want_sum ? _mm512_reduce_add_epi32(sum) : 0;
}

/* The epilogue of one block of 16 outputs from o (left >= 1 of them real) for R rows:
 * acc - 128·colsum = Σ xq·q, then s·sx·that + z·rsum + b (the reference's order, explicit FMA). */
static inline __attribute__((always_inline)) void store_block(const int R, const __m512i *acc, int64_t o, int64_t left,
                                                              const int32_t *colsum, const float *sx,
                                                              const float *rsum, const float *s, const float *z,
                                                              int64_t st, const float *b, float *y, int64_t ldy) {
    const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(colsum + o), 7);
    const __m512 sv = st ? _mm512_maskz_loadu_ps(k, s + o) : _mm512_set1_ps(s[0]);
    const __m512 zv = z ? (st ? _mm512_maskz_loadu_ps(k, z + o) : _mm512_set1_ps(z[0])) : _mm512_setzero_ps();
    const __m512 bv = b ? _mm512_maskz_loadu_ps(k, b + o) : _mm512_setzero_ps();
    for (int r = 0; r < R; r++) {
        const __m512 a = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], corr));
        const __m512 sc = _mm512_mul_ps(sv, _mm512_set1_ps(sx[r]));
        const __m512 t = z ? _mm512_mul_ps(zv, _mm512_set1_ps(rsum[r])) : _mm512_setzero_ps();
        __m512 v = _mm512_fmadd_ps(sc, a, t);
        if (b) v = _mm512_add_ps(v, bv);
        _mm512_mask_storeu_ps(y + r * ldy + o, k, v);
    }
}

#endif
