"""Key/value caches kept in the session and appended in place (compiler/kv_append.py,
op kv_append, matmul b_interleaved): a decoder-shaped attention step run token by token
matches onnxruntime fed the growing cache by hand."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve
from nerve.compiler.kv_append import STATE_APPEND

H, D = 3, 13


def attention_step_model(tmp_path, extra_reader: bool = False):
    """One self-attention step: q, k, v of the new token [1, H, 1, D]; caches past_k/past_v
    [1, H, P, D] -> present = Concat(past, new, axis 2); scores q·(c·present_kᵀ), softmax,
    ·present_v. extra_reader: present_k also feeds a ReduceSum output (blocks the rewrite)."""
    nodes = [
        h.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
        h.make_node("Concat", ["past_v", "v"], ["present_v"], axis=-2),
        h.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("Mul", ["kt", "c"], ["kts"]),
        h.make_node("MatMul", ["q", "kts"], ["scores"]),
        h.make_node("Softmax", ["scores"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "present_v"], ["out"]),
    ]
    outputs = [h.make_tensor_value_info("out", T.FLOAT, [1, H, 1, D]),
               h.make_tensor_value_info("present_k", T.FLOAT, [1, H, "p1", D]),
               h.make_tensor_value_info("present_v", T.FLOAT, [1, H, "p1", D])]
    if extra_reader:
        nodes.append(h.make_node("ReduceSum", ["present_k", "ax"], ["ksum"], keepdims=0))
        outputs.append(h.make_tensor_value_info("ksum", T.FLOAT, None))
    inputs = [h.make_tensor_value_info(n, T.FLOAT, [1, H, 1, D]) for n in ("q", "k", "v")]
    inputs += [h.make_tensor_value_info(n, T.FLOAT, [1, H, "p", D]) for n in ("past_k", "past_v")]
    g = h.make_graph(nodes, "attn", inputs, outputs,
                     [nh.from_array(np.array([0.25], np.float32), "c"), nh.from_array(np.array([1, 2], np.int64), "ax")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / ("attn_extra.onnx" if extra_reader else "attn.onnx")
    onnx.save(m, path)
    return path


def ort_session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("extra_reader", [False, True])
@pytest.mark.parametrize("start", [0, 4])
def test_cache_appended_in_place_matches_onnxruntime(tmp_path, rng, extra_reader, start):
    path = attention_step_model(tmp_path, extra_reader)
    bound = 24
    plan = nerve.compile(path, dims={"p": bound}, state={"present_k": "past_k", "present_v": "past_v"})
    s = nerve.Session(plan)
    types = [op["type"] for op in s.ops()]
    if extra_reader:  # another reader of the cache: left as a concat, double-buffered
        assert types.count("kv_append") == 1 and types.count("concat") == 1
    else:
        assert types.count("kv_append") == 2 and "concat" not in types and "transpose" not in types
    ref = ort_session(path)
    past_k = rng.standard_normal((1, H, start, D)).astype(np.float32)
    past_v = rng.standard_normal((1, H, start, D)).astype(np.float32)
    for step in range(bound - start + 1):  # up to a cache of bound + 1 rows (p = bound)
        q, k, v = (rng.standard_normal((1, H, 1, D)).astype(np.float32) for _ in range(3))
        feeds = {"q": q, "k": k, "v": v}
        if step == 0:  # the first step is fed the cache (reordered into the session's buffer)
            feeds.update(past_k=past_k, past_v=past_v)
        got = s.run(feeds)
        want = dict(zip([o.name for o in ref.get_outputs()],
                        ref.run(None, {"q": q, "k": k, "v": v, "past_k": past_k, "past_v": past_v})))
        np.testing.assert_allclose(got["out"], want["out"], rtol=1e-5, atol=1e-6)
        if extra_reader:
            np.testing.assert_allclose(got["ksum"], want["ksum"], rtol=1e-4, atol=1e-4)
        past_k, past_v = want["present_k"], want["present_v"]
    with pytest.raises(nerve.InputError, match="bound"):  # the cache is full: a clear error
        s.run({"q": q, "k": k, "v": v})


def test_append_pairs_hold_one_buffer(tmp_path):
    path = attention_step_model(tmp_path)
    state = {"present_k": "past_k", "present_v": "past_v"}
    appended = nerve.Session(nerve.compile(path, dims={"p": 100}, state=state))
    plain = nerve.Session(nerve.compile(path, dims={"p": 100}, state=state, fuse=False))
    cache_bytes = 2 * (100 + 1) * H * D * 4
    assert cache_bytes <= appended.memory_report()["state_bytes"] < 1.2 * cache_bytes
    assert plain.memory_report()["state_bytes"] >= 2 * cache_bytes  # double buffers
    assert STATE_APPEND == 1
