/* x86_table.c — AVX2 / AVX-512 kernel variants as dispatch candidates, best first.
 *
 * Each variant is named after its ISA group, so NERVE_DISABLE=avx512 falls back to the
 * avx2 variant and NERVE_DISABLE=avx2,avx512 (or x86, or all) to the reference.
 * AVX-512 variants exist only where they pay over AVX2 on the machine they were tuned on
 * (Zen 4; paired A/B, same inputs, alternating order, median of 41 time ratios
 * avx2/avx512): layernorm 1.24, linear and the fused op at 16-128 rows 1.13-1.19, gemm
 * 1.18-1.27, gelu/gelu_tanh/sigmoid/tanh/softmax 1.77-2.0. The memory-bound ops do not
 * gain from wider vectors (embedding f32 0.98, f16 0.86, i8 1.01; relu 1.00), so they
 * have an avx2 variant only, which the dispatcher then picks on AVX-512 CPUs as well.
 * linear_w8 (int8 weights) is listed in both: one row streaming q from memory, the two
 * run at the same speed (bound by memory), with q in cache AVX-512 is 1.0-1.2x at 2-16 rows
 * (the int8 widening is a larger share of the work there; medians of 31, same process).
 * linear_w4a32 / linear_w4a8 (INT4 weights): avx512 / avx512_vnni before avx2. Measured
 * (same process, packed, one row): VNNI ahead at group 32 (4096x4096 0.47 vs 0.56 ms;
 * 32768x416 0.56 vs 0.80 ms), avx2 ahead at group 64 (0.38 vs 0.41 ms; 416x1664 0.021 vs
 * 0.031 ms) and at 8-32 rows by 10-12%: one order for all shapes keeps VNNI first.
 * linear_f16 (fp16 weights, the linear_w8 template) is listed in both: one row streaming a
 * 4096x4096 weight from memory, the two run at the same speed (1.36-1.40 ms); at 16 rows
 * AVX-512 is ahead (4096x4096 5.2 vs 5.3 ms, 1024x1024 330 vs 351-367 us), at one row with a
 * 1024x1024 weight in cache AVX2 is (37 vs 43 us; medians of 41, same process).
 * .requires is every feature the variant's translation unit was compiled for:
 *  - avx2: files built with -mavx2 -mfma -mf16c;
 *  - avx512: files built with the AVX-512 F/BW/VL/DQ flags plus -mavx2 -mfma -mf16c. They
 *    are also built with -mavx512vnni, but no kernel uses VNNI (all float), and the
 *    compiler only emits VNNI for integer dot-product loops, which these files do not
 *    contain, so the variant stays usable on AVX-512 CPUs without VNNI (Skylake-SP);
 *  - avx512_vnni (linear_w8a8_vnni.c, group avx512 so NERVE_DISABLE=avx512 drops it too): built with
 *    -mavx512f -mavx512bw -mavx512vl -mavx512vnni plus the avx2 flags (no DQ), and requires
 *    exactly those.;
 *  - avx512_amx (linear_w8a8_amx.c, group avx512): the VNNI flags plus -mamx-tile -mamx-int8; requires
 *    the VNNI features (it hands calls of fewer than 16 rows to the VNNI kernel) and
 *    NRV_CPU_AMXINT8, which cpu.c sets only once Linux granted the process tile state.
 *    NERVE_DISABLE=avx512_amx drops it alone.
 */
#include "x86_kernels.h"

#define X86_AVX2_FEATURES (NRV_CPU_AVX | NRV_CPU_AVX2 | NRV_CPU_FMA | NRV_CPU_F16C)
#define X86_AVX512_FEATURES \
    (X86_AVX2_FEATURES | NRV_CPU_AVX512F | NRV_CPU_AVX512BW | NRV_CPU_AVX512VL | NRV_CPU_AVX512DQ)

#define X86_VNNI_FEATURES \
    (X86_AVX2_FEATURES | NRV_CPU_AVX512F | NRV_CPU_AVX512BW | NRV_CPU_AVX512VL | NRV_CPU_AVX512VNNI)

#define AVX512(op_, field_, fn_) \
    {.op = (op_), .name = "avx512", .group = "avx512", .requires = X86_AVX512_FEATURES, .fn.field_ = (fn_)}
#define AVX2(op_, field_, fn_) \
    {.op = (op_), .name = "avx2", .group = "avx2", .requires = X86_AVX2_FEATURES, .fn.field_ = (fn_)}
#define AVX512_GEMM(fn_, implicit_, panels_, rows_)                                                            \
    {.op = NRV_OP_GEMM, .name = "avx512", .group = "avx512", .requires = X86_AVX512_FEATURES, .fn.gemm = (fn_), \
     .implicit.gemm_implicit = (implicit_), .panels.gemm_panels = (panels_),                  \
     .rows_panels.linear_panels = (rows_)}
#define AVX2_GEMM(fn_, implicit_, panels_, rows_)                                                              \
    {.op = NRV_OP_GEMM, .name = "avx2", .group = "avx2", .requires = X86_AVX2_FEATURES, .fn.gemm = (fn_), \
     .implicit.gemm_implicit = (implicit_), .panels.gemm_panels = (panels_),                  \
     .rows_panels.linear_panels = (rows_)}

const nrv_kernel_variant nrv_variants_x86[] = {
    AVX2(NRV_OP_EMBEDDING_F32, embedding, nrv_embedding_f32_avx2),
    AVX2(NRV_OP_EMBEDDING_F16, embedding, nrv_embedding_f16_avx2),
    AVX2(NRV_OP_EMBEDDING_Q8, embedding, nrv_embedding_q8_avx2),
    AVX512(NRV_OP_LAYERNORM, layernorm, nrv_layernorm_avx512),
    AVX2(NRV_OP_LAYERNORM, layernorm, nrv_layernorm_avx2),
    AVX512(NRV_OP_LINEAR, linear, nrv_linear_avx512),
    AVX2(NRV_OP_LINEAR, linear, nrv_linear_avx2),
    AVX512(NRV_OP_LAYERNORM_LINEAR, layernorm_linear, nrv_layernorm_linear_avx512),
    AVX2(NRV_OP_LAYERNORM_LINEAR, layernorm_linear, nrv_layernorm_linear_avx2),
    AVX512_GEMM(nrv_gemm_avx512, nrv_gemm_implicit_avx512, nrv_gemm_panels_avx512, nrv_linear_panels_avx512),
    AVX2_GEMM(nrv_gemm_avx2, nrv_gemm_implicit_avx2, nrv_gemm_panels_avx2, nrv_linear_panels_avx2),
    AVX512(NRV_OP_GELU, unary, nrv_gelu_avx512),
    AVX2(NRV_OP_GELU, unary, nrv_gelu_avx2),
    AVX512(NRV_OP_GELU_TANH, unary, nrv_gelu_tanh_avx512),
    AVX2(NRV_OP_GELU_TANH, unary, nrv_gelu_tanh_avx2),
    AVX2(NRV_OP_RELU, unary, nrv_relu_avx2),
    AVX512(NRV_OP_SIGMOID, unary, nrv_sigmoid_avx512),
    AVX2(NRV_OP_SIGMOID, unary, nrv_sigmoid_avx2),
    AVX512(NRV_OP_SILU, unary, nrv_silu_avx512),
    AVX2(NRV_OP_SILU, unary, nrv_silu_avx2),
    AVX512(NRV_OP_HARD_SWISH, unary, nrv_hard_swish_avx512),
    AVX2(NRV_OP_HARD_SWISH, unary, nrv_hard_swish_avx2),
    AVX512(NRV_OP_TANH, unary, nrv_tanh_avx512),
    AVX2(NRV_OP_TANH, unary, nrv_tanh_avx2),
    AVX512(NRV_OP_SOFTMAX, softmax, nrv_softmax_avx512),
    AVX2(NRV_OP_SOFTMAX, softmax, nrv_softmax_avx2),
    AVX512(NRV_OP_LINEAR_W8, linear_w8, nrv_linear_w8_avx512),
    AVX2(NRV_OP_LINEAR_W8, linear_w8, nrv_linear_w8_avx2),
    /* linear_w8a8: the VNNI variant needs vpdpbusd (AVX512-VNNI) besides F/BW/VL; the avx2
     * one widens to 16 bits (vpmovsxbw + vpmaddwd, exact) */
#ifndef NERVE_NO_AMX /* CMakeLists.txt: the compiler lacks -mamx-int8 */
    {.op = NRV_OP_LINEAR_W8A8, .name = "avx512_amx", .group = "avx512", .requires = X86_VNNI_FEATURES | NRV_CPU_AMXINT8,
     .fn.linear_w8a8 = nrv_linear_w8a8_amx},
#endif
    {.op = NRV_OP_LINEAR_W8A8, .name = "avx512_vnni", .group = "avx512", .requires = X86_VNNI_FEATURES,
     .fn.linear_w8a8 = nrv_linear_w8a8_vnni},
    AVX2(NRV_OP_LINEAR_W8A8, linear_w8a8, nrv_linear_w8a8_avx2),
    /* matmul_integer: vpdpbusd is the u8 x s8 product itself; avx2 widens to 16 bits */
    {.op = NRV_OP_MATMUL_INTEGER, .name = "avx512_vnni", .group = "avx512", .requires = X86_VNNI_FEATURES,
     .fn.matmul_integer = nrv_matmul_integer_vnni, .implicit.matmul_integer_planes = nrv_matmul_integer_planes_vnni},
    AVX2(NRV_OP_MATMUL_INTEGER, matmul_integer, nrv_matmul_integer_avx2),
    /* quantize: the reference's vector code at 16 and 8 lanes (kernels/quantize_impl.h) */
    AVX512(NRV_OP_QUANTIZE, quantize, nrv_quantize_avx512),
    AVX2(NRV_OP_QUANTIZE, quantize, nrv_quantize_avx2),
    /* requant: the reference's vector code at 16 and 8 lanes (kernels/requant_impl.h) */
    {.op = NRV_OP_REQUANT, .name = "avx512", .group = "avx512", .requires = X86_AVX512_FEATURES,
     .fn.requant = nrv_requant_avx512, .implicit.requant_channels = nrv_requant_channels_avx512},
    {.op = NRV_OP_REQUANT, .name = "avx2", .group = "avx2", .requires = X86_AVX2_FEATURES,
     .fn.requant = nrv_requant_avx2, .implicit.requant_channels = nrv_requant_channels_avx2},
    /* depthwise_q8: the reference's vector code at 16 and 8 lanes (kernels/depthwise_q8_impl.h) */
    AVX512(NRV_OP_DEPTHWISE_Q8, depthwise_q8, nrv_depthwise_q8_avx512),
    AVX2(NRV_OP_DEPTHWISE_Q8, depthwise_q8, nrv_depthwise_q8_avx2),
    /* linear_w4a32 / linear_w4a8 */
    AVX512(NRV_OP_LINEAR_W4A32, linear_w4, nrv_linear_w4a32_avx512),
    {.op = NRV_OP_LINEAR_W4A8, .name = "avx512_vnni", .group = "avx512", .requires = X86_VNNI_FEATURES,
     .fn.linear_w4 = nrv_linear_w4a8_vnni},
    AVX2(NRV_OP_LINEAR_W4A32, linear_w4, nrv_linear_w4a32_avx2),
    AVX2(NRV_OP_LINEAR_W4A8, linear_w4, nrv_linear_w4a8_avx2),
    /* linear_f16: the linear_w8 template with vcvtph2ps (F16C: in both variants' features) */
    AVX512(NRV_OP_LINEAR_F16, linear_f16, nrv_linear_f16_avx512),
    AVX2(NRV_OP_LINEAR_F16, linear_f16, nrv_linear_f16_avx2),
    AVX512(NRV_OP_DEPTHWISE, depthwise, nrv_depthwise_avx512),
    AVX2(NRV_OP_DEPTHWISE, depthwise, nrv_depthwise_avx2),
    AVX512(NRV_OP_DEPTHWISE_CHANNELS, depthwise_channels, nrv_depthwise_channels_avx512),
    AVX2(NRV_OP_DEPTHWISE_CHANNELS, depthwise_channels, nrv_depthwise_channels_avx2),
    AVX512(NRV_OP_DEPTHWISE_ROWS, depthwise_channels, nrv_depthwise_rows_avx512),
    AVX2(NRV_OP_DEPTHWISE_ROWS, depthwise_channels, nrv_depthwise_rows_avx2),
    AVX512(NRV_OP_MAXPOOL, maxpool, nrv_maxpool_avx512),
    AVX2(NRV_OP_MAXPOOL, maxpool, nrv_maxpool_avx2),
    AVX512(NRV_OP_LINEAR_ATTENTION, linear_attention, nrv_linear_attention_avx512),
    AVX2(NRV_OP_LINEAR_ATTENTION, linear_attention, nrv_linear_attention_avx2),
    {.name = NULL},
};
