/* nrvc_layernorm_linear.cu — fused y = LayerNorm(x; gamma, beta, eps) · Wᵀ + b on the GPU.
 * Each row is normalised once, in registers and shared memory, and fed straight into the
 * product: no normalised tensor is written to global memory. x and y are fp32 or fp16
 * (the same dtype), W [out, in] and gamma, beta, b are fp32; sums are fp32.
 *
 * warp_rows (few rows, the streaming case; any dtype):
 *   grid.x: blocks of kWarps output columns, one warp per column; grid.y: blocks of R rows.
 *   1. warps take the block's rows and compute mean and 1/std (two passes over the row,
 *      fp32) into shared memory;
 *   2. STAGED: the normalised rows go to shared memory once (R·in floats, R from the
 *      selection's budget); else each lane normalises its x values as it reads them;
 *   3. each warp walks its W row, lane l taking k = l, l+32, ... (128 contiguous bytes per
 *      warp step),
 *      R partial sums per lane, butterfly reduction, lane 0 adds b.
 *   Bound by the W read: every W byte is read once per block of R rows.
 * wmma_f16 (many rows, fp16 x, sm_70+ tensor cores):
 *   64x64 output tile per block of 4 warps (2x2, each 32x32 = 2x2 WMMA 16x16x16
 *   fragments, fp32 accumulators); K in steps of 32: the block normalises its 64x32 slice
 *   of x into fp16 in shared memory and converts the 64x32 slice of W to fp16 beside it;
 *   the accumulators go through shared memory to add b and convert to fp16.
 */
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#include "nrvc_internal.h"
#include "nrvc_kernels.cuh"

namespace {

using nrvc::kWarp;
using nrvc::load_f;
constexpr int kWarps = 8;
constexpr int kThreads = kWarp * kWarps;

/* mean and 1/sqrt(var + eps) of rows r0 .. r0+n-1 of x into mean[0..n), rstd[0..n), a warp
 * per row (two passes: no cancellation); rows past `rows` get 0, 0. Ends with a block
 * barrier, so every thread may read the results. */
template <typename T>
__device__ void block_row_stats(const T *x, int64_t rows, int64_t r0, int n, int64_t in, float eps, float *mean,
                                float *rstd) {
    const int warp = (int)(threadIdx.x / kWarp), lane = (int)(threadIdx.x % kWarp);
    const int n_warps = (int)(blockDim.x / kWarp);
    for (int r = warp; r < n; r += n_warps) {
        if (r0 + r >= rows) {
            if (lane == 0) mean[r] = rstd[r] = 0.0f;
            continue;
        }
        const T *row = x + (r0 + r) * in;
        float s = 0.0f;
        for (int64_t k = lane; k < in; k += kWarp) s += load_f(row, k);
        const float mu = nrvc::warp_sum(s) / (float)in;
        float v = 0.0f;
        for (int64_t k = lane; k < in; k += kWarp) {
            const float d = load_f(row, k) - mu;
            v += d * d;
        }
        v = nrvc::warp_sum(v);
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rsqrtf(v / (float)in + eps);
        }
    }
    __syncthreads();
}

template <typename T, int R, bool STAGED>
__global__ void __launch_bounds__(kThreads)
    lnl_rows(const T *__restrict__ x, int64_t rows, int64_t in, const float *__restrict__ gamma,
             const float *__restrict__ beta, float eps, const float *__restrict__ W, int64_t out,
             const float *__restrict__ bias, T *__restrict__ y) {
    extern __shared__ float xn[]; /* STAGED: R normalised rows of in floats */
    __shared__ float mean[R], rstd[R];
    const int64_t r0 = (int64_t)blockIdx.y * R;
    const int warp = (int)(threadIdx.x / kWarp), lane = (int)(threadIdx.x % kWarp);
    block_row_stats(x, rows, r0, R, in, eps, mean, rstd);
    if constexpr (STAGED) {
        for (int64_t i = threadIdx.x; i < (int64_t)R * in; i += kThreads) {
            const int64_t r = i / in, k = i - r * in;
            xn[i] = r0 + r < rows ? (load_f(x, (r0 + r) * in + k) - mean[r]) * rstd[r] * gamma[k] + (beta ? beta[k] : 0.0f) : 0.0f;
        }
        __syncthreads();
    }
    const int64_t o = (int64_t)blockIdx.x * kWarps + warp;
    if (o >= out) return;
    const float *wrow = W + o * in;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int64_t k = lane; k < in; k += kWarp) {
        const float wk = __ldg(wrow + k);
        if constexpr (STAGED) {
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += wk * xn[r * in + k];
        } else {
            const float g = gamma[k], bt = (beta ? beta[k] : 0.0f);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t row = r0 + r < rows ? r0 + r : rows - 1; /* never past x */
                acc[r] += wk * ((load_f(x, row * in + k) - mean[r]) * rstd[r] * g + bt);
            }
        }
    }
    nrvc::store_column<R>(acc, lane, r0, rows, o, out, bias, y);
}

/* ---- wmma_f16 */
constexpr int kTile = 64, kTileK = 32, kPadK = kTileK + 8, kPadC = kTile + 4;
constexpr int kWmmaThreads = 128;

__global__ void __launch_bounds__(kWmmaThreads)
    lnl_wmma_f16(const __half *__restrict__ x, int64_t rows, int64_t in, const float *__restrict__ gamma,
                 const float *__restrict__ beta, float eps, const float *__restrict__ W, int64_t out,
                 const float *__restrict__ bias, __half *__restrict__ y) {
    using namespace nvcuda;
    __shared__ __align__(32) __half as[kTile][kPadK];
    __shared__ __align__(32) __half bs[kTile][kPadK];
    __shared__ __align__(32) float cs[kTile][kPadC];
    __shared__ float mean[kTile], rstd[kTile];
    const int64_t row0 = (int64_t)blockIdx.y * kTile, col0 = (int64_t)blockIdx.x * kTile;
    const int warp = (int)(threadIdx.x / kWarp);
    block_row_stats(x, rows, row0, kTile, in, eps, mean, rstd);

    const int wm = warp / 2, wn = warp % 2; /* this warp's 32x32 quarter */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int64_t k0 = 0; k0 < in; k0 += kTileK) {
        for (int i = threadIdx.x; i < kTile * kTileK; i += kWmmaThreads) {
            const int r = i / kTileK, kk = i % kTileK;
            const int64_t k = k0 + kk;
            float a = 0.0f, b = 0.0f;
            if (k < in) {
                if (row0 + r < rows)
                    a = (__half2float(x[(row0 + r) * in + k]) - mean[r]) * rstd[r] * gamma[k] + (beta ? beta[k] : 0.0f);
                if (col0 + r < out) b = W[(col0 + r) * in + k];
            }
            as[r][kk] = __float2half_rn(a);
            bs[r][kk] = __float2half_rn(b);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &as[wm * 32 + i * 16][kk], kPadK);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &bs[wn * 32 + j * 16][kk], kPadK);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kPadC, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kTile; i += kWmmaThreads) {
        const int r = i / kTile, c = i % kTile;
        if (row0 + r < rows && col0 + c < out)
            y[(row0 + r) * out + col0 + c] = __float2half_rn(cs[r][c] + (bias ? bias[col0 + c] : 0.0f));
    }
}

template <typename T, int R, bool STAGED>
nrv_status launch_rows(const T *x, int64_t rows, int64_t in, const float *gamma, const float *beta, float eps,
                       const float *W, int64_t out, const float *b, T *y, cudaStream_t stream) {
    const auto kernel = lnl_rows<T, R, STAGED>;
    const size_t smem = STAGED ? (size_t)R * (size_t)in * sizeof(float) : 0;
    if (smem > 48 * 1024)
        NRVC_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t col_blocks = (out + kWarps - 1) / kWarps;
    return nrvc::for_row_slices(rows, R, [&](int64_t row0, int64_t row_blocks, int64_t slice_rows) {
        kernel<<<dim3((unsigned)col_blocks, (unsigned)row_blocks), kThreads, smem, stream>>>(
            x + row0 * in, slice_rows, in, gamma, beta, eps, W, out, b, y + row0 * out);
        NRVC_CHECK_LAUNCH("lnl_rows");
        return NRV_OK;
    });
}

template <typename T>
nrv_status launch_rows_by(int32_t rows_per_block, const T *x, int64_t rows, int64_t in, const float *gamma,
                          const float *beta, float eps, const float *W, int64_t out, const float *b, T *y,
                          cudaStream_t stream) {
    switch (rows_per_block) {
    case 8: return launch_rows<T, 8, true>(x, rows, in, gamma, beta, eps, W, out, b, y, stream);
    case 4: return launch_rows<T, 4, true>(x, rows, in, gamma, beta, eps, W, out, b, y, stream);
    case 2: return launch_rows<T, 2, true>(x, rows, in, gamma, beta, eps, W, out, b, y, stream);
    case 1: return launch_rows<T, 1, true>(x, rows, in, gamma, beta, eps, W, out, b, y, stream);
    default: return launch_rows<T, 1, false>(x, rows, in, gamma, beta, eps, W, out, b, y, stream);
    }
}

nrv_status launch_wmma(const __half *x, int64_t rows, int64_t in, const float *gamma, const float *beta, float eps,
                       const float *W, int64_t out, const float *b, __half *y, cudaStream_t stream) {
    const int64_t col_blocks = (out + kTile - 1) / kTile;
    return nrvc::for_row_slices(rows, kTile, [&](int64_t row0, int64_t row_blocks, int64_t slice_rows) {
        lnl_wmma_f16<<<dim3((unsigned)col_blocks, (unsigned)row_blocks), kWmmaThreads, 0, stream>>>(
            x + row0 * in, slice_rows, in, gamma, beta, eps, W, out, b, y + row0 * out);
        NRVC_CHECK_LAUNCH("lnl_wmma_f16");
        return NRV_OK;
    });
}

} /* namespace */

NRVC_EXPORT nrv_status nrvc_layernorm_linear(int device, const void *x, nrv_dtype dtype, int64_t rows, int64_t in,
                                             const float *gamma, const float *beta, float eps, const float *W,
                                             int64_t out, const float *b, void *y, int32_t kernel,
                                             int32_t rows_per_block, void *stream_v) {
    static const char fn[] = "nrv_cuda_layernorm_linear";
    if (rows == 0 || out == 0) return NRV_OK;
    const nrv_status st = nrvc::check_device(fn, device);
    if (st != NRV_OK) return st;
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    nrv_status launched;
    if (dtype == NRV_F32) {
        launched = launch_rows_by<float>(rows_per_block, static_cast<const float *>(x), rows, in, gamma, beta, eps,
                                         W, out, b, static_cast<float *>(y), stream);
    } else if (kernel == NRVC_LNL_WMMA_F16) {
        launched = launch_wmma(static_cast<const __half *>(x), rows, in, gamma, beta, eps, W, out, b,
                               static_cast<__half *>(y), stream);
    } else {
        launched = launch_rows_by<__half>(rows_per_block, static_cast<const __half *>(x), rows, in, gamma, beta,
                                          eps, W, out, b, static_cast<__half *>(y), stream);
    }
    if (launched != NRV_OK) return launched;
    NRVC_CHECK(cudaStreamSynchronize(stream));
    return NRV_OK;
}
