"""nerve — edge inference SDK: Python binding of libnerve (cffi, ABI mode).

Public API::

    nerve.__version__          version of the loaded libnerve (= the package version)
    nerve.info()               version, CPU, kernel dispatch table, CUDA devices
    nerve.ops                  kernels on numpy arrays (embedding, layernorm_linear, ...)
    nerve.kernels              inspect / force the kernel variants
    nerve.cuda                 CUDA devices and the kernels, layouts and memory mode chosen for each
    nerve.memory               StaticPool, DynamicPool, StreamingPool
    nerve.memory_report()      counters of every pool of this process
    nerve.Session(model)       a model (.onnx compiled on load, or a .nrv plan) ready to run
    nerve.MemoryBudget(bytes)  bytes shared by sessions and reservations; sessions step down to fit
    nerve.compile(onnx_path)   ONNX -> Plan (save with Plan.save("model.nrv"))
    nerve.precision            the precision names (fp32, int8/w8a8, w4a32, w4a8)
    nerve.quant                INT4 weights: quantize_w4, W4Weight (packed / unpacked)
    nerve.quantize(model, ...) a model's layers to w8a8 or W4 with a sensitivity-driven policy -> Plan
    nerve.asr                  speech recognition (Recognizer, streams); imported on first use
    nerve.audio                WAV reading, sample conversion, the stateful resampler
    nerve.serial               command link over pyserial URLs (Link, LinkServer); import it explicitly
    nerve.commands             spoken phrases -> structured robot commands (Grammar, CommandRouter)
    nerve.NerveError, InputError, ModelError, DeviceError, OutOfMemoryError, NativeError, LinkError
"""

from __future__ import annotations

from typing import Dict, List

from . import cuda, kernels, memory, ops, precision, quant
from ._native import ffi as _ffi
from ._native import lib as _lib
from ._native import library_path as _library_path
from ._native import to_str as _to_str
from .errors import (
    DeviceError,
    InputError,
    LibraryLoadError,
    LinkError,
    ModelError,
    NativeError,
    NerveError,
    OutOfMemoryError,
    UnboundDimsError,
)
from .memory import memory_report
from .session import MemoryBudget, Plan, Session, compile, default_threads
from .quant import quantize

__version__: str = _to_str(_lib.nrv_version())

__all__ = [
    "__version__",
    "info",
    "cpu_features",
    "cuda_device_count",
    "ops",
    "kernels",
    "cuda",
    "memory",
    "memory_report",
    "Session",
    "default_threads",
    "MemoryBudget",
    "Plan",
    "compile",
    "quantize",
    "quant",
    "precision",
    "NerveError",
    "InputError",
    "ModelError",
    "UnboundDimsError",
    "DeviceError",
    "OutOfMemoryError",
    "NativeError",
    "LibraryLoadError",
    "LinkError",
]


def __getattr__(name: str):
    # nerve.asr pulls in the speech stack (models, VAD, audio): only when first used
    if name in ("asr", "audio"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'nerve' has no attribute {name!r}")


def cpu_features() -> List[str]:
    """Names of the CPU features libnerve detected ("avx2", "fma", "neon", "asimddp", ...),
    in bit order; independent of NERVE_DISABLE."""
    mask = int(_lib.nrv_cpu_features())
    names = []
    for bit in range(64):
        if mask >> bit & 1:
            names.append(_to_str(_lib.nrv_cpu_feature_name(1 << bit)) or f"bit{bit}")
    return names


def _cuda() -> Dict[str, object]:
    try:
        count_fn = _lib.nrv_cuda_device_count
    except AttributeError:
        return {"devices": 0, "reason": "this libnerve has no CUDA entry point (nrv_cuda_device_count is not exported)"}
    _lib.nrv_clear_error()
    count = int(count_fn())
    if count > 0:
        return {"devices": count, "reason": "", "device_list": cuda.devices()}
    reason = _to_str(_lib.nrv_last_error()) or "no CUDA device found"
    return {"devices": 0, "reason": reason}


def cuda_device_count() -> int:
    """Number of usable CUDA devices (0 without the CUDA backend or a GPU)."""
    return int(_cuda()["devices"])


def info() -> Dict[str, object]:
    """What this installation of nerve is and does on this machine::

        {'version': '0.1.0', 'version_number': 100, 'library': '/path/libnerve.so.0',
         'cpu': {'arch': 'x86_64', 'features': ['sse4.2', 'avx', ...], 'count': 8},
         'kernels': {'gemm': 'avx2', ...},                 # op -> variant chosen now
         'variants': {'gemm': [{'name': 'avx2', 'runnable': True, 'selected': True}, ...]},
         'cuda': {'devices': 0, 'reason': '...'}}
    """
    table = {op: kernels.variant_info(op) for op in kernels.ops()}
    return {
        "version": __version__,
        "version_number": int(_lib.nrv_version_number()),
        "library": str(_library_path),
        "cpu": {
            "arch": _to_str(_lib.nrv_cpu_arch()),
            "features": cpu_features(),
            "count": int(_lib.nrv_cpu_count()),
            "threads": default_threads(),  # a Session's threads when none are given
        },
        "kernels": {op: next((v["name"] for v in vs if v["selected"]), None) for op, vs in table.items()},
        "variants": table,
        "cuda": _cuda(),
    }


