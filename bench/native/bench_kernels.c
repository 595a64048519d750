/* bench_kernels.c — native micro-benchmark of the kernel variants (build with
 * -DNERVE_BUILD_BENCH=ON, run build/<dir>/bench/native/bench_kernels [sections...]).
 *
 * Sections (all by default): embedding, fused, variants, gemm. Every number is the
 * median of many timed repeats (each repeat long enough for the clock, >= ~2 ms), since
 * the machines this runs on are often shared; the spread (min..max of the repeats) is
 * printed next to the medians that matter.
 *
 *  embedding: gather of random rows from a 512 MiB table into 64 MiB of output, GB/s of
 *             output, against memcpy of the same 64 MiB in the same run (same medians),
 *             once with 4 KiB pages and once with transparent huge pages (madvise);
 *  fused:     nrv_layernorm_linear vs nrv_layernorm + nrv_linear, rows 1..256, (in, out) =
 *             (384, 1536), (1024, 1024), (4096, 1024);
 *  variants:  every compiled variant of every op against the reference at one size;
 *  gemm:      GFLOP/s of each variant at 64, 256 and 1024 square.
 * Options: --quick (fewer repeats, smaller embedding table: a smoke run for CI).
 */
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "nerve.h"

static int quick = 0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct timing {
    double median, min, max; /* seconds per call */
} timing;

typedef void (*bench_fn)(void *ctx);

/* Median over `reps` repeats of the time of one call; each repeat runs the call enough
 * times to last >= min_s (calibrated once), after one warm-up call. */
static timing time_it(bench_fn fn, void *ctx, int reps, double min_s) {
    fn(ctx);
    int iters = 1;
    for (;;) {
        const double t0 = now_s();
        for (int i = 0; i < iters; i++) fn(ctx);
        const double dt = now_s() - t0;
        if (dt >= min_s || iters >= (1 << 24)) break;
        iters = dt <= 0 ? iters * 16 : (int)(iters * (min_s / dt) * 1.2) + 1;
    }
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        for (int i = 0; i < iters; i++) fn(ctx);
        t[r] = (now_s() - t0) / iters;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    timing res = {t[reps / 2], t[0], t[reps - 1]};
    free(t);
    return res;
}

static void *xmalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0 || !p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}
static void fill(float *p, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)((rnd() >> 40) * (1.0 / 16777216.0));
}

static void check(nrv_status s, const char *what) {
    if (s != NRV_OK) {
        fprintf(stderr, "bench_kernels: %s failed: %s (%s)\n", what, nrv_status_str(s), nrv_last_error());
        exit(1);
    }
}

static void print_machine(void) {
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                const char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof model, "%s", c + 2);
                    model[strcspn(model, "\n")] = '\0';
                }
                break;
            }
        }
        fclose(f);
    }
    printf("machine: %s, %d logical CPUs, arch %s, features:", model, nrv_cpu_count(), nrv_cpu_arch());
    const uint64_t feat = nrv_cpu_features();
    for (int b = 0; b < 63; b++)
        if (feat & (1ull << b)) printf(" %s", nrv_cpu_feature_name(1ull << b));
    printf("\nnerve %s; medians of repeats (min..max in brackets where shown)\n", nrv_version());
}

/* Forces every op to the variant named ("auto" lifts the forcing); an op without such a
 * runnable variant keeps its automatic choice. */
static void force_all(const char *variant) {
    for (int o = 0; o < nrv_kernel_op_count(); o++) {
        const char *op = nrv_kernel_op_name(o);
        nrv_kernel_force(op, strcmp(variant, "auto") ? variant : NULL);
    }
}

/* ------------------------------------------------------------------ embedding vs memcpy */

typedef struct emb_ctx {
    const void *table;
    nrv_dtype dtype;
    int64_t rows, dim;
    const float *scales;
    const int64_t *ids;
    int64_t n_ids;
    float *out;
    const void *copy_src;
    size_t copy_bytes;
} emb_ctx;

static void run_embedding(void *p) {
    emb_ctx *c = p;
    check(nrv_embedding(c->table, c->dtype, c->rows, c->dim, c->scales, c->ids, NRV_I64, c->n_ids, c->out),
          "nrv_embedding");
}
static void run_memcpy(void *p) {
    emb_ctx *c = p;
    memcpy(c->out, c->copy_src, c->copy_bytes);
    __asm__ volatile("" ::: "memory");
}

/* Page-aligned buffer whose pages are forced to 4 KiB (huge = 0) or asked to be 2 MiB
 * transparent huge pages (huge = 1; the kernel may still refuse). A random gather over
 * 512 MiB misses the TLB on nearly every row with 4 KiB pages, which in a virtual machine
 * costs a nested page walk per row: both cases are worth knowing. */
static void *alloc_pages(size_t bytes, int huge) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0 || !p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    return p;
}

static void bench_embedding_pages(int huge) {
    const size_t table_bytes = quick ? ((size_t)64 << 20) : ((size_t)512 << 20);
    const size_t out_bytes = quick ? ((size_t)16 << 20) : ((size_t)64 << 20);
    const int reps = quick ? 5 : 31;
    printf("\n== embedding, %s: random rows of a %zu MiB table -> %zu MiB output, GB/s of output "
           "(memcpy: same bytes, same run)\n",
           huge ? "transparent huge pages" : "4 KiB pages", table_bytes >> 20, out_bytes >> 20);
    char *table = alloc_pages(table_bytes, huge);
    for (size_t i = 0; i < table_bytes; i += 8) {
        const uint64_t r = rnd() & 0x3f3f3f3f3f3f3f3full; /* finite floats / halves / int8 */
        memcpy(table + i, &r, 8);
    }
    float *out = alloc_pages(out_bytes, huge);
    memset(out, 0, out_bytes);
    float *scales = xmalloc(table_bytes / 16 * sizeof(float) + 64);
    fill(scales, (int64_t)(table_bytes / 16), 0.5f, 1.5f);
    static const int64_t row_out_bytes[] = {256, 1024, 4096, 16384};
    static const struct {
        nrv_dtype dt;
        const char *name, *op;
        int elem;
    } dts[] = {{NRV_F32, "f32", "embedding", 4}, {NRV_F16, "f16", "embedding_f16", 2}, {NRV_I8, "i8", "embedding_q8", 1}};
    printf("%-6s %-8s %10s %-7s %10s %22s %10s\n", "table", "out row", "ids", "variant", "GB/s", "[min..max]",
           "vs memcpy (median of per-repeat ratios)");
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t r = 0; r < sizeof row_out_bytes / sizeof row_out_bytes[0]; r++) {
            const int64_t dim = row_out_bytes[r] / 4;
            const int64_t rows = (int64_t)(table_bytes / ((size_t)dim * (size_t)dts[d].elem));
            const int64_t n_ids = (int64_t)(out_bytes / (size_t)row_out_bytes[r]);
            int64_t *ids = xmalloc((size_t)n_ids * sizeof(int64_t));
            for (int64_t i = 0; i < n_ids; i++) ids[i] = (int64_t)(rnd() % (uint64_t)rows);
            emb_ctx c = {table, dts[d].dt, rows, dim, dts[d].dt == NRV_I8 ? scales : NULL, ids, n_ids, out,
                         table + table_bytes / 2, out_bytes};
            /* Interleaved: each repeat times one memcpy and one call of every variant back to
             * back, and the ratio is taken per repeat (the memory bandwidth a shared
             * machine leaves us drifts by tens of percent over seconds). The reference,
             * up to 20x slower, is timed on its own, a few times. */
            const char *names[8];
            int nv = 0;
            for (int v = 0; v < nrv_kernel_variant_count(dts[d].op) && nv < 8; v++)
                if (nrv_kernel_variant_runnable(dts[d].op, v) && strcmp(nrv_kernel_variant_name(dts[d].op, v), "ref"))
                    names[nv++] = nrv_kernel_variant_name(dts[d].op, v);
            double t_mc[64], t_v[8][64], ratio[8][64];
            run_memcpy(&c);
            /* The order rotates from repeat to repeat: whatever runs right after the 64 MiB
             * memcpy pays for writing back the lines it left dirty. */
            for (int k = 0; k < reps; k++) {
                for (int slot = 0; slot <= nv; slot++) {
                    const int item = (slot + k) % (nv + 1); /* 0: memcpy, 1..nv: variants */
                    if (item > 0) check(nrv_kernel_force(dts[d].op, names[item - 1]), "force");
                    const double t0 = now_s();
                    if (item == 0) run_memcpy(&c);
                    else run_embedding(&c);
                    const double t = now_s() - t0;
                    if (item == 0) t_mc[k] = t;
                    else t_v[item - 1][k] = t;
                }
                for (int v = 0; v < nv; v++) ratio[v][k] = t_mc[k] / t_v[v][k];
            }
            check(nrv_kernel_force(dts[d].op, "ref"), "force");
            const timing tr = time_it(run_embedding, &c, 3, 0.002);
            check(nrv_kernel_force(dts[d].op, NULL), "unforce");
            qsort(t_mc, (size_t)reps, sizeof(double), cmp_double);
            const double mc_gbs = (double)out_bytes / t_mc[reps / 2] / 1e9;
            printf("%-6s %6lld B %10lld %-7s %10.2f [%8.2f..%8.2f] %9s\n", dts[d].name, (long long)row_out_bytes[r],
                   (long long)n_ids, "memcpy", mc_gbs, (double)out_bytes / t_mc[reps - 1] / 1e9,
                   (double)out_bytes / t_mc[0] / 1e9, "1.00");
            for (int v = 0; v < nv; v++) {
                qsort(t_v[v], (size_t)reps, sizeof(double), cmp_double);
                qsort(ratio[v], (size_t)reps, sizeof(double), cmp_double);
                printf("%-6s %6lld B %10lld %-7s %10.2f [%8.2f..%8.2f] %9.2f\n", dts[d].name,
                       (long long)row_out_bytes[r], (long long)n_ids, names[v],
                       (double)out_bytes / t_v[v][reps / 2] / 1e9, (double)out_bytes / t_v[v][reps - 1] / 1e9,
                       (double)out_bytes / t_v[v][0] / 1e9, ratio[v][reps / 2]);
            }
            printf("%-6s %6lld B %10lld %-7s %10.2f %22s %9.2f\n", dts[d].name, (long long)row_out_bytes[r],
                   (long long)n_ids, "ref", (double)out_bytes / tr.median / 1e9, "",
                   t_mc[reps / 2] / tr.median);
            free(ids);
        }
    }
    free(scales);
    free(out);
    free(table);
}

static void bench_embedding(void) {
    bench_embedding_pages(0);
    bench_embedding_pages(1);
}

/* ------------------------------------------------------------------ fused vs unfused */

typedef struct ln_ctx {
    const float *x, *gamma, *beta, *w, *b;
    float *y, *tmp;
    int64_t rows, in, out;
} ln_ctx;

static void run_fused(void *p) {
    ln_ctx *c = p;
    check(nrv_layernorm_linear(c->x, c->rows, c->in, c->gamma, c->beta, 1e-5f, c->w, c->b, c->out, c->y),
          "nrv_layernorm_linear");
}
static void run_unfused(void *p) {
    ln_ctx *c = p;
    check(nrv_layernorm(c->x, c->rows, c->in, c->gamma, c->beta, 1e-5f, c->tmp), "nrv_layernorm");
    check(nrv_linear(c->tmp, c->rows, c->in, c->w, c->b, c->out, c->y), "nrv_linear");
}

static void bench_fused(void) {
    static const int64_t shapes[][2] = {{384, 1536}, {1024, 1024}, {4096, 1024}};
    static const int64_t rowsv[] = {1, 4, 16, 64, 256};
    printf("\n== fused layernorm_linear vs layernorm + linear (selected variants: %s / %s + %s), W warm in "
           "cache, us per call\n",
           nrv_kernel_selected("layernorm_linear"), nrv_kernel_selected("layernorm"), nrv_kernel_selected("linear"));
    printf("%6s %6s %5s %12s %12s %14s %s\n", "in", "out", "rows", "fused us", "unfused us", "unfused/fused",
           "(median of paired ratios [quartiles])");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t in = shapes[s][0], out = shapes[s][1];
        for (size_t r = 0; r < sizeof rowsv / sizeof rowsv[0]; r++) {
            const int64_t rows = rowsv[r];
            ln_ctx c = {0};
            float *x = xmalloc((size_t)(rows * in) * 4), *g = xmalloc((size_t)in * 4), *bt = xmalloc((size_t)in * 4);
            float *w = xmalloc((size_t)(out * in) * 4), *b = xmalloc((size_t)out * 4);
            fill(x, rows * in, -2, 2);
            fill(g, in, 0.5f, 1.5f);
            fill(bt, in, -0.5f, 0.5f);
            fill(w, out * in, -0.1f, 0.1f);
            fill(b, out, -1, 1);
            c.x = x, c.gamma = g, c.beta = bt, c.w = w, c.b = b;
            c.y = xmalloc((size_t)(rows * out) * 4);
            c.tmp = xmalloc((size_t)(rows * in) * 4);
            c.rows = rows, c.in = in, c.out = out;
            /* Paired measurements: each pair times a batch of fused calls and a batch of
             * unfused calls back to back (order alternating), and the ratio is taken per
             * pair, so the slow drifts of a shared machine cancel; median over the pairs. */
            const int pairs = quick ? 7 : (rows * in * out > 100000000 ? 21 : 41);
            double tf[64], tu[64], ratio[64];
            const int iters = (int)(4e7 / (double)(rows * in * out)) + 1; /* ~2 ms batches */
            run_fused(&c);
            run_unfused(&c);
            for (int k = 0; k < pairs; k++) {
                for (int half = 0; half < 2; half++) {
                    const int fused_now = (half == 0) == (k % 2 == 0);
                    const double t0 = now_s();
                    for (int i = 0; i < iters; i++) (fused_now ? run_fused : run_unfused)(&c);
                    const double t = (now_s() - t0) / iters;
                    if (fused_now) tf[k] = t;
                    else tu[k] = t;
                }
                ratio[k] = tu[k] / tf[k];
            }
            qsort(tf, (size_t)pairs, sizeof(double), cmp_double);
            qsort(tu, (size_t)pairs, sizeof(double), cmp_double);
            qsort(ratio, (size_t)pairs, sizeof(double), cmp_double);
            printf("%6lld %6lld %5lld %12.1f %12.1f %14.3f [%.3f..%.3f]\n", (long long)in, (long long)out,
                   (long long)rows, tf[pairs / 2] * 1e6, tu[pairs / 2] * 1e6, ratio[pairs / 2], ratio[pairs / 4],
                   ratio[3 * pairs / 4]);
            free(x), free(g), free(bt), free(w), free(b), free(c.y), free(c.tmp);
        }
    }
}

/* ------------------------------------------------------------------ every variant vs ref */

typedef struct op_ctx {
    const char *op;
    float *x, *y, *w, *b, *g, *bt, *c;
    void *table;
    int64_t *ids;
    int64_t n, rows, dim, in, out;
} op_ctx;

static void run_op(void *p) {
    op_ctx *c = p;
    const char *op = c->op;
    nrv_status s = NRV_OK;
    if (!strcmp(op, "embedding"))
        s = nrv_embedding(c->table, NRV_F32, c->rows, c->dim, NULL, c->ids, NRV_I64, c->n, c->y);
    else if (!strcmp(op, "embedding_f16"))
        s = nrv_embedding(c->table, NRV_F16, c->rows, c->dim, NULL, c->ids, NRV_I64, c->n, c->y);
    else if (!strcmp(op, "embedding_q8"))
        s = nrv_embedding(c->table, NRV_I8, c->rows, c->dim, c->b, c->ids, NRV_I64, c->n, c->y);
    else if (!strcmp(op, "layernorm")) s = nrv_layernorm(c->x, c->rows, c->dim, c->g, c->bt, 1e-5f, c->y);
    else if (!strcmp(op, "linear")) s = nrv_linear(c->x, c->rows, c->in, c->w, c->b, c->out, c->y);
    else if (!strcmp(op, "layernorm_linear"))
        s = nrv_layernorm_linear(c->x, c->rows, c->in, c->g, c->bt, 1e-5f, c->w, c->b, c->out, c->y);
    else if (!strcmp(op, "gemm")) s = nrv_gemm(0, 0, c->n, c->n, c->n, 1.0f, c->x, c->n, c->w, c->n, 0.0f, c->y, c->n);
    else if (!strcmp(op, "gelu")) s = nrv_activate(NRV_ACT_GELU, c->x, c->n, c->y);
    else if (!strcmp(op, "gelu_tanh")) s = nrv_activate(NRV_ACT_GELU_TANH, c->x, c->n, c->y);
    else if (!strcmp(op, "relu")) s = nrv_activate(NRV_ACT_RELU, c->x, c->n, c->y);
    else if (!strcmp(op, "sigmoid")) s = nrv_activate(NRV_ACT_SIGMOID, c->x, c->n, c->y);
    else if (!strcmp(op, "tanh")) s = nrv_activate(NRV_ACT_TANH, c->x, c->n, c->y);
    else if (!strcmp(op, "softmax")) s = nrv_softmax(c->x, c->rows, c->dim, c->y);
    check(s, op);
}

static void bench_variants(void) {
    const int reps = quick ? 3 : 15;
    printf("\n== every variant vs the reference (us per call; speedup = ref / variant)\n");
    printf("%-17s %-40s %-7s %12s %9s\n", "op", "size", "variant", "us", "speedup");
    /* One set of buffers big enough for every op below. */
    const int64_t big = 1 << 20;
    op_ctx c = {0};
    c.x = xmalloc((size_t)big * 4);
    c.y = xmalloc((size_t)big * 4);
    c.w = xmalloc((size_t)big * 4);
    c.b = xmalloc(4096 * 4);
    c.g = xmalloc(4096 * 4);
    c.bt = xmalloc(4096 * 4);
    fill(c.x, big, -4, 4);
    fill(c.w, big, -0.1f, 0.1f);
    fill(c.b, 4096, 0.5f, 1.5f);
    fill(c.g, 4096, 0.5f, 1.5f);
    fill(c.bt, 4096, -0.5f, 0.5f);
    const int64_t emb_rows = 4096, emb_dim = 256; /* 4 MiB f32 table: L3-resident */
    c.table = xmalloc((size_t)(emb_rows * emb_dim) * 4);
    for (int64_t i = 0; i < emb_rows * emb_dim; i++) ((uint32_t *)c.table)[i] = (uint32_t)(rnd() & 0x3f3f3f3fu);
    c.ids = xmalloc(1024 * sizeof(int64_t));
    for (int i = 0; i < 1024; i++) c.ids[i] = (int64_t)(rnd() % (uint64_t)emb_rows);

    for (int o = 0; o < nrv_kernel_op_count(); o++) {
        const char *op = nrv_kernel_op_name(o);
        char size[64];
        c.op = op;
        if (!strncmp(op, "embedding", 9)) {
            c.rows = emb_rows, c.dim = emb_dim, c.n = 1024;
            snprintf(size, sizeof size, "1024 ids x dim 256 (L3-resident)");
        } else if (!strcmp(op, "layernorm") || !strcmp(op, "softmax")) {
            c.rows = 64, c.dim = 1024;
            snprintf(size, sizeof size, "64 x 1024");
        } else if (!strcmp(op, "linear") || !strcmp(op, "layernorm_linear")) {
            c.rows = 16, c.in = 1024, c.out = 1024;
            snprintf(size, sizeof size, "rows 16, in 1024, out 1024");
        } else if (!strcmp(op, "gemm")) {
            c.n = 256;
            snprintf(size, sizeof size, "256 x 256 x 256");
        } else {
            c.n = 1 << 16;
            snprintf(size, sizeof size, "65536 floats (L2-resident)");
        }
        double ref_t = 0.0;
        const int nv = nrv_kernel_variant_count(op);
        for (int v = nv - 1; v >= 0; v--) { /* ref (last) first, for the ratio */
            if (!nrv_kernel_variant_runnable(op, v)) continue;
            const char *vn = nrv_kernel_variant_name(op, v);
            check(nrv_kernel_force(op, vn), "force");
            const timing t = time_it(run_op, &c, reps, 0.002);
            if (v == nv - 1) ref_t = t.median;
            printf("%-17s %-40s %-7s %12.2f %8.2fx\n", op, size, vn, t.median * 1e6, ref_t / t.median);
        }
        check(nrv_kernel_force(op, NULL), "unforce");
    }
    free(c.x), free(c.y), free(c.w), free(c.b), free(c.g), free(c.bt), free(c.table), free(c.ids);
}

/* ------------------------------------------------------------------ gemm GFLOP/s */

typedef struct gemm_ctx {
    int64_t n;
    float *a, *b, *c;
} gemm_ctx;

static void run_gemm(void *p) {
    gemm_ctx *g = p;
    check(nrv_gemm(0, 0, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n, 0.0f, g->c, g->n), "nrv_gemm");
}

static void bench_gemm(void) {
    const int reps = quick ? 3 : 11;
    static const int64_t sizes[] = {64, 256, 1024};
    printf("\n== gemm GFLOP/s (C = A·B, square, row-major, beta = 0)\n");
    printf("%6s %-7s %10s %22s\n", "n", "variant", "GFLOP/s", "[min..max]");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        gemm_ctx g = {sizes[s], NULL, NULL, NULL};
        const size_t bytes = (size_t)(g.n * g.n) * 4;
        g.a = xmalloc(bytes), g.b = xmalloc(bytes), g.c = xmalloc(bytes);
        fill(g.a, g.n * g.n, -1, 1);
        fill(g.b, g.n * g.n, -1, 1);
        const double flops = 2.0 * (double)g.n * (double)g.n * (double)g.n;
        for (int v = 0; v < nrv_kernel_variant_count("gemm"); v++) {
            if (!nrv_kernel_variant_runnable("gemm", v)) continue;
            const char *vn = nrv_kernel_variant_name("gemm", v);
            if (!strcmp(vn, "ref") && g.n > 256) {
                printf("%6lld %-7s %10s\n", (long long)g.n, vn, "(skipped)");
                continue;
            }
            check(nrv_kernel_force("gemm", vn), "force");
            const timing t = time_it(run_gemm, &g, !strcmp(vn, "ref") ? 3 : reps, 0.01);
            printf("%6lld %-7s %10.1f [%8.1f..%8.1f]\n", (long long)g.n, vn, flops / t.median / 1e9,
                   flops / t.max / 1e9, flops / t.min / 1e9);
        }
        check(nrv_kernel_force("gemm", NULL), "unforce");
        free(g.a), free(g.b), free(g.c);
    }
}

int main(int argc, char **argv) {
    int want_emb = 0, want_fused = 0, want_var = 0, want_gemm = 0, any = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "embedding")) want_emb = any = 1;
        else if (!strcmp(argv[i], "fused")) want_fused = any = 1;
        else if (!strcmp(argv[i], "variants")) want_var = any = 1;
        else if (!strcmp(argv[i], "gemm")) want_gemm = any = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [embedding] [fused] [variants] [gemm]\n", argv[0]);
            return 2;
        }
    }
    if (!any) want_emb = want_fused = want_var = want_gemm = 1;
    print_machine();
    force_all("auto");
    if (want_emb) bench_embedding();
    if (want_fused) bench_fused();
    if (want_var) bench_variants();
    if (want_gemm) bench_gemm();
    return 0;
}
