"""The kernel dispatch table: which variant (e.g. "avx2", "neon", "ref") runs each op.

Thin wrappers over ``nrv_kernel_*``. Op names are those of the C table (:func:`ops` lists
them): "embedding", "embedding_f16", "embedding_q8", "layernorm", "linear", "layernorm_linear",
"gemm" (with its implicit-GEMM and weight-panel entry points), "gelu", "gelu_tanh", "relu",
"sigmoid", "tanh", "softmax", "linear_w8", "linear_w8a8", "linear_w4a32", "linear_w4a8",
"linear_f16", "depthwise", "hard_swish", "silu", "depthwise_channels", "depthwise_rows",
"matmul_integer", "quantize", "requant", "maxpool", "linear_attention", "depthwise_q8". Every op has the
reference "ref" as its last variant.

:func:`force` and :func:`disable` change process-wide settings and must not race with kernel
calls on other threads: use them at start-up, in tests and in benchmarks. Both can be used
as context managers that restore the previous setting::

    with nerve.kernels.force("gemm", "ref"):
        y = nerve.ops.gemm(a, b)     # runs the scalar reference
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Union

from ._native import check, ffi, lib, to_str
from .errors import InputError, code

__all__ = ["ops", "variants", "variant_info", "runnable_variants", "selected", "forced", "force",
           "disabled", "disable", "reset"]


def _op(op: str) -> bytes:
    if not isinstance(op, str):
        raise InputError(f"op must be a string, got {type(op).__name__}", code("NRV_ERR_INVALID_ARG"))
    if lib.nrv_kernel_variant_count(op.encode()) <= 0:
        raise InputError(f"unknown op {op!r}; known ops: {', '.join(ops())}", code("NRV_ERR_INVALID_ARG"))
    return op.encode()


def ops() -> List[str]:
    """Names of every op in the dispatch table, in table order."""
    return [to_str(lib.nrv_kernel_op_name(i)) for i in range(lib.nrv_kernel_op_count())]


def variants(op: str) -> List[str]:
    """Names of the variants compiled in for ``op``, best first ("ref" last)."""
    key = _op(op)
    return [to_str(lib.nrv_kernel_variant_name(key, i)) for i in range(lib.nrv_kernel_variant_count(key))]


def variant_info(op: str) -> List[dict]:
    """``[{'name', 'runnable', 'disabled', 'selected'}, ...]`` for every variant of ``op``;
    runnable means the CPU has the variant's features, disabled that the disable list
    (NERVE_DISABLE or :func:`disable`) excludes it."""
    key = _op(op)
    chosen = selected(op)
    result = []
    for i in range(lib.nrv_kernel_variant_count(key)):
        name = to_str(lib.nrv_kernel_variant_name(key, i))
        result.append({
            "name": name,
            "runnable": bool(lib.nrv_kernel_variant_runnable(key, i)),
            "disabled": bool(lib.nrv_kernel_variant_disabled(key, i)),
            "selected": name == chosen,
        })
    return result


def runnable_variants(op: str) -> List[str]:
    """Names of the variants of ``op`` that can run on this CPU."""
    return [v["name"] for v in variant_info(op) if v["runnable"]]


def selected(op: str) -> str:
    """Name of the variant that currently runs ``op``."""
    return to_str(lib.nrv_kernel_selected(_op(op)))


def forced(op: str) -> Optional[str]:
    """The variant ``op`` is forced to, None when the dispatch table chooses."""
    name = lib.nrv_kernel_forced(_op(op))
    return None if name == ffi.NULL else to_str(name)


def disabled() -> str:
    """The disable list in force (initially NERVE_DISABLE), "" for none."""
    return to_str(lib.nrv_kernel_disabled())


def _set_forced(op: str, variant: Optional[str]) -> None:
    check(lib.nrv_kernel_force(op.encode(), variant.encode() if variant is not None else ffi.NULL))


class _Restore:
    """Returned by force() / disable(): the change is already made; leaving a ``with``
    block (or calling restore()) puts the previous setting back."""

    def __init__(self, undo):
        self._undo = undo

    def restore(self) -> None:
        if self._undo is not None:
            undo, self._undo = self._undo, None
            undo()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


def force(op: str, variant: Optional[str]) -> _Restore:
    """Makes ``op`` run ``variant`` (None: back to the automatic choice).

    Takes effect immediately; as a context manager it restores the previous setting
    (the automatic choice, or an outer force) on exit.

    Raises:
        InputError: unknown op or variant. NativeError (NRV_ERR_UNSUPPORTED): the variant
        needs CPU features this machine lacks.
    """
    previous = forced(op)
    _set_forced(op, variant)
    return _Restore(lambda: _set_forced(op, previous))


def _set_disabled(text: str) -> None:
    check(lib.nrv_kernel_disable(text.encode()))


def disable(names: Union[str, Iterable[str], None]) -> _Restore:
    """Replaces the disable list: variant names or ISA groups ("avx512", "avx2", "neon", "x86",
    "all" = everything but "ref"), as a list or a comma-separated string; None or [] enables
    everything. Ops that are forced keep their forced variant.

    Takes effect immediately; as a context manager it restores the previous list on exit.
    """
    if names is None:
        text = ""
    elif isinstance(names, str):
        text = names
    else:
        text = ",".join(str(n) for n in names)
    previous = disabled()
    _set_disabled(text)
    return _Restore(lambda: _set_disabled(previous))


def reset() -> None:
    """Clears every force and the disable list (NERVE_DISABLE included)."""
    for op in ops():
        _set_forced(op, None)
    _set_disabled("")
