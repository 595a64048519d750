"""Handlers for the transformer ops of ONNX opset 23 and later, which torch's dynamo exporter
writes from ``opset_version=23`` (RMSNorm, rotary embeddings and scaled dot-product
attention become one node each): RMSNormalization, RotaryEmbedding, Attention. Each is
spelt out in the ops it is defined by (``NodeCtx.call`` runs their handlers), so the passes
see, fuse and place them as in an exporter's unfused graph; the numbers follow the
operators' reference definitions (onnx.reference), computed in float32.
"""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from . import symbolic as S
from .graph import Value
from .onnx_import import NodeCtx, handler
from .onnx_ops import _UNARY, binary, float32_input, norm_axis, spec, transpose, unary

F32 = np.dtype(np.float32)


def _slice_last(ctx: NodeCtx, x: Value, start: int, end: int, step: int = 1) -> Value:
    return ctx.call("Slice", [x, ctx.const([start]), ctx.const([end]), ctx.const([-1]), ctx.const([step])])[0]


@handler("RMSNormalization")
def _rms_normalization(ctx: NodeCtx, ins):
    """y = x / sqrt(mean(x², axes [axis:]) + epsilon) · scale."""
    ctx.require_attrs(("axis", "epsilon", "stash_type"))
    x, scale = float32_input(ctx, ins[0], "X"), float32_input(ctx, ins[1], "scale")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), x.rank)
    axes = list(range(axis, x.rank))
    sq = binary(ctx, "Mul", x, x, ctx.b.fresh(ctx.name + ".sq"))
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    ms = ctx.b.emit("reduce", [sq], [spec(ctx.b.fresh(ctx.name + ".ms"), F32, shape)],
                    iattr=[1, len(axes)] + axes, name=ctx.name)[0]  # 1: mean
    ms = binary(ctx, "Add", ms, ctx.const(float(ctx.attr("epsilon", 1e-5)), F32), ctx.b.fresh(ctx.name))
    rms = unary(ctx, _UNARY["Sqrt"], ms, ctx.b.fresh(ctx.name + ".rms"))
    normed = binary(ctx, "Div", x, rms, ctx.b.fresh(ctx.name + ".normed"))
    return [binary(ctx, "Mul", normed, scale, ctx.out_name())]


@handler("RotaryEmbedding")
def _rotary_embedding(ctx: NodeCtx, ins):
    """Rotary position embedding of X ([batch, heads, seq, head] or [batch, seq, heads·head]
    with num_heads) by cos/sin caches ([batch, seq, rot/2], or [positions, rot/2] indexed by
    position_ids): the first rotary_embedding_dim values of each head rotate in halves or, with
    interleaved, in (even, odd) pairs; the rest pass through."""
    ctx.require_attrs(("interleaved", "num_heads", "rotary_embedding_dim"))
    x, cos, sin = (float32_input(ctx, v, w) for v, w in zip(ins[:3], ("X", "cos_cache", "sin_cache")))
    pos = ins[3] if len(ins) > 3 else None
    if x.rank == 4:
        xs = transpose(ctx, x, [0, 2, 1, 3], ctx.b.fresh(ctx.name + ".bshd"))
    elif x.rank == 3:
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0:
            raise ctx.fail("a 3-D input needs num_heads")
        xs = ctx.call("Reshape", [x, ctx.const([0, 0, heads, -1])])[0]
    else:
        raise ctx.fail(f"X must be 3-D or 4-D, got {list(x.shape)}")
    head = xs.shape[3]
    if not S.is_static(head):
        raise ctx.fail(f"the head size {head} must be known when the model is compiled")
    head = int(head)
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        raise ctx.fail(f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    half = rot // 2
    if pos is not None:
        cos, sin = (ctx.call("Gather", [c, pos], axis=0)[0] for c in (cos, sin))
    for c in (cos, sin):
        if c.rank != 3 or not S.is_static(c.shape[-1]) or int(c.shape[-1]) != half:
            raise ctx.fail(f"the cos/sin caches must be [batch, seq, {half}] (after position_ids), got {list(c.shape)}")
    cos4, sin4 = (ctx.call("Unsqueeze", [c, ctx.const([2])])[0] for c in (cos, sin))  # [B, S, 1, half]
    x_rot = _slice_last(ctx, xs, 0, rot) if rot < head else xs
    if ctx.attr("interleaved", 0):
        x1, x2 = _slice_last(ctx, x_rot, 0, rot, 2), _slice_last(ctx, x_rot, 1, rot, 2)
    else:
        x1, x2 = _slice_last(ctx, x_rot, 0, half), _slice_last(ctx, x_rot, half, rot)
    fresh = lambda what: ctx.b.fresh(f"{ctx.name}.{what}")  # noqa: E731
    real = binary(ctx, "Sub", binary(ctx, "Mul", x1, cos4, fresh("xc")), binary(ctx, "Mul", x2, sin4, fresh("ys")),
                  fresh("real"))
    imag = binary(ctx, "Add", binary(ctx, "Mul", x1, sin4, fresh("xs")), binary(ctx, "Mul", x2, cos4, fresh("yc")),
                  fresh("imag"))
    if ctx.attr("interleaved", 0):  # (real, imag) pairs back in place: stack on a new last axis
        pairs = ctx.call("Concat", [ctx.call("Unsqueeze", [v, ctx.const([-1])])[0] for v in (real, imag)], axis=-1)[0]
        rotated = ctx.call("Reshape", [pairs, ctx.const([0, 0, 0, rot])])[0]
    else:
        rotated = ctx.call("Concat", [real, imag], axis=-1)[0]
    if rot < head:
        rotated = ctx.call("Concat", [rotated, _slice_last(ctx, xs, rot, head)], axis=-1)[0]
    if x.rank == 4:
        return [transpose(ctx, rotated, [0, 2, 1, 3], ctx.out_name())]
    return [ctx.b.alias(rotated, x.shape, ctx.out_name())]


def _heads_first(ctx: NodeCtx, v: Value, heads: int, what: str) -> Value:
    """[batch, seq, heads·size] -> [batch, heads, seq, size]; a 4-D input as it is."""
    if v.rank == 4:
        return v
    if v.rank != 3 or heads <= 0:
        raise ctx.fail(f"{what} must be 4-D, or 3-D with q_num_heads/kv_num_heads, got {list(v.shape)}")
    split = ctx.call("Reshape", [v, ctx.const([0, 0, heads, -1])])[0]
    return transpose(ctx, split, [0, 2, 1, 3], ctx.b.fresh(f"{ctx.name}.{what}"))


@handler("Attention")
def _attention(ctx: NodeCtx, ins):
    """softmax(scale · Q·Kᵀ (softcap) + mask) · V per head, with grouped K/V heads repeated,
    past K/V concatenated in front (present outputs), is_causal bottom-right aligned after the
    past, window bounds (opset 25), and rows with no key left giving zeros. With
    nonpad_kv_seqlen (a cache of fixed length that TensorScatter writes), the keys from
    nonpad_kv_seqlen[b] on are masked, and without past K/V the causal frontier ends there:
    query i sees key j iff j <= i + nonpad_kv_seqlen[b] - Sq."""
    ctx.require_attrs(("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                       "softmax_precision", "left_window_size", "right_window_size"))
    q, k, v = (float32_input(ctx, x, w) for x, w in zip(ins[:3], ("Q", "K", "V")))
    opt = lambda i: ins[i] if len(ins) > i else None  # noqa: E731
    mask, past_k, past_v = opt(3), float32_input(ctx, opt(4), "past_key"), float32_input(ctx, opt(5), "past_value")
    nonpad = opt(6)
    if nonpad is not None and (nonpad.dtype != np.int64 or nonpad.rank != 1):
        raise ctx.fail(f"nonpad_kv_seqlen must be int64 [batch], got {nonpad.dtype} {list(nonpad.shape)}")
    if (past_k is None) != (past_v is None):
        raise ctx.fail("past_key and past_value come together")
    fresh = lambda what: ctx.b.fresh(f"{ctx.name}.{what}")  # noqa: E731
    three_d = q.rank == 3
    qh = _heads_first(ctx, q, int(ctx.attr("q_num_heads", 0)), "Q")
    kh = _heads_first(ctx, k, int(ctx.attr("kv_num_heads", 0)), "K")
    vh = _heads_first(ctx, v, int(ctx.attr("kv_num_heads", 0)), "V")
    hq, hkv, dh = qh.shape[1], kh.shape[1], qh.shape[3]
    if not all(S.is_static(d) for d in (hq, hkv, dh)):
        raise ctx.fail("the head counts and the head size must be known when the model is compiled")
    hq, hkv, dh = int(hq), int(hkv), int(dh)
    if hkv == 0 or hq % hkv:
        raise ctx.fail(f"{hq} query heads cannot share {hkv} key/value heads")
    outs: List[Optional[Value]] = [None, None, None, None]
    if past_k is not None:
        kh = ctx.call("Concat", [past_k, kh], axis=2)[0]
        vh = ctx.call("Concat", [past_v, vh], axis=2)[0]
        outs[1], outs[2] = (ctx.b.alias(x, x.shape, ctx.out_name(i)) if len(ctx.outputs) > i and ctx.outputs[i]
                            else None for i, x in ((1, kh), (2, vh)))
    if hq != hkv:  # grouped-query attention: each K/V head serves hq/hkv query heads
        group = hq // hkv
        def repeat(x: Value) -> Value:
            x5 = ctx.call("Unsqueeze", [x, ctx.const([2])])[0]
            x5 = ctx.call("Expand", [x5, ctx.const([1, 1, group, 1, 1])])[0]
            return ctx.call("Reshape", [x5, ctx.const([0, hq, -1, x.shape[3] if S.is_static(x.shape[3]) else -1])])[0]
        kh, vh = repeat(kh), repeat(vh)
    scale = ctx.attr("scale")
    scale = 1.0 / math.sqrt(dh) if scale is None else float(scale)
    qs = binary(ctx, "Mul", qh, ctx.const(scale, F32), fresh("q_scaled")) if scale != 1.0 else qh
    kt = transpose(ctx, kh, [0, 1, 3, 2], fresh("kT"))
    scores = ctx.call("MatMul", [qs, kt])[0]  # [B, Hq, Sq, T]
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    taps = {0: scores}
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        capped = binary(ctx, "Div", scores, ctx.const(softcap, F32), fresh("capped"))
        t = unary(ctx, _UNARY["Tanh"], capped, fresh("tanh"))
        scores = binary(ctx, "Mul", t, ctx.const(softcap, F32), fresh("softcap"))
    taps[1] = scores
    # every mask becomes one additive bias (0 or -inf where boolean), as the operator's
    # function body defines it: scores + bias is the pattern fuse_attention runs in one op
    zero, neg_inf = ctx.const(0.0, F32), ctx.const(-np.inf, F32)
    bias = None
    can_empty = False  # may a row lose every key (then its weights are zeros, not NaN)?
    if mask is not None:
        if mask.dtype == np.bool_:
            bias = ctx.call("Where", [mask, zero, neg_inf])[0]
            can_empty = True
        else:
            bias = float32_input(ctx, mask, "attn_mask")
    sq, total = qh.shape[2], kh.shape[2]
    if nonpad is not None:  # a cache of fixed length (TensorScatter): keys from nonpad_kv_seqlen[b] on are padding
        cols = ctx.arange(total)
        per_batch = ctx.call("Unsqueeze", [nonpad, ctx.const([1, 2, 3])])[0]  # [B, 1, 1, 1]
        valid = ctx.call("Where", [ctx.call("Less", [cols, per_batch])[0], zero, neg_inf])[0]  # [B, 1, 1, T]
        bias = valid if bias is None else binary(ctx, "Add", bias, valid, fresh("mask_nonpad"))
        can_empty = True
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if ctx.attr("is_causal", 0) or left >= 0 or right >= 0:
        rows = ctx.call("Unsqueeze", [ctx.arange(sq), ctx.const([1])])[0]  # [Sq, 1]
        cols = ctx.arange(total)
        if past_k is None and nonpad is not None:  # the valid keys end where the queries do, per batch
            offset = binary(ctx, "Sub", per_batch, ctx.b.from_known([sq], np.int64, [], fresh("sq")), fresh("offset"))
        else:
            offset = ctx.b.from_known([past_k.shape[2] if past_k is not None else 0], np.int64, [], fresh("past"))
        at = binary(ctx, "Add", rows, offset, fresh("at"))  # [Sq, 1], or [B, 1, Sq, 1] with nonpad_kv_seqlen
        allowed = None
        bounds = []
        if ctx.attr("is_causal", 0):
            bounds.append(("LessOrEqual", cols, at))
        if right >= 0:
            bounds.append(("LessOrEqual", cols, binary(ctx, "Add", at, ctx.const(right), fresh("right"))))
        if left >= 0:
            bounds.append(("GreaterOrEqual", cols, binary(ctx, "Sub", at, ctx.const(left), fresh("left"))))
        for op, a, b in bounds:
            ok = ctx.call(op, [a, b])[0]
            allowed = ok if allowed is None else ctx.call("And", [allowed, ok])[0]
        window = ctx.call("Where", [allowed, zero, neg_inf])[0]  # [Sq, T] ([B, 1, Sq, T])
        bias = window if bias is None else binary(ctx, "Add", bias, window, fresh("mask_window"))
        can_empty = can_empty or left >= 0 or right >= 0
    if bias is not None:
        scores = binary(ctx, "Add", scores, bias, fresh("masked"))
    taps[2] = scores
    probs = ctx.call("Softmax", [scores], axis=-1)[0]
    if can_empty:  # a row of -inf gives NaN weights: the operator defines them as zeros
        probs = ctx.call("Where", [ctx.call("IsNaN", [probs])[0], ctx.const(0.0, F32), probs])[0]
    taps[3] = probs
    y = ctx.call("MatMul", [probs, vh])[0]  # [B, Hq, Sq, Dv]
    if three_d:
        y = transpose(ctx, y, [0, 2, 1, 3], fresh("bshd"))
        y = ctx.call("Reshape", [y, ctx.const([0, 0, -1])])[0]
    outs[0] = ctx.b.alias(y, y.shape, ctx.out_name(0))
    if len(ctx.outputs) > 3 and ctx.outputs[3]:
        if mode not in taps:
            raise ctx.fail(f"qk_matmul_output_mode {mode} is not one of 0-3")
        outs[3] = ctx.b.alias(taps[mode], taps[mode].shape, ctx.out_name(3))
    return outs[:max(1, len(ctx.outputs))]
