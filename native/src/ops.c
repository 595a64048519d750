/* ops.c — public kernel entry points: validate every argument once, then call the
 * kernel the dispatch table chose. Kernels trust what arrives here (kernels.h). */
#include <math.h>

#include "internal.h"
#include "kernels.h"

static nrv_status check_eps(const char *fn, float eps) {
    if (!(eps >= 0.0f) || isinf(eps))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: eps must be finite and >= 0, got %g", fn, (double)eps);
    return NRV_OK;
}

nrv_status nrv_check_embedding_args(const char *fn, nrv_dtype table_dtype, int64_t rows, int64_t dim,
                                    const float *row_scales, nrv_dtype id_dtype, int64_t n_ids) {
    if (table_dtype != NRV_F32 && table_dtype != NRV_F16 && table_dtype != NRV_I8)
        return nrv_fail(NRV_ERR_DTYPE, "%s: table dtype %s not supported (f32, f16 or i8 with row scales)", fn,
                        nrv_dtype_str(table_dtype));
    if (id_dtype != NRV_I32 && id_dtype != NRV_I64)
        return nrv_fail(NRV_ERR_DTYPE, "%s: ids dtype %s not supported (i32 or i64)", fn, nrv_dtype_str(id_dtype));
    if (table_dtype == NRV_I8 && !row_scales)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: an i8 table needs row_scales", fn);
    if (table_dtype != NRV_I8 && row_scales)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: row_scales given for a %s table (only i8 tables take them)", fn,
                        nrv_dtype_str(table_dtype));
    NRV_TRY(nrv_check_matrix(fn, "table", rows, dim, nrv_dtype_size(table_dtype)));
    return nrv_check_matrix(fn, "out", n_ids, dim, sizeof(float));
}

nrv_status nrv_embedding(const void *table, nrv_dtype table_dtype, int64_t rows, int64_t dim,
                         const float *row_scales, const void *ids, nrv_dtype id_dtype, int64_t n_ids,
                         float *out) {
    static const char fn[] = "nrv_embedding";
    NRV_TRY(nrv_check_embedding_args(fn, table_dtype, rows, dim, row_scales, id_dtype, n_ids));
    const nrv_op op = table_dtype == NRV_F32 ? NRV_OP_EMBEDDING_F32
                    : table_dtype == NRV_F16 ? NRV_OP_EMBEDDING_F16
                                             : NRV_OP_EMBEDDING_Q8;
    if (n_ids == 0 || dim == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, ids);
    NRV_REQUIRE_PTR(fn, out);
    if (rows == 0)
        return nrv_fail(NRV_ERR_INDEX, "%s: id[0] = %lld out of range: the table is empty", fn,
                        (long long)nrv_id_at(ids, id_dtype == NRV_I64, 0));
    NRV_REQUIRE_PTR(fn, table);
    /* Every id is checked before a single byte of out is written. */
    const int ids64 = id_dtype == NRV_I64;
    for (int64_t i = 0; i < n_ids; i++) {
        const int64_t id = nrv_id_at(ids, ids64, i);
        if (id < 0 || id >= rows)
            return nrv_fail(NRV_ERR_INDEX, "%s: id[%lld] = %lld out of range [0, %lld)", fn, (long long)i,
                            (long long)id, (long long)rows);
    }
    nrv_kernel_get(op).embedding(table, row_scales, dim, ids, ids64, n_ids, out);
    return NRV_OK;
}

nrv_status nrv_layernorm(const float *x, int64_t rows, int64_t dim, const float *gamma, const float *beta,
                         float eps, float *y) {
    static const char fn[] = "nrv_layernorm";
    NRV_TRY(nrv_check_matrix(fn, "x", rows, dim, sizeof(float)));
    NRV_TRY(check_eps(fn, eps));
    if (rows == 0 || dim == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, gamma);
    NRV_REQUIRE_PTR(fn, y);
    nrv_kernel_get(NRV_OP_LAYERNORM).layernorm(x, rows, dim, gamma, beta, eps, y);
    return NRV_OK;
}

static nrv_status check_linear_shapes(const char *fn, int64_t rows, int64_t in, int64_t out) {
    NRV_TRY(nrv_check_matrix(fn, "x", rows, in, sizeof(float)));
    NRV_TRY(nrv_check_matrix(fn, "w", out, in, sizeof(float)));
    NRV_TRY(nrv_check_matrix(fn, "y", rows, out, sizeof(float)));
    return NRV_OK;
}

/* A product over an empty input width is all zeros: y is just the bias. */
static void fill_bias_rows(int64_t rows, int64_t out, const float *b, float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) y[r * out + o] = b ? b[o] : 0.0f;
}

nrv_status nrv_linear(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                      float *y) {
    static const char fn[] = "nrv_linear";
    NRV_TRY(check_linear_shapes(fn, rows, in, out));
    if (rows == 0 || out == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, y);
    if (in == 0) {
        fill_bias_rows(rows, out, b, y);
        return NRV_OK;
    }
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, w);
    nrv_kernel_get(NRV_OP_LINEAR).linear(x, rows, in, w, b, out, y);
    return NRV_OK;
}

nrv_status nrv_check_layernorm_linear_args(const char *fn, int64_t rows, int64_t in, int64_t out, float eps,
                                          size_t elem_size) {
    NRV_TRY(nrv_check_matrix(fn, "x", rows, in, elem_size));
    NRV_TRY(nrv_check_matrix(fn, "w", out, in, sizeof(float)));
    NRV_TRY(nrv_check_matrix(fn, "y", rows, out, elem_size));
    NRV_TRY(check_eps(fn, eps));
    if (rows > 0 && out > 0 && in == 0) return nrv_fail(NRV_ERR_SHAPE, "%s: cannot normalise rows of width 0", fn);
    return NRV_OK;
}

nrv_status nrv_layernorm_linear(const float *x, int64_t rows, int64_t in, const float *gamma, const float *beta,
                                float eps, const float *w, const float *b, int64_t out, float *y) {
    static const char fn[] = "nrv_layernorm_linear";
    NRV_TRY(nrv_check_layernorm_linear_args(fn, rows, in, out, eps, sizeof(float)));
    if (rows == 0 || out == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, gamma);
    NRV_REQUIRE_PTR(fn, w);
    NRV_REQUIRE_PTR(fn, y);
    nrv_kernel_get(NRV_OP_LAYERNORM_LINEAR).layernorm_linear(x, rows, in, gamma, beta, eps, w, b, out, y);
    return NRV_OK;
}

/* A stored matrix of `rows` rows with row stride ld must have ld >= cols. */
static nrv_status check_strided(const char *fn, const char *what, int64_t rows, int64_t cols, int64_t ld) {
    if (ld < (cols > 1 ? cols : 1))
        return nrv_fail(NRV_ERR_SHAPE, "%s: leading dimension of %s is %lld, needs >= %lld", fn, what,
                        (long long)ld, (long long)cols);
    return nrv_check_matrix(fn, what, rows, ld, sizeof(float));
}

nrv_status nrv_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    static const char fn[] = "nrv_gemm";
    if (m < 0 || n < 0 || k < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: negative size m=%lld n=%lld k=%lld", fn, (long long)m,
                        (long long)n, (long long)k);
    if (m == 0 || n == 0) return NRV_OK;
    NRV_TRY(check_strided(fn, "C", m, n, ldc));
    NRV_REQUIRE_PTR(fn, c);
    if (k > 0) {
        NRV_TRY(trans_a ? check_strided(fn, "A", k, m, lda) : check_strided(fn, "A", m, k, lda));
        NRV_TRY(trans_b ? check_strided(fn, "B", n, k, ldb) : check_strided(fn, "B", k, n, ldb));
        NRV_REQUIRE_PTR(fn, a);
        NRV_REQUIRE_PTR(fn, b);
    }
    nrv_kernel_get(NRV_OP_GEMM).gemm(trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return NRV_OK;
}

nrv_status nrv_activate(nrv_activation act, const float *x, int64_t n, float *y) {
    static const char fn[] = "nrv_activate";
    nrv_op op;
    switch (act) {
    case NRV_ACT_RELU: op = NRV_OP_RELU; break;
    case NRV_ACT_GELU: op = NRV_OP_GELU; break;
    case NRV_ACT_SIGMOID: op = NRV_OP_SIGMOID; break;
    case NRV_ACT_TANH: op = NRV_OP_TANH; break;
    case NRV_ACT_GELU_TANH: op = NRV_OP_GELU_TANH; break;
    default: return nrv_fail(NRV_ERR_INVALID_ARG, "%s: unknown activation %d", fn, (int)act);
    }
    NRV_TRY(nrv_check_extent(fn, "x", n, sizeof(float)));
    if (n == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, y);
    nrv_kernel_get(op).unary(x, n, y);
    return NRV_OK;
}

nrv_status nrv_softmax(const float *x, int64_t rows, int64_t dim, float *y) {
    static const char fn[] = "nrv_softmax";
    NRV_TRY(nrv_check_matrix(fn, "x", rows, dim, sizeof(float)));
    if (rows == 0 || dim == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, y);
    nrv_kernel_get(NRV_OP_SOFTMAX).softmax(x, rows, dim, y);
    return NRV_OK;
}
