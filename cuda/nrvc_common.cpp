/* nrvc_common.cpp — the backend's ABI version, its thread-local error message and the
 * CUDA-error-to-status mapping behind NRVC_CHECK. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nrvc_internal.h"

namespace {
constexpr size_t kErrorCap = 1024;
thread_local char tls_error[kErrorCap];
} /* namespace */

NRVC_EXPORT int nrvc_abi_version(void) { return NRVC_ABI_VERSION; }

NRVC_EXPORT const char *nrvc_last_error(void) { return tls_error; }

nrv_status nrvc_fail(nrv_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error, sizeof tls_error, fmt, ap);
    va_end(ap);
    return status;
}

nrv_status nrvc_cuda_fail(cudaError_t err, const char *file, int line, const char *what) {
    /* Clear the runtime's per-thread last error (a no-op for sticky errors, which keep
     * failing every later call and are reported by those calls themselves). */
    (void)cudaGetLastError();
    const char *slash = strrchr(file, '/');
    const char *base = slash ? slash + 1 : file;
    const char *paren = strchr(what, '(');
    const int name_len = paren ? (int)(paren - what) : (int)strlen(what);
    const nrv_status status = err == cudaErrorMemoryAllocation ? NRV_ERR_OUT_OF_MEMORY : NRV_ERR_DEVICE;
    return nrvc_fail(status, "%s:%d: %.*s%s failed: %s (%s)", base, line, name_len, what, paren ? "(...)" : "",
                     cudaGetErrorName(err), cudaGetErrorString(err));
}

namespace nrvc {

nrv_status check_device(const char *fn, int device) {
    int count = 0;
    NRVC_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: device %d out of range [0, %d)", fn, device, count);
    return NRV_OK;
}

} /* namespace nrvc */
