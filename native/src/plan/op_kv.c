/* op_kv.c — a decoder's key/value cache appended in place.
 *
 * "kv_append": present = concat(past, new) along the sequence axis of [1, H, S, D] tensors,
 * for a state pair flagged NRV_STATE_APPEND (plan_internal.h). Such a pair has one buffer,
 * holding the cache sequence-major — physically [S, H, D], the logical [1, H, S, D] with its
 * sequence axis outermost — so that appending a token writes H x D floats at the end and
 * moves nothing else. The only other readers of `present` are matmuls that read it as their
 * interleaved B operand (op_linalg.c, iattr b_interleaved), which handle that layout.
 *
 *   in[0] past    [1, H, P, D] f32: either the state buffer itself (data == out's data: the
 *                 normal step, already sequence-major; only the new rows are written) or a
 *                 caller's feed in the ordinary [1, H, P, D] layout (the first step of a
 *                 segment: copied into the buffer, reordered)
 *   in[1] new     [1, H, n, D] f32, ordinary layout
 *   out[0] present [1, H, P + n, D] f32, sequence-major in the state buffer
 *   no attributes.
 */
#include <string.h>

#include "plan_ops.h"

static nrv_status run_kv_append(const nrv_op_args *a) {
    NRV_TRY(nrv_op_expect(a, 2, 2, 1, 0, 0));
    NRV_TRY(nrv_op_require_input(a, 0));
    NRV_TRY(nrv_op_require_input(a, 1));
    const nrv_tview *past = a->in[0], *fresh = a->in[1];
    nrv_tview *present = a->out[0];
    const nrv_tview *views[3] = {past, fresh, present};
    for (int k = 0; k < 3; k++) {
        NRV_TRY(nrv_op_expect_dtype(a, views[k], k == 0 ? "past" : k == 1 ? "new" : "present", NRV_F32));
        if (views[k]->rank != 4 || views[k]->dims[0] != 1)
            return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): tensors must be [1, H, S, D]", a->type, a->name);
    }
    const int64_t H = present->dims[1], D = present->dims[3], P = past->dims[2], n = fresh->dims[2];
    if (past->dims[1] != H || fresh->dims[1] != H || past->dims[3] != D || fresh->dims[3] != D ||
        present->dims[2] != P + n)
        return nrv_fail(NRV_ERR_SHAPE, "%s (node '%s'): past [1,%lld,%lld,%lld] + new [1,%lld,%lld,%lld] is not "
                        "present [1,%lld,%lld,%lld]", a->type, a->name, (long long)past->dims[1], (long long)P,
                        (long long)past->dims[3], (long long)fresh->dims[1], (long long)n, (long long)fresh->dims[3],
                        (long long)H, (long long)present->dims[2], (long long)D);
    float *dst = present->data;
    const size_t row = (size_t)D * sizeof(float);
    if (past->data != present->data && P > 0) { /* a fed cache: reorder it into the buffer */
        const float *src = past->data;
        for (int64_t t = 0; t < P; t++)
            for (int64_t h = 0; h < H; h++) memcpy(dst + (t * H + h) * D, src + (h * P + t) * D, row);
    }
    const float *src = fresh->data; /* the new rows, after the P already there */
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) memcpy(dst + ((P + t) * H + h) * D, src + (h * n + t) * D, row);
    return NRV_OK;
}

const nrv_op_def nrv_plan_ops_kv[] = {
    {"kv_append", run_kv_append, NULL},
    {NULL, NULL, NULL},
};
