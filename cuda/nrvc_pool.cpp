/* nrvc_pool.cpp — device memory pools: one cudaMalloc'd arena each, carved on the host.
 *
 * The three kinds of nerve's host pools (nerve.h, "memory pools"), with the same counters:
 *  - DYNAMIC: an address-ordered array of blocks (offset, size, requested, references)
 *    covers the arena; free neighbours never stay apart (release coalesces). Allocation is
 *    best fit (ties: lowest address), splitting off the tail.
 *  - STATIC: bump allocation from `top`; the array holds the live buffers (address order,
 *    appended). A released buffer's bytes become overhead ("unreclaimed") until
 *    nrvc_pool_reset, allowed when no buffer is live.
 *  - STREAMING: a fixed ring of equal chunks, one block each, made at creation; acquiring
 *    takes the next free chunk in ring order after the last one taken. Never allocates
 *    after creation (not even host records).
 * Every buffer has a reference count (1 when allocated; retain adds, release drops; the
 * bytes return at 0). nrvc_pool_free on a pool with live buffers closes it (no new
 * allocations) and keeps the arena until the last buffer is released, so a borrower may
 * outlive the owner; the release that drops the last reference frees the pool.
 * The bookkeeping never touches device memory: the host never waits on the GPU and the
 * whole arena is usable. Sizes are multiples of 256 bytes, the alignment every buffer gets
 * (cudaMalloc's own, enough for any vector access). Counters are exact: allocated = sum of
 * requested sizes of live buffers, overhead = rounding padding (+ STATIC's unreclaimed
 * bytes, + STREAMING's unused chunk tails).
 * Not thread-safe: one thread at a time per pool (as nerve's host pools).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrvc_internal.h"

namespace {

constexpr uint64_t kAlign = 256;

struct Block {
    uint64_t offset;
    uint64_t size;      /* multiple of kAlign */
    uint64_t requested; /* live blocks: the caller's size; 0 otherwise */
    int64_t refs;       /* > 0: live */
};

uint64_t round_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

} /* namespace */

struct nrvc_pool {
    int device;
    int32_t kind; /* nrv_pool_kind */
    int closed;
    char name[64];
    unsigned char *base; /* device pointer */
    uint64_t capacity;
    uint64_t top;                   /* STATIC: first byte never handed out since the last reset */
    uint64_t chunk_size, n_chunks;  /* STREAMING */
    size_t next_chunk;              /* STREAMING: where the ring search starts */
    Block *blocks;
    size_t n_blocks, cap_blocks;
    uint64_t allocated, overhead, peak, live, total_allocs, failed_allocs;
};

static nrv_status reserve_blocks(nrvc_pool *p, size_t want) {
    if (want <= p->cap_blocks) return NRV_OK;
    size_t cap = p->cap_blocks ? p->cap_blocks * 2 : 16;
    while (cap < want) cap *= 2;
    Block *grown = static_cast<Block *>(realloc(p->blocks, cap * sizeof(Block)));
    if (!grown)
        return nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "device pool '%s': no host memory for %zu block records", p->name,
                         cap);
    p->blocks = grown;
    p->cap_blocks = cap;
    return NRV_OK;
}

static uint64_t largest_free(const nrvc_pool *p) {
    if (p->closed) return 0;
    if (p->kind == NRV_POOL_STATIC) return p->capacity - p->top;
    uint64_t best = 0;
    for (size_t i = 0; i < p->n_blocks; i++)
        if (p->blocks[i].refs == 0 && p->blocks[i].size > best) best = p->blocks[i].size;
    return best;
}

#ifndef NRVC_POOL_HOST_ARENA
/* The arena: one cudaMalloc on `device` (the caller's current device is restored). */
static nrv_status arena_alloc(const char *fn, int device, uint64_t bytes, void **out) {
    const nrv_status st = nrvc::check_device(fn, device);
    if (st != NRV_OK) return st;
    nrvc::DeviceGuard guard;
    NRVC_CHECK(guard.set(device));
    NRVC_CHECK(cudaMalloc(out, (size_t)bytes));
    return NRV_OK;
}

static void arena_free(int device, void *base) {
    nrvc::DeviceGuard guard;
    if (guard.set(device) == cudaSuccess) (void)cudaFree(base);
    (void)cudaGetLastError();
}
#else
/* Self-test build (cuda/nrvc_pool_selftest.cpp): host memory stands in for the device
 * arena, so the bookkeeping runs on machines without a GPU. */
static nrv_status arena_alloc(const char *fn, int device, uint64_t bytes, void **out) {
    *out = aligned_alloc(kAlign, (size_t)bytes);
    return *out ? NRV_OK : nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "%s: host arena of %llu bytes", fn, (unsigned long long)bytes);
}

static void arena_free(int device, void *base) { free(base); }
#endif /* NRVC_POOL_HOST_ARENA */

static void destroy(nrvc_pool *p) {
    arena_free(p->device, p->base);
    free(p->blocks);
    free(p);
}

NRVC_EXPORT nrv_status nrvc_pool_create(int device, int32_t kind, uint64_t capacity, uint64_t chunk_size,
                                        uint64_t chunk_count, const char *name, nrvc_pool **out) {
    static const char fn[] = "nrv_cuda_pool_create";
    uint64_t rounded = 0, chunk = 0;
    if (kind == NRV_POOL_STREAMING) {
        if (chunk_size == 0 || chunk_count == 0 || chunk_size > UINT64_MAX / 2)
            return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: a streaming pool needs chunk_size > 0 and chunk_count > 0", fn);
        chunk = round_up(chunk_size);
        if (chunk_count > UINT64_MAX / chunk || chunk_count > (uint64_t)(SIZE_MAX / sizeof(Block)))
            return nrvc_fail(NRV_ERR_OVERFLOW, "%s: %llu chunks of %llu bytes overflow", fn,
                             (unsigned long long)chunk_count, (unsigned long long)chunk);
        rounded = chunk * chunk_count;
    } else if (kind == NRV_POOL_STATIC || kind == NRV_POOL_DYNAMIC) {
        if (capacity == 0 || capacity > UINT64_MAX - (kAlign - 1))
            return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: capacity %llu is not a usable size", fn,
                             (unsigned long long)capacity);
        rounded = round_up(capacity);
    } else {
        return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: pool kind %d is not STATIC, DYNAMIC or STREAMING", fn, (int)kind);
    }

    nrvc_pool *p = static_cast<nrvc_pool *>(calloc(1, sizeof *p));
    if (!p) return nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "%s: no host memory for the pool record", fn);
    p->device = device;
    p->kind = kind;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "cuda");
    p->capacity = rounded;
    p->chunk_size = chunk;
    p->n_chunks = kind == NRV_POOL_STREAMING ? chunk_count : 0;
    void *base = nullptr;
    nrv_status st = reserve_blocks(p, kind == NRV_POOL_STREAMING ? (size_t)chunk_count : 1);
    if (st == NRV_OK) st = arena_alloc(fn, device, rounded, &base);
    if (st != NRV_OK) {
        free(p->blocks);
        free(p);
        return st;
    }
    p->base = static_cast<unsigned char *>(base);
    if (kind == NRV_POOL_DYNAMIC) {
        p->blocks[0] = Block{0, rounded, 0, 0};
        p->n_blocks = 1;
    } else if (kind == NRV_POOL_STREAMING) {
        for (uint64_t i = 0; i < chunk_count; i++) p->blocks[i] = Block{i * chunk, chunk, 0, 0};
        p->n_blocks = (size_t)chunk_count;
    }
    *out = p;
    return NRV_OK;
}

NRVC_EXPORT void nrvc_pool_free(nrvc_pool *p) {
    if (!p || p->closed) return;
    if (p->live == 0) {
        destroy(p);
        return;
    }
    p->closed = 1; /* the last release frees it */
}

static nrv_status refuse(nrvc_pool *p, nrv_status st, const char *fmt, uint64_t size) {
    p->failed_allocs++;
    return nrvc_fail(st, fmt, "nrv_cuda_pool_alloc", p->name, p->device, (unsigned long long)size,
                     (unsigned long long)(p->capacity - p->allocated - p->overhead),
                     (unsigned long long)largest_free(p));
}

/* Marks blocks[i] live for `size` bytes and updates the counters. */
static void *hand_out(nrvc_pool *p, size_t i, uint64_t size) {
    Block &b = p->blocks[i];
    b.refs = 1;
    b.requested = size;
    p->allocated += size;
    p->overhead += b.size - size;
    if (p->allocated > p->peak) p->peak = p->allocated;
    p->live++;
    p->total_allocs++;
    return p->base + b.offset;
}

NRVC_EXPORT nrv_status nrvc_pool_alloc(nrvc_pool *p, uint64_t size, void **out) {
    static const char fn[] = "nrv_cuda_pool_alloc";
    static const char exhausted[] =
        "%s: pool '%s' (device %d) exhausted: %llu bytes requested, %llu free, largest free block %llu";
    if (p->closed) {
        p->failed_allocs++;
        return nrvc_fail(NRV_ERR_STATE, "%s: pool '%s' was freed (closed until its last buffer is released)", fn,
                         p->name);
    }
    if (size == 0) {
        p->failed_allocs++;
        return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: size is 0", fn);
    }
    const uint64_t limit = p->kind == NRV_POOL_STREAMING ? p->chunk_size : p->capacity;
    if (size > limit) {
        p->failed_allocs++;
        return nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "%s: pool '%s' (device %d) cannot hold %llu bytes in one %s of %llu",
                         fn, p->name, p->device, (unsigned long long)size,
                         p->kind == NRV_POOL_STREAMING ? "chunk" : "arena", (unsigned long long)limit);
    }
    const uint64_t need = round_up(size); /* no overflow: size <= capacity */

    if (p->kind == NRV_POOL_STREAMING) {
        for (size_t k = 0; k < p->n_blocks; k++) {
            const size_t i = (p->next_chunk + k) % p->n_blocks;
            if (p->blocks[i].refs == 0) {
                p->next_chunk = (i + 1) % p->n_blocks;
                *out = hand_out(p, i, size);
                return NRV_OK;
            }
        }
        return refuse(p, NRV_ERR_OUT_OF_MEMORY, exhausted, size);
    }
    if (p->kind == NRV_POOL_STATIC) {
        if (need > p->capacity - p->top) return refuse(p, NRV_ERR_OUT_OF_MEMORY, exhausted, size);
        const nrv_status st = reserve_blocks(p, p->n_blocks + 1);
        if (st != NRV_OK) {
            p->failed_allocs++;
            return st;
        }
        p->blocks[p->n_blocks] = Block{p->top, need, 0, 0};
        p->top += need;
        *out = hand_out(p, p->n_blocks++, size);
        return NRV_OK;
    }
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < p->n_blocks; i++) {
        const Block &b = p->blocks[i];
        if (b.refs == 0 && b.size >= need && (best == SIZE_MAX || b.size < p->blocks[best].size)) {
            best = i;
            if (b.size == need) break;
        }
    }
    if (best == SIZE_MAX) return refuse(p, NRV_ERR_OUT_OF_MEMORY, exhausted, size);
    if (p->blocks[best].size > need) { /* split: the tail stays free */
        const nrv_status st = reserve_blocks(p, p->n_blocks + 1);
        if (st != NRV_OK) {
            p->failed_allocs++;
            return st;
        }
        memmove(&p->blocks[best + 2], &p->blocks[best + 1], (p->n_blocks - best - 1) * sizeof(Block));
        p->blocks[best + 1] = Block{p->blocks[best].offset + need, p->blocks[best].size - need, 0, 0};
        p->blocks[best].size = need;
        p->n_blocks++;
    }
    *out = hand_out(p, best, size);
    return NRV_OK;
}

/* Index of the live block starting at ptr, or SIZE_MAX (stale, interior or foreign). */
static size_t find_live(const nrvc_pool *p, const void *ptr) {
    const unsigned char *c = static_cast<const unsigned char *>(ptr);
    if (c < p->base || c >= p->base + p->capacity) return SIZE_MAX;
    const uint64_t off = (uint64_t)(c - p->base);
    size_t i;
    if (p->kind == NRV_POOL_STREAMING) {
        if (off % p->chunk_size) return SIZE_MAX;
        i = (size_t)(off / p->chunk_size);
    } else {
        size_t lo = 0, hi = p->n_blocks;
        while (lo < hi) { /* first block with offset >= off */
            const size_t mid = lo + (hi - lo) / 2;
            if (p->blocks[mid].offset < off) lo = mid + 1;
            else hi = mid;
        }
        i = lo;
    }
    return i < p->n_blocks && p->blocks[i].offset == off && p->blocks[i].refs > 0 ? i : SIZE_MAX;
}

static nrv_status not_live(const char *fn, const nrvc_pool *p, const void *ptr) {
    return nrvc_fail(NRV_ERR_STATE, "%s: %p is not a live buffer of pool '%s' (device %d)", fn, ptr, p->name,
                     p->device);
}

NRVC_EXPORT nrv_status nrvc_pool_retain(nrvc_pool *p, void *ptr) {
    const size_t i = find_live(p, ptr);
    if (i == SIZE_MAX) return not_live("nrv_cuda_buffer_retain", p, ptr);
    p->blocks[i].refs++;
    return NRV_OK;
}

NRVC_EXPORT int64_t nrvc_pool_refcount(const nrvc_pool *p, const void *ptr) {
    const size_t i = find_live(p, ptr);
    return i == SIZE_MAX ? 0 : p->blocks[i].refs;
}

NRVC_EXPORT nrv_status nrvc_pool_release(nrvc_pool *p, void *ptr) {
    const size_t i = find_live(p, ptr);
    if (i == SIZE_MAX) return not_live("nrv_cuda_pool_release", p, ptr);
    Block &b = p->blocks[i];
    if (--b.refs > 0) return NRV_OK;
    p->allocated -= b.requested;
    p->live--;
    if (p->kind == NRV_POOL_STATIC) {
        /* the bytes stay used until a reset: padding and request become unreclaimed */
        p->overhead += b.requested;
        memmove(&p->blocks[i], &p->blocks[i + 1], (p->n_blocks - i - 1) * sizeof(Block));
        p->n_blocks--;
    } else {
        p->overhead -= b.size - b.requested;
        b.requested = 0;
        if (p->kind == NRV_POOL_DYNAMIC) {
            if (i + 1 < p->n_blocks && p->blocks[i + 1].refs == 0) { /* merge the next block in */
                b.size += p->blocks[i + 1].size;
                memmove(&p->blocks[i + 1], &p->blocks[i + 2], (p->n_blocks - i - 2) * sizeof(Block));
                p->n_blocks--;
            }
            if (i > 0 && p->blocks[i - 1].refs == 0) { /* merge into the previous block */
                p->blocks[i - 1].size += p->blocks[i].size;
                memmove(&p->blocks[i], &p->blocks[i + 1], (p->n_blocks - i - 1) * sizeof(Block));
                p->n_blocks--;
            }
        }
    }
    if (p->closed && p->live == 0) destroy(p);
    return NRV_OK;
}

NRVC_EXPORT nrv_status nrvc_pool_reset(nrvc_pool *p) {
    static const char fn[] = "nrv_cuda_pool_reset";
    if (p->live)
        return nrvc_fail(NRV_ERR_STATE, "%s: pool '%s' still has %llu live buffer(s)", fn, p->name,
                         (unsigned long long)p->live);
    if (p->kind == NRV_POOL_STATIC) {
        p->top = 0;
        p->overhead = 0;
        p->n_blocks = 0;
    }
    return NRV_OK;
}

NRVC_EXPORT nrv_status nrvc_pool_stats(const nrvc_pool *p, nrv_pool_stats *out) {
    nrv_pool_stats s;
    memset(&s, 0, sizeof s);
    s.kind = p->kind;
    s.closed = p->closed;
    s.capacity = p->capacity;
    s.allocated = p->allocated;
    s.overhead = p->overhead;
    s.free = p->capacity - p->allocated - p->overhead;
    s.peak = p->peak;
    s.largest_free = largest_free(p);
    s.live_buffers = p->live;
    s.total_allocs = p->total_allocs;
    s.failed_allocs = p->failed_allocs;
    s.chunk_size = p->chunk_size;
    s.chunk_count = p->n_chunks;
    *out = s;
    return NRV_OK;
}
