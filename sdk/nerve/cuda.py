"""nerve.cuda — CUDA devices and what nerve runs on them.

``devices()`` lists the GPUs the backend sees (empty without the backend, a driver or a
GPU). ``select(device)`` says which kernel, W4 layout, shared-memory budget and memory mode
nerve uses on a device, with the reason for each (``nrv_cuda_select`` in libnerve: host
code, so it answers for any device on any machine). ``device`` is an index of a present
GPU, the name of a preset below (published properties of common targets), or a dict of
properties. ``force_cc="7.0"`` (or the environment variable NERVE_FORCE_CC) replaces the
compute capability; ``memory=`` (or NERVE_CUDA_MEMORY) asks for a memory mode.

The preset figures are NVIDIA's (CUDA C++ Programming Guide, "Technical Specifications
per Compute Capability": shared memory per SM and the per-block opt-in limit; SM counts
from each product's data sheet).
"""

from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Union

import numpy as np

from . import _marshal as m
from ._native import check, ffi, lib, to_str
from .errors import InputError, code

_KIB = 1024

# name -> (device name, (cc major, minor), integrated, SMs, shared memory per SM,
#          per-block opt-in limit, can map host memory, concurrent managed access, memory)
PRESETS: Dict[str, dict] = {
    "v100": dict(name="Tesla V100-SXM2-16GB", cc=(7, 0), integrated=False, sm_count=80,
                 smem_per_sm=96 * _KIB, smem_optin=96 * _KIB, memory=16 << 30),
    "t4": dict(name="Tesla T4", cc=(7, 5), integrated=False, sm_count=40,
               smem_per_sm=64 * _KIB, smem_optin=64 * _KIB, memory=15 << 30),
    "a100": dict(name="NVIDIA A100-SXM4-40GB", cc=(8, 0), integrated=False, sm_count=108,
                 smem_per_sm=164 * _KIB, smem_optin=163 * _KIB, memory=40 << 30),
    "rtx3090": dict(name="NVIDIA GeForce RTX 3090", cc=(8, 6), integrated=False, sm_count=82,
                    smem_per_sm=100 * _KIB, smem_optin=99 * _KIB, memory=24 << 30),
    "xavier": dict(name="Xavier (Jetson AGX Xavier)", cc=(7, 2), integrated=True, sm_count=8,
                   smem_per_sm=96 * _KIB, smem_optin=96 * _KIB, managed=False, memory=32 << 30),
    "orin": dict(name="Orin (Jetson AGX Orin 64GB)", cc=(8, 7), integrated=True, sm_count=16,
                 smem_per_sm=164 * _KIB, smem_optin=163 * _KIB, managed=False, memory=64 << 30),
    "orin-nano": dict(name="Orin (Jetson Orin Nano 8GB)", cc=(8, 7), integrated=True, sm_count=8,
                      smem_per_sm=164 * _KIB, smem_optin=163 * _KIB, managed=False, memory=8 << 30),
    "rtx4090": dict(name="NVIDIA GeForce RTX 4090", cc=(8, 9), integrated=False, sm_count=128,
                    smem_per_sm=100 * _KIB, smem_optin=99 * _KIB, memory=24 << 30),
    "h100": dict(name="NVIDIA H100 80GB HBM3", cc=(9, 0), integrated=False, sm_count=132,
                 smem_per_sm=228 * _KIB, smem_optin=227 * _KIB, memory=80 << 30),
    "h200": dict(name="NVIDIA H200", cc=(9, 0), integrated=False, sm_count=132,
                 smem_per_sm=228 * _KIB, smem_optin=227 * _KIB, memory=141 << 30),
}

_MEMORY_MODES = {0: "pinned", 1: "zero_copy", 2: "managed"}
_LAYOUTS = {0: "unpacked", 1: "packed"}


def _info_dict(index: Optional[int], raw) -> dict:
    return {
        "index": index,
        "name": ffi.string(raw.name).decode("utf-8", errors="replace"),
        "cc": (int(raw.cc_major), int(raw.cc_minor)),
        "cc_major": int(raw.cc_major),
        "cc_minor": int(raw.cc_minor),
        "integrated": bool(raw.integrated),
        "sm_count": int(raw.sm_count),
        "total_memory": int(raw.total_memory),
        "smem_per_sm": int(raw.shared_memory_per_sm),
        "smem_optin": int(raw.shared_memory_per_block_optin),
        "can_map_host_memory": bool(raw.can_map_host_memory),
        "concurrent_managed_access": bool(raw.concurrent_managed_access),
    }


def device_count() -> int:
    """Number of usable CUDA devices (0 without the backend, a driver or a GPU)."""
    return int(lib.nrv_cuda_device_count())


def unavailable_reason() -> str:
    """Why there is no CUDA device ("" when there is one)."""
    lib.nrv_clear_error()
    if int(lib.nrv_cuda_device_count()) > 0:
        return ""
    return to_str(lib.nrv_last_error()) or "no CUDA device found"


def devices() -> List[dict]:
    """Properties of every present CUDA device."""
    out = []
    for index in range(device_count()):
        raw = ffi.new("nrv_cuda_device_info *")
        check(lib.nrv_cuda_device_info_get(index, raw))
        out.append(_info_dict(index, raw))
    return out


def _raw_info(device: Union[int, str, dict]):
    raw = ffi.new("nrv_cuda_device_info *")
    if isinstance(device, bool):
        raise InputError("nerve.cuda: device must be an index, a preset name or a dict, not a bool")
    if isinstance(device, int):
        check(lib.nrv_cuda_device_info_get(device, raw))
        return raw
    if isinstance(device, str):
        key = device.lower()
        if key not in PRESETS:
            raise InputError(f"nerve.cuda: unknown device preset {device!r}; presets: {', '.join(PRESETS)}")
        props = PRESETS[key]
    elif isinstance(device, dict):
        props = device
    else:
        raise InputError(f"nerve.cuda: device must be an index, a preset name or a dict, not {type(device).__name__}")
    try:
        major, minor = props["cc"]
    except (KeyError, TypeError, ValueError):
        raise InputError("nerve.cuda: a device dict needs 'cc': (major, minor)") from None
    raw.name = str(props.get("name", "custom")).encode("utf-8")[:255]
    raw.cc_major, raw.cc_minor = int(major), int(minor)
    raw.integrated = 1 if props.get("integrated", False) else 0
    raw.sm_count = int(props.get("sm_count", 0))
    raw.total_memory = int(props.get("memory", 0))
    raw.shared_memory_per_sm = int(props.get("smem_per_sm", 0))
    raw.shared_memory_per_block_optin = int(props.get("smem_optin", 0))
    raw.can_map_host_memory = 1 if props.get("can_map_host_memory", True) else 0
    raw.concurrent_managed_access = 1 if props.get("managed", True) else 0
    return raw


def select(device: Union[int, str, dict] = 0, force_cc: Optional[str] = None,
           memory: Optional[str] = None, in_features: int = 4096) -> dict:
    """What nerve runs on ``device`` (see the module doc)::

        {'cc': (8, 7), 'cc_forced': False, 'layernorm_linear': {'warp_rows_max': 16,
         'tensor_cores': True}, 'w4': {'gemv_layout': 'packed', 'gemv_max_rows': 8,
         'gemm_layout': 'packed', 'rows_per_block': 8}, 'smem_per_block': 83968,
         'memory': 'zero_copy', 'reasons': ['device: ...', ...]}

    ``force_cc``/``memory`` None read NERVE_FORCE_CC / NERVE_CUDA_MEMORY; ``""`` / ``"auto"``
    ignore them. ``rows_per_block`` is for an input width of ``in_features``.
    """
    raw = _raw_info(device)
    sel = ffi.new("nrv_cuda_selection *")
    cc_arg = ffi.NULL if force_cc is None else ffi.new("char[]", str(force_cc).encode())
    mem_arg = ffi.NULL if memory is None else ffi.new("char[]", str(memory).encode())
    check(lib.nrv_cuda_select(raw, cc_arg, mem_arg, sel))
    return {
        "device": _info_dict(device if isinstance(device, int) else None, raw),
        "cc": (int(sel.cc_major), int(sel.cc_minor)),
        "cc_forced": bool(sel.cc_forced),
        "layernorm_linear": {"warp_rows_max": int(sel.lnl_rows_max_warp), "tensor_cores": bool(sel.lnl_tensor_cores)},
        "w4": {
            "gemv_layout": _LAYOUTS[int(sel.w4_gemv_layout)],
            "gemv_max_rows": int(sel.w4_gemv_max_rows),
            "gemm_layout": _LAYOUTS[int(sel.w4_gemm_layout)],
            "rows_per_block": int(lib.nrv_cuda_w4_rows_per_block(sel, int(in_features))),
            "in_features": int(in_features),
        },
        "smem_per_block": int(sel.smem_per_block),
        "memory": _MEMORY_MODES[int(sel.memory_mode)],
        "reasons": [line for line in ffi.string(sel.reasons).decode().split("\n") if line],
    }


def format_selection(sel: dict) -> str:
    """The selection as the lines `nerve cuda-select` prints."""
    dev = sel["device"]
    w4 = sel["w4"]
    lnl = sel["layernorm_linear"]
    lines = [
        f"{dev['name']}  sm_{sel['cc'][0]}{sel['cc'][1]}{' (forced)' if sel['cc_forced'] else ''}  "
        f"{dev['sm_count']} SMs  {'integrated' if dev['integrated'] else 'discrete'}",
        f"  layernorm_linear  warp_rows <= {lnl['warp_rows_max']} rows; above: "
        f"{'wmma_f16 (fp16 x), ' if lnl['tensor_cores'] else ''}warp_rows (fp32 x)",
        f"  linear_w4         <= {w4['gemv_max_rows']} rows {w4['gemv_layout']}, more rows {w4['gemm_layout']}; "
        f"{w4['rows_per_block']} rows of x per block at in={w4['in_features']}",
        f"  shared memory     {sel['smem_per_block'] // 1024} KiB per block",
        f"  memory            {sel['memory']}",
        "  why:",
    ]
    lines += ["    " + r for r in sel["reasons"]]
    return "\n".join(lines)


# ---------------------------------------------------------------- kernels on the GPU
#
# Arguments are numpy arrays (staged through a nerve device pool: copied in, the result
# copied back, returned as numpy) or device arrays exposing __cuda_array_interface__
# (CuPy, PyTorch, Numba, nerve.cuda.DeviceArray) or DLPack from a CUDA device (JAX,
# TensorFlow, any array-API library): used in place, no copy; the result is a CuPy array
# for CuPy input, else a DeviceArray, or the caller's ``out``. Every array is checked
# (dtype, shape, C order) before a pointer crosses into C, as nerve.ops does for host arrays.

_ALIGN = 256
_TYPESTRS = {"<f4": np.float32, "<f2": np.float16, "|i1": np.int8, "|u1": np.uint8, "<u2": np.uint16}


# DLPack (dlpack.h, the legacy unversioned "dltensor" capsule every producer gives when the
# consumer passes no max_version): the device types whose pointers a kernel can read, and
# the element types nerve takes, as (type code, bits) -> numpy typestr.
_DL_DEVICE_TYPES = {2: "CUDA", 13: "CUDA managed"}
_DL_DTYPES = {(2, 32): "<f4", (2, 16): "<f2", (0, 8): "|i1", (1, 8): "|u1", (1, 16): "<u2"}
_dlpack_ffi = None


def _dlpack_cdef():
    """A cffi FFI (ABI mode, no compiler) with the DLPack structs."""
    global _dlpack_ffi
    if _dlpack_ffi is None:
        from cffi import FFI

        f = FFI()
        f.cdef("""
            typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
            typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
            typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype;
                             int64_t *shape; int64_t *strides; uint64_t byte_offset; } DLTensor;
        """)
        _dlpack_ffi = f
    return _dlpack_ffi


def _has_device_dlpack(obj) -> bool:
    """obj exports DLPack from GPU memory (numpy and other host producers do not count)."""
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        return False
    try:
        dev_type = int(obj.__dlpack_device__()[0])
    except Exception:  # a producer that cannot say: not a device array nerve can use
        return False
    return dev_type in _DL_DEVICE_TYPES


def _from_dlpack(obj, name: str, op: str, device_types: Dict[int, str] = _DL_DEVICE_TYPES):
    """(pointer, shape, typestr, strides in bytes or None, capsule) of a DLPack
    export from one of ``device_types``. The capsule is kept by the caller for the call's
    duration: it keeps the producer's export alive, and its destructor (the capsule is
    never renamed "used_dltensor") releases it."""
    import ctypes

    capsule = obj.__dlpack__()
    f = _dlpack_cdef()
    getptr = ctypes.pythonapi.PyCapsule_GetPointer
    getptr.restype, getptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        addr = getptr(capsule, b"dltensor")
    except ValueError:
        raise InputError(f"{op}: {name}.__dlpack__() gave no legacy 'dltensor' capsule", code("NRV_ERR_INVALID_ARG"))
    t = f.cast("DLTensor *", addr)  # DLManagedTensor starts with its DLTensor
    dev_type = int(t.device.device_type)
    if dev_type not in device_types:
        raise InputError(f"{op}: {name} is DLPack device type {dev_type}, not GPU memory "
                         f"({', '.join(f'{k} {v}' for k, v in device_types.items())})", code("NRV_ERR_INVALID_ARG"))
    typestr = _DL_DTYPES.get((int(t.dtype.code), int(t.dtype.bits)))
    if typestr is None or int(t.dtype.lanes) != 1:
        raise InputError(f"{op}: {name} has DLPack dtype (code {int(t.dtype.code)}, bits {int(t.dtype.bits)}, "
                         f"lanes {int(t.dtype.lanes)}); nerve takes {', '.join(_TYPESTRS)}", code("NRV_ERR_DTYPE"))
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    item = np.dtype(typestr).itemsize
    strides = None if t.strides == f.NULL else tuple(int(t.strides[i]) * item for i in range(ndim))
    ptr = int(f.cast("uintptr_t", t.data)) + int(t.byte_offset)
    return ptr, shape, typestr, strides, capsule


class _DeviceArray:
    """A checked view of a device array: pointer, shape, dtype. From
    ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, nerve's own), else from DLPack
    (``__dlpack__`` on a CUDA device: JAX, TensorFlow, any array-API library)."""

    def __init__(self, obj, name: str, op: str):
        self.obj = obj
        self._capsule = None
        if hasattr(obj, "__cuda_array_interface__"):
            iface = obj.__cuda_array_interface__
            typestr, shape, strides = iface.get("typestr"), iface["shape"], iface.get("strides")
            ptr, readonly = int(iface["data"][0]), bool(iface["data"][1])
        else:
            ptr, shape, typestr, strides, self._capsule = _from_dlpack(obj, name, op)
            readonly = False  # the legacy capsule has no read-only flag
        dtype = _TYPESTRS.get(typestr)
        if dtype is None:
            raise InputError(f"{op}: {name} has device dtype {typestr!r}; nerve takes "
                             f"{', '.join(_TYPESTRS)}", code("NRV_ERR_DTYPE"))
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        if strides is not None:
            expect, step = [], self.dtype.itemsize
            for dim in reversed(self.shape):
                expect.append(step)
                step *= dim
            if tuple(strides) != tuple(reversed(expect)) and m.prod(self.shape) > 1:
                raise InputError(f"{op}: {name} is not C-contiguous on the device (strides {strides}); "
                                 "make it contiguous first", code("NRV_ERR_INVALID_ARG"))
        self.ptr = ptr
        self.readonly = readonly


def _array_geometry(what: str, shape, dtype, device):
    """(device index, shape tuple, dtype, bytes) of a DeviceArray / HostBuffer to make, checked."""
    dev = device_index(device)
    shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    dtype = np.dtype(dtype)
    if dtype.str not in _TYPESTRS:
        raise InputError(f"{what}: dtype {dtype} is not one of {', '.join(_TYPESTRS)}", code("NRV_ERR_DTYPE"))
    if any(d < 0 for d in shape):
        raise InputError(f"{what}: negative dimension in {shape}", code("NRV_ERR_SHAPE"))
    return dev, shape, dtype, m.prod(shape) * dtype.itemsize


class DeviceArray:
    """An array in device memory owned by nerve (its own nerve device pool), for callers
    without CuPy: ``DeviceArray.from_host(a)``, ``.to_host()``. Exposes
    ``__cuda_array_interface__`` (v3), so nerve.cuda, CuPy and PyTorch take it in place."""

    def __init__(self, shape, dtype=np.float32, device="cuda"):
        self._pool = None  # first: __del__ runs even when __init__ raises
        self.device, self.shape, self.dtype, self.nbytes = _array_geometry("DeviceArray", shape, dtype, device)
        pool = ffi.new("nrv_cuda_pool_t **")
        check(lib.nrv_cuda_pool_create(self.device, max(self.nbytes, 1), b"nerve.cuda.DeviceArray", pool))
        self._pool = pool[0]
        p = ffi.new("void **")
        check(lib.nrv_cuda_pool_alloc(self._pool, max(self.nbytes, 1), p))
        self.ptr = int(ffi.cast("uintptr_t", p[0]))
        _live.add(self)

    def report(self) -> dict:
        """This array's device pool, with nerve's exact counters (never the driver's)."""
        raw = ffi.new("nrv_pool_stats *")
        check(lib.nrv_cuda_pool_stats_get(self._pool, raw))
        return {"what": "DeviceArray", "device": self.device, "memory": "device", "shape": self.shape,
                "dtype": str(self.dtype), "capacity": int(raw.capacity), "allocated": int(raw.allocated),
                "peak": int(raw.peak)}

    @classmethod
    def from_host(cls, arr, device="cuda") -> "DeviceArray":
        a = np.ascontiguousarray(arr)
        out = cls(a.shape, a.dtype, device)
        if a.nbytes:
            check(lib.nrv_cuda_copy(out.device, ffi.cast("void *", out.ptr), ffi.from_buffer(a), a.nbytes))
        return out

    def to_host(self) -> np.ndarray:
        out = m.empty_aligned(self.shape, self.dtype)
        if self.nbytes:
            check(lib.nrv_cuda_copy(self.device, ffi.from_buffer(out), ffi.cast("void *", self.ptr), self.nbytes))
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3}

    def close(self) -> None:
        """Frees the device memory now (also done when the object is collected)."""
        if self._pool is not None:
            lib.nrv_cuda_pool_free(self._pool)
            self._pool = None

    def __del__(self):
        self.close()


class _ArrayOwner:
    """Lends host memory to numpy through __array_interface__ and keeps its HostBuffer
    alive for as long as any array over it lives (numpy holds this as the array's base)."""

    def __init__(self, owner, ptr: int, shape, dtype: np.dtype):
        self.owner = owner
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (ptr, False), "strides": None,
                                    "version": 3}


class HostBuffer:
    """Memory the CPU fills and GPU kernels read, or the reverse (nrv_cuda_host_buffer):
    on a Jetson mapped pinned memory that both use in place (mode "zero_copy", nothing is
    ever copied), on a discrete GPU pinned memory plus a device mirror (mode "pinned",
    copied asynchronously by the syncs), chosen by ``select(device)["memory"]``.

    ``.array`` is a numpy view of the host side: write inputs there, read results there.
    nerve.cuda's kernels take a HostBuffer as an argument or ``out`` and do the syncs
    themselves; for your own kernels call ``to_device()`` before and ``to_host()`` after,
    and pass ``__cuda_array_interface__`` (the device side)."""

    def __init__(self, shape, dtype=np.float32, device="cuda"):
        self._buf = None  # first: __del__ runs even when __init__ raises
        self.device, self.shape, self.dtype, self.nbytes = _array_geometry("HostBuffer", shape, dtype, device)
        out = ffi.new("nrv_cuda_host_buffer_t **")
        check(lib.nrv_cuda_host_buffer_create(self.device, max(self.nbytes, 1), out))
        self._buf = out[0]
        self.mode = _MEMORY_MODES[int(lib.nrv_cuda_host_buffer_mode(self._buf))]
        self.device_ptr = int(ffi.cast("uintptr_t", lib.nrv_cuda_host_buffer_device(self._buf)))
        host = int(ffi.cast("uintptr_t", lib.nrv_cuda_host_buffer_host(self._buf)))
        self.array = np.asarray(_ArrayOwner(self, host, self.shape, self.dtype))
        _live.add(self)

    def report(self) -> dict:
        device_bytes = self.nbytes if self.mode == "pinned" else 0  # the mirror; mapped/managed alias the host
        return {"what": "HostBuffer", "device": self.device, "memory": self.mode, "shape": self.shape,
                "dtype": str(self.dtype), "host_bytes": self.nbytes, "device_bytes": device_bytes}

    def to_device(self, stream=None) -> None:
        """Host writes -> visible to kernels queued after this on ``stream`` (a cudaStream_t
        as an int, None = the legacy default stream)."""
        check(lib.nrv_cuda_host_buffer_to_device(self._buf, 0, self.nbytes, ffi.cast("void *", stream or 0)))

    def to_host(self, stream=None) -> None:
        """Kernel writes on ``stream`` -> in ``.array`` (waits for the stream)."""
        check(lib.nrv_cuda_host_buffer_to_host(self._buf, 0, self.nbytes, ffi.cast("void *", stream or 0)))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.device_ptr, False), "strides": None,
                "version": 3}

    def __del__(self):
        if self._buf is not None:
            lib.nrv_cuda_host_buffer_free(self._buf)
            self._buf = None


# Live DeviceArrays and HostBuffers, for memory_report(); weak: the report never keeps one alive.
_live: "weakref.WeakSet" = weakref.WeakSet()


def memory_report() -> dict:
    """Device-side memory nerve holds for this process: every live DeviceArray (its pool's
    exact counters) and HostBuffer (its mode and bytes on each side), and the totals."""
    items = []
    for obj in list(_live):
        if getattr(obj, "_pool", None) is not None or getattr(obj, "_buf", None) is not None:
            items.append(obj.report())
    device_bytes = sum(int(i.get("capacity", i.get("device_bytes", 0))) for i in items)
    host_bytes = sum(int(i.get("host_bytes", 0)) for i in items)
    return {"buffers": items, "totals": {"buffers": len(items), "device_bytes": device_bytes,
                                         "pinned_host_bytes": host_bytes, "bytes_copied": bytes_copied()}}


def bytes_copied() -> int:
    """Bytes nerve copied between host and device in this process (nrv_cuda_bytes_copied):
    staging of numpy arguments and pinned host-buffer syncs; zero-copy adds nothing."""
    return int(lib.nrv_cuda_bytes_copied())


def _is_device_array(obj) -> bool:
    return hasattr(obj, "__cuda_array_interface__") or _has_device_dlpack(obj)


def device_index(device) -> int:
    """0 for "cuda", N for "cuda:N" or N; InputError otherwise."""
    if isinstance(device, bool):
        raise InputError(f"device must be 'cuda', 'cuda:N' or an index, got {device!r}", code("NRV_ERR_INVALID_ARG"))
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        if device == "cuda":
            return 0
        if device.startswith("cuda:") and device[5:].isdigit():
            return int(device[5:])
    raise InputError(f"device must be 'cuda', 'cuda:N' or an index, got {device!r}", code("NRV_ERR_INVALID_ARG"))


class _Call:
    """Device pointers for one GPU call. Host (numpy) arrays are staged in one nerve device
    pool created for the call and freed after it; device arrays pass through."""

    def __init__(self, device: int, op: str):
        self.device, self.op = device, op
        self._pool = None
        self._uploads: List[tuple] = []   # (host array, offset)
        self._downloads: List[tuple] = []  # (host array, offset)
        self._host_outputs: List[HostBuffer] = []
        self._bytes = 0

    def _reserve(self, nbytes: int) -> int:
        offset = self._bytes
        self._bytes += (max(int(nbytes), 1) + _ALIGN - 1) // _ALIGN * _ALIGN
        return offset

    @staticmethod
    def _in_place(arr):
        """The device pointer slot of a HostBuffer or device array; None for a host array."""
        if isinstance(arr, HostBuffer):
            return ("dev", arr.device_ptr)
        if isinstance(arr, _DeviceArray):
            return ("dev", arr.ptr)
        return None

    def input(self, arr):
        """A device pointer slot for ``arr`` (None -> NULL); a HostBuffer is synced to the device."""
        if arr is None:
            return None
        if isinstance(arr, HostBuffer):
            arr.to_device()
        slot = self._in_place(arr)
        if slot is None:
            slot = ("pool", self._reserve(arr.nbytes))
            self._uploads.append((arr, slot[1]))
        return slot

    def output(self, arr):
        """A device pointer slot for the result; finish() brings it to a host array or HostBuffer."""
        if isinstance(arr, HostBuffer):
            self._host_outputs.append(arr)
        slot = self._in_place(arr)
        if slot is None:
            slot = ("pool", self._reserve(arr.nbytes))
            self._downloads.append((arr, slot[1]))
        return slot

    def __enter__(self):
        return self

    def open(self):
        if self._bytes:
            pool = ffi.new("nrv_cuda_pool_t **")
            check(lib.nrv_cuda_pool_create(self.device, self._bytes, f"nerve.cuda.{self.op}".encode(), pool))
            self._pool = pool[0]
            base = ffi.new("void **")
            check(lib.nrv_cuda_pool_alloc(self._pool, self._bytes, base))
            self._base = int(ffi.cast("uintptr_t", base[0]))
            for arr, offset in self._uploads:
                if arr.nbytes:
                    check(lib.nrv_cuda_copy(self.device, ffi.cast("void *", self._base + offset),
                                            ffi.from_buffer(arr), arr.nbytes))

    def ptr(self, slot, ctype: str = "void *"):
        if slot is None:
            return ffi.NULL
        kind, value = slot
        return ffi.cast(ctype, value if kind == "dev" else self._base + value)

    def finish(self):
        for buf in self._host_outputs:
            buf.to_host()
        for arr, offset in self._downloads:
            if arr.nbytes:
                check(lib.nrv_cuda_copy(self.device, ffi.from_buffer(arr),
                                        ffi.cast("void *", self._base + offset), arr.nbytes))

    def __exit__(self, *exc):
        if self._pool is not None:
            lib.nrv_cuda_pool_free(self._pool)
            self._pool = None


def _arg(value, name: str, op: str, dtypes, ndim=None):
    """A HostBuffer or device array (its dtype and rank checked), or a host array (checked
    by nerve's host rules)."""
    wanted = [np.dtype(d) for d in dtypes]
    if not (isinstance(value, HostBuffer) or _is_device_array(value)):
        return m.as_input(value, name, op, wanted, ndim=ndim)
    arr = value if isinstance(value, HostBuffer) else _DeviceArray(value, name, op)
    if arr.dtype not in wanted:
        raise InputError(f"{op}: {name} has dtype {arr.dtype}, expected {' or '.join(str(d) for d in wanted)}",
                         code("NRV_ERR_DTYPE"))
    if ndim is not None and len(arr.shape) != ndim:
        raise InputError(f"{op}: {name} must have {ndim} dimension(s), got shape {arr.shape}", code("NRV_ERR_SHAPE"))
    return arr


def _result(like, shape, dtype, out, op: str, dev: int):
    """The output: ``out`` (checked), else, when x lives on the device, a CuPy array (x is
    one) or a nerve DeviceArray on device ``dev``, else numpy."""
    if out is not None:
        if isinstance(out, HostBuffer):
            if out.dtype != np.dtype(dtype) or out.shape != tuple(shape):
                raise InputError(f"{op}: out must be a {np.dtype(dtype)} HostBuffer of shape {tuple(shape)}, "
                                 f"got {out.dtype} {out.shape}", code("NRV_ERR_SHAPE"))
            return out, out
        if _is_device_array(out):
            o = _DeviceArray(out, "out", op)
            if o.dtype != np.dtype(dtype) or o.shape != tuple(shape) or o.readonly:
                raise InputError(f"{op}: out must be a writeable {np.dtype(dtype)} array of shape {tuple(shape)}, "
                                 f"got {o.dtype} {o.shape}", code("NRV_ERR_SHAPE"))
            return out, o
        o = m.check_out(out, tuple(shape), op, dtype=np.dtype(dtype))
        return o, o
    if isinstance(like, _DeviceArray):
        if type(like.obj).__module__.split(".")[0] == "cupy":
            import cupy  # x is a CuPy array, so CuPy is there

            res = cupy.empty(tuple(shape), dtype=np.dtype(dtype))
        else:
            res = DeviceArray(tuple(shape), dtype, dev)
        return res, _DeviceArray(res, "out", op)
    o = m.empty_aligned(tuple(shape), np.dtype(dtype))
    return o, o


def layernorm_linear(x, gamma, beta, W, b=None, eps=1e-5, device="cuda", out=None):
    """``nerve.ops.layernorm_linear`` on a GPU (nrv_cuda_layernorm_linear): x float32 or
    float16 [..., in] (the result has x's dtype), gamma/beta [in], W [out, in], b [out]
    float32. Few rows (or fp32 x) run the warp-per-column kernel; more rows of fp16 x run
    on tensor cores (W rounded to fp16 there)."""
    op = "layernorm_linear"
    dev = device_index(device)
    xa = _arg(x, "x", op, (np.float32, np.float16))
    if len(xa.shape) < 1:
        raise InputError(f"{op}: x must have at least 1 dimension", code("NRV_ERR_SHAPE"))
    n_in = xa.shape[-1]
    ga = _arg(gamma, "gamma", op, (np.float32,), ndim=1)
    ba = None if beta is None else _arg(beta, "beta", op, (np.float32,), ndim=1)
    Wa = _arg(W, "W", op, (np.float32,), ndim=2)
    bb = None if b is None else _arg(b, "b", op, (np.float32,), ndim=1)
    n_out = Wa.shape[0]
    for arr, name, want in ((ga, "gamma", (n_in,)), (ba, "beta", (n_in,)), (Wa, "W", (n_out, n_in)),
                            (bb, "b", (n_out,))):
        if arr is not None and tuple(arr.shape) != want:
            raise InputError(f"{op}: {name} has shape {tuple(arr.shape)}, expected {want}", code("NRV_ERR_SHAPE"))
    rows = m.prod(xa.shape[:-1])
    result, ya = _result(xa, tuple(xa.shape[:-1]) + (n_out,), xa.dtype, out, op, dev)
    eps_f = float(eps)
    with _Call(dev, op) as call:
        slots = [call.input(a) for a in (xa, ga, ba, Wa, bb)]
        y_slot = call.output(ya)
        call.open()
        check(lib.nrv_cuda_layernorm_linear(
            dev, call.ptr(slots[0]), m.nrv_dtype(xa.dtype), rows, n_in, call.ptr(slots[1], "float *"),
            call.ptr(slots[2], "float *"), eps_f, call.ptr(slots[3], "float *"), n_out,
            call.ptr(slots[4], "float *"), call.ptr(y_slot), ffi.NULL))
        call.finish()
    return result


def linear_w4(x, weight, b=None, layout: Optional[str] = None, device="cuda", out=None):
    """``weight.linear(x, b)`` (w4a32) on a GPU (nrv_cuda_linear_w4). ``weight``: a
    nerve.quant.W4Weight (host; uploaded for the call in ``layout``, by default the one
    ``select(device)`` names for this many rows). x float32 [..., in], b float32 [out]."""
    from .quant import W4Weight

    op = "linear_w4"
    dev = device_index(device)
    if not isinstance(weight, W4Weight):
        raise InputError(f"{op}: weight must be a nerve.quant.W4Weight, got {type(weight).__name__}",
                         code("NRV_ERR_INVALID_ARG"))
    xa = _arg(x, "x", op, (np.float32,))
    n_out, n_in = weight.shape
    if len(xa.shape) < 1 or xa.shape[-1] != n_in:
        raise InputError(f"{op}: x has shape {tuple(xa.shape)}, the weight takes {n_in} features",
                         code("NRV_ERR_SHAPE"))
    bb = None if b is None else _arg(b, "b", op, (np.float32,), ndim=1)
    if bb is not None and tuple(bb.shape) != (n_out,):
        raise InputError(f"{op}: b has shape {tuple(bb.shape)}, expected {(n_out,)}", code("NRV_ERR_SHAPE"))
    rows = m.prod(xa.shape[:-1])
    if layout is None:
        sel = select(dev)
        layout = sel["w4"]["gemv_layout"] if rows <= sel["w4"]["gemv_max_rows"] else sel["w4"]["gemm_layout"]
    if layout not in ("packed", "unpacked"):
        raise InputError(f"{op}: layout must be 'packed' or 'unpacked', got {layout!r}", code("NRV_ERR_INVALID_ARG"))
    values = weight.packed if layout == "packed" else weight.q
    result, ya = _result(xa, tuple(xa.shape[:-1]) + (n_out,), np.float32, out, op, dev)
    with _Call(dev, op) as call:
        slots = [call.input(a) for a in (xa, bb, values, weight.scales, weight.zero)]
        y_slot = call.output(ya)
        call.open()
        d = ffi.new("nrv_w4_weight *")
        d.out, d.group = n_out, weight.group_size
        setattr(d, "in", n_in)
        d.layout = lib.NRV_W4_PACKED if layout == "packed" else lib.NRV_W4_UNPACKED
        d.q = call.ptr(slots[2])
        d.scales = call.ptr(slots[3], "const uint16_t *")
        d.zero = call.ptr(slots[4], "const int8_t *")
        check(lib.nrv_cuda_linear_w4(dev, call.ptr(slots[0], "float *"), rows, d, call.ptr(slots[1], "float *"),
                                     call.ptr(y_slot, "float *"), ffi.NULL))
        call.finish()
    return result
