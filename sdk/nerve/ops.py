"""Kernels of libnerve on numpy arrays.

Every function validates its arguments (see :mod:`nerve._marshal` for the rules: exact
dtypes, no silent casts, contiguous inputs passed without a copy), calls the kernel that
the dispatch table chose for this CPU (:mod:`nerve.kernels`), and returns a float32 array.
Each accepts ``out=``: a C-contiguous, writeable float32 array of exactly the result's shape
that receives the result (and is returned); on any error nothing is written to it.

Errors raise :class:`nerve.InputError` (bad dtype, shape, index, option) or another
:class:`nerve.NerveError` subclass.
"""

from __future__ import annotations

import numpy as np

from . import _marshal as m
from ._native import check, lib
from .errors import InputError, code

__all__ = [
    "embedding",
    "layernorm",
    "linear",
    "layernorm_linear",
    "gemm",
    "gelu",
    "relu",
    "sigmoid",
    "tanh",
    "softmax",
]

_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_I8 = np.dtype(np.int8)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)


def _eps(eps, op: str) -> float:
    try:
        return float(eps)
    except (TypeError, ValueError):
        raise InputError(f"{op}: eps must be a number, got {eps!r}", code("NRV_ERR_INVALID_ARG")) from None


def embedding(table, ids, out=None, row_scales=None):
    """Gathers rows of ``table``: ``out[..., :] = table[ids[...], :]`` as float32.

    Args:
        table: [rows, dim] float32, float16 or int8. An int8 table is dequantised per row:
            ``out = table[id] * row_scales[id]``.
        ids: int32 or int64 array of any shape (0-d and empty included); every id must be in
            ``[0, rows)``. Other integer dtypes raise InputError (no silent conversion).
        out: optional float32 array of shape ``ids.shape + (dim,)``.
        row_scales: [rows] float32, required for an int8 table, not allowed otherwise.

    Returns:
        float32 array of shape ``ids.shape + (dim,)``.

    Raises:
        InputError: an id out of range (the message names its position and value; ``out``
        is left untouched), or a wrong dtype/shape.
    """
    op = "embedding"
    table = m.as_input(table, "table", op, (_F32, _F16, _I8), ndim=2)
    ids = m.as_input(ids, "ids", op, (_I64, _I32))
    rows, dim = table.shape
    if table.dtype == _I8:
        if row_scales is None:
            raise InputError(
                "embedding: an int8 table needs row_scales (float32, one scale per table row)",
                code("NRV_ERR_INVALID_ARG"),
            )
        row_scales = m.as_float32(row_scales, "row_scales", op, ndim=1)
        m.expect_shape(row_scales, (rows,), "row_scales", op, "one scale per table row")
    elif row_scales is not None:
        raise InputError(
            f"embedding: row_scales is only for an int8 table, this table is {table.dtype}",
            code("NRV_ERR_INVALID_ARG"),
        )
    out = m.result(out, ids.shape + (dim,), op, table=table, ids=ids, row_scales=row_scales)
    check(
        lib.nrv_embedding(
            m.ptr(table), m.nrv_dtype(table.dtype), rows, dim, m.ptr(row_scales),
            m.ptr(ids), m.nrv_dtype(ids.dtype), ids.size, m.ptr(out),
        )
    )
    return out


def _norm_params(op, x, gamma, beta):
    dim = x.shape[-1]
    gamma = m.as_float32(gamma, "gamma", op, ndim=1)
    m.expect_shape(gamma, (dim,), "gamma", op, "the size of the last axis of x")
    if beta is not None:
        beta = m.as_float32(beta, "beta", op, ndim=1)
        m.expect_shape(beta, (dim,), "beta", op, "the size of the last axis of x")
    return gamma, beta


def layernorm(x, gamma, beta=None, eps=1e-5, out=None):
    """Layer normalisation over the last axis of ``x`` (any rank >= 1):
    ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    Args:
        x: float32 [..., dim]. gamma, beta: float32 [dim] (beta None means zeros).
        eps: finite, >= 0. out: optional float32 array shaped like ``x``; it may be ``x``
            itself (in place), but may not partially overlap it.
    """
    op = "layernorm"
    x = m.as_float32(x, "x", op, min_ndim=1)
    gamma, beta = _norm_params(op, x, gamma, beta)
    out = m.result(out, x.shape, op, in_place=("x", x), gamma=gamma, beta=beta)
    dim = x.shape[-1]
    check(lib.nrv_layernorm(m.ptr(x), m.prod(x.shape[:-1]), dim, m.ptr(gamma), m.ptr(beta), _eps(eps, op), m.ptr(out)))
    return out


def _linear_params(op, x, W, b):
    W = m.as_float32(W, "W", op, ndim=2)
    n_out, n_in = W.shape
    if x.shape[-1] != n_in:
        raise InputError(
            f"{op}: x has {x.shape[-1]} features (last axis of shape {x.shape}) but W of shape "
            f"{W.shape} takes {n_in}",
            code("NRV_ERR_SHAPE"),
        )
    if b is not None:
        b = m.as_float32(b, "b", op, ndim=1)
        m.expect_shape(b, (n_out,), "b", op, "one bias per output feature, W.shape[0]")
    return W, b


def linear(x, W, b=None, out=None):
    """Linear layer ``x @ W.T + b``.

    Args:
        x: float32 [..., in]. W: float32 [out, in]. b: float32 [out] or None.
        out: optional float32 array of shape ``x.shape[:-1] + (out,)``, not overlapping
            any input.
    """
    op = "linear"
    x = m.as_float32(x, "x", op, min_ndim=1)
    W, b = _linear_params(op, x, W, b)
    n_out, n_in = W.shape
    out = m.result(out, x.shape[:-1] + (n_out,), op, x=x, W=W, b=b)
    check(lib.nrv_linear(m.ptr(x), m.prod(x.shape[:-1]), n_in, m.ptr(W), m.ptr(b), n_out, m.ptr(out)))
    return out


def layernorm_linear(x, gamma, beta, W, b=None, eps=1e-5, out=None, device=None):
    """Fused ``linear(layernorm(x, gamma, beta, eps), W, b)``: each row is normalised on the
    fly, with no normalised tensor written to memory.

    Args:
        x: float32 [..., in]. gamma, beta: float32 [in] (beta may be None).
        W: float32 [out, in]. b: float32 [out] or None. eps: finite, >= 0.
        out: optional float32 array of shape ``x.shape[:-1] + (out,)``, not overlapping
            any input.
        device: None or "cpu" (here), "cuda" / "cuda:N" / N: on that GPU
            (nerve.cuda.layernorm_linear: numpy or device arrays, float16 x too).
    """
    if device not in (None, "cpu"):
        from . import cuda

        return cuda.layernorm_linear(x, gamma, beta, W, b, eps=eps, device=device, out=out)
    op = "layernorm_linear"
    x = m.as_float32(x, "x", op, min_ndim=1)
    gamma, beta = _norm_params(op, x, gamma, beta)
    W, b = _linear_params(op, x, W, b)
    n_out, n_in = W.shape
    out = m.result(out, x.shape[:-1] + (n_out,), op, x=x, gamma=gamma, beta=beta, W=W, b=b)
    check(
        lib.nrv_layernorm_linear(
            m.ptr(x), m.prod(x.shape[:-1]), n_in, m.ptr(gamma), m.ptr(beta), _eps(eps, op),
            m.ptr(W), m.ptr(b), n_out, m.ptr(out),
        )
    )
    return out


def gemm(a, b, c=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, out=None):
    """General matrix product ``alpha * op(a) @ op(b) + beta * c`` with ``op(x) = x.T`` when
    the matching ``trans_*`` flag is set.

    Args:
        a, b: float32 2-D; ``op(a)`` is [m, k] and ``op(b)`` [k, n]. Transposed views
            (``x.T``) and row-strided views (``x[:, :k]``) are passed without a copy.
        c: float32 [m, n] or None (zeros). Read only; ``beta`` is ignored when c is None,
            and when ``beta == 0`` c's contents (NaN included) do not matter.
        out: optional float32 [m, n] C-contiguous array receiving the result; it may be
            ``c`` itself (accumulate in place) but must not overlap ``a`` or ``b``.
    """
    op = "gemm"
    a_logical = a if isinstance(a, np.ndarray) else m.as_float32(a, "a", op, ndim=2)
    b_logical = b if isinstance(b, np.ndarray) else m.as_float32(b, "b", op, ndim=2)
    a_stored, lda, a_flipped = m.as_matrix(a_logical, "a", op)
    b_stored, ldb, b_flipped = m.as_matrix(b_logical, "b", op)
    a_shape = a_logical.shape[::-1] if trans_a else a_logical.shape
    b_shape = b_logical.shape[::-1] if trans_b else b_logical.shape
    (rows, k), (k_b, cols) = a_shape, b_shape
    if k != k_b:
        raise InputError(
            f"gemm: inner dimensions differ: op(a) is {tuple(a_shape)}, op(b) is {tuple(b_shape)}",
            code("NRV_ERR_SHAPE"),
        )
    beta = float(beta)
    if c is not None:
        c = m.as_float32(c, "c", op, ndim=2)
        m.expect_shape(c, (rows, cols), "c", op, "op(a).shape[0], op(b).shape[1]")
    out = m.result(out, (rows, cols), op, a=a_stored, b=b_stored)
    if c is None or beta == 0.0:
        beta = 0.0  # C's prior contents are ignored
    elif not (c.__array_interface__["data"][0] == out.__array_interface__["data"][0] and c.shape == out.shape):
        np.copyto(out, c)
    check(
        lib.nrv_gemm(
            int(bool(trans_a) != a_flipped), int(bool(trans_b) != b_flipped), rows, cols, k, float(alpha),
            m.raw_ptr(a_stored), lda, m.raw_ptr(b_stored), ldb, beta, m.ptr(out), max(1, cols),
        )
    )
    # a_stored / b_stored are alive until here: raw_ptr does not hold them.
    del a_stored, b_stored
    return out


def _activate(op: str, act: int, x, out):
    x = m.as_float32(x, "x", op)
    out = m.result(out, x.shape, op, in_place=("x", x))
    check(lib.nrv_activate(act, m.ptr(x), x.size, m.ptr(out)))
    return out


def gelu(x, approximate="none", out=None):
    """GELU, element-wise. ``approximate='none'``: exact ``x/2 * (1 + erf(x/sqrt(2)))``;
    ``'tanh'``: the tanh approximation (GPT-2). ``out`` may be ``x`` (in place)."""
    if approximate == "none":
        act = lib.NRV_ACT_GELU
    elif approximate == "tanh":
        act = lib.NRV_ACT_GELU_TANH
    else:
        raise InputError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}", code("NRV_ERR_INVALID_ARG"))
    return _activate("gelu", act, x, out)


def relu(x, out=None):
    """``max(x, 0)``, element-wise. ``out`` may be ``x`` (in place)."""
    return _activate("relu", lib.NRV_ACT_RELU, x, out)


def sigmoid(x, out=None):
    """``1 / (1 + exp(-x))``, element-wise. ``out`` may be ``x`` (in place)."""
    return _activate("sigmoid", lib.NRV_ACT_SIGMOID, x, out)


def tanh(x, out=None):
    """Hyperbolic tangent, element-wise. ``out`` may be ``x`` (in place)."""
    return _activate("tanh", lib.NRV_ACT_TANH, x, out)


def softmax(x, out=None):
    """Softmax over the last axis of ``x`` (any rank >= 1). ``out`` may be ``x`` (in place)."""
    op = "softmax"
    x = m.as_float32(x, "x", op, min_ndim=1)
    out = m.result(out, x.shape, op, in_place=("x", x))
    check(lib.nrv_softmax(m.ptr(x), m.prod(x.shape[:-1]), x.shape[-1], m.ptr(out)))
    return out
