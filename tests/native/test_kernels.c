/* test_kernels.c — every compiled kernel variant of every op against the scalar reference.
 *
 * Generic over the dispatch table: for each op (nrv_kernel_op_name) and each variant
 * compiled in (x86 AVX2/AVX-512 on x86_64, NEON under qemu on aarch64, ref everywhere),
 * the variant is forced with nrv_kernel_force, the PUBLIC entry point (nrv_embedding,
 * nrv_gemm, ...) is called on fresh seeded random inputs at awkward sizes, and the
 * result is compared with the reference kernel nrv_*_ref called directly.
 *
 * What every case checks:
 *  - the values, within a tolerance by dtype: embeddings bit-exact; fp32 reductions
 *    rtol 1e-5 plus an atol that grows with sqrt(K) x |operands| (a different summation
 *    order legitimately moves the last bits; a wrong or missing term is orders larger);
 *    transcendental activations rtol 1e-5 (see tol_* below for the few special cases);
 *  - a canary of GUARD floats before and after every output buffer is unchanged
 *    (write past the end / before the start), and for strided GEMM the padding between
 *    rows of C is unchanged;
 *  - inputs are allocated to their exact size, so an ASan build catches reads past them;
 *  - in-place calls (y == x) where the API allows them; misaligned pointers.
 * One line per (op, variant): "kernel linear variant=avx512 cases=84 max_err=0.31 OK",
 * max_err being the worst case's error as a fraction of its tolerance (<= 1 passes).
 *
 * Then the public error paths (bad ids, dtypes, NULLs, negative and overflowing sizes)
 * and the NERVE_DISABLE semantics through nrv_kernel_disable.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nrv_test.h"

/* ------------------------------------------------------------------ buffers */

#define GUARD 32                           /* canary floats on each side of an output */
static const uint32_t CANARY = 0x7fbadbadu; /* a signalling-NaN bit pattern no kernel writes */

/* Input: exactly n floats (ASan sees a read past the end), start optionally misaligned
 * by `mis` floats from a 64-byte boundary. */
typedef struct buf {
    void *base;
    float *p;
    int64_t n;
    int guarded;
} buf;

static void *xalloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0 || !p) {
        fprintf(stderr, "test_kernels: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

static buf buf_in(int64_t n, int mis) {
    buf b;
    b.base = xalloc((size_t)(n + mis) * sizeof(float));
    b.p = (float *)b.base + mis;
    b.n = n;
    b.guarded = 0;
    return b;
}

/* Output: n floats with GUARD canary floats before and after. */
static buf buf_out(int64_t n, int mis) {
    buf b;
    const int64_t total = n + mis + 2 * GUARD;
    b.base = xalloc((size_t)total * sizeof(float));
    uint32_t *u = b.base;
    for (int64_t i = 0; i < total; i++) u[i] = CANARY;
    b.p = (float *)b.base + GUARD + mis;
    b.n = n;
    b.guarded = 1;
    return b;
}

static int guards_intact(const buf *b) {
    const uint32_t *u = b->base;
    const int64_t start = (int64_t)(b->p - (float *)b->base);
    for (int64_t i = 0; i < start; i++)
        if (u[i] != CANARY) return 0;
    for (int64_t i = start + b->n; i < start + b->n + GUARD; i++)
        if (u[i] != CANARY) return 0;
    return 1;
}

static void buf_free(buf *b) {
    free(b->base);
    b->base = NULL;
    b->p = NULL;
}

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float max_abs(const float *p, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(p[i]) > m) m = fabsf(p[i]);
    return m;
}

/* ------------------------------------------------------------------ per (op, variant) tally */

static struct {
    const char *op;
    const char *variant;
    int cases;
    int bad;
    double max_err;
} cur;

/* Records one case: err is the worst error as a fraction of the tolerance (INFINITY for a
 * broken canary or a mismatch that no tolerance covers). */
#if defined(__GNUC__)
static void record(double err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif

static int verbose = -1; /* NRV_TEST_VERBOSE=1: print every case's error */

static void record(double err, const char *fmt, ...) {
    if (verbose < 0) verbose = getenv("NRV_TEST_VERBOSE") != NULL;
    cur.cases++;
    if (err > cur.max_err || isnan(err)) cur.max_err = isnan(err) ? INFINITY : err;
    if (verbose) {
        va_list ap;
        va_start(ap, fmt);
        printf("  case %s/%s err %.3f: ", cur.op, cur.variant, err);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
    if (!(err <= 1.0)) {
        cur.bad++;
        if (cur.bad <= 6) {
            va_list ap;
            va_start(ap, fmt);
            fprintf(stderr, "FAIL kernel %s variant=%s: ", cur.op, cur.variant);
            vfprintf(stderr, fmt, ap);
            fprintf(stderr, " (err %.3g of tolerance)\n", err);
            va_end(ap);
        }
    }
}

/* Worst |got - want| / (atol_i + rtol |want|) over n values, atol_i = atol + atol_x |x_i|
 * (x may be NULL). A NaN must meet a NaN, an infinity the same infinity: anything else
 * there is an infinite error. */
static double compare(const float *got, const float *want, int64_t n, double rtol, double atol,
                      const float *x, double atol_x, int64_t *where) {
    double worst = 0.0;
    *where = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        double e;
        if (isnan(g) || isnan(w)) {
            e = (isnan(g) && isnan(w)) ? 0.0 : INFINITY;
        } else if (isinf(g) || isinf(w)) {
            e = (g == w) ? 0.0 : INFINITY;
        } else {
            const double tol = atol + (x ? atol_x * fabs((double)x[i]) : 0.0) + rtol * fabs(w);
            e = fabs(g - w) / tol;
        }
        if (e > worst) {
            worst = e;
            *where = i;
        }
    }
    return worst;
}

/* ------------------------------------------------------------------ embedding */

/* The f16 reference keeps a signalling NaN's payload bit-for-bit; hardware conversions
 * (F16C vcvtph2ps, NEON fcvtl) quiet it. Both are NaN of the same sign and payload, so a
 * NaN matches a NaN whose bits differ at most in the quiet bit; everything else is
 * compared bit for bit. */
static int64_t embedding_mismatch(const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t g = f2u(got[i]), w = f2u(want[i]);
        if (g == w) continue;
        if (isnan(want[i]) && isnan(got[i]) && ((g ^ w) & ~0x00400000u) == 0) continue;
        return i;
    }
    return -1;
}

static void test_embedding(nrv_dtype tdt) {
    static const int64_t dims[] = {1, 3, 13, 16, 97, 127, 257, 1025, 4096};
    static const int64_t nids[] = {1, 2, 3, 5, 8, 13, 17, 64, 300};
    const size_t esz = nrv_dtype_size(tdt);
    const nrv_embedding_fn ref = tdt == NRV_F32   ? nrv_embedding_f32_ref
                                 : tdt == NRV_F16 ? nrv_embedding_f16_ref
                                                  : nrv_embedding_q8_ref;
    int c = 0;
    const int n_dims = (int)(sizeof dims / sizeof dims[0]);
    const int n_nids = (int)(sizeof nids / sizeof nids[0]);
    /* The last extra case is large (32 MiB of output) so variants that switch to
     * streaming (non-temporal) stores above some size are exercised too. */
    for (int ci = 0; ci <= n_dims * n_nids; ci++, c++) {
        const int big = ci == n_dims * n_nids;
        const int64_t dim = big ? 1024 : dims[ci / n_nids];
        const int64_t n_ids = big ? 8192 : nids[ci % n_nids];
        const int64_t rows = big ? 2048 : (c % 3 == 0 ? 1 : c % 3 == 1 ? 7 : 600);
        const int ids64 = c & 1;
        const int mis = (c % 5 == 2) ? 1 : 0;

        /* Table with random bit patterns (f32/f16: NaNs, infinities and subnormals too). */
        const size_t tbytes = (size_t)(rows * dim) * esz;
        uint8_t *table = xalloc(tbytes);
        for (size_t i = 0; i < tbytes; i += 8) {
            const uint64_t r = nrv_test_u64();
            memcpy(table + i, &r, tbytes - i < 8 ? tbytes - i : 8);
        }
        float *scales = NULL;
        if (tdt == NRV_I8) {
            scales = xalloc((size_t)rows * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                scales[r] = nrv_test_uniform(-2.0f, 2.0f);
                if (r % 11 == 3) scales[r] = 0.0f;
                if (r % 13 == 5) scales[r] = 1e-40f; /* subnormal scale: products stay exact */
            }
        }
        void *ids = xalloc((size_t)n_ids * (ids64 ? 8 : 4));
        for (int64_t i = 0; i < n_ids; i++) {
            int64_t id = (int64_t)(nrv_test_u64() % (uint64_t)rows);
            if (i == 0) id = rows - 1;
            if (i == 1) id = 0;
            if (ids64) ((int64_t *)ids)[i] = id;
            else ((int32_t *)ids)[i] = (int32_t)id;
        }
        buf got = buf_out(n_ids * dim, mis);
        float *want = xalloc((size_t)(n_ids * dim) * sizeof(float));
        ref(table, scales, dim, ids, ids64, n_ids, want);
        const nrv_status s =
            nrv_embedding(table, tdt, rows, dim, scales, ids, ids64 ? NRV_I64 : NRV_I32, n_ids, got.p);
        double err = 0.0;
        int64_t bad_at = -1;
        if (s != NRV_OK) err = INFINITY;
        else if ((bad_at = embedding_mismatch(got.p, want, n_ids * dim)) >= 0) err = INFINITY;
        else if (!guards_intact(&got)) err = INFINITY;
        record(err, "rows=%lld dim=%lld n_ids=%lld ids%s mis=%d status=%s mismatch at %lld (got %08x want %08x)%s",
               (long long)rows, (long long)dim, (long long)n_ids, ids64 ? "64" : "32", mis, nrv_status_str(s),
               (long long)bad_at, bad_at >= 0 ? f2u(got.p[bad_at]) : 0u, bad_at >= 0 ? f2u(want[bad_at]) : 0u,
               guards_intact(&got) ? "" : " canary overwritten");
        buf_free(&got);
        free(want);
        free(ids);
        free(scales);
        free(table);
    }
}

/* ------------------------------------------------------------------ layernorm */

/* Layernorm tolerance: rtol 1e-5 plus atol 2e-6·sqrt(dim)·max|gamma|·(1 + |offset|/std)
 * (the mean's rounding error grows with sqrt(dim)·|x|, and an offset mean costs the
 * (x - mean) difference bits), plus rtol·max|beta|. */
static void test_layernorm(void) {
    static const int64_t dims[] = {1, 3, 13, 97, 127, 257, 384, 768, 1025};
    static const int64_t rowsv[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 64};
    int c = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        for (size_t ri = 0; ri < sizeof rowsv / sizeof rowsv[0]; ri++, c++) {
            const int64_t dim = dims[di], rows = rowsv[ri], n = rows * dim;
            const float offset = (c % 4 == 1) ? 10.0f : 0.0f;
            const int with_beta = c % 3 != 2;
            const float eps = (c % 5 == 4 && dim > 1) ? 0.0f : (c % 2 ? 1e-5f : 1e-3f);
            const int inplace = c % 4 == 3;
            const int mis = c % 7 == 6;
            buf x = buf_in(n, mis), g = buf_in(dim, 0), bt = buf_in(dim, 0);
            nrv_test_fill(x.p, n, -2.0f + offset, 2.0f + offset);
            nrv_test_fill(g.p, dim, -2.0f, 2.0f);
            nrv_test_fill(bt.p, dim, -1.0f, 1.0f);
            float *want = xalloc((size_t)n * sizeof(float));
            nrv_layernorm_ref(x.p, rows, dim, g.p, with_beta ? bt.p : NULL, eps, want);
            buf y = buf_out(n, mis);
            nrv_status s;
            if (inplace) {
                memcpy(y.p, x.p, (size_t)n * sizeof(float));
                s = nrv_layernorm(y.p, rows, dim, g.p, with_beta ? bt.p : NULL, eps, y.p);
            } else {
                s = nrv_layernorm(x.p, rows, dim, g.p, with_beta ? bt.p : NULL, eps, y.p);
            }
            /* per row: the row's own mean and std set how many bits (x - mean) keeps */
            double err = s != NRV_OK ? INFINITY : 0.0;
            int64_t at = 0;
            for (int64_t r = 0; r < rows && s == NRV_OK; r++) {
                const float *xr = x.p + r * dim;
                double mu = 0.0, var = 0.0;
                for (int64_t j = 0; j < dim; j++) mu += xr[j];
                mu /= (double)dim;
                for (int64_t j = 0; j < dim; j++) var += (xr[j] - mu) * (xr[j] - mu);
                const double sd = sqrt(var / (double)dim + eps);
                const double atol = 2e-6 * sqrt((double)dim) * max_abs(g.p, dim) * (1.0 + fabs(mu) / (sd > 1e-30 ? sd : 1e-30)) +
                                    1e-5 * (with_beta ? max_abs(bt.p, dim) : 0.0);
                int64_t at_r;
                const double e = compare(y.p + r * dim, want + r * dim, dim, 1e-5, atol, NULL, 0.0, &at_r);
                if (e > err || isnan(e)) {
                    err = e;
                    at = r * dim + at_r;
                }
            }
            if (!guards_intact(&y)) err = INFINITY;
            record(err, "rows=%lld dim=%lld offset=%g beta=%d eps=%g inplace=%d status=%s at %lld: got %.9g want %.9g",
                   (long long)rows, (long long)dim, (double)offset, with_beta, (double)eps, inplace,
                   nrv_status_str(s), (long long)at, (double)y.p[at], (double)want[at]);
            free(want);
            buf_free(&y);
            buf_free(&x);
            buf_free(&g);
            buf_free(&bt);
        }
    }
}

/* ------------------------------------------------------------------ linear, layernorm_linear */

/* A dot product of K terms summed in another order: rtol 1e-5 plus
 * atol 8e-6·sqrt(K)·max|x|·max|w|. (The sequential reference's own rounding error has a
 * spread of about u·K·rms(x·w)/sqrt(6); at K = 1025 that is under a tenth of this atol,
 * while a wrong or missing term costs about max|x|·max|w|/3, thousands of times it.) */
static double dot_atol(int64_t k, double xmax, double wmax) { return 8e-6 * sqrt((double)k) * xmax * wmax; }

typedef struct lin_case {
    int64_t rows, in, out;
} lin_case;

static int lin_cases(lin_case *cs, int cap) {
    static const int64_t rowsv[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17};
    static const int64_t io[][2] = {{1, 1},     {3, 13},    {13, 3},    {97, 127},  {127, 97},
                                    {257, 13},  {1025, 3},  {3, 1025},  {384, 257}, {1025, 127}};
    static const lin_case large[] = {{32, 127, 97}, {33, 257, 129}, {64, 384, 1536}, {100, 257, 129},
                                     {257, 127, 97}, {37, 1025, 65}, {129, 64, 300}};
    /* Between the few-rows and GEMM paths (the x86 mid-rows kernel): rows on both sides of
     * whole vectors and tiles, outputs that are not whole tiles, depths cut into chunks. */
    static const int64_t mid_rows[] = {5, 8, 11, 16, 20, 24, 31, 33, 40, 47, 48, 57, 64};
    static const int64_t mid_io[][2] = {{128, 128}, {129, 129}, {387, 512}, {512, 387},
                                        {1025, 70}, {200, 25},  {1025, 13}, {3, 1}};
    int n = 0;
    for (size_t r = 0; r < sizeof rowsv / sizeof rowsv[0]; r++)
        for (size_t i = 0; i < sizeof io / sizeof io[0]; i++)
            if (n < cap) cs[n++] = (lin_case){rowsv[r], io[i][0], io[i][1]};
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++)
        if (n < cap) cs[n++] = large[i];
    for (size_t r = 0; r < sizeof mid_rows / sizeof mid_rows[0]; r++)
        for (size_t i = 0; i < sizeof mid_io / sizeof mid_io[0]; i++)
            if (n < cap) cs[n++] = (lin_case){mid_rows[r], mid_io[i][0], mid_io[i][1]};
    return n;
}

static void test_linear(int fused) {
    lin_case cs[256];
    const int ncase = lin_cases(cs, 256);
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, in = cs[c].in, out = cs[c].out;
        const int with_b = c % 3 != 1;
        const int with_beta = c % 4 != 2;
        const float offset = (fused && c % 5 == 3) ? 5.0f : 0.0f;
        const float eps = c % 2 ? 1e-5f : 1e-2f;
        const int mis = c % 6 == 5;
        buf x = buf_in(rows * in, mis), w = buf_in(out * in, mis), b = buf_in(out, 0);
        buf g = buf_in(in, 0), bt = buf_in(in, 0);
        nrv_test_fill(x.p, rows * in, -1.0f + offset, 1.0f + offset);
        nrv_test_fill(w.p, out * in, -1.0f, 1.0f);
        nrv_test_fill(b.p, out, -1.0f, 1.0f);
        nrv_test_fill(g.p, in, 0.5f, 1.5f);
        nrv_test_fill(bt.p, in, -0.5f, 0.5f);
        float *want = xalloc((size_t)(rows * out) * sizeof(float));
        buf y = buf_out(rows * out, mis);
        nrv_status s;
        double atol;
        if (fused) {
            nrv_layernorm_linear_ref(x.p, rows, in, g.p, with_beta ? bt.p : NULL, eps, w.p, with_b ? b.p : NULL,
                                     out, want);
            s = nrv_layernorm_linear(x.p, rows, in, g.p, with_beta ? bt.p : NULL, eps, w.p, with_b ? b.p : NULL,
                                     out, y.p);
            /* normalised values are at most sqrt(3)·max|gamma| + max|beta| for uniform x;
             * an offset mean costs bits in (x - mean). */
            const double zmax = 1.75 * max_abs(g.p, in) + (with_beta ? max_abs(bt.p, in) : 0.0);
            atol = dot_atol(in, zmax, max_abs(w.p, out * in)) * (1.0 + offset);
        } else {
            nrv_linear_ref(x.p, rows, in, w.p, with_b ? b.p : NULL, out, want);
            s = nrv_linear(x.p, rows, in, w.p, with_b ? b.p : NULL, out, y.p);
            atol = dot_atol(in, max_abs(x.p, rows * in), max_abs(w.p, out * in));
        }
        int64_t at = 0;
        double err = s != NRV_OK ? INFINITY : compare(y.p, want, rows * out, 1e-5, atol, NULL, 0.0, &at);
        if (!guards_intact(&y)) err = INFINITY;
        record(err, "rows=%lld in=%lld out=%lld b=%d beta=%d status=%s at %lld: got %.9g want %.9g%s",
               (long long)rows, (long long)in, (long long)out, with_b, with_beta, nrv_status_str(s),
               (long long)at, (double)y.p[at], (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
        free(want);
        buf_free(&y);
        buf_free(&x);
        buf_free(&w);
        buf_free(&b);
        buf_free(&g);
        buf_free(&bt);
    }
}

/* ------------------------------------------------------------------ linear_w8 */

/* The int8-weight linear (no public entry point: the plan op is its caller) through the
 * dispatch table against nrv_linear_w8_ref, per-tensor and per-output s / z, z absent,
 * with and without bias; the tolerance grows with sqrt(in) x the magnitude of the terms
 * summed. tests/native/test_linear_w8.c has the double-precision sweep and the plan op. */
static void test_linear_w8(void) {
    lin_case cs[256];
    const int ncase = lin_cases(cs, 256);
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, in = cs[c].in, out = cs[c].out;
        const int per_row = c % 2, with_z = c % 5 != 3, with_b = c % 3 != 1, mis = c % 6 == 5;
        const int64_t ns = per_row ? out : 1;
        buf x = buf_in(rows * in, mis), s = buf_in(ns, 0), z = buf_in(ns, 0), b = buf_in(out, 0);
        int8_t *q = xalloc((size_t)(out * in));
        nrv_test_fill(x.p, rows * in, -1.0f, 1.0f);
        for (int64_t i = 0; i < out * in; i++) q[i] = (int8_t)((int)(nrv_test_u64() % 256u) - 128);
        nrv_test_fill(s.p, ns, 0.001f, 0.02f);
        nrv_test_fill(z.p, ns, -0.5f, 0.5f);
        nrv_test_fill(b.p, out, -1.0f, 1.0f);
        float *want = xalloc((size_t)(rows * out) * sizeof(float));
        buf y = buf_out(rows * out, mis);
        const float *zp = with_z ? z.p : NULL, *bp = with_b ? b.p : NULL;
        nrv_linear_w8_ref(x.p, rows, in, q, s.p, zp, per_row, bp, out, want);
        nrv_kernel_get(NRV_OP_LINEAR_W8).linear_w8(x.p, rows, in, q, s.p, zp, per_row, bp, out, y.p);
        const double atol = dot_atol(in, 1.0, 128.0 * max_abs(s.p, ns) + (with_z ? max_abs(z.p, ns) : 0.0));
        int64_t at = 0;
        double err = compare(y.p, want, rows * out, 1e-5, atol, NULL, 0.0, &at);
        if (!guards_intact(&y)) err = INFINITY;
        record(err, "rows=%lld in=%lld out=%lld per_row=%d z=%d b=%d at %lld: got %.9g want %.9g%s", (long long)rows,
               (long long)in, (long long)out, per_row, with_z, with_b, (long long)at, (double)y.p[at],
               (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
        free(want);
        free(q);
        buf_free(&y);
        buf_free(&x);
        buf_free(&s);
        buf_free(&z);
        buf_free(&b);
    }
}

/* ------------------------------------------------------------------ linear_f16 */

/* Half weights: uniform in [-1, 1) rounded to fp16, every 13th a subnormal half (random
 * mantissa, either sign: the widening must be exact there too). */
static void fill_half(uint16_t *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        w[i] = nrv_float_to_half(nrv_test_uniform(-1.0f, 1.0f));
        if (i % 13 == 5) w[i] = (uint16_t)((nrv_test_u64() & 0x83ffu) | 1u);
    }
}

/* The fp16-weight linear (no public entry point: the plan op is its caller) through the
 * dispatch table against nrv_linear_f16_ref, with and without bias, misaligned x and y;
 * tolerance as for linear (the widened weights are exact, only the summation order differs).
 * tests/native/test_linear_f16.c has the double-precision sweep and the plan op. */
static void test_linear_f16(void) {
    lin_case cs[256];
    const int ncase = lin_cases(cs, 256);
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, in = cs[c].in, out = cs[c].out;
        const int with_b = c % 3 != 1, mis = c % 6 == 5;
        buf x = buf_in(rows * in, mis), b = buf_in(out, 0);
        uint16_t *w = xalloc((size_t)(out * in) * sizeof(uint16_t));
        nrv_test_fill(x.p, rows * in, -1.0f, 1.0f);
        fill_half(w, out * in);
        nrv_test_fill(b.p, out, -1.0f, 1.0f);
        float *want = xalloc((size_t)(rows * out) * sizeof(float));
        buf y = buf_out(rows * out, mis);
        const float *bp = with_b ? b.p : NULL;
        nrv_linear_f16_ref(x.p, rows, in, w, bp, out, want, out);
        nrv_kernel_get(NRV_OP_LINEAR_F16).linear_f16(x.p, rows, in, w, bp, out, y.p, out);
        const double atol = dot_atol(in, max_abs(x.p, rows * in), 1.0);
        int64_t at = 0;
        double err = compare(y.p, want, rows * out, 1e-5, atol, NULL, 0.0, &at);
        if (!guards_intact(&y)) err = INFINITY;
        record(err, "rows=%lld in=%lld out=%lld b=%d at %lld: got %.9g want %.9g%s", (long long)rows, (long long)in,
               (long long)out, with_b, (long long)at, (double)y.p[at], (double)want[at],
               guards_intact(&y) ? "" : " canary overwritten");
        free(want);
        free(w);
        buf_free(&y);
        buf_free(&x);
        buf_free(&b);
    }
}

/* ------------------------------------------------------------------ gemm */

static void test_gemm(void) {
    int64_t tri[64][3];
    int nt = 0;
    static const int64_t small[] = {1, 3, 13};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int l = 0; l < 3; l++) {
                tri[nt][0] = small[i];
                tri[nt][1] = small[j];
                tri[nt][2] = small[l];
                nt++;
            }
    static const int64_t larger[][3] = {{97, 127, 257}, {127, 97, 13}, {257, 13, 97}, {16, 64, 1025},
                                        {1, 1025, 257}, {1025, 1, 33}, {64, 64, 64},   {129, 65, 300},
                                        {200, 300, 129}, {17, 33, 520}, {5, 7, 0},     {33, 17, 0},
                                        /* shallow: several wide column panels, a ragged last one */
                                        {13, 1100, 16},  {7, 700, 41}};
    for (size_t i = 0; i < sizeof larger / sizeof larger[0]; i++) {
        tri[nt][0] = larger[i][0];
        tri[nt][1] = larger[i][1];
        tri[nt][2] = larger[i][2];
        nt++;
    }
    /* (alpha, beta) pairs; beta == 0 runs on a NaN-filled C, which must not leak. */
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.25f}, {-2.0f, 0.0f}, {1.5f, -1.0f},
                                  {0.0f, 0.5f}, {0.0f, 0.0f}};
    int c = 0;
    for (int t = 0; t < nt; t++) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++, c++) {
                const int64_t m = tri[t][0], n = tri[t][1], k = tri[t][2];
                const float alpha = ab[c % 7][0], beta = ab[c % 7][1];
                /* Strided in one of three cases; the stored matrices end exactly after their
                 * last row's last used element, so ASan sees any read past them. */
                const int64_t pad = (c % 3 == 1) ? 3 : (c % 3 == 2 ? 17 : 0);
                const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
                const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
                const int64_t lda = a_cols + pad, ldb = b_cols + (pad ? pad + 1 : 0), ldc = n + pad;
                const int64_t a_len = k ? (a_rows - 1) * lda + a_cols : 0;
                const int64_t b_len = k ? (b_rows - 1) * ldb + b_cols : 0;
                const int64_t c_len = (m - 1) * ldc + n;
                buf A = buf_in(a_len, 0), B = buf_in(b_len, (int)(c % 2));
                nrv_test_fill(A.p, a_len, -1.0f, 1.0f);
                nrv_test_fill(B.p, b_len, -1.0f, 1.0f);
                buf C = buf_out(c_len, (int)(c % 5 == 1));
                float *want = xalloc((size_t)c_len * sizeof(float));
                for (int64_t i = 0; i < c_len; i++) C.p[i] = u2f(CANARY); /* padding between rows */
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++)
                        C.p[i * ldc + j] = beta == 0.0f ? NAN : nrv_test_uniform(-1.0f, 1.0f);
                memcpy(want, C.p, (size_t)c_len * sizeof(float));
                const float cmax = beta == 0.0f ? 0.0f : 1.0f;
                nrv_gemm_ref(ta, tb, m, n, k, alpha, k ? A.p : NULL, lda, k ? B.p : NULL, ldb, beta, want, ldc);
                const nrv_status s =
                    nrv_gemm(ta, tb, m, n, k, alpha, k ? A.p : NULL, lda, k ? B.p : NULL, ldb, beta, C.p, ldc);
                const double atol = dot_atol(k ? k : 1, fabs(alpha), 1.0) + 2e-7 * fabs(beta) * cmax;
                double err = s == NRV_OK ? 0.0 : INFINITY;
                int64_t worst_i = 0, worst_j = 0;
                int pad_broken = 0;
                for (int64_t i = 0; i < m && s == NRV_OK; i++) {
                    int64_t at = 0;
                    const double e = compare(C.p + i * ldc, want + i * ldc, n, 1e-5, atol, NULL, 0.0, &at);
                    if (e > err || isnan(e)) {
                        err = e;
                        worst_i = i;
                        worst_j = at;
                    }
                    if (i + 1 < m)
                        for (int64_t j = n; j < ldc; j++)
                            if (f2u(C.p[i * ldc + j]) != CANARY) pad_broken = 1;
                }
                if (pad_broken || !guards_intact(&C)) err = INFINITY;
                record(err,
                       "m=%lld n=%lld k=%lld ta=%d tb=%d alpha=%g beta=%g lda=%lld ldb=%lld ldc=%lld status=%s "
                       "at [%lld,%lld]: got %.9g want %.9g%s",
                       (long long)m, (long long)n, (long long)k, ta, tb, (double)alpha, (double)beta,
                       (long long)lda, (long long)ldb, (long long)ldc, nrv_status_str(s), (long long)worst_i,
                       (long long)worst_j, (double)C.p[worst_i * ldc + worst_j],
                       (double)want[worst_i * ldc + worst_j],
                       pad_broken ? " padding between rows of C written" : (guards_intact(&C) ? "" : " canary"));
                free(want);
                buf_free(&A);
                buf_free(&B);
                buf_free(&C);
            }
        }
    }
}

/* The selected variant's implicit GEMM (B's rows at offsets into one buffer: a conv over
 * its padded plane) against a double reference: awkward m, n (whole and partial register
 * tiles of every variant) and k (one and several depth blocks), rows of B overlapping at
 * random offsets, the last one ending exactly at the buffer's end (ASan sees a read past
 * it), C with padding canaries between rows. */
static void test_gemm_implicit(void) {
    static const int64_t cases[][3] = {{1, 1, 1},    {3, 13, 9},    {13, 64, 27},  {6, 65, 144},  {97, 127, 257},
                                       {16, 100, 576}, {64, 200, 129}, {5, 17, 1},   {7, 1025, 33}, {33, 48, 0}};
    const nrv_gemm_implicit_fn gemm = nrv_kernel_get_implicit(NRV_OP_GEMM).gemm_implicit;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t m = cases[t][0], n = cases[t][1], k = cases[t][2];
        const int64_t lda = k + (int64_t)(t % 3), ldc = n + (int64_t)(t % 2) * 5;
        const int64_t span = n + 3 * n / 2 + 7; /* rows start anywhere in [0, span - n] */
        buf A = buf_in(m * lda, 0), B = buf_in(span, (int)(t % 2));
        int64_t *off = xalloc((size_t)(k ? k : 1) * sizeof(int64_t));
        nrv_test_fill(A.p, m * lda, -1.0f, 1.0f);
        nrv_test_fill(B.p, span, -1.0f, 1.0f);
        for (int64_t p = 0; p < k; p++) off[p] = (int64_t)(nrv_test_uniform(0.0f, 1.0f) * (float)(span - n));
        if (k) off[k / 2] = span - n;
        const int64_t c_len = (m - 1) * ldc + n;
        buf C = buf_out(c_len, 0);
        for (int64_t i = 0; i < c_len; i++) C.p[i] = NAN; /* write-only: NaN must not leak */
        for (int64_t i = 0; i + 1 < m; i++)
            for (int64_t j = n; j < ldc; j++) C.p[i * ldc + j] = u2f(CANARY);
        gemm(m, n, k, A.p, lda, B.p, off, C.p, ldc);
        double err = 0.0;
        int64_t wi = 0, wj = 0;
        int pad_broken = 0;
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                double want = 0.0;
                for (int64_t p = 0; p < k; p++) want += (double)A.p[i * lda + p] * (double)B.p[off[p] + j];
                const double tol = dot_atol(k ? k : 1, 1.0, 1.0) + 1e-5 * fabs(want);
                const double e = fabs((double)C.p[i * ldc + j] - want) / tol;
                if (!(e <= err)) err = isnan(e) ? INFINITY : e, wi = i, wj = j;
            }
            if (i + 1 < m)
                for (int64_t j = n; j < ldc; j++)
                    if (f2u(C.p[i * ldc + j]) != CANARY) pad_broken = 1;
        }
        if (pad_broken || !guards_intact(&C)) err = INFINITY;
        record(err, "implicit m=%lld n=%lld k=%lld lda=%lld ldc=%lld at [%lld,%lld]%s", (long long)m, (long long)n,
               (long long)k, (long long)lda, (long long)ldc, (long long)wi, (long long)wj,
               pad_broken ? " padding between rows of C written" : (guards_intact(&C) ? "" : " canary"));
        free(off);
        buf_free(&A);
        buf_free(&B);
        buf_free(&C);
    }
}

/* The selected variant's panel GEMM (a conv with its weight in panels, kernels.h) against
 * a double reference: W packed by nrv_panels_pack (the one packer), m across whole and
 * partial panels (1, 3, 13, 64, 97, 127, 257), k across depth blocks, positions in rows
 * of ow out of pw (junk columns never read into y), starting mid-row (q0), y with padding
 * canaries between its rows, and the same outputs bit for bit when the positions are
 * split in two calls (the thread split). */
static void test_gemm_panels(void) {
    static const int64_t cases[][4] = {/* m, k, np, ow */ {1, 1, 1, 1},     {3, 9, 13, 5},    {13, 27, 100, 7},
                                       {64, 144, 49, 7},  {97, 257, 130, 11}, {127, 129, 6, 3}, {257, 576, 241, 56},
                                       {16, 0, 5, 4},     {65, 33, 1025, 40}};
    const nrv_gemm_panels_fn panels = nrv_kernel_get_panels(NRV_OP_GEMM).gemm_panels;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t m = cases[t][0], k = cases[t][1], np = cases[t][2], ow = cases[t][3];
        const int64_t pw = ow + 2 + (int64_t)(t % 3), q0 = (int64_t)(t % 4), ldy = np + (int64_t)(t % 2) * 3;
        const int64_t rows = (q0 + np + ow - 1) / ow, span = rows * pw + 3 * pw;
        buf W = buf_in(m * k, 0), X = buf_in(span, (int)(t % 2)), B = buf_in(m, 0);
        int64_t *off = xalloc((size_t)(k ? k : 1) * sizeof(int64_t));
        nrv_test_fill(W.p, m * k, -1.0f, 1.0f);
        nrv_test_fill(X.p, span, -1.0f, 1.0f);
        nrv_test_fill(B.p, m, -1.0f, 1.0f);
        for (int64_t p = 0; p < k; p++) off[p] = (int64_t)(nrv_test_uniform(0.0f, 1.0f) * (float)(3 * pw - 1));
        const int64_t qlast = q0 + np - 1;
        if (k) off[k / 2] = span - 1 - (qlast / ow * pw + qlast % ow); /* the last position reads the last float */
        const int64_t pf = nrv_panels_floats(m, k);
        float *wp = NULL;
        if (posix_memalign((void **)&wp, 64, (size_t)(pf ? pf : 1) * sizeof(float)) != 0) abort();
        nrv_panels_pack(W.p, m, k, wp);
        const int64_t y_len = (m - 1) * ldy + np;
        buf Y = buf_out(y_len, 0), Y2 = buf_out(y_len, 0);
        for (int64_t i = 0; i < y_len; i++) Y.p[i] = Y2.p[i] = u2f(CANARY);
        const float *bias = t % 3 == 1 ? NULL : B.p;
        /* the stored values' activation: none, ReLU, Clip, LeakyRelu in turn (NaN among x below) */
        const nrv_panels_act acts[3] = {
            {NRV_PANELS_RELU, 0.0f, 0.0f}, {NRV_PANELS_CLIP, -0.37f, 0.41f}, {NRV_PANELS_LEAKY, 0.2f, 0.0f}};
        const nrv_panels_act *act = t % 4 == 0 ? NULL : &acts[t % 4 - 1];
        if (t == 3 || t == 5 || t == 6) /* NaN at the first position's first tap */
            X.p[off[0] + (q0 / ow) * pw + q0 % ow] = NAN;
        panels(np, m, k, X.p, q0, ow, pw, off, wp, bias, Y.p, ldy, act, (int)(t % 2));
        const int64_t half = np / 2; /* the same positions in two calls */
        panels(half, m, k, X.p, q0, ow, pw, off, wp, bias, Y2.p, ldy, act, (int)(t % 2));
        panels(np - half, m, k, X.p, q0 + half, ow, pw, off, wp, bias, Y2.p + half, ldy, act, (int)(t % 2));
        double err = 0.0;
        int64_t wi = 0, wj = 0;
        int pad_broken = 0, split_differs = 0;
        for (int64_t j = 0; j < m; j++) {
            for (int64_t i = 0; i < np; i++) {
                const int64_t q = q0 + i;
                const float *base = X.p + q / ow * pw + q % ow;
                double want = bias ? (double)bias[j] : 0.0;
                for (int64_t p = 0; p < k; p++) want += (double)W.p[j * k + p] * (double)base[off[p]];
                if (act && act->kind == NRV_PANELS_RELU) want = want > 0.0 ? want : 0.0; /* NaN: 0 */
                else if (act && act->kind == NRV_PANELS_LEAKY) want = want < 0.0 ? want * 0.2 : want; /* NaN kept */
                else if (act) want = want < act->lo ? act->lo : (want > act->hi ? act->hi : want); /* NaN kept */
                const double tol = dot_atol(k ? k : 1, 1.0, 1.0) + 1e-5 * fabs(want);
                const double got = Y.p[j * ldy + i];
                const double e = isnan(want) || isnan(got) ? (isnan(want) && isnan(got) ? 0.0 : INFINITY)
                                                           : fabs(got - want) / tol;
                if (!(e <= err)) err = isnan(e) ? INFINITY : e, wi = j, wj = i;
                if (f2u(Y.p[j * ldy + i]) != f2u(Y2.p[j * ldy + i])) split_differs = 1;
            }
            if (j + 1 < m)
                for (int64_t i = np; i < ldy; i++)
                    if (f2u(Y.p[j * ldy + i]) != CANARY) pad_broken = 1;
        }
        if (pad_broken || split_differs || !guards_intact(&Y) || !guards_intact(&Y2)) err = INFINITY;
        record(err, "panels m=%lld k=%lld np=%lld ow=%lld pw=%lld q0=%lld at [%lld,%lld]%s%s", (long long)m,
               (long long)k, (long long)np, (long long)ow, (long long)pw, (long long)q0, (long long)wi, (long long)wj,
               pad_broken ? " padding between rows of y written" : (guards_intact(&Y) ? "" : " canary"),
               split_differs ? " split into two calls gave other bits" : "");
        free(wp);
        free(off);
        buf_free(&W);
        buf_free(&X);
        buf_free(&B);
        buf_free(&Y);
        buf_free(&Y2);
    }
}

/* The selected variant's linear on weight panels against a double reference: plain and
 * layer-normalised rows (with and without beta), m across whole and partial panels, k across
 * depth blocks, rows across row tiles and chunks, x and y with row padding (y's padding
 * canaries must survive), and the same bits when the panels are split in two calls. */
static void test_linear_panels(void) {
    static const int64_t cases[][3] = {/* rows, k, m */ {1, 1, 1},     {3, 13, 97},   {13, 127, 64}, {7, 129, 257},
                                       {50, 300, 130}, {97, 64, 17},  {2, 1025, 65}, {75, 96, 200}, {4, 0, 9},
                                       {1100, 24, 70}, /* more rows than a chunk of layernorm statistics */
                                       {20, 700, 400}, /* weights over 1 MiB: panels outer */
                                       {1030, 260, 1010}}; /* ... with more rows than a chunk of statistics */
    const nrv_linear_panels_fn lin = nrv_kernel_get_rows_panels(NRV_OP_GEMM).linear_panels;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int ln = 0; ln < 3; ln++) { /* 0: plain, 1: layernorm with beta, 2: without */
            const int64_t rows = cases[t][0], k = cases[t][1], m = cases[t][2];
            if ((ln && k == 0) || (rows > 1024 && ln != 1)) continue; /* the big case: its layernorm chunks only */
            const int64_t ldx = k + (int64_t)(t % 3), ldy = m + (int64_t)((t + (size_t)ln) % 2) * 3;
            buf X = buf_in(rows * ldx, (int)(t % 2)), W = buf_in(m * k, 0), B = buf_in(m, 0);
            buf G = buf_in(k, 0), Be = buf_in(k, 0);
            nrv_test_fill(X.p, rows * ldx, -1.0f, 1.0f);
            for (int64_t i = 0; i < rows * ldx; i++) X.p[i] += (float)(i % 7) * 0.5f; /* rows with a mean */
            nrv_test_fill(W.p, m * k, -1.0f, 1.0f);
            nrv_test_fill(B.p, m, -1.0f, 1.0f);
            nrv_test_fill(G.p, k, 0.5f, 1.5f);
            nrv_test_fill(Be.p, k, -0.5f, 0.5f);
            const int64_t pf = nrv_panels_floats(m, k);
            float *wp = NULL;
            if (posix_memalign((void **)&wp, 64, (size_t)(pf ? pf : 1) * sizeof(float)) != 0) abort();
            nrv_panels_pack(W.p, m, k, wp);
            const float *gamma = ln ? G.p : NULL, *beta = ln == 1 ? Be.p : NULL, *bias = t % 3 == 2 ? NULL : B.p;
            const float eps = 1e-5f;
            const int64_t y_len = (rows - 1) * ldy + m;
            buf Y = buf_out(y_len, 0), Y2 = buf_out(y_len, 0);
            for (int64_t i = 0; i < y_len; i++) Y.p[i] = Y2.p[i] = u2f(CANARY);
            lin(X.p, rows, ldx, k, gamma, beta, eps, wp, m, bias, Y.p, ldy);
            const int64_t panels = (m + 63) / 64, half = panels / 2; /* panels [0, half) and [half, panels) */
            if (half) lin(X.p, rows, ldx, k, gamma, beta, eps, wp, 64 * half, bias, Y2.p, ldy);
            lin(X.p, rows, ldx, k, gamma, beta, eps, wp + 64 * half * k, m - 64 * half, bias ? bias + 64 * half : NULL,
                Y2.p + 64 * half, ldy);
            double err = 0.0;
            int64_t wi = 0, wj = 0;
            int pad_broken = 0, split_differs = 0;
            const int64_t rstep = rows * m * k > 50000000 ? 17 : 1; /* big cases: every 17th row (and the last) */
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t j = 0; j < m; j++)
                    if (f2u(Y.p[r * ldy + j]) != f2u(Y2.p[r * ldy + j])) split_differs = 1;
                if (r + 1 < rows)
                    for (int64_t j = m; j < ldy; j++)
                        if (f2u(Y.p[r * ldy + j]) != CANARY) pad_broken = 1;
                if (r % rstep != 0 && r + 1 != rows) continue;
                const float *xr = X.p + r * ldx;
                double mean = 0.0, var = 0.0;
                for (int64_t p = 0; p < k; p++) mean += xr[p];
                mean /= (double)(k ? k : 1);
                for (int64_t p = 0; p < k; p++) var += (xr[p] - mean) * (xr[p] - mean);
                const double rstd = 1.0 / sqrt(var / (double)(k ? k : 1) + eps);
                for (int64_t j = 0; j < m; j++) {
                    double want = bias ? bias[j] : 0.0;
                    for (int64_t p = 0; p < k; p++) {
                        const double v = ln ? (xr[p] - mean) * rstd * G.p[p] + (beta ? beta[p] : 0.0) : xr[p];
                        want += v * W.p[j * k + p];
                    }
                    const double tol = dot_atol(k ? k : 1, ln ? 4.0 : 4.0, 1.0) + 1e-5 * fabs(want);
                    const double e = fabs((double)Y.p[r * ldy + j] - want) / tol;
                    if (!(e <= err)) err = isnan(e) ? INFINITY : e, wi = r, wj = j;
                }
            }
            if (pad_broken || split_differs || !guards_intact(&Y) || !guards_intact(&Y2)) err = INFINITY;
            record(err, "linear_panels rows=%lld k=%lld m=%lld ln=%d ldx=%lld ldy=%lld at [%lld,%lld]%s%s",
                   (long long)rows, (long long)k, (long long)m, ln, (long long)ldx, (long long)ldy, (long long)wi,
                   (long long)wj, pad_broken ? " padding between rows of y written" : (guards_intact(&Y) ? "" : " canary"),
                   split_differs ? " split into two calls gave other bits" : "");
            free(wp);
            buf_free(&X);
            buf_free(&W);
            buf_free(&B);
            buf_free(&G);
            buf_free(&Be);
            buf_free(&Y);
            buf_free(&Y2);
        }
}

/* The selected variant's depthwise taps against a double reference: widths around every
 * vector count (1, 3, 7, 13, 14, 28, 56, 64, 65, 97, 130), every register block of rows and
 * its remainder, kernels 1x1 to 7x7 with row strides and dilations; the plane exactly as
 * wide as the contract's slack (its slack columns NaN: a kernel that lets them into an
 * output fails) and no float past its last row (ASan), y guarded by canaries. */
static void test_depthwise(void) {
    /* oh, ow, kh, kw, sh, dh, dw, phases (1: stride-1 columns; 2: a column stride of 2, each
     * padded row kept as its even then its odd columns, as op conv lays the plane out) */
    static const int64_t cases[][8] = {{1, 1, 1, 1, 1, 1, 1, 1},  {3, 7, 3, 3, 1, 1, 1, 1},   {5, 13, 5, 5, 2, 1, 1, 1},
                                       {14, 14, 7, 7, 1, 1, 1, 1}, {7, 56, 7, 7, 1, 1, 1, 1},  {4, 97, 3, 3, 1, 2, 2, 1},
                                       {9, 130, 3, 5, 2, 1, 3, 1}, {2, 3, 1, 7, 1, 1, 1, 1},   {6, 28, 7, 7, 1, 1, 1, 1},
                                       {11, 64, 3, 3, 1, 1, 1, 1}, {3, 65, 3, 3, 1, 1, 1, 1},  {17, 5, 3, 3, 1, 1, 1, 1},
                                       {56, 56, 3, 3, 2, 1, 1, 2}, {7, 7, 5, 5, 2, 1, 1, 2},   {14, 33, 3, 3, 2, 1, 1, 2},
                                       {1, 1, 3, 3, 2, 1, 1, 2},   {5, 17, 3, 3, 1, 2, 3, 2},  {9, 70, 7, 7, 2, 1, 1, 2}};
    const nrv_depthwise_fn dwk = nrv_kernel_get(NRV_OP_DEPTHWISE).depthwise;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t oh = cases[t][0], ow = cases[t][1], kh = cases[t][2], kw = cases[t][3], sh = cases[t][4];
        const int64_t dh = cases[t][5], dw = cases[t][6], S = cases[t][7], taps = kh * kw;
        /* a phase row holds the columns its taps read for ow rounded up to 4 outputs */
        const int64_t wpp = (ow + 3) / 4 * 4 + (kw - 1) * dw / S, row = S * wpp;
        const int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, row_step = sh * row;
        int64_t off[NRV_DW_MAX_TAPS];
        for (int64_t ki = 0; ki < kh; ki++)
            for (int64_t kj = 0; kj < kw; kj++)
                off[ki * kw + kj] = ki * dh * row + (kj * dw % S) * wpp + kj * dw / S;
        /* every float no stored output reads is NaN: a read of one would show in a stored lane */
        buf P = buf_in(hp * row, 0), W = buf_in(taps, 0);
        unsigned char *used = xalloc((size_t)(hp * row));
        memset(used, 0, (size_t)(hp * row));
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t k = 0; k < taps; k++)
                for (int64_t ox = 0; ox < ow; ox++) used[oy * row_step + off[k] + ox] = 1;
        nrv_test_fill(P.p, hp * row, -1.0f, 1.0f);
        for (int64_t i = 0; i < hp * row; i++)
            if (!used[i]) P.p[i] = NAN;
        nrv_test_fill(W.p, taps, -1.0f, 1.0f);
        const float bias = nrv_test_uniform(-1.0f, 1.0f);
        buf Y = buf_out(oh * ow, 0);
        dwk(P.p, row_step, oh, ow, off, taps, W.p, bias, Y.p);
        double err = 0.0;
        int64_t at = 0;
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double want = bias;
                for (int64_t k = 0; k < taps; k++) want += (double)W.p[k] * P.p[oy * row_step + off[k] + ox];
                const double e = fabs((double)Y.p[oy * ow + ox] - want) / (dot_atol(taps + 1, 1.0, 1.0) + 1e-6);
                if (!(e <= err)) err = isnan(e) ? INFINITY : e, at = oy * ow + ox;
            }
        if (!guards_intact(&Y)) err = INFINITY;
        record(err, "depthwise oh=%lld ow=%lld k=%lldx%lld sh=%lld dil=%lld,%lld phases=%lld at %lld: got %.9g%s",
               (long long)oh, (long long)ow, (long long)kh, (long long)kw, (long long)sh, (long long)dh, (long long)dw,
               (long long)S, (long long)at, (double)Y.p[at], guards_intact(&Y) ? "" : " canary overwritten");
        free(used);
        buf_free(&P);
        buf_free(&W);
        buf_free(&Y);
    }
}

static int is_fma_variant(const char *name) { return !strcmp(name, "avx2") || !strcmp(name, "avx512"); }

/* The selected variant of a depthwise op with the nrv_depthwise_channels_fn contract
 * ("depthwise_channels", vectors across channels; "depthwise_rows", vectors along rows)
 * against a double reference: channel counts around the vector widths, kernels 1x1 to 7x7,
 * strides, dilations, asymmetric and oversized padding, outputs tall enough to take several
 * bands of rows, narrow and up to 120 wide; y guarded by canaries. The cases the op does not
 * take (nrv_dw_channels_fit / nrv_dw_rows_fit) are skipped, and at least 8 must run. An FMA
 * variant must also give the bits of the (FMA) plane kernel on the same padded plane, as
 * op conv may run any of them. */
static void test_depthwise_vectors(nrv_op op, const char *name) {
    /* c, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw, pad_end_h, pad_end_w */
    static const int64_t cases[][13] = {
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},    {17, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {33, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {16, 9, 13, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
        {5, 15, 11, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1},  {40, 8, 8, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},
        {3, 10, 10, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},  {21, 6, 31, 3, 1, 1, 2, 1, 1, 1, 0, 1, 0},
        {48, 29, 29, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, {7, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},
        {9, 3, 3, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4},    {18, 17, 120, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
        {130, 5, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, {20, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {31, 12, 12, 5, 5, 2, 2, 1, 1, 2, 1, 1, 2},
        /* wide rows, odd widths and the 5x5 / 7x7 strides the rows path takes */
        {3, 37, 113, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {2, 58, 58, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {4, 23, 47, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},  {5, 29, 35, 7, 7, 2, 2, 1, 1, 3, 2, 3, 4},
        {6, 33, 17, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},  {3, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 1, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   {3, 19, 9, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4},
        {2, 11, 100, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},
        /* dilation 2 (the rows path takes it at stride 1): wide, narrow, asymmetric pads */
        {7, 20, 20, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4},  {3, 25, 37, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
        {4, 17, 50, 7, 7, 1, 1, 2, 2, 6, 6, 6, 6},  {2, 9, 9, 5, 5, 1, 1, 2, 2, 3, 5, 1, 2},
        {3, 30, 70, 3, 3, 1, 1, 2, 2, 0, 1, 2, 0},
        /* rows of one to two vectors (8 < ow <= 16 for AVX2, 16 < ow <= 32 for AVX-512:
         * every column block an edge), 7x7, dilated, a padding only before or after */
        {5, 12, 12, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},  {3, 14, 11, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
        {4, 10, 30, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},  {6, 9, 17, 3, 3, 1, 1, 1, 1, 0, 1, 2, 0}};
    const nrv_depthwise_channels_fn dwc = nrv_kernel_get(op).depthwise_channels;
    /* x86's variants fuse each tap's multiply-add; the references and NEON round twice: a
     * pair on the same side must agree bit for bit */
    const char *plane_variant = nrv_kernel_selected("depthwise");
    const int fma_pair = is_fma_variant(cur.variant) == is_fma_variant(plane_variant);
    int ran = 0;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t *cs = cases[t], c = cs[0];
        nrv_dw_geom g = {.ih = cs[1], .iw = cs[2], .kh = cs[3], .kw = cs[4], .sh = cs[5], .sw = cs[6],
                         .dh = cs[7], .dw = cs[8], .ph = cs[9], .pw = cs[10]};
        g.oh = (g.ih + g.ph + cs[11] - (g.kh - 1) * g.dh - 1) / g.sh + 1;
        g.ow = (g.iw + g.pw + cs[12] - (g.kw - 1) * g.dw - 1) / g.sw + 1;
        if (op == NRV_OP_DEPTHWISE_ROWS ? !nrv_dw_rows_fit(&g) : !nrv_dw_channels_fit(&g)) continue;
        ran++;
        const int64_t taps = g.kh * g.kw, plane = g.ih * g.iw, P = g.oh * g.ow;
        buf X = buf_in(c * plane, 0), W = buf_in(c * taps, 0), B = buf_in(c, 0);
        nrv_test_fill(X.p, c * plane, -1.0f, 1.0f);
        nrv_test_fill(W.p, c * taps, -1.0f, 1.0f);
        nrv_test_fill(B.p, c, -1.0f, 1.0f);
        buf Y = buf_out(c * P, 0);
        dwc(&g, c, X.p, W.p, t % 2 ? NULL : B.p, Y.p);
        double err = 0.0;
        int64_t at = 0;
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t oy = 0; oy < g.oh; oy++)
                for (int64_t ox = 0; ox < g.ow; ox++) {
                    double want = t % 2 ? 0.0 : B.p[ch];
                    for (int64_t ki = 0; ki < g.kh; ki++)
                        for (int64_t kj = 0; kj < g.kw; kj++) {
                            const int64_t iy = oy * g.sh + ki * g.dh - g.ph, ix = ox * g.sw + kj * g.dw - g.pw;
                            if (iy >= 0 && iy < g.ih && ix >= 0 && ix < g.iw)
                                want += (double)W.p[ch * taps + ki * g.kw + kj] * X.p[ch * plane + iy * g.iw + ix];
                        }
                    const int64_t i = ch * P + oy * g.ow + ox;
                    const double e = fabs((double)Y.p[i] - want) / (dot_atol(taps + 1, 1.0, 1.0) + 1e-6);
                    if (!(e <= err)) err = isnan(e) ? INFINITY : e, at = i;
                }
        int bits_differ = 0;
        if (fma_pair && g.sw == 1) { /* the plane kernel's padded plane (stride-1 columns), channel by channel */
            const int64_t row = (g.ow + 3) / 4 * 4 + (g.kw - 1) * g.dw, hp = (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1;
            int64_t off[NRV_DW_MAX_TAPS];
            for (int64_t ki = 0; ki < g.kh; ki++)
                for (int64_t kj = 0; kj < g.kw; kj++) off[ki * g.kw + kj] = ki * g.dh * row + kj * g.dw;
            float *pl = xalloc((size_t)(hp * row) * sizeof(float)), *yp = xalloc((size_t)P * sizeof(float));
            for (int64_t ch = 0; ch < c && !bits_differ; ch++) {
                memset(pl, 0, (size_t)(hp * row) * sizeof(float));
                for (int64_t iy = 0; iy < g.ih; iy++)
                    for (int64_t ix = 0; ix < g.iw; ix++)
                        if (iy + g.ph < hp && ix + g.pw < row) pl[(iy + g.ph) * row + ix + g.pw] = X.p[ch * plane + iy * g.iw + ix];
                nrv_kernel_get(NRV_OP_DEPTHWISE)
                    .depthwise(pl, g.sh * row, g.oh, g.ow, off, taps, W.p + ch * taps, t % 2 ? 0.0f : B.p[ch], yp);
                bits_differ = memcmp(yp, Y.p + ch * P, (size_t)P * sizeof(float)) != 0;
            }
            free(pl);
            free(yp);
        }
        if (!guards_intact(&Y) || bits_differ) err = INFINITY;
        record(err, "%s c=%lld in=%lldx%lld k=%lldx%lld s=%lld,%lld dil=%lld,%lld out=%lldx%lld at %lld: "
                    "got %.9g%s%s",
               name, (long long)c, (long long)g.ih, (long long)g.iw, (long long)g.kh, (long long)g.kw, (long long)g.sh,
               (long long)g.sw, (long long)g.dh, (long long)g.dw, (long long)g.oh, (long long)g.ow, (long long)at,
               (double)Y.p[at], guards_intact(&Y) ? "" : " canary overwritten",
               bits_differ ? " (bits differ from the plane kernel's)" : "");
        buf_free(&X);
        buf_free(&W);
        buf_free(&B);
        buf_free(&Y);
    }
    NRV_EXPECT(ran >= 8, "%s: only %d cases fit the op", name, ran);
}

/* ------------------------------------------------------------------ activations, softmax */

/* Special inputs mixed into every activation case: signed zeros, subnormals, the
 * exp/tanh saturation and overflow edges, infinities and NaN. */
static const float act_specials[] = {0.0f,    -0.0f,  1e-30f, -1e-30f, 1e-40f, -1e-40f, 1e-7f,    -1e-7f,
                                     0.5f,    -0.5f,  4.0f,   -4.0f,   9.0f,   -9.0f,   15.0f,    -15.0f,
                                     20.0f,   -20.0f, 87.0f,  -87.0f,  88.8f,  -88.8f,  100.0f,   -100.0f,
                                     104.0f,  -104.0f, 1e30f, -1e30f,  FLT_MAX, -FLT_MAX, INFINITY, -INFINITY,
                                     3.0f,    -3.0f,  NAN,     -NAN};

/* act through the public nrv_activate, or (direct >= 0) the dispatch table's op `direct`,
 * which has no public entry (the plan's fused hard_swish and silu). */
static void test_activation_of(nrv_activation act, int direct, nrv_unary_fn ref) {
    static const int64_t sizes[] = {1,  2,  3,  7,   8,   9,   13,  15,   16,   17,   31,   32,
                                    33, 63, 64, 65, 97, 127, 128, 129, 257, 1025, 4099, 65539};
    const int n_special = (int)(sizeof act_specials / sizeof act_specials[0]);
    int c = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (int variant_case = 0; variant_case < 3; variant_case++, c++) {
            const int64_t n = sizes[si];
            const int inplace = variant_case == 1;
            const int mis = variant_case == 2;
            buf x = buf_in(n, mis);
            const float range = variant_case == 2 ? 30.0f : 8.0f;
            nrv_test_fill(x.p, n, -range, range);
            /* A run of specials at a varying place (so they land in vector body and tail). */
            for (int i = 0; i < n_special && i < n; i++) x.p[(i * 7 + c) % n] = act_specials[(i + c) % n_special];
            float *want = xalloc((size_t)n * sizeof(float));
            ref(x.p, n, want);
            buf y = buf_out(n, mis);
            nrv_status s;
            const float *src = x.p;
            if (inplace) {
                memcpy(y.p, x.p, (size_t)n * sizeof(float));
                src = y.p;
            }
            if (direct >= 0) {
                nrv_kernel_get((nrv_op)direct).unary(src, n, y.p);
                s = NRV_OK;
            } else {
                s = nrv_activate(act, src, n, y.p);
            }
            int64_t at = 0;
            double err;
            if (act == NRV_ACT_RELU || direct == NRV_OP_HARD_SWISH) {
                /* exact: max(x, 0) rounds nothing; hard_swish rounds as the reference does */
                err = s != NRV_OK ? INFINITY : compare(y.p, want, n, 0.0, 1e-45, NULL, 0.0, &at);
            } else if (act == NRV_ACT_GELU || act == NRV_ACT_GELU_TANH) {
                /* The reference forms 1 + erf / 1 + tanh, which cancels for negative x: its
                 * own absolute error there is about |x|/2 · ulp(1). Allow 1.5e-7·|x|. */
                err = s != NRV_OK ? INFINITY : compare(y.p, want, n, 1e-5, 1e-37, x.p, 1.5e-7, &at);
            } else {
                /* sigmoid, tanh, silu: relative everywhere down to FLT_MIN (results below it may flush). */
                err = s != NRV_OK ? INFINITY : compare(y.p, want, n, 1e-5, 1e-37, NULL, 0.0, &at);
            }
            if (!guards_intact(&y)) err = INFINITY;
            record(err, "n=%lld inplace=%d mis=%d status=%s at %lld: x=%.9g got %.9g want %.9g%s", (long long)n,
                   inplace, mis, nrv_status_str(s), (long long)at, (double)x.p[at], (double)y.p[at],
                   (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
            free(want);
            buf_free(&x);
            buf_free(&y);
        }
    }
}

static void test_activation(nrv_activation act, nrv_unary_fn ref) { test_activation_of(act, -1, ref); }

static void test_softmax(void) {
    static const int64_t dims[] = {1, 3, 13, 97, 127, 257, 1025, 4096};
    static const int64_t rowsv[] = {1, 2, 3, 5, 8, 13, 17, 64};
    int c = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        for (size_t ri = 0; ri < sizeof rowsv / sizeof rowsv[0]; ri++, c++) {
            const int64_t dim = dims[di], rows = rowsv[ri], n = rows * dim;
            const int inplace = c % 3 == 1;
            const int mis = c % 5 == 2;
            buf x = buf_in(n, mis);
            for (int64_t r = 0; r < rows; r++) {
                float *xr = x.p + r * dim;
                switch ((r + c) % 6) {
                case 0: nrv_test_fill(xr, dim, -10.0f, 10.0f); break;
                case 1: nrv_test_fill(xr, dim, -1000.0f, 1000.0f); break; /* most terms underflow */
                case 2: nrv_test_fill(xr, dim, 80.0f, 100.0f); break;     /* exp(x) alone would overflow */
                case 3:                                                     /* attention-style mask */
                    nrv_test_fill(xr, dim, -5.0f, 5.0f);
                    for (int64_t j = 1; j < dim; j += 3) xr[j] = -INFINITY;
                    break;
                case 4: for (int64_t j = 0; j < dim; j++) xr[j] = 3.25f; break; /* all equal */
                default:
                    nrv_test_fill(xr, dim, -3.0f, 3.0f);
                    if (r % 4 == 1) xr[(r * 5) % dim] = NAN;      /* the whole row turns NaN */
                    if (r % 4 == 3) xr[(r * 3) % dim] = INFINITY; /* so does +inf (inf - inf) */
                    break;
                }
            }
            float *want = xalloc((size_t)n * sizeof(float));
            nrv_softmax_ref(x.p, rows, dim, want);
            buf y = buf_out(n, mis);
            nrv_status s;
            if (inplace) {
                memcpy(y.p, x.p, (size_t)n * sizeof(float));
                s = nrv_softmax(y.p, rows, dim, y.p);
            } else {
                s = nrv_softmax(x.p, rows, dim, y.p);
            }
            /* y_i = e_i / sum: relative error of one exp plus the sum's. The reference sums
             * dim positive terms in sequence, which drifts by ~u·sqrt(dim) (4e-6 at 4096):
             * rtol 1e-5 + 1.2e-7·sqrt(dim). */
            const double rtol = 1e-5 + 1.2e-7 * sqrt((double)dim);
            int64_t at = 0;
            double err = s != NRV_OK ? INFINITY : compare(y.p, want, n, rtol, 1e-37, NULL, 0.0, &at);
            if (!guards_intact(&y)) err = INFINITY;
            record(err, "rows=%lld dim=%lld inplace=%d status=%s at %lld: x=%.9g got %.9g want %.9g%s",
                   (long long)rows, (long long)dim, inplace, nrv_status_str(s), (long long)at, (double)x.p[at],
                   (double)y.p[at], (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
            free(want);
            buf_free(&x);
            buf_free(&y);
        }
    }
}

/* ------------------------------------------------------------------ linear_w8a8 */

/* The int8 x int8 linear (no public entry point: the plan op is its caller) through the
 * dispatch table against nrv_linear_w8a8_ref: the variants must be bit-identical to it
 * (exact int32 products, one epilogue order: kernels/linear_w8a8.c), per-tensor and
 * per-output s / z, z absent, with and without bias, misaligned inputs.
 * tests/native/test_linear_w8a8.c has the double-precision sweep and the plan ops. */
static void test_linear_w8a8(void) {
    lin_case cs[256];
    const int ncase = lin_cases(cs, 256);
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, in = cs[c].in, out = cs[c].out;
        if (in > NRV_W8A8_MAX_K) continue;
        const int per_row = c % 2, with_z = c % 5 != 3, with_b = c % 3 != 1, mis = c % 6 == 5;
        const int64_t ns = per_row ? out : 1;
        buf x = buf_in(rows * in, mis), s = buf_in(ns, 0), z = buf_in(ns, 0), b = buf_in(out, 0);
        int8_t *q = xalloc((size_t)(out * in)), *packed = xalloc((size_t)nrv_linear_w8a8_packed_bytes(out, in));
        nrv_test_fill(x.p, rows * in, -1.0f, 1.0f);
        for (int64_t i = 0; i < out * in; i++) q[i] = (int8_t)((int)(nrv_test_u64() % 256u) - 128);
        nrv_linear_w8a8_pack(q, out, in, packed);
        nrv_test_fill(s.p, ns, 0.001f, 0.02f);
        nrv_test_fill(z.p, ns, -0.5f, 0.5f);
        nrv_test_fill(b.p, out, -1.0f, 1.0f);
        float *want = xalloc((size_t)(rows * out) * sizeof(float));
        buf y = buf_out(rows * out, mis);
        const float *zp = with_z ? z.p : NULL, *bp = with_b ? b.p : NULL;
        nrv_linear_w8a8_ref(x.p, rows, in, packed, out, s.p, zp, per_row, bp, want);
        nrv_kernel_get(NRV_OP_LINEAR_W8A8).linear_w8a8(x.p, rows, in, packed, out, s.p, zp, per_row, bp, y.p);
        int64_t at = 0;
        while (at < rows * out && memcmp(y.p + at, want + at, sizeof(float)) == 0) at++;
        double err = at < rows * out ? INFINITY : 0.0;
        if (at == rows * out) at = 0;
        if (!guards_intact(&y)) err = INFINITY;
        record(err, "rows=%lld in=%lld out=%lld per_row=%d z=%d b=%d at %lld: got %.9g want %.9g (bit-identical "
               "required)%s", (long long)rows, (long long)in, (long long)out, per_row, with_z, with_b, (long long)at,
               (double)y.p[at], (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
        free(want);
        free(q);
        free(packed);
        buf_free(&y);
        buf_free(&x);
        buf_free(&s);
        buf_free(&z);
        buf_free(&b);
    }
}

/* ------------------------------------------------------------------ quantize */

/* The quantize pass (plan op fake_quant) through the dispatch table against
 * nrv_quantize_ref, bit for bit: both integer ranges, float and byte outputs, awkward
 * lengths, values at exact ties of x / s, beyond saturation, ±inf, NaN and -0, and a canary
 * after y. */
static void test_quantize(void) {
    static const int64_t lens[] = {1, 3, 13, 63, 64, 65, 97, 257, 1025};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < 4; kind++) {
            const int64_t n = lens[li];
            const int is_s8 = kind & 1, to_int = kind >> 1;
            const nrv_quant_params p = {0.037f + 0.01f * (float)li, is_s8 ? -3.0f : 128.0f, is_s8 ? 1.0f : 120.0f,
                                        0.037f, is_s8 ? -128 : 0, is_s8 ? 127 : 255, to_int};
            float *x = xalloc((size_t)n * sizeof(float));
            nrv_test_fill(x, n, -12.0f, 12.0f);
            for (int64_t i = 0; i < n; i++) {
                const uint64_t r = nrv_test_u64() % 16u;
                if (r == 0) x[i] = ((float)(int)(nrv_test_u64() % 200u) - 100.0f + 0.5f) * p.s; /* a tie */
                if (r == 1) x[i] = (nrv_test_u64() & 1u) ? 1e30f : -1e30f;
                if (r == 2) x[i] = (nrv_test_u64() & 1u) ? INFINITY : -INFINITY;
                if (r == 3) x[i] = NAN;
                if (r == 4) x[i] = -0.0f;
            }
            const size_t bytes = (size_t)n * (to_int ? 1u : 4u);
            uint8_t *want = xalloc(bytes + 16), *y = xalloc(bytes + 16);
            memset(want, 0xa5, bytes + 16);
            memset(y, 0xa5, bytes + 16);
            nrv_quantize_ref(x, n, &p, want);
            nrv_kernel_get(NRV_OP_QUANTIZE).quantize(x, n, &p, y);
            int64_t at = 0;
            const size_t el = to_int ? 1u : 4u;
            while (at < n && memcmp(y + at * (int64_t)el, want + at * (int64_t)el, el) == 0) at++;
            int guards = 1;
            for (size_t i = bytes; i < bytes + 16; i++) guards &= y[i] == 0xa5;
            record(at < n || !guards ? INFINITY : 0.0,
                   "n=%lld s8=%d to_int=%d at %lld (x %.9g): bytes differ from the reference%s", (long long)n, is_s8,
                   to_int, (long long)(at < n ? at : 0), (double)x[at < n ? at : 0], guards ? "" : " canary overwritten");
            free(x);
            free(want);
            free(y);
        }
}

/* ------------------------------------------------------------------ requant */

/* The requantization of int32 sums (plan ops requantize, conv_integer for QLinearConv)
 * through the dispatch table against nrv_requant_ref, byte for byte: u8 and s8 ranges,
 * awkward lengths, sums near ties, saturation both ways, wrapping biases; canary after y. */
static void test_requant(void) {
    static const int64_t lens[] = {1, 3, 13, 63, 64, 65, 97, 257, 1025};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < 4; kind++) {
            const int64_t n = lens[li];
            const int is_s8 = kind & 1;
            const int32_t z = is_s8 ? -5 + (int32_t)li : 3 * (int32_t)li, bias = kind & 2 ? INT32_MAX - 100 : -731;
            const float scale = 0.0137f * (float)(li + 1), lo = (float)((is_s8 ? -128 : 0) - z),
                        hi = (float)((is_s8 ? 127 : 255) - z);
            int32_t *x = xalloc((size_t)n * sizeof(int32_t));
            for (int64_t i = 0; i < n; i++) {
                const uint64_t r = nrv_test_u64();
                x[i] = r % 5u == 0 ? (int32_t)(uint32_t)nrv_test_u64() : (int32_t)(r % 40001u) - 20000;
                if (r % 7u == 1) /* near ties once the bias is added (mod 2^32, as the kernels add it) */
                    x[i] = (int32_t)((uint32_t)(int32_t)(((float)(int)(r % 300u) - 150.0f + 0.5f) / scale) -
                                     (uint32_t)bias);
            }
            uint8_t *want = xalloc((size_t)n + 16), *y = xalloc((size_t)n + 16);
            memset(want, 0xa5, (size_t)n + 16);
            memset(y, 0xa5, (size_t)n + 16);
            nrv_requant_ref(x, n, bias, scale, lo, hi, z, want);
            nrv_kernel_get(NRV_OP_REQUANT).requant(x, n, bias, scale, lo, hi, z, y);
            int64_t at = 0;
            while (at < n && y[at] == want[at]) at++;
            int guards = 1;
            for (int64_t i = n; i < n + 16; i++) guards &= y[i] == 0xa5;
            record(at < n || !guards ? INFINITY : 0.0, "n=%lld s8=%d at %lld: %u, want %u%s", (long long)n, is_s8,
                   (long long)(at < n ? at : 0), (unsigned)y[at < n ? at : 0], (unsigned)want[at < n ? at : 0],
                   guards ? "" : " canary overwritten");
            free(x);
            free(want);
            free(y);
        }
}

/* ------------------------------------------------------------------ depthwise_q8 */

/* One channel of a depthwise QLinearConv through the dispatch table against the exact sums
 * in int64 here, requantized by nrv_requant_ref: u8 and s8 planes, kernels 1x1 to 5x5 and
 * 1x7 / 7x1, strides 1-3 (unequal too), dilations 1-2, pads on either side (and none); planes
 * the kernel converts whole (narrower than a vector, or several vectors wide) and planes too
 * big for that (its ring of rows), rows wider than a tile; canary after y. */
static void test_depthwise_q8(void) {
    static const int64_t shapes[][12] = {
        /* h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
        {7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},       {13, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
        {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},       {5, 97, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {12, 113, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1},    {9, 40, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
        {11, 31, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},     {8, 17, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
        {6, 23, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3},      {23, 6, 7, 1, 1, 1, 1, 1, 3, 0, 3, 0},
        {10, 29, 3, 3, 3, 3, 1, 1, 1, 0, 0, 2},     {4, 3000, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {3, 2049, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},    {2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {9, 20, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1},      {9, 20, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1},
        {16, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     {28, 28, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1},
    };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int x_signed = 0; x_signed < 2; x_signed++) {
            const int64_t *d = shapes[si];
            const int64_t h = d[0], w = d[1], kh = d[2], kw = d[3], sh = d[4], sw = d[5], dh = d[6], dw = d[7];
            const int64_t pt = d[8], pl = d[9], pb = d[10], pr = d[11];
            const int64_t oh = (h + pt + pb - (kh - 1) * dh - 1) / sh + 1;
            const int64_t ow = (w + pl + pr - (kw - 1) * dw - 1) / sw + 1;
            const nrv_dwq8_plane g = {h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, x_signed};
            const int is_s8 = (int)(si % 2); /* the output's type */
            const int32_t xz = x_signed ? (int32_t)(si % 7) - 3 : 100 + (int32_t)si, z = is_s8 ? 3 : 120;
            const int32_t bias = (int32_t)(si * 977 % 5000) - 2500;
            /* sums of ~sqrt(taps)·150² in magnitude land mostly inside the range (some saturate) */
            const float scale = 60.0f / (sqrtf((float)(kh * kw)) * 22500.0f) * (float)(1 + si % 3);
            const float lo = (float)((is_s8 ? -128 : 0) - z),
                        hi = (float)((is_s8 ? 127 : 255) - z);
            uint8_t *x = xalloc((size_t)(h * w));
            for (int64_t i = 0; i < h * w; i++) x[i] = (uint8_t)nrv_test_u64();
            float wt[49];
            for (int64_t t = 0; t < kh * kw; t++) wt[t] = (float)((int)(nrv_test_u64() % 511u) - 255);
            if (si == 3) wt[0] = 255.0f, x[0] = x_signed ? 0x80 : 0; /* the extremes once */
            int32_t *sums = xalloc((size_t)(oh * ow) * sizeof(int32_t));
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    int64_t acc = 0;
                    for (int64_t ky = 0; ky < kh; ky++)
                        for (int64_t kx = 0; kx < kw; kx++) {
                            const int64_t iy = oy * sh + ky * dh - pt, ix = ox * sw + kx * dw - pl;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            const int64_t v = x_signed ? (int64_t)(int8_t)x[iy * w + ix] : (int64_t)x[iy * w + ix];
                            acc += (v - xz) * (int64_t)wt[ky * kw + kx];
                        }
                    sums[oy * ow + ox] = (int32_t)acc;
                }
            uint8_t *want = xalloc((size_t)(oh * ow) + 16), *y = xalloc((size_t)(oh * ow) + 16);
            memset(y, 0xa5, (size_t)(oh * ow) + 16);
            nrv_requant_ref(sums, oh * ow, bias, scale, lo, hi, z, want);
            nrv_kernel_get(NRV_OP_DEPTHWISE_Q8).depthwise_q8(&g, x, xz, wt, bias, scale, lo, hi, z, y);
            int64_t at = 0;
            while (at < oh * ow && y[at] == want[at]) at++;
            int guards = 1;
            for (int64_t i = oh * ow; i < oh * ow + 16; i++) guards &= y[i] == 0xa5;
            record(at < oh * ow || !guards ? INFINITY : 0.0,
                   "%lldx%lld k%lldx%lld s%lld d%lld x_s8=%d y_s8=%d at %lld: %u, want %u%s", (long long)h,
                   (long long)w, (long long)kh, (long long)kw, (long long)sw, (long long)dw, x_signed, is_s8,
                   (long long)(at < oh * ow ? at : 0), (unsigned)y[at < oh * ow ? at : 0],
                   (unsigned)want[at < oh * ow ? at : 0], guards ? "" : " canary overwritten");
            free(x);
            free(sums);
            free(want);
            free(y);
        }
}

/* ------------------------------------------------------------------ maxpool */

/* Max pooling through the dispatch table against nrv_maxpool_ref: float32 planes with NaN,
 * infinities and signed zeros among the values (equal values, +0 and -0 tying), uint8 and
 * int8 planes bit for bit; strides 1, 2 and 3, pads before and after (windows reaching past
 * the end, as ceil_mode makes them, and windows holding nothing at all), rows wider than a
 * kernel's block and a window wider than it; inputs allocated to their exact size and a
 * canary after the output planes. */
static void test_maxpool(void) {
    /* planes, ih, iw, kh, kw, sh, sw, ph, pw, pad_end_h, pad_end_w */
    static const int64_t cases[][11] = {
        {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},        {3, 7, 7, 3, 3, 2, 2, 0, 0, 1, 1},
        {2, 111, 111, 3, 3, 2, 2, 0, 0, 1, 1},    {17, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1},
        {4, 13, 97, 2, 2, 2, 2, 0, 0, 1, 1},      {2, 9, 127, 5, 5, 1, 1, 2, 2, 2, 2},
        {3, 27, 27, 3, 3, 3, 3, 1, 1, 1, 1},      {2, 1, 4500, 1, 3, 1, 2, 0, 1, 0, 1},
        {1, 2, 2300, 2, 2100, 1, 1, 0, 0, 0, 0},  {1, 3, 3, 2, 2, 1, 1, 0, 0, 3, 3},
        {6, 16, 65, 7, 7, 2, 2, 3, 3, 3, 3},      {3, 40, 257, 3, 3, 1, 1, 0, 0, 0, 0},
        {2, 8, 1025, 2, 2, 2, 2, 0, 0, 0, 0},     {5, 20, 20, 13, 13, 1, 1, 6, 6, 6, 6},
        {1, 5, 3000, 3, 1, 2, 5, 1, 0, 0, 4},     {9, 3, 64, 3, 4, 1, 3, 1, 2, 1, 3}};
    const nrv_maxpool_fn pool = nrv_kernel_get(NRV_OP_MAXPOOL).maxpool;
    static const int dtypes[] = {NRV_F32, NRV_U8, NRV_I8};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (size_t d = 0; d < 3; d++) {
            const int64_t *cs = cases[t], planes = cs[0];
            nrv_dw_geom g = {.ih = cs[1], .iw = cs[2], .kh = cs[3], .kw = cs[4], .sh = cs[5], .sw = cs[6],
                             .dh = 1, .dw = 1, .ph = cs[7], .pw = cs[8]};
            g.oh = (g.ih + g.ph + cs[9] - g.kh) / g.sh + 1;
            g.ow = (g.iw + g.pw + cs[10] - g.kw) / g.sw + 1;
            const int dt = dtypes[d];
            const size_t esz = dt == NRV_F32 ? sizeof(float) : 1;
            const int64_t n_in = planes * g.ih * g.iw, n_out = planes * g.oh * g.ow;
            uint8_t *x = xalloc((size_t)n_in * esz), *y = xalloc((size_t)n_out * esz + 64),
                    *want = xalloc((size_t)n_out * esz);
            if (dt == NRV_F32) {
                float *xf = (float *)x;
                nrv_test_fill(xf, n_in, -4.0f, 4.0f);
                static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -FLT_MAX};
                for (int64_t i = 0; i < n_in; i++) {
                    const uint64_t r = nrv_test_u64();
                    if (r % 11u == 0) xf[i] = specials[(r >> 8) % 6u];
                    else if (r % 11u == 1) xf[i] = xf[i > 0 ? i - 1 : 0]; /* ties */
                }
            } else
                for (int64_t i = 0; i < n_in; i++) x[i] = (uint8_t)nrv_test_u64();
            memset(y + n_out * (int64_t)esz, 0xa5, 64);
            nrv_maxpool_ref(dt, &g, planes, x, want);
            pool(dt, &g, planes, x, y);
            int64_t at = 0;
            for (; at < n_out; at++) {
                if (dt != NRV_F32) {
                    if (y[at] != want[at]) break;
                } else if (!(((const float *)y)[at] == ((const float *)want)[at])) /* +0 == -0; never NaN */
                    break;
            }
            int guards = 1;
            for (int64_t i = 0; i < 64; i++) guards &= y[n_out * (int64_t)esz + i] == 0xa5;
            const double got_v = at < n_out ? (dt == NRV_F32 ? ((const float *)y)[at] : y[at]) : 0.0;
            const double want_v = at < n_out ? (dt == NRV_F32 ? ((const float *)want)[at] : want[at]) : 0.0;
            record(at < n_out || !guards ? INFINITY : 0.0,
                   "dtype=%d planes=%lld in %lldx%lld k %lldx%lld s %lldx%lld pads %lld,%lld at %lld: %g want %g%s", dt,
                   (long long)planes, (long long)g.ih, (long long)g.iw, (long long)g.kh, (long long)g.kw,
                   (long long)g.sh, (long long)g.sw, (long long)g.ph, (long long)g.pw, (long long)(at < n_out ? at : 0),
                   got_v, want_v, guards ? "" : " canary overwritten");
            free(x);
            free(y);
            free(want);
        }
}

/* ------------------------------------------------------------------ matmul_integer */

/* The exact integer product through the dispatch table against nrv_matmul_integer_ref: bit
 * for bit (integers mod 2^32), u8 and s8 rows (flip), a zero point per tensor or per row,
 * per-column weight zero points or none (wide ones too, so the uint32 wrapping must agree),
 * an output range [n0, n1) (a thread's share) with everything outside it untouched, and a
 * canary after y. tests/python/test_contrib_ops.py checks the plan op against onnxruntime. */
static void test_matmul_integer(void) {
    lin_case cs[260];
    int ncase = lin_cases(cs, 256);
    /* depths past 4096 (the other cases stop at 1025), up to NRV_W8A8_MAX_K's range */
    cs[ncase++] = (lin_case){3, 5001, 40};
    cs[ncase++] = (lin_case){2, 4097, 17};
    cs[ncase++] = (lin_case){5, 4096, 33};
    const int32_t canary = (int32_t)0x5a5a5a5a;
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, in = cs[c].in, out = cs[c].out;
        if (in > NRV_W8A8_MAX_K) continue;
        const uint8_t flip = c % 2 ? 0x80 : 0;
        const int per_row = c % 3 == 1, with_zq = c % 4 != 2, wide = c % 7 == 3;
        const int64_t n0 = c % 5 == 4 ? (out / 2) / 16 * 16 : 0, n1 = c % 5 == 4 ? out - out / 5 : out;
        uint8_t *a = xalloc((size_t)(rows * in) + 1);
        int8_t *q = xalloc((size_t)(out * in)), *packed = xalloc((size_t)nrv_linear_w8a8_packed_bytes(out, in));
        int32_t *za = xalloc((size_t)rows * sizeof(int32_t)), *zq = xalloc((size_t)out * sizeof(int32_t));
        int32_t *want = xalloc((size_t)(rows * out) * sizeof(int32_t));
        int32_t *y = xalloc((size_t)(rows * out + 8) * sizeof(int32_t));
        /* weights: the full int8 range; symmetric ([-127, 127]: AVX2's vpmaddubsw blocks) with a
         * -128 in every third output (its block takes the widening path); or symmetric at the
         * extremes, with rows of 0 and 255 (the largest pair sums vpmaddubsw sees: 2·128·127) */
        const int form = (c / 2) % 3;
        for (int64_t i = 0; i < rows * in; i++) {
            const uint64_t u = nrv_test_u64();
            a[i] = form == 2 && u % 3 ? (uint8_t)(u % 2 ? 255 : 0) : (uint8_t)(u % 256u);
        }
        /* rows whose bytes (xor flip) span max − min = 126..129 (AVX2's narrow path takes
         * vpmaddubsw on a − min(row) for any weight while that is <= 128: a pair of 128·-128
         * is -32768, exact; 129 would saturate), the largest first, at a pair of -128 weights
         * (below); in some cases every third row spans more, so its tile of rows falls back */
        const int narrow = (c / 6) % 3, span = 126 + (int)((c / 18) % 4);
        for (int64_t r = 0; narrow && r < rows; r++) {
            if (narrow == 2 && r % 3 == 1) continue;
            const int base = (int)(nrv_test_u64() % (uint64_t)(256 - span));
            for (int64_t k = 0; k < in; k++)
                a[r * in + k] = (uint8_t)((base + (int)(nrv_test_u64() % (uint64_t)(span + 1))) ^ flip);
            for (int64_t k = 0; k < 2 && k < in; k++) a[r * in + k] = (uint8_t)((base + span) ^ flip);
            if (in > 2) a[r * in + in - 1] = (uint8_t)(base ^ flip);
        }
        for (int64_t i = 0; i < out * in; i++) {
            const uint64_t u = nrv_test_u64();
            q[i] = form == 0   ? (int8_t)((int)(u % 256u) - 128)
                   : form == 1 ? (int8_t)((int)(u % 255u) - 127)
                               : (int8_t)(u % 3 ? (u % 2 ? 127 : -127) : (int)(u % 255u) - 127);
        }
        if (form == 1)
            for (int64_t n = 0; n < out; n += 3) q[n * in + (int64_t)(nrv_test_u64() % (uint64_t)in)] = -128;
        if (form == 0 && narrow)
            for (int64_t n = 0; n < out; n += 2)
                for (int64_t k = 0; k < 2 && k < in; k++) q[n * in + k] = -128;
        for (int64_t r = 0; r < rows; r++) za[r] = (int32_t)(nrv_test_u64() % 256u);
        for (int64_t n = 0; n < out; n++)
            zq[n] = wide ? (int32_t)(uint32_t)nrv_test_u64() : (int32_t)(nrv_test_u64() % 256u) - 128;
        nrv_linear_w8a8_pack(q, out, in, packed);
        for (int64_t i = 0; i < rows * out + 8; i++) y[i] = canary;
        memcpy(want, y, (size_t)(rows * out) * sizeof(int32_t));
        const int32_t *zqp = with_zq ? zq : NULL;
        nrv_matmul_integer_ref(a, flip, rows, in, za, per_row, packed, out, n0, n1, zqp, want);
        nrv_kernel_get(NRV_OP_MATMUL_INTEGER).matmul_integer(a, flip, rows, in, za, per_row, packed, out, n0, n1, zqp,
                                                             y);
        int64_t at = 0;
        while (at < rows * out && y[at] == want[at]) at++;
        int guards = 1;
        for (int64_t i = rows * out; i < rows * out + 8; i++) guards &= y[i] == canary;
        const double err = at < rows * out || !guards ? INFINITY : 0.0;
        if (at == rows * out) at = 0;
        record(err, "rows=%lld in=%lld out=%lld [%lld, %lld) flip=%d per_row=%d zq=%d wide=%d weights %d narrow %d at "
               "%lld: got %d want %d (bit-identical required)%s", (long long)rows, (long long)in, (long long)out,
               (long long)n0, (long long)n1, flip, per_row, with_zq, wide, form, narrow, (long long)at, (int)y[at],
               (int)want[at],
               guards ? "" : " canary overwritten");
        free(a);
        free(q);
        free(packed);
        free(za);
        free(zq);
        free(want);
        free(y);
    }
}

/* matmul_integer's planes entry point (a pointwise conv's x read in place), where the selected
 * variant has one: bit for bit nrv_matmul_integer_ref on the transposed planes, at awkward
 * position counts (partial vectors of 16, blocks of 64), K not a multiple of 4 and past
 * 512 (smaller position blocks), planes lda apart, u8 and s8, with and without (wide)
 * weight zero points; canaries after every row of y and the padding between rows kept. */
static void test_matmul_integer_planes(void) {
    const nrv_matmul_integer_planes_fn planes = nrv_kernel_get_implicit(NRV_OP_MATMUL_INTEGER).matmul_integer_planes;
    if (!planes) {
        printf("  matmul_integer planes: this variant has none (conv_integer stages x instead)\n");
        return;
    }
    static const int64_t ns[] = {1, 3, 15, 16, 17, 63, 64, 65, 97, 200};
    static const int64_t ins[] = {1, 3, 4, 5, 16, 33, 96, 130, 576, 1031, NRV_MI_PLANES_MAX_K};
    static const int64_t outs[] = {1, 3, 4, 7, 16, 17, 96};
    const int32_t canary = (int32_t)0x5a5a5a5a;
    int cases = 0;
    for (int ci = 0; ci < 60; ci++) {
        const int64_t n = ns[ci % 10], in = ins[(ci * 7 + ci / 10) % 11], out = outs[(ci * 3 + ci / 7) % 7];
        const int64_t lda = n + (ci % 3) * 5, ldy = n + (ci % 4 == 1 ? 3 : 0);
        const uint8_t flip = ci % 2 ? 0x80 : 0;
        const int with_zq = ci % 4 != 2, wide = ci % 5 == 3;
        uint8_t *a = xalloc((size_t)(in * lda)), *at = xalloc((size_t)(n * in));
        int8_t *q = xalloc((size_t)(out * in)), *packed = xalloc((size_t)nrv_linear_w8a8_packed_bytes(out, in));
        int32_t *zq = xalloc((size_t)out * sizeof(int32_t)), *want_t = xalloc((size_t)(n * out) * sizeof(int32_t));
        int32_t *y = xalloc((size_t)(out * ldy + 8) * sizeof(int32_t));
        for (int64_t i = 0; i < in * lda; i++) a[i] = (uint8_t)(nrv_test_u64() % 256u);
        for (int64_t i = 0; i < out * in; i++) q[i] = (int8_t)((int)(nrv_test_u64() % 256u) - 128);
        for (int64_t m = 0; m < out; m++)
            zq[m] = wide ? (int32_t)(uint32_t)nrv_test_u64() : (int32_t)(nrv_test_u64() % 256u) - 128;
        const int32_t za = (int32_t)(nrv_test_u64() % 256u);
        for (int64_t p = 0; p < n; p++)
            for (int64_t k = 0; k < in; k++) at[p * in + k] = a[k * lda + p];
        nrv_linear_w8a8_pack(q, out, in, packed);
        const int32_t *zqp = with_zq ? zq : NULL;
        nrv_matmul_integer_ref(at, flip, n, in, &za, 0, packed, out, 0, out, zqp, want_t);
        for (int64_t i = 0; i < out * ldy + 8; i++) y[i] = canary;
        planes(a, lda, flip, n, in, za, packed, out, zqp, NULL, y, ldy);
        int64_t bad = -1;
        for (int64_t m = 0; m < out && bad < 0; m++)
            for (int64_t p = 0; p < ldy && bad < 0; p++)
                if (y[m * ldy + p] != (p < n ? want_t[p * out + m] : canary)) bad = m * ldy + p;
        for (int64_t i = out * ldy; i < out * ldy + 8; i++)
            if (y[i] != canary) bad = i;
        record(bad < 0 ? 0.0 : INFINITY, "planes n=%lld in=%lld out=%lld lda=%lld ldy=%lld flip=%d zq=%d wide=%d: "
               "element %lld differs (bit-identical required, canaries kept)", (long long)n, (long long)in,
               (long long)out, (long long)lda, (long long)ldy, flip, with_zq, wide, (long long)bad);
        /* requantized into bytes: nrv_requant_ref on the same sums, per channel (scales from
         * 1e-5 to 0.1 so both clamps and the ties in between are met), bias or none, u8/s8 */
        {
            const int s8 = ci % 3 == 0, per_channel = ci % 4 != 3;
            int32_t *bias = xalloc((size_t)out * sizeof(int32_t)), *col = xalloc((size_t)n * sizeof(int32_t));
            float *scale = xalloc((size_t)out * sizeof(float));
            for (int64_t m = 0; m < out; m++) {
                bias[m] = (int32_t)(nrv_test_u64() % 200001u) - 100000;
                scale[m] = (float)(1e-5 * pow(1e4, (double)(nrv_test_u64() % 1000u) / 1000.0));
            }
            const int32_t z = s8 ? (int32_t)(nrv_test_u64() % 256u) - 128 : (int32_t)(nrv_test_u64() % 256u);
            const nrv_requant_out rq = {ci % 5 == 1 ? NULL : bias, scale, per_channel, (float)((s8 ? -128 : 0) - z),
                                        (float)((s8 ? 127 : 255) - z), z};
            uint8_t *yb = xalloc((size_t)(out * ldy + 32)), *wb = xalloc((size_t)n + 1);
            memset(yb, 0xa5, (size_t)(out * ldy + 32));
            planes(a, lda, flip, n, in, za, packed, out, zqp, &rq, yb, ldy);
            int64_t bad_b = -1;
            for (int64_t m = 0; m < out && bad_b < 0; m++) {
                for (int64_t p = 0; p < n; p++) col[p] = want_t[p * out + m];
                nrv_requant_ref(col, n, rq.bias ? rq.bias[m] : 0, scale[m * rq.scale_stride], rq.lo, rq.hi, z, wb);
                for (int64_t p = 0; p < ldy && bad_b < 0; p++)
                    if (yb[m * ldy + p] != (p < n ? wb[p] : 0xa5)) bad_b = m * ldy + p;
            }
            for (int64_t i = out * ldy; i < out * ldy + 32; i++)
                if (yb[i] != 0xa5) bad_b = i;
            record(bad_b < 0 ? 0.0 : INFINITY, "planes requantized n=%lld in=%lld out=%lld s8=%d per_channel=%d: "
                   "byte %lld differs from nrv_requant_ref (or past y)", (long long)n, (long long)in, (long long)out,
                   s8, per_channel, (long long)bad_b);
            free(bias);
            free(col);
            free(scale);
            free(yb);
            free(wb);
        }
        cases++;
        free(a);
        free(at);
        free(q);
        free(packed);
        free(zq);
        free(want_t);
        free(y);
    }
    printf("  matmul_integer planes: %d cases\n", cases);
}

/* ------------------------------------------------------------------ linear_w4a32 / linear_w4a8 */

/* The INT4-weight linears through the dispatch table against their references (variants sum
 * in their own order: budget 8·sqrt(K)·eps·Σ_k |x|·(|w| + 16·|scale|), the w4a8 one on the
 * quantised row, whose quantisation every variant reproduces); the layers' widths are the
 * sweep's rounded up to a multiple of 32, group 32, 64 or 128 by case, symmetric or not,
 * packed or unpacked, misaligned x. tests/native/test_linear_w4.c has the double-precision
 * sweep, the layout identity and the error paths. */
static void test_linear_w4(int a8) {
    lin_case cs[256];
    const int ncase = lin_cases(cs, 256);
    for (int c = 0; c < ncase; c++) {
        const int64_t rows = cs[c].rows, out = cs[c].out, in = (cs[c].in + 31) / 32 * 32;
        const int32_t G = in % 128 == 0 && c % 3 == 2 ? 128 : in % 64 == 0 && c % 3 == 1 ? 64 : 32;
        const int64_t ng = in / G;
        const int mis = c % 6 == 5, with_zero = c % 2, packed = c % 4 < 2;
        buf x = buf_in(rows * in, mis), b = buf_in(out, 0);
        nrv_test_fill(x.p, rows * in, -1.0f, 1.0f);
        nrv_test_fill(b.p, out, -1.0f, 1.0f);
        int8_t *q = xalloc((size_t)(out * in)), *zero = xalloc((size_t)(out * ng));
        uint8_t *pk = xalloc((size_t)(out * in / 2));
        uint16_t *sc = xalloc((size_t)(out * ng) * 2);
        for (int64_t i = 0; i < out * in; i++) q[i] = (int8_t)((int)(nrv_test_u64() % 16u) - 8);
        for (int64_t i = 0; i < out * ng; i++) {
            sc[i] = nrv_float_to_half(nrv_test_uniform(-0.05f, 0.05f) + 0.06f);
            zero[i] = (int8_t)((int)(nrv_test_u64() % 16u) - 8);
        }
        NRV_EXPECT_STATUS(nrv_w4_pack(q, out, in, pk), NRV_OK);
        const nrv_w4_weight w = {out, in, G, packed ? NRV_W4_PACKED : NRV_W4_UNPACKED, packed ? (void *)pk : (void *)q,
                                 sc, with_zero ? zero : NULL};
        float *want = xalloc((size_t)(rows * out) * sizeof(float));
        buf y = buf_out(rows * out, mis);
        (a8 ? nrv_linear_w4a8_ref : nrv_linear_w4a32_ref)(x.p, rows, &w, b.p, want, out);
        nrv_kernel_get(a8 ? NRV_OP_LINEAR_W4A8 : NRV_OP_LINEAR_W4A32).linear_w4(x.p, rows, &w, b.p, y.p, out);
        int8_t *xq = xalloc((size_t)in);
        double err = 0.0;
        int64_t at = 0;
        for (int64_t r = 0; r < rows; r++) {
            const float sx = a8 ? nrv_w8a8_quantise_row_ref(x.p + r * in, in, xq) : 1.0f;
            for (int64_t o = 0; o < out; o++) {
                double mag = 0.0;
                for (int64_t k = 0; k < in; k++) {
                    const double s = fabs((double)nrv_half_to_float(sc[o * ng + k / G]));
                    const double xv = a8 ? (double)xq[k] * sx : (double)x.p[r * in + k];
                    mag += fabs(xv) * s * (fabs((double)q[o * in + k] - (with_zero ? zero[o * ng + k / G] : 0)) + 16.0);
                }
                const double tol = 8.0 * sqrt((double)in) * FLT_EPSILON * mag + 1e-30;
                const double e = fabs((double)y.p[r * out + o] - want[r * out + o]) / tol;
                if (!(e <= err)) err = e, at = r * out + o;
            }
        }
        if (!guards_intact(&y)) err = INFINITY;
        record(err, "rows=%lld in=%lld out=%lld group=%d zero=%d packed=%d at %lld: got %.9g want %.9g%s",
               (long long)rows, (long long)in, (long long)out, G, with_zero, packed, (long long)at, (double)y.p[at],
               (double)want[at], guards_intact(&y) ? "" : " canary overwritten");
        free(xq), free(want), free(q), free(zero), free(pk), free(sc);
        buf_free(&y), buf_free(&x), buf_free(&b);
    }
}

/* ------------------------------------------------------------------ linear_attention */

/* The selected variant against nrv_linear_attention_ref on random problems: every rule,
 * decay per head and per key, β per head and shared, GQA groups, dk and dv around the
 * vector widths and the reference's 64-column blocks, several tokens. Inputs are exactly
 * sized (ASan), the state and y guarded by canaries. Tolerance: the recurrence's terms are
 * O(1) and grow with the tokens; FMA rounds differently from the reference's products and
 * sums: 8·ε·(dk + 1)·T relative to the largest |value| (measured: under 1/20 of that). */
static void test_linear_attention(void) {
    static const int64_t dks[] = {1, 3, 8, 13, 16, 33, 64, 130}, dvs[] = {1, 4, 7, 8, 15, 16, 17, 33, 64, 65, 129};
    for (int c = 0; c < 96; c++) {
        nrv_la_problem p;
        memset(&p, 0, sizeof p);
        const int rule = c % 4;
        p.gated = rule == 1 || rule == 3, p.delta = rule >= 2;
        p.g_per_key = (c / 4) % 2, p.beta_per_head = (c / 8) % 2;
        const int64_t B = 1 + c % 2, hkv = 1 + (c / 3) % 2, group = 1 + (c / 5) % 3;
        p.T = 1 + (c * 7) % 5, p.hkv = hkv, p.hq = hkv * group;
        p.dk = dks[(c * 5) % 8], p.dv = dvs[(c * 3) % 11];
        p.scale = 1.0f / sqrtf((float)p.dk);
        const int64_t T = p.T, n_q = B * T * p.hq * p.dk, n_k = B * T * hkv * p.dk, n_v = B * T * hkv * p.dv;
        const int64_t n_g = B * T * (p.g_per_key ? hkv * p.dk : hkv), n_b = B * T * (p.beta_per_head ? hkv : 1);
        const int64_t n_s = B * hkv * p.dk * p.dv, n_y = B * T * p.hq * p.dv;
        buf q = buf_in(n_q, 0), k = buf_in(n_k, 1), v = buf_in(n_v, 0), g = buf_in(n_g, 0), be = buf_in(n_b, 0);
        buf s = buf_out(n_s, 0), y = buf_out(n_y, 3);
        nrv_test_fill(q.p, n_q, -1, 1), nrv_test_fill(k.p, n_k, -0.5f, 0.5f), nrv_test_fill(v.p, n_v, -1, 1);
        nrv_test_fill(g.p, n_g, -0.7f, 0.0f), nrv_test_fill(be.p, n_b, 0, 1), nrv_test_fill(s.p, n_s, -1, 1);
        float *s_ref = xalloc((size_t)n_s * sizeof(float)), *y_ref = xalloc((size_t)n_y * sizeof(float));
        memcpy(s_ref, s.p, (size_t)n_s * sizeof(float));
        p.q = q.p, p.k = k.p, p.v = v.p, p.g = p.gated ? g.p : NULL, p.beta = p.delta ? be.p : NULL;
        nrv_la_problem ref = p;
        ref.state = s_ref, ref.y = y_ref;
        p.state = s.p, p.y = y.p;
        const nrv_linear_attention_fn fn = nrv_kernel_get(NRV_OP_LINEAR_ATTENTION).linear_attention;
        for (int64_t task = 0; task < B * hkv; task++) {
            fn(&p, task);
            nrv_linear_attention_ref(&ref, task);
        }
        /* compares, not fmax: GCC 12's aarch64 vectoriser crashes on fmax reductions of
         * float differences widened to double (-O3 -fno-math-errno) */
        double mag = 1e-3, worst = 0;
        for (int64_t i = 0; i < n_y + n_s; i++) {
            const float got = i < n_y ? y.p[i] : s.p[i - n_y], want = i < n_y ? y_ref[i] : s_ref[i - n_y];
            const double a = fabs((double)want), e = fabs((double)got - (double)want);
            if (a > mag) mag = a;
            if (e > worst || e != e) worst = e != e ? INFINITY : e; /* NaN: fails below */
        }
        const double tol = 8.0 * FLT_EPSILON * (double)(p.dk + 1) * (double)T * mag;
        const int intact = guards_intact(&s) && guards_intact(&y);
        record(intact ? worst / tol : INFINITY, "rule %d B %lld T %lld hq %lld hkv %lld dk %lld dv %lld "
               "per_key %d%s", rule, (long long)B, (long long)T, (long long)p.hq, (long long)hkv, (long long)p.dk,
               (long long)p.dv, p.g_per_key, intact ? "" : " canary overwritten");
        free(s_ref), free(y_ref);
        buf_free(&q), buf_free(&k), buf_free(&v), buf_free(&g), buf_free(&be), buf_free(&s), buf_free(&y);
    }
}

/* ------------------------------------------------------------------ the sweep */

/* Runs the cases of one op with whatever variant is currently selected; 0 if the op has
 * no test here (a new op must get one). */
static int run_op_cases(const char *op) {
    if (!strcmp(op, "embedding")) test_embedding(NRV_F32);
    else if (!strcmp(op, "embedding_f16")) test_embedding(NRV_F16);
    else if (!strcmp(op, "embedding_q8")) test_embedding(NRV_I8);
    else if (!strcmp(op, "layernorm")) test_layernorm();
    else if (!strcmp(op, "linear")) test_linear(0);
    else if (!strcmp(op, "layernorm_linear")) test_linear(1);
    else if (!strcmp(op, "gemm")) test_gemm(), test_gemm_implicit(), test_gemm_panels(), test_linear_panels();
    else if (!strcmp(op, "gelu")) test_activation(NRV_ACT_GELU, nrv_gelu_ref);
    else if (!strcmp(op, "gelu_tanh")) test_activation(NRV_ACT_GELU_TANH, nrv_gelu_tanh_ref);
    else if (!strcmp(op, "relu")) test_activation(NRV_ACT_RELU, nrv_relu_ref);
    else if (!strcmp(op, "sigmoid")) test_activation(NRV_ACT_SIGMOID, nrv_sigmoid_ref);
    else if (!strcmp(op, "tanh")) test_activation(NRV_ACT_TANH, nrv_tanh_ref);
    else if (!strcmp(op, "softmax")) test_softmax();
    else if (!strcmp(op, "linear_w8")) test_linear_w8();
    else if (!strcmp(op, "linear_w8a8")) test_linear_w8a8();
    else if (!strcmp(op, "matmul_integer")) {
        test_matmul_integer();
        test_matmul_integer_planes();
    }
    else if (!strcmp(op, "quantize")) test_quantize();
    else if (!strcmp(op, "requant")) test_requant();
    else if (!strcmp(op, "maxpool")) test_maxpool();
    else if (!strcmp(op, "linear_w4a32")) test_linear_w4(0);
    else if (!strcmp(op, "linear_w4a8")) test_linear_w4(1);
    else if (!strcmp(op, "linear_f16")) test_linear_f16();
    else if (!strcmp(op, "depthwise")) test_depthwise();
    else if (!strcmp(op, "depthwise_channels")) test_depthwise_vectors(NRV_OP_DEPTHWISE_CHANNELS, op);
    else if (!strcmp(op, "depthwise_rows")) test_depthwise_vectors(NRV_OP_DEPTHWISE_ROWS, op);
    else if (!strcmp(op, "hard_swish")) test_activation_of((nrv_activation)-1, NRV_OP_HARD_SWISH, nrv_hard_swish_ref);
    else if (!strcmp(op, "silu")) test_activation_of((nrv_activation)-1, NRV_OP_SILU, nrv_silu_ref);
    else if (!strcmp(op, "linear_attention")) test_linear_attention();
    else if (!strcmp(op, "depthwise_q8")) test_depthwise_q8();
    else return 0;
    return 1;
}

/* Does this build's CPU have every feature of `mask`? */
static int cpu_has(uint64_t mask) { return (nrv_cpu_features() & mask) == mask; }

/* On x86_64 a CPU with the ISA must be able to run the variant named after it: catches a
 * variant whose .requires mask asks for more than its name says. */
static int must_run_here(const char *variant) {
    if (strcmp(nrv_cpu_arch(), "x86_64") != 0) return 0;
    if (!strcmp(variant, "avx2")) return cpu_has(NRV_CPU_AVX2 | NRV_CPU_FMA | NRV_CPU_F16C);
    if (!strcmp(variant, "avx512"))
        return cpu_has(NRV_CPU_AVX512F | NRV_CPU_AVX512BW | NRV_CPU_AVX512VL | NRV_CPU_AVX512DQ |
                       NRV_CPU_AVX2 | NRV_CPU_FMA | NRV_CPU_F16C);
    if (!strcmp(variant, "avx512_vnni"))
        return cpu_has(NRV_CPU_AVX512F | NRV_CPU_AVX512BW | NRV_CPU_AVX512VL | NRV_CPU_AVX512VNNI | NRV_CPU_AVX2 |
                       NRV_CPU_FMA | NRV_CPU_F16C);
    return 0;
}

static void sweep_variants(void) {
    const int n_ops = nrv_kernel_op_count();
    NRV_EXPECT(n_ops > 0, "no ops in the dispatch table");
    for (int o = 0; o < n_ops; o++) {
        const char *op = nrv_kernel_op_name(o);
        const int nv = nrv_kernel_variant_count(op);
        NRV_EXPECT(nv >= 1 && !strcmp(nrv_kernel_variant_name(op, nv - 1), "ref"),
                   "op %s: the reference must be the last variant", op);
        for (int v = 0; v < nv; v++) {
            const char *variant = nrv_kernel_variant_name(op, v);
            if (!nrv_kernel_variant_runnable(op, v)) {
                printf("skip %s variant=%s: not runnable on this CPU\n", op, variant);
                NRV_EXPECT(!must_run_here(variant), "op %s variant %s: this CPU has the ISA but it is not runnable",
                           op, variant);
                NRV_EXPECT_STATUS(nrv_kernel_force(op, variant), NRV_ERR_UNSUPPORTED);
                continue;
            }
            NRV_EXPECT_STATUS(nrv_kernel_force(op, variant), NRV_OK);
            NRV_EXPECT(!strcmp(nrv_kernel_selected(op), variant), "op %s: forced %s but %s is selected", op,
                       variant, nrv_kernel_selected(op));
            memset(&cur, 0, sizeof cur);
            cur.op = op;
            cur.variant = variant;
            nrv_test_seed(0x5eed0000u + (uint64_t)o); /* every variant of an op sees the same inputs */
            const int known = run_op_cases(op);
            NRV_EXPECT(known, "op %s has no test in test_kernels.c: add one", op);
            if (!known) continue;
            const int ok = cur.bad == 0 && cur.cases > 0;
            printf("kernel %s variant=%s cases=%d max_err=%.2f %s\n", op, variant, cur.cases, cur.max_err,
                   ok ? "OK" : "FAILED");
            fflush(stdout);
            NRV_EXPECT(ok, "op %s variant %s: %d of %d cases out of tolerance", op, variant, cur.bad, cur.cases);
        }
        NRV_EXPECT_STATUS(nrv_kernel_force(op, NULL), NRV_OK);
    }
}

/* ------------------------------------------------------------------ error paths */

static void expect_fails(nrv_status got, nrv_status want, const char *what) {
    NRV_EXPECT(got == want, "%s: got %s, want %s (%s)", what, nrv_status_str(got), nrv_status_str(want),
               nrv_last_error());
    if (got != NRV_OK) NRV_EXPECT(nrv_last_error()[0] != '\0', "%s: no error message", what);
    nrv_clear_error();
}

static int all_canary(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (f2u(p[i]) != CANARY) return 0;
    return 1;
}

static void test_error_paths(void) {
    const int64_t rows = 10, dim = 4;
    float table[40];
    nrv_test_fill(table, 40, -1.0f, 1.0f);
    int8_t qtable[40] = {0};
    float scales[10] = {1.0f};
    float out[3 * 4];

    /* Out-of-range ids, int32 and int64, positive and negative, at any position: NRV_ERR_INDEX
     * and not one byte of out written. */
    static const int64_t bad_ids[] = {10, -1, 1000000, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        for (int pos = 0; pos < 3; pos++) {
            int32_t ids32[3] = {1, 2, 3};
            int64_t ids64[3] = {1, 2, 3};
            ids32[pos] = (int32_t)bad_ids[i];
            ids64[pos] = bad_ids[i];
            for (int k = 0; k < 12; k++) out[k] = u2f(CANARY);
            expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids32, NRV_I32, 3, out), NRV_ERR_INDEX,
                         "embedding bad int32 id");
            NRV_EXPECT(all_canary(out, 12), "embedding wrote out before failing on id %lld", (long long)bad_ids[i]);
            expect_fails(nrv_embedding(qtable, NRV_I8, rows, dim, scales, ids64, NRV_I64, 3, out), NRV_ERR_INDEX,
                         "embedding bad int64 id");
            NRV_EXPECT(all_canary(out, 12), "embedding wrote out before failing on id %lld", (long long)bad_ids[i]);
        }
    }
    {
        int64_t ids64[2] = {0, (int64_t)1 << 40}; /* would wrap to 0 as int32 */
        for (int k = 0; k < 12; k++) out[k] = u2f(CANARY);
        expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids64, NRV_I64, 2, out), NRV_ERR_INDEX,
                     "embedding id 2^40");
        NRV_EXPECT(all_canary(out, 12), "embedding wrote out before failing on id 2^40");
        int32_t id0 = 0;
        expect_fails(nrv_embedding(table, NRV_F32, 0, dim, NULL, &id0, NRV_I32, 1, out), NRV_ERR_INDEX,
                     "embedding on an empty table");
    }
    int32_t ids[3] = {0, 1, 2};
    /* dtypes */
    expect_fails(nrv_embedding(table, NRV_I32, rows, dim, NULL, ids, NRV_I32, 3, out), NRV_ERR_DTYPE,
                 "embedding i32 table");
    expect_fails(nrv_embedding(table, NRV_F64, rows, dim, NULL, ids, NRV_I32, 3, out), NRV_ERR_DTYPE,
                 "embedding f64 table");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids, NRV_F32, 3, out), NRV_ERR_DTYPE,
                 "embedding f32 ids");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids, NRV_U8, 3, out), NRV_ERR_DTYPE,
                 "embedding u8 ids");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids, (nrv_dtype)99, 3, out), NRV_ERR_DTYPE,
                 "embedding unknown id dtype");
    expect_fails(nrv_embedding(qtable, NRV_I8, rows, dim, NULL, ids, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding i8 without scales");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, scales, ids, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding f32 with scales");
    /* NULLs */
    expect_fails(nrv_embedding(NULL, NRV_F32, rows, dim, NULL, ids, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding NULL table");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, NULL, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding NULL ids");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids, NRV_I32, 3, NULL), NRV_ERR_INVALID_ARG,
                 "embedding NULL out");
    expect_fails(nrv_embedding(NULL, NRV_F32, rows, dim, NULL, NULL, NRV_I32, 0, NULL), NRV_OK,
                 "embedding with no ids and NULLs");
    /* negative and overflowing sizes */
    expect_fails(nrv_embedding(table, NRV_F32, -1, dim, NULL, ids, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding negative rows");
    expect_fails(nrv_embedding(table, NRV_F32, rows, -4, NULL, ids, NRV_I32, 3, out), NRV_ERR_INVALID_ARG,
                 "embedding negative dim");
    expect_fails(nrv_embedding(table, NRV_F32, rows, dim, NULL, ids, NRV_I32, -3, out), NRV_ERR_INVALID_ARG,
                 "embedding negative n_ids");
    const int64_t huge = (int64_t)1 << 40;
    expect_fails(nrv_embedding(table, NRV_F32, huge, huge, NULL, ids, NRV_I32, 3, out), NRV_ERR_OVERFLOW,
                 "embedding rows = dim = 2^40");
    expect_fails(nrv_embedding(table, NRV_F32, rows, huge, NULL, ids, NRV_I32, huge, out), NRV_ERR_OVERFLOW,
                 "embedding n_ids = dim = 2^40");
    expect_fails(nrv_embedding(table, NRV_F32, (int64_t)1 << 62, 1, NULL, ids, NRV_I32, 3, out),
                 NRV_ERR_OVERFLOW, "embedding table of 2^62 f32");

    float x[16], g[4] = {1, 1, 1, 1}, y[16], w[16];
    nrv_test_fill(x, 16, -1.0f, 1.0f);
    nrv_test_fill(w, 16, -1.0f, 1.0f);
    /* layernorm */
    expect_fails(nrv_layernorm(NULL, 4, 4, g, NULL, 1e-5f, y), NRV_ERR_INVALID_ARG, "layernorm NULL x");
    expect_fails(nrv_layernorm(x, 4, 4, NULL, NULL, 1e-5f, y), NRV_ERR_INVALID_ARG, "layernorm NULL gamma");
    expect_fails(nrv_layernorm(x, 4, 4, g, NULL, 1e-5f, NULL), NRV_ERR_INVALID_ARG, "layernorm NULL y");
    expect_fails(nrv_layernorm(x, -1, 4, g, NULL, 1e-5f, y), NRV_ERR_INVALID_ARG, "layernorm negative rows");
    expect_fails(nrv_layernorm(x, 4, -4, g, NULL, 1e-5f, y), NRV_ERR_INVALID_ARG, "layernorm negative dim");
    expect_fails(nrv_layernorm(x, huge, huge, g, NULL, 1e-5f, y), NRV_ERR_OVERFLOW, "layernorm 2^40 x 2^40");
    expect_fails(nrv_layernorm(x, 4, 4, g, NULL, -1.0f, y), NRV_ERR_INVALID_ARG, "layernorm eps < 0");
    expect_fails(nrv_layernorm(x, 4, 4, g, NULL, NAN, y), NRV_ERR_INVALID_ARG, "layernorm eps NaN");
    expect_fails(nrv_layernorm(x, 4, 4, g, NULL, INFINITY, y), NRV_ERR_INVALID_ARG, "layernorm eps inf");
    expect_fails(nrv_layernorm(NULL, 0, 4, NULL, NULL, 1e-5f, NULL), NRV_OK, "layernorm 0 rows");
    /* linear and fused */
    expect_fails(nrv_linear(NULL, 4, 4, w, NULL, 4, y), NRV_ERR_INVALID_ARG, "linear NULL x");
    expect_fails(nrv_linear(x, 4, 4, NULL, NULL, 4, y), NRV_ERR_INVALID_ARG, "linear NULL w");
    expect_fails(nrv_linear(x, 4, 4, w, NULL, 4, NULL), NRV_ERR_INVALID_ARG, "linear NULL y");
    expect_fails(nrv_linear(x, -4, 4, w, NULL, 4, y), NRV_ERR_INVALID_ARG, "linear negative rows");
    expect_fails(nrv_linear(x, 4, 4, w, NULL, -4, y), NRV_ERR_INVALID_ARG, "linear negative out");
    {
        /* in == 0: an empty product, y = b (zeros without b); x and w are not read */
        float bias[3] = {1.5f, -2.0f, 0.25f}, yz[2 * 3];
        for (int k = 0; k < 6; k++) yz[k] = u2f(CANARY);
        expect_fails(nrv_linear(NULL, 2, 0, NULL, bias, 3, yz), NRV_OK, "linear in = 0");
        NRV_EXPECT(yz[0] == 1.5f && yz[4] == -2.0f && yz[5] == 0.25f, "linear in = 0 must give y = b");
        expect_fails(nrv_linear(NULL, 2, 0, NULL, NULL, 3, yz), NRV_OK, "linear in = 0 without b");
        NRV_EXPECT(yz[0] == 0.0f && yz[5] == 0.0f, "linear in = 0 without b must give zeros");
        expect_fails(nrv_linear(NULL, 2, 0, NULL, bias, 3, NULL), NRV_ERR_INVALID_ARG, "linear in = 0, NULL y");
        expect_fails(nrv_layernorm_linear(x, 2, 0, g, NULL, 1e-5f, w, NULL, 3, yz), NRV_ERR_SHAPE,
                     "layernorm_linear in = 0 (no row to normalise)");
    }
    expect_fails(nrv_linear(x, huge, huge, w, NULL, 4, y), NRV_ERR_OVERFLOW, "linear 2^40 x 2^40");
    expect_fails(nrv_linear(x, 4, huge, w, NULL, huge, y), NRV_ERR_OVERFLOW, "linear w 2^40 x 2^40");
    expect_fails(nrv_linear(NULL, 0, 4, NULL, NULL, 4, NULL), NRV_OK, "linear 0 rows");
    expect_fails(nrv_layernorm_linear(x, 4, 4, NULL, NULL, 1e-5f, w, NULL, 4, y), NRV_ERR_INVALID_ARG,
                 "layernorm_linear NULL gamma");
    expect_fails(nrv_layernorm_linear(x, 4, 4, g, NULL, 1e-5f, NULL, NULL, 4, y), NRV_ERR_INVALID_ARG,
                 "layernorm_linear NULL w");
    expect_fails(nrv_layernorm_linear(x, 4, 4, g, NULL, -1e-5f, w, NULL, 4, y), NRV_ERR_INVALID_ARG,
                 "layernorm_linear eps < 0");
    expect_fails(nrv_layernorm_linear(x, huge, huge, g, NULL, 1e-5f, w, NULL, 4, y), NRV_ERR_OVERFLOW,
                 "layernorm_linear 2^40 x 2^40");
    /* gemm */
    float cm[16];
    expect_fails(nrv_gemm(0, 0, -1, 4, 4, 1.0f, x, 4, w, 4, 0.0f, cm, 4), NRV_ERR_INVALID_ARG, "gemm m < 0");
    expect_fails(nrv_gemm(0, 0, 4, 4, -4, 1.0f, x, 4, w, 4, 0.0f, cm, 4), NRV_ERR_INVALID_ARG, "gemm k < 0");
    expect_fails(nrv_gemm(0, 0, 4, 4, 4, 1.0f, NULL, 4, w, 4, 0.0f, cm, 4), NRV_ERR_INVALID_ARG, "gemm NULL a");
    expect_fails(nrv_gemm(0, 0, 4, 4, 4, 1.0f, x, 4, NULL, 4, 0.0f, cm, 4), NRV_ERR_INVALID_ARG, "gemm NULL b");
    expect_fails(nrv_gemm(0, 0, 4, 4, 4, 1.0f, x, 4, w, 4, 0.0f, NULL, 4), NRV_ERR_INVALID_ARG, "gemm NULL c");
    expect_fails(nrv_gemm(0, 0, 4, 4, 4, 1.0f, x, 3, w, 4, 0.0f, cm, 4), NRV_ERR_SHAPE, "gemm lda < k");
    expect_fails(nrv_gemm(1, 0, 4, 4, 4, 1.0f, x, 4, w, 3, 0.0f, cm, 4), NRV_ERR_SHAPE, "gemm ldb < n");
    expect_fails(nrv_gemm(0, 0, 4, 4, 4, 1.0f, x, 4, w, 4, 0.0f, cm, 3), NRV_ERR_SHAPE, "gemm ldc < n");
    expect_fails(nrv_gemm(0, 0, huge, huge, 4, 1.0f, x, 4, w, huge, 0.0f, cm, huge), NRV_ERR_OVERFLOW,
                 "gemm 2^40 x 2^40");
    expect_fails(nrv_gemm(0, 0, 0, 4, 4, 1.0f, NULL, 4, NULL, 4, 0.0f, NULL, 4), NRV_OK, "gemm m = 0");
    /* activations and softmax */
    expect_fails(nrv_activate((nrv_activation)42, x, 16, y), NRV_ERR_INVALID_ARG, "activate unknown kind");
    expect_fails(nrv_activate(NRV_ACT_GELU, NULL, 16, y), NRV_ERR_INVALID_ARG, "activate NULL x");
    expect_fails(nrv_activate(NRV_ACT_GELU, x, 16, NULL), NRV_ERR_INVALID_ARG, "activate NULL y");
    expect_fails(nrv_activate(NRV_ACT_TANH, x, -1, y), NRV_ERR_INVALID_ARG, "activate n < 0");
    expect_fails(nrv_activate(NRV_ACT_TANH, x, INT64_MAX, y), NRV_ERR_OVERFLOW, "activate n = INT64_MAX");
    expect_fails(nrv_activate(NRV_ACT_RELU, NULL, 0, NULL), NRV_OK, "activate n = 0");
    expect_fails(nrv_softmax(NULL, 4, 4, y), NRV_ERR_INVALID_ARG, "softmax NULL x");
    expect_fails(nrv_softmax(x, 4, 4, NULL), NRV_ERR_INVALID_ARG, "softmax NULL y");
    expect_fails(nrv_softmax(x, -4, 4, y), NRV_ERR_INVALID_ARG, "softmax negative rows");
    expect_fails(nrv_softmax(x, huge, huge, y), NRV_ERR_OVERFLOW, "softmax 2^40 x 2^40");
    /* dispatch API */
    expect_fails(nrv_kernel_force("no_such_op", "ref"), NRV_ERR_INVALID_ARG, "force unknown op");
    expect_fails(nrv_kernel_force(NULL, "ref"), NRV_ERR_INVALID_ARG, "force NULL op");
    expect_fails(nrv_kernel_force("gemm", "no_such_variant"), NRV_ERR_INVALID_ARG, "force unknown variant");
    NRV_EXPECT(nrv_kernel_variant_count("no_such_op") == 0, "variant count of an unknown op");
    NRV_EXPECT(nrv_kernel_variant_name("gemm", -1) == NULL, "variant name -1");
    NRV_EXPECT(nrv_kernel_variant_name("gemm", 99) == NULL, "variant name 99");
    NRV_EXPECT(nrv_kernel_selected("no_such_op") == NULL, "selected of an unknown op");
    NRV_EXPECT(nrv_kernel_op_name(-1) == NULL && nrv_kernel_op_name(nrv_kernel_op_count()) == NULL,
               "op name out of range");
}

/* ------------------------------------------------------------------ NERVE_DISABLE semantics */

/* Does a disable-list token name this variant? Variant names here equal their group
 * ("avx2", "avx512", "neon"), or start with it followed by '_' ("neon_dotprod"). */
static int token_names(const char *tok, const char *variant) {
    if (!strcmp(variant, "ref")) return 0; /* the reference can never be disabled */
    if (!strcmp(tok, "all")) return 1;
    if (!strcmp(tok, "x86")) return !strcmp(nrv_cpu_arch(), "x86_64");
    const size_t n = strlen(tok);
    return !strncmp(variant, tok, n) && (variant[n] == '\0' || variant[n] == '_');
}

/* The variant the documented rule picks: the first runnable one not named by a token. */
static const char *expected_choice(const char *op, const char *const *tokens, int n_tokens) {
    const int nv = nrv_kernel_variant_count(op);
    for (int v = 0; v < nv; v++) {
        const char *name = nrv_kernel_variant_name(op, v);
        if (!nrv_kernel_variant_runnable(op, v)) continue;
        int off = 0;
        for (int t = 0; t < n_tokens; t++) off |= token_names(tokens[t], name);
        if (!off) return name;
    }
    return "ref";
}

static void check_choices(const char *list, const char *const *tokens, int n_tokens) {
    NRV_EXPECT_STATUS(nrv_kernel_disable(list), NRV_OK);
    for (int o = 0; o < nrv_kernel_op_count(); o++) {
        const char *op = nrv_kernel_op_name(o);
        const char *want = expected_choice(op, tokens, n_tokens);
        const char *got = nrv_kernel_selected(op);
        NRV_EXPECT(got && !strcmp(got, want), "disable '%s': op %s selects %s, want %s", list ? list : "(null)", op,
                   got ? got : "(null)", want);
    }
}

static void test_disable(void) {
    const char *const none[] = {""};
    const char *const t512[] = {"avx512"};
    const char *const tall[] = {"all"};
    const char *const tx86[] = {"x86"};
    const char *const tboth[] = {"avx512", "avx2"};
    check_choices(NULL, none, 0);
    /* The automatic choice with nothing disabled is the first runnable variant. */
    for (int o = 0; o < nrv_kernel_op_count(); o++) {
        const char *op = nrv_kernel_op_name(o);
        for (int v = 0; v < nrv_kernel_variant_count(op); v++) {
            if (!nrv_kernel_variant_runnable(op, v)) continue;
            NRV_EXPECT(!strcmp(nrv_kernel_selected(op), nrv_kernel_variant_name(op, v)),
                       "op %s: auto choice %s, first runnable %s", op, nrv_kernel_selected(op),
                       nrv_kernel_variant_name(op, v));
            break;
        }
    }
    check_choices("avx512", t512, 1);
    check_choices("all", tall, 1);
    for (int o = 0; o < nrv_kernel_op_count(); o++)
        NRV_EXPECT(!strcmp(nrv_kernel_selected(nrv_kernel_op_name(o)), "ref"), "disable all: op %s selects %s",
                   nrv_kernel_op_name(o), nrv_kernel_selected(nrv_kernel_op_name(o)));
    check_choices("x86", tx86, 1);
    check_choices("avx512, avx2", tboth, 2);
    check_choices("avx512,avx2", tboth, 2);

    /* x86 with the ISA present: disabling avx512 falls back to avx2 wherever both exist. */
    if (!strcmp(nrv_cpu_arch(), "x86_64")) {
        NRV_EXPECT_STATUS(nrv_kernel_disable("avx512"), NRV_OK);
        for (int o = 0; o < nrv_kernel_op_count(); o++) {
            const char *op = nrv_kernel_op_name(o);
            int has512 = 0, has2 = 0;
            for (int v = 0; v < nrv_kernel_variant_count(op); v++) {
                if (!nrv_kernel_variant_runnable(op, v)) continue;
                has512 |= !strcmp(nrv_kernel_variant_name(op, v), "avx512");
                has2 |= !strcmp(nrv_kernel_variant_name(op, v), "avx2");
            }
            if (has512 && has2)
                NRV_EXPECT(!strcmp(nrv_kernel_selected(op), "avx2"), "disable avx512: op %s selects %s", op,
                           nrv_kernel_selected(op));
        }
    }

    /* A forced variant wins over the disable list until the force is lifted. */
    NRV_EXPECT_STATUS(nrv_kernel_disable("all"), NRV_OK);
    const char *op0 = nrv_kernel_op_name(0);
    const char *first = nrv_kernel_variant_name(op0, 0);
    NRV_EXPECT(!strcmp(nrv_kernel_disabled(), "all"), "disable list reads back as '%s'", nrv_kernel_disabled());
    for (int v = 0; v < nrv_kernel_variant_count(op0); v++)
        NRV_EXPECT(nrv_kernel_variant_disabled(op0, v) == (strcmp(nrv_kernel_variant_name(op0, v), "ref") != 0),
                   "under 'all', variant %s of %s: disabled flag %d", nrv_kernel_variant_name(op0, v), op0,
                   nrv_kernel_variant_disabled(op0, v));
    NRV_EXPECT(nrv_kernel_forced(op0) == NULL, "op %s reported forced without a force", op0);
    if (nrv_kernel_variant_runnable(op0, 0)) {
        NRV_EXPECT_STATUS(nrv_kernel_force(op0, first), NRV_OK);
        NRV_EXPECT(!strcmp(nrv_kernel_selected(op0), first), "forced %s lost to the disable list", first);
        NRV_EXPECT(nrv_kernel_forced(op0) && !strcmp(nrv_kernel_forced(op0), first), "force of %s not read back",
                   first);
        NRV_EXPECT_STATUS(nrv_kernel_force(op0, NULL), NRV_OK);
        NRV_EXPECT(nrv_kernel_forced(op0) == NULL, "lifted force of %s still read back", op0);
        NRV_EXPECT(!strcmp(nrv_kernel_selected(op0), "ref"), "unforcing under 'all' should select ref, got %s",
                   nrv_kernel_selected(op0));
    }
    /* Restore: the automatic choice again. */
    check_choices(NULL, none, 0);
    check_choices("", none, 0);
}

int main(void) {
    printf("test_kernels: arch %s, cpu features 0x%llx\n", nrv_cpu_arch(), (unsigned long long)nrv_cpu_features());
    sweep_variants();
    test_error_paths();
    test_disable();
    return nrv_test_summary("test_kernels");
}
