/* nrv_plan_run.h — calls a plan op the way the plan runtime does: nrv_op_args built by hand
 * (node name "test_node", one output) and the op found by its type string. */
#ifndef NRV_PLAN_RUN_H
#define NRV_PLAN_RUN_H

#include <stdio.h>
#include <string.h>

#include "plan/plan_ops.h"

static inline nrv_status nrv_plan_run_op(const char *type, const nrv_tview *const *in, int n_in, nrv_tview *out,
                                         const int64_t *iattr, int n_iattr, const float *fattr, int n_fattr,
                                         void *scratch, size_t scratch_bytes, nrv_threadpool *pool) {
    const nrv_op_def *d = nrv_plan_op_find(type);
    if (!d) {
        fprintf(stderr, "op %s not registered\n", type);
        return NRV_ERR_INTERNAL;
    }
    nrv_tview *outs[1] = {out};
    nrv_op_args a;
    memset(&a, 0, sizeof a);
    a.type = type;
    a.name = "test_node";
    a.in = in;
    a.n_in = n_in;
    a.out = outs;
    a.n_out = 1;
    a.iattr = iattr;
    a.n_iattr = n_iattr;
    a.fattr = fattr;
    a.n_fattr = n_fattr;
    a.scratch = scratch;
    a.scratch_bytes = scratch_bytes;
    a.pool = pool;
    return d->run(&a);
}

#endif /* NRV_PLAN_RUN_H */
