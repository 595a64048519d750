/* matmul_integer_avx2.c — exact integer product (ONNX MatMulInteger), AVX2 (no VNNI).
 *
 * Contract and epilogue: kernels.h above nrv_matmul_integer_fn; reference:
 * kernels/matmul_integer.c. vpmaddubsw would saturate (255·127·2 > 2^15), so both sides are
 * widened to 16 bits and multiplied with vpmaddwd (exact, int32 pairs). Per 4 k, each
 * 16-byte quarter of a packed weight block (4 outputs x 4 k) becomes 16 int16, the row's 4
 * bytes are repeated four times as int16, and vpmaddwd leaves two partial sums per output
 * (k0+k1, k2+k3), joined at the end with vphaddd. Tile: 2 rows x 16 outputs (8 ymm
 * accumulators). The int32 lanes wrap like the reference's uint32: bit-identical.
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

void nrv_matmul_integer_avx2(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                             int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                             const int32_t *zq, int32_t *y) {
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16, kb_n = kp / 4, kfull = in / 4;
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kp);
    const uint32_t flip4 = flip * 0x01010101u;
    for (int64_t r0 = 0; r0 < rows; r0 += MI_MR) {
        const int R = (int)(rows - r0 < MI_MR ? rows - r0 : MI_MR);
        const uint8_t *ar[MI_MR];
        int32_t tail[MI_MR] = {0, 0}, t_zq[MI_MR] = {0, 0};
        for (int r = 0; r < R; r++) {
            ar[r] = a + (r0 + r) * in;
            uint8_t t[4] = {0, 0, 0, 0};
            for (int64_t k = kfull * 4; k < in; k++) t[k - kfull * 4] = (uint8_t)(ar[r][k] ^ flip);
            memcpy(&tail[r], t, 4);
            /* zq·(in·za − Σa): the zero points' two terms, one factor per row */
            if (zq) t_zq[r] = (int32_t)((uint32_t)in * (uint32_t)za[(r0 + r) * za_stride] - row_sum(ar[r], in, flip));
        }
        for (int64_t n = n0; n < n1; n += 16) {
            const int8_t *w = packed + (n / 16) * kb_n * 64;
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
            const __m256i cs0 = _mm256_loadu_si256((const __m256i *)(colsum + n)),
                          cs1 = _mm256_loadu_si256((const __m256i *)(colsum + n + 8));
            int32_t zqb[16] = {0};
            const int64_t left = n1 - n < 16 ? n1 - n : 16;
            if (zq) memcpy(zqb, zq + n, (size_t)left * sizeof(int32_t));
            const __m256i zq0 = _mm256_loadu_si256((const __m256i *)zqb),
                          zq1 = _mm256_loadu_si256((const __m256i *)(zqb + 8));
            for (int r = 0; r < R; r++) {
                const __m256i zav = _mm256_set1_epi32(za[(r0 + r) * za_stride]), tv = _mm256_set1_epi32(t_zq[r]);
                __m256i v0 = _mm256_sub_epi32(join(acc[r][0], acc[r][1]), _mm256_mullo_epi32(zav, cs0));
                __m256i v1 = _mm256_sub_epi32(join(acc[r][2], acc[r][3]), _mm256_mullo_epi32(zav, cs1));
                v0 = _mm256_add_epi32(v0, _mm256_mullo_epi32(zq0, tv));
                v1 = _mm256_add_epi32(v1, _mm256_mullo_epi32(zq1, tv));
                int32_t *yr = y + (r0 + r) * out + n;
                if (left == 16) {
                    _mm256_storeu_si256((__m256i *)yr, v0);
                    _mm256_storeu_si256((__m256i *)(yr + 8), v1);
                } else {
                    int32_t buf[16];
                    _mm256_storeu_si256((__m256i *)buf, v0);
                    _mm256_storeu_si256((__m256i *)(buf + 8), v1);
                    memcpy(yr, buf, (size_t)left * sizeof(int32_t));
                }
            }
        }
    }
}
