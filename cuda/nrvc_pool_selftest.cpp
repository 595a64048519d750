/* nrvc_pool_selftest.cpp — the device pool's bookkeeping, run without a GPU.
 *
 * Built from nrvc_pool.cpp with NRVC_POOL_HOST_ARENA (a host arena stands in for the
 * cudaMalloc'd one; nothing else differs) and run by ctest and scripts/cuda-build.sh.
 * Checks: exact counters after every operation against a model of the live buffers,
 * 256-byte alignment, no two live buffers overlap, best fit, refusals leave the pool
 * unchanged, stale or foreign pointers are NRV_ERR_STATE, and releasing everything in
 * any order coalesces back to one free block of the whole arena; the STATIC pool's bump
 * allocation, unreclaimed bytes and reset; the STREAMING ring's order, chunk limit and
 * exhaustion; reference counts, and a freed pool staying usable for its live buffers
 * (closed: no new allocations) until the last release frees it.
 * Output closes with "nrv_pool_selftest: N passed, N failed" like the native tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrvc_internal.h"

static int passed = 0, failed = 0;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (cond) {                                                         \
            passed++;                                                       \
        } else {                                                            \
            failed++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, " [%s]\n", nrvc_last_error());                  \
        }                                                                   \
    } while (0)

extern "C" nrv_status nrvc_pool_create(int, int32_t, uint64_t, uint64_t, uint64_t, const char *, nrvc_pool **);
extern "C" nrv_status nrvc_pool_retain(nrvc_pool *, void *);
extern "C" int64_t nrvc_pool_refcount(const nrvc_pool *, const void *);
extern "C" nrv_status nrvc_pool_reset(nrvc_pool *);
extern "C" void nrvc_pool_free(nrvc_pool *);
extern "C" nrv_status nrvc_pool_alloc(nrvc_pool *, uint64_t, void **);
extern "C" nrv_status nrvc_pool_release(nrvc_pool *, void *);
extern "C" nrv_status nrvc_pool_stats(const nrvc_pool *, nrv_pool_stats *);
extern "C" const char *nrvc_last_error(void);

namespace {

uint64_t rng = 0x9E3779B97F4A7C15ull;
uint64_t next_u64() {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

struct Live {
    unsigned char *p;
    uint64_t size;
};

uint64_t round256(uint64_t n) { return (n + 255) / 256 * 256; }

/* Counters and layout against the model; returns 1 when consistent. */
int consistent(const nrvc_pool *pool, uint64_t capacity, const Live *live, int n_live, uint64_t peak) {
    nrv_pool_stats s;
    if (nrvc_pool_stats(pool, &s) != NRV_OK) return 0;
    uint64_t sum = 0, pad = 0;
    for (int i = 0; i < n_live; i++) {
        sum += live[i].size;
        pad += round256(live[i].size) - live[i].size;
    }
    int ok = s.capacity == capacity && s.allocated == sum && s.overhead == pad &&
             s.free == capacity - sum - pad && s.live_buffers == (uint64_t)n_live && s.peak == peak &&
             s.largest_free <= s.free && s.kind == NRV_POOL_DYNAMIC;
    for (int i = 0; i < n_live && ok; i++) {
        ok &= ((uintptr_t)live[i].p & 255) == 0;
        for (int j = i + 1; j < n_live && ok; j++) {
            const unsigned char *a = live[i].p, *b = live[j].p;
            ok &= a + round256(live[i].size) <= b || b + round256(live[j].size) <= a;
        }
    }
    return ok;
}

void test_basics() {
    nrvc_pool *pool = nullptr;
    EXPECT(nrvc_pool_create(0, NRV_POOL_DYNAMIC, 1000, 0, 0, "basic", &pool) == NRV_OK, "create");
    if (!pool) return;
    nrv_pool_stats s;
    nrvc_pool_stats(pool, &s);
    EXPECT(s.capacity == 1024 && s.largest_free == 1024 && s.free == 1024, "capacity rounds to 256: %llu",
           (unsigned long long)s.capacity);

    void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
    EXPECT(nrvc_pool_alloc(pool, 1, &a) == NRV_OK, "a");
    EXPECT(nrvc_pool_alloc(pool, 256, &b) == NRV_OK, "b");
    EXPECT(nrvc_pool_alloc(pool, 257, &c) == NRV_OK, "c (two granules)");
    EXPECT((unsigned char *)b == (unsigned char *)a + 256 && (unsigned char *)c == (unsigned char *)b + 256,
           "address order");
    nrvc_pool_stats(pool, &s);
    EXPECT(s.allocated == 514 && s.overhead == 255 + 255 && s.free == 1024 - 514 - 510 && s.largest_free == 0,
           "counters: alloc %llu overhead %llu free %llu", (unsigned long long)s.allocated,
           (unsigned long long)s.overhead, (unsigned long long)s.free);

    /* Exhausted: refused and counted, nothing else moves, *out untouched. */
    d = &s;
    EXPECT(nrvc_pool_alloc(pool, 1, &d) == NRV_ERR_OUT_OF_MEMORY && d == &s, "exhausted");
    EXPECT(strstr(nrvc_last_error(), "'basic'") != nullptr, "message names the pool");
    EXPECT(nrvc_pool_alloc(pool, 4096, &d) == NRV_ERR_OUT_OF_MEMORY, "larger than the pool");
    nrv_pool_stats s2;
    nrvc_pool_stats(pool, &s2);
    EXPECT(s2.allocated == s.allocated && s2.failed_allocs == s.failed_allocs + 2 && s2.total_allocs == 3,
           "refusals change only failed_allocs");

    /* Best fit: free a (256) and c (512); a 200-byte request takes a's hole, not c's. */
    EXPECT(nrvc_pool_release(pool, a) == NRV_OK, "release a");
    EXPECT(nrvc_pool_release(pool, c) == NRV_OK, "release c");
    EXPECT(nrvc_pool_release(pool, c) == NRV_ERR_STATE, "double release");
    EXPECT(nrvc_pool_release(pool, (unsigned char *)b + 16) == NRV_ERR_STATE, "interior pointer");
    EXPECT(nrvc_pool_release(pool, &s) == NRV_ERR_STATE, "foreign pointer");
    EXPECT(nrvc_pool_alloc(pool, 200, &d) == NRV_OK && d == a, "best fit reuses the 256-byte hole");
    EXPECT(nrvc_pool_release(pool, d) == NRV_OK, "release d");
    EXPECT(nrvc_pool_release(pool, b) == NRV_OK, "release b");
    nrvc_pool_stats(pool, &s);
    EXPECT(s.allocated == 0 && s.overhead == 0 && s.largest_free == 1024 && s.live_buffers == 0 && s.peak == 514,
           "coalesced back to one block; peak kept");
    EXPECT(nrvc_pool_alloc(pool, 1024, &d) == NRV_OK && d == a, "whole arena in one buffer");
    EXPECT(nrvc_pool_release(pool, d) == NRV_OK, "release d");
    nrvc_pool_free(pool);
}

void test_random() {
    const uint64_t capacity = 1 << 20;
    nrvc_pool *pool = nullptr;
    EXPECT(nrvc_pool_create(0, NRV_POOL_DYNAMIC, capacity, 0, 0, "random", &pool) == NRV_OK, "create");
    if (!pool) return;
    enum { kMaxLive = 512 };
    static Live live[kMaxLive];
    int n_live = 0, bad_steps = 0;
    uint64_t allocated = 0, peak = 0;
    for (int step = 0; step < 20000; step++) {
        const bool do_alloc = n_live == 0 || (n_live < kMaxLive && next_u64() % 100 < 55);
        if (do_alloc) {
            /* Mostly small, sometimes large requests, so exhaustion happens too. */
            const uint64_t size = 1 + next_u64() % (next_u64() % 8 == 0 ? 65536 : 2048);
            void *p = nullptr;
            const nrv_status st = nrvc_pool_alloc(pool, size, &p);
            if (st == NRV_OK) {
                live[n_live++] = Live{static_cast<unsigned char *>(p), size};
                allocated += size;
                if (allocated > peak) peak = allocated;
            } else if (st != NRV_ERR_OUT_OF_MEMORY) {
                bad_steps++;
            } else {
                nrv_pool_stats s;
                nrvc_pool_stats(pool, &s);
                if (round256(size) <= s.largest_free) bad_steps++; /* refused although it fit */
            }
        } else {
            const int i = (int)(next_u64() % (uint64_t)n_live);
            if (nrvc_pool_release(pool, live[i].p) != NRV_OK) bad_steps++;
            allocated -= live[i].size;
            live[i] = live[--n_live];
        }
        if (!consistent(pool, capacity, live, n_live, peak)) bad_steps++;
    }
    EXPECT(bad_steps == 0, "%d inconsistent steps of 20000", bad_steps);
    while (n_live > 0) {
        const int i = (int)(next_u64() % (uint64_t)n_live);
        nrvc_pool_release(pool, live[i].p);
        live[i] = live[--n_live];
    }
    nrv_pool_stats s;
    nrvc_pool_stats(pool, &s);
    EXPECT(s.allocated == 0 && s.largest_free == capacity && s.free == capacity, "all coalesced: largest %llu",
           (unsigned long long)s.largest_free);
    nrvc_pool_free(pool);
}

nrv_pool_stats stats_of(const nrvc_pool *pool) {
    nrv_pool_stats s;
    nrvc_pool_stats(pool, &s);
    return s;
}

void test_static() {
    nrvc_pool *pool = nullptr;
    EXPECT(nrvc_pool_create(0, NRV_POOL_STATIC, 2048, 0, 0, "weights", &pool) == NRV_OK, "create static");
    if (!pool) return;
    void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
    EXPECT(nrvc_pool_alloc(pool, 100, &a) == NRV_OK && nrvc_pool_alloc(pool, 300, &b) == NRV_OK, "a, b");
    EXPECT((unsigned char *)b == (unsigned char *)a + 256, "bump order");
    nrv_pool_stats s = stats_of(pool);
    EXPECT(s.kind == NRV_POOL_STATIC && s.allocated == 400 && s.overhead == 156 + 212 && s.free == 2048 - 768 &&
               s.largest_free == 2048 - 768,
           "counters after two: allocated %llu overhead %llu free %llu", (unsigned long long)s.allocated,
           (unsigned long long)s.overhead, (unsigned long long)s.free);
    EXPECT(nrvc_pool_release(pool, a) == NRV_OK, "release a");
    s = stats_of(pool);
    EXPECT(s.allocated == 300 && s.overhead == 256 + 212 && s.free == 2048 - 768 && s.live_buffers == 1,
           "released bytes are unreclaimed, not free");
    EXPECT(nrvc_pool_alloc(pool, 100, &c) == NRV_OK && (unsigned char *)c == (unsigned char *)b + 512,
           "no reuse before a reset");
    EXPECT(nrvc_pool_alloc(pool, 1025, &d) == NRV_ERR_OUT_OF_MEMORY, "exhausted (1025 > the 1024 left)");
    EXPECT(nrvc_pool_reset(pool) == NRV_ERR_STATE, "reset refused while buffers are live");
    EXPECT(nrvc_pool_release(pool, b) == NRV_OK && nrvc_pool_release(pool, c) == NRV_OK, "release b, c");
    EXPECT(nrvc_pool_release(pool, b) == NRV_ERR_STATE, "double release");
    s = stats_of(pool);
    EXPECT(s.allocated == 0 && s.free == 2048 - 1024 && s.overhead == 1024, "all unreclaimed");
    EXPECT(nrvc_pool_reset(pool) == NRV_OK, "reset");
    s = stats_of(pool);
    EXPECT(s.free == 2048 && s.overhead == 0 && s.largest_free == 2048 && s.peak == 400, "reset reclaims all");
    EXPECT(nrvc_pool_alloc(pool, 2048, &d) == NRV_OK && d == a, "whole arena again");
    EXPECT(nrvc_pool_release(pool, d) == NRV_OK, "release d");
    nrvc_pool_free(pool);
}

void test_streaming() {
    nrvc_pool *pool = nullptr;
    EXPECT(nrvc_pool_create(0, NRV_POOL_STREAMING, 0, 0, 4, "ring", &pool) == NRV_ERR_INVALID_ARG, "chunk 0");
    EXPECT(nrvc_pool_create(0, NRV_POOL_STREAMING, 0, 1000, 0, "ring", &pool) == NRV_ERR_INVALID_ARG, "count 0");
    EXPECT(nrvc_pool_create(0, 9, 1024, 0, 0, "odd", &pool) == NRV_ERR_INVALID_ARG, "unknown kind");
    EXPECT(nrvc_pool_create(0, NRV_POOL_STREAMING, 0, 1000, 4, "ring", &pool) == NRV_OK, "create ring");
    if (!pool) return;
    nrv_pool_stats s = stats_of(pool);
    EXPECT(s.kind == NRV_POOL_STREAMING && s.chunk_size == 1024 && s.chunk_count == 4 && s.capacity == 4096 &&
               s.free == 4096 && s.largest_free == 1024,
           "ring shape");
    unsigned char *c[6] = {};
    void *p = nullptr;
    for (int i = 0; i < 3; i++) {
        EXPECT(nrvc_pool_alloc(pool, 1000 - (uint64_t)i, &p) == NRV_OK, "chunk %d", i);
        c[i] = static_cast<unsigned char *>(p);
    }
    EXPECT(c[1] == c[0] + 1024 && c[2] == c[1] + 1024, "ring order");
    EXPECT(nrvc_pool_alloc(pool, 1025, &p) == NRV_ERR_OUT_OF_MEMORY, "larger than a chunk");
    EXPECT(strstr(nrvc_last_error(), "chunk") != nullptr, "message says chunk: %s", nrvc_last_error());
    EXPECT(nrvc_pool_release(pool, c[1]) == NRV_OK, "release the middle chunk");
    EXPECT(nrvc_pool_alloc(pool, 10, &p) == NRV_OK && p == c[2] + 1024, "next in ring order: the last chunk");
    c[3] = static_cast<unsigned char *>(p);
    EXPECT(nrvc_pool_alloc(pool, 10, &p) == NRV_OK && p == c[1], "then around: the freed one");
    c[4] = static_cast<unsigned char *>(p);
    s = stats_of(pool);
    EXPECT(s.allocated == 1000 + 998 + 10 + 10 && s.overhead == 4096 - s.allocated && s.free == 0 &&
               s.largest_free == 0 && s.live_buffers == 4,
           "full ring: allocated %llu overhead %llu", (unsigned long long)s.allocated,
           (unsigned long long)s.overhead);
    EXPECT(nrvc_pool_alloc(pool, 1, &p) == NRV_ERR_OUT_OF_MEMORY, "exhausted");
    EXPECT(nrvc_pool_release(pool, c[0] + 256) == NRV_ERR_STATE, "interior pointer");
    for (int i : {0, 2, 3, 4}) EXPECT(nrvc_pool_release(pool, c[i]) == NRV_OK, "release %d", i);
    s = stats_of(pool);
    EXPECT(s.allocated == 0 && s.overhead == 0 && s.free == 4096 && s.peak == 1000 + 999 + 998, "empty ring");
    nrvc_pool_free(pool);
}

void test_refcounts_and_close() {
    for (int32_t kind : {NRV_POOL_DYNAMIC, NRV_POOL_STATIC, NRV_POOL_STREAMING}) {
        nrvc_pool *pool = nullptr;
        EXPECT(nrvc_pool_create(0, kind, 4096, 512, 8, "owner", &pool) == NRV_OK, "create kind %d", kind);
        if (!pool) continue;
        void *a = nullptr, *b = nullptr;
        EXPECT(nrvc_pool_alloc(pool, 300, &a) == NRV_OK && nrvc_pool_alloc(pool, 200, &b) == NRV_OK, "a, b");
        EXPECT(nrvc_pool_refcount(pool, a) == 1 && nrvc_pool_retain(pool, a) == NRV_OK &&
                   nrvc_pool_refcount(pool, a) == 2,
               "retain");
        EXPECT(nrvc_pool_retain(pool, (unsigned char *)a + 1) == NRV_ERR_STATE, "retain a non-buffer");
        EXPECT(nrvc_pool_release(pool, a) == NRV_OK && nrvc_pool_refcount(pool, a) == 1 &&
                   stats_of(pool).live_buffers == 2 && stats_of(pool).allocated == 500,
               "one release of two references keeps the bytes");
        EXPECT(nrvc_pool_release(pool, b) == NRV_OK && nrvc_pool_refcount(pool, b) == 0, "b gone");
        /* the owner frees the pool while a borrower still holds a */
        nrvc_pool_free(pool);
        nrv_pool_stats s = stats_of(pool);
        EXPECT(s.closed == 1 && s.live_buffers == 1 && s.allocated == 300 && s.largest_free == 0, "closed, a kept");
        void *c = &s;
        EXPECT(nrvc_pool_alloc(pool, 16, &c) == NRV_ERR_STATE && c == &s, "no allocation from a closed pool");
        nrvc_pool_free(pool); /* a second free of a closed pool: no-op */
        EXPECT(nrvc_pool_release(pool, a) == NRV_OK, "the borrower's release frees the pool");
    }
}

} /* namespace */

int main() {
    test_basics();
    test_random();
    test_static();
    test_streaming();
    test_refcounts_and_close();
    printf("nrv_pool_selftest: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
