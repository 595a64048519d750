/* quantize_avx512.c — quantize_impl.h at 16 lanes (zmm): the reference's bits. */
#define QZ_LANES 16
#define QZ_NAME nrv_quantize_avx512
#include "quantize_impl.h"
