/* test_pool.c — the memory pools: the three kinds, exact counters, reference counts,
 * borrowers outliving owners, failure injection, and a randomised stress run against
 * shadow counters. Every pool is freed before exit, so a leak check (ASan) sees nothing. */
#include <stdint.h>

#include "nrv_test.h"

#define HDR 64u /* the buffer header size the pools document (pool.c pins it) */

static uint64_t round64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

static nrv_pool_stats stats_of(const nrv_pool_t *pool) {
    nrv_pool_stats s;
    memset(&s, 0, sizeof s);
    nrv_status st = nrv_pool_stats_get(pool, &s);
    NRV_EXPECT(st == NRV_OK, "nrv_pool_stats_get: %s (%s)", nrv_status_str(st), nrv_last_error());
    return s;
}

/* free = capacity - allocated - overhead, and the largest request fits in what is free. */
static void check_invariant_at(const nrv_pool_t *pool, int line) {
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.free + s.allocated + s.overhead == s.capacity,
               "line %d: free %" PRIu64 " + allocated %" PRIu64 " + overhead %" PRIu64 " != capacity %" PRIu64, line,
               s.free, s.allocated, s.overhead, s.capacity);
    NRV_EXPECT(s.largest_free <= s.free, "line %d: largest_free %" PRIu64 " > free %" PRIu64, line, s.largest_free,
               s.free);
    NRV_EXPECT(s.peak >= s.allocated, "line %d: peak %" PRIu64 " < allocated %" PRIu64, line, s.peak, s.allocated);
}
#define CHECK_INVARIANT(pool) check_invariant_at((pool), __LINE__)

/* Every counter but failed_allocs is the same: a refused request changed nothing. */
static int same_but_failed(const nrv_pool_stats *a, const nrv_pool_stats *b) {
    nrv_pool_stats x = *a, y = *b;
    x.failed_allocs = y.failed_allocs = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

static int aligned64(const void *p) { return ((uintptr_t)p & 63u) == 0; }

static void *alloc_ok(nrv_pool_t *pool, uint64_t size) {
    void *p = NULL;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, size, &p), NRV_OK);
    NRV_EXPECT(p && aligned64(p), "pointer %p for %" PRIu64 " bytes not 64-byte aligned", p, size);
    CHECK_INVARIANT(pool);
    return p;
}

static void release_ok(nrv_pool_t *pool, void *p) {
    NRV_EXPECT_STATUS(nrv_buffer_release(p), NRV_OK);
    if (pool) CHECK_INVARIANT(pool);
}

static int has(const char *needle) { return strstr(nrv_last_error(), needle) != NULL; }

/* One line per group: its name and whether its checks all passed. */
static int group_failed_before;
static void group_begin(void) { group_failed_before = nrv_test_failed; }
static void group_end(const char *what) {
    int bad = nrv_test_failed - group_failed_before;
    printf("  %-26s %s", what, bad ? "FAILED" : "ok");
    if (bad) printf(" (%d checks)", bad);
    printf("\n");
}

/* ---------------------------------------------------------------- STATIC */

static void test_static(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, 4096, "weights", &pool), NRV_OK);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.kind == NRV_POOL_STATIC && s.capacity == 4096 && s.free == 4096 && s.overhead == 0,
               "fresh static pool: kind %d capacity %" PRIu64 " free %" PRIu64, s.kind, s.capacity, s.free);
    NRV_EXPECT(s.largest_free == 4096 - HDR && s.chunk_size == 0 && s.chunk_count == 0, "largest %" PRIu64,
               s.largest_free);

    /* bump: consecutive blocks, header + rounded payload apart */
    unsigned char *a = alloc_ok(pool, 100);
    unsigned char *b = alloc_ok(pool, 1);
    NRV_EXPECT(b == a + 128 + HDR, "bump order: b - a = %td", b - a);
    s = stats_of(pool);
    NRV_EXPECT(s.allocated == 101 && s.overhead == (HDR + 28) + (HDR + 63) && s.live_buffers == 2,
               "allocated %" PRIu64 " overhead %" PRIu64, s.allocated, s.overhead);
    NRV_EXPECT(s.free == 4096 - 192 - 128, "free %" PRIu64, s.free);

    /* a release parks the bytes as overhead; they do not come back before reset */
    release_ok(pool, a);
    nrv_pool_stats r = stats_of(pool);
    NRV_EXPECT(r.allocated == 1 && r.free == s.free && r.overhead == s.overhead + 100 && r.live_buffers == 1,
               "after release: allocated %" PRIu64 " free %" PRIu64 " overhead %" PRIu64, r.allocated, r.free,
               r.overhead);
    unsigned char *c = alloc_ok(pool, 100);
    NRV_EXPECT(c == b + 64 + HDR, "static never reuses a released block before reset");
    NRV_EXPECT_STATUS(nrv_pool_reset(pool), NRV_ERR_STATE);
    NRV_EXPECT(has("static pool 'weights'") && has("2 buffers still live"), "message: %s", nrv_last_error());

    /* exhaustion: the largest request succeeds exactly, one byte more is refused */
    s = stats_of(pool);
    void *big = alloc_ok(pool, s.largest_free);
    s = stats_of(pool);
    NRV_EXPECT(s.free == 0 && s.largest_free == 0, "full: free %" PRIu64, s.free);
    void *none = (void *)&s;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 1, &none), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(none == (void *)&s, "out written on failure");
    NRV_EXPECT(has("static pool 'weights': cannot allocate 1 bytes: 0 free, largest free block 0") &&
                   has("released bytes come back only with nrv_pool_reset"),
               "message: %s", nrv_last_error());
    r = stats_of(pool);
    NRV_EXPECT(same_but_failed(&s, &r) && r.failed_allocs == s.failed_allocs + 1, "exhaustion changed the pool");

    /* reset with nothing live: every byte back, next allocation at the arena start again */
    release_ok(pool, b);
    release_ok(pool, c);
    release_ok(pool, big);
    s = stats_of(pool);
    NRV_EXPECT(s.allocated == 0 && s.free == 0 && s.overhead == 4096, "all parked: overhead %" PRIu64, s.overhead);
    NRV_EXPECT_STATUS(nrv_pool_reset(pool), NRV_OK);
    CHECK_INVARIANT(pool);
    s = stats_of(pool);
    NRV_EXPECT(s.free == 4096 && s.overhead == 0 && s.peak > 0 && s.total_allocs == 4 && s.failed_allocs == 1,
               "after reset: free %" PRIu64 " peak %" PRIu64 " total %" PRIu64, s.free, s.peak, s.total_allocs);
    void *again = alloc_ok(pool, 8);
    NRV_EXPECT(again == a, "after reset the bump pointer is back at the start");
    release_ok(pool, again);
    nrv_pool_free(pool);
    group_end("static");
}

/* ---------------------------------------------------------------- DYNAMIC */

static void test_dynamic_basic(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 1 << 20, "session", &pool), NRV_OK);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.kind == NRV_POOL_DYNAMIC && s.capacity == 1 << 20 && s.largest_free == (1 << 20) - HDR,
               "fresh dynamic pool: largest %" PRIu64, s.largest_free);
    unsigned char *a = alloc_ok(pool, 1000);
    unsigned char *b = alloc_ok(pool, 3000);
    s = stats_of(pool);
    NRV_EXPECT(s.allocated == 4000 && s.live_buffers == 2 && s.peak == 4000, "allocated %" PRIu64, s.allocated);
    NRV_EXPECT(s.overhead == (HDR + 24) + (HDR + 8), "overhead %" PRIu64, s.overhead);
    NRV_EXPECT(nrv_buffer_size(a) == 1000 && nrv_buffer_size(b) == 3000, "sizes");
    memset(a, 0xAB, 1000);
    memset(b, 0xCD, 3000);
    release_ok(pool, a);
    release_ok(pool, b);
    s = stats_of(pool);
    NRV_EXPECT(s.free == s.capacity && s.overhead == 0 && s.largest_free == s.capacity - HDR && s.peak == 4000,
               "all released: free %" PRIu64 " largest %" PRIu64, s.free, s.largest_free);
    NRV_EXPECT_STATUS(nrv_pool_reset_peak(pool), NRV_OK);
    NRV_EXPECT(stats_of(pool).peak == 0, "reset_peak");
    NRV_EXPECT_STATUS(nrv_pool_reset(pool), NRV_OK);
    CHECK_INVARIANT(pool);
    nrv_pool_free(pool);
    group_end("dynamic basics");
}

/* Free then allocate the same size: the hole is reused, at the same address. */
static void test_dynamic_reuse(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 64 * 1024, NULL, &pool), NRV_OK);
    void *a = alloc_ok(pool, 1000), *b = alloc_ok(pool, 1000), *c = alloc_ok(pool, 1000);
    release_ok(pool, b);
    void *b2 = alloc_ok(pool, 1000);
    NRV_EXPECT(b2 == b, "same size reuses the hole: %p vs %p", b2, b);
    release_ok(pool, b2);
    void *small = alloc_ok(pool, 500); /* a smaller request still prefers the hole, split */
    NRV_EXPECT(small == b, "smaller request takes the hole: %p vs %p", small, b);
    void *rest = alloc_ok(pool, 400); /* and the split-off rest right behind it */
    NRV_EXPECT((unsigned char *)rest == (unsigned char *)b + 512 + HDR, "split remainder reused");
    release_ok(pool, small);
    release_ok(pool, rest);
    release_ok(pool, a);
    release_ok(pool, c);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.largest_free == s.capacity - HDR, "one block at the end: %" PRIu64, s.largest_free);
    nrv_pool_free(pool);
    group_end("dynamic reuse");
}

/* Holes of several sizes: a request takes the smallest one that fits, whatever the
 * free-list order, also when the fit is in a higher size class. */
static void test_dynamic_best_fit(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 64 * 1024, "fit", &pool), NRV_OK);
    void *h1 = alloc_ok(pool, 4096), *s1 = alloc_ok(pool, 64);
    void *h2 = alloc_ok(pool, 704), *s2 = alloc_ok(pool, 64);  /* block 768: class of 8..15 lines */
    void *h3 = alloc_ok(pool, 896), *s3 = alloc_ok(pool, 64);  /* block 960: the same class */
    release_ok(pool, h2);
    release_ok(pool, h3); /* the list now starts with h3: best fit must still scan */
    release_ok(pool, h1);

    nrv_pool_stats before = stats_of(pool);
    void *x = alloc_ok(pool, 640); /* needs 704: h2 (768) beats h3 (960), h1 and the tail */
    NRV_EXPECT(x == h2, "640 bytes -> the 768-byte hole: got %p, h1 %p h2 %p h3 %p", x, h1, h2, h3);
    nrv_pool_stats after = stats_of(pool);
    /* 64 bytes would be left: too small to stand alone, kept as padding (overhead) */
    NRV_EXPECT(after.free == before.free - 768 && after.overhead == before.overhead + 768 - 640,
               "sliver kept: free %" PRIu64 " -> %" PRIu64 ", overhead %" PRIu64 " -> %" PRIu64, before.free,
               after.free, before.overhead, after.overhead);
    void *y = alloc_ok(pool, 800); /* needs 896: only h3 (960) of its class, before h1 and the tail */
    NRV_EXPECT(y == h3, "800 bytes -> the 960-byte hole");
    void *z = alloc_ok(pool, 2000); /* needs 2112: nothing in its class; h1 (4160) is the smallest above */
    NRV_EXPECT(z == h1, "2000 bytes -> the 4160-byte hole in a higher class");
    void *w = alloc_ok(pool, 1500); /* h1's split remainder (2048) is now the best fit */
    NRV_EXPECT((unsigned char *)w == (unsigned char *)h1 + 2048 + HDR, "remainder of h1 chosen");
    /* equal holes: the lower address wins, whatever was freed last */
    void *e1 = alloc_ok(pool, 256), *t1 = alloc_ok(pool, 64), *e2 = alloc_ok(pool, 256), *t2 = alloc_ok(pool, 64);
    release_ok(pool, e1);
    release_ok(pool, e2);
    void *e = alloc_ok(pool, 200);
    NRV_EXPECT(e == e1, "tie between equal holes goes to the lower address");
    void *all[] = {x, y, z, w, s1, s2, s3, e, t1, t2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release_ok(pool, all[i]);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.free == s.capacity && s.largest_free == s.capacity - HDR, "back to one block");
    nrv_pool_free(pool);
    group_end("dynamic best fit");
}

/* Releasing in every order coalesces with both neighbours back to one block; then the
 * whole capacity minus one header is a valid request. */
static void test_dynamic_coalesce(void) {
    group_begin();
    static const int orders[6][3] = {{0, 2, 1}, {2, 0, 1}, {0, 1, 2}, {1, 0, 2}, {1, 2, 0}, {2, 1, 0}};
    for (int tail = 0; tail < 2; tail++) {
        /* tail = 0: A B C fill the arena exactly (C has no successor); 1: a free tail follows */
        uint64_t cap = 3 * (1024 + HDR) + (tail ? 4096 : 0);
        for (int o = 0; o < 6; o++) {
            nrv_pool_t *pool = NULL;
            NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, cap, "coalesce", &pool), NRV_OK);
            void *bufs[3];
            for (int i = 0; i < 3; i++) bufs[i] = alloc_ok(pool, 1024);
            for (int i = 0; i < 3; i++) release_ok(pool, bufs[orders[o][i]]);
            nrv_pool_stats s = stats_of(pool);
            NRV_EXPECT(s.free == cap && s.overhead == 0 && s.largest_free == cap - HDR,
                       "tail %d order %d: free %" PRIu64 " largest %" PRIu64, tail, o, s.free, s.largest_free);
            void *whole = alloc_ok(pool, cap - HDR);
            NRV_EXPECT(whole == bufs[0], "whole arena at its start");
            s = stats_of(pool);
            NRV_EXPECT(s.free == 0 && s.overhead == HDR && s.largest_free == 0, "full: overhead %" PRIu64,
                       s.overhead);
            release_ok(pool, whole);
            nrv_pool_free(pool);
        }
    }
    group_end("dynamic coalescing");
}

/* ---------------------------------------------------------------- exhaustion */

static void test_exhaustion(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 2048, "session", &pool), NRV_OK);
    void *a = alloc_ok(pool, 960);
    nrv_pool_stats before = stats_of(pool);
    void *out = &before;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 4096, &out), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(strcmp(nrv_last_error(), "dynamic pool 'session': cannot allocate 4096 bytes: 1024 free, "
                                        "largest free block 960") == 0,
               "message: %s", nrv_last_error());
    NRV_EXPECT(out == (void *)&before, "out written on failure");
    nrv_pool_stats after = stats_of(pool);
    NRV_EXPECT(same_but_failed(&before, &after) && after.failed_allocs == before.failed_allocs + 1,
               "a refused request changed the pool");
    /* exactly largest_free succeeds, one more byte does not */
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 961, &out), NRV_ERR_OUT_OF_MEMORY);
    void *b = alloc_ok(pool, 960);
    NRV_EXPECT(stats_of(pool).free == 0, "full");
    /* sizes whose rounding overflows, or beyond any arena */
    nrv_pool_stats full = stats_of(pool);
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, UINT64_MAX, &out), NRV_ERR_OVERFLOW);
    NRV_EXPECT(has("dynamic pool 'session'") && has("18446744073709551615"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, UINT64_MAX - 63, &out), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, UINT64_MAX / 2, &out), NRV_ERR_OUT_OF_MEMORY);
    after = stats_of(pool);
    NRV_EXPECT(same_but_failed(&full, &after) && after.failed_allocs == full.failed_allocs + 3,
               "oversized requests changed the pool");
    release_ok(pool, a);
    release_ok(pool, b);
    nrv_pool_free(pool);

    /* unnamed pools say which kind they are */
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, 128, NULL, &pool), NRV_OK);
    a = alloc_ok(pool, 64);
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 1, &out), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(has("static pool: cannot allocate 1 bytes"), "message: %s", nrv_last_error());
    release_ok(pool, a);
    nrv_pool_free(pool);
    group_end("exhaustion");
}

/* ---------------------------------------------------------------- reference counts */

static void test_refcount(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 16384, "rc", &pool), NRV_OK);
    unsigned char *p = alloc_ok(pool, 200);
    memset(p, 0, 200);
    NRV_EXPECT(nrv_buffer_refcount(p) == 1 && nrv_buffer_size(p) == 200, "fresh buffer: refcount 1");
    NRV_EXPECT_STATUS(nrv_buffer_retain(p), NRV_OK);
    NRV_EXPECT_STATUS(nrv_buffer_retain(p), NRV_OK);
    NRV_EXPECT(nrv_buffer_refcount(p) == 3, "retained twice: %lld", (long long)nrv_buffer_refcount(p));
    release_ok(pool, p);
    release_ok(pool, p);
    NRV_EXPECT(nrv_buffer_refcount(p) == 1 && stats_of(pool).live_buffers == 1, "still live with one reference");
    release_ok(pool, p);
    NRV_EXPECT(nrv_buffer_refcount(p) == 0 && nrv_buffer_size(p) == 0, "released buffer reads as not live");
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.live_buffers == 0 && s.allocated == 0, "counters after the last release");
    NRV_EXPECT_STATUS(nrv_buffer_release(p), NRV_ERR_STATE);
    NRV_EXPECT(has("already released") && has("dynamic pool 'rc'"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_buffer_retain(p), NRV_ERR_STATE);
    nrv_pool_stats s2 = stats_of(pool);
    NRV_EXPECT(memcmp(&s, &s2, sizeof s) == 0, "a double release changed the pool");

    /* a released block absorbed by its free predecessor still reads "already released" */
    void *q1 = alloc_ok(pool, 100), *q2 = alloc_ok(pool, 100), *q3 = alloc_ok(pool, 100);
    release_ok(pool, q1);
    release_ok(pool, q2); /* merges into q1's block: q2's header is absorbed */
    NRV_EXPECT_STATUS(nrv_buffer_release(q2), NRV_ERR_STATE);
    NRV_EXPECT(has("already released"), "absorbed header: %s", nrv_last_error());
    release_ok(pool, q3);

    /* pointers that were never nerve buffers */
    unsigned char *r = alloc_ok(pool, 1024);
    memset(r, 0, 1024);
    NRV_EXPECT_STATUS(nrv_buffer_release(r + 128), NRV_ERR_STATE); /* interior, aligned */
    NRV_EXPECT(has("not a live nerve buffer"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_buffer_retain(r + 128), NRV_ERR_STATE);
    NRV_EXPECT_STATUS(nrv_buffer_release(r + 1), NRV_ERR_STATE); /* misaligned */
    NRV_EXPECT(nrv_buffer_refcount(r + 128) == 0 && nrv_buffer_size(r + 1) == 0, "foreign pointers read as 0");
    NRV_EXPECT(nrv_buffer_refcount(r) == 1, "the real buffer is untouched");
    NRV_EXPECT_STATUS(nrv_buffer_release(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_buffer_retain(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(nrv_buffer_refcount(NULL) == 0 && nrv_buffer_size(NULL) == 0, "NULL reads as 0");
    release_ok(pool, r);
    s = stats_of(pool);
    NRV_EXPECT(s.free == s.capacity && s.live_buffers == 0, "everything back");
    nrv_pool_free(pool);
    group_end("reference counts");
}

/* nrv_pool_free with buffers out: the pool closes, the buffers stay usable, and the last
 * release frees the arena (ASan: no leak, no use after free). */
static void test_borrower_outlives_owner(void) {
    group_begin();
    for (int kind = 0; kind < 3; kind++) {
        nrv_pool_t *pool = NULL;
        if (kind == NRV_POOL_STREAMING)
            NRV_EXPECT_STATUS(nrv_pool_create_streaming(512, 4, "owner", &pool), NRV_OK);
        else
            NRV_EXPECT_STATUS(nrv_pool_create((nrv_pool_kind)kind, 8192, "owner", &pool), NRV_OK);
        unsigned char *a = alloc_ok(pool, 300), *b = alloc_ok(pool, 400);
        NRV_EXPECT_STATUS(nrv_buffer_retain(b), NRV_OK); /* a borrower's reference */
        nrv_pool_free(pool);                             /* the owner goes */
        nrv_pool_stats s = stats_of(pool);
        NRV_EXPECT(s.closed == 1 && s.live_buffers == 2, "kind %d: closed %d live %" PRIu64, kind, s.closed,
                   s.live_buffers);
        void *c = NULL;
        NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 16, &c), NRV_ERR_STATE);
        NRV_EXPECT(has("closed") && has("'owner'"), "message: %s", nrv_last_error());
        NRV_EXPECT(stats_of(pool).failed_allocs == 0, "a closed pool's refusal is not an exhaustion");
        nrv_pool_free(pool); /* a second free of a closed pool is a no-op */
        release_ok(pool, a);
        memset(b, 0x5A, 400); /* still ours */
        release_ok(pool, b);
        NRV_EXPECT(b[399] == 0x5A && nrv_buffer_refcount(b) == 1, "the borrower's reference keeps it");
        s = stats_of(pool);
        NRV_EXPECT(s.live_buffers == 1 && s.closed == 1, "one borrower left");
        release_ok(NULL, b); /* the last reference: the arena goes now */
    }
    nrv_pool_free(NULL); /* no-op */
    group_end("borrower outlives owner");
}

/* ---------------------------------------------------------------- STREAMING */

static void test_streaming(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(1000, 4, "audio", &pool), NRV_OK);
    const uint64_t stride = round64(1000) + HDR;
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.kind == NRV_POOL_STREAMING && s.chunk_size == 1000 && s.chunk_count == 4 &&
                   s.capacity == 4 * stride && s.free == s.capacity && s.largest_free == 1000,
               "fresh ring: capacity %" PRIu64 " largest %" PRIu64, s.capacity, s.largest_free);
    unsigned char *c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = alloc_ok(pool, (uint64_t)(i + 1) * 250);
        NRV_EXPECT(c[i] == c[0] + (uint64_t)i * stride, "chunk %d in ring order", i);
    }
    s = stats_of(pool);
    NRV_EXPECT(s.allocated == 2500 && s.free == 0 && s.largest_free == 0 && s.overhead == 4 * stride - 2500,
               "all held: overhead %" PRIu64, s.overhead);
    void *out = &s;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 10, &out), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(has("streaming pool 'audio'") && has("all 4 chunks"), "message: %s", nrv_last_error());
    nrv_pool_stats r = stats_of(pool);
    NRV_EXPECT(same_but_failed(&s, &r) && r.failed_allocs == 1 && out == (void *)&s, "exhaustion changed the ring");

    /* the cursor wrapped to chunk 0: the next free one in ring order is taken */
    release_ok(pool, c[1]);
    void *x = alloc_ok(pool, 1000);
    NRV_EXPECT(x == c[1], "after wrap-around the scan finds chunk 1");
    release_ok(pool, c[3]);
    release_ok(pool, c[0]);
    void *y = alloc_ok(pool, 1);
    void *z = alloc_ok(pool, 1);
    NRV_EXPECT(y == c[3] && z == c[0], "cursor order: chunk 3, then wrap to chunk 0 (%p %p)", y, z);

    /* a request above the chunk size is an argument error, counted as refused */
    s = stats_of(pool);
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 1001, &out), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(has("chunk size 1000"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, UINT64_MAX, &out), NRV_ERR_INVALID_ARG);
    r = stats_of(pool);
    NRV_EXPECT(same_but_failed(&s, &r) && r.failed_allocs == s.failed_allocs + 2, "oversize changed the ring");
    NRV_EXPECT_STATUS(nrv_pool_reset(pool), NRV_ERR_INVALID_ARG); /* streaming: nothing to reset */

    release_ok(pool, x);
    release_ok(pool, y);
    release_ok(pool, z);
    release_ok(pool, c[2]);
    s = stats_of(pool);
    NRV_EXPECT(s.free == s.capacity && s.overhead == 0 && s.peak == 3000 && s.total_allocs == 7,
               "all returned: peak %" PRIu64 " total %" PRIu64, s.peak, s.total_allocs);
    nrv_pool_free(pool);
    group_end("streaming ring");
}

/* After creation a streaming pool never asks the system for memory: arm the failure of
 * the very next system allocation, run many cycles, and see the failure still pending. */
static void test_streaming_no_alloc(void) {
    group_begin();
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(4096, 8, "frames", &pool), NRV_OK);
    nrv_debug_fail_alloc_after(1);
    nrv_test_seed(7);
    int errors = 0;
    for (int cycle = 0; cycle < 20000; cycle++) {
        void *held[8];
        int n = 1 + (int)(nrv_test_u64() % 8);
        for (int i = 0; i < n; i++) {
            held[i] = NULL;
            errors += nrv_pool_alloc(pool, 1 + nrv_test_u64() % 4096, &held[i]) != NRV_OK;
            if (held[i]) ((unsigned char *)held[i])[0] = (unsigned char)cycle;
        }
        if (n == 8) errors += nrv_pool_alloc(pool, 1, &(void *){NULL}) != NRV_ERR_OUT_OF_MEMORY;
        if (held[0]) errors += nrv_buffer_retain(held[0]) != NRV_OK || nrv_buffer_release(held[0]) != NRV_OK;
        for (int i = 0; i < n; i++) {
            int j = (int)(nrv_test_u64() % (uint64_t)(n - i)) + i; /* release in random order */
            void *t = held[j];
            held[j] = held[i];
            errors += t == NULL || nrv_buffer_release(t) != NRV_OK;
        }
        if (cycle % 1000 == 0) CHECK_INVARIANT(pool);
    }
    NRV_EXPECT(errors == 0, "%d cycle operations failed (%s)", errors, nrv_last_error());
    /* the armed failure is still pending: the cycles made no system allocation */
    nrv_pool_t *probe = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, "probe", &probe), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(probe == NULL, "probe pool created");
    nrv_pool_free(probe);
    nrv_debug_fail_alloc_after(0);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.live_buffers == 0 && s.free == s.capacity && s.failed_allocs > 0, "ring drained: live %" PRIu64,
               s.live_buffers);
    nrv_pool_free(pool);
    group_end("streaming never allocates");
}

/* ---------------------------------------------------------------- creation and arguments */

static void test_create_failure(void) {
    group_begin();
    nrv_pool_t *sentinel = (nrv_pool_t *)&sentinel, *pool = sentinel;
    nrv_debug_fail_alloc_after(1);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, "session", &pool), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(pool == sentinel && has("dynamic pool 'session'") && has("4096"), "message: %s", nrv_last_error());
    nrv_debug_fail_alloc_after(1);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, 4096, NULL, &pool), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(pool == sentinel && has("static pool"), "message: %s", nrv_last_error());
    nrv_debug_fail_alloc_after(1);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(100, 3, NULL, &pool), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(pool == sentinel && has("streaming pool"), "message: %s", nrv_last_error());
    /* n = 2: the first creation succeeds, the second fails: one system allocation each */
    nrv_pool_t *first = NULL;
    nrv_debug_fail_alloc_after(2);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, NULL, &first), NRV_OK);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, NULL, &pool), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(pool == sentinel, "out touched");
    nrv_debug_fail_alloc_after(0);
    nrv_pool_free(first);
    group_end("creation failure");
}

static void test_invalid_args(void) {
    group_begin();
    nrv_pool_t *sentinel = (nrv_pool_t *)&sentinel, *pool = sentinel;
    /* creation */
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 0, "zero", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(has("dynamic pool 'zero'") && has("capacity"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, UINT64_MAX, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, UINT64_MAX / 2, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, UINT64_MAX - 100, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STREAMING, 4096, NULL, &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_create((nrv_pool_kind)7, 4096, NULL, &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_create((nrv_pool_kind)-1, 4096, NULL, &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, NULL, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(0, 4, "s", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(has("chunk_size"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(64, 0, "s", &pool), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(has("streaming pool 's'") && has("chunk_count"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(UINT64_MAX, 1, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(UINT64_MAX / 2, 1, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(1u << 20, UINT64_MAX / 2, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(64, UINT64_MAX, NULL, &pool), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(64, 4, NULL, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(pool == sentinel, "out written by a failed creation");

    /* tiny capacities round up to one header + one line */
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 1, "tiny", &pool), NRV_OK);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.capacity == 128 && s.largest_free == 64, "tiny pool: capacity %" PRIu64, s.capacity);
    void *p = alloc_ok(pool, 64);
    void *out = &s;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 0, &out), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(has("dynamic pool 'tiny'") && has("0 bytes"), "message: %s", nrv_last_error());
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 16, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(stats_of(pool).failed_allocs == 0, "argument errors are not refusals");
    NRV_EXPECT_STATUS(nrv_pool_reset(pool), NRV_ERR_STATE);
    release_ok(pool, p);
    nrv_pool_free(pool);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, 100, NULL, &pool), NRV_OK);
    NRV_EXPECT(stats_of(pool).capacity == 128, "100 rounds up to 128");
    nrv_pool_free(pool);

    /* NULL pools and outputs */
    NRV_EXPECT_STATUS(nrv_pool_alloc(NULL, 16, &out), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_stats_get(NULL, &s), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_reset(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_reset_peak(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 4096, NULL, &pool), NRV_OK);
    NRV_EXPECT_STATUS(nrv_pool_stats_get(pool, NULL), NRV_ERR_INVALID_ARG);
    nrv_pool_free(pool);
    nrv_pool_free(NULL);
    group_end("invalid arguments");
}

/* A long name is truncated, not overflowed. */
static void test_names(void) {
    group_begin();
    char name[600];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 256, name, &pool), NRV_OK);
    name[0] = 'X'; /* the pool keeps its own copy */
    void *out;
    NRV_EXPECT_STATUS(nrv_pool_alloc(pool, 1 << 20, &out), NRV_ERR_OUT_OF_MEMORY);
    NRV_EXPECT(has("dynamic pool 'nnnn") && !has("X") && has("cannot allocate 1048576 bytes"), "message: %s",
               nrv_last_error());
    nrv_pool_free(pool);
    group_end("names");
}

/* Alignment of every pointer, every kind, many sizes. */
static void test_alignment(void) {
    group_begin();
    nrv_pool_t *pools[3] = {NULL, NULL, NULL};
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_STATIC, 1 << 20, NULL, &pools[0]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, 1 << 20, NULL, &pools[1]), NRV_OK);
    NRV_EXPECT_STATUS(nrv_pool_create_streaming(777, 300, NULL, &pools[2]), NRV_OK);
    int misaligned = 0, failed = 0;
    for (int k = 0; k < 3; k++) {
        void *held[300];
        for (int i = 0; i < 300; i++) {
            held[i] = NULL;
            failed += nrv_pool_alloc(pools[k], (uint64_t)(i * 7 % 777) + 1, &held[i]) != NRV_OK;
            misaligned += !aligned64(held[i]);
        }
        for (int i = 0; i < 300; i += 2) failed += nrv_buffer_release(held[i]) != NRV_OK;
        for (int i = 0; i < 150; i++) { /* refill holes (dynamic) */
            void *p = NULL;
            failed += nrv_pool_alloc(pools[k], (uint64_t)i % 500 + 1, &p) != NRV_OK;
            misaligned += !aligned64(p);
            failed += nrv_buffer_release(p) != NRV_OK;
        }
        for (int i = 1; i < 300; i += 2) failed += nrv_buffer_release(held[i]) != NRV_OK;
        CHECK_INVARIANT(pools[k]);
        nrv_pool_free(pools[k]);
    }
    NRV_EXPECT(misaligned == 0 && failed == 0, "%d misaligned, %d failed", misaligned, failed);
    group_end("64-byte alignment");
}

/* ---------------------------------------------------------------- randomised stress */

typedef struct {
    unsigned char *ptr;
    uint64_t size;
    uint64_t id;
    int refs;
} live_buf;

static uint64_t pattern_word(uint64_t id, uint64_t i) {
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xC2B2AE3D27D4EB4Full;
    return x ^ (x >> 29);
}

static void pattern_fill(const live_buf *b) {
    uint64_t words = b->size / 8;
    for (uint64_t i = 0; i < words; i++) {
        uint64_t w = pattern_word(b->id, i);
        memcpy(b->ptr + 8 * i, &w, 8);
    }
    uint64_t w = pattern_word(b->id, words);
    memcpy(b->ptr + 8 * words, &w, b->size % 8);
}

static int pattern_ok(const live_buf *b) {
    uint64_t words = b->size / 8;
    for (uint64_t i = 0; i < words; i++) {
        uint64_t w = pattern_word(b->id, i);
        if (memcmp(b->ptr + 8 * i, &w, 8) != 0) return 0;
    }
    uint64_t w = pattern_word(b->id, words);
    return memcmp(b->ptr + 8 * words, &w, b->size % 8) == 0;
}

typedef struct {
    uint64_t allocated, peak, total, failed;
    uint64_t min_overhead, max_overhead; /* headers + rounding; + at most one 64-byte sliver each */
} shadow_counters;

static uint64_t random_size(void) {
    uint64_t r = nrv_test_u64() % 10;
    uint64_t cap = r < 5 ? 1024 : r < 8 ? 16384 : 65536;
    return 1 + nrv_test_u64() % cap;
}

/* Compares the pool with the shadow; returns 1 if all agree (one EXPECT per op keeps
 * the passed count meaningful and a failure points at the op). */
static int stats_agree(const nrv_pool_stats *s, const shadow_counters *sh, uint64_t live, int op) {
    int ok = s->allocated == sh->allocated && s->live_buffers == live && s->peak == sh->peak &&
             s->total_allocs == sh->total && s->failed_allocs == sh->failed &&
             s->free + s->allocated + s->overhead == s->capacity && s->overhead >= sh->min_overhead &&
             s->overhead <= sh->max_overhead && (s->largest_free == 0 || s->largest_free + HDR <= s->free);
    if (!ok)
        fprintf(stderr,
                "op %d: allocated %" PRIu64 "/%" PRIu64 " live %" PRIu64 "/%" PRIu64 " peak %" PRIu64 "/%" PRIu64
                " total %" PRIu64 "/%" PRIu64 " failed %" PRIu64 "/%" PRIu64 " overhead %" PRIu64 " in [%" PRIu64
                ", %" PRIu64 "] free %" PRIu64 " largest %" PRIu64 "\n",
                op, s->allocated, sh->allocated, s->live_buffers, live, s->peak, sh->peak, s->total_allocs, sh->total,
                s->failed_allocs, sh->failed, s->overhead, sh->min_overhead, sh->max_overhead, s->free,
                s->largest_free);
    return ok;
}

/* Verifies and releases every reference of every live buffer, checks the arena is one
 * free block, resets the pool; returns 1 if the reset succeeded. */
static int drain_and_reset(nrv_pool_t *pool, live_buf *bufs, uint64_t *n, shadow_counters *sh,
                           uint64_t *mismatches, uint64_t *corrupt) {
    for (; *n > 0; --*n) {
        live_buf *b = &bufs[*n - 1];
        *corrupt += !pattern_ok(b);
        for (; b->refs > 0; b->refs--) *mismatches += nrv_buffer_release(b->ptr) != NRV_OK;
        sh->allocated -= b->size;
    }
    sh->min_overhead = sh->max_overhead = 0;
    nrv_pool_stats s = stats_of(pool);
    *mismatches += s.free != s.capacity || s.overhead != 0 || s.allocated != 0 || s.live_buffers != 0 ||
                   s.largest_free != s.capacity - HDR;
    nrv_status st = nrv_pool_reset(pool);
    *mismatches += st != NRV_OK;
    return st == NRV_OK;
}

static void test_stress(void) {
    group_begin();
    enum { OPS = 40000, MAX_LIVE = 4096 };
    const uint64_t capacity = 4u << 20;
    nrv_pool_t *pool = NULL;
    NRV_EXPECT_STATUS(nrv_pool_create(NRV_POOL_DYNAMIC, capacity, "stress", &pool), NRV_OK);
    static live_buf bufs[MAX_LIVE];
    uint64_t n = 0, next_id = 0, refused = 0, corrupt = 0, mismatches = 0, wrong_outcome = 0, resets = 0;
    uint64_t max_live = 0;
    shadow_counters sh = {0, 0, 0, 0, 0, 0};
    nrv_test_seed(20240607);
    for (int op = 0; op < OPS; op++) {
        nrv_pool_stats before = stats_of(pool);
        if (op % 10000 == 9999) { /* a fragmented pool drained completely is one block again */
            resets += drain_and_reset(pool, bufs, &n, &sh, &mismatches, &corrupt);
            continue;
        }
        /* alternate growing phases (which run into exhaustion) with shrinking ones (which
         * leave a fragmented, half-empty arena) */
        uint64_t r = nrv_test_u64() % 100;
        uint64_t alloc_pct = (op / 2500) % 2 == 0 ? 55 : 35;
        if (r < alloc_pct && n < MAX_LIVE) {
            uint64_t size = random_size();
            void *p = NULL;
            nrv_status st = nrv_pool_alloc(pool, size, &p);
            /* largest_free is exactly the largest request that succeeds */
            int should = size <= before.largest_free;
            if ((st == NRV_OK) != should || (st != NRV_OK && st != NRV_ERR_OUT_OF_MEMORY)) {
                wrong_outcome++;
                fprintf(stderr, "op %d: %" PRIu64 " bytes with largest_free %" PRIu64 ": %s\n", op, size,
                        before.largest_free, nrv_status_str(st));
            }
            if (st == NRV_OK) {
                live_buf b = {p, size, next_id++, 1};
                corrupt += !aligned64(p);
                pattern_fill(&b);
                bufs[n++] = b;
                sh.allocated += size;
                sh.total++;
                sh.min_overhead += HDR + round64(size) - size;
                sh.max_overhead += 2 * HDR + round64(size) - size;
                if (sh.allocated > sh.peak) sh.peak = sh.allocated;
            } else {
                sh.failed++;
                refused++;
                nrv_pool_stats after = stats_of(pool);
                mismatches += !same_but_failed(&before, &after);
            }
        } else if (r < 88 && n > 0) {
            uint64_t i = nrv_test_u64() % n;
            live_buf *b = &bufs[i];
            corrupt += !pattern_ok(b) || nrv_buffer_refcount(b->ptr) != b->refs || nrv_buffer_size(b->ptr) != b->size;
            mismatches += nrv_buffer_release(b->ptr) != NRV_OK;
            if (--b->refs == 0) {
                sh.allocated -= b->size;
                sh.min_overhead -= HDR + round64(b->size) - b->size;
                sh.max_overhead -= 2 * HDR + round64(b->size) - b->size;
                corrupt += nrv_buffer_refcount(b->ptr) != 0;
                *b = bufs[--n];
            }
        } else if (r < 96 && n > 0) {
            live_buf *b = &bufs[nrv_test_u64() % n];
            mismatches += nrv_buffer_retain(b->ptr) != NRV_OK;
            b->refs++;
        } else if (r < 98) {
            NRV_EXPECT_STATUS(nrv_pool_reset_peak(pool), NRV_OK);
            sh.peak = sh.allocated;
        } else {
            nrv_status st = nrv_pool_reset(pool);
            mismatches += st != (n ? NRV_ERR_STATE : NRV_OK);
            resets += st == NRV_OK;
        }
        if (n > max_live) max_live = n;
        nrv_pool_stats s = stats_of(pool);
        if (!stats_agree(&s, &sh, n, op)) mismatches++;
        if (n == 0) /* nothing live: everything must have coalesced into one block */
            mismatches += s.free != capacity || s.largest_free != capacity - HDR;
    }
    NRV_EXPECT(wrong_outcome == 0, "%" PRIu64 " allocations disagreed with largest_free", wrong_outcome);
    NRV_EXPECT(corrupt == 0, "%" PRIu64 " corrupted or misreported buffers", corrupt);
    NRV_EXPECT(mismatches == 0, "%" PRIu64 " counter mismatches", mismatches);
    NRV_EXPECT(refused > 0 && max_live > 100, "the run never reached exhaustion (refused %" PRIu64 ")", refused);
    resets += drain_and_reset(pool, bufs, &n, &sh, &mismatches, &corrupt);
    NRV_EXPECT(mismatches == 0 && corrupt == 0, "final drain: %" PRIu64 " mismatches, %" PRIu64 " corrupt",
               mismatches, corrupt);
    nrv_pool_stats s = stats_of(pool);
    NRV_EXPECT(s.free == capacity && s.overhead == 0 && s.allocated == 0 && s.largest_free == capacity - HDR,
               "drained: free %" PRIu64 " largest %" PRIu64, s.free, s.largest_free);
    printf("    %d ops: %" PRIu64 " allocations, %" PRIu64 " refused, up to %" PRIu64 " live, %" PRIu64 " resets\n", OPS,
           s.total_allocs, s.failed_allocs, max_live, resets);
    nrv_pool_free(pool);
    group_end("randomised stress");
}

int main(void) {
    printf("test_pool:\n");
    test_static();
    test_dynamic_basic();
    test_dynamic_reuse();
    test_dynamic_best_fit();
    test_dynamic_coalesce();
    test_exhaustion();
    test_refcount();
    test_borrower_outlives_owner();
    test_streaming();
    test_streaming_no_alloc();
    test_create_failure();
    test_invalid_args();
    test_names();
    test_alignment();
    test_stress();
    return nrv_test_summary("test_pool");
}
