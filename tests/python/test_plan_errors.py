"""Bad models, bad plans, bad external data and bad feeds: each gives a typed nerve error
(ModelError for the model or plan, InputError for the feeds) and never a crash. Also the
state binding of a session (carried outputs, reset_state)."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import external_data_helper
from onnx import helper as h
from onnx import numpy_helper as nh

import nerve

F32, I64 = np.float32, np.int64
HEADER = 96  # NRV_PLAN_HEADER_BYTES (native/src/plan/plan_internal.h)


def make(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, dt, list(s)) for n, dt, s in inputs],
                     [h.make_tensor_value_info(n, dt, None) for n, dt in outputs], list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)] + [h.make_opsetid(d, v) for d, v in extra_opsets])
    m.ir_version = 8
    return m


def save(m, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, path)
    return path


def session(path, **kw):
    return nerve.Session(path, cache=False, **kw)


@pytest.fixture
def mlp_model(rng):
    """x [n, 16] -> relu(x @ w1 + b1) @ w2 -> y [n, 8]."""
    w1, b1, w2 = (rng.standard_normal(s).astype(F32) for s in ((16, 32), (32,), (32, 8)))
    return make([h.make_node("MatMul", ["x", "w1"], ["m"]), h.make_node("Add", ["m", "b1"], ["a"]),
                 h.make_node("Relu", ["a"], ["r"]), h.make_node("MatMul", ["r", "w2"], ["y"])],
                [("x", T.FLOAT, ("n", 16))], [("y", T.FLOAT)],
                [nh.from_array(w1, "w1"), nh.from_array(b1, "b1"), nh.from_array(w2, "w2")])


def reference(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


# ------------------------------------------------------------------------------- unsupported ops

def test_custom_domain_op_names_node_and_type(tmp_path):
    m = make([h.make_node("Relu", ["x"], ["r"], name="first"),
              h.make_node("FancyOp", ["r"], ["y"], name="my_custom_node", domain="com.example")],
             [("x", T.FLOAT, (2, 3))], [("y", T.FLOAT)], extra_opsets=[("com.example", 1)])
    with pytest.raises(nerve.ModelError) as info:
        session(save(m, tmp_path / "m.onnx"))
    msg = str(info.value)
    assert "my_custom_node" in msg and "FancyOp" in msg and "com.example" in msg, msg


def test_unknown_op_type_names_node_and_type(tmp_path):
    m = make([h.make_node("NotARealOnnxOp", ["x"], ["y"], name="mystery")], [("x", T.FLOAT, (2, 3))],
             [("y", T.FLOAT)])
    with pytest.raises(nerve.ModelError, match=r"mystery.*NotARealOnnxOp.*not supported"):
        session(save(m, tmp_path / "m.onnx"))


def test_unnamed_unsupported_node_gets_a_positional_name(tmp_path):
    m = make([h.make_node("Relu", ["x"], ["r"]), h.make_node("ImageDecoder", ["r"], ["y"])], [("x", T.FLOAT, (4, 4))],
             [("y", T.FLOAT)])
    with pytest.raises(nerve.ModelError, match=r"ImageDecoder_1.*ImageDecoder"):
        session(save(m, tmp_path / "m.onnx"))


def test_unsupported_attribute_value_is_a_model_error(tmp_path):
    m = make([h.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", name="resizer",
                          coordinate_transformation_mode="tf_crop_and_resize")],
             [("x", T.FLOAT, (1, 1, 4, 4))], [("y", T.FLOAT)],
             [nh.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "s")], opset=18)
    with pytest.raises(nerve.ModelError, match=r"resizer.*tf_crop_and_resize"):
        session(save(m, tmp_path / "m.onnx"))


def test_data_dependent_shape_is_a_model_error(tmp_path):
    m = make([h.make_node("Reshape", ["x", "s"], ["y"], name="reshape_by_data")],
             [("x", T.FLOAT, (2, 6)), ("s", T.INT64, (2,))], [("y", T.FLOAT)])
    with pytest.raises(nerve.ModelError, match=r"reshape_by_data.*depends on the data"):
        session(save(m, tmp_path / "m.onnx"))


def test_if_branches_that_disagree_are_a_model_error(tmp_path):
    then_g = h.make_graph([h.make_node("Identity", ["x"], ["a"])], "then", [],
                          [h.make_tensor_value_info("a", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("ReduceSum", ["x"], ["b"], keepdims=0)], "else", [],
                          [h.make_tensor_value_info("b", T.FLOAT, None)])  # rank 2 against 0 (sizes may differ)
    m = make([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branchy")],
             [("x", T.FLOAT, (2, 3)), ("c", T.BOOL, ())], [("y", T.FLOAT)])
    with pytest.raises(nerve.ModelError, match=r"branchy.*branches.*agree on dtype and rank"):
        session(save(m, tmp_path / "m.onnx"))


def test_if_choosing_a_sequence_at_run_time_is_a_model_error(tmp_path):
    """A sequence exists at import only; an If whose condition the data decides cannot pick
    one (ONNX's test_if_seq: this was an AttributeError from inside the compiler)."""
    then_g = h.make_graph([h.make_node("SequenceConstruct", ["x"], ["s"])], "then", [],
                          [h.make_tensor_sequence_value_info("s", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["s2"])], "else", [],
                          [h.make_tensor_sequence_value_info("s2", T.FLOAT, None)])
    m = make([h.make_node("If", ["c"], ["seq"], then_branch=then_g, else_branch=else_g, name="pick_seq"),
              h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
             [("x", T.FLOAT, (2, 3)), ("c", T.BOOL, ())], [("y", T.FLOAT)])
    with pytest.raises(nerve.ModelError, match=r"pick_seq.*then branch's output 0 is a sequence"):
        session(save(m, tmp_path / "m.onnx"))


def test_a_tensor_of_rank_above_eight_is_a_model_error(tmp_path):
    """The runtime holds rank <= 8 (NRV_MAX_RANK): a model that needs more is refused at
    compile time, naming the tensor (before, the loader refused the plan: "bad dtype 0, rank 10")."""
    m = make([h.make_node("Unsqueeze", ["x", "a"], ["deep"]), h.make_node("Relu", ["deep"], ["y"])],
             [("x", T.FLOAT, (2,) * 8)], [("y", T.FLOAT)], [nh.from_array(np.array([0], I64), "a")])
    with pytest.raises(nerve.ModelError, match=r"tensor 'deep'.*rank 9; the runtime holds at most 8"):
        session(save(m, tmp_path / "m.onnx"))


@pytest.mark.parametrize("elem", [T.STRING, T.COMPLEX64, T.BFLOAT16, T.FLOAT8E4M3FN, T.INT4])
def test_unsupported_input_dtype_is_a_model_error(tmp_path, elem):
    """Whatever the onnx wheel maps the type to (older ones give bfloat16 as float32 and the
    float8 types as uint8): refused, naming the input and the type (strings: where they reach
    the runtime)."""
    m = make([h.make_node("Identity", ["x"], ["y"])], [("x", elem, (2,))], [("y", elem)])
    want = "dtype object" if elem == T.STRING else f"input 'x': ONNX element type {T.DataType.Name(elem)}"
    with pytest.raises(nerve.ModelError, match=want):
        session(save(m, tmp_path / "m.onnx"))


def test_bfloat16_initializer_is_refused_where_a_node_reads_it(tmp_path):
    """A bfloat16 weight read by a node: ModelError naming the node, the initializer and the
    type. One no node reads is no error: the model runs."""
    w = h.make_tensor("w16", T.BFLOAT16, (2,), vals=[1.0, 2.0])
    used = make([h.make_node("Cast", ["w16"], ["wf"], to=T.FLOAT), h.make_node("Add", ["x", "wf"], ["y"])],
                [("x", T.FLOAT, (2,))], [("y", T.FLOAT)])
    used.graph.initializer.append(w)
    with pytest.raises(nerve.ModelError, match=r"Cast.*initializer 'w16'.*BFLOAT16 is not supported"):
        session(save(used, tmp_path / "used.onnx"))
    unused = make([h.make_node("Neg", ["x"], ["y"])], [("x", T.FLOAT, (2,))], [("y", T.FLOAT)])
    unused.graph.initializer.append(w)
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(session(save(unused, tmp_path / "unused.onnx")).run({"x": x})["y"], -x)


def test_sequence_input_is_a_model_error(tmp_path):
    seq = h.make_tensor_sequence_value_info("xs", T.FLOAT, None)
    g = h.make_graph([h.make_node("SequenceAt", ["xs", "i"], ["y"])], "g", [seq],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(np.array(0, I64), "i")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(nerve.ModelError, match="xs"):
        session(save(m, tmp_path / "m.onnx"))


@pytest.mark.parametrize("op, inputs, why", [
    ("StringNormalizer", ["boxes"], "string ops are not supported"),
    ("Bernoulli", ["boxes"], "sampling ops are not supported"),
    ("Optional", ["boxes"], "optional values and SequenceMap are not supported"),
    ("ImageDecoder", ["boxes"], "operator not supported by nerve"),
])
def test_unsupported_ops_say_why(tmp_path, op, inputs, why):
    g = h.make_graph([h.make_node(op, inputs, ["y"], name="the_node")], "g",
                     [h.make_tensor_value_info("boxes", T.FLOAT, [1, 4, 4]),
                      h.make_tensor_value_info("scores", T.FLOAT, [1, 1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with pytest.raises(nerve.ModelError, match=f"the_node.*{op}.*{why}"):
        session(save(m, tmp_path / "m.onnx"))


def test_symbolic_dims_without_bounds_is_a_model_error(tmp_path, mlp_model):
    with pytest.raises(nerve.UnboundDimsError, match=r"'n'"):
        nerve.compile(save(mlp_model, tmp_path / "m.onnx"), cache=False)
    with pytest.raises(nerve.ModelError, match="must be in \\[0, 2\\*\\*62\\)"):
        session(tmp_path / "m.onnx", dims={"n": -1})


# ------------------------------------------------------------------------------- broken .onnx files

@pytest.mark.parametrize("frac", [0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_onnx_is_a_model_error(tmp_path, mlp_model, frac):
    data = mlp_model.SerializeToString()
    n = int(len(data) * frac)
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[:n])
    with pytest.raises(nerve.ModelError):
        session(p, dims={"n": 4})


def test_truncated_onnx_at_every_length_of_a_small_model(tmp_path):
    # a tiny model cut at every byte: a typed error each time (or, where the cut leaves a
    # complete but smaller protobuf, a model that still compiles) -- never a crash
    m = make([h.make_node("Add", ["x", "c"], ["y"])], [("x", T.FLOAT, (3,))], [("y", T.FLOAT)],
             [nh.from_array(np.arange(3, dtype=F32), "c")])
    data = m.SerializeToString()
    p = tmp_path / "cut.onnx"
    for n in range(len(data)):
        p.write_bytes(data[:n])
        try:
            session(p)
        except nerve.ModelError:
            pass


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_garbage_is_a_model_error(tmp_path, seed):
    p = tmp_path / "garbage.onnx"
    p.write_bytes(np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(nerve.ModelError):
        session(p)


def test_missing_and_empty_files_are_model_errors(tmp_path):
    with pytest.raises(nerve.ModelError):
        session(tmp_path / "nope.onnx")
    with pytest.raises(nerve.ModelError):
        session(tmp_path / "nope.nrv")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(nerve.ModelError):
        session(tmp_path / "empty.onnx")
    (tmp_path / "text.nrv").write_text("hello, I am not a plan\n" * 10)
    with pytest.raises(nerve.ModelError, match="magic"):
        session(tmp_path / "text.nrv")


# ------------------------------------------------------------------------------- broken .nrv plans

@pytest.fixture
def plan_file(tmp_path, mlp_model):
    p = save(mlp_model, tmp_path / "m.onnx")
    out = nerve.compile(p, dims={"n": 4}, cache=False).save(tmp_path / "m.nrv")
    return out


def header(data: bytes) -> dict:
    version, header_bytes, file_bytes, mo, ml, wo, wl = struct.unpack_from("<IIQQQQQ", data, 8)
    return dict(version=version, header_bytes=header_bytes, file_bytes=file_bytes, meta_offset=mo, meta_bytes=ml,
                weights_offset=wo, weights_bytes=wl)


def rehash(data: bytearray) -> bytearray:
    """Recomputes the header's SHA-256 (so that corruption reaches the parser, not the hash check).
    It covers the metadata up to the weights (each weight has its own SHA-256 in the metadata)."""
    end = min(max(header(data)["weights_offset"], HEADER), len(data))
    data[56:88] = hashlib.sha256(bytes(data[HEADER:end])).digest()
    return data


def test_good_plan_loads_and_runs(plan_file, mlp_model, rng):
    s = session(plan_file)
    x = rng.standard_normal((3, 16)).astype(F32)
    np.testing.assert_allclose(s.run({"x": x})["y"], reference(mlp_model, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    hd = header(plan_file.read_bytes())
    assert hd["header_bytes"] == HEADER and hd["file_bytes"] == plan_file.stat().st_size
    assert hd["weights_bytes"] >= 4 * (16 * 32 + 32 + 32 * 8)


@pytest.mark.parametrize("where", ["empty", "7", "header-1", "header", "meta", "weights", "last-1"])
def test_truncated_plan_is_a_model_error(plan_file, tmp_path, where):
    data = plan_file.read_bytes()
    hd = header(data)
    n = {"empty": 0, "7": 7, "header-1": HEADER - 1, "header": HEADER,
         "meta": hd["meta_offset"] + hd["meta_bytes"] // 2, "weights": hd["weights_offset"] + hd["weights_bytes"] // 2,
         "last-1": len(data) - 1}[where]
    p = tmp_path / "cut.nrv"
    p.write_bytes(data[:n])
    with pytest.raises(nerve.ModelError, match="truncated|shorter|magic"):
        session(p)


@pytest.mark.parametrize("section", ["meta_start", "meta_middle", "meta_end", "weights_start", "weights_end"])
def test_flipped_byte_is_a_sha_mismatch(plan_file, tmp_path, section):
    data = bytearray(plan_file.read_bytes())
    hd = header(data)
    at = {"meta_start": hd["meta_offset"], "meta_middle": hd["meta_offset"] + hd["meta_bytes"] // 2,
          "meta_end": hd["meta_offset"] + hd["meta_bytes"] - 1, "weights_start": hd["weights_offset"],
          "weights_end": hd["weights_offset"] + hd["weights_bytes"] - 1}[section]
    data[at] ^= 0x01
    p = tmp_path / "flip.nrv"
    p.write_bytes(bytes(data))
    with pytest.raises(nerve.ModelError, match="SHA-256 mismatch"):
        session(p)


def test_flipped_hash_byte_is_a_sha_mismatch(plan_file, tmp_path):
    data = bytearray(plan_file.read_bytes())
    data[70] ^= 0x80
    (tmp_path / "h.nrv").write_bytes(bytes(data))
    with pytest.raises(nerve.ModelError, match="SHA-256 mismatch"):
        session(tmp_path / "h.nrv")


@pytest.mark.parametrize("magic", [b"NRVPLAM\0", b"\0" * 8, b"PK\x03\x04\0\0\0\0"])
def test_bad_magic_is_a_model_error(plan_file, tmp_path, magic):
    data = bytearray(plan_file.read_bytes())
    data[0:8] = magic
    (tmp_path / "x.nrv").write_bytes(bytes(data))
    with pytest.raises(nerve.ModelError, match="magic"):
        session(tmp_path / "x.nrv")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 5, 0xFFFFFFFF])
def test_wrong_version_is_a_model_error(plan_file, tmp_path, version):
    data = bytearray(plan_file.read_bytes())
    struct.pack_into("<I", data, 8, version)
    (tmp_path / "v.nrv").write_bytes(bytes(data))
    with pytest.raises(nerve.ModelError, match="version"):
        session(tmp_path / "v.nrv")


@pytest.mark.parametrize("field, value", [("header_bytes", 64), ("file_bytes", 1 << 40), ("meta_offset", 1 << 50),
                                          ("meta_bytes", 1 << 63), ("weights_offset", 97),
                                          ("weights_bytes", (1 << 64) - 1)])
def test_bad_header_fields_are_model_errors(plan_file, tmp_path, field, value):
    data = bytearray(plan_file.read_bytes())
    offset = {"header_bytes": 12, "file_bytes": 16, "meta_offset": 24, "meta_bytes": 32, "weights_offset": 40,
              "weights_bytes": 48}[field]
    struct.pack_into("<I" if field == "header_bytes" else "<Q", data, offset, value)
    (tmp_path / "f.nrv").write_bytes(bytes(data))
    with pytest.raises(nerve.ModelError):
        session(tmp_path / "f.nrv")


def test_plan_object_with_corrupted_bytes(plan_file):
    data = bytearray(plan_file.read_bytes())
    data[-1] ^= 0xFF
    with pytest.raises(nerve.ModelError, match="SHA-256"):
        nerve.Session(nerve.Plan(bytes(data)))


_FUZZ = textwrap.dedent("""
    import hashlib, struct, sys
    import numpy as np
    import nerve
    data = open(sys.argv[1], "rb").read()
    start, end, count, seed = (int(a) for a in sys.argv[2:6])
    rng = np.random.default_rng(seed)
    outcomes = {}
    for k in range(count):
        d = bytearray(data)
        kind = k % 3
        if kind == 0:      # one byte set to a random value
            d[int(rng.integers(start, end))] = int(rng.integers(0, 256))
        elif kind == 1:    # a 4-byte count / index made huge or negative
            at = int(rng.integers(start, max(start + 1, end - 4)))
            d[at:at + 4] = int(rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 65536])).to_bytes(4, "little")
        else:              # a run of bytes zeroed
            at = int(rng.integers(start, end))
            d[at:at + 8] = bytes(len(d[at:at + 8]))
        wo = struct.unpack_from("<Q", d, 40)[0]  # the hash covers the metadata up to the weights
        d[56:88] = hashlib.sha256(bytes(d[96:wo])).digest()
        print("case", k, flush=True)
        try:
            s = nerve.Session(nerve.Plan(bytes(d)))
            try:
                feeds = {}
                for i in s.inputs:
                    shape = [d_ if isinstance(d_, int) else min(i["bounds"].get(d_, 2), 64) for d_ in i["shape"]]
                    if np.prod(shape, dtype=float) > 1e6 or min(shape, default=0) < 0:
                        raise nerve.InputError("(fuzz: the corrupted input shape is too large to feed)")
                    feeds[i["name"]] = np.zeros(shape, i["dtype"])
                s.run(feeds)
                outcomes["ran"] = outcomes.get("ran", 0) + 1
            except nerve.NerveError as e:
                outcomes["run:" + type(e).__name__] = outcomes.get("run:" + type(e).__name__, 0) + 1
        except nerve.NerveError as e:
            outcomes["load:" + type(e).__name__] = outcomes.get("load:" + type(e).__name__, 0) + 1
    print("OUTCOMES", outcomes)
""")


def fuzz_metadata(plan_path: Path, tmp_path: Path, cases: int, seed: int) -> None:
    """Corrupts plan_path's metadata `cases` times (a valid hash each time), loads and runs
    each in a subprocess (a crash fails the test instead of killing the suite): every outcome
    must be a typed error or a run."""
    hd = header(plan_path.read_bytes())
    script = tmp_path / "fuzz.py"
    script.write_text(_FUZZ)
    start, end = hd["meta_offset"], hd["meta_offset"] + hd["meta_bytes"]
    r = subprocess.run([sys.executable, str(script), str(plan_path), str(start), str(end), str(cases), str(seed)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ))
    last = [line for line in r.stdout.splitlines() if line.startswith("case")][-1:] or ["(none)"]
    assert r.returncode == 0, f"the loader crashed (rc {r.returncode}) at {last[0]}:\n{r.stderr[-3000:]}"
    assert "OUTCOMES" in r.stdout


def test_corrupted_metadata_with_a_valid_hash_never_crashes(plan_file, tmp_path):
    """The hash guards against accidents, not against a crafted file: the parser itself must
    refuse metadata that is wrong, with a typed error."""
    fuzz_metadata(plan_file, tmp_path, 2000, 7)


def many_ops_model(rng):
    """A small model touching many runtime op types (for the plan fuzzer)."""
    c = lambda a, n: nh.from_array(np.asarray(a), n)  # noqa: E731
    nodes = [
        h.make_node("Conv", ["x", "cw", "cb"], ["c1"], pads=[1, 1, 1, 1], strides=[1, 2]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Transpose", ["r1"], ["t1"], perm=[0, 2, 3, 1]),
        h.make_node("Slice", ["t1", "s0", "s1", "s2", "s3"], ["sl"]),
        h.make_node("Pad", ["sl", "pads"], ["pd"], mode="reflect"),
        h.make_node("ReduceMean", ["pd", "rax"], ["rm"], keepdims=0),
        h.make_node("Gather", ["rm", "gi"], ["g"], axis=1),
        h.make_node("Split", ["g", "sp"], ["g1", "g2"], axis=-1),
        h.make_node("Concat", ["g2", "g1"], ["cc"], axis=-1),
        h.make_node("Softmax", ["cc"], ["sm"], axis=-1),
        h.make_node("Where", ["mask", "sm", "cc"], ["wh"]),
        h.make_node("Expand", ["wh", "es"], ["ex"]),
        h.make_node("Trilu", ["ex"], ["tr"]),
        h.make_node("ArgMax", ["tr"], ["am"], axis=-1, keepdims=0),
        h.make_node("Cast", ["am"], ["amf"], to=T.FLOAT),
        h.make_node("Reshape", ["amf", "rs"], ["amr"]),
        h.make_node("Gemm", ["amr", "gw"], ["gm"], transB=1),
        h.make_node("LayerNormalization", ["gm", "lg", "lb"], ["y"]),
        h.make_node("MatMul", ["y", "y2w"], ["y2"]),
        h.make_node("MatMul", ["y2", "y2t"], ["y3"]),
    ]
    inits = [c(rng.standard_normal((4, 3, 3, 3)).astype(F32), "cw"), c(rng.standard_normal(4).astype(F32), "cb"),
             c(np.array([1], I64), "s0"), c(np.array([-1], I64), "s1"), c(np.array([1], I64), "s2"),
             c(np.array([1], I64), "s3"), c(np.array([0, 1, 1, 0, 0, 1, 1, 0], I64), "pads"),
             c(np.array([1], I64), "rax"), c(np.array([[0, -1], [2, 1]], I64), "gi"), c(np.array([1, 3], I64), "sp"),
             c(np.array([True, False, True, True]), "mask"), c(np.array([3, 1, 1, 4], I64), "es"),
             c(np.array([3, 4], I64), "rs"),
             c(rng.standard_normal((5, 4)).astype(F32), "gw"), c(np.ones(5, F32), "lg"), c(np.zeros(5, F32), "lb"),
             c(rng.standard_normal((5, 6)).astype(F32), "y2w"), c(rng.standard_normal((6, 2)).astype(F32), "y2t")]
    return make(nodes, [("x", T.FLOAT, (1, 3, "h", 8))], [("y3", T.FLOAT)], inits, opset=18)


def test_many_ops_plan_runs_and_fuzzes_without_crashing(tmp_path, rng):
    m = many_ops_model(rng)
    p = save(m, tmp_path / "many.onnx")
    s = session(p, dims={"h": 6})
    ops = {o["type"] for o in s.ops()}
    assert len(ops) >= 12, ops
    x = rng.standard_normal((1, 3, 5, 8)).astype(F32)
    np.testing.assert_allclose(s.run({"x": x})["y3"], reference(m, {"x": x})["y3"], rtol=1e-4, atol=1e-4)
    fuzz_metadata(nerve.compile(p, dims={"h": 6}, cache=False).save(tmp_path / "many.nrv"), tmp_path, 3000, 11)


def test_data_dependent_plan_fuzzes_without_crashing(tmp_path, rng):
    """A plan whose sizes the data decides (NonZero, NonMaxSuppression, Unique, a Range over
    run-time bounds, the set_dim ops after them; random values), its metadata corrupted with a valid hash, loaded and run: typed errors
    only (in a subprocess, and under the sanitizers in make test-asan)."""
    c = lambda a, n: nh.from_array(np.asarray(a), n)  # noqa: E731
    nodes = [h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Transpose", ["nz"], ["nzt"]),
             h.make_node("GatherND", ["x", "nzt"], ["v"]), h.make_node("Unique", ["v"], ["u", "ui", "uv", "uc"]),
             h.make_node("NonMaxSuppression", ["boxes", "scores", "mx", "iou"], ["sel"]),
             h.make_node("Cast", ["x"], ["xi"], to=T.INT64), h.make_node("ReduceMax", ["xi"], ["top"], keepdims=0),
             h.make_node("Range", ["zero", "top", "one"], ["rg"], name="rg"),
             h.make_node("RandomNormalLike", ["rg"], ["noise"], dtype=T.FLOAT)]
    m = make(nodes, [("x", T.FLOAT, (4, 5)), ("boxes", T.FLOAT, (1, 6, 4)), ("scores", T.FLOAT, (1, 2, 6))],
             [("u", T.FLOAT), ("uc", T.INT64), ("sel", T.INT64), ("rg", T.INT64), ("noise", T.FLOAT)],
             [c(np.array(3, I64), "mx"), c(np.array(0.5, F32), "iou"), c(np.array(0, I64), "zero"),
              c(np.array(1, I64), "one")])
    p = save(m, tmp_path / "dd.onnx")
    plan = nerve.compile(p, cache=False, dims={"rg.length": 8}).save(tmp_path / "dd.nrv")
    x = rng.integers(0, 3, (4, 5)).astype(F32)
    feeds = {"x": x, "boxes": rng.random((1, 6, 4)).astype(F32), "scores": rng.random((1, 2, 6)).astype(F32)}
    np.testing.assert_array_equal(session(plan).run(feeds)["u"], np.unique(x[x != 0]))
    fuzz_metadata(plan, tmp_path, 2000, 13)


def test_metadata_cut_short_with_consistent_header_never_crashes(plan_file, tmp_path):
    """Sections cut at every 4th byte of the metadata, the header adjusted and re-hashed."""
    data = plan_file.read_bytes()
    hd = header(data)
    for cut in range(0, hd["meta_bytes"], 4):
        d = bytearray(data)
        struct.pack_into("<Q", d, 32, cut)  # meta_bytes
        rehash(d)
        try:
            nerve.Session(nerve.Plan(bytes(d)))
        except nerve.ModelError:
            pass


# ------------------------------------------------------------------------------- external data

@pytest.fixture
def ext_model(rng):
    w = rng.standard_normal((16, 8)).astype(F32)
    m = make([h.make_node("MatMul", ["x", "w"], ["y"])], [("x", T.FLOAT, (3, 16))], [("y", T.FLOAT)],
             [nh.from_array(w, "w")])
    return m


def save_external(m, model_path: Path, location: str, data_path: Path = None):
    """Saves m with its initializer 'w' in raw external data; data_path (default: model folder /
    location) is where the bytes are really written."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    t = m.graph.initializer[0]
    raw = nh.to_array(t).tobytes()
    data_path = data_path or (model_path.parent / location)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    data_path.write_bytes(raw)
    t.ClearField("float_data")
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model_path.write_bytes(m.SerializeToString())
    return model_path


def test_external_data_next_to_the_model_loads(tmp_path, ext_model, rng):
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "w.bin")
    x = rng.standard_normal((3, 16)).astype(F32)
    want = x @ nh.to_array(ext_model.graph.initializer[0])
    np.testing.assert_allclose(session(p).run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)
    # in a sub-folder of the model's folder is fine too
    p = save_external(ext_model, tmp_path / "model2" / "m.onnx", "weights/w.bin")
    np.testing.assert_allclose(session(p).run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_external_data_written_by_onnx_loads(tmp_path, ext_model, rng):
    m = onnx.ModelProto.FromString(ext_model.SerializeToString())
    external_data_helper.convert_model_to_external_data(m, all_tensors_to_one_file=True, location="data.bin",
                                                        size_threshold=0)
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    assert (tmp_path / "data.bin").is_file()
    x = rng.standard_normal((3, 16)).astype(F32)
    np.testing.assert_allclose(session(p).run({"x": x})["y"], x @ nh.to_array(ext_model.graph.initializer[0]),
                               rtol=1e-4, atol=1e-5)


def test_external_data_absolute_location_is_refused(tmp_path, ext_model):
    data = tmp_path / "outside" / "w.bin"
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", str(data), data_path=data)
    with pytest.raises(nerve.ModelError, match="relative"):
        session(p)


def test_external_data_dotdot_is_refused(tmp_path, ext_model):
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "../outside/w.bin",
                      data_path=tmp_path / "outside" / "w.bin")
    with pytest.raises(nerve.ModelError, match="leaves the model folder"):
        session(p)
    p = save_external(ext_model, tmp_path / "model2" / "m.onnx", "sub/../../outside/w.bin",
                      data_path=tmp_path / "outside" / "w.bin")
    with pytest.raises(nerve.ModelError, match="leaves the model folder"):
        session(p)


def test_external_data_through_a_symlink_is_refused(tmp_path, ext_model):
    outside = tmp_path / "outside" / "w.bin"
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "w.bin", data_path=outside)
    os.symlink(outside, tmp_path / "model" / "w.bin")
    with pytest.raises(nerve.ModelError, match="symlink"):
        session(p)
    # a symlinked folder on the way
    p = save_external(ext_model, tmp_path / "model2" / "m.onnx", "sub/w.bin", data_path=outside)
    os.symlink(tmp_path / "outside", tmp_path / "model2" / "sub")
    with pytest.raises(nerve.ModelError, match="symlink"):
        session(p)


def test_external_data_truncated_or_missing_is_refused(tmp_path, ext_model):
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "w.bin")
    data = (tmp_path / "model" / "w.bin").read_bytes()
    (tmp_path / "model" / "w.bin").write_bytes(data[: len(data) - 5])
    with pytest.raises(nerve.ModelError, match="truncated"):
        session(p)
    (tmp_path / "model" / "w.bin").unlink()
    with pytest.raises(nerve.ModelError, match="not found"):
        session(p)


@pytest.mark.parametrize("offset, length", [("-4", "512"), ("0", "-1"), ("100000", "512"), ("0", "1000000"),
                                            ("508", "8"),
                                            ("x", "512"), ("0", "1e3")])
def test_external_data_bad_offset_or_length_is_refused(tmp_path, ext_model, offset, length):
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "w.bin")
    m = onnx.load(p, load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "offset":
            e.value = offset
        if e.key == "length":
            e.value = length
    p.write_bytes(m.SerializeToString())
    with pytest.raises(nerve.ModelError):
        session(p)


def test_external_data_of_the_wrong_size_is_refused(tmp_path, ext_model):
    # the file holds fewer bytes than the tensor's shape needs (length consistent with the file)
    p = save_external(ext_model, tmp_path / "model" / "m.onnx", "w.bin")
    m = onnx.load(p, load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "length":
            e.value = "100"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(nerve.ModelError):
        session(p)


# ------------------------------------------------------------------------------- feeds

@pytest.fixture
def two_input_session(tmp_path):
    m = make([h.make_node("Add", ["a", "b"], ["y"])], [("a", T.FLOAT, ("n", 4)), ("b", T.FLOAT, ("n", 4))],
             [("y", T.FLOAT)])
    return session(save(m, tmp_path / "m.onnx"), dims={"n": 8})


def test_feed_errors_are_input_errors(two_input_session):
    s = two_input_session
    ok = np.zeros((3, 4), F32)
    cases = [
        ({"a": ok, "b": ok, "c": ok}, "unknown input"),
        ({"a": ok}, "'b' was not fed"),
        ({"a": ok, "b": ok.astype(np.float64)}, "must be float32"),
        ({"a": ok, "b": ok.astype(np.int64)}, "must be float32"),
        ({"a": ok, "b": np.zeros((3, 4, 1), F32)}, "rank"),
        ({"a": ok, "b": np.zeros((12,), F32)}, "rank"),
        ({"a": ok, "b": np.zeros((3, 5), F32)}, "expected 4"),
        ({"a": ok, "b": np.zeros((2, 4), F32)}, "dimension 'n'"),
        ({"a": np.zeros((9, 4), F32), "b": np.zeros((9, 4), F32)}, "bound 8"),
        ({"a": ok, "b": np.zeros((3,) * 9, F32)}, "rank"),
    ]
    for feeds, needle in cases:
        with pytest.raises(nerve.InputError, match=needle):
            s.run(feeds)
        # the session stays usable after each refused run
        np.testing.assert_array_equal(s.run({"a": ok + 1, "b": ok + 2})["y"], ok + 3)


def test_input_error_is_a_value_error(two_input_session):
    with pytest.raises(ValueError):
        two_input_session.run({})


def test_non_contiguous_feeds_work(two_input_session, rng):
    a = rng.standard_normal((4, 6)).astype(F32)[:, :4]       # rows with a stride
    b = np.asfortranarray(rng.standard_normal((4, 4)).astype(F32))
    c = rng.standard_normal((4, 4)).astype(F32).T              # a transposed view
    np.testing.assert_array_equal(two_input_session.run({"a": a, "b": b})["y"], a + b)
    np.testing.assert_array_equal(two_input_session.run({"a": c, "b": a})["y"], c + a)
    # a Python list is float64 for numpy: refused like any float64 feed (no silent conversion)
    with pytest.raises(nerve.InputError, match="float32"):
        two_input_session.run({"a": a.tolist(), "b": b})


@pytest.mark.parametrize("bound", [2 ** 62, 2 ** 61 + 1, 2 ** 63 - 1, 2 ** 58, 2 ** 64, 2 ** 100])
def test_bound_that_overflows_the_byte_count_is_refused(tmp_path, mlp_model, bound):
    p = save(mlp_model, tmp_path / "m.onnx")
    with pytest.raises((nerve.ModelError, nerve.InputError)):
        session(p, dims={"n": bound})


@pytest.mark.parametrize("bound", [2 ** 36, 2 ** 55])
def test_bound_too_large_for_memory_is_refused(tmp_path, mlp_model, bound):
    # the byte counts fit in 64 bits, the arena does not fit in memory: refused when the session reserves it
    p = save(mlp_model, tmp_path / "m.onnx")
    try:
        s = session(p, dims={"n": bound})
    except (nerve.ModelError, nerve.InputError, nerve.OutOfMemoryError):
        return
    # a system that overcommits may hand out the (untouched) reservation: then small runs work
    x = np.ones((2, 16), F32)
    np.testing.assert_allclose(s.run({"x": x})["y"], reference(mlp_model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_static_shape_overflow_is_refused(tmp_path):
    # a ConstantOfShape whose static shape has 2**62 elements: no plan can hold it
    m = make([h.make_node("ConstantOfShape", ["s"], ["c"]), h.make_node("Add", ["x", "c"], ["y"])],
             [("x", T.FLOAT, (1,))], [("y", T.FLOAT)], [nh.from_array(np.array([2 ** 31, 2 ** 31], I64), "s")])
    with pytest.raises((nerve.ModelError, nerve.InputError, nerve.OutOfMemoryError)):
        session(save(m, tmp_path / "m.onnx"))


# ------------------------------------------------------------------------------- state

@pytest.fixture
def recurrent(tmp_path):
    """h_out = h_in + x; y = 2 * h_out (returned). h_out feeds h_in of the next run."""
    m = make([h.make_node("Add", ["h_in", "x"], ["h_out"]), h.make_node("Mul", ["h_out", "two"], ["y"])],
             [("h_in", T.FLOAT, (1, 5)), ("x", T.FLOAT, (1, 5))], [("h_out", T.FLOAT), ("y", T.FLOAT)],
             [nh.from_array(np.array(2.0, F32), "two")])
    return save(m, tmp_path / "rec.onnx")


def test_state_is_carried_between_runs(recurrent, rng):
    s = session(recurrent, state={"h_out": "h_in"})
    plain = session(recurrent)
    assert s.output_names == ["h_out", "y"]
    h0 = rng.standard_normal((1, 5)).astype(F32)
    xs = [rng.standard_normal((1, 5)).astype(F32) for _ in range(4)]
    out = s.run({"h_in": h0, "x": xs[0]})
    assert set(out) == {"y"}  # the state output stays in the session
    hh = h0
    ref = plain.run({"h_in": hh, "x": xs[0]})
    np.testing.assert_array_equal(out["y"], ref["y"])
    hh = ref["h_out"]
    for x in xs[1:]:
        out = s.run({"x": x})
        ref = plain.run({"h_in": hh, "x": x})
        np.testing.assert_array_equal(out["y"], ref["y"])
        hh = ref["h_out"]
    # feeding the state input again overrides the carried value
    h1 = rng.standard_normal((1, 5)).astype(F32)
    out = s.run({"h_in": h1, "x": xs[0]})
    np.testing.assert_array_equal(out["y"], 2 * (h1 + xs[0]))


def test_state_must_be_fed_before_the_first_run_and_after_reset(recurrent, rng):
    s = session(recurrent, state={"h_out": "h_in"})
    x = rng.standard_normal((1, 5)).astype(F32)
    with pytest.raises(nerve.NerveError, match="h_in"):
        s.run({"x": x})
    h0 = np.ones((1, 5), F32)
    np.testing.assert_array_equal(s.run({"h_in": h0, "x": x})["y"], 2 * (h0 + x))
    np.testing.assert_array_equal(s.run({"x": x})["y"], 2 * ((h0 + x) + x))
    s.reset_state()
    with pytest.raises(nerve.NerveError, match="h_in"):
        s.run({"x": x})
    np.testing.assert_array_equal(s.run({"h_in": h0, "x": x})["y"], 2 * (h0 + x))


def test_failed_run_does_not_corrupt_the_state(recurrent, rng):
    s = session(recurrent, state={"h_out": "h_in"})
    h0, x = np.ones((1, 5), F32), np.full((1, 5), 0.5, F32)
    s.run({"h_in": h0, "x": x})
    with pytest.raises(nerve.InputError):
        s.run({"x": np.zeros((1, 6), F32)})
    np.testing.assert_array_equal(s.run({"x": x})["y"], 2 * ((h0 + x) + x))


def test_state_binding_errors_are_model_errors(recurrent):
    with pytest.raises(nerve.ModelError, match="not an output"):
        session(recurrent, state={"nope": "h_in"})
    with pytest.raises(nerve.ModelError, match="not an input"):
        session(recurrent, state={"h_out": "nope"})


def test_state_of_mismatched_dtype_is_a_model_error(tmp_path):
    m = make([h.make_node("Cast", ["x"], ["c"], to=T.INT64)], [("x", T.FLOAT, (3,))], [("c", T.INT64)])
    with pytest.raises(nerve.ModelError, match="cannot feed"):
        session(save(m, tmp_path / "m.onnx"), state={"c": "x"})
