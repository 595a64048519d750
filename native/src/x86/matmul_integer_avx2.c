/* matmul_integer_avx2.c — exact integer product (ONNX MatMulInteger), AVX2 (no VNNI).
 *
 * Contract and epilogue: kernels.h above nrv_matmul_integer_fn; reference:
 * kernels/matmul_integer.c. vpmaddubsw would saturate (255·127·2 > 2^15), so both sides are
 * widened to 16 bits and multiplied with vpmaddwd (exact, int32 pairs). Per 4 k, each
 * 16-byte quarter of a packed weight block (4 outputs x 4 k) becomes 16 int16, the row's 4
 * bytes are repeated four times as int16, and vpmaddwd leaves two partial sums per output
 * (k0+k1, k2+k3), joined at the end with vphaddd. Tile: 2 rows x 16 outputs (8 ymm
 * accumulators). The int32 lanes wrap like the reference's uint32: bit-identical.
 *
 * Blocks of 16 outputs whose weights avoid -128 (symmetric int8: onnxruntime's and most
 * exporters' weights lie in [-127, 127]) take vpmaddubsw without the widening, exactly:
 * with a' = a - 128 in [-128, 127], Σ a·q = Σ a'·q + 128·colsum, and each a'·q is
 * |a'|·(q·sign a'), |a'| <= 128 unsigned and q·sign a' in [-127, 127] signed, so a pair sums
 * to at most 2·128·127 = 32512 and vpmaddubsw never saturates; vpmaddwd with ones then adds
 * the pairs into one int32 per output (vpdpbusd's layout: 4 bytes of k per output). Tile: 4
 * rows x 16 outputs, a' and |a'| of the rows staged once. 400 x 384 -> 1536, one thread, Zen 3:
 * 5.4 -> 3.9 ms (onnxruntime's u8s8 AVX2 kernel 2.45 ms, but it saturates: its int32 sums
 * there are off by up to 1.1e5). A block is checked for -128 once per call (a compare a
 * 32 bytes; 4+ rows share it).
 *
 * Before either, a tile of 4 rows whose bytes each span at most 128 values (hi - lo <= 128,
 * as one token's quantized activations often do) takes a'' = a - lo in [0, 128] as
 * vpmaddubsw's unsigned side against any q, -128 included: a pair sums to within [-32768,
 * 32512], exact, and Σ a·q = Σ a''·q + lo·colsum. That drops the sign step, which costs about
 * a quarter of the symmetric path's time on Zen 3 (measured by timing it without the step:
 * 3.9 -> 2.85 ms); Pipecat's smart-turn v3.2: its products 46 -> 38.6 ms, the model 78 -> 71.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#define MI_MR 2

static inline int32_t group_at(const uint8_t *ar, int64_t kb, int64_t kfull, int32_t tail, uint32_t flip4) {
    if (kb >= kfull) return tail;
    uint32_t v;
    memcpy(&v, ar + kb * 4, 4);
    return (int32_t)(v ^ flip4);
}

/* Outputs 8j..8j+7 of a block from its four pair-sum accumulators (2 outputs' pairs each). */
static inline __m256i join(__m256i lo, __m256i hi) {
    return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(lo, hi), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

static uint32_t row_sum(const uint8_t *ar, int64_t in, uint8_t flip) {
    __m256i s = _mm256_setzero_si256();
    const __m256i fv = _mm256_set1_epi8((char)flip);
    int64_t k = 0;
    for (; k + 32 <= in; k += 32)
        s = _mm256_add_epi64(s, _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ar + k)), fv),
                                                _mm256_setzero_si256()));
    int64_t t[4];
    _mm256_storeu_si256((__m256i *)t, s);
    uint32_t sum = (uint32_t)(t[0] + t[1] + t[2] + t[3]);
    for (; k < in; k++) sum += (uint8_t)(ar[k] ^ flip);
    return sum;
}

/* The least and greatest byte of a row (each xor flip). */
static void row_range(const uint8_t *ar, int64_t in, uint8_t flip, uint8_t *lo, uint8_t *hi) {
    const __m256i fv = _mm256_set1_epi8((char)flip);
    __m256i mn = _mm256_set1_epi8((char)0xff), mx = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= in; k += 32) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ar + k)), fv);
        mn = _mm256_min_epu8(mn, v);
        mx = _mm256_max_epu8(mx, v);
    }
    uint8_t bmn[32], bmx[32];
    _mm256_storeu_si256((__m256i *)bmn, mn);
    _mm256_storeu_si256((__m256i *)bmx, mx);
    uint8_t l = 0xff, h = 0;
    for (int i = 0; i < 32; i++) {
        l = bmn[i] < l ? bmn[i] : l;
        h = bmx[i] > h ? bmx[i] : h;
    }
    for (; k < in; k++) {
        const uint8_t v = (uint8_t)(ar[k] ^ flip);
        l = v < l ? v : l;
        h = v > h ? v : h;
    }
    *lo = l, *hi = h;
}

#define MI_SYM_MR 4
#define MI_SYM_MAX_K 4096 /* the staged rows: 2 · MI_SYM_MR · 4096 bytes (32 KiB) of stack */

/* Whether the block's weights (kb_n groups of 64 bytes) hold no -128. */
static int block_symmetric(const int8_t *w, int64_t kb_n) {
    const __m256i min = _mm256_set1_epi8(-128);
    __m256i hit = _mm256_setzero_si256();
    for (int64_t i = 0; i < kb_n * 2; i++)
        hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(w + 32 * i)), min));
    return _mm256_testz_si256(hit, hit);
}

/* Σ_k a'·q for rows [0, R) of the staged a' (sa) and |a'| (ua), kp bytes each, and the 16
 * outputs of one symmetric block w, into out (R x 2 vectors of 8 outputs); or, sa NULL, Σ_k
 * a''·q of the narrow rows' a'' = a − min(row) in [0, 128] (ua) against any block, -128
 * included: a pair sums to within [-32768, 32512], so vpmaddubsw is exact without the sign
 * step. */
static inline __attribute__((always_inline)) void sym_tile(const int R, const int8_t *sa, const uint8_t *ua,
                                                           int64_t kp, const int8_t *w, int64_t kb_n,
                                                           __m256i out[MI_SYM_MR][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[MI_SYM_MR][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const int32_t *s4 = (const int32_t *)(const void *)sa, *u4 = (const int32_t *)(const void *)ua;
    const int64_t kq = kp / 4; /* a row's groups of 4 bytes */
    for (int64_t kb = 0; kb < kb_n; kb++, w += 64) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)w), w1 = _mm256_loadu_si256((const __m256i *)(w + 32));
        for (int r = 0; r < R; r++) {
            const __m256i uv = _mm256_set1_epi32(u4[r * kq + kb]);
            __m256i q0 = w0, q1 = w1;
            if (sa) {
                const __m256i sv = _mm256_set1_epi32(s4[r * kq + kb]);
                q0 = _mm256_sign_epi8(w0, sv), q1 = _mm256_sign_epi8(w1, sv);
            }
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(uv, q0), ones));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(uv, q1), ones));
        }
    }
    for (int r = 0; r < R; r++) out[r][0] = acc[r][0], out[r][1] = acc[r][1];
}

/* y for rows [r0, r0 + R) and block n from acc = Σ (a − shift[r])·q, 8 outputs a vector: the
 * contract's epilogue with Σ a·q = acc + shift[r]·colsum (128 for the symmetric path's a', the
 * row's least byte for the narrow path's a'', 0 for the widening path), all in uint32 (int32
 * lanes wrap alike). */
static void block_store(const int R, __m256i acc[MI_SYM_MR][2], const int32_t *shift, const int32_t *colsum,
                        const int32_t *zq, const int32_t *za, int64_t za_stride, const int32_t *t_zq, int64_t r0,
                        int64_t n, int64_t n1, int64_t out, int32_t *y) {
    const int64_t left = n1 - n < 16 ? n1 - n : 16;
    int32_t zqb[16] = {0};
    if (zq) memcpy(zqb, zq + n, (size_t)left * sizeof(int32_t));
    const __m256i cs[2] = {_mm256_loadu_si256((const __m256i *)(colsum + n)),
                           _mm256_loadu_si256((const __m256i *)(colsum + n + 8))};
    const __m256i zqv[2] = {_mm256_loadu_si256((const __m256i *)zqb), _mm256_loadu_si256((const __m256i *)(zqb + 8))};
    for (int r = 0; r < R; r++) {
        const __m256i kz = _mm256_set1_epi32((int32_t)((uint32_t)shift[r] - (uint32_t)za[(r0 + r) * za_stride]));
        const __m256i tv = _mm256_set1_epi32(t_zq[r]);
        int32_t buf[16];
        for (int h = 0; h < 2; h++) {
            __m256i v = _mm256_add_epi32(acc[r][h], _mm256_mullo_epi32(kz, cs[h]));
            v = _mm256_add_epi32(v, _mm256_mullo_epi32(zqv[h], tv));
            _mm256_storeu_si256((__m256i *)(buf + 8 * h), v);
        }
        memcpy(y + (r0 + r) * out + n, buf, (size_t)left * sizeof(int32_t));
    }
}

/* Rows [r0, r0 + R) (R <= MI_MR) of block n by the widening kernel: ar their bytes, tail their
 * last partial group of 4 (flipped, zero-filled), t_zq their zq·(in·za − Σa) factor. */
static void wide_block(const int R, const uint8_t *const *ar, const int32_t *tail, const int32_t *t_zq, int64_t r0,
                       int64_t n, int64_t n1, const int8_t *w, int64_t kb_n, int64_t kfull, uint32_t flip4,
                       const int32_t *colsum, const int32_t *zq, const int32_t *za, int64_t za_stride, int64_t out,
                       int32_t *y) {
    __m256i acc[MI_MR][4];
    for (int r = 0; r < MI_MR; r++)
        for (int j = 0; j < 4; j++) acc[r][j] = _mm256_setzero_si256();
    for (int64_t kb = 0; kb < kb_n; kb++) {
        __m256i w16[4];
        for (int j = 0; j < 4; j++)
            w16[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + kb * 64 + 16 * j)));
        for (int r = 0; r < R; r++) {
            const __m256i xb = _mm256_broadcastq_epi64(
                _mm_cvtepu8_epi16(_mm_cvtsi32_si128(group_at(ar[r], kb, kfull, tail[r], flip4))));
            for (int j = 0; j < 4; j++) acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(w16[j], xb));
        }
    }
    __m256i sums[MI_SYM_MR][2];
    for (int r = 0; r < R; r++) sums[r][0] = join(acc[r][0], acc[r][1]), sums[r][1] = join(acc[r][2], acc[r][3]);
    static const int32_t no_shift[MI_SYM_MR] = {0};
    block_store(R, sums, no_shift, colsum, zq, za, za_stride, t_zq, r0, n, n1, out, y);
}

#define MI_SEG_BLOCKS 256 /* blocks of 16 outputs whose symmetry one pass records */

void nrv_matmul_integer_avx2(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                             int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                             const int32_t *zq, int32_t *y) {
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16, kb_n = kp / 4, kfull = in / 4;
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kp);
    const uint32_t flip4 = flip * 0x01010101u;
    const int stage = in <= MI_SYM_MAX_K;
    _Alignas(32) int8_t sa[stage ? MI_SYM_MR * kp : 1];  /* a' = a − 128 of the tile's rows */
    _Alignas(32) uint8_t ua[stage ? MI_SYM_MR * kp : 1]; /* |a'| */
    for (int64_t s0 = n0; s0 < n1; s0 += 16 * MI_SEG_BLOCKS) {
        const int64_t s1 = n1 - s0 < 16 * MI_SEG_BLOCKS ? n1 : s0 + 16 * MI_SEG_BLOCKS;
        uint8_t sym[MI_SEG_BLOCKS];
        int any = 0;
        for (int64_t n = s0; n < s1; n += 16)
            any |= sym[(n - s0) / 16] = (uint8_t)(stage && block_symmetric(packed + (n / 16) * kb_n * 64, kb_n));
        const int mr = stage ? MI_SYM_MR : MI_MR;
        for (int64_t r0 = 0; r0 < rows; r0 += mr) {
            const int R = (int)(rows - r0 < mr ? rows - r0 : mr);
            const uint8_t *ar[MI_SYM_MR];
            int32_t tail[MI_SYM_MR] = {0}, t_zq[MI_SYM_MR] = {0}, low[MI_SYM_MR] = {0};
            int narrow = stage;
            for (int r = 0; r < R; r++) {
                ar[r] = a + (r0 + r) * in;
                uint8_t t[4] = {0, 0, 0, 0};
                for (int64_t k = kfull * 4; k < in; k++) t[k - kfull * 4] = (uint8_t)(ar[r][k] ^ flip);
                memcpy(&tail[r], t, 4);
                /* zq·(in·za − Σa): the zero points' two terms, one factor per row */
                if (zq)
                    t_zq[r] = (int32_t)((uint32_t)in * (uint32_t)za[(r0 + r) * za_stride] - row_sum(ar[r], in, flip));
                if (narrow) {
                    uint8_t lo, hi;
                    row_range(ar[r], in, flip, &lo, &hi);
                    low[r] = lo;
                    narrow = hi - lo <= 128;
                }
            }
            if (narrow) { /* a'' = a − min(row) in [0, 128], the padding to kp zero (its weights are 0) */
                for (int r = 0; r < R; r++) {
                    const __m256i f = _mm256_set1_epi8((char)flip), lo = _mm256_set1_epi8((char)low[r]);
                    int64_t k = 0;
                    for (; k + 32 <= in; k += 32)
                        _mm256_storeu_si256((__m256i *)(ua + r * kp + k),
                                            _mm256_sub_epi8(_mm256_xor_si256(
                                                                _mm256_loadu_si256((const __m256i *)(ar[r] + k)), f),
                                                            lo));
                    for (; k < kp; k++) ua[r * kp + k] = k < in ? (uint8_t)((ar[r][k] ^ flip) - low[r]) : 0;
                }
            } else if (any) { /* a' and |a'|, the padding to kp zero (its weights are 0 too) */
                for (int r = 0; r < R; r++) {
                    const __m256i f = _mm256_set1_epi8((char)(flip ^ 0x80));
                    int64_t k = 0;
                    for (; k + 32 <= in; k += 32) {
                        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ar[r] + k)), f);
                        _mm256_storeu_si256((__m256i *)(sa + r * kp + k), v);
                        _mm256_storeu_si256((__m256i *)(ua + r * kp + k), _mm256_abs_epi8(v));
                    }
                    for (; k < kp; k++) {
                        const int8_t v = k < in ? (int8_t)(ar[r][k] ^ flip ^ 0x80) : 0;
                        sa[r * kp + k] = v;
                        ua[r * kp + k] = (uint8_t)(v < 0 ? -(int)v : v);
                    }
                }
            }
            static const int32_t shift128[MI_SYM_MR] = {128, 128, 128, 128};
            for (int64_t n = s0; n < s1; n += 16) {
                const int8_t *w = packed + (n / 16) * kb_n * 64;
                if (narrow || sym[(n - s0) / 16]) {
                    __m256i acc[MI_SYM_MR][2];
                    if (narrow) {
                        switch (R) {
                        case 4: sym_tile(4, NULL, ua, kp, w, kb_n, acc); break;
                        case 3: sym_tile(3, NULL, ua, kp, w, kb_n, acc); break;
                        case 2: sym_tile(2, NULL, ua, kp, w, kb_n, acc); break;
                        default: sym_tile(1, NULL, ua, kp, w, kb_n, acc); break;
                        }
                    } else {
                        switch (R) {
                        case 4: sym_tile(4, sa, ua, kp, w, kb_n, acc); break;
                        case 3: sym_tile(3, sa, ua, kp, w, kb_n, acc); break;
                        case 2: sym_tile(2, sa, ua, kp, w, kb_n, acc); break;
                        default: sym_tile(1, sa, ua, kp, w, kb_n, acc); break;
                        }
                    }
                    block_store(R, acc, narrow ? low : shift128, colsum, zq, za, za_stride, t_zq, r0, n, n1, out, y);
                    continue;
                }
                for (int h = 0; h < R; h += MI_MR)
                    wide_block(R - h < MI_MR ? R - h : MI_MR, ar + h, tail + h, t_zq + h, r0 + h, n, n1, w, kb_n,
                               kfull, flip4, colsum, zq, za, za_stride, out, y);
            }
        }
    }
}
