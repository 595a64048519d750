"""int8 weights dequantised in the graph (W = Cast(q) * s + z, then MatMul) compile to
``linear_w8`` when the layer runs on few rows, and to the fp32 ``linear`` otherwise; both
match onnxruntime."""

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
REL = 1e-5  # of the output's largest magnitude


def matmul_model(rng, k, n, **kw):
    return w8_matmul_model(rng, k, n, **kw)[0]


def assert_close(got, ref, what="", terms=0.0):
    """Within REL of the output's largest magnitude, or 16 float32 ulps of `terms` (the largest
    Σ_k |x_k·W_kn| + |b_n| over outputs: the size of what an output sums, which bounds the
    rounding of any order of summation) where that is more — an output that cancels or is
    cut by the relu can be far smaller than its terms (seen: 9e-4 from 13 terms of ~1)."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, what
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    atol = max(REL * scale, 16 * 2.0 ** -24 * terms) + 1e-30
    np.testing.assert_allclose(got, ref, rtol=REL, atol=atol, err_msg=what)


def _terms(m, x) -> float:
    """max over outputs of Σ_k |x_k|·|W_kn| + |b_n| for a w8_matmul_model (W = q·s + z); 0 for
    other models."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    if not {"q", "s", "z"} <= inits.keys() or inits["q"].ndim != 2:
        return 0.0
    w = np.abs(inits["q"] * inits["s"] + inits["z"])
    if w.shape[0] != x.shape[-1]:  # stored [n, k] (Gemm transB, a tied embedding)
        w = w.T
    if w.shape[0] != x.shape[-1]:
        return 0.0
    t = np.abs(x.reshape(-1, x.shape[-1]).astype(np.float64)) @ w
    return float((t + np.abs(inits.get("b", 0.0))).max()) if t.size else 0.0


def check(sess, m, feeds):
    got, ref = sess.run(feeds), ort_run(m, feeds)
    terms = _terms(m, feeds["x"]) if "x" in feeds else 0.0
    for k in ref:
        assert_close(got[k], ref[k], k, terms)


@pytest.mark.parametrize("k,n", [(416, 1664), (97, 257), (13, 3), (1, 1)])
def test_one_row_compiles_to_linear_w8_and_matches_onnxruntime(tmp_path, rng, k, n):
    m = matmul_model(rng, k, n)
    sess = session(tmp_path, m, {"batch": 1, "seq": 1})
    assert op_types(sess) == ["linear_w8"]  # bias and relu fused into it
    w8 = sess.ops()[0]
    assert w8["kernel"] == nerve.kernels.selected("linear_w8")
    # the weight travels as int8: no fp32 [n, k] tensor in the plan
    tensors = sess.tensors()
    assert any(t["dtype"] == np.int8 and t["shape"] == [n, k] for t in tensors)
    assert not any(t["dtype"] == np.float32 and sorted(t["shape"]) == sorted([n, k]) and t["storage"] == "weight"
                   for t in tensors if n * k > 1)
    for _ in range(3):
        check(sess, m, {"x": rng.standard_normal((1, 1, k)).astype(F32)})


def test_large_row_bound_stays_fp32_linear(tmp_path, rng):
    m = matmul_model(rng, 97, 130)
    sess = session(tmp_path, m, {"batch": 1, "seq": 64})
    types = op_types(sess)
    assert {"linear", "linear_panels"} & set(types) and "linear_w8" not in types
    for rows in (1, 5, 64):
        check(sess, m, {"x": rng.standard_normal((1, rows, 97)).astype(F32)})


@pytest.mark.parametrize("batch,seq,want", [(2, 8, "linear_w8"), (1, 16, "linear_w8"), (1, 17, "linear"),
                                            (3, 6, "linear")])
def test_row_bound_threshold_is_16(tmp_path, rng, batch, seq, want):
    m = matmul_model(rng, 40, 33, relu=False)
    sess = session(tmp_path, m, {"batch": batch, "seq": seq})
    assert op_types(sess) == [want]
    check(sess, m, {"x": rng.standard_normal((batch, seq, 40)).astype(F32)})
    check(sess, m, {"x": rng.standard_normal((1, 1, 40)).astype(F32)})


def test_static_rows(tmp_path, rng):
    m = matmul_model(rng, 64, 48, rows_dims=(3, 5))
    sess = session(tmp_path, m, {})
    assert op_types(sess) == ["linear_w8"]
    check(sess, m, {"x": rng.standard_normal((3, 5, 64)).astype(F32)})


def test_nerve_w8_0_disables(tmp_path, rng, monkeypatch):
    m = matmul_model(rng, 97, 65)
    monkeypatch.setenv("NERVE_W8", "0")
    sess = session(tmp_path, m, {"batch": 1, "seq": 1})
    assert op_types(sess) == ["linear_panels"]  # fp32 (a decode step's weight as panels)
    check(sess, m, {"x": rng.standard_normal((1, 1, 97)).astype(F32)})


@pytest.mark.parametrize("s_shape,z_shape", [((65,), (65,)), ((65,), (1,)), ((1, 65), ()), ((), (65,))])
def test_per_output_scale_and_zero(tmp_path, rng, s_shape, z_shape):
    m = matmul_model(rng, 97, 65, s_shape=s_shape, z_shape=z_shape)
    sess = session(tmp_path, m, {"batch": 1, "seq": 1})
    assert op_types(sess) == ["linear_w8"]
    check(sess, m, {"x": rng.standard_normal((1, 1, 97)).astype(F32)})


def test_scale_varying_along_k_stays_fp32(tmp_path, rng):
    m = matmul_model(rng, 97, 65, s_shape=(97, 1))
    sess = session(tmp_path, m, {"batch": 1, "seq": 1})
    assert op_types(sess) == ["linear_panels"]  # fp32 (a decode step's weight as panels)
    check(sess, m, {"x": rng.standard_normal((1, 1, 97)).astype(F32)})


def test_zero_point_subtracted_then_scaled(tmp_path, rng):
    k, n = 96, 40
    q = rng.integers(0, 128, (k, n)).astype(np.int8)
    inits = {"q": q, "zp": np.array([37.0], F32), "s": np.array([0.01], F32)}
    nodes = dequant_nodes(sub_zero=True) + [h.make_node("MatMul", ["x", "W"], ["y"])]
    m = make_model(nodes, [("x", T.FLOAT, [1, k])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {})
    assert op_types(sess) == ["linear_w8"]
    check(sess, m, {"x": rng.standard_normal((1, k)).astype(F32)})


def test_symmetric_scale_only(tmp_path, rng):
    """W = Cast(q) * s: no zero point, so the op gets no z input (no row sums)."""
    k, n = 130, 70
    q, s, _ = quant(rng, (k, n), s_shape=(n,))
    nodes = [h.make_node("Cast", ["q"], ["qf"], to=T.FLOAT), h.make_node("Mul", ["qf", "s"], ["W"]),
             h.make_node("MatMul", ["x", "W"], ["y"])]
    m = make_model(nodes, [("x", T.FLOAT, [2, k])], [("y", T.FLOAT)], {"q": q, "s": s})
    sess = session(tmp_path, m, {})
    assert op_types(sess) == ["linear_w8"]
    assert sess.ops()[0]["inputs"][3] == -1  # z absent
    check(sess, m, {"x": rng.standard_normal((2, k)).astype(F32)})


def test_gemm_trans_b(tmp_path, rng):
    k, n = 70, 33
    q, s, z = quant(rng, (n, k))
    nodes = dequant_nodes() + [h.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)]
    m = make_model(nodes, [("x", T.FLOAT, ["rows", k])], [("y", T.FLOAT)],
                   {"q": q, "s": s, "z": z, "b": rng.standard_normal(n).astype(F32)})
    sess = session(tmp_path, m, {"rows": 4})
    assert op_types(sess) == ["linear_w8"]
    check(sess, m, {"x": rng.standard_normal((3, k)).astype(F32)})


def test_tied_embedding_stays_int8(tmp_path, rng):
    """One int8 table (W = q·s + z): Gather reads it as int8 (gather_q8, the same fp32 values),
    the output projection (MatMul by its transpose) as int8 too; no fp32 copy of it."""
    vocab, d = 300, 48
    q, s, z = quant(rng, (vocab, d))
    nodes = dequant_nodes(out="E") + [
        h.make_node("Gather", ["E", "ids"], ["emb"]),
        h.make_node("Add", ["emb", "x"], ["hid"]),
        h.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
        h.make_node("MatMul", ["hid", "Et"], ["logits"]),
    ]
    m = make_model(nodes, [("ids", T.INT64, [1, 1]), ("x", T.FLOAT, [1, 1, d])], [("logits", T.FLOAT)],
                   {"q": q, "s": s, "z": z})
    sess = session(tmp_path, m, {})
    types = op_types(sess)
    assert "linear_w8" in types and "gather_q8" in types and "linear" not in types and "gather" not in types
    tensors = sess.tensors()
    assert not any(t["dtype"] == np.float32 and t["shape"] == [vocab, d] for t in tensors)
    assert any(t["dtype"] == np.int8 and t["shape"] == [vocab, d] for t in tensors)  # q
    for i in (0, 7, vocab - 1):
        check(sess, m, {"ids": np.array([[i]], np.int64), "x": rng.standard_normal((1, 1, d)).astype(F32)})


def test_layernorm_then_linear_w8(tmp_path, rng):
    k, n = 64, 96
    q, s, z = quant(rng, (k, n))
    nodes = [h.make_node("LayerNormalization", ["x", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5)] + \
        dequant_nodes() + [h.make_node("MatMul", ["ln", "W"], ["y"])]
    m = make_model(nodes, [("x", T.FLOAT, [1, "seq", k])], [("y", T.FLOAT)],
                   {"q": q, "s": s, "z": z, "g": (1 + 0.1 * rng.standard_normal(k)).astype(F32),
                    "beta": (0.1 * rng.standard_normal(k)).astype(F32)})
    sess = session(tmp_path, m, {"seq": 2})
    assert op_types(sess) == ["layernorm", "linear_w8"]
    check(sess, m, {"x": rng.standard_normal((1, 2, k)).astype(F32)})
    sess = session(tmp_path, m, {"seq": 40})
    assert op_types(sess) in (["layernorm_linear"], ["layernorm_linear_panels"])
    check(sess, m, {"x": rng.standard_normal((1, 40, k)).astype(F32)})


def test_weight_shared_by_two_products_is_stored_once(tmp_path, rng):
    k, n = 50, 20
    q, s, z = quant(rng, (k, n))
    nodes = dequant_nodes() + [h.make_node("MatMul", ["x", "W"], ["y1"]), h.make_node("MatMul", ["x2", "W"], ["y2"])]
    m = make_model(nodes, [("x", T.FLOAT, [1, k]), ("x2", T.FLOAT, [2, k])], [("y1", T.FLOAT), ("y2", T.FLOAT)],
                   {"q": q, "s": s, "z": z})
    sess = session(tmp_path, m, {})
    assert op_types(sess) == ["linear_w8", "linear_w8"]
    assert sum(t["dtype"] == np.int8 for t in sess.tensors()) == 1
    check(sess, m, {"x": rng.standard_normal((1, k)).astype(F32), "x2": rng.standard_normal((2, k)).astype(F32)})


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_variant_and_thread_count(tmp_path, rng, threads):
    m = matmul_model(rng, 416, 1664, relu=False)
    sess = session(tmp_path, m, {"batch": 1, "seq": 3}, threads=threads)
    assert op_types(sess) == ["linear_w8"]
    x = rng.standard_normal((1, 3, 416)).astype(F32)
    ref = ort_run(m, {"x": x})["y"]
    variants = nerve.kernels.runnable_variants("linear_w8")
    assert variants[-1] == "ref"
    for v in variants:
        with nerve.kernels.force("linear_w8", v):
            got = sess.run({"x": x})["y"]
        assert_close(got, ref, v)
        if threads > 1:  # the split along outputs does not change a value
            with nerve.kernels.force("linear_w8", v):
                one = session(tmp_path, m, {"batch": 1, "seq": 3}).run({"x": x})["y"]
            np.testing.assert_array_equal(got, one)


# ---- an embedding table stored as int8 (Gather on Cast+Mul): op gather_q8

@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("with_zero", [False, True])
def test_int8_embedding_table_stays_int8(tmp_path, per_row, idx_dtype, with_zero):
    """The table's plan bytes are int8 (+ scales), the outputs bit-identical to onnxruntime
    (the same fp32 product q·s), negative ids count from the end, bad ids fail clearly."""
    rng = np.random.default_rng(7)
    rows, dim = 1025, 97
    q = rng.integers(-128, 128, (rows, dim)).astype(np.int8)
    s = (0.001 + 0.01 * rng.random((rows, 1) if per_row else (1,))).astype(np.float32)
    z = (0.2 * rng.standard_normal(s.shape)).astype(np.float32)  # Moonshine's table: + a per-tensor offset
    nodes = [h.make_node("Cast", ["q"], ["qf"], to=T.FLOAT), h.make_node("Mul", ["qf", "s"], ["qs"]),
             h.make_node("Add", ["qs", "z"], ["table"]) if with_zero else h.make_node("Identity", ["qs"], ["table"]),
             h.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    itype = T.INT64 if idx_dtype == np.int64 else T.INT32
    inits = {"q": q, "s": s, **({"z": z} if with_zero else {})}
    m = make_model(nodes, [("ids", itype, ["b", "t"])], [("y", T.FLOAT)], inits)
    sess = session(tmp_path, m, {"b": 2, "t": 5})
    assert "gather_q8" in op_types(sess)
    ids = rng.integers(-rows, rows, (2, 5)).astype(idx_dtype)
    ids[0, 0], ids[1, 4] = rows - 1, -rows
    got = sess.run({"ids": ids})["y"]
    want = ort_run(m, {"ids": ids})["y"]
    assert np.array_equal(got, want)
    assert sess.memory_report()["weight_bytes"] < rows * dim * 2  # int8, not fp32
    bad = ids.copy()
    bad[1, 2] = rows
    with pytest.raises(nerve.NerveError, match=r"indices\[7\] = 1025"):
        sess.run({"ids": bad})


def test_large_int8_weight_is_still_recognised(tmp_path, rng, monkeypatch):
    """A dequantisation chain whose fp32 result is above the general folding limit is still
    folded (up to FOLD_MAX_INT8_CHAIN_BYTES), so the weight stays int8 (linear_w8) instead of
    being dequantised on every run; other big constants still are not folded. The limit is
    lowered here so the test stays small (the real case: an 11008 x 4096 layer, 172 MiB)."""
    from nerve.compiler import builder

    monkeypatch.setattr(builder, "FOLD_MAX_OUTPUT_BYTES", 64 << 10)
    k, n = 256, 160  # 160 KiB of fp32
    m, _ = w8_matmul_model(rng, k, n, s_shape=(n,), z_shape=(1,), relu=False)
    sess = session(tmp_path, m, {"batch": 1, "seq": 4})
    assert "linear_w8" in op_types(sess) and "cast" not in op_types(sess)
    check(sess, m, {"x": rng.standard_normal((1, 3, k)).astype(F32)})
    monkeypatch.setattr(builder, "FOLD_MAX_INT8_CHAIN_BYTES", 64 << 10)
    sess = session(tmp_path, m, {"batch": 1, "seq": 4})
    assert "cast" in op_types(sess)  # over both limits: the chain runs in the plan
    check(sess, m, {"x": rng.standard_normal((1, 3, k)).astype(F32)})


@pytest.mark.parametrize("rows,bound", [(1, 1), (3, 16), (40, 64)])
def test_int8_precision_quantises_fp32_weights(tmp_path, rng, rows, bound):
    """precision="int8" on a model whose weights are fp32: each linear's weight gets an int8
    form per output channel (s = max|w_row|/127), run by linear_w8a8 (int8 activations) on
    any row count. Against numpy float64 on the same int8 weights: within the activations'
    rounding; against the fp32 model (onnxruntime): within the weight and activation
    quantisation error."""
    k, n = 416, 97
    w = (0.05 * rng.standard_normal((k, n))).astype(F32)
    b = rng.standard_normal(n).astype(F32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "b"], ["y"])]
    m = make_model(nodes, [("x", T.FLOAT, ["rows", k])], [("y", T.FLOAT)], {"W": w, "b": b})
    sess = session(tmp_path, m, {"rows": bound}, precision="int8")
    assert "linear_w8a8" in op_types(sess) and "linear" not in op_types(sess)
    x = rng.standard_normal((rows, k)).astype(F32)
    got = sess.run({"x": x})["y"].astype(np.float64)
    s = np.abs(w).max(axis=0) / 127  # per output channel (a column of the MatMul's W)
    wq = np.clip(np.rint(w / s), -127, 127) * s
    want_q = x.astype(np.float64) @ wq + b
    step = np.abs(x).max(axis=1, keepdims=True) / 127
    act_err = (np.abs(wq).sum(axis=0)[None, :] * step / 2)
    assert np.all(np.abs(got - want_q) <= act_err + 1e-4 * (np.abs(x) @ np.abs(wq) + 1))
    ref = ort_run(m, {"x": x})["y"].astype(np.float64)
    w_err = np.abs(x) @ (s[None, :] / 2 * np.ones((k, 1)))  # each weight off by at most s/2
    assert np.all(np.abs(got - ref) <= w_err + act_err + 1e-4 * (np.abs(x) @ np.abs(w) + 1))


@pytest.mark.parametrize("kind, direction, lbr", [("LSTM", "forward", 0), ("LSTM", "bidirectional", 0),
                                               ("GRU", "forward", 0), ("GRU", "bidirectional", 1)])
@pytest.mark.parametrize("precision", ["int8", "w8a32"])
def test_int8_precision_gives_an_rnn_an_int8_recurrent_weight(tmp_path, rng, kind, direction, lbr, precision):
    """precision "int8"/"w8a32": a float LSTM's or GRU's R becomes int8 codes with per-row
    scales (the ops' W8 recurrent weight; W stays fp32). The result is the float RNN of the
    dequantised R (onnxruntime on the same model with R replaced by q·s) to fp32 rounding;
    precision "fp32" keeps R as stored. The GRU's linear_before_reset 0 reads R's h rows in
    a second product."""
    from nerve.compiler import compile_program
    from nerve.quant import quantize_w8

    gates = 4 if kind == "LSTM" else 3
    dirs, hidden, n_in, seq = (2 if direction == "bidirectional" else 1), 24, 13, 9
    w = (0.3 * rng.standard_normal((dirs, gates * hidden, n_in))).astype(F32)
    r = (0.3 * rng.standard_normal((dirs, gates * hidden, hidden))).astype(F32)
    b = (0.1 * rng.standard_normal((dirs, 2 * gates * hidden))).astype(F32)
    outs = [("Y", T.FLOAT), ("Yh", T.FLOAT)] + ([("Yc", T.FLOAT)] if kind == "LSTM" else [])
    extra = {"linear_before_reset": lbr} if kind == "GRU" else {}

    def rnn_model(r_weight):
        return make_model([h.make_node(kind, ["x", "W", "R", "B"], [o for o, _ in outs], name="rnn",
                                       hidden_size=hidden, direction=direction, **extra)],
                          [("x", T.FLOAT, [seq, 2, n_in])], outs, {"W": w, "R": r_weight, "B": b})

    m = rnn_model(r)
    q, s = quantize_w8(r.reshape(dirs * gates * hidden, hidden))
    r_deq = (q.astype(F32) * s[:, None]).reshape(r.shape)
    x = rng.standard_normal((seq, 2, n_in)).astype(F32)
    got = session(tmp_path, m, {}, precision=precision).run({"x": x})
    want = ort_run(rnn_model(r_deq), {"x": x})
    for k, _ in outs:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)
    op = next(o for o in compile_program(m.SerializeToString(), tmp_path, precision=precision).ops
              if o.type == kind.lower())
    assert op.inputs[2].dtype == np.int8 and op.inputs[1].dtype == np.float32
    plain = next(o for o in compile_program(m.SerializeToString(), tmp_path).ops if o.type == kind.lower())
    assert plain.inputs[2].dtype == np.float32
