"""Float16 graphs (what `model.half()` exports and onnxconverter-common's conversion write):
nerve computes them in float32 — every op reads its float16 inputs widened exactly, constants
are widened at compile time, a Cast to float16 still rounds, and outputs declared float16
are rounded back. Checked against a float64 reference on the widened values (nerve must be
within one float16 rounding of it, onnxruntime, which keeps float16 between its ops, a few
roundings away) and against onnxruntime at float16 tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from helpers import make_model, onnx_session, op_types, ort_run

F16 = np.float16


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F16)


def _within_one_rounding(got16, ref64):
    """got (float16) equals ref rounded to float16, or its neighbour (ties and the last bit)."""
    ulp = np.spacing(np.abs(ref64.astype(F16))).astype(np.float64)
    return np.abs(got16.astype(np.float64) - ref64) <= 1.5 * ulp


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("rows", [1, 3, 13])
def test_float16_mlp_is_computed_in_float32(tmp_path, rng, rows):
    """float16 in, float16 weights, float16 out: MatMul, Add, Relu, MatMul, Softmax."""
    w1, b1, w2 = _f16(rng, (24, 37), 0.3), _f16(rng, (37,)), _f16(rng, (37, 11), 0.3)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m"]), h.make_node("Add", ["m", "b1"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]), h.make_node("MatMul", ["r", "w2"], ["z"]),
             h.make_node("Softmax", ["z"], ["y"], axis=-1)]
    m = make_model(nodes, [("x", T.FLOAT16, ["n", 24])], [("y", T.FLOAT16)], {"w1": w1, "b1": b1, "w2": w2})
    sess = onnx_session(tmp_path, m, {"n": 13})
    assert sess.inputs[0]["dtype"] == F16 and sess.outputs[0]["dtype"] == F16
    x = _f16(rng, (rows, 24))
    got = sess.run({"x": x})["y"]
    assert got.dtype == F16 and got.shape == (rows, 11)
    f = lambda a: a.astype(np.float64)  # noqa: E731
    ref = _softmax(np.maximum(f(x) @ f(w1) + f(b1), 0) @ f(w2))
    assert np.all(_within_one_rounding(got, ref)), np.max(np.abs(f(got) - ref))
    ort = ort_run(m, {"x": x})["y"]
    np.testing.assert_allclose(f(got), f(ort), rtol=4e-3, atol=4e-3)
    # the weights were widened when compiling: the only casts left are the input's and output's
    assert op_types(sess).count("cast") == 2, op_types(sess)


def test_float16_conv_layernorm_between_float32_casts(tmp_path, rng):
    """A float32 model with a float16 middle (mixed precision as exporters write it): Cast to
    float16, Conv with float16 weights, LayerNormalization in float16, Cast back. The first
    Cast still rounds x to float16."""
    wc, bc = _f16(rng, (8, 3, 3, 3), 0.3), _f16(rng, (8,))
    gamma, beta = _f16(rng, (9,)), _f16(rng, (9,))
    nodes = [h.make_node("Cast", ["x"], ["x16"], to=T.FLOAT16),
             h.make_node("Conv", ["x16", "wc", "bc"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("LayerNormalization", ["c", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5),
             h.make_node("Cast", ["n"], ["y"], to=T.FLOAT),
             h.make_node("Cast", ["x16"], ["x_rounded"], to=T.FLOAT)]
    m = make_model(nodes, [("x", T.FLOAT, [1, 3, 7, 9])], [("y", T.FLOAT), ("x_rounded", T.FLOAT)],
                   {"wc": wc, "bc": bc, "gamma": gamma, "beta": beta})
    sess = onnx_session(tmp_path, m, {})
    x = rng.standard_normal((1, 3, 7, 9)).astype(np.float32)
    out = sess.run({"x": x})
    np.testing.assert_array_equal(out["x_rounded"], x.astype(F16).astype(np.float32))
    assert out["y"].dtype == np.float32
    # float64 reference from the float16 values: nerve keeps float32 precision after the Cast
    xr = np.pad(x.astype(F16).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    c = np.zeros((1, 8, 7, 9)) + bc.astype(np.float64)[None, :, None, None]
    for i in range(3):
        for j in range(3):
            c += np.einsum("oc,bchw->bohw", wc[:, :, i, j].astype(np.float64), xr[:, :, i:i + 7, j:j + 9])
    mu, var = c.mean(-1, keepdims=True), c.var(-1, keepdims=True)
    ref = (c - mu) / np.sqrt(var + 1e-5) * gamma.astype(np.float64) + beta.astype(np.float64)
    np.testing.assert_allclose(out["y"], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["y"], ort_run(m, {"x": x})["y"], rtol=1e-2, atol=1e-2)  # fp16 between ops
