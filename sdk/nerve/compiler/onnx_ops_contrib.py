"""Handlers for onnxruntime's float ``com.microsoft`` ops that its graph optimiser writes into
saved models (``.ort`` files, optimised ``.onnx``): each becomes the runtime ops its
definition spells out, so the passes see the same shapes they would in the unfused graph.

  * FusedMatMul ``Y = alpha · op(A) · op(B)`` (transA/transB swap the last two axes): the
    transposes are emitted as such (the matmul pass folds a transposed B into the product) and
    alpha scales A (the small side of an attention product). transBatchA/B are refused.
  * FusedConv: Conv, then the optional sum input Z, then ``activation`` (Relu, Tanh, Sigmoid,
    LeakyRelu, HardSigmoid, Clip with ``activation_params``); the activation pass fuses it
    into the convolution.
  * Gelu (exact, erf) and QuickGelu ``x · sigmoid(alpha · x)`` (alpha default 1.702).
  * SkipLayerNormalization: ``s = input + skip (+ bias)``, ``output = LayerNorm(s)·gamma
    (+ beta)`` over the last axis; the optional 4th output is s itself. The mean and
    inverse-deviation outputs (training only) are refused.
"""

from __future__ import annotations

import numpy as np

from .graph import Value
from .onnx_import import NodeCtx, handler
from .onnx_ops import _UNARY, binary, conv, layernorm, spec, unary

MS = "com.microsoft"
F32 = np.dtype(np.float32)


def _last_two_swapped(ctx: NodeCtx, x: Value) -> Value:
    if x.rank < 2:
        raise ctx.fail(f"a transposed operand needs rank >= 2, got {list(x.shape)}")
    perm = list(range(x.rank - 2)) + [x.rank - 1, x.rank - 2]
    return ctx.b.emit("transpose", [x], [spec(ctx.b.fresh(ctx.name + ".t"), x.dtype, [x.shape[p] for p in perm])],
                      iattr=perm, name=ctx.name)[0]


@handler("FusedMatMul", domain=MS)
def _fused_matmul(ctx: NodeCtx, ins):
    ctx.require_attrs(("alpha", "transA", "transB", "transBatchA", "transBatchB"))
    a, b = ins
    if a.dtype != F32 or b.dtype != F32:
        raise ctx.fail(f"FusedMatMul of {a.dtype} x {b.dtype} is not supported (float32)")
    if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        raise ctx.fail("transBatchA/transBatchB are not supported")
    if ctx.attr("transA", 0):
        a = _last_two_swapped(ctx, a)
    if ctx.attr("transB", 0):
        b = _last_two_swapped(ctx, b)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        a = binary(ctx, "Mul", a, ctx.b.const(np.array(alpha, F32)), ctx.b.fresh(ctx.name + ".scaled"))
    from .onnx_ops import _matmul

    return _matmul(ctx, [a, b])


# FusedConv's activation names -> (unary code, number of activation_params it takes)
_FUSED_ACT = {"Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "HardSigmoid": 2, "Clip": 2}


@handler("FusedConv", domain=MS)
def _fused_conv(ctx: NodeCtx, ins):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    z = ins[3] if len(ins) > 3 else None
    act = ctx.attr("activation", "")
    params = [float(p) for p in ctx.attr("activation_params", [])]
    if act and act not in _FUSED_ACT:
        raise ctx.fail(f"activation {act!r} is not supported ({', '.join(_FUSED_ACT)})")
    if act and len(params) < _FUSED_ACT[act]:
        raise ctx.fail(f"activation {act} needs {_FUSED_ACT[act]} activation_params, got {len(params)}")
    y = conv(ctx, x, w, bias, ctx.out_name() if not (act or z is not None) else ctx.b.fresh(ctx.name))
    if z is not None:
        y = binary(ctx, "Add", y, z, ctx.out_name() if not act else ctx.b.fresh(ctx.name))
    if act:
        p0, p1 = (params + [0.0, 0.0])[:2]
        if act == "LeakyRelu":
            p0 = params[0] if params else 0.01
        y = unary(ctx, 15 if act == "Clip" else _UNARY[act], y, ctx.out_name(), p0, p1)
    return [y]


@handler("Gelu", domain=MS)
def _gelu(ctx: NodeCtx, ins):
    return [unary(ctx, 11, ins[0], ctx.out_name())]


@handler("QuickGelu", domain=MS)
def _quick_gelu(ctx: NodeCtx, ins):
    x = ins[0]
    alpha = float(ctx.attr("alpha", 1.702))
    t = binary(ctx, "Mul", x, ctx.b.const(np.array(alpha, F32)), ctx.b.fresh(ctx.name)) if alpha != 1.0 else x
    s = unary(ctx, _UNARY["Sigmoid"], t, ctx.b.fresh(ctx.name))
    return [binary(ctx, "Mul", x, s, ctx.out_name())]


@handler("SkipLayerNormalization", domain=MS)
def _skip_layernorm(ctx: NodeCtx, ins):
    ctx.require_attrs(("epsilon",))
    x, skip, gamma = ins[0], ins[1], ins[2]
    beta = ins[3] if len(ins) > 3 else None
    bias = ins[4] if len(ins) > 4 else None
    if any(i < len(ctx.outputs) and ctx.outputs[i] for i in (1, 2)):
        raise ctx.fail("the mean and inv_std_var outputs are not supported")
    want_sum = len(ctx.outputs) > 3 and bool(ctx.outputs[3])
    s = binary(ctx, "Add", x, skip, ctx.out_name(3) if want_sum and bias is None else ctx.b.fresh(ctx.name))
    if bias is not None:
        s = binary(ctx, "Add", s, bias, ctx.out_name(3) if want_sum else ctx.b.fresh(ctx.name))
    y = layernorm(ctx, s, gamma, beta, s.rank - 1, ctx.out_name())
    return [y, None, None, s] if want_sum else [y]
