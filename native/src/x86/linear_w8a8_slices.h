/* linear_w8a8_slices.h — K cut in slices, shared by the x86 w8a8 kernels (linear_w8a8_vnni.c,
 * linear_w8a8_avx2.c, linear_w8a8_amx.c). Each quantises a block of rows into a stack buffer
 * and runs its tiles over them, so the weight is read once per block; rows too wide for a
 * full block would shrink it (at K = 11008: 2 rows on VNNI, 1 on AVX2). Such rows go a full
 * block at a time with K in slices instead: per slice every row's span is quantised with the
 * whole row's scale (this file), then the tiles run over the slice, the int32 sums waiting
 * in y between slices. Rows that fit are one slice of the same loop. Integer sums are exact
 * in any order, so the result is bit for bit the unsliced one (tests/native/test_linear_w8a8.c).
 * Plain C: included under either ISA. */
#ifndef NERVE_X86_LINEAR_W8A8_SLICES_H
#define NERVE_X86_LINEAR_W8A8_SLICES_H

#include <stdint.h>

/* A variant's row scale: returns sx of row x (n floats), *inv = 1 / sx (nrv_w8a8_row_scale of
 * max|x|). */
typedef float (*w8a8_scale_fn)(const float *x, int64_t n, float *inv);

/* A variant's quantiser of k in [k0, k0 + w) of row x (n floats; w a multiple of 4; k >= n:
 * xq = 0) with inv into dst, in the variant's element type; returns Σ xq over them when
 * want_sum (exact), else 0. */
typedef int32_t (*w8a8_span_fn)(const float *x, int64_t n, int64_t k0, int64_t w, float inv, void *dst,
                                int want_sum);

/* A whole row (kp values, the pad quantised as 0) into dst; returns sx and sets *rsum =
 * sx·Σ xq (the reference's zero-point term; 0 without want_sum). */
static inline float w8a8_quantise_row(w8a8_scale_fn scale, w8a8_span_fn span, const float *x, int64_t n, int64_t kp,
                                      void *dst, int want_sum, float *rsum) {
    float inv;
    const float sx = scale(x, n, &inv);
    const int32_t isum = span(x, n, 0, kp, inv, dst, want_sum);
    *rsum = want_sum ? sx * (float)isum : 0.0f;
    return sx;
}

/* Before the first slice: the R rows' scales (sx, inv) and their sums (isum) at 0. */
static inline void w8a8_slices_begin(w8a8_scale_fn scale, const float *x, int64_t in, int R, float *sx, float *inv,
                                     int32_t *isum) {
    for (int r = 0; r < R; r++) {
        sx[r] = scale(x + r * in, in, &inv[r]);
        isum[r] = 0;
    }
}

/* Quantises slice [k0, k0 + w) of R rows of x (row stride in) into buf (row stride `stride`
 * bytes), accumulating each row's Σ xq in isum (w8a8_slices_begin first); on the last slice
 * (k0 + w == kp) sets rsum[r] = sx[r]·isum[r], the reference's zero-point term (0 without
 * want_sum). Returns whether this slice is the last. */
static inline int w8a8_quantise_slice(w8a8_span_fn span, const float *x, int64_t in, int64_t kp, int R, int64_t k0,
                                      int64_t w, const float *inv, void *buf, int64_t stride, int want_sum,
                                      int32_t *isum, const float *sx, float *rsum) {
    const int last = k0 + w >= kp;
    for (int r = 0; r < R; r++) {
        isum[r] += span(x + r * in, in, k0, w, inv[r], (char *)buf + r * stride, want_sum);
        if (last) rsum[r] = want_sum ? sx[r] * (float)isum[r] : 0.0f;
    }
    return last;
}

#endif
