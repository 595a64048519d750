/* nrvc_internal.h — helpers shared by the CUDA backend's sources (host side). */
#ifndef NRVC_INTERNAL_H
#define NRVC_INTERNAL_H

#include <cuda_runtime.h>

#include "nerve_cuda_abi.h"

/* Entry points libnerve resolves with dlsym: C linkage, the only default-visibility
 * symbols of libnerve_cuda.so (everything else is hidden: CUDA/CXX_VISIBILITY_PRESET). */
#define NRVC_EXPORT extern "C" __attribute__((visibility("default")))

#if defined(__GNUC__)
#define NRVC_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define NRVC_PRINTF(fmt_idx, arg_idx)
#endif

/* Records this thread's backend error message (printf format) and returns status; the
 * loader copies the message into libnerve's nrv_last_error(). */
nrv_status nrvc_fail(nrv_status status, const char *fmt, ...) NRVC_PRINTF(2, 3);

/* Turns a CUDA error into a status and a message
 *   "nrvc_pool.cpp:42: cudaMalloc(...) failed: cudaErrorMemoryAllocation (out of memory)"
 * NRV_ERR_OUT_OF_MEMORY for cudaErrorMemoryAllocation, NRV_ERR_DEVICE for any other error.
 * what: the failing call's source text (cut at its first '(') or a label. Also clears the
 * runtime's last (non-sticky) error so a later cudaGetLastError() does not report it twice. */
nrv_status nrvc_cuda_fail(cudaError_t err, const char *file, int line, const char *what);

/* The one check for every CUDA runtime call: returns the mapped status from the
 * enclosing function (which returns nrv_status) on any error. */
#define NRVC_CHECK(call)                                                        \
    do {                                                                        \
        const cudaError_t nrvc_err_ = (call);                                   \
        if (nrvc_err_ != cudaSuccess)                                           \
            return nrvc_cuda_fail(nrvc_err_, __FILE__, __LINE__, #call);        \
    } while (0)

/* After a <<<...>>> launch: a bad configuration is reported at once by the runtime. */
#define NRVC_CHECK_LAUNCH(kernel_name)                                          \
    do {                                                                        \
        const cudaError_t nrvc_err_ = cudaPeekAtLastError();                    \
        if (nrvc_err_ != cudaSuccess)                                           \
            return nrvc_cuda_fail(nrvc_err_, __FILE__, __LINE__, kernel_name "<<<>>>"); \
    } while (0)

namespace nrvc {

/* Makes `device` current for the calling thread for the guard's lifetime and restores the
 * previous device on destruction, so backend calls never change the caller's CUDA state. */
class DeviceGuard {
public:
    DeviceGuard() = default;
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;
    cudaError_t set(int device) {
        cudaError_t err = cudaGetDevice(&prev_);
        if (err != cudaSuccess) return err;
        if (prev_ == device) return cudaSuccess;
        err = cudaSetDevice(device);
        if (err == cudaSuccess) restore_ = true;
        return err;
    }
    ~DeviceGuard() {
        if (restore_) (void)cudaSetDevice(prev_);
    }

private:
    int prev_ = 0;
    bool restore_ = false;
};

/* NRV_ERR_INVALID_ARG unless 0 <= device < the runtime's device count. */
nrv_status check_device(const char *fn, int device);

} /* namespace nrvc */

#endif /* NRVC_INTERNAL_H */
