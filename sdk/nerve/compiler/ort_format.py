"""Reader of ONNX Runtime's flatbuffer model format (``.ort``) into an ``onnx.ModelProto``.

    load_ort(path_or_bytes) -> onnx.ModelProto
    is_ort(path_or_bytes) -> bool

Written from the published schema (onnxruntime/core/flatbuffers/schema/ort.fbs) and the
FlatBuffers binary format; it needs numpy and onnx only, not the ``flatbuffers`` package.

FlatBuffers in one paragraph (all little-endian): the file starts with a u32 offset to the
root table, then the 4-byte file identifier ("ORTM"). A table starts with an i32 that says
where its vtable is (``vtable = table - value``); the vtable is u16 ``vtable_bytes``, u16
``table_bytes``, then one u16 per field id: the field's offset inside the table, 0 when the
field is absent (it then takes its schema default). Scalars are stored inline; tables,
vectors and strings are stored as a u32 offset relative to where that u32 itself lies. A
vector (and a string) is a u32 element count followed by the elements; a vector of tables or
strings holds one relative u32 offset per element. A union is two fields: a u8 type then the
table. Deprecated fields keep their id.

The file is untrusted: every read is bounds-checked, every failure raises ModelError naming
the table, field and offset. Offsets to children are unsigned and point forward, so no
reference cycle exists; but children may be shared (a DAG), so besides a nesting-depth limit
the reader charges every table, vector and string it decodes against a budget proportional
to the file size, which a real file never reaches and a crafted one cannot escape.
"""

from __future__ import annotations

import heapq
import os
import struct
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from ..errors import ModelError

__all__ = ["load_ort", "is_ort"]

_IDENT = b"ORTM"
_MAX_GRAPH_DEPTH = 32   # If/Loop/Scan nesting; real models have 1-3
_MAX_TYPE_DEPTH = 32    # sequence(map(sequence(...))) nesting

# TensorDataType (same numbers as onnx.TensorProto.DataType) -> bytes per element;
# STRING (8) lives in string_data, not raw_data.
_ELEM_SIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
              14: 8, 15: 16, 16: 2, 17: 1, 18: 1, 19: 1, 20: 1}
_STRING = 8


class _Buf:
    """The file's bytes plus the decoding budget shared by every table read from them."""

    def __init__(self, data: bytes):
        self.data = data
        self.size = len(data)
        self.budget = 4 * self.size + (1 << 16)

    def need(self, off: int, nbytes: int, what: str) -> None:
        if off < 0 or nbytes < 0 or off + nbytes > self.size:
            raise ModelError(f"ORT model: {what}: bytes {off}..{off + nbytes} lie outside the "
                             f"{self.size}-byte file (truncated or corrupted)")

    def charge(self, nbytes: int, what: str) -> None:
        self.budget -= nbytes
        if self.budget < 0:
            raise ModelError(f"ORT model: {what}: the file references far more data than it holds "
                             "(shared or self-overlapping tables; corrupted or crafted file)")

    def unpack(self, fmt: str, off: int, what: str):
        self.need(off, struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.data, off)[0]


class _Table:
    """One flatbuffer table: typed accessors by field id. ``path`` names it in errors."""

    __slots__ = ("buf", "pos", "path", "vt", "vt_bytes", "nbytes")

    def __init__(self, buf: _Buf, pos: int, path: str):
        self.buf, self.pos, self.path = buf, pos, path
        where = f"table {path} at offset {pos}"
        self.vt = pos - buf.unpack("<i", pos, where)
        self.vt_bytes = buf.unpack("<H", self.vt, f"vtable of {where}")
        self.nbytes = buf.unpack("<H", self.vt + 2, f"vtable of {where}")
        if self.vt_bytes < 4 or self.vt_bytes % 2 or self.nbytes < 4:
            raise ModelError(f"ORT model: {where}: malformed vtable at offset {self.vt} "
                             f"(vtable {self.vt_bytes} bytes, table {self.nbytes} bytes)")
        buf.need(self.vt, self.vt_bytes, f"vtable of {where}")
        buf.need(pos, self.nbytes, where)
        buf.charge(self.nbytes, where)

    def _slot(self, fid: int, width: int, name: str) -> Optional[int]:
        """Absolute position of field ``fid`` (``width`` bytes), or None when absent."""
        if 4 + 2 * fid >= self.vt_bytes:
            return None  # written by an older schema: the field did not exist yet
        fo = struct.unpack_from("<H", self.buf.data, self.vt + 4 + 2 * fid)[0]
        if fo == 0:
            return None
        if fo < 4 or fo + width > self.nbytes:
            raise ModelError(f"ORT model: field {self.path}.{name} (table at offset {self.pos}): "
                             f"inline offset {fo} does not fit the {self.nbytes}-byte table")
        return self.pos + fo

    def scalar(self, fid: int, fmt: str, name: str, default=0):
        at = self._slot(fid, struct.calcsize(fmt), name)
        return default if at is None else struct.unpack_from(fmt, self.buf.data, at)[0]

    def _target(self, fid: int, name: str) -> Optional[int]:
        at = self._slot(fid, 4, name)
        return None if at is None else at + struct.unpack_from("<I", self.buf.data, at)[0]

    def table(self, fid: int, name: str) -> Optional["_Table"]:
        to = self._target(fid, name)
        return None if to is None else _Table(self.buf, to, f"{self.path}.{name}")

    def _vector(self, fid: int, name: str, elem: int) -> Tuple[int, int, str]:
        """(first element position, count, path) of a vector field; (0, 0, path) when absent."""
        path = f"{self.path}.{name}"
        at = self._target(fid, name)
        if at is None:
            return 0, 0, path
        n = self.buf.unpack("<I", at, f"length of vector {path}")
        self.buf.need(at + 4, n * elem, f"vector {path} at offset {at} ({n} elements of {elem} bytes)")
        self.buf.charge(4 + n * elem, f"vector {path}")
        return at + 4, n, path

    def string(self, fid: int, name: str) -> Optional[bytes]:
        at = self._target(fid, name)
        return None if at is None else _string_at(self.buf, at, f"{self.path}.{name}")

    def text(self, fid: int, name: str) -> str:
        return _utf8(self.string(fid, name) or b"", f"{self.path}.{name}")

    def tables(self, fid: int, name: str) -> List["_Table"]:
        start, n, path = self._vector(fid, name, 4)
        offs = np.frombuffer(self.buf.data, "<u4", n, start).tolist()
        return [_Table(self.buf, start + 4 * i + o, f"{path}[{i}]") for i, o in enumerate(offs)]

    def strings(self, fid: int, name: str) -> List[bytes]:
        start, n, path = self._vector(fid, name, 4)
        offs = np.frombuffer(self.buf.data, "<u4", n, start).tolist()
        return [_string_at(self.buf, start + 4 * i + o, f"{path}[{i}]") for i, o in enumerate(offs)]

    def texts(self, fid: int, name: str) -> List[str]:
        return [_utf8(s, f"{self.path}.{name}") for s in self.strings(fid, name)]

    def scalars(self, fid: int, dtype: str, name: str) -> np.ndarray:
        dt = np.dtype(dtype)
        start, n, _ = self._vector(fid, name, dt.itemsize)
        return np.frombuffer(self.buf.data, dt, n, start)

    def blob(self, fid: int, name: str) -> bytes:
        start, n, _ = self._vector(fid, name, 1)
        return self.buf.data[start:start + n]


def _string_at(buf: _Buf, at: int, path: str) -> bytes:
    n = buf.unpack("<I", at, f"length of string {path}")
    # n + 1: the format requires a NUL after the bytes; a missing one means a bad length
    buf.need(at + 4, n + 1, f"string {path} at offset {at} ({n} bytes)")
    if buf.data[at + 4 + n] != 0:
        raise ModelError(f"ORT model: string {path} at offset {at}: length {n} is wrong "
                         "(no NUL terminator after it; corrupted file)")
    buf.charge(4 + n, f"string {path}")
    return buf.data[at + 4:at + 4 + n]


def _utf8(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"ORT model: {path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


# ---------------------------------------------------------------- schema -> onnx protos


def _given(**fields) -> dict:
    """The fields that are set: an absent flatbuffer field reads as its default, and setting
    that default on a proto2 message would mark it present (and serialize it) for nothing."""
    return {k: v for k, v in fields.items() if v}


def _tensor(t: _Table, proto) -> None:
    """Fills the TensorProto ``proto`` (in place: initializers are most of the bytes)."""
    name = t.text(0, "name")
    what = f"tensor {name!r} ({t.path}, offset {t.pos})"
    dims = t.scalars(2, "<i8", "dims").tolist()
    dtype = t.scalar(3, "<i", "data_type")
    if any(d < 0 for d in dims):
        raise ModelError(f"ORT model: {what}: negative dimension in {dims}")
    if dtype != _STRING and dtype not in _ELEM_SIZE:
        raise ModelError(f"ORT model: {what}: unknown data_type {dtype}")
    # field 6 (format version 6) is an offset into a separate data file that the caller
    # supplies (ORT's training checkpoints use it); the .ort file does not name that file
    ext = t.scalar(6, "<q", "external_data_offset", -1)
    if ext >= 0:
        raise ModelError(f"ORT model: {what}: its data is in an external data file "
                         f"(external_data_offset={ext}), which is not supported")
    count = int(np.prod(dims, dtype=object)) if dims else 1
    proto.dims.extend(dims)
    proto.data_type = dtype
    doc = t.text(1, "doc_string")
    if name:
        proto.name = name
    if doc:
        proto.doc_string = doc
    if dtype == _STRING:
        data = t.strings(5, "string_data")
        if len(data) != count:
            raise ModelError(f"ORT model: {what}: {len(data)} strings for shape {dims}")
        proto.string_data.extend(data)
    else:
        raw = t.blob(4, "raw_data")
        if len(raw) != count * _ELEM_SIZE[dtype]:
            raise ModelError(f"ORT model: {what}: raw_data has {len(raw)} bytes, shape {dims} of "
                             f"data_type {dtype} needs {count * _ELEM_SIZE[dtype]}")
        proto.raw_data = raw  # little-endian in both formats: copied bit for bit


def _sparse_tensor(t: _Table, proto) -> None:
    proto.dims.extend(t.scalars(2, "<i8", "dims").tolist())
    for fid, field in ((0, "values"), (1, "indices")):
        sub = t.table(fid, field)
        if sub is None:
            raise ModelError(f"ORT model: sparse tensor {t.path} (offset {t.pos}) has no {field}")
        _tensor(sub, getattr(proto, field))
    # ORT narrows the indices to the smallest integer type that holds them (int8 for a small
    # tensor); ONNX requires int64
    idx = proto.indices
    narrow = {2: "<u1", 3: "<i1", 4: "<u2", 5: "<i2", 6: "<i4", 12: "<u4"}.get(idx.data_type)
    if narrow:
        idx.raw_data = np.frombuffer(idx.raw_data, narrow).astype("<i8").tobytes()
        idx.data_type = 7
    elif idx.data_type != 7:
        raise ModelError(f"ORT model: sparse tensor {t.path} (offset {t.pos}): indices of data_type "
                         f"{idx.data_type} (not an integer type)")
    # indices are [nnz] linear or [nnz, rank] coordinates, each inside dims
    dims, nnz = list(proto.dims), list(proto.values.dims)
    ind = np.frombuffer(idx.raw_data, "<i8").reshape(list(idx.dims))
    limit = np.array([int(np.prod(dims, dtype=object))] if ind.ndim == 1 else dims, dtype=object)
    if (len(nnz) != 1 or ind.shape not in ((nnz[0],), (nnz[0], len(dims))) or
            (ind.size and ((ind < 0).any() or (ind >= limit).any()))):
        raise ModelError(f"ORT model: sparse tensor {t.path} (offset {t.pos}): indices {list(idx.dims)} "
                         f"do not fit values {nnz} of a tensor {dims}")


def _type(t: _Table, onnx, depth: int):
    """TypeInfo -> TypeProto; None when the NodeArg carries no type."""
    if depth > _MAX_TYPE_DEPTH:
        raise ModelError(f"ORT model: {t.path}: types nested deeper than {_MAX_TYPE_DEPTH}")
    kind = t.scalar(1, "<B", "value_type")
    value = t.table(2, "value")
    if kind == 0 or value is None:
        return None
    tp = onnx.TypeProto(**_given(denotation=t.text(0, "denotation")))
    if kind == 1:  # TensorTypeAndShape
        tt = tp.tensor_type
        tt.SetInParent()
        elem = value.scalar(0, "<i", "elem_type")
        if elem:
            tt.elem_type = elem
        shape = value.table(1, "shape")
        if shape is not None:  # absent = unknown rank; present and empty = a scalar
            tt.shape.SetInParent()
            for dim in shape.tables(0, "dim"):
                d = tt.shape.dim.add()
                denotation = dim.text(1, "denotation")
                if denotation:
                    d.denotation = denotation
                dv = dim.table(0, "value")
                if dv is None:
                    continue
                dim_type = dv.scalar(0, "<b", "dim_type")
                if dim_type == 1:
                    d.dim_value = dv.scalar(1, "<q", "dim_value")
                elif dim_type == 2:
                    d.dim_param = dv.text(2, "dim_param")
                elif dim_type != 0:
                    raise ModelError(f"ORT model: {dv.path} (offset {dv.pos}): unknown dim_type {dim_type}")
    elif kind == 2:  # SequenceType
        elem = value.table(0, "elem_type")
        inner = None if elem is None else _type(elem, onnx, depth + 1)
        tp.sequence_type.SetInParent()
        if inner is not None:
            tp.sequence_type.elem_type.CopyFrom(inner)
    elif kind == 3:  # MapType
        tp.map_type.key_type = value.scalar(0, "<i", "key_type")
        elem = value.table(1, "value_type")
        inner = None if elem is None else _type(elem, onnx, depth + 1)
        if inner is not None:
            tp.map_type.value_type.CopyFrom(inner)
    else:
        raise ModelError(f"ORT model: {t.path} (offset {t.pos}): unknown TypeInfoValue kind {kind}")
    return tp


def _attribute(a: _Table, onnx, depth: int, owner: str):
    name = a.text(0, "name")
    kind = a.scalar(2, "<i", "type")
    proto = onnx.AttributeProto(name=name, **_given(doc_string=a.text(1, "doc_string")))
    if kind == 1:
        proto.f = a.scalar(3, "<f", "f")
    elif kind == 2:
        proto.i = a.scalar(4, "<q", "i")
    elif kind == 3:
        proto.s = a.string(5, "s") or b""
    elif kind in (4, 5):
        sub = a.table(6 if kind == 4 else 7, "t" if kind == 4 else "g")
        if sub is None:
            raise ModelError(f"ORT model: attribute {name!r} of {owner} ({a.path}) has no value")
        if kind == 4:
            _tensor(sub, proto.t)
        else:
            _graph(sub, proto.g, onnx, depth + 1, f"{owner}.{name}")
    elif kind == 6:
        proto.floats.extend(a.scalars(8, "<f4", "floats").tolist())
    elif kind == 7:
        proto.ints.extend(a.scalars(9, "<i8", "ints").tolist())
    elif kind == 8:
        proto.strings.extend(a.strings(10, "strings"))
    elif kind == 9:
        for t in a.tables(11, "tensors"):
            _tensor(t, proto.tensors.add())
    elif kind == 10:
        for i, g in enumerate(a.tables(12, "graphs")):
            _graph(g, proto.graphs.add(), onnx, depth + 1, f"{owner}.{name}[{i}]")
    else:  # the schema has no field for SPARSE_TENSOR(S) values; 0 and junk are corruption
        raise ModelError(f"ORT model: attribute {name!r} of {owner} ({a.path}, offset {a.pos}): "
                         f"unsupported attribute type {kind}")
    proto.type = kind
    return proto


def _subgraph_refs(graph, into: set) -> None:
    """Every name the nodes of ``graph`` (and their subgraphs) read."""
    for node in graph.node:
        into.update(node.input)
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _subgraph_refs(g, into)


def _toposort(nodes: list, needs: List[set], path: str) -> list:
    """ORT stores nodes in node-index order, which optimizers leave non-topological; ONNX
    wants producers first. Kahn's algorithm, taking the lowest stored index when free."""
    producer = {out: i for i, (node, _) in enumerate(nodes) for out in node.output if out}
    deps = [{producer[n] for n in need if n in producer} - {i} for i, need in enumerate(needs)]
    users: List[List[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i][0])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = next(nodes[i][1] for i, w in enumerate(waiting) if w)
        raise ModelError(f"ORT model: {path}: the nodes form a cycle (through {stuck})")
    return order


def _graph(t: _Table, g, onnx, depth: int, name: str) -> None:
    """Fills the GraphProto ``g``; ``name`` is made up (ORT does not store graph names)."""
    if depth > _MAX_GRAPH_DEPTH:
        raise ModelError(f"ORT model: {t.path}: subgraphs nested deeper than {_MAX_GRAPH_DEPTH}")
    g.name = name
    for x in t.tables(0, "initializers"):
        _tensor(x, g.initializer.add())
    for x in t.tables(7, "sparse_initializers"):
        _sparse_tensor(x, g.sparse_initializer.add())

    # node_args: one ValueInfo per value of this graph (types, shapes with symbolic dims)
    args: Dict[str, Tuple[object, str]] = {}
    for va in t.tables(1, "node_args"):
        info = va.table(2, "type")
        args[va.text(0, "name")] = (None if info is None else _type(info, onnx, 0), va.text(1, "doc_string"))

    nodes, needs = [], []
    for nt in t.tables(2, "nodes"):
        if nt.scalar(6, "<i", "type") != 0:
            raise ModelError(f"ORT model: {nt.path} (offset {nt.pos}) is a fused node (compiled by an "
                             "execution provider); it has no ONNX equivalent")
        op_type = nt.text(5, "op_type")
        if not op_type:
            raise ModelError(f"ORT model: {nt.path} (offset {nt.pos}) has no op_type")
        node = onnx.NodeProto(op_type=op_type, input=nt.texts(8, "inputs"), output=nt.texts(9, "outputs"),
                              **_given(name=nt.text(0, "name"), domain=nt.text(2, "domain"),
                                       doc_string=nt.text(1, "doc_string")))
        label = f"node {node.name or op_type!r} ({op_type})"
        node.attribute.extend(_attribute(a, onnx, depth, node.name or op_type) for a in nt.tables(10, "attributes"))
        # values a subgraph reads from this graph: ORT lists them as implicit_inputs; the
        # scan covers a writer that left the list out
        need = set(node.input) | set(nt.texts(12, "implicit_inputs"))
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _subgraph_refs(sub, need)
        nodes.append((node, label))
        needs.append(need)
    g.node.extend(_toposort(nodes, needs, t.path))

    def value_info(vname: str):
        tp, doc = args.get(vname, (None, ""))
        vi = onnx.ValueInfoProto(name=vname, **_given(doc_string=doc))
        if tp is not None:
            vi.type.CopyFrom(tp)
        return vi

    g.input.extend(value_info(n) for n in t.texts(5, "inputs"))
    g.output.extend(value_info(n) for n in t.texts(6, "outputs"))
    # value_info only for values produced here: node_args also hold the outer-scope values a
    # subgraph reads, whose declaration belongs to the graph that owns them
    listed = {vi.name for vi in g.output}
    for node, _ in nodes:
        for out in node.output:
            if out and out not in listed and args.get(out, (None,))[0] is not None:
                listed.add(out)
                g.value_info.append(value_info(out))


def _model(data: bytes):
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency
        raise ModelError("reading an ORT model needs the 'onnx' package (pip install onnx)") from exc
    if len(data) < 8:
        raise ModelError(f"ORT model: the file is {len(data)} bytes, too short for a flatbuffer "
                         "header (root offset and 'ORTM' identifier)")
    if data[4:8] != _IDENT:
        raise ModelError(f"not an ORT format model: identifier at bytes 4..8 is {bytes(data[4:8])!r}, "
                         f"expected {_IDENT!r}")
    buf = _Buf(data)
    session = _Table(buf, buf.unpack("<I", 0, "root offset"), "InferenceSession")
    version = session.text(0, "ort_version")
    mt = session.table(1, "model")
    if mt is None:
        raise ModelError(f"ORT model (format version {version!r}): InferenceSession has no model")
    gt = mt.table(7, "graph")
    if gt is None:
        raise ModelError(f"ORT model (format version {version!r}): Model has no graph")
    model = onnx.ModelProto(ir_version=mt.scalar(0, "<q", "ir_version"), **_given(
        producer_name=mt.text(2, "producer_name"), producer_version=mt.text(3, "producer_version"),
        domain=mt.text(4, "domain"), model_version=mt.scalar(5, "<q", "model_version"),
        doc_string=mt.text(6, "doc_string")))
    for op in mt.tables(1, "opset_import"):
        model.opset_import.add(domain=op.text(0, "domain"), version=op.scalar(1, "<q", "version"))
    for kv in mt.tables(9, "metadata_props"):
        model.metadata_props.add(key=kv.text(0, "key"), value=kv.text(1, "value"))
    _graph(gt, model.graph, onnx, 0, "main_graph")
    doc = mt.text(8, "graph_doc_string")
    if doc:
        model.graph.doc_string = doc
    return model


def _read(path_or_bytes) -> bytes:
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes)
    try:
        with open(os.fspath(path_or_bytes), "rb") as f:
            return f.read()
    except OSError as exc:
        raise ModelError(f"cannot read ORT model {path_or_bytes}: {exc.strerror or exc}") from None


def load_ort(path_or_bytes: Union[str, os.PathLike, bytes, bytearray, memoryview]):
    """Reads an ONNX Runtime ``.ort`` model (a path or its bytes) into an ``onnx.ModelProto``.

    The result is an equivalent ONNX model: nodes in topological order, initializers bit for
    bit, graph inputs/outputs with their types and (symbolic) shapes, the other typed values
    as ``value_info``. ORT-only data (kernel type resolver, runtime optimization records,
    node since_version / execution provider) is dropped. Raises ModelError on any malformed,
    truncated or unsupported input."""
    data = _read(path_or_bytes)
    try:
        return _model(data)
    except ModelError:
        raise
    except (ValueError, TypeError, OverflowError, struct.error) as exc:
        # a backstop: a value the checks above let through that protobuf or numpy rejects
        raise ModelError(f"ORT model: corrupted content ({type(exc).__name__}: {exc})") from None


def is_ort(path_or_bytes) -> bool:
    """True when the file (or bytes) carries the ORT flatbuffer identifier; never raises."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        head = bytes(path_or_bytes[:8])
    else:
        try:
            with open(os.fspath(path_or_bytes), "rb") as f:
                head = f.read(8)
        except (OSError, TypeError, ValueError):
            return False
    return len(head) == 8 and head[4:8] == _IDENT
