/* layernorm.c — scalar reference layer normalisation (two-pass: mean, then variance,
 * which stays accurate when |mean| >> std, unlike E[x²] - E[x]²). */
#include <math.h>

#include "kernels.h"

void nrv_layernorm_ref(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta,
                       float eps, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        float sum = 0.0f;
        for (int64_t j = 0; j < dim; j++) sum += xr[j];
        const float mean = sum / (float)dim;
        float var = 0.0f;
        for (int64_t j = 0; j < dim; j++) {
            const float d = xr[j] - mean;
            var += d * d;
        }
        const float rstd = 1.0f / sqrtf(var / (float)dim + eps);
        for (int64_t j = 0; j < dim; j++)
            yr[j] = (xr[j] - mean) * rstd * gamma[j] + (beta ? beta[j] : 0.0f);
    }
}
