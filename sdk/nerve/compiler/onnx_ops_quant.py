"""Handlers for already-quantized ONNX models: ``com.microsoft`` MatMulNBits and the ONNX
DequantizeLinear / QuantizeLinear pair. The weights stay compact in the plan.

MatMulNBits (onnxruntime contrib op, ``Y = A · dequant(B)ᵀ + bias``): B uint8 [N, k_blocks,
blob_size], the codes packed low bits first along K (bits 4: element 2j in the low nibble,
2j+1 in the high); scales [N·k_blocks]; zero_points optional, uint8 packed like B ([N·
ceil(k_blocks·bits/8)], default 2^(bits-1)) or float like scales; g_idx optional; bias [N]
optional. W[n, k] = scale[n, b]·(u[n, k] − zp[n, b]), b = k / block_size.

  * bits 4, block_size 32/64/128 dividing K, K <= 16384, uint8 (or no) zero points, no g_idx
    -> the plan's W4 ops (nerve.h "W4 weights"): nerve's q = u − 8 and zero = zp − 8, packed
    layout, group = block_size. accuracy_level 4 (int8 compute) -> ``linear_w4a8``, any other
    -> ``linear_w4a32`` (with its W4_TILE_OUT·K scratch tile when the rows can exceed 16).
    fp32 scales are rounded to fp16 (the W4 format's scales): each weight moves by at most
    2^-11 of itself. A group whose scale is 0 becomes q = zero with scale 1 (the same zeros).
  * anything else (other bits, block sizes or K, float zero points, g_idx, a scale fp16 cannot
    hold within 2^-11: overflow or subnormal) -> an exact fp32 dequantised weight through
    the plain ``linear`` (correct, not compressed; the compiler's precision passes may still
    quantise it).

DequantizeLinear ``y = (x − zp)·scale`` (per tensor, per axis, opset-21 blocks):
  * on a constant int8/uint8 x with per-tensor or per-axis scale: emitted as Cast(q) [− zp]
    · scale on constants, which the builder folds through the C runtime *and* records as
    int8 (``builder.int8_affine``), so the int8 weight passes (linear_w8, linear_w8a8,
    gather_q8) keep the weight int8. When x − zp fits int8 everywhere, q = x − zp and the
    record has no offset (the fold is then bit for bit onnxruntime's); otherwise uint8 is
    shifted to int8 (q = u − 128, zp − 128: the same integers u − zp, so the same fp32
    values).
  * on other constants (int32, int16, blocks): folded in numpy (an integer times one scale:
    one rounding, as onnxruntime).
  * on a run-time x: Cast, Sub of the zero point, Mul by the scale.

QuantizeLinear ``y = saturate(round_half_even(x / scale) + zp)`` on fp32: Div, Round (the
runtime's nearbyintf: half to even), Add of the zero point, Cast (saturating: nerve's cast
clamps floats to the integer type's range). A constant x folds to a constant (so a
QuantizeLinear→DequantizeLinear pair on a float weight ends as an int8-recorded weight).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import symbolic as S
from .graph import Value
from .memplan import bytes_at_bounds
from .onnx_import import NodeCtx, handler
from .onnx_ops import binary, linear, norm_axis, spec, unary

F32 = np.dtype(np.float32)
W4_GROUPS = (32, 64, 128)
W4_MAX_K = 16384  # nerve.h NRV_W4_MAX_IN
W4_DIRECT_MAX_ROWS = 16  # op_linalg.c: w4a32 on more rows takes the tiled path (scratch)
W4_TILE_OUT = 64
_U_ROUND = 23  # op_elementwise.c unary code: nearbyintf (half to even)


# ---------------------------------------------------------------- MatMulNBits


def _const(ctx: NodeCtx, v: Optional[Value], what: str) -> Optional[np.ndarray]:
    if v is None:
        return None
    if v.const is None:
        raise ctx.fail(f"{what} must be a constant (an initializer) to be imported")
    return v.const


def _unpack_codes(data: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unsigned codes of `bits` bits packed low bits first in the bytes of each row of data
    [rows, nbytes] -> uint8 [rows, count]."""
    rows = data.shape[0]
    if bits == 4:
        d = data.reshape(rows, -1)
        codes = np.stack([d & 0x0F, d >> 4], axis=-1).reshape(rows, -1)
    elif bits == 8:
        codes = data.reshape(rows, -1)
    else:
        bitv = np.unpackbits(data.reshape(rows, -1), axis=-1, bitorder="little")
        usable = bitv.shape[1] // bits * bits
        bitv = bitv[:, :usable].reshape(rows, -1, bits).astype(np.int32)
        codes = (bitv << np.arange(bits, dtype=np.int32)).sum(axis=-1).astype(np.uint8)
    return np.ascontiguousarray(codes[:, :count])


@handler("MatMulNBits", domain="com.microsoft")
def _matmul_nbits(ctx: NodeCtx, ins):
    ctx.require_attrs(("K", "N", "bits", "block_size", "accuracy_level"))
    ins = list(ins) + [None] * (6 - len(ins))
    a, bq, sc, zpv, gidx, bias = ins[:6]
    if "K" not in ctx.attrs or "N" not in ctx.attrs or "block_size" not in ctx.attrs:
        raise ctx.fail("attributes K, N and block_size are required")
    K, N = int(ctx.attr("K")), int(ctx.attr("N"))
    bits, bs = int(ctx.attr("bits", 4)), int(ctx.attr("block_size"))
    acc = int(ctx.attr("accuracy_level", 0))
    if K <= 0 or N <= 0:
        raise ctx.fail(f"K {K} and N {N} must be positive")
    if bits not in (2, 3, 4, 5, 6, 7, 8):
        raise ctx.fail(f"bits {bits} is not supported (2..8)")
    if bs < 16 or bs & (bs - 1):
        raise ctx.fail(f"block_size {bs} must be a power of two >= 16")
    if a is None or bq is None or sc is None:
        raise ctx.fail("inputs A, B and scales are required")
    if a.dtype != F32:
        raise ctx.fail(f"A of {a.dtype} is not supported (float32 only)")
    if a.rank < 1:
        raise ctx.fail("A must have rank >= 1")
    if S.is_static(a.shape[-1]) and int(a.shape[-1]) != K:
        raise ctx.fail(f"A's last dimension {a.shape[-1]} is not K = {K}")
    kb = -(-K // bs)
    blob = bs * bits // 8
    if bs * bits % 8:
        raise ctx.fail(f"block_size {bs} with bits {bits} does not fill whole bytes")
    B = _const(ctx, bq, "B")
    if B.dtype != np.uint8 or B.shape != (N, kb, blob):
        raise ctx.fail(f"B must be uint8 of shape [N, k_blocks, blob_size] = {[N, kb, blob]} (K {K}, "
                       f"block_size {bs}, bits {bits}), got {B.dtype} {list(B.shape)}")
    s = _const(ctx, sc, "scales")
    if s.dtype.kind != "f" or s.size != N * kb:
        raise ctx.fail(f"scales must be float with N·k_blocks = {N * kb} elements, got {s.dtype} "
                       f"{list(s.shape)}")
    s32 = s.reshape(N, kb).astype(np.float32)
    zp = _const(ctx, zpv, "zero_points")
    zp_float = None
    zp_u = None  # unsigned zero points [N, kb] (uint8)
    if zp is not None:
        if zp.dtype == np.uint8:
            zb = -(-kb * bits // 8)
            if zp.size != N * zb:
                raise ctx.fail(f"uint8 zero_points must hold N·ceil(k_blocks·bits/8) = {N * zb} bytes, got "
                               f"{list(zp.shape)}")
            zp_u = _unpack_codes(zp.reshape(N, zb), bits, kb)
        elif zp.dtype.kind == "f":
            if zp.size != N * kb:
                raise ctx.fail(f"float zero_points must have N·k_blocks = {N * kb} elements, got {list(zp.shape)}")
            zp_float = zp.reshape(N, kb).astype(np.float32)
        else:
            raise ctx.fail(f"zero_points of {zp.dtype} are not supported (uint8 or float)")
    g = None
    if gidx is not None:
        g = _const(ctx, gidx, "g_idx").reshape(-1).astype(np.int64)
        if g.size != K or (g.size and (g.min() < 0 or g.max() >= kb)):
            raise ctx.fail(f"g_idx must hold K = {K} block indices in [0, {kb})")
    b_const = None
    if bias is not None:
        if bias.dtype != F32 or bias.rank != 1 or not S.is_static(bias.shape[0]) or int(bias.shape[0]) != N:
            raise ctx.fail(f"bias must be float32 [N] = [{N}], got {bias.dtype} {list(bias.shape)}")
        b_const = bias.const
    u = _unpack_codes(B.reshape(N, kb * blob), bits, kb * bs)  # [N, kb·bs] unsigned codes

    # the W4 ops: bits 4, a group size nerve has, whole groups, K within the kernels' limit,
    # integer zero points, blocks in order, scales fp16 holds within 2^-11
    s16 = None
    if bits == 4 and bs in W4_GROUPS and K % bs == 0 and K <= W4_MAX_K and zp_float is None and g is None:
        with np.errstate(over="ignore"):
            s16 = s32.astype(np.float16)
        r = s16.astype(np.float32)
        nz = s32 != 0
        ok = np.all(np.isfinite(r)) and np.all(np.abs(r[nz] - s32[nz]) <= np.abs(s32[nz]) * 2.0 ** -11)
        if not ok:
            s16 = None
    if s16 is None:
        # fallback: the exact fp32 weight on the plain linear (correct, not compressed; the
        # precision passes may still requantise it) — bits != 4, a block size W4 does not
        # have, K not a multiple of the block or above 16384, float zero points, g_idx, or a
        # scale fp16 cannot hold within 2^-11
        return [_nbits_fallback(ctx, a, u, s32, zp_u, zp_float, g, bits, bs, K, N, bias, b_const)]
    return [_nbits_w4(ctx, a, u, s16, zp_u, bs, K, N, acc, bias, b_const)]


def _nbits_w4(ctx: NodeCtx, a: Value, u: np.ndarray, s16: np.ndarray, zp_u: Optional[np.ndarray], bs: int, K: int,
              N: int, acc: int, bias: Optional[Value], b_const: Optional[np.ndarray]) -> Value:
    from ..errors import NerveError
    from ..quant import W4Weight

    kb = K // bs
    q = u.view(np.int8) - np.int8(8)  # [N, K]: u in [0, 15] -> q in [-8, 7]
    zero = None if zp_u is None or np.all(zp_u == 8) else zp_u.view(np.int8) - np.int8(8)
    s16 = s16.copy()
    dead = s16 == 0  # a zero scale: the group's weights are all 0 -> q = zero, scale 1
    if np.any(dead):
        qg = q.reshape(N, kb, bs)
        qg[dead] = zero[dead][:, None] if zero is not None else np.int8(0)
        s16[dead] = np.float16(1.0)
    try:
        packed = W4Weight(q, s16, zero, bs).packed
    except NerveError as exc:  # not reachable for well-formed nibbles; kept for a clear message
        raise ctx.fail(f"the weight is not a valid W4 weight: {exc}") from None
    b = ctx.b
    vals = b.const(packed, b.fresh(ctx.name + ".w4"))
    scales = b.const(s16, b.fresh(ctx.name + ".w4.scale"))
    zeros = b.const(zero, b.fresh(ctx.name + ".w4.zero")) if zero is not None else None
    bv = None
    if b_const is not None:
        bv = b.const(np.ascontiguousarray(b_const, dtype=np.float32), b.fresh(ctx.name + ".bias"))
    x = a
    a8 = acc == 4
    rows = bytes_at_bounds(Value("rows", np.uint8, x.shape[:-1]), ctx.imp.dims)
    scratch = 4 * W4_TILE_OUT * K if not a8 and rows > W4_DIRECT_MAX_ROWS else None
    need_add = bias is not None and b_const is None
    out = ctx.b.fresh(ctx.name) if need_add else ctx.out_name()
    y = b.emit("linear_w4a8" if a8 else "linear_w4a32", [x, vals, scales, zeros, bv],
               [spec(out, F32, list(x.shape[:-1]) + [N])], iattr=[0, N, K, bs, 1], fattr=[0.0, 0.0],
               scratch_bytes=scratch, name=ctx.name)[0]
    if need_add:
        y = binary(ctx, "Add", y, bias, ctx.out_name())
    return y


def _nbits_fallback(ctx: NodeCtx, a: Value, u: np.ndarray, s32: np.ndarray, zp_u: Optional[np.ndarray],
                    zp_float: Optional[np.ndarray], g: Optional[np.ndarray], bits: int, bs: int, K: int, N: int,
                    bias: Optional[Value], b_const: Optional[np.ndarray]) -> Value:
    """The exact fp32 weight (u − zp)·scale through the plain linear (see the module docstring:
    not compressed, but correct)."""
    blk = np.arange(K) // bs if g is None else g
    codes = u[:, :K].astype(np.float32)
    if zp_float is not None:
        zp = zp_float[:, blk]
    elif zp_u is not None:
        zp = zp_u[:, blk].astype(np.float32)
    else:
        zp = np.float32(2 ** (bits - 1))
    w = ((codes - zp) * s32[:, blk]).astype(np.float32)  # [N, K]
    x = a
    if a.rank == 1:
        x = ctx.b.alias(a, [1, a.shape[0]], ctx.b.fresh(ctx.name))
    need_add = bias is not None and b_const is None
    final = a.rank == 1 or need_add
    y = linear(ctx, x, w, b_const, ctx.b.fresh(ctx.name) if final else ctx.out_name())
    if a.rank == 1:
        y = ctx.b.alias(y, [N], ctx.b.fresh(ctx.name) if need_add else ctx.out_name())
    if need_add:
        y = binary(ctx, "Add", y, bias, ctx.out_name())
    return y


# ---------------------------------------------------------------- (De)QuantizeLinear


def _axis_param(ctx: NodeCtx, p: Value, x: Value, axis: int, what: str) -> Value:
    """A per-tensor (scalar or 1-element) or per-axis ([D] along axis) parameter, shaped to
    broadcast against x."""
    if p.rank == 0:
        return p
    if p.rank != 1:
        raise ctx.fail(f"{what} of rank {p.rank} needs block quantization (the block_size attribute)")
    n = p.shape[0]
    if S.is_static(n) and int(n) == 1:
        return ctx.b.alias(p, [], ctx.b.fresh(ctx.name + "." + what))
    ax = norm_axis(ctx, axis, x.rank)
    d = x.shape[ax]
    if S.is_static(n) and S.is_static(d) and int(n) != int(d):
        raise ctx.fail(f"{what} has {n} elements; axis {axis} of the input has {d}")
    return ctx.b.alias(p, [d] + [1] * (x.rank - ax - 1), ctx.b.fresh(ctx.name + "." + what))


def _np_param(ctx: NodeCtx, p: np.ndarray, x_shape, axis: int, block: int, what: str) -> np.ndarray:
    """A constant parameter broadcast (numpy) to x's shape: per tensor, per axis or in blocks."""
    rank = len(x_shape)
    if p.size == 1 and block == 0:
        return p.reshape(())
    ax = norm_axis(ctx, axis, rank)
    if block == 0:
        if p.ndim != 1 or p.shape[0] != x_shape[ax]:
            raise ctx.fail(f"{what} of shape {list(p.shape)} does not match axis {axis} of {list(x_shape)}")
        return p.reshape([p.shape[0]] + [1] * (rank - ax - 1))
    want = list(x_shape)
    want[ax] = -(-x_shape[ax] // block)
    if list(p.shape) != want:
        raise ctx.fail(f"{what} of shape {list(p.shape)} does not match blocks of {block} along axis {axis} of "
                       f"{list(x_shape)} (expected {want})")
    return np.repeat(p, block, axis=ax).take(np.arange(x_shape[ax]), axis=ax)


@handler("DequantizeLinear")
def _dequantize_linear(ctx: NodeCtx, ins):
    ctx.require_attrs(("axis", "block_size", "output_dtype"))
    x, sc = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if sc.dtype.kind != "f":
        raise ctx.fail(f"x_scale must be float, got {sc.dtype}")
    out_dt = sc.dtype
    if ctx.attr("output_dtype", 0):
        out_dt = ctx.dtype_attr("output_dtype")
        if out_dt != sc.dtype:
            raise ctx.fail(f"output_dtype {out_dt} differs from x_scale's {sc.dtype}")
    if x.dtype not in (np.int8, np.uint8, np.int16, np.uint16, np.int32):
        raise ctx.fail(f"x of {x.dtype} is not supported (int8, uint8, int16, uint16, int32)")
    if zp is not None and zp.dtype != x.dtype:
        raise ctx.fail(f"x_zero_point of {zp.dtype} does not match x's {x.dtype}")
    if block < 0:
        raise ctx.fail(f"block_size {block} must be >= 0")
    if x.const is not None and sc.const is not None and (zp is None or zp.const is not None):
        return [_dequantize_const(ctx, x, sc, zp, axis, block, out_dt, ctx.out_name())]
    if block:
        raise ctx.fail("block quantization (block_size) is supported on constant inputs only")
    if out_dt != F32:
        raise ctx.fail(f"a {out_dt} result is supported on constant inputs only (float32 arithmetic)")
    return [_dequantize_runtime(ctx, x, sc, zp, axis, ctx.out_name())]


def _dequantize_runtime(ctx: NodeCtx, x: Value, sc: Value, zp: Optional[Value], axis: int, name: str) -> Value:
    """(x − zp)·scale on a run-time integer x: Cast, Sub of the zero point, Mul by the scale."""
    s = _axis_param(ctx, sc, x, axis, "scale")
    xf = ctx.b.emit("cast", [x], [spec(ctx.b.fresh(ctx.name + ".x"), F32, x.shape)], name=ctx.name)[0]
    if zp is not None and not (zp.const is not None and not np.any(zp.const)):
        z = _axis_param(ctx, zp, x, axis, "zero_point")
        zf = ctx.b.emit("cast", [z], [spec(ctx.b.fresh(ctx.name + ".zp"), F32, z.shape)], name=ctx.name)[0]
        xf = binary(ctx, "Sub", xf, zf, ctx.b.fresh(ctx.name))
    return binary(ctx, "Mul", xf, s, name)


def _dequantize_const(ctx: NodeCtx, x: Value, sc: Value, zp: Optional[Value], axis: int, block: int,
                      out_dt, name: str) -> Value:
    q = x.const
    s = _np_param(ctx, sc.const, q.shape, axis, block, "x_scale")
    z = _np_param(ctx, zp.const, q.shape, axis, block, "x_zero_point") if zp is not None \
        else np.zeros((), q.dtype)
    wide = np.int16 if q.dtype in (np.int8, np.uint8) else np.int64
    d = q.astype(wide) - z.astype(wide)  # the exact integers x − zp
    if q.dtype in (np.int8, np.uint8) and block == 0 and out_dt == F32 and q.ndim >= 1:
        # int8 data: Cast(q) [− zp] · scale on constants -> folded by the builder with the
        # int8 record (module docstring)
        b = ctx.b
        if d.min(initial=0) >= -128 and d.max(initial=0) <= 127:
            qv, zc = d.astype(np.int8), None
        else:
            shift = 128 if q.dtype == np.uint8 else 0  # uint8 -> int8 keeps u − zp
            qv = (q.astype(np.int16) - shift).astype(np.int8)
            zc = (z.astype(np.int64) - shift).astype(np.float32)
        qc = b.const(qv, b.fresh(ctx.name + ".q"))
        y = b.emit("cast", [qc], [spec(b.fresh(ctx.name + ".qf"), F32, qv.shape)], name=ctx.name)[0]
        if zc is not None:
            y = binary(ctx, "Sub", y, b.const(zc, b.fresh(ctx.name + ".zp")), b.fresh(ctx.name))
        # (a weight too large to fold keeps these ops in the plan, as Cast+Mul weights do)
        return binary(ctx, "Mul", y, b.const(s.astype(np.float32), b.fresh(ctx.name + ".scale")), name)
    # onnxruntime: float(x − zp) · scale in fp32 (one rounding; exact integers below 2^24)
    y = (d.astype(np.float32) * s.astype(np.float32)).astype(out_dt)
    return ctx.b.const(np.ascontiguousarray(y), name)


@handler("QuantizeLinear")
def _quantize_linear(ctx: NodeCtx, ins):
    ctx.require_attrs(("axis", "saturate", "block_size", "output_dtype", "precision"))
    x, sc = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if ctx.attr("precision", 0):
        raise ctx.fail("the precision attribute is not supported")
    if x.dtype != F32 or sc.dtype != F32:
        raise ctx.fail(f"QuantizeLinear of {x.dtype} with a {sc.dtype} scale is not supported (float32)")
    out_dt = np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8)
    if ctx.attr("output_dtype", 0):
        want = ctx.dtype_attr("output_dtype")
        if zp is not None and want != out_dt:
            raise ctx.fail(f"output_dtype {want} differs from y_zero_point's {out_dt}")
        out_dt = want
    if out_dt not in (np.int8, np.uint8):
        raise ctx.fail(f"quantizing to {out_dt} is not supported (int8, uint8)")
    if block:
        raise ctx.fail("block quantization (block_size) is not supported")
    return [_quantize(ctx, x, sc, zp, axis, out_dt, ctx.out_name())]


def _quantize(ctx: NodeCtx, x: Value, sc: Value, zp: Optional[Value], axis: int, out_dt, name: str) -> Value:
    """saturate(round_half_even(x / scale) + zp): Div, Round (nearbyintf: half to even), Add,
    then the saturating cast (it clamps to the integer type; the value is already integral)."""
    s = _axis_param(ctx, sc, x, axis, "scale")
    y = binary(ctx, "Div", x, s, ctx.b.fresh(ctx.name))
    y = unary(ctx, _U_ROUND, y, ctx.b.fresh(ctx.name))
    if zp is not None and not (zp.const is not None and not np.any(zp.const)):
        z = _axis_param(ctx, zp, x, axis, "zero_point")
        zf = ctx.b.emit("cast", [z], [spec(ctx.b.fresh(ctx.name + ".zp"), F32, z.shape)], name=ctx.name)[0]
        y = binary(ctx, "Add", y, zf, ctx.b.fresh(ctx.name))
    return ctx.b.emit("cast", [y], [spec(name, out_dt, y.shape)], name=ctx.name)[0]


# ---------------------------------------------------------------- dynamic quantization


@handler("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx: NodeCtx, ins):
    """y = saturate(round(x / s) + zp) with s = (max(x, 0) − min(x, 0)) / 255 and zp =
    round(−min(x, 0) / s) clamped to [0, 255] (uint8, over the whole tensor), as real ops —
    but a product that dequantises y straight back (MatMulIntegerToFloat with this node's
    scale and zero point) reads x instead (Importer.dynamic_quant), so in the usual graph
    these ops are dead and dropped."""
    x = ins[0]
    if x.dtype != F32:
        raise ctx.fail(f"x of {x.dtype} is not supported (float32)")
    b = ctx.b
    flat = b.alias(x, [S.prod(x.shape)], b.fresh(ctx.name + ".flat"))
    zero = b.const(np.array(0.0, F32))

    def extreme(code: int, clamp: str) -> Value:
        r = b.emit("reduce", [flat], [spec(b.fresh(ctx.name), F32, [])], iattr=[code, 1, 0], name=ctx.name)[0]
        return binary(ctx, clamp, r, zero, b.fresh(ctx.name))

    lo, hi = extreme(3, "Min"), extreme(2, "Max")  # ReduceMin/ReduceMax, then with 0 in range
    scale = binary(ctx, "Div", binary(ctx, "Sub", hi, lo, b.fresh(ctx.name)), b.const(np.array(255.0, F32)),
                   ctx.out_name(1))
    zp_f = unary(ctx, 15, binary(ctx, "Div", unary(ctx, 0, lo, b.fresh(ctx.name)), scale, b.fresh(ctx.name)),
                 b.fresh(ctx.name), 0.0, 255.0)  # Clip to [0, 255]
    zp_f = unary(ctx, _U_ROUND, zp_f, b.fresh(ctx.name))
    zp = b.emit("cast", [zp_f], [spec(ctx.out_name(2), np.uint8, [])], name=ctx.name)[0]
    y = _quantize(ctx, x, scale, zp, 0, np.dtype(np.uint8), ctx.out_name(0))
    ctx.imp.dynamic_quant[y.uid] = (x, scale, zp)
    return [y, scale, zp]


def _activation(ctx: NodeCtx, a: Value, scale: Value, zp: Optional[Value], what: str = "A") -> Value:
    """The float activations behind a quantized input (`what` names it in errors): the
    DynamicQuantizeLinear input it was made from (when scale and zero point are that node's),
    else (a − zp)·scale at run time, per tensor."""
    known = ctx.imp.dynamic_quant.get(a.uid)
    if known is not None and known[1] is scale and known[2] is zp:
        return known[0]
    if a.dtype not in (np.int8, np.uint8):
        raise ctx.fail(f"{what} of {a.dtype} is not supported (int8, uint8)")
    if scale.rank > 0 and S.prod(scale.shape) != 1:
        raise ctx.fail(f"a per-row {what} scale (shape {list(scale.shape)}) is not supported: per tensor only")
    return _dequantize_runtime(ctx, a, scale, zp, 0, ctx.b.fresh(f"{ctx.name}.{what}"))


def _product(ctx: NodeCtx, x: Value, w: Value, scale: Value, zp: Optional[Value], bias: Optional[Value],
             name: str) -> Value:
    """x · ((w − zp)·scale) + bias for float x and an integer w [K, N] with a per-tensor or
    per-column ([N]) scale and zero point. A constant w becomes an int8-recorded weight (as
    DequantizeLinear's) under the plain ``linear``, which the precision passes keep int8."""
    if w.dtype not in (np.int8, np.uint8):
        raise ctx.fail(f"B of {w.dtype} is not supported (int8, uint8)")
    if w.rank != 2:
        raise ctx.fail(f"B of rank {w.rank} is not supported (a [K, N] matrix)")
    if x.dtype != F32:
        raise ctx.fail(f"A of {x.dtype} is not supported (float32)")
    if bias is not None and (bias.rank != 1 or (S.is_static(bias.shape[0]) and bias.shape[0] != w.shape[1])):
        raise ctx.fail(f"bias of shape {list(bias.shape)} does not match N = {w.shape[1]}")
    k, n = w.shape
    if S.is_static(x.shape[-1]) and int(x.shape[-1]) != int(k):
        raise ctx.fail(f"inner dimensions differ: A has {x.shape[-1]}, B has {k}")
    const_w = w.const is not None and scale.const is not None and (zp is None or zp.const is not None)
    if const_w and x.rank >= 2:
        wf = _dequantize_const(ctx, w, scale, zp, 1, 0, F32, ctx.b.fresh(ctx.name + ".weight"))
        if wf.const is not None:
            b = bias.const if bias is not None and bias.const is not None else None
            y = linear(ctx, x, wf.const.T, b, name if bias is None or b is not None else ctx.b.fresh(ctx.name))
            return y if bias is None or b is not None else binary(ctx, "Add", y, bias, name)
    else:
        wf = _dequantize_const(ctx, w, scale, zp, 1, 0, F32, ctx.b.fresh(ctx.name + ".weight")) if const_w \
            else _dequantize_runtime(ctx, w, scale, zp, 1, ctx.b.fresh(ctx.name + ".weight"))
    x2 = ctx.b.alias(x, [1, x.shape[0]], ctx.b.fresh(ctx.name)) if x.rank == 1 else x
    shape = list(x2.shape[:-1]) + [n]
    y = ctx.b.emit("matmul", [x2, wf], [spec(ctx.b.fresh(ctx.name), F32, shape)], iattr=[0], fattr=[0, 0],
                   name=ctx.name)[0]
    if bias is not None:
        y = binary(ctx, "Add", y, bias, ctx.b.fresh(ctx.name))
    return ctx.b.alias(y, list(x.shape[:-1]) + [n], name)


def _opt(ins, i: int) -> Optional[Value]:
    return ins[i] if len(ins) > i else None


@handler("MatMulIntegerToFloat", domain="com.microsoft")
def _matmul_integer_to_float(ctx: NodeCtx, ins):
    """Y = ((A − a_zp)·a_scale) · ((B − b_zp)·b_scale) + bias. Computed on float activations:
    onnxruntime's int32 products of the uint8 activations differ from it by their rounding
    (at most a_scale/2 per activation)."""
    a, w, a_scale, w_scale = ins[:4]
    x = _activation(ctx, a, a_scale, _opt(ins, 4))
    return [_product(ctx, x, w, w_scale, _opt(ins, 5), _opt(ins, 6), ctx.out_name())]


@handler("DynamicQuantizeMatMul", domain="com.microsoft")
def _dynamic_quantize_matmul(ctx: NodeCtx, ins):
    """Y = A · ((B − b_zp)·b_scale) + bias on float A (onnxruntime quantizes A to uint8 per
    tensor first: its result carries that rounding, this one does not)."""
    return [_product(ctx, ins[0], ins[1], ins[2], _opt(ins, 3), _opt(ins, 4), ctx.out_name())]


@handler("MatMulInteger")
def _matmul_integer(ctx: NodeCtx, ins):
    """int32 Y = (A − a_zp) · (B − b_zp), per-tensor or per-row a_zp, per-tensor or per-column
    b_zp. A constant 2-D B (what onnxruntime's quantize_dynamic and Optimum export) runs as
    the exact integer op ``matmul_integer`` (u8/s8 rows x int8 weight, int32 sums: onnxruntime's
    integers bit for bit; the weight stays one byte per value). Otherwise the product runs in
    fp32 on the exact integers: exact while every partial sum stays below 2^24 in magnitude,
    else within fp32 rounding of the int32 result (the usual consumer scales it to float)."""
    a, w = ins[0], ins[1]
    a_zp, w_zp = _opt(ins, 2), _opt(ins, 3)
    if a.dtype not in (np.int8, np.uint8):
        raise ctx.fail(f"A of {a.dtype} is not supported (int8, uint8)")
    exact = _matmul_integer_exact(ctx, a, w, a_zp, w_zp)
    if exact is not None:
        return [exact]
    one = ctx.b.const(np.array(1.0, F32))
    x = _dequantize_runtime(ctx, a, one, a_zp, max(a.rank - 2, 0), ctx.b.fresh(ctx.name + ".a"))
    y = _product(ctx, x, w, one, w_zp, None, ctx.b.fresh(ctx.name))
    return ctx.b.emit("cast", [y], [spec(ctx.out_name(), np.int32, y.shape)], name=ctx.name)


def _packed_int8_weight(ctx: NodeCtx, codes: np.ndarray, dtype, zp: Optional[Value], zp_name: str, per: str):
    """(packed weight, int32 zero points or None) for the integer ops' weight q [n, k] given
    as its codes (int64) of `dtype` and a constant zero point per tensor or per output (`per`
    names an output in errors): uint8 codes become u − 128 with the zero point − 128 (the same
    integers u − zp); packed as linear_w8a8's weight by the C op (kernels.h layout)."""
    from .passes import _pack_w8a8  # the packed layout is written by the C op, once

    n = codes.shape[0]
    zq = np.zeros(n, np.int64)
    if zp is not None:
        z = zp.const.astype(np.int64).reshape(-1)
        if z.size not in (1, n):
            raise ctx.fail(f"{zp_name} of shape {list(zp.shape)} is neither per tensor nor per {per} ({n})")
        zq = np.broadcast_to(z, (n,)).copy()
    if dtype == np.uint8:
        codes, zq = codes - 128, zq - 128
    pv = ctx.b.const(_pack_w8a8(np.ascontiguousarray(codes.astype(np.int8))), ctx.b.fresh(ctx.name + ".weight.packed"))
    zv = ctx.b.const(zq.astype(np.int32), ctx.b.fresh(ctx.name + ".weight.zero")) if np.any(zq) else None
    return pv, zv


def _matmul_integer_exact(ctx: NodeCtx, a: Value, w: Value, a_zp: Optional[Value], w_zp: Optional[Value],
                          name: Optional[str] = None):
    """MatMulInteger as op ``matmul_integer`` when B is a constant [K, N] int8/uint8 matrix
    with a constant per-tensor or per-column zero point, K <= W8A8_MAX_K and A is not a
    scalar; None otherwise. B is stored as q [N, K] int8 packed as linear_w8a8's weight
    (uint8 codes as u − 128 with the zero point − 128: the same integers u − zp)."""
    from .passes import W8A8_MAX_K

    if w.const is None or w.rank != 2 or w.dtype not in (np.int8, np.uint8) or a.rank < 1:
        return None
    if w_zp is not None and (w_zp.const is None or w_zp.dtype != w.dtype):
        return None
    k, n = (int(d) for d in w.const.shape)
    if k > W8A8_MAX_K or k == 0 or n == 0:
        return None
    if S.is_static(a.shape[-1]) and int(a.shape[-1]) != k:
        raise ctx.fail(f"inner dimensions differ: A has {a.shape[-1]}, B has {k}")
    if a_zp is not None and a_zp.dtype != a.dtype:
        raise ctx.fail(f"a_zero_point of {a_zp.dtype} does not match A of {a.dtype}")
    pv, zv = _packed_int8_weight(ctx, w.const.astype(np.int64).T, w.dtype, w_zp, "b_zero_point", "column")
    a2 = ctx.b.alias(a, [1, k], ctx.b.fresh(ctx.name)) if a.rank == 1 else a
    shape = list(a2.shape[:-1]) + [n]
    y = ctx.b.emit("matmul_integer", [a2, pv, a_zp, zv], [spec(ctx.b.fresh(ctx.name), np.int32, shape)],
                   iattr=[n, k], name=ctx.name)[0]
    return ctx.b.alias(y, list(a.shape[:-1]) + [n], name or ctx.out_name())


@handler("ConvInteger")
def _conv_integer(ctx: NodeCtx, ins):
    """int32 Y = conv(X − x_zp, W − w_zp) (Conv's attributes), per-tensor x_zp, per-tensor or
    per-output-channel w_zp, W constant. A group-1 1-D or 2-D conv runs as the exact integer
    op ``conv_integer`` (onnxruntime's int32 bit for bit; the weight one byte per value).
    Otherwise (groups) the convolution runs in fp32 on the exact integers: exact while every
    partial sum stays below 2^24 in magnitude, otherwise within fp32 rounding of the int32
    result (the usual consumer scales it to float)."""
    x, w = ins[0], ins[1]
    x_zp, w_zp = _opt(ins, 2), _opt(ins, 3)
    if x.dtype not in (np.int8, np.uint8) or w.dtype not in (np.int8, np.uint8):
        raise ctx.fail(f"X of {x.dtype} and W of {w.dtype} are not supported (int8, uint8)")
    if w.const is None:
        raise ctx.fail("the weights W must be a constant")
    if x_zp is not None and S.prod(x_zp.shape) != 1:
        raise ctx.fail(f"x_zero_point of shape {list(x_zp.shape)} is not supported: per tensor only")
    exact = _conv_integer_exact(ctx, x, w, x_zp, w_zp)
    if exact is not None:
        return [exact]
    return [_conv_on_exact_integers(ctx, x, w, x_zp, w_zp, ctx.out_name())]


def _conv_on_exact_integers(ctx: NodeCtx, x: Value, w: Value, x_zp: Optional[Value], w_zp: Optional[Value],
                            name: str) -> Value:
    """int32 conv(X − x_zp, W − w_zp) computed by the fp32 conv on the exact integers (the
    node's attributes, groups included): exact while every partial sum stays below 2^24."""
    from .onnx_ops import conv

    one = ctx.b.const(np.array(1.0, F32))
    xf = _dequantize_runtime(ctx, x, one, x_zp, 1, ctx.b.fresh(ctx.name + ".x"))
    wf = _dequantize_const(ctx, w, one, w_zp, 0, 0, F32, ctx.b.fresh(ctx.name + ".weight"))
    if wf.const is None:
        raise ctx.fail("W − w_zero_point did not fold to a constant")
    y = conv(ctx, xf, wf, None, ctx.b.fresh(ctx.name))
    return ctx.b.emit("cast", [y], [spec(name, np.int32, y.shape)], name=ctx.name)[0]


CONV_INT_STAGE = 32768  # op_conv.c: a task's staging bytes (so at most CONV_INT_STAGE / 4 outputs)


def _conv_integer_exact(ctx: NodeCtx, x: Value, w: Value, x_zp: Optional[Value], w_zp: Optional[Value],
                        name: Optional[str] = None, requant: Optional[tuple] = None):
    """ConvInteger as op ``conv_integer`` (group 1, 1-D or 2-D, explicit or auto pads, a
    constant per-tensor or per-output-channel w_zp, C·kh·kw <= W8A8_MAX_K); None otherwise.
    W [M, C, kh, kw] is stored as q [M, kh·kw·C] (channel last, as the op stages x) int8
    packed as matmul_integer's (uint8 codes as u − 128, the zero point − 128). A 1-D conv runs
    as 2-D with H = 1. A window of one position that does not fit the op's staging
    (kh·kw·C > 32 KiB) keeps the fp32 route. name: the result's (default: the node's output).
    requant (bias or None, scale [M] or [1] fp32, y_zp or None): requantize in the op, the
    result then bytes of y_zp's dtype (uint8 without one), as op requantize gives them."""
    from .onnx_ops import _auto_pads, conv_out_dim
    from .passes import W8A8_MAX_K

    sr = x.rank - 2
    if sr not in (1, 2) or w.rank != x.rank or ctx.attr("group", 1) != 1:
        return None
    if w_zp is not None and (w_zp.const is None or w_zp.dtype != w.dtype):
        return None
    if x_zp is not None and x_zp.dtype != x.dtype:
        raise ctx.fail(f"x_zero_point of {x_zp.dtype} does not match X of {x.dtype}")
    m = int(w.const.shape[0])
    kernel = [int(d) for d in w.const.shape[2:]]
    kdim = int(np.prod(w.const.shape[1:]))
    if kdim > W8A8_MAX_K or 4 * m > CONV_INT_STAGE or kdim == 0 or m == 0:
        return None
    dil = list(ctx.attr("dilations", [1] * sr))
    reach = int(np.prod([(k - 1) * d + 1 for k, d in zip(kernel, dil)]))  # one position's window
    if reach * int(w.const.shape[1]) > CONV_INT_STAGE:
        return None
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        raise ctx.fail("kernel_shape does not match the weights")
    c = x.shape[1]
    if S.is_static(c) and int(c) != int(w.const.shape[1]):
        raise ctx.fail(f"input has {c} channels, weights expect {int(w.const.shape[1])}")
    strides = list(ctx.attr("strides", [1] * sr))
    pb, pe = _auto_pads(ctx, x.shape[2:], kernel, strides, dil)
    out_sp = [conv_out_dim(ctx, d, k, s_, dl, b_, e_) for d, k, s_, dl, b_, e_ in
              zip(x.shape[2:], kernel, strides, dil, pb, pe)]
    codes = np.moveaxis(w.const.astype(np.int64), 1, -1).reshape(m, kdim)  # K in (i, k, c) order: op_conv.c
    pv, zv = _packed_int8_weight(ctx, codes, w.dtype, w_zp, "w_zero_point", "channel")
    if sr == 1:  # [N, C, W] as [N, C, 1, W]
        x = ctx.b.alias(x, [x.shape[0], x.shape[1], 1, x.shape[2]], ctx.b.fresh(ctx.name))
        kernel, strides, dil, pb, pe, out_sp = [1] + kernel, [1] + strides, [1] + dil, [0] + pb, [0] + pe, [1] + out_sp
    shape = [x.shape[0], m] + out_sp
    ins, out_dt, scratch = [x, pv, x_zp, zv], np.int32, None
    if requant is not None:  # op requantize's inputs, in the op
        params, out_dt = _requant_params(ctx, *requant)
        ins += params
        scratch = S.dim_mul(4, S.prod(shape))  # the staged route's int32 sums (op_conv.c)
    y = ctx.b.emit("conv_integer", ins, [spec(ctx.b.fresh(ctx.name), out_dt, shape)],
                   iattr=[m, int(w.const.shape[1])] + kernel + strides + dil + [pb[0], pb[1], pe[0], pe[1]],
                   scratch_bytes=scratch, name=ctx.name)[0]
    final = [shape[0], m] + (out_sp[1:] if sr == 1 else out_sp)
    return ctx.b.alias(y, final, name or ctx.out_name())


@handler("DynamicQuantizeLSTM", domain="com.microsoft")
def _dynamic_quantize_lstm(ctx: NodeCtx, ins):
    """onnxruntime's LSTM with int8/uint8 weights: W [dirs, input, 4·hidden] and R [dirs,
    hidden, 4·hidden] (the transposes of LSTM's), each with a scale and zero point per
    direction or per (direction, gate column). Both stay int8 in the plan, as the lstm op's
    W8 weights (linear_w8: the product over every step and each step's GEMV read a quarter
    of the bytes of fp32; dequantising W cost ddddocr's 8-step LSTM 8 MB and most of its
    input product's time), uint8 codes shifted to int8 (u − 128, zero point − 128: the same
    integers). Activations stay float; onnxruntime also quantizes X and h per step, so its
    result differs from this one by that rounding."""
    from .onnx_ops_nn import _rnn

    def params(i: int, what: str, params_at: int):
        q, scale, zp = ins[i], _opt(ins, params_at), _opt(ins, params_at + 1)
        if q is None or scale is None or q.const is None or scale.const is None or \
                (zp is not None and zp.const is None):
            raise ctx.fail(f"{what}, its scale and zero point must be constants")
        if q.dtype not in (np.int8, np.uint8) or q.const.ndim != 3:
            raise ctx.fail(f"{what} of {q.dtype} {list(q.shape)} is not supported (int8/uint8 [dirs, rows, 4·hidden])")
        dirs, cols = q.const.shape[0], q.const.shape[2]

        def per(p: np.ndarray, name: str) -> np.ndarray:  # -> [dirs, cols] (the gate rows once transposed)
            if p.shape == (dirs,):
                return np.repeat(p.reshape(dirs, 1), cols, axis=1)
            if p.shape == (dirs, cols):
                return p
            raise ctx.fail(f"{name} of shape {list(p.shape)} is neither [{dirs}] nor [{dirs}, {cols}]")

        z = per(zp.const, what + "_zero_point").astype(np.int64) if zp is not None else np.zeros((dirs, cols), np.int64)
        codes = q.const.astype(np.int64)
        if q.dtype == np.uint8:
            codes, z = codes - 128, z - 128
        return codes.transpose(0, 2, 1), z, per(scale.const, what + "_scale").astype(np.float64)

    def w8(i: int, what: str, params_at: int):
        """(codes [dirs, 4·hidden, cols] int8, per-row scales, per-row offsets or None)"""
        codes, z, s = params(i, what, params_at)
        if codes.min(initial=0) < -128 or codes.max(initial=0) > 127:
            raise ctx.fail(f"{what}'s codes do not fit int8")
        q = ctx.b.const(np.ascontiguousarray(codes).astype(np.int8), ctx.b.fresh(f"{ctx.name}.{what}"))
        scale = ctx.b.const(s.astype(F32), ctx.b.fresh(f"{ctx.name}.{what}_scale"))
        offset = ctx.b.const((-s * z).astype(F32), ctx.b.fresh(f"{ctx.name}.{what}_offset")) if np.any(z) else None
        return q, scale, offset

    # inputs: X W R B sequence_lens initial_h initial_c P W_scale W_zero_point R_scale R_zero_point
    w, w_scale, w_offset = w8(1, "W", 8)
    r, r_scale, r_offset = w8(2, "R", 10)
    fins = [ins[0], w, r] + [_opt(ins, i) for i in range(3, 8)]
    return _rnn(ctx, fins, "LSTM", r_w8=(r_scale, r_offset), w_w8=(w_scale, w_offset))


@handler("QLinearMatMul")
def _qlinear_matmul(ctx: NodeCtx, ins):
    """y = quantize(dequantize(a) · dequantize(b), y_scale, y_zp). With a constant 2-D b and
    constant scales, in onnxruntime's integer arithmetic: the exact int32 product (op
    matmul_integer), then op requantize along the last axis with scale[n] = a_scale·b_scale[n] /
    y_scale in fp32 (onnxruntime's output bit for bit); otherwise the product in float."""
    a, a_scale, a_zp, w, w_scale, w_zp, y_scale, y_zp = ins
    scale = _requant_scale(a_scale, w_scale, y_scale, int(w.shape[-1]) if w.rank == 2 else 0)
    if scale is not None and (y_zp is None or y_zp.const is not None) and a.dtype in (np.int8, np.uint8):
        acc = _matmul_integer_exact(ctx, a, w, a_zp, w_zp, name=ctx.b.fresh(ctx.name + ".acc"))
        if acc is not None:
            return [_requantize(ctx, acc, None, scale, y_zp, -1)]
    x = _activation(ctx, a, a_scale, a_zp)
    y = _product(ctx, x, w, w_scale, w_zp, None, ctx.b.fresh(ctx.name))
    return [_quantize(ctx, y, y_scale, y_zp, 0, np.dtype(y_zp.dtype), ctx.out_name())]


# ---------------------------------------------------------------- QOperator format
# onnxruntime's static quantization in its QOperator format (and the ONNX model zoo's int8
# models) write quantized ops with the scales and zero points as inputs. Each is computed as
# its definition reads: dequantize the inputs, the float op (the node's attributes), quantize
# the result; onnxruntime's integer arithmetic rounds differently, so a value may land one
# quantization step away from its output.


def _bias_of_int32(ctx: NodeCtx, bias: Value, x_scale: Value, w_scale: Value, n: int) -> Value:
    """The float bias of an int32 one quantized at x_scale·w_scale (per tensor or per output)."""
    if bias.const is None or x_scale.const is None:
        raise ctx.fail("the int32 bias and the input's scale must be constants")
    per_output = np.broadcast_to(np.asarray(w_scale.const, np.float64).reshape(-1), (n,))
    b = bias.const.astype(np.float64) * float(np.asarray(x_scale.const).reshape(-1)[0]) * per_output
    return ctx.b.const(b.astype(F32), ctx.b.fresh(ctx.name + ".bias"))


def _requantized(ctx: NodeCtx, y: Value, scale: Value, zp: Optional[Value]) -> Value:
    return _quantize(ctx, y, scale, zp, 0, np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8),
                     ctx.out_name())


@handler("QLinearConv")
def _qlinear_conv(ctx: NodeCtx, ins):
    """y = quantize(conv(dequantize(x), dequantize(w)) + B·x_scale·w_scale): W constant with a
    per-tensor or per-output-channel scale/zero point, B (int32) optional."""
    from .onnx_ops import conv

    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = ins[:8]
    bias = _opt(ins, 8)
    if w.dtype not in (np.int8, np.uint8) or w.const is None or w_scale.const is None or \
            (w_zp is not None and w_zp.const is None):
        raise ctx.fail("the weights, their scale and zero point must be int8/uint8 constants")
    exact = _qlinear_conv_exact(ctx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias)
    if exact is not None:
        return [exact]
    xf = _activation(ctx, x, x_scale, x_zp, "x")
    wf = _dequantize_const(ctx, w, w_scale, w_zp, 0, 0, F32, ctx.b.fresh(ctx.name + ".weight"))
    b = _bias_of_int32(ctx, bias, x_scale, w_scale, int(w.shape[0])) if bias is not None else None
    return [_requantized(ctx, conv(ctx, xf, wf, b, ctx.b.fresh(ctx.name)), y_scale, y_zp)]


def _qlinear_conv_exact(ctx: NodeCtx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias):
    """QLinearConv in onnxruntime's integer arithmetic: the exact int32 conv requantized with
    scale[m] = x_scale·w_scale[m] / y_scale in fp32 (as onnxruntime computes it), the bias
    added in int32. Group 1: op conv_integer with the requantization inside (its bytes are op
    requantize's; a pointwise conv's sums never reach memory as int32); depthwise (one output
    per channel): op depthwise_integer, bytes in and out; another grouped one: the fp32 conv
    on the exact integers while that is exact, then op requantize.
    None when a scale is not a finite positive constant or the sums could leave fp32's exact
    range: the float route then."""
    if (y_zp is not None and y_zp.const is None) or x.dtype not in (np.int8, np.uint8) or \
            (bias is not None and (bias.const is None or bias.dtype != np.int32)):
        return None
    scale = _requant_scale(x_scale, w_scale, y_scale, int(w.shape[0]))
    if scale is None:
        return None
    fused = _conv_integer_exact(ctx, x, w, x_zp, w_zp, requant=(bias, scale, y_zp))
    if fused is not None:
        return fused
    depthwise = _depthwise_integer(ctx, x, w, x_zp, w_zp, (bias, scale, y_zp))
    if depthwise is not None:
        return depthwise
    # other grouped convs: the fp32 conv on the exact integers is exact while each output's
    # taps x 255² stay below 2^24 (at most 258 taps), and its depthwise kernels are fast
    if int(np.prod(w.const.shape[1:])) * 255 * 255 >= 1 << 24:  # W and w_zp: constants (checked)
        return None
    acc = _conv_on_exact_integers(ctx, x, w, x_zp, w_zp, ctx.b.fresh(ctx.name + ".acc"))
    return _requantize(ctx, acc, bias, scale, y_zp, 1)


DWQ8_MAX_REACH, DWQ8_MAX_STRIDE = 16, 4  # kernels.h NRV_DWQ8_MAX_REACH / NRV_DWQ8_MAX_STRIDE
# Output rows at least this wide take op depthwise_integer. In an int8 MobileNetV2 (one thread,
# AVX-512; op time in the session's profile against the four passes of the fp32 route, µs):
# 32 ch at 112x112 332 -> 205, 96 ch 112 -> 56 stride 2 581 -> 375, 144 ch at 56x56 400 -> 235,
# 144 ch 56 -> 28 stride 2 169 -> 120, 192 ch at 28x28 120 -> 97; but 14 wide 56-95 -> 64-111
# and 7 wide 54 -> 110, where the fp32 depthwise kernels vectorise across channels and this
# op along a plane's rows.
DWQ8_MIN_OUT_WIDTH = 28


def _depthwise_integer(ctx: NodeCtx, x: Value, w: Value, x_zp: Optional[Value], w_zp: Optional[Value],
                       requant: tuple) -> Optional[Value]:
    """A depthwise QLinearConv (group = channels = outputs, 1-D or 2-D) as op
    ``depthwise_integer``: x's codes in, y's out in one pass, the taps W − w_zp as exact float
    integers [M, kh·kw], the requantization (bias, scale, y_zp) op requantize's. None when the
    conv is not depthwise, w_zp is not a constant, the kernel reaches further than the op
    takes or the output rows are narrower than DWQ8_MIN_OUT_WIDTH (the fp32 route then)."""
    from .onnx_ops import _auto_pads, conv_out_dim

    sr = x.rank - 2
    m, group = int(w.const.shape[0]), int(ctx.attr("group", 1))
    if sr not in (1, 2) or w.rank != x.rank or group != m or int(w.const.shape[1]) != 1 or \
            not (S.is_static(x.shape[1]) and int(x.shape[1]) == m):
        return None
    if w_zp is not None and (w_zp.const is None or w_zp.dtype != w.dtype):
        return None
    if x_zp is not None and x_zp.dtype != x.dtype:
        raise ctx.fail(f"x_zero_point of {x_zp.dtype} does not match X of {x.dtype}")
    kernel = [int(d) for d in w.const.shape[2:]]
    strides, dil = list(ctx.attr("strides", [1] * sr)), list(ctx.attr("dilations", [1] * sr))
    if any((k - 1) * d + 1 > DWQ8_MAX_REACH for k, d in zip(kernel, dil)) or max(strides) > DWQ8_MAX_STRIDE:
        return None
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        raise ctx.fail("kernel_shape does not match the weights")
    z = np.zeros(m, np.int64) if w_zp is None else w_zp.const.astype(np.int64).reshape(-1)
    if z.size not in (1, m):
        raise ctx.fail(f"w_zero_point of shape {list(w_zp.shape)} is neither per tensor nor per channel ({m})")
    taps = w.const.reshape(m, -1).astype(np.int64) - np.broadcast_to(z, (m,))[:, None]
    pb, pe = _auto_pads(ctx, x.shape[2:], kernel, strides, dil)
    out_sp = [conv_out_dim(ctx, d, k, s_, dl, b_, e_) for d, k, s_, dl, b_, e_ in
              zip(x.shape[2:], kernel, strides, dil, pb, pe)]
    if not (S.is_static(out_sp[-1]) and int(out_sp[-1]) >= DWQ8_MIN_OUT_WIDTH):
        return None
    if sr == 1:  # [N, C, W] as [N, C, 1, W]
        x = ctx.b.alias(x, [x.shape[0], x.shape[1], 1, x.shape[2]], ctx.b.fresh(ctx.name))
        kernel, strides, dil, pb, pe, out_sp = [1] + kernel, [1] + strides, [1] + dil, [0] + pb, [0] + pe, [1] + out_sp
    wv = ctx.b.const(taps.astype(F32), ctx.b.fresh(ctx.name + ".taps"))
    params, out_dt = _requant_params(ctx, *requant)
    shape = [x.shape[0], m] + out_sp
    y = ctx.b.emit("depthwise_integer", [x, wv, x_zp] + params, [spec(ctx.b.fresh(ctx.name), out_dt, shape)],
                   iattr=kernel + strides + dil + [pb[0], pb[1], pe[0], pe[1]], name=ctx.name)[0]
    return ctx.b.alias(y, [shape[0], m] + (out_sp[1:] if sr == 1 else out_sp), ctx.out_name())


def _requant_scale(x_scale: Value, w_scale: Value, y_scale: Value, n: int) -> Optional[np.ndarray]:
    """x_scale·w_scale[i] / y_scale in fp32, as onnxruntime computes its requantization
    scales (per tensor or per output, n outputs); None unless all three are constants, finite
    and > 0, and w_scale has 1 or n values."""
    if any(v is None or v.const is None for v in (x_scale, w_scale, y_scale)) or n <= 0:
        return None
    ws = np.asarray(w_scale.const, np.float32).reshape(-1)
    xs, ys = np.float32(np.asarray(x_scale.const).reshape(-1)[0]), np.float32(np.asarray(y_scale.const).reshape(-1)[0])
    if ws.size not in (1, n) or not (np.all(np.isfinite(ws)) and np.all(ws > 0) and np.isfinite(xs) and xs > 0
                                     and np.isfinite(ys) and ys > 0):
        return None
    return ((xs * ws).astype(np.float32) / ys).astype(np.float32)


def _requant_params(ctx: NodeCtx, bias: Optional[Value], scale: np.ndarray, y_zp: Optional[Value]):
    """The requantization's inputs as ops requantize and conv_integer take them ([bias or None,
    scale, y_zp or None]) and the output dtype (y_zp's; uint8 without one)."""
    out_dt = np.dtype(y_zp.dtype) if y_zp is not None else np.dtype(np.uint8)
    b = ctx.b.const(bias.const.reshape(-1), ctx.b.fresh(ctx.name + ".bias")) if bias is not None else None
    return [b, ctx.b.const(scale, ctx.b.fresh(ctx.name + ".scale")), y_zp], out_dt


def _requantize(ctx: NodeCtx, acc: Value, bias: Optional[Value], scale: np.ndarray, y_zp: Optional[Value],
                axis: int) -> Value:
    """The node's output: op requantize of the int32 sums acc (+ the int32 bias) along axis."""
    params, out_dt = _requant_params(ctx, bias, scale, y_zp)
    return ctx.b.emit("requantize", [acc] + params, [spec(ctx.out_name(), out_dt, acc.shape)], iattr=[axis],
                      name=ctx.name)[0]


def _qlinear_elementwise(ctx: NodeCtx, ins, float_op: str, **attrs):
    """com.microsoft QLinear{Add,Mul}: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    a = _activation(ctx, ins[0], ins[1], _opt(ins, 2), "A")
    b = _activation(ctx, ins[3], ins[4], _opt(ins, 5), "B")
    return [_requantized(ctx, ctx.call(float_op, [a, b], **attrs)[0], ins[6], _opt(ins, 7))]


@handler("QLinearAdd", domain="com.microsoft")
def _qlinear_add(ctx: NodeCtx, ins):
    return _qlinear_elementwise(ctx, ins, "Add")


@handler("QLinearMul", domain="com.microsoft")
def _qlinear_mul(ctx: NodeCtx, ins):
    return _qlinear_elementwise(ctx, ins, "Mul")


def _qlinear_unary(ctx: NodeCtx, ins, float_op: str, **attrs):
    """(X, X_scale, X_zp, Y_scale, Y_zp) around one float op with the node's attributes."""
    x = _activation(ctx, ins[0], ins[1], _opt(ins, 2), "X")
    return [_requantized(ctx, ctx.call(float_op, [x], **attrs)[0], ins[3], _opt(ins, 4))]


@handler("QLinearSigmoid", domain="com.microsoft")
def _qlinear_sigmoid(ctx: NodeCtx, ins):
    return _qlinear_unary(ctx, ins, "Sigmoid")


@handler("QLinearLeakyRelu", domain="com.microsoft")
def _qlinear_leaky_relu(ctx: NodeCtx, ins):
    return _qlinear_unary(ctx, ins, "LeakyRelu", alpha=float(ctx.attr("alpha", 0.01)))


@handler("QLinearSoftmax", domain="com.microsoft")
def _qlinear_softmax(ctx: NodeCtx, ins):
    """(X, X_scale, X_zp, Y_scale, Y_zp; axis, opset): what onnxruntime's quantizer writes for
    a classifier's final Softmax. `opset` is the Softmax's own: below 13 it normalises the
    flattened [axis:] block (default axis 1), from 13 one axis (default -1)."""
    ctx.require_attrs(("axis", "opset"))
    softmax_opset = int(ctx.attr("opset", ctx.opset))
    axis = int(ctx.attr("axis", -1 if softmax_opset >= 13 else 1))
    x = _activation(ctx, ins[0], ins[1], _opt(ins, 2), "X")
    p = ctx.call("Softmax", [x], as_opset=softmax_opset, axis=axis)[0]
    return [_requantized(ctx, p, ins[3], _opt(ins, 4))]


@handler("QLinearGlobalAveragePool", domain="com.microsoft")
def _qlinear_global_average_pool(ctx: NodeCtx, ins):
    if ctx.attr("channels_last", 0):
        raise ctx.fail("channels_last is not supported")
    return _qlinear_unary(ctx, ins, "GlobalAveragePool")


@handler("QLinearAveragePool", domain="com.microsoft")
def _qlinear_average_pool(ctx: NodeCtx, ins):
    if ctx.attr("channels_last", 0):
        raise ctx.fail("channels_last is not supported")
    return _qlinear_unary(ctx, ins, "AveragePool", **{k: v for k, v in ctx.attrs.items() if k != "channels_last"})


@handler("QLinearConcat", domain="com.microsoft")
def _qlinear_concat(ctx: NodeCtx, ins):
    """(Y_scale, Y_zp, then (X, X_scale, X_zp) per input; axis)."""
    if (len(ins) - 2) % 3 or len(ins) < 5:
        raise ctx.fail(f"expected Y_scale, Y_zero_point and triplets of inputs, got {len(ins)} inputs")
    parts = [_activation(ctx, ins[i], ins[i + 1], ins[i + 2], f"X{(i - 2) // 3}") for i in range(2, len(ins), 3)]
    return [_requantized(ctx, ctx.call("Concat", parts, axis=int(ctx.attr("axis")))[0], ins[0], ins[1])]


@handler("QGemm", domain="com.microsoft")
def _qgemm(ctx: NodeCtx, ins):
    """(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): alpha·dequantize(A)·
    dequantize(B) (transA/transB) + C·a_scale·b_scale (C int32), quantized when y_scale is
    given, else float. B constant, per tensor or per output column."""
    ctx.require_attrs(("alpha", "transA", "transB"))
    a, a_scale, a_zp, w, w_scale, w_zp = ins[:6]
    c, y_scale, y_zp = _opt(ins, 6), _opt(ins, 7), _opt(ins, 8)
    tb = int(ctx.attr("transB", 0))
    if w.dtype not in (np.int8, np.uint8) or w.const is None or w_scale.const is None or \
            (w_zp is not None and w_zp.const is None) or w.rank != 2:
        raise ctx.fail("B, its scale and zero point must be int8/uint8 constants (B a matrix)")
    af = _activation(ctx, a, a_scale, a_zp)
    wf = _dequantize_const(ctx, w, w_scale, w_zp, 0 if tb else 1, 0, F32, ctx.b.fresh(ctx.name + ".weight"))
    gemm_in = [af, wf]
    if c is not None:
        gemm_in.append(_bias_of_int32(ctx, c, a_scale, w_scale, int(w.shape[0] if tb else w.shape[1])))
    y = ctx.call("Gemm", gemm_in, alpha=float(ctx.attr("alpha", 1.0)), transA=int(ctx.attr("transA", 0)),
                 transB=tb)[0]
    if y_scale is None:
        return [ctx.b.alias(y, y.shape, ctx.out_name())]
    return [_requantized(ctx, y, y_scale, y_zp)]
