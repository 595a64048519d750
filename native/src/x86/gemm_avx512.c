/* gemm_avx512.c — blocked GEMM, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "gemm_impl.h"
