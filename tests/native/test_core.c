/* test_core.c — the library's core contract outside the kernels: status names, the
 * thread-local error message (one thread's failure never shows in another's), version,
 * dtypes, CPU feature names, and the failure-injection hook. */
#include <pthread.h>

#include "nrv_test.h"
#include "plan/plan_internal.h"

static void test_status_names(void) {
    for (int s = NRV_OK; s <= NRV_ERR_INTERNAL; s++) {
        const char *name = nrv_status_str((nrv_status)s);
        NRV_EXPECT(name && strncmp(name, "NRV_", 4) == 0 && strcmp(name, "NRV_ERR_UNKNOWN") != 0,
                   "status %d has name '%s'", s, name ? name : "(null)");
    }
    NRV_EXPECT(strcmp(nrv_status_str((nrv_status)999), "NRV_ERR_UNKNOWN") == 0, "unknown status name");
}

static void test_version_and_dtypes(void) {
    int major = 0, minor = 0, patch = 0;
    NRV_EXPECT(sscanf(nrv_version(), "%d.%d.%d", &major, &minor, &patch) == 3, "version '%s'", nrv_version());
    NRV_EXPECT(nrv_version_number() == major * 10000 + minor * 100 + patch, "version number %d vs '%s'",
               nrv_version_number(), nrv_version());
    NRV_EXPECT(nrv_dtype_size(NRV_F32) == 4 && nrv_dtype_size(NRV_F16) == 2 && nrv_dtype_size(NRV_I64) == 8,
               "dtype sizes");
    NRV_EXPECT(nrv_dtype_size((nrv_dtype)99) == 0 && strcmp(nrv_dtype_str((nrv_dtype)99), "unknown") == 0,
               "unknown dtype");
}

static void test_cpu_features(void) {
    const uint64_t f = nrv_cpu_features();
    NRV_EXPECT(f == nrv_cpu_features(), "feature detection is stable");
    for (int bit = 0; bit < 64; bit++) {
        const uint64_t b = (uint64_t)1 << bit;
        if (f & b) NRV_EXPECT(nrv_cpu_feature_name(b) != NULL, "detected feature bit %d has no name", bit);
    }
    NRV_EXPECT(nrv_cpu_feature_name(NRV_CPU_AVX2 | NRV_CPU_FMA) == NULL, "two bits are not one feature");
    NRV_EXPECT(nrv_cpu_count() >= 1, "cpu count %d", nrv_cpu_count());
}

/* Each thread makes its own kind of call fail many times and checks that the message it
 * reads back is its own, while the other thread fails differently at the same time. */
typedef struct {
    int which;
    int mismatches;
} err_job;

static void *fail_repeatedly(void *arg) {
    err_job *job = arg;
    float out[4] = {0};
    const int64_t ids[2] = {0, 5};
    for (int i = 0; i < 20000; i++) {
        const float table[4] = {1, 2, 3, 4};
        nrv_status s;
        const char *want;
        if (job->which == 0) {
            s = nrv_embedding(table, NRV_F32, 2, 2, NULL, ids, NRV_I64, 2, out);
            want = "id[1] = 5 out of range";
        } else {
            s = nrv_layernorm(table, 1, 4, table, NULL, -1.0f, out);
            want = "eps must be finite";
        }
        if (s == NRV_OK || strstr(nrv_last_error(), want) == NULL) job->mismatches++;
    }
    return NULL;
}

static void test_last_error_is_per_thread(void) {
    nrv_clear_error();
    NRV_EXPECT(nrv_last_error()[0] == '\0', "cleared error reads '%s'", nrv_last_error());
    pthread_t t[2];
    err_job jobs[2] = {{0, 0}, {1, 0}};
    for (int i = 0; i < 2; i++) NRV_EXPECT(pthread_create(&t[i], NULL, fail_repeatedly, &jobs[i]) == 0, "thread");
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    NRV_EXPECT(jobs[0].mismatches == 0 && jobs[1].mismatches == 0, "messages crossed threads: %d / %d",
               jobs[0].mismatches, jobs[1].mismatches);
    NRV_EXPECT(nrv_last_error()[0] == '\0', "main thread saw another thread's error: '%s'", nrv_last_error());
}

static void test_failure_injection_is_one_shot(void) {
    nrv_pool_t *a = NULL, *b = NULL;
    nrv_debug_fail_alloc_after(1);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, "injected", &a), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(a == NULL, "failed create wrote its output");
    NRV_EXPECT(strstr(nrv_last_error(), "injected") != NULL, "message names the pool: '%s'", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, "after", &b), NRV_OK);
    nrv_pool_free(b);
    nrv_debug_fail_alloc_after(0);
}

/* SHA-256 (the plan loader's integrity check): FIPS 180-4's examples, and the instruction-set
 * block function where the CPU has one against the portable loop on random blocks. */
static void test_sha256(void) {
    static const struct {
        const char *msg, *hex;
    } known[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"}};
    for (size_t t = 0; t < sizeof known / sizeof known[0]; t++) {
        uint8_t d[32];
        char hex[65];
        nrv_sha256(known[t].msg, strlen(known[t].msg), d);
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
        NRV_EXPECT(strcmp(hex, known[t].hex) == 0, "sha256('%s') = %s", known[t].msg, hex);
    }
    enum { BLOCKS = 37 };
    static uint8_t buf[64 * BLOCKS];
    uint32_t seed = 12345;
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
    void (*fast)(uint32_t *, const uint8_t *, size_t) = NULL;
#if defined(__x86_64__)
    fast = nrv_sha256_blocks_x86;
#elif defined(__aarch64__)
    fast = nrv_sha256_blocks_arm;
#endif
    if (!fast || !(nrv_cpu_features() & NRV_CPU_SHA256)) {
        printf("sha256: no SHA-256 instructions on this CPU; the portable loop only\n");
        return;
    }
    for (size_t n = 0; n <= BLOCKS; n += (n < 3 ? 1 : 17)) {
        uint32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        nrv_sha256_blocks_portable(a, buf, n);
        fast(b, buf, n);
        NRV_EXPECT(memcmp(a, b, sizeof a) == 0, "sha256 blocks: the SHA instructions differ from the portable "
                                                 "loop after %zu blocks", n);
    }
    printf("sha256: SHA-256 instructions match the portable loop\n");
}

int main(void) {
    test_sha256();
    test_status_names();
    test_version_and_dtypes();
    test_cpu_features();
    test_last_error_is_per_thread();
    test_failure_injection_is_one_shot();
    return nrv_test_summary("test_core");
}
