"""Depthwise convolutions (Conv with group = channels, then Clip as in MobileNet) at the shapes
of MobileNetV2, EfficientNet and ConvNeXt: nerve's op time (its profile) against onnxruntime's
whole run (its NCHW <-> NCHWc reorders included), one thread each, medians. Prints a table
for bench/RESULTS.md and checks the two agree.

    python bench/depthwise_convs.py [--repeat 5]

Every shape here takes the dispatched `depthwise_rows` (3x3/5x5/7x7 at stride 1 or 2); run
under `nerve.kernels.force("depthwise_rows", "ref")` (edit main) to time the plane and channel
paths it replaced.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nerve
from nerve.bench import cpu_model, median_us

# channels, input size (square), kernel, stride
SHAPES = [(96, 112, 3, 2), (144, 56, 3, 2), (144, 56, 3, 1), (32, 112, 3, 1), (192, 28, 3, 1), (384, 28, 3, 2),
          (960, 14, 3, 2), (576, 14, 3, 1), (960, 7, 3, 1), (240, 28, 5, 1), (672, 14, 5, 2), (96, 56, 7, 1)]


def model(c: int, h: int, k: int, s: int) -> bytes:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((c, 1, k, k)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k], strides=[s, s],
                              pads=[k // 2] * 4),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds (each 20 runs of both engines)")
    args = ap.parse_args()
    print(f"machine: {cpu_model()}, threads 1, nerve {nerve.__version__}, onnxruntime {ort.__version__}")
    print(f"depthwise_rows variant: {nerve.kernels.selected('depthwise_rows')}")
    print("| depthwise conv | nerve µs (op) | onnxruntime µs | onnxruntime / nerve |")
    print("|---|---|---|---|")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    for c, h, k, s in SHAPES:
        raw = model(c, h, k, s)
        x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
        sess = nerve.Session(raw, threads=1, cache=False)
        peer = ort.InferenceSession(raw, options, providers=["CPUExecutionProvider"])
        want = peer.run(None, {"x": x})[0]
        got = np.asarray(sess.run({"x": x})["y"])
        assert np.allclose(got, want, rtol=1e-5, atol=1e-4 * k * k), f"{c} ch {h}² {k}x{k} s{s}: outputs differ"
        ours, theirs = [], []
        for _ in range(args.repeat):
            sess.profile(True)
            for _ in range(20):
                sess.run({"x": x})
            ours.append(sum(o["total_ns"] for o in sess.ops()) / 20 / 1e3)
            sess.profile(False)
            theirs.append(median_us(lambda: peer.run(None, {"x": x}), 20))
        a, b = float(np.median(ours)), float(np.median(theirs))
        out = (h + s - 1) // s
        print(f"| {k}x{k} s{s}, {c} ch {h} → {out} | {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
