/* linear_w8_common.h — the scalar parts the SIMD int8-weight linear kernels share
 * (x86/linear_w8_impl.h, neon/linear_w8_neon_impl.h): the per-output epilogue and the driver
 * that walks a call in chunks of W8_ROWS_CHUNK rows (their sums on the stack), groups of NO
 * outputs (with the group pf_groups ahead prefetched while it lies wholly inside q) and
 * blocks of up to W8_R rows. The vector work stays in each ISA's w8_rows / w8_row_sum.
 * The includer defines W8_R and W8_ROWS_CHUNK first, and W8_WT, the stored weight's element
 * type, when it is not int8_t (the fp16-weight linear_f16 is this template with uint16_t
 * half bits, s = 1 and no z). */
#ifndef NERVE_LINEAR_W8_COMMON_H
#define NERVE_LINEAR_W8_COMMON_H

#include <stdint.h>

#ifndef W8_WT
#define W8_WT int8_t
#endif

/* y[r, o] from the dot product of row r with q's row o: s[o]·dot + z[o]·rsum + b[o]
 * (z and b optional; st 0: s and z per tensor, 1: per output). */
static inline float w8_epilogue(float dot, int64_t o, const float *s, const float *z, int64_t st, const float *b,
                                float rsum) {
    float v = s[o * st] * dot;
    if (z) v += z[o * st] * rsum;
    return v + (b ? b[o] : 0.0f);
}

/* rr rows (<= W8_R) of x against the no outputs at q (nout of them real), into y (row stride ldy). */
typedef void (*w8_rows_fn)(int64_t rr, int no, const float *x, int64_t in, const W8_WT *q, const W8_WT *pf,
                           int64_t nout, const float *s, const float *z, int64_t st, const float *b,
                           const float *rsum, float *y, int64_t ldy);

/* Σ_k x[k], in a fixed order (a function of n alone). */
typedef float (*w8_row_sum_fn)(const float *x, int64_t n);

/* The whole call (nrv_linear_w8_fn's contract, y with row stride ldy) with no outputs per group. */
static inline __attribute__((always_inline)) void w8_drive(int no, int pf_groups, w8_rows_fn rows_fn,
                                                           w8_row_sum_fn row_sum, const float *x, int64_t rows,
                                                           int64_t in, const W8_WT *q, const float *s,
                                                           const float *z, int64_t sz_stride, const float *b,
                                                           int64_t out, float *y, int64_t ldy) {
    float rsum[W8_ROWS_CHUNK];
    for (int64_t r0 = 0; r0 < rows; r0 += W8_ROWS_CHUNK) {
        const int64_t rc = rows - r0 < W8_ROWS_CHUNK ? rows - r0 : W8_ROWS_CHUNK;
        const float *xc = x + r0 * in;
        if (z)
            for (int64_t r = 0; r < rc; r++) rsum[r] = row_sum(xc + r * in, in);
        for (int64_t o = 0; o < out; o += no) {
            const int64_t nout = out - o < no ? out - o : no;
            const float *so = s + o * sz_stride, *zo = z ? z + o * sz_stride : NULL, *bo = b ? b + o : NULL;
            const int64_t ahead = o + (int64_t)pf_groups * no;
            const W8_WT *pf = pf_groups && ahead + no <= out ? q + ahead * in : NULL;
            for (int64_t r = 0; r < rc; r += W8_R) {
                const int64_t rr = rc - r < W8_R ? rc - r : W8_R;
                rows_fn(rr, no, xc + r * in, in, q + o * in, r == 0 ? pf : NULL, nout, so, zo, sz_stride, bo,
                        rsum + r, y + (r0 + r) * ldy + o, ldy);
            }
        }
    }
}

#endif /* NERVE_LINEAR_W8_COMMON_H */
