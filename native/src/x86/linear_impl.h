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
 * Mid rows (13-48 with AVX-512, 13-32 with AVX2; from 8 when in <= 128, see
 * mid_rows_wins): x transposed to the stack and yᵀ = W · xᵀ built from outer products,
 * W broadcast element by element where it lies: no horizontal sums, no packing of W.
 *
 * Many rows: the blocked GEMM (gemm_impl.h, shared driver) with W as a transposed B and
 * the bias folded into its first store, re-using each packed W panel for every row.
 *
 * Fused layernorm + linear, the same three paths with the same thresholds. Few rows: up
 * to 16 rows at a time are normalised into a 56 KiB (L2-resident) stack block, cut along
 * k when they do not fit whole, and the dot kernel reads it from there; no normalised
 * tensor is written to memory. Mid rows: each transposed block of x is normalised in place
 * (measured like nrv_linear: 13-48 rows 73-101 GFLOP/s vs 46-86 for the dot kernel and
 * 51-84 for the GEMM, AVX-512). Many rows: the GEMM driver (up to GEMM_LN_ONCE_ROWS rows:
 * each KC slice of x normalised once per call into a stack block; beyond: each MR x KC
 * tile of x normalised while packing it). What fusing saves is the layernorm pass and its
 * output tensor; at the shapes of a decode step (rows <= 16, W of MBs) that is < 1% of the
 * time, which is dominated by the same kernels as nrv_linear (measured: bench/native, fused
 * section).
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
 * wins: no packing of W, which costs as much as the product for few rows. (Both defer
 * to the mid-rows path first where mid_rows_wins says so: up to 48 / 32 rows.) */
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

/* ---------------------------------------------------------------- mid rows */

/* yᵀ = W · xᵀ as outer products: x (rows <= 48) is transposed to a stack block, xᵀ[k, :]
 * (all the rows at depth k) then being a few contiguous vectors; per step of k those are
 * loaded once and W[n, k] broadcast for each of NB outputs, FMA'd into NB x rows/VL
 * accumulators. No horizontal sums (what costs the dot kernel ~30% on top of its FMAs at
 * in = 128: it stays at 48-53 GFLOP/s there at every row count) and W read in place, each
 * element once per call (no packing, which costs the GEMM as much as the product at these
 * row counts).
 *
 * Rows are handled in units of 8 (one 256-bit vector of rows: a whole vector with AVX2, a
 * half one with AVX-512, so 24 rows cost 3 halves, not 2 whole vectors: with only whole
 * vectors, 17-24 rows ran at 56-80 GFLOP/s against 90-100 at 16 and 32). A tile of S units
 * keeps S / MID_UPV vectors (+ a 256-bit half when S is odd with AVX-512) per output, for
 * MID_NB_<S> outputs: accumulators + S vectors of xᵀ (+ one broadcast register with AVX2,
 * which has no broadcast memory operand) fill the register file. Rows past MID_UNITS_MAX
 * units are cut into panels of as even a size as units allow.
 *
 * NB stays <= 8 with AVX-512 too, though 32 registers would hold 24 accumulators of one
 * vector: the NB rows of W are read in step, and at in = 512 or 1024 (rows 2 or 4 KiB
 * apart) more than 8 of them share an L1 set (8 ways): NB = 24 measured 13-27 GFLOP/s at
 * 1024 x 1024 against ~100 with NB = 8, and no faster elsewhere (NB 12, 16: same story at
 * in = 1024). Copying each NB x 16 block of W to the stack first (broadcasts from there)
 * avoided the conflicts but cost 5-15% everywhere else. */
#define MID_UPV (VL / 8) /* units per vector */
#if VL == 8
#ifndef MID_UNITS_MAX
#define MID_UNITS_MAX 3
#endif
/* 16 ymm: 8 x 1, 6 x 2, 4 x 3 accumulators */
#define MID_NB_1 8
#define MID_NB_2 6
#define MID_NB_3 4
#define MID_NB_4 4 /* (only as the NB of panels one unit larger than 3: none) */
#else
#ifndef MID_UNITS_MAX
#define MID_UNITS_MAX 8
#endif
/* 32 zmm: 8 outputs up to 3 vectors (24 accumulators), 6 for 3.5 and 4 */
#define MID_NB_1 8
#define MID_NB_2 8
#define MID_NB_3 8
#define MID_NB_4 8
#define MID_NB_5 8
#define MID_NB_6 8
#define MID_NB_7 6
#define MID_NB_8 6
#endif
#define MID_NB_MAX 8
/* Depths per step of the tile loop (unrolled): 8 and 16 measured the same with AVX-512
 * (8: half the code), 16 up to 5% faster with AVX2 at 14-16 rows. */
#ifndef MID_KB
#if VL == 8
#define MID_KB 16
#else
#define MID_KB 8
#endif
#endif
/* Stack block of xᵀ (k-major panels of rows padded to whole units): 32 KiB. */
#ifndef MID_XT_FLOATS
#define MID_XT_FLOATS 8192
#endif
/* Rows that take the mid-rows path (linear and the fused op), measured against the dot
 * kernel and the GEMM in one process (Zen 4, 2 cores; GFLOP/s, medians, (in, out) in
 * (128, 128), (128, 512), (512, 128), (387, 128), (256, 258), (1024, 1024)):
 *  - from LINEAR_MID_MIN_ROWS = 13 rows (2 units, 81% of the lanes used): 13-16 rows
 *    72-106 vs dot 47-98 (AVX-512; AVX2 alike); at 10-12 rows the dot kernel still wins
 *    for in >= 387 (12 rows, 512 x 128: dot 95, here 77);
 *  - from 8 rows when in <= LINEAR_MID_SHORT_IN = 128, where the dot kernel's horizontal
 *    sums weigh most (48-54 at every row count): 8-12 rows 57-77 vs 45-54;
 *  - up to LINEAR_MID_MAX_ROWS - 1. AVX-512: 48; at 24, 32 and 48 rows 85-104 vs GEMM
 *    72-92 and dot 52-86; row counts in between dip to 66-90, still ahead or level but
 *    at in = 512, where the dot kernel holds ~95 at any row count (44 rows: 97 vs 88);
 *    from 52 rows the GEMM is as fast or faster (1024 x 1024, 60-64 rows: 79-85 vs
 *    67-78). AVX2: 32; 32 rows 78-93 vs GEMM 62-70; at 36-64 the two trade places.
 *  - outputs: transposing x and writing y out cost per row and depth whatever out, so few
 *    outputs leave the dot kernel ahead (AVX-512, 32 rows: 768 x 16 dot 82, here 67;
 *    128 x 3: 38 vs 23). From LINEAR_MID_MIN_OUT = 16 outputs while in <= 8·out (256 x 32:
 *    88-90 vs 70-71; 384 x 32 level; 768 x 40: 89-93 vs 100-105), from 64 whatever in
 *    (768 x 64: 92 vs 88; 4096 x 128: 88 vs 74). */
#ifndef LINEAR_MID_MIN_ROWS
#define LINEAR_MID_MIN_ROWS 13
#endif
#ifndef LINEAR_MID_SHORT_MIN_ROWS
#define LINEAR_MID_SHORT_MIN_ROWS 8
#endif
#ifndef LINEAR_MID_SHORT_IN
#define LINEAR_MID_SHORT_IN 128
#endif
#ifndef LINEAR_MID_MIN_OUT
#define LINEAR_MID_MIN_OUT 16
#endif
#ifndef LINEAR_MID_MAX_ROWS
#if VL == 8
#define LINEAR_MID_MAX_ROWS 33
#else
#define LINEAR_MID_MAX_ROWS 49
#endif
#endif
_Static_assert(MID_UNITS_MAX <= 8 && MID_UNITS_MAX <= 4 * MID_UPV, "tiles of at most 4 vectors");
_Static_assert(MID_XT_FLOATS / (LINEAR_MID_MAX_ROWS + 7) >= 64, "at least 64 depths per chunk");

static int mid_nb(int s) {
    switch (s) {
    case 1: return MID_NB_1;
    case 2: return MID_NB_2;
#if MID_UNITS_MAX >= 3
    case 3: return MID_NB_3;
#endif
#if MID_UNITS_MAX >= 4
    case 4: return MID_NB_4;
#endif
#if MID_UNITS_MAX >= 5
    case 5: return MID_NB_5;
    case 6: return MID_NB_6;
    case 7: return MID_NB_7;
    case 8: return MID_NB_8;
#endif
    default: return MID_NB_1;
    }
}


/* One panel: xt[p·ldt + r] = x[r·ldx + p] for r < rows, p < kc, and 0 for rows <= r < ldt
 * (ldt: a multiple of 8): blocks of 8 rows x 8 depths through nrv_x86_transpose8 (rows past
 * `rows` load as zeros), the kc % 8 last depths one by one. */
static void mid_transpose(const float *x, int64_t ldx, int64_t rows, int64_t kc, float *xt, int64_t ldt) {
    for (int64_t r = 0; r < ldt; r += 8) {
        const int64_t nr = rows - r < 0 ? 0 : (rows - r < 8 ? rows - r : 8);
        const float *xr = x + (nr > 0 ? r : 0) * ldx;
        int64_t p = 0;
        for (; p + 8 <= kc; p += 8) {
            __m256 v[8];
            for (int t = 0; t < 8; t++) v[t] = t < nr ? _mm256_loadu_ps(xr + t * ldx + p) : _mm256_setzero_ps();
            nrv_x86_transpose8(v);
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(xt + (p + t) * ldt + r, v[t]);
        }
        for (; p < kc; p++)
            for (int t = 0; t < 8; t++) xt[p * ldt + r + t] = t < nr ? xr[t * ldx + p] : 0.0f;
    }
}

/* Fused op: one transposed panel normalised in place, xt[p, r] = (xt[p, r] - mean[r]) ·
 * rstd[r] · gamma[p] + beta[p], the same operations as v_normalise_row (so the same
 * values), 8 rows at a time (padding rows have mean = rstd = 0 there: finite, unused). */
static void mid_normalise(float *xt, int64_t kc, int64_t ldt, const float *mean, const float *rstd,
                          const float *gamma, const float *beta) {
    for (int64_t r = 0; r < ldt; r += 8) {
        const __m256 m = _mm256_loadu_ps(mean + r), rs = _mm256_loadu_ps(rstd + r);
        for (int64_t p = 0; p < kc; p++) {
            float *xp = xt + p * ldt + r;
            const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xp), m), rs);
            _mm256_storeu_ps(xp, beta ? _mm256_fmadd_ps(d, _mm256_set1_ps(gamma[p]), _mm256_set1_ps(beta[p]))
                                      : _mm256_mul_ps(d, _mm256_set1_ps(gamma[p])));
        }
    }
}

/* The half vector's broadcast: the low half of the full one when that one is in a register
 * anyway (RV >= 2: measured +10-15% at rows 36-56), else its own (RV = 1: the full
 * vector's FMA takes its broadcast from memory; sharing one measured 5-8% slower at rows
 * 18-24). */
#if VL == 16
#define MID_LOW8(v) _mm512_castps512_ps256(v)
#else
#define MID_LOW8(v) (v)
#endif
/* One step of k for a tile: S·8 values of xᵀ at xp, NB broadcasts of W at depth p. */
#define MID_STEP(xp, p)                                                                                        \
    do {                                                                                                       \
        vf xv_[4];                                                                                             \
        __m256 xh_ = _mm256_setzero_ps();                                                                      \
        _Pragma("GCC unroll 8") for (int v = 0; v < RV; v++) xv_[v] = vload((xp) + v * VL);                     \
        if (H) xh_ = _mm256_loadu_ps((xp) + RV * VL);                                                          \
        _Pragma("GCC unroll 8") for (int j = 0; j < NB; j++) {                                                 \
            const float wv_ = wn[j][p];                                                                        \
            const vf bw_ = vset1(wv_);                                                                         \
            _Pragma("GCC unroll 8") for (int v = 0; v < RV; v++) acc[j][v] = vfmadd(bw_, xv_[v], acc[j][v]);    \
            if (H) acch[j] = _mm256_fmadd_ps(RV >= 2 ? MID_LOW8(bw_) : _mm256_set1_ps(wv_), xh_, acch[j]);     \
        }                                                                                                      \
    } while (0)

/* The first n (1..8) floats of v to p, in at most three stores. */
static inline void mid_store_n(float *p, __m256 v, int64_t n) {
    if (n == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    __m128 h = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, h);
        h = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)(void *)p, h);
        h = _mm_movehl_ps(h, h);
        p += 2;
        n -= 2;
    }
    if (n) _mm_store_ss(p, h);
}

/* y[r, o..o+nout) (=|+=) Σ_p xt[p, r] · w[o.., p] for the S·8 rows of a panel of xt (S·8
 * floats per depth; rows >= rvalid are padding: computed, not stored) and NB outputs (rows
 * of w past nout read row 0 and are discarded). Per step of k: S·8 values of xᵀ in RV
 * vectors (+ H halves), NB broadcasts of W read in place, NB·(RV + H) FMAs into as many
 * accumulators; no horizontal sum, no copy of W. The accumulators start at the bias
 * (first k-chunk) and go out through a small stack tile, transposed (see below). */
static inline __attribute__((always_inline)) void mid_tile(int S, int NB, const float *xt, const float *w,
                                                           int64_t ldw, int64_t nout, int64_t kc, const float *bias,
                                                           int accumulate, int64_t rvalid, float *y, int64_t ldy) {
    const int RV = S / MID_UPV, H = S % MID_UPV, W8 = S * 8;
    const float *wn[MID_NB_MAX];
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) wn[j] = w + (j < nout ? j : 0) * ldw;
    vf acc[MID_NB_MAX][4];
    __m256 acch[MID_NB_MAX];
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) {
        const float b0 = (!accumulate && bias) ? bias[j < nout ? j : 0] : 0.0f;
#pragma GCC unroll 8
        for (int v = 0; v < RV; v++) acc[j][v] = vset1(b0);
        acch[j] = _mm256_set1_ps(b0);
    }
    const float *xp = xt;
    int64_t p = 0;
    for (; p + MID_KB <= kc; p += MID_KB, xp += MID_KB * W8) {
#pragma GCC unroll 16
        for (int kk = 0; kk < MID_KB; kk++) MID_STEP(xp + kk * W8, p + kk);
    }
    for (; p < kc; p++, xp += W8) MID_STEP(xp, p);
    /* out through the stack, transposed: with NB = 8, each 8 rows x 8 outputs in registers
     * (nrv_x86_transpose8), then a row's outputs stored at once (+1-3% overall at in = 128 with
     * AVX-512 over scalar copies; no gain for the NB = 6 and 4 tiles of AVX2, which copy) */
    _Alignas(64) float t[MID_NB_MAX * 64];
#pragma GCC unroll 8
    for (int j = 0; j < NB; j++) {
#pragma GCC unroll 8
        for (int v = 0; v < RV; v++) vstore(t + j * W8 + v * VL, acc[j][v]);
        if (H) _mm256_store_ps(t + j * W8 + RV * VL, acch[j]);
    }
    /* (rvalid <= S·8 and nout <= NB by construction; the clamps say so to the compiler) */
    const int64_t rn = rvalid < W8 ? rvalid : W8, nn = nout < NB ? nout : NB;
    if (NB == 8 && !accumulate) {
        for (int u = 0; u * 8 < rn; u++) {
            __m256 tr[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) tr[j] = _mm256_load_ps(t + j * W8 + u * 8);
            nrv_x86_transpose8(tr);
            const int nr = rn - u * 8 < 8 ? (int)(rn - u * 8) : 8;
            for (int i = 0; i < nr; i++) mid_store_n(y + (u * 8 + i) * ldy, tr[i], nn);
        }
        return;
    }
    for (int64_t r = 0; r < rn; r++) {
        float *yr = y + r * ldy;
        if (accumulate)
            for (int64_t j = 0; j < nn; j++) yr[j] += t[j * W8 + r];
        else
            for (int64_t j = 0; j < nn; j++) yr[j] = t[j * W8 + r];
    }
}

/* Tile instances: S units with NB(S) or NB(S + 1) outputs (panels of S and S + 1 units
 * share the NB of the larger). The last outputs, when fewer than NB, run a full tile
 * (rows of W past out read the tile's first row, results discarded). */
#define MID_TILE_S(S, NBOWN, NBUP)                                                                             \
    case S:                                                                                                    \
        if ((NBUP) == (NBOWN) || nb == (NBOWN))                                                                \
            mid_tile(S, NBOWN, xt, w, ldw, nout, kc, bias, accumulate, rvalid, y, ldy);                        \
        else mid_tile(S, NBUP, xt, w, ldw, nout, kc, bias, accumulate, rvalid, y, ldy);                         \
        break

static __attribute__((noinline)) void mid_tile_any(int s, int nb, const float *xt, const float *w, int64_t ldw,
                                                   int64_t nout, int64_t kc, const float *bias, int accumulate,
                                                   int64_t rvalid, float *y, int64_t ldy) {
    switch (s) {
        MID_TILE_S(1, MID_NB_1, MID_NB_2);
        MID_TILE_S(2, MID_NB_2, MID_NB_3);
#if MID_UNITS_MAX >= 3
        MID_TILE_S(3, MID_NB_3, MID_NB_4);
#endif
#if MID_UNITS_MAX >= 4
        MID_TILE_S(4, MID_NB_4, MID_NB_5);
#endif
#if MID_UNITS_MAX >= 5
        MID_TILE_S(5, MID_NB_5, MID_NB_6);
        MID_TILE_S(6, MID_NB_6, MID_NB_7);
        MID_TILE_S(7, MID_NB_7, MID_NB_8);
        MID_TILE_S(8, MID_NB_8, MID_NB_8);
#endif
    default: break; /* 1 <= s <= MID_UNITS_MAX by construction */
    }
}

/* The mid-rows path of nrv_linear. x is cut along k into chunks whose transpose fits
 * MID_XT_FLOATS (equal chunks); each chunk is transposed to the stack as panels of up to
 * MID_UNITS_MAX units of rows (each k-major with its own width, so a tile steps through it
 * at constant offsets), then for each group of NB outputs, every panel (re-reading the NB
 * rows of W, NB·kc floats, from L1); later chunks add to y. Out of line: its 32 KiB block
 * must never share a frame with the GEMM driver's buffers. */
static __attribute__((noinline)) void mid_rows(const float *x, int64_t rows, int64_t in, const float *w,
                                               const float *b, int64_t out, float *y, const float *gamma,
                                               const float *beta, float eps) {
    _Alignas(64) float xt[MID_XT_FLOATS];
    /* fused op (gamma non-NULL): every row's statistics first; 0 past the last row */
    _Alignas(32) float mean[LINEAR_MID_MAX_ROWS + 7], rstd[LINEAR_MID_MAX_ROWS + 7];
    if (gamma) {
        for (int64_t r = 0; r < rows; r++) v_row_stats(x + r * in, in, eps, &mean[r], &rstd[r]);
        for (int64_t r = rows; r < (rows + 7) / 8 * 8; r++) mean[r] = rstd[r] = 0.0f;
    }
    const int units = (int)((rows + 7) / 8);
    const int np = (units + MID_UNITS_MAX - 1) / MID_UNITS_MAX;
    const int s0 = (units + np - 1) / np, nbig = units - (s0 - 1) * np; /* panels: nbig of s0 units, then s0 - 1 */
    const int nb = mid_nb(s0);
    int64_t kmax = MID_XT_FLOATS / ((int64_t)units * 8);
    if (kmax >= in) kmax = in;
    else {
        const int64_t nch = (in + kmax - 1) / kmax;
        const int64_t keq = ((in + nch - 1) / nch + 7) / 8 * 8;
        if (keq < kmax) kmax = keq;
    }
    for (int64_t pc = 0; pc < in; pc += kmax) {
        const int64_t kc = in - pc < kmax ? in - pc : kmax;
        for (int i = 0, r = 0; i < np; i++) {
            const int s = i < nbig ? s0 : s0 - 1;
            mid_transpose(x + r * in + pc, in, rows - r < s * 8 ? rows - r : s * 8, kc, xt + (int64_t)r * kc, s * 8);
            if (gamma)
                mid_normalise(xt + (int64_t)r * kc, kc, s * 8, mean + r, rstd + r, gamma + pc, beta ? beta + pc : NULL);
            r += s * 8;
        }
        for (int64_t o = 0; o < out; o += nb) {
            const int64_t nout = out - o < nb ? out - o : nb;
            for (int i = 0, r = 0; i < np; i++) {
                const int s = i < nbig ? s0 : s0 - 1;
                mid_tile_any(s, nb, xt + (int64_t)r * kc, w + o * in + pc, in, nout, kc, b ? b + o : NULL, pc > 0,
                             rows - r < s * 8 ? rows - r : s * 8, y + (int64_t)r * out + o, out);
                r += s * 8;
            }
        }
    }
}

/* Whether nrv_linear / the fused op take the mid-rows path (the measurements are with
 * LINEAR_MID_MIN_ROWS above). */
_Static_assert(4 * LINEAR_MID_MIN_OUT <= NRV_LINEAR_SPLIT_MIN_OUT,
               "mid_rows_wins may depend on out only below NRV_LINEAR_SPLIT_MIN_OUT (kernels.h)");
static inline int mid_rows_wins(int64_t rows, int64_t in, int64_t out) {
    if (rows >= LINEAR_MID_MAX_ROWS || out < LINEAR_MID_MIN_OUT || (out < 4 * LINEAR_MID_MIN_OUT && in > 8 * out))
        return 0;
    return rows >= LINEAR_MID_MIN_ROWS || (rows >= LINEAR_MID_SHORT_MIN_ROWS && in <= LINEAR_MID_SHORT_IN);
}

void X86FN(nrv_linear)(const float *x, int64_t rows, int64_t in, const float *w, const float *b, int64_t out,
                       float *y) {
    if (mid_rows_wins(rows, in, out)) {
        mid_rows(x, rows, in, w, b, out, y, NULL, NULL, 0.0f);
        return;
    }
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
    if (mid_rows_wins(rows, in, out)) {
        mid_rows(x, rows, in, w, b, out, y, gamma, beta, eps);
        return;
    }
    if (rows < LINEAR_GEMM_MIN_ROWS) {
        fused_few_rows(x, rows, in, gamma, beta, eps, w, b, out, y);
        return;
    }
    const nrv_x86_gemm_args g = {.trans_a = 0, .trans_b = 1, .m = rows, .n = out, .k = in, .alpha = 1.0f,
                                 .a = x, .lda = in, .b = w, .ldb = in, .beta = 0.0f, .c = y, .ldc = out,
                                 .bias = b, .ln_gamma = gamma, .ln_beta = beta, .ln_eps = eps};
    X86FN(nrv_x86_gemm_driver)(&g);
}
