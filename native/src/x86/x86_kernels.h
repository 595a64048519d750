/* x86_kernels.h — the AVX2 and AVX-512 kernel variants (defined in the files of this
 * directory ending _avx2.c and _avx512.c, listed as dispatch candidates in x86_table.c)
 * and the blocked GEMM driver that gemm, linear and layernorm_linear share within one ISA.
 *
 * Layout: each op family is written once against a small vector vocabulary in a
 * *_impl.h template (simd_avx2.h: 8 lanes, simd_avx512.h: 16 lanes, simd_math.h: exp,
 * tanh, erf, sigmoid, row statistics) and instantiated by a two-line *_avx2.c / *_avx512.c
 * file, which CMake builds with that ISA's flags. The tuning constants in the templates
 * are #ifndef-guarded only so a tuning harness can compile variants of them side by side
 * with -D; the library build never overrides them. */
#ifndef NRV_X86_KERNELS_H
#define NRV_X86_KERNELS_H

#include "kernels.h"

/* One blocked GEMM call: C = alpha · op(A) · op(B) + beta · C (+ bias[j] on every row),
 * optionally layer-normalising each row of A on the fly (ln_gamma non-NULL: A is x of
 * [m, k], rows normalised with ln_gamma/ln_beta/ln_eps while being packed; trans_a must
 * be 0). beta == 0 never reads C. Stack use is bounded (< 48 KiB), no heap. */
typedef struct nrv_x86_gemm_args {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float beta;
    float *c;
    int64_t ldc;
    const float *bias;     /* [n], may be NULL */
    const float *ln_gamma; /* [k]: normalise rows of A (NULL: plain GEMM) */
    const float *ln_beta;  /* [k], may be NULL */
    float ln_eps;
    const int64_t *b_row_off; /* implicit GEMM: B(p, j) = b[b_row_off[p] + j] (ldb, trans_b unused) */
} nrv_x86_gemm_args;

/* Ops with variants in both ISAs (AVX-512 measured faster, see x86_table.c). */
#define NRV_X86_DECLARE_COMPUTE(isa)                                                                         \
    void nrv_layernorm_##isa(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta, \
                             float eps, float *y);                                                          \
    void nrv_linear_##isa(const float *x, int64_t rows, int64_t in, const float *w, const float *b,         \
                          int64_t out, float *y);                                                           \
    void nrv_layernorm_linear_##isa(const float *x, int64_t rows, int64_t in, const float *gamma,            \
                                    const float *beta, float eps, const float *w, const float *b,           \
                                    int64_t out, float *y);                                                 \
    void nrv_gemm_##isa(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,               \
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,     \
                        int64_t ldc);                                                                       \
    void nrv_x86_gemm_driver_##isa(const nrv_x86_gemm_args *args);                                          \
    void nrv_gemm_implicit_##isa(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, \
                                 const int64_t *b_row_off, float *c, int64_t ldc);                           \
    void nrv_gemm_panels_##isa(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow,       \
                               int64_t pw, const int64_t *k_off, const float *wp, const float *bias, float *y, \
                               int64_t ldy, const nrv_panels_act *act, int pointwise);                       \
    void nrv_linear_panels_##isa(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma,     \
                                 const float *beta, float eps, const float *wp, int64_t m, const float *bias,  \
                                 float *y, int64_t ldy);                                                     \
    void nrv_depthwise_##isa(const float *plane, int64_t row_step, int64_t oh, int64_t ow,                     \
                             const int64_t *tap_off, int64_t taps, const float *w, float bias, float *y);   \
    void nrv_depthwise_channels_##isa(const nrv_dw_geom *g, int64_t c, const float *x, const float *w,        \
                                      const float *bias, float *y);                                          \
    void nrv_depthwise_rows_##isa(const nrv_dw_geom *g, int64_t c, const float *x, const float *w,            \
                                  const float *bias, float *y);                                              \
    void nrv_gelu_##isa(const float *x, int64_t n, float *y);                                               \
    void nrv_gelu_tanh_##isa(const float *x, int64_t n, float *y);                                          \
    void nrv_sigmoid_##isa(const float *x, int64_t n, float *y);                                            \
    void nrv_silu_##isa(const float *x, int64_t n, float *y);                                               \
    void nrv_hard_swish_##isa(const float *x, int64_t n, float *y);                                         \
    void nrv_tanh_##isa(const float *x, int64_t n, float *y);                                               \
    void nrv_softmax_##isa(const float *x, int64_t rows, int64_t dim, float *y);                            \
    void nrv_maxpool_##isa(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y);          \
    void nrv_linear_attention_##isa(const nrv_la_problem *p, int64_t task);

NRV_X86_DECLARE_COMPUTE(avx2)
NRV_X86_DECLARE_COMPUTE(avx512)

/* Memory-bound ops: AVX2 only (AVX-512 measured no faster). */
/* Whether the CPU is an AMD Zen 4 or later (cpuid vendor and family/model; cpu.c): tunings
 * that differ by core (embedding_impl.h's prefetch) read it. */
int nrv_cpu_is_amd_zen4_or_later(void);

void nrv_embedding_f32_avx2(const void *table, const float *row_scales, int64_t dim, const void *ids, int ids_int64,
                            int64_t n_ids, float *out);
void nrv_embedding_f16_avx2(const void *table, const float *row_scales, int64_t dim, const void *ids, int ids_int64,
                            int64_t n_ids, float *out);
void nrv_embedding_q8_avx2(const void *table, const float *row_scales, int64_t dim, const void *ids, int ids_int64,
                           int64_t n_ids, float *out);
void nrv_relu_avx2(const float *x, int64_t n, float *y);

#if defined(__AVX__)
#include <immintrin.h>

/* 8x8 transpose of floats in eight 256-bit registers (AVX, available in both ISAs; shared by
 * the GEMM packing and the mid-rows linear path). */
static inline void nrv_x86_transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif /* __AVX__ */

#endif /* NRV_X86_KERNELS_H */
