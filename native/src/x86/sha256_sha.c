/* sha256_sha.c — SHA-256 block compression with the x86 SHA extensions (SHA-NI), built with
 * -msha -msse4.1 and called only when the CPU has them (NRV_CPU_SHA256; sha256.c chooses).
 *
 * The eight state words live in two registers the way sha256rnds2 wants them: one holds
 * A, B, E, F and the other C, D, G, H (each from its high lane down). sha256rnds2 does two
 * rounds from the low two words of W+K and returns the new ABEF, the old ABEF becoming the
 * new CDGH, so two calls per four rounds swap the registers' roles and back. The message
 * schedule for rounds 16-63 is sha256msg1 (W[t-16] + σ0(W[t-15])), plus W[t-7] (an alignr
 * of the two latest groups), then sha256msg2 (+ σ1(W[t-2]), whose dependence within the
 * group it resolves). Same state as the portable loop, block for block (test_core.c). */
#include <immintrin.h>

#include "plan/plan_internal.h"

void nrv_sha256_blocks_x86(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    /* words big-endian in the message: byte-reverse each 32-bit lane */
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    /* h = a b c d | e f g h (lane 0 first) -> abef = F E B A, cdgh = H G D C (lane 0 first) */
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0xB1);      /* b a d c */
    __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(h + 4)), 0x1B); /* h g f e */
    __m128i abef = _mm_alignr_epi8(t, cdgh, 8);                                       /* f e b a */
    cdgh = _mm_blend_epi16(cdgh, t, 0xF0);                                            /* h g d c */
    for (size_t blk = 0; blk < nblocks; blk++, p += 64) {
        const __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w[4];
        for (int i = 0; i < 4; i++) w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
        for (int g = 0; g < 16; g++) { /* four rounds a group */
            __m128i cur;
            if (g < 4) {
                cur = w[g];
            } else {
                cur = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32(w[0], w[1]), _mm_alignr_epi8(w[3], w[2], 4)), w[3]);
                w[0] = w[1], w[1] = w[2], w[2] = w[3], w[3] = cur;
            }
            __m128i wk = _mm_add_epi32(cur, _mm_loadu_si128((const __m128i *)(nrv_sha256_k + 4 * g)));
            /* two rounds: cdgh takes the new ABEF, abef (the old ABEF) is the new CDGH; two
             * more with the roles swapped, and each register holds its own again */
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    /* back to a b c d | e f g h */
    t = _mm_shuffle_epi32(abef, 0x1B);    /* a b e f */
    cdgh = _mm_shuffle_epi32(cdgh, 0xB1); /* g h c d */
    _mm_storeu_si128((__m128i *)h, _mm_blend_epi16(t, cdgh, 0xF0));         /* a b c d */
    _mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(cdgh, t, 8));      /* e f g h */
}
