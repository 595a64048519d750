/* dispatch.c — the one table mapping (op, CPU features, overrides) to a kernel variant.
 *
 * Candidates per op: the ISA module's variants in its table order (best first), then the
 * scalar reference, which is always runnable and can never be disabled. The chosen one is
 * the first candidate that is runnable here, not disabled (NERVE_DISABLE or
 * nrv_kernel_disable), unless nrv_kernel_force pinned one.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels.h"

#define NRV_MAX_VARIANTS 8
#define NRV_DISABLE_CAP 256

static const char *const op_names[NRV_OP_COUNT] = {
    [NRV_OP_EMBEDDING_F32] = "embedding",
    [NRV_OP_EMBEDDING_F16] = "embedding_f16",
    [NRV_OP_EMBEDDING_Q8] = "embedding_q8",
    [NRV_OP_LAYERNORM] = "layernorm",
    [NRV_OP_LINEAR] = "linear",
    [NRV_OP_LAYERNORM_LINEAR] = "layernorm_linear",
    [NRV_OP_GEMM] = "gemm",
    [NRV_OP_GELU] = "gelu",
    [NRV_OP_GELU_TANH] = "gelu_tanh",
    [NRV_OP_RELU] = "relu",
    [NRV_OP_SIGMOID] = "sigmoid",
    [NRV_OP_TANH] = "tanh",
    [NRV_OP_SOFTMAX] = "softmax",
    [NRV_OP_LINEAR_W8] = "linear_w8",
    [NRV_OP_LINEAR_W8A8] = "linear_w8a8",
    [NRV_OP_LINEAR_W4A32] = "linear_w4a32",
    [NRV_OP_LINEAR_W4A8] = "linear_w4a8",
    [NRV_OP_LINEAR_F16] = "linear_f16",
    [NRV_OP_DEPTHWISE] = "depthwise",
    [NRV_OP_HARD_SWISH] = "hard_swish",
    [NRV_OP_SILU] = "silu",
    [NRV_OP_DEPTHWISE_CHANNELS] = "depthwise_channels",
    [NRV_OP_DEPTHWISE_ROWS] = "depthwise_rows",
    [NRV_OP_MATMUL_INTEGER] = "matmul_integer",
    [NRV_OP_QUANTIZE] = "quantize",
    [NRV_OP_REQUANT] = "requant",
    [NRV_OP_MAXPOOL] = "maxpool",
    [NRV_OP_LINEAR_ATTENTION] = "linear_attention",
    [NRV_OP_DEPTHWISE_Q8] = "depthwise_q8",
};

typedef struct op_slot {
    const nrv_kernel_variant *candidates[NRV_MAX_VARIANTS];
    int count;
    _Atomic int selected;  /* index into candidates */
    int forced;            /* -1: automatic */
} op_slot;

static op_slot slots[NRV_OP_COUNT];
static char disable_list[NRV_DISABLE_CAP];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;

static int runnable(const nrv_kernel_variant *v) {
    return (nrv_cpu_features() & v->requires) == v->requires;
}

/* Does one token of the disable list name this variant? */
static int token_matches(const char *tok, size_t len, const nrv_kernel_variant *v) {
    if (strcmp(v->group, "ref") == 0) return 0; /* the reference is the floor */
    if (len == 3 && strncmp(tok, "all", 3) == 0) return 1;
    if (len == 3 && strncmp(tok, "x86", 3) == 0)
        return strcmp(nrv_cpu_arch(), "x86_64") == 0;
    return (strlen(v->name) == len && strncmp(tok, v->name, len) == 0) ||
           (strlen(v->group) == len && strncmp(tok, v->group, len) == 0);
}

static int disabled(const nrv_kernel_variant *v) {
    const char *p = disable_list;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ') p++;
        if (p > start && token_matches(start, (size_t)(p - start), v)) return 1;
    }
    return 0;
}

static void resolve(op_slot *s) {
    if (s->forced >= 0) {
        atomic_store(&s->selected, s->forced);
        return;
    }
    for (int i = 0; i < s->count; i++) {
        if (runnable(s->candidates[i]) && !disabled(s->candidates[i])) {
            atomic_store(&s->selected, i);
            return;
        }
    }
    atomic_store(&s->selected, s->count - 1); /* unreachable: ref is always last and runnable */
}

static void add_table(const nrv_kernel_variant *table) {
    for (const nrv_kernel_variant *v = table; v->name; v++) {
        op_slot *s = &slots[v->op];
        if (s->count < NRV_MAX_VARIANTS) s->candidates[s->count++] = v;
    }
}

static void init_table(void) {
#if defined(__x86_64__)
    add_table(nrv_variants_x86);
#endif /* __x86_64__ */
#if defined(__aarch64__)
    add_table(nrv_variants_neon);
    add_table(nrv_variants_neon_w8);
    add_table(nrv_variants_neon_f16);
    add_table(nrv_variants_neon_w8a8);
    add_table(nrv_variants_dotprod_mmi);
    add_table(nrv_variants_dotprod_w4);
    add_table(nrv_variants_neon_w4);
#endif /* __aarch64__ */
    add_table(nrv_variants_ref);
    const char *env = getenv("NERVE_DISABLE");
    if (env) {
        strncpy(disable_list, env, NRV_DISABLE_CAP - 1);
        disable_list[NRV_DISABLE_CAP - 1] = '\0';
    }
    for (int op = 0; op < NRV_OP_COUNT; op++) {
        slots[op].forced = -1;
        resolve(&slots[op]);
    }
}

static void ensure_init(void) { pthread_once(&init_once, init_table); }

/* The variant currently chosen for op; its entry points are read together from it. */
static const nrv_kernel_variant *selected(nrv_op op) {
    ensure_init();
    const op_slot *s = &slots[op];
    return s->candidates[atomic_load_explicit(&s->selected, memory_order_relaxed)];
}

nrv_kernel_fn nrv_kernel_get(nrv_op op) { return selected(op)->fn; }
nrv_kernel_fn nrv_kernel_get_implicit(nrv_op op) { return selected(op)->implicit; }
nrv_kernel_fn nrv_kernel_get_panels(nrv_op op) { return selected(op)->panels; }
nrv_kernel_fn nrv_kernel_get_rows_panels(nrv_op op) { return selected(op)->rows_panels; }

static int op_index(const char *op) {
    if (!op) return -1;
    for (int i = 0; i < NRV_OP_COUNT; i++)
        if (strcmp(op, op_names[i]) == 0) return i;
    return -1;
}

int nrv_kernel_op_count(void) { return NRV_OP_COUNT; }

const char *nrv_kernel_op_name(int i) { return (i >= 0 && i < NRV_OP_COUNT) ? op_names[i] : NULL; }

int nrv_kernel_variant_count(const char *op) {
    ensure_init();
    int i = op_index(op);
    return i < 0 ? 0 : slots[i].count;
}

const char *nrv_kernel_variant_name(const char *op, int i) {
    ensure_init();
    int o = op_index(op);
    if (o < 0 || i < 0 || i >= slots[o].count) return NULL;
    return slots[o].candidates[i]->name;
}

int nrv_kernel_variant_runnable(const char *op, int i) {
    ensure_init();
    int o = op_index(op);
    if (o < 0 || i < 0 || i >= slots[o].count) return 0;
    return runnable(slots[o].candidates[i]);
}

const char *nrv_kernel_selected(const char *op) {
    ensure_init();
    int o = op_index(op);
    if (o < 0) return NULL;
    return slots[o].candidates[atomic_load(&slots[o].selected)]->name;
}

nrv_status nrv_kernel_force(const char *op, const char *variant) {
    ensure_init();
    int o = op_index(op);
    if (o < 0) return nrv_fail(NRV_ERR_INVALID_ARG, "nrv_kernel_force: unknown op '%s'", op ? op : "(null)");
    op_slot *s = &slots[o];
    int found = -1;
    if (variant) {
        for (int i = 0; i < s->count; i++)
            if (strcmp(s->candidates[i]->name, variant) == 0) found = i;
        if (found < 0)
            return nrv_fail(NRV_ERR_INVALID_ARG, "nrv_kernel_force: op '%s' has no variant '%s' in this build",
                            op, variant);
        if (!runnable(s->candidates[found]))
            return nrv_fail(NRV_ERR_UNSUPPORTED,
                            "nrv_kernel_force: variant '%s' of op '%s' needs CPU features this machine lacks",
                            variant, op);
    }
    pthread_mutex_lock(&config_lock);
    s->forced = found;
    resolve(s);
    pthread_mutex_unlock(&config_lock);
    return NRV_OK;
}

nrv_status nrv_kernel_disable(const char *list) {
    ensure_init();
    if (list && strlen(list) >= NRV_DISABLE_CAP)
        return nrv_fail(NRV_ERR_INVALID_ARG, "nrv_kernel_disable: list longer than %d characters",
                        NRV_DISABLE_CAP - 1);
    pthread_mutex_lock(&config_lock);
    strcpy(disable_list, list ? list : "");
    for (int op = 0; op < NRV_OP_COUNT; op++) resolve(&slots[op]);
    pthread_mutex_unlock(&config_lock);
    return NRV_OK;
}

const char *nrv_kernel_forced(const char *op) {
    ensure_init();
    int o = op_index(op);
    if (o < 0 || slots[o].forced < 0) return NULL;
    return slots[o].candidates[slots[o].forced]->name;
}

const char *nrv_kernel_disabled(void) {
    ensure_init();
    return disable_list;
}

int nrv_kernel_variant_disabled(const char *op, int i) {
    ensure_init();
    int o = op_index(op);
    if (o < 0 || i < 0 || i >= slots[o].count) return 0;
    return disabled(slots[o].candidates[i]);
}
