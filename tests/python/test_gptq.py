"""GPTQ W4 weights (nerve.quant: quantize_w4(hessian=...), LinearTaps, compile(hessians=...)).

GPTQ minimises the error of the layer's *output* on inputs like the calibration ones, so the
checks measure ‖X·Ŵᵀ − X·Wᵀ‖ on fresh held-out inputs drawn like the calibration ones
(correlated, with a few large channels, as transformer activations are), against
round-to-nearest with the same group fits.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nerve
from helpers import make_model, op_types
from nerve.quant import LinearTaps, input_hessian, quantize_w4


def activations(rng, rows, k, mix):
    x = rng.standard_normal((rows, k)) @ mix
    x[:, : max(1, k // 50)] *= 6.0  # outlier channels
    return x


def out_err(x, w, wq):
    ref = x @ w.T.astype(np.float64)
    return float(np.linalg.norm(x @ wq.T.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("n,k,g", [(97, 256, 32), (13, 128, 64), (257, 384, 128), (1, 64, 32)])
@pytest.mark.parametrize("method", ["mse", "minmax"])
def test_gptq_lowers_the_output_error_on_held_out_inputs(rng, n, k, g, method):
    """A single output row is one draw: its gain varies (0.85x RTN's error on one seed), so
    one-row layers are measured over 24 independent draws; the others are many rows at once."""
    draws = 24 if n == 1 else 1
    mix = np.eye(k) + 0.3 * rng.standard_normal((k, k))
    hess = input_hessian(activations(rng, 4 * k, k, mix))
    test = activations(rng, 512, k, mix)
    got = ref = 0.0
    for _ in range(draws):
        w = (0.05 * rng.standard_normal((n, k))).astype(np.float32)
        rtn = quantize_w4(w, g, method=method)
        gptq = quantize_w4(w, g, method=method, hessian=hess)
        assert gptq.q.dtype == np.int8 and gptq.q.min() >= -8 and gptq.q.max() <= 7
        got += out_err(test, w, gptq.dequantize())
        ref += out_err(test, w, rtn.dequantize())
    assert got < 0.8 * ref


def test_gptq_with_uncorrelated_inputs_is_round_to_nearest(rng):
    # H ∝ I: no column's error can be compensated by another, so the codes are RTN's
    w = (0.1 * rng.standard_normal((33, 192))).astype(np.float32)
    for g in (32, 64):
        rtn, gptq = quantize_w4(w, g), quantize_w4(w, g, hessian=7.0 * np.eye(192))
        np.testing.assert_array_equal(gptq.q, rtn.q)
        np.testing.assert_array_equal(gptq.scales, rtn.scales)


def test_gptq_dead_inputs_and_bad_hessians(rng):
    k = 64
    x = rng.standard_normal((300, k))
    x[:, 5] = 0.0  # an input that never varies: its weights cannot matter
    w = rng.standard_normal((8, k)).astype(np.float32)
    q = quantize_w4(w, 32, hessian=input_hessian(x))
    assert np.all(np.isfinite(q.dequantize()))
    with pytest.raises(nerve.InputError, match=r"hessian must be \[64, 64\]"):
        quantize_w4(w, 32, hessian=np.eye(32))
    bad = np.eye(k)
    bad[3, 3] = np.nan
    with pytest.raises(nerve.InputError, match="non-finite"):
        quantize_w4(w, 32, hessian=bad)


def mlp(rng, k=128, hidden=192, n=96):
    w1 = (rng.standard_normal((k, hidden)) / np.sqrt(k)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"], name="fc1"), h.make_node("Add", ["a", "b1"], ["ab"], name="b"),
             h.make_node("Relu", ["ab"], ["r"], name="relu"), h.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    return make_model(nodes, [("x", T.FLOAT, ["rows", k])], [("y", T.FLOAT)], {"w1": w1, "w2": w2, "b1": b1}), \
        (w1, b1, w2)


def test_linear_taps_hessians_are_the_layer_inputs(tmp_path, rng):
    import onnx

    m, (w1, b1, w2) = mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    taps = LinearTaps(path, dims={"rows": 64})
    xs = [rng.standard_normal((r, 128)).astype(np.float32) for r in (64, 7, 33)]
    for x in xs:
        y = taps.run({"x": x})["y"]
        ref = np.maximum(x @ w1 + b1, 0) @ w2
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)  # it still computes the model
    hs = taps.hessians
    assert set(hs) == {"fc1", "fc2"}
    x_all = np.concatenate(xs).astype(np.float64)
    np.testing.assert_allclose(hs["fc1"], x_all.T @ x_all, rtol=1e-9)
    r = np.maximum(x_all.astype(np.float32) @ w1 + b1, 0).astype(np.float64)
    np.testing.assert_allclose(hs["fc2"], r.T @ r, rtol=1e-4, atol=1e-3)


def test_compile_with_hessians_is_gptq_and_beats_round_to_nearest(tmp_path, rng):
    import onnx

    m, (w1, b1, w2) = mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    mix = np.eye(128) + 0.4 * rng.standard_normal((128, 128))
    taps = LinearTaps(path, dims={"rows": 64})
    for _ in range(8):
        taps.run({"x": activations(rng, 64, 128, mix).astype(np.float32)})
    with pytest.raises(nerve.InputError, match="GPTQ weights: give hessians="):
        nerve.compile(path, dims={"rows": 64}, precision="w4a32:gptq", cache=False)
    gptq = nerve.Session(nerve.compile(path, dims={"rows": 64}, precision="w4a32:gptq", hessians=taps.hessians,
                                       cache=False))
    rtn = nerve.Session(nerve.compile(path, dims={"rows": 64}, precision="w4a32", cache=False))
    assert op_types(gptq).count("linear_w4a32") == 2
    x = activations(rng, 64, 128, mix).astype(np.float32)
    ref = np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2

    def err(s):
        return float(np.linalg.norm(s.run({"x": x})["y"] - ref) / np.linalg.norm(ref))

    assert err(gptq) < 0.85 * err(rtn)
