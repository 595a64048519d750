/* op_elementwise.c — unary and broadcasting binary ops of compiled plans (contract: plan_ops.h).
 *
 * Binary ops broadcast numpy-style. Before looping, the runtime shapes are collapsed: the
 * operands are right-aligned, adjacent axes that broadcast the same way are merged, so the
 * common cases (same shape, a scalar, a row vector, a column vector) become one or two flat
 * loops whose inner body has unit or zero strides and vectorises.
 */
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

/* ------------------------------------------------------------------ unary */

typedef enum unary_code {
    U_NEG = 0, U_ABS, U_EXP, U_LOG, U_SQRT, U_SIN, U_COS, U_ERF, U_TANH, U_SIGMOID,
    U_RELU, U_GELU, U_GELU_TANH, U_LEAKY_RELU, U_HARD_SIGMOID, U_CLIP, U_RECIPROCAL,
    U_FLOOR, U_CEIL, U_NOT, U_IDENTITY, U_SOFTPLUS, U_SIGN, U_ROUND, U_SQUARE,
    /* activations with parameters in (p0, p1), as ONNX defines them */
    U_HARD_SWISH, U_ELU, U_SELU, U_CELU, U_SOFTSIGN, U_MISH, U_THRESHOLDED_RELU, U_SHRINK,
    U_TAN, U_ATAN, U_ASIN, U_ACOS, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH,
    U_SILU, /* x · sigmoid(x): made by the compiler's fuse_silu, not an ONNX op */
    U_BITNOT, /* ~x, integers only (ONNX BitwiseNot) */
    U_COUNT
} unary_code;

/* min(max(v, 0), 1) by comparisons (a NaN gives 1, as fmaxf(0, fminf(1, NaN)) does): GCC
 * turns fmaxf/fminf into a libm call per element, ~10x slower than this. */
static inline float clamp01(float v) {
    const float w = v < 1.0f ? v : 1.0f;
    return w > 0.0f ? w : 0.0f;
}

static nrv_status unary_f32(const nrv_op_args *a, int64_t code, float p0, float p1, const float *x, float *y,
                            int64_t n) {
    switch (code) {
    /* The dispatch-table kernels (vectorised) where there is one. */
    case U_TANH: nrv_kernel_get(NRV_OP_TANH).unary(x, n, y); break;
    case U_SIGMOID: nrv_kernel_get(NRV_OP_SIGMOID).unary(x, n, y); break;
    case U_RELU: nrv_kernel_get(NRV_OP_RELU).unary(x, n, y); break;
    case U_GELU: nrv_kernel_get(NRV_OP_GELU).unary(x, n, y); break;
    case U_GELU_TANH: nrv_kernel_get(NRV_OP_GELU_TANH).unary(x, n, y); break;
    case U_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
    case U_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case U_EXP: for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case U_LOG: for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]); break;
    case U_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
    case U_SIN: for (int64_t i = 0; i < n; i++) y[i] = sinf(x[i]); break;
    case U_COS: for (int64_t i = 0; i < n; i++) y[i] = cosf(x[i]); break;
    case U_ERF: for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]); break;
    case U_LEAKY_RELU: nrv_leaky_relu(x, y, n, p0); break;
    case U_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = clamp01(p0 * x[i] + p1);
        break;
    case U_CLIP: nrv_clip(x, y, n, p0, p1); break; /* NaN passes through, as in onnxruntime */
    case U_RECIPROCAL: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / x[i]; break;
    case U_FLOOR: for (int64_t i = 0; i < n; i++) y[i] = floorf(x[i]); break;
    case U_CEIL: for (int64_t i = 0; i < n; i++) y[i] = ceilf(x[i]); break;
    case U_IDENTITY: if (y != x) memmove(y, x, (size_t)n * sizeof(float)); break;
    case U_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        break;
    case U_SIGN: for (int64_t i = 0; i < n; i++) y[i] = (float)((x[i] > 0.0f) - (x[i] < 0.0f)); break;
    case U_ROUND: for (int64_t i = 0; i < n; i++) y[i] = nearbyintf(x[i]); break; /* half to even */
    case U_SQUARE: for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i]; break;
    case U_HARD_SWISH: /* x · HardSigmoid(x; 1/6, 1/2) */
        nrv_hard_swish(x, y, n);
        break;
    case U_SILU: nrv_silu(x, y, n); break;
    case U_ELU: /* alpha = p0 */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? p0 * expm1f(x[i]) : x[i];
        break;
    case U_SELU: /* alpha = p0, gamma = p1 */
        for (int64_t i = 0; i < n; i++) y[i] = p1 * (x[i] <= 0.0f ? p0 * expm1f(x[i]) : x[i]);
        break;
    case U_CELU: /* alpha = p0 (> 0) */
        for (int64_t i = 0; i < n; i++) {
            const float neg = p0 * expm1f(x[i] / p0);
            y[i] = (x[i] > 0.0f ? x[i] : 0.0f) + (neg < 0.0f ? neg : 0.0f);
        }
        break;
    case U_SOFTSIGN: for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + fabsf(x[i])); break;
    case U_MISH: /* x · tanh(softplus(x)) */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * tanhf(x[i] > 20.0f ? x[i] : log1pf(expf(x[i])));
        break;
    case U_THRESHOLDED_RELU: /* alpha = p0 */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > p0 ? x[i] : 0.0f;
        break;
    case U_SHRINK: /* lambd = p0, bias = p1 */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < -p0 ? x[i] + p1 : (x[i] > p0 ? x[i] - p1 : 0.0f);
        break;
    case U_TAN: for (int64_t i = 0; i < n; i++) y[i] = tanf(x[i]); break;
    case U_ATAN: for (int64_t i = 0; i < n; i++) y[i] = atanf(x[i]); break;
    case U_ASIN: for (int64_t i = 0; i < n; i++) y[i] = asinf(x[i]); break;
    case U_ACOS: for (int64_t i = 0; i < n; i++) y[i] = acosf(x[i]); break;
    case U_SINH: for (int64_t i = 0; i < n; i++) y[i] = sinhf(x[i]); break;
    case U_COSH: for (int64_t i = 0; i < n; i++) y[i] = coshf(x[i]); break;
    case U_ASINH: for (int64_t i = 0; i < n; i++) y[i] = asinhf(x[i]); break;
    case U_ACOSH: for (int64_t i = 0; i < n; i++) y[i] = acoshf(x[i]); break;
    case U_ATANH: for (int64_t i = 0; i < n; i++) y[i] = atanhf(x[i]); break;
    default:
        return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): unary code %lld is not defined for f32", a->type, a->name,
                        (long long)code);
    }
    return NRV_OK;
}

#define DEFINE_UNARY_INT(T, NAME)                                                                         \
    static nrv_status NAME(const nrv_op_args *a, int64_t code, const T *x, T *y, int64_t n) {            \
        switch (code) {                                                                                   \
        case U_NEG: for (int64_t i = 0; i < n; i++) y[i] = (T)(0 - x[i]); break;                          \
        case U_ABS: for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? (T)(0 - x[i]) : x[i]; break;       \
        case U_SIGN: for (int64_t i = 0; i < n; i++) y[i] = (T)((x[i] > 0) - (x[i] < 0)); break;         \
        case U_SQUARE: for (int64_t i = 0; i < n; i++) y[i] = (T)(x[i] * x[i]); break;                   \
        case U_IDENTITY: if (y != x) memmove(y, x, (size_t)n * sizeof(T)); break;                         \
        case U_RELU: for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i]; break;                  \
        case U_BITNOT: for (int64_t i = 0; i < n; i++) y[i] = (T)~x[i]; break;                            \
        default:                                                                                          \
            return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): unary code %lld is not defined for %s", a->type, \
                            a->name, (long long)code, #T);                                                \
        }                                                                                                 \
        return NRV_OK;                                                                                    \
    }
DEFINE_UNARY_INT(int64_t, unary_i64)
DEFINE_UNARY_INT(int32_t, unary_i32)
DEFINE_UNARY_INT(int8_t, unary_i8)

/* uint8: no sign, so only the codes that need none. */
static nrv_status unary_u8(const nrv_op_args *a, int64_t code, const uint8_t *x, uint8_t *y, int64_t n) {
    switch (code) {
    case U_BITNOT: for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)~x[i]; break;
    case U_IDENTITY: if (y != x) memmove(y, x, (size_t)n); break;
    default:
        return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): unary code %lld is not defined for u8", a->type, a->name,
                        (long long)code);
    }
    return NRV_OK;
}

/* Float unary ops shared out in ranges of elements (the code checked by the caller). */
typedef struct unary_job {
    const nrv_op_args *a;
    int64_t code;
    const float *x;
    float *y;
} unary_job;

static void unary_range(void *ctx, int64_t i0, int64_t i1) {
    const unary_job *j = ctx;
    (void)unary_f32(j->a, j->code, j->a->fattr[0], j->a->fattr[1], j->x + i0, j->y + i0, i1 - i0);
}

/* "unary": in[0] x, out[0] y, same dtype and numel (in place ok).
 * iattr [code]; fattr [p0, p1] (LEAKY_RELU: alpha; HARD_SIGMOID: alpha, beta; CLIP: min, max).
 * Codes (unary_code above): 0 neg, 1 abs, 2 exp, 3 log, 4 sqrt, 5 sin, 6 cos, 7 erf, 8 tanh,
 * 9 sigmoid, 10 relu, 11 gelu, 12 gelu_tanh, 13 leaky_relu, 14 hard_sigmoid, 15 clip,
 * 16 reciprocal, 17 floor, 18 ceil, 19 not, 20 identity, 21 softplus, 22 sign, 23 round,
 * 24 square, 25-42 (unary_code), 43 bitwise not. dtypes: f32 all but not and bitwise not;
 * i64/i32/i8 neg, abs, sign, square, identity, relu, bitwise not; u8 identity, bitwise not;
 * bool not, identity. */
static nrv_status run_unary(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 1, 2));
    NRV_TRY(nrv_op_require_input(a, 0));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", (nrv_dtype)x->dtype));
    NRV_TRY(nrv_op_expect_same_numel(a, x, y, "input and output"));
    const int64_t code = a->iattr[0], n = x->numel;
    if (n == 0) return NRV_OK;
    switch (x->dtype) {
    case NRV_F32: {
        NRV_TRY(unary_f32(a, code, a->fattr[0], a->fattr[1], x->data, y->data, 0)); /* the code is valid */
        unary_job j = {a, code, x->data, y->data};
        nrv_plan_for_rows(a->pool, n, 1, unary_range, &j);
        return NRV_OK;
    }
    case NRV_I64: return unary_i64(a, code, x->data, y->data, n);
    case NRV_I32: return unary_i32(a, code, x->data, y->data, n);
    case NRV_I8: return unary_i8(a, code, x->data, y->data, n);
    case NRV_U8: return unary_u8(a, code, x->data, y->data, n);
    case NRV_BOOL: {
        const uint8_t *xb = x->data;
        uint8_t *yb = y->data;
        if (code == U_NOT) {
            for (int64_t i = 0; i < n; i++) yb[i] = !xb[i];
            return NRV_OK;
        }
        if (code == U_IDENTITY) {
            if (yb != xb) memmove(yb, xb, (size_t)n);
            return NRV_OK;
        }
        break;
    }
    default: break;
    }
    return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): unary code %lld is not defined for %s", a->type, a->name,
                    (long long)code, nrv_dtype_str((nrv_dtype)x->dtype));
}

/* ------------------------------------------------------------------ binary, broadcasting */

typedef enum binary_code {
    B_ADD = 0, B_SUB, B_MUL, B_DIV, B_POW, B_MIN, B_MAX, B_MOD, B_FMOD,
    B_EQUAL, B_LESS, B_GREATER, B_LESS_EQUAL, B_GREATER_EQUAL, B_AND, B_OR, B_XOR,
    B_BIT_AND, B_BIT_OR, B_BIT_XOR, B_SHIFT_LEFT, B_SHIFT_RIGHT, /* integers only */
    B_COUNT
} binary_code;

static int is_comparison(int64_t code) { return code >= B_EQUAL && code <= B_GREATER_EQUAL; }
static int is_logical(int64_t code) { return code >= B_AND && code <= B_XOR; }

/* A broadcast loop nest: up to NRV_PLAN_MAX_RANK collapsed axes, outermost first; element
 * strides of a and b per axis (0 where that operand broadcasts). */
typedef struct bcast {
    int rank;
    int64_t dims[NRV_PLAN_MAX_RANK];
    int64_t sa[NRV_PLAN_MAX_RANK], sb[NRV_PLAN_MAX_RANK];
} bcast;

/* Fills bc from the operands' dims and the output's; fails unless every axis of a and b is
 * 1 or the output's extent. Axes are merged while both operands keep the same "broadcasts
 * or not" pattern, so [4,5]+[4,5] is one axis of 20 and [4,5]+[5] is 4 × 5 with sa=(5,1),
 * sb=(0,1). */
static nrv_status bcast_plan(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, const nrv_tview *z,
                             bcast *bc) {
    const int r = z->rank;
    if (x->rank > r || y->rank > r)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): operand ranks %d, %d exceed the output's %d", a->type,
                        a->name, x->rank, y->rank, r);
    int64_t da[NRV_PLAN_MAX_RANK], db[NRV_PLAN_MAX_RANK];
    for (int i = 0; i < r; i++) {
        const int ia = i - (r - x->rank), ib = i - (r - y->rank);
        da[i] = ia >= 0 ? x->dims[ia] : 1;
        db[i] = ib >= 0 ? y->dims[ib] : 1;
        if ((da[i] != 1 && da[i] != z->dims[i]) || (db[i] != 1 && db[i] != z->dims[i]))
            return nrv_fail(NRV_ERR_SHAPE,
                            "%s (node '%s'): axis %d: operands of extent %lld and %lld do not broadcast to %lld",
                            a->type, a->name, i, (long long)da[i], (long long)db[i], (long long)z->dims[i]);
    }
    /* Merge from the innermost axis outwards; skip output extents of 1. */
    int n = 0;
    int64_t dims[NRV_PLAN_MAX_RANK];
    int pa[NRV_PLAN_MAX_RANK], pb[NRV_PLAN_MAX_RANK]; /* 1 = operand spans the axis */
    for (int i = r - 1; i >= 0; i--) {
        if (z->dims[i] == 1) continue;
        const int ha = da[i] != 1, hb = db[i] != 1;
        if (n > 0 && pa[n - 1] == ha && pb[n - 1] == hb) {
            dims[n - 1] *= z->dims[i];
        } else {
            dims[n] = z->dims[i];
            pa[n] = ha;
            pb[n] = hb;
            n++;
        }
    }
    if (n == 0) {
        dims[0] = 1;
        pa[0] = pb[0] = 1;
        n = 1;
    }
    /* Reverse into outermost-first order, computing element strides. */
    int64_t stride_a = 1, stride_b = 1;
    bc->rank = n;
    for (int k = 0; k < n; k++) {
        const int o = n - 1 - k;
        bc->dims[o] = dims[k];
        bc->sa[o] = pa[k] ? stride_a : 0;
        bc->sb[o] = pb[k] ? stride_b : 0;
        if (pa[k]) stride_a *= dims[k];
        if (pb[k]) stride_b *= dims[k];
    }
    return NRV_OK;
}

typedef void (*inner_fn)(const void *pa, int64_t sa, const void *pb, int64_t sb, void *pz, int64_t n);

/* Walks outer rows [o0, o1) of bc (an odometer over the outer axes) calling inner on the
 * innermost axis. Element sizes of a/b (ea) and z (ez) in bytes. */
static void bcast_rows(const bcast *bc, const void *a, const void *b, void *z, size_t ea, size_t ez, inner_fn inner,
                       int64_t o0, int64_t o1) {
    const int last = bc->rank - 1;
    const int64_t n = bc->dims[last];
    int64_t idx[NRV_PLAN_MAX_RANK] = {0};
    const char *pa = a, *pb = b;
    char *pz = (char *)z + (size_t)(o0 * n) * ez;
    for (int64_t ax = last - 1, rest = o0; ax >= 0; ax--) { /* the odometer at row o0 */
        idx[ax] = rest % bc->dims[ax];
        rest /= bc->dims[ax];
        pa += (ptrdiff_t)(idx[ax] * bc->sa[ax] * (int64_t)ea);
        pb += (ptrdiff_t)(idx[ax] * bc->sb[ax] * (int64_t)ea);
    }
    for (int64_t o = o0; o < o1; o++) {
        inner(pa, bc->sa[last], pb, bc->sb[last], pz, n);
        pz += (size_t)n * ez;
        /* advance the odometer over axes [0, last) */
        for (int ax = last - 1; ax >= 0; ax--) {
            pa += (ptrdiff_t)(bc->sa[ax] * (int64_t)ea);
            pb += (ptrdiff_t)(bc->sb[ax] * (int64_t)ea);
            if (++idx[ax] < bc->dims[ax]) break;
            pa -= (ptrdiff_t)(bc->sa[ax] * bc->dims[ax] * (int64_t)ea);
            pb -= (ptrdiff_t)(bc->sb[ax] * bc->dims[ax] * (int64_t)ea);
            idx[ax] = 0;
        }
    }
}

/* Shared out (nrv_plan_for_rows): outer rows in ranges, or with one outer row, the innermost
 * axis in ranges. */
typedef struct bcast_job {
    const bcast *bc;
    const void *a, *b;
    void *z;
    size_t ea, ez;
    inner_fn inner;
    int64_t outer;
} bcast_job;

static void bcast_range(void *ctx, int64_t i0, int64_t i1) {
    const bcast_job *j = ctx;
    if (j->outer > 1) {
        bcast_rows(j->bc, j->a, j->b, j->z, j->ea, j->ez, j->inner, i0, i1);
        return;
    }
    const int last = j->bc->rank - 1;
    j->inner((const char *)j->a + (size_t)(i0 * j->bc->sa[last]) * j->ea, j->bc->sa[last],
             (const char *)j->b + (size_t)(i0 * j->bc->sb[last]) * j->ea, j->bc->sb[last],
             (char *)j->z + (size_t)i0 * j->ez, i1 - i0);
}

static void bcast_run(const bcast *bc, const void *a, const void *b, void *z, size_t ea, size_t ez, inner_fn inner,
                      int64_t numel, nrv_threadpool *pool) {
    int64_t outer = 1;
    for (int i = 0; i < bc->rank - 1; i++) outer *= bc->dims[i];
    bcast_job j = {bc, a, b, z, ea, ez, inner, outer};
    if (outer > 1) nrv_plan_for_rows(pool, outer, numel / outer, bcast_range, &j);
    else nrv_plan_for_rows(pool, numel, 1, bcast_range, &j);
}

/* Min / Max with a NaN in giving a NaN out, written as two selects (the second on x alone:
 * y NaN already fails the comparison), the one form of this GCC vectorises: a sum under
 * the NaN test, or a test of both operands, kept a branch per element (Max(x, -0.4) on
 * 57K floats: 41 us, against 5.6 for Add). Ties give y, as before. */
static inline float nrv_max_nan(float x, float y) {
    const float m = x > y ? x : y;
    return x != x ? x : m;
}
static inline float nrv_min_nan(float x, float y) {
    const float m = x < y ? x : y;
    return x != x ? x : m;
}

/* One inner loop per (code, dtype): z[i] = EXPR(x = a[i*sa], y = b[i*sb]) with sa, sb in
 * {0, 1}, specialised so the compiler vectorises the three stride shapes separately. */
#define LOOP(N, TA, TZ, EXPR)                                                               \
    static void N(const void *va, int64_t sa, const void *vb, int64_t sb, void *vz, int64_t n) { \
        const TA *restrict pa = va, *restrict pb = vb;                                      \
        TZ *restrict pz = vz;                                                               \
        if (sa == 1 && sb == 1) {                                                           \
            for (int64_t i = 0; i < n; i++) { const TA x = pa[i], y = pb[i]; pz[i] = (TZ)(EXPR); } \
        } else if (sa == 1) {                                                               \
            const TA y = pb[0];                                                             \
            for (int64_t i = 0; i < n; i++) { const TA x = pa[i]; pz[i] = (TZ)(EXPR); }    \
        } else if (sb == 1) {                                                               \
            const TA x = pa[0];                                                             \
            for (int64_t i = 0; i < n; i++) { const TA y = pb[i]; pz[i] = (TZ)(EXPR); }    \
        } else {                                                                            \
            const TA x = pa[0], y = pb[0];                                                  \
            const TZ v = (TZ)(EXPR);                                                        \
            for (int64_t i = 0; i < n; i++) pz[i] = v;                                      \
        }                                                                                   \
    }
#define LOOP_T(T, N, E) LOOP(N, T, T, E)
#define LOOP_C(T, N, E) LOOP(N, T, uint8_t, E)

/* One inner loop per (code, dtype). Float pow keeps the common squares exact and fast. */
LOOP(f32_add, float, float, x + y)
LOOP(f32_sub, float, float, x - y)
LOOP(f32_mul, float, float, x * y)
LOOP(f32_div, float, float, x / y)
LOOP(f32_pow, float, float, y == 2.0f ? x * x : powf(x, y))
LOOP(f32_min, float, float, nrv_min_nan(x, y))
LOOP(f32_max, float, float, nrv_max_nan(x, y))
LOOP(f32_fmod, float, float, fmodf(x, y))
LOOP(f32_mod, float, float, (fmodf(x, y) != 0.0f && ((fmodf(x, y) < 0.0f) != (y < 0.0f))) ? fmodf(x, y) + y : fmodf(x, y))
LOOP(f32_eq, float, uint8_t, x == y)
LOOP(f32_lt, float, uint8_t, x < y)
LOOP(f32_gt, float, uint8_t, x > y)
LOOP(f32_le, float, uint8_t, x <= y)
LOOP(f32_ge, float, uint8_t, x >= y)

/* Integer add/sub/mul wrap (two's complement, computed unsigned: no UB), MIN / -1 wraps instead of trapping; division and modulo are checked for zero divisors by the caller (div_by_zero). */
#define INT_FAMILY(T, U, P)                                                               \
    LOOP_T(T, P##_add, (U)x + (U)y)                                                      \
    LOOP_T(T, P##_sub, (U)x - (U)y)                                                      \
    LOOP_T(T, P##_mul, (U)x * (U)y)                                                      \
    LOOP_T(T, P##_div, y == -1 ? (T)(0 - (U)x) : x / y)                                                      \
    LOOP_T(T, P##_min, x < y ? x : y)                                              \
    LOOP_T(T, P##_max, x > y ? x : y)                                              \
    LOOP_T(T, P##_fmod, y == -1 ? 0 : x % y)                                                     \
    LOOP_T(T, P##_mod, y == -1 ? 0 : ((x % y != 0 && ((x % y < 0) != (y < 0))) ? x % y + y : x % y)) \
    LOOP_C(T, P##_eq, x == y)                                                      \
    LOOP_C(T, P##_lt, x < y)                                                       \
    LOOP_C(T, P##_gt, x > y)                                                       \
    LOOP_C(T, P##_le, x <= y)                                                      \
    LOOP_C(T, P##_ge, x >= y)                                                      \
    LOOP_T(T, P##_band, x & y)                                                     \
    LOOP_T(T, P##_bor, x | y)                                                      \
    LOOP_T(T, P##_bxor, x ^ y)                                                     \
    LOOP_T(T, P##_shl, (y < 0 || y >= (T)(8 * sizeof(T))) ? 0 : (U)x << y)        \
    LOOP_T(T, P##_shr, (y < 0 || y >= (T)(8 * sizeof(T))) ? (x < 0 ? -1 : 0) : (x < 0 ? ~(~x >> y) : x >> y))
/* Shifts (ONNX BitShift, opset 28 for signed types): left shifts wrap, right shifts of signed
 * values are arithmetic (written without right-shifting a negative number, which C leaves to
 * the implementation); a negative shift or one of the width or more gives 0, or -1 for a
 * negative value shifted right. */
INT_FAMILY(int64_t, uint64_t, i64)
INT_FAMILY(int32_t, uint32_t, i32)
INT_FAMILY(int8_t, uint8_t, i8)
/* uint8: add/sub/mul wrap modulo 256 (computed in unsigned int, then truncated); no sign. */
LOOP_T(uint8_t, u8_add, (unsigned)x + (unsigned)y)
LOOP_T(uint8_t, u8_sub, (unsigned)x - (unsigned)y)
LOOP_T(uint8_t, u8_mul, (unsigned)x * (unsigned)y)
LOOP_T(uint8_t, u8_div, x / y)
LOOP_T(uint8_t, u8_min, x < y ? x : y)
LOOP_T(uint8_t, u8_max, x > y ? x : y)
LOOP_T(uint8_t, u8_mod, x % y)
LOOP_C(uint8_t, u8_lt, x < y)
LOOP_C(uint8_t, u8_gt, x > y)
LOOP_C(uint8_t, u8_le, x <= y)
LOOP_C(uint8_t, u8_ge, x >= y)
LOOP_T(uint8_t, u8_band, x & y)
LOOP_T(uint8_t, u8_bor, x | y)
LOOP_T(uint8_t, u8_bxor, x ^ y)
LOOP_T(uint8_t, u8_shl, y >= 8 ? 0 : (unsigned)x << y)
LOOP_T(uint8_t, u8_shr, y >= 8 ? 0 : x >> y)
LOOP(u8_eq, uint8_t, uint8_t, x == y)
LOOP(u8_and, uint8_t, uint8_t, x && y)
LOOP(u8_or, uint8_t, uint8_t, x || y)
LOOP(u8_xor, uint8_t, uint8_t, (x != 0) != (y != 0))

#define F(fn) fn
static inner_fn pick_inner(int64_t code, int32_t dtype) {
    if (dtype == NRV_F32) {
        static const inner_fn t[B_COUNT] = {
            [B_ADD] = F(f32_add), [B_SUB] = F(f32_sub), [B_MUL] = F(f32_mul), [B_DIV] = F(f32_div),
            [B_POW] = F(f32_pow), [B_MIN] = F(f32_min), [B_MAX] = F(f32_max), [B_MOD] = F(f32_mod),
            [B_FMOD] = F(f32_fmod), [B_EQUAL] = F(f32_eq), [B_LESS] = F(f32_lt), [B_GREATER] = F(f32_gt),
            [B_LESS_EQUAL] = F(f32_le), [B_GREATER_EQUAL] = F(f32_ge)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    if (dtype == NRV_I64) {
        static const inner_fn t[B_COUNT] = {
            [B_ADD] = F(i64_add), [B_SUB] = F(i64_sub), [B_MUL] = F(i64_mul), [B_DIV] = F(i64_div),
            [B_MIN] = F(i64_min), [B_MAX] = F(i64_max), [B_MOD] = F(i64_mod), [B_FMOD] = F(i64_fmod),
            [B_EQUAL] = F(i64_eq), [B_LESS] = F(i64_lt), [B_GREATER] = F(i64_gt), [B_LESS_EQUAL] = F(i64_le),
            [B_GREATER_EQUAL] = F(i64_ge), [B_BIT_AND] = F(i64_band), [B_BIT_OR] = F(i64_bor),
            [B_BIT_XOR] = F(i64_bxor), [B_SHIFT_LEFT] = F(i64_shl), [B_SHIFT_RIGHT] = F(i64_shr)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    if (dtype == NRV_I32) {
        static const inner_fn t[B_COUNT] = {
            [B_ADD] = F(i32_add), [B_SUB] = F(i32_sub), [B_MUL] = F(i32_mul), [B_DIV] = F(i32_div),
            [B_MIN] = F(i32_min), [B_MAX] = F(i32_max), [B_MOD] = F(i32_mod), [B_FMOD] = F(i32_fmod),
            [B_EQUAL] = F(i32_eq), [B_LESS] = F(i32_lt), [B_GREATER] = F(i32_gt), [B_LESS_EQUAL] = F(i32_le),
            [B_GREATER_EQUAL] = F(i32_ge), [B_BIT_AND] = F(i32_band), [B_BIT_OR] = F(i32_bor),
            [B_BIT_XOR] = F(i32_bxor), [B_SHIFT_LEFT] = F(i32_shl), [B_SHIFT_RIGHT] = F(i32_shr)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    if (dtype == NRV_I8) {
        static const inner_fn t[B_COUNT] = {
            [B_ADD] = F(i8_add), [B_SUB] = F(i8_sub), [B_MUL] = F(i8_mul), [B_DIV] = F(i8_div),
            [B_MIN] = F(i8_min), [B_MAX] = F(i8_max), [B_MOD] = F(i8_mod), [B_FMOD] = F(i8_fmod),
            [B_EQUAL] = F(i8_eq), [B_LESS] = F(i8_lt), [B_GREATER] = F(i8_gt), [B_LESS_EQUAL] = F(i8_le),
            [B_GREATER_EQUAL] = F(i8_ge), [B_BIT_AND] = F(i8_band), [B_BIT_OR] = F(i8_bor),
            [B_BIT_XOR] = F(i8_bxor), [B_SHIFT_LEFT] = F(i8_shl), [B_SHIFT_RIGHT] = F(i8_shr)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    if (dtype == NRV_U8) { /* mod and fmod agree without signs */
        static const inner_fn t[B_COUNT] = {
            [B_ADD] = F(u8_add), [B_SUB] = F(u8_sub), [B_MUL] = F(u8_mul), [B_DIV] = F(u8_div),
            [B_MIN] = F(u8_min), [B_MAX] = F(u8_max), [B_MOD] = F(u8_mod), [B_FMOD] = F(u8_mod),
            [B_EQUAL] = F(u8_eq), [B_LESS] = F(u8_lt), [B_GREATER] = F(u8_gt), [B_LESS_EQUAL] = F(u8_le),
            [B_GREATER_EQUAL] = F(u8_ge), [B_BIT_AND] = F(u8_band), [B_BIT_OR] = F(u8_bor),
            [B_BIT_XOR] = F(u8_bxor), [B_SHIFT_LEFT] = F(u8_shl), [B_SHIFT_RIGHT] = F(u8_shr)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    if (dtype == NRV_BOOL) {
        static const inner_fn t[B_COUNT] = {
            [B_EQUAL] = F(u8_eq), [B_AND] = F(u8_and), [B_OR] = F(u8_or), [B_XOR] = F(u8_xor)};
        return code >= 0 && code < B_COUNT ? t[code] : NULL;
    }
    return NULL;
}
#undef F

/* Integer division by zero is undefined behaviour in C: refuse it, naming the position. */
static nrv_status check_int_divisor(const nrv_op_args *a, const nrv_tview *b) {
    for (int64_t i = 0; i < b->numel; i++)
        if (nrv_int_at(b, i) == 0)
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): integer division by zero (divisor element %lld)",
                            a->type, a->name, (long long)i);
    return NRV_OK;
}

/* "binary": in[0] a, in[1] b (same dtype), out[0] z with numpy broadcasting of a and b to
 * z's dims. iattr [code]: 0 add, 1 sub, 2 mul, 3 div, 4 pow, 5 min, 6 max, 7 mod (sign of
 * the divisor, ONNX fmod=0), 8 fmod (sign of the dividend, fmod=1), 9 equal, 10 less,
 * 11 greater, 12 less_equal, 13 greater_equal, 14 and, 15 or, 16 xor, 17 bitwise and,
 * 18 bitwise or, 19 bitwise xor, 20 shift left, 21 shift right. dtypes: f32 (arithmetic 0-8
 * and comparisons), i64, i32, i8 and u8 (all but pow and the logical 14-16; add/sub/mul
 * wrap), bool (equal, and, or, xor).
 * Comparisons and logic give bool; the rest give a's dtype. z may equal a or b when that
 * operand has z's shape (in place ok). Integer div/mod by zero is refused. */
static nrv_status run_binary(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 1, 0));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *x = a->in[0], *y = a->in[1];
    nrv_tview *z = a->out[0];
    const int64_t code = a->iattr[0];
    NRV_TRY(nrv_op_expect_dtype(a, y, "second operand", (nrv_dtype)x->dtype));
    const nrv_dtype zt = (is_comparison(code) || is_logical(code)) ? NRV_BOOL : (nrv_dtype)x->dtype;
    NRV_TRY(nrv_op_expect_dtype(a, z, "output", zt));
    const inner_fn inner = pick_inner(code, x->dtype);
    if (!inner)
        return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): binary code %lld is not defined for %s", a->type, a->name,
                        (long long)code, nrv_dtype_str((nrv_dtype)x->dtype));
    bcast bc = {0};
    NRV_TRY(bcast_plan(a, x, y, z, &bc));
    if (z->numel == 0) return NRV_OK;
    if (x->dtype != NRV_F32 && (code == B_DIV || code == B_MOD || code == B_FMOD))
        NRV_TRY(check_int_divisor(a, y));
    const size_t ea = nrv_dtype_size((nrv_dtype)x->dtype), ez = nrv_dtype_size(zt);
    bcast_run(&bc, x->data, y->data, z->data, ea, ez, inner, z->numel, a->pool);
    return NRV_OK;
}

/* "fake_quant": a per-tensor QuantizeLinear then DequantizeLinear (or DynamicQuantizeLinear
 * into ConvInteger's Cast and Sub) in one pass, each step the float arithmetic of the
 * unfused ops (the compiler's fuse_fake_quant), so the result is bit-identical:
 *   q = round_half_even(x / s) + zq, saturated to [lo, hi] as Cast does (truncation; NaN -> 0)
 *   y = ((float)q - zd) · sd
 *   in[0] x f32; in[1] s, in[2] zq (optional), in[3] zd (optional), in[4] sd (optional): f32
 *   with one element each (absent: 0, 0, 1); out[0] y f32 shaped as x — or y u8/i8 (the
 *   integer type of the range): q itself, a QuantizeLinear alone (then no zd, sd).
 *   iattr [lo, hi]: the integer type's range, (0, 255) or (-128, 127).
 *   fattr (optional, 2): [zx, sx], x itself codes (u8 or i8) dequantized first, as the
 *   dequantizing cast does it: ((float)x − zx)·sx. One requantization of codes from x's
 *   scale to y's, byte in, byte out (a QLinearConcat's inputs; the compiler's
 *   requantize_concat), the bits of that cast and the float ops after it.
 * The dispatch kernel "quantize" does the pass (kernels.h nrv_quantize_fn; its steps in
 * kernels/quantize_impl.h, the same bits at every vector width). */
#define FAKE_QUANT_BLOCK 1024 /* codes dequantized onto the stack per kernel call */
typedef struct fake_quant_job {
    const nrv_tview *x, *y;
    const nrv_quant_params *qp;
    int codes_in;
    float zx, sx; /* x's codes dequantized first (codes_in) */
} fake_quant_job;

/* Elements [i0, i1): each on its own, so any range gives the same values. */
static void fake_quant_range(void *ctx, int64_t i0, int64_t i1) {
    const fake_quant_job *j = ctx;
    const nrv_quantize_fn quantize = nrv_kernel_get(NRV_OP_QUANTIZE).quantize;
    const size_t ex = nrv_dtype_size((nrv_dtype)j->x->dtype), ey = nrv_dtype_size((nrv_dtype)j->y->dtype);
    if (!j->codes_in) {
        quantize((const float *)j->x->data + i0, i1 - i0, j->qp, (char *)j->y->data + (size_t)i0 * ey);
        return;
    }
    /* codes dequantized onto the stack a block at a time (the dequantizing cast's steps),
     * then the same kernel: measured 0.5 ns an element through a 256-entry table (a scalar
     * lookup a byte), ~0.25 through the block (the kernel and this widening vectorise) */
    float block[FAKE_QUANT_BLOCK];
    for (int64_t b0 = i0; b0 < i1; b0 += FAKE_QUANT_BLOCK) {
        const int64_t n = i1 - b0 < FAKE_QUANT_BLOCK ? i1 - b0 : FAKE_QUANT_BLOCK;
        nrv_dequantize_codes((const char *)j->x->data + (size_t)b0 * ex, j->x->dtype, n, j->zx, j->sx, block);
        quantize(block, n, j->qp, (char *)j->y->data + (size_t)b0 * ey);
    }
}

static nrv_status run_fake_quant(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 5, 1, 2, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    if (a->n_fattr != 0 && a->n_fattr != 2)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d float attributes, expected none or 2 (zx, sx)", a->n_fattr);
    const int codes_in = a->n_fattr == 2;
    if (codes_in && x->dtype != NRV_U8 && x->dtype != NRV_I8)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s, expected u8 or i8 codes (with zx, sx)",
                           nrv_dtype_str(x->dtype));
    if (!codes_in) NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_same_numel(a, x, y, "x vs y"));
    const int to_int = y->dtype != NRV_F32; /* q itself: the integer type of the range */
    static const char *const names[] = {"x", "scale", "zero point", "dequantizing zero point", "dequantizing scale"};
    float p[5] = {0.0f, 1.0f, 0.0f, 0.0f, 1.0f};
    for (int i = 1; i < a->n_in; i++) {
        if (!a->in[i]) continue;
        NRV_TRY(nrv_op_check_in(a, i, names[i]));
        NRV_TRY(nrv_op_expect_dtype(a, a->in[i], names[i], NRV_F32));
        if (a->in[i]->numel != 1)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "%s has %lld elements, expected 1 (per tensor)", names[i],
                               (long long)a->in[i]->numel);
        p[i] = *(const float *)a->in[i]->data;
    }
    const int64_t lo = a->iattr[0], hi = a->iattr[1];
    if (!((lo == 0 && hi == 255) || (lo == -128 && hi == 127)))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "range [%lld, %lld] is neither uint8's nor int8's", (long long)lo,
                           (long long)hi);
    if (to_int) {
        if (y->dtype != (lo == 0 ? NRV_U8 : NRV_I8))
            return nrv_op_fail(a, NRV_ERR_DTYPE, "y is %s, expected %s (the range's type) or f32",
                               nrv_dtype_str(y->dtype), lo == 0 ? "u8" : "i8");
        if (a->n_in > 3 && (a->in[3] || (a->n_in > 4 && a->in[4])))
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "an integer y takes no dequantizing zero point or scale");
    }
    const nrv_quant_params qp = {p[1], p[2], p[3], p[4], (int32_t)lo, (int32_t)hi, to_int};
    fake_quant_job j = {x, y, &qp, codes_in, codes_in ? a->fattr[0] : 0.0f, codes_in ? a->fattr[1] : 0.0f};
    nrv_plan_for_rows(a->pool, x->numel, 1, fake_quant_range, &j);
    return NRV_OK;
}
#undef FAKE_QUANT_BLOCK

/* "requantize": the int32 sums of an integer product back to u8/s8, as onnxruntime's
 * QLinearConv / QLinearMatMul do it (MlasRequantizeOutput), per channel c:
 *   y = round_half_even(clamp((float)(x + bias[c]) · scale[c], lo − zp, hi − zp)) + zp
 * (the int32 sum wraps like the hardware's; the dispatch kernel "requant", kernels.h).
 *   in[0] x i32, rank >= 1; in[1] bias i32 [C], optional; in[2] scale f32 [C] or [1], each
 *   finite and > 0; in[3] zp, y's dtype, one value, optional (absent: 0); out[0] y u8 or i8
 *   shaped as x.
 *   iattr [axis]: the channel axis of x that bias and scale run along (C = dims[axis]). */
static nrv_status run_requantize(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 4, 1, 1, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_I32));
    NRV_TRY(nrv_op_expect_same_numel(a, x, y, "x vs y"));
    int32_t axis;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &axis));
    const int64_t C = x->dims[axis], inner = nrv_dims_product(x->dims, axis + 1, x->rank);
    nrv_requant_out rq;
    NRV_TRY(nrv_op_requant_out(a, 1, 2, 3, y, C, &rq));
    if (x->numel == 0) return NRV_OK;
    nrv_requant_planes(a->pool, &rq, x->data, x->numel / (C * inner), C, inner, y->data);
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_elementwise[] = {
    {"unary", run_unary, NULL},
    {"binary", run_binary, NULL},
    {"fake_quant", run_fake_quant, "quantize"},
    {"requantize", run_requantize, "requant"},
    {NULL, NULL, NULL},
};
