"""Voice activity for streaming speech: silero VAD run by nerve, and an endpointer on top.

Everything here works on one 16 kHz mono stream, on the model's grid of 512-sample frames
(32 ms), and counts time in integer sample offsets from the start of the stream — never in
accumulated floats — so the results do not depend on how the audio is sliced::

    from nerve.asr.vad import SpeechDetector

    det = SpeechDetector()                 # 16 kHz; the defaults below
    for block in microphone():             # float32 1-D, any length (int16 PCM is scaled)
        for kind, sample in det.accept(block):
            ...                            # ("start", 48_000): speech began at 3.0 s (padded)
    for kind, sample in det.flush():       # end of stream: closes an open segment
        ...

Three layers, each usable on its own:

``VoiceActivity``
    one nerve session of the silero VAD with its LSTM state carried inside the session.
    ``accept(samples) -> probabilities`` (float32, one per newly completed frame; the
    remainder of a frame waits for the next call), ``reset()``. The model is compiled once per
    process and every instance shares that plan (``compiled_plan()``); each instance has its own
    session, so instances are independent streams. An instance is not thread-safe.
``Segmenter``
    a pure state machine on per-frame probabilities (``push(probs) -> events``, ``flush()``),
    no audio, no model.
``SpeechDetector``
    the two together: ``accept(samples) -> events``, ``flush()``, ``reset()``.

Events are ``SpeechEvent(kind, sample)`` named tuples: kind ``"start"`` or ``"end"``, sample
the offset in the stream where the segment starts / ends. They alternate start, end, start...
A segment cut because it reached ``max_segment_s`` appears as an ``end`` followed by a
``start`` at the same sample (the speech goes on; nothing is lost or duplicated). An event
can refer to audio up to ``max_lookback_samples`` before the current stream position (the
start is only known once ``min_speech_ms`` of speech confirmed it; the end once
``end_silence_ms`` of silence passed; a split point is looked for in the last
``split_window_s``): a consumer keeps at least that much audio. Those are also the latencies:
a ``start`` is emitted ``min_speech_ms`` (+ the model's onset delay) after the speech began,
an ``end`` ``end_silence_ms`` after it stopped.

Defaults of ``Segmenter`` (and ``SpeechDetector``), and why:

``threshold=0.5``, ``off_threshold=0.35``
    silero's own defaults (``get_speech_timestamps``: ``threshold=0.5``,
    ``neg_threshold = threshold - 0.15``). A frame >= threshold is speech; inside a segment a
    frame >= off_threshold also keeps the speech going, and the silence that ends it starts at
    the first frame below off_threshold and is reset only by a frame >= threshold (hysteresis).
``min_speech_ms=250``
    silero's ``min_speech_duration_ms``: a candidate becomes a segment (its ``start`` is
    emitted) once it spans this much speech without a break of ``onset_gap_ms``; shorter
    blips (clicks, a cough) never make a segment.
``onset_gap_ms=100``
    silero's ``min_silence_duration_ms``: the break that cancels an unconfirmed candidate.
``end_silence_ms=600``
    the endpoint: trailing silence that ends a confirmed segment. Long enough to bridge the
    pauses between the phrases of one command (0.2-0.4 s), short enough that a voice UI answers
    promptly; a dictation use would raise it. The end (before padding) is silero's: the first
    frame below off_threshold. Silero's probability decays over a few frames after the voice
    stops, slower in noise: on espeak-ng sentences it lags the true end by 50-110 ms after
    digital silence, 90-215 ms in -54 dBFS white noise, 170-340 ms at -46 dBFS (the start is
    within -20..+80 ms).
``pad_ms=200``
    added before the start and after the end (silero pads 30 ms for offline cuts; a streaming
    recogniser profits from more): silero triggers up to ~80 ms after a soft onset (fricatives,
    "h"), and a cut-off final consonant costs more than 0.2 s of extra silence. The start never
    reaches before 0 nor before the previous segment's end; the end never beyond what was seen.
``max_segment_s=20``
    what a recogniser is fed at once stays bounded (Moonshine/Whisper-style encoders are sized
    for <= 30 s). A segment that would grow longer is split at the quietest boundary of the last
    ``split_window_s=4`` seconds — the 64 ms around it with the lowest mean VAD probability plus
    relative log energy (when the energies are known) — and the rest continues as a new segment.

Durations are rounded to whole frames (32 ms); ``pad_ms`` to whole samples. Memory is fixed:
the segmenter keeps the probabilities (and energies) of the last ``split_window_s`` (or
``end_silence_ms``, the longer) only, the voice-activity stage one frame of audio, whatever the
stream's length.

Input audio (``accept``): a 1-D array, float32 in [-1, 1] (float64/float16 are converted to
float32; int16 PCM is scaled by 1/32768); any other dtype, another rank, or a NaN/inf raise
:class:`nerve.InputError`. Only 16 kHz is supported: resample other rates first.
The model file comes from the silero-vad wheel (``pip install --no-deps silero-vad``; it is
located, not imported, since importing it needs torch).
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Union

import numpy as np

from ..errors import InputError, ModelError
from ..session import Plan, Session, compile

__all__ = ["SAMPLE_RATE", "FRAME", "CONTEXT", "SpeechEvent", "VoiceActivity", "Segmenter", "SpeechDetector",
           "silero_vad_path", "compiled_plan"]

SAMPLE_RATE = 16000
FRAME = 512     # samples per VAD frame at 16 kHz (32 ms): the model's step
CONTEXT = 64    # samples of the previous frame the model sees before each frame
_MODEL_FILE = "silero_vad_op18_ifless.onnx"


class SpeechEvent(NamedTuple):
    """A segment boundary: kind ``"start"`` or ``"end"``, at ``sample`` (16 kHz offset)."""

    kind: str
    sample: int

    @property
    def seconds(self) -> float:
        return self.sample / SAMPLE_RATE


# ---------------------------------------------------------------------------------------------
# the model


def silero_vad_path() -> Path:
    """The silero VAD ONNX model shipped in the silero-vad wheel (located, not imported)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the silero VAD model is not installed: pip install --no-deps silero-vad")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / _MODEL_FILE
    if not path.is_file():
        raise ModelError(f"the silero-vad package has no {path.name} (expected {path}); "
                         "reinstall it: pip install --no-deps --force-reinstall silero-vad")
    return path


_PLANS: Dict[str, Plan] = {}
_PLANS_LOCK = threading.Lock()


def compiled_plan(model: Union[str, os.PathLike, None] = None) -> Plan:
    """The plan of the VAD model (default: :func:`silero_vad_path`), compiled once per process
    for one 576-sample (64 + 512) chunk with the LSTM state bound in the session and the sample
    rate fixed at 16 kHz. A ``.nrv`` file is loaded as is."""
    path = Path(model) if model is not None else silero_vad_path()
    key = str(path.resolve())
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
        if plan is None:
            if path.suffix == ".nrv":
                plan = Plan.load(path)
            else:
                opts = dict(dims={"batch": 1, "sequence": CONTEXT + FRAME}, state={"stateN": "state"})
                try:  # sr folded: only the 16 kHz branch of the model's If stays in the plan
                    plan = compile(path, constants={"sr": np.array(SAMPLE_RATE, np.int64)}, **opts)
                except TypeError:  # a nerve without compile(constants=): sr is fed on every run
                    plan = compile(path, **opts)
            _PLANS[key] = plan
    return plan


def _as_audio(samples) -> np.ndarray:
    """samples as a float32 1-D array, or InputError (see the module docstring)."""
    x = samples if type(samples) is np.ndarray else np.asarray(samples)
    if x.ndim != 1:
        raise InputError(f"audio must be a 1-D array of 16 kHz samples, got shape {x.shape}")
    if x.dtype != np.float32:
        if x.dtype == np.int16:
            x = x.astype(np.float32) * np.float32(1 / 32768)
        elif x.dtype in (np.float64, np.float16):
            x = x.astype(np.float32)
        else:
            raise InputError(f"audio must be float32 (or float64/float16, or int16 PCM), got {x.dtype}")
    if x.size and not np.isfinite(x).all():
        raise InputError("audio contains NaN or infinite samples")
    return x


class VoiceActivity:
    """Silero VAD probabilities of a 16 kHz stream, one per 512-sample frame.

    ``model``: None (the silero-vad wheel's model), an ``.onnx``/``.nrv`` path, or a
    :class:`nerve.Plan` built like :func:`compiled_plan` does. ``threads``: see
    :class:`nerve.Session` (1 is right for this small model).
    """

    def __init__(self, model: Union[str, os.PathLike, Plan, None] = None, *, threads: int = 1):
        plan = model if isinstance(model, Plan) else compiled_plan(model)
        self.session = Session(plan, threads=threads)
        # input row: [64 samples of context | the 512 of the frame being filled]
        self._buf = np.zeros((1, CONTEXT + FRAME), np.float32)
        self._row = self._buf[0]
        self._frame = self._row[CONTEXT:]
        self._zero_state = np.zeros((2, 1, 128), np.float32)
        self._feeds = {"input": self._buf}
        if "sr" in self.session.input_names:
            self._feeds["sr"] = np.array(SAMPLE_RATE, np.int64)
        self._fill = 0
        self.frames = 0    # frames completed since the start of the stream
        self.reset()

    @property
    def position(self) -> int:
        """Samples accepted since the start of the stream (or the last reset)."""
        return self.frames * FRAME + self._fill

    @property
    def pending_samples(self) -> int:
        """Samples waiting for their frame to complete (always < 512)."""
        return self._fill

    def reset(self) -> None:
        """Starts a new stream: zero LSTM state, empty context and frame, position 0."""
        self._row[:] = 0.0
        self._fill = 0
        self.frames = 0
        self.session.reset_state()
        self._feeds["state"] = self._zero_state  # the first run sets the state; the session then carries it

    def accept(self, samples, energies: bool = False):
        """Feeds samples (see the module docstring for the accepted arrays); returns the speech
        probability (float32) of each frame completed by them, in order — frame ``i`` of the
        stream covers samples ``[512 i, 512 i + 512)``. With ``energies=True`` returns
        ``(probabilities, energies)``, the energies being each frame's mean square."""
        x = _as_audio(samples)
        n = x.shape[0]
        fill = self._fill
        count = (fill + n) // FRAME
        probs = np.empty(count, np.float32)
        energy = np.empty(count, np.float32) if energies else None
        run = self.session.run
        feeds = self._feeds
        row, frame = self._row, self._frame
        pos = 0
        for j in range(count):
            take = FRAME - fill
            frame[fill:] = x[pos:pos + take]
            pos += take
            fill = 0
            probs[j] = run(feeds)["output"][0, 0]
            if "state" in feeds:
                del feeds["state"]
            if energy is not None:
                energy[j] = np.dot(frame, frame) / FRAME
            row[:CONTEXT] = row[FRAME:]
        rest = n - pos
        if rest:
            frame[fill:fill + rest] = x[pos:]
            fill += rest
        self._fill = fill
        self.frames += count
        return (probs, energy) if energies else probs


# ---------------------------------------------------------------------------------------------
# the endpointer


def _frames(ms: float) -> int:
    return max(1, int(math.floor(ms * SAMPLE_RATE / 1000 / FRAME + 0.5)))


_SILENCE, _PENDING, _SPEECH = 0, 1, 2
_LOG_E_FLOOR = -6.0  # log10 of the smallest frame energy (mean square) told apart: -60 dBFS
_E_FLOOR = np.float32(10.0 ** _LOG_E_FLOOR)


class Segmenter:
    """Speech segments from per-frame VAD probabilities (frame ``i`` = samples
    ``[512 i, 512 i + 512)`` of a 16 kHz stream). See the module docstring for the rules and
    the defaults. Pure: the same probabilities give the same events however they are pushed.
    """

    def __init__(self, *, threshold: float = 0.5, off_threshold: float = 0.35, min_speech_ms: float = 250,
                 onset_gap_ms: float = 100, end_silence_ms: float = 600, pad_ms: float = 200,
                 max_segment_s: float = 20.0, split_window_s: float = 4.0):
        if not 0.0 < off_threshold <= threshold < 1.0:
            raise InputError(f"need 0 < off_threshold <= threshold < 1, got {off_threshold}, {threshold}")
        if min(min_speech_ms, onset_gap_ms, end_silence_ms, split_window_s) <= 0 or pad_ms < 0:
            raise InputError("min_speech_ms, onset_gap_ms, end_silence_ms and split_window_s must be > 0, "
                             "pad_ms >= 0")
        if pad_ms >= end_silence_ms:
            raise InputError(f"pad_ms ({pad_ms}) must be shorter than end_silence_ms ({end_silence_ms})")
        self.threshold = float(threshold)
        self.off_threshold = float(off_threshold)
        self.min_speech_frames = _frames(min_speech_ms)
        self.onset_gap_frames = _frames(onset_gap_ms)
        self.end_silence_frames = _frames(end_silence_ms)
        self.pad = int(round(pad_ms * SAMPLE_RATE / 1000))
        self.max_segment = int(round(max_segment_s * SAMPLE_RATE))
        need = 2 * self.pad + (self.min_speech_frames + self.onset_gap_frames + 4) * FRAME
        if self.max_segment < max(SAMPLE_RATE, need):
            raise InputError(f"max_segment_s={max_segment_s} is too short for the padding and min_speech_ms "
                             f"(need >= {max(SAMPLE_RATE, need) / SAMPLE_RATE:.2f} s)")
        # the split window: never more than half of what a segment may hold, so both parts are long
        self.window = max(2, min(_frames(split_window_s * 1000), (self.max_segment - 2 * self.pad) // (2 * FRAME)))
        # boundary b needs frames b-1 and b; b >= k - window + 1, or >= k - end_silence_frames + 1
        # when the segment's limit falls in a silence run (see _split)
        self._ring = max(self.window, self.end_silence_frames) + 1
        self._p = np.zeros(self._ring, np.float32)
        self._e = np.zeros(self._ring, np.float32)
        self.reset()

    @property
    def max_lookback_samples(self) -> int:
        """How far before the end of the last pushed frame an emitted event can lie."""
        start = (self.min_speech_frames + self.onset_gap_frames - 1) * FRAME + self.pad
        end = self.end_silence_frames * FRAME - self.pad
        return max(start, end, (self._ring - 1) * FRAME)

    @property
    def history_frames(self) -> int:
        """Frames of history kept (fixed: the split window)."""
        return self._ring

    @property
    def in_speech(self) -> bool:
        """Whether a segment is open (its start was emitted, its end not yet)."""
        return self._state == _SPEECH

    @property
    def endpoint_delay_samples(self) -> int:
        """How far past a segment's end the frame lies whose silence fires the end event."""
        return self.end_silence_frames * FRAME - self.pad

    def pending_end(self, after_frames: int) -> Optional[int]:
        """Where the open segment will end if the silence now running goes on until the end
        event fires — once that run is at least ``after_frames`` long — else None. The end
        event then carries exactly this sample, unless speech resumes first (or the segment
        is split at max_segment)."""
        if self._state != _SPEECH or self._quiet < 0 or self.frames - self._quiet < after_frames:
            return None
        return self._quiet * FRAME + self.pad

    def reset(self) -> None:
        """Forgets everything: a new stream starts at frame 0."""
        self.frames = 0            # frames pushed
        self._state = _SILENCE
        self._cand = 0             # first frame of the candidate / segment's speech
        self._start = 0            # sample of the open segment's start (padded / split point)
        self._last = -1            # last speech frame of the candidate / segment
        self._quiet = -1           # first frame of the current silence run, -1 when none
        self._prev_end = 0         # sample where the previous segment ended
        self._has_e = False
        self._p[:] = 0.0
        self._e[:] = _LOG_E_FLOOR

    def push(self, probs, energies=None) -> List[SpeechEvent]:
        """Consumes the probabilities of the next frames (and optionally their energies, which
        sharpen the choice of a split point); returns the events they decide, in order."""
        p_arr = np.asarray(probs, np.float32).reshape(-1)
        if not np.all((p_arr >= 0) & (p_arr <= 1)):  # NaN fails too
            raise InputError("probabilities must lie in [0, 1]")
        e_arr = None
        if energies is not None:
            e_arr = np.asarray(energies, np.float32).reshape(-1)
            if e_arr.shape != p_arr.shape:
                raise InputError(f"{e_arr.size} energies for {p_arr.size} probabilities")
            if not np.all(np.isfinite(e_arr) & (e_arr >= 0)):
                raise InputError("energies must be finite and >= 0")
        return self._advance(p_arr, e_arr)

    def _advance(self, p_arr: np.ndarray, e_arr: Optional[np.ndarray]) -> List[SpeechEvent]:
        """push() on checked arrays (float32, same length), without the checks."""
        events: List[SpeechEvent] = []
        thr, off = self.threshold, self.off_threshold
        ring, pr, er = self._ring, self._p, self._e
        if e_arr is not None:
            self._has_e = True
            e_list = np.log10(np.maximum(e_arr, _E_FLOOR)).tolist()  # log10, floored at -60 dB
        k = self.frames
        for i, p in enumerate(p_arr.tolist()):
            slot = k % ring
            pr[slot] = p
            if e_arr is not None:
                er[slot] = e_list[i]
            state = self._state
            if state == _SILENCE:
                if p >= thr:
                    self._state, self._cand, self._last, self._quiet = _PENDING, k, k, -1
                    if self.min_speech_frames <= 1:
                        self._confirm(k, events)
            else:
                # hysteresis: >= threshold is speech; >= off_threshold is too, unless a silence
                # run already started (only a frame >= threshold breaks it)
                if p >= thr or (p >= off and self._quiet < 0):
                    self._quiet = -1
                    self._last = k
                    if state == _PENDING:
                        if k - self._cand + 1 >= self.min_speech_frames:
                            self._confirm(k, events)
                    elif (k + 1) * FRAME + self.pad - self._start > self.max_segment:
                        self._split(k, events)
                else:
                    if self._quiet < 0 and p < off:
                        self._quiet = k
                    if self._quiet >= 0:
                        run = k - self._quiet + 1
                        if state == _PENDING:
                            if run >= self.onset_gap_frames:
                                self._state = _SILENCE
                        elif run >= self.end_silence_frames:
                            self._end(self._quiet * FRAME + self.pad, events)
            k += 1
        self.frames = k
        return events

    def flush(self, end_sample: Optional[int] = None) -> List[SpeechEvent]:
        """End of stream: closes an open segment (its end clamped to ``end_sample``, default
        the end of the last frame) and resets. An unconfirmed candidate is dropped."""
        limit = self.frames * FRAME if end_sample is None else int(end_sample)
        events: List[SpeechEvent] = []
        if self._state == _SPEECH:
            end = min((self._last + 1) * FRAME + self.pad, limit)
            events.append(SpeechEvent("end", max(end, self._start)))
        self.reset()
        return events

    # transitions ------------------------------------------------------------------------------

    def _confirm(self, k: int, events: List[SpeechEvent]) -> None:
        self._state = _SPEECH
        self._start = max(self._cand * FRAME - self.pad, self._prev_end, 0)
        events.append(SpeechEvent("start", self._start))

    def _end(self, end: int, events: List[SpeechEvent]) -> None:
        self._state = _SILENCE
        self._quiet = -1
        self._prev_end = end
        events.append(SpeechEvent("end", end))

    def _split(self, k: int, events: List[SpeechEvent]) -> None:
        """The segment would outgrow max_segment with frame k: cut it at the quietest boundary
        b (between frames b-1 and b) of the window, the rest [512 b, ...) goes on as a new one."""
        # the cut may be as late as the limit allows; when the limit lies in a pause before k
        # (then hi >= k - end_silence_frames + 1), the cut is at the limit, inside the pause
        hi = min(k, (self._start + self.max_segment) // FRAME)
        lo = min(max(k - self.window + 1, self._start // FRAME + 1), hi)
        b = np.arange(lo, hi + 1)
        prev, cur = (b - 1) % self._ring, b % self._ring
        score = (self._p[prev] + self._p[cur]) * np.float32(0.5)
        if self._has_e:
            # + the pair's log energy relative to the loudest frame of the window: 0 at 60 dB
            # below it (or lower), 1 at its level
            e = np.maximum(self._e[prev], self._e[cur])
            top = float(e.max())
            score = score + np.clip((e - (top - 6.0)) / np.float32(6.0), 0.0, 1.0)
        best = int(b[len(b) - 1 - int(np.argmin(score[::-1]))])  # the latest of equal minima
        cut = best * FRAME
        self._end(cut, events)
        self._state = _SPEECH
        self._start = cut
        events.append(SpeechEvent("start", cut))


# ---------------------------------------------------------------------------------------------
# both


class SpeechDetector:
    """Speech segments of a 16 kHz stream: :class:`VoiceActivity` + :class:`Segmenter`.

    ``sample_rate`` must be 16000 (resample first). ``model``/``threads`` go to
    :class:`VoiceActivity`, the other keywords to :class:`Segmenter`.
    """

    def __init__(self, sample_rate: int = SAMPLE_RATE, *, model: Union[str, os.PathLike, Plan, None] = None,
                 threads: int = 1, **segmenter_options):
        if sample_rate != SAMPLE_RATE:
            raise InputError(f"SpeechDetector runs at {SAMPLE_RATE} Hz, got sample_rate={sample_rate}; "
                             "resample the audio first")
        self.sample_rate = SAMPLE_RATE
        self.segmenter = Segmenter(**segmenter_options)
        self.vad = VoiceActivity(model, threads=threads)

    @property
    def position(self) -> int:
        """Samples accepted since the start of the stream."""
        return self.vad.position

    @property
    def max_lookback_samples(self) -> int:
        """How far before :attr:`position` an event returned by accept() can lie."""
        return self.segmenter.max_lookback_samples + FRAME - 1

    def accept(self, samples) -> List[SpeechEvent]:
        """Feeds audio (1-D float32 in [-1, 1] or int16 PCM; any length); returns the events."""
        probs, energies = self.vad.accept(samples, energies=True)
        if not len(probs):
            return []
        return self.segmenter._advance(probs, energies)  # the model's own numbers: no checks needed

    def flush(self) -> List[SpeechEvent]:
        """End of stream: closes an open segment; the detector then starts a new stream."""
        events = self.segmenter.flush(self.vad.position)
        self.vad.reset()
        return events

    def reset(self) -> None:
        """Drops the stream without events."""
        self.vad.reset()
        self.segmenter.reset()
