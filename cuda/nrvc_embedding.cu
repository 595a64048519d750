/* nrvc_embedding.cu — embedding gather on the GPU: out[i, :] = table[ids[i], :]
 * (times row_scales[ids[i]] for an int8 table), f32 / f16 / int8 tables, int32 / int64 ids.
 *
 * Two kernels on the caller's stream, one host synchronisation:
 *   1. validate_ids: every id is checked; the first (lowest) out-of-range position is
 *      recorded in a device flag with atomicMin.
 *   2. gather: reads the flag first and returns at once if it is set, so nothing of out
 *      is written when any id is bad. Stream order guarantees kernel 1 finished.
 * Then the flag is copied back and the stream synchronised: NRV_OK, or NRV_ERR_INDEX
 * naming the first bad position and its id (as the CPU nrv_embedding does).
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "nrvc_internal.h"

namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256; /* 8 warps per block */
constexpr unsigned long long kNoBadId = ~0ull;

/* ids:        [n_ids] int32 or int64, device memory.
 * rows:       number of table rows; valid ids are 0 <= id < rows.
 * first_bad:  [1] uint64, preset to kNoBadId; receives the lowest bad position.
 * Grid-stride over positions: consecutive threads read consecutive ids (coalesced, one
 * 128-byte transaction per warp for int32 ids). atomicMin only on the (rare) bad ids. */
template <typename Id>
__global__ void validate_ids(const Id *__restrict__ ids, int64_t n_ids, int64_t rows,
                             unsigned long long *__restrict__ first_bad) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_ids; i += stride) {
        const int64_t id = (int64_t)ids[i];
        if (id < 0 || id >= rows) atomicMin(first_bad, (unsigned long long)i);
    }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(int8_t v) { return (float)v; }

/* Elements 4j .. 4j+3 of a row with one aligned load (16 B f32, 8 B f16, 4 B int8). */
__device__ __forceinline__ float4 load4(const float *src, int64_t j) {
    return reinterpret_cast<const float4 *>(src)[j];
}
__device__ __forceinline__ float4 load4(const __half *src, int64_t j) {
    const uint2 raw = reinterpret_cast<const uint2 *>(src)[j]; /* little-endian: element 0 in the low half */
    return make_float4(__half2float(__ushort_as_half((unsigned short)(raw.x & 0xffffu))),
                       __half2float(__ushort_as_half((unsigned short)(raw.x >> 16))),
                       __half2float(__ushort_as_half((unsigned short)(raw.y & 0xffffu))),
                       __half2float(__ushort_as_half((unsigned short)(raw.y >> 16))));
}
__device__ __forceinline__ float4 load4(const int8_t *src, int64_t j) {
    const char4 c = reinterpret_cast<const char4 *>(src)[j];
    return make_float4((float)c.x, (float)c.y, (float)c.z, (float)c.w);
}

/* table:      [rows, dim] of T (float, __half or int8_t), row-major, device memory.
 * row_scales: [rows] float; int8 tables only (nullptr and unused otherwise).
 * ids:        [n_ids] Id (int32_t or int64_t), all validated by validate_ids.
 * dim:        row length in elements; VEC == 4 requires dim % 4 == 0 and table, out
 *             aligned to 4 elements (checked by the host), else VEC == 1.
 * out:        [n_ids, dim] float, row-major, device memory; written only if *first_bad
 *             is still kNoBadId.
 * Memory access: one warp copies one output row (grid-stride over rows when n_ids is
 * larger than the grid). The 32 lanes walk the row together, lane l taking elements
 * l, l+32, ... (VEC 1) or vectors l, l+32, ... of 4 elements (VEC 4), so each warp step
 * reads one contiguous segment of the table row and writes one contiguous segment of
 * out: fully coalesced, 128 B (f32 VEC 1) to 512 B (f32 VEC 4) per instruction, and the
 * 16-byte float4 stores halve/quarter the store instructions. ids[r] and row_scales[id]
 * are one address for the whole warp (a broadcast). Rows are gathered from arbitrary
 * places, so nothing is reused within a block: no shared memory; repeated ids hit L2.
 * const __restrict__ lets the compiler load table and ids through the non-coherent
 * read-only path (ld.global.nc). */
template <typename T, typename Id, int VEC>
__global__ void gather_rows(const T *__restrict__ table, const float *__restrict__ row_scales, int64_t dim,
                            const Id *__restrict__ ids, int64_t n_ids, float *__restrict__ out,
                            const unsigned long long *__restrict__ first_bad) {
    if (*first_bad != kNoBadId) return; /* an id was out of range: write nothing */
    const int lane = (int)(threadIdx.x % kWarp);
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
    const int64_t n_warps = (int64_t)gridDim.x * blockDim.x / kWarp;
    for (int64_t r = warp; r < n_ids; r += n_warps) {
        const int64_t id = (int64_t)ids[r];
        const T *src = table + id * dim;
        float *dst = out + r * dim;
        float scale = 1.0f;
        if constexpr (sizeof(T) == 1) scale = row_scales[id];
        if constexpr (VEC == 4) {
            const int64_t n_vec = dim / 4;
            for (int64_t j = lane; j < n_vec; j += kWarp) {
                float4 v = load4(src, j);
                if constexpr (sizeof(T) == 1) {
                    v.x *= scale;
                    v.y *= scale;
                    v.z *= scale;
                    v.w *= scale;
                }
                reinterpret_cast<float4 *>(dst)[j] = v;
            }
        } else {
            for (int64_t j = lane; j < dim; j += kWarp) {
                float v = to_float(src[j]);
                if constexpr (sizeof(T) == 1) v *= scale;
                dst[j] = v;
            }
        }
    }
}

bool aligned_to(const void *p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

int64_t clamp_grid(int64_t want, int64_t cap) { return want < 1 ? 1 : (want > cap ? cap : want); }

/* The one-word device flag for validate_ids, from the stream-ordered allocator when the
 * device has one (no device-wide synchronisation), else plain cudaMalloc. */
class Flag {
public:
    Flag() = default;
    Flag(const Flag &) = delete;
    Flag &operator=(const Flag &) = delete;
    cudaError_t alloc(int device, cudaStream_t stream) {
        int pools = 0;
        cudaError_t err = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
        if (err != cudaSuccess) return err;
        stream_ = stream;
        async_ = pools != 0;
        void *p = nullptr;
        err = async_ ? cudaMallocAsync(&p, sizeof(unsigned long long), stream) : cudaMalloc(&p, sizeof(unsigned long long));
        ptr_ = static_cast<unsigned long long *>(p);
        return err;
    }
    unsigned long long *get() const { return ptr_; }
    ~Flag() {
        if (!ptr_) return;
        if (async_) (void)cudaFreeAsync(ptr_, stream_);
        else (void)cudaFree(ptr_);
        (void)cudaGetLastError();
    }

private:
    unsigned long long *ptr_ = nullptr;
    cudaStream_t stream_ = nullptr;
    bool async_ = false;
};

template <typename T, typename Id>
nrv_status launch(const void *table_v, const float *row_scales, int64_t rows, int64_t dim, const void *ids_v,
                  int64_t n_ids, float *out, unsigned long long *flag, cudaStream_t stream, int64_t sms) {
    const T *table = static_cast<const T *>(table_v);
    const Id *ids = static_cast<const Id *>(ids_v);
    const int64_t grid_v = clamp_grid((n_ids + kBlock - 1) / kBlock, sms * 8);
    validate_ids<Id><<<(unsigned)grid_v, kBlock, 0, stream>>>(ids, n_ids, rows, flag);
    NRVC_CHECK_LAUNCH("validate_ids");

    const int64_t warps_per_block = kBlock / kWarp;
    const int64_t grid_g = clamp_grid((n_ids + warps_per_block - 1) / warps_per_block, sms * 32);
    const bool vec = dim % 4 == 0 && aligned_to(table, 4 * sizeof(T)) && aligned_to(out, 16);
    if (vec)
        gather_rows<T, Id, 4><<<(unsigned)grid_g, kBlock, 0, stream>>>(table, row_scales, dim, ids, n_ids, out, flag);
    else
        gather_rows<T, Id, 1><<<(unsigned)grid_g, kBlock, 0, stream>>>(table, row_scales, dim, ids, n_ids, out, flag);
    NRVC_CHECK_LAUNCH("gather_rows");
    return NRV_OK;
}

template <typename T>
nrv_status launch_ids(int ids64, const void *table, const float *row_scales, int64_t rows, int64_t dim,
                      const void *ids, int64_t n_ids, float *out, unsigned long long *flag, cudaStream_t stream,
                      int64_t sms) {
    return ids64 ? launch<T, int64_t>(table, row_scales, rows, dim, ids, n_ids, out, flag, stream, sms)
                 : launch<T, int32_t>(table, row_scales, rows, dim, ids, n_ids, out, flag, stream, sms);
}

} /* namespace */

NRVC_EXPORT nrv_status nrvc_embedding(int device, const void *table, nrv_dtype table_dtype, int64_t rows,
                                      int64_t dim, const float *row_scales, const void *ids, int ids64,
                                      int64_t n_ids, float *out, void *stream_v) {
    static const char fn[] = "nrv_cuda_embedding";
    if (n_ids == 0 || dim == 0) return NRV_OK;
    nrv_status st = nrvc::check_device(fn, device);
    if (st != NRV_OK) return st;
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    int sms = 0;
    NRVC_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

    Flag flag;
    NRVC_CHECK(flag.alloc(device, stream));
    NRVC_CHECK(cudaMemsetAsync(flag.get(), 0xff, sizeof(unsigned long long), stream));
    switch (table_dtype) {
    case NRV_F32:
        st = launch_ids<float>(ids64, table, nullptr, rows, dim, ids, n_ids, out, flag.get(), stream, sms);
        break;
    case NRV_F16:
        st = launch_ids<__half>(ids64, table, nullptr, rows, dim, ids, n_ids, out, flag.get(), stream, sms);
        break;
    case NRV_I8:
        st = launch_ids<int8_t>(ids64, table, row_scales, rows, dim, ids, n_ids, out, flag.get(), stream, sms);
        break;
    default:
        return nrvc_fail(NRV_ERR_DTYPE, "%s: table dtype %d not supported", fn, (int)table_dtype);
    }
    if (st != NRV_OK) return st;

    unsigned long long bad = kNoBadId;
    NRVC_CHECK(cudaMemcpyAsync(&bad, flag.get(), sizeof bad, cudaMemcpyDeviceToHost, stream));
    NRVC_CHECK(cudaStreamSynchronize(stream));
    if (bad == kNoBadId) return NRV_OK;

    /* Error path only: fetch the offending id for the message. */
    long long id = 0;
    if (ids64) {
        int64_t v = 0;
        NRVC_CHECK(cudaMemcpy(&v, static_cast<const int64_t *>(ids) + bad, sizeof v, cudaMemcpyDeviceToHost));
        id = (long long)v;
    } else {
        int32_t v = 0;
        NRVC_CHECK(cudaMemcpy(&v, static_cast<const int32_t *>(ids) + bad, sizeof v, cudaMemcpyDeviceToHost));
        id = (long long)v;
    }
    return nrvc_fail(NRV_ERR_INDEX, "%s: id[%llu] = %lld out of range [0, %lld)", fn, bad, id, (long long)rows);
}
