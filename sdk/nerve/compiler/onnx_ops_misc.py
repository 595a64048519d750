"""Handlers for Det, BitCast and MaxRoiPool, each one native op of op_misc.c (det, bitcast,
max_roi_pool), following onnxruntime's CPU kernels where the ONNX text leaves a choice."""

from __future__ import annotations

import numpy as np

from . import symbolic as S
from .graph import NRV_DTYPES, Value
from .onnx_import import NodeCtx, handler
from .onnx_ops import float32_input, spec

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


@handler("Det")
def _det(ctx: NodeCtx, ins):
    """Determinants of the [..., M, M] input's matrices: LU with partial pivoting in double,
    rounded once to float32 (onnxruntime's is Eigen's LU in float32). M = 0 gives 1."""
    ctx.require_attrs(())
    x = float32_input(ctx, ins[0], "X")
    if x.rank < 2:
        raise ctx.fail(f"X must have rank 2 or more ([..., M, M]), got {list(x.shape)}")
    m, n = x.shape[-2], x.shape[-1]
    if S.is_static(m) and S.is_static(n) and int(m) != int(n):
        raise ctx.fail(f"X's matrices must be square, got {list(x.shape)}")
    # sizes not provably equal at compile time are checked by the op at run time
    return ctx.b.emit("det", [x], [spec(ctx.out_name(), F32, x.shape[:-2])],
                      scratch_bytes=S.dim_mul(8, S.dim_mul(n, n)), name=ctx.name)


# the dtypes a plan holds, for the message of a BitCast outside them
_WIDTH_NAMES = ", ".join(sorted(dt.name for dt in NRV_DTYPES))


def _unwidened(ctx: NodeCtx, v: Value) -> Value:
    """The node's input as the model holds it: the importer hands every op a float16 input
    (and a computed float64 one) as float32, but BitCast reinterprets the original bits."""
    scope = getattr(ctx.imp, "current_scope", None) or {}
    name = ctx.node.input[0] if ctx.node.input else ""
    orig = scope.get(name)
    if orig is not None and orig is not v and ctx.imp.widened.get(orig.uid) is v:
        return orig
    return v


@handler("BitCast")
def _bitcast(ctx: NodeCtx, ins):
    """x's bits read as `to` (the same width, the same shape): op bitcast, or folded at compile
    time for a constant x."""
    ctx.require_attrs(("to",))
    if ctx.attr("to") is None:
        raise ctx.fail("attribute 'to' is required")
    x = _unwidened(ctx, ins[0])
    to = ctx.dtype_attr("to")
    for dt, what in ((x.dtype, "input"), (to, "'to'")):
        if dt not in NRV_DTYPES:
            raise ctx.fail(f"{what} dtype {dt.name} is not supported by nerve's runtime (BitCast maps among "
                           f"{_WIDTH_NAMES})")
    if x.dtype.itemsize != to.itemsize:
        why = ""
        if x.dtype == F32 and to.itemsize == 8:
            why = (" (if the model's input is float64: nerve holds the float64 values a model computes, and its "
                   "float64 constants, as float32, so their float64 bits are gone; a float64 graph input keeps them)")
        raise ctx.fail(f"BitCast from {x.dtype.name} ({8 * x.dtype.itemsize} bits) to {to.name} "
                       f"({8 * to.itemsize} bits): the bit widths must be equal{why}")
    if x.dtype == to:
        return [ctx.b.alias(x, x.shape, ctx.out_name())]
    if x.const is not None:
        arr = np.ascontiguousarray(x.const).view(to)
        if to == F64:  # Builder.const rounds float64 to float32, which would lose the bits
            return [Value(ctx.out_name(), to, arr.shape, const=arr)]
        return [ctx.b.const(arr, ctx.out_name())]
    return ctx.b.emit("bitcast", [x], [spec(ctx.out_name(), to, x.shape)], name=ctx.name, inplace=True)


@handler("MaxRoiPool")
def _max_roi_pool(ctx: NodeCtx, ins):
    """Fast R-CNN's ROI max pooling, as onnxruntime's CPU kernel computes it (op_misc.c
    max_roi_pool): X [N, C, H, W], rois [num_rois, 5] (batch index, x1, y1, x2, y2) ->
    [num_rois, C, ph, pw]; num_rois may be a run-time size, the batch indices are checked at
    run time."""
    ctx.require_attrs(("pooled_shape", "spatial_scale"))
    x = float32_input(ctx, ins[0], "X")
    rois = float32_input(ctx, ins[1], "rois")
    pooled = ctx.attr("pooled_shape")
    if pooled is None or len(pooled) != 2 or any(int(p) < 1 for p in pooled):
        raise ctx.fail(f"pooled_shape must be two positive integers [height, width], got {pooled}")
    ph, pw = (int(p) for p in pooled)
    scale = float(ctx.attr("spatial_scale", 1.0))
    if not (scale > 0 and np.isfinite(scale)):
        raise ctx.fail(f"spatial_scale must be finite and > 0, got {scale}")
    if x.rank != 4:
        raise ctx.fail(f"X must be [N, C, H, W], got {list(x.shape)}")
    if rois.rank != 2 or (S.is_static(rois.shape[1]) and int(rois.shape[1]) != 5):
        raise ctx.fail(f"rois must be [num_rois, 5], got {list(rois.shape)}")
    return ctx.b.emit("max_roi_pool", [x, rois], [spec(ctx.out_name(), F32, [rois.shape[0], x.shape[1], ph, pw])],
                      iattr=[ph, pw], fattr=[scale], name=ctx.name)
