/* test_flac.c — the FLAC decoder (nrv_flac_*) on streams libFLAC wrote (tests/native/data,
 * made by make_flac_data.py, which records what libFLAC decodes them to), then on every kind
 * of damage: each byte flipped in turn (at a stride), every truncation length (at a stride).
 * A damaged stream must give NRV_ERR_FORMAT or the same samples, never others; run under
 * ASan/UBSan (make test-asan) and qemu-aarch64 this is also the decoder's memory-safety check.
 *
 * Usage: test_flac DATA_DIR */
#include "nrv_test.h"

typedef struct {
    const char *file;
    uint32_t rate, channels, bits;
    uint64_t frames, fnv;
} flac_case;

/* From make_flac_data.py (libFLAC 1.4.2's decode of the committed files). */
static const flac_case k_cases[] = {
    {"stereo16_lpc.flac", 44100, 2, 16, 4410, 0x7E00BAD721156D03ull},
    {"mono24_mixed.flac", 48000, 1, 24, 3000, 0x4083EA04B24765FDull},
};

static uint64_t fnv1a64(const int32_t *v, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)v[i];
        for (int b = 0; b < 4; b++) h = (h ^ ((u >> (8 * b)) & 0xFF)) * 0x100000001B3ull;
    }
    return h;
}

static uint8_t *read_file(const char *dir, const char *name, size_t *size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Decodes data whole, in reads of `chunk` frames, into out (room for cap samples). Returns the
 * status; *frames the frames written. */
static nrv_status decode(const uint8_t *data, size_t size, size_t chunk, int32_t *out, size_t cap, size_t *frames,
                         nrv_flac_info *info) {
    nrv_flac_t *d = NULL;
    *frames = 0;
    nrv_status st = nrv_flac_open(data, size, &d);
    if (st != NRV_OK) return st;
    nrv_flac_info_get(d, info);
    for (;;) {
        size_t got = 0;
        const size_t room = cap / info->channels - *frames;
        if (room == 0) { /* more than the clean stream held: stop, the caller compares */
            st = NRV_OK;
            break;
        }
        st = nrv_flac_read(d, out + *frames * info->channels, chunk < room ? chunk : room, &got);
        *frames += got;
        if (st != NRV_OK || got == 0) break;
    }
    nrv_flac_free(d);
    return st;
}

static void check_case(const char *dir, const flac_case *c) {
    size_t size = 0;
    uint8_t *data = read_file(dir, c->file, &size);
    NRV_EXPECT(data != NULL, "cannot read %s/%s", dir, c->file);
    if (!data) return;
    const size_t n = (size_t)c->frames * c->channels;
    int32_t *ref = malloc(n * sizeof *ref), *got = malloc((n + 64) * sizeof *got);
    nrv_flac_info info;
    size_t frames = 0;

    /* clean: libFLAC's samples, whatever the read size */
    const size_t chunks[] = {1, 191, 4096, 100000};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        NRV_EXPECT_STATUS(decode(data, size, chunks[k], k ? got : ref, n, &frames, &info), NRV_OK);
        NRV_EXPECT(frames == c->frames, "%s: %zu frames, want %llu", c->file, frames, (unsigned long long)c->frames);
        NRV_EXPECT(fnv1a64(k ? got : ref, n) == c->fnv, "%s: samples differ from libFLAC's (read size %zu)", c->file,
                   chunks[k]);
    }
    NRV_EXPECT(info.sample_rate == c->rate && info.channels == c->channels && info.bits_per_sample == c->bits &&
                   info.total_frames == c->frames,
               "%s: info %u Hz %u ch %u bits %llu frames", c->file, info.sample_rate, info.channels,
               info.bits_per_sample, (unsigned long long)info.total_frames);

    /* rewind gives the stream again */
    nrv_flac_t *d = NULL;
    NRV_EXPECT_STATUS(nrv_flac_open(data, size, &d), NRV_OK);
    size_t a = 0, b = 0;
    nrv_flac_read(d, got, 1000, &a);
    NRV_EXPECT_STATUS(nrv_flac_rewind(d), NRV_OK);
    nrv_flac_read(d, got, c->frames, &b);
    NRV_EXPECT(a == 1000 && b == c->frames && fnv1a64(got, n) == c->fnv, "%s: rewind", c->file);
    nrv_flac_free(d);

    /* damage: a copy in a buffer of exactly its size, so ASan sees any read past it */
    int wrong = 0, refused = 0, other = 0;
    for (size_t pos = 0; pos < size; pos += (pos < 64 ? 1 : 5)) {
        uint8_t *bad = malloc(size);
        memcpy(bad, data, size);
        bad[pos] ^= (uint8_t)(1u << (pos % 8));
        const nrv_status st = decode(bad, size, 777, got, n + 64, &frames, &info);
        if (st == NRV_ERR_FORMAT) refused++;
        else if (st != NRV_OK) other++;
        else if (frames != c->frames || info.channels != c->channels || fnv1a64(got, n) != c->fnv) wrong++;
        free(bad);
    }
    NRV_EXPECT(wrong == 0 && other == 0, "%s: %d flipped bytes gave other samples silently, %d another status",
               c->file, wrong, other);
    NRV_EXPECT(refused > 0, "%s: no flipped byte was refused", c->file);
    for (size_t cut = 0; cut < size; cut += (cut < 64 ? 1 : 13)) {
        uint8_t *bad = malloc(cut ? cut : 1);
        memcpy(bad, data, cut);
        NRV_EXPECT_STATUS(decode(bad, cut, 4096, got, n + 64, &frames, &info), NRV_ERR_FORMAT);
        free(bad);
    }
    free(ref);
    free(got);
    free(data);
}

static void check_arguments(void) {
    nrv_flac_t *d = (nrv_flac_t *)1;
    NRV_EXPECT_STATUS(nrv_flac_open(NULL, 4, &d), NRV_ERR_INVALID_ARG);
    NRV_EXPECT(d == NULL, "out not cleared");
    NRV_EXPECT_STATUS(nrv_flac_open("fLaC", 4, NULL), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_flac_open("RIFF....WAVE", 12, &d), NRV_ERR_FORMAT);
    NRV_EXPECT(strstr(nrv_last_error(), "not a FLAC stream") != NULL, "message: %s", nrv_last_error());
    size_t got = 0;
    NRV_EXPECT_STATUS(nrv_flac_read(NULL, NULL, 0, &got), NRV_ERR_INVALID_ARG);
    NRV_EXPECT_STATUS(nrv_flac_info_get(NULL, NULL), NRV_ERR_INVALID_ARG);
    nrv_flac_free(NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_flac DATA_DIR\n");
        return 2;
    }
    check_arguments();
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) check_case(argv[1], &k_cases[i]);
    return nrv_test_summary("test_flac");
}
