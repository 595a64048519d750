/* test_plan_reduce.c — the reduce-family plan ops (op_reduce.c) against naive references.
 *
 * reduce (every kind, f32 and the integer kinds on i64 / i32), argmax / argmin,
 * softmax / log_softmax and layernorm are looked up with nrv_plan_op_find and run on views
 * built here by hand, over random ranks 0..5, random axis sets (keepdims or not) and
 * awkward extents (1, 2, 3, 5, 7, 13, 33, 129). References work in double and walk x one
 * element at a time through explicit multi-indices. Inputs and outputs are allocated to
 * their exact size so an ASan build catches any access past them; error cases check the
 * status and that the output still holds its sentinel bytes.
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

typedef struct call {
    const nrv_tview *in[4];
    int n_in;
    nrv_tview *out[2];
    int n_out;
    int64_t iattr[16];
    int n_iattr;
    float fattr[2];
    int n_fattr;
} call;

static call mkcall(const nrv_tview *x, nrv_tview *y) {
    call c;
    memset(&c, 0, sizeof c);
    c.in[0] = x;
    c.n_in = 1;
    c.out[0] = y;
    c.n_out = 1;
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
    return def->run(&a);
}

static void expect_fail(const char *type, const call *c, nrv_tview *y, nrv_status want, const char *what) {
    const nrv_status s = run(type, c);
    NRV_EXPECT(s == want, "%s %s: got %s, want %s (%s)", type, what, nrv_status_str(s), nrv_status_str(want),
               nrv_last_error());
    NRV_EXPECT(untouched(y), "%s %s: output written on error", type, what);
}

/* |got - want| <= atol + rtol |want| everywhere; infinities and NaN must match. */
static int close_all(const float *got, const double *want, int64_t n, double rtol, double atol, const char *what,
                     int t) {
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        int ok;
        if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
        else if (isinf(w) || isinf(g)) ok = g == w;
        else ok = fabs(g - w) <= atol + rtol * fabs(w);
        if (!ok) {
            fprintf(stderr, "  %s case %d: element %lld got %.9g want %.9g\n", what, t, (long long)i, g, w);
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ reduce */

static const char *const KIND[8] = {"sum", "mean", "max", "min", "prod", "sum_square", "l2", "log_sum_exp"};

/* Flat output index of x's element at multi-index xi: the kept coordinates, row-major. */
static int64_t kept_index(int r, const int64_t *dims, const int *red, const int64_t *xi) {
    int64_t f = 0;
    for (int d = 0; d < r; d++)
        if (!red[d]) f = f * dims[d] + xi[d];
    return f;
}

static void reduce_case_f32(int t, int *ok, int *cases) {
    const int r = t % 6;
    int64_t xd[NRV_PLAN_MAX_RANK];
    rand_dims(r, xd, 8000);
    if (r > 0 && t % 37 == 5) xd[rnd(r)] = 0; /* empty tensors */
    const int kind = t % 8;
    int red[NRV_PLAN_MAX_RANK] = {0}, nax = 0;
    int64_t axes[NRV_PLAN_MAX_RANK];
    for (int d = 0; d < r; d++)
        if (rnd(2)) red[d] = 1;
    if (t % 11 == 0)
        for (int d = 0; d < r; d++) red[d] = 1;
    for (int d = 0; d < r; d++)
        if (red[d]) axes[nax++] = d;
    const int keep = t % 3 == 0;
    int64_t yd[NRV_PLAN_MAX_RANK];
    int yr = 0;
    for (int d = 0; d < r; d++) {
        if (!red[d]) yd[yr++] = xd[d];
        else if (keep) yd[yr++] = 1;
    }
    nrv_tview x = mk(NRV_F32, r, xd), y = mk(NRV_F32, yr, yd);
    float *xf = x.data;
    if (kind == 4) nrv_test_fill(xf, x.numel, 0.8f, 1.25f);
    else if (kind == 7) nrv_test_fill(xf, x.numel, -20.0f, 20.0f);
    else nrv_test_fill(xf, x.numel, -2.0f, 2.0f);
    call c = mkcall(&x, &y);
    c.iattr[0] = kind;
    c.iattr[1] = nax;
    for (int k = 0; k < nax; k++) c.iattr[2 + k] = axes[k];
    c.n_iattr = 2 + nax;
    NRV_EXPECT_STATUS(run("reduce", &c), NRV_OK);

    const int64_t ny = y.numel;
    int64_t count = 1;
    for (int d = 0; d < r; d++)
        if (red[d]) count *= xd[d];
    double *acc = malloc(sizeof(double) * (size_t)(ny + 1)), *mx = malloc(sizeof(double) * (size_t)(ny + 1));
    for (int64_t i = 0; i < ny; i++) {
        acc[i] = kind == 2 || kind == 7 ? -INFINITY : kind == 3 ? INFINITY : kind == 4 ? 1.0 : 0.0;
        mx[i] = -INFINITY;
    }
    int64_t xi[NRV_PLAN_MAX_RANK];
    if (kind == 7) /* log-sum-exp: max first */
        for (int64_t f = 0; f < x.numel; f++) {
            unravel(f, r, xd, xi);
            const int64_t o = kept_index(r, xd, red, xi);
            if (xf[f] > mx[o]) mx[o] = xf[f];
        }
    for (int64_t f = 0; f < x.numel; f++) {
        unravel(f, r, xd, xi);
        const int64_t o = kept_index(r, xd, red, xi);
        const double v = xf[f];
        switch (kind) {
        case 0:
        case 1: acc[o] += v; break;
        case 2: acc[o] = v > acc[o] ? v : acc[o]; break;
        case 3: acc[o] = v < acc[o] ? v : acc[o]; break;
        case 4: acc[o] *= v; break;
        case 5:
        case 6: acc[o] += v * v; break;
        default: acc[o] = (acc[o] == -INFINITY ? 0.0 : acc[o]) + exp(v - mx[o]); break;
        }
    }
    for (int64_t i = 0; i < ny; i++) {
        if (kind == 1) acc[i] = count ? acc[i] / (double)count : NAN;
        if (kind == 6) acc[i] = sqrt(acc[i]);
        if (kind == 7) acc[i] = count ? mx[i] + log(acc[i]) : -INFINITY;
    }
    char what[64];
    snprintf(what, sizeof what, "reduce %s f32", KIND[kind]);
    (*cases)++;
    *ok += close_all(y.data, acc, ny, 2e-6, 1e-6, what, t);
    free(acc);
    free(mx);
    freev(&x);
    freev(&y);
}

static void reduce_case_int(int t, int dt, int *ok, int *cases) {
    static const int KINDS[4] = {0, 2, 3, 4};
    const int kind = KINDS[t % 4];
    const int r = t % 6;
    int64_t xd[NRV_PLAN_MAX_RANK];
    rand_dims(r, xd, 5000);
    if (r > 0 && t % 23 == 7) xd[rnd(r)] = 0;
    int red[NRV_PLAN_MAX_RANK] = {0}, nax = 0;
    for (int d = 0; d < r; d++) red[d] = (int)rnd(2);
    int64_t yd[NRV_PLAN_MAX_RANK];
    int yr = 0;
    for (int d = 0; d < r; d++) {
        if (red[d]) nax++;
        else yd[yr++] = xd[d];
    }
    nrv_tview x = mk(dt, r, xd), y = mk(dt, yr, yd);
    for (int64_t i = 0; i < x.numel; i++) {
        const int64_t v = kind == 4 ? rnd(5) - 2 : (int64_t)(nrv_test_u64() >> 40) - (1 << 23);
        if (dt == NRV_I64) ((int64_t *)x.data)[i] = kind == 0 && i % 5 == 0 ? INT64_MAX - rnd(9) : v;
        else ((int32_t *)x.data)[i] = (int32_t)(kind == 0 && i % 5 == 0 ? INT32_MAX - rnd(9) : v);
    }
    call c = mkcall(&x, &y);
    c.iattr[0] = kind;
    c.iattr[1] = nax;
    for (int d = 0, k = 0; d < r; d++)
        if (red[d]) c.iattr[2 + k++] = d;
    c.n_iattr = 2 + nax;
    NRV_EXPECT_STATUS(run("reduce", &c), NRV_OK);
    const int64_t ny = y.numel;
    uint64_t *acc = malloc(sizeof(uint64_t) * (size_t)(ny + 1));
    const int64_t tmin = dt == NRV_I64 ? INT64_MIN : INT32_MIN, tmax = dt == NRV_I64 ? INT64_MAX : INT32_MAX;
    for (int64_t i = 0; i < ny; i++) acc[i] = kind == 2 ? (uint64_t)tmin : kind == 3 ? (uint64_t)tmax : kind == 4;
    int64_t xi[NRV_PLAN_MAX_RANK];
    for (int64_t f = 0; f < x.numel; f++) {
        unravel(f, r, xd, xi);
        const int64_t o = kept_index(r, xd, red, xi);
        const int64_t v = dt == NRV_I64 ? ((int64_t *)x.data)[f] : ((int32_t *)x.data)[f];
        const int64_t cur = (int64_t)acc[o];
        switch (kind) {
        case 0: acc[o] += (uint64_t)v; break; /* wraps */
        case 2: acc[o] = (uint64_t)(v > cur ? v : cur); break;
        case 3: acc[o] = (uint64_t)(v < cur ? v : cur); break;
        default: acc[o] *= (uint64_t)v; break;
        }
    }
    int good = 1;
    for (int64_t i = 0; i < ny && good; i++) {
        const int64_t got = dt == NRV_I64 ? ((int64_t *)y.data)[i] : ((int32_t *)y.data)[i];
        const int64_t want = dt == NRV_I64 ? (int64_t)acc[i] : (int64_t)(int32_t)(uint32_t)acc[i];
        if (got != want) {
            good = 0;
            fprintf(stderr, "  reduce %s %s case %d: element %lld got %lld want %lld\n", KIND[kind],
                    nrv_dtype_str((nrv_dtype)dt), t, (long long)i, (long long)got, (long long)want);
        }
    }
    (*cases)++;
    *ok += good;
    free(acc);
    freev(&x);
    freev(&y);
}

static void test_reduce(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 480; t++) reduce_case_f32(t, &ok, &cases);
    NRV_EXPECT(ok == cases, "reduce f32: %d of %d cases match", ok, cases);
    printf("reduce f32: %d cases\n", cases);
    ok = cases = 0;
    for (int t = 0; t < 160; t++) reduce_case_int(t, t % 2 ? NRV_I32 : NRV_I64, &ok, &cases);
    NRV_EXPECT(ok == cases, "reduce int: %d of %d cases match", ok, cases);
    printf("reduce i64/i32: %d cases\n", cases);

    /* empty reductions: [3, 0, 4] over axis 1 */
    {
        int64_t xd[3] = {3, 0, 4}, yd[2] = {3, 4};
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 2, yd);
        const double want[8] = {0.0, NAN, -INFINITY, INFINITY, 1.0, 0.0, 0.0, -INFINITY};
        for (int k = 0; k < 8; k++) {
            call c = mkcall(&x, &y);
            c.iattr[0] = k;
            c.iattr[1] = 1;
            c.iattr[2] = 1;
            c.n_iattr = 3;
            NRV_EXPECT_STATUS(run("reduce", &c), NRV_OK);
            double w[12];
            for (int i = 0; i < 12; i++) w[i] = want[k];
            NRV_EXPECT(close_all(y.data, w, 12, 0, 0, KIND[k], -1), "empty reduce %s", KIND[k]);
        }
        nrv_tview xi = mk(NRV_I32, 3, xd), yi = mk(NRV_I32, 2, yd);
        call c = mkcall(&xi, &yi);
        c.iattr[0] = 2;
        c.iattr[1] = 1;
        c.iattr[2] = 1;
        c.n_iattr = 3;
        NRV_EXPECT_STATUS(run("reduce", &c), NRV_OK);
        NRV_EXPECT(((int32_t *)yi.data)[11] == INT32_MIN, "empty i32 max: %d", ((int32_t *)yi.data)[11]);
        freev(&x);
        freev(&y);
        freev(&xi);
        freev(&yi);
    }
    /* NaN propagates through max and min */
    {
        int64_t xd[2] = {2, 5}, yd[1] = {2};
        nrv_tview x = mk(NRV_F32, 2, xd), y = mk(NRV_F32, 1, yd);
        const float v[10] = {1, NAN, 3, 2, 0, 4, 5, 6, 7, 8};
        memcpy(x.data, v, sizeof v);
        for (int k = 2; k <= 3; k++) {
            call c = mkcall(&x, &y);
            c.iattr[0] = k;
            c.iattr[1] = 1;
            c.iattr[2] = 1;
            c.n_iattr = 3;
            NRV_EXPECT_STATUS(run("reduce", &c), NRV_OK);
            const float *g = y.data;
            NRV_EXPECT(isnan(g[0]) && g[1] == (k == 2 ? 8.0f : 4.0f), "NaN in %s: got %g %g", KIND[k], (double)g[0],
                       (double)g[1]);
        }
        freev(&x);
        freev(&y);
    }
    /* errors */
    {
        int64_t xd[3] = {2, 3, 4}, yd[2] = {2, 4}, ybad[2] = {3, 4};
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 2, yd), yb = mk(NRV_F32, 2, ybad), yi = mk(NRV_I32, 2, yd);
        nrv_tview xi = mk(NRV_I32, 3, xd), xu = mk(NRV_U8, 3, xd);
        nrv_test_fill(x.data, x.numel, -1, 1);
        memset(xi.data, 0, nbytes(&xi));
        memset(xu.data, 0, nbytes(&xu));
        nrv_tview y1 = mk(NRV_F32, 1, &xd[1]);
        struct {
            const nrv_tview *x;
            nrv_tview *y;
            int64_t attr[6];
            int n;
            nrv_status want;
            const char *what;
        } cs[] = {
            {&x, &yb, {0, 1, 1}, 3, NRV_ERR_SHAPE, "y numel"},
            {&x, &y1, {0, 2, 2, 0}, 4, NRV_ERR_INVALID_ARG, "axes unsorted"},
            {&x, &y1, {0, 2, 1, 1}, 4, NRV_ERR_INVALID_ARG, "axes repeated"},
            {&x, &y, {0, 1, 3}, 3, NRV_ERR_INVALID_ARG, "axis >= rank"},
            {&x, &y, {0, 1, -1}, 3, NRV_ERR_INVALID_ARG, "negative axis"},
            {&x, &y, {0, 2, 1}, 3, NRV_ERR_INVALID_ARG, "n_axes vs iattr"},
            {&x, &y, {8, 1, 1}, 3, NRV_ERR_INVALID_ARG, "kind 8"},
            {&x, &y, {0}, 1, NRV_ERR_INVALID_ARG, "no n_axes"},
            {&x, &yi, {0, 1, 1}, 3, NRV_ERR_DTYPE, "y dtype"},
            {&xi, &yi, {1, 1, 1}, 3, NRV_ERR_DTYPE, "i32 mean"},
            {&xi, &yi, {7, 1, 1}, 3, NRV_ERR_DTYPE, "i32 log_sum_exp"},
            {&xu, &y, {0, 1, 1}, 3, NRV_ERR_DTYPE, "u8 sum"},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            call c = mkcall(cs[k].x, cs[k].y);
            memcpy(c.iattr, cs[k].attr, sizeof cs[k].attr);
            c.n_iattr = cs[k].n;
            expect_fail("reduce", &c, cs[k].y, cs[k].want, cs[k].what);
        }
        freev(&x);
        freev(&y);
        freev(&yb);
        freev(&yi);
        freev(&xi);
        freev(&xu);
        freev(&y1);
    }
}

/* ------------------------------------------------------------------ argmax / argmin */

static void test_arg(void) {
    static const int DTS[3] = {NRV_F32, NRV_I64, NRV_I32};
    int ok = 0, cases = 0;
    for (int t = 0; t < 240; t++) {
        const int dt = DTS[t % 3], is_max = (t >> 1) & 1, last = (t >> 2) & 1;
        const int r = 1 + (int)rnd(5);
        int64_t xd[NRV_PLAN_MAX_RANK], yd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 8000);
        const int ax = (int)rnd(r);
        const int keep = t % 3 == 0;
        int yr = 0;
        for (int d = 0; d < r; d++)
            if (d != ax || keep) yd[yr++] = d == ax ? 1 : xd[d];
        nrv_tview x = mk(dt, r, xd), y = mk(NRV_I64, yr, yd);
        const int spread = t % 4 == 0 ? 3 : 1000; /* few distinct values: many ties */
        for (int64_t i = 0; i < x.numel; i++) {
            const int64_t v = rnd(spread) - spread / 2;
            if (dt == NRV_F32) ((float *)x.data)[i] = (float)v * 0.5f;
            else if (dt == NRV_I64) ((int64_t *)x.data)[i] = v * 1000000007LL;
            else ((int32_t *)x.data)[i] = (int32_t)v;
        }
        call c = mkcall(&x, &y);
        c.iattr[0] = t % 5 == 0 ? ax - r : ax; /* negative axis counts from the end */
        c.iattr[1] = last;
        c.n_iattr = 2;
        NRV_EXPECT_STATUS(run(is_max ? "argmax" : "argmin", &c), NRV_OK);
        const int64_t n = xd[ax], inner = nrv_dims_product(xd, ax + 1, r), outer = nrv_dims_product(xd, 0, ax);
        int good = 1;
        for (int64_t o = 0; o < outer && good; o++)
            for (int64_t j = 0; j < inner && good; j++) {
                double best = 0;
                int64_t bi = -1;
                for (int64_t k = 0; k < n; k++) {
                    const int64_t f = (o * n + k) * inner + j;
                    const double v = dt == NRV_F32 ? ((float *)x.data)[f]
                                   : dt == NRV_I64 ? (double)((int64_t *)x.data)[f]
                                                   : ((int32_t *)x.data)[f];
                    const int better = bi < 0 || (is_max ? (v > best || (last && v == best))
                                                         : (v < best || (last && v == best)));
                    if (better) best = v, bi = k;
                }
                const int64_t got = ((int64_t *)y.data)[o * inner + j];
                if (got != bi) {
                    good = 0;
                    fprintf(stderr, "  arg%s %s case %d: (%lld, %lld) got %lld want %lld\n", is_max ? "max" : "min",
                            nrv_dtype_str((nrv_dtype)dt), t, (long long)o, (long long)j, (long long)got,
                            (long long)bi);
                }
            }
        cases++;
        ok += good;
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "argmax/argmin: %d of %d cases match", ok, cases);
    printf("argmax/argmin: %d cases\n", cases);
    /* NaN: the first NaN, or the last with select_last_index, for both */
    {
        int64_t xd[1] = {6}, yd[1] = {1};
        nrv_tview x = mk(NRV_F32, 1, xd), y = mk(NRV_I64, 1, yd);
        const float v[6] = {1, NAN, 3, NAN, -2, 0};
        memcpy(x.data, v, sizeof v);
        for (int k = 0; k < 4; k++) {
            call c = mkcall(&x, &y);
            c.iattr[1] = k & 1;
            c.n_iattr = 2;
            NRV_EXPECT_STATUS(run(k & 2 ? "argmin" : "argmax", &c), NRV_OK);
            const int64_t want = k & 1 ? 3 : 1;
            NRV_EXPECT(*(int64_t *)y.data == want, "NaN arg %d: got %lld want %lld", k, (long long)*(int64_t *)y.data,
                       (long long)want);
        }
        freev(&x);
        freev(&y);
    }
    /* errors */
    {
        int64_t xd[2] = {3, 4}, x0[2] = {3, 0}, yd[1] = {3}, yd4[1] = {4};
        nrv_tview x = mk(NRV_F32, 2, xd), xz = mk(NRV_F32, 2, x0), xu = mk(NRV_U8, 2, xd);
        nrv_tview y = mk(NRV_I64, 1, yd), y4 = mk(NRV_I64, 1, yd4), yi = mk(NRV_I32, 1, yd);
        nrv_test_fill(x.data, 12, -1, 1);
        memset(xu.data, 0, 12);
        struct {
            const nrv_tview *x;
            nrv_tview *y;
            int64_t ax, last;
            nrv_status want;
            const char *what;
        } cs[] = {
            {&xz, &y, 1, 0, NRV_ERR_SHAPE, "axis of extent 0"},
            {&x, &y4, 1, 0, NRV_ERR_SHAPE, "y numel"},
            {&x, &yi, 1, 0, NRV_ERR_DTYPE, "i32 y"},
            {&xu, &y, 1, 0, NRV_ERR_DTYPE, "u8 x"},
            {&x, &y, 2, 0, NRV_ERR_INVALID_ARG, "axis out of range"},
            {&x, &y, 1, 2, NRV_ERR_INVALID_ARG, "select_last_index 2"},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            call c = mkcall(cs[k].x, cs[k].y);
            c.iattr[0] = cs[k].ax;
            c.iattr[1] = cs[k].last;
            c.n_iattr = 2;
            expect_fail(k % 2 ? "argmin" : "argmax", &c, cs[k].y, cs[k].want, cs[k].what);
        }
        freev(&x);
        freev(&xz);
        freev(&xu);
        freev(&y);
        freev(&y4);
        freev(&yi);
    }
}

/* ------------------------------------------------------------------ softmax / log_softmax */

static void test_softmax(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 200; t++) {
        const int log_form = t & 1, in_place = t % 3 == 0;
        const int r = 1 + (int)rnd(4);
        int64_t xd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 8000);
        const int ax = t % 4 == 0 ? r - 1 : (int)rnd(r);
        nrv_tview x = mk(NRV_F32, r, xd), y = mk(NRV_F32, r, xd);
        float *xf = x.data;
        nrv_test_fill(xf, x.numel, t % 5 == 0 ? -60.0f : -8.0f, t % 5 == 0 ? 60.0f : 8.0f);
        const int64_t n = xd[ax], inner = nrv_dims_product(xd, ax + 1, r), outer = nrv_dims_product(xd, 0, ax);
        double *want = malloc(sizeof(double) * (size_t)x.numel);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                double m = -INFINITY, s = 0.0;
                for (int64_t k = 0; k < n; k++) {
                    const double v = xf[(o * n + k) * inner + j];
                    if (v > m) m = v;
                }
                for (int64_t k = 0; k < n; k++) s += exp(xf[(o * n + k) * inner + j] - m);
                for (int64_t k = 0; k < n; k++) {
                    const int64_t f = (o * n + k) * inner + j;
                    want[f] = log_form ? (xf[f] - m) - log(s) : exp(xf[f] - m) / s;
                }
            }
        call c = mkcall(&x, in_place ? &x : &y);
        c.iattr[0] = ax;
        c.n_iattr = 1;
        const char *op = log_form ? "log_softmax" : "softmax";
        NRV_EXPECT_STATUS(run(op, &c), NRV_OK);
        cases++;
        ok += close_all(in_place ? x.data : y.data, want, x.numel, 2e-5, log_form ? 2e-5 : 1e-30, op, t);
        free(want);
        freev(&x);
        freev(&y);
    }
    NRV_EXPECT(ok == cases, "softmax/log_softmax: %d of %d cases match", ok, cases);
    printf("softmax/log_softmax: %d cases\n", cases);
    {
        int64_t xd[2] = {3, 4}, bad[2] = {4, 3};
        nrv_tview x = mk(NRV_F32, 2, xd), yb = mk(NRV_F32, 2, bad), yh = mk(NRV_F16, 2, xd), y = mk(NRV_F32, 2, xd);
        nrv_test_fill(x.data, 12, -1, 1);
        call c = mkcall(&x, &yb);
        c.n_iattr = 1;
        expect_fail("softmax", &c, &yb, NRV_ERR_SHAPE, "y dims");
        c.out[0] = &yh;
        expect_fail("log_softmax", &c, &yh, NRV_ERR_DTYPE, "f16 y");
        c.out[0] = &y;
        c.iattr[0] = 2;
        expect_fail("softmax", &c, &y, NRV_ERR_INVALID_ARG, "axis 2");
        c.n_iattr = 0;
        expect_fail("log_softmax", &c, &y, NRV_ERR_INVALID_ARG, "no axis");
        freev(&x);
        freev(&yb);
        freev(&yh);
        freev(&y);
    }
}

/* ------------------------------------------------------------------ layernorm */

static void test_layernorm(void) {
    int ok = 0, cases = 0;
    for (int t = 0; t < 150; t++) {
        const int r = 1 + (int)rnd(4);
        int64_t xd[NRV_PLAN_MAX_RANK];
        rand_dims(r, xd, 8000);
        const int ax = (int)rnd(r);
        const int with_beta = t % 3 != 0, in_place = t % 4 == 1;
        const float eps = t % 2 ? 1e-5f : 1e-3f;
        const int64_t d = nrv_dims_product(xd, ax, r), rows = nrv_dims_product(xd, 0, ax);
        nrv_tview x = mk(NRV_F32, r, xd), y = mk(NRV_F32, r, xd);
        nrv_tview g = mk(NRV_F32, r - ax, xd + ax), b = mk(NRV_F32, 1, &d);
        float *xf = x.data, *gf = g.data, *bf = b.data;
        nrv_test_fill(xf, x.numel, -2.0f, 2.0f);
        nrv_test_fill(gf, d, -2.0f, 2.0f);
        nrv_test_fill(bf, d, -1.0f, 1.0f);
        double *want = malloc(sizeof(double) * (size_t)x.numel);
        double worst_atol = 0.0;
        for (int64_t rr = 0; rr < rows; rr++) {
            const float *xr = xf + rr * d;
            double mu = 0.0, var = 0.0;
            for (int64_t j = 0; j < d; j++) mu += xr[j];
            mu /= (double)d;
            for (int64_t j = 0; j < d; j++) var += (xr[j] - mu) * (xr[j] - mu);
            const double sd = sqrt(var / (double)d + eps);
            for (int64_t j = 0; j < d; j++) want[rr * d + j] = (xr[j] - mu) / sd * gf[j] + (with_beta ? bf[j] : 0.0);
            /* float kernels: mean / variance rounding grows with sqrt(d) and 1 / sd */
            const double atol = 4e-6 * sqrt((double)d) * 2.0 * (1.0 + fabs(mu) / sd) + 1e-5;
            if (atol > worst_atol) worst_atol = atol;
        }
        call c = mkcall(&x, in_place ? &x : &y);
        c.in[1] = &g;
        c.in[2] = with_beta ? &b : NULL;
        c.n_in = t % 6 == 0 ? 2 : 3;
        if (c.n_in == 2) c.in[2] = NULL;
        c.iattr[0] = t % 5 == 0 ? ax - r : ax;
        c.n_iattr = 1;
        c.fattr[0] = eps;
        c.n_fattr = 1;
        NRV_EXPECT_STATUS(run("layernorm", &c), NRV_OK);
        if (c.n_in == 2 && with_beta) /* beta dropped: compare without it */
            for (int64_t i = 0; i < x.numel; i++) want[i] -= bf[i % d];
        cases++;
        ok += close_all(in_place ? x.data : y.data, want, x.numel, 1e-5, worst_atol, "layernorm", t);
        free(want);
        freev(&x);
        freev(&y);
        freev(&g);
        freev(&b);
    }
    NRV_EXPECT(ok == cases, "layernorm: %d of %d cases match", ok, cases);
    printf("layernorm: %d cases\n", cases);
    {
        int64_t xd[2] = {3, 4}, g3[1] = {3}, z[2] = {3, 0};
        nrv_tview x = mk(NRV_F32, 2, xd), y = mk(NRV_F32, 2, xd), g = mk(NRV_F32, 1, &xd[1]), gb = mk(NRV_F32, 1, g3);
        nrv_tview gh = mk(NRV_F16, 1, &xd[1]), xz = mk(NRV_F32, 2, z), yz = mk(NRV_F32, 2, z);
        nrv_tview gz = mk(NRV_F32, 1, &z[1]);
        nrv_test_fill(x.data, 12, -1, 1);
        nrv_test_fill(g.data, 4, -1, 1);
        nrv_test_fill(gb.data, 3, -1, 1);
        memset(gh.data, 0, 8);
        call c = mkcall(&x, &y);
        c.in[1] = &gb;
        c.n_in = 2;
        c.iattr[0] = 1;
        c.n_iattr = 1;
        c.fattr[0] = 1e-5f;
        c.n_fattr = 1;
        expect_fail("layernorm", &c, &y, NRV_ERR_SHAPE, "gamma numel");
        c.in[1] = &g;
        c.in[2] = &gb;
        c.n_in = 3;
        expect_fail("layernorm", &c, &y, NRV_ERR_SHAPE, "beta numel");
        c.in[1] = &gh;
        c.n_in = 2;
        expect_fail("layernorm", &c, &y, NRV_ERR_DTYPE, "f16 gamma");
        c.in[1] = &g;
        c.fattr[0] = -1.0f;
        expect_fail("layernorm", &c, &y, NRV_ERR_INVALID_ARG, "eps < 0");
        c.fattr[0] = NAN;
        expect_fail("layernorm", &c, &y, NRV_ERR_INVALID_ARG, "eps NaN");
        c.fattr[0] = 1e-5f;
        c.n_fattr = 0;
        expect_fail("layernorm", &c, &y, NRV_ERR_INVALID_ARG, "no eps");
        c.n_fattr = 1;
        c.in[1] = NULL;
        expect_fail("layernorm", &c, &y, NRV_ERR_INVALID_ARG, "no gamma");
        /* empty rows: nothing to do */
        call ce = mkcall(&xz, &yz);
        ce.in[1] = &gz;
        ce.n_in = 2;
        ce.iattr[0] = 1;
        ce.n_iattr = 1;
        ce.fattr[0] = 1e-5f;
        ce.n_fattr = 1;
        NRV_EXPECT_STATUS(run("layernorm", &ce), NRV_OK);
        freev(&x);
        freev(&y);
        freev(&g);
        freev(&gb);
        freev(&gh);
        freev(&xz);
        freev(&yz);
        freev(&gz);
    }
}

int main(void) {
    nrv_test_seed(0x0DDBA11ULL);
    test_reduce();
    test_arg();
    test_softmax();
    test_layernorm();
    /* the table names the dispatch kernels it uses */
    const nrv_op_def *ln = nrv_plan_op_find("layernorm"), *sm = nrv_plan_op_find("softmax");
    NRV_EXPECT(ln && ln->kernel_op && !strcmp(ln->kernel_op, "layernorm"), "%s", "layernorm kernel_op");
    NRV_EXPECT(sm && sm->kernel_op && !strcmp(sm->kernel_op, "softmax"), "%s", "softmax kernel_op");
    return nrv_test_summary("test_plan_reduce");
}
