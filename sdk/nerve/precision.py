"""The precision names a model can be compiled at (``nerve.compile(..., precision=...)``,
``nerve.Session(..., precision=...)``, ``Recognizer(..., precision=...)``).

  * ``"fp32"`` (default): weights as the model stores them (int8 weights dequantised in the
    graph stay int8 and are widened in registers: linear_w8); matches onnxruntime's fp32.
  * ``"int8"`` / ``"w8a8"``: as fp32, and products with int8 weights on many rows also
    quantise their activations per row (linear_w8a8).
  * ``"w4a32"``: every linear layer whose input width is a multiple of 32 gets group-wise
    INT4 weights (docs/QUANTIZATION.md; symmetric, fp16 scales, group 64 — or the largest of
    64/32 dividing the width — quantised at compile time, "mse" clipping), fp32 activations.
  * ``"w4a8"``: the same weights, activations quantised per row to int8 (linear_w4a8).
A suffix ``:gN`` picks the group size (``"w4a8:g32"``, ``"w4a32:g128"``).
"""

from __future__ import annotations

from typing import Tuple

from .errors import InputError

SCHEMES = ("fp32", "int8", "w8a8", "w4a32", "w4a8")
W4_GROUPS = (32, 64, 128)
W4_DEFAULT_GROUP = 64


def parse(precision: str) -> Tuple[str, int]:
    """(scheme, W4 group size) of a precision name; "w8a8" reads as "int8". InputError when
    the name is not one of SCHEMES (with an optional ":gN" on a w4 scheme)."""
    if not isinstance(precision, str):
        raise InputError(f"precision must be a string, got {type(precision).__name__}")
    scheme, _, group = precision.partition(":")
    if scheme not in SCHEMES or (group and not scheme.startswith("w4")):
        raise InputError(f"precision must be one of {', '.join(SCHEMES)} (w4 schemes may add ':g32', ':g64' "
                         f"or ':g128'), got {precision!r}")
    g = W4_DEFAULT_GROUP
    if group:
        if not (group.startswith("g") and group[1:].isdigit() and int(group[1:]) in W4_GROUPS):
            raise InputError(f"precision {precision!r}: the group suffix must be one of "
                             f"{', '.join(':g%d' % x for x in W4_GROUPS)}")
        g = int(group[1:])
    return ("int8" if scheme == "w8a8" else scheme), g
