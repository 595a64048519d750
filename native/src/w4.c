/* w4.c — public entry points of the W4 (group-wise INT4) weights: validation, packing, and
 * the linear layer (nerve.h "W4 weights"). The kernels trust what passes here. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "kernels.h"

/* out, in and group of a W4 weight: in a multiple of 32 and of group, both bounded. */
static nrv_status check_w4_dims(const char *fn, int64_t out, int64_t in, int64_t group) {
    if (out < 0 || in < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: negative weight dims [%lld, %lld]", fn, (long long)out,
                        (long long)in);
    if (group != 32 && group != 64 && group != 128)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: group size %lld is not 32, 64 or 128", fn, (long long)group);
    if (in % group)
        return nrv_fail(NRV_ERR_SHAPE, "%s: group size %lld does not divide the input width %lld", fn,
                        (long long)group, (long long)in);
    if (in > NRV_W4_MAX_IN)
        return nrv_fail(NRV_ERR_UNSUPPORTED, "%s: input width %lld is above the W4 kernels' limit %d", fn,
                        (long long)in, NRV_W4_MAX_IN);
    return nrv_check_matrix(fn, "weight", out, in, 1);
}

nrv_status nrv_check_w4_desc(const char *fn, const nrv_w4_weight *w) {
    NRV_REQUIRE_PTR(fn, w);
    NRV_TRY(check_w4_dims(fn, w->out, w->in, w->group));
    if (w->layout != NRV_W4_UNPACKED && w->layout != NRV_W4_PACKED)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: layout %d is neither NRV_W4_UNPACKED (0) nor NRV_W4_PACKED (1)", fn,
                        (int)w->layout);
    if (w->out > 0 && w->in > 0) {
        if (!w->q) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: weight q is NULL", fn);
        if (!w->scales) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: weight scales is NULL", fn);
    }
    return NRV_OK;
}

nrv_status nrv_w4_check(const nrv_w4_weight *w) {
    static const char fn[] = "nrv_w4_check";
    NRV_TRY(nrv_check_w4_desc(fn, w));
    const int64_t ng = w->in / w->group;
    if (w->layout == NRV_W4_UNPACKED) {
        const int8_t *q = w->q;
        for (int64_t i = 0; i < w->out * w->in; i++)
            if (q[i] < -8 || q[i] > 7)
                return nrv_fail(NRV_ERR_INVALID_ARG, "%s: q[%lld, %lld] = %d is outside the int4 range [-8, 7]", fn,
                                (long long)(i / w->in), (long long)(i % w->in), (int)q[i]);
    }
    for (int64_t i = 0; i < w->out * ng; i++) {
        const float s = nrv_half_to_float(w->scales[i]);
        if (!isfinite(s) || s == 0.0f)
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s: scale[%lld, group %lld] = %g (must be finite and non-zero)", fn,
                            (long long)(i / ng), (long long)(i % ng), (double)s);
        if (w->zero && (w->zero[i] < -8 || w->zero[i] > 7))
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s: zero[%lld, group %lld] = %d is outside [-8, 7]", fn,
                            (long long)(i / ng), (long long)(i % ng), (int)w->zero[i]);
    }
    return NRV_OK;
}

static nrv_status check_pack_dims(const char *fn, int64_t out, int64_t in) {
    if (out < 0 || in < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: negative dims [%lld, %lld]", fn, (long long)out, (long long)in);
    if (in % 32)
        return nrv_fail(NRV_ERR_SHAPE, "%s: input width %lld is not a multiple of 32 (the packed block)", fn,
                        (long long)in);
    return nrv_check_matrix(fn, "q", out, in, 1);
}

nrv_status nrv_w4_pack(const int8_t *q, int64_t out, int64_t in, uint8_t *packed) {
    static const char fn[] = "nrv_w4_pack";
    NRV_TRY(check_pack_dims(fn, out, in));
    if (out == 0 || in == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, q);
    NRV_REQUIRE_PTR(fn, packed);
    for (int64_t i = 0; i < out * in; i++)
        if (q[i] < -8 || q[i] > 7)
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s: q[%lld, %lld] = %d is outside the int4 range [-8, 7]", fn,
                            (long long)(i / in), (long long)(i % in), (int)q[i]);
    for (int64_t o = 0; o < out; o++)
        for (int64_t k0 = 0; k0 < in; k0 += 32) {
            const int8_t *src = q + o * in + k0;
            uint8_t *dst = packed + o * (in / 2) + k0 / 2;
            for (int j = 0; j < 16; j++) dst[j] = (uint8_t)((src[j] + 8) | (src[j + 16] + 8) << 4);
        }
    return NRV_OK;
}

nrv_status nrv_w4_unpack(const uint8_t *packed, int64_t out, int64_t in, int8_t *q) {
    static const char fn[] = "nrv_w4_unpack";
    NRV_TRY(check_pack_dims(fn, out, in));
    if (out == 0 || in == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, packed);
    NRV_REQUIRE_PTR(fn, q);
    for (int64_t o = 0; o < out; o++)
        for (int64_t k0 = 0; k0 < in; k0 += 32) {
            const uint8_t *src = packed + o * (in / 2) + k0 / 2;
            int8_t *dst = q + o * in + k0;
            for (int j = 0; j < 16; j++) {
                dst[j] = (int8_t)((src[j] & 15) - 8);
                dst[j + 16] = (int8_t)((src[j] >> 4) - 8);
            }
        }
    return NRV_OK;
}

nrv_status nrv_linear_w4(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b,
                         int int8_activations, float *y) {
    static const char fn[] = "nrv_linear_w4";
    NRV_TRY(nrv_check_w4_desc(fn, w));
    NRV_TRY(nrv_check_matrix(fn, "x", rows, w->in, sizeof(float)));
    NRV_TRY(nrv_check_matrix(fn, "y", rows, w->out, sizeof(float)));
    if (int8_activations != 0 && int8_activations != 1)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: int8_activations must be 0 (w4a32) or 1 (w4a8), got %d", fn,
                        int8_activations);
    if (rows == 0 || w->out == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, y);
    if (w->in == 0) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < w->out; o++) y[r * w->out + o] = b ? b[o] : 0.0f;
        return NRV_OK;
    }
    NRV_REQUIRE_PTR(fn, x);
    nrv_kernel_get(int8_activations ? NRV_OP_LINEAR_W4A8 : NRV_OP_LINEAR_W4A32).linear_w4(x, rows, w, b, y, w->out);
    return NRV_OK;
}
