"""Graph passes over a Program's op list: dead-op elimination and fusion.

Fusions rewrite runtime ops (the fused op keeps the ONNX node names it came from, joined by
'+', so `nerve plan` shows what became what):
  * decomposed layernorm (ReduceMean, Sub, Pow 2 / Mul, ReduceMean, Add eps, Sqrt, Div,
    Mul gamma, Add beta)                              -> layernorm
  * decomposed GELU  x·½·(1 + erf(x/√2))              -> gelu
  * linear + Add of a constant vector                 -> linear with bias
  * conv (no bias) + Add of a constant per channel      -> conv with bias (Paddle's new
    exporter writes every conv's bias as such an Add: PP-OCRv6 has ~80)
  * conv / linear / matmul + an activation            -> the op's fused activation
  * layernorm + linear                                -> layernorm_linear
  * linear(a; W1, b1) + linear(b; W2, b2)             -> linear([a | b]; [W1 | W2], b1 + b2)
    (an RNN cell's input and recurrent products: one pass, one op, no add)
  * matmul(Q, Kᵀ) [· or / c] → softmax → matmul(·, V)   -> attention (fuse_attention)
A fusion only fires when the intermediate values have no other reader and are not outputs.

Int8 weights (select_linear_w8): a linear whose weight was folded from int8 data (the
builder's ``int8_affine`` record, W = s·q + z with s, z per tensor or per output) and that
runs on few rows (the product of x's leading dims, at the dims' bounds, <= W8_MAX_ROWS)
becomes ``linear_w8`` over the int8 q, dequantised in registers: such a layer streams its
weight once per run, so a quarter of the bytes is most of the time. It runs after the bias
fusion and before the layernorm and sum-of-linears fusions, which then leave it alone (the
layernorm stays its own op); the activation fusion applies to it like to linear. Other
readers of the fp32 weight (a tied embedding's Gather) keep the fp32 constant.
``NERVE_W8=0`` in the environment at compile time turns the selection off (every such layer
stays an fp32 linear; a cached plan compiled otherwise is reused unless NERVE_PLAN_CACHE=0).

Int8 x int8 (select_linear_w8a8; precision "int8", or ``NERVE_W8A8=1`` at compile time at
any precision): the same int8-folded linears, on any row count, become ``linear_w8a8``, which
quantises each row of x to int8 on the fly (per row, symmetric) and multiplies in int32 (VNNI
on x86): ~3x the fp32 product's speed on the encoder shapes, and on one row (a decode step)
a single sequential pass over the packed weight, ~1.5x linear_w8's streaming rate; the cost
is the activations' quantisation error (docs/ARCHITECTURE.md, "INT8 x INT8 linear (w8a8)").
It runs before select_linear_w8, which takes what it leaves (layers kept fp32, widths past
W8A8_MAX_K). Its weight is the packed blob the C op ``pack_w8a8`` writes, computed here once
per weight. It runs before the layernorm fusion, so a layernorm in front of such a layer
stays its own op.

Weight panels (select_conv_panels, select_linear_panels; last, after every fusion): fp32
convs and linears on many rows get their weight packed once as panels of 64 outputs
(kernels.h), which their kernels stream in place (conv_packed, linear_panels,
layernorm_linear_panels). NERVE_CONV_PANELS=0 at compile time turns both off.

fp16 weights (select_linear_f16, precision "fp16"): every linear with a static fp32 weight
becomes ``linear_f16`` over an IEEE half copy of it, widened in registers (half the bytes;
details in its docstring). It runs after the sum-of-linears fusion (an RNN cell's fused
product gets fp16 weights too) and before the layernorm fusion, which then leaves it alone.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Dict, List, Optional, Set, Tuple

import numpy as np

from . import symbolic as S
from .builder import int8_affine
from .graph import CompileError, Op, Program, Value
from .memplan import bytes_at_bounds

CONTROL = {"if", "jump", "label", "set_dim"}  # set_dim: a size the data decides (onnx_ops.data_extent)

# unary code (op_elementwise.c) -> fused activation code (plan_ops.h nrv_plan_act)
# unary code x·sigmoid(x) (op_elementwise.c U_SILU): made here, never an ONNX op of its own
U_SILU = 42
_ACT_OF_UNARY = {10: 1, 11: 2, 9: 3, 8: 4, 12: 5, 13: 6, 15: 7, 25: 8, U_SILU: 9}
# where each fusable producer keeps its activation: (iattr index of act, fattr index of p0)
_ACT_SLOT = {"conv": (2, 0), "conv_packed": (2, 0), "conv_transpose": (2, 0), "conv_w8a8": (0, 0),
             "linear": (0, 0), "linear_panels": (0, 0), "layernorm_linear_panels": (0, 0), "linear_w8": (0, 0),
             "linear_w8a8": (0, 0),
             "linear_w4a32": (0, 0), "linear_w4a8": (0, 0), "linear_f16": (0, 0), "matmul": (0, 0),
             "layernorm_linear": (0, 1)}

# The most rows (product of x's leading dims, at the bounds) a linear with an int8-folded
# weight may run on to become linear_w8: the decode step of a model. Measured against the
# fp32 linear (linear_w8_impl.h): 1 row 3-5x faster with the weight streamed from memory;
# 8-16 rows about even (0.75-0.85x with the weight in cache, 1.0-1.2x from memory); more
# rows, the fp32 kernels' blocking over rows wins.
W8_MAX_ROWS = 16


def eliminate_dead_ops(prog: Program) -> None:
    needed: Set[int] = {v.root().uid for v in prog.outputs}
    needed |= {v.uid for v in prog.outputs}
    keep: List[Op] = []
    for op in reversed(prog.ops):
        live = op.type in CONTROL or any(v.uid in needed or v.root().uid in needed for v in op.outputs)
        if not live:
            continue
        keep.append(op)
        for v in op.inputs:
            while v is not None:
                needed.add(v.uid)
                v = v.alias_of
    keep.reverse()
    prog.ops[:] = keep


# op codes: binary (onnx_ops._BINARY), unary (onnx_ops._UNARY; round is half to even)
_ADD, _SUB, _MUL, _DIV, _EQUAL = 0, 1, 2, 3, 9
_NOT, _ROUND = 19, 23


class _Uses:
    """Who reads each value (through aliases), and which values are graph outputs."""

    def __init__(self, prog: Program):
        self.readers: Dict[int, List[Op]] = {}
        self.aliased: Set[int] = set()  # values some alias points at
        for op in prog.ops:
            for v in op.inputs:
                if v is not None:
                    self.readers.setdefault(v.uid, []).append(op)
                    w = v
                    while w.alias_of is not None:
                        self.aliased.add(w.alias_of.uid)
                        self.readers.setdefault(w.alias_of.uid, []).append(op)
                        w = w.alias_of
        self.outputs = {v.uid for v in prog.outputs} | {v.root().uid for v in prog.outputs}

    def only_reader(self, v: Value) -> Optional[Op]:
        """The single op reading v, if v has exactly one reader, is no output and no alias base."""
        if v.uid in self.outputs or v.uid in self.aliased or v.alias_of is not None:
            return None
        r = self.readers.get(v.uid, [])
        return r[0] if len(r) == 1 else None


def _scalar_const(v: Optional[Value]) -> Optional[float]:
    if v is None or v.const is None or v.const.size != 1:
        return None
    return float(v.const.reshape(-1)[0])


def _replace_output(op: Op, new_out: Value) -> None:
    op.outputs[0] = new_out
    new_out.producer = op


def _other_input(op: Op, v: Value) -> Optional[Value]:
    """The operand of a binary op besides v (v itself when the op reads it twice)."""
    return op.inputs[0] if op.inputs[1] is v else op.inputs[1]


def _channel_bias(conv: Op, c: np.ndarray) -> Optional[np.ndarray]:
    """c as the [M] bias of conv's output [N, M, *spatial] when c is constant along every axis
    but the channel one (shapes [M, 1, ...] or [1, M, 1, ...], right-aligned), else None."""
    out = conv.outputs[0]
    m = conv.inputs[1].shape[0]
    if c.dtype != np.float32 or not S.is_static(m) or c.ndim > out.rank or c.size != int(m):
        return None
    shape = (1,) * (out.rank - c.ndim) + tuple(c.shape)
    if shape[1] != int(m) or any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    return c.reshape(-1)


def _feature_bias(linear: Op, c: np.ndarray) -> Optional[np.ndarray]:
    """c as the [N] bias of a linear's output [..., N]: a vector along the last axis."""
    n = int(linear.inputs[1].shape[0])
    if c.size != n or c.shape[-1:] != (n,):
        return None
    return c.reshape(-1).astype(np.float32)


# op type -> (iattr index of its fused activation, the Add's constant as its bias or None)
_BIAS_OF_ADD = {"linear": (0, _feature_bias), "conv": (2, _channel_bias)}


def fuse_bias(prog: Program) -> bool:
    """A linear or conv without bias (nor activation) whose only reader Adds a constant along
    its output features (a linear's last axis, a conv's channels) takes that constant as its
    bias; the activation after the Add can then fuse too (fuse_activation)."""
    uses = _Uses(prog)
    changed = False
    for op in list(prog.ops):
        if op.type not in _BIAS_OF_ADD or len(op.inputs) > 3 or (len(op.inputs) == 3 and op.inputs[2] is not None):
            continue
        act_at, as_bias = _BIAS_OF_ADD[op.type]
        if op.iattr[act_at] != 0:
            continue
        add = uses.only_reader(op.outputs[0])
        if add is None or add.type != "binary" or add.iattr[0] != _ADD or len(add.inputs) != 2:
            continue
        other = _other_input(add, op.outputs[0])
        if other is None or other.const is None or list(add.outputs[0].shape) != list(op.outputs[0].shape):
            continue
        bias = as_bias(op, other.const)
        if bias is None:
            continue
        op.inputs[2:] = [Value(other.name + ".bias", np.float32, (bias.size,), const=bias)]
        op.name = op.name + "+" + add.name
        _replace_output(op, add.outputs[0])
        prog.ops.remove(add)
        changed = True
    return changed


def fuse_activation(prog: Program) -> bool:
    uses = _Uses(prog)
    changed = False
    for op in list(prog.ops):
        if op.type not in _ACT_SLOT:
            continue
        ai, fi = _ACT_SLOT[op.type]
        if op.iattr[ai] != 0:
            continue
        act = uses.only_reader(op.outputs[0])
        if act is None or act.type != "unary" or act.iattr[0] not in _ACT_OF_UNARY:
            continue
        op.iattr[ai] = _ACT_OF_UNARY[act.iattr[0]]
        op.fattr[fi], op.fattr[fi + 1] = act.fattr[0], act.fattr[1]
        op.name = op.name + "+" + act.name
        _replace_output(op, act.outputs[0])
        prog.ops.remove(act)
        changed = True
    return changed


def _chain_name(chain: List[Op]) -> str:
    return "+".join(o.name for o in chain if o.name)


def _replace_chain(prog: Program, chain: List[Op], fused: Op) -> None:
    """Puts fused where the chain's last op was (its output is the chain's) and drops the rest."""
    fused.outputs[0].producer = fused
    prog.ops[prog.ops.index(chain[-1])] = fused
    for o in chain[:-1]:
        prog.ops.remove(o)


def _chain_to_unary(prog: Program, chain: List[Op], x: Value, code: int) -> bool:
    """Replaces a chain computing an elementwise function of float32 x (same shape) by the one
    unary op `code`; False (nothing changed) when the chain's output is not x's shape."""
    out = chain[-1].outputs[0]
    if list(out.shape) != list(x.shape) or out.dtype != np.float32:
        return False
    _replace_chain(prog, chain, Op("unary", [x], [out], iattr=[code], fattr=[0, 0], name=_chain_name(chain),
                                   inplace=True))
    return True


def _is(op: Optional[Op], type_: str, code: Optional[int] = None) -> bool:
    return op is not None and op.type == type_ and (code is None or (op.iattr and op.iattr[0] == code))


def _last_axis_mean(op: Optional[Op]) -> bool:
    if not _is(op, "reduce", 1) or op.iattr[1] != 1:
        return False
    x = op.inputs[0]
    return op.iattr[2] == x.rank - 1 and op.outputs[0].rank == x.rank


def fuse_conv_sum(prog: Program) -> bool:
    """A residual Add of an fp32 conv's output (the conv without a fused activation and the
    Add its only reader) and another tensor of the same shape becomes the conv's in[3] sum:
    y = act(conv + bias + sum), added in the conv's epilogue while its outputs are in cache,
    with the Add's bits (op_conv.c). fuse_activation then takes an activation after the Add
    (ResNet's Add + Relu). The conv moves to the Add's place when the other operand is
    computed after it."""
    uses = _Uses(prog)
    changed = False
    for op in list(prog.ops):
        if op.type != "conv" or op.iattr[2] != 0 or len(op.inputs) > 3 or op.outputs[0].dtype != np.float32:
            continue
        out = op.outputs[0]
        add = uses.only_reader(out)
        if add is None or add.type != "binary" or add.iattr[0] != _ADD or len(add.inputs) != 2:
            continue
        other = _other_input(add, out)
        if other is None or other is out or other.dtype != np.float32 or \
                list(other.shape) != list(out.shape) or list(add.outputs[0].shape) != list(out.shape):
            continue
        at = {id(o): i for i, o in enumerate(prog.ops)}
        if id(add) not in at:
            continue  # the Add of two convs' outputs went into the other conv
        i_conv, i_add = at[id(op)], at[id(add)]
        if any(o.type in CONTROL for o in prog.ops[i_conv:i_add]):
            continue  # not across a branch
        while len(op.inputs) < 3:
            op.inputs.append(None)
        op.inputs.append(other)
        op.name = op.name + "+" + add.name
        _replace_output(op, add.outputs[0])
        if at.get(id(other.producer), -1) > i_conv:  # computed after the conv: the conv goes to the Add
            prog.ops[i_add] = op
            del prog.ops[i_conv]
        else:
            del prog.ops[i_add]
        changed = True
    return changed


def fuse_layernorm(prog: Program) -> bool:
    """Matches the decomposition torch.onnx.export writes for LayerNorm (over the last axis)."""
    uses = _Uses(prog)
    changed = False
    for mean in list(prog.ops):
        if mean not in prog.ops or not _last_axis_mean(mean):
            continue
        x = mean.inputs[0]
        sub = uses.only_reader(mean.outputs[0])
        if not _is(sub, "binary", 1) or sub.inputs[0] is not x or sub.inputs[1] is not mean.outputs[0]:
            continue
        d = sub.outputs[0]
        readers = uses.readers.get(d.uid, [])
        if d.uid in uses.outputs or len(readers) not in (2, 3):
            continue
        sq = next((r for r in readers if _is(r, "unary", 24) or (_is(r, "binary", 2) and r.inputs[0] is d
                                                                  and r.inputs[1] is d)), None)
        div = next((r for r in readers if _is(r, "binary", 3) and r.inputs[0] is d), None)
        if sq is None or div is None or len(set(map(id, readers))) != 2:
            continue
        var = uses.only_reader(sq.outputs[0])
        if not _last_axis_mean(var):
            continue
        add_eps = uses.only_reader(var.outputs[0])
        if not _is(add_eps, "binary", 0):
            continue
        eps = _scalar_const(add_eps.inputs[1])
        sqrt = uses.only_reader(add_eps.outputs[0])
        if eps is None or not _is(sqrt, "unary", 4) or div.inputs[1] is not sqrt.outputs[0]:
            continue
        if uses.only_reader(sqrt.outputs[0]) is not div:
            continue
        chain = [mean, sub, sq, var, add_eps, sqrt, div]
        out = div.outputs[0]
        dim = x.shape[-1]
        gamma = beta = None
        mul = uses.only_reader(out)
        if _is(mul, "binary", 2):
            g = _other_input(mul, out)
            if g is not None and g.const is not None and g.const.size == int(dim) and S.is_static(dim):
                gamma = g.const.reshape(-1)
                chain.append(mul)
                out = mul.outputs[0]
                add = uses.only_reader(out)
                if _is(add, "binary", 0):
                    bb = _other_input(add, out)
                    if bb is not None and bb.const is not None and bb.const.size == int(dim):
                        beta = bb.const.reshape(-1)
                        chain.append(add)
                        out = add.outputs[0]
        if list(out.shape) != list(x.shape) or not S.is_static(dim):
            continue
        if gamma is None:
            gamma = np.ones(int(dim), np.float32)
        g_v = Value(mean.name + ".gamma", np.float32, (int(dim),), const=gamma.astype(np.float32))
        b_v = Value(mean.name + ".beta", np.float32, (int(dim),), const=beta.astype(np.float32)) \
            if beta is not None else None
        _replace_chain(prog, chain, Op("layernorm", [x, g_v, b_v], [out], iattr=[x.rank - 1], fattr=[eps],
                                       name=_chain_name(chain), inplace=True))
        uses = _Uses(prog)
        changed = True
    return changed


def fuse_gelu(prog: Program) -> bool:
    """x · ½ · (1 + erf(x / √2)) in the orders exporters write it -> gelu: the product taken as
    (x · (1 + erf)) · ½, (x · ½) · (1 + erf) or x · (½ · (1 + erf)) (torch's dynamo exporter:
    Pipecat's smart-turn), each Add and Mul with its constant on either side."""
    uses = _Uses(prog)
    changed = False
    for erf in list(prog.ops):
        if erf not in prog.ops or not _is(erf, "unary", 7):
            continue
        scale = erf.inputs[0].producer
        if scale is None or scale not in prog.ops or uses.only_reader(scale.outputs[0]) is not erf:
            continue
        c = _scalar_const(scale.inputs[1])
        if c is None or not ((_is(scale, "binary", 3) and abs(c - math.sqrt(2)) < 1e-3)
                             or (_is(scale, "binary", 2) and abs(c - 1 / math.sqrt(2)) < 1e-4)):
            continue
        x = scale.inputs[0]
        add1 = uses.only_reader(erf.outputs[0])
        if not _is(add1, "binary", 0) or _scalar_const(_other_input(add1, erf.outputs[0])) != 1.0:
            continue
        mul_x = uses.only_reader(add1.outputs[0])
        if not _is(mul_x, "binary", 2):
            continue
        other = _other_input(mul_x, add1.outputs[0])
        chain = [scale, erf, add1, mul_x]
        if other is x:  # x * (1 + erf) then * 0.5
            half = uses.only_reader(mul_x.outputs[0])
            if not _is(half, "binary", 2) or _scalar_const(_other_input(half, mul_x.outputs[0])) != 0.5:
                continue
            chain.append(half)
        elif _scalar_const(other) == 0.5:  # (0.5 * (1 + erf)) then * x
            times_x = uses.only_reader(mul_x.outputs[0])
            if not _is(times_x, "binary", 2) or _other_input(times_x, mul_x.outputs[0]) is not x:
                continue
            chain.append(times_x)
        else:  # (x * 0.5) * (1 + erf)
            hp = other.producer if other is not None else None
            if not (_is(hp, "binary", 2) and any(v is x for v in hp.inputs)
                    and _scalar_const(_other_input(hp, x)) == 0.5 and uses.only_reader(other) is mul_x):
                continue
            chain.insert(0, hp)
        if _chain_to_unary(prog, chain, x, 11):
            uses = _Uses(prog)
            changed = True
    return changed


def fuse_hard_swish(prog: Program) -> bool:
    """x · HardSigmoid(x; 1/6, 1/2) and x · Clip(x + 3, 0, 6) / 6 (or · 1/6), the ways Paddle and
    older exporters write MobileNetV3's hard-swish -> one unary hard_swish, which
    fuse_activation then folds into the conv before it. Same function; the rounding of the
    fused form (x/6 + 1/2, clamped, times x) differs from x·clip(x+3)/6 by an ulp or so."""
    uses = _Uses(prog)
    changed = False
    for gate in list(prog.ops):
        if gate not in prog.ops or not gate.inputs or gate.inputs[0] is None:
            continue
        chain: List[Op] = []
        if _is(gate, "unary", 14) and abs(gate.fattr[0] - 1 / 6) < 1e-6 and abs(gate.fattr[1] - 0.5) < 1e-7:
            x, chain = gate.inputs[0], [gate]
        elif _is(gate, "unary", 15) and gate.fattr[0] == 0.0 and gate.fattr[1] == 6.0:
            add = gate.inputs[0].producer
            if not (_is(add, "binary", 0) and add in prog.ops and _scalar_const(add.inputs[1]) == 3.0
                    and uses.only_reader(add.outputs[0]) is gate):
                continue
            x, chain = add.inputs[0], [add, gate]
        else:
            continue
        mul = uses.only_reader(gate.outputs[0])
        if not _is(mul, "binary", 2) or {id(v) for v in mul.inputs} != {id(x), id(gate.outputs[0])}:
            continue
        chain.append(mul)
        if len(chain) == 3:  # the Clip form: then / 6 or * (1/6)
            scale = uses.only_reader(mul.outputs[0])
            c = _scalar_const(scale.inputs[1]) if scale is not None and scale.inputs[0] is mul.outputs[0] else None
            if c is None or not ((_is(scale, "binary", 3) and c == 6.0)
                                 or (_is(scale, "binary", 2) and abs(c - 1 / 6) < 1e-7)):
                continue
            chain.append(scale)
        if _chain_to_unary(prog, chain, x, 25):
            uses = _Uses(prog)
            changed = True
    return changed


def _one_f32(v: Optional[Value]) -> bool:
    """A float32 value with exactly one element (a per-tensor scale or zero point)."""
    return v is not None and v.dtype == np.float32 and all(S.is_static(d) and int(d) == 1 for d in v.shape)


def fuse_fake_quant(prog: Program) -> bool:
    """x / s → round → [+ zq] → Cast to uint8/int8 → Cast to float → [− zd] [· sd], per-tensor
    scalars throughout -> one ``fake_quant`` op (op_elementwise.c), the same float steps in
    one pass. It is a QuantizeLinear then DequantizeLinear of activations (QDQ models), or a
    DynamicQuantizeLinear into ConvInteger's dequantised input: seven passes over the tensor
    each (ddddocr's int8 OCR: 130 us a conv around a 34 us conv). A chain whose integer Cast
    is read by anything but a float Cast ends there: ``fake_quant`` with the integer output
    (a QuantizeLinear alone, as DynamicQuantizeLinear feeds MatMulInteger)."""
    uses = _Uses(prog)
    changed = False
    for div in list(prog.ops):
        if not _is(div, "binary", _DIV) or not _one_f32(div.inputs[1]) or div.inputs[0] is None \
                or div.inputs[0].dtype != np.float32 or list(div.outputs[0].shape) != list(div.inputs[0].shape):
            continue
        chain, scalars = [div], [div.inputs[1], None, None, None]
        node = uses.only_reader(div.outputs[0])
        if not _is(node, "unary", _ROUND) or node.inputs[0] is not div.outputs[0]:
            continue
        chain.append(node)
        node = uses.only_reader(node.outputs[0])
        if _is(node, "binary", _ADD) and node.inputs[0] is chain[-1].outputs[0] and _one_f32(node.inputs[1]):
            scalars[1] = node.inputs[1]
            chain.append(node)
            node = uses.only_reader(node.outputs[0])
        if not _is(node, "cast") or node.outputs[0].dtype not in (np.uint8, np.int8):
            continue
        lo, hi = (0, 255) if node.outputs[0].dtype == np.uint8 else (-128, 127)
        chain.append(node)
        nxt = uses.only_reader(node.outputs[0])
        if _is(nxt, "cast") and nxt.outputs[0].dtype == np.float32:
            node = nxt
            chain.append(node)
        if node.outputs[0].dtype == np.float32:
            scalars[2:4], tail, node = _dequantize_tail(uses, node)
            chain += tail
        ins = [div.inputs[0]] + scalars
        while ins[-1] is None:
            ins.pop()
        fused = Op("fake_quant", ins, [node.outputs[0]], iattr=[lo, hi], name=div.name)
        _swap_op(prog, prog.ops.index(node), fused)  # where the last step ran: every scalar exists there
        for o in chain[:-1]:
            prog.ops.remove(o)
        uses = _Uses(prog)
        changed = True
    return changed


def _dequantize_tail(uses: "_Uses", node: Op, constant: bool = False):
    """The float steps a DequantizeLinear writes after its Cast, node: a Sub of a per-tensor
    scalar, then a Mul by one, each optional, each the only reader of the step before (and
    with a constant scalar if `constant`). ([zd, sd] Values or None, those ops, the last op)."""
    found, ops = [None, None], []
    for slot, code in ((0, _SUB), (1, _MUL)):
        nxt = uses.only_reader(node.outputs[0])
        if _is(nxt, "binary", code) and nxt.inputs[0] is node.outputs[0] and _one_f32(nxt.inputs[1]) \
                and (not constant or nxt.inputs[1].const is not None) \
                and list(nxt.outputs[0].shape) == list(node.outputs[0].shape):
            found[slot] = nxt.inputs[1]
            ops.append(nxt)
            node = nxt
    return found, ops, node


def fuse_dequantize(prog: Program) -> bool:
    """Cast of a uint8/int8 tensor to float → [− zd] → [· sd], per-tensor constant scalars
    (a DequantizeLinear of activations; the depthwise QLinearConv's x − x_zp) -> one ``cast``
    with fattr [zd, sd] (op_shape.c): the same float steps, y = ((float)x − zd)·sd, in one
    pass instead of three (int8 MobileNetV2: 0.8 ms of its depthwise route). Runs after
    fuse_fake_quant, whose chains end in the same Cast."""
    uses = _Uses(prog)
    changed = False
    for cast in list(prog.ops):
        if not _is(cast, "cast") or cast.fattr or len(cast.inputs) != 1 or cast.inputs[0] is None \
                or cast.inputs[0].dtype not in (np.uint8, np.int8) or cast.outputs[0].dtype != np.float32:
            continue
        (zd, sd), tail, node = _dequantize_tail(uses, cast, constant=True)
        if not tail:
            continue
        params = [float(np.asarray(v.const, np.float32).reshape(-1)[0]) if v is not None else default
                  for v, default in ((zd, 0.0), (sd, 1.0))]
        fused = Op("cast", [cast.inputs[0]], [node.outputs[0]], fattr=params, name=cast.name)
        _swap_op(prog, prog.ops.index(node), fused)
        for o in [cast] + tail[:-1]:
            prog.ops.remove(o)
        uses = _Uses(prog)
        changed = True
    return changed


def requantize_concat(prog: Program) -> bool:
    """Codes dequantized (cast with fattr [zd, sd]), concatenated, quantized again (fake_quant
    to uint8/int8): a QLinearConcat, as onnxruntime's quantizer writes one per SqueezeNet fire
    module. -> each part requantized on its own, codes in and codes out (fake_quant with
    fattr [zd, sd], op_elementwise.c), then a Concat of codes. The same float steps per
    element, so the same bytes, while the float concat and its two passes (4 bytes an
    element each way) are never made: SqueezeNet int8 spent 0.9 of its 4.2 ms there."""
    uses = _Uses(prog)
    changed = False
    for fq in list(prog.ops):
        if not _is(fq, "fake_quant") or fq.fattr or len(fq.inputs) > 3 \
                or fq.outputs[0].dtype not in (np.uint8, np.int8) or fq.inputs[0] is None:
            continue
        cat = fq.inputs[0].producer
        if not _is(cat, "concat") or uses.only_reader(cat.outputs[0]) is not fq:
            continue
        casts = [v.producer if v is not None else None for v in cat.inputs]
        if not casts or any(not _is(c, "cast") or len(c.fattr) != 2 or c.inputs[0] is None
                            or c.inputs[0].dtype not in (np.uint8, np.int8)
                            or uses.only_reader(c.outputs[0]) is not cat for c in casts):
            continue
        parts = []
        for c in casts:
            part = Value(c.name + ".requantized", fq.outputs[0].dtype, c.outputs[0].shape)
            _swap_op(prog, prog.ops.index(c), Op("fake_quant", [c.inputs[0]] + list(fq.inputs[1:]), [part],
                                                  iattr=list(fq.iattr), fattr=list(c.fattr), name=fq.name))
            parts.append(part)
        joined = Op("concat", parts, [fq.outputs[0]], iattr=list(cat.iattr), name=cat.name)
        _swap_op(prog, prog.ops.index(fq), joined)
        prog.ops.remove(cat)
        uses = _Uses(prog)
        changed = True
    return changed


def fold_pad_into_conv(prog: Program) -> bool:
    """Pad with zeros on the spatial axes only -> the conv's own padding: the padded copy of x
    is never made. TensorFlow-style exports pad explicitly before every strided conv (Hugging
    Face MobileNetV2: a copy of each expanded activation, 15% of its run). Only a constant
    +0.0 pad read by nothing else, and a conv that has its scratch already (not the
    pointwise path, which has no padding of its own)."""
    uses = _Uses(prog)
    changed = False
    for conv in list(prog.ops):
        x = conv.inputs[0] if conv.type == "conv" and conv.inputs else None
        pad = x.producer if x is not None else None
        if not _is(pad, "pad") or pad.iattr[0] != 0 or pad.fattr[0] != 0.0 or math.copysign(1.0, pad.fattr[0]) < 0 \
                or uses.only_reader(x) is not conv or conv.scratch is None or x.alias_of is not None:
            continue
        sr, rank = int(conv.iattr[0]), int(pad.iattr[1])
        if rank != sr + 2 or len(pad.iattr) != 2 + 2 * rank:  # pads evaluated per run (dattr) stay an op
            continue
        pb, pe = [int(v) for v in pad.iattr[2:2 + rank]], [int(v) for v in pad.iattr[2 + rank:2 + 2 * rank]]
        if any(pb[:2]) or any(pe[:2]) or min(pb + pe) < 0:
            continue
        at = 3 + 2 * sr  # conv iattr: [sr, group, act, strides[sr], dilations[sr], pads_begin[sr], pads_end[sr]]
        for i in range(sr):
            conv.iattr[at + i] += pb[2 + i]
            conv.iattr[at + sr + i] += pe[2 + i]
        conv.inputs[0] = pad.inputs[0]
        prog.ops.remove(pad)
        uses = _Uses(prog)
        changed = True
    return changed


def fuse_silu(prog: Program) -> bool:
    """x · Sigmoid(x) (SiLU / swish, how YOLOv5/v8/X and EfficientNet exports write it) -> one
    unary silu, which fuse_activation then folds into the conv before it: one pass over the
    tensor instead of two ops and their intermediate. The same sigmoid kernel and product:
    bit for bit the unfused result."""
    uses = _Uses(prog)
    changed = False
    for sig in list(prog.ops):
        if sig not in prog.ops or not _is(sig, "unary", 9):
            continue
        x = sig.inputs[0]
        mul = uses.only_reader(sig.outputs[0])
        if not _is(mul, "binary", 2) or {id(v) for v in mul.inputs} != {id(x), id(sig.outputs[0])}:
            continue
        if sig.outputs[0].uid in uses.outputs:
            continue
        if _chain_to_unary(prog, [sig, mul], x, U_SILU):
            uses = _Uses(prog)
            changed = True
    return changed


def fuse_layernorm_linear(prog: Program) -> bool:
    uses = _Uses(prog)
    changed = False
    for ln in list(prog.ops):
        if ln.type != "layernorm" or ln.iattr[0] != ln.inputs[0].rank - 1 or ln.inputs[1].rank != 1:
            continue
        lin = uses.only_reader(ln.outputs[0])
        if lin is None or lin.type != "linear" or lin.inputs[0] is not ln.outputs[0]:
            continue
        fused = Op("layernorm_linear", [ln.inputs[0], ln.inputs[1], ln.inputs[2], lin.inputs[1], lin.inputs[2]],
                   [lin.outputs[0]], iattr=[lin.iattr[0]], fattr=[ln.fattr[0], lin.fattr[0], lin.fattr[1]],
                   name=ln.name + "+" + lin.name)
        lin.outputs[0].producer = fused
        prog.ops[prog.ops.index(lin)] = fused
        prog.ops.remove(ln)
        changed = True
    return changed


def fuse_sum_of_linears(prog: Program) -> bool:
    uses = _Uses(prog)
    changed = False
    for add in list(prog.ops):
        if not _is(add, "binary", 0) or add.inputs[0] is None or add.inputs[1] is None:
            continue
        l1, l2 = add.inputs[0].producer, add.inputs[1].producer
        if l1 is None or l2 is None or l1 is l2 or l1.type != "linear" or l2.type != "linear":
            continue
        if l1 not in prog.ops or l2 not in prog.ops or l1.iattr[0] or l2.iattr[0]:
            continue
        if uses.only_reader(l1.outputs[0]) is not add or uses.only_reader(l2.outputs[0]) is not add:
            continue
        x1, x2 = l1.inputs[0], l2.inputs[0]
        w1, w2 = l1.inputs[1].const, l2.inputs[1].const
        out = add.outputs[0]
        if w1 is None or w2 is None or w1.shape[0] != w2.shape[0] or x1.dtype != x2.dtype:
            continue
        if list(x1.shape[:-1]) != list(x2.shape[:-1]) or list(out.shape) != list(l1.outputs[0].shape) \
                or list(out.shape) != list(l2.outputs[0].shape):
            continue
        bias = None
        for lin in (l1, l2):
            if lin.inputs[2] is not None:
                b = lin.inputs[2].const.astype(np.float32)
                bias = b if bias is None else bias + b
        name = l1.name + "+" + l2.name + "+" + add.name
        bias_v = Value(name + ".bias", np.float32, bias.shape, const=bias) if bias is not None else None
        if x1 is x2:
            w = Value(name + ".weight", np.float32, w1.shape, const=(w1 + w2).astype(np.float32))
            x = x1
            new_ops = []
        else:
            k = S.dim_add(x1.shape[-1], x2.shape[-1])
            x = Value(name + ".concat", x1.dtype, list(x1.shape[:-1]) + [k])
            cat = Op("concat", [x1, x2], [x], iattr=[x1.rank - 1], name=name)
            x.producer = cat
            w = Value(name + ".weight", np.float32, (w1.shape[0], w1.shape[1] + w2.shape[1]),
                      const=np.ascontiguousarray(np.concatenate([w1, w2], axis=1), dtype=np.float32))
            new_ops = [cat]
        lin = Op("linear", [x, w, bias_v], [out], iattr=[0], fattr=[0, 0], name=name)
        out.producer = lin
        # the fused product runs where the later of the two did: both inputs exist there
        at = max(prog.ops.index(l1), prog.ops.index(l2))
        prog.ops[at:at + 1] = new_ops + [lin]
        prog.ops.remove(add)
        for old in (l1, l2):
            if old in prog.ops:
                prog.ops.remove(old)
        uses = _Uses(prog)
        changed = True
    return changed


def _swaps_last_two(op: Optional[Op]) -> bool:
    if not _is(op, "transpose"):
        return False
    r = len(op.iattr)
    return r >= 2 and list(op.iattr) == list(range(r - 2)) + [r - 1, r - 2]


ATTN_ROWS, ATTN_SLOTS = 64, 8  # op_linalg.c: query rows per block, scratch slots (one per thread piece)


def _attention_slot_floats(t, d, dv):
    """Floats of one scratch slot of op attention (op_linalg.c attention_slot_floats): K's
    panels, Vᵀ's panels and a block's scores, each rounded up to 16 floats; t may be symbolic
    (the size at its bound is reserved)."""
    def panels(m, k):  # panels_floats for a symbolic m: its rows rounded up to 16, times k
        return S.dim_mul(S.dim_mul(S.dim_ceildiv(m, PANEL_ALIGN), PANEL_ALIGN), k)
    def up16(n):
        return S.dim_mul(S.dim_ceildiv(n, 16), 16)
    return S.dim_add(S.dim_add(up16(panels(t, d)), up16(panels(dv, t))), up16(S.dim_mul(ATTN_ROWS, t)))


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(S.is_static(x) and S.is_static(y) and int(x) == int(y) or x is y or x == y
                                    for x, y in zip(a, b))


_AGREE_UP_TO = 4096  # a one-symbol dim pair is compared at every size up to this bound


def _dims_agree(a, b, bounds: Dict[str, int], memo: Dict[tuple, bool]) -> bool:
    """a == b for every size a run can bind: equal as expressions, or (one symbol, bound <=
    _AGREE_UP_TO) equal at each of its values. torch's exports compute one length two ways (a
    mask's from the samples, the scores' through the conv stack) that the canonical form cannot
    identify."""
    if a is b or a == b:
        return True
    names = sorted(S.symbols_of(a) | S.symbols_of(b))
    if len(names) != 1 or int(bounds.get(names[0], _AGREE_UP_TO + 1)) > _AGREE_UP_TO:
        return False
    key = (a, b)
    if key not in memo:
        def at(d, x):
            try:
                return S.evaluate(d, {names[0]: x})
            except ZeroDivisionError:
                return None
        memo[key] = all(at(a, x) == at(b, x) for x in range(int(bounds[names[0]]) + 1))
    return memo[key]


def _nan_guard(uses: "_Uses", p: Value) -> Optional[Tuple[List[Op], float]]:
    """torch's guard on a softmax's output p, Where(IsNaN(p), fill, p) (IsNaN imported as
    Not(Equal(p, p))): its ops (Equal, Not, Where) and the fill value, or None."""
    if p.uid in uses.outputs or p.uid in uses.aliased:
        return None
    readers = list({id(o): o for o in uses.readers.get(p.uid, [])}.values())
    eq = next((o for o in readers if _is(o, "binary", _EQUAL)), None)
    where = next((o for o in readers if o.type == "where"), None)
    if len(readers) != 2 or eq is None or where is None or eq.inputs[0] is not p or eq.inputs[1] is not p:
        return None
    not_ = uses.only_reader(eq.outputs[0])
    fill = _scalar_const(where.inputs[1])
    if not _is(not_, "unary", _NOT) or uses.only_reader(not_.outputs[0]) is not where \
            or where.inputs[0] is not not_.outputs[0] or where.inputs[2] is not p or fill is None \
            or where.inputs[1].dtype != np.float32 or list(where.outputs[0].shape) != list(p.shape):
        return None
    return [eq, not_, where], fill


def fuse_attention(prog: Program) -> bool:
    """matmul(Q, Kᵀ) [→ Mul or Div by a constant] [→ Add of a bias] → Softmax over the last
    axis [→ Where(IsNaN(p), fill, p)] → matmul(·, V) -> one ``attention`` op, which runs it per
    block of 64 query rows with the block's scores in a scratch slot (op_linalg.c): the
    [..., M, T] score tensor never goes through memory. The bias is an attention mask or a
    position bias broadcast to the scores (torch's exports add one to every masked model);
    the guard is the NaN-to-zero step torch's dynamo exporter writes after the softmax. Q, K
    and V of one rank with the same batch dims, intermediates read by nothing else, no fused
    activation, K and V not a cache carried as session state (kv_append reads those in
    place). Each step keeps the unfused ops' arithmetic (the same depth blocks, the scale and
    the bias applied to the stored scores in that order, the same softmax kernel): the
    outputs are bit-identical."""
    uses = _Uses(prog)
    # a key/value cache carried as a session state is left to append_kv_caches (kv_append.py),
    # which needs the plain matmuls reading it in place
    carried = {prog.outputs[pair[1]].root().uid for pair in prog.states}
    changed = False
    agree_memo: Dict[tuple, bool] = {}
    for mm1 in list(prog.ops):
        if mm1.type != "matmul" or mm1.iattr[0] != 0 or (len(mm1.iattr) > 2 and mm1.iattr[2]):
            continue
        trans_k = mm1.iattr[1] if len(mm1.iattr) > 1 else 0
        node = uses.only_reader(mm1.outputs[0])
        scale, c, divide = None, 1.0, 0
        if _is(node, "binary", _MUL) or _is(node, "binary", _DIV):
            c = _scalar_const(node.inputs[1])
            if node.inputs[0] is not mm1.outputs[0] or c is None or not math.isfinite(c) or (node.iattr[0] == _DIV and c == 0) \
                    or list(node.outputs[0].shape) != list(mm1.outputs[0].shape):
                continue
            scale, divide = node, int(node.iattr[0] == _DIV)
            node = uses.only_reader(node.outputs[0])
        scores = (scale or mm1).outputs[0]
        add, bias = None, None
        if _is(node, "binary", _ADD):  # scores + bias or bias + scores, the bias broadcast to the scores
            add = node
            bias = add.inputs[1] if add.inputs[0] is scores else add.inputs[0] if add.inputs[1] is scores else None
            if bias is None or bias is scores or bias.dtype != np.float32 or bias.rank > scores.rank \
                    or not all(_dims_agree(x, y, prog.symbols, agree_memo)
                               for x, y in zip(add.outputs[0].shape, scores.shape)):
                continue
            scores = add.outputs[0]
            node = uses.only_reader(scores)
        sm = node
        if not _is(sm, "softmax") or sm.inputs[0] is not scores or sm.iattr[0] != scores.rank - 1:
            continue
        guard = _nan_guard(uses, sm.outputs[0])
        guard_ops, fill = guard if guard else ([], 0.0)
        probs = guard_ops[-1].outputs[0] if guard_ops else sm.outputs[0]
        mm2 = uses.only_reader(probs)
        if mm2 is None or mm2.type != "matmul" or mm2.inputs[0] is not probs or mm2.iattr[0] != 0 \
                or any(mm2.iattr[1:]):
            continue
        q, k, v, y = mm1.inputs[0], mm1.inputs[1], mm2.inputs[1], mm2.outputs[0]
        if q is None or k is None or v is None or not (q.rank == k.rank == v.rank == y.rank >= 2) \
                or k.root().uid in carried or v.root().uid in carried:
            continue
        batch = list(q.shape[:-2])
        if not all(_same_dims(batch, list(t.shape[:-2])) for t in (k, v, y)):
            continue
        t_dim = k.shape[-2] if trans_k else k.shape[-1]
        scratch = Value(mm1.name + ".attention.scratch", np.uint8,
                        (S.dim_mul(ATTN_SLOTS * 4, _attention_slot_floats(t_dim, q.shape[-1], v.shape[-1])),))
        steps = [o for o in (mm1, scale, add, sm) if o is not None] + guard_ops
        fused = Op("attention", [q, k, v] + ([bias] if bias is not None else []), [y],
                   iattr=[trans_k, divide, int(bool(guard_ops))], fattr=[c, fill], scratch=scratch,
                   name="+".join(o.name for o in steps + [mm2]))
        _swap_op(prog, prog.ops.index(mm2), fused)
        for o in steps:
            prog.ops.remove(o)
        uses = _Uses(prog)
        changed = True
    return changed


def fold_transpose_into_matmul(prog: Program) -> bool:
    """matmul(A, transpose(X) of its last two axes) -> matmul(A, X) reading B transposed
    (trans_b): the transposed copy is never made. Attention's Kᵀ is the case: per decoding
    step it would copy every cached key. A scalar Mul between them (a score scale) moves to
    A instead: A·(c·Xᵀ) = (c·A)·Xᵀ, and A (the queries) is the small side of a decoder step,
    so X (the cache) is read where it lies."""
    uses = _Uses(prog)
    changed = False
    for op in list(prog.ops):
        if op.type != "matmul" or len(op.iattr) != 1 or op.inputs[1] is None or op.inputs[1].alias_of is not None:
            continue
        b = op.inputs[1]
        scale = b.producer if _is(b.producer, "binary", _MUL) and uses.only_reader(b) is op else None
        if scale is not None:
            t_out = next((v for v in scale.inputs if v is not None and v.const is None), None)
            c = next((v for v in scale.inputs if v is not t_out), None)
            if t_out is None or _scalar_const(c) is None or list(scale.outputs[0].shape) != list(t_out.shape):
                continue
        else:
            t_out = b
        t = t_out.producer
        if t_out.alias_of is not None or not _swaps_last_two(t) or uses.only_reader(t_out) is not (scale or op):
            continue
        a = op.inputs[0]
        if scale is not None:  # scale the queries instead
            if a is None or c.rank > a.rank:
                continue
            scaled = Value(a.name + ".scaled", np.float32, a.shape)
            moved = Op("binary", [a, c], [scaled], iattr=list(scale.iattr), fattr=list(scale.fattr), name=scale.name)
            scaled.producer = moved
            prog.ops.insert(prog.ops.index(op), moved)
            prog.ops.remove(scale)
            op.inputs[0] = scaled
        op.inputs[1] = t.inputs[0]
        op.iattr = [op.iattr[0], 1]
        op.name = op.name + "+" + t.name
        prog.ops.remove(t)
        changed = True
    return changed


def w8_enabled() -> bool:
    """Whether select_linear_w8 runs (environment NERVE_W8, default on; "0" turns it off)."""
    return os.environ.get("NERVE_W8", "1").strip() != "0"


def _swap_op(prog: Program, i: int, new: Op) -> None:
    """Puts new in place of prog.ops[i], which computed the same outputs."""
    for v in new.outputs:
        v.producer = new
    prog.ops[i] = new


def _per_output(a: np.ndarray, n: int) -> Optional[np.ndarray]:
    """s or z of a record over W [n, k] (or a conv weight [n, c, kw]) as a vector of 1 or n
    floats, None if it varies along k."""
    if a.ndim > 2 and all(d == 1 for d in a.shape[1:]):
        a = a.reshape(a.shape[0], 1)
    a2 = a.reshape((1,) * (2 - a.ndim) + a.shape)
    if a2.ndim != 2 or a2.shape[1] != 1 or a2.shape[0] not in (1, n):
        return None
    return np.ascontiguousarray(a2[:, 0], dtype=np.float32)


def select_linear_w8(prog: Program, max_rows: int = W8_MAX_ROWS, default_w8a32: bool = False,
                     layers: Optional[Dict[str, str]] = None) -> bool:
    """linear with an int8-folded weight on <= max_rows rows -> linear_w8 (module docstring);
    on any row count where the layer's scheme is "w8a32" (its entry in layers, else
    default_w8a32: the int8 weight is what was asked for, whatever the speed)."""
    made: Dict[int, Optional[tuple]] = {}  # weight uid -> (q, s, z) values, shared by its linears
    by_content: Dict[bytes, tuple] = {}
    changed = False
    for i, op in enumerate(prog.ops):
        found = _int8_linear(prog, op)
        if found is None:
            continue
        x, w, bias, aff, n, k, rows = found
        if rows > max_rows and not _takes(op, ("w8a32",), default_w8a32, layers):
            continue
        if w.uid not in made:
            q, s, z = aff
            made[w.uid] = (_int8_operands(w, q, s, z, n, k, by_content, packed=False)
                           if q.shape == (n, k) else None)
        if made[w.uid] is None:
            continue
        qv, sv, zv = made[w.uid]
        new = Op("linear_w8", [x, qv, sv, zv, bias], op.outputs, iattr=list(op.iattr), fattr=list(op.fattr),
                 name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


def select_gather_q8(prog: Program) -> bool:
    """Gather on axis 0 of a 2-D table folded from int8 with a per-row or per-tensor scale and
    offset (an embedding stored as int8, e.g. Moonshine's 32768 x 416 token table) ->
    gather_q8: the table stays int8 in the plan and each gathered value is the one the folded
    table held (fp32 q·s, then + z)."""
    changed = False
    by_content: Dict[bytes, tuple] = {}
    for i, op in enumerate(prog.ops):
        if op.type != "gather" or int(op.iattr[0]) != 0:
            continue
        data, idx = op.inputs
        aff = int8_affine(data)
        if aff is None or data.rank != 2 or not data.static or data.const is None:
            continue
        q, s, z = aff
        rows = int(data.shape[0])
        sv, zv = _per_output(s, rows), _per_output(z, rows)
        if q.dtype != np.int8 or q.shape != tuple(data.shape) or sv is None or zv is None \
                or not (np.all(np.isfinite(sv)) and np.all(np.isfinite(zv))):
            continue
        q = np.ascontiguousarray(q)
        key = hashlib.sha256(b"q8 %d|" % rows + q.tobytes() + b"|" + sv.tobytes() + b"|" + zv.tobytes()).digest()
        if key not in by_content:
            by_content[key] = (Value(data.name + ".q8", np.int8, q.shape, const=q),
                               Value(data.name + ".q8.scale", np.float32, sv.shape, const=sv),
                               Value(data.name + ".q8.zero", np.float32, zv.shape, const=zv) if np.any(zv) else None)
        qv, sc, zc = by_content[key]
        new = Op("gather_q8", [qv, idx, sc] + ([zc] if zc is not None else []), op.outputs, name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


W8A8_MAX_K = 16384  # kernels.h NRV_W8A8_MAX_K


def w8a8_enabled() -> bool:
    """Whether select_linear_w8a8 runs (environment NERVE_W8A8=1; default off: it changes the
    numerics)."""
    return os.environ.get("NERVE_W8A8", "0").strip() == "1"


def _pack_w8a8(q: np.ndarray) -> np.ndarray:
    """The packed weight of linear_w8a8, written by the C op pack_w8a8 (kernels.h layout)."""
    from ..session import run_program_once  # the runtime; imported late (it imports the compiler)

    n, k = q.shape
    np_, kp = -(-n // 16) * 16, -(-k // 4) * 4
    qv = Value("q", np.int8, (n, k), const=np.ascontiguousarray(q))
    out = Value("packed", np.int8, (np_ * kp + 4 * np_,))
    op = Op("pack_w8a8", [qv], [out], name="pack_w8a8")
    out.producer = op
    prog = Program(ops=[op], inputs=[], outputs=[out], symbols={}, binds=[])
    return run_program_once(prog)[0]


def _int8_operands(w: Value, q: np.ndarray, s, z, n: int, k: int, by_content: Dict[bytes, tuple],
                   packed: bool):
    """(weight, scale, zero) values of an int8-folded weight read as q [n, k] — the weight
    plain ([n, k] int8, linear_w8) or packed (linear_w8a8/conv_w8a8) — shared by every op whose
    weight has the same contents (equal weights behind distinct fp32 constants: one copy);
    None when the scale/zero are not per output or not finite."""
    sv, zv = _per_output(s, n), _per_output(z, n)
    if q.dtype != np.int8 or q.size != n * k or sv is None or zv is None \
            or not (np.all(np.isfinite(sv)) and np.all(np.isfinite(zv))):
        return None
    q = np.ascontiguousarray(q.reshape(n, k))
    if not np.any(zv):
        zv = None
    elif sv.size != zv.size:  # one per output and one per tensor: both per output
        sv, zv = np.broadcast_to(sv, (n,)).copy(), np.broadcast_to(zv, (n,)).copy()
    key = hashlib.sha256(b"%s %d %d|" % (b"w8a8" if packed else b"w8", n, k) + q.tobytes() + b"|" + sv.tobytes()
                         + b"|" + (zv.tobytes() if zv is not None else b"-")).digest()
    if key not in by_content:
        if packed:
            blob = _pack_w8a8(q)
            weight = Value(w.name + ".w8a8", np.int8, (blob.size,), const=blob)
        else:
            weight = Value(w.name + ".q", np.int8, (n, k), const=q)
        by_content[key] = (weight, Value(w.name + ".scale", np.float32, (sv.size,), const=sv),
                           Value(w.name + ".zero", np.float32, (zv.size,), const=zv) if zv is not None else None)
    return by_content[key]


def _int8_linear(prog: Program, op: Op):
    """(x, w, bias, (q, s, z), n, k, rows at the bounds) of a linear whose weight was folded
    from int8, else None."""
    if op.type != "linear":
        return None
    x, w, bias = op.inputs
    aff = int8_affine(w)
    if aff is None or w.rank != 2 or not w.static:
        return None
    rows = bytes_at_bounds(Value("rows", np.uint8, x.shape[:-1]), prog.symbols)
    return x, w, bias, aff, int(w.shape[0]), int(w.shape[1]), rows


CONV_W8A8_ROWS = 32  # positions per block of op conv_w8a8 (native/src/plan/op_conv.c)


def w8a8_convs_mode() -> str:
    """Which 1-D convs take int8 activations where linears do (precision "int8"), from
    NERVE_W8A8_CONV: "none" (unset, the default); "stored" — convs whose weight the model
    stores as int8 (Moonshine base's three: the encoder runs ~25% faster and its states stay
    at cosine 0.997 of fp32 against 0.9985 with the linears alone, but on the real recording
    beckett.wav one word of twelve changes, "fail better" -> "failed better", so it is not
    the default); "all" (=1) — fp32-weight convs too, quantised per output channel at compile
    time (silero VAD's convs: max |Δp| 0.39)."""
    value = os.environ.get("NERVE_W8A8_CONV", "").strip()
    return "all" if value in ("1", "all") else "stored" if value == "stored" else "none"


def _is_w8_conv(op: Op) -> bool:
    """A group-1 1-D conv: the convs int8 can take (conv_w8a8)."""
    return op.type == "conv" and op.iattr[0] == 1 and op.iattr[1] == 1


INT8_ACTS = ("int8",)            # schemes whose products take int8 activations ("w8a8" reads as "int8")
INT8_WEIGHTS = ("int8", "w8a32")  # schemes that give a layer an int8 weight


def _takes(op: Op, schemes: Tuple[str, ...], default: bool, layers: Optional[Dict[str, str]]) -> bool:
    """Whether op runs at one of schemes: by its entry in layers when it has one (the scheme
    nerve.precision.parse_full reads from it), else default (the model-wide precision's)."""
    from ..precision import parse_full

    chosen = _for_layer(layers, op.name) if layers else None
    return default if chosen is None else parse_full(chosen)[0] in schemes


def quantize_fp32_weights_w8(prog: Program, linears: bool, convs: bool,
                             layers: Optional[Dict[str, str]] = None,
                             hessians: Optional[Dict[str, np.ndarray]] = None) -> bool:
    """precision "int8" on weights the model stores in fp32: each linear's static 2-D weight
    (linears: the default for them) and each group-1 1-D conv's [m, c, kw] weight (convs: the
    default for them), or the layers `layers` names "int8", gets an int8 form, symmetric per
    output channel (s = max|w_row| / 127, q = round(w / s) in [-127, 127]), and its fp32
    constant becomes q·s — so the int8 passes after this one take it as a weight stored int8
    (linear_w8 on few rows, linear_w8a8 / conv_w8a8 on many). Weights already stored as int8
    keep their own form. A linear with an entry in hessians gets GPTQ codes (nerve.quant.quantize_w8)."""
    from ..quant import quantize_w8
    from .builder import AffineInt8Value

    made: Dict[int, Value] = {}
    changed = False
    for op in prog.ops:
        if op.type == "linear" and _takes(op, INT8_WEIGHTS, linears, layers):
            rank = 2
        elif _is_w8_conv(op) and _takes(op, INT8_ACTS, convs, layers):  # a conv's int8 weight: conv_w8a8 only
            rank = 3
        else:
            continue
        w = op.inputs[1]
        if w is None or w.const is None or w.rank != rank or w.const.dtype != np.float32 or not w.static \
                or int8_affine(w) is not None or w.const.size == 0 or not np.all(np.isfinite(w.const)):
            continue
        if w.uid not in made:
            n = int(w.shape[0])
            h = _for_layer(hessians, op.name) if hessians and rank == 2 else None
            q, sc = quantize_w8(w.const.reshape(n, -1), hessian=h)
            deq = (q.astype(np.float32) * sc[:, None]).reshape(w.shape)
            v = AffineInt8Value(w.name + ".w8", np.float32, w.shape, const=np.ascontiguousarray(deq))
            v.int8_affine = (q.reshape(w.shape), sc.reshape((n,) + (1,) * (rank - 1)), np.zeros((), np.float32))
            made[w.uid] = v
        op.inputs[1] = made[w.uid]
        changed = True
    return changed


RNN_R_W8_SCALES = {"lstm": 8, "gru": 6}  # op_rnn.c: the input index of R's per-row scales (offsets next)
LSTM_W_W8_SCALES = 11  # op_rnn.c: an int8 W's per-row scales (offsets next), after R's panels


def quantize_rnn_recurrent_w8(prog: Program, default: bool, layers: Optional[Dict[str, str]] = None) -> bool:
    """precision "int8" / "w8a32" (or a layer so named): an LSTM's or GRU's fp32 recurrent
    weight R [dirs, gates·H, H] gets int8 codes with one scale per row (symmetric, as the
    linears': s = max|row| / 127), the ops' W8 form (op_rnn.c): each step's GEMV then reads a
    quarter of the bytes (a 512-wide bidirectional LSTM: 4 MB of R per direction and step,
    from L3). W stays fp32: its product over every step is one GEMM, compute-bound."""
    from ..quant import quantize_w8

    changed = False
    for op in prog.ops:
        at = RNN_R_W8_SCALES.get(op.type)
        if at is None or not _takes(op, INT8_WEIGHTS, default, layers) or len(op.inputs) > at:
            continue
        r = op.inputs[2]
        if r is None or r.const is None or r.const.dtype != np.float32 or r.rank != 3 or not r.static \
                or r.const.size == 0 or not np.all(np.isfinite(r.const)):
            continue
        dirs, rows, hidden = (int(d) for d in r.shape)
        q, sc = quantize_w8(r.const.reshape(dirs * rows, hidden))
        op.inputs[2] = Value(r.name + ".w8", np.int8, r.shape, const=np.ascontiguousarray(q.reshape(r.shape)))
        scales = Value(r.name + ".w8_scale", np.float32, (dirs, rows),
                       const=np.ascontiguousarray(sc.reshape(dirs, rows).astype(np.float32)))
        op.inputs += [None] * (at - len(op.inputs)) + [scales]
        changed = True
    return changed


def select_linear_w8a8(prog: Program, convs: Optional[bool] = None, linears: bool = True,
                       layers: Optional[Dict[str, str]] = None) -> bool:
    """linear with an int8-folded weight -> linear_w8a8 (module docstring);
    with convs (default: unless w8a8_convs_mode() is "none"), a group-1 1-D conv with an
    int8-folded weight -> conv_w8a8 (im2row blocks through the same kernel). linears and convs
    are the defaults; a layer `layers` names takes its own choice (_takes)."""
    if convs is None:
        convs = w8a8_convs_mode() != "none"
    made: Dict[int, Optional[tuple]] = {}  # weight uid -> (packed, s, z) values, shared by its ops
    by_content: Dict[bytes, tuple] = {}
    changed = False
    for i, op in enumerate(prog.ops):
        if _is_w8_conv(op) and _takes(op, INT8_ACTS, convs, layers):
            x, w, bias = (op.inputs + [None])[:3]
            aff = int8_affine(w)
            if aff is None or w.rank != 3 or not w.static:
                continue
            m, c, kw = (int(d) for d in w.shape)
            if c * kw > W8A8_MAX_K:
                continue
            if w.uid not in made:
                made[w.uid] = _int8_operands(w, aff[0], aff[1], aff[2], m, c * kw, by_content, packed=True)
            if made[w.uid] is None:
                continue
            pv, sv, zv = made[w.uid]
            _, _, act, stride, dil, pb, pe = op.iattr
            scratch = Value(op.name + ".w8a8.scratch", np.uint8, (4 * CONV_W8A8_ROWS * (c * kw + m),))
            new = Op("conv_w8a8", [x, pv, sv, zv, bias], op.outputs, iattr=[act, m, c, kw, stride, dil, pb, pe],
                     fattr=list(op.fattr), scratch=scratch, name=op.name)
        elif op.type == "linear" and _takes(op, INT8_ACTS, linears, layers):
            found = _int8_linear(prog, op)
            if found is None:
                continue
            x, w, bias, aff, n, k, _ = found
            if k > W8A8_MAX_K or k == 0 or n == 0:
                continue
            if w.uid not in made:
                made[w.uid] = _int8_operands(w, aff[0], aff[1], aff[2], n, k, by_content, packed=True)
            if made[w.uid] is None:
                continue
            pv, sv, zv = made[w.uid]
            new = Op("linear_w8a8", [x, pv, sv, zv, bias], op.outputs, iattr=[op.iattr[0], n, k],
                     fattr=list(op.fattr), name=op.name)
        else:
            continue
        _swap_op(prog, i, new)
        changed = True
    return changed


PANEL_COLS, PANEL_ALIGN = 64, 16  # kernels.h NRV_PANEL_COLS, NRV_PANEL_ALIGN
CONV_PANELS_MAX_PAD = 1.25  # panels may hold at most this many times the weight's floats (zero rows)
# A 1x1 conv's GEMM (on x itself when pointwise) keeps a small weight in L2 across its column
# panels, and its short depth leaves the panels' transposed store a large share: it stays
# ahead below this weight size (measured, one thread: 256->64 and 128->512 channels at 56x56
# / 28x28 5-20% faster than panels, 256->512 stride 2 in ResNet-50 1.9 against 2.3 ms;
# 1024->256 at 14x14 and larger weights 15-30% slower).
CONV_PANELS_POINTWISE_MIN_BYTES = 1 << 20
# ... unless it has few output positions: then the GEMM's panels of 64 positions are few
# and partial, while the weight panels run whole (one thread, 1x1 convs with Clip, GEMM ->
# panels: 384->64 at 14x14 80 -> 63 us, 576->96 167 -> 145, 960->160 at 7x7 129 -> 106,
# 256->64 at 10x10 29 -> 27; at 20x20 within noise either way, at 28x28 and wider with a
# short depth the GEMM stays ahead: 24->144 at 56x56 425 against 574).
CONV_PANELS_POINTWISE_MAX_P = 256
# Convs with at most this many output positions (at the dims' bounds) run their transposed
# im2col rows through a row product (op_conv.c CONV_ROWS_MAX_P), not the GEMM over positions:
# silero VAD's convs (4 frames a chunk) ran 0.029 -> 0.042 ms a chunk on the panels' GEMM; as
# conv_packed they take linear_panels on those rows (stop 33).
CONV_ROWS_MAX_P = 16


def conv_panels_enabled() -> bool:
    """Whether select_conv_panels and select_linear_panels run (NERVE_CONV_PANELS=0 at compile
    time turns them off: convs and linears then keep their plain weights, as before them; for
    A/B measurements)."""
    return os.environ.get("NERVE_CONV_PANELS", "1").strip() != "0"


def panels_floats(m: int, k: int) -> int:
    """Floats of a weight [m, k] as panels (kernels.h nrv_panels_floats)."""
    if m <= 0:
        return 0
    last = (m - 1) // PANEL_COLS
    width = min(PANEL_COLS, -(-(m - last * PANEL_COLS) // PANEL_ALIGN) * PANEL_ALIGN)
    return (last * PANEL_COLS + width) * k


def _pack_panels(w: np.ndarray, group: int = 1) -> np.ndarray:
    """A weight [M, ...] (a linear's [N, K], a conv's [M, C/group, *kernel]) as panels per
    group of outputs, written by the C op pack_panels (the layout's one writer)."""
    from ..session import run_program_once  # the runtime; imported late (it imports the compiler)

    m = w.shape[0]
    wv = Value("w", np.float32, tuple(w.shape), const=np.ascontiguousarray(w))
    out = Value("panels", np.float32, (group * panels_floats(m // group, w.size // max(m, 1)),))
    op = Op("pack_panels", [wv], [out], iattr=[group], name="pack_panels")
    out.producer = op
    prog = Program(ops=[op], inputs=[], outputs=[out], symbols={}, binds=[])
    return run_program_once(prog)[0]


def select_conv_panels(prog: Program) -> bool:
    """Every fp32 conv with a constant weight that is not depthwise (nor a 1x1 one with a
    weight under CONV_PANELS_POINTWISE_MIN_BYTES and more than CONV_PANELS_POINTWISE_MAX_P
    output positions) becomes ``conv_packed`` (with at most CONV_ROWS_MAX_P output positions,
    a streaming model's frames, its transposed im2col rows then go through linear_panels):
    its weight packed once, here, as panels of 64 output channels (kernels.h), which the
    kernel streams in order with the output channels as vector lanes, each input value
    broadcast (no junk columns, no weight read at a 4.6 KiB stride). Convs whose panels
    would hold more than CONV_PANELS_MAX_PAD times the weight (fewer than ~16 outputs per
    group) keep the implicit GEMM. The fp32 weight goes when no other op reads it. Measured:
    bench/RESULTS.md, stop 23. Runs last, after every selection and fusion that reads a conv."""
    if not conv_panels_enabled():
        return False
    from .onnx_ops import conv_scratch

    made: Dict[Tuple[int, int], Value] = {}
    changed = False
    for i, op in enumerate(prog.ops):
        if op.type != "conv" or len(op.inputs) < 2:
            continue
        x, w = op.inputs[0], op.inputs[1]
        if w is None or w.const is None or not w.static or w.dtype != np.float32 or w.rank not in (3, 4):
            continue
        sr, group, _act = op.iattr[:3]
        m, cg = int(w.shape[0]), int(w.shape[1])
        kernel = [int(d) for d in w.shape[2:]]
        mg, k = m // group, cg * int(np.prod(kernel))
        if (cg == 1 and mg == 1) or m == 0 or k == 0 or panels_floats(mg, k) > CONV_PANELS_MAX_PAD * mg * k:
            continue
        positions = bytes_at_bounds(Value("positions", np.uint8, list(op.outputs[0].shape[2:])), prog.symbols)
        if kernel == [1] * sr and 4 * m * k < CONV_PANELS_POINTWISE_MIN_BYTES and positions > CONV_PANELS_POINTWISE_MAX_P:
            continue
        key = (w.uid, group)
        if key not in made:
            made[key] = Value(w.name + ".panels", np.float32, (group * panels_floats(mg, k),),
                              const=_pack_panels(np.asarray(w.const, np.float32).reshape(w.shape), group))
        strides, dil = list(op.iattr[3:3 + sr]), list(op.iattr[3 + sr:3 + 2 * sr])
        pb, pe = list(op.iattr[3 + 2 * sr:3 + 3 * sr]), list(op.iattr[3 + 3 * sr:3 + 4 * sr])
        out_sp = list(op.outputs[0].shape[2:])
        pointwise = kernel == [1] * sr and strides == [1] * sr and pb == [0] * sr and pe == [0] * sr
        # a streaming model's few frames: their transposed im2col rows go through linear_panels
        scratch = Value(op.name + ".panels.scratch", np.uint8,
                        (conv_scratch(cg, mg, kernel, strides, dil, out_sp, packed=True, pointwise=pointwise,
                                      few_positions=positions if positions <= CONV_ROWS_MAX_P else 0),))
        new = Op("conv_packed", [x, made[key]] + list(op.inputs[2:4]), op.outputs, iattr=list(op.iattr) + [m] + kernel,
                 fattr=list(op.fattr), scratch=scratch, name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


# Linears on fewer rows (at the dims' bounds) keep their row-major weight when it is small:
# the decode-step kernels (linear_impl.h) stream it as dot products, as fast as panels there
# (416 x 1664 and 288 x 1152 at 1-16 rows, within 10% either way). A weight of 4 MiB or more
# goes to panels at any row count: one contiguous stream instead of a few rows of W at a
# time, measured (AMD EPYC guest, one thread, bench/RESULTS.md stop 31) 1024 x 8210 at 1 row
# 1.42 → 0.67 ms, at 20 rows 6.05 → 3.83 (onnxruntime 4.07); 4096² at 8 rows 5.30 → 3.76;
# 1024² at 20 rows 0.50 → 0.43.
LINEAR_PANELS_MIN_ROWS = 32
# ... except below the decode-step kernels' outer-product path (linear_impl.h
# LINEAR_MID_MIN_ROWS = 13), where panels beat their dot products whenever there are
# LINEAR_PANELS_FEW_MIN_OUT or more outputs: no horizontal sum per output, W streamed once
# (stop 33, AMD EPYC guest, one thread, C harness over 19 shapes x 1-16 rows: at 1-8 rows
# 1.1-3.1x, e.g. 128 x 32 at 1 row 361 -> 117 ns, 512 x 256 1.11x, 1664 x 416 1.17-1.42x,
# 1024² 1.08-1.16x; 256 x 1024 at 1 row 0.96x; fewer outputs lose: 16 x 200 0.60x, 10 x 512
# 0.33x; at 16 rows the outer products are level or ahead, 0.89-1.05x).
LINEAR_PANELS_FEW_ROWS = 13
LINEAR_PANELS_FEW_MIN_OUT = 32
LINEAR_PANELS_BIG_WEIGHT = 4 << 20  # bytes of fp32 W


def _const_digest(v: Value) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(v.const).tobytes()).digest()


def _digests_read_by_others(prog: Program, types: Tuple[str, ...]) -> Set[bytes]:
    """Contents of the fp32 constants that ops other than `types` read. The plan stores
    equal weights once (by content): a tied embedding's table and its output layer's weight
    are one copy, which panels of the latter would double."""
    return {_const_digest(v) for op in prog.ops if op.type not in types for v in op.inputs
            if v is not None and v.const is not None and v.static and v.dtype == np.float32 and v.rank == 2}


def select_linear_panels(prog: Program) -> bool:
    """fp32 ``linear`` and ``layernorm_linear`` ops with a constant weight whose contents no
    other kind of op reads (a tied embedding's table), on at least LINEAR_PANELS_MIN_ROWS
    rows at the bounds, or on fewer than LINEAR_PANELS_FEW_ROWS with LINEAR_PANELS_FEW_MIN_OUT
    outputs or more, or with a weight of LINEAR_PANELS_BIG_WEIGHT bytes, whose panels hold
    at most CONV_PANELS_MAX_PAD times the weight (16 or more outputs), become ``linear_panels`` and ``layernorm_linear_panels``: the weight
    packed once, here, as panels (kernels.h), which the GEMM reads in place where it packed
    Wᵀ from W on every call (in-model linears with their weights out of cache spent
    about as long packing as multiplying). Measured: bench/RESULTS.md, stop 23. Runs last
    with select_conv_panels; NERVE_CONV_PANELS=0 turns both off."""
    if not conv_panels_enabled():
        return False
    shared = None  # computed on the first candidate
    made: Dict[int, Value] = {}  # weight uid -> its panels, shared by the ops reading it
    changed = False
    for i, op in enumerate(prog.ops):
        if op.type == "linear":
            x, w, bias = (op.inputs + [None, None])[:3]
            gamma = beta = None
            eps, p0, p1 = 0.0, op.fattr[0], op.fattr[1]
        elif op.type == "layernorm_linear":
            x, gamma, beta, w, bias = (op.inputs + [None, None])[:5]
            eps, p0, p1 = op.fattr
        else:
            continue
        if w is None or w.const is None or not w.static or w.dtype != np.float32 or w.rank != 2:
            continue
        n, k = int(w.shape[0]), int(w.shape[1])
        rows = bytes_at_bounds(Value("rows", np.uint8, x.shape[:-1]), prog.symbols)
        few = rows < LINEAR_PANELS_FEW_ROWS and n >= LINEAR_PANELS_FEW_MIN_OUT
        if n == 0 or (rows < LINEAR_PANELS_MIN_ROWS and 4 * n * k < LINEAR_PANELS_BIG_WEIGHT and not few) \
                or panels_floats(n, k) > CONV_PANELS_MAX_PAD * n * k:
            continue
        if shared is None:
            shared = _digests_read_by_others(prog, ("linear", "layernorm_linear"))
        if _const_digest(w) in shared:
            continue
        if w.uid not in made:
            made[w.uid] = Value(w.name + ".panels", np.float32, (panels_floats(n, k),),
                                const=_pack_panels(np.asarray(w.const, np.float32).reshape(n, k)))
        new = Op(op.type + "_panels", [x, made[w.uid], bias] + ([gamma, beta] if gamma is not None else []), op.outputs,
                 iattr=[op.iattr[0], n], fattr=[p0, p1, eps], name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


# op_rnn.c: the input index of R's panels, and the row blocks of R each op multiplies by h
# (rnn_check_r_panels); GRU's depend on linear_before_reset (iattr[2])
RNN_R_PANELS = {"lstm": 10, "gru": 8, "rnn": 6}
RNN_PANELS_MIN_HIDDEN = 16
RNN_PANELS_MAX_BYTES = 4 << 20


def _rnn_row_blocks(op: Op, hidden: int) -> List[int]:
    if op.type == "lstm":
        return [4 * hidden]
    if op.type == "gru":
        return [3 * hidden] if op.iattr[2] else [2 * hidden, hidden]
    return [hidden]


def select_rnn_panels(prog: Program) -> bool:
    """LSTM, GRU and RNN ops with an fp32 constant recurrent weight R get it as panels too (an
    extra input, op_rnn.c rnn_check_r_panels): each time step's h · Rᵀ is a product of a few
    rows, where the dot kernel's horizontal sums cost more than the multiply-adds at small H
    and the panels stream R with none (one thread: 128 x 32 at 1 row 520 -> 150 ns, 512 x 128
    1.2x; bench/RESULTS.md stop 33). R stays as it is (its shape is checked, and W8 takes it);
    the panels are one more copy, so only up to RNN_PANELS_MAX_BYTES, and from
    RNN_PANELS_MIN_HIDDEN (narrower panels gain little). Runs after the precision passes (an
    int8 R keeps its W8 path) with select_linear_panels; NERVE_CONV_PANELS=0 turns it off."""
    if not conv_panels_enabled():
        return False
    changed = False
    for op in prog.ops:
        at = RNN_R_PANELS.get(op.type)
        if at is None or len(op.inputs) > at:
            continue
        r = op.inputs[2]
        if r is None or r.const is None or r.const.dtype != np.float32 or r.rank != 3 or not r.static:
            continue
        dirs, _, hidden = (int(d) for d in r.shape)
        if hidden < RNN_PANELS_MIN_HIDDEN or r.const.nbytes > RNN_PANELS_MAX_BYTES:
            continue
        rc = np.asarray(r.const, np.float32)
        per_dir = []
        for d in range(dirs):
            parts, r0 = [], 0
            for n in _rnn_row_blocks(op, hidden):
                parts.append(_pack_panels(np.ascontiguousarray(rc[d, r0:r0 + n, :])))
                r0 += n
            per_dir.append(np.concatenate(parts))
        panels = np.ascontiguousarray(np.stack(per_dir))
        op.inputs += [None] * (at - len(op.inputs)) + [Value(r.name + ".panels", np.float32, panels.shape,
                                                              const=panels)]
        changed = True
    return changed


RDFT_MAX_N = 4096  # kernels.h NRV_RDFT_MAX_N
RDFT_WORK_BYTES_PER_N = 18  # kernels.h nrv_rdft_work_bytes
RDFT_BASIS_TOL = 1e-6  # |weight - window·cos/sin basis| allowed, relative to max |weight|: fp32 rounding


def rdft_basis(w: np.ndarray) -> Optional[Tuple[np.ndarray, int]]:
    """(window, im_sign) when a 1-D conv weight w [2K, 1, N] is a windowed DFT basis — rows
    k < K equal window·cos(2πkn/N) and rows K + k equal im_sign·window·sin(2πkn/N), to fp32
    rounding (RDFT_BASIS_TOL) — with N a power of two and K <= N/2 + 1; else None. The window
    is row 0 (cos 0 = 1) as stored."""
    if w.ndim != 3 or w.shape[1] != 1 or w.shape[0] % 2 or w.dtype != np.float32:
        return None
    m2, _, n = w.shape
    k_bins = m2 // 2
    if n < 4 or n > RDFT_MAX_N or n & (n - 1) or k_bins > n // 2 + 1 or not np.all(np.isfinite(w)):
        return None
    basis = w[:, 0, :].astype(np.float64)
    tol = RDFT_BASIS_TOL * max(float(np.abs(basis).max()), 1e-30)
    window = basis[0]
    angle = 2.0 * np.pi * np.outer(np.arange(k_bins), np.arange(n)) / n
    if np.abs(basis[:k_bins] - window * np.cos(angle)).max() > tol:
        return None
    sin = window * np.sin(angle)
    for sign in (-1, 1):
        if np.abs(basis[k_bins:] - sign * sin).max() <= tol:
            return np.ascontiguousarray(w[0, 0, :]), sign
    return None


def rdft_table(n: int) -> np.ndarray:
    """The twiddle table of op rdft (kernels/fft.c): per FFT stage h = 1, 2, .. N/4 the h
    factors e^{-iπj/h} (real parts, then imaginary parts, N/2 entries each, stage h from
    entry h - 1), then cos and sin of 2πk/N for k < N/2."""
    m = n // 2
    st = np.zeros(m, np.complex128)
    h = 1
    while h < m:
        st[h - 1:2 * h - 1] = np.exp(-1j * np.pi * np.arange(h) / h)
        h *= 2
    k = 2.0 * np.pi * np.arange(m) / n
    return np.concatenate([st.real, st.imag, np.cos(k), np.sin(k)]).astype(np.float32)


def select_rdft(prog: Program) -> bool:
    """A 1-D conv (one input channel, group 1, dilation 1, no bias or a zero one, no fused
    activation) whose static weight is a windowed DFT basis (rdft_basis) -> op rdft: the same
    frames through an FFT (kernels/fft.c) instead of N x 2K multiply-adds. Exported audio
    models carry their STFT this way (silero VAD: 258 x 256, ~8 µs of its ~35 µs per chunk as
    a conv here)."""
    changed = False
    tables: Dict[int, Value] = {}
    for i, op in enumerate(prog.ops):
        if op.type != "conv" or op.iattr[0] != 1 or op.iattr[1] != 1 or op.iattr[2] != 0:
            continue
        x, w = op.inputs[0], op.inputs[1]
        bias = op.inputs[2] if len(op.inputs) > 2 else None
        if w is None or w.const is None or x.rank != 3 or op.iattr[4] != 1:
            continue
        if bias is not None and (bias.const is None or np.any(bias.const != 0)):
            continue
        found = rdft_basis(w.const)
        if found is None:
            continue
        window, sign = found
        n = int(window.size)
        # the conv's channel K + k is sign·Σ a·sin = -sign·Im X[k] (X[k] = Σ a·e^{-2πijk/n})
        if n not in tables:
            tables[n] = Value(f"rdft_table_{n}", np.float32, (2 * n,), const=rdft_table(n))
        win = Value(w.name + ".window", np.float32, (n,), const=window)
        new = Op("rdft", [x, win, tables[n]], op.outputs,
                 iattr=[int(op.iattr[3]), int(op.iattr[5]), int(op.iattr[6]), int(w.shape[0]) // 2, -sign],
                 scratch=Value(op.name + ".rdft.scratch", np.uint8, (RDFT_WORK_BYTES_PER_N * n,)), name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


W4_MAX_K = 16384  # nerve.h NRV_W4_MAX_IN
W4_DIRECT_MAX_ROWS = 16  # native/src/plan/op_linalg.c: w4a32 on more rows takes the tiled path
W4_TILE_OUT = 64


def linear_w4_layers(prog: Program) -> List[tuple]:
    """(op name, fp32 weight bytes) of the W4 linears of a program compiled at a w4 precision:
    the layers a per-layer policy can choose for (named as Session.ops() names them)."""
    return [(op.name, 4 * int(op.iattr[1]) * int(op.iattr[2])) for op in prog.ops
            if op.type in ("linear_w4a32", "linear_w4a8")]


def _for_layer(by_name: Dict[str, object], name: str):
    """by_name's entry for a linear named name here. Fusions extend names ("MatMul_0" becomes
    "MatMul_0+Add_1", then "MatMul_0+Add_1+Relu_2"), so a key may be the name as imported
    (a prefix of name) or as in the final plan (name is its prefix): both find the layer."""
    if name in by_name:
        return by_name[name]
    for key, value in by_name.items():
        if key.startswith(name + "+") or name.startswith(key + "+"):
            return value
    return None


def select_linear_w4(prog: Program, int8_activations: Optional[bool], group_size: int = 64, packed: bool = True,
                     method: str = "mse", layers: Optional[Dict[str, str]] = None,
                     hessians: Optional[Dict[str, np.ndarray]] = None) -> bool:
    """Every linear whose weight is a static 2-D float constant (int8-folded ones included:
    their dequantised values are requantised) and whose input width is a multiple of 32 ->
    linear_w4a8 / linear_w4a32 with a W4 weight quantised here (nerve.quant.quantize_w4:
    symmetric, fp16 scales, group group_size or the largest smaller one dividing the width).
    Equal weights share one quantised copy. w4a32 on more than W4_DIRECT_MAX_ROWS rows gets a
    scratch tile (the op dequantises W4_TILE_OUT rows at a time into it for the fp32 gemm).
    layers: {op name: "fp32" (left as it is) | a w4 precision ("w4a8", "w4a32:g32:minmax", ...)}
    per-layer overrides (int8_activations None: only the listed ops are quantised).
    hessians: {linear op name as imported: Σ xᵀx of its calibration inputs} -> that layer's
    weight is quantised with GPTQ (nerve.quant.LinearTaps collects them)."""
    from ..quant import GROUP_SIZES, quantize_w4  # numpy only; imported when used

    made: Dict[bytes, tuple] = {}
    changed = False
    from ..precision import parse_full

    for i, op in enumerate(prog.ops):
        if op.type != "linear":
            continue
        chosen = _for_layer(layers, op.name) if layers else None
        if chosen is not None:  # "fp32", or a w4 scheme with its own group/method
            scheme, group_size_op, method_op = parse_full(chosen)
        else:
            scheme = None if int8_activations is None else ("w4a8" if int8_activations else "w4a32")
            group_size_op, method_op = group_size, method
        if scheme not in ("w4a32", "w4a8"):
            continue
        a8 = scheme == "w4a8"
        x, w, bias = op.inputs
        if w.const is None or w.rank != 2 or w.const.dtype != np.float32 or not w.static:
            continue
        n, k = int(w.shape[0]), int(w.shape[1])
        if n == 0 or k == 0 or k % 32 or k > W4_MAX_K:
            continue
        g = max(s for s in GROUP_SIZES if s <= group_size_op and k % s == 0)
        h = _for_layer(hessians, op.name) if hessians else None
        key = hashlib.sha256(b"w4 %d %d %d %s|" % (g, int(packed), n, method_op.encode())
                             + np.ascontiguousarray(w.const).tobytes()
                             + (b"|gptq" + np.ascontiguousarray(h, np.float64).tobytes() if h is not None else b"")
                             ).digest()
        if key not in made:
            w4 = quantize_w4(w.const, group_size=g, symmetric=True, method=method_op, hessian=h)
            vals = w4.packed if packed else w4.q
            made[key] = (Value(w.name + ".w4", vals.dtype, vals.shape, const=vals),
                         Value(w.name + ".w4.scale", np.float16, w4.scales.shape, const=w4.scales),
                         Value(w.name + ".w4.zero", np.int8, w4.zero.shape, const=w4.zero) if w4.zero is not None else None, g)
        vv, sv, zv, g = made[key]
        rows = bytes_at_bounds(Value("rows", np.uint8, x.shape[:-1]), prog.symbols)
        scratch = None
        if not a8 and rows > W4_DIRECT_MAX_ROWS:
            scratch = Value(op.name + ".w4.tile", np.float32, (W4_TILE_OUT * k,))
        new = Op("linear_w4a8" if a8 else "linear_w4a32", [x, vv, sv, zv, bias], op.outputs,
                 iattr=[op.iattr[0], n, k, g, 1 if packed else 0], fattr=list(op.fattr), scratch=scratch,
                 name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


F16_MAX = 65504.0  # the largest finite IEEE half


def select_linear_f16(prog: Program) -> bool:
    """precision "fp16": every linear whose weight is a static 2-D fp32 constant -> linear_f16
    with that weight stored as IEEE half (half the bytes), rounded to nearest even here once
    (numpy's float16 cast; relative error <= 2^-11, values below 2^-24 become subnormals or 0,
    an absolute error <= 2^-25) and widened exactly to fp32 in registers by the kernel, so the
    products and sums stay fp32. Equal weights share one fp16 copy (content hash); another
    reader of the fp32 constant (a tied embedding's Gather) keeps it. Any row count: the
    kernel keeps pace with the fp32 linear on many rows too (op_linalg.c, linear_f16).
    Left as they are:
      * weights folded from int8 (the builder's int8_affine record): their int8 form (linear_w8)
        is a quarter of the fp32 bytes, smaller than fp16, and exact;
      * a weight with any |w| > 65504 (or an infinity): fp16 would round it to inf and turn the
        layer's outputs into inf/NaN, so the whole layer stays an fp32 linear."""
    made: Dict[int, Optional[Value]] = {}  # weight uid -> its fp16 value (None: stays fp32)
    by_content: Dict[bytes, Value] = {}
    changed = False
    for i, op in enumerate(prog.ops):
        if op.type != "linear":
            continue
        x, w, bias = op.inputs
        if w is None or w.const is None or w.rank != 2 or w.const.dtype != np.float32 or not w.static \
                or int8_affine(w) is not None or w.const.size == 0:
            continue
        if w.uid not in made:
            wc = np.ascontiguousarray(w.const)
            if np.any(np.abs(wc) > F16_MAX):
                made[w.uid] = None
            else:
                key = hashlib.sha256(b"f16 %d %d|" % wc.shape + wc.tobytes()).digest()
                if key not in by_content:
                    by_content[key] = Value(w.name + ".f16", np.float16, wc.shape, const=wc.astype(np.float16))
                made[w.uid] = by_content[key]
        wv = made[w.uid]
        if wv is None:
            continue
        new = Op("linear_f16", [x, wv, bias], op.outputs, iattr=list(op.iattr), fattr=list(op.fattr), name=op.name)
        _swap_op(prog, i, new)
        changed = True
    return changed


def optimize(prog: Program, fuse: bool = True, precision: str = "fp32",
             layers: Optional[Dict[str, str]] = None, hessians: Optional[Dict[str, np.ndarray]] = None) -> None:
    """precision (nerve.precision): "int8" — int8-folded linears take int8 activations on any
    row count (select_linear_w8a8); "w4a32"/"w4a8" — linears get W4 weights
    (select_linear_w4); "fp16" — linears with fp32 weights get fp16 ones (select_linear_f16);
    "fp32" (default) keeps the weights as stored (NERVE_W8A8=1 as int8); "w8a32" — linears get
    int8 weights (as "int8") and keep fp32 activations (linear_w8 on any row count).
    layers: {linear op name: "fp32" | "int8" | "w8a32" | "w4a32" | "w4a8"} overrides per layer
    (nerve.quantize's policies); "fp32" there keeps the layer's weight as the model stores it."""
    from ..precision import int8_convs, parse_full

    scheme, group, method = parse_full(precision)
    for name, p in (layers or {}).items():
        if parse_full(p)[0] not in ("fp32", "int8", "w8a32", "w4a32", "w4a8"):
            raise CompileError(f"layers: precision {p!r} for {name!r} must be 'fp32', 'int8' (= 'w8a8'), 'w8a32', "
                               "or 'w4a32' / 'w4a8' (with their :gN / :method suffixes)")
    int8 = scheme == "int8"
    w8a32 = scheme == "w8a32"
    layer_schemes = {parse_full(p)[0] for p in (layers or {}).values()}
    int8_layers = bool(layer_schemes & set(INT8_ACTS))
    w8_layers = bool(layer_schemes & set(INT8_WEIGHTS))
    int8_acts = int8 or w8a8_enabled()  # NERVE_W8A8=1: int8 activations at any precision
    named_convs = int8_convs(precision)  # "int8:convs"
    quantize_convs = int8 and (named_convs or w8a8_convs_mode() == "all")  # fp32-weight convs get int8 weights
    act_convs = int8_acts and (named_convs or w8a8_convs_mode() != "none")  # int8-weight convs -> conv_w8a8
    eliminate_dead_ops(prog)
    if not fuse:
        return
    fold_pad_into_conv(prog)
    fuse_layernorm(prog)
    fuse_gelu(prog)
    fuse_hard_swish(prog)
    fuse_silu(prog)
    fuse_fake_quant(prog)
    fuse_dequantize(prog)
    requantize_concat(prog)
    fuse_bias(prog)
    select_rdft(prog)
    if scheme in ("w4a32", "w4a8") or layers:
        select_linear_w4(prog, int8_activations=(scheme == "w4a8") if scheme in ("w4a32", "w4a8") else None,
                         group_size=group, method=method, layers=layers, hessians=hessians)
    if int8 or w8a32 or w8_layers:
        quantize_fp32_weights_w8(prog, linears=int8 or w8a32, convs=quantize_convs, layers=layers,
                                 hessians=hessians)
        quantize_rnn_recurrent_w8(prog, default=int8 or w8a32, layers=layers)
    if int8_acts or int8_layers:  # before linear_w8: int8 activations on every row count
        select_linear_w8a8(prog, convs=act_convs, linears=int8_acts, layers=layers)
    if w8_enabled() or w8a32 or w8_layers:
        select_gather_q8(prog)
        select_linear_w8(prog, default_w8a32=w8a32, layers=layers)
    fuse_sum_of_linears(prog)
    if scheme == "fp16":
        select_linear_f16(prog)
    fuse_layernorm_linear(prog)
    fold_transpose_into_matmul(prog)
    fuse_activation(prog)
    if fuse_conv_sum(prog):
        fuse_activation(prog)
    fuse_attention(prog)
    select_conv_panels(prog)
    select_linear_panels(prog)
    select_rnn_panels(prog)
    eliminate_dead_ops(prog)
