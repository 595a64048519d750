/* linear_w4_vnni.c — INT4-weight linear layer with int8 activations (w4a8), AVX-512 VNNI.
 *
 * Contract: kernels.h above nrv_linear_w4_fn; math: kernels/linear_w4.c. Per block of up to
 * W4_MR rows of x, each row is quantised once (as linear_w8a8 does) into a stack buffer and
 * its per-group sums XS_g = Σ_{k in g} xq_k are kept. Then, per output and 64 weights
 * (two packed blocks), vpdpbusd multiplies the unsigned nibbles u = q + 8 (0..15) by the
 * signed xq, four products per int32 lane, exactly: Σ xq·(q - zero) = Σ xq·u - 8·XS_g -
 * zero·XS_g, the middle term taken out per lane, the last per group (below).
 *
 * Lane order. The weight is walked in quads of 128 (four 32-weight blocks a, b, c, d). A
 * packed quad is 64 bytes, block j in 128-bit lane j; its low nibbles are then, lane by lane,
 * a's k0..15, b's k0..15, c's, d's, and its high nibbles the blocks' k16..31: one load, one
 * AND and one shift+AND give 128 unsigned weights u = q + 8 (0..15) in two zmm, and two
 * vpdpbusd against the quantised row stored in that same order (per quad: x[a0..15],
 * x[b0..15], x[c0..15], x[d0..15], then the k16..31 halves) leave int32 lane l holding block
 * l/4's sums. The unpacked layout loads the quad's 128 int8 in two zmm and gathers the same
 * 128-bit lanes with two vshufi64x2, adding 8: the same bytes in the same lanes, hence
 * bit-identical sums. A partial last quad (K ≡ 32, 64 or 96 mod 128) is loaded masked; the
 * row's missing positions are 0, so the missing weights add nothing.
 *
 * The offset: each row also keeps, per quad, the 16 lane offsets -8·Σ(the lane's 8 xq), and
 * every quad's first vpdpbusd starts from them instead of 0, so the int32 lanes hold Σ xq·q
 * exactly; only a zero point leaves a per-group term, Σ_g scale_g·zero_g·XS_g.
 *
 * Scales: a quad's lane l belongs to group (128·quad + 32·(l/4)) / G — four groups of 32, two
 * of 64 or one of 128 — so one vpermps of a span's widened fp16 scales (512 weights) gives the
 * quad's scale vector, and each quad costs one cvt and one FMA per row, the even and odd
 * quads in two FMA chains. Against the 64-weight chunks this kernel used before (a 32-byte
 * load, a shift, an insert and an AND, a cvt and an FMA per 64 weights, one chain), one row
 * of x, g64 packed, Zen 4, alternating runs: 256 x 4096 in L2 29 -> 22-23 us; 4096 x 4096
 * from memory 0.55-0.60 -> 0.48-0.53 ms.
 * Per output and row:
 *   y = sx·(Σ_lanes Σ_quads scale·float(acc) - Σ_g scale_g·zero_g·XS_g) + b,
 * the lanes of four outputs reduced together in one order for every output (reduce4),
 * every sum in a fixed order, so an output depends only on its row and its weight row —
 * within this path; full blocks of 8 rows take the many-row path below.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "linear_w8a8_avx512.h" /* row_scale: the row's int8 scale, as linear_w8a8 takes it */

#define W4_MR 4
#define W4_PF_TILES 2
/* One row of x and K <= this: four weight rows per tile after all. Their rows (K/2 bytes each)
 * are adjacent, so the four streams are one region of 2K bytes, and the per-output setup and
 * reduction are shared four ways (Zen 4, g64 packed, one row: 416x1664 in L2 17.5 -> 13.8 us,
 * 1664x416 31 -> 21 us, 2048x2048 from memory 110-123 -> 91 us; at K = 4096, from memory,
 * 0.45 -> 0.66-0.78 ms: there one weight row at a time wins). */
#define W4_NARROW_K 2048
#define W4_XQ_BYTES 24576 /* quantised rows; as many bytes again of lane offsets (stack < 64 KiB) */

/* Where x[k] goes in the quantised row: within its quad of 128, the blocks' first halves
 * (k mod 32 < 16) in block order, then their second halves (the lane order above). */
static inline int64_t quad_pos(int64_t k) {
    const int64_t r = k % 128;
    return k - r + (r % 32) / 16 * 64 + r / 32 * 16 + r % 16;
}

/* Quantises n floats of a row (n a multiple of 32, x on a quad bound of the row) with inv
 * into xq in the quad order above (a partial last quad's missing positions 0) and their
 * group sums into xs[n / G] (whole groups). */
static void w4_quantise_span(const float *x, int64_t n, int64_t G, float inv, int8_t *xq, float *xs) {
    const __m512 vinv = _mm512_set1_ps(inv), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    if (n % 128) memset(xq + n / 128 * 128, 0, 128);
    for (int64_t g = 0; g < n / G; g++) xs[g] = 0.0f;
    for (int64_t p = 0; p < n; p += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + p), vinv);
        v = _mm512_max_ps(_mm512_min_ps(v, hi), lo); /* NaN -> 127, as the reference */
        const __m512i qi = _mm512_cvtps_epi32(v);
        _mm_storeu_si128((__m128i *)(xq + quad_pos(p)), _mm512_cvtepi32_epi8(qi));
        xs[p / G] += (float)_mm512_reduce_add_epi32(qi); /* exact: |sum| <= 127·128 */
    }
}

/* Quantises row x (K floats, K a multiple of 32) into xq (Kq = K rounded up to 128 bytes) in
 * the quad order above, the group sums into xs[K / G], and per quad the 16 int32 lane offsets
 * off = -8·Σ (the lane's 8 xq), which start each quad's vpdpbusd so that it sums xq·(u - 8) =
 * xq·q directly; returns sx. */
static float quantise_row(const float *x, int64_t K, int64_t G, int8_t *xq, float *xs, int32_t *off) {
    float inv;
    const float sx = row_scale(x, K, &inv);
    w4_quantise_span(x, K, G, inv, xq, xs);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t q = 0; q < (K + 127) / 128; q++) {
        __m512i lane = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(xq + 128 * q));
        lane = _mm512_dpbusd_epi32(lane, ones, _mm512_loadu_si512(xq + 128 * q + 64));
        _mm512_storeu_si512(off + 16 * q, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(lane, 3)));
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

/* The 128 weights (u = q + 8, 0..15) of quad Q of a weight row in lane order: the blocks'
 * first halves (returned) and second halves (*hi). nb < 4: a partial last quad of nb blocks,
 * loaded masked (nothing past the row is read). */
static inline __m512i quad_u8(const uint8_t *row, int packed, int64_t Q, int nb, __m512i *hi) {
    const __m512i nib = _mm512_set1_epi8(15);
    if (packed) {
        const uint8_t *p = row + 64 * Q;
        const __m512i v = nb == 4 ? _mm512_loadu_si512((const void *)p)
                                  : _mm512_maskz_loadu_epi8(((__mmask64)1 << (16 * nb)) - 1, p);
        *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        return _mm512_and_si512(v, nib);
    }
    const uint8_t *p = row + 128 * Q;
    __m512i v0, v1;
    if (nb == 4) {
        v0 = _mm512_loadu_si512((const void *)p);
        v1 = _mm512_loadu_si512((const void *)(p + 64));
    } else { /* 32·nb bytes: nb = 1 -> half of v0; 2 -> v0; 3 -> v0 and half of v1 */
        v0 = _mm512_maskz_loadu_epi8(nb >= 2 ? ~(__mmask64)0 : ((__mmask64)1 << 32) - 1, p);
        v1 = _mm512_maskz_loadu_epi8(nb == 3 ? ((__mmask64)1 << 32) - 1 : 0, p + 64);
    }
    const __m512i eight = _mm512_set1_epi8(8);
    *hi = _mm512_add_epi8(_mm512_shuffle_i64x2(v0, v1, 0xDD), eight);
    return _mm512_add_epi8(_mm512_shuffle_i64x2(v0, v1, 0x88), eight);
}

/* Quads are walked in spans of 4 (512 weights); a span's scales (16, 8 or 4 groups) are
 * widened once into a zmm and each quad's scale vector is one vpermps of it: lane l of quad q
 * takes group (128q + 32·(l/4)) / G of the span: 4q + l/4 (G 32), 2q + l/8 (64), q (128). */
static inline __m512i scale_index(int64_t G, int q) {
    if (G == 32) return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                         _mm512_set1_epi32(4 * q));
    if (G == 64) return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                         _mm512_set1_epi32(2 * q));
    return _mm512_set1_epi32(q);
}

/* NO outputs from o0 x R rows (quantised rows xq and lane offsets off, row stride Kq bytes /
 * Kq/8 ints; sx, xs per row). */
static inline __attribute__((always_inline)) void w4a8_tile(const int NO, const int R, const int8_t *xq,
                                                            const int32_t *off, const float *sx, const float *xs,
                                                            int64_t K, const nrv_w4_weight *w, int64_t o0,
                                                            const float *b, float *y, int64_t ldy) {
    const int64_t G = w->group, ng = K / G, nq = (K + 127) / 128, Kq = nq * 128, rb = nrv_w4_row_bytes(w);
    const int64_t gspan = 512 / G, ko = Kq / 8; /* groups per span; ints of lane offsets per row */
    const int last_nb = K % 128 ? (int)(K % 128 / 32) : 4;
    const int packed = w->layout == NRV_W4_PACKED;
    const uint8_t *rows[4], *ahead[4];
    const uint16_t *sc[4];
    for (int j = 0; j < NO; j++) {
        rows[j] = (const uint8_t *)w->q + (o0 + j) * rb;
        sc[j] = w->scales + (o0 + j) * ng;
        /* with several rows of x, NO interleaved weight rows are more streams than the hardware
         * prefetcher follows on its own: the rows W4_PF_TILES tiles ahead are prefetched as these
         * are read. One row of x (a GEMV) takes one weight row at a time, a single sequential
         * stream the hardware follows best alone (cold 4096 x 4096 g64 packed, 64-weight chunks:
         * 4 rows interleaved + prefetch 0.78 ms, 1 row + prefetch 0.66, 1 row alone 0.56) */
        const int64_t pf = o0 + j + (int64_t)NO * W4_PF_TILES;
        ahead[j] = pf < w->out && NO > 1 ? (const uint8_t *)w->q + pf * rb : NULL;
    }
    __m512 tot[4][W4_MR][2]; /* even and odd quads: two FMA chains per output and row */
    for (int j = 0; j < NO; j++)
        for (int r = 0; r < R; r++) tot[j][r][0] = tot[j][r][1] = _mm512_setzero_ps();
    for (int64_t q0 = 0; q0 < nq; q0 += 4) {
        const int64_t g0 = q0 * 128 / G, left = ng - g0 < gspan ? ng - g0 : gspan;
        const __mmask16 m = (__mmask16)((1u << left) - 1);
        __m512 S[4];
        for (int j = 0; j < NO; j++) S[j] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, sc[j] + g0));
        const int span = (int)(nq - q0 < 4 ? nq - q0 : 4);
#pragma GCC unroll 4
        for (int q = 0; q < span; q++) {
            const int64_t Q = q0 + q;
            const int nb = Q == nq - 1 ? last_nb : 4;
            const __m512i idx = scale_index(G, q);
            for (int j = 0; j < NO; j++) {
                if (ahead[j]) {
                    const char *a = (const char *)ahead[j] + (packed ? 64 : 128) * Q;
                    _mm_prefetch(a, _MM_HINT_T0);
                    if (!packed) _mm_prefetch(a + 64, _MM_HINT_T0);
                }
                __m512i uh;
                const __m512i ul = quad_u8(rows[j], packed, Q, nb, &uh);
                const __m512 sv = _mm512_permutexvar_ps(idx, S[j]);
                for (int r = 0; r < R; r++) {
                    const int8_t *xr = xq + r * Kq + 128 * Q;
                    __m512i acc = _mm512_loadu_si512((const void *)(off + r * ko + 16 * Q));
                    acc = _mm512_dpbusd_epi32(acc, ul, _mm512_loadu_si512((const void *)xr));
                    acc = _mm512_dpbusd_epi32(acc, uh, _mm512_loadu_si512((const void *)(xr + 64)));
                    const __m512 v = _mm512_cvtepi32_ps(acc);
                    /* even and odd quads in two chains (constant indices: registers) */
                    if (q & 1) tot[j][r][1] = _mm512_fmadd_ps(v, sv, tot[j][r][1]);
                    else tot[j][r][0] = _mm512_fmadd_ps(v, sv, tot[j][r][0]);
                }
            }
        }
    }
    __m512 corr[4][W4_MR];
    for (int j = 0; j < NO; j++) {
        const uint16_t *scj = sc[j];
        /* the zero-point term Σ_g scale_g·zero_g·XS_g, 16 groups at a time */
        for (int r = 0; r < R; r++) corr[j][r] = _mm512_setzero_ps();
        if (w->zero)
            for (int64_t g = 0; g < ng; g += 16) {
                const __mmask16 mz = ng - g >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ng - g)) - 1);
                const __m512 so = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mz, scj + g)),
                                                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                    _mm_maskz_loadu_epi8(mz, w->zero + (o0 + j) * ng + g))));
                for (int r = 0; r < R; r++)
                    corr[j][r] = _mm512_fmadd_ps(so, _mm512_maskz_loadu_ps(mz, xs + r * ng + g), corr[j][r]);
            }
    }
    const __m512 zero = _mm512_setzero_ps();
    for (int r = 0; r < R; r++) {
        float t[4], z[4];
        __m512 sum[4];
        for (int j = 0; j < NO; j++) sum[j] = _mm512_add_ps(tot[j][r][0], tot[j][r][1]);
        _mm_storeu_ps(t, reduce4(sum[0], NO > 1 ? sum[1] : zero, NO > 2 ? sum[2] : zero, NO > 3 ? sum[3] : zero));
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
W4_TILE(4, 1)
W4_TILE(2, 2)
W4_TILE(1, 1)
W4_TILE(1, 2)
W4_TILE(1, 3)
W4_TILE(1, 4)
#undef W4_TILE

/* ---- many rows: lanes over outputs
 *
 * The tiles above put one output's 128 weights of a quad in a zmm, so every quad of every
 * row pays a cvt and an FMA for two vpdpbusd, and the reduction of its lanes. With many rows
 * a block of 16 outputs is instead unpacked once into the stack (w4_many_unpack: each zmm
 * holds 4 consecutive weights of each of the 16 outputs, one output per int32 lane) and every
 * row runs vpdpbusd against it with its 4 matching xq broadcast: a group's exact int32 sums
 * for 16 outputs per row, then one cvt and two FMAs per row and group:
 *   y = sx·Σ_g scale_g·(Σ xq·u - (8 + zero_g)·XS_g) + b   (u = q + 8; groups in order),
 * every term before the scale an integer below 2^24, so exact in fp32. Rows come in blocks
 * of W4_MANY_ROWS from the call's first row, and only full blocks take this path (the rest
 * the tiles): its sums are in another order than the tiles', so a row's value depends on
 * which path its block took — a caller splitting rows keeps the splits at multiples of
 * W4_MANY_ROWS (kernels.h NRV_W4_ROW_BLOCK). Both layouts unpack to the same bytes:
 * bit-identical. */
#define W4_MANY_ROWS NRV_W4_ROW_BLOCK
#define W4_MANY_CHUNK 32   /* rows at once: an unpacked slice serves all of them */
#define W4_MANY_SLICE 1024 /* weights of a row at once (a multiple of every group): the stack
                            * holds 16 outputs' (16 KiB) and the chunk's rows' (32 KiB) —
                            * ~56 KiB in all, for callers' threads with small stacks */

/* a[c] <- dword c of a[0..15] (a 16 x 16 transpose of int32). */
static inline void transpose16(__m512i a[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+3 */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i s0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), s1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        const __m512i s2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i s3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        a[j] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        a[4 + j] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
        a[8 + j] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        a[12 + j] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
    }
}

/* Outputs o0 .. o0+no-1 (no <= 16), weights [128·qa, 128·qb) of their rows, unpacked for
 * w4_many_rows: per quad and block b of 32 weights, 8 zmm — the block's 4-weight steps of
 * the first half (dwords 4b..4b+3 of quad_u8's low vector, xq bytes 16b + 4d of the quad),
 * then of the second half (xq bytes 64 + 16b + 4d) — lane j output o0 + j (0 past no); the
 * scales of the slice's groups, lane j (sc[16·(g - first group) + j]), and 8 + zero
 * likewise (z8). */
static void w4_many_unpack(const nrv_w4_weight *w, int64_t o0, int no, int64_t qa, int64_t qb, __m512i *wt,
                           float *sc, float *z8) {
    const int64_t K = w->in, G = w->group, ng = K / G, nq = (K + 127) / 128, rb = nrv_w4_row_bytes(w);
    const int last_nb = K % 128 ? (int)(K % 128 / 32) : 4;
    const int packed = w->layout == NRV_W4_PACKED;
    for (int64_t Q = qa; Q < qb; Q++) {
        const int nb = Q == nq - 1 ? last_nb : 4;
        __m512i lo[16], hi[16];
        for (int j = 0; j < 16; j++) {
            if (j < no) {
                lo[j] = quad_u8((const uint8_t *)w->q + (o0 + j) * rb, packed, Q, nb, &hi[j]);
            } else {
                lo[j] = hi[j] = _mm512_setzero_si512();
            }
        }
        transpose16(lo);
        transpose16(hi);
        for (int b = 0; b < nb; b++)
            for (int d = 0; d < 4; d++) {
                wt[(4 * (Q - qa) + b) * 8 + d] = lo[4 * b + d];
                wt[(4 * (Q - qa) + b) * 8 + 4 + d] = hi[4 * b + d];
            }
    }
    const int64_t ga = 128 * qa / G, gb = (128 * qb < K ? 128 * qb : K) / G;
    for (int64_t g = ga; g < gb; g++)
        for (int j = 0; j < 16; j++) {
            sc[16 * (g - ga) + j] = j < no ? _cvtsh_ss(w->scales[(o0 + j) * ng + g]) : 0.0f;
            z8[16 * (g - ga) + j] = 8.0f + (j < no && w->zero ? (float)w->zero[(o0 + j) * ng + g] : 0.0f);
        }
}

/* W4_MANY_ROWS rows' quantised slice (xq, stride W4_MANY_SLICE; xs, stride W4_MANY_SLICE / G)
 * against the unpacked slice of nblk blocks (32 weights each; whole groups), adding to the
 * no (<= 16) sums from tot (row stride ldt): each group's exact sums, scaled, in group order. */
static void w4_many_rows(const int8_t *xq, const float *xs, int64_t G, int64_t nblk, const __m512i *wt,
                         const float *sc, const float *z8, float *tot_io, int64_t ldt, int no) {
    enum { R = W4_MANY_ROWS };
    const __mmask16 m = (__mmask16)((1u << no) - 1);
    const int64_t xs_stride = W4_MANY_SLICE / G;
    __m512 tot[R];
    __m512i acc[R];
    for (int r = 0; r < R; r++) {
        tot[r] = _mm512_maskz_loadu_ps(m, tot_io + r * ldt);
        acc[r] = _mm512_setzero_si512();
    }
    for (int64_t blk = 0; blk < nblk; blk++) {
        const __m512i *wb = wt + blk * 8;
        const int64_t at0 = 128 * (blk / 4) + 16 * (blk % 4);
        for (int d = 0; d < 4; d++) {
            const __m512i wl = _mm512_load_si512((const void *)(wb + d));
            const __m512i wh = _mm512_load_si512((const void *)(wb + 4 + d));
            for (int r = 0; r < R; r++) {
                int32_t lo4, hi4;
                memcpy(&lo4, xq + r * W4_MANY_SLICE + at0 + 4 * d, 4);
                memcpy(&hi4, xq + r * W4_MANY_SLICE + at0 + 4 * d + 64, 4);
                acc[r] = _mm512_dpbusd_epi32(acc[r], wl, _mm512_set1_epi32(lo4));
                acc[r] = _mm512_dpbusd_epi32(acc[r], wh, _mm512_set1_epi32(hi4));
            }
        }
        if ((32 * (blk + 1)) % G == 0) { /* the group ends: scale its exact sums */
            const int64_t g = 32 * blk / G;
            const __m512 s = _mm512_loadu_ps(sc + 16 * g), z = _mm512_loadu_ps(z8 + 16 * g);
            for (int r = 0; r < R; r++) {
                const __m512 v = _mm512_fnmadd_ps(z, _mm512_set1_ps(xs[r * xs_stride + g]), _mm512_cvtepi32_ps(acc[r]));
                tot[r] = _mm512_fmadd_ps(v, s, tot[r]);
                acc[r] = _mm512_setzero_si512();
            }
        }
    }
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(tot_io + r * ldt, m, tot[r]);
}

/* Rows [0, rows) of the call, rows a multiple of W4_MANY_ROWS, in chunks of up to
 * W4_MANY_CHUNK rows, the sums kept in y itself until the end: per slice of W4_MANY_SLICE
 * weights the chunk's rows are quantised (with their whole rows' scales), then per block of
 * 16 outputs one unpack serves all of them. Slices end on group bounds, so every group's sum
 * and the order of the groups are those of one pass over the row. */
static __attribute__((noinline)) void w4_many(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b,
                                              float *y, int64_t ldy) {
    const int64_t K = w->in, G = w->group, nq = (K + 127) / 128, N = w->out, slice_q = W4_MANY_SLICE / 128;
    _Alignas(64) __m512i wt[W4_MANY_SLICE / 4]; /* 16 outputs x a slice */
    _Alignas(64) int8_t xq[W4_MANY_CHUNK * W4_MANY_SLICE];
    float sx[W4_MANY_CHUNK], inv[W4_MANY_CHUNK], xs[W4_MANY_CHUNK * (W4_MANY_SLICE / 32)];
    float sc[16 * (W4_MANY_SLICE / 32)], z8[16 * (W4_MANY_SLICE / 32)];
    for (int64_t r0 = 0; r0 < rows; r0 += W4_MANY_CHUNK) {
        const int64_t nr = rows - r0 < W4_MANY_CHUNK ? rows - r0 : W4_MANY_CHUNK;
        for (int64_t r = 0; r < nr; r++) {
            sx[r] = row_scale(x + (r0 + r) * K, K, &inv[r]);
            memset(y + (r0 + r) * ldy, 0, (size_t)N * sizeof(float));
        }
        for (int64_t qa = 0; qa < nq; qa += slice_q) {
            const int64_t qb = qa + slice_q < nq ? qa + slice_q : nq;
            const int64_t k0 = 128 * qa, n = (128 * qb < K ? 128 * qb : K) - k0;
            for (int64_t r = 0; r < nr; r++)
                w4_quantise_span(x + (r0 + r) * K + k0, n, G, inv[r], xq + r * W4_MANY_SLICE,
                              xs + r * (W4_MANY_SLICE / G));
            for (int64_t o0 = 0; o0 < N; o0 += 16) {
                const int no = (int)(N - o0 < 16 ? N - o0 : 16);
                w4_many_unpack(w, o0, no, qa, qb, wt, sc, z8);
                for (int64_t r = 0; r < nr; r += W4_MANY_ROWS)
                    w4_many_rows(xq + r * W4_MANY_SLICE, xs + r * (W4_MANY_SLICE / G), G, n / 32, wt, sc, z8,
                                 y + (r0 + r) * ldy + o0, ldy, no);
            }
        }
        for (int64_t r = 0; r < nr; r++) { /* y = sx·Σ + b */
            float *yr = y + (r0 + r) * ldy;
            const __m512 s = _mm512_set1_ps(sx[r]);
            for (int64_t o = 0; o < N; o += 16) {
                const __mmask16 m = N - o >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (N - o)) - 1);
                const __m512 bias = b ? _mm512_maskz_loadu_ps(m, b + o) : _mm512_setzero_ps();
                _mm512_mask_storeu_ps(yr + o, m, _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(m, yr + o), bias));
            }
        }
    }
}

typedef void (*tile_fn)(const int8_t *, const int32_t *, const float *, const float *, int64_t, const nrv_w4_weight *,
                        int64_t, const float *, float *, int64_t);

/* Rows [0, rows) by the tiles: blocks of up to W4_MR quantised rows (with lane offsets). */
static __attribute__((noinline)) void w4_tiles(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b,
                                               float *y, int64_t ldy) {
    /* per row count: the widest tile (outputs at once) and the one-output tile; one row takes
     * one output at a time (the weight read as one stream, above) unless its rows are short */
    static const tile_fn wide[W4_MR + 1] = {NULL, tile_1_1, tile_2_2, tile_1_3, tile_1_4};
    static const tile_fn one[W4_MR + 1] = {NULL, tile_1_1, tile_1_2, tile_1_3, tile_1_4};
    static const int wide_no[W4_MR + 1] = {0, 1, 2, 1, 1};
    const int64_t K = w->in, G = w->group, ng = K / G, N = w->out;
    _Alignas(64) int8_t xq[W4_XQ_BYTES];
    _Alignas(64) int32_t off[W4_XQ_BYTES / 4];
    float sx[W4_MR], xs[W4_MR * (NRV_W4_MAX_IN / 32)];
    const int64_t Kq = (K + 127) / 128 * 128; /* bytes of a quantised row (whole quads) */
    int64_t mr = W4_XQ_BYTES / Kq;
    if (mr > W4_MR) mr = W4_MR;
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int R = (int)(rows - r0 < mr ? rows - r0 : mr);
        const int narrow = R == 1 && K <= W4_NARROW_K; /* short rows: four at a time after all */
        const int NO = narrow ? 4 : wide_no[R];
        const tile_fn tile = narrow ? tile_4_1 : wide[R];
        for (int r = 0; r < R; r++)
            sx[r] = quantise_row(x + (r0 + r) * K, K, G, xq + r * Kq, xs + r * ng, off + r * (Kq / 8));
        int64_t o = 0;
        for (; o + NO <= N; o += NO) tile(xq, off, sx, xs, K, w, o, b, y + r0 * ldy, ldy);
        for (; o < N; o++) one[R](xq, off, sx, xs, K, w, o, b, y + r0 * ldy, ldy);
    }
}

/* Full blocks of W4_MANY_ROWS rows by the many-row path, the rest by the tiles (each in its
 * own frame: their stack buffers are never live together). */
void nrv_linear_w4a8_vnni(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy) {
    const int64_t many = rows - rows % W4_MANY_ROWS;
    if (many) w4_many(x, many, w, b, y, ldy);
    if (rows > many) w4_tiles(x + many * w->in, rows - many, w, b, y + many * ldy, ldy);
}
