/* nrvc_host.cpp — memory both the CPU and the GPU touch (nrv_cuda_host_buffer in nerve.h),
 * in the three modes of nrv_cuda_memory_mode, and stream-ordered copies. libnerve keeps
 * the buffer's bookkeeping and the copied-bytes counter; this file only talks to CUDA. */
#include "nrvc_internal.h"

NRVC_EXPORT nrv_status nrvc_host_alloc(int device, uint64_t bytes, int32_t mode, void **host, void **dev) {
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    void *h = nullptr, *d = nullptr;
    switch (mode) {
    case NRV_CUDA_MEM_ZERO_COPY:
        /* Mapped pinned memory: the GPU reads and writes it in place over the shared DRAM
         * (Jetson) or over PCIe (discrete, when asked for). */
        NRVC_CHECK(cudaHostAlloc(&h, (size_t)bytes, cudaHostAllocMapped | cudaHostAllocPortable));
        if (const cudaError_t err = cudaHostGetDevicePointer(&d, h, 0); err != cudaSuccess) {
            (void)cudaFreeHost(h);
            return nrvc_cuda_fail(err, __FILE__, __LINE__, "cudaHostGetDevicePointer(&d, h, 0)");
        }
        break;
    case NRV_CUDA_MEM_MANAGED:
        NRVC_CHECK(cudaMallocManaged(&h, (size_t)bytes, cudaMemAttachGlobal));
        d = h;
        break;
    default: /* NRV_CUDA_MEM_PINNED: pinned host staging plus a device mirror */
        NRVC_CHECK(cudaHostAlloc(&h, (size_t)bytes, cudaHostAllocPortable));
        if (const cudaError_t err = cudaMalloc(&d, (size_t)bytes); err != cudaSuccess) {
            (void)cudaFreeHost(h);
            return nrvc_cuda_fail(err, __FILE__, __LINE__, "cudaMalloc(&d, bytes)");
        }
        break;
    }
    *host = h;
    *dev = d;
    return NRV_OK;
}

NRVC_EXPORT void nrvc_host_free(int device, int32_t mode, void *host, void *dev) {
    nrvc::DeviceGuard guard;
    if (guard.set(device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (mode == NRV_CUDA_MEM_MANAGED) {
        (void)cudaFree(host);
    } else {
        if (mode == NRV_CUDA_MEM_PINNED) (void)cudaFree(dev);
        (void)cudaFreeHost(host);
    }
    (void)cudaGetLastError();
}

NRVC_EXPORT nrv_status nrvc_copy_async(int device, void *dst, const void *src, uint64_t bytes, void *stream_v,
                                       int synchronize) {
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    if (bytes) NRVC_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, stream));
    if (synchronize) NRVC_CHECK(cudaStreamSynchronize(stream));
    return NRV_OK;
}
