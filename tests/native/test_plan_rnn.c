/* test_plan_rnn.c — the rnn plan ops (lstm, gru) against straightforward double-precision
 * references that follow the ONNX operator formulas (opset 14, layout 0, default
 * activations), one batch entry and one time step at a time.
 *
 * Conventions the references share with the ops (onnxruntime's): clip > 0 clamps every gate
 * pre-activation (peephole term included) to [-clip, clip]; input_forget gives f = 1 - i;
 * steps t >= sequence_lens[b] give Y = 0 and keep b's state; reverse runs t = len - 1 .. 0.
 *
 * Every case runs once per variant round: round k forces linear, sigmoid and tanh to their
 * k-th runnable variant (the last one when an op has fewer). Scratch is allocated to exactly
 * the documented size and outputs carry a canary tail, so an ASan build catches any overrun;
 * error cases must leave sentinel-filled outputs untouched.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nrv_test.h"
#include "plan/plan_ops.h"

#define RTOL 1e-4
#define ATOL 1e-5
#define GUARD 16
#define SENTINEL 12345.5f

static const char *const kOps[] = {"linear", "sigmoid", "tanh", "gemm"}; /* gemm: R's panels (linear_panels) */
#include "nrv_plan_test.h"

/* ------------------------------------------------------------------ case description */

typedef struct rnn_case {
    int gru;            /* 0 lstm, 1 gru */
    int64_t seq, batch, in, hid;
    int direction;      /* 0 forward, 1 reverse, 2 bidirectional */
    int with_b, with_seq_lens, with_init_h, with_init_c, with_p;
    int input_forget;   /* lstm */
    int lbr;            /* gru: linear_before_reset */
    float clip;
} rnn_case;

/* All tensors of one case, inputs random, outputs sentinel-filled. */
typedef struct rnn_data {
    int64_t dirs, gates;
    float *X, *W, *R, *B, *h0, *c0, *P;
    int32_t *lens;
    float *Y, *Yh, *Yc, *Rp;
    nrv_tview vX, vW, vR, vB, vL, vH0, vC0, vP, vY, vYh, vYc, vRp;
    void *scratch;
    size_t scratch_bytes;
} rnn_data;

/* 1: the scratch also holds every step's input projection (what the compiler reserves;
 * one product before the time loop); 0: the minimum (projected step by step). */
static int g_projection_room;
/* 1: R also as panels (op_rnn.c rnn_check_r_panels; the compiler's select_rnn_panels), the
 * step's product through linear_panels. */
static int g_panels;

static size_t scratch_bytes_for(const rnn_case *c) {
    const size_t b = (size_t)c->batch, h = (size_t)c->hid, gates = c->gru ? 3 : 4;
    const size_t min = c->gru ? 4 * b * 3 * h * 2 + 4 * b * h : 4 * b * 4 * h * 2;
    return min + (g_projection_room ? 4 * (size_t)c->seq * b * gates * h : 0);
}

static void data_make(const rnn_case *c, rnn_data *d) {
    memset(d, 0, sizeof *d);
    const int64_t dirs = c->direction == 2 ? 2 : 1, G = (c->gru ? 3 : 4) * c->hid, H = c->hid;
    d->dirs = dirs;
    d->gates = c->gru ? 3 : 4;
    const float ws = 1.5f / sqrtf((float)(c->in + H)); /* keeps gates mostly out of saturation */
    d->X = rnd(c->seq * c->batch * c->in, 1.0f);
    d->W = rnd(dirs * G * c->in, ws);
    d->R = rnd(dirs * G * H, ws);
    d->B = rnd(dirs * 2 * G, 0.5f);
    d->h0 = rnd(dirs * c->batch * H, 1.0f);
    d->c0 = rnd(dirs * c->batch * H, 1.0f);
    d->P = rnd(dirs * 3 * H, 0.5f);
    d->lens = xcalloc((size_t)(c->batch + 1) * sizeof(int32_t));
    for (int64_t b = 0; b < c->batch; b++) {
        /* a mix of full, shorter and (for the third entry) empty sequences */
        int64_t len = c->seq - (b % 3 == 1 ? (c->seq + 1) / 2 : 0);
        if (b % 3 == 2) len = 0;
        d->lens[b] = (int32_t)len;
    }
    const int64_t ny = c->seq * dirs * c->batch * H, nh = dirs * c->batch * H;
    d->Y = outbuf(ny);
    d->Yh = outbuf(nh);
    d->Yc = outbuf(nh);
    d->vX = mkview(d->X, NRV_F32, 3, (const int64_t[]){c->seq, c->batch, c->in});
    d->vW = mkview(d->W, NRV_F32, 3, (const int64_t[]){dirs, G, c->in});
    d->vR = mkview(d->R, NRV_F32, 3, (const int64_t[]){dirs, G, H});
    d->vB = mkview(d->B, NRV_F32, 2, (const int64_t[]){dirs, 2 * G});
    d->vL = mkview(d->lens, NRV_I32, 1, (const int64_t[]){c->batch});
    d->vH0 = mkview(d->h0, NRV_F32, 3, (const int64_t[]){dirs, c->batch, H});
    d->vC0 = mkview(d->c0, NRV_F32, 3, (const int64_t[]){dirs, c->batch, H});
    d->vP = mkview(d->P, NRV_F32, 2, (const int64_t[]){dirs, 3 * H});
    d->vY = mkview(d->Y, NRV_F32, 4, (const int64_t[]){c->seq, dirs, c->batch, H});
    d->vYh = mkview(d->Yh, NRV_F32, 3, (const int64_t[]){dirs, c->batch, H});
    d->vYc = mkview(d->Yc, NRV_F32, 3, (const int64_t[]){dirs, c->batch, H});
    if (g_panels) { /* per direction, R's row blocks packed back to back */
        const int64_t zr = c->gru && !c->lbr ? 2 * H : G, blocks[2] = {zr, G - zr};
        int64_t per = 0;
        for (int i = 0; i < 2; i++) per += blocks[i] ? nrv_panels_floats(blocks[i], H) : 0;
        d->Rp = aligned_alloc(64, ((size_t)(dirs * per) * sizeof(float) + 63) / 64 * 64 + 64);
        for (int64_t dir = 0; dir < dirs; dir++)
            for (int i = 0, r0 = 0, at = 0; i < 2 && blocks[i]; r0 += (int)blocks[i], i++) {
                nrv_panels_pack(d->R + (dir * G + r0) * H, blocks[i], H, d->Rp + dir * per + at);
                at += (int)nrv_panels_floats(blocks[i], H);
            }
        d->vRp = mkview(d->Rp, NRV_F32, 2, (const int64_t[]){dirs, per});
    }
    d->scratch_bytes = scratch_bytes_for(c);
    d->scratch = d->scratch_bytes ? malloc(d->scratch_bytes) : NULL;
    if (d->scratch) memset(d->scratch, 0xff, d->scratch_bytes); /* NaN garbage */
}

static void data_free(rnn_data *d) {
    free(d->X);
    free(d->W);
    free(d->R);
    free(d->B);
    free(d->h0);
    free(d->c0);
    free(d->P);
    free(d->lens);
    free(d->Y);
    free(d->Yh);
    free(d->Yc);
    free(d->Rp);
    free(d->scratch);
}

/* Runs the op on d as the case says. */
static nrv_status data_run(const rnn_case *c, rnn_data *d) {
    const nrv_op_def *def = nrv_plan_op_find(c->gru ? "gru" : "lstm");
    if (!def) return NRV_ERR_INTERNAL;
    const nrv_tview *in[11] = {&d->vX,
                               &d->vW,
                               &d->vR,
                               c->with_b ? &d->vB : NULL,
                               c->with_seq_lens ? &d->vL : NULL,
                               c->with_init_h ? &d->vH0 : NULL,
                               c->gru ? NULL : c->with_init_c ? &d->vC0 : NULL,
                               c->gru ? NULL : c->with_p ? &d->vP : NULL,
                               NULL, NULL, NULL};
    if (d->Rp) in[c->gru ? 8 : 10] = &d->vRp;
    nrv_tview *out[3] = {&d->vY, &d->vYh, &d->vYc};
    const int64_t ia[3] = {c->direction, c->hid, c->gru ? c->lbr : c->input_forget};
    const float fa[1] = {c->clip};
    nrv_op_args a;
    memset(&a, 0, sizeof a);
    a.type = c->gru ? "gru" : "lstm";
    a.name = "test_node";
    a.in = in;
    a.n_in = d->Rp ? (c->gru ? 9 : 11) : (c->gru ? 6 : 8);
    a.out = out;
    a.n_out = c->gru ? 2 : 3;
    a.iattr = ia;
    a.n_iattr = 3;
    a.fattr = fa;
    a.n_fattr = 1;
    a.scratch = d->scratch;
    a.scratch_bytes = d->scratch_bytes;
    return def->run(&a);
}

/* ------------------------------------------------------------------ references */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double clipd(double x, double clip) { return clip > 0 ? (x < -clip ? -clip : (x > clip ? clip : x)) : x; }

/* Pre-activation of gate row r (0 <= r < G) for direction dir: X_t·W_r + h·R_r (+ biases). */
static double pre_x(const rnn_case *c, const rnn_data *d, int64_t dir, int64_t t, int64_t b, int64_t r) {
    const int64_t G = d->gates * c->hid;
    const float *x = d->X + (t * c->batch + b) * c->in, *w = d->W + (dir * G + r) * c->in;
    double acc = c->with_b ? d->B[dir * 2 * G + r] : 0.0;
    for (int64_t i = 0; i < c->in; i++) acc += (double)x[i] * w[i];
    return acc;
}
static double pre_h(const rnn_case *c, const rnn_data *d, int64_t dir, const double *h, int64_t r) {
    const int64_t G = d->gates * c->hid, H = c->hid;
    const float *w = d->R + (dir * G + r) * H;
    double acc = c->with_b ? d->B[dir * 2 * G + G + r] : 0.0;
    for (int64_t i = 0; i < H; i++) acc += h[i] * w[i];
    return acc;
}

/* Fills want_y [seq, dirs, batch, H], want_h and want_c [dirs, batch, H]. */
static void reference(const rnn_case *c, const rnn_data *d, double *want_y, double *want_h, double *want_c) {
    const int64_t H = c->hid, dirs = d->dirs;
    double *h = xcalloc((size_t)H * sizeof(double)), *cs = xcalloc((size_t)H * sizeof(double));
    double *hn = xcalloc((size_t)H * sizeof(double)), *rh = xcalloc((size_t)H * sizeof(double));
    for (int64_t dir = 0; dir < dirs; dir++) {
        const int reverse = c->direction == 1 || dir == 1;
        for (int64_t b = 0; b < c->batch; b++) {
            const int64_t sidx = (dir * c->batch + b) * H;
            for (int64_t j = 0; j < H; j++) {
                h[j] = c->with_init_h ? d->h0[sidx + j] : 0.0;
                cs[j] = c->with_init_c && !c->gru ? d->c0[sidx + j] : 0.0;
            }
            const int64_t len = c->with_seq_lens ? d->lens[b] : c->seq;
            for (int64_t s = 0; s < c->seq; s++) {
                const int64_t t = reverse ? c->seq - 1 - s : s;
                double *yo = want_y + ((t * dirs + dir) * c->batch + b) * H;
                if (t >= len) {
                    for (int64_t j = 0; j < H; j++) yo[j] = 0.0;
                    continue;
                }
                if (!c->gru) {
                    const float *P = d->P + dir * 3 * H; /* i, o, f */
                    for (int64_t j = 0; j < H; j++) {
                        /* W rows: i [0,H), o [H,2H), f [2H,3H), c [3H,4H) */
                        const double pi = pre_x(c, d, dir, t, b, j) + pre_h(c, d, dir, h, j);
                        const double po = pre_x(c, d, dir, t, b, H + j) + pre_h(c, d, dir, h, H + j);
                        const double pf = pre_x(c, d, dir, t, b, 2 * H + j) + pre_h(c, d, dir, h, 2 * H + j);
                        const double pc = pre_x(c, d, dir, t, b, 3 * H + j) + pre_h(c, d, dir, h, 3 * H + j);
                        const double ig = sigm(clipd(pi + (c->with_p ? P[j] * cs[j] : 0.0), c->clip));
                        const double fg = c->input_forget
                                              ? 1.0 - ig
                                              : sigm(clipd(pf + (c->with_p ? P[2 * H + j] * cs[j] : 0.0), c->clip));
                        const double cg = tanh(clipd(pc, c->clip));
                        const double cn = fg * cs[j] + ig * cg;
                        const double og = sigm(clipd(po + (c->with_p ? P[H + j] * cn : 0.0), c->clip));
                        hn[j] = og * tanh(cn);
                        rh[j] = cn; /* new cell, committed after every j used the old state */
                    }
                    for (int64_t j = 0; j < H; j++) cs[j] = rh[j];
                } else {
                    /* rows: z [0,H), r [H,2H), h [2H,3H) */
                    double *r = rh;
                    for (int64_t j = 0; j < H; j++)
                        r[j] = sigm(clipd(pre_x(c, d, dir, t, b, H + j) + pre_h(c, d, dir, h, H + j), c->clip));
                    double *rhv = xcalloc((size_t)H * sizeof(double));
                    for (int64_t j = 0; j < H; j++) rhv[j] = r[j] * h[j];
                    for (int64_t j = 0; j < H; j++) {
                        const double z =
                            sigm(clipd(pre_x(c, d, dir, t, b, j) + pre_h(c, d, dir, h, j), c->clip));
                        double ph;
                        if (c->lbr) ph = pre_x(c, d, dir, t, b, 2 * H + j) + r[j] * pre_h(c, d, dir, h, 2 * H + j);
                        else ph = pre_x(c, d, dir, t, b, 2 * H + j) + pre_h(c, d, dir, rhv, 2 * H + j);
                        const double hh = tanh(clipd(ph, c->clip));
                        hn[j] = (1.0 - z) * hh + z * h[j];
                    }
                    free(rhv);
                }
                for (int64_t j = 0; j < H; j++) {
                    h[j] = hn[j];
                    yo[j] = hn[j];
                }
            }
            for (int64_t j = 0; j < H; j++) {
                want_h[sidx + j] = h[j];
                want_c[sidx + j] = cs[j];
            }
        }
    }
    free(h);
    free(cs);
    free(hn);
    free(rh);
}

static void describe(const rnn_case *c, char *buf, size_t n) {
    snprintf(buf, n,
             "%s seq=%lld batch=%lld in=%lld H=%lld dir=%d B=%d lens=%d h0=%d c0=%d P=%d if=%d lbr=%d clip=%g "
             "R panels=%d (%s)",
             c->gru ? "gru" : "lstm", (long long)c->seq, (long long)c->batch, (long long)c->in, (long long)c->hid,
             c->direction, c->with_b, c->with_seq_lens, c->with_init_h, c->with_init_c, c->with_p, c->input_forget,
             c->lbr, (double)c->clip, g_panels, round_desc);
}

static void run_case(const rnn_case *c) {
    rnn_data d;
    data_make(c, &d);
    const nrv_status s = data_run(c, &d);
    char what[384];
    describe(c, what, sizeof what);
    NRV_EXPECT(s == NRV_OK, "%s: status %s (%s)", what, nrv_status_str(s), nrv_last_error());
    const int64_t ny = c->seq * d.dirs * c->batch * c->hid, nh = d.dirs * c->batch * c->hid;
    double *wy = xcalloc((size_t)(ny + 1) * sizeof(double)), *wh = xcalloc((size_t)(nh + 1) * sizeof(double));
    double *wc = xcalloc((size_t)(nh + 1) * sizeof(double));
    reference(c, &d, wy, wh, wc);
    if (s == NRV_OK) {
        char w2[420];
        snprintf(w2, sizeof w2, "%s Y", what);
        check_close(w2, d.Y, wy, ny);
        snprintf(w2, sizeof w2, "%s Y_h", what);
        check_close(w2, d.Yh, wh, nh);
        if (!c->gru) {
            snprintf(w2, sizeof w2, "%s Y_c", what);
            check_close(w2, d.Yc, wc, nh);
        }
    }
    NRV_EXPECT(tail_intact(d.Y, ny) && tail_intact(d.Yh, nh) && tail_intact(d.Yc, nh), "%s: wrote past an output",
               what);
    if (c->gru) NRV_EXPECT(all_sentinel(d.Yc, nh), "%s: gru touched a third buffer", what);
    free(wy);
    free(wh);
    free(wc);
    data_free(&d);
}

/* ------------------------------------------------------------------ case lists */

static void test_cases(int gru) {
    static const int64_t hids[] = {1, 5, 17};
    static const int64_t ins[] = {1, 3, 13};
    static const int64_t seqs[] = {1, 4, 7};
    static const int64_t batches[] = {1, 2, 3};
    int c = 0;
    for (int hi = 0; hi < 3; hi++)
        for (int dir = 0; dir < 3; dir++)
            for (int v = 0; v < 4; v++, c++) {
                rnn_case k;
                memset(&k, 0, sizeof k);
                k.gru = gru;
                k.hid = hids[hi];
                k.in = ins[(c + v) % 3];
                k.seq = seqs[(c / 2 + v) % 3];
                k.batch = batches[(c + 2 * v) % 3];
                k.direction = dir;
                k.with_b = v != 1;
                k.with_seq_lens = v >= 2;
                k.with_init_h = (c % 3) != 0;
                k.with_init_c = (c % 4) != 1;
                k.with_p = (c % 2) == 0;
                k.input_forget = (c % 5) == 3;
                k.lbr = (c % 2) == 1;
                k.clip = (c % 3) == 2 ? 0.7f : (c % 7 == 1 ? -1.0f : 0.0f);
                run_case(&k);
            }
    /* odd corners: no input features, a batch of 4 with an empty sequence in it, no time steps */
    rnn_case k;
    memset(&k, 0, sizeof k);
    k.gru = gru;
    k.seq = 3;
    k.batch = 2;
    k.in = 0;
    k.hid = 5;
    k.direction = 2;
    k.with_b = 1;
    k.with_init_h = 1;
    k.with_init_c = 1;
    run_case(&k);
    k.in = 3;
    k.batch = 4;
    k.seq = 5;
    k.with_seq_lens = 1;
    k.with_p = 1;
    k.lbr = 1;
    k.direction = 1;
    run_case(&k);
    k.seq = 0;
    k.direction = 2;
    run_case(&k);
    k.seq = 2;
    k.batch = 0;
    run_case(&k);
    /* the streaming VAD shape */
    memset(&k, 0, sizeof k);
    k.gru = gru;
    k.seq = 1;
    k.batch = 1;
    k.in = 128;
    k.hid = 128;
    k.with_b = 1;
    k.with_init_h = 1;
    k.with_init_c = 1;
    run_case(&k);
}

/* ------------------------------------------------------------------ errors */

/* Runs c (with d possibly modified) expecting `want`, every output untouched. */
static void expect_fail(const char *what, const rnn_case *c, rnn_data *d, nrv_status want) {
    const int64_t ny = d->vY.numel, nh = d->vYh.numel;
    const nrv_status s = data_run(c, d);
    NRV_EXPECT(s == want, "%s: got %s, want %s (%s)", what, nrv_status_str(s), nrv_status_str(want),
               nrv_last_error());
    NRV_EXPECT(all_sentinel(d->Y, ny) && all_sentinel(d->Yh, nh) && all_sentinel(d->Yc, nh),
               "%s: output written on failure", what);
    if (s != NRV_OK)
        NRV_EXPECT(strstr(nrv_last_error(), "test_node") != NULL, "%s: message lacks the node name: %s", what,
                   nrv_last_error());
}

static void test_errors(int gru) {
    rnn_case c;
    memset(&c, 0, sizeof c);
    c.gru = gru;
    c.seq = 4;
    c.batch = 3;
    c.in = 5;
    c.hid = 6;
    c.direction = 2;
    c.with_b = c.with_seq_lens = c.with_init_h = c.with_init_c = 1;
    c.with_p = !gru;
    const char *op = gru ? "gru" : "lstm";
    char what[128];
    rnn_data d;

#define ERR_CASE(label, mutate, status)                        \
    do {                                                       \
        data_make(&c, &d);                                     \
        mutate;                                                \
        snprintf(what, sizeof what, "%s: %s", op, label);      \
        expect_fail(what, &c, &d, status);                     \
        data_free(&d);                                         \
    } while (0)

    ERR_CASE("W rows != gates*H", d.vW.dims[1] -= 1, NRV_ERR_SHAPE);
    ERR_CASE("W input width", d.vW.dims[2] = 4, NRV_ERR_SHAPE);
    ERR_CASE("R dirs", d.vR.dims[0] = 1, NRV_ERR_SHAPE);
    ERR_CASE("B length", d.vB.dims[1] -= 1, NRV_ERR_SHAPE);
    ERR_CASE("initial_h batch", d.vH0.dims[1] = 2, NRV_ERR_SHAPE);
    ERR_CASE("Y seq", d.vY.dims[0] = 5, NRV_ERR_SHAPE);
    ERR_CASE("Y_h rank", d.vYh.rank = 2, NRV_ERR_SHAPE);
    ERR_CASE("X rank", d.vX.rank = 2, NRV_ERR_SHAPE);
    ERR_CASE("sequence_lens size", d.vL.dims[0] = 2, NRV_ERR_SHAPE);
    ERR_CASE("sequence_lens f32", d.vL.dtype = NRV_F32, NRV_ERR_DTYPE);
    ERR_CASE("X i32", d.vX.dtype = NRV_I32, NRV_ERR_DTYPE);
    ERR_CASE("sequence_lens > seq", d.lens[1] = 5, NRV_ERR_INDEX);
    ERR_CASE("sequence_lens < 0", d.lens[2] = -1, NRV_ERR_INDEX);
    ERR_CASE("scratch one float short", d.scratch_bytes -= 4, NRV_ERR_INVALID_ARG);
    ERR_CASE("scratch missing", (free(d.scratch), d.scratch = NULL), NRV_ERR_INVALID_ARG);
    ERR_CASE("hidden_size mismatch", c.hid = 7, NRV_ERR_SHAPE);
    c.hid = 6;
    ERR_CASE("hidden_size 0", c.hid = 0, NRV_ERR_INVALID_ARG);
    c.hid = 6;
    ERR_CASE("direction 3", c.direction = 3, NRV_ERR_INVALID_ARG);
    c.direction = 2;
    g_panels = 1;
    ERR_CASE("R panels one float short", d.vRp.dims[1] -= 1, NRV_ERR_SHAPE);
    ERR_CASE("R panels dirs", d.vRp.dims[0] = 1, NRV_ERR_SHAPE);
    ERR_CASE("R panels misaligned", d.vRp.data = d.Rp + 1, NRV_ERR_INVALID_ARG);
    ERR_CASE("R panels i32", d.vRp.dtype = NRV_I32, NRV_ERR_DTYPE);
    g_panels = 0;
    if (!gru) {
        ERR_CASE("initial_c H", d.vC0.dims[2] = 5, NRV_ERR_SHAPE);
        ERR_CASE("P length", d.vP.dims[1] = 17, NRV_ERR_SHAPE);
        ERR_CASE("Y_c dirs", d.vYc.dims[0] = 1, NRV_ERR_SHAPE);
        ERR_CASE("input_forget 2", c.input_forget = 2, NRV_ERR_INVALID_ARG);
        c.input_forget = 0;
    } else {
        ERR_CASE("linear_before_reset 2", c.lbr = 2, NRV_ERR_INVALID_ARG);
        c.lbr = 0;
    }
#undef ERR_CASE
}

/* ------------------------------------------------------------------ timing (informational) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One LSTM step at the streaming VAD shape (batch 1, seq 1, I = H = 128), timed. */
static void time_vad_step(void) {
    rnn_case c;
    memset(&c, 0, sizeof c);
    c.seq = 1;
    c.batch = 1;
    c.in = 128;
    c.hid = 128;
    c.with_b = c.with_init_h = c.with_init_c = 1;
    rnn_data d;
    data_make(&c, &d);
    int iters = 0;
    nrv_status s = NRV_OK;
    const double t0 = now_s();
    double t1 = t0;
    while (t1 - t0 < 0.05 && s == NRV_OK) {
        for (int i = 0; i < 20; i++) s = data_run(&c, &d);
        iters += 20;
        t1 = now_s();
    }
    NRV_EXPECT_STATUS(s, NRV_OK);
    printf("lstm batch 1 seq 1 I=H=128: %.2f us per call (linear=%s)\n", 1e6 * (t1 - t0) / iters,
           nrv_kernel_selected("linear"));
    data_free(&d);
}

int main(void) {
    NRV_EXPECT(nrv_plan_op_find("lstm") != NULL && nrv_plan_op_find("gru") != NULL, "rnn ops registered");
    NRV_EXPECT(nrv_plan_op_find("lstm") && strcmp(nrv_plan_op_find("lstm")->kernel_op, "linear") == 0,
               "lstm kernel_op");
    const int nr = rounds();
    for (int k = 0; k < nr; k++) {
        nrv_test_seed(0xabcdu + (uint64_t)k);
        force_round(k);
        printf("round %d: %s\n", k, round_desc);
        for (int v = 0; v < 3; v++) { /* minimal scratch, room for the projection, and R's panels too */
            g_projection_room = v > 0;
            g_panels = v == 2;
            test_cases(0);
            test_cases(1);
        }
        g_panels = 0;
    }
    unforce();
    g_projection_room = 0; /* the error cases shave the minimum scratch */
    printf("worst error: %.3f of tolerance (rtol %g, atol %g)\n", worst_seen, RTOL, ATOL);
    test_errors(0);
    test_errors(1);
    time_vad_step();
    return nrv_test_summary("test_plan_rnn");
}
