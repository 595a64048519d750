/* requant.c — the reference requant kernel (contract: kernels.h nrv_requant_fn): the 4-lane
 * instance of requant_impl.h, plain SSE2 / NEON. */
#define RQ_LANES 4
#define RQ_NAME nrv_requant_ref
#define RQ_CHANNELS_NAME nrv_requant_channels_ref
#include "requant_impl.h"
