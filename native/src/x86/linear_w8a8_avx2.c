/* linear_w8a8_avx2.c — int8 x int8 linear layer (w8a8), AVX2 (no VNNI).
 *
 * Math and epilogue order: native/src/kernels/linear_w8a8.c (bit-identical to that
 * reference); packed weight layout: kernels.h. vpmaddubsw (u8 x s8 -> s16 pairs) would
 * saturate (255·127·2 > 32767), so the product is done exactly on 16 bits: rows are
 * quantised to int16 xq (signed, no +128 and no colsum correction) in a stack buffer, 32
 * weight bytes (8 outputs x 4 k) are sign-extended to two ymm of int16 (vpmovsxbw), and
 * vpmaddwd against the row's 4 k broadcast (as one 64-bit pattern) gives per int32 lane the
 * sum of two products of one output; the two lanes of an output are added at the end
 * (vphaddd + vpermq). Register tile: 4 rows x 8 outputs (8 accumulators).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "linear_w8a8_slices.h"

#define W8A8_MR 4
#define W8A8_XQ_BYTES 32768
#define W8A8_SLICE (W8A8_XQ_BYTES / 2 / W8A8_MR) /* int16 of a row per slice when K is cut */

static inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline __m256i tail_mask(int64_t left) { /* lanes < left set */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int l = left < 0 ? 0 : left > 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), idx);
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* w8a8_scale_fn (linear_w8a8_slices.h). */
static float row_scale(const float *x, int64_t n, float *inv) {
    __m256 m = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + p), v1 = _mm256_loadu_ps(x + p + 8);
        m = _mm256_max_ps(m, _mm256_max_ps(abs_ps(v0), abs_ps(v1)));
    }
    if (p < n) {
        const __m256 v0 = _mm256_maskload_ps(x + p, tail_mask(n - p));
        const __m256 v1 = _mm256_maskload_ps(x + p + 8, tail_mask(n - p - 8));
        m = _mm256_max_ps(m, _mm256_max_ps(abs_ps(v0), abs_ps(v1)));
    }
    float sx;
    nrv_w8a8_row_scale(hmax8(m), inv, &sx);
    return sx;
}

/* w8a8_span_fn (linear_w8a8_slices.h): xq as int16 (for vpmaddwd). */
static int32_t quantise_span(const float *x, int64_t n, int64_t k0, int64_t w, float inv, void *dst,
                             int want_sum) {
    int16_t *xq = dst;
    const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (int64_t p = 0; p < w; p += 8) {
        const int64_t k = k0 + p;
        const __m256 xv = k + 8 <= n ? _mm256_loadu_ps(x + k) : _mm256_maskload_ps(x + k, tail_mask(n - k));
        __m256 v = _mm256_mul_ps(xv, vinv);
        v = _mm256_max_ps(_mm256_min_ps(v, hi), lo);
        const __m256i i32 = _mm256_cvtps_epi32(v);
        const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
        if (w - p >= 8) _mm_storeu_si128((__m128i *)(void *)(xq + p), i16);
        else _mm_storel_epi64((__m128i *)(void *)(xq + p), i16); /* w - p == 4 */
    }
    int32_t isum = 0;
    if (want_sum)
        for (int64_t p = 0; p < w; p++) isum += xq[p];
    return isum;
}

/* R rows x 8 outputs starting at n0 (half h of a 16-output block; nvalid of them real), over
 * the weight's k-blocks [kb0, kb0 + nkb) of kb_n (xq holds those, row stride xs). A K cut in
 * slices keeps the int32 sums in y between slices: `first` starts them at 0 (else adds those
 * in y), `last` ends with the epilogue (else stores them to y). */
static inline __attribute__((always_inline)) void tile(const int R, const int16_t *xq, int64_t xs, int64_t kb0,
                                                       int64_t nkb, int64_t kb_n, const int8_t *packed, int64_t n0,
                                                       int64_t nvalid, const float *sx, const float *rsum,
                                                       const float *s, const float *z, int64_t st, const float *b,
                                                       float *y, int64_t ldy, int first, int last) {
    const int8_t *w = packed + ((n0 / 16) * kb_n + kb0) * 64 + (n0 % 16) * 4;
    int32_t *part = (int32_t *)(void *)y; /* the slices' running sums, in y's bytes */
    __m256i acc[W8A8_MR][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int64_t kb = 0; kb < nkb; kb++) {
        const __m256i wa = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + kb * 64)));
        const __m256i wb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + kb * 64 + 16)));
        for (int r = 0; r < R; r++) {
            int64_t xv;
            memcpy(&xv, xq + r * xs + kb * 4, 8);
            const __m256i xb = _mm256_set1_epi64x(xv);
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(wa, xb));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(wb, xb));
        }
    }
    const __m256i k = tail_mask(nvalid);
    const __m256 sv = st ? _mm256_maskload_ps(s + n0, k) : _mm256_set1_ps(s[0]);
    const __m256 zv = z ? (st ? _mm256_maskload_ps(z + n0, k) : _mm256_set1_ps(z[0])) : _mm256_setzero_ps();
    const __m256 bv = b ? _mm256_maskload_ps(b + n0, k) : _mm256_setzero_ps();
    for (int r = 0; r < R; r++) {
        /* acc[0] lanes: o0 (k0k1, k2k3), o1, | o2, o3; acc[1]: o4..o7 likewise */
        __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xd8);
        int32_t *pr = part + r * ldy + n0;
        if (!first) h = _mm256_add_epi32(h, _mm256_maskload_epi32(pr, k));
        if (!last) {
            _mm256_maskstore_epi32(pr, k, h);
            continue;
        }
        const __m256 a = _mm256_cvtepi32_ps(h);
        const __m256 sc = _mm256_mul_ps(sv, _mm256_set1_ps(sx[r]));
        const __m256 t = z ? _mm256_mul_ps(zv, _mm256_set1_ps(rsum[r])) : _mm256_setzero_ps();
        __m256 v = _mm256_fmadd_ps(sc, a, t);
        if (b) v = _mm256_add_ps(v, bv);
        if (nvalid >= 8) _mm256_storeu_ps(y + r * ldy + n0, v);
        else _mm256_maskstore_ps(y + r * ldy + n0, k, v);
    }
}

#define W8A8_CASE(R_)                                                                                        \
    case R_: tile(R_, xq, xs, kb0, nkb, kb_n, packed, n0, nvalid, sx, rsum, s, z, st, b, y, ldy, first, last); return;

static __attribute__((noinline)) void tile_rows(int R, const int16_t *xq, int64_t xs, int64_t kb0, int64_t nkb,
                                                int64_t kb_n, const int8_t *packed, int64_t n0, int64_t nvalid,
                                                const float *sx, const float *rsum, const float *s, const float *z,
                                                int64_t st, const float *b, float *y, int64_t ldy, int first,
                                                int last) {
    switch (R) {
        W8A8_CASE(1)
        W8A8_CASE(2)
        W8A8_CASE(3)
        W8A8_CASE(4)
    default: return;
    }
}
#undef W8A8_CASE

void nrv_linear_w8a8_avx2(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y) {
    const int64_t kp = (in + 3) / 4 * 4, kb_n = kp / 4;
    int64_t mr = W8A8_XQ_BYTES / (2 * kp);
    if (mr > W8A8_MR) mr = W8A8_MR; /* >= 1: kp <= NRV_W8A8_MAX_K = W8A8_XQ_BYTES / 2 */
    /* rows too wide for W8A8_MR of them in xq: K in slices (linear_w8a8_slices.h) */
    const int sliced = mr < W8A8_MR && rows > mr;
    if (sliced) mr = W8A8_MR;
    const int64_t span = sliced ? W8A8_SLICE : kp; /* int16 per row of xq; one slice when it fits */
    _Alignas(32) int16_t xq[W8A8_XQ_BYTES / 2];
    float sx[W8A8_MR], rsum[W8A8_MR], inv[W8A8_MR];
    int32_t isum[W8A8_MR];
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int R = (int)(rows - r0 < mr ? rows - r0 : mr);
        float *yb = y + r0 * out;
        w8a8_slices_begin(row_scale, x + r0 * in, in, R, sx, inv, isum);
        for (int64_t k0 = 0; k0 < kp; k0 += span) {
            const int64_t w = kp - k0 < span ? kp - k0 : span;
            const int last = w8a8_quantise_slice(quantise_span, x + r0 * in, in, kp, R, k0, w, inv, xq, span * 2,
                                                 z != NULL, isum, sx, rsum);
            for (int64_t n0 = 0; n0 < out; n0 += 8)
                tile_rows(R, xq, span, k0 / 4, w / 4, kb_n, packed, n0, out - n0 < 8 ? out - n0 : 8, sx, rsum, s, z,
                          sz_stride, b, yb, out, k0 == 0, last);
        }
    }
}
