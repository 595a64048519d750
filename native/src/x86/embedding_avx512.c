/* embedding_avx512.c — embedding gathers, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "embedding_impl.h"
