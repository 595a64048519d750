/* activation_avx512.c — element-wise activations and softmax, AVX-512 (16 lanes). */
#include "simd_avx512.h"
#include "activation_impl.h"
