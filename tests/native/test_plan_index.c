/* test_plan_index.c — gather_elements, gather_nd, scatter_elements, scatter_nd, cumsum (and
 * products), maxpool_argmax, max_unpool, topk (op_index.c) on exactly sized buffers (an ASan build catches any access past them) against
 * naive references, at random awkward shapes; bad indices must fail with NRV_ERR_INDEX and
 * leave the output untouched. (Parity with onnxruntime: tests/python/test_onnx_ops.py.)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_plan_run.h"
#include "nrv_plan_views.h"
#include "nrv_test.h"

static int64_t rand_in(int64_t lo, int64_t hi) { return lo + rnd(hi - lo + 1); }

static nrv_status run1(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out, const int64_t *ia,
                       int n_ia) {
    return nrv_plan_run_op(type, in, n_in, out, ia, n_ia, NULL, 0, NULL, 0, NULL);
}

static void fill_f32(nrv_tview *v) { nrv_test_fill(v->data, v->numel, -2, 2); }

static void test_gather_scatter_elements(void) {
    for (int rep = 0; rep < 40; rep++) {
        const int64_t d0 = rand_in(1, 5), d1 = rand_in(1, 9), k1 = rand_in(1, 12);
        const int axis = 1;
        const int64_t xd[2] = {d0, d1}, idd[2] = {d0, k1};
        nrv_tview x = mk(NRV_F32, 2, xd), ind = mk(NRV_I64, 2, idd), y = mk(NRV_F32, 2, idd);
        fill_f32(&x);
        int64_t *iv = ind.data;
        for (int64_t i = 0; i < ind.numel; i++) iv[i] = rand_in(-d1, d1 - 1);
        const nrv_tview *ins[2] = {&x, &ind};
        const int64_t ia[1] = {axis};
        NRV_EXPECT_STATUS(run1("gather_elements", ins, 2, &y, ia, 1), NRV_OK);
        int bad = 0;
        for (int64_t r = 0; r < d0; r++)
            for (int64_t c = 0; c < k1; c++) {
                int64_t j = iv[r * k1 + c];
                if (j < 0) j += d1;
                bad += ((float *)y.data)[r * k1 + c] != ((float *)x.data)[r * d1 + j];
            }
        NRV_EXPECT(bad == 0, "gather_elements: %d wrong", bad);

        /* scatter_elements with add: y = x + the updates summed at their positions */
        nrv_tview upd = mk(NRV_F32, 2, idd), z = mk(NRV_F32, 2, xd);
        fill_f32(&upd);
        const nrv_tview *sins[3] = {&x, &ind, &upd};
        const int64_t sia[2] = {axis, 1};
        NRV_EXPECT_STATUS(run1("scatter_elements", sins, 3, &z, sia, 2), NRV_OK);
        double worst = 0;
        for (int64_t r = 0; r < d0; r++)
            for (int64_t j = 0; j < d1; j++) {
                double want = ((float *)x.data)[r * d1 + j];
                for (int64_t c = 0; c < k1; c++) {
                    int64_t t = iv[r * k1 + c];
                    if (t < 0) t += d1;
                    if (t == j) want += ((float *)upd.data)[r * k1 + c];
                }
                worst = fmax(worst, fabs(((float *)z.data)[r * d1 + j] - want));
            }
        NRV_EXPECT(worst < 1e-4, "scatter_elements add: off by %g", worst);

        /* one index out of range: NRV_ERR_INDEX, nothing written */
        iv[rnd(ind.numel)] = d1;
        memset(y.data, SENTINEL, nbytes(&y));
        memset(z.data, SENTINEL, nbytes(&z));
        NRV_EXPECT_STATUS(run1("gather_elements", ins, 2, &y, ia, 1), NRV_ERR_INDEX);
        NRV_EXPECT_STATUS(run1("scatter_elements", sins, 3, &z, sia, 2), NRV_ERR_INDEX);
        NRV_EXPECT(untouched(&y) && untouched(&z), "a failed gather/scatter wrote its output");
        freev(&x), freev(&ind), freev(&y), freev(&upd), freev(&z);
    }
}

/* gather_nd with batch_dims 0-1 and 1-2 index columns over [d0, d1, d2] data, against a
 * naive loop; a bad index fails and writes nothing. */
static void test_gather_nd(void) {
    for (int rep = 0; rep < 40; rep++) {
        const int64_t xd[3] = {rand_in(1, 4), rand_in(1, 6), rand_in(1, 5)}, n = rand_in(1, 7);
        const int b = (int)rnd(2), q = 1 + (int)rnd(2); /* b + q <= 3 */
        /* indices [d0 if b, n, q]; y [d0 if b, n] + data dims after b + q */
        int64_t idd[3], yd[4];
        int ir = 0, yr = 0;
        if (b) idd[ir++] = xd[0];
        idd[ir++] = n;
        idd[ir++] = q;
        for (int d = 0; d < ir - 1; d++) yd[yr++] = idd[d];
        for (int d = b + q; d < 3; d++) yd[yr++] = xd[d];
        nrv_tview x = mk(NRV_F32, 3, xd), ind = mk(NRV_I64, ir, idd), y = mk(NRV_F32, yr, yd);
        fill_f32(&x);
        int64_t *iv = ind.data;
        for (int64_t i = 0; i < ind.numel; i++) {
            const int64_t dim = xd[b + i % q];
            iv[i] = rand_in(-dim, dim - 1);
        }
        const nrv_tview *ins[2] = {&x, &ind};
        const int64_t ia[1] = {b};
        NRV_EXPECT_STATUS(run1("gather_nd", ins, 2, &y, ia, 1), NRV_OK);
        const int64_t slice = nrv_dims_product(xd, b + q, 3), batches = b ? xd[0] : 1;
        int bad = 0;
        for (int64_t bi = 0; bi < batches; bi++)
            for (int64_t t = 0; t < n; t++) {
                int64_t c[3] = {bi, 0, 0};
                for (int d = 0; d < q; d++) {
                    const int64_t v = iv[(bi * n + t) * q + d];
                    c[b + d] = v < 0 ? v + xd[b + d] : v;
                }
                const int64_t base = (c[0] * xd[1] + c[1]) * xd[2] + c[2];
                for (int64_t j = 0; j < slice; j++)
                    bad += ((float *)y.data)[(bi * n + t) * slice + j] != ((float *)x.data)[base + j];
            }
        NRV_EXPECT(bad == 0, "gather_nd (batch_dims %d, q %d): %d wrong", b, q, bad);
        const int64_t at = rnd(ind.numel);
        iv[at] = rnd(2) ? xd[b + at % q] : -xd[b + at % q] - 1;
        memset(y.data, SENTINEL, nbytes(&y));
        NRV_EXPECT_STATUS(run1("gather_nd", ins, 2, &y, ia, 1), NRV_ERR_INDEX);
        NRV_EXPECT(untouched(&y), "a failed gather_nd wrote y");
        freev(&x), freev(&ind), freev(&y);
    }
}

static void test_scatter_nd(void) {
    for (int rep = 0; rep < 30; rep++) {
        const int64_t rows = rand_in(1, 9), cols = rand_in(1, 7), n = rand_in(1, 5);
        const int64_t xd[2] = {rows, cols}, idd[2] = {n, 1}, ud[2] = {n, cols};
        nrv_tview x = mk(NRV_F32, 2, xd), ind = mk(NRV_I64, 2, idd), upd = mk(NRV_F32, 2, ud), y = mk(NRV_F32, 2, xd);
        fill_f32(&x), fill_f32(&upd);
        int64_t *iv = ind.data;
        for (int64_t i = 0; i < n; i++) iv[i] = rand_in(-rows, rows - 1);
        const nrv_tview *ins[3] = {&x, &ind, &upd};
        const int64_t ia[1] = {1}; /* add */
        NRV_EXPECT_STATUS(run1("scatter_nd", ins, 3, &y, ia, 1), NRV_OK);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                double want = ((float *)x.data)[r * cols + c];
                for (int64_t i = 0; i < n; i++)
                    if ((iv[i] < 0 ? iv[i] + rows : iv[i]) == r) want += ((float *)upd.data)[i * cols + c];
                worst = fmax(worst, fabs(((float *)y.data)[r * cols + c] - want));
            }
        NRV_EXPECT(worst < 1e-4, "scatter_nd add: off by %g", worst);
        iv[rnd(n)] = -rows - 1;
        memset(y.data, SENTINEL, nbytes(&y));
        NRV_EXPECT_STATUS(run1("scatter_nd", ins, 3, &y, ia, 1), NRV_ERR_INDEX);
        NRV_EXPECT(untouched(&y), "a failed scatter_nd wrote y");
        freev(&x), freev(&ind), freev(&upd), freev(&y);
    }
}

static void test_cumsum(void) {
    for (int rep = 0; rep < 30; rep++) {
        const int64_t d[3] = {rand_in(1, 4), rand_in(1, 33), rand_in(1, 5)};
        nrv_tview x = mk(NRV_I64, 3, d), y = mk(NRV_I64, 3, d);
        int64_t *xv = x.data;
        for (int64_t i = 0; i < x.numel; i++) xv[i] = rand_in(-1000, 1000);
        const int axis = (int)rnd(3), exclusive = (int)rnd(2), reverse = (int)rnd(2);
        const int64_t ia[3] = {axis, exclusive, reverse};
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run1("cumsum", ins, 1, &y, ia, 3), NRV_OK);
        int64_t st[3] = {d[1] * d[2], d[2], 1};
        int bad = 0;
        for (int64_t i = 0; i < x.numel; i++) {
            const int64_t pos = (i / st[axis]) % d[axis];
            int64_t want = 0;
            for (int64_t j = 0; j < d[axis]; j++) {
                const int in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
                if (in) want += xv[i + (j - pos) * st[axis]];
            }
            bad += ((int64_t *)y.data)[i] != want;
        }
        NRV_EXPECT(bad == 0, "cumsum axis %d exclusive %d reverse %d: %d wrong", axis, exclusive, reverse, bad);
        freev(&x), freev(&y);
    }
}

static void test_cumprod(void) {
    for (int rep = 0; rep < 30; rep++) {
        const int64_t d[2] = {rand_in(1, 4), rand_in(1, 40)};
        nrv_tview x = mk(NRV_I64, 2, d), y = mk(NRV_I64, 2, d);
        int64_t *xv = x.data;
        for (int64_t i = 0; i < x.numel; i++) xv[i] = rand_in(-5, 5); /* 40 factors: wraps past 2^63 */
        const int exclusive = (int)rnd(2), reverse = (int)rnd(2);
        const int64_t ia[4] = {1, exclusive, reverse, 1};
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run1("cumsum", ins, 1, &y, ia, 4), NRV_OK);
        int bad = 0;
        for (int64_t r = 0; r < d[0]; r++)
            for (int64_t pos = 0; pos < d[1]; pos++) {
                uint64_t want = 1; /* products wrap modulo 2^64, as the op's */
                for (int64_t j = 0; j < d[1]; j++) {
                    const int in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
                    if (in) want *= (uint64_t)xv[r * d[1] + j];
                }
                bad += (uint64_t)((int64_t *)y.data)[r * d[1] + pos] != want;
            }
        NRV_EXPECT(bad == 0, "cumprod exclusive %d reverse %d: %d wrong", exclusive, reverse, bad);
        freev(&x), freev(&y);
    }
}

static void test_maxpool_argmax_and_unpool(void) {
    for (int rep = 0; rep < 20; rep++) {
        const int64_t H = rand_in(3, 12), W = rand_in(3, 12), kh = rand_in(1, 3), kw = rand_in(1, 3);
        const int64_t sh = rand_in(1, 3), sw = rand_in(1, 3), ph = rand_in(0, kh - 1), pw = rand_in(0, kw - 1);
        const int64_t OH = (H + ph - kh) / sh + 1, OW = (W + pw - kw) / sw + 1; /* no end pads */
        const int64_t xd[4] = {2, 3, H, W}, yd[4] = {2, 3, OH, OW};
        nrv_tview x = mk(NRV_F32, 4, xd), y = mk(NRV_F32, 4, yd), ix = mk(NRV_I64, 4, yd);
        fill_f32(&x);
        const float *xv = x.data;
        nrv_tview *outs[2] = {&y, &ix};
        const nrv_tview *ins[1] = {&x};
        const int64_t ia[10] = {2, 0, kh, kw, sh, sw, 1, 1, ph, pw};
        nrv_op_args a;
        memset(&a, 0, sizeof a);
        a.type = "maxpool_argmax", a.name = "test_node", a.in = ins, a.n_in = 1, a.out = outs, a.n_out = 2;
        a.iattr = ia, a.n_iattr = 10;
        NRV_EXPECT_STATUS(nrv_plan_op_find("maxpool_argmax")->run(&a), NRV_OK);
        int bad = 0;
        for (int64_t pl = 0; pl < 6; pl++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    float best = -INFINITY;
                    int64_t at = -1;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            const int64_t h = oh * sh - ph + i, w = ow * sw - pw + j;
                            if (h < 0 || h >= H || w < 0 || w >= W) continue;
                            if (xv[(pl * H + h) * W + w] > best) best = xv[(pl * H + h) * W + w], at = (pl * H + h) * W + w;
                        }
                    const int64_t o = (pl * OH + oh) * OW + ow;
                    bad += ((float *)y.data)[o] != best || ((int64_t *)ix.data)[o] != at;
                }
        NRV_EXPECT(bad == 0, "maxpool_argmax %lldx%lld k %lldx%lld s %lldx%lld p %lld,%lld: %d wrong", (long long)H,
                   (long long)W, (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)ph,
                   (long long)pw, bad);
        /* back: every maximum where it came from, zeros elsewhere (a later duplicate wins) */
        nrv_tview u = mk(NRV_F32, 4, xd);
        const nrv_tview *uins[2] = {&y, &ix};
        NRV_EXPECT_STATUS(run1("max_unpool", uins, 2, &u, NULL, 0), NRV_OK);
        float *want = calloc((size_t)x.numel, sizeof(float));
        for (int64_t i = 0; i < ix.numel; i++) want[((int64_t *)ix.data)[i]] = ((float *)y.data)[i];
        NRV_EXPECT(memcmp(want, u.data, nbytes(&u)) == 0, "max_unpool differs from the scatter reference");
        free(want);
        ((int64_t *)ix.data)[rnd(ix.numel)] = rnd(2) ? x.numel : -1;
        memset(u.data, SENTINEL, nbytes(&u));
        NRV_EXPECT_STATUS(run1("max_unpool", uins, 2, &u, NULL, 0), NRV_ERR_INDEX);
        NRV_EXPECT(untouched(&u), "a failed max_unpool wrote y");
        freev(&x), freev(&y), freev(&ix), freev(&u);
    }
}

static void test_topk(void) {
    for (int rep = 0; rep < 40; rep++) {
        const int64_t rows = rand_in(1, 4), n = rand_in(1, rep % 2 ? 200 : 20), k = rand_in(0, n);
        const int largest = (int)rnd(2);
        const int64_t xd[2] = {rows, n}, yd[2] = {rows, k};
        nrv_tview x = mk(NRV_F32, 2, xd), v = mk(NRV_F32, 2, yd), ix = mk(NRV_I64, 2, yd);
        float *xv = x.data;
        for (int64_t i = 0; i < x.numel; i++) xv[i] = (float)rand_in(-20, 20) / 4.0f; /* many ties */
        const size_t sb = (size_t)n * 16;
        void *scratch = malloc(sb);
        nrv_tview *outs[2] = {&v, &ix};
        const nrv_tview *ins[1] = {&x};
        const int64_t ia[3] = {1, k, largest};
        nrv_op_args a;
        memset(&a, 0, sizeof a);
        a.type = "topk", a.name = "test_node", a.in = ins, a.n_in = 1, a.out = outs, a.n_out = 2;
        a.iattr = ia, a.n_iattr = 3, a.scratch = scratch, a.scratch_bytes = sb;
        NRV_EXPECT_STATUS(nrv_plan_op_find("topk")->run(&a), NRV_OK);
        int bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            /* reference: rank of each element = how many beat it (value, then lower position) */
            for (int64_t j = 0; j < k; j++) {
                const int64_t got = ((int64_t *)ix.data)[r * k + j];
                int64_t beaten_by = 0;
                for (int64_t t = 0; t < n; t++) {
                    const float a1 = xv[r * n + t], b1 = xv[r * n + got];
                    beaten_by += (largest ? a1 > b1 : a1 < b1) || (a1 == b1 && t < got);
                }
                bad += beaten_by != j || ((float *)v.data)[r * k + j] != xv[r * n + got];
            }
        }
        NRV_EXPECT(bad == 0, "topk n %lld k %lld largest %d: %d wrong", (long long)n, (long long)k, largest, bad);
        a.scratch_bytes = sb - 1;
        NRV_EXPECT_STATUS(nrv_plan_op_find("topk")->run(&a), NRV_ERR_INVALID_ARG);
        free(scratch), freev(&x), freev(&v), freev(&ix);
    }
}

int main(void) {
    test_gather_scatter_elements();
    test_gather_nd();
    test_scatter_nd();
    test_cumsum();
    test_cumprod();
    test_maxpool_argmax_and_unpool();
    test_topk();
    return nrv_test_summary("test_plan_index");
}
