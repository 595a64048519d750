"""Memory pools of libnerve, seen from Python.

Three kinds, all owned and accounted by the C library (the logic lives there; these classes
are handles):

* :class:`StaticPool` — bump allocation for weights and fixed buffers; released bytes come
  back only with :meth:`Pool.reset` (when nothing is live).
* :class:`DynamicPool` — per-session arena, best-fit, neighbours coalesced on release.
* :class:`StreamingPool` — a fixed ring of equal chunks, for streaming data.

``pool.alloc(n)`` returns a :class:`Buffer` (64-byte aligned, reference count 1). Its bytes are
seen from numpy with ``buf.array(dtype, shape)``, a view over the pool's memory (no copy).
``buf.retain()`` returns a second, independent owner of the same bytes (the C reference count
goes up); each owner calls ``release()`` (or leaves a ``with`` block) once. A numpy array
obtained from a buffer keeps those bytes alive on its own: after ``release()`` they go back to
the pool when the last such array is gone, never before, so an array can never point at
freed memory.

``pool.close()`` may be called while buffers are live: the pool takes no new allocations and
its arena lives until the last buffer is released (a borrower may outlive the owner).
A pool is not thread-safe: use it (and its buffers, whose release can run in a finalizer
when the last reference goes) from one thread at a time.
"""

from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from ._native import check, ffi, symbol
from .errors import InputError, NativeError, code

__all__ = ["Pool", "StaticPool", "DynamicPool", "StreamingPool", "Buffer", "memory_report"]

_KIND_NAMES = {0: "static", 1: "dynamic", 2: "streaming"}
_STAT_FIELDS = (
    "capacity", "allocated", "overhead", "free", "peak", "largest_free", "live_buffers",
    "total_allocs", "failed_allocs", "chunk_size", "chunk_count",
)

# Every pool created in this process, for memory_report(); weak, so it keeps nothing alive.
_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()
_ERR_STATE = code("NRV_ERR_STATE")


def _release_callback():
    release = symbol("nrv_buffer_release")

    def _release(ptr) -> None:
        # Runs when the last Python reference to a buffer handle dies (possibly in a GC pass):
        # never raise from here.
        release(ptr)

    return _release


def _size(value, what: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be an integer, got {value!r}", code("NRV_ERR_INVALID_ARG")) from None
    if n != value or n < 0:
        raise InputError(f"{what} must be a non-negative integer, got {value!r}", code("NRV_ERR_INVALID_ARG"))
    return n


class Buffer:
    """One reference to a block of pool memory (see the module docstring).

    Attributes:
        nbytes: the requested size in bytes.
        pool_name: name of the pool it came from (may be None).
    """

    __slots__ = ("_handle", "_bytes", "nbytes", "pool_name", "__weakref__")

    def __init__(self, raw_ptr, nbytes: int, pool_name: Optional[str]):
        # The handle owns one C reference: its destructor (ffi.gc) drops it. numpy views hold
        # the handle through ffi.buffer, so the reference lasts as long as any view.
        self._handle = ffi.gc(raw_ptr, _release_callback())
        self._bytes = ffi.buffer(self._handle, nbytes) if nbytes else None
        self.nbytes = nbytes
        self.pool_name = pool_name

    def _live_handle(self):
        if self._handle is None:
            raise NativeError("this Buffer has been released", _ERR_STATE)
        return self._handle

    @property
    def released(self) -> bool:
        """True after release() on this handle."""
        return self._handle is None

    @property
    def address(self) -> int:
        """Address of the first byte (64-byte aligned)."""
        return int(ffi.cast("uintptr_t", self._live_handle()))

    @property
    def refcount(self) -> int:
        """The C reference count of the block (all owners together)."""
        return int(symbol("nrv_buffer_refcount")(self._live_handle()))

    def array(self, dtype=np.uint8, shape: Union[int, Tuple[int, ...], None] = None) -> np.ndarray:
        """A writeable numpy view of the buffer's bytes (no copy).

        ``dtype``: element type; ``shape``: defaults to 1-D over as many whole elements as fit.
        The view keeps the bytes alive even after :meth:`release`.
        """
        self._live_handle()
        dtype = np.dtype(dtype)
        if shape is None:
            count = self.nbytes // dtype.itemsize
            shape = (count,)
        else:
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
            count = 1
            for d in shape:
                count *= d
        if count * dtype.itemsize > self.nbytes or any(d < 0 for d in shape):
            raise InputError(
                f"Buffer.array: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, the buffer has {self.nbytes}",
                code("NRV_ERR_SHAPE"),
            )
        if count == 0:
            return np.empty(shape, dtype=dtype)
        return np.frombuffer(self._bytes, dtype=dtype, count=count).reshape(shape)

    def retain(self) -> "Buffer":
        """A new, independent owner of the same bytes (adds a C reference)."""
        handle = self._live_handle()
        check(symbol("nrv_buffer_retain")(handle))
        return Buffer(ffi.cast("void *", handle), self.nbytes, self.pool_name)

    def release(self) -> None:
        """Drops this handle's reference (idempotent). The bytes return to the pool now if no
        other owner and no numpy view of them remains, else when the last one goes."""
        handle, self._handle, self._bytes = self._handle, None, None
        del handle  # the handle's destructor runs now unless a numpy view still holds it

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._handle is None else f"at 0x{self.address:x}"
        return f"<nerve.Buffer {self.nbytes} bytes from pool {self.pool_name!r} {state}>"


class Pool:
    """Base class of the three pool kinds; create one of the subclasses."""

    kind: str = ""

    def __init__(self, raw_pool, name: Optional[str]):
        self._pool = raw_pool
        self.name = name
        _pools.add(self)

    @staticmethod
    def _name_arg(name: Optional[str]):
        return ffi.NULL if name is None else str(name).encode()

    def _live(self):
        if self._pool is None:
            raise NativeError(f"pool {self.name!r} is closed", _ERR_STATE)
        return self._pool

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._pool is None

    def alloc(self, nbytes: int) -> Buffer:
        """Allocates ``nbytes`` (> 0) bytes, 64-byte aligned.

        Raises:
            OutOfMemoryError: the pool cannot hold the request now (the message names the
            pool, the request and what is free); the pool is unchanged.
        """
        nbytes = _size(nbytes, "nbytes")
        out = ffi.new("void **")
        check(symbol("nrv_pool_alloc")(self._live(), nbytes, out))
        return Buffer(out[0], nbytes, self.name)

    def stats(self) -> Dict[str, object]:
        """The pool's exact counters (bytes unless noted): capacity, allocated, overhead,
        free, peak, largest_free, live_buffers, total_allocs, failed_allocs, chunk_size,
        chunk_count, plus kind, closed and name."""
        raw = ffi.new("nrv_pool_stats *")
        check(symbol("nrv_pool_stats_get")(self._live(), raw))
        result: Dict[str, object] = {"name": self.name, "kind": _KIND_NAMES.get(raw.kind, str(raw.kind)),
                                     "closed": bool(raw.closed)}
        for field in _STAT_FIELDS:
            result[field] = int(getattr(raw, field))
        return result

    def reset_peak(self) -> None:
        """Resets the peak counter to the bytes allocated now."""
        check(symbol("nrv_pool_reset_peak")(self._live()))

    def reset(self) -> None:
        """Returns every byte to the pool (static and dynamic pools; nothing may be live)."""
        check(symbol("nrv_pool_reset")(self._live()))

    def close(self) -> None:
        """Closes the pool (idempotent): no new allocations; its memory is freed now, or when
        the last live buffer is released."""
        pool, self._pool = self._pool, None
        if pool is not None:
            symbol("nrv_pool_free")(pool)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass

    def __repr__(self) -> str:
        state = "closed" if self._pool is None else "open"
        return f"<nerve.{type(self).__name__} {self.name!r} {state}>"


def _create(kind_value: int, capacity, name: Optional[str]):
    out = ffi.new("nrv_pool_t **")
    check(symbol("nrv_pool_create")(kind_value, _size(capacity, "capacity"), Pool._name_arg(name), out))
    return out[0]


class StaticPool(Pool):
    """Bump-allocated pool of about ``capacity`` bytes (headers included), for weights and
    fixed buffers."""

    kind = "static"

    def __init__(self, capacity: int, name: Optional[str] = None):
        super().__init__(_create(0, capacity, name), name)


class DynamicPool(Pool):
    """Best-fit, coalescing pool of about ``capacity`` bytes, for per-session data."""

    kind = "dynamic"

    def __init__(self, capacity: int, name: Optional[str] = None):
        super().__init__(_create(1, capacity, name), name)


class StreamingPool(Pool):
    """A ring of ``chunk_count`` chunks of ``chunk_size`` bytes; alloc takes the next free
    chunk in ring order and never allocates system memory after creation."""

    kind = "streaming"

    def __init__(self, chunk_size: int, chunk_count: int, name: Optional[str] = None):
        out = ffi.new("nrv_pool_t **")
        check(
            symbol("nrv_pool_create_streaming")(
                _size(chunk_size, "chunk_size"), _size(chunk_count, "chunk_count"), self._name_arg(name), out
            )
        )
        self.chunk_size = int(chunk_size)
        self.chunk_count = int(chunk_count)
        super().__init__(out[0], name)

    def alloc(self, nbytes: Optional[int] = None) -> Buffer:
        """Takes the next free chunk; ``nbytes`` (default: a whole chunk) must be <= chunk_size."""
        return super().alloc(self.chunk_size if nbytes is None else nbytes)


def memory_report() -> Dict[str, object]:
    """Counters of every open pool created by this process, and their totals::

        {'pools': [{'name', 'kind', 'capacity', 'allocated', ...}, ...],
         'totals': {'pools', 'capacity', 'allocated', 'overhead', 'free', 'live_buffers'},
         'cuda': {'buffers': [...], 'totals': {'device_bytes', 'pinned_host_bytes', 'bytes_copied', ...}}}
    """
    pools: List[Dict[str, object]] = []
    for pool in list(_pools):
        if not pool.closed:
            pools.append(pool.stats())
    pools.sort(key=lambda s: (str(s["kind"]), str(s["name"])))
    totals = {"pools": len(pools)}
    for field in ("capacity", "allocated", "overhead", "free", "live_buffers"):
        totals[field] = sum(int(s[field]) for s in pools)
    from . import cuda  # the device side: DeviceArrays and HostBuffers

    return {"pools": pools, "totals": totals, "cuda": cuda.memory_report()}
