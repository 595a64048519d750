"""RandomNormal, RandomUniform and their *Like forms (op random): nerve's values are not
onnxruntime's (each runtime has its own generator), so these check what a model relies on —
the shape and dtype onnxruntime gives, the distribution (moments, range, histogram against the
distribution's own probabilities) over several seeds and sizes — and what nerve promises: the
same values on every run, at any thread count and after a plan is saved and loaded, each
element a function of (seed, index) alone. A TTS export that draws its noise this way runs
end to end in test_torch_exports.py (hf_vits)."""

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nerve  # noqa: E402

F32 = TensorProto.FLOAT


def _model(nodes, inputs=(), outputs=("y",), opset=17, out_type=None):
    """out_type: the outputs' declared element type (as exporters write it), else left to
    inference; nerve computes float64 in float32 and casts an output declared double back."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, out_type, None) if out_type else
                               helper.make_empty_tensor_value_info(n) for n in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _like(op, dtype=None, **attrs):
    if dtype is not None:
        attrs["dtype"] = dtype
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F32, ["n", 3])], out_type=dtype or F32)


def _normal_cdf(z):
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(z) / math.sqrt(2.0)))


def _check_histogram(v, cdf, edges):
    """The share of values in each bin within 5 standard errors of the distribution's own."""
    p = np.diff(cdf(edges))
    counts = np.histogram(v, edges)[0]
    se = np.sqrt(p * (1 - p) / v.size)
    np.testing.assert_array_less(np.abs(counts / v.size - p), 5 * se + 1e-12)


@pytest.mark.parametrize("seed", [None, 0.0, 7.0, -123.5])
@pytest.mark.parametrize("n", [1, 13, 40001])
def test_random_normal_like_is_normal(seed, n):
    attrs = {"mean": 1.5, "scale": 0.25} | ({} if seed is None else {"seed": seed})
    model = _like("RandomNormalLike", **attrs)
    x = np.zeros((n, 3), np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = nerve.Session(model, cache=False, dims={"n": n}).run({"x": x})["y"]
    assert y.shape == want.shape and y.dtype == want.dtype
    assert np.isfinite(y).all()
    if y.size > 1000:
        assert abs(y.mean() - 1.5) < 5 * 0.25 / math.sqrt(y.size)
        assert abs(y.std() / 0.25 - 1) < 5 * math.sqrt(0.5 / y.size)
        _check_histogram((y.astype(np.float64) - 1.5) / 0.25, _normal_cdf, np.array([-8, -2, -1, -0.3, 0, 0.5, 1, 2.5, 8]))


@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-3.0, 5.0), (2.0, 2.0)])
def test_random_uniform_like_stays_in_its_range(low, high):
    model = _like("RandomUniformLike", low=low, high=high, seed=11.0)
    x = np.zeros((30000, 3), np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = nerve.Session(model, cache=False, dims={"n": 30000}).run({"x": x})["y"]
    assert y.shape == want.shape and y.dtype == want.dtype
    if low == high:
        np.testing.assert_array_equal(y, low)
        return
    assert y.min() >= low and y.max() < high
    _check_histogram(y.astype(np.float64), lambda e: (np.asarray(e) - low) / (high - low),
                     np.linspace(low, high, 11))


def _reference_shape_dtype(model, feeds, dtype):
    """onnxruntime's output shape and dtype; the spec's where onnxruntime has no kernel for the
    dtype (float16)."""
    if dtype == TensorProto.FLOAT16:
        return None, np.float16
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return want.shape, want.dtype


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_random_with_a_shape_attribute_gives_onnxruntimes_shape_and_dtype(op, dtype):
    model = _model([helper.make_node(op, [], ["y"], shape=[4, 1, 257], dtype=dtype)], out_type=dtype)
    shape, dt = _reference_shape_dtype(model, {}, dtype)
    y = nerve.Session(model, cache=False).run({})["y"]
    assert y.shape == (shape or (4, 1, 257)) and y.dtype == dt
    assert np.isfinite(y.astype(np.float64)).all() and np.unique(y).size > 500


@pytest.mark.parametrize("dtype", [None, TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_random_like_dtype_follows_the_attribute_or_the_input(dtype):
    model = _like("RandomUniformLike", dtype)
    x = np.zeros((5, 3), np.float32)
    shape, dt = _reference_shape_dtype(model, {"x": x}, dtype)
    y = nerve.Session(model, cache=False, dims={"n": 5}).run({"x": x})["y"]
    assert y.shape == (shape or (5, 3)) and y.dtype == dt


def test_random_values_are_the_same_every_run_thread_count_and_after_save(tmp_path):
    model = _model([helper.make_node("RandomNormalLike", ["x"], ["a"]),
                    helper.make_node("RandomUniformLike", ["x"], ["b"], seed=3.0)],
                   [("x", F32, ["n", 3])], outputs=("a", "b"))
    x = np.zeros((20000, 3), np.float32)
    first = nerve.Session(model, cache=False, dims={"n": 20000}, threads=1)
    want = first.run({"x": x})
    again = first.run({"x": x})
    two = nerve.Session(model, cache=False, dims={"n": 20000}, threads=2).run({"x": x})
    path = nerve.compile(model, dims={"n": 20000}).save(tmp_path / "r.nrv")
    loaded = nerve.Session(path).run({"x": x})
    for got in (again, two, loaded):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert not np.array_equal(want["a"], want["b"])


def test_random_values_depend_on_the_index_alone():
    """A run at a smaller size draws the first values of a larger one (counter-based)."""
    sess = nerve.Session(_like("RandomNormalLike"), cache=False, dims={"n": 500})
    big = sess.run({"x": np.zeros((500, 3), np.float32)})["y"]
    small = sess.run({"x": np.zeros((17, 3), np.float32)})["y"]
    np.testing.assert_array_equal(small.reshape(-1), big.reshape(-1)[:51])


def test_unseeded_nodes_draw_different_values_and_a_seed_repeats_them():
    nodes = [helper.make_node("RandomNormal", [], ["a"], shape=[64]),
             helper.make_node("RandomNormal", [], ["b"], shape=[64]),
             helper.make_node("RandomNormal", [], ["c"], shape=[64], seed=5.0),
             helper.make_node("RandomNormal", [], ["d"], shape=[64], seed=5.0),
             helper.make_node("RandomNormal", [], ["e"], shape=[64], seed=6.0)]
    got = nerve.Session(_model(nodes, outputs=("a", "b", "c", "d", "e")), cache=False).run({})
    assert not np.array_equal(got["a"], got["b"])
    np.testing.assert_array_equal(got["c"], got["d"])
    assert not np.array_equal(got["c"], got["e"])


@pytest.mark.parametrize("node, match", [
    (helper.make_node("RandomUniform", [], ["y"], shape=[3], low=2.0, high=1.0), "low 2.0 is above high 1.0"),
    (helper.make_node("RandomNormal", [], ["y"], shape=[3], dtype=TensorProto.INT32), "random values are float"),
    (helper.make_node("RandomNormal", [], ["y"]), "shape attribute is required"),
    (helper.make_node("RandomUniform", [], ["y"], shape=[3, -1]), "negative dimension"),
    (helper.make_node("Bernoulli", ["p"], ["y"]), "sampling ops are not supported"),
])
def test_bad_random_nodes_are_clear_errors(node, match):
    inputs = [("p", F32, [3])] if node.input else []
    with pytest.raises(nerve.ModelError, match=match):
        nerve.Session(_model([node], inputs), cache=False)
