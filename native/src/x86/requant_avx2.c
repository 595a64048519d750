/* requant_avx2.c — requant_impl.h at 8 lanes (ymm): the reference's bytes. */
#define RQ_LANES 8
#define RQ_NAME nrv_requant_avx2
#define RQ_CHANNELS_NAME nrv_requant_channels_avx2
#include "requant_impl.h"
