/* cuda_select.c — what nerve runs on a CUDA device, from the device's properties alone.
 *
 * Host code in libnerve (no CUDA header, no GPU): the backend asks it which kernel and
 * layout to use, `nerve cuda-select` prints it for any device, and the tests check every
 * compute capability on a machine without a GPU. The rules and their reasons are in
 * docs/CUDA.md; each decision below writes a one-line reason into the selection.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Oldest architecture the backend is built for (sm_70, V100; CUDA 13 dropped it, a CUDA
 * 12 build keeps it). */
enum { CC_MIN_MAJOR = 7, CC_MIN_MINOR = 0 };
/* Blocks' shared memory when the device reports no opt-in size: the limit every device
 * grants without cudaFuncSetAttribute. */
#define SMEM_DEFAULT_PER_BLOCK ((uint64_t)48 << 10)
/* Rows up to which fused layernorm+linear stays on the warp-per-column kernel: the
 * streaming case (1–16 rows), where the weight read bounds the time and tensor cores
 * would idle. */
enum { LNL_ROWS_MAX_WARP = 16 };
/* Rows up to which a W4 product is a GEMV in all but name: each weight byte feeds so few
 * FMAs that the weight read bounds the time. */
enum { W4_GEMV_MAX_ROWS = 8 };

static void add_reason(nrv_cuda_selection *sel, const char *fmt, ...) NRV_PRINTF(2, 3);
static void add_reason(nrv_cuda_selection *sel, const char *fmt, ...) {
    const size_t used = strlen(sel->reasons);
    if (used + 1 >= sizeof sel->reasons) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sel->reasons + used, sizeof sel->reasons - used, fmt, ap);
    va_end(ap);
    const size_t now = strlen(sel->reasons);
    if (now + 1 < sizeof sel->reasons) {
        sel->reasons[now] = '\n';
        sel->reasons[now + 1] = '\0';
    }
}

/* "MAJOR.MINOR" with MAJOR 1..99 and MINOR one digit, nothing else (spaces around are
 * tolerated, as shell variables often carry them). */
static nrv_status parse_cc(const char *fn, const char *text, int32_t *major, int32_t *minor) {
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    int ma = 0, mi = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 3) ma = ma * 10 + (*p++ - '0'), digits++;
    int ok = digits > 0 && digits < 3 && ma > 0 && *p == '.';
    if (ok) {
        p++;
        ok = *p >= '0' && *p <= '9';
        if (ok) mi = *p++ - '0';
    }
    while (ok && (*p == ' ' || *p == '\t' || *p == '\n')) p++;
    if (!ok || *p != '\0')
        return nrv_fail(NRV_ERR_INVALID_ARG,
                        "%s: compute capability '%s' is not MAJOR.MINOR (e.g. NERVE_FORCE_CC=8.7)", fn, text);
    *major = ma;
    *minor = mi;
    return NRV_OK;
}

static nrv_status parse_memory(const char *fn, const char *text, int *mode_or_auto) {
    static const struct {
        const char *name;
        int mode;
    } modes[] = {{"auto", -1},
                 {"pinned", NRV_CUDA_MEM_PINNED},
                 {"zero_copy", NRV_CUDA_MEM_ZERO_COPY},
                 {"managed", NRV_CUDA_MEM_MANAGED}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(text, modes[i].name) == 0) {
            *mode_or_auto = modes[i].mode;
            return NRV_OK;
        }
    return nrv_fail(NRV_ERR_INVALID_ARG,
                    "%s: memory mode '%s' is not one of auto, pinned, zero_copy, managed (NERVE_CUDA_MEMORY)", fn,
                    text);
}

static nrv_status choose_memory(const char *fn, const nrv_cuda_device_info *dev, int requested,
                                nrv_cuda_selection *sel) {
    if (requested < 0) {
        if (dev->integrated && dev->can_map_host_memory) {
            sel->memory_mode = NRV_CUDA_MEM_ZERO_COPY;
            add_reason(sel, "memory: zero_copy (integrated GPU: CPU and GPU share the DRAM, mapped pinned "
                            "buffers are used in place, no cudaMemcpy)");
        } else {
            sel->memory_mode = NRV_CUDA_MEM_PINNED;
            add_reason(sel, "memory: pinned (%s: pinned host staging, async copies on the session's stream)",
                       dev->integrated ? "integrated GPU that cannot map host memory" : "discrete GPU");
        }
        return NRV_OK;
    }
    if (requested == NRV_CUDA_MEM_ZERO_COPY && !dev->can_map_host_memory)
        return nrv_fail(NRV_ERR_UNSUPPORTED, "%s: memory mode zero_copy needs a device that can map host memory "
                                             "(cudaDevAttrCanMapHostMemory is 0 on '%s')", fn, dev->name);
    if (requested == NRV_CUDA_MEM_MANAGED && !dev->concurrent_managed_access && !dev->integrated)
        return nrv_fail(NRV_ERR_UNSUPPORTED,
                        "%s: memory mode managed needs concurrent managed access "
                        "(cudaDevAttrConcurrentManagedAccess is 0 on '%s')", fn, dev->name);
    sel->memory_mode = requested;
    add_reason(sel, "memory: %s (requested)",
               requested == NRV_CUDA_MEM_ZERO_COPY ? "zero_copy" : requested == NRV_CUDA_MEM_MANAGED ? "managed"
                                                                                                   : "pinned");
    return NRV_OK;
}

nrv_status nrv_cuda_select(const nrv_cuda_device_info *dev, const char *force_cc, const char *memory,
                           nrv_cuda_selection *out) {
    static const char fn[] = "nrv_cuda_select";
    NRV_REQUIRE_PTR(fn, dev);
    NRV_REQUIRE_PTR(fn, out);
    if (!force_cc) force_cc = getenv("NERVE_FORCE_CC");
    if (!memory) memory = getenv("NERVE_CUDA_MEMORY");
    if (!memory || !memory[0]) memory = "auto";

    nrv_cuda_selection sel;
    memset(&sel, 0, sizeof sel);
    sel.cc_major = dev->cc_major;
    sel.cc_minor = dev->cc_minor;
    if (force_cc && force_cc[0]) {
        NRV_TRY(parse_cc(fn, force_cc, &sel.cc_major, &sel.cc_minor));
        sel.cc_forced = 1;
    }
    const int cc = sel.cc_major * 10 + sel.cc_minor;
    if (cc < CC_MIN_MAJOR * 10 + CC_MIN_MINOR)
        return nrv_fail(NRV_ERR_UNSUPPORTED, "%s: compute capability %d.%d%s is below nerve's minimum %d.%d (sm_70)",
                        fn, sel.cc_major, sel.cc_minor, sel.cc_forced ? " (forced)" : "", CC_MIN_MAJOR,
                        CC_MIN_MINOR);
    int requested_memory = -1;
    NRV_TRY(parse_memory(fn, memory, &requested_memory));
    add_reason(&sel, "device: %s, compute capability %d.%d%s, %s", dev->name[0] ? dev->name : "(unnamed)",
               sel.cc_major, sel.cc_minor, sel.cc_forced ? " (forced by NERVE_FORCE_CC)" : "",
               dev->integrated ? "integrated" : "discrete");

    /* Shared memory: half of an SM per block, so two blocks share an SM and one's loads
     * overlap the other's arithmetic; never above what one block may opt in to. */
    const uint64_t optin = dev->shared_memory_per_block_optin ? dev->shared_memory_per_block_optin
                                                              : SMEM_DEFAULT_PER_BLOCK;
    uint64_t budget = dev->shared_memory_per_sm ? dev->shared_memory_per_sm / 2 : SMEM_DEFAULT_PER_BLOCK;
    if (budget > optin) budget = optin;
    budget &= ~(uint64_t)1023;
    sel.smem_per_block = budget;
    add_reason(&sel, "shared memory: %llu KiB per block (half of the SM's %llu KiB, opt-in limit %llu KiB)",
               (unsigned long long)(budget >> 10), (unsigned long long)(dev->shared_memory_per_sm >> 10),
               (unsigned long long)(optin >> 10));

    sel.lnl_rows_max_warp = LNL_ROWS_MAX_WARP;
    sel.lnl_tensor_cores = 1; /* every supported architecture (sm_70+) has fp16 WMMA */
    add_reason(&sel, "layernorm_linear: warp_rows up to %d rows (weight-bandwidth bound); above, fp16 "
                     "activations on wmma_f16 (fp32 accumulation), fp32 activations stay on warp_rows "
                     "(tensor cores would round them to 10 mantissa bits)", LNL_ROWS_MAX_WARP);

    sel.w4_gemv_max_rows = W4_GEMV_MAX_ROWS;
    sel.w4_gemv_layout = NRV_W4_PACKED;
    add_reason(&sel, "w4 <= %d rows: packed (the weight read bounds the time; 4 bits a weight halve it)",
               W4_GEMV_MAX_ROWS);
    if (dev->integrated) {
        sel.w4_gemm_layout = NRV_W4_PACKED;
        add_reason(&sel, "w4 more rows: packed (integrated GPU: the DRAM and its bandwidth are shared "
                         "with the CPU, bytes are the scarce resource)");
    } else if (cc == 80 || cc == 90) {
        sel.w4_gemm_layout = NRV_W4_UNPACKED;
        add_reason(&sel, "w4 more rows: unpacked (sm_80/sm_90, the HBM parts A100/H100/H200: 10-18 bytes per "
                        "SM cycle, so with several rows per weight the nibble decode, not the read, bounds the "
                        "time; the int8 layout has no decode)");
    } else {
        sel.w4_gemm_layout = NRV_W4_PACKED;
        add_reason(&sel, "w4 more rows: packed (sm_%d%d: 3-7 bytes of bandwidth per SM cycle (GDDR, V100's "
                        "HBM2): the read still bounds the time)", sel.cc_major, sel.cc_minor);
    }
    NRV_TRY(choose_memory(fn, dev, requested_memory, &sel));
    *out = sel;
    return NRV_OK;
}

int32_t nrv_cuda_w4_rows_per_block(const nrv_cuda_selection *sel, int64_t in) {
    if (!sel || in <= 0) return 0;
    /* fp32 rows with one float of padding after every 32 (nrvc_linear_w4.cu: no bank
     * conflicts); in is bounded by the callers' shape checks, the products fit */
    const uint64_t row_bytes = ((uint64_t)in + (uint64_t)in / 32) * sizeof(float);
    for (int32_t rows = 8; rows >= 1; rows /= 2)
        if ((uint64_t)rows * row_bytes <= sel->smem_per_block) return rows;
    return 0;
}
