"""onnxruntime's com.microsoft ops and the ONNX integer ops (MatMulInteger, ConvInteger) in saved models (compiler/onnx_ops_contrib.py and the
dynamic-quantization handlers of onnx_ops_quant.py), and the index ops real exports carry
(GatherND on constant and run-time indices, NonZero on shape arithmetic, IsNaN); each against onnxruntime on fresh inputs.

Tolerances:
  * float ops: 1e-5 of the output's largest magnitude (fp32 summation order differs);
  * dynamic quantization (DynamicQuantizeLinear -> MatMulIntegerToFloat, DynamicQuantizeMatMul):
    nerve multiplies the float activations by the int8-held weight; onnxruntime first rounds
    the activations to uint8 (step a_scale), so its result is within 0.5·a_scale·Σ_k|W[k, n]|
    of the exact product (per output element); against a float64 reference of nerve's own
    arithmetic, the float budget above.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nerve
from helpers import forced, make_model, op_types, ort_run, ort_u8s8_saturates, variant_params
from helpers import onnx_session as session

pytest.importorskip("onnxruntime")

F32 = np.float32
MS = "com.microsoft"
REL = 1e-5


def close(got, ref, what="", rel=REL):
    ref = np.asarray(ref, np.float64)
    tol = rel * max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    err = float(np.abs(np.asarray(got, np.float64) - ref).max(initial=0.0))
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert err <= tol, f"{what}: max |Δ| {err:.3g} > {tol:.3g}"


def quant_weight(rng, K, N, dt, per_column):
    q = (rng.integers(-128, 128, (K, N)) if dt == np.int8 else rng.integers(0, 256, (K, N))).astype(dt)
    n = N if per_column else 1
    s = (0.001 + 0.01 * rng.random(n)).astype(F32).reshape(-1 if per_column else ())
    z = (rng.integers(-20, 20, n) if dt == np.int8 else rng.integers(100, 156, n)).astype(dt)
    return q, s, z.reshape(-1 if per_column else ())


def dequant(q, s, z):
    return (q.astype(np.float64) - z.astype(np.float64)) * s.astype(np.float64)


# ------------------------------------------------------------------ dynamic quantization


@pytest.mark.parametrize("low,high", [(-2.0, 3.0), (0.5, 4.0), (-4.0, -0.25)])
def test_dynamic_quantize_linear_matches_onnxruntime(tmp_path, rng, low, high):
    m = make_model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], name="dql")],
                   [("x", T.FLOAT, [3, 37])], [("y", T.UINT8), ("s", T.FLOAT), ("z", T.UINT8)], {})
    x = rng.uniform(low, high, (3, 37)).astype(F32)
    got, ref = session(tmp_path, m, {}).run({"x": x}), ort_run(m, {"x": x})
    assert got["z"].dtype == np.uint8 and got["z"] == ref["z"]
    np.testing.assert_allclose(got["s"], ref["s"], rtol=2 * float(np.finfo(F32).eps))
    diff = np.abs(got["y"].astype(int) - ref["y"].astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.99  # a tie may round the other way


@pytest.mark.parametrize("dt,per_column,bias", [(np.uint8, False, False), (np.int8, True, True),
                                                (np.uint8, True, True)])
@pytest.mark.parametrize("rows,K,N", [(1, 13, 7), (5, 97, 33), (40, 64, 127)])
def test_dql_then_matmul_integer_to_float_is_the_float_product(tmp_path, rng, dt, per_column, bias, rows, K, N):
    q, s, z = quant_weight(rng, K, N, dt, per_column)
    b = rng.standard_normal(N).astype(F32)
    ins = ["xq", "B", "xs", "Bs", "xz", "Bz"] + (["bias"] if bias else [])
    m = make_model([h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
                    h.make_node("MatMulIntegerToFloat", ins, ["y"], name="mitf", domain=MS)],
                   [("x", T.FLOAT, ["rows", K])], [("y", T.FLOAT)],
                   {"B": q, "Bs": s, "Bz": z, **({"bias": b} if bias else {})})
    sess = session(tmp_path, m, {"rows": 64})
    assert "reduce" not in op_types(sess)  # the DynamicQuantizeLinear fed only this: dropped
    x = rng.standard_normal((rows, K)).astype(F32)
    w = dequant(q, s, z)
    exact = x.astype(np.float64) @ w + (b if bias else 0)
    got = sess.run({"x": x})["y"]
    close(got, exact, "vs the float product")
    a_scale = (max(x.max(), 0) - min(x.min(), 0)) / 255
    bound = 0.5 * a_scale * np.abs(w).sum(axis=0) + 1e-5 * np.abs(exact).max()
    assert np.all(np.abs(ort_run(m, {"x": x})["y"] - got) <= bound)


def test_matmul_integer_to_float_on_runtime_uint8_is_exact(tmp_path, rng):
    K, N = 45, 19
    q, s, z = quant_weight(rng, K, N, np.int8, True)
    m = make_model([h.make_node("MatMulIntegerToFloat", ["a", "B", "as", "Bs", "az", "Bz"], ["y"], name="m",
                                domain=MS)],
                   [("a", T.UINT8, [6, K])], [("y", T.FLOAT)],
                   {"B": q, "Bs": s, "Bz": z, "as": np.array(0.02, F32), "az": np.array(131, np.uint8)})
    a = rng.integers(0, 256, (6, K)).astype(np.uint8)
    close(session(tmp_path, m, {}).run({"a": a})["y"], ort_run(m, {"a": a})["y"], "runtime uint8 A")


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(tmp_path, rng, per_column):
    K, N = 127, 65
    q, s, z = quant_weight(rng, K, N, np.int8, per_column)
    b = rng.standard_normal(N).astype(F32)
    m = make_model([h.make_node("DynamicQuantizeMatMul", ["x", "B", "Bs", "Bz", "bias"], ["y"], name="dqmm",
                                domain=MS)],
                   [("x", T.FLOAT, [1, "t", K])], [("y", T.FLOAT)], {"B": q, "Bs": s, "Bz": z, "bias": b})
    sess = session(tmp_path, m, {"t": 16})
    x = rng.standard_normal((1, 9, K)).astype(F32)
    got = sess.run({"x": x})["y"]
    w = dequant(q, s, z)
    exact = x.astype(np.float64) @ w + b
    close(got, exact, "vs the float product")
    a_scale = (max(x.max(), 0) - min(x.min(), 0)) / 255
    assert np.all(np.abs(ort_run(m, {"x": x})["y"] - got) <= 0.5 * a_scale * np.abs(w).sum(axis=0) + 1e-4)


def test_dynamic_quantize_matmul_weight_runs_int8(tmp_path, rng):
    K, N = 64, 48
    q, s, z = quant_weight(rng, K, N, np.uint8, False)
    m = make_model([h.make_node("DynamicQuantizeMatMul", ["x", "B", "Bs", "Bz"], ["y"], name="dqmm", domain=MS)],
                   [("x", T.FLOAT, [1, K])], [("y", T.FLOAT)], {"B": q, "Bs": s, "Bz": z})
    x = rng.standard_normal((1, K)).astype(F32)
    w = dequant(q, s, z)
    sess = session(tmp_path, m, {})  # fp32 activations: the int8 weight widened in registers
    assert "linear_w8" in op_types(sess)
    close(sess.run({"x": x})["y"], x.astype(np.float64) @ w, "int8 weight")
    sess = session(tmp_path, m, {}, precision="int8")  # int8 activations too, on one row as on many
    assert "linear_w8a8" in op_types(sess)
    step = np.abs(x).max() / 127  # each quantised activation is off by at most step/2
    assert np.all(np.abs(sess.run({"x": x})["y"] - x.astype(np.float64) @ w)
                  <= step / 2 * np.abs(w).sum(axis=0) + 1e-4 * (np.abs(x) @ np.abs(w) + 1))


def test_matmul_integer_and_qlinear_matmul(tmp_path, rng):
    K, N = 33, 17
    bq = rng.integers(-128, 128, (K, N)).astype(np.int8)
    mi = make_model([h.make_node("MatMulInteger", ["a", "B", "az", "Bz"], ["y"], name="mi")],
                    [("a", T.UINT8, [4, K])], [("y", T.INT32)],
                    {"B": bq, "az": np.array(120, np.uint8), "Bz": np.array(3, np.int8)})
    a = rng.integers(0, 256, (4, K)).astype(np.uint8)
    got = session(tmp_path, mi, {}).run({"a": a})["y"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ort_run(mi, {"a": a})["y"])  # every sum < 2^24: exact

    qm = make_model([h.make_node("QLinearMatMul", ["a", "as", "az", "B", "Bs", "Bz", "ys", "yz"], ["y"],
                                 name="qlm")],
                    [("a", T.UINT8, [4, K])], [("y", T.UINT8)],
                    {"as": np.array(0.01, F32), "az": np.array(128, np.uint8), "B": bq, "Bs": np.array(0.02, F32),
                     "Bz": np.array(0, np.int8), "ys": np.array(0.05, F32), "yz": np.array(100, np.uint8)})
    (tmp_path / "q").mkdir()
    got = session(tmp_path / "q", qm, {}).run({"a": a})["y"]
    diff = np.abs(got.astype(int) - ort_run(qm, {"a": a})["y"].astype(int))
    assert got.dtype == np.uint8 and diff.max() <= 1 and (diff == 0).mean() > 0.95


def _int_ref(a, b, az, bz):
    """(a − az)·(b − bz) in int64 over the last axis of a: the exact MatMulInteger."""
    return np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz)


_ONNX_INT = {np.dtype(np.uint8): T.UINT8, np.dtype(np.int8): T.INT8}


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8),
                                     (np.int8, np.uint8)])
@pytest.mark.parametrize("a_shape,n,zps", [((4, 33), 17, "tensor"), ((1, 1025), 257, "tensor"),
                                           ((13, 3), 1, "none"), ((2, 5, 97), 13, "row_col"),
                                           ((97,), 127, "col"), ((7, 4099), 29, "row_col")])
def test_matmul_integer_exact_op(tmp_path, rng, adt, bdt, a_shape, n, zps):
    """A constant B runs as op matmul_integer: int32 equal to the exact integer product for
    u8/s8 A and B, zero points absent, per tensor, per row of A and per column of B, A of
    rank 1 to 3 and depths whose sums pass 2^24 (an fp32 product could not hold them), and
    onnxruntime's result where its kernel takes the zero points (not per row of A)."""
    k = a_shape[-1]
    info = np.iinfo(adt)
    a = rng.integers(info.min, info.max + 1, a_shape).astype(adt)
    b = rng.integers(np.iinfo(bdt).min, np.iinfo(bdt).max + 1, (k, n)).astype(bdt)
    inits = {"B": b}
    ins = ["a", "B"]
    az = bz = np.int64(0)
    if zps != "none":
        if zps == "row_col" and len(a_shape) >= 2:
            az_v = rng.integers(info.min, info.max + 1, a_shape[:-1] + (1,)).astype(adt)
            az = az_v.astype(np.int64)
        else:
            az_v = np.array(rng.integers(info.min, info.max + 1), adt)
            az = az_v.astype(np.int64)
        bi = np.iinfo(bdt)
        bz_v = (rng.integers(bi.min, bi.max + 1, n) if zps in ("row_col", "col") else
                np.array(rng.integers(bi.min, bi.max + 1))).astype(bdt)
        bz = bz_v.astype(np.int64)
        inits.update(az=az_v.reshape(-1) if az_v.ndim else az_v, bz=bz_v)
        ins += ["az", "bz"]
    m = make_model([h.make_node("MatMulInteger", ins, ["y"], name="mi")],
                   [("a", _ONNX_INT[np.dtype(adt)], list(a_shape))], [("y", T.INT32)], inits)
    sess = session(tmp_path, m, {})
    assert "matmul_integer" in op_types(sess)
    got = sess.run({"a": a})["y"]
    want = _int_ref(a, b, az, bz)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if zps != "row_col" or len(a_shape) < 2:  # onnxruntime's kernel takes one a_zero_point only
        np.testing.assert_array_equal(got, ort_run(m, {"a": a})["y"])


@pytest.mark.parametrize("variant", variant_params("matmul_integer"))
@pytest.mark.parametrize("rows", [1, 5, 70])
def test_matmul_integer_every_variant(tmp_path, rng, variant, rows):
    """Every variant of the dispatch op through a session: s8 rows and u8 weights with both
    zero points, at one row (the GEMV path), a few rows and more than two threads' chunks, equal
    to the exact integers."""
    k, n = 131, 300  # 5 rows: two threads share the outputs (256 + 44); 70: the rows
    a = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    bz = rng.integers(0, 256, n).astype(np.uint8)
    m = make_model([h.make_node("MatMulInteger", ["a", "B", "az", "bz"], ["y"], name="mi")],
                   [("a", T.INT8, [rows, k])], [("y", T.INT32)], {"B": b, "az": np.array(-7, np.int8), "bz": bz})
    with forced("matmul_integer", variant):
        got = session(tmp_path, m, {}, threads=2).run({"a": a})["y"]
    np.testing.assert_array_equal(got, _int_ref(a, b, -7, bz.astype(np.int64)))


def test_matmul_integer_keeps_weights_int8_and_checks_zero_points(tmp_path, rng):
    """The weight is held as one byte per value (plus 4 bytes of column sum per output), and a
    run-time a_zero_point whose count is neither 1 nor the rows' is refused by name, the
    output untouched."""
    k, n = 640, 384
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    m = make_model([h.make_node("MatMulInteger", ["a", "B", "az"], ["y"], name="mi")],
                   [("a", T.UINT8, ["rows", k]), ("az", T.UINT8, ["z"])], [("y", T.INT32)], {"B": b})
    sess = session(tmp_path, m, {"rows": 8, "z": 8})
    assert "matmul_integer" in op_types(sess)
    assert sess.memory_report()["weight_bytes"] <= k * n + 4 * n + 4096
    a = rng.integers(0, 256, (5, k)).astype(np.uint8)
    az = rng.integers(0, 256, 5).astype(np.uint8)
    np.testing.assert_array_equal(sess.run({"a": a, "az": az})["y"], _int_ref(a, b, az.astype(np.int64)[:, None], 0))
    with pytest.raises(nerve.NerveError, match="a_zero_point"):
        sess.run({"a": a, "az": az[:3]})


def test_quantize_dynamic_model_matches_onnxruntime_bit_for_bit(tmp_path, rng):
    """A model quantized by onnxruntime's own quantize_dynamic (DynamicQuantizeLinear ->
    MatMulInteger -> Cast -> Mul, int8 weights, as Optimum exports them): nerve's outputs equal
    onnxruntime's bit for bit at 1, 3 and 37 rows, through fused fake_quant (u8 out) and
    matmul_integer ops, with the weights held at a quarter of fp32's bytes."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    import onnx

    d, f = 96, 200
    nodes, inits, cur = [], {}, "x"
    for i in range(2):
        inits[f"w1_{i}"] = (rng.standard_normal((d, f)) * 0.1).astype(F32)
        inits[f"w2_{i}"] = (rng.standard_normal((f, d)) * 0.1).astype(F32)
        nodes += [h.make_node("MatMul", [cur, f"w1_{i}"], [f"h{i}"]), h.make_node("Relu", [f"h{i}"], [f"r{i}"]),
                  h.make_node("MatMul", [f"r{i}", f"w2_{i}"], [f"o{i}"])]
        cur = f"o{i}"
    nodes.append(h.make_node("Identity", [cur], ["y"]))
    fp32 = make_model(nodes, [("x", T.FLOAT, ["n", d])], [("y", T.FLOAT)], inits)
    onnx.save(fp32, tmp_path / "fp32.onnx")
    quantization.quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "q.onnx"),
                                  weight_type=quantization.QuantType.QInt8)
    q = onnx.load(tmp_path / "q.onnx")
    assert "MatMulInteger" in {nd.op_type for nd in q.graph.node}
    sess = nerve.Session(tmp_path / "q.onnx", cache=False)
    for rows in (37, 1, 3):
        x = rng.standard_normal((rows, d)).astype(F32)
        np.testing.assert_array_equal(sess.run({"x": x})["y"], ort_run(q, {"x": x})["y"])
    kinds = op_types(sess)
    assert kinds.count("matmul_integer") == 4 and "fake_quant" in kinds
    assert sess.memory_report()["weight_bytes"] < 0.3 * sum(v.nbytes for v in inits.values())


@pytest.mark.parametrize("xdt,wdt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
                                   dict(kernel_shape=[1, 1]),
                                   dict(kernel_shape=[3, 3], group=4, dilations=[2, 1], pads=[2, 0, 1, 1])])
def test_conv_integer_is_exact(tmp_path, rng, xdt, wdt, attrs):
    """ConvInteger (ddddocr's default model is made of them): int32 outputs equal to
    onnxruntime's, bit for bit, for a random input at an odd size."""
    group = attrs.get("group", 1)
    C, M = 8, 12
    kh, kw = attrs["kernel_shape"]
    lo, hi = (0, 256) if wdt == np.uint8 else (-128, 128)
    w = rng.integers(lo, hi, (M, C // group, kh, kw)).astype(wdt)
    xlo, xhi = (0, 256) if xdt == np.uint8 else (-128, 128)
    x = rng.integers(xlo, xhi, (1, C, 13, 11)).astype(xdt)
    inits = {"W": w, "xz": np.array(rng.integers(xlo, xhi), xdt), "wz": np.array(rng.integers(lo, hi), wdt)}
    m = make_model([h.make_node("ConvInteger", ["x", "W", "xz", "wz"], ["y"], name="ci", **attrs)],
                   [("x", T.UINT8 if xdt == np.uint8 else T.INT8, list(x.shape))], [("y", T.INT32)], inits)
    sess = session(tmp_path, m, {})
    assert ("conv_integer" in op_types(sess)) == (group == 1)  # groups: fp32 on the exact integers
    got = sess.run({"x": x})["y"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ort_run(m, {"x": x})["y"])  # every sum < 2^24: exact


@pytest.mark.parametrize("xdt,wdt", [(np.uint8, np.int8), (np.int8, np.uint8)])
@pytest.mark.parametrize("case", ["1d", "deep", "wide_pads"])
def test_conv_integer_exact_op(tmp_path, rng, xdt, wdt, case):
    """Op conv_integer against onnxruntime, bit for bit: a 1-D conv (run as H = 1), a deep one
    whose sums pass 2^24 (C·kh·kw = 1250: an fp32 conv could not hold them), asymmetric pads
    larger than the kernel's reach with stride and dilation (padding holds the zero point), on
    one and two images; and under every thread count the same."""
    xi, wi = np.iinfo(xdt), np.iinfo(wdt)
    if case == "1d":
        xs, ws, attrs = (2, 5, 37), (7, 5, 4), dict(strides=[3], pads=[2, 1], dilations=[2])
    elif case == "deep":
        xs, ws, attrs = (1, 50, 9, 11), (33, 50, 5, 5), dict(pads=[2, 2, 2, 2])
    else:
        xs, ws, attrs = (2, 3, 6, 7), (13, 3, 3, 2), dict(strides=[2, 1], pads=[3, 0, 1, 4], dilations=[1, 2])
    x = rng.integers(xi.min, xi.max + 1, xs).astype(xdt)
    w = rng.integers(wi.min, wi.max + 1, ws).astype(wdt)
    inits = {"W": w, "xz": np.array(rng.integers(xi.min, xi.max + 1), xdt),
             "wz": np.array(rng.integers(wi.min, wi.max + 1), wdt)}
    m = make_model([h.make_node("ConvInteger", ["x", "W", "xz", "wz"], ["y"], name="ci", **attrs)],
                   [("x", _ONNX_INT[np.dtype(xdt)], list(xs))], [("y", T.INT32)], inits)
    want = ort_run(m, {"x": x})["y"]
    for threads in (1, 2):
        sess = session(tmp_path, m, {}, threads=threads)
        assert "conv_integer" in op_types(sess)
        got = sess.run({"x": x})["y"]
        assert got.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_conv_integer_per_channel_weight_zero_point(tmp_path, rng):
    """A zero point per output channel (the spec allows it; onnxruntime's kernel does not)
    against a numpy reference of the integer convolution."""
    w = rng.integers(-128, 128, (6, 3, 3, 3)).astype(np.int8)
    wz = rng.integers(-5, 5, 6).astype(np.int8)
    x = rng.integers(0, 256, (2, 3, 7, 9)).astype(np.uint8)
    m = make_model([h.make_node("ConvInteger", ["x", "W", "xz", "wz"], ["y"], name="ci", kernel_shape=[3, 3])],
                   [("x", T.UINT8, list(x.shape))], [("y", T.INT32)],
                   {"W": w, "xz": np.array(7, np.uint8), "wz": wz})
    got = session(tmp_path, m, {}).run({"x": x})["y"]
    xi = x.astype(np.int64) - 7
    wi = w.astype(np.int64) - wz.astype(np.int64).reshape(-1, 1, 1, 1)
    ref = np.zeros((2, 6, 5, 7), np.int64)
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,mc->nmhw", xi[:, :, i:i + 5, j:j + 7], wi[:, :, i, j])
    np.testing.assert_array_equal(got, ref)


def test_dynamic_quantize_linear_into_conv_integer(tmp_path, rng):
    """ddddocr's pattern: DynamicQuantizeLinear → ConvInteger → Cast → Mul by the two scales.
    The quantize-dequantize steps run as one fake_quant pass, bit for bit the unfused ops,
    and the int32 products equal onnxruntime's wherever the activations' codes agree (a tie
    may round the other way: test_dynamic_quantize_linear_matches_onnxruntime)."""
    w = rng.integers(-128, 128, (6, 4, 3, 3)).astype(np.int8)
    m = make_model([h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
                    h.make_node("ConvInteger", ["xq", "W", "xz"], ["acc"], name="ci", pads=[1, 1, 1, 1]),
                    h.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT),
                    h.make_node("Mul", ["xs", "ws"], ["sc"]),
                    h.make_node("Mul", ["accf", "sc"], ["y"])],
                   [("x", T.FLOAT, [1, 4, 9, 13])], [("y", T.FLOAT)], {"W": w, "ws": np.array(0.02, F32)})
    sess = session(tmp_path, m, {})
    assert "fake_quant" in op_types(sess) and "reduce" in op_types(sess)
    x = rng.standard_normal((1, 4, 9, 13)).astype(F32)
    got = sess.run({"x": x})["y"]
    assert np.array_equal(got, session(tmp_path, m, {}, fuse=False).run({"x": x})["y"])
    ref = ort_run(m, {"x": x})["y"]
    step = 0.02 * (max(x.max(), 0) - min(x.min(), 0)) / 255 * 128  # one code apart in one input
    assert np.mean(got == ref) > 0.9 and np.abs(got - ref).max() <= 9 * 4 * step


def _dq_lstm_model(rng, dirs, hidden, n_in, per_channel, wdt):
    """A DynamicQuantizeLSTM node with random quantized weights, and the same LSTM with the
    weights dequantised (standard layout), for onnxruntime to run both."""
    lo, hi = (-128, 128) if wdt == np.int8 else (0, 256)
    inits, float_inits = {}, {}
    for name, rows in (("W", n_in), ("R", hidden)):
        q = rng.integers(lo, hi, (dirs, rows, 4 * hidden)).astype(wdt)
        shape = (dirs, 4 * hidden) if per_channel else (dirs,)
        sc = (0.002 + 0.01 * rng.random(shape)).astype(F32)
        # onnxruntime's kernel takes per-channel int8 weights only with zero points of 0 (what
        # its quantizer writes); the others get non-zero ones
        zp = (np.zeros(shape, np.int8) if per_channel else rng.integers(-3, 4, shape).astype(np.int8)) \
            if wdt == np.int8 else rng.integers(120, 136, shape).astype(np.uint8)
        inits.update({name: q, name + "s": sc, name + "z": zp})
        expand = (slice(None), None, slice(None)) if per_channel else (slice(None), None, None)
        f = (q.astype(np.float64) - zp.astype(np.float64)[expand]) * sc.astype(np.float64)[expand]
        float_inits[name] = np.ascontiguousarray(f.transpose(0, 2, 1)).astype(F32)
    b = (0.1 * rng.standard_normal((dirs, 8 * hidden))).astype(F32)
    inits["B"] = float_inits["B"] = b
    direction = "bidirectional" if dirs == 2 else "forward"
    outs = [("Y", T.FLOAT), ("Yh", T.FLOAT), ("Yc", T.FLOAT)]
    q = make_model([h.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "B", "", "", "", "", "Ws", "Wz", "Rs", "Rz"],
                                ["Y", "Yh", "Yc"], name="dql", domain=MS, hidden_size=hidden, direction=direction)],
                   [("x", T.FLOAT, [7, 2, n_in])], outs, inits)
    f = make_model([h.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Yh", "Yc"], name="l", hidden_size=hidden,
                                direction=direction)],
                   [("x", T.FLOAT, [7, 2, n_in])], outs, float_inits)
    return q, f


@pytest.mark.parametrize("dirs,per_channel,wdt", [(1, False, np.int8), (2, False, np.int8), (2, True, np.int8),
                                                   (1, True, np.uint8)])
def test_dynamic_quantize_lstm(tmp_path, rng, dirs, per_channel, wdt):
    """DynamicQuantizeLSTM = the LSTM of its dequantised weights on float activations: equal
    to onnxruntime's float LSTM with those weights; onnxruntime's own DynamicQuantizeLSTM
    also rounds x and h to uint8 every step, so it is only close (measured ~1e-2)."""
    q, f = _dq_lstm_model(rng, dirs, 24, 13, per_channel, wdt)
    x = rng.standard_normal((7, 2, 13)).astype(F32)
    got = session(tmp_path, q, {}).run({"x": x})
    ref = ort_run(f, {"x": x})
    for k in ("Y", "Yh", "Yc"):
        close(got[k], ref[k], k)
    # onnxruntime's DynamicQuantizeLSTM takes int8 weights only, which an AVX2-only CPU's
    # onnxruntime multiplies by its uint8 x and h with int16 saturation (helpers.ort_u8s8_saturates)
    if wdt == np.int8 and not ort_u8s8_saturates():
        rq = ort_run(q, {"x": x})
        assert float(np.abs(got["Y"] - rq["Y"]).max()) < 0.1  # h in (-1, 1): rounding, not a wrong gate
    from nerve.compiler import compile_program
    lstm = next(o for o in compile_program(q.SerializeToString(), tmp_path).ops if o.type == "lstm")
    # W and R stay int8 in the plan (W8: the products read a quarter of the bytes)
    assert lstm.inputs[1].dtype == np.int8 and lstm.inputs[2].dtype == np.int8


def test_lstm_int8_r_checks_its_scales():
    """The lstm op's int8 R without its per-row scales, or with scales of the wrong shape:
    clear errors naming the op."""
    from nerve.compiler.graph import Op, Program, Value
    from nerve.session import run_program_once

    def run(*extra):
        x = Value("x", np.float32, (3, 1, 4), const=np.ones((3, 1, 4), np.float32))
        w = Value("w", np.float32, (1, 8, 4), const=np.full((1, 8, 4), 0.1, np.float32))
        r = Value("r", np.int8, (1, 8, 2), const=np.ones((1, 8, 2), np.int8))
        ys = [Value("y", np.float32, (3, 1, 1, 2)), Value("yh", np.float32, (1, 1, 2)), Value("yc", np.float32, (1, 1, 2))]
        op = Op("lstm", [x, w, r, None, None, None, None, None] + list(extra), ys, iattr=[0, 2, 0], fattr=[0.0],
                scratch=Value("s", np.uint8, (4 * 8 * 2 + 4 * 3 * 8,)), name="bad_lstm")
        for y in ys:
            y.producer = op
        return run_program_once(Program(ops=[op], inputs=[], outputs=ys, symbols={}, binds=[]))

    with pytest.raises(nerve.NerveError, match="bad_lstm.*per-row scales"):
        run()
    with pytest.raises(nerve.NerveError, match="bad_lstm.*R scales"):
        run(Value("rs", np.float32, (1, 4), const=np.ones((1, 4), np.float32)))
    scale = 0.5
    out = run(Value("rs", np.float32, (1, 8), const=np.full((1, 8), scale, np.float32)))
    # every gate sees x · Wᵀ + h · Rᵀ = 0.4 + 0.5 · (h0 + h1): a float LSTM with R = 0.5 agrees
    h, c = np.zeros(2), np.zeros(2)
    for _ in range(3):
        g = np.full(8, 0.4 + scale * h.sum())
        i, o, f, cc = 1 / (1 + np.exp(-g[:2])), 1 / (1 + np.exp(-g[2:4])), 1 / (1 + np.exp(-g[4:6])), np.tanh(g[6:])
        c = f * c + i * cc
        h = o * np.tanh(c)
    np.testing.assert_allclose(out[1].reshape(-1), h, rtol=1e-6, atol=1e-7)


def test_lstm_int8_w_checks_its_scales_and_gru_refuses_it():
    """The lstm op's int8 W (its scales at input 11, offsets at 12): refused without scales or
    with scales of the wrong shape, naming W; with them, W = scale·q + offset. GRU has no
    int8 W: refused as a W of the wrong dtype."""
    from nerve.compiler.graph import Op, Program, Value
    from nerve.session import run_program_once

    def run(kind, *extra):
        gates = 4 if kind == "lstm" else 3
        x = Value("x", np.float32, (3, 1, 4), const=np.ones((3, 1, 4), np.float32))
        w = Value("w", np.int8, (1, 2 * gates, 4), const=np.full((1, 2 * gates, 4), 2, np.int8))
        r = Value("r", np.float32, (1, 2 * gates, 2), const=np.full((1, 2 * gates, 2), 0.5, np.float32))
        n_out = 3 if kind == "lstm" else 2
        ys = [Value("y", np.float32, (3, 1, 1, 2))] + [Value(f"y{i}", np.float32, (1, 1, 2)) for i in range(n_out - 1)]
        head = [x, w, r, None, None, None] + ([None, None, None, None, None] if kind == "lstm" else [])
        op = Op(kind, head + list(extra), ys, iattr=[0, 2, 0], fattr=[0.0],
                scratch=Value("s", np.uint8, (4 * 8 * 2 + 4 * 3 * 8 + 64,)), name="bad_" + kind)
        for y in ys:
            y.producer = op
        return run_program_once(Program(ops=[op], inputs=[], outputs=ys, symbols={}, binds=[]))

    with pytest.raises(nerve.NerveError, match="bad_lstm.*int8 W needs its per-row scales"):
        run("lstm")
    with pytest.raises(nerve.NerveError, match="bad_lstm.*W scales"):
        run("lstm", Value("ws", np.float32, (1, 4), const=np.ones((1, 4), np.float32)))
    with pytest.raises(nerve.NerveError, match="bad_lstm.*W offsets"):
        run("lstm", Value("ws", np.float32, (1, 8), const=np.ones((1, 8), np.float32)),
            Value("wo", np.float32, (1, 3), const=np.ones((1, 3), np.float32)))
    with pytest.raises(nerve.NerveError, match="bad_gru.*W"):
        run("gru")
    # W = 0.1·2 + 0.2 = 0.4 everywhere: every gate sees 4 · 0.4 + 0.5 · (h0 + h1), as a float LSTM
    out = run("lstm", Value("ws", np.float32, (1, 8), const=np.full((1, 8), 0.1, np.float32)),
              Value("wo", np.float32, (1, 8), const=np.full((1, 8), 0.2, np.float32)))
    h, c = np.zeros(2), np.zeros(2)
    for _ in range(3):
        g = np.full(8, 1.6 + 0.5 * h.sum())
        i, o, f, cc = 1 / (1 + np.exp(-g[:2])), 1 / (1 + np.exp(-g[2:4])), 1 / (1 + np.exp(-g[4:6])), np.tanh(g[6:])
        c = f * c + i * cc
        h = o * np.tanh(c)
    np.testing.assert_allclose(out[1].reshape(-1), h, rtol=1e-6, atol=1e-6)


def test_dynamic_quantize_lstm_needs_constant_weights(tmp_path, rng):
    q, _ = _dq_lstm_model(rng, 1, 8, 5, False, np.int8)
    q.graph.initializer.remove(next(i for i in q.graph.initializer if i.name == "Ws"))
    q.graph.input.append(h.make_tensor_value_info("Ws", T.FLOAT, [1]))
    with pytest.raises(nerve.ModelError, match=r"dql.*must be constants"):
        session(tmp_path, q, {})


def test_dynamic_quantization_bad_input_names_the_node(tmp_path, rng):
    m = make_model([h.make_node("DynamicQuantizeMatMul", ["x", "B", "Bs"], ["y"], name="dq_bad", domain=MS)],
                   [("x", T.FLOAT, [2, 8])], [("y", T.FLOAT)],
                   {"B": np.zeros((8, 4, 2), np.int8), "Bs": np.array(1.0, F32)})
    with pytest.raises(nerve.ModelError, match=r"dq_bad.*rank 3"):
        session(tmp_path, m, {})
    m = make_model([h.make_node("DynamicQuantizeMatMul", ["x", "B", "Bs"], ["y"], name="dq_k", domain=MS)],
                   [("x", T.FLOAT, [2, 9])], [("y", T.FLOAT)],
                   {"B": np.zeros((8, 4), np.int8), "Bs": np.array(1.0, F32)})
    with pytest.raises(nerve.ModelError, match=r"dq_k.*inner dimensions"):
        session(tmp_path, m, {})


# ------------------------------------------------------------------ float contrib ops


@pytest.mark.parametrize("ta,tb,alpha", [(0, 1, 0.125), (1, 0, 1.0), (1, 1, -2.0), (0, 0, 0.5)])
def test_fused_matmul(tmp_path, rng, ta, tb, alpha):
    a_shape = [2, 3, 7, 5] if ta else [2, 3, 5, 7]
    b_shape = [3, 4, 7] if tb else [3, 7, 4]
    m = make_model([h.make_node("FusedMatMul", ["a", "b"], ["y"], name="fm", domain=MS, alpha=alpha, transA=ta,
                                transB=tb)],
                   [("a", T.FLOAT, a_shape), ("b", T.FLOAT, b_shape)], [("y", T.FLOAT)], {})
    feeds = {"a": rng.standard_normal(a_shape).astype(F32), "b": rng.standard_normal(b_shape).astype(F32)}
    close(session(tmp_path, m, {}).run(feeds)["y"], ort_run(m, feeds)["y"], "FusedMatMul")


@pytest.mark.parametrize("act,params", [("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]),
                                        ("Clip", [-0.5, 0.5]), ("HardSigmoid", [0.3, 0.4]), ("", [])])
def test_fused_conv(tmp_path, rng, act, params):
    attrs = {"kernel_shape": [5], "strides": [2], "pads": [1, 2]}
    if act:
        attrs["activation"] = act
    if params:
        attrs["activation_params"] = params
    w, b = rng.standard_normal((6, 3, 5)).astype(F32), rng.standard_normal(6).astype(F32)
    m = make_model([h.make_node("FusedConv", ["x", "w", "b"], ["y"], name="fc", domain=MS, **attrs)],
                   [("x", T.FLOAT, [1, 3, 41])], [("y", T.FLOAT)], {"w": w, "b": b})
    x = rng.standard_normal((1, 3, 41)).astype(F32)
    close(session(tmp_path, m, {}).run({"x": x})["y"], ort_run(m, {"x": x})["y"], act)


def test_fused_conv_refuses_unknown_activation(tmp_path):
    m = make_model([h.make_node("FusedConv", ["x", "w"], ["y"], name="fc_bad", domain=MS, activation="Swish")],
                   [("x", T.FLOAT, [1, 1, 8])], [("y", T.FLOAT)], {"w": np.ones((1, 1, 3), F32)})
    with pytest.raises(nerve.ModelError, match=r"fc_bad.*Swish"):
        session(tmp_path, m, {})


@pytest.mark.parametrize("op,attrs", [("Gelu", {}), ("QuickGelu", {}), ("QuickGelu", {"alpha": 1.0}),
                                      ("QuickGelu", {"alpha": 2.5})])
def test_gelu_family(tmp_path, rng, op, attrs):
    m = make_model([h.make_node(op, ["x"], ["y"], name="g", domain=MS, **attrs)],
                   [("x", T.FLOAT, [4, 33])], [("y", T.FLOAT)], {})
    x = (3 * rng.standard_normal((4, 33))).astype(F32)
    close(session(tmp_path, m, {}).run({"x": x})["y"], ort_run(m, {"x": x})["y"], op)


@pytest.mark.parametrize("beta,bias,want_sum", [(False, False, False), (True, True, True), (True, False, True)])
def test_skip_layer_normalization(tmp_path, rng, beta, bias, want_sum):
    D = 37
    ins = ["x", "skip", "gamma"] + (["beta"] if beta else [""]) + (["bias"] if bias else [])
    outs = ["y", "", "", "sum"] if want_sum else ["y"]
    inits = {"gamma": rng.standard_normal(D).astype(F32)}
    if beta:
        inits["beta"] = rng.standard_normal(D).astype(F32)
    if bias:
        inits["bias"] = rng.standard_normal(D).astype(F32)
    m = make_model([h.make_node("SkipLayerNormalization", ins, outs, name="sln", domain=MS, epsilon=1e-5)],
                   [("x", T.FLOAT, [2, 5, D]), ("skip", T.FLOAT, [2, 5, D])],
                   [("y", T.FLOAT)] + ([("sum", T.FLOAT)] if want_sum else []), inits)
    feeds = {"x": rng.standard_normal((2, 5, D)).astype(F32), "skip": rng.standard_normal((2, 5, D)).astype(F32)}
    got, ref = session(tmp_path, m, {}).run(feeds), ort_run(m, feeds)
    close(got["y"], ref["y"], "output")
    if want_sum:
        close(got["sum"], ref["sum"], "input + skip + bias")


# ------------------------------------------------------------------ index ops


@pytest.mark.parametrize("r", [1, 2])
def test_gather_nd_constant_indices(tmp_path, rng, r):
    data_shape = [4, 6, 3]
    idx = np.stack([rng.integers(-d, d, 5) for d in data_shape[:r]], axis=-1).reshape(5, r).astype(np.int64)
    m = make_model([h.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
                   [("x", T.FLOAT, data_shape)], [("y", T.FLOAT)], {"i": idx})
    x = rng.standard_normal(data_shape).astype(F32)
    np.testing.assert_array_equal(session(tmp_path, m, {}).run({"x": x})["y"], ort_run(m, {"x": x})["y"])


def test_gather_nd_constant_indices_out_of_range_are_a_model_error(tmp_path):
    m = make_model([h.make_node("GatherND", ["x", "i"], ["y"], name="gnd_bad")],
                   [("x", T.FLOAT, [4, 2])], [("y", T.FLOAT)], {"i": np.array([[1], [4]], np.int64)})
    with pytest.raises(nerve.ModelError, match=r"gnd_bad.*index tuple 1 has 4 on axis 0 of size 4"):
        session(tmp_path, m, {})


@pytest.mark.parametrize("data_shape, ind_shape, batch_dims, dtype", [
    ((4, 2), (3, 1), 0, F32),                 # rows
    ((5, 7, 3), (2, 6, 2), 0, F32),           # pairs: [6] slices of 3
    ((3, 4, 5), (3, 4, 3), 0, np.int64),      # single elements
    ((2, 5, 6), (2, 4, 1), 1, F32),           # per batch: rows of each batch's own [5, 6]
    ((3, 4, 5, 2), (3, 4, 2, 1), 2, F32),     # two batch axes
    ((2, 9), (2, 1), 1, np.int64),            # per batch, one element each
])
def test_gather_nd_runtime_indices(tmp_path, rng, data_shape, ind_shape, batch_dims, dtype):
    """Indices fed at run time (negative ones too), batch_dims 0-2, against onnxruntime."""
    b, q = batch_dims, ind_shape[-1]
    axes = data_shape[b:b + q]
    idx = np.stack([rng.integers(-d, d, ind_shape[:-1]) for d in axes], axis=-1).astype(np.int64)
    m = make_model([h.make_node("GatherND", ["x", "i"], ["y"], name="gnd", batch_dims=b)],
                   [("x", T.INT64 if dtype == np.int64 else T.FLOAT, data_shape), ("i", T.INT64, ind_shape)],
                   [("y", T.INT64 if dtype == np.int64 else T.FLOAT)], {})
    x = (rng.integers(-99, 99, data_shape) if dtype == np.int64 else rng.standard_normal(data_shape)).astype(dtype)
    sess = session(tmp_path, m, {})
    assert [op["type"] for op in sess.ops()] == ["gather_nd"]
    np.testing.assert_array_equal(sess.run({"x": x, "i": idx})["y"], ort_run(m, {"x": x, "i": idx})["y"])


def test_gather_nd_runtime_index_out_of_range_is_an_input_error(tmp_path, rng):
    m = make_model([h.make_node("GatherND", ["x", "i"], ["y"], name="gnd_rt")],
                   [("x", T.FLOAT, [4, 2]), ("i", T.INT64, [3, 1])], [("y", T.FLOAT)], {})
    sess = session(tmp_path, m, {})
    x = rng.standard_normal((4, 2)).astype(F32)
    with pytest.raises(nerve.InputError, match=r"gnd_rt.*indices\[2\] = -5 is outside \[-4, 4\) \(axis 0"):
        sess.run({"x": x, "i": np.array([[1], [0], [-5]], np.int64)})
    np.testing.assert_array_equal(sess.run({"x": x, "i": np.array([[3], [-4], [0]], np.int64)})["y"], x[[3, 0, 0]])


def test_gather_nd_attention_mask_pattern(tmp_path, rng):
    """What torch's dynamo exporter writes for mask[batch_arange[:, None], kv_arange[None, :]]:
    the index pairs built by Range/Unsqueeze/Expand/Concat over the symbolic sizes."""
    nodes = [h.make_node("Shape", ["mask"], ["s"]),
             h.make_node("Gather", ["s", "zero"], ["nb"], axis=0), h.make_node("Gather", ["s", "one"], ["ns"], axis=0),
             h.make_node("Range", ["zero", "nb", "one"], ["rb"]), h.make_node("Range", ["zero", "ns", "one"], ["rs"]),
             h.make_node("Unsqueeze", ["rb", "ax1"], ["rb2"]), h.make_node("Unsqueeze", ["rs", "ax0"], ["rs2"]),
             h.make_node("Concat", ["nb1", "ns1"], ["full"], axis=0),
             h.make_node("Unsqueeze", ["nb", "ax0"], ["nb1"]), h.make_node("Unsqueeze", ["ns", "ax0"], ["ns1"]),
             h.make_node("Expand", ["rb2", "full"], ["eb"]), h.make_node("Expand", ["rs2", "full"], ["es"]),
             h.make_node("Unsqueeze", ["eb", "axm"], ["ib"]), h.make_node("Unsqueeze", ["es", "axm"], ["is"]),
             h.make_node("Concat", ["ib", "is"], ["ind"], axis=-1),
             h.make_node("Cast", ["mask"], ["mb"], to=T.BOOL), h.make_node("GatherND", ["mb", "ind"], ["y"])]
    nodes = [nodes[i] for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 7, 10, 11, 12, 13, 14, 15, 16)]  # topological
    m = make_model(nodes, [("mask", T.INT64, [2, "seq"])], [("y", T.BOOL)],
                   {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "ax0": np.array([0], np.int64),
                    "ax1": np.array([1], np.int64), "axm": np.array([-1], np.int64)})
    sess = session(tmp_path, m, {"seq": 12})
    for n in (12, 5, 1):
        mask = (rng.random((2, n)) < 0.7).astype(np.int64)
        np.testing.assert_array_equal(sess.run({"mask": mask})["y"], ort_run(m, {"mask": mask})["y"])


def test_nonzero_on_shape_arithmetic_folds(tmp_path, rng):
    # the rotary-slice pattern of transformer exports: NonZero(Range(0, n) < k) over known sizes
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "one"], ["n"], axis=0),
             h.make_node("Range", ["zero", "n", "step"], ["r"]), h.make_node("Less", ["r", "k"], ["m"]),
             h.make_node("NonZero", ["m"], ["nz"], name="nz"), h.make_node("Transpose", ["nz"], ["t"], perm=[1, 0]),
             h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), h.make_node("GatherND", ["xt", "t"], ["y"])]
    m = make_model(nodes, [("x", T.FLOAT, [2, 9])], [("y", T.FLOAT)],
                   {"one": np.array(1, np.int64), "zero": np.array(0, np.int64), "step": np.array(1, np.int64),
                    "k": np.array(4, np.int64)})
    x = rng.standard_normal((2, 9)).astype(F32)
    sess = session(tmp_path, m, {})
    np.testing.assert_array_equal(sess.run({"x": x})["y"], ort_run(m, {"x": x})["y"])


def test_nonzero_of_runtime_values_runs(tmp_path, rng):
    # not folded: a size the data decides (test_data_dependent.py has the rest)
    m = make_model([h.make_node("NonZero", ["x"], ["y"], name="nz_rt")],
                   [("x", T.FLOAT, [5])], [("y", T.INT64)], {})
    x = (rng.random(5) > 0.5).astype(F32)
    np.testing.assert_array_equal(session(tmp_path, m, {}).run({"x": x})["y"], np.array(np.nonzero(x)))


def test_isnan(tmp_path, rng):
    m = make_model([h.make_node("IsNaN", ["x"], ["y"], name="isnan")], [("x", T.FLOAT, [3, 11])],
                   [("y", T.BOOL)], {})
    x = rng.standard_normal((3, 11)).astype(F32)
    x[0, 3] = x[2, 10] = np.nan
    x[1, 1], x[1, 2] = np.inf, -np.inf
    got = session(tmp_path, m, {}).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.isnan(x))
