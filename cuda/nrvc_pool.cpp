/* nrvc_pool.cpp — device memory pool: one cudaMalloc'd arena, carved on the host.
 *
 * The arena is covered by an address-ordered array of blocks (offset, size, requested
 * bytes, used flag); neighbouring free blocks never stay apart (release coalesces), so the
 * array stays short. Allocation is best fit over the free blocks (ties: lowest address,
 * i.e. the first fit among equals), splitting off the tail; release finds the block by
 * binary search on its offset. The bookkeeping never touches device memory, so the host
 * never waits on the GPU and the whole arena is usable. Sizes are multiples of 256 bytes,
 * the alignment every buffer gets (cudaMalloc's own, enough for any vector access).
 * Counters are exact: allocated = sum of requested sizes, overhead = rounding padding.
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
    uint64_t requested; /* used blocks: the caller's size; 0 for free blocks */
    int used;
};

} /* namespace */

struct nrvc_pool {
    int device;
    char name[64];
    unsigned char *base; /* device pointer */
    uint64_t capacity;
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
    uint64_t best = 0;
    for (size_t i = 0; i < p->n_blocks; i++)
        if (!p->blocks[i].used && p->blocks[i].size > best) best = p->blocks[i].size;
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

NRVC_EXPORT nrv_status nrvc_pool_create(int device, uint64_t capacity, const char *name, nrvc_pool **out) {
    static const char fn[] = "nrv_cuda_pool_create";
    if (capacity == 0 || capacity > UINT64_MAX - (kAlign - 1))
        return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: capacity %llu is not a usable size", fn,
                         (unsigned long long)capacity);
    const uint64_t rounded = (capacity + kAlign - 1) / kAlign * kAlign;

    nrvc_pool *p = static_cast<nrvc_pool *>(calloc(1, sizeof *p));
    if (!p) return nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "%s: no host memory for the pool record", fn);
    p->device = device;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "cuda");
    p->capacity = rounded;
    void *base = nullptr;
    nrv_status st = reserve_blocks(p, 1);
    if (st == NRV_OK) st = arena_alloc(fn, device, rounded, &base);
    if (st != NRV_OK) {
        free(p->blocks);
        free(p);
        return st;
    }
    p->base = static_cast<unsigned char *>(base);
    p->blocks[0] = Block{0, rounded, 0, 0};
    p->n_blocks = 1;
    *out = p;
    return NRV_OK;
}

NRVC_EXPORT void nrvc_pool_free(nrvc_pool *p) {
    if (!p) return;
    arena_free(p->device, p->base);
    free(p->blocks);
    free(p);
}

NRVC_EXPORT nrv_status nrvc_pool_alloc(nrvc_pool *p, uint64_t size, void **out) {
    static const char fn[] = "nrv_cuda_pool_alloc";
    if (size == 0 || size > p->capacity) {
        p->failed_allocs++;
        if (size == 0) return nrvc_fail(NRV_ERR_INVALID_ARG, "%s: size is 0", fn);
        return nrvc_fail(NRV_ERR_OUT_OF_MEMORY, "%s: pool '%s' (device %d, %llu bytes) cannot hold %llu bytes", fn,
                         p->name, p->device, (unsigned long long)p->capacity, (unsigned long long)size);
    }
    const uint64_t need = (size + kAlign - 1) / kAlign * kAlign; /* no overflow: size <= capacity */
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < p->n_blocks; i++) {
        const Block &b = p->blocks[i];
        if (!b.used && b.size >= need && (best == SIZE_MAX || b.size < p->blocks[best].size)) {
            best = i;
            if (b.size == need) break;
        }
    }
    if (best == SIZE_MAX) {
        p->failed_allocs++;
        return nrvc_fail(NRV_ERR_OUT_OF_MEMORY,
                         "%s: pool '%s' (device %d) exhausted: %llu bytes requested, %llu free, largest free "
                         "block %llu",
                         fn, p->name, p->device, (unsigned long long)size,
                         (unsigned long long)(p->capacity - p->allocated - p->overhead),
                         (unsigned long long)largest_free(p));
    }
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
    Block &b = p->blocks[best];
    b.used = 1;
    b.requested = size;
    p->allocated += size;
    p->overhead += need - size;
    if (p->allocated > p->peak) p->peak = p->allocated;
    p->live++;
    p->total_allocs++;
    *out = p->base + b.offset;
    return NRV_OK;
}

NRVC_EXPORT nrv_status nrvc_pool_release(nrvc_pool *p, void *ptr) {
    static const char fn[] = "nrv_cuda_pool_release";
    const unsigned char *c = static_cast<const unsigned char *>(ptr);
    size_t lo = 0, hi = p->n_blocks;
    if (c >= p->base && c < p->base + p->capacity) {
        const uint64_t off = (uint64_t)(c - p->base);
        while (lo < hi) { /* first block with offset >= off */
            const size_t mid = lo + (hi - lo) / 2;
            if (p->blocks[mid].offset < off) lo = mid + 1;
            else hi = mid;
        }
        if (lo < p->n_blocks && p->blocks[lo].offset == off && p->blocks[lo].used) {
            size_t i = lo;
            Block &b = p->blocks[i];
            p->allocated -= b.requested;
            p->overhead -= b.size - b.requested;
            p->live--;
            b.used = 0;
            b.requested = 0;
            if (i + 1 < p->n_blocks && !p->blocks[i + 1].used) { /* merge the next block in */
                b.size += p->blocks[i + 1].size;
                memmove(&p->blocks[i + 1], &p->blocks[i + 2], (p->n_blocks - i - 2) * sizeof(Block));
                p->n_blocks--;
            }
            if (i > 0 && !p->blocks[i - 1].used) { /* merge into the previous block */
                p->blocks[i - 1].size += p->blocks[i].size;
                memmove(&p->blocks[i], &p->blocks[i + 1], (p->n_blocks - i - 1) * sizeof(Block));
                p->n_blocks--;
            }
            return NRV_OK;
        }
    }
    return nrvc_fail(NRV_ERR_STATE, "%s: %p is not a live buffer of pool '%s' (device %d)", fn, ptr, p->name,
                     p->device);
}

NRVC_EXPORT nrv_status nrvc_pool_stats(const nrvc_pool *p, nrv_pool_stats *out) {
    nrv_pool_stats s;
    memset(&s, 0, sizeof s);
    s.kind = NRV_POOL_DYNAMIC;
    s.closed = 0;
    s.capacity = p->capacity;
    s.allocated = p->allocated;
    s.overhead = p->overhead;
    s.free = p->capacity - p->allocated - p->overhead;
    s.peak = p->peak;
    s.largest_free = largest_free(p);
    s.live_buffers = p->live;
    s.total_allocs = p->total_allocs;
    s.failed_allocs = p->failed_allocs;
    *out = s;
    return NRV_OK;
}
