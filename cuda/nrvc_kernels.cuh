/* nrvc_kernels.cuh — pieces shared by the warp-per-column kernels (nrvc_linear_w4.cu,
 * nrvc_layernorm_linear.cu): the warp reduction and epilogue, fp32/fp16 element access,
 * and the host-side slicing of a launch into grids of at most 65535 row blocks. */
#ifndef NRVC_KERNELS_CUH
#define NRVC_KERNELS_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "nrvc_internal.h"

namespace nrvc {

constexpr int kWarp = 32;
constexpr int64_t kMaxGridY = 65535; /* gridDim.y limit */

__device__ __forceinline__ float load_f(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store_f(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

/* Sum over the 32 lanes of a warp, in every lane (butterfly). */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* Epilogue of a warp computing output column o for rows r0 .. r0+R-1: sums each lane's
 * partials over the warp, and lane 0 writes acc + bias[o] for the rows that exist. */
template <int R, typename T>
__device__ __forceinline__ void store_column(float (&acc)[R], int lane, int64_t r0, int64_t rows, int64_t o,
                                             int64_t out, const float *__restrict__ bias, T *__restrict__ y) {
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
        const float bo = bias ? bias[o] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r0 + r < rows) store_f(y, (r0 + r) * out + o, acc[r] + bo);
    }
}

/* Calls launch(row0, row_blocks, slice_rows) for consecutive slices of the rows, each at
 * most kMaxGridY blocks of rows_per_block rows; stops at the first failed launch. */
template <typename Launch>
nrv_status for_row_slices(int64_t rows, int64_t rows_per_block, Launch launch) {
    const int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
    for (int64_t first = 0; first < row_blocks; first += kMaxGridY) {
        const int64_t n = row_blocks - first < kMaxGridY ? row_blocks - first : kMaxGridY;
        const int64_t row0 = first * rows_per_block;
        const int64_t slice_rows = rows - row0 < n * rows_per_block ? rows - row0 : n * rows_per_block;
        const nrv_status st = launch(row0, n, slice_rows);
        if (st != NRV_OK) return st;
    }
    return NRV_OK;
}

} /* namespace nrvc */

#endif /* NRVC_KERNELS_CUH */
