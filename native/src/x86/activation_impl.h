/* activation_impl.h — element-wise activations and row softmax, written once against the
 * vector layer; activation_avx2.c / activation_avx512.c instantiate it. Semantics are the
 * reference's (native/src/kernels/activation.c), including its edge cases: relu(NaN) = 0
 * and relu(-0) = +0 (vmaxps returns its second operand, 0, for both), a NaN or +inf
 * anywhere in a softmax row turns the whole row NaN, a row of only -inf is NaN. */
#include "simd_math.h"
#include "x86_kernels.h"

/* y = f(x) over n floats, y may be x: ACT_UNROLL vectors per iteration, so that the long
 * dependency chains of the transcendental functions (~100 cycles from x to f(x)) of
 * several vectors overlap, then one masked partial vector (no scalar tail, no read or
 * write past n). AVX2 on Zen 3, 102,400 floats, 4 against 8 since sigmoid and tanh take
 * v_exp_nonpos / v_exp_upto88 (8 spills constants out of the 16 registers): sigmoid 68
 * either way, tanh 80 -> 77 us, gelu 128 -> 125, gelu_tanh 117 -> 111. The same values:
 * each lane's arithmetic is unchanged. */
#ifndef ACT_UNROLL
#define ACT_UNROLL 4
#endif
#define NRV_DEFINE_UNARY(name, f)                                                  \
    void X86FN(name)(const float *x, int64_t n, float *y) {                        \
        int64_t i = 0;                                                             \
        for (; i + ACT_UNROLL * VL <= n; i += ACT_UNROLL * VL) {                   \
            vf v[ACT_UNROLL];                                                      \
            for (int u = 0; u < ACT_UNROLL; u++) v[u] = vload(x + i + u * VL);     \
            for (int u = 0; u < ACT_UNROLL; u++) vstore(y + i + u * VL, f(v[u]));  \
        }                                                                          \
        for (; i + VL <= n; i += VL) vstore(y + i, f(vload(x + i)));               \
        if (i < n) {                                                               \
            const vtail m = vtail_mask(n - i);                                     \
            vstore_tail(y + i, m, f(vload_tail(x + i, m)));                        \
        }                                                                          \
    }

#if VL == 8
/* relu is one max per element: memory-bound, so only the AVX2 build defines it (the
 * AVX-512 one measured no faster; see x86_table.c). */
static inline vf v_relu(vf x) { return vmax(x, vzero()); }
NRV_DEFINE_UNARY(nrv_relu, v_relu)
#endif
NRV_DEFINE_UNARY(nrv_sigmoid, v_sigmoid)
/* x · sigmoid(x): the sigmoid kernel's values times x, what the Sigmoid and Mul ops give. */
static inline vf v_silu(vf x) { return vmul(x, v_sigmoid(x)); }
NRV_DEFINE_UNARY(nrv_silu, v_silu)
/* x · min(max(x·(1/6) + 1/2, 0), 1) with the reference's roundings (a product, then a sum:
 * no FMA). t is max's and min's second operand, which vmaxps/vminps return when either is
 * NaN, so NaN stays NaN as in the reference. */
static inline vf v_hard_swish(vf x) {
    const vf t = vadd(vmul(x, vset1(1.0f / 6.0f)), vset1(0.5f));
    return vmul(x, vmin(vset1(1.0f), vmax(vzero(), t)));
}
NRV_DEFINE_UNARY(nrv_hard_swish, v_hard_swish)
NRV_DEFINE_UNARY(nrv_tanh, v_tanh)
NRV_DEFINE_UNARY(nrv_gelu, v_gelu_erf)
NRV_DEFINE_UNARY(nrv_gelu_tanh, v_gelu_tanh)

/* Softmax per row, max-subtracted: pass 1 the row max, pass 2 y = e^(x - max) and their
 * sum, pass 3 y *= 1/sum. A row is a few KiB at most in practice, so passes 2-3 re-read
 * it from L1. */
void X86FN(nrv_softmax)(const float *x, int64_t rows, int64_t dim, float *y) {
    const vf neg_inf = vset1(-INFINITY);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        const vtail tail = vtail_mask(dim % VL ? dim % VL : VL);
        const int64_t body = dim - dim % VL;

        vf m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
        int64_t j = 0;
        for (; j + 4 * VL <= body; j += 4 * VL) {
            m0 = vmax(m0, vload(xr + j));
            m1 = vmax(m1, vload(xr + j + VL));
            m2 = vmax(m2, vload(xr + j + 2 * VL));
            m3 = vmax(m3, vload(xr + j + 3 * VL));
        }
        for (; j < body; j += VL) m0 = vmax(m0, vload(xr + j));
        if (body < dim) m1 = vmax(m1, vload_tail_or(xr + body, tail, neg_inf));
        const vf mx = vset1(vhmax(vmax(vmax(m0, m1), vmax(m2, m3))));

        vf s0 = vzero(), s1 = vzero();
        for (j = 0; j + 2 * VL <= body; j += 2 * VL) {
            const vf e0 = v_exp_nonpos(vsub(vload(xr + j), mx));
            const vf e1 = v_exp_nonpos(vsub(vload(xr + j + VL), mx));
            vstore(yr + j, e0);
            vstore(yr + j + VL, e1);
            s0 = vadd(s0, e0);
            s1 = vadd(s1, e1);
        }
        for (; j < body; j += VL) {
            const vf e = v_exp_nonpos(vsub(vload(xr + j), mx));
            vstore(yr + j, e);
            s0 = vadd(s0, e);
        }
        if (body < dim) {
            /* masked-off lanes: x = -inf would give exp(-inf - max) = 0 but also NaN for a
             * -inf max, so add only the loaded lanes */
            const vf e = v_exp_nonpos(vsub(vload_tail(xr + body, tail), mx));
            vstore_tail(yr + body, tail, e);
            s1 = vadd(s1, vselect_tail(tail, e));
        }
        const vf inv = vset1(1.0f / vhsum(vadd(s0, s1)));
        for (j = 0; j < body; j += VL) vstore(yr + j, vmul(vload(yr + j), inv));
        if (body < dim) vstore_tail(yr + body, tail, vmul(vload_tail(yr + body, tail), inv));
    }
}
