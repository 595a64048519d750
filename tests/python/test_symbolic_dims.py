"""The compiler's symbolic dimensions (compiler/symbolic.py): sizes are >= 0, so min, max and
mod of expressions whose difference has a known sign simplify at compile time (exporters'
slice-length arithmetic, max(0, min(s + 3, s)), collapses to s), and each simplification is
checked against the unsimplified arithmetic on many bindings."""

from __future__ import annotations

import itertools

import pytest

from nerve.compiler import symbolic as S

s, t = S.sym("s"), S.sym("t")


def test_sizes_are_non_negative():
    assert S.dim_min(S.dim_add(s, 3), s) == s
    assert S.dim_max(0, s) == s and S.dim_min(0, s) == 0
    assert S.dim_min(0, S.dim_add(s, 3)) == 0
    assert S.dim_max(S.dim_mul(2, s), s) == S.dim_mul(2, s)
    assert S.dim_max(S.dim_floordiv(s, 2), 0) == S.dim_floordiv(s, 2)
    assert S.dim_mod(s, s) == 0 and S.dim_mod(s, 1) == 0
    # torch's Slice length of a whole axis, as the TorchScript exporter spells it
    whole = S.dim_max(S.dim_add(S.dim_mul(-1, S.dim_min(0, S.dim_add(s, 3))),
                                S.dim_min(S.dim_add(s, 3), S.dim_max(0, s))), 0)
    assert whole == s


def test_absorption():
    """max(min(x, s), s) = s and min(max(x, s), s) = s, either operand first: torch clamps a
    sequence length to the model's maximum and broadcasts it back against the length."""
    clamped = S.dim_min(512, s)
    assert S.dim_max(clamped, s) == s and S.dim_max(s, clamped) == s
    assert S.dim_min(S.dim_max(t, s), s) == s and S.dim_min(s, S.dim_max(s, t)) == s
    assert S.dim_max(S.dim_max(clamped, s), clamped) == s
    assert not S.is_static(S.dim_max(clamped, t)) and S.dim_max(clamped, t) != t  # t is not an operand


def test_unknown_signs_stay_symbolic():
    for e in (S.dim_min(s, t), S.dim_max(S.dim_sub(s, 3), 0), S.dim_min(S.dim_sub(s, t), 0),
              S.dim_mod(s, 3), S.dim_max(S.dim_sub(s, t), S.dim_sub(t, s))):
        assert not S.is_static(e) and any(a[0] != "s" for m in e.terms for a in m), e


@pytest.mark.parametrize("build", [
    lambda: S.dim_min(S.dim_add(s, 3), s),
    lambda: S.dim_max(S.dim_mul(-1, S.dim_min(0, S.dim_sub(s, 2))), S.dim_min(t, s)),
    lambda: S.dim_min(S.dim_floordiv(S.dim_add(s, 7), 4), S.dim_max(t, 1)),
    lambda: S.dim_max(S.dim_mod(S.dim_add(s, t), 5), S.dim_sub(s, t)),
    lambda: S.dim_sub(S.dim_max(0, S.dim_sub(s, t)), S.dim_min(s, S.dim_add(t, 2))),
    lambda: S.dim_add(S.dim_max(S.dim_min(7, s), s), S.dim_min(S.dim_max(t, s), s)),
])
def test_simplified_values_equal_the_arithmetic(build):
    e = build()
    for sv, tv in itertools.product(range(0, 12), range(0, 12)):
        env = {"s": sv, "t": tv}
        got = S.evaluate(e, env) if not S.is_static(e) else int(e)
        # the same arithmetic on integers, with no symbol to simplify
        want = _reference(build, sv, tv)
        assert got == want, (e, env)


def _reference(build, sv, tv):
    """build() with s and t bound to integers: every dim_* then computes plain integers."""
    g = build.__globals__
    old = g["s"], g["t"]
    try:
        g["s"], g["t"] = sv, tv
        return build()
    finally:
        g["s"], g["t"] = old
