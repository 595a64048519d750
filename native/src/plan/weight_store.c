/* weight_store.c — the process-wide store of loaded plan weights, shared by content.
 *
 * Every weight record of a plan carries the SHA-256 of its bytes. A session looks each weight
 * up here by (digest, load dtype, loaded bytes): a hit shares the copy another session loaded
 * (several streams of one model, or two plans specialised from one model, such as a merged
 * decoder's first-step and next-step plans); a miss verifies the bytes against their digest
 * and copies them into a static pool created for this load (a "block"). An entry lives while
 * a session references it; a block's pool is freed when its last entry goes.
 *
 * One mutex guards the store; loads hold it while they hash and copy, so two threads loading
 * the same model end up sharing one copy instead of racing to make two.
 */
#include <pthread.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "plan_internal.h"

typedef struct weight_block {
    nrv_pool_t *pool;
    uint8_t *base;
    uint64_t live; /* entries still in the store */
} weight_block;

struct nrv_weight_entry {
    uint8_t digest[32];
    uint32_t load_dtype;
    uint64_t bytes;
    uint8_t *data;
    weight_block *block;
    uint64_t refs;
    struct nrv_weight_entry *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static nrv_weight_entry *g_entries;

static nrv_weight_entry *find_locked(const nrv_weight_request *q) {
    for (nrv_weight_entry *e = g_entries; e; e = e->next)
        if (e->load_dtype == q->load_dtype && e->bytes == q->loaded_bytes && memcmp(e->digest, q->digest, 32) == 0)
            return e;
    return NULL;
}

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

static void copy_weight(uint8_t *dst, const nrv_weight_request *q) {
    if (q->file_dtype == q->load_dtype) {
        if (q->loaded_bytes) memcpy(dst, q->src, q->loaded_bytes);
        return;
    }
    const uint64_t n = q->file_bytes / 2; /* f16 -> f32, the one widening the loader allows */
    float *f = (float *)dst;
    for (uint64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, q->src + 2 * k, 2);
        f[k] = nrv_half_to_float(h);
    }
}

static void release_locked(nrv_weight_entry *e) {
    if (!e || --e->refs) return;
    for (nrv_weight_entry **p = &g_entries; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    weight_block *b = e->block;
    nrv_sys_free(e);
    if (--b->live == 0) {
        if (b->base) nrv_buffer_release(b->base);
        nrv_pool_free(b->pool);
        nrv_sys_free(b);
    }
}

nrv_status nrv_weights_acquire(const nrv_weight_request *req, uint32_t n, nrv_weight_entry **out,
                               uint64_t *new_bytes) {
    *new_bytes = 0;
    if (n == 0) return NRV_OK;
    memset(out, 0, n * sizeof *out);
    pthread_mutex_lock(&g_lock);
    nrv_status st = NRV_OK;
    /* 1: share what is loaded; size the block for the rest (a weight repeated inside this
     * plan is loaded once: the later copy finds the earlier one after step 2 inserts it) */
    uint64_t block_bytes = 0, fresh = 0;
    for (uint32_t i = 0; i < n; i++) {
        nrv_weight_entry *e = find_locked(&req[i]);
        if (e) {
            e->refs++;
            out[i] = e;
        } else {
            block_bytes = align64(block_bytes + req[i].loaded_bytes);
            fresh++;
        }
    }
    weight_block *b = NULL;
    if (fresh) {
        b = nrv_sys_alloc(64, sizeof *b);
        if (!b) {
            st = nrv_fail(NRV_ERR_OUT_OF_MEMORY, "plan: out of memory for the weight store");
            goto fail;
        }
        memset(b, 0, sizeof *b);
        st = nrv_pool_create(NRV_POOL_STATIC, block_bytes + 256, "plan weights", &b->pool);
        if (st == NRV_OK && block_bytes) st = nrv_pool_alloc(b->pool, block_bytes, (void **)&b->base);
        if (st != NRV_OK) {
            if (b->pool) nrv_pool_free(b->pool);
            nrv_sys_free(b);
            goto fail;
        }
    }
    /* 2: verify, copy and insert the misses */
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (out[i]) continue;
        nrv_weight_entry *e = find_locked(&req[i]); /* a duplicate inside this plan */
        if (e) {
            e->refs++;
            out[i] = e;
            continue;
        }
        uint8_t got[32];
        nrv_sha256(req[i].src, (size_t)req[i].file_bytes, got);
        if (memcmp(got, req[i].digest, 32) != 0) {
            st = nrv_fail(NRV_ERR_FORMAT, "plan: weight %u: SHA-256 mismatch (the file is corrupted)", i);
            break;
        }
        e = nrv_sys_alloc(64, sizeof *e);
        if (!e) {
            st = nrv_fail(NRV_ERR_OUT_OF_MEMORY, "plan: out of memory for the weight store");
            break;
        }
        memcpy(e->digest, req[i].digest, 32);
        e->load_dtype = req[i].load_dtype;
        e->bytes = req[i].loaded_bytes;
        e->data = b->base + at;
        e->block = b;
        e->refs = 1;
        copy_weight(e->data, &req[i]);
        at = align64(at + e->bytes);
        *new_bytes += e->bytes;
        e->next = g_entries;
        g_entries = e;
        b->live++;
        out[i] = e;
    }
    if (b && b->live == 0) { /* nothing inserted (failed on the first miss) */
        if (b->base) nrv_buffer_release(b->base);
        nrv_pool_free(b->pool);
        nrv_sys_free(b);
    }
    if (st == NRV_OK) {
        pthread_mutex_unlock(&g_lock);
        return NRV_OK;
    }
fail:
    for (uint32_t i = 0; i < n; i++) {
        release_locked(out[i]);
        out[i] = NULL;
    }
    *new_bytes = 0;
    pthread_mutex_unlock(&g_lock);
    return st;
}

const uint8_t *nrv_weight_data(const nrv_weight_entry *e) { return e ? e->data : NULL; }

void nrv_weights_release(nrv_weight_entry **entries, uint32_t n) {
    if (!entries) return;
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; i < n; i++) {
        release_locked(entries[i]);
        entries[i] = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}

void nrv_weights_store_stats(uint64_t *entries, uint64_t *bytes) {
    uint64_t n = 0, total = 0;
    pthread_mutex_lock(&g_lock);
    for (nrv_weight_entry *e = g_entries; e; e = e->next) {
        n++;
        total += e->bytes;
    }
    pthread_mutex_unlock(&g_lock);
    if (entries) *entries = n;
    if (bytes) *bytes = total;
}
