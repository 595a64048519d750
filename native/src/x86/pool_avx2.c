/* pool_avx2.c — the op "maxpool" at 8 floats / 32 bytes (kernels/maxpool_impl.h). */
#include "simd_avx2.h"
#define MP_NAME nrv_maxpool_avx2
#include "maxpool_impl.h"
