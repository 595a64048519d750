/* plan_ops.h — the contract between the plan runtime (plan.c) and the ops it executes.
 *
 * A compiled plan is a flat list of ops. Each op is identified in the plan file by a type
 * string ("conv", "binary", "transpose", ...) that is resolved once, at load, to an
 * nrv_op_def found in one of the per-family tables listed in plan_registry.c. At run time the
 * runtime calls def->run(&args) in order; nothing else happens between ops.
 *
 * What an op receives (nrv_op_args):
 *  - in[i] / out[i]: tensor views. The runtime has already set every view's data pointer and
 *    dims for this run (output dims were computed by the compiler as expressions of the
 *    model's symbolic dimensions and evaluated by the runtime), so an op never allocates and
 *    never decides an output shape. An absent optional input is NULL.
 *  - iattr[]: integer attributes (literal, fixed in the plan). fattr[]: float attributes.
 *  - dattr[]: integer attributes whose values depend on symbolic dimensions (a slice start
 *    counted from a symbolic end, a pad of a symbolic length); the runtime evaluates them
 *    for each run. Ops that have none ignore them.
 *  - scratch: an arena buffer reserved for this op alone (NULL when the op asked for none),
 *    scratch_bytes long; its contents are garbage on entry.
 *  Each op documents its inputs, outputs and attribute layout in a comment at its run
 *  function: that comment is what the compiler (sdk/nerve/compiler) emits against.
 *
 * What an op must do:
 *  - check what the plan could have got wrong cheaply (dtypes, ranks, extents that must
 *    agree, indices read from tensors) and return nrv_fail(...) naming the op, `a->name` (the
 *    ONNX node) and the problem, before writing any output; a plan file is hash-checked,
 *    but a plan is still data and must not be able to make an op write out of bounds;
 *  - read inputs, write outputs only within their views (numel elements of their dtype);
 *  - treat out[i]->data == in[j]->data as legal where the op's comment says "in place ok"
 *    (the memory planner only does this for elementwise ops that say so).
 * Views are dense row-major (C order); there are no strides.
 *
 * Thread safety: run functions are re-entrant; all state is in the args.
 */
#ifndef NERVE_PLAN_OPS_H
#define NERVE_PLAN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../internal.h"
#include "../kernels/kernels.h"

#define NRV_PLAN_MAX_RANK 8

typedef struct nrv_tview {
    void *data;
    int64_t dims[NRV_PLAN_MAX_RANK];
    int32_t rank;
    int32_t dtype;  /* nrv_dtype */
    int64_t numel;  /* product of dims (1 for rank 0) */
} nrv_tview;

/* The session's worker threads (NULL when it runs on one thread): see threadpool.c. */
typedef struct nrv_threadpool nrv_threadpool;
typedef void (*nrv_task_fn)(void *ctx, int64_t task);

/* Runs fn(ctx, t) for every t in [0, n_tasks) on the pool's threads and the caller, and
 * returns when all are done; with pool NULL, in order on the caller. An op must split its
 * work from the problem's shape alone (never from the thread count), so that results are
 * the same for every number of threads. */
void nrv_parallel_for(nrv_threadpool *pool, int64_t n_tasks, nrv_task_fn fn, void *ctx);

/* Plan runs flush subnormal floats to zero (x86 MXCSR FTZ + DAZ, aarch64 FPCR.FZ): one
 * subnormal operand costs an Intel core a microcode assist of ~100 cycles, and a sigmoid of
 * x < -87 is one, so a YOLOv8 whose SiLUs see such inputs ran its next convs up to 30x
 * slower (a 32x32 1x1 conv at 80x80: 4.2 ms against 0.13). nrv_session_run sets the mode
 * for its thread and restores the caller's on return; the pool's workers keep it. The
 * ops-level API (nerve.h nrv_linear, ...) is not affected: its results stay exact IEEE. */
typedef uint64_t nrv_fp_mode;
nrv_fp_mode nrv_fp_flush_begin(void); /* returns the mode to restore */
void nrv_fp_flush_end(nrv_fp_mode saved);
int nrv_threadpool_size(const nrv_threadpool *pool);
nrv_status nrv_threadpool_create(int n_threads, nrv_threadpool **out); /* NULL for 1 thread */
void nrv_threadpool_free(nrv_threadpool *pool);

/* How many pieces to cut n outputs of a product with `rows` rows into for `threads`
 * threads, each piece >= NRV_LINEAR_SPLIT_MIN_OUT outputs and rows x piece <= tile_floats;
 * 0 = do not split (op_linalg.c). */
int64_t nrv_plan_output_pieces(int threads, int64_t rows, int64_t n, int64_t tile_floats);

/* y[rows, n] = x · wᵀ + b (w [n, k] f32, b optional) through the dispatch table's "linear",
 * or its int8 weight W[n, k] = s·q + z ("linear_w8": s and z per output when st = 1, one
 * value when st = 0, z optional), with the outputs cut into pieces for the pool's threads
 * when the product is big enough (op_linalg.c); the same bits for any thread count. k > 0. */
void nrv_plan_linear(nrv_threadpool *pool, const float *x, int64_t rows, int64_t k, const float *w, const float *b,
                     int64_t n, float *y);
void nrv_plan_linear_w8(nrv_threadpool *pool, const float *x, int64_t rows, int64_t k, const int8_t *q, const float *s,
                        const float *z, int64_t st, const float *b, int64_t n, float *y);

/* Elements per piece below which an op that moves bytes (elementwise, row-wise) is not
 * shared out: handing a piece to a worker costs microseconds. */
#define NRV_PLAN_PIECE_MIN_ELEMS ((int64_t)1 << 16)

/* fn(ctx, r0, r1) over rows [0, rows) of row_elems elements each, in ranges of whole rows
 * shared out on the pool's threads (nrv_plan_pieces, pieces of at least
 * NRV_PLAN_PIECE_MIN_ELEMS elements), or once over all rows on the calling thread when they
 * are fewer. For ops whose rows are computed independently (softmax, layernorm, casts,
 * quantization: rows of one element), so the thread count changes no result. */
typedef void (*nrv_rows_fn)(void *ctx, int64_t r0, int64_t r1);
void nrv_plan_for_rows(nrv_threadpool *pool, int64_t rows, int64_t row_elems, nrv_rows_fn fn, void *ctx);

/* How many pieces to share a data-parallel op out in: 1 without a pool or below min_work
 * (work and min_work in the op's own unit: MACs, elements), else two per thread (some
 * balance) but at most `units`, the separable parts (planes, rows, channels). */
int64_t nrv_plan_pieces(const nrv_threadpool *pool, int64_t work, int64_t min_work, int64_t units);

/* The same over two axes: units_a whole units (a conv's 64-channel weight panels) and a second
 * axis that can be cut into up to parts_b equal parts (its output positions): *pieces_a
 * ranges of the first, each cut into *pieces_b ranges of the second, so that the threads get
 * equal shares where whole units alone would leave them unequal. */
void nrv_plan_grid(const nrv_threadpool *pool, int64_t work, int64_t min_work, int64_t units_a, int64_t parts_b,
                   int64_t *pieces_a, int64_t *pieces_b);

typedef struct nrv_op_args {
    const char *type;  /* op type string, e.g. "conv" */
    const char *name;  /* ONNX node name(s) it came from, for error messages */
    const nrv_tview *const *in;
    int n_in;
    nrv_tview *const *out;
    int n_out;
    const int64_t *iattr;
    int n_iattr;
    const float *fattr;
    int n_fattr;
    const int64_t *dattr; /* evaluated for this run */
    int n_dattr;
    void *scratch;
    size_t scratch_bytes;
    nrv_threadpool *pool; /* the session's threads, or NULL */
} nrv_op_args;

typedef nrv_status (*nrv_op_run_fn)(const nrv_op_args *a);

typedef struct nrv_op_def {
    const char *type;
    nrv_op_run_fn run;
    /* Name of the dispatch-table op whose variant this op's hot loop uses ("linear", "gemm",
     * ...), so `nerve plan` can say which kernel runs; NULL for ops with one portable loop. */
    const char *kernel_op;
} nrv_op_def;

/* Looks a type string up in every family table; NULL if unknown. */
const nrv_op_def *nrv_plan_op_find(const char *type);

/* Per-family tables, each terminated by an entry with type == NULL (plan_registry.c lists
 * them). A new family adds its table here and to plan_registry.c. */
extern const nrv_op_def nrv_plan_ops_elementwise[];
extern const nrv_op_def nrv_plan_ops_linalg[];
extern const nrv_op_def nrv_plan_ops_conv[];
extern const nrv_op_def nrv_plan_ops_shape[];
extern const nrv_op_def nrv_plan_ops_reduce[];
extern const nrv_op_def nrv_plan_ops_rnn[];
extern const nrv_op_def nrv_plan_ops_kv[];
extern const nrv_op_def nrv_plan_ops_upsample[];
extern const nrv_op_def nrv_plan_ops_index[];
extern const nrv_op_def nrv_plan_ops_stream[];
extern const nrv_op_def nrv_plan_ops_misc[];

/* ---- helpers every op uses (plan_util.c) */

/* Fails with NRV_ERR_INVALID_ARG unless the op got exactly n_in inputs (optional ones may be
 * NULL), n_out outputs, n_iattr integer and n_fattr float attributes (-1 = any number). */
nrv_status nrv_op_expect(const nrv_op_args *a, int n_in_min, int n_in_max, int n_out, int n_iattr, int n_fattr);

/* nrv_fail with the "<type> (node '<name>'): " prefix every op error carries. */
nrv_status nrv_op_fail(const nrv_op_args *a, nrv_status st, const char *fmt, ...) NRV_PRINTF(3, 4);

/* An index tensor's dtype: NRV_ERR_DTYPE unless I64 or I32. */
nrv_status nrv_op_index_dtype(const nrv_op_args *a, const nrv_tview *ind);

/* The operands of the gather family (gather, gather_elements, gather_nd), checked: in[0]
 * data, in[1] indices (I64/I32), out[0] y, one integer attribute. */
nrv_status nrv_op_gather_operands(const nrv_op_args *a, const nrv_tview **data, const nrv_tview **ind,
                                  nrv_tview **y);

/* Every index of ind (I64/I32) within [-dim, dim), checked before anything is written:
 * NRV_ERR_INDEX naming the first one outside, its flat position and value, and `where`
 * (what the indices address). */
nrv_status nrv_op_check_indices(const nrv_op_args *a, const nrv_tview *ind, int64_t dim, const char *where);

/* The spatial rank sr = iattr[0] (1 or 2) of a conv-family op whose integer attributes are
 * `fixed` values (iattr[0] among them) then `per_axis` per spatial axis; NRV_ERR_INVALID_ARG
 * unless sr is 1 or 2 and n_iattr is fixed + per_axis * sr. */
nrv_status nrv_op_spatial_rank(const nrv_op_args *a, int fixed, int per_axis, int64_t *sr);

/* The operands of conv, conv_packed and conv_transpose, checked: in[0] x, in[1] w, in[2]
 * bias (optional: *b = NULL), out[0] y; all f32; x and y of rank 2 + sr, w of rank w_rank
 * (2 + sr; conv_packed's panels: 1). */
nrv_status nrv_op_conv_operands(const nrv_op_args *a, int64_t sr, int w_rank, const nrv_tview **x,
                                const nrv_tview **w, const nrv_tview **b, nrv_tview **y);

/* Fails with NRV_ERR_INVALID_ARG unless input i is present. */
nrv_status nrv_op_require_input(const nrv_op_args *a, int i);

/* Fails with NRV_ERR_DTYPE unless view v (input or output `what`) has dtype dt. */
nrv_status nrv_op_expect_dtype(const nrv_op_args *a, const nrv_tview *v, const char *what, nrv_dtype dt);

/* Fails with NRV_ERR_SHAPE unless a and b have the same number of elements. */
nrv_status nrv_op_expect_same_numel(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, const char *what);

/* The operands every int8-weight op (linear_w8, linear_w8a8, conv_w8a8) takes: in[0] x,
 * in[1] the weight, in[2] s (all required), in[3] z and in[4] bias (optional: NULL), one
 * output; checks the counts (n_iattr integer and 2 float attributes) and unpacks them. */
typedef struct nrv_w8_operands {
    const nrv_tview *x, *w, *s, *z, *bias;
    nrv_tview *y;
} nrv_w8_operands;
nrv_status nrv_op_w8_operands(const nrv_op_args *a, int n_iattr, nrv_w8_operands *o);

/* The operands of the exact integer ops (matmul_integer, conv_integer): in[0] x u8 or i8,
 * in[1] the packed int8 weight (rank 1, packed_bytes bytes), in[2] x's zero point in x's
 * dtype (optional: NULL; its count is the caller's to check), in[3] the weight's int32 zero
 * points [n] (optional: NULL); out[0] y i32, unless inputs past in[3] (up to max_in: the
 * op's requantization, nrv_op_requant_out) make it bytes. Checks counts (n_iattr integer
 * attributes, no float ones), dtypes and the weight's shapes, and unpacks them. */
typedef struct nrv_int_operands {
    const nrv_tview *x, *w, *xz, *wz;
    nrv_tview *y;
} nrv_int_operands;
nrv_status nrv_op_int_operands(const nrv_op_args *a, int max_in, int n_iattr, int64_t n, int64_t packed_bytes,
                               nrv_int_operands *o);

/* The zero point of u8/i8 codes at in[i] (absent: 0), checked to be one value of `dtype`
 * (errors name it `what`), into *z (ops requantize, conv_integer's requantization,
 * depthwise_integer). */
nrv_status nrv_op_code_zero_point(const nrv_op_args *a, int i, const char *what, nrv_dtype dtype, int32_t *z);

/* Requantization parameters for C channels into the byte output y (ops requantize and
 * conv_integer): in[i_bias] bias i32 [C] (optional), in[i_scale] scale f32 [C] or [1] (each
 * finite and > 0), in[i_zp] zero point of y's dtype, one value (optional: 0); y u8 or i8.
 * Fills rq (bias NULL when absent, the clamp less the zero point). */
nrv_status nrv_op_requant_out(const nrv_op_args *a, int i_bias, int i_scale, int i_zp, const nrv_tview *y, int64_t C,
                              nrv_requant_out *rq);

/* The dequantizing cast's steps (a DequantizeLinear of activations): y[i] = ((float)x[i] − zd)·sd
 * for n codes of dtype NRV_U8 or NRV_I8, each step one fp32 rounding (ops cast and
 * fake_quant: one definition, so the same bits). */
void nrv_dequantize_codes(const void *x, int dtype, int64_t n, float zd, float sd, float *y);

/* x [outer, C, inner] int32 sums into y's bytes through the requant kernel, one call per
 * (outer, channel) plane of inner values, or per row of C when inner is 1 (ops requantize
 * and conv_integer), on the pool's threads (nrv_plan_for_rows). */
void nrv_requant_planes(nrv_threadpool *pool, const nrv_requant_out *rq, const int32_t *x, int64_t outer, int64_t C,
                        int64_t inner, uint8_t *y);

/* The per-output parameters of an int8 weight with n outputs (linear_w8, linear_w8a8,
 * conv_w8a8): s f32 [n] or [1]; z f32 shaped like s, optional (NULL); bias f32 [n],
 * optional (NULL). NRV_ERR_DTYPE for a dtype, NRV_ERR_SHAPE for a rank or an extent. */
nrv_status nrv_op_check_w8_params(const nrv_op_args *a, const nrv_tview *s, const nrv_tview *z, const nrv_tview *bias,
                                  int64_t n);

/* "[2, 3, 4]" into buf (always terminated); returns buf. */
const char *nrv_op_fmt_dims(char *buf, size_t size, const nrv_tview *v);

/* A view the op is about to index: present, rank in range, known dtype, dims >= 0 whose
 * product is numel (and fits), data present when there is anything to read or write. */
nrv_status nrv_op_check_view(const nrv_op_args *a, const nrv_tview *v, const char *what);

/* Input i is present and passes nrv_op_check_view. */
nrv_status nrv_op_check_in(const nrv_op_args *a, int i, const char *what);

/* v has exactly ref's dims (NRV_ERR_SHAPE naming both otherwise). */
nrv_status nrv_op_same_dims(const nrv_op_args *a, const nrv_tview *v, const char *what, const nrv_tview *ref,
                            const char *ref_what);

/* Normalises an axis in [-rank, rank) to [0, rank); fails with NRV_ERR_INVALID_ARG otherwise. */
nrv_status nrv_op_axis(const nrv_op_args *a, int64_t axis, int32_t rank, int32_t *out);

/* Product of dims[from, to). */
static inline int64_t nrv_dims_product(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= dims[i];
    return p;
}

/* [lo, hi) = the o in [0, n_out) with 0 <= o*step + off < n_in (step > 0); lo == hi when none. */
static inline void nrv_valid_range(int64_t off, int64_t step, int64_t n_in, int64_t n_out, int64_t *lo, int64_t *hi) {
    int64_t l, h;
    if (step == 1) { /* the common case, without the divisions */
        l = off >= 0 ? 0 : -off;
        h = n_in - off;
    } else {
        l = off >= 0 ? 0 : (-off + step - 1) / step;
        h = off > n_in - 1 ? 0 : (n_in - 1 - off) / step + 1;
    }
    if (h > n_out) h = n_out;
    if (h < 0) h = 0;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Row-major element strides of v. */
static inline void nrv_strides_of(const nrv_tview *v, int64_t *st) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= v->dims[d];
    }
}

/* Element i of an index tensor (I64 or I32, checked by the caller). */
static inline int64_t nrv_index_at(const nrv_tview *v, int64_t i) {
    return v->dtype == NRV_I64 ? ((const int64_t *)v->data)[i] : (int64_t)((const int32_t *)v->data)[i];
}

/* Element i of an integer tensor of dtype I64, I32, U8 or BOOL, as int64. */
static inline int64_t nrv_int_at(const nrv_tview *v, int64_t i) {
    switch (v->dtype) {
    case NRV_I64: return ((const int64_t *)v->data)[i];
    case NRV_I32: return ((const int32_t *)v->data)[i];
    case NRV_I8: return ((const int8_t *)v->data)[i];
    default: return ((const uint8_t *)v->data)[i];
    }
}

/* Activation fused into the op that produces a tensor (conv, linear, matmul): iattr code,
 * with LEAKY_RELU's slope and CLIP's bounds in fattr where the op's comment says. */
typedef enum nrv_plan_act {
    NRV_PLAN_ACT_NONE = 0,
    NRV_PLAN_ACT_RELU = 1,
    NRV_PLAN_ACT_GELU = 2,      /* exact erf form */
    NRV_PLAN_ACT_SIGMOID = 3,
    NRV_PLAN_ACT_TANH = 4,
    NRV_PLAN_ACT_GELU_TANH = 5,
    NRV_PLAN_ACT_LEAKY_RELU = 6, /* p0 = alpha */
    NRV_PLAN_ACT_CLIP = 7,       /* p0 = min, p1 = max */
    NRV_PLAN_ACT_HARD_SWISH = 8, /* x · min(max(x/6 + 1/2, 0), 1) (MobileNetV3, PP-OCR) */
    NRV_PLAN_ACT_SILU = 9,       /* x · sigmoid(x) (YOLOv5/v8/X, EfficientNet: "swish") */
    NRV_PLAN_ACT_LAST = NRV_PLAN_ACT_SILU
} nrv_plan_act;

/* HardSwish x · clamp(x·(1/6) + 1/2, 0, 1), one definition for the unary op and the fused
 * activation: y[i] = hs(x[i]) for i < n (x == y allowed), the dispatch table's
 * "hard_swish" (AVX2/AVX-512/NEON vectors, the scalar reference elsewhere; the same
 * roundings in each, so every variant gives the same bits). */
void nrv_hard_swish(const float *x, float *y, int64_t n);
/* y = x · sigmoid(x), the dispatch table's "silu": its sigmoid is the "sigmoid" variant's
 * own function, so it is bit for bit what the separate Sigmoid and Mul ops give; y may be x. */
void nrv_silu(const float *x, float *y, int64_t n);
/* LeakyRelu y = x < 0 ? alpha·x : x, the same way (the unary op and the fused activation). */
void nrv_leaky_relu(const float *x, float *y, int64_t n, float alpha);
/* Clip y = min(max(x, lo), hi) as ONNX defines it (hi when lo > hi; NaN passes through, as in
 * onnxruntime); one definition for the unary op and the fused activation; y may be x. */
void nrv_clip(const float *x, float *y, int64_t n, float lo, float hi);

/* y[i] = act(y[i]) for i < n, in place; NRV_ERR_INVALID_ARG for an unknown code. */
nrv_status nrv_plan_apply_act(const nrv_op_args *a, int64_t act, float p0, float p1, float *y, int64_t n);
/* y[i] = act((y[i] + *bias) + sum[i]) for i < n, in place (bias NULL: no bias term, sum
 * NULL: no sum; sum must not overlap y): the bits of adding the bias, then an Add of sum,
 * then nrv_plan_apply_act, in one pass over y where the activation is none, relu or clip. */
nrv_status nrv_plan_epilogue(const nrv_op_args *a, int64_t act, float p0, float p1, const float *bias,
                             const float *sum, float *y, int64_t n);

#endif /* NERVE_PLAN_OPS_H */
