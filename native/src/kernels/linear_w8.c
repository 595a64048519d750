/* linear_w8.c — scalar reference of the int8-weight linear layer (w8a32):
 *   y[r, o] = s[o] · Σ_k x[r, k]·q[o, k] + z[o] · Σ_k x[r, k] + b[o]
 * which is x · Wᵀ + b for W[o, k] = s[o]·q[o, k] + z[o] (an affine int8 dequantisation,
 * per tensor when sz_stride is 0, per output row when it is 1). The two sums are kept
 * apart, as every variant keeps them: the int8 values enter the product unscaled. */
#include "kernels.h"

void nrv_linear_w8_ref(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s, const float *z,
                       int64_t sz_stride, const float *b, int64_t out, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;
        float sum = 0.0f;
        if (z)
            for (int64_t k = 0; k < in; k++) sum += xr[k];
        for (int64_t o = 0; o < out; o++) {
            const int8_t *qo = q + o * in;
            float acc = 0.0f;
            for (int64_t k = 0; k < in; k++) acc += xr[k] * (float)qo[k];
            float v = s[o * sz_stride] * acc;
            if (z) v += z[o * sz_stride] * sum;
            y[r * out + o] = v + (b ? b[o] : 0.0f);
        }
    }
}
