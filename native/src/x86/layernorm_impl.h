/* layernorm_impl.h — row layer normalisation, written once against the vector layer
 * (layernorm_avx2.c / layernorm_avx512.c). Two passes for the statistics, like the
 * reference (v_row_stats), a third to write y; y may be x (each element is read before
 * it is overwritten, at the same position). A row of up to ~8K floats stays in L1 over
 * the three passes, so this is one trip to memory per row. */
#include "simd_math.h"
#include "x86_kernels.h"

void X86FN(nrv_layernorm)(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta,
                          float eps, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        float mean, rstd;
        v_row_stats(x + r * dim, dim, eps, &mean, &rstd);
        v_normalise_row(x + r * dim, dim, mean, rstd, gamma, beta, y + r * dim);
    }
}
