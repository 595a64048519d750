"""Calibration of a Moonshine model for GPTQ W4 weights: the input statistics (Σ xᵀx) of every
linear layer of the encoder and of the decoder, gathered while the fp32 model recognises real
audio (greedy decoding, its own tokens fed back).

    hessians = calibrate("moonshine-base", [audio_16k, ...])
    rec = nerve.asr.Recognizer(precision="w4a8", hessians=hessians)

    nerve models calibrate moonshine-base      # once: stores calibration.npz with the model,
    rec = nerve.asr.Recognizer(precision="w4a8:gptq")   # which ":gptq" precisions then read

The statistics come from nerve's own engine (nerve.quant.LinearTaps: the graphs compiled at
fp32 without fusion, each linear's input an extra output), nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

from ..errors import InputError, ModelError
from ..quant import LinearTaps
from .moonshine import MIN_SAMPLES, SAMPLE_RATE, MoonshineModel, as_past, decoder_feeds, encoder_feeds
from .tokenizer import Tokenizer

__all__ = ["calibrate", "save", "load", "calibration_file", "default_audio", "DEFAULT_SECONDS"]

CALIBRATION_FILE = "calibration.npz"
DEFAULT_SECONDS = 75.0  # of real speech: enough for every layer's Σ xᵀx (about 2 min to gather)
CHUNK_S = 15.0


def _merge(into: Dict[str, np.ndarray], more: Dict[str, np.ndarray]) -> None:
    for name, h in more.items():
        into[name] = into[name] + h if name in into else h.copy()


def calibrate(name: str, audios: Iterable[np.ndarray], max_tokens: int = 64) -> Dict[str, Dict[str, np.ndarray]]:
    """{"encoder": {layer: Σ xᵀx}, "decoder": {...}} over the audios (16 kHz mono float32,
    one utterance each, at most the model's segment length)."""
    model = MoonshineModel(name)
    arch, folder = model.arch, model.folder
    frames = model.encoder_frames(model.max_samples)
    kv = arch.kv_names
    ones = {"encoder_attention_mask": np.ones((1, frames * 384), np.int64)} if arch.masks else {}
    dec_dims = {"batch_size": 1, "decoder_sequence_length": 1, "encoder_sequence_length": frames,
                "encoder_sequence_length_out": frames, "past_decoder_sequence_length": model.max_tokens + 1}
    encoder = LinearTaps(folder / "encoder_model.ort", dims={"batch_size": 1, arch.samples_dim: model.max_samples})
    decoder = folder / "decoder_model_merged.ort"
    first = LinearTaps(decoder, dims=dec_dims, outputs=["logits"] + kv("present", "decoder") + kv("present", "encoder"),
                       constants={"use_cache_branch": np.array([False]), **ones,
                                  **{n: arch.empty_kv() for n in kv("past_key_values", "encoder")}})
    step = LinearTaps(decoder, dims=dec_dims, outputs=["logits"] + kv("present", "decoder"),
                      constants={"use_cache_branch": np.array([True]), **ones})
    count = 0
    for audio in audios:
        x = np.ascontiguousarray(audio, np.float32).reshape(1, -1)
        if x.shape[1] > model.max_samples:
            raise InputError(f"calibration audio of {x.shape[1] / SAMPLE_RATE:.1f} s is longer than the "
                             f"model's {model.max_samples / SAMPLE_RATE:.0f} s segments")
        if x.shape[1] < MIN_SAMPLES:
            x = np.pad(x, ((0, 0), (0, MIN_SAMPLES - x.shape[1])))
        states = encoder.run(encoder_feeds(arch, x))["last_hidden_state"]
        empty = {n: arch.empty_kv() for n in kv("past_key_values", "decoder")}
        out = first.run({**decoder_feeds(Tokenizer.BOS, states), **empty})
        past, cross = as_past(arch, out, "decoder"), as_past(arch, out, "encoder")
        limit = min(max_tokens, model.token_limit(x.shape[1]))
        for _ in range(limit):
            token = int(np.argmax(out["logits"][0, -1, :model.vocab]))
            if token == Tokenizer.EOS:
                break
            out = step.run({**decoder_feeds(token, states), **past, **cross})
            past = as_past(arch, out, "decoder")
        count += 1
    if not count:
        raise InputError("calibration needs at least one recording")
    dec: Dict[str, np.ndarray] = {}
    _merge(dec, first.hessians)
    _merge(dec, step.hessians)
    return {"encoder": encoder.hessians, "decoder": dec}


def default_audio(seconds: float = DEFAULT_SECONDS) -> List[np.ndarray]:
    """Real human speech that nerve's tests do not score: the Dickens and Beckett readings
    shipped in the moonshine-voice wheel (``nerve models fetch moonshine-tiny``), in 15 s
    pieces, up to ``seconds``."""
    from .. import audio
    from .models import model_file

    pieces: List[np.ndarray] = []
    for rel in ("moonshine_voice/assets/two_cities.wav", "moonshine_voice/assets/endgame_nagg_nell.wav"):
        x = audio.load_audio(model_file("moonshine-tiny", rel))
        step = int(CHUNK_S * SAMPLE_RATE)
        pieces += [x[i:i + step] for i in range(0, len(x) - step // 3, step)]
    out, total = [], 0.0
    for p in pieces:
        if total >= seconds:
            break
        out.append(p)
        total += len(p) / SAMPLE_RATE
    return out


def calibration_file(name: str) -> Path:
    from .models import model_dir

    return model_dir(name) / CALIBRATION_FILE


def save(hessians: Dict[str, Dict[str, np.ndarray]], path) -> None:
    """Writes calibrate()'s result as one .npz ("encoder/<layer>", "decoder/<layer>"), atomically."""
    import os
    import tempfile

    path = Path(path)
    arrays = {f"{part}/{layer}": h for part, layers in hessians.items() for layer, h in layers.items()}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path) -> Dict[str, Dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            out: Dict[str, Dict[str, np.ndarray]] = {"encoder": {}, "decoder": {}}
            for key in z.files:
                part, _, layer = key.partition("/")
                if part not in out or not layer:
                    raise ModelError(f"{path}: unexpected entry {key!r} (not a nerve calibration file?)")
                h = z[key]
                if h.ndim != 2 or h.shape[0] != h.shape[1] or h.dtype != np.float64:
                    raise ModelError(f"{path}: {key} is {h.dtype}{list(h.shape)}, not a square float64 matrix")
                out[part][layer] = h
            return out
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read calibration {path}: {exc}") from exc


def stored(name: str) -> Optional[Dict[str, Dict[str, np.ndarray]]]:
    """The calibration `nerve models calibrate NAME` stored, or None."""
    path = calibration_file(name)
    return load(path) if path.is_file() else None
