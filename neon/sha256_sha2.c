/* sha256_sha2.c — SHA-256 block compression with the ARMv8 SHA2 instructions, built with
 * +crypto and called only when the CPU has them (NRV_CPU_SHA256, HWCAP_SHA2; sha256.c
 * chooses). Jetson Orin's Cortex-A78AE has them. The state is two registers, a..d and e..h;
 * sha256h / sha256h2 do four rounds from W+K (the latter needing the a..d from before them),
 * sha256su0 / sha256su1 extend the message schedule four words at a time. Same state as the
 * portable loop, block for block (test_core.c, run under qemu). */
#include <arm_neon.h>

#include "plan/plan_internal.h"

void nrv_sha256_blocks_arm(uint32_t h[8], const uint8_t *p, size_t nblocks) {
    uint32x4_t abcd = vld1q_u32(h), efgh = vld1q_u32(h + 4);
    for (size_t blk = 0; blk < nblocks; blk++, p += 64) {
        const uint32x4_t abcd0 = abcd, efgh0 = efgh;
        uint32x4_t w[4];
        for (int i = 0; i < 4; i++) w[i] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p + 16 * i)));
        for (int g = 0; g < 16; g++) { /* four rounds a group */
            uint32x4_t cur;
            if (g < 4) {
                cur = w[g];
            } else {
                cur = vsha256su1q_u32(vsha256su0q_u32(w[0], w[1]), w[2], w[3]);
                w[0] = w[1], w[1] = w[2], w[2] = w[3], w[3] = cur;
            }
            const uint32x4_t wk = vaddq_u32(cur, vld1q_u32(nrv_sha256_k + 4 * g));
            const uint32x4_t abcd_before = abcd;
            abcd = vsha256hq_u32(abcd, efgh, wk);
            efgh = vsha256h2q_u32(efgh, abcd_before, wk);
        }
        abcd = vaddq_u32(abcd, abcd0);
        efgh = vaddq_u32(efgh, efgh0);
    }
    vst1q_u32(h, abcd);
    vst1q_u32(h + 4, efgh);
}
