/* op_index.c — plan ops that address elements by computed indices or positions (see
 * plan_ops.h for the contract): gather_elements, gather_nd, scatter_elements, scatter_nd
 * (ONNX's GatherElements, GatherND, ScatterElements, ScatterND), cumsum (and products), topk,
 * and the ops whose output size depends on the data: nonzero, nms (NonMaxSuppression) and
 * unique.
 * Those write their output compactly at the size they find and that size to an int64
 * scalar, which the plan's set_dim op after them makes the size of every tensor downstream
 * (plan.c); the output's view holds the bound (the bytes reserved) while they run.
 *
 * Every index is checked before anything is written: one outside its axis is
 * NRV_ERR_INDEX naming its flat position and value, and the output is left as it was.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_ops.h"

/* The offset in `big` (strides bst) of flat element i of a tensor of dims `dims` (rank r),
 * with the coordinate along `axis` replaced by idx. */
static inline int64_t elements_offset(int64_t i, const int64_t *dims, int r, const int64_t *bst, int axis,
                                      int64_t idx) {
    int64_t off = 0;
    for (int d = r - 1; d >= 0; d--) {
        const int64_t c = i % dims[d];
        i /= dims[d];
        off += (d == axis ? idx : c) * bst[d];
    }
    return off;
}

/* data and indices of the same rank, indices no longer than data off the axis. */
static nrv_status check_elements_dims(const nrv_op_args *a, const nrv_tview *data, const nrv_tview *ind, int axis) {
    if (ind->rank != data->rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "indices have rank %d, data %d; they must be equal", (int)ind->rank,
                           (int)data->rank);
    for (int d = 0; d < data->rank; d++)
        if (d != axis && ind->dims[d] > data->dims[d])
            return nrv_op_fail(a, NRV_ERR_SHAPE, "indices dim %d is %lld, longer than data's %lld", d,
                               (long long)ind->dims[d], (long long)data->dims[d]);
    return NRV_OK;
}

/* gather_elements (ONNX GatherElements): y[i] = data[i with its axis coordinate replaced by
 * indices[i]].
 *   in[0] data (any dtype, rank r >= 1); in[1] indices (i64/i32, rank r, dims <= data's off
 *   the axis); out[0] y, data's dtype, indices' dims. iattr [axis]. */
static nrv_status gather_elements_run(const nrv_op_args *a) {
    const nrv_tview *x, *ind;
    nrv_tview *y;
    NRV_TRY(nrv_op_gather_operands(a, &x, &ind, &y));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    NRV_TRY(check_elements_dims(a, x, ind, ax));
    NRV_TRY(nrv_op_same_dims(a, y, "y", ind, "indices"));
    if (y->dtype != x->dtype) return nrv_op_fail(a, NRV_ERR_DTYPE, "y's dtype differs from data's");
    NRV_TRY(nrv_op_check_indices(a, ind, x->dims[ax], "the gathered axis of data"));
    int64_t st[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, st);
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    for (int64_t i = 0; i < ind->numel; i++) {
        int64_t v = nrv_index_at(ind, i);
        if (v < 0) v += x->dims[ax];
        memcpy((char *)y->data + (size_t)i * esz,
               (const char *)x->data + (size_t)elements_offset(i, ind->dims, ind->rank, st, ax, v) * esz, esz);
    }
    return NRV_OK;
}

/* The reductions scatter ops apply (ONNX "reduction"). */
enum { SCATTER_NONE, SCATTER_ADD, SCATTER_MUL, SCATTER_MAX, SCATTER_MIN };

/* Integer sums and products wrap (computed unsigned: no signed overflow). */
#define SCATTER_APPLY(T, U)                                                                                    \
    static void scatter_apply_##T(T *dst, T v, int64_t reduction) {                                           \
        switch (reduction) {                                                                                   \
        case SCATTER_ADD: *dst = (T)((U)*dst + (U)v); break;                                                   \
        case SCATTER_MUL: *dst = (T)((U)*dst * (U)v); break;                                                   \
        case SCATTER_MAX: *dst = v > *dst ? v : *dst; break;                                                   \
        case SCATTER_MIN: *dst = v < *dst ? v : *dst; break;                                                   \
        default: *dst = v; break;                                                                              \
        }                                                                                                      \
    }
SCATTER_APPLY(float, float)
SCATTER_APPLY(int64_t, uint64_t)
SCATTER_APPLY(int32_t, uint32_t)

/* One update element (at src) into dst with the reduction, for data of dtype dt. */
static void scatter_one(nrv_dtype dt, char *dst, const char *src, int64_t reduction, size_t esz) {
    switch (dt) {
    case NRV_F32: {
        float d, v;
        memcpy(&d, dst, 4), memcpy(&v, src, 4);
        scatter_apply_float(&d, v, reduction);
        memcpy(dst, &d, 4);
        break;
    }
    case NRV_I64: {
        int64_t d, v;
        memcpy(&d, dst, 8), memcpy(&v, src, 8);
        scatter_apply_int64_t(&d, v, reduction);
        memcpy(dst, &d, 8);
        break;
    }
    case NRV_I32: {
        int32_t d, v;
        memcpy(&d, dst, 4), memcpy(&v, src, 4);
        scatter_apply_int32_t(&d, v, reduction);
        memcpy(dst, &d, 4);
        break;
    }
    default: memcpy(dst, src, esz); break; /* other dtypes: reduction "none" only (checked) */
    }
}

static nrv_status check_reduction(const nrv_op_args *a, int64_t reduction, nrv_dtype dt) {
    if (reduction < SCATTER_NONE || reduction > SCATTER_MIN)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "reduction code %lld, expected 0..4", (long long)reduction);
    if (reduction != SCATTER_NONE && dt != NRV_F32 && dt != NRV_I64 && dt != NRV_I32)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "a reduction on %s data (f32, i64 or i32 only)", nrv_dtype_str(dt));
    return NRV_OK;
}

/* The operands both scatter ops take: data, indices, updates in; y (data's dims) out; the
 * reduction code iattr[reduction_at]; dtypes shared by data, updates and y. */
static nrv_status scatter_operands(const nrv_op_args *a, int n_iattr, int reduction_at, const nrv_tview **x,
                                   const nrv_tview **ind, const nrv_tview **upd, nrv_tview **y) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, n_iattr, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "data"));
    NRV_TRY(nrv_op_check_in(a, 1, "indices"));
    NRV_TRY(nrv_op_check_in(a, 2, "updates"));
    *x = a->in[0], *ind = a->in[1], *upd = a->in[2], *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, *y, "y"));
    NRV_TRY(nrv_op_index_dtype(a, *ind));
    NRV_TRY(check_reduction(a, a->iattr[reduction_at], (nrv_dtype)(*x)->dtype));
    NRV_TRY(nrv_op_same_dims(a, *y, "y", *x, "data"));
    if ((*y)->dtype != (*x)->dtype || (*upd)->dtype != (*x)->dtype)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "data, updates and y must share a dtype");
    return NRV_OK;
}

/* scatter_elements (ONNX ScatterElements): y = data, then y[i with its axis coordinate
 * replaced by indices[i]] (reduction) updates[i] for every i, in order.
 *   in[0] data (any dtype; f32/i64/i32 with a reduction); in[1] indices (i64/i32, rank r);
 *   in[2] updates (data's dtype, indices' dims); out[0] y (data's dtype and dims).
 *   iattr [axis, reduction] (0 none, 1 add, 2 mul, 3 max, 4 min). Not in place. */
static nrv_status scatter_elements_run(const nrv_op_args *a) {
    const nrv_tview *x, *ind, *upd;
    nrv_tview *y;
    NRV_TRY(scatter_operands(a, 2, 1, &x, &ind, &upd, &y));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    NRV_TRY(check_elements_dims(a, x, ind, ax));
    NRV_TRY(nrv_op_same_dims(a, upd, "updates", ind, "indices"));
    NRV_TRY(nrv_op_check_indices(a, ind, x->dims[ax], "the scattered axis of data"));
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    memcpy(y->data, x->data, (size_t)x->numel * esz);
    int64_t st[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, st);
    for (int64_t i = 0; i < ind->numel; i++) {
        int64_t v = nrv_index_at(ind, i);
        if (v < 0) v += x->dims[ax];
        scatter_one((nrv_dtype)x->dtype, (char *)y->data + (size_t)elements_offset(i, ind->dims, ind->rank, st, ax, v) * esz,
                    (const char *)upd->data + (size_t)i * esz, a->iattr[1], esz);
    }
    return NRV_OK;
}

/* gather_nd (ONNX GatherND, run-time indices: e.g. the attention-mask lookups torch's
 * dynamo exporter writes): with b = batch_dims and q = indices' last dim, each index tuple
 * indices[B, t, :] picks the slice data[B, tuple] (B: the b leading axes both share).
 *   in[0] data (any dtype, rank r); in[1] indices (i64/i32, rank >= b + 1, dims[:b] equal to
 *   data's, last dim q with b + q <= r); out[0] y, data's dtype, dims indices.dims[:-1] +
 *   data.dims[b + q:]. iattr [batch_dims]. */
static nrv_status gather_nd_run(const nrv_op_args *a) {
    const nrv_tview *x, *ind;
    nrv_tview *y;
    NRV_TRY(nrv_op_gather_operands(a, &x, &ind, &y));
    if (y->dtype != x->dtype) return nrv_op_fail(a, NRV_ERR_DTYPE, "y's dtype differs from data's");
    const int64_t b = a->iattr[0];
    if (b < 0 || b >= ind->rank || b >= x->rank)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "batch_dims %lld must be below the ranks of indices (%d) and "
                           "data (%d)", (long long)b, (int)ind->rank, (int)x->rank);
    const int64_t q = ind->dims[ind->rank - 1];
    if (q < 1 || b + q > x->rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "indices' last dim %lld must be in [1, %lld] (data's rank less "
                           "batch_dims)", (long long)q, (long long)(x->rank - b));
    int ok = y->rank == ind->rank - 1 + x->rank - b - q;
    for (int d = 0; ok && d < b; d++) ok = ind->dims[d] == x->dims[d];
    for (int d = 0; ok && d < y->rank; d++)
        ok = y->dims[d] == (d < ind->rank - 1 ? ind->dims[d] : x->dims[b + q + d - (ind->rank - 1)]);
    if (!ok) {
        char b1[128], b2[128], b3[128];
        return nrv_op_fail(a, NRV_ERR_SHAPE, "indices %s and data %s (batch_dims %lld) do not give y %s",
                           nrv_op_fmt_dims(b1, sizeof b1, ind), nrv_op_fmt_dims(b2, sizeof b2, x), (long long)b,
                           nrv_op_fmt_dims(b3, sizeof b3, y));
    }
    for (int64_t i = 0; i < ind->numel; i++) { /* all checked before anything is written */
        const int d = (int)(b + i % q);
        const int64_t v = nrv_index_at(ind, i), dim = x->dims[d];
        if (v < -dim || v >= dim)
            return nrv_op_fail(a, NRV_ERR_INDEX, "indices[%lld] = %lld is outside [%lld, %lld) (axis %d of data)",
                               (long long)i, (long long)v, (long long)-dim, (long long)dim, d);
    }
    int64_t st[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, st);
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    const int64_t batches = nrv_dims_product(x->dims, 0, (int)b), slice = nrv_dims_product(x->dims, (int)(b + q), x->rank);
    const int64_t tuples = ind->numel / q / (batches ? batches : 1), batch_stride = b ? st[b - 1] : 0;
    char *dst = y->data;
    for (int64_t bi = 0; bi < batches; bi++)
        for (int64_t t = 0; t < tuples; t++) {
            const int64_t first = (bi * tuples + t) * q;
            int64_t off = bi * batch_stride;
            for (int64_t d = 0; d < q; d++) {
                int64_t v = nrv_index_at(ind, first + d);
                if (v < 0) v += x->dims[b + d];
                off += v * st[b + d];
            }
            memcpy(dst, (const char *)x->data + (size_t)off * esz, (size_t)slice * esz);
            dst += (size_t)slice * esz;
        }
    return NRV_OK;
}

/* scatter_nd (ONNX ScatterND): y = data, then for each index tuple indices[i, :] (q = its
 * length <= r) the slice y[tuple] (reduction) updates[i].
 *   in[0] data (any dtype, rank r); in[1] indices (i64/i32, [..., q]); in[2] updates
 *   (data's dtype, dims indices.dims[:-1] + data.dims[q:]); out[0] y (data's dtype, dims).
 *   iattr [reduction]. Not in place. */
static nrv_status scatter_nd_run(const nrv_op_args *a) {
    const nrv_tview *x, *ind, *upd;
    nrv_tview *y;
    NRV_TRY(scatter_operands(a, 1, 0, &x, &ind, &upd, &y));
    if (ind->rank < 1 || ind->dims[ind->rank - 1] > x->rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "indices' last dim must be at most data's rank %d", (int)x->rank);
    const int q = (int)ind->dims[ind->rank - 1];
    int ok = upd->rank == ind->rank - 1 + x->rank - q;
    for (int d = 0; ok && d < upd->rank; d++)
        ok = upd->dims[d] == (d < ind->rank - 1 ? ind->dims[d] : x->dims[q + d - (ind->rank - 1)]);
    if (!ok) {
        char b1[128], b2[128], b3[128];
        return nrv_op_fail(a, NRV_ERR_SHAPE, "updates %s do not fit indices %s into data %s",
                           nrv_op_fmt_dims(b1, sizeof b1, upd), nrv_op_fmt_dims(b2, sizeof b2, ind),
                           nrv_op_fmt_dims(b3, sizeof b3, x));
    }
    for (int64_t i = 0; i < ind->numel; i++) {
        const int d = (int)(i % (q ? q : 1));
        const int64_t v = nrv_index_at(ind, i), dim = x->dims[d];
        if (v < -dim || v >= dim)
            return nrv_op_fail(a, NRV_ERR_INDEX, "indices[%lld] = %lld is outside [%lld, %lld) (axis %d of data)",
                               (long long)i, (long long)v, (long long)-dim, (long long)dim, d);
    }
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    memcpy(y->data, x->data, (size_t)x->numel * esz);
    int64_t st[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, st);
    const int64_t slice = nrv_dims_product(x->dims, q, x->rank), tuples = q ? ind->numel / q : 0;
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off = 0;
        for (int d = 0; d < q; d++) {
            int64_t v = nrv_index_at(ind, t * q + d);
            if (v < 0) v += x->dims[d];
            off += v * st[d];
        }
        char *dst = (char *)y->data + (size_t)off * esz;
        const char *src = (const char *)upd->data + (size_t)(t * slice) * esz;
        if (a->iattr[0] == SCATTER_NONE) {
            memcpy(dst, src, (size_t)slice * esz);
        } else {
            for (int64_t j = 0; j < slice; j++)
                scatter_one((nrv_dtype)x->dtype, dst + (size_t)j * esz, src + (size_t)j * esz, a->iattr[0], esz);
        }
    }
    return NRV_OK;
}

/* cumsum (ONNX CumSum, CumProd): running sums or products along an axis.
 *   in[0] x (f32, f64, i64 or i32); out[0] y (x's dtype and dims).
 *   iattr [axis, exclusive, reverse(, product)]: exclusive — each result leaves its own
 *   element out (the first is 0, or 1 for a product); reverse — they run from the end;
 *   product (optional, default 0) — running products instead of sums. In place ok. */
/* Integer sums and products wrap (accumulated unsigned: no signed overflow). */
#define CUMSUM_LOOP(T, ACC)                                                                             \
    for (int64_t o = 0; o < outer; o++)                                                                \
        for (int64_t in = 0; in < inner; in++) {                                                       \
            const T *xs = (const T *)x->data + o * n * inner + in;                                     \
            T *ys = (T *)y->data + o * n * inner + in;                                                 \
            ACC acc = product ? 1 : 0;                                                                 \
            for (int64_t k = 0; k < n; k++) {                                                          \
                const int64_t j = (reverse ? n - 1 - k : k) * inner;                                   \
                const ACC v = (ACC)xs[j];                                                              \
                if (exclusive) ys[j] = (T)acc;                                                         \
                acc = product ? (ACC)(acc * v) : (ACC)(acc + v);                                       \
                if (!exclusive) ys[j] = (T)acc;                                                        \
            }                                                                                          \
        }

static nrv_status cumsum_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    if (a->n_iattr != 3 && a->n_iattr != 4)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "iattr must be [axis, exclusive, reverse(, product)]; got %d "
                           "values", a->n_iattr);
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    if (x->dtype != NRV_F32 && x->dtype != NRV_F64 && x->dtype != NRV_I64 && x->dtype != NRV_I32)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s, expected f32, f64, i64 or i32",
                           nrv_dtype_str((nrv_dtype)x->dtype));
    if (y->dtype != x->dtype) return nrv_op_fail(a, NRV_ERR_DTYPE, "y's dtype differs from x's");
    NRV_TRY(nrv_op_same_dims(a, y, "y", x, "x"));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const int exclusive = a->iattr[1] != 0, reverse = a->iattr[2] != 0;
    const int product = a->n_iattr == 4 && a->iattr[3] != 0;
    const int64_t n = x->dims[ax], outer = nrv_dims_product(x->dims, 0, ax);
    const int64_t inner = nrv_dims_product(x->dims, ax + 1, x->rank);
    if (x->dtype == NRV_F32) {
        CUMSUM_LOOP(float, float)
    } else if (x->dtype == NRV_F64) {
        CUMSUM_LOOP(double, double)
    } else if (x->dtype == NRV_I64) {
        CUMSUM_LOOP(int64_t, uint64_t)
    } else {
        CUMSUM_LOOP(int32_t, uint32_t)
    }
    return NRV_OK;
}

/* A candidate of topk: its value and its position along the axis (float values; integer
 * values, int32 widened, in topk_int_item: both 16 bytes, the scratch's unit). */
typedef struct topk_item {
    float v;
    int64_t i;
} topk_item;
typedef struct topk_int_item {
    int64_t v;
    int64_t i;
} topk_int_item;

/* Whether p ranks before q: the larger (largest) or smaller value first, NaN before every
 * number (as the largest, after it as the smallest), the lower position first on ties. */
static inline int topk_before(const topk_item *p, const topk_item *q, int largest) {
    const int pn = isnan(p->v), qn = isnan(q->v);
    if (pn || qn) {
        if (pn && qn) return p->i < q->i;
        return largest ? pn : qn;
    }
    if (p->v != q->v) return largest ? p->v > q->v : p->v < q->v;
    return p->i < q->i;
}

static inline int topk_int_before(const topk_int_item *p, const topk_int_item *q, int largest) {
    if (p->v != q->v) return largest ? p->v > q->v : p->v < q->v;
    return p->i < q->i;
}

static int topk_cmp_largest(const void *a, const void *b) {
    return topk_before(a, b, 1) ? -1 : topk_before(b, a, 1) ? 1 : 0;
}

static int topk_cmp_smallest(const void *a, const void *b) {
    return topk_before(a, b, 0) ? -1 : topk_before(b, a, 0) ? 1 : 0;
}

static int topk_int_cmp_largest(const void *a, const void *b) {
    return topk_int_before(a, b, 1) ? -1 : topk_int_before(b, a, 1) ? 1 : 0;
}

static int topk_int_cmp_smallest(const void *a, const void *b) {
    return topk_int_before(a, b, 0) ? -1 : topk_int_before(b, a, 0) ? 1 : 0;
}

/* Up to this k, the best k are kept in an insertion-sorted buffer (one pass, most elements
 * rejected by one comparison); above it the whole slice is sorted. */
#define TOPK_INSERTION_MAX 64

/* The selection over every (outer, inner) slice, for one value type T held in ITEM. */
#define TOPK_SELECT(T, ITEM, BEFORE, CMP_LARGEST, CMP_SMALLEST)                                              \
    {                                                                                                       \
        ITEM *buf = a->scratch;                                                                             \
        const T *xd = x->data;                                                                              \
        T *vd = yv->data;                                                                                   \
        int64_t *id = yi->data;                                                                             \
        for (int64_t o = 0; o < outer; o++)                                                                 \
            for (int64_t in = 0; in < inner; in++) {                                                        \
                const T *xs = xd + o * n * inner + in;                                                      \
                int64_t kept = 0;                                                                           \
                if (k <= TOPK_INSERTION_MAX) {                                                              \
                    for (int64_t j = 0; j < n; j++) {                                                       \
                        const ITEM c = {xs[j * inner], j};                                                  \
                        if (kept == k && !BEFORE(&c, &buf[k - 1], largest)) continue;                       \
                        int64_t p = kept < k ? kept++ : k - 1;                                              \
                        while (p > 0 && BEFORE(&c, &buf[p - 1], largest)) {                                 \
                            buf[p] = buf[p - 1];                                                            \
                            p--;                                                                            \
                        }                                                                                   \
                        buf[p] = c;                                                                         \
                    }                                                                                       \
                } else {                                                                                    \
                    for (int64_t j = 0; j < n; j++) buf[j] = (ITEM){xs[j * inner], j};                      \
                    qsort(buf, (size_t)n, sizeof *buf, largest ? CMP_LARGEST : CMP_SMALLEST);               \
                }                                                                                           \
                for (int64_t j = 0; j < k; j++) {                                                           \
                    vd[(o * k + j) * inner + in] = (T)buf[j].v;                                             \
                    id[(o * k + j) * inner + in] = buf[j].i;                                                \
                }                                                                                           \
            }                                                                                               \
    }

/* topk (ONNX TopK): the k largest (or smallest) elements along an axis and their positions,
 * in order (best first; ties: the lower position first).
 *   in[0] x f32, i64 or i32; out[0] values (x's dtype), out[1] indices i64, both x's dims
 *   with k along the axis.
 *   iattr [axis, k, largest]; k < 0: k is dattr[0], a size evaluated for the run.
 *   scratch: 16 * x.dims[axis] bytes. */
static nrv_status topk_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 2, 3, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *yv = a->out[0], *yi = a->out[1];
    NRV_TRY(nrv_op_check_view(a, yv, "values"));
    NRV_TRY(nrv_op_check_view(a, yi, "indices"));
    if (x->dtype != NRV_F32 && x->dtype != NRV_I64 && x->dtype != NRV_I32)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s, expected f32, i64 or i32", nrv_dtype_str((nrv_dtype)x->dtype));
    NRV_TRY(nrv_op_expect_dtype(a, yv, "values", (nrv_dtype)x->dtype));
    NRV_TRY(nrv_op_expect_dtype(a, yi, "indices", NRV_I64));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const int64_t k = a->iattr[1] < 0 && a->n_dattr == 1 ? a->dattr[0] : a->iattr[1], n = x->dims[ax];
    const int largest = a->iattr[2] != 0;
    if (k < 0 || k > n)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "k = %lld is outside [0, %lld] (the axis' extent)", (long long)k,
                           (long long)n);
    for (const nrv_tview *v = yv; v; v = v == yv ? yi : NULL) {
        int ok = v->rank == x->rank;
        for (int d = 0; ok && d < x->rank; d++) ok = v->dims[d] == (d == ax ? k : x->dims[d]);
        if (!ok) {
            char b1[128], b2[128];
            return nrv_op_fail(a, NRV_ERR_SHAPE, "output %s, expected x %s with %lld along axis %d",
                               nrv_op_fmt_dims(b1, sizeof b1, v), nrv_op_fmt_dims(b2, sizeof b2, x), (long long)k,
                               (int)ax);
        }
    }
    _Static_assert(sizeof(topk_item) == 16 && sizeof(topk_int_item) == 16, "topk's scratch is 16 bytes a value");
    if ((uint64_t)a->scratch_bytes < (uint64_t)n * sizeof(topk_item) || (n > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, needs %lld", a->scratch_bytes,
                           (long long)(n * (int64_t)sizeof(topk_item)));
    if (k == 0 || yv->numel == 0) return NRV_OK;
    const int64_t outer = nrv_dims_product(x->dims, 0, ax), inner = nrv_dims_product(x->dims, ax + 1, x->rank);
    if (x->dtype == NRV_F32)
        TOPK_SELECT(float, topk_item, topk_before, topk_cmp_largest, topk_cmp_smallest)
    else if (x->dtype == NRV_I64)
        TOPK_SELECT(int64_t, topk_int_item, topk_int_before, topk_int_cmp_largest, topk_int_cmp_smallest)
    else
        TOPK_SELECT(int32_t, topk_int_item, topk_int_before, topk_int_cmp_largest, topk_int_cmp_smallest)
    return NRV_OK;
}

/* maxpool_argmax (ONNX MaxPool with its Indices output): each window's largest value and
 * where it came from, as a flat index into x.
 *   in[0] x f32 [N, C, spatial...] (1 to 3 spatial axes); out[0] y f32 and out[1] indices
 *   i64, both [N, C, out...] (the extents the compiler computed: floor or ceil mode).
 *   iattr [sr, storage_order, kernel[sr], strides[sr], dilations[sr], pads_begin[sr]]:
 *   storage_order 0 indexes each (n, c) plane row-major, 1 column-major (ONNX).
 * NaN is skipped, as op pool does; the first largest wins; a window with no number (NaN and
 * padding only) gives -FLT_MAX at its first position inside x. A direct loop: this op runs
 * only where the indices are asked for (SegNet/ENet-style unpooling). */
static nrv_status maxpool_argmax_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 2, -1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0], *yi = a->out[1];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_check_view(a, yi, "indices"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, yi, "indices", NRV_I64));
    const int64_t sr = a->n_iattr >= 1 ? a->iattr[0] : 0;
    if (sr < 1 || sr > 3 || a->n_iattr != 2 + 4 * sr)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "iattr must be [sr (1-3), storage_order, kernel, strides, "
                           "dilations, pads_begin]; got %d values", a->n_iattr);
    const int column_major = a->iattr[1] != 0;
    if (x->rank != 2 + sr || y->rank != 2 + sr || yi->rank != 2 + sr)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x, y and indices must have rank %lld", (long long)(2 + sr));
    NRV_TRY(nrv_op_same_dims(a, yi, "indices", y, "y"));
    if (y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "y's batch and channels differ from x's");
    /* three spatial axes, the missing leading ones of extent 1 */
    int64_t xd[3] = {1, 1, 1}, yd[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1};
    int64_t pb[3] = {0, 0, 0};
    for (int64_t i = 0; i < sr; i++) {
        const int64_t j = 3 - sr + i;
        xd[j] = x->dims[2 + i], yd[j] = y->dims[2 + i];
        k[j] = a->iattr[2 + i], st[j] = a->iattr[2 + sr + i], dl[j] = a->iattr[2 + 2 * sr + i];
        pb[j] = a->iattr[2 + 3 * sr + i];
        if (k[j] < 1 || st[j] < 1 || dl[j] < 1 || pb[j] < 0 || pb[j] >= k[j] * dl[j])
            return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "axis %lld: kernel %lld, stride %lld, dilation %lld, pad %lld "
                               "out of range", (long long)i, (long long)k[j], (long long)st[j], (long long)dl[j],
                               (long long)pb[j]);
        /* every window must start inside x or its padding, so that it holds an element of x */
        if (yd[j] > 0 && (yd[j] - 1) * st[j] - pb[j] >= xd[j])
            return nrv_op_fail(a, NRV_ERR_SHAPE, "axis %lld: %lld outputs start past the input's %lld", (long long)i,
                               (long long)yd[j], (long long)xd[j]);
    }
    const int64_t planes = x->dims[0] * x->dims[1], xplane = xd[0] * xd[1] * xd[2];
    const float *xp = x->data;
    float *yp = y->data;
    int64_t *ip = yi->data, o = 0;
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t od = 0; od < yd[0]; od++)
            for (int64_t oh = 0; oh < yd[1]; oh++)
                for (int64_t ow = 0; ow < yd[2]; ow++, o++) {
                    float best = -FLT_MAX;
                    int64_t at = -1, first = -1;
                    for (int64_t a0 = 0; a0 < k[0]; a0++) {
                        const int64_t id = od * st[0] - pb[0] + a0 * dl[0];
                        if (id < 0 || id >= xd[0]) continue;
                        for (int64_t a1 = 0; a1 < k[1]; a1++) {
                            const int64_t ih = oh * st[1] - pb[1] + a1 * dl[1];
                            if (ih < 0 || ih >= xd[1]) continue;
                            for (int64_t a2 = 0; a2 < k[2]; a2++) {
                                const int64_t iw = ow * st[2] - pb[2] + a2 * dl[2];
                                if (iw < 0 || iw >= xd[2]) continue;
                                const int64_t in_plane = (id * xd[1] + ih) * xd[2] + iw;
                                const float v = xp[pl * xplane + in_plane];
                                if (first < 0) first = in_plane;
                                if (v > best || (at < 0 && v == best)) best = v, at = in_plane;
                            }
                        }
                    }
                    if (at < 0) at = first;
                    if (column_major) { /* w, then h, then d varies slowest-first reversed */
                        const int64_t iw = at % xd[2], ih = (at / xd[2]) % xd[1], id = at / (xd[1] * xd[2]);
                        at = (iw * xd[1] + ih) * xd[0] + id;
                    }
                    yp[o] = best;
                    ip[o] = pl * xplane + at;
                }
    return NRV_OK;
}

/* max_unpool (ONNX MaxUnpool): y is zero but where x's values go, each to the flat position
 * of y its index gives (MaxPool's Indices over a tensor of y's shape; a later duplicate wins).
 *   in[0] x f32, in[1] indices i64 of x's dims; out[0] y f32 [N, C, spatial...].
 * Every index is checked to lie in [0, numel(y)) before anything is written. */
static nrv_status max_unpool_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 0, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "indices"));
    const nrv_tview *x = a->in[0], *ind = a->in[1];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, ind, "indices", NRV_I64));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    NRV_TRY(nrv_op_same_dims(a, ind, "indices", x, "x"));
    const int64_t *iv = ind->data;
    for (int64_t i = 0; i < ind->numel; i++)
        if (iv[i] < 0 || iv[i] >= y->numel)
            return nrv_op_fail(a, NRV_ERR_INDEX, "index %lld at position %lld is outside the output's %lld elements",
                               (long long)iv[i], (long long)i, (long long)y->numel);
    float *yp = y->data;
    const float *xp = x->data;
    if (y->numel) memset(yp, 0, (size_t)y->numel * sizeof(float));
    for (int64_t i = 0; i < x->numel; i++) yp[iv[i]] = xp[i];
    return NRV_OK;
}

/* ================================================================== nonzero, nms */

/* Whether element i of x is nonzero: a float's value (-0 is zero, NaN is not), an integer's
 * or bool's bytes. */
static int element_nonzero(const nrv_tview *x, int64_t i) {
    switch (x->dtype) {
    case NRV_F32: return ((const float *)x->data)[i] != 0.0f;
    case NRV_F64: return ((const double *)x->data)[i] != 0.0;
    case NRV_F16: return (((const uint16_t *)x->data)[i] & 0x7fff) != 0;
    case NRV_I32: return ((const int32_t *)x->data)[i] != 0;
    case NRV_I64: return ((const int64_t *)x->data)[i] != 0;
    default: return ((const uint8_t *)x->data)[i] != 0; /* I8, U8, BOOL */
    }
}

/* A data-dependent op's count output: one int64. */
static nrv_status check_count_out(const nrv_op_args *a, const nrv_tview *count) {
    NRV_TRY(nrv_op_expect_dtype(a, count, "count", NRV_I64));
    if (count->numel != 1) return nrv_op_fail(a, NRV_ERR_SHAPE, "count has %lld elements, expected 1",
                                              (long long)count->numel);
    return NRV_OK;
}

/* nonzero (ONNX NonZero): the coordinates of x's nonzero elements in row-major order.
 *   in[0]  x     any dtype, rank r >= 1
 *   out[0] y     i64 [r, cap]: written as [r, n] (row d: coordinate d of each), n <= cap
 *   out[1] count i64, one element: n
 *   no attributes, no scratch. */
static nrv_status nonzero_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 2, 0, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "input"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", NRV_I64));
    NRV_TRY(check_count_out(a, a->out[1]));
    if (x->rank < 1 || y->rank != 2 || y->dims[0] != x->rank)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "input rank %d, output rank %d with %lld rows; expected [rank, n]",
                           (int)x->rank, (int)y->rank, (long long)(y->rank ? y->dims[0] : 0));
    int64_t n = 0;
    for (int64_t i = 0; i < x->numel; i++) n += element_nonzero(x, i);
    if (n > y->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "%lld nonzero elements, room for %lld", (long long)n,
                           (long long)y->dims[1]);
    int64_t *out = y->data, j = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        if (!element_nonzero(x, i)) continue;
        int64_t rem = i;
        for (int d = (int)x->rank - 1; d >= 0; d--) {
            out[d * n + j] = rem % x->dims[d];
            rem /= x->dims[d];
        }
        j++;
    }
    *(int64_t *)a->out[1]->data = n;
    return NRV_OK;
}

/* A candidate box of one class: its score and index, sorted by score (higher first), then
 * index (lower first), so ties select in a fixed order. */
typedef struct nms_candidate {
    float score;
    int32_t index;
} nms_candidate;

static int nms_candidate_order(const void *pa, const void *pb) {
    const nms_candidate *x = pa, *y = pb;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* A box's extent on one axis from two corners, or from its centre and size. */
static void nms_span(const float *box, int center, int axis, float *lo, float *hi) {
    if (center) {
        const float half = box[2 + axis] / 2;
        *lo = box[axis] - half, *hi = box[axis] + half;
    } else {
        const float u = box[axis], v = box[axis + 2];
        *lo = u <= v ? u : v, *hi = u <= v ? v : u;
    }
}

/* Whether box q overlaps kept box k by more than the threshold: the IoU as onnxruntime
 * computes it (float; boxes of no area, or not overlapping, never suppress). */
static int nms_suppresses(const float *k, const float *q, int center, float iou_threshold) {
    float klo[2], khi[2], qlo[2], qhi[2], ilo[2], ihi[2];
    /* corners [y1, x1, y2, x2]: axis 0 is y; centre format [x, y, w, h]: axis 0 is x */
    for (int ax = 0; ax < 2; ax++) {
        nms_span(k, center, ax, &klo[ax], &khi[ax]);
        nms_span(q, center, ax, &qlo[ax], &qhi[ax]);
        ilo[ax] = klo[ax] > qlo[ax] ? klo[ax] : qlo[ax];
        ihi[ax] = khi[ax] < qhi[ax] ? khi[ax] : qhi[ax];
        if (ihi[ax] <= ilo[ax]) return 0;
    }
    const float inter = (ihi[0] - ilo[0]) * (ihi[1] - ilo[1]);
    const float area_k = (khi[0] - klo[0]) * (khi[1] - klo[1]), area_q = (qhi[0] - qlo[0]) * (qhi[1] - qlo[1]);
    const float uni = area_k + area_q - inter;
    if (inter <= 0.0f || area_k <= 0.0f || area_q <= 0.0f || uni <= 0.0f) return 0;
    return inter / uni > iou_threshold;
}

/* nms (ONNX NonMaxSuppression): per image and class, the boxes by descending score (those
 * above score_threshold when it is given), each kept unless it overlaps a kept one by an IoU
 * over iou_threshold, up to max_output_boxes_per_class kept.
 *   in[0]  boxes  f32 [B, N, 4]  corners [y1, x1, y2, x2] (any diagonal pair), or with
 *                                center_point_box [x_centre, y_centre, width, height]
 *   in[1]  scores f32 [B, C, N]
 *   in[2]  max_output_boxes_per_class i64 scalar, optional (absent: 0, nothing selected;
 *          negative: 0)
 *   in[3]  iou_threshold f32 scalar in [0, 1], optional (absent: 0)
 *   in[4]  score_threshold f32 scalar, optional (absent: no score filter)
 *   out[0] selected i64 [cap, 3]: written as [n, 3] rows (image, class, box), in image,
 *          class, then selection order; n <= cap
 *   out[1] count i64, one element: n
 *   iattr (1): [center_point_box]
 *   scratch: N nms_candidate (8 bytes each) then N int32 kept indices. */
static nrv_status nms_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 5, 2, 1, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "boxes"));
    NRV_TRY(nrv_op_check_in(a, 1, "scores"));
    const nrv_tview *boxes = a->in[0], *scores = a->in[1];
    nrv_tview *sel = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, boxes, "boxes", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, scores, "scores", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, sel, "selected_indices", NRV_I64));
    NRV_TRY(check_count_out(a, a->out[1]));
    const int center = a->iattr[0] != 0;
    if (a->iattr[0] != 0 && a->iattr[0] != 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "center_point_box is %lld, expected 0 or 1", (long long)a->iattr[0]);
    if (boxes->rank != 3 || scores->rank != 3 || boxes->dims[2] != 4 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "boxes must be [B, N, 4] and scores [B, C, N] (ranks %d, %d)",
                           (int)boxes->rank, (int)scores->rank);
    if (sel->rank != 2 || sel->dims[1] != 3)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "selected_indices must be [n, 3]");
    const int64_t nb = boxes->dims[0], nc = scores->dims[1], n = boxes->dims[1];
    if (n > INT32_MAX) return nrv_op_fail(a, NRV_ERR_SHAPE, "%lld boxes per image: more than int32 indices", (long long)n);
    int64_t max_out = 0;
    float iou = 0.0f, score_thr = 0.0f;
    const int has_score_thr = a->n_in > 4 && a->in[4];
    const nrv_tview *opt[3] = {a->n_in > 2 ? a->in[2] : NULL, a->n_in > 3 ? a->in[3] : NULL,
                               has_score_thr ? a->in[4] : NULL};
    static const char *const opt_name[3] = {"max_output_boxes_per_class", "iou_threshold", "score_threshold"};
    for (int k = 0; k < 3; k++) {
        if (!opt[k]) continue;
        NRV_TRY(nrv_op_expect_dtype(a, opt[k], opt_name[k], k == 0 ? NRV_I64 : NRV_F32));
        if (opt[k]->numel != 1)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "%s has %lld elements, expected 1", opt_name[k],
                               (long long)opt[k]->numel);
    }
    if (opt[0]) max_out = *(const int64_t *)opt[0]->data > 0 ? *(const int64_t *)opt[0]->data : 0;
    if (opt[1]) iou = *(const float *)opt[1]->data;
    if (opt[2]) score_thr = *(const float *)opt[2]->data;
    if (!(iou >= 0.0f && iou <= 1.0f))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "iou_threshold is %g, expected within [0, 1]", (double)iou);
    const uint64_t need = (uint64_t)n * (sizeof(nms_candidate) + sizeof(int32_t));
    if (n > 0 && (!a->scratch || a->scratch_bytes < need))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, %llu needed", a->scratch_bytes,
                           (unsigned long long)need);
    nms_candidate *cand = a->scratch;
    int32_t *kept = (int32_t *)(cand + n);
    int64_t *out = sel->data, count = 0;
    for (int64_t b = 0; b < nb && max_out > 0; b++) {
        const float *bx = (const float *)boxes->data + b * n * 4;
        for (int64_t c = 0; c < nc; c++) {
            const float *sc = (const float *)scores->data + (b * nc + c) * n;
            int64_t m = 0, nk = 0;
            for (int64_t i = 0; i < n; i++)
                if (!has_score_thr || sc[i] > score_thr) cand[m++] = (nms_candidate){sc[i], (int32_t)i};
            qsort(cand, (size_t)m, sizeof *cand, nms_candidate_order);
            for (int64_t i = 0; i < m && nk < max_out; i++) {
                const float *q = bx + 4 * (int64_t)cand[i].index;
                int keep = 1;
                for (int64_t j = 0; j < nk && keep; j++) keep = !nms_suppresses(bx + 4 * (int64_t)kept[j], q, center, iou);
                if (!keep) continue;
                if (count >= sel->dims[0])
                    return nrv_op_fail(a, NRV_ERR_SHAPE, "more than the %lld selections the plan has room for",
                                       (long long)sel->dims[0]);
                kept[nk++] = cand[i].index;
                out[3 * count] = b, out[3 * count + 1] = c, out[3 * count + 2] = cand[i].index;
                count++;
            }
        }
    }
    *(int64_t *)a->out[1]->data = count;
    return NRV_OK;
}

/* ------------------------------------------------------------------ unique */

typedef struct unique_ctx {
    const nrv_tview *x;
    int64_t outer, m, inner;
} unique_ctx;

/* Element order of unique: numbers by value (-0 equals +0), NaN after every number and
 * equal to NaN, so the order is total and the sort well defined. */
static int unique_cmp_elem(const nrv_tview *x, int64_t i, int64_t j) {
    double a, b;
    switch (x->dtype) {
    case NRV_F32: a = ((const float *)x->data)[i], b = ((const float *)x->data)[j]; break;
    case NRV_F64: a = ((const double *)x->data)[i], b = ((const double *)x->data)[j]; break;
    case NRV_I64: {
        const int64_t u = ((const int64_t *)x->data)[i], v = ((const int64_t *)x->data)[j];
        return (u > v) - (u < v);
    }
    case NRV_I32: a = ((const int32_t *)x->data)[i], b = ((const int32_t *)x->data)[j]; break;
    case NRV_I8: a = ((const int8_t *)x->data)[i], b = ((const int8_t *)x->data)[j]; break;
    default: a = ((const uint8_t *)x->data)[i], b = ((const uint8_t *)x->data)[j]; break; /* U8, BOOL */
    }
    if (a != a || b != b) return (a != a) - (b != b);
    return (a > b) - (a < b);
}

/* Slices p and q along the axis, compared element by element in x's order. */
static int unique_cmp_slices(const unique_ctx *u, int64_t p, int64_t q) {
    for (int64_t o = 0; o < u->outer; o++)
        for (int64_t i = 0; i < u->inner; i++) {
            const int64_t base = o * u->m * u->inner + i;
            const int c = unique_cmp_elem(u->x, base + p * u->inner, base + q * u->inner);
            if (c) return c;
        }
    return 0;
}

/* Stable bottom-up merge sort of the positions in ord[0, n) by their slices (tmp: n more). */
static void unique_sort(const unique_ctx *u, int64_t *ord, int64_t *tmp, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) tmp[k++] = unique_cmp_slices(u, ord[b], ord[a]) < 0 ? ord[b++] : ord[a++];
            while (a < mid) tmp[k++] = ord[a++];
            while (b < hi) tmp[k++] = ord[b++];
        }
        memcpy(ord, tmp, (size_t)n * sizeof *ord);
    }
}

/* unique (ONNX Unique): the distinct slices of x along an axis, or its distinct elements.
 *   in[0]  x        f32, f64, i64, i32, i8, u8 or bool, rank r >= 1; seen as [outer, m, inner]
 *                   around the axis (the compiler flattens x for Unique without an axis)
 *   out[0] y        x's dtype and dims with cap along the axis: written as [outer, u, inner]
 *   out[1] indices  i64 [cap]: each distinct slice's first position
 *   out[2] inverse  i64 [m]: each slice's place in y
 *   out[3] counts   i64 [cap]: how often each occurs
 *   out[4] count    i64, one element: u
 *   iattr (2): [axis, sorted]: sorted 1 orders y ascending (slices lexicographically, in
 *   x's element order), 0 by first occurrence
 *   scratch: 5·m int64. */
static nrv_status unique_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 5, 2, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "input"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    for (int k = 1; k < 4; k++) NRV_TRY(nrv_op_expect_dtype(a, a->out[k], "an index output", NRV_I64));
    NRV_TRY(nrv_op_expect_dtype(a, y, "output", (nrv_dtype)x->dtype));
    NRV_TRY(check_count_out(a, a->out[4]));
    if (x->dtype == NRV_F16)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "float16 input (the compiler widens it to float32)");
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const unique_ctx u = {x, nrv_dims_product(x->dims, 0, ax), x->dims[ax], nrv_dims_product(x->dims, ax + 1, x->rank)};
    const int64_t m = u.m, cap = y->rank == x->rank ? y->dims[ax] : -1;
    int same = cap >= 0; /* y is x's shape but along the axis */
    for (int d = 0; same && d < x->rank; d++) same = d == ax || y->dims[d] == x->dims[d];
    if (!same || a->out[1]->numel != cap || a->out[3]->numel != cap || a->out[2]->numel != m)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "outputs do not match the input's %lld slices", (long long)m);
    if ((uint64_t)a->scratch_bytes < (uint64_t)m * 5 * sizeof(int64_t) || (m > 0 && !a->scratch))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, %lld needed", a->scratch_bytes,
                           (long long)(m * 5 * (int64_t)sizeof(int64_t)));
    int64_t *ord = a->scratch, *tmp = ord + m, *group = tmp + m, *first = group + m, *rank_of = first + m;
    for (int64_t i = 0; i < m; i++) ord[i] = i;
    unique_sort(&u, ord, tmp, m);
    int64_t nu = 0;
    for (int64_t k = 0; k < m; k++) { /* groups in sorted order; a group's first is its lowest position */
        if (k == 0 || unique_cmp_slices(&u, first[nu - 1], ord[k]) != 0) first[nu++] = ord[k];
        group[ord[k]] = nu - 1;
    }
    if (nu > cap) return nrv_op_fail(a, NRV_ERR_SHAPE, "%lld distinct slices, room for %lld", (long long)nu, (long long)cap);
    /* the place of each group in y: its sorted rank, or the rank of its first position */
    if (a->iattr[1]) {
        for (int64_t g = 0; g < nu; g++) rank_of[g] = g;
    } else {
        int64_t next = 0;
        for (int64_t i = 0; i < m; i++)
            if (first[group[i]] == i) rank_of[group[i]] = next++;
    }
    int64_t *indices = a->out[1]->data, *inverse = a->out[2]->data, *counts = a->out[3]->data;
    for (int64_t g = 0; g < nu; g++) indices[rank_of[g]] = first[g], counts[rank_of[g]] = 0;
    for (int64_t i = 0; i < m; i++) {
        inverse[i] = rank_of[group[i]];
        counts[inverse[i]]++;
    }
    const size_t es = nrv_dtype_size((nrv_dtype)x->dtype), row = (size_t)u.inner * es;
    for (int64_t o = 0; o < u.outer; o++)
        for (int64_t j = 0; j < nu; j++)
            memcpy((char *)y->data + (size_t)(o * nu + j) * row, (const char *)x->data + (size_t)(o * m + indices[j]) * row,
                   row);
    *(int64_t *)a->out[4]->data = nu;
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_index[] = {
    {"gather_elements", gather_elements_run, NULL},
    {"gather_nd", gather_nd_run, NULL},
    {"scatter_elements", scatter_elements_run, NULL},
    {"scatter_nd", scatter_nd_run, NULL},
    {"cumsum", cumsum_run, NULL},
    {"topk", topk_run, NULL},
    {"maxpool_argmax", maxpool_argmax_run, NULL},
    {"max_unpool", max_unpool_run, NULL},
    {"nonzero", nonzero_run, NULL},
    {"nms", nms_run, NULL},
    {"unique", unique_run, NULL},
    {NULL, NULL, NULL},
};
