"""Handlers for the core ONNX operators: elementwise math, shape manipulation and the shape
arithmetic around it, indexing, reductions, matrix products, normalisation, Conv, If.

Each handler checks what it supports, computes output dtypes and (symbolic) shapes, and emits
runtime ops whose attribute layouts are documented at the C run functions
(``native/src/plan/op_*.c``). Integer tensors whose values are known at compile time
("symvals": shapes and the arithmetic on them) are computed here, on dims, and never reach
the runtime unless a data op consumes them.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import symbolic as S
from .graph import Op, SymbolRef, Value
from .onnx_import import NodeCtx, handler
from .symbolic import Dim

INT64_MAX = 2 ** 63 - 1

# ---------------------------------------------------------------- shape helpers


def broadcast_shapes(ctx: NodeCtx, *shapes: Sequence[Dim]) -> List[Dim]:
    rank = max(len(s) for s in shapes)
    out: List[Dim] = []
    for i in range(rank):
        dims = [s[i - (rank - len(s))] for s in shapes if i - (rank - len(s)) >= 0]
        d: Dim = 1
        for x in dims:
            if S.is_static(x) and int(x) == 1:
                continue
            if S.is_static(d) and int(d) == 1:
                d = x
            elif x == d:
                continue
            elif S.is_static(x) and S.is_static(d):
                raise ctx.fail(f"shapes {[list(s) for s in shapes]} do not broadcast (axis {i}: {d} vs {x})")
            elif S.is_static(d):
                d = d  # a symbolic extent must equal the static one (checked at run time)
            elif S.is_static(x):
                d = x
            else:
                d = S.dim_max(d, x)
        out.append(d)
    return out


def norm_axis(ctx: NodeCtx, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def spec(name: str, dtype, shape) -> tuple:
    return (name, np.dtype(dtype), tuple(shape))


def float32_input(ctx: NodeCtx, v: Optional[Value], what: str) -> Optional[Value]:
    """v (None passes) if it is float32, as ops that compute in float32 only take it: float16
    values, and the float64 ones a model computes, arrive widened or rounded to float32
    (Importer.as_float32); anything else fails naming the node and the input."""
    if v is not None and v.dtype != np.float32:
        raise ctx.fail(f"{what} of {v.dtype} is not supported (float32; float16 and computed float64 values "
                       "are read as float32)")
    return v


# ---------------------------------------------------------------- trivial and constants


@handler("Identity", "Dropout")
def _identity(ctx: NodeCtx, ins):
    if ctx.op_type == "Dropout":
        # inference: an identity, unless the graph asks for training-mode dropout (random masks)
        training = ins[2] if len(ins) > 2 else None
        if training is not None:
            known = ctx.b.known_values(training)
            if known is None or not all(S.is_static(v) for v in known):
                raise ctx.fail("training_mode must be a constant false (nerve runs inference only)")
            if any(int(v) for v in known):
                raise ctx.fail("training_mode is true: training-mode dropout is not supported (inference only)")
        if len(ctx.outputs) > 1 and ctx.outputs[1]:
            mask = ctx.b.const(np.ones([int(d) for d in ins[0].shape], dtype=bool)) if ins[0].static else None
            if mask is None:
                raise ctx.fail("the mask output of Dropout is not supported for symbolic shapes")
            return [_same(ctx, ins[0]), mask]
    return [_same(ctx, ins[0])]


def _same(ctx: NodeCtx, x: Value) -> Value:
    """x under the node's output name. A compile-time value (a shape) gets its own value: the
    graph output of that name is then materialised under it (Builder.alias of a value that
    was already materialised would lose its "dims" op)."""
    if x.symval is not None and x.producer is None and not x.is_input and x.alias_of is None:
        return ctx.b.from_known(list(x.symval), x.dtype, x.shape, ctx.out_name())
    return x


@handler("Constant")
def _constant(ctx: NodeCtx, ins):
    from onnx import numpy_helper

    a = ctx.attrs
    if "value" in a:
        arr = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        arr = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        arr = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        arr = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        arr = np.array(a["value_ints"], dtype=np.int64)
    else:
        raise ctx.fail(f"Constant with attribute(s) {sorted(a)} is not supported")
    return [ctx.b.const(arr, ctx.out_name())]


@handler("Shape")
def _shape(ctx: NodeCtx, ins):
    x = ins[0]
    r = x.rank
    start = ctx.attr("start", 0)
    end = ctx.attr("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    dims = list(x.shape[start:end])
    return [ctx.b.from_known(dims, np.int64, (len(dims),), ctx.out_name())]


@handler("Size")
def _size(ctx: NodeCtx, ins):
    return [ctx.b.from_known([ins[0].numel()], np.int64, (), ctx.out_name())]


def _known_grid(ctx: NodeCtx, x: Value, *static) -> Optional[np.ndarray]:
    """x's known values (shape arithmetic) as an object array of its static shape, or None:
    Slice, Transpose and Tile keep such values known (torch's pad-list and chunk idioms).
    `static`: more dims that must be static too."""
    known = ctx.b.known_values(x)
    if known is None or not all(S.is_static(d) for d in list(x.shape) + list(static)):
        return None
    return np.array(known, dtype=object).reshape([int(d) for d in x.shape])


def _from_grid(ctx: NodeCtx, grid: np.ndarray, dtype, name: str) -> Value:
    return ctx.b.from_known(list(grid.reshape(-1)), dtype, list(grid.shape), name)


@handler("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx, ins):
    from onnx import numpy_helper

    dims = ctx.known(ins[0], "the shape")
    value = numpy_helper.to_array(ctx.attrs["value"]) if "value" in ctx.attrs else np.zeros(1, np.float32)
    value = value.reshape(-1)
    if value.size != 1:
        raise ctx.fail("value must have one element")
    dt = value.dtype
    if all(S.is_static(d) for d in dims) and int(np.prod([int(d) for d in dims])) <= 4096:
        # a small constant: its values stay known downstream (torch's pad-list idiom concatenates
        # one into the pads of a Pad)
        return [ctx.b.const(np.full([int(d) for d in dims], value[0], dt), ctx.out_name())]
    ival = int(value[0]) if dt.kind in "iub" else 0
    fval = float(value[0]) if dt.kind == "f" else 0.0
    return ctx.b.emit("fill", [], [spec(ctx.out_name(), dt, dims)], iattr=[ival], fattr=[fval], name=ctx.name)


# ---------------------------------------------------------------- reshapes (free: aliases)


def _reshape_to(ctx: NodeCtx, x: Value, target: List[Dim], allowzero: int = 0) -> List[Dim]:
    out: List[Dim] = []
    infer = -1
    for i, d in enumerate(target):
        if S.is_static(d) and int(d) == -1:
            if infer >= 0:
                raise ctx.fail("more than one -1 in the target shape")
            infer = i
            out.append(1)
        elif S.is_static(d) and int(d) == 0 and not allowzero:
            if i >= x.rank:
                raise ctx.fail(f"0 in the target shape at axis {i} copies an axis the input does not have")
            out.append(x.shape[i])
        else:
            out.append(d)
    if infer >= 0:
        known = S.prod(out)
        if S.is_static(known) and int(known) == 0:
            raise ctx.fail("cannot infer -1 next to a zero-size dimension")
        out[infer] = S.dim_floordiv(x.numel(), known)
    total = S.prod(out)
    if S.is_static(total) and S.is_static(x.numel()) and int(total) != int(x.numel()):
        raise ctx.fail(f"cannot reshape {list(x.shape)} ({x.numel()} elements) to {out}")
    return out


@handler("Reshape")
def _reshape(ctx: NodeCtx, ins):
    x = ins[0]
    if ctx.opset < 5:  # Reshape-1: the shape as an attribute
        target = list(ctx.attr("shape", []))
    else:
        target = ctx.known(ins[1] if len(ins) > 1 else None, "the target shape")
    shape = _reshape_to(ctx, x, target, ctx.attr("allowzero", 0))
    return [ctx.b.alias(x, shape, ctx.out_name())]


@handler("Flatten")
def _flatten(ctx: NodeCtx, ins):
    x = ins[0]
    axis = ctx.attr("axis", 1) if x.rank else 0
    if not -x.rank <= axis <= x.rank:
        raise ctx.fail(f"axis {axis} out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis  # in [-r, r]: -1 is r - 1 (not r)
    return [ctx.b.alias(x, [S.prod(x.shape[:axis]), S.prod(x.shape[axis:])], ctx.out_name())]


def _axes_input_or_attr(ctx: NodeCtx, ins, index: int) -> Optional[List[int]]:
    if len(ins) > index and ins[index] is not None:
        return [int(a) for a in ctx.known(ins[index], "axes")]
    a = ctx.attr("axes")
    return None if a is None else [int(x) for x in a]


@handler("Squeeze")
def _squeeze(ctx: NodeCtx, ins):
    x = ins[0]
    axes = _axes_input_or_attr(ctx, ins, 1)
    if axes is None:
        if not x.static and any(not S.is_static(d) for d in x.shape):
            axes = [i for i, d in enumerate(x.shape) if S.is_static(d) and int(d) == 1]
        else:
            axes = [i for i, d in enumerate(x.shape) if int(d) == 1]
    axes = {norm_axis(ctx, a, x.rank) for a in axes}
    for a in axes:
        if S.is_static(x.shape[a]) and int(x.shape[a]) != 1:
            raise ctx.fail(f"cannot squeeze axis {a} of extent {x.shape[a]}")
    shape = [d for i, d in enumerate(x.shape) if i not in axes]
    return [ctx.b.alias(x, shape, ctx.out_name())]


@handler("Unsqueeze")
def _unsqueeze(ctx: NodeCtx, ins):
    x = ins[0]
    axes = _axes_input_or_attr(ctx, ins, 1)
    if axes is None:
        raise ctx.fail("axes are required")
    r = x.rank + len(axes)
    axes = sorted(norm_axis(ctx, a, r) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [ctx.b.alias(x, shape, ctx.out_name())]


# ---------------------------------------------------------------- elementwise

_BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Min": 5, "Max": 6, "Equal": 9, "Less": 10,
           "Greater": 11, "LessOrEqual": 12, "GreaterOrEqual": 13, "And": 14, "Or": 15, "Xor": 16,
           "BitwiseAnd": 17, "BitwiseOr": 18, "BitwiseXor": 19, "BitShiftLeft": 20, "BitShiftRight": 21}
_INTEGER_ONLY = {"BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShiftLeft", "BitShiftRight"}
_COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}


def _nonneg(d: Dim) -> bool:
    """True when d is >= 0 for every run: symbols are sizes (>= 0), and sums and products of
    them with non-negative coefficients, their quotients, min, max stay so."""
    if S.is_static(d):
        return int(d) >= 0
    for mono, c in d.terms.items():
        if c < 0:
            return False
        for atom in mono:
            if atom[0] == "s":
                continue
            op, a, b = atom
            if op in ("floordiv", "min") and not (_nonneg(a) and _nonneg(b)):
                return False
            if op == "max" and not (_nonneg(a) or _nonneg(b)):
                return False
            if op not in ("floordiv", "min", "max"):
                return False
    return True


def _interval(d: Dim):
    if S.is_static(d):
        return int(d), int(d)
    return (0 if _nonneg(d) else -np.inf), np.inf


def _known_compare(op: str, x: Dim, y: Dim) -> Optional[int]:
    """A comparison of dims decided by their ranges (a size never equals -1), else None."""
    (xl, xh), (yl, yh) = _interval(x), _interval(y)
    if op == "Equal":
        return 0 if (xh < yl or yh < xl) else None
    if op in ("Less", "GreaterOrEqual"):
        r = 1 if xh < yl else 0 if xl >= yh else None
        return r if r is None or op == "Less" else 1 - r
    if op in ("Greater", "LessOrEqual"):
        r = 1 if xl > yh else 0 if xh <= yl else None
        return r if r is None or op == "Greater" else 1 - r
    return None


def _known_binary(op: str, x: Dim, y: Dim, fmod: int = 0) -> Optional[Dim]:
    if op == "Add":
        return S.dim_add(x, y)
    if op == "Sub":
        return S.dim_sub(x, y)
    if op == "Mul":
        return S.dim_mul(x, y)
    if op == "Div":
        if S.is_static(x) and S.is_static(y):
            if int(y) == 0:
                return None
            q = abs(int(x)) // abs(int(y))
            return q if (int(x) >= 0) == (int(y) > 0) else -q  # ONNX integer Div truncates
        return S.dim_floordiv(x, y)  # shape arithmetic: sizes are >= 0
    if op == "Pow":
        if S.is_static(x) and S.is_static(y) and int(y) >= 0:
            return int(x) ** int(y)
        return None
    if op == "Min":
        return S.dim_min(x, y)
    if op == "Max":
        return S.dim_max(x, y)
    if op == "Mod":
        if S.is_static(y) and int(y) == 0:
            return None
        if fmod:  # C fmod: the sign of the dividend (dims' mod takes the divisor's)
            if not (S.is_static(x) and S.is_static(y)):
                return None
            r = abs(int(x)) % abs(int(y))
            return -r if int(x) < 0 else r
        return S.dim_mod(x, y)
    if S.is_static(x) and S.is_static(y):
        x, y = int(x), int(y)
        return {"Equal": x == y, "Less": x < y, "Greater": x > y, "LessOrEqual": x <= y,
                "GreaterOrEqual": x >= y}.get(op)
    if op == "Equal" and x == y:
        return 1
    return _known_compare(op, x, y)


def _dims_array(values, shape) -> np.ndarray:
    """Known values (ints and Exprs) as an object array of a static shape, each kept as it is."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr.reshape([int(d) for d in shape])


def binary(ctx: NodeCtx, op: str, a: Value, b: Value, name: str) -> Value:
    """Emits (or computes at compile time) one broadcasting binary op."""
    if a.dtype != b.dtype:
        if op == "Pow" and b.const is not None:
            b = ctx.b.const(b.const.astype(a.dtype))
        elif op == "Pow" and a.dtype.kind == "f" and b.dtype.kind in "iuf":
            # the exponent's dtype may differ from the base's (ONNX Pow): convert it at run time
            b = ctx.b.emit("cast", [b], [spec(ctx.b.fresh(ctx.name + ".exponent"), a.dtype, b.shape)],
                           name=ctx.name)[0]
        else:
            raise ctx.fail(f"operands have different dtypes {a.dtype} and {b.dtype}")
    shape = broadcast_shapes(ctx, a.shape, b.shape)
    out_dtype = np.dtype(bool) if op in _COMPARE else a.dtype
    ka, kb = ctx.b.known_values(a), ctx.b.known_values(b)
    static = all(S.is_static(d) for d in list(a.shape) + list(b.shape) + list(shape))
    if ka is not None and kb is not None and a.dtype.kind in "iub" and static and \
            int(np.prod([int(d) for d in shape])) <= 64:
        # shape arithmetic on dims (any broadcast of a few elements): computed on the dims
        xs, ys = np.broadcast_arrays(_dims_array(ka, a.shape), _dims_array(kb, b.shape))
        fmod = ctx.attr("fmod", 0) if op == "Mod" else 0
        vals = [_known_binary(op, x, y, fmod) for x, y in zip(xs.reshape(-1), ys.reshape(-1))]
        if all(v is not None for v in vals):
            if out_dtype == np.bool_:
                vals = [int(bool(v)) if S.is_static(v) else v for v in vals]
            if all(S.is_static(v) for v in vals) or out_dtype != np.bool_:
                return ctx.b.from_known(vals, out_dtype, shape, name)
    if op == "Pow" and b.const is not None and b.const.size == 1 and a.dtype == np.float32:
        e = float(b.const.reshape(-1)[0])
        if e in (2.0, 0.5, 1.0) and list(shape) == list(a.shape):
            code = {2.0: 24, 0.5: 4, 1.0: 20}[e]  # square, sqrt, identity
            return ctx.b.emit("unary", [a], [spec(name, a.dtype, shape)], iattr=[code], fattr=[0, 0],
                              name=ctx.name, inplace=True)[0]
    if op == "Pow" and a.dtype.kind in "iu":
        # the runtime's pow is float only: a small constant exponent becomes multiplications
        e = kb[0] if kb is not None and len(kb) == 1 and S.is_static(kb[0]) else None
        if e is None or not 1 <= int(e) <= 8 or list(shape) != list(a.shape):
            raise ctx.fail(f"Pow of {a.dtype} is supported for a constant exponent 1..8 only")
        y = a
        for i in range(int(e) - 1):
            y = ctx.b.emit("binary", [y, a], [spec(name if i == int(e) - 2 else ctx.b.fresh(ctx.name), a.dtype, shape)],
                           iattr=[2], name=ctx.name)[0]
        return y if int(e) > 1 else ctx.b.alias(a, shape, name)
    if op not in _BINARY and op != "Mod":
        raise ctx.fail(f"{op} is not a binary op")
    code = _BINARY.get(op)
    if op == "Mod":
        code = 8 if ctx.attr("fmod", 0) else 7
    if a.dtype.kind == "f" and a.dtype != np.float32:
        raise ctx.fail(f"{a.dtype} arithmetic is not supported (float32 only)")
    if op in _INTEGER_ONLY and a.dtype.kind not in "iu":
        raise ctx.fail(f"{ctx.op_type} of {a.dtype} is not defined (integers only)")
    return ctx.b.emit("binary", [a, b], [spec(name, out_dtype, shape)], iattr=[code], name=ctx.name,
                      inplace=list(shape) == list(a.shape) and out_dtype == a.dtype)[0]


@handler("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
         "Xor", "Mod")
def _binary(ctx: NodeCtx, ins):
    a, b = ins[0], ins[1]
    if ctx.opset < 7 and ctx.attr("broadcast", 0) and ctx.attr("axis") is not None:
        # opsets 1-6: B's axes line up with A's from `axis` on (not from the end, as numpy's)
        axis = norm_axis(ctx, int(ctx.attr("axis")), a.rank)
        if axis + b.rank > a.rank:
            raise ctx.fail(f"B of rank {b.rank} does not fit A of rank {a.rank} from axis {axis}")
        b = ctx.b.alias(b, list(b.shape) + [1] * (a.rank - axis - b.rank), ctx.b.fresh(ctx.name))
    return [binary(ctx, ctx.op_type, a, b, ctx.out_name())]


@handler("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _bitwise(ctx: NodeCtx, ins):
    return [binary(ctx, ctx.op_type, ins[0], ins[1], ctx.out_name())]


@handler("BitShift")
def _bitshift(ctx: NodeCtx, ins):
    direction = ctx.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    return [binary(ctx, "BitShift" + direction.title(), ins[0], ins[1], ctx.out_name())]


@handler("Min", "Max", "Sum", "Mean")
def _variadic(ctx: NodeCtx, ins):
    op = {"Sum": "Add", "Mean": "Add"}.get(ctx.op_type, ctx.op_type)
    acc = ins[0]
    for i, v in enumerate(ins[1:]):
        last = i == len(ins) - 2 and ctx.op_type != "Mean"
        acc = binary(ctx, op, acc, v, ctx.out_name() if last else ctx.b.fresh(ctx.name))
    if ctx.op_type == "Mean":
        acc = binary(ctx, "Div", acc, ctx.b.const(np.array(len(ins), dtype=acc.dtype)), ctx.out_name())
    elif len(ins) == 1:
        acc = ctx.b.alias(acc, acc.shape, ctx.out_name())
    return [acc]


_UNARY = {"Neg": 0, "Abs": 1, "Exp": 2, "Log": 3, "Sqrt": 4, "Sin": 5, "Cos": 6, "Erf": 7, "Tanh": 8, "Sigmoid": 9,
          "Relu": 10, "LeakyRelu": 13, "HardSigmoid": 14, "Reciprocal": 16, "Floor": 17, "Ceil": 18, "Not": 19,
          "Softplus": 21, "Sign": 22, "Round": 23, "HardSwish": 25, "Elu": 26, "Selu": 27, "Celu": 28,
          "Softsign": 29, "Mish": 30, "ThresholdedRelu": 31, "Shrink": 32, "Tan": 33, "Atan": 34, "Asin": 35,
          "Acos": 36, "Sinh": 37, "Cosh": 38, "Asinh": 39, "Acosh": 40, "Atanh": 41, "BitwiseNot": 43}
# (p0, p1) of the activations with attributes: ONNX's names and defaults
_UNARY_PARAMS = {"LeakyRelu": (("alpha", 0.01), None), "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
                 "Elu": (("alpha", 1.0), None), "Celu": (("alpha", 1.0), None),
                 "Selu": (("alpha", 1.6732632423543772), ("gamma", 1.0507009873554805)),
                 "ThresholdedRelu": (("alpha", 1.0), None), "Shrink": (("lambd", 0.5), ("bias", 0.0))}


# The codes op "unary" runs on each dtype (run_unary in native/src/plan/op_elementwise.c):
# float32 every code but Not and BitwiseNot; 20 is identity, 24 square.
_UNARY_DTYPE_CODES = {
    np.dtype(np.int64): {_UNARY["Neg"], _UNARY["Abs"], _UNARY["Relu"], _UNARY["Sign"], _UNARY["BitwiseNot"], 20, 24},
    np.dtype(np.uint8): {_UNARY["BitwiseNot"], 20},
    np.dtype(np.bool_): {_UNARY["Not"], 20}}
_UNARY_DTYPE_CODES[np.dtype(np.int32)] = _UNARY_DTYPE_CODES[np.dtype(np.int8)] = _UNARY_DTYPE_CODES[np.dtype(np.int64)]


def unary(ctx: NodeCtx, code: int, x: Value, name: str, p0: float = 0.0, p1: float = 0.0) -> Value:
    if not ((x.dtype == np.float32 and code not in (_UNARY["Not"], _UNARY["BitwiseNot"]))
            or code in _UNARY_DTYPE_CODES.get(x.dtype, ())):
        what = next((op for op, c in _UNARY.items() if c == code), f"unary code {code}")
        raise ctx.fail(f"{what} of {x.dtype} is not supported (float32; integers for Neg, Abs, Relu, Sign, "
                       "BitwiseNot; bool for Not)")
    return ctx.b.emit("unary", [x], [spec(name, x.dtype, x.shape)], iattr=[code], fattr=[p0, p1], name=ctx.name,
                      inplace=True)[0]


@handler(*_UNARY)
def _unary(ctx: NodeCtx, ins):
    x = ins[0]
    k = ctx.b.known_values(x)
    if k is not None and ctx.op_type in ("Neg", "Abs") and x.dtype.kind == "i":
        vals = [S.dim_mul(-1, v) if ctx.op_type == "Neg" else v for v in k]
        if ctx.op_type == "Neg" or all(S.is_static(v) for v in vals):
            if ctx.op_type == "Abs":
                vals = [abs(int(v)) for v in vals]
            return [ctx.b.from_known(vals, x.dtype, x.shape, ctx.out_name())]
    p0 = p1 = 0.0
    if ctx.op_type in _UNARY_PARAMS:
        first, second = _UNARY_PARAMS[ctx.op_type]
        p0 = float(ctx.attr(*first))
        p1 = float(ctx.attr(*second)) if second else 0.0
        if ctx.op_type == "Celu" and p0 == 0.0:
            raise ctx.fail("alpha = 0 is not supported (Celu divides by alpha)")
    return [unary(ctx, _UNARY[ctx.op_type], x, ctx.out_name(), p0, p1)]


@handler("PRelu")
def _prelu(ctx: NodeCtx, ins):
    """max(x, 0) + slope · min(x, 0), slope broadcast to x (ONNX: unidirectionally)."""
    x, slope = ins[0], ins[1]
    if x.dtype != np.float32 or slope.dtype != np.float32:
        raise ctx.fail(f"PRelu on {x.dtype}/{slope.dtype}: float32 only")
    if ctx.opset < 7 and slope.rank == 1 and x.rank > 2 and S.dim_sub(slope.shape[0], x.shape[1]) == 0:
        # before opset 7 a 1-D slope holds one value per channel (axis 1), as PyTorch's old
        # exports of PReLU(num_parameters=C) write it; from 7 on it broadcasts numpy-style
        slope = ctx.b.alias(slope, [slope.shape[0]] + [1] * (x.rank - 2), ctx.b.fresh(ctx.name + ".slope"))
    zero = ctx.b.const(np.array(0.0, np.float32))
    pos = binary(ctx, "Max", x, zero, ctx.b.fresh(ctx.name))
    neg = binary(ctx, "Min", x, zero, ctx.b.fresh(ctx.name))
    return [binary(ctx, "Add", pos, binary(ctx, "Mul", neg, slope, ctx.b.fresh(ctx.name)), ctx.out_name())]


@handler("Gelu")
def _gelu(ctx: NodeCtx, ins):
    approx = ctx.attr("approximate", "none")
    return [unary(ctx, 12 if approx == "tanh" else 11, ins[0], ctx.out_name())]


@handler("Clip")
def _clip(ctx: NodeCtx, ins):
    x = ins[0]
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", -3.4028234663852886e38), ctx.attr("max", 3.4028234663852886e38)
    else:
        present = [(i, op) for i, op in ((1, "Max"), (2, "Min")) if len(ins) > i and ins[i] is not None]
        if x.dtype.kind in "iu" or any(ins[i].const is None for i, _ in present):
            # Max(x, min) then Min(., max) on the binary ops: integer inputs, or bounds known only at run time
            if not present:
                return [ctx.b.alias(x, x.shape, ctx.out_name())]
            y = x
            for k, (i, op) in enumerate(present):
                bnd = ins[i]
                if bnd.rank > 1 or not (bnd.rank == 0 or (S.is_static(bnd.shape[0]) and int(bnd.shape[0]) == 1)):
                    raise ctx.fail("min/max must be scalars")
                if bnd.dtype != x.dtype:
                    raise ctx.fail(f"min/max of dtype {bnd.dtype} for an input of {x.dtype}")
                bnd = ctx.b.alias(bnd, [], ctx.b.fresh(ctx.name))
                y = binary(ctx, op, y, bnd, ctx.out_name() if k == len(present) - 1 else ctx.b.fresh(ctx.name))
            return [y]

        def bound(i, default):
            if len(ins) <= i or ins[i] is None:
                return default
            return float(ins[i].const.reshape(-1)[0])
        lo, hi = bound(1, -np.inf), bound(2, np.inf)
    if x.dtype != np.float32:
        raise ctx.fail(f"Clip of {x.dtype} is not supported")
    if lo > hi:
        lo = hi  # ONNX: min(max(x, lo), hi) = hi everywhere
    return [unary(ctx, 15, x, ctx.out_name(), lo, hi)]


@handler("Cast")
def _cast(ctx: NodeCtx, ins):
    x = ins[0]
    to = ctx.dtype_attr("to")
    if to == np.float64 and x.dtype != np.float64:  # computed as float32 (Importer.as_float32), not cast twice
        to = np.dtype(np.float32)
    k = ctx.b.known_values(x)
    if k is not None and x.const is None and to.kind in "iu":
        return [ctx.b.from_known(k, to, x.shape, ctx.out_name())]
    if x.dtype == to:
        return [ctx.b.alias(x, x.shape, ctx.out_name())]
    return ctx.b.emit("cast", [x], [spec(ctx.out_name(), to, x.shape)], name=ctx.name)


@handler("Where")
def _where(ctx: NodeCtx, ins):
    c, x, y = ins
    if x.dtype != y.dtype:
        raise ctx.fail(f"x and y have different dtypes {x.dtype} and {y.dtype}")
    shape = broadcast_shapes(ctx, c.shape, x.shape, y.shape)
    kc, kx, ky = (ctx.b.known_values(v) for v in (c, x, y))
    if kc is not None and kx is not None and ky is not None and x.dtype.kind in "iu" and len(shape) <= 1 \
            and all(v.rank <= 1 for v in (c, x, y)) and all(S.is_static(v) for v in kc):
        n = shape[0] if shape else 1
        if S.is_static(n):  # shape arithmetic (exporters' Where(Equal(shape, -1), 1, shape)): on dims
            n = int(n)
            cs, xs, ys = (k * n if len(k) == 1 else k for k in (kc, kx, ky))
            vals = [xv if int(cv) else yv for cv, xv, yv in zip(cs, xs, ys)]
            return [ctx.b.from_known(vals, x.dtype, shape, ctx.out_name())]
    return ctx.b.emit("where", [c, x, y], [spec(ctx.out_name(), x.dtype, shape)], name=ctx.name)


# ---------------------------------------------------------------- indexing and movement


@handler("Gather")
def _gather(ctx: NodeCtx, ins):
    data, idx = ins
    axis = norm_axis(ctx, ctx.attr("axis", 0), data.rank)
    shape = list(data.shape[:axis]) + list(idx.shape) + list(data.shape[axis + 1:])
    kd, ki = ctx.b.known_values(data), ctx.b.known_values(idx)
    if kd is not None and ki is not None and data.rank == 1 and data.dtype.kind in "iu":
        n = len(kd)
        vals = []
        for i in ki:
            i = int(i)
            if not -n <= i < n:
                raise ctx.fail(f"index {i} out of range for {n} elements")
            vals.append(kd[i])
        return [ctx.b.from_known(vals, data.dtype, shape, ctx.out_name())]
    if idx.dtype not in (np.int64, np.int32):
        raise ctx.fail(f"indices must be int32 or int64, got {idx.dtype}")
    return ctx.b.emit("gather", [data, idx], [spec(ctx.out_name(), data.dtype, shape)], iattr=[axis], name=ctx.name)


@handler("GatherND")
def _gather_nd(ctx: NodeCtx, ins):
    """GatherND. Constant indices with batch_dims 0 over static axes are linearised at compile
    time into one Gather on a view of data with those axes flattened; any other indices (the
    attention-mask lookups torch's dynamo exporter writes, built from Range over symbolic
    sizes) run as gather_nd, which checks every index at run time."""
    data, idx = ins
    b = int(ctx.attr("batch_dims", 0))
    if idx.dtype not in (np.int64, np.int32):
        raise ctx.fail(f"indices must be int64 or int32, got {idx.dtype}")
    if not 0 <= b < min(idx.rank, data.rank):
        raise ctx.fail(f"batch_dims {b} must be below the ranks of indices ({idx.rank}) and data ({data.rank})")
    if not S.is_static(idx.shape[-1]) or not 1 <= int(idx.shape[-1]) <= data.rank - b:
        raise ctx.fail(f"the last axis of indices ({list(idx.shape)}) must be a static 1..{data.rank - b}")
    r = int(idx.shape[-1])
    shape = list(idx.shape[:-1]) + list(data.shape[b + r:])
    lead = data.shape[:r]
    known = ctx.b.known_values(idx)
    if b or known is None or not all(S.is_static(d) for d in list(lead) + list(idx.shape)) \
            or not all(S.is_static(v) for v in known):
        for k in range(b):  # symbolic ones are checked at run time
            if S.is_static(idx.shape[k]) and S.is_static(data.shape[k]) and int(idx.shape[k]) != int(data.shape[k]):
                raise ctx.fail(f"batch axis {k}: indices have {idx.shape[k]}, data {data.shape[k]}")
        return ctx.b.emit("gather_nd", [data, idx], [spec(ctx.out_name(), data.dtype, shape)], iattr=[b],
                          name=ctx.name)
    lead = [int(d) for d in lead]
    tuples = np.array([int(v) for v in known], dtype=np.int64).reshape(-1, r)
    for j, n in enumerate(lead):
        col = tuples[:, j]
        bad = np.flatnonzero((col < -n) | (col >= n))
        if bad.size:
            raise ctx.fail(f"index tuple {bad[0]} has {col[bad[0]]} on axis {j} of size {n}")
        tuples[:, j] = np.where(col < 0, col + n, col)
    strides = np.cumprod([1] + lead[::-1])[:-1][::-1].astype(np.int64)
    lin = ctx.b.const((tuples @ strides).reshape([int(d) for d in idx.shape[:-1]]), ctx.b.fresh(ctx.name + ".rows"))
    flat = ctx.b.alias(data, [int(np.prod(lead))] + list(data.shape[r:]), ctx.b.fresh(ctx.name))
    return ctx.b.emit("gather", [flat, lin], [spec(ctx.out_name(), data.dtype, shape)], iattr=[0], name=ctx.name)


def data_extent(ctx: NodeCtx, bound: int, what: str) -> Dim:
    """A size the data decides (how many elements are nonzero, how many boxes survive NMS):
    a symbol of its own with a bound, the most it can be, which the memory plan reserves for
    every tensor sized by it. The op that finds it writes it to an int64 scalar, and
    set_data_extent's set_dim op makes it the size downstream (plan.c). Named
    "<node>.<what>" (what a run-time error names), made unique if the node is imported again."""
    name = f"{ctx.name}.{what}"
    if name in ctx.imp.symbols:
        name = ctx.b.fresh(name)
    ctx.imp.symbols[name] = None
    ctx.imp.dims[name] = int(bound)
    return S.sym(name)


def set_data_extent(ctx: NodeCtx, extent: Dim, count: Value) -> None:
    (name,) = S.symbols_of(extent)
    ctx.b.ops.append(Op("set_dim", [count], [], iattr=[SymbolRef(name)], name=ctx.name))


def _elements_at_bounds(ctx: NodeCtx, shape) -> int:
    from .memplan import bytes_at_bounds

    return bytes_at_bounds(Value("n", np.uint8, list(shape)), ctx.imp.dims)


@handler("NonZero")
def _nonzero(ctx: NodeCtx, ins):
    """NonZero: of values known at compile time (index arithmetic, e.g. a rotary slice),
    folded to its constant; of run-time values, op nonzero with the count of nonzero
    elements as a size the data decides (data_extent), at most the input's element count."""
    x = ins[0]
    if x.rank == 0:
        raise ctx.fail("NonZero of a scalar is not supported (give it a rank-1 tensor)")
    known = ctx.b.known_values(x)
    if known is not None and all(S.is_static(v) for v in known) and all(S.is_static(d) for d in x.shape):
        arr = np.array([int(v) for v in known]).reshape([int(d) for d in x.shape])
        return [ctx.b.const(np.array(np.nonzero(arr), dtype=np.int64).reshape(x.rank, -1), ctx.out_name())]
    n = data_extent(ctx, _elements_at_bounds(ctx, x.shape), "nonzero")
    y, count = ctx.b.emit("nonzero", [x], [spec(ctx.out_name(), np.int64, (x.rank, n)),
                                            spec(ctx.b.fresh(ctx.name + ".count"), np.int64, ())],
                          name=ctx.name, fold=False)
    set_data_extent(ctx, n, count)
    return [y]


def _axis_or_flattened(ctx: NodeCtx, x: Value) -> Tuple[Value, int]:
    """(x, its normalised axis attribute), or (x flattened, 0) without one (Compress, Unique)."""
    axis = ctx.attr("axis")
    if axis is None:
        return ctx.b.alias(x, [x.numel()], ctx.b.fresh(ctx.name + ".flat")), 0
    return x, norm_axis(ctx, int(axis), x.rank)


@handler("Compress")
def _compress(ctx: NodeCtx, ins):
    """Compress(input, condition, axis): the slices along axis (or of the flattened input)
    where the rank-1 condition is true (a condition shorter than the axis leaves the rest
    out) — NonZero of the condition, then Gather."""
    x, cond = ins[0], ins[1]
    if cond.rank != 1:
        raise ctx.fail(f"condition has rank {cond.rank}, expected 1")
    x, axis = _axis_or_flattened(ctx, x)
    length = cond.shape[0]
    if S.is_static(length) and S.is_static(x.shape[axis]) and int(length) > int(x.shape[axis]):
        raise ctx.fail(f"condition has {int(length)} entries, more than the {int(x.shape[axis])} along axis {axis}")
    where = ctx.call("NonZero", [cond])[0]
    idx = ctx.b.alias(where, [where.shape[1]], ctx.b.fresh(ctx.name + ".idx"))
    return ctx.call("Gather", [x, idx], axis=axis)


@handler("Unique")
def _unique(ctx: NodeCtx, ins):
    """Unique: the distinct elements (no axis: of the flattened input) or slices along an
    axis, sorted ascending or in order of first occurrence, with each one's first position,
    every element's place among them and the counts — op unique, the number of distinct
    ones a size the data decides (data_extent), at most the slices' count."""
    x = ins[0]
    if x.dtype not in (np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_):
        raise ctx.fail(f"Unique of {x.dtype} is not supported")
    x, axis = _axis_or_flattened(ctx, x)
    m = x.shape[axis]
    u = data_extent(ctx, _elements_at_bounds(ctx, [m]), "unique")
    y_shape = [u if k == axis else d for k, d in enumerate(x.shape)]
    outs = ctx.b.emit("unique", [x], [spec(ctx.out_name(0), x.dtype, y_shape), spec(ctx.out_name(1), np.int64, (u,)),
                                       spec(ctx.out_name(2), np.int64, (m,)), spec(ctx.out_name(3), np.int64, (u,)),
                                       spec(ctx.b.fresh(ctx.name + ".count"), np.int64, ())],
                      iattr=[axis, int(ctx.attr("sorted", 1))], scratch_bytes=S.dim_mul(m, 40), name=ctx.name,
                      fold=False)
    set_data_extent(ctx, u, outs[4])
    return outs[:4]


@handler("NonMaxSuppression")
def _non_max_suppression(ctx: NodeCtx, ins):
    """NonMaxSuppression as op nms (onnxruntime's rules: scores above score_threshold when it
    is given, IoU over iou_threshold suppresses, up to max_output_boxes_per_class per image
    and class). How many boxes it selects is a size the data decides (data_extent), at
    most images x classes x min(boxes, max_output_boxes_per_class) when that is a constant."""
    ctx.require_attrs(["center_point_box"])
    boxes, scores = ins[0], ins[1]
    opt = list(ins[2:5]) + [None] * (5 - len(ins))
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.fail(f"center_point_box is {center}, expected 0 or 1")
    if boxes.dtype != np.float32 or scores.dtype != np.float32:
        raise ctx.fail(f"boxes and scores must be float (got {boxes.dtype}, {scores.dtype})")
    if boxes.rank != 3 or scores.rank != 3:
        raise ctx.fail(f"boxes must be [batches, boxes, 4] and scores [batches, classes, boxes] (ranks "
                       f"{boxes.rank}, {scores.rank})")
    for k, (v, dt, what) in enumerate(zip(opt[:3], (np.int64, np.float32, np.float32),
                                          ("max_output_boxes_per_class", "iou_threshold", "score_threshold"))):
        if v is not None and (v.dtype != dt or not S.is_static(v.numel()) or int(v.numel()) != 1):
            raise ctx.fail(f"{what} must be one {np.dtype(dt)}, got {v.dtype} of shape {[str(d) for d in v.shape]}")
    nb, nc, n = scores.shape[0], scores.shape[1], boxes.shape[1]
    per_class = _elements_at_bounds(ctx, [n])
    if opt[0] is None:
        per_class = 0  # no max_output_boxes_per_class: nothing is selected
    else:
        known = ctx.b.known_values(opt[0])
        if known is not None and S.is_static(known[0]):
            per_class = min(per_class, max(int(known[0]), 0))
    count_dim = data_extent(ctx, _elements_at_bounds(ctx, [nb, nc]) * per_class, "selected")
    sel, count = ctx.b.emit("nms", [boxes, scores] + opt[:3],
                            [spec(ctx.out_name(), np.int64, (count_dim, 3)),
                             spec(ctx.b.fresh(ctx.name + ".count"), np.int64, ())],
                            iattr=[center], scratch_bytes=S.dim_mul(n, 12), name=ctx.name, fold=False)
    set_data_extent(ctx, count_dim, count)
    return [sel]


@handler("IsNaN")
def _isnan(ctx: NodeCtx, ins):
    x = ins[0]
    if x.dtype.kind != "f":
        raise ctx.fail(f"IsNaN of {x.dtype} is not supported (float)")
    same = binary(ctx, "Equal", x, x, ctx.b.fresh(ctx.name))  # false only for NaN
    return [unary(ctx, _UNARY["Not"], same, ctx.out_name())]


@handler("IsInf")
def _isinf(ctx: NodeCtx, ins):
    """x == +inf (detect_positive, default on) or x == -inf (detect_negative, default on)."""
    x = ins[0]
    if x.dtype.kind != "f":
        raise ctx.fail(f"IsInf of {x.dtype} is not supported (float)")
    signs = [s for s, attr in ((1.0, "detect_positive"), (-1.0, "detect_negative")) if ctx.attr(attr, 1)]
    if not signs:  # all false, shaped like x
        return [binary(ctx, "Less", x, ctx.b.const(np.array(-np.inf, x.dtype)), ctx.out_name())]
    hits = [binary(ctx, "Equal", x, ctx.b.const(np.array(s * np.inf, x.dtype)),
                   ctx.out_name() if len(signs) == 1 else ctx.b.fresh(ctx.name)) for s in signs]
    return [hits[0] if len(hits) == 1 else binary(ctx, "Or", hits[0], hits[1], ctx.out_name())]


@handler("OneHot")
def _onehot(ctx: NodeCtx, ins):
    """OneHot(indices, depth, values): values[1] where the (negative: + depth) index equals its
    position along the new axis, values[0] elsewhere — Equal against a constant range, then
    Where. depth must be known when the model is compiled (it is an output extent)."""
    idx, depth_v, values = ins[0], ins[1], ins[2]
    if idx.dtype.kind not in "iuf":
        raise ctx.fail(f"indices of {idx.dtype}")
    known = ctx.b.known_values(depth_v)
    if known is not None and len(known) == 1 and S.is_static(known[0]):
        depth = int(known[0])
    elif depth_v.const is not None and depth_v.const.size == 1:  # a float depth
        depth = int(depth_v.const.reshape(-1)[0])
    else:
        raise ctx.fail("depth must be a scalar known when the model is compiled")
    if depth < 1:
        raise ctx.fail(f"depth {depth} must be >= 1")
    if values.const is None or values.const.size != 2:
        raise ctx.fail("values must be a constant [off, on]")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), idx.rank + 1)
    b = ctx.b
    if idx.dtype != np.int64:  # ONNX allows other integer and float indices (truncated toward zero)
        idx = b.emit("cast", [idx], [spec(b.fresh(ctx.name), np.int64, idx.shape)], name=ctx.name)[0]
    negative = binary(ctx, "Less", idx, b.const(np.array(0, np.int64)), b.fresh(ctx.name))
    wrapped = binary(ctx, "Add", idx, b.const(np.array(depth, np.int64)), b.fresh(ctx.name))
    idx = b.emit("where", [negative, wrapped, idx], [spec(b.fresh(ctx.name), np.int64, idx.shape)], name=ctx.name)[0]
    idx = b.alias(idx, list(idx.shape[:axis]) + [1] + list(idx.shape[axis:]), b.fresh(ctx.name))
    positions = np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (idx.rank - axis - 1))
    hit = binary(ctx, "Equal", idx, b.const(positions), b.fresh(ctx.name))
    off, on = (b.const(np.array(v, values.dtype)) for v in values.const.reshape(-1))
    shape = list(idx.shape[:axis]) + [depth] + list(idx.shape[axis + 1:])
    return b.emit("where", [hit, on, off], [spec(ctx.out_name(), values.dtype, shape)], name=ctx.name)


@handler("Concat")
def _concat(ctx: NodeCtx, ins):
    ins = [v for v in ins if v is not None]
    r = ins[0].rank
    axis = norm_axis(ctx, ctx.attr("axis"), r)
    for v in ins:
        if v.rank != r or v.dtype != ins[0].dtype:
            raise ctx.fail("inputs differ in rank or dtype")
    known = [ctx.b.known_values(v) for v in ins]
    if r == 1 and all(k is not None for k in known) and ins[0].dtype.kind in "iu":
        vals = [x for k in known for x in k]
        return [ctx.b.from_known(vals, ins[0].dtype, (len(vals),), ctx.out_name())]
    shape = list(ins[0].shape)
    total: Dim = 0
    for v in ins:
        total = S.dim_add(total, v.shape[axis])
    shape[axis] = total
    parts = [v for v in ins if not (S.is_static(v.shape[axis]) and int(v.shape[axis]) == 0)]
    if len(parts) == 1:
        return [ctx.b.emit("copy", parts, [spec(ctx.out_name(), parts[0].dtype, shape)], name=ctx.name)[0]]
    return ctx.b.emit("concat", parts, [spec(ctx.out_name(), ins[0].dtype, shape)], iattr=[axis], name=ctx.name)


@handler("Split")
def _split(ctx: NodeCtx, ins):
    x = ins[0]
    axis = norm_axis(ctx, ctx.attr("axis", 0), x.rank)
    n_out = len(ctx.outputs)
    if len(ins) > 1 and ins[1] is not None:
        sizes = ctx.known(ins[1], "split sizes")
    elif ctx.attr("split") is not None:
        sizes = list(ctx.attr("split"))
    else:
        d = x.shape[axis]
        n = ctx.attr("num_outputs", n_out)
        chunk = S.dim_ceildiv(d, n)
        sizes = [chunk] * (n - 1) + [S.dim_sub(d, S.dim_mul(chunk, n - 1))]
    if len(sizes) != n_out:
        raise ctx.fail(f"{len(sizes)} split sizes for {n_out} outputs")
    if any(S.is_static(sz) and int(sz) < 0 for sz in sizes):
        raise ctx.fail(f"split sizes {sizes} of axis {axis} (extent {x.shape[axis]}) include a negative one")
    total: Dim = 0
    for sz in sizes:
        total = S.dim_add(total, sz)
    if S.is_static(total) and S.is_static(x.shape[axis]) and int(total) != int(x.shape[axis]):
        raise ctx.fail(f"split sizes {sizes} do not add up to the extent {x.shape[axis]} of axis {axis}")
    outs = []
    for i, sz in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = sz
        outs.append(spec(ctx.out_name(i), x.dtype, shape))
    return ctx.b.emit("split", [x], outs, iattr=[axis], name=ctx.name)


def _clamp(v: Dim, lo: Dim, hi: Dim) -> Dim:
    return S.dim_min(S.dim_max(v, lo), hi)


@handler("Slice")
def _slice(ctx: NodeCtx, ins):
    x = ins[0]
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = ctx.known(ins[1], "starts")
        ends = ctx.known(ins[2], "ends")
        axes = ctx.known(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = ctx.known(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    first = [0] * x.rank
    count = list(x.shape)
    step_of = [1] * x.rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(ctx, int(a), x.rank)
        if not S.is_static(st) or int(st) == 0:
            raise ctx.fail("steps must be non-zero constants")
        st = int(st)
        d = x.shape[a]
        def norm(v, is_end):
            if S.is_static(v):
                v = int(v)
                if v >= INT64_MAX // 2:
                    return d
                if v <= -INT64_MAX // 2:
                    return -1 if st < 0 and is_end else 0
                if v < 0:
                    return S.dim_add(d, v)
            return v
        sv, ev = norm(s, False), norm(e, True)
        if st > 0:
            sv, ev = _clamp(sv, 0, d), _clamp(ev, 0, d)
            n = S.dim_max(S.dim_ceildiv(S.dim_sub(ev, sv), st), 0)
        else:
            sv, ev = _clamp(sv, 0, S.dim_sub(d, 1)), _clamp(ev, -1, S.dim_sub(d, 1))
            n = S.dim_max(S.dim_ceildiv(S.dim_sub(sv, ev), -st), 0)
        first[a], count[a], step_of[a] = sv, n, st
    grid = _known_grid(ctx, x, *first, *count)
    if grid is not None:  # torch's pad-list idiom slices a [n, 2] table of known values backwards
        picked = grid[np.ix_(*[[int(f) + i * st for i in range(int(n))] for f, n, st in zip(first, count, step_of)])]
        return [_from_grid(ctx, picked, x.dtype, ctx.out_name())]
    if all(S.is_static(f) and int(f) == 0 for f in first) and step_of == [1] * x.rank and count == list(x.shape):
        return [ctx.b.alias(x, x.shape, ctx.out_name())]
    return ctx.b.emit("slice", [x], [spec(ctx.out_name(), x.dtype, count)], iattr=[x.rank] + step_of, dattr=first,
                      name=ctx.name)


@handler("Transpose")
def _transpose(ctx: NodeCtx, ins):
    x = ins[0]
    perm = ctx.attr("perm", list(reversed(range(x.rank))))
    perm = [norm_axis(ctx, p, x.rank) for p in perm]
    if sorted(perm) != list(range(x.rank)):
        raise ctx.fail(f"perm {perm} is not a permutation")
    return [transpose(ctx, x, perm, ctx.out_name())]


def transpose(ctx: NodeCtx, x: Value, perm: Sequence[int], name: str) -> Value:
    """x with its axes permuted (a free reshape when only axes of extent 1 move)."""
    shape = [x.shape[p] for p in perm]
    grid = _known_grid(ctx, x)
    if grid is not None:
        return _from_grid(ctx, grid.transpose(list(perm)), x.dtype, name)
    moved = [p for p in perm if not (S.is_static(x.shape[p]) and int(x.shape[p]) == 1)]
    if moved == sorted(moved):
        return ctx.b.alias(x, shape, name)
    return ctx.b.emit("transpose", [x], [spec(name, x.dtype, shape)], iattr=list(perm), name=ctx.name)[0]


@handler("Expand")
def _expand(ctx: NodeCtx, ins):
    x = ins[0]
    target = ctx.known(ins[1], "the shape")
    shape = broadcast_shapes(ctx, x.shape, target)
    if list(shape) == list(x.shape):
        return [ctx.b.alias(x, shape, ctx.out_name())]
    return ctx.b.emit("expand", [x], [spec(ctx.out_name(), x.dtype, shape)], name=ctx.name)


@handler("Tile")
def _tile(ctx: NodeCtx, ins):
    x = ins[0]
    reps = ctx.known(ins[1], "repeats")
    if len(reps) != x.rank:
        raise ctx.fail("repeats must have one entry per axis")
    grid = _known_grid(ctx, x, *reps)
    if grid is not None:  # torch's split into chunks tiles the chunk size
        return [_from_grid(ctx, np.tile(grid, [int(r) for r in reps]), x.dtype, ctx.out_name())]
    # Tile = expand over a unit axis before each tiled axis, then a reshape; axes repeated once
    # need none, and when the unit axes would pass the runtime's rank (8), one expand per tiled
    # axis over x viewed as [before, 1, axis, after]
    tiled = [k for k, r in enumerate(reps) if not (S.is_static(r) and int(r) == 1)]
    if not tiled:
        return [ctx.b.alias(x, x.shape, ctx.out_name())]
    if x.rank + len(tiled) <= 8:
        mid_in, mid_out = [], []
        for k, d in enumerate(x.shape):
            mid_in += [1, d] if k in tiled else [d]
            mid_out += [reps[k], d] if k in tiled else [d]
        return [_expand_as(ctx, x, mid_in, mid_out, [S.dim_mul(d, r) for d, r in zip(x.shape, reps)],
                           ctx.out_name())]
    y = x
    for k in tiled:
        before, after = S.prod(y.shape[:k]), S.prod(y.shape[k + 1:])
        y = _expand_as(ctx, y, [before, 1, y.shape[k], after], [before, reps[k], y.shape[k], after],
                       [S.dim_mul(d, reps[k]) if j == k else d for j, d in enumerate(y.shape)], ctx.b.fresh(ctx.name))
    return [ctx.b.alias(y, y.shape, ctx.out_name())]


def _expand_as(ctx: NodeCtx, x: Value, view: List[Dim], expanded: List[Dim], shape: List[Dim], name: str) -> Value:
    """x viewed as `view`, expanded (op expand) to `expanded`, the result viewed as `shape`."""
    xi = ctx.b.alias(x, view, ctx.b.fresh(ctx.name))
    y = ctx.b.emit("expand", [xi], [spec(ctx.b.fresh(ctx.name), x.dtype, expanded)], name=ctx.name)[0]
    return ctx.b.alias(y, shape, name)


def _integral_known(ctx: NodeCtx, v: Value):
    """A float scalar's value as a dim when it is a whole number known at compile time: a
    constant, or a Cast of an integer the compiler tracks (a dimension); else None."""
    if v.const is not None:
        x = float(v.const.reshape(-1)[0]) if v.const.size == 1 else None
        return int(x) if x is not None and x.is_integer() and abs(x) < 2 ** 53 else None
    op = v.producer
    if op is not None and op.type == "cast" and op.inputs and op.inputs[0] is not None:
        k = ctx.b.known_values(op.inputs[0])
        return k[0] if k is not None and len(k) == 1 else None
    return None


@handler("Range")
def _range(ctx: NodeCtx, ins):
    ks = [ctx.b.known_values(v) for v in ins]
    dt = ins[0].dtype
    if all(k is not None for k in ks) and dt.kind in "iu":
        start, limit, delta = (k[0] for k in ks)
        if S.is_static(delta) and int(delta) != 0:
            n = S.dim_max(S.dim_ceildiv(S.dim_sub(limit, start), int(delta)), 0)
            if S.is_static(n) and S.is_static(start):
                vals = [int(start) + i * int(delta) for i in range(int(n))]
                return [ctx.b.from_known(vals, dt, (len(vals),), ctx.out_name())]
            return ctx.b.emit("range", [ctx.b.materialize(v) for v in ins], [spec(ctx.out_name(), dt, (n,))],
                              name=ctx.name)
    if dt.kind == "f":  # exporters' float arange over a feature map's size: Range(0.0, Cast(dim), 1.0)
        ki = [_integral_known(ctx, v) for v in ins]
        if all(k is not None for k in ki) and S.is_static(ki[0]) and S.is_static(ki[2]) and int(ki[2]) != 0:
            n = S.dim_max(S.dim_ceildiv(S.dim_sub(ki[1], ki[0]), int(ki[2])), 0)
            return ctx.b.emit("range", ins, [spec(ctx.out_name(), dt, (n,))], name=ctx.name)
    if all(v.const is not None for v in ins):
        start, limit, delta = (float(v.const.reshape(-1)[0]) for v in ins)
        n = max(int(np.ceil((limit - start) / delta)), 0)
        return ctx.b.emit("range", ins, [spec(ctx.out_name(), dt, (n,))], name=ctx.name)
    return _runtime_range(ctx, ins, dt)


def _runtime_range(ctx: NodeCtx, ins, dt) -> List[Value]:
    """Range over bounds the data decides (a TTS model's arange(max(predicted durations))): the
    length is a size of its own (data_extent) whose bound the caller gives by name, as for a
    symbolic input dim; op range_count computes it at run time, set_dim checks it against the
    bound and sizes every tensor downstream, then op range fills the values."""
    if np.dtype(dt) not in (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)):
        raise ctx.fail(f"Range of {np.dtype(dt).name} is not supported (float32, int32, int64)")
    name = f"{ctx.name}.length"  # the key the caller bounds it by (data_extent names the symbol so)
    bound = ctx.imp.dims.get(name)
    if bound is None:
        raise ctx.fail(f"its length is only known at run time (start, limit or delta is computed from the "
                       f"data, or is not a whole number); give the most it may be, e.g. dims={{{name!r}: N}} (the "
                       f"memory plan reserves room for N elements in every tensor sized by it, and a run that "
                       f"needs more is refused)")
    n = data_extent(ctx, int(bound), "length")
    count = ctx.b.emit("range_count", ins, [spec(ctx.b.fresh(ctx.name + ".count"), np.int64, ())], name=ctx.name,
                       fold=False)[0]
    set_data_extent(ctx, n, count)
    return ctx.b.emit("range", ins, [spec(ctx.out_name(), dt, (n,))], name=ctx.name, fold=False)


# ---------------------------------------------------------------- random


def _random_seed(ctx: NodeCtx) -> int:
    """The generator's key for one random node: its `seed` attribute (the float's bits) when it
    has one, else a hash of the node's name, so two unseeded nodes draw different values and a
    model's values do not change with the order the compiler meets its nodes. A node imported
    more than once (an unrolled loop's body) gets a new key each time."""
    import hashlib

    k = ctx.imp.random_nodes.get(ctx.name, 0)
    ctx.imp.random_nodes[ctx.name] = k + 1
    seed = ctx.attr("seed")
    if seed is not None and k == 0:
        return int(np.float32(seed).view(np.int32))
    key = f"{ctx.name}#{k}" if seed is None else f"{float(seed)!r}#{k}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little", signed=True)


@handler("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike")
def _random(ctx: NodeCtx, ins):
    """Random tensors from a counter-based generator (op random): every element a function of
    (seed, index), so a plan gives the same values on every run, at any thread count. Models
    draw noise this way (a TTS model's sampling temperature scales it); feed your own noise as
    an input where fresh values per run matter."""
    normal = "Normal" in ctx.op_type
    if ctx.op_type.endswith("Like"):
        x = ins[0]
        shape = list(x.shape)
        dt = ctx.dtype_attr("dtype") if ctx.attr("dtype") is not None else x.dtype
    else:
        if ctx.attr("shape") is None:
            raise ctx.fail("the shape attribute is required")
        shape = [int(d) for d in ctx.attr("shape")]
        if any(d < 0 for d in shape):
            raise ctx.fail(f"shape {shape} has a negative dimension")
        dt = ctx.dtype_attr("dtype", 1)
    dt = np.dtype(dt)
    if dt.kind != "f":
        raise ctx.fail(f"dtype {dt.name}: random values are float16, float32 or float64")
    params = [float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))] if normal else \
        [float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))]
    if not normal and not params[0] <= params[1]:
        raise ctx.fail(f"low {params[0]} is above high {params[1]}")
    # float64 stays float32, as every float64 section (Importer.as_float32; a graph output
    # declared double is cast back); float16 values are rounded to it, as onnxruntime draws them
    as_f16 = dt == np.float16
    y = ctx.b.emit("random", [], [spec(ctx.b.fresh(ctx.name + ".f32") if as_f16 else ctx.out_name(), np.float32,
                                       shape)],
                   iattr=[0 if normal else 1, _random_seed(ctx)], fattr=params, name=ctx.name)[0]
    if not as_f16:
        return [y]
    from onnx import helper

    return ctx.call("Cast", [y], to=helper.np_dtype_to_tensor_dtype(dt))


@handler("Trilu")
def _trilu(ctx: NodeCtx, ins):
    x = ins[0]
    k = int(ctx.known(ins[1], "k")[0]) if len(ins) > 1 and ins[1] is not None else 0
    return ctx.b.emit("trilu", [x], [spec(ctx.out_name(), x.dtype, x.shape)], iattr=[ctx.attr("upper", 1), k],
                      name=ctx.name)


@handler("Pad")
def _pad(ctx: NodeCtx, ins):
    x = ins[0]
    mode = ctx.attr("mode", "constant")
    modes = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}
    if mode not in modes:
        raise ctx.fail(f"mode {mode!r} is not supported")
    if ctx.opset < 11:
        pads, value = ctx.attr("pads"), ctx.attr("value", 0.0)
        axes = list(range(x.rank))
    else:
        pads = ctx.known(ins[1], "pads")
        value = 0.0
        if len(ins) > 2 and ins[2] is not None:
            if ins[2].const is None:
                raise ctx.fail("constant_value must be a constant")
            value = float(ins[2].const.reshape(-1)[0]) if ins[2].const.size else 0.0
        axes = ctx.known(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(x.rank))
    axes = [norm_axis(ctx, int(a), x.rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.fail("pads must give two values per padded axis")
    pb, pe = [0] * x.rank, [0] * x.rank
    for i, a in enumerate(axes):
        pb[a], pe[a] = (int(v) if S.is_static(v) else v for v in (pads[i], pads[i + len(axes)]))
    shape = [S.dim_add(S.dim_add(d, b), e) for d, b, e in zip(x.shape, pb, pe)]
    if pb == [0] * x.rank and pe == [0] * x.rank:
        return [ctx.b.alias(x, x.shape, ctx.out_name())]
    if all(S.is_static(p) for p in pb + pe):
        return ctx.b.emit("pad", [x], [spec(ctx.out_name(), x.dtype, shape)],
                          iattr=[modes[mode], x.rank] + [int(p) for p in pb + pe], fattr=[value], name=ctx.name)
    # pads that follow the sizes (torch's pad to a multiple of a stride, SEW): evaluated per run
    return ctx.b.emit("pad", [x], [spec(ctx.out_name(), x.dtype, shape)], iattr=[modes[mode], x.rank],
                      fattr=[value], dattr=pb + pe, name=ctx.name)


@handler("CenterCropPad")
def _center_crop_pad(ctx: NodeCtx, ins):
    """Each listed axis cropped to, or zero-padded to, the target length around its centre
    (the extra element of an odd difference at the end): one pad op, whose negative pads crop."""
    x = ins[0]
    target = [int(t) for t in ctx.known(ins[1], "shape")]
    axes = [norm_axis(ctx, int(a), x.rank) for a in (ctx.attr("axes") or range(x.rank))]
    if len(target) != len(axes):
        raise ctx.fail(f"shape has {len(target)} values for {len(axes)} axes")
    pb, pe = [0] * x.rank, [0] * x.rank
    for a, t in zip(axes, target):
        if not S.is_static(x.shape[a]):
            raise ctx.fail(f"axis {a} must have a size known at compile time")
        d = int(x.shape[a])
        pb[a] = (t - d) // 2 if t >= d else -((d - t) // 2)
        pe[a] = t - d - pb[a]
    return ctx.call("Pad", [x, ctx.const(pb + pe)], as_opset=13)


# ---------------------------------------------------------------- reductions and normalisation

_REDUCE = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4, "ReduceSumSquare": 5,
           "ReduceL2": 6, "ReduceLogSumExp": 7, "ReduceL1": 0}  # ReduceL1: ReduceSum of |x|


@handler(*_REDUCE)
def _reduce(ctx: NodeCtx, ins):
    x = ins[0]
    axes_from_input = ctx.opset >= 18 or (ctx.op_type == "ReduceSum" and ctx.opset >= 13)
    axes = _axes_input_or_attr(ctx, ins, 1) if axes_from_input else ctx.attr("axes")
    if axes is None or len(axes) == 0:
        if ctx.attr("noop_with_empty_axes", 0):
            return [ctx.b.alias(x, x.shape, ctx.out_name())]
        axes = list(range(x.rank))
    axes = sorted({norm_axis(ctx, int(a), x.rank) for a in axes})
    keep = ctx.attr("keepdims", 1)
    shape = [(1 if i in axes else d) for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    kx = ctx.b.known_values(x)
    fold = {"ReduceSum": S.dim_add, "ReduceProd": S.dim_mul, "ReduceMax": S.dim_max, "ReduceMin": S.dim_min}
    if kx is not None and x.rank == 1 and axes == [0] and x.dtype.kind in "iu" and ctx.op_type in fold and kx:
        acc = kx[0]  # shape arithmetic (ReduceProd(Shape(x)) = numel): on dims
        for v in kx[1:]:
            acc = fold[ctx.op_type](acc, v)
        return [ctx.b.from_known([acc], x.dtype, shape, ctx.out_name())]
    integer_kinds = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1")  # as op "reduce" runs them
    if not (x.dtype == np.float32 or (x.dtype in (np.int64, np.int32) and ctx.op_type in integer_kinds)):
        raise ctx.fail(f"{ctx.op_type} of {x.dtype} is not supported (float32; int64/int32 for ReduceSum, "
                       "ReduceMax, ReduceMin, ReduceProd, ReduceL1)")
    if ctx.op_type == "ReduceL1":
        x = unary(ctx, _UNARY["Abs"], x, ctx.b.fresh(ctx.name))
    return ctx.b.emit("reduce", [x], [spec(ctx.out_name(), x.dtype, shape)],
                      iattr=[_REDUCE[ctx.op_type], len(axes)] + axes, name=ctx.name)


@handler("ArgMax", "ArgMin")
def _argmax(ctx: NodeCtx, ins):
    x = ins[0]
    axis = norm_axis(ctx, ctx.attr("axis", 0), x.rank)
    keep = ctx.attr("keepdims", 1)
    shape = [(1 if i == axis else d) for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i != axis]
    return ctx.b.emit(ctx.op_type.lower(), [x], [spec(ctx.out_name(), np.int64, shape)],
                      iattr=[axis, ctx.attr("select_last_index", 0)], name=ctx.name)


@handler("Softmax", "LogSoftmax")
def _softmax(ctx: NodeCtx, ins):
    x = ins[0]
    if x.dtype != np.float32:
        raise ctx.fail(f"{ctx.op_type} of {x.dtype} is not supported (float32 only)")
    kind = "softmax" if ctx.op_type == "Softmax" else "log_softmax"
    if ctx.opset >= 13:
        axis = norm_axis(ctx, ctx.attr("axis", -1), x.rank)
        return ctx.b.emit(kind, [x], [spec(ctx.out_name(), x.dtype, x.shape)], iattr=[axis], name=ctx.name,
                          inplace=True)
    # opset < 13: softmax over the flattened [axis:] block
    axis = norm_axis(ctx, ctx.attr("axis", 1), x.rank)
    flat = ctx.b.alias(x, [S.prod(x.shape[:axis]), S.prod(x.shape[axis:])], ctx.b.fresh(ctx.name))
    y = ctx.b.emit(kind, [flat], [spec(ctx.b.fresh(ctx.name), x.dtype, flat.shape)], iattr=[1], name=ctx.name)[0]
    return [ctx.b.alias(y, x.shape, ctx.out_name())]


@handler("LayerNormalization")
def _layernorm(ctx: NodeCtx, ins):
    x, gamma = ins[0], ins[1]
    beta = ins[2] if len(ins) > 2 else None
    axis = norm_axis(ctx, ctx.attr("axis", -1), x.rank)
    y = layernorm(ctx, x, gamma, beta, axis, ctx.out_name())
    if not any(ctx.outputs[1:3]):
        return [y]
    # Mean and InvStdDev (training-time outputs some exports keep): the statistics the fused
    # op computed, over axes [axis:] with those axes kept as 1, spelt out in ops of their own
    axes = ctx.const(list(range(axis, x.rank)))
    mean = ctx.call("ReduceMean", [x, axes], as_opset=18, keepdims=1)[0]
    centred = ctx.call("Sub", [x, mean])[0]
    var = ctx.call("ReduceMean", [ctx.call("Mul", [centred, centred])[0], axes], as_opset=18, keepdims=1)[0]
    eps = ctx.b.const(np.array(ctx.attr("epsilon", 1e-5), np.float32))
    inv_std = ctx.call("Reciprocal", [ctx.call("Sqrt", [ctx.call("Add", [var, eps])[0]])[0]])[0]
    return [y, mean, inv_std]


def layernorm(ctx: NodeCtx, x: Value, gamma: Value, beta: Optional[Value], axis: int, name: str) -> Value:
    """LayerNormalization of x over axes [axis:] (epsilon from ctx) as one runtime op."""
    norm_shape = list(x.shape[axis:])
    gamma = _broadcast_param(ctx, gamma, norm_shape, "scale")
    beta = _broadcast_param(ctx, beta, norm_shape, "bias") if beta is not None else None
    return ctx.b.emit("layernorm", [x, gamma, beta], [spec(name, x.dtype, x.shape)], iattr=[axis],
                      fattr=[ctx.attr("epsilon", 1e-5)], name=ctx.name, inplace=True)[0]


def _broadcast_param(ctx: NodeCtx, v: Value, shape, what: str) -> Value:
    """A per-element parameter (layernorm scale/bias) as a dense tensor of exactly shape."""
    if list(v.shape) == list(shape):
        return v
    if v.const is not None and all(S.is_static(d) for d in shape):
        return ctx.b.const(np.ascontiguousarray(np.broadcast_to(v.const, [int(d) for d in shape])))
    if S.prod(v.shape) == S.prod(shape):
        return ctx.b.alias(v, shape, ctx.b.fresh(ctx.name))
    raise ctx.fail(f"{what} of shape {list(v.shape)} does not match the normalised shape {list(shape)}")


# ---------------------------------------------------------------- matrix products


def linear(ctx: NodeCtx, x: Value, w_out_in: np.ndarray, bias: Optional[np.ndarray], name: str) -> Value:
    """y = x · Wᵀ + b with a constant W [out, in] (the fast path for MatMul/Gemm by weights)."""
    n, k = w_out_in.shape
    if not (S.is_static(x.shape[-1]) and int(x.shape[-1]) == k):
        if S.is_static(x.shape[-1]):
            raise ctx.fail(f"inner dimensions differ: {x.shape[-1]} vs {k}")
    w = ctx.b.const(np.ascontiguousarray(w_out_in, dtype=np.float32), ctx.b.fresh(ctx.name + ".weight"))
    b = ctx.b.const(np.ascontiguousarray(bias, dtype=np.float32), ctx.b.fresh(ctx.name + ".bias")) \
        if bias is not None else None
    shape = list(x.shape[:-1]) + [n]
    return ctx.b.emit("linear", [x, w, b], [spec(name, np.float32, shape)], iattr=[0], fattr=[0, 0],
                      name=ctx.name)[0]


@handler("MatMul")
def _matmul(ctx: NodeCtx, ins):
    return [matmul(ctx, ins[0], ins[1], ctx.out_name())]


def matmul(ctx: NodeCtx, a: Value, b: Value, name: str) -> Value:
    """ONNX MatMul semantics (numpy: batched, broadcast, rank-1 operands) as one runtime op:
    linear when b is a constant matrix, else matmul."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise ctx.fail(f"MatMul of {a.dtype} x {b.dtype} is not supported (float32)")
    if b.const is not None and b.rank == 2 and a.rank >= 1:
        if a.rank == 1:
            a2 = ctx.b.alias(a, [1, a.shape[0]], ctx.b.fresh(ctx.name))
            y = linear(ctx, a2, b.const.T, None, ctx.b.fresh(ctx.name))
            return ctx.b.alias(y, [b.shape[1]], name)
        return linear(ctx, a, b.const.T, None, name)
    a2 = ctx.b.alias(a, [1, a.shape[0]], ctx.b.fresh(ctx.name)) if a.rank == 1 else a
    b2 = ctx.b.alias(b, [b.shape[0], 1], ctx.b.fresh(ctx.name)) if b.rank == 1 else b
    batch = broadcast_shapes(ctx, a2.shape[:-2], b2.shape[:-2])
    shape = list(batch) + [a2.shape[-2], b2.shape[-1]]
    if a.rank >= 2 and b.rank >= 2:  # no view around the product: an activation after it can fuse
        return ctx.b.emit("matmul", [a2, b2], [spec(name, np.float32, shape)], iattr=[0], fattr=[0, 0],
                          name=ctx.name)[0]
    y = ctx.b.emit("matmul", [a2, b2], [spec(ctx.b.fresh(ctx.name), np.float32, shape)], iattr=[0], fattr=[0, 0],
                   name=ctx.name)[0]
    final = list(shape)
    if b.rank == 1:
        final.pop(-1)
    if a.rank == 1:
        final.pop(-2 if b.rank != 1 else -1)
    return ctx.b.alias(y, final, name)


def _einsum_terms(ctx: NodeCtx, equation: str, ranks: Sequence[int]) -> Tuple[List[str], str]:
    """The operand subscripts and the output's, one letter per axis: "..." expanded to
    upper-case letters (right-aligned across operands, as numpy broadcasts), an implicit
    output made of the letters used once, in alphabetical order, after the ellipsis."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.fail(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    ell_rank = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell_rank = max(ell_rank, r - len(t.replace("...", "")))
    ell = "".join(chr(ord("Z") - i) for i in range(ell_rank))[::-1]  # never the lower-case letters of ONNX
    expanded = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - len(t.replace("...", ""))
            t = t.replace("...", ell[len(ell) - n:] if n else "")
        if len(t) != r or not all(c.isalpha() for c in t):
            raise ctx.fail(f"equation {equation!r}: term {t!r} does not fit an operand of rank {r}")
        if len(set(t)) != len(t):
            raise ctx.fail(f"equation {equation!r}: a repeated index within one operand (a diagonal) is not supported")
        expanded.append(t)
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = {c: sum(t.count(c) for t in expanded) for c in set("".join(expanded))}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if len(set(out)) != len(out) or any(c not in "".join(expanded) for c in out):
        raise ctx.fail(f"equation {equation!r}: output {out!r} repeats an index or names one no operand has")
    return expanded, out


def _einsum_sum_out(ctx: NodeCtx, x: Value, idx: str, keep: set) -> Tuple[Value, str]:
    """x with the axes whose index is not in keep summed away."""
    axes = [i for i, c in enumerate(idx) if c not in keep]
    if not axes:
        return x, idx
    shape = [d for i, d in enumerate(x.shape) if i not in axes]
    y = ctx.b.emit("reduce", [x], [spec(ctx.b.fresh(ctx.name), x.dtype, shape)], iattr=[_REDUCE["ReduceSum"], len(axes)]
                   + axes, name=ctx.name)[0]
    return y, "".join(c for c in idx if c in keep)


def _einsum_pair(ctx: NodeCtx, a: Value, ai: str, b: Value, bi: str, keep: set) -> Tuple[Value, str]:
    """The contraction of two operands keeping the indices in keep: as a batched MatMul of
    [batch, a-only, contracted] by [batch, contracted, b-only], then [batch, a-only, b-only]."""
    bld = ctx.b
    a, ai = _einsum_sum_out(ctx, a, ai, keep | set(bi))
    b, bi = _einsum_sum_out(ctx, b, bi, keep | set(ai))
    dims = {}
    for v, idx in ((a, ai), (b, bi)):
        for c, d in zip(idx, v.shape):
            if c in dims and S.is_static(dims[c]) and S.is_static(d) and int(dims[c]) != int(d):
                raise ctx.fail(f"index {c!r} has extents {dims[c]} and {d} (broadcasting a 1 is not supported)")
            dims.setdefault(c, d)
    batch = [c for c in ai if c in bi and c in keep]
    contract = [c for c in ai if c in bi and c not in keep]
    a_only = [c for c in ai if c not in bi]
    b_only = [c for c in bi if c not in ai]
    at = transpose(ctx, a, [ai.index(c) for c in batch + a_only + contract], bld.fresh(ctx.name))
    bt = transpose(ctx, b, [bi.index(c) for c in batch + contract + b_only], bld.fresh(ctx.name))

    def size(cs):
        return S.prod([dims[c] for c in cs])
    a3 = bld.alias(at, [size(batch), size(a_only), size(contract)], bld.fresh(ctx.name))
    b3 = bld.alias(bt, [size(batch), size(contract), size(b_only)], bld.fresh(ctx.name))
    y = matmul(ctx, a3, b3, bld.fresh(ctx.name))
    idx = "".join(batch + a_only + b_only)
    return bld.alias(y, [dims[c] for c in idx], bld.fresh(ctx.name)), idx


@handler("Einsum")
def _einsum(ctx: NodeCtx, ins):
    """Einsum of one or more float32 operands: per operand, indices used nowhere else summed
    away; operands contracted pairwise, left to right, each pair a batched MatMul between
    transposes; the result transposed to the output's order. Diagonals (an index twice in
    one operand) and broadcasting an extent of 1 are refused."""
    if any(v.dtype != np.float32 for v in ins):
        raise ctx.fail("Einsum is supported for float32")
    terms, out = _einsum_terms(ctx, str(ctx.attr("equation", "")), [v.rank for v in ins])
    cur, cur_idx = ins[0], terms[0]
    for k in range(1, len(ins)):
        later = set(out).union(*[set(t) for t in terms[k + 1:]])
        cur, cur_idx = _einsum_pair(ctx, cur, cur_idx, ins[k], terms[k], later)
    cur, cur_idx = _einsum_sum_out(ctx, cur, cur_idx, set(out))
    return [transpose(ctx, cur, [cur_idx.index(c) for c in out], ctx.out_name())]


@handler("Gemm")
def _gemm(ctx: NodeCtx, ins):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    if b.const is not None and (c is None or c.const is not None):
        w = (b.const if tb else b.const.T) * np.float32(alpha)
        bias = None
        if c is not None and beta != 0:
            n = w.shape[0]
            if c.const.size not in (1, n) or (c.const.ndim == 2 and c.const.shape[0] != 1):
                bias = None
            else:
                bias = np.broadcast_to(c.const.reshape(-1), (n,)) * np.float32(beta)
            if bias is not None or c.const.size == 0:
                x = a
                if ta:
                    x = ctx.b.emit("transpose", [a], [spec(ctx.b.fresh(ctx.name), a.dtype, a.shape[::-1])],
                                   iattr=[1, 0], name=ctx.name)[0]
                return [linear(ctx, x, w, bias, ctx.out_name())]
        else:
            x = a
            if ta:
                x = ctx.b.emit("transpose", [a], [spec(ctx.b.fresh(ctx.name), a.dtype, a.shape[::-1])],
                               iattr=[1, 0], name=ctx.name)[0]
            return [linear(ctx, x, w, None, ctx.out_name())]
    m = a.shape[1] if ta else a.shape[0]
    n = b.shape[0] if tb else b.shape[1]
    return ctx.b.emit("gemm", [a, b, c], [spec(ctx.out_name(), np.float32, [m, n])], iattr=[ta, tb],
                      fattr=[alpha, beta], name=ctx.name)


# ---------------------------------------------------------------- convolution


def _live_taps(n_in: int, n_out: int, k: int, s: int, d: int, pb: int) -> Optional[Tuple[int, int]]:
    """First and last kernel index along one axis whose reads reach the input for some output
    (output o, tap t reads o·s - pb + t·d); None when none does."""
    live = []
    for t in range(k):
        first = max(0, -((t * d - pb) // s))  # the first output whose read is >= 0
        if first < n_out and first * s - pb + t * d < n_in:
            live.append(t)
    return (live[0], live[-1]) if live else None


def _prune_padding_taps(spatial, out_sp, kernel, strides, dil, pb, pe):
    """A dilated conv whose padding is wider than its input has taps that only ever read the
    padding (DeepLab's ASPP: 3x3 at dilation 24 and 36 over 20x20 features is a 1x1 conv):
    ((kernel, dilations, pads_begin, pads_end), weight slices) of the same conv without them
    (a kernel extent of 1 takes dilation 1), or None.
    Only when every size is known and the new pads stay >= 0."""
    sizes = list(spatial) + list(out_sp) + list(pb) + list(pe)
    if not all(S.is_static(v) for v in sizes):
        return None
    new_k, new_d, new_b, new_e, cuts = [], [], [], [], []
    for n_in, n_out, k, s, d, b, e in zip(spatial, out_sp, kernel, strides, dil, pb, pe):
        b, e = int(b), int(e)
        live = _live_taps(int(n_in), int(n_out), k, s, d, b)
        if live is None:
            return None  # every tap reads padding: leave it to the op (output = bias)
        t0, t1 = live
        nb, ne = b - t0 * d, e - (k - 1 - t1) * d
        if nb < 0 or ne < 0:
            return None
        new_k.append(t1 - t0 + 1), new_b.append(nb), new_e.append(ne), cuts.append(slice(t0, t1 + 1))
        new_d.append(d if t1 > t0 else 1)
    if new_k == list(kernel):
        return None
    return (new_k, new_d, new_b, new_e), tuple(cuts)


# A stride-1 conv whose taps read the input at fewer than this share of (output, tap) pairs
# runs tap by tap over each tap's valid output rectangle (_conv_by_taps): DeepLab's ASPP at
# dilation 12 over 20x20 features reads the input at 36% of them, the direct path computes
# every pair over the padded plane.
TAP_REGIONS_MAX_SHARE = 0.5
# ... and only when each tap's 1x1 product is worth an op, a pad and an add: at least this
# many multiply-adds (rectangle positions x C x M) on average. One thread on the Zen 3 guest
# of bench/RESULTS.md (2026-12-07), µs direct / tap by tap: 128 -> 128 3x3 pad 1 over 2x2
# 31 / 53 (29 K per tap), 64 ch 16x16 dilation 12 251 / 294 (262 K), 32 ch 20x20
# dilation 12 113 / 193 (147 K), 64 ch 32x32 dilation 24 1012 / 877 (1.05 M), 128 ch 16x16
# dilation 8 935 / 897 (1.9 M), 256 ch 20x20 dilation 12 6485 / 3526 (9.4 M).
TAP_REGIONS_MIN_MACS = 1 << 20


def _tap_regions(spatial, out_sp, kernel, strides, dil, pb, group: int, channels_x_outputs: int):
    """Per tap (row tap i, column tap j) of a 2-D stride-1 conv, the output rectangle whose
    inputs lie inside x — [(i, j, (oh0, oh1), (ow0, ow1))], empty rectangles left out — when
    the taps read x at under TAP_REGIONS_MAX_SHARE of the (output, tap) pairs and the average
    rectangle is TAP_REGIONS_MIN_MACS of work (channels_x_outputs: C x M); else None."""
    if len(kernel) != 2 or group != 1 or list(strides) != [1, 1] or kernel[0] * kernel[1] == 1:
        return None
    if not all(S.is_static(v) for v in list(spatial) + list(out_sp) + list(pb)):
        return None
    spans = []
    for n_in, n_out, k, d, b in zip(spatial, out_sp, kernel, dil, pb):
        n_in, n_out, b = int(n_in), int(n_out), int(b)
        # tap t reads input o + t·d - b: inside x for o in [b - t·d, n_in + b - t·d)
        spans.append([(t, max(0, b - t * d), min(n_out, n_in + b - t * d)) for t in range(k)])
    regions = [(i, j, (r0, r1), (c0, c1)) for i, r0, r1 in spans[0] for j, c0, c1 in spans[1]
               if r1 > r0 and c1 > c0]
    pairs = sum((r1 - r0) * (c1 - c0) for _, _, (r0, r1), (c0, c1) in regions)
    total = int(out_sp[0]) * int(out_sp[1]) * kernel[0] * kernel[1]
    if not total or pairs >= TAP_REGIONS_MAX_SHARE * total:
        return None
    return regions if pairs * channels_x_outputs >= TAP_REGIONS_MIN_MACS * len(regions) else None


def _conv_by_taps(ctx: NodeCtx, x: Value, w: Value, bias: Optional[Value], regions, out_sp, dil, pb,
                  name: str) -> Value:
    """The conv as a sum over its taps of 1x1 convs (products with the tap's [M, C] weight),
    each over the input rectangle its valid output rectangle reads, placed into the output by
    a zero pad; the bias added once. No padded plane and no product with padding."""
    oh, ow = int(out_sp[0]), int(out_sp[1])
    total = None
    for i, j, (r0, r1), (c0, c1) in regions:
        src_r, src_c = r0 + i * dil[0] - int(pb[0]), c0 + j * dil[1] - int(pb[1])
        part = ctx.call("Slice", [x, ctx.const([src_r, src_c]), ctx.const([src_r + r1 - r0, src_c + c1 - c0]),
                                  ctx.const([2, 3])], as_opset=13)[0]
        tap_w = ctx.b.const(np.ascontiguousarray(w.const[:, :, i:i + 1, j:j + 1]), ctx.b.fresh(ctx.name + ".tap"))
        y = ctx.call("Conv", [part, tap_w], kernel_shape=[1, 1])[0]
        if (r0, r1, c0, c1) != (0, oh, 0, ow):
            y = ctx.call("Pad", [y, ctx.const([0, 0, r0, c0, 0, 0, oh - r1, ow - c1])], as_opset=13)[0]
        total = y if total is None else ctx.call("Add", [total, y])[0]
    if bias is not None:
        total = ctx.call("Add", [total, ctx.b.const(bias.const.reshape(-1, 1, 1))])[0]
    return ctx.b.alias(total, total.shape, name)


def conv_out_dim(ctx, d: Dim, k: int, s: int, dil: int, pb: int, pe: int) -> Dim:
    return S.dim_add(S.dim_floordiv(S.dim_sub(S.dim_add(d, pb + pe), dil * (k - 1) + 1), s), 1)


def _auto_pads(ctx: NodeCtx, spatial, kernel, strides, dil):
    auto = ctx.attr("auto_pad", "NOTSET")
    sr = len(kernel)
    if auto in ("NOTSET", ""):
        pads = ctx.attr("pads", [0] * (2 * sr))
        return list(pads[:sr]), list(pads[sr:])
    if auto == "VALID":
        return [0] * sr, [0] * sr
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pb, pe = [], []
        for d, k, s, dl in zip(spatial, kernel, strides, dil):
            if S.is_static(d):
                d = int(d)
                out = -(-d // s)
                total = max((out - 1) * s + dl * (k - 1) + 1 - d, 0)
            elif s == 1:
                total = dl * (k - 1)  # out = d: the same total for every length
            else:
                raise ctx.fail("auto_pad SAME with a stride > 1 needs static spatial sizes")
            small, big = total // 2, total - total // 2
            pb.append(small if auto == "SAME_UPPER" else big)
            pe.append(big if auto == "SAME_UPPER" else small)
        return pb, pe
    raise ctx.fail(f"auto_pad {auto!r} is not supported")


CONV_Y_BLOCK_FLOATS = 196608  # op_conv.c: a block of y that stays in L2
CONV_DW_PLANES = 8  # op_conv.c: a depthwise conv's planes, one per thread's piece


def conv_scratch(cg: int, mg: int, kernel, strides, dil, out_sp, packed: bool = False,
                 pointwise: bool = False, few_positions: int = 0) -> Dim:
    """Scratch bytes of a non-pointwise conv: the layout documented in op_conv.c (the
    direct path; conv_scratch_bytes there checks it): row offsets, the padded input's stride
    phases (a depthwise conv: CONV_DW_PLANES of them, the threads' planes), the row buffer,
    the few-positions path's transposed im2col. Every term grows
    with the output size, so the reservation at the dims' bounds covers smaller runs.
    packed (op conv_packed): the row offsets and, unless pointwise, the phases only; with
    few_positions (at most CONV_ROWS_MAX_P output positions, not pointwise) at least room for
    the transposed im2col rows after the row offsets, which that path reads instead."""
    k = cg * int(np.prod(kernel))
    if packed and few_positions and not pointwise:
        return S.dim_max(conv_scratch(cg, mg, kernel, strides, dil, out_sp, packed=True),
                         _conv_offsets_bytes(k) + 4 * k * few_positions)
    if packed and pointwise:
        return _conv_offsets_bytes(k)
    if len(kernel) == 2 and kernel[1] == 1 and S.is_static(out_sp[1]) and int(out_sp[1]) == 1:
        # a [kh, 1] kernel giving one output column: the op runs it as a 1-D conv along H when
        # the input is one column wide too (op_conv.c); reserve for both shapes
        return S.dim_max(_conv_scratch_2d(cg, mg, k, kernel, strides, dil, out_sp, packed),
                         _conv_scratch_2d(cg, mg, k, [1, kernel[0]], [1, strides[0]], [1, dil[0]],
                                          [1, out_sp[0]], packed))
    if len(kernel) == 1:
        kernel, strides, dil, out_sp = [1] + list(kernel), [1] + list(strides), [1] + list(dil), [1] + list(out_sp)
    return _conv_scratch_2d(cg, mg, k, kernel, strides, dil, out_sp, packed)


def _conv_offsets_bytes(k: int) -> int:
    """The row offsets at the start of a conv's scratch: k int64, rounded up to 64 bytes."""
    return (k * 8 + 63) // 64 * 64


def _conv_scratch_2d(cg: int, mg: int, k: int, kernel, strides, dil, out_sp, packed: bool) -> Dim:
    extent = [S.dim_ceildiv(S.dim_add(S.dim_mul(S.dim_sub(o, 1), s), (kk - 1) * d + 1), s)
              for o, kk, s, d in zip(out_sp, kernel, strides, dil)]
    planes = CONV_DW_PLANES if cg == 1 and mg == 1 else cg
    phases = S.dim_mul(planes * strides[0] * strides[1], S.dim_mul(extent[0], extent[1]))
    if packed:
        return S.dim_add(_conv_offsets_bytes(k), S.dim_mul(4, phases))
    row = S.dim_mul(mg, extent[1])
    rowbuf = S.dim_min(S.dim_mul(row, out_sp[0]), S.dim_max(CONV_Y_BLOCK_FLOATS, row))
    few = S.dim_mul(k, S.dim_min(S.prod(out_sp), 16))
    floats = S.dim_add(S.dim_add(phases, rowbuf), few)
    return S.dim_add(_conv_offsets_bytes(k), S.dim_mul(4, floats))


@handler("Conv")
def _conv(ctx: NodeCtx, ins):
    return [conv(ctx, ins[0], ins[1], ins[2] if len(ins) > 2 else None, ctx.out_name())]


def conv(ctx: NodeCtx, x: Value, w: Value, bias: Optional[Value], name: str) -> Value:
    """The Conv node's convolution (its attributes from ctx) as one runtime op named name."""
    if x.dtype != np.float32 or w.dtype != np.float32:
        raise ctx.fail("Conv is supported for float32")
    sr = x.rank - 2
    if sr not in (1, 2, 3):
        raise ctx.fail(f"{sr}-D convolution is not supported (1-D, 2-D and 3-D are)")
    if w.const is None or not w.static:
        raise ctx.fail("the weights must be constants")
    if bias is not None and bias.const is None:
        raise ctx.fail("the bias must be a constant")
    kernel = [int(d) for d in w.shape[2:]]
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        raise ctx.fail("kernel_shape does not match the weights")
    strides = list(ctx.attr("strides", [1] * sr))
    dil = list(ctx.attr("dilations", [1] * sr))
    group = ctx.attr("group", 1)
    pb, pe = _auto_pads(ctx, x.shape[2:], kernel, strides, dil)
    m = int(w.shape[0])
    c = x.shape[1]
    if S.is_static(c) and int(c) != int(w.shape[1]) * group:
        raise ctx.fail(f"input has {c} channels, weights expect {int(w.shape[1]) * group}")
    out_sp = [conv_out_dim(ctx, d, k, s, dl, b_, e_) for d, k, s, dl, b_, e_ in
              zip(x.shape[2:], kernel, strides, dil, pb, pe)]
    if sr == 3:
        return _conv3d(ctx, x, w, bias, kernel, strides, dil, group, pb, pe, out_sp, name)
    shape = [x.shape[0], m] + out_sp
    if all(k == 1 for k in kernel) and pb == [0] * sr and pe == [0] * sr and strides != [1] * sr:
        # A strided 1x1 conv reads only every stride-th input: those, copied out once (a
        # quarter of x at stride 2), make it a pointwise conv, which reads x in place. The
        # strided path instead copies x whole into its stride phases, then multiplies over
        # one of them (one thread, 256 -> 512 at 56x56 stride 2: 2095 us against 1555 for
        # the pointwise conv on the picked inputs; ResNet-50 has three such convs).
        x = ctx.b.emit("slice", [x], [spec(ctx.b.fresh(ctx.name + ".strided"), x.dtype, list(x.shape[:2]) + out_sp)],
                       iattr=[x.rank, 1, 1] + strides, dattr=[0] * x.rank, name=ctx.name + ".strided")[0]
        strides, dil = [1] * sr, [1] * sr
    pruned = _prune_padding_taps(x.shape[2:], out_sp, kernel, strides, dil, pb, pe)
    if pruned is not None:  # the same output shape, from the taps that read the input
        (kernel, dil, pb, pe), cuts = pruned
        w = ctx.b.const(np.ascontiguousarray(w.const[(slice(None), slice(None)) + cuts]),
                        ctx.b.fresh(ctx.name + ".live_taps"))
    regions = _tap_regions(x.shape[2:], out_sp, kernel, strides, dil, pb, group, m * int(w.shape[1]))
    if regions is not None:
        return _conv_by_taps(ctx, x, w, bias, regions, out_sp, dil, pb, name)
    pointwise = all(k == 1 for k in kernel) and strides == [1] * sr and pb == [0] * sr and pe == [0] * sr
    scratch = 0 if pointwise else conv_scratch(int(w.shape[1]), m // group, kernel, strides, dil, out_sp)
    return ctx.b.emit("conv", [x, w, bias], [spec(name, np.float32, shape)],
                      iattr=[sr, group, 0] + strides + dil + pb + pe, fattr=[0, 0], scratch_bytes=scratch,
                      name=ctx.name)[0]


def _conv3d(ctx: NodeCtx, x: Value, w: Value, bias: Optional[Value], kernel, strides, dil, group: int, pb, pe,
            out_sp, name: str) -> Value:
    """A 3-D convolution as 2-D ones: output depth plane d sums, over the depth taps t, the
    2-D convolution of input plane d·stride + t·dilation (after the depth padding) with the
    weight's tap-t slice. Each tap's planes go through one 2-D conv as a batch of N·OD
    images ([N, C, OD, H, W] → [N·OD, C, H, W]); the tap sums are elementwise adds. A kernel
    over depth alone is one 2-D conv over [N, C, D, H·W] instead."""
    n, c, depth = x.shape[0], x.shape[1], x.shape[2]
    if not S.is_static(depth):
        raise ctx.fail("a 3-D convolution needs its depth (axis 2) known at compile time")
    m, od = int(w.shape[0]), int(out_sp[0])
    if od < 1:
        raise ctx.fail(f"the kernel (depth {kernel[0]}, dilation {dil[0]}) is larger than the padded depth")
    if kernel[1:] == [1, 1] and strides[1:] == [1, 1] and [int(v) for v in pb[1:] + pe[1:]] == [0] * 4:
        # a depth-only kernel ((kd, 1, 1), R(2+1)D's temporal convs; or pointwise): a 2-D conv
        # with a [kd, 1] kernel over x viewed as [N, C, D, H·W], no data moved
        hw = S.dim_mul(x.shape[3], x.shape[4])
        cols = ctx.b.alias(x, [n, c, depth, hw], ctx.b.fresh(ctx.name))
        w2 = ctx.b.const(np.ascontiguousarray(w.const.reshape(w.shape[0], w.shape[1], kernel[0], 1)),
                         ctx.b.fresh(ctx.name + ".w"))
        y = ctx.call("Conv", [cols, w2] + ([bias] if bias is not None else []), kernel_shape=[kernel[0], 1],
                     strides=[strides[0], 1], dilations=[dil[0], 1], group=group,
                     pads=[int(pb[0]), 0, int(pe[0]), 0])[0]
        return ctx.b.alias(y, [n, m, od, x.shape[3], x.shape[4]], name)
    if pb[0] or pe[0]:
        x = ctx.call("Pad", [x, ctx.const([0, 0, int(pb[0]), 0, 0] + [0, 0, int(pe[0]), 0, 0])], as_opset=13)[0]
    attrs2d = dict(kernel_shape=kernel[1:], strides=strides[1:], dilations=dil[1:], group=group,
                   pads=[int(pb[1]), int(pb[2]), int(pe[1]), int(pe[2])])
    total = None
    for t in range(kernel[0]):
        start = t * dil[0]
        planes = ctx.call("Slice", [x, ctx.const([start]), ctx.const([start + strides[0] * (od - 1) + 1]),
                                    ctx.const([2]), ctx.const([strides[0]])], as_opset=13)[0]
        planes = ctx.call("Transpose", [planes], perm=[0, 2, 1, 3, 4])[0]
        images = ctx.b.alias(planes, [S.dim_mul(n, od), c] + list(planes.shape[3:]), ctx.b.fresh(ctx.name))
        tap_w = ctx.b.const(np.ascontiguousarray(w.const[:, :, t]), ctx.b.fresh(ctx.name + ".tap"))
        y = ctx.call("Conv", [images, tap_w] + ([bias] if bias is not None and t == 0 else []), **attrs2d)[0]
        total = y if total is None else ctx.call("Add", [total, y])[0]
    y5 = ctx.b.alias(total, [n, od, m] + list(total.shape[2:]), ctx.b.fresh(ctx.name))
    out = ctx.call("Transpose", [y5], perm=[0, 2, 1, 3, 4])[0]
    return ctx.b.alias(out, out.shape, name)


# ---------------------------------------------------------------- control flow


@handler("If")
def _if(ctx: NodeCtx, ins):
    cond = ins[0]
    then_g, else_g = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    k = ctx.b.known_values(cond)
    if k is not None and S.is_static(k[0]):
        branch = then_g if int(k[0]) else else_g
        return _inline_branch(ctx, branch, taken=True)
    # specialise: both branches in the plan, one runs, chosen per run by the condition
    b = ctx.b
    else_label, end_label = b.label(ctx.name + ".else"), b.label(ctx.name + ".end")
    b.ops.append(Op("if", [b.materialize(cond)], [], iattr=[else_label], name=ctx.name))
    # (outputs materialised inside their own branch: the then-branch's writes are placed later)
    then_out = _branch_tensors(ctx, _inline_branch(ctx, then_g), "then")
    then_end = len(b.ops)  # the then-branch's writes of the results go here, once the shapes are known
    b.ops.append(Op("jump", [], [], iattr=[end_label], name=ctx.name))
    b.place(else_label)
    else_out = _branch_tensors(ctx, _inline_branch(ctx, else_g), "else")
    results, then_writes = [], []
    for i, (tv, ev) in enumerate(zip(then_out, else_out)):
        if tv.dtype != ev.dtype or tv.rank != ev.rank:
            raise ctx.fail(f"output {i}: the branches give {tv.dtype}{list(tv.shape)} and {ev.dtype}{list(ev.shape)}; "
                           "nerve needs both branches to agree on dtype and rank")
        shape = [t if t == e else data_extent(ctx, max(_elements_at_bounds(ctx, [t]), _elements_at_bounds(ctx, [e])),
                                              f"out{i}.dim{k}")
                 for k, (t, e) in enumerate(zip(tv.shape, ev.shape))]
        target = Value(ctx.out_name(i), tv.dtype, shape)
        then_writes += _branch_write(ctx, tv, target)
        b.ops += _branch_write(ctx, ev, target)
        results.append(target)
    b.ops[then_end:then_end] = then_writes
    b.place(end_label)
    return results


def _branch_tensors(ctx: NodeCtx, outs, branch: str) -> List[Value]:
    """A branch's outputs as runtime tensors. A sequence has no tensor of its own (it exists at
    import only, onnx_import.SequenceValue), so an If that picks one at run time fails clearly."""
    for i, v in enumerate(outs):
        if not isinstance(v, Value):
            raise ctx.fail(f"the {branch} branch's output {i} is a sequence; an If whose condition is known only at "
                           "run time must give tensors (a condition known when the model is compiled may give a "
                           "sequence)")
    return [ctx.b.materialize(v) for v in outs]


def _branch_write(ctx: NodeCtx, v: Value, target: Value) -> List[Op]:
    """The ops that make a branch's output the If's output tensor (one tensor for both
    branches): where the branches' sizes differ, the target's dim is a size the data decides,
    set to this branch's (op dims, then set_dim: an optimum "merged" decoder's present KV is
    past + new long with the cache and new long without); then a copy."""
    ops = []
    for d_target, d in zip(target.shape, v.shape):
        if d_target != d:  # (a symbol of the If's own, data_extent)
            (name,) = S.symbols_of(d_target)
            count = Value(ctx.b.fresh(ctx.name + ".size"), np.int64, ())
            ops.append(Op("dims", [], [count], dattr=[d], name=ctx.name))
            ops.append(Op("set_dim", [count], [], iattr=[SymbolRef(name)], name=ctx.name))
    ops.append(Op("copy", [v], [target], name=ctx.name))
    if target.producer is None:  # the first branch's copy stands for both
        target.producer = ops[-1]
    return ops


# Iterations a Loop may unroll to (each one's ops go into the plan).
LOOP_UNROLL_MAX = 1024


@handler("Loop")
def _loop(ctx: NodeCtx, ins):
    """Loop whose iterations are known when the model is compiled — a trip count M from
    constants or shape arithmetic, and a condition that stays known (absent, a constant, or
    computed from the iteration number), as scripted `for i in range(n)` loops export —
    unrolled: the body imported once per iteration with the loop-carried values of the one
    before, its scan outputs stacked along a new first axis. A plan runs a fixed list of ops,
    so a loop whose condition or trip count depends on the data is refused."""
    body = ctx.attrs["body"]
    m_v, cond_v, carried = ins[0], ins[1], list(ins[2:])
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    if len(body.input) != 2 + n_carried or n_scan < 0:
        raise ctx.fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs for "
                       f"{n_carried} loop-carried values")
    trip = None if m_v is None else ctx.known_int(m_v, "the trip count M")

    def known_condition(v: Optional[Value], what: str) -> bool:
        if v is None:
            return True
        k = ctx.b.known_values(v)
        if k is None or len(k) != 1 or not S.is_static(k[0]):
            raise ctx.fail(f"{what} depends on the data: nerve runs loops unrolled, so their iterations must be "
                           "known when the model is compiled (export with the loop unrolled, or run it outside)")
        return bool(int(k[0]))

    cond = known_condition(cond_v, "the loop's condition")
    if trip is None and not cond:
        trip = 0
    scans: List[List[Value]] = [[] for _ in range(n_scan)]
    i = 0
    while cond and (trip is None or i < trip):
        if i >= LOOP_UNROLL_MAX:
            raise ctx.fail(f"more than {LOOP_UNROLL_MAX} iterations to unroll" +
                           ("" if trip is not None else " (no trip count, and the condition stays true)"))
        outs = _run_body(ctx, body, [ctx.b.const(np.array(i, np.int64), ctx.b.fresh(ctx.name + ".iter")),
                                     ctx.b.const(np.array(True), ctx.b.fresh(ctx.name + ".cond"))] + carried)
        cond = known_condition(outs[0], "the condition the body computes")
        carried = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
        i += 1
    return list(carried) + [_stack_steps(ctx, parts, 0, f"scan output {k}") for k, parts in enumerate(scans)]


def _run_body(ctx: NodeCtx, body, inputs: List[Value]) -> List[Value]:
    """One step of an unrolled Loop or Scan: the body imported with its inputs bound to
    `inputs` (it also sees the enclosing graph), its outputs."""
    scope = dict(ctx.imp.current_scope)
    for vi, v in zip(body.input, inputs):
        scope[vi.name] = v
    ctx.imp.run_graph(body, scope)
    return [scope[o.name] for o in body.output]


def _stack_steps(ctx: NodeCtx, parts: List[Value], axis: int, what: str) -> Value:
    """An unrolled loop's per-step outputs stacked along a new axis (Loop's and Scan's scan
    outputs)."""
    if not parts:
        raise ctx.fail(f"{what} of a loop that runs no step: its shape is unknown")
    rows = [ctx.call("Unsqueeze", [v, ctx.const([axis])])[0] for v in parts]
    return rows[0] if len(rows) == 1 else ctx.call("Concat", rows, axis=axis)[0]


@handler("Scan")
def _scan(ctx: NodeCtx, ins):
    """Scan (opset 9 on) over a sequence length known at compile time, unrolled: step t
    takes slice t of each scan input along its axis (from the end for a reverse direction)
    and the states of the step before; each scan output's slices are stacked along its axis
    (in reverse for a reverse direction)."""
    if ctx.opset < 9:
        raise ctx.fail("Scan of opset 8 (batched, with sequence_lens) is not supported")
    body = ctx.attrs["body"]
    n_in = int(ctx.attr("num_scan_inputs"))
    states, xs = list(ins[:len(ins) - n_in]), list(ins[len(ins) - n_in:])
    n_states, n_out = len(states), len(body.output) - len(states)
    if len(body.input) != n_states + n_in or n_out < 0:
        raise ctx.fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs for "
                       f"{n_states} states and {n_in} scan inputs")

    def per_tensor(name: str, count: int) -> List[int]:
        vals = list(ctx.attr(name, [0] * count))
        if len(vals) != count:
            raise ctx.fail(f"{name} has {len(vals)} entries for {count} tensors")
        return [int(v) for v in vals]

    in_axes, in_dirs = per_tensor("scan_input_axes", n_in), per_tensor("scan_input_directions", n_in)
    out_axes, out_dirs = per_tensor("scan_output_axes", n_out), per_tensor("scan_output_directions", n_out)
    in_axes = [norm_axis(ctx, a, x.rank) for a, x in zip(in_axes, xs)]
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1 or not S.is_static(next(iter(lengths))):
        raise ctx.fail(f"the scan inputs' lengths {[str(d) for d in lengths]} must be one number known when the "
                       "model is compiled (nerve runs Scan unrolled)")
    steps = int(next(iter(lengths)))
    if steps > LOOP_UNROLL_MAX:
        raise ctx.fail(f"{steps} steps: more than the {LOOP_UNROLL_MAX} nerve unrolls")
    outs_per_step: List[List[Value]] = [[] for _ in range(n_out)]
    for t in range(steps):
        slices = [ctx.call("Gather", [x, ctx.const(steps - 1 - t if rev else t)], axis=axis)[0]
                  for x, axis, rev in zip(xs, in_axes, in_dirs)]
        outs = _run_body(ctx, body, list(states) + slices)
        states = outs[:n_states]
        for k, v in enumerate(outs[n_states:]):
            outs_per_step[k].append(v)
    results = list(states)
    for k, parts in enumerate(outs_per_step):
        axis = norm_axis(ctx, out_axes[k], parts[0].rank + 1) if parts else 0
        results.append(_stack_steps(ctx, parts[::-1] if out_dirs[k] else parts, axis, f"scan output {k}"))
    return results


def _inline_branch(ctx: NodeCtx, graph, taken: bool = False) -> List[Value]:
    """Imports a branch; taken: the condition is known, so the branch's tensors are computed
    on every run and may be named as graph outputs (Importer.branch_values)."""
    outer = ctx.imp.current_scope
    scope = dict(outer)
    ctx.imp.run_graph(graph, scope)
    if taken:
        ctx.imp.branch_values.update({k: v for k, v in scope.items() if k not in outer})
    return [scope[o.name] for o in graph.output]


# ---------------------------------------------------------------- element indexing, running sums, top-k
# (runtime ops in native/src/plan/op_index.c)

_SCATTER_REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


def _index_input(ctx: NodeCtx, v: Value, what: str) -> Value:
    if v.dtype not in (np.int64, np.int32):
        raise ctx.fail(f"{what} of {v.dtype}: int64 or int32 expected")
    return ctx.b.materialize(v) if v.symval is not None else v


@handler("GatherElements")
def _gather_elements(ctx: NodeCtx, ins):
    data, ind = ins[0], _index_input(ctx, ins[1], "indices")
    if ind.rank != data.rank:
        raise ctx.fail(f"indices have rank {ind.rank}, data {data.rank}")
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), data.rank)
    return ctx.b.emit("gather_elements", [data, ind], [spec(ctx.out_name(), data.dtype, ind.shape)], iattr=[axis],
                      name=ctx.name)


def _reduction(ctx: NodeCtx, data: Value) -> int:
    name = ctx.attr("reduction", "none")
    if name not in _SCATTER_REDUCTIONS:
        raise ctx.fail(f"reduction {name!r} is not one of {sorted(_SCATTER_REDUCTIONS)}")
    if name != "none" and data.dtype not in (np.float32, np.int64, np.int32):
        raise ctx.fail(f"reduction {name!r} on {data.dtype} data (float32, int64, int32 only)")
    return _SCATTER_REDUCTIONS[name]


@handler("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeCtx, ins):
    data, ind, upd = ins[0], _index_input(ctx, ins[1], "indices"), ins[2]
    if upd.dtype != data.dtype:
        raise ctx.fail(f"updates of {upd.dtype} into data of {data.dtype}")
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), data.rank)
    return ctx.b.emit("scatter_elements", [data, ind, upd], [spec(ctx.out_name(), data.dtype, data.shape)],
                      iattr=[axis, _reduction(ctx, data)], name=ctx.name)


@handler("ScatterND")
def _scatter_nd(ctx: NodeCtx, ins):
    data, ind, upd = ins[0], _index_input(ctx, ins[1], "indices"), ins[2]
    if upd.dtype != data.dtype:
        raise ctx.fail(f"updates of {upd.dtype} into data of {data.dtype}")
    if ind.rank < 1 or not S.is_static(ind.shape[-1]) or int(ind.shape[-1]) > data.rank:
        raise ctx.fail("the indices' last dim must be known at compile time and at most data's rank")
    return ctx.b.emit("scatter_nd", [data, ind, upd], [spec(ctx.out_name(), data.dtype, data.shape)],
                      iattr=[_reduction(ctx, data)], name=ctx.name)


@handler("CumSum", "CumProd")
def _cumsum(ctx: NodeCtx, ins):
    x = ins[0]
    if x.dtype not in (np.float32, np.float64, np.int64, np.int32):
        raise ctx.fail(f"{ctx.op_type} of {x.dtype} is not supported (float32, float64, int64, int32)")
    axis = norm_axis(ctx, ctx.known_int(ins[1], "axis"), x.rank)
    iattr = [axis, int(ctx.attr("exclusive", 0)), int(ctx.attr("reverse", 0))]
    if ctx.op_type == "CumProd":
        iattr.append(1)
    return ctx.b.emit("cumsum", [x], [spec(ctx.out_name(), x.dtype, x.shape)], iattr=iattr, name=ctx.name,
                      inplace=True)


@handler("TopK")
def _topk(ctx: NodeCtx, ins):
    """TopK with k known at compile time (an output extent), or computed from sizes
    (min(1000, boxes left), as detection exports write it: evaluated per run as a dattr):
    values and int64 positions, best first (also for sorted=0, which leaves the order free);
    ties keep the lower position."""
    x = ins[0]
    if x.dtype not in (np.float32, np.int64, np.int32):
        raise ctx.fail(f"TopK of {x.dtype} is not supported (float32, int64, int32)")
    if ctx.opset < 10:
        k = int(ctx.attr("k"))
    else:
        vals = ctx.known(ins[1], "K")
        if len(vals) != 1:
            raise ctx.fail(f"K has {len(vals)} values, expected 1")
        k = int(vals[0]) if S.is_static(vals[0]) else vals[0]
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.rank)
    n = x.shape[axis]
    if S.is_static(k) and (k < 0 or (S.is_static(n) and k > int(n))):
        raise ctx.fail(f"k = {k} is outside [0, {n}]")
    shape = [k if i == axis else d for i, d in enumerate(x.shape)]
    static_k = S.is_static(k)
    return ctx.b.emit("topk", [x], [spec(ctx.out_name(0), x.dtype, shape), spec(ctx.out_name(1), np.int64, shape)],
                      iattr=[axis, k if static_k else -1, int(ctx.attr("largest", 1))],
                      dattr=[] if static_k else [k], scratch_bytes=S.dim_mul(16, n), name=ctx.name)
