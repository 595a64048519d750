"""Det, BitCast and MaxRoiPool (sdk/nerve/compiler/onnx_ops_misc.py, native op_misc.c) against
onnxruntime on fresh random inputs at awkward sizes, their edges (M = 0, singular and NaN
matrices, rois across and outside the image, empty bins, NaN in a bin), and the errors: a roi
whose batch index is outside the batch is a typed run-time error the session survives, a
BitCast between widths a compile error.

onnxruntime 1.32 has no BitCast kernel: BitCast is held bit for bit to ONNX's reference
implementation (onnx.reference, numpy's view). onnxruntime runs MaxRoiPool up to opset 21
(opset 22 only added types), so those models are opset 21.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import nerve
from helpers import make_model, onnx_session, op_types, ort_run

ort = pytest.importorskip("onnxruntime")

F32, F16, F64 = np.float32, np.float16, np.float64


def _one_node(op, inputs, out_type, opset, inits=None, **attrs):
    """A model of one node `op` over inputs [(name, TensorProto type, shape)] with output y."""
    names = [n for n, _, _ in inputs] + list(inits or {})
    return make_model([h.make_node(op, names, ["y"], name="the_node", **attrs)], inputs, [("y", out_type)],
                      dict(inits or {}), opset)


# ------------------------------------------------------------------------------- Det

def _det_model(shape, elem=T.FLOAT):
    return _one_node("Det", [("x", elem, list(shape))], elem, 22)


def _hadamard(x):
    """Hadamard's bound on |det| of each matrix: the product of its rows' 2-norms."""
    x64 = np.asarray(x, F64)
    return np.prod(np.linalg.norm(x64, axis=-1), axis=-1)


# onnxruntime's Det is Eigen's LU in float32; nerve's an LU in double rounded once. A random
# normal matrix is often ill-conditioned, so |det| can be orders of magnitude below the size
# of the terms that cancel in it: the float32 LU's error scales with those terms (Hadamard's
# bound), not with |det|, and a tolerance relative to |det| would measure onnxruntime's
# cancellation. Measured over 1000 seeds at every size and batch shape below: worst
# |nerve - onnxruntime| 1.9e-7 of the Hadamard bound; held to 6e-7.
DET_ORT_OF_HADAMARD = 6e-7
# nerve against numpy's float64 det over the same 1000 seeds: within half a float32 ulp of it
# every time (correctly rounded); allowed besides that the float64 LU's own error scale,
# 2^-52 per row of the Hadamard bound (numpy's as much as nerve's).
DET_F64_OF_HADAMARD_PER_ROW = 2.0 ** -52


@pytest.mark.parametrize("m", [1, 2, 3, 7, 13])
@pytest.mark.parametrize("batch", [(), (3,), (2, 5)], ids=str)
def test_det_matches_onnxruntime(tmp_path, rng, m, batch):
    shape = batch + (m, m)
    model = _det_model(shape)
    sess = onnx_session(tmp_path, model, {})
    assert "det" in op_types(sess)
    for _ in range(5):
        x = rng.standard_normal(shape).astype(F32)
        got = sess.run({"x": x})["y"]
        ref = ort_run(model, {"x": x})["y"]
        assert got.dtype == ref.dtype == F32 and got.shape == ref.shape == batch  # rank 0 for one matrix
        had = _hadamard(x)
        assert np.all(np.abs(got.astype(F64) - ref) <= DET_ORT_OF_HADAMARD * had), (got, ref)
        exact = np.linalg.det(x.astype(F64))
        half_ulp = 0.5 * np.spacing(np.abs(got)).astype(F64)
        assert np.all(np.abs(got - exact) <= half_ulp + m * DET_F64_OF_HADAMARD_PER_ROW * had), (got, exact)


@pytest.mark.parametrize("m", [3, 7, 13])
def test_det_of_sparse_matrices(tmp_path, rng, m):
    """Two thirds of the entries zero: columns with zeros under the pivot (rows the
    elimination passes over) and, now and then, a zero column (singular)."""
    model = _det_model((20, m, m))
    sess = onnx_session(tmp_path, model, {})
    x = (rng.standard_normal((20, m, m)) * (rng.random((20, m, m)) < 1 / 3)).astype(F32)
    got, ref = sess.run({"x": x})["y"], ort_run(model, {"x": x})["y"]
    had = _hadamard(x)
    assert np.all(np.abs(got.astype(F64) - ref) <= DET_ORT_OF_HADAMARD * had)
    exact = np.linalg.det(x.astype(F64))
    half_ulp = 0.5 * np.spacing(np.abs(got)).astype(F64)
    assert np.all(np.abs(got - exact) <= half_ulp + m * DET_F64_OF_HADAMARD_PER_ROW * had), (got, exact)


def test_det_of_scaled_matrices_keeps_its_range(tmp_path, rng):
    """Entries of 1e4 and of 1e-4 in 7 x 7 matrices: |det| near 1e28 and 1e-28, whose pivots'
    running product stays in range; onnxruntime agrees relative to Hadamard's bound."""
    model = _det_model((2, 7, 7))
    sess = onnx_session(tmp_path, model, {})
    x = rng.standard_normal((2, 7, 7)).astype(F32)
    x[0] *= 1e4
    x[1] *= 1e-4
    got, ref = sess.run({"x": x})["y"], ort_run(model, {"x": x})["y"]
    assert np.all(np.isfinite(got)) and np.all(got != 0)
    assert np.all(np.abs(got.astype(F64) - ref) <= DET_ORT_OF_HADAMARD * _hadamard(x))


def test_det_whose_pivots_overflow_float64_midway(tmp_path, rng):
    """22 x 22 matrices with eleven rows of 1e30 and eleven of 1e-30 (diagonal, the order
    reversed, and mixed by an orthogonal matrix): the running product of the pivots would pass
    double's range halfway (1e330, or 1e-330), while |det| is about 1. nerve keeps the
    product's exponent apart and gives the determinant; onnxruntime's float32 product
    overflows here (inf, 0, -inf), so the reference is numpy's float64 det (from a log-sum)."""
    d = np.array([1e30] * 11 + [1e-30] * 11, F32)
    q = np.linalg.qr(rng.standard_normal((22, 22)))[0]
    x = np.stack([np.diag(d), np.diag(d[::-1]), np.diag(d) @ q]).astype(F32)
    got = onnx_session(tmp_path, _det_model(x.shape), {}).run({"x": x})["y"]
    want = np.linalg.det(x.astype(F64))
    assert np.all(np.abs(want) > 0.5) and np.all(np.abs(want) < 2)
    # numpy's log-sum is off by about 2^-52 of the sum of |log pivot| (1500 here): 3e-13
    assert np.all(np.abs(got - want) <= 0.5 * np.spacing(np.abs(got)).astype(F64) + 1e-12 * np.abs(want)), (got, want)


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 2, 2)], ids=str)
def test_det_of_empty_matrices_and_batches(tmp_path, shape):
    """A 0 x 0 matrix's determinant is 1 (the empty product), as onnxruntime gives; an empty
    batch gives an empty result."""
    model = _det_model(shape)
    x = np.zeros(shape, F32)
    got, ref = onnx_session(tmp_path, model, {}).run({"x": x})["y"], ort_run(model, {"x": x})["y"]
    assert got.shape == ref.shape == shape[:-2]
    np.testing.assert_array_equal(got, ref)
    if shape[-1] == 0:
        assert np.all(got == 1)


def test_det_singular_nan_and_inf_as_onnxruntime(tmp_path):
    """Singular matrices give an exact zero with onnxruntime's sign (a row exchange makes it
    -0: [[1, 2], [2, 4]]); a NaN gives NaN; an infinite pivot gives inf."""
    mats = np.array([[[1, 2], [2, 4]], [[2, 4], [1, 2]], [[0, 0], [0, 0]], [[np.nan, 2], [2, 4]],
                     [[0, 2], [np.nan, 4]], [[np.inf, 2], [2, 4]], [[3, -1], [5, 2]]], F32)
    model = _det_model(mats.shape)
    got, ref = onnx_session(tmp_path, model, {}).run({"x": mats})["y"], ort_run(model, {"x": mats})["y"]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
    assert got[-1] == 11 and np.signbit(got[0]) and not np.signbit(got[1])


def test_det_of_repeated_rows_is_exactly_zero(tmp_path, rng):
    """A 5 x 5 matrix with a row repeated: the elimination cancels it exactly."""
    x = rng.standard_normal((4, 5, 5)).astype(F32)
    x[:, 3] = x[:, 1]
    model = _det_model(x.shape)
    got, ref = onnx_session(tmp_path, model, {}).run({"x": x})["y"], ort_run(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, 0)
    np.testing.assert_array_equal(ref, 0)


def test_det_symbolic_batch(tmp_path, rng):
    model = _one_node("Det", [("x", T.FLOAT, ["b", 4, 4])], T.FLOAT, 22)
    sess = onnx_session(tmp_path, model, {"b": 6})
    for b in (6, 1, 0, 4):
        x = rng.standard_normal((b, 4, 4)).astype(F32)
        got, ref = sess.run({"x": x})["y"], ort_run(model, {"x": x})["y"]
        assert got.shape == (b,)
        assert np.all(np.abs(got.astype(F64) - ref) <= DET_ORT_OF_HADAMARD * _hadamard(x))


def test_det_float16(tmp_path, rng):
    """float16 matrices are widened exactly, the determinant rounded to float32 and then to the
    declared float16 output. Measured over 1000 seeds (3 x 3, also 2 x 2, 7 x 7, 13 x 13):
    |nerve - onnxruntime| at most 2.8e-4 of the Hadamard bound (about half a float16 step of
    |det|), held to 1e-3; and in each of those 14,000 values nerve equals the float64
    determinant rounded to float32 then float16."""
    x = rng.standard_normal((5, 3, 3)).astype(F16)
    model = _det_model(x.shape, T.FLOAT16)
    got, ref = onnx_session(tmp_path, model, {}).run({"x": x})["y"], ort_run(model, {"x": x})["y"]
    assert got.dtype == ref.dtype == F16
    assert np.all(np.abs(got.astype(F64) - ref.astype(F64)) <= 1e-3 * _hadamard(x))
    np.testing.assert_array_equal(got, np.linalg.det(x.astype(F64)).astype(F32).astype(F16))


def test_det_of_a_constant_is_folded(tmp_path, rng):
    """Det of an initializer runs once at compile time (no det op in the plan)."""
    c = rng.standard_normal((3, 4, 4)).astype(F32)
    model = make_model([h.make_node("Det", ["c"], ["d"]), h.make_node("Add", ["x", "d"], ["y"])],
                       [("x", T.FLOAT, [3])], [("d", T.FLOAT), ("y", T.FLOAT)], {"c": c}, 22)
    sess = onnx_session(tmp_path, model, {})
    assert "det" not in op_types(sess)
    x = rng.standard_normal(3).astype(F32)
    got, ref = sess.run({"x": x}), ort_run(model, {"x": x})
    assert np.all(np.abs(got["d"].astype(F64) - ref["d"]) <= DET_ORT_OF_HADAMARD * _hadamard(c))
    np.testing.assert_array_equal(got["y"], x + got["d"])


@pytest.mark.parametrize("shape, why", [((3,), "rank 2 or more"), ((2, 3), "square"),
                                        ((4, 3, 5), "square")])
def test_det_bad_shapes_fail_to_compile(tmp_path, shape, why):
    with pytest.raises(nerve.ModelError, match=f"the_node.*Det.*{why}"):
        onnx_session(tmp_path, _det_model(shape), {})


def test_det_of_a_float64_input_is_refused(tmp_path):
    with pytest.raises(nerve.ModelError, match="the_node.*float64"):
        onnx_session(tmp_path, _det_model((2, 2), T.DOUBLE), {})


# ------------------------------------------------------------------------------- BitCast

def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize > 1 else a.view(np.uint8)


def _special(dt, shape, rng):
    """Values of dtype dt with the bit patterns that must pass unchanged: NaNs with payloads,
    signalling NaN, -0, infinities, subnormals; random bits elsewhere."""
    size = int(np.prod(shape))
    raw = rng.integers(0, 256, size * np.dtype(dt).itemsize, dtype=np.uint8).view(dt) if dt != np.bool_ \
        else rng.integers(0, 2, size).astype(np.bool_)
    raw = raw.copy()
    if np.dtype(dt) == F32:
        special = np.array([0x7FC00001, 0x7F800001, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF],
                           np.uint32).view(F32)
    elif np.dtype(dt) == F64:
        special = np.array([0x7FF8000000000001, 0x7FF0000000000001, 0x8000000000000000, 0x0000000000000001,
                            0x7FF0000000000000], np.uint64).view(F64)
    else:
        special = raw[:0]
    n = min(len(special), size)
    raw[:n] = special[:n]
    return raw.reshape(shape)


BITCASTS = [(F32, np.int32), (np.int32, F32), (np.int64, F64), (F64, np.int64), (np.uint8, np.int8),
            (np.int8, np.uint8), (np.bool_, np.uint8), (np.uint8, np.bool_)]


def _onnx_type(dt):
    return int(h.np_dtype_to_tensor_dtype(np.dtype(dt)))


@pytest.mark.parametrize("src, dst", BITCASTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (7,), (3, 13)], ids=str)
def test_bitcast_matches_the_onnx_reference(tmp_path, rng, src, dst, shape):
    model = _one_node("BitCast", [("x", _onnx_type(src), list(shape))], _onnx_type(dst), 26, to=_onnx_type(dst))
    x = _special(src, shape, rng)
    if np.dtype(dst) == np.bool_:
        x = (x & 1).astype(src)  # a bool's byte is 0 or 1 for numpy's comparisons below
    sess = onnx_session(tmp_path, model, {})
    assert "bitcast" in op_types(sess)
    got = sess.run({"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype == np.dtype(dst) and got.shape == want.shape == shape
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(got), _bits(x))


def test_bitcast_round_trip_through_float64_keeps_the_bits(tmp_path, rng):
    """int64 -> float64 -> int64 at run time: the float64 between (a value nerve would read as
    float32 in arithmetic) reaches the second BitCast with its bits; and a float64 output
    keeps them too (doubles far outside float32's range, NaN payloads, subnormals)."""
    x = rng.integers(-2 ** 63, 2 ** 63 - 1, (4, 5), dtype=np.int64)
    x.reshape(-1)[:3] = np.array([0x7FF8000000000001, 0x0000000000000001, 0x7FEFFFFFFFFFFFFF], np.uint64).view(np.int64)
    model = make_model([h.make_node("BitCast", ["x"], ["d"], to=T.DOUBLE),
                        h.make_node("BitCast", ["d"], ["y"], to=T.INT64)],
                       [("x", T.INT64, [4, 5])], [("d", T.DOUBLE), ("y", T.INT64)], {}, 26)
    out = onnx_session(tmp_path, model, {}).run({"x": x})
    np.testing.assert_array_equal(out["y"], x)
    assert out["d"].dtype == F64
    np.testing.assert_array_equal(_bits(out["d"]), _bits(x))


def test_bitcast_of_a_float16_input(tmp_path, rng):
    """nerve reads a float16 input widened to float32 for arithmetic; BitCast sees its own
    16 bits (to float16 itself: the only 16-bit dtype a plan holds)."""
    x = rng.standard_normal(9).astype(F16)
    model = _one_node("BitCast", [("x", T.FLOAT16, [9])], T.FLOAT16, 26, to=T.FLOAT16)
    got = onnx_session(tmp_path, model, {}).run({"x": x})["y"]
    assert got.dtype == F16
    np.testing.assert_array_equal(_bits(got), _bits(x))


@pytest.mark.parametrize("src, dst", [(np.int32, F32), (np.int64, F64), (np.uint8, np.int8)],
                         ids=lambda d: np.dtype(d).name)
def test_bitcast_of_a_constant_is_folded(tmp_path, rng, src, dst):
    """Folded at compile time (no bitcast op in the plan), the bits kept: a float64 result too,
    which nerve's float64 constants would otherwise round to float32."""
    c = _special(src, (6,), rng)
    if np.dtype(dst) == F64:
        c[:2] = np.array([0x7FEFFFFFFFFFFFFF, 0x0000000000000003], np.uint64).view(np.int64)
    model = _one_node("BitCast", [], _onnx_type(dst), 26, inits={"c": c}, to=_onnx_type(dst))
    sess = onnx_session(tmp_path, model, {})
    assert "bitcast" not in op_types(sess)
    got = sess.run({})["y"]
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(_bits(got), _bits(c))


def test_bitcast_in_place_after_arithmetic(tmp_path, rng):
    """The bitcast may take its input's bytes when that input dies there: Neg's result,
    reinterpreted, then compared with numpy's bits of -x."""
    x = rng.standard_normal((5, 7)).astype(F32)
    model = make_model([h.make_node("Neg", ["x"], ["n"]), h.make_node("BitCast", ["n"], ["y"], to=T.INT32)],
                       [("x", T.FLOAT, [5, 7])], [("y", T.INT32)], {}, 26)
    got = onnx_session(tmp_path, model, {}).run({"x": x})["y"]
    np.testing.assert_array_equal(got, (-x).view(np.int32))


@pytest.mark.parametrize("src, dst", [(T.FLOAT, T.INT64), (T.INT64, T.INT32), (T.UINT8, T.FLOAT)])
def test_bitcast_between_widths_fails_to_compile(tmp_path, src, dst):
    model = _one_node("BitCast", [("x", src, [4])], dst, 26, to=dst)
    with pytest.raises(nerve.ModelError, match=r"the_node.*BitCast.*bit widths must be equal"):
        onnx_session(tmp_path, model, {})


def test_bitcast_to_a_dtype_nerve_does_not_hold_fails_to_compile(tmp_path):
    model = _one_node("BitCast", [("x", T.FLOAT16, [4])], T.INT16, 26, to=T.INT16)
    with pytest.raises(nerve.ModelError, match=r"the_node.*int16 is not supported"):
        onnx_session(tmp_path, model, {})


# ------------------------------------------------------------------------------- MaxRoiPool

def _roi_model(x_shape, pooled, scale=None, rois_dim="num_rois"):
    attrs = {"pooled_shape": list(pooled)}
    if scale is not None:
        attrs["spatial_scale"] = scale
    return _one_node("MaxRoiPool", [("x", T.FLOAT, list(x_shape)), ("rois", T.FLOAT, [rois_dim, 5])], T.FLOAT, 21,
                     **attrs)


def _rois(rng, n, batch, h_, w_, scale):
    """n rois over a batch of `batch` feature maps h_ x w_, in image coordinates (feature map
    pixel / scale), cycling through kinds: inside, crossing the border, touching it (corners
    exactly on the first and last pixel), one pixel, reversed corners, corners on the .5 ties
    of the rounding, wholly outside; batch indices with a fraction (truncated)."""
    hs, ws = h_ / scale, w_ / scale
    out = np.zeros((n, 5), F32)
    for i in range(n):
        kind = i % 7
        if kind == 0:
            x1, y1 = rng.uniform(0, 0.6 * ws), rng.uniform(0, 0.6 * hs)
            x2, y2 = x1 + rng.uniform(0, 0.4 * ws), y1 + rng.uniform(0, 0.4 * hs)
        elif kind == 1:
            x1, y1 = rng.uniform(-0.5 * ws, 0.2 * ws), rng.uniform(-0.5 * hs, 0.2 * hs)
            x2, y2 = rng.uniform(0.8 * ws, 1.5 * ws), rng.uniform(0.8 * hs, 1.5 * hs)
        elif kind == 2:
            x1, y1, x2, y2 = 0.0, 0.0, (w_ - 1) / scale, (h_ - 1) / scale
        elif kind == 3:
            x1, y1 = rng.uniform(-1, ws + 1), rng.uniform(-1, hs + 1)
            x2, y2 = x1, y1
        elif kind == 4:
            x2, y2 = rng.uniform(0, 0.5 * ws), rng.uniform(0, 0.5 * hs)
            x1, y1 = x2 + rng.uniform(1, 0.5 * ws + 1), y2 + rng.uniform(1, 0.5 * hs + 1)
        elif kind == 5:
            x1, x2 = sorted((rng.integers(-2, w_ + 2, 2) + 0.5) / scale)
            y1, y2 = sorted((rng.integers(-2, h_ + 2, 2) + 0.5) / scale)
        else:
            x1, y1 = ws + rng.uniform(2, 5) / scale, rng.uniform(0, hs)
            x2, y2 = x1 + rng.uniform(0, 3) / scale, y1 + rng.uniform(0, 3) / scale
        out[i] = [rng.integers(0, batch) + rng.uniform(0, 0.99), x1, y1, x2, y2]
    return out


def _assert_same(got, ref):
    """Bit for bit: the op selects values of x (or writes 0), it computes none."""
    assert got.dtype == ref.dtype == F32 and got.shape == ref.shape
    np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("pooled", [(1, 1), (2, 3), (7, 7), (3, 1)], ids=str)
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.0625, 0.3])
def test_max_roi_pool_matches_onnxruntime(tmp_path, rng, pooled, scale):
    x_shape = (3, 4, 13, 9)
    model = _roi_model(x_shape, pooled, scale)
    sess = onnx_session(tmp_path, model, {"num_rois": 40})
    assert "max_roi_pool" in op_types(sess)
    for n in (40, 1, 17):
        x = rng.standard_normal(x_shape).astype(F32)
        rois = _rois(rng, n, x_shape[0], x_shape[2], x_shape[3], scale)
        got = sess.run({"x": x, "rois": rois})["y"]
        ref = ort_run(model, {"x": x, "rois": rois})["y"]
        assert got.shape == (n, x_shape[1]) + tuple(pooled)
        _assert_same(got, ref)


def test_max_roi_pool_default_scale_and_more_bins_than_pixels(tmp_path, rng):
    """spatial_scale absent (1.0); 6 x 5 bins over a 2 x 3 image: bins overlap and repeat
    pixels; a one-image batch; a static num_rois."""
    x = rng.standard_normal((1, 2, 2, 3)).astype(F32)
    rois = np.array([[0, 0, 0, 2, 1], [0, -1, -1, 5, 5], [0, 1, 1, 1, 1]], F32)
    model = _roi_model(x.shape, (6, 5), rois_dim=3)
    got, ref = onnx_session(tmp_path, model, {}).run({"x": x, "rois": rois})["y"], \
        ort_run(model, {"x": x, "rois": rois})["y"]
    _assert_same(got, ref)


def test_max_roi_pool_empty_bins_negative_values_and_nan(tmp_path, rng):
    """A roi wholly outside the image: every bin empty, 0. All-negative bins give their max
    (not 0), -inf bins onnxruntime's start value -FLT_MAX, and a NaN in a bin is the result
    only when no number follows it in row-major order, as onnxruntime's std::max makes it."""
    x = -np.abs(rng.standard_normal((2, 3, 6, 6))).astype(F32) - 1
    x[0, 0, :3, :3] = -np.inf
    x[1, 1].reshape(-1)[rng.choice(36, 8, replace=False)] = np.nan
    x[1, 2, 2, 2] = np.nan  # the last pixel of the first 3 x 3 bin
    rois = np.array([[0, 0, 0, 5, 5], [1, 0, 0, 5, 5], [1, 20, 20, 30, 30], [0, -9, -9, -2, -2],
                     [1.7, 2, 2, 2, 2]], F32)
    model = _roi_model(x.shape, (2, 2))
    got = onnx_session(tmp_path, model, {"num_rois": 5}).run({"x": x, "rois": rois})["y"]
    ref = ort_run(model, {"x": x, "rois": rois})["y"]
    _assert_same(got, ref)
    assert np.all(got[2:4] == 0) and got[0, 0, 0, 0] == -np.finfo(F32).max
    assert np.isnan(got[1, 2, 0, 0]) and np.all(got[0, 1:] < 0)


def test_max_roi_pool_no_rois(tmp_path, rng):
    x = rng.standard_normal((2, 3, 5, 5)).astype(F32)
    model = _roi_model(x.shape, (2, 2))
    rois = np.zeros((0, 5), F32)
    got = onnx_session(tmp_path, model, {"num_rois": 4}).run({"x": x, "rois": rois})["y"]
    _assert_same(got, ort_run(model, {"x": x, "rois": rois})["y"])


@pytest.mark.parametrize("bad", [2.0, -1.0, 7.5, float("nan")])
def test_max_roi_pool_batch_index_out_of_range_is_an_input_error(tmp_path, rng, bad):
    """A batch index whose truncation is outside [0, N): NRV_ERR_INDEX naming the roi and the
    value (onnxruntime fails too); the session survives and runs the next feed."""
    x = rng.standard_normal((2, 3, 8, 8)).astype(F32)
    model = _roi_model(x.shape, (2, 2))
    sess = onnx_session(tmp_path, model, {"num_rois": 4})
    rois = np.array([[0, 0, 0, 4, 4], [1.5, 1, 1, 6, 6], [1, 2, 2, 3, 3]], F32)
    rois[2, 0] = bad
    with pytest.raises(nerve.InputError, match=r"rois\[2\] has batch index (nan|-?[0-9.]+), outside \[0, 2\)") as e:
        sess.run({"x": x, "rois": rois})
    assert e.value.status_name == "NRV_ERR_INDEX"
    with pytest.raises(Exception):
        ort_run(model, {"x": x, "rois": rois})
    for valid in (0.99, -0.5, 1.99):  # truncated toward zero: 0, 0, 1
        rois[2, 0] = valid
        _assert_same(sess.run({"x": x, "rois": rois})["y"], ort_run(model, {"x": x, "rois": rois})["y"])


def test_max_roi_pool_nan_corner_is_an_input_error(tmp_path, rng):
    x = rng.standard_normal((1, 1, 4, 4)).astype(F32)
    sess = onnx_session(tmp_path, _roi_model(x.shape, (2, 2)), {"num_rois": 2})
    with pytest.raises(nerve.InputError, match=r"rois\[1\] has y2 = nan"):
        sess.run({"x": x, "rois": np.array([[0, 0, 0, 1, 1], [0, 0, 0, 1, np.nan]], F32)})


@pytest.mark.parametrize("attrs, why", [
    ({}, "pooled_shape"), ({"pooled_shape": [2]}, "pooled_shape"), ({"pooled_shape": [2, 0]}, "pooled_shape"),
    ({"pooled_shape": [2, 2], "spatial_scale": 0.0}, "spatial_scale"),
    ({"pooled_shape": [2, 2], "spatial_scale": -1.0}, "spatial_scale"),
])
def test_max_roi_pool_bad_attributes_fail_to_compile(tmp_path, attrs, why):
    model = _one_node("MaxRoiPool", [("x", T.FLOAT, [1, 1, 4, 4]), ("rois", T.FLOAT, [2, 5])], T.FLOAT, 21, **attrs)
    with pytest.raises(nerve.ModelError, match=f"the_node.*MaxRoiPool.*{why}"):
        onnx_session(tmp_path, model, {})


def test_max_roi_pool_bad_shapes_fail_to_compile(tmp_path):
    for x_shape, r_shape, why in (([1, 4, 4], [2, 5], r"X must be \[N, C, H, W\]"),
                                  ([1, 1, 4, 4], [2, 4], r"rois must be \[num_rois, 5\]")):
        model = _one_node("MaxRoiPool", [("x", T.FLOAT, x_shape), ("rois", T.FLOAT, r_shape)], T.FLOAT, 21,
                          pooled_shape=[2, 2])
        with pytest.raises(nerve.ModelError, match=f"the_node.*{why}"):
            onnx_session(tmp_path, model, {})
