"""nerve.compiler.ort_format: ONNX Runtime's .ort flatbuffer files read back into ONNX.

Parity is checked against onnxruntime itself: a model converted to .ort by onnxruntime's own
tool, read by load_ort, must run bit for bit like the original (and like the .ort file), and
the real Moonshine files must too. Graph optimizations are disabled in every session: ORT
re-optimizes an ONNX model at load but not an .ort one, and fused kernels round differently.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nerve.compiler.ort_format import is_ort, load_ort  # noqa: E402
from nerve.errors import ModelError  # noqa: E402

FLOAT, BOOL = TensorProto.FLOAT, TensorProto.BOOL


def _session(model):
    """A deterministic CPU session on a path, or on a ModelProto / serialized bytes."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _run(sess, feeds):
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _assert_same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        if not isinstance(a[name], np.ndarray):  # a sequence of maps (ZipMap)
            assert a[name] == b[name], f"output {name} differs"
            continue
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), f"output {name} differs"


def _to_ort(model, folder: Path, monkeypatch, level="disable", style="Fixed") -> Path:
    """Converts with onnxruntime's tool (the level is only settable through its env var)."""
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "m.onnx")
    monkeypatch.setenv("ORT_CONVERT_ONNX_MODELS_TO_ORT_OPTIMIZATION_LEVEL", level)
    convert_onnx_models_to_ort(folder / "m.onnx", output_dir=folder / "out",
                               optimization_styles=[OptimizationStyle[style]])
    (ort_file,) = (folder / "out").glob("m*.ort")
    # onnxruntime must read its own file back: 1.23 writes a string initializer without its
    # strings and then refuses the file itself (conftest.py: a skip there, naming it)
    _session(ort_file)
    return ort_file


# ---------------------------------------------------------------------------- small models


def _small_model(rng) -> onnx.ModelProto:
    """Every feature the reader must carry: If with subgraphs (nested, reading outer scope
    two levels up), float16/int64/bool/string initializers, Constants (ORT turns them into
    initializers, a sparse one into a sparse initializer), symbolic, unknown and scalar dims, sequence and map types, an omitted
    optional input, and attributes of kinds INT, INTS, FLOAT, FLOATS, STRING, STRINGS, TENSOR
    and GRAPH."""
    init = [
        numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float16), "w16"),
        numpy_helper.from_array(np.array([0, 2, 3], np.int64), "idx"),
        numpy_helper.from_array(rng.random(4) < 0.5, "mask"),
        numpy_helper.from_array(np.array([b"a", b"zz", b"c", b"b"], dtype=object), "words"),
        numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads"),
        numpy_helper.from_array(np.float32(rng.uniform(0.5, 1.0)), "cmax"),
        numpy_helper.from_array(np.array([8, 1], np.int64), "tiles"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b4"),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
    ]
    inner_then = helper.make_graph(
        [helper.make_node("LeakyRelu", ["q"], ["inner"], alpha=0.125)], "inner_then", [],
        [helper.make_tensor_value_info("inner", FLOAT, ["N", 4])])
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["hl"], ["inner_n"])], "inner_else", [],
        [helper.make_tensor_value_info("inner_n", FLOAT, ["N", 4])])
    then_g = helper.make_graph(
        [helper.make_node("Add", ["hl", "bias"], ["t0"]),
         helper.make_node("If", ["cond"], ["t1"], then_branch=inner_then, else_branch=inner_else),
         helper.make_node("Sub", ["t0", "t1"], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", FLOAT, ["N", 4])],
        [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")])
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["hl", "q"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", FLOAT, ["N", 4])])
    nodes = [
        helper.make_node("Cast", ["w16"], ["w"], to=FLOAT),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Gather", ["h", "idx"], ["g"], axis=1),
        helper.make_node("LabelEncoder", ["words"], ["lw"], domain="ai.onnx.ml",
                         keys_strings=["a", "b", "c"], values_floats=[0.5, -1.25, 2.0], default_float=7.0),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", FLOAT, [], [0.0])),
        helper.make_node("Where", ["mask", "lw", "zero"], ["lm"]),
        helper.make_node("Add", ["h", "lm"], ["hl"]),
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("ConstantOfShape", ["sh"], ["q"],
                         value=helper.make_tensor("v", FLOAT, [1], [0.25])),
        helper.make_node("Pad", ["hl", "pads"], ["y_pad"], mode="reflect"),
        helper.make_node("Clip", ["hl", "", "cmax"], ["y_clip"]),
        helper.make_node("Transpose", ["g"], ["y_g"], perm=[1, 0]),
        helper.make_node("If", ["cond"], ["y_if"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Constant", [], ["sparse"], sparse_value=helper.make_sparse_tensor(
            numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "sv"),
            numpy_helper.from_array(np.array([1, 6, 7], np.int64), "si"), [2, 4])),
        helper.make_node("Tile", ["sparse", "tiles"], ["tiled"]),
        helper.make_node("Shape", ["x"], ["n1"], end=1),
        helper.make_node("Slice", ["tiled", "starts", "n1"], ["sparse_n4"]),  # N <= 16 rows
        helper.make_node("Add", ["hl", "sparse_n4"], ["y_sparse"]),
        # optimized, MatMul+Add become a Gemm that ORT stores after its consumer (node index order)
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node("MatMul", ["xr", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b4"], ["mb"]),
        helper.make_node("Sigmoid", ["mb"], ["y_gemm"]),
        helper.make_node("SequenceConstruct", ["h", "hl"], ["seq"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["y_cat"], axis=0),
        helper.make_node("ZipMap", ["g"], ["y_map"], domain="ai.onnx.ml", classlabels_int64s=[10, 20, 30]),
    ]
    seq_of_maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(FLOAT, None)))
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", FLOAT, ["N", 4]), helper.make_tensor_value_info("cond", BOOL, [])],
        [helper.make_tensor_value_info("y_if", FLOAT, ["N", 4]),
         helper.make_tensor_value_info("y_pad", FLOAT, ["N", 6]),
         helper.make_tensor_value_info("y_clip", FLOAT, ["N", 4]),
         helper.make_tensor_value_info("y_g", FLOAT, [3, "N"]),
         helper.make_tensor_value_info("y_cat", FLOAT, [None, 4]),
         helper.make_tensor_value_info("y_sparse", FLOAT, ["N", 4]),
         helper.make_tensor_value_info("y_gemm", FLOAT, ["N", 4]),
         helper.make_value_info("y_map", seq_of_maps)],
        init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                              producer_name="nerve-test")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _small_feeds(rng, n):
    return [{"x": rng.standard_normal((n, 4)).astype(np.float32), "cond": np.array(c)} for c in (True, False)]


def _dense(sparse) -> np.ndarray:
    values, indices = numpy_helper.to_array(sparse.values), numpy_helper.to_array(sparse.indices)
    out = np.zeros(int(np.prod(sparse.dims)), values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T, sparse.dims)
    out[flat.astype(np.int64)] = values
    return out.reshape(tuple(sparse.dims))


def _constants(graph) -> dict:
    """name -> array of the initializers plus Constant nodes' values (ORT stores both alike)."""
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    out.update({t.values.name: _dense(t) for t in graph.sparse_initializer})
    for node in graph.node:
        if node.op_type == "Constant":
            attr = node.attribute[0]
            out[node.output[0]] = _dense(attr.sparse_tensor) if attr.name == "sparse_value" else numpy_helper.to_array(attr.t)
    return out


def _schema_default(node, name: str, opsets: dict):
    schema = onnx.defs.get_schema(node.op_type, opsets[node.domain], node.domain)
    return helper.get_attribute_value(schema.attributes[name].default_value)


def _assert_same_graph(orig, got, opsets, where="main"):
    """Same nodes (op, domain, inputs, attributes; matched by outputs), constants bit for bit,
    same input/output types with their symbolic dims. ORT writes every attribute the schema
    gives a default (Shape.start, LabelEncoder.default_*): those extras must be the defaults."""
    a, b = _constants(orig), _constants(got)
    assert a.keys() == b.keys(), where
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, (where, name)
        if a[name].dtype == object:
            assert a[name].tolist() == b[name].tolist(), (where, name)
        else:
            assert a[name].tobytes() == b[name].tobytes(), (where, name)
    nodes_a = {tuple(n.output): n for n in orig.node if n.op_type != "Constant"}
    nodes_b = {tuple(n.output): n for n in got.node}
    assert nodes_a.keys() == nodes_b.keys(), where
    for outs, na in nodes_a.items():
        nb = nodes_b[outs]
        assert (na.op_type, na.domain, list(na.input)) == (nb.op_type, nb.domain, list(nb.input)), (where, outs)
        attrs_b = {x.name: x for x in nb.attribute}
        extra = set(attrs_b) - {x.name for x in na.attribute}
        assert {x.name for x in na.attribute} <= set(attrs_b), (where, outs)
        for name in extra:
            assert helper.get_attribute_value(attrs_b[name]) == _schema_default(na, name, opsets), (where, outs)
        for xa in na.attribute:
            xb = attrs_b[xa.name]
            assert xa.type == xb.type, (where, outs, xa.name)
            if xa.type == onnx.AttributeProto.GRAPH:
                _assert_same_graph(xa.g, xb.g, opsets, f"{where}/{na.op_type}.{xa.name}")
            elif xa.type == onnx.AttributeProto.TENSOR:  # ORT rewrites float_data as raw_data
                va, vb = numpy_helper.to_array(xa.t), numpy_helper.to_array(xb.t)
                assert (va.dtype, va.shape, va.tobytes()) == (vb.dtype, vb.shape, vb.tobytes()), (where, outs)
            else:
                assert xa == xb, (where, outs, xa.name)
    assert [(v.name, v.type) for v in orig.input] == [(v.name, v.type) for v in got.input], where
    assert [(v.name, v.type) for v in orig.output] == [(v.name, v.type) for v in got.output], where


def test_small_model_round_trip(tmp_path, monkeypatch, rng):
    model = _small_model(rng)
    path = _to_ort(model, tmp_path, monkeypatch)
    assert is_ort(path) and not is_ort(tmp_path / "m.onnx") and not is_ort(tmp_path / "missing")
    got = load_ort(path)
    assert load_ort(path.read_bytes()) == got
    onnx.checker.check_model(got)  # also checks the nodes are in topological order
    _assert_same_graph(model.graph, got.graph, {o.domain: o.version for o in model.opset_import})
    assert {(o.domain, o.version) for o in model.opset_import} <= {(o.domain, o.version) for o in got.opset_import}
    assert got.graph.value_info, "typed intermediate values should become value_info"

    ref, conv, direct = _session(model), _session(got), _session(path)
    for n in (1, 5):
        for feeds in _small_feeds(rng, n):
            want = _run(ref, feeds)
            _assert_same(want, _run(conv, feeds))
            _assert_same(want, _run(direct, feeds))


@pytest.mark.parametrize("style", ["Fixed", "Runtime"])
def test_small_model_optimized(tmp_path, monkeypatch, rng, style):
    """Fully optimized by the tool (fused and contrib ops, runtime optimization records):
    the reader's model must run exactly like the .ort file, and like the original up to the
    rounding of fused kernels."""
    model = _small_model(rng)
    path = _to_ort(model, tmp_path, monkeypatch, level="all", style=style)
    got = load_ort(path)
    onnx.checker.check_model(got)  # the nodes were put back in topological order
    ref, conv, direct = _session(model), _session(got), _session(path)
    for feeds in _small_feeds(rng, 3):
        want = _run(direct, feeds)
        _assert_same(want, _run(conv, feeds))
        for name, value in _run(ref, feeds).items():
            if name == "y_map":  # a list of {label: float}
                want[name], value = [list(m.values()) for m in want[name]], [list(m.values()) for m in value]
            np.testing.assert_allclose(want[name], value, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- Moonshine


@pytest.fixture(scope="module")
def moonshine_dir() -> Path:
    from nerve.asr import models

    return models.fetch("moonshine-base") / "models" / "base-en"


def test_moonshine_encoder(moonshine_dir, rng):
    path = moonshine_dir / "encoder_model.ort"
    got = load_ort(path)
    onnx.checker.check_model(got)
    (inp,) = got.graph.input
    assert inp.name == "input_values"
    assert [d.dim_param for d in inp.type.tensor_type.shape.dim] == ["batch_size", "num_samples"]
    feeds = {"input_values": rng.uniform(-0.5, 0.5, (1, int(16000 * 1.3))).astype(np.float32)}
    _assert_same(_run(_session(path), feeds), _run(_session(got), feeds))


def test_moonshine_decoder(moonshine_dir, rng):
    path = moonshine_dir / "decoder_model_merged.ort"
    got = load_ort(path)
    onnx.checker.check_model(got)
    (branch,) = [n for n in got.graph.node if n.op_type == "If"]
    assert sorted(a.name for a in branch.attribute) == ["else_branch", "then_branch"]
    assert all(a.g.node for a in branch.attribute)
    names = [i.name for i in got.graph.input]
    assert names[:2] == ["input_ids", "encoder_hidden_states"] and names[-1] == "use_cache_branch"

    ref, conv = _session(path), _session(got)
    frames = 52  # what the encoder makes of 1.3 s
    for past, cached in ((0, False), (3, True)):
        feeds = {"input_ids": np.array([[1]], np.int64),
                 "encoder_hidden_states": rng.standard_normal((1, frames, 416)).astype(np.float32),
                 "use_cache_branch": np.array([cached])}
        for name in names[2:-1]:
            length = (frames if cached else 0) if ".encoder." in name else past
            shape = (1, 8, length, 52)
            feeds[name] = rng.standard_normal(shape).astype(np.float32) if cached else np.zeros(shape, np.float32)
        _assert_same(_run(ref, feeds), _run(conv, feeds))


# ---------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def small_ort(tmp_path_factory) -> bytes:
    mp = pytest.MonkeyPatch()
    try:
        path = _to_ort(_small_model(np.random.default_rng(7)), tmp_path_factory.mktemp("ort"), mp)
    finally:
        mp.undo()
    return path.read_bytes()


def _raises(data, match=None):
    with pytest.raises(ModelError, match=match) as info:
        load_ort(data)
    return str(info.value)


def test_empty_missing_and_wrong_identifier(tmp_path, small_ort):
    _raises(b"", "0 bytes")
    empty = tmp_path / "empty.ort"
    empty.write_bytes(b"")
    _raises(empty, "0 bytes")
    _raises(tmp_path / "absent.ort", "cannot read")
    bad = bytearray(small_ort)
    bad[4:8] = b"ORTX"
    assert not is_ort(bytes(bad)) and is_ort(small_ort)
    _raises(bytes(bad), "identifier")
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    _raises(model.SerializeToString(), "identifier")


@pytest.mark.parametrize("cut", [1, 4, 7, 8, 12, 40, 0.25, 0.5, 0.75, -64])
def test_truncated(small_ort, cut):
    n = int(len(small_ort) * cut) if isinstance(cut, float) else cut % len(small_ort)
    msg = _raises(small_ort[:n])
    assert "bytes" in msg


def test_random_bytes(rng):
    for size in (8, 64, 4096):
        data = bytearray(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        _raises(bytes(data), "identifier" if data[4:8] != b"ORTM" else None)
        data[4:8] = b"ORTM"
        data[0:4] = struct.pack("<I", int(rng.integers(0, size)))  # a root inside the file
        _raises(bytes(data))


def test_corrupted_raw_data_length(small_ort):
    """w16's 32 raw bytes are unique in the file; the u32 before them is the vector length."""
    w16 = numpy_helper.to_array(_small_model(np.random.default_rng(7)).graph.initializer[0]).tobytes()
    at = small_ort.index(w16) - 4
    assert struct.unpack_from("<I", small_ort, at)[0] == 32
    for length, match in ((0x7FFFFFF0, r"vector .*raw_data.* outside"), (30, r"'w16'.*raw_data has 30 bytes")):
        bad = bytearray(small_ort)
        bad[at:at + 4] = struct.pack("<I", length)
        _raises(bytes(bad), match)


def test_fuzzed_bytes_raise_only_model_error(small_ort, rng):
    """Random byte flips either still parse or raise ModelError: never another exception."""
    for _ in range(150):
        bad = bytearray(small_ort)
        for pos in rng.integers(8, len(bad), int(rng.integers(1, 4))):
            bad[pos] = int(rng.integers(0, 256))
        try:
            load_ort(bytes(bad))
        except ModelError:
            pass


# ------------------------------------------------- hand-built flatbuffers (a minimal writer)


class _FB:
    """Back-to-front flatbuffer writer, enough to craft files ORT would never write.

    Objects are prepended; each is named by its distance from the buffer's end, which does
    not change as more is prepended. Alignment is ignored (the reader does not need it)."""

    def __init__(self):
        self.buf = bytearray()

    def _put(self, data: bytes) -> int:
        self.buf[0:0] = data
        return len(self.buf)

    def string(self, s) -> int:
        s = s.encode() if isinstance(s, str) else s
        return self._put(struct.pack("<I", len(s)) + s + b"\0")

    def scalars(self, fmt: str, values) -> int:
        return self._put(struct.pack(f"<I{len(values)}{fmt}", len(values), *values))

    def refs(self, targets) -> int:
        end = len(self.buf) + 4 + 4 * len(targets)  # where the vector will start
        body = [end - 4 - 4 * i - t for i, t in enumerate(targets)]
        return self._put(struct.pack(f"<I{len(targets)}I", len(targets), *body))

    def table(self, fields: dict) -> int:
        """fields: id -> (struct fmt, value), or id -> int (a reference to an object)."""
        layout, body = {}, b""
        for fid, spec in sorted(fields.items()):
            layout[fid] = 4 + len(body)
            body += struct.pack("<I", 0) if isinstance(spec, int) else struct.pack("<" + spec[0], spec[1])
        nfields = max(fields, default=-1) + 1
        vtable = struct.pack(f"<HH{nfields}H", 4 + 2 * nfields, 4 + len(body),
                             *[layout.get(i, 0) for i in range(nfields)])
        start = len(self.buf) + len(body) + 4  # the table's distance from the end, once put
        table = bytearray(struct.pack("<i", len(vtable)) + body)
        for fid, spec in fields.items():
            if isinstance(spec, int):
                struct.pack_into("<I", table, layout[fid], start - layout[fid] - spec)
        self._put(vtable + bytes(table))
        return start

    def finish(self, root: int, ident=b"ORTM") -> bytes:
        total = 8 + len(self.buf)
        return struct.pack("<I", total - root) + ident + bytes(self.buf)


def _fb_model(graph_fields: dict, fb: _FB) -> bytes:
    graph = fb.table(graph_fields)
    model = fb.table({0: ("q", 8), 1: fb.refs([fb.table({0: fb.string(""), 1: ("q", 17)})]), 7: graph})
    return fb.finish(fb.table({0: fb.string("5"), 1: model}))


def _fb_relu_graph(fb: _FB, extra_node=None, tensor=None) -> dict:
    """x -> Relu -> y, x a float [N] input; optionally one more node and one initializer."""
    dim = fb.table({0: fb.table({0: ("b", 2), 2: fb.string("N")})})
    ttype = fb.table({0: ("i", 1), 1: fb.table({0: fb.refs([dim])})})
    tinfo = fb.table({1: ("B", 1), 2: ttype})
    args = fb.refs([fb.table({0: fb.string(n), 2: tinfo}) for n in ("x", "y")])
    nodes = [fb.table({5: fb.string("Relu"), 8: fb.refs([fb.string("x")]), 9: fb.refs([fb.string("y")])})]
    fields = {1: args, 2: fb.refs(nodes + ([extra_node] if extra_node else [])),
              5: fb.refs([fb.string("x")]), 6: fb.refs([fb.string("y")])}
    if tensor is not None:
        fields[0] = fb.refs([tensor])
    return fields


def test_hand_built_minimal_model_runs():
    fb = _FB()
    got = load_ort(_fb_model(_fb_relu_graph(fb), fb))
    onnx.checker.check_model(got)
    assert [d.dim_param for d in got.graph.input[0].type.tensor_type.shape.dim] == ["N"]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(_session(got).run(None, {"x": x})[0], np.maximum(x, 0))


def test_hand_built_nodes_are_sorted():
    """Stored consumer first (as ORT does after a fusion): the reader puts producers first."""
    fb = _FB()
    fields = _fb_relu_graph(fb)
    neg = fb.table({5: fb.string("Neg"), 8: fb.refs([fb.string("r")]), 9: fb.refs([fb.string("y")])})
    relu = fb.table({5: fb.string("Relu"), 8: fb.refs([fb.string("x")]), 9: fb.refs([fb.string("r")])})
    fields[2] = fb.refs([neg, relu])
    got = load_ort(_fb_model(fields, fb))
    assert [n.op_type for n in got.graph.node] == ["Relu", "Neg"]
    onnx.checker.check_model(got)


def _tensor(fb, over):
    fields = {0: fb.string("t"), 2: fb.scalars("q", [2]), 3: ("i", 1), 4: fb.scalars("B", [0] * 8)}
    fields.update(over)
    return fb.table(fields)


@pytest.mark.parametrize("case, match", [
    ("external", r"external data file"),
    ("bad_dtype", r"unknown data_type 99"),
    ("neg_dim", r"negative dimension"),
    ("fused", r"fused node"),
    ("attr_type", r"unsupported attribute type 11"),
    ("cycle", r"cycle"),
    ("utf8", r"not valid UTF-8"),
    ("no_nul", r"no NUL terminator"),
    ("field_outside", r"does not fit"),
    ("sparse_index", r"indices \[1\] do not fit values \[1\] of a tensor \[2\]"),
])
def test_hand_built_bad_content(case, match):
    fb = _FB()
    tensor, node = None, None
    if case == "external":
        tensor = _tensor(fb, {6: ("q", 0)})
    elif case == "bad_dtype":
        tensor = _tensor(fb, {3: ("i", 99)})
    elif case == "neg_dim":
        tensor = _tensor(fb, {2: fb.scalars("q", [-2])})
    elif case == "fused":
        node = fb.table({5: fb.string("Relu"), 6: ("i", 1)})
    elif case == "attr_type":
        node = fb.table({5: fb.string("Relu"), 10: fb.refs([fb.table({0: fb.string("a"), 2: ("i", 11)})])})
    elif case == "cycle":  # two nodes, each reading the other's output
        node = fb.table({5: fb.string("Neg"), 8: fb.refs([fb.string("b")]), 9: fb.refs([fb.string("a")])})
        node2 = fb.table({5: fb.string("Neg"), 8: fb.refs([fb.string("a")]), 9: fb.refs([fb.string("b")])})
    elif case == "utf8":
        node = fb.table({5: fb.string(b"Re\xfflu")})
    elif case == "no_nul":
        s = fb.string("Relu")
        fb.buf[len(fb.buf) - s + 8] = ord("x")  # overwrite the terminator
        node = fb.table({5: s})
    elif case == "field_outside":
        node = fb.table({5: fb.string("Relu")})
        # vtable of that node: u16 vtable bytes, u16 table bytes, ...; shrink the table to 4 bytes
        vt = len(fb.buf) - node - struct.unpack_from("<i", fb.buf, len(fb.buf) - node)[0]
        struct.pack_into("<H", fb.buf, vt + 2, 4)
    elif case == "sparse_index":  # one value at linear index 2 of a [2] tensor
        values = _tensor(fb, {2: fb.scalars("q", [1]), 4: fb.scalars("B", [0] * 4)})
        indices = _tensor(fb, {2: fb.scalars("q", [1]), 3: ("i", 7), 4: fb.scalars("B", struct.pack("<q", 2))})
        sparse = fb.table({0: values, 1: indices, 2: fb.scalars("q", [2])})
    fields = _fb_relu_graph(fb, node, tensor)
    if case == "cycle":
        fields[2] = fb.refs([node, node2])
    if case == "sparse_index":
        fields[7] = fb.refs([sparse])
    _raises(_fb_model(fields, fb), match)


def test_hand_built_deep_and_shared_subgraphs():
    """Subgraphs nested past the limit, and a small file whose shared subgraphs would expand
    to 64**12 graphs: both must stop with ModelError, quickly."""
    def chain(depth: int, fanout: int) -> bytes:
        fb = _FB()
        graph = fb.table({})
        for _ in range(depth):
            attr = fb.table({0: fb.string("g"), 2: ("i", 10), 12: fb.refs([graph] * fanout)})
            node = fb.table({5: fb.string("Loop"), 10: fb.refs([attr])})
            graph = fb.table({2: fb.refs([node])})
        model = fb.table({7: graph})
        return fb.finish(fb.table({1: model}))

    assert load_ort(chain(8, 1)).graph.node[0].op_type == "Loop"
    _raises(chain(40, 1), "nested deeper")
    _raises(chain(12, 64), "far more data than it holds")
