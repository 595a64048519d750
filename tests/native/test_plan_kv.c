/* test_plan_kv.c — the in-place key/value cache: op "kv_append" (fed cache reordered into the
 * buffer, then tokens appended in place) and matmul reading the sequence-major cache as an
 * interleaved B (b_interleaved, with and without trans_b), against plain double references
 * on random sizes; bad shapes refused with nothing written (run under ASan in CI). */
#include <math.h>

#include "nrv_plan_run.h"
#include "nrv_plan_views.h"

static float frand(void) { return nrv_test_uniform(-1.0f, 1.0f); }

/* ordinary [1, H, S, D] element (h, t, d) of a sequence-major [S, H, D] buffer */
static float seq_major(const float *buf, int64_t H, int64_t D, int64_t h, int64_t t, int64_t d) {
    return buf[(t * H + h) * D + d];
}

static void test_append_and_attend(int64_t H, int64_t D, int64_t P0, int64_t steps, int64_t M) {
    const int64_t cap = P0 + steps;
    /* the reference cache in the ordinary layout, grown step by step */
    float *ref = malloc((size_t)(H * cap * D) * sizeof(float));
    int64_t pdims[4] = {1, H, P0, D};
    nrv_tview fed = mk(NRV_F32, 4, pdims);
    for (int64_t i = 0; i < fed.numel; i++) ((float *)fed.data)[i] = frand();
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < P0; t++)
            for (int64_t d = 0; d < D; d++) ref[(h * cap + t) * D + d] = ((float *)fed.data)[(h * P0 + t) * D + d];
    /* the state buffer: capacity rows, plus a guard row that must stay untouched */
    const int64_t bdims[4] = {1, H, cap + 1, D};
    nrv_tview buf = mk(NRV_F32, 4, bdims);
    int64_t P = P0;
    for (int64_t s = 0; s <= steps; s++) {
        const int64_t n = s == 0 ? 0 : 1; /* step 0 only reorders the fed cache */
        int64_t ndims[4] = {1, H, n, D}, odims[4] = {1, H, P + n, D};
        nrv_tview fresh = mk(NRV_F32, 4, ndims);
        for (int64_t i = 0; i < fresh.numel; i++) ((float *)fresh.data)[i] = frand();
        nrv_tview present = buf;
        memcpy(present.dims, odims, sizeof odims);
        present.numel = H * (P + n) * D;
        nrv_tview past = s == 0 ? fed : present; /* later steps read the buffer itself */
        if (s > 0) {
            int64_t dd[4] = {1, H, P, D};
            memcpy(past.dims, dd, sizeof dd);
            past.numel = H * P * D;
        }
        const nrv_tview *in[2] = {&past, &fresh};
        NRV_EXPECT_STATUS(nrv_plan_run_op("kv_append", in, 2, &present, NULL, 0, NULL, 0, NULL, 0, NULL), NRV_OK);
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D && n; d++)
                ref[(h * cap + P) * D + d] = ((float *)fresh.data)[h * D + d];
        P += n;
        int bad = 0;
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < P; t++)
                for (int64_t d = 0; d < D; d++)
                    bad += seq_major(buf.data, H, D, h, t, d) != ref[(h * cap + t) * D + d];
        NRV_EXPECT(bad == 0, "kv_append H %lld D %lld step %lld: %d elements differ", (long long)H, (long long)D,
                   (long long)s, bad);
        freev(&fresh);

        /* attention over the cache: scores = q · Kᵀ (trans_b) and out = p · V, K = V = cache */
        for (int trans = 0; trans < 2; trans++) {
            const int64_t N = trans ? P : D, K = trans ? D : P;
            int64_t adims[4] = {1, H, M, K}, ydims[4] = {1, H, M, N};
            nrv_tview A = mk(NRV_F32, 4, adims), Y = mk(NRV_F32, 4, ydims);
            for (int64_t i = 0; i < A.numel; i++) ((float *)A.data)[i] = frand();
            nrv_tview B = buf;
            int64_t cdims[4] = {1, H, P, D};
            memcpy(B.dims, cdims, sizeof cdims);
            B.numel = H * P * D;
            const nrv_tview *mm_in[2] = {&A, &B};
            const int64_t iattr[3] = {0, trans, 1};
            const float fattr[2] = {0, 0};
            NRV_EXPECT_STATUS(nrv_plan_run_op("matmul", mm_in, 2, &Y, iattr, 3, fattr, 2, NULL, 0, NULL), NRV_OK);
            double worst = 0;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double acc = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            const double a = ((float *)A.data)[(h * M + i) * K + k];
                            const double b = trans ? ref[(h * cap + j) * D + k] : ref[(h * cap + k) * D + j];
                            acc += a * b;
                            mag += fabs(a * b);
                        }
                        const double e = fabs(((float *)Y.data)[(h * M + i) * N + j] - acc) / (1e-6 + 1e-5 * mag);
                        if (e > worst) worst = e;
                    }
            NRV_EXPECT(worst <= 1.0, "interleaved matmul H %lld P %lld trans %d: %.2f of tolerance", (long long)H,
                       (long long)P, trans, worst);
            freev(&A);
            freev(&Y);
        }
    }
    /* the guard row past the capacity was never written */
    const uint8_t *guard = (const uint8_t *)buf.data + (size_t)(H * cap * D) * sizeof(float);
    int touched = 0;
    for (size_t i = 0; i < (size_t)(H * D) * sizeof(float); i++) touched += guard[i] != SENTINEL;
    NRV_EXPECT(touched == 0, "kv_append wrote past the cache (%d bytes)", touched);
    freev(&buf);
    freev(&fed);
    free(ref);
}

static void test_bad_shapes(void) {
    int64_t pd[4] = {1, 2, 3, 4}, nd[4] = {1, 3, 1, 4}, od[4] = {1, 2, 4, 4}, b2[4] = {2, 2, 3, 4};
    nrv_tview past = mk(NRV_F32, 4, pd), fresh = mk(NRV_F32, 4, nd), out = mk(NRV_F32, 4, od);
    nrv_tview batch2 = mk(NRV_F32, 4, b2);
    const nrv_tview *in[2] = {&past, &fresh};
    NRV_EXPECT_STATUS(nrv_plan_run_op("kv_append", in, 2, &out, NULL, 0, NULL, 0, NULL, 0, NULL), NRV_ERR_SHAPE);
    NRV_EXPECT(untouched(&out), "%s", "kv_append wrote on a head mismatch");
    const nrv_tview *in2[2] = {&batch2, &fresh};
    NRV_EXPECT_STATUS(nrv_plan_run_op("kv_append", in2, 2, &out, NULL, 0, NULL, 0, NULL, 0, NULL), NRV_ERR_SHAPE);
    int64_t ad[4] = {2, 2, 1, 4}, yd[4] = {2, 2, 1, 4};
    nrv_tview A = mk(NRV_F32, 4, ad), Y = mk(NRV_F32, 4, yd);
    const nrv_tview *mm[2] = {&A, &batch2};
    const int64_t iattr[3] = {0, 0, 1};
    const float fattr[2] = {0, 0};
    NRV_EXPECT_STATUS(nrv_plan_run_op("matmul", mm, 2, &Y, iattr, 3, fattr, 2, NULL, 0, NULL), NRV_ERR_SHAPE);
    NRV_EXPECT(untouched(&Y), "%s", "interleaved matmul wrote on a batch of 2");
    const int64_t bad_flag[3] = {0, 0, 2};
    NRV_EXPECT_STATUS(nrv_plan_run_op("matmul", mm, 2, &Y, bad_flag, 3, fattr, 2, NULL, 0, NULL),
                      NRV_ERR_INVALID_ARG);
    freev(&past);
    freev(&fresh);
    freev(&out);
    freev(&batch2);
    freev(&A);
    freev(&Y);
}

int main(void) {
    nrv_test_seed(0x6B7CAC4EULL);
    const int64_t shapes[][5] = {{8, 52, 1, 6, 1}, {3, 13, 0, 5, 2}, {1, 1, 4, 3, 1}, {5, 33, 7, 9, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_append_and_attend(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4]);
    test_bad_shapes();
    return nrv_test_summary("test_plan_kv");
}
