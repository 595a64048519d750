/* op_stream.c — ops of streaming and decoding models that carry state from one run to the
 * next (see plan_ops.h for the contract): tensor_scatter (ONNX TensorScatter: a cache of a
 * fixed length written at per-batch positions), causal_conv (ONNX CausalConvWithState: a
 * depthwise causal conv whose last inputs are the next chunk's left context) and
 * linear_attention (ONNX LinearAttention: one recurrent state matrix per key/value head, as
 * in RetNet, GLA, DeltaNet, Mamba 2). */
#include <string.h>

#include "plan_ops.h"

/* tensor_scatter (ONNX TensorScatter): y = past, then for each index p of the axes before
 * `axis` (p[0] is the batch b) and each s < S: y[p, pos, ...] = update[p, s, ...] with
 * pos = w[b] + s (linear: 0 <= w[b] and w[b] + S <= L) or (w[b] + s) mod L (circular:
 * 0 <= w[b]); the write positions are checked before anything is written.
 *   in[0] past [B, ..., L, ...] (any dtype); in[1] update (past's dtype and dims, but S <= L
 *   on the axis); in[2] write_indices i64/i32 [B] (optional: all 0); out[0] y (past's dtype
 *   and dims). iattr [axis (1 .. rank - 1), circular (0 or 1)]. */
static nrv_status tensor_scatter_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 3, 1, 2, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "past_cache"));
    NRV_TRY(nrv_op_check_in(a, 1, "update"));
    const nrv_tview *past = a->in[0], *upd = a->in[1], *w = a->n_in > 2 ? a->in[2] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(nrv_op_check_view(a, y, "present_cache"));
    NRV_TRY(nrv_op_same_dims(a, y, "present_cache", past, "past_cache"));
    if (upd->dtype != past->dtype || y->dtype != past->dtype)
        return nrv_op_fail(a, NRV_ERR_DTYPE, "past_cache, update and present_cache must share a dtype");
    int32_t ax;
    NRV_TRY(nrv_op_axis(a, a->iattr[0], past->rank, &ax));
    if (ax == 0) return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "the sequence axis cannot be the batch axis 0");
    const int circular = a->iattr[1] != 0;
    int ok = upd->rank == past->rank;
    for (int d = 0; ok && d < past->rank; d++) ok = d == ax ? upd->dims[d] <= past->dims[d] : upd->dims[d] == past->dims[d];
    if (!ok) {
        char b1[128], b2[128];
        return nrv_op_fail(a, NRV_ERR_SHAPE, "update %s must have past_cache's dims %s but at most as long on axis %d",
                           nrv_op_fmt_dims(b1, sizeof b1, upd), nrv_op_fmt_dims(b2, sizeof b2, past), (int)ax);
    }
    const int64_t batch = past->dims[0], L = past->dims[ax], S = upd->dims[ax];
    if (w) {
        NRV_TRY(nrv_op_check_view(a, w, "write_indices"));
        NRV_TRY(nrv_op_index_dtype(a, w));
        if (w->rank != 1 || w->dims[0] != batch)
            return nrv_op_fail(a, NRV_ERR_SHAPE, "write_indices must be [%lld] (one per batch), got %d-D with %lld values",
                               (long long)batch, (int)w->rank, (long long)w->numel);
        for (int64_t b = 0; b < batch; b++) {
            const int64_t v = nrv_index_at(w, b);
            if (v < 0 || (!circular && v > L - S))
                return nrv_op_fail(a, NRV_ERR_INDEX, "write_indices[%lld] = %lld: %s", (long long)b, (long long)v,
                                   v < 0 ? "negative" : "the update's rows would run past the cache's length");
        }
    }
    const size_t esz = nrv_dtype_size((nrv_dtype)past->dtype);
    if (y->data != past->data) memcpy(y->data, past->data, (size_t)past->numel * esz);
    if (S == 0 || past->numel == 0) return NRV_OK;
    const int64_t outer = nrv_dims_product(past->dims, 0, ax), per_batch = outer / batch;
    const size_t row = (size_t)nrv_dims_product(past->dims, ax + 1, past->rank) * esz;
    for (int64_t o = 0; o < outer; o++) {
        const int64_t start = w ? nrv_index_at(w, o / per_batch) : 0;
        char *dst = (char *)y->data + (size_t)o * (size_t)L * row;
        const char *src = (const char *)upd->data + (size_t)o * (size_t)S * row;
        if (!circular) {
            memcpy(dst + (size_t)start * row, src, (size_t)S * row);
            continue;
        }
        int64_t pos = start % L;
        for (int64_t s = 0; s < S;) { /* runs up to the wrap */
            const int64_t run = S - s < L - pos ? S - s : L - pos;
            memcpy(dst + (size_t)pos * row, src + (size_t)s * row, (size_t)run * row);
            s += run;
            pos = 0;
        }
    }
    return NRV_OK;
}

/* v is f32 [d0, d1, d2]: NRV_ERR_DTYPE / NRV_ERR_SHAPE naming `what` otherwise. */
static nrv_status expect_f32_3d(const nrv_op_args *a, const nrv_tview *v, const char *what, int64_t d0, int64_t d1,
                                int64_t d2) {
    NRV_TRY(nrv_op_expect_dtype(a, v, what, NRV_F32));
    if (v->rank != 3 || v->dims[0] != d0 || v->dims[1] != d1 || v->dims[2] != d2) {
        char buf[128];
        return nrv_op_fail(a, NRV_ERR_SHAPE, "%s is %s, expected [%lld, %lld, %lld]", what,
                           nrv_op_fmt_dims(buf, sizeof buf, v), (long long)d0, (long long)d1, (long long)d2);
    }
    return NRV_OK;
}

#define CC_ACT_BLOCK 2048 /* causal_conv: outputs activated together (8 KiB) */

typedef struct cc_ctx {
    const float *x, *w, *bias, *past;
    float *y, *present;
    int64_t B, C, T, k, pieces;
    int silu;
} cc_ctx;

/* Rows [r0, r1) of the B·C (batch, channel) rows: the outputs whose taps reach into the past
 * (t < k - 1) one at a time; the others one pass per tap over the row, which vectorises over
 * t; the row's new state; the activation every few rows. */
static void cc_task(void *vctx, int64_t piece) {
    const cc_ctx *c = vctx;
    const int64_t T = c->T, k = c->k, h = k - 1, rows = c->B * c->C;
    const int64_t r0 = piece * rows / c->pieces, r1 = (piece + 1) * rows / c->pieces;
    int64_t unactivated = r0; /* first row whose outputs still wait for the activation */
    for (int64_t r = r0; r < r1; r++) {
        const int64_t ch = r % c->C;
        const float *x = c->x + r * T, *w = c->w + ch * k, *past = c->past ? c->past + r * h : NULL;
        const float b = c->bias ? c->bias[ch] : 0.0f;
        float *y = c->y + r * T;
        const int64_t head = h < T ? h : T;
        for (int64_t t = 0; t < head; t++) { /* s[t + j] = past[t + j] while t + j < h, else x[t + j - h] */
            float acc = b;
            for (int64_t j = 0; j < k; j++) {
                const int64_t at = t + j;
                acc += w[j] * (at < h ? (past ? past[at] : 0.0f) : x[at - h]);
            }
            y[t] = acc;
        }
        if (T > head) {
            float *restrict yb = y + head;
            const float *restrict xb = x + head - h; /* yb[i] = b + Σ_j w[j]·xb[i + j] */
            const int64_t n = T - head;
            for (int64_t i = 0; i < n; i++) yb[i] = b;
            for (int64_t j = 0; j < k; j++) {
                const float wj = w[j];
                for (int64_t i = 0; i < n; i++) yb[i] += wj * xb[i + j];
            }
        }
        float *present = c->present + r * h; /* the last h values of concat(past, x) */
        const int64_t from_past = h > T ? h - T : 0;
        for (int64_t i = 0; i < from_past; i++) present[i] = past ? past[T + i] : 0.0f;
        memcpy(present + from_past, x + T - (h - from_past), (size_t)(h - from_past) * sizeof(float));
        /* rows are consecutive in y: the activation runs on CC_ACT_BLOCK outputs at a time,
         * still in L1, and not once per row (decoding, T = 1: 4096 calls of one value took
         * 112 of the op's 153 us; the whole piece at once, 4 MiB, came back from memory) */
        if (c->silu && ((r + 1 - unactivated) * T >= CC_ACT_BLOCK || r + 1 == r1)) {
            nrv_silu(c->y + unactivated * T, c->y + unactivated * T, (r + 1 - unactivated) * T);
            unactivated = r + 1;
        }
    }
}

/* causal_conv (ONNX CausalConvWithState): per batch b and channel c, over the sequence
 * s = concat(past[b, c] (or k - 1 zeros), x[b, c]): y[b, c, t] = act(bias[c] + Σ_j w[c, j]·s[t + j])
 * and present[b, c] = the last k - 1 values of s (as much of past as x does not replace).
 *   in[0] x [B, C, T]; in[1] w [C, 1, k]; in[2] bias [C] (optional); in[3] past [B, C, k - 1]
 *   (optional: zeros); all f32. out[0] y [B, C, T]; out[1] present [B, C, k - 1] (f32; neither
 *   in place). iattr [act: 0 none, 1 SiLU (x·sigmoid(x), nrv_silu)]. */
static nrv_status causal_conv_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 4, 2, 1, 0));
    NRV_TRY(nrv_op_check_in(a, 0, "input"));
    NRV_TRY(nrv_op_check_in(a, 1, "weight"));
    const nrv_tview *x = a->in[0], *w = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    const nrv_tview *past = a->n_in > 3 ? a->in[3] : NULL;
    nrv_tview *y = a->out[0], *present = a->out[1];
    NRV_TRY(nrv_op_check_view(a, y, "output"));
    NRV_TRY(nrv_op_check_view(a, present, "present_state"));
    if (a->iattr[0] != 0 && a->iattr[0] != 1)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "activation code %lld, expected 0 (none) or 1 (SiLU)",
                           (long long)a->iattr[0]);
    if (x->rank != 3 || w->rank != 3 || w->dims[2] < 1)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "input must be [B, C, T] and weight [C, 1, k] with k >= 1");
    const int64_t B = x->dims[0], C = x->dims[1], T = x->dims[2], k = w->dims[2];
    NRV_TRY(expect_f32_3d(a, x, "input", B, C, T));
    NRV_TRY(expect_f32_3d(a, w, "weight", C, 1, k));
    NRV_TRY(expect_f32_3d(a, y, "output", B, C, T));
    NRV_TRY(expect_f32_3d(a, present, "present_state", B, C, k - 1));
    if (past) {
        NRV_TRY(nrv_op_check_view(a, past, "past_state"));
        NRV_TRY(expect_f32_3d(a, past, "past_state", B, C, k - 1));
    }
    if (bias) {
        NRV_TRY(nrv_op_check_view(a, bias, "bias"));
        NRV_TRY(nrv_op_expect_dtype(a, bias, "bias", NRV_F32));
        if (bias->numel != C) return nrv_op_fail(a, NRV_ERR_SHAPE, "bias has %lld values, expected %lld", (long long)bias->numel, (long long)C);
    }
    if (B * C == 0) return NRV_OK;
    const int64_t pieces = nrv_plan_pieces(a->pool, B * C * (T + 1) * k, 1 << 16, B * C);
    cc_ctx c = {x->data, w->data, bias ? bias->data : NULL, past ? past->data : NULL, y->data, present->data,
                B, C, T, k, pieces, a->iattr[0] == 1};
    nrv_parallel_for(pieces > 1 ? a->pool : NULL, pieces, cc_task, &c);
    return NRV_OK;
}

enum { LA_LINEAR = 0, LA_GATED = 1, LA_DELTA = 2, LA_GATED_DELTA = 3 };

/* One (batch, key/value head) of the problem through the dispatched kernel (kernels.h). */
static void la_head_task(void *ctx, int64_t task) {
    nrv_kernel_get(NRV_OP_LINEAR_ATTENTION).linear_attention(ctx, task);
}

/* linear_attention (ONNX LinearAttention): for each batch b and key/value head h a state
 * S [dk, dv], from past_state (or zeros); per token t: gated rules S *= exp(g_t) (one factor
 * per row d, or one per head); delta rules u = β_t (v_t − Sᵀk_t), else u = v_t; S += k_t ⊗ u;
 * then each of the Hq / Hkv query heads sharing h (query head i reads h = i / (Hq / Hkv))
 * gives y_t = scale · q_tᵀ S.
 *   in[0] q [B, T, Hq·dk]; in[1] k [B, T, Hkv·dk]; in[2] v [B, T, Hkv·dv]; in[3] past_state
 *   [B, Hkv, dk, dv] (optional: zeros); in[4] decay [B, T, Hkv] or [B, T, Hkv·dk] (the gated
 *   rules only); in[5] beta [B, T, Hkv] or [B, T, 1] (the delta rules only); all f32.
 *   out[0] y [B, T, Hq·dv]; out[1] present_state [B, Hkv, dk, dv] (f32; not in place).
 *   iattr [Hq, Hkv, rule (0 linear, 1 gated, 2 delta, 3 gated_delta)]; fattr [scale]. */
static nrv_status linear_attention_run(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 6, 2, 3, 1));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_check_in(a, i, i == 0 ? "query" : i == 1 ? "key" : "value"));
    const nrv_tview *q = a->in[0], *k = a->in[1], *v = a->in[2];
    const nrv_tview *past = a->n_in > 3 ? a->in[3] : NULL, *g = a->n_in > 4 ? a->in[4] : NULL;
    const nrv_tview *beta = a->n_in > 5 ? a->in[5] : NULL;
    nrv_tview *y = a->out[0], *present = a->out[1];
    const int64_t hq = a->iattr[0], hkv = a->iattr[1], rule = a->iattr[2];
    if (hkv < 1 || hq < 1 || hq % hkv)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "%lld query heads cannot share %lld key/value heads", (long long)hq,
                           (long long)hkv);
    if (rule < LA_LINEAR || rule > LA_GATED_DELTA)
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "update rule code %lld, expected 0..3", (long long)rule);
    const int gated = rule == LA_GATED || rule == LA_GATED_DELTA, delta = rule == LA_DELTA || rule == LA_GATED_DELTA;
    if (gated != (g != NULL) || delta != (beta != NULL))
        return nrv_op_fail(a, NRV_ERR_INVALID_ARG, "update rule %lld takes %s decay and %s beta", (long long)rule,
                           gated ? "a" : "no", delta ? "a" : "no");
    if (q->rank != 3 || q->dims[2] % hq)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "query must be [B, T, %lld·dk]", (long long)hq);
    const int64_t B = q->dims[0], T = q->dims[1], dk = q->dims[2] / hq;
    if (v->rank != 3 || v->dims[2] % hkv)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "value must be [B, T, %lld·dv]", (long long)hkv);
    const int64_t dv = v->dims[2] / hkv;
    NRV_TRY(expect_f32_3d(a, q, "query", B, T, hq * dk));
    NRV_TRY(expect_f32_3d(a, k, "key", B, T, hkv * dk));
    NRV_TRY(expect_f32_3d(a, v, "value", B, T, hkv * dv));
    NRV_TRY(expect_f32_3d(a, y, "output", B, T, hq * dv));
    const int64_t state_dims[4] = {B, hkv, dk, dv};
    for (int i = 0; i < 2; i++) {
        const nrv_tview *s = i ? present : past;
        if (!s) continue;
        NRV_TRY(nrv_op_check_view(a, s, i ? "present_state" : "past_state"));
        NRV_TRY(nrv_op_expect_dtype(a, s, i ? "present_state" : "past_state", NRV_F32));
        int ok = s->rank == 4;
        for (int d = 0; ok && d < 4; d++) ok = s->dims[d] == state_dims[d];
        if (!ok) {
            char buf[128];
            return nrv_op_fail(a, NRV_ERR_SHAPE, "%s is %s, expected [%lld, %lld, %lld, %lld]",
                               i ? "present_state" : "past_state", nrv_op_fmt_dims(buf, sizeof buf, s), (long long)B,
                               (long long)hkv, (long long)dk, (long long)dv);
        }
    }
    int64_t g_per_key = 0, beta_per_head = 0;
    if (g) {
        NRV_TRY(nrv_op_check_view(a, g, "decay"));
        g_per_key = g->rank == 3 && g->dims[2] == hkv * dk && dk != 1;
        NRV_TRY(expect_f32_3d(a, g, "decay", B, T, g_per_key ? hkv * dk : hkv));
    }
    if (beta) {
        NRV_TRY(nrv_op_check_view(a, beta, "beta"));
        beta_per_head = beta->rank == 3 && beta->dims[2] == hkv;
        NRV_TRY(expect_f32_3d(a, beta, "beta", B, T, beta_per_head ? hkv : 1));
    }
    if (past)
        memcpy(present->data, past->data, (size_t)present->numel * sizeof(float));
    else if (present->numel)
        memset(present->data, 0, (size_t)present->numel * sizeof(float));
    if (y->numel == 0 && present->numel == 0) return NRV_OK;
    nrv_la_problem c = {q->data, k->data, v->data, g ? g->data : NULL, beta ? beta->data : NULL, y->data,
                        present->data, T, hq, hkv, dk, dv, (int)g_per_key, (int)beta_per_head, gated, delta,
                        a->fattr[0]};
    const int64_t tasks = B * hkv;
    nrv_parallel_for(nrv_plan_pieces(a->pool, tasks * T * dk * dv * (1 + hq / hkv), 1 << 15, tasks) > 1 ? a->pool
                                                                                                     : NULL,
                     tasks, la_head_task, &c);
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_stream[] = {
    {"tensor_scatter", tensor_scatter_run, NULL},
    {"causal_conv", causal_conv_run, NULL},
    {"linear_attention", linear_attention_run, "linear_attention"},
    {NULL, NULL, NULL},
};
