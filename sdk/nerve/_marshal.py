"""Argument marshalling: the checks every array passes before a pointer crosses into C.

Rules (the same for every op):

* **dtype** must be one the call accepts. A wrong dtype raises :class:`InputError` naming the
  argument, the dtype received and the one expected; nothing is cast behind the caller's back
  (a float64 array is never silently rounded to float32; the message suggests ``.astype``).
  Plain Python lists / scalars have no dtype of their own and are converted to the expected
  dtype when their kind fits (floats for float arguments, integers for ids).
* **layout**: a C-contiguous, aligned array of the right dtype goes through without a copy
  (the pointer is taken with ``ffi.from_buffer``, which keeps the array alive for the call).
  A non-contiguous (or unaligned) input of the right dtype is copied to a contiguous array:
  correct, at the price of that copy.
* **shape** is checked against what the op needs, with the argument named in the message.
* ``out=`` arrays are never copied or converted: they must be numpy arrays of exactly the
  right dtype and shape, C-contiguous, aligned and writeable, else :class:`InputError`.
* overlap: ``out`` must not share memory with an input unless the C function allows it (some
  allow ``out`` to *be* the input, exactly).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

from ._native import ffi, lib
from .errors import InputError, code

__all__ = [
    "F32",
    "as_input",
    "as_float32",
    "check_out",
    "result",
    "empty_aligned",
    "check_no_overlap",
    "check_same_or_disjoint",
    "ptr",
    "raw_ptr",
    "as_matrix",
    "expect_shape",
    "nrv_dtype",
    "prod",
]

F32 = np.dtype(np.float32)

_ERR_INVALID = code("NRV_ERR_INVALID_ARG")
_ERR_SHAPE = code("NRV_ERR_SHAPE")
_ERR_DTYPE = code("NRV_ERR_DTYPE")

# numpy dtype -> nrv_dtype value, for the dtypes the kernels take.
_NRV_DTYPES = {
    np.dtype(np.float32): lib.NRV_F32,
    np.dtype(np.float16): lib.NRV_F16,
    np.dtype(np.int8): lib.NRV_I8,
    np.dtype(np.int32): lib.NRV_I32,
    np.dtype(np.int64): lib.NRV_I64,
    np.dtype(np.uint8): lib.NRV_U8,
    np.dtype(np.bool_): lib.NRV_BOOL,
    np.dtype(np.float64): lib.NRV_F64,
}

# C pointer type handed to ffi.from_buffer for each dtype, parsed once (not per call).
_C_TYPES = {
    np.dtype(np.float32): ffi.typeof("float[]"),
    np.dtype(np.float16): ffi.typeof("uint16_t[]"),
    np.dtype(np.int8): ffi.typeof("int8_t[]"),
    np.dtype(np.int32): ffi.typeof("int32_t[]"),
    np.dtype(np.int64): ffi.typeof("int64_t[]"),
}
_BYTES = ffi.typeof("char[]")


def nrv_dtype(dtype: np.dtype) -> int:
    """The nrv_dtype enum value of a numpy dtype."""
    return _NRV_DTYPES[np.dtype(dtype)]


def prod(shape: Iterable[int]) -> int:
    """Product of a shape (1 for the empty shape), as a Python int (no overflow)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _dtype_list(dtypes: Sequence[np.dtype]) -> str:
    return " or ".join(np.dtype(d).name for d in dtypes)


def _dtype_error(op: str, name: str, got: np.dtype, expected: Sequence[np.dtype]) -> InputError:
    hint = ""
    same_kind = [d for d in expected if (d.kind == "f") == (got.kind == "f")]
    if got.kind in "fiub":
        suggestion = (same_kind or list(expected))[0]
        hint = f"; nerve never converts silently: convert explicitly, e.g. {name}.astype(np.{suggestion.name})"
    return InputError(
        f"{op}: argument '{name}' has dtype {got}, expected {_dtype_list(expected)}{hint}", _ERR_DTYPE
    )


def _from_literal(value, name: str, op: str, expected: Sequence[np.dtype]) -> np.ndarray:
    """Python lists / scalars carry no dtype choice: convert them to the expected dtype of
    their kind (a float one for float arguments, an integer one for ids)."""
    arr = np.asarray(value)
    floats = [d for d in expected if d.kind == "f"]
    ints = [d for d in expected if d.kind in "iu"]
    if floats and (arr.dtype.kind in "iuf" or arr.size == 0):
        return arr.astype(floats[0])
    # kind "O": Python ints too large for any numpy integer dtype
    if ints and (arr.dtype.kind in "iuO" or (arr.size == 0 and arr.dtype.kind == "f")):
        target = np.dtype(np.int64) if np.dtype(np.int64) in ints else ints[0]
        try:
            return np.asarray(value, dtype=target)
        except (OverflowError, ValueError, TypeError) as exc:
            raise InputError(
                f"{op}: argument '{name}' holds values that are not {target} integers (too large?)", _ERR_INVALID
            ) from exc
    return arr


def as_input(
    value,
    name: str,
    op: str,
    dtypes: Sequence,
    ndim: Optional[int] = None,
    min_ndim: int = 0,
) -> np.ndarray:
    """Validates an input argument and returns the array to hand to C.

    ``dtypes``: accepted dtypes (numpy arrays must have one of them exactly; Python
    lists/scalars are converted to the first one of their kind). ``ndim`` (exact) / ``min_ndim``: rank requirements. Returns the same array
    object when it is already C-contiguous and aligned (no copy), else a contiguous copy.
    """
    if type(value) is np.ndarray and value.dtype in dtypes:
        # The common case, kept cheap (a streaming caller pays this per argument per call):
        # an exact ndarray of an accepted dtype that C can read in place.
        flags = value.flags
        if flags.c_contiguous and flags.aligned and value.ndim >= min_ndim and (ndim is None or value.ndim == ndim):
            return value
    expected = [np.dtype(d) for d in dtypes]
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (list, tuple, int, float)) and not isinstance(value, np.generic):
        arr = _from_literal(value, name, op, expected)
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:  # pragma: no cover - exotic objects
            raise InputError(f"{op}: argument '{name}' is not an array ({type(value).__name__})", _ERR_INVALID) from exc
    if arr.dtype not in expected:
        raise _dtype_error(op, name, arr.dtype, expected)
    if ndim is not None and arr.ndim != ndim:
        raise InputError(
            f"{op}: argument '{name}' must be {ndim}-D, got shape {arr.shape}", _ERR_SHAPE
        )
    if arr.ndim < min_ndim:
        raise InputError(
            f"{op}: argument '{name}' needs at least {min_ndim} dimension(s), got shape {arr.shape}", _ERR_SHAPE
        )
    return _contiguous_aligned(arr)


def _contiguous_aligned(arr: np.ndarray) -> np.ndarray:
    """arr itself when C-contiguous and aligned, else the documented copy that is."""
    if not arr.flags.aligned:
        return np.array(arr, order="C", copy=True)  # fresh numpy memory is aligned
    if not arr.flags.c_contiguous:
        return np.ascontiguousarray(arr)
    return arr


def as_float32(value, name: str, op: str, ndim: Optional[int] = None, min_ndim: int = 0) -> np.ndarray:
    """:func:`as_input` for a float32 argument."""
    return as_input(value, name, op, (F32,), ndim=ndim, min_ndim=min_ndim)


def expect_shape(arr: np.ndarray, shape: Tuple[int, ...], name: str, op: str, why: str = "") -> None:
    """Raises InputError (NRV_ERR_SHAPE) if arr.shape != shape."""
    if tuple(arr.shape) != tuple(shape):
        extra = f" ({why})" if why else ""
        raise InputError(
            f"{op}: argument '{name}' has shape {tuple(arr.shape)}, expected {tuple(shape)}{extra}", _ERR_SHAPE
        )


def check_out(out, shape: Tuple[int, ...], op: str, dtype=F32, name: str = "out") -> np.ndarray:
    """Validates a caller-provided output array; it is used as is, never copied."""
    dtype = np.dtype(dtype)
    if not isinstance(out, np.ndarray):
        raise InputError(f"{op}: '{name}' must be a numpy array, got {type(out).__name__}", _ERR_INVALID)
    if out.dtype != dtype:
        raise InputError(f"{op}: '{name}' has dtype {out.dtype}, expected {dtype}", _ERR_DTYPE)
    if tuple(out.shape) != tuple(shape):
        raise InputError(f"{op}: '{name}' has shape {tuple(out.shape)}, expected {tuple(shape)}", _ERR_SHAPE)
    if not out.flags.c_contiguous:
        raise InputError(f"{op}: '{name}' must be C-contiguous (it is written in place, never copied)", _ERR_INVALID)
    if not out.flags.aligned:
        raise InputError(f"{op}: '{name}' is not aligned to its dtype", _ERR_INVALID)
    if not out.flags.writeable:
        raise InputError(f"{op}: '{name}' is read-only", _ERR_INVALID)
    return out


ALIGNMENT = 64  # bytes: a cache line, and what AVX-512 / streaming stores want


def empty_aligned(shape: Tuple[int, ...], dtype=F32) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary
    (numpy itself only guarantees 16 bytes, which puts vector stores across cache lines)."""
    dtype = np.dtype(dtype)
    nbytes = prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGNMENT
    return raw[start: start + nbytes].view(dtype).reshape(shape)


# Below this many bytes a result is allocated by numpy as it comes (16-byte aligned): aligning
# it costs ~3 us of Python per call, more than the few split cache-line stores it would save.
SMALL_RESULT_BYTES = 64 * 1024


def result(out, shape: Tuple[int, ...], op: str, *, in_place: Optional[Tuple[str, np.ndarray]] = None,
           dtype=F32, **inputs: Optional[np.ndarray]) -> np.ndarray:
    """The array an op writes its result to: a new one when ``out`` is None (64-byte aligned
    when large; it cannot overlap anything), else ``out`` checked by :func:`check_out` and
    checked to share no memory with ``inputs`` (None ignored). ``in_place=(name, arr)``
    names the one input that ``out`` may also be, exactly (see :func:`check_same_or_disjoint`)."""
    if out is None:
        dtype = np.dtype(dtype)
        if prod(shape) * dtype.itemsize < SMALL_RESULT_BYTES:
            return np.empty(shape, dtype)
        return empty_aligned(shape, dtype)
    out = check_out(out, shape, op, dtype)
    if in_place is not None:
        check_same_or_disjoint(op, out, *in_place)
    check_no_overlap(op, out, **inputs)
    return out


def check_no_overlap(op: str, out: np.ndarray, **inputs: Optional[np.ndarray]) -> None:
    """InputError if ``out`` shares any memory with one of the named inputs (None ignored)."""
    for name, arr in inputs.items():
        if arr is not None and out.size and arr.size and np.shares_memory(out, arr):
            raise InputError(f"{op}: 'out' must not overlap input '{name}'", _ERR_INVALID)


def check_same_or_disjoint(op: str, out: np.ndarray, name: str, arr: np.ndarray) -> None:
    """For calls where C allows ``out`` to be the input itself (in place) but not a partial
    overlap: InputError unless ``out`` and ``arr`` are the same memory or disjoint."""
    if not (out.size and arr.size and np.shares_memory(out, arr)):
        return
    same = (
        out.__array_interface__["data"][0] == arr.__array_interface__["data"][0]
        and out.nbytes == arr.nbytes
    )
    if not same:
        raise InputError(
            f"{op}: 'out' partially overlaps input '{name}' (it may be the very same memory, or disjoint)",
            _ERR_INVALID,
        )


def as_matrix(value, name: str, op: str) -> Tuple[np.ndarray, int, bool]:
    """A float32 2-D argument for a call that takes a leading dimension (gemm).

    Returns ``(stored, ld, transposed)`` where ``stored`` is the array whose data pointer C
    receives, ``ld`` its row stride in elements, and ``transposed`` True when ``stored`` is
    the transpose of the argument (an F-contiguous argument, e.g. ``m.T``, is passed as its
    C-contiguous transpose with the transpose flag flipped). Row-strided views (``m[:, :k]``)
    go through with their row stride; other layouts are copied.
    """
    arr = as_input(value, name, op, (F32,), ndim=2) if not isinstance(value, np.ndarray) else value
    if arr.dtype != F32:
        raise _dtype_error(op, name, arr.dtype, [F32])
    if arr.ndim != 2:
        raise InputError(f"{op}: argument '{name}' must be 2-D, got shape {arr.shape}", _ERR_SHAPE)
    if arr.flags.aligned:
        if arr.flags.c_contiguous:
            return arr, max(1, arr.shape[1]), False
        if arr.flags.f_contiguous:
            return arr.T, max(1, arr.shape[0]), True
        item = arr.itemsize
        s0, s1 = arr.strides
        if s1 == item and s0 > 0 and s0 % item == 0 and s0 // item >= arr.shape[1]:
            return arr, s0 // item, False
    arr = _contiguous_aligned(arr)
    return arr, max(1, arr.shape[1]), False


def raw_ptr(arr: np.ndarray, ctype: str = "float *"):
    """A pointer to the first element of a (possibly row-strided) array, NULL if empty.
    Unlike :func:`ptr` it does not keep ``arr`` alive: hold ``arr`` across the call."""
    if arr.size == 0:
        return ffi.NULL
    return ffi.cast(ctype, arr.__array_interface__["data"][0])


def ptr(arr: Optional[np.ndarray], ctype: Optional[str] = None):
    """A cffi pointer to a C-contiguous array's data, NULL for None or an empty array.

    The returned cdata (from ``ffi.from_buffer``) keeps ``arr`` alive as long as it lives;
    callers hold it in a local for the duration of the C call.
    """
    if arr is None or arr.size == 0:
        return ffi.NULL
    if ctype is None:
        ctype = _C_TYPES.get(arr.dtype, _BYTES)
    return ffi.from_buffer(ctype, arr, require_writable=False)
