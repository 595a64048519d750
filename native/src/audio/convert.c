/* convert.c — interleaved PCM / float samples of any channel count to mono float32.
 *
 * Integer samples are read byte by byte as little-endian (the WAV byte order), so the
 * result does not depend on the host's endianness or on the input's alignment; float
 * samples are assembled the same way (IEEE 754 little-endian bit patterns). Scaling maps
 * full scale to [-1, 1): u8 (v - 128) / 128, s16 v / 2^15, s24 v / 2^23, s32 v / 2^31,
 * f32 / f64 as they are (values outside [-1, 1] are kept, never clipped).
 * Each frame's mean is summed in double over its channels in channel order, divided by
 * the channel count and rounded once to float, so mono f32 input is copied exactly.
 * A sample that is NaN or infinite, or an f64 sample beyond the float range, counts in
 * *n_nonfinite and contributes 0 to its frame's mean (the other channels still count).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "internal.h"

#define NRV_AUDIO_MAX_CHANNELS 65535

size_t nrv_sample_format_size(nrv_sample_format format) {
    switch (format) {
    case NRV_SAMPLE_U8: return 1;
    case NRV_SAMPLE_S16: return 2;
    case NRV_SAMPLE_S24: return 3;
    case NRV_SAMPLE_S32: return 4;
    case NRV_SAMPLE_F32: return 4;
    case NRV_SAMPLE_F64: return 8;
    }
    return 0;
}

static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One sample as double; *bad = 1 for NaN / Inf / beyond float (then returns 0). */
static inline double rd_sample(const uint8_t *p, nrv_sample_format format, int *bad) {
    switch (format) {
    case NRV_SAMPLE_U8: return ((double)p[0] - 128.0) * (1.0 / 128.0);
    case NRV_SAMPLE_S16: return (double)(int16_t)(uint16_t)(p[0] | p[1] << 8) * (1.0 / 32768.0);
    case NRV_SAMPLE_S24: {
        int32_t v = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16);
        if (v & 0x800000) v -= 0x1000000;
        return (double)v * (1.0 / 8388608.0);
    }
    case NRV_SAMPLE_S32: return (double)(int32_t)rd_u32(p) * (1.0 / 2147483648.0);
    case NRV_SAMPLE_F32: {
        uint32_t bits = rd_u32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        if (!isfinite(f)) {
            *bad = 1;
            return 0.0;
        }
        return (double)f;
    }
    case NRV_SAMPLE_F64: {
        uint64_t bits = (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!(fabs(d) <= (double)FLT_MAX)) { /* NaN, Inf, or no float can hold it */
            *bad = 1;
            return 0.0;
        }
        return d;
    }
    }
    return 0.0;
}

nrv_status nrv_audio_to_mono_f32(const void *in, nrv_sample_format sample_format, size_t frames, int channels,
                                 float *out, size_t *n_nonfinite) {
    const char *fn = "nrv_audio_to_mono_f32";
    const size_t size = nrv_sample_format_size(sample_format);
    if (size == 0)
        return nrv_fail(NRV_ERR_DTYPE, "%s: unknown sample_format %d (u8=0, s16=1, s24=2, s32=3, f32=4, f64=5)", fn,
                        (int)sample_format);
    if (channels < 1 || channels > NRV_AUDIO_MAX_CHANNELS)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: channels %d outside [1, %d]", fn, channels,
                        NRV_AUDIO_MAX_CHANNELS);
    uint64_t samples;
    if (frames > (size_t)INT64_MAX || nrv_mul_overflow((uint64_t)frames, (uint64_t)channels, &samples) ||
        samples > (uint64_t)INT64_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %zu frames x %d channels overflows", fn, frames, channels);
    NRV_TRY(nrv_check_extent(fn, "in", (int64_t)samples, size));
    if (frames) {
        NRV_REQUIRE_PTR(fn, in);
        NRV_REQUIRE_PTR(fn, out);
    }

    const uint8_t *p = in;
    const size_t stride = size * (size_t)channels;
    size_t bad_total = 0;
    if (channels == 1) {
        for (size_t i = 0; i < frames; i++) {
            int bad = 0;
            double v = rd_sample(p + i * size, sample_format, &bad);
            bad_total += (size_t)bad;
            out[i] = (float)v;
        }
    } else {
        for (size_t i = 0; i < frames; i++) {
            const uint8_t *f = p + i * stride;
            double sum = 0.0;
            for (int c = 0; c < channels; c++) {
                int bad = 0;
                sum += rd_sample(f + (size_t)c * size, sample_format, &bad);
                bad_total += (size_t)bad;
            }
            out[i] = (float)(sum / (double)channels);
        }
    }
    if (n_nonfinite) *n_nonfinite = bad_total;
    return NRV_OK;
}
