"""The real model of the graph-compiler issue: silero VAD (op18, "ifless"), from the
silero-vad wheel, compiled and run by nerve, against onnxruntime chunk by chunk over
more than 30 s of audio with the state carried — at 16 kHz and at 8 kHz (the model's If on
the sample rate is specialised: both branches live in one plan)."""

from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

import nerve

ort = pytest.importorskip("onnxruntime")

SENTENCES = [
    "Turn left ninety degrees and then go forward two meters.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Robot, stop. Open the gripper and lift the arm slowly.",
    "Voice activity detection decides which parts of a recording contain speech.",
    "Seven, three, nine, one. Move back fifty centimeters.",
]


def silero_path() -> Path:
    spec = importlib.util.find_spec("silero_vad")  # locates the package without importing it (it needs torch)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the silero-vad wheel is not installed (make test installs it: pip install --no-deps silero-vad)")
    return Path(spec.submodule_search_locations[0]) / "data" / "silero_vad_op18_ifless.onnx"


def _resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    n = int(round(len(x) * dst / src))
    return np.interp(np.arange(n) * (src / dst), np.arange(len(x)), x).astype(np.float32)


def _espeak(text: str, sr: int) -> np.ndarray:
    raw = subprocess.run(["espeak-ng", "-s", "150", "--stdout", text], check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(raw)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
        return _resample(pcm, w.getframerate(), sr)


def make_audio(sr: int, seed: int = 0) -> np.ndarray:
    """>= 30 s: synthesized sentences with pauses of silence and of noise between them."""
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed to synthesize the test speech (apt-get install espeak-ng; CI installs it)")
    rng = np.random.default_rng(seed)
    parts = []
    total = 0
    i = 0
    while total < 31 * sr:
        speech = _espeak(SENTENCES[i % len(SENTENCES)], sr) * rng.uniform(0.3, 1.0)
        gap = np.zeros(int(rng.uniform(0.3, 1.5) * sr), np.float32)
        if i % 2:
            gap += rng.normal(0, 0.02, gap.shape).astype(np.float32)  # room noise, no speech
        parts += [speech + rng.normal(0, 0.003, speech.shape).astype(np.float32), gap]
        total += len(speech) + len(gap)
        i += 1
    return np.concatenate(parts)


def chunks(audio: np.ndarray, sr: int):
    """The streaming feed silero expects: the last `context` samples of the previous chunk
    followed by the new ones (64 + 512 at 16 kHz, 32 + 256 at 8 kHz)."""
    step, ctx = (512, 64) if sr == 16000 else (256, 32)
    context = np.zeros(ctx, np.float32)
    for start in range(0, len(audio) - step + 1, step):
        new = audio[start:start + step]
        yield np.concatenate([context, new])[None, :]
        context = new[-ctx:]


@pytest.fixture(scope="module")
def model():
    return silero_path()


@pytest.fixture(scope="module")
def peer(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("sr", [16000, 8000])
def test_parity_over_30s_with_carried_state(model, peer, sr):
    audio = make_audio(sr, seed=sr)
    assert len(audio) >= 30 * sr
    sess = nerve.Session(str(model), dims={"batch": 1, "sequence": 576})
    state_n = np.zeros((2, 1, 128), np.float32)
    state_o = state_n.copy()
    srate = np.array(sr, np.int64)
    probs_n, probs_o = [], []
    for x in chunks(audio, sr):
        out = sess.run({"input": x, "state": state_n, "sr": srate})
        ref_p, ref_s = peer.run(None, {"input": x, "state": state_o, "sr": srate})
        probs_n.append(float(out["output"][0, 0]))
        probs_o.append(float(ref_p[0, 0]))
        state_n, state_o = out["stateN"], ref_s
    probs_n, probs_o = np.array(probs_n), np.array(probs_o)
    worst = np.max(np.abs(probs_n - probs_o))
    assert worst <= 1e-5, f"max |p_nerve - p_onnxruntime| = {worst:.3g} over {len(probs_n)} chunks"
    # the material is meaningful: the model hears both speech and non-speech in it
    assert (probs_o > 0.5).mean() > 0.2 and (probs_o < 0.2).mean() > 0.1


def test_state_bound_in_session_matches_explicit_feeds(model, peer):
    sr = 16000
    audio = make_audio(sr, seed=1)[: 8 * sr]
    bound = nerve.Session(str(model), dims={"batch": 1, "sequence": 576}, state={"stateN": "state"})
    assert "stateN" in bound.output_names  # still an output of the model, just not returned
    state_o = np.zeros((2, 1, 128), np.float32)
    srate = np.array(sr, np.int64)
    first = True
    worst = 0.0
    for x in chunks(audio, sr):
        feeds = {"input": x, "sr": srate}
        if first:
            feeds["state"] = np.zeros((2, 1, 128), np.float32)
            first = False
        out = bound.run(feeds)
        assert set(out) == {"output"}  # the carried state stays inside the session
        ref_p, state_o = peer.run(None, {"input": x, "state": state_o, "sr": srate})
        worst = max(worst, abs(float(out["output"][0, 0]) - float(ref_p[0, 0])))
    assert worst <= 1e-5
    bound.reset_state()
    with pytest.raises(nerve.NerveError, match="state"):
        bound.run({"input": next(chunks(audio, sr)), "sr": srate})


def test_plan_is_fused_and_small(model):
    sess = nerve.Session(str(model), dims={"batch": 1, "sequence": 576})
    types = [op["type"] for op in sess.ops()]
    assert "if" in types  # sr comes from an input: both branches are in the plan
    names = [op["name"] for op in sess.ops() if op["type"] in ("conv", "conv_packed")]
    assert any("relu" in n for n in names), names  # conv + relu fused
    assert types.count("rdft") == 2  # each branch's STFT (a DFT-basis conv) runs as an FFT
    mem = sess.memory_report()
    assert mem["arena_bytes"] < 64 * 1024  # activations of one 576-sample chunk
    # both sample-rate branches' weights, fp32, without the two DFT bases (258x256, 130x128)
    assert 1_600_000 < mem["weight_bytes"] < 2_000_000
