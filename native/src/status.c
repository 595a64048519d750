/* status.c — status names, the thread-local error message, version, dtypes, and the
 * system-allocation choke point (with failure injection for tests). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

#ifndef NERVE_VERSION_STRING
#error "NERVE_VERSION_STRING must come from the build (VERSION file)"
#endif /* NERVE_VERSION_STRING */

#define NRV_ERROR_CAP 1024

static _Thread_local char tls_error[NRV_ERROR_CAP];

const char *nrv_status_str(nrv_status status) {
    switch (status) {
    case NRV_OK: return "NRV_OK";
    case NRV_ERR_INVALID_ARG: return "NRV_ERR_INVALID_ARG";
    case NRV_ERR_INDEX: return "NRV_ERR_INDEX";
    case NRV_ERR_SHAPE: return "NRV_ERR_SHAPE";
    case NRV_ERR_DTYPE: return "NRV_ERR_DTYPE";
    case NRV_ERR_OUT_OF_MEMORY: return "NRV_ERR_OUT_OF_MEMORY";
    case NRV_ERR_OVERFLOW: return "NRV_ERR_OVERFLOW";
    case NRV_ERR_UNSUPPORTED: return "NRV_ERR_UNSUPPORTED";
    case NRV_ERR_DEVICE: return "NRV_ERR_DEVICE";
    case NRV_ERR_IO: return "NRV_ERR_IO";
    case NRV_ERR_FORMAT: return "NRV_ERR_FORMAT";
    case NRV_ERR_STATE: return "NRV_ERR_STATE";
    case NRV_ERR_INTERNAL: return "NRV_ERR_INTERNAL";
    }
    return "NRV_ERR_UNKNOWN";
}

const char *nrv_last_error(void) { return tls_error; }

void nrv_clear_error(void) { tls_error[0] = '\0'; }

nrv_status nrv_fail(nrv_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error, sizeof tls_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *nrv_version(void) { return NERVE_VERSION_STRING; }

int nrv_version_number(void) {
    return NERVE_VERSION_MAJOR * 10000 + NERVE_VERSION_MINOR * 100 + NERVE_VERSION_PATCH;
}

const char *nrv_dtype_str(nrv_dtype dtype) {
    switch (dtype) {
    case NRV_F32: return "f32";
    case NRV_F16: return "f16";
    case NRV_I8: return "i8";
    case NRV_I32: return "i32";
    case NRV_I64: return "i64";
    case NRV_U8: return "u8";
    case NRV_BOOL: return "bool";
    case NRV_F64: return "f64";
    }
    return "unknown";
}

size_t nrv_dtype_size(nrv_dtype dtype) {
    switch (dtype) {
    case NRV_F32: return 4;
    case NRV_F16: return 2;
    case NRV_I8: return 1;
    case NRV_I32: return 4;
    case NRV_I64: return 8;
    case NRV_U8: return 1;
    case NRV_BOOL: return 1;
    case NRV_F64: return 8;
    }
    return 0;
}

nrv_status nrv_check_extent(const char *fn, const char *what, int64_t count, size_t elem_size) {
    if (count < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s has negative size %lld", fn, what, (long long)count);
    uint64_t bytes;
    if (nrv_mul_overflow((uint64_t)count, (uint64_t)elem_size, &bytes) || bytes > (uint64_t)PTRDIFF_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %s of %lld elements x %zu bytes overflows the address space",
                        fn, what, (long long)count, elem_size);
    return NRV_OK;
}

nrv_status nrv_check_matrix(const char *fn, const char *what, int64_t rows, int64_t cols, size_t elem_size) {
    if (rows < 0 || cols < 0)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s has negative shape [%lld, %lld]", fn, what,
                        (long long)rows, (long long)cols);
    uint64_t n;
    if (nrv_mul_overflow((uint64_t)rows, (uint64_t)cols, &n) || n > (uint64_t)INT64_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %s shape [%lld, %lld] overflows", fn, what,
                        (long long)rows, (long long)cols);
    return nrv_check_extent(fn, what, (int64_t)n, elem_size);
}

/* ---- system allocation choke point */

static _Atomic int64_t fail_countdown = 0;

void nrv_debug_fail_alloc_after(int64_t n) { atomic_store(&fail_countdown, n < 0 ? 0 : n); }

void *nrv_sys_alloc(size_t alignment, size_t size) {
    int64_t left = atomic_load(&fail_countdown);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &left, left - 1)) {
            if (left == 1) return NULL; /* this is the injected failure */
            break;
        }
    }
    if (size == 0) size = alignment;
    size_t rounded = (size + alignment - 1) / alignment * alignment;
    if (rounded < size) return NULL;
    return aligned_alloc(alignment, rounded);
}

void nrv_sys_free(void *ptr) { free(ptr); }

void nrv_sys_advise_huge_pages(void *ptr, size_t size) {
#if defined(MADV_HUGEPAGE)
    /* madvise wants a page-aligned start; the whole huge pages inside the range are what
     * THP can use anyway. */
    const uintptr_t start = ((uintptr_t)ptr + NRV_HUGE_PAGE - 1) & ~(uintptr_t)(NRV_HUGE_PAGE - 1);
    const uintptr_t end = ((uintptr_t)ptr + size) & ~(uintptr_t)(NRV_HUGE_PAGE - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)ptr;
    (void)size;
#endif /* MADV_HUGEPAGE */
}
