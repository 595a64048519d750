"""QDQ models in onnxruntime's integer arithmetic.

A QDQ model (``quantize_static``'s default format, and what TFLite/TensorFlow converters
write) marks each quantized product as DequantizeLinear → Conv / MatMul → QuantizeLinear.
onnxruntime fuses each such triple into its integer kernel (QLinearConv, QLinearMatMul) and
so computes it in integers; nerve rewrites the same triples into the QOperator node before
import, so they run as conv_integer / matmul_integer + requantize (onnx_ops_quant.py) with
onnxruntime's bits, instead of as a float product between two fake-quant passes.

A triple is rewritten only when it means exactly the QOperator node:
  * the product's output is read by one QuantizeLinear and nothing else (no graph output);
  * its float input is a DequantizeLinear of an int8/uint8 tensor with a per-tensor constant
    scale (and zero point);
  * its weight is a DequantizeLinear of a constant int8/uint8 tensor (Conv: per tensor or
    per output channel, axis 0; MatMul: a 2-D weight, per tensor or per column, axis 1);
  * Conv's bias, when present, is a DequantizeLinear of a constant int32 tensor whose scale is
    x_scale·w_scale (fp32) with no (or a zero) zero point — what the quantizers write;
  * the QuantizeLinear's scale and zero point are per-tensor constants of the input's type.
A MaxPool between a DequantizeLinear and a QuantizeLinear of one scale becomes the MaxPool
of the codes (_max_pool_of_codes: exact).
Everything else is left as it is (its Q/DQ pairs run as fake_quant, as before).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

_INT8 = (2, 3)  # onnx TensorProto.UINT8, INT8


def _consts(graph) -> Dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {}
    for t in graph.initializer:
        if t.data_location == 0:  # external data is read later by the importer: not rewritten here
            out[t.name] = numpy_helper.to_array(t)
    for n in graph.node:
        if n.op_type == "Constant" and n.output and len(n.attribute) == 1 and n.attribute[0].name == "value":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def rewrite_qdq(graph) -> Optional[list]:
    """graph's nodes with its DQ → Conv/MatMul → Q triples (module docstring) rewritten into
    QLinearConv / QLinearMatMul nodes, or None when there are none; graph itself is not
    changed (the product and the QuantizeLinear are dropped from the list, the
    DequantizeLinears kept: others may read them, and unread ones are never computed)."""
    from onnx import helper

    consts = _consts(graph)
    producer: Dict[str, object] = {}
    readers: Dict[str, List[object]] = {}
    for n in graph.node:
        for o in n.output:
            producer[o] = n
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}

    def dq_of(name: str):
        n = producer.get(name)
        return n if n is not None and n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") else None

    def scalar(name: str, want_float: bool) -> bool:
        v = consts.get(name)
        return v is not None and v.size == 1 and (v.dtype == np.float32) == want_float

    def axis_of(n) -> int:
        for a in n.attribute:
            if a.name == "axis":
                return a.i
        return 1

    replaced: Dict[int, object] = {}  # id(Q node) -> its replacement
    dropped = set()
    for node in graph.node:
        if node.op_type not in ("Conv", "MatMul") or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        y = node.output[0]
        rd = readers.get(y, [])
        if y in outputs or len(rd) != 1 or rd[0].op_type != "QuantizeLinear":
            continue
        q = rd[0]
        dx, dw = dq_of(node.input[0]), dq_of(node.input[1])
        if dx is None or dw is None or len(q.input) < 2:
            continue
        ys, yz = q.input[1], q.input[2] if len(q.input) > 2 else ""
        xs, xz = dx.input[1], dx.input[2] if len(dx.input) > 2 else ""
        ws, wz = dw.input[1], dw.input[2] if len(dw.input) > 2 else ""
        w = consts.get(dw.input[0])
        if w is None or w.dtype not in (np.int8, np.uint8) or not scalar(xs, True) or not scalar(ys, True):
            continue
        if not xz or not yz or not scalar(xz, False) or not scalar(yz, False):
            continue  # the zero points give the types: both present, as the quantizers write them
        if consts[xz].dtype != consts[yz].dtype:
            continue
        wsv = consts.get(ws)
        if wsv is None or wsv.dtype != np.float32 or (wz and consts.get(wz) is None):
            continue
        out_ch = w.shape[0] if node.op_type == "Conv" else (w.shape[1] if w.ndim == 2 else -1)
        per_axis = 0 if node.op_type == "Conv" else 1
        if wsv.size != 1 and (wsv.size != out_ch or axis_of(dw) % max(w.ndim, 1) != per_axis):
            continue
        if node.op_type == "MatMul" and w.ndim != 2:
            continue
        ins = [dx.input[0], xs, xz, dw.input[0], ws, wz, ys, yz]
        if node.op_type == "Conv" and len(node.input) > 2 and node.input[2]:
            db = dq_of(node.input[2])
            b = consts.get(db.input[0]) if db is not None else None
            bs = consts.get(db.input[1]) if db is not None and len(db.input) > 1 else None
            bz = consts.get(db.input[2]) if db is not None and len(db.input) > 2 and db.input[2] else None
            if b is None or b.dtype != np.int32 or bs is None or (bz is None and len(db.input) > 2 and db.input[2]) \
                    or (bz is not None and np.any(bz)):
                continue
            want = (np.float32(consts[xs].reshape(-1)[0]) * wsv.reshape(-1).astype(np.float32)).astype(np.float32)
            if bs.size not in (1, want.size) or not np.allclose(bs.reshape(-1).astype(np.float32), want, rtol=1e-6,
                                                                  atol=0):
                continue
            ins.append(db.input[0])
        if node.op_type == "Conv":
            new = helper.make_node("QLinearConv", ins, [q.output[0]], name=(node.name or y) + ".qlinear")
            new.attribute.extend(node.attribute)
        else:
            new = helper.make_node("QLinearMatMul", ins, [q.output[0]], name=(node.name or y) + ".qlinear")
        replaced[id(q)] = new
        dropped.add(id(node))
    for node in graph.node:  # DQ → MaxPool → Q at one scale: MaxPool of the codes
        new = _max_pool_of_codes(node, readers, outputs, dq_of, consts)
        if new is not None:
            replaced[id(readers[node.output[0]][0])] = new
            dropped.add(id(node))
    if not replaced:
        return None
    return [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]


def _max_pool_of_codes(node, readers, outputs, dq_of, consts):
    """A MaxPool between a DequantizeLinear and a QuantizeLinear of the same per-tensor scale
    and zero point (what the quantizers write around a max pool) -> the MaxPool of the codes
    themselves, as onnxruntime's graph optimizer drops that pair too. Exact: (c − z)·s rises
    with c for s > 0, so the max of the dequantized window is the dequantized max code, and
    quantizing (c − z)·s at the same s gives c back (its relative error, 2^-23 at most, is far
    below the half step that rounding forgives); an empty window gives the lowest code both
    ways. The float route cast, pooled and quantized 4-byte values."""
    from onnx import helper

    if node.op_type != "MaxPool" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    rd = readers.get(node.output[0], [])
    dq = dq_of(node.input[0])
    if node.output[0] in outputs or len(rd) != 1 or rd[0].op_type != "QuantizeLinear" or dq is None:
        return None
    q = rd[0]
    if len(q.input) < 3 or len(dq.input) < 3 or not q.input[2] or not dq.input[2]:
        return None  # the zero points give the types: both present, as the quantizers write them
    xs, ys, xz, yz = (consts.get(n) for n in (dq.input[1], q.input[1], dq.input[2], q.input[2]))
    if any(v is None or v.size != 1 for v in (xs, ys, xz, yz)) or xs.dtype != np.float32 or ys.dtype != np.float32:
        return None
    if xz.dtype != yz.dtype or xz.dtype not in (np.uint8, np.int8) or xz.reshape(-1)[0] != yz.reshape(-1)[0] \
            or not xs.reshape(-1)[0] == ys.reshape(-1)[0] or not xs.reshape(-1)[0] > 0:
        return None
    new = helper.make_node("MaxPool", [dq.input[0]], [q.output[0]], name=(node.name or node.output[0]) + ".codes")
    new.attribute.extend(node.attribute)
    return new
