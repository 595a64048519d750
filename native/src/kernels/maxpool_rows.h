/* maxpool_rows.h — maxpool_impl.h's "down" and "across" for one element kind, included once
 * per kind (no include guard) with MP_SFX (the names' suffix), MP_T (the element), MP_V (its
 * vector), MP_W (lanes a vector) and the mpk_*MP_SFX vocabulary defined before. */
#define MP_CAT2(a, b) a##b
#define MP_CAT(a, b) MP_CAT2(a, b)
#define MPF(name) MP_CAT(name, MP_SFX)

/* v[0, span + 2·MP_W) ← the block's columns [c0, c0 + span) folded down the nr rows from
 * first (iw apart), the padding columns the identity */
static inline __attribute__((always_inline)) void MPF(mp_down_k)(const MP_T *first, const int64_t nr, int64_t iw,
                                                                 int64_t c0, int64_t span, MP_T *v, uint8_t flip) {
    const MP_V ident = MPF(mpk_ident)();
    int64_t a, b;
    mp_real(c0, span, iw, &a, &b);
    for (int64_t c = 0; c < a; c += MP_W) MPF(mpk_store)(v + c, ident); /* before the real columns overwrite a's tail */
    const int64_t n = b - a;
    const MP_T *x = first + c0 + a;
    int64_t c = 0;
    for (; c + MP_W <= n; c += MP_W) {
        MP_V m = ident;
        for (int64_t r = 0; r < nr; r++) m = MPF(mpk_max)(MPF(mpk_load)(x + r * iw + c, flip), m);
        MPF(mpk_store)(v + a + c, m);
    }
    if (c < n) {
        MP_V m = ident;
        for (int64_t r = 0; r < nr; r++) m = MPF(mpk_max)(MPF(mpk_load_part)(x + r * iw + c, n - c, flip), m);
        MPF(mpk_store)(v + a + c, m);
    }
    for (c = b; c < span + 2 * MP_W; c += MP_W) MPF(mpk_store)(v + c, ident); /* stride 2 reads up to span + 2·MP_W - 2 */
}

/* the common window heights unrolled (on narrow rows the fold's loop is most of the work) */
static void MPF(mp_down)(const MP_T *first, int64_t nr, int64_t iw, int64_t c0, int64_t span, MP_T *v, uint8_t flip) {
    if (nr == 2) MPF(mp_down_k)(first, 2, iw, c0, span, v, flip);
    else if (nr == 3) MPF(mp_down_k)(first, 3, iw, c0, span, v, flip);
    else MPF(mp_down_k)(first, nr, iw, c0, span, v, flip);
}

/* y[0, ob) ← each output's kw neighbours along v, stride s */
static inline __attribute__((always_inline)) void MPF(mp_across_k)(const MP_T *v, const int64_t kw, int64_t s,
                                                                   int64_t ob, MP_T *y, uint8_t flip) {
    const MP_V ident = MPF(mpk_ident)();
    if (s == 1) {
        for (int64_t o = 0; o < ob; o += MP_W) {
            MP_V m = ident;
            for (int64_t i = 0; i < kw; i++) m = MPF(mpk_max)(MPF(mpk_load)(v + o + i, 0), m);
            MPF(mpk_out)(y + o, m, ob - o, flip);
        }
    } else if (s == 2) {
        for (int64_t o = 0; o < ob; o += MP_W) {
            const MP_T *p = v + 2 * o;
            MP_V m = ident;
            int64_t i = 0;
            for (; i + 1 < kw; i += 2) {
                const MP_V lo = MPF(mpk_load)(p + i, 0), hi = MPF(mpk_load)(p + i + MP_W, 0);
                m = MPF(mpk_max)(MPF(mpk_evens)(lo, hi), m);
                m = MPF(mpk_max)(MPF(mpk_odds)(lo, hi), m);
            }
            if (i < kw) m = MPF(mpk_max)(MPF(mpk_evens)(MPF(mpk_load)(p + i, 0), MPF(mpk_load)(p + i + MP_W, 0)), m);
            MPF(mpk_out)(y + o, m, ob - o, flip);
        }
    } else {
        for (int64_t o = 0; o < ob; o++) {
            MP_T m = MPF(mpk_scalar_ident)();
            for (int64_t i = 0; i < kw; i++) m = v[o * s + i] > m ? v[o * s + i] : m;
            y[o] = MPF(mpk_scalar_out)(m, flip);
        }
    }
}

static void MPF(mp_across)(const MP_T *v, int64_t kw, int64_t s, int64_t ob, MP_T *y, uint8_t flip) {
    if (kw == 2) MPF(mp_across_k)(v, 2, s, ob, y, flip);
    else if (kw == 3) MPF(mp_across_k)(v, 3, s, ob, y, flip);
    else MPF(mp_across_k)(v, kw, s, ob, y, flip);
}

#undef MPF
#undef MP_CAT
#undef MP_CAT2
#undef MP_SFX
#undef MP_T
#undef MP_V
#undef MP_W
