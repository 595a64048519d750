/* gemm_neon.c — NEON GEMM, C = alpha·op(A)·op(B) + beta·C, blocked and packed.
 *
 * Classic three-level blocking: for each panel of GEMM_NC columns and each chunk of
 * GEMM_KC k, op(B) is packed once (32 KiB); for each block of GEMM_MC rows op(A) is packed
 * (16 KiB); then 8 × 8 register tiles run over the packed blocks. Packing turns every
 * transpose / leading-dimension combination into one contiguous layout (8-wide slivers,
 * k-major), zero-padded at the edges so the inner kernel never needs an edge case, and
 * removes cache-set conflicts of power-of-two strides. Both pack buffers live on the stack:
 * 48 KiB in all, under the 64 KiB kernel limit.
 *
 * The 8 × 8 tile keeps 16 accumulators (8 rows × 2 vectors) in registers; per k it loads
 * 8 values of A and 8 of B (4 vector loads) and issues 16 FMAs, each broadcasting one A
 * value from a register lane (vfmaq_laneq_f32), so A needs no separate broadcast loads.
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "neon_common.h"
#include "neon_kernels.h"

#define GEMM_MR 8   /* register tile rows (sliver width of packed A) */
#define GEMM_NR 8   /* register tile columns (sliver width of packed B) */
#define GEMM_KC 128 /* k per packed chunk */
#define GEMM_MC 32  /* rows per packed A block: 32 × 128 floats = 16 KiB */
#define GEMM_NC 64  /* columns per packed B panel: 128 × 64 floats = 32 KiB */

/* Packs `width` indices of an operand into 8-wide slivers, k-major within each sliver:
 * dst[s·8·kc + p·8 + l] = element (index s·8 + l, k p), zero for indices >= width.
 * Element (i, p) is at src[i·ld + p] when k_contig (rows of A, or columns of Bᵀ), else at
 * src[p·ld + i] (Aᵀ, or rows of B). */
static void pack_slivers(const float *src, int64_t ld, int k_contig, int64_t width, int64_t kc, float *dst) {
    for (int64_t s0 = 0; s0 < width; s0 += 8, dst += 8 * kc) {
        const int64_t w = width - s0 < 8 ? width - s0 : 8;
        if (!k_contig) {
            /* The 8 indices of one k are contiguous: two vector copies per k. */
            const float *base = src + s0;
            if (w == 8) {
                for (int64_t p = 0; p < kc; p++) {
                    vst1q_f32(dst + p * 8, vld1q_f32(base + p * ld));
                    vst1q_f32(dst + p * 8 + 4, vld1q_f32(base + p * ld + 4));
                }
            } else {
                for (int64_t p = 0; p < kc; p++)
                    for (int64_t l = 0; l < 8; l++) dst[p * 8 + l] = l < w ? base[p * ld + l] : 0.0f;
            }
        } else {
            /* Each index is a contiguous run along k: load 4 k of each of 4 indices and
             * transpose the 4 × 4 block in registers (trn1/trn2 on 32- then 64-bit lanes). */
            const float *base = src + s0 * ld;
            int64_t p = 0;
            if (w == 8) {
                for (; p + 4 <= kc; p += 4) {
                    for (int h = 0; h < 2; h++) {
                        const float *r = base + (int64_t)(4 * h) * ld + p;
                        const float32x4_t r0 = vld1q_f32(r), r1 = vld1q_f32(r + ld);
                        const float32x4_t r2 = vld1q_f32(r + 2 * ld), r3 = vld1q_f32(r + 3 * ld);
                        const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1);
                        const float32x4_t t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
                        const float64x2_t d0 = vreinterpretq_f64_f32(t0), d1 = vreinterpretq_f64_f32(t1);
                        const float64x2_t d2 = vreinterpretq_f64_f32(t2), d3 = vreinterpretq_f64_f32(t3);
                        float *o = dst + p * 8 + 4 * h;
                        vst1q_f32(o, vreinterpretq_f32_f64(vtrn1q_f64(d0, d2)));      /* k = p */
                        vst1q_f32(o + 8, vreinterpretq_f32_f64(vtrn1q_f64(d1, d3)));  /* k = p + 1 */
                        vst1q_f32(o + 16, vreinterpretq_f32_f64(vtrn2q_f64(d0, d2))); /* k = p + 2 */
                        vst1q_f32(o + 24, vreinterpretq_f32_f64(vtrn2q_f64(d1, d3))); /* k = p + 3 */
                    }
                }
            }
            for (; p < kc; p++)
                for (int64_t l = 0; l < 8; l++) dst[p * 8 + l] = l < w ? base[l * ld + p] : 0.0f;
        }
    }
}

/* One 8 × 8 tile of C from a packed A sliver and a packed B sliver over kc. Only the
 * top-left mr × nr part is stored (edge tiles). first: the first k chunk, which applies
 * beta (beta == 0 writes C without reading it); later chunks add alpha·partial to C. */
static inline void gemm_tile(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int64_t mr,
                             int64_t nr, float alpha, float beta, int first) {
    float32x4_t acc[GEMM_MR][2];
    for (int r = 0; r < GEMM_MR; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < kc; p++, ap += GEMM_MR, bp += GEMM_NR) {
        const float32x4_t a0 = vld1q_f32(ap), a1 = vld1q_f32(ap + 4);
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4);
        acc[0][0] = vfmaq_laneq_f32(acc[0][0], b0, a0, 0);
        acc[0][1] = vfmaq_laneq_f32(acc[0][1], b1, a0, 0);
        acc[1][0] = vfmaq_laneq_f32(acc[1][0], b0, a0, 1);
        acc[1][1] = vfmaq_laneq_f32(acc[1][1], b1, a0, 1);
        acc[2][0] = vfmaq_laneq_f32(acc[2][0], b0, a0, 2);
        acc[2][1] = vfmaq_laneq_f32(acc[2][1], b1, a0, 2);
        acc[3][0] = vfmaq_laneq_f32(acc[3][0], b0, a0, 3);
        acc[3][1] = vfmaq_laneq_f32(acc[3][1], b1, a0, 3);
        acc[4][0] = vfmaq_laneq_f32(acc[4][0], b0, a1, 0);
        acc[4][1] = vfmaq_laneq_f32(acc[4][1], b1, a1, 0);
        acc[5][0] = vfmaq_laneq_f32(acc[5][0], b0, a1, 1);
        acc[5][1] = vfmaq_laneq_f32(acc[5][1], b1, a1, 1);
        acc[6][0] = vfmaq_laneq_f32(acc[6][0], b0, a1, 2);
        acc[6][1] = vfmaq_laneq_f32(acc[6][1], b1, a1, 2);
        acc[7][0] = vfmaq_laneq_f32(acc[7][0], b0, a1, 3);
        acc[7][1] = vfmaq_laneq_f32(acc[7][1], b1, a1, 3);
    }
    if (mr == GEMM_MR && nr == GEMM_NR) {
        for (int r = 0; r < GEMM_MR; r++) {
            float *cr = c + r * ldc;
            for (int h = 0; h < 2; h++) {
                float32x4_t v;
                if (!first) v = vfmaq_n_f32(vld1q_f32(cr + 4 * h), acc[r][h], alpha);
                else if (beta == 0.0f) v = vmulq_n_f32(acc[r][h], alpha);
                else v = vfmaq_n_f32(vmulq_n_f32(vld1q_f32(cr + 4 * h), beta), acc[r][h], alpha);
                vst1q_f32(cr + 4 * h, v);
            }
        }
        return;
    }
    float tile[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; r++) {
        vst1q_f32(tile[r], acc[r][0]);
        vst1q_f32(tile[r] + 4, acc[r][1]);
    }
    for (int64_t r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        for (int64_t j = 0; j < nr; j++) {
            if (!first) cr[j] = fmaf(alpha, tile[r][j], cr[j]);
            else if (beta == 0.0f) cr[j] = alpha * tile[r][j];
            else cr[j] = fmaf(alpha, tile[r][j], beta * cr[j]);
        }
    }
}

/* B's rows at offsets (implicit GEMM): dst[s·8·kc + p·8 + l] = b[row_off[p] + s·8 + l],
 * zero for columns >= width. */
static void pack_row_offsets(const float *b, const int64_t *row_off, int64_t width, int64_t kc, float *dst) {
    for (int64_t s0 = 0; s0 < width; s0 += 8, dst += 8 * kc) {
        const int64_t w = width - s0 < 8 ? width - s0 : 8;
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + row_off[p] + s0;
            if (w == 8) {
                vst1q_f32(dst + p * 8, vld1q_f32(src));
                vst1q_f32(dst + p * 8 + 4, vld1q_f32(src + 4));
            } else {
                for (int64_t l = 0; l < 8; l++) dst[p * 8 + l] = l < w ? src[l] : 0.0f;
            }
        }
    }
}

/* The blocked nest; B's rows come from b at row_off when given (implicit GEMM), else
 * op(B) is b with ldb and trans_b. */
static void gemm_blocked(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, const int64_t *row_off, float beta, float *c,
                         int64_t ldc) {
    float apack[GEMM_MC * GEMM_KC] __attribute__((aligned(64)));
    float bpack[GEMM_KC * GEMM_NC] __attribute__((aligned(64)));
    for (int64_t jc = 0; jc < n; jc += GEMM_NC) {
        const int64_t nc = n - jc < GEMM_NC ? n - jc : GEMM_NC;
        for (int64_t pc = 0; pc < k; pc += GEMM_KC) {
            const int64_t kc = k - pc < GEMM_KC ? k - pc : GEMM_KC;
            /* op(B)[p][j] is b[j·ldb + p] when transposed (contiguous along k), else b[p·ldb + j]. */
            if (row_off) pack_row_offsets(b + jc, row_off + pc, nc, kc, bpack);
            else pack_slivers(trans_b ? b + jc * ldb + pc : b + pc * ldb + jc, ldb, trans_b, nc, kc, bpack);
            for (int64_t ic = 0; ic < m; ic += GEMM_MC) {
                const int64_t mc = m - ic < GEMM_MC ? m - ic : GEMM_MC;
                /* op(A)[i][p] is a[p·lda + i] when transposed, else a[i·lda + p] (contiguous along k). */
                pack_slivers(trans_a ? a + pc * lda + ic : a + ic * lda + pc, lda, !trans_a, mc, kc, apack);
                for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                    for (int64_t ir = 0; ir < mc; ir += GEMM_MR)
                        gemm_tile(kc, apack + ir * kc, bpack + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc,
                                  mc - ir < GEMM_MR ? mc - ir : GEMM_MR, nc - jr < GEMM_NR ? nc - jr : GEMM_NR,
                                  alpha, beta, pc == 0);
            }
        }
    }
}

void nrv_gemm_neon(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (k == 0) {
        /* Empty product: the same expression as the reference with a zero sum, so NaN or
         * infinite alpha behave identically; beta == 0 still never reads C. */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float *cij = &c[i * ldc + j];
                *cij = beta == 0.0f ? alpha * 0.0f : alpha * 0.0f + beta * *cij;
            }
        return;
    }
    gemm_blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, NULL, beta, c, ldc);
}

void nrv_gemm_implicit_neon(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                            const int64_t *b_row_off, float *c, int64_t ldc) {
    if (k == 0) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return;
    }
    gemm_blocked(0, 0, m, n, k, 1.0f, a, lda, b, 0, b_row_off, 0.0f, c, ldc);
}

/* ---------------------------------------------------------------- weight panels */

/* nrv_gemm_panels (kernels.h): output channels as the vector lanes, the weight streamed
 * from its panels (packed once at compile time) in aligned vectors, each position's input
 * value broadcast from its own base pointer. Per block of PANEL_NP positions and panel of
 * 64 channels: depth blocks of PANEL_KC, micro-tiles of 6 positions x 16 channels (24
 * accumulators + 4 weight vectors of 32 q registers) over each 16-channel sub-panel; the
 * products gather in ct [positions][64] and go to y transposed 4 x 4, with the bias. The
 * x86 version (x86/gemm_impl.h) is the same nest, panels outer. */
#define PANEL_MR 6
#define PANEL_KC 128
#define PANEL_NP 120 /* ct: 120 x 64 floats (30 KiB) on the stack */

static inline __attribute__((always_inline)) void panel_micro(const int rows, int64_t kc, const float *const *base,
                                                              const int64_t *koff, const float *bp, int64_t ldb,
                                                              float *ct, int first) {
    float32x4_t acc[PANEL_MR][4];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < kc; p++, bp += ldb) {
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
        const int64_t o = koff[p];
        for (int i = 0; i < rows; i++) {
            const float32x4_t ai = vdupq_n_f32(base[i][o]);
            acc[i][0] = vfmaq_f32(acc[i][0], ai, b0);
            acc[i][1] = vfmaq_f32(acc[i][1], ai, b1);
            acc[i][2] = vfmaq_f32(acc[i][2], ai, b2);
            acc[i][3] = vfmaq_f32(acc[i][3], ai, b3);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < 4; v++) {
            float *c = ct + i * 64 + v * 4;
            vst1q_f32(c, first ? acc[i][v] : vaddq_f32(acc[i][v], vld1q_f32(c)));
        }
}

static void panel_tile(int rows, int64_t kc, const float *const *base, const int64_t *koff, const float *bp,
                       int64_t ldb, float *ct, int first) {
    switch (rows) {
    case 6: panel_micro(6, kc, base, koff, bp, ldb, ct, first); break;
    case 5: panel_micro(5, kc, base, koff, bp, ldb, ct, first); break;
    case 4: panel_micro(4, kc, base, koff, bp, ldb, ct, first); break;
    case 3: panel_micro(3, kc, base, koff, bp, ldb, ct, first); break;
    case 2: panel_micro(2, kc, base, koff, bp, ldb, ct, first); break;
    default: panel_micro(1, kc, base, koff, bp, ldb, ct, first); break;
    }
}

/* the stored value's activation (kernels.h nrv_panels_act), as compares and selects */
static inline float32x4_t panel_act4(const nrv_panels_act *act, float32x4_t t) {
    if (act->kind == NRV_PANELS_RELU) return vbslq_f32(vcgtq_f32(t, vdupq_n_f32(0.0f)), t, vdupq_n_f32(0.0f));
    if (act->kind == NRV_PANELS_LEAKY) /* t < 0 ? t·slope : t */
        return vbslq_f32(vcltq_f32(t, vdupq_n_f32(0.0f)), vmulq_n_f32(t, act->lo), t);
    const float32x4_t lo = vdupq_n_f32(act->lo), hi = vdupq_n_f32(act->hi);
    t = vbslq_f32(vcltq_f32(t, lo), lo, t);
    return vbslq_f32(vcgtq_f32(t, hi), hi, t);
}

void nrv_gemm_panels_neon(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow, int64_t pw,
                          const int64_t *k_off, const float *wp, const float *bias, float *y, int64_t ldy,
                          const nrv_panels_act *act, int pointwise) {
    (void)pointwise; /* every NEON conv path cuts the depth at 128 (PANEL_KC = GEMM_KC) */
    if (k == 0) {
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < np; i++) y[j * ldy + i] = nrv_panels_act_apply(act, bias ? bias[j] : 0.0f);
        return;
    }
    _Static_assert(NRV_PANEL_COLS == 64 && NRV_PANEL_ALIGN == 16, "ct rows of 64, sub-panels of 16");
    float ct[PANEL_NP * 64] __attribute__((aligned(64)));
    const float *base[PANEL_NP];
    for (int64_t j0 = 0; j0 < m; j0 += 64) { /* panels outer: each streamed from memory once */
        const int64_t width = nrv_panel_width(m, j0 / 64);
        const float *panel = wp + j0 * k;
        for (int64_t b0 = 0; b0 < np; b0 += PANEL_NP) {
            const int64_t nb = np - b0 < PANEL_NP ? np - b0 : PANEL_NP;
            nrv_panel_bases(x, q0 + b0, nb, ow, pw, base);
            const int64_t tiles = (nb + PANEL_MR - 1) / PANEL_MR;
            for (int64_t pc = 0; pc < k; pc += PANEL_KC) {
                const int64_t kc = k - pc < PANEL_KC ? k - pc : PANEL_KC;
                for (int64_t s0 = 0; s0 < width; s0 += 16)
                    for (int64_t t = 0; t < tiles; t++) {
                        const int64_t i0 = t * nb / tiles, i1 = (t + 1) * nb / tiles;
                        panel_tile((int)(i1 - i0), kc, base + i0, k_off + pc, panel + pc * width + s0, width,
                                   ct + i0 * 64 + s0, pc == 0);
                    }
            }
            const int64_t mc = m - j0 < 64 ? m - j0 : 64;
            for (int64_t c4 = 0; c4 < mc; c4 += 4) {
                const int64_t cols = mc - c4 < 4 ? mc - c4 : 4;
                float bv[4];
                for (int64_t t = 0; t < 4; t++) bv[t] = bias && t < cols ? bias[j0 + c4 + t] : 0.0f;
                int64_t i = 0;
                for (; i + 4 <= nb; i += 4) {
                    const float32x4_t r0 = vld1q_f32(ct + i * 64 + c4), r1 = vld1q_f32(ct + (i + 1) * 64 + c4);
                    const float32x4_t r2 = vld1q_f32(ct + (i + 2) * 64 + c4), r3 = vld1q_f32(ct + (i + 3) * 64 + c4);
                    const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
                    const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
                    const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
                    const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
                    const float32x4_t c[4] = {vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)),
                                              vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
                                              vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)),
                                              vreinterpretq_f32_f64(vtrn2q_f64(t1, t3))};
                    for (int64_t t = 0; t < cols; t++) {
                        const float32x4_t v = vaddq_f32(c[t], vdupq_n_f32(bv[t]));
                        vst1q_f32(y + (j0 + c4 + t) * ldy + b0 + i, act ? panel_act4(act, v) : v);
                    }
                }
                for (; i < nb; i++)
                    for (int64_t t = 0; t < cols; t++)
                        y[(j0 + c4 + t) * ldy + b0 + i] = nrv_panels_act_apply(act, ct[i * 64 + c4 + t] + bv[t]);
            }
        }
    }
}

/* nrv_linear_panels (kernels.h): B read in place from the weight's panels, panels outer;
 * A = x's rows in place, or each tile's slice layer-normalised into a stack tile as it is
 * used; tiles of 6 rows x 16 columns. Always panels outer (x86/gemm_impl.h also runs small
 * weights rows outer, measured there only). */
#define LP_LN_ROWS 1024 /* rows whose layernorm statistics are on the stack (8 KiB) */

static inline __attribute__((always_inline)) void lin_micro(const int rows, int64_t kc, const float *a, int64_t lda,
                                                            const float *bp, int64_t ldb, float *c, int64_t ldc,
                                                            int64_t nr, int first, const float *bias) {
    float32x4_t acc[PANEL_MR][4];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < kc; p++, bp += ldb) {
        const float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
        for (int i = 0; i < rows; i++) {
            const float32x4_t ai = vdupq_n_f32(a[i * lda + p]);
            acc[i][0] = vfmaq_f32(acc[i][0], ai, b0);
            acc[i][1] = vfmaq_f32(acc[i][1], ai, b1);
            acc[i][2] = vfmaq_f32(acc[i][2], ai, b2);
            acc[i][3] = vfmaq_f32(acc[i][3], ai, b3);
        }
    }
    for (int i = 0; i < rows; i++) {
        float *ci = c + i * ldc;
        if (nr == 16) { /* whole tile: vector stores */
            for (int v = 0; v < 4; v++) {
                const float32x4_t add = first ? (bias ? vld1q_f32(bias + 4 * v) : vdupq_n_f32(0.0f)) : vld1q_f32(ci + 4 * v);
                vst1q_f32(ci + 4 * v, vaddq_f32(acc[i][v], add));
            }
            continue;
        }
        for (int v = 0; v < 4 && v * 4 < nr; v++) {
            float lane[4];
            vst1q_f32(lane, acc[i][v]);
            for (int64_t l = 0; l < 4 && v * 4 + l < nr; l++) {
                const int64_t j = v * 4 + l;
                ci[j] = first ? lane[l] + (bias ? bias[j] : 0.0f) : ci[j] + lane[l];
            }
        }
    }
}

static void lin_tile(int rows, int64_t kc, const float *a, int64_t lda, const float *bp, int64_t ldb, float *c,
                     int64_t ldc, int64_t nr, int first, const float *bias) {
    switch (rows) {
    case 6: lin_micro(6, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    case 5: lin_micro(5, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    case 4: lin_micro(4, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    case 3: lin_micro(3, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    case 2: lin_micro(2, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    default: lin_micro(1, kc, a, lda, bp, ldb, c, ldc, nr, first, bias); break;
    }
}

static void lin_rows(const float *x, int64_t ldx, int64_t nrows, int64_t k, const float *gamma, const float *beta,
                     const float *mean, const float *rstd, const float *wp, int64_t m, const float *bias, float *y,
                     int64_t ldy) {
    float apack[PANEL_MR * PANEL_KC] __attribute__((aligned(64)));
    const int64_t tiles = (nrows + PANEL_MR - 1) / PANEL_MR;
    for (int64_t j0 = 0; j0 < m; j0 += 64) {
        const int64_t width = nrv_panel_width(m, j0 / 64);
        for (int64_t pc = 0; pc < k; pc += PANEL_KC) {
            const int64_t kc = k - pc < PANEL_KC ? k - pc : PANEL_KC;
            const float *block = wp + j0 * k + pc * width;
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t i0 = t * nrows / tiles, i1 = (t + 1) * nrows / tiles;
                const float *a = x + i0 * ldx + pc;
                int64_t lda = ldx;
                if (gamma) {
                    for (int64_t i = 0; i < i1 - i0; i++)
                        nrv_neon_normalise(a + i * ldx, kc, mean[i0 + i], rstd[i0 + i], gamma + pc,
                                           beta ? beta + pc : NULL, apack + i * PANEL_KC);
                    a = apack, lda = PANEL_KC;
                }
                for (int64_t s0 = 0; s0 < width && j0 + s0 < m; s0 += 16) {
                    const int64_t nr = m - j0 - s0 < 16 ? m - j0 - s0 : 16;
                    lin_tile((int)(i1 - i0), kc, a, lda, block + s0, width, y + i0 * ldy + j0 + s0, ldy, nr, pc == 0,
                             bias ? bias + j0 + s0 : NULL);
                }
            }
        }
    }
}

void nrv_linear_panels_neon(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma,
                            const float *beta, float eps, const float *wp, int64_t m, const float *bias, float *y,
                            int64_t ldy) {
    if (k == 0) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < m; j++) y[r * ldy + j] = bias ? bias[j] : 0.0f;
        return;
    }
    if (!gamma) {
        lin_rows(x, ldx, rows, k, NULL, NULL, NULL, NULL, wp, m, bias, y, ldy);
        return;
    }
    float mean[LP_LN_ROWS], rstd[LP_LN_ROWS];
    for (int64_t r0 = 0; r0 < rows; r0 += LP_LN_ROWS) {
        const int64_t nrows = rows - r0 < LP_LN_ROWS ? rows - r0 : LP_LN_ROWS;
        for (int64_t i = 0; i < nrows; i++) nrv_neon_row_stats(x + (r0 + i) * ldx, k, eps, &mean[i], &rstd[i]);
        lin_rows(x + r0 * ldx, ldx, nrows, k, gamma, beta, mean, rstd, wp, m, bias, y + r0 * ldy, ldy);
    }
}
