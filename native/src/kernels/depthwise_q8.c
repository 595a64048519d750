/* depthwise_q8.c — the reference depthwise_q8 kernel (contract: kernels.h nrv_depthwise_q8_fn):
 * the 4-lane instance of depthwise_q8_impl.h, plain SSE2 / NEON. */
#define RQ_LANES 4
#define DWQ8_NAME nrv_depthwise_q8_ref
#include "depthwise_q8_impl.h"
