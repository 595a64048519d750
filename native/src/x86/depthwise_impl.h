/* depthwise_impl.h — the depthwise taps (nrv_depthwise_fn, kernels.h) with VL-lane vectors
 * and FMA, written once against the vector layer (depthwise_avx2.c / depthwise_avx512.c).
 *
 * A register block of R output rows x V vectors of columns (8 accumulators: V = 1..4
 * vectors of a row, R = 8, 4, 2, 2 rows; wider rows in pieces of 4 vectors) takes every
 * tap with its weight broadcast once, so 8 independent FMA chains hide the FMA latency (the
 * reference's two chains of 49 taps ran latency-bound at 4 lanes). The last vector of a
 * row is masked: nothing past column ow is read (beyond the tap's offset) or written. */
#include "x86_kernels.h"

#define DW_ACC 8

static inline __attribute__((always_inline)) void dw_block(const int R, const int V, const float *plane,
                                                           int64_t row_step, int64_t ow, const int64_t *off,
                                                           int64_t taps, const vf *wv, float bias, float *y,
                                                           int64_t ldy, int64_t oy) {
    const vtail last = vtail_mask(ow - (int64_t)(V - 1) * VL); /* lanes of the row's last vector */
    vf acc[DW_ACC];
    for (int i = 0; i < R * V; i++) acc[i] = vset1(bias);
    for (int64_t k = 0; k < taps; k++) {
        const vf wk = wv[k];
        for (int r = 0; r < R; r++) {
            const float *src = plane + (oy + r) * row_step + off[k];
            for (int v = 0; v < V; v++) {
                const vf xv = v + 1 < V ? vload(src + v * VL) : vload_tail(src + v * VL, last);
                acc[r * V + v] = vfmadd(wk, xv, acc[r * V + v]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float *yr = y + (oy + r) * ldy;
        for (int v = 0; v + 1 < V; v++) vstore(yr + v * VL, acc[r * V + v]);
        vstore_tail(yr + (V - 1) * VL, last, acc[r * V + V - 1]);
    }
}

/* R rows (a constant 1..8 at each call) of V vectors from row oy. */
#define DW_ROWS(V_, R_) dw_block(R_, V_, plane, row_step, cols, off, taps, wv, bias, y, ldy, oy)
static __attribute__((noinline)) void dw_rows(int V, int R, const float *plane, int64_t row_step, int64_t cols,
                                              const int64_t *off, int64_t taps, const vf *wv, float bias, float *y,
                                              int64_t ldy, int64_t oy) {
    switch (V * 8 + R) {
    case 8 + 8: DW_ROWS(1, 8); break;
    case 8 + 7: DW_ROWS(1, 7); break;
    case 8 + 6: DW_ROWS(1, 6); break;
    case 8 + 5: DW_ROWS(1, 5); break;
    case 8 + 4: DW_ROWS(1, 4); break;
    case 8 + 3: DW_ROWS(1, 3); break;
    case 8 + 2: DW_ROWS(1, 2); break;
    case 8 + 1: DW_ROWS(1, 1); break;
    case 16 + 4: DW_ROWS(2, 4); break;
    case 16 + 3: DW_ROWS(2, 3); break;
    case 16 + 2: DW_ROWS(2, 2); break;
    case 16 + 1: DW_ROWS(2, 1); break;
    case 24 + 2: DW_ROWS(3, 2); break;
    case 24 + 1: DW_ROWS(3, 1); break;
    case 32 + 2: DW_ROWS(4, 2); break;
    default: DW_ROWS(4, 1); break;
    }
}
#undef DW_ROWS

void X86FN(nrv_depthwise)(const float *plane, int64_t row_step, int64_t oh, int64_t ow, const int64_t *tap_off,
                          int64_t taps, const float *w, float bias, float *y) {
    vf wv[NRV_DW_MAX_TAPS];
    for (int64_t k = 0; k < taps; k++) wv[k] = vset1(w[k]);
    /* a row wider than 4 vectors goes in pieces of 4 vectors (plane and y offset views) */
    for (int64_t x0 = 0; x0 < ow; x0 += 4 * VL) {
        const int64_t cols = ow - x0 < 4 * VL ? ow - x0 : 4 * VL;
        const int V = (int)((cols + VL - 1) / VL), R = DW_ACC / (V < 3 ? V : 4);
        for (int64_t oy = 0; oy < oh; oy += R)
            dw_rows(V, oh - oy < R ? (int)(oh - oy) : R, plane + x0, row_step, cols, tap_off, taps, wv, bias, y + x0,
                    ow, oy);
    }
}
