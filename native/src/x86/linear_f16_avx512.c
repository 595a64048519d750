/* linear_f16_avx512.c — fp16-weight linear layer, AVX-512 (16 lanes): the linear_w8 template
 * with vcvtph2ps (zmm) as the widening. */
#include "simd_avx512.h"
#define W8_F16 1
#include "linear_w8_impl.h"
