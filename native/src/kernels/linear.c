/* linear.c — scalar reference linear layer and fused layernorm + linear. */
#include <math.h>

#include "kernels.h"

void nrv_linear_ref(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                    float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;
        for (int64_t o = 0; o < out; o++) {
            const float *wo = w + o * in;
            float acc = 0.0f;
            for (int64_t k = 0; k < in; k++) acc += xr[k] * wo[k];
            y[r * out + o] = acc + (b ? b[o] : 0.0f);
        }
    }
}

/* Per row: mean and rstd first, then every output's dot product normalises x on the fly
 * ((x_k - mean) * rstd * gamma_k + beta_k), so no normalised row is stored anywhere. */
void nrv_layernorm_linear_ref(const float *x, int64_t rows, int64_t in, const float *gamma, const float *beta,
                              float eps, const float *w, const float *b, int64_t out, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * in;
        float sum = 0.0f;
        for (int64_t k = 0; k < in; k++) sum += xr[k];
        const float mean = sum / (float)in;
        float var = 0.0f;
        for (int64_t k = 0; k < in; k++) {
            const float d = xr[k] - mean;
            var += d * d;
        }
        const float rstd = 1.0f / sqrtf(var / (float)in + eps);
        for (int64_t o = 0; o < out; o++) {
            const float *wo = w + o * in;
            float acc = 0.0f;
            for (int64_t k = 0; k < in; k++)
                acc += ((xr[k] - mean) * rstd * gamma[k] + (beta ? beta[k] : 0.0f)) * wo[k];
            y[r * out + o] = acc + (b ? b[o] : 0.0f);
        }
    }
}
