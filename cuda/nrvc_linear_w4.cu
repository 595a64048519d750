/* nrvc_linear_w4.cu — y = x · Wᵀ + b with a W4 weight (nerve.h "W4 weights") on the GPU:
 * fp32 activations, weights decoded in registers (nrvc_w4_decode.h), fp32 accumulation.
 *
 * One kernel, w4_rows<LAYOUT, R, STAGED>, for GEMV (R = 1) and small-batch GEMM (R up to 8):
 *  - grid.x: blocks of kWarps output columns, one warp per column; grid.y: blocks of R rows.
 *  - STAGED: the block first copies its R rows of x into shared memory, one float of
 *    padding after every 32 (a lane's block k0..k0+31 then starts on bank (lane + i) mod
 *    32: no bank conflicts when 32 lanes read 32 different blocks); each weight decoded
 *    once feeds R FMAs. R is what the selection's shared-memory budget allows
 *    (nrv_cuda_w4_rows_per_block); 0 means no row fits: R = 1 with x read from global
 *    memory (L1/L2 serve the repeats).
 *  - Lane l of a warp reads weight blocks l, l+32, ...: 16 bytes (packed) or 32 bytes
 *    (unpacked) each, so a warp step reads 512 or 1024 contiguous bytes of the row
 *    (coalesced); the group's fp16 scale and int8 zero point are one load per block.
 *  - Each lane keeps R partial sums; a butterfly shuffle reduces them; lane 0 adds b.
 * Requirements checked by libnerve before the call: in % 32 == 0, group in {32, 64, 128}
 * dividing in; by the backend: q 16-byte aligned (cudaMalloc and nerve pools give 256).
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "nrvc_internal.h"
#include "nrvc_kernels.cuh"
#include "nrvc_w4_decode.h"

namespace {

using nrvc::kWarp;
constexpr int kWarps = 8; /* output columns per block */
constexpr int kThreads = kWarp * kWarps;

__device__ __forceinline__ int64_t padded_index(int64_t k) { return k + k / nrvc::kW4Block; }

template <int LAYOUT, int R, bool STAGED>
__global__ void __launch_bounds__(kThreads)
    w4_rows(const float *__restrict__ x, int64_t rows, int64_t in, int64_t out, int group,
            const uint8_t *__restrict__ q, const __half *__restrict__ scales, const int8_t *__restrict__ zero,
            const float *__restrict__ bias, float *__restrict__ y) {
    extern __shared__ float xs[]; /* STAGED: R rows of (in + in/32) floats */
    const int64_t r0 = (int64_t)blockIdx.y * R;
    const int64_t padded = in + in / nrvc::kW4Block;
    if constexpr (STAGED) {
        for (int64_t i = threadIdx.x; i < (int64_t)R * in; i += kThreads) {
            const int64_t r = i / in, k = i - r * in;
            xs[r * padded + padded_index(k)] = r0 + r < rows ? x[(r0 + r) * in + k] : 0.0f;
        }
        __syncthreads();
    }
    const int lane = (int)(threadIdx.x % kWarp);
    const int64_t o = (int64_t)blockIdx.x * kWarps + threadIdx.x / kWarp;
    if (o >= out) return;

    const int64_t n_blocks = in / nrvc::kW4Block;
    const int64_t groups = in / group;
    const int blocks_per_group = group / nrvc::kW4Block;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;

    for (int64_t blk = lane; blk < n_blocks; blk += kWarp) {
        const int64_t g = o * groups + blk / blocks_per_group;
        const float scale = __half2float(scales[g]);
        const float z = zero ? (float)zero[g] : 0.0f;
        const float *xr[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            if constexpr (STAGED) {
                xr[r] = xs + r * padded + blk * (nrvc::kW4Block + 1);
            } else {
                const int64_t row = r0 + r < rows ? r0 + r : rows - 1; /* never past x */
                xr[r] = x + row * in + blk * nrvc::kW4Block;
            }
        }
        float part[R];
#pragma unroll
        for (int r = 0; r < R; r++) part[r] = 0.0f;
        if constexpr (LAYOUT == NRV_W4_PACKED) {
            const uint4 v = __ldg(reinterpret_cast<const uint4 *>(q + o * (in / 2)) + blk);
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            nrvc::packed_block_dot<R>(w, xr, z, part);
        } else {
            const uint4 *src = reinterpret_cast<const uint4 *>(q + o * in) + 2 * blk;
            const uint4 a = __ldg(src), c = __ldg(src + 1);
            const uint32_t w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            nrvc::unpacked_block_dot<R>(w, xr, z, part);
        }
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] += scale * part[r];
    }
    nrvc::store_column<R>(acc, lane, r0, rows, o, out, bias, y);
}

template <int LAYOUT, int R, bool STAGED>
nrv_status launch(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b, float *y,
                  cudaStream_t stream) {
    const auto kernel = w4_rows<LAYOUT, R, STAGED>;
    const size_t smem = STAGED ? (size_t)R * (size_t)(w->in + w->in / nrvc::kW4Block) * sizeof(float) : 0;
    if (smem > 48 * 1024)
        NRVC_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t col_blocks = (w->out + kWarps - 1) / kWarps;
    return nrvc::for_row_slices(rows, R, [&](int64_t row0, int64_t row_blocks, int64_t slice_rows) {
        kernel<<<dim3((unsigned)col_blocks, (unsigned)row_blocks), kThreads, smem, stream>>>(
            x + row0 * w->in, slice_rows, w->in, w->out, w->group, static_cast<const uint8_t *>(w->q),
            reinterpret_cast<const __half *>(w->scales), w->zero, b, y + row0 * w->out);
        NRVC_CHECK_LAUNCH("w4_rows");
        return NRV_OK;
    });
}

template <int LAYOUT>
nrv_status launch_rows(int32_t rows_per_block, const float *x, int64_t rows, const nrv_w4_weight *w,
                       const float *b, float *y, cudaStream_t stream) {
    switch (rows_per_block) {
    case 8: return launch<LAYOUT, 8, true>(x, rows, w, b, y, stream);
    case 4: return launch<LAYOUT, 4, true>(x, rows, w, b, y, stream);
    case 2: return launch<LAYOUT, 2, true>(x, rows, w, b, y, stream);
    case 1: return launch<LAYOUT, 1, true>(x, rows, w, b, y, stream);
    default: return launch<LAYOUT, 1, false>(x, rows, w, b, y, stream);
    }
}

} /* namespace */

NRVC_EXPORT nrv_status nrvc_linear_w4(int device, const float *x, int64_t rows, const nrv_w4_weight *w,
                                      const float *b, float *y, int32_t rows_per_block, void *stream_v) {
    static const char fn[] = "nrv_cuda_linear_w4";
    if (rows == 0 || w->out == 0) return NRV_OK;
    const nrv_status st = nrvc::check_device(fn, device);
    if (st != NRV_OK) return st;
    if (reinterpret_cast<uintptr_t>(w->q) % 16 != 0)
        return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: the weight's q must be 16-byte aligned on the device", fn);
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    const nrv_status launched = w->layout == NRV_W4_PACKED
                                    ? launch_rows<NRV_W4_PACKED>(rows_per_block, x, rows, w, b, y, stream)
                                    : launch_rows<NRV_W4_UNPACKED>(rows_per_block, x, rows, w, b, y, stream);
    if (launched != NRV_OK) return launched;
    NRVC_CHECK(cudaStreamSynchronize(stream));
    return NRV_OK;
}
