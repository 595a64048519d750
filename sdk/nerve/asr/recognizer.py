"""Streaming speech recognition: audio in any rate/format -> 16 kHz -> VAD segments -> Moonshine.

    rec = nerve.asr.Recognizer()                       # compiles/loads the model once per process
    stream = rec.create_stream(sample_rate=48000)      # per audio source; one per thread
    for block in source:
        for ev in stream.accept_waveform(block):       # partials while speech goes on, finals
            print(ev.type, ev.text, ev.start_s, ev.end_s)
    for ev in stream.finish(): ...                     # flush at end of stream
    rec.transcribe("file.wav")                         # the finals of a whole file

Each stage is one call on buffers the next reads: the resampler (C, state carried across
calls) -> the stream's audio ring (a StreamingPool of 512-sample chunks, allocated once) ->
the speech detector (silero VAD run by nerve + an endpointer) -> the recogniser, which reads
a segment's samples out of the ring.

Ring policy: the ring holds ``max_segment_s`` plus the detector's look-back and padding. A
segment never outgrows it (the detector splits at ``max_segment_s``), so in normal operation
nothing is dropped; if a caller feeds audio faster than segments can be closed (a detector
configured past the ring), the oldest chunk is dropped and ``Stream.dropped_samples`` counts
it — memory never grows.

Partials: while a segment is open, every ``partial_ms`` of stream time the segment so far is
re-recognised (greedy) and a "partial" event emitted; ``partial_ms=0`` gives finals only.
Finals do not depend on how the audio is sliced; partials do (at most one per 0.512 s piece
of a call). A partial re-runs the encoder on the whole open segment, so its cost grows with
the segment: the period stretches to twice the last partial's compute time, which keeps
partials under half of real time on a long utterance.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from .. import memory
from ..audio import Resampler, iter_audio, to_mono_float32
from ..errors import InputError
from ..precision import parse as parse_precision
from .moonshine import SAMPLE_RATE, MoonshineModel
from .tokenizer import numbers_to_digits, numbers_to_words
from .vad import FRAME, SpeechDetector
from .vocabulary import Vocabulary

__all__ = ["Recognizer", "Stream", "Event", "Token"]

_WAV_BLOCK_S = 10  # a file is read in blocks of ~10 s (never whole)
_PIECE = 16 * FRAME  # audio is taken in pieces of at most 0.512 s (bounds the ring)
_MODELS: Dict[tuple, MoonshineModel] = {}
_MODELS_LOCK = threading.Lock()


def shared_model(name: str, precision: str = "fp32", hessians=None) -> MoonshineModel:
    """One MoonshineModel (compiled plans, shared weights) per name and precision per process
    (and per calibration: hessians from nerve.asr.calibrate, for GPTQ W4 weights)."""
    key = (name, precision, id(hessians) if hessians is not None else None)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = _MODELS[key] = MoonshineModel(name, precision=precision, hessians=hessians)
        return model


@dataclass
class Token:
    text: str
    start_s: float
    end_s: float


@dataclass
class Event:
    """A recognition result: ``type`` "partial" (the open segment so far) or "final"."""
    type: str
    text: str
    start_s: float
    end_s: float
    tokens: List[Token] = field(default_factory=list)
    segment: int = 0           # index of the segment in the stream
    compute_ms: float = 0.0    # time spent recognising it

    def to_json(self) -> dict:
        return {"type": self.type, "text": self.text, "start_s": round(self.start_s, 3),
                "end_s": round(self.end_s, 3)}


class AudioRing:
    """The last ``capacity`` samples of a 16 kHz stream in a ring of pool chunks."""

    def __init__(self, capacity_samples: int, chunk: int = FRAME):
        self.chunk = chunk
        count = math.ceil(capacity_samples / chunk) + 1
        self.pool = memory.StreamingPool(chunk * 4, count, name="asr audio ring")
        self.count = count
        self.chunks: List = []           # (buffer, array view) oldest first
        self.first_sample = 0            # stream offset of chunks[0][0]
        self.end_sample = 0              # stream offset after the last sample written
        self.dropped_samples = 0

    def append(self, x: np.ndarray, keep_from: int) -> None:
        """Writes x; chunks wholly before ``keep_from`` are returned to the pool first."""
        while self.chunks and self.first_sample + self.chunk <= min(keep_from, self.end_sample):
            self._drop_oldest()
        pos = 0
        while pos < len(x):
            used = self.end_sample - self.first_sample - self.chunk * (len(self.chunks) - 1)
            if not self.chunks or used == self.chunk:
                if len(self.chunks) == self.count:
                    self.dropped_samples += self.chunk  # the consumer fell behind: drop oldest
                    self._drop_oldest()
                buf = self.pool.alloc()
                self.chunks.append((buf, buf.array(np.float32, self.chunk)))
                if len(self.chunks) == 1:
                    self.first_sample = self.end_sample
                used = 0
            n = min(self.chunk - used, len(x) - pos)
            self.chunks[-1][1][used:used + n] = x[pos:pos + n]
            pos += n
            self.end_sample += n

    def _drop_oldest(self) -> None:
        buf, _ = self.chunks.pop(0)
        buf.release()
        self.first_sample += self.chunk

    def read(self, start: int, end: int) -> np.ndarray:
        """Samples [start, end) of the stream (clipped to what the ring still holds)."""
        start, end = max(start, self.first_sample), min(end, self.end_sample)
        out = np.empty(max(end - start, 0), np.float32)
        k, pos = (start - self.first_sample) // self.chunk, start
        while pos < end:
            base = self.first_sample + k * self.chunk
            a, b = pos - base, min(end - base, self.chunk)
            out[pos - start:pos - start + b - a] = self.chunks[k][1][a:b]
            pos += b - a
            k += 1
        return out

    def close(self) -> None:
        while self.chunks:
            self._drop_oldest()
        self.pool.close()


class Recognizer:
    """A speech recogniser shared by any number of streams.

    model: "moonshine-base" (fetched once with ``nerve models fetch moonshine-base``).
    words / phrases: constrain the output to sequences of these words / to one of these
    phrases (spelled as given); free text when neither is set.
    partial_ms: period of partial results while speech goes on (0: finals only).
    threads: threads of each stream's sessions. beam: beam width (default 1, or 2 with
    words/phrases). numbers: "words" (default: "ninety") or "digits" ("90") in free text.
    end_silence_ms / max_segment_s / vad_threshold: the endpointer (see nerve.asr.vad).
    early_final_ms: how long before the endpoint fires a final's recognition may start: once
    the silence after speech has run end_silence_ms - early_final_ms (and the segment's padded
    end has arrived), the segment is recognised as it will end if the silence goes on; when
    the endpoint fires on exactly that segment the result is the final, so in real time the
    final comes up to early_final_ms sooner (the same text: the same samples). Speech that
    resumes first costs that recognition for nothing. 0: recognise only when it fires.
    precision: "fp32" (default; matches onnxruntime), "int8": the encoder's products also
    quantise their activations (VNNI on x86): ~2x faster encoder, same WER on our command
    corpus (bench/RESULTS.md), encoder states within cosine 0.996 of fp32; "w4a32"/"w4a8":
    INT4 weights (nerve.precision; accuracy and speed in bench/RESULTS.md).
    hessians: calibration statistics from :func:`nerve.asr.calibrate.calibrate` (recordings
    like the ones to recognise): at a W4 precision the weights are then quantized with GPTQ.
    """

    def __init__(self, model: str = "moonshine-base", words: Optional[Sequence[str]] = None,
                 phrases: Optional[Sequence[str]] = None, partial_ms: int = 320, threads: int = 1, *,
                 beam: Optional[int] = None, numbers: str = "words", end_silence_ms: float = 600,
                 max_segment_s: float = 20.0, vad_threshold: float = 0.5, precision: str = "fp32",
                 hessians=None, early_final_ms: int = 300):
        if numbers not in ("words", "digits"):
            raise InputError(f"numbers must be 'words' or 'digits', got {numbers!r}")
        if partial_ms < 0:
            raise InputError(f"partial_ms must be >= 0, got {partial_ms}")
        if not 0 <= early_final_ms <= end_silence_ms:
            raise InputError(f"early_final_ms must be in [0, end_silence_ms={end_silence_ms}], got {early_final_ms}")
        if not 0.5 <= max_segment_s <= 30:
            raise InputError(f"max_segment_s must be in [0.5, 30] (the model's window), got {max_segment_s}")
        parse_precision(precision)
        self.model = shared_model(model, precision, hessians)
        self.vocabulary = None
        if words is not None or phrases is not None:
            self.vocabulary = Vocabulary(self.model.tokenizer, words=words, phrases=phrases)
        self.partial_ms = int(partial_ms)
        self.early_final_ms = int(early_final_ms)
        self.threads = int(threads)
        # beam 2 under a vocabulary: on the command corpus it matched beam 4 (WER 0.296 vs
        # 0.306) at 2/3 of the time; greedy lost 0.07 (a wrong first word cannot be undone)
        self.beam = int(beam) if beam is not None else (2 if self.vocabulary else 1)
        self.numbers = numbers
        self.detector_options = dict(end_silence_ms=end_silence_ms, max_segment_s=max_segment_s,
                                     threshold=vad_threshold, off_threshold=max(vad_threshold - 0.15, 0.01))

    def create_stream(self, sample_rate: int = SAMPLE_RATE, channels: int = 1) -> "Stream":
        return Stream(self, sample_rate, channels)

    def transcribe(self, source: Union[str, Path, bytes, np.ndarray], sample_rate: Optional[int] = None,
                   channels: int = 1) -> List[Event]:
        """The final events of a whole recording (a WAV or FLAC path/bytes, read block by block,
        or samples with their rate)."""
        if isinstance(source, np.ndarray):
            if sample_rate is None:
                raise InputError("transcribe(samples): give sample_rate=")
            rate, blocks = int(sample_rate), [source]
        else:
            rate, blocks = iter_audio(source, block_frames=_WAV_BLOCK_S * 48000)
            channels = 1
        stream = Stream(self, rate, channels, partial_ms=0)
        try:
            events: List[Event] = []
            for block in blocks:
                events += stream.accept_waveform(block)
            return [e for e in events + stream.finish() if e.type == "final"]
        finally:
            stream.close()

    def _text(self, raw: str) -> str:
        if self.vocabulary is not None:
            return self.vocabulary.spell(raw)
        return numbers_to_words(raw) if self.numbers == "words" else numbers_to_digits(raw)


class Stream:
    """One audio source. Not thread-safe; create one per thread (they share the model)."""

    def __init__(self, rec: Recognizer, sample_rate: int = SAMPLE_RATE, channels: int = 1,
                 partial_ms: Optional[int] = None):
        if not isinstance(channels, int) or not 1 <= channels <= 64:
            raise InputError(f"channels must be an int in 1..64, got {channels!r}")
        self.rec = rec
        self.channels = channels
        self.sample_rate = int(sample_rate)
        self.resampler = Resampler(self.sample_rate, SAMPLE_RATE)  # validates the rate
        self.detector = SpeechDetector(**rec.detector_options)
        self.decoder = rec.model.decoder(rec.threads)
        max_seg = int(rec.detector_options["max_segment_s"] * SAMPLE_RATE)
        self.ring = AudioRing(max_seg + self.detector.max_lookback_samples + _PIECE + 2 * FRAME)
        self.partial_samples = (rec.partial_ms if partial_ms is None else partial_ms) * SAMPLE_RATE // 1000
        self.open_start: Optional[int] = None
        self.next_partial = 0
        self._early: Optional[_EarlyFinal] = None  # kept until the endpoint fires
        self.early_finals = {"used": 0, "wasted": 0}  # early recognitions that became finals / that speech undid
        seg = self.detector.segmenter
        self._early_after = (max(seg.end_silence_frames - rec.early_final_ms * SAMPLE_RATE // 1000 // FRAME, 1)
                             if rec.early_final_ms else 0)
        self.segments = 0
        self.first_final_latency_ms: Optional[float] = None
        self.stage_seconds = {"resample": 0.0, "vad": 0.0, "encoder+decoder": 0.0}

    def memory_report(self) -> Dict[str, int]:
        """Bytes this stream holds, from nerve's counters: the audio ring (its peak), the
        activation arenas of its sessions, and the weights they use (shared by every stream of
        the model: counted once per process, not per stream)."""
        sessions = [self.decoder.steps.encoder, self.decoder.steps.first, self.decoder.steps.next,
                    self.decoder.steps.kept,
                    self.detector.vad.session] if self.decoder is not None else []
        reports = [s.memory_report() for s in sessions]
        ring = self.ring.pool.stats() if not self.ring.pool.closed else {"peak": 0, "capacity": 0}
        return {"ring_peak": int(ring["peak"]), "ring_capacity": int(ring["capacity"]),
                "arenas": sum(r["arena_bytes"] + r["state_bytes"] for r in reports),
                "weights_used": sum(r["weight_bytes"] for r in reports)}

    @property
    def dropped_samples(self) -> int:
        return self.ring.dropped_samples

    @property
    def position_s(self) -> float:
        return self.ring.end_sample / SAMPLE_RATE

    def accept_waveform(self, samples) -> List[Event]:
        """Feeds audio at the stream's rate (float in [-1, 1] or int16/int32 PCM; interleaved or
        (frames, channels)); returns the new partial and final events."""
        t0 = time.perf_counter()
        mono = to_mono_float32(samples, channels=self.channels)
        x = self.resampler.process(mono)
        self.stage_seconds["resample"] += time.perf_counter() - t0
        return self._accept16k(x)

    def finish(self) -> List[Event]:
        """End of stream: flushes the resampler and closes an open segment. The stream can
        then take a new recording (times continue)."""
        events = self._accept16k(self.resampler.flush())
        for ev in self.detector.flush():
            events += self._on_detector_event(ev.kind, ev.sample, fired_at=self.ring.end_sample)
        return events

    def close(self) -> None:
        """Returns the stream's memory: the ring's pool, and its decoder to the model."""
        if self.decoder is not None:
            self.rec.model.release(self.decoder)
            self.decoder = None
            self.ring.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _accept16k(self, x: np.ndarray) -> List[Event]:
        events: List[Event] = []
        for at in range(0, len(x), _PIECE):  # bounded pieces: the ring never has to hold a whole call
            events += self._accept_piece(x[at:at + _PIECE])
        return events

    def _accept_piece(self, x: np.ndarray) -> List[Event]:
        keep_from = self.ring.end_sample - self.detector.max_lookback_samples - FRAME
        if self.open_start is not None:
            keep_from = min(keep_from, self.open_start)
        self.ring.append(x, keep_from)
        t0 = time.perf_counter()
        detected = self.detector.accept(x)
        self.stage_seconds["vad"] += time.perf_counter() - t0
        events: List[Event] = []
        for ev in detected:
            events += self._on_detector_event(ev.kind, ev.sample)
        if self.open_start is not None and self._early_after:
            end = self.detector.segmenter.pending_end(self._early_after)
            if end is not None and end <= self.ring.end_sample and \
                    (self._early is None or (self._early.start, self._early.end) != (self.open_start, end)):
                if self._early is not None:
                    self.early_finals["wasted"] += 1
                self._early = _EarlyFinal(self.open_start, end, self._recognise("final", self.open_start, end),
                                          self.ring.end_sample)
        if self.open_start is not None and self.partial_samples and self.ring.end_sample >= self.next_partial:
            partial = self._recognise("partial", self.open_start, self.ring.end_sample)
            events.append(partial)
            # the next partial no sooner than partial_ms, nor than twice this one's compute time
            # in stream time: partials never take more than half of real time, however long
            # the segment grows (each re-runs the encoder on all of it)
            gap = max(self.partial_samples, int(2 * partial.compute_ms * SAMPLE_RATE / 1000))
            self.next_partial = self.ring.end_sample + gap
        return events

    def _on_detector_event(self, kind: str, sample: int, fired_at: Optional[int] = None) -> List[Event]:
        """fired_at: the stream sample whose arrival fired an end (default: the endpointer's
        silence after `sample`)."""
        if kind == "start":
            self.open_start = sample
            self.next_partial = sample + self.partial_samples
            return []
        if self.open_start is None:
            return []
        start, self.open_start = self.open_start, None
        early, self._early = self._early, None
        if early is not None and (early.start, early.end) == (start, sample):
            self.early_finals["used"] += 1
            final = early.event
            # in real time the early final was computed once audio up to early.arrived had come;
            # the endpoint fires when audio up to fired_at has: what its compute outlasted is latency
            if fired_at is None:
                fired_at = sample + self.detector.segmenter.endpoint_delay_samples
            waited_ms = max(fired_at - early.arrived, 0) * 1000 / SAMPLE_RATE
            latency_ms = max(final.compute_ms - waited_ms, 0.0)
        else:
            if early is not None:
                self.early_finals["wasted"] += 1
            t0 = time.perf_counter()
            final = self._recognise("final", start, sample)
            latency_ms = (time.perf_counter() - t0) * 1e3
        if self.first_final_latency_ms is None:
            self.first_final_latency_ms = latency_ms
        self.segments += 1
        return [final]

    def _recognise(self, kind: str, start: int, end: int) -> Event:
        audio = self.ring.read(start, end)
        t0 = time.perf_counter()
        final = kind == "final"
        result = self.decoder.transcribe(audio, beam=self.rec.beam if final else 1,
                                         allowed=self.rec.vocabulary)
        spent = time.perf_counter() - t0
        self.stage_seconds["encoder+decoder"] += spent
        text = self.rec._text(result.text)
        start_s, end_s = start / SAMPLE_RATE, end / SAMPLE_RATE
        tokens = _token_times(self.rec.model.tokenizer, result.tokens, start_s, end_s)
        return Event(kind, text, start_s, end_s, tokens, self.segments, spent * 1e3)


class _EarlyFinal(NamedTuple):
    """A segment recognised before its endpoint fired (Recognizer early_final_ms)."""
    start: int    # the segment's samples [start, end)
    end: int
    event: Event  # its final, if the endpoint fires on [start, end)
    arrived: int  # stream samples that had arrived when it was computed


def _token_times(tokenizer, tokens: List[int], start_s: float, end_s: float) -> List[Token]:
    """Token times spread evenly over the segment: Moonshine gives no alignment, so these are
    an approximation (segment boundaries are exact to the VAD's 32 ms grid)."""
    if not tokens:
        return []
    step = (end_s - start_s) / len(tokens)
    return [Token(tokenizer.piece_text(t), start_s + k * step, start_s + (k + 1) * step)
            for k, t in enumerate(tokens)]
