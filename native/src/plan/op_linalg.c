/* op_linalg.c — plan ops of the linalg family: matmul, linear, linear_w8, linear_w8a8 (+ pack_w8a8),
 * matmul_integer,
 * linear_w4a32 / linear_w4a8, linear_f16,
 * layernorm_linear, linear_panels, attention, gemm
 * (contract: plan_ops.h).
 *
 * Every op checks dtypes, ranks and extents against the output view the runtime set before
 * writing anything, then hands the dense work to the dispatch-table kernels (which require
 * every size > 0): zero-size extents are handled here, never passed on.
 */
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

/* ------------------------------------------------------------------ shared checks */

static nrv_status check_rank(const nrv_op_args *a, const nrv_tview *v, const char *what, int32_t lo, int32_t hi) {
    if (v->rank < lo || v->rank > hi || v->rank > NRV_PLAN_MAX_RANK) {
        if (lo == hi)
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s has rank %d, expected %d", a->type, a->name, what,
                            (int)v->rank, (int)lo);
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s has rank %d, expected %d..%d", a->type, a->name, what,
                        (int)v->rank, (int)lo, (int)(hi < NRV_PLAN_MAX_RANK ? hi : NRV_PLAN_MAX_RANK));
    }
    return NRV_OK;
}

static nrv_status check_f32(const nrv_op_args *a, const nrv_tview *v, const char *what) {
    return nrv_op_expect_dtype(a, v, what, NRV_F32);
}

/* Fails with NRV_ERR_SHAPE unless v->dims[axis] == want. */
static nrv_status check_dim(const nrv_op_args *a, const nrv_tview *v, const char *what, int axis, int64_t want) {
    if (v->dims[axis] != want)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s dim %d is %lld, expected %lld", a->type, a->name, what,
                        axis, (long long)v->dims[axis], (long long)want);
    return NRV_OK;
}

/* The fused activation code is checked before any output is written (nrv_plan_apply_act
 * would only notice an unknown code afterwards). */
static nrv_status check_act(const nrv_op_args *a, int64_t act) {
    if (act < NRV_PLAN_ACT_NONE || act > NRV_PLAN_ACT_LAST)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): unknown fused activation code %lld", a->type, a->name,
                        (long long)act);
    return NRV_OK;
}

/* y [..., N] against x [..., K]: same rank, same leading dims, last dim n. */
static nrv_status check_rows_out(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, int64_t n) {
    if (y->rank != x->rank)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): output has rank %d, input rank %d", a->type, a->name,
                        (int)y->rank, (int)x->rank);
    for (int i = 0; i + 1 < x->rank; i++)
        if (y->dims[i] != x->dims[i])
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): output dim %d is %lld, input's is %lld", a->type,
                            a->name, i, (long long)y->dims[i], (long long)x->dims[i]);
    return check_dim(a, y, "output", y->rank - 1, n);
}

/* An optional vector input of exactly n elements (rank 1). */
static nrv_status check_vec(const nrv_op_args *a, const nrv_tview *v, const char *what, int64_t n) {
    NRV_TRY(check_f32(a, v, what));
    NRV_TRY(check_rank(a, v, what, 1, 1));
    return check_dim(a, v, what, 0, n);
}

/* The fused layernorm's parameters: gamma [K], beta [K] (optional), eps finite and >= 0, K > 0. */
static nrv_status check_layernorm(const nrv_op_args *a, const nrv_tview *gamma, const nrv_tview *beta, int64_t K,
                                  float eps) {
    if (!(eps >= 0.0f) || isinf(eps))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): eps must be finite and >= 0, got %g", a->type, a->name,
                        (double)eps);
    if (K == 0)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): cannot normalise rows of width 0", a->type, a->name);
    NRV_TRY(check_vec(a, gamma, "gamma", K));
    return beta ? check_vec(a, beta, "beta", K) : NRV_OK;
}

static void fill_rows(float *y, int64_t rows, int64_t n, const float *row) {
    for (int64_t r = 0; r < rows; r++) {
        if (row) memcpy(y + r * n, row, (size_t)n * sizeof(float));
        else memset(y + r * n, 0, (size_t)n * sizeof(float));
    }
}

/* ------------------------------------------------------------------ matmul */

typedef struct matmul_job {
    const float *a, *b;
    float *y;
    int64_t m, n, k, ldb;
    int nb, trans_b;
    const int64_t *bdims, *sa, *sb;
} matmul_job;

/* Up to this many rows, a matmul's product is computed by the loops below instead of the
 * GEMM: a decode step's attention (one query row against a cache of hundreds of keys per
 * head) would otherwise pack each head's cache for a single row — twice the memory traffic
 * of reading it once. */
#define MATMUL_FEW_ROWS 2

/* y[m, n] = a[m, :] · b(n) for m < rows, b(n) = b[n·ldb, +k) (trans_b) — or, without trans_b,
 * y[m, :] = Σ_k a[m, k] · b[k·ldb, +n): each cache row read once, in order. */
static void matmul_few_rows(int trans_b, int64_t rows, int64_t n, int64_t k, const float *a, const float *b,
                            int64_t ldb, float *y) {
    for (int64_t m = 0; m < rows; m++) {
        const float *am = a + m * k;
        float *ym = y + m * n;
        if (trans_b) {
            for (int64_t j = 0; j < n; j++) {
                const float *bj = b + j * ldb;
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int64_t i = 0;
                for (; i + 8 <= k; i += 8)
                    for (int l = 0; l < 8; l++) acc[l] += am[i + l] * bj[i + l];
                float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
                for (; i < k; i++) sum += am[i] * bj[i];
                ym[j] = sum;
            }
        } else {
            memset(ym, 0, (size_t)n * sizeof(float));
            for (int64_t i = 0; i < k; i++) {
                const float av = am[i];
                const float *bi = b + i * ldb;
                for (int64_t j = 0; j < n; j++) ym[j] += av * bi[j];
            }
        }
    }
}

/* Output matrix e of a broadcast batched matmul: its operands' offsets from e's batch index. */
static void matmul_task(void *ctx, int64_t e) {
    const matmul_job *j = ctx;
    int64_t off_a = 0, off_b = 0, rest = e;
    for (int i = j->nb - 1; i >= 0; i--) {
        const int64_t idx = rest % j->bdims[i];
        rest /= j->bdims[i];
        off_a += idx * j->sa[i];
        off_b += idx * j->sb[i];
    }
    if (j->m <= MATMUL_FEW_ROWS) {
        matmul_few_rows(j->trans_b, j->m, j->n, j->k, j->a + off_a, j->b + off_b, j->ldb, j->y + e * j->m * j->n);
        return;
    }
    nrv_kernel_get(NRV_OP_GEMM).gemm(0, j->trans_b, j->m, j->n, j->k, 1.0f, j->a + off_a, j->k, j->b + off_b,
                                     j->ldb, 0.0f, j->y + e * j->m * j->n, j->n);
}

/* "matmul": numpy matmul with a fused activation.
 *   in[0] A [..., M, K] f32, in[1] B [..., K, N] f32 — or [..., N, K] with trans_b (the
 *   compiler folds a transpose of B's last two axes into the product) — both rank >= 2 (the
 *   compiler turns 1-D operands into 2-D views); out[0] Y [..., M, N] f32 whose batch dims are
 *   A's and B's broadcast numpy-style (right-aligned; each 1 or equal to Y's), rank
 *   max(rank A, rank B).
 *   iattr [act], [act, trans_b] or [act, trans_b, b_interleaved] (nrv_plan_act; flags 0/1);
 *   fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   b_interleaved: B is a [1, H, S, D] key/value cache stored sequence-major ([S, H, D], see
 *   op_kv.c): head h's matrix starts at h * D with rows H * D apart.
 *   No scratch. K == 0 gives Y = act(0).
 * One gemm over M' = batch·M rows when B has no batch (or all its batch dims are 1), else one
 * gemm per output batch entry. */
static nrv_status run_matmul(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, -1, 2));
    if (a->n_iattr < 1 || a->n_iattr > 3)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d integer attributes, expected 1..3", a->type,
                        a->name, a->n_iattr);
    const int64_t trans_b = a->n_iattr >= 2 ? a->iattr[1] : 0, interleaved = a->n_iattr >= 3 ? a->iattr[2] : 0;
    if ((trans_b != 0 && trans_b != 1) || (interleaved != 0 && interleaved != 1))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): flags trans_b %lld, b_interleaved %lld are not 0/1",
                        a->type, a->name, (long long)trans_b, (long long)interleaved);
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *A = a->in[0], *B = a->in[1];
    nrv_tview *Y = a->out[0];
    NRV_TRY(check_f32(a, A, "A"));
    NRV_TRY(check_f32(a, B, "B"));
    NRV_TRY(check_f32(a, Y, "output"));
    NRV_TRY(check_rank(a, A, "A", 2, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, B, "B", 2, NRV_PLAN_MAX_RANK));
    const int ra = A->rank, rb = B->rank, ry = ra > rb ? ra : rb;
    NRV_TRY(check_rank(a, Y, "output", ry, ry));
    const int64_t act = a->iattr[0];
    NRV_TRY(check_act(a, act));
    const int64_t M = A->dims[ra - 2], K = A->dims[ra - 1], N = B->dims[trans_b ? rb - 2 : rb - 1];
    if (interleaved && (rb != 4 || B->dims[0] != 1))
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): an interleaved B must be [1, H, S, D]", a->type, a->name);
    NRV_TRY(check_dim(a, B, "B", trans_b ? rb - 1 : rb - 2, K));
    NRV_TRY(check_dim(a, Y, "output", ry - 2, M));
    NRV_TRY(check_dim(a, Y, "output", ry - 1, N));

    /* Batch axes, right-aligned; element strides of A's and B's matrices per axis (0 where
     * the operand broadcasts), outermost first. */
    const int nb = ry - 2;
    int64_t bdims[NRV_PLAN_MAX_RANK], sa[NRV_PLAN_MAX_RANK], sb[NRV_PLAN_MAX_RANK];
    int64_t stride_a = M * K, stride_b = K * N;
    int64_t batch = 1, batch_b = 1;
    for (int i = nb - 1; i >= 0; i--) {
        const int ia = i - (ry - ra), ib = i - (ry - rb);
        const int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        const int64_t dy = Y->dims[i];
        const int64_t want = da == 1 ? db : da;
        if ((da != 1 && db != 1 && da != db) || dy != want)
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): batch axis %d: A %lld, B %lld, output %lld do not broadcast",
                            a->type, a->name, i, (long long)da, (long long)db, (long long)dy);
        bdims[i] = dy;
        sa[i] = da == 1 ? 0 : stride_a;
        sb[i] = db == 1 ? 0 : stride_b;
        stride_a *= da;
        stride_b *= db;
        batch *= dy;
        batch_b *= db;
    }
    /* an interleaved B: the head axis (B's axis 1) steps by one row of D, rows step by H * D */
    int64_t ldb = trans_b ? K : N;
    if (interleaved) {
        const int64_t heads = B->dims[1], width = B->dims[3];
        ldb = heads * width;
        sb[1 + (ry - rb)] = heads == 1 ? 0 : width; /* B's axis 1 among Y's batch axes */
    }
    if (M == 0 || N == 0 || batch == 0) return NRV_OK;
    float *y = Y->data;
    const float *pa = A->data, *pb = B->data;
    const int64_t total = batch * M * N;
    if (K == 0) {
        memset(y, 0, (size_t)total * sizeof(float));
        return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y, total);
    }
    const nrv_gemm_fn gemm = nrv_kernel_get(NRV_OP_GEMM).gemm;
    if (batch_b == 1 && !interleaved) {
        /* B is one matrix; Y's batch is A's (contiguous), so stack A's rows. */
        gemm(0, (int)trans_b, batch * M, N, K, 1.0f, pa, K, pb, ldb, 0.0f, y, N);
    } else {
        /* one gemm per output matrix; with threads, the matrices are the tasks */
        matmul_job j = {pa, pb, y, M, N, K, ldb, nb, (int)trans_b, bdims, sa, sb};
        nrv_parallel_for(batch * M * N * K >= (1 << 16) ? a->pool : NULL, batch, matmul_task, &j);
    }
    return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y, total);
}

/* ------------------------------------------------------------------ attention */

/* "attention": softmax(scale(Q·Kᵀ) [+ bias]) · V over the last axis, blocks of ATTN_ROWS query
 * rows at a time (the compiler's fuse_attention: matmul → Mul/Div by a constant → Add of a
 * mask or position bias → Softmax → torch's NaN guard → matmul, the middle steps optional).
 * Per head, K and Vᵀ are packed once as weight panels (kernels.h) into the piece's scratch
 * slot, so both products of every block run the panels GEMM (linear_panels) without the
 * per-call packing of the gemm; the block's scores (ATTN_ROWS x T floats) stay in the slot,
 * in L2, where the unfused ops wrote and re-read a [..., M, T] tensor through memory (54 MB a
 * layer for a Whisper-tiny encoder's 6 heads at 1500 frames). Each step is the unfused op's
 * arithmetic on the stored scores, in the same order (scale, then bias, then the softmax
 * kernel in place, then the guard), and the products sum in the gemm's depth blocks: the
 * outputs are bit-identical to the unfused ops'.
 *   in[0] Q [..., M, D]; in[1] K [..., T, D] (trans_k) or [..., D, T]; in[2] V [..., T, Dv];
 *   in[3] (optional) bias, rank <= Q's, each dim 1 or the scores' [..., M, T] dim (numpy
 *   broadcasting, aligned right); out[0] Y [..., M, Dv]; all f32, Q, K, V and Y of one rank
 *   >= 2 with the same batch dims.
 *   iattr [trans_k, divide, guard]: scores = (Q·Kᵀ)·c, or (Q·Kᵀ)/c when divide; when guard, a
 *   NaN probability (a row whose every key is masked to -inf) becomes `fill`, as torch's
 *   Where(IsNaN(p), fill, p) does. fattr [c, fill].
 *   scratch: ATTN_SLOTS slots of attention_slot_floats(T, D, Dv) floats (at the dims'
 *   bounds; the compiler mirrors it), each 64-byte aligned.
 * Threads: (batch entry, row block) tasks in up to ATTN_SLOTS pieces, one slot each. */
#define ATTN_ROWS 64
#define ATTN_SLOTS 8

/* Floats of one slot: K's panels, Vᵀ's panels, the scores of a block; each part rounded up
 * to 16 floats (64 bytes). -1 on overflow. */
static int64_t attention_slot_floats(int64_t t, int64_t d, int64_t dv) {
    int64_t kp, vp, sc, total;
    if (t < 0 || d < 0 || dv < 0 || t > INT32_MAX || d > INT32_MAX || dv > INT32_MAX ||
        __builtin_mul_overflow(t + NRV_PANEL_ALIGN, d, &kp) || __builtin_mul_overflow(dv + NRV_PANEL_ALIGN, t, &vp) ||
        __builtin_mul_overflow((int64_t)ATTN_ROWS, t, &sc) || __builtin_add_overflow(kp, vp, &total) ||
        __builtin_add_overflow(total, sc + 48, &total))
        return -1;
    return (nrv_panels_floats(t, d) + 15) / 16 * 16 + (nrv_panels_floats(dv, t) + 15) / 16 * 16 + (sc + 15) / 16 * 16;
}

typedef struct attention_job {
    const float *q, *k, *v, *bias;
    float *y, *scratch;
    int64_t m, t, d, dv, blocks, tasks, pieces, slot;
    int trans_k, divide, guard, batch_rank;
    float c, fill;
    /* the bias's element strides along the scores' batch axes, rows and columns (0 where it
     * broadcasts), and the batch dims to split an entry's index by */
    int64_t bias_batch[NRV_PLAN_MAX_RANK], bias_row, bias_col, batch_dims[NRV_PLAN_MAX_RANK];
} attention_job;

/* The bias element of batch entry e, row 0, column 0. */
static const float *attention_bias_base(const attention_job *j, int64_t e) {
    int64_t off = 0;
    for (int i = j->batch_rank - 1; i >= 0; i--) {
        off += e % j->batch_dims[i] * j->bias_batch[i];
        e /= j->batch_dims[i];
    }
    return j->bias + off;
}

static void attention_task(void *ctx, int64_t piece) {
    const attention_job *j = ctx;
    float *kp = j->scratch + piece * j->slot;
    float *vp = kp + (nrv_panels_floats(j->t, j->d) + 15) / 16 * 16;
    float *s = vp + (nrv_panels_floats(j->dv, j->t) + 15) / 16 * 16;
    const nrv_linear_panels_fn product = nrv_kernel_get_rows_panels(NRV_OP_GEMM).linear_panels;
    const nrv_softmax_fn softmax = nrv_kernel_get(NRV_OP_SOFTMAX).softmax;
    int64_t packed = -1; /* the batch entry whose K and V are in the slot */
    for (int64_t task = piece * j->tasks / j->pieces; task < (piece + 1) * j->tasks / j->pieces; task++) {
        const int64_t e = task / j->blocks, m0 = task % j->blocks * ATTN_ROWS;
        const int64_t mb = j->m - m0 < ATTN_ROWS ? j->m - m0 : ATTN_ROWS;
        if (e != packed) {
            const float *k = j->k + e * j->t * j->d, *v = j->v + e * j->t * j->dv;
            if (j->trans_k) nrv_panels_pack(k, j->t, j->d, kp); /* K [T, D] is W [T, D] */
            else nrv_panels_pack_t(k, j->t, j->d, j->t, kp);    /* K [D, T] is Wᵀ */
            nrv_panels_pack_t(v, j->dv, j->t, j->dv, vp);       /* V [T, Dv] is Wᵀ of W [Dv, T] */
            packed = e;
        }
        product(j->q + (e * j->m + m0) * j->d, mb, j->d, j->d, NULL, NULL, 0.0f, kp, j->t, NULL, s, j->t);
        const int64_t n = mb * j->t;
        if (j->divide)
            for (int64_t i = 0; i < n; i++) s[i] /= j->c;
        else if (j->c != 1.0f)
            for (int64_t i = 0; i < n; i++) s[i] *= j->c;
        if (j->bias) {
            const float *b = attention_bias_base(j, e) + m0 * j->bias_row;
            for (int64_t r = 0; r < mb; r++, b += j->bias_row) {
                float *row = s + r * j->t;
                if (j->bias_col)
                    for (int64_t t = 0; t < j->t; t++) row[t] += b[t];
                else
                    for (int64_t t = 0; t < j->t; t++) row[t] += b[0];
            }
        }
        softmax(s, mb, j->t, s);
        if (j->guard)
            for (int64_t i = 0; i < n; i++)
                if (isnan(s[i])) s[i] = j->fill;
        product(s, mb, j->t, j->t, NULL, NULL, 0.0f, vp, j->dv, NULL, j->y + (e * j->m + m0) * j->dv, j->dv);
    }
}

static nrv_status run_attention(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 4, 1, 3, 2));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    const nrv_tview *Q = a->in[0], *K = a->in[1], *V = a->in[2], *B = a->n_in > 3 ? a->in[3] : NULL;
    nrv_tview *Y = a->out[0];
    NRV_TRY(check_f32(a, Q, "Q"));
    NRV_TRY(check_f32(a, K, "K"));
    NRV_TRY(check_f32(a, V, "V"));
    NRV_TRY(check_f32(a, Y, "output"));
    NRV_TRY(check_rank(a, Q, "Q", 2, NRV_PLAN_MAX_RANK));
    const int r = Q->rank;
    NRV_TRY(check_rank(a, K, "K", r, r));
    NRV_TRY(check_rank(a, V, "V", r, r));
    NRV_TRY(check_rank(a, Y, "output", r, r));
    const int64_t trans_k = a->iattr[0], divide = a->iattr[1], guard = a->iattr[2];
    const float c = a->fattr[0];
    if ((trans_k != 0 && trans_k != 1) || (divide != 0 && divide != 1) || (guard != 0 && guard != 1) || !isfinite(c) ||
        (divide && c == 0.0f))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): trans_k %lld, divide %lld, guard %lld, scale %g out of range",
                        a->type, a->name, (long long)trans_k, (long long)divide, (long long)guard, (double)c);
    for (int i = 0; i + 2 < r; i++)
        if (K->dims[i] != Q->dims[i] || V->dims[i] != Q->dims[i] || Y->dims[i] != Q->dims[i])
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): batch axis %d differs between Q, K, V and the output",
                            a->type, a->name, i);
    const int64_t M = Q->dims[r - 2], D = Q->dims[r - 1], T = K->dims[trans_k ? r - 2 : r - 1], Dv = V->dims[r - 1];
    NRV_TRY(check_dim(a, K, "K", trans_k ? r - 1 : r - 2, D));
    NRV_TRY(check_dim(a, V, "V", r - 2, T));
    NRV_TRY(check_dim(a, Y, "output", r - 2, M));
    NRV_TRY(check_dim(a, Y, "output", r - 1, Dv));
    attention_job j = {Q->data, K->data, V->data, NULL, Y->data, a->scratch, M, T, D, Dv, (M + ATTN_ROWS - 1) / ATTN_ROWS,
                       0, 1, 0, (int)trans_k, (int)divide, (int)guard, r - 2, c, a->fattr[1], {0}, 0, 0, {0}};
    if (B) { /* strides of the bias along the scores' axes, 0 where it broadcasts */
        NRV_TRY(check_f32(a, B, "bias"));
        NRV_TRY(check_rank(a, B, "bias", 0, r));
        int64_t stride = 1;
        for (int i = r - 1, bi = B->rank - 1; i >= 0; i--, bi--) {
            const int64_t want = i == r - 1 ? T : i == r - 2 ? M : Q->dims[i], got = bi >= 0 ? B->dims[bi] : 1;
            if (got != 1 && got != want)
                return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): bias dim %d is %lld, expected 1 or %lld (the scores "
                                "are [..., M %lld, T %lld])", a->type, a->name, bi, (long long)got, (long long)want,
                                (long long)M, (long long)T);
            const int64_t step = got == 1 ? 0 : stride;
            if (i == r - 1) j.bias_col = step;
            else if (i == r - 2) j.bias_row = step;
            else j.bias_batch[i] = step;
            stride *= got;
        }
        j.bias = B->data;
    }
    for (int i = 0; i + 2 < r; i++) j.batch_dims[i] = Q->dims[i];
    const int64_t batch = nrv_dims_product(Q->dims, 0, r - 2);
    if (batch == 0 || M == 0 || Dv == 0) return NRV_OK;
    const int64_t slot = attention_slot_floats(T, D, Dv);
    uint64_t need;
    if (slot < 0 || nrv_mul_overflow((uint64_t)ATTN_SLOTS * sizeof(float), (uint64_t)slot, &need) || !a->scratch ||
        a->scratch_bytes < need || (uintptr_t)a->scratch % 64 != 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): scratch of %zu bytes, needs %d slots of %lld floats "
                        "(T %lld, D %lld, Dv %lld), 64-byte aligned", a->type, a->name, a->scratch_bytes, ATTN_SLOTS,
                        (long long)slot, (long long)T, (long long)D, (long long)Dv);
    if (T == 0) { /* softmax over no keys: an empty sum, 0 */
        memset(Y->data, 0, (size_t)(batch * M * Dv) * sizeof(float));
        return NRV_OK;
    }
    j.slot = slot;
    j.tasks = batch * j.blocks;
    j.pieces = nrv_plan_pieces(a->pool, batch * M * T * (D + Dv), 1 << 16, j.tasks < ATTN_SLOTS ? j.tasks : ATTN_SLOTS);
    nrv_parallel_for(a->pool, j.pieces, attention_task, &j);
    return NRV_OK;
}

/* ------------------------------------------------------------------ linear */

/* With the session's threads, a linear layer is cut along its outputs: each task computes
 * all rows for a block of outputs into a stack tile and copies it into y's columns. Every
 * output element is still the same dot product computed by the same kernel path (the path
 * depends on the row count, which is not cut), so results do not depend on the thread
 * count. Small layers (where a task would cost more than it saves) stay on one thread. */
#define LINEAR_TILE_FLOATS 8192       /* 32 KiB of output per task */
#define LINEAR_PARALLEL_MIN_MACS (1 << 17)

typedef struct linear_job {
    const float *x, *w, *b;
    float *y;
    int64_t rows, k, n, pieces;
} linear_job;

static void linear_task(void *ctx, int64_t t) {
    const linear_job *j = ctx;
    float tile[LINEAR_TILE_FLOATS];
    const int64_t o0 = t * j->n / j->pieces, o1 = (t + 1) * j->n / j->pieces, nb = o1 - o0;
    nrv_kernel_get(NRV_OP_LINEAR).linear(j->x, j->rows, j->k, j->w + o0 * j->k, j->b ? j->b + o0 : NULL, nb, tile);
    for (int64_t r = 0; r < j->rows; r++) memcpy(j->y + r * j->n + o0, tile + r * nb, (size_t)nb * sizeof(float));
}

/* Pieces of n outputs for `threads` threads: each at least NRV_LINEAR_SPLIT_MIN_OUT wide
 * (kernels.h: the kernel's path, hence its rounding, then does not depend on the piece) and
 * with rows x piece fitting tile_floats; 0 if no such split exists. */
int64_t nrv_plan_output_pieces(int threads, int64_t rows, int64_t n, int64_t tile_floats) {
    int64_t pieces = 2 * (int64_t)threads; /* two per thread: some balance */
    if (pieces > n / NRV_LINEAR_SPLIT_MIN_OUT) pieces = n / NRV_LINEAR_SPLIT_MIN_OUT;
    while (pieces >= 2 && rows * ((n + pieces - 1) / pieces) > tile_floats) {
        if ((pieces + 1) * NRV_LINEAR_SPLIT_MIN_OUT > n) return 0;
        pieces++;
    }
    return pieces >= 2 ? pieces : 0;
}

/* Two pieces per thread, at most `units` (plan_ops.h). */
int64_t nrv_plan_pieces(const nrv_threadpool *pool, int64_t work, int64_t min_work, int64_t units) {
    const int threads = nrv_threadpool_size(pool);
    if (threads <= 1 || work < min_work || units <= 1) return 1;
    return 2 * (int64_t)threads < units ? 2 * (int64_t)threads : units;
}

/* (plan_ops.h) Two pieces per thread over a few whole units can leave the threads unequal
 * shares: 6 panels (a conv's 384 channels) in 4 pieces were 1, 2, 1, 2, and two threads took
 * 4 rounds for 3 rounds' work; 3 panels on 2 threads make one thread do 2 (1.5x at best). So
 * where the first axis has at most four units per thread and they do not fill two pieces
 * per thread evenly, each unit is a piece, cut along the second axis into the fewest parts
 * that make the pieces a multiple of the threads (3 panels x 2 halves of the positions). */
void nrv_plan_grid(const nrv_threadpool *pool, int64_t work, int64_t min_work, int64_t units_a, int64_t parts_b,
                   int64_t *pieces_a, int64_t *pieces_b) {
    const int64_t threads = nrv_threadpool_size(pool);
    *pieces_a = nrv_plan_pieces(pool, work, min_work, units_a);
    *pieces_b = 1;
    if (threads <= 1 || work < min_work || units_a > 4 * threads || units_a % (2 * threads) == 0) return;
    for (int64_t s = 1; s <= parts_b && s <= threads; s++)
        if (units_a * s % threads == 0) {
            *pieces_a = units_a, *pieces_b = s;
            return;
        }
}

/* Pieces of a [rows, k] x [k, n] product's outputs for the pool's threads (linear and
 * linear_w8), 0 when it stays on the calling thread. */
static int64_t linear_output_pieces(nrv_threadpool *pool, int64_t rows, int64_t k, int64_t n) {
    const int threads = nrv_threadpool_size(pool);
    return threads > 1 && rows * k * n >= LINEAR_PARALLEL_MIN_MACS
               ? nrv_plan_output_pieces(threads, rows, n, LINEAR_TILE_FLOATS)
               : 0;
}

void nrv_plan_linear(nrv_threadpool *pool, const float *x, int64_t rows, int64_t k, const float *w, const float *b,
                     int64_t n, float *y) {
    const int64_t pieces = linear_output_pieces(pool, rows, k, n);
    if (pieces) {
        linear_job j = {x, w, b, y, rows, k, n, pieces};
        nrv_parallel_for(pool, pieces, linear_task, &j);
        return;
    }
    nrv_kernel_get(NRV_OP_LINEAR).linear(x, rows, k, w, b, n, y);
}

/* "linear": y = act(x · wᵀ + bias).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] w [N, K] f32; in[2] bias [N] f32, optional;
 *   out[0] y [..., N] f32, same rank and leading dims as x.
 *   iattr [act] (nrv_plan_act); fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   No scratch. rows = product of x's leading dims; K == 0 gives y = act(bias or 0). */
/* The operands of "linear" and "linear_f16" (x [..., K] f32, w [N, K] of w_dtype, optional
 * bias [N], y [..., N] f32, iattr [act]), checked once for both. */
typedef struct linear_io {
    const nrv_tview *x, *w;
    nrv_tview *y;
    const float *b;
    int64_t act, K, N, rows;
} linear_io;

static nrv_status linear_operands(const nrv_op_args *a, nrv_dtype w_dtype, linear_io *io) {
    NRV_TRY(nrv_op_expect(a, 2, 3, 1, 1, 2));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *x = a->in[0], *w = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(nrv_op_expect_dtype(a, w, "w", w_dtype));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, w, "w", 2, 2));
    NRV_TRY(check_act(a, a->iattr[0]));
    const int64_t K = x->dims[x->rank - 1], N = w->dims[0];
    NRV_TRY(check_dim(a, w, "w", 1, K));
    if (bias) NRV_TRY(check_vec(a, bias, "bias", N));
    NRV_TRY(check_rows_out(a, x, y, N));
    *io = (linear_io){x, w, y, bias ? bias->data : NULL, a->iattr[0], K, N,
                      nrv_dims_product(x->dims, 0, x->rank - 1)};
    return NRV_OK;
}

static nrv_status run_linear(const nrv_op_args *a) {
    linear_io io;
    NRV_TRY(linear_operands(a, NRV_F32, &io));
    if (io.rows == 0 || io.N == 0) return NRV_OK;
    if (io.K == 0) fill_rows(io.y->data, io.rows, io.N, io.b);
    else nrv_plan_linear(a->pool, io.x->data, io.rows, io.K, io.w->data, io.b, io.N, io.y->data);
    return nrv_plan_apply_act(a, io.act, a->fattr[0], a->fattr[1], io.y->data, io.rows * io.N);
}

/* ------------------------------------------------------------------ linear_w8 */

/* Threads as for linear: the outputs are cut into pieces from the shape alone
 * (nrv_plan_output_pieces), each task writing a stack tile; the kernel computes every
 * output the same way whatever piece it is in (kernels.h), so the thread count never
 * changes a value. */
typedef struct linear_w8_job {
    const float *x, *s, *z, *b;
    const int8_t *q;
    float *y;
    int64_t rows, k, n, st, pieces;
} linear_w8_job;

static void linear_w8_task(void *ctx, int64_t t) {
    const linear_w8_job *j = ctx;
    float tile[LINEAR_TILE_FLOATS];
    const int64_t o0 = t * j->n / j->pieces, o1 = (t + 1) * j->n / j->pieces, nb = o1 - o0;
    nrv_kernel_get(NRV_OP_LINEAR_W8)
        .linear_w8(j->x, j->rows, j->k, j->q + o0 * j->k, j->s + o0 * j->st, j->z ? j->z + o0 * j->st : NULL, j->st,
                   j->b ? j->b + o0 : NULL, nb, tile);
    for (int64_t r = 0; r < j->rows; r++) memcpy(j->y + r * j->n + o0, tile + r * nb, (size_t)nb * sizeof(float));
}

void nrv_plan_linear_w8(nrv_threadpool *pool, const float *x, int64_t rows, int64_t k, const int8_t *q, const float *s,
                        const float *z, int64_t st, const float *b, int64_t n, float *y) {
    const int64_t pieces = linear_output_pieces(pool, rows, k, n);
    if (pieces) {
        linear_w8_job j = {x, s, z, b, q, y, rows, k, n, st, pieces};
        nrv_parallel_for(pool, pieces, linear_w8_task, &j);
        return;
    }
    nrv_kernel_get(NRV_OP_LINEAR_W8).linear_w8(x, rows, k, q, s, z, st, b, n, y);
}

/* "linear_w8": y = act(x · Wᵀ + bias) with an int8 weight dequantised in registers,
 * W[n, k] = s[n]·q[n, k] + z[n] (w8a32; the compiler emits it for few rows, where the
 * layer is a pass over the weights and q is a quarter of fp32 W's bytes).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] q [N, K] i8 (linear's [out, in] layout);
 *   in[2] s f32 [N] (per output) or [1] (per tensor); in[3] z f32, same shape as s,
 *   optional (absent: 0); in[4] bias [N] f32, optional;
 *   out[0] y [..., N] f32, same rank and leading dims as x.
 *   iattr [act] (nrv_plan_act); fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   No scratch. rows = product of x's leading dims; K == 0 gives y = act(bias or 0).
 * Computed as s[n]·Σ_k x·q + z[n]·Σ_k x + bias[n] (kernels.h nrv_linear_w8_fn). */
static nrv_status run_linear_w8(const nrv_op_args *a) {
    nrv_w8_operands o;
    NRV_TRY(nrv_op_w8_operands(a, 1, &o));
    const nrv_tview *x = o.x, *q = o.w, *sv = o.s, *zv = o.z, *bias = o.bias;
    nrv_tview *y = o.y;
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(nrv_op_expect_dtype(a, q, "q", NRV_I8));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, q, "q", 2, 2));
    const int64_t act = a->iattr[0];
    NRV_TRY(check_act(a, act));
    const int64_t K = x->dims[x->rank - 1], N = q->dims[0];
    NRV_TRY(check_dim(a, q, "q", 1, K));
    NRV_TRY(nrv_op_check_w8_params(a, sv, zv, bias, N));
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (rows == 0 || N == 0) return NRV_OK;
    const float *b = bias ? bias->data : NULL;
    if (K == 0) fill_rows(y->data, rows, N, b);
    else nrv_plan_linear_w8(a->pool, x->data, rows, K, q->data, sv->data, zv ? zv->data : NULL,
                            sv->dims[0] == 1 ? 0 : 1, b, N, y->data);
    return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y->data, rows * N);
}

/* ------------------------------------------------------------------ linear_w8a8 */

/* Threads: the rows are cut into chunks of W8A8_TASK_ROWS (from the shape alone); every row
 * is computed independently and exactly the same way whatever chunk it is in (the int32
 * products are exact, the epilogue is per element), so the thread count never changes a
 * value, nor does the variant (kernels.h). */
#define W8A8_TASK_ROWS 32

typedef struct linear_w8a8_job {
    const float *x, *s, *z, *b;
    const int8_t *packed;
    float *y;
    int64_t rows, k, n, st;
} linear_w8a8_job;

static void linear_w8a8_task(void *ctx, int64_t t) {
    const linear_w8a8_job *j = ctx;
    const int64_t r0 = t * W8A8_TASK_ROWS, nr = j->rows - r0 < W8A8_TASK_ROWS ? j->rows - r0 : W8A8_TASK_ROWS;
    nrv_kernel_get(NRV_OP_LINEAR_W8A8)
        .linear_w8a8(j->x + r0 * j->k, nr, j->k, j->packed, j->n, j->s, j->z, j->st, j->b, j->y + r0 * j->n);
}

/* N and K of a packed int8 weight from iattr, checked: 0 <= K <= NRV_W8A8_MAX_K (larger K:
 * NRV_ERR_UNSUPPORTED), 0 <= N < 2^40 (so the byte count cannot overflow). */
static nrv_status w8a8_dims(const nrv_op_args *a, int64_t n, int64_t k) {
    if (n < 0 || n >= ((int64_t)1 << 40) || k < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): bad weight dims N %lld, K %lld", a->type, a->name,
                        (long long)n, (long long)k);
    if (k > NRV_W8A8_MAX_K)
        return nrv_fail(NRV_ERR_UNSUPPORTED, "%s (node '%s'): K %lld is above the w8a8 kernel's limit %d", a->type,
                        a->name, (long long)k, NRV_W8A8_MAX_K);
    return NRV_OK;
}

/* "linear_w8a8": y = act(x · Wᵀ + bias) with an int8 weight W[n, k] = s[n]·q[n, k] + z[n] and
 * each row of x quantised to int8 on the fly (dynamic, per row, symmetric: sx = max|x|/127),
 * the product done in int32 (kernels.h nrv_linear_w8a8_fn; math, rounding and epilogue
 * order in kernels/linear_w8a8.c). Opt-in at compile time (NERVE_W8A8=1): it changes the
 * numerics (activation quantisation error, ~max|x|/254 per element).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] packed i8 [P] rank 1, P =
 *   nrv_linear_w8a8_packed_bytes(N, K) (the weight as op "pack_w8a8" writes it: blocks
 *   [N/16][K/4][16][4] then int32 colsum[N], N and K padded to 16 and 4);
 *   in[2] s f32 [N] (per output) or [1] (per tensor); in[3] z f32, same shape as s, optional
 *   (absent: 0); in[4] bias [N] f32, optional; out[0] y [..., N] f32, same rank and leading
 *   dims as x.
 *   iattr [act, N, K] (nrv_plan_act; K <= NRV_W8A8_MAX_K, else NRV_ERR_UNSUPPORTED);
 *   fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   No scratch (each call quantises blocks of rows into a stack buffer).
 *   rows = product of x's leading dims; K == 0 gives y = act(bias or 0). */
static nrv_status run_linear_w8a8(const nrv_op_args *a) {
    nrv_w8_operands o;
    NRV_TRY(nrv_op_w8_operands(a, 3, &o));
    const nrv_tview *x = o.x, *pk = o.w, *sv = o.s, *zv = o.z, *bias = o.bias;
    nrv_tview *y = o.y;
    const int64_t act = a->iattr[0], N = a->iattr[1], K = a->iattr[2];
    NRV_TRY(check_act(a, act));
    NRV_TRY(w8a8_dims(a, N, K));
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(nrv_op_expect_dtype(a, pk, "packed weight", NRV_I8));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, pk, "packed weight", 1, 1));
    NRV_TRY(check_dim(a, x, "x", x->rank - 1, K));
    NRV_TRY(check_dim(a, pk, "packed weight", 0, nrv_linear_w8a8_packed_bytes(N, K)));
    NRV_TRY(nrv_op_check_w8_params(a, sv, zv, bias, N));
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (rows == 0 || N == 0) return NRV_OK;
    const float *b = bias ? bias->data : NULL;
    const int64_t st = sv->dims[0] == 1 ? 0 : 1;
    if (K == 0) {
        fill_rows(y->data, rows, N, b);
    } else {
        linear_w8a8_job j = {x->data, sv->data, zv ? zv->data : NULL, b, pk->data, y->data, rows, K, N, st};
        const int64_t tasks = (rows + W8A8_TASK_ROWS - 1) / W8A8_TASK_ROWS;
        nrv_parallel_for(rows * K * N >= LINEAR_PARALLEL_MIN_MACS ? a->pool : NULL, tasks, linear_w8a8_task, &j);
    }
    return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y->data, rows * N);
}

/* "pack_w8a8": the packed weight of linear_w8a8 (run once, at compile time, by the compiler's
 * constant folding; layout in kernels.h above nrv_linear_w8a8_fn).
 *   in[0] q [N, K] i8; out[0] packed [P] i8, P = nrv_linear_w8a8_packed_bytes(N, K).
 *   No attributes, no scratch. K <= NRV_W8A8_MAX_K, else NRV_ERR_UNSUPPORTED. */
static nrv_status run_pack_w8a8(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 1, 1, 1, 0, 0));
    NRV_TRY(nrv_op_require_input(a, 0));
    const nrv_tview *q = a->in[0];
    nrv_tview *out = a->out[0];
    NRV_TRY(nrv_op_expect_dtype(a, q, "q", NRV_I8));
    NRV_TRY(nrv_op_expect_dtype(a, out, "output", NRV_I8));
    NRV_TRY(check_rank(a, q, "q", 2, 2));
    NRV_TRY(check_rank(a, out, "output", 1, 1));
    const int64_t N = q->dims[0], K = q->dims[1];
    NRV_TRY(w8a8_dims(a, N, K));
    NRV_TRY(check_dim(a, out, "output", 0, nrv_linear_w8a8_packed_bytes(N, K)));
    if (out->numel == 0) return NRV_OK;
    nrv_linear_w8a8_pack(q->data, N, K, out->data);
    return NRV_OK;
}

/* ------------------------------------------------------------------ matmul_integer */

/* Threads: rows in chunks of MI_TASK_ROWS, or, for fewer rows than two chunks, the outputs in
 * runs of MI_TASK_OUT (multiples of 16, as the kernel's n0 must be). Integer sums are exact,
 * so no split changes a bit. */
#define MI_TASK_ROWS 32
#define MI_TASK_OUT 256

typedef struct matmul_integer_job {
    const uint8_t *a;
    const void *za; /* a's dtype, za_n values (0: none) */
    const int32_t *zq;
    const int8_t *packed;
    int32_t *y;
    int64_t rows, k, n, za_n, by_out;
    uint8_t flip;
} matmul_integer_job;

/* The kernel's int32 zero points for rows [r0, r0 + nr) (nr <= 2·MI_TASK_ROWS) into za: an s8
 * a's + 128, as its bytes enter the kernel flipped. Returns their stride (0: one for all). */
static int64_t mi_zero_points(const matmul_integer_job *j, int64_t r0, int64_t nr, int32_t *za) {
    const int per_row = j->za_n > 1;
    for (int64_t i = 0; i < (per_row ? nr : 1); i++) {
        const int64_t at = per_row ? r0 + i : 0;
        const int32_t z = !j->za_n ? 0 : j->flip ? ((const int8_t *)j->za)[at] : ((const uint8_t *)j->za)[at];
        za[i] = z + (j->flip ? 128 : 0);
    }
    return per_row;
}

static void matmul_integer_task(void *ctx, int64_t t) {
    const matmul_integer_job *j = ctx;
    const nrv_matmul_integer_fn kernel = nrv_kernel_get(NRV_OP_MATMUL_INTEGER).matmul_integer;
    int32_t za[2 * MI_TASK_ROWS];
    if (j->by_out) { /* rows < 2·MI_TASK_ROWS */
        const int64_t n0 = t * MI_TASK_OUT, n1 = j->n - n0 < MI_TASK_OUT ? j->n : n0 + MI_TASK_OUT;
        const int64_t zs = mi_zero_points(j, 0, j->rows, za);
        kernel(j->a, j->flip, j->rows, j->k, za, zs, j->packed, j->n, n0, n1, j->zq, j->y);
        return;
    }
    const int64_t r0 = t * MI_TASK_ROWS, nr = j->rows - r0 < MI_TASK_ROWS ? j->rows - r0 : MI_TASK_ROWS;
    const int64_t zs = mi_zero_points(j, r0, nr, za);
    kernel(j->a + r0 * j->k, j->flip, nr, j->k, za, zs, j->packed, j->n, 0, j->n, j->zq, j->y + r0 * j->n);
}

/* "matmul_integer": ONNX MatMulInteger with a constant weight, exact in int32 (kernels.h
 * nrv_matmul_integer_fn): y[r, n] = Σ_k (a[r, k] − za[r])·(q[n, k] − zq[n]).
 *   in[0] a [..., K] u8 or i8 (rank >= 1); in[1] packed i8 [P], P =
 *   nrv_linear_w8a8_packed_bytes(N, K) (q [N, K] int8 as op "pack_w8a8" writes it; a u8
 *   weight is imported as q − 128 with its zero point − 128); in[2] za, a's dtype, one value
 *   or one per row (numel 1 or rows), optional (absent: 0); in[3] zq i32 [N], optional
 *   (absent: 0); out[0] y [..., N] i32, same rank and leading dims as a.
 *   iattr [N, K] (K <= NRV_W8A8_MAX_K). No scratch. K == 0 gives y = 0. */
static nrv_status run_matmul_integer(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 4, 1, 2, 0));
    const int64_t N = a->iattr[0], K = a->iattr[1];
    NRV_TRY(w8a8_dims(a, N, K));
    nrv_int_operands o;
    NRV_TRY(nrv_op_int_operands(a, 4, 2, N, nrv_linear_w8a8_packed_bytes(N, K), &o));
    const nrv_tview *x = o.x, *pk = o.w, *zav = o.xz, *zqv = o.wz;
    nrv_tview *y = o.y;
    NRV_TRY(check_rank(a, x, "a", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_dim(a, x, "a", x->rank - 1, K));
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (zav && zav->numel != 1 && zav->numel != rows)
        return nrv_op_fail(a, NRV_ERR_SHAPE, "a_zero_point has %lld values, expected 1 or one per row (%lld)",
                           (long long)zav->numel, (long long)rows);
    if (rows == 0 || N == 0) return NRV_OK;
    if (K == 0) {
        memset(y->data, 0, (size_t)(rows * N) * sizeof(int32_t));
        return NRV_OK;
    }
    const int by_out = rows < 2 * MI_TASK_ROWS;
    matmul_integer_job j = {x->data, zav ? zav->data : NULL, zqv ? zqv->data : NULL, pk->data, y->data, rows, K,
                            N, zav ? zav->numel : 0, by_out, x->dtype == NRV_I8 ? 0x80 : 0};
    const int64_t tasks = by_out ? (N + MI_TASK_OUT - 1) / MI_TASK_OUT : (rows + MI_TASK_ROWS - 1) / MI_TASK_ROWS;
    nrv_parallel_for(rows * K * N >= LINEAR_PARALLEL_MIN_MACS ? a->pool : NULL, tasks, matmul_integer_task, &j);
    return NRV_OK;
}

/* ------------------------------------------------------------------ linear_w4a32 / linear_w4a8 */

/* Rows at or below this go straight through the W4 kernel (a pass over the packed weight per
 * block of rows); w4a32 on more rows dequantises tiles of W4_TILE_OUT weight rows into the
 * op's scratch and runs the fp32 gemm on them, which re-reads each tile from cache for every
 * row instead of re-unpacking it. */
#define W4_DIRECT_MAX_ROWS 16
#define W4_TILE_OUT 64
#define W4_TASK_ROWS 32

typedef struct linear_w4_job {
    const float *x, *b;
    const nrv_w4_weight *w;
    const float *tile; /* tiled w4a32: the dequantised rows of outputs [o0, o0 + nt) */
    float *y;
    int64_t rows, n, pieces, o0, nt;
    nrv_op kernel;
} linear_w4_job;

/* Task t of rows x output pieces: the kernel on its rows and outputs, writing y in place
 * (each output's value depends only on its row and weight row: kernels.h). */
static void linear_w4_task(void *ctx, int64_t t) {
    const linear_w4_job *j = ctx;
    const int64_t rt = t / j->pieces, p = t % j->pieces;
    const int64_t r0 = rt * W4_TASK_ROWS, nr = j->rows - r0 < W4_TASK_ROWS ? j->rows - r0 : W4_TASK_ROWS;
    const int64_t o0 = p * j->n / j->pieces, o1 = (p + 1) * j->n / j->pieces;
    const nrv_w4_weight part = nrv_w4_rows(j->w, o0, o1 - o0);
    nrv_kernel_get(j->kernel).linear_w4(j->x + r0 * j->w->in, nr, &part, j->b ? j->b + o0 : NULL,
                                        j->y + r0 * j->n + o0, j->n);
}

/* Task t of the tiled w4a32 path: rows [32t, 32t + 32) against the dequantised tile. */
static void linear_w4_tile_task(void *ctx, int64_t t) {
    const linear_w4_job *j = ctx;
    const int64_t r0 = t * W4_TASK_ROWS, nr = j->rows - r0 < W4_TASK_ROWS ? j->rows - r0 : W4_TASK_ROWS;
    const int64_t K = j->w->in;
    float *y = j->y + r0 * j->n + j->o0;
    nrv_kernel_get(NRV_OP_GEMM).gemm(0, 1, nr, j->nt, K, 1.0f, j->x + r0 * K, K, j->tile, K, 0.0f, y, j->n);
    if (j->b)
        for (int64_t r = 0; r < nr; r++)
            for (int64_t o = 0; o < j->nt; o++) y[r * j->n + o] += j->b[j->o0 + o];
}

/* "linear_w4a32" / "linear_w4a8": y = act(x · Wᵀ + bias) with a W4 weight (nerve.h "W4
 * weights": group-wise int4, fp16 scales, optional zero points; kernels.h nrv_linear_w4_fn),
 * activations fp32 (w4a32) or quantised per row to int8 (w4a8).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] the values: i8 [N, K] (layout 0, unpacked) or
 *   u8 [N, K/2] (layout 1, packed); in[2] scales f16 [N, K/group]; in[3] zero points i8
 *   [N, K/group], optional; in[4] bias [N] f32, optional; out[0] y [..., N] f32.
 *   iattr [act, N, K, group, layout]; fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   Scratch (w4a32 only, optional): W4_TILE_OUT·K floats; with it, calls on more than
 *   W4_DIRECT_MAX_ROWS rows take the tiled path (exact fp32 weights, the gemm's rounding).
 * The weight's contents were checked by the compiler (nrv_w4_check semantics) and are
 * covered by the plan's per-weight SHA-256; here only dtypes and shapes are. */
static nrv_status run_linear_w4(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 3, 5, 1, 5, 2));
    for (int i = 0; i < 3; i++) NRV_TRY(nrv_op_require_input(a, i));
    const nrv_tview *x = a->in[0], *qv = a->in[1], *sv = a->in[2];
    const nrv_tview *zv = a->n_in > 3 ? a->in[3] : NULL, *bias = a->n_in > 4 ? a->in[4] : NULL;
    nrv_tview *y = a->out[0];
    const int a8 = strcmp(a->type, "linear_w4a8") == 0;
    const int64_t act = a->iattr[0], N = a->iattr[1], K = a->iattr[2], G = a->iattr[3], layout = a->iattr[4];
    NRV_TRY(check_act(a, act));
    if (G != 32 && G != 64 && G != 128)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): group %lld is not 32, 64 or 128", a->type, a->name,
                        (long long)G);
    if (N < 0 || K < 0 || K % G || K > NRV_W4_MAX_IN || (layout != NRV_W4_UNPACKED && layout != NRV_W4_PACKED))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): bad weight N %lld, K %lld (group %lld, max %d), layout %lld",
                        a->type, a->name, (long long)N, (long long)K, (long long)G, NRV_W4_MAX_IN, (long long)layout);
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_dim(a, x, "x", x->rank - 1, K));
    NRV_TRY(nrv_op_expect_dtype(a, qv, "values", layout == NRV_W4_PACKED ? NRV_U8 : NRV_I8));
    NRV_TRY(check_rank(a, qv, "values", 2, 2));
    NRV_TRY(check_dim(a, qv, "values", 0, N));
    NRV_TRY(check_dim(a, qv, "values", 1, layout == NRV_W4_PACKED ? K / 2 : K));
    NRV_TRY(nrv_op_expect_dtype(a, sv, "scales", NRV_F16));
    NRV_TRY(check_rank(a, sv, "scales", 2, 2));
    NRV_TRY(check_dim(a, sv, "scales", 0, N));
    NRV_TRY(check_dim(a, sv, "scales", 1, K / G));
    if (zv) {
        NRV_TRY(nrv_op_expect_dtype(a, zv, "zero points", NRV_I8));
        NRV_TRY(check_rank(a, zv, "zero points", 2, 2));
        NRV_TRY(check_dim(a, zv, "zero points", 0, N));
        NRV_TRY(check_dim(a, zv, "zero points", 1, K / G));
    }
    if (bias) {
        NRV_TRY(check_f32(a, bias, "bias"));
        NRV_TRY(check_rank(a, bias, "bias", 1, 1));
        NRV_TRY(check_dim(a, bias, "bias", 0, N));
    }
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (rows == 0 || N == 0) return NRV_OK;
    const float *b = bias ? bias->data : NULL;
    if (K == 0) {
        fill_rows(y->data, rows, N, b);
        return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y->data, rows * N);
    }
    const nrv_w4_weight w = {N, K, (int32_t)G, (int32_t)layout, qv->data, sv->data, zv ? zv->data : NULL};
    const int64_t row_tasks = (rows + W4_TASK_ROWS - 1) / W4_TASK_ROWS;
    const int big = rows * K * N >= LINEAR_PARALLEL_MIN_MACS;
    linear_w4_job j = {x->data, b, &w, NULL, y->data, rows, N, 1, 0, 0, a8 ? NRV_OP_LINEAR_W4A8 : NRV_OP_LINEAR_W4A32};
    if (!a8 && rows > W4_DIRECT_MAX_ROWS && a->scratch && a->scratch_bytes >= (size_t)(W4_TILE_OUT * K) * sizeof(float)) {
        float *tile = a->scratch;
        j.tile = tile;
        for (j.o0 = 0; j.o0 < N; j.o0 += W4_TILE_OUT) {
            j.nt = N - j.o0 < W4_TILE_OUT ? N - j.o0 : W4_TILE_OUT;
            const nrv_w4_weight part = nrv_w4_rows(&w, j.o0, j.nt);
            nrv_w4_dequantise(&part, tile);
            nrv_parallel_for(big ? a->pool : NULL, row_tasks, linear_w4_tile_task, &j);
        }
    } else {
        const int threads = nrv_threadpool_size(a->pool);
        /* outputs cut into pieces when the rows alone do not give every thread work */
        j.pieces = big && threads > row_tasks ? (threads + row_tasks - 1) / row_tasks : 1;
        if (j.pieces > N) j.pieces = N;
        nrv_parallel_for(big ? a->pool : NULL, row_tasks * j.pieces, linear_w4_task, &j);
    }
    return nrv_plan_apply_act(a, act, a->fattr[0], a->fattr[1], y->data, rows * N);
}

/* ------------------------------------------------------------------ linear_f16 */

/* Every row count goes through the linear_f16 kernel: it streams W once per block of 64 rows
 * and, measured on Zen 4 (1024² and 4096², 1-512 rows, one thread), keeps pace with the fp32
 * linear at every row count, while widening W into a scratch tile for the fp32 gemm (as
 * linear_w4a32 does on many rows) ran 1.2-1.4x slower than the kernel at 32-512 rows.
 * Threads: tasks of F16_TASK_ROWS rows (the kernel's own row chunk, so W still streams once
 * per chunk) and, when there are fewer chunks than threads, pieces of the outputs, each task
 * writing its part of y in place (ldy). A chunk's values do not depend on the pieces
 * (kernels.h), and the chunks come from the shape alone, so the thread count never changes a
 * value. */
#define F16_TASK_ROWS 64

typedef struct linear_f16_job {
    const float *x, *b;
    const uint16_t *w;
    float *y;
    int64_t rows, k, n, pieces;
} linear_f16_job;

static void linear_f16_task(void *ctx, int64_t t) {
    const linear_f16_job *j = ctx;
    const int64_t rt = t / j->pieces, p = t % j->pieces;
    const int64_t r0 = rt * F16_TASK_ROWS, nr = j->rows - r0 < F16_TASK_ROWS ? j->rows - r0 : F16_TASK_ROWS;
    const int64_t o0 = p * j->n / j->pieces, o1 = (p + 1) * j->n / j->pieces;
    nrv_kernel_get(NRV_OP_LINEAR_F16)
        .linear_f16(j->x + r0 * j->k, nr, j->k, j->w + o0 * j->k, j->b ? j->b + o0 : NULL, o1 - o0,
                    j->y + r0 * j->n + o0, j->n);
}

/* "linear_f16": y = act(x · Wᵀ + bias) with W stored as IEEE fp16 (precision "fp16": half the
 * bytes of fp32 W), widened to fp32 in registers; products and sums in fp32
 * (kernels.h nrv_linear_f16_fn).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] w [N, K] f16 (linear's [out, in] layout);
 *   in[2] bias [N] f32, optional; out[0] y [..., N] f32, same rank and leading dims as x.
 *   iattr [act] (nrv_plan_act); fattr [p0, p1] (LEAKY_RELU alpha; CLIP min, max).
 *   No scratch. rows = product of x's leading dims; K == 0 gives y = act(bias or 0). */
static nrv_status run_linear_f16(const nrv_op_args *a) {
    linear_io io;
    NRV_TRY(linear_operands(a, NRV_F16, &io));
    if (io.rows == 0 || io.N == 0) return NRV_OK;
    if (io.K == 0) {
        fill_rows(io.y->data, io.rows, io.N, io.b);
    } else {
        const int big = io.rows * io.K * io.N >= LINEAR_PARALLEL_MIN_MACS, threads = nrv_threadpool_size(a->pool);
        const int64_t row_tasks = (io.rows + F16_TASK_ROWS - 1) / F16_TASK_ROWS;
        int64_t pieces = big && threads > row_tasks ? (threads + row_tasks - 1) / row_tasks : 1;
        if (pieces > io.N) pieces = io.N;
        linear_f16_job j = {io.x->data, io.b, io.w->data, io.y->data, io.rows, io.K, io.N, pieces};
        nrv_parallel_for(big ? a->pool : NULL, row_tasks * pieces, linear_f16_task, &j);
    }
    return nrv_plan_apply_act(a, io.act, a->fattr[0], a->fattr[1], io.y->data, io.rows * io.N);
}

/* ------------------------------------------------------------------ layernorm_linear */

/* "layernorm_linear": y = act(layernorm(x; gamma, beta, eps) · wᵀ + bias), each row of x
 * normalised on the fly (no normalised tensor in memory).
 *   in[0] x [..., K] f32 (rank >= 1); in[1] gamma [K]; in[2] beta [K], optional;
 *   in[3] w [N, K]; in[4] bias [N], optional; out[0] y [..., N], same rank and leading dims
 *   as x. All f32.
 *   iattr [act] (nrv_plan_act); fattr [eps, p0, p1] (eps finite and >= 0, else INVALID_ARG).
 *   No scratch. K == 0 is NRV_ERR_SHAPE (an empty row has no mean). */
static nrv_status run_layernorm_linear(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 4, 5, 1, 1, 3));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    NRV_TRY(nrv_op_require_input(a, 3));
    const nrv_tview *x = a->in[0], *gamma = a->in[1], *beta = a->in[2], *w = a->in[3];
    const nrv_tview *bias = a->n_in > 4 ? a->in[4] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(check_f32(a, w, "w"));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, w, "w", 2, 2));
    const int64_t act = a->iattr[0];
    NRV_TRY(check_act(a, act));
    const float eps = a->fattr[0];
    const int64_t K = x->dims[x->rank - 1], N = w->dims[0];
    NRV_TRY(check_layernorm(a, gamma, beta, K, eps));
    NRV_TRY(check_dim(a, w, "w", 1, K));
    if (bias) NRV_TRY(check_vec(a, bias, "bias", N));
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (rows == 0 || N == 0) return NRV_OK;
    nrv_kernel_get(NRV_OP_LAYERNORM_LINEAR)
        .layernorm_linear(x->data, rows, K, gamma->data, beta ? beta->data : NULL, eps, w->data,
                          bias ? bias->data : NULL, N, y->data);
    return nrv_plan_apply_act(a, act, a->fattr[1], a->fattr[2], y->data, rows * N);
}

/* ------------------------------------------------------------------ linear_panels */

/* "linear_panels" and "layernorm_linear_panels": linear and layernorm_linear with the weight
 * packed once, at compile time, as panels (kernels.h; op "pack_panels" of the [N, K] weight): the GEMM reads the
 * panels in place instead of packing Wᵀ on every call.
 *   in[0] x [..., K] f32 (rank >= 1); in[1] panels f32 [nrv_panels_floats(N, K)], 64-byte
 *   aligned; in[2] bias [N], optional; in[3] gamma [K] (layernorm_linear_panels only,
 *   and required there): each row of x layer-normalised on the fly first; in[4] beta [K],
 *   optional (only with gamma).
 *   out[0] y [..., N] f32, same rank and leading dims as x.
 *   iattr [act, N]; fattr [p0, p1, eps] (eps, with gamma: finite and >= 0). No scratch.
 *   Threads: ranges of whole panels (64 outputs), each cut into ranges of rows where the
 *   panels alone would share out unevenly (nrv_plan_grid), each piece written straight into
 *   y and its activation applied there (it ran on the calling thread alone after the
 *   product); an output's arithmetic does not depend on its piece (kernels.h). */
typedef struct linear_panels_job {
    const float *x, *wp, *b, *gamma, *beta;
    float *y;
    float eps;
    int64_t rows, k, n, panel_pieces, row_pieces; /* piece t: panels t / row_pieces, rows t % row_pieces */
    const nrv_op_args *a; /* the fused activation, on each piece's outputs */
} linear_panels_job;

static void linear_panels_task(void *ctx, int64_t t) {
    const linear_panels_job *j = ctx;
    const int64_t panels = (j->n + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS, ta = t / j->row_pieces;
    const int64_t t0 = ta * panels / j->panel_pieces, t1 = (ta + 1) * panels / j->panel_pieces;
    const int64_t o0 = t0 * NRV_PANEL_COLS, o1 = t1 * NRV_PANEL_COLS < j->n ? t1 * NRV_PANEL_COLS : j->n;
    const int64_t tr = t % j->row_pieces, r0 = tr * j->rows / j->row_pieces, r1 = (tr + 1) * j->rows / j->row_pieces;
    if (o1 <= o0 || r1 <= r0) return;
    nrv_kernel_get_rows_panels(NRV_OP_GEMM)
        .linear_panels(j->x + r0 * j->k, r1 - r0, j->k, j->k, j->gamma, j->beta, j->eps, j->wp + o0 * j->k, o1 - o0,
                       j->b ? j->b + o0 : NULL, j->y + r0 * j->n + o0, j->n);
    const int64_t act = j->a->iattr[0]; /* checked by run_linear_panels */
    if (act != NRV_PLAN_ACT_NONE)
        for (int64_t r = r0; r < r1; r++)
            (void)nrv_plan_apply_act(j->a, act, j->a->fattr[0], j->a->fattr[1], j->y + r * j->n + o0, o1 - o0);
}

static nrv_status run_linear_panels(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 5, 1, 2, 3));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *x = a->in[0], *wp = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    const nrv_tview *gamma = a->n_in > 3 ? a->in[3] : NULL, *beta = a->n_in > 4 ? a->in[4] : NULL;
    nrv_tview *y = a->out[0];
    NRV_TRY(check_f32(a, x, "x"));
    NRV_TRY(check_f32(a, wp, "weight panels"));
    NRV_TRY(check_f32(a, y, "output"));
    NRV_TRY(check_rank(a, x, "x", 1, NRV_PLAN_MAX_RANK));
    NRV_TRY(check_rank(a, wp, "weight panels", 1, 1));
    const int64_t act = a->iattr[0], N = a->iattr[1], K = x->dims[x->rank - 1];
    NRV_TRY(check_act(a, act));
    int64_t bound, want = -1; /* (N + 16)·K bounds the panels' floats: no overflow inside */
    if (N >= 0 && N <= INT32_MAX && !__builtin_mul_overflow(N + NRV_PANEL_ALIGN, K, &bound))
        want = nrv_panels_floats(N, K);
    if (want < 0 || wp->numel != want)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): weight panels have %lld floats, expected %lld for N %lld, K %lld",
                        a->type, a->name, (long long)wp->numel, (long long)want, (long long)N, (long long)K);
    if ((uintptr_t)wp->data % 64 != 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): weight panels are not 64-byte aligned", a->type, a->name);
    if (bias) NRV_TRY(check_vec(a, bias, "bias", N));
    if (beta && !gamma)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): beta without gamma", a->type, a->name);
    if (!gamma != !strcmp(a->type, "linear_panels"))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): gamma is %s", a->type, a->name,
                        gamma ? "only for layernorm_linear_panels" : "required");
    const float eps = a->fattr[2];
    if (gamma) NRV_TRY(check_layernorm(a, gamma, beta, K, eps));
    NRV_TRY(check_rows_out(a, x, y, N));
    const int64_t rows = nrv_dims_product(x->dims, 0, x->rank - 1);
    if (rows == 0 || N == 0) return NRV_OK;
    linear_panels_job j = {x->data, wp->data, bias ? bias->data : NULL, gamma ? gamma->data : NULL,
                           beta ? beta->data : NULL, y->data, eps, rows, K, N, 1, 1, a};
    nrv_plan_grid(a->pool, rows * K * N, LINEAR_PARALLEL_MIN_MACS, (N + NRV_PANEL_COLS - 1) / NRV_PANEL_COLS, rows / 4,
                  &j.panel_pieces, &j.row_pieces);
    nrv_parallel_for(a->pool, j.panel_pieces * j.row_pieces, linear_panels_task, &j);
    return NRV_OK;
}

/* ------------------------------------------------------------------ gemm */

/* "gemm": ONNX Gemm, Y = alpha · op(A) · op(B) + beta · C (for a B that is not a constant;
 * constant weights become "linear").
 *   in[0] A f32 rank 2: [M, K], or [K, M] when transA; in[1] B f32 rank 2: [K, N], or [N, K]
 *   when transB; in[2] C f32, optional, broadcastable to [M, N] numpy-style: [], [1], [N],
 *   [1, 1], [1, N], [M, 1] or [M, N]; out[0] Y [M, N] f32.
 *   iattr [transA, transB] (each 0 or 1); fattr [alpha, beta]. No scratch.
 *   C absent or beta == 0: Y = alpha · op(A) · op(B) (C is not read). K == 0: Y = beta · C or 0. */
static nrv_status run_gemm(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 3, 1, 2, 2));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *A = a->in[0], *B = a->in[1], *C = a->n_in > 2 ? a->in[2] : NULL;
    nrv_tview *Y = a->out[0];
    const int64_t ta = a->iattr[0], tb = a->iattr[1];
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): transA %lld / transB %lld must be 0 or 1", a->type,
                        a->name, (long long)ta, (long long)tb);
    const float alpha = a->fattr[0], beta = a->fattr[1];
    NRV_TRY(check_f32(a, A, "A"));
    NRV_TRY(check_f32(a, B, "B"));
    NRV_TRY(check_f32(a, Y, "output"));
    NRV_TRY(check_rank(a, A, "A", 2, 2));
    NRV_TRY(check_rank(a, B, "B", 2, 2));
    NRV_TRY(check_rank(a, Y, "output", 2, 2));
    const int64_t M = ta ? A->dims[1] : A->dims[0], K = ta ? A->dims[0] : A->dims[1];
    const int64_t N = tb ? B->dims[0] : B->dims[1];
    if ((tb ? B->dims[1] : B->dims[0]) != K)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): op(A) is [%lld, %lld] but op(B) has %lld rows", a->type,
                        a->name, (long long)M, (long long)K, (long long)(tb ? B->dims[1] : B->dims[0]));
    NRV_TRY(check_dim(a, Y, "output", 0, M));
    NRV_TRY(check_dim(a, Y, "output", 1, N));
    int64_t c_rows = 1, c_cols = 1;
    if (C) {
        NRV_TRY(check_f32(a, C, "C"));
        NRV_TRY(check_rank(a, C, "C", 0, 2));
        if (C->rank >= 1) c_cols = C->dims[C->rank - 1];
        if (C->rank == 2) c_rows = C->dims[0];
        if ((c_rows != 1 && c_rows != M) || (c_cols != 1 && c_cols != N))
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): C [%lld, %lld] does not broadcast to [%lld, %lld]",
                            a->type, a->name, (long long)c_rows, (long long)c_cols, (long long)M, (long long)N);
    }
    if (M == 0 || N == 0) return NRV_OK;
    float *y = Y->data;
    const int use_c = C && beta != 0.0f;
    if (use_c) {
        /* Y = C broadcast; the kernel then scales it by beta. c_rows/c_cols are 1 or M/N. */
        const float *c = C->data;
        for (int64_t i = 0; i < M; i++) {
            const float *crow = c + (c_rows == 1 ? 0 : i * c_cols);
            float *yrow = y + i * N;
            if (c_cols == N) memcpy(yrow, crow, (size_t)N * sizeof(float));
            else for (int64_t j = 0; j < N; j++) yrow[j] = crow[0];
        }
    }
    if (K == 0) {
        if (use_c) for (int64_t i = 0; i < M * N; i++) y[i] *= beta;
        else memset(y, 0, (size_t)(M * N) * sizeof(float));
        return NRV_OK;
    }
    nrv_kernel_get(NRV_OP_GEMM).gemm((int)ta, (int)tb, M, N, K, alpha, A->data, ta ? M : K, B->data, tb ? K : N,
                                     use_c ? beta : 0.0f, y, N);
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_linalg[] = {
    {"matmul", run_matmul, "gemm"},
    {"linear", run_linear, "linear"},
    {"linear_w8", run_linear_w8, "linear_w8"},
    {"linear_w8a8", run_linear_w8a8, "linear_w8a8"},
    {"pack_w8a8", run_pack_w8a8, NULL},
    {"matmul_integer", run_matmul_integer, "matmul_integer"},
    {"linear_w4a32", run_linear_w4, "linear_w4a32"},
    {"linear_w4a8", run_linear_w4, "linear_w4a8"},
    {"linear_f16", run_linear_f16, "linear_f16"},
    {"layernorm_linear", run_layernorm_linear, "layernorm_linear"},
    {"linear_panels", run_linear_panels, "gemm"},
    {"attention", run_attention, "gemm"},
    {"layernorm_linear_panels", run_linear_panels, "gemm"},
    {"gemm", run_gemm, "gemm"},
    {NULL, NULL, NULL},
};
