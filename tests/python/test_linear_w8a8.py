"""int8 weights dequantised in the graph (W = Cast(q) * s + z, then MatMul) compile, with
``NERVE_W8A8=1`` at compile time, to ``linear_w8a8`` when the layer runs on many rows (more
than linear_w8 takes): each row of x is quantised to int8 on the fly and the product is done
in int32.

Two references:
  * numpy computing the same quantised math (the row's scale and the rounding in float32
    exactly as the kernels do it: inv = 127/amax, clamp(x·inv, ±127), round half to even;
    the int8 products summed exactly in int64; the epilogue in float64): the plan must match
    it up to float32 rounding of the epilogue and of the fp32 row sum (REL of the output's
    largest magnitude);
  * onnxruntime (exact fp32 math): the difference is the activations' quantisation error,
    bounded per output by |s[n]| · sx[r]/2 · Σ_k |q[n, k]| (each quantised x is off by at
    most half a step sx = amax/127, and the error enters only through s·q; the z term uses
    the unquantised row sum), plus the fp32 tolerance; on random data the cosine similarity
    of the outputs is also >= 0.999.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nerve
from helpers import dequant_nodes, make_model, op_types, ort_run, quant, w8_matmul_model
from helpers import onnx_session as session

ort = pytest.importorskip("onnxruntime")

F32 = np.float32
REL = 2e-5  # of the output's largest magnitude


@pytest.fixture(autouse=True)
def _w8a8_on(monkeypatch):
    monkeypatch.setenv("NERVE_W8A8", "1")


def matmul_model(rng, k, n, per_output=False, **kw):
    """(model, inits); s and z per output or per tensor."""
    shape = (n,) if per_output else (1,)
    return w8_matmul_model(rng, k, n, s_shape=shape, z_shape=shape, **kw)


def quantise_rows(x2):
    """(xq int64 [R, K], sx float32 [R]) exactly as the kernels compute them."""
    amax = np.abs(x2).max(axis=1).astype(F32)
    with np.errstate(divide="ignore"):
        inv = (F32(127.0) / amax).astype(F32)
    ok = np.isfinite(inv)
    inv = np.where(ok, inv, F32(0)).astype(F32)
    sx = np.where(ok, (amax / F32(127.0)).astype(F32), F32(0)).astype(F32)
    v = np.clip((x2 * inv[:, None]).astype(F32), F32(-127), F32(127))
    return np.rint(v).astype(np.int64), sx


def w8a8_ref(x, inits, relu=True):
    """The quantised math in float64 (xq, sx in float32 as the kernels), and the per-output
    quantisation-error bound vs the exact product."""
    q, s, z = inits["q"].astype(np.int64), inits["s"].astype(np.float64), inits["z"].astype(np.float64)
    k = q.shape[0]
    x2 = x.reshape(-1, k)
    xq, sx = quantise_rows(x2)
    acc = xq @ q  # exact
    y = s * sx[:, None].astype(np.float64) * acc + z * x2.astype(np.float64).sum(axis=1, keepdims=True)
    if "b" in inits:
        y = y + inits["b"]
    bound = np.abs(s) * (sx[:, None] / 2.0) * np.abs(q).sum(axis=0)  # [R, N]
    if relu:
        y = np.maximum(y, 0.0)
    shape = x.shape[:-1] + (q.shape[1],)
    return y.reshape(shape), bound.reshape(shape)


def check(sess, m, inits, x, relu=True):
    got = sess.run({"x": x})["y"]
    want, bound = w8a8_ref(x, inits, relu)
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=REL, atol=REL * scale + 1e-30)
    exact = ort_run(m, {"x": x})["y"]
    assert np.all(np.abs(got - exact) <= bound + REL * scale + 1e-6), "beyond the quantisation-error bound"
    g, e = got.ravel().astype(np.float64), exact.ravel().astype(np.float64)
    if np.linalg.norm(e) > 0:
        assert g @ e / (np.linalg.norm(g) * np.linalg.norm(e)) >= 0.999
    return got


@pytest.mark.parametrize("k,n,per_output", [(416, 416, False), (416, 1664, True), (97, 257, False), (13, 3, True),
                                            (1, 1, False)])
def test_many_rows_compile_to_linear_w8a8(tmp_path, rng, k, n, per_output):
    m, inits = matmul_model(rng, k, n, per_output=per_output)
    sess = session(tmp_path, m, {"batch": 1, "seq": 40})
    assert op_types(sess) == ["linear_w8a8"]  # bias and relu fused into it
    op = sess.ops()[0]
    assert op["kernel"] == nerve.kernels.selected("linear_w8a8")
    np_, kp = -(-n // 16) * 16, -(-k // 4) * 4
    tensors = sess.tensors()
    assert any(t["dtype"] == np.int8 and t["shape"] == [np_ * kp + 4 * np_] for t in tensors)  # the packed blob
    assert not any(t["dtype"] == np.float32 and sorted(t["shape"]) == sorted([n, k]) and t["storage"] == "weight"
                   for t in tensors if n * k > 1)
    for rows in (40, 17, 1):
        check(sess, m, inits, rng.standard_normal((1, rows, k)).astype(F32))


def test_zero_rows_and_no_bias(tmp_path, rng):
    m, inits = matmul_model(rng, 64, 48, bias=False, relu=False)
    sess = session(tmp_path, m, {"batch": 2, "seq": 20})
    assert op_types(sess) == ["linear_w8a8"]
    x = rng.standard_normal((2, 20, 64)).astype(F32)
    x[0, 3] = 0.0
    x[1, 7] = 0.0
    got = check(sess, m, inits, x, relu=False)
    np.testing.assert_array_equal(got[0, 3], np.zeros(48, F32) + 0.0 * got[0, 3])  # z·0: exactly 0


def test_off_by_default_and_few_rows_stay(tmp_path, rng, monkeypatch):
    m, inits = matmul_model(rng, 97, 65)
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 16})) == ["linear_w8"]  # few rows: linear_w8
    monkeypatch.delenv("NERVE_W8A8")
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 40})) == ["linear"]
    monkeypatch.setenv("NERVE_W8A8", "0")
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 40})) == ["linear"]


def test_layernorm_stays_separate(tmp_path, rng):
    k, n = 64, 96
    q, s, z = quant(rng, (k, n))
    nodes = [h.make_node("LayerNormalization", ["x", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5)] + \
        dequant_nodes() + [h.make_node("MatMul", ["ln", "W"], ["y"])]
    inits = {"q": q, "s": s, "z": z}
    m = make_model(nodes, [("x", T.FLOAT, [1, "seq", k])], [("y", T.FLOAT)],
                   dict(inits, g=(1 + 0.1 * rng.standard_normal(k)).astype(F32),
                        beta=(0.1 * rng.standard_normal(k)).astype(F32)))
    sess = session(tmp_path, m, {"seq": 40})
    assert op_types(sess) == ["layernorm", "linear_w8a8"]
    x = rng.standard_normal((1, 40, k)).astype(F32)
    got = sess.run({"x": x})["y"]
    exact = ort_run(m, {"x": x})["y"]
    g, e = got.ravel().astype(np.float64), exact.ravel().astype(np.float64)
    assert g @ e / (np.linalg.norm(g) * np.linalg.norm(e)) >= 0.999


@pytest.mark.parametrize("threads", [1, 3])
def test_every_variant_and_thread_count_bit_identical(tmp_path, rng, threads):
    m, inits = matmul_model(rng, 416, 1664, relu=False)
    sess = session(tmp_path, m, {"batch": 1, "seq": 70}, threads=threads)
    assert op_types(sess) == ["linear_w8a8"]
    x = rng.standard_normal((1, 70, 416)).astype(F32)
    variants = nerve.kernels.runnable_variants("linear_w8a8")
    assert variants[-1] == "ref"
    outs = []
    for v in variants:
        with nerve.kernels.force("linear_w8a8", v):
            outs.append(check(sess, m, inits, x, relu=False))
    one = session(tmp_path, m, {"batch": 1, "seq": 70}).run({"x": x})["y"]
    for v, o in zip(variants, outs):
        np.testing.assert_array_equal(o, outs[-1], err_msg=f"{v} vs ref")
        np.testing.assert_array_equal(o, one, err_msg=f"{v}, {threads} threads vs 1")


@pytest.mark.parametrize("c,m,kw,stride,pads,length", [(416, 83, 7, 3, (0, 0), 95), (5, 7, 3, 2, (1, 2), 40),
                                                        (1, 16, 127, 64, (0, 0), 2000), (3, 33, 1, 1, (0, 0), 1)])
def test_int8_conv_compiles_to_conv_w8a8(tmp_path, rng, monkeypatch, c, m, kw, stride, pads, length):
    """With NERVE_W8A8_CONV=1 a 1-D conv whose weight is Cast(int8)*s+z runs as conv_w8a8:
    im2row blocks of 32 positions through the w8a8 kernel, equal to the same quantised math per
    output position."""
    monkeypatch.setenv("NERVE_W8A8_CONV", "1")
    q = rng.integers(-128, 128, (m, c, kw)).astype(np.int8)
    s, z = np.array([0.004], F32), np.array([0.01], F32)
    b = rng.standard_normal(m).astype(F32)
    nodes = dequant_nodes() + [h.make_node("Conv", ["x", "W", "b"], ["y"], strides=[stride], pads=list(pads))]
    model = make_model(nodes, [("x", T.FLOAT, [2, c, "t"])], [("y", T.FLOAT)], {"q": q, "s": s, "z": z, "b": b})
    sess = session(tmp_path, model, {"t": length})
    assert op_types(sess) == ["conv_w8a8"]
    x = rng.standard_normal((2, c, length)).astype(F32)
    got = sess.run({"x": x})["y"]
    # reference: im2row per output position, then the w8a8 math of a linear over [m, c*kw]
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1])))
    ow = (length + pads[0] + pads[1] - kw) // stride + 1
    rows = np.stack([xp[:, :, p * stride:p * stride + kw].reshape(2, -1) for p in range(ow)], axis=1)  # [2, ow, c*kw]
    inits = {"q": q.reshape(m, -1).T.copy(), "s": s, "z": z, "b": b}
    want, _ = w8a8_ref(rows, inits, relu=False)  # [2, ow, m]
    want = want.transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=REL, atol=REL * float(np.abs(want).max()))
    exact = ort_run(model, {"x": x})["y"]
    g, e = got.ravel().astype(np.float64), exact.ravel().astype(np.float64)
    assert g @ e / (np.linalg.norm(g) * np.linalg.norm(e)) >= 0.999


def test_int8_convs_stay_fp32_by_default(tmp_path, rng):
    q = rng.integers(-128, 128, (8, 4, 3)).astype(np.int8)
    nodes = dequant_nodes() + [h.make_node("Conv", ["x", "W"], ["y"])]
    model = make_model(nodes, [("x", T.FLOAT, [1, 4, "t"])], [("y", T.FLOAT)],
                       {"q": q, "s": np.array([0.01], F32), "z": np.array([0.0], F32)})
    assert op_types(session(tmp_path, model, {"t": 50})) == ["conv"]
