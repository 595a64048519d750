/* linear_w8_avx512.c — int8-weight linear layer (w8a32), AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "linear_w8_impl.h"
