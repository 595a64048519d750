/* activation_avx2.c — element-wise activations and softmax, AVX2 + FMA (8 lanes). */
#include "simd_avx2.h"
#include "activation_impl.h"
