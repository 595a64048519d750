/* frame.c — the serial-link frame codec: COBS byte stuffing, CRC-32C, a streaming decoder.
 *
 * Layout, rules and the reasons for them: docs/SERIAL.md and the "serial link frames"
 * section of nerve.h. This file stands alone so it can be copied onto a microcontroller
 * next to nerve.h: no allocation, no libc beyond memcpy/memset, nothing from the rest of
 * libnerve (so, unlike the rest of the library, it leaves nrv_last_error() alone: the
 * returned status and the decoder's event say what was wrong). Every buffer access is
 * checked against the length it came with before it happens.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nerve.h"

/* The sizes nerve.h spells as literals (cffi cannot read #defines) must agree with the enum. */
_Static_assert(sizeof(((nrv_frame_decoder *)0)->buf) == NRV_FRAME_MAX_STUFFED, "decoder buffer size");
_Static_assert(NRV_FRAME_MAX_RAW == NRV_FRAME_HEADER_SIZE + NRV_FRAME_MAX_PAYLOAD + NRV_FRAME_CRC_SIZE,
               "raw frame size");
_Static_assert(NRV_FRAME_MAX_STUFFED == NRV_FRAME_MAX_RAW + NRV_FRAME_MAX_RAW / 254 + 1, "COBS bound");
_Static_assert(NRV_FRAME_MAX_ENCODED == NRV_FRAME_MAX_STUFFED + 2, "two delimiters");

/* ---------------------------------------------------------------- CRC-32C (Castagnoli) */

/* Reflected polynomial 0x82F63B78, one nibble at a time: a 64-byte table is the
 * compromise between a bitwise loop (slow) and the usual 1 KiB byte table (too big for
 * small parts). Entry n is the CRC register after shifting nibble n through 4 steps. */
static const uint32_t crc32c_nibble[16] = {
    0x00000000u, 0x105EC76Fu, 0x20BD8EDEu, 0x30E349B1u, 0x417B1DBCu, 0x5125DAD3u, 0x61C69362u, 0x7198540Du,
    0x82F63B78u, 0x92A8FC17u, 0xA24BB5A6u, 0xB21572C9u, 0xC38D26C4u, 0xD3D3E1ABu, 0xE330A81Au, 0xF36E6F75u,
};

uint32_t nrv_crc32c(uint32_t crc, const uint8_t *data, size_t n) {
    uint32_t c = ~crc; /* the pre/post inversion lives here so calls chain */
    if (data == NULL) return crc;
    for (size_t i = 0; i < n; i++) {
        c ^= data[i];
        c = (c >> 4) ^ crc32c_nibble[c & 15u];
        c = (c >> 4) ^ crc32c_nibble[c & 15u];
    }
    return ~c;
}

/* ---------------------------------------------------------------- COBS */

/* Stuffed size of n bytes: one code byte per run of up to 254 non-zero bytes, where a zero
 * (or the virtual zero after the data) ends a run. Counted exactly so the encoder can refuse
 * a small buffer before writing anything. */
static size_t cobs_stuffed_size(const uint8_t *in, size_t n) {
    size_t size = 1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == 0) {
            size += 1;
            run = 0;
        } else {
            size += 1;
            if (++run == 254) {
                size += 1;
                run = 0;
            }
        }
    }
    return size;
}

/* Writes exactly cobs_stuffed_size(in, n) bytes; the caller has checked the room. */
static void cobs_stuff(const uint8_t *in, size_t n, uint8_t *out) {
    size_t code_at = 0;
    size_t w = 1;
    uint8_t code = 1;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == 0) {
            out[code_at] = code;
            code_at = w++;
            code = 1;
        } else {
            out[w++] = in[i];
            if (++code == 0xFF) {
                out[code_at] = code;
                code_at = w++;
                code = 1;
            }
        }
    }
    out[code_at] = code;
}

/* Checks a stuffed block and gives its decoded size: 0 if it is not valid COBS (empty,
 * containing a zero, or a code byte that claims more bytes than remain), else 1. */
static int cobs_unstuffed_size(const uint8_t *in, size_t n, size_t *size) {
    size_t i = 0;
    size_t total = 0;
    if (n == 0) return 0;
    while (i < n) {
        uint8_t code = in[i++];
        if (code == 0) return 0;
        size_t run = (size_t)code - 1;
        if (run > n - i) return 0;
        for (size_t k = 0; k < run; k++) {
            if (in[i + k] == 0) return 0;
        }
        i += run;
        total += run;
        if (code != 0xFF && i < n) total += 1; /* the zero the code stood for */
    }
    *size = total;
    return 1;
}

/* Unstuffs a block cobs_unstuffed_size accepted. out may equal in: the write index never
 * passes the read index (each run's code byte is dropped before its zero is written). */
static size_t cobs_unstuff(const uint8_t *in, size_t n, uint8_t *out) {
    size_t i = 0;
    size_t w = 0;
    while (i < n) {
        uint8_t code = in[i++];
        size_t run = (size_t)code - 1;
        for (size_t k = 0; k < run; k++) out[w + k] = in[i + k]; /* forward copy: w <= i */
        i += run;
        w += run;
        if (code != 0xFF && i < n) out[w++] = 0;
    }
    return w;
}

nrv_status nrv_frame_cobs_encode(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *written) {
    if ((in == NULL && n > 0) || out == NULL || written == NULL) return NRV_ERR_INVALID_ARG;
    if (n > SIZE_MAX / 2) return NRV_ERR_OVERFLOW;
    size_t need = cobs_stuffed_size(in, n);
    if (cap < need) return NRV_ERR_INVALID_ARG;
    cobs_stuff(in, n, out);
    *written = need;
    return NRV_OK;
}

nrv_status nrv_frame_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *written) {
    if ((in == NULL && n > 0) || out == NULL || written == NULL) return NRV_ERR_INVALID_ARG;
    size_t size = 0;
    if (!cobs_unstuffed_size(in, n, &size)) return NRV_ERR_FORMAT;
    if (cap < size) return NRV_ERR_INVALID_ARG;
    *written = cobs_unstuff(in, n, out);
    return NRV_OK;
}

/* ---------------------------------------------------------------- frames */

static void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t nrv_frame_encoded_size(size_t payload_len) {
    if (payload_len > NRV_FRAME_MAX_PAYLOAD) return 0;
    size_t raw = NRV_FRAME_HEADER_SIZE + payload_len + NRV_FRAME_CRC_SIZE;
    return 2 + raw + raw / 254 + 1;
}

nrv_status nrv_frame_encode(const nrv_frame_header *hdr, const uint8_t *payload, size_t len, uint8_t *out,
                            size_t cap, size_t *written) {
    if (hdr == NULL || (payload == NULL && len > 0) || out == NULL || written == NULL) return NRV_ERR_INVALID_ARG;
    if (hdr->version != NRV_FRAME_VERSION) return NRV_ERR_INVALID_ARG;
    if (hdr->type < NRV_FRAME_COMMAND || hdr->type > NRV_FRAME_HEARTBEAT) return NRV_ERR_INVALID_ARG;
    if (len > NRV_FRAME_MAX_PAYLOAD) return NRV_ERR_INVALID_ARG;

    /* The raw frame is built on the stack first: COBS needs it contiguous, and its exact
     * stuffed size must be known before the first byte of out is written. */
    uint8_t raw[NRV_FRAME_MAX_RAW];
    raw[0] = hdr->version;
    raw[1] = hdr->type;
    raw[2] = hdr->flags;
    put_u32le(raw + 3, hdr->seq);
    raw[7] = (uint8_t)len;
    raw[8] = (uint8_t)(len >> 8);
    if (len > 0) memcpy(raw + NRV_FRAME_HEADER_SIZE, payload, len);
    size_t body = NRV_FRAME_HEADER_SIZE + len;
    put_u32le(raw + body, nrv_crc32c(0, raw, body));
    size_t raw_len = body + NRV_FRAME_CRC_SIZE;

    size_t need = cobs_stuffed_size(raw, raw_len) + 2;
    if (cap < need) return NRV_ERR_INVALID_ARG;
    /* A leading delimiter ends whatever noise or partial frame the line carried before, so
     * garbage can cost at most the frame it touches, never the next good one too. */
    out[0] = 0;
    cobs_stuff(raw, raw_len, out + 1);
    out[need - 1] = 0;
    *written = need;
    return NRV_OK;
}

nrv_status nrv_frame_decoder_init(nrv_frame_decoder *dec) {
    if (dec == NULL) return NRV_ERR_INVALID_ARG;
    memset(dec, 0, sizeof *dec);
    return NRV_OK;
}

/* Checks the stuffed bytes collected in dec->buf (one frame, delimiters excluded) and, if
 * they are a good frame, writes it out. Counts the outcome; leaves the buffer empty. */
static nrv_frame_event decoder_finish(nrv_frame_decoder *dec, nrv_frame_header *hdr, uint8_t *payload,
                                      size_t *payload_len) {
    size_t stuffed = dec->len;
    dec->len = 0;
    size_t size = 0;
    nrv_frame_event ev;
    if (!cobs_unstuffed_size(dec->buf, stuffed, &size)) {
        ev = NRV_FRAME_BAD_COBS;
        dec->bad_cobs++;
    } else {
        uint8_t *raw = dec->buf; /* unstuffed in place */
        size_t n = cobs_unstuff(dec->buf, stuffed, raw);
        if (n < NRV_FRAME_HEADER_SIZE + NRV_FRAME_CRC_SIZE) {
            ev = NRV_FRAME_BAD_SHORT;
            dec->bad_short++;
        } else if (nrv_crc32c(0, raw, n - NRV_FRAME_CRC_SIZE) != get_u32le(raw + n - NRV_FRAME_CRC_SIZE)) {
            /* CRC before version: noise that hit the version byte is noise, not a peer
             * speaking another version. */
            ev = NRV_FRAME_BAD_CRC;
            dec->bad_crc++;
        } else if (raw[0] != NRV_FRAME_VERSION) {
            ev = NRV_FRAME_BAD_VERSION;
            dec->bad_version++;
        } else {
            size_t len = (size_t)raw[7] | (size_t)raw[8] << 8;
            if (len > NRV_FRAME_MAX_PAYLOAD || len != n - NRV_FRAME_HEADER_SIZE - NRV_FRAME_CRC_SIZE) {
                ev = NRV_FRAME_BAD_LENGTH;
                dec->bad_length++;
            } else if (raw[1] < NRV_FRAME_COMMAND || raw[1] > NRV_FRAME_HEARTBEAT) {
                ev = NRV_FRAME_BAD_TYPE;
                dec->bad_type++;
            } else {
                hdr->version = raw[0];
                hdr->type = raw[1];
                hdr->flags = raw[2];
                hdr->seq = get_u32le(raw + 3);
                if (len > 0) memcpy(payload, raw + NRV_FRAME_HEADER_SIZE, len);
                *payload_len = len;
                dec->frames++;
                return NRV_FRAME_DECODED;
            }
        }
    }
    dec->dropped_bytes += (uint32_t)stuffed + 1; /* + its delimiter */
    return ev;
}

nrv_status nrv_frame_decoder_push(nrv_frame_decoder *dec, const uint8_t *bytes, size_t n, size_t *consumed,
                                  nrv_frame_header *hdr, uint8_t *payload, size_t payload_cap,
                                  size_t *payload_len, nrv_frame_event *event) {
    if (dec == NULL || (bytes == NULL && n > 0) || consumed == NULL || hdr == NULL || payload == NULL ||
        payload_len == NULL || event == NULL)
        return NRV_ERR_INVALID_ARG;
    /* Any good frame may carry the largest payload: a smaller buffer could not take it. */
    if (payload_cap < NRV_FRAME_MAX_PAYLOAD) return NRV_ERR_INVALID_ARG;
    /* A corrupted struct (len beyond the buffer) is started afresh rather than trusted. */
    if (dec->len > sizeof dec->buf) dec->len = 0;

    for (size_t i = 0; i < n; i++) {
        uint8_t b = bytes[i];
        dec->bytes++;
        if (b == 0) {
            if (dec->dropping) { /* the end of an oversize frame: its event was given already */
                dec->dropping = 0;
                dec->dropped_bytes++;
                continue;
            }
            if (dec->len == 0) continue; /* back-to-back delimiters: nothing between them */
            *consumed = i + 1;
            *event = decoder_finish(dec, hdr, payload, payload_len);
            return NRV_OK;
        }
        if (dec->dropping) {
            dec->dropped_bytes++;
            continue;
        }
        if (dec->len == sizeof dec->buf) {
            /* Longer than any valid frame: reported now (the caller can nack early) and
             * everything up to the next delimiter is skipped. */
            dec->dropping = 1;
            dec->bad_oversize++;
            dec->dropped_bytes += (uint32_t)dec->len + 1;
            dec->len = 0;
            *consumed = i + 1;
            *event = NRV_FRAME_BAD_OVERSIZE;
            return NRV_OK;
        }
        dec->buf[dec->len++] = b;
    }
    *consumed = n;
    *event = NRV_FRAME_NEED_MORE;
    return NRV_OK;
}
