/* layernorm_avx2.c — layer normalisation, AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "layernorm_impl.h"
