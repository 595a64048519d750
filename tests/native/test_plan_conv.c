/* test_plan_conv.c — the conv-family plan ops (op_conv.c) against naive double-precision
 * references: conv, rdft, pool, global_pool, channel_affine, instancenorm, pad.
 *
 * Ops are called the way the plan runtime calls them: views and nrv_op_args built by hand,
 * nrv_plan_op_find(type)->run(&args). Inputs are allocated to their exact size and the
 * im2col scratch to exactly the documented formula (an ASan build catches any read or
 * write past them); outputs carry canary floats on both sides. conv runs under every
 * runnable variant of the "gemm" dispatch op. The error cases check the status and that
 * the output was left untouched (filled with a sentinel beforehand).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_plan_run.h"
#include "nrv_test.h"
#include "plan/plan_ops.h"

#define RTOL 1e-4
#define ATOL 1e-5
#define GUARD 16
static const uint32_t CANARY = 0x7fbadbadu;

/* ------------------------------------------------------------------ helpers */

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_plan_conv: out of memory\n");
        exit(2);
    }
    return p;
}

static float *rand_floats(int64_t n, float lo, float hi) {
    float *p = xmalloc((size_t)n * sizeof(float));
    nrv_test_fill(p, n, lo, hi);
    return p;
}

/* Output buffer: n floats between GUARD canaries. */
typedef struct obuf {
    float *base;
    float *p;
    int64_t n;
} obuf;

static obuf obuf_new(int64_t n) {
    obuf b;
    b.base = xmalloc((size_t)(n + 2 * GUARD) * sizeof(float));
    for (int64_t i = 0; i < n + 2 * GUARD; i++) memcpy(&b.base[i], &CANARY, 4);
    b.p = b.base + GUARD;
    b.n = n;
    return b;
}

static int obuf_guards_ok(const obuf *b) {
    for (int64_t i = 0; i < GUARD; i++) {
        uint32_t u1, u2;
        memcpy(&u1, &b->base[i], 4);
        memcpy(&u2, &b->base[GUARD + b->n + i], 4);
        if (u1 != CANARY || u2 != CANARY) return 0;
    }
    return 1;
}

/* 1 if every value of the output is still the canary (an op that failed wrote nothing). */
static int obuf_untouched(const obuf *b) {
    for (int64_t i = 0; i < b->n + 2 * GUARD; i++) {
        uint32_t u;
        memcpy(&u, &b->base[i], 4);
        if (u != CANARY) return 0;
    }
    return 1;
}

static nrv_tview tv(void *data, nrv_dtype dt, int rank, const int64_t *dims) {
    nrv_tview v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.rank = rank;
    v.numel = 1;
    for (int i = 0; i < rank; i++) {
        v.dims[i] = dims[i];
        v.numel *= dims[i];
    }
    return v;
}

/* Runs op `type` on the given views and attributes. */
static nrv_status run_op(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out,
                         const int64_t *iattr, int n_iattr, const float *fattr, int n_fattr, void *scratch,
                         size_t scratch_bytes) {
    return nrv_plan_run_op(type, in, n_in, out, iattr, n_iattr, fattr, n_fattr, scratch, scratch_bytes, NULL);
}

static int64_t rand_int(int64_t lo, int64_t hi) { /* inclusive */
    return lo + (int64_t)(nrv_test_u64() % (uint64_t)(hi - lo + 1));
}

static double act_ref(int act, double v, double p0, double p1) {
    switch (act) {
    case NRV_PLAN_ACT_RELU: return v > 0 ? v : 0;
    case NRV_PLAN_ACT_GELU: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case NRV_PLAN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case NRV_PLAN_ACT_TANH: return tanh(v);
    case NRV_PLAN_ACT_GELU_TANH: return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case NRV_PLAN_ACT_LEAKY_RELU: return v < 0 ? v * p0 : v;
    case NRV_PLAN_ACT_CLIP: return v < p0 ? p0 : v > p1 ? p1 : v;
    case NRV_PLAN_ACT_HARD_SWISH: return v * fmin(fmax(v / 6.0 + 0.5, 0.0), 1.0);
    case NRV_PLAN_ACT_SILU: return v / (1.0 + exp(-v));
    default: return v;
    }
}

static void act_params(int act, float *p0, float *p1) {
    *p0 = 0.0f;
    *p1 = 0.0f;
    if (act == NRV_PLAN_ACT_LEAKY_RELU) *p0 = 0.1f;
    if (act == NRV_PLAN_ACT_CLIP) {
        *p0 = -0.25f;
        *p1 = 0.5f;
    }
}

/* ------------------------------------------------------------------ conv */

typedef struct conv_case {
    int sr;
    int64_t n, c, m, group;
    int64_t in[2], k[2], s[2], d[2], pb[2], pe[2]; /* per spatial axis, sr used */
    int act;
    int bias;
} conv_case;

static int64_t conv_out(const conv_case *cc, int i) {
    const int64_t span = cc->d[i] * (cc->k[i] - 1) + 1, padded = cc->in[i] + cc->pb[i] + cc->pe[i];
    return padded < span ? 0 : (padded - span) / cc->s[i] + 1;
}

static int conv_pointwise(const conv_case *cc) {
    for (int i = 0; i < cc->sr; i++)
        if (cc->k[i] != 1 || cc->s[i] != 1 || cc->d[i] != 1 || cc->pb[i] || cc->pe[i]) return 0;
    return 1;
}

/* Fills dims for x, w, y; iattr (returns its length). */
static int conv_setup(const conv_case *cc, int64_t xd[4], int64_t wd[4], int64_t yd[4], int64_t *iattr) {
    const int sr = cc->sr;
    xd[0] = cc->n, xd[1] = cc->c;
    wd[0] = cc->m, wd[1] = cc->c / cc->group;
    yd[0] = cc->n, yd[1] = cc->m;
    for (int i = 0; i < sr; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        yd[2 + i] = conv_out(cc, i);
    }
    iattr[0] = sr, iattr[1] = cc->group, iattr[2] = cc->act;
    for (int i = 0; i < sr; i++) {
        iattr[3 + i] = cc->s[i];
        iattr[3 + sr + i] = cc->d[i];
        iattr[3 + 2 * sr + i] = cc->pb[i];
        iattr[3 + 3 * sr + i] = cc->pe[i];
    }
    return 3 + 4 * sr;
}

/* The scratch layout documented in op_conv.c (the direct path), exactly: row offsets
 * (8·K, rounded up to 64), the stride phases of the padded input (cg·sh·sw·PH·PW floats;
 * a depthwise conv 8 planes, CONV_DW_PLANES),
 * the row buffer (min(mg·PW·oh, max(196608, mg·PW)) floats) and the few-positions
 * path's transposed im2col (K·min(P, 16) floats). */
static size_t conv_scratch(const conv_case *cc, const int64_t *wd, const int64_t *yd) {
    if (conv_pointwise(cc)) return 0;
    int64_t oh = 1, sh = 1, hn = 1, p = 1, k = wd[1], wn = 1, sw = 1;
    for (int i = 0; i < cc->sr; i++) {
        const int64_t n = (yd[2 + i] - 1) * cc->s[i] + (wd[2 + i] - 1) * cc->d[i] + 1;
        if (i == cc->sr - 1) wn = n, sw = cc->s[i];
        else hn = n, sh = cc->s[i], oh = yd[2 + i];
        k *= wd[2 + i];
        p *= yd[2 + i];
    }
    const int64_t phh = (hn + sh - 1) / sh, pww = (wn + sw - 1) / sw, mg = cc->m / cc->group;
    const int64_t mpw = mg * pww, cap = mpw > 196608 ? mpw : 196608;
    const int64_t rowbuf = mpw * oh < cap ? mpw * oh : cap;
    const int64_t planes = wd[1] == 1 && mg == 1 ? 8 : wd[1]; /* depthwise: CONV_DW_PLANES */
    const int64_t floats = planes * sh * sw * phh * pww + rowbuf + k * (p < 16 ? p : 16);
    return (size_t)((k * 8 + 63) / 64 * 64 + floats * 4);
}

static void conv_reference(const conv_case *cc, const float *x, const float *w, const float *b, float p0, float p1,
                           float *y) {
    /* as 2-D with a trivial leading axis for sr = 1 */
    int64_t ih = 1, iw, kh = 1, kw, sh = 1, sw, dh = 1, dw, ph = 0, pw, oh = 1, ow;
    const int l = cc->sr - 1;
    if (cc->sr == 2) {
        ih = cc->in[0], kh = cc->k[0], sh = cc->s[0], dh = cc->d[0], ph = cc->pb[0], oh = conv_out(cc, 0);
    }
    iw = cc->in[l], kw = cc->k[l], sw = cc->s[l], dw = cc->d[l], pw = cc->pb[l], ow = conv_out(cc, l);
    const int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t m = 0; m < cc->m; m++) {
            const int64_t g = m / mg;
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double acc = b ? b[m] : 0.0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t ki = 0; ki < kh; ki++)
                            for (int64_t kj = 0; kj < kw; kj++) {
                                const int64_t iy = oy * sh + ki * dh - ph, ix = ox * sw + kj * dw - pw;
                                if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) continue;
                                acc += (double)x[((n * cc->c + g * cg + c) * ih + iy) * iw + ix] *
                                       (double)w[((m * cg + c) * kh + ki) * kw + kj];
                            }
                    y[((n * cc->m + m) * oh + oy) * ow + ox] = (float)act_ref(cc->act, acc, p0, p1);
                }
        }
}

static const char *act_name(int act) {
    static const char *names[] = {"none",      "relu",       "gelu", "sigmoid",    "tanh",
                                  "gelu_tanh", "leaky_relu", "clip", "hard_swish", "silu"};
    return act >= 0 && act < (int)(sizeof names / sizeof names[0]) ? names[act] : "?";
}

static void conv_desc(const conv_case *cc, char *buf, size_t len) {
    int o = snprintf(buf, len, "N%lld C%lld M%lld g%lld", (long long)cc->n, (long long)cc->c, (long long)cc->m,
                     (long long)cc->group);
    for (int i = 0; i < cc->sr && o > 0 && (size_t)o < len; i++)
        o += snprintf(buf + o, len - (size_t)o, " [in %lld k %lld s %lld d %lld p %lld,%lld]", (long long)cc->in[i],
                      (long long)cc->k[i], (long long)cc->s[i], (long long)cc->d[i], (long long)cc->pb[i],
                      (long long)cc->pe[i]);
    if (o > 0 && (size_t)o < len) snprintf(buf + o, len - (size_t)o, " act %s bias %d", act_name(cc->act), cc->bias);
}

static double worst_conv_err;

static void conv_check(const conv_case *cc, const char *variant) {
    int64_t xd[4], wd[4], yd[4], iattr[11];
    const int n_iattr = conv_setup(cc, xd, wd, yd, iattr);
    const int rank = 2 + cc->sr;
    const nrv_tview xv0 = tv(NULL, NRV_F32, rank, xd), wv0 = tv(NULL, NRV_F32, rank, wd);
    const int64_t kdim = wd[1] * (cc->sr == 2 ? wd[2] * wd[3] : wd[2]);
    const float wscale = 1.0f / sqrtf((float)(kdim > 0 ? kdim : 1));
    float *x = rand_floats(xv0.numel, -1.0f, 1.0f);
    float *w = rand_floats(wv0.numel, -wscale, wscale);
    float *b = cc->bias ? rand_floats(cc->m, -0.5f, 0.5f) : NULL;
    const int64_t bd[1] = {cc->m};
    nrv_tview xv = tv(x, NRV_F32, rank, xd), wv = tv(w, NRV_F32, rank, wd), bv = tv(b, NRV_F32, 1, bd);
    obuf y = obuf_new(tv(NULL, NRV_F32, rank, yd).numel);
    nrv_tview yv = tv(y.p, NRV_F32, rank, yd);
    const size_t sb = conv_scratch(cc, wd, yd);
    void *scratch = sb ? xmalloc(sb) : NULL;
    if (scratch) memset(scratch, 0xff, sb); /* garbage (NaN) on entry */
    float p0, p1;
    act_params(cc->act, &p0, &p1);
    const float fattr[2] = {p0, p1};
    const nrv_tview *ins[3] = {&xv, &wv, b ? &bv : NULL};
    /* without a bias: alternately a NULL third input and no third input */
    const int n_in = b ? 3 : (cc->n + cc->c) % 2 ? 3 : 2;
    char desc[256];
    conv_desc(cc, desc, sizeof desc);
    const nrv_status st = run_op("conv", ins, n_in, &yv, iattr, n_iattr, fattr, 2, scratch, sb);
    NRV_EXPECT(st == NRV_OK, "conv %s [%s]: %s (%s)", desc, variant, nrv_status_str(st), nrv_last_error());
    if (st == NRV_OK) {
        float *want = xmalloc((size_t)y.n * sizeof(float));
        conv_reference(cc, x, w, b, p0, p1, want);
        int64_t where;
        const double err = nrv_test_err(y.p, want, y.n, RTOL, ATOL, &where);
        if (err > worst_conv_err) worst_conv_err = err;
        NRV_EXPECT(err <= 1.0, "conv %s [%s]: err %.3g of tolerance at %lld: got %g want %g", desc, variant, err,
                   (long long)where, where >= 0 ? y.p[where] : 0.0, where >= 0 ? want[where] : 0.0);
        free(want);
    }
    NRV_EXPECT(obuf_guards_ok(&y), "conv %s [%s]: wrote outside y", desc, variant);
    free(x);
    free(w);
    free(b);
    free(y.base);
    free(scratch);
}

static conv_case conv_1d(int64_t n, int64_t c, int64_t m, int64_t group, int64_t in, int64_t k, int64_t s, int64_t d,
                         int64_t pb, int64_t pe, int act, int bias) {
    conv_case cc;
    memset(&cc, 0, sizeof cc);
    cc.sr = 1, cc.n = n, cc.c = c, cc.m = m, cc.group = group;
    cc.in[0] = in, cc.k[0] = k, cc.s[0] = s, cc.d[0] = d, cc.pb[0] = pb, cc.pe[0] = pe;
    cc.act = act, cc.bias = bias;
    return cc;
}

static conv_case conv_2d(int64_t n, int64_t c, int64_t m, int64_t group, int64_t ih, int64_t iw, int64_t kh,
                         int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                         int64_t pbot, int64_t pr, int act, int bias) {
    conv_case cc;
    memset(&cc, 0, sizeof cc);
    cc.sr = 2, cc.n = n, cc.c = c, cc.m = m, cc.group = group;
    cc.in[0] = ih, cc.in[1] = iw, cc.k[0] = kh, cc.k[1] = kw, cc.s[0] = sh, cc.s[1] = sw;
    cc.d[0] = dh, cc.d[1] = dw, cc.pb[0] = pt, cc.pb[1] = pl, cc.pe[0] = pbot, cc.pe[1] = pr;
    cc.act = act, cc.bias = bias;
    return cc;
}

/* A random case at awkward sizes; sr 1 or 2; kind 0 = dense, 1 = group 2/3, 2 = depthwise. */
static conv_case conv_random(int sr, int kind) {
    static const int64_t cs[] = {1, 3, 5, 129}, ms[] = {1, 7, 64}, ks[] = {1, 2, 3, 5};
    conv_case cc;
    memset(&cc, 0, sizeof cc);
    cc.sr = sr;
    cc.n = rand_int(1, 2);
    if (kind == 0) {
        cc.group = 1;
        cc.c = cs[rand_int(0, 3)];
        cc.m = ms[rand_int(0, 2)];
    } else if (kind == 1) {
        cc.group = rand_int(2, 3);
        cc.c = cc.group * rand_int(1, 3);
        cc.m = cc.group * rand_int(1, 4);
    } else {
        cc.c = rand_int(1, 9);
        cc.group = cc.m = cc.c;
    }
    /* keep the reference cheap at the big channel counts */
    if (sr == 2 && cc.c * cc.m > 700) cc.m = 7;
    for (int i = 0; i < sr; i++) {
        cc.k[i] = ks[rand_int(0, 3)];
        cc.s[i] = rand_int(1, 3);
        cc.d[i] = rand_int(1, 2);
        cc.pb[i] = rand_int(0, 2);
        cc.pe[i] = rand_int(0, 3);
        const int64_t span = cc.d[i] * (cc.k[i] - 1) + 1;
        int64_t lo = span - cc.pb[i] - cc.pe[i];
        if (lo < 1) lo = 1;
        cc.in[i] = rand_int(lo, lo + (sr == 1 ? 20 : 5));
    }
    cc.act = (int)rand_int(0, NRV_PLAN_ACT_LAST);
    cc.bias = (int)rand_int(0, 1);
    return cc;
}

static void test_conv_variant(const char *variant) {
    /* the streaming VAD's convs */
    conv_check((conv_case[]){conv_1d(1, 129, 128, 1, 4, 3, 1, 1, 1, 1, NRV_PLAN_ACT_RELU, 1)}, variant);
    conv_check((conv_case[]){conv_1d(1, 128, 64, 1, 4, 3, 2, 1, 1, 1, NRV_PLAN_ACT_RELU, 1)}, variant);
    conv_check((conv_case[]){conv_1d(1, 1, 258, 1, 640, 256, 128, 1, 0, 0, NRV_PLAN_ACT_NONE, 0)}, variant);
    /* pointwise (no scratch) 1-D and 2-D, grouped pointwise */
    conv_check((conv_case[]){conv_1d(2, 5, 7, 1, 9, 1, 1, 1, 0, 0, NRV_PLAN_ACT_SIGMOID, 1)}, variant);
    conv_check((conv_case[]){conv_2d(1, 3, 64, 1, 3, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, NRV_PLAN_ACT_NONE, 1)},
               variant);
    conv_check((conv_case[]){conv_1d(1, 6, 4, 2, 5, 1, 1, 1, 0, 0, NRV_PLAN_ACT_TANH, 0)}, variant);
    /* kernel 1 but strided / padded: not pointwise */
    conv_check((conv_case[]){conv_1d(1, 3, 7, 1, 10, 1, 2, 1, 1, 0, NRV_PLAN_ACT_NONE, 1)}, variant);
    /* depthwise 1-D and 2-D, strided and dilated, asymmetric pads */
    conv_check((conv_case[]){conv_1d(2, 64, 64, 64, 17, 5, 2, 2, 3, 1, NRV_PLAN_ACT_LEAKY_RELU, 1)}, variant);
    conv_check((conv_case[]){conv_2d(1, 5, 5, 5, 7, 6, 3, 2, 2, 1, 1, 2, 1, 0, 2, 1, NRV_PLAN_ACT_CLIP, 1)},
               variant);
    /* depthwise with a channel multiplier (group == C, M = 2C): im2col + GEMM */
    conv_check((conv_case[]){conv_1d(1, 3, 6, 3, 11, 3, 1, 1, 1, 1, NRV_PLAN_ACT_GELU, 1)}, variant);
    /* 2-D dense with everything awkward */
    conv_check((conv_case[]){conv_2d(2, 3, 7, 1, 9, 8, 3, 5, 2, 3, 2, 1, 2, 0, 1, 3, NRV_PLAN_ACT_GELU_TANH, 1)},
               variant);
    /* kernel covering the whole (padded) input: one output */
    conv_check((conv_case[]){conv_2d(1, 2, 3, 1, 3, 4, 5, 5, 1, 1, 1, 1, 1, 0, 1, 1, NRV_PLAN_ACT_NONE, 0)},
               variant);
    /* around the few-positions threshold (16 output positions): 1-D and 2-D, pointwise */
    conv_check((conv_case[]){conv_1d(1, 5, 9, 1, 16, 3, 1, 1, 1, 1, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_1d(1, 5, 9, 1, 17, 3, 1, 1, 1, 1, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_2d(2, 3, 5, 1, 4, 4, 2, 3, 1, 1, 1, 1, 0, 1, 1, 1, NRV_PLAN_ACT_NONE, 1)},
               variant);
    conv_check((conv_case[]){conv_1d(2, 33, 300, 1, 3, 1, 1, 1, 0, 0, NRV_PLAN_ACT_RELU, 1)}, variant);
    conv_check((conv_case[]){conv_1d(1, 300, 20, 1, 16, 1, 1, 1, 0, 0, NRV_PLAN_ACT_NONE, 0)}, variant);
    conv_check((conv_case[]){conv_1d(1, 4, 6, 2, 9, 2, 2, 2, 0, 3, NRV_PLAN_ACT_NONE, 1)}, variant);
    /* more than one 2048-float output block per linear call: 16 positions x 300 channels */
    conv_check((conv_case[]){conv_1d(1, 2, 300, 1, 18, 3, 1, 1, 0, 0, NRV_PLAN_ACT_NONE, 1)}, variant);
    /* taps that fall wholly past the input (dilated kernel over a tiny padded input) */
    conv_check((conv_case[]){conv_1d(1, 2, 3, 1, 1, 3, 1, 2, 2, 2, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_1d(1, 2, 2, 2, 1, 3, 1, 2, 2, 2, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_2d(1, 2, 3, 1, 1, 2, 3, 3, 1, 1, 2, 2, 2, 3, 2, 1, NRV_PLAN_ACT_NONE, 1)},
               variant);
    conv_check((conv_case[]){conv_1d(1, 2, 3, 1, 2, 3, 1, 5, 1, 24, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_2d(1, 2, 3, 1, 2, 2, 3, 3, 1, 1, 5, 5, 1, 1, 24, 24, NRV_PLAN_ACT_NONE, 1)},
               variant);
    conv_check((conv_case[]){conv_2d(1, 2, 3, 1, 3, 5, 2, 1, 1, 1, 10, 1, 2, 0, 9, 0, NRV_PLAN_ACT_NONE, 1)},
               variant);
    /* depthwise at stride 1 (the padded-plane path): MobileNet's 3x3, widths not a multiple
     * of 4, dilation, asymmetric and oversized pads, 1-D */
    conv_check((conv_case[]){conv_2d(1, 8, 8, 8, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NRV_PLAN_ACT_HARD_SWISH, 1)},
               variant);
    conv_check((conv_case[]){conv_2d(1, 8, 8, 8, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NRV_PLAN_ACT_CLIP, 1)},
               variant);
    conv_check((conv_case[]){conv_2d(2, 3, 3, 3, 7, 13, 5, 5, 1, 1, 2, 1, 3, 0, 1, 4, NRV_PLAN_ACT_NONE, 1)},
               variant);
    conv_check((conv_case[]){conv_2d(1, 2, 2, 2, 1, 5, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, NRV_PLAN_ACT_RELU, 0)},
               variant);
    conv_check((conv_case[]){conv_1d(1, 6, 6, 6, 37, 7, 1, 1, 3, 3, NRV_PLAN_ACT_NONE, 1)}, variant);
    conv_check((conv_case[]){conv_1d(2, 4, 4, 4, 3, 3, 1, 2, 2, 0, NRV_PLAN_ACT_NONE, 1)}, variant);
    /* column stride 2 (both column phases filled from one pass over each x row): every left
     * pad 0-3 (x's even columns land in phase 0 or 1, shifted by 0-2), even and odd widths
     * so the last pair is whole or cut, rows long enough for the 4-pair vector steps, a
     * dilated kernel, and a row stride of 2 or 1 */
    for (int64_t pl = 0; pl <= 3; pl++)
        for (int64_t iw = 30; iw <= 31; iw++) {
            conv_check((conv_case[]){conv_2d(1, 3, 5, 1, 7, iw, 3, 3, 2, 2, 1, 1, 1, pl, 1, 3 - pl,
                                             NRV_PLAN_ACT_NONE, 1)},
                       variant);
            conv_check((conv_case[]){conv_2d(1, 2, 4, 1, 6, iw, 2, 5, 1, 2, 1, 2, 0, pl, 2, pl,
                                             NRV_PLAN_ACT_RELU, 0)},
                       variant);
        }
    /* every fused activation on one case */
    for (int act = 0; act <= NRV_PLAN_ACT_LAST; act++)
        conv_check((conv_case[]){conv_1d(1, 5, 7, 1, 12, 3, 1, 2, 2, 1, act, 1)}, variant);
    /* random */
    for (int i = 0; i < 24; i++) {
        conv_case cc = conv_random(1 + (i & 1), (i / 2) % 3);
        conv_check(&cc, variant);
    }
}

/* Every runnable variant of the dispatch ops conv uses: "gemm" (im2col path) and "linear"
 * (convs with few output positions), each forced in turn with the other automatic. */
static void test_conv(void) {
    static const char *ops[2] = {"gemm", "linear"};
    for (int o = 0; o < 2; o++) {
        const int nv = nrv_kernel_variant_count(ops[o]);
        int ran = 0;
        for (int i = 0; i < nv; i++) {
            const char *name = nrv_kernel_variant_name(ops[o], i);
            if (!nrv_kernel_variant_runnable(ops[o], i)) {
                printf("conv: %s variant %s not runnable here, skipped\n", ops[o], name);
                continue;
            }
            NRV_EXPECT_STATUS(nrv_kernel_force(ops[o], name), NRV_OK);
            nrv_test_seed(1234); /* the same cases for every variant */
            worst_conv_err = 0.0;
            const int failed0 = nrv_test_failed;
            char label[64];
            snprintf(label, sizeof label, "%s=%s", ops[o], name);
            test_conv_variant(label);
            printf("conv %s max_err=%.3f %s\n", label, worst_conv_err, nrv_test_failed == failed0 ? "OK" : "FAIL");
            ran++;
        }
        NRV_EXPECT(ran > 0, "no runnable %s variant", ops[o]);
        NRV_EXPECT_STATUS(nrv_kernel_force(ops[o], NULL), NRV_OK);
        NRV_EXPECT(nrv_kernel_forced(ops[o]) == NULL, "%s still forced", ops[o]);
    }
}

/* Error paths: each must fail with the given status and leave y untouched. */
static void test_conv_errors(void) {
    const conv_case base = conv_2d(1, 4, 6, 2, 5, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1, 0, NRV_PLAN_ACT_RELU, 1);
    int64_t xd[4], wd[4], yd[4], ia[11];
    const int nia = conv_setup(&base, xd, wd, yd, ia);
    float *x = rand_floats(tv(NULL, NRV_F32, 4, xd).numel, -1, 1);
    float *w = rand_floats(tv(NULL, NRV_F32, 4, wd).numel, -1, 1);
    float *b = rand_floats(6, -1, 1);
    const size_t sb = conv_scratch(&base, wd, yd);
    void *scratch = xmalloc(sb);
    const float fa[2] = {0, 0};
    const int64_t bd[1] = {6};
    obuf y = obuf_new(tv(NULL, NRV_F32, 4, yd).numel);
    float *sum = rand_floats(tv(NULL, NRV_F32, 4, yd).numel, -1, 1);

#define CONV_ERR(want, ...)                                                                          \
    do {                                                                                             \
        nrv_tview xv = tv(x, NRV_F32, 4, xd), wv = tv(w, NRV_F32, 4, wd), bv = tv(b, NRV_F32, 1, bd); \
        nrv_tview yv = tv(y.p, NRV_F32, 4, yd), sv = tv(sum, NRV_F32, 4, yd);                        \
        int64_t iat[12];                                                                             \
        memcpy(iat, ia, sizeof ia);                                                                  \
        int niat = nia, nfa = 2, nin = 3;                                                            \
        size_t sbytes = sb;                                                                          \
        void *scr = scratch;                                                                         \
        const nrv_tview *ins[5] = {&xv, &wv, &bv, &sv, &sv};                                         \
        __VA_ARGS__;                                                                                 \
        NRV_EXPECT_STATUS(run_op("conv", ins, nin, &yv, iat, niat, fa, nfa, scr, sbytes), want);     \
        NRV_EXPECT(obuf_untouched(&y), "conv error case wrote y");                                   \
    } while (0)

    /* sanity: the base case itself runs (then restore the canaries) */
    {
        nrv_tview xv = tv(x, NRV_F32, 4, xd), wv = tv(w, NRV_F32, 4, wd), bv = tv(b, NRV_F32, 1, bd);
        nrv_tview yv = tv(y.p, NRV_F32, 4, yd);
        const nrv_tview *ins[3] = {&xv, &wv, &bv};
        NRV_EXPECT_STATUS(run_op("conv", ins, 3, &yv, ia, nia, fa, 2, scratch, sb), NRV_OK);
        for (int64_t i = 0; i < y.n + 2 * GUARD; i++) memcpy(&y.base[i], &CANARY, 4);
    }
    CONV_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_F16);
    CONV_ERR(NRV_ERR_DTYPE, wv.dtype = NRV_I32);
    CONV_ERR(NRV_ERR_DTYPE, bv.dtype = NRV_F64);
    CONV_ERR(NRV_ERR_DTYPE, yv.dtype = NRV_I8);
    CONV_ERR(NRV_ERR_SHAPE, bv.dims[0] = 5);
    CONV_ERR(NRV_ERR_SHAPE, nin = 4; sv.dims[3] -= 1;                  /* the sum (in[3]) shaped as y */
             sv.numel = sv.dims[0] * sv.dims[1] * sv.dims[2] * sv.dims[3]);
    CONV_ERR(NRV_ERR_DTYPE, nin = 4; sv.dtype = NRV_F16);
    CONV_ERR(NRV_ERR_INVALID_ARG, nin = 4; sv.data = y.p);             /* the sum in y's bytes */
    CONV_ERR(NRV_ERR_INVALID_ARG, nin = 5);                            /* no in[4] */
    CONV_ERR(NRV_ERR_SHAPE, xv.rank = 3);
    CONV_ERR(NRV_ERR_SHAPE, wv.dims[1] = 4);                     /* C/group = 2 */
    CONV_ERR(NRV_ERR_SHAPE, yv.dims[1] = 5);                     /* M */
    CONV_ERR(NRV_ERR_SHAPE, yv.dims[0] = 2);                     /* N */
    CONV_ERR(NRV_ERR_SHAPE, yv.dims[2] += 1);                    /* out height */
    CONV_ERR(NRV_ERR_SHAPE, yv.dims[3] -= 1);                    /* out width */
    CONV_ERR(NRV_ERR_SHAPE, xv.dims[2] = 1; iat[7] = 0; iat[9] = 0); /* kernel > padded input */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[1] = 3);                   /* group does not divide C */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[1] = 0);
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[2] = NRV_PLAN_ACT_LAST + 1); /* unknown act */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[2] = -1);
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[3] = 0);                   /* stride */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[4] = -2);
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[5] = 0);                   /* dilation */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[7] = -1);                  /* pad */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[10] = (int64_t)1 << 40);
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[0] = 3);                   /* sr */
    CONV_ERR(NRV_ERR_INVALID_ARG, iat[0] = 1);                   /* sr 1 with 11 attrs */
    CONV_ERR(NRV_ERR_INVALID_ARG, niat = 10);
    CONV_ERR(NRV_ERR_INVALID_ARG, niat = 0);
    CONV_ERR(NRV_ERR_INVALID_ARG, nfa = 1);
    CONV_ERR(NRV_ERR_INVALID_ARG, nin = 1);
    CONV_ERR(NRV_ERR_INVALID_ARG, ins[0] = NULL);
    CONV_ERR(NRV_ERR_INVALID_ARG, sbytes = sb - 4);              /* scratch too small */
    CONV_ERR(NRV_ERR_INVALID_ARG, scr = NULL);
    CONV_ERR(NRV_ERR_SHAPE, wv.dims[2] = 0);                     /* kernel dim 0 */
#undef CONV_ERR
    free(x);
    free(w);
    free(b);
    free(sum);
    free(scratch);
    free(y.base);
}

/* ------------------------------------------------------------------ pool */

typedef struct pool_case {
    int kind, sr, cip, ceil;
    int64_t n, c;
    int64_t in[2], k[2], s[2], d[2], pb[2], pe[2];
} pool_case;

static int64_t pool_out(const pool_case *pc, int i) {
    const int64_t span = pc->d[i] * (pc->k[i] - 1) + 1, num = pc->in[i] + pc->pb[i] + pc->pe[i] - span;
    int64_t o = (pc->ceil ? (num + pc->s[i] - 1) / pc->s[i] : num / pc->s[i]) + 1;
    /* ceil_mode: the last window must start inside the input or the begin padding */
    if (pc->ceil && (o - 1) * pc->s[i] >= pc->in[i] + pc->pb[i]) o--;
    return o;
}

/* Two references from one walk over each window: want in double (the tolerance check), and
 * exact, the direct loop in float in onnxruntime's order (window rows down, taps across; the
 * sum started at +0 and divided once), whose bits the op must give. */
static void pool_references(const pool_case *pc, const float *x, float *want, float *exact) {
    int64_t in[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0},
            o[2] = {1, 1};
    for (int i = 0; i < pc->sr; i++) {
        const int a = 2 - pc->sr + i;
        in[a] = pc->in[i], k[a] = pc->k[i], s[a] = pc->s[i], d[a] = pc->d[i], pb[a] = pc->pb[i], pe[a] = pc->pe[i];
        o[a] = pool_out(pc, i);
    }
    for (int64_t pl = 0; pl < pc->n * pc->c; pl++)
        for (int64_t oy = 0; oy < o[0]; oy++)
            for (int64_t ox = 0; ox < o[1]; ox++) {
                double mx = -DBL_MAX, sum = 0.0;
                float mx_f = -FLT_MAX, sum_f = 0.0f;
                int64_t real = 0, inpad = 0;
                for (int64_t j = 0; j < k[0]; j++)
                    for (int64_t i = 0; i < k[1]; i++) {
                        const int64_t py = oy * s[0] - pb[0] + j * d[0], px = ox * s[1] - pb[1] + i * d[1];
                        if (py >= in[0] + pe[0] || px >= in[1] + pe[1]) continue; /* clipped */
                        inpad++;
                        if (py < 0 || px < 0 || py >= in[0] || px >= in[1]) continue;
                        const float v = x[(pl * in[0] + py) * in[1] + px];
                        real++;
                        sum += v, sum_f += v;
                        if (v > mx) mx = v;
                        mx_f = v > mx_f ? v : mx_f;
                    }
                const int64_t cnt = pc->cip ? inpad : real, at = (pl * o[0] + oy) * o[1] + ox;
                if (pc->kind == 0) {
                    want[at] = real ? (float)mx : -FLT_MAX;
                    exact[at] = mx_f;
                } else {
                    want[at] = cnt ? (float)(sum / (double)cnt) : 0.0f;
                    exact[at] = cnt ? sum_f / (float)cnt : 0.0f;
                }
            }
}

/* The op's x and y dims and its iattr for case pc. */
static void pool_case_args(const pool_case *pc, int64_t *xd, int64_t *yd, int64_t *ia) {
    xd[0] = yd[0] = pc->n, xd[1] = yd[1] = pc->c;
    ia[0] = pc->kind, ia[1] = pc->sr, ia[2] = pc->cip;
    for (int i = 0; i < pc->sr; i++) {
        xd[2 + i] = pc->in[i];
        yd[2 + i] = pool_out(pc, i);
        ia[3 + i] = pc->k[i];
        ia[3 + pc->sr + i] = pc->s[i];
        ia[3 + 2 * pc->sr + i] = pc->d[i];
        ia[3 + 3 * pc->sr + i] = pc->pb[i];
        ia[3 + 4 * pc->sr + i] = pc->pe[i];
    }
}

/* Max pooling of u8 / i8 codes (dt): the codes of the float direct loop's maxima over the
 * codes widened, an empty window giving the type's lowest code. */
static void pool_check_codes(const pool_case *pc, nrv_dtype dt) {
    const int rank = 2 + pc->sr;
    int64_t xd[4], yd[4], ia[13];
    pool_case_args(pc, xd, yd, ia);
    const int64_t nx = tv(NULL, NRV_F32, rank, xd).numel, ny = tv(NULL, NRV_F32, rank, yd).numel;
    const int lo = dt == NRV_U8 ? 0 : -128;
    float *xf = xmalloc((size_t)nx * sizeof(float)), *want = xmalloc((size_t)ny * sizeof(float));
    float *exact = xmalloc((size_t)ny * sizeof(float));
    uint8_t *x = xmalloc((size_t)nx);
    for (int64_t e = 0; e < nx; e++) {
        const int v = (int)rand_int(lo, lo + 255);
        xf[e] = (float)v;
        if (dt == NRV_U8) x[e] = (uint8_t)v;
        else { const int8_t c = (int8_t)v; memcpy(&x[e], &c, 1); }
    }
    pool_references(pc, xf, want, exact);
    uint8_t *y = xmalloc((size_t)ny + 128);
    memset(y, 0xA5, (size_t)ny + 128);
    nrv_tview xv = tv(x, dt, rank, xd), yv = tv(y + 64, dt, rank, yd);
    const nrv_tview *ins[1] = {&xv};
    const nrv_status st = run_op("pool", ins, 1, &yv, ia, 3 + 5 * pc->sr, NULL, 0, NULL, 0);
    NRV_EXPECT(st == NRV_OK, "pool of %s codes: %s (%s)", nrv_dtype_str(dt), nrv_status_str(st), nrv_last_error());
    int64_t differ = -1;
    for (int64_t e = 0; e < ny && differ < 0 && st == NRV_OK; e++) {
        const int want_code = exact[e] < (float)lo ? lo : (int)exact[e];
        const int got = dt == NRV_U8 ? (int)y[64 + e] : (int)(int8_t)y[64 + e];
        if (got != want_code) differ = e;
    }
    NRV_EXPECT(differ < 0, "pool of %s codes sr %d in %lld k %lld s %lld d %lld: output %lld differs", nrv_dtype_str(dt),
               pc->sr, (long long)pc->in[pc->sr - 1], (long long)pc->k[pc->sr - 1], (long long)pc->s[pc->sr - 1],
               (long long)pc->d[pc->sr - 1], (long long)differ);
    int guards = 1;
    for (int64_t e = 0; e < 64; e++) guards &= y[e] == 0xA5 && y[64 + ny + e] == 0xA5;
    NRV_EXPECT(guards, "pool of codes wrote outside y");
    free(xf), free(want), free(exact), free(x), free(y);
}

static void pool_check(const pool_case *pc) {
    const int rank = 2 + pc->sr;
    int64_t xd[4], yd[4], ia[13];
    pool_case_args(pc, xd, yd, ia);
    if (pc->kind == 0) pool_check_codes(pc, pc->c % 2 ? NRV_U8 : NRV_I8);
    nrv_tview xv = tv(NULL, NRV_F32, rank, xd);
    float *x = rand_floats(xv.numel, -2.0f, 1.0f); /* mostly negative: a max that counts padding as 0 shows */
    xv.data = x;
    obuf y = obuf_new(tv(NULL, NRV_F32, rank, yd).numel);
    nrv_tview yv = tv(y.p, NRV_F32, rank, yd);
    const nrv_tview *ins[1] = {&xv};
    const nrv_status st = run_op("pool", ins, 1, &yv, ia, 3 + 5 * pc->sr, NULL, 0, NULL, 0);
    NRV_EXPECT(st == NRV_OK, "pool kind %d sr %d: %s (%s)", pc->kind, pc->sr, nrv_status_str(st), nrv_last_error());
    if (st == NRV_OK) {
        float *want = xmalloc((size_t)y.n * sizeof(float)), *exact = xmalloc((size_t)y.n * sizeof(float));
        pool_references(pc, x, want, exact);
        int64_t where;
        const double err = nrv_test_err(y.p, want, y.n, RTOL, ATOL, &where);
        NRV_EXPECT(err <= 1.0,
                   "pool kind %d sr %d cip %d ceil %d in %lld k %lld s %lld d %lld p %lld,%lld: err %.3g at %lld "
                   "got %g want %g",
                   pc->kind, pc->sr, pc->cip, pc->ceil, (long long)pc->in[pc->sr - 1], (long long)pc->k[pc->sr - 1],
                   (long long)pc->s[pc->sr - 1], (long long)pc->d[pc->sr - 1], (long long)pc->pb[pc->sr - 1],
                   (long long)pc->pe[pc->sr - 1], err, (long long)where, where >= 0 ? y.p[where] : 0.0,
                   where >= 0 ? want[where] : 0.0);
        int64_t differ = -1;
        for (int64_t e = 0; e < y.n && differ < 0; e++)
            if (memcmp(&y.p[e], &exact[e], sizeof(float)) != 0) differ = e;
        NRV_EXPECT(differ < 0, "pool kind %d sr %d cip %d in %lldx%lld k %lldx%lld s %lld,%lld d %lld,%lld: "
                   "output %lld is %.9g, the direct loop's bits %.9g",
                   pc->kind, pc->sr, pc->cip, (long long)pc->in[0], (long long)pc->in[pc->sr - 1],
                   (long long)pc->k[0], (long long)pc->k[pc->sr - 1], (long long)pc->s[0],
                   (long long)pc->s[pc->sr - 1], (long long)pc->d[0], (long long)pc->d[pc->sr - 1],
                   (long long)differ, differ >= 0 ? y.p[differ] : 0.0, differ >= 0 ? exact[differ] : 0.0);
        free(want);
        free(exact);
    }
    NRV_EXPECT(obuf_guards_ok(&y), "pool wrote outside y");
    free(x);
    free(y.base);
}

static void test_pool(void) {
    nrv_test_seed(77);
    int cases = 0;
    for (int i = 0; i < 160; i++) {
        pool_case pc;
        memset(&pc, 0, sizeof pc);
        pc.kind = i & 1;
        pc.sr = 1 + ((i >> 1) & 1);
        pc.cip = (i >> 2) & 1;
        pc.ceil = (i >> 3) & 1;
        pc.n = rand_int(1, 2);
        pc.c = rand_int(1, 3);
        int ok = 1;
        for (int a = 0; a < pc.sr; a++) {
            pc.k[a] = rand_int(1, 4);
            pc.s[a] = rand_int(1, 3);
            pc.d[a] = i % 5 == 0 ? 2 : 1;
            const int64_t span = pc.d[a] * (pc.k[a] - 1) + 1;
            pc.pb[a] = rand_int(0, pc.k[a] - 1 < 2 ? pc.k[a] - 1 : 2);
            pc.pe[a] = rand_int(0, pc.k[a] - 1 < 2 ? pc.k[a] - 1 : 2);
            pc.in[a] = rand_int(1, 12);
            if (pc.in[a] + pc.pb[a] + pc.pe[a] < span) pc.in[a] = span;
        }
        for (int a = 0; a < pc.sr; a++)
            if (pool_out(&pc, a) < 1) ok = 0;
        if (!ok) continue;
        pool_check(&pc);
        cases++;
    }
    /* the ceil/count_include_pad corner: last window clipped by the end padding */
    {
        pool_case pc;
        memset(&pc, 0, sizeof pc);
        pc.kind = 1, pc.sr = 1, pc.cip = 1, pc.ceil = 1, pc.n = 1, pc.c = 2;
        pc.in[0] = 6, pc.k[0] = 3, pc.s[0] = 2, pc.d[0] = 1, pc.pb[0] = 1, pc.pe[0] = 1;
        pool_check(&pc);
        pc.kind = 0;
        pool_check(&pc);
        pc.kind = 1, pc.cip = 0;
        pool_check(&pc);
        cases += 3;
    }
    /* Larger planes: output rows wider than the 16 lanes folded at once, bands that split a
     * tall plane, windows of 16 taps and more (max: the separable passes), strides 1-3 and
     * dilation; and windows the band cannot hold (300 taps), which take the direct loop. */
    for (int i = 0; i < 48; i++) {
        pool_case pc;
        memset(&pc, 0, sizeof pc);
        pc.kind = i & 1;
        pc.sr = i % 6 == 5 ? 1 : 2;
        pc.cip = (i >> 1) & 1;
        pc.ceil = (i >> 2) & 1;
        pc.n = 1;
        pc.c = rand_int(1, 3);
        for (int a = 0; a < pc.sr; a++) {
            pc.k[a] = rand_int(1, 5);
            pc.s[a] = rand_int(1, 3);
            pc.d[a] = i % 7 == 3 ? 2 : 1;
            pc.pb[a] = rand_int(0, pc.k[a] - 1);
            pc.pe[a] = rand_int(0, pc.k[a] - 1);
            pc.in[a] = rand_int(17, 60);
        }
        if (i % 8 == 6) pc.in[0] = 150, pc.in[1] = 70, pc.s[0] = 1; /* several bands */
        if (i % 12 == 11) pc.sr = 1, pc.k[0] = 300, pc.in[0] = 700, pc.s[0] = 2, pc.d[0] = 1; /* direct loop */
        pool_check(&pc);
        cases++;
    }
    { /* max through the direct loop (300 taps), floats and codes */
        pool_case pc;
        memset(&pc, 0, sizeof pc);
        pc.kind = 0, pc.sr = 1, pc.n = 1, pc.c = 2;
        pc.in[0] = 640, pc.k[0] = 300, pc.s[0] = 3, pc.d[0] = 1, pc.pb[0] = 2, pc.pe[0] = 1;
        pool_check(&pc);
        pc.c = 3;
        pool_check(&pc);
        cases += 2;
    }
    printf("pool: %d cases\n", cases);

    /* errors: y untouched */
    int64_t xd[3] = {1, 2, 8}, yd[3] = {1, 2, 4};
    float *x = rand_floats(16, -1, 1);
    obuf y = obuf_new(8);
    const int64_t base[8] = {0, 1, 0, 3, 2, 1, 1, 1}; /* max, sr 1, k 3 s 2 d 1, pads 1,1 -> out 4 */
#define POOL_ERR(want, ...)                                                         \
    do {                                                                            \
        nrv_tview xv = tv(x, NRV_F32, 3, xd), yv = tv(y.p, NRV_F32, 3, yd);         \
        int64_t ia[8];                                                              \
        memcpy(ia, base, sizeof ia);                                                \
        int nia = 8;                                                                \
        const nrv_tview *ins[1] = {&xv};                                            \
        __VA_ARGS__;                                                                \
        NRV_EXPECT_STATUS(run_op("pool", ins, 1, &yv, ia, nia, NULL, 0, NULL, 0), want); \
        NRV_EXPECT(obuf_untouched(&y), "pool error case wrote y");                  \
    } while (0)
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[0] = 2);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[1] = 0);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[2] = 2);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[3] = 0);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[4] = 0);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[5] = 0);
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[6] = 3);    /* pad >= kernel */
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[3] = 2; ia[5] = 2; ia[7] = 2); /* pad >= kernel, < dilated span */
    POOL_ERR(NRV_ERR_INVALID_ARG, ia[7] = -1);
    POOL_ERR(NRV_ERR_INVALID_ARG, nia = 7);
    POOL_ERR(NRV_ERR_SHAPE, yv.dims[2] = 6);
    POOL_ERR(NRV_ERR_SHAPE, yv.dims[2] = 3);
    POOL_ERR(NRV_ERR_SHAPE, yv.dims[1] = 1);
    POOL_ERR(NRV_ERR_SHAPE, yv.rank = 4);
    POOL_ERR(NRV_ERR_SHAPE, xv.dims[2] = 0; ia[6] = 0; ia[7] = 0); /* window exceeds input */
    POOL_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_F64);
    POOL_ERR(NRV_ERR_DTYPE, yv.dtype = NRV_F16);
    POOL_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_U8);            /* codes in, floats out */
    POOL_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_I8; yv.dtype = NRV_I8; ia[0] = 1); /* average of codes */
#undef POOL_ERR
    free(x);
    free(y.base);
}

/* ------------------------------------------------------------------ global_pool */

static void test_global_pool(void) {
    nrv_test_seed(99);
    for (int kind = 0; kind <= 1; kind++)
        for (int sr = 1; sr <= 3; sr++) {
            int64_t xd[5] = {rand_int(1, 2), rand_int(1, 5)}, yd[5];
            for (int i = 0; i < sr; i++) xd[2 + i] = rand_int(1, 9);
            for (int i = 0; i < 2 + sr; i++) yd[i] = i < 2 ? xd[i] : 1;
            nrv_tview xv = tv(NULL, NRV_F32, 2 + sr, xd);
            float *x = rand_floats(xv.numel, -3, 1);
            xv.data = x;
            const int64_t planes = xd[0] * xd[1], sp = xv.numel / planes;
            obuf y = obuf_new(planes);
            nrv_tview yv = tv(y.p, NRV_F32, 2 + sr, yd);
            const nrv_tview *ins[1] = {&xv};
            const int64_t ia[1] = {kind};
            NRV_EXPECT_STATUS(run_op("global_pool", ins, 1, &yv, ia, 1, NULL, 0, NULL, 0), NRV_OK);
            float *want = xmalloc((size_t)planes * sizeof(float));
            for (int64_t p = 0; p < planes; p++) {
                /* two loops: one loop choosing between sum and max per element crashed
                 * aarch64-linux-gnu-gcc 12's vectorizer (ICE in vect_transform_reduction) */
                double sum = 0.0, mx = -DBL_MAX;
                if (kind)
                    for (int64_t i = 0; i < sp; i++) sum += x[p * sp + i];
                else
                    for (int64_t i = 0; i < sp; i++) mx = x[p * sp + i] > mx ? x[p * sp + i] : mx;
                want[p] = (float)(kind ? sum / (double)sp : mx);
            }
            int64_t where;
            const double err = nrv_test_err(y.p, want, planes, RTOL, ATOL, &where);
            NRV_EXPECT(err <= 1.0, "global_pool kind %d sr %d: err %.3g", kind, sr, err);
            NRV_EXPECT(obuf_guards_ok(&y), "global_pool wrote outside y");
            free(want);
            free(x);
            free(y.base);
        }
    /* planes of 1-1025 positions (the 8-lane folds and their tails); max bit for bit the
     * scalar fold from x[0], NaN included (skipped, but kept when it is x[0]) */
    static const int64_t sizes[] = {1, 7, 8, 9, 17, 400, 1025};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int kind = 0; kind <= 1; kind++) {
            const int64_t sp = sizes[si], planes = 5;
            int64_t xd3[3] = {1, planes, sp}, yd3[3] = {1, planes, 1};
            float *x = rand_floats(planes * sp, -3, 1);
            if (sp > 3) x[sp + 3] = NAN, x[2 * sp] = NAN; /* plane 1: inside; plane 2: first */
            nrv_tview xv = tv(x, NRV_F32, 3, xd3);
            obuf y = obuf_new(planes);
            nrv_tview yv = tv(y.p, NRV_F32, 3, yd3);
            const nrv_tview *ins[1] = {&xv};
            const int64_t ia[1] = {kind};
            NRV_EXPECT_STATUS(run_op("global_pool", ins, 1, &yv, ia, 1, NULL, 0, NULL, 0), NRV_OK);
            for (int64_t p = 0; p < planes; p++) {
                const float *xp = x + p * sp;
                if (kind == 0) {
                    float mx = xp[0];
                    for (int64_t i = 1; i < sp; i++) mx = xp[i] > mx ? xp[i] : mx;
                    NRV_EXPECT(memcmp(&mx, &y.p[p], sizeof mx) == 0, "global max of %lld: plane %lld is %g, want %g",
                               (long long)sp, (long long)p, y.p[p], mx);
                } else {
                    double sum = 0.0;
                    for (int64_t i = 0; i < sp; i++) sum += xp[i];
                    const float want = (float)(sum / (double)sp);
                    const int nan_plane = sp > 3 && (p == 1 || p == 2);
                    NRV_EXPECT(nan_plane ? isnan(y.p[p]) : fabsf(y.p[p] - want) <= 1e-6f * (1.0f + fabsf(want)),
                               "global average of %lld: plane %lld is %g, want %g", (long long)sp, (long long)p,
                               y.p[p], want);
                }
            }
            NRV_EXPECT(obuf_guards_ok(&y), "global_pool wrote outside y");
            free(x);
            free(y.base);
        }
    /* errors */
    int64_t xd[4] = {1, 3, 4, 5}, yd[4] = {1, 3, 1, 1};
    float *x = rand_floats(60, -1, 1);
    obuf y = obuf_new(3);
#define GP_ERR(want, ...)                                                                 \
    do {                                                                                  \
        nrv_tview xv = tv(x, NRV_F32, 4, xd), yv = tv(y.p, NRV_F32, 4, yd);               \
        int64_t ia[1] = {1};                                                              \
        int nia = 1;                                                                      \
        const nrv_tview *ins[1] = {&xv};                                                  \
        __VA_ARGS__;                                                                      \
        NRV_EXPECT_STATUS(run_op("global_pool", ins, 1, &yv, ia, nia, NULL, 0, NULL, 0), want); \
        NRV_EXPECT(obuf_untouched(&y), "global_pool error case wrote y");                 \
    } while (0)
    GP_ERR(NRV_ERR_INVALID_ARG, ia[0] = 2);
    GP_ERR(NRV_ERR_INVALID_ARG, nia = 0);
    GP_ERR(NRV_ERR_SHAPE, yv.dims[3] = 2);
    GP_ERR(NRV_ERR_SHAPE, yv.dims[1] = 2);
    GP_ERR(NRV_ERR_SHAPE, yv.rank = 3);
    GP_ERR(NRV_ERR_SHAPE, xv.rank = 2; yv.rank = 2);
    GP_ERR(NRV_ERR_SHAPE, xv.dims[2] = 0);
    GP_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_I64);
#undef GP_ERR
    free(x);
    free(y.base);
}

/* ------------------------------------------------------------------ channel_affine, instancenorm */

static void test_channel_affine(void) {
    nrv_test_seed(5);
    for (int t = 0; t < 16; t++) {
        const int act = t % (NRV_PLAN_ACT_LAST + 1), inplace = t >= 8;
        const int rank = 2 + (int)rand_int(0, 2);
        int64_t d[4] = {rand_int(1, 2), rand_int(1, 7), rand_int(1, 6), rand_int(1, 5)};
        nrv_tview xv = tv(NULL, NRV_F32, rank, d);
        const int64_t c = d[1], rest = xv.numel / (d[0] * c);
        float *x = rand_floats(xv.numel, -2, 2);
        float *sc = rand_floats(c, -1.5f, 1.5f), *sh = rand_floats(c, -1, 1);
        float *want = xmalloc((size_t)xv.numel * sizeof(float));
        float p0, p1;
        act_params(act, &p0, &p1);
        for (int64_t i = 0; i < xv.numel; i++) {
            const int64_t ch = (i / rest) % c;
            want[i] = (float)act_ref(act, (double)x[i] * sc[ch] + sh[ch], p0, p1);
        }
        obuf y = obuf_new(xv.numel);
        if (inplace) memcpy(y.p, x, (size_t)xv.numel * sizeof(float));
        xv.data = inplace ? (void *)y.p : (void *)x;
        const int64_t cd[1] = {c};
        nrv_tview sv = tv(sc, NRV_F32, 1, cd), hv = tv(sh, NRV_F32, 1, cd), yv = tv(y.p, NRV_F32, rank, d);
        const nrv_tview *ins[3] = {&xv, &sv, &hv};
        const int64_t ia[1] = {act};
        const float fa[2] = {p0, p1};
        NRV_EXPECT_STATUS(run_op("channel_affine", ins, 3, &yv, ia, 1, fa, 2, NULL, 0), NRV_OK);
        int64_t where;
        const double err = nrv_test_err(y.p, want, xv.numel, RTOL, ATOL, &where);
        NRV_EXPECT(err <= 1.0, "channel_affine act %s inplace %d: err %.3g at %lld", act_name(act), inplace, err,
                   (long long)where);
        NRV_EXPECT(obuf_guards_ok(&y), "channel_affine wrote outside y");
        free(x);
        free(sc);
        free(sh);
        free(want);
        free(y.base);
    }
    int64_t d[3] = {2, 3, 4}, cd[1] = {3};
    float *x = rand_floats(24, -1, 1), *sc = rand_floats(3, -1, 1), *sh = rand_floats(3, -1, 1);
    obuf y = obuf_new(24);
#define CA_ERR(want, ...)                                                                            \
    do {                                                                                             \
        nrv_tview xv = tv(x, NRV_F32, 3, d), sv = tv(sc, NRV_F32, 1, cd), hv = tv(sh, NRV_F32, 1, cd); \
        nrv_tview yv = tv(y.p, NRV_F32, 3, d);                                                       \
        const nrv_tview *ins[3] = {&xv, &sv, &hv};                                                   \
        int64_t ia[1] = {0};                                                                         \
        int nfa = 2, nin = 3;                                                                        \
        const float fa[2] = {0, 0};                                                                  \
        __VA_ARGS__;                                                                                 \
        NRV_EXPECT_STATUS(run_op("channel_affine", ins, nin, &yv, ia, 1, fa, nfa, NULL, 0), want);   \
        NRV_EXPECT(obuf_untouched(&y), "channel_affine error case wrote y");                         \
    } while (0)
    CA_ERR(NRV_ERR_INVALID_ARG, ia[0] = NRV_PLAN_ACT_LAST + 1);
    CA_ERR(NRV_ERR_INVALID_ARG, nfa = 0);
    CA_ERR(NRV_ERR_INVALID_ARG, nin = 2);
    CA_ERR(NRV_ERR_INVALID_ARG, ins[2] = NULL);
    CA_ERR(NRV_ERR_SHAPE, sv.dims[0] = 2);
    CA_ERR(NRV_ERR_SHAPE, hv.rank = 0);
    CA_ERR(NRV_ERR_SHAPE, yv.dims[2] = 3);
    CA_ERR(NRV_ERR_SHAPE, xv.rank = 1; yv.rank = 1);
    CA_ERR(NRV_ERR_DTYPE, sv.dtype = NRV_F16);
    CA_ERR(NRV_ERR_DTYPE, yv.dtype = NRV_F64);
#undef CA_ERR
    free(x);
    free(sc);
    free(sh);
    free(y.base);
}

static void test_instancenorm(void) {
    nrv_test_seed(6);
    for (int t = 0; t < 10; t++) {
        const int rank = 3 + (t % 2), inplace = t >= 6;
        int64_t d[4] = {rand_int(1, 2), rand_int(1, 5), rand_int(1, 9), rand_int(1, 7)};
        nrv_tview xv = tv(NULL, NRV_F32, rank, d);
        const int64_t c = d[1], rest = xv.numel / (d[0] * c);
        float *x = rand_floats(xv.numel, -1, 3);
        float *sc = rand_floats(c, -1.5f, 1.5f), *bi = rand_floats(c, -1, 1);
        const float eps = t == 0 ? 0.0f : 1e-5f;
        if (t == 0) /* eps 0 needs a non-constant plane */
            for (int64_t i = 0; i < xv.numel; i++) x[i] = (float)(i % 3);
        float *want = xmalloc((size_t)xv.numel * sizeof(float));
        for (int64_t p = 0; p < d[0] * c; p++) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < rest; i++) mean += x[p * rest + i];
            mean /= (double)rest;
            for (int64_t i = 0; i < rest; i++) var += (x[p * rest + i] - mean) * (x[p * rest + i] - mean);
            var /= (double)rest;
            for (int64_t i = 0; i < rest; i++)
                want[p * rest + i] = (float)((x[p * rest + i] - mean) / sqrt(var + eps) * sc[p % c] + bi[p % c]);
        }
        obuf y = obuf_new(xv.numel);
        if (inplace) memcpy(y.p, x, (size_t)xv.numel * sizeof(float));
        xv.data = inplace ? (void *)y.p : (void *)x;
        const int64_t cd[1] = {c};
        nrv_tview sv = tv(sc, NRV_F32, 1, cd), bv = tv(bi, NRV_F32, 1, cd), yv = tv(y.p, NRV_F32, rank, d);
        const nrv_tview *ins[3] = {&xv, &sv, &bv};
        const float fa[1] = {eps};
        NRV_EXPECT_STATUS(run_op("instancenorm", ins, 3, &yv, NULL, 0, fa, 1, NULL, 0), NRV_OK);
        int64_t where;
        const double err = nrv_test_err(y.p, want, xv.numel, RTOL, ATOL, &where);
        NRV_EXPECT(err <= 1.0, "instancenorm case %d: err %.3g at %lld", t, err, (long long)where);
        NRV_EXPECT(obuf_guards_ok(&y), "instancenorm wrote outside y");
        free(x);
        free(sc);
        free(bi);
        free(want);
        free(y.base);
    }
    int64_t d[3] = {2, 3, 4}, cd[1] = {3};
    float *x = rand_floats(24, -1, 1), *sc = rand_floats(3, -1, 1), *bi = rand_floats(3, -1, 1);
    obuf y = obuf_new(24);
#define IN_ERR(want, ...)                                                                            \
    do {                                                                                             \
        nrv_tview xv = tv(x, NRV_F32, 3, d), sv = tv(sc, NRV_F32, 1, cd), bv = tv(bi, NRV_F32, 1, cd); \
        nrv_tview yv = tv(y.p, NRV_F32, 3, d);                                                       \
        const nrv_tview *ins[3] = {&xv, &sv, &bv};                                                   \
        float fa[1] = {1e-5f};                                                                       \
        int nfa = 1;                                                                                 \
        __VA_ARGS__;                                                                                 \
        NRV_EXPECT_STATUS(run_op("instancenorm", ins, 3, &yv, NULL, 0, fa, nfa, NULL, 0), want);     \
        NRV_EXPECT(obuf_untouched(&y), "instancenorm error case wrote y");                           \
    } while (0)
    IN_ERR(NRV_ERR_INVALID_ARG, fa[0] = -1.0f);
    IN_ERR(NRV_ERR_INVALID_ARG, fa[0] = NAN);
    IN_ERR(NRV_ERR_INVALID_ARG, nfa = 2);
    IN_ERR(NRV_ERR_SHAPE, bv.dims[0] = 4);
    IN_ERR(NRV_ERR_SHAPE, yv.dims[1] = 2);
    IN_ERR(NRV_ERR_DTYPE, xv.dtype = NRV_F16);
#undef IN_ERR
    free(x);
    free(sc);
    free(bi);
    free(y.base);
}

/* ------------------------------------------------------------------ pad */

/* Reference: for every output element, its source in x (or the constant), by coordinates. */
static void pad_reference(int mode, int rank, const int64_t *xd, const int64_t *pb, const int64_t *pe,
                          const void *x, size_t es, const void *value, void *y) {
    int64_t yd[NRV_PLAN_MAX_RANK], ynumel = 1;
    for (int i = 0; i < rank; i++) {
        yd[i] = xd[i] + pb[i] + pe[i];
        ynumel *= yd[i];
    }
    for (int64_t e = 0; e < ynumel; e++) {
        int64_t rem = e, src = 0, stride = 1;
        int constant = 0;
        for (int i = rank - 1; i >= 0; i--) {
            const int64_t o = rem % yd[i];
            rem /= yd[i];
            /* crop by the negative pads, then pad the kept extent [lo, lo + cd) */
            const int64_t lo = pb[i] < 0 ? -pb[i] : 0, hi = xd[i] - (pe[i] < 0 ? -pe[i] : 0);
            const int64_t cd = hi - lo;
            int64_t j = o - (pb[i] > 0 ? pb[i] : 0); /* index in the kept extent */
            if (j < 0 || j >= cd) {
                if (mode == 0) constant = 1;
                else if (mode == 1) j = j < 0 ? -j : 2 * (cd - 1) - j;
                else if (mode == 3) while (j < 0 || j >= cd) j += j < 0 ? cd : -cd; /* wrap, step by step */
                else j = j < 0 ? 0 : cd - 1;
            }
            src += (lo + j) * stride;
            stride *= xd[i];
        }
        memcpy((char *)y + e * es, constant ? value : (const char *)x + src * es, es);
    }
}

static int pad_case(nrv_dtype dt, int mode, int rank, const int64_t *xd, const int64_t *pb, const int64_t *pe,
                    float value) {
    const size_t es = nrv_dtype_size(dt);
    int64_t yd[NRV_PLAN_MAX_RANK], ia[2 + 2 * NRV_PLAN_MAX_RANK];
    ia[0] = mode, ia[1] = rank;
    for (int i = 0; i < rank; i++) {
        yd[i] = xd[i] + pb[i] + pe[i];
        ia[2 + i] = pb[i];
        ia[2 + rank + i] = pe[i];
    }
    nrv_tview xv = tv(NULL, dt, rank, xd), yv0 = tv(NULL, dt, rank, yd);
    unsigned char *x = xmalloc((size_t)xv.numel * es);
    for (int64_t i = 0; i < (int64_t)((size_t)xv.numel * es); i++) x[i] = (unsigned char)nrv_test_u64();
    if (dt == NRV_F32)
        for (int64_t i = 0; i < xv.numel; i++) ((float *)(void *)x)[i] = nrv_test_uniform(-1, 1);
    xv.data = x;
    const size_t ybytes = (size_t)yv0.numel * es;
    unsigned char *ybase = xmalloc(ybytes + 2 * 64), *y = ybase + 64, *want = xmalloc(ybytes);
    memset(ybase, 0xA5, ybytes + 128);
    nrv_tview yv = tv(y, dt, rank, yd);
    /* the constant as the op should convert it */
    unsigned char cv[8];
    switch (dt) {
    case NRV_F32: memcpy(cv, &value, 4); break;
    case NRV_I64: { const int64_t v = (int64_t)value; memcpy(cv, &v, 8); break; }
    case NRV_U8: { const uint8_t v = (uint8_t)value; memcpy(cv, &v, 1); break; }
    case NRV_F16: { const uint16_t v = nrv_float_to_half(value); memcpy(cv, &v, 2); break; }
    default: memset(cv, 0, sizeof cv); break;
    }
    pad_reference(mode, rank, xd, pb, pe, x, es, cv, want);
    const nrv_tview *ins[1] = {&xv};
    const nrv_status st = run_op("pad", ins, 1, &yv, ia, 2 + 2 * rank, &value, 1, NULL, 0);
    int ok = st == NRV_OK && memcmp(y, want, ybytes) == 0;
    for (int i = 0; i < 64; i++) ok = ok && ybase[i] == 0xA5 && y[ybytes + (size_t)i] == 0xA5;
    NRV_EXPECT(ok, "pad dtype %s mode %d rank %d: %s (%s)", nrv_dtype_str(dt), mode, rank, nrv_status_str(st),
               st == NRV_OK ? "values differ or wrote outside y" : nrv_last_error());
    free(x);
    free(ybase);
    free(want);
    return ok;
}

static void test_pad(void) {
    nrv_test_seed(11);
    /* the VAD's hot case: [1, 576] f32, reflect 64 at the end of the last axis */
    {
        const int64_t xd[2] = {1, 576}, pb[2] = {0, 0}, pe[2] = {0, 64};
        pad_case(NRV_F32, 1, 2, xd, pb, pe, 0.0f);
        const int64_t pb2[2] = {0, 64}, pe2[2] = {0, 64};
        pad_case(NRV_F32, 1, 2, xd, pb2, pe2, 0.0f);
    }
    static const nrv_dtype dts[] = {NRV_F32, NRV_I64, NRV_U8, NRV_F16};
    int cases = 0;
    for (int t = 0; t < 320; t++) {
        const nrv_dtype dt = dts[t % 4];
        const int mode = (t / 4) % 4;
        const int rank = 1 + (int)rand_int(0, 3);
        int64_t xd[4], pb[4], pe[4];
        int ok = 1;
        for (int i = 0; i < rank; i++) {
            xd[i] = rand_int(mode == 0 ? 0 : 1, 6);
            pb[i] = rand_int(-2, mode == 3 ? 9 : 3); /* wrap: pads past the extent wrap again */
            pe[i] = rand_int(-2, mode == 3 ? 9 : 3);
            if (xd[i] + pb[i] + pe[i] < 0) ok = 0;
            const int64_t cd = xd[i] - (pb[i] < 0 ? -pb[i] : 0) - (pe[i] < 0 ? -pe[i] : 0);
            if (cd < 0) ok = 0;
            if (mode == 1 && ((pb[i] > 0 && pb[i] >= cd) || (pe[i] > 0 && pe[i] >= cd))) ok = 0;
            if ((mode == 2 || mode == 3) && cd == 0 && (pb[i] > 0 || pe[i] > 0)) ok = 0;
        }
        if (!ok) continue;
        pad_case(dt, mode, rank, xd, pb, pe, dt == NRV_U8 ? 7.0f : -2.5f * (dt != NRV_I64) + 3.0f);
        cases++;
    }
    printf("pad: %d random cases\n", cases);
    /* rank 0 */
    {
        float x = 4.5f, y = 0.0f;
        nrv_tview xv = tv(&x, NRV_F32, 0, NULL), yv = tv(&y, NRV_F32, 0, NULL);
        const nrv_tview *ins[1] = {&xv};
        const int64_t ia[2] = {0, 0};
        const float v = 1.0f;
        NRV_EXPECT_STATUS(run_op("pad", ins, 1, &yv, ia, 2, &v, 1, NULL, 0), NRV_OK);
        NRV_EXPECT(y == 4.5f, "rank-0 pad gave %g", (double)y);
    }
    /* errors */
    int64_t xd[2] = {3, 4}, yd[2] = {3, 7};
    float *x = rand_floats(12, -1, 1);
    obuf y = obuf_new(21);
    const int64_t base[6] = {1, 2, 0, 1, 0, 2}; /* reflect, rank 2, pads (0,1),(0,2) */
#define PAD_ERR(want, ...)                                                                \
    do {                                                                                  \
        nrv_tview xv = tv(x, NRV_F32, 2, xd), yv = tv(y.p, NRV_F32, 2, yd);               \
        int64_t ia[6];                                                                    \
        memcpy(ia, base, sizeof ia);                                                      \
        int nia = 6, nfa = 1;                                                             \
        const float v = 0.0f;                                                             \
        const nrv_tview *ins[1] = {&xv};                                                  \
        __VA_ARGS__;                                                                      \
        NRV_EXPECT_STATUS(run_op("pad", ins, 1, &yv, ia, nia, &v, nfa, NULL, 0), want);   \
        NRV_EXPECT(obuf_untouched(&y), "pad error case wrote y");                         \
    } while (0)
    PAD_ERR(NRV_ERR_INVALID_ARG, ia[0] = 4);
    PAD_ERR(NRV_ERR_INVALID_ARG, nia = 5);
    PAD_ERR(NRV_ERR_INVALID_ARG, nia = 1);
    PAD_ERR(NRV_ERR_INVALID_ARG, nfa = 0);
    PAD_ERR(NRV_ERR_INVALID_ARG, ia[3] = 4; ia[5] = -1);    /* reflect pad 4 >= dim 4 */
    PAD_ERR(NRV_ERR_INVALID_ARG, ia[3] = 3; ia[5] = -2; yv.dims[1] = 5); /* 3 >= cropped 4-2 */
    PAD_ERR(NRV_ERR_SHAPE, yv.dims[1] = 8);
    PAD_ERR(NRV_ERR_SHAPE, yv.dims[0] = 2);
    PAD_ERR(NRV_ERR_SHAPE, ia[1] = 3);
    PAD_ERR(NRV_ERR_SHAPE, yv.rank = 1);
    PAD_ERR(NRV_ERR_SHAPE, ia[0] = 0; ia[2] = -4; ia[4] = 0; ia[3] = 1; ia[5] = 2); /* dim 3 - 4 < 0 */
    PAD_ERR(NRV_ERR_DTYPE, yv.dtype = NRV_I32);
    PAD_ERR(NRV_ERR_DTYPE, xv.dtype = 42; yv.dtype = 42);
#undef PAD_ERR
    free(x);
    free(y.base);
}

/* ------------------------------------------------------------------ rdft */

#define RDFT_PI 3.14159265358979323846

/* The twiddle table of op rdft as the compiler writes it (passes.py rdft_table), in double. */
static float *rdft_table_new(int64_t n) {
    const int64_t m = n / 2;
    float *t = xmalloc((size_t)nrv_rdft_table_floats(n) * sizeof(float));
    memset(t, 0, (size_t)nrv_rdft_table_floats(n) * sizeof(float));
    for (int64_t h = 1; h < m; h *= 2)
        for (int64_t j = 0; j < h; j++) {
            t[h - 1 + j] = (float)cos(-RDFT_PI * (double)j / (double)h);
            t[m + h - 1 + j] = (float)sin(-RDFT_PI * (double)j / (double)h);
        }
    for (int64_t k = 0; k < m; k++) {
        t[2 * m + k] = (float)cos(2 * RDFT_PI * (double)k / (double)n);
        t[3 * m + k] = (float)sin(2 * RDFT_PI * (double)k / (double)n);
    }
    return t;
}

/* One case against the DFT in double: batch b, signal length len, window n, stride, pads,
 * bins, im_sign. Exact input and scratch sizes, canaries around y. */
static void rdft_case(int64_t b, int64_t len, int64_t n, int64_t stride, int64_t pb, int64_t pe, int64_t bins,
                      int64_t sign) {
    const int64_t frames = (len + pb + pe - n) / stride + 1;
    const int64_t xd[3] = {b, 1, len}, wd[1] = {n}, td[1] = {nrv_rdft_table_floats(n)}, yd[3] = {b, 2 * bins, frames};
    float *x = rand_floats(b * len, -1, 1), *win = rand_floats(n, 0, 1), *table = rdft_table_new(n);
    const size_t sb = (size_t)nrv_rdft_work_bytes(n);
    void *scratch = aligned_alloc(16, (sb + 15) / 16 * 16);
    obuf y = obuf_new(b * 2 * bins * frames);
    nrv_tview xv = tv(x, NRV_F32, 3, xd), wv = tv(win, NRV_F32, 1, wd), tw = tv(table, NRV_F32, 1, td);
    nrv_tview yv = tv(y.p, NRV_F32, 3, yd);
    const nrv_tview *ins[3] = {&xv, &wv, &tw};
    const int64_t ia[5] = {stride, pb, pe, bins, sign};
    NRV_EXPECT_STATUS(run_op("rdft", ins, 3, &yv, ia, 5, NULL, 0, scratch, sb), NRV_OK);
    double worst = 0.0, scale = 0.0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t f = 0; f < frames; f++)
            for (int64_t k = 0; k < bins; k++) {
                double re = 0.0, im = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    const int64_t i = f * stride - pb + j;
                    if (i < 0 || i >= len) continue;
                    const double a = (double)x[bi * len + i] * (double)win[j];
                    re += a * cos(2 * RDFT_PI * (double)(j * k % n) / (double)n);
                    im -= a * sin(2 * RDFT_PI * (double)(j * k % n) / (double)n);
                }
                const float *yb = y.p + bi * 2 * bins * frames;
                const double e1 = fabs(re - yb[k * frames + f]), e2 = fabs((double)sign * im - yb[(bins + k) * frames + f]);
                worst = fmax(worst, fmax(e1, e2));
                scale = fmax(scale, fmax(fabs(re), fabs(im)));
            }
    /* fp32 FFT: error grows like log2(n)·eps·|X|max */
    NRV_EXPECT(worst <= 2e-6 * (scale + 1.0), "rdft b=%lld len=%lld n=%lld stride=%lld pads=%lld,%lld bins=%lld sign=%lld: "
               "max error %.3g (scale %.3g)", (long long)b, (long long)len, (long long)n, (long long)stride,
               (long long)pb, (long long)pe, (long long)bins, (long long)sign, worst, scale);
    NRV_EXPECT(obuf_guards_ok(&y), "rdft n=%lld wrote past y", (long long)n);
    free(x), free(win), free(table), free(scratch), free(y.base);
}

static void test_rdft(void) {
    /* silero VAD's STFT (4 frames of 256, stride 128), then awkward shapes: frame counts not
     * a multiple of the 4 lanes, pads past both ends, partial bin ranges, n from 4 up */
    rdft_case(1, 640, 256, 128, 0, 0, 129, 1);
    rdft_case(2, 320, 128, 64, 0, 0, 65, 1);
    rdft_case(1, 1000, 512, 160, 256, 256, 257, -1);
    rdft_case(3, 7, 4, 1, 2, 1, 3, 1);
    rdft_case(1, 13, 8, 3, 0, 5, 5, -1);
    rdft_case(2, 97, 16, 7, 9, 0, 2, 1);
    rdft_case(1, 300, 64, 17, 31, 63, 33, 1);
    rdft_case(1, 2048, 2048, 1, 0, 0, 1025, 1);
    for (int i = 0; i < 20; i++) {
        const int64_t n = (int64_t)4 << rand_int(0, 7), stride = rand_int(1, n), pb = rand_int(0, n), pe = rand_int(0, n);
        const int64_t len = rand_int(n > pb + pe ? n - pb - pe : 1, 3 * n);
        rdft_case(rand_int(1, 2), len, n, stride, pb, pe, rand_int(1, n / 2 + 1), rand_int(0, 1) ? 1 : -1);
    }

    /* bad attributes, shapes and scratch: a clear status, y untouched */
    const int64_t n = 16, len = 40, bins = 9, frames = (len - n) / 8 + 1;
    const int64_t xd[3] = {1, 1, len}, wd[1] = {n}, td[1] = {nrv_rdft_table_floats(n)}, yd[3] = {1, 2 * bins, frames};
    float *x = rand_floats(len, -1, 1), *win = rand_floats(n, 0, 1), *table = rdft_table_new(n);
    const size_t sb = (size_t)nrv_rdft_work_bytes(n);
    void *scratch = aligned_alloc(16, (sb + 15) / 16 * 16);
    obuf y = obuf_new(2 * bins * frames);
#define RDFT_ERR(want, ...)                                                                              \
    do {                                                                                                 \
        int64_t xdd[3] = {xd[0], xd[1], xd[2]}, wdd[1] = {wd[0]}, tdd[1] = {td[0]}, ydd[3] = {yd[0], yd[1], yd[2]}; \
        int64_t ia[5] = {8, 0, 0, bins, 1};                                                              \
        size_t sbytes = sb;                                                                              \
        void *scr = scratch;                                                                             \
        __VA_ARGS__;                                                                                     \
        nrv_tview xv = tv(x, NRV_F32, 3, xdd), wv = tv(win, NRV_F32, 1, wdd), tw = tv(table, NRV_F32, 1, tdd); \
        nrv_tview yv = tv(y.p, NRV_F32, 3, ydd);                                                         \
        const nrv_tview *ins[3] = {&xv, &wv, &tw};                                                       \
        NRV_EXPECT_STATUS(run_op("rdft", ins, 3, &yv, ia, 5, NULL, 0, scr, sbytes), want);               \
        NRV_EXPECT(obuf_untouched(&y), "rdft error case wrote y");                                       \
    } while (0)
    RDFT_ERR(NRV_ERR_SHAPE, wdd[0] = 12);                   /* not a power of two */
    RDFT_ERR(NRV_ERR_SHAPE, tdd[0] = 31);                   /* table size */
    RDFT_ERR(NRV_ERR_INVALID_ARG, ia[3] = n / 2 + 2);       /* too many bins */
    RDFT_ERR(NRV_ERR_INVALID_ARG, ia[3] = 0);
    RDFT_ERR(NRV_ERR_INVALID_ARG, ia[4] = 0);               /* im_sign */
    RDFT_ERR(NRV_ERR_INVALID_ARG, ia[0] = 0);               /* stride */
    RDFT_ERR(NRV_ERR_INVALID_ARG, ia[1] = -1);              /* pad */
    RDFT_ERR(NRV_ERR_INVALID_ARG, sbytes = sb - 1);         /* scratch too small */
    RDFT_ERR(NRV_ERR_INVALID_ARG, scr = (char *)scratch + 4); /* scratch misaligned */
    RDFT_ERR(NRV_ERR_SHAPE, ydd[2] = frames + 1);           /* output frames */
    RDFT_ERR(NRV_ERR_SHAPE, ydd[1] = 2 * bins - 1);         /* output channels */
    RDFT_ERR(NRV_ERR_SHAPE, xdd[1] = 2);                    /* two input channels */
    RDFT_ERR(NRV_ERR_SHAPE, xdd[2] = n - 1);                /* input shorter than the window */
#undef RDFT_ERR
    free(x), free(win), free(table), free(scratch), free(y.base);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("conv") && nrv_plan_op_find("pool") && nrv_plan_op_find("global_pool") &&
                   nrv_plan_op_find("channel_affine") && nrv_plan_op_find("instancenorm") && nrv_plan_op_find("pad"),
               "conv-family ops not all registered");
    NRV_EXPECT(nrv_plan_op_find("conv") && nrv_plan_op_find("conv")->kernel_op &&
                   strcmp(nrv_plan_op_find("conv")->kernel_op, "gemm") == 0,
               "conv kernel_op is not gemm");
    test_conv();
    test_conv_errors();
    test_rdft();
    test_pool();
    test_global_pool();
    test_channel_affine();
    test_instancenorm();
    test_pad();
    return nrv_test_summary("test_plan_conv");
}
