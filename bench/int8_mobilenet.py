"""An int8 MobileNetV2 as onnxruntime's quantizer writes it, nerve against onnxruntime.

MobileNetV2 (224², random weights, BatchNorm folded, ReLU6 as Clip) is built with onnx.helper,
then quantized by onnxruntime's `quantize_static` (u8 activations, s8 weights, 4 random
calibration images) in both of its formats: QDQ (its default) and QOperator. Each model runs
in nerve and in onnxruntime in this process, one engine at a time, blocks of runs alternating
(medians of the blocks' medians, ms); nerve's outputs are compared with onnxruntime's. With
--profile, nerve's per-op time (its session profile) is summed by op type.

    python bench/int8_mobilenet.py [--threads 1] [--rounds 6] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime import quantization

import nerve
from nerve.bench import cpu_model

# MobileNetV2's inverted residual stages: expansion t, channels c, repeats n, first stride s
STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


class _Graph:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.count = rng, [], [], 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: np.ndarray, prefix: str) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, group: int = 1, relu6: bool = True) -> str:
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        y = self.name("conv")
        self.nodes.append(helper.make_node("Conv", [x, self.const(w, "w"), self.const(b, "b")], [y],
                                           kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
                                           group=group))
        if not relu6:
            return y
        z = self.name("relu6")
        lo, hi = self.const(np.array(0, np.float32), "lo"), self.const(np.array(6, np.float32), "hi")
        self.nodes.append(helper.make_node("Clip", [y, lo, hi], [z]))
        return z


def mobilenet_v2(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(np.random.default_rng(seed))
    x, cin = g.conv("x", 3, 32, 3, 2), 32
    for t, c, n, s in STAGES:
        for i in range(n):
            stride = s if i == 0 else 1
            y = x if t == 1 else g.conv(x, cin, cin * t, 1, 1)
            y = g.conv(y, cin * t, cin * t, 3, stride, group=cin * t)
            y = g.conv(y, cin * t, c, 1, 1, relu6=False)
            if stride == 1 and cin == c:
                z = g.name("add")
                g.nodes.append(helper.make_node("Add", [x, y], [z]))
                y = z
            x, cin = y, c
    x = g.conv(x, cin, 1280, 1, 1)
    g.nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"]),
                helper.make_node("Flatten", ["pooled"], ["flat"])]
    fc_w = g.const((g.rng.standard_normal((1000, 1280)) * 0.03).astype(np.float32), "fc_w")
    fc_b = g.const(np.zeros(1000, np.float32), "fc_b")
    g.nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], transB=1))
    graph = helper.make_graph(g.nodes, "mobilenet_v2",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def quantized(folder: Path, fmt) -> Path:
    """The fp32 model quantized by onnxruntime (u8 activations, s8 weights) in format fmt."""
    f32, out = folder / "mobilenet_v2.onnx", folder / f"mobilenet_v2_{fmt.name.lower()}.onnx"
    if not f32.exists():
        onnx.save(mobilenet_v2(), f32)
    rng = np.random.default_rng(1)

    class Images(quantization.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantization.quantize_static(str(f32), str(out), Images(), quant_format=fmt)
    return out


def _block_ms(run, seconds: float) -> float:
    for _ in range(3):
        run()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def profile_by_type(sess: nerve.Session, feeds, runs: int = 20) -> dict:
    sess.profile(True)
    for _ in range(runs):
        sess.run(feeds)
    by_type = collections.Counter()
    for op in sess.ops():
        by_type[op["type"]] += op["total_ns"] / runs / 1e3
    sess.profile(False)
    return dict(by_type.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    print(f"machine: {cpu_model()}; threads {args.threads}; onnxruntime {ort.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in (quantization.QuantFormat.QDQ, quantization.QuantFormat.QOperator):
            path = quantized(Path(tmp), fmt)
            feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)}
            sess = nerve.Session(path, threads=args.threads, cache=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.log_severity_level = 3
            peer = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            got, want = sess.run(feeds)["logits"], peer.run(None, feeds)[0]
            blocks = {"nerve": [], "onnxruntime": []}
            engines = [("nerve", lambda: sess.run(feeds)), ("onnxruntime", lambda: peer.run(None, feeds))]
            for r in range(args.rounds):
                for name, run in engines if r % 2 == 0 else engines[::-1]:
                    blocks[name].append(_block_ms(run, 0.4))
            n_ms, o_ms = statistics.median(blocks["nerve"]), statistics.median(blocks["onnxruntime"])
            print(f"{fmt.name:9s} nerve {n_ms:6.2f} ms  onnxruntime {o_ms:6.2f} ms  "
                  f"onnxruntime/nerve {o_ms / n_ms:4.2f}  max |logit diff| {float(np.abs(got - want).max()):.3g} "
                  f"(logits up to {float(np.abs(want).max()):.3g})")
            if args.profile:
                print("  nerve op time by type, us:",
                      ", ".join(f"{t} {us:.0f}" for t, us in profile_by_type(sess, feeds).items()))


if __name__ == "__main__":
    main()
