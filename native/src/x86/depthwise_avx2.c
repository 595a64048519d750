/* depthwise_avx2.c — depthwise taps, AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "depthwise_impl.h"
