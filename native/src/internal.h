/* internal.h — helpers shared by libnerve's sources; not part of the public API. */
#ifndef NERVE_INTERNAL_H
#define NERVE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nerve.h"

#if defined(__GNUC__)
#define NRV_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define NRV_PRINTF(fmt_idx, arg_idx)
#endif

/* Records a thread-local error message (printf format) and returns status, so a failing
 * path reads `return nrv_fail(NRV_ERR_INDEX, "embedding: id[%lld] = ...", ...);`.
 * The one choke point for error text inside the library. */
nrv_status nrv_fail(nrv_status status, const char *fmt, ...) NRV_PRINTF(2, 3);

/* Every system allocation made by nerve goes through these two, so failure injection
 * (nrv_debug_fail_alloc_after) reaches all of them. Alignment must be a power of two
 * >= sizeof(void *); size is rounded up to a multiple of alignment. NULL on failure. */
void *nrv_sys_alloc(size_t alignment, size_t size);
void nrv_sys_free(void *ptr);

/* Large arenas (>= NRV_HUGE_ARENA_MIN bytes) are aligned to NRV_HUGE_PAGE and the kernel is
 * asked to back them with transparent huge pages: a weight table gathered at random rows
 * (embeddings) otherwise spends its time in page walks, one per row. Advisory: where the
 * system has no THP nothing changes. */
#define NRV_HUGE_PAGE ((size_t)2 << 20)
#define NRV_HUGE_ARENA_MIN ((size_t)8 << 20)
void nrv_sys_advise_huge_pages(void *ptr, size_t size);

/* Overflow-checked size arithmetic: 0 on success, 1 if the result does not fit. */
static inline int nrv_mul_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int nrv_add_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* Checks that count elements of elem_size bytes fit in memory (count >= 0,
 * count * elem_size <= PTRDIFF_MAX). Returns NRV_OK or an error naming `what`. */
nrv_status nrv_check_extent(const char *fn, const char *what, int64_t count, size_t elem_size);

/* Checks a [rows, cols] array of elem_size bytes: both non-negative, the product
 * addressable. Returns NRV_OK or an error naming fn and `what`. */
nrv_status nrv_check_matrix(const char *fn, const char *what, int64_t rows, int64_t cols, size_t elem_size);

/* Everything about an embedding lookup that does not need to read the ids: dtypes,
 * row_scales given exactly for i8 tables, shapes of table and out. Shared by the CPU
 * entry point and the CUDA one, so both refuse the same inputs with the same words. */
nrv_status nrv_check_embedding_args(const char *fn, nrv_dtype table_dtype, int64_t rows, int64_t dim,
                                    const float *row_scales, nrv_dtype id_dtype, int64_t n_ids);

/* The fields of a W4 weight every product reads (dims, group, layout, non-NULL q and
 * scales), not its contents; shared by the CPU and CUDA products. */
nrv_status nrv_check_w4_desc(const char *fn, const nrv_w4_weight *w);

/* Shapes and eps of a fused layernorm+linear with x and y of elem_size bytes per value
 * (W is fp32); shared by the CPU and CUDA entry points. */
nrv_status nrv_check_layernorm_linear_args(const char *fn, int64_t rows, int64_t in, int64_t out, float eps,
                                          size_t elem_size);

/* Whether the CPU is an AMD Zen 4 or later (cpu.c; for tunings that differ by core). */
int nrv_cpu_is_amd_zen4_or_later(void);

/* Return-on-error helpers for the public entry points. */
#define NRV_TRY(expr)                                \
    do {                                             \
        const nrv_status nrv_try_s_ = (expr);        \
        if (nrv_try_s_ != NRV_OK) return nrv_try_s_; \
    } while (0)

#define NRV_REQUIRE_PTR(fn, p)                                                                 \
    do {                                                                                       \
        if (!(p)) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, #p);  \
    } while (0)

#endif /* NERVE_INTERNAL_H */
