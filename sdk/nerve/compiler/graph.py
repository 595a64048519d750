"""The compiler's IR: values and the runtime ops that produce them.

The importer (``onnx_import.py``) turns each ONNX node into zero or more *runtime ops* —
the op types the C runtime implements (``native/src/plan/op_*.c``) — through a
:class:`Builder`. So the IR is already the plan's op list; the passes (fusion, dead-op
elimination, memory planning) rewrite it and ``planfile.py`` serialises it.

A :class:`Value` is a tensor: a dtype, a shape of dims (``int`` or symbolic
:class:`~nerve.compiler.symbolic.Expr`), and optionally

* ``const``: its contents, known at compile time (weights, folded arithmetic);
* ``symval``: for small integer tensors (shapes and the arithmetic around them), the
  element values as dims — known at compile time as expressions of the symbolic sizes;
* ``alias_of``: it shares the bytes of another value (a reshape is free).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import symbolic as S
from .symbolic import Dim

__all__ = ["Value", "Op", "Program", "NRV_DTYPES", "dtype_code", "CompileError"]

# numpy dtype -> nrv_dtype code (nerve.h)
NRV_DTYPES = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.int64): 4,
    np.dtype(np.uint8): 5,
    np.dtype(np.bool_): 6,
    np.dtype(np.float64): 7,
}


class CompileError(Exception):
    """A model the compiler cannot turn into a plan; the message names the node and why.
    Converted to :class:`nerve.ModelError` at the API boundary."""


class UnboundDims(CompileError):
    """Symbolic dimensions without a bound (``missing``: their names; ``inputs``: the graph's
    inputs as [{"name", "dtype", "shape": [int | dim name]}]; ``outputs``: the output names kept);
    becomes :class:`nerve.UnboundDimsError`."""

    def __init__(self, message: str, missing, inputs, outputs):
        super().__init__(message)
        self.missing, self.inputs, self.outputs = list(missing), list(inputs), list(outputs)


def dtype_code(dt) -> int:
    dt = np.dtype(dt)
    if dt not in NRV_DTYPES:
        raise CompileError(f"dtype {dt} is not supported by the nerve runtime")
    return NRV_DTYPES[dt]


_ids = itertools.count()


class Value:
    __slots__ = ("name", "dtype", "shape", "const", "symval", "alias_of", "producer", "uid", "is_input",
                 "state_of")

    def __init__(self, name: str, dtype, shape: Sequence[Dim], const: Optional[np.ndarray] = None,
                 symval: Optional[List[Dim]] = None):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.const = const
        self.symval = symval
        self.alias_of: Optional[Value] = None
        self.producer: Optional[Op] = None
        self.uid = next(_ids)
        self.is_input = False
        self.state_of: Optional[int] = None  # index of the state pair this output value feeds

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def static(self) -> bool:
        return all(S.is_static(d) for d in self.shape)

    def numel(self) -> Dim:
        return S.prod(self.shape)

    def root(self) -> "Value":
        v = self
        while v.alias_of is not None:
            v = v.alias_of
        return v

    def __repr__(self):
        kind = "const" if self.const is not None else ("symval" if self.symval is not None else "tensor")
        return f"<{kind} {self.name} {self.dtype} {list(self.shape)}>"


@dataclass(eq=False)
class Op:
    """One runtime op: ``type`` is a C op type string ("conv", "binary", ...) or a control op
    ("if", "jump", "label", "set_dim"). ``iattr`` entries may be :class:`Label` objects for
    control flow, or a :class:`SymbolRef` (set_dim); ``dattr`` entries are dims evaluated per run."""

    type: str
    inputs: List[Optional[Value]]
    outputs: List[Value]
    iattr: List = field(default_factory=list)
    fattr: List[float] = field(default_factory=list)
    dattr: List[Dim] = field(default_factory=list)
    scratch: Optional[Value] = None
    name: str = ""
    inplace: bool = False  # output may take the bytes of input 0 when that input dies here


class Label:
    """A jump target inside a program (resolved to an op index when serialised)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class SymbolRef:
    """A symbol named in an op's integer attributes (set_dim: the size it sets), resolved to
    the symbol's index when serialised."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


@dataclass
class Program:
    ops: List[Op]
    inputs: List[Value]
    outputs: List[Value]
    symbols: Dict[str, int]            # symbol -> upper bound
    binds: List[tuple]                 # (input index, axis, symbol)
    states: List[tuple] = field(default_factory=list)  # (input index, output index[, flags])
