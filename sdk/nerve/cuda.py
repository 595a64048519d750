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

from typing import Dict, List, Optional, Union

from ._native import check, ffi, lib, to_str
from .errors import InputError

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
