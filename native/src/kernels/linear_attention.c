/* linear_attention.c — the reference of the dispatch op "linear_attention" (kernels.h,
 * nrv_la_problem): the recurrence as the operator defines it, in blocks of at most
 * NRV_LA_REF_COLS value columns (every rule is independent per column of S: the delta rule's
 * Sᵀk too), so each block's u stays on the stack. Per token and block: decay and Sᵀk in one
 * pass over the rows, then the update and the query heads' reads in a second (each row of S
 * read twice, not three times). */
#include <math.h>

#include "kernels.h"

void nrv_la_block_ref(const nrv_la_problem *p, const nrv_la_token *tk, int64_t m0, int64_t n) {
    const int64_t dk = p->dk, dv = p->dv, group = p->hq / p->hkv;
    float *S = tk->S;
    const float *k = tk->k, *v = tk->v, *g = tk->g;
    float u[NRV_LA_REF_COLS];
    if (p->delta) { /* u = β (v − Sᵀk), S decayed first (gated_delta) */
        for (int64_t m = 0; m < n; m++) u[m] = 0.0f;
        for (int64_t d = 0; d < dk; d++) {
            float *row = S + d * dv + m0;
            if (g) {
                const float e = p->g_per_key ? expf(g[d]) : tk->head_decay;
                for (int64_t m = 0; m < n; m++) row[m] *= e;
            }
            for (int64_t m = 0; m < n; m++) u[m] += row[m] * k[d];
        }
        for (int64_t m = 0; m < n; m++) u[m] = tk->beta * (v[m0 + m] - u[m]);
    } else {
        for (int64_t m = 0; m < n; m++) u[m] = v[m0 + m];
    }
    /* S = S·e + k ⊗ u (e: the decay not applied above) and the group's reads of the new S,
     * in one pass over the block */
    for (int64_t j = 0; j < group; j++)
        for (int64_t m = 0; m < n; m++) tk->y[j * dv + m0 + m] = 0.0f;
    for (int64_t d = 0; d < dk; d++) {
        float *restrict row = S + d * dv + m0; /* the state and y never overlap */
        const float kd = k[d];
        if (g && !p->delta) {
            const float e = p->g_per_key ? expf(g[d]) : tk->head_decay;
            for (int64_t m = 0; m < n; m++) row[m] = row[m] * e + kd * u[m];
        } else {
            for (int64_t m = 0; m < n; m++) row[m] += kd * u[m];
        }
        for (int64_t j = 0; j < group; j++) {
            const float qd = tk->q[j * dk + d];
            float *restrict o = tk->y + j * dv + m0;
            for (int64_t m = 0; m < n; m++) o[m] += qd * row[m];
        }
    }
    for (int64_t j = 0; j < group; j++)
        for (int64_t m = 0; m < n; m++) tk->y[j * dv + m0 + m] *= p->scale;
}

void nrv_la_token_at(const nrv_la_problem *p, int64_t task, int64_t t, nrv_la_token *tk) {
    const int64_t b = task / p->hkv, h = task % p->hkv, group = p->hq / p->hkv, bt = b * p->T + t;
    tk->S = p->state + task * p->dk * p->dv;
    tk->k = p->k + (bt * p->hkv + h) * p->dk;
    tk->v = p->v + (bt * p->hkv + h) * p->dv;
    tk->g = p->gated ? p->g + (p->g_per_key ? (bt * p->hkv + h) * p->dk : bt * p->hkv + h) : NULL;
    tk->beta = p->delta ? p->beta[p->beta_per_head ? bt * p->hkv + h : bt] : 1.0f;
    tk->head_decay = tk->g && !p->g_per_key ? expf(tk->g[0]) : 1.0f;
    tk->q = p->q + (bt * p->hq + h * group) * p->dk;
    tk->y = p->y + (bt * p->hq + h * group) * p->dv;
}

void nrv_linear_attention_ref(const nrv_la_problem *p, int64_t task) {
    for (int64_t t = 0; t < p->T; t++) {
        nrv_la_token tk;
        nrv_la_token_at(p, task, t, &tk);
        for (int64_t m0 = 0; m0 < p->dv; m0 += NRV_LA_REF_COLS)
            nrv_la_block_ref(p, &tk, m0, p->dv - m0 < NRV_LA_REF_COLS ? p->dv - m0 : NRV_LA_REF_COLS);
    }
}
