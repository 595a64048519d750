/* linear_impl.h — linear (y = x·Wᵀ + b) and fused layernorm + linear, written once against
 * the vector layer (linear_avx2.c / linear_avx512.c).
 *
 * Few rows (the decode step of a model: 1-16 tokens) make a linear layer a pass over W,
 * which is [out, in] row-major: every output is a dot product of a row of x with a row
 * of W, both contiguous. The dot kernel takes DOT_O rows of W (12-16 KiB for in = 1024:
 * they stay in L1) and runs them against every block of DOT_R rows of x before moving
 * on, so W streams from memory exactly once per call whatever the row count; x
 * (rows · in floats, L1/L2) is what gets re-read. Per step of k: DOT_O W vectors + DOT_R
 * x vectors feed DOT_O·DOT_R FMAs into as many independent accumulators; the sums of a
 * row are reduced together at the end (vhsum4).
 *
 * Many rows: the blocked GEMM (gemm_impl.h, shared driver) with W as a transposed B and
 * the bias folded into its first store, re-using each packed W panel for every row.
 *
 * Fused layernorm + linear, few rows: up to 16 rows at a time are normalised into a 56 KiB
 * (L2-resident) stack block, cut along k when they do not fit whole, and the dot kernel reads it
 * from there; no normalised tensor is written to memory. Many rows: the GEMM driver
 * (up to GEMM_LN_ONCE_ROWS rows: each KC slice of x normalised once per call into a
 * stack block; beyond: each MR x KC tile of x normalised while packing it). What fusing saves is the layernorm pass and its output tensor; at the shapes
 * of a decode step (rows <= 16, W of MBs) that is < 1% of the time, which is dominated by
 * the same dot kernel as nrv_linear (measured: bench/native, fused section).
 */
#include "simd_math.h"
#include "x86_kernels.h"

#if VL == 8
/* 16 ymm: 4 rows x 3 outputs = 12 accumulators + 3 W + 1 x. (2 x 4 leaves only 8
 * independent FMA chains, barely enough for 2 pipes x 4 cycles latency, and loads 6
 * vectors per 8 FMAs instead of 7 per 12: measured 63-70 vs 84-95 GFLOP/s
 * at rows 4-16.) */
#ifndef DOT_R
#define DOT_R 4
#endif
#ifndef DOT_O
#define DOT_O 3
#endif
#else
/* 32 zmm: 4 rows x 4 outputs = 16 accumulators + 4 W + 1 x. */
#ifndef DOT_R
#define DOT_R 4
#endif
#ifndef DOT_O
#define DOT_O 4
#endif
#endif
/* From this many rows on, linear and the fused op go through the blocked GEMM: measured
 * crossover (bench, in x out = 1024 x 1024 and 384 x 1536) ~32 rows with AVX2, 48-64
 * with AVX-512, whose dot kernel holds more rows in registers. Below it the dot kernel
 * wins: no packing of W, which costs as much as the product for few rows. */
#ifndef LINEAR_GEMM_MIN_ROWS
#if VL == 8
#define LINEAR_GEMM_MIN_ROWS 32
#else
#define LINEAR_GEMM_MIN_ROWS 48
#endif
#endif
/* Stack block of normalised rows for the fused op, up to 16 rows: 56 KiB, the most the
 * 64 KiB stack budget (kernels.h) leaves. Long rows are cut into k-chunks that fit, and
 * every chunk costs a horizontal sum and an update of y per output: at in = 4096 and 16
 * rows, 32 KiB (8 chunks) measured 0.80x layernorm + linear, 56 KiB (5 chunks) 0.89x. */
#ifndef FUSED_BLOCK_FLOATS
#define FUSED_BLOCK_FLOATS 14336
#endif
#ifndef FUSED_MAX_ROWS
#define FUSED_MAX_ROWS 16
#endif

/* y[r, o..o+nout) (=|+=) x[r, :kc] · w[o.., :kc] for R rows (R <= DOT_R, a constant after
 * inlining) and up to DOT_O outputs (rows of w past nout read row 0 and are discarded).
 * accumulate: add to y (later k-chunks of the fused op); else y = sum (+ bias). */
static inline __attribute__((always_inline)) void dot_block(int R, const float *x, int64_t ldx, const float *w,
                                                            int64_t ldw, int64_t nout, int64_t kc,
                                                            const float *bias, int accumulate, float *y,
                                                            int64_t ldy) {
    const float *wo[DOT_O];
    for (int o = 0; o < DOT_O; o++) wo[o] = w + (o < nout ? o : 0) * ldw;
    vf acc[DOT_R][DOT_O];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < DOT_O; o++) acc[r][o] = vzero();
    int64_t p = 0;
    for (; p + VL <= kc; p += VL) {
        vf b[DOT_O];
        for (int o = 0; o < DOT_O; o++) b[o] = vload(wo[o] + p);
        for (int r = 0; r < R; r++) {
            const vf xv = vload(x + r * ldx + p);
            for (int o = 0; o < DOT_O; o++) acc[r][o] = vfmadd(xv, b[o], acc[r][o]);
        }
    }
    if (p < kc) {
        /* masked lanes are 0 in both x and w: they add nothing */
        const vtail t = vtail_mask(kc - p);
        vf b[DOT_O];
        for (int o = 0; o < DOT_O; o++) b[o] = vload_tail(wo[o] + p, t);
        for (int r = 0; r < R; r++) {
            const vf xv = vload_tail(x + r * ldx + p, t);
            for (int o = 0; o < DOT_O; o++) acc[r][o] = vfmadd(xv, b[o], acc[r][o]);
        }
    }
    for (int r = 0; r < R; r++) {
#if DOT_O == 4
        __m128 s = vhsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
#else
        __m128 s = vhsum4(acc[r][0], acc[r][1], acc[r][2], vzero());
#endif
        float *yr = y + r * ldy;
        if (DOT_O == 4 && nout == 4) {
            if (accumulate) s = _mm_add_ps(s, _mm_loadu_ps(yr));
            else if (bias) s = _mm_add_ps(s, _mm_loadu_ps(bias));
            _mm_storeu_ps(yr, s);
        } else {
            float sums[4];
            _mm_storeu_ps(sums, s);
            for (int64_t o = 0; o < nout; o++)
                yr[o] = accumulate ? yr[o] + sums[o] : (bias ? sums[o] + bias[o] : sums[o]);
        }
    }
}

/* Dispatches the row count of a block to a dot_block specialised for it. */
static void dot_rows(int64_t rows, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t nout,
                     int64_t kc, const float *bias, int accumulate, float *y, int64_t ldy) {
    switch (rows) {
    case 1: dot_block(1, x, ldx, w, ldw, nout, kc, bias, accumulate, y, ldy); break;
#if DOT_R >= 2
    case 2: dot_block(2, x, ldx, w, ldw, nout, kc, bias, accumulate, y, ldy); break;
#endif
#if DOT_R >= 3
    case 3: dot_block(3, x, ldx, w, ldw, nout, kc, bias, accumulate, y, ldy); break;
#endif
#if DOT_R >= 4
    case 4: dot_block(4, x, ldx, w, ldw, nout, kc, bias, accumulate, y, ldy); break;
#endif
    default: break; /* rows <= DOT_R by construction */
    }
}

/* y[rows, out] (=|+=) x[rows, :kc] · w[out, :kc]ᵀ (+ bias): for each group of DOT_O
 * outputs, every block of DOT_R rows. */
static void dot_all(const float *x, int64_t ldx, int64_t rows, const float *w, int64_t ldw, int64_t out,
                    int64_t kc, const float *bias, int accumulate, float *y, int64_t ldy) {
    for (int64_t o = 0; o < out; o += DOT_O) {
        const int64_t nout = out - o < DOT_O ? out - o : DOT_O;
        for (int64_t r = 0; r < rows; r += DOT_R) {
            const int64_t rr = rows - r < DOT_R ? rows - r : DOT_R;
            dot_rows(rr, x + r * ldx, ldx, w + o * ldw, ldw, nout, kc, bias ? bias + o : NULL, accumulate,
                     y + r * ldy + o, ldy);
        }
    }
}

void X86FN(nrv_linear)(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                       float *y) {
    if (rows < LINEAR_GEMM_MIN_ROWS) {
        dot_all(x, in, rows, w, in, out, in, b, 0, y, out);
        return;
    }
    const nrv_x86_gemm_args g = {.trans_a = 0, .trans_b = 1, .m = rows, .n = out, .k = in, .alpha = 1.0f,
                                 .a = x, .lda = in, .b = w, .ldb = in, .beta = 0.0f, .c = y, .ldc = out,
                                 .bias = b};
    X86FN(nrv_x86_gemm_driver)(&g);
}

/* The fused op for few rows: blocks of rows normalised into an L1-sized stack block, then
 * the dot kernel. Kept out of line so its 56 KiB block is on the stack only on this path,
 * never under the GEMM driver's own buffers (the two together would pass 64 KiB). */
static __attribute__((noinline)) void fused_few_rows(const float *x, int64_t rows, int64_t in, const float *gamma,
                                                     const float *beta, float eps, const float *w, const float *b,
                                                     int64_t out, float *y) {
    _Alignas(64) float xn[FUSED_BLOCK_FLOATS];
    float mean[FUSED_MAX_ROWS], rstd[FUSED_MAX_ROWS];
    /* All rows (up to FUSED_MAX_ROWS) in one block, so W streams from memory once per
     * FUSED_MAX_ROWS rows, like nrv_linear; rows longer than the block are cut into k-chunks
     * (of equal size), each run against all outputs and added to y. Cutting rows into
     * several blocks of whole rows instead reads all of W once per block: cheap while W
     * stays in the last-level cache (in x out = 1024 x 1024, 16 rows: 2 blocks), but at
     * in = 4096 (16 MiB of W, 2 rows per block) it made 4 rows 1.45x and 16 rows 2.2-2.7x
     * slower than layernorm + linear. */
    const int64_t rows_per_block = rows < FUSED_MAX_ROWS ? rows : FUSED_MAX_ROWS;
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_block) {
        const int64_t rb = rows - r0 < rows_per_block ? rows - r0 : rows_per_block;
        for (int64_t r = 0; r < rb; r++) v_row_stats(x + (r0 + r) * in, in, eps, &mean[r], &rstd[r]);
        /* widest k-chunk of all rb rows that fits the block, a whole number of vectors,
         * then in cut into equal chunks */
        int64_t kmax = (FUSED_BLOCK_FLOATS / rb) / VL * VL;
        if (kmax >= in) kmax = in;
        else {
            const int64_t nch = (in + kmax - 1) / kmax;
            const int64_t keq = ((in + nch - 1) / nch + VL - 1) / VL * VL;
            if (keq < kmax) kmax = keq;
        }
        for (int64_t pc = 0; pc < in; pc += kmax) {
            const int64_t kc = in - pc < kmax ? in - pc : kmax;
            for (int64_t r = 0; r < rb; r++)
                v_normalise_row(x + (r0 + r) * in + pc, kc, mean[r], rstd[r], gamma + pc, beta ? beta + pc : NULL,
                                xn + r * kc);
            dot_all(xn, kc, rb, w + pc, in, out, kc, b, pc > 0, y + r0 * out, out);
        }
    }
}

void X86FN(nrv_layernorm_linear)(const float *x, int64_t rows, int64_t in, const float *gamma, const float *beta,
                                 float eps, const float *w, const float *b, int64_t out, float *y) {
    if (rows < LINEAR_GEMM_MIN_ROWS) {
        fused_few_rows(x, rows, in, gamma, beta, eps, w, b, out, y);
        return;
    }
    const nrv_x86_gemm_args g = {.trans_a = 0, .trans_b = 1, .m = rows, .n = out, .k = in, .alpha = 1.0f,
                                 .a = x, .lda = in, .b = w, .ldb = in, .beta = 0.0f, .c = y, .ldc = out,
                                 .bias = b, .ln_gamma = gamma, .ln_beta = beta, .ln_eps = eps};
    X86FN(nrv_x86_gemm_driver)(&g);
}
