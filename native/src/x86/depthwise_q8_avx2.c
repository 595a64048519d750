/* depthwise_q8_avx2.c — depthwise_q8_impl.h at 8 lanes (ymm): the reference's bytes. */
#define RQ_LANES 8
#define DWQ8_NAME nrv_depthwise_q8_avx2
#include "depthwise_q8_impl.h"
