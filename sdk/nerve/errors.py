"""Exceptions raised by nerve.

Every failure of the C library arrives as an ``nrv_status`` code plus the thread-local
message of ``nrv_last_error()``; :func:`nerve._native.check` turns the pair into one of
the classes below. Argument checks done in Python (dtype, shape, contiguity of ``out=``)
raise the same classes with the status the C library would have used, so callers can
catch one family of exceptions whatever layer noticed the problem.

Hierarchy::

    NerveError                      base of everything nerve raises
    +-- InputError (ValueError)     NRV_ERR_INVALID_ARG, INDEX, SHAPE, DTYPE, OVERFLOW
    +-- ModelError                  NRV_ERR_FORMAT, NRV_ERR_IO
    |   +-- UnboundDimsError        compiling needs bounds for the model's symbolic dims
    +-- DeviceError                 NRV_ERR_DEVICE
    +-- OutOfMemoryError (MemoryError)  NRV_ERR_OUT_OF_MEMORY
    +-- NativeError                 anything else (STATE, UNSUPPORTED, INTERNAL, unknown)
    +-- LibraryLoadError (ImportError)  libnerve or its header could not be loaded
    +-- LinkError                   nerve.serial: a command was not acknowledged, the link is closed
"""

from __future__ import annotations

from typing import Dict, Optional

__all__ = [
    "NerveError",
    "InputError",
    "ModelError",
    "UnboundDimsError",
    "DeviceError",
    "OutOfMemoryError",
    "NativeError",
    "LibraryLoadError",
    "LinkError",
    "STATUS_NAMES",
    "register_status_names",
    "error_class_for",
    "make_error",
]

# enum nrv_status, {value: name}, as cffi parsed it from nerve.h: filled by nerve._native at
# import (register_status_names), so it cannot drift from the header. Used to name a status
# raised from Python before any C call; statuses from C are named by nrv_status_str.
STATUS_NAMES: Dict[int, str] = {}
_CODES: Dict[str, int] = {}


def register_status_names(names: Dict[int, str]) -> None:
    """Installs the status enum parsed from the header (called once by nerve._native)."""
    STATUS_NAMES.clear()
    STATUS_NAMES.update(names)
    _CODES.clear()
    _CODES.update({name: value for value, name in names.items()})


class NerveError(Exception):
    """Base class of every error raised by nerve.

    Attributes:
        status: the ``nrv_status`` code (int), or None for errors with no C status.
        status_name: its name (``"NRV_ERR_INDEX"``), or None.
        message: the message without the status prefix (for C errors, ``nrv_last_error()``).
    """

    def __init__(self, message: str, status: Optional[int] = None, status_name: Optional[str] = None):
        if status is not None and status_name is None:
            status_name = STATUS_NAMES.get(status, "NRV_ERR_UNKNOWN")
        self.status = status
        self.status_name = status_name
        self.message = message
        text = f"{message} [{status_name}]" if status_name else message
        super().__init__(text)


class InputError(NerveError, ValueError):
    """The arguments were wrong: a bad value or option, an index out of range, shapes that
    do not fit, a dtype the call does not accept, or a size that overflows."""


class ModelError(NerveError):
    """A model or data file could not be read, or is corrupted / of the wrong version."""


class UnboundDimsError(ModelError):
    """The model has symbolic dimensions with no bound given (``dims=``). ``dims``: their
    names; ``inputs``: the model's inputs as [{"name", "dtype", "shape": [int | dim name]}];
    ``outputs``: its output names. A :class:`nerve.Session` catches it and binds the dims
    from its first run's feeds."""

    def __init__(self, message: str, dims, inputs=(), outputs=()):
        super().__init__(message)
        self.dims, self.inputs, self.outputs = list(dims), list(inputs), list(outputs)


class DeviceError(NerveError):
    """An accelerator (CUDA) call failed."""


class OutOfMemoryError(NerveError, MemoryError):
    """A pool is exhausted or the system allocator failed (the message names the pool)."""


class NativeError(NerveError):
    """Any other status from libnerve: invalid state, unsupported request, internal bug.

    ``NativeError(code)`` is accepted as a shorthand: the message is then the status name.
    """

    def __init__(self, message="", status: Optional[int] = None, status_name: Optional[str] = None):
        if isinstance(message, int) and status is None:
            message, status = "", message
        if not message and status is not None:
            message = status_name or STATUS_NAMES.get(status, "NRV_ERR_UNKNOWN")
        super().__init__(str(message), status, status_name)


class LibraryLoadError(NerveError, ImportError):
    """libnerve (or the nerve.h shipped next to it) could not be found or loaded.
    The message names every path that was tried."""


class LinkError(NerveError):
    """A serial link (nerve.serial) could not deliver a command: no acknowledgement after the
    last retry, the port failed, or the link was closed. The message names the url, the
    command's sequence number, the attempts and the last reason; the same facts are attributes
    (None where they do not apply). A command that raised it may or may not have been applied:
    the far end may have received it while every acknowledgement was lost."""

    def __init__(self, message: str, url: Optional[str] = None, seq: Optional[int] = None,
                 attempts: int = 0, reason: Optional[str] = None):
        super().__init__(message)
        self.url = url
        self.seq = seq
        self.attempts = attempts
        self.reason = reason


_CLASS_BY_NAME = {
    "NRV_ERR_INVALID_ARG": InputError,
    "NRV_ERR_INDEX": InputError,
    "NRV_ERR_SHAPE": InputError,
    "NRV_ERR_DTYPE": InputError,
    "NRV_ERR_OVERFLOW": InputError,
    "NRV_ERR_FORMAT": ModelError,
    "NRV_ERR_IO": ModelError,
    "NRV_ERR_DEVICE": DeviceError,
    "NRV_ERR_OUT_OF_MEMORY": OutOfMemoryError,
}


def error_class_for(status: int) -> type:
    """The exception class used for an ``nrv_status`` code."""
    return _CLASS_BY_NAME.get(STATUS_NAMES.get(status, ""), NativeError)


def make_error(status: int, message: str, status_name: Optional[str] = None) -> NerveError:
    """Builds (does not raise) the exception for ``status`` with ``message``."""
    return error_class_for(status)(message, status, status_name)


def code(status_name: str) -> int:
    """The integer value of a status name (``code("NRV_ERR_DTYPE") == 4``)."""
    return _CODES[status_name]
