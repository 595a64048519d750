/* embedding_neon.c — NEON embedding lookups for f32, f16 and int8 (per-row scale) tables.
 *
 * A lookup is a gather of whole rows: the cost is memory latency, not arithmetic. All ids
 * are known up front, so while row i is copied the kernel prefetches the row `ahead`
 * positions later, one cache line per 64 table bytes copied, so the prefetches are spread
 * evenly over the copy instead of arriving in bursts. The results are bit-exact with the
 * scalar references (a copy, an exact widening, or one rounded multiply per element).
 */
#include <arm_neon.h>

#include "neon_kernels.h"

/* Table bytes consumed per main-loop iteration: one cache line, one prefetch. */
#define EMB_LINE_BYTES 64
/* Prefetch distance in table bytes: enough rows in flight to cover DRAM latency at the
 * copy rate (~4 KiB), whatever the row size. */
#define EMB_AHEAD_BYTES 4096
#define EMB_MAX_AHEAD_ROWS 64

/* Rows between the one being copied and the one being prefetched. */
static int64_t rows_ahead(int64_t row_bytes) {
    const int64_t d = EMB_AHEAD_BYTES / row_bytes;
    return d < 1 ? 1 : (d > EMB_MAX_AHEAD_ROWS ? EMB_MAX_AHEAD_ROWS : d);
}

/* Prefetches the lines of [row + from, row + row_bytes): a line every 64 bytes, plus the
 * last byte, which covers the final line when the row does not start on a line boundary. */
static inline void prefetch_range(const char *row, int64_t from, int64_t row_bytes) {
    for (int64_t off = from; off < row_bytes; off += EMB_LINE_BYTES) __builtin_prefetch(row + off);
    __builtin_prefetch(row + row_bytes - 1);
}

/* Before the first copy: the rows the steady-state prefetch will never reach. */
static void prefetch_first_rows(const char *table, int64_t row_bytes, const void *ids, int ids_int64,
                                int64_t n_ids, int64_t ahead) {
    for (int64_t i = 0; i < ahead && i < n_ids; i++)
        prefetch_range(table + nrv_id_at(ids, ids_int64, i) * row_bytes, 0, row_bytes);
}

/* The row to prefetch while copying row i; past the end it is row i itself (already being
 * read), which keeps the copy loop free of a branch. */
static inline const char *row_to_prefetch(const char *table, int64_t row_bytes, const void *ids,
                                          int ids_int64, int64_t n_ids, int64_t i, int64_t ahead) {
    const int64_t k = i + ahead < n_ids ? i + ahead : i;
    return table + nrv_id_at(ids, ids_int64, k) * row_bytes;
}

void nrv_embedding_f32_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                            int ids_int64, int64_t n_ids, float *out) {
    (void)row_scales;
    const char *t = table;
    const int64_t row_bytes = dim * (int64_t)sizeof(float);
    const int64_t ahead = rows_ahead(row_bytes);
    prefetch_first_rows(t, row_bytes, ids, ids_int64, n_ids, ahead);
    for (int64_t i = 0; i < n_ids; i++) {
        const float *src = (const float *)(t + nrv_id_at(ids, ids_int64, i) * row_bytes);
        const char *next = row_to_prefetch(t, row_bytes, ids, ids_int64, n_ids, i, ahead);
        float *dst = out + i * dim;
        int64_t j = 0;
        for (; j + 16 <= dim; j += 16) { /* 64 bytes: one line */
            __builtin_prefetch(next + j * (int64_t)sizeof(float));
            const float32x4_t v0 = vld1q_f32(src + j);
            const float32x4_t v1 = vld1q_f32(src + j + 4);
            const float32x4_t v2 = vld1q_f32(src + j + 8);
            const float32x4_t v3 = vld1q_f32(src + j + 12);
            vst1q_f32(dst + j, v0);
            vst1q_f32(dst + j + 4, v1);
            vst1q_f32(dst + j + 8, v2);
            vst1q_f32(dst + j + 12, v3);
        }
        prefetch_range(next, j * (int64_t)sizeof(float), row_bytes);
        for (; j + 4 <= dim; j += 4) vst1q_f32(dst + j, vld1q_f32(src + j));
        for (; j < dim; j++) dst[j] = src[j];
    }
}

/* FCVTL (vcvt_f32_f16) converts every half exactly, except that it quietens a signalling
 * NaN (sets fraction bit 22) while the reference keeps its bits. A signalling half NaN has
 * exponent 0x1f, quiet bit 0x200 clear and a non-zero payload in 0x1ff. */
static inline uint16x8_t half_snan_mask(uint16x8_t h) {
    const uint16x8_t nan_exp_unquiet = vceqq_u16(vandq_u16(h, vdupq_n_u16(0x7e00)), vdupq_n_u16(0x7c00));
    return vandq_u16(nan_exp_unquiet, vtstq_u16(h, vdupq_n_u16(0x01ff)));
}

/* Converts 4 halves; `snan` (all-ones lanes from half_snan_mask) marks lanes whose quiet
 * bit must be cleared again so the result matches the reference bit for bit. */
static inline float32x4_t half4_to_float4(uint16x4_t h, uint16x4_t snan) {
    const uint32x4_t f = vreinterpretq_u32_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)));
    const uint32x4_t wide = vreinterpretq_u32_s32(vmovl_s16(vreinterpret_s16_u16(snan)));
    return vreinterpretq_f32_u32(vbicq_u32(f, vandq_u32(wide, vdupq_n_u32(0x00400000u))));
}

void nrv_embedding_f16_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                            int ids_int64, int64_t n_ids, float *out) {
    (void)row_scales;
    const char *t = table;
    const int64_t row_bytes = dim * (int64_t)sizeof(uint16_t);
    const int64_t ahead = rows_ahead(row_bytes);
    prefetch_first_rows(t, row_bytes, ids, ids_int64, n_ids, ahead);
    for (int64_t i = 0; i < n_ids; i++) {
        const uint16_t *src = (const uint16_t *)(t + nrv_id_at(ids, ids_int64, i) * row_bytes);
        const char *next = row_to_prefetch(t, row_bytes, ids, ids_int64, n_ids, i, ahead);
        float *dst = out + i * dim;
        int64_t j = 0;
        for (; j + 32 <= dim; j += 32) { /* 64 bytes: one line */
            __builtin_prefetch(next + j * (int64_t)sizeof(uint16_t));
            const uint16x8_t h0 = vld1q_u16(src + j);
            const uint16x8_t h1 = vld1q_u16(src + j + 8);
            const uint16x8_t h2 = vld1q_u16(src + j + 16);
            const uint16x8_t h3 = vld1q_u16(src + j + 24);
            /* Inf/NaN halves are rare in a table: one cheap test per line keeps the
             * signalling-NaN fix-up off the common path. */
            const uint16x8_t e = vdupq_n_u16(0x7c00);
            const uint16x8_t special = vorrq_u16(vorrq_u16(vceqq_u16(vandq_u16(h0, e), e), vceqq_u16(vandq_u16(h1, e), e)),
                                                 vorrq_u16(vceqq_u16(vandq_u16(h2, e), e), vceqq_u16(vandq_u16(h3, e), e)));
            if (__builtin_expect(vmaxvq_u16(special) != 0, 0)) {
                const uint16x8_t s0 = half_snan_mask(h0), s1 = half_snan_mask(h1);
                const uint16x8_t s2 = half_snan_mask(h2), s3 = half_snan_mask(h3);
                vst1q_f32(dst + j, half4_to_float4(vget_low_u16(h0), vget_low_u16(s0)));
                vst1q_f32(dst + j + 4, half4_to_float4(vget_high_u16(h0), vget_high_u16(s0)));
                vst1q_f32(dst + j + 8, half4_to_float4(vget_low_u16(h1), vget_low_u16(s1)));
                vst1q_f32(dst + j + 12, half4_to_float4(vget_high_u16(h1), vget_high_u16(s1)));
                vst1q_f32(dst + j + 16, half4_to_float4(vget_low_u16(h2), vget_low_u16(s2)));
                vst1q_f32(dst + j + 20, half4_to_float4(vget_high_u16(h2), vget_high_u16(s2)));
                vst1q_f32(dst + j + 24, half4_to_float4(vget_low_u16(h3), vget_low_u16(s3)));
                vst1q_f32(dst + j + 28, half4_to_float4(vget_high_u16(h3), vget_high_u16(s3)));
            } else {
                vst1q_f32(dst + j, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0))));
                vst1q_f32(dst + j + 4, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h0))));
                vst1q_f32(dst + j + 8, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1))));
                vst1q_f32(dst + j + 12, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h1))));
                vst1q_f32(dst + j + 16, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h2))));
                vst1q_f32(dst + j + 20, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h2))));
                vst1q_f32(dst + j + 24, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h3))));
                vst1q_f32(dst + j + 28, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h3))));
            }
        }
        prefetch_range(next, j * (int64_t)sizeof(uint16_t), row_bytes);
        for (; j + 8 <= dim; j += 8) {
            const uint16x8_t h = vld1q_u16(src + j);
            const uint16x8_t s = half_snan_mask(h);
            vst1q_f32(dst + j, half4_to_float4(vget_low_u16(h), vget_low_u16(s)));
            vst1q_f32(dst + j + 4, half4_to_float4(vget_high_u16(h), vget_high_u16(s)));
        }
        for (; j < dim; j++) dst[j] = nrv_half_to_float(src[j]);
    }
}

/* 16 int8 -> 16 floats times scale: s8 -> s16 -> s32 are exact widenings, s32 -> f32 is
 * exact for |v| <= 128, and the one multiply rounds exactly as (float)v * scale does. */
static inline void q8x16_to_float(int8x16_t v, float32x4_t scale, float *dst) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(v));
    const int16x8_t hi = vmovl_s8(vget_high_s8(v));
    vst1q_f32(dst, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), scale));
    vst1q_f32(dst + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), scale));
    vst1q_f32(dst + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), scale));
    vst1q_f32(dst + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), scale));
}

void nrv_embedding_q8_neon(const void *table, const float *row_scales, int64_t dim, const void *ids,
                           int ids_int64, int64_t n_ids, float *out) {
    const char *t = table;
    const int64_t row_bytes = dim; /* one byte per element */
    const int64_t ahead = rows_ahead(row_bytes);
    prefetch_first_rows(t, row_bytes, ids, ids_int64, n_ids, ahead);
    for (int64_t i = 0; i < n_ids; i++) {
        const int64_t id = nrv_id_at(ids, ids_int64, i);
        const int8_t *src = (const int8_t *)(t + id * row_bytes);
        const int64_t next_i = i + ahead < n_ids ? i + ahead : i;
        const int64_t next_id = nrv_id_at(ids, ids_int64, next_i);
        const char *next = t + next_id * row_bytes;
        __builtin_prefetch(row_scales + next_id); /* scales are gathered by id too */
        const float s = row_scales[id];
        const float32x4_t scale = vdupq_n_f32(s);
        float *dst = out + i * dim;
        int64_t j = 0;
        for (; j + 64 <= dim; j += 64) { /* 64 bytes: one line */
            __builtin_prefetch(next + j);
            q8x16_to_float(vld1q_s8(src + j), scale, dst + j);
            q8x16_to_float(vld1q_s8(src + j + 16), scale, dst + j + 16);
            q8x16_to_float(vld1q_s8(src + j + 32), scale, dst + j + 32);
            q8x16_to_float(vld1q_s8(src + j + 48), scale, dst + j + 48);
        }
        prefetch_range(next, j, row_bytes);
        for (; j + 16 <= dim; j += 16) q8x16_to_float(vld1q_s8(src + j), scale, dst + j);
        for (; j + 8 <= dim; j += 8) {
            const int16x8_t w = vmovl_s8(vld1_s8(src + j));
            vst1q_f32(dst + j, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), scale));
            vst1q_f32(dst + j + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))), scale));
        }
        for (; j < dim; j++) dst[j] = (float)src[j] * s;
    }
}
