/* linear_w8a8_amx.c — int8 x int8 linear layer (w8a8) on AMX tiles (TDPBUSD; Intel Xeon
 * from Sapphire Rapids on). One TDPBUSD multiplies a 16 x 64 tile of u8 activations by a
 * 64 x 16 tile of s8 weights into 16 x 16 int32 sums: 16 K multiply-adds per cycle per
 * output lane where AVX-512 VNNI does 4, so many-row products (the encoder's, a prompt)
 * run several times faster. Few rows leave most of a tile empty: below AMX_MIN_ROWS the
 * call goes to the VNNI kernel, whose sums are the same integers.
 *
 * The packed weight (kernels.h: per block of 16 outputs, 64 bytes per 4 k, lane n holding
 * output n's 4 bytes) is already the B-tile layout TDPBUSD wants: 16 consecutive k-blocks
 * of one output block are one 16 x 64-byte tile, loaded in place with a 64-byte stride.
 * Activations are quantised as the VNNI kernel does (linear_w8a8_avx512.h: xu = xq + 128,
 * a row's pad k at xq = 0), so acc - 128·colsum is the exact Σ xq·q, and the shared
 * epilogue makes the result bit-identical to the VNNI kernel and to the reference.
 *
 * Tiles: 0-3 the int32 sums of up to 32 rows x 32 outputs (tile 2·rb + nb: row half rb,
 * output block nb), 4-5 the two row halves of xu, 6-7 the two output blocks' weights. A
 * block of rows is quantised once into xu (32 x AMX_SLICE bytes on the stack) and every
 * pair of output blocks runs over it; rows wider than AMX_SLICE go in K slices with the
 * int32 sums kept in y between slices (as linear_w8a8_slices.h describes). A K step of
 * fewer than 64 bytes (K not a multiple of 64) takes its weight rows from a zero-padded
 * copy, so no tile load reads past the packed weight.
 *
 * Linux gives a process AMX state only on request (arch_prctl ARCH_REQ_XCOMP_PERM): cpu.c
 * asks once and reports NRV_CPU_AMXINT8 only if that succeeded, so this variant never runs
 * where the tile instructions would fault.
 */
#include "linear_w8a8_avx512.h"

#define AMX_ROWS 32     /* rows per block: two 16-row A tiles */
#define AMX_SLICE 2048  /* bytes of a row per K slice (a multiple of 64); xu is 64 KiB */
#define AMX_MIN_ROWS 16 /* fewer rows: the VNNI kernel (same sums, same epilogue) */

/* The 64-byte operand of LDTILECFG (palette 1). */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;
_Static_assert(sizeof(amx_config) == 64, "LDTILECFG reads 64 bytes");

/* Tiles for a block of R rows (1 <= R <= 32): the sums and xu tiles of each row half hold
 * only that half's rows, so no tile reads or writes a row past R. */
static void configure(int R) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int lo = R < 16 ? R : 16, hi = R > 16 ? R - 16 : 0;
    for (int t = 0; t < 8; t++) c.colsb[t] = 64;
    c.rows[0] = c.rows[1] = c.rows[4] = (uint8_t)lo;
    c.rows[2] = c.rows[3] = c.rows[5] = (uint8_t)(hi ? hi : lo); /* unused when hi == 0 */
    c.rows[6] = c.rows[7] = 16;
    _tile_loadconfig(&c);
}

/* One pair of output blocks from n0 (nvalid of them real, 1..32) for R rows over the slice
 * xu (row stride AMX_SLICE) holding k-blocks [kb0, kb0 + nkb) of kb_n. first: the sums start
 * at 0, else from y's bytes; last: the epilogue, else the sums go back to y's bytes. */
static void pair(int R, const uint8_t *xu, int64_t kb0, int64_t nkb, int64_t kb_n, const int8_t *packed, int64_t n0,
                 int64_t nvalid, const int32_t *colsum, const float *sx, const float *rsum, const float *s,
                 const float *z, int64_t st, const float *b, float *y, int64_t ldy, int first, int last) {
    const int two_halves = R > 16, two_blocks = nvalid > 16;
    const int8_t *w0 = packed + ((n0 / 16) * kb_n + kb0) * 64, *w1 = w0 + kb_n * 64;
    int32_t *part = (int32_t *)(void *)y;
    _Alignas(64) int32_t sums[AMX_ROWS][32]; /* the tiles' int32 sums, row r, output n0 + n */

    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        for (int r = 0; r < R; r++)
            for (int j = 0; j < 2; j++) {
                const int64_t left = nvalid - 16 * j;
                const __mmask16 k = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
                _mm512_store_si512(sums[r] + 16 * j, _mm512_maskz_loadu_epi32(k, part + r * ldy + n0 + 16 * j));
            }
        _tile_loadd(0, sums[0], 128);
        _tile_loadd(1, sums[0] + 16, 128);
        if (two_halves) {
            _tile_loadd(2, sums[16], 128);
            _tile_loadd(3, sums[16] + 16, 128);
        }
    }

    _Alignas(64) int8_t tail[2][16 * 64]; /* the last, short K step's weight rows, zero-padded */
    const int64_t full = nkb / 16, rest = nkb % 16;
    for (int64_t step = 0; step <= full; step++) {
        const int8_t *b0 = w0 + step * 16 * 64, *b1 = w1 + step * 16 * 64;
        if (step == full) {
            if (!rest) break;
            memset(tail, 0, sizeof tail);
            memcpy(tail[0], b0, (size_t)rest * 64);
            if (two_blocks) memcpy(tail[1], b1, (size_t)rest * 64);
            b0 = tail[0];
            b1 = tail[1];
        }
        const uint8_t *a = xu + step * 64;
        _tile_loadd(4, a, AMX_SLICE);
        _tile_loadd(6, b0, 64);
        _tile_dpbusd(0, 4, 6);
        if (two_blocks) {
            _tile_loadd(7, b1, 64);
            _tile_dpbusd(1, 4, 7);
        }
        if (two_halves) {
            _tile_loadd(5, a + 16 * AMX_SLICE, AMX_SLICE);
            _tile_dpbusd(2, 5, 6);
            if (two_blocks) _tile_dpbusd(3, 5, 7);
        }
    }

    _tile_stored(0, sums[0], 128);
    if (two_blocks) _tile_stored(1, sums[0] + 16, 128);
    if (two_halves) {
        _tile_stored(2, sums[16], 128);
        if (two_blocks) _tile_stored(3, sums[16] + 16, 128);
    }
    for (int j = 0; j < 1 + two_blocks; j++) {
        const int64_t left = nvalid - 16 * j;
        if (!last) {
            const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            for (int r = 0; r < R; r++)
                _mm512_mask_storeu_epi32(part + r * ldy + n0 + 16 * j, k, _mm512_load_si512(sums[r] + 16 * j));
            continue;
        }
        __m512i acc[AMX_ROWS];
        for (int r = 0; r < R; r++) acc[r] = _mm512_load_si512(sums[r] + 16 * j);
        store_block(R, acc, n0 + 16 * j, left, colsum, sx, rsum, s, z, st, b, y, ldy);
    }
}

void nrv_linear_w8a8_amx(const float *x, int64_t rows, int64_t in, const int8_t *packed, int64_t out, const float *s,
                         const float *z, int64_t sz_stride, const float *b, float *y) {
    if (rows < AMX_MIN_ROWS) {
        nrv_linear_w8a8_vnni(x, rows, in, packed, out, s, z, sz_stride, b, y);
        return;
    }
    const int64_t kp = (in + 3) / 4 * 4, np = (out + 15) / 16 * 16, kb_n = kp / 4;
    const int32_t *colsum = (const int32_t *)(const void *)(packed + np * kp); /* read with unaligned loads */
    _Alignas(64) uint8_t xu[AMX_ROWS * AMX_SLICE];
    float sx[AMX_ROWS], rsum[AMX_ROWS], inv[AMX_ROWS];
    int32_t isum[AMX_ROWS];
    int configured = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += AMX_ROWS) {
        const int R = (int)(rows - r0 < AMX_ROWS ? rows - r0 : AMX_ROWS);
        if (R != configured) {
            configure(R);
            configured = R;
        }
        float *yb = y + r0 * out;
        w8a8_slices_begin(row_scale, x + r0 * in, in, R, sx, inv, isum);
        for (int64_t k0 = 0; k0 < kp; k0 += AMX_SLICE) {
            const int64_t w = kp - k0 < AMX_SLICE ? kp - k0 : AMX_SLICE;
            const int last = w8a8_quantise_slice(quantise_span, x + r0 * in, in, kp, R, k0, w, inv, xu, AMX_SLICE,
                                                 z != NULL, isum, sx, rsum);
            /* A short last K step reads its xu rows to the next 64 bytes: zeros there (their
             * weight rows are zero too, so any value would do; zeros keep the read defined). */
            const int64_t w64 = (w + 63) / 64 * 64;
            if (w64 > w)
                for (int r = 0; r < R; r++) memset(xu + r * AMX_SLICE + w, 0, (size_t)(w64 - w));
            for (int64_t n0 = 0; n0 < out; n0 += 32) {
                const int64_t nvalid = out - n0 < 32 ? out - n0 : 32;
                pair(R, xu, k0 / 4, w / 4, kb_n, packed, n0, nvalid, colsum, sx, rsum, s, z, sz_stride, b, yb, out,
                     k0 == 0, last);
            }
        }
    }
    _tile_release();
}
