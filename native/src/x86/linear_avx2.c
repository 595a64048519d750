/* linear_avx2.c — linear and fused layernorm + linear, AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "linear_impl.h"
