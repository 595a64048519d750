/* linear_f16.c — scalar reference of the fp16-weight linear layer (precision "fp16"):
 *   y[r, o] = Σ_k x[r, k]·float(w[o, k]) + b[o]
 * with w [out, in] IEEE half bits. Widening a half to a float is exact, so this is the fp32
 * linear on the rounded weights: the only error the scheme adds is the rounding of W to
 * fp16 (relative 2^-11), done once by the compiler. */
#include "kernels.h"

void nrv_linear_f16_ref(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                        float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;
        for (int64_t o = 0; o < out; o++) {
            const uint16_t *wo = w + o * in;
            float acc = 0.0f;
            for (int64_t k = 0; k < in; k++) acc += xr[k] * nrv_half_to_float(wo[k]);
            y[r * ldy + o] = acc + (b ? b[o] : 0.0f);
        }
    }
}
