/* linear_w8a8.c — scalar reference of the int8 x int8 linear layer (w8a8) and the packing of
 * its weight (layout: kernels.h, above nrv_linear_w8a8_fn; docs/ARCHITECTURE.md, "INT8 x INT8
 * linear (w8a8)").
 *
 * The math, which every variant reproduces bit for bit (x86 VNNI / AVX2, NEON):
 *  for each row r of x (length K):
 *   amax  = max_k |x[r, k]|                                  (exact, order-free)
 *   inv, sx = 127 / amax, amax / 127 (nrv_w8a8_row_scale: 0, 0 when 127 / amax is not finite)
 *   xq[k] = round_half_even(clamp(x[r, k]·inv, -127, 127))   (fp32 product; the clamp first,
 *           so NaN maps to 127 and nothing is undefined; round as _mm512_cvtps_epi32 under
 *           the default MXCSR, i.e. nearbyintf under FE_TONEAREST)
 *   rsum  = sx·(float)Σ_k xq[k]: the row sum of the *quantised* row (int32 sum, exact;
 *           one fp32 product; computed only when z is present). The zero-point term must see
 *           the same x̂ = sx·xq as the product: with W = s·q + z, y = x̂·Wᵀ exactly
 *           (s·sx·acc + z·Σx̂), so only the activation rounding is an error. With the float
 *           Σx instead, the two terms' errors do not cancel: Moonshine's conv3 (z = -1.37
 *           against s = 0.021, so z·Σx is ~30x the output) came out at cosine 0.38.
 *  acc[r, n] = Σ_k xq[k]·q[n, k]                             (int32, exact: |acc| <= 16129·K)
 *  y[r, n] = fma(s[n]·sx, (float)acc[r, n], t) (+ b[n] when b is present),
 *           t = z[n]·rsum, or +0 when z is absent; (float)acc rounds to nearest even, one fp32
 *           product each for s[n]·sx and z[n]·rsum, the fma rounds once.
 * The epilogue is written with an explicit fma in every variant so that no compiler
 * contraction (-ffp-contract) can change it.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

void nrv_linear_w8a8_pack(const int8_t *q, int64_t out, int64_t in, int8_t *packed) {
    const int64_t np = (out + 15) / 16 * 16, kp = (in + 3) / 4 * 4, kb_n = kp / 4;
    for (int64_t nb = 0; nb < np / 16; nb++)
        for (int64_t kb = 0; kb < kb_n; kb++) {
            int8_t *blk = packed + (nb * kb_n + kb) * 64;
            for (int o = 0; o < 16; o++)
                for (int j = 0; j < 4; j++) {
                    const int64_t n = nb * 16 + o, k = kb * 4 + j;
                    blk[o * 4 + j] = n < out && k < in ? q[n * in + k] : 0;
                }
        }
    int8_t *cs = packed + np * kp;
    for (int64_t n = 0; n < np; n++) {
        int32_t c = 0;
        if (n < out)
            for (int64_t k = 0; k < in; k++) c += q[n * in + k];
        memcpy(cs + 4 * n, &c, sizeof c);
    }
}

float nrv_w8a8_quantise_row_ref(const float *x, int64_t n, int8_t *xq) {
    float amax = 0.0f;
    for (int64_t k = 0; k < n; k++) {
        const float a = fabsf(x[k]);
        amax = a > amax ? a : amax;
    }
    float inv, sx;
    nrv_w8a8_row_scale(amax, &inv, &sx);
    for (int64_t k = 0; k < n; k++) {
        float v = x[k] * inv;
        v = v < 127.0f ? v : 127.0f; /* NaN -> 127, as vminps(v, 127) */
        v = v > -127.0f ? v : -127.0f;
        xq[k] = (int8_t)nearbyintf(v);
    }
    return sx;
}

void nrv_linear_w8a8_ref(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                         const float *s, const float *z, int64_t sz_stride, const float *b, float *y) {
    const int64_t kp = (in + 3) / 4 * 4, kb_n = kp / 4;
    int8_t xq[NRV_W8A8_MAX_K];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;
        const float sx = nrv_w8a8_quantise_row_ref(xr, in, xq);
        int32_t isum = 0;
        for (int64_t k = 0; k < in; k++) isum += xq[k];
        const float rsum = z ? sx * (float)isum : 0.0f;
        for (int64_t n = 0; n < out; n++) {
            const int8_t *blk = packed + (n / 16) * kb_n * 64 + (n % 16) * 4;
            int32_t acc = 0;
            for (int64_t k = 0; k < in; k++) acc += (int32_t)xq[k] * blk[(k / 4) * 64 + (k % 4)];
            const float t = z ? z[n * sz_stride] * rsum : 0.0f;
            float v = fmaf(s[n * sz_stride] * sx, (float)acc, t);
            if (b) v += b[n];
            y[r * out + n] = v;
        }
    }
}
