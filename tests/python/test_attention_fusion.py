"""The fused attention op (the compiler's fuse_attention; op "attention" in op_linalg.c):
softmax(scale(Q·Kᵀ) + bias)·V, with torch's NaN guard after the softmax, run per block of
query rows with the block's scores in scratch. Which graphs fuse (masks and position biases
broadcast to the scores; not a bias that would broadcast the scores up), the result against
float64 at awkward sizes (partial row blocks, few keys, wide values, Kᵀ folded or fed, fully
masked rows), bit-identical to the unfused ops and across thread counts, torch's own exports
fused, and the op's own checks."""

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402
from nerve.compiler.graph import Op, Program, Value  # noqa: E402
from nerve.session import run_program_once  # noqa: E402


def _op_types(sess):
    return [o["type"] for o in sess.ops()]


def _attention_model(b, h, m, t, d, dv, scale_op, trans_k_node, extra=None, bias_shape=None, bias_first=False,
                     guard=False):
    """softmax(scale(Q·Kᵀ) [+ bias])·V with Q [b, h, m, d], K [b, h, t, d] (a Transpose node
    when trans_k_node, else fed as [b, h, d, t]), V [b, h, t, dv]; scale_op None, "Mul" or
    "Div". extra="mask": a zero [1, 1, m, t] initializer added; bias_shape: a fed input "bias"
    added (bias_first: as Add's first operand); guard: torch's Where(IsNaN(p), 0, p) after the
    softmax."""
    nodes, inits, extra_inputs = [], [], []
    if trans_k_node:
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("MatMul", ["q", "kt" if trans_k_node else "k"], ["s"]))
    src = "s"
    if scale_op:
        nodes.append(helper.make_node(scale_op, ["s", "c"], ["ss"]))
        inits.append(numpy_helper.from_array(np.float32(8.0 if scale_op == "Div" else 0.125), "c"))
        src = "ss"
    if extra == "mask":
        nodes.append(helper.make_node("Add", [src, "mask"], ["sm_in"]))
        inits.append(numpy_helper.from_array(np.zeros((1, 1, m, t), np.float32), "mask"))
        src = "sm_in"
    if bias_shape is not None:
        nodes.append(helper.make_node("Add", ["bias", src] if bias_first else [src, "bias"], ["biased"]))
        extra_inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, list(bias_shape)))
        src = "biased"
    nodes.append(helper.make_node("Softmax", [src], ["p"], axis=-1))
    if guard:
        nodes.append(helper.make_node("IsNaN", ["p"], ["nan"]))
        nodes.append(helper.make_node("Where", ["nan", "zero", "p"], ["pg"]))
        inits.append(numpy_helper.from_array(np.float32(0.0), "zero"))
    nodes.append(helper.make_node("MatMul", ["pg" if guard else "p", "v"], ["y"]))
    k_shape = [b, h, t, d] if trans_k_node else [b, h, d, t]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, h, m, d]),
                                          helper.make_tensor_value_info("k", TensorProto.FLOAT, k_shape),
                                          helper.make_tensor_value_info("v", TensorProto.FLOAT, [b, h, t, dv])]
                          + extra_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("b,h,m,t,d,dv,scale_op,trans_k_node", [
    (1, 6, 150, 150, 64, 64, "Div", True),     # a Whisper-style layer (Kᵀ folded into the product)
    (2, 3, 65, 97, 13, 7, "Mul", False),       # K fed transposed; a partial row block
    (1, 1, 1, 1, 1, 1, None, True),
    (1, 2, 130, 3, 8, 130, None, False),       # few keys, wide values, three row blocks
])
def test_attention_fusion_matches_float64(tmp_path, rng, b, h, m, t, d, dv, scale_op, trans_k_node):
    path = tmp_path / "attn.onnx"
    path.write_bytes(_attention_model(b, h, m, t, d, dv, scale_op, trans_k_node).SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert _op_types(sess) == ["attention"]
    q = rng.standard_normal((b, h, m, d)).astype(np.float32)
    k = rng.standard_normal((b, h, t, d) if trans_k_node else (b, h, d, t)).astype(np.float32)
    v = rng.standard_normal((b, h, t, dv)).astype(np.float32)
    kt = np.swapaxes(k, -1, -2) if trans_k_node else k
    s = q.astype(np.float64) @ kt.astype(np.float64)
    s = s / 8.0 if scale_op == "Div" else s * 0.125 if scale_op == "Mul" else s
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    got = sess.run({"q": q, "k": k, "v": v})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(nerve.Session(path, cache=False, threads=3).run({"q": q, "k": k, "v": v})["y"], got)
    if m > 2:  # the unfused ops (fuse=False) compute every output the same way (one or two rows: their own loop)
        unfused = nerve.Session(path, cache=False, fuse=False)
        assert "attention" not in _op_types(unfused)
        np.testing.assert_array_equal(unfused.run({"q": q, "k": k, "v": v})["y"], got)


def _reference(q, k, v, scale, bias):
    """float64 softmax(scale·(Q·Kᵀ) + bias)·V, a row with every key masked giving zeros."""
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale + bias
    top = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    total = p.sum(-1, keepdims=True)
    return np.divide(p, total, out=np.zeros_like(p), where=total > 0) @ v.astype(np.float64)


@pytest.mark.parametrize("b,h,m,t,bias_shape,bias_first", [
    (2, 3, 70, 37, (2, 1, 1, 37), False),    # a padding mask per batch entry, broadcast over heads and rows
    (1, 4, 13, 13, (4, 13, 13), True),       # a position bias per head (rank 3), bias + scores
    (2, 2, 65, 66, (2, 2, 65, 66), False),   # a full bias
    (1, 2, 5, 129, (129,), False),           # one row over the keys (rank 1)
    (3, 1, 1, 7, (3, 1, 1, 1), False),       # one value per batch entry: both trailing dims broadcast
])
def test_masked_attention_fuses_and_matches_float64(tmp_path, rng, b, h, m, t, bias_shape, bias_first):
    """The mask or bias rides along in the fused op: the same numbers as float64 and as the
    unfused ops (bit for bit), a row whose keys are all masked gives zeros through the guard."""
    d, dv = 16, 11
    path = tmp_path / "attn.onnx"
    path.write_bytes(_attention_model(b, h, m, t, d, dv, "Mul", True, bias_shape=bias_shape, bias_first=bias_first,
                                      guard=True).SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert _op_types(sess) == ["attention"]
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((b, h, m, d), (b, h, t, d), (b, h, t, dv)))
    bias = rng.standard_normal(bias_shape).astype(np.float32)
    if len(bias_shape) == 4 and bias_shape[-1] == t and bias_shape[-2] == 1:  # padding: the last keys masked
        bias[..., t // 2:] = -np.inf
        bias[-1, ...] = -np.inf  # a batch entry with every key masked: its rows give zeros
    feeds = {"q": q, "k": k, "v": v, "bias": bias}
    got = sess.run(feeds)["y"]
    np.testing.assert_allclose(got, _reference(q, k, v, 0.125, bias), rtol=1e-5, atol=1e-5)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(nerve.Session(path, cache=False, threads=2).run(feeds)["y"], got)
    if m > 2:
        unfused = nerve.Session(path, cache=False, fuse=False)
        assert "softmax" in _op_types(unfused)
        np.testing.assert_array_equal(unfused.run(feeds)["y"], got)


def test_nan_without_the_guard_stays_nan(tmp_path, rng):
    """No guard: a fully masked row is the softmax's NaN, as onnxruntime gives it."""
    path = tmp_path / "attn.onnx"
    path.write_bytes(_attention_model(1, 1, 3, 5, 4, 4, None, True, bias_shape=(1, 1, 3, 5)).SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert _op_types(sess) == ["attention"]
    bias = np.zeros((1, 1, 3, 5), np.float32)
    bias[0, 0, 1] = -np.inf
    feeds = {"q": rng.standard_normal((1, 1, 3, 4)).astype(np.float32),
             "k": rng.standard_normal((1, 1, 5, 4)).astype(np.float32),
             "v": rng.standard_normal((1, 1, 5, 4)).astype(np.float32), "bias": bias}
    got = sess.run(feeds)["y"]
    assert np.isnan(got[0, 0, 1]).all() and np.isfinite(got[0, 0, [0, 2]]).all()
    np.testing.assert_array_equal(nerve.Session(path, cache=False, fuse=False).run(feeds)["y"], got)


def test_a_bias_that_broadcasts_the_scores_up_is_not_fused(tmp_path, rng):
    """Q and K of batch 1 against a bias of batch 2: the Add makes the scores bigger, so the
    plain ops run it (the fused op keeps the scores' shape)."""
    path = tmp_path / "attn.onnx"
    path.write_bytes(_attention_model(1, 2, 6, 6, 4, 4, "Mul", True, bias_shape=(2, 2, 6, 6)).SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert "attention" not in _op_types(sess) and "softmax" in _op_types(sess)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4)))
    bias = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    got = sess.run({"q": q, "k": k, "v": v, "bias": bias})["y"]
    np.testing.assert_allclose(got, _reference(q, k, v, 0.125, bias), rtol=1e-5, atol=1e-5)


def test_an_initializer_mask_fuses(tmp_path, rng):
    """A constant mask (an initializer) fuses too, and the result is unchanged."""
    sess = nerve.Session(_attention_model(1, 2, 20, 20, 8, 8, "Mul", True, extra="mask"), cache=False)
    assert _op_types(sess) == ["attention"]
    q, k, v = (rng.standard_normal((1, 2, 20, 8)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(sess.run({"q": q, "k": k, "v": v})["y"], _reference(q, k, v, 0.125, 0.0),
                               rtol=1e-5, atol=1e-5)


TORCH = Path(__file__).resolve().parents[1] / "data" / "torch"


@pytest.mark.parametrize("name", ["hf_bert", "hf_wav2vec2", "hf_llama_op23"])
def test_torch_exports_fuse_their_attention(name):
    """torch's dynamo exports of masked attention (a mask Add, the NaN guard; wav2vec2's mask
    length computed from the samples, its scores' through the conv stack; opset 23's Attention
    with a boolean mask) run as attention ops: no softmax is left. test_torch_exports.py checks
    their outputs against onnxruntime and torch."""
    import json
    spec = json.loads((TORCH / "manifest.json").read_text())[name]
    types = _op_types(nerve.Session(TORCH / f"{name}.onnx", dims=spec["dims"], cache=False))
    assert types.count("attention") == 2 and "softmax" not in types


def test_attention_op_checks_its_operands():
    """Too little scratch for the keys, batch dims that differ, a bias that does not broadcast
    to the scores: clear errors naming the op."""
    def run(k_shape, scratch_bytes, bias_shape=None):
        q = Value("q", np.float32, (2, 5, 4), const=np.ones((2, 5, 4), np.float32))
        k = Value("k", np.float32, k_shape, const=np.ones(k_shape, np.float32))
        v = Value("v", np.float32, (2, 7, 3), const=np.ones((2, 7, 3), np.float32))
        y = Value("y", np.float32, (2, 5, 3))
        ins = [q, k, v] + ([Value("b", np.float32, bias_shape, const=np.zeros(bias_shape, np.float32))]
                           if bias_shape else [])
        op = Op("attention", ins, [y], iattr=[1, 0, 1], fattr=[1.0, 0.0],
                scratch=Value("s", np.uint8, (scratch_bytes,)), name="bad_attention")
        y.producer = op
        return run_program_once(Program(ops=[op], inputs=[], outputs=[y], symbols={}, binds=[]))[0]

    slot = 16 * 4 + 16 * 7 + 7 * 64  # floats: K's panels (16 x 4), Vᵀ's (16 x 7), a block's scores (64 x 7)
    out = run((2, 7, 4), 8 * 4 * slot)
    np.testing.assert_allclose(out, np.ones((2, 5, 3)))  # uniform weights over equal values
    with pytest.raises(nerve.NerveError, match="scratch"):
        run((2, 7, 4), 8 * 4 * slot - 1)
    with pytest.raises(nerve.NerveError, match="batch axis"):
        run((3, 7, 4), 8 * 4 * slot)
    np.testing.assert_allclose(run((2, 7, 4), 8 * 4 * slot, (2, 1, 7)), np.ones((2, 5, 3)))
    with pytest.raises(nerve.NerveError, match="bias dim 1 is 3, expected 1 or 5"):
        run((2, 7, 4), 8 * 4 * slot, (2, 3, 7))
    with pytest.raises(nerve.NerveError, match="bias has rank 4"):
        run((2, 7, 4), 8 * 4 * slot, (1, 2, 5, 7))
