/* flac.c — FLAC decoder (RFC 9639) over an encoded stream held in memory.
 *
 * What it reads: an optional ID3v2 tag, the "fLaC" marker, the metadata blocks (STREAMINFO
 * first, the rest skipped), then frames: every subframe type (CONSTANT, VERBATIM, FIXED
 * orders 0-4, LPC orders 1-32), wasted bits, both Rice residual codings with escaped
 * partitions, the three stereo decorrelations, 4-32 bits per sample, 1-8 channels, fixed
 * and variable block sizes. Each frame header's CRC-8 and each frame's CRC-16 are checked,
 * and every decoded sample must fit its declared width: a corrupted or truncated stream is
 * NRV_ERR_FORMAT naming the byte offset and the frame's first sample, never a read past the
 * buffer (the bit reader pads with zeros and the decoder checks the consumed length).
 * Not checked: STREAMINFO's MD5 of the whole stream (the CRCs cover each frame).
 *
 * Memory: one allocation at open, the decoded frame (max block x channels int64) and its
 * interleaved int32 copy; the encoded bytes are borrowed from the caller.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define FLAC_MAX_LPC_ORDER 32
/* A Rice quotient beyond this is a corrupted stream (no valid residual needs 2^32). */
#define FLAC_MAX_QUOTIENT (1u << 30)

struct nrv_flac {
    const uint8_t *data;
    size_t size;
    size_t first_frame; /* byte offset of the first frame */
    size_t pos;         /* byte offset of the next frame to decode */
    nrv_flac_info info;
    int64_t *planar;    /* channels x max_block: the frame being decoded */
    int32_t *frame;     /* max_block x channels: the last decoded frame, interleaved, left-aligned */
    uint32_t frame_len; /* frames held in .frame */
    uint32_t frame_used;/* of which already handed out */
    uint64_t next_sample; /* first sample number of the next frame */
    int ended;
    uint16_t crc16[256];
    uint8_t crc8[256];
};

/* ---------------------------------------------------------------- bit reader (MSB first) */

typedef struct {
    const uint8_t *buf;
    size_t len;      /* bytes that may be read */
    size_t next;     /* next byte to load into the cache */
    uint64_t cache;  /* unread bits, left-aligned; the bits below count are zero */
    unsigned count;  /* valid bits in cache */
} bitreader;

static void br_init(bitreader *b, const uint8_t *buf, size_t len) {
    b->buf = buf;
    b->len = len;
    b->next = 0;
    b->cache = 0;
    b->count = 0;
}

/* Fills the cache to at least 57 bits; past the end it loads zeros (br_over tells). */
static inline void br_refill(bitreader *b) {
    while (b->count <= 56) {
        const uint64_t byte = b->next < b->len ? b->buf[b->next] : 0;
        b->next++;
        b->cache |= byte << (56 - b->count);
        b->count += 8;
    }
}

/* Bits consumed so far. */
static inline uint64_t br_tell(const bitreader *b) { return (uint64_t)b->next * 8 - b->count; }

/* Whether more bits were consumed than the buffer holds. */
static inline int br_over(const bitreader *b) { return br_tell(b) > (uint64_t)b->len * 8; }

/* k (0..56) bits as an unsigned value. */
static inline uint64_t br_bits(bitreader *b, unsigned k) {
    if (k == 0) return 0;
    if (b->count < k) br_refill(b);
    const uint64_t v = b->cache >> (64 - k);
    b->cache <<= k;
    b->count -= k;
    return v;
}

/* k (1..56) bits as a two's complement value. */
static inline int64_t br_sbits(bitreader *b, unsigned k) {
    const uint64_t v = br_bits(b, k);
    return (v >> (k - 1)) & 1 ? (int64_t)v - (int64_t)((uint64_t)1 << k) : (int64_t)v;
}

/* Unary: zeros up to a one, which is consumed; -1 past the end or beyond max. */
static inline int br_unary(bitreader *b, uint32_t max, uint32_t *q) {
    uint32_t n = 0;
    for (;;) {
        if (b->cache == 0) { /* every cached bit is zero */
            n += b->count;
            b->count = 0;
            if (n > max || br_over(b)) return -1;
            br_refill(b);
            continue;
        }
        const unsigned z = (unsigned)__builtin_clzll(b->cache); /* < count: the cache is not 0 */
        n += z;
        b->cache <<= z;
        b->cache <<= 1;
        b->count -= z + 1;
        if (n > max) return -1;
        *q = n;
        return 0;
    }
}

/* ---------------------------------------------------------------- CRCs */

static void crc_tables(nrv_flac_t *d) {
    for (unsigned i = 0; i < 256; i++) {
        unsigned c8 = i;
        unsigned c16 = i << 8;
        for (int j = 0; j < 8; j++) {
            c8 = (c8 & 0x80) ? ((c8 << 1) ^ 0x07) : (c8 << 1);
            c16 = (c16 & 0x8000) ? ((c16 << 1) ^ 0x8005) : (c16 << 1);
        }
        d->crc8[i] = (uint8_t)c8;
        d->crc16[i] = (uint16_t)c16;
    }
}

static uint8_t crc8_of(const nrv_flac_t *d, const uint8_t *p, size_t n) {
    uint8_t c = 0;
    for (size_t i = 0; i < n; i++) c = d->crc8[c ^ p[i]];
    return c;
}

static uint16_t crc16_of(const nrv_flac_t *d, const uint8_t *p, size_t n) {
    uint16_t c = 0;
    for (size_t i = 0; i < n; i++) c = (uint16_t)((c << 8) ^ d->crc16[(c >> 8) ^ p[i]]);
    return c;
}

/* ---------------------------------------------------------------- frames */

/* Arithmetic shift right of a signed value (floor division by 2^s), portable. */
static inline int64_t asr64(int64_t v, unsigned s) { return v >= 0 ? v >> s : ~(~v >> s); }

typedef struct {
    size_t at;          /* byte offset of the frame */
    uint64_t sample;    /* its first sample number */
} frame_ctx;

static nrv_status frame_error(const frame_ctx *f, const char *what) {
    return nrv_fail(NRV_ERR_FORMAT, "flac: frame at byte %zu (sample %llu): %s", f->at,
                    (unsigned long long)f->sample, what);
}

/* The residual of a subframe into s[order .. n). */
static nrv_status read_residual(const frame_ctx *f, bitreader *b, int64_t *s, uint32_t n, unsigned order) {
    const unsigned method = (unsigned)br_bits(b, 2);
    if (method > 1) return frame_error(f, "reserved residual coding method");
    const unsigned param_bits = method == 0 ? 4 : 5, escape = method == 0 ? 15 : 31;
    const unsigned porder = (unsigned)br_bits(b, 4);
    const uint32_t parts = 1u << porder;
    if (n % parts != 0 || (n >> porder) < order)
        return frame_error(f, "residual partition order does not fit the block size");
    const uint32_t per = n >> porder;
    uint32_t i = order;
    for (uint32_t p = 0; p < parts; p++) {
        const uint32_t end = (p + 1) * per;
        const unsigned k = (unsigned)br_bits(b, param_bits);
        if (k == escape) {
            const unsigned raw = (unsigned)br_bits(b, 5);
            for (; i < end; i++) s[i] = raw ? br_sbits(b, raw) : 0;
        } else {
            for (; i < end; i++) {
                uint32_t q;
                if (br_unary(b, FLAC_MAX_QUOTIENT, &q) != 0) return frame_error(f, "residual runs past the frame");
                const uint64_t u = ((uint64_t)q << k) | br_bits(b, k);
                if (u > 0xFFFFFFFFu) return frame_error(f, "a residual exceeds 32 bits");
                s[i] = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            }
        }
        if (br_over(b)) return frame_error(f, "residual runs past the end of the stream");
    }
    return NRV_OK;
}

/* One subframe of n samples of `bits` width into s. */
static nrv_status read_subframe(const frame_ctx *f, bitreader *b, int64_t *s, uint32_t n, unsigned bits) {
    if (br_bits(b, 1) != 0) return frame_error(f, "subframe padding bit is set");
    const unsigned type = (unsigned)br_bits(b, 6);
    unsigned wasted = 0;
    if (br_bits(b, 1)) {
        uint32_t q;
        if (br_unary(b, 32, &q) != 0 || q + 1 >= bits) return frame_error(f, "wasted bits exceed the sample width");
        wasted = q + 1;
        bits -= wasted;
    }
    if (type == 0) { /* CONSTANT */
        const int64_t v = br_sbits(b, bits);
        for (uint32_t i = 0; i < n; i++) s[i] = v;
    } else if (type == 1) { /* VERBATIM */
        for (uint32_t i = 0; i < n; i++) s[i] = br_sbits(b, bits);
    } else if ((type >= 8 && type <= 12) || type >= 32) { /* FIXED or LPC */
        const int fixed = type <= 12;
        const unsigned order = fixed ? type - 8 : type - 31;
        if (order > n) return frame_error(f, "predictor order exceeds the block size");
        for (unsigned i = 0; i < order; i++) s[i] = br_sbits(b, bits);
        int64_t coef[FLAC_MAX_LPC_ORDER];
        int64_t shift = 0;
        if (fixed) {
            /* the fixed predictors are LPC with binomial coefficients and no shift */
            static const int64_t k_fixed[5][4] = {{0}, {1}, {2, -1}, {3, -3, 1}, {4, -6, 4, -1}};
            memcpy(coef, k_fixed[order], sizeof k_fixed[order]);
        } else {
            const unsigned precision = (unsigned)br_bits(b, 4) + 1;
            if (precision == 16) return frame_error(f, "invalid LPC coefficient precision");
            shift = br_sbits(b, 5);
            if (shift < 0) return frame_error(f, "negative LPC shift");
            for (unsigned j = 0; j < order; j++) coef[j] = br_sbits(b, precision);
        }
        NRV_TRY(read_residual(f, b, s, n, order));
        /* |coef| < 2^15, |s| <= 2^32, |residual| <= 2^31, 32 terms: the sum stays below 2^53
         * as long as every sample fits its width, checked before the next one uses it. */
        const int64_t lim = (int64_t)1 << (bits - 1);
        for (uint32_t i = order; i < n; i++) {
            int64_t acc = 0;
            for (unsigned j = 0; j < order; j++) acc += coef[j] * s[i - 1 - j];
            s[i] += asr64(acc, (unsigned)shift);
            if (s[i] < -lim || s[i] >= lim) return frame_error(f, "a predicted sample overflows its width");
        }
    } else {
        return frame_error(f, "reserved subframe type");
    }
    if (br_over(b)) return frame_error(f, "subframe runs past the end of the stream");
    /* (every sample fits the subframe's width here: read at that width, or checked when predicted) */
    if (wasted)
        for (uint32_t i = 0; i < n; i++) s[i] = (int64_t)((uint64_t)s[i] << wasted);
    return NRV_OK;
}

static const uint32_t k_rates[12] = {0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000};
static const unsigned k_widths[8] = {0, 8, 12, 0, 16, 20, 24, 32};

/* Decodes the frame at d->pos into d->frame. */
static nrv_status decode_frame(nrv_flac_t *d) {
    frame_ctx f = {d->pos, d->next_sample};
    const uint8_t *p = d->data + d->pos;
    const size_t avail = d->size - d->pos;
    if (avail < 6 || p[0] != 0xFF || (p[1] & 0xFE) != 0xF8) return frame_error(&f, "no frame sync code");
    bitreader b;
    br_init(&b, p, avail);
    br_bits(&b, 16);
    const unsigned bs_code = (unsigned)br_bits(&b, 4), sr_code = (unsigned)br_bits(&b, 4);
    const unsigned ch_code = (unsigned)br_bits(&b, 4), ss_code = (unsigned)br_bits(&b, 3);
    if (br_bits(&b, 1)) return frame_error(&f, "reserved header bit is set");
    /* The frame or sample number, UTF-8-like (1-7 bytes); only its form is checked. */
    const unsigned lead = (unsigned)br_bits(&b, 8);
    unsigned extra = 0;
    if (lead & 0x80) {
        if ((lead & 0xC0) == 0x80 || lead == 0xFF) return frame_error(&f, "malformed frame number");
        for (unsigned m = 0x40; lead & m; m >>= 1) extra++;
    }
    for (unsigned i = 0; i < extra; i++)
        if ((br_bits(&b, 8) & 0xC0) != 0x80) return frame_error(&f, "malformed frame number");
    uint32_t block;
    if (bs_code == 0) return frame_error(&f, "reserved block size code");
    else if (bs_code == 1) block = 192;
    else if (bs_code <= 5) block = 576u << (bs_code - 2);
    else if (bs_code == 6) block = (uint32_t)br_bits(&b, 8) + 1;
    else if (bs_code == 7) block = (uint32_t)br_bits(&b, 16) + 1;
    else block = 256u << (bs_code - 8);
    uint32_t rate;
    if (sr_code == 0) rate = d->info.sample_rate;
    else if (sr_code < 12) rate = k_rates[sr_code];
    else if (sr_code == 12) rate = (uint32_t)br_bits(&b, 8) * 1000;
    else if (sr_code == 13) rate = (uint32_t)br_bits(&b, 16);
    else if (sr_code == 14) rate = (uint32_t)br_bits(&b, 16) * 10;
    else return frame_error(&f, "invalid sample rate code");
    const size_t header_len = (size_t)(br_tell(&b) / 8);
    if (header_len + 1 > avail) return frame_error(&f, "header cut short by the end of the stream");
    if ((uint8_t)br_bits(&b, 8) != crc8_of(d, p, header_len)) return frame_error(&f, "header CRC-8 mismatch");
    if (ch_code > 10) return frame_error(&f, "reserved channel assignment");
    const unsigned channels = ch_code < 8 ? ch_code + 1 : 2;
    if (channels != d->info.channels) return frame_error(&f, "channel count differs from STREAMINFO");
    const unsigned width = ss_code == 0 ? d->info.bits_per_sample : k_widths[ss_code];
    if (width == 0) return frame_error(&f, "reserved sample size code");
    if (width != d->info.bits_per_sample) return frame_error(&f, "sample size differs from STREAMINFO");
    if (rate != d->info.sample_rate) return frame_error(&f, "sample rate differs from STREAMINFO (not supported)");
    if (block > d->info.max_block) return frame_error(&f, "block size exceeds STREAMINFO's maximum");

    for (unsigned c = 0; c < channels; c++) {
        const int side = (ch_code == 8 && c == 1) || (ch_code == 9 && c == 0) || (ch_code == 10 && c == 1);
        NRV_TRY(read_subframe(&f, &b, d->planar + (size_t)c * d->info.max_block, block, width + (unsigned)side));
    }
    /* zero padding to a byte, then the CRC-16 of everything before it */
    br_bits(&b, (unsigned)((8 - br_tell(&b) % 8) % 8));
    const size_t body = (size_t)(br_tell(&b) / 8);
    if (body + 2 > avail) return frame_error(&f, "frame cut short by the end of the stream");
    if ((uint16_t)br_bits(&b, 16) != crc16_of(d, p, body)) return frame_error(&f, "frame CRC-16 mismatch");

    int64_t *s0 = d->planar, *s1 = d->planar + d->info.max_block;
    if (ch_code == 8) /* left, side */
        for (uint32_t i = 0; i < block; i++) s1[i] = s0[i] - s1[i];
    else if (ch_code == 9) /* side, right */
        for (uint32_t i = 0; i < block; i++) s0[i] += s1[i];
    else if (ch_code == 10) /* mid, side */
        for (uint32_t i = 0; i < block; i++) {
            const int64_t mid = (int64_t)((uint64_t)s0[i] << 1) | (s1[i] & 1), side = s1[i];
            s0[i] = asr64(mid + side, 1);
            s1[i] = asr64(mid - side, 1);
        }
    const int64_t lim = (int64_t)1 << (width - 1);
    for (unsigned c = 0; c < channels && ch_code >= 8; c++)
        for (uint32_t i = 0; i < block; i++)
            if (d->planar[(size_t)c * d->info.max_block + i] < -lim || d->planar[(size_t)c * d->info.max_block + i] >= lim)
                return frame_error(&f, "a decorrelated stereo sample overflows the sample width");
    const unsigned up = 32 - width;
    for (unsigned c = 0; c < channels; c++) {
        const int64_t *s = d->planar + (size_t)c * d->info.max_block;
        for (uint32_t i = 0; i < block; i++) d->frame[(size_t)i * channels + c] = (int32_t)((uint32_t)s[i] << up);
    }
    d->frame_len = block;
    d->frame_used = 0;
    d->pos += body + 2;
    d->next_sample += block;
    return NRV_OK;
}

/* ---------------------------------------------------------------- public API */

static uint32_t be24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }

nrv_status nrv_flac_open(const void *data, size_t size, nrv_flac_t **out) {
    static const char fn[] = "nrv_flac_open";
    NRV_REQUIRE_PTR(fn, out);
    *out = NULL;
    if (size) NRV_REQUIRE_PTR(fn, data);
    const uint8_t *p = data;
    size_t pos = 0;
    if (size >= 10 && memcmp(p, "ID3", 3) == 0) { /* an ID3v2 tag before the stream */
        const size_t tag = ((size_t)(p[6] & 0x7F) << 21) | ((size_t)(p[7] & 0x7F) << 14) |
                           ((size_t)(p[8] & 0x7F) << 7) | (p[9] & 0x7F);
        pos = 10 + tag + ((p[5] & 0x10) ? 10 : 0);
    }
    if (pos > size || size - pos < 4 || memcmp(p + pos, "fLaC", 4) != 0)
        return nrv_fail(NRV_ERR_FORMAT, "%s: not a FLAC stream (no \"fLaC\" marker at byte %zu)", fn, pos);
    pos += 4;
    nrv_flac_info info;
    memset(&info, 0, sizeof info);
    int have_info = 0, last = 0;
    while (!last) {
        if (size - pos < 4) return nrv_fail(NRV_ERR_FORMAT, "%s: metadata cut short at byte %zu", fn, pos);
        last = p[pos] >> 7;
        const unsigned type = p[pos] & 0x7F;
        const size_t len = be24(p + pos + 1);
        pos += 4;
        if (len > size - pos)
            return nrv_fail(NRV_ERR_FORMAT, "%s: metadata block of %zu bytes at byte %zu runs past the end (%zu bytes)",
                            fn, len, pos - 4, size);
        if (type == 127) return nrv_fail(NRV_ERR_FORMAT, "%s: invalid metadata block type 127 at byte %zu", fn, pos - 4);
        if (!have_info && type != 0)
            return nrv_fail(NRV_ERR_FORMAT, "%s: the first metadata block is type %u, not STREAMINFO", fn, type);
        if (type == 0) {
            if (have_info) return nrv_fail(NRV_ERR_FORMAT, "%s: a second STREAMINFO block at byte %zu", fn, pos - 4);
            if (len != 34) return nrv_fail(NRV_ERR_FORMAT, "%s: STREAMINFO is %zu bytes, not 34", fn, len);
            const uint8_t *s = p + pos;
            info.min_block = (uint32_t)s[0] << 8 | s[1];
            info.max_block = (uint32_t)s[2] << 8 | s[3];
            info.sample_rate = (uint32_t)s[10] << 12 | (uint32_t)s[11] << 4 | s[12] >> 4;
            info.channels = ((s[12] >> 1) & 7) + 1;
            info.bits_per_sample = ((uint32_t)(s[12] & 1) << 4 | s[13] >> 4) + 1;
            info.total_frames = (uint64_t)(s[13] & 0x0F) << 32 | (uint64_t)s[14] << 24 | (uint64_t)s[15] << 16 |
                                (uint64_t)s[16] << 8 | s[17];
            memcpy(info.md5, s + 18, 16);
            have_info = 1;
        }
        pos += len;
    }
    if (info.max_block == 0 || info.min_block > info.max_block)
        return nrv_fail(NRV_ERR_FORMAT, "%s: STREAMINFO block sizes %u..%u are invalid", fn, info.min_block,
                        info.max_block);
    if (info.sample_rate == 0 || info.sample_rate > 655350)
        return nrv_fail(NRV_ERR_FORMAT, "%s: STREAMINFO sample rate %u Hz is not an audio rate", fn, info.sample_rate);
    if (info.bits_per_sample < 4)
        return nrv_fail(NRV_ERR_FORMAT, "%s: %u bits per sample (FLAC needs 4-32)", fn, info.bits_per_sample);
    const size_t planar = (size_t)info.max_block * info.channels;
    const size_t bytes = sizeof(nrv_flac_t) + planar * (sizeof(int64_t) + sizeof(int32_t));
    nrv_flac_t *d = nrv_sys_alloc(64, bytes);
    if (!d) return nrv_fail(NRV_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for the decoder", fn, bytes);
    memset(d, 0, sizeof *d);
    d->planar = (int64_t *)(d + 1);
    d->frame = (int32_t *)(d->planar + planar);
    d->data = p;
    d->size = size;
    d->first_frame = d->pos = pos;
    d->info = info;
    crc_tables(d);
    *out = d;
    return NRV_OK;
}

void nrv_flac_free(nrv_flac_t *d) { nrv_sys_free(d); }

nrv_status nrv_flac_info_get(const nrv_flac_t *d, nrv_flac_info *info) {
    NRV_REQUIRE_PTR("nrv_flac_info_get", d);
    NRV_REQUIRE_PTR("nrv_flac_info_get", info);
    *info = d->info;
    return NRV_OK;
}

/* Whether the stream has no further frame: the end of the data, or what is left is not a
 * frame (an ID3v1 tag, padding) once STREAMINFO's total is reached. At the end the decoded
 * count must equal a declared total: a stream cut at a frame boundary is refused too. */
static nrv_status check_end(const nrv_flac_t *d, int *end) {
    const size_t left = d->size - d->pos;
    const uint64_t total = d->info.total_frames;
    const int sync = left >= 2 && d->data[d->pos] == 0xFF && (d->data[d->pos + 1] & 0xFE) == 0xF8;
    *end = left == 0 || (total && d->next_sample >= total && !sync) ||
           (left == 128 && memcmp(d->data + d->pos, "TAG", 3) == 0);
    if (*end && total && d->next_sample != total)
        return nrv_fail(NRV_ERR_FORMAT, "flac: STREAMINFO declares %llu samples but the stream %s after %llu%s",
                        (unsigned long long)total, d->next_sample < total ? "ends" : "holds more, ending",
                        (unsigned long long)d->next_sample, d->next_sample < total ? " (truncated)" : "");
    return NRV_OK;
}

nrv_status nrv_flac_read(nrv_flac_t *d, int32_t *out, size_t capacity, size_t *frames) {
    static const char fn[] = "nrv_flac_read";
    NRV_REQUIRE_PTR(fn, d);
    NRV_REQUIRE_PTR(fn, frames);
    *frames = 0;
    if (capacity) NRV_REQUIRE_PTR(fn, out);
    const size_t ch = d->info.channels;
    size_t done = 0;
    while (done < capacity) {
        if (d->frame_used == d->frame_len) {
            int end = d->ended;
            nrv_status st = end ? NRV_OK : check_end(d, &end);
            if (st == NRV_OK && !end) st = decode_frame(d);
            if (st != NRV_OK) {
                *frames = done; /* what was written before the bad frame stays valid */
                return st;
            }
            if (end) {
                d->ended = 1;
                break;
            }
        }
        size_t take = d->frame_len - d->frame_used;
        if (take > capacity - done) take = capacity - done;
        memcpy(out + done * ch, d->frame + (size_t)d->frame_used * ch, take * ch * sizeof(int32_t));
        d->frame_used += (uint32_t)take;
        done += take;
    }
    *frames = done;
    return NRV_OK;
}

nrv_status nrv_flac_rewind(nrv_flac_t *d) {
    NRV_REQUIRE_PTR("nrv_flac_rewind", d);
    d->pos = d->first_frame;
    d->frame_len = d->frame_used = 0;
    d->next_sample = 0;
    d->ended = 0;
    return NRV_OK;
}
