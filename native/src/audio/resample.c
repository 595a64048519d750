/* resample.c — stateful rational resampler: windowed-sinc polyphase FIR (Kaiser window).
 *
 * Ratio. in_rate / out_rate is reduced by their gcd to M / L (44100 -> 16000: L = 160,
 * M = 441). Equal rates (L == M == 1) are an exact copy: no filter, no delay.
 *
 * Time base. Input sample n sits at time n / fs_in, output sample k at k / fs_out, i.e. at
 * t_k = k * M / L input samples. Output k is
 *
 *     y[k] = sum_n x[n] * g(t_k - n),   x[n] = 0 for n < 0 and, after flush, past the end,
 *
 * so the filter's group delay is compensated: y[k] estimates the band-limited signal at
 * exactly t_k. The price is lookahead: y[k] needs x up to floor(t_k) + K/2, so a process
 * call emits y[k] once that sample has arrived (latency K/2 input samples), and flush emits
 * the rest, up to the last k with t_k < N (N input samples in all), i.e. ceil(N * L / M)
 * samples in all.
 *
 * Filter (everything in units of input samples; fmin = min(fs_in, fs_out)):
 *     g(t) = 2 fc sinc(2 fc t) * kaiser(t),  |t| <= K/2,
 *     fc = 0.475 fmin / fs_in            (-6 dB point: 0.475 fmin Hz)
 *     passband edge 0.45 fmin, stopband edge 0.50 fmin (nothing aliases or images below
 *     the output's / input's Nyquist frequency by less than the stopband attenuation)
 *     Kaiser design for A = 90 dB: beta = 0.1102 (A - 8.7) = 8.96,
 *     width K = (A - 7.95) / (2.285 * 2 pi * 0.05 fmin / fs_in), rounded up to 16.
 * Measured on the float tables (dense FFT of the interleaved phases): passband ripple
 * within +-0.0003 dB, stopband <= -89.8 dB, -6 dB at 0.475 fmin (44.1k, 48k, 32k, 22.05k,
 * 11.025k, 8k -> 16k; 16k -> 8k, 44.1k). K = 320 taps for 44.1k -> 16k, 352 for 48k -> 16k,
 * 128 for 8k -> 16k. sum_n g(f - n) = 1 within the ripple, so DC gain is 1 both ways.
 *
 * Polyphase table. With k * M = q * L + p (0 <= p < L), output k is the dot product of
 * row p, h_p[j] = g(p / L + K/2 - 1 - j), with x[q - K/2 + 1 .. q + K/2]. The table
 * (L rows of K floats) is computed once, in double and rounded to float, at create.
 * When L * K would exceed NRV_RS_TABLE_MAX coefficients (odd ratios such as
 * 44101 -> 16000, L = 16000), the table instead holds P + 1 rows at offsets i / P
 * (P the largest power of two that fits) and y[k] blends the dot products of the two rows
 * around p / L linearly: the error of that interpolation is below 1e-8 of the peak tap
 * for every ratio the size limits allow, far under the stopband.
 *
 * Determinism. Every output is one call of rs_dot on the same K inputs and the same row,
 * whatever the slicing of the input, so slicing never changes a bit. rs_dot keeps 16
 * independent partial sums (a fixed association, which the compiler vectorises without
 * reordering anything: it never reassociates float sums) and reduces them in a fixed order.
 *
 * State. buf holds the input samples still needed: the window start of the next output
 * (pos) and everything after it; K/2 - 1 zeros are prefilled at reset to stand for x[n < 0].
 * Input is appended in blocks of at most `block` samples, outputs are computed, the
 * consumed prefix is dropped (memmove of at most K samples). Nothing allocates after create.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define NRV_RS_MAX_RATE 384000
#define NRV_RS_PI 3.14159265358979323846
#define NRV_RS_ATTEN_DB 90.0
#define NRV_RS_PASS 0.45       /* passband edge, fraction of min(fs_in, fs_out) */
#define NRV_RS_STOP 0.50       /* stopband edge */
#define NRV_RS_TAP_MULT 16u    /* K is a multiple of this (the dot product's unroll) */
#define NRV_RS_MAX_TAPS ((uint64_t)1 << 18)       /* per output sample: 1 MiB of coefficients */
#define NRV_RS_TABLE_MAX ((uint64_t)1 << 22)      /* coefficients in the table: 16 MiB */
#define NRV_RS_MIN_BLOCK 4096u

struct nrv_resampler {
    int in_rate, out_rate;
    uint32_t up, down;     /* L, M */
    uint32_t taps;         /* K, 0 for the exact copy */
    uint32_t rows;         /* rows of the table: L, or P + 1 when interpolated */
    uint32_t interp_p;     /* P when interpolated, 0 otherwise */
    uint32_t step_q;       /* M / L: whole input samples per output */
    uint32_t step_p;       /* M % L */
    double fc, beta;       /* cutoff in cycles per input sample, Kaiser beta */
    float *table;          /* rows x taps */
    float *buf;            /* cap samples */
    size_t cap, block;
    /* stream state */
    size_t len;            /* valid samples in buf */
    size_t pos;            /* window start of the next output, relative to buf (<= len) */
    uint32_t phase;        /* p of the next output */
    uint64_t total_in, total_out;
};

static uint64_t rs_gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Modified Bessel function of the first kind, order 0 (power series; x <= ~20 here). */
static double rs_bessel_i0(double x) {
    double sum = 1.0, term = 1.0, q = x * x / 4.0;
    for (int k = 1; k < 200; k++) {
        term *= q / ((double)k * (double)k);
        sum += term;
        if (term < sum * 1e-17) break;
    }
    return sum;
}

/* The prototype g(t), t in input samples, |t| <= half. */
static double rs_kernel(double t, double fc, double beta, double half, double i0_beta) {
    double r = t / half;
    double arg = 1.0 - r * r;
    if (arg < 0.0) arg = 0.0;
    double w = rs_bessel_i0(beta * sqrt(arg)) / i0_beta;
    double x = 2.0 * fc * t;
    double s = (x == 0.0) ? 1.0 : sin(NRV_RS_PI * x) / (NRV_RS_PI * x);
    return 2.0 * fc * s * w;
}

/* sum_j x[j] * h[j], n a multiple of 16, fixed association (see the file comment): lane l
 * sums x[j + l] h[j + l] over j, then ((a_l + a_l+8) + (a_l+4 + a_l+12)) and the four lanes
 * pairwise. Written as 16 named accumulators, GCC packs them into 4 vector registers at -O2
 * already (SSE2 / NEON, mul + add: ISO C mode does not contract to FMA). */
static float rs_dot(const float *restrict x, const float *restrict h, size_t n) {
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    float a8 = 0, a9 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0, a14 = 0, a15 = 0;
    for (size_t j = 0; j < n; j += 16, x += 16, h += 16) {
        a0 += x[0] * h[0], a1 += x[1] * h[1], a2 += x[2] * h[2], a3 += x[3] * h[3];
        a4 += x[4] * h[4], a5 += x[5] * h[5], a6 += x[6] * h[6], a7 += x[7] * h[7];
        a8 += x[8] * h[8], a9 += x[9] * h[9], a10 += x[10] * h[10], a11 += x[11] * h[11];
        a12 += x[12] * h[12], a13 += x[13] * h[13], a14 += x[14] * h[14], a15 += x[15] * h[15];
    }
    a0 += a8, a1 += a9, a2 += a10, a3 += a11, a4 += a12, a5 += a13, a6 += a14, a7 += a15;
    a0 += a4, a1 += a5, a2 += a6, a3 += a7;
    return (a0 + a2) + (a1 + a3);
}

static void rs_reset(nrv_resampler_t *r) {
    r->len = r->taps ? r->taps / 2 - 1 : 0;
    if (r->len) memset(r->buf, 0, r->len * sizeof(float));
    r->pos = 0;
    r->phase = 0;
    r->total_in = 0;
    r->total_out = 0;
}

nrv_status nrv_resampler_create(int in_rate, int out_rate, nrv_resampler_t **out) {
    const char *fn = "nrv_resampler_create";
    NRV_REQUIRE_PTR(fn, out);
    if (in_rate < 1 || in_rate > NRV_RS_MAX_RATE)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: in_rate %d Hz outside [1, %d]", fn, in_rate, NRV_RS_MAX_RATE);
    if (out_rate < 1 || out_rate > NRV_RS_MAX_RATE)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: out_rate %d Hz outside [1, %d]", fn, out_rate, NRV_RS_MAX_RATE);

    uint64_t g = rs_gcd((uint64_t)in_rate, (uint64_t)out_rate);
    uint64_t up = (uint64_t)out_rate / g, down = (uint64_t)in_rate / g;
    uint64_t taps = 0, rows = 0, interp_p = 0;
    double fc = 0.0, beta = 0.0;
    if (up != down) {
        double ratio = (in_rate < out_rate ? (double)in_rate : (double)out_rate) / (double)in_rate;
        fc = 0.5 * (NRV_RS_PASS + NRV_RS_STOP) * ratio;
        double df = (NRV_RS_STOP - NRV_RS_PASS) * ratio;
        beta = 0.1102 * (NRV_RS_ATTEN_DB - 8.7);
        double width = (NRV_RS_ATTEN_DB - 7.95) / (2.285 * 2.0 * NRV_RS_PI * df);
        double k = ceil(width / NRV_RS_TAP_MULT) * NRV_RS_TAP_MULT;
        if (!(k <= (double)NRV_RS_MAX_TAPS))
            return nrv_fail(NRV_ERR_UNSUPPORTED,
                            "%s: %d -> %d Hz needs a filter of %.0f taps per output sample (limit %llu): "
                            "resample in two stages",
                            fn, in_rate, out_rate, k, (unsigned long long)NRV_RS_MAX_TAPS);
        taps = (uint64_t)k;
        if (up * taps <= NRV_RS_TABLE_MAX) {
            rows = up;
        } else {
            interp_p = 1;
            while (interp_p * 2 < up && (interp_p * 2 + 1) * taps <= NRV_RS_TABLE_MAX) interp_p *= 2;
            rows = interp_p + 1;
        }
    }

    /* One system allocation: [struct | table | buf], each part 64-byte aligned. */
    size_t block = taps > NRV_RS_MIN_BLOCK ? (size_t)taps : NRV_RS_MIN_BLOCK;
    size_t cap = (size_t)taps + block;
    size_t head = (sizeof(nrv_resampler_t) + 63) / 64 * 64;
    size_t table_bytes = ((size_t)(rows * taps) * sizeof(float) + 63) / 64 * 64;
    size_t buf_bytes = taps ? cap * sizeof(float) : 0;
    nrv_resampler_t *r = nrv_sys_alloc(64, head + table_bytes + buf_bytes);
    if (!r)
        return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for a %d -> %d Hz resampler", fn,
                        head + table_bytes + buf_bytes, in_rate, out_rate);
    memset(r, 0, sizeof *r);
    r->in_rate = in_rate;
    r->out_rate = out_rate;
    r->up = (uint32_t)up;
    r->down = (uint32_t)down;
    r->taps = (uint32_t)taps;
    r->rows = (uint32_t)rows;
    r->interp_p = (uint32_t)interp_p;
    r->step_q = (uint32_t)(down / up);
    r->step_p = (uint32_t)(down % up);
    r->fc = fc;
    r->beta = beta;
    r->table = taps ? (float *)((char *)r + head) : NULL;
    r->buf = taps ? (float *)((char *)r + head + table_bytes) : NULL;
    r->cap = taps ? cap : 0;
    r->block = block;

    if (taps) {
        double half = (double)taps / 2.0, i0_beta = rs_bessel_i0(beta);
        double denom = interp_p ? (double)interp_p : (double)up;
        for (uint64_t p = 0; p < rows; p++) {
            double f = (double)p / denom;
            float *row = r->table + p * taps;
            for (uint64_t j = 0; j < taps; j++)
                row[j] = (float)rs_kernel(f + half - 1.0 - (double)j, fc, beta, half, i0_beta);
        }
    }
    rs_reset(r);
    *out = r;
    return NRV_OK;
}

void nrv_resampler_free(nrv_resampler_t *r) { nrv_sys_free(r); }

nrv_status nrv_resampler_reset(nrv_resampler_t *r) {
    NRV_REQUIRE_PTR("nrv_resampler_reset", r);
    rs_reset(r);
    return NRV_OK;
}

/* Outputs whose window start offset floor((phase + k' M) / L) is <= d, for k' = 0, 1, ...:
 * floor((d L + L - 1 - phase) / M) + 1, or 0 for d < 0. UINT64_MAX if it overflows. */
static uint64_t rs_count_upto(const nrv_resampler_t *r, int64_t d) {
    if (d < 0) return 0;
    uint64_t a;
    if (nrv_mul_overflow((uint64_t)d, r->up, &a) || nrv_add_overflow(a, (uint64_t)(r->up - 1 - r->phase), &a))
        return UINT64_MAX;
    return a / r->down + 1;
}

/* Outputs a process call with n more input samples emits (UINT64_MAX on overflow). */
static uint64_t rs_process_count(const nrv_resampler_t *r, size_t n) {
    if (!r->taps) return (uint64_t)n;
    uint64_t end;
    if (nrv_add_overflow((uint64_t)r->len, (uint64_t)n, &end) || end > (uint64_t)INT64_MAX / 2) return UINT64_MAX;
    /* needs pos + offset + K <= end */
    return rs_count_upto(r, (int64_t)end - (int64_t)r->pos - (int64_t)r->taps);
}

/* Outputs flush emits now: those whose centre floor(t_k) = window start + K/2 - 1 is a
 * sample that arrived. */
static uint64_t rs_flush_count(const nrv_resampler_t *r) {
    if (!r->taps) return 0;
    return rs_count_upto(r, (int64_t)r->len - (int64_t)r->pos - (int64_t)(r->taps / 2));
}

size_t nrv_resampler_output_bound(const nrv_resampler_t *r, size_t n_in) {
    if (!r) return 0;
    uint64_t c = rs_process_count(r, n_in);
    return c > (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)c;
}

size_t nrv_resampler_flush_count(const nrv_resampler_t *r) {
    if (!r) return 0;
    return (size_t)rs_flush_count(r);
}

/* Appends the n samples of in (NULL: zeros) and emits up to max_out outputs into out.
 * Returns the number emitted. */
static size_t rs_run(nrv_resampler_t *r, const float *in, size_t n, float *out, size_t max_out) {
    const size_t K = r->taps;
    size_t produced = 0;
    for (;;) {
        while (produced < max_out && r->pos + K <= r->len) {
            const float *x = r->buf + r->pos;
            float y;
            if (!r->interp_p) {
                y = rs_dot(x, r->table + (size_t)r->phase * K, K);
            } else {
                uint64_t s = (uint64_t)r->phase * r->interp_p;
                uint64_t i = s / r->up;
                double w = (double)(s % r->up) / (double)r->up;
                float y0 = rs_dot(x, r->table + i * K, K);
                float y1 = rs_dot(x, r->table + (i + 1) * K, K);
                y = (float)((1.0 - w) * (double)y0 + w * (double)y1);
            }
            out[produced++] = y;
            r->pos += r->step_q;
            r->phase += r->step_p;
            if (r->phase >= r->up) {
                r->phase -= r->up;
                r->pos++;
            }
        }
        /* Drop what no later output reads. pos <= len always: an output's window lay inside
         * the data and the next starts at most step_q + 1 <= K samples later (K > 114 M / L). */
        if (r->pos) {
            memmove(r->buf, r->buf + r->pos, (r->len - r->pos) * sizeof(float));
            r->len -= r->pos;
            r->pos = 0;
        }
        if (n == 0) break;
        size_t take = r->cap - r->len;
        if (take > r->block) take = r->block;
        if (take > n) take = n;
        if (take == 0) break; /* cannot happen: the caller's count leaves room (checked there) */
        if (in) {
            memcpy(r->buf + r->len, in, take * sizeof(float));
            in += take;
        } else {
            memset(r->buf + r->len, 0, take * sizeof(float));
        }
        r->len += take;
        n -= take;
    }
    return produced;
}

nrv_status nrv_resampler_process(nrv_resampler_t *r, const float *in, size_t n_in, float *out, size_t out_cap,
                                 size_t *n_out) {
    const char *fn = "nrv_resampler_process";
    NRV_REQUIRE_PTR(fn, r);
    NRV_REQUIRE_PTR(fn, n_out);
    if (n_in) NRV_REQUIRE_PTR(fn, in);
    if (n_in > (size_t)PTRDIFF_MAX / sizeof(float))
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: n_in %zu samples overflow the address space", fn, n_in);
    uint64_t count = rs_process_count(r, n_in);
    if (count == UINT64_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %zu input samples at %d -> %d Hz overflow the output count; "
                        "pass the input in smaller pieces", fn, n_in, r->in_rate, r->out_rate);
    if (count > (uint64_t)out_cap)
        return nrv_fail(NRV_ERR_INVALID_ARG,
                        "%s: out_cap %zu is too small: %zu input samples give %llu output samples here "
                        "(size out with nrv_resampler_output_bound)",
                        fn, out_cap, n_in, (unsigned long long)count);
    if (count) NRV_REQUIRE_PTR(fn, out);
    size_t produced;
    if (!r->taps) {
        if (n_in) memcpy(out, in, n_in * sizeof(float));
        produced = n_in;
    } else {
        produced = rs_run(r, in, n_in, out, (size_t)count);
        if ((uint64_t)produced != count)
            return nrv_fail(NRV_ERR_INTERNAL, "%s: produced %zu samples, expected %llu", fn, produced,
                            (unsigned long long)count);
    }
    r->total_in += n_in;
    r->total_out += produced;
    *n_out = produced;
    return NRV_OK;
}

nrv_status nrv_resampler_flush(nrv_resampler_t *r, float *out, size_t out_cap, size_t *n_out) {
    const char *fn = "nrv_resampler_flush";
    NRV_REQUIRE_PTR(fn, r);
    NRV_REQUIRE_PTR(fn, n_out);
    uint64_t count = rs_flush_count(r);
    if (count > (uint64_t)out_cap)
        return nrv_fail(NRV_ERR_INVALID_ARG,
                        "%s: out_cap %zu is too small: the tail is %llu output samples "
                        "(size out with nrv_resampler_flush_count)",
                        fn, out_cap, (unsigned long long)count);
    if (count) NRV_REQUIRE_PTR(fn, out);
    size_t produced = 0;
    if (r->taps) {
        /* K/2 zeros past the end make exactly the outputs with floor(t_k) < N available. */
        produced = rs_run(r, NULL, r->taps / 2, out, (size_t)count);
        if ((uint64_t)produced != count)
            return nrv_fail(NRV_ERR_INTERNAL, "%s: produced %zu samples, expected %llu", fn, produced,
                            (unsigned long long)count);
    }
    *n_out = produced;
    rs_reset(r);
    return NRV_OK;
}

nrv_status nrv_resampler_info_get(const nrv_resampler_t *r, nrv_resampler_info *out) {
    const char *fn = "nrv_resampler_info_get";
    NRV_REQUIRE_PTR(fn, r);
    NRV_REQUIRE_PTR(fn, out);
    nrv_resampler_info info;
    memset(&info, 0, sizeof info);
    info.in_rate = r->in_rate;
    info.out_rate = r->out_rate;
    info.up = (int32_t)r->up;
    info.down = (int32_t)r->down;
    info.taps = (int32_t)r->taps;
    info.table_rows = (int32_t)r->rows;
    info.interp_phases = (int32_t)r->interp_p;
    info.latency = (int32_t)(r->taps / 2);
    double fmin = r->in_rate < r->out_rate ? (double)r->in_rate : (double)r->out_rate;
    info.cutoff_hz = r->fc * (double)r->in_rate;
    info.kaiser_beta = r->beta;
    if (r->taps) {
        info.passband_hz = NRV_RS_PASS * fmin;
        info.stopband_hz = NRV_RS_STOP * fmin;
        info.design_atten_db = NRV_RS_ATTEN_DB;
    }
    info.total_in = r->total_in;
    info.total_out = r->total_out;
    *out = info;
    return NRV_OK;
}

nrv_status nrv_resampler_filter(const nrv_resampler_t *r, float *taps, size_t cap, size_t *n) {
    const char *fn = "nrv_resampler_filter";
    NRV_REQUIRE_PTR(fn, r);
    NRV_REQUIRE_PTR(fn, n);
    size_t count = (size_t)r->rows * r->taps;
    if (cap < count)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: cap %zu is too small for the %u x %u table", fn, cap, r->rows,
                        r->taps);
    if (count) {
        NRV_REQUIRE_PTR(fn, taps);
        memcpy(taps, r->table, count * sizeof(float));
    }
    *n = count;
    return NRV_OK;
}
