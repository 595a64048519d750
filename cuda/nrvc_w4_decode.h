/* nrvc_w4_decode.h — W4 weight decoding shared by the CUDA kernel (nrvc_linear_w4.cu) and
 * its host self-test (nrvc_w4_selftest.cpp), so the bit tricks are checked without a GPU.
 *
 * The layouts are the CPU's (nerve.h, "W4 weights"); a device weight is a plain copy.
 * Per row, a block of 32 weights k0..k0+31 is
 *   packed:   16 bytes; byte j = (q[k0+j] + 8) | (q[k0+16+j] + 8) << 4
 *   unpacked: 32 int8 bytes, q[k0+j] at byte j.
 * Decoding: OR-ing an integer 0 <= n < 2^23 into the mantissa of 2^23 (bits 0x4B000000)
 * gives the float 2^23 + n exactly; subtracting 2^23 + bias + zero leaves q - zero, exact.
 * So a nibble costs one shift+AND+OR (one LOP3 after the shift) and one FADD, with no
 * integer-to-float conversion (I2F runs at a quarter of the FMA rate on sm_80).
 */
#ifndef NRVC_W4_DECODE_H
#define NRVC_W4_DECODE_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define NRVC_HD __host__ __device__ __forceinline__
#else
#define NRVC_HD inline
#endif
/* Unroll in the device pass only: the host compiler (also run by nvcc on these
 * host-callable functions) warns on the pragma and unrolls on its own. */
#if defined(__CUDA_ARCH__)
#define NRVC_UNROLL _Pragma("unroll")
#else
#define NRVC_UNROLL
#endif

namespace nrvc {

constexpr uint32_t kMagicBits = 0x4B000000u; /* 2^23 as a float */
constexpr float kMagic = 8388608.0f;
constexpr int kW4Block = 32;                 /* weights per block (and per lane step) */
constexpr int kW4PackedBlockBytes = 16;
constexpr int kW4UnpackedBlockBytes = 32;
/* The value added to q in each layout's bytes: +8 for nibbles, +128 after the sign flip. */
constexpr float kPackedBias = 8.0f;
constexpr float kUnpackedBias = 128.0f;

NRVC_HD float bits_as_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

/* What to subtract from a decoded magic float to get q - zero. */
NRVC_HD float w4_offset(float bias, float zero) { return kMagic + bias + zero; }

/* Packed block, word t (bytes 4t..4t+3): weight k0 + 4t + byte (high = 0) or
 * k0 + 16 + 4t + byte (high = 1), as q - zero. */
NRVC_HD float packed_weight(uint32_t word, int byte, int high, float offset) {
    return bits_as_float(((word >> (8 * byte + 4 * high)) & 0xFu) | kMagicBits) - offset;
}

/* Unpacked block, word t (bytes 4t..4t+3): weight k0 + 4t + byte as q - zero. The XOR
 * turns the two's-complement byte q into q + 128 in 0..255. */
NRVC_HD float unpacked_weight(uint32_t word, int byte, float offset) {
    return bits_as_float((((word >> (8 * byte)) & 0xFFu) ^ 0x80u) | kMagicBits) - offset;
}

/* acc[r] += Σ_j (q[k0+j] - zero) · x_r[j] over one packed block; w: its 4 words,
 * xr[r]: row r's 32 activations k0..k0+31 (contiguous). */
template <int R>
NRVC_HD void packed_block_dot(const uint32_t w[4], const float *const xr[R], float zero, float acc[R]) {
    const float offset = w4_offset(kPackedBias, zero);
NRVC_UNROLL
    for (int t = 0; t < 4; t++) {
NRVC_UNROLL
        for (int byte = 0; byte < 4; byte++) {
            const int j = 4 * t + byte;
            const float lo = packed_weight(w[t], byte, 0, offset);
            const float hi = packed_weight(w[t], byte, 1, offset);
NRVC_UNROLL
            for (int r = 0; r < R; r++) acc[r] += lo * xr[r][j] + hi * xr[r][16 + j];
        }
    }
}

/* The same over one unpacked block; w: its 8 words. */
template <int R>
NRVC_HD void unpacked_block_dot(const uint32_t w[8], const float *const xr[R], float zero, float acc[R]) {
    const float offset = w4_offset(kUnpackedBias, zero);
NRVC_UNROLL
    for (int t = 0; t < 8; t++) {
NRVC_UNROLL
        for (int byte = 0; byte < 4; byte++) {
            const float v = unpacked_weight(w[t], byte, offset);
NRVC_UNROLL
            for (int r = 0; r < R; r++) acc[r] += v * xr[r][4 * t + byte];
        }
    }
}

} /* namespace nrvc */

#endif /* NRVC_W4_DECODE_H */
