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

#include "linear_w4_tiles.h" /* group constants, block weights, W4A8_R / W4A8_NO */

/* Group g's sums Σ xq·q as 4 int32 lanes per (row, output); 0 when !live. */
AI void dp_group(const int R, const int NO, const int packed, const int8_t *xq, int64_t in, int64_t G,
                 const uint8_t *const *qo, int64_t g, int live, int32x4_t t[][W4A8_NO]) {
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) t[r][o] = vdupq_n_s32(0);
    if (!live) return;
    for (int64_t kb = g * G; kb < (g + 1) * G; kb += 32) {
        int8x16_t wl[W4A8_NO], wh[W4A8_NO];
        for (int o = 0; o < NO; o++) block_q(packed, qo[o], kb, &wl[o], &wh[o]);
        for (int r = 0; r < R; r++) {
            const int8x16_t xa = vld1q_s8(xq + r * in + kb), xb = vld1q_s8(xq + r * in + kb + 16);
            for (int o = 0; o < NO; o++) t[r][o] = vdotq_s32(vdotq_s32(t[r][o], wl[o], xa), wh[o], xb);
        }
    }
}

#define W4A8_GROUP dp_group
#include "linear_w4_tiles.h" /* w4a8_block around dp_group */

void nrv_linear_w4a8_dotprod(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                             int64_t ldy) {
    nrv_w4a8_neon_run(x, rows, w, b, y, ldy, w4a8_block, w4a8_no_of_rows, W4A8_R);
}

const nrv_kernel_variant nrv_variants_dotprod_w4[] = {
    {.op = NRV_OP_LINEAR_W4A8, .name = "dotprod", .group = "dotprod", .requires = NRV_CPU_NEON | NRV_CPU_ASIMDDP,
     .fn.linear_w4 = nrv_linear_w4a8_dotprod},
    {.name = NULL},
};
