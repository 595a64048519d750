/* neon_table.c — aarch64 NEON kernel variants as dispatch candidates, best first.
 *
 * Every variant here needs only baseline Advanced SIMD (asimd, mandatory on AArch64), so
 * they run on Orin and on ARMv8.0 boards alike; NERVE_DISABLE=neon falls back to ref.
 * Variants that need dotprod / fp16 arithmetic would go before these, in their own
 * _dotprod.c / _fp16.c files with groups "dotprod" / "fp16". */
#include "neon_kernels.h"

#define NEON(op_, field_, fn_) \
    {.op = (op_), .name = "neon", .group = "neon", .requires = NRV_CPU_NEON, .fn.field_ = (fn_)}
#define NEON_GEMM(fn_, implicit_, panels_, rows_)                                                            \
    {.op = NRV_OP_GEMM, .name = "neon", .group = "neon", .requires = NRV_CPU_NEON, .fn.gemm = (fn_),    \
     .implicit.gemm_implicit = (implicit_), .panels.gemm_panels = (panels_),              \
     .rows_panels.linear_panels = (rows_)}

const nrv_kernel_variant nrv_variants_neon[] = {
    NEON(NRV_OP_EMBEDDING_F32, embedding, nrv_embedding_f32_neon),
    NEON(NRV_OP_EMBEDDING_F16, embedding, nrv_embedding_f16_neon),
    NEON(NRV_OP_EMBEDDING_Q8, embedding, nrv_embedding_q8_neon),
    NEON(NRV_OP_LAYERNORM, layernorm, nrv_layernorm_neon),
    NEON(NRV_OP_LINEAR, linear, nrv_linear_neon),
    NEON(NRV_OP_LAYERNORM_LINEAR, layernorm_linear, nrv_layernorm_linear_neon),
    NEON_GEMM(nrv_gemm_neon, nrv_gemm_implicit_neon, nrv_gemm_panels_neon, nrv_linear_panels_neon),
    NEON(NRV_OP_GELU, unary, nrv_gelu_neon),
    NEON(NRV_OP_GELU_TANH, unary, nrv_gelu_tanh_neon),
    NEON(NRV_OP_SILU, unary, nrv_silu_neon),
    NEON(NRV_OP_HARD_SWISH, unary, nrv_hard_swish_neon),
    NEON(NRV_OP_RELU, unary, nrv_relu_neon),
    NEON(NRV_OP_SIGMOID, unary, nrv_sigmoid_neon),
    NEON(NRV_OP_TANH, unary, nrv_tanh_neon),
    NEON(NRV_OP_SOFTMAX, softmax, nrv_softmax_neon),
    NEON(NRV_OP_DEPTHWISE_ROWS, depthwise_channels, nrv_depthwise_rows_neon),
    NEON(NRV_OP_MAXPOOL, maxpool, nrv_maxpool_neon),
    NEON(NRV_OP_LINEAR_ATTENTION, linear_attention, nrv_linear_attention_neon),
    {.name = NULL},
};
