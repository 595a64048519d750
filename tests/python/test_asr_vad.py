"""nerve.asr.vad: the silero VAD stage (VoiceActivity), the endpointer (Segmenter) and both
together (SpeechDetector) — slicing invariance, segment boundaries on synthesised speech,
the max-segment split, bounded memory over a long stream, input checks."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np
import pytest

import nerve
from nerve.asr import vad
from nerve.asr.vad import FRAME, SAMPLE_RATE, Segmenter, SpeechDetector, SpeechEvent, VoiceActivity

SR = SAMPLE_RATE
MS = SR // 1000  # samples per millisecond

SENTENCES = [
    "Turn left ninety degrees and then go forward two meters.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Robot, stop. Open the gripper and lift the arm slowly.",
    "Voice activity detection decides which parts of a recording contain speech.",
    "Seven, three, nine, one. Move back fifty centimeters.",
]


def _resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    n = int(round(len(x) * dst / src))
    return np.interp(np.arange(n) * (src / dst), np.arange(len(x)), x).astype(np.float32)


def _espeak(text: str) -> np.ndarray:
    """text spoken by espeak-ng at 16 kHz, trimmed to the speech (espeak adds ~0.3 s of silence
    after it): the first and last samples of the result are the true speech boundaries."""
    raw = subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(raw)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        x = _resample(pcm, w.getframerate(), SR)
    loud = np.flatnonzero(np.abs(x) > 0.01)
    return x[loud[0]:loud[-1] + 1]


@pytest.fixture(scope="module")
def speech():
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed to synthesize the test speech (apt-get install espeak-ng)")
    return [_espeak(s) for s in SENTENCES]


def _silence(seconds: float, rng=None, level: float = 0.002) -> np.ndarray:
    n = int(round(seconds * SR))
    if rng is None:
        return np.zeros(n, np.float32)
    return rng.normal(0, level, n).astype(np.float32)


def _slices(n: int, rng, low: int = 1, high: int = 3000):
    """Random cut points over [0, n): sizes in [low, high], zero-length slices included."""
    cuts = [0]
    while cuts[-1] < n:
        step = int(rng.integers(low, high + 1)) if rng.random() > 0.05 else 0
        cuts.append(min(n, cuts[-1] + step))
    return list(zip(cuts[:-1], cuts[1:]))


def _reference_probs(audio: np.ndarray) -> np.ndarray:
    """The same plan run chunk by chunk the plain way (as examples/vad_stream.py does)."""
    sess = nerve.Session(vad.compiled_plan())
    feeds = {"state": np.zeros((2, 1, 128), np.float32)}
    if "sr" in sess.input_names:
        feeds["sr"] = np.array(SR, np.int64)
    context = np.zeros(64, np.float32)
    out = []
    for start in range(0, len(audio) - FRAME + 1, FRAME):
        new = audio[start:start + FRAME]
        feeds["input"] = np.concatenate([context, new])[None]
        out.append(sess.run(feeds)["output"][0, 0])
        feeds.pop("state", None)
        context = new[-64:]
    return np.array(out, np.float32)


def _segments(events):
    """[(start, end), ...] from an alternating event list."""
    kinds = [e.kind for e in events]
    assert kinds == ["start", "end"] * (len(events) // 2), kinds
    return [(events[i].sample, events[i + 1].sample) for i in range(0, len(events), 2)]


def _detect(audio, rng=None, **options):
    det = SpeechDetector(**options)
    events = []
    if rng is None:
        events += det.accept(audio)
    else:
        for a, b in _slices(len(audio), rng, 1, 8000):
            events += det.accept(audio[a:b])
    return events + det.flush()


# --- (a) probabilities: slicing invariance, the shared plan, parity -----------------------------


@pytest.fixture(scope="module")
def mixed(speech):
    rng = np.random.default_rng(7)
    return np.concatenate([_silence(0.7), speech[0] * 0.7, _silence(0.5, rng, 0.01), speech[4],
                           _silence(0.33)]).astype(np.float32)


def test_probabilities_equal_whole_buffer_run_under_any_slicing(mixed, rng):
    ref = _reference_probs(mixed)
    assert (ref > 0.5).mean() > 0.3 and (ref < 0.2).mean() > 0.1  # the audio has speech and silence
    whole = VoiceActivity()
    assert np.array_equal(whole.accept(mixed), ref)
    assert whole.frames == len(ref) and whole.position == len(mixed) and whole.pending_samples == len(mixed) % FRAME
    for low, high in ((1, 1), (1, 7), (1, 3000), (500, 600)):
        va = VoiceActivity()
        probs = [va.accept(mixed[a:b]) for a, b in _slices(len(mixed), rng, low, high)]
        got = np.concatenate(probs)
        assert got.dtype == np.float32 and np.array_equal(got, ref), (low, high)
    # reset starts a new stream: the same numbers again
    whole.reset()
    assert whole.position == 0 and np.array_equal(whole.accept(mixed), ref)


def test_instances_share_one_plan_and_keep_separate_state(mixed):
    a, b = VoiceActivity(), VoiceActivity()
    assert a.session.plan is b.session.plan is vad.compiled_plan()
    ref = _reference_probs(mixed)
    quiet = np.zeros_like(mixed)
    pa, pb = [], []
    for start in range(0, len(mixed), 1000):  # interleaved: each keeps its own LSTM state
        pa.append(a.accept(mixed[start:start + 1000]))
        pb.append(b.accept(quiet[start:start + 1000]))
    assert np.array_equal(np.concatenate(pa), ref)
    assert np.concatenate(pb).max() < 0.1


def test_probabilities_match_onnxruntime(mixed):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    peer = ort.InferenceSession(str(vad.silero_vad_path()), so, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(64, np.float32)
    want = []
    for start in range(0, len(mixed) - FRAME + 1, FRAME):
        new = mixed[start:start + FRAME]
        p, state = peer.run(None, {"input": np.concatenate([context, new])[None], "state": state,
                                   "sr": np.array(SR, np.int64)})
        want.append(p[0, 0])
        context = new[-64:]
    got = VoiceActivity().accept(mixed)
    # float reassociation in the LSTM, largest where the sigmoid is steepest (p ~ 0.5)
    assert np.max(np.abs(got - np.array(want))) <= 5e-5


def test_events_are_slicing_invariant(speech, rng):
    audio = np.concatenate([_silence(0.9), speech[1], _silence(0.7), speech[2], _silence(0.4)])
    want = _detect(audio)
    assert len(want) >= 2
    for _ in range(3):
        assert _detect(audio, rng) == want
    # and one sample at a time over the start of it
    det = SpeechDetector()
    ones = [e for x in audio[: 3 * SR] for e in det.accept(x[None])]
    det2 = SpeechDetector()
    assert ones == det2.accept(audio[: 3 * SR])


# --- (b) segments on synthesised speech ---------------------------------------------------------


def test_segments_match_true_speech_boundaries(speech, rng):
    u1, u2, u3 = speech[0], speech[4], speech[2]
    parts = [_silence(1.0, rng), u1, _silence(1.2, rng), u2, _silence(0.3, rng), u3, _silence(1.0, rng)]
    audio = np.concatenate(parts)
    bounds, at = [], 0
    for p in parts:
        bounds.append((at, at + len(p)))
        at += len(p)
    truth = [(bounds[1][0], bounds[1][1]), (bounds[3][0], bounds[5][1])]  # 1.2 s apart: two; 0.3 s: one
    events = _detect(audio, rng)
    assert all(isinstance(e, SpeechEvent) and isinstance(e.sample, int) for e in events)
    segs = _segments(events)
    assert len(segs) == 2, [(e.kind, e.seconds) for e in events]
    pad = 200 * MS
    for (start, end), (t0, t1) in zip(segs, truth):
        # padded by pad_ms on both sides, on the 512 grid
        assert (start + pad) % FRAME == 0 and (end - pad) % FRAME == 0
        assert abs(start + pad - t0) <= 150 * MS, (start / SR, t0 / SR)
        # silero's probability decays over a few frames after the voice stops, slower in noise:
        # measured on these sentences the end lags by 50-110 ms after digital silence, by
        # 90-215 ms in this -54 dBFS noise (the end is silero's: the first frame < off_threshold)
        assert -150 * MS <= end - pad - t1 <= 250 * MS, (end / SR, t1 / SR)
        assert start <= t0 and end >= t1  # the padded segment holds all of the speech


def test_short_blip_makes_no_segment():
    probs = np.zeros(100, np.float32)
    probs[10:14] = 0.9   # 128 ms of speech: below min_speech_ms
    probs[40:70] = 0.9   # 960 ms: a segment
    probs[50:52] = 0.4   # between the thresholds: speech goes on (hysteresis)
    seg = Segmenter()
    events = seg.push(probs) + seg.flush()
    pad = 200 * MS
    assert events == [("start", 40 * FRAME - pad), ("end", 70 * FRAME + pad)]


def test_segmenter_rules_exactly():
    seg = Segmenter(pad_ms=0, end_silence_ms=320)  # 10 frames of silence end a segment
    p = np.zeros(80, np.float32)
    p[5:20] = 0.9
    p[20:25] = 0.1          # 5 quiet frames: shorter than the endpoint, one segment
    p[25:30] = 0.9
    p[30:33] = 0.2          # the silence run starts at 30 ...
    p[33:36] = 0.45         # ... between the thresholds it goes on ...
    # ... frames 36..: silence; 10 frames after 30 it ends
    events = []
    for i in range(len(p)):  # one frame at a time
        events += seg.push(p[i:i + 1])
        if i == 39:
            assert events[-1] == ("end", 30 * FRAME) and seg.frames == 40
    assert events == [("start", 5 * FRAME), ("end", 30 * FRAME)]
    # flush closes an open segment at the end of what was seen
    seg = Segmenter()
    assert seg.push(np.full(20, 0.9, np.float32)) == [("start", 0)]
    assert seg.in_speech and seg.flush(20 * FRAME - 100) == [("end", 20 * FRAME - 100)]
    assert not seg.in_speech and seg.frames == 0


@pytest.mark.parametrize("options", [{}, {"max_segment_s": 2.0, "split_window_s": 0.5, "end_silence_ms": 900},
                                     {"pad_ms": 0, "min_speech_ms": 32, "max_segment_s": 1.5}])
def test_segmenter_invariants_on_random_probabilities(rng, options):
    """Bursts and pauses of every length: events alternate, segments never overlap nor exceed
    max_segment_s, no event reaches further back than max_lookback_samples, and pushing the
    frames in any slices gives the same events."""
    n = 30000
    level = np.repeat(rng.random(n // 8) < 0.5, 8)[:n]  # speechy stretches of 256 ms
    flip = rng.random(n) < 0.15
    probs = np.where(level ^ flip, rng.uniform(0.3, 1.0, n), rng.uniform(0.0, 0.45, n)).astype(np.float32)
    energies = (rng.random(n) * np.where(level, 0.1, 0.001)).astype(np.float32)
    seg = Segmenter(**options)
    events = []
    for k in range(n):  # frame by frame: how far back each event lies when it is emitted
        new = seg.push(probs[k:k + 1], energies[k:k + 1])
        for e in new:
            assert 0 <= (k + 1) * FRAME - e.sample <= seg.max_lookback_samples, (e, k)
        events += new
    events += seg.flush(n * FRAME)
    segs = _segments(events)
    assert len(segs) > 20
    splits = 0
    for (s0, e0), (s1, e1) in zip(segs, segs[1:]):
        assert s0 < e0 <= s1 < e1
        splits += e0 == s1
    assert all(0 < e - s <= seg.max_segment for s, e in segs)
    assert splits > 0
    sliced = Segmenter(**options)
    got = [e for a, b in _slices(n, rng, 1, 300) for e in sliced.push(probs[a:b], energies[a:b])]
    assert got + sliced.flush(n * FRAME) == events
    whole = Segmenter(**options)
    assert whole.push(probs, energies) + whole.flush(n * FRAME) == events


# --- (c) the max-segment split --------------------------------------------------------------


def test_long_speech_is_split_at_quiet_points(speech, rng):
    parts, at, gaps = [], 0, []
    i = 0
    while at < 25 * SR:
        parts += [speech[i % len(speech)], _silence(0.1)]
        at += len(parts[-2]) + len(parts[-1])
        gaps.append(at)
        i += 1
    audio = np.concatenate(parts[:-1])
    probs = VoiceActivity().accept(audio)
    events = _detect(audio, rng, max_segment_s=10)
    segs = _segments(events)
    assert len(segs) >= 3, segs
    assert segs[0][0] == 0 and segs[-1][1] == len(audio)  # speech from the first sample to the last
    for (s0, e0), (s1, _) in zip(segs, segs[1:]):
        assert e0 == s1  # split: contiguous, nothing lost, nothing twice
        assert s1 % FRAME == 0
        b = s1 // FRAME  # the cut lies between frames b-1 and b
        around = probs[b - 1:b + 1].mean()
        window = probs[b - 125:b + 1]
        assert around <= 0.2 and around <= np.sort(window)[len(window) // 10] + 0.05, (s1 / SR, around)
    for s, e in segs:
        assert 0 < e - s <= 10 * SR


# --- (d) long silence: no segments, bounded memory ------------------------------------------------


def test_ten_minutes_of_noise_no_segments_bounded_state(rng):
    det = SpeechDetector()
    ring = det.segmenter.history_frames
    buffers = (det.vad._buf.nbytes, det.segmenter._p.nbytes, det.segmenter._e.nbytes)
    fed = 0
    kinds = ("zeros", "white", "brown", "hum")
    brown_state = 0.0
    while fed < 600 * SR:
        n = int(rng.integers(1, 16000))
        kind = kinds[(fed // (15 * SR)) % len(kinds)]
        if kind == "zeros":
            x = np.zeros(n, np.float32)
        elif kind == "white":
            x = rng.normal(0, 0.003, n).astype(np.float32)
        elif kind == "brown":
            walk = brown_state + np.cumsum(rng.normal(0, 0.0005, n))
            walk *= 0.999
            brown_state = float(walk[-1])
            x = np.clip(walk, -0.01, 0.01).astype(np.float32)
        else:
            t = (fed + np.arange(n)) / SR
            x = (0.005 * np.sin(2 * np.pi * 50 * t) + rng.normal(0, 0.001, n)).astype(np.float32)
        assert det.accept(x) == []
        fed += n
        assert det.vad.pending_samples < FRAME
    assert det.position == fed and det.vad.frames == fed // FRAME
    assert det.flush() == []
    assert det.segmenter.history_frames == ring
    assert (det.vad._buf.nbytes, det.segmenter._p.nbytes, det.segmenter._e.nbytes) == buffers
    assert det.max_lookback_samples < 6 * SR


# --- (e) bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    np.zeros((2, 512), np.float32),                      # not 1-D
    np.zeros((), np.float32),
    np.zeros(512, np.int32),                             # only int16 PCM is scaled
    np.zeros(512, np.uint8),
    np.zeros(512, np.complex64),
    np.array([0.0, np.nan, 0.0], np.float32),            # not finite
    np.array([np.inf] * 600, np.float32),
    [1, 2, 3],                                           # a list of ints: int64
])
def test_bad_input_raises_input_error(bad):
    det = SpeechDetector()
    det.accept(np.zeros(700, np.float32))
    with pytest.raises(nerve.InputError):
        det.accept(bad)
    assert det.position == 700  # a refused call changes nothing
    with pytest.raises(nerve.InputError):
        VoiceActivity().accept(bad)


def test_int16_and_float64_are_converted(mixed):
    ref = VoiceActivity().accept(mixed)
    pcm = np.round(np.clip(mixed, -1, 1) * 32767).astype(np.int16)
    as_int = VoiceActivity().accept(pcm)
    assert np.array_equal(as_int, VoiceActivity().accept(pcm.astype(np.float32) / 32768))
    assert np.max(np.abs(as_int - ref)) < 0.02
    assert np.array_equal(VoiceActivity().accept(mixed.astype(np.float64)), ref)
    assert np.array_equal(VoiceActivity().accept(mixed[::-1][::-1]), ref)  # strided views are fine


def test_bad_options_and_missing_model(monkeypatch):
    with pytest.raises(nerve.InputError, match="16000"):
        SpeechDetector(sample_rate=8000)
    with pytest.raises(nerve.InputError):
        Segmenter(threshold=0.3, off_threshold=0.5)
    with pytest.raises(nerve.InputError):
        Segmenter(pad_ms=700)
    with pytest.raises(nerve.InputError):
        Segmenter(max_segment_s=0.2)
    with pytest.raises(nerve.InputError):
        Segmenter().push([0.5, 0.5], energies=[1.0])
    monkeypatch.setattr(vad.importlib.util, "find_spec", lambda name, *a, **k: None)
    with pytest.raises(nerve.ModelError, match="pip install --no-deps silero-vad"):
        vad.silero_vad_path()
