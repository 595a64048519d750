"""The same Moonshine model and decode loop on onnxruntime: the reference the tests compare
nerve's transcripts with, and the peer ``nerve bench asr`` times in the same run.

onnxruntime is a test/benchmark dependency, never a run-time one: it is imported here only.

    decoder = ort_decoder(model, threads=1)   # a MoonshineDecoder whose steps run on onnxruntime
    decoder.transcribe(audio)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from ..errors import NerveError
from .moonshine import ARCHS, MASK_STRIDE, Arch, MoonshineDecoder, MoonshineModel, as_past, decoder_feeds, encoder_feeds
from .tokenizer import Tokenizer

__all__ = ["OrtSteps", "ort_decoder", "pocketsphinx_recognize", "sphinx_grammar"]


class OrtSteps:
    """encode / first_step / next_step on onnxruntime sessions of the model's .ort files."""

    def __init__(self, folder: Path, threads: int = 1, arch: Arch = ARCHS["moonshine-base"]):
        from ..modeltools import ort_session

        self.arch = arch
        self.encoder = ort_session(_model_file(folder, "encoder_model"), threads)
        self.decoder = ort_session(_model_file(folder, "decoder_model_merged"), threads)
        self.out_names = [o.name for o in self.decoder.get_outputs()]
        self._empty = {n: arch.empty_kv() for part in ("decoder", "encoder")
                       for n in arch.kv_names("past_key_values", part)}

    def encode(self, audio: np.ndarray) -> np.ndarray:
        return self.encoder.run(None, encoder_feeds(self.arch, audio))[0]

    def _run(self, token: int, states, kv: Dict, use_cache: bool) -> Dict[str, np.ndarray]:
        feeds = {**decoder_feeds(token, states), "use_cache_branch": np.array([use_cache]), **kv}
        if self.arch.masks:
            feeds["encoder_attention_mask"] = np.ones((1, states.shape[1] * MASK_STRIDE), np.int64)
        return dict(zip(self.out_names, self.decoder.run(None, feeds)))

    def first_step(self, states: np.ndarray) -> Tuple[np.ndarray, Dict, Dict]:
        out = self._run(Tokenizer.BOS, states, self._empty, False)
        return out["logits"][0, -1], as_past(self.arch, out, "decoder"), as_past(self.arch, out, "encoder")

    def next_step(self, token: int, states, past: Dict, cross: Dict) -> Tuple[np.ndarray, Dict]:
        out = self._run(token, states, {**past, **cross}, True)
        return out["logits"][0, -1], as_past(self.arch, out, "decoder")


def _model_file(folder: Path, stem: str) -> Path:
    """stem.onnx when the folder has one (a re-exported or rewritten graph), else the .ort."""
    onnx = folder / f"{stem}.onnx"
    return onnx if onnx.is_file() else folder / f"{stem}.ort"


def ort_decoder(model: MoonshineModel, threads: int = 1) -> MoonshineDecoder:
    return MoonshineDecoder(model, threads, steps=OrtSteps(model.folder, threads, model.arch))


# ---- PocketSphinx (CMU, 5.x): the classic offline command recogniser, with the English
# acoustic model, trigram LM and CMUdict its wheel ships (nothing is downloaded).

_sphinx = None
_sphinx_searches: Dict[tuple, str] = {}


def _sphinx_decoder():
    global _sphinx
    if _sphinx is None:
        from pocketsphinx import Decoder  # test/bench dependency only

        _sphinx = Decoder(loglevel="FATAL")
    return _sphinx


def sphinx_grammar(words) -> str:
    """JSGF accepting one or more of `words`, in any order."""
    return f"#JSGF V1.0;\ngrammar words;\npublic <utterance> = ( {' | '.join(sorted(set(words)))} )+ ;\n"


def _sphinx_search(words) -> Optional[str]:
    if words is None:
        return None
    key = tuple(sorted({w.strip().lower() for w in words if w.strip()}))
    name = _sphinx_searches.get(key)
    if name is None:
        dec = _sphinx_decoder()
        unknown = [w for w in key if dec.lookup_word(w) is None]
        if unknown:
            raise NerveError(f"not in the pocketsphinx dictionary: {unknown}")
        name = f"words{len(_sphinx_searches)}"
        dec.add_jsgf_string(name, sphinx_grammar(key))
        _sphinx_searches[key] = name
    return name


def pocketsphinx_recognize(samples_16k: np.ndarray, words=None) -> Tuple[str, float]:
    """(text, decode seconds) of one utterance (16 kHz mono float in [-1, 1]); words=None
    uses its language model, else a grammar over the words."""
    x = np.clip(np.asarray(samples_16k, np.float32).ravel(), -1.0, 1.0)
    pcm = (x * 32767.0).round().astype("<i2").tobytes()
    dec = _sphinx_decoder()
    dec.activate_search(_sphinx_search(words))
    t0 = time.perf_counter()
    dec.start_utt()
    dec.process_raw(pcm, no_search=False, full_utt=True)
    dec.end_utt()
    hyp = dec.hyp()
    return (hyp.hypstr if hyp is not None else ""), time.perf_counter() - t0
