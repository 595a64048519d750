"""Builder: how the importer emits runtime ops, with constant folding built in.

:meth:`Builder.emit` appends a runtime op — unless every input is a constant and every output
shape is static, in which case the op is executed right away *by the C runtime itself* (a
one-op plan) and its outputs become constants. So folding uses exactly the kernels a run
uses; there is no second implementation of any op in Python.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import symbolic as S
from .graph import CompileError, Label, Op, Program, Value
from .symbolic import Dim

# Folding a constant larger than this would bloat the plan file (e.g. Expand of a scalar to
# a big tensor); such ops stay in the plan.
FOLD_MAX_OUTPUT_BYTES = 64 << 20


class Builder:
    def __init__(self, fold: bool = True):
        self.ops: List[Op] = []
        self.fold = fold
        self._names = 0

    # ---- values
    def fresh(self, hint: str) -> str:
        self._names += 1
        return f"{hint}#{self._names}"

    def const(self, array, name: Optional[str] = None) -> Value:
        arr = np.asarray(array)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        v = Value(name or self.fresh("const"), arr.dtype, arr.shape, const=np.ascontiguousarray(arr))
        if arr.dtype.kind in "iu" and arr.ndim <= 1 and arr.size <= 64:
            v.symval = [int(x) for x in arr.reshape(-1)]
        return v

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
            return self.const(v.const.reshape([int(d) for d in shape]), name)
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
        return total <= FOLD_MAX_OUTPUT_BYTES

    def _run_now(self, op: Op) -> List[Value]:
        from ..session import run_program_once  # the runtime; imported late (it imports us)

        prog = Program(ops=[op], inputs=[], outputs=list(op.outputs), symbols={}, binds=[])
        results = run_program_once(prog)
        return [self.const(arr, v.name) for arr, v in zip(results, op.outputs)]

    # ---- control flow
    def label(self, name: str) -> Label:
        return Label(name)

    def place(self, label: Label) -> None:
        self.ops.append(Op("label", [], [], iattr=[label]))
