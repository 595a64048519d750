/* decode.c — greedy decoding as one native call over a decoder-step plan
 * (nrv_session_decode_greedy in nerve.h): per token one nrv_session_run, an argmax and a
 * log-softmax over the logits, the stop rules; nothing crosses into the caller per token. */
#include <math.h>
#include <string.h>

#include "plan_internal.h"

/* The last 1..8 tokens repeated `limit` times in a row (a decoding loop). */
static int repeating(const int64_t *t, int32_t n, int32_t limit) {
    for (int32_t len = 1; len <= 8 && (int64_t)len * limit <= n; len++) {
        int same = 1;
        for (int32_t k = 1; k < limit && same; k++)
            same = memcmp(t + n - len, t + n - (k + 1) * len, (size_t)len * sizeof *t) == 0;
        if (same) return 1;
    }
    return 0;
}

nrv_status nrv_session_decode_greedy(nrv_session_t *s, const nrv_tensor *feeds, int n_feeds,
                                     const nrv_greedy_options *o, int64_t *tokens, float *logprobs,
                                     int32_t *n_tokens, int32_t *stopped) {
    static const char fn[] = "nrv_session_decode_greedy";
    NRV_REQUIRE_PTR(fn, s);
    NRV_REQUIRE_PTR(fn, feeds);
    NRV_REQUIRE_PTR(fn, o);
    NRV_REQUIRE_PTR(fn, tokens);
    NRV_REQUIRE_PTR(fn, logprobs);
    NRV_REQUIRE_PTR(fn, n_tokens);
    NRV_REQUIRE_PTR(fn, stopped);
    const int n_in = nrv_session_input_count(s), n_out = nrv_session_output_count(s);
    if (n_feeds != n_in)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %d feeds given, the plan has %d inputs", fn, n_feeds, n_in);
    if (o->token_input < 0 || o->token_input >= n_in || o->logits_output < 0 || o->logits_output >= n_out)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: token input %d / logits output %d out of range", fn, o->token_input,
                        o->logits_output);
    if (o->max_tokens < 1 || o->vocab < 1 || (o->repeat_limit != 0 && o->repeat_limit < 2))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: max_tokens %d, vocab %lld, repeat_limit %d", fn, o->max_tokens,
                        (long long)o->vocab, o->repeat_limit);
    nrv_io_info tok_info, logit_info;
    NRV_TRY(nrv_session_io_info(s, 0, o->token_input, &tok_info));
    NRV_TRY(nrv_session_io_info(s, 1, o->logits_output, &logit_info));
    if (tok_info.dtype != NRV_I64 || logit_info.dtype != NRV_F32)
        return nrv_fail(NRV_ERR_DTYPE, "%s: the token input must be int64 and the logits float32", fn);

    nrv_tensor *step = nrv_sys_alloc(64, (size_t)(n_in + n_out) * sizeof *step);
    if (!step) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    nrv_tensor *outs = step + n_in;
    memcpy(step, feeds, (size_t)n_in * sizeof *step);
    int64_t token = o->first_token;
    nrv_tensor *tok = &step[o->token_input];
    tok->data = &token;
    tok->dtype = NRV_I64;
    tok->rank = 2;
    tok->dims[0] = tok->dims[1] = 1;
    tokens[0] = token;
    logprobs[0] = 0.0f;
    int32_t n = 1, why = 1;
    nrv_status st = NRV_OK;
    while (n < o->max_tokens) {
        if (o->repeat_limit && repeating(tokens, n, o->repeat_limit)) {
            why = 2;
            break;
        }
        st = nrv_session_run(s, step, n_in, outs, n_out);
        if (st != NRV_OK) break;
        if (n == 1) /* from now on every state input reads what the previous step wrote */
            for (int i = 0; i < n_in; i++) {
                nrv_io_info info;
                if (i != o->token_input && nrv_session_io_info(s, 0, i, &info) == NRV_OK && info.state_partner >= 0) {
                    step[i].data = NULL;
                    step[i].rank = 0;
                }
            }
        const nrv_tensor *lg = &outs[o->logits_output];
        const int64_t V = lg->rank ? lg->dims[lg->rank - 1] : 0;
        if (V < o->vocab) {
            st = nrv_fail(NRV_ERR_SHAPE, "%s: %lld logits, fewer than vocab %lld", fn, (long long)V,
                          (long long)o->vocab);
            break;
        }
        int64_t rows = 1;
        for (int k = 0; k < lg->rank - 1; k++) rows *= lg->dims[k];
        const float *z = (const float *)lg->data + (rows - 1) * V; /* the last position */
        int64_t best = 0;
        for (int64_t v = 1; v < o->vocab; v++)
            if (z[v] > z[best]) best = v;
        double sum = 0.0;
        for (int64_t v = 0; v < o->vocab; v++) sum += exp((double)z[v] - (double)z[best]);
        if (best == o->end_token) {
            why = 0;
            break;
        }
        token = best;
        tokens[n] = best;
        logprobs[n] = (float)(-log(sum));
        n++;
    }
    nrv_sys_free(step);
    *n_tokens = n;
    *stopped = why;
    return st;
}
