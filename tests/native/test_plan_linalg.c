/* test_plan_linalg.c — the linalg plan ops (matmul, linear, layernorm_linear, gemm) against
 * naive double-precision references written here.
 *
 * Views and nrv_op_args are built by hand and the op is found by its type string, as the plan
 * runtime does. Every case runs once per "variant round": round k forces each dispatch op the
 * linalg ops use (gemm, linear, layernorm_linear and the fused activations) to its k-th
 * runnable variant (the last one when it has fewer), so every runnable variant of every one
 * of those ops is exercised. Outputs carry a canary tail; error cases (wrong shapes, dtypes,
 * attributes) must leave a sentinel-filled output untouched.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_test.h"
#include "plan/plan_ops.h"

/* ------------------------------------------------------------------ views, args */

#define RTOL 1e-4
#define ATOL 1e-5
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"gemm", "linear", "layernorm_linear", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh"};
#include "nrv_plan_test.h"

static nrv_status run_op(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out0,
                         const int64_t *ia, int nia, const float *fa, int nfa) {
    return nrv_plan_run_op(type, in, n_in, out0, ia, nia, fa, nfa, NULL, 0, NULL);
}

/* ------------------------------------------------------------------ matmul */

typedef struct mm_case {
    int ra, rb;
    int64_t ad[NRV_PLAN_MAX_RANK], bd[NRV_PLAN_MAX_RANK];
    int trans_b; /* B stored [..., N, K] */
} mm_case;

static void test_matmul_case(const mm_case *c, int64_t act) {
    const int ry = c->ra > c->rb ? c->ra : c->rb;
    int64_t yd[NRV_PLAN_MAX_RANK];
    const int64_t M = c->ad[c->ra - 2], K = c->ad[c->ra - 1], N = c->bd[c->rb - (c->trans_b ? 2 : 1)];
    for (int i = 0; i < ry - 2; i++) {
        const int ia = i - (ry - c->ra), ib = i - (ry - c->rb);
        const int64_t da = ia >= 0 ? c->ad[ia] : 1, db = ib >= 0 ? c->bd[ib] : 1;
        yd[i] = da == 1 ? db : da;
    }
    yd[ry - 2] = M;
    yd[ry - 1] = N;
    nrv_tview A = mkview(NULL, NRV_F32, c->ra, c->ad), B = mkview(NULL, NRV_F32, c->rb, c->bd);
    float *pa = rnd(A.numel, 1.0f), *pb = rnd(B.numel, 1.0f);
    A.data = pa;
    B.data = pb;
    nrv_tview Y = mkview(NULL, NRV_F32, ry, yd);
    float *py = outbuf(Y.numel);
    Y.data = py;
    float p0, p1;
    act_params(act, &p0, &p1);
    const int64_t ia[2] = {act, c->trans_b};
    const float fa[2] = {p0, p1};
    const nrv_tview *in[2] = {&A, &B};
    const nrv_status s = run_op("matmul", in, 2, &Y, ia, 2, fa, 2);
    NRV_EXPECT_STATUS(s, NRV_OK);

    /* reference: walk Y's batch index, map to A's and B's */
    double *want = xcalloc((size_t)(Y.numel ? Y.numel : 1) * sizeof(double));
    const int64_t nbatch = nrv_dims_product(yd, 0, ry - 2);
    for (int64_t e = 0; e < nbatch; e++) {
        int64_t rem = e, offa = 0, offb = 0, sa = M * K, sb = K * N;
        for (int i = ry - 3; i >= 0; i--) {
            const int64_t idx = rem % yd[i];
            rem /= yd[i];
            const int ia_ = i - (ry - c->ra), ib_ = i - (ry - c->rb);
            const int64_t da = ia_ >= 0 ? c->ad[ia_] : 1, db = ib_ >= 0 ? c->bd[ib_] : 1;
            if (da != 1) offa += idx * sa;
            if (db != 1) offb += idx * sb;
            sa *= da;
            sb *= db;
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < K; k++)
                    acc += (double)pa[offa + i * K + k] * pb[offb + (c->trans_b ? j * K + k : k * N + j)];
                want[e * M * N + i * N + j] = act_ref(act, acc, p0, p1);
            }
    }
    char what[512];
    snprintf(what, sizeof what, "matmul A rank %d [..%lld,%lld] B rank %d N=%lld trans_b %d act=%lld (%s)", c->ra,
             (long long)M, (long long)K, c->rb, (long long)N, c->trans_b, (long long)act, round_desc);
    if (s == NRV_OK) check_close(what, py, want, Y.numel);
    NRV_EXPECT(tail_intact(py, Y.numel), "%s: wrote past the output", what);
    free(want);
    free(py);
    free(pa);
    free(pb);
}

static void test_matmul(void) {
    static const int64_t sz[] = {1, 3, 13, 97, 130};
    int c = 0;
    /* 2-D: a spread of (M, K, N) triples from the awkward sizes */
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            const int64_t M = sz[i], K = sz[j], N = sz[(i + 2 * j) % 5];
            if (M * K * N > 130 * 130 * 130) continue;
            mm_case mc = {2, 2, {M, K}, {K, N}, 0};
            test_matmul_case(&mc, c++ % 8);
        }
    /* batched and broadcast */
    const mm_case bc[] = {
        {4, 3, {2, 1, 3, 13}, {3, 13, 5}, 0},     /* [2,1,M,K] x [3,K,N] */
        {3, 2, {4, 13, 3}, {3, 97}, 0},           /* batch A, plain B: one stacked gemm */
        {4, 4, {2, 3, 5, 7}, {1, 1, 7, 4}, 0},    /* B batch all ones */
        {2, 4, {5, 13}, {2, 3, 13, 6}, 0},        /* A broadcast over B's batch */
        {4, 4, {1, 3, 2, 5}, {2, 1, 5, 3}, 0},    /* both broadcast */
        {3, 3, {3, 1, 1}, {3, 1, 130}, 0},        /* K = 1 */
        {5, 3, {2, 1, 1, 3, 4}, {3, 4, 2}, 0},    /* rank 5 vs 3 */
        {3, 3, {2, 0, 3}, {2, 3, 4}, 0},          /* M = 0 */
        {3, 3, {2, 3, 0}, {2, 0, 4}, 0},          /* K = 0: act(0) */
        {3, 3, {0, 3, 4}, {1, 4, 2}, 0},          /* empty batch */
        /* one or two rows per matrix (a decode step's attention: the few-rows loops), with
         * and without trans_b, K around the 8-wide blocks */
        {4, 4, {1, 8, 1, 52}, {1, 8, 415, 52}, 1},  /* q · Kᵀ per head */
        {4, 4, {1, 8, 1, 415}, {1, 8, 415, 52}, 0},    /* softmax · V */
        {3, 3, {3, 2, 13}, {3, 97, 13}, 1},
        {3, 3, {3, 2, 7}, {3, 7, 9}, 0},
        {3, 3, {2, 1, 1}, {2, 5, 1}, 1},
    };
    for (size_t i = 0; i < sizeof bc / sizeof bc[0]; i++) test_matmul_case(&bc[i], c++ % 8);
}

/* ------------------------------------------------------------------ linear / layernorm_linear */

static void test_linear_case(int fused, int xrank, const int64_t *xd, int64_t N, int with_bias, int with_beta,
                             int64_t act) {
    const int64_t K = xd[xrank - 1];
    nrv_tview x = mkview(NULL, NRV_F32, xrank, xd);
    float *px = rnd(x.numel, 1.0f);
    x.data = px;
    if (fused)
        for (int64_t i = 0; i < x.numel; i++) px[i] = px[i] * 2.0f + 0.5f;
    const int64_t wd[2] = {N, K};
    nrv_tview w = mkview(NULL, NRV_F32, 2, wd);
    float *pw = rnd(w.numel, 1.0f);
    w.data = pw;
    nrv_tview b = mkview(NULL, NRV_F32, 1, &N), g = mkview(NULL, NRV_F32, 1, &K), bt = mkview(NULL, NRV_F32, 1, &K);
    float *pb = rnd(N, 1.0f), *pg = rnd(K, 1.0f), *pbt = rnd(K, 1.0f);
    b.data = pb;
    g.data = pg;
    bt.data = pbt;
    for (int64_t i = 0; i < K; i++) pg[i] = 0.5f + 0.5f * (pg[i] + 1.0f);
    int64_t yd[NRV_PLAN_MAX_RANK];
    memcpy(yd, xd, sizeof(int64_t) * (size_t)xrank);
    yd[xrank - 1] = N;
    nrv_tview y = mkview(NULL, NRV_F32, xrank, yd);
    float *py = outbuf(y.numel);
    y.data = py;
    float p0, p1;
    act_params(act, &p0, &p1);
    const float eps = 1e-3f;
    const int64_t ia[1] = {act};
    nrv_status s;
    if (fused) {
        const float fa[3] = {eps, p0, p1};
        const nrv_tview *in[5] = {&x, &g, with_beta ? &bt : NULL, &w, with_bias ? &b : NULL};
        s = run_op("layernorm_linear", in, 5, &y, ia, 1, fa, 3);
    } else {
        const float fa[2] = {p0, p1};
        const nrv_tview *in[3] = {&x, &w, with_bias ? &b : NULL};
        s = run_op("linear", in, with_bias ? 3 : 2, &y, ia, 1, fa, 2);
    }
    NRV_EXPECT_STATUS(s, NRV_OK);
    const int64_t rows = nrv_dims_product(xd, 0, xrank - 1);
    double *want = xcalloc((size_t)(rows * N + 1) * sizeof(double));
    double *z = xcalloc((size_t)(K + 1) * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = px + r * K;
        for (int64_t k = 0; k < K; k++) z[k] = xr[k];
        if (fused) {
            double mu = 0.0, var = 0.0;
            for (int64_t k = 0; k < K; k++) mu += z[k];
            mu /= (double)K;
            for (int64_t k = 0; k < K; k++) var += (z[k] - mu) * (z[k] - mu);
            const double inv = 1.0 / sqrt(var / (double)K + eps);
            for (int64_t k = 0; k < K; k++) z[k] = (z[k] - mu) * inv * pg[k] + (with_beta ? pbt[k] : 0.0);
        }
        for (int64_t n = 0; n < N; n++) {
            double acc = with_bias ? pb[n] : 0.0;
            for (int64_t k = 0; k < K; k++) acc += z[k] * pw[n * K + k];
            want[r * N + n] = act_ref(act, acc, p0, p1);
        }
    }
    char what[512];
    snprintf(what, sizeof what, "%s rows=%lld K=%lld N=%lld bias=%d beta=%d act=%lld (%s)",
             fused ? "layernorm_linear" : "linear", (long long)rows, (long long)K, (long long)N, with_bias,
             with_beta, (long long)act, round_desc);
    if (s == NRV_OK) check_close(what, py, want, y.numel);
    NRV_EXPECT(tail_intact(py, y.numel), "%s: wrote past the output", what);
    free(z);
    free(want);
    free(py);
    free(px);
    free(pw);
    free(pb);
    free(pg);
    free(pbt);
}

static void test_linear(int fused) {
    static const int64_t sz[] = {1, 3, 13, 97, 130};
    int c = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            const int64_t rows = sz[i], K = sz[j], N = sz[(3 * i + j) % 5];
            if (rows * K * N > 130 * 130 * 130) continue;
            const int64_t xd2[2] = {rows, K};
            test_linear_case(fused, 2, xd2, N, c % 3 != 1, c % 4 != 2, c % 8);
            c++;
        }
    const int64_t x1[1] = {13}, x3[3] = {2, 3, 17}, x4[4] = {2, 1, 3, 5};
    test_linear_case(fused, 1, x1, 7, 1, 1, 0);
    test_linear_case(fused, 3, x3, 9, 1, 0, 3);
    test_linear_case(fused, 4, x4, 1, 0, 1, 6);
    const int64_t xr0[3] = {2, 0, 5}; /* no rows */
    test_linear_case(fused, 3, xr0, 4, 1, 1, 0);
    if (!fused) {
        const int64_t xk0[2] = {3, 0}; /* K = 0: y = act(bias) */
        test_linear_case(0, 2, xk0, 4, 1, 1, 3);
        test_linear_case(0, 2, xk0, 4, 0, 1, 0);
    }
    const int64_t xn[2] = {3, 5};
    test_linear_case(fused, 2, xn, 0, 1, 1, 0); /* N = 0 */
}

/* ------------------------------------------------------------------ gemm */

static void test_gemm_case(int64_t M, int64_t N, int64_t K, int ta, int tb, int crank, int64_t cr, int64_t cc,
                           float alpha, float beta) {
    const int64_t ad[2] = {ta ? K : M, ta ? M : K}, bd[2] = {tb ? N : K, tb ? K : N}, yd[2] = {M, N};
    nrv_tview A = mkview(NULL, NRV_F32, 2, ad), B = mkview(NULL, NRV_F32, 2, bd), Y = mkview(NULL, NRV_F32, 2, yd);
    float *pa = rnd(A.numel, 1.0f), *pb = rnd(B.numel, 1.0f), *py = outbuf(Y.numel);
    A.data = pa;
    B.data = pb;
    Y.data = py;
    int64_t cd[2];
    if (crank == 1) cd[0] = cc;
    if (crank == 2) {
        cd[0] = cr;
        cd[1] = cc;
    }
    nrv_tview C = mkview(NULL, NRV_F32, crank < 0 ? 0 : crank, cd);
    float *pc = rnd(C.numel, 1.0f);
    C.data = pc;
    const int64_t ia[2] = {ta, tb};
    const float fa[2] = {alpha, beta};
    const nrv_tview *in[3] = {&A, &B, crank >= 0 ? &C : NULL};
    const nrv_status s = run_op("gemm", in, crank >= 0 ? 3 : 2, &Y, ia, 2, fa, 2);
    NRV_EXPECT_STATUS(s, NRV_OK);
    double *want = xcalloc((size_t)(M * N + 1) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double av = ta ? pa[k * M + i] : pa[i * K + k];
                const double bv = tb ? pb[j * K + k] : pb[k * N + j];
                acc += av * bv;
            }
            double cv = 0.0;
            if (crank >= 0) {
                const int64_t ci = (crank == 2 && cr != 1) ? i : 0;
                const int64_t cj = (crank >= 1 && cc != 1) ? j : 0;
                cv = pc[ci * (crank >= 1 ? cc : 1) + cj];
            }
            want[i * N + j] = alpha * acc + beta * cv;
        }
    char what[512];
    snprintf(what, sizeof what, "gemm M=%lld N=%lld K=%lld ta=%d tb=%d C rank %d [%lld,%lld] alpha=%g beta=%g (%s)",
             (long long)M, (long long)N, (long long)K, ta, tb, crank, (long long)cr, (long long)cc, (double)alpha,
             (double)beta, round_desc);
    if (s == NRV_OK) check_close(what, py, want, M * N);
    NRV_EXPECT(tail_intact(py, M * N), "%s: wrote past the output", what);
    free(want);
    free(pa);
    free(pb);
    free(pc);
    free(py);
}

static void test_gemm(void) {
    static const int64_t sz[] = {1, 3, 13, 97, 130};
    int c = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            const int64_t M = sz[i], N = sz[j], K = sz[(i + 3 * j + 1) % 5];
            if (M * K * N > 130 * 130 * 130) continue;
            /* C forms: absent, [], [1], [N], [1,N], [M,1], [M,N], [1,1] */
            const int form = c % 8;
            int crank;
            int64_t cr = 1, cc = 1;
            switch (form) {
            case 0: crank = -1; break;
            case 1: crank = 0; break;
            case 2: crank = 1; break;
            case 3: crank = 1; cc = N; break;
            case 4: crank = 2; cc = N; break;
            case 5: crank = 2; cr = M; break;
            case 6: crank = 2; cr = M; cc = N; break;
            default: crank = 2; break;
            }
            const float alpha = c % 3 == 0 ? 1.0f : -0.75f, beta = c % 5 == 4 ? 0.0f : (c % 2 ? 1.0f : 0.5f);
            test_gemm_case(M, N, K, (c >> 1) & 1, (c >> 2) & 1, crank, cr, cc, alpha, beta);
            c++;
        }
    test_gemm_case(3, 4, 0, 0, 1, 2, 3, 4, 1.0f, 0.5f); /* K = 0: beta·C */
    test_gemm_case(3, 4, 0, 1, 0, -1, 1, 1, 1.0f, 0.5f); /* K = 0, no C: zeros */
    test_gemm_case(0, 4, 5, 0, 0, 1, 1, 4, 1.0f, 1.0f);  /* M = 0 */
}

/* ------------------------------------------------------------------ errors */

/* Runs an op that must fail with `want`, output filled with the sentinel, and checks the
 * output stayed untouched. */
static void expect_fail(const char *what, const char *type, const nrv_tview *const *in, int n_in, nrv_tview *y,
                        const int64_t *ia, int nia, const float *fa, int nfa, nrv_status want) {
    float *py = outbuf(y->numel);
    y->data = py;
    const nrv_status s = run_op(type, in, n_in, y, ia, nia, fa, nfa);
    NRV_EXPECT(s == want, "%s: got %s, want %s (%s)", what, nrv_status_str(s), nrv_status_str(want), nrv_last_error());
    NRV_EXPECT(all_sentinel(py, y->numel), "%s: output written on failure", what);
    if (s != NRV_OK) NRV_EXPECT(strstr(nrv_last_error(), "test_node") != NULL, "%s: message lacks the node name: %s", what, nrv_last_error());
    free(py);
}

static void test_errors(void) {
    float *buf = rnd(4096, 1.0f);
    int32_t ibuf[64] = {0};
    const int64_t act0[1] = {0}, act_bad[1] = {99};
    const float f2[2] = {0, 0}, f3[3] = {1e-5f, 0, 0};

    /* matmul */
    {
        nrv_tview A = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 4});
        nrv_tview B = mkview(buf, NRV_F32, 2, (const int64_t[]){5, 6});
        nrv_tview Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 6});
        const nrv_tview *in[2] = {&A, &B};
        expect_fail("matmul K mismatch", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        B = mkview(buf, NRV_F32, 2, (const int64_t[]){4, 6});
        Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 7});
        expect_fail("matmul N mismatch", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 6});
        expect_fail("matmul bad act", "matmul", in, 2, &Y, act_bad, 1, f2, 2, NRV_ERR_INVALID_ARG);
        A = mkview(buf, NRV_F32, 3, (const int64_t[]){2, 3, 4});
        B = mkview(buf, NRV_F32, 3, (const int64_t[]){3, 4, 6});
        Y = mkview(NULL, NRV_F32, 3, (const int64_t[]){3, 3, 6});
        expect_fail("matmul batch 2 vs 3", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        B = mkview(buf, NRV_F32, 3, (const int64_t[]){1, 4, 6});
        Y = mkview(NULL, NRV_F32, 3, (const int64_t[]){4, 3, 6});
        expect_fail("matmul output batch wrong", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 6});
        expect_fail("matmul output rank wrong", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        A = mkview(buf, NRV_F32, 1, (const int64_t[]){4});
        expect_fail("matmul rank 1", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        A = mkview(ibuf, NRV_I32, 2, (const int64_t[]){3, 4});
        B = mkview(buf, NRV_F32, 2, (const int64_t[]){4, 6});
        expect_fail("matmul i32", "matmul", in, 2, &Y, act0, 1, f2, 2, NRV_ERR_DTYPE);
    }
    /* linear */
    {
        nrv_tview x = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 4});
        nrv_tview w = mkview(buf, NRV_F32, 2, (const int64_t[]){5, 3});
        nrv_tview b = mkview(buf, NRV_F32, 1, (const int64_t[]){5});
        nrv_tview y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 5});
        const nrv_tview *in[3] = {&x, &w, &b};
        expect_fail("linear K mismatch", "linear", in, 3, &y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        w = mkview(buf, NRV_F32, 2, (const int64_t[]){5, 4});
        b = mkview(buf, NRV_F32, 1, (const int64_t[]){6});
        expect_fail("linear bias size", "linear", in, 3, &y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        b = mkview(buf, NRV_F32, 1, (const int64_t[]){5});
        y = mkview(NULL, NRV_F32, 2, (const int64_t[]){4, 5});
        expect_fail("linear rows mismatch", "linear", in, 3, &y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 6});
        expect_fail("linear N mismatch", "linear", in, 3, &y, act0, 1, f2, 2, NRV_ERR_SHAPE);
        y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 5});
        expect_fail("linear bad act", "linear", in, 3, &y, act_bad, 1, f2, 2, NRV_ERR_INVALID_ARG);
        expect_fail("linear attr count", "linear", in, 3, &y, act0, 1, f2, 1, NRV_ERR_INVALID_ARG);
        const nrv_tview *in_nox[3] = {NULL, &w, &b};
        expect_fail("linear x missing", "linear", in_nox, 3, &y, act0, 1, f2, 2, NRV_ERR_INVALID_ARG);
    }
    /* layernorm_linear */
    {
        nrv_tview x = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 4});
        nrv_tview g = mkview(buf, NRV_F32, 1, (const int64_t[]){4});
        nrv_tview w = mkview(buf, NRV_F32, 2, (const int64_t[]){5, 4});
        nrv_tview y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 5});
        const nrv_tview *in[5] = {&x, &g, NULL, &w, NULL};
        g = mkview(buf, NRV_F32, 1, (const int64_t[]){3});
        expect_fail("layernorm_linear gamma size", "layernorm_linear", in, 5, &y, act0, 1, f3, 3, NRV_ERR_SHAPE);
        g = mkview(buf, NRV_F32, 1, (const int64_t[]){4});
        const float bad_eps[3] = {-1.0f, 0, 0};
        expect_fail("layernorm_linear eps < 0", "layernorm_linear", in, 5, &y, act0, 1, bad_eps, 3,
                    NRV_ERR_INVALID_ARG);
        x = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 0});
        g = mkview(buf, NRV_F32, 1, (const int64_t[]){0});
        w = mkview(buf, NRV_F32, 2, (const int64_t[]){5, 0});
        expect_fail("layernorm_linear K = 0", "layernorm_linear", in, 5, &y, act0, 1, f3, 3, NRV_ERR_SHAPE);
    }
    /* gemm */
    {
        nrv_tview A = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 4});
        nrv_tview B = mkview(buf, NRV_F32, 2, (const int64_t[]){4, 6});
        nrv_tview C = mkview(buf, NRV_F32, 2, (const int64_t[]){2, 6});
        nrv_tview Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 6});
        const nrv_tview *in[3] = {&A, &B, &C};
        const int64_t t00[2] = {0, 0}, t01[2] = {0, 1}, tbad[2] = {2, 0};
        const float ab[2] = {1.0f, 1.0f};
        expect_fail("gemm C [2,6] vs [3,6]", "gemm", in, 3, &Y, t00, 2, ab, 2, NRV_ERR_SHAPE);
        C = mkview(buf, NRV_F32, 1, (const int64_t[]){3});
        expect_fail("gemm C [3] vs [3,6]", "gemm", in, 3, &Y, t00, 2, ab, 2, NRV_ERR_SHAPE);
        C = mkview(buf, NRV_F32, 3, (const int64_t[]){1, 3, 6});
        expect_fail("gemm C rank 3", "gemm", in, 3, &Y, t00, 2, ab, 2, NRV_ERR_SHAPE);
        C = mkview(buf, NRV_F32, 2, (const int64_t[]){3, 6});
        expect_fail("gemm transB mismatch", "gemm", in, 3, &Y, t01, 2, ab, 2, NRV_ERR_SHAPE);
        expect_fail("gemm trans 2", "gemm", in, 3, &Y, tbad, 2, ab, 2, NRV_ERR_INVALID_ARG);
        Y = mkview(NULL, NRV_F32, 2, (const int64_t[]){3, 5});
        expect_fail("gemm Y mismatch", "gemm", in, 3, &Y, t00, 2, ab, 2, NRV_ERR_SHAPE);
    }
    free(buf);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("matmul") && nrv_plan_op_find("linear") && nrv_plan_op_find("layernorm_linear") &&
                   nrv_plan_op_find("gemm"),
               "linalg ops registered");
    NRV_EXPECT(nrv_plan_op_find("matmul") && strcmp(nrv_plan_op_find("matmul")->kernel_op, "gemm") == 0,
               "matmul kernel_op");
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0x1234u + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        test_matmul();
        test_linear(0);
        test_linear(1);
        test_gemm();
    }
    unforce();
    printf("worst error: %.3f of tolerance (rtol %g, atol %g)\n", worst_seen, RTOL, ATOL);
    test_errors();
    return nrv_test_summary("test_plan_linalg");
}
