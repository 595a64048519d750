/* nrvc_device.cpp — device discovery: count and properties. */
#include <string.h>

#include "nrvc_internal.h"

NRVC_EXPORT nrv_status nrvc_device_count(int *out) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        /* cudart reports a missing driver as cudaErrorInsufficientDriver, which reads as
         * "too old"; tell the two cases apart (a machine without a GPU is the common one). */
        int driver = 0, runtime = 0;
        (void)cudaGetLastError();
        if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
            return nrvc_fail(NRV_ERR_DEVICE, "no NVIDIA driver (libcuda.so.1 could not be loaded): %s",
                             cudaGetErrorName(err));
        if (err == cudaErrorInsufficientDriver && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
            return nrvc_fail(NRV_ERR_DEVICE,
                             "the NVIDIA driver supports CUDA %d.%d but libnerve_cuda was built with CUDA %d.%d: "
                             "update the driver or rebuild with an older toolkit (%s)",
                             driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                             cudaGetErrorName(err));
        return nrvc_cuda_fail(err, __FILE__, __LINE__, "cudaGetDeviceCount(&count)");
    }
    *out = count;
    return NRV_OK;
}

NRVC_EXPORT nrv_status nrvc_device_info(int device, nrv_cuda_device_info *out) {
    static const char fn[] = "nrv_cuda_device_info_get";
    const nrv_status st = nrvc::check_device(fn, device);
    if (st != NRV_OK) return st;
    /* Scalar attributes are cheap driver queries; only the name and total memory need the
     * (heavier) full property query. */
    int major = 0, minor = 0, integrated = 0, sms = 0, smem = 0, smem_optin = 0, can_map = 0, managed = 0;
    NRVC_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, device));
    NRVC_CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrConcurrentManagedAccess, device));
    cudaDeviceProp prop;
    NRVC_CHECK(cudaGetDeviceProperties(&prop, device));

    nrv_cuda_device_info info;
    memset(&info, 0, sizeof info);
    static_assert(sizeof info.name <= sizeof prop.name, "device name buffer larger than the runtime's");
    memcpy(info.name, prop.name, sizeof info.name - 1);
    info.cc_major = major;
    info.cc_minor = minor;
    info.integrated = integrated ? 1 : 0;
    info.sm_count = sms;
    info.total_memory = (uint64_t)prop.totalGlobalMem;
    info.shared_memory_per_sm = (uint64_t)smem;
    info.shared_memory_per_block_optin = (uint64_t)smem_optin;
    info.can_map_host_memory = can_map ? 1 : 0;
    info.concurrent_managed_access = managed ? 1 : 0;
    *out = info;
    return NRV_OK;
}

NRVC_EXPORT nrv_status nrvc_copy(int device, void *dst, const void *src, uint64_t bytes) {
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    NRVC_CHECK(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDefault));
    return NRV_OK;
}
