/* maxpool_impl.h — the op "maxpool" (kernels.h, nrv_maxpool_fn) at VL floats or VB bytes a
 * vector, written once against the small SIMD vocabulary of x86/simd_avx2.h (vf, vload,
 * vmax, vevens, the vb_ byte vectors, ...) and instantiated by x86/pool_avx2.c,
 * x86/pool_avx512.c and neon/pool_neon.c, which define it and MP_NAME before including.
 * The row folds are spelt once for both element kinds (maxpool_rows.h, over the mpk_
 * adapters below).
 *
 * Separable, a block of output columns at a time (a whole output row when it fits, as it
 * nearly always does): "down" folds each column the block reads over the window's rows
 * inside the plane into a row v on the stack, its padding columns (left of the plane, past
 * its end) set to the fold's identity; "across" folds each output's kw neighbours along v.
 * nr + kw folds per output column instead of nr·kw, at full vector width, with no edge case.
 * Stride 1 reads v at kw shifts; stride 2 splits it into its even and odd columns
 * (vevens / vodds), so taps 2j and 2j + 1 take the same pair of loads at shift 2j; larger
 * strides fold across one output at a time. v runs 2 vectors past the block in identity, so
 * the last vector of outputs reads only initialised values; its extra lanes are not stored.
 *
 * When rows fit one block, row oy + MP_AHEAD goes down before row oy goes across (a ring of
 * v rows): across reads v at shifts of what down stored, and a load that straddles stores
 * still in flight cannot be forwarded (measured over 28-column rows: with across right
 * after down, half the kernel's time stalled on such loads; one row ahead, a third).
 *
 * Floats fold with vmax(x, m), which keeps m when x is NaN: the reference's
 * m = x > m ? x : m from -FLT_MAX. int8 codes are flipped to uint8 order (x ^ 0x80) on
 * load and back on store, so both byte types share the unsigned fold, from 0. */
#include <float.h>
#include <string.h>

#include "kernels.h"

#define MP_SPAN 2048 /* columns of v a block holds */
#define MP_BUF (MP_SPAN + 4 * 64) /* elements of the v rows: one block, or up to MP_AHEAD + 1 rows */
#define MP_AHEAD 6                /* rows that go down before one goes across */

/* The block's columns [c0, c0 + span) of a plane row iw long: v[a, b) are real
 * (a = max(0, -c0), b = min(span, iw - c0)), the rest padding; a = b when none is. */
static inline void mp_real(int64_t c0, int64_t span, int64_t iw, int64_t *a, int64_t *b) {
    *a = c0 < 0 ? -c0 : 0;
    *b = iw - c0 < span ? iw - c0 : span;
    if (*a > span) *a = span;
    if (*b < *a) *b = *a;
}

/* ---- one vocabulary for both element kinds (flip: 0 for floats and uint8, 0x80 for int8),
 * so maxpool_rows.h spells down and across once, included once per kind */

static inline vf mpk_ident_f32(void) { return vset1(-FLT_MAX); }
static inline vf mpk_load_f32(const float *p, uint8_t flip) { return (void)flip, vload(p); }
static inline vf mpk_load_part_f32(const float *p, int64_t n, uint8_t flip) {
    return (void)flip, vload_tail_or(p, vtail_mask(n), vset1(-FLT_MAX)); /* a lane past n: the identity */
}
static inline vf mpk_max_f32(vf x, vf m) { return vmax(x, m); }
static inline vf mpk_evens_f32(vf a, vf b) { return vevens(a, b); }
static inline vf mpk_odds_f32(vf a, vf b) { return vodds(a, b); }
static inline void mpk_store_f32(float *p, vf v) { vstore(p, v); }
static inline void mpk_out_f32(float *y, vf m, int64_t n, uint8_t flip) {
    (void)flip;
    if (n >= VL) vstore(y, m);
    else vstore_tail(y, vtail_mask(n), m);
}
static inline float mpk_scalar_ident_f32(void) { return -FLT_MAX; }
static inline float mpk_scalar_out_f32(float m, uint8_t flip) { return (void)flip, m; }

static inline vbytes mpk_ident_bytes(void) { return vb_set1(0); } /* the lowest flipped code */
static inline vbytes mpk_load_bytes(const uint8_t *p, uint8_t flip) { return vb_xor(vb_load(p), vb_set1(flip)); }
static inline vbytes mpk_load_part_bytes(const uint8_t *p, int64_t n, uint8_t flip) {
    return vb_xor(vb_load_part(p, n), vb_set1(flip)); /* lanes past n are overwritten by the identity */
}
static inline vbytes mpk_max_bytes(vbytes x, vbytes m) { return vb_max_u8(x, m); }
static inline vbytes mpk_evens_bytes(vbytes a, vbytes b) { return vb_evens(a, b); }
static inline vbytes mpk_odds_bytes(vbytes a, vbytes b) { return vb_odds(a, b); }
static inline void mpk_store_bytes(uint8_t *p, vbytes v) { vb_store(p, v); }
static inline void mpk_out_bytes(uint8_t *y, vbytes m, int64_t n, uint8_t flip) {
    m = vb_xor(m, vb_set1(flip));
    if (n >= VB) vb_store(y, m);
    else vb_store_part(y, m, n);
}
static inline uint8_t mpk_scalar_ident_bytes(void) { return 0; }
static inline uint8_t mpk_scalar_out_bytes(uint8_t m, uint8_t flip) { return (uint8_t)(m ^ flip); }

#define MP_SFX _f32
#define MP_T float
#define MP_V vf
#define MP_W VL
#include "maxpool_rows.h"

#define MP_SFX _bytes
#define MP_T uint8_t
#define MP_V vbytes
#define MP_W VB
#include "maxpool_rows.h"

/* ---- the planes */

/* Output row oy's window rows inside the plane: the first one's offset, and how many. */
static inline int64_t mp_rows(const nrv_dw_geom *g, int64_t oy, int64_t *nr) {
    const int64_t y0 = oy * g->sh - g->ph, lo = y0 < 0 ? -y0 : 0, hi = g->ih - y0 < g->kh ? g->ih - y0 : g->kh;
    *nr = hi > lo ? hi - lo : 0;
    return *nr ? (y0 + lo) * g->iw : 0;
}

/* One plane; esz 4 (floats) or 1 (codes, flipped by flip); v holds MP_BUF elements, lanes the
 * vector width in elements. */
static inline __attribute__((always_inline)) void mp_plane(const nrv_dw_geom *g, const char *x, char *y, char *v,
                                                           const int64_t lanes, const int esz, uint8_t flip) {
    const int64_t iw = g->iw, ow = g->ow, kw = g->kw, s = g->sw, per = (MP_SPAN - kw) / s + 1;
#define MP_DOWN(first, nr, c0, span, vrow)                                                                    \
    (esz == 4 ? mp_down_f32((const float *)(x) + (first), nr, iw, c0, span, (float *)(vrow), flip)           \
              : mp_down_bytes((const uint8_t *)(x) + (first), nr, iw, c0, span, (uint8_t *)(vrow), flip))
#define MP_ACROSS(vrow, ob, yrow)                                                                             \
    (esz == 4 ? mp_across_f32((const float *)(vrow), kw, s, ob, (float *)(yrow), flip)                        \
              : mp_across_bytes((const uint8_t *)(vrow), kw, s, ob, (uint8_t *)(yrow), flip))
    const int64_t span = (ow - 1) * s + kw, vlen = span + 4 * lanes;
    int64_t depth = ow <= per ? MP_BUF / vlen : 0;
    if (depth > MP_AHEAD + 1) depth = MP_AHEAD + 1;
    if (depth >= 2) { /* one block a row: down row oy, across row oy - (depth - 1) */
        for (int64_t oy = 0; oy < g->oh + depth - 1; oy++) {
            if (oy < g->oh) {
                int64_t nr;
                const int64_t first = mp_rows(g, oy, &nr);
                MP_DOWN(first, nr, -g->pw, span, v + oy % depth * vlen * esz);
            }
            const int64_t ry = oy - (depth - 1);
            if (ry >= 0) MP_ACROSS(v + ry % depth * vlen * esz, ow, y + ry * ow * esz);
        }
        return;
    }
    for (int64_t oy = 0; oy < g->oh; oy++) {
        int64_t nr;
        const int64_t first = mp_rows(g, oy, &nr);
        for (int64_t o0 = 0; o0 < ow; o0 += per) {
            const int64_t ob = ow - o0 < per ? ow - o0 : per;
            MP_DOWN(first, nr, o0 * s - g->pw, (ob - 1) * s + kw, v);
            MP_ACROSS(v, ob, y + (oy * ow + o0) * esz);
        }
    }
#undef MP_DOWN
#undef MP_ACROSS
}

void MP_NAME(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y) {
    if (g->kw + g->sw > MP_SPAN) { /* a window wider than a block: the reference folds it */
        nrv_maxpool_ref(dtype, g, planes, x, y);
        return;
    }
    const int64_t in = g->ih * g->iw, out = g->oh * g->ow;
    if (dtype == NRV_F32) {
        float v[MP_BUF];
        for (int64_t p = 0; p < planes; p++)
            mp_plane(g, (const char *)((const float *)x + p * in), (char *)((float *)y + p * out), (char *)v, VL, 4, 0);
    } else {
        uint8_t v[MP_BUF];
        const uint8_t flip = dtype == NRV_I8 ? 0x80 : 0;
        for (int64_t p = 0; p < planes; p++)
            mp_plane(g, (const char *)x + p * in, (char *)y + p * out, (char *)v, VB, 1, flip);
    }
}

#undef MP_SPAN
#undef MP_BUF
#undef MP_AHEAD
