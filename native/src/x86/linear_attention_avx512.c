/* linear_attention_avx512.c — op "linear_attention", AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "linear_attention_impl.h"
