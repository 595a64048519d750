/* plan_registry.c — every op family's table, searched by type string at plan load. */
#include <string.h>

#include "plan_ops.h"

static const nrv_op_def *const families[] = {
    nrv_plan_ops_elementwise, nrv_plan_ops_linalg, nrv_plan_ops_conv,
    nrv_plan_ops_shape,       nrv_plan_ops_reduce, nrv_plan_ops_rnn,         nrv_plan_ops_kv,
    nrv_plan_ops_upsample,    nrv_plan_ops_index,       nrv_plan_ops_stream,
    nrv_plan_ops_misc,
};

const nrv_op_def *nrv_plan_op_find(const char *type) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const nrv_op_def *d = families[f]; d->type; d++)
            if (strcmp(d->type, type) == 0) return d;
    return NULL;
}
