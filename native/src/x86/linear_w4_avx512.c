/* linear_w4_avx512.c — INT4-weight linear layer with fp32 activations (w4a32), AVX-512F.
 *
 * Contract: kernels.h above nrv_linear_w4_fn; math: kernels/linear_w4.c.
 * Dequantisation is a table lookup: for each (output, group) the 16 possible weights
 * T[u] = scale·(u - 8 - zero), u = 0..15, sit in one zmm (each exact in fp32: an fp16
 * scale times an integer below 32), and vpermps turns 16 weight indices into 16 fp32
 * weights in one instruction. It only reads the low 4 bits of each 32-bit index, so
 *  - packed: vpmovzxbd of a block's 16 bytes gives the low nibbles as indices as they
 *    are, and one vpsrld by 4 the high nibbles (no masking);
 *  - unpacked: vpmovsxbd of q in [-8, 7] gives the index q mod 16, looked up in T rotated
 *    by 8 lanes (T[(i + 8) mod 16]), which holds the same value for the same q.
 * Both layouts therefore feed bit-identical weights to the same FMA sequence. Each output
 * keeps two accumulators per row (the block's first and last 16 weights), summed at the
 * end in a fixed order, so its value depends only on its row and its weight row.
 * Tiles: up to W4_NO outputs x W4_R rows share each x load and give 2·NO·R independent
 * FMA chains; a group's table is built once per output and reused for every row.
 */
#include <immintrin.h>

#include "kernels.h"

static inline __attribute__((always_inline)) void w4a32_tile(const int NO, const int R, const float *x, int64_t K,
                                                             const nrv_w4_weight *w, int64_t o0, const float *b,
                                                             float *y, int64_t ldy) {
    const int64_t G = w->group, ng = K / G;
    const int packed = w->layout == NRV_W4_PACKED;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 acc[4][4][2];
    for (int j = 0; j < NO; j++)
        for (int r = 0; r < R; r++) acc[j][r][0] = acc[j][r][1] = _mm512_setzero_ps();
    const int64_t rb = nrv_w4_row_bytes(w);
    for (int64_t g = 0; g < ng; g++) {
        __m512 T[4];
        for (int j = 0; j < NO; j++) {
            const int64_t i = (o0 + j) * ng + g;
            const float s = _cvtsh_ss(w->scales[i]);
            const float off = (float)(8 + (w->zero ? w->zero[i] : 0));
            T[j] = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(off)), _mm512_set1_ps(s));
            if (!packed) T[j] = _mm512_shuffle_f32x4(T[j], T[j], 0x4E);
        }
        for (int64_t k = g * G; k < (g + 1) * G; k += 32) {
            for (int j = 0; j < NO; j++) {
                const uint8_t *row = (const uint8_t *)w->q + (o0 + j) * rb;
                __m512 w0, w1;
                if (packed) {
                    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + k / 2)));
                    w0 = _mm512_permutexvar_ps(v, T[j]);
                    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T[j]);
                } else {
                    w0 = _mm512_permutexvar_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + k))), T[j]);
                    w1 = _mm512_permutexvar_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + k + 16))),
                                               T[j]);
                }
                for (int r = 0; r < R; r++) {
                    acc[j][r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * K + k), w0, acc[j][r][0]);
                    acc[j][r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * K + k + 16), w1, acc[j][r][1]);
                }
            }
        }
    }
    for (int j = 0; j < NO; j++)
        for (int r = 0; r < R; r++)
            y[r * ldy + o0 + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][r][0], acc[j][r][1])) +
                                  (b ? b[o0 + j] : 0.0f);
}

#define W4_TILE(NO_, R_)                                                                                       \
    static __attribute__((noinline)) void tile_##NO_##_##R_(const float *x, int64_t K, const nrv_w4_weight *w, \
                                                            int64_t o0, const float *b, float *y, int64_t ldy) { \
        w4a32_tile(NO_, R_, x, K, w, o0, b, y, ldy);                                                            \
    }
W4_TILE(4, 1)
W4_TILE(4, 2)
W4_TILE(2, 3)
W4_TILE(2, 4)
W4_TILE(1, 1)
W4_TILE(1, 2)
W4_TILE(1, 3)
W4_TILE(1, 4)
#undef W4_TILE

typedef void (*tile_fn)(const float *, int64_t, const nrv_w4_weight *, int64_t, const float *, float *, int64_t);

void nrv_linear_w4a32_avx512(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                             int64_t ldy) {
    static const tile_fn wide[5] = {NULL, tile_4_1, tile_4_2, tile_2_3, tile_2_4};
    static const tile_fn one[5] = {NULL, tile_1_1, tile_1_2, tile_1_3, tile_1_4};
    const int64_t K = w->in, N = w->out;
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int R = (int)(rows - r0 < 4 ? rows - r0 : 4), NO = R <= 2 ? 4 : 2;
        const float *xr = x + r0 * K;
        float *yr = y + r0 * ldy;
        int64_t o = 0;
        for (; o + NO <= N; o += NO) wide[R](xr, K, w, o, b, yr, ldy);
        for (; o < N; o++) one[R](xr, K, w, o, b, yr, ldy);
    }
}
