/* linear_w4.c — scalar references of the INT4-weight linear layers (w4a32, w4a8) and the
 * W4 layout helpers every variant shares (formats: nerve.h "W4 weights", docs/QUANTIZATION.md).
 *
 * The references read one weight value at a time through w4_value, so the two layouts
 * cannot differ in anything but the load; the sums run in k order within a group and in
 * group order across groups. */
#include <math.h>

#include "kernels.h"

/* q[o, k] of a W4 weight, either layout. */
static inline int w4_value(const nrv_w4_weight *w, int64_t o, int64_t k) {
    if (w->layout == NRV_W4_UNPACKED) return ((const int8_t *)w->q)[o * w->in + k];
    const uint8_t *row = (const uint8_t *)w->q + o * (w->in / 2);
    const int64_t blk = k / 32, j = k % 32;
    const uint8_t byte = row[blk * 16 + (j & 15)];
    return (j < 16 ? byte & 15 : byte >> 4) - 8;
}

void nrv_linear_w4a32_ref(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                          int64_t ldy) {
    const int64_t G = w->group, ng = w->in / G;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * w->in;
        for (int64_t o = 0; o < w->out; o++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                const int z = w->zero ? w->zero[o * ng + g] : 0;
                float d = 0.0f;
                for (int64_t k = g * G; k < (g + 1) * G; k++) d += xr[k] * (float)(w4_value(w, o, k) - z);
                acc += nrv_half_to_float(w->scales[o * ng + g]) * d;
            }
            y[r * ldy + o] = acc + (b ? b[o] : 0.0f);
        }
    }
}

void nrv_linear_w4a8_ref(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                         int64_t ldy) {
    const int64_t G = w->group, ng = w->in / G;
    int8_t xq[NRV_W4_MAX_IN];
    for (int64_t r = 0; r < rows; r++) {
        const float sx = nrv_w8a8_quantise_row_ref(x + r * w->in, w->in, xq);
        for (int64_t o = 0; o < w->out; o++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                const int z = w->zero ? w->zero[o * ng + g] : 0;
                int32_t d = 0;
                for (int64_t k = g * G; k < (g + 1) * G; k++) d += (int32_t)xq[k] * (w4_value(w, o, k) - z);
                acc += nrv_half_to_float(w->scales[o * ng + g]) * (float)d;
            }
            y[r * ldy + o] = sx * acc + (b ? b[o] : 0.0f);
        }
    }
}

void nrv_w4_dequantise(const nrv_w4_weight *w, float *dst) {
    const int64_t G = w->group, ng = w->in / G;
    for (int64_t o = 0; o < w->out; o++)
        for (int64_t g = 0; g < ng; g++) {
            const float s = nrv_half_to_float(w->scales[o * ng + g]);
            const int z = w->zero ? w->zero[o * ng + g] : 0;
            for (int64_t k = g * G; k < (g + 1) * G; k++) dst[o * w->in + k] = s * (float)(w4_value(w, o, k) - z);
        }
}
