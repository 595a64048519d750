"""The quantization issue's real check on silero VAD: nerve.quantize(scheme="w8a8") with
calibration audio, then every probability against the fp32 model on held-out audio — two
real recordings (Beckett and Endgame readings from the model wheels; also with noise) and
synthesized sentences, none of it used for calibration.

Calibration: the example WAVs (festival and flite voices) and four espeak-ng voices reading
other sentences, with silent and noisy gaps. The auto policy scores each layer alone: the
convolutions' per-position int8 activations cost the most (one alone moves probabilities by
up to 0.57) and stay fp32 within the 0.6 budget; the LSTM's two products take int8 weights
from GPTQ on the calibration Hessians and int8 activations (linear_w8a8, one row per chunk).

Measured (2026-12-04): decisions equal on 99.9-100% of chunks, p99 |Δp| 0.005-0.007 with the
products' activations fp32 (linear_w8, as the compiler ran one-row products then) and 0.010
with them int8, max |Δp| 0.015-0.031 depending on the calibration set. The issue's goal of max |Δp| <= 0.02 is
not met on real recordings, and no 8-bit weight format meets it: bench/vad_quant_sensitivity.py
rounds the LSTM's weights alone (no activation rounding) and gets max 0.029 at 8 bits, 0.040 at
9, 0.007 only at 10 — a few chunks near a transition are that sensitive (bench/RESULTS.md). The
bounds below are the measured ones with a margin, the decision rate is the issue's."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path

import numpy as np
import pytest

import nerve
from nerve.asr import models
from nerve.audio import load_audio

from test_silero_vad import chunks, make_audio, silero_path

REPO = Path(__file__).resolve().parents[2]
DIMS = {"batch": 1, "sequence": 576}
SR16K = {"sr": np.array(16000, np.int64)}
CALIBRATION_SENTENCES = ["Please bring me the red cup from the kitchen table.",
                         "How far is the charging station from here?",
                         "Lower the arm by twenty degrees and wait.",
                         "Nobody expects a robot to sing, but it can try."]


def _espeak(text: str, voice: str) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "--stdout", text], check=True,
                         capture_output=True).stdout
    return load_audio(wav)


def _calibration_audio() -> np.ndarray:
    rng = np.random.default_rng(3)
    examples = np.concatenate([load_audio(f) for f in sorted(glob.glob(str(REPO / "examples/audio/*.wav")))])
    parts = [examples, 0.3 * examples + rng.normal(0, 0.01, examples.shape).astype(np.float32)]
    for i, text in enumerate(CALIBRATION_SENTENCES * 2):
        voice = ["en-us", "en-gb-x-rp", "en-us+f3", "en-029"][i % 4]
        parts.append(_espeak(text, voice) * rng.uniform(0.2, 1.0))
        parts.append(rng.normal(0, [0.0, 0.01, 0.03][i % 3], int(16000 * rng.uniform(0.3, 1.2))).astype(np.float32))
    return np.concatenate(parts)


def _held_out_audio() -> np.ndarray:
    real = np.concatenate([load_audio(models.model_file("moonshine-base", "test-data/beckett.wav")),
                           load_audio(models.model_file("moonshine-tiny",
                                                        "moonshine_voice/assets/endgame_nagg_nell.wav"))])
    noisy = real + np.random.default_rng(9).normal(0, 0.02, real.shape).astype(np.float32)
    return np.concatenate([make_audio(16000, seed=5), real, noisy])


def _probabilities(sess, audio, feeds_out=None) -> np.ndarray:
    """Chunk by chunk with the state carried; feeds_out collects each chunk's feeds."""
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for chunk in chunks(audio, 16000):
        feeds = {"input": chunk, "state": state}
        if feeds_out is not None:
            feeds_out.append(feeds)
        out = sess.run(feeds)
        state = out["stateN"]
        probs.append(float(out["output"].reshape(-1)[0]))
    return np.array(probs)


@pytest.fixture(scope="module")
def quantized():
    model = silero_path()
    fp32 = nerve.Session(model, dims=DIMS, constants=SR16K)
    calibration = []
    _probabilities(fp32, _calibration_audio(), calibration)
    plan = nerve.quantize(model, "w8a8", calibration, policy="auto", budget=0.6, dims=DIMS, constants=SR16K,
                          progress=False)
    return fp32, plan


def test_w8a8_vad_keeps_its_decisions(quantized):
    fp32, plan = quantized
    report = plan.report
    assert report["method"] == "gptq"
    layers = report["layers"]
    ranked = sorted(layers, key=lambda n: layers[n]["alone"]["snr_db"])
    int8 = [n for n in layers if layers[n]["precision"] == "w8a8"]
    assert int8, "nothing was quantized"
    # the most sensitive layer stays fp32, the least sensitive is quantized, each as the plan runs it
    assert layers[ranked[0]]["precision"] == "fp32" and layers[ranked[-1]]["precision"] == "w8a8"
    kinds = {o["name"]: o["type"] for o in nerve.Session(plan).ops()}
    assert all(kinds[n] in ("linear_w8", "linear_w8a8", "conv_w8a8") for n in int8)
    assert report["weight_bytes"]["chosen"] <= 0.6 * report["weight_bytes"]["fp32"]

    audio = _held_out_audio()
    p32 = _probabilities(fp32, audio)
    p8 = _probabilities(nerve.Session(plan), audio)
    diff = np.abs(p8 - p32)
    same = float(np.mean((p8 > 0.5) == (p32 > 0.5)))
    print(f"{len(p32)} chunks: max |Δp| {diff.max():.4f}, p99 {np.percentile(diff, 99):.4f}, decisions {same:.4f}")
    assert same >= 0.99                              # the decision goal
    assert np.percentile(diff, 99) <= 0.012          # measured 0.010 (0.005-0.007 with fp32 activations)
    assert diff.max() <= 0.05                        # measured 0.015-0.031 (the issue asks 0.02: not met)
