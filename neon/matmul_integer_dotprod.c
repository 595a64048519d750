/* matmul_integer_dotprod.c — exact integer product (ONNX MatMulInteger), aarch64 dotprod.
 *
 * Contract and epilogue: kernels.h above nrv_matmul_integer_fn; reference:
 * kernels/matmul_integer.c. sdot multiplies s8 by s8, so each u8 byte of a row enters as
 * a − 128 (xor 0x80; an s8 row's own bytes, flip 0x80, are that already) and the sum gains
 * 128·colsum[n] back: Σ a·q = Σ (a − 128)·q + 128·Σ q. Per 4 k, a packed weight block's four
 * 16-byte quarters (4 outputs x 4 k each) are dotted with the row's 4 bytes broadcast, one
 * int32 lane per output. Tile: 4 rows x 16 outputs (16 accumulators). uint32 wrapping as the
 * reference: bit-identical.
 *
 * This file also holds its one-entry dispatch table (nrv_variants_dotprod_mmi, added by
 * dispatch.c after nrv_variants_neon_w8a8).
 */
#include <arm_neon.h>
#include <string.h>

#include "kernels.h"

#define MI_MR 4

void nrv_matmul_integer_dotprod(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                                int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                                const int32_t *zq, int32_t *y) {
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16, kb_n = kp / 4, kfull = in / 4;
    const int8_t *colsum_bytes = packed + np * kp;
    const uint32_t sflip4 = (uint8_t)(flip ^ 0x80) * 0x01010101u; /* bytes as sdot's s8: a − 128 */
    for (int64_t r0 = 0; r0 < rows; r0 += MI_MR) {
        const int R = (int)(rows - r0 < MI_MR ? rows - r0 : MI_MR);
        const uint8_t *ar[MI_MR];
        int32_t tail[MI_MR] = {0}, t_zq[MI_MR] = {0};
        for (int r = 0; r < R; r++) {
            ar[r] = a + (r0 + r) * in;
            uint8_t t[4] = {0x80, 0x80, 0x80, 0x80}; /* a − 128 of a zero-padded u8 */
            for (int64_t k = kfull * 4; k < in; k++) t[k - kfull * 4] = (uint8_t)(ar[r][k] ^ flip ^ 0x80);
            memcpy(&tail[r], t, 4);
            if (zq) {
                uint32_t s = 0;
                int64_t k = 0;
                const uint8x16_t fv = vdupq_n_u8(flip);
                uint32x4_t acc = vdupq_n_u32(0);
                for (; k + 16 <= in; k += 16) acc = vpadalq_u16(acc, vpaddlq_u8(veorq_u8(vld1q_u8(ar[r] + k), fv)));
                s = vaddvq_u32(acc);
                for (; k < in; k++) s += (uint8_t)(ar[r][k] ^ flip);
                t_zq[r] = (int32_t)((uint32_t)in * (uint32_t)za[(r0 + r) * za_stride] - s);
            }
        }
        for (int64_t n = n0; n < n1; n += 16) {
            const int8_t *w = packed + (n / 16) * kb_n * 64;
            int32x4_t acc[MI_MR][4];
            for (int r = 0; r < MI_MR; r++)
                for (int j = 0; j < 4; j++) acc[r][j] = vdupq_n_s32(0);
            for (int64_t kb = 0; kb < kb_n; kb++) {
                const int8x16_t w0 = vld1q_s8(w + kb * 64), w1 = vld1q_s8(w + kb * 64 + 16),
                                w2 = vld1q_s8(w + kb * 64 + 32), w3 = vld1q_s8(w + kb * 64 + 48);
                for (int r = 0; r < R; r++) {
                    uint32_t v;
                    if (kb < kfull) {
                        memcpy(&v, ar[r] + kb * 4, 4);
                        v ^= sflip4;
                    } else {
                        v = (uint32_t)tail[r];
                    }
                    const int8x16_t xb = vreinterpretq_s8_u32(vdupq_n_u32(v));
                    acc[r][0] = vdotq_s32(acc[r][0], w0, xb);
                    acc[r][1] = vdotq_s32(acc[r][1], w1, xb);
                    acc[r][2] = vdotq_s32(acc[r][2], w2, xb);
                    acc[r][3] = vdotq_s32(acc[r][3], w3, xb);
                }
            }
            const int64_t left = n1 - n < 16 ? n1 - n : 16;
            int32_t cs[16], zqb[16] = {0};
            memcpy(cs, colsum_bytes + 4 * n, sizeof cs); /* colsum is padded to 16 */
            if (zq) memcpy(zqb, zq + n, (size_t)left * sizeof(int32_t));
            for (int r = 0; r < R; r++) {
                const uint32x4_t zav = vdupq_n_u32((uint32_t)za[(r0 + r) * za_stride]),
                                 tv = vdupq_n_u32((uint32_t)t_zq[r]);
                int32_t buf[16];
                for (int j = 0; j < 4; j++) {
                    const uint32x4_t c = vreinterpretq_u32_s32(vld1q_s32(cs + 4 * j));
                    uint32x4_t v = vreinterpretq_u32_s32(acc[r][j]);
                    v = vmlaq_u32(v, c, vdupq_n_u32(128u)); /* Σ a·q = Σ (a − 128)·q + 128·colsum */
                    v = vmlsq_u32(v, zav, c);
                    v = vmlaq_u32(v, vreinterpretq_u32_s32(vld1q_s32(zqb + 4 * j)), tv);
                    vst1q_s32(buf + 4 * j, vreinterpretq_s32_u32(v));
                }
                memcpy(y + (r0 + r) * out + n, buf, (size_t)left * sizeof(int32_t));
            }
        }
    }
}

const nrv_kernel_variant nrv_variants_dotprod_mmi[] = {
    {.op = NRV_OP_MATMUL_INTEGER, .name = "dotprod", .group = "dotprod", .requires = NRV_CPU_NEON | NRV_CPU_ASIMDDP,
     .fn.matmul_integer = nrv_matmul_integer_dotprod},
    {.name = NULL},
};
