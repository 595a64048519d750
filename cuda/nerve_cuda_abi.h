/* nerve_cuda_abi.h — the C ABI between libnerve (native/src/cuda_loader.c) and the CUDA
 * backend libnerve_cuda.so. Plain C, no CUDA headers: the loader includes it too.
 *
 * libnerve dlopen()s the backend and resolves every NRVC_SYM_* below with dlsym; these are
 * the only symbols the backend exports. Rules:
 *  - Every entry point but nrvc_abi_version/nrvc_last_error returns nrv_status. On
 *    failure the backend's thread-local message (nrvc_last_error) says why, and the loader
 *    copies it into libnerve's nrv_last_error.
 *  - Arguments were validated by libnerve (sizes, dtypes, NULLs, overflow) before the call;
 *    the backend checks only what needs the device (ids on the GPU, CUDA errors).
 *  - Change a signature or a struct shared here => bump NRVC_ABI_VERSION; the loader
 *    refuses a backend whose version differs (a stale libnerve_cuda.so next to a newer
 *    libnerve).
 */
#ifndef NERVE_CUDA_ABI_H
#define NERVE_CUDA_ABI_H

#include <stdint.h>

#include "nerve.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRVC_ABI_VERSION 3

/* Opaque device pool of the backend (cuda/nrvc_pool.cpp). */
typedef struct nrvc_pool nrvc_pool;

/* NRVC_ABI_VERSION the backend was built with. */
typedef int (*nrvc_abi_version_fn)(void);
/* This thread's last backend error message ("" if none); never NULL. */
typedef const char *(*nrvc_last_error_fn)(void);
/* *out = number of devices the runtime sees. Fails (driver missing, no device, ...) with
 * the runtime's reason. */
typedef nrv_status (*nrvc_device_count_fn)(int *out);
typedef nrv_status (*nrvc_device_info_fn)(int device, nrv_cuda_device_info *out);
/* cudaMemcpy(..., cudaMemcpyDefault) on `device`; see nrv_cuda_copy. */
typedef nrv_status (*nrvc_copy_fn)(int device, void *dst, const void *src, uint64_t bytes);
/* Embedding gather on device pointers; see nrv_cuda_embedding in nerve.h. ids64: ids are
 * int64 (else int32). stream: a cudaStream_t of `device`, NULL = legacy default stream.
 * Synchronous: returns once out is written, or once an out-of-range id is known (then
 * out is untouched and the status is NRV_ERR_INDEX). */
typedef nrv_status (*nrvc_embedding_fn)(int device, const void *table, nrv_dtype table_dtype, int64_t rows,
                                        int64_t dim, const float *row_scales, const void *ids, int ids64,
                                        int64_t n_ids, float *out, void *stream);
/* y = x · Wᵀ + b with a W4 weight whose q, scales and zero are device pointers (checked
 * by libnerve: shapes, group, layout); rows_per_block: 8, 4, 2, 1 rows of x staged in
 * shared memory per block, 0 = x read from global memory. Synchronous. */
typedef nrv_status (*nrvc_linear_w4_fn)(int device, const float *x, int64_t rows, const nrv_w4_weight *w,
                                        const float *b, float *y, int32_t rows_per_block, void *stream);
/* Fused layernorm+linear on device pointers; x and y of dtype (NRV_F32 or NRV_F16), W
 * [out, in], gamma, beta [in], b [out] (may be NULL) fp32. kernel: NRVC_LNL_*; the
 * tensor-core kernel takes fp16 only. rows_per_block as for nrvc_linear_w4. Synchronous. */
enum { NRVC_LNL_WARP_ROWS = 0, NRVC_LNL_WMMA_F16 = 1 };
typedef nrv_status (*nrvc_layernorm_linear_fn)(int device, const void *x, nrv_dtype dtype, int64_t rows, int64_t in,
                                               const float *gamma, const float *beta, float eps, const float *W,
                                               int64_t out, const float *b, void *y, int32_t kernel,
                                               int32_t rows_per_block, void *stream);
/* Memory both sides touch, in nrv_cuda_memory_mode `mode`: *host for the CPU, *dev for
 * kernels (ZERO_COPY: the mapped alias of *host; MANAGED: *host itself; PINNED: a device
 * mirror the caller copies to and from). Freed with nrvc_host_free(same mode, both). */
typedef nrv_status (*nrvc_host_alloc_fn)(int device, uint64_t bytes, int32_t mode, void **host, void **dev);
typedef void (*nrvc_host_free_fn)(int device, int32_t mode, void *host, void *dev);
/* cudaMemcpyAsync(dst, src, bytes, Default) on stream, then cudaStreamSynchronize when
 * synchronize != 0 (bytes may be 0: a synchronisation point only). */
typedef nrv_status (*nrvc_copy_async_fn)(int device, void *dst, const void *src, uint64_t bytes, void *stream,
                                         int synchronize);
/* kind: nrv_pool_kind; capacity for STATIC/DYNAMIC, chunk_size x chunk_count for STREAMING
 * (the other arguments ignored). Semantics as nerve's host pools; see nrvc_pool.cpp. */
typedef nrv_status (*nrvc_pool_create_fn)(int device, int32_t kind, uint64_t capacity, uint64_t chunk_size,
                                          uint64_t chunk_count, const char *name, nrvc_pool **out);
/* Closes the pool; frees it now if no buffer is live, else at the last release. */
typedef void (*nrvc_pool_free_fn)(nrvc_pool *pool);
typedef nrv_status (*nrvc_pool_alloc_fn)(nrvc_pool *pool, uint64_t size, void **out);
/* Drops one reference (the bytes return at 0; a closed pool is freed with its last buffer). */
typedef nrv_status (*nrvc_pool_release_fn)(nrvc_pool *pool, void *ptr);
typedef nrv_status (*nrvc_pool_retain_fn)(nrvc_pool *pool, void *ptr);
/* References of a live buffer, 0 if ptr is not one. */
typedef int64_t (*nrvc_pool_refcount_fn)(const nrvc_pool *pool, const void *ptr);
/* STATIC: reclaims every byte when no buffer is live (NRV_ERR_STATE otherwise). */
typedef nrv_status (*nrvc_pool_reset_fn)(nrvc_pool *pool);
typedef nrv_status (*nrvc_pool_stats_fn)(const nrvc_pool *pool, nrv_pool_stats *out);

/* Exported names, in the order the loader resolves them. */
#define NRVC_SYM_ABI_VERSION "nrvc_abi_version"
#define NRVC_SYM_LAST_ERROR "nrvc_last_error"
#define NRVC_SYM_DEVICE_COUNT "nrvc_device_count"
#define NRVC_SYM_DEVICE_INFO "nrvc_device_info"
#define NRVC_SYM_COPY "nrvc_copy"
#define NRVC_SYM_EMBEDDING "nrvc_embedding"
#define NRVC_SYM_LINEAR_W4 "nrvc_linear_w4"
#define NRVC_SYM_LAYERNORM_LINEAR "nrvc_layernorm_linear"
#define NRVC_SYM_HOST_ALLOC "nrvc_host_alloc"
#define NRVC_SYM_HOST_FREE "nrvc_host_free"
#define NRVC_SYM_COPY_ASYNC "nrvc_copy_async"
#define NRVC_SYM_POOL_CREATE "nrvc_pool_create"
#define NRVC_SYM_POOL_FREE "nrvc_pool_free"
#define NRVC_SYM_POOL_ALLOC "nrvc_pool_alloc"
#define NRVC_SYM_POOL_RELEASE "nrvc_pool_release"
#define NRVC_SYM_POOL_STATS "nrvc_pool_stats"
#define NRVC_SYM_POOL_RETAIN "nrvc_pool_retain"
#define NRVC_SYM_POOL_REFCOUNT "nrvc_pool_refcount"
#define NRVC_SYM_POOL_RESET "nrvc_pool_reset"

#ifdef __cplusplus
}
#endif

#endif /* NERVE_CUDA_ABI_H */
