/* depthwise_q8_impl.h — the body of the depthwise_q8 kernel (kernels.h nrv_depthwise_q8_fn),
 * written once with GCC vector extensions over RQ_LANES lanes and instantiated per ISA: 4 lanes
 * in kernels/depthwise_q8.c (the reference: SSE2 / NEON), 8 in x86/depthwise_q8_avx2.c, 16 in
 * x86/depthwise_q8_avx512.c. Define RQ_LANES and DWQ8_NAME before including.
 *
 * The input is converted into floats x − xz, zero-padded and split into its stride phases
 * (phase r holds the padded columns sw·i + r), so that every tap of a run of outputs is one
 * vector load at consecutive addresses: a plane that fits 32 KiB of stack whole
 * (dwq8_whole_plane: every plane of a mobile CNN but the widest), else a ring of rows in
 * tiles of output columns, a row of outputs at a time. Four vectors of outputs are summed at
 * once (four independent FMA chains), requantized in registers (requant_lanes.h) and stored
 * as bytes. The sums are exact integers in fp32, so
 * neither the order of the taps nor the lane count changes a bit: every width gives the
 * reference's bytes. (Before this kernel a depthwise QLinearConv took four passes: codes to
 * floats, the fp32 depthwise conv, floats to int32, requantize.) */
#include <string.h>

#include "kernels.h"

#include "requant_lanes.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define DWQ8_L RQ_LANES
#define DWQ8_BLOCK 4             /* vectors of outputs summed at once */
#define DWQ8_RING_FLOATS 8192    /* 32 KiB of converted rows (or a whole plane) */
#define DWQ8_STAGE_BYTES 4096    /* a whole plane's outputs, pwq per row */
#define DWQ8_NO_ROW INT64_MIN    /* a ring slot holding no row */

typedef uint8_t dwq8_u8v __attribute__((vector_size(RQ_LANES)));

/* a·b + c: one FMA where the ISA has it (the file is built without contraction); the same
 * value as the product and the sum, which are exact integers here */
#if RQ_LANES == 16 && defined(__AVX512F__)
#define DWQ8_FMA(a, b, c) ((RQ_F)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#elif RQ_LANES == 8 && defined(__FMA__)
#define DWQ8_FMA(a, b, c) ((RQ_F)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#else
#define DWQ8_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline RQ_I dwq8_lane_index(void) {
    RQ_I v;
    for (int i = 0; i < RQ_LANES; i++) v[i] = i;
    return v;
}

/* A vector of exact sums requantized (requant's steps) to bytes (s8: two's complement). */
static inline dwq8_u8v dwq8_bytes(RQ_F sums, RQ_U bias, RQ_F scale, RQ_F lo, RQ_F hi, RQ_I z) {
    return __builtin_convertvector(rq_requant_v(__builtin_convertvector(sums, RQ_I), bias, scale, lo, hi, z), dwq8_u8v);
}

static inline RQ_F dwq8_load(const float *p) {
    RQ_F v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void dwq8_store(float *p, RQ_F v) { memcpy(p, &v, sizeof v); }

/* L codes at p as floats less xz (u8 or s8 codes: the integer values, exact). The widening
 * is the ISA's own instruction where there is one: GCC 12 lowers __builtin_convertvector
 * from bytes to int32 lane by lane (extracts and inserts: 40% of the kernel's time). */
static inline RQ_F dwq8_codes(const uint8_t *p, int x_signed, RQ_I xz) {
    RQ_I v;
#if RQ_LANES == 16 && defined(__AVX512F__)
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    v = (RQ_I)(x_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
#elif RQ_LANES == 8 && defined(__AVX2__)
    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
    v = (RQ_I)(x_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
#else
    for (int i = 0; i < RQ_LANES; i++) v[i] = x_signed ? (int32_t)(int8_t)p[i] : (int32_t)p[i];
#endif
    return __builtin_convertvector(v - xz, RQ_F);
}

/* The even and the odd lanes of the 2L values a, b (a stride-2 row's two column phases). */
#if RQ_LANES == 4
#define DWQ8_EVEN {0, 2, 4, 6}
#elif RQ_LANES == 8
#define DWQ8_EVEN {0, 2, 4, 6, 8, 10, 12, 14}
#elif RQ_LANES == 16
#define DWQ8_EVEN {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#else
#error "depthwise_q8_impl.h: RQ_LANES must be 4, 8 or 16"
#endif
static inline RQ_F dwq8_even(RQ_F a, RQ_F b) {
    const RQ_I even = DWQ8_EVEN;
    return __builtin_shuffle(a, b, even);
}

static inline RQ_F dwq8_odd(RQ_F a, RQ_F b) {
    const RQ_I even = DWQ8_EVEN;
    return __builtin_shuffle(a, b, even + 1);
}
#undef DWQ8_EVEN

static inline float dwq8_code(const uint8_t *p, int x_signed, int32_t xz) {
    return (float)((x_signed ? (int32_t)(int8_t)*p : (int32_t)*p) - xz);
}

/* The codes at p less xz, `left` of them (lanes from `left` on zero): one vector load when
 * `readable` bytes from p allow it, else a code at a time (the end of a plane). */
static inline RQ_F dwq8_codes_upto(const uint8_t *p, int64_t left, int64_t readable, int x_signed, RQ_I xzv,
                                   RQ_I lane) {
    if (left <= 0) return rq_splat_f(0.0f);
    if (readable >= DWQ8_L) {
        const RQ_I keep = lane < rq_splat_i((int32_t)(left < DWQ8_L ? left : DWQ8_L));
        return (RQ_F)((RQ_I)dwq8_codes(p, x_signed, xzv) & keep);
    }
    RQ_F v = rq_splat_f(0.0f);
    for (int k = 0; k < DWQ8_L && k < left; k++) v[k] = dwq8_code(p + k, x_signed, xzv[0]);
    return v;
}

/* a / d for a >= 0 and a stride d (1..NRV_DWQ8_MAX_STRIDE): a shift for 1, 2 and 4, as a
 * division cost more than converting a short row (7 and 14 wide planes) */
static inline int64_t dwq8_div(int64_t a, int64_t d) { return d == 1 ? a : d == 2 ? a >> 1 : d == 4 ? a >> 2 : a / d; }

/* Padded columns [c0, c0 + span) of input row xr into dst: phase r (padded column
 * c0 + sw·i + r at index i) at dst + r·phase_len, each phase's first `count` values written
 * (zeros where the padded column is outside the plane; count >= ceil(span / sw)). */
static void dwq8_convert_row(const nrv_dwq8_plane *g, const uint8_t *xr, int32_t xz, int64_t c0, int64_t span,
                             int64_t phase_len, int64_t count, float *dst) {
    const int64_t sw = g->sw;
    /* the plane's columns within the tile, as positions j = padded column − c0 */
    int64_t j0 = g->pl - c0, j1 = g->pl + g->w - c0;
    j0 = j0 < 0 ? 0 : j0;
    j1 = j1 > span ? span : j1;
    if (j1 < j0) j1 = j0;
    const uint8_t *src = xr + (c0 - g->pl); /* src[j]: the code at position j */
    const RQ_I xzv = rq_splat_i(xz);
    int64_t j = j0;
    if (sw == 1 && j1 - j0 >= DWQ8_L) {
        for (; j + DWQ8_L <= j1; j += DWQ8_L) dwq8_store(dst + j, dwq8_codes(src + j, g->x_signed, xzv));
        if (j < j1) /* the last vector ends at j1, rewriting a few values with themselves */
            dwq8_store(dst + j1 - DWQ8_L, dwq8_codes(src + j1 - DWQ8_L, g->x_signed, xzv));
        j = j1;
    } else if (sw == 2 && j1 - j0 >= 2 * DWQ8_L + 1) {
        /* two vectors of codes, split into the even and odd columns */
        if (j & 1) { /* start on an even position: its pair then splits at (j / 2) */
            dst[phase_len + j / 2] = dwq8_code(src + j, g->x_signed, xz);
            j++;
        }
        for (int64_t last = (j1 - 2 * DWQ8_L) & ~(int64_t)1;; j += 2 * DWQ8_L) {
            if (j > last) j = last; /* the last pair ends at or just before j1: rewrites values with themselves */
            const RQ_F a = dwq8_codes(src + j, g->x_signed, xzv), b = dwq8_codes(src + j + DWQ8_L, g->x_signed, xzv);
            dwq8_store(dst + j / 2, dwq8_even(a, b));
            dwq8_store(dst + phase_len + j / 2, dwq8_odd(a, b));
            if (j == last) break;
        }
        j += 2 * DWQ8_L; /* at most one code left (j1 odd past the last pair) */
    }
    /* the rest a code at a time, walking the phases without a division per code */
    for (int64_t i = dwq8_div(j, sw), r = j - i * sw; j < j1; j++) {
        dst[r * phase_len + i] = dwq8_code(src + j, g->x_signed, xz);
        if (++r == sw) r = 0, i++;
    }
    for (int64_t r = 0; r < sw; r++) { /* zeros before and after the plane's values (a few) */
        float *ph = dst + r * phase_len;
        const int64_t lo = j0 > r ? dwq8_div(j0 - r + sw - 1, sw) : 0, hi = j1 > r ? dwq8_div(j1 - r + sw - 1, sw) : 0;
        for (int64_t i = 0; i < lo; i++) ph[i] = 0.0f;
        int64_t i = hi;
        for (; i + DWQ8_L <= count; i += DWQ8_L) dwq8_store(ph + i, rq_splat_f(0.0f));
        for (; i < count; i++) ph[i] = 0.0f;
    }
}

/* The sums of nb (1..DWQ8_BLOCK, a constant at each call) vectors of outputs from base: tap
 * t's values (weight w[t]) at base + at[t], for the taps inside the plane. */
static inline __attribute__((always_inline)) void dwq8_tap_sums(const int nb, const float *base, const int64_t *at,
                                                                const float *w, int64_t taps, RQ_F *acc) {
    RQ_F a0 = rq_splat_f(0.0f), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t t = 0; t < taps; t++) {
        const float *p = base + at[t];
        const RQ_F wv = rq_splat_f(w[t]);
        a0 = DWQ8_FMA(wv, dwq8_load(p), a0);
        if (nb > 1) a1 = DWQ8_FMA(wv, dwq8_load(p + DWQ8_L), a1);
        if (nb > 2) a2 = DWQ8_FMA(wv, dwq8_load(p + 2 * DWQ8_L), a2);
        if (nb > 3) a3 = DWQ8_FMA(wv, dwq8_load(p + 3 * DWQ8_L), a3);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* A plane small enough to convert whole (most of a mobile CNN's): x − xz, zero-padded, as
 * its sh·sw stride phases (phase (ry, rx) holds the padded rows sh·i + ry and columns
 * sw·j + rx, phq x pwq values, planes `stride` floats apart), then the outputs as one run of
 * oh·pwq positions (pwq − ow of each row's are thrown away), four vectors at a time with
 * every tap one load: rows of 7 or 14 outputs no longer take a vector (and a chain of FMAs)
 * each. Returns 0, doing nothing, when the plane does not fit the buffers. */
static int dwq8_whole_plane(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w, RQ_U bias_v,
                            RQ_F scale_v, RQ_F lo_v, RQ_F hi_v, RQ_I z_v, uint8_t *y, float *buf, uint8_t *stage) {
    const int64_t sh = g->sh, sw = g->sw, taps = g->kh * g->kw;
    const int64_t phq = g->oh + (g->kh - 1) * g->dh / sh, pwq = g->ow + (g->kw - 1) * g->dw / sw;
    const int64_t n = g->oh * pwq, vecs = (n + DWQ8_L - 1) / DWQ8_L;
    /* a load reaches (kw − 1)·dw / sw + L − 1 floats past a phase's phq·pwq values: zeros */
    const int64_t stride = (phq * pwq + (g->kw - 1) * g->dw / sw + DWQ8_L + DWQ8_L - 1) / DWQ8_L * DWQ8_L;
    if (sh * sw * stride > DWQ8_RING_FLOATS || vecs * DWQ8_L > DWQ8_STAGE_BYTES) return 0;
    if (sw == 1) {
        /* all zeros, then each row's codes a vector at a time, the lanes past the row zero:
         * rows go in order, so what a vector writes past its row (zeros) lands on padding or
         * on a later row's place, rewritten after (rows of 7 or 14 codes: one vector each) */
        for (int64_t i = 0; i < sh * stride; i += DWQ8_L) dwq8_store(buf + i, rq_splat_f(0.0f));
        const RQ_I xzv = rq_splat_i(xz), lane = dwq8_lane_index();
        for (int64_t ry = 0; ry < sh; ry++)
            for (int64_t i = 0; i < phq; i++) {
                const int64_t iy = sh * i + ry - g->pt;
                if (iy < 0 || iy >= g->h) continue;
                const uint8_t *src = x + iy * g->w;
                float *dst = buf + ry * stride + i * pwq + g->pl;
                for (int64_t c = 0; c < g->w; c += DWQ8_L)
                    dwq8_store(dst + c, dwq8_codes_upto(src + c, g->w - c, (g->h - iy) * g->w - c, g->x_signed, xzv,
                                                        lane));
            }
    } else if (sw == 2) {
        /* each row's codes two vectors at a time (lanes past the row zero), split in
         * registers into the even and odd input columns, which are padded columns
         * 2m + pl and 2m + 1 + pl: stored at their phases' places, as above (a split
         * through a line on the stack stalled each load on the stores before it) */
        for (int64_t i = 0; i < sh * 2 * stride; i += DWQ8_L) dwq8_store(buf + i, rq_splat_f(0.0f));
        const RQ_I xzv = rq_splat_i(xz), lane = dwq8_lane_index();
        const int64_t even_phase = g->pl & 1, even_at = g->pl >> 1, odd_at = (g->pl + 1) >> 1;
        for (int64_t ry = 0; ry < sh; ry++)
            for (int64_t i = 0; i < phq; i++) {
                const int64_t iy = sh * i + ry - g->pt;
                if (iy < 0 || iy >= g->h) continue;
                const uint8_t *src = x + iy * g->w;
                float *row0 = buf + ry * 2 * stride + i * pwq;
                float *even_row = row0 + even_phase * stride + even_at;
                float *odd_row = row0 + (1 - even_phase) * stride + odd_at;
                const int64_t readable = (g->h - iy) * g->w;
                for (int64_t c = 0; c < g->w; c += 2 * DWQ8_L) {
                    const RQ_F a = dwq8_codes_upto(src + c, g->w - c, readable - c, g->x_signed, xzv, lane);
                    const RQ_F b = dwq8_codes_upto(src + c + DWQ8_L, g->w - c - DWQ8_L, readable - c - DWQ8_L,
                                                   g->x_signed, xzv, lane);
                    dwq8_store(even_row + c / 2, dwq8_even(a, b));
                    dwq8_store(odd_row + c / 2, dwq8_odd(a, b));
                }
            }
    } else {
        for (int64_t ry = 0; ry < sh; ry++)
            for (int64_t i = 0; i < phq; i++) {
                float *dst = buf + ry * sw * stride + i * pwq;
                const int64_t iy = sh * i + ry - g->pt;
                if (iy >= 0 && iy < g->h)
                    dwq8_convert_row(g, x + iy * g->w, xz, 0, sw * pwq, stride, pwq, dst);
                else
                    for (int64_t rx = 0; rx < sw; rx++) memset(dst + rx * stride, 0, (size_t)pwq * sizeof(float));
            }
        for (int64_t ph = 0; ph < sh * sw; ph++)
            memset(buf + ph * stride + phq * pwq, 0, (size_t)(stride - phq * pwq) * sizeof(float));
    }
    int64_t at[NRV_DWQ8_MAX_REACH * NRV_DWQ8_MAX_REACH]; /* tap t's first value in buf */
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t kx = 0; kx < g->kw; kx++) {
            const int64_t oy = ky * g->dh, ox = kx * g->dw, qy = dwq8_div(oy, sh), qx = dwq8_div(ox, sw);
            at[ky * g->kw + kx] = ((oy - qy * sh) * sw + ox - qx * sw) * stride + qy * pwq + qx;
        }
    for (int64_t v0 = 0; v0 < vecs; v0 += DWQ8_BLOCK) {
        RQ_F acc[DWQ8_BLOCK];
        if (vecs - v0 >= DWQ8_BLOCK) dwq8_tap_sums(4, buf + v0 * DWQ8_L, at, w, taps, acc);
        else /* the last one to three vectors (the loads stay inside the zeroed tail) */
            dwq8_tap_sums(3, buf + v0 * DWQ8_L, at, w, taps, acc);
        for (int64_t b = 0; b < DWQ8_BLOCK && v0 + b < vecs; b++) {
            const dwq8_u8v bytes = dwq8_bytes(acc[b], bias_v, scale_v, lo_v, hi_v, z_v);
            memcpy(stage + (v0 + b) * DWQ8_L, &bytes, sizeof bytes);
        }
    }
    for (int64_t oy = 0; oy < g->oh; oy++) memcpy(y + oy * g->ow, stage + oy * pwq, (size_t)g->ow);
    return 1;
}

void DWQ8_NAME(const nrv_dwq8_plane *g, const uint8_t *x, int32_t xz, const float *w, int32_t bias, float scale,
               float lo, float hi, int32_t z, uint8_t *y) {
    if (g->oh <= 0 || g->ow <= 0) return;
    _Alignas(64) float ring[DWQ8_RING_FLOATS];
    const RQ_U bias_v = (RQ_U)rq_splat_i(bias);
    const RQ_F scale_v = rq_splat_f(scale), lo_v = rq_splat_f(lo), hi_v = rq_splat_f(hi);
    const RQ_I z_v = rq_splat_i(z);
    {
        _Alignas(64) uint8_t stage[DWQ8_STAGE_BYTES];
        if (dwq8_whole_plane(g, x, xz, w, bias_v, scale_v, lo_v, hi_v, z_v, y, ring, stage)) return;
    }
    /* wider planes: a ring of converted rows, a row of outputs at a time */
    int64_t slot_row[NRV_DWQ8_MAX_REACH];
    const int64_t sw = g->sw, slots = (g->kh - 1) * g->dh + 1, reach_w = (g->kw - 1) * g->dw;
    /* a phase holds the tile's vectors of outputs plus the taps' reach past them */
    const int64_t phase_max = DWQ8_RING_FLOATS / (slots * sw) / DWQ8_L * DWQ8_L;
    int64_t tile = (phase_max - reach_w / sw - 1) / DWQ8_L * DWQ8_L;
    if (tile > g->ow) tile = g->ow;
    for (int64_t ox0 = 0; ox0 < g->ow; ox0 += tile) {
        const int64_t tw = g->ow - ox0 < tile ? g->ow - ox0 : tile;
        const int64_t vecs = (tw + DWQ8_L - 1) / DWQ8_L, c0 = sw * ox0;
        const int64_t span = sw * (tw - 1) + reach_w + 1;
        const int64_t phase_len = (vecs * DWQ8_L + reach_w / sw + 1 + DWQ8_L - 1) / DWQ8_L * DWQ8_L;
        const int64_t row_floats = sw * phase_len;
        int64_t col_at[NRV_DWQ8_MAX_REACH]; /* tap column kx's first value in a ring row */
        for (int64_t kx = 0; kx < g->kw; kx++) col_at[kx] = (kx * g->dw % sw) * phase_len + kx * g->dw / sw;
        int64_t tap_at[NRV_DWQ8_MAX_REACH * NRV_DWQ8_MAX_REACH];
        float tap_w[NRV_DWQ8_MAX_REACH * NRV_DWQ8_MAX_REACH];
        for (int64_t s = 0; s < slots; s++) slot_row[s] = DWQ8_NO_ROW;
        /* input row iy lives in ring slot iy mod slots; first_slot follows the first kernel
         * row's slot from one output row to the next (no division per row) */
        int64_t first_slot = ((-g->pt) % slots + slots) % slots;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t taps = 0; /* this row's taps inside the plane: where their values start in the ring */
            for (int64_t ky = 0, slot = first_slot; ky < g->kh; ky++) {
                const int64_t iy = oy * g->sh + ky * g->dh - g->pt;
                if (iy >= 0 && iy < g->h) {
                    if (slot_row[slot] != iy) {
                        float *row = ring + slot * row_floats;
                        dwq8_convert_row(g, x + iy * g->w, xz, c0, span, phase_len, phase_len, row);
                        slot_row[slot] = iy;
                    }
                    for (int64_t kx = 0; kx < g->kw; kx++, taps++)
                        tap_at[taps] = slot * row_floats + col_at[kx], tap_w[taps] = w[ky * g->kw + kx];
                }
                slot += g->dh;
                if (slot >= slots) slot -= slots;
            }
            first_slot += g->sh % slots;
            if (first_slot >= slots) first_slot -= slots;
            uint8_t *yr = y + oy * g->ow + ox0;
            for (int64_t v0 = 0; v0 < vecs; v0 += DWQ8_BLOCK) {
                const int64_t nb = vecs - v0 < DWQ8_BLOCK ? vecs - v0 : DWQ8_BLOCK;
                RQ_F acc[DWQ8_BLOCK];
                const float *base = ring + v0 * DWQ8_L;
                switch (nb) { /* the count of vectors a constant in each copy: the sums stay in registers */
                case 4: dwq8_tap_sums(4, base, tap_at, tap_w, taps, acc); break;
                case 3: dwq8_tap_sums(3, base, tap_at, tap_w, taps, acc); break;
                case 2: dwq8_tap_sums(2, base, tap_at, tap_w, taps, acc); break;
                default: dwq8_tap_sums(1, base, tap_at, tap_w, taps, acc); break;
                }
                for (int64_t b = 0; b < nb; b++) {
                    const dwq8_u8v bytes = dwq8_bytes(acc[b], bias_v, scale_v, lo_v, hi_v, z_v);
                    const int64_t at = (v0 + b) * DWQ8_L;
                    if (tw - at >= DWQ8_L) memcpy(yr + at, &bytes, sizeof bytes);
                    else memcpy(yr + at, &bytes, (size_t)(tw - at));
                }
            }
        }
    }
}

#undef DWQ8_L
#undef DWQ8_FMA
#undef DWQ8_BLOCK
#undef DWQ8_RING_FLOATS
#undef DWQ8_STAGE_BYTES
#undef DWQ8_NO_ROW
#undef RQ_F
#undef RQ_I
#undef RQ_U
#undef RQ_CAT
#undef RQ_CAT2
