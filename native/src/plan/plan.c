/* plan.c — loads a compiled plan (.nrv) into a session and runs it in one call.
 *
 * Load: check the header and the SHA-256, parse the metadata with a bounds-checked cursor
 * (every count, index and offset is validated before use), take the weights from the
 * process-wide weight store (shared with every session whose plan holds the same bytes;
 * loaded, verified against their SHA-256 and widened f16 -> f32 where asked on a miss:
 * weight_store.c), reserve the activation
 * arena and the state buffers, resolve every op type to its run function once, and build the
 * per-op argument blocks that point at the tensors' views.
 *
 * Run: bind the symbolic dimensions from the feeds' shapes, evaluate the dimension
 * expressions, refresh the views that depend on them (dims, and data pointers into feeds and
 * state buffers), check that every tensor still fits the bytes the plan reserved for it, then
 * call the ops in order. Nothing is allocated on this path.
 *
 * Sizes that depend on the data (NonZero's count, NonMaxSuppression's selections) are
 * symbols too, set during the run: the op that finds the count writes it to an int64
 * scalar, and a "set_dim" op after it takes it (within the symbol's bound, which the
 * memory plan reserved), re-evaluates the expressions and refreshes the views of every
 * symbolic tensor, so the ops after it see the real extents.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/kernels.h"
#include "plan_internal.h"

typedef struct plan_tensor {
    nrv_tview view;
    const char *name;
    const int64_t *dimrefs; /* rank entries: literal (>= 0) or -(expr + 1) */
    int32_t storage;        /* nrv_storage */
    int32_t ref;
    uint64_t offset;
    uint64_t capacity;
    uint8_t symbolic; /* some dim is an expression: dims refreshed each run */
} plan_tensor;

typedef struct plan_op {
    const nrv_op_def *def;
    nrv_op_args args;
    int32_t *in_ids, *out_ids;
    int32_t scratch_id;
    const int64_t *dattr_refs;
    int64_t *dattr_vals;
    int control; /* 0 = kernel, 1 = if, 2 = jump, 3 = set_dim */
    uint64_t calls, total_ns; /* with profiling on */
} plan_op;

typedef struct plan_bind {
    uint32_t input, axis, symbol;
} plan_bind;

typedef struct plan_state {
    uint32_t input, output;
    uint32_t flags;       /* NRV_STATE_APPEND: one buffer, written in place (no double buffer) */
    void *buf[2];
    int cur;              /* buf[cur] holds the state the next run reads */
    int valid;            /* a run has produced it (else the input must be fed) */
    int64_t dims[NRV_PLAN_MAX_RANK];
    int32_t rank;
} plan_state;

struct nrv_session {
    /* parsed metadata */
    uint32_t n_strings, n_symbols, n_exprs, n_weights, n_tensors, n_inputs, n_binds, n_outputs, n_states, n_ops;
    char **strings;
    const char **symbol_names;
    int64_t *symbol_bounds;
    uint8_t *symbol_runtime; /* set by a set_dim op during the run, not by an input */
    int64_t **expr_code;
    uint32_t *expr_len;
    plan_tensor *tensors;
    uint32_t *inputs, *outputs;
    plan_bind *binds;
    plan_state *states;
    plan_op *ops;
    uint64_t arena_bytes;
    /* memory */
    nrv_pool_t *arena_pool, *state_pool;
    nrv_weight_request *weight_req; /* parsed weight records (src filled at load) */
    nrv_weight_entry **weight_refs; /* the store's entries this session holds */
    const uint8_t **weight_ptr;     /* loaded bytes of each weight */
    uint64_t *weight_len;           /* loaded size of each weight */
    uint64_t weight_bytes;          /* sum of weight_len */
    uint64_t weight_new_bytes;      /* of those, loaded by this session (the rest was shared) */
    uint8_t *arena;
    /* per run */
    int64_t *symbol_vals;
    int64_t *expr_vals;
    int profile;
    nrv_threadpool *pool;
    /* per run: where each input's bytes and dims are (the feed, or a state buffer) */
    const void **input_srcs;
    const int64_t **input_dims;
    /* tensors whose view can change between runs: symbolic dims, or bytes in a feed or a
     * state buffer; the rest are fixed at load */
    uint32_t *dynamic;
    uint32_t n_dynamic;
    int64_t *prev_symbol_vals; /* the sizes the views were last refreshed for */
    int views_valid;
    uint8_t hash[32];
    char hash_hex[65];
    /* every allocation made for the metadata, freed together */
    void **allocs;
    size_t n_allocs, cap_allocs;
};

/* ------------------------------------------------------------------ allocation bookkeeping */

static void *session_alloc(nrv_session_t *s, size_t bytes) {
    if (s->n_allocs == s->cap_allocs) {
        const size_t cap = s->cap_allocs ? 2 * s->cap_allocs : 32;
        void **grown = nrv_sys_alloc(sizeof(void *), cap * sizeof(void *));
        if (!grown) return NULL;
        if (s->allocs) memcpy(grown, s->allocs, s->n_allocs * sizeof(void *));
        nrv_sys_free(s->allocs);
        s->allocs = grown;
        s->cap_allocs = cap;
    }
    void *p = nrv_sys_alloc(64, bytes ? bytes : 1);
    if (!p) return NULL;
    memset(p, 0, bytes ? bytes : 1);
    s->allocs[s->n_allocs++] = p;
    return p;
}

#define S_ALLOC(s, ptr, count)                                                                               \
    do {                                                                                                     \
        uint64_t bytes_;                                                                                     \
        if (nrv_mul_overflow((uint64_t)(count), sizeof(*(ptr)), &bytes_) || bytes_ > (uint64_t)PTRDIFF_MAX)  \
            return nrv_fail(NRV_ERR_FORMAT, "plan: a count of %llu is too large", (unsigned long long)(count)); \
        (ptr) = session_alloc((s), (size_t)bytes_);                                                          \
        if (!(ptr)) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "plan: out of memory loading the metadata");     \
    } while (0)

/* ------------------------------------------------------------------ bounds-checked reader */

typedef struct reader {
    const uint8_t *p, *end;
    const char *what; /* section being read, for the error */
} reader;

static nrv_status truncated(const reader *r) {
    return nrv_fail(NRV_ERR_FORMAT, "plan: metadata truncated while reading %s", r->what);
}

static nrv_status rd_bytes(reader *r, void *dst, size_t n) {
    if ((size_t)(r->end - r->p) < n) {
        memset(dst, 0, n);
        return truncated(r);
    }
    memcpy(dst, r->p, n);
    r->p += n;
    return NRV_OK;
}
/* The format is little-endian; every supported target (x86_64, aarch64) is too. */
static nrv_status rd_u16(reader *r, uint16_t *v) { return rd_bytes(r, v, 2); }
static nrv_status rd_u32(reader *r, uint32_t *v) { return rd_bytes(r, v, 4); }
static nrv_status rd_i32(reader *r, int32_t *v) { return rd_bytes(r, v, 4); }
static nrv_status rd_u64(reader *r, uint64_t *v) { return rd_bytes(r, v, 8); }
static nrv_status rd_i64(reader *r, int64_t *v) { return rd_bytes(r, v, 8); }

/* A count read from the file, bounded by what the remaining bytes could possibly hold
 * (each record is at least min_record bytes), so a corrupted count cannot make us allocate
 * gigabytes before failing. */
static nrv_status rd_count(reader *r, uint32_t *n, size_t min_record) {
    *n = 0;
    NRV_TRY(rd_u32(r, n));
    if (min_record && (uint64_t)*n * min_record > (uint64_t)(r->end - r->p))
        return nrv_fail(NRV_ERR_FORMAT, "plan: %s count %u does not fit the metadata", r->what, *n);
    return NRV_OK;
}

static nrv_status rd_string_ref(nrv_session_t *s, reader *r, const char **out) {
    uint32_t i = 0;
    NRV_TRY(rd_u32(r, &i));
    if (i >= s->n_strings) return nrv_fail(NRV_ERR_FORMAT, "plan: %s: string index %u out of range", r->what, i);
    *out = s->strings[i];
    return NRV_OK;
}

static int dtype_known(uint32_t dt) { return dt <= NRV_F64; }

/* ------------------------------------------------------------------ expressions */

static int64_t floordiv64(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Evaluates expression e with the current symbol values into s->expr_vals[e]. */
static nrv_status eval_expr(nrv_session_t *s, uint32_t e) {
    int64_t stack[NRV_PLAN_MAX_EXPR_STACK];
    int sp = 0;
    const int64_t *code = s->expr_code[e];
    for (uint32_t i = 0; i < s->expr_len[e]; i++) {
        const int64_t op = code[2 * i], arg = code[2 * i + 1];
        if (op == NRV_EXPR_CONST || op == NRV_EXPR_SYM || op == NRV_EXPR_REF) {
            /* operands were range-checked at load */
            stack[sp++] = op == NRV_EXPR_CONST ? arg : op == NRV_EXPR_SYM ? s->symbol_vals[arg] : s->expr_vals[arg];
            continue;
        }
        const int64_t b = stack[--sp], a = stack[--sp];
        int64_t v;
        int bad = 0;
        switch (op) {
        case NRV_EXPR_ADD: bad = __builtin_add_overflow(a, b, &v); break;
        case NRV_EXPR_SUB: bad = __builtin_sub_overflow(a, b, &v); break;
        case NRV_EXPR_MUL: bad = __builtin_mul_overflow(a, b, &v); break;
        case NRV_EXPR_FLOORDIV:
        case NRV_EXPR_CEILDIV:
        case NRV_EXPR_MOD:
            if (b == 0 || (a == INT64_MIN && b == -1))
                return nrv_fail(NRV_ERR_SHAPE, "plan: dimension expression %u divides %lld by %lld", e, (long long)a,
                                (long long)b);
            if (op == NRV_EXPR_FLOORDIV) v = floordiv64(a, b);
            else if (op == NRV_EXPR_CEILDIV) v = -floordiv64(-a, b);
            else v = a - floordiv64(a, b) * b;
            break;
        case NRV_EXPR_MIN: v = a < b ? a : b; break;
        default: v = a > b ? a : b; break; /* NRV_EXPR_MAX; opcodes were checked at load */
        }
        if (bad) return nrv_fail(NRV_ERR_OVERFLOW, "plan: dimension expression %u overflows", e);
        stack[sp++] = v;
    }
    s->expr_vals[e] = stack[0];
    return NRV_OK;
}

/* Static check of an expression's RPN: known opcodes, operands in range, a stack that never
 * underflows or overflows and ends with exactly one value. */
static nrv_status check_expr(const nrv_session_t *s, uint32_t e) {
    int depth = 0;
    for (uint32_t i = 0; i < s->expr_len[e]; i++) {
        const int64_t op = s->expr_code[e][2 * i], arg = s->expr_code[e][2 * i + 1];
        if (op == NRV_EXPR_CONST || op == NRV_EXPR_SYM || op == NRV_EXPR_REF) {
            if (op == NRV_EXPR_SYM && (arg < 0 || arg >= (int64_t)s->n_symbols))
                return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u: symbol %lld out of range", e, (long long)arg);
            if (op == NRV_EXPR_REF && (arg < 0 || arg >= (int64_t)e))
                return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u refers to expression %lld (not an earlier one)",
                                e, (long long)arg);
            if (++depth > NRV_PLAN_MAX_EXPR_STACK)
                return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u is too deep", e);
        } else if (op >= NRV_EXPR_ADD && op <= NRV_EXPR_CEILDIV) {
            if (depth < 2) return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u: stack underflow", e);
            depth--;
        } else {
            return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u: unknown opcode %lld", e, (long long)op);
        }
    }
    if (depth != 1) return nrv_fail(NRV_ERR_FORMAT, "plan: expression %u leaves %d values", e, depth);
    return NRV_OK;
}

static int64_t resolve_dim(const nrv_session_t *s, int64_t ref) { return ref >= 0 ? ref : s->expr_vals[-ref - 1]; }

static nrv_status check_dimref(const nrv_session_t *s, int64_t ref, const char *what) {
    if (ref < 0 && (-(ref + 1)) >= (int64_t)s->n_exprs)
        return nrv_fail(NRV_ERR_FORMAT, "plan: %s refers to expression %lld of %u", what, (long long)(-(ref + 1)),
                        s->n_exprs);
    return NRV_OK;
}

/* Sets t's dims and numel from its dimrefs (current expression values); fails on a
 * negative extent or an element count that overflows. */
static nrv_status refresh_dims(const nrv_session_t *s, plan_tensor *t) {
    int64_t numel = 1;
    for (int i = 0; i < t->view.rank; i++) {
        const int64_t d = resolve_dim(s, t->dimrefs[i]);
        if (d < 0)
            return nrv_fail(NRV_ERR_SHAPE, "plan: tensor '%s' gets a negative extent %lld on axis %d at these input sizes",
                            t->name, (long long)d, i);
        t->view.dims[i] = d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return nrv_fail(NRV_ERR_OVERFLOW, "plan: tensor '%s' has too many elements", t->name);
    }
    t->view.numel = numel;
    return NRV_OK;
}

static nrv_status tensor_bytes(const plan_tensor *t, uint64_t *bytes) {
    if (nrv_mul_overflow((uint64_t)t->view.numel, nrv_dtype_size((nrv_dtype)t->view.dtype), bytes))
        return nrv_fail(NRV_ERR_OVERFLOW, "plan: tensor '%s' is too large", t->name);
    return NRV_OK;
}

/* A tensor in the arena, the weights or a state buffer must fit the bytes reserved for it. */
static nrv_status check_fits(const plan_tensor *t) {
    uint64_t bytes;
    NRV_TRY(tensor_bytes(t, &bytes));
    if (bytes > t->capacity)
        return nrv_fail(NRV_ERR_SHAPE,
                        "plan: tensor '%s' needs %" PRIu64 " bytes at these input sizes but the plan reserved %" PRIu64
                        " (an input is larger than the bounds the plan was compiled for)",
                        t->name, bytes, t->capacity);
    return NRV_OK;
}

/* A symbolic tensor's view at the current sizes: its dims, and for one in the arena, the
 * weights or a state buffer, that it fits the bytes reserved (a feed's alias is checked
 * against the feed by refresh_tensors). */
static nrv_status refresh_symbolic_view(const nrv_session_t *s, plan_tensor *t) {
    NRV_TRY(refresh_dims(s, t));
    return t->storage == NRV_STORAGE_INPUT ? NRV_OK : check_fits(t);
}

/* Every dimension expression at the current symbol values (in order: later ones may refer
 * to earlier ones). */
static nrv_status eval_exprs(nrv_session_t *s) {
    for (uint32_t e = 0; e < s->n_exprs; e++) NRV_TRY(eval_expr(s, e));
    return NRV_OK;
}

/* ------------------------------------------------------------------ loading */

static nrv_status parse_header(const uint8_t *buf, uint64_t size, uint64_t *meta_off, uint64_t *meta_len,
                               uint64_t *w_off, uint64_t *w_len, uint8_t hash[32]) {
    if (size < NRV_PLAN_HEADER_BYTES)
        return nrv_fail(NRV_ERR_FORMAT, "plan: %" PRIu64 " bytes is shorter than the %u-byte header (truncated file?)",
                        size, NRV_PLAN_HEADER_BYTES);
    if (memcmp(buf, NRV_PLAN_MAGIC, 8) != 0)
        return nrv_fail(NRV_ERR_FORMAT, "plan: bad magic (not a nerve .nrv plan)");
    uint32_t version, header_bytes;
    uint64_t file_bytes;
    memcpy(&version, buf + 8, 4);
    memcpy(&header_bytes, buf + 12, 4);
    memcpy(&file_bytes, buf + 16, 8);
    memcpy(meta_off, buf + 24, 8);
    memcpy(meta_len, buf + 32, 8);
    memcpy(w_off, buf + 40, 8);
    memcpy(w_len, buf + 48, 8);
    memcpy(hash, buf + 56, 32);
    if (version != NRV_PLAN_VERSION)
        return nrv_fail(NRV_ERR_FORMAT, "plan: format version %u, this nerve reads version %u (recompile the model)",
                        version, NRV_PLAN_VERSION);
    if (header_bytes != NRV_PLAN_HEADER_BYTES)
        return nrv_fail(NRV_ERR_FORMAT, "plan: header size %u, expected %u", header_bytes, NRV_PLAN_HEADER_BYTES);
    if (file_bytes != size)
        return nrv_fail(NRV_ERR_FORMAT, "plan: the header says %" PRIu64 " bytes but %" PRIu64 " were given (truncated?)",
                        file_bytes, size);
    if (*meta_off < header_bytes || *meta_off > size || *meta_len > size - *meta_off || *w_off < header_bytes ||
        *w_off > size || *w_len > size - *w_off || (*w_off % 64) != 0 || *w_off < *meta_off + *meta_len)
        return nrv_fail(NRV_ERR_FORMAT, "plan: section offsets outside the file");
    /* the metadata holds each weight's SHA-256: the weights are verified one by one when
     * loaded (and not at all when an identical copy is already loaded) */
    uint8_t got[32];
    nrv_sha256(buf + header_bytes, (size_t)(*w_off - header_bytes), got);
    if (memcmp(got, hash, 32) != 0)
        return nrv_fail(NRV_ERR_FORMAT, "plan: SHA-256 mismatch: the file is corrupted");
    return NRV_OK;
}

static nrv_status parse_meta(nrv_session_t *s, reader *r) {
    r->what = "strings";
    NRV_TRY(rd_count(r, &s->n_strings, 4));
    S_ALLOC(s, s->strings, s->n_strings);
    for (uint32_t i = 0; i < s->n_strings; i++) {
        uint32_t len = 0;
        NRV_TRY(rd_u32(r, &len));
        if (len > (uint64_t)(r->end - r->p)) return truncated(r);
        S_ALLOC(s, s->strings[i], (uint64_t)len + 1);
        NRV_TRY(rd_bytes(r, s->strings[i], len));
    }

    r->what = "symbols";
    NRV_TRY(rd_count(r, &s->n_symbols, 12));
    S_ALLOC(s, s->symbol_names, s->n_symbols);
    S_ALLOC(s, s->symbol_bounds, s->n_symbols);
    S_ALLOC(s, s->symbol_vals, s->n_symbols);
    S_ALLOC(s, s->prev_symbol_vals, s->n_symbols);
    S_ALLOC(s, s->symbol_runtime, s->n_symbols);
    for (uint32_t i = 0; i < s->n_symbols; i++) {
        NRV_TRY(rd_string_ref(s, r, &s->symbol_names[i]));
        NRV_TRY(rd_i64(r, &s->symbol_bounds[i]));
        if (s->symbol_bounds[i] < 0)
            return nrv_fail(NRV_ERR_FORMAT, "plan: symbol '%s' has a negative bound", s->symbol_names[i]);
    }

    r->what = "expressions";
    NRV_TRY(rd_count(r, &s->n_exprs, 4));
    S_ALLOC(s, s->expr_code, s->n_exprs);
    S_ALLOC(s, s->expr_len, s->n_exprs);
    S_ALLOC(s, s->expr_vals, s->n_exprs);
    for (uint32_t e = 0; e < s->n_exprs; e++) {
        NRV_TRY(rd_count(r, &s->expr_len[e], 16));
        S_ALLOC(s, s->expr_code[e], 2 * (uint64_t)s->expr_len[e]);
        for (uint32_t i = 0; i < 2 * s->expr_len[e]; i++) NRV_TRY(rd_i64(r, &s->expr_code[e][i]));
        NRV_TRY(check_expr(s, e));
    }

    r->what = "weights";
    NRV_TRY(rd_count(r, &s->n_weights, 56));
    S_ALLOC(s, s->weight_req, s->n_weights);
    S_ALLOC(s, s->weight_refs, s->n_weights);
    S_ALLOC(s, s->weight_ptr, s->n_weights);
    S_ALLOC(s, s->weight_len, s->n_weights);
    for (uint32_t i = 0; i < s->n_weights; i++) {
        nrv_weight_request *w = &s->weight_req[i];
        uint64_t off = 0;
        NRV_TRY(rd_u64(r, &off));
        NRV_TRY(rd_u64(r, &w->file_bytes));
        NRV_TRY(rd_u32(r, &w->file_dtype));
        NRV_TRY(rd_u32(r, &w->load_dtype));
        NRV_TRY(rd_bytes(r, w->digest, 32));
        const uint32_t fdt = w->file_dtype, ldt = w->load_dtype;
        if (!dtype_known(fdt) || !dtype_known(ldt) || (fdt != ldt && !(fdt == NRV_F16 && ldt == NRV_F32)))
            return nrv_fail(NRV_ERR_FORMAT, "plan: weight %u: unsupported dtype conversion %u -> %u", i, fdt, ldt);
        w->src = (const uint8_t *)(uintptr_t)off; /* an offset until load_weights checks it */
    }

    r->what = "tensors";
    NRV_TRY(rd_count(r, &s->n_tensors, 32));
    S_ALLOC(s, s->tensors, s->n_tensors);
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        plan_tensor *t = &s->tensors[i];
        uint8_t hdr[4];
        NRV_TRY(rd_string_ref(s, r, &t->name));
        NRV_TRY(rd_bytes(r, hdr, 4));
        NRV_TRY(rd_i32(r, &t->ref));
        NRV_TRY(rd_u64(r, &t->offset));
        NRV_TRY(rd_u64(r, &t->capacity));
        if (!dtype_known(hdr[0]) || hdr[1] > NRV_PLAN_MAX_RANK || hdr[2] > NRV_STORAGE_STATE)
            return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s': bad dtype %u, rank %u or storage %u", t->name, hdr[0],
                            hdr[1], hdr[2]);
        t->view.dtype = hdr[0];
        t->view.rank = hdr[1];
        t->storage = hdr[2];
        int64_t *refs;
        S_ALLOC(s, refs, t->view.rank ? t->view.rank : 1);
        for (int k = 0; k < t->view.rank; k++) {
            NRV_TRY(rd_i64(r, &refs[k]));
            NRV_TRY(check_dimref(s, refs[k], t->name));
            if (refs[k] < 0) t->symbolic = 1;
        }
        t->dimrefs = refs;
    }

    r->what = "inputs";
    NRV_TRY(rd_count(r, &s->n_inputs, 4));
    S_ALLOC(s, s->inputs, s->n_inputs);
    S_ALLOC(s, s->input_srcs, s->n_inputs);
    S_ALLOC(s, s->input_dims, s->n_inputs);
    for (uint32_t i = 0; i < s->n_inputs; i++) {
        NRV_TRY(rd_u32(r, &s->inputs[i]));
        if (s->inputs[i] >= s->n_tensors) return nrv_fail(NRV_ERR_FORMAT, "plan: input %u: bad tensor index", i);
    }
    r->what = "binds";
    NRV_TRY(rd_count(r, &s->n_binds, 12));
    S_ALLOC(s, s->binds, s->n_binds);
    for (uint32_t i = 0; i < s->n_binds; i++) {
        plan_bind *b = &s->binds[i];
        NRV_TRY(rd_u32(r, &b->input));
        NRV_TRY(rd_u32(r, &b->axis));
        NRV_TRY(rd_u32(r, &b->symbol));
        if (b->input >= s->n_inputs || b->symbol >= s->n_symbols ||
            b->axis >= (uint32_t)s->tensors[s->inputs[b->input]].view.rank)
            return nrv_fail(NRV_ERR_FORMAT, "plan: symbol binding %u out of range", i);
    }
    r->what = "outputs";
    NRV_TRY(rd_count(r, &s->n_outputs, 4));
    S_ALLOC(s, s->outputs, s->n_outputs);
    for (uint32_t i = 0; i < s->n_outputs; i++) {
        NRV_TRY(rd_u32(r, &s->outputs[i]));
        if (s->outputs[i] >= s->n_tensors) return nrv_fail(NRV_ERR_FORMAT, "plan: output %u: bad tensor index", i);
    }
    r->what = "states";
    NRV_TRY(rd_count(r, &s->n_states, 12));
    S_ALLOC(s, s->states, s->n_states);
    for (uint32_t i = 0; i < s->n_states; i++) {
        NRV_TRY(rd_u32(r, &s->states[i].input));
        NRV_TRY(rd_u32(r, &s->states[i].output));
        NRV_TRY(rd_u32(r, &s->states[i].flags));
        if (s->states[i].input >= s->n_inputs || s->states[i].output >= s->n_outputs)
            return nrv_fail(NRV_ERR_FORMAT, "plan: state pair %u out of range", i);
        if (s->states[i].flags & ~(uint32_t)NRV_STATE_APPEND)
            return nrv_fail(NRV_ERR_FORMAT, "plan: state pair %u has unknown flags %#x", i, s->states[i].flags);
    }
    r->what = "arena size";
    NRV_TRY(rd_u64(r, &s->arena_bytes));

    r->what = "ops";
    NRV_TRY(rd_count(r, &s->n_ops, 24));
    S_ALLOC(s, s->ops, s->n_ops);
    for (uint32_t i = 0; i < s->n_ops; i++) {
        plan_op *op = &s->ops[i];
        nrv_op_args *a = &op->args;
        uint16_t n_in = 0, n_out = 0, n_iattr = 0, n_fattr = 0, n_dattr = 0, pad = 0;
        NRV_TRY(rd_string_ref(s, r, &a->type));
        NRV_TRY(rd_string_ref(s, r, &a->name));
        NRV_TRY(rd_u16(r, &n_in));
        NRV_TRY(rd_u16(r, &n_out));
        NRV_TRY(rd_u16(r, &n_iattr));
        NRV_TRY(rd_u16(r, &n_fattr));
        NRV_TRY(rd_u16(r, &n_dattr));
        NRV_TRY(rd_u16(r, &pad));
        NRV_TRY(rd_i32(r, &op->scratch_id));
        a->n_in = n_in;
        a->n_out = n_out;
        a->n_iattr = n_iattr;
        a->n_fattr = n_fattr;
        a->n_dattr = n_dattr;
        S_ALLOC(s, op->in_ids, n_in ? n_in : 1);
        S_ALLOC(s, op->out_ids, n_out ? n_out : 1);
        const nrv_tview **in;
        nrv_tview **out;
        S_ALLOC(s, in, n_in ? n_in : 1);
        S_ALLOC(s, out, n_out ? n_out : 1);
        for (int k = 0; k < n_in; k++) {
            NRV_TRY(rd_i32(r, &op->in_ids[k]));
            if (op->in_ids[k] < -1 || op->in_ids[k] >= (int32_t)s->n_tensors)
                return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): input %d: bad tensor index", i, a->type, k);
            in[k] = op->in_ids[k] >= 0 ? &s->tensors[op->in_ids[k]].view : NULL;
        }
        for (int k = 0; k < n_out; k++) {
            NRV_TRY(rd_i32(r, &op->out_ids[k]));
            if (op->out_ids[k] < 0 || op->out_ids[k] >= (int32_t)s->n_tensors)
                return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): output %d: bad tensor index", i, a->type, k);
            out[k] = &s->tensors[op->out_ids[k]].view;
        }
        a->in = in;
        a->out = out;
        int64_t *iattr;
        float *fattr;
        int64_t *drefs;
        S_ALLOC(s, iattr, n_iattr ? n_iattr : 1);
        S_ALLOC(s, fattr, n_fattr ? n_fattr : 1);
        S_ALLOC(s, drefs, n_dattr ? n_dattr : 1);
        S_ALLOC(s, op->dattr_vals, n_dattr ? n_dattr : 1);
        for (int k = 0; k < n_iattr; k++) NRV_TRY(rd_i64(r, &iattr[k]));
        for (int k = 0; k < n_fattr; k++) NRV_TRY(rd_bytes(r, &fattr[k], 4));
        for (int k = 0; k < n_dattr; k++) {
            NRV_TRY(rd_i64(r, &drefs[k]));
            NRV_TRY(check_dimref(s, drefs[k], a->type));
        }
        a->iattr = iattr;
        a->fattr = fattr;
        a->dattr = op->dattr_vals;
        op->dattr_refs = drefs;
        if (op->scratch_id < -1 || op->scratch_id >= (int32_t)s->n_tensors ||
            (op->scratch_id >= 0 && s->tensors[op->scratch_id].storage != NRV_STORAGE_ARENA))
            return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): bad scratch tensor", i, a->type);
        /* ops lay int64 and vector data out in their scratch from its start: the compiler
         * places every storage unit at a multiple of 64 bytes (memplan.py), so anything else
         * is a corrupted plan */
        if (op->scratch_id >= 0 && s->tensors[op->scratch_id].offset % 64 != 0)
            return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): scratch tensor at offset %llu is not 64-byte aligned", i,
                            a->type, (unsigned long long)s->tensors[op->scratch_id].offset);
        if (strcmp(a->type, "set_dim") == 0) {
            /* in[0]: an int64 scalar an earlier op wrote; iattr[0]: the symbol it sets */
            op->control = 3;
            if (n_in != 1 || n_out != 0 || n_iattr != 1 || iattr[0] < 0 || iattr[0] >= (int64_t)s->n_symbols ||
                !in[0] || in[0]->dtype != NRV_I64)
                return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (set_dim): expected an int64 input and a symbol index", i);
            s->symbol_runtime[iattr[0]] = 1;
        } else if (strcmp(a->type, "if") == 0 || strcmp(a->type, "jump") == 0) {
            op->control = a->type[0] == 'i' ? 1 : 2;
            const int want_in = op->control == 1 ? 1 : 0;
            /* Jumps only go forward, so every run ends. */
            if (n_in != want_in || n_iattr != 1 || iattr[0] <= (int64_t)i || iattr[0] > (int64_t)s->n_ops)
                return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): bad control-flow target", i, a->type);
            if (want_in && (!in[0] || in[0]->dtype != NRV_BOOL))
                return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (if): the condition must be a bool tensor", i);
        } else {
            op->def = nrv_plan_op_find(a->type);
            if (!op->def)
                return nrv_fail(NRV_ERR_UNSUPPORTED, "plan: op %u ('%s', node '%s') is not implemented by this libnerve",
                                i, a->type, a->name);
        }
    }
    if (r->p != r->end) return nrv_fail(NRV_ERR_FORMAT, "plan: %zu unexpected bytes after the ops", (size_t)(r->end - r->p));
    return NRV_OK;
}

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* Takes every weight from the process-wide store (shared, or loaded and verified there). */
static nrv_status load_weights(nrv_session_t *s, const uint8_t *section, uint64_t section_len) {
    for (uint32_t i = 0; i < s->n_weights; i++) {
        nrv_weight_request *w = &s->weight_req[i];
        const uint64_t off = (uint64_t)(uintptr_t)w->src, len = w->file_bytes;
        if (off > section_len || len > section_len - off || len % nrv_dtype_size((nrv_dtype)w->file_dtype) != 0)
            return nrv_fail(NRV_ERR_FORMAT, "plan: weight %u lies outside the weight section", i);
        w->src = section + off;
        w->loaded_bytes = len / nrv_dtype_size((nrv_dtype)w->file_dtype) * nrv_dtype_size((nrv_dtype)w->load_dtype);
    }
    NRV_TRY(nrv_weights_acquire(s->weight_req, s->n_weights, s->weight_refs, &s->weight_new_bytes));
    for (uint32_t i = 0; i < s->n_weights; i++) {
        s->weight_ptr[i] = nrv_weight_data(s->weight_refs[i]);
        s->weight_len[i] = s->weight_req[i].loaded_bytes;
        s->weight_bytes += s->weight_len[i];
        s->weight_req[i].src = NULL; /* the plan's bytes may go away after create */
    }
    return NRV_OK;
}

/* An op's output in the arena may share bytes with one of its arena inputs only exactly (an
 * elementwise op writing in place); a partial overlap would make the op read what it has
 * already overwritten, so a plan that asks for one is refused. */
static nrv_status check_no_partial_overlap(const nrv_session_t *s) {
    for (uint32_t i = 0; i < s->n_ops; i++) {
        const plan_op *op = &s->ops[i];
        for (int o = 0; o < op->args.n_out; o++) {
            const plan_tensor *y = &s->tensors[op->out_ids[o]];
            if (y->storage != NRV_STORAGE_ARENA || !y->capacity) continue;
            for (int k = 0; k < op->args.n_in; k++) {
                if (op->in_ids[k] < 0) continue;
                const plan_tensor *x = &s->tensors[op->in_ids[k]];
                if (x->storage != NRV_STORAGE_ARENA || !x->capacity || x->offset == y->offset) continue;
                if (x->offset < y->offset + y->capacity && y->offset < x->offset + x->capacity)
                    return nrv_fail(NRV_ERR_FORMAT, "plan: op %u (%s): output '%s' partly overlaps input '%s'", i,
                                    op->args.type, y->name, x->name);
            }
        }
    }
    return NRV_OK;
}

/* Checks every tensor's storage reference and, for tensors of fixed shape, its extent;
 * sets the data pointers that do not change between runs. */
static nrv_status place_tensors(nrv_session_t *s) {
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        plan_tensor *t = &s->tensors[i];
        if (!t->symbolic) NRV_TRY(refresh_dims(s, t));
        switch (t->storage) {
        case NRV_STORAGE_ARENA:
            if (t->offset > s->arena_bytes || t->capacity > s->arena_bytes - t->offset)
                return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' lies outside the arena", t->name);
            t->view.data = s->arena + t->offset;
            break;
        case NRV_STORAGE_WEIGHT:
            if (t->symbolic || t->ref < 0 || (uint32_t)t->ref >= s->n_weights || t->offset > s->weight_len[t->ref] ||
                t->capacity > s->weight_len[t->ref] - t->offset)
                return nrv_fail(NRV_ERR_FORMAT, "plan: weight tensor '%s' lies outside its weight", t->name);
            t->view.data = (void *)(uintptr_t)(s->weight_ptr[t->ref] + t->offset); /* read-only */
            break;
        case NRV_STORAGE_INPUT:
            if (t->ref < 0 || (uint32_t)t->ref >= s->n_inputs)
                return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' refers to input %d of %u", t->name, t->ref, s->n_inputs);
            break;
        default: /* STATE */
            if (t->ref < 0 || (uint32_t)t->ref >= s->n_states)
                return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' refers to state %d of %u", t->name, t->ref, s->n_states);
            break;
        }
        if (!t->symbolic && t->storage != NRV_STORAGE_INPUT) NRV_TRY(check_fits(t));
        if (t->offset % nrv_dtype_size((nrv_dtype)t->view.dtype) != 0)
            return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' is not aligned to its element size", t->name);
    }
    NRV_TRY(check_no_partial_overlap(s));
    S_ALLOC(s, s->dynamic, s->n_tensors);
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const plan_tensor *t = &s->tensors[i];
        if (t->symbolic || t->storage == NRV_STORAGE_INPUT || t->storage == NRV_STORAGE_STATE)
            s->dynamic[s->n_dynamic++] = i;
    }
    return NRV_OK;
}

static nrv_status alloc_states(nrv_session_t *s) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n_states; i++) {
        const plan_tensor *in = &s->tensors[s->inputs[s->states[i].input]];
        const plan_tensor *out = &s->tensors[s->outputs[s->states[i].output]];
        if (in->view.dtype != out->view.dtype || in->view.rank != out->view.rank || out->storage != NRV_STORAGE_STATE ||
            out->ref != (int32_t)i || out->offset != 0)
            return nrv_fail(NRV_ERR_FORMAT, "plan: state pair %u ('%s' -> '%s') is inconsistent", i, out->name, in->name);
        total += ((s->states[i].flags & NRV_STATE_APPEND) ? 1 : 2) * (align64(out->capacity) + 64);
    }
    if (!s->n_states) return NRV_OK;
    NRV_TRY(nrv_pool_create(NRV_POOL_STATIC, total + 128, "plan state", &s->state_pool));
    for (uint32_t i = 0; i < s->n_states; i++) {
        const plan_tensor *out = &s->tensors[s->outputs[s->states[i].output]];
        /* an append pair has one buffer: the run reads the first P rows and writes row P
         * (op "kv_append"), so reading and writing the same bytes is the point */
        const int nbuf = (s->states[i].flags & NRV_STATE_APPEND) ? 1 : 2;
        for (int k = 0; k < nbuf; k++) {
            NRV_TRY(nrv_pool_alloc(s->state_pool, out->capacity ? out->capacity : 1, &s->states[i].buf[k]));
            memset(s->states[i].buf[k], 0, out->capacity ? out->capacity : 1);
        }
        if (nbuf == 1) s->states[i].buf[1] = s->states[i].buf[0];
    }
    /* Every tensor stored in a state buffer must fit the pair's output. */
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const plan_tensor *t = &s->tensors[i];
        if (t->storage != NRV_STORAGE_STATE) continue;
        const plan_tensor *out = &s->tensors[s->outputs[s->states[t->ref].output]];
        if (t->offset > out->capacity || t->capacity > out->capacity - t->offset)
            return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' lies outside its state buffer", t->name);
    }
    return NRV_OK;
}

nrv_status nrv_session_create(const void *plan, uint64_t size, nrv_session_t **out) {
    static const char fn[] = "nrv_session_create";
    NRV_REQUIRE_PTR(fn, out);
    *out = NULL;
    NRV_REQUIRE_PTR(fn, plan);
    const uint8_t *buf = plan;
    uint64_t meta_off = 0, meta_len = 0, w_off = 0, w_len = 0;
    uint8_t hash[32];
    NRV_TRY(parse_header(buf, size, &meta_off, &meta_len, &w_off, &w_len, hash));

    nrv_session_t *s = nrv_sys_alloc(64, sizeof *s);
    if (!s) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memset(s, 0, sizeof *s);
    memcpy(s->hash, hash, 32);
    for (int i = 0; i < 32; i++) snprintf(s->hash_hex + 2 * i, 3, "%02x", hash[i]);

    reader r = {buf + meta_off, buf + meta_off + meta_len, "metadata"};
    nrv_status st = parse_meta(s, &r);
    if (st == NRV_OK) st = load_weights(s, buf + w_off, w_len);
    if (st == NRV_OK) st = nrv_pool_create(NRV_POOL_STATIC, align64(s->arena_bytes) + 256, "plan arena", &s->arena_pool);
    if (st == NRV_OK && s->arena_bytes) st = nrv_pool_alloc(s->arena_pool, s->arena_bytes, (void **)&s->arena);
    if (st == NRV_OK) st = place_tensors(s);
    if (st == NRV_OK) st = alloc_states(s);
    for (uint32_t i = 0; st == NRV_OK && i < s->n_ops; i++) {
        plan_op *op = &s->ops[i];
        if (op->scratch_id >= 0) {
            op->args.scratch = s->tensors[op->scratch_id].view.data;
            op->args.scratch_bytes = (size_t)s->tensors[op->scratch_id].capacity;
        }
    }
    if (st != NRV_OK) {
        /* keep the first error's message: freeing does not fail */
        nrv_session_free(s);
        return st;
    }
    *out = s;
    return NRV_OK;
}

nrv_status nrv_session_create_from_file(const char *path, nrv_session_t **out) {
    static const char fn[] = "nrv_session_create_from_file";
    NRV_REQUIRE_PTR(fn, out);
    *out = NULL;
    NRV_REQUIRE_PTR(fn, path);
    FILE *f = fopen(path, "rb");
    if (!f) return nrv_fail(NRV_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
    nrv_status st = NRV_OK;
    uint8_t *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = nrv_fail(NRV_ERR_IO, "%s: cannot size '%s'", fn, path);
    } else if (!(buf = nrv_sys_alloc(64, (size_t)len + 1))) {
        st = nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: no memory for the %ld bytes of '%s'", fn, len, path);
    } else if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        st = nrv_fail(NRV_ERR_IO, "%s: short read of '%s'", fn, path);
    }
    fclose(f);
    if (st == NRV_OK) st = nrv_session_create(buf, (uint64_t)len, out);
    nrv_sys_free(buf);
    return st;
}

void nrv_session_free(nrv_session_t *s) {
    if (!s) return;
    nrv_threadpool_free(s->pool);
    if (s->weight_refs) nrv_weights_release(s->weight_refs, s->n_weights);
    if (s->arena_pool) {
        if (s->arena) nrv_buffer_release(s->arena);
        nrv_pool_free(s->arena_pool);
    }
    if (s->state_pool) {
        for (uint32_t i = 0; s->states && i < s->n_states; i++)
            for (int k = 0; k < ((s->states[i].flags & NRV_STATE_APPEND) ? 1 : 2); k++)
                if (s->states[i].buf[k]) nrv_buffer_release(s->states[i].buf[k]);
        nrv_pool_free(s->state_pool);
    }
    for (size_t i = 0; i < s->n_allocs; i++) nrv_sys_free(s->allocs[i]);
    nrv_sys_free(s->allocs);
    nrv_sys_free(s);
}

/* ------------------------------------------------------------------ running */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

nrv_status nrv_session_profile(nrv_session_t *s, int enable) {
    NRV_REQUIRE_PTR("nrv_session_profile", s);
    s->profile = enable != 0;
    for (uint32_t i = 0; i < s->n_ops; i++) s->ops[i].calls = s->ops[i].total_ns = 0;
    return NRV_OK;
}

static int state_of_input(const nrv_session_t *s, uint32_t input) {
    for (uint32_t i = 0; i < s->n_states; i++)
        if (s->states[i].input == input) return (int)i;
    return -1;
}

/* Where input i's bytes are this run: the feed, or the state buffer when the feed is
 * omitted and the input is bound to a state. Sets dims and rank to the data's shape. */
static nrv_status input_source(nrv_session_t *s, uint32_t i, const nrv_tensor *feed, const void **data,
                               const int64_t **dims, int32_t *rank) {
    const plan_tensor *t = &s->tensors[s->inputs[i]];
    if (feed->data || feed->rank > 0) {
        if (feed->dtype != t->view.dtype)
            return nrv_fail(NRV_ERR_DTYPE, "run: input '%s' must be %s, got %s", t->name,
                            nrv_dtype_str((nrv_dtype)t->view.dtype), nrv_dtype_str((nrv_dtype)feed->dtype));
        if (feed->rank != t->view.rank)
            return nrv_fail(NRV_ERR_SHAPE, "run: input '%s' must have rank %d, got %d", t->name, t->view.rank,
                            feed->rank);
        *data = feed->data;
        *dims = feed->dims;
        *rank = feed->rank;
        if (!feed->data) {
            int64_t n = 1;
            for (int k = 0; k < feed->rank; k++) n *= feed->dims[k];
            if (n != 0) return nrv_fail(NRV_ERR_INVALID_ARG, "run: input '%s' has no data", t->name);
        }
        return NRV_OK;
    }
    const int st = state_of_input(s, i);
    if (st < 0) {
        return nrv_fail(NRV_ERR_INVALID_ARG, "run: input '%s' was not fed", t->name);
    }
    plan_state *ps = &s->states[st];
    if (!ps->valid)
        return nrv_fail(NRV_ERR_STATE, "run: state input '%s' was not fed and no earlier run produced it", t->name);
    *data = ps->buf[ps->cur];
    *dims = ps->dims;
    *rank = ps->rank;
    return NRV_OK;
}

static nrv_status bind_inputs(nrv_session_t *s, const nrv_tensor *feeds, const void **srcs, const int64_t **src_dims) {
    /* symbols */
    for (uint32_t k = 0; k < s->n_symbols; k++) s->symbol_vals[k] = -1;
    for (uint32_t i = 0; i < s->n_inputs; i++) {
        int32_t rank = 0;
        NRV_TRY(input_source(s, i, &feeds[i], &srcs[i], &src_dims[i], &rank));
        for (int k = 0; k < rank; k++)
            if (src_dims[i][k] < 0)
                return nrv_fail(NRV_ERR_SHAPE, "run: input '%s' has a negative extent on axis %d",
                                s->tensors[s->inputs[i]].name, k);
    }
    /* a size the data decides starts at its bound (what the plan reserved) until its
     * set_dim op runs */
    for (uint32_t k = 0; k < s->n_symbols; k++)
        if (s->symbol_runtime[k]) s->symbol_vals[k] = s->symbol_bounds[k];
    for (uint32_t b = 0; b < s->n_binds; b++) {
        const plan_bind *bd = &s->binds[b];
        if (s->symbol_runtime[bd->symbol])
            return nrv_fail(NRV_ERR_FORMAT, "plan: dimension '%s' is bound by an input and set by the data",
                            s->symbol_names[bd->symbol]);
        const int64_t v = src_dims[bd->input][bd->axis];
        int64_t *sym = &s->symbol_vals[bd->symbol];
        const char *in_name = s->tensors[s->inputs[bd->input]].name, *sym_name = s->symbol_names[bd->symbol];
        if (v > s->symbol_bounds[bd->symbol])
            return nrv_fail(NRV_ERR_SHAPE,
                            "run: input '%s' axis %u ('%s') is %lld, beyond the bound %lld the plan was compiled for",
                            in_name, bd->axis, sym_name, (long long)v, (long long)s->symbol_bounds[bd->symbol]);
        if (*sym >= 0 && *sym != v)
            return nrv_fail(NRV_ERR_SHAPE,
                            "run: dimension '%s' is %lld in one input and %lld in input '%s' axis %u (inputs that "
                            "share a symbolic dimension must agree, a placeholder for an unused input too)",
                            sym_name, (long long)*sym, (long long)v, in_name, bd->axis);
        *sym = v;
    }
    for (uint32_t k = 0; k < s->n_symbols; k++)
        if (s->symbol_vals[k] < 0)
            return nrv_fail(NRV_ERR_FORMAT, "run: dimension '%s' is not given by any input", s->symbol_names[k]);
    if (!s->views_valid || memcmp(s->prev_symbol_vals, s->symbol_vals, s->n_symbols * sizeof(int64_t)) != 0) {
        s->views_valid = 0; /* until refresh_tensors has re-derived the views for these sizes */
        NRV_TRY(eval_exprs(s));
    }
    /* every input's shape must now match exactly */
    for (uint32_t i = 0; i < s->n_inputs; i++) {
        const plan_tensor *t = &s->tensors[s->inputs[i]];
        for (int k = 0; k < t->view.rank; k++) {
            const int64_t want = resolve_dim(s, t->dimrefs[k]);
            if (src_dims[i][k] != want)
                return nrv_fail(NRV_ERR_SHAPE, "run: input '%s' axis %d is %lld, expected %lld", t->name, k,
                                (long long)src_dims[i][k], (long long)want);
        }
    }
    return NRV_OK;
}

/* Refreshes the views that can change. Dims are re-derived only when the bound sizes differ
 * from the last run's (a stream feeding equal chunks pays for pointers only). */
static nrv_status refresh_tensors(nrv_session_t *s, const void **srcs) {
    const int sizes_changed =
        !s->views_valid || memcmp(s->prev_symbol_vals, s->symbol_vals, s->n_symbols * sizeof(int64_t)) != 0;
    s->views_valid = 0;
    for (uint32_t k = 0; k < s->n_dynamic; k++) {
        plan_tensor *t = &s->tensors[s->dynamic[k]];
        if (t->symbolic && sizes_changed) NRV_TRY(refresh_symbolic_view(s, t));
        if (t->storage == NRV_STORAGE_INPUT) {
            if (sizes_changed) {
                /* an alias of a feed must lie inside the feed */
                const plan_tensor *base = &s->tensors[s->inputs[t->ref]];
                uint64_t bytes, base_bytes;
                NRV_TRY(tensor_bytes(t, &bytes));
                NRV_TRY(tensor_bytes(base, &base_bytes));
                if (t->offset > base_bytes || bytes > base_bytes - t->offset)
                    return nrv_fail(NRV_ERR_FORMAT, "plan: tensor '%s' lies outside input '%s'", t->name, base->name);
            }
            t->view.data = (uint8_t *)(uintptr_t)srcs[t->ref] + t->offset;
        } else if (t->storage == NRV_STORAGE_STATE) {
            plan_state *ps = &s->states[t->ref];
            t->view.data = (uint8_t *)ps->buf[1 - ps->cur] + t->offset;
        }
    }
    if (s->n_symbols) memcpy(s->prev_symbol_vals, s->symbol_vals, s->n_symbols * sizeof(int64_t));
    s->views_valid = 1;
    return NRV_OK;
}

/* set_dim: the symbol takes the count an op wrote (checked against the bound the memory plan
 * reserved), and the views of the symbolic tensors follow it. */
static nrv_status set_runtime_dim(nrv_session_t *s, const plan_op *op) {
    const nrv_tview *c = op->args.in[0];
    const uint32_t k = (uint32_t)op->args.iattr[0];
    if (c->numel != 1)
        return nrv_fail(NRV_ERR_SHAPE, "run: the count for '%s' has %lld elements, expected 1", s->symbol_names[k],
                        (long long)c->numel);
    const int64_t v = *(const int64_t *)c->data;
    if (v < 0 || v > s->symbol_bounds[k])
        return nrv_fail(NRV_ERR_SHAPE, "run: '%s' (node '%s') is %lld, outside [0, %lld] the plan was compiled for",
                        s->symbol_names[k], op->args.name, (long long)v, (long long)s->symbol_bounds[k]);
    if (v == s->symbol_vals[k]) return NRV_OK;
    s->symbol_vals[k] = v;
    NRV_TRY(eval_exprs(s));
    for (uint32_t j = 0; j < s->n_dynamic; j++)
        if (s->tensors[s->dynamic[j]].symbolic) NRV_TRY(refresh_symbolic_view(s, &s->tensors[s->dynamic[j]]));
    /* the views now hold these sizes: the next run compares its own against them */
    memcpy(s->prev_symbol_vals, s->symbol_vals, s->n_symbols * sizeof(int64_t));
    return NRV_OK;
}

static nrv_status session_run(nrv_session_t *s, const nrv_tensor *feeds, int n_feeds, nrv_tensor *outputs,
                              int n_outputs) {
    static const char fn[] = "nrv_session_run";
    NRV_REQUIRE_PTR(fn, s);
    if (n_feeds != (int)s->n_inputs || (s->n_inputs && !feeds))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %d feeds given, the plan has %u inputs", fn, n_feeds, s->n_inputs);
    if (n_outputs != (int)s->n_outputs || (s->n_outputs && !outputs))
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: room for %d outputs given, the plan has %u", fn, n_outputs,
                        s->n_outputs);
    NRV_TRY(bind_inputs(s, feeds, s->input_srcs, s->input_dims));
    nrv_status st = refresh_tensors(s, s->input_srcs);
    NRV_TRY(st);

    for (uint32_t pc = 0; pc < s->n_ops;) {
        plan_op *op = &s->ops[pc];
        if (op->control == 1) {
            const nrv_tview *c = op->args.in[0];
            if (c->numel != 1)
                return nrv_fail(NRV_ERR_SHAPE, "run: condition of '%s' has %lld elements, expected 1", op->args.name,
                                (long long)c->numel);
            pc = *(const uint8_t *)c->data ? pc + 1 : (uint32_t)op->args.iattr[0];
            continue;
        }
        if (op->control == 2) {
            pc = (uint32_t)op->args.iattr[0];
            continue;
        }
        if (op->control == 3) {
            NRV_TRY(set_runtime_dim(s, op));
            pc++;
            continue;
        }
        for (int k = 0; k < op->args.n_dattr; k++) op->dattr_vals[k] = resolve_dim(s, op->dattr_refs[k]);
        if (op->scratch_id >= 0) {
            uint64_t bytes;
            NRV_TRY(tensor_bytes(&s->tensors[op->scratch_id], &bytes));
            op->args.scratch_bytes = (size_t)bytes;
        }
        if (s->profile) {
            const uint64_t t0 = now_ns();
            NRV_TRY(op->def->run(&op->args));
            op->total_ns += now_ns() - t0;
            op->calls++;
        } else {
            NRV_TRY(op->def->run(&op->args));
        }
        pc++;
    }

    for (uint32_t i = 0; i < s->n_outputs; i++) {
        const plan_tensor *t = &s->tensors[s->outputs[i]];
        nrv_tensor *o = &outputs[i];
        o->data = t->view.data;
        o->dtype = t->view.dtype;
        o->rank = t->view.rank;
        memcpy(o->dims, t->view.dims, sizeof o->dims);
    }
    for (uint32_t i = 0; i < s->n_states; i++) {
        plan_state *ps = &s->states[i];
        const plan_tensor *t = &s->tensors[s->outputs[ps->output]];
        ps->cur = 1 - ps->cur;
        ps->valid = 1;
        ps->rank = t->view.rank;
        memcpy(ps->dims, t->view.dims, sizeof ps->dims);
    }
    return NRV_OK;
}

nrv_status nrv_session_run(nrv_session_t *s, const nrv_tensor *feeds, int n_feeds, nrv_tensor *outputs,
                           int n_outputs) {
    const nrv_fp_mode caller = nrv_fp_flush_begin(); /* subnormals as zero (plan_ops.h) */
    const nrv_status st = session_run(s, feeds, n_feeds, outputs, n_outputs);
    nrv_fp_flush_end(caller);
    return st;
}

nrv_status nrv_session_set_threads(nrv_session_t *s, int threads) {
    NRV_REQUIRE_PTR("nrv_session_set_threads", s);
    nrv_threadpool *pool = NULL;
    NRV_TRY(nrv_threadpool_create(threads, &pool));
    nrv_threadpool_free(s->pool);
    s->pool = pool;
    for (uint32_t i = 0; i < s->n_ops; i++) s->ops[i].args.pool = pool;
    return NRV_OK;
}

int nrv_session_threads(const nrv_session_t *s) { return s ? nrv_threadpool_size(s->pool) : 0; }

nrv_status nrv_session_reset_state(nrv_session_t *s) {
    NRV_REQUIRE_PTR("nrv_session_reset_state", s);
    for (uint32_t i = 0; i < s->n_states; i++) s->states[i].valid = 0;
    return NRV_OK;
}

/* ------------------------------------------------------------------ introspection */

int nrv_session_input_count(const nrv_session_t *s) { return s ? (int)s->n_inputs : 0; }
int nrv_session_output_count(const nrv_session_t *s) { return s ? (int)s->n_outputs : 0; }
int nrv_session_op_count(const nrv_session_t *s) { return s ? (int)s->n_ops : 0; }
int nrv_session_tensor_count(const nrv_session_t *s) { return s ? (int)s->n_tensors : 0; }
const char *nrv_session_hash(const nrv_session_t *s) { return s ? s->hash_hex : ""; }

nrv_status nrv_session_io_info(const nrv_session_t *s, int is_output, int i, nrv_io_info *out) {
    static const char fn[] = "nrv_session_io_info";
    NRV_REQUIRE_PTR(fn, s);
    NRV_REQUIRE_PTR(fn, out);
    const uint32_t n = is_output ? s->n_outputs : s->n_inputs;
    if (i < 0 || (uint32_t)i >= n)
        return nrv_fail(NRV_ERR_INDEX, "%s: %s %d out of range [0, %u)", fn, is_output ? "output" : "input", i, n);
    const plan_tensor *t = &s->tensors[is_output ? s->outputs[i] : s->inputs[i]];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->view.dtype;
    out->rank = t->view.rank;
    out->state_partner = -1;
    for (uint32_t k = 0; k < s->n_states; k++) {
        if (!is_output && s->states[k].input == (uint32_t)i) out->state_partner = (int32_t)s->states[k].output;
        if (is_output && s->states[k].output == (uint32_t)i) out->state_partner = (int32_t)s->states[k].input;
    }
    for (int k = 0; k < t->view.rank; k++) {
        const int64_t ref = t->dimrefs[k];
        out->dims[k] = ref >= 0 ? ref : -1;
        out->dim_names[k] = "";
        out->dim_bounds[k] = ref;
        if (ref >= 0) continue;
        /* an input dim that is exactly one symbol names it */
        const uint32_t e = (uint32_t)(-ref - 1);
        if (s->expr_len[e] == 1 && s->expr_code[e][0] == NRV_EXPR_SYM) {
            const int64_t sym = s->expr_code[e][1];
            out->dim_names[k] = s->symbol_names[sym];
            out->dim_bounds[k] = s->symbol_bounds[sym];
        } else {
            out->dim_names[k] = "?";
            out->dim_bounds[k] = -1;
        }
    }
    return NRV_OK;
}

nrv_status nrv_session_op_info(const nrv_session_t *s, int i, nrv_op_info *out) {
    static const char fn[] = "nrv_session_op_info";
    NRV_REQUIRE_PTR(fn, s);
    NRV_REQUIRE_PTR(fn, out);
    if (i < 0 || (uint32_t)i >= s->n_ops) return nrv_fail(NRV_ERR_INDEX, "%s: op %d out of range [0, %u)", fn, i, s->n_ops);
    const plan_op *op = &s->ops[i];
    memset(out, 0, sizeof *out);
    out->type = op->args.type;
    out->name = op->args.name;
    out->kernel = op->def && op->def->kernel_op ? nrv_kernel_selected(op->def->kernel_op) : "";
    if (!out->kernel) out->kernel = "";
    out->n_in = op->args.n_in;
    out->n_out = op->args.n_out;
    for (int k = 0; k < op->args.n_in && k < 16; k++) out->in[k] = op->in_ids[k];
    for (int k = 0; k < op->args.n_out && k < 16; k++) out->out[k] = op->out_ids[k];
    out->scratch = op->scratch_id;
    out->calls = op->calls;
    out->total_ns = op->total_ns;
    return NRV_OK;
}

nrv_status nrv_session_tensor_info(const nrv_session_t *s, int i, nrv_tensor_info *out) {
    static const char fn[] = "nrv_session_tensor_info";
    NRV_REQUIRE_PTR(fn, s);
    NRV_REQUIRE_PTR(fn, out);
    if (i < 0 || (uint32_t)i >= s->n_tensors)
        return nrv_fail(NRV_ERR_INDEX, "%s: tensor %d out of range [0, %u)", fn, i, s->n_tensors);
    const plan_tensor *t = &s->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->view.dtype;
    out->rank = t->view.rank;
    out->storage = t->storage;
    out->ref = t->ref;
    out->offset = t->offset;
    out->capacity = t->capacity;
    memcpy(out->dims, t->view.dims, sizeof out->dims);
    return NRV_OK;
}

nrv_status nrv_session_memory_get(const nrv_session_t *s, nrv_session_memory *out) {
    static const char fn[] = "nrv_session_memory_get";
    NRV_REQUIRE_PTR(fn, s);
    NRV_REQUIRE_PTR(fn, out);
    memset(out, 0, sizeof *out);
    nrv_pool_stats st;
    out->weight_bytes = s->weight_bytes;
    out->weight_loaded_bytes = s->weight_new_bytes;
    if (s->arena_pool && nrv_pool_stats_get(s->arena_pool, &st) == NRV_OK) {
        out->arena_bytes = st.allocated;
        out->arena_pool_capacity = st.capacity;
    }
    if (s->state_pool && nrv_pool_stats_get(s->state_pool, &st) == NRV_OK) {
        out->state_bytes = st.allocated;
        out->state_pool_capacity = st.capacity;
    }
    return NRV_OK;
}
