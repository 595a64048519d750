/* pool.c — the three memory pools (STATIC, DYNAMIC, STREAMING) and buffer reference counts.
 *
 * Memory. A pool is ONE system allocation (nrv_sys_alloc, 64-byte aligned):
 *
 *     [ struct nrv_pool, padded to 64 ][ arena: capacity bytes ]
 *
 * so creating a pool makes exactly one system call to the allocator, nothing allocates
 * afterwards, and a closed pool and its arena die together when its last buffer goes.
 * Every buffer is a block of the arena:
 *
 *     [ nrv_block header, 64 bytes ][ payload: request rounded up to 64 (+ padding) ]
 *
 * so every payload is 64-byte aligned and a bare buffer pointer leads back to its pool.
 *
 * Accounting, the same for every kind (block_give_out / block_take_back):
 *   allocated = sum of the requested sizes of live buffers;
 *   free      = bytes that can serve a request again: free blocks, their headers included
 *               (DYNAMIC), the space above the bump pointer (STATIC), free chunks (STREAMING);
 *   overhead  = the rest: live headers, rounding padding, split slivers kept in a block,
 *               released static blocks not yet reclaimed by nrv_pool_reset.
 * The three are updated independently (not derived from each other), so a test of
 * free + allocated + overhead == capacity really checks the bookkeeping.
 *
 * Nothing here is thread-safe: a pool and its buffers are used by one thread at a time
 * (nerve.h). There is no global mutable state.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define NRV_POOL_ALIGN 64u
#define NRV_CLASSES 64       /* DYNAMIC size classes: one per power of two of 64-byte units */
#define NRV_NAME_KEEP 127    /* longest name copied into a pool (longer names are truncated) */
#define NRV_LABEL_CAP (NRV_NAME_KEEP + 32) /* "<kind> pool '<name>'" */


/* ---------------------------------------------------------------- layout */

/* The header in front of every payload. _Alignas makes it exactly one 64-byte line on
 * 32- and 64-bit targets alike, so payloads stay aligned and the header cost is fixed. */
typedef struct nrv_block {
    _Alignas(NRV_POOL_ALIGN) uint64_t magic; /* state tag xor this header's address (block_mark) */
    struct nrv_pool *pool;                   /* owner: release by pointer alone finds it here */
    uint64_t size;                           /* requested bytes (meaningful while live) */
    int64_t refcount;                        /* > 0 while live */
    uint64_t bytes;                          /* physical extent: header + payload + padding */
    uint64_t prev_bytes;                     /* DYNAMIC: extent of the physical predecessor, 0 = first */
    struct nrv_block *next_free;             /* DYNAMIC: links of its size-class free list */
    struct nrv_block *prev_free;
} nrv_block;

_Static_assert(sizeof(nrv_block) % NRV_POOL_ALIGN == 0, "block header must keep payloads 64-byte aligned");
_Static_assert(sizeof(nrv_block) == 64, "block header is one cache line");
_Static_assert(offsetof(nrv_block, magic) == 0, "magic first: the cheapest check reads one word");

#define HDR ((uint64_t)sizeof(nrv_block))
#define MIN_BLOCK (HDR + NRV_POOL_ALIGN) /* smallest block that can hold a 1-byte request */

/* Block states. The stored tag is state ^ address, so a header copied elsewhere (or user
 * data that happens to contain a constant) does not pass for a live block. */
static const uint64_t BLOCK_LIVE = 0x4E5256424C495645ull; /* a buffer with refcount > 0 */
static const uint64_t BLOCK_FREE = 0x4E52564246524545ull; /* a free block / chunk the pool can hand out */
static const uint64_t BLOCK_DEAD = 0x4E52564244454144ull; /* released, but no longer a block head or
                                                             (STATIC) not reusable before reset */
static const uint64_t POOL_MAGIC = 0x4E5256504F4F4C21ull;

struct nrv_pool {
    uint64_t magic; /* POOL_MAGIC while the handle is valid */
    nrv_pool_kind kind;
    int closed;     /* nrv_pool_free called while buffers were live */
    unsigned char *arena;
    uint64_t capacity;
    uint64_t allocated, overhead, free_bytes, peak;
    uint64_t live, total_allocs, failed_allocs;
    union {
        struct {                     /* STATIC */
            uint64_t top;            /* bump pointer: arena offset of the next block */
            uint64_t parked;         /* bytes of released blocks waiting for nrv_pool_reset */
        } bump;
        struct {                     /* DYNAMIC */
            uint64_t nonempty;       /* bit k set <=> bins[k] is not empty */
            nrv_block *bins[NRV_CLASSES];
        } fit;
        struct {                     /* STREAMING */
            uint64_t chunk_size;     /* as requested: the largest acquire */
            uint64_t stride;         /* header + chunk_size rounded up to 64 */
            uint64_t count;
            uint64_t cursor;         /* the next acquire starts looking here */
            uint64_t free_chunks;
        } ring;
    } u;
    char label[NRV_LABEL_CAP]; /* "dynamic pool 'session'" for error messages */
};

/* The control block rounded up so the arena behind it starts 64-byte aligned. */
#define CTL_BYTES (((uint64_t)sizeof(struct nrv_pool) + NRV_POOL_ALIGN - 1) & ~(uint64_t)(NRV_POOL_ALIGN - 1))

/* ---------------------------------------------------------------- small helpers */

static void block_mark(nrv_block *b, uint64_t state) { b->magic = state ^ (uint64_t)(uintptr_t)b; }

static int block_is(const nrv_block *b, uint64_t state) {
    return b->magic == (state ^ (uint64_t)(uintptr_t)b);
}

static nrv_block *block_at(const nrv_pool_t *pool, uint64_t offset) {
    return (nrv_block *)(void *)(pool->arena + offset);
}

/* x rounded up to a multiple of 64; 1 if that does not fit in 64 bits. */
static int round_up64(uint64_t x, uint64_t *out) {
    if (x > UINT64_MAX - (NRV_POOL_ALIGN - 1)) return 1;
    *out = (x + NRV_POOL_ALIGN - 1) & ~(uint64_t)(NRV_POOL_ALIGN - 1);
    return 0;
}

/* Bytes a block serving `size` spans: header + size rounded up to 64. 1 on overflow. */
static int block_extent(uint64_t size, uint64_t *out) {
    uint64_t payload;
    return round_up64(size, &payload) || nrv_add_overflow(payload, HDR, out);
}

static const char *kind_name(nrv_pool_kind kind) {
    switch (kind) {
    case NRV_POOL_STATIC: return "static pool";
    case NRV_POOL_DYNAMIC: return "dynamic pool";
    case NRV_POOL_STREAMING: return "streaming pool";
    }
    return "pool";
}

/* "dynamic pool 'session'", or just "dynamic pool" without a name. */
static void make_label(char *dst, size_t cap, nrv_pool_kind kind, const char *name) {
    if (name && *name)
        snprintf(dst, cap, "%s '%.*s'", kind_name(kind), NRV_NAME_KEEP, name);
    else
        snprintf(dst, cap, "%s", kind_name(kind));
}

/* Best-effort validity check of a handle (a freed pool cannot be detected reliably). */
static nrv_status check_pool(const nrv_pool_t *pool, const char *fn) {
    if (!pool) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: argument 'pool' is NULL", fn);
    if (pool->magic != POOL_MAGIC)
        return nrv_fail(NRV_ERR_STATE, "%s: %p is not a live nerve pool (bad magic)", fn, (const void *)pool);
    return NRV_OK;
}

/* ---------------------------------------------------------------- accounting (all kinds) */

/* Hands block b out for a request of `size` bytes: the one place a buffer becomes live. */
static void *block_give_out(nrv_pool_t *pool, nrv_block *b, uint64_t size) {
    b->pool = pool;
    b->size = size;
    b->refcount = 1;
    block_mark(b, BLOCK_LIVE);
    pool->free_bytes -= b->bytes;
    pool->allocated += size;
    pool->overhead += b->bytes - size;
    pool->live++;
    pool->total_allocs++;
    if (pool->allocated > pool->peak) pool->peak = pool->allocated;
    return b + 1;
}

/* Counters for a buffer whose last reference went: its bytes are either free again
 * (reclaimed) or, in a static pool, parked as overhead until nrv_pool_reset. */
static void block_take_back(nrv_pool_t *pool, const nrv_block *b, int reclaimed) {
    pool->allocated -= b->size;
    pool->live--;
    if (reclaimed) {
        pool->overhead -= b->bytes - b->size;
        pool->free_bytes += b->bytes;
    } else {
        pool->overhead += b->size;
    }
}

static uint64_t largest_free(const nrv_pool_t *pool); /* per kind, below */

/* The refusal message shared by STATIC and DYNAMIC; "largest free block" is the largest
 * request that would succeed, i.e. stats.largest_free. */
static nrv_status fail_exhausted(const nrv_pool_t *pool, uint64_t size) {
    if (pool->kind == NRV_POOL_STATIC && pool->u.bump.parked)
        return nrv_fail(NRV_ERR_OUT_OF_MEMORY,
                        "%s: cannot allocate %" PRIu64 " bytes: %" PRIu64 " free, largest free block %" PRIu64
                        " (%" PRIu64 " released bytes come back only with nrv_pool_reset)",
                        pool->label, size, pool->free_bytes, largest_free(pool), pool->u.bump.parked);
    return nrv_fail(NRV_ERR_OUT_OF_MEMORY,
                    "%s: cannot allocate %" PRIu64 " bytes: %" PRIu64 " free, largest free block %" PRIu64,
                    pool->label, size, pool->free_bytes, largest_free(pool));
}

/* Extent of the block a STATIC/DYNAMIC request needs, or NRV_ERR_OVERFLOW. */
static nrv_status request_extent(const nrv_pool_t *pool, uint64_t size, uint64_t *need) {
    if (block_extent(size, need))
        return nrv_fail(NRV_ERR_OVERFLOW,
                        "%s: cannot allocate %" PRIu64 " bytes: the size overflows once rounded up to 64 "
                        "and given its %" PRIu64 "-byte header",
                        pool->label, size, HDR);
    return NRV_OK;
}

/* ---------------------------------------------------------------- STATIC: bump allocation */

static void bump_reset(nrv_pool_t *pool) {
    pool->u.bump.top = 0;
    pool->u.bump.parked = 0;
}

static uint64_t bump_largest(const nrv_pool_t *pool) {
    uint64_t room = pool->capacity - pool->u.bump.top;
    return room >= MIN_BLOCK ? room - HDR : 0;
}

static nrv_status bump_alloc(nrv_pool_t *pool, uint64_t size, nrv_block **out) {
    uint64_t need = 0; /* set by request_extent on success */
    NRV_TRY(request_extent(pool, size, &need));
    if (need > pool->capacity - pool->u.bump.top) return fail_exhausted(pool, size);
    nrv_block *b = block_at(pool, pool->u.bump.top);
    b->bytes = need;
    b->prev_bytes = 0;
    pool->u.bump.top += need;
    *out = b;
    return NRV_OK;
}

/* A static block is never reused before reset: mark it DEAD (not FREE) and park its bytes. */
static void bump_release(nrv_pool_t *pool, nrv_block *b) {
    block_take_back(pool, b, 0);
    pool->u.bump.parked += b->bytes;
    block_mark(b, BLOCK_DEAD);
}

/* ---------------------------------------------------------------- DYNAMIC: best fit
 *
 * Blocks tile the arena exactly (each knows its own extent and its predecessor's), and
 * no two free blocks are ever adjacent: release merges with both neighbours. Free blocks
 * sit in segregated lists by size class k = floor(log2(bytes / 64)), so class k holds
 * extents in [64 * 2^k, 64 * 2^(k+1)). A request looks in its own class (whose blocks may
 * be too small, hence a scan) and otherwise in the first non-empty class above, where
 * every block fits and the smallest one is the best fit overall.
 */

static unsigned size_class(uint64_t bytes) {
    return 63u - (unsigned)__builtin_clzll(bytes / NRV_POOL_ALIGN); /* bytes >= MIN_BLOCK */
}

static nrv_block *next_block(const nrv_pool_t *pool, const nrv_block *b) {
    const unsigned char *p = (const unsigned char *)b + b->bytes;
    return p < pool->arena + pool->capacity ? (nrv_block *)(uintptr_t)p : NULL;
}

static nrv_block *prev_block(const nrv_block *b) {
    return b->prev_bytes ? (nrv_block *)(uintptr_t)((const unsigned char *)b - b->prev_bytes) : NULL;
}

static void bin_insert(nrv_pool_t *pool, nrv_block *b) {
    unsigned k = size_class(b->bytes);
    block_mark(b, BLOCK_FREE);
    b->pool = pool;
    b->refcount = 0;
    b->prev_free = NULL;
    b->next_free = pool->u.fit.bins[k];
    if (b->next_free) b->next_free->prev_free = b;
    pool->u.fit.bins[k] = b;
    pool->u.fit.nonempty |= 1ull << k;
}

static void bin_remove(nrv_pool_t *pool, nrv_block *b) {
    unsigned k = size_class(b->bytes);
    if (b->prev_free) b->prev_free->next_free = b->next_free;
    else pool->u.fit.bins[k] = b->next_free;
    if (b->next_free) b->next_free->prev_free = b->prev_free;
    if (!pool->u.fit.bins[k]) pool->u.fit.nonempty &= ~(1ull << k);
}

/* Smallest block of a list spanning >= need bytes; ties go to the lower address so the
 * choice does not depend on list order (and low memory fills first). */
static nrv_block *bin_best(nrv_block *head, uint64_t need) {
    nrv_block *best = NULL;
    for (nrv_block *b = head; b; b = b->next_free) {
        if (b->bytes < need) continue;
        if (!best || b->bytes < best->bytes || (b->bytes == best->bytes && b < best)) best = b;
    }
    return best;
}

static nrv_block *fit_find(const nrv_pool_t *pool, uint64_t need) {
    unsigned k = size_class(need);
    nrv_block *b = bin_best(pool->u.fit.bins[k], need);
    if (b || k + 1 >= NRV_CLASSES) return b;
    uint64_t above = pool->u.fit.nonempty & (~0ull << (k + 1));
    return above ? bin_best(pool->u.fit.bins[__builtin_ctzll(above)], need) : NULL;
}

static uint64_t fit_largest(const nrv_pool_t *pool) {
    if (!pool->u.fit.nonempty) return 0;
    unsigned k = 63u - (unsigned)__builtin_clzll(pool->u.fit.nonempty);
    uint64_t biggest = 0;
    for (const nrv_block *b = pool->u.fit.bins[k]; b; b = b->next_free)
        if (b->bytes > biggest) biggest = b->bytes;
    return biggest - HDR;
}

/* The whole arena as one free block. */
static void fit_reset(nrv_pool_t *pool) {
    memset(&pool->u.fit, 0, sizeof pool->u.fit);
    nrv_block *b = block_at(pool, 0);
    b->bytes = pool->capacity;
    b->prev_bytes = 0;
    bin_insert(pool, b);
}

/* Cuts b down to `need` bytes when the rest can stand as a block of its own; a smaller
 * rest (a sliver) stays inside b as padding rather than becoming an unusable block. */
static void fit_split(nrv_pool_t *pool, nrv_block *b, uint64_t need) {
    uint64_t rest = b->bytes - need;
    if (rest < MIN_BLOCK) return;
    nrv_block *r = (nrv_block *)(void *)((unsigned char *)b + need);
    r->bytes = rest;
    r->prev_bytes = need;
    b->bytes = need;
    nrv_block *after = next_block(pool, r);
    if (after) after->prev_bytes = rest;
    /* r's successor was b's successor, which is not free (free blocks never touch): no merge */
    bin_insert(pool, r);
}

static nrv_status fit_alloc(nrv_pool_t *pool, uint64_t size, nrv_block **out) {
    uint64_t need = 0; /* set by request_extent on success */
    NRV_TRY(request_extent(pool, size, &need));
    nrv_block *b = fit_find(pool, need);
    if (!b) return fail_exhausted(pool, size);
    bin_remove(pool, b);
    fit_split(pool, b, need);
    *out = b;
    return NRV_OK;
}

/* Returns b to the free lists, merged with whichever physical neighbours are free; an
 * absorbed header is marked DEAD so a stale pointer to it still reads "released". */
static void fit_release(nrv_pool_t *pool, nrv_block *b) {
    block_take_back(pool, b, 1);
    nrv_block *next = next_block(pool, b);
    if (next && block_is(next, BLOCK_FREE)) {
        bin_remove(pool, next);
        b->bytes += next->bytes;
        block_mark(next, BLOCK_DEAD);
    }
    nrv_block *prev = prev_block(b);
    if (prev && block_is(prev, BLOCK_FREE)) {
        bin_remove(pool, prev);
        prev->bytes += b->bytes;
        block_mark(b, BLOCK_DEAD);
        b = prev;
    }
    nrv_block *after = next_block(pool, b);
    if (after) after->prev_bytes = b->bytes;
    bin_insert(pool, b);
}

/* ---------------------------------------------------------------- STREAMING: a ring of chunks */

static nrv_block *ring_chunk(const nrv_pool_t *pool, uint64_t i) { return block_at(pool, i * pool->u.ring.stride); }

static void ring_init(nrv_pool_t *pool) {
    for (uint64_t i = 0; i < pool->u.ring.count; i++) {
        nrv_block *c = ring_chunk(pool, i);
        memset(c, 0, sizeof *c);
        c->pool = pool;
        c->bytes = pool->u.ring.stride;
        block_mark(c, BLOCK_FREE);
    }
    pool->u.ring.cursor = 0;
    pool->u.ring.free_chunks = pool->u.ring.count;
}

static nrv_status ring_acquire(nrv_pool_t *pool, uint64_t size, nrv_block **out) {
    if (size > pool->u.ring.chunk_size)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: cannot acquire %" PRIu64 " bytes: larger than the chunk size %" PRIu64,
                        pool->label, size, pool->u.ring.chunk_size);
    if (!pool->u.ring.free_chunks)
        return nrv_fail(NRV_ERR_OUT_OF_MEMORY,
                        "%s: cannot acquire %" PRIu64 " bytes: all %" PRIu64 " chunks of %" PRIu64 " bytes are held",
                        pool->label, size, pool->u.ring.count, pool->u.ring.chunk_size);
    /* Ring order from the cursor: the oldest-released chunks come back first, which keeps
     * a producer/consumer stream walking the arena in order. */
    uint64_t i = pool->u.ring.cursor;
    for (uint64_t seen = 0; seen < pool->u.ring.count; seen++) {
        nrv_block *c = ring_chunk(pool, i);
        i = i + 1 == pool->u.ring.count ? 0 : i + 1;
        if (block_is(c, BLOCK_FREE)) {
            pool->u.ring.cursor = i;
            pool->u.ring.free_chunks--;
            *out = c;
            return NRV_OK;
        }
    }
    return nrv_fail(NRV_ERR_INTERNAL, "%s: %" PRIu64 " chunks counted free but none found (a chunk header was overwritten?)",
                    pool->label, pool->u.ring.free_chunks);
}

static void ring_release(nrv_pool_t *pool, nrv_block *c) {
    block_take_back(pool, c, 1);
    block_mark(c, BLOCK_FREE);
    pool->u.ring.free_chunks++;
}

/* ---------------------------------------------------------------- per-kind dispatch */

static uint64_t largest_free(const nrv_pool_t *pool) {
    switch (pool->kind) {
    case NRV_POOL_STATIC: return bump_largest(pool);
    case NRV_POOL_DYNAMIC: return fit_largest(pool);
    case NRV_POOL_STREAMING: return pool->u.ring.free_chunks ? pool->u.ring.chunk_size : 0;
    }
    return 0;
}

/* Every byte back to the pool (no buffer is live). STATIC and DYNAMIC only. */
static void pool_clear(nrv_pool_t *pool) {
    pool->free_bytes = pool->capacity;
    pool->overhead = 0;
    pool->allocated = 0;
    if (pool->kind == NRV_POOL_STATIC) bump_reset(pool);
    else fit_reset(pool);
}

static void pool_destroy(nrv_pool_t *pool) {
    pool->magic = 0; /* a stale handle then fails check_pool while the memory is still mapped */
    nrv_sys_free(pool);
}

/* The single system allocation: control block + arena, counters for an empty pool. The
 * caller sets the kind's own fields and layout. label: from make_label. */
static nrv_status pool_new(nrv_pool_kind kind, uint64_t arena_bytes, const char *label, nrv_pool_t **out) {
    if (arena_bytes > (uint64_t)PTRDIFF_MAX - CTL_BYTES)
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: an arena of %" PRIu64 " bytes does not fit in the address space",
                        label, arena_bytes);
    const size_t total = (size_t)(CTL_BYTES + arena_bytes);
    const int huge = total >= NRV_HUGE_ARENA_MIN;
    unsigned char *mem = nrv_sys_alloc(huge ? NRV_HUGE_PAGE : NRV_POOL_ALIGN, total);
    if (mem && huge) nrv_sys_advise_huge_pages(mem, total);
    if (!mem)
        return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: cannot reserve an arena of %" PRIu64 " bytes (system allocation failed)",
                        label, arena_bytes);
    nrv_pool_t *pool = (nrv_pool_t *)(void *)mem;
    memset(pool, 0, sizeof *pool);
    pool->magic = POOL_MAGIC;
    pool->kind = kind;
    pool->arena = mem + CTL_BYTES;
    pool->capacity = arena_bytes;
    pool->free_bytes = arena_bytes;
    snprintf(pool->label, sizeof pool->label, "%s", label);
    *out = pool;
    return NRV_OK;
}

/* ---------------------------------------------------------------- public: pools */

nrv_status nrv_pool_create(nrv_pool_kind kind, uint64_t capacity, const char *name, nrv_pool_t **out) {
    static const char fn[] = "nrv_pool_create";
    if (kind == NRV_POOL_STREAMING)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: streaming pools are created with nrv_pool_create_streaming", fn);
    if (kind != NRV_POOL_STATIC && kind != NRV_POOL_DYNAMIC)
        return nrv_fail(NRV_ERR_INVALID_ARG, "%s: unknown pool kind %d (NRV_POOL_STATIC or NRV_POOL_DYNAMIC)", fn,
                        (int)kind);
    char label[NRV_LABEL_CAP];
    make_label(label, sizeof label, kind, name);
    if (!out) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: argument 'out' is NULL", fn, label);
    if (capacity == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: capacity must be > 0", fn, label);
    /* Round up to whole 64-byte lines, and to at least one header + one line so that every
     * pool can hold a buffer. */
    uint64_t arena_bytes;
    if (round_up64(capacity, &arena_bytes))
        return nrv_fail(NRV_ERR_OVERFLOW, "%s: %s: capacity %" PRIu64 " overflows once rounded up to 64", fn, label,
                        capacity);
    if (arena_bytes < MIN_BLOCK) arena_bytes = MIN_BLOCK;
    nrv_pool_t *pool;
    NRV_TRY(pool_new(kind, arena_bytes, label, &pool));
    pool_clear(pool);
    *out = pool;
    return NRV_OK;
}

nrv_status nrv_pool_create_streaming(uint64_t chunk_size, uint64_t chunk_count, const char *name, nrv_pool_t **out) {
    static const char fn[] = "nrv_pool_create_streaming";
    char label[NRV_LABEL_CAP];
    make_label(label, sizeof label, NRV_POOL_STREAMING, name);
    if (!out) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: argument 'out' is NULL", fn, label);
    if (chunk_size == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: chunk_size must be > 0", fn, label);
    if (chunk_count == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: chunk_count must be > 0", fn, label);
    uint64_t stride, arena_bytes;
    if (block_extent(chunk_size, &stride) || nrv_mul_overflow(stride, chunk_count, &arena_bytes))
        return nrv_fail(NRV_ERR_OVERFLOW,
                        "%s: %s: %" PRIu64 " chunks of %" PRIu64 " bytes (each rounded up to 64, plus a %" PRIu64
                        "-byte header) overflow",
                        fn, label, chunk_count, chunk_size, HDR);
    nrv_pool_t *pool;
    NRV_TRY(pool_new(NRV_POOL_STREAMING, arena_bytes, label, &pool));
    pool->u.ring.chunk_size = chunk_size;
    pool->u.ring.stride = stride;
    pool->u.ring.count = chunk_count;
    ring_init(pool);
    *out = pool;
    return NRV_OK;
}

void nrv_pool_free(nrv_pool_t *pool) {
    /* NULL, a foreign pointer or a pool already closed: there is no owner reference to drop */
    if (!pool || pool->magic != POOL_MAGIC || pool->closed) return;
    pool->closed = 1;
    if (pool->live == 0) pool_destroy(pool);
}

nrv_status nrv_pool_alloc(nrv_pool_t *pool, uint64_t size, void **out) {
    static const char fn[] = "nrv_pool_alloc";
    NRV_TRY(check_pool(pool, fn));
    if (!out) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: argument 'out' is NULL", fn, pool->label);
    if (size == 0) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: cannot allocate 0 bytes (size must be > 0)", pool->label);
    if (pool->closed)
        return nrv_fail(NRV_ERR_STATE,
                        "%s: cannot allocate %" PRIu64 " bytes: the pool is closed (nrv_pool_free was called; %" PRIu64
                        " buffers still live)",
                        pool->label, size, pool->live);
    nrv_block *b = NULL;
    nrv_status st;
    switch (pool->kind) {
    case NRV_POOL_STATIC: st = bump_alloc(pool, size, &b); break;
    case NRV_POOL_DYNAMIC: st = fit_alloc(pool, size, &b); break;
    case NRV_POOL_STREAMING: st = ring_acquire(pool, size, &b); break;
    default: st = nrv_fail(NRV_ERR_INTERNAL, "%s: corrupted pool kind %d", pool->label, (int)pool->kind); break;
    }
    if (st != NRV_OK) {
        /* the kind allocators refuse only for the request's size or the pool's room, and
         * touch nothing when they do */
        pool->failed_allocs++;
        return st;
    }
    *out = block_give_out(pool, b, size);
    return NRV_OK;
}

nrv_status nrv_pool_stats_get(const nrv_pool_t *pool, nrv_pool_stats *out) {
    static const char fn[] = "nrv_pool_stats_get";
    NRV_TRY(check_pool(pool, fn));
    if (!out) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: %s: argument 'out' is NULL", fn, pool->label);
    nrv_pool_stats s;
    memset(&s, 0, sizeof s);
    s.kind = (int32_t)pool->kind;
    s.closed = pool->closed;
    s.capacity = pool->capacity;
    s.allocated = pool->allocated;
    s.overhead = pool->overhead;
    s.free = pool->free_bytes;
    s.peak = pool->peak;
    s.largest_free = largest_free(pool);
    s.live_buffers = pool->live;
    s.total_allocs = pool->total_allocs;
    s.failed_allocs = pool->failed_allocs;
    if (pool->kind == NRV_POOL_STREAMING) {
        s.chunk_size = pool->u.ring.chunk_size;
        s.chunk_count = pool->u.ring.count;
    }
    *out = s;
    return NRV_OK;
}

nrv_status nrv_pool_reset_peak(nrv_pool_t *pool) {
    NRV_TRY(check_pool(pool, "nrv_pool_reset_peak"));
    pool->peak = pool->allocated;
    return NRV_OK;
}

/* A streaming pool is refused with NRV_ERR_INVALID_ARG: its chunks already return to the
 * ring on release, so there is nothing to reclaim and the call is a mistake of pool kind. */
nrv_status nrv_pool_reset(nrv_pool_t *pool) {
    static const char fn[] = "nrv_pool_reset";
    NRV_TRY(check_pool(pool, fn));
    if (pool->kind == NRV_POOL_STREAMING)
        return nrv_fail(NRV_ERR_INVALID_ARG,
                        "%s: %s: only static and dynamic pools are reset (a chunk returns to the ring on release)", fn,
                        pool->label);
    if (pool->live)
        return nrv_fail(NRV_ERR_STATE, "%s: %s: cannot reset with %" PRIu64 " buffers still live", fn, pool->label,
                        pool->live);
    pool_clear(pool);
    return NRV_OK;
}

/* ---------------------------------------------------------------- public: buffers */

/* The header of ptr if ptr is a live buffer, else NULL. Best effort: it reads the 64 bytes
 * before ptr, so ptr must at least point into readable memory (any pointer a pool ever
 * returned does while its pool exists). */
static nrv_block *live_block(const void *ptr) {
    if (!ptr || (uintptr_t)ptr % NRV_POOL_ALIGN) return NULL;
    nrv_block *b = (nrv_block *)(uintptr_t)ptr - 1;
    if (!block_is(b, BLOCK_LIVE) || b->refcount <= 0 || !b->pool || b->pool->magic != POOL_MAGIC) return NULL;
    return b;
}

/* live_block with the error message a status-returning call owes its caller. */
static nrv_status require_live(void *ptr, const char *fn, nrv_block **out) {
    if (!ptr) return nrv_fail(NRV_ERR_INVALID_ARG, "%s: argument 'ptr' is NULL", fn);
    *out = live_block(ptr);
    if (*out) return NRV_OK;
    if ((uintptr_t)ptr % NRV_POOL_ALIGN)
        return nrv_fail(NRV_ERR_STATE, "%s: %p is not a nerve buffer (not 64-byte aligned)", fn, ptr);
    const nrv_block *b = (const nrv_block *)ptr - 1;
    if ((block_is(b, BLOCK_FREE) || block_is(b, BLOCK_DEAD)) && b->pool && b->pool->magic == POOL_MAGIC)
        return nrv_fail(NRV_ERR_STATE, "%s: buffer %p of %s already released", fn, ptr, b->pool->label);
    return nrv_fail(NRV_ERR_STATE, "%s: %p is not a live nerve buffer (bad header magic)", fn, ptr);
}

nrv_status nrv_buffer_retain(void *ptr) {
    nrv_block *b;
    NRV_TRY(require_live(ptr, "nrv_buffer_retain", &b));
    if (b->refcount == INT64_MAX)
        return nrv_fail(NRV_ERR_OVERFLOW, "nrv_buffer_retain: buffer %p of %s: reference count overflows", ptr,
                        b->pool->label);
    b->refcount++;
    return NRV_OK;
}

nrv_status nrv_buffer_release(void *ptr) {
    nrv_block *b;
    NRV_TRY(require_live(ptr, "nrv_buffer_release", &b));
    if (--b->refcount > 0) return NRV_OK;
    nrv_pool_t *pool = b->pool;
    switch (pool->kind) {
    case NRV_POOL_STATIC: bump_release(pool, b); break;
    case NRV_POOL_DYNAMIC: fit_release(pool, b); break;
    case NRV_POOL_STREAMING: ring_release(pool, b); break;
    }
    /* the borrower held the last reference of a pool its owner already freed */
    if (pool->closed && pool->live == 0) pool_destroy(pool);
    return NRV_OK;
}

int64_t nrv_buffer_refcount(const void *ptr) {
    const nrv_block *b = live_block(ptr);
    return b ? b->refcount : 0;
}

uint64_t nrv_buffer_size(const void *ptr) {
    const nrv_block *b = live_block(ptr);
    return b ? b->size : 0;
}
