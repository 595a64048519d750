/* fft.c — windowed real DFT of strided frames, by a radix-2 FFT.
 *
 * What it replaces: audio models exported without ONNX's STFT op carry their short-time
 * Fourier transform as a 1-D convolution whose weight is a DFT basis ([win·cos; ±win·sin],
 * one output channel per bin), e.g. silero VAD's 258 x 256 "forward_basis_buffer". The graph
 * compiler recognises such a weight (sdk/nerve/compiler/passes.py, select_rdft) and runs this
 * instead: N log N work per frame instead of N x 2K multiply-adds (silero: ~3 k flops per
 * frame against 66 k), and no basis in the cache (264 KB for silero).
 *
 * Method: a real sequence a[0..N) (N = 2M a power of two) is packed as M complex numbers
 * z[m] = a[2m] + i·a[2m+1], transformed by an iterative radix-2 decimation-in-time FFT
 * (input in bit-reversed order, the first two stages as one radix-4 pass without
 * multiplications), then split into the spectra of the even and odd samples:
 *   X[k] = E[k] + e^{-2πik/N}·O[k],  E[k] = (Z[k] + conj Z[M-k]) / 2,
 *                                    O[k] = (Z[k] - conj Z[M-k]) / 2i,   k = 0..M.
 * Four frames go through together, one per lane of a 4-float vector (GCC vector extensions:
 * SSE on x86-64, NEON on aarch64, from the same source), so every butterfly is one vector
 * operation for four frames and there is no per-frame loop overhead. Twiddles come from the
 * caller's table (computed once, in double, by the compiler): no trigonometry here.
 */
#include <string.h>

#include "kernels.h"

typedef float v4f __attribute__((vector_size(16)));
#define LANES 4

/* Sample j of the windowed frame starting at `start` (0 outside [0, len)). */
static inline float windowed(const float *x, int64_t len, int64_t start, int64_t j, const float *window) {
    const int64_t i = start + j;
    return i >= 0 && i < len ? x[i] * window[j] : 0.0f;
}

/* Frames f0 .. f0 + lanes - 1 (lanes <= 4; unused lanes repeat frame f0 and are not stored). */
static void rdft_four(const float *x, int64_t len, int64_t stride, int64_t pad_begin, int64_t f0, int lanes,
                      int64_t n, const float *window, const float *table, int64_t bins, float im_sign, float *y_re,
                      float *y_im, int64_t ldy, v4f *restrict zr, v4f *restrict zi, const int32_t *rev) {
    const int64_t m_half = n / 2;
    const float *st_re = table, *st_im = table + m_half;
    const float *po_re = table + 2 * m_half, *po_im = table + 3 * m_half;
    int64_t start[LANES];
    int whole = 1;
    for (int l = 0; l < LANES; l++) {
        start[l] = (f0 + (l < lanes ? l : 0)) * stride - pad_begin;
        if (start[l] < 0 || start[l] + n > len) whole = 0;
    }
    for (int64_t m = 0; m < m_half; m++) {
        v4f re, im;
        for (int l = 0; l < LANES; l++) {
            if (whole) {
                re[l] = x[start[l] + 2 * m] * window[2 * m];
                im[l] = x[start[l] + 2 * m + 1] * window[2 * m + 1];
            } else {
                re[l] = windowed(x, len, start[l], 2 * m, window);
                im[l] = windowed(x, len, start[l], 2 * m + 1, window);
            }
        }
        zr[rev[m]] = re;
        zi[rev[m]] = im;
    }
    int64_t h = 1;
    if (m_half >= 4) {
        /* stages 1 and 2 as one radix-4 pass: factors 1 and -i */
        for (int64_t s = 0; s < m_half; s += 4) {
            const v4f a0r = zr[s] + zr[s + 1], a0i = zi[s] + zi[s + 1];
            const v4f a1r = zr[s] - zr[s + 1], a1i = zi[s] - zi[s + 1];
            const v4f b0r = zr[s + 2] + zr[s + 3], b0i = zi[s + 2] + zi[s + 3];
            const v4f b1r = zr[s + 2] - zr[s + 3], b1i = zi[s + 2] - zi[s + 3];
            zr[s] = a0r + b0r, zi[s] = a0i + b0i;
            zr[s + 2] = a0r - b0r, zi[s + 2] = a0i - b0i;
            zr[s + 1] = a1r + b1i, zi[s + 1] = a1i - b1r; /* a1 + (-i)·b1 */
            zr[s + 3] = a1r - b1i, zi[s + 3] = a1i + b1r;
        }
        h = 4;
    }
    for (; h < m_half; h *= 2) {
        /* stage of half-size h: factors e^{-iπj/h}, j < h, at table entry h - 1 */
        const float *wr = st_re + h - 1, *wi = st_im + h - 1;
        for (int64_t s = 0; s < m_half; s += 2 * h) {
            for (int64_t j = 0; j < h; j++) {
                const v4f br = zr[s + h + j], bi = zi[s + h + j];
                const v4f tr = wr[j] * br - wi[j] * bi, ti = wr[j] * bi + wi[j] * br;
                const v4f ar = zr[s + j], ai = zi[s + j];
                zr[s + h + j] = ar - tr, zi[s + h + j] = ai - ti;
                zr[s + j] = ar + tr, zi[s + j] = ai + ti;
            }
        }
    }
    for (int64_t k = 0; k < bins; k++) {
        v4f re, im;
        if (k == 0 || k == m_half) {
            /* Z[0] = E[0] + i·O[0]: X[0] = Re + Im, X[M] = Re - Im, both real */
            re = k == 0 ? zr[0] + zi[0] : zr[0] - zi[0];
            im = (v4f){0, 0, 0, 0};
        } else {
            const v4f ar = zr[k], ai = zi[k], br = zr[m_half - k], bi = -zi[m_half - k]; /* Z[k], conj Z[M-k] */
            const v4f er = 0.5f * (ar + br), ei = 0.5f * (ai + bi);
            const v4f o_r = 0.5f * (ai - bi), o_i = -0.5f * (ar - br); /* (Z[k] - conj Z[M-k]) / 2i */
            const float c = po_re[k], sn = po_im[k];                   /* e^{-iθ} = c - i·sn */
            re = er + c * o_r + sn * o_i;
            im = ei + c * o_i - sn * o_r;
        }
        im *= im_sign;
        float *yr = y_re + k * ldy + f0, *yi = y_im + k * ldy + f0;
        if (lanes == LANES) {
            memcpy(yr, &re, sizeof re);
            memcpy(yi, &im, sizeof im);
        } else {
            for (int l = 0; l < lanes; l++) yr[l] = re[l], yi[l] = im[l];
        }
    }
}

void nrv_rdft_frames_ref(const float *x, int64_t len, int64_t stride, int64_t pad_begin, int64_t frames, int64_t n,
                         const float *window, const float *table, int64_t bins, float im_sign, float *y_re,
                         float *y_im, int64_t ldy, void *work) {
    const int64_t m_half = n / 2; /* M >= 2 */
    v4f *zr = work, *zi = zr + m_half;
    int32_t *rev = (int32_t *)(zi + m_half);
    /* rev[m]: m with its log2(M) bits reversed, built by doubling */
    rev[0] = 0;
    for (int64_t count = 1, add = m_half / 2; count < m_half; count *= 2, add /= 2)
        for (int64_t i = 0; i < count; i++) rev[count + i] = rev[i] + (int32_t)add;
    for (int64_t f0 = 0; f0 < frames; f0 += LANES)
        rdft_four(x, len, stride, pad_begin, f0, frames - f0 < LANES ? (int)(frames - f0) : LANES, n, window, table,
                  bins, im_sign, y_re, y_im, ldy, zr, zi, rev);
}
