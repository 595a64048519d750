/* linear_w4_avx2.c — INT4-weight linear layers (w4a32, w4a8), AVX2 + FMA + F16C.
 *
 * Contract: kernels.h above nrv_linear_w4_fn; weight formats: nerve.h "W4 weights"; the
 * math: native/src/kernels/linear_w4.c. Both ops use the split the contract allows,
 * q - z = u - (8 + z) with u = q + 8 in [0, 15], so that the weights never need a per-weight
 * dequantisation: for output o, row r and group g,
 *   y[r, o] = Σ_g s_g·(Σ_{k in g} x_k·u_k) - Σ_g s_g·(8 + z_g)·XS_g + b[o],
 * with XS_g = Σ_{k in g} x_k (w4a32) or Σ xq_k (w4a8, then times sx), computed once per row.
 * s_g·(8 + z_g) is exact in fp32 (an fp16 times an integer below 16).
 *
 * Bit-identical layouts: a packed block becomes the same u values an unpacked one does (one
 * add of 8), and everything after is shared. Split independence: an output's value depends
 * only on its row of x and its weight row; every tile shape (rows x outputs) runs the same
 * per-output sequence, and nothing is chosen from out or rows.
 *
 * w4a32: a packed block (16 bytes, 32 weights) is loaded once into both 128-bit halves; two
 * vpshufb spread bytes 0-7 and 8-15 into int32 lanes (low half: bytes j..j+3, high half:
 * j+4..j+7) and AND 15 / shift right 4 give the low / high nibbles: weights k0..k0+31 as four
 * vectors of 8 in k order, converted to float (exact). Per group, each row keeps two partial
 * sums d (even / odd vectors of a block: two FMA chains), then acc += s_g·(d0 + d1), 8 lanes
 * per (row, output), summed once at the end. The vectors of u are shared by up to 4 rows.
 *
 * w4a8: rows are quantised to int8 as linear_w8a8 does (nrv_w8a8_row_scale, min-first clamp,
 * round half to even) into a stack buffer, with their group sums XS_g (exact integers). A
 * block becomes 32 bytes u (packed: the high half shifted right by 4, AND 15), vpmaddubsw
 * (u unsigned, xq signed: |pair| <= 2·15·127, no saturation) gives int16 pair sums, added
 * over the group's blocks (<= 4·3810), vpmaddwd by 1 widens them to 8 int32 lanes (exact in
 * fp32: <= 30480), and acc += s_g·lanes; after 8 groups acc -= s·(8 + z)·XS for all 8 at
 * once. y = sx·Σ acc + b.
 *
 * Measured on Zen 4 (one core, out = in = 4096, A/B against alternatives in one process):
 * one row of w4a32 is bound by the vector ALU (unpack, convert, FMA: ~0.8 ms), one row of
 * packed w4a8 streams the weight at ~22 GB/s. Wider output tiles paid off for packed w4a8
 * with one row only (unpacked rows are 4 KiB apart and alias in L1). Dequantising a tile of
 * weights to a stack buffer and running plain FMAs over it was 1.1-1.4x faster at 8 rows but
 * 1.4-1.9x slower at one row, the decode case, and the two cannot be mixed: their rounding
 * differs. Software prefetch gave nothing; blocking k so that x stays in L1 gave <= 8%.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))

/* Tiles: rows per tile (both ops), outputs per tile (w4a8; per layout and row count). */
#define A32_R 4
#define A8_R 4
#define A8_NO 4
static const int a8_no_of_rows[2][A8_R + 1] = {{0, 1, 1, 1, 1}, {0, 4, 2, 1, 1}}; /* [packed][R] */

#define XS_FLOATS 4096      /* per-row group sums kept per pass (padded to 8 per row) */
#define XS_ROWS 8           /* rows per pass at most */
#define A8_XQ_BYTES 32768   /* quantised rows kept per pass: >= 2 rows at NRV_W4_MAX_IN */
/* Outputs per pass over a pass's rows: their weight rows (<= ~192 KiB) stay in L2 while
 * every tile of rows meets them, so q is streamed from memory once per pass. */
#define W4_CHUNK_BYTES (192 * 1024)

static inline float hsum8(__m256 v) { /* fixed order: halves, then pairs, then lanes 0 + 1 */
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

/* Outputs per chunk (a multiple of 8, at least 8). */
static int64_t chunk_outputs(const nrv_w4_weight *w) {
    const int64_t per = nrv_w4_row_bytes(w) + 3 * (w->in / w->group); /* q + scales + zero points */
    const int64_t n = W4_CHUNK_BYTES / per / 8 * 8;
    return n < 8 ? 8 : n;
}

/* Rows per pass so that their group sums (xst floats each) fit XS_FLOATS: >= 7, since
 * xst <= NRV_W4_MAX_IN / 32 + 7. */
static int64_t xs_rows(int64_t xst) {
    const int64_t n = XS_FLOATS / xst;
    return n < XS_ROWS ? n : XS_ROWS;
}

/* Scales of up to 8 groups of one output into sc (0 past gn), returns s·(8 + z) (exact). */
AI __m256 group_consts(const uint16_t *s, const int8_t *z, int gn, float *sc) {
    __m256 sv, zv;
    if (gn == 8) {
        sv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)s));
        zv = z ? _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)z)))
               : _mm256_setzero_ps();
    } else { /* the row's last groups: copies, nothing read past them */
        uint16_t st[8] = {0};
        int8_t zt[8] = {0};
        memcpy(st, s, (size_t)gn * sizeof *s);
        if (z) memcpy(zt, z, (size_t)gn);
        sv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)st));
        zv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)zt)));
    }
    _mm256_storeu_ps(sc, sv);
    return _mm256_mul_ps(sv, _mm256_add_ps(zv, _mm256_set1_ps(8.0f)));
}

/* ---------------------------------------------------------------- w4a32 */

/* One block of 32 weights as u = q + 8 in four int32 vectors, k order. */
AI void a32_weights(const int packed, const uint8_t *row, int64_t k0, __m256i u[4]) {
    if (!packed) {
        for (int i = 0; i < 4; i++)
            u[i] = _mm256_add_epi32(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(row + k0 + 8 * i))),
                _mm256_set1_epi32(8));
        return;
    }
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(row + k0 / 2)));
    const __m256i c0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 4, -1, -1, -1,
                                        5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
    const __m256i c1 = _mm256_add_epi32(c0, _mm256_set1_epi32(8)); /* bytes 8-15; the -1s stay negative */
    const __m256i b0 = _mm256_shuffle_epi8(a, c0), b1 = _mm256_shuffle_epi8(a, c1);
    u[0] = _mm256_and_si256(b0, _mm256_set1_epi32(15));
    u[1] = _mm256_and_si256(b1, _mm256_set1_epi32(15));
    u[2] = _mm256_srli_epi32(b0, 4);
    u[3] = _mm256_srli_epi32(b1, 4);
}

/* xs[g] = Σ_{k in g} x[k] (8 lanes in k order, then hsum8). */
static void a32_group_sums(const float *x, int64_t in, int64_t G, float *xs) {
    for (int64_t g = 0; g < in / G; g++) {
        __m256 a = _mm256_loadu_ps(x + g * G);
        for (int64_t k = g * G + 8; k < (g + 1) * G; k += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(x + k));
        xs[g] = hsum8(a);
    }
}

/* Groups [g0, g0 + gn) (gn <= 8) of R rows x one output into acc. */
AI void a32_chunk(const int R, const int packed, const int gn, const float *x, int64_t in, const int G,
                  const uint8_t *q, const uint16_t *s, const int8_t *z, int64_t g0, const float *xs, int64_t xst,
                  __m256 *acc) {
    _Alignas(32) float sc[8];
    const __m256 sz = group_consts(s + g0, z ? z + g0 : NULL, gn, sc);
    for (int j = 0; j < gn; j++) {
        __m256 d[A32_R][2];
        for (int r = 0; r < R; r++) d[r][0] = d[r][1] = _mm256_setzero_ps();
        for (int64_t kb = (g0 + j) * G; kb < (g0 + j + 1) * G; kb += 32) {
            __m256i u[4];
            a32_weights(packed, q, kb, u);
            for (int i = 0; i < 4; i++) {
                const __m256 uf = _mm256_cvtepi32_ps(u[i]);
                for (int r = 0; r < R; r++)
                    d[r][i & 1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * in + kb + 8 * i), uf, d[r][i & 1]);
            }
        }
        const __m256 sv = _mm256_broadcast_ss(&sc[j]);
        for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(_mm256_add_ps(d[r][0], d[r][1]), sv, acc[r]);
    }
    for (int r = 0; r < R; r++) acc[r] = _mm256_fnmadd_ps(sz, _mm256_loadu_ps(xs + r * xst + g0), acc[r]);
}

/* R rows x output o of w (x, xs, y at row 0; y at column o). G is a constant, so a group's
 * blocks unroll and the accumulators stay in registers across them. */
AI void a32_tile(const int R, const int packed, const int G, const float *x, const float *xs, int64_t xst,
                 const nrv_w4_weight *w, int64_t o, const float *b, float *y, int64_t ldy) {
    const int64_t in = w->in, ng = in / G;
    const uint8_t *q = (const uint8_t *)w->q + o * nrv_w4_row_bytes(w);
    const uint16_t *s = w->scales + o * ng;
    const int8_t *z = w->zero ? w->zero + o * ng : NULL;
    __m256 acc[A32_R];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    int64_t g0 = 0;
    for (; g0 + 8 <= ng; g0 += 8) a32_chunk(R, packed, 8, x, in, G, q, s, z, g0, xs, xst, acc);
    if (g0 < ng) a32_chunk(R, packed, (int)(ng - g0), x, in, G, q, s, z, g0, xs, xst, acc);
    for (int r = 0; r < R; r++) y[r * ldy] = hsum8(acc[r]) + (b ? b[o] : 0.0f);
}

#define A32_G(R_, P_)                                                                                         \
    switch (w->group) {                                                                                       \
    case 32: a32_tile(R_, P_, 32, x, xs, xst, w, o, b, y, ldy); return;                                       \
    case 64: a32_tile(R_, P_, 64, x, xs, xst, w, o, b, y, ldy); return;                                       \
    default: a32_tile(R_, P_, 128, x, xs, xst, w, o, b, y, ldy); return;                                      \
    }
#define A32_CASE(R_)                                                                                          \
    case R_:                                                                                                  \
        if (w->layout == NRV_W4_PACKED) A32_G(R_, 1)                                                          \
        else A32_G(R_, 0)

static __attribute__((noinline)) void a32_block(int R, const float *x, const float *xs, int64_t xst,
                                                const nrv_w4_weight *w, int64_t o, const float *b, float *y,
                                                int64_t ldy) {
    switch (R) {
        A32_CASE(1)
        A32_CASE(2)
        A32_CASE(3)
        A32_CASE(4)
    default: return;
    }
}

void nrv_linear_w4a32_avx2(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                           int64_t ldy) {
    const int64_t out = w->out, in = w->in, ng = in / w->group, xst = (ng + 7) / 8 * 8, oc = chunk_outputs(w);
    const int64_t qr = xs_rows(xst);
    float xs[XS_FLOATS];
    for (int64_t q0 = 0; q0 < rows; q0 += qr) {
        const int64_t nq = rows - q0 < qr ? rows - q0 : qr;
        for (int64_t r = 0; r < nq; r++) {
            a32_group_sums(x + (q0 + r) * in, in, w->group, xs + r * xst);
            for (int64_t g = ng; g < xst; g++) xs[r * xst + g] = 0.0f;
        }
        for (int64_t c0 = 0; c0 < out; c0 += oc) {
            const int64_t c1 = out - c0 < oc ? out : c0 + oc;
            for (int64_t r0 = 0; r0 < nq; r0 += A32_R) {
                const int R = (int)(nq - r0 < A32_R ? nq - r0 : A32_R);
                for (int64_t o = c0; o < c1; o++)
                    a32_block(R, x + (q0 + r0) * in, xs + r0 * xst, xst, w, o, b, y + (q0 + r0) * ldy + o, ldy);
            }
        }
    }
}

/* ---------------------------------------------------------------- w4a8 */

static inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline int32_t hsum8_epi32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
    return _mm_cvtsi128_si32(_mm_add_epi32(a, _mm_shuffle_epi32(a, 1)));
}

/* Quantises row x (n floats, n a multiple of 32) into xq as linear_w8a8 does and writes the
 * group sums of xq to xs[0, n / G); returns sx. */
static float a8_quantise_row(const float *x, int64_t n, int64_t G, int8_t *xq, float *xs) {
    __m256 m = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k += 8) /* MAXPS(a, m) = a > m ? a : m: a NaN is skipped, as in the reference */
        m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + k)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float inv, sx;
    nrv_w8a8_row_scale(_mm_cvtss_f32(h), &inv, &sx);
    const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); /* undoes the in-lane packs */
    for (int64_t g0 = 0; g0 < n; g0 += G) {
        __m256i gs = _mm256_setzero_si256();
        for (int64_t k = g0; k < g0 + G; k += 32) {
            __m256i qi[4];
            for (int i = 0; i < 4; i++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * i), vinv);
                /* min first: a NaN product becomes 127 (MINPS returns its second operand) */
                qi[i] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, hi), lo));
                gs = _mm256_add_epi32(gs, qi[i]);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
            _mm256_storeu_si256((__m256i *)(void *)(xq + k), _mm256_permutevar8x32_epi32(p, order));
        }
        xs[g0 / G] = (float)hsum8_epi32(gs);
    }
    return sx;
}

/* One block of 32 weights as 32 bytes u = q + 8 in k order. */
AI __m256i a8_weights(const int packed, const uint8_t *row, int64_t k0) {
    if (packed) {
        const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(row + k0 / 2)));
        return _mm256_and_si256(_mm256_srlv_epi32(a, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                _mm256_set1_epi8(15));
    }
    return _mm256_add_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(row + k0)), _mm256_set1_epi8(8));
}

/* Groups [g0, g0 + gn) (gn <= 8) of R rows x NO outputs into acc. */
AI void a8_chunk(const int R, const int NO, const int packed, const int gn, const int8_t *xq, int64_t in, const int G,
                 const uint8_t *const *qo, const uint16_t *const *so, const int8_t *const *zo, int64_t g0,
                 const float *xs, int64_t xst, __m256 acc[][A8_NO]) {
    _Alignas(32) float sc[A8_NO][8];
    __m256 sz[A8_NO];
    for (int o = 0; o < NO; o++) sz[o] = group_consts(so[o] + g0, zo[o] ? zo[o] + g0 : NULL, gn, sc[o]);
    for (int j = 0; j < gn; j++) {
        __m256i p[A8_R][A8_NO];
        for (int r = 0; r < R; r++)
            for (int o = 0; o < NO; o++) p[r][o] = _mm256_setzero_si256();
        for (int64_t k0 = (g0 + j) * G; k0 < (g0 + j + 1) * G; k0 += 32) {
            __m256i u[A8_NO];
            for (int o = 0; o < NO; o++) u[o] = a8_weights(packed, qo[o], k0);
            for (int r = 0; r < R; r++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + r * in + k0));
                for (int o = 0; o < NO; o++) p[r][o] = _mm256_add_epi16(p[r][o], _mm256_maddubs_epi16(u[o], xv));
            }
        }
        for (int o = 0; o < NO; o++) {
            const __m256 sv = _mm256_broadcast_ss(&sc[o][j]);
            for (int r = 0; r < R; r++)
                acc[r][o] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p[r][o], _mm256_set1_epi16(1))), sv,
                                            acc[r][o]);
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 xsv = _mm256_loadu_ps(xs + r * xst + g0);
        for (int o = 0; o < NO; o++) acc[r][o] = _mm256_fnmadd_ps(sz[o], xsv, acc[r][o]);
    }
}

/* R rows x outputs [o0, o0 + NO) of w (xq, xs, sx, y at row 0; y at column o0). */
AI void a8_tile(const int R, const int NO, const int packed, const int G, const int8_t *xq, const float *xs,
                int64_t xst, const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b, float *y,
                int64_t ldy) {
    const int64_t in = w->in, ng = in / G;
    const uint8_t *qo[A8_NO];
    const uint16_t *so[A8_NO];
    const int8_t *zo[A8_NO];
    nrv_w4_row_ptrs(w, o0, NO, qo, so, zo);
    __m256 acc[A8_R][A8_NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
    int64_t g0 = 0;
    for (; g0 + 8 <= ng; g0 += 8) a8_chunk(R, NO, packed, 8, xq, in, G, qo, so, zo, g0, xs, xst, acc);
    if (g0 < ng) a8_chunk(R, NO, packed, (int)(ng - g0), xq, in, G, qo, so, zo, g0, xs, xst, acc);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) y[r * ldy + o] = fmaf(hsum8(acc[r][o]), sx[r], b ? b[o0 + o] : 0.0f);
}

#define A8_G(R_, NO_, P_)                                                                                     \
    switch (w->group) {                                                                                       \
    case 32: a8_tile(R_, NO_, P_, 32, xq, xs, xst, sx, w, o0, b, y, ldy); return;                             \
    case 64: a8_tile(R_, NO_, P_, 64, xq, xs, xst, sx, w, o0, b, y, ldy); return;                             \
    default: a8_tile(R_, NO_, P_, 128, xq, xs, xst, sx, w, o0, b, y, ldy); return;                            \
    }
#define A8_CASE(R_, NO_)                                                                                      \
    case (R_) * 8 + (NO_):                                                                                    \
        if (w->layout == NRV_W4_PACKED) A8_G(R_, NO_, 1)                                                      \
        else A8_G(R_, NO_, 0)

static __attribute__((noinline)) void a8_block(int R, int NO, const int8_t *xq, const float *xs, int64_t xst,
                                               const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b,
                                               float *y, int64_t ldy) {
    switch (R * 8 + NO) { /* the shapes of a8_no_of_rows, and one output for the chunk tails */
        A8_CASE(1, 4)
        A8_CASE(1, 1)
        A8_CASE(2, 2)
        A8_CASE(2, 1)
        A8_CASE(3, 1)
        A8_CASE(4, 1)
    default: return;
    }
}

void nrv_linear_w4a8_avx2(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy) {
    const int64_t out = w->out, in = w->in, ng = in / w->group, xst = (ng + 7) / 8 * 8, oc = chunk_outputs(w);
    int64_t qr = A8_XQ_BYTES / in;
    if (qr > xs_rows(xst)) qr = xs_rows(xst);
    _Alignas(32) int8_t xq[A8_XQ_BYTES];
    float xs[XS_FLOATS], sx[XS_ROWS];
    for (int64_t q0 = 0; q0 < rows; q0 += qr) {
        const int64_t nq = rows - q0 < qr ? rows - q0 : qr;
        for (int64_t r = 0; r < nq; r++) {
            sx[r] = a8_quantise_row(x + (q0 + r) * in, in, w->group, xq + r * in, xs + r * xst);
            for (int64_t g = ng; g < xst; g++) xs[r * xst + g] = 0.0f;
        }
        for (int64_t c0 = 0; c0 < out; c0 += oc) {
            const int64_t c1 = out - c0 < oc ? out : c0 + oc;
            for (int64_t r0 = 0; r0 < nq; r0 += A8_R) {
                const int R = (int)(nq - r0 < A8_R ? nq - r0 : A8_R);
                const int NO = a8_no_of_rows[w->layout == NRV_W4_PACKED][R];
                float *yr = y + (q0 + r0) * ldy;
                int64_t o = c0;
                for (; o + NO <= c1; o += NO) a8_block(R, NO, xq + r0 * in, xs + r0 * xst, xst, sx + r0, w, o, b, yr + o, ldy);
                for (; o < c1; o++) a8_block(R, 1, xq + r0 * in, xs + r0 * xst, xst, sx + r0, w, o, b, yr + o, ldy);
            }
        }
    }
}
