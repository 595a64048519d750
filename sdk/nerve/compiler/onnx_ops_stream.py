"""Handlers for the ONNX ops of streaming and decoding models that carry state from one run
to the next: TensorScatter (opset 24: a KV cache of fixed length written at per-batch
positions, op ``tensor_scatter``), CausalConvWithState (opset 27: a causal depthwise 1-D conv
whose last k - 1 inputs are the next chunk's left context, op ``causal_conv``) and
LinearAttention (opset 27: the recurrent state of linear attention,
gated or delta rule, op ``linear_attention``). With ``state={present: past}`` a session keeps
such a state between runs, so a model streams chunk by chunk."""

from __future__ import annotations

import numpy as np

from . import symbolic as S
from .onnx_import import NodeCtx, handler
from .onnx_ops import _index_input, float32_input, norm_axis, spec

F32 = np.dtype(np.float32)
_RULES = {"linear": 0, "gated": 1, "delta": 2, "gated_delta": 3}


def _opt(ins, i: int):
    return ins[i] if len(ins) > i else None


def _static(ctx: NodeCtx, d, what: str) -> int:
    if not S.is_static(d):
        raise ctx.fail(f"{what} must be known when the model is compiled, got {d}")
    return int(d)


@handler("TensorScatter")
def _tensor_scatter(ctx: NodeCtx, ins):
    """present = past with update's rows written from write_indices[b] along `axis`
    (op tensor_scatter: the positions are checked each run)."""
    ctx.require_attrs(("axis", "mode"))
    past, update, w = ins[0], ins[1], _opt(ins, 2)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.fail(f"mode {mode!r} is not 'linear' or 'circular'")
    if update.dtype != past.dtype:
        raise ctx.fail(f"update of {update.dtype} into a cache of {past.dtype}")
    if update.rank != past.rank or past.rank < 2:
        raise ctx.fail(f"past_cache {list(past.shape)} and update {list(update.shape)} must have one rank, at least 2")
    axis = norm_axis(ctx, int(ctx.attr("axis", -2)), past.rank)
    if axis == 0:
        raise ctx.fail("axis cannot be the batch axis 0")
    for d, (p, u) in enumerate(zip(past.shape, update.shape)):
        if S.is_static(p) and S.is_static(u) and (int(u) > int(p) if d == axis else int(u) != int(p)):
            raise ctx.fail(f"update {list(update.shape)} must match past_cache {list(past.shape)} on every axis but "
                           f"{axis}, and be at most as long there")
    if w is not None:
        w = _index_input(ctx, w, "write_indices")
        if w.rank != 1:
            raise ctx.fail(f"write_indices must be 1-D (one per batch), got {list(w.shape)}")
    return ctx.b.emit("tensor_scatter", [past, update, w], [spec(ctx.out_name(), past.dtype, past.shape)],
                      iattr=[axis, int(mode == "circular")], name=ctx.name)


@handler("CausalConvWithState")
def _causal_conv_with_state(ctx: NodeCtx, ins):
    """y = act(depthwise conv of concat(past or zeros, x)) with no padding, so y has x's
    length; present = the last k - 1 positions of that concatenation (op causal_conv: one
    pass, no concatenated copy)."""
    ctx.require_attrs(("activation",))
    x, w = float32_input(ctx, ins[0], "input"), float32_input(ctx, ins[1], "weight")
    bias, past = float32_input(ctx, _opt(ins, 2), "bias"), float32_input(ctx, _opt(ins, 3), "past_state")
    act = ctx.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ctx.fail(f"activation {act!r} is not 'none', 'silu' or 'swish'")
    if x.rank != 3 or w.rank != 3:
        raise ctx.fail(f"input {list(x.shape)} and weight {list(w.shape)} must be 3-D: (batch, channels, length) "
                       "and (channels, 1, k)")
    channels, k = _static(ctx, w.shape[0], "weight's channels"), _static(ctx, w.shape[2], "the kernel size")
    if _static(ctx, w.shape[1], "weight's dim 1") != 1 or k < 1:
        raise ctx.fail(f"weight {list(w.shape)} must be (channels, 1, k) with k >= 1")
    if S.is_static(x.shape[1]) and int(x.shape[1]) != channels:
        raise ctx.fail(f"input has {x.shape[1]} channels, the weight {channels}")
    if bias is not None and (bias.rank != 1 or _static(ctx, bias.shape[0], "bias' length") != channels):
        raise ctx.fail(f"bias {list(bias.shape)} must be ({channels},)")
    if past is not None and (past.rank != 3 or (S.is_static(past.shape[2]) and int(past.shape[2]) != k - 1)):
        raise ctx.fail(f"past_state {list(past.shape)} must be (batch, channels, k - 1 = {k - 1})")
    batch = x.shape[0]
    return ctx.b.emit("causal_conv", [x, w, bias, past],
                      [spec(ctx.out_name(0), F32, x.shape), spec(ctx.out_name(1), F32, (batch, channels, k - 1))],
                      iattr=[int(act != "none")], name=ctx.name)


@handler("LinearAttention")
def _linear_attention(ctx: NodeCtx, ins):
    """The recurrence over the tokens, one state [dk, dv] per batch and key/value head (op
    linear_attention); the shapes are checked here and again each run."""
    ctx.require_attrs(("chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"))
    q, k, v = (float32_input(ctx, ins[i], n) for i, n in enumerate(("query", "key", "value")))
    past, decay, beta = (float32_input(ctx, _opt(ins, i), n) for i, n in ((3, "past_state"), (4, "decay"), (5, "beta")))
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise ctx.fail(f"update_rule {rule!r} is not one of {sorted(_RULES)}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != (decay is not None):
        raise ctx.fail(f"update_rule {rule!r} {'requires' if gated else 'forbids'} the decay input")
    if delta != (beta is not None):
        raise ctx.fail(f"update_rule {rule!r} {'requires' if delta else 'forbids'} the beta input")
    hq, hkv = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if hq < 1 or hkv < 1 or hq % hkv:
        raise ctx.fail(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    for x, what in ((q, "query"), (k, "key"), (v, "value")):
        if x.rank != 3:
            raise ctx.fail(f"{what} must be 3-D (batch, tokens, heads x head size), got {list(x.shape)}")
    q_width, k_width, v_width = (_static(ctx, x.shape[2], f"{w}'s last dim") for x, w in ((q, "query"), (k, "key"),
                                                                                          (v, "value")))
    if q_width % hq or v_width % hkv:
        raise ctx.fail(f"query's last dim {q_width} must divide by q_num_heads {hq} and value's {v_width} by "
                       f"kv_num_heads {hkv}")
    dk, dv = q_width // hq, v_width // hkv
    if k_width != hkv * dk:
        raise ctx.fail(f"key's last dim {k_width} must be kv_num_heads x the query's head size ({hkv} x {dk})")
    for x, what, allowed in ((decay, "decay", (hkv, hkv * dk)), (beta, "beta", (hkv, 1))):
        if x is not None and (x.rank != 3 or _static(ctx, x.shape[2], f"{what}'s last dim") not in allowed):
            raise ctx.fail(f"{what} must be (batch, tokens, {' or '.join(map(str, allowed))}), got {list(x.shape)}")
    batch, tokens = q.shape[0], q.shape[1]
    state_shape = (batch, hkv, dk, dv)
    if past is not None and (past.rank != 4 or any(S.is_static(a) and S.is_static(b) and int(a) != int(b)
                                                   for a, b in zip(past.shape, state_shape))):
        raise ctx.fail(f"past_state {list(past.shape)} must be (batch, kv_num_heads, dk, dv) = {list(state_shape)}")
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / float(np.sqrt(dk))
    return ctx.b.emit("linear_attention", [q, k, v, past, decay, beta],
                      [spec(ctx.out_name(0), F32, (batch, tokens, hq * dv)), spec(ctx.out_name(1), F32, state_shape)],
                      iattr=[hq, hkv, _RULES[rule]], fattr=[scale], name=ctx.name)
