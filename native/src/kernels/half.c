/* half.c — exact IEEE 754 binary16 <-> binary32 conversion in portable C. */
#include <string.h>

#include "kernels.h"

float nrv_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {            /* inf / NaN: keep the payload */
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {        /* normal */
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {       /* signed zero */
        bits = sign;
    } else {                      /* subnormal: normalise */
        exp = 113u;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even, overflow to inf, NaN stays NaN. */
uint16_t nrv_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (absx >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {                        /* below 2^-14: subnormal half */
        if (absx < 0x33000000u) return sign;          /* below half the smallest subnormal */
        const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        const int shift = 126 - (int)(absx >> 23);    /* 14 .. 24 */
        uint32_t v = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (v & 1))) v++;
        return sign | (uint16_t)v;
    }
    uint32_t v = ((absx >> 13) - (112u << 10));
    const uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) v++;
    return sign | (uint16_t)v;
}
