/* linear_attention_neon.c — op "linear_attention" (kernels.h, nrv_la_problem) with
 * baseline Advanced SIMD: the x86 variants' order of work (linear_attention_impl.h) in
 * blocks of two 4-lane vectors of value columns held in registers; per token, pass 1 decays
 * the block's rows and sums Sᵀk (delta rules), pass 2 adds k ⊗ u and accumulates the query
 * heads' reads (one head in registers, a group's heads in y). The per-key decays are
 * exponentiated once per token into a stack row; the last partial block (dv not a multiple
 * of 8) runs the reference's block. */
#include "neon_common.h"
#include "neon_kernels.h"

/* Value columns [m0, m0 + 8) of one token; e: the per-row decays or NULL. */
NRV_NEON_INLINE void la_block8(const nrv_la_problem *p, const nrv_la_token *tk, const float *e, int64_t group,
                                int64_t m0) {
    const int64_t dk = p->dk, dv = p->dv;
    float *S = tk->S;
    float32x4_t u0, u1;
    if (p->delta) {
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
        for (int64_t d = 0; d < dk; d++) {
            float *row = S + d * dv + m0;
            float32x4_t r0 = vld1q_f32(row), r1 = vld1q_f32(row + 4);
            if (p->gated) {
                const float ed = e ? e[d] : tk->head_decay;
                r0 = vmulq_n_f32(r0, ed), r1 = vmulq_n_f32(r1, ed);
                vst1q_f32(row, r0), vst1q_f32(row + 4, r1);
            }
            a0 = vfmaq_n_f32(a0, r0, tk->k[d]), a1 = vfmaq_n_f32(a1, r1, tk->k[d]);
        }
        u0 = vmulq_n_f32(vsubq_f32(vld1q_f32(tk->v + m0), a0), tk->beta);
        u1 = vmulq_n_f32(vsubq_f32(vld1q_f32(tk->v + m0 + 4), a1), tk->beta);
    } else {
        u0 = vld1q_f32(tk->v + m0), u1 = vld1q_f32(tk->v + m0 + 4);
    }
    const int decay_here = p->gated && !p->delta;
    float32x4_t o0 = vdupq_n_f32(0.0f), o1 = vdupq_n_f32(0.0f);
    for (int64_t j = 0; group > 1 && j < group; j++) /* a group's reads accumulate in y */
        vst1q_f32(tk->y + j * dv + m0, o0), vst1q_f32(tk->y + j * dv + m0 + 4, o0);
    for (int64_t d = 0; d < dk; d++) {
        float *row = S + d * dv + m0;
        const float kd = tk->k[d];
        float32x4_t r0 = vld1q_f32(row), r1 = vld1q_f32(row + 4);
        if (decay_here) {
            const float ed = e ? e[d] : tk->head_decay;
            r0 = vfmaq_n_f32(vmulq_n_f32(u0, kd), r0, ed), r1 = vfmaq_n_f32(vmulq_n_f32(u1, kd), r1, ed);
        } else {
            r0 = vfmaq_n_f32(r0, u0, kd), r1 = vfmaq_n_f32(r1, u1, kd);
        }
        vst1q_f32(row, r0), vst1q_f32(row + 4, r1);
        if (group == 1) {
            o0 = vfmaq_n_f32(o0, r0, tk->q[d]), o1 = vfmaq_n_f32(o1, r1, tk->q[d]);
        } else {
            for (int64_t j = 0; j < group; j++) {
                float *oj = tk->y + j * dv + m0;
                const float qd = tk->q[j * dk + d];
                vst1q_f32(oj, vfmaq_n_f32(vld1q_f32(oj), r0, qd));
                vst1q_f32(oj + 4, vfmaq_n_f32(vld1q_f32(oj + 4), r1, qd));
            }
        }
    }
    if (group == 1) {
        vst1q_f32(tk->y + m0, vmulq_n_f32(o0, p->scale));
        vst1q_f32(tk->y + m0 + 4, vmulq_n_f32(o1, p->scale));
    } else {
        for (int64_t j = 0; j < group; j++) {
            float *oj = tk->y + j * dv + m0;
            vst1q_f32(oj, vmulq_n_f32(vld1q_f32(oj), p->scale));
            vst1q_f32(oj + 4, vmulq_n_f32(vld1q_f32(oj + 4), p->scale));
        }
    }
}

void nrv_linear_attention_neon(const nrv_la_problem *p, int64_t task) {
    if (!nrv_la_decays_fit(p)) {
        nrv_linear_attention_ref(p, task);
        return;
    }
    const int64_t group = p->hq / p->hkv, dk = p->dk, dv = p->dv;
    float e[NRV_LA_MAX_DK];
    for (int64_t t = 0; t < p->T; t++) {
        nrv_la_token tk;
        nrv_la_token_at(p, task, t, &tk);
        const float *rows_decay = NULL;
        if (tk.g && p->g_per_key) {
            int64_t d = 0;
            for (; d + 4 <= dk; d += 4) vst1q_f32(e + d, nrv_neon_exp(vld1q_f32(tk.g + d)));
            for (; d < dk; d++) e[d] = expf(tk.g[d]);
            rows_decay = e;
        }
        int64_t m0 = 0;
        for (; m0 + 8 <= dv; m0 += 8) la_block8(p, &tk, rows_decay, group, m0);
        if (m0 < dv) nrv_la_block_ref(p, &tk, m0, dv - m0); /* the reference's block: exp per row there */
    }
}
