"""Wrong inputs: each raises the right nerve exception with a useful message, and writes
nothing. Also the layout rules: no silent dtype conversion, non-contiguous inputs work,
out= must be exactly right, no forbidden overlap."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nerve
from nerve import _marshal, _native, ops
from nerve.errors import STATUS_NAMES

F32 = np.float32


def _poisoned(shape):
    """An out buffer full of distinctive bit patterns (NaN payloads included)."""
    bits = np.arange(np.prod(shape, dtype=np.int64), dtype=np.uint32) * np.uint32(2654435761) | np.uint32(0x7F800001)
    return bits.view(F32).reshape(shape)


def _assert_untouched(out, before):
    np.testing.assert_array_equal(out.view(np.uint32), before.view(np.uint32))


# ------------------------------------------------------------------------- embedding ids

@pytest.mark.parametrize("id_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("bad", ["len", "negative", "huge"])
def test_embedding_bad_id_raises_and_writes_nothing(bad, id_dtype, rng):
    table = rng.standard_normal((1000, 16), dtype=F32)
    bad_id = {"len": len(table), "negative": -1, "huge": np.iinfo(id_dtype).max}[bad]
    ids = np.array([3, 999, bad_id, 0], dtype=id_dtype)
    out = _poisoned((4, 16))
    before = out.copy()
    with pytest.raises(nerve.InputError) as info:
        ops.embedding(table, ids, out=out)
    _assert_untouched(out, before)
    err = info.value
    assert err.status == 2 and err.status_name == "NRV_ERR_INDEX"
    assert f"id[2] = {bad_id} " in str(err) and "[0, 1000)" in str(err), str(err)
    assert isinstance(err, ValueError) and isinstance(err, nerve.NerveError)


def test_embedding_the_issue_example(rng):
    table = rng.standard_normal((1000, 8), dtype=F32)
    with pytest.raises(nerve.InputError, match=r"id\[1\] = 1000 out of range"):
        ops.embedding(table, np.array([0, len(table)]))


def test_embedding_empty_table_rejects_any_id():
    with pytest.raises(nerve.InputError, match="empty"):
        ops.embedding(np.zeros((0, 4), F32), [0])
    assert ops.embedding(np.zeros((0, 4), F32), np.zeros(0, np.int64)).shape == (0, 4)


# ------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("id_dtype", [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64,
                                      np.float32, np.float64, np.bool_])
def test_embedding_ids_of_other_dtypes_are_refused(id_dtype):
    table = np.zeros((4, 2), F32)
    with pytest.raises(nerve.InputError) as info:
        ops.embedding(table, np.array([0, 1], dtype=id_dtype))
    msg = str(info.value)
    assert "'ids'" in msg and np.dtype(id_dtype).name in msg and "int64" in msg and "int32" in msg, msg
    assert info.value.status_name == "NRV_ERR_DTYPE"


@pytest.mark.parametrize(
    "call,arg",
    [
        (lambda f64: ops.embedding(f64((4, 3)), [0]), "table"),
        (lambda f64: ops.layernorm(f64((2, 3)), np.ones(3, F32)), "x"),
        (lambda f64: ops.layernorm(np.ones((2, 3), F32), f64(3)), "gamma"),
        (lambda f64: ops.layernorm(np.ones((2, 3), F32), np.ones(3, F32), f64(3)), "beta"),
        (lambda f64: ops.linear(np.ones((2, 3), F32), f64((4, 3))), "W"),
        (lambda f64: ops.linear(np.ones((2, 3), F32), np.ones((4, 3), F32), f64(4)), "b"),
        (lambda f64: ops.layernorm_linear(f64((2, 3)), np.ones(3, F32), None, np.ones((4, 3), F32)), "x"),
        (lambda f64: ops.gemm(f64((2, 3)), np.ones((3, 2), F32)), "a"),
        (lambda f64: ops.gemm(np.ones((2, 3), F32), np.ones((3, 2), F32), f64((2, 2)), beta=1.0), "c"),
        (lambda f64: ops.gelu(f64(5)), "x"),
        (lambda f64: ops.relu(f64(5)), "x"),
        (lambda f64: ops.softmax(f64((2, 5))), "x"),
        (lambda f64: ops.embedding(np.ones((4, 3), np.int8), [0], row_scales=f64(4)), "row_scales"),
    ],
)
def test_float64_is_never_cast_silently(call, arg):
    def f64(shape):
        return np.ones(shape, np.float64)

    with pytest.raises(nerve.InputError) as info:
        call(f64)
    msg = str(info.value)
    assert f"'{arg}'" in msg and "float64" in msg and "float32" in msg and ".astype" in msg, msg


def test_python_lists_take_the_expected_dtype():
    # a list has no dtype of its own: nothing is lost by converting it
    np.testing.assert_allclose(ops.relu([[-1.0, 2.0]]), [[0.0, 2.0]])
    np.testing.assert_array_equal(ops.embedding([[1.0, 2.0], [3.0, 4.0]], [1, 0]), [[3, 4], [1, 2]])
    with pytest.raises(nerve.InputError, match="'ids'"):
        ops.embedding(np.ones((2, 2), F32), [0.5])
    with pytest.raises(nerve.InputError, match="not int64 integers"):
        ops.embedding(np.ones((2, 2), F32), [2**70])


def test_int8_table_needs_row_scales_and_float_tables_refuse_them():
    with pytest.raises(nerve.InputError, match="row_scales"):
        ops.embedding(np.ones((4, 3), np.int8), [0])
    with pytest.raises(nerve.InputError, match="row_scales"):
        ops.embedding(np.ones((4, 3), F32), [0], row_scales=np.ones(4, F32))
    with pytest.raises(nerve.InputError, match="row_scales"):
        ops.embedding(np.ones((4, 3), np.int8), [0], row_scales=np.ones(5, F32))


# ------------------------------------------------------------------------- layout

def test_contiguous_inputs_are_passed_without_a_copy(rng):
    x = rng.standard_normal((5, 7), dtype=F32)
    assert _marshal.as_float32(x, "x", "test") is x
    pointer = _marshal.ptr(x)
    assert int(_native.ffi.cast("uintptr_t", pointer)) == x.__array_interface__["data"][0]
    # row-strided and transposed matrices reach gemm as they are (leading dimension / flag)
    big = rng.standard_normal((8, 9), dtype=F32)
    stored, ld, flipped = _marshal.as_matrix(big[:, 2:6], "a", "test")
    assert np.shares_memory(stored, big) and ld == 9 and not flipped
    stored, ld, flipped = _marshal.as_matrix(big.T, "a", "test")
    assert stored.base is big and ld == 9 and flipped


def test_non_contiguous_inputs_work(rng):
    table = rng.standard_normal((20, 6), dtype=F32)
    ids = np.arange(10, dtype=np.int64)
    np.testing.assert_array_equal(ops.embedding(table[::2], ids[::2]), table[::2][ids[::2]])
    np.testing.assert_array_equal(ops.embedding(table[:, ::2], ids[1::3]), table[:, ::2][ids[1::3]])
    x = rng.standard_normal((6, 40), dtype=F32)
    gamma, beta = rng.standard_normal(40, dtype=F32), rng.standard_normal(40, dtype=F32)
    W = rng.standard_normal((40, 20), dtype=F32)
    xs, Ws = x[::2, ::2], W.T[:, ::2]  # strided views
    np.testing.assert_allclose(ops.layernorm(xs, gamma[::2], beta[::2]),
                               ops.layernorm(xs.copy(), gamma[::2].copy(), beta[::2].copy()), rtol=1e-6)
    np.testing.assert_allclose(ops.linear(xs, Ws), ops.linear(xs.copy(), Ws.copy()), rtol=1e-6)
    np.testing.assert_allclose(ops.layernorm_linear(x.T.T[::2], gamma, beta, W.T),
                               ops.layernorm_linear(x[::2].copy(), gamma, beta, W.T.copy()), rtol=1e-6)
    np.testing.assert_allclose(ops.softmax(x.T), ops.softmax(x.T.copy()), rtol=1e-6)
    np.testing.assert_array_equal(ops.relu(x[:, ::-1]), np.maximum(x[:, ::-1], 0))
    read_only = np.arange(-3, 3, dtype=F32)
    read_only.setflags(write=False)
    np.testing.assert_array_equal(ops.relu(read_only), np.maximum(read_only, 0))
    np.testing.assert_array_equal(ops.relu(np.broadcast_to(np.float32(-2), (3, 4))), np.zeros((3, 4), F32))
    unaligned = np.frombuffer(np.zeros(4 * 10 + 1, np.uint8).data, dtype=F32, count=10, offset=1)
    assert not unaligned.flags.aligned
    assert _marshal.as_float32(unaligned, "x", "test").flags.aligned  # copied to aligned memory
    np.testing.assert_array_equal(ops.relu(unaligned), np.zeros(10, F32))


# ------------------------------------------------------------------------- out=

@pytest.mark.parametrize(
    "make_out,status",
    [
        (lambda: np.zeros((3, 4), np.float64), "NRV_ERR_DTYPE"),
        (lambda: np.zeros((4, 3), F32), "NRV_ERR_SHAPE"),
        (lambda: np.zeros((12,), F32), "NRV_ERR_SHAPE"),
        (lambda: np.zeros((3, 8), F32)[:, ::2], "NRV_ERR_INVALID_ARG"),
        (lambda: np.zeros((4, 3), F32).T, "NRV_ERR_INVALID_ARG"),
        (lambda: np.zeros((3, 4), F32).tolist(), "NRV_ERR_INVALID_ARG"),
    ],
    ids=["float64", "transposed-shape", "flat", "strided", "F-order", "list"],
)
def test_bad_out_is_refused(make_out, status, rng):
    table = rng.standard_normal((5, 4), dtype=F32)
    out = make_out()
    snapshot = np.array(out, copy=True)
    with pytest.raises(nerve.InputError) as info:
        ops.embedding(table, [0, 1, 2], out=out)
    assert info.value.status_name == status, str(info.value)
    np.testing.assert_array_equal(np.asarray(out), snapshot)


def test_read_only_out_is_refused():
    out = np.zeros((2, 3), F32)
    out.setflags(write=False)
    with pytest.raises(nerve.InputError, match="read-only"):
        ops.relu(np.ones((2, 3), F32), out=out)


def test_out_of_the_right_kind_is_filled_and_returned(rng):
    x = rng.standard_normal((3, 4), dtype=F32)
    out = np.empty((3, 4), F32)
    assert ops.sigmoid(x, out=out) is out


def test_out_overlapping_inputs_is_refused(rng):
    x = rng.standard_normal((4, 8), dtype=F32)
    W = rng.standard_normal((8, 8), dtype=F32)
    gamma = np.ones(8, F32)
    for make in (lambda: ops.linear(x, W, out=x), lambda: ops.linear(x, W, out=W[:4]),
                 lambda: ops.layernorm_linear(x, gamma, None, W, out=x),
                 lambda: ops.layernorm_linear(x, gamma, None, W, out=W[4:])):
        before = (x.copy(), W.copy())
        with pytest.raises(nerve.InputError, match="overlap"):
            make()
        np.testing.assert_array_equal(x, before[0])
        np.testing.assert_array_equal(W, before[1])
    a = rng.standard_normal((8, 8), dtype=F32)
    with pytest.raises(nerve.InputError, match="overlap"):
        ops.gemm(a, a.copy(), out=a)
    # element-wise ops: out may BE x, but not a shifted window of it
    buf = rng.standard_normal(20, dtype=F32)
    with pytest.raises(nerve.InputError, match="overlap"):
        ops.tanh(buf[:-1], out=buf[1:])
    with pytest.raises(nerve.InputError, match="overlap"):
        ops.layernorm(buf[:16].reshape(2, 8), gamma, out=buf[4:].reshape(2, 8))
    with pytest.raises(nerve.InputError, match="overlap"):
        ops.embedding(buf[:8].reshape(2, 4), [0, 1], out=buf[:8].reshape(2, 4))


# ------------------------------------------------------------------------- shapes

@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: ops.embedding(np.ones(5, F32), [0]), "'table' must be 2-D"),
        (lambda: ops.layernorm(np.float32(1.0), np.ones(1, F32)), "'x' needs at least 1"),
        (lambda: ops.layernorm(np.ones((2, 3), F32), np.ones(4, F32)), "'gamma' has shape (4,)"),
        (lambda: ops.layernorm(np.ones((2, 3), F32), np.ones(3, F32), np.ones((1, 3), F32)), "'beta' must be 1-D"),
        (lambda: ops.linear(np.ones((2, 3), F32), np.ones((4, 5), F32)), "x has 3 features"),
        (lambda: ops.linear(np.ones((2, 3), F32), np.ones((4, 3), F32), np.ones(3, F32)), "'b' has shape (3,)"),
        (lambda: ops.linear(np.ones((2, 3), F32), np.ones(3, F32)), "'W' must be 2-D"),
        (lambda: ops.layernorm_linear(np.ones((2, 3), F32), np.ones(3, F32), None, np.ones((4, 2), F32)),
         "x has 3 features"),
        (lambda: ops.gemm(np.ones((2, 3), F32), np.ones((2, 3), F32)), "inner dimensions"),
        (lambda: ops.gemm(np.ones((2, 3), F32), np.ones((3, 4), F32), np.ones((4, 2), F32), beta=1.0), "'c' has shape"),
        (lambda: ops.gemm(np.ones(3, F32), np.ones((3, 4), F32)), "'a' must be 2-D"),
        (lambda: ops.softmax(np.float32(2.0)), "'x' needs at least 1"),
    ],
)
def test_shapes_that_do_not_fit(call, needle):
    with pytest.raises(nerve.InputError) as info:
        call()
    assert needle in str(info.value), str(info.value)
    assert info.value.status_name == "NRV_ERR_SHAPE"


def test_zero_width_linear_is_the_bias():
    b = np.array([1.5, -2.0, 3.25], F32)
    y = ops.linear(np.ones((2, 0), F32), np.ones((3, 0), F32), b)
    np.testing.assert_array_equal(y, np.broadcast_to(b, (2, 3)))
    np.testing.assert_array_equal(ops.linear(np.ones((2, 0), F32), np.ones((3, 0), F32)), np.zeros((2, 3), F32))


def test_zero_width_layernorm_linear_is_a_shape_error_from_c():
    with pytest.raises(nerve.InputError, match="width 0"):
        ops.layernorm_linear(np.ones((2, 0), F32), np.ones(0, F32), None, np.ones((3, 0), F32))


# ------------------------------------------------------------------------- options

@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-5, 1e300])
def test_bad_eps_is_refused_by_the_library(eps, rng):
    x = rng.standard_normal((2, 8), dtype=F32)
    out = _poisoned((2, 8))
    before = out.copy()
    for call in (lambda: ops.layernorm(x, np.ones(8, F32), eps=eps, out=out),
                 lambda: ops.layernorm_linear(x, np.ones(8, F32), None, np.ones((8, 8), F32), eps=eps, out=out)):
        with pytest.raises(nerve.InputError) as info:
            call()
        assert info.value.status_name == "NRV_ERR_INVALID_ARG" and "eps" in str(info.value)
        _assert_untouched(out, before)


def test_eps_must_be_a_number(rng):
    with pytest.raises(nerve.InputError, match="eps"):
        ops.layernorm(np.ones((1, 2), F32), np.ones(2, F32), eps="small")


def test_unknown_gelu_approximation():
    with pytest.raises(nerve.InputError, match="approximate"):
        ops.gelu(np.ones(3, F32), approximate="erf")


def test_kernel_selection_errors():
    with pytest.raises(nerve.InputError, match="unknown op"):
        nerve.kernels.force("no_such_op", "ref")
    with pytest.raises(nerve.InputError, match="no variant 'nope'"):
        nerve.kernels.force("gemm", "nope")
    missing = [(op, v["name"]) for op in nerve.kernels.ops() for v in nerve.kernels.variant_info(op)
               if not v["runnable"]]
    for op, name in missing[:1]:  # only where this CPU lacks a compiled-in variant's features
        with pytest.raises(nerve.NativeError) as info:
            nerve.kernels.force(op, name)
        assert info.value.status_name == "NRV_ERR_UNSUPPORTED"


# ------------------------------------------------------------------------- the choke point

@pytest.mark.parametrize("status", sorted(STATUS_NAMES)[1:] + [99])
def test_check_maps_every_status_to_its_class(status):
    expected = {
        1: nerve.InputError, 2: nerve.InputError, 3: nerve.InputError, 4: nerve.InputError,
        6: nerve.InputError, 5: nerve.OutOfMemoryError, 8: nerve.DeviceError, 9: nerve.ModelError,
        10: nerve.ModelError,
    }.get(status, nerve.NativeError)
    _native.lib.nrv_clear_error()
    with pytest.raises(expected) as info:
        _native.check(status)
    err = info.value
    assert type(err) is expected and isinstance(err, nerve.NerveError)
    assert err.status == status
    assert err.status_name == STATUS_NAMES.get(status, "NRV_ERR_UNKNOWN")
    _native.check(0)  # NRV_OK: no exception


def test_out_of_memory_error_is_a_memory_error():
    assert issubclass(nerve.OutOfMemoryError, MemoryError)
    assert issubclass(nerve.InputError, ValueError)
    assert issubclass(nerve.LibraryLoadError, ImportError)
    err = nerve.NativeError(11)
    assert err.status == 11 and err.status_name == "NRV_ERR_STATE"


def test_error_message_comes_from_nrv_last_error():
    with pytest.raises(nerve.InputError) as info:
        ops.embedding(np.ones((3, 2), F32), [0, 7])
    assert info.value.message == _native.last_error()
    assert info.value.message.startswith("nrv_embedding: id[1] = 7 out of range [0, 3)")


# ------------------------------------------------------------------------- loading

def _import_in_subprocess(env_extra, path_prefix=None):
    code = textwrap.dedent(
        f"""
        import sys
        {"sys.path.insert(0, %r)" % str(path_prefix) if path_prefix else ""}
        try:
            import nerve
        except ImportError as exc:
            print(type(exc).__name__)
            print([c.__name__ for c in type(exc).__mro__])
            print(exc)
        else:
            print("imported", nerve.__file__)
        """
    )
    import os

    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_missing_library_named_by_env_is_a_clear_import_error(tmp_path):
    missing = tmp_path / "libnerve.so.0"
    result = _import_in_subprocess({"NERVE_LIBRARY": str(missing)})
    lines = result.stdout.splitlines()
    assert lines[0] == "LibraryLoadError", result.stdout + result.stderr
    assert "NerveError" in lines[1] and "ImportError" in lines[1]
    assert str(missing) in lines[2]


def test_package_without_its_library_names_the_paths_tried(tmp_path):
    import shutil

    package = tmp_path / "nerve"
    shutil.copytree(nerve.__path__[0], package, ignore=shutil.ignore_patterns("libnerve*", "__pycache__"))
    result = _import_in_subprocess({"NERVE_LIBRARY": ""}, path_prefix=tmp_path)
    lines = result.stdout.splitlines()
    assert lines[0] == "LibraryLoadError", result.stdout + result.stderr
    assert str(package / "libnerve.so.0") in lines[2] and "make install" in lines[2]


def test_library_override_loads_that_file():
    result = _import_in_subprocess({"NERVE_LIBRARY": str(_native.library_path)})
    assert result.stdout.startswith("imported"), result.stdout + result.stderr


def test_large_results_are_64_byte_aligned(rng):
    # From _marshal.SMALL_RESULT_BYTES (64 KiB) up; smaller results come as numpy allocates them.
    x = rng.standard_normal((129, 131), dtype=F32)  # 67.6 KB
    assert x.nbytes >= _marshal.SMALL_RESULT_BYTES
    for result in (ops.relu(x), ops.softmax(x), ops.embedding(x, np.arange(129)), ops.linear(x, x),
                   ops.gemm(x, x.T), ops.layernorm(x, np.ones(131, F32))):
        assert result.nbytes >= _marshal.SMALL_RESULT_BYTES
        assert result.__array_interface__["data"][0] % 64 == 0
        assert result.flags.c_contiguous and result.flags.writeable and result.dtype == F32
    small = rng.standard_normal((5, 33), dtype=F32)
    for result in (ops.relu(small), ops.embedding(small, [4, 0, 2]), ops.linear(small, small)):
        assert result.flags.c_contiguous and result.flags.writeable and result.dtype == F32
