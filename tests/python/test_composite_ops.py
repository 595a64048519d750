"""ONNX ops nerve spells out in other ops (onnx_ops_composite.py): CastLike, EyeLike, Swish,
SwiGLU, the experimental ops of opsets 1-9 (ImageScaler, Affine, ScaledTanh, ParametricSoftplus,
Crop), ReverseSequence, Hardmax, ReduceLogSum, GlobalLpPool, LpPool, MeanVarianceNormalization, AffineGrid (and it feeding
GridSample, a spatial transformer) — against onnxruntime, or onnx's
reference implementation where onnxruntime lacks the op, on fresh random inputs at opsets
before and after their axes became inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import nerve
from helpers import older_ort_differs, ort_run

F32 = np.float32


def _check(tmp_path, node, inputs, feeds, opset, out_type=T.FLOAT, inits=None, dims=None, peer="ort"):
    g = h.make_graph([node], "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info("y", out_type, None)],
                     [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    onnx.save(m, tmp_path / "m.onnx")
    got = nerve.Session(tmp_path / "m.onnx", dims=dims, cache=False).run(feeds)["y"]
    want = ort_run(m, feeds)["y"] if peer == "ort" else ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return got


def test_cast_like(tmp_path, rng):
    x = (rng.standard_normal((3, 7)) * 50).astype(F32)
    got = _check(tmp_path, h.make_node("CastLike", ["x", "t"], ["y"]), [("x", T.FLOAT, [3, 7])], {"x": x}, 17,
                 out_type=T.INT32, inits={"t": np.zeros(1, np.int32)})
    assert got.dtype == np.int32


@pytest.mark.parametrize("k", [0, 2, -1])
def test_eye_like(tmp_path, rng, k):
    _check(tmp_path, h.make_node("EyeLike", ["x"], ["y"], k=k), [("x", T.FLOAT, [4, 6])],
           {"x": rng.standard_normal((4, 6)).astype(F32)}, 17)


def test_swish(tmp_path, rng):
    x = rng.standard_normal((5, 33)).astype(F32) * 4
    _check(tmp_path, h.make_node("Swish", ["x"], ["y"], alpha=1.7), [("x", T.FLOAT, [5, 33])], {"x": x}, 24,
           peer="reference")


@pytest.mark.parametrize("alpha", [None, 0.5, 1.702])
def test_swiglu(tmp_path, rng, alpha):
    a, b = (rng.standard_normal((3, 7, 97)).astype(F32) * 3 for _ in range(2))
    attrs = {} if alpha is None else {"alpha": alpha}
    _check(tmp_path, h.make_node("SwiGLU", ["a", "b"], ["y"], **attrs),
           [("a", T.FLOAT, [3, 7, 97]), ("b", T.FLOAT, [3, 7, 97])], {"a": a, "b": b}, 28, peer="reference")


@pytest.mark.parametrize("op, attrs, shape", [
    ("ImageScaler", dict(scale=0.0078, bias=[-1.0, -0.5, 0.25]), (2, 3, 9, 13)),   # tiny-YOLOv2's first node
    ("Affine", dict(alpha=-1.5, beta=0.25), (3, 17)),
    ("ScaledTanh", dict(alpha=2.0, beta=0.7), (3, 17)),
    ("ParametricSoftplus", dict(alpha=1.3, beta=2.0), (3, 17)),
    ("Crop", dict(border=[1, 2, 3, 1]), (1, 2, 9, 11)),
    ("Crop", dict(border=[2, 1, 0, 0], scale=[5, 4]), (2, 3, 9, 11)),
])
def test_experimental_ops_of_old_opsets(tmp_path, rng, op, attrs, shape):
    """The ops ONNX dropped after opset 9 that onnxruntime still runs (old model zoo exports)."""
    x = (rng.standard_normal(shape) * 3).astype(F32)
    _check(tmp_path, h.make_node(op, ["x"], ["y"], **attrs), [("x", T.FLOAT, list(shape))], {"x": x}, 8)


@pytest.mark.parametrize("shape, batch_axis, time_axis, lens", [
    ((6, 3, 5), 1, 0, [6, 2, 0]), ((4, 7, 2), 0, 1, [1, 7, 3, 5]), ((9, 2), 1, 0, [4, 9]),
])
def test_reverse_sequence(tmp_path, rng, shape, batch_axis, time_axis, lens):
    if 0 in lens:
        older_ort_differs("a sequence length of 0 does not leave its batch entry as it was")
    x = rng.standard_normal(shape).astype(F32)
    _check(tmp_path, h.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis),
           [("x", T.FLOAT, list(shape))], {"x": x}, 10, inits={"lens": np.array(lens, np.int64)})


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_hardmax(tmp_path, rng, axis):
    x = rng.integers(-3, 3, (4, 5, 6)).astype(F32)  # ties: the first largest wins
    _check(tmp_path, h.make_node("Hardmax", ["x"], ["y"], axis=axis), [("x", T.FLOAT, [4, 5, 6])], {"x": x}, 13)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_log_sum(tmp_path, rng, opset, keepdims):
    x = rng.random((3, 4, 5)).astype(F32) + 0.1
    if opset >= 18:
        node = h.make_node("ReduceLogSum", ["x", "axes"], ["y"], keepdims=keepdims)
        inits = {"axes": np.array([0, 2], np.int64)}
    else:
        node, inits = h.make_node("ReduceLogSum", ["x"], ["y"], keepdims=keepdims, axes=[0, 2]), None
    _check(tmp_path, node, [("x", T.FLOAT, [3, 4, 5])], {"x": x}, opset, inits=inits)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(tmp_path, rng, p):
    x = rng.standard_normal((2, 3, 5, 7)).astype(F32)
    _check(tmp_path, h.make_node("GlobalLpPool", ["x"], ["y"], p=p), [("x", T.FLOAT, [2, 3, "h", 7])], {"x": x}, 17,
           dims={"h": 9})


@pytest.mark.parametrize("p, attrs", [(2, dict(kernel_shape=[3, 3])),
                                      (1, dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 1, 2])),
                                      (3, dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"))])
def test_lp_pool(tmp_path, rng, p, attrs):
    x = rng.standard_normal((2, 3, 7, 8)).astype(F32)
    _check(tmp_path, h.make_node("LpPool", ["x"], ["y"], p=p, **attrs), [("x", T.FLOAT, [2, 3, 7, 8])], {"x": x}, 18)


@pytest.mark.parametrize("opset", [13, 18])
def test_mean_variance_normalization(tmp_path, rng, opset):
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(F32)
    _check(tmp_path, h.make_node("MeanVarianceNormalization", ["x"], ["y"]), [("x", T.FLOAT, [2, 3, 4, 5])],
           {"x": x}, opset)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_into_grid_sample(tmp_path, rng, align):
    """A spatial transformer: AffineGrid from theta, then GridSample of x at that grid."""
    nodes = [h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
             h.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align)]
    g = h.make_graph(nodes, "stn", [h.make_tensor_value_info("theta", T.FLOAT, [2, 2, 3]),
                                    h.make_tensor_value_info("x", T.FLOAT, [2, 3, 6, 7])],
                     [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("grid", T.FLOAT, None)],
                     [onnx.numpy_helper.from_array(np.array([2, 3, 5, 9], np.int64), "size")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, tmp_path / "m.onnx")
    theta = (np.eye(2, 3)[None] + rng.standard_normal((2, 2, 3)) * 0.3).astype(F32)
    feeds = {"theta": theta, "x": rng.standard_normal((2, 3, 6, 7)).astype(F32)}
    got = nerve.Session(tmp_path / "m.onnx", cache=False).run(feeds)
    want = ort_run(m, feeds)
    for k in ("grid", "y"):
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


# ---------------------------------------------------------------- sequences of a known length


def _seq_model(nodes, inits):
    """x [2, 7, 3] float -> y, with these initializers."""
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    g = h.make_graph(nodes, "seq", [h.make_tensor_value_info("x", T.FLOAT, [2, 7, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("case", ["sizes", "chunk", "pieces", "edit"])
def test_sequences_of_known_length(tmp_path, rng, case):
    """SplitToSequence (sizes, one chunk size whose last chunk is short, extent-1 pieces
    without the axis), SequenceAt (negative positions), SequenceLength, SequenceInsert,
    SequenceErase, SequenceConstruct/Empty and ConcatFromSequence (along an axis, stacked):
    lists of tensors at compile time, nothing of them in the plan. Against onnxruntime."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    if case == "sizes":
        nodes = [h.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
                 h.make_node("SequenceAt", ["s", "minus1"], ["last"]), h.make_node("SequenceAt", ["s", "zero"], ["first"]),
                 h.make_node("Concat", ["last", "first"], ["y"], axis=1)]
        inits = {"sizes": i64([2, 4, 1]), "minus1": i64(-1), "zero": i64(0)}
    elif case == "chunk":
        nodes = [h.make_node("SplitToSequence", ["x", "three"], ["s"], axis=1),  # 3, 3, 1
                 h.make_node("SequenceLength", ["s"], ["n"]), h.make_node("Cast", ["n"], ["nf"], to=T.FLOAT),
                 h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=1), h.make_node("Mul", ["cat", "nf"], ["y"])]
        inits = {"three": i64(3)}
    elif case == "pieces":
        nodes = [h.make_node("SplitToSequence", ["x"], ["s"], axis=2, keepdims=0),
                 h.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)]
        inits = {}
    else:
        nodes = [h.make_node("SequenceEmpty", [], ["e"], dtype=T.FLOAT),
                 h.make_node("SequenceInsert", ["e", "x"], ["s1"]),
                 h.make_node("Neg", ["x"], ["nx"]), h.make_node("SequenceInsert", ["s1", "nx", "zero"], ["s2"]),
                 h.make_node("SequenceConstruct", ["x", "x"], ["pair"]),
                 h.make_node("SequenceErase", ["s2", "minus1"], ["s3"]),  # drops x: [-x]
                 h.make_node("SequenceAt", ["pair", "zero"], ["again"]),
                 h.make_node("SequenceInsert", ["s3", "again"], ["s4"]),
                 h.make_node("ConcatFromSequence", ["s4"], ["y"], axis=-1)]
        inits = {"zero": i64(0), "minus1": i64(-1)}
    m = _seq_model(nodes, inits)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    sess = nerve.Session(path, cache=False)
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    got, want = sess.run({"x": x})["y"], ort_run(m, {"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_sequence_output_or_input_fails_clearly(tmp_path):
    for nodes, match in (([h.make_node("SplitToSequence", ["x"], ["y"], axis=1)], "graph output 'y' is a sequence"),
                         ([h.make_node("SplitToSequence", ["x"], ["s"], axis=1, name="split"),
                           h.make_node("Relu", ["s"], ["y"], name="relu_of_seq")], "relu_of_seq.*takes a sequence")):
        path = tmp_path / "m.onnx"
        onnx.save(_seq_model(nodes, {}), path)
        with pytest.raises(nerve.ModelError, match=match):
            nerve.Session(path, cache=False)


def test_tile_of_shape_arithmetic_stays_known(tmp_path, rng):
    """torch's split into chunks tiles the chunk size by the chunk count: a Tile of known
    values gives known values (here the shape an Expand needs at compile time)."""
    nodes = [h.make_node("Shape", ["x"], ["shp"], start=2, end=3), h.make_node("Tile", ["shp", "two"], ["sq"]),
             h.make_node("Expand", ["half", "sq"], ["w"]), h.make_node("MatMul", ["x", "w"], ["y"])]
    m = _seq_model(nodes, {"two": np.array([2], np.int64), "half": np.array(0.5, np.float32)})
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    sess = nerve.Session(path, cache=False)
    np.testing.assert_allclose(sess.run({"x": x})["y"], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-5)
