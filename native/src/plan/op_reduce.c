/* op_reduce.c — plan ops of the reduce family (see plan_ops.h for the contract): reduce
 * (sum, mean, max, min, prod, sum_square, l2, log_sum_exp over a set of axes), argmax /
 * argmin, softmax / log_softmax over one axis, and layernorm over trailing axes.
 *
 * Reductions see x as alternating groups of kept and reduced axes (extent-1 axes dropped,
 * neighbours of the same kind merged). When the innermost group is reduced, each output is
 * a contiguous run reduced in one pass (plus any outer reduced groups); when it is kept, rows
 * of contiguous outputs are accumulated together, a stack block of them at a time.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

#define OPFAIL(a, code, fmt, ...) \
    nrv_fail((code), "%s (node '%s'): " fmt, (a)->type, (a)->name, __VA_ARGS__)

#define BLOCK 256 /* outputs accumulated together when the innermost axis is kept */

/* ------------------------------------------------------------------ shared checks */





/* ------------------------------------------------------------------ axis groups */

typedef struct grp_list {
    int n;
    int64_t cnt[NRV_PLAN_MAX_RANK];
    int64_t st[NRV_PLAN_MAX_RANK]; /* element stride in x */
} grp_list;

static void grp_add(grp_list *g, int64_t cnt, int64_t st) {
    g->cnt[g->n] = cnt;
    g->st[g->n] = st;
    g->n++;
}

/* Odometer over every position of g (a list with no axes has one position): advances
 * idx / off and returns 1, or returns 0 after the last position. */
static int grp_next(const grp_list *g, int64_t *idx, int64_t *off) {
    for (int d = g->n - 1; d >= 0; d--) {
        if (++idx[d] < g->cnt[d]) {
            *off += g->st[d];
            return 1;
        }
        idx[d] = 0;
        *off -= g->st[d] * (g->cnt[d] - 1);
    }
    return 0;
}

/* ------------------------------------------------------------------ reduce */

enum {
    R_SUM = 0,
    R_MEAN = 1,
    R_MAX = 2,
    R_MIN = 3,
    R_PROD = 4,
    R_SUMSQ = 5,
    R_L2 = 6,
    R_LSE = 7,
    R_KINDS = 8
};

static const char *const kind_names[R_KINDS] = {"sum", "mean",       "max", "min",
                                                "prod", "sum_square", "l2",  "log_sum_exp"};

/* f32 accumulators are doubles: a (sum, max, min, product; the running max for
 * log_sum_exp) and s (log_sum_exp's sum of exp(v - a)). */
static double f_init(int kind) {
    switch (kind) {
    case R_MAX: return -INFINITY;
    case R_MIN: return INFINITY;
    case R_PROD: return 1.0;
    case R_LSE: return -INFINITY;
    default: return 0.0;
    }
}

static inline double f_fin(int kind, double acc, double s, int64_t count) {
    switch (kind) {
    case R_MEAN: return acc / (double)count; /* empty: 0 / 0 = NaN */
    case R_L2: return sqrt(acc);
    case R_LSE: return acc + log(s);         /* empty: -inf + log 0 = -inf */
    default: return acc;
    }
}

/* Online log-sum-exp: (m, s) represents m + log(s). */
static inline void lse_step(double v, double *m, double *s) {
    if (v > *m) {
        *s = *s * exp(*m - v) + 1.0;
        *m = v;
    } else if (v == *m) {
        *s += 1.0;
    } else {
        *s += exp(v - *m); /* NaN propagates into s */
    }
}

typedef float red_v4f __attribute__((vector_size(16)));
typedef int32_t red_v4i __attribute__((vector_size(16)));

/* max (want_max) or min of x[0..n), n >= 8, in float (exact: a comparison rounds nothing),
 * 8 lanes at a time with GCC vector extensions (SSE / NEON); *nan: some x is NaN. The
 * scalar loop carried one compare-and-branch per element on r: dynamic quantization's
 * whole-tensor min and max (two per layer) cost ddddocr's int8 model 14% of its time. */
static float extreme_f32(const float *x, int64_t n, int want_max, int *nan) {
    red_v4f m0, m1;
    memcpy(&m0, x, sizeof m0);
    memcpy(&m1, x + 4, sizeof m1);
    red_v4i bad = (m0 != m0) | (m1 != m1);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
        red_v4f a, b;
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, x + i + 4, sizeof b);
        bad |= (a != a) | (b != b);
        const red_v4i ta = want_max ? a > m0 : a < m0, tb = want_max ? b > m1 : b < m1;
        m0 = (red_v4f)(((red_v4i)a & ta) | ((red_v4i)m0 & ~ta));
        m1 = (red_v4f)(((red_v4i)b & tb) | ((red_v4i)m1 & ~tb));
    }
    float r = m0[0];
    for (int k = 0; k < 4; k++) {
        if (want_max ? m0[k] > r : m0[k] < r) r = m0[k];
        if (want_max ? m1[k] > r : m1[k] < r) r = m1[k];
    }
    int any = bad[0] | bad[1] | bad[2] | bad[3];
    for (; i < n; i++) {
        if (x[i] != x[i]) any = 1;
        else if (want_max ? x[i] > r : x[i] < r) r = x[i];
    }
    *nan = any;
    return r;
}

/* Folds n contiguous values into (*acc, *s). max / min propagate NaN. */
static void f_run(int kind, const float *x, int64_t n, double *acc, double *s) {
    double r = *acc;
    switch (kind) {
    case R_SUM:
    case R_MEAN:
    case R_SUMSQ:
    case R_L2: {
        const int sq = kind == R_SUMSQ || kind == R_L2;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        int64_t i = 0;
        if (sq) {
            for (; i + 4 <= n; i += 4) {
                const double v0 = x[i], v1 = x[i + 1], v2 = x[i + 2], v3 = x[i + 3];
                s0 += v0 * v0;
                s1 += v1 * v1;
                s2 += v2 * v2;
                s3 += v3 * v3;
            }
            for (; i < n; i++) s0 += (double)x[i] * x[i];
        } else {
            for (; i + 4 <= n; i += 4) {
                s0 += x[i];
                s1 += x[i + 1];
                s2 += x[i + 2];
                s3 += x[i + 3];
            }
            for (; i < n; i++) s0 += x[i];
        }
        r += (s0 + s1) + (s2 + s3);
        break;
    }
    case R_MAX:
    case R_MIN: {
        const int want_max = kind == R_MAX;
        if (n >= 8) {
            int nan = 0;
            const double e = extreme_f32(x, n, want_max, &nan);
            if (nan) r = NAN;
            else if (r == r && (want_max ? e > r : e < r)) r = e;
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            const double v = x[i];
            if ((want_max ? v > r : v < r) || v != v) r = v;
        }
        break;
    }
    case R_PROD:
        for (int64_t i = 0; i < n; i++) r *= x[i];
        break;
    default: /* R_LSE */
        for (int64_t i = 0; i < n; i++) lse_step(x[i], &r, s);
        break;
    }
    *acc = r;
}

/* acc[j] (s[j]) folds in x[j] for j < n: one row of a reduction over an outer axis. */
static void f_rows(int kind, const float *x, int64_t n, double *acc, double *s) {
    switch (kind) {
    case R_SUM:
    case R_MEAN:
        for (int64_t j = 0; j < n; j++) acc[j] += x[j];
        break;
    case R_SUMSQ:
    case R_L2:
        for (int64_t j = 0; j < n; j++) acc[j] += (double)x[j] * x[j];
        break;
    case R_MAX:
        for (int64_t j = 0; j < n; j++) {
            const double v = x[j];
            if (v > acc[j] || v != v) acc[j] = v;
        }
        break;
    case R_MIN:
        for (int64_t j = 0; j < n; j++) {
            const double v = x[j];
            if (v < acc[j] || v != v) acc[j] = v;
        }
        break;
    case R_PROD:
        for (int64_t j = 0; j < n; j++) acc[j] *= x[j];
        break;
    default:
        for (int64_t j = 0; j < n; j++) lse_step(x[j], &acc[j], &s[j]);
        break;
    }
}

/* Integer reductions (I64 / I32; sum, max, min, prod) accumulate in int64, wrapping. */
static inline int64_t i_at(const void *x, int32_t dt, int64_t i) {
    return dt == NRV_I64 ? ((const int64_t *)x)[i] : (int64_t)((const int32_t *)x)[i];
}

static int64_t i_init(int kind, int32_t dt) {
    switch (kind) {
    case R_MAX: return dt == NRV_I64 ? INT64_MIN : INT32_MIN;
    case R_MIN: return dt == NRV_I64 ? INT64_MAX : INT32_MAX;
    case R_PROD: return 1;
    default: return 0;
    }
}

static inline int64_t i_fold(int kind, int64_t acc, int64_t v) {
    switch (kind) {
    case R_SUM: return (int64_t)((uint64_t)acc + (uint64_t)v);
    case R_MAX: return v > acc ? v : acc;
    case R_MIN: return v < acc ? v : acc;
    default: return (int64_t)((uint64_t)acc * (uint64_t)v);
    }
}

static void i_store(void *y, int32_t dt, int64_t i, int64_t v) {
    if (dt == NRV_I64) ((int64_t *)y)[i] = v;
    else ((int32_t *)y)[i] = (int32_t)(uint32_t)(uint64_t)v;
}

/* reduce (ONNX Reduce*): y = reduction of x over a set of axes.
 *  in[0] x: F32 for every kind; I64 or I32 for sum, max, min and prod.
 *  out[0] y, x's dtype, y.numel = x.numel / prod(x.dims[axes]) (with or without the reduced
 *  axes kept as 1: only y.numel is checked).
 *  iattr: [kind, n_axes, axes[n_axes]] (n_iattr == 2 + n_axes); kind 0 sum, 1 mean, 2 max,
 *  3 min, 4 prod, 5 sum_square, 6 l2 (sqrt of the sum of squares), 7 log_sum_exp; axes
 *  sorted, distinct, in [0, rank) (n_axes == 0 reduces nothing: each y is f of one element).
 *  fattr, dattr: none (ignored). Not in place.
 *  F32 accumulates in double; max / min propagate NaN. A reduction over nothing (a reduced
 *  dim of 0) gives sum 0, mean NaN, max -inf, min +inf, prod 1, sum_square 0, l2 0,
 *  log_sum_exp -inf (integers: max = the type's minimum, min = its maximum). Integer sum and
 *  prod wrap on overflow. */
static nrv_status op_reduce(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    if (a->n_iattr < 2)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "iattr must be [kind, n_axes, axes...]; got %d values", a->n_iattr);
    const int64_t kind64 = a->iattr[0], nax = a->iattr[1];
    if (kind64 < 0 || kind64 >= R_KINDS)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "unknown reduction kind %lld", (long long)kind64);
    const int kind = (int)kind64;
    const int32_t dt = x->dtype;
    if (dt != NRV_F32 &&
        !((dt == NRV_I64 || dt == NRV_I32) && (kind == R_SUM || kind == R_MAX || kind == R_MIN || kind == R_PROD)))
        return OPFAIL(a, NRV_ERR_DTYPE, "%s of %s is not supported (f32; i64/i32 for sum, max, min, prod)",
                      kind_names[kind], nrv_dtype_str((nrv_dtype)dt));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", (nrv_dtype)dt));
    const int r = x->rank;
    if (nax < 0 || nax > r || a->n_iattr != 2 + nax)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "n_axes %lld with %d integer attributes for x of rank %d",
                      (long long)nax, a->n_iattr, r);
    int red[NRV_PLAN_MAX_RANK] = {0};
    for (int64_t k = 0, prev = -1; k < nax; k++) {
        const int64_t ax = a->iattr[2 + k];
        if (ax <= prev || ax >= r)
            return OPFAIL(a, NRV_ERR_INVALID_ARG, "axes[%lld] = %lld: axes must be sorted, distinct, in [0, %d)",
                          (long long)k, (long long)ax, r);
        red[ax] = 1;
        prev = ax;
    }
    int64_t count = 1, kept = 1;
    for (int d = 0; d < r; d++) {
        if (red[d]) count *= x->dims[d];
        else kept *= x->dims[d];
    }
    if (y->numel != kept) {
        char b[128];
        return OPFAIL(a, NRV_ERR_SHAPE, "y has %lld elements, x %s reduced over %lld axes leaves %lld",
                      (long long)y->numel, nrv_op_fmt_dims(b, sizeof b, x), (long long)nax, (long long)kept);
    }
    if (kept == 0) return NRV_OK;
    if (count == 0) {
        for (int64_t i = 0; i < kept; i++) {
            if (dt == NRV_F32) ((float *)y->data)[i] = (float)f_fin(kind, f_init(kind), 0.0, 0);
            else i_store(y->data, dt, i, i_init(kind, dt));
        }
        return NRV_OK;
    }

    /* x as groups (x order) of merged kept / reduced axes */
    int64_t xs[NRV_PLAN_MAX_RANK];
    {
        int64_t s = 1;
        for (int d = r - 1; d >= 0; d--) {
            xs[d] = s;
            s *= x->dims[d];
        }
    }
    int ng = 0, g_red[NRV_PLAN_MAX_RANK];
    int64_t g_cnt[NRV_PLAN_MAX_RANK], g_st[NRV_PLAN_MAX_RANK];
    for (int d = 0; d < r; d++) {
        if (x->dims[d] == 1) continue;
        if (ng > 0 && g_red[ng - 1] == red[d]) {
            g_cnt[ng - 1] *= x->dims[d];
            g_st[ng - 1] = xs[d];
        } else {
            g_red[ng] = red[d];
            g_cnt[ng] = x->dims[d];
            g_st[ng] = xs[d];
            ng++;
        }
    }
    const int inner_reduced = ng > 0 && g_red[ng - 1];
    const int64_t inner = ng > 0 ? g_cnt[ng - 1] : 1;
    grp_list kl = {0}, rl = {0};
    for (int g = 0; g < ng - 1; g++) grp_add(g_red[g] ? &rl : &kl, g_cnt[g], g_st[g]);

    const float *xf = x->data;
    float *yf = y->data;
    int64_t kidx[NRV_PLAN_MAX_RANK] = {0}, koff = 0, o = 0;
    if (inner_reduced) {
        /* each output: a contiguous run of `inner` per position of the outer reduced groups */
        do {
            int64_t ridx[NRV_PLAN_MAX_RANK] = {0}, roff = 0;
            if (dt == NRV_F32) {
                double acc = f_init(kind), s = 0.0;
                do f_run(kind, xf + koff + roff, inner, &acc, &s);
                while (grp_next(&rl, ridx, &roff));
                yf[o++] = (float)f_fin(kind, acc, s, count);
            } else {
                int64_t acc = i_init(kind, dt);
                do
                    for (int64_t i = 0; i < inner; i++) acc = i_fold(kind, acc, i_at(x->data, dt, koff + roff + i));
                while (grp_next(&rl, ridx, &roff));
                i_store(y->data, dt, o++, acc);
            }
        } while (grp_next(&kl, kidx, &koff));
        return NRV_OK;
    }
    /* the innermost group is kept (or there are no groups): `inner` contiguous outputs, each
     * accumulated over every position of the reduced groups, BLOCK of them at a time */
    double acc[BLOCK], sacc[BLOCK];
    int64_t iacc[BLOCK];
    do {
        for (int64_t c0 = 0; c0 < inner; c0 += BLOCK) {
            const int64_t len = inner - c0 < BLOCK ? inner - c0 : BLOCK;
            int64_t ridx[NRV_PLAN_MAX_RANK] = {0}, roff = 0;
            if (dt == NRV_F32) {
                const double init = f_init(kind);
                for (int64_t j = 0; j < len; j++) acc[j] = init, sacc[j] = 0.0;
                do f_rows(kind, xf + koff + roff + c0, len, acc, sacc);
                while (grp_next(&rl, ridx, &roff));
                for (int64_t j = 0; j < len; j++) yf[o + c0 + j] = (float)f_fin(kind, acc[j], sacc[j], count);
            } else {
                const int64_t init = i_init(kind, dt);
                for (int64_t j = 0; j < len; j++) iacc[j] = init;
                do
                    for (int64_t j = 0; j < len; j++)
                        iacc[j] = i_fold(kind, iacc[j], i_at(x->data, dt, koff + roff + c0 + j));
                while (grp_next(&rl, ridx, &roff));
                for (int64_t j = 0; j < len; j++) i_store(y->data, dt, o + c0 + j, iacc[j]);
            }
        }
        o += inner;
    } while (grp_next(&kl, kidx, &koff));
    return NRV_OK;
}

/* ------------------------------------------------------------------ argmax / argmin */

/* Is v a better pick than the current best b? NaN counts as beyond every number (the first
 * NaN wins, or the last with select_last_index), as numpy's argmax / argmin do. */
#define BETTER_F(v, b, is_max, last)                                                  \
    ((last) ? ((is_max) ? ((v) >= (b)) : ((v) <= (b))) || (v) != (v)                  \
            : ((is_max) ? ((v) > (b)) : ((v) < (b))) || ((v) != (v) && (b) == (b)))
#define BETTER_I(v, b, is_max, last) \
    ((last) ? ((is_max) ? ((v) >= (b)) : ((v) <= (b))) : ((is_max) ? ((v) > (b)) : ((v) < (b))))

/* argmax / argmin (ONNX ArgMax / ArgMin): index along axis of the largest / smallest value.
 *  in[0] x (F32, I64 or I32); out[0] y I64, y.numel = x.numel / x.dims[axis] (keepdims or not
 *  is only y's dims).
 *  iattr: [axis (0 <= axis < rank; negative counts from the end), select_last_index (0/1)]:
 *  among equal values the first index, or the last with select_last_index.
 *  fattr, dattr: none. x.dims[axis] == 0 is NRV_ERR_SHAPE.
 *  NaN: counts as the extreme value for both (numpy's choice): the first NaN's index is
 *  returned (the last NaN's with select_last_index). */
static nrv_status arg_common(const nrv_op_args *a, int is_max) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 2, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    const int32_t dt = x->dtype;
    if (dt != NRV_F32 && dt != NRV_I64 && dt != NRV_I32)
        return OPFAIL(a, NRV_ERR_DTYPE, "x is %s, expected f32, i64 or i32", nrv_dtype_str((nrv_dtype)dt));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_I64));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const int64_t last = a->iattr[1];
    if (last != 0 && last != 1)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "select_last_index is %lld, expected 0 or 1", (long long)last);
    const int64_t n = x->dims[ax];
    if (n == 0) return OPFAIL(a, NRV_ERR_SHAPE, "axis %d of x has no elements", (int)ax);
    const int64_t outer = nrv_dims_product(x->dims, 0, ax), inner = nrv_dims_product(x->dims, ax + 1, x->rank);
    if (y->numel != outer * inner)
        return OPFAIL(a, NRV_ERR_SHAPE, "y has %lld elements, expected %lld", (long long)y->numel,
                      (long long)(outer * inner));
    if (y->numel == 0) return NRV_OK;
    int64_t *yi = y->data;
#define ARG_SCAN(T, BETTER)                                                                  \
    do {                                                                                     \
        const T *xt = x->data;                                                               \
        for (int64_t o = 0; o < outer; o++) {                                                \
            const T *xo = xt + o * n * inner;                                                \
            int64_t *yo = yi + o * inner;                                                    \
            if (inner == 1) {                                                                \
                T b = xo[0];                                                                 \
                int64_t bi = 0;                                                              \
                for (int64_t k = 1; k < n; k++)                                              \
                    if (BETTER(xo[k], b, is_max, last)) b = xo[k], bi = k;                   \
                yo[0] = bi;                                                                  \
                continue;                                                                    \
            }                                                                                \
            for (int64_t c0 = 0; c0 < inner; c0 += BLOCK) {                                  \
                const int64_t len = inner - c0 < BLOCK ? inner - c0 : BLOCK;                 \
                T best[BLOCK];                                                               \
                for (int64_t j = 0; j < len; j++) best[j] = xo[c0 + j], yo[c0 + j] = 0;      \
                for (int64_t k = 1; k < n; k++) {                                            \
                    const T *row = xo + k * inner + c0;                                      \
                    for (int64_t j = 0; j < len; j++)                                        \
                        if (BETTER(row[j], best[j], is_max, last)) best[j] = row[j], yo[c0 + j] = k; \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    } while (0)
    if (dt == NRV_F32) ARG_SCAN(float, BETTER_F);
    else if (dt == NRV_I64) ARG_SCAN(int64_t, BETTER_I);
    else ARG_SCAN(int32_t, BETTER_I);
#undef ARG_SCAN
    return NRV_OK;
}

static nrv_status op_argmax(const nrv_op_args *a) { return arg_common(a, 1); }
static nrv_status op_argmin(const nrv_op_args *a) { return arg_common(a, 0); }

/* ------------------------------------------------------------------ softmax / log_softmax */

typedef struct softmax_job {
    const float *x;
    float *y;
    int64_t n, inner;
    int log_form;
} softmax_job;

/* Outer rows [o0, o1) of x [outer, n, inner], over its middle axis. */
static void softmax_range(void *ctx, int64_t o0, int64_t o1) {
    const softmax_job *jb = ctx;
    const int64_t n = jb->n, inner = jb->inner;
    const int log_form = jb->log_form;
    const float *xf = jb->x;
    float *yf = jb->y;
    if (inner == 1) {
        if (!log_form) {
            nrv_kernel_get(NRV_OP_SOFTMAX).softmax(xf + o0 * n, o1 - o0, n, yf + o0 * n);
            return;
        }
        for (int64_t o = o0; o < o1; o++) {
            const float *xr = xf + o * n;
            float *yr = yf + o * n;
            float m = xr[0];
            for (int64_t k = 1; k < n; k++) m = xr[k] > m ? xr[k] : m;
            double s = 0.0;
            for (int64_t k = 0; k < n; k++) s += expf(xr[k] - m);
            const float ls = (float)log(s);
            for (int64_t k = 0; k < n; k++) yr[k] = (xr[k] - m) - ls;
        }
        return;
    }
    float mx[BLOCK];
    double sum[BLOCK];
    for (int64_t o = o0; o < o1; o++) {
        const float *xo = xf + o * n * inner;
        float *yo = yf + o * n * inner;
        for (int64_t c0 = 0; c0 < inner; c0 += BLOCK) {
            const int64_t len = inner - c0 < BLOCK ? inner - c0 : BLOCK;
            for (int64_t j = 0; j < len; j++) mx[j] = xo[c0 + j], sum[j] = 0.0;
            for (int64_t k = 1; k < n; k++) {
                const float *row = xo + k * inner + c0;
                for (int64_t j = 0; j < len; j++) mx[j] = row[j] > mx[j] ? row[j] : mx[j];
            }
            if (!log_form) {
                for (int64_t k = 0; k < n; k++) {
                    const float *row = xo + k * inner + c0;
                    float *yrow = yo + k * inner + c0;
                    for (int64_t j = 0; j < len; j++) {
                        const float e = expf(row[j] - mx[j]);
                        yrow[j] = e;
                        sum[j] += e;
                    }
                }
                float inv[BLOCK];
                for (int64_t j = 0; j < len; j++) inv[j] = (float)(1.0 / sum[j]);
                for (int64_t k = 0; k < n; k++) {
                    float *yrow = yo + k * inner + c0;
                    for (int64_t j = 0; j < len; j++) yrow[j] *= inv[j];
                }
            } else {
                for (int64_t k = 0; k < n; k++) {
                    const float *row = xo + k * inner + c0;
                    for (int64_t j = 0; j < len; j++) sum[j] += expf(row[j] - mx[j]);
                }
                float ls[BLOCK];
                for (int64_t j = 0; j < len; j++) ls[j] = (float)log(sum[j]);
                for (int64_t k = 0; k < n; k++) {
                    const float *row = xo + k * inner + c0;
                    float *yrow = yo + k * inner + c0;
                    for (int64_t j = 0; j < len; j++) yrow[j] = (row[j] - mx[j]) - ls[j];
                }
            }
        }
    }
}

/* softmax / log_softmax (ONNX opset >= 13): over the single axis,
 *  y = exp(x - max) / sum(exp(x - max)), log_softmax y = (x - max) - log(sum(exp(x - max))).
 *  in[0] x F32 (rank >= 1); out[0] y F32, x's dims. In place ok.
 *  iattr: [axis] (0 <= axis < rank; negative counts from the end). fattr, dattr: none.
 *  The last axis uses the dispatch table's softmax kernel (log_softmax: a scalar loop with
 *  the sum in double); another axis is done in blocks of BLOCK columns across it. Ranges of
 *  the outer rows go to the session's threads (softmax_range). */
static nrv_status softmax_common(const nrv_op_args *a, int log_form) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    NRV_TRY(nrv_op_same_dims(a, y, "y", x, "x"));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    if (x->numel == 0) return NRV_OK;
    const int64_t n = x->dims[ax];
    const int64_t outer = nrv_dims_product(x->dims, 0, ax), inner = nrv_dims_product(x->dims, ax + 1, x->rank);
    softmax_job j = {x->data, y->data, n, inner, log_form};
    nrv_plan_for_rows(a->pool, outer, n * inner, softmax_range, &j);
    return NRV_OK;
}

static nrv_status op_softmax(const nrv_op_args *a) { return softmax_common(a, 0); }
static nrv_status op_log_softmax(const nrv_op_args *a) { return softmax_common(a, 1); }

/* ------------------------------------------------------------------ layernorm */

/* layernorm (ONNX LayerNormalization, y output only): each row of D = prod(x.dims[axis:])
 *  values is normalised: y = (x - mean) / sqrt(var + eps) * gamma + beta.
 *  in[0] x F32 (rank >= 1); in[1] gamma F32, numel D; in[2] beta F32 numel D, optional (NULL
 *  or absent); out[0] y F32, x's dims. In place ok.
 *  iattr: [axis] (0 <= axis < rank; negative counts from the end). fattr: [eps] (finite,
 *  >= 0, else NRV_ERR_INVALID_ARG, as nrv_layernorm). dattr: none. Runs the dispatch table's
 *  layernorm kernel over [prod(x.dims[:axis]), D] (nothing when y is empty), in ranges of
 *  rows on the session's threads. */
typedef struct layernorm_job {
    const float *x, *gamma, *beta;
    float *y;
    int64_t d;
    float eps;
} layernorm_job;

static void layernorm_range(void *ctx, int64_t r0, int64_t r1) {
    const layernorm_job *j = ctx;
    nrv_kernel_get(NRV_OP_LAYERNORM).layernorm(j->x + r0 * j->d, r1 - r0, j->d, j->gamma, j->beta, j->eps,
                                               j->y + r0 * j->d);
}

static nrv_status op_layernorm(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 3, 1, 1, 1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "gamma"));
    const nrv_tview *x = a->in[0], *gamma = a->in[1];
    const nrv_tview *beta = a->n_in > 2 ? a->in[2] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    if (beta) NRV_TRY(nrv_op_check_view(a, beta, "beta"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, gamma, "gamma", NRV_F32));
    if (beta) NRV_TRY(nrv_op_expect_dtype(a, beta, "beta", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    NRV_TRY(nrv_op_same_dims(a, y, "y", x, "x"));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const int64_t rows = nrv_dims_product(x->dims, 0, ax), d = nrv_dims_product(x->dims, ax, x->rank);
    if (gamma->numel != d)
        return OPFAIL(a, NRV_ERR_SHAPE, "gamma has %lld elements, the normalised axes %lld", (long long)gamma->numel,
                      (long long)d);
    if (beta && beta->numel != d)
        return OPFAIL(a, NRV_ERR_SHAPE, "beta has %lld elements, the normalised axes %lld", (long long)beta->numel,
                      (long long)d);
    const float eps = a->fattr[0];
    if (!(eps >= 0.0f) || isinf(eps))
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "eps is %g, expected finite and >= 0", (double)eps);
    if (rows == 0 || d == 0) return NRV_OK; /* y is empty */
    layernorm_job j = {x->data, gamma->data, beta ? beta->data : NULL, y->data, d, eps};
    nrv_plan_for_rows(a->pool, rows, d, layernorm_range, &j);
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_reduce[] = {
    {"reduce", op_reduce, NULL},
    {"argmax", op_argmax, NULL},
    {"argmin", op_argmin, NULL},
    {"softmax", op_softmax, "softmax"},
    {"log_softmax", op_log_softmax, NULL},
    {"layernorm", op_layernorm, "layernorm"},
    {NULL, NULL, NULL},
};
