/* linear_avx512.c — linear and fused layernorm + linear, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "linear_impl.h"
