/* plan_util.c — argument checks and the fused-activation helper shared by every plan op. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

nrv_status nrv_op_expect(const nrv_op_args *a, int n_in_min, int n_in_max, int n_out, int n_iattr, int n_fattr) {
    if (a->n_in < n_in_min || a->n_in > n_in_max)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d inputs, expected %d..%d", a->type, a->name,
                        a->n_in, n_in_min, n_in_max);
    if (n_out >= 0 && a->n_out != n_out)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d outputs, expected %d", a->type, a->name, a->n_out,
                        n_out);
    if (n_iattr >= 0 && a->n_iattr != n_iattr)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d integer attributes, expected %d", a->type,
                        a->name, a->n_iattr, n_iattr);
    if (n_fattr >= 0 && a->n_fattr != n_fattr)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d float attributes, expected %d", a->type, a->name,
                        a->n_fattr, n_fattr);
    for (int i = 0; i < a->n_out; i++)
        if (!a->out[i]) return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): output %d missing", a->type, a->name, i);
    return NRV_OK;
}

nrv_status nrv_op_require_input(const nrv_op_args *a, int i) {
    if (i >= a->n_in || !a->in[i])
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): input %d is required", a->type, a->name, i);
    return NRV_OK;
}

nrv_status nrv_op_expect_dtype(const nrv_op_args *a, const nrv_tview *v, const char *what, nrv_dtype dt) {
    if (v->dtype != (int32_t)dt)
        return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): %s is %s, expected %s", a->type, a->name, what,
                        nrv_dtype_str((nrv_dtype)v->dtype), nrv_dtype_str(dt));
    return NRV_OK;
}

/* A rank-1 f32 vector `what`; want >= 0: of want elements (check order and messages as
 * op_linalg.c's check_f32, check_rank and check_dim). */
static nrv_status check_f32_vec(const nrv_op_args *a, const nrv_tview *v, const char *what, int64_t want) {
    NRV_TRY(nrv_op_expect_dtype(a, v, what, NRV_F32));
    if (v->rank != 1)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s has rank %d, expected %d", a->type, a->name, what,
                        (int)v->rank, 1);
    if (want >= 0 && v->dims[0] != want)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s dim %d is %lld, expected %lld", a->type, a->name, what, 0,
                        (long long)v->dims[0], (long long)want);
    return NRV_OK;
}

nrv_status nrv_op_w8_operands(const nrv_op_args *a, int n_iattr, nrv_w8_operands *o) {
    NRV_TRY(nrv_op_expect(a, 3, 5, 1, n_iattr, 2));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    o->x = a->in[0];
    o->w = a->in[1];
    o->s = a->in[2];
    o->z = a->n_in > 3 ? a->in[3] : NULL;
    o->bias = a->n_in > 4 ? a->in[4] : NULL;
    o->y = a->out[0];
    return NRV_OK;
}

nrv_status nrv_op_int_operands(const nrv_op_args *a, int max_in, int n_iattr, int64_t n, int64_t packed_bytes,
                               nrv_int_operands *o) {
    NRV_TRY(nrv_op_expect(a, 2, max_in, 1, n_iattr, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "packed weight"));
    o->x = a->in[0];
    o->w = a->in[1];
    o->xz = a->n_in > 2 ? a->in[2] : NULL;
    o->wz = a->n_in > 3 ? a->in[3] : NULL;
    o->y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, o->y, "y"));
    if (o->x->dtype != NRV_U8 && o->x->dtype != NRV_I8)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s, expected u8 or i8", nrv_dtype_str(o->x->dtype));
    NRV_TRY(nrv_op_expect_dtype(a, o->w, "packed weight", NRV_I8));
    if (a->n_in <= 4) NRV_TRY(nrv_op_expect_dtype(a, o->y, "output", NRV_I32)); /* else requantized bytes */
    if (o->w->rank != 1 || o->w->dims[0] != packed_bytes)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "packed weight has %lld bytes, expected %lld", (long long)o->w->numel,
                           (long long)packed_bytes);
    if (o->xz) {
        NRV_TRY(nrv_op_check_in(a, 2, "x_zero_point"));
        NRV_TRY(nrv_op_expect_dtype(a, o->xz, "x_zero_point", o->x->dtype));
    }
    if (o->wz) {
        NRV_TRY(nrv_op_check_in(a, 3, "w_zero_point"));
        NRV_TRY(nrv_op_expect_dtype(a, o->wz, "w_zero_point", NRV_I32));
        if (o->wz->rank != 1 || o->wz->dims[0] != n)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "w_zero_point must be [%lld]", (long long)n);
    }
    return NRV_OK;
}

nrv_status nrv_op_code_zero_point(const nrv_op_args *a, int i, const char *what, nrv_dtype dtype, int32_t *z) {
    *z = 0;
    const nrv_tview *zp = a->n_in > i ? a->in[i] : NULL;
    if (!zp) return NRV_OK;
    NRV_TRY(nrv_op_check_in(a, i, what));
    NRV_TRY(nrv_op_expect_dtype(a, zp, what, dtype));
    if (zp->numel != 1)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "%s has %lld values, expected 1 (per tensor)", what, (long long)zp->numel);
    *z = dtype == NRV_I8 ? (int32_t) * (const int8_t *)zp->data : (int32_t) * (const uint8_t *)zp->data;
    return NRV_OK;
}

nrv_status nrv_op_requant_out(const nrv_op_args *a, int i_bias, int i_scale, int i_zp, const nrv_tview *y, int64_t C,
                              nrv_requant_out *rq) {
    NRV_TRY(nrv_op_check_in(a, i_scale, "scale"));
    const nrv_tview *bias = a->n_in > i_bias ? a->in[i_bias] : NULL, *sc = a->in[i_scale];
    NRV_TRY(nrv_op_expect_dtype(a, sc, "scale", NRV_F32));
    if (y->dtype != NRV_U8 && y->dtype != NRV_I8)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "y is %s, expected u8 or i8", nrv_dtype_str(y->dtype));
    if (sc->numel != C && sc->numel != 1)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "scale has %lld values, expected 1 or %lld", (long long)sc->numel,
                           (long long)C);
    const float *s = sc->data;
    for (int64_t c = 0; c < sc->numel; c++)
        if (!(s[c] > 0.0f) || !isfinite(s[c]))
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scale[%lld] is %g: must be finite and > 0", (long long)c,
                               (double)s[c]);
    if (bias) {
        NRV_TRY(nrv_op_check_in(a, i_bias, "bias"));
        NRV_TRY(nrv_op_expect_dtype(a, bias, "bias", NRV_I32));
        if (bias->numel != C)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "bias has %lld values, expected %lld", (long long)bias->numel,
                               (long long)C);
    }
    const int is_s8 = y->dtype == NRV_I8;
    int32_t z;
    NRV_TRY(nrv_op_code_zero_point(a, i_zp, "zero point", (nrv_dtype)y->dtype, &z));
    rq->bias = bias ? bias->data : NULL;
    rq->scale = s;
    rq->scale_stride = sc->numel == 1 ? 0 : 1;
    rq->lo = (float)((is_s8 ? -128 : 0) - z);
    rq->hi = (float)((is_s8 ? 127 : 255) - z);
    rq->z = z;
    return NRV_OK;
}

void nrv_dequantize_codes(const void *x, int dtype, int64_t n, float zd, float sd, float *y) {
    if (dtype == NRV_U8)
        for (int64_t i = 0; i < n; i++) y[i] = ((float)((const uint8_t *)x)[i] - zd) * sd;
    else
        for (int64_t i = 0; i < n; i++) y[i] = ((float)((const int8_t *)x)[i] - zd) * sd;
}

typedef struct requant_job {
    const nrv_requant_out *rq;
    const int32_t *x;
    int64_t C, inner;
    uint8_t *y;
} requant_job;

/* Planes [p0, p1) of `inner` values (plane p: channel p % C), or with inner == 1, rows
 * [p0, p1) of C channels. */
static void requant_range(void *ctx, int64_t p0, int64_t p1) {
    const requant_job *j = ctx;
    const nrv_requant_out *rq = j->rq;
    const int64_t C = j->C, inner = j->inner;
    if (inner == 1) { /* the channel axis last (a QLinearMatMul's columns): one call per row, not per
                         value (4.4 ns a value: Pipecat's smart-turn, 2.7 ms a [400, 1536] product) */
        const nrv_requant_channels_fn channels = nrv_kernel_get_implicit(NRV_OP_REQUANT).requant_channels;
        for (int64_t o = p0; o < p1; o++)
            channels(j->x + o * C, C, rq->bias, rq->scale, rq->scale_stride, rq->lo, rq->hi, rq->z, j->y + o * C);
        return;
    }
    const nrv_requant_fn requant = nrv_kernel_get(NRV_OP_REQUANT).requant;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t c = p % C;
        requant(j->x + p * inner, inner, rq->bias ? rq->bias[c] : 0, rq->scale[c * rq->scale_stride], rq->lo, rq->hi,
                rq->z, j->y + p * inner);
    }
}

void nrv_requant_planes(nrv_threadpool *pool, const nrv_requant_out *rq, const int32_t *x, int64_t outer, int64_t C,
                        int64_t inner, uint8_t *y) {
    requant_job j = {rq, x, C, inner, y};
    if (inner == 1) nrv_plan_for_rows(pool, outer, C, requant_range, &j);
    else nrv_plan_for_rows(pool, outer * C, inner, requant_range, &j);
}

nrv_status nrv_op_check_w8_params(const nrv_op_args *a, const nrv_tview *s, const nrv_tview *z, const nrv_tview *bias,
                                  int64_t n) {
    NRV_TRY(check_f32_vec(a, s, "s", -1));
    if (s->dims[0] != n && s->dims[0] != 1)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): s has %lld elements, expected %lld or 1", a->type, a->name,
                        (long long)s->dims[0], (long long)n);
    if (z) NRV_TRY(check_f32_vec(a, z, "z", s->dims[0]));
    if (bias) NRV_TRY(check_f32_vec(a, bias, "bias", n));
    return NRV_OK;
}

nrv_status nrv_op_expect_same_numel(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, const char *what) {
    if (x->numel != y->numel)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s: %lld elements vs %lld", a->type, a->name, what,
                        (long long)x->numel, (long long)y->numel);
    return NRV_OK;
}

nrv_status nrv_op_axis(const nrv_op_args *a, int64_t axis, int32_t rank, int32_t *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): axis %lld out of range for rank %d", a->type, a->name,
                        (long long)axis, (int)rank);
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return NRV_OK;
}

typedef float act_v4f __attribute__((vector_size(16)));
typedef int32_t act_v4i __attribute__((vector_size(16)));

void nrv_hard_swish(const float *x, float *y, int64_t n) { nrv_kernel_get(NRV_OP_HARD_SWISH).unary(x, n, y); }

void nrv_silu(const float *x, float *y, int64_t n) { nrv_kernel_get(NRV_OP_SILU).unary(x, n, y); }

void nrv_leaky_relu(const float *x, float *y, int64_t n, float alpha) {
    const act_v4f zero = {0.0f, 0.0f, 0.0f, 0.0f}, a = {alpha, alpha, alpha, alpha};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        act_v4f v;
        memcpy(&v, x + i, sizeof v);
        const act_v4i neg = v < zero; /* NaN and -0 keep their value, as in the scalar form */
        v = (act_v4f)(((act_v4i)(v * a) & neg) | ((act_v4i)v & ~neg));
        memcpy(y + i, &v, sizeof v);
    }
    for (; i < n; i++) y[i] = x[i] < 0.0f ? x[i] * alpha : x[i];
}

void nrv_clip(const float *x, float *y, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) { /* comparisons, not fmaxf/fminf (libm calls): GCC vectorises this */
        const float t = x[i] < lo ? lo : x[i];
        y[i] = t > hi ? hi : t;
    }
}

nrv_status nrv_plan_apply_act(const nrv_op_args *a, int64_t act, float p0, float p1, float *y, int64_t n) {
    switch (act) {
    case NRV_PLAN_ACT_NONE: return NRV_OK;
    case NRV_PLAN_ACT_RELU: nrv_kernel_get(NRV_OP_RELU).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_GELU: nrv_kernel_get(NRV_OP_GELU).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_SIGMOID: nrv_kernel_get(NRV_OP_SIGMOID).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_TANH: nrv_kernel_get(NRV_OP_TANH).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_GELU_TANH: nrv_kernel_get(NRV_OP_GELU_TANH).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_LEAKY_RELU: nrv_leaky_relu(y, y, n, p0); return NRV_OK;
    case NRV_PLAN_ACT_CLIP: nrv_clip(y, y, n, p0, p1); return NRV_OK;
    case NRV_PLAN_ACT_HARD_SWISH: nrv_hard_swish(y, y, n); return NRV_OK;
    case NRV_PLAN_ACT_SILU: nrv_silu(y, y, n); return NRV_OK;
    default:
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): unknown fused activation code %lld", a->type, a->name,
                        (long long)act);
    }
}

/* One pass of nrv_plan_epilogue with its options constants at each call (GCC specialises
 * and vectorises every combination); act_kind 0 none, 1 relu (as nrv_relu_ref), 2 clip (as
 * nrv_clip). */
static inline __attribute__((always_inline)) void epilogue_pass(int with_bias, int with_sum, int act_kind, float b,
                                                                const float *restrict sum, float p0, float p1,
                                                                float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float t = y[i];
        if (with_bias) t = t + b;
        if (with_sum) t = t + sum[i];
        if (act_kind == 1) t = t > 0.0f ? t : 0.0f;
        if (act_kind == 2) {
            t = t < p0 ? p0 : t;
            t = t > p1 ? p1 : t;
        }
        y[i] = t;
    }
}

nrv_status nrv_plan_epilogue(const nrv_op_args *a, int64_t act, float p0, float p1, const float *bias,
                             const float *sum, float *y, int64_t n) {
    const int kind = act == NRV_PLAN_ACT_RELU ? 1 : act == NRV_PLAN_ACT_CLIP ? 2 : 0;
    const float b = bias ? *bias : 0.0f;
#define EPI(B_, S_, K_) epilogue_pass(B_, S_, K_, b, sum, p0, p1, y, n)
    switch ((bias ? 6 : 0) + (sum ? 3 : 0) + kind) {
    case 0: break;
    case 1: EPI(0, 0, 1); break;
    case 2: EPI(0, 0, 2); break;
    case 3: EPI(0, 1, 0); break;
    case 4: EPI(0, 1, 1); break;
    case 5: EPI(0, 1, 2); break;
    case 6: EPI(1, 0, 0); break;
    case 7: EPI(1, 0, 1); break;
    case 8: EPI(1, 0, 2); break;
    case 9: EPI(1, 1, 0); break;
    case 10: EPI(1, 1, 1); break;
    default: EPI(1, 1, 2); break;
    }
#undef EPI
    return kind ? NRV_OK : nrv_plan_apply_act(a, act, p0, p1, y, n);
}

/* ---- view checks shared by the shape and reduce families */

/* "[2, 3, 4]" into buf (always terminated). */
const char *nrv_op_fmt_dims(char *buf, size_t size, const nrv_tview *v) {
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    used = n > 0 ? (size_t)n : 0;
    for (int d = 0; d < v->rank && d < NRV_PLAN_MAX_RANK && used < size; d++) {
        n = snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)v->dims[d]);
        if (n > 0) used += (size_t)n;
    }
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* A view the op is about to index: rank in range, known dtype, dims >= 0 whose product is
 * numel (and fits), data present when there is anything to read or write. */
nrv_status nrv_op_check_view(const nrv_op_args *a, const nrv_tview *v, const char *what) {
    if (!v) return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %s is missing", a->type, a->name, what);
    if (v->rank < 0 || v->rank > NRV_PLAN_MAX_RANK)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %s has rank %d (0..%d allowed)", a->type, a->name, what, (int)v->rank,
                      NRV_PLAN_MAX_RANK);
    const size_t esz = nrv_dtype_size((nrv_dtype)v->dtype);
    if (esz == 0) return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): %s has unknown dtype %d", a->type, a->name, what, (int)v->dtype);
    uint64_t p = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->dims[d] < 0)
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s dim %d is negative (%lld)", a->type, a->name, what, d, (long long)v->dims[d]);
        if (nrv_mul_overflow(p, (uint64_t)v->dims[d], &p) || p > (uint64_t)INT64_MAX / esz)
            return nrv_fail(NRV_ERR_OVERFLOW, "%s (node '%s'): %s: element count overflows", a->type, a->name, what);
    }
    if ((int64_t)p != v->numel) {
        char b[128];
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s: numel %lld does not match dims %s", a->type, a->name, what, (long long)v->numel,
                      nrv_op_fmt_dims(b, sizeof b, v));
    }
    if (v->numel > 0 && !v->data) return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %s has no data", a->type, a->name, what);
    return NRV_OK;
}

nrv_status nrv_op_check_in(const nrv_op_args *a, int i, const char *what) {
    NRV_TRY(nrv_op_require_input(a, i));
    return nrv_op_check_view(a, a->in[i], what);
}

nrv_status nrv_op_same_dims(const nrv_op_args *a, const nrv_tview *v, const char *what, const nrv_tview *ref,
                            const char *ref_what) {
    int ok = v->rank == ref->rank;
    for (int d = 0; ok && d < v->rank; d++) ok = v->dims[d] == ref->dims[d];
    if (!ok) {
        char b1[128], b2[128];
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s dims %s differ from %s dims %s", a->type, a->name, what, nrv_op_fmt_dims(b1, sizeof b1, v),
                      ref_what, nrv_op_fmt_dims(b2, sizeof b2, ref));
    }
    return NRV_OK;
}

nrv_status nrv_op_fail(const nrv_op_args *a, nrv_status st, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nrv_fail(st, "%s (node '%s'): %s", a->type, a->name, msg);
}

nrv_status nrv_op_index_dtype(const nrv_op_args *a, const nrv_tview *ind) {
    if (ind->dtype != NRV_I64 && ind->dtype != NRV_I32)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "indices are %s, expected i64 or i32", nrv_dtype_str((nrv_dtype)ind->dtype));
    return NRV_OK;
}

nrv_status nrv_op_gather_operands(const nrv_op_args *a, const nrv_tview **data, const nrv_tview **ind,
                                  nrv_tview **y) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "data"));
    NRV_TRY(nrv_op_check_in(a, 1, "indices"));
    NRV_TRY(nrv_op_check_view(a, a->out[0], "y"));
    NRV_TRY(nrv_op_index_dtype(a, a->in[1]));
    *data = a->in[0], *ind = a->in[1], *y = a->out[0];
    return NRV_OK;
}

nrv_status nrv_op_check_indices(const nrv_op_args *a, const nrv_tview *ind, int64_t dim, const char *where) {
    for (int64_t i = 0; i < ind->numel; i++) {
        const int64_t v = nrv_index_at(ind, i);
        if (v < -dim || v >= dim)
            return nrv_op_fail(a, NRV_ERR_INDEX, "indices[%lld] = %lld is outside [%lld, %lld) (%s)", (long long)i,
                               (long long)v, (long long)-dim, (long long)dim, where);
    }
    return NRV_OK;
}

nrv_status nrv_op_spatial_rank(const nrv_op_args *a, int fixed, int per_axis, int64_t *sr) {
    if (a->n_iattr < 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "no integer attributes, expected %d + %d*sr", fixed, per_axis);
    *sr = a->iattr[0];
    if (*sr != 1 && *sr != 2)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%lld spatial axes, expected 1 or 2", (long long)*sr);
    if (a->n_iattr != fixed + per_axis * *sr)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d integer attributes, expected %lld", a->n_iattr,
                           (long long)(fixed + per_axis * *sr));
    return NRV_OK;
}

nrv_status nrv_op_conv_operands(const nrv_op_args *a, int64_t sr, int w_rank, const nrv_tview **x,
                                const nrv_tview **w, const nrv_tview **b, nrv_tview **y) {
    NRV_TRY(nrv_op_check_in(a, 0, "input x"));
    NRV_TRY(nrv_op_check_in(a, 1, "weight"));
    *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL, *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, *y, "output"));
    NRV_TRY(nrv_op_expect_dtype(a, *x, "input x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, *w, "weight", NRV_F32));
    if (*b) NRV_TRY(nrv_op_expect_dtype(a, *b, "bias", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, *y, "output", NRV_F32));
    const int rank = (int)(2 + sr);
    if ((*x)->rank != rank || (*w)->rank != w_rank || (*y)->rank != rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "ranks x %d, w %d, y %d; expected %d, %d, %d for %lld spatial axes",
                           (int)(*x)->rank, (int)(*w)->rank, (int)(*y)->rank, rank, w_rank, rank, (long long)sr);
    return NRV_OK;
}

typedef struct rows_job {
    nrv_rows_fn fn;
    void *ctx;
    int64_t rows, pieces;
} rows_job;

static void rows_task(void *ctx, int64_t t) {
    const rows_job *j = ctx;
    const int64_t r0 = t * j->rows / j->pieces, r1 = (t + 1) * j->rows / j->pieces;
    if (r1 > r0) j->fn(j->ctx, r0, r1);
}

void nrv_plan_for_rows(nrv_threadpool *pool, int64_t rows, int64_t row_elems, nrv_rows_fn fn, void *ctx) {
    const int64_t n = rows * row_elems, units = n / NRV_PLAN_PIECE_MIN_ELEMS;
    const int64_t pieces = nrv_plan_pieces(pool, n, 2 * NRV_PLAN_PIECE_MIN_ELEMS, rows < units ? rows : units);
    if (pieces <= 1) {
        if (rows > 0) fn(ctx, 0, rows);
        return;
    }
    rows_job j = {fn, ctx, rows, pieces};
    nrv_parallel_for(pool, pieces, rows_task, &j);
}
