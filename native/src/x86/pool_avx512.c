/* pool_avx512.c — the op "maxpool" at 16 floats / 64 bytes (kernels/maxpool_impl.h). */
#include "simd_avx512.h"
#define MP_NAME nrv_maxpool_avx512
#include "maxpool_impl.h"
