"""How far silero VAD's probabilities move when its weights are rounded, layer group by layer
group and bit width by bit width — the measurement behind the quantization issue's
"every probability within 0.02 of fp32" goal (see tests/python/test_quantize_vad.py).

Each weight is rounded to nearest on a symmetric grid with one scale per output channel
(the W8 format at 127 levels; 63, 255, 511 for 7, 9, 10 bits), the rounded values are written
back into the ONNX model as float32, and the model runs through nerve at fp32 — so the only
difference from fp32 is the weights' rounding: no activation quantisation, no kernel change.
Probabilities are compared chunk by chunk, state carried, on the same held-out audio as the
test (synthesized speech, the two real readings from the model wheels, and those with noise).

    python bench/vad_quant_sensitivity.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import nerve  # noqa: E402
from test_quantize_vad import DIMS, SR16K, _held_out_audio, _probabilities  # noqa: E402
from test_silero_vad import silero_path  # noqa: E402

LSTM = ["model.decoder.rnn.weight_ih", "model.decoder.rnn.weight_hh"]
CONVS = [f"model.encoder.{i}.reparam_conv.weight" for i in range(4)]
BITS = {7: 63, 8: 127, 9: 255, 10: 511}


def round_per_output_channel(w: np.ndarray, levels: int) -> np.ndarray:
    rows = w.reshape(w.shape[0], -1).astype(np.float64)
    scale = np.abs(rows).max(axis=1, keepdims=True) / levels
    scale[scale == 0] = 1.0
    return (np.clip(np.rint(rows / scale), -levels, levels) * scale).reshape(w.shape).astype(np.float32)


def with_rounded(base: onnx.ModelProto, names, levels: int, folder: Path) -> Path:
    model = onnx.ModelProto()
    model.CopyFrom(base)
    for t in model.graph.initializer:
        if t.name in names:
            t.CopyFrom(numpy_helper.from_array(round_per_output_channel(numpy_helper.to_array(t), levels), t.name))
    path = folder / f"silero_{levels}_{len(names)}.onnx"
    onnx.save(model, path)
    return path


def main() -> None:
    base = onnx.load(silero_path())
    audio = _held_out_audio()
    p32 = _probabilities(nerve.Session(silero_path(), dims=DIMS, constants=SR16K), audio)
    print(f"{len(p32)} chunks of held-out audio; |Δp| against fp32")
    print("| weights rounded | bits | max |Δp| | p99 |Δp| | chunks over 0.02 |")
    print("|---|---|---|---|---|")
    # the floor: the same fp32 model run by onnxruntime (sums in another order)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    ort_sess = ort.InferenceSession(str(silero_path()), options, providers=["CPUExecutionProvider"])

    class _Ort:
        def run(self, feeds):
            names = [o.name for o in ort_sess.get_outputs()]
            return dict(zip(names, ort_sess.run(None, {**feeds, **SR16K})))

    d = np.abs(_probabilities(_Ort(), audio) - p32)
    print(f"| none (onnxruntime fp32) | 32 | {d.max():.4f} | {np.percentile(d, 99):.4f} | {int((d > 0.02).sum())} |")
    groups = [("LSTM (2 products)", LSTM)] + [(f"conv {i}", [c]) for i, c in enumerate(CONVS)]
    with tempfile.TemporaryDirectory() as tmp:
        for label, names in groups:
            for bits, levels in BITS.items():
                if label != groups[0][0] and bits != 8:
                    continue
                sess = nerve.Session(with_rounded(base, names, levels, Path(tmp)), dims=DIMS, constants=SR16K)
                d = np.abs(_probabilities(sess, audio) - p32)
                print(f"| {label} | {bits} | {d.max():.4f} | {np.percentile(d, 99):.4f} | {int((d > 0.02).sum())} |")


if __name__ == "__main__":
    main()
