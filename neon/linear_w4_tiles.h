/* linear_w4_tiles.h — what the two NEON w4a8 variants share (linear_w4_neon.c: smlal into
 * int16; linear_w4_dotprod.c: sdot): the group constants, a block's int8 weights and the
 * tile driver around a group-sum function. Included twice by each: first plainly (the
 * helpers and the tile shape), then with W4A8_GROUP defined as the file's group function
 *   AI void GROUP(int R, int NO, int packed, const int8_t *xq, int64_t in, int64_t G,
 *                 const uint8_t *const *qo, int64_t g, int live, int32x4_t t[][W4A8_NO])
 * (group g's sums Σ xq·q, 4 int32 lanes per (row, output); 0 when !live), which yields
 * w4a8_block for nrv_w4a8_neon_run. The includer defines AI and includes arm_neon.h, string.h,
 * math.h and kernels.h first. */
#ifndef W4A8_GROUP
#ifndef NERVE_LINEAR_W4_TILES_H
#define NERVE_LINEAR_W4_TILES_H

/* Tiles: rows per tile, outputs per tile for each row count (32 vector registers: per (row,
 * output) up to 3 group vectors and an accumulator, per row two x vectors, per output two
 * weight vectors). Not yet tuned on hardware (written and tested under qemu). */
#define W4A8_R 4
#define W4A8_NO 4
static const int w4a8_no_of_rows[W4A8_R + 1] = {0, 4, 2, 1, 1};

/* Scales and zero points of up to 4 groups of one output as floats (0 past gn). */
AI void group_consts4(const uint16_t *s, const int8_t *z, int gn, float32x4_t *sv, float32x4_t *zv) {
    uint16_t st[4] = {0, 0, 0, 0};
    int32_t zt[4] = {0, 0, 0, 0};
    memcpy(st, s, (size_t)gn * sizeof *s);
    if (z)
        for (int j = 0; j < gn; j++) zt[j] = z[j];
    *sv = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(st)));
    *zv = vcvtq_f32_s32(vld1q_s32(zt));
}


/* The int8 weights q = u - 8 of one block (k0..15 in lo, k16..31 in hi). */
AI void block_q(const int packed, const uint8_t *row, int64_t k0, int8x16_t *lo, int8x16_t *hi) {
    if (packed) {
        const uint8x16_t v = vld1q_u8(row + k0 / 2);
        const int8x16_t eight = vdupq_n_s8(8);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    } else {
        *lo = vld1q_s8((const int8_t *)row + k0);
        *hi = vld1q_s8((const int8_t *)row + k0 + 16);
    }
}

#endif /* NERVE_LINEAR_W4_TILES_H */
#else /* W4A8_GROUP: the tile driver */

/* Groups [g0, g0 + gn) (gn <= 4) of R rows x NO outputs into acc; the group vectors are
 * paired with addp as soon as two exist, so few stay live. */
AI void w4a8_chunk(const int R, const int NO, const int packed, const int gn, const int8_t *xq, int64_t in, int64_t G,
                 const uint8_t *const *qo, const uint16_t *const *so, const int8_t *const *zo, int64_t g0,
                 const float *xs, int64_t xst, float32x4_t acc[][W4A8_NO]) {
    int32x4_t p[2][W4A8_R][W4A8_NO];
    for (int h = 0; h < 2; h++) {
        int32x4_t ta[W4A8_R][W4A8_NO], tb[W4A8_R][W4A8_NO];
        W4A8_GROUP(R, NO, packed, xq, in, G, qo, g0 + 2 * h, 2 * h < gn, ta);
        W4A8_GROUP(R, NO, packed, xq, in, G, qo, g0 + 2 * h + 1, 2 * h + 1 < gn, tb);
        for (int r = 0; r < R; r++)
            for (int o = 0; o < NO; o++) p[h][r][o] = vpaddq_s32(ta[r][o], tb[r][o]);
    }
    for (int o = 0; o < NO; o++) {
        float32x4_t sv, zv;
        group_consts4(so[o] + g0, zo[o] ? zo[o] + g0 : NULL, gn, &sv, &zv);
        for (int r = 0; r < R; r++) {
            const int32x4_t tt = vpaddq_s32(p[0][r][o], p[1][r][o]); /* [T_g0 .. T_g0+3] */
            const float32x4_t d = vfmsq_f32(vcvtq_f32_s32(tt), zv, vld1q_f32(xs + r * xst + g0)); /* exact */
            acc[r][o] = vfmaq_f32(acc[r][o], sv, d);
        }
    }
}

AI void w4a8_tile(const int R, const int NO, const int packed, const int8_t *xq, const float *xs, int64_t xst,
                const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b, float *y, int64_t ldy) {
    const int64_t in = w->in, G = w->group, ng = in / G;
    const uint8_t *qo[W4A8_NO];
    const uint16_t *so[W4A8_NO];
    const int8_t *zo[W4A8_NO];
    nrv_w4_row_ptrs(w, o0, NO, qo, so, zo);
    float32x4_t acc[W4A8_R][W4A8_NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) acc[r][o] = vdupq_n_f32(0.0f);
    int64_t g0 = 0;
    for (; g0 + 4 <= ng; g0 += 4) w4a8_chunk(R, NO, packed, 4, xq, in, G, qo, so, zo, g0, xs, xst, acc);
    if (g0 < ng) w4a8_chunk(R, NO, packed, (int)(ng - g0), xq, in, G, qo, so, zo, g0, xs, xst, acc);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < NO; o++) y[r * ldy + o] = fmaf(vaddvq_f32(acc[r][o]), sx[r], b ? b[o0 + o] : 0.0f);
}

#define W4A8_CASE(R_, NO_)                                                                                      \
    case (R_) * 8 + (NO_):                                                                                    \
        if (packed) w4a8_tile(R_, NO_, 1, xq, xs, xst, sx, w, o0, b, y, ldy);                                   \
        else w4a8_tile(R_, NO_, 0, xq, xs, xst, sx, w, o0, b, y, ldy);                                          \
        return;

static __attribute__((noinline)) void w4a8_block(int R, int NO, const int8_t *xq, const float *xs, int64_t xst,
                                               const float *sx, const nrv_w4_weight *w, int64_t o0, const float *b,
                                               float *y, int64_t ldy) {
    const int packed = w->layout == NRV_W4_PACKED;
    switch (R * 8 + NO) { /* the shapes of w4a8_no_of_rows, and one output for the chunk tails */
        W4A8_CASE(1, 4)
        W4A8_CASE(1, 1)
        W4A8_CASE(2, 2)
        W4A8_CASE(2, 1)
        W4A8_CASE(3, 1)
        W4A8_CASE(4, 1)
    default: return;
    }
}

#undef W4A8_CASE
#undef W4A8_GROUP
#endif /* W4A8_GROUP */
