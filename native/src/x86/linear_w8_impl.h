/* linear_w8_impl.h — the int8-weight linear layer (w8a32), written once against the vector
 * layer (linear_w8_avx2.c / linear_w8_avx512.c):
 *   y[r, o] = s[o] · Σ_k x[r, k]·q[o, k] + z[o] · Σ_k x[r, k] + b[o].
 *
 * It exists for the decode step of a model whose weights are int8 (rows 1-16): such a
 * layer is a pass over the weights, bound by memory bandwidth, and q is a quarter of the
 * bytes of the fp32 W it stands for. q is read where it lies ([out, in] row-major, like
 * linear's W) and widened to floats in registers: VL int8 → VL int32 → VL floats
 * (vpmovsxbd with the load folded in, vcvtdq2ps), then FMA'd against VL floats of each row
 * of x. The scale and zero point are applied once per output, after the horizontal sum,
 * so the inner loop is the fp32 dot kernel's with a conversion in place of a load.
 *
 * Blocking, as in linear_impl.h's dot kernel: NO rows of q (a few KiB: they stay in L1)
 * against every block of up to W8_R rows of x before moving on, so q streams from memory
 * once per call whatever the row count (rows are cut into chunks of W8_ROWS_CHUNK for the
 * row sums' stack array; the compiler only picks this op for <= 16 rows). Per step of k:
 * NO conversions + R x vectors feed NO·R FMAs into as many accumulators. NO is chosen
 * from the row count (min(rows, W8_R)): one row gets 8 outputs per pass (8 independent
 * FMA chains), more rows fewer outputs, so accumulators, x and one widened q fit the
 * register file. The row count alone picks the path and every output has its own
 * accumulators and the same k order, so an output's value never depends on which other
 * outputs share the call (callers split outputs across threads freely).
 *
 * Prefetch: while a group of NO rows of q is used, the next group (the next NO·in bytes:
 * rows are contiguous) is prefetched at the rate the block consumes q. The hardware
 * prefetchers alone did not keep up with NO interleaved short rows (in = 416: 6.5 lines
 * each): one row, 416 x 32768 (13.6 MB) streamed at 9.8 GB/s without, 17-20 GB/s with
 * (2 or 3 groups ahead: no better), and q in L2 runs at ~25 GB/s either way (Zen 4, -O3,
 * medians of 31). Measured against the fp32 linear on the same shapes: one row 3-5x
 * faster from memory and 1.3-1.6x from L2; at 8-16 rows with q in cache 0.75-0.85x (the
 * widening per row block and the horizontal sums, not the bytes, bound it there; widening
 * each group once into a stack panel instead measured no better), from memory 1.0-1.2x.
 *
 * With W8_F16 defined to 1 (linear_f16_avx2.c / linear_f16_avx512.c) the same template is the
 * fp16-weight linear (precision "fp16", kernels.h nrv_linear_f16_fn): q holds IEEE half bits,
 * widened by vcvtph2ps (F16C, exact for every half), s is 1 and there is no z, so the inner
 * loop, blocking and prefetch are shared; only the bytes per weight (2) differ.
 */
#include "x86_kernels.h"

#define W8_R 4 /* rows per block */
#define W8_NO_MAX 8
#if VL == 8
/* 16 ymm: 8x1, 6x2, 4x3, 3x4 accumulators + x + a widened q */
#define W8_NO_1 8
#define W8_NO_2 6
#define W8_NO_3 4
#define W8_NO_4 3
#else
/* 32 zmm: 8x1, 8x2, 8x3, 6x4 */
#define W8_NO_1 8
#define W8_NO_2 8
#define W8_NO_3 8
#define W8_NO_4 6
#endif
#define W8_ROWS_CHUNK 64 /* rows whose sums are on the stack at once */
#ifndef W8_PF_GROUPS
#define W8_PF_GROUPS 1 /* groups of q rows ahead to prefetch (0: none) */
#endif
#ifndef W8_PF_HINT
#ifdef W8_F16
/* fp16 rows are twice the bytes: a group of long rows prefetched into L1 overflows it before
 * use (in = 4096: 8 x 8 KiB), so fp16 prefetches into L2. One row, 4096 x 4096 (32 MiB): T1
 * 1.3-2.0 ms, T0 2.2-3.1 ms; 416 x 32768: even (1.5-2.1 ms); Zen 4, medians of 31, 4 rounds
 * alternated. */
#define W8_PF_HINT _MM_HINT_T1
#else
#define W8_PF_HINT _MM_HINT_T0
#endif
#endif
#ifdef W8_F16
#define W8_WT uint16_t
#define w8_wload vload_f16
#define w8_wload_part vload_f16_part
#else
#define w8_wload vload_i8
#define w8_wload_part vload_i8_part
#endif
#include "linear_w8_common.h"

/* Σ_k x[k], in a fixed order (a function of n alone). */
static inline float w8_row_sum(const float *x, int64_t n) {
    vf a0 = vzero(), a1 = vzero();
    int64_t p = 0;
    for (; p + 2 * VL <= n; p += 2 * VL) {
        a0 = vadd(a0, vload(x + p));
        a1 = vadd(a1, vload(x + p + VL));
    }
    if (p + VL <= n) {
        a0 = vadd(a0, vload(x + p));
        p += VL;
    }
    if (p < n) a1 = vadd(a1, vload_tail(x + p, vtail_mask(n - p)));
    return vhsum(vadd(a0, a1));
}

/* y[r, o] for R rows (R <= W8_R) and up to NO outputs (rows of q past nout read row 0 and
 * are discarded); R and NO are constants after inlining. rsum: the rows' sums (read only
 * when z is non-NULL). */
static inline __attribute__((always_inline)) void w8_block(const int R, const int NO, const float *x, int64_t in,
                                                           const W8_WT *q, const W8_WT *pf, int64_t nout,
                                                           const float *s, const float *z, int64_t st,
                                                           const float *b, const float *rsum, float *y,
                                                           int64_t ldy) {
    const W8_WT *qo[W8_NO_MAX];
    for (int o = 0; o < NO; o++) qo[o] = q + (o < nout ? o : 0) * in;
    vf acc[W8_R][W8_NO_MAX];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = vzero();
    int64_t p = 0;
    for (; p + VL <= in; p += VL) {
        if (pf) /* NO·VL weights of a later group per step: the rate this block consumes q */
            for (int j = 0; j < (NO * VL * (int)sizeof(W8_WT) + 63) / 64; j++)
                _mm_prefetch((const char *)(pf + p * NO) + 64 * j, W8_PF_HINT);
        vf xv[W8_R];
        for (int r = 0; r < R; r++) xv[r] = vload(x + r * in + p);
        for (int o = 0; o < NO; o++) {
            const vf w = w8_wload(qo[o] + p);
            for (int r = 0; r < R; r++) acc[r][o] = vfmadd(xv[r], w, acc[r][o]);
        }
    }
    if (p < in) {
        /* masked lanes are 0 in both x and q: they add nothing */
        const vtail t = vtail_mask(in - p);
        vf xv[W8_R];
        for (int r = 0; r < R; r++) xv[r] = vload_tail(x + r * in + p, t);
        for (int o = 0; o < NO; o++) {
            const vf w = w8_wload_part(qo[o] + p, in - p);
            for (int r = 0; r < R; r++) acc[r][o] = vfmadd(xv[r], w, acc[r][o]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *yr = y + r * ldy;
        for (int o0 = 0; o0 < NO; o0 += 4) {
            float d[4];
            _mm_storeu_ps(d, vhsum4(acc[r][o0], o0 + 1 < NO ? acc[r][o0 + 1] : vzero(),
                                    o0 + 2 < NO ? acc[r][o0 + 2] : vzero(), o0 + 3 < NO ? acc[r][o0 + 3] : vzero()));
            for (int j = 0; j < 4 && o0 + j < NO; j++) {
                const int64_t o = o0 + j;
                if (o >= nout) break;
                yr[o] = w8_epilogue(d[j], o, s, z, st, b, rsum[r]);
            }
        }
    }
}

/* One block of R rows with NO outputs per pass (NO one of the W8_NO_* for this ISA). */
#define W8_CASE(R_, NO_)                                                                                     \
    if (rr == (R_) && no == (NO_)) {                                                                         \
        w8_block(R_, NO_, x, in, q, pf, nout, s, z, st, b, rsum, y, ldy);                                    \
        return;                                                                                              \
    }

static __attribute__((noinline)) void w8_rows(int64_t rr, int no, const float *x, int64_t in, const W8_WT *q,
                                              const W8_WT *pf, int64_t nout, const float *s, const float *z,
                                              int64_t st, const float *b, const float *rsum, float *y,
                                              int64_t ldy) {
    /* rows < W8_R use their own NO; the blocks of a call with >= W8_R rows all use W8_NO_4 */
    W8_CASE(1, W8_NO_1)
    W8_CASE(2, W8_NO_2)
    W8_CASE(3, W8_NO_3)
    W8_CASE(4, W8_NO_4)
#if W8_NO_4 != W8_NO_1
    W8_CASE(1, W8_NO_4)
#endif
#if W8_NO_4 != W8_NO_2
    W8_CASE(2, W8_NO_4)
#endif
#if W8_NO_4 != W8_NO_3
    W8_CASE(3, W8_NO_4)
#endif
}
#undef W8_CASE

static const int w8_no_of_rows[W8_R + 1] = {0, W8_NO_1, W8_NO_2, W8_NO_3, W8_NO_4};

#ifdef W8_F16
void X86FN(nrv_linear_f16)(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                           float *y, int64_t ldy) {
    static const float one = 1.0f; /* s: 1·dot is dot exactly */
    w8_drive(w8_no_of_rows[rows < W8_R ? rows : W8_R], W8_PF_GROUPS, w8_rows, w8_row_sum, x, rows, in, w, &one, NULL,
             0, b, out, y, ldy);
}
#else
void X86FN(nrv_linear_w8)(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s,
                          const float *z, int64_t sz_stride, const float *b, int64_t out, float *y) {
    w8_drive(w8_no_of_rows[rows < W8_R ? rows : W8_R], W8_PF_GROUPS, w8_rows, w8_row_sum, x, rows, in, q, s, z,
             sz_stride, b, out, y, out);
}
#endif
