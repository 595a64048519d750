/* layernorm_neon.c — NEON layer normalisation: per row, two vector passes for the mean and
 * the variance of (x - mean) (stable like the reference), then one normalising pass. The
 * row statistics and the normalise step live in neon_common.h, shared with the fused
 * layernorm + linear kernel. */
#include "neon_common.h"
#include "neon_kernels.h"

void nrv_layernorm_neon(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta,
                        float eps, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        float mean, rstd;
        nrv_neon_row_stats(x + r * dim, dim, eps, &mean, &rstd);
        /* Element-wise: safe when y == x, every x[j] is read before y[j] is written. */
        nrv_neon_normalise(x + r * dim, dim, mean, rstd, gamma, beta, y + r * dim);
    }
}
