/* linear_w4_dotprod.c — INT4-weight linear layer w4a8 with the ARMv8.2 dot product (sdot),
 * built with -march=armv8.2-a+dotprod (CMake, by the _dotprod.c suffix) and listed only for
 * CPUs that report asimddp.
 *
 * Contract: kernels.h above nrv_linear_w4_fn; weight formats: nerve.h "W4 weights"; the math:
 * native/src/kernels/linear_w4.c. The scheme of linear_w4_neon.c's w4a8 (which also
 * quantises the rows, through nrv_w4a8_neon_run), with the products done by sdot: the
 * weights as int8 q = u - 8 (the same numbers for both layouts), 4 int32 lanes per group,
 * each the exact sum of G/4 products xq·q; four groups reduced at once with addp into one
 * vector [T_g]; D = T - z·XS in fp32 (exact integers below 2^24); acc += s·D lane-wise;
 * y = sx·Σ acc + b. An output's value depends only on its row of x and its weight row.
 *
 * This file also holds its dispatch table (nrv_variants_dotprod_w4, added by dispatch.c
 * before nrv_variants_neon_w4).
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))

/* Tiles: rows per tile, outputs per tile for each row count (32 vector registers: per (row,
 * output) up to 3 group vectors and an accumulator, per row two x vectors, per output two
 * weight vectors). Not yet tuned on hardware (written and tested under qemu). */
#define DP_R 4
#define DP_NO 4
static const int dp_no_of_rows[DP_R + 1] = {0, 4, 2, 1, 1};

/* Scales and zero points of up to 4 groups of one output as floats (0 past gn). */
AI void group_consts4(const uint16_t *s, const int8_t *z, int gn, float32x4_t *sv, float32x4_t *zv) {
    uint16_t st[4] = {0, 0, 0, 0};
    int32_t zt[4] = {0, 0, 0, 0};
    memcpy(st, s, (size_t)gn * sizeof *s);
    if (z)
        for (int j = 0; j < gn; j++) zt[j] = z[j];
    *sv = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(st)));
    *zv = vcvtq_f32_s32(vld1q_s32(zt));
}

/* The int8 weights q = u - 8 of one block (k0..15 in lo, k16..31 in hi). */
AI void block_q(const int packed, const uint8_t *row, int64_t k0, int8x16_t *lo, int8x16_t *hi) {
    if (packed) {
        const uint8x16_t v = vld1q_u8(row + k0 / 2);
        const int8x16_t eight = vdupq_n_s8(8);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    } else {
        *lo = vld1q_s8((const int8_t *)row + k0);
        *hi = vld1q_s8((const int8_t *)row + k0 + 16);
    }
}

/* Group g's sums Σ xq·q as 4 int32 lanes per (row, output); 0 when !live. */
AI void dp_group(const int R, const int NO, const int packed, const int8_t *xq, int64_t in, int64_t G,
                 const uint8_t *const *qo, int64_t g, int live, int32x4_t t[][DP_NO]) {
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) t[r][o] = vdupq_n_s32(0);
    if (!live) return;
    for (int64_t kb = g * G; kb < (g + 1) * G; kb += 32) {
        int8x16_t wl[DP_NO], wh[DP_NO];
        for (int o = 0; o < NO; o++) block_q(packed, qo[o], kb, &wl[o], &wh[o]);
        for (int r = 0; r < R; r++) {
            const int8x16_t xa = vld1q_s8(xq + r * in + kb), xb = vld1q_s8(xq + r * in + kb + 16);
            for (int o = 0; o < NO; o++) t[r][o] = vdotq_s32(vdotq_s32(t[r][o], wl[o], xa), wh[o], xb);
        }
    }
}

/* Groups [g0, g0 + gn) (gn <= 4) of R rows x NO outputs into acc; the group vectors are
 * paired with addp as soon as two exist, so few stay live. */
AI void dp_chunk(const int R, const int NO, const int packed, const int gn, const int8_t *xq, int64_t in, int64_t G,
                 const uint8_t *const *qo, const uint16_t *const *so, const int8_t *const *zo, int64_t g0,
                 const float *xs, int64_t xst, float32x4_t acc[][DP_NO]) {
    int32x4_t p[2][DP_R][DP_NO];
    for (int h = 0; h < 2; h++) {
        int32x4_t ta[DP_R][DP_NO], tb[DP_R][DP_NO];
        dp_group(R, NO, packed, xq, in, G, qo, g0 + 2 * h, 2 * h < gn, ta);
        dp_group(R, NO, packed, xq, in, G, qo, g0 + 2 * h + 1, 2 * h + 1 < gn, tb);
        for (int r = 0; r < R; r++)
            for (int o = 0; o < NO; o++) p[h][r][o] = vpaddq_s32(ta[r][o], tb[r][o]);
    }
    for (int o = 0; o < NO; o++) {
        float32x4_t sv, zv;
        group_consts4(so[o] + g0, zo[o] ? zo[o] + g0 : NULL, gn, &sv, &zv);
        for (int r = 0; r < R; r++) {
            const int32x4_t tt = vpaddq_s32(p[0][r][o], p[1][r][o]); /* [T_g0 .. T_g0+3] */
            const float32x4_t d = vfmsq_f32(vcvtq_f32_s32(tt), zv, vld1q_f32(xs + r * xst + g0)); /* exact */
            acc[r][o] = vfmaq_f32(acc[r][o], sv, d);
        }
    }
}

AI void dp_tile(const int R, const int NO, const int packed, const int8_t *xq, const float *xs, int64_t xst,
                const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b, float *y, int64_t ldy) {
    const int64_t in = w->in, G = w->group, ng = in / G, rb = nrv_w4_row_bytes(w);
    const uint8_t *qo[DP_NO];
    const uint16_t *so[DP_NO];
    const int8_t *zo[DP_NO];
    for (int o = 0; o < NO; o++) {
        qo[o] = (const uint8_t *)w->q + (o0 + o) * rb;
        so[o] = w->scales + (o0 + o) * ng;
        zo[o] = w->zero ? w->zero + (o0 + o) * ng : NULL;
    }
    float32x4_t acc[DP_R][DP_NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = vdupq_n_f32(0.0f);
    int64_t g0 = 0;
    for (; g0 + 4 <= ng; g0 += 4) dp_chunk(R, NO, packed, 4, xq, in, G, qo, so, zo, g0, xs, xst, acc);
    if (g0 < ng) dp_chunk(R, NO, packed, (int)(ng - g0), xq, in, G, qo, so, zo, g0, xs, xst, acc);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) y[r * ldy + o] = fmaf(vaddvq_f32(acc[r][o]), sx[r], b ? b[o0 + o] : 0.0f);
}

#define DP_CASE(R_, NO_)                                                                                      \
    case (R_) * 8 + (NO_):                                                                                    \
        if (packed) dp_tile(R_, NO_, 1, xq, xs, xst, sx, w, o0, b, y, ldy);                                   \
        else dp_tile(R_, NO_, 0, xq, xs, xst, sx, w, o0, b, y, ldy);                                          \
        return;

static __attribute__((noinline)) void dp_block(int R, int NO, const int8_t *xq, const float *xs, int64_t xst,
                                               const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b,
                                               float *y, int64_t ldy) {
    const int packed = w->layout == NRV_W4_PACKED;
    switch (R * 8 + NO) { /* the shapes of dp_no_of_rows, and one output for the chunk tails */
        DP_CASE(1, 4)
        DP_CASE(1, 1)
        DP_CASE(2, 2)
        DP_CASE(2, 1)
        DP_CASE(3, 1)
        DP_CASE(4, 1)
    default: return;
    }
}

void nrv_linear_w4a8_dotprod(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                             int64_t ldy) {
    nrv_w4a8_neon_run(x, rows, w, b, y, ldy, dp_block, dp_no_of_rows, DP_R);
}

const nrv_kernel_variant nrv_variants_dotprod_w4[] = {
    {.op = NRV_OP_LINEAR_W4A8, .name = "dotprod", .group = "dotprod", .requires = NRV_CPU_NEON | NRV_CPU_ASIMDDP,
     .fn.linear_w4 = nrv_linear_w4a8_dotprod},
    {.name = NULL},
};
