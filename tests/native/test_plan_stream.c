/* test_plan_stream.c — tensor_scatter, causal_conv and linear_attention (op_stream.c) on
 * exactly sized buffers (an ASan build catches any access past them) against naive double
 * references, at random awkward shapes, on one thread and on a pool of three; bad write
 * positions and state shapes must fail and leave the outputs untouched. (Parity with
 * onnxruntime: tests/python/test_onnx_ops_stream.py.) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_plan_views.h"
#include "nrv_test.h"

static int64_t rand_in(int64_t lo, int64_t hi) { return lo + rnd(hi - lo + 1); }

static nrv_status run(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *const *out, int n_out,
                      const int64_t *ia, int n_ia, const float *fa, int n_fa, nrv_threadpool *pool) {
    const nrv_op_def *d = nrv_plan_op_find(type);
    if (!d) return NRV_ERR_INTERNAL;
    nrv_op_args a;
    memset(&a, 0, sizeof a);
    a.type = type, a.name = "test_node", a.in = in, a.n_in = n_in, a.out = out, a.n_out = n_out;
    a.iattr = ia, a.n_iattr = n_ia, a.fattr = fa, a.n_fattr = n_fa, a.pool = pool;
    return d->run(&a);
}

static float *f32(const nrv_tview *v) { return v->data; }

/* tensor_scatter: [B, H, L, D] caches, linear and circular, with and without write indices. */
static void test_tensor_scatter(void) {
    for (int rep = 0; rep < 60; rep++) {
        const int64_t B = rand_in(1, 3), H = rand_in(1, 4), L = rand_in(1, 13), D = rand_in(1, 7);
        const int64_t S = rand_in(0, L);
        const int circular = (int)rnd(2), with_w = rep % 3 != 0;
        const int64_t pd[4] = {B, H, L, D}, ud[4] = {B, H, S, D}, wd[1] = {B};
        nrv_tview past = mk(NRV_F32, 4, pd), upd = mk(NRV_F32, 4, ud), w = mk(NRV_I64, 1, wd), y = mk(NRV_F32, 4, pd);
        nrv_test_fill(past.data, past.numel, -1, 1);
        nrv_test_fill(upd.data, upd.numel, -1, 1);
        int64_t *wv = w.data;
        for (int64_t b = 0; b < B; b++) wv[b] = with_w ? (circular ? rand_in(0, 3 * L) : rand_in(0, L - S)) : 0;
        const nrv_tview *ins[3] = {&past, &upd, with_w ? &w : NULL};
        nrv_tview *outs[1] = {&y};
        const int64_t ia[2] = {2, circular};
        NRV_EXPECT_STATUS(run("tensor_scatter", ins, 3, outs, 1, ia, 2, NULL, 0, NULL), NRV_OK);
        int bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t hh = 0; hh < H; hh++)
                for (int64_t l = 0; l < L; l++) {
                    int64_t s = -1; /* the update row written to l, if any */
                    for (int64_t k = 0; k < S; k++)
                        if ((circular ? (wv[b] + k) % L : wv[b] + k) == l) s = k;
                    for (int64_t d = 0; d < D; d++) {
                        const float want = s >= 0 ? f32(&upd)[((b * H + hh) * S + s) * D + d]
                                                  : f32(&past)[((b * H + hh) * L + l) * D + d];
                        bad += f32(&y)[((b * H + hh) * L + l) * D + d] != want;
                    }
                }
        NRV_EXPECT(bad == 0, "tensor_scatter B %lld H %lld L %lld D %lld S %lld circular %d: %d wrong", (long long)B,
                   (long long)H, (long long)L, (long long)D, (long long)S, circular, bad);
        if (with_w && S > 0) { /* a row past the end (linear) or a negative start: refused, y untouched */
            wv[rnd(B)] = circular ? -1 : L - S + 1;
            memset(y.data, SENTINEL, nbytes(&y));
            NRV_EXPECT_STATUS(run("tensor_scatter", ins, 3, outs, 1, ia, 2, NULL, 0, NULL), NRV_ERR_INDEX);
            NRV_EXPECT(untouched(&y), "a refused tensor_scatter wrote its output");
        }
        freev(&past), freev(&upd), freev(&w), freev(&y);
    }
}

/* causal_conv against the definition over concat(past or zeros, x), SiLU in double. */
static void test_causal_conv(nrv_threadpool *pool) {
    for (int rep = 0; rep < 60; rep++) {
        const int64_t B = rand_in(1, 2), C = rand_in(1, 40), T = rand_in(1, 40), k = rand_in(1, 5);
        const int with_past = (int)rnd(2), with_bias = (int)rnd(2), silu = (int)rnd(2);
        const int64_t xd[3] = {B, C, T}, wd[3] = {C, 1, k}, bd[1] = {C}, sd[3] = {B, C, k - 1};
        nrv_tview x = mk(NRV_F32, 3, xd), w = mk(NRV_F32, 3, wd), bias = mk(NRV_F32, 1, bd), past = mk(NRV_F32, 3, sd);
        nrv_tview y = mk(NRV_F32, 3, xd), present = mk(NRV_F32, 3, sd);
        nrv_test_fill(x.data, x.numel, -2, 2);
        nrv_test_fill(w.data, w.numel, -1, 1);
        nrv_test_fill(bias.data, bias.numel, -1, 1);
        nrv_test_fill(past.data, past.numel, -2, 2);
        const nrv_tview *ins[4] = {&x, &w, with_bias ? &bias : NULL, with_past ? &past : NULL};
        nrv_tview *outs[2] = {&y, &present};
        const int64_t ia[1] = {silu};
        NRV_EXPECT_STATUS(run("causal_conv", ins, 4, outs, 2, ia, 1, NULL, 0, pool), NRV_OK);
        double worst = 0;
        int bad_state = 0;
        for (int64_t r = 0; r < B * C; r++) {
            const int64_t c = r % C, h = k - 1;
            double s[48];
            for (int64_t i = 0; i < h + T; i++)
                s[i] = i < h ? (with_past ? f32(&past)[r * h + i] : 0.0) : f32(&x)[r * T + i - h];
            for (int64_t t = 0; t < T; t++) {
                double acc = with_bias ? f32(&bias)[c] : 0.0;
                for (int64_t j = 0; j < k; j++) acc += f32(&w)[c * k + j] * s[t + j];
                if (silu) acc = acc / (1.0 + exp(-acc));
                worst = fmax(worst, fabs(f32(&y)[r * T + t] - acc));
            }
            for (int64_t i = 0; i < h; i++) bad_state += f32(&present)[r * h + i] != (float)s[T + i];
        }
        NRV_EXPECT(worst < 1e-5, "causal_conv B %lld C %lld T %lld k %lld: off by %g", (long long)B, (long long)C,
                   (long long)T, (long long)k, worst);
        NRV_EXPECT(bad_state == 0, "causal_conv: %d state values wrong", bad_state);
        if (k > 1 && with_past) { /* a state of the wrong length: refused, nothing written */
            past.dims[2] = k - 2, past.numel = B * C * (k - 2);
            memset(y.data, SENTINEL, nbytes(&y));
            memset(present.data, SENTINEL, nbytes(&present));
            NRV_EXPECT_STATUS(run("causal_conv", ins, 4, outs, 2, ia, 1, NULL, 0, pool), NRV_ERR_SHAPE);
            NRV_EXPECT(untouched(&y) && untouched(&present), "a refused causal_conv wrote its outputs");
        }
        freev(&x), freev(&w), freev(&bias), freev(&past), freev(&y), freev(&present);
    }
}

/* linear_attention against the recurrence in double, every rule, GQA, dv across the 64-column
 * blocks, decay per head and per key, beta per head and shared. */
static void test_linear_attention(nrv_threadpool *pool) {
    for (int rep = 0; rep < 48; rep++) {
        const int64_t rule = rep % 4, B = rand_in(1, 2), T = rand_in(1, 6), hkv = rand_in(1, 3);
        const int64_t hq = hkv * rand_in(1, 3), dk = rand_in(1, 9), dv = rep % 5 == 0 ? rand_in(60, 140) : rand_in(1, 9);
        const int gated = rule == 1 || rule == 3, delta = rule >= 2, with_past = (int)rnd(2);
        const int g_key = (int)rnd(2), beta_head = (int)rnd(2);
        const int64_t qd[3] = {B, T, hq * dk}, kd[3] = {B, T, hkv * dk}, vd[3] = {B, T, hkv * dv};
        const int64_t gd[3] = {B, T, g_key ? hkv * dk : hkv}, bd[3] = {B, T, beta_head ? hkv : 1};
        const int64_t sd[4] = {B, hkv, dk, dv}, yd[3] = {B, T, hq * dv};
        nrv_tview q = mk(NRV_F32, 3, qd), kk = mk(NRV_F32, 3, kd), v = mk(NRV_F32, 3, vd), g = mk(NRV_F32, 3, gd);
        nrv_tview beta = mk(NRV_F32, 3, bd), past = mk(NRV_F32, 4, sd), y = mk(NRV_F32, 3, yd), present = mk(NRV_F32, 4, sd);
        nrv_test_fill(q.data, q.numel, -1, 1);
        nrv_test_fill(kk.data, kk.numel, -0.5f, 0.5f);
        nrv_test_fill(v.data, v.numel, -1, 1);
        nrv_test_fill(g.data, g.numel, -0.7f, 0);
        nrv_test_fill(beta.data, beta.numel, 0, 1);
        nrv_test_fill(past.data, past.numel, -1, 1);
        const nrv_tview *ins[6] = {&q, &kk, &v, with_past ? &past : NULL, gated ? &g : NULL, delta ? &beta : NULL};
        nrv_tview *outs[2] = {&y, &present};
        const int64_t ia[3] = {hq, hkv, rule};
        const float scale = 1.0f / sqrtf((float)dk);
        NRV_EXPECT_STATUS(run("linear_attention", ins, 6, outs, 2, ia, 3, &scale, 1, pool), NRV_OK);
        double *S = malloc(sizeof(double) * (size_t)(dk * dv)), *u = malloc(sizeof(double) * (size_t)dv);
        double worst = 0, mag = 1e-3;
        const int64_t group = hq / hkv;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < hkv; h++) {
                for (int64_t i = 0; i < dk * dv; i++) S[i] = with_past ? f32(&past)[(b * hkv + h) * dk * dv + i] : 0.0;
                for (int64_t t = 0; t < T; t++) {
                    const int64_t bt = b * T + t;
                    const float *kv = f32(&kk) + (bt * hkv + h) * dk, *vv = f32(&v) + (bt * hkv + h) * dv;
                    if (gated)
                        for (int64_t d = 0; d < dk; d++) {
                            const double e = exp(f32(&g)[g_key ? (bt * hkv + h) * dk + d : bt * hkv + h]);
                            for (int64_t m = 0; m < dv; m++) S[d * dv + m] *= e;
                        }
                    for (int64_t m = 0; m < dv; m++) {
                        double r = 0;
                        for (int64_t d = 0; d < dk && delta; d++) r += S[d * dv + m] * kv[d];
                        u[m] = delta ? f32(&beta)[beta_head ? bt * hkv + h : bt] * (vv[m] - r) : vv[m];
                    }
                    for (int64_t d = 0; d < dk; d++)
                        for (int64_t m = 0; m < dv; m++) S[d * dv + m] += kv[d] * u[m];
                    for (int64_t j = 0; j < group; j++) {
                        const int64_t qh = h * group + j;
                        for (int64_t m = 0; m < dv; m++) {
                            double o = 0;
                            for (int64_t d = 0; d < dk; d++) o += f32(&q)[(bt * hq + qh) * dk + d] * S[d * dv + m];
                            o *= scale;
                            mag = fmax(mag, fabs(o));
                            worst = fmax(worst, fabs(f32(&y)[(bt * hq + qh) * dv + m] - o));
                        }
                    }
                }
                for (int64_t i = 0; i < dk * dv; i++) {
                    /* compares, not fmax: GCC 12's aarch64 vectoriser crashes on an fmax
                     * reduction of float-minus-double differences here (-O3 -fno-math-errno) */
                    const double a = fabs(S[i]), e = fabs(f32(&present)[(b * hkv + h) * dk * dv + i] - S[i]);
                    if (a > mag) mag = a;
                    if (e > worst || e != e) worst = e != e ? INFINITY : e; /* NaN: fails below */
                }
            }
        NRV_EXPECT(worst <= 1e-5 * mag, "linear_attention rule %lld B %lld T %lld hq %lld hkv %lld dk %lld dv %lld: "
                   "off by %g of %g", (long long)rule, (long long)B, (long long)T, (long long)hq, (long long)hkv,
                   (long long)dk, (long long)dv, worst, mag);
        if (with_past) { /* a past state of another head size: refused, nothing written */
            past.dims[3] = dv + 1, past.numel = B * hkv * dk * (dv + 1);
            memset(y.data, SENTINEL, nbytes(&y));
            memset(present.data, SENTINEL, nbytes(&present));
            NRV_EXPECT_STATUS(run("linear_attention", ins, 6, outs, 2, ia, 3, &scale, 1, pool), NRV_ERR_SHAPE);
            NRV_EXPECT(untouched(&y) && untouched(&present), "a refused linear_attention wrote its outputs");
        }
        free(S), free(u);
        freev(&q), freev(&kk), freev(&v), freev(&g), freev(&beta), freev(&past), freev(&y), freev(&present);
    }
}

int main(void) {
    nrv_threadpool *pool = NULL;
    NRV_EXPECT_STATUS(nrv_threadpool_create(3, &pool), NRV_OK);
    test_tensor_scatter();
    test_causal_conv(NULL);
    test_causal_conv(pool);
    test_linear_attention(NULL);
    test_linear_attention(pool);
    nrv_threadpool_free(pool);
    return nrv_test_summary("test_plan_stream");
}
