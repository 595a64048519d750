"""Handlers for ONNX's signal operators. STFT and DFT become products with a DFT basis made
at compile time in float64 (STFT a strided 1-D conv, which the compiler's select_rdft runs as a
real FFT for power-of-two frames; DFT a linear over the transformed axis); the window
generators (HannWindow, HammingWindow, BlackmanWindow) and MelWeightMatrix are constants of
the plan, computed here from their definitions in the ONNX specification.
"""

from __future__ import annotations


import numpy as np

from . import symbolic as S
from .graph import Value
from .onnx_import import NodeCtx, handler
from .onnx_ops import conv_out_dim, conv_scratch, norm_axis, spec


def _static_float(ctx: NodeCtx, v: Value, what: str) -> float:
    if v is None or v.const is None or v.const.size != 1:
        raise ctx.fail(f"{what} must be a constant scalar")
    return float(v.const.reshape(-1)[0])


def _output_dtype(ctx: NodeCtx) -> np.dtype:
    return ctx.dtype_attr("output_datatype", 1)  # 1: float32


# ---------------------------------------------------------------- STFT

@handler("STFT")
def _stft(ctx: NodeCtx, ins):
    """STFT (opset 17) of a real signal [B, L, 1] (or [B, L]) with a constant window: a 1-D conv
    whose weight is the windowed DFT basis [win·cos; -win·sin] (frame_step as its stride), reshaped and
    transposed to ONNX's [B, frames, bins, 2]. The compiler's select_rdft then runs the conv
    as a real FFT when the frame length is a power of two (and the basis has at most N/2 + 1
    bins); other lengths keep the conv (N·bins multiply-adds per frame)."""
    signal, step_v = ins[0], ins[1]
    window = ins[2] if len(ins) > 2 else None
    length_v = ins[3] if len(ins) > 3 else None
    # [batch, length] is read as real, as onnxruntime does (torch's TorchScript exporter writes it)
    if signal.dtype != np.float32 or signal.rank not in (2, 3):
        raise ctx.fail(f"the signal must be float32 [batch, length, 1 or 2], got {signal.dtype} rank {signal.rank}")
    if signal.rank == 3 and not (S.is_static(signal.shape[2]) and int(signal.shape[2]) == 1):
        raise ctx.fail("complex signals ([batch, length, 2]) are not supported; real ones ([.., 1]) are")
    step = ctx.known_int(step_v, "frame_step")
    if step < 1:
        raise ctx.fail(f"frame_step {step} must be >= 1")
    if window is not None and (window.const is None or window.rank != 1):
        raise ctx.fail("the window must be a constant 1-D tensor")
    win = None if window is None else window.const.astype(np.float64)
    n = ctx.known_int(length_v, "frame_length") if length_v is not None else (None if win is None else win.size)
    if n is None:
        raise ctx.fail("needs a window or a frame_length")
    if win is None:
        win = np.ones(n)
    if win.size != n or n < 1:
        raise ctx.fail(f"window of {win.size} samples for frames of {n}")
    bins = n // 2 + 1 if ctx.attr("onesided", 1) else n
    angle = 2.0 * np.pi * (np.outer(np.arange(bins), np.arange(n)) % n) / n
    basis = np.concatenate([win * np.cos(angle), -win * np.sin(angle)])[:, None, :].astype(np.float32)
    b = ctx.b
    batch, length = signal.shape[0], signal.shape[1]
    x = b.alias(signal, [batch, 1, length], b.fresh(ctx.name))  # moves an axis of extent 1: same bytes
    frames = conv_out_dim(ctx, length, n, step, 1, 0, 0)
    y = b.emit("conv", [x, b.const(basis), None], [spec(b.fresh(ctx.name), np.float32, [batch, 2 * bins, frames])],
               iattr=[1, 1, 0, step, 1, 0, 0], fattr=[0, 0],
               scratch_bytes=conv_scratch(1, 2 * bins, [n], [step], [1], [frames]), name=ctx.name)[0]
    y = b.alias(y, [batch, 2, bins, frames], b.fresh(ctx.name))
    return b.emit("transpose", [y], [spec(ctx.out_name(), np.float32, [batch, frames, bins, 2])], iattr=[0, 3, 2, 1],
                  name=ctx.name)


# ---------------------------------------------------------------- DFT


def _dft_basis(n_in: int, length: int, bins: int, inverse: bool, complex_in: bool) -> np.ndarray:
    """The real matrix B [2·bins, n_in·c] (c = 2 for interleaved complex input, else 1) with
    y = B·x giving bins interleaved (re, im) pairs of the DFT of length `length` of the first
    min(n_in, length) samples (samples past `length` are cut, missing ones are zeros, as ONNX
    reads dft_length). Forward: e^{-2πikn/L}; inverse: e^{+2πikn/L} / L. Made in float64."""
    n = np.arange(min(n_in, length))
    angle = 2.0 * np.pi * (np.outer(np.arange(bins), n) % length) / length
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    re, im = np.cos(angle) * scale, sign * np.sin(angle) * scale
    c = 2 if complex_in else 1
    b = np.zeros((2 * bins, n_in * c))
    if complex_in:  # (xr + i·xi)(re + i·im): real re·xr - im·xi, imaginary im·xr + re·xi
        b[0::2, 0:2 * n.size:2], b[0::2, 1:2 * n.size:2] = re, -im
        b[1::2, 0:2 * n.size:2], b[1::2, 1:2 * n.size:2] = im, re
    else:
        b[0::2, :n.size], b[1::2, :n.size] = re, im
    return b


def _irfft_basis(n_in: int, length: int, complex_in: bool) -> np.ndarray:
    """The real matrix B [length, n_in·c] of the inverse DFT of a one-sided spectrum (as
    numpy's irfft): y[n] = (1/L) Σ_k w_k (Re X_k cos 2πkn/L - Im X_k sin 2πkn/L) over the first
    L//2 + 1 bins (missing ones are zeros), w_k = 2 for the bins that stand for a conjugate
    pair, 1 for bin 0 and, for an even L, bin L/2. Made in float64."""
    c = 2 if complex_in else 1
    b = np.zeros((length, n_in * c))
    n = np.arange(length)
    for k in range(min(n_in, length // 2 + 1)):
        weight = 1.0 if k == 0 or 2 * k == length else 2.0
        angle = 2.0 * np.pi * (k * n % length) / length
        b[:, k * c] = weight * np.cos(angle) / length
        if complex_in:
            b[:, k * c + 1] = -weight * np.sin(angle) / length
    return b


@handler("DFT")
def _dft(ctx: NodeCtx, ins):
    """DFT (opsets 17 and 20) of real ([..., 1]) or complex ([..., 2]) input along one signal
    axis, forward or inverse, onesided or full, with an optional constant dft_length: a
    linear over that axis with the basis of _dft_basis (N·bins multiply-adds per signal).
    Inverse and onesided: a one-sided spectrum to a real signal [..., dft_length, 1]."""
    from .onnx_ops import linear

    x = ins[0]
    if x.dtype != np.float32:
        raise ctx.fail(f"DFT of {x.dtype} is not supported (float32)")
    if x.rank < 3:
        raise ctx.fail(f"input of rank {x.rank}: expected [batch, signal..., 1 or 2]")
    last = x.shape[-1]
    if not S.is_static(last) or int(last) not in (1, 2):
        raise ctx.fail("the last axis must be 1 (real) or 2 (complex)")
    complex_in = int(last) == 2
    if ctx.opset >= 20:
        axis_v = ins[2] if len(ins) > 2 else None
        axis = -2 if axis_v is None else ctx.known_int(axis_v, "axis")
    else:
        axis = int(ctx.attr("axis", 1))
    axis = norm_axis(ctx, axis, x.rank)
    if axis in (0, x.rank - 1):
        raise ctx.fail(f"axis {axis} is the batch or the complex axis")
    n_in = x.shape[axis]
    if not S.is_static(n_in):
        raise ctx.fail("the transformed axis must have a size known when the model is compiled")
    n_in = int(n_in)
    length_v = ins[1] if len(ins) > 1 else None
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    irfft = inverse and onesided  # a one-sided spectrum back to a real signal (opset 20's reading)
    length = (2 * (n_in - 1) if irfft else n_in) if length_v is None else ctx.known_int(length_v, "dft_length")
    if length < 1:
        raise ctx.fail(f"dft_length {length} must be >= 1")
    if onesided and complex_in and not inverse:
        raise ctx.fail("a forward onesided DFT is defined for a real signal")
    bins = length // 2 + 1 if onesided and not inverse else length
    b = ctx.b
    # move the transformed axis next to the complex one, flatten both, one linear, and back
    order = [i for i in range(x.rank - 1) if i != axis] + [axis, x.rank - 1]
    moved = x
    if order != list(range(x.rank)):
        moved = b.emit("transpose", [x], [spec(b.fresh(ctx.name), x.dtype, [x.shape[i] for i in order])],
                       iattr=order, name=ctx.name)[0]
    outer = list(moved.shape[:-2])
    flat = b.alias(moved, outer + [n_in * int(last)], b.fresh(ctx.name))
    basis = _irfft_basis(n_in, length, complex_in) if irfft else _dft_basis(n_in, length, bins, inverse, complex_in)
    y = linear(ctx, flat, basis, None, b.fresh(ctx.name))
    y = b.alias(y, outer + ([length, 1] if irfft else [bins, 2]), b.fresh(ctx.name))
    back = [order.index(i) for i in range(x.rank)]
    out_shape = [y.shape[i] for i in back]
    if back == list(range(x.rank)):
        return [b.alias(y, out_shape, ctx.out_name())]
    return b.emit("transpose", [y], [spec(ctx.out_name(), np.float32, out_shape)], iattr=back, name=ctx.name)


# ---------------------------------------------------------------- windows and mel filters


def _window(ctx: NodeCtx, ins, coefs) -> Value:
    """A generalised cosine window Σ_k (-1)^k a_k cos(2πkn/N) of `size` points: N = size for a
    periodic window (periodic=1, the default), size - 1 for a symmetric one."""
    size = ctx.known_int(ins[0], "size")
    if size < 0:
        raise ctx.fail(f"size {size} must be >= 0")
    span = size if ctx.attr("periodic", 1) else size - 1
    n = np.arange(size, dtype=np.float64)
    w = np.zeros(size)
    for k, a in enumerate(coefs):
        w += (-1) ** k * a * (np.cos(2.0 * np.pi * k * n / span) if span > 0 else 1.0)
    return ctx.b.const(w.astype(_output_dtype(ctx)), ctx.out_name())


@handler("HannWindow")
def _hann(ctx: NodeCtx, ins):
    return [_window(ctx, ins, (0.5, 0.5))]


@handler("HammingWindow")
def _hamming(ctx: NodeCtx, ins):
    return [_window(ctx, ins, (25.0 / 46.0, 21.0 / 46.0))]


@handler("BlackmanWindow")
def _blackman(ctx: NodeCtx, ins):
    return [_window(ctx, ins, (0.42, 0.5, 0.08))]


def _hz_to_mel(hz):
    return 2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0)


def _mel_to_hz(mel):
    return 700.0 * (10.0 ** (np.asarray(mel, np.float64) / 2595.0) - 1.0)


@handler("MelWeightMatrix")
def _mel_weight_matrix(ctx: NodeCtx, ins):
    """MelWeightMatrix: [dft_length/2 + 1, num_mel_bins] triangular filters, each rising from
    its left edge to 1 at its centre and falling to its right edge, with the num_mel_bins + 2
    edges spaced evenly on the mel scale (2595·log10(1 + f/700)) between lower_edge_hertz and
    upper_edge_hertz and floored to DFT bins ((dft_length + 1)·f / sample_rate), as the ONNX
    specification defines it."""
    if len(ins) != 5:
        raise ctx.fail("expects num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz")
    mels = ctx.known_int(ins[0], "num_mel_bins")
    dft_length = ctx.known_int(ins[1], "dft_length")
    rate = ctx.known_int(ins[2], "sample_rate")
    lo, hi = _static_float(ctx, ins[3], "lower_edge_hertz"), _static_float(ctx, ins[4], "upper_edge_hertz")
    if mels < 1 or dft_length < 1 or rate < 1 or not 0 <= lo < hi:
        raise ctx.fail(f"num_mel_bins {mels}, dft_length {dft_length}, sample_rate {rate}, edges {lo}..{hi} Hz: "
                       "expected positive sizes and 0 <= lower < upper")
    spectrum_bins = dft_length // 2 + 1
    lo_mel, hi_mel = _hz_to_mel(lo), _hz_to_mel(hi)
    edges_hz = _mel_to_hz(lo_mel + np.arange(mels + 2) * (hi_mel - lo_mel) / (mels + 2))
    edges = np.floor((dft_length + 1) * edges_hz / rate).astype(np.int64)
    if edges[-1] >= spectrum_bins:
        raise ctx.fail(f"upper_edge_hertz {hi} lies beyond the {spectrum_bins} bins of dft_length {dft_length} "
                       f"at {rate} Hz")
    out = np.zeros((spectrum_bins, mels))
    j = np.arange(spectrum_bins)
    for m in range(mels):
        left, centre, right = edges[m], edges[m + 1], edges[m + 2]
        if centre == left:
            out[centre, m] = 1.0
        else:
            rise = (j >= left) & (j <= centre)
            out[rise, m] = (j[rise] - left) / (centre - left)
        if right > centre:
            fall = (j >= centre) & (j < right)
            out[fall, m] = (right - j[fall]) / (right - centre)
    return [ctx.b.const(out.astype(_output_dtype(ctx)), ctx.out_name())]
