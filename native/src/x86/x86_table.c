/* x86_table.c — AVX2 / AVX-512 kernel variants as dispatch candidates, best first. */
#include "kernels.h"

const nrv_kernel_variant nrv_variants_x86[] = {
    {.name = NULL},
};
