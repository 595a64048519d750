/* ref_table.c — the scalar references as dispatch candidates (always runnable, last). */
#include "kernels.h"

#define REF(op_, field_, fn_) {.op = (op_), .name = "ref", .group = "ref", .requires = 0, .fn.field_ = (fn_)}
#define REF_GEMM(fn_, implicit_, panels_, rows_panels_)                                                   \
    {.op = NRV_OP_GEMM, .name = "ref", .group = "ref", .requires = 0, .fn.gemm = (fn_),                       \
     .implicit.gemm_implicit = (implicit_), .panels.gemm_panels = (panels_),                                \
     .rows_panels.linear_panels = (rows_panels_)}

const nrv_kernel_variant nrv_variants_ref[] = {
    REF(NRV_OP_EMBEDDING_F32, embedding, nrv_embedding_f32_ref),
    REF(NRV_OP_EMBEDDING_F16, embedding, nrv_embedding_f16_ref),
    REF(NRV_OP_EMBEDDING_Q8, embedding, nrv_embedding_q8_ref),
    REF(NRV_OP_LAYERNORM, layernorm, nrv_layernorm_ref),
    REF(NRV_OP_LINEAR, linear, nrv_linear_ref),
    REF(NRV_OP_LAYERNORM_LINEAR, layernorm_linear, nrv_layernorm_linear_ref),
    REF_GEMM(nrv_gemm_ref, nrv_gemm_implicit_ref, nrv_gemm_panels_ref, nrv_linear_panels_ref),
    REF(NRV_OP_GELU, unary, nrv_gelu_ref),
    REF(NRV_OP_GELU_TANH, unary, nrv_gelu_tanh_ref),
    REF(NRV_OP_RELU, unary, nrv_relu_ref),
    REF(NRV_OP_SIGMOID, unary, nrv_sigmoid_ref),
    REF(NRV_OP_TANH, unary, nrv_tanh_ref),
    REF(NRV_OP_SOFTMAX, softmax, nrv_softmax_ref),
    REF(NRV_OP_LINEAR_W8, linear_w8, nrv_linear_w8_ref),
    REF(NRV_OP_LINEAR_W8A8, linear_w8a8, nrv_linear_w8a8_ref),
    {.op = NRV_OP_MATMUL_INTEGER, .name = "ref", .group = "ref", .requires = 0,
     .fn.matmul_integer = nrv_matmul_integer_ref, .implicit.matmul_integer_planes = nrv_matmul_integer_planes_ref},
    REF(NRV_OP_QUANTIZE, quantize, nrv_quantize_ref),
    {.op = NRV_OP_REQUANT, .name = "ref", .group = "ref", .requires = 0, .fn.requant = nrv_requant_ref,
     .implicit.requant_channels = nrv_requant_channels_ref},
    REF(NRV_OP_LINEAR_W4A32, linear_w4, nrv_linear_w4a32_ref),
    REF(NRV_OP_LINEAR_W4A8, linear_w4, nrv_linear_w4a8_ref),
    REF(NRV_OP_LINEAR_F16, linear_f16, nrv_linear_f16_ref),
    REF(NRV_OP_DEPTHWISE, depthwise, nrv_depthwise_ref),
    REF(NRV_OP_DEPTHWISE_CHANNELS, depthwise_channels, nrv_depthwise_channels_ref),
    REF(NRV_OP_DEPTHWISE_ROWS, depthwise_channels, nrv_depthwise_channels_ref),
    REF(NRV_OP_HARD_SWISH, unary, nrv_hard_swish_ref),
    REF(NRV_OP_SILU, unary, nrv_silu_ref),
    REF(NRV_OP_MAXPOOL, maxpool, nrv_maxpool_ref),
    REF(NRV_OP_LINEAR_ATTENTION, linear_attention, nrv_linear_attention_ref),
    REF(NRV_OP_DEPTHWISE_Q8, depthwise_q8, nrv_depthwise_q8_ref),
    {.name = NULL},
};
