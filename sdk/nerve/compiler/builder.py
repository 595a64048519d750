"""Builder: how the importer emits runtime ops, with constant folding built in.

:meth:`Builder.emit` appends a runtime op — unless every input is a constant and every output
shape is static, in which case the op is executed right away *by the C runtime itself* (a
one-op plan) and its outputs become constants. So folding uses exactly the kernels a run
uses; there is no second implementation of any op in Python.

Int8 provenance: models that store weights as int8 dequantise them in the graph,
``W = Cast(q) * s + z`` (s, z small constants). Folding turns that into an fp32 constant,
and that constant also records where it came from: it is an :class:`AffineInt8Value` whose
``int8_affine = (q, s, z)`` satisfies ``const == q * s + z`` (numpy broadcasting; s, z are
float64 arrays of at most q's rank). The record follows a folded Cast from int8, Mul or Div
by a small constant, Add or Sub of one, Transpose, and reshapes when s and z are scalars.
A constant created later with exactly the contents of such a value, or of its transpose
(MatMul hands ``linear`` its weight transposed), gets the matching record too: equal
contents make the record valid whatever the path. ``passes.select_linear_w8`` reads it to
keep the weight int8 (op ``linear_w8``).
"""

from __future__ import annotations

import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import symbolic as S
from .graph import CompileError, Label, Op, Program, Value
from .symbolic import Dim

# Binary codes (op_elementwise.c) an int8 provenance record follows.
_B_ADD, _B_SUB, _B_MUL, _B_DIV = 0, 1, 2, 3


class AffineInt8Value(Value):
    """A constant folded from int8 data: ``const == q * s + z`` (see the module docstring)."""

    __slots__ = ("int8_affine", "__weakref__")


def int8_affine(v: Optional[Value]):
    """The (q, s, z) record of a constant folded from int8 data, else None."""
    return getattr(v, "int8_affine", None) if v is not None else None


def _as_rank(a: np.ndarray, rank: int) -> np.ndarray:
    return a.reshape((1,) * (rank - a.ndim) + a.shape)


def _int8_chain_step(op: Op) -> bool:
    """Could folding op extend an int8 weight's record (the cases _affine_of_fold handles)?"""
    ins = [v for v in op.inputs if v is not None]
    if op.type == "cast":
        return len(ins) == 1 and ins[0].dtype == np.int8 and all(v.dtype == np.float32 for v in op.outputs)
    if op.type in ("transpose", "binary"):
        return any(int8_affine(v) is not None for v in ins)
    return False


def _affine_of_fold(op: Op, out: np.ndarray):
    """The int8 record of a folded op's output (one output), or None."""
    ins = op.inputs
    if op.type == "cast" and len(ins) == 1 and ins[0] is not None and ins[0].dtype == np.int8 \
            and out.dtype == np.float32:
        return ins[0].const, np.ones((), np.float64), np.zeros((), np.float64)
    if op.type == "transpose" and len(ins) == 1 and int8_affine(ins[0]) is not None:
        q, s, z = int8_affine(ins[0])
        perm = [int(p) for p in op.iattr]
        return (np.ascontiguousarray(np.transpose(q, perm)), np.transpose(_as_rank(s, q.ndim), perm),
                np.transpose(_as_rank(z, q.ndim), perm))
    if op.type != "binary" or len(ins) != 2 or ins[0] is None or ins[1] is None or out.dtype != np.float32:
        return None
    code = int(op.iattr[0])
    if code not in (_B_ADD, _B_SUB, _B_MUL, _B_DIV):
        return None
    side = 0 if int8_affine(ins[0]) is not None else (1 if int8_affine(ins[1]) is not None else -1)
    if side < 0:
        return None
    q, s, z = int8_affine(ins[side])
    c = ins[1 - side].const.astype(np.float64)
    # the constant must not widen the weight, and stays small (a scale per row or column)
    if out.shape != q.shape or c.ndim > q.ndim or c.size > max(q.shape + (1,)):
        return None
    if code == _B_MUL:
        return q, s * c, z * c
    if code == _B_ADD:
        return q, s, z + c
    if code == _B_SUB:
        return (q, s, z - c) if side == 0 else (q, -s, c - z)
    if code == _B_DIV and side == 0:
        return q, s / c, z / c
    return None


# Folding a constant larger than this would bloat the plan file (e.g. Expand of a scalar to
# a big tensor); such ops stay in the plan.
FOLD_MAX_OUTPUT_BYTES = 64 << 20
# ... except along an int8 weight's dequantisation chain (Cast from int8, then Mul/Add/Sub/Div
# by small constants, Transpose): folding it is what records the weight's int8 form, which
# the int8 ops (linear_w8, linear_w8a8, gather_q8) keep instead of the fp32 tensor; an LLM's
# 11008 x 4096 layer is 172 MiB in fp32, and left unfolded it was dequantised on every run.
FOLD_MAX_INT8_CHAIN_BYTES = 1 << 30


class Builder:
    def __init__(self, fold: bool = True):
        self.ops: List[Op] = []
        self.fold = fold
        self._names = 0
        self._affine_2d: dict = {}  # shape -> [weakref to an AffineInt8Value of that 2-D shape]

    # ---- values
    def fresh(self, hint: str) -> str:
        self._names += 1
        return f"{hint}#{self._names}"

    def const(self, array, name: Optional[str] = None) -> Value:
        arr = np.asarray(array)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        aff = self._match_affine(arr)
        v = Value(name or self.fresh("const"), arr.dtype, arr.shape, const=np.ascontiguousarray(arr)) \
            if aff is None else self._affine_value(name or self.fresh("const"), arr, aff)
        if arr.dtype.kind in "iu" and arr.ndim <= 1 and arr.size <= 64:
            v.symval = [int(x) for x in arr.reshape(-1)]
        return v

    # ---- int8 provenance (module docstring)
    def _affine_value(self, name: str, arr: np.ndarray, aff) -> Value:
        v = AffineInt8Value(name, arr.dtype, arr.shape, const=np.ascontiguousarray(arr))
        v.int8_affine = aff
        if arr.ndim == 2:
            self._affine_2d.setdefault(tuple(arr.shape), []).append(weakref.ref(v))
        return v

    def _match_affine(self, arr: np.ndarray):
        """The record of an earlier int8-folded 2-D value with exactly arr's contents (or its
        transpose's), else None. Equal contents make the record valid whatever the path."""
        if arr.dtype != np.float32 or arr.ndim != 2 or not self._affine_2d:
            return None
        for transposed in (False, True):
            for r in self._affine_2d.get(tuple(arr.shape[::-1] if transposed else arr.shape), []):
                v = r()
                if v is None:
                    continue
                ref = v.const.T if transposed else v.const
                if ref[:1, :16].tobytes() != np.ascontiguousarray(arr[:1, :16]).tobytes() \
                        or not np.array_equal(ref, arr):
                    continue
                q, s, z = v.int8_affine
                if not transposed:
                    return v.int8_affine
                return (np.ascontiguousarray(q.T), _as_rank(s, 2).T, _as_rank(z, 2).T)
        return None

    def known_values(self, v: Optional[Value]) -> Optional[List[Dim]]:
        """Element values of a small integer tensor known at compile time (as dims), else None."""
        if v is None:
            return None
        if v.symval is not None:
            return list(v.symval)
        if v.const is not None and v.dtype.kind in "iub" and v.const.size <= 4096:
            return [int(x) for x in v.const.reshape(-1)]
        return None

    def from_known(self, values: Sequence[Dim], dtype, shape, name: str) -> Value:
        """A value whose elements are known dims: a constant if all static, else a symval."""
        if all(S.is_static(d) for d in values):
            return self.const(np.array([int(d) for d in values], dtype=dtype).reshape(shape), name)
        v = Value(name, dtype, shape, symval=list(values))
        return v

    def materialize(self, v: Value) -> Value:
        """Makes sure a runtime tensor exists for v (a symval gets a "dims" op writing it)."""
        if v.const is not None or v.producer is not None or v.is_input or v.alias_of is not None:
            return v
        if v.symval is None:
            raise CompileError(f"internal: value '{v.name}' has no producer")
        as_i64 = Value(self.fresh(v.name + ".dims"), np.int64, (len(v.symval),))
        op = Op("dims", [], [as_i64], dattr=list(v.symval), name=v.name)
        as_i64.producer = op
        self.ops.append(op)
        if v.dtype == np.int64:
            v.alias_of = as_i64  # v keeps its own dims (any rank) over the flat values
            return v
        out = self.emit("cast", [as_i64], [(v.name + ".cast", v.dtype, v.shape)], name=v.name)[0]
        v.alias_of = out
        return v

    def alias(self, v: Value, shape: Sequence[Dim], name: str) -> Value:
        """A reshape: same bytes, new dims (free at run time)."""
        if v.const is not None:
            arr = v.const.reshape([int(d) for d in shape])
            aff = int8_affine(v)
            if aff is not None and aff[1].size == 1 and aff[2].size == 1:
                return self._affine_value(name, arr, (aff[0].reshape(arr.shape), aff[1].reshape(()),
                                                      aff[2].reshape(())))
            return self.const(arr, name)
        out = Value(name, v.dtype, shape)
        if v.symval is not None:
            out.symval = list(v.symval)
            if v.producer is None and not v.is_input and v.alias_of is None:
                return out  # still a compile-time value; materialised on demand
        out.alias_of = v
        return out

    # ---- ops
    def emit(self, op_type: str, inputs: Sequence[Optional[Value]], outputs: Sequence[Tuple[str, object, Sequence[Dim]]],
             iattr=(), fattr=(), dattr=(), scratch_bytes: Optional[Dim] = None, name: str = "",
             inplace: bool = False, fold: bool = True) -> List[Value]:
        ins = [self.materialize(v) if v is not None else None for v in inputs]
        outs = [Value(n, dt, shp) for n, dt, shp in outputs]
        scratch = None
        if scratch_bytes is not None and not (S.is_static(scratch_bytes) and int(scratch_bytes) == 0):
            scratch = Value(self.fresh((name or op_type) + ".scratch"), np.uint8, (scratch_bytes,))
        op = Op(op_type, ins, outs, list(iattr), [float(x) for x in fattr], list(dattr), scratch, name, inplace)
        if fold and self.fold and self._foldable(op):
            return self._run_now(op)
        for v in outs:
            v.producer = op
        self.ops.append(op)
        return outs

    def _foldable(self, op: Op) -> bool:
        if any(v is not None and v.const is None for v in op.inputs):
            return False
        if not all(v.static for v in op.outputs) or not all(S.is_static(d) for d in op.dattr):
            return False
        if op.scratch is not None and not op.scratch.static:
            return False
        total = sum(int(np.prod([int(d) for d in v.shape])) * v.dtype.itemsize for v in op.outputs)
        if total <= FOLD_MAX_OUTPUT_BYTES:
            return True
        return total <= FOLD_MAX_INT8_CHAIN_BYTES and _int8_chain_step(op)

    def _run_now(self, op: Op) -> List[Value]:
        from ..session import run_program_once  # the runtime; imported late (it imports us)

        prog = Program(ops=[op], inputs=[], outputs=list(op.outputs), symbols={}, binds=[])
        results = run_program_once(prog)
        if len(results) == 1:
            aff = _affine_of_fold(op, results[0])
            if aff is not None:
                return [self._affine_value(op.outputs[0].name, results[0], aff)]
        return [self.const(arr, v.name) for arr, v in zip(results, op.outputs)]

    # ---- control flow
    def label(self, name: str) -> Label:
        return Label(name)

    def place(self, label: Label) -> None:
        self.ops.append(Op("label", [], [], iattr=[label]))
