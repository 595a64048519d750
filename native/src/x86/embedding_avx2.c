/* embedding_avx2.c — embedding gathers, AVX2 + F16C (8 lanes). */
#include "simd_avx2.h"
#include "embedding_impl.h"
