"""nerve.Session / nerve.compile / Plan, the plan cache, provenance + replay, the model CLI
commands, and the BERT-style encoder of the graph-compiler issue (parity and fusion)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve
from nerve import cli

ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "models"))
import tiny_bert  # noqa: E402


def ref_run(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.fixture
def mlp(tmp_path):
    rng = np.random.default_rng(3)
    w1, b1 = rng.standard_normal((13, 29)).astype(np.float32), rng.standard_normal(29).astype(np.float32)
    w2 = rng.standard_normal((29, 7)).astype(np.float32)
    g = h.make_graph([
        h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
        h.make_node("Relu", ["a1"], ["r1"]), h.make_node("MatMul", ["r1", "w2"], ["y"]),
        h.make_node("ReduceSum", ["y", "ax"], ["s"], keepdims=0),
    ], "mlp", [h.make_tensor_value_info("x", T.FLOAT, ["n", 13])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", 7]), h.make_tensor_value_info("s", T.FLOAT, ["n"])],
        [nh.from_array(w1, "w1"), nh.from_array(b1, "b1"), nh.from_array(w2, "w2"),
         nh.from_array(np.array([1], np.int64), "ax")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    return p


def test_session_api_and_parity(mlp):
    s = nerve.Session(mlp, dims={"n": 10})
    assert s.input_names == ["x"] and s.output_names == ["y", "s"]
    assert s.inputs[0]["shape"] == ["n", 13] and s.inputs[0]["bounds"] == {"n": 10}
    rng = np.random.default_rng(0)
    for n in (1, 3, 10, 0):
        x = rng.standard_normal((n, 13)).astype(np.float32)
        out, ref = s.run({"x": x}), ref_run(mlp, {"x": x})
        for k in ("y", "s"):
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-5)
    types = [op["type"] for op in s.ops()]
    assert types.count("linear") == 2 and "unary" not in types  # bias and relu fused into the first
    mem = s.memory_report()
    assert mem["weight_bytes"] >= 4 * (13 * 29 + 29 + 29 * 7)
    # the arena is planned for n = 10: y (10x7) and the hidden (10x29) at most, 64-byte aligned blocks
    assert 0 < mem["arena_bytes"] <= 64 * ((10 * 29 * 4 + 63) // 64 + (10 * 7 * 4 + 63) // 64 + 2)
    with pytest.raises(nerve.InputError, match="bound"):
        s.run({"x": np.zeros((11, 13), np.float32)})


def test_dims_left_unbound_are_bound_by_the_first_run(mlp, rng):
    """No dims= for a model with symbolic dims: the session compiles at its first run for the
    feeds' sizes, and recompiles only when a later run feeds more; dims the caller bounded
    stay hard bounds, and nerve.compile still asks for them (UnboundDimsError names them)."""
    with pytest.raises(nerve.UnboundDimsError, match="dims=") as err:
        nerve.compile(mlp, cache=False)
    assert err.value.dims == ["n"] and isinstance(err.value, nerve.ModelError)
    s = nerve.Session(mlp, cache=False)
    assert s.input_names == ["x"] and s.output_names == ["y", "s"]
    assert s.inputs == [{"name": "x", "dtype": np.float32, "shape": ["n", 13], "bounds": {}, "state_partner": None}]
    for before_the_first_run in (s.ops, s.memory_report, lambda: s.outputs, lambda: s.set_memory_limit("1MB")):
        with pytest.raises(nerve.InputError, match="first run"):
            before_the_first_run()
    s.set_precision("int8")  # taken by the first run's compile
    x = rng.standard_normal((5, 13)).astype(np.float32)
    out = s.run({"x": x})
    assert s.inputs[0]["bounds"] == {"n": 5} and "linear_w8a8" in [op["type"] for op in s.ops()]
    s.set_precision("fp32")
    bound = 5
    for n in (5, 2, 0, 9, 3, 9):
        x = rng.standard_normal((n, 13)).astype(np.float32)
        before = s.plan.hash
        out, ref = s.run({"x": x}), ref_run(mlp, {"x": x})
        np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["s"], ref["s"], rtol=1e-5, atol=1e-4)
        assert (s.plan.hash != before) == (n > bound), n  # recompiled only for a larger feed
        bound = max(bound, n)
    assert s.inputs[0]["bounds"] == {"n": 9}
    with pytest.raises(nerve.InputError, match="rank 2, got 3"):
        s.run({"x": np.zeros((9, 13, 1), np.float32)})
    with pytest.raises(nerve.InputError, match="axis 1"):  # a fixed dim is not a bound to grow
        s.run({"x": np.zeros((9, 14), np.float32)})

    fresh = nerve.Session(mlp, cache=False)
    with pytest.raises(nerve.InputError, match="unknown input"):
        fresh.run({"z": x})
    with pytest.raises(nerve.InputError, match=r"\['n'\] are bound by the feeds, but no fed input"):
        fresh.run({})
    # a bound the caller gave is a hard bound
    bounded = nerve.Session(mlp, dims={"n": 4}, cache=False)
    with pytest.raises(nerve.InputError, match="beyond the bound 4"):
        bounded.run({"x": np.zeros((5, 13), np.float32)})


def test_run_writes_outputs_into_the_callers_arrays(mlp, rng):
    """run(feeds, out=): the named outputs are copied into the given arrays, which come back
    as they are (a loop reuses them: no allocation per run); the others are fresh. An out
    that names no returned output, or holds an array of another dtype, a fixed dim that
    differs, a non-contiguous or read-only one, is refused before the run; a symbolic dim
    that differs from the run's is refused after it, with nothing written."""
    s = nerve.Session(mlp, dims={"n": 10}, cache=False)
    y = np.full((6, 7), np.nan, np.float32)
    for _ in range(2):
        x = rng.standard_normal((6, 13)).astype(np.float32)
        got = s.run({"x": x}, out={"y": y})
        want = ref_run(mlp, {"x": x})
        assert got["y"] is y and got["s"].base is None
        np.testing.assert_allclose(y, want["y"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["s"], want["s"], rtol=1e-5, atol=1e-4)
    x = rng.standard_normal((6, 13)).astype(np.float32)
    before = y.copy()
    refused = {
        "not an output of the model": {"z": y},
        "must be a numpy array": {"y": [[0.0] * 7] * 6},
        "dtype float64, the output is float32": {"y": y.astype(np.float64)},
        r"shape \[6, 8\], the output's is \['n', 7\]": {"y": np.zeros((6, 8), np.float32)},
        r"shape \[42\]": {"y": np.zeros(42, np.float32)},
        "C-contiguous": {"y": np.zeros((7, 6), np.float32).T},
    }
    read_only = y.copy()
    read_only.flags.writeable = False
    refused["writable"] = {"y": read_only}
    for message, out in refused.items():
        with pytest.raises(nerve.InputError, match=message):
            s.run({"x": x}, out=out)
    with pytest.raises(nerve.InputError, match=r"shape \[6, 7\], this run's output \[5, 7\]: nothing was written"):
        s.run({"x": x[:5]}, out={"y": y})
    np.testing.assert_array_equal(y, before)
    np.testing.assert_allclose(s.run({"x": x})["y"], ref_run(mlp, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_run_refuses_out_for_a_state_output(tmp_path):
    g = h.make_graph([h.make_node("Add", ["h_in", "x"], ["h_out"]), h.make_node("Relu", ["h_out"], ["y"])], "acc",
                     [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("h_in", T.FLOAT, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2]), h.make_tensor_value_info("h_out", T.FLOAT, [2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    s = nerve.Session(m.SerializeToString(), state={"h_out": "h_in"}, cache=False)
    y = np.zeros(2, np.float32)
    assert s.run({"x": np.ones(2, np.float32), "h_in": np.zeros(2, np.float32)}, out={"y": y})["y"] is y
    assert list(y) == [1.0, 1.0]
    with pytest.raises(nerve.InputError, match="keeps as state"):
        s.run({"x": np.ones(2, np.float32)}, out={"h_out": np.zeros(2, np.float32)})
    s.run({"x": np.ones(2, np.float32)}, out={"y": y})
    assert list(y) == [2.0, 2.0]  # the refused run did not move the state on (3 if it had)


def test_state_carrying_session_keeps_its_first_bounds(tmp_path, rng):
    """A session that carries state between runs binds its dims at the first run and keeps
    them: recompiling would drop the state, so a larger feed is an error, as with dims=."""
    g = h.make_graph([h.make_node("Add", ["h_in", "x"], ["h_out"]), h.make_node("Relu", ["h_out"], ["y"])], "acc",
                     [h.make_tensor_value_info("x", T.FLOAT, ["n", 3]), h.make_tensor_value_info("h_in", T.FLOAT, ["n", 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", 3]), h.make_tensor_value_info("h_out", T.FLOAT, ["n", 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "acc.onnx"
    onnx.save(m, path)
    s = nerve.Session(path, state={"h_out": "h_in"}, cache=False)
    x1, x2 = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    s.run({"x": x1, "h_in": np.zeros((4, 3), np.float32)})
    np.testing.assert_array_equal(s.run({"x": x2})["y"], np.maximum(x1 + x2, 0))
    with pytest.raises(nerve.InputError, match="beyond the bound 4.*carries state.*give dims="):
        s.run({"x": np.zeros((5, 3), np.float32), "h_in": np.zeros((5, 3), np.float32)})


def test_models_in_memory(mlp, tmp_path, rng):
    """An onnx.ModelProto or its bytes compile as the file does (same plan); external data
    cannot be named from memory: a ModelError saying to use the path."""
    m = onnx.load(mlp)
    x = rng.standard_normal((3, 13)).astype(np.float32)
    want = nerve.Session(mlp, dims={"n": 4}, cache=False).run({"x": x})
    for model in (m, m.SerializeToString()):
        got = nerve.Session(model, dims={"n": 4}, cache=False).run({"x": x})
        np.testing.assert_array_equal(got["y"], want["y"])
    assert nerve.compile(m, dims={"n": 4}, cache=False).hash == nerve.compile(mlp, dims={"n": 4}, cache=False).hash
    assert nerve.Session(m, cache=False).run({"x": x})["s"].shape == (3,)  # dims bound by the feeds
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    with pytest.raises(nerve.ModelError, match="in-memory model cannot name: compile the model from its .onnx path"):
        nerve.compile(onnx.load(tmp_path / "ext.onnx", load_external_data=False), dims={"n": 4}, cache=False)


def test_plan_save_load_and_cache(mlp, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("NERVE_PLAN_CACHE", "1")
    plan = nerve.compile(mlp, dims={"n": 4})
    cached = list((tmp_path / "cache" / "nerve" / "plans").glob("*.nrv"))
    assert len(cached) == 1 and cached[0].read_bytes() == plan.data
    assert nerve.compile(mlp, dims={"n": 4}).data == plan.data
    assert nerve.compile(mlp, dims={"n": 5}).hash != plan.hash  # options are part of the key and the plan
    f = plan.save(tmp_path / "mlp.nrv")
    s1, s2 = nerve.Session(f), nerve.Session(mlp, dims={"n": 4})
    assert s1.hash == plan.hash == s2.hash
    x = np.random.default_rng(1).standard_normal((4, 13)).astype(np.float32)
    np.testing.assert_array_equal(s1.run({"x": x})["y"], s2.run({"x": x})["y"])


def test_provenance_log_and_replay(mlp, tmp_path, capsys):
    log = tmp_path / "runs.jsonl"
    s = nerve.Session(mlp, dims={"n": 6}, log=log)
    rng = np.random.default_rng(2)
    for n in (2, 6, 6):
        s.run({"x": rng.standard_normal((n, 13)).astype(np.float32)})
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["plan"] == s.hash and "linear:" in " ".join(lines[0]["kernels"])
    assert cli.main(["replay", str(log)]) == 0
    assert "3 identical" in capsys.readouterr().out
    # a recorded output that does not match what the plan computes is reported, exit 1
    first = lines[0]
    bad = np.load(log.parent / "runs.jsonl.d" / "arrays" / f"{first['outputs']['y']['sha256']}.npy") + 1.0
    from nerve.provenance import array_sha256

    digest = array_sha256(bad)
    np.save(log.parent / "runs.jsonl.d" / "arrays" / f"{digest}.npy", bad)
    first["outputs"]["y"]["sha256"] = digest
    log.write_text("\n".join(json.dumps(x) for x in [first] + lines[1:]) + "\n")
    assert cli.main(["replay", str(log)]) == 1
    assert "1 mismatched" in capsys.readouterr().out


def test_cli_plan_run_bench(mlp, tmp_path, capsys):
    assert cli.main(["plan", str(mlp), "--dim", "n=8", "--save", str(tmp_path / "p.nrv")]) == 0
    text = capsys.readouterr().out
    assert "linear" in text and "arena layout" in text and "weights" in text and (tmp_path / "p.nrv").is_file()
    x = np.random.default_rng(5).standard_normal((3, 13)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(mlp), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "o.npz")]) == 0
    assert "y  float32[3, 7]" in capsys.readouterr().out
    out = np.load(tmp_path / "o.npz")
    np.testing.assert_allclose(out["y"], ref_run(mlp, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    assert cli.main(["bench", str(mlp), "--vs", "onnxruntime", "--quick", "--json", "--dim", "n=4"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ratio"] > 0 and r["nerve"]["median_us"] > 0 and max(r["max_abs_diff"].values()) < 1e-4


def test_cli_bench_profile_sets_nerve_beside_onnxruntime(mlp, capsys):
    """`nerve bench MODEL --profile N --vs onnxruntime`: per op type and the N slowest ops of
    each runtime, µs per run, from nerve's per-op counters and onnxruntime's own profiler; the
    totals by type add up, the ops are the plan's (a linear for the MLP's MatMul + Add)."""
    assert cli.main(["bench", str(mlp), "--vs", "onnxruntime", "--quick", "--json", "--dim", "n=4",
                     "--profile", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    ours, peer = r["profile"]["nerve"], r["profile"]["onnxruntime"]
    for p in (ours, peer):
        assert p["runs"] >= 3 and 0 < len(p["top"]) <= 2 and p["total_us"] > 0
        assert abs(sum(t["us"] for t in p["by_type"]) - p["total_us"]) < 1e-6 * p["total_us"] + 1e-9
        assert [t["us"] for t in p["top"]] == sorted((t["us"] for t in p["top"]), reverse=True)
    assert ours["top"][0]["type"].startswith("linear") and ours["top"][0]["output"] in ([4, 29], [4, 7])
    assert any(t["type"] in ("MatMul", "Gemm", "FusedMatMul") for t in peer["by_type"])
    assert cli.main(["bench", str(mlp), "--quick", "--dim", "n=4", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "profile, nerve" in text and "by type:" in text and "onnxruntime" not in text.split("profile, nerve")[1]


def test_cli_example_feeds_default_sizes_and_peer_failures(mlp, tmp_path):
    """`nerve bench MODEL` without feeds: a batch or leading axis 1, an image's height and width
    64 (strided backbones want a multiple of 32), any other symbolic size 16; a peer that
    cannot run the feeds is an InputError naming the shapes and what to pass."""
    from nerve.modeltools import bench_model, example_feeds

    specs = [{"name": "images", "dtype": np.float32, "shape": ["batch", 3, "height", "width"]},
             {"name": "ids", "dtype": np.int64, "shape": ["b", "seq"]},
             {"name": "signal", "dtype": np.float32, "shape": ["n"]}]
    feeds = example_feeds(specs, {"seq": 5}, {})
    assert {k: v.shape for k, v in feeds.items()} == {"images": (1, 3, 64, 64), "ids": (1, 5), "signal": (16,)}
    g = h.make_graph([h.make_node("Reshape", ["x", "shape"], ["y"])], "r", [h.make_tensor_value_info("x", T.FLOAT, ["n"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(np.array([-1, 4], np.int64), "shape")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "r.onnx")
    with pytest.raises(nerve.InputError, match=r"onnxruntime cannot run the model on these feeds \{'x': \[6\]\}.*--dim"):
        bench_model(str(tmp_path / "r.onnx"), {"x": np.zeros(6, np.float32)}, {"n": 6}, "onnxruntime", seconds=0.1)


def test_bench_beside_a_peer_takes_turns_when_the_two_pools_share_too_few_cores(tmp_path, monkeypatch):
    """With --vs and more threads than half the cores, both engines' spinning pools would take
    each other's cores (measured: nerve 1.5x slower beside onnxruntime than alone at 2 threads
    on 2 cores): each engine's block of runs then starts after a pause (its pool woken by a
    few runs first), and the result and report say so; at 1 thread, or with cores to spare,
    the blocks follow each other directly and nothing is said."""
    from nerve import modeltools

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "r", [h.make_tensor_value_info("x", T.FLOAT, [64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [64])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "relu.onnx")
    feeds = {"x": np.ones(64, np.float32)}
    pauses = []
    real_sleep = modeltools.time.sleep
    monkeypatch.setattr(modeltools.time, "sleep", lambda s: (pauses.append(s), real_sleep(s)))
    monkeypatch.setattr(modeltools.os, "cpu_count", lambda: 2)
    shared = modeltools.bench_model(str(tmp_path / "relu.onnx"), feeds, {}, "onnxruntime", threads=2, seconds=0.05,
                                    repeat=3)
    assert "2 threads on 2 cores" in shared["timing"]
    assert "timing  in turns: both engines run 2 threads" in modeltools.format_bench(shared)
    assert pauses == [modeltools.TURN_PAUSE_S] * 6  # one before each engine's block, 3 rounds
    assert shared["nerve"]["runs"] >= 15 and shared["onnxruntime"]["runs"] >= 15
    for threads, cores in ((1, 2), (2, 4)):
        pauses.clear()
        monkeypatch.setattr(modeltools.os, "cpu_count", lambda: cores)
        r = modeltools.bench_model(str(tmp_path / "relu.onnx"), feeds, {}, "onnxruntime", threads=threads,
                                   seconds=0.05, repeat=1)
        assert "timing" not in r and "timing" not in modeltools.format_bench(r) and not pauses


def test_bert_encoder_parity_and_fusion(tmp_path):
    path = tiny_bert.build(str(tmp_path / "bert.onnx"))
    feeds = tiny_bert.example_feeds(batch=2, seq=16)
    s = nerve.Session(path, dims={"batch": 2, "sequence": 16})
    out = s.run(feeds)["last_hidden_state"]
    ref = ref_run(path, feeds)["last_hidden_state"]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    types = [op["type"].replace("_panels", "") for op in s.ops()]  # either weight layout
    assert types.count("layernorm") + types.count("layernorm_linear") == 5  # embeddings + 2 per layer
    assert "reduce" not in types  # no decomposed layernorm left
    assert "unary" not in types  # Erf-GELU became the linear's fused activation
    assert types.count("linear") + types.count("layernorm_linear") == 12
    assert "concat" not in types  # the Reshape targets (Shape/Gather/Concat) were folded at compile time
    # a shorter batch within the bounds reuses the same plan
    short = tiny_bert.example_feeds(batch=1, seq=9, seed=4)
    np.testing.assert_allclose(s.run(short)["last_hidden_state"], ref_run(path, short)["last_hidden_state"],
                               rtol=1e-4, atol=1e-4)


def _conv_model(tmp_path):
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((48, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((64, 48, 1, 1)).astype(np.float32)
    g = h.make_graph([
        h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "w2"], ["y"]),
    ], "convnet", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 33, 31])],
        [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(w1, "w1"), nh.from_array(w2, "w2")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "convnet.onnx"
    onnx.save(m, p)
    return p, {"x": rng.standard_normal((1, 3, 33, 31)).astype(np.float32)}


def test_threads_give_identical_results(tmp_path):
    bert = tiny_bert.build(str(tmp_path / "bert.onnx"), hidden=256, ff=1024, heads=4)
    conv, conv_feeds = _conv_model(tmp_path)
    # 64 rows (GEMM path), 32 rows (mid-rows path), 6 rows (dot path) of the linear kernel
    cases = [(bert, {"batch": 2, "sequence": 32}, tiny_bert.example_feeds(batch=2, seq=32)),
             (bert, {"batch": 2, "sequence": 16}, tiny_bert.example_feeds(batch=2, seq=16)),
             (bert, {"batch": 2, "sequence": 3}, tiny_bert.example_feeds(batch=2, seq=3)),
             (conv, {}, conv_feeds)]
    for path, dims, feeds in cases:
        outs = []
        for threads in (1, 2, 3):
            s = nerve.Session(path, threads=threads, dims=dims)
            outs.append(s.run(feeds))
        for o in outs[1:]:
            for k in outs[0]:
                np.testing.assert_array_equal(o[k], outs[0][k])
        ref = ref_run(path, feeds)
        for k in outs[0]:
            np.testing.assert_allclose(outs[0][k], ref[k], rtol=1e-4, atol=1e-4)
    with pytest.raises(nerve.InputError):
        nerve.Session(conv, threads=0)


def test_default_threads_follow_the_cpus_this_process_may_use(tmp_path, monkeypatch):
    """Without threads=, a session takes one thread per physical core in the process's
    affinity mask (as onnxruntime does), NERVE_THREADS overrides it, and a bad value is an
    InputError."""
    conv, feeds = _conv_model(tmp_path)
    monkeypatch.delenv("NERVE_THREADS", raising=False)
    mask = sorted(os.sched_getaffinity(0))
    assert nerve.default_threads() == nerve.session.physical_cores(mask) <= len(mask)
    assert nerve.Session(conv).threads == nerve.default_threads() == nerve.info()["cpu"]["threads"]
    monkeypatch.setenv("NERVE_THREADS", "3")
    assert nerve.Session(conv).threads == 3
    np.testing.assert_array_equal(nerve.Session(conv).run(feeds)["y"], nerve.Session(conv, threads=1).run(feeds)["y"])
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("NERVE_THREADS", bad)
        with pytest.raises(nerve.InputError, match="NERVE_THREADS"):
            nerve.Session(conv)


@pytest.mark.parametrize("kernel,stride,size,channels", [
    (3, 1, (1, 24, 37, 41), 20),   # direct path, output rows split across threads
    (3, 2, (1, 16, 45, 38), 33),   # stride phases
    (1, 1, (1, 40, 29, 31), 24),   # pointwise: 64-column panels split
    (1, 1, (1, 24, 29, 31), 64),   # pointwise with more outputs than inputs: channels split
    (5, 3, (1, 8, 1, 700), 12),    # 1-D shaped (one output row): panels split
    (3, 1, (1, 32, 10, 10), 48),   # few positions: channels split at 2 threads, rows at 3
    (3, 1, (1, 48, 30, 33), "dw"), # depthwise: channel ranges, each thread its own plane
    (5, 2, (1, 40, 31, 28), "dw"), # depthwise, stride 2 (two-phase plane)
    (3, 1, (1, 70, 12, 12), "dw"), # depthwise, narrow: blocks of 16 channels split
    (3, 2, (1, 96, 14, 15), "dw"), # the same, stride 2
])
def test_conv_paths_split_across_threads_give_identical_bits(tmp_path, rng, kernel, stride, size, channels):
    """Convs big enough to be shared out (more than 64K MACs; most have fewer than 128
    channels, which one thread did alone before) give the same bits at 1, 2 and 3 threads,
    and match onnxruntime."""
    c = size[1]
    group = c if channels == "dw" else 1
    channels = c if channels == "dw" else channels
    kh = 1 if size[2] == 1 else kernel
    w = (rng.standard_normal((channels, c // group, kh, kernel)) / np.sqrt(c // group * kh * kernel)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    pads = [kh // 2, kernel // 2] * 2
    g = h.make_graph([h.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kh, kernel], group=group,
                                  strides=[1 if kh == 1 else stride, stride], pads=pads),
                      h.make_node("Relu", ["c"], ["y"])], "conv",
                     [h.make_tensor_value_info("x", T.FLOAT, list(size))],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(w, "w"), nh.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "conv.onnx"
    onnx.save(m, path)
    feeds = {"x": rng.standard_normal(size).astype(np.float32)}
    outs = [nerve.Session(path, threads=t, cache=False).run(feeds)["y"] for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    np.testing.assert_allclose(outs[0], ref_run(path, feeds)["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 64, 80, 80), (1, 64, 1, 1)),   # per-channel: outer rows shared out
    ((300001,), (300001,)),             # one row: the innermost axis shared out
    ((3, 1, 70000), (1, 5, 1)),         # broadcast both ways, a few outer rows
])
def test_elementwise_ops_split_across_threads_give_identical_bits(tmp_path, rng, a_shape, b_shape):
    """Big binary and unary ops are shared out across threads in element ranges: the same
    bits at 1, 2 and 3 threads, equal to numpy's."""
    g = h.make_graph([h.make_node("Mul", ["a", "b"], ["m"]), h.make_node("Sigmoid", ["m"], ["s"]),
                      h.make_node("Sub", ["s", "b"], ["y"])], "ew",
                     [h.make_tensor_value_info("a", T.FLOAT, list(a_shape)),
                      h.make_tensor_value_info("b", T.FLOAT, list(b_shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "ew.onnx"
    onnx.save(m, path)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    outs = [nerve.Session(path, threads=t, cache=False).run(feeds)["y"] for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    prod = feeds["a"].astype(np.float64) * feeds["b"]
    want = 1.0 / (1.0 + np.exp(-prod)) - feeds["b"]
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("node", [
    h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]),
    h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    h.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"),
    h.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest"),
])
def test_pool_and_resize_split_across_threads_give_identical_bits(tmp_path, rng, node):
    """Pooling (by plane) and resize (each pass by its outer rows) are shared out across
    threads: the same bits at 1, 2 and 3 threads, and onnxruntime's values."""
    g = h.make_graph([node], "op", [h.make_tensor_value_info("x", T.FLOAT, [1, 24, 37, 45])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")] if node.op_type == "Resize" else [])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "op.onnx"
    onnx.save(m, path)
    feeds = {"x": rng.standard_normal((1, 24, 37, 45)).astype(np.float32)}
    outs = [nerve.Session(path, threads=t, cache=False).run(feeds)["y"] for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    np.testing.assert_allclose(outs[0], ref_run(path, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_sessions_share_identical_weights(mlp, rng):
    """A second session of one plan loads no weights (the process-wide store shares them by
    SHA-256), keeps running after the first is freed, and gives the same results."""
    plan = nerve.compile(mlp, dims={"n": 6})
    first = nerve.Session(plan)
    second = nerve.Session(plan)
    w1, w2 = first.memory_report()["pools"]["weights"], second.memory_report()["pools"]["weights"]
    assert w2["allocated"] == w1["allocated"] > 0
    assert w2["loaded"] == 0 and w2["shared"] == w2["allocated"]
    x = rng.standard_normal((5, 13)).astype(np.float32)
    want = first.run({"x": x})
    del first
    import gc
    gc.collect()
    got = second.run({"x": x})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    # a plan compiled differently but holding the same w1/w2 bytes shares them too
    other = nerve.Session(nerve.compile(mlp, dims={"n": 3}))
    assert other.memory_report()["pools"]["weights"]["loaded"] == 0


@pytest.mark.parametrize("scaled", [False, True])
def test_transposed_operand_folds_into_matmul(tmp_path, rng, scaled):
    """Attention's q·Kᵀ (optionally with a scalar scale on Kᵀ) runs as one matmul reading K
    transposed: no transpose op is left, and the result matches onnxruntime."""
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]
    b = "kt"
    if scaled:
        nodes.append(h.make_node("Mul", ["kt", "c"], ["kts"]))
        b = "kts"
    nodes.append(h.make_node("MatMul", ["q", b], ["s"]))
    inits = [nh.from_array(np.array([0.37], np.float32), "c")] if scaled else []
    g = h.make_graph(nodes, "qk", [h.make_tensor_value_info("q", T.FLOAT, [1, 3, "m", 13]),
                                   h.make_tensor_value_info("k", T.FLOAT, [1, 3, "t", 13])],
                     [h.make_tensor_value_info("s", T.FLOAT, [1, 3, "m", "t"])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "qk.onnx"
    onnx.save(m, p)
    s = nerve.Session(p, dims={"m": 5, "t": 40})
    types = [op["type"] for op in s.ops()]
    assert "transpose" not in types and types.count("matmul") == 1
    for mm, t in ((1, 1), (5, 37), (2, 40)):
        feeds = {"q": rng.standard_normal((1, 3, mm, 13)).astype(np.float32),
                 "k": rng.standard_normal((1, 3, t, 13)).astype(np.float32)}
        np.testing.assert_allclose(s.run(feeds)["s"], ref_run(p, feeds)["s"], rtol=1e-5, atol=1e-5)


def test_transposed_unbatched_operand_folds_into_matmul(tmp_path, rng):
    """The stacked-rows path: a 2-D B read transposed under a batched A."""
    g = h.make_graph([h.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), h.make_node("MatMul", ["a", "wt"], ["y"])],
                     "awt", [h.make_tensor_value_info("a", T.FLOAT, [2, "m", 13]),
                             h.make_tensor_value_info("w", T.FLOAT, ["n", 13])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, "m", "n"])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "awt.onnx"
    onnx.save(m, p)
    s = nerve.Session(p, dims={"m": 9, "n": 31})
    assert [op["type"] for op in s.ops()] == ["matmul"]
    feeds = {"a": rng.standard_normal((2, 9, 13)).astype(np.float32),
             "w": rng.standard_normal((31, 13)).astype(np.float32)}
    np.testing.assert_allclose(s.run(feeds)["y"], ref_run(p, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_plan_cache_key_covers_the_quantizer(tmp_path):
    """A cached plan is reused only by the compiler that made it: the key's fingerprint covers
    the compiler's sources and the quantizer's (quant.py makes a quantized plan's weights), so
    editing either gives a new key — a copy of the package edited here, fingerprinted in a
    fresh interpreter."""
    import os
    import shutil
    import subprocess

    pkg = Path(nerve.__file__).parent
    copy = tmp_path / "nerve"
    shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.setdefault("NERVE_LIBRARY", str(nerve._native.library_path))
    env.setdefault("NERVE_HEADER", str(nerve._native.header_path))

    def fingerprint() -> str:
        code = "import nerve.session as s; print(s._compiler_fingerprint().hex())"
        return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    first = fingerprint()
    assert first == fingerprint()
    with open(copy / "quant.py", "a") as f:
        f.write("\n# an edit of the quantizer\n")
    second = fingerprint()
    assert second != first
    with open(copy / "compiler" / "passes.py", "a") as f:
        f.write("\n# an edit of a pass\n")
    assert fingerprint() not in (first, second)


def test_anonymous_dims_are_one_symbol_each(tmp_path, rng):
    """Paddle2ONNX writes "?" on every unknown dimension (and -1 on the batch): such a dimension
    is its own symbol <input>_dim<k>, never tied to another "?" of a different size; a real
    name stays shared. (rapidocr's PP-OCR classifier is [-1, 3, "?", "?"], at 48 x 192.)"""
    w = rng.standard_normal((5, 3)).astype(np.float32)
    g = h.make_graph([h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                      h.make_node("MatMul", ["t", "w"], ["m"]), h.make_node("Add", ["m", "z"], ["y"])], "anon",
                     [h.make_tensor_value_info("x", T.FLOAT, [-1, 5, "?"]),
                      h.make_tensor_value_info("z", T.FLOAT, ["?", "n"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "anon.onnx"
    onnx.save(m, p)
    from nerve.modeltools import input_specs

    assert [s["shape"] for s in input_specs(str(p))] == [["x_dim0", 5, "x_dim2"], ["z_dim0", "n"]]
    s = nerve.Session(p, dims={"x_dim0": 2, "x_dim2": 7, "z_dim0": 7, "n": 3})
    x = rng.standard_normal((2, 5, 7)).astype(np.float32)
    z = rng.standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(s.run({"x": x, "z": z})["y"], ref_run(p, {"x": x, "z": z})["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(nerve.UnboundDimsError, match="x_dim2"):
        nerve.compile(p, dims={"x_dim0": 2, "z_dim0": 7, "n": 3})
    # without dims= the session binds each anonymous dim from its own input's feed
    lazy = nerve.Session(p, cache=False)
    np.testing.assert_array_equal(lazy.run({"x": x, "z": z})["y"], s.run({"x": x, "z": z})["y"])
    assert lazy.inputs[0]["bounds"] == {"x_dim0": 2, "x_dim2": 7}


@pytest.mark.parametrize("threads", [1, 2])
def test_plan_runs_flush_subnormals_and_restore_the_callers_mode(tmp_path, threads):
    """A sigmoid of x < -87 is subnormal in IEEE arithmetic, and subnormal operands cost Intel
    cores ~100 cycles each (YOLOv8's convs after such SiLUs ran up to 30x slower): plan runs
    flush them to zero (native/src/plan/plan_ops.h). The caller's floating-point mode comes
    back after the run, so the ops-level API still gives the IEEE value."""
    g = h.make_graph([h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Mul", ["x", "s"], ["y"])], "silu",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", T.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "silu.onnx"
    onnx.save(m, p)
    x = np.array([-100.0, -90.0, 2.0, 1e-39], np.float32)  # the last one subnormal itself
    ieee = nerve.ops.sigmoid(x[:2])
    assert 0 < ieee[0] < np.finfo(np.float32).tiny and 0 < ieee[1] < np.finfo(np.float32).tiny
    y = nerve.Session(p, threads=threads).run({"x": x})["y"]
    assert y[0] == 0 and y[1] == 0 and y[3] == 0
    np.testing.assert_allclose(y[2], 2.0 / (1.0 + np.exp(-2.0)), rtol=1e-6)
    np.testing.assert_array_equal(nerve.ops.sigmoid(x[:2]), ieee)  # the caller's mode is back


def _sysfs_siblings(root, siblings):
    for cpu, text in siblings.items():
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(text + "\n")
    return root


def test_physical_cores_count_hardware_threads_of_a_core_once(tmp_path):
    """Read from sysfs trees written here: an x86 machine with four cores of two hardware
    threads (Linux numbers the siblings of 0-3 as 4-7), and an arm64 board with 12 cores in
    three clusters and no hardware threads (its cores numbered per cluster elsewhere in sysfs)."""
    cores = nerve.session.physical_cores
    smt = _sysfs_siblings(tmp_path / "x86", {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)})
    assert cores(range(8), smt) == 4
    assert cores([0, 4], smt) == 1  # a mask of one core's two hardware threads
    assert cores([0, 1, 2], smt) == 3
    assert cores([0, 9], smt) == 2  # cpu9 has no topology here: every CPU counts
    orin = _sysfs_siblings(tmp_path / "arm64", {cpu: str(cpu) for cpu in range(12)})
    assert cores(range(12), orin) == 12
