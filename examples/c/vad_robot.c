/* vad_robot: the C side of a robot's voice front end, on the installed nerve package.
 *
 *   vad_robot [--probs] [--threads N] VAD.nrv AUDIO.wav|-
 *
 * 1. loads a compiled plan of the silero VAD (made once by the Python side, see README.md);
 * 2. reads a 16 kHz mono 16-bit PCM WAV (a file, or "-" for stdin, e.g. from arecord) and
 *    runs the VAD on it frame by frame as the audio arrives, carrying the model's LSTM state;
 * 3. prints each speech segment as soon as it is closed (and, with --probs, every frame's
 *    speech probability);
 * 4. at the end of the stream encodes the command a front end sends when its audio stops, a
 *    stop, as a serial link frame (docs/SERIAL.md) and prints it as hex.
 *
 * Output (stdout; lines starting with '#' are comments):
 *   prob FRAME SECONDS P          --probs: frame i covers samples [512 i, 512 i + 512)
 *   segment START END START_SAMPLE END_SAMPLE    seconds (3 decimals), then exact samples
 *   frame HEX                     the command frame as it goes on the wire
 * Exit status 0 on success, 1 on any error (a message on stderr), 2 for bad usage.
 *
 * The feed is nerve.asr.vad.VoiceActivity's, so the probabilities are the Python SDK's: each
 * run sees [the last 64 samples of the previous frame | the 512 new ones] (zeros before the
 * first frame); samples are s16 / 32768; a last partial frame is not run.
 *
 * Segments follow nerve.asr.vad.Segmenter's rules and defaults (minus its split of segments
 * longer than 20 s, which a recogniser needs and this example does not):
 *   - a frame with p >= 0.5 is speech; inside a segment a frame with p >= 0.35 also keeps it
 *     going, until a silence run has begun (hysteresis: then only p >= 0.5 ends that run);
 *   - a candidate becomes a segment after 8 frames (250 ms) of speech with no silence run of
 *     3 frames (100 ms) in between; shorter blips (a click, a cough) never make a segment;
 *   - a segment ends after 19 frames (600 ms) of silence; the end is where that silence began;
 *   - each segment is padded by 200 ms on both sides, never before 0, before the previous
 *     segment's end, or (at the end of the stream) past the last sample.
 * Durations are whole frames; comparisons are in double, like Python's floats.
 */
#include <nerve.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SAMPLE_RATE 16000
#define FRAME 512               /* samples per VAD run (32 ms) */
#define CONTEXT 64              /* samples of the previous frame each run sees first */
#define ROW (CONTEXT + FRAME)   /* the model's input: [1, 576] */
#define MAX_IO 8
#define MAX_STATE 4096          /* floats; silero's state is [2, 1, 128] */

#define THRESHOLD 0.5
#define OFF_THRESHOLD 0.35
#define MIN_SPEECH_FRAMES 8     /* 250 ms */
#define ONSET_GAP_FRAMES 3      /* 100 ms */
#define END_SILENCE_FRAMES 19   /* 600 ms */
#define PAD_SAMPLES 3200        /* 200 ms */

static const char *prog = "vad_robot";

/* A failed nerve call: the status's name and the library's message (it says which input,
 * which file, which bound). */
static int nerve_fail(const char *what, nrv_status status)
{
    fprintf(stderr, "%s: %s failed: %s: %s\n", prog, what, nrv_status_str(status), nrv_last_error());
    return 1;
}

/* ------------------------------------------------------------------------ WAV input
 *
 * A RIFF/WAVE reader for exactly one format: 16 kHz, mono, 16-bit PCM (format tag 1, or
 * WAVE_FORMAT_EXTENSIBLE with the PCM subformat). Chunks other than "fmt " and "data" are
 * skipped. A data size of 0x7FFF0000 or more means "length unknown" (what espeak-ng and
 * arecord write when they stream to a pipe): samples are then read to the end of the input.
 * Otherwise the data chunk must be complete. Every length is checked before it is used. */
typedef struct wav_input {
    FILE *f;
    const char *name;
    uint32_t remaining;     /* data bytes still to read (when the size is known) */
    int size_known;
} wav_input;

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int read_exact(FILE *f, void *buf, size_t n) { return fread(buf, 1, n, f) == n; }

/* Skips n bytes by reading them, so that a pipe works as well as a file. */
static int skip_bytes(FILE *f, uint64_t n)
{
    uint8_t junk[512];
    while (n > 0) {
        size_t step = n < sizeof junk ? (size_t)n : sizeof junk;
        if (!read_exact(f, junk, step))
            return 0;
        n -= step;
    }
    return 1;
}

static int wav_fail(const wav_input *w, const char *msg)
{
    fprintf(stderr, "%s: %s: %s\n", prog, w->name, msg);
    return 1;
}

static int wav_open(wav_input *w, const char *path)
{
    uint8_t hdr[12], chunk[8], fmt[64];
    int have_fmt = 0;
    memset(w, 0, sizeof *w);
    w->name = path;
    w->f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!w->f) {
        fprintf(stderr, "%s: cannot open %s\n", prog, path);
        return 1;
    }
    if (!read_exact(w->f, hdr, sizeof hdr) || memcmp(hdr, "RIFF", 4) != 0 || memcmp(hdr + 8, "WAVE", 4) != 0)
        return wav_fail(w, "not a RIFF/WAVE file");
    for (;;) {
        if (!read_exact(w->f, chunk, sizeof chunk))
            return wav_fail(w, "no \"data\" chunk before the end of the file");
        uint32_t size = le32(chunk + 4);
        if (memcmp(chunk, "fmt ", 4) == 0) {
            if (size < 16 || size > sizeof fmt)
                return wav_fail(w, "\"fmt \" chunk of an impossible size");
            if (!read_exact(w->f, fmt, size) || ((size & 1) && !skip_bytes(w->f, 1)))
                return wav_fail(w, "file ends inside the \"fmt \" chunk");
            unsigned tag = le16(fmt), channels = le16(fmt + 2), bits = le16(fmt + 14);
            unsigned long rate = le32(fmt + 4);
            if (tag == 0xFFFE && size >= 26)  /* WAVE_FORMAT_EXTENSIBLE: the subformat says */
                tag = le16(fmt + 24);
            if (tag != 1 || channels != 1 || rate != SAMPLE_RATE || bits != 16 || le16(fmt + 12) != 2) {
                fprintf(stderr,
                        "%s: %s: %s, %u channel(s), %lu Hz, %u-bit: this example reads 16 kHz mono 16-bit "
                        "PCM only (convert with: sox IN -r 16000 -c 1 -b 16 -e signed OUT.wav)\n",
                        prog, path, tag == 1 ? "PCM" : tag == 3 ? "float" : "not PCM", channels, rate, bits);
                return 1;
            }
            have_fmt = 1;
        } else if (memcmp(chunk, "data", 4) == 0) {
            if (!have_fmt)
                return wav_fail(w, "\"data\" chunk before the \"fmt \" chunk");
            w->size_known = size < 0x7FFF0000u;
            if (w->size_known && (size & 1))
                return wav_fail(w, "\"data\" chunk is not a whole number of 16-bit samples");
            w->remaining = size;
            return 0;
        } else if (!skip_bytes(w->f, (uint64_t)size + (size & 1))) {
            return wav_fail(w, "file ends inside a chunk");
        }
    }
}

/* Reads up to max samples; *got receives how many (fewer only at the end). */
static int wav_read(wav_input *w, int16_t *out, size_t max, size_t *got)
{
    uint8_t bytes[2 * FRAME];
    size_t want = max < FRAME ? max : FRAME;
    if (w->size_known && want > w->remaining / 2)
        want = w->remaining / 2;
    size_t n = fread(bytes, 1, 2 * want, w->f);
    if (w->size_known) {
        if (n < 2 * want)
            return wav_fail(w, "truncated: the file ends before its \"data\" chunk does");
        w->remaining -= (uint32_t)n;
    } else if (ferror(w->f)) {
        return wav_fail(w, "read error");
    }
    for (size_t i = 0; i < n / 2; i++)  /* little-endian on every host */
        out[i] = (int16_t)le16(bytes + 2 * i);
    *got = n / 2;
    return 0;
}

/* ------------------------------------------------------------------------ the VAD session */
typedef struct vad {
    nrv_session_t *session;
    int n_in, n_out;
    int in_audio, in_state, in_sr;  /* input indexes; in_sr is -1 when the plan fixed sr */
    int out_prob, out_state;        /* out_state: the state fed back by hand, -1 when bound */
    int state_bound;                /* the plan carries the state itself (a state pair) */
    int first;                      /* no run yet: the state input must be fed (zeros) */
    nrv_tensor feeds[MAX_IO], outputs[MAX_IO], state_feed;
    float row[ROW];
    float state[MAX_STATE];
    int64_t state_count;
    int64_t sr;
} vad;

static int find_io(nrv_session_t *s, int is_output, int count, const char *name, nrv_io_info *info)
{
    for (int i = 0; i < count; i++) {
        nrv_status st = nrv_session_io_info(s, is_output, i, info);
        if (st != NRV_OK) {
            nerve_fail("nrv_session_io_info", st);
            return -2;
        }
        if (strcmp(info->name, name) == 0)
            return i;
    }
    return -1;
}

static int not_vad(const char *path, const char *why)
{
    fprintf(stderr, "%s: %s is not a silero VAD plan as README.md makes it: %s\n", prog, path, why);
    return 1;
}

/* A fixed dimension must equal want; a symbolic one must allow it. */
static int dim_allows(const nrv_io_info *io, int k, int64_t want)
{
    return io->dims[k] == want || (io->dims[k] < 0 && io->dim_bounds[k] >= want);
}

static int vad_open(vad *v, const char *path, int threads)
{
    nrv_io_info io;
    nrv_status st;
    memset(v, 0, sizeof *v);
    v->first = 1;
    v->sr = SAMPLE_RATE;
    if ((st = nrv_session_create_from_file(path, &v->session)) != NRV_OK)
        return nerve_fail("nrv_session_create_from_file", st);
    if ((st = nrv_session_set_threads(v->session, threads)) != NRV_OK)
        return nerve_fail("nrv_session_set_threads", st);
    v->n_in = nrv_session_input_count(v->session);
    v->n_out = nrv_session_output_count(v->session);
    if (v->n_in < 2 || v->n_in > MAX_IO || v->n_out < 1 || v->n_out > MAX_IO)
        return not_vad(path, "unexpected number of inputs or outputs");

    /* input: float [batch, sequence] with room for [1, 576] */
    if ((v->in_audio = find_io(v->session, 0, v->n_in, "input", &io)) < 0)
        return v->in_audio == -2 ? 1 : not_vad(path, "no input named \"input\"");
    if (io.dtype != NRV_F32 || io.rank != 2 || !dim_allows(&io, 0, 1) || !dim_allows(&io, 1, ROW))
        return not_vad(path, "\"input\" must be float32 [1, 576] (compile with dims={\"batch\": 1, \"sequence\": 576})");
    v->feeds[v->in_audio] = (nrv_tensor){.data = v->row, .dtype = NRV_F32, .rank = 2, .dims = {1, ROW}};

    /* state: float, fed zeros on the first run; then carried by the session or fed back */
    if ((v->in_state = find_io(v->session, 0, v->n_in, "state", &io)) < 0)
        return v->in_state == -2 ? 1 : not_vad(path, "no input named \"state\"");
    if (io.dtype != NRV_F32 || io.rank < 1 || io.rank > NRV_MAX_RANK)
        return not_vad(path, "\"state\" must be a float32 tensor");
    nrv_tensor *sf = &v->state_feed;
    *sf = (nrv_tensor){.data = v->state, .dtype = NRV_F32, .rank = io.rank};
    v->state_count = 1;
    for (int k = 0; k < io.rank; k++) {
        sf->dims[k] = io.dims[k] >= 0 ? io.dims[k] : io.dim_bounds[k];  /* batch: its bound, 1 */
        if (sf->dims[k] < 1 || sf->dims[k] > MAX_STATE || (v->state_count *= sf->dims[k]) > MAX_STATE)
            return not_vad(path, "\"state\" has an unexpected shape");
    }
    v->state_bound = io.state_partner >= 0;
    v->feeds[v->in_state] = *sf;

    /* sr: int64, fed 16000 unless the plan fixed it (constants={"sr": 16000}) */
    v->in_sr = find_io(v->session, 0, v->n_in, "sr", &io);
    if (v->in_sr == -2)
        return 1;
    if (v->in_sr >= 0) {
        if (io.dtype != NRV_I64 || io.rank > 1 || (io.rank == 1 && !dim_allows(&io, 0, 1)))
            return not_vad(path, "\"sr\" must be an int64 scalar");
        v->feeds[v->in_sr] = (nrv_tensor){.data = &v->sr, .dtype = NRV_I64, .rank = io.rank, .dims = {1}};
    }
    if (v->n_in != 2 + (v->in_sr >= 0))
        return not_vad(path, "inputs other than input, state and sr");

    if ((v->out_prob = find_io(v->session, 1, v->n_out, "output", &io)) < 0)
        return v->out_prob == -2 ? 1 : not_vad(path, "no output named \"output\"");
    if (io.dtype != NRV_F32)
        return not_vad(path, "\"output\" must be float32");
    v->out_state = -1;
    if (!v->state_bound) {
        if ((v->out_state = find_io(v->session, 1, v->n_out, "stateN", &io)) < 0)
            return v->out_state == -2 ? 1 : not_vad(path, "no output \"stateN\" to feed back as the state");
        if (io.dtype != NRV_F32)
            return not_vad(path, "\"stateN\" must be float32");
    }
    return 0;
}

/* Runs one frame (v->row[CONTEXT..] holds its samples); *prob receives the speech probability. */
static int vad_run(vad *v, float *prob)
{
    if (v->state_bound && !v->first)
        v->feeds[v->in_state] = (nrv_tensor){.data = NULL, .rank = 0};  /* read the carried state */
    nrv_status st = nrv_session_run(v->session, v->feeds, v->n_in, v->outputs, v->n_out);
    if (st != NRV_OK)
        return nerve_fail("nrv_session_run", st);
    v->first = 0;
    const nrv_tensor *p = &v->outputs[v->out_prob];
    if (p->rank < 1 || p->dims[0] < 1 || !p->data) {
        fprintf(stderr, "%s: the plan's \"output\" is empty\n", prog);
        return 1;
    }
    *prob = *(const float *)p->data;
    if (v->out_state >= 0) {  /* no state pair: feed the new state back next time */
        const nrv_tensor *s = &v->outputs[v->out_state];
        int64_t count = 1;
        for (int k = 0; k < s->rank; k++)
            count *= s->dims[k];
        if (count != v->state_count) {
            fprintf(stderr, "%s: \"stateN\" has %lld values, \"state\" takes %lld\n", prog, (long long)count,
                    (long long)v->state_count);
            return 1;
        }
        memcpy(v->state, s->data, (size_t)count * sizeof(float));
    }
    memmove(v->row, v->row + FRAME, CONTEXT * sizeof(float));  /* the next frame's context */
    return 0;
}

/* ------------------------------------------------------------------------ segments */
enum { SILENCE, PENDING, SPEECH };

typedef struct segmenter {
    int state;
    int64_t cand;      /* first speech frame of the candidate / segment */
    int64_t last;      /* last speech frame */
    int64_t quiet;     /* first frame of the current silence run, -1 when none */
    int64_t start;     /* sample where the open segment starts (padded) */
    int64_t prev_end;  /* sample where the previous segment ended */
    int count;         /* segments printed */
} segmenter;

static void print_segment(segmenter *g, int64_t start, int64_t end)
{
    printf("segment %.3f %.3f %lld %lld\n", (double)start / SAMPLE_RATE, (double)end / SAMPLE_RATE,
           (long long)start, (long long)end);
    fflush(stdout);  /* a consumer reading the pipe sees each segment when it is decided */
    g->count++;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Frame k's probability p (float, compared in double as Python compares it). */
static void segmenter_push(segmenter *g, int64_t k, double p)
{
    if (g->state == SILENCE) {
        if (p >= THRESHOLD) {
            g->state = PENDING;
            g->cand = g->last = k;
            g->quiet = -1;
        }
        return;
    }
    if (p >= THRESHOLD || (p >= OFF_THRESHOLD && g->quiet < 0)) {
        g->quiet = -1;
        g->last = k;
        if (g->state == PENDING && k - g->cand + 1 >= MIN_SPEECH_FRAMES) {
            g->state = SPEECH;
            g->start = max64(max64(g->cand * FRAME - PAD_SAMPLES, g->prev_end), 0);
        }
        return;
    }
    if (g->quiet < 0)
        g->quiet = k;
    int64_t run = k - g->quiet + 1;
    if (g->state == PENDING) {
        if (run >= ONSET_GAP_FRAMES)
            g->state = SILENCE;
    } else if (run >= END_SILENCE_FRAMES) {
        int64_t end = g->quiet * FRAME + PAD_SAMPLES;
        print_segment(g, g->start, end);
        g->prev_end = end;
        g->state = SILENCE;
        g->quiet = -1;
    }
}

/* End of stream after `samples` samples: closes an open segment there. */
static void segmenter_flush(segmenter *g, int64_t samples)
{
    if (g->state != SPEECH)
        return;
    int64_t end = (g->last + 1) * FRAME + PAD_SAMPLES;
    if (end > samples)
        end = samples;
    print_segment(g, g->start, max64(end, g->start));
    g->state = SILENCE;
}

/* ------------------------------------------------------------------------ the command frame */

/* Encodes `command` as frame seq 1 (SYN: the first command of this sender), prints it as hex,
 * and decodes it again with the streaming decoder as a robot would. The frame functions do not
 * set nrv_last_error() (they also build for microcontrollers): the status is the whole report. */
static int send_command(const char *command)
{
    nrv_frame_header hdr = {.version = NRV_FRAME_VERSION, .type = NRV_FRAME_COMMAND, .flags = NRV_FRAME_FLAG_SYN,
                            .seq = 1};
    uint8_t wire[NRV_FRAME_MAX_ENCODED], payload[NRV_FRAME_MAX_PAYLOAD];
    size_t len = strlen(command), written = 0, consumed = 0, got = 0;
    nrv_status st = nrv_frame_encode(&hdr, (const uint8_t *)command, len, wire, sizeof wire, &written);
    if (st != NRV_OK) {
        fprintf(stderr, "%s: nrv_frame_encode failed: %s\n", prog, nrv_status_str(st));
        return 1;
    }
    printf("# command %s as frame seq %u (%zu bytes on the wire)\nframe ", command, (unsigned)hdr.seq, written);
    for (size_t i = 0; i < written; i++)
        printf("%02x", wire[i]);
    printf("\n");

    nrv_frame_decoder dec;
    nrv_frame_header back;
    nrv_frame_event event = NRV_FRAME_NEED_MORE;
    if ((st = nrv_frame_decoder_init(&dec)) != NRV_OK ||
        (st = nrv_frame_decoder_push(&dec, wire, written, &consumed, &back, payload, sizeof payload, &got,
                                     &event)) != NRV_OK) {
        fprintf(stderr, "%s: nrv_frame_decoder failed: %s\n", prog, nrv_status_str(st));
        return 1;
    }
    if (event != NRV_FRAME_DECODED || back.seq != hdr.seq || back.type != hdr.type || got != len ||
        memcmp(payload, command, len) != 0) {
        fprintf(stderr, "%s: the frame did not decode to the command sent (event %d)\n", prog, (int)event);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ main */
static double now_s(void)
{
    struct timespec ts;
    return timespec_get(&ts, TIME_UTC) ? (double)ts.tv_sec + ts.tv_nsec * 1e-9 : 0.0;
}

static int usage(void)
{
    fprintf(stderr, "usage: %s [--probs] [--threads N] VAD.nrv AUDIO.wav|-\n", prog);
    return 2;
}

int main(int argc, char **argv)
{
    int probs = 0, threads = 1;
    const char *plan = NULL, *audio = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--probs") == 0) {
            probs = 1;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 1 || t > 256)
                return usage();
            threads = (int)t;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage();
        } else if (!plan) {
            plan = argv[i];
        } else if (!audio) {
            audio = argv[i];
        } else {
            return usage();
        }
    }
    if (!plan || !audio)
        return usage();

    static vad v;  /* static: with its state buffer it is about 20 KiB, more than a stack frame should hold */
    wav_input wav;
    segmenter seg = {.state = SILENCE, .quiet = -1};
    int rc = vad_open(&v, plan, threads);
    if (rc == 0)
        rc = wav_open(&wav, audio);
    if (rc != 0) {
        nrv_session_free(v.session);
        return 1;
    }
    printf("# nerve %s, plan %.16s, state %s\n", nrv_version(), nrv_session_hash(v.session),
           v.state_bound ? "carried by the session" : "fed back");

    int16_t pcm[FRAME];
    int64_t frames = 0, samples = 0;
    size_t got = 0, fill = 0;
    double t0 = now_s(), busy = 0.0;
    nrv_status st;
    while (rc == 0) {
        if ((rc = wav_read(&wav, pcm + fill, FRAME - fill, &got)) != 0)
            break;
        samples += (int64_t)got;
        fill += got;
        if (fill < FRAME) {
            if (got == 0)
                break;  /* end of the audio; a partial frame is not run */
            continue;
        }
        fill = 0;
        if ((st = nrv_audio_to_mono_f32(pcm, NRV_SAMPLE_S16, FRAME, 1, v.row + CONTEXT, NULL)) != NRV_OK) {
            rc = nerve_fail("nrv_audio_to_mono_f32", st);
            break;
        }
        float p;
        double t = now_s();
        if ((rc = vad_run(&v, &p)) != 0)
            break;
        busy += now_s() - t;
        if (probs)
            printf("prob %lld %.3f %.9g\n", (long long)frames, (double)(frames * FRAME) / SAMPLE_RATE, (double)p);
        segmenter_push(&seg, frames, p);
        frames++;
    }
    if (wav.f && wav.f != stdin)
        fclose(wav.f);
    nrv_session_free(v.session);
    if (rc != 0)
        return 1;
    segmenter_flush(&seg, samples);
    printf("# %lld samples (%.2f s), %lld frames, %d segment(s)\n", (long long)samples,
           (double)samples / SAMPLE_RATE, (long long)frames, seg.count);
    fprintf(stderr, "%s: %.2f s of audio, VAD %.1f ms in all (%.3f ms per frame), %.0f ms wall\n", prog,
            (double)samples / SAMPLE_RATE, busy * 1e3, frames ? busy * 1e3 / (double)frames : 0.0,
            (now_s() - t0) * 1e3);

    /* the audio stream ended: a front end must not leave the robot moving on its last command */
    return send_command("{\"action\":\"stop\"}");
}
