/* depthwise.c — the reference of the depthwise taps (nrv_depthwise_fn, kernels.h).
 *
 * Written with 4-lane GCC vector extensions (SSE on baseline x86, NEON on aarch64, where it
 * is the variant that runs): every lane computes its output exactly as the scalar sum
 * bias + w0·x0 + w1·x1 + ... in tap order, a multiply then an add (ISO C: no contraction),
 * so it is the ground truth the x86 variants are tested against. Two output vectors share
 * each tap's weight; the common 3x3 runs with its tap count a constant. */
#include <string.h>

#include "kernels.h"

typedef float dw_v4f __attribute__((vector_size(16)));

/* The first min(n, 4) lanes of v to dst (an output row's last vector may be partial). */
static inline void dw_store(float *dst, dw_v4f v, int64_t n) {
    if (n >= 4) {
        memcpy(dst, &v, sizeof v);
        return;
    }
    for (int64_t j = 0; j < n; j++) dst[j] = v[j];
}

/* One output row: 8 outputs at a time (two vectors share each tap's weight), then 4. T is
 * the tap count, a constant where the common 3x3 calls it (its nine offsets then live in
 * registers). */
static inline __attribute__((always_inline)) void dw_row(const int64_t T, const float *base, int64_t ow,
                                                         const int64_t *off, const dw_v4f *wv, dw_v4f vb, float *yr) {
    int64_t ox = 0;
    for (; ox + 8 <= ow; ox += 8) {
        dw_v4f a0 = vb, a1 = vb;
        for (int64_t k = 0; k < T; k++) {
            dw_v4f x0, x1;
            memcpy(&x0, base + off[k] + ox, sizeof x0);
            memcpy(&x1, base + off[k] + ox + 4, sizeof x1);
            a0 += wv[k] * x0;
            a1 += wv[k] * x1;
        }
        memcpy(yr + ox, &a0, sizeof a0);
        memcpy(yr + ox + 4, &a1, sizeof a1);
    }
    for (; ox < ow; ox += 4) {
        dw_v4f acc = vb;
        for (int64_t k = 0; k < T; k++) {
            dw_v4f xv;
            memcpy(&xv, base + off[k] + ox, sizeof xv);
            acc += wv[k] * xv;
        }
        dw_store(yr + ox, acc, ow - ox);
    }
}

void nrv_depthwise_ref(const float *plane, int64_t row_step, int64_t oh, int64_t ow, const int64_t *tap_off,
                       int64_t taps, const float *w, float bias, float *y) {
    const dw_v4f vb = {bias, bias, bias, bias};
    dw_v4f wv[NRV_DW_MAX_TAPS];
    for (int64_t k = 0; k < taps; k++) wv[k] = (dw_v4f){w[k], w[k], w[k], w[k]};
    for (int64_t oy = 0; oy < oh; oy++) {
        if (taps == 9) dw_row(9, plane + oy * row_step, ow, tap_off, wv, vb, y + oy * ow);
        else dw_row(taps, plane + oy * row_step, ow, tap_off, wv, vb, y + oy * ow);
    }
}

/* The channel-vector depthwise (nrv_depthwise_channels_fn) as its definition reads: one
 * output at a time, the taps in order, a tap outside x adding w·0. */
void nrv_depthwise_channels_ref(const nrv_dw_geom *g, int64_t c, const float *x, const float *w, const float *bias,
                                float *y) {
    const int64_t taps = g->kh * g->kw;
    for (int64_t ch = 0; ch < c; ch++) {
        const float *xc = x + ch * g->ih * g->iw, *wc = w + ch * taps;
        float *yc = y + ch * g->oh * g->ow;
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                float acc = bias ? bias[ch] : 0.0f;
                for (int64_t ki = 0; ki < g->kh; ki++) {
                    const int64_t iy = oy * g->sh + ki * g->dh - g->ph;
                    for (int64_t kj = 0; kj < g->kw; kj++) {
                        const int64_t ix = ox * g->sw + kj * g->dw - g->pw;
                        const float v = iy >= 0 && iy < g->ih && ix >= 0 && ix < g->iw ? xc[iy * g->iw + ix] : 0.0f;
                        acc += wc[ki * g->kw + kj] * v;
                    }
                }
                yc[oy * g->ow + ox] = acc;
            }
    }
}
