/* gemm.c — scalar reference GEMM, C = alpha·op(A)·op(B) + beta·C. */
#include "kernels.h"

void nrv_gemm_ref(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float av = trans_a ? a[p * lda + i] : a[i * lda + p];
                const float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                acc += av * bv;
            }
            float *cij = &c[i * ldc + j];
            /* beta == 0 must not read C: it may hold NaN or be uninitialised. */
            *cij = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
        }
    }
}

void nrv_gemm_implicit_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           const int64_t *b_row_off, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) acc += a[i * lda + p] * b[b_row_off[p] + j];
            c[i * ldc + j] = acc;
        }
}
