/* cuda_loader.c — finds, loads and forwards to the CUDA backend (libnerve_cuda.so).
 *
 * libnerve itself never links CUDA: on first use (pthread_once) it dlopen()s the backend
 *   1. from the directory that holds libnerve (dladdr on a libnerve object; for a program
 *      linked with the static library, the program's own directory), then
 *   2. from the path in NERVE_CUDA_LIBRARY (read once; ignored in setuid programs),
 * resolves the nrvc_* entry points (cuda/nerve_cuda_abi.h) and checks the ABI version.
 * The outcome, loaded or the reason it is not, is fixed for the life of the process; the
 * state is written only inside the once-routine and only read afterwards (thread-safe).
 * Errors: a backend call that fails leaves its message in the backend's thread-local
 * buffer (nrvc_last_error); forward() copies it into nrv_last_error with nrv_fail, so the
 * caller sees one message whichever library produced it.
 * Plain C: no CUDA header, so a CPU-only build compiles and links this file as is.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "../../cuda/nerve_cuda_abi.h"

#define NRV_CUDA_LIBRARY_NAME "libnerve_cuda.so"
#define NRV_CUDA_ENV "NERVE_CUDA_LIBRARY"

/* Entry points of a loaded backend. */
struct nrv_cuda_backend {
    nrvc_abi_version_fn abi_version;
    nrvc_last_error_fn last_error;
    nrvc_device_count_fn device_count;
    nrvc_device_info_fn device_info;
    nrvc_copy_fn copy;
    nrvc_embedding_fn embedding;
    nrvc_linear_w4_fn linear_w4;
    nrvc_layernorm_linear_fn layernorm_linear;
    nrvc_host_alloc_fn host_alloc;
    nrvc_host_free_fn host_free;
    nrvc_copy_async_fn copy_async;
    nrvc_pool_create_fn pool_create;
    nrvc_pool_free_fn pool_free;
    nrvc_pool_alloc_fn pool_alloc;
    nrvc_pool_release_fn pool_release;
    nrvc_pool_stats_fn pool_stats;
    nrvc_pool_retain_fn pool_retain;
    nrvc_pool_refcount_fn pool_refcount;
    nrvc_pool_reset_fn pool_reset;
};

static struct nrv_cuda_backend backend; /* all NULL until a backend loaded */
static void *backend_handle;            /* NULL: not loaded, backend_reason says why */
static char backend_path[PATH_MAX];
static char backend_reason[1024];

static pthread_once_t backend_once = PTHREAD_ONCE_INIT;

/* Any object inside libnerve: dladdr maps its address to the file that holds it. */
static const char libnerve_anchor = 0;

/* Directory of the file holding libnerve's code into dir (no trailing slash); 0 on success. */
static int libnerve_dir(char *dir, size_t cap) {
    Dl_info info;
    char resolved[PATH_MAX];
    const char *file = NULL;
    if (dladdr(&libnerve_anchor, &info) && info.dli_fname && strchr(info.dli_fname, '/') &&
        realpath(info.dli_fname, resolved))
        file = resolved;
    if (!file) {
        /* Linked into the program (nerve_static): glibc names the program by argv[0],
         * which may carry no directory; the kernel knows the real path. */
        const ssize_t n = readlink("/proc/self/exe", resolved, sizeof resolved - 1);
        if (n <= 0) return -1;
        resolved[n] = '\0';
        file = resolved;
    }
    const char *slash = strrchr(file, '/');
    if (!slash) return -1;
    const size_t len = slash == file ? 1 : (size_t)(slash - file);
    if (len >= cap) return -1;
    memcpy(dir, file, len);
    dir[len] = '\0';
    return 0;
}

/* snprintf that may truncate (long paths): the cut is fine for a message. */
static void format_into(char *buf, size_t cap, const char *fmt, ...) NRV_PRINTF(3, 4);
static void format_into(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* dlopen + resolve + ABI check of one candidate; on failure writes why into err and
 * leaves the global state untouched. */
static int try_load(const char *path, char *err, size_t cap) {
    struct nrv_cuda_backend b;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        format_into(err, cap, "%s could not be loaded: %s", path, e ? e : "unknown dlopen error");
        return -1;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {NRVC_SYM_ABI_VERSION, (void **)&b.abi_version},
        {NRVC_SYM_LAST_ERROR, (void **)&b.last_error},
        {NRVC_SYM_DEVICE_COUNT, (void **)&b.device_count},
        {NRVC_SYM_DEVICE_INFO, (void **)&b.device_info},
        {NRVC_SYM_COPY, (void **)&b.copy},
        {NRVC_SYM_EMBEDDING, (void **)&b.embedding},
        {NRVC_SYM_LINEAR_W4, (void **)&b.linear_w4},
        {NRVC_SYM_LAYERNORM_LINEAR, (void **)&b.layernorm_linear},
        {NRVC_SYM_HOST_ALLOC, (void **)&b.host_alloc},
        {NRVC_SYM_HOST_FREE, (void **)&b.host_free},
        {NRVC_SYM_COPY_ASYNC, (void **)&b.copy_async},
        {NRVC_SYM_POOL_CREATE, (void **)&b.pool_create},
        {NRVC_SYM_POOL_FREE, (void **)&b.pool_free},
        {NRVC_SYM_POOL_ALLOC, (void **)&b.pool_alloc},
        {NRVC_SYM_POOL_RELEASE, (void **)&b.pool_release},
        {NRVC_SYM_POOL_STATS, (void **)&b.pool_stats},
        {NRVC_SYM_POOL_RETAIN, (void **)&b.pool_retain},
        {NRVC_SYM_POOL_REFCOUNT, (void **)&b.pool_refcount},
        {NRVC_SYM_POOL_RESET, (void **)&b.pool_reset},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        /* POSIX guarantees a dlsym result converts to a function pointer; storing it
         * through void ** avoids the object-to-function cast ISO C leaves undefined. */
        void *sym = dlsym(h, syms[i].name);
        if (!sym) {
            format_into(err, cap, "%s lacks the entry point %s (a backend from another nerve version?)", path,
                     syms[i].name);
            dlclose(h);
            return -1;
        }
        *syms[i].slot = sym;
    }
    const int abi = b.abi_version();
    if (abi != NRVC_ABI_VERSION) {
        format_into(err, cap, "%s has backend ABI %d, this libnerve needs %d (rebuild both together)", path, abi,
                 NRVC_ABI_VERSION);
        dlclose(h);
        return -1;
    }
    backend = b;
    backend_handle = h;
    format_into(backend_path, sizeof backend_path, "%s", path);
    return 0;
}

static void load_backend(void) {
    char dir[PATH_MAX], next_to[PATH_MAX + sizeof NRV_CUDA_LIBRARY_NAME + 1];
    char first_err[512] = "";
    const int have_dir = libnerve_dir(dir, sizeof dir) == 0;
    if (have_dir) {
        format_into(next_to, sizeof next_to, "%s/%s", dir, NRV_CUDA_LIBRARY_NAME);
        if (file_exists(next_to) && try_load(next_to, first_err, sizeof first_err) == 0) return;
    }
    const char *env = secure_getenv(NRV_CUDA_ENV);
    if (env && env[0]) {
        char env_err[512];
        if (try_load(env, env_err, sizeof env_err) == 0) return;
        format_into(backend_reason, sizeof backend_reason, "CUDA backend not loaded: %s=%s%s%s", NRV_CUDA_ENV, env_err,
                 first_err[0] ? "; " : "", first_err);
        return;
    }
    if (first_err[0])
        format_into(backend_reason, sizeof backend_reason, "CUDA backend not loaded: %s", first_err);
    else
        format_into(backend_reason, sizeof backend_reason,
                 "CUDA backend not built (%s not found next to libnerve in %s, and %s is not set)",
                 NRV_CUDA_LIBRARY_NAME, have_dir ? dir : "(unknown directory)", NRV_CUDA_ENV);
}

static int backend_loaded(void) {
    pthread_once(&backend_once, load_backend);
    return backend_handle != NULL;
}

/* Copies the backend's message for a failed call, prefixed with fn unless it already is. */
static nrv_status forward(const char *fn, nrv_status st) {
    const char *msg = backend.last_error();
    const size_t n = strlen(fn);
    if (strncmp(msg, fn, n) == 0 && msg[n] == ':') return nrv_fail(st, "%s", msg);
    return nrv_fail(st, "%s: %s", fn, msg);
}

/* NRV_OK when the backend is loaded; else NRV_ERR_UNSUPPORTED with the reason. */
static nrv_status require_backend(const char *fn) {
    return backend_loaded() ? NRV_OK : nrv_fail(NRV_ERR_UNSUPPORTED, "%s: %s", fn, backend_reason);
}

/* NRV_OK when the backend is loaded and `device` exists; else NRV_ERR_UNSUPPORTED (no
 * backend, no driver, no GPU) or NRV_ERR_INVALID_ARG (bad index), with the reason. */
static nrv_status require_device(const char *fn, int device) {
    NRV_TRY(require_backend(fn));
    int count = 0;
    if (backend.device_count(&count) != NRV_OK) return forward(fn, NRV_ERR_UNSUPPORTED);
    if (count == 0) return nrv_fail(NRV_ERR_UNSUPPORTED, "%s: the CUDA driver reports no device", fn);
    if (device < 0 || device >= count)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: device %d out of range [0, %d)", fn, device, count);
    return NRV_OK;
}


int nrv_cuda_device_count(void) {
    if (!backend_loaded()) {
        nrv_fail(NRV_ERR_UNSUPPORTED, "%s", backend_reason);
        return 0;
    }
    int count = 0;
    const nrv_status st = backend.device_count(&count);
    if (st != NRV_OK) {
        nrv_fail(st, "no usable CUDA device (backend %s): %s", backend_path, backend.last_error());
        return 0;
    }
    if (count <= 0) {
        nrv_fail(NRV_ERR_UNSUPPORTED, "no usable CUDA device (backend %s): the driver reports none", backend_path);
        return 0;
    }
    return count;
}

nrv_status nrv_cuda_device_info_get(int device, nrv_cuda_device_info *out) {
    static const char fn[] = "nrv_cuda_device_info_get";
    NRV_REQUIRE_PTR(fn, out);
    NRV_TRY(require_device(fn, device));
    nrv_cuda_device_info info;
    const nrv_status st = backend.device_info(device, &info);
    if (st != NRV_OK) return forward(fn, st);
    *out = info;
    return NRV_OK;
}

static _Atomic uint64_t bytes_copied;

uint64_t nrv_cuda_bytes_copied(void) { return bytes_copied; }

nrv_status nrv_cuda_copy(int device, void *dst, const void *src, uint64_t bytes) {
    static const char fn[] = "nrv_cuda_copy";
    if (bytes == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, dst);
    NRV_REQUIRE_PTR(fn, src);
    if (bytes > (uint64_t)PTRDIFF_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %llu bytes exceed the address space", fn, (unsigned long long)bytes);
    NRV_TRY(require_device(fn, device));
    const nrv_status st = backend.copy(device, dst, src, bytes);
    if (st != NRV_OK) return forward(fn, st);
    bytes_copied += bytes;
    return NRV_OK;
}

nrv_status nrv_cuda_embedding(int device, const void *table, nrv_dtype table_dtype, int64_t rows, int64_t dim,
                              const float *row_scales, const void *ids, nrv_dtype id_dtype, int64_t n_ids,
                              float *out, void *stream) {
    static const char fn[] = "nrv_cuda_embedding";
    NRV_TRY(nrv_check_embedding_args(fn, table_dtype, rows, dim, row_scales, id_dtype, n_ids));
    if (n_ids == 0 || dim == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, ids);
    NRV_REQUIRE_PTR(fn, out);
    if (rows > 0) NRV_REQUIRE_PTR(fn, table); /* rows == 0: every id is out of range, found on the device */
    NRV_TRY(require_device(fn, device));
    const nrv_status st = backend.embedding(device, table, table_dtype, rows, dim, row_scales, ids,
                                            id_dtype == NRV_I64, n_ids, out, stream);
    return st == NRV_OK ? NRV_OK : forward(fn, st);
}

/* The kernel choices for `device` (nrv_cuda_select with the environment's overrides).
 * Device properties never change in a process: they are queried once per device. */
enum { MAX_CACHED_DEVICES = 64 };
static nrv_cuda_device_info cached_info[MAX_CACHED_DEVICES];
static int cached_valid[MAX_CACHED_DEVICES];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static nrv_status device_selection(const char *fn, int device, nrv_cuda_selection *sel) {
    nrv_cuda_device_info info;
    int have = 0;
    if (device < MAX_CACHED_DEVICES) {
        pthread_mutex_lock(&cache_lock);
        if (cached_valid[device]) {
            info = cached_info[device];
            have = 1;
        }
        pthread_mutex_unlock(&cache_lock);
    }
    if (!have) {
        const nrv_status st = backend.device_info(device, &info);
        if (st != NRV_OK) return forward(fn, st);
        if (device < MAX_CACHED_DEVICES) {
            pthread_mutex_lock(&cache_lock);
            cached_info[device] = info;
            cached_valid[device] = 1;
            pthread_mutex_unlock(&cache_lock);
        }
    }
    const nrv_status st = nrv_cuda_select(&info, NULL, NULL, sel);
    if (st != NRV_OK) return nrv_fail(st, "%s: %s", fn, nrv_last_error());
    return NRV_OK;
}

/* Rows of x per block: what the shared-memory budget allows, but no more rows than the
 * call has (rounded up to a power of two) so a GEMV does not stage empty rows. */
static int32_t rows_per_block(const nrv_cuda_selection *sel, int64_t rows, int64_t in) {
    int32_t r = nrv_cuda_w4_rows_per_block(sel, in);
    while (r > 1 && (int64_t)(r / 2) >= rows) r /= 2;
    return r;
}

nrv_status nrv_cuda_linear_w4(int device, const float *x, int64_t rows, const nrv_w4_weight *w, const float *b,
                              float *y, void *stream) {
    static const char fn[] = "nrv_cuda_linear_w4";
    NRV_TRY(nrv_check_w4_desc(fn, w));
    NRV_TRY(nrv_check_matrix(fn, "x", rows, w->in, sizeof(float)));
    NRV_TRY(nrv_check_matrix(fn, "y", rows, w->out, sizeof(float)));
    if (rows == 0 || w->out == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, y);
    if (w->in > 0) NRV_REQUIRE_PTR(fn, x);
    if (w->in == 0)
        return nrv_fail(NRV_ERR_SHAPE, "%s: input width 0 (a product over nothing: use the bias)", fn);
    NRV_TRY(require_device(fn, device));
    nrv_cuda_selection sel;
    NRV_TRY(device_selection(fn, device, &sel));
    const nrv_status st = backend.linear_w4(device, x, rows, w, b, y, rows_per_block(&sel, rows, w->in), stream);
    return st == NRV_OK ? NRV_OK : forward(fn, st);
}

nrv_status nrv_cuda_layernorm_linear(int device, const void *x, nrv_dtype dtype, int64_t rows, int64_t in,
                                     const float *gamma, const float *beta, float eps, const float *w,
                                     int64_t out, const float *b, void *y, void *stream) {
    static const char fn[] = "nrv_cuda_layernorm_linear";
    if (dtype != NRV_F32 && dtype != NRV_F16)
        return nrv_fail(NRV_ERR_DTYPE, "%s: x and y must be f32 or f16, got dtype %d", fn, (int)dtype);
    const size_t elem = dtype == NRV_F32 ? sizeof(float) : sizeof(uint16_t);
    NRV_TRY(nrv_check_layernorm_linear_args(fn, rows, in, out, eps, elem));
    if (rows == 0 || out == 0) return NRV_OK;
    NRV_REQUIRE_PTR(fn, x);
    NRV_REQUIRE_PTR(fn, gamma);
    NRV_REQUIRE_PTR(fn, w);
    NRV_REQUIRE_PTR(fn, y);
    NRV_TRY(require_device(fn, device));
    nrv_cuda_selection sel;
    NRV_TRY(device_selection(fn, device, &sel));
    const int32_t kernel = dtype == NRV_F16 && sel.lnl_tensor_cores && rows > sel.lnl_rows_max_warp
                               ? NRVC_LNL_WMMA_F16
                               : NRVC_LNL_WARP_ROWS;
    const nrv_status st = backend.layernorm_linear(device, x, dtype, rows, in, gamma, beta, eps, w, out, b, y,
                                                   kernel, rows_per_block(&sel, rows, in), stream);
    return st == NRV_OK ? NRV_OK : forward(fn, st);
}

struct nrv_cuda_host_buffer {
    int device;
    int32_t mode;     /* nrv_cuda_memory_mode */
    uint64_t bytes;
    void *host, *dev; /* dev: the mapped alias, the managed pointer, or the PINNED mirror */
};

nrv_status nrv_cuda_host_buffer_create(int device, uint64_t bytes, nrv_cuda_host_buffer_t **out) {
    static const char fn[] = "nrv_cuda_host_buffer_create";
    NRV_REQUIRE_PTR(fn, out);
    if (bytes == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: bytes is 0", fn);
    if (bytes > (uint64_t)PTRDIFF_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %llu bytes exceed the address space", fn, (unsigned long long)bytes);
    NRV_TRY(require_device(fn, device));
    nrv_cuda_selection sel;
    NRV_TRY(device_selection(fn, device, &sel));
    nrv_cuda_host_buffer_t *buf = nrv_sys_alloc(sizeof(void *), sizeof *buf);
    if (!buf) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: no memory for the buffer's record", fn);
    buf->device = device;
    buf->mode = sel.memory_mode;
    buf->bytes = bytes;
    const nrv_status st = backend.host_alloc(device, bytes, buf->mode, &buf->host, &buf->dev);
    if (st != NRV_OK) {
        nrv_sys_free(buf);
        return forward(fn, st);
    }
    *out = buf;
    return NRV_OK;
}

void nrv_cuda_host_buffer_free(nrv_cuda_host_buffer_t *buf) {
    if (!buf) return;
    backend.host_free(buf->device, buf->mode, buf->host, buf->dev); /* a buffer implies a backend */
    nrv_sys_free(buf);
}

void *nrv_cuda_host_buffer_host(const nrv_cuda_host_buffer_t *buf) { return buf ? buf->host : NULL; }
void *nrv_cuda_host_buffer_device(const nrv_cuda_host_buffer_t *buf) { return buf ? buf->dev : NULL; }
int32_t nrv_cuda_host_buffer_mode(const nrv_cuda_host_buffer_t *buf) { return buf ? buf->mode : -1; }

/* The one path of both syncs: range check, then a counted copy (PINNED) or only the
 * stream ordering the direction needs (ZERO_COPY, MANAGED). */
static nrv_status host_buffer_sync(const char *fn, nrv_cuda_host_buffer_t *buf, uint64_t offset, uint64_t bytes,
                                   void *stream, int to_device) {
    NRV_REQUIRE_PTR(fn, buf);
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: range [%llu, %llu + %llu) is outside the buffer's %llu bytes", fn,
                        (unsigned long long)offset, (unsigned long long)offset, (unsigned long long)bytes,
                        (unsigned long long)buf->bytes);
    const int copies = buf->mode == NRV_CUDA_MEM_PINNED && bytes > 0;
    char *h = (char *)buf->host + offset, *d = (char *)buf->dev + offset;
    nrv_status st;
    if (to_device) /* nothing to order for mapped/managed memory: later kernels read it */
        st = copies ? backend.copy_async(buf->device, d, h, bytes, stream, 0) : NRV_OK;
    else
        st = backend.copy_async(buf->device, h, d, copies ? bytes : 0, stream, 1);
    if (st != NRV_OK) return forward(fn, st);
    if (copies) bytes_copied += bytes;
    return NRV_OK;
}

nrv_status nrv_cuda_host_buffer_to_device(nrv_cuda_host_buffer_t *buf, uint64_t offset, uint64_t bytes,
                                          void *stream) {
    return host_buffer_sync("nrv_cuda_host_buffer_to_device", buf, offset, bytes, stream, 1);
}

nrv_status nrv_cuda_host_buffer_to_host(nrv_cuda_host_buffer_t *buf, uint64_t offset, uint64_t bytes,
                                        void *stream) {
    return host_buffer_sync("nrv_cuda_host_buffer_to_host", buf, offset, bytes, stream, 0);
}

static nrv_status create_pool(const char *fn, int device, nrv_pool_kind kind, uint64_t capacity,
                              uint64_t chunk_size, uint64_t chunk_count, const char *name, nrv_cuda_pool_t **out) {
    NRV_REQUIRE_PTR(fn, out);
    if (kind == NRV_POOL_STREAMING) {
        if (chunk_size == 0 || chunk_count == 0)
            return nrv_fail(NRV_ERR_INVALID_ARG, "%s: chunk_size %llu and chunk_count %llu must both be > 0", fn,
                            (unsigned long long)chunk_size, (unsigned long long)chunk_count);
        uint64_t total = 0;
        if (nrv_mul_overflow(chunk_size, chunk_count, &total) || total > (uint64_t)PTRDIFF_MAX)
            return nrv_fail(NRV_ERR_OVERFLOW, "%s: %llu chunks of %llu bytes exceed the address space", fn,
                            (unsigned long long)chunk_count, (unsigned long long)chunk_size);
    } else if (kind == NRV_POOL_STATIC || kind == NRV_POOL_DYNAMIC) {
        if (capacity == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: capacity is 0", fn);
        if (capacity > (uint64_t)PTRDIFF_MAX)
            return nrv_fail(NRV_ERR_OVERFLOW, "%s: capacity %llu exceeds the address space", fn,
                            (unsigned long long)capacity);
    } else {
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: pool kind %d is not STATIC or DYNAMIC (streaming pools: "
                                             "nrv_cuda_pool_create_streaming)", fn, (int)kind);
    }
    NRV_TRY(require_device(fn, device));
    nrvc_pool *pool = NULL;
    const nrv_status st = backend.pool_create(device, (int32_t)kind, capacity, chunk_size, chunk_count, name, &pool);
    if (st != NRV_OK) return forward(fn, st);
    *out = (nrv_cuda_pool_t *)pool;
    return NRV_OK;
}

nrv_status nrv_cuda_pool_create(int device, uint64_t capacity, const char *name, nrv_cuda_pool_t **out) {
    return create_pool("nrv_cuda_pool_create", device, NRV_POOL_DYNAMIC, capacity, 0, 0, name, out);
}

nrv_status nrv_cuda_pool_create_kind(int device, nrv_pool_kind kind, uint64_t capacity, const char *name,
                                     nrv_cuda_pool_t **out) {
    if (kind == NRV_POOL_STREAMING)
        return nrv_fail(NRV_ERR_INVALID_ARG,
                        "nrv_cuda_pool_create_kind: streaming pools are made by nrv_cuda_pool_create_streaming");
    return create_pool("nrv_cuda_pool_create_kind", device, kind, capacity, 0, 0, name, out);
}

nrv_status nrv_cuda_pool_create_streaming(int device, uint64_t chunk_size, uint64_t chunk_count, const char *name,
                                          nrv_cuda_pool_t **out) {
    return create_pool("nrv_cuda_pool_create_streaming", device, NRV_POOL_STREAMING, 0, chunk_size, chunk_count,
                       name, out);
}

/* A reference more (retain) or one fewer (release) on a buffer of pool. */
static nrv_status pool_reference(const char *fn, nrv_cuda_pool_t *pool, void *ptr, int retain) {
    NRV_REQUIRE_PTR(fn, pool);
    NRV_REQUIRE_PTR(fn, ptr);
    NRV_TRY(require_backend(fn));
    const nrv_status st = retain ? backend.pool_retain((nrvc_pool *)pool, ptr)
                                 : backend.pool_release((nrvc_pool *)pool, ptr);
    return st == NRV_OK ? NRV_OK : forward(fn, st);
}

nrv_status nrv_cuda_buffer_retain(nrv_cuda_pool_t *pool, void *ptr) {
    return pool_reference("nrv_cuda_buffer_retain", pool, ptr, 1);
}

int64_t nrv_cuda_buffer_refcount(const nrv_cuda_pool_t *pool, const void *ptr) {
    if (!pool || !ptr || !backend_loaded()) return 0;
    return backend.pool_refcount((const nrvc_pool *)pool, ptr);
}

nrv_status nrv_cuda_pool_reset(nrv_cuda_pool_t *pool) {
    static const char fn[] = "nrv_cuda_pool_reset";
    NRV_REQUIRE_PTR(fn, pool);
    NRV_TRY(require_backend(fn));
    const nrv_status st = backend.pool_reset((nrvc_pool *)pool);
    return st == NRV_OK ? NRV_OK : forward(fn, st);
}

void nrv_cuda_pool_free(nrv_cuda_pool_t *pool) {
    /* A pool exists only if the backend created it, so the backend is loaded. */
    if (pool && backend_loaded()) backend.pool_free((nrvc_pool *)pool);
}

nrv_status nrv_cuda_pool_alloc(nrv_cuda_pool_t *pool, uint64_t size, void **out) {
    static const char fn[] = "nrv_cuda_pool_alloc";
    NRV_REQUIRE_PTR(fn, pool);
    NRV_REQUIRE_PTR(fn, out);
    if (size == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: size is 0", fn);
    NRV_TRY(require_backend(fn));
    void *p = NULL;
    const nrv_status st = backend.pool_alloc((nrvc_pool *)pool, size, &p);
    if (st != NRV_OK) return forward(fn, st);
    *out = p;
    return NRV_OK;
}

nrv_status nrv_cuda_pool_release(nrv_cuda_pool_t *pool, void *ptr) {
    return pool_reference("nrv_cuda_pool_release", pool, ptr, 0);
}

nrv_status nrv_cuda_pool_stats_get(const nrv_cuda_pool_t *pool, nrv_pool_stats *out) {
    static const char fn[] = "nrv_cuda_pool_stats_get";
    NRV_REQUIRE_PTR(fn, pool);
    NRV_REQUIRE_PTR(fn, out);
    NRV_TRY(require_backend(fn));
    nrv_pool_stats s;
    const nrv_status st = backend.pool_stats((const nrvc_pool *)pool, &s);
    if (st != NRV_OK) return forward(fn, st);
    *out = s;
    return NRV_OK;
}
