"""Moonshine tiny-en (from the moonshine-voice wheel: opset 18, onnxruntime's dynamic-
quantization contrib ops, attention masks) run by nerve, against onnxruntime.

Two references: onnxruntime on the model as shipped (it rounds each product's activations
to uint8 first) and onnxruntime on the same model with that dynamic quantization undone
(helpers.undo_dynamic_quantization: the int8 weights dequantised, float activations — the
arithmetic nerve runs). Against the second, tensors agree within 1e-4 relative and the
transcripts token for token; against the first, the transcripts of the real recordings
(readings of Beckett and Dickens shipped in the wheels) agree.
"""

from __future__ import annotations

import numpy as np
import pytest

import nerve.audio
from helpers import undo_dynamic_quantization
from nerve.asr import models
from nerve.asr.moonshine import ARCHS, MoonshineDecoder, MoonshineModel
from nerve.asr.recognizer import Recognizer, shared_model

ort = pytest.importorskip("onnxruntime")

SR = 16000
ARCH = ARCHS["moonshine-tiny"]


@pytest.fixture(scope="module")
def tiny():
    models.fetch("moonshine-tiny")  # idempotent: present after `make test`'s set-up
    return shared_model("moonshine-tiny")


@pytest.fixture(scope="module")
def float_steps(tiny, tmp_path_factory):
    """OrtSteps on the tiny model with its dynamic quantization undone."""
    from nerve.asr.peers import OrtSteps
    from nerve.compiler.ort_format import load_ort

    folder = tmp_path_factory.mktemp("tiny-float")
    for name in ("encoder_model", "decoder_model_merged"):
        m = undo_dynamic_quantization(load_ort(tiny.folder / f"{name}.ort"))
        (folder / f"{name}.onnx").write_bytes(m.SerializeToString())
    return OrtSteps(folder, arch=ARCH)


@pytest.fixture(scope="module")
def recordings():
    """Real human speech: the Beckett reading (moonshine-cpp) and the first 40 s of a
    Dickens reading (moonshine-voice)."""
    beckett, rate = nerve.audio.read_wav(models.model_file("moonshine-base", "test-data/beckett.wav"))
    assert rate == SR
    dickens = nerve.audio.load_audio(models.model_file("moonshine-tiny", "moonshine_voice/assets/two_cities.wav"))
    return {"beckett": beckett, "dickens": dickens[: 40 * SR]}


def rel_err(a, b) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def test_tiny_encoder_matches_the_float_reference(tiny, float_steps, recordings, rng):
    dec = tiny.decoder()
    try:
        beckett = recordings["beckett"]
        for n in (1600, SR * 2 + 111, len(beckett)):
            x = (beckett[:n] if n != 1600 else rng.standard_normal(n).astype(np.float32) * 0.1).reshape(1, -1)
            got, want = dec.steps.encode(x), float_steps.encode(x)
            assert got.shape == want.shape == (1, MoonshineModel.encoder_frames(n), ARCH.hidden)
            assert rel_err(got, want) < 1e-4
    finally:
        tiny.release(dec)


def test_tiny_decoder_steps_match_the_float_reference(tiny, float_steps, recordings, rng):
    dec = tiny.decoder()
    try:
        states = float_steps.encode(recordings["beckett"][: SR * 9].reshape(1, -1))  # > 384 frames
        lg, past, cross = dec.steps.first_step(states)
        lw, pw, cw = float_steps.first_step(states)
        assert rel_err(lg, lw) < 1e-4
        for k in cw:
            assert rel_err(cross[k], cw[k]) < 1e-4
        for t in (int(x) for x in rng.integers(3, 30000, size=5)):
            lg, past = dec.steps.next_step(t, states, past, cross)
            lw, pw = float_steps.next_step(t, states, pw, cw)
            assert rel_err(lg, lw) < 1e-4
    finally:
        tiny.release(dec)


def test_tiny_transcripts_equal_onnxruntime(tiny, float_steps, recordings):
    """The recogniser's finals on real recordings: token for token the float reference's, and
    the text of onnxruntime running the model as shipped."""
    from nerve.asr.peers import ort_decoder

    rec = Recognizer(model="moonshine-tiny", partial_ms=0)
    reference = MoonshineDecoder(tiny, steps=float_steps)
    shipped = ort_decoder(tiny)
    agree = total = 0
    for name, audio in recordings.items():
        finals = rec.transcribe(audio, sample_rate=SR)
        assert finals, name
        for ev in finals:
            seg = audio[round(ev.start_s * SR):round(ev.end_s * SR)]
            assert ev.text == rec._text(reference.transcribe(seg).text), (name, ev.start_s)
            agree += ev.text == rec._text(shipped.transcribe(seg).text)
            total += 1
    assert total >= 4 and agree / total >= 0.75, f"{agree} of {total} finals equal onnxruntime's"
    joined = " ".join(e.text.lower() for e in rec.transcribe(recordings["beckett"], sample_rate=SR))
    for word in ("ever", "tried", "failed", "again", "better"):
        assert word in joined


def test_tiny_is_smaller_and_keeps_int8_weights(tiny):
    base = shared_model("moonshine-base", "int8")
    tiny8 = shared_model("moonshine-tiny", "int8")
    from nerve.session import Session

    sizes = {n: Session(m.encoder_plan).memory_report()["weight_bytes"] for n, m in
             (("base", base), ("tiny", tiny8))}
    assert sizes["tiny"] < sizes["base"] / 2
