"""The one place that loads libnerve.

* The library is the ``libnerve.so*`` installed inside this package by CMake (scikit-build-core);
  the environment variable ``NERVE_LIBRARY`` (a file path) overrides it, for developers
  running against a build tree.
* The cffi declarations are generated here, at import, from the ``nerve.h`` installed in
  ``nerve/include/``: the text between the ``NRV_CDEF_BEGIN`` / ``NRV_CDEF_END`` markers with
  comments stripped and ``NRV_API`` removed. Nothing is declared by hand, so the binding
  cannot drift from the header. ``NERVE_HEADER`` overrides the header path.
* :func:`check` is the one choke point that turns a non-zero ``nrv_status`` into an exception.

Symbols are resolved lazily by cffi, so importing works against a library that lacks some
entry points (an older build); the first call of a missing one raises
:class:`~nerve.errors.NativeError` through :func:`symbol`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional

import cffi

from .errors import LibraryLoadError, NativeError, code, make_error, register_status_names

__all__ = [
    "ffi",
    "lib",
    "library_path",
    "header_path",
    "cdef_from_header",
    "api_function_names",
    "check",
    "symbol",
    "has_symbol",
    "to_str",
    "last_error",
]

_PACKAGE_DIR = Path(__file__).resolve().parent
_CDEF_BEGIN = "/* NRV_CDEF_BEGIN */"
_CDEF_END = "/* NRV_CDEF_END */"


def _find_header() -> Path:
    override = os.environ.get("NERVE_HEADER")
    candidates = [Path(override)] if override else [_PACKAGE_DIR / "include" / "nerve.h"]
    for path in candidates:
        if path.is_file():
            return path
    raise LibraryLoadError(
        "nerve: the C header nerve.h was not found (tried: %s); reinstall the package "
        "(pip install .) or set NERVE_HEADER" % ", ".join(str(p) for p in candidates)
    )


def _find_library() -> Path:
    override = os.environ.get("NERVE_LIBRARY")
    if override:
        path = Path(override)
        if not path.is_file():
            raise LibraryLoadError(f"nerve: NERVE_LIBRARY={override!r} is not a file")
        return path
    # The package ships one file under the SONAME, libnerve.so.MAJOR (a wheel holds no
    # symlinks); a plain CMake install also has libnerve.so and the fully versioned file.
    tried = [_PACKAGE_DIR / "libnerve.so.0", _PACKAGE_DIR / "libnerve.so"]
    for path in tried:
        if path.is_file():
            return path
    versioned = sorted(_PACKAGE_DIR.glob("libnerve.so.*"))
    versioned += sorted(_PACKAGE_DIR.glob("libnerve*.dylib")) + sorted(_PACKAGE_DIR.glob("nerve*.dll"))
    if versioned:
        return versioned[0]
    raise LibraryLoadError(
        "nerve: the native library libnerve was not found (tried: %s and %s); the package was "
        "probably installed without its build step: run `make install` (or pip install .), "
        "or set NERVE_LIBRARY to a built libnerve.so"
        % (", ".join(str(p) for p in tried), _PACKAGE_DIR / "libnerve.so.*")
    )


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def cdef_from_header(header_text: str) -> str:
    """Returns the cffi declarations of a nerve.h text: the part between the
    NRV_CDEF_BEGIN / NRV_CDEF_END markers, comments stripped, ``NRV_API`` removed."""
    start = header_text.find(_CDEF_BEGIN)
    end = header_text.find(_CDEF_END)
    if start < 0 or end < start:
        raise LibraryLoadError("nerve: nerve.h lacks the NRV_CDEF_BEGIN / NRV_CDEF_END markers")
    body = _strip_comments(header_text[start + len(_CDEF_BEGIN): end])
    body = re.sub(r"\bNRV_API\b", "", body)
    lines = [line.rstrip() for line in body.splitlines()]
    return "\n".join(line for line in lines if line.strip()) + "\n"


def api_function_names(header_text: str) -> List[str]:
    """Names of every function declared ``NRV_API`` anywhere in a nerve.h text."""
    body = _strip_comments(header_text)
    return re.findall(r"\bNRV_API\b[^;()]*?\b(nrv_\w+)\s*\(", body)


header_path: Path = _find_header()
library_path: Path = _find_library()

ffi = cffi.FFI()
try:
    ffi.cdef(cdef_from_header(header_path.read_text(encoding="utf-8")))
except cffi.CDefError as exc:  # pragma: no cover - only with a broken header
    raise LibraryLoadError(f"nerve: cannot parse the declarations of {header_path}: {exc}") from exc
register_status_names(dict(ffi.typeof("nrv_status").elements))
try:
    lib = ffi.dlopen(str(library_path))
except OSError as exc:
    raise LibraryLoadError(f"nerve: cannot load the native library {library_path}: {exc}") from exc


def has_symbol(name: str) -> bool:
    """True if the loaded libnerve exports the declared function ``name``."""
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def symbol(name: str):
    """The C function ``name`` of libnerve; NativeError (NRV_ERR_UNSUPPORTED) if this build
    of the library does not export it."""
    try:
        return getattr(lib, name)
    except AttributeError:
        raise NativeError(
            f"{name} is declared in nerve.h but the loaded library {library_path} does not export it "
            "(the library is older than the header, or that part is not built yet)",
            code("NRV_ERR_UNSUPPORTED"),
        ) from None


def to_str(c_string) -> Optional[str]:
    """A Python str from a C ``const char *`` (None for NULL)."""
    if c_string == ffi.NULL:
        return None
    return ffi.string(c_string).decode("utf-8", errors="replace")


def last_error() -> str:
    """This thread's last nerve error message (``nrv_last_error()``)."""
    return to_str(lib.nrv_last_error()) or ""


def check(status: int) -> None:
    """Raises the exception for a non-zero ``nrv_status``; returns None for NRV_OK.

    The exception carries ``status``, ``status_name`` (from ``nrv_status_str``) and the
    message of ``nrv_last_error()``; call it right after the failing call, on the same
    thread (the message is thread-local)."""
    if status == 0:
        return
    status = int(status)
    message = last_error() or "libnerve returned an error without a message"
    name = to_str(lib.nrv_status_str(status))
    raise make_error(status, message, name)
