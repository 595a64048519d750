/* maxpool.c — the reference of the op "maxpool" (kernels.h, nrv_maxpool_fn): every window
 * folded element by element in the direct loop's order (rows down, then across), the
 * positions outside the plane skipped: the contract's definition. */
#include <float.h>

#include "kernels.h"

#define MAXPOOL_REF(T, LOWEST)                                                          \
    for (int64_t p = 0; p < planes; p++) {                                              \
        const T *xp = (const T *)x + p * g->ih * g->iw;                                 \
        T *yp = (T *)y + p * g->oh * g->ow;                                             \
        for (int64_t oy = 0; oy < g->oh; oy++)                                          \
            for (int64_t ox = 0; ox < g->ow; ox++) {                                    \
                const int64_t y0 = oy * g->sh - g->ph, x0 = ox * g->sw - g->pw;         \
                T m = (LOWEST);                                                         \
                for (int64_t i = y0 < 0 ? -y0 : 0; i < g->kh && y0 + i < g->ih; i++)    \
                    for (int64_t j = x0 < 0 ? -x0 : 0; j < g->kw && x0 + j < g->iw; j++) { \
                        const T v = xp[(y0 + i) * g->iw + x0 + j];                      \
                        m = v > m ? v : m;                                              \
                    }                                                                   \
                yp[oy * g->ow + ox] = m;                                                \
            }                                                                           \
    }

void nrv_maxpool_ref(int dtype, const nrv_dw_geom *g, int64_t planes, const void *x, void *y) {
    if (dtype == NRV_U8) MAXPOOL_REF(uint8_t, 0)
    else if (dtype == NRV_I8) MAXPOOL_REF(int8_t, -128)
    else MAXPOOL_REF(float, -FLT_MAX)
}
#undef MAXPOOL_REF
