/* depthwise_q8_avx512.c — depthwise_q8_impl.h at 16 lanes (zmm): the reference's bytes. */
#define RQ_LANES 16
#define DWQ8_NAME nrv_depthwise_q8_avx512
#include "depthwise_q8_impl.h"
