/* gemm_avx2.c — blocked GEMM, AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "gemm_impl.h"
