"""Symbolic dimensions: integers that depend on the sizes a run binds (sequence length,
audio length, a KV cache's past length).

A dimension is either a plain ``int`` or an :class:`Expr`. Expressions are kept in one
canonical form — a polynomial with integer coefficients over *atoms* (symbols, and opaque
terms for floor division, modulo, min and max that cannot be simplified) — so two dims that
are equal by arithmetic compare equal (``(s + 1) * 2 == 2 * s + 2``) and shape checks such as
"these two operands broadcast" can be decided at compile time.

Every expression is lowered to a small RPN program (:meth:`ExprTable.encode`) that the C
runtime evaluates once per run (``plan.c``, ``nrv_expr_op``).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Tuple, Union

__all__ = ["Expr", "Dim", "sym", "is_static", "dim_add", "dim_sub", "dim_mul", "dim_floordiv",
           "dim_ceildiv", "dim_mod", "dim_min", "dim_max", "evaluate", "ExprTable", "prod", "symbols_of"]

# An atom is ("s", name) for a symbol or (op, a, b) for an opaque term over two dims.
Atom = tuple
Monomial = Tuple[Atom, ...]  # sorted atoms, repeated for powers


class Expr:
    """An integer polynomial over atoms. Immutable; hashable; never a bare constant
    (constants are ``int``)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]):
        self.terms: Dict[Monomial, int] = {m: c for m, c in terms.items() if c != 0}
        self._hash = hash(frozenset(self.terms.items()))

    def key(self):
        return tuple(sorted(self.terms.items(), key=repr))

    def __eq__(self, other):
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self):
        return self._hash

    def __repr__(self):
        parts = []
        for mono, coeff in sorted(self.terms.items(), key=repr):
            names = "*".join(_atom_str(a) for a in mono)
            if not mono:
                parts.append(str(coeff))
            elif coeff == 1:
                parts.append(names)
            else:
                parts.append(f"{coeff}*{names}")
        return " + ".join(parts) if parts else "0"

    # arithmetic sugar
    def __add__(self, o): return dim_add(self, o)
    def __radd__(self, o): return dim_add(o, self)
    def __sub__(self, o): return dim_sub(self, o)
    def __rsub__(self, o): return dim_sub(o, self)
    def __mul__(self, o): return dim_mul(self, o)
    def __rmul__(self, o): return dim_mul(o, self)
    def __floordiv__(self, o): return dim_floordiv(self, o)
    def __rfloordiv__(self, o): return dim_floordiv(o, self)


Dim = Union[int, Expr]


def _atom_str(a: Atom) -> str:
    if a[0] == "s":
        return a[1]
    return f"{a[0]}({a[1]!r}, {a[2]!r})"


def _poly(d: Dim) -> Dict[Monomial, int]:
    if isinstance(d, Expr):
        return dict(d.terms)
    return {(): int(d)} if int(d) != 0 else {}


def _make(terms: Dict[Monomial, int]) -> Dim:
    terms = {m: c for m, c in terms.items() if c != 0}
    if not terms:
        return 0
    if set(terms) == {()}:
        return terms[()]
    return Expr(terms)


def sym(name: str) -> Expr:
    return Expr({(("s", name),): 1})


def is_static(d) -> bool:
    return not isinstance(d, Expr)


def dim_add(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        return int(a) + int(b)
    t = _poly(a)
    for m, c in _poly(b).items():
        t[m] = t.get(m, 0) + c
    return _make(t)


def dim_sub(a: Dim, b: Dim) -> Dim:
    return dim_add(a, dim_mul(-1, b))


def dim_mul(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        return int(a) * int(b)
    t: Dict[Monomial, int] = {}
    for ma, ca in _poly(a).items():
        for mb, cb in _poly(b).items():
            m = tuple(sorted(ma + mb, key=repr))
            t[m] = t.get(m, 0) + ca * cb
    return _make(t)


def _opaque(op: str, a: Dim, b: Dim) -> Expr:
    return Expr({((op, a, b),): 1})


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        if int(b) == 0:
            raise ZeroDivisionError("dimension divided by zero")
        return int(a) // int(b)
    if is_static(b):
        b = int(b)
        if b == 1:
            return a
        terms = _poly(a)
        if b > 0 and all(c % b == 0 for c in terms.values()):  # exact: (4s + 8) // 4 = s + 2
            return _make({m: c // b for m, c in terms.items()})
    elif len(b.terms) == 1:
        # exact division by a single term: (6*s*t + 2*s) // (2*s) = 3*t + 1
        (bm, bc), = b.terms.items()
        quotient = {}
        for m, c in _poly(a).items():
            rest = list(m)
            try:
                for atom in bm:
                    rest.remove(atom)
            except ValueError:
                break
            if c % bc != 0 or bc < 0:
                break
            quotient[tuple(rest)] = quotient.get(tuple(rest), 0) + c // bc
        else:
            return _make(quotient)
    return _opaque("floordiv", a, b)


def dim_ceildiv(a: Dim, b: Dim) -> Dim:
    return dim_mul(-1, dim_floordiv(dim_mul(-1, a), b))


def _atom_nonneg(a: Atom) -> bool:
    """Whether an atom is >= 0 for every binding: a symbol (a size), and min, max, floor
    division and modulo of such values (by a positive divisor)."""
    if a[0] == "s":
        return True
    x, y = a[1], a[2]
    if a[0] == "min":
        return _sign(x) == 1 and _sign(y) == 1
    if a[0] == "max":
        return _sign(x) == 1 or _sign(y) == 1
    if a[0] in ("floordiv", "mod"):
        return _sign(x) == 1 and is_static(y) and int(y) > 0
    return False


def _sign(d: Dim) -> int:
    """1 if d >= 0 for every binding of its symbols (sizes, all >= 0), -1 if d <= 0, 0 when
    unknown: a polynomial over non-negative atoms whose coefficients share a sign."""
    if is_static(d):
        return 1 if int(d) >= 0 else -1
    coeffs = []
    for mono, c in d.terms.items():
        if not all(_atom_nonneg(a) for a in mono):
            return 0
        coeffs.append(c)
    if all(c >= 0 for c in coeffs):
        return 1
    if all(c <= 0 for c in coeffs):
        return -1
    return 0


def dim_mod(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        return int(a) % int(b)
    if a == b or (is_static(b) and int(b) in (1, -1)) or (is_static(a) and int(a) == 0):
        return 0
    return _opaque("mod", a, b)


def _opaque_args(d: Dim, op: str):
    """(x, y) when d is exactly the opaque term op(x, y), else None."""
    if isinstance(d, Expr) and len(d.terms) == 1:
        (mono, coeff), = d.terms.items()
        if coeff == 1 and len(mono) == 1 and mono[0][0] == op:
            return mono[0][1], mono[0][2]
    return None


def _absorbed(a: Dim, b: Dim, inner: str):
    """The absorption law: max(min(x, b), b) = b and min(max(x, b), b) = b (either order).
    torch's exports clamp a sequence length (min(512, s)) and broadcast it back against s."""
    for outer, other in ((a, b), (b, a)):
        args = _opaque_args(outer, inner)
        if args is not None and other in args:
            return other
    return None


def dim_min(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        return min(int(a), int(b))
    if a == b:
        return a
    absorbed = _absorbed(a, b, "max")
    if absorbed is not None:
        return absorbed
    order = _sign(dim_sub(a, b))  # sizes are >= 0: min(s + 3, s) = s, min(0, s) = 0
    if order:
        return b if order > 0 else a
    return _opaque("min", *sorted((a, b), key=repr))


def dim_max(a: Dim, b: Dim) -> Dim:
    if is_static(a) and is_static(b):
        return max(int(a), int(b))
    if a == b:
        return a
    absorbed = _absorbed(a, b, "min")
    if absorbed is not None:
        return absorbed
    order = _sign(dim_sub(a, b))
    if order:
        return a if order > 0 else b
    return _opaque("max", *sorted((a, b), key=repr))


def prod(dims: Iterable[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def _eval_atom(a: Atom, env: Mapping[str, int]) -> int:
    if a[0] == "s":
        if a[1] not in env:
            raise KeyError(a[1])
        return int(env[a[1]])
    x, y = evaluate(a[1], env), evaluate(a[2], env)
    if a[0] == "floordiv":
        return x // y
    if a[0] == "mod":
        return x % y
    if a[0] == "min":
        return min(x, y)
    if a[0] == "max":
        return max(x, y)
    raise ValueError(f"unknown atom {a[0]}")


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """Value of d with symbols bound by env (KeyError names a missing symbol)."""
    if is_static(d):
        return int(d)
    total = 0
    for mono, coeff in d.terms.items():
        v = coeff
        for a in mono:
            v *= _eval_atom(a, env)
        total += v
    return total


def symbols_of(d: Dim) -> set:
    out = set()
    if is_static(d):
        return out
    for mono in d.terms:
        for a in mono:
            if a[0] == "s":
                out.add(a[1])
            else:
                out |= symbols_of(a[1]) | symbols_of(a[2])
    return out


# Opcodes of the C evaluator (plan_internal.h, nrv_expr_op).
OP_CONST, OP_SYM, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_MOD, OP_MIN, OP_MAX, OP_REF, OP_CEILDIV = range(11)
_ATOM_OPS = {"floordiv": OP_FLOORDIV, "mod": OP_MOD, "min": OP_MIN, "max": OP_MAX}


class ExprTable:
    """The plan's expression list. :meth:`ref` gives the plan's dim reference for a dim: the
    literal for an int, ``-(index + 1)`` for an expression (encoded once; sub-terms shared)."""

    def __init__(self, symbols: List[str]):
        self.symbols = list(symbols)
        self._sym_index = {s: i for i, s in enumerate(self.symbols)}
        self.programs: List[List[Tuple[int, int]]] = []
        self._index: Dict[Expr, int] = {}

    def ref(self, d: Dim) -> int:
        if is_static(d):
            v = int(d)
            if v < 0:
                # a negative literal cannot be told from an expression reference
                return -(self._encode_const(v) + 1)
            return v
        return -(self._encode(d) + 1)

    def _encode_const(self, v: int) -> int:
        key = Expr({(("const", v, 0),): 1})
        if key not in self._index:
            self._index[key] = len(self.programs)
            self.programs.append([(OP_CONST, v)])
        return self._index[key]

    def _push_dim(self, code, d: Dim):
        if is_static(d):
            code.append((OP_CONST, int(d)))
        else:
            code.append((OP_REF, self._encode(d)))

    def _encode(self, e: Expr) -> int:
        if e in self._index:
            return self._index[e]
        code: List[Tuple[int, int]] = []
        first = True
        for mono, coeff in sorted(e.terms.items(), key=repr):
            # term = coeff * atom1 * atom2 ...; a lone symbol is just OP_SYM (the runtime
            # names an input's dims by that shape)
            if not mono:
                code.append((OP_CONST, coeff))
            for i, a in enumerate(mono):
                if a[0] == "s":
                    if a[1] not in self._sym_index:
                        raise KeyError(a[1])
                    code.append((OP_SYM, self._sym_index[a[1]]))
                else:
                    self._push_dim(code, a[1])
                    self._push_dim(code, a[2])
                    code.append((_ATOM_OPS[a[0]], 0))
                if i:
                    code.append((OP_MUL, 0))
            if mono and coeff != 1:
                code.append((OP_CONST, coeff))
                code.append((OP_MUL, 0))
            if not first:
                code.append((OP_ADD, 0))
            first = False
        # Sub-expressions were encoded (and appended) before this one, so REFs point back.
        self._index[e] = len(self.programs)
        self.programs.append(code)
        return self._index[e]
