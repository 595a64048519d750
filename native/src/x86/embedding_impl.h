/* embedding_impl.h — embedding gathers (f32, f16, int8 with row scales), written against
 * the vector layer; instantiated for AVX2 only (embedding_avx2.c): the gather is
 * memory-bound and an AVX-512 build of this file measured no faster (f16: 14% slower),
 * see x86_table.c. It still compiles for 16 lanes if that changes on other CPUs.
 *
 * A gather of random rows from a table larger than the caches is bound by memory
 * latency, not by the copy: each row starts at an address no hardware prefetcher can
 * guess. But all ids are known up front, so the kernel prefetches the rows of the ids a
 * little ahead of the one it copies, keeping enough cache-line misses in flight to run at
 * copy bandwidth. Large outputs are written with non-temporal stores: the output is not
 * re-read by this kernel, and streaming it past the cache avoids reading every
 * destination line first (write-allocate) and evicting the table rows still to come.
 *
 * Results are bit-identical to the reference: f32 rows are copied, f16 converted exactly
 * (F16C / AVX-512 vcvtph2ps; a signalling NaN comes out quiet), int8 · scale is one
 * rounding, as in the reference.
 */
#include "x86_kernels.h"

/* Prefetch distance. Tuned on the bench (Zen 4 KVM guest, 512 MiB table, random ids,
 * 64 MiB out; every setting interleaved with memcpy in the same process, medians):
 *  - prefetcht1 (into L2), not t0: t0 prefetches hold L1 miss buffers, of which a core
 *    has few, and with t0 the gather stayed at ~0.5x memcpy whatever the distance; t1
 *    lets ~16 rows be in flight;
 *  - 16 KiB of rows ahead, at most 16 rows: far enough to cover a DRAM miss plus (4 KiB
 *    pages) a page walk at copy speed; more rows in flight than ~16 made short rows
 *    slower again (page walks queue up);
 *  - only the first 8 lines (512 B) of each row: the hardware stream prefetcher follows
 *    a row on its own once it has seen its start. Prefetching whole rows (up to 64 lines,
 *    the first tuning) crowds the L2 miss queue with lines the streamer would fetch
 *    anyway: on an Intel Xeon KVM guest (AVX-512, 1 GiB table on huge pages, paired with
 *    memcpy in `nerve bench ops`) 8 lines took 4 KiB rows from 0.71-0.77x memcpy to
 *    0.95-0.98x, 16 KiB rows from 0.81-0.88x to 0.94-0.98x, 1 KiB rows 0.64-0.73x to
 *    0.70-0.75x; 4 lines measured the same, 1 line or none lost at 256 B-1 KiB.
 *  - 4 lines, not 8: on an AMD Zen 3 KVM guest (AVX2, 512 MiB table on huge pages, C
 *    harness pairing each call with memcpy, 2026-12-07) 4 lines gathered 1 KiB rows at
 *    9.1-10.4 GB/s against 9.6-10.0 for 8, 2 KiB 11.1-12.0 against 11.3, 4 KiB 13.4-14.2
 *    against 13.0-13.4; 512 B alike. A core keeps only a few dozen software prefetches in
 *    flight (L1 miss buffers): the fewer lines each row takes, the more rows are under
 *    way, and the stream prefetcher, which does not hold those buffers, brings the rest. */
#ifndef EMB_PREFETCH_AHEAD_BYTES
#define EMB_PREFETCH_AHEAD_BYTES 16384
#endif
#ifndef EMB_PREFETCH_MAX_ROWS
#define EMB_PREFETCH_MAX_ROWS 16
#endif
#ifndef EMB_PREFETCH_MAX_LINES
#define EMB_PREFETCH_MAX_LINES 4
#endif
/* AMD Zen 4 (KVM guest, the same bench, 2026-12-05): whole rows, up to 64 lines, beat the
 * first 8 there: 1 KiB rows 0.45 -> 0.66x memcpy, 4 KiB 0.60 -> 0.63, 16 KiB 0.71 -> 0.74
 * (16 and 32 lines in between); rows of 512 B or less keep the short code (the same lines,
 * but 0.44 -> 0.36 with the longer loop). Not on Zen 3, where whole rows ran at 7.7-8.2
 * GB/s against the 4 lines' 9.1-10.4 at 1 KiB, 9.7 against 13.4-14.2 at 4 KiB, 14.2-14.9
 * against 15.7-16.6 at 16 KiB (the harness above). */
#ifndef EMB_PREFETCH_LINES_ZEN4
#define EMB_PREFETCH_LINES_ZEN4 64
#endif
static inline int emb_whole_rows(uint64_t row_bytes) { return row_bytes > 512 && nrv_cpu_is_amd_zen4_or_later(); }
#ifndef EMB_PREFETCH_INSN
#define EMB_PREFETCH_INSN "prefetcht1"
#endif
/* Streaming (non-temporal) stores when the output is at least this large: below it the
 * output most likely stays in cache for the next op, which is worth more than the saved
 * write-allocate traffic. And only for output rows of >= 2 KiB: for 256-512 B rows
 * streaming stores measured 0.3-0.5x memcpy against 0.5-0.7x for ordinary stores (Zen 4),
 * and at 1 KiB 0.76-0.80x against 0.82-0.85x (Intel Xeon, C harness, paired). */
#ifndef EMB_STREAM_MIN_BYTES
#define EMB_STREAM_MIN_BYTES ((uint64_t)4 << 20)
#endif
#ifndef EMB_STREAM_MIN_ROW_BYTES
#define EMB_STREAM_MIN_ROW_BYTES 2048
#endif

enum { EMB_F32, EMB_F16, EMB_Q8 };

/* VL output floats starting at element j of a row. */
static inline __attribute__((always_inline)) vf emb_load(int kind, const void *row, int64_t j, vf scale) {
    switch (kind) {
    case EMB_F32: return vload((const float *)row + j);
    case EMB_F16: return vload_f16((const uint16_t *)row + j);
    default: return vmul(vload_i8((const int8_t *)row + j), scale);
    }
}

/* n < VL output floats starting at element j (the other lanes 0). */
static inline __attribute__((always_inline)) vf emb_load_part(int kind, const void *row, int64_t j, int64_t n,
                                                              vf scale) {
    switch (kind) {
    case EMB_F32: return vload_tail((const float *)row + j, vtail_mask(n));
    case EMB_F16: return vload_f16_part((const uint16_t *)row + j, n);
    default: return vmul(vload_i8_part((const int8_t *)row + j, n), scale);
    }
}

/* One row: dim output floats to dst. */
static inline __attribute__((always_inline)) void emb_row(int kind, int stream, const void *row, vf scale,
                                                          int64_t dim, float *dst) {
    int64_t j = 0;
    if (dim >= VL) {
        if (stream) {
            /* Streaming stores need aligned addresses: one ordinary store covers the
             * misaligned head, the aligned body streams, an ordinary store the tail. */
            const int64_t head = (int64_t)((-(uintptr_t)dst) & (VL * sizeof(float) - 1)) / (int64_t)sizeof(float);
            if (head) {
                vstore(dst, emb_load(kind, row, 0, scale));
                j = head;
            }
            for (; j + 4 * VL <= dim; j += 4 * VL) {
                const vf a = emb_load(kind, row, j, scale), b = emb_load(kind, row, j + VL, scale);
                const vf c = emb_load(kind, row, j + 2 * VL, scale), d = emb_load(kind, row, j + 3 * VL, scale);
                vstream(dst + j, a);
                vstream(dst + j + VL, b);
                vstream(dst + j + 2 * VL, c);
                vstream(dst + j + 3 * VL, d);
            }
            for (; j + VL <= dim; j += VL) vstream(dst + j, emb_load(kind, row, j, scale));
        } else {
            for (; j + 4 * VL <= dim; j += 4 * VL) {
                const vf a = emb_load(kind, row, j, scale), b = emb_load(kind, row, j + VL, scale);
                const vf c = emb_load(kind, row, j + 2 * VL, scale), d = emb_load(kind, row, j + 3 * VL, scale);
                vstore(dst + j, a);
                vstore(dst + j + VL, b);
                vstore(dst + j + 2 * VL, c);
                vstore(dst + j + 3 * VL, d);
            }
            for (; j + VL <= dim; j += VL) vstore(dst + j, emb_load(kind, row, j, scale));
        }
        /* The last partial vector: rewrite the row's last VL floats (same values where
         * they overlap), cheaper than a masked store. */
        if (j < dim) vstore(dst + dim - VL, emb_load(kind, row, dim - VL, scale));
        return;
    }
    vstore_tail(dst, vtail_mask(dim), emb_load_part(kind, row, 0, dim, scale));
}

/* One prefetch instruction. Inline asm rather than _mm_prefetch: GCC treats
 * __builtin_prefetch as free of side effects and deletes a loop that does nothing but
 * prefetch (it did, silently, for emb_prefetch_row below). */
static inline void emb_prefetch_line(const char *p) {
    __asm__ volatile(EMB_PREFETCH_INSN " %0" : : "m"(*(const char(*)[64])p));
}

/* Issues prefetches for the first lines of one table row. */
static inline void emb_prefetch_row(const char *row, size_t row_bytes, int64_t max_lines) {
    const char *p = (const char *)((uintptr_t)row & ~(uintptr_t)63);
    const char *end = row + row_bytes;
    for (int64_t l = 0; l < max_lines && p < end; l++, p += 64) emb_prefetch_line(p);
}

static inline __attribute__((always_inline)) void emb_gather(int kind, const int64_t max_lines, const void *table,
                                                             const float *row_scales, int64_t dim, const void *ids,
                                                             int ids_int64, int64_t n_ids, float *out) {
    const size_t elem = kind == EMB_F32 ? 4 : kind == EMB_F16 ? 2 : 1;
    const size_t row_bytes = (size_t)dim * elem;
    const char *base = table;
    const int stream = (uint64_t)n_ids * (uint64_t)dim * sizeof(float) >= EMB_STREAM_MIN_BYTES &&
                       (uint64_t)dim * sizeof(float) >= EMB_STREAM_MIN_ROW_BYTES;
    int64_t ahead = (int64_t)(EMB_PREFETCH_AHEAD_BYTES / row_bytes);
    if (ahead < 1) ahead = 1;
    if (ahead > EMB_PREFETCH_MAX_ROWS) ahead = EMB_PREFETCH_MAX_ROWS;

    /* Prime: the first `ahead` rows. */
    for (int64_t i = 0; i < ahead && i < n_ids; i++) {
        const int64_t id = nrv_id_at(ids, ids_int64, i);
        emb_prefetch_row(base + (size_t)id * row_bytes, row_bytes, max_lines);
        if (kind == EMB_Q8) emb_prefetch_line((const char *)(row_scales + id));
    }
    for (int64_t i = 0; i < n_ids; i++) {
        if (i + ahead < n_ids) {
            const int64_t pid = nrv_id_at(ids, ids_int64, i + ahead);
            emb_prefetch_row(base + (size_t)pid * row_bytes, row_bytes, max_lines);
            if (kind == EMB_Q8) emb_prefetch_line((const char *)(row_scales + pid));
        }
        const int64_t id = nrv_id_at(ids, ids_int64, i);
        const vf scale = kind == EMB_Q8 ? vset1(row_scales[id]) : vzero();
        emb_row(kind, stream, base + (size_t)id * row_bytes, scale, dim, out + i * dim);
    }
    /* Streaming stores are weakly ordered: make them globally visible before returning,
     * so another thread that synchronises with this one reads the rows we wrote. */
    if (stream) vstream_fence();
}

/* emb_gather with the prefetch depth of this CPU and row size, each a compile-time constant
 * in its own copy (a run-time line count measured slower on short rows). */
static inline __attribute__((always_inline)) void emb_gather_tuned(int kind, const void *table,
                                                                   const float *row_scales, int64_t dim,
                                                                   const void *ids, int ids_int64, int64_t n_ids,
                                                                   float *out) {
    const uint64_t row_bytes = (uint64_t)dim * (kind == EMB_F32 ? 4 : kind == EMB_F16 ? 2 : 1);
    if (emb_whole_rows(row_bytes))
        emb_gather(kind, EMB_PREFETCH_LINES_ZEN4, table, row_scales, dim, ids, ids_int64, n_ids, out);
    else
        emb_gather(kind, EMB_PREFETCH_MAX_LINES, table, row_scales, dim, ids, ids_int64, n_ids, out);
}

void X86FN(nrv_embedding_f32)(const void *table, const float *row_scales, int64_t dim, const void *ids,
                              int ids_int64, int64_t n_ids, float *out) {
    emb_gather_tuned(EMB_F32, table, row_scales, dim, ids, ids_int64, n_ids, out);
}

void X86FN(nrv_embedding_f16)(const void *table, const float *row_scales, int64_t dim, const void *ids,
                              int ids_int64, int64_t n_ids, float *out) {
    emb_gather_tuned(EMB_F16, table, row_scales, dim, ids, ids_int64, n_ids, out);
}

void X86FN(nrv_embedding_q8)(const void *table, const float *row_scales, int64_t dim, const void *ids,
                             int ids_int64, int64_t n_ids, float *out) {
    emb_gather_tuned(EMB_Q8, table, row_scales, dim, ids, ids_int64, n_ids, out);
}
