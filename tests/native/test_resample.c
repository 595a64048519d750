/* test_resample.c — the audio input stage: nrv_resampler_* and nrv_audio_to_mono_f32.
 *
 * - reference: every output against a float64 direct convolution of the same filter
 *   (the table the resampler reports, itself checked against the design formula);
 * - slicing: whole, 1-sample, 37-sample and random slices give bit-identical outputs;
 * - counts: after every call the output count is the closed form of the total input;
 * - frequency response: passband tones within 0.1 dB and at the right phase (the delay is
 *   compensated), stopband tones and images below -80 dB;
 * - bad arguments: statuses, nothing written, state unchanged;
 * - the sample converter: every format, downmix, non-finite samples.
 */
#include <float.h>
#include <limits.h>
#include <stdint.h>

#include "nrv_test.h"

#define PI 3.14159265358979323846

/* ---------------------------------------------------------------- helpers */

static nrv_resampler_t *make(int in_rate, int out_rate) {
    nrv_resampler_t *r = NULL;
    nrv_status s = nrv_resampler_create(in_rate, out_rate, &r);
    NRV_EXPECT(s == NRV_OK && r, "create %d -> %d: %s (%s)", in_rate, out_rate, nrv_status_str(s), nrv_last_error());
    return r;
}

static nrv_resampler_info info_of(const nrv_resampler_t *r) {
    nrv_resampler_info info;
    memset(&info, 0, sizeof info);
    NRV_EXPECT_STATUS(nrv_resampler_info_get(r, &info), NRV_OK);
    return info;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Outputs emitted by process calls after n inputs in all: ceil((n - K/2) L / M), or 0. */
static uint64_t expect_process_total(const nrv_resampler_info *in, uint64_t n) {
    uint64_t half = (uint64_t)in->taps / 2;
    if (n <= half) return 0;
    return ceil_div((n - half) * (uint64_t)in->up, (uint64_t)in->down);
}

/* Feeds x[0..n) in slices (slice 0: random lengths in [1, 300]) then flushes; returns the
 * malloc'd output and its count in *n_out. Checks every call's count. */
static float *run_sliced(nrv_resampler_t *r, const float *x, size_t n, size_t slice, size_t *n_out) {
    nrv_resampler_info info = info_of(r);
    size_t cap = (size_t)ceil_div((uint64_t)n * (uint64_t)info.up, (uint64_t)info.down) + 16;
    float *y = malloc(cap * sizeof(float));
    size_t total = 0, fed = 0;
    while (fed < n) {
        size_t len = slice ? slice : 1 + (size_t)(nrv_test_u64() % 300);
        if (len > n - fed) len = n - fed;
        size_t bound = nrv_resampler_output_bound(r, len), got = (size_t)-1;
        NRV_EXPECT(bound <= (size_t)ceil_div((uint64_t)len * (uint64_t)info.up, (uint64_t)info.down) + 1,
                   "bound %zu above ceil(n L / M) + 1", bound);
        nrv_status s = nrv_resampler_process(r, x + fed, len, y + total, cap - total, &got);
        if (s != NRV_OK) {
            NRV_EXPECT(0, "process: %s (%s)", nrv_status_str(s), nrv_last_error());
            break;
        }
        fed += len;
        total += got;
        if (got != bound || total != expect_process_total(&info, fed)) {
            NRV_EXPECT(0, "%d -> %d: after %zu inputs %zu outputs (call: %zu, bound said %zu), expected %llu",
                       info.in_rate, info.out_rate, fed, total, got, bound,
                       (unsigned long long)expect_process_total(&info, fed));
            break;
        }
    }
    size_t tail = nrv_resampler_flush_count(r), got = (size_t)-1;
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, y + total, cap - total, &got), NRV_OK);
    NRV_EXPECT(got == tail, "flush wrote %zu, flush_count said %zu", got, tail);
    total += got;
    uint64_t want = ceil_div((uint64_t)n * (uint64_t)info.up, (uint64_t)info.down);
    NRV_EXPECT(total == want, "%d -> %d: %zu inputs gave %zu outputs, expected ceil(n L / M) = %llu", info.in_rate,
               info.out_rate, n, total, (unsigned long long)want);
    *n_out = total;
    return y;
}

static float *run_once(nrv_resampler_t *r, const float *x, size_t n, size_t *n_out) {
    return run_sliced(r, x, n, n ? n : 1, n_out);
}

/* ---------------------------------------------------------------- design and reference */

static double bessel_i0(double x) {
    double sum = 1.0, term = 1.0;
    for (int k = 1; k < 300; k++) {
        term *= (x / 2) * (x / 2) / ((double)k * k);
        sum += term;
        if (term < 1e-18 * sum) break;
    }
    return sum;
}

/* The table against the documented prototype g(t). */
static void check_table(int in_rate, int out_rate) {
    nrv_resampler_t *r = make(in_rate, out_rate);
    if (!r) return;
    nrv_resampler_info in = info_of(r);
    size_t count = (size_t)in.table_rows * (size_t)in.taps, n = 0;
    float *t = malloc((count ? count : 1) * sizeof(float));
    NRV_EXPECT_STATUS(nrv_resampler_filter(r, t, count, &n), NRV_OK);
    NRV_EXPECT(n == count, "filter count %zu, want %zu", n, count);
    double fc = in.cutoff_hz / in.in_rate, half = in.taps / 2.0, i0b = bessel_i0(in.kaiser_beta);
    double denom = in.interp_phases ? in.interp_phases : in.up, worst = 0.0;
    for (int p = 0; p < in.table_rows; p++)
        for (int j = 0; j < in.taps; j++) {
            double tt = p / denom + half - 1 - j, u = tt / half;
            double w = bessel_i0(in.kaiser_beta * sqrt(fmax(0.0, 1 - u * u))) / i0b;
            double xx = 2 * fc * tt, s = xx == 0 ? 1.0 : sin(PI * xx) / (PI * xx);
            double g = 2 * fc * s * w;
            double e = fabs(t[(size_t)p * in.taps + j] - g);
            if (e > worst) worst = e;
        }
    NRV_EXPECT(worst < 1e-7, "%d -> %d: table differs from the design formula by %g", in_rate, out_rate, worst);
    free(t);
    nrv_resampler_free(r);
}

/* y[k] in float64 from the resampler's own table. */
static double *reference(const nrv_resampler_t *r, const float *x, size_t n, size_t n_out) {
    nrv_resampler_info in = info_of(r);
    size_t count = (size_t)in.table_rows * (size_t)in.taps, got = 0;
    float *t = malloc(count * sizeof(float));
    nrv_resampler_filter(r, t, count, &got);
    double *y = malloc(n_out * sizeof(double));
    const int64_t K = in.taps, L = in.up, M = in.down;
    for (size_t k = 0; k < n_out; k++) {
        int64_t s = (int64_t)k * M, q = s / L, p = s % L;
        int64_t rows[2];
        double wts[2];
        int nr;
        if (in.interp_phases) {
            int64_t s2 = p * in.interp_phases;
            rows[0] = s2 / L;
            rows[1] = rows[0] + 1;
            wts[1] = (double)(s2 % L) / (double)L;
            wts[0] = 1.0 - wts[1];
            nr = 2;
        } else {
            rows[0] = p;
            wts[0] = 1.0;
            nr = 1;
        }
        double acc = 0.0;
        for (int i = 0; i < nr; i++) {
            const float *h = t + rows[i] * K;
            double d = 0.0;
            for (int64_t j = 0; j < K; j++) {
                int64_t idx = q - K / 2 + 1 + j;
                if (idx >= 0 && idx < (int64_t)n) d += (double)h[j] * (double)x[idx];
            }
            acc += wts[i] * d;
        }
        y[k] = acc;
    }
    free(t);
    return y;
}

static void test_reference(int in_rate, int out_rate, size_t n) {
    nrv_resampler_t *r = make(in_rate, out_rate);
    if (!r) return;
    float *x = malloc(n * sizeof(float));
    nrv_test_fill(x, (int64_t)n, -1.0f, 1.0f);
    size_t n_out = 0;
    float *y = run_sliced(r, x, n, 0, &n_out);
    double *ref = reference(r, x, n, n_out);
    double worst = 0.0;
    size_t where = 0;
    for (size_t k = 0; k < n_out; k++) {
        double e = fabs((double)y[k] - ref[k]);
        if (e > worst) {
            worst = e;
            where = k;
        }
    }
    NRV_EXPECT(worst <= 2e-6, "%d -> %d: |y - ref| = %g at %zu", in_rate, out_rate, worst, where);
    free(ref);
    free(y);
    free(x);
    nrv_resampler_free(r);
}

/* ---------------------------------------------------------------- slicing */

static void test_slicing(int in_rate, int out_rate, size_t n) {
    nrv_resampler_t *r = make(in_rate, out_rate);
    if (!r) return;
    float *x = malloc(n * sizeof(float));
    nrv_test_fill(x, (int64_t)n, -1.0f, 1.0f);
    size_t n0 = 0, n1 = 0, n2 = 0, n3 = 0;
    float *y0 = run_once(r, x, n, &n0);
    float *y1 = run_sliced(r, x, n, 1, &n1);  /* flush reset the stream: starts afresh */
    float *y2 = run_sliced(r, x, n, 37, &n2);
    float *y3 = run_sliced(r, x, n, 0, &n3);
    NRV_EXPECT(n0 == n1 && n0 == n2 && n0 == n3, "counts %zu %zu %zu %zu", n0, n1, n2, n3);
    if (n0 == n1 && n0 == n2 && n0 == n3) {
        NRV_EXPECT(memcmp(y0, y1, n0 * sizeof(float)) == 0, "%d -> %d: 1-sample slices differ", in_rate, out_rate);
        NRV_EXPECT(memcmp(y0, y2, n0 * sizeof(float)) == 0, "%d -> %d: 37-sample slices differ", in_rate, out_rate);
        NRV_EXPECT(memcmp(y0, y3, n0 * sizeof(float)) == 0, "%d -> %d: random slices differ", in_rate, out_rate);
    }
    /* reset in the middle of a stream starts afresh too */
    size_t got = 0;
    float *scratch = malloc((nrv_resampler_output_bound(r, n / 2) + 1) * sizeof(float));
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, n / 2, scratch, nrv_resampler_output_bound(r, n / 2), &got), NRV_OK);
    NRV_EXPECT_STATUS(nrv_resampler_reset(r), NRV_OK);
    nrv_resampler_info in = info_of(r);
    NRV_EXPECT(in.total_in == 0 && in.total_out == 0, "reset keeps counters %llu %llu",
               (unsigned long long)in.total_in, (unsigned long long)in.total_out);
    size_t n4 = 0;
    float *y4 = run_sliced(r, x, n, 0, &n4);
    NRV_EXPECT(n4 == n0 && memcmp(y0, y4, n0 * sizeof(float)) == 0, "%d -> %d: differs after reset", in_rate,
               out_rate);
    free(scratch);
    free(y0);
    free(y1);
    free(y2);
    free(y3);
    free(y4);
    free(x);
    nrv_resampler_free(r);
}

static void test_copy(int rate) {
    nrv_resampler_t *r = make(rate, rate);
    if (!r) return;
    nrv_resampler_info in = info_of(r);
    NRV_EXPECT(in.taps == 0 && in.latency == 0 && in.up == 1 && in.down == 1, "copy %d: taps %d latency %d",
               rate, in.taps, in.latency);
    size_t n = 1001, n_out = 0;
    float x[1001];
    nrv_test_fill(x, (int64_t)n, -2.0f, 2.0f);
    x[5] = NAN; /* copied as it is */
    float *y = run_sliced(r, x, n, 0, &n_out);
    NRV_EXPECT(n_out == n && memcmp(x, y, n * sizeof(float)) == 0, "%d -> %d is not an exact copy", rate, rate);
    free(y);
    nrv_resampler_free(r);
}

/* ---------------------------------------------------------------- frequency response */

/* Feeds a sine of freq Hz (amplitude amp, phase 0 at t = 0) for secs seconds; returns the
 * output (malloc'd) and its count. */
static float *sine_through(nrv_resampler_t *r, double freq, double amp, double secs, size_t *n_out) {
    nrv_resampler_info in = info_of(r);
    size_t n = (size_t)(secs * in.in_rate);
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(amp * sin(2 * PI * freq * (double)i / in.in_rate));
    float *y = run_sliced(r, x, n, 0, n_out);
    free(x);
    return y;
}

/* Steady-state window of the output: skip the filter's reach at both ends. */
static void steady(const nrv_resampler_info *in, size_t n_out, size_t *lo, size_t *hi) {
    size_t reach = (size_t)ceil_div((uint64_t)(in->taps + 2) * (uint64_t)in->up, (uint64_t)in->down) + 2;
    *lo = reach;
    *hi = n_out > reach ? n_out - reach : 0;
}

/* Passband: amplitude within 0.1 dB by a least-squares fit, phase right (pointwise error
 * against the ideal delayed-by-nothing sine), residual below -80 dB. */
static void test_passband(int in_rate, int out_rate, double frac) {
    nrv_resampler_t *r = make(in_rate, out_rate);
    if (!r) return;
    nrv_resampler_info in = info_of(r);
    double fmin = in_rate < out_rate ? in_rate : out_rate, freq = frac * fmin, amp = 0.5;
    size_t n_out = 0, lo, hi;
    float *y = sine_through(r, freq, amp, 0.5, &n_out);
    steady(&in, n_out, &lo, &hi);
    double sc = 0, ss = 0, cc = 0, ys = 0, yc = 0, worst = 0;
    for (size_t k = lo; k < hi; k++) {
        double ph = 2 * PI * freq * (double)k / out_rate, s = sin(ph), c = cos(ph);
        ss += s * s;
        cc += c * c;
        sc += s * c;
        ys += y[k] * s;
        yc += y[k] * c;
        double e = fabs(y[k] - amp * s);
        if (e > worst) worst = e;
    }
    double det = ss * cc - sc * sc, a = (ys * cc - yc * sc) / det, b = (yc * ss - ys * sc) / det;
    double gain_db = 20 * log10(sqrt(a * a + b * b) / amp), res = 0;
    for (size_t k = lo; k < hi; k++) {
        double ph = 2 * PI * freq * (double)k / out_rate, e = y[k] - (a * sin(ph) + b * cos(ph));
        res += e * e;
    }
    double res_db = 10 * log10(res / (double)(hi - lo) / (amp * amp / 2));
    NRV_EXPECT(hi > lo + 100, "too short");
    NRV_EXPECT(fabs(gain_db) < 0.1, "%d -> %d: %.1f Hz gain %.4f dB", in_rate, out_rate, freq, gain_db);
    NRV_EXPECT(worst < 1e-3 * amp, "%d -> %d: %.1f Hz off the ideal sine by %g (delay not compensated?)", in_rate,
               out_rate, freq, worst);
    NRV_EXPECT(res_db < -80, "%d -> %d: %.1f Hz residual (aliases / images) %.1f dB", in_rate, out_rate, freq,
               res_db);
    free(y);
    nrv_resampler_free(r);
}

/* Stopband (downsampling): a tone above the output's Nyquist band leaves < -80 dB. */
static void test_stopband(int in_rate, int out_rate, double freq) {
    nrv_resampler_t *r = make(in_rate, out_rate);
    if (!r) return;
    nrv_resampler_info in = info_of(r);
    double amp = 0.9;
    size_t n_out = 0, lo, hi;
    float *y = sine_through(r, freq, amp, 0.5, &n_out);
    steady(&in, n_out, &lo, &hi);
    double e = 0;
    for (size_t k = lo; k < hi; k++) e += (double)y[k] * y[k];
    double db = 10 * log10(e / (double)(hi - lo) / (amp * amp / 2) + 1e-30);
    NRV_EXPECT(db < -80, "%d -> %d: %.1f Hz leaks %.1f dB", in_rate, out_rate, freq, db);
    free(y);
    nrv_resampler_free(r);
}

/* ---------------------------------------------------------------- bad arguments */

static void test_bad_args(void) {
    nrv_resampler_t *r = (nrv_resampler_t *)(uintptr_t)0x1234;
    const int bad[] = {0, -1, -16000, 384001, 1000000, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        NRV_EXPECT_STATUS(nrv_resampler_create(bad[i], 16000, &r), NRV_ERR_INVALID_ARG);
        NRV_EXPECT(strstr(nrv_last_error(), "in_rate") != NULL, "message: %s", nrv_last_error());
        NRV_EXPECT_STATUS(nrv_resampler_create(16000, bad[i], &r), NRV_ERR_INVALID_ARG);
        NRV_EXPECT(strstr(nrv_last_error(), "out_rate") != NULL, "message: %s", nrv_last_error());
    }
    NRV_EXPECT(r == (nrv_resampler_t *)(uintptr_t)0x1234, "out written on failure");
    NRV_EXPECT_STATUS(nrv_resampler_create(16000, 16000, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_create(384000, 1, &r), NRV_ERR_UNSUPPORTED);
    NRV_EXPECT(strstr(nrv_last_error(), "two stages") != NULL, "message: %s", nrv_last_error());
    nrv_debug_fail_alloc_after(1);
    NRV_EXPECT_STATUS(nrv_resampler_create(44100, 16000, &r), NRV_ERR_OUT_OF_MEMORY);
    nrv_debug_fail_alloc_after(0);
    NRV_EXPECT(r == (nrv_resampler_t *)(uintptr_t)0x1234, "out written on failure");

    r = make(44100, 16000);
    if (!r) return;
    float x[2000], y[1000], canary[1000];
    size_t got = 77;
    nrv_test_fill(x, 2000, -1, 1);
    for (int i = 0; i < 1000; i++) y[i] = canary[i] = -12345.0f;
    NRV_EXPECT_STATUS(nrv_resampler_process(NULL, x, 10, y, 1000, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, NULL, 10, y, 1000, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, 10, y, 1000, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, 2000, NULL, 1000, &got), NRV_ERR_INVALID_ARG);
    size_t need = nrv_resampler_output_bound(r, 2000);
    NRV_EXPECT(need == 668, "44.1k -> 16k, 2000 in, 160 lookahead: ceil(1840 * 160 / 441) = 668, got %zu", need);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, 2000, y, need - 1, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(strstr(nrv_last_error(), "out_cap") != NULL, "message: %s", nrv_last_error());
    NRV_EXPECT(got == 77 && memcmp(y, canary, sizeof y) == 0, "written on failure");
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, SIZE_MAX, y, 1000, &got), NRV_ERR_OVERFLOW);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, SIZE_MAX / 8, y, 1000, &got), NRV_ERR_OVERFLOW);
    NRV_EXPECT(nrv_resampler_output_bound(r, SIZE_MAX / 8) == SIZE_MAX, "bound of a huge call should saturate");
    NRV_EXPECT(got == 77 && memcmp(y, canary, sizeof y) == 0, "written on failure");
    nrv_resampler_info in = info_of(r);
    NRV_EXPECT(in.total_in == 0 && in.total_out == 0, "state changed on failure");
    /* nothing due: NULL out is fine, as is an empty call */
    NRV_EXPECT_STATUS(nrv_resampler_process(r, x, 10, NULL, 0, &got), NRV_OK);
    NRV_EXPECT(got == 0, "got %zu", got);
    NRV_EXPECT_STATUS(nrv_resampler_process(r, NULL, 0, NULL, 0, &got), NRV_OK);
    /* flush with too little room */
    size_t tail = nrv_resampler_flush_count(r);
    NRV_EXPECT(tail == 4, "10 samples at 44.1k -> 16k: ceil(10 * 160 / 441) = 4, got %zu", tail);
    got = 77;
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, y, tail - 1, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, NULL, 10, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, y, 10, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_flush(NULL, y, 10, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(got == 77 && memcmp(y, canary, sizeof y) == 0, "written on failure");
    NRV_EXPECT(nrv_resampler_flush_count(r) == tail, "state changed on failure");
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, y, tail, &got), NRV_OK);
    NRV_EXPECT(got == tail, "flush wrote %zu", got);
    NRV_EXPECT(nrv_resampler_flush_count(r) == 0, "flush did not reset");
    NRV_EXPECT_STATUS(nrv_resampler_flush(r, NULL, 0, &got), NRV_OK); /* empty stream: nothing */
    NRV_EXPECT(got == 0, "got %zu", got);
    NRV_EXPECT_STATUS(nrv_resampler_info_get(r, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_info_get(NULL, &in), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_reset(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_resampler_filter(r, y, 10, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(nrv_resampler_output_bound(NULL, 10) == 0 && nrv_resampler_flush_count(NULL) == 0, "NULL r");
    nrv_resampler_free(r);
    nrv_resampler_free(NULL);
}

/* Design figures the header documents. */
static void test_info(void) {
    static const struct { int in, out, up, down, taps; } cases[] = {
        {44100, 16000, 160, 441, 320}, {48000, 16000, 1, 3, 352}, {22050, 16000, 320, 441, 160},
        {8000, 16000, 2, 1, 128}, {16000, 16000, 1, 1, 0}, {16000, 8000, 1, 2, 240},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nrv_resampler_t *r = make(cases[i].in, cases[i].out);
        if (!r) continue;
        nrv_resampler_info in = info_of(r);
        NRV_EXPECT(in.up == cases[i].up && in.down == cases[i].down && in.taps == cases[i].taps &&
                       in.latency == cases[i].taps / 2 && in.interp_phases == 0 &&
                       in.table_rows == (cases[i].taps ? cases[i].up : 0),
                   "%d -> %d: L %d M %d K %d rows %d", cases[i].in, cases[i].out, in.up, in.down, in.taps,
                   in.table_rows);
        if (cases[i].taps) {
            double fmin = cases[i].in < cases[i].out ? cases[i].in : cases[i].out;
            NRV_EXPECT(fabs(in.passband_hz - 0.45 * fmin) < 1e-9 && fabs(in.stopband_hz - 0.5 * fmin) < 1e-9 &&
                           fabs(in.cutoff_hz - 0.475 * fmin) < 1e-6 && in.design_atten_db == 90.0,
                       "%d -> %d figures", cases[i].in, cases[i].out);
        }
        nrv_resampler_free(r);
    }
    nrv_resampler_t *r = make(44101, 16000); /* L = 16000: interpolated table */
    if (r) {
        nrv_resampler_info in = info_of(r);
        NRV_EXPECT(in.interp_phases > 0 && in.table_rows == in.interp_phases + 1 &&
                       (uint64_t)in.table_rows * (uint64_t)in.taps <= ((uint64_t)1 << 22),
                   "44101 -> 16000: %d phases, %d rows of %d", in.interp_phases, in.table_rows, in.taps);
        nrv_resampler_free(r);
    }
}

/* ---------------------------------------------------------------- sample converter */

static void test_convert(void) {
    /* 2 frames x 2 channels of each format, little-endian bytes */
    const uint8_t u8[] = {0, 255, 128, 192};
    const uint8_t s16[] = {0x00, 0x80, 0xFF, 0x7F, 0x00, 0x40, 0x00, 0x00};
    const uint8_t s24[] = {0x00, 0x00, 0x80, 0xFF, 0xFF, 0x7F, 0x00, 0x00, 0xC0, 0x01, 0x00, 0x00};
    const uint8_t s32[] = {0, 0, 0, 0x80, 0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0x40, 0, 0, 0, 0};
    float out[4];
    size_t bad = 99;
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(u8, NRV_SAMPLE_U8, 2, 2, out, &bad), NRV_OK);
    NRV_EXPECT(out[0] == (float)((-1.0 + 127.0 / 128) / 2) && out[1] == 0.25f && bad == 0, "u8 %g %g", out[0],
               out[1]);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(s16, NRV_SAMPLE_S16, 2, 2, out, &bad), NRV_OK);
    NRV_EXPECT(out[0] == (float)((-1.0 + 32767.0 / 32768) / 2) && out[1] == 0.25f, "s16 %g %g", out[0], out[1]);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(s24, NRV_SAMPLE_S24, 2, 2, out, &bad), NRV_OK);
    NRV_EXPECT(out[0] == (float)((-1.0 + 8388607.0 / 8388608) / 2) && out[1] == (float)((-0.5 + 1.0 / 8388608) / 2),
               "s24 %.9g %.9g", out[0], out[1]);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(s32, NRV_SAMPLE_S32, 2, 2, out, &bad), NRV_OK);
    NRV_EXPECT(out[0] == (float)((-1.0 + 2147483647.0 / 2147483648.0) / 2) && out[1] == 0.25f, "s32 %.9g %.9g",
               out[0], out[1]);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(s16, NRV_SAMPLE_S16, 4, 1, out, NULL), NRV_OK);
    NRV_EXPECT(out[0] == -1.0f && out[1] == 32767.0f / 32768 && out[2] == 0.5f && out[3] == 0.0f, "s16 mono");

    /* floats: exact mono copy, mean of channels, non-finite counted and zeroed */
    float f[6] = {0.1f, -0.7f, NAN, 0.5f, INFINITY, -INFINITY};
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F32, 3, 2, out, &bad), NRV_OK);
    NRV_EXPECT(bad == 3, "f32 non-finite count %zu", bad);
    NRV_EXPECT(out[0] == (float)(((double)0.1f + (double)-0.7f) / 2) && out[1] == 0.25f && out[2] == 0.0f,
               "f32 %g %g %g", out[0], out[1], out[2]);
    double d[4] = {0.25, 1e300, -0.5, NAN};
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(d, NRV_SAMPLE_F64, 4, 1, out, &bad), NRV_OK);
    NRV_EXPECT(bad == 2 && out[0] == 0.25f && out[1] == 0.0f && out[2] == -0.5f && out[3] == 0.0f, "f64");
    /* unaligned input */
    uint8_t raw[1 + 3 * sizeof(float)];
    float three[3] = {0.125f, -3.5f, 1e-30f};
    memcpy(raw + 1, three, sizeof three);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(raw + 1, NRV_SAMPLE_F32, 3, 1, out, &bad), NRV_OK);
    NRV_EXPECT(memcmp(out, three, sizeof three) == 0 && bad == 0, "unaligned f32 not copied exactly");
    /* in place, f32 stereo */
    float inplace[6] = {1, 3, -2, -4, 0.5f, 0.25f};
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(inplace, NRV_SAMPLE_F32, 3, 2, inplace, &bad), NRV_OK);
    NRV_EXPECT(inplace[0] == 2 && inplace[1] == -3 && inplace[2] == 0.375f, "in place");
    /* 7 channels */
    int16_t many[14];
    for (int i = 0; i < 14; i++) many[i] = (int16_t)(i * 1000 - 7000);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(many, NRV_SAMPLE_S16, 2, 7, out, &bad), NRV_OK);
    NRV_EXPECT(out[0] == (float)(-4000.0 / 32768) && out[1] == (float)(3000.0 / 32768), "7 ch %g %g", out[0], out[1]);

    /* bad arguments: nothing written */
    for (int i = 0; i < 4; i++) out[i] = -9.0f;
    bad = 99;
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, (nrv_sample_format)6, 1, 1, out, &bad), NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, (nrv_sample_format)-1, 1, 1, out, &bad), NRV_ERR_DTYPE);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F32, 1, 0, out, &bad), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F32, 1, -2, out, &bad), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F32, 1, 65536, out, &bad), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(NULL, NRV_SAMPLE_F32, 1, 1, out, &bad), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F32, 1, 1, NULL, &bad), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(f, NRV_SAMPLE_F64, SIZE_MAX / 4, 3, out, &bad), NRV_ERR_OVERFLOW);
    NRV_EXPECT(out[0] == -9.0f && bad == 99, "written on failure");
    NRV_EXPECT_STATUS(nrv_audio_to_mono_f32(NULL, NRV_SAMPLE_F32, 0, 1, NULL, &bad), NRV_OK);
    NRV_EXPECT(bad == 0, "empty input: %zu", bad);
    NRV_EXPECT(nrv_sample_format_size(NRV_SAMPLE_S24) == 3 && nrv_sample_format_size((nrv_sample_format)9) == 0,
               "format sizes");
}

int main(void) {
    nrv_test_seed(20240611);
    test_bad_args();
    test_info();
    test_convert();

    static const int pairs[][2] = {
        {44100, 16000}, {48000, 16000}, {22050, 16000}, {8000, 16000}, {11025, 16000}, {32000, 16000},
        {16000, 44100}, {16000, 8000},  {44100, 48000}, {1, 3},        {7, 5},         {44101, 16000},
        {383999, 384000},
    };
    const size_t n_pairs = sizeof pairs / sizeof pairs[0];
    for (size_t i = 0; i < n_pairs; i++) check_table(pairs[i][0], pairs[i][1]);
    for (size_t i = 0; i < n_pairs; i++) test_reference(pairs[i][0], pairs[i][1], 3001);
    test_reference(384000, 1000, 60000); /* K = 43776: heavy downsampling */
    for (size_t i = 0; i < n_pairs; i++) test_slicing(pairs[i][0], pairs[i][1], 4999);
    test_slicing(44100, 16000, 1);
    test_slicing(44100, 16000, 0);
    test_slicing(8000, 16000, 150);
    test_copy(16000);
    test_copy(48000);

    static const int tones[][2] = {{44100, 16000}, {48000, 16000}, {22050, 16000}, {8000, 16000},
                                   {11025, 16000}, {16000, 8000},  {16000, 44100}, {44101, 16000}};
    static const double fracs[] = {0.01, 0.1, 0.25, 0.4, 0.449};
    for (size_t i = 0; i < sizeof tones / sizeof tones[0]; i++)
        for (size_t j = 0; j < sizeof fracs / sizeof fracs[0]; j++) test_passband(tones[i][0], tones[i][1], fracs[j]);
    test_stopband(44100, 16000, 8050.0);
    test_stopband(44100, 16000, 9000.0);
    test_stopband(44100, 16000, 15000.0);
    test_stopband(44100, 16000, 21000.0);
    test_stopband(48000, 16000, 8100.0);
    test_stopband(48000, 16000, 23900.0);
    test_stopband(16000, 8000, 4020.0);
    test_stopband(16000, 8000, 6000.0);
    return nrv_test_summary("test_resample");
}
