/* cpu.c — run-time CPU feature detection (cpuid + xgetbv on x86_64, getauxval on aarch64). */
#include <pthread.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#endif

#include "internal.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* XCR0 tells which register states the OS saves: AVX needs XMM|YMM (bits 1, 2),
 * AVX-512 additionally opmask|ZMM_Hi256|Hi16_ZMM (bits 5, 6, 7). */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* XCR0 bits 17-18 (XTILECFG, XTILEDATA) say the OS can save tile state, but Linux
 * (5.16+) hands the 8 KiB of it to a process only when asked: without this request the
 * first tile instruction faults. Asked once, at detection; the grant covers every thread. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

static uint64_t detect(void) {
    uint64_t f = 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1;
    const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const int os_avx = (xcr0 & 0x6) == 0x6;
    const int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    if ((c >> 20) & 1) f |= NRV_CPU_SSE42;
    if (os_avx && ((c >> 28) & 1)) f |= NRV_CPU_AVX;
    if (os_avx && ((c >> 12) & 1)) f |= NRV_CPU_FMA;
    if (os_avx && ((c >> 29) & 1)) f |= NRV_CPU_F16C;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (os_avx && ((b >> 5) & 1)) f |= NRV_CPU_AVX2;
        if (os_avx512) {
            if ((b >> 16) & 1) f |= NRV_CPU_AVX512F;
            if ((b >> 17) & 1) f |= NRV_CPU_AVX512DQ;
            if ((b >> 30) & 1) f |= NRV_CPU_AVX512BW;
            if ((b >> 31) & 1) f |= NRV_CPU_AVX512VL;
            if ((c >> 11) & 1) f |= NRV_CPU_AVX512VNNI;
        }
        if (((b >> 29) & 1) && (f & NRV_CPU_SSE42)) f |= NRV_CPU_SHA256; /* SHA-NI (SSE4.1 shuffles too) */
        const int amx_int8 = ((d >> 24) & 1) && ((d >> 25) & 1); /* AMX-TILE, AMX-INT8 */
        __cpuid_count(7, 1, a, b, c, d);
        if (os_avx && ((a >> 4) & 1)) f |= NRV_CPU_AVXVNNI;
        if (amx_int8 && os_avx512 && (xcr0 & 0x60000) == 0x60000 && amx_permitted()) f |= NRV_CPU_AMXINT8;
    }
    return f;
}
const char *nrv_cpu_arch(void) { return "x86_64"; }

#elif defined(__aarch64__)
#include <sys/auxv.h>

/* Linux hwcap bits (arch/arm64/include/uapi/asm/hwcap.h); spelled out so old libc
 * headers still build. */
#define NRV_HWCAP_ASIMD (1UL << 1)
#define NRV_HWCAP_FPHP (1UL << 9)
#define NRV_HWCAP_ASIMDDP (1UL << 20)
#define NRV_HWCAP_SHA2 (1UL << 6)
#define NRV_HWCAP2_I8MM (1UL << 13)

static uint64_t detect(void) {
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long hw2 = getauxval(AT_HWCAP2);
    uint64_t f = 0;
    if (hw & NRV_HWCAP_ASIMD) f |= NRV_CPU_NEON;
    if (hw & NRV_HWCAP_ASIMDDP) f |= NRV_CPU_ASIMDDP;
    if (hw & NRV_HWCAP_FPHP) f |= NRV_CPU_FPHP;
    if (hw2 & NRV_HWCAP2_I8MM) f |= NRV_CPU_I8MM;
    if (hw & NRV_HWCAP_SHA2) f |= NRV_CPU_SHA256;
    return f;
}
const char *nrv_cpu_arch(void) { return "aarch64"; }

#else
static uint64_t detect(void) { return 0; }
const char *nrv_cpu_arch(void) { return "other"; }
#endif /* __x86_64__ / __aarch64__ */

#if defined(__x86_64__)
/* An AMD core of Zen 4 or later: cpuid leaf 0's vendor string is "AuthenticAMD" (ebx, edx,
 * ecx), and leaf 1's family/model (base family 0xF plus the extended family; the extended
 * model above the base one) is family 19h with model 10h-1Fh or 60h-AFh (Zen 3 is 00h-0Fh and
 * 20h-5Fh: the split Linux's arch/x86/kernel/cpu/amd.c makes), or family 1Ah and later. */
static int detect_amd_zen4_or_later(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    if (!(b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u)) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base_family = (a >> 8) & 0xf;
    const unsigned family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
    const unsigned model = ((a >> 4) & 0xf) | (base_family == 0xf ? ((a >> 16) & 0xf) << 4 : 0);
    if (family == 0x19) return (model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0xaf);
    return family >= 0x1a;
}
#else
static int detect_amd_zen4_or_later(void) { return 0; }
#endif

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static uint64_t detected;
static int detected_zen4_or_later;

static void detect_init(void) {
    detected = detect();
    detected_zen4_or_later = detect_amd_zen4_or_later();
}

int nrv_cpu_is_amd_zen4_or_later(void) {
    pthread_once(&detect_once, detect_init);
    return detected_zen4_or_later;
}

uint64_t nrv_cpu_features(void) {
    pthread_once(&detect_once, detect_init);
    return detected;
}

const char *nrv_cpu_feature_name(uint64_t feature) {
    switch (feature) {
    case NRV_CPU_NEON: return "neon";
    case NRV_CPU_ASIMDDP: return "asimddp";
    case NRV_CPU_FPHP: return "fphp";
    case NRV_CPU_I8MM: return "i8mm";
    case NRV_CPU_SSE42: return "sse4.2";
    case NRV_CPU_AVX: return "avx";
    case NRV_CPU_AVX2: return "avx2";
    case NRV_CPU_FMA: return "fma";
    case NRV_CPU_F16C: return "f16c";
    case NRV_CPU_AVX512F: return "avx512f";
    case NRV_CPU_AVX512BW: return "avx512bw";
    case NRV_CPU_AVX512VL: return "avx512vl";
    case NRV_CPU_AVX512DQ: return "avx512dq";
    case NRV_CPU_AVX512VNNI: return "avx512vnni";
    case NRV_CPU_AVXVNNI: return "avxvnni";
    case NRV_CPU_AMXINT8: return "amxint8";
    case NRV_CPU_SHA256: return "sha256";
    default: return NULL;
    }
}

int nrv_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
