/* neon_table.c — aarch64 NEON kernel variants as dispatch candidates, best first. */
#include "kernels.h"

const nrv_kernel_variant nrv_variants_neon[] = {
    {.name = NULL},
};
