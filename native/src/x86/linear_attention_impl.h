/* linear_attention_impl.h — the dispatch op "linear_attention" (kernels.h, nrv_la_problem)
 * written once against the vector layer; linear_attention_avx2.c / _avx512.c instantiate
 * it. The reference's order of work, in blocks of two vectors of value columns held in
 * registers: per token, pass 1 over the block's rows of S decays them and sums Sᵀk (delta
 * rules), pass 2 adds k ⊗ u and accumulates the query heads' reads (one head in registers;
 * a group's heads in y). The per-key decays are exponentiated once per token (a vector
 * exp into a stack row), not once per row and block. FMAs round differently from the
 * reference's products and sums: the tests hold each variant to it within a tolerance. */
#include "simd_math.h"
#include "x86_kernels.h"

#define LA_INLINE static inline __attribute__((always_inline))

LA_INLINE vf la_load(const float *p, int full, vtail m) { return full ? vload(p) : vload_tail(p, m); }
LA_INLINE void la_store(float *p, int full, vtail m, vf v) {
    if (full)
        vstore(p, v);
    else
        vstore_tail(p, m, v);
}

/* Value columns [m0, m0 + n) of one token, n <= 2·VL (full: n == 2·VL, plain loads). e: the
 * per-row decays (NULL: the token's head_decay, or none when !gated). */
LA_INLINE void la_block(const nrv_la_problem *p, const nrv_la_token *tk, const float *e, int64_t group, int64_t m0,
                        int64_t n, int full) {
    const int64_t dk = p->dk, dv = p->dv;
    float *S = tk->S, *y = tk->y;
    const float *k = tk->k, *v = tk->v, *q = tk->q;
    const float head_decay = tk->head_decay;
    const int two = full || n > VL;
    const vtail ma = vtail_mask(n < VL ? n : VL), mb = vtail_mask(n > VL ? n - VL : 0);
    const int gated = p->gated;
    vf u0, u1 = vzero();
    if (p->delta) {
        vf a0 = vzero(), a1 = vzero();
        for (int64_t d = 0; d < dk; d++) {
            float *row = S + d * dv + m0;
            vf r0 = la_load(row, full, ma), r1 = two ? la_load(row + VL, full, mb) : vzero();
            if (gated) {
                const vf ed = vset1(e ? e[d] : head_decay);
                r0 = vmul(r0, ed), r1 = vmul(r1, ed);
                la_store(row, full, ma, r0);
                if (two) la_store(row + VL, full, mb, r1);
            }
            const vf kd = vset1(k[d]);
            a0 = vfmadd(r0, kd, a0), a1 = vfmadd(r1, kd, a1);
        }
        const vf b = vset1(tk->beta);
        u0 = vmul(b, vsub(la_load(v + m0, full, ma), a0));
        if (two) u1 = vmul(b, vsub(la_load(v + m0 + VL, full, mb), a1));
    } else {
        u0 = la_load(v + m0, full, ma);
        if (two) u1 = la_load(v + m0 + VL, full, mb);
    }
    const int decay_here = gated && !p->delta;
    vf o0 = vzero(), o1 = vzero(); /* group == 1: the head's read in registers */
    for (int64_t j = 0; group > 1 && j < group; j++) { /* a group's reads accumulate in y */
        la_store(y + j * dv + m0, full, ma, vzero());
        if (two) la_store(y + j * dv + m0 + VL, full, mb, vzero());
    }
    for (int64_t d = 0; d < dk; d++) {
        float *row = S + d * dv + m0;
        const vf kd = vset1(k[d]);
        vf r0 = la_load(row, full, ma), r1 = two ? la_load(row + VL, full, mb) : vzero();
        if (decay_here) {
            const vf ed = vset1(e ? e[d] : head_decay);
            r0 = vfmadd(r0, ed, vmul(kd, u0)), r1 = vfmadd(r1, ed, vmul(kd, u1));
        } else {
            r0 = vfmadd(kd, u0, r0), r1 = vfmadd(kd, u1, r1);
        }
        la_store(row, full, ma, r0);
        if (two) la_store(row + VL, full, mb, r1);
        if (group == 1) {
            const vf qd = vset1(q[d]);
            o0 = vfmadd(qd, r0, o0), o1 = vfmadd(qd, r1, o1);
        } else {
            for (int64_t j = 0; j < group; j++) {
                const vf qd = vset1(q[j * dk + d]);
                float *oj = y + j * dv + m0;
                la_store(oj, full, ma, vfmadd(qd, r0, la_load(oj, full, ma)));
                if (two) la_store(oj + VL, full, mb, vfmadd(qd, r1, la_load(oj + VL, full, mb)));
            }
        }
    }
    const vf sc = vset1(p->scale);
    if (group == 1) {
        la_store(y + m0, full, ma, vmul(o0, sc));
        if (two) la_store(y + m0 + VL, full, mb, vmul(o1, sc));
    } else {
        for (int64_t j = 0; j < group; j++) {
            float *oj = y + j * dv + m0;
            la_store(oj, full, ma, vmul(la_load(oj, full, ma), sc));
            if (two) la_store(oj + VL, full, mb, vmul(la_load(oj + VL, full, mb), sc));
        }
    }
}

void X86FN(nrv_linear_attention)(const nrv_la_problem *p, int64_t task) {
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
            for (; d + VL <= dk; d += VL) vstore(e + d, v_exp(vload(tk.g + d)));
            if (d < dk) {
                const vtail m = vtail_mask(dk - d);
                vstore_tail(e + d, m, v_exp(vload_tail(tk.g + d, m)));
            }
            rows_decay = e;
        }
        int64_t m0 = 0;
        for (; m0 + 2 * VL <= dv; m0 += 2 * VL) la_block(p, &tk, rows_decay, group, m0, 2 * VL, 1);
        if (m0 < dv) la_block(p, &tk, rows_decay, group, m0, dv - m0, 0);
    }
}
