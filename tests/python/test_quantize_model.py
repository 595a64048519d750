"""nerve.quantize and `nerve quantize`: a model's layers to W4 or w8a8 with a per-layer
sensitivity report and a policy. The model: three linears where the last one (the output
projection) is the most sensitive, on fresh random calibration feeds."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nerve
from nerve.errors import InputError

from helpers import SEED, make_model, run_cli


@pytest.fixture
def mlp(tmp_path):
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(SEED)
    k, hid, n = 128, 256, 64
    inits = {"W1": (rng.standard_normal((k, hid)) * 0.05).astype(np.float32),
             "W2": (rng.standard_normal((hid, hid)) * 0.05).astype(np.float32),
             "W3": (rng.standard_normal((hid, n)) * 0.05).astype(np.float32)}
    nodes = [h.make_node("MatMul", ["x", "W1"], ["a"]), h.make_node("Relu", ["a"], ["b"]),
             h.make_node("MatMul", ["b", "W2"], ["c"]), h.make_node("Relu", ["c"], ["d"]),
             h.make_node("MatMul", ["d", "W3"], ["y"], name="out_proj")]
    path = tmp_path / "mlp.onnx"
    import onnx

    onnx.save(make_model(nodes, [("x", T.FLOAT, ["n", k])], [("y", T.FLOAT)], inits), path)
    calib = [{"x": rng.standard_normal((8, k)).astype(np.float32)} for _ in range(4)]
    return path, calib


def _greedy(layers, fp32_bytes, budget, group=64):
    """The auto policy's choice, recomputed from the report: the most sensitive layers first,
    each kept fp32 if the linear weights still fit budget x their fp32 bytes."""
    w4 = {n: b // 8 + 2 * (b // 4 // group) for n, b in fp32_bytes.items()}
    total, limit, kept = sum(w4.values()), budget * sum(fp32_bytes.values()), set()
    for n in sorted(layers, key=lambda n: layers[n]["alone"]["snr_db"]):
        if total + fp32_bytes[n] - w4[n] <= limit:
            total += fp32_bytes[n] - w4[n]
            kept.add(n)
    return kept


@pytest.mark.parametrize("budget", [0.3, 0.45])
def test_auto_policy_keeps_the_most_sensitive_layers_within_the_budget(mlp, budget):
    path, calib = mlp
    plan = nerve.quantize(path, "w4a8", calib, dims={"n": 8}, budget=budget, progress=False)
    rep = plan.report
    layers = rep["layers"]
    assert len(layers) == 3
    fp32_bytes = {"MatMul_0+Relu_1": 4 * 128 * 256, "MatMul_2+Relu_3": 4 * 256 * 256, "out_proj": 4 * 256 * 64}
    assert set(layers) == set(fp32_bytes)
    kept = _greedy(layers, fp32_bytes, budget)
    if budget == 0.3:
        assert kept == {"out_proj"}  # the only layer whose fp32 weight fits next to the others' W4
    for name, info in layers.items():
        assert 10 < info["alone"]["snr_db"] < 60 and 0.9 < info["alone"]["cosine"] < 1.0  # each really quantised
        assert info["precision"] == ("fp32" if name in kept else "w4a8"), (name, info)
        assert ("kept fp32" in info["why"]) == (name in kept) and "sensitivity rank" in info["why"]
    assert rep["weight_bytes"]["chosen"] <= budget * rep["weight_bytes"]["fp32"]
    sess = nerve.Session(plan)
    types = {o["name"]: o["type"] for o in sess.ops()}
    assert sum(t == "linear_w4a8" for t in types.values()) == 3 - len(kept)
    assert all(sess.memory_report()["layers"][n] == "fp32" for n in kept)
    # the report's accuracy is the plan's against fp32 over the calibration feeds; two or three
    # 4-bit layers of ~20 dB each (cosine ~0.995 alone) leave the model above 0.98
    ref = nerve.Session(path, dims={"n": 8})
    y = np.concatenate([sess.run(c)["y"].ravel() for c in calib]).astype(np.float64)
    r = np.concatenate([ref.run(c)["y"].ravel() for c in calib]).astype(np.float64)
    cos = float(y @ r / np.linalg.norm(y) / np.linalg.norm(r))
    assert abs(rep["accuracy"]["cosine"] - cos) < 1e-9 and cos > 0.98


def test_policy_all_and_dict(mlp):
    path, calib = mlp
    plan = nerve.quantize(path, "w4a32", calib, policy="all", group_size=32, method="minmax", dims={"n": 8},
                          progress=False)
    types = [o["type"] for o in nerve.Session(plan).ops()]
    assert types.count("linear_w4a32") == 3
    names = list(plan.report["layers"])
    plan = nerve.quantize(path, "w4a8", None, policy={names[0]: "fp32"}, dims={"n": 8}, progress=False)
    assert plan.report["accuracy"] is None and plan.report["layers"][names[0]]["precision"] == "fp32"
    assert [o["type"] for o in nerve.Session(plan).ops()].count("linear_w4a8") == 2


def test_bad_calibration_and_options(mlp):
    path, calib = mlp
    with pytest.raises(InputError, match="empty"):
        nerve.quantize(path, calibration=[], dims={"n": 8}, progress=False)
    with pytest.raises(InputError, match="needs calibration"):
        nerve.quantize(path, calibration=None, dims={"n": 8}, progress=False)
    with pytest.raises(InputError, match="not inputs of the model"):
        nerve.quantize(path, calibration=[{"z": calib[0]["x"]}], dims={"n": 8}, progress=False)
    with pytest.raises(InputError, match="one dict"):
        nerve.quantize(path, calibration=calib[0], dims={"n": 8}, progress=False)
    with pytest.raises(nerve.NerveError, match="x"):  # a feed of the wrong width
        nerve.quantize(path, calibration=[{"x": np.zeros((8, 7), np.float32)}], dims={"n": 8}, progress=False)
    with pytest.raises(InputError, match="does not have"):
        nerve.quantize(path, policy={"nope": "fp32"}, dims={"n": 8}, progress=False)
    for bad in ({"scheme": "w2"}, {"method": "kmeans"}, {"group_size": 48}, {"policy": "some"}, {"budget": 0}):
        with pytest.raises(InputError):
            nerve.quantize(path, calibration=calib, dims={"n": 8}, progress=False, **bad)


def test_cli(mlp, tmp_path):
    path, calib = mlp
    np.savez(tmp_path / "calib.npz", x=np.stack([c["x"] for c in calib]))
    out = tmp_path / "q.nrv"
    r = run_cli("quantize", str(path), "--scheme", "w4a8", "--calib", str(tmp_path / "calib.npz"), "--out", str(out),
                "--dim", "n=8", "--budget", "0.3", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert sum(v["precision"] == "fp32" for v in rep["layers"].values()) == 1 and out.is_file()
    y = nerve.Session(out).run(calib[0])["y"]
    assert y.shape == (8, 64) and np.isfinite(y).all()
    (tmp_path / "feeds").mkdir()
    for i, c in enumerate(calib):
        np.savez(tmp_path / "feeds" / f"{i}.npz", **c)
    r = run_cli("quantize", str(path), "--calib", str(tmp_path / "feeds"), "--out", str(out), "--dim", "n=8")
    assert r.returncode == 0 and "[3/3]" in r.stderr and "kept fp32" in r.stderr, r.stderr
    r = run_cli("quantize", str(path), "--calib", str(tmp_path / "missing.npz"), "--out", str(out))
    assert r.returncode != 0 and "no such file" in r.stderr


def test_w8a8_gptq_beats_round_to_nearest_on_held_out_inputs(tmp_path):
    """w8a8 with calibration: the linears' int8 codes come from GPTQ (their input Hessians on
    the calibration feeds), so on held-out inputs of the same (correlated) distribution the
    output is closer to fp32 than with round-to-nearest codes (policy "all" without data)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(SEED)
    k, n = 96, 80
    w = rng.standard_normal((k, n)).astype(np.float32)
    path = tmp_path / "lin.onnx"
    import onnx

    onnx.save(make_model([h.make_node("MatMul", ["x", "W"], ["y"], name="proj")], [("x", T.FLOAT, ["rows", k])],
                         [("y", T.FLOAT)], {"W": w}), path)
    mix = rng.standard_normal((k, k)) * np.exp(-np.arange(k) / 12.0)[:, None]  # correlated, decaying inputs

    def feeds(count):
        return [{"x": (rng.standard_normal((40, k)) @ mix).astype(np.float32)} for _ in range(count)]

    calib, held_out = feeds(12), feeds(12)
    gptq = nerve.quantize(path, "w8a8", calib, policy="all", dims={"rows": 40}, progress=False)
    rtn = nerve.quantize(path, "w8a8", None, policy="all", dims={"rows": 40}, progress=False)
    assert gptq.report["method"] == "gptq" and rtn.report["method"] == "rtn"
    assert gptq.report["weight_bytes"] == {"fp32": 4 * k * n, "chosen": k * n + 4 * n}
    for plan in (gptq, rtn):
        assert [o["type"] for o in nerve.Session(plan).ops()] == ["linear_w8a8"]  # 40 rows: int8 activations
    err = {}
    for name, plan in (("gptq", gptq), ("rtn", rtn)):
        sess = nerve.Session(plan)
        err[name] = sum(float(np.sum((sess.run(f)["y"].astype(np.float64) - f["x"].astype(np.float64) @ w) ** 2))
                        for f in held_out)
    assert err["gptq"] < 0.8 * err["rtn"], err


def test_w8a8_policy_covers_convs_and_linears(tmp_path, rng):
    """The w8a8 candidates are the linears and the 1-D convs; the auto policy keeps the most
    sensitive fp32 within the budget, and each choice shows in the plan's ops."""
    from onnx import TensorProto as T
    from onnx import helper as h

    inits = {"cw": (rng.standard_normal((32, 16, 3)) * 0.2).astype(np.float32),
             "W": (rng.standard_normal((32, 24)) * 0.2).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1], name="conv"), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             h.make_node("MatMul", ["t", "W"], ["y"], name="proj")]
    path = tmp_path / "cl.onnx"
    import onnx

    onnx.save(make_model(nodes, [("x", T.FLOAT, [1, 16, 50])], [("y", T.FLOAT)], inits), path)
    calib = [{"x": rng.standard_normal((1, 16, 50)).astype(np.float32)} for _ in range(3)]
    plan = nerve.quantize(path, "w8a8", calib, policy="all", progress=False)
    layers = plan.report["layers"]
    assert len(layers) == 2 and all(v["precision"] == "w8a8" for v in layers.values())
    assert sorted(o["type"] for o in nerve.Session(plan).ops() if "w8" in o["type"]) == ["conv_w8a8", "linear_w8a8"]
    conv = next(n for n in layers if n.startswith("conv"))
    plan = nerve.quantize(path, "w8a8", calib, policy={conv: "fp32"}, progress=False)
    types = {o["name"]: o["type"] for o in nerve.Session(plan).ops()}
    assert types[conv] in ("conv", "conv_packed") and "linear_w8a8" in types.values()
    plan = nerve.quantize(path, "w8a8", calib, policy="auto", budget=1.0, progress=False)
    assert all(v["precision"] == "fp32" and "alone" in v for v in plan.report["layers"].values())
    with pytest.raises(InputError, match="must be 'fp32' or 'w8a8'"):
        nerve.quantize(path, "w8a8", calib, policy={conv: "w4a8"}, progress=False)


def test_w8a8_with_a_branch_the_compiler_cannot_fold(tmp_path, rng):
    """An If on an input keeps both branches; their linears' inputs cannot be tapped for GPTQ
    (they are inside the branches), so those layers are quantized without it, and a branch
    the calibration never takes is reported as not exercised."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def branch(name, w):
        node = h.make_node("MatMul", ["x", name], [name + "_y"], name=name + "_mm")
        return h.make_graph([node], name, [], [h.make_tensor_value_info(name + "_y", T.FLOAT, None)])
    wa = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)
    wb = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)
    node = h.make_node("If", ["flag"], ["y"], then_branch=branch("A", wa), else_branch=branch("B", wb))
    m = make_model([node], [("x", T.FLOAT, [4, 16]), ("flag", T.BOOL, [])], [("y", T.FLOAT)], {"A": wa, "B": wb})
    path = tmp_path / "if.onnx"
    import onnx

    onnx.save(m, path)
    calib = [{"x": rng.standard_normal((4, 16)).astype(np.float32), "flag": np.array(True)} for _ in range(4)]
    plan = nerve.quantize(path, "w8a8", calib, policy="auto", budget=0.3, progress=False)
    layers = plan.report["layers"]
    assert len(layers) == 2 and all(v["precision"] == "w8a8" for v in layers.values())
    untaken = next(v for n, v in layers.items() if n.startswith("B"))
    assert "did not change" in untaken["why"]
    x = calib[0]["x"]
    for flag, w in ((True, wa), (False, wb)):
        got = nerve.Session(plan).run({"x": x, "flag": np.array(flag)})["y"]
        np.testing.assert_allclose(got, x @ w, rtol=0, atol=0.02 * np.abs(x @ w).max())


def test_w8a32_keeps_fp32_activations_on_any_row_count(mlp):
    """scheme "w8a32": every linear gets int8 weights (per output channel) and runs linear_w8
    (fp32 activations) whatever its row count; the only error is the weights' rounding (the
    plan equals float64 math on the rounded weights); per layer it mixes with fp32 and w8a8
    through layers=."""
    path, calib = mlp
    plan = nerve.quantize(path, "w8a32", calib, policy="all", dims={"n": 64}, progress=False)
    assert plan.report["scheme"] == "w8a32" and plan.report["method"] == "gptq"
    assert [o["type"] for o in nerve.Session(plan).ops()] == ["linear_w8", "linear_w8", "linear_w8"]
    names = list(plan.report["layers"])
    k = 128
    assert plan.report["weight_bytes"]["chosen"] < plan.report["weight_bytes"]["fp32"] / 3.5
    x = np.random.default_rng(5).standard_normal((64, k)).astype(np.float32)
    one = nerve.Session(nerve.compile(path, dims={"n": 64}, precision="fp32", layers={names[0]: "w8a32"},
                                      outputs=None))
    assert [o["type"].replace("_panels", "") for o in one.ops()] == ["linear_w8", "linear", "linear"]
    with pytest.raises(InputError, match="precision"):
        nerve.compile(path, dims={"n": 64}, precision="w8a32:g32")
    # round to nearest without data: s = max|w| / 127 per output channel (a column of the
    # MatMul's W), stored as float32, and q = round(w / s) with that stored s (a float64 s
    # would move codes whose w / s is within 1e-6 of a half: about one weight a run); with
    # fp32 activations the plan is float64 math on q·s up to fp32 rounding — no activation
    # quantisation anywhere
    import onnx
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(str(path)).graph.initializer}

    def w8(w):
        s = (np.abs(w).max(axis=0) / 127).astype(np.float32).astype(np.float64)
        return np.clip(np.rint(w / s), -127, 127) * s

    a = x.astype(np.float64)
    want = np.maximum(np.maximum(a @ w8(inits["W1"]), 0) @ w8(inits["W2"]), 0) @ w8(inits["W3"])
    plain = nerve.Session(nerve.compile(path, dims={"n": 64}, precision="w8a32"))
    got = plain.run({"x": x})["y"].astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    fp32 = np.maximum(np.maximum(a @ inits["W1"], 0) @ inits["W2"], 0) @ inits["W3"]
    assert np.linalg.norm(got - fp32) / np.linalg.norm(fp32) > 1e-3  # the weights really are int8
    mixed = nerve.Session(nerve.compile(path, dims={"n": 64}, precision="int8", layers={names[1]: "w8a32"}))
    assert [o["type"] for o in mixed.ops()] == ["linear_w8a8", "linear_w8", "linear_w8a8"]
