/* kernels.h — internal kernel signatures and the variant-table types.
 *
 * A kernel is called only after the public entry point (native/src/ops.c) validated its
 * arguments: sizes are > 0 and overflow-free, pointers are non-NULL (except the optional
 * ones named below), ids are in range. Kernels never allocate on the heap, never fail,
 * and keep stack use under 64 KiB. Every variant of an op must give the reference's
 * result within the dtype tolerance (fp32: ~1e-5 relative) for every size, including the
 * scalar tail: the vector loop and its tail live in one function.
 */
#ifndef NERVE_KERNELS_H
#define NERVE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "nerve.h"

/* ids are int32 or int64; kernels read them through this helper (no converted copy). */
static inline int64_t nrv_id_at(const void *ids, int ids_int64, int64_t i) {
    return ids_int64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

/* out[i, :] = table[id_i, :] (· row_scales[id_i] for int8 tables; row_scales is NULL
 * for f32/f16). table dtype is implied by the op (embedding / embedding_f16 / embedding_q8). */
typedef void (*nrv_embedding_fn)(const void *table, const float *row_scales, int64_t dim,
                                 const void *ids, int ids_int64, int64_t n_ids, float *out);

/* y = (x - mean) * rsqrt(var + eps) * gamma + beta, per row; beta may be NULL; y may be x. */
typedef void (*nrv_layernorm_fn)(const float *x, int64_t rows, int64_t dim, const float *gamma,
                                 const float *beta, float eps, float *y);

/* y[rows, out] = x[rows, in] · w[out, in]ᵀ + b; b may be NULL; y does not overlap x or w. */
typedef void (*nrv_linear_fn)(const float *x, int64_t rows, int64_t in, const float *w,
                              const float *b, int64_t out, float *y);

/* y = layernorm(x) · wᵀ + b, normalising each row once on the fly (no normalised tensor in
 * memory beyond a bounded stack block); beta and b may be NULL. */
typedef void (*nrv_layernorm_linear_fn)(const float *x, int64_t rows, int64_t in,
                                        const float *gamma, const float *beta, float eps,
                                        const float *w, const float *b, int64_t out, float *y);

/* y[rows, out] = s ⊙ (x · qᵀ) + z ⊙ rowsum(x) + b, i.e. x · Wᵀ + b with the int8 weight
 * W[o, k] = s[o]·q[o, k] + z[o] dequantised in registers (w8a32: q is never widened in
 * memory). q is [out, in] int8 row-major (the layout of linear's w); s and z hold `out`
 * floats when sz_stride is 1 (per output row) or one float when it is 0 (per tensor);
 * z and b may be NULL (0). y does not overlap x. An output's value does not depend on which
 * other outputs are computed in the same call (a caller may split the outputs freely), only
 * on rows. */
typedef void (*nrv_linear_w8_fn)(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s,
                                 const float *z, int64_t sz_stride, const float *b, int64_t out, float *y);

/* y[r, o] = x[r, :] · W[o, :] + b[o] with W [out, in] stored as IEEE fp16 bits (linear's
 * layout), each weight widened to fp32 in registers (exactly: every half is a float), the
 * products and sums in fp32; b may be NULL; y has row stride ldy >= out and does not overlap
 * x. As for linear_w8, an output's value depends only on its row, its weight row and `rows`,
 * not on the other outputs of the call (a caller may split the outputs freely). */
typedef void (*nrv_linear_f16_fn)(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b,
                                  int64_t out, float *y, int64_t ldy);

/* linear_w8a8: int8 x int8 linear with dynamic per-row int8 activations (docs/ARCHITECTURE.md,
 * "INT8 x INT8 linear (w8a8)"; the math and the epilogue order are in kernels/linear_w8a8.c).
 * The weight q [out, in] int8 is packed once (nrv_linear_w8a8_pack) into one layout every
 * variant reads:
 *   Npad = out rounded up to 16, Kpad = in rounded up to 4;
 *   bytes [0, Npad·Kpad): int8 blocks [Npad/16][Kpad/4][16 outputs][4 k]: byte
 *     ((nb·(Kpad/4) + kb)·64 + o·4 + j) holds q[16·nb + o, 4·kb + j] (0 past out / in);
 *   bytes [Npad·Kpad, Npad·Kpad + 4·Npad): int32 colsum[Npad] (native byte order),
 *     colsum[n] = Σ_k q[n, k] (0 for padding), for the u8 x s8 (vpdpbusd) form.
 * y[rows, out] = s[n]·sx[r]·acc[r, n] + z[n]·Σ_k x[r, k] + b[n]; s, z as in linear_w8
 * (sz_stride 0: one float, 1: `out` floats), z and b may be NULL. in <= NRV_W8A8_MAX_K
 * (the int32 accumulators cannot overflow and a block of quantised rows fits the stack).
 * Every variant gives bit-identical results for every row count and any split of rows. */
#define NRV_W8A8_MAX_K 16384
typedef void (*nrv_linear_w8a8_fn)(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                                   const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
/* Bytes of the packed weight for q [out, in]. */
static inline int64_t nrv_linear_w8a8_packed_bytes(int64_t out, int64_t in) {
    const int64_t np = (out + 15) / 16 * 16, kp = (in + 3) / 4 * 4;
    return np * kp + 4 * np;
}
/* The row's scales from its largest magnitude amax (every variant): inv = 127 / amax and
 * sx = amax / 127 (fp32 divisions); a row whose inv is not finite (amax 0, below ~3.7e-37,
 * or NaN) quantises to 0 with sx = 0. */
static inline void nrv_w8a8_row_scale(float amax, float *inv, float *sx) {
    const float i = 127.0f / amax;
    if (i <= 3.4028234663852886e38f) {
        *inv = i;
        *sx = amax / 127.0f;
    } else {
        *inv = 0.0f;
        *sx = 0.0f;
    }
}
/* Packs q [out, in] (row-major int8) into packed (nrv_linear_w8a8_packed_bytes bytes). */
void nrv_linear_w8a8_pack(const int8_t *q, int64_t out, int64_t in, int8_t *packed);

/* matmul_integer: ONNX MatMulInteger on a constant int8 weight, exact (docs/ARCHITECTURE.md,
 * "Integer products"; kernels/matmul_integer.c):
 *   y[r, n] = Σ_k (a[r, k] − za[r])·(q[n, k] − zq[n])   in int32, wrapping mod 2^32
 * for outputs n in [n0, n1) (n0 a multiple of 16), rows of a [rows, in] u8, row stride in.
 * `flip` is 0 for u8 rows, 0x80 for s8 rows (their bytes xor 0x80 are the u8 values + 128;
 * the caller passes za + 128 then). q [out, in] is packed as for linear_w8a8 (its colsum is
 * used); za is one value (za_stride 0) or one per row (1); zq [out] or NULL (all 0). y is
 * [rows, out] (row stride out). Every variant computes
 *   Σ_k a·q − za·colsum[n] − zq[n]·Σ_k a + in·za·zq[n]
 * in uint32 arithmetic: the same bits as the exact integer (mod 2^32), whatever the order,
 * so all variants and onnxruntime agree bit for bit. in <= NRV_W8A8_MAX_K. */
typedef void (*nrv_matmul_integer_fn)(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                                      int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                                      const int32_t *zq, int32_t *y);
/* Requantization of int32 sums to bytes, per output channel m (the requant kernel's
 * arguments, kernels.h nrv_requant_fn below): bias [m] (NULL: 0), scale[m·scale_stride],
 * the clamp [lo, hi] (already less the zero point) and the zero point z. */
typedef struct nrv_requant_out {
    const int32_t *bias;
    const float *scale;
    int64_t scale_stride;
    float lo, hi;
    int32_t z;
} nrv_requant_out;

/* matmul_integer's second entry point (nrv_kernel_get_implicit; NULL in variants without
 * one): the same product with a's rows as planes, a pointwise conv's x read in place:
 *   y[m·ldy + p] = Σ_k (a[k·lda + p] − za)·(q[m, k] − zq[m])   for m < out, p < n
 * a: `in` planes of n bytes, lda apart; za one value; flip, packed and zq as above. The same
 * epilogue, so the same bits as matmul_integer on a's transpose; y comes out in planes (no
 * transpose of the sums): int32 when rq is NULL, else bytes, each sum requantized by rq with
 * the requant kernel's arithmetic (the same bytes as nrv_requant_ref on the sums).
 * in <= NRV_MI_PLANES_MAX_K. */
#define NRV_MI_PLANES_MAX_K 2048
typedef void (*nrv_matmul_integer_planes_fn)(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in,
                                             int32_t za, const int8_t *packed, int64_t out, const int32_t *zq,
                                             const nrv_requant_out *rq, void *y, int64_t ldy);
/* The epilogue every variant applies to acc = Σ_k a·q (uint32 arithmetic, no overflow UB). */
static inline int32_t nrv_matmul_integer_finish(uint32_t acc, uint32_t za, int32_t colsum, uint32_t zq, uint32_t asum,
                                                int64_t in) {
    return (int32_t)(acc - za * (uint32_t)colsum - zq * asum + (uint32_t)in * za * zq);
}

/* quantize: per-tensor QuantizeLinear, optionally followed by DequantizeLinear (the plan op
 * fake_quant; math in kernels/quantize_impl.h), over n floats x:
 *   q = saturate_[lo, hi](round_half_even(x / s) + zq)   (Cast's truncation; NaN -> 0)
 *   y = to_int ? q as bytes (u8 for lo = 0, else s8) : ((float)q − zd)·sd   (f32)
 * [lo, hi] is [0, 255] or [-128, 127]. Every variant gives the reference's bits. */
typedef struct nrv_quant_params {
    float s, zq, zd, sd;
    int32_t lo, hi;
    int to_int;
} nrv_quant_params;
typedef void (*nrv_quantize_fn)(const float *x, int64_t n, const nrv_quant_params *p, void *y);

/* requant: n int32 sums of one channel back to bytes, as onnxruntime requantizes
 * (MlasRequantizeOutput):
 *   y[i] = round_half_even(clamp((float)(x[i] + bias) · scale, lo, hi)) + z
 * with the int32 addition wrapping, lo/hi the output type's range minus z (|lo|, |hi| <= 383)
 * and the byte an int8's two's complement for s8 outputs. Every variant gives the
 * reference's bytes (kernels/requant_impl.h). */
typedef void (*nrv_requant_fn)(const int32_t *x, int64_t n, int32_t bias, float scale, float lo, float hi, int32_t z,
                               uint8_t *y);
/* requant's second entry point (nrv_kernel_get_implicit): one row of n channels, each with its
 * own bias[i] (bias NULL: 0) and scale[i·scale_stride], the same steps per value, so the
 * same bytes (the channel axis last: a QLinearMatMul's columns). */
typedef void (*nrv_requant_channels_fn)(const int32_t *x, int64_t n, const int32_t *bias, const float *scale,
                                        int64_t scale_stride, float lo, float hi, int32_t z, uint8_t *y);

/* depthwise_q8: one channel plane of a depthwise QLinearConv in onnxruntime's integer
 * arithmetic, bytes in and bytes out (plan op depthwise_integer; steps in
 * kernels/depthwise_q8_impl.h):
 *   sum[oy, ox] = Σ_{ky, kx} (x[iy, ix] − xz)·w[ky·kw + kx],  iy = oy·sh + ky·dh − pt,
 *                 ix = ox·sw + kx·dw − pl (a tap outside the plane reads xz: adds 0)
 *   y[oy, ox]   = requant's steps on sum with bias, scale, lo, hi, z (nrv_requant_fn)
 * x: the h x w plane, u8 (or s8 when x_signed); w: the kh·kw taps less the weight's zero
 * point, as floats (integers, |w| <= 255); y: the oh x ow plane. The sums are computed in
 * fp32, where they are exact integers (taps·255² < 2^24 within the limits below), so every
 * variant gives the reference's bytes. Limits (the plan op checks them): the kernel reaches
 * (k − 1)·d + 1 <= NRV_DWQ8_MAX_REACH rows and columns, strides <= NRV_DWQ8_MAX_STRIDE. */
#define NRV_DWQ8_MAX_REACH 16
#define NRV_DWQ8_MAX_STRIDE 4
typedef struct nrv_dwq8_plane {
    int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    int x_signed;
} nrv_dwq8_plane;
typedef void (*nrv_depthwise_q8_fn)(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w,
                                    int32_t bias, float scale, float lo, float hi, int32_t z, uint8_t *y);

/* linear_w4a32 / linear_w4a8: y[r, o] (row stride ldy) = Σ_g scale[o, g]·D[r, o, g] + b[o]
 * for a W4 weight (nerve.h nrv_w4_weight, either layout; checked), where
 *  - w4a32: D = Σ_{k in g} x[r, k]·(q[o, k] - zero[o, g]) in fp32;
 *  - w4a8:  D = sx[r]·Σ_{k in g} xq[r, k]·(q[o, k] - zero[o, g]), the inner sum exact in
 *           int32, xq and sx as linear_w8a8 quantises a row (nrv_w8a8_row_scale, clamp,
 *           round half to even).
 * Variants sum in their own order (fp32 tolerance against the reference), but each gives
 * bit-identical results for the two layouts, and an output's value depends only on its row,
 * its weight row and, for the rows, which block of NRV_W4_ROW_BLOCK rows from the call's
 * first row it is in (a variant may take another path for full blocks: linear_w4_vnni.c).
 * Callers split outputs freely and rows at multiples of NRV_W4_ROW_BLOCK.
 * w->in <= NRV_W4_MAX_IN. */
enum { NRV_W4_ROW_BLOCK = 8 };
typedef void (*nrv_linear_w4_fn)(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                                 int64_t ldy);
/* The byte offset of output row o in w->q, and a view of outputs [o0, o0 + n) of w. */
static inline int64_t nrv_w4_row_bytes(const nrv_w4_weight *w) {
    return w->layout == NRV_W4_PACKED ? w->in / 2 : w->in;
}
/* Where output rows o0 .. o0+n-1 of w begin: values, scales, zero points (NULL without). */
static inline void nrv_w4_row_ptrs(const nrv_w4_weight *w, int64_t o0, int n, const uint8_t **q,
                                   const uint16_t **scales, const int8_t **zero) {
    const int64_t rb = nrv_w4_row_bytes(w), ng = w->in / w->group;
    for (int o = 0; o < n; o++) {
        q[o] = (const uint8_t *)w->q + (o0 + o) * rb;
        scales[o] = w->scales + (o0 + o) * ng;
        zero[o] = w->zero ? w->zero + (o0 + o) * ng : NULL;
    }
}
/* W as fp32 [out, in] into dst (exact: an fp16 scale times an integer below 16). */
void nrv_w4_dequantise(const nrv_w4_weight *w, float *dst);
static inline nrv_w4_weight nrv_w4_rows(const nrv_w4_weight *w, int64_t o0, int64_t n) {
    nrv_w4_weight v = *w;
    const int64_t ng = w->in / w->group;
    v.out = n;
    v.q = (const uint8_t *)w->q + o0 * nrv_w4_row_bytes(w);
    v.scales = w->scales + o0 * ng;
    v.zero = w->zero ? w->zero + o0 * ng : NULL;
    return v;
}

/* A linear kernel may pick its path (and so its rounding) from out only while out is below
 * this: a caller that splits the outputs of one product across threads keeps every piece
 * at least this wide, so each output is computed exactly as in the unsplit call. */
#define NRV_LINEAR_SPLIT_MIN_OUT 64

/* C = alpha · op(A) · op(B) + beta · C (beta == 0: C is write-only). */
typedef void (*nrv_gemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                            float beta, float *c, int64_t ldc);

/* C[m, n] = A · B with A row-major [m, k] (lda) and B's rows runs of one buffer at
 * arbitrary offsets: B(p, j) = b[b_row_off[p] + j]. C (ldc) is write-only. This is a
 * convolution as an implicit GEMM: over an input plane padded (and split into stride
 * phases) once, row p = one (channel, tap) pair is the plane shifted by that tap, so no
 * im2col matrix is built and the kernel reads B straight from the plane (op_conv.c).
 * Every b[b_row_off[p] + j], j < n, must be readable; nothing past it is read. Each gemm
 * variant has one, as its variant's `implicit` entry: forcing a gemm variant forces both. */
typedef void (*nrv_gemm_implicit_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                                     const int64_t *b_row_off, float *c, int64_t ldc);

/* Weight panels: a weight W [m, k] (row-major; a conv's [M, C/group·kh·kw] per group)
 * stored once, at compile time (plan op "pack_panels"), in the layout the panel kernels
 * stream: panels of NRV_PANEL_COLS rows of W, panel t holding rows [64t, 64t + w_t),
 * w_t = min(64, m - 64t rounded up to 16), as k-major [k][w_t] floats (rows past m are
 * zeros). Panel t starts at float t·64·k. Every variant reads this one layout (AVX-512 as
 * 4 vectors of 16, AVX2 and NEON as sub-panels of 16 columns). */
#define NRV_PANEL_COLS 64
#define NRV_PANEL_ALIGN 16
static inline int64_t nrv_panel_width(int64_t m, int64_t t) {
    const int64_t left = m - t * NRV_PANEL_COLS;
    const int64_t w = (left + NRV_PANEL_ALIGN - 1) / NRV_PANEL_ALIGN * NRV_PANEL_ALIGN;
    return w < NRV_PANEL_COLS ? w : NRV_PANEL_COLS;
}
/* Floats of W [m, k] as panels (m, k >= 0 and m·k representable: the caller checks). */
static inline int64_t nrv_panels_floats(int64_t m, int64_t k) {
    if (m <= 0) return 0;
    const int64_t last = (m - 1) / NRV_PANEL_COLS;
    return (last * NRV_PANEL_COLS + nrv_panel_width(m, last)) * k;
}
/* Writes W [m, k] as panels into out (nrv_panels_floats(m, k) floats). */
void nrv_panels_pack(const float *w, int64_t m, int64_t k, float *out);
/* The same from Wᵀ: wt [k, m] row-major, rows ldwt floats apart (a V [T, Dv] read as W = Vᵀ). */
void nrv_panels_pack_t(const float *wt, int64_t m, int64_t k, int64_t ldwt, float *out);

/* The product of a weight in panels with positions of an input read through offsets (a
 * convolution, op "conv_packed"; output channels are the vector lanes, so every weight
 * load is a whole aligned vector of the panel and each input value is broadcast):
 *   for i < np, position q = q0 + i, base(i) = x + (q / ow)·pw + q mod ow,
 *   y[j·ldy + i] = bias[j] (0 when bias is NULL) + Σ_{p<k} base(i)[k_off[p]] · W(j, p),  j < m.
 * For a conv, x is the padded input split into stride phases (rows pw apart; q runs over
 * the ow output columns of each row, so no junk column is computed) and k_off[p] the
 * (channel, tap) offset into it; a pointwise conv has ow = pw = P, k_off[c] = c·P.
 * wp: panels of W (above), 64-byte aligned. Each output's sum is taken in the same order
 * whatever q0 and np are, so splitting the positions among threads changes no bit. */
/* base[i] = x + (q / ow)·pw + q mod ow for the n positions q = q0 + i (the panel kernels'
 * positions, above). */
static inline void nrv_panel_bases(const float *x, int64_t q0, int64_t n, int64_t ow, int64_t pw, const float **base) {
    int64_t row = q0 / ow, col = q0 % ow;
    for (int64_t i = 0; i < n; i++) {
        base[i] = x + row * pw + col;
        if (++col == ow) col = 0, row++;
    }
}
/* act (NULL: none): an activation applied to each y as it is stored, after its bias — the
 * conv's epilogue, with the plan's own rules: NRV_PANELS_RELU t > 0 ? t : 0 (NaN gives 0,
 * as the relu kernel), NRV_PANELS_CLIP t < lo ? lo : t, then t > hi ? hi : t (NaN kept,
 * as nrv_clip), NRV_PANELS_LEAKY t < 0 ? t·lo : t (lo the slope, as nrv_leaky_relu), so the
 * bits of the separate pass. */
enum { NRV_PANELS_RELU = 1, NRV_PANELS_CLIP = 2, NRV_PANELS_LEAKY = 3 };
typedef struct nrv_panels_act {
    int kind; /* NRV_PANELS_RELU, NRV_PANELS_CLIP or NRV_PANELS_LEAKY */
    float lo, hi;
} nrv_panels_act;
static inline float nrv_panels_act_apply(const nrv_panels_act *act, float t) {
    if (!act) return t;
    if (act->kind == NRV_PANELS_RELU) return t > 0.0f ? t : 0.0f;
    if (act->kind == NRV_PANELS_LEAKY) return t < 0.0f ? t * act->lo : t;
    t = t < act->lo ? act->lo : t;
    return t > act->hi ? act->hi : t;
}
/* pointwise: the conv is 1x1 without stride or padding (x read in place). A kernel that
 * cuts the depth into blocks cuts it as the variant's plain conv path then does (the GEMM on
 * x when pointwise, else the implicit GEMM), so a conv gives the same bits on either path:
 * a conv fused with its residual sum (panels) equals the unfused ops (plain conv, then Add). */
typedef void (*nrv_gemm_panels_fn)(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow,
                                   int64_t pw, const int64_t *k_off, const float *wp, const float *bias, float *y,
                                   int64_t ldy, const nrv_panels_act *act, int pointwise);

/* A linear layer on a weight in panels (op "linear_panels"; the weight packed once at
 * compile time): y[r·ldy + j] = bias[j] (0 when NULL) + Σ_{p<k} x̂(r, p)·W(j, p), r < rows,
 * j < m, where x̂ = x (rows ldx apart) or, when gamma is given, each row layer-normalised on
 * the fly (mean and 1/sqrt(var + eps) per row, then ·gamma + beta; beta NULL: 0), kept in a
 * cache-sized block, never written out. Each output's sum runs in the same order whichever
 * whole panels a call covers, so a call per range of panels [t0, t1) (wp + 64·t0·k, the
 * outputs from 64·t0, m' = min(m, 64·t1) - 64·t0) changes no bit: the threads' split. */
typedef void (*nrv_linear_panels_fn)(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma,
                                     const float *beta, float eps, const float *wp, int64_t m, const float *bias,
                                     float *y, int64_t ldy);

/* A depthwise conv's taps over one channel's padded plane (op conv's depthwise path,
 * op_conv.c): y[oy·ow + ox] = bias + Σ_{k<taps} w[k] · plane[oy·row_step + tap_off[k] + ox]
 * for oy < oh, ox < ow, the taps summed in order k. The plane's layout is the caller's:
 * stride-1 columns put tap (ki, kj) at ki·dh·wp + kj·dw; a column stride of 2 keeps each
 * padded row as two phase rows (even columns, then odd), so the tap's outputs are
 * contiguous in its phase row. The plane is read at offsets below oy·row_step + tap_off[k]
 * + (ow rounded up to 4) only, and those past ow only into lanes that are not stored;
 * taps <= NRV_DW_MAX_TAPS. */
#define NRV_DW_MAX_TAPS 49
typedef void (*nrv_depthwise_fn)(const float *plane, int64_t row_step, int64_t oh, int64_t ow, const int64_t *tap_off,
                                 int64_t taps, const float *w, float bias, float *y);

/* A depthwise conv's geometry for nrv_depthwise_channels_fn: input ih x iw, output oh x
 * ow, kernel kh x kw, strides, dilations, and the pads before (ph, pw; those after are
 * whatever the output extents imply). */
typedef struct nrv_dw_geom {
    int64_t ih, iw, oh, ow;
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
} nrv_dw_geom;

/* A depthwise conv with its vectors across channels (op conv's path for outputs a few
 * columns wide, where a vector along a row would be mostly idle lanes): channels [0, c)
 * of one image, x their planes (ih·iw floats apart), w [c][kh·kw], bias [c] (NULL: 0),
 * y their output planes (oh·ow apart):
 *   y[ch][oy][ox] = bias[ch] + Σ_{k = ki·kw + kj} w[ch][k] · x̄[ch][oy·sh + ki·dh - ph][ox·sw + kj·dw - pw]
 * x̄ = 0 outside x, the taps summed in order k, padding included (so an FMA variant gives
 * the bits its nrv_depthwise_fn gives on the padded plane). The kernel stages channels
 * through tiles of its own on the stack: callers check nrv_dw_channels_fit first. */
typedef void (*nrv_depthwise_channels_fn)(const nrv_dw_geom *g, int64_t c, const float *x, const float *w,
                                          const float *bias, float *y);
/* The op "depthwise_rows" has the same contract and signature, with its vectors along each
 * output row and its taps read straight from x (no tile, no plane), for the shapes
 * nrv_dw_rows_fit accepts; its reference is the channel one (the definition). */
static inline int nrv_dw_rows_fit(const nrv_dw_geom *g) {
    return g->kh == g->kw && (g->kh == 3 || g->kh == 5 || g->kh == 7) && g->sh == g->sw && g->dh == g->dw &&
           (((g->sh == 1 || g->sh == 2) && g->dh == 1) || (g->sh == 1 && g->dh == 2));
}
/* The body of a "depthwise_rows" variant: CHANNEL(K, S, D, g, x, w, bias, y) once per channel
 * with its plane, weights, bias and output, and the kernel size K, stride S and dilation D
 * as constants (the nine shapes nrv_dw_rows_fit takes). */
#define NRV_DW_ROWS_CHANNELS(g, c, x, w, bias, y, CHANNEL)                                       \
    for (int64_t ch_ = 0; ch_ < (c); ch_++) {                                                  \
        const float *xc_ = (x) + ch_ * (g)->ih * (g)->iw, *wc_ = (w) + ch_ * (g)->kh * (g)->kw; \
        const float b_ = (bias) ? (bias)[ch_] : 0.0f;                                           \
        float *yc_ = (y) + ch_ * (g)->oh * (g)->ow;                                             \
        switch ((g)->kh * 8 + (g)->sh + 2 * (g)->dh) {                                          \
        case 3 * 8 + 3: CHANNEL(3, 1, 1, g, xc_, wc_, b_, yc_); break;                          \
        case 3 * 8 + 4: CHANNEL(3, 2, 1, g, xc_, wc_, b_, yc_); break;                          \
        case 3 * 8 + 5: CHANNEL(3, 1, 2, g, xc_, wc_, b_, yc_); break;                          \
        case 5 * 8 + 3: CHANNEL(5, 1, 1, g, xc_, wc_, b_, yc_); break;                          \
        case 5 * 8 + 4: CHANNEL(5, 2, 1, g, xc_, wc_, b_, yc_); break;                          \
        case 5 * 8 + 5: CHANNEL(5, 1, 2, g, xc_, wc_, b_, yc_); break;                          \
        case 7 * 8 + 3: CHANNEL(7, 1, 1, g, xc_, wc_, b_, yc_); break;                          \
        case 7 * 8 + 4: CHANNEL(7, 2, 1, g, xc_, wc_, b_, yc_); break;                          \
        default: CHANNEL(7, 1, 2, g, xc_, wc_, b_, yc_); break;                                 \
        }                                                                                       \
    }
/* Floats of a kernel's input tile: one tile row per padded input row of an output row's
 * taps, wp = (ow-1)·sw + (kw-1)·dw + 1 vectors of up to 16 channels each. */
#define NRV_DW_CH_TILE_FLOATS 6144
static inline int nrv_dw_channels_fit(const nrv_dw_geom *g) {
    const int64_t wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1, span_h = (g->kh - 1) * g->dh + 1;
    return g->kh * g->kw <= NRV_DW_MAX_TAPS && g->ow <= 64 && wp * span_h * 16 <= NRV_DW_CH_TILE_FLOATS &&
           g->ih * g->iw <= ((int64_t)1 << 26); /* gather indices: 15 planes stay below 2^31 */
}

/* maxpool: max pooling of dilation 1 over `planes` consecutive planes (x's ih·iw elements
 * apart, y's oh·ow), g's geometry (dh = dw = 1; the pads after are whatever oh, ow imply):
 *   y[p][oy][ox] = max over i < kh, j < kw of x̄[p][oy·sh + i - ph][ox·sw + j - pw],
 * x̄ the plane with every position outside it left out (padding never wins a max). Elements
 * are float32, uint8 or int8 (dtype NRV_F32 / NRV_U8 / NRV_I8). The max of floats is the
 * direct loop's, m = x > m ? x : m from m = -FLT_MAX: a NaN never wins, and a window holding
 * no element (or only NaN) gives -FLT_MAX; codes start from the type's lowest. Every variant
 * gives the reference's values (up to the sign of a zero: +0 and -0 tie). y does not
 * overlap x. */
typedef void (*nrv_maxpool_fn)(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y);

/* Element-wise y = f(x) over n floats; y may be x. */
typedef void (*nrv_unary_fn)(const float *x, int64_t n, float *y);

/* Row-wise softmax over [rows, dim]; y may be x. */
typedef void (*nrv_softmax_fn)(const float *x, int64_t rows, int64_t dim, float *y);

/* Linear attention's recurrence (op linear_attention, op_stream.c: ONNX LinearAttention),
 * one problem: per batch b and key/value head h a state S [dk, dv] (state + (b·hkv + h)·dk·dv,
 * holding the past state on entry, updated in place); per token t, with k_t, v_t the head's
 * key and value and g_t, β_t its decay and rate:
 *   gated: S *= exp(g_t) (one factor per row d when g_per_key, else one for the head);
 *   delta: u = β_t (v_t − Sᵀk_t), else u = v_t;   S += k_t ⊗ u;
 *   each of the hq / hkv query heads i that share h (i / (hq / hkv) = h):
 *   y[b, t, i·dv : (i + 1)·dv] = scale · q_{t,i}ᵀ S.
 * q [B, T, hq·dk], k [B, T, hkv·dk], v [B, T, hkv·dv], g [B, T, hkv or hkv·dk] (gated),
 * beta [B, T, hkv or 1] (delta), y [B, T, hq·dv]; y does not overlap the state. */
typedef struct nrv_la_problem {
    const float *q, *k, *v, *g, *beta;
    float *y, *state;
    int64_t T, hq, hkv, dk, dv;
    int g_per_key, beta_per_head, gated, delta;
    float scale;
} nrv_la_problem;
/* The recurrence of one (batch, key/value head) pair, task = b·hkv + h: tasks touch
 * disjoint state and outputs, so they may run on different threads. */
typedef void (*nrv_linear_attention_fn)(const nrv_la_problem *p, int64_t task);
/* One token of one task, as the variants walk it: the head's state, the token's k, v, decay
 * row (NULL unless gated), β and per-head decay factor, and the group's first query head's
 * q row and y row (its other heads follow, dk and dv apart). */
typedef struct nrv_la_token {
    float *S;
    const float *k, *v, *g, *q;
    float *y;
    float beta, head_decay;
} nrv_la_token;
void nrv_la_token_at(const nrv_la_problem *p, int64_t task, int64_t t, nrv_la_token *tk);
/* The vector variants exponentiate a token's per-key decays once into a stack row of
 * NRV_LA_MAX_DK floats; a problem whose row would not fit runs the reference instead. */
#define NRV_LA_MAX_DK 1024
static inline int nrv_la_decays_fit(const nrv_la_problem *p) {
    return !(p->gated && p->g_per_key) || p->dk <= NRV_LA_MAX_DK;
}
/* The reference's work on value columns [m0, m0 + n) of one token, n <= NRV_LA_REF_COLS (the
 * variants' partial last block, where they have no masked vectors). */
#define NRV_LA_REF_COLS 64
void nrv_la_block_ref(const nrv_la_problem *p, const nrv_la_token *tk, int64_t m0, int64_t n);

/* Ops of the dispatch table, in the order nrv_kernel_op_name lists them. */
typedef enum nrv_op {
    NRV_OP_EMBEDDING_F32 = 0,
    NRV_OP_EMBEDDING_F16,
    NRV_OP_EMBEDDING_Q8,
    NRV_OP_LAYERNORM,
    NRV_OP_LINEAR,
    NRV_OP_LAYERNORM_LINEAR,
    NRV_OP_GEMM,
    NRV_OP_GELU,
    NRV_OP_GELU_TANH,
    NRV_OP_RELU,
    NRV_OP_SIGMOID,
    NRV_OP_TANH,
    NRV_OP_SOFTMAX,
    NRV_OP_LINEAR_W8,
    NRV_OP_LINEAR_W8A8,
    NRV_OP_LINEAR_W4A32,
    NRV_OP_LINEAR_W4A8,
    NRV_OP_LINEAR_F16,
    NRV_OP_DEPTHWISE,
    NRV_OP_HARD_SWISH,
    NRV_OP_SILU,
    NRV_OP_DEPTHWISE_CHANNELS,
    NRV_OP_DEPTHWISE_ROWS,
    NRV_OP_MATMUL_INTEGER,
    NRV_OP_QUANTIZE,
    NRV_OP_REQUANT,
    NRV_OP_MAXPOOL,
    NRV_OP_LINEAR_ATTENTION,
    NRV_OP_DEPTHWISE_Q8,
    NRV_OP_COUNT
} nrv_op;

typedef union nrv_kernel_fn {
    nrv_embedding_fn embedding;
    nrv_layernorm_fn layernorm;
    nrv_linear_fn linear;
    nrv_layernorm_linear_fn layernorm_linear;
    nrv_gemm_fn gemm;
    nrv_gemm_implicit_fn gemm_implicit;
    nrv_gemm_panels_fn gemm_panels;
    nrv_linear_panels_fn linear_panels;
    nrv_unary_fn unary;
    nrv_softmax_fn softmax;
    nrv_linear_w8_fn linear_w8;
    nrv_linear_w8a8_fn linear_w8a8;
    nrv_matmul_integer_fn matmul_integer;
    nrv_matmul_integer_planes_fn matmul_integer_planes;
    nrv_quantize_fn quantize;
    nrv_requant_fn requant;
    nrv_requant_channels_fn requant_channels;
    nrv_linear_w4_fn linear_w4;
    nrv_linear_f16_fn linear_f16;
    nrv_depthwise_fn depthwise;
    nrv_depthwise_channels_fn depthwise_channels;
    nrv_maxpool_fn maxpool;
    nrv_linear_attention_fn linear_attention;
    nrv_depthwise_q8_fn depthwise_q8;
} nrv_kernel_fn;

/* One compiled-in implementation of an op. `group` is the ISA family that
 * NERVE_DISABLE names ("avx2", "avx512", "neon", "dotprod", "ref"); `requires` is the
 * mask of nrv_cpu_feature bits it needs at run time. `implicit`, `panels` and `rows_panels`:
 * further entry points of the same implementation, chosen with it (gemm: gemm_implicit,
 * gemm_panels and linear_panels; unused by other ops). */
typedef struct nrv_kernel_variant {
    nrv_op op;
    const char *name;
    const char *group;
    uint64_t requires;
    nrv_kernel_fn fn;
    nrv_kernel_fn implicit;
    nrv_kernel_fn panels;
    nrv_kernel_fn rows_panels;
} nrv_kernel_variant;

/* Each ISA module exports one table of its variants, terminated by an entry whose name
 * is NULL. dispatch.c orders candidates: the module tables in the order listed below,
 * best first within each, then the reference. */
extern const nrv_kernel_variant nrv_variants_ref[];
#if defined(__x86_64__)
extern const nrv_kernel_variant nrv_variants_x86[];
#endif /* __x86_64__ */
#if defined(__aarch64__)
extern const nrv_kernel_variant nrv_variants_neon[];
#endif /* __aarch64__ */

/* linear_w8 variants (native/src/x86/linear_w8_*.c, neon/linear_w8_neon.c). The NEON one
 * has its own one-entry table, defined next to it, which dispatch.c adds after
 * nrv_variants_neon. */
#if defined(__x86_64__)
void nrv_linear_w8_avx2(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s, const float *z,
                        int64_t sz_stride, const float *b, int64_t out, float *y);
void nrv_linear_w8_avx512(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s,
                          const float *z, int64_t sz_stride, const float *b, int64_t out, float *y);
/* linear_w8a8 (native/src/x86/linear_w8a8_vnni.c, linear_w8a8_avx2.c) */
void nrv_linear_w8a8_amx(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                         const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
void nrv_linear_w8a8_vnni(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
void nrv_linear_w8a8_avx2(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
/* requant and depthwise_q8 (native/src/x86/requant_avx2.c / requant_avx512.c, depthwise_q8_avx2.c /
 * depthwise_q8_avx512.c: kernels/requant_impl.h, kernels/depthwise_q8_impl.h) */
void nrv_depthwise_q8_avx2(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w, int32_t bias,
                           float scale, float lo, float hi, int32_t z, uint8_t *y);
void nrv_depthwise_q8_avx512(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w, int32_t bias,
                             float scale, float lo, float hi, int32_t z, uint8_t *y);
void nrv_requant_avx2(const int32_t *x, int64_t n, int32_t bias, float scale, float lo, float hi, int32_t z,
                      uint8_t *y);
void nrv_requant_avx512(const int32_t *x, int64_t n, int32_t bias, float scale, float lo, float hi, int32_t z,
                        uint8_t *y);
void nrv_requant_channels_avx2(const int32_t *x, int64_t n, const int32_t *bias, const float *scale,
                               int64_t scale_stride, float lo, float hi, int32_t z, uint8_t *y);
void nrv_requant_channels_avx512(const int32_t *x, int64_t n, const int32_t *bias, const float *scale,
                                 int64_t scale_stride, float lo, float hi, int32_t z, uint8_t *y);
/* quantize (native/src/x86/quantize_avx2.c / quantize_avx512.c: kernels/quantize_impl.h) */
void nrv_quantize_avx2(const float *x, int64_t n, const nrv_quant_params *p, void *y);
void nrv_quantize_avx512(const float *x, int64_t n, const nrv_quant_params *p, void *y);
/* matmul_integer (native/src/x86/matmul_integer_vnni.c, matmul_integer_avx2.c) */
void nrv_matmul_integer_planes_vnni(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in, int32_t za,
                                    const int8_t *packed, int64_t out, const int32_t *zq, const nrv_requant_out *rq,
                                    void *y, int64_t ldy);
void nrv_matmul_integer_vnni(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                             int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                             const int32_t *zq, int32_t *y);
void nrv_matmul_integer_avx2(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                             int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                             const int32_t *zq, int32_t *y);
/* linear_f16 (native/src/x86/linear_f16_avx2.c / linear_f16_avx512.c: the linear_w8 template) */
void nrv_linear_f16_avx2(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                         float *y, int64_t ldy);
void nrv_linear_f16_avx512(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                           float *y, int64_t ldy);
/* linear_w4a32 / linear_w4a8 (native/src/x86/linear_w4_avx512.c, linear_w4_vnni.c, linear_w4_avx2.c) */
void nrv_linear_w4a32_avx512(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                             int64_t ldy);
void nrv_linear_w4a8_vnni(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy);
void nrv_linear_w4a32_avx2(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                           int64_t ldy);
void nrv_linear_w4a8_avx2(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy);
#endif /* __x86_64__ */
#if defined(__aarch64__)
/* linear_w8a8 (neon/linear_w8a8_neon.c; one-entry table added by dispatch.c) */
extern const nrv_kernel_variant nrv_variants_neon_w8a8[];
void nrv_linear_w8a8_neon(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                          const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
/* matmul_integer (neon/matmul_integer_dotprod.c; one-entry table added by dispatch.c) */
extern const nrv_kernel_variant nrv_variants_dotprod_mmi[];
void nrv_matmul_integer_dotprod(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                                int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                                const int32_t *zq, int32_t *y);
extern const nrv_kernel_variant nrv_variants_neon_w8[];
void nrv_linear_w8_neon(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s, const float *z,
                        int64_t sz_stride, const float *b, int64_t out, float *y);
/* linear_f16 (neon/linear_f16_neon.c, with its one-entry table, added after nrv_variants_neon_w8) */
extern const nrv_kernel_variant nrv_variants_neon_f16[];
void nrv_linear_f16_neon(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                         float *y, int64_t ldy);
/* linear_w4a32 / linear_w4a8 (neon/linear_w4_neon.c, neon/linear_w4_dotprod.c; each file's
 * table is added by dispatch.c, dotprod first) */
extern const nrv_kernel_variant nrv_variants_neon_w4[];
extern const nrv_kernel_variant nrv_variants_dotprod_w4[];
void nrv_linear_w4a32_neon(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                           int64_t ldy);
void nrv_linear_w4a8_neon(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy);
void nrv_linear_w4a8_dotprod(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                             int64_t ldy);
/* The w4a8 driver both NEON variants share (baseline ISA, in linear_w4_neon.c): quantises
 * blocks of rows as linear_w8a8 does into a stack buffer (xq [rows, in] int8, their group
 * sums xs [rows, xst] floats, 0 past in / group, and sx per row), then calls block for every
 * tile of R <= r_max rows x NO = no_of_rows[R] outputs, and with NO = 1 for the outputs
 * left over; block computes y for rows [0, R) x outputs [o0, o0 + NO) (xq, xs, sx and y at
 * the tile's first row, y at column o0). */
typedef void (*nrv_w4a8_neon_block_fn)(int R, int NO, const int8_t *xq, const float *xs, int64_t xst,
                                       const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b, float *y,
                                       int64_t ldy);
void nrv_w4a8_neon_run(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y, int64_t ldy,
                       nrv_w4a8_neon_block_fn block, const int *no_of_rows, int r_max);
#endif /* __aarch64__ */

/* Scalar references (one file per op family in native/src/kernels/): always built, simple, obviously right. */
void nrv_embedding_f32_ref(const void *table, const float *row_scales, int64_t dim,
                           const void *ids, int ids_int64, int64_t n_ids, float *out);
void nrv_embedding_f16_ref(const void *table, const float *row_scales, int64_t dim,
                           const void *ids, int ids_int64, int64_t n_ids, float *out);
void nrv_embedding_q8_ref(const void *table, const float *row_scales, int64_t dim,
                          const void *ids, int ids_int64, int64_t n_ids, float *out);
void nrv_layernorm_ref(const float *x, int64_t rows, int64_t dim, const float *gamma,
                       const float *beta, float eps, float *y);
void nrv_linear_ref(const float *x, int64_t rows, int64_t in, const float *w, const float *b,
                    int64_t out, float *y);
void nrv_layernorm_linear_ref(const float *x, int64_t rows, int64_t in, const float *gamma,
                              const float *beta, float eps, const float *w, const float *b,
                              int64_t out, float *y);
void nrv_gemm_ref(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc);
void nrv_gemm_implicit_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           const int64_t *b_row_off, float *c, int64_t ldc);
void nrv_gemm_panels_ref(int64_t np, int64_t m, int64_t k, const float *x, int64_t q0, int64_t ow, int64_t pw,
                         const int64_t *k_off, const float *wp, const float *bias, float *y, int64_t ldy,
                         const nrv_panels_act *act, int pointwise);
void nrv_linear_panels_ref(const float *x, int64_t rows, int64_t ldx, int64_t k, const float *gamma, const float *beta,
                           float eps, const float *wp, int64_t m, const float *bias, float *y, int64_t ldy);
void nrv_gelu_ref(const float *x, int64_t n, float *y);
void nrv_gelu_tanh_ref(const float *x, int64_t n, float *y);
/* x · min(max(x·(1/6) + 1/2, 0), 1), the product and the sum rounded apart (no FMA); NaN stays NaN. */
void nrv_hard_swish_ref(const float *x, int64_t n, float *y);
/* x · sigmoid(x), the sigmoid rounded as nrv_sigmoid_ref's: what Sigmoid then Mul give. */
void nrv_silu_ref(const float *x, int64_t n, float *y);
void nrv_maxpool_ref(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y);
void nrv_linear_attention_ref(const nrv_la_problem *p, int64_t task);
void nrv_relu_ref(const float *x, int64_t n, float *y);
void nrv_sigmoid_ref(const float *x, int64_t n, float *y);
void nrv_tanh_ref(const float *x, int64_t n, float *y);
void nrv_softmax_ref(const float *x, int64_t rows, int64_t dim, float *y);
void nrv_linear_w8_ref(const float *x, int64_t rows, int64_t in, const int8_t *q, const float *s, const float *z,
                       int64_t sz_stride, const float *b, int64_t out, float *y);
void nrv_linear_w8a8_ref(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out,
                         const float *s, const float *z, int64_t sz_stride, const float *b, float *y);
void nrv_linear_w4a32_ref(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy);
void nrv_linear_w4a8_ref(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                         int64_t ldy);
void nrv_depthwise_ref(const float *plane, int64_t row_step, int64_t oh, int64_t ow, const int64_t *tap_off,
                       int64_t taps, const float *w, float bias, float *y);
void nrv_depthwise_channels_ref(const nrv_dw_geom *g, int64_t c, const float *x, const float *w, const float *bias,
                                float *y);
void nrv_linear_f16_ref(const float *x, int64_t rows, int64_t in, const uint16_t *w, const float *b, int64_t out,
                        float *y, int64_t ldy);
void nrv_quantize_ref(const float *x, int64_t n, const nrv_quant_params *p, void *y);
void nrv_depthwise_q8_ref(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w, int32_t bias,
                          float scale, float lo, float hi, int32_t z, uint8_t *y);
void nrv_requant_ref(const int32_t *x, int64_t n, int32_t bias, float scale, float lo, float hi, int32_t z,
                     uint8_t *y);
void nrv_requant_channels_ref(const int32_t *x, int64_t n, const int32_t *bias, const float *scale,
                              int64_t scale_stride, float lo, float hi, int32_t z, uint8_t *y);
void nrv_matmul_integer_planes_ref(const uint8_t *a, int64_t lda, uint8_t flip, int64_t n, int64_t in, int32_t za,
                                   const int8_t *packed, int64_t out, const int32_t *zq, const nrv_requant_out *rq,
                                   void *y, int64_t ldy);
void nrv_matmul_integer_ref(const uint8_t *a, uint8_t flip, int64_t rows, int64_t in, const int32_t *za,
                            int64_t za_stride, const int8_t *packed, int64_t out, int64_t n0, int64_t n1,
                            const int32_t *zq, int32_t *y);
/* Quantises row x (n floats) to int8 as linear_w8a8 does; returns sx. */
float nrv_w8a8_quantise_row_ref(const float *x, int64_t n, int8_t *xq);

/* Windowed real DFT of strided frames (kernels/fft.c; one portable loop, no variants):
 * for frame f < frames, a[j] = x[f·stride - pad_begin + j]·window[j] for j < n (0 where the
 * index leaves [0, len)), and for bin k < bins, X[k] = Σ_j a[j]·e^{-2πijk/n}:
 * y_re[k·ldy + f] = Re X[k], y_im[k·ldy + f] = im_sign·Im X[k]. n is a power of two in
 * [4, NRV_RDFT_MAX_N], bins <= n/2 + 1; table holds nrv_rdft_table_floats(n) twiddles as
 * kernels/fft.c lays them out; work is nrv_rdft_work_bytes(n) bytes, 16-byte aligned. */
#define NRV_RDFT_MAX_N 4096
static inline int64_t nrv_rdft_table_floats(int64_t n) { return 2 * n; }
static inline int64_t nrv_rdft_work_bytes(int64_t n) { return 18 * n; }
void nrv_rdft_frames_ref(const float *x, int64_t len, int64_t stride, int64_t pad_begin, int64_t frames, int64_t n,
                         const float *window, const float *table, int64_t bins, float im_sign, float *y_re,
                         float *y_im, int64_t ldy, void *work);

/* IEEE half -> float conversion shared by the reference kernels (exact, handles
 * subnormals, inf and NaN). */
float nrv_half_to_float(uint16_t h);
uint16_t nrv_float_to_half(float f);

/* Looks up the kernel currently chosen for op (resolving the table on first use). */
nrv_kernel_fn nrv_kernel_get(nrv_op op);
/* The selected variant's `implicit` entry for op (gemm: gemm_implicit). */
nrv_kernel_fn nrv_kernel_get_implicit(nrv_op op);
/* The selected variant's `panels` entry for op (gemm: gemm_panels). */
nrv_kernel_fn nrv_kernel_get_panels(nrv_op op);
/* The selected variant's `rows_panels` entry for op (gemm: linear_panels). */
nrv_kernel_fn nrv_kernel_get_rows_panels(nrv_op op);

#endif /* NERVE_KERNELS_H */
