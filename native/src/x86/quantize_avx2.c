/* quantize_avx2.c — the quantize kernel at 8 lanes (ymm; x86/quantize_x86.h): the reference's bits. */
#include "simd_avx2.h"
#define QX_NAME nrv_quantize_avx2
#include "quantize_x86.h"
