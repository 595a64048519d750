/* test_frame.c — the serial-link frame codec (native/src/frame.c): CRC check values, COBS
 * edge cases, round trips at every payload length with every byte value, and a fuzz of the
 * streaming decoder (garbage, truncation, bit flips, oversize and malformed frames) that must
 * never crash, never touch memory outside its buffers (run under ASan and on aarch64 under
 * qemu) and must decode the next good frame after any garbage. Inputs come from the fixed-seed
 * xorshift of nrv_test.h, so a failure reproduces. */
#include "nrv_test.h"

#define MAXP NRV_FRAME_MAX_PAYLOAD
#define CANARY 0xA5

/* A decode result with canaries on both sides of the payload buffer. */
typedef struct {
    uint8_t before[16];
    uint8_t payload[MAXP];
    uint8_t after[16];
    nrv_frame_header hdr;
    size_t len;
} sink;

static void sink_reset(sink *s) {
    memset(s, CANARY, sizeof *s);
}

static int sink_canaries_ok(const sink *s) {
    for (int i = 0; i < 16; i++)
        if (s->before[i] != CANARY || s->after[i] != CANARY) return 0;
    return 1;
}

/* Pushes all n bytes; counts the events of each kind in ev_count[0..8] and keeps the last
 * decoded frame in *s. Checks that consumed always advances and stays within n. */
static int push_all(nrv_frame_decoder *dec, const uint8_t *bytes, size_t n, sink *s, int ev_count[9]) {
    size_t off = 0;
    int frames = 0;
    for (;;) {
        size_t consumed = 0;
        nrv_frame_event ev = NRV_FRAME_NEED_MORE;
        nrv_frame_header hdr;
        size_t len = 0;
        nrv_status st = nrv_frame_decoder_push(dec, bytes + off, n - off, &consumed, &hdr, s->payload, MAXP,
                                               &len, &ev);
        if (st != NRV_OK) {
            NRV_EXPECT(0, "push failed: %s", nrv_status_str(st));
            return -1;
        }
        if (consumed > n - off || (consumed == 0 && n - off > 0)) {
            NRV_EXPECT(0, "consumed %zu of %zu", consumed, n - off);
            return -1;
        }
        off += consumed;
        if ((int)ev < 0 || (int)ev > 8) {
            NRV_EXPECT(0, "event %d out of range", (int)ev);
            return -1;
        }
        if (ev_count) ev_count[ev]++;
        if (ev == NRV_FRAME_DECODED) {
            s->hdr = hdr;
            s->len = len;
            frames++;
        }
        if (ev == NRV_FRAME_NEED_MORE) break;
    }
    return frames;
}

static size_t encode(uint8_t type, uint8_t flags, uint32_t seq, const uint8_t *payload, size_t len, uint8_t *out,
                     size_t cap) {
    nrv_frame_header h = {NRV_FRAME_VERSION, type, flags, seq};
    size_t written = 0;
    nrv_status st = nrv_frame_encode(&h, payload, len, out, cap, &written);
    NRV_EXPECT(st == NRV_OK, "encode len %zu: %s", len, nrv_status_str(st));
    return st == NRV_OK ? written : 0;
}

/* A wire frame from raw fields, CRC computed unless crc_ok is 0 (then it is off by one):
 * how the tests make frames the encoder refuses to make. */
static size_t craft(uint8_t version, uint8_t type, uint16_t len_field, const uint8_t *payload, size_t len, int crc_ok,
                    uint8_t *out, size_t cap) {
    uint8_t raw[NRV_FRAME_MAX_RAW + 64];
    size_t n = 0;
    raw[n++] = version;
    raw[n++] = type;
    raw[n++] = 0;
    raw[n++] = 7;
    raw[n++] = 0;
    raw[n++] = 0;
    raw[n++] = 0;
    raw[n++] = (uint8_t)len_field;
    raw[n++] = (uint8_t)(len_field >> 8);
    if (len > 0) memcpy(raw + n, payload, len);
    n += len;
    uint32_t crc = nrv_crc32c(0, raw, n) + (crc_ok ? 0u : 1u);
    raw[n++] = (uint8_t)crc;
    raw[n++] = (uint8_t)(crc >> 8);
    raw[n++] = (uint8_t)(crc >> 16);
    raw[n++] = (uint8_t)(crc >> 24);
    size_t w = 0;
    out[0] = 0;
    NRV_EXPECT_STATUS(nrv_frame_cobs_encode(raw, n, out + 1, cap - 2, &w), NRV_OK);
    out[w + 1] = 0;
    return w + 2;
}

static void test_crc(void) {
    const uint8_t check[] = "123456789";
    NRV_EXPECT(nrv_crc32c(0, check, 9) == 0xE3069283u, "crc32c check value %08x", nrv_crc32c(0, check, 9));
    NRV_EXPECT(nrv_crc32c(nrv_crc32c(0, check, 4), check + 4, 5) == 0xE3069283u, "chained crc");
    NRV_EXPECT(nrv_crc32c(0, NULL, 0) == 0, "crc of nothing");
    uint8_t zeros[32] = {0};
    /* RFC 3720 (iSCSI) B.4 test vector: 32 bytes of zeros */
    NRV_EXPECT(nrv_crc32c(0, zeros, 32) == 0x8A9136AAu, "32 zeros: %08x", nrv_crc32c(0, zeros, 32));
}

static void test_cobs(void) {
    /* Known encodings, including the 254-byte run boundary. */
    uint8_t out[600], back[600];
    size_t w = 0;
    const uint8_t a[] = {0x00};
    NRV_EXPECT_STATUS(nrv_frame_cobs_encode(a, 1, out, sizeof out, &w), NRV_OK);
    NRV_EXPECT(w == 2 && out[0] == 1 && out[1] == 1, "cobs(00)");
    const uint8_t b[] = {0x11, 0x22, 0x00, 0x33};
    NRV_EXPECT_STATUS(nrv_frame_cobs_encode(b, 4, out, sizeof out, &w), NRV_OK);
    NRV_EXPECT(w == 5 && out[0] == 3 && out[1] == 0x11 && out[2] == 0x22 && out[3] == 2 && out[4] == 0x33,
               "cobs(11 22 00 33)");
    NRV_EXPECT_STATUS(nrv_frame_cobs_encode(NULL, 0, out, sizeof out, &w), NRV_OK);
    NRV_EXPECT(w == 1 && out[0] == 1, "cobs of nothing is 01");

    uint8_t in[600];
    for (size_t n = 0; n <= 520; n++) {
        for (int fill = 0; fill < 3; fill++) {
            for (size_t i = 0; i < n; i++)
                in[i] = fill == 0 ? (uint8_t)(i % 255 + 1) : fill == 1 ? 0 : (uint8_t)nrv_test_u64();
            NRV_EXPECT_STATUS(nrv_frame_cobs_encode(in, n, out, sizeof out, &w), NRV_OK);
            NRV_EXPECT(w <= n + n / 254 + 1, "n %zu stuffed to %zu", n, w);
            NRV_EXPECT(memchr(out, 0, w) == NULL, "n %zu: a zero survived stuffing", n);
            size_t got = 0;
            NRV_EXPECT_STATUS(nrv_frame_cobs_decode(out, w, back, sizeof back, &got), NRV_OK);
            NRV_EXPECT(got == n && memcmp(back, in, n) == 0, "n %zu fill %d round trip (%zu)", n, fill, got);
            /* in place */
            NRV_EXPECT_STATUS(nrv_frame_cobs_decode(out, w, out, w, &got), NRV_OK);
            NRV_EXPECT(got == n && memcmp(out, in, n) == 0, "n %zu in-place round trip", n);
            /* a buffer one short is refused before anything is written */
            if (n > 0) {
                NRV_EXPECT_STATUS(nrv_frame_cobs_encode(in, n, out, sizeof out, &w), NRV_OK);
                memset(back, CANARY, sizeof back);
                NRV_EXPECT_STATUS(nrv_frame_cobs_decode(out, w, back, n - 1, &got), NRV_ERR_INVALID_ARG);
                NRV_EXPECT(back[0] == CANARY, "decode wrote on failure");
                uint8_t small[600];
                memset(small, CANARY, sizeof small);
                NRV_EXPECT_STATUS(nrv_frame_cobs_encode(in, n, small, w - 1, &got), NRV_ERR_INVALID_ARG);
                NRV_EXPECT(small[0] == CANARY, "encode wrote on failure");
            }
        }
    }
    /* invalid stuffing */
    const uint8_t runs_past[] = {0x05, 0x11, 0x22};
    NRV_EXPECT_STATUS(nrv_frame_cobs_decode(runs_past, 3, back, sizeof back, &w), NRV_ERR_FORMAT);
    const uint8_t has_zero[] = {0x03, 0x00, 0x22};
    NRV_EXPECT_STATUS(nrv_frame_cobs_decode(has_zero, 3, back, sizeof back, &w), NRV_ERR_FORMAT);
    NRV_EXPECT_STATUS(nrv_frame_cobs_decode(has_zero, 0, back, sizeof back, &w), NRV_ERR_FORMAT);
    NRV_EXPECT_STATUS(nrv_frame_cobs_decode(NULL, 3, back, sizeof back, &w), NRV_ERR_INVALID_ARG);
}

static void test_encode_args(void) {
    uint8_t out[NRV_FRAME_MAX_ENCODED + 8], payload[MAXP + 1] = {0};
    size_t w = 0;
    nrv_frame_header h = {NRV_FRAME_VERSION, NRV_FRAME_COMMAND, 0, 1};
    NRV_EXPECT(nrv_frame_encoded_size(MAXP) == NRV_FRAME_MAX_ENCODED, "largest frame %zu",
               nrv_frame_encoded_size(MAXP));
    NRV_EXPECT(nrv_frame_encoded_size(MAXP + 1) == 0, "oversize has no size");
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, MAXP + 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_encode(NULL, payload, 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, NULL, 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, NULL, 0, out, sizeof out, &w), NRV_OK);
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, 1, NULL, sizeof out, &w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, 1, out, sizeof out, NULL), NRV_ERR_INVALID_ARG);
    nrv_frame_header bad = h;
    bad.version = 2;
    NRV_EXPECT_STATUS(nrv_frame_encode(&bad, payload, 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    bad = h;
    bad.type = 0;
    NRV_EXPECT_STATUS(nrv_frame_encode(&bad, payload, 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    bad.type = 5;
    NRV_EXPECT_STATUS(nrv_frame_encode(&bad, payload, 1, out, sizeof out, &w), NRV_ERR_INVALID_ARG);
    /* cap one short of the exact size: refused, nothing written */
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, 10, out, sizeof out, &w), NRV_OK);
    size_t exact = w;
    memset(out, CANARY, sizeof out);
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, 10, out, exact - 1, &w), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(out[0] == CANARY, "encode wrote on failure");
    NRV_EXPECT_STATUS(nrv_frame_encode(&h, payload, 10, out, exact, &w), NRV_OK);
    NRV_EXPECT(w == exact && out[0] == 0 && out[w - 1] == 0 && memchr(out + 1, 0, w - 2) == NULL,
               "delimited on both ends, no zero inside");

    nrv_frame_decoder dec;
    NRV_EXPECT_STATUS(nrv_frame_decoder_init(NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_decoder_init(&dec), NRV_OK);
    size_t consumed = 99, len = 0;
    nrv_frame_event ev;
    nrv_frame_header hdr;
    NRV_EXPECT_STATUS(nrv_frame_decoder_push(&dec, out, w, &consumed, &hdr, payload, MAXP - 1, &len, &ev),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT(consumed == 99 && dec.bytes == 0, "a refused push consumed something");
    NRV_EXPECT_STATUS(nrv_frame_decoder_push(&dec, NULL, 1, &consumed, &hdr, payload, MAXP, &len, &ev),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_decoder_push(&dec, NULL, 0, &consumed, &hdr, payload, MAXP, &len, &ev), NRV_OK);
    NRV_EXPECT(ev == NRV_FRAME_NEED_MORE && consumed == 0, "empty push");
    NRV_EXPECT_STATUS(nrv_frame_decoder_push(&dec, out, w, &consumed, &hdr, NULL, MAXP, &len, &ev),
                      NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_frame_decoder_push(&dec, out, w, &consumed, &hdr, payload, MAXP, &len, NULL),
                      NRV_ERR_INVALID_ARG);
}

/* Every payload length 0..256, payloads covering every byte value (zeros included), each
 * frame decoded whole, byte by byte, and all of them back to back in one push stream. */
static void test_round_trip(void) {
    static uint8_t stream[(MAXP + 1) * NRV_FRAME_MAX_ENCODED];
    size_t stream_len = 0;
    uint8_t payload[MAXP], wire[NRV_FRAME_MAX_ENCODED];
    sink s;
    nrv_frame_decoder dec;
    for (size_t len = 0; len <= MAXP; len++) {
        for (size_t i = 0; i < len; i++) payload[i] = (uint8_t)(i * 7 + len); /* hits every value */
        uint32_t seq = (uint32_t)(0xFFFFFF00u + len * 0x01010101u);
        uint8_t type = (uint8_t)(1 + len % 4), flags = (uint8_t)(len & 7);
        size_t w = encode(type, flags, seq, payload, len, wire, sizeof wire);
        NRV_EXPECT(w <= nrv_frame_encoded_size(len), "len %zu: %zu bytes", len, w);
        memcpy(stream + stream_len, wire, w);
        stream_len += w;

        for (int bytewise = 0; bytewise < 2; bytewise++) {
            nrv_frame_decoder_init(&dec);
            sink_reset(&s);
            int frames = 0;
            if (bytewise) {
                for (size_t i = 0; i < w; i++) frames += push_all(&dec, wire + i, 1, &s, NULL);
            } else {
                frames = push_all(&dec, wire, w, &s, NULL);
            }
            NRV_EXPECT(frames == 1 && dec.frames == 1, "len %zu bytewise %d: %d frames", len, bytewise, frames);
            NRV_EXPECT(s.len == len && memcmp(s.payload, payload, len) == 0, "len %zu: payload differs", len);
            NRV_EXPECT(s.hdr.version == 1 && s.hdr.type == type && s.hdr.flags == flags && s.hdr.seq == seq,
                       "len %zu: header differs", len);
            NRV_EXPECT(sink_canaries_ok(&s), "len %zu: canary overwritten", len);
            NRV_EXPECT(dec.bytes == w && dec.dropped_bytes == 0, "len %zu: counters", len);
        }
    }
    /* all 257 frames back to back, fed in random slices */
    nrv_frame_decoder_init(&dec);
    sink_reset(&s);
    size_t off = 0;
    int frames = 0;
    int ev_count[9] = {0};
    while (off < stream_len) {
        size_t take = 1 + (size_t)(nrv_test_u64() % 700);
        if (take > stream_len - off) take = stream_len - off;
        frames += push_all(&dec, stream + off, take, &s, ev_count);
        off += take;
    }
    NRV_EXPECT(frames == MAXP + 1 && ev_count[NRV_FRAME_DECODED] == MAXP + 1, "stream: %d frames", frames);
    NRV_EXPECT(s.len == MAXP && sink_canaries_ok(&s), "stream: last frame");
}

/* One frame of each malformation, each followed by a good frame that must decode. */
static void test_rejections(void) {
    uint8_t wire[1024], payload[MAXP + 8];
    nrv_frame_decoder dec;
    sink s;
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i + 1);
    struct {
        const char *what;
        nrv_frame_event want;
        size_t n;
    } cases[16];
    uint8_t bufs[16][1024];
    int nc = 0;

    cases[nc].what = "wrong version";
    cases[nc].want = NRV_FRAME_BAD_VERSION;
    cases[nc].n = craft(2, NRV_FRAME_COMMAND, 5, payload, 5, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "wrong CRC";
    cases[nc].want = NRV_FRAME_BAD_CRC;
    cases[nc].n = craft(1, NRV_FRAME_COMMAND, 5, payload, 5, 0, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "length field past the data";
    cases[nc].want = NRV_FRAME_BAD_LENGTH;
    cases[nc].n = craft(1, NRV_FRAME_COMMAND, 6, payload, 5, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "length field short of the data";
    cases[nc].want = NRV_FRAME_BAD_LENGTH;
    cases[nc].n = craft(1, NRV_FRAME_COMMAND, 4, payload, 5, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "length 257 (oversize payload, consistent, fits the buffer)";
    cases[nc].want = NRV_FRAME_BAD_LENGTH;
    {
        uint8_t zeros[MAXP + 1];
        memset(zeros, 0, sizeof zeros); /* no run of 254: stuffs to exactly the buffer's 271 */
        cases[nc].n = craft(1, NRV_FRAME_COMMAND, MAXP + 1, zeros, MAXP + 1, 1, bufs[nc], sizeof bufs[nc]);
        NRV_EXPECT(cases[nc].n == NRV_FRAME_MAX_STUFFED + 2, "crafted 257-byte payload: %zu", cases[nc].n);
    }
    nc++;
    cases[nc].what = "length 65535";
    cases[nc].want = NRV_FRAME_BAD_LENGTH;
    cases[nc].n = craft(1, NRV_FRAME_COMMAND, 0xFFFF, payload, 3, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "type 0";
    cases[nc].want = NRV_FRAME_BAD_TYPE;
    cases[nc].n = craft(1, 0, 2, payload, 2, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "type 9";
    cases[nc].want = NRV_FRAME_BAD_TYPE;
    cases[nc].n = craft(1, 9, 2, payload, 2, 1, bufs[nc], sizeof bufs[nc]);
    nc++;
    cases[nc].what = "12 raw bytes";
    cases[nc].want = NRV_FRAME_BAD_SHORT;
    {
        uint8_t raw[12] = {1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 2, 3};
        size_t w = 0;
        bufs[nc][0] = 0;
        nrv_frame_cobs_encode(raw, sizeof raw, bufs[nc] + 1, 1000, &w);
        bufs[nc][w + 1] = 0;
        cases[nc].n = w + 2;
    }
    nc++;
    cases[nc].what = "COBS code running past the end";
    cases[nc].want = NRV_FRAME_BAD_COBS;
    {
        const uint8_t bad[] = {0, 0x20, 1, 2, 3, 0};
        memcpy(bufs[nc], bad, sizeof bad);
        cases[nc].n = sizeof bad;
    }
    nc++;
    cases[nc].what = "272 non-zero bytes (oversize)";
    cases[nc].want = NRV_FRAME_BAD_OVERSIZE;
    bufs[nc][0] = 0;
    memset(bufs[nc] + 1, 0x42, 600);
    bufs[nc][601] = 0;
    cases[nc].n = 602;
    nc++;

    for (int c = 0; c < nc; c++) {
        nrv_frame_decoder_init(&dec);
        sink_reset(&s);
        int ev_count[9] = {0};
        push_all(&dec, bufs[c], cases[c].n, &s, ev_count);
        NRV_EXPECT(ev_count[cases[c].want] == 1 && ev_count[NRV_FRAME_DECODED] == 0,
                   "%s: want one event %d, got decoded %d", cases[c].what, (int)cases[c].want,
                   ev_count[NRV_FRAME_DECODED]);
        uint32_t rejected = dec.bad_oversize + dec.bad_cobs + dec.bad_short + dec.bad_crc + dec.bad_version +
                            dec.bad_length + dec.bad_type;
        NRV_EXPECT(rejected == 1, "%s: %u rejections counted", cases[c].what, rejected);
        NRV_EXPECT(dec.dropped_bytes + 1 == cases[c].n, "%s: dropped %u of %zu", cases[c].what, dec.dropped_bytes,
                   cases[c].n);
        size_t w = encode(NRV_FRAME_ACK, 0, 77, payload, 3, wire, sizeof wire);
        int frames = push_all(&dec, wire, w, &s, NULL);
        NRV_EXPECT(frames == 1 && s.hdr.seq == 77 && s.len == 3, "%s: the next frame was lost", cases[c].what);
        NRV_EXPECT(sink_canaries_ok(&s), "%s: canary", cases[c].what);
    }
    /* the oversize frame is dropped even without a leading delimiter for the good frame:
     * the first delimiter after the overflow ends the skip */
    nrv_frame_decoder_init(&dec);
    memset(wire, 0x33, 800);
    wire[800] = 0;
    size_t w = encode(NRV_FRAME_COMMAND, 0, 5, payload, 1, wire + 801, sizeof wire - 801);
    sink_reset(&s);
    int frames = push_all(&dec, wire, 801 + w, &s, NULL);
    NRV_EXPECT(frames == 1 && dec.bad_oversize == 1 && s.hdr.seq == 5, "after oversize: %d frames", frames);
}

/* Random garbage, truncated frames, flipped bits, spliced frames: the decoder never crashes
 * nor writes outside its outputs, every event is accounted for, and a good frame after the
 * garbage always decodes. */
static void test_fuzz(void) {
    nrv_test_seed(0xF4A3E5EEDull);
    static uint8_t stream[4096];
    uint8_t payload[MAXP], wire[NRV_FRAME_MAX_ENCODED];
    nrv_frame_decoder dec;
    sink s;
    nrv_frame_decoder_init(&dec);
    int rounds = 20000;
    int recovered = 0;
    for (int r = 0; r < rounds; r++) {
        size_t n = 0;
        int kind = (int)(nrv_test_u64() % 6);
        size_t len = (size_t)(nrv_test_u64() % (MAXP + 1));
        for (size_t i = 0; i < len; i++) payload[i] = (uint8_t)nrv_test_u64();
        size_t w = encode(NRV_FRAME_COMMAND, 0, (uint32_t)r, payload, len, wire, sizeof wire);
        switch (kind) {
        case 0: /* random bytes, zeros included */
            n = (size_t)(nrv_test_u64() % 1200);
            for (size_t i = 0; i < n; i++) stream[i] = (uint8_t)nrv_test_u64();
            break;
        case 1: /* random non-zero bytes: one long run, often oversize */
            n = (size_t)(nrv_test_u64() % 1200);
            for (size_t i = 0; i < n; i++) stream[i] = (uint8_t)(1 + nrv_test_u64() % 255);
            break;
        case 2: /* a truncated frame (no closing delimiter: the next frame's leading one ends it) */
            n = w > 2 ? (size_t)(nrv_test_u64() % (w - 1)) : 0;
            memcpy(stream, wire, n);
            break;
        case 3: { /* a frame with 1-4 flipped bits */
            memcpy(stream, wire, w);
            n = w;
            int flips = 1 + (int)(nrv_test_u64() % 4);
            for (int f = 0; f < flips; f++) {
                size_t at = (size_t)(nrv_test_u64() % w);
                stream[at] ^= (uint8_t)(1u << (nrv_test_u64() % 8));
            }
            break;
        }
        case 4: /* a frame with random bytes overwritten */
            memcpy(stream, wire, w);
            n = w;
            for (int f = 0; f < 3; f++) stream[nrv_test_u64() % w] = (uint8_t)nrv_test_u64();
            break;
        default: /* two frames spliced: the head of one, the tail of another */
            n = (size_t)(nrv_test_u64() % w);
            memcpy(stream, wire, n);
            {
                size_t from = (size_t)(nrv_test_u64() % w);
                memcpy(stream + n, wire + from, w - from);
                n += w - from;
            }
            break;
        }
        sink_reset(&s);
        int ev_count[9] = {0};
        /* feed the garbage in random slices */
        size_t off = 0;
        while (off < n) {
            size_t take = 1 + (size_t)(nrv_test_u64() % 300);
            if (take > n - off) take = n - off;
            push_all(&dec, stream + off, take, &s, ev_count);
            off += take;
        }
        NRV_EXPECT(sink_canaries_ok(&s), "round %d kind %d: canary overwritten", r, kind);
        NRV_EXPECT(dec.len <= sizeof dec.buf, "round %d: decoder length %u", r, dec.len);
        if (ev_count[NRV_FRAME_DECODED] > 0) {
            NRV_EXPECT(s.len <= MAXP, "round %d: decoded length %zu", r, s.len);
        }
        /* now a good frame, with its own leading delimiter: it must come through */
        uint8_t tag[4] = {0xDE, 0xAD, (uint8_t)r, (uint8_t)(r >> 8)};
        size_t gw = encode(NRV_FRAME_ACK, 1, 0xC0FFEE00u + (uint32_t)r, tag, 4, wire, sizeof wire);
        sink_reset(&s);
        int frames = push_all(&dec, wire, gw, &s, NULL);
        int ok = frames == 1 && s.hdr.seq == 0xC0FFEE00u + (uint32_t)r && s.len == 4 && memcmp(s.payload, tag, 4) == 0;
        NRV_EXPECT(ok, "round %d kind %d: the good frame after garbage was lost (%d frames)", r, kind, frames);
        recovered += ok;
    }
    uint32_t rejected = dec.bad_oversize + dec.bad_cobs + dec.bad_short + dec.bad_crc + dec.bad_version +
                        dec.bad_length + dec.bad_type;
    printf("fuzz: %d rounds, %d recovered; frames %u, rejected %u (oversize %u cobs %u short %u crc %u version %u "
           "length %u type %u)\n",
           rounds, recovered, dec.frames, rejected, dec.bad_oversize, dec.bad_cobs, dec.bad_short, dec.bad_crc,
           dec.bad_version, dec.bad_length, dec.bad_type);
    NRV_EXPECT(dec.bad_crc > 0 && dec.bad_oversize > 0 && dec.bad_cobs > 0 && dec.bad_short > 0,
               "the fuzz reached every main rejection");
}

/* Every single-bit flip of one frame is detected (CRC-32C catches all 1-3 bit errors at
 * these lengths); a flip that turns a byte into 0 splits the frame, also rejected. */
static void test_every_bit_flip(void) {
    uint8_t payload[64], wire[NRV_FRAME_MAX_ENCODED], bad[NRV_FRAME_MAX_ENCODED];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 37 + 1);
    size_t w = encode(NRV_FRAME_COMMAND, 0, 1234, payload, sizeof payload, wire, sizeof wire);
    nrv_frame_decoder dec;
    sink s;
    int missed = 0;
    for (size_t at = 1; at + 1 < w; at++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, wire, w);
            bad[at] ^= (uint8_t)(1u << bit);
            nrv_frame_decoder_init(&dec);
            sink_reset(&s);
            missed += push_all(&dec, bad, w, &s, NULL) != 0;
        }
    }
    NRV_EXPECT(missed == 0, "%d single-bit flips decoded as good frames", missed);
}

int main(void) {
    test_crc();
    test_cobs();
    test_encode_args();
    test_round_trip();
    test_rejections();
    test_every_bit_flip();
    test_fuzz();
    return nrv_test_summary("test_frame");
}
