"""The fused attention op (the compiler's fuse_attention; op "attention" in op_linalg.c):
softmax(scale(Q·Kᵀ))·V run per block of query rows with the block's scores in scratch.
Which graphs fuse (the plain pattern only), the result against float64 at awkward sizes
(partial row blocks, few keys, wide values, Kᵀ folded or fed), bit-identical across
thread counts, and the op's own checks."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402
from nerve.compiler.graph import Op, Program, Value  # noqa: E402
from nerve.session import run_program_once  # noqa: E402


def _op_types(sess):
    return [o["type"] for o in sess.ops()]


def _attention_model(b, h, m, t, d, dv, scale_op, trans_k_node, extra=None):
    """softmax(scale(Q·Kᵀ))·V with Q [b, h, m, d], K [b, h, t, d] (a Transpose node when
    trans_k_node, else fed as [b, h, d, t]), V [b, h, t, dv]; scale_op None, "Mul" or "Div"."""
    nodes, inits = [], []
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
    nodes.append(helper.make_node("Softmax", [src], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["p", "v"], ["y"]))
    k_shape = [b, h, t, d] if trans_k_node else [b, h, d, t]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, h, m, d]),
                                          helper.make_tensor_value_info("k", TensorProto.FLOAT, k_shape),
                                          helper.make_tensor_value_info("v", TensorProto.FLOAT, [b, h, t, dv])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
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


def test_attention_with_a_mask_is_not_fused(tmp_path, rng):
    """An Add (a mask) between the products: the plain ops, matching onnxruntime's numbers."""
    sess = nerve.Session(_attention_model(1, 2, 20, 20, 8, 8, "Mul", True, extra="mask"), cache=False)
    assert "attention" not in _op_types(sess) and "softmax" in _op_types(sess)


def test_attention_op_checks_its_operands():
    """Too little scratch for the keys, batch dims that differ: clear errors naming the op."""
    def run(k_shape, scratch_bytes):
        q = Value("q", np.float32, (2, 5, 4), const=np.ones((2, 5, 4), np.float32))
        k = Value("k", np.float32, k_shape, const=np.ones(k_shape, np.float32))
        v = Value("v", np.float32, (2, 7, 3), const=np.ones((2, 7, 3), np.float32))
        y = Value("y", np.float32, (2, 5, 3))
        op = Op("attention", [q, k, v], [y], iattr=[1, 0], fattr=[1.0], scratch=Value("s", np.uint8, (scratch_bytes,)),
                name="bad_attention")
        y.producer = op
        return run_program_once(Program(ops=[op], inputs=[], outputs=[y], symbols={}, binds=[]))[0]

    slot = 16 * 4 + 16 * 7 + 7 * 64  # floats: K's panels (16 x 4), Vᵀ's (16 x 7), a block's scores (64 x 7)
    out = run((2, 7, 4), 8 * 4 * slot)
    np.testing.assert_allclose(out, np.ones((2, 5, 3)))  # uniform weights over equal values
    with pytest.raises(nerve.NerveError, match="scratch"):
        run((2, 7, 4), 8 * 4 * slot - 1)
    with pytest.raises(nerve.NerveError, match="batch axis"):
        run((3, 7, 4), 8 * 4 * slot)
