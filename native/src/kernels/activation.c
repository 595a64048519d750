/* activation.c — scalar reference element-wise activations and softmax (libm). */
#include <math.h>

#include "kernels.h"

void nrv_relu_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void nrv_gelu_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void nrv_gelu_tanh_ref(const float *x, int64_t n, float *y) {
    const float k = 0.79788456080286536f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}

/* Split by sign so exp never overflows. */
static inline float sigmoid1(float v) {
    if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
    const float e = expf(v);
    return e / (1.0f + e);
}

void nrv_sigmoid_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = sigmoid1(x[i]);
}

void nrv_silu_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sigmoid1(x[i]);
}

void nrv_hard_swish_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) {
        const float t = x[i] * (1.0f / 6.0f) + 0.5f; /* ISO C: no contraction into an FMA */
        y[i] = x[i] * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    }
}

void nrv_tanh_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

void nrv_softmax_ref(const float *x, int64_t rows, int64_t dim, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        float mx = xr[0];
        for (int64_t j = 1; j < dim; j++) mx = xr[j] > mx ? xr[j] : mx;
        float sum = 0.0f;
        for (int64_t j = 0; j < dim; j++) {
            yr[j] = expf(xr[j] - mx);
            sum += yr[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < dim; j++) yr[j] *= inv;
    }
}
