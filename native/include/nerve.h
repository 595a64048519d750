/*
 * nerve.h — the one public header of libnerve, the edge inference core.
 *
 * Conventions (hold for every function below unless its comment says otherwise):
 *  - Names are nrv_<class>_<action>; opaque handles end in _t.
 *  - Functions return nrv_status (NRV_OK == 0). On failure nothing the caller
 *    passed as an output has been written, and nrv_last_error() holds a
 *    thread-local message with context ("embedding: id[3] = 1000 out of range [0, 1000)").
 *  - Shapes and sizes are int64_t; a negative or overflowing size is NRV_ERR_INVALID_ARG
 *    or NRV_ERR_OVERFLOW, never undefined behaviour.
 *  - Arrays are dense, row-major (C order) unless a leading dimension is given.
 *  - Pointer arguments marked "may be NULL" accept NULL; all others must not be NULL
 *    (a NULL gives NRV_ERR_INVALID_ARG naming the argument) unless the element count is 0.
 *  - Thread safety: kernel entry points (nrv_embedding, nrv_linear, ...) and queries are
 *    safe to call from any number of threads at once. A pool is NOT thread-safe: one
 *    thread at a time per pool (a session owns its pools). Functions that change
 *    process-wide settings (nrv_kernel_force, nrv_kernel_disable) must not race with
 *    kernel calls: call them at start-up or in tests.
 *  - Enums are append-only: values never change meaning between versions.
 *
 * This header is parsed by the Python binding (cffi, ABI mode) at import time: keep it
 * to plain C declarations between the NRV_CDEF_BEGIN / NRV_CDEF_END markers (no
 * preprocessor inside, enum values as plain integers, no inline functions).
 */
#ifndef NERVE_H
#define NERVE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define NRV_API __declspec(dllexport)
#else
#define NRV_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* NRV_CDEF_BEGIN */

/* ---------------------------------------------------------------- status */

typedef enum nrv_status {
    NRV_OK = 0,
    NRV_ERR_INVALID_ARG = 1,  /* NULL where not allowed, negative size, bad option */
    NRV_ERR_INDEX = 2,        /* an index (e.g. an embedding id) outside its range */
    NRV_ERR_SHAPE = 3,        /* shapes that do not fit together */
    NRV_ERR_DTYPE = 4,        /* a dtype the call does not accept */
    NRV_ERR_OUT_OF_MEMORY = 5,/* a pool is exhausted or the system allocator failed */
    NRV_ERR_OVERFLOW = 6,     /* a size computation would overflow */
    NRV_ERR_UNSUPPORTED = 7,  /* valid request this build/CPU/device cannot do */
    NRV_ERR_DEVICE = 8,       /* an accelerator (CUDA) call failed */
    NRV_ERR_IO = 9,           /* reading or writing a file failed */
    NRV_ERR_FORMAT = 10,      /* a file or buffer is corrupted or of the wrong version */
    NRV_ERR_STATE = 11,       /* call not valid in the object's current state (double release, closed pool) */
    NRV_ERR_INTERNAL = 12     /* a bug in nerve: please report with nrv_last_error() */
} nrv_status;

/* Static name of a status ("NRV_ERR_INDEX"); "NRV_ERR_UNKNOWN" for values not listed. Never NULL. */
NRV_API const char *nrv_status_str(nrv_status status);

/* Message of the last failed call on this thread ("" if none). The pointer stays valid
 * until the next nerve call on this thread. Thread-local: never NULL. */
NRV_API const char *nrv_last_error(void);

/* Clears this thread's last error message. */
NRV_API void nrv_clear_error(void);

/* ---------------------------------------------------------------- version */

/* "MAJOR.MINOR.PATCH" of the library; static string, never NULL. */
NRV_API const char *nrv_version(void);

/* Version as MAJOR*10000 + MINOR*100 + PATCH, for compile-time vs run-time checks. */
NRV_API int nrv_version_number(void);

/* ---------------------------------------------------------------- dtypes */

typedef enum nrv_dtype {
    NRV_F32 = 0,
    NRV_F16 = 1,
    NRV_I8 = 2,
    NRV_I32 = 3,
    NRV_I64 = 4,
    NRV_U8 = 5,
    NRV_BOOL = 6,
    NRV_F64 = 7
} nrv_dtype;

/* Static name ("f32", "f16", ...), "unknown" for others. */
NRV_API const char *nrv_dtype_str(nrv_dtype dtype);

/* Bytes per element, 0 for an unknown dtype. */
NRV_API size_t nrv_dtype_size(nrv_dtype dtype);

/* ---------------------------------------------------------------- capabilities */

/* CPU feature bits, as detected at run time (cpuid/xgetbv on x86, getauxval(AT_HWCAP)
 * on aarch64). Bits are append-only. */
typedef enum nrv_cpu_feature {
    NRV_CPU_NEON = 1,          /* aarch64 asimd */
    NRV_CPU_ASIMDDP = 2,       /* aarch64 dot product (sdot/udot) */
    NRV_CPU_FPHP = 4,          /* aarch64 half-precision arithmetic */
    NRV_CPU_I8MM = 8,          /* aarch64 int8 matrix multiply */
    NRV_CPU_SSE42 = 16,
    NRV_CPU_AVX = 32,
    NRV_CPU_AVX2 = 64,
    NRV_CPU_FMA = 128,
    NRV_CPU_F16C = 256,
    NRV_CPU_AVX512F = 512,
    NRV_CPU_AVX512BW = 1024,
    NRV_CPU_AVX512VL = 2048,
    NRV_CPU_AVX512DQ = 4096,
    NRV_CPU_AVX512VNNI = 8192,
    NRV_CPU_AVXVNNI = 16384,
    NRV_CPU_AMXINT8 = 32768,   /* AMX tiles with int8 dot products, and the OS let this
                                  process use them (Linux: arch_prctl ARCH_REQ_XCOMP_PERM) */
    NRV_CPU_SHA256 = 65536     /* SHA-256 instructions (x86 SHA-NI with SSE4.1, aarch64 SHA2):
                                  the plan loader's integrity check */
} nrv_cpu_feature;

/* Architecture the library was built for: "x86_64", "aarch64" or "other". Static string. */
NRV_API const char *nrv_cpu_arch(void);

/* Features the CPU and OS support (bit mask of nrv_cpu_feature), regardless of
 * NERVE_DISABLE. Detected once; thread-safe. */
NRV_API uint64_t nrv_cpu_features(void);

/* Static lowercase name of a single feature bit ("avx2", "asimddp"); NULL if the value
 * is not exactly one known bit. */
NRV_API const char *nrv_cpu_feature_name(uint64_t feature);

/* Number of logical CPUs online (>= 1). */
NRV_API int nrv_cpu_count(void);

/* ---------------------------------------------------------------- kernel dispatch
 *
 * Every op has a list of variants, the scalar reference "ref" always last. The chosen
 * variant is the first one whose CPU features are present and which is not disabled.
 * Disabling: the environment variable NERVE_DISABLE (read once, at first use) holds a
 * comma-separated list of variant names or ISA groups ("neon", "avx512", "avx2", "x86",
 * "all" = everything but ref); nrv_kernel_disable() replaces that list at run time.
 * Op names: "embedding", "embedding_f16", "embedding_q8", "layernorm", "linear",
 * "layernorm_linear", "gemm", "gelu", "gelu_tanh", "relu", "sigmoid", "tanh", "softmax".
 */

/* Number of ops in the dispatch table. */
NRV_API int nrv_kernel_op_count(void);

/* Static name of op i (0 <= i < nrv_kernel_op_count()), NULL otherwise. */
NRV_API const char *nrv_kernel_op_name(int i);

/* Number of variants compiled in for op (0 if the op is unknown). */
NRV_API int nrv_kernel_variant_count(const char *op);

/* Static name of variant i of op, NULL if out of range. */
NRV_API const char *nrv_kernel_variant_name(const char *op, int i);

/* 1 if variant i of op can run on this CPU (its features are present), else 0. */
NRV_API int nrv_kernel_variant_runnable(const char *op, int i);

/* Static name of the variant currently chosen for op, NULL if the op is unknown. */
NRV_API const char *nrv_kernel_selected(const char *op);

/* Forces op to use the named variant (for tests and benchmarks). variant NULL restores
 * the automatic choice for that op. NRV_ERR_INVALID_ARG for an unknown op or variant,
 * NRV_ERR_UNSUPPORTED if the variant cannot run on this CPU. Not thread-safe with
 * concurrent kernel calls. */
NRV_API nrv_status nrv_kernel_force(const char *op, const char *variant);

/* Replaces the disable list (same syntax as NERVE_DISABLE; NULL or "" = none) and
 * re-resolves every op that is not forced. Not thread-safe with concurrent kernel calls. */
NRV_API nrv_status nrv_kernel_disable(const char *list);

/* Static name of the variant op is forced to, NULL when op is automatic or unknown. */
NRV_API const char *nrv_kernel_forced(const char *op);

/* The disable list in force (initially NERVE_DISABLE; "" = none). Valid until the next
 * nrv_kernel_disable; never NULL. */
NRV_API const char *nrv_kernel_disabled(void);

/* 1 if variant i of op is excluded by the disable list (the reference never is), else 0. */
NRV_API int nrv_kernel_variant_disabled(const char *op, int i);

/* ---------------------------------------------------------------- kernels
 *
 * All float32, dense row-major. The caller owns every buffer; nothing is retained.
 */

/* Embedding lookup: out[i, :] = table[ids[i], :] (times row_scales[ids[i]] for an int8
 * table). table: [rows, dim] of table_dtype NRV_F32, NRV_F16 or NRV_I8.
 * row_scales: [rows] float32, required for NRV_I8, must be NULL otherwise.
 * ids: [n_ids] of id_dtype NRV_I32 or NRV_I64.
 * out: [n_ids, dim] float32.
 * Every id is checked before anything is written: an id < 0 or >= rows returns
 * NRV_ERR_INDEX naming its position and value, and out is left untouched. */
NRV_API nrv_status nrv_embedding(const void *table, nrv_dtype table_dtype, int64_t rows, int64_t dim,
                                 const float *row_scales, const void *ids, nrv_dtype id_dtype,
                                 int64_t n_ids, float *out);

/* Layer normalisation over the last dimension: y = (x - mean) / sqrt(var + eps) * gamma + beta.
 * x, y: [rows, dim] (y may equal x); gamma, beta: [dim] (beta may be NULL = zeros).
 * eps must be >= 0 and finite. */
NRV_API nrv_status nrv_layernorm(const float *x, int64_t rows, int64_t dim, const float *gamma,
                                 const float *beta, float eps, float *y);

/* Linear layer: y = x · Wᵀ + b. x: [rows, in]; w: [out, in]; b: [out] (may be NULL);
 * y: [rows, out], must not overlap x or w. in == 0 gives y = b (zeros without b). */
NRV_API nrv_status nrv_linear(const float *x, int64_t rows, int64_t in, const float *w,
                              const float *b, int64_t out, float *y);

/* Fused layernorm + linear: y = layernorm(x; gamma, beta, eps) · Wᵀ + b, each row
 * normalised once on the fly, with no normalised tensor written to memory.
 * Shapes as for nrv_layernorm and nrv_linear; beta and b may be NULL; in == 0 is
 * NRV_ERR_SHAPE (an empty row has no mean). */
NRV_API nrv_status nrv_layernorm_linear(const float *x, int64_t rows, int64_t in, const float *gamma,
                                        const float *beta, float eps, const float *w, const float *b,
                                        int64_t out, float *y);

/* General matrix product: C = alpha · op(A) · op(B) + beta · C, op(X) = X or Xᵀ.
 * op(A): [m, k], op(B): [k, n], C: [m, n]; lda/ldb/ldc are row strides in elements of
 * the stored (untransposed) matrices. beta == 0 ignores C's prior contents (NaN included). */
NRV_API nrv_status nrv_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                            const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                            float *c, int64_t ldc);

typedef enum nrv_activation {
    NRV_ACT_RELU = 0,
    NRV_ACT_GELU = 1,      /* exact: x/2 · (1 + erf(x/√2)) */
    NRV_ACT_SIGMOID = 2,
    NRV_ACT_TANH = 3,
    NRV_ACT_GELU_TANH = 4  /* tanh approximation, as in GPT-2 */
} nrv_activation;

/* Element-wise activation over n floats; y may equal x. */
NRV_API nrv_status nrv_activate(nrv_activation act, const float *x, int64_t n, float *y);

/* Softmax over the last dimension of [rows, dim]; y may equal x. */
NRV_API nrv_status nrv_softmax(const float *x, int64_t rows, int64_t dim, float *y);

/* ---------------------------------------------------------------- W4 weights
 *
 * Group-wise INT4 weights (docs/QUANTIZATION.md, "W4"): W[o, k] = scale[o, g]·(q[o, k] -
 * zero[o, g]) with g = k / group, q and zero in [-8, 7], scale an IEEE fp16. Two layouts
 * hold the same values:
 *  - NRV_W4_UNPACKED: q as int8 [out, in], one value per byte (twice the bytes, no unpack);
 *  - NRV_W4_PACKED: uint8 [out, in/2]; per row, per block of 32 weights k0..k0+31, 16 bytes,
 *    byte j = (q[k0+j] + 8) | (q[k0+16+j] + 8) << 4 (the low nibbles are the block's first
 *    16 weights, the high nibbles its last 16: one AND and one shift give 32 values in order).
 * The kernels give bit-identical outputs for the two layouts of one weight. */
typedef enum nrv_w4_layout { NRV_W4_UNPACKED = 0, NRV_W4_PACKED = 1 } nrv_w4_layout;

typedef struct nrv_w4_weight {
    int64_t out, in;        /* W is [out, in] (y = x·Wᵀ) */
    int32_t group;          /* 32, 64 or 128, dividing in */
    int32_t layout;         /* nrv_w4_layout */
    const void *q;          /* UNPACKED: int8 [out, in]; PACKED: uint8 [out, in/2] */
    const uint16_t *scales; /* fp16 [out, in/group], finite and non-zero */
    const int8_t *zero;     /* int8 [out, in/group] in [-8, 7]; NULL: symmetric (zero 0) */
} nrv_w4_weight;

/* Checks a W4 weight whole: dims, group, layout, every q of an unpacked weight in [-8, 7],
 * every scale finite and non-zero, every zero point in [-8, 7]. Reads every byte (O(size)):
 * call it once when a weight is made or loaded, not per product. The error names the
 * first bad element (row, column). */
NRV_API nrv_status nrv_w4_check(const nrv_w4_weight *w);

/* q [out, in] int8 in [-8, 7] -> packed [out, in/2] (layout above); in must be a multiple
 * of 32. Checks every value before writing anything. */
NRV_API nrv_status nrv_w4_pack(const int8_t *q, int64_t out, int64_t in, uint8_t *packed);

/* The inverse of nrv_w4_pack. */
NRV_API nrv_status nrv_w4_unpack(const uint8_t *packed, int64_t out, int64_t in, int8_t *q);

/* y = x · Wᵀ + b with a W4 weight (checked by nrv_w4_check beforehand: the contents are not
 * re-read for validity here; out-of-range values give wrong numbers, never a stray access).
 * x: [rows, in] f32; b: [out] (may be NULL); y: [rows, out], not overlapping x.
 * int8_activations 0: w4a32 (x stays fp32, W dequantised in registers); 1: w4a8 (each row
 * of x quantised to int8 on the fly, symmetric, sx = max|x| / 127, int32 products per group).
 * in <= NRV_W4_MAX_IN. */
enum { NRV_W4_MAX_IN = 16384 };
NRV_API nrv_status nrv_linear_w4(const float *x, int64_t rows, const nrv_w4_weight *w, const float *b,
                                 int int8_activations, float *y);

/* ---------------------------------------------------------------- memory pools
 *
 * Three kinds, all carving 64-byte-aligned buffers out of one arena obtained at creation
 * (arenas of 8 MiB and more are 2 MiB aligned and advised to use transparent huge pages,
 * so random-row gathers from weights in a pool do not pay a page walk per row):
 *  - STATIC: bump allocation for weights and fixed buffers; a released buffer's bytes come
 *    back only with nrv_pool_reset (when no buffer is live) or when the pool is freed.
 *  - DYNAMIC: per-session arena, best-fit over size-class free lists, neighbours
 *    coalesced on release.
 *  - STREAMING: a fixed ring of n equal chunks; acquiring takes the next free chunk in
 *    ring order; it never allocates after creation.
 * Every buffer carries a reference count (1 when allocated). nrv_buffer_retain adds a
 * reference, nrv_buffer_release drops one; the bytes return to the pool at zero.
 * nrv_pool_free may be called while buffers are still live: the pool is closed (no new
 * allocations) and its arena is kept until the last buffer is released, so a borrower
 * can outlive the owner safely.
 * Counters are exact and kept by nerve: allocated = sum of requested sizes of live
 * buffers; overhead = headers of live buffers, alignment padding and (static pool)
 * released bytes not yet reclaimed; free = capacity - allocated - overhead (in a dynamic
 * pool: the free blocks, their own headers included); peak = max of allocated;
 * failed_allocs counts requests refused for their size or the pool's room (not NULL
 * arguments, size 0 or a closed pool).
 * After nrv_pool_free with buffers still live, the handle stays valid for
 * nrv_pool_stats_get until the last buffer is released; then it is gone.
 * Thread safety: a pool and its buffers are used by one thread at a time.
 */

typedef struct nrv_pool nrv_pool_t;

typedef enum nrv_pool_kind {
    NRV_POOL_STATIC = 0,
    NRV_POOL_DYNAMIC = 1,
    NRV_POOL_STREAMING = 2
} nrv_pool_kind;

typedef struct nrv_pool_stats {
    int32_t kind;            /* nrv_pool_kind */
    int32_t closed;          /* 1 after nrv_pool_free while buffers are still live */
    uint64_t capacity;       /* bytes of the arena */
    uint64_t allocated;      /* sum of requested sizes of live buffers */
    uint64_t overhead;       /* headers, padding, unreclaimed bytes */
    uint64_t free;           /* capacity - allocated - overhead */
    uint64_t peak;           /* high-water mark of allocated */
    uint64_t largest_free;   /* largest single request that would succeed now */
    uint64_t live_buffers;   /* buffers with a reference count > 0 */
    uint64_t total_allocs;   /* successful allocations since creation */
    uint64_t failed_allocs;  /* allocations refused (exhausted, too large) */
    uint64_t chunk_size;     /* STREAMING: bytes per chunk; 0 otherwise */
    uint64_t chunk_count;    /* STREAMING: chunks in the ring; 0 otherwise */
} nrv_pool_stats;

/* Creates a STATIC or DYNAMIC pool able to hold about `capacity` bytes (headers included;
 * rounded up to a multiple of 64, at least 128). name (may be NULL) is copied (at most
 * 127 characters kept) and used in error messages. *out receives the pool,
 * owned by the caller (free with nrv_pool_free). */
NRV_API nrv_status nrv_pool_create(nrv_pool_kind kind, uint64_t capacity, const char *name,
                                   nrv_pool_t **out);

/* Creates a STREAMING pool of chunk_count chunks of chunk_size bytes each. */
NRV_API nrv_status nrv_pool_create_streaming(uint64_t chunk_size, uint64_t chunk_count,
                                             const char *name, nrv_pool_t **out);

/* Drops the owner's reference: closes the pool and frees it now if no buffer is live,
 * else when the last buffer is released. NULL is a no-op. */
NRV_API void nrv_pool_free(nrv_pool_t *pool);

/* Allocates size bytes (size > 0), 64-byte aligned, reference count 1. On exhaustion
 * NRV_ERR_OUT_OF_MEMORY with a message naming the pool, the request and what is free;
 * the pool is unchanged. STREAMING: size must be <= chunk_size. */
NRV_API nrv_status nrv_pool_alloc(nrv_pool_t *pool, uint64_t size, void **out);

/* Adds a reference to a live buffer from any pool. NRV_ERR_STATE if ptr is not a live
 * nerve buffer (best-effort check by header magic). */
NRV_API nrv_status nrv_buffer_retain(void *ptr);

/* Drops a reference; at zero the bytes return to their pool (and a closed pool with no
 * other live buffer is freed). NRV_ERR_STATE on a buffer already at zero. */
NRV_API nrv_status nrv_buffer_release(void *ptr);

/* Current reference count of a live buffer, 0 if ptr is not a live nerve buffer. */
NRV_API int64_t nrv_buffer_refcount(const void *ptr);

/* Requested size in bytes of a live buffer, 0 if ptr is not a live nerve buffer. */
NRV_API uint64_t nrv_buffer_size(const void *ptr);

/* Exact counters of a pool. */
NRV_API nrv_status nrv_pool_stats_get(const nrv_pool_t *pool, nrv_pool_stats *out);

/* Resets the peak counter to the current allocated bytes. */
NRV_API nrv_status nrv_pool_reset_peak(nrv_pool_t *pool);

/* STATIC and DYNAMIC: returns every byte to the pool. NRV_ERR_STATE if a buffer is live.
 * STREAMING: NRV_ERR_INVALID_ARG (a chunk already returns to the ring on release). */
NRV_API nrv_status nrv_pool_reset(nrv_pool_t *pool);

/* Test hook (failure injection): the n-th system allocation made by nerve from now on
 * fails (n = 1: the very next one), once; later ones succeed again. n = 0 disables.
 * Process-wide. */
NRV_API void nrv_debug_fail_alloc_after(int64_t n);

/* ---------------------------------------------------------------- CUDA backend
 *
 * The CUDA backend is a separate library (libnerve_cuda) loaded on first use from the
 * directory of libnerve; a CPU-only build, or a machine without a GPU, simply reports
 * zero devices.
 * Loading (once per process, thread-safe): libnerve_cuda.so next to the libnerve that
 * holds this code; if it is not there, the path in the environment variable
 * NERVE_CUDA_LIBRARY (read once, at first use). The library needs only the NVIDIA driver.
 * Every function below fails with NRV_ERR_UNSUPPORTED (nrv_cuda_device_count: returns 0),
 * the reason in nrv_last_error(), when the backend or a GPU is absent; CUDA errors are
 * NRV_ERR_DEVICE (NRV_ERR_OUT_OF_MEMORY when the device is out of memory) with the
 * failing call, file and line in the message.
 * Device pointers below are pointers to device memory (cudaMalloc, a nerve device pool,
 * managed memory) of the device named by the call. Calls are synchronous: they return
 * once the result is written or the error is known.
 */

/* Number of usable CUDA devices (0 when the backend or a GPU is absent; the reason is
 * then in nrv_last_error()). Thread-safe. */
NRV_API int nrv_cuda_device_count(void);

/* Properties of a CUDA device. total_memory: bytes of device memory (on an integrated
 * GPU such as Jetson, the memory shared with the CPU). */
typedef struct nrv_cuda_device_info {
    char name[256];               /* NUL-terminated, e.g. "Orin" */
    int32_t cc_major;             /* compute capability, e.g. 8 and 7 for Orin */
    int32_t cc_minor;
    int32_t integrated;           /* 1: shares memory with the host (Jetson), 0: discrete */
    int32_t sm_count;             /* streaming multiprocessors */
    uint64_t total_memory;        /* bytes */
    uint64_t shared_memory_per_sm;/* bytes of shared memory per SM */
    uint64_t shared_memory_per_block_optin; /* most shared memory one block can opt in to */
    int32_t can_map_host_memory;  /* 1: pinned host memory can be mapped into the device */
    int32_t concurrent_managed_access; /* 1: CPU and GPU may touch managed memory at once */
} nrv_cuda_device_info;

/* Fills *out for device 0 <= device < nrv_cuda_device_count(); NRV_ERR_INVALID_ARG for
 * another index. Thread-safe. */
NRV_API nrv_status nrv_cuda_device_info_get(int device, nrv_cuda_device_info *out);

/* What nerve runs on a CUDA device, decided from its properties alone: pure host code,
 * no GPU or backend needed, so every device's table can be printed and tested anywhere
 * (`nerve cuda-select`). docs/CUDA.md gives each rule and its reason; in short:
 *  - fused layernorm+linear: up to lnl_rows_max_warp rows (the streaming case) the
 *    warp-per-column kernel, bound by weight bandwidth; above it, fp16 activations go to
 *    tensor cores (WMMA, fp32 accumulation) and fp32 activations stay on fp32 FMA (tensor
 *    cores would round them to fp16/tf32: 10 mantissa bits).
 *  - W4: the layout (packed 4-bit or unpacked int8, nerve.h "W4 weights") for few rows
 *    (w4_gemv_max_rows) and for more; rows of x are staged in shared memory, as many per
 *    block as fit in the per-block budget smem_per_block (nrv_cuda_w4_rows_per_block).
 *  - memory: where buffers that both the CPU and the GPU touch live (nrv_cuda_memory_mode).
 * force_cc: "MAJOR.MINOR" replaces the device's compute capability (every other property
 * is kept), NULL reads the environment variable NERVE_FORCE_CC, "" forces nothing.
 * memory: "auto", "zero_copy", "pinned" or "managed"; NULL reads NERVE_CUDA_MEMORY (unset:
 * auto). A mode the device cannot do is NRV_ERR_UNSUPPORTED naming the missing property;
 * a malformed string NRV_ERR_INVALID_ARG. */
typedef enum nrv_cuda_memory_mode {
    NRV_CUDA_MEM_PINNED = 0,    /* pinned host staging + async copies on the session's stream */
    NRV_CUDA_MEM_ZERO_COPY = 1, /* mapped pinned host memory, read and written in place */
    NRV_CUDA_MEM_MANAGED = 2    /* cudaMallocManaged, migrated or shared by the driver */
} nrv_cuda_memory_mode;

typedef struct nrv_cuda_selection {
    int32_t cc_major, cc_minor;  /* the capability the choices were made for */
    int32_t cc_forced;           /* 1: from force_cc / NERVE_FORCE_CC */
    int32_t lnl_rows_max_warp;   /* fused layernorm+linear: rows <= this run "warp_rows" */
    int32_t lnl_tensor_cores;    /* 1: more rows of fp16 activations run "wmma_f16" */
    int32_t w4_gemv_layout;      /* nrv_w4_layout for rows <= w4_gemv_max_rows */
    int32_t w4_gemv_max_rows;
    int32_t w4_gemm_layout;      /* nrv_w4_layout for more rows */
    int32_t memory_mode;         /* nrv_cuda_memory_mode */
    uint64_t smem_per_block;     /* shared-memory budget of one block, bytes */
    char reasons[1024];          /* one line per decision, '\n'-separated */
} nrv_cuda_selection;

NRV_API nrv_status nrv_cuda_select(const nrv_cuda_device_info *dev, const char *force_cc, const char *memory,
                                   nrv_cuda_selection *out);

/* Rows of x one W4 block stages for input width `in` under selection `sel` (8, 4, 2, 1 or
 * 0 = none fit: x is read from global memory). */
NRV_API int32_t nrv_cuda_w4_rows_per_block(const nrv_cuda_selection *sel, int64_t in);

/* Copies bytes between host and device memory or within device memory, the direction
 * taken from the pointers (unified addressing); host memory may be pageable. Synchronous
 * with the host (the legacy default stream). bytes == 0 is a no-op. Thread-safe. */
NRV_API nrv_status nrv_cuda_copy(int device, void *dst, const void *src, uint64_t bytes);

/* Embedding lookup on the GPU: as nrv_embedding (same shapes, dtypes and checks), but
 * table, row_scales, ids and out are device pointers of `device`, and stream is a
 * cudaStream_t of that device (NULL = the legacy default stream; work already queued on
 * it runs first). Ids are checked on the device before anything is written: an id < 0 or
 * >= rows returns NRV_ERR_INDEX naming the first bad position and its value, with out
 * untouched. The calling thread's current CUDA device is restored on return.
 * Thread-safe (calls on different streams may run at once). */
NRV_API nrv_status nrv_cuda_embedding(int device, const void *table, nrv_dtype table_dtype, int64_t rows,
                                      int64_t dim, const float *row_scales, const void *ids,
                                      nrv_dtype id_dtype, int64_t n_ids, float *out, void *stream);

/* W4 product on the GPU: nrv_linear_w4 with int8_activations 0 (w4a32: fp32 x, weights
 * decoded in registers, fp32 sums), but x, b, y and the weight's q, scales and zero are
 * device pointers of `device`. A device weight is a byte copy of a host weight in either
 * layout, checked with nrv_w4_check on the host before the upload (values are not
 * re-checked here); q must be 16-byte aligned. nrv_cuda_select decides the kernel shape
 * (NERVE_FORCE_CC applies) and says which layout to upload for a row count. Results
 * match the CPU reference within fp32 summation-order error, for both layouts. */
NRV_API nrv_status nrv_cuda_linear_w4(int device, const float *x, int64_t rows, const nrv_w4_weight *w,
                                      const float *b, float *y, void *stream);

/* Fused layernorm+linear on the GPU: nrv_layernorm_linear with device pointers, x and y
 * of dtype NRV_F32 or NRV_F16 (W, gamma, beta, b fp32; beta and b may be NULL; sums in
 * fp32). Each row is normalised once in registers/shared memory; no normalised tensor
 * reaches global memory. Up to nrv_cuda_select's lnl_rows_max_warp rows, or fp32 x: the
 * warp-per-column kernel; more rows of fp16 x: tensor cores (WMMA, W rounded to fp16). */
NRV_API nrv_status nrv_cuda_layernorm_linear(int device, const void *x, nrv_dtype dtype, int64_t rows, int64_t in,
                                             const float *gamma, const float *beta, float eps, const float *w,
                                             int64_t out, const float *b, void *y, void *stream);

/* Host buffer: memory the CPU writes and GPU kernels read (or the reverse): audio chunks,
 * features, an embedding lookup's output. Its mode is nrv_cuda_select's memory_mode for
 * the device (NERVE_CUDA_MEMORY overrides):
 *  - ZERO_COPY (integrated GPUs, Jetson): mapped pinned memory; host and device pointers
 *    alias the same bytes, nothing is ever copied;
 *  - PINNED (discrete GPUs): pinned host memory plus a device mirror; the sync calls copy
 *    between them asynchronously on the caller's stream;
 *  - MANAGED: cudaMallocManaged, the driver moves pages.
 * The same calls work in every mode, so code written for a Jetson runs on a desktop GPU:
 * write through host(), call to_device(), launch on device(), call to_host(), read
 * host(). Sync calls take a byte range and a stream (NULL = legacy default stream);
 * to_device returns once the copy is queued (later work on that stream sees it); to_host
 * returns once the stream is idle and the bytes are on the host. Every byte copied is
 * counted by nrv_cuda_bytes_copied (ZERO_COPY and MANAGED add 0).
 * Thread safety: a buffer is used by one thread at a time. */
typedef struct nrv_cuda_host_buffer nrv_cuda_host_buffer_t;

/* *out = a buffer of `bytes` (> 0) bytes for `device`; free with nrv_cuda_host_buffer_free. */
NRV_API nrv_status nrv_cuda_host_buffer_create(int device, uint64_t bytes, nrv_cuda_host_buffer_t **out);
/* Frees it (NULL: no-op); no queued GPU work may still use it. */
NRV_API void nrv_cuda_host_buffer_free(nrv_cuda_host_buffer_t *buf);
/* The CPU's pointer, the kernels' pointer, and the mode (nrv_cuda_memory_mode). */
NRV_API void *nrv_cuda_host_buffer_host(const nrv_cuda_host_buffer_t *buf);
NRV_API void *nrv_cuda_host_buffer_device(const nrv_cuda_host_buffer_t *buf);
NRV_API int32_t nrv_cuda_host_buffer_mode(const nrv_cuda_host_buffer_t *buf);
/* Makes host writes to [offset, offset + bytes) visible to kernels on `stream`. */
NRV_API nrv_status nrv_cuda_host_buffer_to_device(nrv_cuda_host_buffer_t *buf, uint64_t offset, uint64_t bytes,
                                                  void *stream);
/* Makes kernel writes to [offset, offset + bytes) on `stream` visible to the host. */
NRV_API nrv_status nrv_cuda_host_buffer_to_host(nrv_cuda_host_buffer_t *buf, uint64_t offset, uint64_t bytes,
                                                void *stream);
/* Bytes nerve copied between host and device memory in this process: nrv_cuda_copy calls
 * and host-buffer syncs. Monotonic; thread-safe. */
NRV_API uint64_t nrv_cuda_bytes_copied(void);

/* Device memory pools: the three kinds of the host pools above (STATIC, DYNAMIC,
 * STREAMING), each one arena of device memory (one cudaMalloc at creation). Buffers are
 * carved out of it 256-byte aligned:
 *  - DYNAMIC: best fit, neighbours coalesced on release;
 *  - STATIC: bump allocation, released bytes return with nrv_cuda_pool_reset;
 *  - STREAMING: a ring of equal chunks, taken in ring order, nothing allocated after
 *    creation.
 * The bookkeeping lives on the host, so the whole arena is usable. Counters are exact and
 * kept by nerve (not cudaMemGetInfo), with nrv_pool_stats's meaning: overhead is alignment
 * padding, plus STATIC's unreclaimed bytes and STREAMING's unused chunk tails.
 * Every buffer carries a reference count (1 when allocated): nrv_cuda_buffer_retain adds
 * one, nrv_cuda_pool_release drops one, and the bytes return at zero. nrv_cuda_pool_free
 * with buffers still live closes the pool: allocations fail with NRV_ERR_STATE, the arena
 * is kept, and the release of the last buffer frees it. So a borrower (a stream holding a
 * KV-cache chunk) outlives its owner safely. The handle stays valid for release calls
 * until then.
 * Thread safety: a pool is used by one thread at a time. */
typedef struct nrv_cuda_pool nrv_cuda_pool_t;

/* Creates a DYNAMIC pool of `capacity` bytes (rounded up to 256) on device. name (may be
 * NULL) is copied for error messages. *out is owned by the caller: free with nrv_cuda_pool_free. */
NRV_API nrv_status nrv_cuda_pool_create(int device, uint64_t capacity, const char *name,
                                        nrv_cuda_pool_t **out);
/* The same for kind NRV_POOL_STATIC or NRV_POOL_DYNAMIC. */
NRV_API nrv_status nrv_cuda_pool_create_kind(int device, nrv_pool_kind kind, uint64_t capacity, const char *name,
                                             nrv_cuda_pool_t **out);
/* A STREAMING pool: chunk_count chunks of chunk_size bytes (rounded up to 256). */
NRV_API nrv_status nrv_cuda_pool_create_streaming(int device, uint64_t chunk_size, uint64_t chunk_count,
                                                  const char *name, nrv_cuda_pool_t **out);

/* Closes the pool: frees the arena now if no buffer is live, else when the last one is
 * released. NULL (or a pool already closed) is a no-op. The caller makes sure no queued
 * GPU work still uses the pool's memory. */
NRV_API void nrv_cuda_pool_free(nrv_cuda_pool_t *pool);

/* *out = a device pointer to size bytes (size > 0), 256-byte aligned, reference count 1.
 * On exhaustion NRV_ERR_OUT_OF_MEMORY naming the pool, the request and what is free (a
 * STREAMING request above chunk_size likewise); on a closed pool NRV_ERR_STATE; the pool
 * unchanged but for failed_allocs. */
NRV_API nrv_status nrv_cuda_pool_alloc(nrv_cuda_pool_t *pool, uint64_t size, void **out);

/* Drops one reference of a buffer of this pool; NRV_ERR_STATE if ptr is not a live
 * buffer of it. */
NRV_API nrv_status nrv_cuda_pool_release(nrv_cuda_pool_t *pool, void *ptr);
/* Adds a reference (NRV_ERR_STATE if ptr is not a live buffer of the pool). */
NRV_API nrv_status nrv_cuda_buffer_retain(nrv_cuda_pool_t *pool, void *ptr);
/* References held on a live buffer; 0 if ptr is not one (or no backend). */
NRV_API int64_t nrv_cuda_buffer_refcount(const nrv_cuda_pool_t *pool, const void *ptr);
/* STATIC: reclaims every byte; NRV_ERR_STATE while buffers are live. Others: a no-op when
 * no buffer is live. */
NRV_API nrv_status nrv_cuda_pool_reset(nrv_cuda_pool_t *pool);

/* Exact counters of a device pool. */
NRV_API nrv_status nrv_cuda_pool_stats_get(const nrv_cuda_pool_t *pool, nrv_pool_stats *out);


/* ---------------------------------------------------------------- compiled plans and sessions
 *
 * A plan (.nrv, written by the Python compiler: nerve.compile) is a model turned into a flat
 * list of kernels with every buffer placed in advance: weights in a static pool, activations
 * at fixed offsets in one arena planned for the declared upper bounds of the model's symbolic
 * dimensions, recurrent state in double buffers. A session holds one loaded plan; a run binds
 * the actual sizes from the feeds' shapes and executes every kernel in one call, allocating
 * nothing. The file is checked at load (magic, version, SHA-256, every index and offset):
 * a bad file gives NRV_ERR_FORMAT and no session.
 * Thread safety: a session is used by one thread at a time; sessions are independent.
 */
typedef struct nrv_session nrv_session_t;

/* A dense row-major tensor passed in or out of a run (rank <= NRV_MAX_RANK = 8). */
typedef struct nrv_tensor {
    void *data;
    int32_t dtype; /* nrv_dtype */
    int32_t rank;
    int64_t dims[8];
} nrv_tensor;

/* Loads a plan from memory (copied: the caller may free it afterwards) or from a file.
 * *out receives the session, owned by the caller (nrv_session_free). */
NRV_API nrv_status nrv_session_create(const void *plan, uint64_t size, nrv_session_t **out);
NRV_API nrv_status nrv_session_create_from_file(const char *path, nrv_session_t **out);
NRV_API void nrv_session_free(nrv_session_t *session);

/* Runs the plan once. feeds: one per input, in input order, each exactly the input's dtype
 * and rank with dims within the plan's bounds; the session reads them during the call only.
 * A state input (bound to an output, see nrv_io_info.state_partner) may be given with
 * data NULL and rank 0: it then reads what the previous run wrote. outputs: room for one
 * nrv_tensor per output, filled with pointers into the session's memory, valid until the next
 * run or nrv_session_free. On error nothing the caller owns was written and the state is
 * unchanged. An output whose state pair appends in place (a decoder's key/value cache,
 * docs/PLAN_FORMAT.md) points at the session's cache, stored sequence-major. Float results
 * that would be subnormal are flushed to zero, and subnormal inputs read as zero, during
 * the run (x86 MXCSR FTZ+DAZ, aarch64 FPCR.FZ: an Intel core pays a microcode assist per
 * subnormal operand); the calling thread's mode is restored before returning. */
NRV_API nrv_status nrv_session_run(nrv_session_t *session, const nrv_tensor *feeds, int n_feeds,
                                   nrv_tensor *outputs, int n_outputs);

/* Runs the big ops (linear, matmul, conv) on `threads` threads (1..256; 1 = the caller
 * only, the default). The session owns the worker threads; they sleep between runs. Every
 * op splits its work from the problem's shape alone, so results are bit-identical for any
 * thread count. */
NRV_API nrv_status nrv_session_set_threads(nrv_session_t *session, int threads);
NRV_API int nrv_session_threads(const nrv_session_t *session);

/* Forgets the carried state: the next run must feed every state input. */
NRV_API nrv_status nrv_session_reset_state(nrv_session_t *session);

/* Greedy decoding in one call: the session's plan is one decoder step (a token in, logits
 * out, its key/value caches carried as state pairs). Step 0 runs with `feeds` as given
 * (state inputs fed or read from the state, like nrv_session_run) and the token input set to
 * first_token; every later step feeds the previous step's choice, reads every state input
 * from the state and keeps the other feeds. The choice is the argmax over the first `vocab`
 * logits of the last row (ties: the lower id). The loop stops when end_token is chosen (not
 * stored), when max_tokens are stored, or when the last 1..8 tokens repeated repeat_limit
 * times in a row (0: no such check; the loop stops after the repeat is stored).
 * tokens/logprobs: room for max_tokens; tokens[0] = first_token with logprobs[0] = 0 (the
 * caller chose it), then each chosen token and its log-softmax over the `vocab` logits.
 * *n_tokens: how many were stored; *stopped: 0 end token, 1 length, 2 repetition. */
typedef struct nrv_greedy_options {
    int32_t token_input;   /* index of the int64 token input (one element: [1, 1]) */
    int32_t logits_output; /* index of the f32 logits output ([..., V], V >= vocab) */
    int64_t vocab;         /* logits considered: ids [0, vocab) */
    int64_t first_token;
    int64_t end_token;
    int32_t max_tokens;    /* >= 1 */
    int32_t repeat_limit;  /* 0 or >= 2 */
} nrv_greedy_options;
NRV_API nrv_status nrv_session_decode_greedy(nrv_session_t *session, const nrv_tensor *feeds, int n_feeds,
                                             const nrv_greedy_options *options, int64_t *tokens, float *logprobs,
                                             int32_t *n_tokens, int32_t *stopped);

NRV_API int nrv_session_input_count(const nrv_session_t *session);
NRV_API int nrv_session_output_count(const nrv_session_t *session);

/* Description of input or output i. dims[k] is -1 for a symbolic dimension, whose name is
 * dim_names[k] and whose upper bound is dim_bounds[k] (-1 and "?" for an output dimension
 * computed from several symbols). state_partner: the output an input is bound to (or the
 * input an output feeds), -1 if none. Strings live as long as the session. */
typedef struct nrv_io_info {
    const char *name;
    int32_t dtype;
    int32_t rank;
    int64_t dims[8];
    const char *dim_names[8];
    int64_t dim_bounds[8];
    int32_t state_partner;
} nrv_io_info;
NRV_API nrv_status nrv_session_io_info(const nrv_session_t *session, int is_output, int i, nrv_io_info *out);

/* The plan's ops, for `nerve plan`: type, ONNX node(s) it came from, the kernel variant the
 * dispatch table chose on this machine ("" for portable loops), tensor ids (first 16). */
typedef struct nrv_op_info {
    const char *type;
    const char *name;
    const char *kernel;
    int32_t n_in;
    int32_t n_out;
    int32_t in[16];
    int32_t out[16];
    int32_t scratch;
    uint64_t calls;    /* runs of this op since profiling was switched on */
    uint64_t total_ns; /* time spent in it (monotonic clock) */
} nrv_op_info;
NRV_API int nrv_session_op_count(const nrv_session_t *session);
NRV_API nrv_status nrv_session_op_info(const nrv_session_t *session, int i, nrv_op_info *out);

/* Switches per-op timing on (enable != 0) or off and zeroes the counters; costs two clock
 * reads per op while on. */
NRV_API nrv_status nrv_session_profile(nrv_session_t *session, int enable);

/* The plan's tensors: storage 0 = arena, 1 = weight, 2 = a feed, 3 = a state buffer; offset
 * and capacity in bytes within it; dims as of the last run (or the load, if fixed). */
typedef struct nrv_tensor_info {
    const char *name;
    int32_t dtype;
    int32_t rank;
    int32_t storage;
    int32_t ref;
    uint64_t offset;
    uint64_t capacity;
    int64_t dims[8];
} nrv_tensor_info;
NRV_API int nrv_session_tensor_count(const nrv_session_t *session);
NRV_API nrv_status nrv_session_tensor_info(const nrv_session_t *session, int i, nrv_tensor_info *out);

/* Bytes the session holds, from its pools' exact counters: weights (after any widening),
 * the activation arena, the state double buffers; *_capacity include pool headers. */
typedef struct nrv_session_memory {
    uint64_t weight_bytes;        /* weights this session uses (shared copies included) */
    uint64_t arena_bytes;
    uint64_t state_bytes;
    uint64_t weight_loaded_bytes; /* of weight_bytes, loaded by this session; the rest was
                                     already in the process-wide weight store (another
                                     session holds the same bytes) and is shared */
    uint64_t arena_pool_capacity;
    uint64_t state_pool_capacity;
} nrv_session_memory;
NRV_API nrv_status nrv_session_memory_get(const nrv_session_t *session, nrv_session_memory *out);

/* Hex SHA-256 of the plan (over its metadata and weights), as stored in the file. */
NRV_API const char *nrv_session_hash(const nrv_session_t *session);

/* ---------------------------------------------------------------- audio
 *
 * The input stage of the speech pipeline: interleaved samples of any format and channel
 * count to mono float32 (nrv_audio_to_mono_f32), then a stateful resampler to the model's
 * rate (nrv_resampler_*). Sample counts are size_t (buffers in memory).
 *
 * Resampler. in_rate / out_rate (each 1..384000 Hz) is reduced by the gcd to M / L; equal
 * rates are an exact copy (no filter, no delay). Otherwise a windowed-sinc polyphase FIR
 * (Kaiser window, designed for 90 dB; table computed at create): with fmin = min(in_rate,
 * out_rate) the passband reaches 0.45 fmin (ripple < 0.001 dB), -6 dB at 0.475 fmin, and
 * the stopband starts at 0.5 fmin (>= 89.8 dB measured on the float tables), so no alias or image
 * lands below the lower Nyquist frequency. K taps per output: 320 for 44.1k -> 16k, 352
 * for 48k -> 16k, 128 for 8k -> 16k (nrv_resampler_info_get gives the figures).
 * Time base: the group delay is compensated, output sample k is the signal at time
 * k / out_rate (input sample n at n / in_rate, zeros before the first). Output k needs
 * input up to k * M / L + K/2 (the latency, in input samples), so a process call emits
 * exactly the outputs whose inputs have all arrived: the count depends only on the total
 * input so far, never on how it was sliced, and so do the values, bit for bit. flush emits
 * the tail, up to ceil(N * L / M) outputs in all for N inputs, and resets the stream.
 * Input samples are float32; NaN or Inf propagate into about K outputs (check first).
 * Thread safety: a resampler is used by one thread at a time; separate resamplers are
 * independent; nrv_resampler_create and nrv_audio_to_mono_f32 are thread-safe.
 */
typedef struct nrv_resampler nrv_resampler_t;

/* Creates a resampler from in_rate to out_rate Hz; *out receives it, owned by the caller
 * (nrv_resampler_free). NRV_ERR_INVALID_ARG for a rate outside [1, 384000];
 * NRV_ERR_UNSUPPORTED for a downsampling ratio beyond ~2300:1 (the filter would need more
 * than 262144 taps per output; resample in two stages). The only allocation it makes. */
NRV_API nrv_status nrv_resampler_create(int in_rate, int out_rate, nrv_resampler_t **out);

/* Frees the resampler; NULL is a no-op. */
NRV_API void nrv_resampler_free(nrv_resampler_t *r);

/* Forgets the stream: as just created (history zero, counters zero). */
NRV_API nrv_status nrv_resampler_reset(nrv_resampler_t *r);

/* The exact number of samples nrv_resampler_process(r, ., n_in, ...) writes in the
 * resampler's current state; never more than ceil(n_in * L / M) + 1 (so that bound sizes a
 * buffer for any call of n_in samples). SIZE_MAX if the count overflows, 0 for r NULL. */
NRV_API size_t nrv_resampler_output_bound(const nrv_resampler_t *r, size_t n_in);

/* The exact number of samples nrv_resampler_flush writes now (0 for r NULL); at most
 * K/2 * L / M + 1. */
NRV_API size_t nrv_resampler_flush_count(const nrv_resampler_t *r);

/* Feeds n_in samples of in (may be NULL when n_in is 0) and writes the outputs they
 * complete to out (room for out_cap floats; may be NULL when no output is due); *n_out
 * receives their number. in and out must not overlap; neither is retained. If out_cap is
 * smaller than the count (NRV_ERR_INVALID_ARG), nothing is written and the state is
 * unchanged. */
NRV_API nrv_status nrv_resampler_process(nrv_resampler_t *r, const float *in, size_t n_in, float *out,
                                         size_t out_cap, size_t *n_out);

/* Ends the stream: writes the remaining outputs (nrv_resampler_flush_count of them, the
 * input treated as zero past its end) to out and resets the resampler, so the next
 * process call starts a new stream. out_cap too small: NRV_ERR_INVALID_ARG, nothing written,
 * state unchanged. */
NRV_API nrv_status nrv_resampler_flush(nrv_resampler_t *r, float *out, size_t out_cap, size_t *n_out);

/* Design and state of a resampler. The table (nrv_resampler_filter) has table_rows rows of
 * taps floats: row p holds g(p / up + taps/2 - 1 - j), j = 0..taps-1, of the prototype
 * g(t) = 2 fc sinc(2 fc t) I0(beta sqrt(1 - (2t/taps)^2)) / I0(beta), t in input samples,
 * fc = cutoff_hz / in_rate; output k = q * up + p (k * down = q * up + p) is row p dotted
 * with input samples q - taps/2 + 1 .. q + taps/2. When interp_phases > 0 the table has
 * interp_phases + 1 rows at offsets i / interp_phases instead, and an output blends the
 * dot products of rows i = floor(p * P / up) and i + 1 with weight (p * P mod up) / up. */
typedef struct nrv_resampler_info {
    int32_t in_rate;
    int32_t out_rate;
    int32_t up;              /* L = out_rate / gcd */
    int32_t down;            /* M = in_rate / gcd */
    int32_t taps;            /* K per output sample (a multiple of 16); 0 = exact copy */
    int32_t table_rows;      /* L, or interp_phases + 1 */
    int32_t interp_phases;   /* 0: one exact row per phase */
    int32_t latency;         /* K/2: input samples of lookahead; the figures below are 0 for a copy */
    double cutoff_hz;        /* 0.475 fmin: the -6 dB point */
    double passband_hz;      /* 0.45 fmin */
    double stopband_hz;      /* 0.5 fmin */
    double kaiser_beta;
    double design_atten_db;  /* 90 */
    uint64_t total_in;       /* samples fed since create / reset / flush */
    uint64_t total_out;      /* samples written by process since then */
} nrv_resampler_info;
NRV_API nrv_status nrv_resampler_info_get(const nrv_resampler_t *r, nrv_resampler_info *out);

/* Copies the coefficient table (table_rows * taps floats, row-major) to taps (room for cap
 * floats); *n receives the count. cap too small: NRV_ERR_INVALID_ARG, nothing written. */
NRV_API nrv_status nrv_resampler_filter(const nrv_resampler_t *r, float *taps, size_t cap, size_t *n);

/* Sample formats of interleaved audio, all little-endian (the WAV byte order). */
typedef enum nrv_sample_format {
    NRV_SAMPLE_U8 = 0,   /* unsigned 8-bit, 128 = silence */
    NRV_SAMPLE_S16 = 1,
    NRV_SAMPLE_S24 = 2,  /* packed: 3 bytes per sample */
    NRV_SAMPLE_S32 = 3,
    NRV_SAMPLE_F32 = 4,
    NRV_SAMPLE_F64 = 5
} nrv_sample_format;

/* Bytes per sample of a format, 0 for an unknown one. */
NRV_API size_t nrv_sample_format_size(nrv_sample_format format);

/* Converts frames x channels interleaved samples (channels 1..65535) to mono float32: each
 * out[i] is the mean of frame i's channels, integers scaled so full scale is [-1, 1)
 * (u8 (v-128)/128, s16 v/2^15, s24 v/2^23, s32 v/2^31), floats kept as they are (not
 * clipped); summed in double, rounded once. in needs no alignment. A NaN or infinite sample
 * (or an f64 beyond the float range) is replaced by 0 and counted in *n_nonfinite (may be
 * NULL), so the caller can refuse the input. out: frames floats; it must not overlap in,
 * except out == in for F32, S32 and F64 (in-place downmix). NRV_ERR_DTYPE for an unknown
 * format. */
NRV_API nrv_status nrv_audio_to_mono_f32(const void *in, nrv_sample_format sample_format, size_t frames,
                                         int channels, float *out, size_t *n_nonfinite);

/* FLAC decoder (RFC 9639), native/src/audio/flac.c: the encoded stream is a buffer in memory
 * (a whole .flac file, optionally after an ID3v2 tag), borrowed: it must outlive the decoder.
 * Every subframe type, 4-32 bits per sample, 1-8 channels, fixed and variable block sizes.
 * Frames come out as interleaved int32 samples left-aligned to 32 bits (a 16-bit sample v is
 * v << 16), so nrv_audio_to_mono_f32(..., NRV_SAMPLE_S32, ...) scales any width to [-1, 1).
 * Each frame's header CRC-8 and CRC-16 are checked and every sample must fit its width: a
 * corrupted or truncated stream is NRV_ERR_FORMAT naming the byte offset and the frame's first
 * sample; nothing is read outside the buffer. STREAMINFO's MD5 is reported, not checked.
 * A frame whose rate, channel count or sample width differs from STREAMINFO is refused.
 * Thread safety: one thread at a time per decoder; separate decoders are independent. */
typedef struct nrv_flac nrv_flac_t;

typedef struct nrv_flac_info {
    uint32_t sample_rate;     /* Hz */
    uint32_t channels;        /* 1..8 */
    uint32_t bits_per_sample; /* 4..32, before the left-alignment nrv_flac_read applies */
    uint32_t min_block;       /* frames per block, as STREAMINFO declares */
    uint32_t max_block;
    uint64_t total_frames;    /* 0: the encoder did not know */
    uint8_t md5[16];          /* MD5 of the decoded samples, as STREAMINFO declares (all zero: none) */
} nrv_flac_info;

/* Parses the stream's metadata; *out receives the decoder (nrv_flac_free), positioned at the
 * first frame. NRV_ERR_FORMAT for a buffer that is not FLAC or whose metadata is cut short or
 * invalid. Allocates max_block x channels x 12 bytes (at most 6 MiB). */
NRV_API nrv_status nrv_flac_open(const void *data, size_t size, nrv_flac_t **out);

/* Frees the decoder (not the encoded buffer); NULL is a no-op. */
NRV_API void nrv_flac_free(nrv_flac_t *decoder);

NRV_API nrv_status nrv_flac_info_get(const nrv_flac_t *decoder, nrv_flac_info *info);

/* Decodes up to capacity frames (capacity x channels int32) into out; *frames receives the count,
 * 0 at the end of the stream (the data's end; or, once STREAMINFO's total is reached, bytes that
 * are not a frame, such as an ID3v1 tag). Any slicing gives the same samples. A declared total
 * that the frames do not match (a file cut at a frame boundary) is NRV_ERR_FORMAT at the end.
 * On a bad frame: NRV_ERR_FORMAT, *frames counts the valid frames written before it, and the
 * next call fails on the same frame. */
NRV_API nrv_status nrv_flac_read(nrv_flac_t *decoder, int32_t *out, size_t capacity, size_t *frames);

/* Back to the first frame. */
NRV_API nrv_status nrv_flac_rewind(nrv_flac_t *decoder);

/* ---------------------------------------------------------------- serial link frames
 *
 * The codec of nerve.serial's link (docs/SERIAL.md), in native/src/frame.c. That file stands
 * alone so it can be copied onto a microcontroller with this header: no allocation, no libc
 * beyond memcpy/memset, nothing else from libnerve. Because of that these functions do NOT
 * set nrv_last_error(): the returned status (and the decoder's event) is the whole report.
 *
 * Raw frame (little-endian), 13 + len bytes:
 *   [0] version (1)  [1] type (nrv_frame_type)  [2] flags (nrv_frame_flag bits)
 *   [3..6] seq, uint32  [7..8] len, uint16 (0..256)  [9 .. 9+len) payload
 *   [9+len .. 13+len) CRC-32C (Castagnoli, reflected 0x82F63B78, init and xorout 0xFFFFFFFF;
 *   check value 0xE3069283 for "123456789") over bytes [0, 9+len).
 * On the wire: 0x00, COBS(raw frame), 0x00. COBS removes every zero byte from the frame, so
 * 0x00 only ever delimits; the leading one ends any noise the line carried before. A
 * decoder ignores empty frames (repeated delimiters), so frames may also share one.
 * Sizes: at most 269 raw bytes, 271 stuffed, 273 on the wire (nrv_frame_encoded_size).
 *
 * Thread safety: the functions keep no state of their own; a decoder is used by one thread
 * at a time, separate decoders are independent.
 */
typedef enum nrv_frame_limits {
    NRV_FRAME_VERSION = 1,        /* the only version this codec writes and accepts */
    NRV_FRAME_MAX_PAYLOAD = 256,
    NRV_FRAME_HEADER_SIZE = 9,
    NRV_FRAME_CRC_SIZE = 4,
    NRV_FRAME_MAX_RAW = 269,      /* header + largest payload + CRC */
    NRV_FRAME_MAX_STUFFED = 271,  /* COBS of the largest raw frame */
    NRV_FRAME_MAX_ENCODED = 273   /* ... with its two delimiters */
} nrv_frame_limits;

typedef enum nrv_frame_type {
    NRV_FRAME_COMMAND = 1,   /* payload: the command (compact JSON in nerve.serial) */
    NRV_FRAME_ACK = 2,       /* seq of the command acknowledged; payload: a result or empty */
    NRV_FRAME_NACK = 3,      /* seq of the command refused; payload: the reason, UTF-8 */
    NRV_FRAME_HEARTBEAT = 4  /* a ping, or (flag REPLY) its answer with the same seq */
} nrv_frame_type;

/* Bits of the flags byte. Bits not listed are sent as 0 and ignored on receipt. */
typedef enum nrv_frame_flag {
    NRV_FRAME_FLAG_SYN = 1,          /* command: first of a sender's session, its seq starts the count */
    NRV_FRAME_FLAG_REPLY = 2,        /* heartbeat: the answer to a ping */
    NRV_FRAME_FLAG_UNATTRIBUTED = 4  /* nack: refuses a frame that could not be read, seq means nothing */
} nrv_frame_flag;

/* What nrv_frame_decoder_push stopped for. Each rejected frame is one BAD_* event and one
 * count in the decoder's counter of that name. */
typedef enum nrv_frame_event {
    NRV_FRAME_NEED_MORE = 0,      /* every byte consumed, no frame completed */
    NRV_FRAME_DECODED = 1,        /* a good frame: header, payload and length written */
    NRV_FRAME_BAD_OVERSIZE = 2,   /* more than 271 bytes without a delimiter: reported at the byte
                                     that overflowed, the rest skipped up to the next delimiter */
    NRV_FRAME_BAD_COBS = 3,       /* invalid stuffing: a code byte runs past the frame's end */
    NRV_FRAME_BAD_SHORT = 4,      /* under 13 raw bytes: no room for header and CRC */
    NRV_FRAME_BAD_CRC = 5,        /* CRC mismatch (checked before the fields below) */
    NRV_FRAME_BAD_VERSION = 6,    /* good CRC, version byte not 1 */
    NRV_FRAME_BAD_LENGTH = 7,     /* length field above 256 or not the payload bytes present */
    NRV_FRAME_BAD_TYPE = 8        /* type not in nrv_frame_type */
} nrv_frame_event;

typedef struct nrv_frame_header {
    uint8_t version;   /* NRV_FRAME_VERSION */
    uint8_t type;      /* nrv_frame_type */
    uint8_t flags;     /* nrv_frame_flag bits */
    uint32_t seq;
} nrv_frame_header;

/* A streaming decoder: caller-allocated (stack, static or heap), set up by
 * nrv_frame_decoder_init, no pointers inside (it may be copied or reset with memset 0).
 * Counters count since init and wrap modulo 2^32. */
typedef struct nrv_frame_decoder {
    uint8_t buf[271];         /* stuffed bytes of the frame being received (NRV_FRAME_MAX_STUFFED) */
    uint8_t dropping;         /* 1 while an oversize frame is skipped */
    uint16_t len;             /* bytes in buf */
    uint32_t bytes;           /* bytes pushed */
    uint32_t frames;          /* good frames decoded */
    uint32_t bad_oversize;    /* one count per nrv_frame_event BAD_* of the same name */
    uint32_t bad_cobs;
    uint32_t bad_short;
    uint32_t bad_crc;
    uint32_t bad_version;
    uint32_t bad_length;
    uint32_t bad_type;
    uint32_t dropped_bytes;   /* bytes of rejected frames (with their delimiter) */
} nrv_frame_decoder;

/* CRC-32C of n bytes of data (data may be NULL when n is 0), continuing from crc: pass 0 to
 * start, and the previous result to continue, so nrv_crc32c(nrv_crc32c(0, a, na), b, nb) is the
 * CRC of a then b. Returns the CRC (not a status). Thread-safe. */
NRV_API uint32_t nrv_crc32c(uint32_t crc, const uint8_t *data, size_t n);

/* Bytes nrv_frame_encode writes at most for a payload of payload_len bytes (delimiters
 * included); 0 when payload_len exceeds NRV_FRAME_MAX_PAYLOAD. */
NRV_API size_t nrv_frame_encoded_size(size_t payload_len);

/* Encodes one frame, delimiters included, into out (room for cap bytes; nrv_frame_encoded_size
 * (len) always suffices); *written receives the byte count. payload (may be NULL when len is 0)
 * is copied, nothing is retained. NRV_ERR_INVALID_ARG, nothing written, for: a NULL argument,
 * hdr->version not NRV_FRAME_VERSION, hdr->type not in nrv_frame_type, len above
 * NRV_FRAME_MAX_PAYLOAD, or cap below the frame's size. Any flags byte is sent as given. */
NRV_API nrv_status nrv_frame_encode(const nrv_frame_header *hdr, const uint8_t *payload, size_t len,
                                    uint8_t *out, size_t cap, size_t *written);

/* COBS-stuffs n bytes of in (any values, any length; in may be NULL when n is 0) into out,
 * which holds no zero afterwards (no delimiter is added); *written receives the size, at most
 * n + n / 254 + 1. in and out must not overlap. cap too small: NRV_ERR_INVALID_ARG, nothing
 * written. For tools and tests that build frames by hand; nrv_frame_encode does it all. */
NRV_API nrv_status nrv_frame_cobs_encode(const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                                         size_t *written);

/* Reverses nrv_frame_cobs_encode: n stuffed bytes (no delimiter) into out (room for cap; n - 1
 * always suffices); out == in is allowed (decoding in place), other overlaps are not.
 * NRV_ERR_FORMAT if in is not valid COBS (empty, contains a zero, or a code byte runs past the
 * end); cap too small: NRV_ERR_INVALID_ARG. Nothing is written on failure. */
NRV_API nrv_status nrv_frame_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap,
                                         size_t *written);

/* Empties the decoder and zeroes its counters. NRV_ERR_INVALID_ARG for NULL. */
NRV_API nrv_status nrv_frame_decoder_init(nrv_frame_decoder *dec);

/* Feeds up to n bytes (bytes may be NULL when n is 0) and stops at the first event: a frame
 * decoded or rejected. *consumed receives how many bytes were used (all n with
 * NRV_FRAME_NEED_MORE; otherwise up to and including the byte that ended the frame): call
 * again with the rest. *event says what happened; only NRV_FRAME_DECODED writes *hdr,
 * payload (payload_cap must be at least NRV_FRAME_MAX_PAYLOAD) and *payload_len. Any byte
 * sequence is accepted: garbage costs the frame it falls in and the decoder picks up again at
 * the next delimiter; nothing is read or written outside the buffers given. NRV_ERR_INVALID_ARG
 * (nothing consumed, decoder unchanged) for a NULL argument or a payload_cap that is too small.
 * Not retained: bytes, hdr, payload. */
NRV_API nrv_status nrv_frame_decoder_push(nrv_frame_decoder *dec, const uint8_t *bytes, size_t n,
                                          size_t *consumed, nrv_frame_header *hdr, uint8_t *payload,
                                          size_t payload_cap, size_t *payload_len, nrv_frame_event *event);

/* NRV_CDEF_END */

/* Largest tensor rank a plan handles (the size of nrv_tensor.dims). */
#define NRV_MAX_RANK 8

#ifdef __cplusplus
}
#endif

#endif /* NERVE_H */
