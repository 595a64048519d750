/* depthwise_avx512.c — depthwise taps, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "depthwise_impl.h"
