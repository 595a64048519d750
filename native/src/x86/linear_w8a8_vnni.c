/* linear_w8a8_vnni.c — int8 x int8 linear layer (w8a8), AVX-512 VNNI (vpdpbusd).
 *
 * Math and epilogue order: native/src/kernels/linear_w8a8.c (bit-identical to that
 * reference); packed weight layout: kernels.h. Per block of up to W8A8_MR rows of x:
 *  1. each row is scanned once for max|x| and (with z) the 16-lane row sum, then quantised
 *     to u8 xu = xq + 128 into a stack buffer [rows][Kpad] (pad k: 128, i.e. xq = 0; the
 *     weight is 0 there anyway);
 *  2. for every pair of 16-output blocks: a register tile of R rows x 32 outputs of int32
 *     accumulators (16 zmm; one row: gemv_row below, one block at a time), per 4 k two
 *     64-byte weight loads and R 4-byte broadcasts of xu
 *     feed 2·R vpdpbusd (u8 x s8 -> s32, four products summed per lane; no saturation:
 *     |Σ| <= 255·128·K < 2^31 for K <= NRV_W8A8_MAX_K = 16384);
 *  3. acc - 128·colsum[n] = Σ_k xq·q exactly, then the fp32 epilogue with explicit FMA.
 * The weight (N·Kpad bytes) is read once per block of rows, from L2 for the encoder's
 * layers (416 x 1664 = 692 KB).
 */
#include "linear_w8a8_avx512.h"

#define W8A8_MR 8
#define W8A8_XQ_BYTES 32768
#define W8A8_SLICE (W8A8_XQ_BYTES / W8A8_MR) /* bytes of a row per slice when K is cut */

/* R rows x NB blocks of 16 outputs starting at output n0 (nvalid of them real), over the
 * weight's k-blocks [kb0, kb0 + nkb) of kb_n (4 k each; xu holds those, row stride xs bytes).
 * A K cut in slices (nrv_linear_w8a8_vnni) keeps the int32 sums in y between slices: `first`
 * starts them at 0 (else from y), `last` ends with the epilogue (else stores them to y). */
static inline __attribute__((always_inline)) void tile(const int R, const int NB, const uint8_t *xu, int64_t xs,
                                                       int64_t kb0, int64_t nkb, int64_t kb_n, const int8_t *packed,
                                                       int64_t n0, int64_t nvalid, const int32_t *colsum,
                                                       const float *sx, const float *rsum, const float *s,
                                                       const float *z, int64_t st, const float *b, float *y,
                                                       int64_t ldy, int first, int last) {
    const int8_t *w0 = packed + ((n0 / 16) * kb_n + kb0) * 64, *w1 = w0 + kb_n * 64;
    int32_t *part = (int32_t *)(void *)y; /* the slices' running sums, in y's bytes */
    __m512i acc[W8A8_MR][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) {
            const int64_t left = nvalid - 16 * j;
            const __mmask16 k = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            acc[r][j] = first ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi32(k, part + r * ldy + n0 + 16 * j);
        }
    for (int64_t kb = 0; kb < nkb; kb++) {
        const __m512i wa = _mm512_loadu_si512(w0 + kb * 64);
        const __m512i wb = NB > 1 ? _mm512_loadu_si512(w1 + kb * 64) : wa;
        for (int r = 0; r < R; r++) {
            int32_t xv;
            memcpy(&xv, xu + r * xs + kb * 4, 4);
            const __m512i xb = _mm512_set1_epi32(xv);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xb, wa);
            if (NB > 1) acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xb, wb);
        }
    }
    for (int j = 0; j < NB; j++) {
        const int64_t left = nvalid - 16 * j;
        if (left <= 0) break;
        if (!last) {
            const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            for (int r = 0; r < R; r++) _mm512_mask_storeu_epi32(part + r * ldy + n0 + 16 * j, k, acc[r][j]);
            continue;
        }
        __m512i a[W8A8_MR];
        for (int r = 0; r < R; r++) a[r] = acc[r][j];
        store_block(R, a, n0 + 16 * j, left, colsum, sx, rsum, s, z, st, b, y, ldy);
    }
}

/* One row (a decode step): each block of 16 outputs is one contiguous run of the packed
 * weight (Kpad·16 bytes), read start to end with four accumulators along k, so the whole
 * weight is a single sequential stream. The two-block tile above interleaves two runs and
 * streamed a 416 x 32768 weight from memory at ~16 GB/s; this at ~26 (a plain read: 25-32;
 * Zen 4, one thread). Integer sums are exact in any order: the result is the tile's, bit for bit. */
static void gemv_row(const uint8_t *xu, int64_t kp, const int8_t *packed, int64_t out, const int32_t *colsum,
                     float sx, float rsum, const float *s, const float *z, int64_t st, const float *b, float *y) {
    const int64_t kb_n = kp / 4;
    for (int64_t n0 = 0; n0 < out; n0 += 16) {
        const int8_t *w = packed + (n0 / 16) * kb_n * 64;
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        int64_t kb = 0;
        for (; kb + 4 <= kb_n; kb += 4) {
            int32_t xv[4];
            memcpy(xv, xu + kb * 4, 16);
            a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(xv[0]), _mm512_loadu_si512(w + kb * 64));
            a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(xv[1]), _mm512_loadu_si512(w + kb * 64 + 64));
            a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(xv[2]), _mm512_loadu_si512(w + kb * 64 + 128));
            a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(xv[3]), _mm512_loadu_si512(w + kb * 64 + 192));
        }
        for (; kb < kb_n; kb++) {
            int32_t xv;
            memcpy(&xv, xu + kb * 4, 4);
            a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(xv), _mm512_loadu_si512(w + kb * 64));
        }
        __m512i a[1] = {_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3))};
        store_block(1, a, n0, out - n0, colsum, &sx, &rsum, s, z, st, b, y, 0);
    }
}

#define W8A8_CASE(R_)                                                                                        \
    case R_:                                                                                                 \
        if (nb2)                                                                                             \
            tile(R_, 2, xu, xs, kb0, nkb, kb_n, packed, n0, nvalid, colsum, sx, rsum, s, z, st, b, y, ldy, first, \
                 last);                                                                                      \
        else                                                                                                 \
            tile(R_, 1, xu, xs, kb0, nkb, kb_n, packed, n0, nvalid, colsum, sx, rsum, s, z, st, b, y, ldy, first, \
                 last);                                                                                      \
        return;

static __attribute__((noinline)) void tile_rows(int R, int nb2, const uint8_t *xu, int64_t xs, int64_t kb0,
                                                int64_t nkb, int64_t kb_n, const int8_t *packed, int64_t n0,
                                                int64_t nvalid, const int32_t *colsum, const float *sx,
                                                const float *rsum, const float *s, const float *z, int64_t st,
                                                const float *b, float *y, int64_t ldy, int first, int last) {
    switch (R) {
        W8A8_CASE(1)
        W8A8_CASE(2)
        W8A8_CASE(3)
        W8A8_CASE(4)
        W8A8_CASE(5)
        W8A8_CASE(6)
        W8A8_CASE(7)
        W8A8_CASE(8)
    default: return;
    }
}
#undef W8A8_CASE

void nrv_linear_w8a8_vnni(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y) {
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16, kb_n = kp / 4;
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kp); /* read with unaligned loads */
    int64_t mr = W8A8_XQ_BYTES / kp;
    if (mr > W8A8_MR) mr = W8A8_MR;
    /* rows too wide for W8A8_MR of them in xu: K in slices (linear_w8a8_slices.h) */
    const int sliced = mr < W8A8_MR && rows > mr;
    if (sliced) mr = W8A8_MR;
    const int64_t span = sliced ? W8A8_SLICE : kp; /* bytes per row of xu; one slice when it fits */
    _Alignas(64) uint8_t xu[W8A8_XQ_BYTES];
    float sx[W8A8_MR], rsum[W8A8_MR], inv[W8A8_MR];
    int32_t isum[W8A8_MR];
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int R = (int)(rows - r0 < mr ? rows - r0 : mr);
        float *yb = y + r0 * out;
        if (R == 1) {
            sx[0] = w8a8_quantise_row(row_scale, quantise_span, x + r0 * in, in, kp, xu, z != NULL, rsum);
            gemv_row(xu, kp, packed, out, colsum, sx[0], rsum[0], s, z, sz_stride, b, yb);
            continue;
        }
        w8a8_slices_begin(row_scale, x + r0 * in, in, R, sx, inv, isum);
        for (int64_t k0 = 0; k0 < kp; k0 += span) {
            const int64_t w = kp - k0 < span ? kp - k0 : span;
            const int last = w8a8_quantise_slice(quantise_span, x + r0 * in, in, kp, R, k0, w, inv, xu, span,
                                                 z != NULL, isum, sx, rsum);
            for (int64_t n0 = 0; n0 < out; n0 += 32) {
                const int64_t nvalid = out - n0 < 32 ? out - n0 : 32;
                tile_rows(R, nvalid > 16, xu, span, k0 / 4, w / 4, kb_n, packed, n0, nvalid, colsum, sx, rsum, s,
                          z, sz_stride, b, yb, out, k0 == 0, last);
            }
        }
    }
}
