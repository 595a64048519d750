/* requant_avx512.c — requant_impl.h at 16 lanes (zmm): the reference's bytes. */
#define RQ_LANES 16
#define RQ_NAME nrv_requant_avx512
#define RQ_CHANNELS_NAME nrv_requant_channels_avx512
#include "requant_impl.h"
