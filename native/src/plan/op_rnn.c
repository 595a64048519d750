/* op_rnn.c — plan ops of the rnn family: ONNX LSTM and GRU (opset 14, layout 0, default
 * activations only) and RNN (tanh, relu or sigmoid) (contract: plan_ops.h).
 *
 * Both ops walk time step by step. A step computes the gate pre-activations of the whole
 * batch with two calls of the linear kernel (X_t · Wᵀ + Wb — or, when the scratch has room,
 * its rows of one product over all steps made before the loop — and h · Rᵀ + Rb) into
 * the op's scratch, then finishes the gates with the sigmoid/tanh dispatch kernels and a few
 * element-wise loops. The running state lives in the final-state outputs (Y_h, Y_c), which
 * are initialised from initial_h / initial_c (or zeros) once everything was checked.
 *
 * Sequence lengths (as onnxruntime): batch entry b takes part in steps t < len_b only; in
 * reverse direction it runs t = len_b - 1 down to 0. For t >= len_b, Y[t, dir, b] = 0 and b's
 * state is kept, so Y_h / Y_c hold the state after its last step (initial state when
 * len_b == 0).
 */
#include <stdio.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

/* ------------------------------------------------------------------ shared checks */

static nrv_status expect_shape_of(const nrv_op_args *a, const nrv_tview *v, const char *what, nrv_dtype dtype,
                                  int rank, const int64_t *want) {
    NRV_TRY(nrv_op_expect_dtype(a, v, what, dtype));
    int ok = v->rank == rank;
    for (int i = 0; ok && i < rank; i++) ok = v->dims[i] == want[i];
    if (!ok) {
        char got_s[160], want_s[160];
        int gl = 0, wl = 0;
        got_s[0] = want_s[0] = '\0';
        for (int i = 0; i < v->rank && i < NRV_PLAN_MAX_RANK && gl < 120; i++)
            gl += snprintf(got_s + gl, sizeof got_s - (size_t)gl, "%s%lld", i ? ", " : "", (long long)v->dims[i]);
        for (int i = 0; i < rank && wl < 120; i++)
            wl += snprintf(want_s + wl, sizeof want_s - (size_t)wl, "%s%lld", i ? ", " : "", (long long)want[i]);
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s is [%s], expected [%s]", a->type, a->name, what, got_s,
                        want_s);
    }
    return NRV_OK;
}

static nrv_status expect_shape(const nrv_op_args *a, const nrv_tview *v, const char *what, int rank,
                               const int64_t *want) {
    return expect_shape_of(a, v, what, NRV_F32, rank, want);
}

/* Common attributes and X/W/R/B/sequence_lens/initial_h checks of LSTM (gates 4) and GRU
 * (gates 3). Fills the extents; validates every sequence length. */
typedef struct rnn_dims {
    int64_t seq, batch, in, hid, dirs, direction;
} rnn_dims;

static nrv_status rnn_check_common(const nrv_op_args *a, int64_t gates, int w8_ok, rnn_dims *d) {
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    NRV_TRY(nrv_op_require_input(a, 2));
    d->direction = a->iattr[0];
    d->hid = a->iattr[1];
    if (d->direction < 0 || d->direction > 2)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): direction %lld (0 forward, 1 reverse, 2 bidirectional)",
                        a->type, a->name, (long long)d->direction);
    /* bound keeps 2·gates·H and every product below far from overflow */
    if (d->hid <= 0 || d->hid > ((int64_t)1 << 40))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): hidden_size %lld must be > 0", a->type, a->name,
                        (long long)d->hid);
    d->dirs = d->direction == 2 ? 2 : 1;
    const nrv_tview *X = a->in[0];
    NRV_TRY(nrv_op_expect_dtype(a, X, "X", NRV_F32));
    if (X->rank != 3)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): X has rank %d, expected 3 [seq, batch, input]", a->type,
                        a->name, (int)X->rank);
    d->seq = X->dims[0];
    d->batch = X->dims[1];
    d->in = X->dims[2];
    const int64_t H = d->hid, G = gates * H;
    if (!(w8_ok && a->in[1]->dtype == NRV_I8)) /* an int8 W: the op's rnn_check_w8 */
        NRV_TRY(expect_shape(a, a->in[1], "W", 3, (const int64_t[]){d->dirs, G, d->in}));
    if (a->in[2]->dtype != NRV_I8) /* an int8 R: each op's rnn_check_w8 */
        NRV_TRY(expect_shape(a, a->in[2], "R", 3, (const int64_t[]){d->dirs, G, H}));
    if (a->n_in > 3 && a->in[3]) NRV_TRY(expect_shape(a, a->in[3], "B", 2, (const int64_t[]){d->dirs, 2 * G}));
    if (a->n_in > 5 && a->in[5])
        NRV_TRY(expect_shape(a, a->in[5], "initial_h", 3, (const int64_t[]){d->dirs, d->batch, H}));
    NRV_TRY(expect_shape(a, a->out[0], "Y", 4, (const int64_t[]){d->seq, d->dirs, d->batch, H}));
    NRV_TRY(expect_shape(a, a->out[1], "Y_h", 3, (const int64_t[]){d->dirs, d->batch, H}));
    if (a->n_in > 4 && a->in[4]) {
        const nrv_tview *sl = a->in[4];
        if (sl->dtype != NRV_I32 && sl->dtype != NRV_I64)
            return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): sequence_lens is %s, expected i32", a->type, a->name,
                            nrv_dtype_str((nrv_dtype)sl->dtype));
        if (sl->rank != 1 || sl->dims[0] != d->batch)
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): sequence_lens must be [%lld]", a->type, a->name,
                            (long long)d->batch);
        for (int64_t b = 0; b < d->batch; b++) {
            const int64_t len = nrv_int_at(sl, b);
            if (len < 0 || len > d->seq)
                return nrv_fail(NRV_ERR_INDEX, "%s (node '%s'): sequence_lens[%lld] = %lld out of range [0, %lld]",
                                a->type, a->name, (long long)b, (long long)len, (long long)d->seq);
        }
    }
    return NRV_OK;
}

/* An int8 weight (W8: int8 codes, one scale per row, an optional offset per row; nerve.h
 * "W8 weights"): in[which] = q [dirs, G, cols] int8 (R: cols H; LSTM's W: cols I), its
 * scales in[at] [dirs, G] f32 and offsets in[at + 1] [dirs, G] f32 (optional), so
 * weight[d, o, k] = s[d, o]·q[d, o, k] + z[d, o]. onnxruntime's DynamicQuantizeLSTM keeps
 * both its weights int8 this way. Sets w->q (NULL when the weight is f32: nothing more to
 * check). */
typedef struct rnn_w8 {
    const int8_t *q;
    const float *s, *z;
} rnn_w8;

static nrv_status rnn_check_w8(const nrv_op_args *a, const rnn_dims *d, int which, const char *what, int64_t G,
                               int64_t cols, int at, rnn_w8 *w) {
    const nrv_tview *q = a->in[which];
    w->q = NULL, w->s = w->z = NULL;
    if (q->dtype != NRV_I8) return NRV_OK;
    char name[32];
    snprintf(name, sizeof name, "int8 %s", what);
    NRV_TRY(expect_shape_of(a, q, name, NRV_I8, 3, (const int64_t[]){d->dirs, G, cols}));
    if (a->n_in <= at || !a->in[at])
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): int8 %s needs its per-row scales (input %d)", a->type,
                        a->name, what, at);
    snprintf(name, sizeof name, "%s scales", what);
    NRV_TRY(expect_shape(a, a->in[at], name, 2, (const int64_t[]){d->dirs, G}));
    if (a->n_in > at + 1 && a->in[at + 1]) {
        snprintf(name, sizeof name, "%s offsets", what);
        NRV_TRY(expect_shape(a, a->in[at + 1], name, 2, (const int64_t[]){d->dirs, G}));
    }
    w->q = q->data;
    w->s = a->in[at]->data;
    w->z = a->n_in > at + 1 && a->in[at + 1] ? a->in[at + 1]->data : NULL;
    return NRV_OK;
}

/* R as weight panels (optional; the compiler's select_rnn_panels): in[at] f32 [dirs, P] holding,
 * per direction, the row blocks of R the op multiplies by h — LSTM [0, 4H); GRU [0, 3H) with
 * linear_before_reset, else [0, 2H) then [2H, 3H); RNN [0, H) — each packed by
 * nrv_panels_pack (H deep), back to back; 64-byte aligned. The step's product then streams
 * whole panels with no horizontal sums (the dot kernel's cost at small H: a 32-wide LSTM's
 * 128 x 32 product 520 -> 150 ns). Sets *rp to direction 0's panels, or NULL when absent (or
 * when R is int8: its W8 path), and *per_dir to P. */
static nrv_status rnn_check_r_panels(const nrv_op_args *a, const rnn_dims *d, int at, const int64_t *blocks, int nb,
                                     const rnn_w8 *r8, const float **rp, int64_t *per_dir) {
    *rp = NULL;
    *per_dir = 0;
    if (a->n_in <= at || !a->in[at] || r8->q) return NRV_OK;
    int64_t want = 0;
    for (int i = 0; i < nb; i++) want += nrv_panels_floats(blocks[i], d->hid); /* R [dirs, G, H] is in memory */
    NRV_TRY(expect_shape(a, a->in[at], "R panels", 2, (const int64_t[]){d->dirs, want}));
    if ((uintptr_t)a->in[at]->data % 64 != 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): R panels are not 64-byte aligned", a->type, a->name);
    *rp = a->in[at]->data;
    *per_dir = want;
    return NRV_OK;
}

/* y[batch, n] = h · R[dir][row0 : row0 + n]ᵀ + Rb (R [dirs, G, H]): linear_panels on this
 * block's panels when given, else the f32 linear kernel, or linear_w8 (the int8 rows widened
 * in registers: a step's GEMV reads a quarter of the bytes). With a pool and at least
 * RNN_PARALLEL_MIN_MACS a step, the rows of R are shared out in whole panels (64 rows):
 * the step is a GEMV streaming R from L3 or memory, which one core cannot saturate, and the
 * time loop itself is sequential (ddddocr's bidirectional 512-wide LSTM, 2 MB of R a step:
 * 2.97 ms on one thread and 3.35 on two before, as onnxruntime's went 2.59 -> 1.66). Panels
 * take any batch (y's rows n apart); the row-major kernels write y's rows contiguous, so they
 * split only one row. Every output's arithmetic is the same in any piece (kernels.h): the
 * same bits for every thread count. */
#define RNN_PARALLEL_MIN_MACS ((int64_t)1 << 17)
typedef struct rnn_rec_job {
    const rnn_w8 *r8;
    const float *R, *panels, *h, *Rb;
    float *y;
    int64_t dir, G, row0, n, batch, H;
    int64_t units, pieces; /* R's rows in panels of 64, shared out in `pieces` runs */
} rnn_rec_job;

static void rnn_recurrent_rows(const rnn_rec_job *j, int64_t o0, int64_t o1) {
    const int64_t row = j->dir * j->G + j->row0 + o0, m = o1 - o0, H = j->H;
    const float *b = j->Rb ? j->Rb + o0 : NULL;
    if (j->panels)
        nrv_kernel_get_rows_panels(NRV_OP_GEMM).linear_panels(j->h, j->batch, H, H, NULL, NULL, 0.0f,
                                                              j->panels + o0 * H, m, b, j->y + o0, j->n);
    else if (j->r8->q)
        nrv_kernel_get(NRV_OP_LINEAR_W8).linear_w8(j->h, j->batch, H, j->r8->q + row * H, j->r8->s + row,
                                                  j->r8->z ? j->r8->z + row : NULL, 1, b, m, j->y + o0);
    else
        nrv_kernel_get(NRV_OP_LINEAR).linear(j->h, j->batch, H, j->R + row * H, b, m, j->y + o0);
}

static void rnn_recurrent_task(void *ctx, int64_t t) {
    const rnn_rec_job *j = ctx;
    const int64_t o0 = t * j->units / j->pieces * NRV_PANEL_COLS, o1 = (t + 1) * j->units / j->pieces * NRV_PANEL_COLS;
    if (o0 < o1) rnn_recurrent_rows(j, o0, o1 < j->n ? o1 : j->n);
}

static void rnn_recurrent(nrv_threadpool *pool, const rnn_w8 *r8, const float *R, const float *panels, int64_t dir,
                          int64_t G, int64_t row0, int64_t n, const float *h, int64_t batch, int64_t H, const float *Rb,
                          float *y) {
    rnn_rec_job j = {r8, R, panels, h, Rb, y, dir, G, row0, n, batch, H, (n + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS, 1};
    if (panels || batch == 1) j.pieces = nrv_plan_pieces(pool, batch * n * H, RNN_PARALLEL_MIN_MACS, j.units);
    if (j.pieces <= 1) {
        rnn_recurrent_rows(&j, 0, n);
        return;
    }
    nrv_parallel_for(pool, j.pieces, rnn_recurrent_task, &j);
}

/* Fails unless the scratch holds blocks · batch · width floats. */
static nrv_status rnn_check_scratch(const nrv_op_args *a, int64_t blocks, int64_t batch, int64_t width,
                                    int64_t extra_width) {
    uint64_t need = 0, more = 0;
    int bad = nrv_mul_overflow((uint64_t)blocks * sizeof(float), (uint64_t)batch, &need);
    bad |= nrv_mul_overflow(need, (uint64_t)width, &need);
    bad |= nrv_mul_overflow((uint64_t)batch * sizeof(float), (uint64_t)extra_width, &more);
    bad |= nrv_add_overflow(need, more, &need);
    if (bad || !a->scratch || a->scratch_bytes < need)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): scratch is %zu bytes, needs %llu", a->type, a->name,
                        a->scratch ? a->scratch_bytes : (size_t)0, (unsigned long long)need);
    return NRV_OK;
}

/* rows x n state from an optional [rows, n] initial tensor, else zeros. */
static void rnn_init_state(float *dst, const nrv_tview *init, int64_t n) {
    if (init) memcpy(dst, init->data, (size_t)n * sizeof(float));
    else memset(dst, 0, (size_t)n * sizeof(float));
}

/* y[rows, out] = x · wᵀ + b, also for in == 0 (the kernel needs every size > 0): w f32, or,
 * when w8 (not NULL) holds int8 codes, its rows from row0 on with their scales and offsets
 * (linear_w8: the int8 rows widened in registers, a quarter of the bytes read). On the
 * pool's threads, cut along the outputs (the same bits): the projection of every step's
 * input before the time loop, 8 x 512 -> 2048 per direction in ddddocr's LSTM, is a pass
 * over a 4 MiB weight that one thread alone read in ~0.3 ms. */
static void rnn_linear(nrv_threadpool *pool, const float *x, int64_t rows, int64_t in, const float *w,
                       const rnn_w8 *w8, int64_t row0, const float *b, int64_t out, float *y) {
    if (in > 0 && w8 && w8->q) {
        nrv_plan_linear_w8(pool, x, rows, in, w8->q + row0 * in, w8->s + row0, w8->z ? w8->z + row0 : NULL, 1, b, out,
                           y);
        return;
    }
    if (in > 0) {
        nrv_plan_linear(pool, x, rows, in, w, b, out, y);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        if (b) memcpy(y + r * out, b, (size_t)out * sizeof(float));
        else memset(y + r * out, 0, (size_t)out * sizeof(float));
    }
}

/* Room after the `used` bytes of scratch for every step's input projection [seq·batch, G]
 * (the compiler reserves it): the pointer, or NULL (plans without it project per step). */
static float *rnn_projection_room(const nrv_op_args *a, uint64_t used, int64_t seq, int64_t batch, int64_t G) {
    uint64_t need;
    if (nrv_mul_overflow((uint64_t)seq * (uint64_t)batch, (uint64_t)G * sizeof(float), &need) ||
        nrv_add_overflow(need, used, &need) || need > a->scratch_bytes)
        return NULL;
    return (float *)((char *)a->scratch + used);
}

/* X_t · Wᵀ + Wb of step t, [batch, G]: its rows of the projection made before the loop
 * (xproj), or computed now into own. */
static float *rnn_step_gates(nrv_threadpool *pool, float *xproj, float *own, const float *X, int64_t t,
                             int64_t batch, int64_t I, const float *Wd, const rnn_w8 *w8, int64_t row0,
                             const float *Wb, int64_t G) {
    if (xproj) return xproj + t * batch * G;
    rnn_linear(pool, X + t * batch * I, batch, I, Wd, w8, row0, Wb, G, own);
    return own;
}

static inline void clip_vec(float *v, int64_t n, float clip) {
    for (int64_t i = 0; i < n; i++) v[i] = v[i] < -clip ? -clip : (v[i] > clip ? clip : v[i]);
}

static inline int64_t seq_len_of(const nrv_tview *sl, int64_t b, int64_t seq) {
    return sl ? nrv_int_at(sl, b) : seq;
}

/* ------------------------------------------------------------------ lstm */

/* "lstm": ONNX LSTM (opset 14), layout 0, activations sigmoid, tanh, tanh.
 *   in[0] X [seq, batch, I]; in[1] W [dirs, 4H, I] f32, or int8 with in[11] its scales and
 *   in[12] (optional) its offsets; in[2] R [dirs, 4H, H] f32, or int8 with in[8] its scales
 *   and in[9] (optional) its offsets; scales and offsets [dirs, 4H] f32 (rnn_check_w8:
 *   onnxruntime's DynamicQuantizeLSTM keeps both weights int8 this way);
 *   in[3] B [dirs, 8H] optional (Wb then Rb); in[4] sequence_lens [batch] i32 (i64 accepted)
 *   optional, each in [0, seq] (else NRV_ERR_INDEX); in[5] initial_h [dirs, batch, H] optional;
 *   in[6] initial_c [dirs, batch, H] optional; in[7] P [dirs, 3H] optional (peepholes i, o, f);
 *   in[10] R panels [dirs, nrv_panels_floats(4H, H)] optional (rnn_check_r_panels; f32 R only).
 *   out[0] Y [seq, dirs, batch, H]; out[1] Y_h [dirs, batch, H]; out[2] Y_c [dirs, batch, H]
 *   (all three always present). All f32 but sequence_lens. Gate order in W, R, B: i, o, f, c.
 *   iattr [direction (0 forward, 1 reverse, 2 bidirectional; dirs = 2 if bidirectional else 1),
 *          hidden_size H (> 0), input_forget (0/1: f = 1 - i)];
 *   fattr [clip] (> 0: every gate pre-activation, peephole term included, clamped to
 *   [-clip, clip] before its sigmoid/tanh, as onnxruntime; the cell state is not clipped;
 *   0 or negative: no clip).
 *   scratch: scratch_bytes >= 4 · batch · 4H · 2 (two [batch, 4H] f32 gate blocks); less is
 *   NRV_ERR_INVALID_ARG. With 4 · seq · batch · 4H bytes more, X · Wᵀ + Wb of every step is
 *   computed in one product before the time loop (one kernel call instead of seq).
 *   Bidirectional: direction 0 runs forward, direction 1 in reverse; Y[:, d] and Y_h[d], Y_c[d]
 *   hold direction d. */
static nrv_status run_lstm(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 13, 3, 3, 1));
    rnn_dims d;
    NRV_TRY(rnn_check_common(a, 4, 1, &d));
    rnn_w8 r8, w8;
    NRV_TRY(rnn_check_w8(a, &d, 2, "R", 4 * d.hid, d.hid, 8, &r8));
    NRV_TRY(rnn_check_w8(a, &d, 1, "W", 4 * d.hid, d.in, 11, &w8));
    const float *rp;
    int64_t rp_dir;
    NRV_TRY(rnn_check_r_panels(a, &d, 10, (const int64_t[]){4 * d.hid}, 1, &r8, &rp, &rp_dir));
    const int64_t input_forget = a->iattr[2];
    if (input_forget != 0 && input_forget != 1)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): input_forget %lld must be 0 or 1", a->type, a->name,
                        (long long)input_forget);
    const int64_t H = d.hid, G = 4 * H, batch = d.batch, seq = d.seq, I = d.in, dirs = d.dirs;
    const nrv_tview *init_c = a->n_in > 6 ? a->in[6] : NULL;
    const nrv_tview *P = a->n_in > 7 ? a->in[7] : NULL;
    if (init_c) NRV_TRY(expect_shape(a, init_c, "initial_c", 3, (const int64_t[]){dirs, batch, H}));
    if (P) NRV_TRY(expect_shape(a, P, "P", 2, (const int64_t[]){dirs, 3 * H}));
    NRV_TRY(expect_shape(a, a->out[2], "Y_c", 3, (const int64_t[]){dirs, batch, H}));
    if (batch == 0) return NRV_OK;
    NRV_TRY(rnn_check_scratch(a, 2, batch, G, 0));

    const float *X = a->in[0]->data, *W = a->in[1]->data, *R = a->in[2]->data;
    const float *Bv = a->n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
    const nrv_tview *sl = a->n_in > 4 ? a->in[4] : NULL;
    const nrv_tview *init_h = a->n_in > 5 ? a->in[5] : NULL;
    const float clip = a->fattr[0];
    const int do_clip = clip > 0.0f;
    float *Y = a->out[0]->data, *Yh = a->out[1]->data, *Yc = a->out[2]->data;
    rnn_init_state(Yh, init_h, dirs * batch * H);
    rnn_init_state(Yc, init_c, dirs * batch * H);

    const nrv_unary_fn sigmoid = nrv_kernel_get(NRV_OP_SIGMOID).unary;
    const nrv_unary_fn tanh_k = nrv_kernel_get(NRV_OP_TANH).unary;
    float *g1 = a->scratch;   /* [batch, 4H]: gate pre-activations, then gate values */
    float *g2 = g1 + batch * G; /* [batch, 4H]: h · Rᵀ + Rb, then c_new | tanh(c_new) */
    float *xproj = rnn_projection_room(a, 2 * (uint64_t)batch * G * sizeof(float), seq, batch, G);

    for (int64_t dir = 0; dir < dirs; dir++) {
        const int reverse = d.direction == 1 || dir == 1;
        const float *Wd = w8.q ? NULL : W + dir * G * I; /* an int8 W: w8's rows from dir·G */
        const float *Wb = Bv ? Bv + dir * 2 * G : NULL, *Rb = Bv ? Bv + dir * 2 * G + G : NULL;
        const float *Pi = P ? P->data : NULL, *Po = NULL, *Pf = NULL;
        if (Pi) {
            Pi += dir * 3 * H;
            Po = Pi + H;
            Pf = Pi + 2 * H;
        }
        float *h = Yh + dir * batch * H, *c = Yc + dir * batch * H;
        if (xproj) rnn_linear(a->pool, X, seq * batch, I, Wd, &w8, dir * G, Wb, G, xproj);
        for (int64_t s = 0; s < seq; s++) {
            const int64_t t = reverse ? seq - 1 - s : s;
            g1 = rnn_step_gates(a->pool, xproj, a->scratch, X, t, batch, I, Wd, &w8, dir * G, Wb, G);
            rnn_recurrent(a->pool, &r8, R, rp ? rp + dir * rp_dir : NULL, dir, G, 0, G, h, batch, H, Rb, g2);
            float *yt = Y + (t * dirs + dir) * batch * H;
            for (int64_t b = 0; b < batch; b++) {
                float *gi = g1 + b * G, *go = gi + H, *gf = gi + 2 * H, *gc = gi + 3 * H;
                const float *r = g2 + b * G;
                float *hb = h + b * H, *cb = c + b * H, *yb = yt + b * H;
                if (t >= seq_len_of(sl, b, seq)) {
                    memset(yb, 0, (size_t)H * sizeof(float));
                    continue;
                }
                for (int64_t j = 0; j < G; j++) gi[j] += r[j];
                if (Pi) {
                    for (int64_t j = 0; j < H; j++) gi[j] += Pi[j] * cb[j];
                    if (!input_forget)
                        for (int64_t j = 0; j < H; j++) gf[j] += Pf[j] * cb[j];
                }
                if (do_clip) {
                    /* o is clipped with its peephole term, after the new cell is known */
                    if (Pi) {
                        clip_vec(gi, H, clip);
                        clip_vec(gf, 2 * H, clip);
                    } else {
                        clip_vec(gi, G, clip);
                    }
                }
                if (Pi) {
                    sigmoid(gi, H, gi);
                    if (!input_forget) sigmoid(gf, H, gf);
                } else if (!input_forget) {
                    sigmoid(gi, 3 * H, gi); /* i, o, f are contiguous */
                } else {
                    sigmoid(gi, 2 * H, gi);
                }
                if (input_forget)
                    for (int64_t j = 0; j < H; j++) gf[j] = 1.0f - gi[j];
                tanh_k(gc, H, gc);
                /* c_new into this row's first H of g2 (its R part is consumed), tanh(c_new)
                 * into the next H */
                float *cn = g2 + b * G, *tc = cn + H;
                for (int64_t j = 0; j < H; j++) cn[j] = gf[j] * cb[j] + gi[j] * gc[j];
                if (Pi) {
                    for (int64_t j = 0; j < H; j++) go[j] += Po[j] * cn[j];
                    if (do_clip) clip_vec(go, H, clip);
                    sigmoid(go, H, go);
                }
                tanh_k(cn, H, tc);
                for (int64_t j = 0; j < H; j++) {
                    const float hv = go[j] * tc[j];
                    hb[j] = hv;
                    yb[j] = hv;
                }
                memcpy(cb, cn, (size_t)H * sizeof(float));
            }
        }
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ gru */

/* "gru": ONNX GRU (opset 14), layout 0, activations sigmoid, tanh.
 *   in[0] X [seq, batch, I]; in[1] W [dirs, 3H, I]; in[2] R [dirs, 3H, H] f32, or int8 with
 *   in[6] its scales and in[7] (optional) its offsets, each [dirs, 3H] f32 (rnn_check_w8);
 *   in[3] B [dirs, 6H] optional (Wb then Rb); in[4] sequence_lens [batch] i32 (i64 accepted)
 *   optional, each in [0, seq] (else NRV_ERR_INDEX); in[5] initial_h [dirs, batch, H] optional;
 *   in[8] R panels [dirs, P] optional (rnn_check_r_panels: blocks 3H, or 2H then H; f32 R only).
 *   out[0] Y [seq, dirs, batch, H]; out[1] Y_h [dirs, batch, H] (both always present).
 *   All f32 but sequence_lens. Gate order in W, R, B: z, r, h.
 *   iattr [direction (0 forward, 1 reverse, 2 bidirectional), hidden_size H (> 0),
 *          linear_before_reset (0/1)];
 *   fattr [clip] (> 0: gate pre-activations clamped to [-clip, clip]; 0 or negative: none).
 *   scratch: scratch_bytes >= 4 · batch · 3H · 2 + 4 · batch · H (two [batch, 3H] f32 gate
 *   blocks and one [batch, H]); less is NRV_ERR_INVALID_ARG. With 4 · seq · batch · 3H bytes
 *   more, every step's input projection comes from one product before the time loop. */
static nrv_status run_gru(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 9, 2, 3, 1));
    rnn_dims d;
    NRV_TRY(rnn_check_common(a, 3, 0, &d));
    rnn_w8 r8;
    NRV_TRY(rnn_check_w8(a, &d, 2, "R", 3 * d.hid, d.hid, 6, &r8));
    const int64_t lbr = a->iattr[2];
    if (lbr != 0 && lbr != 1)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): linear_before_reset %lld must be 0 or 1", a->type,
                        a->name, (long long)lbr);
    const float *rp;
    int64_t rp_dir;
    const int64_t zr_rows = lbr ? 3 * d.hid : 2 * d.hid; /* the first block: all of R, or z and r */
    NRV_TRY(rnn_check_r_panels(a, &d, 8, (const int64_t[]){zr_rows, d.hid}, lbr ? 1 : 2, &r8, &rp, &rp_dir));
    const int64_t H = d.hid, G = 3 * H, batch = d.batch, seq = d.seq, I = d.in, dirs = d.dirs;
    if (batch == 0) return NRV_OK;
    NRV_TRY(rnn_check_scratch(a, 2, batch, G, H));

    const float *X = a->in[0]->data, *W = a->in[1]->data, *R = a->in[2]->data;
    const float *Bv = a->n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
    const nrv_tview *sl = a->n_in > 4 ? a->in[4] : NULL;
    const nrv_tview *init_h = a->n_in > 5 ? a->in[5] : NULL;
    const float clip = a->fattr[0];
    const int do_clip = clip > 0.0f;
    float *Y = a->out[0]->data, *Yh = a->out[1]->data;
    rnn_init_state(Yh, init_h, dirs * batch * H);

    const nrv_unary_fn sigmoid = nrv_kernel_get(NRV_OP_SIGMOID).unary;
    const nrv_unary_fn tanh_k = nrv_kernel_get(NRV_OP_TANH).unary;
    float *g1 = a->scratch;      /* [batch, 3H]: X_t · Wᵀ + Wb, then gate values */
    float *g2 = g1 + batch * G;  /* [batch, 3H] (lbr) or [batch, 2H] then [batch, H] */
    float *rh = g2 + batch * G;  /* [batch, H]: r ⊙ h (lbr = 0) */
    float *xproj = rnn_projection_room(a, (2 * (uint64_t)batch * G + (uint64_t)batch * H) * sizeof(float), seq,
                                       batch, G);

    for (int64_t dir = 0; dir < dirs; dir++) {
        const int reverse = d.direction == 1 || dir == 1;
        const float *Wd = W + dir * G * I;
        const float *Wb = Bv ? Bv + dir * 2 * G : NULL, *Rb = Bv ? Bv + dir * 2 * G + G : NULL;
        float *h = Yh + dir * batch * H;
        /* this direction's R panels: z and r (all of R when lbr), then h's block (lbr = 0) */
        const float *rpd = rp ? rp + dir * rp_dir : NULL;
        const float *rpd_h = rpd && !lbr ? rpd + nrv_panels_floats(2 * H, H) : NULL;
        if (xproj) rnn_linear(a->pool, X, seq * batch, I, Wd, NULL, 0, Wb, G, xproj);
        for (int64_t s = 0; s < seq; s++) {
            const int64_t t = reverse ? seq - 1 - s : s;
            g1 = rnn_step_gates(a->pool, xproj, a->scratch, X, t, batch, I, Wd, NULL, 0, Wb, G);
            /* z and r: g1[:, 0:2H] += h · R_zrᵀ + Rb_zr (all of R when lbr: its h rows too) */
            const int64_t rs = lbr ? G : 2 * H; /* row stride of g2 */
            rnn_recurrent(a->pool, &r8, R, rpd, dir, G, 0, rs, h, batch, H, Rb, g2);
            for (int64_t b = 0; b < batch; b++) {
                float *gz = g1 + b * G;
                const float *r2 = g2 + b * rs;
                for (int64_t j = 0; j < 2 * H; j++) gz[j] += r2[j];
                if (do_clip) clip_vec(gz, 2 * H, clip);
                sigmoid(gz, 2 * H, gz);
            }
            if (!lbr) {
                /* (r ⊙ h) · R_hᵀ + Rb_h, batch rows, into g2 as [batch, H] */
                for (int64_t b = 0; b < batch; b++) {
                    const float *gr = g1 + b * G + H, *hb = h + b * H;
                    float *o = rh + b * H;
                    for (int64_t j = 0; j < H; j++) o[j] = gr[j] * hb[j];
                }
                rnn_recurrent(a->pool, &r8, R, rpd_h, dir, G, 2 * H, H, rh, batch, H, Rb ? Rb + 2 * H : NULL, g2);
            }
            float *yt = Y + (t * dirs + dir) * batch * H;
            for (int64_t b = 0; b < batch; b++) {
                const float *gz = g1 + b * G, *gr = gz + H;
                float *gh = g1 + b * G + 2 * H, *hb = h + b * H, *yb = yt + b * H;
                if (t >= seq_len_of(sl, b, seq)) {
                    memset(yb, 0, (size_t)H * sizeof(float));
                    continue;
                }
                if (lbr) {
                    const float *rr = g2 + b * G + 2 * H;
                    for (int64_t j = 0; j < H; j++) gh[j] += gr[j] * rr[j];
                } else {
                    const float *rr = g2 + b * H;
                    for (int64_t j = 0; j < H; j++) gh[j] += rr[j];
                }
                if (do_clip) clip_vec(gh, H, clip);
                tanh_k(gh, H, gh);
                for (int64_t j = 0; j < H; j++) {
                    const float hv = (1.0f - gz[j]) * gh[j] + gz[j] * hb[j];
                    hb[j] = hv;
                    yb[j] = hv;
                }
            }
        }
    }
    return NRV_OK;
}

/* ------------------------------------------------------------------ rnn */

enum { RNN_ACT_TANH = 0, RNN_ACT_RELU = 1, RNN_ACT_SIGMOID = 2 };

/* "rnn": ONNX RNN (opset 14), the plain Elman cell h = f(X_t · Wᵀ + h · Rᵀ + Wb + Rb),
 * layout 0.
 *   in[0] X [seq, batch, I]; in[1] W [dirs, H, I]; in[2] R [dirs, H, H]; in[3] B [dirs, 2H]
 *   optional (Wb then Rb); in[4] sequence_lens [batch] i32 (i64 accepted) optional, each in
 *   [0, seq] (else NRV_ERR_INDEX); in[5] initial_h [dirs, batch, H] optional; in[6] R panels
 *   [dirs, nrv_panels_floats(H, H)] optional (rnn_check_r_panels).
 *   out[0] Y [seq, dirs, batch, H]; out[1] Y_h [dirs, batch, H] (both always present). All f32
 *   but sequence_lens.
 *   iattr [direction (0 forward, 1 reverse, 2 bidirectional), hidden_size H (> 0),
 *          f of direction 0, f of direction 1 (0 tanh, 1 relu, 2 sigmoid)];
 *   fattr [clip] (> 0: pre-activations clamped to [-clip, clip]; 0 or negative: none).
 *   scratch: scratch_bytes >= 4 · batch · H · 2; less is NRV_ERR_INVALID_ARG. With
 *   4 · seq · batch · H bytes more, every step's input projection comes from one product
 *   before the time loop. */
static nrv_status run_rnn(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 7, 2, 4, 1));
    rnn_dims d;
    NRV_TRY(rnn_check_common(a, 1, 0, &d));
    NRV_TRY(nrv_op_expect_dtype(a, a->in[2], "R", NRV_F32));
    const rnn_w8 no_w8 = {NULL, NULL, NULL};
    const float *rp;
    int64_t rp_dir;
    NRV_TRY(rnn_check_r_panels(a, &d, 6, (const int64_t[]){d.hid}, 1, &no_w8, &rp, &rp_dir));
    for (int k = 0; k < 2; k++)
        if (a->iattr[2 + k] < RNN_ACT_TANH || a->iattr[2 + k] > RNN_ACT_SIGMOID)
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): activation code %lld (0 tanh, 1 relu, 2 sigmoid)",
                            a->type, a->name, (long long)a->iattr[2 + k]);
    const int64_t H = d.hid, batch = d.batch, seq = d.seq, I = d.in, dirs = d.dirs;
    if (batch == 0) return NRV_OK;
    NRV_TRY(rnn_check_scratch(a, 2, batch, H, 0));

    const float *X = a->in[0]->data, *W = a->in[1]->data, *R = a->in[2]->data;
    const float *Bv = a->n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
    const nrv_tview *sl = a->n_in > 4 ? a->in[4] : NULL;
    const nrv_tview *init_h = a->n_in > 5 ? a->in[5] : NULL;
    const float clip = a->fattr[0];
    float *Y = a->out[0]->data, *Yh = a->out[1]->data;
    rnn_init_state(Yh, init_h, dirs * batch * H);

    float *g1 = a->scratch;     /* [batch, H]: X_t · Wᵀ + Wb, then h_new */
    float *g2 = g1 + batch * H; /* [batch, H]: h · Rᵀ + Rb */
    float *xproj = rnn_projection_room(a, 2 * (uint64_t)batch * H * sizeof(float), seq, batch, H);

    for (int64_t dir = 0; dir < dirs; dir++) {
        const int reverse = d.direction == 1 || dir == 1;
        const int64_t act = a->iattr[2 + dir];
        const nrv_unary_fn f = act == RNN_ACT_TANH    ? nrv_kernel_get(NRV_OP_TANH).unary
                               : act == RNN_ACT_SIGMOID ? nrv_kernel_get(NRV_OP_SIGMOID).unary
                                                        : NULL;
        const float *Wd = W + dir * H * I;
        const float *Wb = Bv ? Bv + dir * 2 * H : NULL, *Rb = Bv ? Bv + dir * 2 * H + H : NULL;
        float *h = Yh + dir * batch * H;
        if (xproj) rnn_linear(a->pool, X, seq * batch, I, Wd, NULL, 0, Wb, H, xproj);
        for (int64_t s = 0; s < seq; s++) {
            const int64_t t = reverse ? seq - 1 - s : s;
            g1 = rnn_step_gates(a->pool, xproj, a->scratch, X, t, batch, I, Wd, NULL, 0, Wb, H);
            rnn_recurrent(a->pool, &no_w8, R, rp ? rp + dir * rp_dir : NULL, dir, H, 0, H, h, batch, H, Rb, g2);
            float *yt = Y + (t * dirs + dir) * batch * H;
            for (int64_t b = 0; b < batch; b++) {
                float *gb = g1 + b * H, *hb = h + b * H, *yb = yt + b * H;
                if (t >= seq_len_of(sl, b, seq)) {
                    memset(yb, 0, (size_t)H * sizeof(float));
                    continue;
                }
                const float *r = g2 + b * H;
                for (int64_t j = 0; j < H; j++) gb[j] += r[j];
                if (clip > 0.0f) clip_vec(gb, H, clip);
                if (f) f(gb, H, gb);
                else
                    for (int64_t j = 0; j < H; j++) gb[j] = gb[j] > 0.0f ? gb[j] : 0.0f;
                memcpy(hb, gb, (size_t)H * sizeof(float));
                memcpy(yb, gb, (size_t)H * sizeof(float));
            }
        }
    }
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_rnn[] = {
    {"lstm", run_lstm, "linear"},
    {"gru", run_gru, "linear"},
    {"rnn", run_rnn, "linear"},
    {NULL, NULL, NULL},
};
