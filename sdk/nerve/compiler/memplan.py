"""Static memory plan: where every tensor of a program lives.

* constants → the weight blob (one entry per distinct constant);
* graph inputs (and values that alias them) → the caller's feeds, no copy;
* state outputs (bound to a state input) → the session's state double buffer;
* everything else → one activation arena, at offsets chosen from liveness so tensors whose
  lifetimes do not overlap share bytes. An elementwise op may write over an input that dies
  at that op (in place). Sizes are taken at the symbols' upper bounds; the runtime checks
  each run that the actual sizes fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import symbolic as S
from .graph import CompileError, Program, Value

ALIGN = 64
ARENA, WEIGHT, INPUT, STATE = 0, 1, 2, 3


# Expressions that may be larger below the bound (a slice clamped by min/max, the last chunk
# of a split, a size with a negative coefficient) are evaluated at every value of their
# symbol up to this bound; larger bounds are sampled densely near 0 and near the bound.
_EXHAUSTIVE_UP_TO = 4096


def _monotone(d) -> bool:
    """Non-decreasing in every symbol: a polynomial with non-negative coefficients over symbols."""
    if S.is_static(d):
        return True
    return all(c >= 0 and all(a[0] == "s" for a in mono) for mono, c in d.terms.items())


def _value_or_floor(d, env: Dict[str, int]) -> int:
    """d at env; sizes where d divides by zero are not runnable (the runtime refuses them)."""
    try:
        return S.evaluate(d, env)
    except ZeroDivisionError:
        return 0


def _max_extent(d, bounds: Dict[str, int]) -> int:
    """The largest value of dim d for symbol values in [0, bound] (the runtime also checks
    each run, so an expression this cannot bound exactly fails clearly, never overflows)."""
    at_bounds = _value_or_floor(d, bounds)
    if _monotone(d):
        return at_bounds
    names = sorted(S.symbols_of(d))
    best = at_bounds
    if len(names) == 1:
        (name,) = names
        bound = int(bounds[name])
        values = range(bound + 1) if bound <= _EXHAUSTIVE_UP_TO else \
            list(range(0, 1025)) + list(range(max(bound - 1024, 0), bound + 1))
        env = dict(bounds)
        for x in values:
            env[name] = x
            best = max(best, _value_or_floor(d, env))
        return best
    # several symbols: each at 0, 1 and its bound, the others at their bounds
    for name in names:
        for x in (0, 1, int(bounds[name])):
            best = max(best, _value_or_floor(d, {**bounds, name: x}))
    return best


def bytes_at_bounds(v: Value, bounds: Dict[str, int]) -> int:
    """Bytes v can need for any sizes within the bounds (what the plan reserves for it)."""
    n = 1
    for d in v.shape:
        n *= max(_max_extent(d, bounds), 0)
    return n * v.dtype.itemsize


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Placement:
    storage: int
    ref: int
    offset: int


@dataclass
class MemoryPlan:
    placements: Dict[int, Placement] = field(default_factory=dict)  # value uid -> placement
    weights: List[Value] = field(default_factory=list)
    arena_bytes: int = 0
    # (name, offset, bytes, first op, last op) per arena block, for `nerve plan`
    blocks: List[tuple] = field(default_factory=list)


def plan_memory(prog: Program) -> MemoryPlan:
    bounds = prog.symbols
    ops = [op for op in prog.ops if op.type != "label"]
    n_ops = len(ops)
    mp = MemoryPlan()

    values: Dict[int, Value] = {}

    def see(v: Optional[Value]):
        if v is not None:
            values[v.uid] = v
            r = v.root()
            values[r.uid] = r

    for op in ops:
        for v in op.inputs:
            see(v)
        for v in op.outputs:
            see(v)
        see(op.scratch)
    for v in prog.inputs + prog.outputs:
        see(v)

    input_index = {v.uid: i for i, v in enumerate(prog.inputs)}
    # state output roots -> state pair index
    state_root: Dict[int, int] = {}
    for k, pair in enumerate(prog.states):
        out_idx = pair[1]
        r = prog.outputs[out_idx].root()
        if r.const is not None or r.uid in input_index or r.uid in state_root:
            raise CompileError(f"state output '{prog.outputs[out_idx].name}' must be computed by the graph "
                               "(it is a constant, an input, or shared with another state)")
        state_root[r.uid] = k

    # weights and inputs
    weight_index: Dict[int, int] = {}
    for uid, v in values.items():
        if v.alias_of is not None:
            continue
        if v.const is not None:
            weight_index[uid] = len(mp.weights)
            mp.weights.append(v)
        elif uid not in input_index and v.is_input:
            raise CompileError(f"value '{v.name}' is marked as an input but is not one of the program's inputs")

    # liveness of arena roots
    first: Dict[int, int] = {}
    last: Dict[int, int] = {}
    size: Dict[int, int] = {}

    def arena_root(v: Value) -> Optional[Value]:
        r = v.root()
        if r.const is not None or r.uid in input_index or r.uid in state_root:
            return None
        return r

    for i, op in enumerate(ops):
        for v in op.outputs + ([op.scratch] if op.scratch is not None else []):
            r = arena_root(v)
            if r is not None:
                first.setdefault(r.uid, i)
                last[r.uid] = max(last.get(r.uid, i), i)
        for v in op.inputs:
            if v is None:
                continue
            r = arena_root(v)
            if r is not None:
                if r.uid not in first:
                    raise CompileError(f"'{v.name}' is read by op {i} ({op.type}, node '{op.name}') before any op "
                                       "writes it")
                last[r.uid] = max(last[r.uid], i)
    for v in prog.outputs:
        r = arena_root(v)
        if r is not None:
            if r.uid not in first:
                raise CompileError(f"graph output '{v.name}' is never computed")
            last[r.uid] = n_ops
    for uid, v in values.items():
        r = arena_root(v)
        if r is not None:
            size[r.uid] = max(size.get(r.uid, 0), bytes_at_bounds(v, bounds))

    # in place: an elementwise output takes the bytes of input 0 when that input dies there
    merged: Dict[int, int] = {}  # root uid -> representative root uid

    def rep(uid: int) -> int:
        while uid in merged:
            uid = merged[uid]
        return uid

    for i, op in enumerate(ops):
        if not op.inplace or not op.inputs or op.inputs[0] is None:
            continue
        a, o = arena_root(op.inputs[0]), arena_root(op.outputs[0])
        if a is None or o is None or a.uid == o.uid:
            continue
        ra, ro = rep(a.uid), rep(o.uid)
        if last[ra] == i and first[ro] == i and size[ro] <= size[ra] and ro not in merged:
            merged[ro] = ra
            last[ra] = max(last[ra], last[ro])

    # offsets: biggest first, lowest offset that does not collide with an overlapping lifetime
    reps = sorted({rep(u) for u in first}, key=lambda u: (-size[u], first[u]))
    placed: List[tuple] = []  # (offset, end, first, last)
    offset_of: Dict[int, int] = {}
    for u in reps:
        need = _align(max(size[u], 1))
        busy = sorted((o, e) for (o, e, f, l) in placed if not (l < first[u] or last[u] < f))
        off = 0
        for o, e in busy:
            if off + need <= o:
                break
            off = max(off, e)
        offset_of[u] = off
        placed.append((off, off + need, first[u], last[u]))
        mp.arena_bytes = max(mp.arena_bytes, off + need)
        mp.blocks.append((values[u].name, off, size[u], first[u], last[u]))
    mp.blocks.sort(key=lambda b: b[1])

    for uid, v in values.items():
        r = v.root()
        if r.const is not None:
            mp.placements[uid] = Placement(WEIGHT, weight_index[r.uid], 0)
        elif r.uid in input_index:
            mp.placements[uid] = Placement(INPUT, input_index[r.uid], 0)
        elif r.uid in state_root:
            mp.placements[uid] = Placement(STATE, state_root[r.uid], 0)
        else:
            mp.placements[uid] = Placement(ARENA, -1, offset_of[rep(r.uid)])
    return mp
