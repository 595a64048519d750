"""Handlers for ONNX ops that are short compositions of others (each spelt out through
``NodeCtx.call``, so the passes fuse and place the parts as usual): CastLike, EyeLike, Swish,
SwiGLU, the experimental ops of opsets 1-9 (ImageScaler, Affine, ScaledTanh,
ParametricSoftplus, Crop), ReverseSequence, Hardmax, ReduceLogSum, GlobalLpPool, LpPool,
MeanVarianceNormalization, AffineGrid; and the
sequence ops on sequences of a length known when the model is compiled (SequenceValue:
a list of tensors at import, never in the plan).
"""

from __future__ import annotations

import numpy as np

from . import symbolic as S
from .graph import Value
from .onnx_import import NodeCtx, SequenceValue, handler
from .onnx_ops import _UNARY, binary, norm_axis, unary

F32 = np.dtype(np.float32)


def _onnx_type(dtype) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


@handler("CastLike")
def _cast_like(ctx: NodeCtx, ins):
    return ctx.call("Cast", [ins[0]], to=_onnx_type(ins[1].dtype))


@handler("EyeLike")
def _eye_like(ctx: NodeCtx, ins):
    x = ins[0]
    if x.rank != 2 or not all(S.is_static(d) for d in x.shape):
        raise ctx.fail(f"the input must be 2-D with sizes known when the model is compiled, got {list(x.shape)}")
    dtype = x.dtype
    if ctx.attr("dtype") is not None:
        from onnx import helper

        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attr("dtype"))))
    eye = np.eye(int(x.shape[0]), int(x.shape[1]), int(ctx.attr("k", 0)), dtype=dtype)
    return [ctx.b.const(eye, ctx.out_name())]


@handler("Swish")
def _swish(ctx: NodeCtx, ins):
    """x · sigmoid(alpha · x)."""
    x = ins[0]
    alpha = float(ctx.attr("alpha", 1.0))
    t = binary(ctx, "Mul", x, ctx.const(alpha, F32), ctx.b.fresh(ctx.name)) if alpha != 1.0 else x
    return [binary(ctx, "Mul", x, unary(ctx, _UNARY["Sigmoid"], t, ctx.b.fresh(ctx.name)), ctx.out_name())]


@handler("SwiGLU")
def _swiglu(ctx: NodeCtx, ins):
    """a · sigmoid(alpha · a) · b: Swish(a) gating b, same shapes (no broadcast, as the op says)."""
    a, b = ins[0], ins[1]
    if list(a.shape) != list(b.shape):
        raise ctx.fail(f"A {list(a.shape)} and B {list(b.shape)} must have the same shape")
    swish = ctx.call("Swish", [a], alpha=float(ctx.attr("alpha", 1.0)))[0]
    return [binary(ctx, "Mul", swish, b, ctx.out_name())]


# ONNX's experimental ops of opsets 1-9 (dropped from the standard, still run by onnxruntime
# and still in old model zoo exports: tiny-YOLOv2's ImageScaler)

def _float_attr(ctx: NodeCtx, name: str, default: float) -> Value:
    return ctx.const(float(ctx.attr(name, default)), F32)


@handler("ImageScaler")
def _image_scaler(ctx: NodeCtx, ins):
    """scale · x + bias[c] over [N, C, H, W]."""
    x = ins[0]
    bias = [float(b) for b in ctx.attr("bias", [])]
    if x.rank != 4 or not S.is_static(x.shape[1]) or len(bias) != int(x.shape[1]):
        raise ctx.fail(f"needs x [N, C, H, W] and one bias per channel, got {list(x.shape)} and {len(bias)}")
    scaled = ctx.call("Mul", [x, _float_attr(ctx, "scale", 1.0)])[0]
    return ctx.call("Add", [scaled, ctx.const(np.array(bias).reshape(1, -1, 1, 1), F32)])


@handler("Affine")
def _affine(ctx: NodeCtx, ins):
    """alpha · x + beta."""
    scaled = ctx.call("Mul", [ins[0], _float_attr(ctx, "alpha", 1.0)])[0]
    return ctx.call("Add", [scaled, _float_attr(ctx, "beta", 0.0)])


@handler("ScaledTanh")
def _scaled_tanh(ctx: NodeCtx, ins):
    """alpha · tanh(beta · x)."""
    inner = ctx.call("Mul", [ins[0], _float_attr(ctx, "beta", 1.0)])[0]
    return ctx.call("Mul", [ctx.call("Tanh", [inner])[0], _float_attr(ctx, "alpha", 1.0)])


@handler("ParametricSoftplus")
def _parametric_softplus(ctx: NodeCtx, ins):
    """alpha · ln(1 + exp(beta · x))."""
    inner = ctx.call("Mul", [ins[0], _float_attr(ctx, "beta", 1.0)])[0]
    return ctx.call("Mul", [ctx.call("Softplus", [inner])[0], _float_attr(ctx, "alpha", 1.0)])


@handler("Crop")
def _crop(ctx: NodeCtx, ins):
    """[N, C, H, W] cut to rows top.. and columns left..: border [left, top, right, bottom],
    or with scale [height, width] that many from (top, left)."""
    x = ins[0]
    border = [int(b) for b in ctx.attr("border", [])]
    scale = [int(v) for v in ctx.attr("scale", [])]
    if x.rank != 4 or len(border) != 4 or len(scale) not in (0, 2):
        raise ctx.fail(f"needs x [N, C, H, W], border [left, top, right, bottom] and optionally scale "
                       f"[height, width]; got {list(x.shape)}, {border}, {scale}")
    left, top, right, bottom = border
    if scale:
        ends = [top + scale[0], left + scale[1]]
    else:
        if not (S.is_static(x.shape[2]) and S.is_static(x.shape[3])):
            raise ctx.fail("a crop by borders needs H and W known at compile time")
        ends = [int(x.shape[2]) - bottom, int(x.shape[3]) - right]
    return ctx.call("Slice", [x, ctx.const([top, left]), ctx.const(ends), ctx.const([2, 3])], as_opset=13)


@handler("ReverseSequence")
def _reverse_sequence(ctx: NodeCtx, ins):
    """Each batch entry's first sequence_lens[b] steps reversed, the rest kept (TF exports of
    bidirectional RNNs): per batch entry, a Gather of its slice with a constant step order,
    concatenated. The lengths must be known when the model is compiled."""
    x = ins[0]
    lens = [int(v) for v in ctx.known(ins[1], "sequence_lens")]
    batch_axis, time_axis = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1} or x.rank < 2:
        raise ctx.fail(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 of an input of rank >= 2")
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    if not (S.is_static(steps) and S.is_static(batch)) or len(lens) != int(batch):
        raise ctx.fail(f"needs the batch ({batch}) and time ({steps}) extents known and one length per batch entry, "
                       f"got {len(lens)}")
    steps = int(steps)
    if any(not 0 <= n <= steps for n in lens):
        raise ctx.fail(f"sequence_lens {lens} must lie in [0, {steps}]")
    parts = []
    for b, n in enumerate(lens):
        entry = ctx.call("Slice", [x, ctx.const([b]), ctx.const([b + 1]), ctx.const([batch_axis])], as_opset=13)[0]
        order = list(range(n - 1, -1, -1)) + list(range(n, steps))
        parts.append(ctx.call("Gather", [entry, ctx.const(order)], axis=time_axis)[0])
    return ctx.call("Concat", parts, axis=batch_axis)


@handler("Hardmax")
def _hardmax(ctx: NodeCtx, ins):
    """1 at the first largest value along axis, 0 elsewhere."""
    x = ins[0]
    if ctx.opset < 13:
        raise ctx.fail("Hardmax before opset 13 (over a flattened block) is not supported")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.rank)
    best = ctx.call("ArgMax", [x], axis=axis, keepdims=1)[0]
    idx = ctx.call("Reshape", [ctx.arange(x.shape[axis]), ctx.const([-1] + [1] * (x.rank - 1 - axis))])[0]
    hit = ctx.call("Equal", [best, idx])[0]
    return ctx.call("Cast", [hit], to=_onnx_type(x.dtype))


def _reduce(ctx: NodeCtx, op: str, x: Value, axes, keepdims: int = 1, **attrs) -> Value:
    """op (ReduceSum, ReduceMean, ...) of x over axes (a list, or None for all), with the axes
    passed as the model's opset wants them (an input from opset 18, 13 for ReduceSum)."""
    as_input = ctx.opset >= 18 or (op == "ReduceSum" and ctx.opset >= 13)
    if axes is None:
        return ctx.call(op, [x], keepdims=keepdims, **attrs)[0]
    if as_input:
        return ctx.call(op, [x, ctx.const(list(axes))], keepdims=keepdims, **attrs)[0]
    return ctx.call(op, [x], keepdims=keepdims, axes=list(axes), **attrs)[0]


@handler("ReduceLogSum")
def _reduce_log_sum(ctx: NodeCtx, ins):
    if ctx.opset >= 18:
        axes = ctx.known(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    else:
        axes = ctx.attr("axes")
    if axes is not None and not all(S.is_static(a) for a in axes):
        raise ctx.fail("axes must be known when the model is compiled")
    axes = [int(a) for a in axes] if axes else None
    if axes is None and ctx.attr("noop_with_empty_axes", 0):
        return [unary(ctx, _UNARY["Log"], ins[0], ctx.out_name())]
    total = _reduce(ctx, "ReduceSum", ins[0], axes, ctx.attr("keepdims", 1))
    return [unary(ctx, _UNARY["Log"], total, ctx.out_name())]


@handler("GlobalLpPool")
def _global_lp_pool(ctx: NodeCtx, ins):
    """(Σ |x|^p)^(1/p) over the spatial axes, kept as extents 1."""
    x = ins[0]
    p = int(ctx.attr("p", 2))
    if p < 1:
        raise ctx.fail(f"p = {p} must be >= 1")
    axes = list(range(2, x.rank))
    if p in (1, 2):
        return [_reduce(ctx, "ReduceL1" if p == 1 else "ReduceL2", x, axes)]
    powered = ctx.call("Pow", [unary(ctx, _UNARY["Abs"], x, ctx.b.fresh(ctx.name)), ctx.const(p, F32)])[0]
    return ctx.call("Pow", [_reduce(ctx, "ReduceSum", powered, axes), ctx.const(1.0 / p, F32)])


@handler("LpPool")
def _lp_pool(ctx: NodeCtx, ins):
    """(Σ over each window of |x|^p)^(1/p): an average pool of |x|^p counting the padding (a
    zero there, as LpPool pads), times the window size."""
    x = ins[0]
    ctx.require_attrs(["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides", "p"])
    p = int(ctx.attr("p", 2))
    if p < 1:
        raise ctx.fail(f"p = {p} must be >= 1")
    kernel = [int(k) for k in ctx.attr("kernel_shape") or []]
    powered = unary(ctx, _UNARY["Abs"], x, ctx.b.fresh(ctx.name))
    if p != 1:
        powered = ctx.call("Pow", [powered, ctx.const(p, F32)])[0]
    attrs = {k: v for k, v in ctx.attrs.items() if k != "p"}
    mean = ctx.call("AveragePool", [powered], count_include_pad=1, **attrs)[0]
    total = binary(ctx, "Mul", mean, ctx.const(float(np.prod(kernel)), F32), ctx.b.fresh(ctx.name + ".sum"))
    return [total] if p == 1 else ctx.call("Pow", [total, ctx.const(1.0 / p, F32)])


@handler("MeanVarianceNormalization")
def _mean_variance_normalization(ctx: NodeCtx, ins):
    """(x - E[x]) / (sqrt(E[(x - E[x])²]) + 1e-9) over axes (default 0, 2, 3), as ONNX's function
    body with its epsilon (the variance taken from the centred values)."""
    x = ins[0]
    axes = [norm_axis(ctx, int(a), x.rank) for a in ctx.attr("axes", [0, 2, 3])]
    mean = _reduce(ctx, "ReduceMean", x, axes)
    centred = binary(ctx, "Sub", x, mean, ctx.b.fresh(ctx.name + ".centred"))
    var = _reduce(ctx, "ReduceMean", binary(ctx, "Mul", centred, centred, ctx.b.fresh(ctx.name)), axes)
    std = binary(ctx, "Add", unary(ctx, _UNARY["Sqrt"], var, ctx.b.fresh(ctx.name)), ctx.const(1e-9, F32),
                 ctx.b.fresh(ctx.name + ".std"))
    return [binary(ctx, "Div", centred, std, ctx.out_name())]


@handler("AffineGrid")
def _affine_grid(ctx: NodeCtx, ins):
    """2-D AffineGrid: the sampling grid [N, H, W, 2] of theta [N, 2, 3] over the pixel centres
    (align_corners: the corner pixels) of an H x W image in [-1, 1] — GridSample's input in a
    spatial transformer. The base grid is a constant (size known when compiling); the rest
    is one batched MatMul by thetaᵀ."""
    theta = ins[0]
    size = ctx.known(ins[1], "size")
    if len(size) != 4 or theta.rank != 3:
        raise ctx.fail(f"only the 2-D form is supported (theta [N, 2, 3], size [N, C, H, W]), got size {size}")
    if not all(S.is_static(d) for d in size[2:]):
        raise ctx.fail("the grid's H and W must be known when the model is compiled")
    n, h, w = size[0], int(size[2]), int(size[3])

    def axis(k: int) -> np.ndarray:
        if ctx.attr("align_corners", 0):
            return np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
        return (2.0 * np.arange(k) + 1.0) / k - 1.0

    ys, xs = np.meshgrid(axis(h), axis(w), indexing="ij")
    base = np.stack([xs, ys, np.ones_like(xs)], axis=-1).reshape(h * w, 3).astype(F32)
    theta_t = ctx.call("Transpose", [theta], perm=[0, 2, 1])[0]  # [N, 3, 2]
    flat = ctx.call("MatMul", [ctx.b.const(base, ctx.b.fresh(ctx.name + ".base")), theta_t])[0]  # [N, H·W, 2]
    shape = ctx.b.from_known([n, h, w, 2], np.int64, [4], ctx.b.fresh(ctx.name + ".shape"))
    return ctx.call("Reshape", [flat, shape])


# ---------------------------------------------------------------- sequences (a length known at compile time)


def _sequence(ctx: NodeCtx, v, what: str = "input_sequence") -> SequenceValue:
    if not isinstance(v, SequenceValue):
        raise ctx.fail(f"{what} is not a sequence")
    return v


def _position(ctx: NodeCtx, seq: SequenceValue, pos, insert: bool) -> int:
    """A known position in seq (negative counts from the end; an insert may be at the end)."""
    n = len(seq.items)
    p = ctx.known_int(pos, "position")
    if not (-n <= p <= n if insert else -n <= p < n):
        raise ctx.fail(f"position {p} is out of range for a sequence of {n} tensors")
    return p + n if p < 0 else p


@handler("SplitToSequence")
def _split_to_sequence(ctx: NodeCtx, ins):
    """The input split along axis by split (sizes, or one chunk size: the last chunk takes
    the rest), or into extent-1 pieces (keepdims 0: that axis dropped)."""
    x = ins[0]
    axis = norm_axis(ctx, ctx.attr("axis", 0), x.rank)
    split = ins[1] if len(ins) > 1 else None
    if split is not None:
        sizes = ctx.known(split, "split")
        if split.rank == 0:
            chunk, extent = sizes[0], x.shape[axis]
            if not (S.is_static(chunk) and S.is_static(extent)) or int(chunk) <= 0:
                raise ctx.fail("a scalar split needs a positive chunk and an axis extent known when the model is "
                               "compiled")
            full, rest = divmod(int(extent), int(chunk))
            sizes = [int(chunk)] * full + ([rest] if rest else [])
        sizes_v = ctx.b.from_known(sizes, np.int64, (len(sizes),), ctx.b.fresh(ctx.name + ".split"))
        return [SequenceValue(ctx.call("Split", [x, sizes_v], n_out=len(sizes), axis=axis))]
    extent = x.shape[axis]
    if not S.is_static(extent):
        raise ctx.fail("splitting into extent-1 pieces needs the axis extent known when the model is compiled")
    pieces = ctx.call("Split", [x, ctx.const([1] * int(extent))], n_out=int(extent), axis=axis)
    if not int(ctx.attr("keepdims", 1)):
        pieces = [ctx.call("Squeeze", [p, ctx.const([axis])])[0] for p in pieces]
    return [SequenceValue(pieces)]


@handler("SequenceConstruct")
def _sequence_construct(ctx: NodeCtx, ins):
    return [SequenceValue(ins)]


@handler("SequenceEmpty")
def _sequence_empty(ctx: NodeCtx, ins):
    return [SequenceValue([])]


@handler("SequenceAt")
def _sequence_at(ctx: NodeCtx, ins):
    seq = _sequence(ctx, ins[0])
    return [seq.items[_position(ctx, seq, ins[1], insert=False)]]


@handler("SequenceLength")
def _sequence_length(ctx: NodeCtx, ins):
    return [ctx.b.const(np.array(len(_sequence(ctx, ins[0]).items), np.int64), ctx.out_name())]


@handler("SequenceInsert")
def _sequence_insert(ctx: NodeCtx, ins):
    seq = _sequence(ctx, ins[0])
    at = _position(ctx, seq, ins[2], insert=True) if len(ins) > 2 and ins[2] is not None else len(seq.items)
    return [SequenceValue(seq.items[:at] + [ins[1]] + seq.items[at:])]


@handler("SequenceErase")
def _sequence_erase(ctx: NodeCtx, ins):
    seq = _sequence(ctx, ins[0])
    at = _position(ctx, seq, ins[1], insert=False) if len(ins) > 1 and ins[1] is not None else len(seq.items) - 1
    if not seq.items:
        raise ctx.fail("erasing from an empty sequence")
    return [SequenceValue(seq.items[:at] + seq.items[at + 1:])]


@handler("ConcatFromSequence")
def _concat_from_sequence(ctx: NodeCtx, ins):
    """Concat of the tensors along axis, or (new_axis 1) stacked along a new axis."""
    items = _sequence(ctx, ins[0]).items
    if not items:
        raise ctx.fail("concatenating an empty sequence")
    if ctx.attr("axis") is None:
        raise ctx.fail("the axis attribute is required")
    new_axis = int(ctx.attr("new_axis", 0))
    axis = norm_axis(ctx, ctx.attr("axis"), items[0].rank + new_axis)
    if new_axis:
        items = [ctx.call("Unsqueeze", [v, ctx.const([axis])])[0] for v in items]
    return ctx.call("Concat", items, axis=axis)
