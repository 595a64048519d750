/* quantize.c — the reference quantize kernel (contract: kernels.h nrv_quantize_fn): the
 * 4-lane instance of quantize_impl.h, plain SSE2 / NEON. */
#define QZ_LANES 4
#define QZ_NAME nrv_quantize_ref
#include "quantize_impl.h"
