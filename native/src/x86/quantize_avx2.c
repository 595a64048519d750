/* quantize_avx2.c — quantize_impl.h at 8 lanes (ymm): the reference's bits. */
#define QZ_LANES 8
#define QZ_NAME nrv_quantize_avx2
#include "quantize_impl.h"
