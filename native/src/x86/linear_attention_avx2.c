/* linear_attention_avx2.c — op "linear_attention", AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "linear_attention_impl.h"
