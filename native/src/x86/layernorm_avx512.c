/* layernorm_avx512.c — layer normalisation, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "layernorm_impl.h"
