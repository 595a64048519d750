/* gemm.c — scalar reference GEMM, C = alpha·op(A)·op(B) + beta·C. */
#include <math.h>
#include <string.h>

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

void nrv_panels_pack(const float *w, int64_t m, int64_t k, float *out) {
    for (int64_t t = 0; t * NRV_PANEL_COLS < m; t++) {
        const int64_t width = nrv_panel_width(m, t), j0 = t * NRV_PANEL_COLS;
        float *panel = out + j0 * k;
        for (int64_t p = 0; p < k; p++)
            for (int64_t jj = 0; jj < width; jj++) panel[p * width + jj] = j0 + jj < m ? w[(j0 + jj) * k + p] : 0.0f;
    }
}

void nrv_panels_pack_t(const float *wt, int64_t m, int64_t k, int64_t ldwt, float *out) {
    for (int64_t t = 0; t * NRV_PANEL_COLS < m; t++) {
        const int64_t width = nrv_panel_width(m, t), j0 = t * NRV_PANEL_COLS;
        const int64_t cols = m - j0 < width ? m - j0 : width;
        float *panel = out + j0 * k;
        for (int64_t p = 0; p < k; p++) {
            memcpy(panel + p * width, wt + p * ldwt + j0, (size_t)cols * sizeof(float));
            memset(panel + p * width + cols, 0, (size_t)(width - cols) * sizeof(float));
        }
    }
}

void nrv_gemm_panels_ref(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow, int64_t pw,
                         const int64_t *k_off, const float *wp, const float *bias, float *y, int64_t ldy,
                         const nrv_panels_act *act, int pointwise) {
    (void)pointwise; /* one sum over all of k, as the reference GEMMs */
    for (int64_t i = 0; i < np; i++) {
        const int64_t q = q0 + i;
        const float *base = x + q / ow * pw + q % ow;
        for (int64_t j = 0; j < m; j++) {
            const int64_t t = j / NRV_PANEL_COLS, width = nrv_panel_width(m, t);
            const float *col = wp + t * NRV_PANEL_COLS * k + (j - t * NRV_PANEL_COLS);
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) acc += base[k_off[p]] * col[p * width];
            y[j * ldy + i] = nrv_panels_act_apply(act, (bias ? bias[j] : 0.0f) + acc);
        }
    }
}

void nrv_linear_panels_ref(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma, const float *beta,
                           float eps, const float *wp, int64_t m, const float *bias, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float mean = 0.0f, rstd = 1.0f;
        if (gamma && k > 0) { /* as nrv_layernorm_linear_ref */
            float sum = 0.0f, var = 0.0f;
            for (int64_t p = 0; p < k; p++) sum += xr[p];
            mean = sum / (float)k;
            for (int64_t p = 0; p < k; p++) var += (xr[p] - mean) * (xr[p] - mean);
            rstd = 1.0f / sqrtf(var / (float)k + eps);
        }
        for (int64_t j = 0; j < m; j++) {
            const int64_t t = j / NRV_PANEL_COLS, width = nrv_panel_width(m, t);
            const float *col = wp + t * NRV_PANEL_COLS * k + (j - t * NRV_PANEL_COLS);
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float v = gamma ? (xr[p] - mean) * rstd * gamma[p] + (beta ? beta[p] : 0.0f) : xr[p];
                acc += v * col[p * width];
            }
            y[r * ldy + j] = (bias ? bias[j] : 0.0f) + acc;
        }
    }
}
