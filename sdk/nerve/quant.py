"""Weight quantization: group-wise INT4 weights (W4) and the quantizer that makes them.

Format (docs/QUANTIZATION.md, nerve.h "W4 weights"): ``W[o, k] = scale[o, g] * (q[o, k] -
zero[o, g])`` with ``g = k // group_size``, ``q`` and ``zero`` integers in [-8, 7] and one fp16
``scale`` per group (``zero`` absent: symmetric). Two layouts hold the same values: *unpacked*
(one int8 per weight) and *packed* (two per byte, in the order the SIMD unpack wants); the
kernels give bit-identical results for both.

    w4 = nerve.quant.quantize_w4(W, group_size=64, method="mse")   # W float [out, in]
    y = w4.linear(x, b)                          # fp32 activations (w4a32)
    y = w4.linear(x, b, activations="int8")      # int8 activations per row (w4a8)
    w4.error(W)                                  # {"cosine", "snr_db", "max_abs"} vs W

Methods (per group of ``group_size`` weights along the input dimension):
  * ``"minmax"``: the range of the group, nothing clipped;
  * ``"mse"``: the clipping ratio (1.0 down to 0.55) with the least squared error, per group;
  * ``"percentile"``: each output row's magnitudes clipped at ``percentile`` first.
Symmetric groups map the largest-magnitude weight to -8 exactly (the scale's sign follows it),
so all 16 levels are used; asymmetric ones map the group's [min, max] (widened to include 0)
onto [-8, 7] with a zero point. Scales are rounded to fp16 before q is computed from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import _marshal as m
from ._native import check, ffi, lib
from .errors import InputError, code

__all__ = ["W4Weight", "quantize_w4", "input_hessian", "quantize", "GROUP_SIZES", "METHODS", "W4_MAX_IN"]

GROUP_SIZES = (32, 64, 128)
METHODS = ("minmax", "mse", "percentile")
W4_MAX_IN = 16384  # nerve.h NRV_W4_MAX_IN
_CLIP_RATIOS = np.linspace(1.0, 0.55, 10)
_ERR_INVALID = code("NRV_ERR_INVALID_ARG")
_ERR_SHAPE = code("NRV_ERR_SHAPE")


def _check_group(group_size: int, n_in: int, what: str = "weight") -> int:
    if group_size not in GROUP_SIZES:
        raise InputError(f"group_size must be one of {GROUP_SIZES}, got {group_size!r}", _ERR_INVALID)
    if n_in % group_size:
        raise InputError(f"group_size {group_size} does not divide the {what}'s input width {n_in}", _ERR_SHAPE)
    return int(group_size)


@dataclass(frozen=True)
class W4Weight:
    """A W4 weight [out, in]: ``q`` int8 [out, in] in [-8, 7], ``scales`` float16 [out, in //
    group_size], ``zero`` int8 like scales or None. Checked whole (nrv_w4_check) when made."""

    q: np.ndarray
    scales: np.ndarray
    zero: Optional[np.ndarray]
    group_size: int

    def __post_init__(self):
        q = np.ascontiguousarray(self.q)
        if q.dtype != np.int8 or q.ndim != 2:
            raise InputError(f"W4 q must be a 2-D int8 array, got {q.dtype} of shape {q.shape}", code("NRV_ERR_DTYPE"))
        n, k = q.shape
        g = _check_group(self.group_size, k)
        scales = np.ascontiguousarray(self.scales)
        if scales.dtype != np.float16 or scales.shape != (n, k // g):
            raise InputError(f"W4 scales must be float16 of shape {(n, k // g)}, got {scales.dtype} {scales.shape}",
                             _ERR_SHAPE)
        zero = None if self.zero is None else np.ascontiguousarray(self.zero)
        if zero is not None and (zero.dtype != np.int8 or zero.shape != scales.shape):
            raise InputError(f"W4 zero points must be int8 of shape {scales.shape}, got {zero.dtype} {zero.shape}",
                             _ERR_SHAPE)
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "zero", zero)
        object.__setattr__(self, "_packed", {})
        desc, _keep = self._desc("unpacked")
        check(lib.nrv_w4_check(desc))

    @property
    def shape(self):
        return self.q.shape

    @property
    def packed(self) -> np.ndarray:
        """The packed layout: uint8 [out, in / 2] (nrv_w4_pack), made once."""
        if "p" not in self._packed:
            n, k = self.q.shape
            out = np.empty((n, k // 2), np.uint8)
            check(lib.nrv_w4_pack(m.raw_ptr(self.q, "int8_t *"), n, k, m.raw_ptr(out, "uint8_t *")))
            self._packed["p"] = out
        return self._packed["p"]

    def nbytes(self, layout: str = "packed") -> int:
        """Bytes of the weight in a layout: values plus scales and zero points."""
        vals = self.q.size // 2 if layout == "packed" else self.q.size
        return vals + self.scales.nbytes + (self.zero.nbytes if self.zero is not None else 0)

    def _desc(self, layout: str):
        """(nrv_w4_weight *, buffers it points into: keep them alive for the call)."""
        n, k = self.q.shape
        values = self.packed if layout == "packed" else self.q
        keep = [ffi.from_buffer(values), ffi.from_buffer(self.scales)]
        d = ffi.new("nrv_w4_weight *")
        d.out, d.group = n, self.group_size
        setattr(d, "in", k)  # a C field named like a Python keyword
        d.layout = lib.NRV_W4_PACKED if layout == "packed" else lib.NRV_W4_UNPACKED
        d.q = keep[0]
        d.scales = ffi.cast("const uint16_t *", keep[1])
        if self.zero is not None:
            keep.append(ffi.from_buffer(self.zero))
            d.zero = ffi.cast("const int8_t *", keep[-1])
        return d, keep

    def dequantize(self) -> np.ndarray:
        """W as float32 [out, in] (exact: an fp16 scale times a small integer)."""
        n, k = self.q.shape
        z = 0 if self.zero is None else self.zero.astype(np.float32)[:, :, None]
        w = (self.q.reshape(n, -1, self.group_size).astype(np.float32) - z) * self.scales.astype(np.float32)[:, :, None]
        return w.reshape(n, k)

    def linear(self, x, b=None, activations: str = "fp32", layout: Optional[str] = None, device=None):
        """``x @ W.T + b`` with this weight (nrv_linear_w4): activations "fp32" (w4a32) or
        "int8" (w4a8: each row of x quantised to int8 on the fly); layout "packed" (the
        default on the CPU) or "unpacked" (bit-identical results). device "cuda" / "cuda:N"
        / N: w4a32 on that GPU (nerve.cuda.linear_w4; layout None = the one nerve.cuda.select
        names for the row count)."""
        op = "linear_w4"
        if device not in (None, "cpu"):
            if activations != "fp32":
                raise InputError(f"{op}: the GPU kernel takes fp32 activations (w4a32), got {activations!r}",
                                 _ERR_INVALID)
            from . import cuda

            return cuda.linear_w4(x, self, b, layout=layout, device=device)
        layout = "packed" if layout is None else layout
        if activations not in ("fp32", "int8"):
            raise InputError(f"activations must be 'fp32' or 'int8', got {activations!r}", _ERR_INVALID)
        if layout not in ("packed", "unpacked"):
            raise InputError(f"layout must be 'packed' or 'unpacked', got {layout!r}", _ERR_INVALID)
        x = m.as_float32(x, "x", op, min_ndim=1)
        n, k = self.q.shape
        if x.shape[-1] != k:
            raise InputError(f"{op}: x has width {x.shape[-1]}, the weight takes {k}", _ERR_SHAPE)
        if b is not None:
            b = m.as_float32(b, "b", op, ndim=1)
            m.expect_shape(b, (n,), "b", op)
        out = m.empty_aligned(x.shape[:-1] + (n,))
        d, _keep = self._desc(layout)
        check(lib.nrv_linear_w4(m.ptr(x), m.prod(x.shape[:-1]), d, m.ptr(b), int(activations == "int8"), m.ptr(out)))
        return out

    def error(self, w) -> Dict[str, float]:
        """How far the quantized weight is from ``w``: cosine similarity, SNR in dB, max |error|."""
        return _error(np.asarray(w, np.float64), self.dequantize().astype(np.float64))


def input_hessian(x, into: Optional[np.ndarray] = None) -> np.ndarray:
    """Σ xᵀx over the rows of x [..., in] (float64), added to ``into`` when given: the
    statistic GPTQ needs, accumulated over calibration batches."""
    x2 = np.asarray(x, np.float64).reshape(-1, np.shape(x)[-1])
    h = x2.T @ x2
    if into is not None:
        into += h
        return into
    return h


class LinearTaps:
    """A model compiled at fp32 without fusion, with the input of every linear layer as an
    extra output, for calibration: :meth:`run` runs it like a Session and adds each layer's
    Σ xᵀx; :attr:`hessians` gives them by layer name (the names ``compile(hessians=...)``
    and :func:`quantize_w4` take). A linear whose input is not a named tensor of the graph
    (rare: a transpose the importer made) gets none and is quantized without GPTQ."""

    def __init__(self, model, dims=None, constants=None, outputs=None, state=None):
        from pathlib import Path

        from .compiler import compile_program
        from .compiler.ort_format import load_ort
        from .compiler.planfile import serialize
        from .session import Plan, Session

        path = Path(model)
        raw = path.read_bytes()
        proto = load_ort(raw) if raw[4:8] == b"ORTM" else _onnx_model(raw)
        prog = compile_program(proto.SerializeToString(), path.parent, dims, state=None, fuse=False,
                               constants=constants, outputs=outputs)
        named = {i.name for i in proto.graph.input} | {o for n in proto.graph.node for o in n.output}
        if not any(op.type == "if" for op in prog.ops):
            # every If was folded: its branch's tensors are computed on every run and may be
            # outputs (with an If left to run time, its layers go without statistics)
            named |= _node_outputs(proto.graph)
        self.taps: Dict[str, list] = {}  # tensor -> [(layer name, input width)]
        for op in prog.ops:
            if op.type != "linear":
                continue
            root = op.inputs[0]
            while root.alias_of is not None:
                root = root.alias_of
            if root.name in named:
                self.taps.setdefault(root.name, []).append((op.name, int(op.inputs[1].shape[1])))
        keep = list(outputs) if outputs is not None else [o.name for o in proto.graph.output]
        from onnx import TensorProto, helper

        have = {o.name for o in proto.graph.output}
        proto.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                  for n in self.taps if n not in have)
        prog = compile_program(proto.SerializeToString(), path.parent, dims, state=state, fuse=False,
                               constants=constants, outputs=keep + [n for n in self.taps if n not in keep])
        self.session = Session(Plan(serialize(prog), str(path)))
        self.input_names = self.session.input_names
        self._h: Dict[str, np.ndarray] = {}
        self.rows = 0

    def run(self, feeds) -> Dict[str, np.ndarray]:
        out = self.session.run(feeds)
        for name, layers in self.taps.items():
            k = layers[0][1]
            x = out[name].reshape(-1, k)
            if name not in self._h:
                self._h[name] = np.zeros((k, k))
            input_hessian(x, into=self._h[name])
        self.rows += 1
        return out

    @property
    def hessians(self) -> Dict[str, np.ndarray]:
        return {layer: self._h[name] for name, layers in self.taps.items() if name in self._h
                for layer, _k in layers}


def _onnx_model(raw: bytes):
    import onnx

    m = onnx.ModelProto()
    m.ParseFromString(raw)
    return m


def _node_outputs(graph) -> set:
    """Every tensor a node of graph (or of its subgraphs) makes."""
    names = set()
    for n in graph.node:
        names.update(o for o in n.output if o)
        for a in n.attribute:
            if a.g is not None and len(a.g.node):
                names |= _node_outputs(a.g)
            for sub in a.graphs:
                names |= _node_outputs(sub)
    return names


def _error(ref: np.ndarray, got: np.ndarray) -> Dict[str, float]:
    diff = got - ref
    num, den = float(np.sum(ref * ref)), float(np.sum(diff * diff))
    norm = float(np.linalg.norm(ref) * np.linalg.norm(got))
    return {"cosine": float(np.sum(ref * got) / norm) if norm > 0 else 1.0,
            "snr_db": float(10 * np.log10(num / den)) if den > 0 else float("inf"),
            "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0}


def _codes(wg: np.ndarray, scale: np.ndarray, zero: Optional[np.ndarray]) -> np.ndarray:
    """q = clamp(round(w / scale) + zero, -8, 7) per group (wg [..., G], scale/zero [...])."""
    z = 0.0 if zero is None else zero[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.rint(wg / scale[..., None]) + z, -8, 7)


def _fit(wg: np.ndarray, ratio: float, symmetric: bool):
    """(scale fp16-rounded, zero or None) for groups wg [..., G] with their range scaled by ratio."""
    if symmetric:
        idx = np.argmax(np.abs(wg), axis=-1)[..., None]
        peak = np.take_along_axis(wg, idx, axis=-1)[..., 0] * ratio
        scale = (peak / -8.0).astype(np.float16).astype(np.float64)
        zero = None
    else:
        lo = np.minimum(wg.min(axis=-1), 0.0) * ratio
        hi = np.maximum(wg.max(axis=-1), 0.0) * ratio
        scale = ((hi - lo) / 15.0).astype(np.float16).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            zero = np.clip(-8.0 - np.rint(lo / scale), -8, 7)
    tiny = ~(np.abs(scale) >= np.finfo(np.float16).tiny)  # all-zero (or underflowing) groups
    scale = np.where(tiny, 1.0, scale)
    if zero is not None:
        zero = np.where(tiny, 0.0, zero)
    return scale, zero


def quantize_w4(w, group_size: int = 64, symmetric: bool = True, method: str = "mse",
                percentile: float = 99.9, hessian=None) -> W4Weight:
    """Quantizes a float weight ``w`` [out, in] to W4 (module docstring for the methods).

    hessian: Σ xᵀx [in, in] over calibration inputs x of the layer (:func:`input_hessian`):
    the weights are then quantized with GPTQ's error compensation (group scales fitted by
    ``method``), which minimises the error of ``x · Wᵀ`` rather than of W."""
    w = np.asarray(w)
    if w.dtype.kind != "f" or w.ndim != 2:
        raise InputError(f"quantize_w4 takes a 2-D float weight, got {w.dtype} of shape {w.shape}",
                         code("NRV_ERR_DTYPE"))
    n, k = w.shape
    g = _check_group(group_size, k)
    if k > W4_MAX_IN:
        raise InputError(f"input width {k} is above the W4 kernels' limit {W4_MAX_IN}", code("NRV_ERR_UNSUPPORTED"))
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}", _ERR_INVALID)
    w64 = w.astype(np.float64)
    if not np.all(np.isfinite(w64)):
        bad = np.argwhere(~np.isfinite(w64))[0]
        raise InputError(f"weight [{bad[0]}, {bad[1]}] is {w64[tuple(bad)]}: cannot quantize a non-finite value",
                         _ERR_INVALID)
    if method == "percentile":
        if not 50.0 < percentile <= 100.0:
            raise InputError(f"percentile must be in (50, 100], got {percentile}", _ERR_INVALID)
        lim = np.percentile(np.abs(w64), percentile, axis=1, keepdims=True) if k else np.zeros((n, 1))
        w64 = np.clip(w64, -lim, lim)
    wg = w64.reshape(n, k // g, g)
    if hessian is not None:
        return _gptq(w64, _check_hessian(hessian, k), g, symmetric, _CLIP_RATIOS if method == "mse" else (1.0,))
    best_scale, best_zero = _search_fit(wg, _CLIP_RATIOS if method == "mse" else (1.0,), symmetric)
    q = _codes(wg, best_scale, best_zero).astype(np.int8).reshape(n, k)
    return W4Weight(q, best_scale.astype(np.float16),
                    None if best_zero is None else best_zero.astype(np.int8), g)


def _search_fit(wg: np.ndarray, ratios, symmetric: bool):
    """(scale, zero) per group of wg [..., G]: of the clipping ratios, the one with the least
    squared error of the group."""
    best_err = best_scale = best_zero = None
    for ratio in ratios:
        scale, zero = _fit(wg, ratio, symmetric)
        q = _codes(wg, scale, zero)
        err = np.sum(((q - (0.0 if zero is None else zero[..., None])) * scale[..., None] - wg) ** 2, axis=-1)
        if best_err is None:
            best_err, best_scale, best_zero = err, scale, zero
        else:
            better = err < best_err
            best_err = np.where(better, err, best_err)
            best_scale = np.where(better, scale, best_scale)
            if zero is not None:
                best_zero = np.where(better, zero, best_zero)
    return best_scale, best_zero


def _check_hessian(h, k: int) -> np.ndarray:
    h = np.asarray(h, np.float64)
    if h.shape != (k, k):
        raise InputError(f"hessian must be [{k}, {k}] (the layer's input width), got {list(h.shape)}", _ERR_SHAPE)
    if not np.all(np.isfinite(h)):
        raise InputError("hessian has non-finite entries", _ERR_INVALID)
    return h


GPTQ_DAMP = 0.01   # of the mean diagonal, added to H's diagonal (keeps the Cholesky factor stable)
GPTQ_BLOCK = 128   # columns updated together (a multiple of every group size)


def _gptq_sweep(w: np.ndarray, h: np.ndarray, quantize_column) -> None:
    """GPTQ (Frantar et al., 2022): columns are quantized left to right and each one's rounding
    error, weighted by the inverse of the layer's input Hessian H = Σ xᵀx, is pushed onto the
    columns not yet quantized, so the layer's *output* error on inputs like the calibration
    ones shrinks, not the weight error. quantize_column(col, block, i) quantizes column col —
    block[:, i] of the current block of columns, as updated so far (block[:, i:] are the
    columns still to come in it) — stores its codes and returns its dequantised values."""
    n, k = w.shape
    w = w.copy()
    h = h.copy()
    dead = np.diag(h) <= 0  # inputs that never vary: their weights do not matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices(k)] += GPTQ_DAMP * float(np.mean(np.diag(h)))
    try:
        u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper factor of H⁻¹: H⁻¹ = uᵀu
    except np.linalg.LinAlgError:
        raise InputError("the activation Hessian is not positive definite even after damping "
                         "(too few calibration rows?)", _ERR_INVALID) from None
    for b0 in range(0, k, GPTQ_BLOCK):
        b1 = min(b0 + GPTQ_BLOCK, k)
        wb = w[:, b0:b1].copy()
        err = np.zeros_like(wb)
        ub = u[b0:b1, b0:b1]
        for i in range(b1 - b0):
            e = (wb[:, i] - quantize_column(b0 + i, wb, i)) / ub[i, i]
            wb[:, i:] -= np.outer(e, ub[i, i:])
            err[:, i] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]


def _gptq(w: np.ndarray, h: np.ndarray, g: int, symmetric: bool, ratios) -> W4Weight:
    """W4 by GPTQ (_gptq_sweep). A group's scale (and zero) is fitted when its first column is
    reached, on the weights as updated so far."""
    n, k = w.shape
    q = np.empty((n, k), np.int8)
    scales = np.empty((n, k // g))
    zeros = None if symmetric else np.empty((n, k // g))
    fit = {}

    def column(col, wb, i):
        if col % g == 0:  # a group starts: fit it on its current values
            sc, z = _search_fit(wb[:, i:i + g][:, None, :], ratios, symmetric)
            fit["scale"], fit["zero"] = sc[:, 0], (0.0 if z is None else z[:, 0])
            scales[:, col // g] = fit["scale"]
            if zeros is not None:
                zeros[:, col // g] = fit["zero"]
        code = np.clip(np.rint(wb[:, i] / fit["scale"]) + fit["zero"], -8, 7)
        q[:, col] = code
        return (code - fit["zero"]) * fit["scale"]

    _gptq_sweep(w, h, column)
    return W4Weight(q, scales.astype(np.float16), None if zeros is None else zeros.astype(np.int8), g)


def quantize_w8(w, hessian=None) -> Tuple[np.ndarray, np.ndarray]:
    """(q int8 [out, in] in [-127, 127], scale float32 [out]) of a float weight w [out, in]:
    symmetric per output channel, scale = max|w_row| / 127 (1 for an all-zero row). With
    hessian (Σ xᵀx [in, in] over calibration inputs of the layer, :func:`input_hessian`) the
    codes come from GPTQ's error compensation (_gptq_sweep) instead of rounding each weight
    to nearest: the same scales, a smaller error of x · Wᵀ on inputs like the calibration
    ones. The form nerve's int8 kernels take (linear_w8, linear_w8a8, conv_w8a8)."""
    w64 = np.asarray(w, np.float64)
    if w64.ndim != 2 or not np.all(np.isfinite(w64)):
        raise InputError(f"quantize_w8 takes a finite 2-D weight, got shape {w64.shape}", _ERR_INVALID)
    amax = np.abs(w64).max(axis=1) if w64.size else np.zeros(w64.shape[0])
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    s64 = scale.astype(np.float64)
    if hessian is None:
        return np.clip(np.rint(w64 / s64[:, None]), -127, 127).astype(np.int8), scale
    q = np.empty(w64.shape, np.int8)

    def column(col, wb, i):
        code = np.clip(np.rint(wb[:, i] / s64), -127, 127)
        q[:, col] = code
        return code * s64

    _gptq_sweep(w64, _check_hessian(hessian, w64.shape[1]), column)
    return q, scale


# ---- whole models: nerve.quantize

def _feeds_list(calibration, names) -> list:
    """The calibration feeds as a list of dicts, checked: at least one, every model input
    named in each (state inputs may be omitted), arrays only."""
    if calibration is None:
        return []
    if isinstance(calibration, dict):
        raise InputError("calibration must be an iterable of feed dicts ({input name: array}), got one dict; "
                         "wrap it in a list", _ERR_INVALID)
    feeds = []
    for i, f in enumerate(calibration):
        if not isinstance(f, dict):
            raise InputError(f"calibration[{i}] is a {type(f).__name__}, expected a dict {{input name: array}}",
                             _ERR_INVALID)
        unknown = sorted(set(f) - set(names))
        if unknown:
            raise InputError(f"calibration[{i}] names {unknown}, which are not inputs of the model {names}",
                             _ERR_INVALID)
        feeds.append({k: np.asarray(v) for k, v in f.items()})
    if not feeds:
        raise InputError("calibration is empty: give at least one feed dict", _ERR_INVALID)
    return feeds


def _outputs_of(sess, feeds) -> Dict[str, np.ndarray]:
    """Every output over all feeds, flattened and concatenated per output name (float64)."""
    got: Dict[str, list] = {}
    for f in feeds:
        for k, v in sess.run(f).items():
            got.setdefault(k, []).append(np.asarray(v, np.float64).ravel())
    return {k: np.concatenate(v) for k, v in got.items()}


def _compare(ref: Dict[str, np.ndarray], got: Dict[str, np.ndarray]) -> Dict[str, float]:
    """The worst cosine and SNR (dB) over the outputs, and the largest |error|."""
    errs = [_error(ref[k], got[k]) for k in ref if ref[k].size and np.issubdtype(ref[k].dtype, np.floating)]
    if not errs:
        return {"cosine": 1.0, "snr_db": float("inf"), "max_abs": 0.0}
    return {"cosine": min(e["cosine"] for e in errs), "snr_db": min(e["snr_db"] for e in errs),
            "max_abs": max(e["max_abs"] for e in errs)}


def _w4_bytes(fp32_bytes: int, group: int) -> int:
    n_weights = fp32_bytes // 4
    return n_weights // 2 + 2 * (n_weights // group)


def _w8_bytes(fp32_bytes: int, out_channels: int) -> int:
    return fp32_bytes // 4 + 4 * out_channels  # int8 codes and an fp32 scale per output channel


SCHEMES = ("w8a8", "w8a32", "w4a8", "w4a32")
_W8_OPS = ("linear_w8", "linear_w8a8", "conv_w8a8")


def _layers_of(model, scheme: str, precision: str, kw: dict) -> Dict[str, tuple]:
    """{layer name: (fp32 weight bytes, output channels)} of the layers scheme can take, as the
    compiler names them: W4 linears; for w8a8 the linears and the group-1 1-D convs; for w8a32
    the linears (there is no fp32-activation int8 conv)."""
    from pathlib import Path

    from .compiler import compile_program
    from .compiler.ort_format import load_ort

    raw = Path(model).read_bytes()
    onnx_bytes = load_ort(raw).SerializeToString() if raw[4:8] == b"ORTM" else raw
    prog = compile_program(onnx_bytes, Path(model).parent, kw["dims"], kw["state"], True, kw["constants"],
                           kw["outputs"], "int8:convs" if scheme == "w8a8" else precision)
    if scheme in ("w8a8", "w8a32"):
        kinds = _W8_OPS if scheme == "w8a8" else ("linear_w8",)

        def shape(op) -> List[int]:  # [out, in...] of the fp32 weight the op's int8 one stands for
            if op.type == "linear_w8":
                return [int(d) for d in op.inputs[1].shape]  # q [n, k]
            return [int(d) for d in op.iattr[1:4 if op.type == "conv_w8a8" else 3]]  # [act, n, k] / [act, M, C, K]
        return {op.name: (4 * int(np.prod(shape(op))), shape(op)[0]) for op in prog.ops if op.type in kinds}
    from .compiler.passes import linear_w4_layers

    return {name: (b, 0) for name, b in linear_w4_layers(prog)}


def quantize(model, scheme: str = "w8a8", calibration=None, method: str = "mse", policy="auto",
             group_size: int = 64, budget: Optional[float] = None, dims=None, state=None, constants=None,
             outputs=None, progress: bool = True):
    """Quantizes an ONNX model's layers and returns the compiled Plan, with ``plan.report``: each
    layer's sensitivity, the precision chosen for it and why, and the whole model's accuracy
    against fp32.

    scheme: "w8a8" — linear layers and group-1 1-D convolutions, INT8 weights per output
    channel and INT8 activations per row (linear_w8a8 / conv_w8a8); "w8a32" — linear layers,
    the same INT8 weights with fp32 activations (linear_w8: only the weights' rounding); with
    calibration data the weights of the linears come from GPTQ (their input Hessians gathered
    on the calibration feeds), which keeps the product's output, not the weight, close to
    fp32. "w4a8" / "w4a32" — linear layers, W4
    (nerve.precision); method: the W4 quantizer ("minmax", "mse", "percentile"); group_size:
    32, 64 or 128 (a layer whose width it does not divide takes the largest smaller one).
    calibration: an iterable of feed dicts ({input name: array}) held out from training, run
    through the model at fp32 and at each candidate precision; needed by policy="auto" and for
    the accuracy report (activation scales are computed per row at run time: no static
    activation ranges are calibrated).
    policy: "auto" — every layer is quantised alone and scored (the worst cosine and SNR over
    the outputs against fp32); the most sensitive layers are kept fp32 as long as the weights
    of the layers considered stay within ``budget`` x their fp32 bytes (default 0.25 for W4,
    0.5 for w8a8 and w8a32); "all" — every layer at the scheme; or a dict {layer name: "fp32" |
    scheme} (names as ``Session.ops()`` gives them; layers not named take ``scheme``).
    """
    import sys

    from .session import Session
    from .session import compile as nerve_compile

    if scheme not in SCHEMES:
        raise InputError(f"scheme must be one of {SCHEMES}, got {scheme!r}", _ERR_INVALID)
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}", _ERR_INVALID)
    if group_size not in GROUP_SIZES:
        raise InputError(f"group_size must be one of {GROUP_SIZES}, got {group_size!r}", _ERR_INVALID)
    if not (isinstance(policy, dict) or policy in ("auto", "all")):
        raise InputError(f"policy must be 'auto', 'all' or a dict {{layer: precision}}, got {policy!r}",
                         _ERR_INVALID)
    w8 = scheme in ("w8a8", "w8a32")
    if budget is None:
        budget = 0.5 if w8 else 0.25
    if not 0.0 < float(budget) <= 1.0:
        raise InputError(f"budget must be in (0, 1] (a fraction of the fp32 weight bytes), got {budget}",
                         _ERR_INVALID)
    precision = {"w8a8": "int8", "w8a32": "w8a32"}.get(scheme, f"{scheme}:g{group_size}:{method}")
    kw = dict(dims=dims, state=state, constants=constants, outputs=outputs)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)

    ref_sess = Session(model, **kw)
    feeds = _feeds_list(calibration, ref_sess.input_names)
    if policy == "auto" and not feeds:
        raise InputError("policy='auto' needs calibration data (an iterable of feed dicts)", _ERR_INVALID)
    candidates = _layers_of(model, scheme, precision, kw)
    names = list(candidates)
    fp32_bytes = {n: b for n, (b, _) in candidates.items()}

    def quantized_bytes(name: str) -> int:
        b, out_channels = candidates[name]
        return _w8_bytes(b, out_channels) if w8 else _w4_bytes(b, group_size)

    if isinstance(policy, dict):
        unknown = sorted(set(policy) - set(names))
        if unknown:
            raise InputError(f"policy names layers the model does not have (or that {scheme} cannot take): "
                             f"{unknown}; layers: {names}", _ERR_INVALID)
        bad = sorted(p for p in policy.values() if p not in ("fp32", scheme))
        if bad:
            raise InputError(f"policy precisions must be 'fp32' or {scheme!r}, got {bad}", _ERR_INVALID)
    ref = _outputs_of(ref_sess, feeds) if feeds else {}
    hessians = None
    if w8 and feeds:
        taps = LinearTaps(model, **{k: kw[k] for k in ("dims", "constants", "outputs")})
        for f in feeds:
            taps.run({k: v for k, v in f.items() if k in taps.input_names})
        hessians = taps.hessians
        say(f"GPTQ statistics: {len(hessians)} linear layers over {len(feeds)} calibration feeds")

    layers: Dict[str, dict] = {}
    choice: Dict[str, str] = {n: scheme for n in names}
    if policy == "auto":
        for i, name in enumerate(names, 1):
            sess = Session(nerve_compile(model, precision="fp32", layers={name: precision}, hessians=hessians, **kw))
            score = _compare(ref, _outputs_of(sess, feeds))
            layers[name] = {"alone": score}
            say(f"[{i}/{len(names)}] {name}: cosine {score['cosine']:.6f}, SNR {score['snr_db']:.1f} dB")
        limit = budget * sum(fp32_bytes.values())
        total = sum(quantized_bytes(n) for n in names)
        for rank, name in enumerate(sorted(names, key=lambda n: layers[n]["alone"]["snr_db"]), 1):
            extra = fp32_bytes[name] - quantized_bytes(name)
            snr = layers[name]["alone"]["snr_db"]
            if snr == float("inf"):  # quantizing it changed nothing the feeds reach
                layers[name]["why"] = (f"{scheme}: the outputs did not change at all on the calibration feeds "
                                       "(a branch they never take?), so nothing measured argues for fp32")
                continue
            if total + extra <= limit:
                total += extra
                choice[name] = "fp32"
                layers[name]["why"] = (f"kept fp32: sensitivity rank {rank} (SNR {snr:.1f} dB alone), "
                                       f"+{extra} bytes within the budget")
            else:
                layers[name]["why"] = (f"{scheme}: sensitivity rank {rank} (SNR {snr:.1f} dB alone); keeping it "
                                       f"fp32 would exceed the budget ({int(total + extra)} > {int(limit)} bytes)")
    elif isinstance(policy, dict):
        choice.update(policy)
        for name in names:
            layers[name] = {"why": "given by the policy" if name in policy else f"{scheme}: the scheme's default"}
    else:
        for name in names:
            layers[name] = {"why": f"{scheme}: policy 'all'"}
    for name in names:
        layers[name]["precision"] = choice[name]
    plan = nerve_compile(model, precision=precision, hessians=hessians,
                         layers={n: (precision if c == scheme else c) for n, c in choice.items()}, **kw)
    accuracy = _compare(ref, _outputs_of(Session(plan), feeds)) if feeds else None
    weight_bytes = sum(fp32_bytes[n] if choice[n] == "fp32" else quantized_bytes(n) for n in names)
    plan.report = {"scheme": scheme, "method": "gptq" if hessians else ("rtn" if w8 else method),
                   "group_size": None if w8 else group_size, "policy": policy if isinstance(policy, str) else "dict",
                   "layers": layers, "accuracy": accuracy,
                   "weight_bytes": {"fp32": sum(fp32_bytes.values()), "chosen": weight_bytes}}
    kept = [n for n in names if choice[n] == "fp32"]
    say(f"quantized {len(names) - len(kept)} of {len(names)} layers to {scheme} "
        f"({weight_bytes} of {sum(fp32_bytes.values())} fp32 bytes); kept fp32: {kept or 'none'}")
    if accuracy:
        say(f"accuracy vs fp32 on {len(feeds)} calibration feeds: cosine {accuracy['cosine']:.6f}, "
            f"SNR {accuracy['snr_db']:.1f} dB, max |error| {accuracy['max_abs']:.3g}")
    return plan
