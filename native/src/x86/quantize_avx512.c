/* quantize_avx512.c — the quantize kernel at 16 lanes (zmm; x86/quantize_x86.h): the reference's bits. */
#include "simd_avx512.h"
#define QX_NAME nrv_quantize_avx512
#include "quantize_x86.h"
