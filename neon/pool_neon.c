/* pool_neon.c — the op "maxpool" at 4 floats / 16 bytes (kernels/maxpool_impl.h): the
 * vocabulary of x86/simd_avx2.h that the template uses, in Advanced SIMD. NEON's own fmax
 * would let a NaN through, so vmax is x86's rule (a > b ? a : b) as a compare and a select;
 * the even/odd splits are uzp1/uzp2; partial vectors go through a small stack copy (NEON
 * has no masked loads or stores). */
#include <arm_neon.h>
#include <string.h>

#include "neon_kernels.h"

#define VL 4
typedef float32x4_t vf;
typedef int64_t vtail; /* the partial vector's lane count, 0 < n < VL */

static inline vf vset1(float a) { return vdupq_n_f32(a); }
static inline vf vload(const float *p) { return vld1q_f32(p); }
static inline void vstore(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vmax(vf a, vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline vf vevens(vf a, vf b) { return vuzp1q_f32(a, b); }
static inline vf vodds(vf a, vf b) { return vuzp2q_f32(a, b); }
static inline vtail vtail_mask(int64_t n) { return n; }
static inline vf vload_tail_or(const float *p, vtail n, vf fill) {
    float t[VL];
    vst1q_f32(t, fill);
    for (int64_t i = 0; i < n; i++) t[i] = p[i];
    return vld1q_f32(t);
}
static inline void vstore_tail(float *p, vtail n, vf v) {
    float t[VL];
    vst1q_f32(t, v);
    for (int64_t i = 0; i < n; i++) p[i] = t[i];
}

#define VB 16
typedef uint8x16_t vbytes;
static inline vbytes vb_load(const void *p) { return vld1q_u8((const uint8_t *)p); }
static inline void vb_store(void *p, vbytes v) { vst1q_u8((uint8_t *)p, v); }
static inline vbytes vb_set1(uint8_t a) { return vdupq_n_u8(a); }
static inline vbytes vb_xor(vbytes a, vbytes b) { return veorq_u8(a, b); }
static inline vbytes vb_max_u8(vbytes a, vbytes b) { return vmaxq_u8(a, b); }
static inline vbytes vb_load_part(const void *p, int64_t n) {
    uint8_t t[VB] = {0};
    memcpy(t, p, (size_t)n);
    return vld1q_u8(t);
}
static inline void vb_store_part(void *p, vbytes v, int64_t n) {
    uint8_t t[VB];
    vst1q_u8(t, v);
    for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = t[i];
}
static inline vbytes vb_evens(vbytes a, vbytes b) { return vuzp1q_u8(a, b); }
static inline vbytes vb_odds(vbytes a, vbytes b) { return vuzp2q_u8(a, b); }

#define MP_NAME nrv_maxpool_neon
#include "maxpool_impl.h"
