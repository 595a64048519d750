/* linear_w4_vnni.c — INT4-weight linear layer with int8 activations (w4a8), AVX-512 VNNI.
 *
 * Contract: kernels.h above nrv_linear_w4_fn; math: kernels/linear_w4.c. Per block of up to
 * W4_MR rows of x, each row is quantised once (as linear_w8a8 does) into a stack buffer and
 * its per-group sums XS_g = Σ_{k in g} xq_k are kept. Then, per output and 64 weights
 * (two packed blocks), vpdpbusd multiplies the unsigned nibbles u = q + 8 (0..15) by the
 * signed xq, four products per int32 lane, exactly: Σ xq·(q - zero) = Σ xq·u - 8·XS_g -
 * zero·XS_g, the middle term taken out per lane, the last per group (below).
 *
 * Lane order. A chunk of 64 weights is loaded as 32 packed bytes [block a | block b]; the
 * zmm [bytes & 15 | bytes >> 4] then holds, per 128-bit lane: a's k0..15, b's k0..15, a's
 * k16..31, b's k16..31. The quantised row is stored in that same order (per chunk: x[0..15],
 * x[32..47], x[16..31], x[48..63]), so no shuffle is needed on the weights. The unpacked
 * layout loads 64 int8 in natural order and swaps lanes 1 and 2 (vshufi64x2) and adds 8:
 * the same bytes in the same lanes, hence bit-identical sums. A trailing single block (in ≡
 * 32 mod 64, group 32 only) runs on a ymm in natural order.
 *
 * The offset: each row also keeps, per chunk, the 16 lane offsets -8·Σ(the lane's 4 xq), and
 * every chunk's vpdpbusd starts from them instead of 0, so the int32 lanes hold Σ xq·q
 * exactly; only a zero point leaves a per-group term, Σ_g scale_g·zero_g·XS_g.
 *
 * Scales: with group 32 a chunk spans two groups (lanes 0-3, 8-11: a; 4-7, 12-15: b), whose
 * fp16 scales are widened and spread over those lanes with one vpermps; groups of 64 and 128
 * take a broadcast (128: two chunks summed in int32 first). Per output and row:
 *   y = sx·(Σ_lanes Σ_chunks scale·float(acc) - Σ_g scale_g·zero_g·XS_g) + b,
 * the lanes of four outputs reduced together in one order for every output (reduce4),
 * every sum in a fixed order, so an output depends only on its row and its weight row.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#define W4_MR 4
#define W4_PF_TILES 2
#define W4_XQ_BYTES 24576 /* quantised rows; as many bytes again of lane offsets (stack < 64 KiB) */

static inline __m512 abs_ps(__m512 v) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* Quantises row x (K floats, K a multiple of 32) into xq in the chunk order above, the group
 * sums into xs[K / G], and per chunk the 16 int32 lane offsets off = -8·Σ (the lane's 4 xq)
 * (a trailing block: 8 lanes), which start each chunk's vpdpbusd so that it sums xq·(u - 8)
 * = xq·q directly; returns sx. */
static float quantise_row(const float *x, int64_t K, int64_t G, int8_t *xq, float *xs, int32_t *off) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t p = 0; p < K; p += 16) m = _mm512_max_ps(abs_ps(_mm512_loadu_ps(x + p)), m);
    float inv, sx;
    nrv_w8a8_row_scale(_mm512_reduce_max_ps(m), &inv, &sx);
    const __m512 vinv = _mm512_set1_ps(inv), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    static const int slot[4] = {0, 2, 1, 3}; /* 16-value piece -> position within its chunk */
    const int64_t full = K / 64 * 64;
    for (int64_t g = 0; g < K / G; g++) xs[g] = 0.0f;
    for (int64_t p = 0; p < K; p += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + p), vinv);
        v = _mm512_max_ps(_mm512_min_ps(v, hi), lo); /* NaN -> 127, as the reference */
        const __m512i qi = _mm512_cvtps_epi32(v);
        const int64_t dst = p < full ? p / 64 * 64 + slot[(p / 16) % 4] * 16 : p;
        _mm_storeu_si128((__m128i *)(xq + dst), _mm512_cvtepi32_epi8(qi));
        xs[p / G] += (float)_mm512_reduce_add_epi32(qi); /* exact: |sum| <= 127·128 */
    }
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < K / 64; c++) {
        const __m512i lane = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(xq + 64 * c));
        _mm512_storeu_si512(off + 16 * c, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(lane, 3)));
    }
    if (K % 64) {
        const __m256i lane = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                                 _mm256_loadu_si256((const __m256i *)(xq + K - 32)));
        _mm256_storeu_si256((__m256i *)(off + 16 * (K / 64)),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(lane, 3)));
    }
    return sx;
}

/* The sums of 16 lanes of a, b, c and d, in one order for every position (lanes j and j+2 of
 * each 128-bit quarter, then j and j+1, then quarters 0+2 and 1+3, then the two): an output's
 * value never depends on which slot of a tile computed it. */
static inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 q = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(_mm512_shuffle_f32x4(q, q, 0x08)),
                                   _mm512_castps512_ps256(_mm512_shuffle_f32x4(q, q, 0x0D)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* The 64 weight bytes (0..15) of chunk c (k = 64c..64c+63) of a weight row, in lane order. */
static inline __m512i chunk_u8(const uint8_t *row, int packed, int64_t c) {
    if (packed) { /* the 32 bytes in both halves, the upper half shifted right by 4 */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(row + 32 * c));
        const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
        return _mm512_and_si512(both, _mm512_set1_epi8(15));
    }
    const __m512i v = _mm512_loadu_si512((const void *)(row + 64 * c));
    return _mm512_add_epi8(_mm512_shuffle_i64x2(v, v, 0xD8), _mm512_set1_epi8(8));
}

/* The trailing block (k = K-32..K-1) as 32 bytes in natural order. */
static inline __m256i tail_u8(const uint8_t *row, int packed, int64_t K) {
    if (packed) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(row + (K - 32) / 2));
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
        return _mm256_and_si256(both, _mm256_set1_epi8(15));
    }
    return _mm256_add_epi8(_mm256_loadu_si256((const __m256i *)(row + K - 32)), _mm256_set1_epi8(8));
}

/* Chunks are walked in spans of 8 (512 weights); a span's scales (16, 8 or 4 groups) are
 * widened once into a zmm and each chunk's scale vector is one vpermps of it: lane l of
 * chunk c takes group (64c + 16·slot(l) ... ) / G, i.e. for group 32 groups 2c (lanes 0-3,
 * 8-11) and 2c + 1 (lanes 4-7, 12-15), for 64 group c, for 128 group c / 2. */
static inline __m512i scale_index(int64_t G, int c) {
    if (G == 32) return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                                         _mm512_set1_epi32(2 * c));
    return _mm512_set1_epi32(G == 64 ? c : c / 2);
}

/* NO outputs from o0 x R rows (quantised rows xq and lane offsets off, row stride K bytes /
 * K/4 ints; sx, xs per row). */
static inline __attribute__((always_inline)) void w4a8_tile(const int NO, const int R, const int8_t *xq,
                                                            const int32_t *off, const float *sx, const float *xs,
                                                            int64_t K, const nrv_w4_weight *w, int64_t o0,
                                                            const float *b, float *y, int64_t ldy) {
    const int64_t G = w->group, ng = K / G, nc = K / 64, rb = nrv_w4_row_bytes(w), gspan = 512 / G;
    const int64_t ko = K / 4; /* ints of lane offsets per row */
    const int packed = w->layout == NRV_W4_PACKED;
    const uint8_t *rows[4], *ahead[4];
    const uint16_t *sc[4];
    for (int j = 0; j < NO; j++) {
        rows[j] = (const uint8_t *)w->q + (o0 + j) * rb;
        sc[j] = w->scales + (o0 + j) * ng;
        /* with several rows of x, NO interleaved weight rows are more streams than the hardware
         * prefetcher follows on its own: the rows W4_PF_TILES tiles ahead are prefetched as these
         * are read. One row of x (a GEMV) takes one weight row at a time, a single sequential
         * stream the hardware follows best alone (cold 4096 x 4096 g64 packed: 4 rows
         * interleaved + prefetch 0.78 ms, 1 row + prefetch 0.66, 1 row alone 0.56; unpacked
         * 1.25 -> 0.63) */
        const int64_t pf = o0 + j + (int64_t)NO * W4_PF_TILES;
        ahead[j] = pf < w->out && NO > 1 ? (const uint8_t *)w->q + pf * rb : NULL;
    }
    __m512 tot[4][W4_MR];
    for (int j = 0; j < NO; j++)
        for (int r = 0; r < R; r++) tot[j][r] = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < nc; c0 += 8) {
        const int64_t g0 = c0 * 64 / G, left = ng - g0 < gspan ? ng - g0 : gspan;
        const __mmask16 m = (__mmask16)((1u << left) - 1);
        __m512 S[4];
        for (int j = 0; j < NO; j++) S[j] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, sc[j] + g0));
        const int span = (int)(nc - c0 < 8 ? nc - c0 : 8);
        for (int c = 0; c < span; c += (G == 128 ? 2 : 1)) {
            const __m512i idx = scale_index(G, c);
            const int two = G == 128 && c + 1 < span;
            const int64_t cc = c0 + c;
            for (int j = 0; j < NO; j++) {
                if (ahead[j]) _mm_prefetch((const char *)ahead[j] + (packed ? 32 : 64) * cc, _MM_HINT_T0);
                const __m512i u = chunk_u8(rows[j], packed, cc);
                __m512i acc[W4_MR];
                for (int r = 0; r < R; r++)
                    acc[r] = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)(off + r * ko + 16 * cc)), u,
                                                 _mm512_loadu_si512((const void *)(xq + r * K + 64 * cc)));
                if (two) {
                    const __m512i u2 = chunk_u8(rows[j], packed, cc + 1);
                    for (int r = 0; r < R; r++) {
                        acc[r] = _mm512_dpbusd_epi32(acc[r], u2,
                                                     _mm512_loadu_si512((const void *)(xq + r * K + 64 * (cc + 1))));
                        acc[r] = _mm512_add_epi32(acc[r], _mm512_loadu_si512((const void *)(off + r * ko + 16 * (cc + 1))));
                    }
                }
                const __m512 sv = _mm512_permutexvar_ps(idx, S[j]);
                for (int r = 0; r < R; r++) tot[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), sv, tot[j][r]);
            }
        }
    }
    __m512 corr[4][W4_MR];
    for (int j = 0; j < NO; j++) {
        const uint16_t *scj = sc[j];
        if (K % 64) { /* one trailing block of 32 (group 32) */
            const __m256i u = tail_u8(rows[j], packed, K);
            const __m256 sv = _mm256_set1_ps(_cvtsh_ss(scj[ng - 1]));
            for (int r = 0; r < R; r++) {
                const __m256i a = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)(off + r * ko + 16 * nc)), u,
                                                      _mm256_loadu_si256((const __m256i *)(xq + r * K + K - 32)));
                tot[j][r] = _mm512_add_ps(tot[j][r], _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(a), sv)));
            }
        }
        /* the zero-point term Σ_g scale_g·zero_g·XS_g, 16 groups at a time */
        for (int r = 0; r < R; r++) corr[j][r] = _mm512_setzero_ps();
        if (w->zero)
            for (int64_t g = 0; g < ng; g += 16) {
                const __mmask16 m = ng - g >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ng - g)) - 1);
                const __m512 so = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, scj + g)),
                                                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                    _mm_maskz_loadu_epi8(m, w->zero + (o0 + j) * ng + g))));
                for (int r = 0; r < R; r++)
                    corr[j][r] = _mm512_fmadd_ps(so, _mm512_maskz_loadu_ps(m, xs + r * ng + g), corr[j][r]);
            }
    }
    const __m512 zero = _mm512_setzero_ps();
    for (int r = 0; r < R; r++) {
        float t[4], z[4];
        _mm_storeu_ps(t, reduce4(tot[0][r], NO > 1 ? tot[1][r] : zero, NO > 2 ? tot[2][r] : zero,
                                 NO > 3 ? tot[3][r] : zero));
        if (w->zero)
            _mm_storeu_ps(z, reduce4(corr[0][r], NO > 1 ? corr[1][r] : zero, NO > 2 ? corr[2][r] : zero,
                                     NO > 3 ? corr[3][r] : zero));
        for (int j = 0; j < NO; j++)
            y[r * ldy + o0 + j] = sx[r] * (w->zero ? t[j] - z[j] : t[j]) + (b ? b[o0 + j] : 0.0f);
    }
}

#define W4_TILE(NO_, R_)                                                                                     \
    static __attribute__((noinline)) void tile_##NO_##_##R_(const int8_t *xq, const int32_t *off, const float *sx, \
                                                            const float *xs, int64_t K, const nrv_w4_weight *w,   \
                                                            int64_t o0, const float *b, float *y, int64_t ldy) {  \
        w4a8_tile(NO_, R_, xq, off, sx, xs, K, w, o0, b, y, ldy);                                                 \
    }
W4_TILE(2, 2)
W4_TILE(1, 1)
W4_TILE(1, 2)
W4_TILE(1, 3)
W4_TILE(1, 4)
#undef W4_TILE

typedef void (*tile_fn)(const int8_t *, const int32_t *, const float *, const float *, int64_t, const nrv_w4_weight *,
                        int64_t, const float *, float *, int64_t);

void nrv_linear_w4a8_vnni(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy) {
    /* per row count: the widest tile (outputs at once) and the one-output tile; one row takes
     * one output at a time (the weight read as one stream, above) */
    static const tile_fn wide[W4_MR + 1] = {NULL, tile_1_1, tile_2_2, tile_1_3, tile_1_4};
    static const tile_fn one[W4_MR + 1] = {NULL, tile_1_1, tile_1_2, tile_1_3, tile_1_4};
    static const int wide_no[W4_MR + 1] = {0, 1, 2, 1, 1};
    const int64_t K = w->in, G = w->group, ng = K / G, N = w->out;
    _Alignas(64) int8_t xq[W4_XQ_BYTES];
    _Alignas(64) int32_t off[W4_XQ_BYTES / 4];
    float sx[W4_MR], xs[W4_MR * (NRV_W4_MAX_IN / 32)];
    int64_t mr = W4_XQ_BYTES / K;
    if (mr > W4_MR) mr = W4_MR;
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int R = (int)(rows - r0 < mr ? rows - r0 : mr), NO = wide_no[R];
        for (int r = 0; r < R; r++)
            sx[r] = quantise_row(x + (r0 + r) * K, K, G, xq + r * K, xs + r * ng, off + r * (K / 4));
        int64_t o = 0;
        for (; o + NO <= N; o += NO) wide[R](xq, off, sx, xs, K, w, o, b, y + r0 * ldy, ldy);
        for (; o < N; o++) one[R](xq, off, sx, xs, K, w, o, b, y + r0 * ldy, ldy);
    }
}
