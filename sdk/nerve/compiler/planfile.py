"""Serialises a :class:`~nerve.compiler.graph.Program` to the ``.nrv`` plan format.

The format is defined once, in ``native/src/plan/plan_internal.h`` (and described in
``docs/PLAN_FORMAT.md``); the C loader is the only reader and checks everything. This module
only writes it.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Dict, List

import numpy as np

from . import symbolic as S
from .graph import CompileError, Label, Program, SymbolRef, dtype_code
from .memplan import MemoryPlan, bytes_at_bounds, plan_memory

MAGIC = b"NRVPLAN\0"
VERSION = 4
HEADER_BYTES = 96


class _Strings:
    def __init__(self):
        self.items: List[str] = []
        self.index: Dict[str, int] = {}

    def __call__(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.items)
            self.items.append(s)
        return self.index[s]


MAX_RANK = 8  # nerve.h NRV_MAX_RANK


def serialize(prog: Program, mp: MemoryPlan = None) -> bytes:
    """The plan file's bytes for prog (memory planned here unless mp is given)."""
    if mp is None:
        mp = plan_memory(prog)
    strings = _Strings()
    symbols = list(prog.symbols)
    exprs = S.ExprTable(symbols)
    ops = [op for op in prog.ops if op.type != "label"]

    # label -> pc of the next real op
    label_pc: Dict[int, int] = {}
    pc = 0
    for op in prog.ops:
        if op.type == "label":
            label_pc[id(op.iattr[0])] = pc
        else:
            pc += 1

    # tensors: every value the program touches, in first-seen order
    tensor_id: Dict[int, int] = {}
    tensors = []

    def tid(v) -> int:
        if v is None:
            return -1
        if v.uid not in tensor_id:
            tensor_id[v.uid] = len(tensors)
            tensors.append(v)
        return tensor_id[v.uid]

    for v in prog.inputs:
        tid(v)
    op_records = []
    for op in ops:
        ins = [tid(v) for v in op.inputs]
        outs = [tid(v) for v in op.outputs]
        scratch = tid(op.scratch)
        iattr = []
        for a in op.iattr:
            if isinstance(a, Label):
                if id(a) not in label_pc:
                    raise CompileError(f"internal: jump to a label that is not in the program ({a.name})")
                iattr.append(label_pc[id(a)])
            elif isinstance(a, SymbolRef):
                iattr.append(symbols.index(a.name))
            else:
                iattr.append(int(a))
        dattr = [exprs.ref(d) for d in op.dattr]
        op_records.append((op, ins, outs, scratch, iattr, dattr))
    for v in prog.outputs:
        tid(v)

    # dims of every tensor (may add expressions), so encode before writing the expression table
    tensor_recs = []
    for v in tensors:
        if v.rank > MAX_RANK:
            made_by = f" (made by node '{v.producer.name}')" if v.producer is not None and v.producer.name else ""
            raise CompileError(f"tensor '{v.name}'{made_by} has rank {v.rank}; the runtime holds at most {MAX_RANK}")
        pl = mp.placements[v.uid]
        dims = [exprs.ref(d) for d in v.shape]
        tensor_recs.append((v, pl, dims))

    # binds: each symbol taken from the first input axis that is exactly that symbol
    binds = []
    for i, v in enumerate(prog.inputs):
        for axis, d in enumerate(v.shape):
            if not S.is_static(d):
                names = S.symbols_of(d)
                if len(names) == 1 and d == S.sym(next(iter(names))):
                    binds.append((i, axis, symbols.index(next(iter(names)))))
    bound = {b[2] for b in binds}
    set_by_data = {symbols.index(a.name) for op in ops if op.type == "set_dim" for a in op.iattr}
    if bound & set_by_data:
        raise CompileError(f"internal: dimension(s) {sorted(symbols[k] for k in bound & set_by_data)} are both "
                           "an input's size and set by the data")
    bound |= set_by_data
    for k, name in enumerate(symbols):
        if k not in bound:
            raise CompileError(f"dimension '{name}' is not the size of any input axis, so a run cannot bind it")

    out = bytearray()
    p32 = lambda x: out.extend(struct.pack("<I", x))  # noqa: E731
    pi32 = lambda x: out.extend(struct.pack("<i", x))  # noqa: E731
    p64 = lambda x: out.extend(struct.pack("<Q", x))  # noqa: E731
    pi64 = lambda x: out.extend(struct.pack("<q", x))  # noqa: E731

    # strings are referenced by everything below: collect them first
    sym_names = [strings(s) for s in symbols]
    t_names = [strings(v.name) for v in tensors]
    op_names = [(strings(op.type), strings(op.name or op.type)) for op, *_ in op_records]

    p32(len(strings.items))
    for s in strings.items:
        b = s.encode("utf-8")
        p32(len(b))
        out.extend(b)
    p32(len(symbols))
    for k, s in enumerate(symbols):
        p32(sym_names[k])
        pi64(int(prog.symbols[s]))
    p32(len(exprs.programs))
    for code in exprs.programs:
        p32(len(code))
        for opc, arg in code:
            pi64(opc)
            pi64(arg)

    blobs = []
    woff = 0
    p32(len(mp.weights))
    for w in mp.weights:
        code = dtype_code(w.dtype)  # first: a dtype the runtime does not hold (strings) is a CompileError
        # the weight's bytes as a view (no copy: a plan's weights are most of its bytes, and
        # copying them three times was half of a ResNet-50 compile)
        b = memoryview(np.ascontiguousarray(w.const, dtype=w.dtype).reshape(-1).view(np.uint8))
        p64(woff)
        p64(len(b))
        p32(code)
        p32(code)
        out.extend(hashlib.sha256(b).digest())  # verified at load; shares identical weights
        blobs.append((woff, b))
        woff = (woff + len(b) + 63) // 64 * 64

    p32(len(tensor_recs))
    for k, (v, pl, dims) in enumerate(tensor_recs):
        cap = bytes_at_bounds(v, prog.symbols)
        if cap >= 2 ** 63:
            raise CompileError(f"tensor '{v.name}' would need {cap} bytes at the dims' bounds: too large to plan")
        p32(t_names[k])
        out.extend(struct.pack("<BBBB", dtype_code(v.dtype), len(dims), pl.storage, 0))
        pi32(pl.ref)
        p64(pl.offset)
        p64(cap)
        for d in dims:
            pi64(d)

    p32(len(prog.inputs))
    for v in prog.inputs:
        p32(tensor_id[v.uid])
    p32(len(binds))
    for b in binds:
        for x in b:
            p32(x)
    p32(len(prog.outputs))
    for v in prog.outputs:
        p32(tensor_id[v.uid])
    p32(len(prog.states))
    for pair in prog.states:  # (input, output[, flags]); flags: kv_append.STATE_APPEND
        p32(pair[0])
        p32(pair[1])
        p32(pair[2] if len(pair) > 2 else 0)
    p64(mp.arena_bytes)

    p32(len(op_records))
    for k, (op, ins, outs, scratch, iattr, dattr) in enumerate(op_records):
        p32(op_names[k][0])
        p32(op_names[k][1])
        out.extend(struct.pack("<HHHHHH", len(ins), len(outs), len(iattr), len(op.fattr), len(dattr), 0))
        pi32(scratch)
        for x in ins:
            pi32(x)
        for x in outs:
            pi32(x)
        for x in iattr:
            pi64(x)
        for x in op.fattr:
            out.extend(struct.pack("<f", float(x)))
        for x in dattr:
            pi64(x)

    # the file in one buffer: header, metadata (zero-padded to 64), then the weights at their
    # offsets; the header's digest covers the metadata and its padding
    meta_off = HEADER_BYTES
    w_off = (meta_off + len(out) + 63) // 64 * 64
    total = w_off + woff
    buf = bytearray(total)
    buf[meta_off:meta_off + len(out)] = out
    view = memoryview(buf)
    digest = hashlib.sha256(view[meta_off:w_off]).digest()  # metadata (with the weights' digests)
    for off, b in blobs:
        view[w_off + off:w_off + off + len(b)] = b
    header = MAGIC + struct.pack("<IIQQQQQ", VERSION, HEADER_BYTES, total, meta_off, len(out), w_off, woff)
    header += digest + b"\0" * 8
    assert len(header) == HEADER_BYTES
    view[:HEADER_BYTES] = header
    view.release()
    return bytes(buf)
