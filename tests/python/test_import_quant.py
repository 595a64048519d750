"""Already-quantized ONNX models (compiler/onnx_ops_quant.py): com.microsoft MatMulNBits onto
the W4 plan ops, DequantizeLinear weights kept int8 (linear_w8), QuantizeLinear /
DequantizeLinear on activations; every model checked against onnxruntime on fresh inputs.

Tolerances (per output element):
  * MatMulNBits -> linear_w4a32: nerve holds the scales as fp16 (fp32 ones are rounded), so
    each weight is off by at most 2^-11 of itself: Σ|x|·|w|·2^-11, plus the fp32 summation
    budget of test_quant_w4.py for each side;
  * -> linear_w4a8 (accuracy_level 4): nerve quantises each row of x to int8 (step max|x|/127)
    and onnxruntime its blocks (no coarser): each is within Σ|w|·max|x|/254 of the exact
    product, so the two within twice that (plus the above);
  * the fp32 fallbacks hold the exact weights: fp32 summation error only;
  * DequantizeLinear weights: test_linear_w8.py's 1e-5 of the output's largest magnitude.
onnxruntime runs the DequantizeLinear models at ORT_ENABLE_BASIC: its extended optimisations
rewrite DequantizeLinear(int8) -> MatMul into an 8-bit MatMulNBits with int8 activations
(~0.5% off the model's own arithmetic).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve
from helpers import make_model as model
from helpers import onnx_session as session
from helpers import forced, op_types, ort_run, variant_params

ort = pytest.importorskip("onnxruntime")

F32 = np.float32
EPS32 = float(np.finfo(np.float32).eps)
REL = 1e-5  # test_linear_w8.py


# ------------------------------------------------------------------ MatMulNBits


def pack_codes(codes, bits):
    """Unsigned codes [rows, n] -> bytes [rows, ceil(n·bits/8)], low bits first (ORT's layout),
    written bit by bit (independent of the importer's unpacking)."""
    rows, n = codes.shape
    bitv = ((codes[..., None].astype(np.int64) >> np.arange(bits)) & 1).astype(np.uint8).reshape(rows, n * bits)
    return np.packbits(bitv, axis=-1, bitorder="little")


def nbits(rng, N, K, bs, bits=4, zp=None, bias=False, acc=0, gidx=False, scales=None, rows_dim="batch"):
    """A MatMulNBits model y = x · Wᵀ (+ b), x [rows_dim, K]; returns (model, W float64 [N, K],
    scales fp32 [N, kb], bias or None). zp: None, "u8" (packed) or "f32"."""
    kb = -(-K // bs)
    u = rng.integers(0, 2 ** bits, (N, kb * bs))
    B = pack_codes(u, bits).reshape(N, kb, bs * bits // 8)
    s = (0.002 + 0.02 * rng.random((N, kb))).astype(F32) if scales is None else scales.astype(F32)
    inits = {"B": B, "s": s.reshape(-1)}
    ins = ["x", "B", "s", "", "", ""]
    z = np.full((N, kb), 2.0 ** (bits - 1))
    if zp == "u8":
        zc = rng.integers(0, 2 ** bits, (N, kb))
        inits["zp"] = pack_codes(zc, bits).reshape(-1)
        z = zc.astype(np.float64)
        ins[3] = "zp"
    elif zp == "f32":
        zf = (rng.random((N, kb)) * (2 ** bits - 1)).astype(F32)
        inits["zp"] = zf.reshape(-1)
        z = zf.astype(np.float64)
        ins[3] = "zp"
    blk = np.arange(K) // bs
    if gidx:
        g = rng.permutation(blk).astype(np.int32)
        inits["g"] = g
        ins[4] = "g"
        blk = g
    w = (u[:, :K] - z[:, blk]) * s.astype(np.float64)[:, blk]
    b = None
    if bias:
        b = rng.standard_normal(N).astype(F32)
        inits["b"] = b
        ins[5] = "b"
    while ins[-1] == "":
        ins.pop()
    node = h.make_node("MatMulNBits", ins, ["y"], name="mnb", domain="com.microsoft", K=K, N=N, bits=bits,
                       block_size=bs, accuracy_level=acc)
    return model([node], [("x", T.FLOAT, [rows_dim, K])], [("y", T.FLOAT)], inits), w, s, b


def fp_budget(x, w, s_full):
    """fp32 summation error of one side (test_quant_w4.py's budget)."""
    k = x.shape[-1]
    return 8 * np.sqrt(k) * EPS32 * (np.abs(x).astype(np.float64) @ (np.abs(w) + 16 * np.abs(s_full)).T)


def check_nbits(sess, m, w, s, b, bs, rng, rows, a8=False, w4=True):
    K = w.shape[1]
    s_full = np.repeat(s.astype(np.float64), bs, axis=1)[:, :K]
    for r in rows:
        x = rng.standard_normal((r, K)).astype(F32)
        got = sess.run({"x": x})["y"]
        ref_ort = ort_run(m, {"x": x})["y"]
        exact = x.astype(np.float64) @ w.T + (0 if b is None else b)
        assert got.shape == ref_ort.shape == (r, w.shape[0])
        tol = 2 * fp_budget(x, w, s_full) + 1e-30
        if w4:
            tol = tol + np.abs(x).astype(np.float64) @ np.abs(w).T * 2.0 ** -11
        if a8:
            act = np.abs(w).sum(axis=1)[None, :] * np.abs(x).max(axis=1, keepdims=True) / 254
            err = np.abs(got - exact)
            assert np.all(err <= tol + act), f"rows {r}: {float((err / (tol + act)).max()):.3g} of the budget vs exact"
            tol = tol + 2 * act
        err = np.abs(got.astype(np.float64) - ref_ort)
        assert np.all(err <= tol), f"rows {r}: worst {float((err / tol).max()):.3g} of the budget vs onnxruntime"


def weight_bytes(sess):
    return sum(t["capacity"] for t in sess.tensors() if t["storage"] == "weight")


def assert_compact(sess, N, K, bs, zero=False, bias=False):
    """The plan holds K·N/2 bytes of packed values + fp16 scales (+ int8 zero points, bias),
    no fp32 weight."""
    kb = K // bs
    want = N * K // 2 + 2 * N * kb + (N * kb if zero else 0) + (4 * N if bias else 0)
    got = weight_bytes(sess)
    assert want <= got <= want + 4 * 64, (got, want)
    assert not any(t["dtype"] == np.float32 and t["storage"] == "weight" and np.prod(t["shape"]) == N * K
                   for t in sess.tensors() if N * K > N)


@pytest.mark.parametrize("N,K,bs", [(1, 32, 32), (3, 96, 32), (13, 416, 32), (97, 192, 64), (257, 128, 128),
                                    (13, 384, 128), (3, 64, 64)])
def test_nbits_symmetric_maps_to_w4a32(tmp_path, rng, N, K, bs):
    m, w, s, b = nbits(rng, N, K, bs)
    sess = session(tmp_path, m, {"batch": 40})
    assert op_types(sess) == ["linear_w4a32"]
    assert_compact(sess, N, K, bs)
    check_nbits(sess, m, w, s, b, bs, rng, rows=(1, 5, 40))


@pytest.mark.parametrize("N,K,bs", [(3, 64, 32), (97, 256, 64), (13, 384, 128)])
def test_nbits_zero_points_and_bias(tmp_path, rng, N, K, bs):
    m, w, s, b = nbits(rng, N, K, bs, zp="u8", bias=True)
    sess = session(tmp_path, m, {"batch": 40})
    assert op_types(sess) == ["linear_w4a32"]
    assert_compact(sess, N, K, bs, zero=True, bias=True)
    check_nbits(sess, m, w, s, b, bs, rng, rows=(1, 5, 40))


def test_nbits_odd_block_count_zero_points(tmp_path, rng):
    """k_blocks odd: each row's last zero-point byte holds one value (rows start on a byte)."""
    m, w, s, b = nbits(rng, 5, 96, 32, zp="u8")
    sess = session(tmp_path, m, {"batch": 4})
    assert op_types(sess) == ["linear_w4a32"]
    check_nbits(sess, m, w, s, b, 32, rng, rows=(1, 4))


@pytest.mark.parametrize("N,K,bs,zp", [(1, 64, 32, None), (13, 128, 64, "u8"), (97, 256, 128, None),
                                       (257, 96, 32, "u8")])
def test_nbits_accuracy_level_4_maps_to_w4a8(tmp_path, rng, N, K, bs, zp):
    m, w, s, b = nbits(rng, N, K, bs, zp=zp, bias=True, acc=4)
    sess = session(tmp_path, m, {"batch": 40})
    assert op_types(sess) == ["linear_w4a8"]
    check_nbits(sess, m, w, s, b, bs, rng, rows=(1, 5, 40), a8=True)


@pytest.mark.parametrize("acc,activations", [(0, "fp32"), (4, "int8")])
def test_nbits_plan_is_the_w4_weight(tmp_path, rng, acc, activations):
    """The plan runs exactly nerve.quant.W4Weight(u − 8, fp16(scales), zp − 8, block): the same
    bits as the W4 kernels on the documented mapping."""
    from nerve.quant import W4Weight

    N, K, bs = 13, 192, 64
    m, w, s, b = nbits(rng, N, K, bs, zp="u8", bias=True, acc=acc)
    sess = session(tmp_path, m, {"batch": 8})
    B = nh.to_array(next(t for t in m.graph.initializer if t.name == "B"))
    zp = nh.to_array(next(t for t in m.graph.initializer if t.name == "zp")).reshape(N, -1)
    u = np.stack([B & 15, B >> 4], axis=-1).reshape(N, K).astype(np.int16)
    z = np.stack([zp & 15, zp >> 4], axis=-1).reshape(N, -1)[:, :K // bs].astype(np.int16)
    w4 = W4Weight((u - 8).astype(np.int8), s.astype(np.float16), (z - 8).astype(np.int8), bs)
    for r in (1, 8):
        x = rng.standard_normal((r, K)).astype(F32)
        assert np.array_equal(sess.run({"x": x})["y"], w4.linear(x, b, activations=activations))


def test_nbits_batched_rank3_and_relu(tmp_path, rng):
    """A [batch, seq, K] (both symbolic) and a consumer after the op."""
    N, K, bs = 33, 128, 32
    m, w, s, _ = nbits(rng, N, K, bs)
    node = m.graph.node[0]
    nodes = [node, h.make_node("Relu", ["y"], ["r"])]
    m2 = model(nodes, [("x", T.FLOAT, ["batch", "seq", K])], [("r", T.FLOAT)],
               {t.name: nh.to_array(t) for t in m.graph.initializer})
    sess = session(tmp_path, m2, {"batch": 2, "seq": 20})
    assert "linear_w4a32" in op_types(sess)
    for shape in ((1, 1), (2, 3), (2, 20)):
        x = rng.standard_normal(shape + (K,)).astype(F32)
        got, ref = sess.run({"x": x})["r"], ort_run(m2, {"x": x})["r"]
        exact = np.maximum(x.astype(np.float64) @ w.T, 0)
        tol = np.abs(x).astype(np.float64) @ np.abs(w).T * 2.0 ** -11 + 1e-4 * np.abs(exact).max()
        assert np.all(np.abs(got - ref) <= tol)


def test_nbits_zero_scale_group(tmp_path, rng):
    """A group with scale 0 (all its weights 0) stays W4: q = zero, scale 1."""
    N, K, bs = 5, 128, 32
    s = (0.002 + 0.02 * rng.random((N, K // bs))).astype(F32)
    s[1, 2] = 0.0
    s[4, 0] = 0.0
    for zp in (None, "u8"):
        m, w, s2, b = nbits(rng, N, K, bs, zp=zp, scales=s)
        sess = session(tmp_path, m, {"batch": 4})
        assert op_types(sess) == ["linear_w4a32"]
        check_nbits(sess, m, w, s2, b, bs, rng, rows=(1, 4))


FALLBACKS = [
    pytest.param(dict(N=13, K=100, bs=32), id="K-not-a-multiple-of-the-block"),
    pytest.param(dict(N=3, K=100, bs=32, zp="u8", bias=True), id="K-not-a-multiple-zp"),
    pytest.param(dict(N=7, K=64, bs=16), id="block-16"),
    pytest.param(dict(N=7, K=64, bs=32, bits=8, zp="u8"), id="bits-8"),
    pytest.param(dict(N=5, K=128, bs=32, bits=2), id="bits-2"),
    pytest.param(dict(N=13, K=96, bs=32, zp="f32"), id="float-zero-points"),
    pytest.param(dict(N=13, K=128, bs=32, gidx=True), id="g_idx"),
    pytest.param(dict(N=3, K=16416, bs=32), id="K-above-16384"),
]


@pytest.mark.parametrize("kw", FALLBACKS)
def test_nbits_fallbacks_are_exact_fp32(tmp_path, rng, kw):
    kw = dict(kw)
    N, K, bs = kw.pop("N"), kw.pop("K"), kw.pop("bs")
    m, w, s, b = nbits(rng, N, K, bs, **kw)
    sess = session(tmp_path, m, {"batch": 40})
    types = op_types(sess)
    assert "linear_w4a32" not in types and "linear_w4a8" not in types, types
    assert {"linear", "linear_panels"} & set(types), types  # an fp32 linear (its weight plain or as panels)
    check_nbits(sess, m, w, s, b, bs, rng, rows=(1, 5, 40), w4=False)


def test_nbits_g_idx_with_zero_points_follows_the_spec(tmp_path, rng):
    """g_idx with uint8 zero points: W[n, k] = s[n, g[k]]·(u − zp[n, g[k]]) (ContribOperators.md).
    onnxruntime 1.32's CPU kernel ignores the zero points in that case, so the reference here
    is float64 numpy."""
    N, K, bs = 5, 96, 32
    m, w, s, b = nbits(rng, N, K, bs, zp="u8", gidx=True)
    sess = session(tmp_path, m, {"batch": 3})
    assert "linear" in op_types(sess)
    x = rng.standard_normal((3, K)).astype(F32)
    exact = x.astype(np.float64) @ w.T
    np.testing.assert_allclose(sess.run({"x": x})["y"], exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("scale", [1e5, 1e-7], ids=["beyond-fp16", "fp16-subnormal"])
def test_nbits_scales_fp16_cannot_hold_fall_back(tmp_path, rng, scale):
    N, K, bs = 3, 64, 32
    s = np.full((N, K // bs), scale, F32) * (1 + rng.random((N, K // bs))).astype(F32)
    m, w, s2, b = nbits(rng, N, K, bs, scales=s)
    sess = session(tmp_path, m, {"batch": 2})
    assert op_types(sess) == ["linear"]
    check_nbits(sess, m, w, s2, b, bs, rng, rows=(1, 2), w4=False)


def test_nbits_runtime_bias_input(tmp_path, rng):
    N, K, bs = 13, 64, 32
    m, w, s, _ = nbits(rng, N, K, bs)
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer}
    node = h.make_node("MatMulNBits", ["x", "B", "s", "", "", "bias"], ["y"], domain="com.microsoft", K=K, N=N,
                       bits=4, block_size=bs)
    m2 = model([node], [("x", T.FLOAT, ["batch", K]), ("bias", T.FLOAT, [N])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m2, {"batch": 4})
    assert op_types(sess)[0] == "linear_w4a32"
    x, bb = rng.standard_normal((4, K)).astype(F32), rng.standard_normal(N).astype(F32)
    got, ref = sess.run({"x": x, "bias": bb})["y"], ort_run(m2, {"x": x, "bias": bb})["y"]
    tol = np.abs(x).astype(np.float64) @ np.abs(w).T * 2.0 ** -11 + 1e-5 * np.abs(ref).max()
    assert np.all(np.abs(got - ref) <= tol)


def _bad(tmp_path, m, *words):
    with pytest.raises(nerve.ModelError) as info:
        session(tmp_path, m, {"batch": 2})
    msg = str(info.value)
    for wd in ("mnb", "MatMulNBits") + words:
        assert wd in msg, msg
    return msg


def test_nbits_bad_b_shape(tmp_path, rng):
    m, *_ = nbits(rng, 5, 64, 32)
    init = next(t for t in m.graph.initializer if t.name == "B")
    init.CopyFrom(nh.from_array(nh.to_array(init).reshape(5, 1, 32), "B"))
    _bad(tmp_path, m, "B must be uint8 of shape", "[5, 2, 16]")


def test_nbits_bad_scales_length(tmp_path, rng):
    m, *_ = nbits(rng, 5, 64, 32)
    init = next(t for t in m.graph.initializer if t.name == "s")
    init.CopyFrom(nh.from_array(nh.to_array(init)[:-1], "s"))
    _bad(tmp_path, m, "scales", "10")


def test_nbits_bad_zero_points_and_k(tmp_path, rng):
    m, *_ = nbits(rng, 5, 64, 32, zp="u8")
    init = next(t for t in m.graph.initializer if t.name == "zp")
    init.CopyFrom(nh.from_array(nh.to_array(init)[:-1], "zp"))
    _bad(tmp_path, m, "zero_points")
    m, *_ = nbits(rng, 5, 64, 32)
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 96
    _bad(tmp_path, m, "K = 64")


def test_nbits_runtime_weight_is_refused(tmp_path, rng):
    N, K, bs = 3, 64, 32
    m, *_ = nbits(rng, N, K, bs)
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer if t.name != "B"}
    m2 = model(list(m.graph.node), [("x", T.FLOAT, ["batch", K]), ("B", T.UINT8, [N, 2, 16])], [("y", T.FLOAT)],
               inits)
    _bad(tmp_path, m2, "B must be a constant")


def test_other_com_microsoft_ops_are_refused(tmp_path):
    m = model([h.make_node("FusedGemm", ["x", "x"], ["y"], name="fg", domain="com.microsoft")],
              [("x", T.FLOAT, [2, 2])], [("y", T.FLOAT)], {})
    with pytest.raises(nerve.ModelError, match=r"fg.*FusedGemm.*com\.microsoft.*MatMulNBits"):
        session(tmp_path, m, {})


# ------------------------------------------------------------------ DequantizeLinear weights


def dq_weight(rng, K, N, dt, axis=None, zp="none"):
    """(q, scale, zero point) of a [K, N] weight: per tensor (axis None) or along axis."""
    if dt == np.int8:
        q = rng.integers(-128, 128, (K, N)).astype(np.int8)
    else:
        q = rng.integers(0, 256, (K, N)).astype(np.uint8)
    n = 1 if axis is None else (K, N)[axis]
    s = (0.002 + 0.01 * rng.random(n)).astype(F32)
    if zp == "none":
        z = None
    elif zp == "fits":  # x − zp fits int8 everywhere (uint8 zp 128, int8 zp 0)
        z = np.full(n, 128 if dt == np.uint8 else 0, dt)
    else:
        z = (rng.integers(90, 170, n) if dt == np.uint8 else rng.integers(-30, 30, n)).astype(dt)
    if axis is None:
        s = s.reshape(())
        z = None if z is None else z.reshape(())
    return q, s, z


def dq_node(rng, K, N, dt, axis, zp, name="dq"):
    """(W = DequantizeLinear node of a random weight, its initializers)."""
    q, s, z = dq_weight(rng, K, N, dt, axis, zp)
    inits = {"q": q, "s": s, **({"z": z} if z is not None else {})}
    kw = {} if axis is None else {"axis": axis}
    return h.make_node("DequantizeLinear", ["q", "s"] + (["z"] if z is not None else []), ["W"], name=name, **kw), inits


def dq_matmul_model(rng, K, N, dt, axis=None, zp="none", bias=False):
    dq, inits = dq_node(rng, K, N, dt, axis, zp)
    nodes = [dq, h.make_node("MatMul", ["x", "W"], ["mm"])]
    last = "mm"
    if bias:
        inits["b"] = rng.standard_normal(N).astype(F32)
        nodes.append(h.make_node("Add", ["mm", "b"], ["y"]))
        last = "y"
    nodes.append(h.make_node("Identity", [last], ["out"]))
    return model(nodes, [("x", T.FLOAT, ["batch", K])], [("out", T.FLOAT)], inits)


def assert_close(got, ref, what=""):
    assert got.shape == ref.shape and got.dtype == ref.dtype, what
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    np.testing.assert_allclose(got, ref, rtol=REL, atol=REL * scale + 1e-30, err_msg=what)


DQ_CASES = [
    pytest.param(np.int8, None, "none", id="int8-per-tensor"),
    pytest.param(np.int8, None, "any", id="int8-per-tensor-zp"),
    pytest.param(np.int8, 1, "none", id="int8-per-axis"),
    pytest.param(np.int8, 1, "any", id="int8-per-axis-zp"),
    pytest.param(np.uint8, None, "any", id="uint8-zp"),
    pytest.param(np.uint8, None, "fits", id="uint8-zp-128"),
    pytest.param(np.uint8, 1, "any", id="uint8-per-axis-zp"),
    pytest.param(np.uint8, None, "none", id="uint8-no-zp"),
]


@pytest.mark.parametrize("dt,axis,zp", DQ_CASES)
@pytest.mark.parametrize("K,N", [(97, 257), (64, 13), (13, 3), (1, 1)])
def test_dequantize_linear_weight_stays_int8(tmp_path, rng, dt, axis, zp, K, N):
    m = dq_matmul_model(rng, K, N, dt, axis, zp, bias=True)
    sess = session(tmp_path, m, {"batch": 4})
    assert op_types(sess) == ["linear_w8"], op_types(sess)
    tensors = sess.tensors()
    assert any(t["dtype"] == np.int8 and t["shape"] == [N, K] for t in tensors)
    assert not any(t["dtype"] == np.float32 and t["storage"] == "weight" and sorted(t["shape"]) == sorted([N, K])
                   for t in tensors if N * K > 1)
    for r in (1, 4):
        x = rng.standard_normal((r, K)).astype(F32)
        assert_close(sess.run({"x": x})["out"], ort_run(m, {"x": x}, basic=True)["out"], f"rows {r}")


@pytest.mark.parametrize("dt,axis,zp", DQ_CASES)
def test_dequantize_linear_fold_is_onnxruntime_bit_for_bit(tmp_path, rng, dt, axis, zp):
    """The folded weight itself (a graph output here) equals onnxruntime's DequantizeLinear bit
    for bit: exact integers x − zp times one fp32 scale, whichever int8 form is recorded."""
    K, N = 40, 24
    dq, inits = dq_node(rng, K, N, dt, axis, zp)
    nodes = [dq, h.make_node("MatMul", ["x", "W"], ["y"])]
    m = model(nodes, [("x", T.FLOAT, ["batch", K])], [("W", T.FLOAT), ("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {"batch": 40})
    x = rng.standard_normal((40, K)).astype(F32)
    got, ref = sess.run({"x": x}), ort_run(m, {"x": x}, basic=True)
    assert np.array_equal(got["W"], ref["W"])
    assert_close(got["y"], ref["y"])


def test_dequantize_linear_axis_0_is_per_input_channel(tmp_path, rng):
    """A scale along K (per input channel) is not per output: the weight stays fp32, correct."""
    m = dq_matmul_model(rng, 40, 20, np.int8, 0, "any")
    sess = session(tmp_path, m, {"batch": 4})
    assert op_types(sess) == ["linear"]
    x = rng.standard_normal((3, 40)).astype(F32)
    assert_close(sess.run({"x": x})["out"], ort_run(m, {"x": x}, basic=True)["out"])


def test_dequantize_linear_embedding_becomes_gather_q8(tmp_path, rng):
    V, D = 50, 24
    q = rng.integers(-128, 128, (V, D)).astype(np.int8)
    s = (0.002 + 0.01 * rng.random(V)).astype(F32)
    nodes = [h.make_node("DequantizeLinear", ["q", "s"], ["E"], axis=0),
             h.make_node("Gather", ["E", "ids"], ["y"], axis=0)]
    m = model(nodes, [("ids", T.INT64, ["n"])], [("y", T.FLOAT)], {"q": q, "s": s})
    sess = session(tmp_path, m, {"n": 8})
    assert op_types(sess) == ["gather_q8"]
    ids = rng.integers(0, V, 8)
    assert np.array_equal(sess.run({"ids": ids})["y"], ort_run(m, {"ids": ids}, basic=True)["y"])


def test_dequantize_linear_blocked_constant(tmp_path, rng):
    """opset 21 block quantization on a constant: folded (exact), fp32 weight."""
    K, N, blk = 64, 10, 16
    q = rng.integers(-128, 128, (K, N)).astype(np.int8)
    s = (0.002 + 0.01 * rng.random((K // blk, N))).astype(F32)
    z = rng.integers(-10, 10, (K // blk, N)).astype(np.int8)
    nodes = [h.make_node("DequantizeLinear", ["q", "s", "z"], ["W"], axis=0, block_size=blk),
             h.make_node("MatMul", ["x", "W"], ["y"])]
    m = model(nodes, [("x", T.FLOAT, ["batch", K])], [("y", T.FLOAT)], {"q": q, "s": s, "z": z}, opset=21)
    sess = session(tmp_path, m, {"batch": 4})
    assert op_types(sess) == ["linear"]
    x = rng.standard_normal((4, K)).astype(F32)
    assert_close(sess.run({"x": x})["y"], ort_run(m, {"x": x}, basic=True)["y"])


# ------------------------------------------------------------------ activations (QDQ pairs)


@pytest.mark.parametrize("dt", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear_matches_onnxruntime_exactly(tmp_path, rng, dt, per_axis):
    """Round half to even, saturation, per-tensor and per-axis parameters."""
    C = 7
    s = (0.05 + 0.1 * rng.random(C if per_axis else ())).astype(F32)
    lo, hi = (-20, 20) if dt == np.int8 else (110, 140)
    z = rng.integers(lo, hi, C if per_axis else ()).astype(dt)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    m = model(nodes, [("x", T.FLOAT, ["n", C])], [("q", dt == np.int8 and T.INT8 or T.UINT8), ("y", T.FLOAT)],
              {"s": s, "z": z})
    sess = session(tmp_path, m, {"n": 64})
    assert "cast" in op_types(sess)
    x = (rng.standard_normal((64, C)) * 8).astype(F32)
    x[:8] = (np.arange(-4, 4)[:, None] + 0.5) * np.broadcast_to(s, (C,))  # ties (x/s within an ulp)
    x[8, :] = 1e6
    x[9, :] = -1e6  # saturation
    got, ref = sess.run({"x": x}), ort_run(m, {"x": x}, basic=True)
    assert got["q"].dtype == ref["q"].dtype == dt
    assert np.array_equal(got["q"], ref["q"])
    assert np.array_equal(got["y"], ref["y"])


@pytest.mark.parametrize("dt", [np.int8, np.uint8])
@pytest.mark.parametrize("zp", [None, 0, 77])
def test_dequantize_linear_of_an_input_is_one_cast_pass(tmp_path, rng, dt, zp):
    """A per-tensor DequantizeLinear of run-time codes (a QDQ model's input, a depthwise
    QLinearConv's x − x_zp) runs as one dequantizing cast, ((float)q − zp)·scale: onnxruntime's
    bits for every code; a per-axis one keeps its ops (a scale per channel)."""
    zp_arr = None if zp is None else np.array(zp if dt == np.uint8 else zp - 128, dt)
    inits = {"s": np.array(0.0173, F32)}
    ins = ["q", "s"]
    if zp_arr is not None:
        inits["z"] = zp_arr
        ins.append("z")
    m = model([h.make_node("DequantizeLinear", ins, ["y"])], [("q", T.INT8 if dt == np.int8 else T.UINT8, [4, 64])],
              [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {})
    assert op_types(sess) == ["cast"], op_types(sess)
    q = np.arange(256).astype(np.uint8).view(dt).reshape(4, 64)
    assert np.array_equal(sess.run({"q": q})["y"], ort_run(m, {"q": q})["y"])
    per_axis = model([h.make_node("DequantizeLinear", ["q", "sc"], ["y"], axis=1)],
                     [("q", T.INT8 if dt == np.int8 else T.UINT8, [4, 64])], [("y", T.FLOAT)],
                     {"sc": (0.01 + rng.random(64)).astype(F32)})
    assert op_types(session(tmp_path, per_axis, {})) != ["cast"]


@pytest.mark.parametrize("dt,zp,scale_out", [(np.uint8, 128, True), (np.int8, 3, True), (np.int8, None, True),
                                            (np.uint8, 7, False)])
def test_qdq_activation_pair_is_one_fake_quant_pass(tmp_path, rng, dt, zp, scale_out):
    """A per-tensor QuantizeLinear → DequantizeLinear pair on activations runs as one
    fake_quant op: bit for bit the unfused ops (ties, saturation, ±inf, NaN) and onnxruntime
    (finite inputs). scale_out False: a DequantizeLinear with scale 1 (the pair's Mul kept
    as the op's 1)."""
    s = np.array(0.037, F32)
    ins, inits = ["x", "s"], {"s": s, "one": np.array(1.0, F32)}
    if zp is not None:
        inits["z"] = np.array(zp, dt)
        ins.append("z")
    dq_ins = ["q", "s" if scale_out else "one"] + (["z"] if zp is not None else [])
    nodes = [h.make_node("QuantizeLinear", ins, ["q"]), h.make_node("DequantizeLinear", dq_ins, ["y"])]
    m = model(nodes, [("x", T.FLOAT, ["n", 11])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {"n": 70})
    assert op_types(sess) == ["fake_quant"]
    x = (rng.standard_normal((70, 11)) * 4).astype(F32)
    x[:8] = (np.arange(-4, 4)[:, None] + 0.5) * s  # ties (x/s within an ulp)
    x[8, :] = 1e6
    x[9, :] = -1e6  # saturation
    got = sess.run({"x": x})["y"]
    assert np.array_equal(got, ort_run(m, {"x": x}, basic=True)["y"])
    x[10, :4] = [np.inf, -np.inf, np.nan, -0.0]
    unfused = session(tmp_path, m, {"n": 70}, fuse=False)
    assert "fake_quant" not in op_types(unfused)
    got, want = sess.run({"x": x})["y"], unfused.run({"x": x})["y"]
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("variant", variant_params("quantize"))
def test_fake_quant_every_variant(tmp_path, rng, variant):
    """Every variant of the dispatch kernel behind fake_quant, through sessions: a QDQ pair
    (float out) and a QuantizeLinear read as codes (u8 out) at an odd length, bit for bit the
    unfused ops (ties, saturation, ±inf, NaN)."""
    s = np.array(0.05, F32)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
             h.make_node("QuantizeLinear", ["x", "s", "z"], ["q2"])]
    m = model(nodes, [("x", T.FLOAT, [7, 37])], [("y", T.FLOAT), ("q2", T.UINT8)], {"s": s, "z": np.array(131, np.uint8)})
    x = (rng.standard_normal((7, 37)) * 8).astype(F32)
    x[0, :10] = (np.arange(-5, 5) + 0.5) * s
    x[1, :6] = [1e9, -1e9, np.inf, -np.inf, np.nan, -0.0]
    want = session(tmp_path, m, {}, fuse=False).run({"x": x})
    with forced("quantize", variant):
        sess = session(tmp_path, m, {})
        assert op_types(sess).count("fake_quant") == 2
        got = sess.run({"x": x})
    assert np.array_equal(got["q2"], want["q2"]) and np.array_equal(got["y"], want["y"], equal_nan=True)


@pytest.mark.parametrize("dt,zp", [(np.uint8, 9), (np.int8, -3)])
def test_qdq_pair_whose_codes_are_read_fuses_only_the_quantize(tmp_path, rng, dt, zp):
    """The quantized codes are also a graph output: the QuantizeLinear alone becomes a
    fake_quant with an integer output, bit for bit the unfused ops (ties, saturation, ±inf,
    NaN) and onnxruntime (finite inputs); the DequantizeLinear stays plain ops on the codes."""
    s = np.array(0.1, F32)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    m = model(nodes, [("x", T.FLOAT, [13, 5])], [("q", T.UINT8 if dt == np.uint8 else T.INT8), ("y", T.FLOAT)],
              {"s": s, "z": np.array(zp, dt)})
    sess = session(tmp_path, m, {})
    kinds = op_types(sess)
    assert kinds.count("fake_quant") == 1 and kinds[0] == "fake_quant" and len(kinds) > 1
    x = (rng.standard_normal((13, 5)) * 10).astype(F32)
    x[:8] = (np.arange(-4, 4)[:, None] + 0.5) * s  # ties (x/s within an ulp)
    x[8, :] = 1e6
    x[9, :] = -1e6  # saturation
    got, ref = sess.run({"x": x}), ort_run(m, {"x": x}, basic=True)
    assert np.array_equal(got["q"], ref["q"]) and np.array_equal(got["y"], ref["y"])
    x[10, :4] = [np.inf, -np.inf, np.nan, -0.0]
    unfused = session(tmp_path, m, {}, fuse=False)
    assert "fake_quant" not in op_types(unfused)
    got, want = sess.run({"x": x}), unfused.run({"x": x})
    assert np.array_equal(got["q"], want["q"]) and np.array_equal(got["y"], want["y"], equal_nan=True)


def test_qdq_activation_pair_before_dq_weight(tmp_path, rng):
    """A QDQ model: x -> Q -> DQ -> MatMul(DQ(int8 weight)) + bias."""
    K, N = 64, 33
    q, s, _ = dq_weight(rng, K, N, np.int8, 1)
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["q", "s"], ["W"], axis=1),
             h.make_node("MatMul", ["xd", "W"], ["y"])]
    inits = {"xs": np.array(0.03, F32), "xz": np.array(128, np.uint8), "q": q, "s": s}
    m = model(nodes, [("x", T.FLOAT, ["batch", K])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {"batch": 4})
    assert "linear_w8" in op_types(sess)
    for r in (1, 4):
        x = rng.standard_normal((r, K)).astype(F32)
        assert_close(sess.run({"x": x})["y"], ort_run(m, {"x": x}, basic=True)["y"])


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32])
def test_dequantize_linear_runtime_input(tmp_path, rng, dt):
    C = 5
    s = (0.01 + rng.random(C)).astype(F32)
    ins, inits = ["x", "s"], {"s": s}
    if dt != np.int32:
        inits["z"] = rng.integers(0 if dt == np.uint8 else -5, 5, C).astype(dt)
        ins.append("z")
    m = model([h.make_node("DequantizeLinear", ins, ["y"], axis=-1)],
              [("x", {np.int8: T.INT8, np.uint8: T.UINT8, np.int32: T.INT32}[dt], ["n", C])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {"n": 9})
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -2 ** 20), min(info.max, 2 ** 20) + 1, (9, C)).astype(dt)
    assert np.array_equal(sess.run({"x": x})["y"], ort_run(m, {"x": x}, basic=True)["y"])


def test_quantize_linear_constant_folds_to_int8_weight(tmp_path, rng):
    """Q(float weight) -> DQ -> MatMul: folded at compile time, the weight stays int8."""
    K, N = 48, 20
    W = rng.standard_normal((K, N)).astype(F32)
    s = (np.abs(W).max(axis=0) / 127).astype(F32)
    nodes = [h.make_node("QuantizeLinear", ["W", "s", "z"], ["q"], axis=1),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["Wd"], axis=1), h.make_node("MatMul", ["x", "Wd"], ["y"])]
    m = model(nodes, [("x", T.FLOAT, ["batch", K])], [("y", T.FLOAT)], {"W": W, "s": s, "z": np.zeros(N, np.int8)})
    sess = session(tmp_path, m, {"batch": 2})
    assert op_types(sess) == ["linear_w8"]
    x = rng.standard_normal((2, K)).astype(F32)
    assert_close(sess.run({"x": x})["y"], ort_run(m, {"x": x}, basic=True)["y"])


def test_bad_dequantize_parameters_name_the_node(tmp_path, rng):
    q = rng.integers(-128, 128, (8, 6)).astype(np.int8)
    m = model([h.make_node("DequantizeLinear", ["q", "s"], ["W"], name="dqbad", axis=1),
               h.make_node("MatMul", ["x", "W"], ["y"])],
              [("x", T.FLOAT, ["batch", 8])], [("y", T.FLOAT)], {"q": q, "s": np.ones(5, F32)})
    with pytest.raises(nerve.ModelError, match=r"dqbad.*DequantizeLinear.*x_scale"):
        session(tmp_path, m, {"batch": 2})
