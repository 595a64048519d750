"""The precision names a model can be compiled at (``nerve.compile(..., precision=...)``,
``nerve.Session(..., precision=...)``, ``Recognizer(..., precision=...)``).

  * ``"fp32"`` (default): weights as the model stores them (int8 weights dequantised in the
    graph stay int8 and are widened in registers: linear_w8); matches onnxruntime's fp32.
  * ``"int8"`` / ``"w8a8"``: every linear layer's weight int8 (per output channel; weights
    the model stores as int8 keep theirs), and their activations are quantised per row
    too (linear_w8a8, on any row count). ``"int8:convs"`` takes the 1-D convolutions along
    (conv_w8a8; off by default: their per-position rows span every input channel, and quiet
    channels lose to loud ones; a model's own policy may name the convs where that measured
    harmless, as the Moonshine recogniser does for two of its three).
  * ``"w8a32"``: every linear layer's weight int8 as for ``"int8"``, activations fp32
    (linear_w8, the int8 widened in registers, on any row count: the weight stays a quarter
    of fp32's bytes; the only error is the weights' rounding; on many rows it runs ~0.8x
    the fp32 GEMM's speed, on one row 2-4x faster from memory).
  * ``"w4a32"``: every linear layer whose input width is a multiple of 32 gets group-wise
    INT4 weights (docs/QUANTIZATION.md; symmetric, fp16 scales, group 64 — or the largest of
    64/32 dividing the width — quantised at compile time, "mse" clipping), fp32 activations.
  * ``"w4a8"``: the same weights, activations quantised per row to int8 (linear_w4a8).
  * ``"fp16"``: every linear layer's fp32 weight is stored as IEEE half (half the bytes),
    rounded to nearest even at compile time and widened to fp32 in registers (linear_f16);
    activations and sums stay fp32, so the only error is the weights' rounding (relative
    2^-11 each). Weights stored as int8 keep their int8 form (smaller still), and a layer
    with a weight beyond fp16's range (|w| > 65504) stays fp32.
Suffixes on a w4 scheme: ``:gN`` picks the group size (``"w4a8:g32"``, ``"w4a32:g128"``) and
``:minmax``, ``:mse`` (default) or ``:percentile`` the weight quantizer (nerve.quant), and
``:gptq`` asks for GPTQ weights (nerve.quant): the compile then needs calibration statistics
(``hessians=``; a Recognizer reads the ones ``nerve models calibrate`` stored).
"""

from __future__ import annotations

from typing import Tuple

from .errors import InputError

SCHEMES = ("fp32", "int8", "w8a8", "w8a32", "w4a32", "w4a8", "fp16")
W4_GROUPS = (32, 64, 128)
W4_DEFAULT_GROUP = 64


W4_METHODS = ("mse", "minmax", "percentile")
GPTQ = "gptq"
CONVS = "convs"  # int8: 1-D convolutions take int8 activations too (conv_w8a8)


def parse_full(precision: str) -> Tuple[str, int, str]:
    """(scheme, W4 group size, W4 quantizer method) of a precision name; "w8a8" reads as
    "int8". InputError when the name is not one of SCHEMES with the suffixes above."""
    if not isinstance(precision, str):
        raise InputError(f"precision must be a string, got {type(precision).__name__}")
    scheme, *suffixes = precision.split(":")
    if scheme in ("int8", "w8a8") and suffixes == [CONVS]:
        return "int8", W4_DEFAULT_GROUP, W4_METHODS[0]
    if scheme not in SCHEMES or (suffixes and not scheme.startswith("w4")):
        raise InputError(f"precision must be one of {', '.join(SCHEMES)} (w4 schemes may add ':g32', ':g64', "
                         f"':g128' and ':minmax', ':mse', ':percentile'; int8 ':{CONVS}'), got {precision!r}")
    g, method = W4_DEFAULT_GROUP, W4_METHODS[0]
    for suffix in suffixes:
        if suffix == GPTQ:
            continue  # a flag for who supplies the calibration (calibrated())
        if suffix in W4_METHODS:
            method = suffix
        elif suffix.startswith("g") and suffix[1:].isdigit() and int(suffix[1:]) in W4_GROUPS:
            g = int(suffix[1:])
        else:
            raise InputError(f"precision {precision!r}: unknown suffix ':{suffix}' (group "
                             f"{', '.join(':g%d' % x for x in W4_GROUPS)}; method {', '.join(':' + m for m in W4_METHODS)}; "
                             f"':{GPTQ}')")
    return ("int8" if scheme == "w8a8" else scheme), g, method


def int8_convs(precision: str) -> bool:
    """Whether a (valid) int8 precision name takes the 1-D convs along (the ``:convs`` suffix)."""
    return parse_full(precision)[0] == "int8" and CONVS in precision.split(":")[1:]


def calibrated(precision: str) -> bool:
    """Whether a (valid) precision name asks for GPTQ weights (the ``:gptq`` suffix)."""
    parse_full(precision)
    return GPTQ in precision.split(":")[1:]


def parse(precision: str) -> Tuple[str, int]:
    """(scheme, W4 group size) of a precision name (parse_full without the method)."""
    scheme, g, _ = parse_full(precision)
    return scheme, g
