"""Group-wise INT4 weights (nerve.quant, kernels linear_w4a32 / linear_w4a8, the compiler's
precision "w4a32" / "w4a8").

Error budgets (per output element, against numpy float64):
  * w4a32 = x · dequantise(W)ᵀ with the dequantised weights exact in fp32: only fp32
    summation error, budget 8·sqrt(K)·eps32·Σ_k |x_k|·(|w_k| + 16·|scale_g|) (a kernel may
    sum (q + 8)·scale and subtract the offset afterwards);
  * w4a8 adds the activation quantisation: each x is off by at most half a step sx = max|x|/127,
    which reaches the output through |w|: + Σ_k |w_k|·sx/2;
  * the quantizer itself: a 4-bit symmetric group of Gaussian weights keeps the weight's
    cosine >= 0.99 (SNR ~ 20 dB); "mse" never does worse than "minmax" (it tries ratio 1.0 too).
Packed and unpacked layouts must be bit-identical, in every variant.
"""

from __future__ import annotations

import numpy as np
import pytest

import nerve
from nerve import quant
from nerve.errors import InputError, NerveError

from helpers import SEED, forced, make_model, variant_params

EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def budget(x, w4, int8):
    x64 = np.abs(x.astype(np.float64))
    w = np.abs(w4.dequantize().astype(np.float64))
    s = np.repeat(np.abs(w4.scales.astype(np.float64)), w4.group_size, axis=1)
    k = x.shape[-1]
    tol = 8 * np.sqrt(k) * EPS32 * (x64 @ (w + 16 * s).T) + 1e-30
    if int8:
        sx = np.abs(x).max(axis=-1, keepdims=True).astype(np.float64) / 127
        tol = tol + (w.sum(axis=1)[None, :] * sx / 2)
    return tol


def reference(x, w4, b=None):
    y = x.astype(np.float64) @ w4.dequantize().astype(np.float64).T
    return y if b is None else y + b


# ---- the quantizer

@pytest.mark.parametrize("group", quant.GROUP_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_quantizer_keeps_gaussian_weights(rng, group, symmetric):
    w = rng.standard_normal((97, 4 * group)).astype(np.float32)
    errs = {}
    for method in quant.METHODS:
        w4 = quant.quantize_w4(w, group_size=group, symmetric=symmetric, method=method)
        assert w4.q.dtype == np.int8 and w4.q.min() >= -8 and w4.q.max() <= 7
        assert w4.scales.dtype == np.float16 and w4.scales.shape == (97, 4)
        assert (w4.zero is None) == symmetric
        if not symmetric:
            assert w4.zero.min() >= -8 and w4.zero.max() <= 7
        errs[method] = w4.error(w)
        assert errs[method]["cosine"] >= 0.99, (method, errs[method])
    assert errs["mse"]["snr_db"] >= errs["minmax"]["snr_db"] - 1e-9


def test_quantizer_symmetric_maps_the_peak_exactly(rng):
    w = rng.standard_normal((13, 64)).astype(np.float32)
    w4 = quant.quantize_w4(w, group_size=32, method="minmax")
    deq = w4.dequantize().reshape(13, 2, 32)
    g = w.reshape(13, 2, 32)
    peak = np.take_along_axis(g, np.abs(g).argmax(-1)[..., None], -1)[..., 0]
    got = np.take_along_axis(deq, np.abs(g).argmax(-1)[..., None], -1)[..., 0]
    # the peak is the level -8 of an fp16-rounded scale: within fp16 rounding of itself
    np.testing.assert_allclose(got, peak, rtol=2 ** -10)


def test_quantizer_all_zero_group_and_bad_input(rng):
    w = rng.standard_normal((3, 64)).astype(np.float32)
    w[1, :32] = 0
    w4 = quant.quantize_w4(w, group_size=32)
    assert np.all(w4.dequantize()[1, :32] == 0) and np.isfinite(w4.scales.astype(np.float32)).all()
    with pytest.raises(InputError, match="does not divide"):
        quant.quantize_w4(rng.standard_normal((3, 96)).astype(np.float32), group_size=64)
    with pytest.raises(InputError, match="group_size"):
        quant.quantize_w4(w, group_size=48)
    w[2, 5] = np.nan
    with pytest.raises(InputError, match=r"\[2, 5\].*non-finite"):
        quant.quantize_w4(w)
    with pytest.raises(InputError, match="method"):
        quant.quantize_w4(w, method="kmeans")
    with pytest.raises(InputError, match="2-D float"):
        quant.quantize_w4(np.zeros((3, 64), np.int32))


def test_w4weight_is_checked_whole(rng):
    w4 = quant.quantize_w4(rng.standard_normal((4, 64)).astype(np.float32), group_size=32)
    for bad in (0.0, np.inf, -np.inf, np.nan):
        s = w4.scales.copy()
        s[3, 1] = bad
        with pytest.raises(NerveError, match=r"scale\[3, group 1\]"):
            quant.W4Weight(w4.q, s, None, 32)
    q = w4.q.copy()
    q[2, 7] = 9
    with pytest.raises(NerveError, match=r"q\[2, 7\] = 9"):
        quant.W4Weight(q, w4.scales, None, 32)
    with pytest.raises(NerveError, match=r"zero\[0, group 0\]"):
        quant.W4Weight(w4.q, w4.scales, np.full((4, 2), -9, np.int8), 32)
    with pytest.raises(InputError, match="scales must be float16"):
        quant.W4Weight(w4.q, w4.scales.astype(np.float32), None, 32)
    with pytest.raises(InputError, match="x has width"):
        w4.linear(np.zeros((2, 32), np.float32))


def test_packed_layout_bytes(rng):
    w4 = quant.quantize_w4(rng.standard_normal((5, 64)).astype(np.float32), group_size=32)
    p = w4.packed
    assert p.shape == (5, 32) and p.dtype == np.uint8
    u = w4.q.astype(np.int16) + 8
    for blk in range(2):
        np.testing.assert_array_equal(p[:, 16 * blk:16 * blk + 16] & 15, u[:, 32 * blk:32 * blk + 16])
        np.testing.assert_array_equal(p[:, 16 * blk:16 * blk + 16] >> 4, u[:, 32 * blk + 16:32 * blk + 32])
    assert w4.nbytes("packed") == 5 * 32 + 5 * 2 * 2 and w4.nbytes("unpacked") == 5 * 64 + 5 * 2 * 2


# ---- the kernels against numpy float64, every variant, both layouts

CASES = [(1, 1, 32, 32), (3, 13, 96, 32), (13, 97, 416, 32), (1, 127, 1024, 64), (5, 257, 1024, 128),
         (2, 1025, 256, 64), (1, 3, 4096, 128), (97, 13, 160, 32), (8, 4096, 64, 64)]


@pytest.mark.parametrize("op,int8", [("linear_w4a32", False), ("linear_w4a8", True)])
@pytest.mark.parametrize("rows,out,k,group", CASES)
def test_kernels_match_float64(rng, op, int8, rows, out, k, group):
    w = rng.standard_normal((out, k)).astype(np.float32) * 0.1
    w4 = quant.quantize_w4(w, group_size=group, symmetric=bool(rows % 2), method="minmax")
    x = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)
    ref, tol = reference(x, w4, b), budget(x, w4, int8)
    acts = "int8" if int8 else "fp32"
    for v in nerve.kernels.runnable_variants(op):
        with forced(op, v):
            yp = w4.linear(x, b, activations=acts, layout="packed")
            yu = w4.linear(x, b, activations=acts, layout="unpacked")
        assert np.array_equal(yp, yu), f"{op} {v}: packed and unpacked layouts differ"
        err = np.abs(yp - ref)
        assert np.all(err <= tol), f"{op} {v}: worst {float((err / tol).max()):.3g} of the budget"


@pytest.mark.parametrize("variant", variant_params("linear_w4a8"))
def test_w4a8_rows_quantised_independently(rng, variant):
    """An outlier in one row changes only that row's activation scale."""
    w4 = quant.quantize_w4(rng.standard_normal((33, 128)).astype(np.float32), group_size=64)
    x = rng.standard_normal((6, 128)).astype(np.float32)
    with forced("linear_w4a8", variant):
        y0 = w4.linear(x, activations="int8")
        x[3, 5] = 1e3
        y1 = w4.linear(x, activations="int8")
    keep = [0, 1, 2, 4, 5]
    assert np.array_equal(y0[keep], y1[keep])


# ---- compiled models

def _mlp(rng, k=416, h=1664, n=97):
    from onnx import TensorProto as T
    from onnx import helper as oh

    inits = {"W1": (rng.standard_normal((k, h)) * 0.05).astype(np.float32),
             "b1": (rng.standard_normal(h) * 0.1).astype(np.float32),
             "W2": (rng.standard_normal((h, n)) * 0.05).astype(np.float32)}
    nodes = [oh.make_node("MatMul", ["x", "W1"], ["a"]), oh.make_node("Add", ["a", "b1"], ["c"]),
             oh.make_node("Relu", ["c"], ["d"]), oh.make_node("MatMul", ["d", "W2"], ["y"])]
    return make_model(nodes, [("x", T.FLOAT, ["n", k])], [("y", T.FLOAT)], inits), inits


@pytest.mark.parametrize("precision", ["w4a32", "w4a8", "w4a32:g32", "w4a8:g128"])
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_compiled_w4_is_the_documented_quantisation(rng, tmp_path, precision, rows):
    """The plan's layers are quantize_w4(W.T, group, symmetric, "mse"): the output equals numpy
    running the same quantised weights (within the kernels' budgets), threads change nothing,
    and the whole model stays close to fp32 (onnxruntime)."""
    import onnx

    from helpers import ort_run

    m, inits = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    group = int(precision.split(":g")[1]) if ":g" in precision else 64
    int8 = precision.startswith("w4a8")
    x = rng.standard_normal((rows, 416)).astype(np.float32)
    sess = nerve.Session(p, precision=precision, dims={"n": 64}, cache=False)
    y = sess.run({"x": x})["y"]
    ops = [o["type"] for o in sess.ops()]
    assert ops.count("linear_w4a8" if int8 else "linear_w4a32") == 2, ops
    def fit(k):  # the compiler's group: the largest allowed one <= group that divides k
        return max(g for g in quant.GROUP_SIZES if g <= group and k % g == 0)

    w1 = quant.quantize_w4(inits["W1"].T, group_size=fit(416), method="mse")
    w2 = quant.quantize_w4(inits["W2"].T, group_size=fit(1664), method="mse")
    acts = "int8" if int8 else "fp32"
    h1 = np.maximum(w1.linear(x, inits["b1"], activations=acts), 0)
    want = w2.linear(h1, activations=acts)
    if int8 or rows <= 16:  # the plan runs the same kernels: same bits
        assert np.array_equal(y, want)
    else:  # the tiled path: exact fp32 weights through the gemm
        np.testing.assert_allclose(y, reference(h1, w2), rtol=0, atol=float(budget(h1, w2, False).max()) * 4)
    sess2 = nerve.Session(p, precision=precision, dims={"n": 64}, cache=False, threads=2)
    assert np.array_equal(sess2.run({"x": x})["y"], y)
    ref = ort_run(m, {"x": x})["y"]
    cos = float((y * ref).sum() / np.linalg.norm(y) / np.linalg.norm(ref))
    assert cos >= 0.98, cos


def test_w4_plan_is_smaller(rng, tmp_path):
    import onnx

    m, _ = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    fp32 = nerve.compile(p, dims={"n": 8}, cache=False)
    w4 = nerve.compile(p, dims={"n": 8}, cache=False, precision="w4a8")
    assert len(w4.data) * 5 < len(fp32.data), (len(w4.data), len(fp32.data))


@pytest.mark.parametrize("bad", ["int4", "w4a8:g48", "fp32:g32", "w4a16", 8])
def test_precision_names(bad):
    with pytest.raises(InputError, match="precision"):
        nerve.precision.parse(bad)
    assert nerve.precision.parse("w8a8") == ("int8", 64)
    assert nerve.precision.parse("w4a32:g128") == ("w4a32", 128)


# ---- hot precision switching

def test_set_precision_switches_without_reloading(rng, tmp_path):
    """fp32 -> w4a8 -> w4a32 -> fp32 -> w4a8: each precision's outputs are bit-identical every
    time it is used, the report names each layer's precision, weights already loaded are
    shared (the fp32 biases are not loaded twice), and a plan-made session refuses."""
    import onnx

    m, _ = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    x = rng.standard_normal((3, 416)).astype(np.float32)
    sess = nerve.Session(p, dims={"n": 8}, cache=False)
    first = {}
    for prec in ["fp32", "w4a8", "w4a32", "fp32", "w4a8", "w4a32"]:
        sess.set_precision(prec)
        y = sess.run({"x": x})["y"]
        if prec in first:
            assert np.array_equal(y, first[prec]), prec
        else:
            first[prec] = y
        rep = sess.memory_report()
        assert rep["precision"] == prec
        want = {"fp32": "fp32", "w4a8": "w4a8", "w4a32": "w4a32"}[prec]
        assert sorted(set(rep["layers"].values())) == [want], rep["layers"]
    assert not np.array_equal(first["fp32"], first["w4a8"])
    assert sess.memory_report()["pools"]["weights"]["shared"] > 0  # b1 loaded once for all three plans
    with pytest.raises(InputError, match="precision"):
        sess.set_precision("w2")
    plan_sess = nerve.Session(nerve.compile(p, dims={"n": 8}, cache=False))
    with pytest.raises(InputError, match="compiled plan"):
        plan_sess.set_precision("w4a8")


# ---- memory_limit

def test_memory_limit_picks_precision_layer_by_layer(rng, tmp_path):
    """fp32 weights 3.4 MB (W1 416x1664: 2.77 MB, W2 1664x97: 0.65 MB). A 10 MB limit keeps
    fp32; 1.5 MB: both layers W4 (0.45 MB), then W2 (the smaller) back to fp32 (+0.56 MB) while
    W1 cannot come back; 100 kB: OutOfMemoryError naming the bytes; bad sizes: InputError."""
    import onnx

    m, _ = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    x = rng.standard_normal((2, 416)).astype(np.float32)
    big = nerve.Session(p, dims={"n": 4}, cache=False, memory_limit="10MB")
    assert big.memory_choice["fallback"] is None and set(big.memory_report()["layers"].values()) == {"fp32"}
    fit = nerve.Session(p, dims={"n": 4}, cache=False, memory_limit="1.5MB")
    rep = fit.memory_report()
    assert rep["weight_bytes"] <= 1_500_000 and rep["memory_limit"]["fallback"] == "w4a32:g64"
    layers = rep["layers"]
    first, second = [o["name"] for o in fit.ops() if o["type"].startswith("linear")]  # W1, then W2
    assert layers == {first: "w4a32", second: "fp32"} and rep["memory_limit"]["kept"] == [second], layers
    y, ref = fit.run({"x": x})["y"], big.run({"x": x})["y"]
    assert float((y * ref).sum() / np.linalg.norm(y) / np.linalg.norm(ref)) > 0.98
    with pytest.raises(nerve.OutOfMemoryError, match="even with every linear layer"):
        nerve.Session(p, dims={"n": 4}, cache=False, memory_limit="100kB")
    for bad in ("lots", "-5MB", 0, "12XB"):
        with pytest.raises(InputError, match="memory_limit"):
            nerve.Session(p, dims={"n": 4}, cache=False, memory_limit=bad)
    with pytest.raises(InputError, match="model file"):
        nerve.Session(nerve.compile(p, dims={"n": 4}, cache=False), memory_limit="1MB")


# ---- stepping down under memory pressure

def test_step_down_and_back_up_between_runs(rng, tmp_path):
    """A live session moves layers to INT4 when asked for room (step_down), tells its callback,
    keeps its inputs/outputs and runs on; a larger limit brings the fp32 weights back, and the
    outputs are then bit-identical to before the step down."""
    import onnx

    m, _ = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    x = rng.standard_normal((2, 416)).astype(np.float32)
    seen = []
    sess = nerve.Session(p, dims={"n": 4}, cache=False, on_memory_change=seen.append)
    full = sess.weight_bytes
    y0 = sess.run({"x": x})["y"]
    choice = sess.step_down(2_000_000)
    assert sess.weight_bytes <= full - 2_000_000 and seen == [choice] and choice["fallback"] == "w4a32:g64"
    assert "w4a32" in set(sess.memory_report()["layers"].values())
    y1 = sess.run({"x": x})["y"]
    assert float((y1 * y0).sum() / np.linalg.norm(y1) / np.linalg.norm(y0)) > 0.98 and not np.array_equal(y1, y0)
    sess.set_memory_limit("100MB")
    assert sess.weight_bytes == full and len(seen) == 2
    assert np.array_equal(sess.run({"x": x})["y"], y0)
    sess.set_memory_limit("100MB")  # nothing changes: no callback
    assert len(seen) == 2
    with pytest.raises(nerve.OutOfMemoryError):
        sess.set_memory_limit("10kB")
    assert sess.weight_bytes == full  # a failed step down leaves the session as it was
    with pytest.raises(InputError, match="free_bytes"):
        sess.step_down(0)


def test_memory_budget_makes_room_for_a_reservation(rng, tmp_path):
    """Two sessions share a budget; a KV-cache-sized reservation that does not fit makes the
    lower-priority session step down by itself (its callback is told), the other keeps fp32;
    a reservation nothing can make room for raises OutOfMemoryError and reserves nothing."""
    import onnx

    m, _ = _mlp(rng)
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    told = {"low": [], "high": []}
    budget = nerve.MemoryBudget("8MB")
    low = nerve.Session(p, dims={"n": 4}, cache=False, budget=budget, priority=0, on_memory_change=told["low"].append)
    high = nerve.Session(p, dims={"n": 4}, cache=False, budget=budget, priority=5,
                         on_memory_change=told["high"].append)
    full = high.weight_bytes
    assert budget.used == 2 * full and not told["low"]
    with budget.reserve(2_000_000, "kv cache") as r:
        assert budget.used <= budget.limit and r.nbytes == 2_000_000
        assert len(told["low"]) == 1 and not told["high"] and high.weight_bytes == full
        rep = budget.report()
        assert rep["reserved"] == [{"bytes": 2_000_000, "what": "kv cache"}] and len(rep["sessions"]) == 2
    assert budget.report()["reserved"] == []
    with pytest.raises(nerve.OutOfMemoryError, match="memory budget"):
        budget.reserve(7_000_000, "too much")
    assert budget.report()["reserved"] == []
    x = rng.standard_normal((2, 416)).astype(np.float32)
    assert low.run({"x": x})["y"].shape == high.run({"x": x})["y"].shape
