/* plan_util.c — argument checks and the fused-activation helper shared by every plan op. */
#include <math.h>

#include "../kernels/kernels.h"
#include "plan_ops.h"

nrv_status nrv_op_expect(const nrv_op_args *a, int n_in_min, int n_in_max, int n_out, int n_iattr, int n_fattr) {
    if (a->n_in < n_in_min || a->n_in > n_in_max)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d inputs, expected %d..%d", a->type, a->name,
                        a->n_in, n_in_min, n_in_max);
    if (n_out >= 0 && a->n_out != n_out)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d outputs, expected %d", a->type, a->name, a->n_out,
                        n_out);
    if (n_iattr >= 0 && a->n_iattr != n_iattr)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d integer attributes, expected %d", a->type,
                        a->name, a->n_iattr, n_iattr);
    if (n_fattr >= 0 && a->n_fattr != n_fattr)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): %d float attributes, expected %d", a->type, a->name,
                        a->n_fattr, n_fattr);
    for (int i = 0; i < a->n_out; i++)
        if (!a->out[i]) return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): output %d missing", a->type, a->name, i);
    return NRV_OK;
}

nrv_status nrv_op_require_input(const nrv_op_args *a, int i) {
    if (i >= a->n_in || !a->in[i])
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): input %d is required", a->type, a->name, i);
    return NRV_OK;
}

nrv_status nrv_op_expect_dtype(const nrv_op_args *a, const nrv_tview *v, const char *what, nrv_dtype dt) {
    if (v->dtype != (int32_t)dt)
        return nrv_fail(NRV_ERR_DTYPE, "%s (node '%s'): %s is %s, expected %s", a->type, a->name, what,
                        nrv_dtype_str((nrv_dtype)v->dtype), nrv_dtype_str(dt));
    return NRV_OK;
}

nrv_status nrv_op_expect_same_numel(const nrv_op_args *a, const nrv_tview *x, const nrv_tview *y, const char *what) {
    if (x->numel != y->numel)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): %s: %lld elements vs %lld", a->type, a->name, what,
                        (long long)x->numel, (long long)y->numel);
    return NRV_OK;
}

nrv_status nrv_op_axis(const nrv_op_args *a, int64_t axis, int32_t rank, int32_t *out) {
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): axis %lld out of range for rank %d", a->type, a->name,
                        (long long)axis, (int)rank);
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return NRV_OK;
}

nrv_status nrv_plan_apply_act(const nrv_op_args *a, int64_t act, float p0, float p1, float *y, int64_t n) {
    switch (act) {
    case NRV_PLAN_ACT_NONE: return NRV_OK;
    case NRV_PLAN_ACT_RELU: nrv_kernel_get(NRV_OP_RELU).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_GELU: nrv_kernel_get(NRV_OP_GELU).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_SIGMOID: nrv_kernel_get(NRV_OP_SIGMOID).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_TANH: nrv_kernel_get(NRV_OP_TANH).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_GELU_TANH: nrv_kernel_get(NRV_OP_GELU_TANH).unary(y, n, y); return NRV_OK;
    case NRV_PLAN_ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0.0f ? y[i] * p0 : y[i];
        return NRV_OK;
    case NRV_PLAN_ACT_CLIP:
        for (int64_t i = 0; i < n; i++) y[i] = fminf(fmaxf(y[i], p0), p1);
        return NRV_OK;
    default:
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s (node '%s'): unknown fused activation code %lld", a->type, a->name,
                        (long long)act);
    }
}
