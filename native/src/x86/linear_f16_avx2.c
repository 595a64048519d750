/* linear_f16_avx2.c — fp16-weight linear layer, AVX2 + FMA + F16C (8 lanes): the linear_w8
 * template with vcvtph2ps as the widening. */
#include "simd_avx2.h"
#define W8_F16 1
#include "linear_w8_impl.h"
