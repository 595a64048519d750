/* op_shape.c — plan ops of the shape family (see plan_ops.h for the contract): ops that move
 * elements without arithmetic (copy, transpose, concat, split, slice, gather, expand, where,
 * trilu) and the small converters and generators (cast, range, range_count, random, fill, dims).
 *
 * "Any dtype" ops never look at values: they move nrv_dtype_size(dtype) bytes (1, 2, 4 or 8)
 * per element with fixed-size memcpy (compiled to plain loads and stores, no alignment
 * assumption), and one memcpy per innermost contiguous run. Strided copies go through
 * nd_loop below: the output's axes with one element stride per operand, simplified (axes of
 * extent 1 dropped, neighbours merged where every operand is contiguous across them) so a
 * copy that is "really" a memcpy of long rows is done as one.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

#define OPFAIL(a, code, fmt, ...) \
    nrv_fail((code), "%s (node '%s'): " fmt, (a)->type, (a)->name, __VA_ARGS__)

/* ------------------------------------------------------------------ shared checks */




static nrv_status same_dtype(const nrv_op_args *a, const nrv_tview *v, const char *what, const nrv_tview *ref,
                             const char *ref_what) {
    if (v->dtype != ref->dtype)
        return OPFAIL(a, NRV_ERR_DTYPE, "%s is %s but %s is %s", what, nrv_dtype_str((nrv_dtype)v->dtype), ref_what,
                      nrv_dtype_str((nrv_dtype)ref->dtype));
    return NRV_OK;
}

/* The prologue of an op taking one tensor x to one y of the same dtype: counts, both views
 * checked, dtypes equal. */
static nrv_status x_to_y_same_dtype(const nrv_op_args *a, const nrv_tview **x, nrv_tview **y) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_view(a, a->out[0], "y"));
    NRV_TRY(same_dtype(a, a->out[0], "y", a->in[0], "x"));
    *x = a->in[0];
    *y = a->out[0];
    return NRV_OK;
}



/* x broadcast (numpy: right-aligned, each dim 1 or equal) to out's dims: element strides of
 * x along out's axes (0 where broadcast). Fails with NRV_ERR_SHAPE. */
static nrv_status broadcast_strides(const nrv_op_args *a, const nrv_tview *x, const char *what,
                                    const nrv_tview *out, int64_t *st) {
    char b1[128], b2[128];
    if (x->rank > out->rank)
        return OPFAIL(a, NRV_ERR_SHAPE, "%s dims %s do not broadcast to %s", what, nrv_op_fmt_dims(b1, sizeof b1, x),
                      nrv_op_fmt_dims(b2, sizeof b2, out));
    int64_t xs[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, xs);
    const int lead = out->rank - x->rank;
    for (int d = 0; d < out->rank; d++) {
        const int xd = d - lead;
        if (xd < 0) {
            st[d] = 0;
        } else if (x->dims[xd] == out->dims[d]) {
            st[d] = xs[xd];
        } else if (x->dims[xd] == 1) {
            st[d] = 0;
        } else {
            return OPFAIL(a, NRV_ERR_SHAPE, "%s dims %s do not broadcast to %s (axis %d)", what,
                          nrv_op_fmt_dims(b1, sizeof b1, x), nrv_op_fmt_dims(b2, sizeof b2, out), d);
        }
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ strided loops */

#define NV_MAX 4

/* Loop over the output's axes; st[v][d] = element stride of operand v (0 = the output). */
typedef struct nd_loop {
    int n;
    int nv;
    int64_t cnt[NRV_PLAN_MAX_RANK];
    int64_t st[NV_MAX][NRV_PLAN_MAX_RANK];
} nd_loop;

typedef struct nd_pos {
    int64_t idx[NRV_PLAN_MAX_RANK];
    int64_t off[NV_MAX];
} nd_pos;

/* Drops extent-1 axes and merges an axis into the one before it where every operand is
 * contiguous across the pair. Leaves at least one axis. Counts must all be > 0. */
static void loop_simplify(nd_loop *L) {
    int m = 0;
    for (int d = 0; d < L->n; d++) {
        if (L->cnt[d] == 1) continue;
        if (m > 0) {
            int merge = 1;
            for (int v = 0; v < L->nv; v++)
                if (L->st[v][m - 1] != L->st[v][d] * L->cnt[d]) merge = 0;
            if (merge) {
                L->cnt[m - 1] *= L->cnt[d];
                for (int v = 0; v < L->nv; v++) L->st[v][m - 1] = L->st[v][d];
                continue;
            }
        }
        L->cnt[m] = L->cnt[d];
        for (int v = 0; v < L->nv; v++) L->st[v][m] = L->st[v][d];
        m++;
    }
    if (m == 0) {
        L->cnt[0] = 1;
        for (int v = 0; v < L->nv; v++) L->st[v][0] = 1;
        m = 1;
    }
    L->n = m;
}

static void pos_init(nd_pos *p, const nd_loop *L, const int64_t *base) {
    memset(p->idx, 0, sizeof p->idx);
    for (int v = 0; v < L->nv; v++) p->off[v] = base ? base[v] : 0;
}

/* Next position over axes [0, n_axes) (odometer); 0 once every position was visited. */
static int loop_next(const nd_loop *L, int n_axes, nd_pos *p) {
    for (int d = n_axes - 1; d >= 0; d--) {
        if (++p->idx[d] < L->cnt[d]) {
            for (int v = 0; v < L->nv; v++) p->off[v] += L->st[v][d];
            return 1;
        }
        p->idx[d] = 0;
        for (int v = 0; v < L->nv; v++) p->off[v] -= L->st[v][d] * (L->cnt[d] - 1);
    }
    return 0;
}

#define ESZ_SWITCH(esz, M) \
    switch (esz) {         \
    case 1: M(1); break;   \
    case 2: M(2); break;   \
    case 4: M(4); break;   \
    default: M(8); break;  \
    }

/* n bytes at dst = n / esz copies of the element at dst[0, esz) (doubling memcpy). */
static void replicate(char *dst, size_t esz, int64_t n) {
    size_t have = esz;
    const size_t total = (size_t)n * esz;
    while (have < total) {
        const size_t c = have < total - have ? have : total - have;
        memcpy(dst + have, dst, c);
        have += c;
    }
}

/* dst[0, n) (contiguous) = src[i * ss] for i < n; ss may be 0 (broadcast) or negative.
 * memmove, as in copy_chunks: a crafted plan may place y at x's offset. */
static void copy_run(char *dst, const char *src, int64_t ss, int64_t n, size_t esz) {
    if (ss == 1) {
        memmove(dst, src, (size_t)n * esz);
    } else if (ss == 0) {
        memmove(dst, src, esz);
        replicate(dst, esz, n);
    } else {
#define COPY_RUN(SZ) \
    for (int64_t i = 0; i < n; i++) memmove(dst + i * SZ, src + i * ss * SZ, SZ)
        ESZ_SWITCH(esz, COPY_RUN)
#undef COPY_RUN
    }
}

/* Operand 0 is the (contiguous) output y, operand 1 the source x at element offset xbase. */
static void run_copy_loop(const nd_loop *L, char *y, const char *x, int64_t xbase, size_t esz) {
    const int inner = L->n - 1;
    const int64_t n = L->cnt[inner], ss = L->st[1][inner];
    const int64_t base[2] = {0, xbase};
    nd_pos p;
    pos_init(&p, L, base);
    do {
        copy_run(y + p.off[0] * (int64_t)esz, x + p.off[1] * (int64_t)esz, ss, n, esz);
    } while (loop_next(L, inner, &p));
}

/* ------------------------------------------------------------------ copy */

/* copy: materialises a reshape.
 *  in[0] x (any dtype); out[0] y, same dtype and numel as x (dims may differ).
 *  iattr, fattr, dattr: none (ignored). In place ok. */
static nrv_status op_copy(const nrv_op_args *a) {
    const nrv_tview *x;
    nrv_tview *y;
    NRV_TRY(x_to_y_same_dtype(a, &x, &y));
    NRV_TRY(nrv_op_expect_same_numel(a, x, y, "x vs y"));
    if (y->numel > 0 && y->data != x->data)
        memmove(y->data, x->data, (size_t)y->numel * nrv_dtype_size((nrv_dtype)x->dtype));
    return NRV_OK;
}

/* ------------------------------------------------------------------ transpose */

#define TILE 32

/* Blocked 2-D transpose for a loop whose source is contiguous along axis q (not the last):
 * tiles of TILE x TILE over (q, last), the other axes iterated outside. */
static void run_transpose_blocked(const nd_loop *L, int q, char *y, const char *x, size_t esz) {
    const int inner = L->n - 1;
    nd_loop O;
    O.n = 0;
    O.nv = 2;
    for (int d = 0; d < inner; d++) {
        if (d == q) continue;
        O.cnt[O.n] = L->cnt[d];
        O.st[0][O.n] = L->st[0][d];
        O.st[1][O.n] = L->st[1][d];
        O.n++;
    }
    const int64_t na = L->cnt[q], ysa = L->st[0][q], nb = L->cnt[inner], xsb = L->st[1][inner];
    nd_pos p;
    pos_init(&p, &O, NULL);
    do {
        char *yb = y + p.off[0] * (int64_t)esz;
        const char *xb = x + p.off[1] * (int64_t)esz;
#define TRANSPOSE_TILES(SZ)                                                               \
    for (int64_t a0 = 0; a0 < na; a0 += TILE) {                                           \
        const int64_t a1 = a0 + TILE < na ? a0 + TILE : na;                               \
        for (int64_t b0 = 0; b0 < nb; b0 += TILE) {                                       \
            const int64_t b1 = b0 + TILE < nb ? b0 + TILE : nb;                           \
            for (int64_t ia = a0; ia < a1; ia++) {                                        \
                char *yr = yb + ia * ysa * SZ;                                            \
                const char *xr = xb + ia * SZ;                                            \
                for (int64_t ib = b0; ib < b1; ib++) memcpy(yr + ib * SZ, xr + ib * xsb * SZ, SZ); \
            }                                                                             \
        }                                                                                 \
    }
        ESZ_SWITCH(esz, TRANSPOSE_TILES)
#undef TRANSPOSE_TILES
    } while (loop_next(&O, O.n, &p));
}

/* The loop L (y, then x at element offset 0 of x) restricted to [r0, r1) of its outermost
 * axis, on the session's threads (nrv_plan_for_rows over that axis): the blocked transpose
 * along the source's axis q (q >= 0), else row copies. Each element is a copy, so any range
 * does the same. For transpose and slice. */
typedef struct copy_loop_job {
    const nd_loop *L;
    int q;
    char *y;
    const char *x;
    size_t esz;
} copy_loop_job;

static void copy_loop_range(void *ctx, int64_t r0, int64_t r1) {
    const copy_loop_job *j = ctx;
    nd_loop S = *j->L;
    S.cnt[0] = r1 - r0;
    char *y = j->y + r0 * S.st[0][0] * (int64_t)j->esz;
    const char *x = j->x + r0 * S.st[1][0] * (int64_t)j->esz;
    if (j->q >= 0) run_transpose_blocked(&S, j->q, y, x, j->esz);
    else run_copy_loop(&S, y, x, 0, j->esz);
}

static void copy_loop_parallel(nrv_threadpool *pool, const nd_loop *L, int q, char *y, const char *x, size_t esz,
                               int64_t numel) {
    copy_loop_job j = {L, q, y, x, esz};
    nrv_plan_for_rows(pool, L->cnt[0], numel / L->cnt[0], copy_loop_range, &j);
}

/* transpose: y = x with axes permuted, y.dims[i] = x.dims[perm[i]].
 *  in[0] x (any dtype, rank r); out[0] y, same dtype, rank r.
 *  iattr: perm[r], a permutation of 0..r-1 (n_iattr == r; rank 0 takes none).
 *  fattr, dattr: none (ignored). Not in place.
 *  Axes that stay contiguous together are merged first; when x's innermost axis stays the
 *  innermost, rows are memcpy'd; otherwise a 32 x 32 blocked transpose. Ranges of the
 *  outermost merged axis go to the session's threads (nrv_plan_for_rows). */
static nrv_status op_transpose(const nrv_op_args *a) {
    const nrv_tview *x;
    nrv_tview *y;
    NRV_TRY(x_to_y_same_dtype(a, &x, &y));
    const int r = x->rank;
    if (a->n_iattr != r)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "perm has %d entries for x of rank %d", a->n_iattr, r);
    int seen[NRV_PLAN_MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        const int64_t p = a->iattr[i];
        if (p < 0 || p >= r || seen[p])
            return OPFAIL(a, NRV_ERR_INVALID_ARG, "perm[%d] = %lld: not a permutation of 0..%d", i, (long long)p,
                          r - 1);
        seen[p] = 1;
    }
    if (y->rank != r) return OPFAIL(a, NRV_ERR_SHAPE, "y has rank %d, x has rank %d", (int)y->rank, r);
    for (int i = 0; i < r; i++)
        if (y->dims[i] != x->dims[a->iattr[i]]) {
            char b1[128], b2[128];
            return OPFAIL(a, NRV_ERR_SHAPE, "y dims %s are not x dims %s permuted (axis %d)",
                          nrv_op_fmt_dims(b1, sizeof b1, y), nrv_op_fmt_dims(b2, sizeof b2, x), i);
        }
    if (y->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    int64_t xs[NRV_PLAN_MAX_RANK], ys[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, xs);
    nrv_strides_of(y, ys);
    nd_loop L;
    L.n = r;
    L.nv = 2;
    for (int j = 0; j < r; j++) {
        L.cnt[j] = y->dims[j];
        L.st[0][j] = ys[j];
        L.st[1][j] = xs[a->iattr[j]];
    }
    loop_simplify(&L);
    const int inner = L.n - 1;
    int blocked = -1; /* the source's contiguous axis, when it is not the innermost */
    if (L.st[1][inner] != 1)
        for (int q = 0; q < inner && blocked < 0; q++)
            if (L.st[1][q] == 1) blocked = q;
    copy_loop_parallel(a->pool, &L, blocked, y->data, x->data, esz, y->numel);
    return NRV_OK;
}

/* ------------------------------------------------------------------ concat / split */

/* Checks that part (input or output `what` of a concat/split) matches whole on every axis but
 * ax, and has its dtype and rank. */
static nrv_status check_part(const nrv_op_args *a, const nrv_tview *part, const char *what, int idx,
                             const nrv_tview *whole, const char *whole_what, int ax) {
    char w[48];
    snprintf(w, sizeof w, "%s %d", what, idx);
    NRV_TRY(nrv_op_check_view(a, part, w));
    NRV_TRY(same_dtype(a, part, w, whole, whole_what));
    int ok = part->rank == whole->rank;
    for (int d = 0; ok && d < whole->rank; d++) ok = d == ax || part->dims[d] == whole->dims[d];
    if (!ok) {
        char b1[128], b2[128];
        return OPFAIL(a, NRV_ERR_SHAPE, "%s dims %s do not match %s dims %s outside axis %d", w,
                      nrv_op_fmt_dims(b1, sizeof b1, part), whole_what, nrv_op_fmt_dims(b2, sizeof b2, whole), ax);
    }
    return NRV_OK;
}

/* outer chunks of len bytes: chunk o from src + o·src_stride to dst + o·dst_stride (concat
 * and split). Short chunks (a rotary embedding's interleave concatenates 4-byte elements
 * along a new last axis: a memcpy call per chunk was ~60 ns, most of the op's time) get
 * loops with the length known to the compiler. memmove: the loader allows an output at its
 * input's exact offset (elementwise ops in place), which a crafted plan can give a split, so
 * the chunks may overlap; the bytes are then garbage, but the behaviour is defined. */
static void copy_chunks(char *dst, size_t dst_stride, const char *src, size_t src_stride, size_t len,
                        int64_t outer) {
#define COPY_CHUNKS(n)                                                                                        \
    for (int64_t o = 0; o < outer; o++) memmove(dst + (size_t)o * dst_stride, src + (size_t)o * src_stride, (n)); \
    return;
    switch (len) {
    case 4: COPY_CHUNKS(4)
    case 8: COPY_CHUNKS(8)
    case 16: COPY_CHUNKS(16)
    default: COPY_CHUNKS(len)
    }
#undef COPY_CHUNKS
}

/* Ranges of concat's y for the threads: of its outer indices (each input's chunk of every
 * outer index copied as before), or with one outer index, of its lines along the axis (the
 * inputs' runs that overlap the range). */
typedef struct concat_job {
    const nrv_op_args *a;
    int ax;
    int by_outer;
    size_t line; /* bytes of one index along the axis */
} concat_job;

static void concat_range(void *ctx, int64_t r0, int64_t r1) {
    const concat_job *j = ctx;
    const nrv_op_args *a = j->a;
    char *y = a->out[0]->data;
    if (j->by_outer) {
        const size_t row = (size_t)a->out[0]->dims[j->ax] * j->line; /* y's bytes per outer index */
        size_t off = 0;
        for (int i = 0; i < a->n_in; i++) { /* input by input: the chunk length is fixed per input */
            const size_t len = (size_t)a->in[i]->dims[j->ax] * j->line;
            if (len)
                copy_chunks(y + (size_t)r0 * row + off, row, (const char *)a->in[i]->data + (size_t)r0 * len, len, len,
                            r1 - r0);
            off += len;
        }
        return;
    }
    int64_t start = 0; /* input i's first line in y */
    for (int i = 0; i < a->n_in && start < r1; i++) {
        const int64_t d = a->in[i]->dims[j->ax], lo = start > r0 ? start : r0, hi = start + d < r1 ? start + d : r1;
        if (hi > lo)
            memmove(y + (size_t)lo * j->line, (const char *)a->in[i]->data + (size_t)(lo - start) * j->line,
                    (size_t)(hi - lo) * j->line);
        start += d;
    }
}

/* concat: y = x0, x1, ... joined along axis.
 *  in[0..n) x_i (n >= 1; any dtype, all y's dtype and rank, dims equal to y's except on axis);
 *  out[0] y: y.dims[axis] = sum of x_i.dims[axis].
 *  iattr: [axis] (0 <= axis < rank; negative counts from the end). fattr, dattr: none. */
static nrv_status op_concat(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, INT_MAX, 1, 1, -1));
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], y->rank, &ax));
    int64_t sum = 0;
    for (int i = 0; i < a->n_in; i++) {
        NRV_TRY(nrv_op_require_input(a, i));
        NRV_TRY(check_part(a, a->in[i], "input", i, y, "y", ax));
        sum += a->in[i]->dims[ax]; /* each <= numel of its view: no overflow for n < 2^31 */
        if (sum > y->dims[ax]) break;
    }
    if (sum != y->dims[ax])
        return OPFAIL(a, NRV_ERR_SHAPE, "inputs add up to %s%lld along axis %d, y has %lld",
                      sum > y->dims[ax] ? "more than " : "", (long long)sum, (int)ax, (long long)y->dims[ax]);
    if (y->numel == 0) return NRV_OK;
    const int64_t outer = nrv_dims_product(y->dims, 0, ax), inner = nrv_dims_product(y->dims, ax + 1, y->rank);
    concat_job j = {a, ax, outer > 1, (size_t)inner * nrv_dtype_size((nrv_dtype)y->dtype)};
    if (j.by_outer) nrv_plan_for_rows(a->pool, outer, y->numel / outer, concat_range, &j);
    else nrv_plan_for_rows(a->pool, y->dims[ax], inner, concat_range, &j);
    return NRV_OK;
}

/* split: the inverse of concat.
 *  in[0] x (any dtype); out[0..n) y_i (n >= 1; x's dtype and rank, dims equal to x's except
 *  on axis, where they add up to x.dims[axis]: the split sizes are the outputs' dims).
 *  iattr: [axis] (0 <= axis < rank; negative counts from the end). fattr, dattr: none. */
static nrv_status op_split(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, -1, 1, -1));
    if (a->n_out < 1) return OPFAIL(a, NRV_ERR_INVALID_ARG, "%s", "no outputs");
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    int64_t sum = 0;
    for (int i = 0; i < a->n_out; i++) {
        NRV_TRY(check_part(a, a->out[i], "output", i, x, "x", ax));
        sum += a->out[i]->dims[ax];
        if (sum > x->dims[ax]) break;
    }
    if (sum != x->dims[ax])
        return OPFAIL(a, NRV_ERR_SHAPE, "outputs add up to %s%lld along axis %d, x has %lld",
                      sum > x->dims[ax] ? "more than " : "", (long long)sum, (int)ax, (long long)x->dims[ax]);
    if (x->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    const int64_t outer = nrv_dims_product(x->dims, 0, ax);
    const size_t inner = (size_t)nrv_dims_product(x->dims, ax + 1, x->rank) * esz;
    const size_t row = (size_t)x->dims[ax] * inner; /* x's bytes per outer index */
    size_t off = 0;
    for (int i = 0; i < a->n_out; i++) {
        const size_t len = (size_t)a->out[i]->dims[ax] * inner;
        if (len) copy_chunks(a->out[i]->data, len, (const char *)x->data + off, row, len, outer);
        off += len;
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ slice */

/* slice: y[i_0, ..] = x[starts[0] + i_0 * steps[0], ..] for i_d < y.dims[d].
 *  in[0] x (any dtype, rank r); out[0] y, same dtype, rank r (y's dims are the counts).
 *  iattr: [r, steps[r]] (n_iattr == 1 + r; every step != 0, negative allowed).
 *  dattr: starts[r] (n_dattr == r): index in x of the first element taken on each axis.
 *  fattr: none. For every axis with y.dims[d] > 0: 0 <= start < x.dims[d] and
 *  start + (y.dims[d] - 1) * step in [0, x.dims[d]), else NRV_ERR_SHAPE. Not in place. */
static nrv_status op_slice(const nrv_op_args *a) {
    const nrv_tview *x;
    nrv_tview *y;
    NRV_TRY(x_to_y_same_dtype(a, &x, &y));
    const int r = x->rank;
    if (a->n_iattr < 1 || a->iattr[0] != r || a->n_iattr != 1 + r)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "iattr must be [rank=%d, steps[%d]]; got %d values, rank %lld", r, r,
                      a->n_iattr, a->n_iattr > 0 ? (long long)a->iattr[0] : -1LL);
    if (a->n_dattr != r)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "dattr must be starts[%d]; got %d values", r, a->n_dattr);
    if (y->rank != r) return OPFAIL(a, NRV_ERR_SHAPE, "y has rank %d, x has rank %d", (int)y->rank, r);
    const int64_t *steps = a->iattr + 1, *starts = a->dattr;
    for (int d = 0; d < r; d++) {
        const int64_t step = steps[d], start = starts[d], cnt = y->dims[d], dim = x->dims[d];
        if (step == 0) return OPFAIL(a, NRV_ERR_INVALID_ARG, "step on axis %d is 0", d);
        if (cnt == 0) continue;
        int64_t last;
        if (start < 0 || start >= dim || __builtin_mul_overflow(cnt - 1, step, &last) ||
            __builtin_add_overflow(last, start, &last) || last < 0 || last >= dim)
            return OPFAIL(a, NRV_ERR_SHAPE,
                          "axis %d: %lld elements from %lld by step %lld do not fit in x's extent %lld", d,
                          (long long)cnt, (long long)start, (long long)step, (long long)dim);
    }
    if (y->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    int64_t xs[NRV_PLAN_MAX_RANK], ys[NRV_PLAN_MAX_RANK];
    nrv_strides_of(x, xs);
    nrv_strides_of(y, ys);
    nd_loop L;
    L.n = r;
    L.nv = 2;
    int64_t base = 0;
    for (int d = 0; d < r; d++) {
        base += starts[d] * xs[d];
        L.cnt[d] = y->dims[d];
        L.st[0][d] = ys[d];
        L.st[1][d] = y->dims[d] > 1 ? steps[d] * xs[d] : 0; /* |step| < dim here: no overflow */
    }
    loop_simplify(&L);
    copy_loop_parallel(a->pool, &L, -1, y->data, (const char *)x->data + base * (int64_t)esz, esz, y->numel);
    return NRV_OK;
}

/* ------------------------------------------------------------------ gather */

/* gather (ONNX Gather): y = data taken along axis at indices.
 *  in[0] data (any dtype, rank r >= 1); in[1] indices (I64 or I32, any rank q incl. 0);
 *  out[0] y, data's dtype: y.dims = data.dims[:axis] + indices.dims + data.dims[axis+1:].
 *  iattr: [axis] (0 <= axis < r; negative counts from the end). fattr, dattr: none.
 *  A negative index counts from the end; one outside [-dim, dim) is NRV_ERR_INDEX naming its
 *  flat position and value, checked for all indices before anything is written. */
static nrv_status op_gather(const nrv_op_args *a) {
    const nrv_tview *x, *ind;
    nrv_tview *y;
    NRV_TRY(nrv_op_gather_operands(a, &x, &ind, &y));
    NRV_TRY(same_dtype(a, y, "y", x, "data"));
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], x->rank, &ax));
    const int r = x->rank, q = ind->rank;
    int ok = y->rank == r - 1 + q;
    for (int d = 0; ok && d < y->rank; d++) {
        const int64_t want = d < ax ? x->dims[d] : d < ax + q ? ind->dims[d - ax] : x->dims[d - q + 1];
        ok = y->dims[d] == want;
    }
    if (!ok) {
        char b1[128], b2[128], b3[128];
        return OPFAIL(a, NRV_ERR_SHAPE, "y dims %s do not match data %s gathered on axis %d by indices %s",
                      nrv_op_fmt_dims(b1, sizeof b1, y), nrv_op_fmt_dims(b2, sizeof b2, x), (int)ax,
                      nrv_op_fmt_dims(b3, sizeof b3, ind));
    }
    const int64_t dim = x->dims[ax], n_idx = ind->numel;
    NRV_TRY(nrv_op_check_indices(a, ind, dim, "the gathered axis of data"));
    if (y->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    const int64_t outer = nrv_dims_product(x->dims, 0, ax);
    const int64_t inner = nrv_dims_product(x->dims, ax + 1, r);
    const size_t blk = (size_t)inner * esz;
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++) {
        const char *src = (const char *)x->data + (size_t)(o * dim) * blk;
        if (inner == 1) {
#define GATHER_ELEMS(SZ)                                      \
    for (int64_t i = 0; i < n_idx; i++) {                     \
        int64_t v = nrv_index_at(ind, i);                         \
        if (v < 0) v += dim;                                  \
        memcpy(dst + i * SZ, src + v * SZ, SZ);               \
    }
            ESZ_SWITCH(esz, GATHER_ELEMS)
#undef GATHER_ELEMS
            dst += (size_t)n_idx * esz;
        } else {
            for (int64_t i = 0; i < n_idx; i++) {
                int64_t v = nrv_index_at(ind, i);
                if (v < 0) v += dim;
                memcpy(dst, src + (size_t)v * blk, blk);
                dst += blk;
            }
        }
    }
    return NRV_OK;
}

/* gather_q8: rows of an int8 table, dequantised: y[i, :] = table[ind[i], :] · s + z with s
 * and z per row (s[ind[i]]) or per tensor (s[0]). The compiler emits it for a Gather on axis 0
 * of a table stored as int8 in the model (Cast, Mul by a scale, optionally Add of an offset):
 * the table stays int8 in the plan, a quarter of its fp32 bytes, and each value is the one the
 * folded table held: the fp32 product, rounded, then the fp32 sum, rounded (two operations,
 * as the graph's Mul and Add; this file is built without FP contraction).
 *  in[0] table i8 [rows, dim]; in[1] indices (I64 or I32, any rank); in[2] s f32 [rows] or
 *  [1]; in[3] z f32 [rows] or [1], optional; out[0] y f32 [indices.dims..., dim]. No
 *  attributes. Indices as for gather (negative from the end; out of range: NRV_ERR_INDEX,
 *  nothing written). */
static nrv_status op_gather_q8(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 4, 1, 0, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "table"));
    NRV_TRY(nrv_op_check_in(a, 1, "indices"));
    NRV_TRY(nrv_op_check_in(a, 2, "s"));
    const nrv_tview *t = a->in[0], *ind = a->in[1], *sv = a->in[2], *zv = a->n_in > 3 ? a->in[3] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    if (t->dtype != NRV_I8 || t->rank != 2)
        return OPFAIL(a, NRV_ERR_DTYPE, "table must be a 2-D i8 tensor, got %s of rank %d",
                      nrv_dtype_str((nrv_dtype)t->dtype), (int)t->rank);
    NRV_TRY(nrv_op_index_dtype(a, ind));
    const int64_t rows = t->dims[0], dim = t->dims[1];
    if (sv->dtype != NRV_F32 || sv->rank != 1 || (sv->dims[0] != rows && sv->dims[0] != 1))
        return OPFAIL(a, NRV_ERR_SHAPE, "s must be f32 [%lld] or [1]", (long long)rows);
    if (zv) {
        NRV_TRY(nrv_op_check_view(a, zv, "z"));
        if (zv->dtype != NRV_F32 || zv->rank != 1 || (zv->dims[0] != rows && zv->dims[0] != 1))
            return OPFAIL(a, NRV_ERR_SHAPE, "z must be f32 [%lld] or [1]", (long long)rows);
    }
    int ok = y->dtype == NRV_F32 && y->rank == ind->rank + 1 && y->dims[y->rank - 1] == dim;
    for (int d = 0; ok && d < ind->rank; d++) ok = y->dims[d] == ind->dims[d];
    if (!ok) {
        char b1[128], b2[128];
        return OPFAIL(a, NRV_ERR_SHAPE, "y (%s %s) must be f32 with dims indices %s + [%lld]",
                      nrv_dtype_str((nrv_dtype)y->dtype), nrv_op_fmt_dims(b1, sizeof b1, y),
                      nrv_op_fmt_dims(b2, sizeof b2, ind), (long long)dim);
    }
    NRV_TRY(nrv_op_check_indices(a, ind, rows, "the table's rows"));
    const int8_t *table = t->data;
    const float *s = sv->data, *z = zv ? zv->data : NULL;
    float *dst = y->data;
    for (int64_t i = 0; i < ind->numel; i++) {
        int64_t v = nrv_index_at(ind, i);
        if (v < 0) v += rows;
        const float sc = s[sv->dims[0] == 1 ? 0 : v];
        const int8_t *src = table + v * dim;
        if (z) {
            const float off = z[zv->dims[0] == 1 ? 0 : v];
            for (int64_t k = 0; k < dim; k++) {
                const float p = (float)src[k] * sc; /* rounded here, as the graph's Mul */
                dst[k] = p + off;
            }
        } else {
            for (int64_t k = 0; k < dim; k++) dst[k] = (float)src[k] * sc;
        }
        dst += dim;
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ expand / where */

/* expand: y = x broadcast numpy-style to y's dims (x's dims right-aligned, each 1 or equal to
 *  y's; x.rank <= y.rank). Also serves Tile-like broadcasts.
 *  in[0] x (any dtype); out[0] y, same dtype. iattr, fattr, dattr: none. Not in place. */
static nrv_status op_expand(const nrv_op_args *a) {
    const nrv_tview *x;
    nrv_tview *y;
    NRV_TRY(x_to_y_same_dtype(a, &x, &y));
    nd_loop L;
    L.n = y->rank;
    L.nv = 2;
    NRV_TRY(broadcast_strides(a, x, "x", y, L.st[1]));
    if (y->numel == 0) return NRV_OK;
    nrv_strides_of(y, L.st[0]);
    for (int d = 0; d < y->rank; d++) L.cnt[d] = y->dims[d];
    loop_simplify(&L);
    run_copy_loop(&L, y->data, x->data, 0, nrv_dtype_size((nrv_dtype)y->dtype));
    return NRV_OK;
}

/* where: z = cond ? x : y, elementwise, all three broadcast numpy-style to z's dims.
 *  in[0] cond (BOOL; a nonzero byte is true); in[1] x, in[2] y (same dtype, any);
 *  out[0] z, x's dtype. iattr, fattr, dattr: none. Not in place. */
static nrv_status op_where(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, -1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "cond"));
    NRV_TRY(nrv_op_check_in(a, 1, "x"));
    NRV_TRY(nrv_op_check_in(a, 2, "y"));
    const nrv_tview *c = a->in[0], *x = a->in[1], *y = a->in[2];
    nrv_tview *z = a->out[0];
    NRV_TRY(nrv_op_check_view(a, z, "z"));
    NRV_TRY(nrv_op_expect_dtype(a, c, "cond", NRV_BOOL));
    NRV_TRY(same_dtype(a, y, "y", x, "x"));
    NRV_TRY(same_dtype(a, z, "z", x, "x"));
    nd_loop L;
    L.n = z->rank;
    L.nv = 4;
    NRV_TRY(broadcast_strides(a, c, "cond", z, L.st[1]));
    NRV_TRY(broadcast_strides(a, x, "x", z, L.st[2]));
    NRV_TRY(broadcast_strides(a, y, "y", z, L.st[3]));
    if (z->numel == 0) return NRV_OK;
    nrv_strides_of(z, L.st[0]);
    for (int d = 0; d < z->rank; d++) L.cnt[d] = z->dims[d];
    loop_simplify(&L);
    const size_t esz = nrv_dtype_size((nrv_dtype)z->dtype);
    const int inner = L.n - 1;
    const int64_t n = L.cnt[inner], cs = L.st[1][inner], xs = L.st[2][inner], ysn = L.st[3][inner];
    nd_pos p;
    pos_init(&p, &L, NULL);
    do {
        char *zp = (char *)z->data + p.off[0] * (int64_t)esz;
        const uint8_t *cp = (const uint8_t *)c->data + p.off[1];
        const char *xp = (const char *)x->data + p.off[2] * (int64_t)esz;
        const char *yp = (const char *)y->data + p.off[3] * (int64_t)esz;
#define SELECT(SZ) \
    for (int64_t i = 0; i < n; i++) memcpy(zp + i * SZ, cp[i * cs] ? xp + i * xs * SZ : yp + i * ysn * SZ, SZ)
        ESZ_SWITCH(esz, SELECT)
#undef SELECT
    } while (loop_next(&L, inner, &p));
    return NRV_OK;
}

/* ------------------------------------------------------------------ trilu */

/* trilu (ONNX Trilu): keeps the upper or lower triangle of each trailing M x N matrix,
 *  zeroes the rest (all-zero bytes: 0, 0.0, false).
 *  in[0] x [..., M, N] (any dtype, rank >= 2); out[0] y, same dtype and dims.
 *  iattr: [upper (0 or 1), k]: upper keeps y[i, j] with j - i >= k, lower keeps j - i <= k.
 *  fattr, dattr: none. In place ok. */
static nrv_status op_trilu(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 2, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(same_dtype(a, y, "y", x, "x"));
    if (x->rank < 2) return OPFAIL(a, NRV_ERR_SHAPE, "x has rank %d, needs at least 2", (int)x->rank);
    NRV_TRY(nrv_op_same_dims(a, y, "y", x, "x"));
    const int64_t upper = a->iattr[0];
    if (upper != 0 && upper != 1)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "upper is %lld, expected 0 or 1", (long long)upper);
    if (y->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)x->dtype);
    const int64_t m = x->dims[x->rank - 2], n = x->dims[x->rank - 1];
    const int64_t rows = x->numel / n; /* batch * m */
    int64_t k = a->iattr[1];
    const int64_t lim = m + n; /* both >= 1, m * n <= numel: no overflow */
    if (k > lim) k = lim;
    if (k < -lim) k = -lim;
    const int in_place = y->data == x->data;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r % m;
        int64_t lo, hi; /* kept columns [lo, hi) */
        if (upper) {
            lo = i + k;
            hi = n;
        } else {
            lo = 0;
            hi = i + k + 1;
        }
        if (lo < 0) lo = 0;
        if (lo > n) lo = n;
        if (hi < lo) hi = lo;
        if (hi > n) hi = n;
        char *yr = (char *)y->data + (size_t)(r * n) * esz;
        const char *xr = (const char *)x->data + (size_t)(r * n) * esz;
        if (lo > 0) memset(yr, 0, (size_t)lo * esz);
        if (hi > lo && !in_place) memcpy(yr + lo * (int64_t)esz, xr + lo * (int64_t)esz, (size_t)(hi - lo) * esz);
        if (hi < n) memset(yr + hi * (int64_t)esz, 0, (size_t)(n - hi) * esz);
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ range */

static nrv_status check_scalar(const nrv_op_args *a, int i, const char *what, int32_t dtype) {
    NRV_TRY(nrv_op_check_in(a, i, what));
    const nrv_tview *v = a->in[i];
    if (v->dtype != dtype)
        return OPFAIL(a, NRV_ERR_DTYPE, "%s is %s, y is %s", what, nrv_dtype_str((nrv_dtype)v->dtype),
                      nrv_dtype_str((nrv_dtype)dtype));
    if (v->numel != 1) return OPFAIL(a, NRV_ERR_SHAPE, "%s has %lld elements, expected 1", what, (long long)v->numel);
    return NRV_OK;
}

/* The length of Range(start, limit, delta) with in[0..2] scalars of dtype dt, as ONNX defines
 * it, max(ceil((limit - start) / delta), 0): *n with the quotient in double; for F32 also
 * *n_float, the count with the quotient in float (exporters and runtimes compute either; -1
 * when that one is not finite). delta == 0, a non-finite length or an overflowing int64
 * difference is NRV_ERR_INVALID_ARG. */
static nrv_status range_length(const nrv_op_args *a, int32_t dt, int64_t *n, int64_t *n_float) {
    NRV_TRY(check_scalar(a, 0, "start", dt));
    NRV_TRY(check_scalar(a, 1, "limit", dt));
    NRV_TRY(check_scalar(a, 2, "delta", dt));
    if (dt == NRV_F32) {
        const float s = *(const float *)a->in[0]->data, l = *(const float *)a->in[1]->data,
                    d = *(const float *)a->in[2]->data;
        if (d == 0.0f) return OPFAIL(a, NRV_ERR_INVALID_ARG, "%s", "delta is 0");
        const double qd = ceil(((double)l - (double)s) / (double)d);
        const double qf = ceilf((l - s) / d);
        if (!(fabs(qd) < 0x1p62))
            return OPFAIL(a, NRV_ERR_INVALID_ARG, "range from %g to %g by %g has no finite length", (double)s,
                          (double)l, (double)d);
        *n = qd > 0 ? (int64_t)qd : 0;
        *n_float = !(fabs(qf) < 0x1p62) ? -1 : qf > 0 ? (int64_t)qf : 0;
        return NRV_OK;
    }
    const int64_t s = nrv_int_at(a->in[0], 0), l = nrv_int_at(a->in[1], 0), d = nrv_int_at(a->in[2], 0);
    if (d == 0) return OPFAIL(a, NRV_ERR_INVALID_ARG, "%s", "delta is 0");
    int64_t diff;
    if (__builtin_sub_overflow(l, s, &diff) || (d == -1 && diff == INT64_MIN))
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "range from %lld to %lld by %lld overflows", (long long)s,
                      (long long)l, (long long)d);
    int64_t q = diff / d;
    if (diff % d != 0 && ((diff < 0) == (d < 0))) q++; /* ceil for a positive quotient */
    *n = *n_float = q < 0 ? 0 : q;
    return NRV_OK;
}

static nrv_status check_range_dtype(const nrv_op_args *a, int32_t dt, const char *what) {
    if (dt != NRV_F32 && dt != NRV_I32 && dt != NRV_I64)
        return OPFAIL(a, NRV_ERR_DTYPE, "%s is %s, expected f32, i32 or i64", what, nrv_dtype_str((nrv_dtype)dt));
    return NRV_OK;
}

/* range (ONNX Range): y[i] = start + i * delta for i < y.dims[0].
 *  in[0] start, in[1] limit, in[2] delta: one-element (rank-0) tensors of y's dtype;
 *  out[0] y, 1-D, F32, I32 or I64. iattr, fattr, dattr: none.
 *  delta == 0 is NRV_ERR_INVALID_ARG. y.dims[0] must be max(ceil((limit - start) / delta), 0)
 *  (NRV_ERR_SHAPE otherwise); for F32 the quotient may have been computed in float or in
 *  double (either count is accepted) and each value is computed in double, then rounded. */
static nrv_status op_range(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, -1, -1));
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    const int32_t dt = y->dtype;
    NRV_TRY(check_range_dtype(a, dt, "y"));
    if (y->rank != 1) return OPFAIL(a, NRV_ERR_SHAPE, "y has rank %d, expected 1", (int)y->rank);
    int64_t nd, nf;
    NRV_TRY(range_length(a, dt, &nd, &nf));
    const int64_t n = y->dims[0];
    if (n != nd && n != nf)
        return OPFAIL(a, NRV_ERR_SHAPE, "y has %lld elements, the range has %lld", (long long)n, (long long)nd);
    if (dt == NRV_F32) {
        const double s = *(const float *)a->in[0]->data, d = *(const float *)a->in[2]->data;
        float *out = y->data;
        for (int64_t i = 0; i < n; i++) out[i] = (float)(s + (double)i * d);
        return NRV_OK;
    }
    /* every value lies between start and limit: no overflow (computed unsigned all the same) */
    const int64_t s = nrv_int_at(a->in[0], 0), d = nrv_int_at(a->in[2], 0);
    if (dt == NRV_I64) {
        int64_t *out = y->data;
        for (int64_t i = 0; i < n; i++) out[i] = (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d);
    } else {
        int32_t *out = y->data;
        for (int64_t i = 0; i < n; i++) out[i] = (int32_t)(s + i * d);
    }
    return NRV_OK;
}

/* range_count: the length of a Range whose bounds the data decides, for the set_dim that
 * sizes the range op after it (the compiler's run-time Range).
 *  in[0] start, in[1] limit, in[2] delta: one-element tensors of one dtype (F32, I32, I64);
 *  out[0] n, I64, one element: max(ceil((limit - start) / delta), 0), the quotient in double.
 *  iattr, fattr, dattr: none. Errors as range's. */
static nrv_status op_range_count(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 3, 1, -1, -1));
    nrv_tview *n = a->out[0];
    NRV_TRY(nrv_op_check_view(a, n, "n"));
    NRV_TRY(nrv_op_expect_dtype(a, n, "n", NRV_I64));
    if (n->numel != 1) return OPFAIL(a, NRV_ERR_SHAPE, "n has %lld elements, expected 1", (long long)n->numel);
    NRV_TRY(nrv_op_check_in(a, 0, "start"));
    NRV_TRY(check_range_dtype(a, a->in[0]->dtype, "start"));
    int64_t nd, nf;
    NRV_TRY(range_length(a, a->in[0]->dtype, &nd, &nf));
    *(int64_t *)n->data = nd;
    return NRV_OK;
}

/* ------------------------------------------------------------------ random */

/* 64 well-mixed bits from (seed, counter): the splitmix64 finaliser of the counter's point on
 * a Weyl sequence started at the seed. A pure function of the element's index, so the values
 * do not depend on how the work is split, nor on earlier runs. */
static inline uint64_t random_bits(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* random (ONNX RandomNormal, RandomUniform and their *Like forms): y[i] drawn from the
 * distribution by a counter-based generator, a function of (seed, i) alone: the same values on
 * every run, with any thread count, on every machine (up to libm's rounding of log and cos).
 *  No inputs; out[0] y F32 (any shape).
 *  iattr: [distribution (0 normal, 1 uniform), seed (any int64)].
 *  fattr: normal [mean, scale]: Box-Muller on two 32-bit uniforms, |y - mean| < 6.7 scale;
 *         uniform [low, high]: low + (high - low) u for a 24-bit u in [0, 1), clamped below
 *         high (NRV_ERR_INVALID_ARG unless low <= high, both finite). dattr: none. */
static nrv_status op_random(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 0, 0, 1, 2, 2));
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    const int64_t dist = a->iattr[0];
    const uint64_t seed = (uint64_t)a->iattr[1];
    const double p0 = a->fattr[0], p1 = a->fattr[1];
    float *out = y->data;
    if (dist == 0) {
        if (!isfinite(p0) || !isfinite(p1))
            return OPFAIL(a, NRV_ERR_INVALID_ARG, "normal with mean %g and scale %g", p0, p1);
        for (int64_t i = 0; i < y->numel; i++) {
            const uint64_t h = random_bits(seed, (uint64_t)i);
            const double u1 = ((double)(h >> 32) + 1.0) * 0x1p-32; /* (0, 1]: log is finite */
            const double u2 = (double)(h & 0xffffffffu) * 0x1p-32;
            out[i] = (float)(p0 + p1 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        }
        return NRV_OK;
    }
    if (dist != 1) return OPFAIL(a, NRV_ERR_INVALID_ARG, "distribution %lld (0 normal, 1 uniform)", (long long)dist);
    if (!isfinite(p0) || !isfinite(p1) || p0 > p1)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "uniform from %g to %g", p0, p1);
    const float below_high = p1 > p0 ? nextafterf((float)p1, (float)p0) : (float)p0;
    for (int64_t i = 0; i < y->numel; i++) {
        const double u = (double)(random_bits(seed, (uint64_t)i) >> 40) * 0x1p-24;
        const float v = (float)(p0 + (p1 - p0) * u);
        out[i] = v < below_high ? v : below_high;
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ cast */

#define CAST_CHUNK 256

static int is_float_dtype(int32_t dt) { return dt == NRV_F32 || dt == NRV_F16 || dt == NRV_F64; }

/* b[0, n) = x[off, off + n) as double (exact for f16, f32, f64). */
static void load_f64(const void *x, int32_t dt, int64_t off, int n, double *b) {
    switch (dt) {
    case NRV_F32: {
        const float *p = (const float *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    case NRV_F16: {
        const uint16_t *p = (const uint16_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = nrv_half_to_float(p[i]);
        break;
    }
    default: {
        const double *p = (const double *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    }
}

/* b[0, n) = x[off, off + n) as int64 (BOOL: any nonzero byte is 1). */
static void load_i64(const void *x, int32_t dt, int64_t off, int n, int64_t *b) {
    switch (dt) {
    case NRV_I8: {
        const int8_t *p = (const int8_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    case NRV_U8: {
        const uint8_t *p = (const uint8_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    case NRV_BOOL: {
        const uint8_t *p = (const uint8_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i] != 0;
        break;
    }
    case NRV_I32: {
        const int32_t *p = (const int32_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    default: {
        const int64_t *p = (const int64_t *)x + off;
        for (int i = 0; i < n; i++) b[i] = p[i];
        break;
    }
    }
}

/* Truncates toward zero and saturates to [lo, hi_excl) (both exact doubles); NaN is 0. */
static inline int64_t f2i_sat(double v, double lo, double hi_excl, int64_t ilo, int64_t ihi) {
    if (v != v) return 0;
    const double t = trunc(v);
    if (t < lo) return ilo;
    if (t >= hi_excl) return ihi;
    return (int64_t)t;
}

static void store_from_f64(void *y, int32_t dt, int64_t off, int n, const double *b) {
    switch (dt) {
    case NRV_F32: {
        float *p = (float *)y + off;
        for (int i = 0; i < n; i++) p[i] = (float)b[i];
        break;
    }
    case NRV_F16: {
        uint16_t *p = (uint16_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = nrv_float_to_half((float)b[i]);
        break;
    }
    case NRV_F64: {
        double *p = (double *)y + off;
        for (int i = 0; i < n; i++) p[i] = b[i];
        break;
    }
    case NRV_I8: {
        int8_t *p = (int8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (int8_t)f2i_sat(b[i], -128.0, 128.0, INT8_MIN, INT8_MAX);
        break;
    }
    case NRV_U8: {
        uint8_t *p = (uint8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (uint8_t)f2i_sat(b[i], 0.0, 256.0, 0, UINT8_MAX);
        break;
    }
    case NRV_I32: {
        int32_t *p = (int32_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (int32_t)f2i_sat(b[i], -0x1p31, 0x1p31, INT32_MIN, INT32_MAX);
        break;
    }
    case NRV_I64: {
        int64_t *p = (int64_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = f2i_sat(b[i], -0x1p63, 0x1p63, INT64_MIN, INT64_MAX);
        break;
    }
    default: { /* BOOL */
        uint8_t *p = (uint8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = b[i] != 0.0;
        break;
    }
    }
}

static void store_from_i64(void *y, int32_t dt, int64_t off, int n, const int64_t *b) {
    switch (dt) {
    case NRV_F32: {
        float *p = (float *)y + off;
        for (int i = 0; i < n; i++) p[i] = (float)b[i];
        break;
    }
    case NRV_F16: {
        uint16_t *p = (uint16_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = nrv_float_to_half((float)b[i]);
        break;
    }
    case NRV_F64: {
        double *p = (double *)y + off;
        for (int i = 0; i < n; i++) p[i] = (double)b[i];
        break;
    }
    case NRV_I8: {
        int8_t *p = (int8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (int8_t)(uint8_t)(uint64_t)b[i];
        break;
    }
    case NRV_U8: {
        uint8_t *p = (uint8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (uint8_t)(uint64_t)b[i];
        break;
    }
    case NRV_I32: {
        int32_t *p = (int32_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = (int32_t)(uint32_t)(uint64_t)b[i];
        break;
    }
    case NRV_I64: {
        int64_t *p = (int64_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = b[i];
        break;
    }
    default: { /* BOOL */
        uint8_t *p = (uint8_t *)y + off;
        for (int i = 0; i < n; i++) p[i] = b[i] != 0;
        break;
    }
    }
}

/* The conversions dynamic quantization runs on every layer (f32 <-> u8/i8/i32), as direct
 * loops with the semantics below: the generic path goes through double/int64 chunks, and
 * ddddocr's int8 model spent 21% of its time in 175 such casts. Returns 0 for other pairs. */
static int cast_fast(int32_t from, int32_t to, const void *x, void *y, int64_t n) {
    if (from == NRV_F32) {
        const float *src = x;
        switch (to) {
        case NRV_U8: { /* truncate, saturate to [0, 255], NaN -> 0 */
            uint8_t *dst = y;
            for (int64_t i = 0; i < n; i++) {
                float t = src[i] > -1.0f ? src[i] : 0.0f; /* NaN, and everything truncating below 0 */
                t = t < 255.0f ? t : 255.0f;
                dst[i] = (uint8_t)(int32_t)t;
            }
            return 1;
        }
        case NRV_I8: { /* truncate, saturate to [-128, 127], NaN -> 0 */
            int8_t *dst = y;
            for (int64_t i = 0; i < n; i++) {
                const float v = src[i];
                float t = v > -128.0f ? v : -128.0f;
                t = t < 127.0f ? t : 127.0f;
                dst[i] = (int8_t)(v == v ? (int32_t)t : 0);
            }
            return 1;
        }
        case NRV_I32: { /* truncate, saturate, NaN -> 0; selects on the input and the result
                           only, so the loop vectorizes (the nested conditional ran one value a
                           cycle: a quarter of int8 MobileNetV2's depthwise route) */
            int32_t *dst = y;
            for (int64_t i = 0; i < n; i++) {
                const float v = src[i];
                const float inside = v > -0x1p31f && v < 0x1p31f ? v : 0.0f; /* NaN: 0 */
                int32_t r = (int32_t)inside;
                r = v >= 0x1p31f ? INT32_MAX : r;
                r = v <= -0x1p31f ? INT32_MIN : r;
                dst[i] = r;
            }
            return 1;
        }
        default: return 0;
        }
    }
    if (to != NRV_F32) return 0;
    float *dst = y;
    switch (from) { /* integers -> f32: round to nearest (exact below 2^24) */
    case NRV_U8: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const uint8_t *)x)[i]; return 1;
    case NRV_I8: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int8_t *)x)[i]; return 1;
    case NRV_I32: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)x)[i]; return 1;
    case NRV_BOOL: /* any nonzero byte is 1 (a one-hot Equal's mask: magika's 2048 x 257, 0.56 -> ~0.1 ns a value) */
        for (int64_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)x)[i] != 0 ? 1.0f : 0.0f;
        return 1;
    default: return 0;
    }
}

/* cast (ONNX Cast): y = x converted elementwise.
 *  in[0] x; out[0] y, same numel (dims may differ); both of F32, F16, F64, I8, U8, I32, I64,
 *  BOOL in any combination. iattr, fattr, dattr: none. Not in place (unless same dtype).
 *  - float -> integer: truncates toward zero; values beyond the integer type saturate to its
 *    limits (U8: negatives give 0); NaN gives 0. (ONNX leaves these undefined.)
 *  - integer -> narrower integer: wraps (two's complement), like ONNX Runtime and numpy.
 *  - anything -> BOOL: x != 0 (NaN is true); BOOL -> number: 0 or 1 (any nonzero byte is 1).
 *  - F16 through nrv_half_to_float / nrv_float_to_half (round to nearest even); F64 -> F16
 *    rounds to float first; integers -> floats round to nearest.
 *  fattr (optional, 2): [zd, sd], a U8 or I8 x dequantized into an F32 y in the same pass:
 *    y = ((float)x − zd)·sd, the float steps of Cast, Sub and Mul (DequantizeLinear of an
 *    activation; the compiler's fuse_dequantize). */
typedef struct cast_job {
    const nrv_tview *x, *y;
    int dequantize; /* codes to f32: ((float)x - zd)·sd */
    float zd, sd;
} cast_job;

/* Elements [i0, i1) (each on its own: any range gives the same values). */
static void cast_range(void *ctx, int64_t i0, int64_t i1) {
    const cast_job *j = ctx;
    const nrv_tview *x = j->x, *y = j->y;
    const size_t ex = nrv_dtype_size((nrv_dtype)x->dtype), ey = nrv_dtype_size((nrv_dtype)y->dtype);
    const void *xs = (const char *)x->data + (size_t)i0 * ex;
    void *ys = (char *)y->data + (size_t)i0 * ey;
    const int64_t n = i1 - i0;
    if (j->dequantize) {
        nrv_dequantize_codes(xs, x->dtype, n, j->zd, j->sd, ys);
        return;
    }
    if (cast_fast(x->dtype, y->dtype, xs, ys, n)) return;
    if (is_float_dtype(x->dtype)) {
        double b[CAST_CHUNK];
        for (int64_t off = 0; off < n; off += CAST_CHUNK) {
            const int c = (int)(n - off < CAST_CHUNK ? n - off : CAST_CHUNK);
            load_f64(xs, x->dtype, off, c, b);
            store_from_f64(ys, y->dtype, off, c, b);
        }
    } else {
        int64_t b[CAST_CHUNK];
        for (int64_t off = 0; off < n; off += CAST_CHUNK) {
            const int c = (int)(n - off < CAST_CHUNK ? n - off : CAST_CHUNK);
            load_i64(xs, x->dtype, off, c, b);
            store_from_i64(ys, y->dtype, off, c, b);
        }
    }
}

static nrv_status op_cast(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, -1, -1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_same_numel(a, x, y, "x vs y"));
    if (a->n_fattr != 0 && a->n_fattr != 2)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%d float attributes, expected none or 2 (zd, sd)", a->n_fattr);
    if (a->n_fattr == 2 && ((x->dtype != NRV_U8 && x->dtype != NRV_I8) || y->dtype != NRV_F32))
        return nrv_op_fail(a, NRV_ERR_DTYPE, "dequantizing cast of %s to %s, expected u8 or i8 to f32",
                           nrv_dtype_str(x->dtype), nrv_dtype_str(y->dtype));
    const int64_t n = x->numel;
    if (n == 0) return NRV_OK;
    if (x->dtype == y->dtype) {
        if (y->data != x->data) memmove(y->data, x->data, (size_t)n * nrv_dtype_size((nrv_dtype)x->dtype));
        return NRV_OK;
    }
    cast_job j = {x, y, a->n_fattr == 2, a->n_fattr == 2 ? a->fattr[0] : 0.0f, a->n_fattr == 2 ? a->fattr[1] : 0.0f};
    nrv_plan_for_rows(a->pool, n, 1, cast_range, &j);
    return NRV_OK;
}

/* ------------------------------------------------------------------ fill / dims */

/* fill (ONNX ConstantOfShape and friends): every element of y = value.
 *  No inputs; out[0] y (any dtype).
 *  iattr: [int_value] used for I8, U8, I32, I64 (must fit the dtype, else
 *  NRV_ERR_INVALID_ARG) and BOOL (value != 0);
 *  fattr: [float_value] used for F32, F16, F64. Both are always present. dattr: none. */
static nrv_status op_fill(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 0, 0, 1, 1, 1));
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    const int64_t iv = a->iattr[0];
    const float fv = a->fattr[0];
    unsigned char e[8];
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    switch (y->dtype) {
    case NRV_F32: memcpy(e, &fv, 4); break;
    case NRV_F64: {
        const double d = fv;
        memcpy(e, &d, 8);
        break;
    }
    case NRV_F16: {
        const uint16_t h = nrv_float_to_half(fv);
        memcpy(e, &h, 2);
        break;
    }
    case NRV_BOOL: e[0] = iv != 0; break;
    case NRV_I8: lo = INT8_MIN; hi = INT8_MAX; e[0] = (uint8_t)(uint64_t)iv; break;
    case NRV_U8: lo = 0; hi = UINT8_MAX; e[0] = (uint8_t)(uint64_t)iv; break;
    case NRV_I32: {
        lo = INT32_MIN;
        hi = INT32_MAX;
        const int32_t v = (int32_t)(uint32_t)(uint64_t)iv;
        memcpy(e, &v, 4);
        break;
    }
    default: memcpy(e, &iv, 8); break; /* I64 */
    }
    if (iv < lo || iv > hi)
        return OPFAIL(a, NRV_ERR_INVALID_ARG, "value %lld does not fit in %s", (long long)iv,
                      nrv_dtype_str((nrv_dtype)y->dtype));
    if (y->numel == 0) return NRV_OK;
    const size_t esz = nrv_dtype_size((nrv_dtype)y->dtype);
    int uniform = 1;
    for (size_t i = 1; i < esz; i++) uniform &= e[i] == e[0];
    if (uniform) {
        memset(y->data, e[0], (size_t)y->numel * esz);
    } else {
        memcpy(y->data, e, esz);
        replicate(y->data, esz, y->numel);
    }
    return NRV_OK;
}

/* dims: materialises a shape computed from symbolic dims.
 *  No inputs; out[0] y I64, rank 1 of length n (rank 0 allowed when n == 1).
 *  dattr: values[n] (n_dattr == y.numel, else NRV_ERR_SHAPE): y[i] = dattr[i].
 *  iattr, fattr: none (ignored). */
static nrv_status op_dims(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 0, 0, 1, -1, -1));
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_I64));
    if (y->rank > 1) return OPFAIL(a, NRV_ERR_SHAPE, "y has rank %d, expected 1", (int)y->rank);
    if (y->numel != a->n_dattr)
        return OPFAIL(a, NRV_ERR_SHAPE, "y has %lld elements for %d values", (long long)y->numel, a->n_dattr);
    if (y->numel > 0) memcpy(y->data, a->dattr, (size_t)y->numel * sizeof(int64_t));
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_shape[] = {
    {"copy", op_copy, NULL},
    {"transpose", op_transpose, NULL},
    {"concat", op_concat, NULL},
    {"split", op_split, NULL},
    {"slice", op_slice, NULL},
    {"gather", op_gather, NULL},
    {"gather_q8", op_gather_q8, NULL},
    {"expand", op_expand, NULL},
    {"where", op_where, NULL},
    {"trilu", op_trilu, NULL},
    {"range", op_range, NULL},
    {"range_count", op_range_count, NULL},
    {"random", op_random, NULL},
    {"cast", op_cast, NULL},
    {"fill", op_fill, NULL},
    {"dims", op_dims, NULL},
    {NULL, NULL, NULL},
};
