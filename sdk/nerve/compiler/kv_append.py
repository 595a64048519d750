"""Key/value caches appended in place.

A decoder exported with past/present keys and values computes, per layer and per step,
``present = Concat(past, new, axis=-2)`` over ``[1, H, S, D]`` tensors and carries
``present`` into the next step's ``past``. Given that pair as a session state
(``state={"present...": "past..."}``), this pass turns the concat into ``kv_append`` and
flags the pair NRV_STATE_APPEND: the session then keeps one buffer per cache, preallocated
for the longest sequence the plan allows, stored sequence-major (``[S, H, D]``), and each
step writes only the new token's H x D values — no copy of the cache per token, no second
buffer. The readers of ``present`` must be matmuls taking it as B (attention's ``q·Kᵀ`` with
the transpose already folded, and ``p·V``); they read the interleaved layout directly
(matmul ``b_interleaved``). A pair whose cache has any other reader is left as it is.

A cache of fixed length written by ONNX TensorScatter (opset 24: ``present =
TensorScatter(past, new, write_indices)``) needs no new layout: when the op is the only
reader of ``past``, the pair is flagged the same way, so ``past`` and ``present`` share one
buffer and each step writes only its rows (op tensor_scatter copies nothing when they are one
buffer), instead of copying the whole cache into a second one. Writing the same rows again
gives the same cache, so a run that fails after the write and is repeated leaves it right.
"""

from __future__ import annotations

from typing import Dict, List

from . import symbolic as S
from .graph import Op, Program, Value

STATE_APPEND = 1  # NRV_STATE_APPEND (native/src/plan/plan_internal.h)


def _readers(prog: Program) -> Dict[int, List[Op]]:
    readers: Dict[int, List[Op]] = {}
    for op in prog.ops:
        for v in op.inputs:
            while v is not None:  # a reader of an alias reads its base too
                readers.setdefault(v.uid, []).append(op)
                v = v.alias_of
    return readers


def _is_graph_output(prog: Program, v: Value) -> bool:
    """Whether v, or a view of it, is one of the graph's outputs (which would show the
    shared buffer's bytes after the run)."""
    for out in prog.outputs:
        while out is not None:
            if out is v:
                return True
            out = out.alias_of
    return False


def _is_cache_shape(v: Value, symbols: Dict[str, int]) -> bool:
    """[1, H, S, D]: a batch of one, literally or by its bound (the runtime checks each run)."""
    if v.rank != 4:
        return False
    b = v.shape[0]
    if S.is_static(b):
        return int(b) == 1
    names = S.symbols_of(b)
    return len(names) == 1 and symbols.get(next(iter(names))) == 1 and S.evaluate(b, symbols) == 1


def append_kv_caches(prog: Program) -> int:
    """Rewrites every eligible state pair; returns how many."""
    readers = _readers(prog)
    done = 0
    for k, pair in enumerate(prog.states):
        in_idx, out_idx = pair[0], pair[1]
        past, present = prog.inputs[in_idx], prog.outputs[out_idx]
        cat = present.producer
        if _is_graph_output(prog, past):
            continue  # an output showing the cache as it was fed needs its own buffer
        if (cat is not None and cat.type == "tensor_scatter" and present.alias_of is None and cat.inputs[0] is past
                and readers.get(past.uid, []) == [cat]):
            prog.states[k] = (in_idx, out_idx, STATE_APPEND)
            done += 1
            continue
        if (present.alias_of is not None or cat is None or cat.type != "concat" or len(cat.inputs) != 2
                or cat.inputs[0] is not past or not _is_cache_shape(present, prog.symbols)
                or not _is_cache_shape(past, prog.symbols)
                or cat.iattr[0] not in (2, -2)):
            continue
        new = cat.inputs[1]
        if new is None or new.dtype != present.dtype or present.dtype.kind != "f" or present.dtype.itemsize != 4:
            continue
        if [op for op in readers.get(past.uid, []) if op is not cat]:
            continue  # something else reads the cache's bytes in the ordinary layout
        users = readers.get(present.uid, [])
        if any(op.type != "matmul" or op.inputs[1] is not present or op.inputs[0] is present
               or len(op.iattr) > 2 for op in users):
            continue
        cat.type = "kv_append"
        cat.iattr = []
        for op in users:
            op.iattr = [op.iattr[0], op.iattr[1] if len(op.iattr) > 1 else 0, 1]
        prog.states[k] = (in_idx, out_idx, STATE_APPEND)
        done += 1
    return done
