"""Handlers for the neural-network ONNX operators beyond Conv: pooling (MaxPool, AveragePool,
GlobalMaxPool, GlobalAveragePool), local response normalisation (LRN, as a pool over the
channels), normalisation (BatchNormalization — folded into the
preceding Conv when it is that Conv's only reader — InstanceNormalization and
GroupNormalization), the recurrent cells (LSTM, GRU, RNN), ConvTranspose, Resize/Upsample and the
pixel shuffles (DepthToSpace, SpaceToDepth).

The runtime ops and their attribute layouts are documented at the C run functions:
``pool``, ``global_pool``, ``channel_affine``, ``instancenorm`` in
``native/src/plan/op_conv.c``; ``lstm``, ``gru``, ``rnn`` in ``native/src/plan/op_rnn.c``;
``conv_transpose``, ``resize`` in ``native/src/plan/op_upsample.c``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from . import symbolic as S
from .graph import Value
from .onnx_import import NodeCtx, handler
from .onnx_ops import _auto_pads, binary, conv_out_dim, spec, transpose
from .passes import LSTM_W_W8_SCALES, RNN_R_W8_SCALES
from .symbolic import Dim

# ---------------------------------------------------------------- pooling


def _pool_out_dim(d: Dim, k: int, s: int, dil: int, pb: int, pe: int, ceil_mode: bool) -> Dim:
    """Output extent of one pooled axis. ceil_mode: the ceiling of the window count, less the
    last window when it would start in the right padding (ONNX: windows that start there are
    dropped), i.e. min(ceil count, ceil((d + pb) / s))."""
    floor_out = conv_out_dim(None, d, k, s, dil, pb, pe)
    if not ceil_mode:
        return floor_out
    span = dil * (k - 1) + 1
    ceil_out = S.dim_add(S.dim_ceildiv(S.dim_sub(S.dim_add(d, pb + pe), span), s), 1)
    if pe <= span - s:
        return ceil_out  # the last ceil window always starts inside the input or the left padding
    starts = S.dim_ceildiv(S.dim_add(d, pb), s)  # windows starting before the right padding
    if S.is_static(ceil_out) and S.is_static(starts):
        return min(int(ceil_out), int(starts))
    return S.dim_min(ceil_out, starts)


@handler("MaxPool", "AveragePool")
def _pool(ctx: NodeCtx, ins):
    x = ins[0]
    is_max = ctx.op_type == "MaxPool"
    ctx.require_attrs(["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"]
                      + (["storage_order"] if is_max else ["count_include_pad"]))
    with_indices = is_max and len(ctx.outputs) > 1 and bool(ctx.outputs[1])
    if with_indices and x.dtype != np.float32:
        raise ctx.fail(f"the Indices output of MaxPool is supported for float32, not {x.dtype}")
    # MaxPool of 8-bit codes: onnxruntime's QOperator format pools uint8 directly (ResNet's
    # stem, SqueezeNet); op pool takes them as they are
    codes = is_max and x.dtype in (np.uint8, np.int8)
    if x.dtype != np.float32 and not codes:
        raise ctx.fail(f"{ctx.op_type} of {x.dtype} is not supported (float32, and int8/uint8 for MaxPool)")
    sr = x.rank - 2
    if sr not in (1, 2, 3):
        raise ctx.fail(f"{sr}-D pooling is not supported (1-D, 2-D and 3-D are)")
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != sr:
        raise ctx.fail(f"kernel_shape must give {sr} sizes, got {kernel}")
    kernel = [int(k) for k in kernel]
    strides = [int(s) for s in ctx.attr("strides", [1] * sr)]
    dil = [int(d) for d in ctx.attr("dilations", [1] * sr)]
    if len(strides) != sr or len(dil) != sr:
        raise ctx.fail(f"strides {strides} / dilations {dil} must give {sr} sizes")
    if any(k < 1 for k in kernel) or any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise ctx.fail(f"kernel_shape {kernel}, strides {strides}, dilations {dil} must be >= 1")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    cip = int(ctx.attr("count_include_pad", 0)) if not is_max else 0
    if cip not in (0, 1):
        raise ctx.fail(f"count_include_pad {cip}, expected 0 or 1")
    auto = ctx.attr("auto_pad", "NOTSET")
    pads = ctx.attr("pads")
    if auto in ("NOTSET", "") and pads is not None and len(pads) != 2 * sr:
        raise ctx.fail(f"pads must give {2 * sr} values, got {list(pads)}")
    pb, pe = _auto_pads(ctx, x.shape[2:], kernel, strides, dil)
    if not all(S.is_static(p) for p in list(pb) + list(pe)):
        raise ctx.fail("pooling needs pads known at compile time (auto_pad SAME needs static spatial sizes)")
    pb, pe = [int(p) for p in pb], [int(p) for p in pe]
    for i in range(sr):
        if pb[i] < 0 or pe[i] < 0:
            raise ctx.fail(f"negative pads {pb + pe} are not supported")
        if pb[i] >= kernel[i] or pe[i] >= kernel[i]:
            raise ctx.fail(f"pads {pb[i]}, {pe[i]} on spatial axis {i} must be smaller than the kernel size "
                           f"{kernel[i]}")
    out_sp: List[Dim] = []
    for i, d in enumerate(x.shape[2:]):
        span = dil[i] * (kernel[i] - 1) + 1
        # a window larger than the padded input: one output in ceil_mode when the short fall is
        # under a stride (torch's AvgPool2d(kernel, ceil_mode=True) as a global pool, EfficientNet)
        if S.is_static(d) and int(d) + pb[i] + pe[i] < span and \
                not (ceil_mode and span - (int(d) + pb[i] + pe[i]) < strides[i]):
            raise ctx.fail(f"spatial axis {i}: the window ({span}) is larger than the padded input "
                           f"({int(d) + pb[i] + pe[i]})")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out_sp.append(S.dim_ceildiv(d, strides[i]))  # _auto_pads made these pads give exactly this
        else:
            out_sp.append(_pool_out_dim(d, kernel[i], strides[i], dil[i], pb[i], pe[i], ceil_mode))
    shape = [x.shape[0], x.shape[1]] + out_sp
    if with_indices:  # where each maximum came from (SegNet/ENet unpool with them): op maxpool_argmax
        return ctx.b.emit("maxpool_argmax", [x], [spec(ctx.out_name(0), x.dtype, shape),
                                                  spec(ctx.out_name(1), np.int64, shape)],
                          iattr=[sr, int(ctx.attr("storage_order", 0))] + kernel + strides + dil + pb, name=ctx.name)
    if sr == 3:
        return [_pool3d(ctx, x, kernel, strides, dil, pb, pe, int(ceil_mode), cip, shape)]
    iattr = [0 if is_max else 1, sr, cip] + kernel + strides + dil + pb + pe
    return ctx.b.emit("pool", [x], [spec(ctx.out_name(), x.dtype, shape)], iattr=iattr, name=ctx.name)


def _pool3d(ctx: NodeCtx, x: Value, kernel, strides, dil, pb, pe, ceil_mode: int, cip: int, shape) -> Value:
    """A 3-D pool as two 2-D ones, no data moved between them: a window's max is the max over
    its depth taps of their (H, W) maxima, and its average the average of their (H, W)
    averages, since the divisor (the window, or its cells inside the input) is a product of
    per-axis counts. First (H, W) over x viewed as [N, C·D, H, W], then depth over the result
    viewed as [N, C, D, OH·OW] with a [kd, 1] window."""
    n, c, d = x.shape[:3]
    common = dict(ceil_mode=ceil_mode) if ctx.op_type == "MaxPool" else dict(ceil_mode=ceil_mode, count_include_pad=cip)
    planes = ctx.b.alias(x, [n, S.dim_mul(c, d)] + list(x.shape[3:]), ctx.b.fresh(ctx.name))
    hw = ctx.call(ctx.op_type, [planes], kernel_shape=kernel[1:], strides=strides[1:], dilations=dil[1:],
                  pads=[pb[1], pb[2], pe[1], pe[2]], **common)[0]
    columns = ctx.b.alias(hw, [n, c, d, S.dim_mul(shape[3], shape[4])], ctx.b.fresh(ctx.name))
    depth = ctx.call(ctx.op_type, [columns], kernel_shape=[kernel[0], 1], strides=[strides[0], 1],
                     dilations=[dil[0], 1], pads=[pb[0], 0, pe[0], 0], **common)[0]
    return ctx.b.alias(depth, shape, ctx.out_name())


@handler("MaxUnpool")
def _max_unpool(ctx: NodeCtx, ins):
    """MaxPool's values back where its Indices say, zeros elsewhere (op max_unpool). The
    output's spatial size: output_shape when given (a constant), else (in - 1)·stride +
    kernel - pads."""
    x, ind = ins[0], ins[1]
    if x.dtype != np.float32 or ind.dtype != np.int64:
        raise ctx.fail(f"X must be float32 and I int64, got {x.dtype} and {ind.dtype}")
    sr = x.rank - 2
    kernel = [int(k) for k in ctx.attr("kernel_shape", [])]
    if sr < 1 or len(kernel) != sr:
        raise ctx.fail(f"kernel_shape must give {max(sr, 1)} sizes, got {kernel}")
    strides = [int(s) for s in ctx.attr("strides", [1] * sr)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * sr))]
    if len(ins) > 2 and ins[2] is not None:
        shape = [int(d) for d in ctx.known(ins[2], "output_shape")]
        if len(shape) != x.rank:
            raise ctx.fail(f"output_shape {shape} must have rank {x.rank}")
        shape = [x.shape[0], x.shape[1]] + shape[2:]
    else:
        shape = [x.shape[0], x.shape[1]] + [S.dim_add(S.dim_mul(S.dim_sub(d, 1), s), k - pb - pe) for d, s, k, pb, pe
                                            in zip(x.shape[2:], strides, kernel, pads[:sr], pads[sr:])]
    return ctx.b.emit("max_unpool", [x, ind], [spec(ctx.out_name(), np.float32, shape)], name=ctx.name)


@handler("LRN")
def _lrn(ctx: NodeCtx, ins):
    """y = x / (bias + alpha/size · Σ x²)^beta, the sum over a window of `size` channels
    (floor((size-1)/2) before, the rest after; AlexNet, Inception v1). The window sum is an
    average pool (padding counted, so it divides by size) over x² viewed as
    [N, 1, C, spatial], then three elementwise ops."""
    x = ins[0]
    ctx.require_attrs(["alpha", "beta", "bias", "size"])
    if x.dtype != np.float32:
        raise ctx.fail(f"LRN of {x.dtype} is not supported (float32 only)")
    if x.rank < 3:
        raise ctx.fail(f"LRN needs [N, C, spatial...], got rank {x.rank}")
    size = ctx.attr("size")
    if size is None or int(size) < 1:
        raise ctx.fail(f"size must be a positive integer, got {size}")
    size = int(size)
    alpha, beta, bias = (float(ctx.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    fresh = lambda what: ctx.b.fresh(f"{ctx.name}.{what}")  # noqa: E731
    sq = binary(ctx, "Mul", x, x, fresh("square"))
    view = [x.shape[0], 1, x.shape[1], S.prod(x.shape[2:])]
    before = (size - 1) // 2
    iattr = [1, 2, 1, size, 1, 1, 1, 1, 1, before, 0, size - 1 - before, 0]  # avg, 2-D, count pads
    avg = ctx.b.emit("pool", [ctx.b.alias(sq, view, fresh("channels"))], [spec(fresh("avg"), np.float32, view)],
                     iattr=iattr, name=ctx.name)[0]
    scaled = binary(ctx, "Mul", ctx.b.alias(avg, x.shape, fresh("window")), ctx.b.const(np.array(alpha, np.float32)),
                    fresh("scaled"))
    base = binary(ctx, "Add", scaled, ctx.b.const(np.array(bias, np.float32)), fresh("base"))
    return [binary(ctx, "Div", x, binary(ctx, "Pow", base, ctx.b.const(np.array(beta, np.float32)), fresh("pow")),
                   ctx.out_name())]


@handler("GlobalMaxPool", "GlobalAveragePool")
def _global_pool(ctx: NodeCtx, ins):
    x = ins[0]
    ctx.require_attrs([])
    if x.dtype != np.float32:
        raise ctx.fail(f"{ctx.op_type} of {x.dtype} is not supported (float32 only)")
    if x.rank < 3:
        raise ctx.fail(f"input of rank {x.rank}: expected [N, C, spatial...] (rank >= 3)")
    for i, d in enumerate(x.shape[2:]):
        if S.is_static(d) and int(d) == 0:
            raise ctx.fail(f"spatial axis {i} is empty: nothing to pool")
    shape = [x.shape[0], x.shape[1]] + [1] * (x.rank - 2)
    kind = 0 if ctx.op_type == "GlobalMaxPool" else 1
    return ctx.b.emit("global_pool", [x], [spec(ctx.out_name(), np.float32, shape)], iattr=[kind], name=ctx.name)


# ---------------------------------------------------------------- normalisation


def _const_param(ctx: NodeCtx, v: Optional[Value], what: str, c: Optional[int]) -> np.ndarray:
    if v is None:
        raise ctx.fail(f"input {what} is required")
    if v.const is None:
        raise ctx.fail(f"{what} must be a constant")
    arr = np.asarray(v.const)
    if arr.dtype.kind != "f":
        raise ctx.fail(f"{what} has dtype {arr.dtype}, expected a float type")
    arr = arr.reshape(-1).astype(np.float64)
    if c is not None and arr.size != c:
        raise ctx.fail(f"{what} has {arr.size} elements, expected one per channel ({c})")
    return arr


def _graph_readers(graph, name: str) -> int:
    """How many node inputs of graph (and the subgraphs in its nodes' attributes) are name."""
    import onnx

    n = 0
    for node in graph.node:
        n += sum(1 for i in node.input if i == name)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += _graph_readers(a.g, name)
            elif a.type == onnx.AttributeProto.GRAPHS:
                n += sum(_graph_readers(g, name) for g in a.graphs)
    return n


def _graph_outputs(graph) -> set:
    import onnx

    names = {o.name for o in graph.output}
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names |= _graph_outputs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    names |= _graph_outputs(g)
    return names


def _foldable_conv(ctx: NodeCtx, x: Value):
    """The conv op producing x when BatchNormalization can be folded into it, else None: x is the
    conv's own output (no alias), the conv has no fused activation, constant weights (and bias),
    and this node is the only reader of x in the whole model (x is no graph output either)."""
    op = x.producer
    if op is None or op.type != "conv" or x.alias_of is not None or x.const is not None:
        return None
    if len(op.outputs) != 1 or op.outputs[0] is not x or x.dtype != np.float32:
        return None
    if len(op.iattr) < 3 or op.iattr[2] != 0:
        return None  # a fused activation (not at import time, but be safe)
    w = op.inputs[1]
    b = op.inputs[2] if len(op.inputs) > 2 else None
    if w is None or w.const is None or (b is not None and b.const is None):
        return None
    name = ctx.node.input[0]
    if x.name != name:
        return None  # reached through another name (Identity...): other readers are not counted
    graph = ctx.imp.model.graph
    if _graph_readers(graph, name) != 1 or name in _graph_outputs(graph):
        return None
    return op


@handler("BatchNormalization")
def _batchnorm(ctx: NodeCtx, ins):
    ctx.require_attrs(["epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"])
    if ctx.attr("training_mode", 0):
        raise ctx.fail("training_mode = 1 is not supported (inference only)")
    if ctx.attr("spatial", 1) != 1:
        raise ctx.fail("spatial = 0 (per-element statistics) is not supported")
    if any(o for o in ctx.outputs[1:]):
        raise ctx.fail("the running mean/variance outputs (training mode) are not supported")
    if len(ins) < 5:
        raise ctx.fail(f"{len(ins)} inputs, expected 5 (X, scale, B, input_mean, input_var)")
    x = ins[0]
    if x.dtype != np.float32:
        raise ctx.fail(f"BatchNormalization of {x.dtype} is not supported (float32 only)")
    if x.rank < 2:
        raise ctx.fail(f"input of rank {x.rank}: expected [N, C, ...]")
    c = x.shape[1]
    if not S.is_static(c):
        raise ctx.fail("the channel axis must have a static extent")
    c = int(c)
    scale = _const_param(ctx, ins[1], "scale", c)
    bias = _const_param(ctx, ins[2], "B", c)
    mean = _const_param(ctx, ins[3], "input_mean", c)
    var = _const_param(ctx, ins[4], "input_var", c)
    eps = float(ctx.attr("epsilon", 1e-5))
    f = scale / np.sqrt(var + eps)
    shift = bias - mean * f

    conv = _foldable_conv(ctx, x)
    if conv is not None:
        w = conv.inputs[1].const.astype(np.float64)
        b = conv.inputs[2].const.astype(np.float64).reshape(-1) if len(conv.inputs) > 2 and \
            conv.inputs[2] is not None else np.zeros(c)
        new_w = (w * f.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        new_b = ((b - mean) * f + bias).astype(np.float32)
        conv.inputs[1] = ctx.b.const(new_w, ctx.b.fresh(ctx.name + ".weight"))
        bv = ctx.b.const(new_b, ctx.b.fresh(ctx.name + ".bias"))
        if len(conv.inputs) > 2:
            conv.inputs[2] = bv
        else:
            conv.inputs.append(bv)
        conv.name = f"{conv.name}+{ctx.name}" if conv.name else ctx.name
        x.name = ctx.out_name()  # the conv now computes the normalised tensor
        return [x]

    sc = ctx.b.const(f.astype(np.float32), ctx.b.fresh(ctx.name + ".scale"))
    sh = ctx.b.const(shift.astype(np.float32), ctx.b.fresh(ctx.name + ".shift"))
    return ctx.b.emit("channel_affine", [x, sc, sh], [spec(ctx.out_name(), np.float32, x.shape)], iattr=[0],
                      fattr=[0, 0], name=ctx.name, inplace=True)


@handler("InstanceNormalization")
def _instancenorm(ctx: NodeCtx, ins):
    ctx.require_attrs(["epsilon"])
    x, scale, bias = ins[0], ins[1], ins[2]
    if x.dtype != np.float32 or scale.dtype != np.float32 or bias.dtype != np.float32:
        raise ctx.fail("InstanceNormalization is supported for float32")
    if x.rank < 3:
        raise ctx.fail(f"input of rank {x.rank}: expected [N, C, spatial...] (rank >= 3)")
    for what, v in (("scale", scale), ("B", bias)):
        if v.rank != 1:
            raise ctx.fail(f"{what} must be [C], got shape {list(v.shape)}")
    eps = float(ctx.attr("epsilon", 1e-5))
    if not eps >= 0 or not np.isfinite(eps):
        raise ctx.fail(f"epsilon {eps} must be finite and >= 0")
    return ctx.b.emit("instancenorm", [x, scale, bias], [spec(ctx.out_name(), np.float32, x.shape)],
                      fattr=[eps], name=ctx.name, inplace=True)


@handler("GroupNormalization")
def _groupnorm(ctx: NodeCtx, ins):
    """GroupNormalization (opsets 18 and 21): x [N, C, ...] normalised over each group of C/G
    channels and the spatial axes — instancenorm over [N, G, (C/G)·spatial] — then scaled and
    shifted: per group (opset 18's scale and bias [G]) inside the instancenorm, per channel
    (opset 21: [C]) after it."""
    ctx.require_attrs(["epsilon", "num_groups", "stash_type"])
    x, scale, bias = ins[0], ins[1], ins[2]
    if x.dtype != np.float32 or scale.dtype != np.float32 or bias.dtype != np.float32:
        raise ctx.fail("GroupNormalization is supported for float32")
    if x.rank < 3:
        raise ctx.fail(f"input of rank {x.rank}: expected [N, C, spatial...] (rank >= 3)")
    groups = int(ctx.attr("num_groups", 0))
    c = x.shape[1]
    if groups < 1 or not S.is_static(c) or int(c) % groups:
        raise ctx.fail(f"num_groups {groups} must be >= 1 and divide the {c} channels (known at compile time)")
    c = int(c)
    per_group = scale.rank == 1 and S.is_static(scale.shape[0]) and int(scale.shape[0]) == groups and groups != c
    if not per_group and not (scale.rank == 1 and S.is_static(scale.shape[0]) and int(scale.shape[0]) == c):
        raise ctx.fail(f"scale must be [num_groups] (opset 18) or [C] (opset 21), got {list(scale.shape)}")
    if list(bias.shape) != list(scale.shape):
        raise ctx.fail(f"bias {list(bias.shape)} and scale {list(scale.shape)} differ")
    eps = float(ctx.attr("epsilon", 1e-5))
    if not eps >= 0 or not np.isfinite(eps):
        raise ctx.fail(f"epsilon {eps} must be finite and >= 0")
    b = ctx.b
    grouped = b.alias(x, [x.shape[0], groups, S.dim_mul(c // groups, S.prod(x.shape[2:]))], b.fresh(ctx.name))
    if per_group:
        g_scale, g_bias = scale, bias
    else:
        g_scale, g_bias = b.const(np.ones(groups, np.float32)), b.const(np.zeros(groups, np.float32))
    y = b.emit("instancenorm", [grouped, g_scale, g_bias], [spec(b.fresh(ctx.name), np.float32, grouped.shape)],
               fattr=[eps], name=ctx.name)[0]
    if per_group:
        return [b.alias(y, x.shape, ctx.out_name())]
    y = b.alias(y, x.shape, b.fresh(ctx.name))
    return [b.emit("channel_affine", [y, scale, bias], [spec(ctx.out_name(), np.float32, x.shape)], iattr=[0],
                   fattr=[0, 0], name=ctx.name, inplace=True)[0]]


@handler("LpNormalization")
def _lp_normalization(ctx: NodeCtx, ins):
    """x / ||x||_p along one axis (p = 1 or 2). A zero norm gives 0, as in onnxruntime and the
    ONNX reference: the norm is floored at the smallest normal float, which leaves every other
    norm as it is (plans run with denormals flushed, so nothing lies between 0 and the floor)."""
    from .onnx_ops import binary, norm_axis

    x = ins[0]
    if x.dtype != np.float32:
        raise ctx.fail(f"LpNormalization of {x.dtype} is not supported (float32)")
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.fail(f"p = {p}: only 1 and 2 are defined")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.rank)
    b = ctx.b
    shape = [1 if i == axis else d for i, d in enumerate(x.shape)]
    src = x
    if p == 1:
        src = b.emit("unary", [x], [spec(b.fresh(ctx.name), np.float32, x.shape)], iattr=[1], fattr=[0, 0],
                     name=ctx.name)[0]  # |x|
    norm = b.emit("reduce", [src], [spec(b.fresh(ctx.name), np.float32, shape)], iattr=[0 if p == 1 else 6, 1, axis],
                  name=ctx.name)[0]  # ReduceSum of |x|, or ReduceL2
    floor = b.const(np.array(np.finfo(np.float32).tiny, np.float32))
    norm = binary(ctx, "Max", norm, floor, b.fresh(ctx.name))
    return [binary(ctx, "Div", x, norm, ctx.out_name())]


def _pixel_shuffle(ctx: NodeCtx, x: Value, blocks: int, to_space: bool) -> Value:
    """DepthToSpace (to_space; modes DCR and CRD) and SpaceToDepth of x [N, C, H, W] with
    block size `blocks`: one reshape to 6-D, one transpose, one reshape."""
    if x.rank != 4:
        raise ctx.fail(f"input of rank {x.rank}: expected [N, C, H, W]")
    if blocks < 1:
        raise ctx.fail(f"blocksize {blocks} must be >= 1")
    n, c, h, w = x.shape
    b = ctx.b
    if to_space:
        if not S.is_static(c) or int(c) % (blocks * blocks):
            raise ctx.fail(f"{c} channels are not a multiple of blocksize² = {blocks * blocks}")
        c2 = int(c) // (blocks * blocks)
        mode = ctx.attr("mode", "DCR")
        if mode == "DCR":
            six, perm = [n, blocks, blocks, c2, h, w], [0, 3, 4, 1, 5, 2]
        elif mode == "CRD":
            six, perm = [n, c2, blocks, blocks, h, w], [0, 1, 4, 2, 5, 3]
        else:
            raise ctx.fail(f"mode {mode!r} is not DCR or CRD")
        out = [n, c2, S.dim_mul(h, blocks), S.dim_mul(w, blocks)]
    else:
        for d in (h, w):
            if S.is_static(d) and int(d) % blocks:
                raise ctx.fail(f"spatial size {d} is not a multiple of blocksize {blocks}")
        hb, wb = S.dim_floordiv(h, blocks), S.dim_floordiv(w, blocks)
        six = [n, c, hb, blocks, wb, blocks]
        mode = ctx.attr("mode", "DCR")  # opset 28 added CRD to SpaceToDepth, DepthToSpace's inverse
        if mode == "DCR":
            perm = [0, 3, 5, 1, 2, 4]  # channel = (row offset, column offset, c)
        elif mode == "CRD":
            perm = [0, 1, 3, 5, 2, 4]  # channel = (c, row offset, column offset)
        else:
            raise ctx.fail(f"mode {mode!r} is not DCR or CRD")
        out = [n, S.dim_mul(c, blocks * blocks), hb, wb]
    v = b.alias(x, six, b.fresh(ctx.name))
    t = b.emit("transpose", [v], [spec(b.fresh(ctx.name), x.dtype, [six[i] for i in perm])], iattr=perm,
               name=ctx.name)[0]
    return b.alias(t, out, ctx.out_name())


@handler("DepthToSpace")
def _depth_to_space(ctx: NodeCtx, ins):
    return [_pixel_shuffle(ctx, ins[0], int(ctx.attr("blocksize", 0)), to_space=True)]


@handler("SpaceToDepth")
def _space_to_depth(ctx: NodeCtx, ins):
    return [_pixel_shuffle(ctx, ins[0], int(ctx.attr("blocksize", 0)), to_space=False)]


# ---------------------------------------------------------------- recurrent cells

_DIRECTIONS = {"forward": 0, "reverse": 1, "bidirectional": 2}
_DEFAULT_ACTS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"]}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_RNN_ACTS = {"tanh": 0, "relu": 1, "sigmoid": 2}  # op rnn's codes (op_rnn.c)



def _rnn(ctx: NodeCtx, ins, kind: str, r_w8: Optional[Tuple[Value, Optional[Value]]] = None,
         w_w8: Optional[Tuple[Value, Optional[Value]]] = None) -> List[Value]:
    """An LSTM, GRU or RNN node (kind) on float inputs ins = [X, W, R, B, sequence_lens,
    initial_h(, initial_c, P)] as one runtime op; the attributes come from ctx. r_w8: R is
    int8 codes with these per-row scales and offsets ([dirs, gates·hidden] f32; op_rnn.c),
    R = scale·q + offset; w_w8 likewise for W (LSTM only). layout = 1 (batch first) is the
    op between transposes."""
    gates = _GATES[kind]
    extra = {"LSTM": ["input_forget"], "GRU": ["linear_before_reset"], "RNN": []}[kind]
    ctx.require_attrs(["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                       "layout"] + extra)
    layout = int(ctx.attr("layout", 0))
    if layout not in (0, 1):
        raise ctx.fail(f"layout = {layout}, expected 0 (sequence first) or 1 (batch first)")
    if layout == 1:  # X [batch, seq, in] and the states [batch, dirs, hidden]: the op's layout 0
        ins = list(ins)
        for i in (0, 5, 6):  # X, initial_h, initial_c
            if len(ins) > i and ins[i] is not None and ins[i].rank == 3:
                ins[i] = transpose(ctx, ins[i], [1, 0, 2], ctx.b.fresh(ctx.name + ".layout"))
    direction = ctx.attr("direction", "forward")
    if direction not in _DIRECTIONS:
        raise ctx.fail(f"direction {direction!r} is not supported (forward, reverse, bidirectional)")
    code = _DIRECTIONS[direction]
    dirs = 2 if code == 2 else 1
    acts = ctx.attr("activations")
    act_codes = [0, 0]  # RNN: tanh, per direction
    if acts is not None and kind == "RNN":
        got = [a.decode() if isinstance(a, bytes) else str(a) for a in acts]
        if len(got) != dirs or any(a.lower() not in _RNN_ACTS for a in got):
            raise ctx.fail(f"activations {got} are not supported; RNN takes Tanh, Relu or Sigmoid, one per direction")
        act_codes = [_RNN_ACTS[a.lower()] for a in got] * (2 // dirs)
    elif acts is not None:
        got = [a.decode() if isinstance(a, bytes) else str(a) for a in acts]
        if [a.lower() for a in got] != _DEFAULT_ACTS[kind] * dirs:
            raise ctx.fail(f"activations {got} are not supported; only the defaults "
                           f"({', '.join(a.capitalize() for a in _DEFAULT_ACTS[kind])} per direction)")
    clip = ctx.attr("clip")
    clip = 0.0 if clip is None else float(clip)
    if clip < 0 or not np.isfinite(clip):
        raise ctx.fail(f"clip {clip} must be a finite value >= 0")

    def inp(i):
        return ins[i] if len(ins) > i else None

    x, w, r = ins[0], ins[1], ins[2]
    for what, v in (("X", x), ("W", w), ("R", r)):
        if v is None:
            raise ctx.fail(f"input {what} is required")
        int8 = (v is r and r_w8 is not None) or (v is w and w_w8 is not None)
        if v.dtype != (np.int8 if int8 else np.float32):
            raise ctx.fail(f"{what} is {v.dtype}; {kind} is supported for float32")
        if v.rank != 3:
            raise ctx.fail(f"{what} has rank {v.rank}, expected 3")
    if not all(S.is_static(d) for d in list(w.shape) + list(r.shape)):
        raise ctx.fail("W and R must have static shapes")
    hidden = ctx.attr("hidden_size")
    hidden = int(r.shape[2]) if hidden is None else int(hidden)
    if hidden <= 0:
        raise ctx.fail(f"hidden_size {hidden} must be > 0")
    in_size = x.shape[2]
    want_w = [dirs, gates * hidden, in_size]
    if int(w.shape[0]) != dirs or int(w.shape[1]) != gates * hidden or \
            (S.is_static(in_size) and int(w.shape[2]) != int(in_size)):
        raise ctx.fail(f"W has shape {list(w.shape)}, expected {want_w}")
    if [int(d) for d in r.shape] != [dirs, gates * hidden, hidden]:
        raise ctx.fail(f"R has shape {list(r.shape)}, expected {[dirs, gates * hidden, hidden]}")
    seq, batch = x.shape[0], x.shape[1]
    b = inp(3)
    if b is not None:
        if b.dtype != np.float32 or list(b.shape) != [dirs, 2 * gates * hidden]:
            raise ctx.fail(f"B has shape {list(b.shape)} ({b.dtype}), expected f32 {[dirs, 2 * gates * hidden]}")
    sl = inp(4)
    if sl is not None:
        if sl.dtype.kind not in "iu":
            raise ctx.fail(f"sequence_lens is {sl.dtype}, expected int32")
        if sl.rank != 1:
            raise ctx.fail(f"sequence_lens has shape {list(sl.shape)}, expected [batch]")
        if sl.dtype != np.int32:
            known = ctx.b.known_values(sl)
            if known is not None and all(S.is_static(v) for v in known):
                sl = ctx.b.const(np.array([int(v) for v in known], dtype=np.int32).reshape(
                    [int(d) for d in sl.shape]), ctx.b.fresh(ctx.name + ".sequence_lens"))
            else:
                sl = ctx.b.emit("cast", [sl], [spec(ctx.b.fresh(ctx.name + ".sequence_lens"), np.int32, sl.shape)],
                                name=ctx.name)[0]
    state_names = ["initial_h"] + (["initial_c"] if kind == "LSTM" else [])
    for k, what in enumerate(state_names):
        v = inp(5 + k)
        if v is not None and (v.dtype != np.float32 or v.rank != 3):
            raise ctx.fail(f"{what} is {v.dtype} of rank {v.rank}, expected f32 [dirs, batch, hidden]")
    inputs = [x, w, r, b, sl, inp(5)]
    if kind == "LSTM":
        p = inp(7)
        if p is not None and (p.dtype != np.float32 or list(p.shape) != [dirs, 3 * hidden]):
            raise ctx.fail(f"P has shape {list(p.shape)}, expected f32 {[dirs, 3 * hidden]}")
        inputs += [inp(6), p]
    r_at = RNN_R_W8_SCALES.get(kind.lower())
    if (r_w8 is not None and r_at is None) or (w_w8 is not None and kind != "LSTM"):
        raise ctx.fail(f"{kind} takes no int8 " + ("R" if r_w8 is not None else "W"))
    if r_w8 is not None:  # the op's W8 scales and offsets follow its ONNX inputs (op_rnn.c)
        inputs += [None] * (r_at - len(inputs)) + list(r_w8)
    if w_w8 is not None:
        inputs += [None] * (LSTM_W_W8_SCALES - len(inputs)) + list(w_w8)
    while inputs and inputs[-1] is None:
        inputs.pop()
    y_shape = [seq, dirs, batch, hidden]
    h_shape = [dirs, batch, hidden]
    n_out = 3 if kind == "LSTM" else 2
    names = [ctx.out_name(i) if layout == 0 else ctx.b.fresh(f"{ctx.name}.{i}") for i in range(n_out)]
    outs = [spec(names[0], np.float32, y_shape)] + [spec(n, np.float32, h_shape) for n in names[1:]]
    if kind == "LSTM":
        iattr = [code, hidden, int(ctx.attr("input_forget", 0))]
        scratch = S.dim_mul(batch, 4 * 4 * hidden * 2)
    elif kind == "GRU":
        iattr = [code, hidden, int(ctx.attr("linear_before_reset", 0))]
        scratch = S.dim_mul(batch, 4 * 3 * hidden * 2 + 4 * hidden)
    else:
        iattr = [code, hidden] + act_codes
        scratch = S.dim_mul(batch, 4 * hidden * 2)
    # and room for every step's input projection, computed in one product (op_rnn.c)
    scratch = S.dim_add(scratch, S.dim_mul(S.dim_mul(seq, batch), 4 * gates * hidden))
    if extra and iattr[2] not in (0, 1):
        raise ctx.fail(f"{extra[0]} = {iattr[2]}, expected 0 or 1")
    got = ctx.b.emit(kind.lower(), inputs, outs, iattr=iattr, fattr=[clip], scratch_bytes=scratch, name=ctx.name)
    if layout == 0:
        return got
    # batch first: Y [batch, seq, dirs, hidden], the states [batch, dirs, hidden]
    return [transpose(ctx, got[0], [2, 0, 1, 3], ctx.out_name(0))] + \
        [transpose(ctx, v, [1, 0, 2], ctx.out_name(i + 1)) for i, v in enumerate(got[1:])]


@handler("LSTM")
def _lstm(ctx: NodeCtx, ins):
    return _rnn(ctx, ins, "LSTM")


@handler("GRU")
def _gru(ctx: NodeCtx, ins):
    return _rnn(ctx, ins, "GRU")


@handler("RNN")
def _elman_rnn(ctx: NodeCtx, ins):
    return _rnn(ctx, ins, "RNN")


# ---------------------------------------------------------------- ConvTranspose


def _convt_pads(ctx: NodeCtx, spatial, kernel, strides, dil, out_pad):
    """(pads_begin, pads_end) of a ConvTranspose from pads, auto_pad or output_shape. A total
    padding is split as onnxruntime splits it: SAME_UPPER puts the extra one at the end,
    SAME_LOWER and an explicit output_shape at the beginning; an output_shape larger than the
    full convolution extends its end (a negative pads_end); SAME never crops below it."""
    sr = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    out_shape = ctx.attr("output_shape")
    if out_shape is None and auto in ("NOTSET", "VALID"):
        pads = ctx.attr("pads", [0] * (2 * sr)) if auto == "NOTSET" else [0] * (2 * sr)
        return list(pads[:sr]), list(pads[sr:])
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.fail(f"auto_pad {auto!r} is not supported")
    if out_shape is not None:
        out_shape = list(out_shape)[-sr:]
    pb, pe = [], []
    for i, (d, k, s, dl, op) in enumerate(zip(spatial, kernel, strides, dil, out_pad)):
        full = S.dim_add(S.dim_mul(s, S.dim_sub(d, 1)), op + (k - 1) * dl + 1)  # before padding
        if out_shape is not None and not S.is_static(full):
            raise ctx.fail("output_shape needs the input's spatial dims known when the model is compiled")
        # the padding that leaves output_shape, or (SAME) s·d: full less s·d, whatever d is
        total = int(full) - int(out_shape[i]) if out_shape is not None else (k - 1) * dl + 1 + op - s
        if total < 0 and auto == "NOTSET":
            # an output_shape past the full convolution: the extra positions at the end, as
            # output_padding's (onnxruntime, and ONNX's reference)
            pb.append(0), pe.append(total)
            continue
        total = max(total, 0)  # SAME with a stride past the kernel: the full output (onnxruntime)
        if auto == "SAME_UPPER":
            pb.append(total // 2), pe.append(total - total // 2)
        else:
            pb.append(total - total // 2), pe.append(total // 2)
    return pb, pe


@handler("ConvTranspose")
def _conv_transpose(ctx: NodeCtx, ins):
    """ConvTranspose (1-D and 2-D, groups, dilations, pads, output_padding, output_shape,
    auto_pad) as op conv_transpose (native/src/plan/op_upsample.c)."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    if x.dtype != np.float32 or w.dtype != np.float32:
        raise ctx.fail("ConvTranspose is supported for float32")
    sr = x.rank - 2
    if sr not in (1, 2, 3):
        raise ctx.fail(f"{sr}-D transposed convolution is not supported (1-D, 2-D and 3-D are)")
    if w.const is None or not w.static or w.rank != x.rank:
        raise ctx.fail("the weights must be constants of the input's rank")
    if bias is not None and bias.const is None:
        raise ctx.fail("the bias must be a constant")
    kernel = [int(d) for d in w.shape[2:]]
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        raise ctx.fail("kernel_shape does not match the weights")
    strides = list(ctx.attr("strides", [1] * sr))
    dil = list(ctx.attr("dilations", [1] * sr))
    out_pad = list(ctx.attr("output_padding", [0] * sr))
    group = int(ctx.attr("group", 1))
    c = x.shape[1]
    if S.is_static(c) and int(c) != int(w.shape[0]):
        raise ctx.fail(f"input has {c} channels, weights expect {int(w.shape[0])}")
    if group < 1 or int(w.shape[0]) % group:
        raise ctx.fail(f"group {group} does not divide the {int(w.shape[0])} input channels")
    if any(not 0 <= p < max(s, dl) for p, s, dl in zip(out_pad, strides, dil)):
        raise ctx.fail(f"output_padding {out_pad} must be below the stride or the dilation")
    pb, pe = _convt_pads(ctx, x.shape[2:], kernel, strides, dil, out_pad)
    pe_eff = [e - p for e, p in zip(pe, out_pad)]  # output_padding extends the end (op contract)
    out_sp = [S.dim_add(S.dim_mul(s, S.dim_sub(d, 1)), dl * (k - 1) + 1 - b_ - e_)
              for d, k, s, dl, b_, e_ in zip(x.shape[2:], kernel, strides, dil, pb, pe_eff)]
    m = int(w.shape[1]) * group
    if sr == 3:
        return [_conv_transpose3d(ctx, x, w, bias, kernel, strides, dil, out_pad, group, pb, pe_eff, m, out_sp)]
    scratch = S.dim_mul(4 * int(w.shape[1]) * int(np.prod(kernel)), S.prod(x.shape[2:]))
    return ctx.b.emit("conv_transpose", [x, w, bias], [spec(ctx.out_name(), np.float32, [x.shape[0], m] + out_sp)],
                      iattr=[sr, group, 0] + strides + dil + pb + pe_eff, fattr=[0, 0], scratch_bytes=scratch,
                      name=ctx.name)


def _conv_transpose3d(ctx: NodeCtx, x: Value, w: Value, bias: Optional[Value], kernel, strides, dil, out_pad,
                      group: int, pb, pe_eff, m: int, out_sp) -> Value:
    """A 3-D transposed convolution as 2-D ones: input depth plane i, through depth tap t,
    lands on output plane i·stride + t·dilation - pad. Per tap, one 2-D transposed conv of
    all input planes as a batch of N·D images; its planes are spread `stride` apart (zero
    planes between: a pad of a new axis) and shifted to the tap's offset, cropped to the
    output depth (a pad with negative pads crops); the taps are summed, the bias added once."""
    n, c, depth = x.shape[0], x.shape[1], x.shape[2]
    if not S.is_static(depth):
        raise ctx.fail("a 3-D transposed convolution needs its depth (axis 2) known at compile time")
    depth, od, s0 = int(depth), int(out_sp[0]), strides[0]
    planes = ctx.call("Transpose", [x], perm=[0, 2, 1, 3, 4])[0]
    images = ctx.b.alias(planes, [S.dim_mul(n, depth), c] + list(x.shape[3:]), ctx.b.fresh(ctx.name))
    attrs2d = dict(strides=strides[1:], dilations=dil[1:], group=group, output_padding=out_pad[1:],
                   pads=[int(pb[1]), int(pb[2]), int(pe_eff[1]) + out_pad[1], int(pe_eff[2]) + out_pad[2]])
    total = None
    for t in range(kernel[0]):
        begin = t * dil[0] - int(pb[0])  # output plane of input plane 0 through tap t
        if begin + s0 * (depth - 1) < 0 or begin >= od:
            continue  # every plane of this tap lands in the cropped padding
        tap_w = ctx.b.const(np.ascontiguousarray(w.const[:, :, t]), ctx.b.fresh(ctx.name + ".tap"))
        y = ctx.call("ConvTranspose", [images, tap_w], kernel_shape=kernel[1:], **attrs2d)[0]
        feat = S.prod(y.shape[1:])
        spread = ctx.b.alias(y, [n, depth, 1, feat], ctx.b.fresh(ctx.name))
        if s0 > 1:
            spread = ctx.call("Pad", [spread, ctx.const([0, 0, 0, 0, 0, 0, s0 - 1, 0])], as_opset=13)[0]
        spread = ctx.b.alias(spread, [n, depth * s0, feat], ctx.b.fresh(ctx.name))
        placed = ctx.call("Pad", [spread, ctx.const([0, begin, 0, 0, od - begin - depth * s0, 0])], as_opset=13)[0]
        total = placed if total is None else ctx.call("Add", [total, placed])[0]
    if total is None:
        raise ctx.fail("every depth tap lands in the padding")
    y5 = ctx.b.alias(total, [n, od, m] + list(out_sp[1:]), ctx.b.fresh(ctx.name))
    out = ctx.call("Transpose", [y5], perm=[0, 2, 1, 3, 4])[0]
    if bias is not None:
        out = ctx.call("Add", [out, ctx.b.const(bias.const.reshape(m, 1, 1, 1))])[0]
    return ctx.b.alias(out, out.shape, ctx.out_name())


@handler("Col2Im")
def _col2im(ctx: NodeCtx, ins):
    """Blocks back into an image, overlaps summed (torch's nn.Fold; an iSTFT's overlap-add):
    op col2im, for 1 or 2 image axes with image_shape and block_shape constants."""
    x = ins[0]
    if x.dtype != np.float32 or x.rank != 3:
        raise ctx.fail(f"input must be float32 [N, C*prod(block_shape), L], got {x.dtype} {list(x.shape)}")
    image = [int(v) for v in ctx.known(ins[1], "image_shape")]
    block = [int(v) for v in ctx.known(ins[2], "block_shape")]
    sr = len(image)
    if sr not in (1, 2) or len(block) != sr:
        raise ctx.fail(f"image_shape {image} and block_shape {block}: 1 or 2 axes each, the same count")
    strides = [int(v) for v in ctx.attr("strides", [1] * sr)]
    dil = [int(v) for v in ctx.attr("dilations", [1] * sr)]
    pads = [int(v) for v in ctx.attr("pads", [0] * (2 * sr))]
    if min(image + block + strides + dil) < 1 or min(pads) < 0:
        raise ctx.fail(f"image_shape {image}, block_shape {block}, strides {strides}, dilations {dil} must be >= 1 "
                       f"and pads {pads} >= 0")
    k = int(np.prod(block))
    if not S.is_static(x.shape[1]) or int(x.shape[1]) % k:
        raise ctx.fail(f"input's axis 1 ({x.shape[1]}) is not a multiple of the block size {k}")
    channels = int(x.shape[1]) // k
    if sr == 1:  # one axis: an image of height 1
        image, block, strides, dil = [1] + image, [1] + block, [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    iattr = block + strides + dil + pads
    y = ctx.b.emit("col2im", [x], [spec(ctx.b.fresh(ctx.name), np.float32, [x.shape[0], channels] + image)],
                   iattr=iattr, name=ctx.name)[0]
    return [ctx.b.alias(y, [x.shape[0], channels] + image[2 - sr:], ctx.out_name())]


@handler("DeformConv")
def _deform_conv(ctx: NodeCtx, ins):
    """A 2-D convolution whose taps read x at learned offsets, bilinearly, optionally masked
    (DCNv2): op deform_conv, the sampled columns through the GEMM per group."""
    x, w, offset = ins[0], ins[1], ins[2]
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if any(v is not None and v.dtype != np.float32 for v in (x, w, offset, bias, mask)):
        raise ctx.fail("DeformConv is supported for float32")
    if x.rank != 4 or w.rank != 4:
        raise ctx.fail(f"only the 2-D form is supported (x [N, C, H, W]), got x {list(x.shape)}")
    if not all(S.is_static(d) for d in list(w.shape) + list(x.shape[1:])):
        raise ctx.fail("the weights' shape and x's channels and spatial sizes must be known at compile time")
    kernel = [int(d) for d in w.shape[2:]]
    strides = [int(v) for v in ctx.attr("strides", [1, 1])]
    dil = [int(v) for v in ctx.attr("dilations", [1, 1])]
    pads = [int(v) for v in ctx.attr("pads", [0, 0, 0, 0])]
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    c, m = int(x.shape[1]), int(w.shape[0])
    if group < 1 or og < 1 or c % group or m % group or c % og or int(w.shape[1]) * group != c:
        raise ctx.fail(f"group {group} / offset_group {og} do not fit {c} input and {m} output channels")
    out_sp = [conv_out_dim(ctx, int(x.shape[2 + i]), kernel[i], strides[i], dil[i], pads[i], pads[2 + i])
              for i in range(2)]
    if any(int(o) < 1 for o in out_sp):
        raise ctx.fail(f"the kernel does not fit the padded input ({list(x.shape[2:])})")
    scratch = 4 * c * kernel[0] * kernel[1] * int(out_sp[0]) * int(out_sp[1])
    return ctx.b.emit("deform_conv", [x, w, offset, bias, mask],
                      [spec(ctx.out_name(), np.float32, [x.shape[0], m] + out_sp)],
                      iattr=[group, og] + strides + dil + pads, scratch_bytes=scratch, name=ctx.name)


@handler("RoiAlign")
def _roi_align(ctx: NodeCtx, ins):
    """Regions of interest pooled to fixed bins by bilinear samples (op roi_align,
    onnxruntime's arithmetic); opset 16's half_pixel coordinates or opset 10's."""
    x, rois, batch = ins[0], ins[1], ins[2]
    if x.dtype != np.float32 or rois.dtype != np.float32 or x.rank != 4:
        raise ctx.fail(f"X must be float32 [N, C, H, W] and rois float32, got {x.dtype} {list(x.shape)}, {rois.dtype}")
    if batch.dtype != np.int64:
        batch = ctx.call("Cast", [batch], to=7)[0]  # int64
    mode = ctx.attr("mode", "avg")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if mode not in ("avg", "max") or coord not in ("half_pixel", "output_half_pixel"):
        raise ctx.fail(f"mode {mode!r} / coordinate_transformation_mode {coord!r} not supported")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    if oh < 1 or ow < 1 or ratio < 0:
        raise ctx.fail(f"output {oh} x {ow} and sampling_ratio {ratio} out of range")
    shape = [rois.shape[0], x.shape[1], oh, ow]
    return ctx.b.emit("roi_align", [x, rois, batch], [spec(ctx.out_name(), np.float32, shape)],
                      iattr=[int(mode == "max"), ratio, int(coord == "half_pixel")],
                      fattr=[float(ctx.attr("spatial_scale", 1.0))], name=ctx.name)


# ---------------------------------------------------------------- Resize / Upsample

_RESIZE_MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "cubic": 2, "bicubic": 2}
_COORD_MODES = {"half_pixel": 0, "pytorch_half_pixel": 1, "align_corners": 2, "asymmetric": 3,
                "half_pixel_symmetric": 4}
_NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3, "legacy": 4}
_RESIZE_TAP_BYTES = 48  # sizeof(resize_tap) in op_upsample.c


def _resize_last_first(in_shape, out_shape, resized) -> bool:
    """Whether op resize should run the innermost resized axis' pass first: that pass reads
    one element at a time, the others whole rows, so it should run on the smaller tensor —
    first when the other resized axes grow (LR-ASPP's two upsamples: 2.1 -> 0.75 ms)."""
    axes = [i for i, r in enumerate(resized) if r]
    if len(axes) < 2 or not all(S.is_static(in_shape[i]) and S.is_static(out_shape[i]) for i in axes):
        return False
    return int(np.prod([int(out_shape[i]) for i in axes[:-1]])) > int(np.prod([int(in_shape[i]) for i in axes[:-1]]))


def _resize_scratch(in_shape, out_shape, resized, last_first: bool = False) -> Dim:
    """resize's scratch (op_upsample.c resize_scratch) at the bounds: a tap table for the
    longest resized output axis, and a 64-byte-rounded float32 intermediate per pass but the
    last (the axes in order, or the innermost first)."""
    axes = [i for i, r in enumerate(resized) if r]
    if last_first and len(axes) > 1:
        axes = axes[-1:] + axes[:-1]
    table: Optional[Dim] = None
    for i in axes:
        table = out_shape[i] if table is None else S.dim_max(table, out_shape[i])
    total = S.dim_mul(_RESIZE_TAP_BYTES, 0 if table is None else table)
    shape = list(in_shape)
    for i in axes[:-1]:
        shape[i] = out_shape[i]
        total = S.dim_add(total, S.dim_add(S.prod(shape + [4]), 63))  # 4 bytes each, + rounding room
    return total


def _antialias_weights(mode: int, len_in: int, len_out: int, scale: float, coord: str, cubic_a: float,
                       exclude_outside: bool) -> np.ndarray:
    """The [len_out, len_in] matrix of an antialiased linear (mode 1) or cubic (2) resize along
    one axis, as ONNX defines it and onnxruntime computes it: when shrinking, the filter is
    stretched by 1/scale (so every input sample within its reach contributes), its taps
    normalised to sum 1; taps past the edges read the edge sample (or, exclude_outside, are
    dropped and the rest renormalised). Source positions as op resize computes them (float32)."""
    s = min(scale, 1.0)
    start = int(np.floor((-1.0 if mode == 1 else -2.0) / s) + 1)
    taps = np.arange(start, 2 - start)  # offsets from the sample left of the source position
    o = np.arange(len_out, dtype=np.float32)
    sc = np.float32(scale)
    if coord == "align_corners":
        x = o * np.float32(len_in - 1) / np.float32(len_out - 1) if len_out > 1 else o * 0
    elif coord == "asymmetric":
        x = o / sc
    elif coord == "pytorch_half_pixel":
        x = (o + 0.5) / sc - 0.5 if len_out > 1 else o * 0
    elif coord == "half_pixel_symmetric":
        adjust = np.float32(len_out) / (sc * np.float32(len_in))
        x = np.float32(len_in) / 2 * (1 - adjust) + (o + 0.5) / sc - 0.5
    else:
        x = (o + 0.5) / sc - 0.5
    x = x.astype(np.float64)
    left = np.floor(x)
    ratio = np.where(x == left, 1.0, x - left)  # an exact position counts as the right end of (x-1, x]
    left = np.where(x == left, left - 1, left).astype(np.int64)
    u = np.abs((taps[None, :] - ratio[:, None]) * s)
    if mode == 1:
        c = np.clip(1.0 - u, 0.0, 1.0)
    else:
        a = cubic_a
        c = np.where(u <= 1, ((a + 2) * u - (a + 3)) * u * u + 1,
                     np.where(u < 2, ((a * u - 5 * a) * u + 8 * a) * u - 4 * a, 0.0))
    c = c / c.sum(axis=1, keepdims=True)
    idx = left[:, None] + taps[None, :]
    if exclude_outside:
        c = np.where((idx < 0) | (idx >= len_in), 0.0, c)
        c = c / c.sum(axis=1, keepdims=True)
    w = np.zeros((len_out, len_in))
    np.add.at(w, (np.repeat(np.arange(len_out), taps.size), np.clip(idx, 0, len_in - 1).reshape(-1)), c.reshape(-1))
    return w


def _resize_antialias(ctx: NodeCtx, x: Value, out, scales, resized, mode: int, coord: str) -> Value:
    """An antialiased Resize as one product per resized axis with its weight matrix
    (_antialias_weights), the axis moved last for it and back: a shrink's taps span the whole
    stretched filter, which op resize's fixed taps do not hold. Needs the resized axes' input
    and output extents known at compile time."""
    from .onnx_ops import linear

    y = x
    for axis in [i for i in range(x.rank) if resized[i]]:
        if not (S.is_static(x.shape[axis]) and S.is_static(out[axis])):
            raise ctx.fail(f"antialias needs axis {axis}'s input and output extents known at compile time")
        len_in, len_out = int(x.shape[axis]), int(out[axis])
        if len_in < 1 or len_out < 1:
            raise ctx.fail(f"axis {axis}: cannot resize {len_in} samples to {len_out}")
        scale = scales[axis] if scales[axis] != 0.0 else float(np.float32(len_out) / np.float32(len_in))
        w = _antialias_weights(mode, len_in, len_out, scale, coord, float(ctx.attr("cubic_coeff_a", -0.75)),
                               bool(ctx.attr("exclude_outside", 0)))
        last = axis == y.rank - 1
        moved = y if last else transpose(ctx, y, [i for i in range(y.rank) if i != axis] + [axis],
                                         ctx.b.fresh(ctx.name))
        y = linear(ctx, moved, w.astype(np.float32), None, ctx.b.fresh(ctx.name))
        if not last:
            y = transpose(ctx, y, list(range(axis)) + [y.rank - 1] + list(range(axis, y.rank - 1)),
                          ctx.b.fresh(ctx.name))
    return ctx.b.alias(y, out, ctx.out_name())


_GRID_MODES = {"bilinear": 0, "linear": 0, "nearest": 1, "bicubic": 2, "cubic": 2}
_GRID_PADDING = {"zeros": 0, "border": 1, "reflection": 2}


@handler("GridSample")
def _grid_sample(ctx: NodeCtx, ins):
    """GridSample over 2 spatial axes (x [N, C, H, W], grid [N, Ho, Wo, 2]): one grid_sample op
    (op_upsample.c), onnxruntime's coordinates, rounding and padding."""
    x, grid = ins[0], ins[1]
    mode, padding = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear"), ctx.attr("padding_mode", "zeros")
    if mode not in _GRID_MODES or padding not in _GRID_PADDING:
        raise ctx.fail(f"mode {mode!r} / padding_mode {padding!r} not supported "
                       f"({sorted(_GRID_MODES)} / {sorted(_GRID_PADDING)})")
    if x.dtype != np.float32 or grid.dtype != np.float32:
        raise ctx.fail(f"GridSample of {x.dtype} by a {grid.dtype} grid is not supported (float32)")
    if x.rank != 4 or grid.rank != 4:
        raise ctx.fail(f"only 2 spatial axes are supported (x [N, C, H, W], grid [N, Ho, Wo, 2]), got x "
                       f"{list(x.shape)} and grid {list(grid.shape)}")
    if S.is_static(grid.shape[3]) and int(grid.shape[3]) != 2:
        raise ctx.fail(f"the grid's last axis must be 2 (x, y), got {grid.shape[3]}")
    shape = [x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]]
    return ctx.b.emit("grid_sample", [x, grid], [spec(ctx.out_name(), np.float32, shape)],
                      iattr=[_GRID_MODES[mode], _GRID_PADDING[padding], int(ctx.attr("align_corners", 0))],
                      name=ctx.name)


@handler("Resize", "Upsample")
def _resize(ctx: NodeCtx, ins):
    """Resize (opsets 10-19) and Upsample: nearest, linear and cubic over any axes, every
    coordinate transformation but tf_crop_and_resize, scales or sizes (constants or shape
    arithmetic), the axes attribute; as op resize (native/src/plan/op_upsample.c)."""
    x = ins[0]
    codes = x.dtype in (np.uint8, np.int8)
    if codes and ctx.attr("mode", "nearest") != "nearest":
        raise ctx.fail(f"{ctx.attr('mode')} Resize of {x.dtype} is not supported (nearest is; or float32 input)")
    if x.dtype != np.float32 and not codes:
        raise ctx.fail(f"Resize is supported for float32 input (and nearest of int8/uint8), got {x.dtype}")
    if codes:
        # nearest of 8-bit codes (onnxruntime's QOperator format resizes uint8 directly): a
        # copy of chosen elements, done on the codes widened exactly to float, narrowed back
        x = ctx.b.emit("cast", [x], [spec(ctx.b.fresh(ctx.name + ".f32"), np.float32, x.shape)], name=ctx.name)[0]
    r = x.rank
    # Upsample and Resize-10: inputs (X, scales), asymmetric coordinates, and onnxruntime's
    # legacy nearest rounding (floor when enlarging, ceil when shrinking)
    legacy = ctx.op_type == "Upsample" or ctx.opset < 11
    scales_v = (ins[1] if len(ins) > 1 else None) if legacy else (ins[2] if len(ins) > 2 else None)
    sizes_v = None if legacy else (ins[3] if len(ins) > 3 else None)
    if ctx.op_type == "Upsample" and scales_v is None and ctx.attr("scales") is not None:
        scale_list = [float(s) for s in ctx.attr("scales")]
    elif scales_v is not None and scales_v.rank == 1 and S.is_static(scales_v.shape[0]) and int(scales_v.shape[0]) > 0:
        if scales_v.const is None:
            raise ctx.fail("scales must be a constant")
        scale_list = [float(s) for s in scales_v.const.astype(np.float32).reshape(-1)]
    else:
        scale_list = None
    if scale_list is None and sizes_v is None:
        raise ctx.fail("needs scales or sizes")
    mode_name = ctx.attr("mode", "nearest")
    if mode_name not in _RESIZE_MODES:
        raise ctx.fail(f"mode {mode_name!r} is not supported")
    coord_name = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord_name not in _COORD_MODES:
        raise ctx.fail(f"coordinate_transformation_mode {coord_name!r} is not supported "
                       f"(supported: {', '.join(_COORD_MODES)})")
    nearest_name = "legacy" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
    if nearest_name not in _NEAREST_MODES:
        raise ctx.fail(f"nearest_mode {nearest_name!r} is not supported")
    antialias = bool(ctx.attr("antialias", 0))
    if antialias and mode_name not in ("linear", "bilinear", "cubic", "bicubic"):
        raise ctx.fail(f"antialias=1 is defined for linear and cubic modes, not {mode_name!r}")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if sizes_v is not None else "stretch"
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.fail(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, not_larger, not_smaller")
    axes = list(ctx.attr("axes", range(r)))
    axes = [a + r if a < 0 else a for a in axes]
    if sorted(set(axes)) != sorted(axes) or any(not 0 <= a < r for a in axes):
        raise ctx.fail(f"axes {ctx.attr('axes')} are not distinct axes of a rank-{r} input")

    scales = [1.0] * r
    out = list(x.shape)
    if scale_list is not None:
        if len(scale_list) != len(axes):
            raise ctx.fail(f"{len(scale_list)} scales for {len(axes)} axes")
        for a, s in zip(axes, scale_list):
            if not s > 0 or not np.isfinite(s):
                raise ctx.fail(f"scale {s} must be a positive finite number")
            scales[a] = s
            d = x.shape[a]
            if S.is_static(d):
                out[a] = int(np.float32(int(d)) * np.float32(s))  # onnxruntime: float product, truncated
            elif float(s).is_integer():
                out[a] = S.dim_mul(d, int(s))
            elif s == 1.0:
                out[a] = d
            else:
                raise ctx.fail(f"a fractional scale ({s}) needs axis {a}'s extent known when the model is "
                               "compiled (pass sizes, or bound the dimension)")
    else:
        sizes = ctx.known(sizes_v, "sizes")
        if len(sizes) != len(axes):
            raise ctx.fail(f"{len(sizes)} sizes for {len(axes)} axes")
        if policy != "stretch":
            # one scale for every listed axis, the largest that fits in sizes (not_larger) or
            # the smallest that covers them (not_smaller); each extent its rounded product
            if not all(S.is_static(x.shape[a]) and S.is_static(n) for a, n in zip(axes, sizes)):
                raise ctx.fail(f"keep_aspect_ratio_policy {policy!r} needs the resized extents known at compile time")
            ratios = [np.float32(int(n)) / np.float32(int(x.shape[a])) for a, n in zip(axes, sizes)]
            common = float(min(ratios) if policy == "not_larger" else max(ratios))
            for a in axes:
                scales[a] = common
                out[a] = int(np.floor(np.float32(common) * np.float32(int(x.shape[a])) + np.float32(0.5)))
        else:
            for a, n in zip(axes, sizes):
                out[a] = n
                scales[a] = 0.0  # the op derives out / in per run
    resized = [not (scales[i] in (0.0, 1.0) and S.is_static(S.dim_sub(out[i], x.shape[i]))
                    and int(S.dim_sub(out[i], x.shape[i])) == 0) for i in range(r)]
    if antialias:
        return [_resize_antialias(ctx, x, out, scales, resized, _RESIZE_MODES[mode_name], coord_name)]
    iattr = [_RESIZE_MODES[mode_name], _COORD_MODES[coord_name], _NEAREST_MODES[nearest_name],
             int(ctx.attr("exclude_outside", 0)), r]
    last_first = _resize_last_first(x.shape, out, resized)
    if last_first:
        iattr.append(1)
    y = ctx.b.emit("resize", [x], [spec(ctx.b.fresh(ctx.name) if codes else ctx.out_name(), np.float32, out)],
                   iattr=iattr, fattr=[float(ctx.attr("cubic_coeff_a", -0.75))] + scales,
                   scratch_bytes=_resize_scratch(x.shape, out, resized, last_first), name=ctx.name)
    if codes:
        return ctx.b.emit("cast", y, [spec(ctx.out_name(), ins[0].dtype, out)], name=ctx.name)
    return y
