/* neon_kernels.h — the NEON variants (baseline AArch64 Advanced SIMD) that neon_table.c
 * offers to dispatch. Signatures and contracts are those of kernels.h: arguments arrive
 * validated, kernels never allocate, never fail, and keep stack use under 64 KiB. */
#ifndef NERVE_NEON_KERNELS_H
#define NERVE_NEON_KERNELS_H

#include "kernels.h"

/* embedding_neon.c */
void nrv_embedding_f32_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                            int ids_int64, int64_t n_ids, float *out);
void nrv_embedding_f16_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                            int ids_int64, int64_t n_ids, float *out);
void nrv_embedding_q8_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                           int ids_int64, int64_t n_ids, float *out);

/* layernorm_neon.c */
void nrv_layernorm_neon(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta,
                        float eps, float *y);

/* linear_neon.c */
void nrv_linear_neon(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                     float *y);
void nrv_layernorm_linear_neon(const float *x, int64_t rows, int64_t in, const float *gamma,
                               const float *beta, float eps, const float *w, const float *b, int64_t out,
                               float *y);

/* gemm_neon.c */
void nrv_gemm_neon(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void nrv_gemm_implicit_neon(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                            const int64_t *b_row_off, float *c, int64_t ldc);
void nrv_gemm_panels_neon(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow, int64_t pw,
                          const int64_t *k_off, const float *wp, const float *bias, float *y, int64_t ldy,
                          const nrv_panels_act *act, int pointwise);
void nrv_linear_panels_neon(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma,
                            const float *beta, float eps, const float *wp, int64_t m, const float *bias, float *y,
                            int64_t ldy);

/* activation_neon.c */
void nrv_relu_neon(const float *x, int64_t n, float *y);
void nrv_gelu_neon(const float *x, int64_t n, float *y);
void nrv_gelu_tanh_neon(const float *x, int64_t n, float *y);
void nrv_silu_neon(const float *x, int64_t n, float *y);
void nrv_hard_swish_neon(const float *x, int64_t n, float *y);
void nrv_sigmoid_neon(const float *x, int64_t n, float *y);
void nrv_tanh_neon(const float *x, int64_t n, float *y);
void nrv_softmax_neon(const float *x, int64_t rows, int64_t dim, float *y);
void nrv_depthwise_rows_neon(const nrv_dw_geom *g, int64_t c, const float *x, const float *w, const float *bias,
                             float *y);
void nrv_maxpool_neon(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y);
/* linear_attention_neon.c */
void nrv_linear_attention_neon(const nrv_la_problem *p, int64_t task);

#endif /* NERVE_NEON_KERNELS_H */
