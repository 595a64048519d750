/* linear_w4_neon.c — INT4-weight linear layers (w4a32, w4a8), baseline ARMv8.0 Advanced SIMD
 * (also the row quantiser and the w4a8 driver that linear_w4_dotprod.c shares).
 *
 * Contract: kernels.h above nrv_linear_w4_fn; weight formats: nerve.h "W4 weights"; the
 * math: native/src/kernels/linear_w4.c. Bit-identical layouts: both are turned into the same
 * numbers first (unpacked q + 8 is the packed nibble u), everything after is shared. Split
 * independence: an output's value depends only on its row of x and its weight row; every tile
 * shape (rows x outputs) runs the same per-output sequence, and nothing is chosen from out or
 * rows.
 *
 * w4a32 splits the contract's q - z into u - (8 + z), u = q + 8 in [0, 15], so no weight
 * needs its own dequantisation: y = Σ_g s_g·(Σ_{k in g} x_k·u_k) - Σ_g s_g·(8 + z_g)·XS_g + b
 * with XS_g = Σ_{k in g} x_k computed once per row (s·(8 + z) is exact: an fp16 times an
 * integer below 16). u is widened to fp32 (uxtl, uxtl, ucvtf: 5 instructions per 8 weights,
 * exact; the dequantising alternatives, e.g. fp16 magic numbers, need at least as many plus a
 * destructive FMA per 4 weights), and per group each (row, output) keeps two partial sums
 * (the even / odd 4-lane vectors: two FMA chains), then acc += s·(d0 + d1) lane-wise; after
 * every 4 groups acc -= s·(8 + z)·XS for the 4 at once. A widened block serves every row of
 * the tile.
 *
 * w4a8: rows are quantised to int8 as linear_w8a8 does into a stack buffer, with their group
 * sums XS_g. Weights become int8 q = u - 8, so only the zero point needs a correction:
 * D_g = Σ xq·q - z_g·XS_g. The products are exact in int16 (smlal, |xq·q| <= 1016, at
 * most 8 per lane and group: <= 8128), pairwise-widened into int32 per group; four groups are
 * reduced at once with addp into one vector [T_g], D = T - z·XS in fp32 (exact integers below
 * 2^24), acc += s·D lane-wise; y = sx·Σ acc + b.
 *
 * The quantiser clamps with FMINNM (a NaN product becomes 127, like the reference's
 * min-first clamp) and takes the row maximum with a compare-select (a > m ? a : m, NaN
 * skipped as in the reference), so rows with NaN quantise as the reference's do.
 *
 * This file also holds its dispatch table (nrv_variants_neon_w4, added by dispatch.c).
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))
#include "linear_w4_tiles.h" /* group constants, block weights, W4A8_R / W4A8_NO */

/* Tiles: rows per tile and outputs per tile for each row count (32 vector registers: w4a32
 * keeps 3·R·NO partial sums and accumulators, w4a8 ~4·R·NO, plus weights and x). Not yet
 * tuned on hardware (written and tested under qemu). */
#define A32_R 4
#define A32_NO 4
static const int a32_no_of_rows[A32_R + 1] = {0, 4, 2, 1, 1};

#define XS_FLOATS 4096    /* per-row group sums kept per pass (padded to 4 per row) */
#define XS_ROWS 8         /* rows per pass at most */
#define A8_XQ_BYTES 32768 /* w4a8: quantised rows kept per pass: >= 2 rows at NRV_W4_MAX_IN */
/* Outputs per pass over the rows: their weight rows (<= ~192 KiB) stay in L2 while every
 * tile of rows meets them, so q is streamed from memory once per pass. */
#define W4_CHUNK_BYTES (192 * 1024)

static int64_t chunk_outputs(const nrv_w4_weight *w) {
    const int64_t per = nrv_w4_row_bytes(w) + 3 * (w->in / w->group); /* q + scales + zero points */
    const int64_t n = W4_CHUNK_BYTES / per / 4 * 4;
    return n < 4 ? 4 : n;
}

/* ---------------------------------------------------------------- w4a32 */

/* The u values of one block of 32 weights (k0..15 in lo, k16..31 in hi). */
AI void block_u(const int packed, const uint8_t *row, int64_t k0, uint8x16_t *lo, uint8x16_t *hi) {
    if (packed) {
        const uint8x16_t v = vld1q_u8(row + k0 / 2);
        *lo = vandq_u8(v, vdupq_n_u8(15));
        *hi = vshrq_n_u8(v, 4);
    } else {
        const int8x16_t eight = vdupq_n_s8(8);
        *lo = vreinterpretq_u8_s8(vaddq_s8(vld1q_s8((const int8_t *)row + k0), eight));
        *hi = vreinterpretq_u8_s8(vaddq_s8(vld1q_s8((const int8_t *)row + k0 + 16), eight));
    }
}

/* xs[g] = Σ_{k in g} x[k] (4 lanes in k order, then the pairwise vaddvq). */
static void a32_group_sums(const float *x, int64_t in, int64_t G, float *xs) {
    for (int64_t g = 0; g < in / G; g++) {
        float32x4_t a = vld1q_f32(x + g * G);
        for (int64_t k = g * G + 4; k < (g + 1) * G; k += 4) a = vaddq_f32(a, vld1q_f32(x + k));
        xs[g] = vaddvq_f32(a);
    }
}

/* Groups [g0, g0 + gn) (gn <= 4) of R rows x NO outputs into acc: per group and (row,
 * output) two partial sums d (the even / odd 4-lane vectors: two FMA chains) of x·u, then
 * acc += s·(d0 + d1); after the chunk acc -= s·(8 + z)·xs for its groups (0 past gn). */
AI void a32_chunk(const int R, const int NO, const int packed, const int gn, const float *x, int64_t in, const int G,
                  const uint8_t *const *qo, const uint16_t *const *so, const int8_t *const *zo, int64_t g0,
                  const float *xs, int64_t xst, float32x4_t acc[][A32_NO]) {
    float sc[A32_NO][4];
    float32x4_t sz[A32_NO];
    for (int o = 0; o < NO; o++) {
        float32x4_t sv, zv;
        group_consts4(so[o] + g0, zo[o] ? zo[o] + g0 : NULL, gn, &sv, &zv);
        vst1q_f32(sc[o], sv);
        sz[o] = vmulq_f32(sv, vaddq_f32(zv, vdupq_n_f32(8.0f))); /* exact */
    }
    for (int j = 0; j < gn; j++) {
        float32x4_t d[A32_R][A32_NO][2];
        for (int r = 0; r < R; r++)
            for (int o = 0; o < NO; o++) d[r][o][0] = d[r][o][1] = vdupq_n_f32(0.0f);
        for (int64_t kb = (g0 + j) * G; kb < (g0 + j + 1) * G; kb += 32) {
            uint8x16_t lo[A32_NO], hi[A32_NO];
            for (int o = 0; o < NO; o++) block_u(packed, qo[o], kb, &lo[o], &hi[o]);
            for (int t = 0; t < 4; t++) { /* weights kb + 8t .. kb + 8t + 7 */
                float32x4_t x0[A32_R], x1[A32_R];
                for (int r = 0; r < R; r++) {
                    x0[r] = vld1q_f32(x + r * in + kb + 8 * t);
                    x1[r] = vld1q_f32(x + r * in + kb + 8 * t + 4);
                }
                for (int o = 0; o < NO; o++) {
                    const uint8x16_t src = t < 2 ? lo[o] : hi[o];
                    const uint16x8_t h = t % 2 ? vmovl_high_u8(src) : vmovl_u8(vget_low_u8(src));
                    const float32x4_t f0 = vcvtq_f32_u32(vmovl_u16(vget_low_u16(h)));
                    const float32x4_t f1 = vcvtq_f32_u32(vmovl_high_u16(h));
                    for (int r = 0; r < R; r++) {
                        d[r][o][0] = vfmaq_f32(d[r][o][0], x0[r], f0);
                        d[r][o][1] = vfmaq_f32(d[r][o][1], x1[r], f1);
                    }
                }
            }
        }
        for (int o = 0; o < NO; o++)
            for (int r = 0; r < R; r++) acc[r][o] = vfmaq_n_f32(acc[r][o], vaddq_f32(d[r][o][0], d[r][o][1]), sc[o][j]);
    }
    for (int r = 0; r < R; r++) {
        const float32x4_t xsv = vld1q_f32(xs + r * xst + g0);
        for (int o = 0; o < NO; o++) acc[r][o] = vfmsq_f32(acc[r][o], sz[o], xsv);
    }
}

/* R rows x outputs [o0, o0 + NO) of w (x, xs and y at row 0, y at column o0). G is a
 * constant, so a group's blocks unroll and the partial sums stay in registers. */
AI void a32_tile(const int R, const int NO, const int packed, const int G, const float *x, const float *xs,
                 int64_t xst, const nrv_w4_weight *w, int64_t o0, const float *b, float *y, int64_t ldy) {
    const int64_t in = w->in, ng = in / G;
    const uint8_t *qo[A32_NO];
    const uint16_t *so[A32_NO];
    const int8_t *zo[A32_NO];
    nrv_w4_row_ptrs(w, o0, NO, qo, so, zo);
    float32x4_t acc[A32_R][A32_NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = vdupq_n_f32(0.0f);
    int64_t g0 = 0;
    for (; g0 + 4 <= ng; g0 += 4) a32_chunk(R, NO, packed, 4, x, in, G, qo, so, zo, g0, xs, xst, acc);
    if (g0 < ng) a32_chunk(R, NO, packed, (int)(ng - g0), x, in, G, qo, so, zo, g0, xs, xst, acc);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) y[r * ldy + o] = vaddvq_f32(acc[r][o]) + (b ? b[o0 + o] : 0.0f);
}

#define A32_G(R_, NO_, P_)                                                                                    \
    switch (w->group) {                                                                                       \
    case 32: a32_tile(R_, NO_, P_, 32, x, xs, xst, w, o0, b, y, ldy); return;                                 \
    case 64: a32_tile(R_, NO_, P_, 64, x, xs, xst, w, o0, b, y, ldy); return;                                 \
    default: a32_tile(R_, NO_, P_, 128, x, xs, xst, w, o0, b, y, ldy); return;                                \
    }
#define A32_CASE(R_, NO_)                                                                                     \
    case (R_) * 8 + (NO_):                                                                                    \
        if (w->layout == NRV_W4_PACKED) A32_G(R_, NO_, 1)                                                     \
        else A32_G(R_, NO_, 0)

static __attribute__((noinline)) void a32_block(int R, int NO, const float *x, const float *xs, int64_t xst,
                                                const nrv_w4_weight *w, int64_t o0, const float *b, float *y,
                                                int64_t ldy) {
    switch (R * 8 + NO) { /* the shapes of a32_no_of_rows, and one output for the chunk tails */
        A32_CASE(1, 4)
        A32_CASE(1, 1)
        A32_CASE(2, 2)
        A32_CASE(2, 1)
        A32_CASE(3, 1)
        A32_CASE(4, 1)
    default: return;
    }
}

void nrv_linear_w4a32_neon(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                           int64_t ldy) {
    const int64_t out = w->out, in = w->in, ng = in / w->group, xst = (ng + 3) / 4 * 4, oc = chunk_outputs(w);
    int64_t qr = XS_FLOATS / xst; /* >= 7: xst <= NRV_W4_MAX_IN / 32 + 3 */
    if (qr > XS_ROWS) qr = XS_ROWS;
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
                const int R = (int)(nq - r0 < A32_R ? nq - r0 : A32_R), NO = a32_no_of_rows[R];
                const float *xr = x + (q0 + r0) * in;
                float *yr = y + (q0 + r0) * ldy;
                int64_t o = c0;
                for (; o + NO <= c1; o += NO) a32_block(R, NO, xr, xs + r0 * xst, xst, w, o, b, yr + o, ldy);
                for (; o < c1; o++) a32_block(R, 1, xr, xs + r0 * xst, xst, w, o, b, yr + o, ldy);
            }
        }
    }
}

/* ---------------------------------------------------------------- w4a8 */

/* Quantises row x (n floats, n a multiple of 32) into xq as linear_w8a8 does and writes the
 * group sums of xq to xs[0, n / G); returns sx. */
static float quantise_row(const float *x, int64_t n, int64_t G, int8_t *xq, float *xs) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < n; k += 4) {
        const float32x4_t a = vabsq_f32(vld1q_f32(x + k));
        m = vbslq_f32(vcgtq_f32(a, m), a, m);
    }
    float inv, sx;
    nrv_w8a8_row_scale(vmaxvq_f32(m), &inv, &sx);
    const float32x4_t vinv = vdupq_n_f32(inv), hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
    for (int64_t g0 = 0; g0 < n; g0 += G) {
        int32x4_t gs = vdupq_n_s32(0);
        for (int64_t k = g0; k < g0 + G; k += 16) {
            int32x4_t q[4];
            for (int i = 0; i < 4; i++) {
                const float32x4_t v = vmulq_f32(vld1q_f32(x + k + 4 * i), vinv);
                q[i] = vcvtnq_s32_f32(vmaxq_f32(vminnmq_f32(v, hi), lo)); /* round half to even */
                gs = vaddq_s32(gs, q[i]);
            }
            const int16x8_t h0 = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
            const int16x8_t h1 = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
            vst1q_s8(xq + k, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
        }
        xs[g0 / G] = (float)vaddvq_s32(gs);
    }
    return sx;
}

void nrv_w4a8_neon_run(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y, int64_t ldy,
                       nrv_w4a8_neon_block_fn block, const int *no_of_rows, int r_max) {
    const int64_t out = w->out, in = w->in, ng = in / w->group, xst = (ng + 3) / 4 * 4, oc = chunk_outputs(w);
    int64_t qr = A8_XQ_BYTES / in; /* >= 2 */
    if (qr > XS_FLOATS / xst) qr = XS_FLOATS / xst; /* >= 7: xst <= NRV_W4_MAX_IN / 32 + 3 */
    if (qr > XS_ROWS) qr = XS_ROWS;
    int8_t xq[A8_XQ_BYTES];
    float xs[XS_FLOATS], sx[XS_ROWS];
    for (int64_t q0 = 0; q0 < rows; q0 += qr) {
        const int64_t nq = rows - q0 < qr ? rows - q0 : qr;
        for (int64_t r = 0; r < nq; r++) {
            sx[r] = quantise_row(x + (q0 + r) * in, in, w->group, xq + r * in, xs + r * xst);
            for (int64_t g = ng; g < xst; g++) xs[r * xst + g] = 0.0f;
        }
        for (int64_t c0 = 0; c0 < out; c0 += oc) {
            const int64_t c1 = out - c0 < oc ? out : c0 + oc;
            for (int64_t r0 = 0; r0 < nq; r0 += r_max) {
                const int R = (int)(nq - r0 < r_max ? nq - r0 : r_max), NO = no_of_rows[R];
                float *yr = y + (q0 + r0) * ldy;
                int64_t o = c0;
                for (; o + NO <= c1; o += NO) block(R, NO, xq + r0 * in, xs + r0 * xst, xst, sx + r0, w, o, b, yr + o, ldy);
                for (; o < c1; o++) block(R, 1, xq + r0 * in, xs + r0 * xst, xst, sx + r0, w, o, b, yr + o, ldy);
            }
        }
    }
}

/* Group g's sums Σ xq·q as 4 int32 lanes per (row, output); 0 when !live. */
AI void a8_group(const int R, const int NO, const int packed, const int8_t *xq, int64_t in, int64_t G,
                 const uint8_t *const *qo, int64_t g, int live, int32x4_t t[][W4A8_NO]) {
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) t[r][o] = vdupq_n_s32(0);
    if (!live) return;
    int16x8_t a[W4A8_R][W4A8_NO], c[W4A8_R][W4A8_NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) a[r][o] = c[r][o] = vdupq_n_s16(0);
    for (int64_t kb = g * G; kb < (g + 1) * G; kb += 32) {
        int8x16_t wl[W4A8_NO], wh[W4A8_NO];
        for (int o = 0; o < NO; o++) block_q(packed, qo[o], kb, &wl[o], &wh[o]);
        for (int r = 0; r < R; r++) {
            const int8x16_t xa = vld1q_s8(xq + r * in + kb), xb = vld1q_s8(xq + r * in + kb + 16);
            for (int o = 0; o < NO; o++) {
                a[r][o] = vmlal_s8(a[r][o], vget_low_s8(wl[o]), vget_low_s8(xa));
                c[r][o] = vmlal_high_s8(c[r][o], wl[o], xa);
                a[r][o] = vmlal_s8(a[r][o], vget_low_s8(wh[o]), vget_low_s8(xb));
                c[r][o] = vmlal_high_s8(c[r][o], wh[o], xb);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) t[r][o] = vpadalq_s16(vpaddlq_s16(a[r][o]), c[r][o]);
}

#define W4A8_GROUP a8_group
#include "linear_w4_tiles.h" /* w4a8_block around a8_group */

void nrv_linear_w4a8_neon(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy) {
    nrv_w4a8_neon_run(x, rows, w, b, y, ldy, w4a8_block, w4a8_no_of_rows, W4A8_R);
}

const nrv_kernel_variant nrv_variants_neon_w4[] = {
    {.op = NRV_OP_LINEAR_W4A32, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON,
     .fn.linear_w4 = nrv_linear_w4a32_neon},
    {.op = NRV_OP_LINEAR_W4A8, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON,
     .fn.linear_w4 = nrv_linear_w4a8_neon},
    {.name = NULL},
};
