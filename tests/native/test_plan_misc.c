/* test_plan_misc.c — det, bitcast and max_roi_pool (op_misc.c) on exactly sized buffers (an
 * ASan build catches any access past them): det against a Laplace expansion in long double,
 * bitcast byte for byte, max_roi_pool on cases whose values onnxruntime gave; every bad
 * argument (a shape, a dtype, short scratch, a batch index outside the batch, a NaN corner)
 * must fail with its status and leave the output untouched. (Parity with onnxruntime on
 * random inputs: tests/python/test_onnx_ops_misc.py.)
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_plan_run.h"
#include "nrv_plan_views.h"
#include "nrv_test.h"

static nrv_status run1(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out, const int64_t *ia,
                       int n_ia, const float *fa, int n_fa, void *scratch, size_t scratch_bytes) {
    return nrv_plan_run_op(type, in, n_in, out, ia, n_ia, fa, n_fa, scratch, scratch_bytes, NULL);
}

/* det of the n x n matrix a by Laplace expansion along row `row` over the columns in `cols`
 * (a bit set), in long double; *mag gets the sum of the terms' magnitudes (its error scale). */
static long double laplace(const float *a, int n, int row, unsigned cols, long double *mag) {
    if (row == n) {
        *mag = 1;
        return 1;
    }
    long double sum = 0, m = 0;
    int sign = 1;
    for (int c = 0; c < n; c++) {
        if (!(cols & (1u << c))) continue;
        long double sub_mag;
        const long double sub = laplace(a, n, row + 1, cols & ~(1u << c), &sub_mag);
        sum += sign * (long double)a[row * n + c] * sub;
        m += fabsl((long double)a[row * n + c]) * sub_mag;
        sign = -sign;
    }
    *mag = m;
    return sum;
}

static void test_det(void) {
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 6};
    for (int rep = 0; rep < 60; rep++) {
        const int64_t n = sizes[rnd(6)], batch = rnd(4);
        const int64_t xd[3] = {batch, n, n};
        nrv_tview x = mk(NRV_F32, 3, xd), y = mk(NRV_F32, 1, xd);
        float *xv = x.data;
        nrv_test_fill(xv, x.numel, -2, 2);
        if (rep % 5 == 4 && n >= 2)
            for (int64_t b = 0; b < batch; b++) memcpy(xv + (b * n + 1) * n, xv + b * n * n, (size_t)n * 4);
        const size_t sb = (size_t)(n * n) * sizeof(double);
        void *scratch = malloc(sb ? sb : 1);
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run1("det", ins, 1, &y, NULL, 0, NULL, 0, scratch, sb), NRV_OK);
        int bad = 0;
        for (int64_t b = 0; b < batch; b++) {
            const float *a = xv + b * n * n, got = ((float *)y.data)[b];
            long double mag;
            const long double want = laplace(a, (int)n, 0, (1u << n) - 1, &mag);
            double had = 1;
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int64_t j = 0; j < n; j++) s += (double)a[i * n + j] * a[i * n + j];
                had *= sqrt(s);
            }
            /* correctly rounded but for the double LU's error, n·2^-52 of Hadamard's bound,
             * and the expansion's own, about n!·LDBL_EPSILON of its terms' sum */
            const double tol = 0.5 * (nextafterf(fabsf(got), INFINITY) - fabsf(got)) + (double)n * 0x1p-52 * had +
                               720.0 * (double)LDBL_EPSILON * (double)mag;
            if (!(fabs((double)got - (double)want) <= tol)) {
                if (!bad) fprintf(stderr, "det n %lld: got %.9g, want %.17Lg\n", (long long)n, (double)got, want);
                bad++;
            }
            if (rep % 5 == 4 && n >= 2) bad += got != 0.0f; /* a repeated row cancels exactly */
            if (n == 0) bad += got != 1.0f;
        }
        NRV_EXPECT(bad == 0, "det n %lld, batch %lld: %d wrong", (long long)n, (long long)batch, bad);
        if (batch > 0 && n > 0) { /* short scratch: refused, y untouched */
            memset(y.data, SENTINEL, nbytes(&y));
            NRV_EXPECT_STATUS(run1("det", ins, 1, &y, NULL, 0, NULL, 0, scratch, sb - 1), NRV_ERR_INVALID_ARG);
            NRV_EXPECT(untouched(&y), "det with short scratch wrote y");
        }
        free(scratch), freev(&x), freev(&y);
    }
    /* a rank-2 x gives a rank-0 y; -0 for [[1, 2], [2, 4]] (one row exchange, as onnxruntime) */
    const int64_t d2[2] = {2, 2};
    nrv_tview x = mk(NRV_F32, 2, d2), y = mk(NRV_F32, 0, d2);
    const float m[4] = {1, 2, 2, 4};
    memcpy(x.data, m, sizeof m);
    double scratch[4];
    const nrv_tview *ins[1] = {&x};
    NRV_EXPECT_STATUS(run1("det", ins, 1, &y, NULL, 0, NULL, 0, scratch, sizeof scratch), NRV_OK);
    NRV_EXPECT(*(float *)y.data == 0.0f && signbit(*(float *)y.data), "det [[1, 2], [2, 4]] is %g, want -0",
               (double)*(float *)y.data);
    /* non-square, wrong y, wrong dtype: refused before writing */
    const int64_t d23[2] = {2, 3}, d1[1] = {2};
    nrv_tview xr = mk(NRV_F32, 2, d23), y1 = mk(NRV_F32, 1, d1), xi = mk(NRV_I32, 2, d2);
    const nrv_tview *bad_x[1] = {&xr}, *bad_i[1] = {&xi};
    memset(y.data, SENTINEL, nbytes(&y));
    NRV_EXPECT_STATUS(run1("det", bad_x, 1, &y, NULL, 0, NULL, 0, scratch, sizeof scratch), NRV_ERR_SHAPE);
    NRV_EXPECT_STATUS(run1("det", ins, 1, &y1, NULL, 0, NULL, 0, scratch, sizeof scratch), NRV_ERR_SHAPE);
    NRV_EXPECT_STATUS(run1("det", bad_i, 1, &y, NULL, 0, NULL, 0, scratch, sizeof scratch), NRV_ERR_DTYPE);
    NRV_EXPECT(untouched(&y) && untouched(&y1), "a refused det wrote y");
    freev(&x), freev(&y), freev(&xr), freev(&y1), freev(&xi);
}

static void test_bitcast(void) {
    static const int pairs[][2] = {{NRV_F32, NRV_I32}, {NRV_I32, NRV_F32}, {NRV_I64, NRV_F64},
                                   {NRV_F64, NRV_I64}, {NRV_U8, NRV_I8},   {NRV_U8, NRV_BOOL}};
    for (int p = 0; p < 6; p++) {
        const int64_t dims[2] = {rnd(5), 1 + rnd(13)};
        nrv_tview x = mk(pairs[p][0], 2, dims), y = mk(pairs[p][1], 2, dims);
        uint8_t *xb = x.data;
        for (size_t i = 0; i < nbytes(&x); i++) xb[i] = (uint8_t)nrv_test_u64();
        const nrv_tview *ins[1] = {&x};
        NRV_EXPECT_STATUS(run1("bitcast", ins, 1, &y, NULL, 0, NULL, 0, NULL, 0), NRV_OK);
        NRV_EXPECT(memcmp(x.data, y.data, nbytes(&x)) == 0, "bitcast %s -> %s changed bytes",
                   nrv_dtype_str((nrv_dtype)pairs[p][0]), nrv_dtype_str((nrv_dtype)pairs[p][1]));
        NRV_EXPECT_STATUS(run1("bitcast", ins, 1, &x, NULL, 0, NULL, 0, NULL, 0), NRV_OK); /* in place */
        freev(&x), freev(&y);
    }
    const int64_t d[1] = {4}, d5[1] = {5};
    nrv_tview x = mk(NRV_F32, 1, d), y64 = mk(NRV_I64, 1, d), y5 = mk(NRV_I32, 1, d5);
    const nrv_tview *ins[1] = {&x};
    NRV_EXPECT_STATUS(run1("bitcast", ins, 1, &y64, NULL, 0, NULL, 0, NULL, 0), NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(run1("bitcast", ins, 1, &y5, NULL, 0, NULL, 0, NULL, 0), NRV_ERR_SHAPE);
    NRV_EXPECT(untouched(&y64) && untouched(&y5), "a refused bitcast wrote y");
    freev(&x), freev(&y64), freev(&y5);
}

/* x = arange(16) as [1, 1, 4, 4]; one roi, 2 x 2 bins; want: what onnxruntime 1.32 gives. */
static void roi_case(const float *roi, float scale, const float *want) {
    const int64_t xd[4] = {1, 1, 4, 4}, rd[2] = {1, 5}, yd[4] = {1, 1, 2, 2};
    nrv_tview x = mk(NRV_F32, 4, xd), r = mk(NRV_F32, 2, rd), y = mk(NRV_F32, 4, yd);
    for (int i = 0; i < 16; i++) ((float *)x.data)[i] = (float)i;
    memcpy(r.data, roi, 5 * sizeof(float));
    const nrv_tview *ins[2] = {&x, &r};
    const int64_t ia[2] = {2, 2};
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia, 2, &scale, 1, NULL, 0), NRV_OK);
    NRV_EXPECT(memcmp(y.data, want, 4 * sizeof(float)) == 0, "roi [%g %g %g %g %g] scale %g: got %g %g %g %g",
               (double)roi[0], (double)roi[1], (double)roi[2], (double)roi[3], (double)roi[4], (double)scale,
               (double)((float *)y.data)[0], (double)((float *)y.data)[1], (double)((float *)y.data)[2],
               (double)((float *)y.data)[3]);
    freev(&x), freev(&r), freev(&y);
}

static void test_max_roi_pool(void) {
    roi_case((const float[]){0, 0, 0, 3, 3}, 1.0f, (const float[]){5, 7, 13, 15});
    roi_case((const float[]){0.9f, 1.5f, 1.5f, 2.5f, 2.5f}, 1.0f, (const float[]){10, 11, 14, 15});
    roi_case((const float[]){0, -1.5f, -1.5f, 2.5f, 2.5f}, 1.0f, (const float[]){0, 3, 12, 15});
    roi_case((const float[]){-0.5f, 2, 2, 1, 1}, 1.0f, (const float[]){10, 10, 10, 10}); /* reversed: 1 x 1 */
    roi_case((const float[]){0, 10, 10, 13, 13}, 1.0f, (const float[]){0, 0, 0, 0});     /* outside: empty */
    roi_case((const float[]){0, 1, 1, 5, 5}, 0.5f, (const float[]){10, 11, 14, 15});

    /* refused before anything is written: a batch index outside [0, N), a NaN corner, wrong y */
    const int64_t xd[4] = {2, 3, 5, 6}, rd[2] = {4, 5}, yd[4] = {4, 3, 2, 2}, ybad[4] = {4, 3, 2, 3};
    nrv_tview x = mk(NRV_F32, 4, xd), r = mk(NRV_F32, 2, rd), y = mk(NRV_F32, 4, yd), yb = mk(NRV_F32, 4, ybad);
    nrv_test_fill(x.data, x.numel, -1, 1);
    float *rv = r.data;
    for (int i = 0; i < 4; i++) {
        const float roi[5] = {(float)(i % 2), (float)i, 0, 4, (float)(i + 1)};
        memcpy(rv + 5 * i, roi, sizeof roi);
    }
    const nrv_tview *ins[2] = {&x, &r};
    const int64_t ia[2] = {2, 2};
    const float one = 1.0f;
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia, 2, &one, 1, NULL, 0), NRV_OK);
    static const float bad_index[] = {2.0f, -1.0f, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        memset(y.data, SENTINEL, nbytes(&y));
        rv[5 * 3] = bad_index[k];
        NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia, 2, &one, 1, NULL, 0), NRV_ERR_INDEX);
        NRV_EXPECT(untouched(&y), "max_roi_pool with batch index %g wrote y", (double)bad_index[k]);
    }
    rv[5 * 3] = 1.0f;
    rv[5 * 3 + 4] = NAN;
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia, 2, &one, 1, NULL, 0), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(untouched(&y), "max_roi_pool with a NaN corner wrote y");
    rv[5 * 3 + 4] = 2.0f;
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &yb, ia, 2, &one, 1, NULL, 0), NRV_ERR_SHAPE);
    const float zero = 0.0f;
    const int64_t ia0[2] = {0, 2};
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia, 2, &zero, 1, NULL, 0), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(run1("max_roi_pool", ins, 2, &y, ia0, 2, &one, 1, NULL, 0), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(untouched(&y) && untouched(&yb), "a refused max_roi_pool wrote y");
    freev(&x), freev(&r), freev(&y), freev(&yb);
}

int main(void) {
    test_det();
    test_bitcast();
    test_max_roi_pool();
    return nrv_test_summary("test_plan_misc");
}
