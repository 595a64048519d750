"""ONNX → nerve program: reads the model safely, walks the graph in order and hands each node
to its handler (``onnx_ops*.py``), which emits runtime ops through the :class:`Builder`.

Handlers are registered with :func:`handler`. Each receives a :class:`NodeCtx` (attributes,
names, the builder) and the node's input values, and returns its output values. An op type
without a handler, or an attribute a handler does not support, fails the compile with a
:class:`CompileError` naming the node, its type and the reason.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import symbolic as S
from .builder import Builder
from .graph import CompileError, Program, UnboundDims, Value

_HANDLERS: Dict[str, Callable] = {}
# ops of other domains (e.g. "com.microsoft" MatMulNBits): (domain, op type) -> handler
_DOMAIN_HANDLERS: Dict[tuple, Callable] = {}


def handler(*op_types: str, domain: str = ""):
    def deco(fn):
        for t in op_types:
            if domain in ("", "ai.onnx"):
                _HANDLERS[t] = fn
            else:
                _DOMAIN_HANDLERS[(domain, t)] = fn
        return fn
    return deco


def supported_ops() -> List[str]:
    return sorted(_HANDLERS) + sorted(f"{d}.{t}" for d, t in _DOMAIN_HANDLERS)


class NodeCtx:
    def __init__(self, imp: "Importer", node, index: int):
        import onnx

        self.imp = imp
        self.b: Builder = imp.b
        self.node = node
        self.op_type = node.op_type
        self.name = node.name or f"{node.op_type}_{index}"
        self.outputs = list(node.output)
        self.opset = imp.opset
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for k, v in list(self.attrs.items()):
            if isinstance(v, bytes):
                self.attrs[k] = v.decode("utf-8")

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def dtype_attr(self, name: str, default=None) -> np.dtype:
        """The numpy dtype an element-type attribute (Cast's `to`, `dtype`, ...) names; a type
        nerve does not compute in fails naming the node."""
        try:
            return np_dtype_of(self.attr(name, default))
        except CompileError as exc:
            raise self.fail(f"attribute {name}: {exc}") from None

    def const(self, values, dtype=np.int64) -> Value:
        """A small constant of this node (axes, a shape: int64; a scale) for the ops it is spelt
        out in."""
        return self.b.const(np.array(values, dtype), self.b.fresh(self.name + ".c"))

    def arange(self, n) -> Value:
        """0, 1, ..., n - 1 (int64) for an extent n, symbolic or not: a run-time Range."""
        extent = self.b.from_known([n], np.int64, [], self.b.fresh(self.name + ".n"))
        return self.call("Range", [self.const(0), extent, self.const(1)])[0]

    def call(self, op_type: str, ins: Sequence[Optional[Value]], n_out: int = 1, as_opset: Optional[int] = None,
             **attrs) -> List[Value]:
        """Runs op_type's handler as part of this node (a composite op spelt out in ONNX terms):
        same node name and opset (or as_opset: the semantics of that opset's op), the given
        attributes, fresh output names."""
        sub = copy.copy(self)
        sub.op_type, sub.attrs = op_type, attrs
        if as_opset is not None:
            sub.opset = as_opset
        sub.outputs = [self.b.fresh(f"{self.name}.{op_type}") for _ in range(n_out)]
        return list(_HANDLERS[op_type](sub, list(ins)))

    def fail(self, reason: str) -> CompileError:
        return CompileError(f"node '{self.name}' ({self.op_type}): {reason}")

    def out_name(self, i: int = 0) -> str:
        return self.outputs[i] if i < len(self.outputs) and self.outputs[i] else self.b.fresh(f"{self.name}:{i}")

    def require_attrs(self, allowed: Sequence[str]) -> None:
        extra = sorted(set(self.attrs) - set(allowed))
        if extra:
            raise self.fail(f"attribute(s) {extra} not supported")

    def known_int(self, v: Optional[Value], what: str) -> int:
        """The one integer v holds, known when the model is compiled (a constant or shape
        arithmetic); CompileError otherwise."""
        vals = self.known(v, what)
        if len(vals) != 1 or not S.is_static(vals[0]):
            raise self.fail(f"{what} must be one integer known when the model is compiled")
        return int(vals[0])

    def known(self, v: Optional[Value], what: str) -> List:
        vals = self.b.known_values(v)
        if vals is None:
            raise self.fail(f"{what} must be known when the model is compiled (a constant or shape arithmetic); "
                            "it depends on the data")
        return vals


def _check_arity(ctx: "NodeCtx", node) -> None:
    """Fails naming the node when it has fewer inputs than its ONNX schema requires (at the
    model's opset; ops without a schema in the onnx wheel, com.microsoft's or the dropped
    experimental ones, are left to their handlers)."""
    import onnx

    if node.domain not in ("", "ai.onnx"):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, ctx.opset, "")
    except Exception:  # onnx.defs.SchemaError: no schema for this op at this opset
        return
    if len(node.input) < schema.min_input:
        raise ctx.fail(f"too few inputs: {len(node.input)}, the operator needs at least {schema.min_input}")


# ONNX element types nerve computes with (TensorProto.DataType numbers). Spelt out rather than
# taken from onnx.helper: older onnx wheels map bfloat16 to float32 and the float8/int4 types
# to their storage integers, which would turn such a tensor into another type without a word.
# Strings (8) pass as numpy objects, which no kernel takes: the op that reads them says so.
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
                8: np.object_, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


def np_dtype_of(elem_type):
    """The numpy dtype of an ONNX element type: its number, or its name (Cast-1's `to`)."""
    import onnx

    try:
        if isinstance(elem_type, (str, bytes)):
            elem_type = onnx.TensorProto.DataType.Value(elem_type.decode() if isinstance(elem_type, bytes) else elem_type)
        return np.dtype(_ONNX_DTYPES[int(elem_type)])
    except (KeyError, ValueError, TypeError):
        raise _unsupported_type(elem_type) from None


def _unsupported_type(elem_type) -> CompileError:
    """The error for an ONNX element type outside _ONNX_DTYPES, naming it and what nerve takes."""
    import onnx

    try:
        name = onnx.TensorProto.DataType.Name(int(elem_type))
    except (ValueError, TypeError):
        name = str(elem_type)
    kinds = sorted({np.dtype(d).name for d in _ONNX_DTYPES.values()} - {"object"})
    return CompileError(f"ONNX element type {name} is not supported by nerve (it computes in {', '.join(kinds)})")


def dim_symbol(input_name: str, k: int, dim) -> Optional[str]:
    """The symbol of dimension k of a graph input, None when it has a fixed size. A dimension
    with no name, a negative size (-1 in Paddle exports) or a name that is no identifier
    ("?", which Paddle2ONNX writes on several dimensions that differ) is its own symbol,
    <input>_dim<k>; a real name is shared by every dimension that carries it."""
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return None
    p = dim.dim_param
    return p if p and any(ch.isalnum() for ch in p) else f"{input_name}_dim{k}"


# Why the ops nerve has no handler for are missing, for the message a user gets.
_UNSUPPORTED_WHY = {
    **{op: "optional values and SequenceMap are not supported (sequences of a length known when the model "
           "is compiled are: SplitToSequence, SequenceConstruct/At/Length/Insert/Erase/Empty, ConcatFromSequence)"
       for op in ("SequenceMap", "Optional", "OptionalGetElement", "OptionalHasElement")},
    **{op: "sampling ops are not supported (RandomNormal and RandomUniform and their *Like forms are; feed "
           "the samples as an input)" for op in ("Bernoulli", "Multinomial")},
    **{op: "string ops are not supported" for op in ("StringNormalizer", "StringConcat", "StringSplit",
                                                     "RegexFullMatch", "TfIdfVectorizer")},
}


def _unsupported_reason(op_type: str) -> str:
    why = _UNSUPPORTED_WHY.get(op_type)
    return f": {why}" if why else ""


# ops that take float16 and float64 inputs as they are; every other op reads them as float32
_ANY_FLOAT_WIDTH = frozenset({"Cast", "CastLike", "Shape", "Size"})

def _computed_in_float32(v) -> bool:
    """Whether an op reads v as float32 (Importer.as_float32): float16 values, and float64 ones
    the model computes from its float32 data (a Cast to double, double constants). A float64
    graph input stays as fed — its values may lie past float32's range — so arithmetic on it
    is refused with the reason, where rounding would give inf or 0 without a word."""
    if v is None or v.dtype not in (np.float16, np.float64):
        return False
    return v.dtype == np.float16 or not v.root().is_input


# ops that take or make a SequenceValue (onnx_ops_composite.py)
SEQUENCE_OPS = frozenset({"SplitToSequence", "SequenceConstruct", "SequenceAt", "SequenceLength", "SequenceInsert",
                          "SequenceErase", "SequenceEmpty", "ConcatFromSequence"})


class SequenceValue:
    """An ONNX sequence whose length is known when the model is compiled (SplitToSequence of
    known sizes, SequenceConstruct, ...): its tensors as a list, at import only. The sequence
    ops pick, insert and concatenate them; a sequence never reaches the plan (an op other
    than those, or a graph output, taking one fails clearly). TorchScript exports write them
    for torch.split (Mamba)."""

    dtype = None  # not a tensor: the float16 widening of inputs passes it by

    def __init__(self, items):
        self.items = list(items)


class Importer:
    def __init__(self, model, model_dir: Optional[Path], dims: Mapping[str, int], fold: bool = True):
        self.model = model
        self.model_dir = Path(model_dir) if model_dir is not None else None  # None: an in-memory model
        self.dims = dict(dims)
        self.b = Builder(fold=fold)
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.symbols: Dict[str, int] = {}
        # node name -> times a random node of that name was imported (its generator key, onnx_ops._random_seed)
        self.random_nodes: Dict[str, int] = {}
        # uid of a DynamicQuantizeLinear's y -> (its float input, scale, zero point): a product
        # of y that dequantises it again (MatMulIntegerToFloat) reads the float input instead
        self.dynamic_quant: Dict[int, tuple] = {}
        # tensors of the If branches folded in (condition known at compile time): always
        # computed, so they may be asked for as outputs (calibration taps, debugging)
        self.branch_values: Dict[str, Value] = {}
        self.widened: Dict[int, Value] = {}  # uid of a float16 value -> it as float32 (as_float32)
        # initializers of element types nerve does not compute in (bfloat16, float8, int4, ...)
        # -> the error a node that reads one gets
        self.unsupported_initializers: Dict[str, str] = {}
        # id(graph) -> the node list to import instead of graph.node (onnx_qdq.rewrite_qdq)
        self.node_override: Dict[int, Optional[list]] = {}

    # ---- tensors
    def load_initializer(self, tensor) -> np.ndarray:
        import onnx
        from onnx import numpy_helper

        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            self._load_external(tensor)
        try:
            return numpy_helper.to_array(tensor)
        except Exception as exc:  # noqa: BLE001 - onnx raises many kinds for bad data
            raise CompileError(f"initializer '{tensor.name}' cannot be read: {exc}") from exc

    def _load_external(self, tensor) -> None:
        """Reads external data into the tensor, refusing paths that leave the model's folder
        (absolute, '..', or through a symlink)."""
        import onnx

        info = {e.key: e.value for e in tensor.external_data}
        loc = info.get("location", "")
        if self.model_dir is None:
            raise CompileError(f"initializer '{tensor.name}': its data is in an external file ({loc!r}), which an "
                               "in-memory model cannot name: compile the model from its .onnx path")
        if not loc or os.path.isabs(loc) or loc.startswith(("/", "\\")):
            raise CompileError(f"initializer '{tensor.name}': external data location {loc!r} must be a relative path")
        base = self.model_dir.resolve()
        target = self.model_dir / loc
        # every component must be a plain file/folder inside the model folder
        walk = self.model_dir
        for part in Path(loc).parts:
            if part in ("..", ""):
                raise CompileError(f"initializer '{tensor.name}': external data path {loc!r} leaves the model folder")
            walk = walk / part
            if walk.is_symlink():
                raise CompileError(f"initializer '{tensor.name}': external data path {loc!r} goes through a symlink")
        real = target.resolve()
        if base not in real.parents:
            raise CompileError(f"initializer '{tensor.name}': external data path {loc!r} leaves the model folder")
        if not real.is_file():
            raise CompileError(f"initializer '{tensor.name}': external data file {loc!r} not found next to the model")
        size = real.stat().st_size
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            raise CompileError(f"initializer '{tensor.name}': external data offset/length must be integers, got "
                               f"{info.get('offset')!r} / {info.get('length')!r}") from None
        if offset < 0 or length < 0 or offset + length > size:
            raise CompileError(f"initializer '{tensor.name}': external data {loc!r} is truncated "
                               f"(needs bytes {offset}..{offset + length}, the file has {size})")
        with open(real, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]

    def input_value(self, vi, index: int) -> Value:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise CompileError(f"input '{vi.name}' is not a tensor (sequences and maps are not supported)")
        try:
            dtype = np_dtype_of(tt.elem_type)
        except CompileError as exc:
            raise CompileError(f"input '{vi.name}': {exc}") from None
        shape = []
        if not tt.HasField("shape"):
            raise CompileError(f"input '{vi.name}' has no declared rank")
        for k, d in enumerate(tt.shape.dim):
            name = dim_symbol(vi.name, k, d)
            if name is None:
                shape.append(int(d.dim_value))
            else:
                self.symbols.setdefault(name, None)
                shape.append(S.sym(name))
        v = Value(vi.name, dtype, shape)
        v.is_input = True
        return v

    # ---- graphs
    def run_graph(self, graph, scope: Dict[str, Value]) -> None:
        """Imports graph's initializers and nodes into scope (names -> values)."""
        outer = getattr(self, "current_scope", None)
        self.current_scope = scope  # what an If branch sees of the enclosing graph
        try:
            self._run_nodes(graph, scope)
        finally:
            self.current_scope = outer

    def _run_nodes(self, graph, scope: Dict[str, Value]) -> None:
        for t in graph.initializer:
            if t.data_type in _ONNX_DTYPES:
                scope[t.name] = self.b.const(self.load_initializer(t), t.name)
            else:  # refused where a node reads it: an unused one (metadata, a leftover) is no error
                self.unsupported_initializers[t.name] = f"initializer '{t.name}': {_unsupported_type(t.data_type)}"
        for t in getattr(graph, "sparse_initializer", []):
            raise CompileError(f"sparse initializer '{t.values.name}' is not supported")
        nodes = self.node_override.get(id(graph)) or graph.node
        for i, node in enumerate(nodes):
            ctx = NodeCtx(self, node, i)
            if node.domain not in ("", "ai.onnx"):
                fn = _DOMAIN_HANDLERS.get((node.domain, node.op_type))
                if fn is None:
                    known = sorted(t for d, t in _DOMAIN_HANDLERS if d == node.domain)
                    raise ctx.fail(f"operator of domain '{node.domain}' not supported by nerve (supported there: "
                                   f"{known})" if known else f"operator domain '{node.domain}' is not supported")
            else:
                fn = _HANDLERS.get(node.op_type)
            if fn is None:
                raise ctx.fail(f"operator not supported by nerve{_unsupported_reason(node.op_type)}")
            ins = []
            for name in node.input:
                if not name:
                    ins.append(None)
                elif name not in scope:
                    if name in self.unsupported_initializers:
                        raise ctx.fail(self.unsupported_initializers[name])
                    raise ctx.fail(f"input '{name}' is not defined before the node")
                else:
                    ins.append(scope[name])
            if node.op_type not in SEQUENCE_OPS and any(isinstance(v, SequenceValue) for v in ins):
                raise ctx.fail("takes a sequence, which only the sequence ops (SequenceAt, ConcatFromSequence, ...) "
                               "read in a plan")
            if node.op_type not in _ANY_FLOAT_WIDTH:
                ins = [self.as_float32(v) if _computed_in_float32(v) else v for v in ins]
            _check_arity(ctx, node)
            try:
                outs = fn(ctx, ins)
            except IndexError as e:  # a handler reading an attribute value the node lacks
                raise ctx.fail(f"an attribute value it needs is missing ({e})") from e
            for name, v in zip(node.output, outs):
                if name:
                    scope[name] = v

    def as_float32(self, v: Value) -> Value:
        """v (float16 or float64) as float32, once per value: nerve computes in float32. Float16
        graphs (fp16 exports, onnxconverter-common's conversions): every op reads its float16
        inputs widened (exactly), a Cast to float16 still rounds. Float64 sections computed from
        float32 data (an exporter's Cast to double, as multi-scale deformable attention writes
        its sampling locations; not a float64 graph input, _computed_in_float32): rounded to
        float32, where onnxruntime computes in double. Outputs declared float16 or float64 are
        cast back (import_model). A constant is converted at compile time."""
        got = self.widened.get(v.uid)
        if got is None:
            if v.const is not None:
                got = self.b.const(np.asarray(v.const, np.float32), self.b.fresh(v.name + ".f32"))
            else:
                got = self.b.emit("cast", [v], [(self.b.fresh(v.name + ".f32"), np.dtype(np.float32), v.shape)],
                                  name=v.name + ".f32")[0]
            self.widened[v.uid] = got
        return got

    def _constant_input(self, vi, value) -> Value:
        """A graph input fixed at compile time: folded like an initializer (an If on it is
        specialised, the ops that only depend on it disappear)."""
        known_symbols = dict(self.symbols)
        declared = self.input_value(vi, 0)
        self.symbols = known_symbols  # its symbols are bound by the value, not free
        arr = np.asarray(value)
        if arr.dtype != declared.dtype:
            cast = arr.astype(declared.dtype)
            if not np.array_equal(cast.astype(arr.dtype), arr):
                raise CompileError(f"constants: value of input '{vi.name}' does not fit its dtype {declared.dtype}")
            arr = cast
        ok = arr.ndim == declared.rank and all(
            not S.is_static(d) or int(d) == n for d, n in zip(declared.shape, arr.shape))
        if not ok:
            raise CompileError(f"constants: input '{vi.name}' is declared {[str(d) for d in declared.shape]}, "
                               f"the value has shape {list(arr.shape)}")
        return self.b.const(np.ascontiguousarray(arr), vi.name)

    def import_model(self, state: Mapping[str, str], constants: Optional[Mapping[str, object]] = None,
                     keep_outputs: Optional[Sequence[str]] = None) -> Program:
        g = self.model.graph
        init_names = {t.name for t in g.initializer}
        constants = dict(constants or {})
        graph_inputs = [x for x in g.input if x.name not in init_names]
        unknown = sorted(set(constants) - {x.name for x in graph_inputs})
        if unknown:
            raise CompileError(f"constants: {unknown} are not inputs of the model "
                               f"(inputs: {[x.name for x in graph_inputs]})")
        scope: Dict[str, Value] = {}
        inputs = []
        for vi in graph_inputs:
            if vi.name in constants:
                continue
            v = self.input_value(vi, len(inputs))
            inputs.append(v)
            scope[vi.name] = v
        for vi in graph_inputs:
            if vi.name in constants:
                scope[vi.name] = self._constant_input(vi, constants[vi.name])
        missing = sorted(n for n in self.symbols if n not in self.dims)
        if missing:
            shapes = {v.name: [str(d) for d in v.shape] for v in inputs if not v.static}
            declared = [{"name": v.name, "dtype": v.dtype, "shape": [int(d) if S.is_static(d) else str(d)
                                                                     for d in v.shape]} for v in inputs]
            kept = [vi.name for vi in g.output if keep_outputs is None or vi.name in set(keep_outputs)]
            raise UnboundDims(f"the model has symbolic dimensions {missing} (inputs: {shapes}); give each an upper "
                              f"bound, e.g. dims={{{', '.join(repr(m) + ': N' for m in missing)}}}", missing,
                              declared, kept)
        for n in self.symbols:
            if not 0 <= int(self.dims[n]) < 2 ** 62:
                raise CompileError(f"bound of dimension '{n}' must be in [0, 2**62), got {self.dims[n]}")
        from .onnx_qdq import rewrite_qdq

        # DQ → Conv/MatMul → Q as onnxruntime fuses them (its integer arithmetic); the model
        # itself (perhaps the caller's ModelProto) is left as it is
        self.node_override = {id(g): rewrite_qdq(g)}
        self.run_graph(g, scope)
        graph_outputs = list(g.output)
        if keep_outputs is not None:
            names = [vi.name for vi in graph_outputs]
            unknown = sorted(set(keep_outputs) - set(names))
            if unknown:
                raise CompileError(f"outputs: {unknown} are not outputs of the model (outputs: {names})")
            graph_outputs = [vi for vi in graph_outputs if vi.name in set(keep_outputs)]
        outputs = []
        for vi in graph_outputs:
            v = scope.get(vi.name, self.branch_values.get(vi.name))
            if v is None:
                raise CompileError(f"graph output '{vi.name}' is not computed by any node")
            if isinstance(v, SequenceValue):
                raise CompileError(f"graph output '{vi.name}' is a sequence; a plan's outputs are tensors "
                                   "(output its elements, or their ConcatFromSequence)")
            declared = vi.type.tensor_type.elem_type  # 0: the output's type is left to inference
            if declared and declared not in _ONNX_DTYPES:
                raise CompileError(f"output '{vi.name}': {_unsupported_type(declared)}")
            if v.dtype == np.float32 and declared and np_dtype_of(declared) in (np.float16, np.float64):
                # computed in float32 (as_float32; float64 constants are folded to float32), declared wider or narrower
                v = self.b.emit("cast", [v], [(self.b.fresh(vi.name), np_dtype_of(declared), v.shape)],
                                name=vi.name, fold=False)[0]
            v = self.b.materialize(v)
            if v.name != vi.name or v in outputs:
                v = self.b.alias(v, v.shape, vi.name)  # its own name, same bytes
            outputs.append(v)
        states = []
        out_names = [o.name for o in graph_outputs]
        in_names = [v.name for v in inputs]
        for out_name, in_name in (state or {}).items():
            if out_name not in out_names:
                raise CompileError(f"state: '{out_name}' is not an output of the model (outputs: {out_names})")
            if in_name not in in_names:
                raise CompileError(f"state: '{in_name}' is not an input of the model (inputs: {in_names})")
            o, i = outputs[out_names.index(out_name)], inputs[in_names.index(in_name)]
            if o.dtype != i.dtype or o.rank != i.rank:
                raise CompileError(f"state: output '{out_name}' ({o.dtype}, rank {o.rank}) cannot feed input "
                                   f"'{in_name}' ({i.dtype}, rank {i.rank})")
            r = o.root()
            if r.const is not None or r.is_input or r.producer is None or r.producer.type in ("label",):
                o = self.b.emit("copy", [o], [(out_name + ".state", o.dtype, o.shape)], name=out_name, fold=False)[0]
                outputs[out_names.index(out_name)] = o
            states.append((in_names.index(in_name), out_names.index(out_name)))
        symbols = {n: int(self.dims[n]) for n in self.symbols}
        return Program(ops=self.b.ops, inputs=inputs, outputs=outputs, symbols=symbols, binds=[], states=states)
