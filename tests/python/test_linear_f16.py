"""precision="fp16": every linear layer's fp32 weight is stored as IEEE half (rounded to
nearest even at compile time) and widened to fp32 in registers (plan op ``linear_f16``);
activations and sums stay fp32.

Budgets (per output, propagated through the layers of the MLP: an error e in a layer's input
reaches its output as |W|·e, ReLU does not grow it):
  * against numpy float64 on the fp16-rounded weights (what the kernels compute): fp32
    accumulation only, |Δ| <= 8·sqrt(K + 1)·u·(Σ|x||w| + |b|), u = 2^-24 (the native tests'
    4·sqrt(K + 1)·FLT_EPSILON: rounding errors of a sum in any order grow like sqrt(K) — the
    worst-case K·u would be as large as the fp16 rounding itself and could not tell the two
    apart; test_budgets_tell_fp16_from_fp32_weights checks that this one does);
  * against the fp32 model (numpy float64 on the weights as stored): the above plus the
    weights' rounding, Σ|x||w|·2^-11 + Σ|x|·2^-25 (relative 2^-11 for normal halves, absolute
    2^-25 below 2^-14, where halves are subnormal).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve
from helpers import U32, forced, make_model, op_types, variant_params, w8_matmul_model
from helpers import onnx_session as session

F32 = np.float32
F64 = np.float64
HALF_REL = 2.0 ** -11  # fp16 rounding, relative, normal range
HALF_ABS = 2.0 ** -25  # fp16 rounding, absolute, subnormal range


def sum_budget(k):
    """fp32 rounding of a K-term dot product plus the bias, per unit of Σ|x||w| + |b|."""
    return 8.0 * np.sqrt(k + 1.0) * U32


def mlp(rng, dims, rows="rows", relu=True):
    """x [rows, dims[0]] -> MatMul/Add (+ Relu) per layer, the last without Relu; returns
    (model, [(W [k, n] fp32, b [n] fp32)])."""
    nodes, inits, layers, last = [], {}, [], "x"
    for i, (k, n) in enumerate(zip(dims[:-1], dims[1:])):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(F32)
        b = (0.1 * rng.standard_normal(n)).astype(F32)
        inits[f"W{i}"], inits[f"b{i}"] = w, b
        layers.append((w, b))
        nodes += [h.make_node("MatMul", [last, f"W{i}"], [f"mm{i}"]),
                  h.make_node("Add", [f"mm{i}", f"b{i}"], [f"a{i}"])]
        last = f"a{i}"
        if relu and i + 2 < len(dims):
            nodes.append(h.make_node("Relu", [last], [f"r{i}"]))
            last = f"r{i}"
    nodes.append(h.make_node("Identity", [last], ["y"]))
    return make_model(nodes, [("x", T.FLOAT, [rows, dims[0]])], [("y", T.FLOAT)], inits), layers


def half(w):
    return w.astype(np.float16).astype(F64)


def reference(x, layers, relu=True, rounded=True):
    """(float64 output, its budget) of the MLP on fp16-rounded weights (rounded) or on the fp32
    weights (not rounded: the budget adds the weights' rounding); see the module docstring."""
    hid, err = x.astype(F64), np.zeros(x.shape, F64)
    for i, (w, b) in enumerate(layers):
        wq = half(w)
        wr = wq if rounded else w.astype(F64)
        mag = (np.abs(hid) + err) @ np.abs(wq) + np.abs(b)  # the kernel's terms, its input off by err
        new_err = err @ np.abs(wq) + sum_budget(w.shape[0]) * mag
        if not rounded:
            new_err += np.abs(hid) @ (HALF_REL * np.abs(w.astype(F64)) + HALF_ABS)
        err = new_err
        hid = hid @ wr + b
        if relu and i + 1 < len(layers):
            hid = np.maximum(hid, 0.0)
    return hid, err


def assert_within(got, want, budget, what=""):
    got = got.astype(F64)
    bad = ~(np.abs(got - want) <= budget)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {got.size} out of budget; worst "
                           f"{np.max(np.abs(got - want) / budget):.3g} of it")
    return float(np.max(np.abs(got - want) / budget))


def check(got, x, layers, what="", relu=True):
    """got against both references (module docstring)."""
    assert got.dtype == F32
    want, budget = reference(x, layers, relu)
    assert_within(got, want, budget, what + " vs fp16-rounded weights")
    want, budget = reference(x, layers, relu, rounded=False)
    assert_within(got, want, budget, what + " vs fp32 weights")


DIMS = (97, 257, 127, 13)


@pytest.mark.parametrize("rows", [1, 3, 13, 97])
def test_mlp_compiles_to_linear_f16_and_matches_references(tmp_path, rng, rows):
    m, layers = mlp(rng, DIMS)
    sess = session(tmp_path, m, {"rows": 97}, precision="fp16")
    assert op_types(sess) == ["linear_f16"] * 3  # bias and relu fused into each
    assert all(o["kernel"] == nerve.kernels.selected("linear_f16") for o in sess.ops())
    halves = [t for t in sess.tensors() if t["dtype"] == np.float16]
    assert sorted(t["shape"] for t in halves) == sorted([n, k] for k, n in zip(DIMS[:-1], DIMS[1:]))
    assert not any(t["dtype"] == F32 and t["storage"] == "weight" and len(t["shape"]) == 2 for t in sess.tensors())
    for _ in range(2):
        x = rng.standard_normal((rows, DIMS[0])).astype(F32)
        check(sess.run({"x": x})["y"], x, layers, f"rows={rows}")


def test_budgets_tell_fp16_from_fp32_weights(tmp_path, rng):
    """On one layer (the MLP's budgets add each layer's error through |W| at worst, which
    loosens them), the fp32 plan's outputs break the fp16-rounded reference's budget (the
    weights' rounding is far above it), and the fp16 plan's break the fp32 reference's
    fp32-only budget: the budget is tight enough to see which weights were used."""
    m, layers = mlp(rng, (97, 257))
    x = rng.standard_normal((8, 97)).astype(F32)
    fp32 = session(tmp_path, m, {"rows": 8}).run({"x": x})["y"].astype(F64)
    fp16 = session(tmp_path, m, {"rows": 8}, precision="fp16").run({"x": x})["y"].astype(F64)
    want16, budget16 = reference(x, layers)
    want32 = reference(x, layers, rounded=False)[0]
    assert np.max(np.abs(fp16 - want16) / budget16) <= 1.0
    assert np.max(np.abs(fp32 - want16) / budget16) > 5.0
    assert np.max(np.abs(fp16 - want32) / budget16) > 5.0


def test_weight_bytes_are_half_of_fp32(tmp_path, rng):
    m, layers = mlp(rng, (1024, 1024, 257))
    fp32 = session(tmp_path, m, {"rows": 4}).memory_report()["weight_bytes"]
    fp16 = session(tmp_path, m, {"rows": 4}, precision="fp16").memory_report()["weight_bytes"]
    w_bytes = sum(w.nbytes for w, _ in layers)
    b_bytes = sum(b.nbytes for _, b in layers)
    assert fp32 >= w_bytes + b_bytes
    # the weights at 2 bytes, biases at 4, a little alignment padding per tensor
    assert w_bytes // 2 + b_bytes <= fp16 <= w_bytes // 2 + b_bytes + 64 * 2 * len(layers)
    assert 0.49 < fp16 / fp32 < 0.51


@pytest.mark.parametrize("variant", variant_params("linear_f16"))
def test_every_variant(tmp_path, rng, variant):
    """The direct path (rows <= 16) under each variant of the kernel."""
    m, layers = mlp(rng, DIMS)
    sess = session(tmp_path, m, {"rows": 16}, precision="fp16")
    with forced("linear_f16", variant):
        for rows in (1, 3, 13, 16):
            x = rng.standard_normal((rows, DIMS[0])).astype(F32)
            check(sess.run({"x": x})["y"], x, layers, f"{variant} rows={rows}")


@pytest.mark.parametrize("disabled", ["", "avx512", "x86,neon"])
def test_many_rows_under_each_isa(tmp_path, rng, disabled):
    """Many rows (the op runs them in 64-row tasks) with the variants NERVE_DISABLE's groups
    leave: the kernel handles every row count."""
    m, layers = mlp(rng, DIMS)
    sess = session(tmp_path, m, {"rows": 200}, precision="fp16")
    assert op_types(sess) == ["linear_f16"] * 3
    with nerve.kernels.disable(disabled):
        if disabled == "x86,neon":
            assert nerve.kernels.selected("linear_f16") == "ref"
        for rows in (17, 97, 200, 1):
            x = rng.standard_normal((rows, DIMS[0])).astype(F32)
            check(sess.run({"x": x})["y"], x, layers, f"disable={disabled!r} rows={rows}")


@pytest.mark.parametrize("rows", [1, 97, 130])
def test_threads_do_not_change_a_value(tmp_path, rng, rows):
    m, layers = mlp(rng, (1025, 1025, 127))
    x = rng.standard_normal((rows, 1025)).astype(F32)
    one = session(tmp_path, m, {"rows": 130}, precision="fp16").run({"x": x})["y"]
    check(one, x, layers, f"rows={rows}")
    for threads in (2, 3):
        got = session(tmp_path, m, {"rows": 130}, precision="fp16", threads=threads).run({"x": x})["y"]
        np.testing.assert_array_equal(got, one)


def test_set_precision_switches_a_live_session(tmp_path, rng):
    m, layers = mlp(rng, DIMS)
    sess = session(tmp_path, m, {"rows": 8})
    x = rng.standard_normal((5, DIMS[0])).astype(F32)
    fp32 = sess.run({"x": x})["y"]
    assert "linear_f16" not in op_types(sess)
    sess.set_precision("fp16")
    assert sess.precision == "fp16" and op_types(sess) == ["linear_f16"] * 3
    got = sess.run({"x": x})["y"]
    check(got, x, layers, "after set_precision('fp16')")
    assert not np.array_equal(got, fp32)  # the weights really are rounded
    sess.set_precision("fp32")
    np.testing.assert_array_equal(sess.run({"x": x})["y"], fp32)
    sess.set_precision("fp16")
    np.testing.assert_array_equal(sess.run({"x": x})["y"], got)


def with_weight(m, name, w):
    """m with initializer name replaced by w."""
    for init in m.graph.initializer:
        if init.name == name:
            init.CopyFrom(nh.from_array(w, name))
    return m


def test_weight_beyond_fp16_range_keeps_its_layer_fp32(tmp_path, rng):
    """|w| > 65504 would round to inf: that layer stays an fp32 linear, the others go fp16."""
    m, layers = mlp(rng, (64, 48, 33), relu=False)
    (w0, b0), (w1, b1) = layers
    w0[3, 7] = 70000.0
    sess = session(tmp_path, with_weight(m, "W0", w0), {"rows": 4}, precision="fp16")
    assert op_types(sess) == ["linear_panels", "linear_f16"]  # fp32 (at 4 rows its weight as panels)
    x = (0.01 * rng.standard_normal((4, 64))).astype(F32)
    got = sess.run({"x": x})["y"].astype(F64)
    assert np.all(np.isfinite(got))
    hid = x.astype(F64) @ w0.astype(F64) + b0  # the first layer's weights exactly as stored
    hid_err = sum_budget(64) * (np.abs(x) @ np.abs(w0) + np.abs(b0))
    want = hid @ half(w1) + b1
    budget = hid_err @ np.abs(half(w1)) + sum_budget(48) * ((np.abs(hid) + hid_err) @ np.abs(half(w1)) + np.abs(b1))
    assert_within(got, want, budget, "first layer fp32, second fp16")
    # exactly 65504 (the largest half) is in range: the layer goes fp16
    w0[3, 7] = -65504.0
    sess = session(tmp_path, with_weight(m, "W0", w0), {"rows": 4}, precision="fp16")
    assert op_types(sess) == ["linear_f16", "linear_f16"]


def test_int8_weights_stay_linear_w8(tmp_path, rng):
    """A weight stored as int8 (dequantised in the graph) keeps its int8 form: smaller than fp16."""
    m, _ = w8_matmul_model(rng, 97, 65)
    sess = session(tmp_path, m, {"batch": 1, "seq": 1}, precision="fp16")
    assert op_types(sess) == ["linear_w8"]


def test_equal_weights_are_stored_once(tmp_path, rng):
    k, n = 50, 20
    w = rng.standard_normal((k, n)).astype(F32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["y1"]), h.make_node("MatMul", ["x2", "W2"], ["y2"])]
    m = make_model(nodes, [("x", T.FLOAT, [1, k]), ("x2", T.FLOAT, [2, k])], [("y1", T.FLOAT), ("y2", T.FLOAT)],
                   {"W": w, "W2": w.copy()})
    sess = session(tmp_path, m, {}, precision="fp16")
    assert op_types(sess) == ["linear_f16", "linear_f16"]
    assert sum(t["dtype"] == np.float16 for t in sess.tensors()) == 1
    x, x2 = rng.standard_normal((1, k)).astype(F32), rng.standard_normal((2, k)).astype(F32)
    out = sess.run({"x": x, "x2": x2})
    for name, xi in (("y1", x), ("y2", x2)):
        check(out[name], xi, [(w, np.zeros(n, F32))], name)


def test_gemm_trans_b(tmp_path, rng):
    k, n = 70, 33
    w = rng.standard_normal((n, k)).astype(F32)
    b = rng.standard_normal(n).astype(F32)
    nodes = [h.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)]
    m = make_model(nodes, [("x", T.FLOAT, ["rows", k])], [("y", T.FLOAT)], {"W": w, "b": b})
    sess = session(tmp_path, m, {"rows": 40}, precision="fp16")
    assert op_types(sess) == ["linear_f16"]
    for rows in (3, 40):
        x = rng.standard_normal((rows, k)).astype(F32)
        check(sess.run({"x": x})["y"], x, [(np.ascontiguousarray(w.T), b)], f"gemm rows={rows}")


def test_bad_precision_names_fail_clearly():
    from nerve.precision import parse

    assert parse("fp16") == ("fp16", 64)
    with pytest.raises(nerve.InputError, match="fp16"):
        parse("fp16:g32")
    with pytest.raises(nerve.InputError, match="fp16"):
        parse("half")
