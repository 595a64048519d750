"""Moonshine on nerve's engine: the encoder plan and the merged decoder specialised into
plans for the first step (computes the cross-attention keys/values from the encoder states,
once per segment) and for every next step (reads them back).

Two exports are known (:data:`ARCHS`): base-en from ``moonshine-cpp`` (opset 14, int8
weights dequantised in-graph) and tiny-en from ``moonshine-voice`` (opset 18, onnxruntime's
dynamic-quantization contrib ops; its graphs also take attention masks, fed all ones: a
segment is never padded).

    model = MoonshineModel()                 # compiles (or loads cached) plans, once per process
    decoder = model.decoder()                # per stream: its own arenas, the model's plans
    result = decoder.transcribe(audio_16k)   # Transcript(tokens, text, ...)

Decoding: greedy or beam search (beam <= 8), at most ``TOKENS_PER_SECOND`` tokens per second
of audio, stopped when a pattern of 1..8 tokens repeats ``REPEAT_LIMIT`` times in a row, and
with the end token barred from the first step when the caller knows speech is present (on
band-limited recordings Moonshine can otherwise end before saying anything).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError, ModelError
from ..precision import calibrated, parse_full
from ..session import Session, compile as compile_plan
from .models import model_dir
from .tokenizer import Tokenizer

__all__ = ["MoonshineModel", "MoonshineDecoder", "Transcript", "SAMPLE_RATE", "ARCHS", "Arch"]

SAMPLE_RATE = 16000
TOKENS_PER_SECOND = 6.5     # Moonshine speaks at most ~6.5 tokens per second of audio
MIN_TOKENS = 6
REPEAT_LIMIT = 4            # a 1..8-token pattern seen this many times in a row: a loop
MAX_BEAM = 8
MIN_SAMPLES = 1600          # the encoder's convolutions need >= 0.1 s


@dataclass(frozen=True)
class Arch:
    """What differs between the Moonshine exports nerve runs."""
    folder: str         # the model files, under the fetched model's folder
    layers: int
    heads: int
    head_dim: int
    hidden: int
    samples_dim: str    # the encoder input's symbolic length
    masks: bool         # the graphs take attention masks ("attention_mask", "encoder_attention_mask")
    # The encoder convs that take int8 activations too at precision "int8" (conv_w8a8). Measured
    # on the bench recordings (encoder states vs fp32, relative error, worst file; base / tiny):
    # the linears alone 0.061 / 0.044; + conv1 (raw audio in) 0.067 / 0.041; + conv2 (a group
    # norm's output in) 0.063 / 0.042; + conv3 0.109 / 0.133 — its input, conv2's GELU, has a
    # few channels 10x the median (absmax 90 vs 8.6) that set every row's int8 scale, so it
    # stays fp32 ("int8:convs" takes it too). conv1 and conv2 are ~80% of the convs' time.
    int8_convs: Tuple[str, ...] = ("/conv1/Conv", "/conv2/Conv")

    def kv_names(self, prefix: str, part: str) -> List[str]:
        return [f"{prefix}.{layer}.{part}.{kind}" for layer in range(self.layers) for kind in ("key", "value")]

    def empty_kv(self) -> np.ndarray:
        return np.zeros((1, self.heads, 0, self.head_dim), np.float32)


ARCHS: Dict[str, Arch] = {
    "moonshine-base": Arch("models/base-en", 8, 8, 52, 416, "num_samples", False),
    "moonshine-tiny": Arch("moonshine_voice/assets/tiny-en", 6, 8, 36, 288, "encoder_sequence_length", True),
}


def arch_of(name: str) -> Arch:
    if name not in ARCHS:
        raise InputError(f"unknown Moonshine model {name!r}; known: {', '.join(sorted(ARCHS))}")
    return ARCHS[name]


def encoder_feeds(arch: Arch, audio: np.ndarray) -> Dict[str, np.ndarray]:
    """The encoder's inputs for one [1, n] segment."""
    feeds = {"input_values": audio}
    if arch.masks:
        feeds["attention_mask"] = np.ones(audio.shape, np.int64)
    return feeds


def decoder_feeds(token: int, states: np.ndarray) -> Dict[str, np.ndarray]:
    """The decoder's per-step inputs besides the caches, use_cache_branch and the mask."""
    return {"input_ids": np.array([[token]], np.int64), "encoder_hidden_states": states}


# The decoder's encoder_attention_mask is over audio samples (the graph takes every 384th:
# the encoder's total stride), though the export declares it with the frames' symbol.
MASK_STRIDE = 384


@dataclass
class Transcript:
    tokens: List[int]
    text: str
    logprob: float
    stopped: str                    # "end", "length", "repetition"
    encoder_frames: int = 0
    token_logprobs: List[float] = field(default_factory=list)


class MoonshineModel:
    """The compiled plans and tokenizer of one Moonshine model (shared by every stream)."""

    def __init__(self, name: str = "moonshine-base", max_segment_s: float = 30.0,
                 model_path: Optional[Path] = None, precision: str = "fp32", hessians=None):
        self.arch = arch_of(name)
        folder = Path(model_path) if model_path else model_dir(name) / self.arch.folder
        self.name = name
        self.folder = folder
        self.precision = precision  # nerve.precision: "int8" (many-row products), "w4a8", ...
        self.tokenizer = Tokenizer.load(folder / "tokenizer.bin")
        self.max_samples = int(max_segment_s * SAMPLE_RATE)
        frames = self.encoder_frames(self.max_samples)
        self.max_tokens = self.token_limit(self.max_samples)
        if hessians is None and calibrated(precision):  # ":gptq": the stored calibration
            from .calibrate import stored

            hessians = stored(name)
            if hessians is None:
                raise ModelError(f"precision {precision!r} needs the model's calibration: run "
                                 f"`nerve models calibrate {name}` once")
        hessians = hessians or {}
        int8_convs = {name: "int8" for name in self.arch.int8_convs} if parse_full(precision)[0] == "int8" else None
        self.encoder_plan = compile_plan(folder / "encoder_model.ort", precision=precision, layers=int8_convs,
                                         hessians=hessians.get("encoder"),
                                         dims={"batch_size": 1, self.arch.samples_dim: self.max_samples})
        dec_dims = {"batch_size": 1, "decoder_sequence_length": 1, "encoder_sequence_length": frames,
                    "encoder_sequence_length_out": frames, "past_decoder_sequence_length": self.max_tokens + 1}
        decoder_path = folder / "decoder_model_merged.ort"
        kv = self.arch.kv_names
        if self.arch.masks:  # never padded: an all-ones mask, folded into the plans
            ones = {"encoder_attention_mask": np.ones((1, frames * MASK_STRIDE), np.int64)}
        else:
            ones = {}
        self.first_plan = compile_plan(
            decoder_path, dims=dec_dims, precision=precision, hessians=hessians.get("decoder"), outputs=["logits"] + kv("present", "decoder")
            + kv("present", "encoder"),
            # the first step computes the cross-attention caches: the past ones (and the If's
            # other branch) are folded away as empty constants, so they are not inputs
            constants={"use_cache_branch": np.array([False]), **ones,
                       **{n: self.arch.empty_kv() for n in kv("past_key_values", "encoder")}})
        self.next_plan = compile_plan(  # past keys/values in and out as arrays (beam search)
            decoder_path, dims=dec_dims, precision=precision, hessians=hessians.get("decoder"), constants={"use_cache_branch": np.array([True]), **ones},
            outputs=["logits"] + kv("present", "decoder"))
        self.kept_plan = compile_plan(  # the same, with them kept in the session (greedy)
            decoder_path, dims=dec_dims, precision=precision, hessians=hessians.get("decoder"), constants={"use_cache_branch": np.array([True]), **ones},
            outputs=["logits"] + kv("present", "decoder"),
            state={n: n.replace("present", "past_key_values") for n in kv("present", "decoder")})
        self.vocab = len(self.tokenizer)
        self._idle: List["MoonshineDecoder"] = []
        self._idle_lock = threading.Lock()

    KEEP_IDLE = 2  # released decoders kept for reuse

    @staticmethod
    def encoder_frames(samples: int) -> int:
        """Encoder output length for `samples` inputs (conv strides 64, 3, 2; kernels 127, 7, 3)."""
        t = (samples - 127) // 64 + 1
        t = (t - 7) // 3 + 1
        return max((t - 3) // 2 + 1, 0)

    @staticmethod
    def token_limit(samples: int) -> int:
        return max(MIN_TOKENS, math.ceil(samples / SAMPLE_RATE * TOKENS_PER_SECOND))

    def decoder(self, threads: int = 1) -> "MoonshineDecoder":
        """A decoder for one stream: a released one when there is one, else a new one."""
        with self._idle_lock:
            for k, d in enumerate(self._idle):
                if d.threads == threads:
                    return self._idle.pop(k)
        decoder = MoonshineDecoder(self, threads)
        decoder.warm_up()
        return decoder

    def release(self, decoder: "MoonshineDecoder") -> None:
        """Takes a stream's decoder back for the next stream (its arenas and, above all, the
        shared weights stay loaded: the first decoder pays the load, later ones do not)."""
        with self._idle_lock:
            if decoder not in self._idle and len(self._idle) < self.KEEP_IDLE:
                self._idle.append(decoder)


def _repeating(tokens: Sequence[int]) -> bool:
    for n in range(1, 9):
        if len(tokens) < REPEAT_LIMIT * n:
            break
        tail = tokens[-n:]
        if all(tokens[-(k + 1) * n:len(tokens) - k * n] == tail for k in range(1, REPEAT_LIMIT)):
            return True
    return False


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    return z - math.log(np.exp(z).sum())


class NerveSteps:
    """The three model calls of the decode loop, on nerve sessions of the model's plans."""

    def __init__(self, model: MoonshineModel, threads: int = 1):
        self.encoder = Session(model.encoder_plan, threads=threads)
        self.first = Session(model.first_plan, threads=threads)
        self.next = Session(model.next_plan, threads=threads)
        self.kept = Session(model.kept_plan, threads=threads)
        self.arch = arch = model.arch
        self._empty_past = {n: arch.empty_kv() for n in arch.kv_names("past_key_values", "decoder")}

    def encode(self, audio: np.ndarray) -> np.ndarray:
        return self.encoder.run(encoder_feeds(self.arch, audio))["last_hidden_state"]

    def first_step(self, states: np.ndarray) -> Tuple[np.ndarray, Dict, Dict]:
        out = self.first.run({**decoder_feeds(Tokenizer.BOS, states), **self._empty_past})
        return out["logits"][0, -1], as_past(self.arch, out, "decoder"), as_past(self.arch, out, "encoder")

    def next_step(self, token: int, states, past: Dict, cross: Dict) -> Tuple[np.ndarray, Dict]:
        out = self.next.run({**decoder_feeds(token, states), **past, **cross})
        return out["logits"][0, -1], as_past(self.arch, out, "decoder")

    def greedy(self, first_token: int, states, past: Dict, cross: Dict, limit: int, vocab: int):
        """The rest of a greedy decode in one native call (Session.decode_greedy), the caches
        appended in place in the session: (tokens from first_token on, logprobs, stopped)."""
        return self.kept.decode_greedy({"encoder_hidden_states": states, **past, **cross}, first_token,
                                       Tokenizer.EOS, limit, vocab, repeat_limit=REPEAT_LIMIT)

    def next_step_kept(self, token: int, states, past: Optional[Dict], cross: Dict) -> np.ndarray:
        """A step whose past keys/values stay in the session's state buffers (preallocated
        for the longest segment): ``past`` is given on the first step only, then each step
        reads what the previous one wrote."""
        feeds = {**decoder_feeds(token, states), **cross}
        if past is not None:
            feeds.update(past)
        return self.kept.run(feeds)["logits"][0, -1]


def as_past(arch: Arch, out: Dict[str, np.ndarray], part: str) -> Dict[str, np.ndarray]:
    """The present.* outputs of a step renamed as the past_key_values.* inputs of the next."""
    return {n.replace("present", "past_key_values"): out[n] for n in arch.kv_names("present", part)}


class MoonshineDecoder:
    """The decode loop over one set of per-stream sessions (not thread-safe: one per thread).
    ``steps``: the model calls (default: nerve sessions; nerve.asr.peers has onnxruntime's)."""

    def __init__(self, model: MoonshineModel, threads: int = 1, steps=None):
        self.model = model
        self.threads = threads
        self.steps = steps if steps is not None else NerveSteps(model, threads)
        self._lock = threading.Lock()
        self.seconds = {"encoder": 0.0, "decoder": 0.0, "tokens": 0}  # accumulated by transcribe

    def warm_up(self) -> None:
        """One short pass through every plan, so that a stream's first final does not pay for
        touching fresh arenas (page faults) after the endpoint."""
        self.transcribe(np.zeros(MIN_SAMPLES, np.float32), max_tokens=2)
        self.seconds = {"encoder": 0.0, "decoder": 0.0, "tokens": 0}

    def encode(self, audio: np.ndarray) -> np.ndarray:
        audio = np.ascontiguousarray(audio, dtype=np.float32).reshape(1, -1)
        n = audio.shape[1]
        if n > self.model.max_samples:
            raise InputError(f"segment of {n / SAMPLE_RATE:.2f} s is longer than this model's "
                             f"{self.model.max_samples / SAMPLE_RATE:.0f} s limit")
        if n < MIN_SAMPLES:  # too short for the convolutions: pad with silence
            audio = np.pad(audio, ((0, 0), (0, MIN_SAMPLES - n)))
        return self.steps.encode(audio)

    def _step_first(self, states: np.ndarray) -> Tuple[np.ndarray, Dict, Dict]:
        logits, past, cross = self.steps.first_step(states)
        return logits[:self.model.vocab], past, cross

    def _step_next(self, token: int, states, past: Dict, cross: Dict) -> Tuple[np.ndarray, Dict]:
        logits, past = self.steps.next_step(token, states, past, cross)
        return logits[:self.model.vocab], past

    def transcribe(self, audio: np.ndarray, beam: int = 1, speech_present: bool = True,
                   max_tokens: Optional[int] = None, allowed=None) -> Transcript:
        """Recognises one segment of 16 kHz mono audio.

        allowed: an optional constraint object with ``start()`` -> state and
        ``mask(state) -> bool array over the vocabulary`` / ``advance(state, token) -> state``
        (see nerve.asr.vocabulary), applied at every step."""
        if not 1 <= int(beam) <= MAX_BEAM:
            raise InputError(f"beam must be in 1..{MAX_BEAM}, got {beam}")
        with self._lock:
            t0 = time.perf_counter()
            states = self.encode(audio)
            t1 = time.perf_counter()
            # spelled-out words take more pieces than the digits Moonshine prefers
            natural = self.model.token_limit(len(audio)) * (2 if allowed is not None else 1)
            limit = min(max_tokens or self.model.max_tokens, natural, self.model.max_tokens)
            logits, past, cross = self._step_first(states)
            if beam == 1:
                result = self._greedy(logits, states, past, cross, limit, speech_present, allowed)
            else:
                result = self._beam(logits, states, past, cross, limit, speech_present, allowed, int(beam))
            self.seconds["encoder"] += t1 - t0
            self.seconds["decoder"] += time.perf_counter() - t1
            self.seconds["tokens"] += len(result.tokens)
            return result

    def _scores(self, logits: np.ndarray, step: int, speech_present: bool, allowed, cstate) -> np.ndarray:
        logp = _log_softmax(logits)
        if step == 0 and speech_present:
            logp[Tokenizer.EOS] = -np.inf
        if allowed is not None:
            logp = np.where(allowed.mask(cstate), logp, -np.inf)
        return logp

    def _greedy(self, logits, states, past, cross, limit, speech_present, allowed) -> Transcript:
        tokens: List[int] = []
        token_lp: List[float] = []
        cstate = allowed.start() if allowed is not None else None
        stopped = "length"
        kept = getattr(self.steps, "next_step_kept", None)
        native_loop = getattr(self.steps, "greedy", None)
        if allowed is None and native_loop is not None:
            # the first token from the first-step logits, the rest in one native call
            logp = self._scores(logits, 0, speech_present, None, None)
            token = int(np.argmax(logp))
            if token == Tokenizer.EOS:
                return self._finish([], [], "end", states)
            tokens, token_lp, stopped = native_loop(token, states, past, cross, limit, self.model.vocab)
            token_lp[0] = float(logp[token])
            return self._finish(tokens, token_lp, stopped, states)
        for step in range(limit):
            logp = self._scores(logits, step, speech_present, allowed, cstate)
            token = int(np.argmax(logp))
            if not np.isfinite(logp[token]) or token == Tokenizer.EOS:
                stopped = "end"
                break
            tokens.append(token)
            token_lp.append(float(logp[token]))
            if allowed is not None:
                cstate = allowed.advance(cstate, token)
            if _repeating(tokens):
                stopped = "repetition"
                break
            if step + 1 < limit:
                if kept is not None:
                    logits = kept(token, states, past, cross)[:self.model.vocab]
                    past = None  # from now on the session holds it
                else:
                    logits, past = self._step_next(token, states, past, cross)
        return self._finish(tokens, token_lp, stopped, states)

    def _beam(self, logits, states, past, cross, limit, speech_present, allowed, width) -> Transcript:
        # each hypothesis: (score, tokens, token logprobs, past, logits, constraint state)
        start_state = allowed.start() if allowed is not None else None
        live = [(0.0, [], [], past, logits, start_state)]
        done: List[Tuple[float, List[int], List[float], str]] = []
        for step in range(limit):
            candidates = []
            for score, toks, lps, hpast, hlogits, cst in live:
                logp = self._scores(hlogits, step, speech_present, allowed, cst)
                top = np.argpartition(-logp, width)[:width + 1] if logp.size > width + 1 else np.arange(logp.size)
                for t in top:
                    if np.isfinite(logp[t]):
                        candidates.append((score + float(logp[t]), int(t), toks, lps, hpast, cst, float(logp[t])))
            candidates.sort(key=lambda c: -c[0])
            live = []
            for total, t, toks, lps, hpast, cst, lp in candidates:
                if t == Tokenizer.EOS:
                    done.append((total, toks, lps, "end"))
                else:
                    new = toks + [t]
                    nst = allowed.advance(cst, t) if allowed is not None else None
                    if _repeating(new):
                        done.append((total, new, lps + [lp], "repetition"))
                    else:
                        live.append((total, new, lps + [lp], hpast, None, nst))
                if len(live) >= width:
                    break
            if not live or (len(done) >= width and max(d[0] for d in done) >= live[0][0]):
                break
            if step + 1 < limit:
                stepped = []
                for s, tk, lp, hp, _, cst in live:
                    hlogits, hpast = self._step_next(tk[-1], states, hp, cross)
                    stepped.append((s, tk, lp, hpast, hlogits, cst))
                live = stepped
        done += [(s, tk, lp, "length") for s, tk, lp, *_ in live]
        # length-normalised choice (plain sums favour stopping early); under a constraint only
        # a hypothesis that ended where a word/phrase is complete counts, when there is one
        if allowed is not None and any(d[3] == "end" for d in done):
            done = [d for d in done if d[3] == "end"]
        best = max(done, key=lambda d: d[0] / max(len(d[1]), 1))
        return self._finish(best[1], best[2], best[3], states)

    def _finish(self, tokens, token_lp, stopped, states) -> Transcript:
        text = self.model.tokenizer.decode(tokens)
        return Transcript(tokens=tokens, text=text, logprob=float(sum(token_lp)), stopped=stopped,
                          encoder_frames=int(states.shape[1]), token_logprobs=token_lp)
