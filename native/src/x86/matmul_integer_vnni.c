/* matmul_integer_vnni.c — exact integer product (ONNX MatMulInteger), AVX-512 VNNI.
 *
 * Contract and epilogue: kernels.h above nrv_matmul_integer_fn; reference:
 * kernels/matmul_integer.c. The u8 rows are the vpdpbusd operand as they are (s8 rows are
 * flipped by xor 0x80 as they are broadcast), so there is no staging buffer: per 4 k a row's
 * 4 bytes are broadcast against a 64-byte block of the packed weight (16 outputs x 4 k).
 *  - several rows: a register tile of R <= 8 rows x 32 outputs (16 zmm accumulators), the
 *    weight read once per block of rows;
 *  - one row: each block of 16 outputs is one contiguous run of the weight, read with four
 *    accumulators along k (a single sequential stream, as linear_w8a8's gemv_row).
 * A row's last partial group of 4 k is copied zero-padded (never read past the row). The
 * int32 lanes wrap like the reference's uint32: bit-identical.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#define MI_MR 8

typedef struct mi_rows {
    const uint8_t *a;
    int64_t in, kfull, kb_n; /* kfull: whole groups of 4 k; kb_n: groups in the packed weight */
    uint32_t flip4;
    int32_t tail[MI_MR]; /* each row's partial last group, flipped, zero-padded */
    int32_t za[MI_MR], asum[MI_MR];
} mi_rows;

static inline int32_t group_at(const mi_rows *m, int r, int64_t kb) {
    uint32_t v;
    memcpy(&v, m->a + r * m->in + kb * 4, 4);
    return (int32_t)(v ^ m->flip4);
}

/* y for R rows x one block of 16 outputs at n (left >= 1 real): the kernels.h epilogue. */
static inline __attribute__((always_inline)) void store_block(const int R, const __m512i *acc, const mi_rows *m,
                                                              int64_t n, int64_t left, const int32_t *colsum,
                                                              const int32_t *zq, int32_t *y, int64_t ldy) {
    const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    const __m512i cs = _mm512_loadu_si512(colsum + n); /* colsum is padded to 16 */
    const __m512i zv = zq ? _mm512_maskz_loadu_epi32(k, zq + n) : _mm512_setzero_si512();
    for (int r = 0; r < R; r++) {
        const __m512i za = _mm512_set1_epi32(m->za[r]);
        __m512i v = _mm512_sub_epi32(acc[r], _mm512_mullo_epi32(za, cs));
        if (zq) {
            const __m512i t = _mm512_set1_epi32((int32_t)((uint32_t)m->in * (uint32_t)m->za[r] - (uint32_t)m->asum[r]));
            v = _mm512_add_epi32(v, _mm512_mullo_epi32(zv, t)); /* zq·(in·za − Σa) */
        }
        _mm512_mask_storeu_epi32(y + r * ldy + n, k, v);
    }
}

/* R rows x NB blocks of 16 outputs from n0 (nvalid real). */
static inline __attribute__((always_inline)) void tile(const int R, const int NB, const mi_rows *m,
                                                       const int8_t *packed, int64_t n0, int64_t nvalid,
                                                       const int32_t *colsum, const int32_t *zq, int32_t *y,
                                                       int64_t ldy) {
    const int64_t kb_n = m->kb_n;
    const int8_t *w0 = packed + (n0 / 16) * kb_n * 64, *w1 = w0 + kb_n * 64;
    __m512i acc[MI_MR][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int64_t kb = 0; kb < kb_n; kb++) {
        const __m512i wa = _mm512_loadu_si512(w0 + kb * 64);
        const __m512i wb = NB > 1 ? _mm512_loadu_si512(w1 + kb * 64) : wa;
        const int whole = kb < m->kfull;
        for (int r = 0; r < R; r++) {
            const __m512i xb = _mm512_set1_epi32(whole ? group_at(m, r, kb) : m->tail[r]);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xb, wa);
            if (NB > 1) acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xb, wb);
        }
    }
    for (int j = 0; j < NB; j++) {
        const int64_t left = nvalid - 16 * j;
        if (left <= 0) break;
        __m512i a[MI_MR];
        for (int r = 0; r < R; r++) a[r] = acc[r][j];
        store_block(R, a, m, n0 + 16 * j, left, colsum, zq, y, ldy);
    }
}

/* One row: each block of 16 outputs streamed start to end, four accumulators along k. */
static void gemv_row(const mi_rows *m, const int8_t *packed, int64_t n0, int64_t n1, const int32_t *colsum,
                     const int32_t *zq, int32_t *y) {
    const int64_t kb_n = m->kb_n;
    for (int64_t n = n0; n < n1; n += 16) {
        const int8_t *w = packed + (n / 16) * kb_n * 64;
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        int64_t kb = 0;
        for (; kb + 4 <= m->kfull; kb += 4) {
            a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(group_at(m, 0, kb)), _mm512_loadu_si512(w + kb * 64));
            a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(group_at(m, 0, kb + 1)),
                                     _mm512_loadu_si512(w + kb * 64 + 64));
            a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(group_at(m, 0, kb + 2)),
                                     _mm512_loadu_si512(w + kb * 64 + 128));
            a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(group_at(m, 0, kb + 3)),
                                     _mm512_loadu_si512(w + kb * 64 + 192));
        }
        for (; kb < kb_n; kb++) {
            const int32_t xv = kb < m->kfull ? group_at(m, 0, kb) : m->tail[0];
            a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(xv), _mm512_loadu_si512(w + kb * 64));
        }
        const __m512i a[1] = {_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3))};
        store_block(1, a, m, n, n1 - n, colsum, zq, y, 0);
    }
}

#define MI_CASE(R_)                                                          \
    case R_:                                                                 \
        if (nvalid > 16)                                                     \
            tile(R_, 2, m, packed, n0, nvalid, colsum, zq, y, ldy);          \
        else                                                                 \
            tile(R_, 1, m, packed, n0, nvalid, colsum, zq, y, ldy);          \
        return;

static __attribute__((noinline)) void tile_rows(int R, const mi_rows *m, const int8_t *packed, int64_t n0,
                                                int64_t nvalid, const int32_t *colsum, const int32_t *zq,
                                                int32_t *y, int64_t ldy) {
    switch (R) {
        MI_CASE(1)
        MI_CASE(2)
        MI_CASE(3)
        MI_CASE(4)
        MI_CASE(5)
        MI_CASE(6)
        MI_CASE(7)
        MI_CASE(8)
    default: return;
    }
}
#undef MI_CASE

void nrv_matmul_integer_vnni(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                             int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                             const int32_t *zq, int32_t *y) {
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16;
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kp); /* read with unaligned loads */
    mi_rows m = {.in = in, .kfull = in / 4, .kb_n = kp / 4, .flip4 = flip * 0x01010101u};
    for (int64_t r0 = 0; r0 < rows; r0 += MI_MR) {
        const int R = (int)(rows - r0 < MI_MR ? rows - r0 : MI_MR);
        m.a = a + r0 * in;
        for (int r = 0; r < R; r++) {
            const uint8_t *ar = m.a + r * in;
            uint8_t t[4] = {0, 0, 0, 0};
            for (int64_t k = m.kfull * 4; k < in; k++) t[k - m.kfull * 4] = (uint8_t)(ar[k] ^ flip);
            memcpy(&m.tail[r], t, 4);
            m.za[r] = za[(r0 + r) * za_stride];
            m.asum[r] = 0;
            if (zq) { /* Σ a (flipped), 64 bytes at a time with vpsadbw */
                __m512i s = _mm512_setzero_si512();
                const __m512i fv = _mm512_set1_epi8((char)flip);
                int64_t k = 0;
                for (; k + 64 <= in; k += 64)
                    s = _mm512_add_epi64(s, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(ar + k), fv),
                                                            _mm512_setzero_si512()));
                if (k < in) {
                    const __mmask64 km = ((__mmask64)1 << (in - k)) - 1;
                    s = _mm512_add_epi64(s, _mm512_sad_epu8(_mm512_maskz_mov_epi8(km, _mm512_xor_si512(
                                                                _mm512_maskz_loadu_epi8(km, ar + k), fv)),
                                                            _mm512_setzero_si512()));
                }
                m.asum[r] = (int32_t)(uint32_t)_mm512_reduce_add_epi64(s);
            }
        }
        int32_t *yb = y + r0 * out;
        if (R == 1) {
            gemv_row(&m, packed, n0, n1, colsum, zq, yb);
            continue;
        }
        for (int64_t n = n0; n < n1; n += 32) {
            const int64_t nvalid = n1 - n < 32 ? n1 - n : 32;
            tile_rows(R, &m, packed, n, nvalid, colsum, zq, yb, out);
        }
    }
}

/* ---------------------------------------------------------------- planes */

/* nrv_matmul_integer_planes (kernels.h): a pointwise conv's x as K planes of positions, the
 * sums written as planes too. Per block of up to 64 positions (fewer when K is large: the
 * stage stays within MIP_STAGE bytes) every group of 4 planes is interleaved into the
 * vpdpbusd operand, one position's 4 bytes per int32 lane (a 4 x 16 byte transpose by
 * unpacks), and Σ a is taken from it with a dpbusd against bytes of 1. A register tile of
 * 4 outputs x 4 vectors of 16 positions then reads the stage once per 4 outputs, each
 * output's 4 weight bytes broadcast. Planes past `in` stage as zeros (their weight bytes are
 * zero too); lanes past n hold whatever the masked loads gave and are never stored. The
 * lanes wrap like the reference's uint32: bit-identical. */
#define MIP_STAGE 32768
#define MIP_MO 4
#define MIP_PV 4

/* Stage the groups of 4 planes for PV vectors of 16 positions from p0 (n real), and Σ a. */
static void planes_stage(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in, int64_t kb_n, int PV,
                         uint8_t *stage, __m512i *asum) {
    const __m128i fv = _mm_set1_epi8((char)flip);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int pv = 0; pv < PV; pv++) asum[pv] = _mm512_setzero_si512();
    for (int64_t kb = 0; kb < kb_n; kb++)
        for (int pv = 0; pv < PV; pv++) {
            const int64_t left = n - 16 * pv;
            const __mmask16 km = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (left > 0 ? left : 0)) - 1);
            __m128i r[4];
            for (int j = 0; j < 4; j++) {
                const int64_t c = kb * 4 + j;
                r[j] = c < in ? _mm_xor_si128(_mm_maskz_loadu_epi8(km, a + c * lda + 16 * pv), fv) : _mm_setzero_si128();
            }
            const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
            const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
            uint8_t *dst = stage + (kb * PV + pv) * 64;
            _mm_store_si128((__m128i *)(void *)dst, _mm_unpacklo_epi16(lo01, lo23));      /* positions 0-3 */
            _mm_store_si128((__m128i *)(void *)(dst + 16), _mm_unpackhi_epi16(lo01, lo23)); /* 4-7 */
            _mm_store_si128((__m128i *)(void *)(dst + 32), _mm_unpacklo_epi16(hi01, hi23)); /* 8-11 */
            _mm_store_si128((__m128i *)(void *)(dst + 48), _mm_unpackhi_epi16(hi01, hi23)); /* 12-15 */
            asum[pv] = _mm512_dpbusd_epi32(asum[pv], _mm512_load_si512(dst), ones);
        }
}

/* MO outputs from m0 x PV vectors of positions: the sums, the kernels.h epilogue, y. */
static inline __attribute__((always_inline)) void planes_tile(const int MO, const int PV, const uint8_t *stage,
                                                              const __m512i *asum, int64_t n, int64_t in,
                                                              int64_t kb_n, int32_t za, const int8_t *packed,
                                                              int64_t m0, const int32_t *colsum, const int32_t *zq,
                                                              const nrv_requant_out *rq, void *y, int64_t ldy) {
    const int8_t *w[MIP_MO];
    for (int i = 0; i < MO; i++) w[i] = packed + ((m0 + i) / 16) * kb_n * 64 + ((m0 + i) % 16) * 4;
    __m512i acc[MIP_MO][MIP_PV];
    for (int i = 0; i < MO; i++)
        for (int pv = 0; pv < PV; pv++) acc[i][pv] = _mm512_setzero_si512();
    for (int64_t kb = 0; kb < kb_n; kb++) {
        __m512i xv[MIP_PV];
        for (int pv = 0; pv < PV; pv++) xv[pv] = _mm512_load_si512(stage + (kb * PV + pv) * 64);
        for (int i = 0; i < MO; i++) {
            int32_t quad;
            memcpy(&quad, w[i] + kb * 64, 4);
            const __m512i wb = _mm512_set1_epi32(quad);
            for (int pv = 0; pv < PV; pv++) acc[i][pv] = _mm512_dpbusd_epi32(acc[i][pv], xv[pv], wb);
        }
    }
    const __m512 magic = _mm512_set1_ps(0x1.8p23f);
    for (int i = 0; i < MO; i++) {
        const int64_t m = m0 + i;
        const uint32_t zqm = zq ? (uint32_t)zq[m] : 0u;
        /* acc − za·colsum − zq·Σa + in·za·zq, the constant part folded once per output */
        int32_t cs;
        memcpy(&cs, colsum + m, sizeof cs);
        const __m512i c = _mm512_set1_epi32((int32_t)((uint32_t)in * (uint32_t)za * zqm - (uint32_t)za * (uint32_t)cs));
        for (int pv = 0; pv < PV; pv++) {
            __m512i v = _mm512_add_epi32(acc[i][pv], c);
            if (zq) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_set1_epi32((int32_t)zqm), asum[pv]));
            const int64_t left = n - 16 * pv;
            const __mmask16 km = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            if (!rq) {
                _mm512_mask_storeu_epi32((int32_t *)y + m * ldy + 16 * pv, km, v);
                continue;
            }
            /* requant_impl.h's steps: + bias (wrapping), one conversion, one product, the clamp,
             * half to even by the magic constant, + z, the low byte */
            v = _mm512_add_epi32(v, _mm512_set1_epi32(rq->bias ? rq->bias[m] : 0));
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(rq->scale[m * rq->scale_stride]));
            f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(rq->lo)), _mm512_set1_ps(rq->hi));
            f = _mm512_sub_ps(_mm512_add_ps(f, magic), magic);
            v = _mm512_add_epi32(_mm512_cvttps_epi32(f), _mm512_set1_epi32(rq->z));
            _mm_mask_storeu_epi8((uint8_t *)y + m * ldy + 16 * pv, km, _mm512_cvtepi32_epi8(v));
        }
    }
}

#define MIP_CASE(MO_, PV_)                                                                              \
    case (MO_) * 8 + (PV_):                                                                             \
        planes_tile(MO_, PV_, stage, asum, n, in, kb_n, za, packed, m0, colsum, zq, rq, y, ldy);      \
        return;

static __attribute__((noinline)) void planes_tiles(int MO, int PV, const uint8_t *stage, const __m512i *asum,
                                                   int64_t n, int64_t in, int64_t kb_n, int32_t za,
                                                   const int8_t *packed, int64_t m0, const int32_t *colsum,
                                                   const int32_t *zq, const nrv_requant_out *rq, void *y,
                                                   int64_t ldy) {
    switch (MO * 8 + PV) {
        MIP_CASE(1, 1) MIP_CASE(1, 2) MIP_CASE(1, 3) MIP_CASE(1, 4)
        MIP_CASE(2, 1) MIP_CASE(2, 2) MIP_CASE(2, 3) MIP_CASE(2, 4)
        MIP_CASE(3, 1) MIP_CASE(3, 2) MIP_CASE(3, 3) MIP_CASE(3, 4)
        MIP_CASE(4, 1) MIP_CASE(4, 2) MIP_CASE(4, 3) MIP_CASE(4, 4)
    default: return;
    }
}
#undef MIP_CASE

void nrv_matmul_integer_planes_vnni(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in, int32_t za,
                                    const int8_t *packed, int64_t out, const int32_t *zq, const nrv_requant_out *rq,
                                    void *y, int64_t ldy) {
    const int64_t kb_n = (in + 3) / 4, np = (out + 15) / 16 * 16, width = rq ? 1 : 4; /* bytes per output */
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kb_n * 4);
    _Alignas(64) uint8_t stage[MIP_STAGE];
    int64_t block_vecs = MIP_STAGE / (kb_n * 64); /* in <= NRV_MI_PLANES_MAX_K: at least 1 */
    if (block_vecs > MIP_PV) block_vecs = MIP_PV;
    if (block_vecs < 1) return;
    for (int64_t p0 = 0; p0 < n; p0 += 16 * block_vecs) {
        const int64_t np_ = n - p0 < 16 * block_vecs ? n - p0 : 16 * block_vecs;
        const int PV = (int)((np_ + 15) / 16);
        __m512i asum[MIP_PV];
        planes_stage(a + p0, lda, flip, np_, in, kb_n, PV, stage, asum);
        for (int64_t m0 = 0; m0 < out; m0 += MIP_MO) {
            const int MO = (int)(out - m0 < MIP_MO ? out - m0 : MIP_MO);
            planes_tiles(MO, PV, stage, asum, np_, in, kb_n, za, packed, m0, colsum, zq, rq, (uint8_t *)y + p0 * width,
                         ldy);
        }
    }
}
