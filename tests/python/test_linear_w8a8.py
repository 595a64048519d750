"""int8 weights dequantised in the graph (W = Cast(q) * s + z, then MatMul) compile, with
``NERVE_W8A8=1`` at compile time (or at precision "int8"), to ``linear_w8a8`` on any row
count: each row of x is quantised to int8 on the fly and the product is done in int32.

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
from onnx import numpy_helper

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
    sx64 = sx[:, None].astype(np.float64)
    # the zero-point term sees the quantised row too (sx·Σ xq): y is x̂·Wᵀ exactly
    y = s * sx64 * acc + z * sx64 * xq.sum(axis=1, keepdims=True)
    if "b" in inits:
        y = y + inits["b"]
    bound = (sx64 / 2.0) * np.abs(s * q + z).sum(axis=0)  # |x - x̂| <= sx/2 per element: [R, N]
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


def test_zero_point_sees_the_quantised_row(tmp_path, rng):
    """A weight whose zero point dwarfs its scale (Moonshine base's conv3 ships z = -1.37 with
    s = 0.021, so z·Σx is ~30x the output): the result must stay within the activations'
    rounding of the exact product. With the float row sum in the zero-point term (the
    kernels before) the two terms' errors did not cancel: 5x the error here, and cosine 0.38
    on the conv's real input."""
    k, n = 832, 96
    m, inits = w8_matmul_model(rng, k, n, relu=False)
    # asymmetric int8 as an exporter writes it: codes centred on -z/s = 65, W = s·q + z ~ 0
    inits["q"] = np.clip(np.rint(rng.standard_normal((k, n)) * 15) + 65, -128, 127).astype(np.int8)
    inits["s"][...], inits["z"][...] = 0.021, -1.37
    for init in m.graph.initializer:
        if init.name in ("q", "s", "z"):
            init.CopyFrom(numpy_helper.from_array(inits[init.name], init.name))
    x = np.maximum(rng.standard_normal((64, k)), 0).astype(F32) * rng.uniform(0.5, 30, k).astype(F32)  # GELU-like
    sess = session(tmp_path, m, {"batch": 1, "seq": 64})
    assert "linear_w8a8" in op_types(sess)
    got = check(sess, m, inits, x[None], relu=False)
    exact = ort_run(m, {"x": x[None]})["y"].astype(np.float64)
    rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert rel < 0.02, rel  # ~0.009; the float row sum gave ~0.045 on these inputs


def test_zero_rows_and_no_bias(tmp_path, rng):
    m, inits = matmul_model(rng, 64, 48, bias=False, relu=False)
    sess = session(tmp_path, m, {"batch": 2, "seq": 20})
    assert op_types(sess) == ["linear_w8a8"]
    x = rng.standard_normal((2, 20, 64)).astype(F32)
    x[0, 3] = 0.0
    x[1, 7] = 0.0
    got = check(sess, m, inits, x, relu=False)
    np.testing.assert_array_equal(got[0, 3], np.zeros(48, F32) + 0.0 * got[0, 3])  # z·0: exactly 0


def test_one_row_is_the_tiles_row_bit_for_bit(tmp_path, rng):
    """A single row (a decode step) takes the kernel's sequential one-row pass; the same row
    inside a block of rows takes the register tile. Integer sums are exact in any order, so
    the two must agree bit for bit — at widths with and without a k tail and an output tail."""
    for k, n in ((416, 1664), (97, 257), (13, 3)):
        m, inits = matmul_model(rng, k, n, per_output=True)
        sess = session(tmp_path, m, {"batch": 1, "seq": 9})
        assert op_types(sess) == ["linear_w8a8"]
        x = (rng.standard_normal((1, 9, k)) * rng.uniform(0.1, 10, (1, 9, 1))).astype(F32)
        block = sess.run({"x": x})["y"]  # 8 rows through the tile, the 9th alone
        for r in (0, 5, 8):
            alone = sess.run({"x": np.ascontiguousarray(x[:, r:r + 1])})["y"]
            np.testing.assert_array_equal(alone[0, 0], block[0, r])


def test_off_by_default_and_any_row_count_when_on(tmp_path, rng, monkeypatch):
    m, inits = matmul_model(rng, 97, 65)
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 1})) == ["linear_w8a8"]  # one row: w8a8 too
    monkeypatch.delenv("NERVE_W8A8")
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 1})) == ["linear_w8"]  # fp32 activations: linear_w8
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 40})) in (["linear"], ["linear_panels"])
    monkeypatch.setenv("NERVE_W8A8", "0")
    assert op_types(session(tmp_path, m, {"batch": 1, "seq": 40})) in (["linear"], ["linear_panels"])


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


def test_which_convs_take_int8_activations(tmp_path, rng, monkeypatch):
    """Default: neither a conv whose weight the model stores as int8 nor one with fp32
    weights; NERVE_W8A8_CONV=stored the first, =1 both (at "int8"; fp32 precision never)."""
    q = rng.integers(-128, 128, (8, 4, 3)).astype(np.int8)
    stored = make_model(dequant_nodes() + [h.make_node("Conv", ["x", "W"], ["y"])], [("x", T.FLOAT, [1, 4, "t"])],
                        [("y", T.FLOAT)], {"q": q, "s": np.array([0.01], F32), "z": np.array([0.0], F32)})
    plain = make_model([h.make_node("Conv", ["x", "w"], ["y"])], [("x", T.FLOAT, [1, 4, "t"])], [("y", T.FLOAT)],
                       {"w": rng.standard_normal((8, 4, 3)).astype(F32)})
    monkeypatch.delenv("NERVE_W8A8", raising=False)
    for env, want_stored, want_plain in ((None, "conv", "conv"), ("stored", "conv_w8a8", "conv"),
                                         ("1", "conv_w8a8", "conv_w8a8")):
        if env is None:
            monkeypatch.delenv("NERVE_W8A8_CONV", raising=False)
        else:
            monkeypatch.setenv("NERVE_W8A8_CONV", env)
        assert op_types(session(tmp_path, stored, {"t": 50}, precision="int8")) == [want_stored], env
        assert op_types(session(tmp_path, plain, {"t": 50}, precision="int8")) == [want_plain], env
        assert op_types(session(tmp_path, stored, {"t": 50}, precision="fp32")) == ["conv"], env  # fp32: never
    monkeypatch.delenv("NERVE_W8A8_CONV", raising=False)
    # the precision name asks for them without the environment
    for precision in ("int8:convs", "w8a8:convs"):
        assert op_types(session(tmp_path, plain, {"t": 50}, precision=precision)) == ["conv_w8a8"]
        assert op_types(session(tmp_path, stored, {"t": 50}, precision=precision)) == ["conv_w8a8"]
    for bad in ("int8:g32", "int8:convs:convs", "fp32:convs"):
        with pytest.raises(nerve.InputError, match="precision"):
            session(tmp_path, plain, {"t": 50}, precision=bad)
