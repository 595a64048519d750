/* linear_w8_avx2.c — int8-weight linear layer (w8a32), AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "linear_w8_impl.h"
