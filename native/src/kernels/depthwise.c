/* depthwise.c — the reference of the depthwise taps (nrv_depthwise_fn, kernels.h).
 *
 * Written with 4-lane GCC vector extensions (SSE on baseline x86, NEON on aarch64, where it
 * is the variant that runs): every lane computes its output exactly as the scalar sum
 * bias + w0·x0 + w1·x1 + ... in tap order, a multiply then an add (ISO C: no contraction),
 * so it is the ground truth the x86 variants are tested against. Two output vectors share
 * each tap's weight; the common 3x3 reads its nine taps once per vector. */
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

void nrv_depthwise_ref(const float *plane, int64_t wp, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
                       int64_t dh, int64_t dw, const float *w, float bias, float *y) {
    const dw_v4f vb = {bias, bias, bias, bias};
    if (sh == 1 && kh == 3 && kw == 3 && dh == 1 && dw == 1) {
        dw_v4f wv[9];
        for (int k = 0; k < 9; k++) wv[k] = (dw_v4f){w[k], w[k], w[k], w[k]};
        for (int64_t oy = 0; oy < oh; oy++) {
            const float *r0 = plane + oy * wp, *r1 = r0 + wp, *r2 = r1 + wp;
            for (int64_t ox = 0; ox < ow; ox += 4) {
                dw_v4f tap[9];
                memcpy(&tap[0], r0 + ox, 16), memcpy(&tap[1], r0 + ox + 1, 16), memcpy(&tap[2], r0 + ox + 2, 16);
                memcpy(&tap[3], r1 + ox, 16), memcpy(&tap[4], r1 + ox + 1, 16), memcpy(&tap[5], r1 + ox + 2, 16);
                memcpy(&tap[6], r2 + ox, 16), memcpy(&tap[7], r2 + ox + 1, 16), memcpy(&tap[8], r2 + ox + 2, 16);
                dw_v4f acc = vb;
                for (int k = 0; k < 9; k++) acc += wv[k] * tap[k];
                dw_store(y + oy * ow + ox, acc, ow - ox);
            }
        }
        return;
    }
    dw_v4f wv[NRV_DW_MAX_TAPS];
    for (int64_t k = 0; k < kh * kw; k++) wv[k] = (dw_v4f){w[k], w[k], w[k], w[k]};
    for (int64_t oy = 0; oy < oh; oy++) {
        int64_t ox = 0;
        for (; ox + 8 <= ow; ox += 8) {
            dw_v4f a0 = vb, a1 = vb;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *row = plane + (oy * sh + ki * dh) * wp + ox;
                for (int64_t kj = 0; kj < kw; kj++) {
                    dw_v4f x0, x1;
                    memcpy(&x0, row + kj * dw, sizeof x0);
                    memcpy(&x1, row + kj * dw + 4, sizeof x1);
                    a0 += wv[ki * kw + kj] * x0;
                    a1 += wv[ki * kw + kj] * x1;
                }
            }
            memcpy(y + oy * ow + ox, &a0, sizeof a0);
            memcpy(y + oy * ow + ox + 4, &a1, sizeof a1);
        }
        for (; ox < ow; ox += 4) {
            dw_v4f acc = vb;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *row = plane + (oy * sh + ki * dh) * wp + ox;
                for (int64_t kj = 0; kj < kw; kj++) {
                    dw_v4f xv;
                    memcpy(&xv, row + kj * dw, sizeof xv);
                    acc += wv[ki * kw + kj] * xv;
                }
            }
            dw_store(y + oy * ow + ox, acc, ow - ox);
        }
    }
}
