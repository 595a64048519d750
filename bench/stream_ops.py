"""One decoding step of the stateful ONNX ops (opsets 24 and 27), nerve against onnxruntime in
the same run, medians over repeats, one thread each:

- TensorScatter: a KV cache [1, H, L, D] of fixed length, one token written per step. nerve
  keeps the cache as session state in one buffer and writes the token's rows in place;
  onnxruntime runs with IO binding, past and present bound to one OrtValue (its in-place
  path) and, for comparison, with the cache fed and returned as numpy arrays.
- LinearAttention (gated_delta, per-head decay) and CausalConvWithState: one token (decode)
  and a prefill of many, the state kept in the nerve session; onnxruntime keeps its state in
  two OrtValues bound by IO binding, each step's output the next step's input.

    python bench/stream_ops.py [--repeats 200]
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve
from nerve.bench import cpu_model, median_us

F32 = np.float32


def _model(node, inputs, outputs, inits=None, opset=27):
    g = h.make_graph([node], "g", [h.make_tensor_value_info(n, T.FLOAT if d is None else d, s) for n, s, d in inputs],
                     [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs],
                     [nh.from_array(v, k) for k, v in (inits or {}).items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 11
    return m


def _ort_session(m):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def bench_tensor_scatter(repeats: int, heads=8, length=2048, dim=64):
    m = _model(h.make_node("TensorScatter", ["past", "new", "w"], ["present"]),
               [("past", [1, heads, length, dim], None), ("new", [1, heads, 1, dim], None), ("w", [1], T.INT64)],
               ["present"], opset=24)
    rng = np.random.default_rng(0)
    cache = np.zeros((1, heads, length, dim), F32)
    new = rng.normal(size=(1, heads, 1, dim)).astype(F32)
    pos = [0]

    sess = nerve.Session(m, state={"present": "past"}, threads=1, cache=False)
    sess.run({"past": cache, "new": new, "w": np.array([0])})

    def nerve_step():
        pos[0] = (pos[0] + 1) % length
        sess.run({"new": new, "w": np.array([pos[0]])})

    ref = _ort_session(m)
    past_value = ort.OrtValue.ortvalue_from_numpy(cache.copy())
    binding = ref.io_binding()
    binding.bind_ortvalue_input("past", past_value)
    binding.bind_ortvalue_output("present", past_value)  # one buffer: onnxruntime's in-place path

    def ort_inplace_step():
        pos[0] = (pos[0] + 1) % length
        binding.bind_cpu_input("new", new)
        binding.bind_cpu_input("w", np.array([pos[0]]))
        ref.run_with_iobinding(binding)

    state = [cache.copy()]

    def ort_numpy_step():
        pos[0] = (pos[0] + 1) % length
        state[0] = ref.run(None, {"past": state[0], "new": new, "w": np.array([pos[0]])})[0]

    mib = cache.nbytes / 2 ** 20
    return [(f"TensorScatter, cache [1, {heads}, {length}, {dim}] ({mib:.0f} MiB), 1 token", median_us(nerve_step, repeats),
             median_us(ort_inplace_step, repeats), "in place (IO binding)"),
            ("", None, median_us(ort_numpy_step, repeats), "cache fed as numpy")]


def _ort_state_steps(ref, feeds, state_in: str, state_out: str, state0: np.ndarray):
    """onnxruntime at its best from Python: the state stays in two OrtValues bound by IO
    binding, the output of one step bound as the next step's input (no numpy round trip)."""
    values = [ort.OrtValue.ortvalue_from_numpy(state0.copy()), ort.OrtValue.ortvalue_from_numpy(state0.copy())]
    binding = ref.io_binding()
    for name, a in feeds.items():
        binding.bind_cpu_input(name, a)
    for o in ref.get_outputs():
        if o.name != state_out:
            binding.bind_output(o.name)
    turn = [0]

    def step():
        binding.bind_ortvalue_input(state_in, values[turn[0]])
        binding.bind_ortvalue_output(state_out, values[1 - turn[0]])
        ref.run_with_iobinding(binding)
        turn[0] = 1 - turn[0]
    return step


def bench_linear_attention(repeats: int, heads=16, dk=128, dv=128, tokens=1):
    m = _model(h.make_node("LinearAttention", ["q", "k", "v", "past", "g", "beta"], ["y", "present"],
                           q_num_heads=heads, kv_num_heads=heads, update_rule="gated_delta"),
               [("q", [1, tokens, heads * dk], None), ("k", [1, tokens, heads * dk], None),
                ("v", [1, tokens, heads * dv], None), ("past", [1, heads, dk, dv], None),
                ("g", [1, tokens, heads], None), ("beta", [1, tokens, heads], None)], ["y", "present"])
    rng = np.random.default_rng(1)
    k = rng.normal(size=(1, tokens, heads, dk))
    feeds = {"q": rng.normal(size=(1, tokens, heads * dk)), "k": (k / np.linalg.norm(k, axis=-1, keepdims=True)).reshape(1, tokens, -1),
             "v": rng.normal(size=(1, tokens, heads * dv)), "g": np.log(rng.uniform(0.9, 1, (1, tokens, heads))),
             "beta": rng.uniform(0, 1, (1, tokens, heads))}
    feeds = {n: a.astype(F32) for n, a in feeds.items()}
    past = np.zeros((1, heads, dk, dv), F32)
    sess = nerve.Session(m, state={"present": "past"}, threads=1, cache=False)
    sess.run({**feeds, "past": past})
    ref = _ort_session(m)
    mib = past.nbytes / 2 ** 20
    return [(f"LinearAttention gated_delta, {heads} heads {dk}x{dv} ({mib:.0f} MiB state), {tokens} token(s)",
             median_us(lambda: sess.run(feeds), repeats),
             median_us(_ort_state_steps(ref, feeds, "past", "present", past), repeats), "state in OrtValues (IO binding)")]


def bench_causal_conv(repeats: int, channels=4096, k=4, tokens=1):
    rng = np.random.default_rng(2)
    m = _model(h.make_node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "present"], activation="silu"),
               [("x", [1, channels, tokens], None), ("past", [1, channels, k - 1], None)], ["y", "present"],
               {"w": rng.normal(size=(channels, 1, k)).astype(F32), "b": rng.normal(size=channels).astype(F32)})
    x = rng.normal(size=(1, channels, tokens)).astype(F32)
    past = np.zeros((1, channels, k - 1), F32)
    sess = nerve.Session(m, state={"present": "past"}, threads=1, cache=False)
    sess.run({"x": x, "past": past})
    ref = _ort_session(m)
    return [(f"CausalConvWithState, {channels} channels, k {k}, SiLU, {tokens} token(s)",
             median_us(lambda: sess.run({"x": x}), repeats),
             median_us(_ort_state_steps(ref, {"x": x}, "past", "present", past), repeats), "state in OrtValues (IO binding)")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    rows = bench_tensor_scatter(args.repeats)
    rows += bench_linear_attention(args.repeats) + bench_linear_attention(max(args.repeats // 10, 5), tokens=256)
    rows += bench_causal_conv(args.repeats) + bench_causal_conv(args.repeats, tokens=256)
    print(f"{cpu_model()}; nerve {nerve.__version__}, onnxruntime {ort.__version__}; one thread, medians of "
          f"{args.repeats} steps (prefills: fewer)")
    print("| op, shapes | nerve µs | onnxruntime µs | ratio | onnxruntime run |")
    print("|---|---|---|---|---|")
    for what, ours, theirs, how in rows:
        ratio = f"{theirs / ours:.2f}x" if ours else ""
        print(f"| {what} | {f'{ours:.1f}' if ours else ''} | {theirs:.1f} | {ratio} | {how} |")


if __name__ == "__main__":
    main()
