/* test_cuda.c — the CUDA backend through libnerve's loader.
 *
 * Always: the loader's contract. nrv_cuda_device_count() >= 0; without a backend or a
 * GPU it is 0 with a non-empty reason, and every other nrv_cuda_* call fails with
 * NRV_ERR_UNSUPPORTED naming that reason; argument checks (dtypes, NULLs, shapes) give
 * the same statuses on every machine. In a build with the backend (libnerve_cuda.so two
 * directories above this program), the loader must find and load it: a "not built"
 * reason there is a failure, a missing driver or GPU is not.
 * With a GPU: device info, the device pool's exact counters and coalescing, and
 * embedding parity with the CPU reference (bit-exact: a gather converts, it does not
 * round) for every table/id dtype at awkward sizes, the scalar and vector paths, and
 * out-of-range ids (NRV_ERR_INDEX naming the first bad position, out untouched).
 * Without a GPU it prints "GPU checks skipped: <reason>" and passes on the loader checks
 * (the harness has no skip status of its own). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/stat.h>

#include "nrv_test.h"

/* ---- locating the build tree's backend (this program links nerve_static, so "next to
 * libnerve" is this program's own directory: tests/native/) */

static int backend_in_build_tree(void) {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    char lib[PATH_MAX + 64];
    snprintf(lib, sizeof lib, "%s/../../libnerve_cuda.so", exe);
    struct stat st;
    if (stat(lib, &st) != 0) return 0;
    /* The loader reads NERVE_CUDA_LIBRARY once, at first use: set it before any call. */
    if (!getenv("NERVE_CUDA_LIBRARY")) setenv("NERVE_CUDA_LIBRARY", lib, 0);
    return 1;
}

static void *count_thread(void *arg) {
    int *out = arg;
    *out = nrv_cuda_device_count();
    return NULL;
}

/* ---- checks that hold on every machine */

/* The GPU products refuse bad shapes, dtypes and NULLs in libnerve, before any device is
 * needed, with the statuses of their CPU counterparts. */
static void test_product_argument_checks(void) {
    float x[64] = {0}, y[64], g[64], w[64 * 4] = {0};
    uint8_t q[64] = {0};
    uint16_t scales[8] = {0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00};
    nrv_w4_weight w4 = {.out = 2, .in = 64, .group = 32, .layout = NRV_W4_PACKED, .q = q, .scales = scales};
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 1, NULL, NULL, y, NULL), NRV_ERR_INVALID_ARG);
    w4.group = 48;
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 1, &w4, NULL, y, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(strstr(nrv_last_error(), "nrv_cuda_linear_w4: group size 48") != NULL, "%s", nrv_last_error());
    w4.group = 32;
    w4.layout = 7;
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 1, &w4, NULL, y, NULL), NRV_ERR_INVALID_ARG);
    w4.layout = NRV_W4_PACKED;
    w4.in = 40;
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 1, &w4, NULL, y, NULL), NRV_ERR_SHAPE);
    w4.in = 64;
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, -1, &w4, NULL, y, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 1, &w4, NULL, NULL, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_linear_w4(0, x, 0, &w4, NULL, NULL, NULL), NRV_OK); /* nothing to do */

    for (int i = 0; i < 64; i++) g[i] = 1.0f;
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, x, NRV_I8, 1, 64, g, NULL, 1e-5f, w, 4, NULL, y, NULL),
                      NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, x, NRV_F32, 1, 64, g, NULL, -1.0f, w, 4, NULL, y, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, x, NRV_F32, 1, 0, g, NULL, 1e-5f, w, 4, NULL, y, NULL),
                      NRV_ERR_SHAPE);
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, x, NRV_F16, 1, 64, NULL, NULL, 1e-5f, w, 4, NULL, y, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT(strstr(nrv_last_error(), "'gamma'") != NULL, "names gamma: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, x, NRV_F32, INT64_MAX, 64, g, NULL, 1e-5f, w, 4, NULL, y, NULL),
                      NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_cuda_layernorm_linear(0, NULL, NRV_F32, 0, 64, g, NULL, 1e-5f, w, 4, NULL, NULL, NULL),
                      NRV_OK);
}

static void test_pool_kind_argument_checks(void) {
    nrv_cuda_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_kind(0, NRV_POOL_STREAMING, 1024, "s", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_kind(0, (nrv_pool_kind)7, 1024, "s", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_kind(0, NRV_POOL_STATIC, 0, "s", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_kind(0, NRV_POOL_STATIC, UINT64_MAX, "s", &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_streaming(0, 0, 4, "r", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_streaming(0, 4096, 0, "r", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_streaming(0, UINT64_MAX / 2, 3, "r", &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create_streaming(0, 4096, 4, "r", NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(pool == NULL, "nothing created");
    NRV_EXPECT_STATUS(nrv_cuda_buffer_retain(NULL, pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_reset(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(nrv_cuda_buffer_refcount(NULL, NULL) == 0, "refcount of nothing");
}

static void test_host_buffer_argument_checks(void) {
    nrv_cuda_host_buffer_t *buf = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_host_buffer_create(0, 0, &buf), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_host_buffer_create(0, 64, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_host_buffer_create(0, UINT64_MAX, &buf), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_cuda_host_buffer_to_device(NULL, 0, 0, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_host_buffer_to_host(NULL, 0, 0, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(nrv_cuda_host_buffer_host(NULL) == NULL && nrv_cuda_host_buffer_device(NULL) == NULL &&
                   nrv_cuda_host_buffer_mode(NULL) == -1,
               "accessors of NULL");
    nrv_cuda_host_buffer_free(NULL);
}

/* nrv_cuda_select is host code: the same answers on every machine. */
static void test_select(void) {
    nrv_cuda_device_info orin;
    memset(&orin, 0, sizeof orin);
    snprintf(orin.name, sizeof orin.name, "Orin");
    orin.cc_major = 8;
    orin.cc_minor = 7;
    orin.integrated = 1;
    orin.shared_memory_per_sm = 164 << 10;
    orin.shared_memory_per_block_optin = 163 << 10;
    orin.can_map_host_memory = 1;
    nrv_cuda_selection sel;
    NRV_EXPECT_STATUS(nrv_cuda_select(&orin, "", "auto", &sel), NRV_OK);
    NRV_EXPECT(sel.memory_mode == NRV_CUDA_MEM_ZERO_COPY && sel.w4_gemm_layout == NRV_W4_PACKED &&
                   sel.smem_per_block == (82u << 10) && !sel.cc_forced,
               "orin: memory %d layout %d smem %llu", (int)sel.memory_mode, (int)sel.w4_gemm_layout,
               (unsigned long long)sel.smem_per_block);
    NRV_EXPECT(nrv_cuda_w4_rows_per_block(&sel, 4096) == 4 && nrv_cuda_w4_rows_per_block(&sel, 0) == 0 &&
                   nrv_cuda_w4_rows_per_block(NULL, 64) == 0,
               "rows per block");
    nrv_cuda_device_info a100 = orin;
    a100.cc_minor = 0;
    a100.integrated = 0;
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "", "auto", &sel), NRV_OK);
    NRV_EXPECT(sel.memory_mode == NRV_CUDA_MEM_PINNED && sel.w4_gemm_layout == NRV_W4_UNPACKED, "a100");
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "7.5", "auto", &sel), NRV_OK);
    NRV_EXPECT(sel.cc_forced && sel.cc_major == 7 && sel.cc_minor == 5 && sel.w4_gemm_layout == NRV_W4_PACKED,
               "forced 7.5");
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "6.2", "auto", &sel), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "8.x", "auto", &sel), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "", "mapped", &sel), NRV_ERR_INVALID_ARG);
    a100.can_map_host_memory = 0;
    NRV_EXPECT_STATUS(nrv_cuda_select(&a100, "", "zero_copy", &sel), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT_STATUS(nrv_cuda_select(NULL, "", "auto", &sel), NRV_ERR_INVALID_ARG);
}

static void test_argument_checks(void) {
    float out[4];
    int32_t ids[2] = {0, 1};
    float table[8] = {0};
    float scales[2] = {1, 1};
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F64, 2, 4, NULL, ids, NRV_I32, 2, out, NULL), NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, 2, 4, NULL, ids, NRV_U8, 2, out, NULL), NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_I8, 2, 4, NULL, ids, NRV_I32, 2, out, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, 2, 4, scales, ids, NRV_I32, 2, out, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, -1, 4, NULL, ids, NRV_I32, 2, out, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, INT64_MAX, 4, NULL, ids, NRV_I32, 2, out, NULL),
                      NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, 2, 4, NULL, NULL, NRV_I32, 2, out, NULL),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT(strstr(nrv_last_error(), "'ids'") != NULL, "message names the argument: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, 2, 4, NULL, ids, NRV_I32, 2, NULL, NULL),
                      NRV_ERR_INVALID_ARG);
    /* Nothing to do is a success anywhere, GPU or not. */
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, NULL, NRV_F32, 0, 4, NULL, NULL, NRV_I64, 0, NULL, NULL), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_copy(0, NULL, NULL, 0), NRV_OK);

    NRV_EXPECT_STATUS(nrv_cuda_device_info_get(0, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_create(0, 1024, "t", NULL), NRV_ERR_INVALID_ARG);
    nrv_cuda_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_pool_create(0, 0, "t", &pool), NRV_ERR_INVALID_ARG);
    void *p = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_pool_alloc(NULL, 16, &p), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(NULL, out), NRV_ERR_INVALID_ARG);
    nrv_pool_stats stats;
    NRV_EXPECT_STATUS(nrv_cuda_pool_stats_get(NULL, &stats), NRV_ERR_INVALID_ARG);
    nrv_cuda_pool_free(NULL); /* no-op */
}

/* No backend or no GPU: every call that needs a device says so, with the same reason. */
static void test_without_gpu(const char *reason, int built) {
    NRV_EXPECT(reason[0] != '\0', "device count 0 must come with a reason");
    if (built)
        NRV_EXPECT(strstr(reason, "not built") == NULL && strstr(reason, "could not be loaded: ") == NULL,
                   "the backend was built next to this test but the loader did not load it: %s", reason);
    else
        NRV_EXPECT(strstr(reason, "libnerve_cuda.so") != NULL, "reason names the backend library: %s", reason);

    nrv_clear_error();
    NRV_EXPECT(nrv_cuda_device_count() == 0, "count is stable");
    NRV_EXPECT(strcmp(nrv_last_error(), reason) == 0, "reason is stable: '%s' vs '%s'", nrv_last_error(), reason);

    nrv_cuda_device_info info;
    memset(&info, 0x5a, sizeof info);
    NRV_EXPECT_STATUS(nrv_cuda_device_info_get(0, &info), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT(strstr(nrv_last_error(), "nrv_cuda_device_info_get: ") == nrv_last_error(),
               "message starts with the function: %s", nrv_last_error());
    NRV_EXPECT(info.cc_major == 0x5a5a5a5a, "info untouched on failure");

    nrv_cuda_pool_t *pool = (nrv_cuda_pool_t *)&info; /* sentinel: must stay as is */
    NRV_EXPECT_STATUS(nrv_cuda_pool_create(0, 1 << 20, "t", &pool), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT(pool == (nrv_cuda_pool_t *)&info, "pool untouched on failure");

    float table[8] = {0}, out[8];
    int64_t ids[2] = {0, 1};
    NRV_EXPECT_STATUS(nrv_cuda_embedding(0, table, NRV_F32, 2, 4, NULL, ids, NRV_I64, 2, out, NULL),
                      NRV_ERR_UNSUPPORTED);
    NRV_EXPECT_STATUS(nrv_cuda_copy(0, out, table, sizeof table), NRV_ERR_UNSUPPORTED);

    /* The once-only load under concurrency: every thread sees the same outcome. */
    enum { kThreads = 4 };
    pthread_t threads[kThreads];
    int counts[kThreads];
    for (int i = 0; i < kThreads; i++) pthread_create(&threads[i], NULL, count_thread, &counts[i]);
    for (int i = 0; i < kThreads; i++) {
        pthread_join(threads[i], NULL);
        NRV_EXPECT(counts[i] == 0, "thread %d saw %d devices", i, counts[i]);
    }
}

/* ---- GPU checks (run only where a device is present) */

static void test_device_info(int n) {
    for (int d = 0; d < n; d++) {
        nrv_cuda_device_info info;
        NRV_EXPECT_STATUS(nrv_cuda_device_info_get(d, &info), NRV_OK);
        NRV_EXPECT(info.name[0] != '\0', "device %d has a name", d);
        NRV_EXPECT(info.cc_major >= 7, "device %d cc %d.%d", d, info.cc_major, info.cc_minor);
        NRV_EXPECT(info.sm_count > 0 && info.total_memory > 0 && info.shared_memory_per_sm > 0,
                   "device %d: %d SMs, %" PRIu64 " bytes, %" PRIu64 " B smem/SM", d, info.sm_count,
                   info.total_memory, info.shared_memory_per_sm);
        NRV_EXPECT(info.integrated == 0 || info.integrated == 1, "integrated is a flag");
        printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB%s\n", d, info.name, info.cc_major, info.cc_minor,
               info.sm_count, (double)info.total_memory / (1 << 30), info.integrated ? ", integrated" : "");
    }
    nrv_cuda_device_info info;
    NRV_EXPECT_STATUS(nrv_cuda_device_info_get(n, &info), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_cuda_device_info_get(-1, &info), NRV_ERR_INVALID_ARG);
}

static void test_pool(void) {
    nrv_cuda_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_pool_create(0, 4000, "t", &pool), NRV_OK); /* rounds up to 4096 */
    if (!pool) return;
    nrv_pool_stats s;
    NRV_EXPECT_STATUS(nrv_cuda_pool_stats_get(pool, &s), NRV_OK);
    NRV_EXPECT(s.capacity == 4096 && s.free == 4096 && s.largest_free == 4096, "fresh: cap %" PRIu64, s.capacity);

    const uint64_t sizes[4] = {1, 255, 256, 1000};
    void *p[4] = {0};
    uint64_t sum = 0, pad = 0;
    for (int i = 0; i < 4; i++) {
        NRV_EXPECT_STATUS(nrv_cuda_pool_alloc(pool, sizes[i], &p[i]), NRV_OK);
        NRV_EXPECT(((uintptr_t)p[i] & 255) == 0, "buffer %d 256-byte aligned", i);
        sum += sizes[i];
        pad += (sizes[i] + 255) / 256 * 256 - sizes[i];
    }
    NRV_EXPECT_STATUS(nrv_cuda_pool_stats_get(pool, &s), NRV_OK);
    NRV_EXPECT(s.allocated == sum && s.overhead == pad && s.peak == sum && s.live_buffers == 4,
               "allocated %" PRIu64 " overhead %" PRIu64, s.allocated, s.overhead);
    NRV_EXPECT(s.free == 4096 - sum - pad, "free %" PRIu64, s.free);

    /* Exhaustion: refused, counted, pool unchanged. */
    void *big = NULL;
    NRV_EXPECT_STATUS(nrv_cuda_pool_alloc(pool, 4096, &big), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(big == NULL && strstr(nrv_last_error(), "'t'") != NULL, "message names the pool: %s",
               nrv_last_error());
    nrv_pool_stats s2;
    NRV_EXPECT_STATUS(nrv_cuda_pool_stats_get(pool, &s2), NRV_OK);
    NRV_EXPECT(s2.allocated == s.allocated && s2.failed_allocs == s.failed_allocs + 1, "refusal counted only");

    /* Release out of order; neighbours coalesce back into one block. */
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, p[1]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, p[1]), NRV_ERR_STATE);
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, (char *)p[3] + 256), NRV_ERR_STATE); /* interior */
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, p[0]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, p[3]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_pool_release(pool, p[2]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_pool_stats_get(pool, &s), NRV_OK);
    NRV_EXPECT(s.allocated == 0 && s.overhead == 0 && s.largest_free == 4096 && s.peak == sum && s.live_buffers == 0,
               "all coalesced: largest %" PRIu64, s.largest_free);
    NRV_EXPECT_STATUS(nrv_cuda_pool_alloc(pool, 4096, &big), NRV_OK);

    /* Round trip through device memory. */
    uint8_t host[300], back[300];
    for (int i = 0; i < 300; i++) host[i] = (uint8_t)(i * 7);
    NRV_EXPECT_STATUS(nrv_cuda_copy(0, big, host, sizeof host), NRV_OK);
    NRV_EXPECT_STATUS(nrv_cuda_copy(0, back, big, sizeof back), NRV_OK);
    NRV_EXPECT(memcmp(host, back, sizeof host) == 0, "copy round trip");
    nrv_cuda_pool_free(pool);
}

static uint16_t f32_to_f16_bits(float f) {
    /* Values in the tests are small multiples of 1/64: exact in f16, so truncation works. */
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    if ((x & 0x7fffffffu) == 0) return (uint16_t)sign;
    return (uint16_t)(sign | ((uint32_t)exp << 10) | ((x >> 13) & 0x3ffu));
}

/* Device buffers for one embedding case, carved from one pool. */
typedef struct {
    nrv_cuda_pool_t *pool;
    void *table, *scales, *ids, *out;
} dev_case;

static int embedding_case(nrv_dtype tdt, nrv_dtype idt, int64_t rows, int64_t dim, int64_t n, int misalign_out) {
    const size_t esz = nrv_dtype_size(tdt), isz = nrv_dtype_size(idt);
    void *table = malloc((size_t)(rows * dim) * esz);
    float *scales = malloc((size_t)rows * sizeof(float));
    void *ids = malloc((size_t)n * isz);
    float *want = malloc((size_t)(n * dim) * sizeof(float));
    float *got = malloc((size_t)(n * dim) * sizeof(float));
    for (int64_t i = 0; i < rows * dim; i++) {
        const float v = (float)((int)(nrv_test_u64() % 255) - 127);
        if (tdt == NRV_F32) ((float *)table)[i] = v / 64.0f;
        else if (tdt == NRV_F16) ((uint16_t *)table)[i] = f32_to_f16_bits(v / 64.0f);
        else ((int8_t *)table)[i] = (int8_t)v;
    }
    for (int64_t r = 0; r < rows; r++) scales[r] = nrv_test_uniform(0.001f, 0.1f);
    for (int64_t i = 0; i < n; i++) {
        const int64_t id = (int64_t)(nrv_test_u64() % (uint64_t)rows);
        if (idt == NRV_I64) ((int64_t *)ids)[i] = id;
        else ((int32_t *)ids)[i] = (int32_t)id;
    }
    const float *sc = tdt == NRV_I8 ? scales : NULL;
    int ok = nrv_embedding(table, tdt, rows, dim, sc, ids, idt, n, want) == NRV_OK;

    dev_case d = {0};
    const uint64_t tb = (uint64_t)(rows * dim) * esz, ob = (uint64_t)(n * dim) * sizeof(float) + 16;
    ok = ok && nrv_cuda_pool_create(0, tb + (uint64_t)rows * 4 + (uint64_t)n * isz + ob + 4 * 256, "emb", &d.pool) == NRV_OK;
    ok = ok && nrv_cuda_pool_alloc(d.pool, tb, &d.table) == NRV_OK;
    ok = ok && nrv_cuda_pool_alloc(d.pool, (uint64_t)rows * 4, &d.scales) == NRV_OK;
    ok = ok && nrv_cuda_pool_alloc(d.pool, (uint64_t)n * isz, &d.ids) == NRV_OK;
    ok = ok && nrv_cuda_pool_alloc(d.pool, ob, &d.out) == NRV_OK;
    float *dout = d.out ? (float *)((char *)d.out + (misalign_out ? 4 : 0)) : NULL;
    ok = ok && nrv_cuda_copy(0, d.table, table, tb) == NRV_OK;
    ok = ok && nrv_cuda_copy(0, d.scales, scales, (uint64_t)rows * 4) == NRV_OK;
    ok = ok && nrv_cuda_copy(0, d.ids, ids, (uint64_t)n * isz) == NRV_OK;
    NRV_EXPECT(ok, "setup %s/%s rows=%lld dim=%lld n=%lld: %s", nrv_dtype_str(tdt), nrv_dtype_str(idt),
               (long long)rows, (long long)dim, (long long)n, nrv_last_error());
    if (ok) {
        NRV_EXPECT_STATUS(nrv_cuda_embedding(0, d.table, tdt, rows, dim, tdt == NRV_I8 ? d.scales : NULL, d.ids,
                                             idt, n, dout, NULL),
                          NRV_OK);
        NRV_EXPECT_STATUS(nrv_cuda_copy(0, got, dout, (uint64_t)(n * dim) * sizeof(float)), NRV_OK);
        /* f32/f16: a copy and an exact widening, so bit-exact. i8: one multiply by the row
         * scale on both sides, but the CPU side may be a vector variant: 1 ulp of slack. */
        int64_t where = -1;
        const int same = tdt == NRV_I8
                             ? nrv_test_err(got, want, n * dim, 2e-7, 1e-30, &where) <= 1.0
                             : memcmp(got, want, (size_t)(n * dim) * sizeof(float)) == 0;
        NRV_EXPECT(same, "parity %s/%s rows=%lld dim=%lld n=%lld misaligned=%d (worst at %lld)", nrv_dtype_str(tdt),
                   nrv_dtype_str(idt), (long long)rows, (long long)dim, (long long)n, misalign_out, (long long)where);
        ok = same;

        /* Out-of-range ids at positions n/2 and n-1 (first one reported), out untouched. */
        if (n >= 2) {
            const int64_t bad_pos = n / 2 < n - 1 ? n / 2 : n - 1;
            if (idt == NRV_I64) {
                ((int64_t *)ids)[bad_pos] = rows;
                ((int64_t *)ids)[n - 1] = -1;
            } else {
                ((int32_t *)ids)[bad_pos] = (int32_t)rows;
                ((int32_t *)ids)[n - 1] = -1;
            }
            const float sentinel = -12345.0f;
            for (int64_t i = 0; i < n * dim; i++) got[i] = sentinel;
            NRV_EXPECT_STATUS(nrv_cuda_copy(0, dout, got, (uint64_t)(n * dim) * sizeof(float)), NRV_OK);
            NRV_EXPECT_STATUS(nrv_cuda_copy(0, d.ids, ids, (uint64_t)n * isz), NRV_OK);
            NRV_EXPECT_STATUS(nrv_cuda_embedding(0, d.table, tdt, rows, dim, tdt == NRV_I8 ? d.scales : NULL, d.ids,
                                                 idt, n, dout, NULL),
                              NRV_ERR_INDEX);
            char want_pos[64];
            snprintf(want_pos, sizeof want_pos, "id[%lld] = ", (long long)bad_pos);
            NRV_EXPECT(strstr(nrv_last_error(), want_pos) != NULL, "names first bad position %s: %s", want_pos,
                       nrv_last_error());
            for (int64_t i = 0; i < n * dim; i++) got[i] = 0.0f;
            NRV_EXPECT_STATUS(nrv_cuda_copy(0, got, dout, (uint64_t)(n * dim) * sizeof(float)), NRV_OK);
            int untouched = 1;
            for (int64_t i = 0; i < n * dim; i++) untouched &= got[i] == sentinel;
            NRV_EXPECT(untouched, "out untouched after NRV_ERR_INDEX (%s/%s dim=%lld)", nrv_dtype_str(tdt),
                       nrv_dtype_str(idt), (long long)dim);
        }
    }
    nrv_cuda_pool_free(d.pool);
    free(table);
    free(scales);
    free(ids);
    free(want);
    free(got);
    return ok;
}

static void test_embedding_parity(void) {
    static const nrv_dtype tdts[3] = {NRV_F32, NRV_F16, NRV_I8};
    static const nrv_dtype idts[2] = {NRV_I32, NRV_I64};
    static const int64_t dims[] = {1, 3, 4, 13, 64, 97, 128, 257};
    static const int64_t ns[] = {1, 3, 97, 1025};
    nrv_test_seed(87);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++)
            for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++)
                for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                    embedding_case(tdts[t], idts[i], 13, dims[a], ns[b], 0);
    /* dim % 4 == 0 but out not 16-byte aligned: the scalar path must be taken. */
    embedding_case(NRV_F32, NRV_I32, 13, 64, 97, 1);
    embedding_case(NRV_I8, NRV_I64, 13, 128, 3, 1);

    /* An empty table: every id is out of range. */
    nrv_cuda_pool_t *pool = NULL;
    void *ids = NULL, *out = NULL;
    const int32_t host_ids[1] = {0};
    if (nrv_cuda_pool_create(0, 1024, "empty", &pool) == NRV_OK && nrv_cuda_pool_alloc(pool, 4, &ids) == NRV_OK &&
        nrv_cuda_pool_alloc(pool, 64, &out) == NRV_OK && nrv_cuda_copy(0, ids, host_ids, 4) == NRV_OK) {
        NRV_EXPECT_STATUS(nrv_cuda_embedding(0, NULL, NRV_F32, 0, 4, NULL, ids, NRV_I32, 1, out, NULL), NRV_ERR_INDEX);
    } else {
        NRV_EXPECT(0, "setup of the empty-table case: %s", nrv_last_error());
    }
    nrv_cuda_pool_free(pool);
}

int main(void) {
    const int built = backend_in_build_tree();
    printf("CUDA backend %s in this build tree (NERVE_CUDA_LIBRARY=%s)\n", built ? "present" : "absent",
           getenv("NERVE_CUDA_LIBRARY") ? getenv("NERVE_CUDA_LIBRARY") : "");

    nrv_clear_error();
    const int n = nrv_cuda_device_count();
    NRV_EXPECT(n >= 0, "device count %d", n);
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", nrv_last_error());

    test_argument_checks();
    test_product_argument_checks();
    test_host_buffer_argument_checks();
    test_pool_kind_argument_checks();
    test_select();
    if (n <= 0) {
        test_without_gpu(reason, built);
        nrv_cuda_host_buffer_t *buf = NULL;
        NRV_EXPECT_STATUS(nrv_cuda_host_buffer_create(0, 64, &buf), NRV_ERR_UNSUPPORTED);
        NRV_EXPECT(buf == NULL && nrv_cuda_bytes_copied() == 0, "nothing made, nothing copied");
        printf("GPU checks skipped: %s\n", reason);
    } else {
        printf("%d CUDA device(s)\n", n);
        test_device_info(n);
        test_pool();
        test_embedding_parity();
    }
    return nrv_test_summary("test_cuda");
}
