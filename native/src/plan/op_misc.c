/* op_misc.c — plan ops without a family (see plan_ops.h for the contract): det (ONNX Det),
 * bitcast (ONNX BitCast) and max_roi_pool (ONNX MaxRoiPool, Fast R-CNN's ROI pooling).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "plan_ops.h"

/* ================================================================== det */

/* The determinant of one n x n row-major matrix a (f32), by LU with partial pivoting in
 * double in lu (n·n doubles). The pivot is the first largest |a| of its column; a zero column
 * is passed over (no elimination) and the loop goes on, so a singular matrix gives ±0 with the
 * sign of the row exchanges, as onnxruntime's LU (Eigen's PartialPivLU) does: [[1, 2], [2, 4]]
 * is -0 there. The product of the pivots is kept as a mantissa and a power of two, so no
 * partial product overflows or underflows the double range before the float32 result is
 * rounded. A NaN anywhere gives NaN (a NaN in a column whose other entries are zero would
 * otherwise never reach a pivot). n = 0 gives 1 (the empty product, as onnxruntime). */
static float det_one(const float *a, int64_t n, double *lu) {
    int has_nan = 0;
    for (int64_t i = 0; i < n * n; i++) {
        lu[i] = a[i];
        has_nan |= a[i] != a[i];
    }
    if (has_nan) return NAN;
    double mant = 1.0;
    int64_t expo = 0;
    int neg = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t p = k;
        double best = fabs(lu[k * n + k]);
        for (int64_t i = k + 1; i < n; i++) {
            const double v = fabs(lu[i * n + k]);
            if (v > best) best = v, p = i;
        }
        if (p != k) {
            for (int64_t j = k; j < n; j++) {
                const double t = lu[k * n + j];
                lu[k * n + j] = lu[p * n + j];
                lu[p * n + j] = t;
            }
            neg = !neg;
        }
        const double piv = lu[k * n + k];
        int e;
        mant = frexp(mant * piv, &e);
        expo += e;
        if (piv == 0.0) continue; /* the column below is zero too: nothing to eliminate */
        for (int64_t i = k + 1; i < n; i++) {
            const double f = lu[i * n + k] / piv;
            if (f == 0.0) continue;
            for (int64_t j = k + 1; j < n; j++) lu[i * n + j] -= f * lu[k * n + j];
        }
    }
    /* the exponent of a float32 result lies in [-149, 128]: clamped, ldexp still gives 0 or inf */
    if (expo > 4096) expo = 4096;
    if (expo < -4096) expo = -4096;
    const double d = ldexp(neg ? -mant : mant, (int)expo);
    return (float)d;
}

/* det (ONNX Det): the determinant of each square matrix in x's last two axes.
 *   in[0]  x f32 [..., M, M] (rank >= 2; M >= 0)
 *   out[0] y f32 [...]: x's dims less the last two (rank 0 for a rank-2 x)
 *   no attributes
 *   scratch: 8·M·M bytes (one matrix in double), when there is a matrix with M > 0.
 * Each matrix by LU with partial pivoting accumulated in double (det_one: M = 0 gives 1, a
 * singular matrix ±0, a NaN NaN), the result rounded once to float32. */
static nrv_status det_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 0, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    char b1[128], b2[128];
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x %s is not a stack of square matrices [..., M, M]",
                           nrv_op_fmt_dims(b1, sizeof b1, x));
    int ok = y->rank == x->rank - 2;
    for (int d = 0; ok && d < y->rank; d++) ok = y->dims[d] == x->dims[d];
    if (!ok)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "y %s, expected x %s less its last two dims",
                           nrv_op_fmt_dims(b1, sizeof b1, y), nrv_op_fmt_dims(b2, sizeof b2, x));
    const int64_t n = x->dims[x->rank - 1], count = y->numel;
    /* with a matrix present n·n <= numel(x), which nrv_op_check_view bounded */
    const uint64_t need = count > 0 ? (uint64_t)n * (uint64_t)n * sizeof(double) : 0;
    if (need > 0 && (!a->scratch || a->scratch_bytes < need))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "scratch is %zu bytes, %llu needed", a->scratch_bytes,
                           (unsigned long long)need);
    const float *xp = x->data;
    float *yp = y->data;
    for (int64_t b = 0; b < count; b++) yp[b] = det_one(xp + b * n * n, n, a->scratch);
    return NRV_OK;
}

/* ================================================================== bitcast */

/* bitcast (ONNX BitCast): y holds x's bytes unchanged, read as y's dtype.
 *   in[0]  x any dtype
 *   out[0] y a dtype of x's width (f32/i32, i64/f64, i8/u8/bool; f16 alone), x's dims
 *   no attributes. In place ok.
 * ONNX reads the bytes as little endian, which is the host's order on every target nerve
 * builds for; a big-endian host is refused rather than given other numbers. A byte other
 * than 0 or 1 made a bool passes as it is (the bits are the op's whole point). */
static nrv_status bitcast_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 0, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    const nrv_tview *x = a->in[0];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return nrv_op_fail(a, NRV_ERR_UNSUPPORTED, "ONNX BitCast reads bytes as little endian; this host is big endian");
#endif
    const size_t xs = nrv_dtype_size((nrv_dtype)x->dtype), ys = nrv_dtype_size((nrv_dtype)y->dtype);
    if (xs != ys)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "x is %s (%zu bytes), y %s (%zu bytes): the widths must agree",
                           nrv_dtype_str((nrv_dtype)x->dtype), xs, nrv_dtype_str((nrv_dtype)y->dtype), ys);
    NRV_TRY(nrv_op_same_dims(a, y, "y", x, "x"));
    if (y->data != x->data && x->numel > 0) memcpy(y->data, x->data, (size_t)x->numel * xs);
    return NRV_OK;
}

/* ================================================================== max_roi_pool */

/* Rounded ROI corners beyond this (in pixels, after spatial_scale) are clamped to it: far
 * past any image, so the clipped bins are the same, and every sum below stays in int64.
 * onnxruntime converts to int without a bound there (undefined past 2^31). */
#define ROI_COORD_LIMIT 1073741824.0f /* 2^30 */

static int64_t roi_coord(float v, float scale) {
    float r = roundf(v * scale); /* float product, rounded half away from zero, as onnxruntime */
    if (r > ROI_COORD_LIMIT) r = ROI_COORD_LIMIT;
    if (r < -ROI_COORD_LIMIT) r = -ROI_COORD_LIMIT;
    return (int64_t)r;
}

/* [*lo, *hi) of bin i of `bins` over a roi side starting at `start`, `len` pixels long
 * (>= 1), clipped to [0, extent): floor(i·size) and ceil((i + 1)·size) with size = len/bins,
 * each product in float, as onnxruntime computes them. */
static void roi_bin(int64_t i, int64_t bins, int64_t start, int64_t len, int64_t extent, int64_t *lo,
                    int64_t *hi) {
    const float size = (float)len / (float)bins;
    int64_t l = (int64_t)floorf((float)i * size) + start, h = (int64_t)ceilf((float)(i + 1) * size) + start;
    l = l < 0 ? 0 : l > extent ? extent : l;
    h = h < 0 ? 0 : h > extent ? extent : h;
    *lo = l, *hi = h;
}

/* max_roi_pool (ONNX MaxRoiPool: Fast R-CNN's ROI max pooling, onnxruntime's CPU semantics):
 * each roi, scaled by spatial_scale and rounded to whole pixels, is cut into ph x pw bins and
 * each bin of each channel gives the largest x inside it.
 *   in[0]  x    f32 [N, C, H, W]
 *   in[1]  rois f32 [R, 5]: rows (batch index, x1, y1, x2, y2) in the coordinates of the image
 *               x was computed from; R may be a run-time size
 *   out[0] y    f32 [R, C, ph, pw]
 *   iattr (2): [ph, pw] (pooled_shape, each >= 1)
 *   fattr (1): [spatial_scale] (> 0)
 *   no scratch.
 * Per roi: the batch index is truncated toward zero (as a C cast) and must lie in [0, N):
 * NRV_ERR_INDEX naming the roi and the value otherwise, and a NaN or infinite corner is
 * NRV_ERR_INVALID_ARG, both checked for every roi before anything is written. The corners
 * are round(v · spatial_scale) (float product, half away from zero); the roi is
 * (x2 - x1 + 1) x (y2 - y1 + 1) pixels, at least 1 x 1 (a reversed roi is one pixel); bin i
 * covers [floor(i·s), ceil((i + 1)·s)) from the roi's start with s = side/bins (float),
 * clipped to the image. A bin left empty by the clipping is 0; otherwise the max starts from
 * -FLT_MAX and takes each value v unless v < the max so far, so a NaN is kept only when no
 * number follows it in the bin (onnxruntime's std::max(v, max) in row-major order). */
static nrv_status max_roi_pool_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 2, 1));
    NRV_TRY(nrv_op_check_in(a, 0, "x"));
    NRV_TRY(nrv_op_check_in(a, 1, "rois"));
    const nrv_tview *x = a->in[0], *rois = a->in[1];
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "y"));
    NRV_TRY(nrv_op_expect_dtype(a, x, "x", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, rois, "rois", NRV_F32));
    NRV_TRY(nrv_op_expect_dtype(a, y, "y", NRV_F32));
    const int64_t ph = a->iattr[0], pw = a->iattr[1];
    const float scale = a->fattr[0];
    if (ph < 1 || pw < 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "pooled_shape [%lld, %lld] must be positive", (long long)ph,
                           (long long)pw);
    if (!(scale > 0.0f) || !isfinite(scale))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "spatial_scale %g must be finite and > 0", (double)scale);
    char b1[128], b2[128];
    if (x->rank != 4)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "x %s must be [N, C, H, W]", nrv_op_fmt_dims(b1, sizeof b1, x));
    if (rois->rank != 2 || rois->dims[1] != 5)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "rois %s must be [num_rois, 5]", nrv_op_fmt_dims(b1, sizeof b1, rois));
    const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], R = rois->dims[0];
    if (y->rank != 4 || y->dims[0] != R || y->dims[1] != C || y->dims[2] != ph || y->dims[3] != pw)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "y %s, expected [%lld, %lld, %lld, %lld] for x %s",
                           nrv_op_fmt_dims(b1, sizeof b1, y), (long long)R, (long long)C, (long long)ph,
                           (long long)pw, nrv_op_fmt_dims(b2, sizeof b2, x));
    const float *rp = rois->data;
    static const char *const corner[4] = {"x1", "y1", "x2", "y2"};
    for (int64_t r = 0; r < R; r++) {
        const float bi = rp[r * 5];
        /* the truncated value is in [0, N) exactly when bi > -1 and bi < N (false for NaN) */
        if (!((double)bi > -1.0 && (double)bi < (double)N))
            return nrv_op_fail(a, NRV_ERR_INDEX, "rois[%lld] has batch index %g, outside [0, %lld) (x's batch)",
                               (long long)r, (double)bi, (long long)N);
        for (int k = 0; k < 4; k++)
            if (!isfinite(rp[r * 5 + 1 + k]))
                return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "rois[%lld] has %s = %g: corners must be finite",
                                   (long long)r, corner[k], (double)rp[r * 5 + 1 + k]);
    }
    const float *xp = x->data;
    float *yp = y->data;
    for (int64_t r = 0; r < R; r++) {
        const float *roi = rp + r * 5;
        const int64_t b = (int64_t)roi[0];
        const int64_t x1 = roi_coord(roi[1], scale), y1 = roi_coord(roi[2], scale);
        const int64_t x2 = roi_coord(roi[3], scale), y2 = roi_coord(roi[4], scale);
        const int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1, rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
        for (int64_t c = 0; c < C; c++) {
            const float *plane = xp + (b * C + c) * H * W;
            float *out = yp + (r * C + c) * ph * pw;
            for (int64_t i = 0; i < ph; i++) {
                int64_t h0, h1;
                roi_bin(i, ph, y1, rh, H, &h0, &h1);
                for (int64_t j = 0; j < pw; j++) {
                    int64_t w0, w1;
                    roi_bin(j, pw, x1, rw, W, &w0, &w1);
                    float m = 0.0f;
                    if (h1 > h0 && w1 > w0) {
                        m = -FLT_MAX;
                        for (int64_t h = h0; h < h1; h++)
                            for (int64_t w = w0; w < w1; w++) {
                                const float v = plane[h * W + w];
                                m = v < m ? m : v;
                            }
                    }
                    out[i * pw + j] = m;
                }
            }
        }
    }
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_misc[] = {
    {"det", det_run, NULL},
    {"bitcast", bitcast_run, NULL},
    {"max_roi_pool", max_roi_pool_run, NULL},
    {NULL, NULL, NULL},
};
