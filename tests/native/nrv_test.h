/* nrv_test.h — tiny harness for nerve's native tests: checks that count failures
 * instead of aborting, a seeded RNG, and a tolerance comparison that reports where.
 * Each test file's main() returns nrv_test_summary(), which prints a closing
 * "N passed, N failed" line and exits non-zero on any failure. */
#ifndef NRV_TEST_H
#define NRV_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nerve.h"

static int nrv_test_passed = 0;
static int nrv_test_failed = 0;

#define NRV_EXPECT(cond, ...)                                                   \
    do {                                                                        \
        if (cond) {                                                             \
            nrv_test_passed++;                                                  \
        } else {                                                                \
            nrv_test_failed++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

/* Expects a status; on mismatch prints both names and nrv_last_error(). */
#define NRV_EXPECT_STATUS(expr, want)                                                   \
    do {                                                                                \
        nrv_status got_ = (expr);                                                       \
        NRV_EXPECT(got_ == (want), "got %s, want %s (%s)", nrv_status_str(got_),        \
                   nrv_status_str(want), nrv_last_error());                             \
    } while (0)

/* xorshift64*: reproducible across platforms (qemu and host give the same inputs). */
static uint64_t nrv_test_rng_state = 0x9E3779B97F4A7C15ull;
static inline void nrv_test_seed(uint64_t s) { nrv_test_rng_state = s ? s : 1; }
static inline uint64_t nrv_test_u64(void) {
    uint64_t x = nrv_test_rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    nrv_test_rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
/* Uniform in [lo, hi). */
static inline float nrv_test_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((nrv_test_u64() >> 40) * (1.0 / 16777216.0));
}
static inline void nrv_test_fill(float *p, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) p[i] = nrv_test_uniform(lo, hi);
}

/* max |got - want| / (atol + rtol * |want|) over n values; <= 1 passes. Writes the
 * worst index to *where. NaN in got or want where the other is not NaN fails. */
static inline double nrv_test_err(const float *got, const float *want, int64_t n, double rtol, double atol,
                                  int64_t *where) {
    double worst = 0.0;
    *where = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        double e;
        if (isnan(g) || isnan(w)) e = (isnan(g) && isnan(w)) ? 0.0 : INFINITY;
        else e = fabs(g - w) / (atol + rtol * fabs(w));
        if (e > worst || *where < 0) {
            if (e >= worst) { worst = e; *where = i; }
        }
    }
    return worst;
}

static inline int nrv_test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, nrv_test_passed, nrv_test_failed);
    return nrv_test_failed ? 1 : 0;
}

#endif /* NRV_TEST_H */
