"""The binding is generated from nerve.h and matches the library it loads."""

import re
from pathlib import Path

import numpy as np
import pytest

import nerve
from helpers import HEADER
from nerve import _marshal, _native
from nerve._native import ffi, lib
from nerve.errors import STATUS_NAMES

PACKAGE = Path(nerve.__file__).parent


def _without_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))


def _declared_functions(text):
    """{name: number of parameters} of every NRV_API function in a header text."""
    found = {}
    for ret_and_name, params in re.findall(r"NRV_API([^;]*?)\(([^;]*?)\)\s*;", _without_comments(text), flags=re.S):
        name = ret_and_name.split()[-1].lstrip("*")
        params = params.strip()
        found[name] = 0 if params in ("", "void") else params.count(",") + 1
    return found


HEADER_TEXT = HEADER.read_text(encoding="utf-8")
FUNCTIONS = _declared_functions(HEADER_TEXT)


def test_the_header_declares_the_api():
    assert len(FUNCTIONS) >= 40
    for name in ("nrv_embedding", "nrv_layernorm_linear", "nrv_pool_create", "nrv_kernel_force",
                 "nrv_status_str", "nrv_last_error", "nrv_cuda_device_count"):
        assert name in FUNCTIONS


def test_every_api_function_lies_between_the_cdef_markers():
    begin = HEADER_TEXT.index("/* NRV_CDEF_BEGIN */")
    end = HEADER_TEXT.index("/* NRV_CDEF_END */")
    outside = _declared_functions(HEADER_TEXT[:begin] + HEADER_TEXT[end:])
    assert not outside, f"NRV_API functions outside the cdef markers: {sorted(outside)}"


def test_installed_header_is_the_source_header():
    # make install copies nerve.h into the package; a stale copy would bind an old API
    assert _native.header_path.read_text(encoding="utf-8") == HEADER_TEXT


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_api_function_is_declared_and_resolvable(name):
    assert name in dir(lib), f"{name} is missing from the generated cdef"
    fn = getattr(lib, name)  # AttributeError here: the library does not export it
    assert len(ffi.typeof(fn).args) == FUNCTIONS[name], f"{name}: parameter count differs from nerve.h"


def test_cdef_is_generated_not_written_by_hand():
    cdef = _native.cdef_from_header(HEADER_TEXT)
    assert "NRV_API" not in cdef and "/*" not in cdef and "#" not in cdef
    assert sorted(_native.api_function_names(HEADER_TEXT)) == sorted(FUNCTIONS)
    # one place loads the library and declares C: _native.py
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name != "_native.py":
            assert "ffi.cdef(" not in text and ".dlopen(" not in text and "cffi.FFI(" not in text, path


def test_status_names_round_trip():
    elements = ffi.typeof("nrv_status").elements  # {value: name} parsed from the header
    assert elements == STATUS_NAMES and len(STATUS_NAMES) >= 13, "STATUS_NAMES is not the header's enum"
    for value, name in elements.items():
        assert _native.to_str(lib.nrv_status_str(value)) == name
        assert getattr(lib, name) == value
    assert _native.to_str(lib.nrv_status_str(999)) == "NRV_ERR_UNKNOWN"


def test_last_error_carries_context_and_clears():
    lib.nrv_clear_error()
    assert _native.last_error() == ""
    out = ffi.new("float[4]")
    ids = ffi.new("int64_t[2]", [1, 42])
    table = ffi.new("float[8]")
    status = lib.nrv_embedding(table, lib.NRV_F32, 4, 2, ffi.NULL, ids, lib.NRV_I64, 2, out)
    assert status == lib.NRV_ERR_INDEX
    assert _native.last_error() == "nrv_embedding: id[1] = 42 out of range [0, 4)"
    lib.nrv_clear_error()
    assert _native.last_error() == ""


def test_null_pointer_is_named():
    status = lib.nrv_layernorm(ffi.NULL, 2, 3, ffi.NULL, ffi.NULL, 1e-5, ffi.NULL)
    assert status == lib.NRV_ERR_INVALID_ARG and "'x'" in _native.last_error()


def test_dtype_table_matches_numpy():
    for value, name in ffi.typeof("nrv_dtype").elements.items():
        numpy_dtype = {"NRV_F32": np.float32, "NRV_F16": np.float16, "NRV_I8": np.int8, "NRV_I32": np.int32,
                       "NRV_I64": np.int64, "NRV_U8": np.uint8, "NRV_BOOL": np.bool_, "NRV_F64": np.float64}[name]
        assert lib.nrv_dtype_size(value) == np.dtype(numpy_dtype).itemsize
        assert _marshal.nrv_dtype(numpy_dtype) == value
    assert lib.nrv_dtype_size(99) == 0 and _native.to_str(lib.nrv_dtype_str(99)) == "unknown"


def test_cpu_feature_names():
    for value, name in ffi.typeof("nrv_cpu_feature").elements.items():
        assert _native.to_str(lib.nrv_cpu_feature_name(value)) == name[len("NRV_CPU_"):].lower().replace(
            "sse42", "sse4.2")
    assert lib.nrv_cpu_feature_name(3) == ffi.NULL  # not a single bit
    assert set(nerve.cpu_features()) <= {_native.to_str(lib.nrv_cpu_feature_name(v))
                                         for v in ffi.typeof("nrv_cpu_feature").elements}


def test_missing_symbol_is_a_native_error():
    with pytest.raises(nerve.NativeError) as info:
        _native.symbol("nrv_not_in_any_header")
    assert info.value.status_name == "NRV_ERR_UNSUPPORTED"


def test_info_has_the_documented_fields():
    desc = nerve.info()
    assert desc["version"] == nerve.__version__
    assert desc["cpu"]["arch"] in ("x86_64", "aarch64", "other")
    assert desc["cpu"]["count"] >= 1 and isinstance(desc["cpu"]["features"], list)
    assert set(desc["kernels"]) == set(nerve.kernels.ops()) == set(desc["variants"])
    for op, variants in desc["variants"].items():
        assert [v["name"] for v in variants][-1] == "ref"
        assert sum(v["selected"] for v in variants) == 1
        chosen = next(v for v in variants if v["selected"])
        assert chosen["name"] == desc["kernels"][op] == nerve.kernels.selected(op) and chosen["runnable"]
    cuda = desc["cuda"]
    assert isinstance(cuda["devices"], int) and cuda["devices"] >= 0
    assert cuda["devices"] > 0 or cuda["reason"], "zero CUDA devices must come with a reason"


def test_force_and_disable_are_restored():
    op = "gemm"
    auto = nerve.kernels.selected(op)
    with nerve.kernels.force(op, "ref"):
        assert nerve.kernels.selected(op) == "ref"
        with nerve.kernels.force(op, auto):
            assert nerve.kernels.selected(op) == auto
        assert nerve.kernels.selected(op) == "ref", "leaving the inner force restores the outer one"
    assert nerve.kernels.selected(op) == auto
    with nerve.kernels.disable(["all"]):
        assert all(nerve.kernels.selected(o) == "ref" for o in nerve.kernels.ops())
    assert nerve.kernels.selected(op) == auto


def test_dispatch_state_is_read_back_from_the_library():
    op = "layernorm"
    assert nerve.kernels.forced(op) is None
    with nerve.kernels.force(op, "ref"):
        assert nerve.kernels.forced(op) == "ref"
        assert _native.lib.nrv_kernel_forced(b"no_such_op") == _native.ffi.NULL
    assert nerve.kernels.forced(op) is None
    previous = nerve.kernels.disabled()
    with nerve.kernels.disable(["all"]):
        assert nerve.kernels.disabled() == "all"
        info = nerve.kernels.variant_info(op)
        assert [v["disabled"] for v in info] == [v["name"] != "ref" for v in info]
    assert nerve.kernels.disabled() == previous
