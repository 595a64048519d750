/* matmul_integer.c — scalar reference of the exact integer product (ONNX MatMulInteger on a
 * constant int8 weight; contract in kernels.h above nrv_matmul_integer_fn).
 *
 * Why this form: onnxruntime computes MatMulInteger in int32, so a model quantized with its
 * quantize_dynamic (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) expects those
 * exact integers. Expanding (a − za)·(q − zq) gives one u8 x s8 product, which x86 VNNI
 * (vpdpbusd) and aarch64 dotprod run natively, plus three corrections from sums known ahead
 * (colsum[n], packed with the weight) or taken once per row (Σ a). All of it is done mod
 * 2^32 (uint32), which is what wrapping int32 hardware gives, so no order of summation in
 * any variant can change a bit.
 */
#include "kernels.h"

#include <string.h>

void nrv_matmul_integer_ref(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                            int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                            const int32_t *zq, int32_t *y) {
    const int64_t np = (out + 15) / 16 * 16, kp = (in + 3) / 4 * 4, kb_n = kp / 4;
    const int8_t *colsum_bytes = packed + np * kp;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *ar = a + r * in;
        uint32_t asum = 0;
        for (int64_t k = 0; k < in; k++) asum += (uint8_t)(ar[k] ^ flip);
        const uint32_t zr = (uint32_t)za[r * za_stride];
        for (int64_t n = n0; n < n1; n++) {
            const int8_t *blk = packed + (n / 16) * kb_n * 64 + (n % 16) * 4;
            uint32_t acc = 0;
            for (int64_t k = 0; k < in; k++)
                acc += (uint32_t)(uint8_t)(ar[k] ^ flip) * (uint32_t)(int32_t)blk[(k / 4) * 64 + (k % 4)];
            int32_t colsum;
            memcpy(&colsum, colsum_bytes + 4 * n, sizeof colsum);
            y[r * out + n] = nrv_matmul_integer_finish(acc, zr, colsum, zq ? (uint32_t)zq[n] : 0u, asum, in);
        }
    }
}

void nrv_matmul_integer_planes_ref(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in, int32_t za,
                                   const int8_t *packed, int64_t out, const int32_t *zq, const nrv_requant_out *rq,
                                   void *y, int64_t ldy) {
    const int64_t kb_n = (in + 3) / 4, np = (out + 15) / 16 * 16;
    const int8_t *colsum_bytes = packed + np * kb_n * 4;
    for (int64_t p = 0; p < n; p++) {
        uint32_t asum = 0;
        for (int64_t k = 0; k < in; k++) asum += (uint8_t)(a[k * lda + p] ^ flip);
        for (int64_t m = 0; m < out; m++) {
            const int8_t *blk = packed + (m / 16) * kb_n * 64 + (m % 16) * 4;
            uint32_t acc = 0;
            for (int64_t k = 0; k < in; k++)
                acc += (uint32_t)(uint8_t)(a[k * lda + p] ^ flip) * (uint32_t)(int32_t)blk[(k / 4) * 64 + (k % 4)];
            int32_t colsum;
            memcpy(&colsum, colsum_bytes + 4 * m, sizeof colsum);
            const int32_t v = nrv_matmul_integer_finish(acc, (uint32_t)za, colsum, zq ? (uint32_t)zq[m] : 0u, asum, in);
            if (rq)
                nrv_requant_ref(&v, 1, rq->bias ? rq->bias[m] : 0, rq->scale[m * rq->scale_stride], rq->lo, rq->hi,
                                rq->z, (uint8_t *)y + m * ldy + p);
            else
                ((int32_t *)y)[m * ldy + p] = v;
        }
    }
}
