/* test_plan_shape.c — the shape-family plan ops (op_shape.c) against naive references.
 *
 * Each op is looked up with nrv_plan_op_find and run on views built here by hand. The
 * "any dtype" ops (copy, transpose, concat, split, slice, gather, expand, where, trilu) are
 * fed random bytes in dtypes of every element size (1, 2, 4, 8) and compared byte for byte
 * with a reference that moves elements one at a time through explicit multi-indices; random
 * ranks 0..5 and awkward extents (1, 2, 3, 5, 7, 13, 33, 129). Inputs and outputs are
 * allocated to their exact size so an ASan build catches any access past them.
 * Error cases check the status and that the output still holds its sentinel bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

/* ------------------------------------------------------------------ helpers */

#include "nrv_plan_views.h"

static const int ALL_DTYPES[8] = {NRV_F32, NRV_F16, NRV_I8, NRV_I32, NRV_I64, NRV_U8, NRV_BOOL, NRV_F64};

static nrv_tview mk1(int dt, int64_t n) { return mk(dt, 1, &n); }

static void rnd_bytes(nrv_tview *v) {
    uint8_t *p = v->data;
    const size_t n = nbytes(v);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = nrv_test_u64();
        for (size_t k = i; k < n && k < i + 8; k++, r >>= 8) p[k] = (uint8_t)r;
    }
}

/* Random dims of rank r with numel <= cap (small extents more likely). */

static int64_t ravel(int rank, const int64_t *dims, const int64_t *idx) {
    int64_t f = 0;
    for (int d = 0; d < rank; d++) f = f * dims[d] + idx[d];
    return f;
}

/* One op invocation. */
typedef struct call {
    const nrv_tview *in[8];
    int n_in;
    nrv_tview *out[8];
    int n_out;
    int64_t iattr[32];
    int n_iattr;
    float fattr[4];
    int n_fattr;
    int64_t dattr[16];
    int n_dattr;
} call;

static call mkcall(void) {
    call c;
    memset(&c, 0, sizeof c);
    return c;
}

static nrv_status run(const char *type, const call *c) {
    const nrv_op_def *def = nrv_plan_op_find(type);
    if (!def) {
        NRV_EXPECT(def != NULL, "op '%s' is not registered", type);
        return NRV_ERR_INTERNAL;
    }
    nrv_op_args a;
    memset(&a, 0, sizeof a);
    a.type = type;
    a.name = "test_node";
    a.in = c->in;
    a.n_in = c->n_in;
    a.out = c->out;
    a.n_out = c->n_out;
    a.iattr = c->iattr;
    a.n_iattr = c->n_iattr;
    a.fattr = c->fattr;
    a.n_fattr = c->n_fattr;
    a.dattr = c->dattr;
    a.n_dattr = c->n_dattr;
    return def->run(&a);
}

/* Runs a unary-shaped op (in x, out y) expecting an error; checks y is untouched. */
static void expect_fail1(const char *type, const nrv_tview *x, nrv_tview *y, const int64_t *iattr, int n_iattr,
                         const int64_t *dattr, int n_dattr, nrv_status want, const char *what) {
    call c = mkcall();
    c.in[0] = x;
    c.n_in = x ? 1 : 0;
    c.out[0] = y;
    c.n_out = 1;
    for (int i = 0; i < n_iattr; i++) c.iattr[i] = iattr[i];
    c.n_iattr = n_iattr;
    for (int i = 0; i < n_dattr; i++) c.dattr[i] = dattr[i];
    c.n_dattr = n_dattr;
    const nrv_status s = run(type, &c);
    NRV_EXPECT(s == want, "%s %s: got %s, want %s (%s)", type, what, nrv_status_str(s), nrv_status_str(want),
               nrv_last_error());
    NRV_EXPECT(untouched(y), "%s %s: output written on error", type, what);
}

static int bytes_equal(const nrv_tview *y, const uint8_t *want, const char *what, int t) {
    if (memcmp(y->data, want, nbytes(y)) == 0) return 1;
    const uint8_t *p = y->data;
    size_t i = 0;
    while (p[i] == want[i]) i++;
    const size_t e = esz_of(y->dtype);
    fprintf(stderr, "  %s case %d: first difference at element %zu (dtype %s, rank %d)\n", what, t, i / e,
            nrv_dtype_str((nrv_dtype)y->dtype), (int)y->rank);
    return 0;
}

/* ------------------------------------------------------------------ copy */

static void test_copy(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 40; t++) {
        const int dt = ALL_DTYPES[t % 8];
        int64_t dims[5];
        const int r = (int)rnd(6);
        rand_dims(r, dims, 5000);
        nrv_tview x = mk(dt, r, dims);
        rnd_bytes(&x);
        int64_t n = x.numel;
        nrv_tview y = t % 2 ? mk(dt, 1, &n) : mk(dt, r, dims);
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &y;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("copy", &c), NRV_OK);
        cases++;
        ok += memcmp(x.data, y.data, nbytes(&x)) == 0;
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "copy: %d of %d cases match", ok, cases);
    {
        int64_t d1[2] = {3, 4}, d2[1] = {13};
        nrv_tview x = mk(NRV_F32, 2, d1), y = mk(NRV_F32, 1, d2), yi = mk(NRV_I32, 2, d1);
        expect_fail1("copy", &x, &y, NULL, 0, NULL, 0, NRV_ERR_SHAPE, "numel mismatch");
        expect_fail1("copy", &x, &yi, NULL, 0, NULL, 0, NRV_ERR_DTYPE, "dtype mismatch");
        nrv_tview bad = x;
        bad.numel = 99; /* dims say 12 */
        expect_fail1("copy", &bad, &yi, NULL, 0, NULL, 0, NRV_ERR_SHAPE, "numel vs dims");
        freev(&x);
        freev(&y);
        freev(&yi);
    }
    printf("copy: %d cases\n", cases);
}

/* ------------------------------------------------------------------ transpose */

static void transpose_case(int dt, int r, const int64_t *xd, const int *perm, int *ok, int *cases) {
    nrv_tview x = mk(dt, r, xd);
    rnd_bytes(&x);
    int64_t yd[NRV_PLAN_MAX_RANK];
    for (int i = 0; i < r; i++) yd[i] = xd[perm[i]];
    nrv_tview y = mk(dt, r, yd);
    call c = mkcall();
    c.in[0] = &x;
    c.n_in = 1;
    c.out[0] = &y;
    c.n_out = 1;
    for (int i = 0; i < r; i++) c.iattr[i] = perm[i];
    c.n_iattr = r;
    NRV_EXPECT_STATUS(run("transpose", &c), NRV_OK);
    const size_t e = esz_of(dt);
    uint8_t *want = malloc(nbytes(&y) + 1);
    int64_t yi[NRV_PLAN_MAX_RANK], xi[NRV_PLAN_MAX_RANK];
    for (int64_t f = 0; f < y.numel; f++) {
        unravel(f, r, yd, yi);
        for (int j = 0; j < r; j++) xi[perm[j]] = yi[j];
        memcpy(want + f * e, (uint8_t *)x.data + ravel(r, xd, xi) * e, e);
    }
    (*cases)++;
    *ok += bytes_equal(&y, want, "transpose", *cases);
    free(want);
    freev(&x);
    freev(&y);
}

static void test_transpose(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 300; t++) {
        const int r = t % 6;
        int64_t xd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 6000);
        int perm[NRV_PLAN_MAX_RANK];
        for (int i = 0; i < r; i++) perm[i] = i;
        for (int i = r - 1; i > 0; i--) {
            const int j = (int)rnd(i + 1), tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        transpose_case(ALL_DTYPES[t % 8], r, xd, perm, &ok, &cases);
    }
    /* the blocked 2-D path and the row path at sizes that straddle tiles */
    static const int64_t d2[2] = {129, 33}, d3[3] = {7, 33, 129}, d4[4] = {3, 13, 33, 5};
    static const int p2[2] = {1, 0}, p3a[3] = {2, 0, 1}, p3b[3] = {1, 0, 2}, p3c[3] = {2, 1, 0},
                     p4[4] = {0, 2, 1, 3};
    for (int k = 0; k < 8; k++) {
        transpose_case(ALL_DTYPES[k], 2, d2, p2, &ok, &cases);
        transpose_case(ALL_DTYPES[k], 3, d3, p3a, &ok, &cases);
        transpose_case(ALL_DTYPES[k], 3, d3, p3b, &ok, &cases);
        transpose_case(ALL_DTYPES[k], 3, d3, p3c, &ok, &cases);
        transpose_case(ALL_DTYPES[k], 4, d4, p4, &ok, &cases);
    }
    NRV_EXPECT(ok == cases, "transpose: %d of %d cases match", ok, cases);
    {
        int64_t xd[3] = {2, 3, 4}, yd[3] = {4, 3, 2}, bad[3] = {4, 2, 3};
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 3, yd), yb = mk(NRV_F32, 3, bad);
        rnd_bytes(&x);
        const int64_t dup[3] = {2, 1, 1}, big[3] = {3, 1, 0}, neg[3] = {-1, 1, 0}, good[3] = {2, 1, 0};
        expect_fail1("transpose", &x, &y, dup, 3, NULL, 0, NRV_ERR_INVALID_ARG, "duplicate perm");
        expect_fail1("transpose", &x, &y, big, 3, NULL, 0, NRV_ERR_INVALID_ARG, "perm out of range");
        expect_fail1("transpose", &x, &y, neg, 3, NULL, 0, NRV_ERR_INVALID_ARG, "negative perm");
        expect_fail1("transpose", &x, &y, good, 2, NULL, 0, NRV_ERR_INVALID_ARG, "short perm");
        expect_fail1("transpose", &x, &yb, good, 3, NULL, 0, NRV_ERR_SHAPE, "wrong y dims");
        freev(&x);
        freev(&y);
        freev(&yb);
    }
    printf("transpose: %d cases\n", cases);
}

/* ------------------------------------------------------------------ concat / split */

static void concat_split_case(int split, int t, int *ok, int *cases) {
    const int dt = ALL_DTYPES[t % 8];
    const int r = 1 + (int)rnd(5);
    int64_t wd[NRV_PLAN_MAX_RANK];
    rand_dims(r, wd, 4000);
    const int ax = (int)rnd(r);
    const int n = 1 + (int)rnd(4);
    int64_t ext[4], total = 0;
    for (int i = 0; i < n; i++) {
        ext[i] = rnd(5) == 0 ? 0 : 1 + rnd(wd[ax] < 7 ? 7 : wd[ax]);
        total += ext[i];
    }
    wd[ax] = total;
    nrv_tview whole = mk(dt, r, wd);
    nrv_tview parts[4];
    int64_t offs[4], off = 0;
    for (int i = 0; i < n; i++) {
        int64_t pd[NRV_PLAN_MAX_RANK];
        memcpy(pd, wd, sizeof pd);
        pd[ax] = ext[i];
        parts[i] = mk(dt, r, pd);
        offs[i] = off;
        off += ext[i];
    }
    call c = mkcall();
    c.iattr[0] = ax;
    c.n_iattr = 1;
    if (split) {
        rnd_bytes(&whole);
        c.in[0] = &whole;
        c.n_in = 1;
        for (int i = 0; i < n; i++) c.out[i] = &parts[i];
        c.n_out = n;
    } else {
        for (int i = 0; i < n; i++) {
            rnd_bytes(&parts[i]);
            c.in[i] = &parts[i];
        }
        c.n_in = n;
        c.out[0] = &whole;
        c.n_out = 1;
    }
    NRV_EXPECT_STATUS(run(split ? "split" : "concat", &c), NRV_OK);
    const size_t e = esz_of(dt);
    int good = 1;
    int64_t idx[NRV_PLAN_MAX_RANK];
    for (int i = 0; i < n; i++) {
        for (int64_t f = 0; f < parts[i].numel; f++) {
            unravel(f, r, parts[i].dims, idx);
            idx[ax] += offs[i];
            const int64_t g = ravel(r, wd, idx);
            if (memcmp((uint8_t *)parts[i].data + f * e, (uint8_t *)whole.data + g * e, e) != 0) good = 0;
        }
    }
    if (!good)
        fprintf(stderr, "  %s case %d (rank %d, axis %d, %d parts) differs\n", split ? "split" : "concat", t, r, ax,
                n);
    (*cases)++;
    *ok += good;
    freev(&whole);
    for (int i = 0; i < n; i++) freev(&parts[i]);
}

static void test_concat_split(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 150; t++) concat_split_case(0, t, &ok, &cases);
    NRV_EXPECT(ok == cases, "concat: %d of %d cases match", ok, cases);
    printf("concat: %d cases\n", cases);
    ok = cases = 0;
    for (int t = 0; t < 150; t++) concat_split_case(1, t, &ok, &cases);
    NRV_EXPECT(ok == cases, "split: %d of %d cases match", ok, cases);
    printf("split: %d cases\n", cases);

    int64_t a[2] = {2, 3}, b[2] = {2, 4}, bad[2] = {3, 4}, yd[2] = {2, 7}, yd8[2] = {2, 8};
    nrv_tview xa = mk(NRV_F32, 2, a), xb = mk(NRV_F32, 2, b), xbad = mk(NRV_F32, 2, bad), xi = mk(NRV_I32, 2, b);
    nrv_tview y = mk(NRV_F32, 2, yd), y8 = mk(NRV_F32, 2, yd8);
    rnd_bytes(&xa);
    rnd_bytes(&xb);
    rnd_bytes(&xbad);
    rnd_bytes(&xi);
    struct {
        const nrv_tview *p, *q;
        nrv_tview *y;
        int64_t axis;
        nrv_status want;
        const char *what;
    } cs[] = {
        {&xa, &xbad, &y, 1, NRV_ERR_SHAPE, "dims differ off axis"},
        {&xa, &xb, &y8, 1, NRV_ERR_SHAPE, "extents do not add up"},
        {&xa, &xb, &y, 2, NRV_ERR_INVALID_ARG, "axis out of range"},
        {&xa, &xi, &y, 1, NRV_ERR_DTYPE, "dtype mismatch"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        call c = mkcall();
        c.in[0] = cs[k].p;
        c.in[1] = cs[k].q;
        c.n_in = 2;
        c.out[0] = cs[k].y;
        c.n_out = 1;
        c.iattr[0] = cs[k].axis;
        c.n_iattr = 1;
        const nrv_status s = run("concat", &c);
        NRV_EXPECT(s == cs[k].want, "concat %s: got %s (%s)", cs[k].what, nrv_status_str(s), nrv_last_error());
        NRV_EXPECT(untouched(cs[k].y), "concat %s: output written", cs[k].what);
    }
    /* split: outputs that do not add up / differ off axis */
    {
        int64_t xd[2] = {2, 7};
        nrv_tview x = mk(NRV_F32, 2, xd);
        rnd_bytes(&x);
        nrv_tview o1 = mk(NRV_F32, 2, a), o2 = mk(NRV_F32, 2, a), o3 = mk(NRV_F32, 2, bad);
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &o1;
        c.out[1] = &o2;
        c.n_out = 2;
        c.iattr[0] = 1;
        c.n_iattr = 1;
        NRV_EXPECT_STATUS(run("split", &c), NRV_ERR_SHAPE);
        c.out[1] = &o3;
        NRV_EXPECT_STATUS(run("split", &c), NRV_ERR_SHAPE);
        NRV_EXPECT(untouched(&o1) && untouched(&o2) && untouched(&o3), "%s", "split: outputs written on error");
        freev(&x);
        freev(&o1);
        freev(&o2);
        freev(&o3);
    }
    freev(&xa);
    freev(&xb);
    freev(&xbad);
    freev(&xi);
    freev(&y);
    freev(&y8);
}

/* ------------------------------------------------------------------ slice */

static void test_slice(void) {
    static const int64_t STEPS[] = {1, 1, 1, 2, 3, -1, -1, -2, -3, 5};
    int ok = 0, cases = 0;
    for (int t = 0; t < 300; t++) {
        const int dt = ALL_DTYPES[t % 8];
        const int r = t % 6;
        int64_t xd[NRV_PLAN_MAX_RANK], yd[NRV_PLAN_MAX_RANK], start[NRV_PLAN_MAX_RANK], step[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 6000);
        for (int d = 0; d < r; d++) {
            step[d] = STEPS[rnd(10)];
            start[d] = rnd(xd[d]);
            const int64_t maxc = step[d] > 0 ? (xd[d] - 1 - start[d]) / step[d] + 1 : start[d] / -step[d] + 1;
            const int64_t pick = rnd(8);
            yd[d] = pick < 4 ? maxc : pick == 4 ? 1 : pick == 5 && t % 7 == 0 ? 0 : 1 + rnd(maxc);
            if (rnd(4) == 0 && step[d] == 1 && t % 3 == 0) { /* full axis: exercises row merging */
                start[d] = 0;
                yd[d] = xd[d];
            }
        }
        nrv_tview x = mk(dt, r, xd), y = mk(dt, r, yd);
        rnd_bytes(&x);
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &y;
        c.n_out = 1;
        c.iattr[0] = r;
        for (int d = 0; d < r; d++) {
            c.iattr[1 + d] = step[d];
            c.dattr[d] = start[d];
        }
        c.n_iattr = 1 + r;
        c.n_dattr = r;
        NRV_EXPECT_STATUS(run("slice", &c), NRV_OK);
        const size_t e = esz_of(dt);
        uint8_t *want = malloc(nbytes(&y) + 1);
        int64_t yi[NRV_PLAN_MAX_RANK], xi[NRV_PLAN_MAX_RANK];
        for (int64_t f = 0; f < y.numel; f++) {
            unravel(f, r, yd, yi);
            for (int d = 0; d < r; d++) xi[d] = start[d] + yi[d] * step[d];
            memcpy(want + f * e, (uint8_t *)x.data + ravel(r, xd, xi) * e, e);
        }
        cases++;
        ok += bytes_equal(&y, want, "slice", t);
        free(want);
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "slice: %d of %d cases match", ok, cases);
    {
        int64_t xd[2] = {5, 7}, yd[2] = {3, 4};
        nrv_tview x = mk(NRV_I64, 2, xd), y = mk(NRV_I64, 2, yd);
        rnd_bytes(&x);
        const int64_t good_i[3] = {2, 1, 2}, zero_step[3] = {2, 0, 1}, big_step[3] = {2, INT64_MAX, 1},
                      wrong_rank[3] = {3, 1, 1}, neg_step[3] = {2, -2, 1};
        const int64_t good_d[2] = {0, 0}, far_d[2] = {3, 0}, neg_d[2] = {-1, 0}, late_d[2] = {0, 1};
        expect_fail1("slice", &x, &y, zero_step, 3, good_d, 2, NRV_ERR_INVALID_ARG, "step 0");
        expect_fail1("slice", &x, &y, big_step, 3, good_d, 2, NRV_ERR_SHAPE, "step overflows");
        expect_fail1("slice", &x, &y, wrong_rank, 3, good_d, 2, NRV_ERR_INVALID_ARG, "iattr rank");
        expect_fail1("slice", &x, &y, good_i, 2, good_d, 2, NRV_ERR_INVALID_ARG, "short iattr");
        expect_fail1("slice", &x, &y, good_i, 3, good_d, 1, NRV_ERR_INVALID_ARG, "short dattr");
        expect_fail1("slice", &x, &y, good_i, 3, far_d, 2, NRV_ERR_SHAPE, "runs past the end");
        expect_fail1("slice", &x, &y, good_i, 3, neg_d, 2, NRV_ERR_SHAPE, "negative start");
        expect_fail1("slice", &x, &y, good_i, 3, late_d, 2, NRV_ERR_SHAPE, "axis 1 runs past the end");
        expect_fail1("slice", &x, &y, neg_step, 3, good_d, 2, NRV_ERR_SHAPE, "negative step below 0");
        freev(&x);
        freev(&y);
    }
    printf("slice: %d cases\n", cases);
}

/* ------------------------------------------------------------------ gather */

static void test_gather(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 200; t++) {
        const int dt = ALL_DTYPES[t % 8];
        const int idt = t % 2 ? NRV_I32 : NRV_I64;
        const int r = 1 + (int)rnd(4), q = (int)rnd(4);
        int64_t xd[NRV_PLAN_MAX_RANK], id[NRV_PLAN_MAX_RANK], yd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 4000);
        rand_dims(q, id, 40);
        const int ax = (int)rnd(r);
        const int yr = r - 1 + q;
        for (int d = 0; d < yr; d++) yd[d] = d < ax ? xd[d] : d < ax + q ? id[d - ax] : xd[d - q + 1];
        nrv_tview x = mk(dt, r, xd), ind = mk(idt, q, id);
        int64_t yn = 1;
        for (int d = 0; d < yr; d++) yn *= yd[d];
        if (yn > 20000) {
            freev(&x);
            freev(&ind);
            continue;
        }
        nrv_tview y = mk(dt, yr, yd);
        rnd_bytes(&x);
        const int64_t dim = xd[ax];
        for (int64_t i = 0; i < ind.numel; i++) {
            const int64_t v = rnd(2 * dim) - dim; /* [-dim, dim) */
            if (idt == NRV_I64) ((int64_t *)ind.data)[i] = v;
            else ((int32_t *)ind.data)[i] = (int32_t)v;
        }
        call c = mkcall();
        c.in[0] = &x;
        c.in[1] = &ind;
        c.n_in = 2;
        c.out[0] = &y;
        c.n_out = 1;
        c.iattr[0] = ax;
        c.n_iattr = 1;
        NRV_EXPECT_STATUS(run("gather", &c), NRV_OK);
        const size_t e = esz_of(dt);
        uint8_t *want = malloc(nbytes(&y) + 1);
        int64_t yi[NRV_PLAN_MAX_RANK], xi[NRV_PLAN_MAX_RANK], ii[NRV_PLAN_MAX_RANK];
        for (int64_t f = 0; f < y.numel; f++) {
            unravel(f, yr, yd, yi);
            for (int d = 0; d < q; d++) ii[d] = yi[ax + d];
            const int64_t fi = ravel(q, id, ii);
            int64_t v = idt == NRV_I64 ? ((int64_t *)ind.data)[fi] : ((int32_t *)ind.data)[fi];
            if (v < 0) v += dim;
            for (int d = 0; d < r; d++) xi[d] = d < ax ? yi[d] : d == ax ? v : yi[d + q - 1];
            memcpy(want + f * e, (uint8_t *)x.data + ravel(r, xd, xi) * e, e);
        }
        cases++;
        ok += bytes_equal(&y, want, "gather", t);
        free(want);

        /* one index out of range -> NRV_ERR_INDEX naming it, nothing written */
        if (ind.numel > 0) {
            memset(y.data, SENTINEL, nbytes(&y));
            const int64_t pos = rnd(ind.numel), bad = t % 4 < 2 ? dim + rnd(3) : -dim - 1 - rnd(3);
            if (idt == NRV_I64) ((int64_t *)ind.data)[pos] = bad;
            else ((int32_t *)ind.data)[pos] = (int32_t)bad;
            const nrv_status s = run("gather", &c);
            NRV_EXPECT(s == NRV_ERR_INDEX, "gather bad index: got %s (%s)", nrv_status_str(s), nrv_last_error());
            NRV_EXPECT(untouched(&y), "%s", "gather bad index: output written");
            char needle[64];
            snprintf(needle, sizeof needle, "indices[%lld] = %lld", (long long)pos, (long long)bad);
            NRV_EXPECT(strstr(nrv_last_error(), needle) != NULL, "gather error '%s' should name '%s'",
                       nrv_last_error(), needle);
        }
        freev(&x);
        freev(&ind);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "gather: %d of %d cases match", ok, cases);
    {
        int64_t xd[2] = {4, 3}, id[1] = {2}, yd[2] = {2, 3}, ybad[2] = {3, 3};
        nrv_tview x = mk(NRV_F32, 2, xd), ind = mk(NRV_I64, 1, id), indf = mk(NRV_F32, 1, id);
        nrv_tview y = mk(NRV_F32, 2, yd), yb = mk(NRV_F32, 2, ybad);
        rnd_bytes(&x);
        ((int64_t *)ind.data)[0] = 1;
        ((int64_t *)ind.data)[1] = -4;
        memset(indf.data, 0, nbytes(&indf));
        struct {
            const nrv_tview *i;
            nrv_tview *y;
            int64_t ax;
            nrv_status want;
            const char *what;
        } cs[] = {
            {&ind, &yb, 0, NRV_ERR_SHAPE, "wrong y dims"},
            {&indf, &y, 0, NRV_ERR_DTYPE, "float indices"},
            {&ind, &y, 2, NRV_ERR_INVALID_ARG, "axis out of range"},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            call c = mkcall();
            c.in[0] = &x;
            c.in[1] = cs[k].i;
            c.n_in = 2;
            c.out[0] = cs[k].y;
            c.n_out = 1;
            c.iattr[0] = cs[k].ax;
            c.n_iattr = 1;
            const nrv_status s = run("gather", &c);
            NRV_EXPECT(s == cs[k].want, "gather %s: got %s (%s)", cs[k].what, nrv_status_str(s), nrv_last_error());
            NRV_EXPECT(untouched(cs[k].y), "gather %s: output written", cs[k].what);
        }
        /* rank-0 index: y = one row; -4 is the first row */
        nrv_tview i0 = mk(NRV_I32, 0, NULL), y0 = mk(NRV_F32, 1, &xd[1]);
        ((int32_t *)i0.data)[0] = -4;
        call c = mkcall();
        c.in[0] = &x;
        c.in[1] = &i0;
        c.n_in = 2;
        c.out[0] = &y0;
        c.n_out = 1;
        c.n_iattr = 1;
        NRV_EXPECT_STATUS(run("gather", &c), NRV_OK);
        NRV_EXPECT(memcmp(y0.data, x.data, 3 * sizeof(float)) == 0, "%s", "gather rank-0 index -4 != row 0");
        freev(&i0);
        freev(&y0);
        freev(&x);
        freev(&ind);
        freev(&indf);
        freev(&y);
        freev(&yb);
    }
    printf("gather: %d cases\n", cases);
}

/* ------------------------------------------------------------------ expand / where */

/* Random dims for an operand broadcast to out (rank <= out rank, each dim 1 or equal). */
static int bcast_dims(int yr, const int64_t *yd, int64_t *xd) {
    const int xr = (int)rnd(yr + 1);
    for (int d = 0; d < xr; d++) {
        const int64_t full = yd[yr - xr + d];
        xd[d] = rnd(3) == 0 ? 1 : full;
    }
    return xr;
}

/* Flat index into an operand of rank xr, dims xd broadcast to y coordinates yi (rank yr). */
static int64_t bcast_index(int yr, const int64_t *yi, int xr, const int64_t *xd) {
    int64_t xi[NRV_PLAN_MAX_RANK];
    for (int d = 0; d < xr; d++) xi[d] = xd[d] == 1 ? 0 : yi[yr - xr + d];
    return ravel(xr, xd, xi);
}

static void test_expand_where(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 250; t++) {
        const int dt = ALL_DTYPES[t % 8];
        const int yr = t % 6;
        int64_t yd[NRV_PLAN_MAX_RANK], xd[NRV_PLAN_MAX_RANK];
        rand_dims(yr, yd, 6000);
        const int xr = bcast_dims(yr, yd, xd);
        nrv_tview x = mk(dt, xr, xd), y = mk(dt, yr, yd);
        rnd_bytes(&x);
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &y;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("expand", &c), NRV_OK);
        const size_t e = esz_of(dt);
        uint8_t *want = malloc(nbytes(&y) + 1);
        int64_t yi[NRV_PLAN_MAX_RANK];
        for (int64_t f = 0; f < y.numel; f++) {
            unravel(f, yr, yd, yi);
            memcpy(want + f * e, (uint8_t *)x.data + bcast_index(yr, yi, xr, xd) * e, e);
        }
        cases++;
        ok += bytes_equal(&y, want, "expand", t);
        free(want);
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "expand: %d of %d cases match", ok, cases);
    printf("expand: %d cases\n", cases);
    {
        int64_t xd[2] = {2, 3}, yd[2] = {2, 4}, yd3[3] = {5, 2, 3}, yd1[1] = {3};
        nrv_tview x = mk(NRV_F16, 2, xd), y = mk(NRV_F16, 2, yd), y3 = mk(NRV_F16, 3, yd3), y1 = mk(NRV_F16, 1, yd1);
        nrv_tview y3i = mk(NRV_I8, 3, yd3);
        rnd_bytes(&x);
        expect_fail1("expand", &x, &y, NULL, 0, NULL, 0, NRV_ERR_SHAPE, "3 vs 4");
        expect_fail1("expand", &x, &y1, NULL, 0, NULL, 0, NRV_ERR_SHAPE, "rank above y's");
        expect_fail1("expand", &x, &y3i, NULL, 0, NULL, 0, NRV_ERR_DTYPE, "dtype mismatch");
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &y3;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("expand", &c), NRV_OK);
        NRV_EXPECT(memcmp((uint8_t *)y3.data + 4 * nbytes(&x), x.data, nbytes(&x)) == 0, "%s",
                   "expand [2,3] -> [5,2,3]: last block differs");
        freev(&x);
        freev(&y);
        freev(&y3);
        freev(&y1);
        freev(&y3i);
    }

    ok = cases = 0;
    for (int t = 0; t < 250; t++) {
        const int dt = ALL_DTYPES[t % 8];
        const int zr = t % 5;
        int64_t zd[NRV_PLAN_MAX_RANK], cd[NRV_PLAN_MAX_RANK], xd[NRV_PLAN_MAX_RANK], yd[NRV_PLAN_MAX_RANK];
        rand_dims(zr, zd, 5000);
        const int cr = bcast_dims(zr, zd, cd), xr = bcast_dims(zr, zd, xd), yr = bcast_dims(zr, zd, yd);
        nrv_tview cv = mk(NRV_BOOL, cr, cd), x = mk(dt, xr, xd), y = mk(dt, yr, yd), z = mk(dt, zr, zd);
        for (int64_t i = 0; i < cv.numel; i++) ((uint8_t *)cv.data)[i] = (uint8_t)(nrv_test_u64() & 1);
        rnd_bytes(&x);
        rnd_bytes(&y);
        call c = mkcall();
        c.in[0] = &cv;
        c.in[1] = &x;
        c.in[2] = &y;
        c.n_in = 3;
        c.out[0] = &z;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("where", &c), NRV_OK);
        const size_t e = esz_of(dt);
        uint8_t *want = malloc(nbytes(&z) + 1);
        int64_t zi[NRV_PLAN_MAX_RANK];
        for (int64_t f = 0; f < z.numel; f++) {
            unravel(f, zr, zd, zi);
            const int take_x = ((uint8_t *)cv.data)[bcast_index(zr, zi, cr, cd)] != 0;
            const uint8_t *src = take_x ? (uint8_t *)x.data + bcast_index(zr, zi, xr, xd) * e
                                        : (uint8_t *)y.data + bcast_index(zr, zi, yr, yd) * e;
            memcpy(want + f * e, src, e);
        }
        cases++;
        ok += bytes_equal(&z, want, "where", t);
        free(want);
        freev(&cv);
        freev(&x);
        freev(&y);
        freev(&z);
    }
    NRV_EXPECT(ok == cases, "where: %d of %d cases match", ok, cases);
    {
        int64_t d[2] = {3, 4}, d5[1] = {5};
        nrv_tview cb = mk(NRV_BOOL, 2, d), cu = mk(NRV_U8, 2, d), x = mk(NRV_F32, 2, d), xi = mk(NRV_I32, 2, d);
        nrv_tview x5 = mk(NRV_F32, 1, d5), z = mk(NRV_F32, 2, d);
        memset(cb.data, 1, 12);
        memset(cu.data, 1, 12);
        rnd_bytes(&x);
        rnd_bytes(&xi);
        rnd_bytes(&x5);
        struct {
            const nrv_tview *c, *x, *y;
            nrv_status want;
            const char *what;
        } cs[] = {
            {&cu, &x, &x, NRV_ERR_DTYPE, "u8 cond"},
            {&cb, &x, &xi, NRV_ERR_DTYPE, "x / y dtypes differ"},
            {&cb, &x, &x5, NRV_ERR_SHAPE, "y does not broadcast"},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            call c = mkcall();
            c.in[0] = cs[k].c;
            c.in[1] = cs[k].x;
            c.in[2] = cs[k].y;
            c.n_in = 3;
            c.out[0] = &z;
            c.n_out = 1;
            const nrv_status s = run("where", &c);
            NRV_EXPECT(s == cs[k].want, "where %s: got %s (%s)", cs[k].what, nrv_status_str(s), nrv_last_error());
            NRV_EXPECT(untouched(&z), "where %s: output written", cs[k].what);
        }
        freev(&cb);
        freev(&cu);
        freev(&x);
        freev(&xi);
        freev(&x5);
        freev(&z);
    }
    printf("where: %d cases\n", cases);
}

/* ------------------------------------------------------------------ trilu */

static void test_trilu(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 200; t++) {
        const int dt = ALL_DTYPES[t % 8];
        const int r = 2 + (int)rnd(3);
        int64_t xd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 5000);
        const int upper = (int)(t & 1);
        int64_t k = rnd(31) - 15;
        if (t % 23 == 0) k = INT64_MAX;
        if (t % 29 == 0) k = INT64_MIN;
        const int in_place = t % 3 == 0;
        nrv_tview x = mk(dt, r, xd);
        rnd_bytes(&x);
        nrv_tview y = mk(dt, r, xd);
        uint8_t *orig = malloc(nbytes(&x) + 1);
        memcpy(orig, x.data, nbytes(&x));
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = in_place ? &x : &y;
        c.n_out = 1;
        c.iattr[0] = upper;
        c.iattr[1] = k;
        c.n_iattr = 2;
        NRV_EXPECT_STATUS(run("trilu", &c), NRV_OK);
        const size_t e = esz_of(dt);
        uint8_t *want = malloc(nbytes(&x) + 1);
        const int64_t m = xd[r - 2], n = xd[r - 1];
        for (int64_t f = 0; f < x.numel; f++) {
            const int64_t i = (f / n) % m, j = f % n;
            /* j - i >= k (upper) / <= k (lower), without overflow for extreme k */
            const int keep = upper ? (k <= -(m + n) || (k < m + n && j - i >= k))
                                   : (k >= m + n || (k > -(m + n) && j - i <= k));
            if (keep) memcpy(want + f * e, orig + f * e, e);
            else memset(want + f * e, 0, e);
        }
        cases++;
        ok += bytes_equal(in_place ? &x : &y, want, "trilu", t);
        free(want);
        free(orig);
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "trilu: %d of %d cases match", ok, cases);
    {
        int64_t d1[1] = {4}, d2[2] = {3, 4}, d2b[2] = {4, 3};
        nrv_tview x1 = mk(NRV_F32, 1, d1), y1 = mk(NRV_F32, 1, d1), x = mk(NRV_F32, 2, d2), yb = mk(NRV_F32, 2, d2b);
        nrv_tview y = mk(NRV_F32, 2, d2);
        const int64_t attr[2] = {1, 0}, bad_upper[2] = {2, 0};
        expect_fail1("trilu", &x1, &y1, attr, 2, NULL, 0, NRV_ERR_SHAPE, "rank 1");
        expect_fail1("trilu", &x, &yb, attr, 2, NULL, 0, NRV_ERR_SHAPE, "y dims differ");
        expect_fail1("trilu", &x, &y, bad_upper, 2, NULL, 0, NRV_ERR_INVALID_ARG, "upper = 2");
        expect_fail1("trilu", &x, &y, attr, 1, NULL, 0, NRV_ERR_INVALID_ARG, "missing k");
        freev(&x1);
        freev(&y1);
        freev(&x);
        freev(&yb);
        freev(&y);
    }
    printf("trilu: %d cases\n", cases);
}

/* ------------------------------------------------------------------ range */

static nrv_status run_range(int dt, double s, double l, double d, nrv_tview *y) {
    nrv_tview v[3];
    const double vals[3] = {s, l, d};
    for (int i = 0; i < 3; i++) {
        v[i] = mk(dt, 0, NULL);
        if (dt == NRV_F32) *(float *)v[i].data = (float)vals[i];
        else if (dt == NRV_I32) *(int32_t *)v[i].data = (int32_t)vals[i];
        else *(int64_t *)v[i].data = (int64_t)vals[i];
    }
    call c = mkcall();
    for (int i = 0; i < 3; i++) c.in[i] = &v[i];
    c.n_in = 3;
    c.out[0] = y;
    c.n_out = 1;
    const nrv_status st = run("range", &c);
    for (int i = 0; i < 3; i++) freev(&v[i]);
    return st;
}

static void test_range(void) {
    static const struct {
        double s, l, d;
    } cs[] = {{0, 10, 1}, {0.5, 10, 0.7}, {10, -5, -4}, {-7, 20, 3}, {5, 5, 1}, {0, 10, -1}, {3, 1, 0.25},
              {-1, 1, 0.125}, {100, 0, -7}, {1, 130, 1}};
    static const int dts[3] = {NRV_F32, NRV_I32, NRV_I64};
    int cases = 0;
    for (int k = 0; k < 3; k++) {
        const int dt = dts[k];
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            const double s = cs[i].s, l = cs[i].l, d = cs[i].d;
            if (dt != NRV_F32 && (s != floor(s) || d != floor(d) || d == 0)) continue;
            double q = ceil((l - s) / d);
            const int64_t n = q > 0 ? (int64_t)q : 0;
            nrv_tview y = mk1(dt, n);
            NRV_EXPECT_STATUS(run_range(dt, s, l, d, &y), NRV_OK);
            int good = 1;
            for (int64_t j = 0; j < n; j++) {
                const double want = s + (double)j * d;
                const double got = dt == NRV_F32 ? ((float *)y.data)[j]
                                 : dt == NRV_I32 ? ((int32_t *)y.data)[j]
                                                 : (double)((int64_t *)y.data)[j];
                if (fabs(got - want) > 1e-6 * (1 + fabs(want))) good = 0;
            }
            NRV_EXPECT(good, "range %s (%g, %g, %g): wrong values", nrv_dtype_str((nrv_dtype)dt), s, l, d);
            cases++;
            freev(&y);
            /* a wrong length */
            nrv_tview yb = mk1(dt, n + 1);
            NRV_EXPECT_STATUS(run_range(dt, s, l, d, &yb), NRV_ERR_SHAPE);
            NRV_EXPECT(untouched(&yb), "%s", "range wrong length: output written");
            freev(&yb);
        }
        nrv_tview y0 = mk1(dt, 0);
        NRV_EXPECT_STATUS(run_range(dt, 0, 5, 0, &y0), NRV_ERR_INVALID_ARG);
        freev(&y0);
    }
    {
        /* int64 extremes: the count needs no overflow, the difference would */
        nrv_tview y = mk1(NRV_I64, 3);
        nrv_tview v[3] = {mk(NRV_I64, 0, NULL), mk(NRV_I64, 0, NULL), mk(NRV_I64, 0, NULL)};
        *(int64_t *)v[0].data = INT64_MAX - 10;
        *(int64_t *)v[1].data = INT64_MAX;
        *(int64_t *)v[2].data = 4;
        call c = mkcall();
        for (int i = 0; i < 3; i++) c.in[i] = &v[i];
        c.n_in = 3;
        c.out[0] = &y;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("range", &c), NRV_OK);
        NRV_EXPECT(((int64_t *)y.data)[2] == INT64_MAX - 2, "range near INT64_MAX: %lld",
                   (long long)((int64_t *)y.data)[2]);
        *(int64_t *)v[0].data = INT64_MIN;
        NRV_EXPECT_STATUS(run("range", &c), NRV_ERR_INVALID_ARG);
        /* mixed dtypes */
        nrv_tview f = mk(NRV_F32, 0, NULL);
        *(float *)f.data = 1.0f;
        c.in[2] = &f;
        *(int64_t *)v[0].data = 0;
        NRV_EXPECT_STATUS(run("range", &c), NRV_ERR_DTYPE);
        for (int i = 0; i < 3; i++) freev(&v[i]);
        freev(&f);
        freev(&y);
    }
    printf("range: %d cases\n", cases);
}

/* ------------------------------------------------------------------ cast */

static int is_float(int dt) { return dt == NRV_F32 || dt == NRV_F16 || dt == NRV_F64; }

/* Element i of v: as a double (float dtypes) or an int64 (the others). */
static void read_elem(const nrv_tview *v, int64_t i, double *f, int64_t *n) {
    switch (v->dtype) {
    case NRV_F32: *f = ((float *)v->data)[i]; break;
    case NRV_F16: *f = nrv_half_to_float(((uint16_t *)v->data)[i]); break;
    case NRV_F64: *f = ((double *)v->data)[i]; break;
    case NRV_I8: *n = ((int8_t *)v->data)[i]; break;
    case NRV_U8: *n = ((uint8_t *)v->data)[i]; break;
    case NRV_BOOL: *n = ((uint8_t *)v->data)[i] != 0; break;
    case NRV_I32: *n = ((int32_t *)v->data)[i]; break;
    default: *n = ((int64_t *)v->data)[i]; break;
    }
}

/* The expected bytes of casting element i of x to dtype dt (an independent scalar model). */
static void ref_cast(const nrv_tview *x, int64_t i, int dt, uint8_t *out) {
    double f = 0;
    int64_t n = 0;
    read_elem(x, i, &f, &n);
    const int src_float = is_float(x->dtype);
    if (dt == NRV_F32 || dt == NRV_F16) {
        const float v = src_float ? (float)f : (float)n;
        if (dt == NRV_F32) memcpy(out, &v, 4);
        else {
            const uint16_t h = nrv_float_to_half(v);
            memcpy(out, &h, 2);
        }
        return;
    }
    if (dt == NRV_F64) {
        const double v = src_float ? f : (double)n;
        memcpy(out, &v, 8);
        return;
    }
    if (dt == NRV_BOOL) {
        out[0] = src_float ? (f != 0.0) : (n != 0);
        return;
    }
    int bits = dt == NRV_I8 || dt == NRV_U8 ? 8 : dt == NRV_I32 ? 32 : 64;
    const int is_signed = dt != NRV_U8;
    int64_t v;
    if (src_float) {
        /* saturate */
        const double lo = is_signed ? -ldexp(1.0, bits - 1) : 0.0;
        const double hi = is_signed ? ldexp(1.0, bits - 1) : ldexp(1.0, bits); /* exclusive */
        const int64_t ilo = is_signed ? (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1))) : 0;
        const int64_t ihi = bits == 64  ? INT64_MAX
                            : is_signed ? ((int64_t)1 << (bits - 1)) - 1
                                        : ((int64_t)1 << bits) - 1;
        const double t = trunc(f); /* toward zero, then clamp */
        if (isnan(f)) v = 0;
        else if (t < lo) v = ilo;
        else if (t >= hi) v = ihi;
        else v = (int64_t)t;
    } else {
        v = n; /* wrap: keep the low bits */
    }
    uint64_t u = (uint64_t)v;
    for (int b = 0; b < bits / 8; b++) out[b] = (uint8_t)(u >> (8 * b)); /* little-endian host */
}

static void test_cast(void) {
    static const double FVALS[] = {0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 0.1, 1e-8, 127.9, 128.0, -128.9, -129.5, 255.5,
                                   256.0, 300.0, -300.0, 65504.0, 70000.0, 3e9, -3e9, 1e10, -1e10, 2147483647.0,
                                   -2147483648.0, 9.3e18, -9.3e18, 1e30, NAN, INFINITY, -INFINITY, 0.5, -0.99};
    static const int64_t IVALS[] = {0, 1, -1, 127, 128, -128, -129, 255, 256, 300, -300, 65504, 70000,
                                    INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)INT32_MIN - 1, (1LL << 53) + 1,
                                    INT64_MAX, INT64_MIN, 16777217};
    const int nf = (int)(sizeof FVALS / sizeof FVALS[0]), ni = (int)(sizeof IVALS / sizeof IVALS[0]);
    int pairs = 0, good_pairs = 0;
    for (int s = 0; s < 8; s++) {
        const int sdt = ALL_DTYPES[s];
        const int n = is_float(sdt) ? nf : ni;
        int64_t len = n + 300; /* the values, then random fill to cross the chunk size */
        nrv_tview x = mk1(sdt, len);
        for (int64_t i = 0; i < len; i++) {
            const int64_t k = i < n ? i : rnd(n);
            switch (sdt) {
            case NRV_F32: ((float *)x.data)[i] = (float)FVALS[k]; break;
            case NRV_F16: ((uint16_t *)x.data)[i] = nrv_float_to_half((float)FVALS[k]); break;
            case NRV_F64: ((double *)x.data)[i] = FVALS[k]; break;
            case NRV_I8: ((int8_t *)x.data)[i] = (int8_t)(uint8_t)(uint64_t)IVALS[k]; break;
            case NRV_U8: ((uint8_t *)x.data)[i] = (uint8_t)IVALS[k]; break;
            case NRV_BOOL: ((uint8_t *)x.data)[i] = IVALS[k] & 1; break;
            case NRV_I32: ((int32_t *)x.data)[i] = (int32_t)(uint32_t)(uint64_t)IVALS[k]; break;
            default: ((int64_t *)x.data)[i] = IVALS[k]; break;
            }
        }
        for (int d = 0; d < 8; d++) {
            const int ddt = ALL_DTYPES[d];
            nrv_tview y = mk1(ddt, len);
            call c = mkcall();
            c.in[0] = &x;
            c.n_in = 1;
            c.out[0] = &y;
            c.n_out = 1;
            NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
            const size_t e = esz_of(ddt);
            int good = 1;
            for (int64_t i = 0; i < len && good; i++) {
                uint8_t want[8];
                ref_cast(&x, i, ddt, want);
                if (memcmp((uint8_t *)y.data + i * (int64_t)e, want, e) != 0) {
                    good = 0;
                    double f = 0;
                    int64_t v = 0;
                    read_elem(&x, i, &f, &v);
                    fprintf(stderr, "  cast %s -> %s: element %lld (%g / %lld) differs\n",
                            nrv_dtype_str((nrv_dtype)sdt), nrv_dtype_str((nrv_dtype)ddt), (long long)i, f,
                            (long long)v);
                }
            }
            pairs++;
            good_pairs += good;
            freev(&y);
        }
        freev(&x);
    }
    NRV_EXPECT(good_pairs == pairs, "cast: %d of %d dtype pairs match", good_pairs, pairs);

    /* spot checks written out by hand */
    {
        const float xs[8] = {-2.7f, 2.7f, 1e10f, -1e10f, NAN, 300.5f, -5.0f, 0.25f};
        int64_t n = 8;
        nrv_tview x = mk(NRV_F32, 1, &n), yi = mk(NRV_I32, 1, &n), yu = mk(NRV_U8, 1, &n), yb = mk(NRV_BOOL, 1, &n);
        memcpy(x.data, xs, sizeof xs);
        call c = mkcall();
        c.in[0] = &x;
        c.n_in = 1;
        c.out[0] = &yi;
        c.n_out = 1;
        NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
        const int32_t wi[8] = {-2, 2, INT32_MAX, INT32_MIN, 0, 300, -5, 0};
        NRV_EXPECT(memcmp(yi.data, wi, sizeof wi) == 0, "%s", "cast f32 -> i32 spot values");
        c.out[0] = &yu;
        NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
        const uint8_t wu[8] = {0, 2, 255, 0, 0, 255, 0, 0};
        NRV_EXPECT(memcmp(yu.data, wu, sizeof wu) == 0, "%s", "cast f32 -> u8 spot values");
        c.out[0] = &yb;
        NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
        const uint8_t wb[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        NRV_EXPECT(memcmp(yb.data, wb, sizeof wb) == 0, "%s", "cast f32 -> bool spot values");
        int64_t n3 = 3;
        nrv_tview l = mk(NRV_I64, 1, &n3), l8 = mk(NRV_I8, 1, &n3), bad = mk(NRV_I8, 1, &n);
        ((int64_t *)l.data)[0] = 300;
        ((int64_t *)l.data)[1] = -129;
        ((int64_t *)l.data)[2] = 255;
        c.in[0] = &l;
        c.out[0] = &l8;
        NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
        const int8_t w8[3] = {44, 127, -1};
        NRV_EXPECT(memcmp(l8.data, w8, 3) == 0, "%s", "cast i64 -> i8 wraps");
        expect_fail1("cast", &l, &bad, NULL, 0, NULL, 0, NRV_ERR_SHAPE, "numel mismatch");
        freev(&x);
        freev(&yi);
        freev(&yu);
        freev(&yb);
        freev(&l);
        freev(&l8);
        freev(&bad);
    }
    /* the dequantizing cast (fattr [zd, sd]): ((float)x − zd)·sd for every u8 and i8 value, the
     * bits of a cast then a Sub then a Mul in float; other dtypes and attribute counts fail */
    {
        int64_t n = 256;
        nrv_tview xu = mk(NRV_U8, 1, &n), xs = mk(NRV_I8, 1, &n), y = mk(NRV_F32, 1, &n), yi = mk(NRV_I32, 1, &n);
        for (int i = 0; i < 256; i++) ((uint8_t *)xu.data)[i] = (uint8_t)i, ((int8_t *)xs.data)[i] = (int8_t)(i - 128);
        const float params[3][2] = {{121.0f, 0.0173f}, {-7.0f, 1.0f}, {0.0f, 3.1e-5f}};
        int bad = 0;
        for (int p = 0; p < 3; p++)
            for (int sgn = 0; sgn < 2; sgn++) {
                call c = mkcall();
                c.in[0] = sgn ? &xs : &xu;
                c.n_in = 1;
                c.out[0] = &y;
                c.n_out = 1;
                c.fattr[0] = params[p][0], c.fattr[1] = params[p][1];
                c.n_fattr = 2;
                NRV_EXPECT_STATUS(run("cast", &c), NRV_OK);
                for (int i = 0; i < 256; i++) {
                    const float xf = sgn ? (float)(i - 128) : (float)i, d = xf - params[p][0], want = d * params[p][1];
                    bad += memcmp(&((float *)y.data)[i], &want, sizeof want) != 0;
                }
            }
        NRV_EXPECT(bad == 0, "dequantizing cast: %d values differ from cast, Sub, Mul", bad);
        nrv_tview y2 = mk(NRV_F32, 1, &n);
        const struct {
            const nrv_tview *x;
            nrv_tview *y;
            int nf;
            nrv_status want;
        } fails[3] = {{&y, &y2, 2, NRV_ERR_DTYPE}, {&xu, &yi, 2, NRV_ERR_DTYPE}, {&xu, &y2, 1, NRV_ERR_INVALID_ARG}};
        for (int k = 0; k < 3; k++) {
            memset(fails[k].y->data, 0x5a, (size_t)(n * 4));
            call c = mkcall();
            c.in[0] = fails[k].x;
            c.n_in = 1;
            c.out[0] = fails[k].y;
            c.n_out = 1;
            c.fattr[0] = 1.0f, c.fattr[1] = 2.0f;
            c.n_fattr = fails[k].nf;
            NRV_EXPECT_STATUS(run("cast", &c), fails[k].want);
            int touched = 0;
            for (int64_t b = 0; b < n * 4; b++) touched |= ((uint8_t *)fails[k].y->data)[b] != 0x5a;
            NRV_EXPECT(!touched, "dequantizing cast error case %d wrote y", k);
        }
        freev(&y2);
        freev(&xu);
        freev(&xs);
        freev(&y);
        freev(&yi);
    }
    printf("cast: %d dtype pairs\n", pairs);
}

/* ------------------------------------------------------------------ fill / dims */

static void test_fill_dims(void) {
    int64_t d[2] = {7, 13};
    for (int k = 0; k < 8; k++) {
        const int dt = ALL_DTYPES[k];
        nrv_tview y = mk(dt, 2, d);
        call c = mkcall();
        c.out[0] = &y;
        c.n_out = 1;
        c.n_iattr = 1;
        c.n_fattr = 1;
        c.fattr[0] = -2.5f;
        uint8_t want[8];
        switch (dt) {
        case NRV_F32: {
            const float v = -2.5f;
            memcpy(want, &v, 4);
            break;
        }
        case NRV_F16: {
            const uint16_t h = 0xC100; /* -2.5 in IEEE half */
            memcpy(want, &h, 2);
            break;
        }
        case NRV_F64: {
            const double v = -2.5;
            memcpy(want, &v, 8);
            break;
        }
        case NRV_I8: c.iattr[0] = -7; want[0] = 0xF9; break;
        case NRV_U8: c.iattr[0] = 200; want[0] = 200; break;
        case NRV_BOOL: c.iattr[0] = 5; want[0] = 1; break;
        case NRV_I32: {
            c.iattr[0] = -123456;
            const int32_t v = -123456;
            memcpy(want, &v, 4);
            break;
        }
        default: {
            c.iattr[0] = INT64_MIN + 3;
            const int64_t v = INT64_MIN + 3;
            memcpy(want, &v, 8);
            break;
        }
        }
        NRV_EXPECT_STATUS(run("fill", &c), NRV_OK);
        const size_t e = esz_of(dt);
        int good = 1;
        for (int64_t i = 0; i < y.numel; i++) good &= memcmp((uint8_t *)y.data + i * (int64_t)e, want, e) == 0;
        NRV_EXPECT(good, "fill %s: wrong value", nrv_dtype_str((nrv_dtype)dt));
        if (dt == NRV_I8 || dt == NRV_U8 || dt == NRV_I32) {
            memset(y.data, SENTINEL, nbytes(&y));
            c.iattr[0] = dt == NRV_U8 ? -1 : dt == NRV_I8 ? 128 : (int64_t)INT32_MAX + 1;
            NRV_EXPECT_STATUS(run("fill", &c), NRV_ERR_INVALID_ARG);
            NRV_EXPECT(untouched(&y), "fill %s out of range: output written", nrv_dtype_str((nrv_dtype)dt));
        }
        c.n_fattr = 0;
        NRV_EXPECT_STATUS(run("fill", &c), NRV_ERR_INVALID_ARG);
        freev(&y);
    }
    {
        nrv_tview y = mk1(NRV_I64, 4), y3 = mk1(NRV_I64, 3), yi = mk1(NRV_I32, 4), y0 = mk(NRV_I64, 0, NULL);
        call c = mkcall();
        c.out[0] = &y;
        c.n_out = 1;
        const int64_t v[4] = {3, -1, 0, 99};
        memcpy(c.dattr, v, sizeof v);
        c.n_dattr = 4;
        NRV_EXPECT_STATUS(run("dims", &c), NRV_OK);
        NRV_EXPECT(memcmp(y.data, v, sizeof v) == 0, "%s", "dims: wrong values");
        c.out[0] = &y3;
        NRV_EXPECT_STATUS(run("dims", &c), NRV_ERR_SHAPE);
        NRV_EXPECT(untouched(&y3), "%s", "dims mismatch: output written");
        c.out[0] = &yi;
        NRV_EXPECT_STATUS(run("dims", &c), NRV_ERR_DTYPE);
        c.out[0] = &y0;
        c.n_dattr = 1;
        NRV_EXPECT_STATUS(run("dims", &c), NRV_OK);
        NRV_EXPECT(*(int64_t *)y0.data == 3, "%s", "dims rank 0");
        freev(&y);
        freev(&y3);
        freev(&yi);
        freev(&y0);
    }
    printf("fill, dims: done\n");
}

int main(void) {
    nrv_test_seed(0x5EED5A9EULL);
    test_copy();
    test_transpose();
    test_concat_split();
    test_slice();
    test_gather();
    test_expand_where();
    test_trilu();
    test_range();
    test_cast();
    test_fill_dims();
    return nrv_test_summary("test_plan_shape");
}
