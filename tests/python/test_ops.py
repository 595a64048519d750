"""Every op, every variant this CPU can run, against float64 numpy references on fresh
random inputs at awkward sizes. Tolerances follow the dtype: float32 results within ~1e-5
relative, plus an absolute term for reductions that grows with sqrt(K) (K = length of the
reduction) times the float32 unit roundoff times the magnitude of the summed terms."""

import math
import threading

import numpy as np
import pytest

import nerve
from helpers import SIZES, U32, assert_within, forced, op_variant_params, variant_params
from nerve import kernels, ops

F32 = np.float32
RTOL = 1e-5
# Every op of the dispatch table must be exercised by a test below (linear_w8: by
# test_linear_w8.py, through sessions, under every variant; linear_w8a8: by
# test_linear_w8a8.py, through sessions compiled with NERVE_W8A8=1, under every variant, and
# natively by tests/native/test_linear_w8a8.c).
COVERED_OPS = {
    "embedding", "embedding_f16", "embedding_q8", "layernorm", "linear", "layernorm_linear", "gemm",
    "gelu", "gelu_tanh", "relu", "sigmoid", "tanh", "softmax", "linear_w8", "linear_w8a8",
    "linear_w4a32", "linear_w4a8",  # every variant: tests/python/test_quant_w4.py
    "linear_f16",  # every variant: tests/python/test_linear_f16.py, natively tests/native/test_linear_f16.c
    "depthwise",  # every variant: test_depthwise_conv below (through a session), natively test_kernels.c
    "depthwise_channels",  # every variant: test_depthwise_conv_channel_vectors below, natively test_kernels.c
    "depthwise_rows",  # every variant: test_depthwise_conv_rows below, natively test_kernels.c
    "hard_swish", "silu",  # every variant: test_hard_swish_and_silu below (through sessions), natively test_kernels.c
    "matmul_integer",  # every variant: test_contrib_ops.py::test_matmul_integer_every_variant, natively test_kernels.c
    "quantize",  # every variant: test_import_quant.py::test_fake_quant_every_variant, natively test_kernels.c
    "requant",  # every variant: test_qoperator_models.py::test_qlinear_conv_every_requant_variant, natively test_kernels.c
    "maxpool",  # every variant: test_max_pool_every_variant below (through sessions), natively test_kernels.c
    "linear_attention",  # every variant: test_onnx_ops_stream.py::test_linear_attention_every_variant_matches_onnxruntime,
                         # natively test_kernels.c
    "depthwise_q8",  # every variant: test_qoperator_models.py::test_qlinear_depthwise_conv_on_wide_rows_is_onnxruntime,
                     # natively test_kernels.c
}


def rotate(i, by):
    return SIZES[(i + by) % len(SIZES)]


def test_every_op_of_the_dispatch_table_is_covered():
    assert set(kernels.ops()) <= COVERED_OPS, f"ops without a variant test: {set(kernels.ops()) - COVERED_OPS}"
    for op in kernels.ops():
        names = kernels.variants(op)
        assert names and names[-1] == "ref", f"{op}: the reference must be the last variant, got {names}"
        assert "ref" in kernels.runnable_variants(op)


# ------------------------------------------------------------------------- embedding

def _ids(rng, rows, n, dtype):
    ids = rng.integers(0, rows, n).astype(dtype)
    ids[0] = rows - 1  # both ends of the table
    ids[-1] = 0 if n > 1 else ids[-1]
    return ids


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dim", SIZES)
@pytest.mark.parametrize("variant", variant_params("embedding"))
def test_embedding_f32(variant, dim, id_dtype, rng):
    rows = 301
    table = rng.standard_normal((rows, dim), dtype=F32)
    ids = _ids(rng, rows, rotate(SIZES.index(dim), 3), id_dtype)
    with forced("embedding", variant):
        got = ops.embedding(table, ids)
    assert got.dtype == F32 and got.shape == (ids.size, dim)
    # a gather is exact: bit for bit
    np.testing.assert_array_equal(got.view(np.uint32), table[ids].view(np.uint32))


@pytest.mark.parametrize("dim", SIZES)
@pytest.mark.parametrize("variant", variant_params("embedding_f16"))
def test_embedding_f16_every_bit_pattern(variant, dim, rng):
    # Random bit patterns: normals, subnormals, +-0, +-inf and NaNs all show up.
    rows = 257
    table = rng.integers(0, 1 << 16, (rows, dim), dtype=np.uint16).view(np.float16)
    table[0, 0], table[-1, -1] = np.float16(6e-8), np.float16(-0.0)  # smallest subnormal, -0
    ids = _ids(rng, rows, rotate(SIZES.index(dim), 2), np.int64)
    with forced("embedding_f16", variant):
        got = ops.embedding(table, ids)
    expected = table[ids].astype(F32)  # numpy's conversion is exact
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


@pytest.mark.parametrize("dim", SIZES)
@pytest.mark.parametrize("variant", variant_params("embedding_q8"))
def test_embedding_q8(variant, dim, rng):
    rows = 199
    table = rng.integers(-128, 128, (rows, dim), dtype=np.int8)
    scales = (rng.random(rows, dtype=F32) * 0.05 + 1e-4).astype(F32)
    ids = _ids(rng, rows, rotate(SIZES.index(dim), 4), np.int32)
    with forced("embedding_q8", variant):
        got = ops.embedding(table, ids, row_scales=scales)
    ref = table[ids].astype(np.float64) * scales[ids].astype(np.float64)[..., None]
    # q * scale is one rounding in float32: within one ulp.
    assert_within(got, ref, 2 * U32 * np.abs(ref), "embedding_q8")


@pytest.mark.parametrize(
    "ids_shape", [(), (0,), (5,), (2, 3), (4, 0, 2), (2, 1, 3)], ids=lambda s: "x".join(map(str, s)) or "0d"
)
def test_embedding_ids_of_any_shape(ids_shape, rng):
    table = rng.standard_normal((11, 7), dtype=F32)
    ids = rng.integers(0, 11, ids_shape)
    got = ops.embedding(table, ids)
    assert got.shape == ids_shape + (7,)
    np.testing.assert_array_equal(got, table[ids])
    out = np.full(ids_shape + (7,), np.nan, F32)
    assert ops.embedding(table, ids.astype(np.int32), out=out) is out
    np.testing.assert_array_equal(out, table[ids])


def test_embedding_python_ints_and_lists(rng):
    table = rng.standard_normal((5, 3), dtype=F32)
    np.testing.assert_array_equal(ops.embedding(table, 4), table[4])
    np.testing.assert_array_equal(ops.embedding(table, [[0, 4], [2, 2]]), table[[[0, 4], [2, 2]]])
    assert ops.embedding(table, []).shape == (0, 3)


# ------------------------------------------------------------------------- layernorm

def layernorm_ref(x, gamma, beta, eps):
    """float64 layernorm and a per-element magnitude for the error bound."""
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    g = gamma.astype(np.float64)
    b = np.zeros_like(g) if beta is None else beta.astype(np.float64)
    y = (x - mean) * rstd * g + b
    # The computed mean's rounding error scales with the row's mean |x| (a sum's forward
    # error bound), not with |mean|, which cancellation can make arbitrarily small.
    scale = (np.abs(x) + np.abs(x).mean(-1, keepdims=True)) * rstd * np.abs(g) + np.abs(b)
    return y, scale


@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "no-beta"])
@pytest.mark.parametrize("dim", SIZES)
@pytest.mark.parametrize("variant", variant_params("layernorm"))
def test_layernorm(variant, dim, with_beta, rng):
    rows = rotate(SIZES.index(dim), 2)
    x = (rng.standard_normal((rows, dim)) * 2 + 0.5).astype(F32)
    gamma = rng.standard_normal(dim, dtype=F32)
    beta = rng.standard_normal(dim, dtype=F32) if with_beta else None
    with forced("layernorm", variant):
        got = ops.layernorm(x, gamma, beta, eps=1e-5)
    ref, scale = layernorm_ref(x, gamma, beta, 1e-5)
    assert_within(got, ref, RTOL * np.abs(ref) + 8 * math.sqrt(dim) * U32 * scale, "layernorm")


@pytest.mark.parametrize("variant", variant_params("layernorm"))
def test_layernorm_any_rank_and_in_place(variant, rng):
    x = rng.standard_normal((2, 3, 4, 37), dtype=F32)
    gamma, beta = rng.standard_normal(37, dtype=F32), rng.standard_normal(37, dtype=F32)
    ref, scale = layernorm_ref(x, gamma, beta, 1e-3)
    tol = RTOL * np.abs(ref) + 8 * math.sqrt(37) * U32 * scale
    with forced("layernorm", variant):
        assert_within(ops.layernorm(x, gamma, beta, eps=1e-3), ref, tol, "rank 4")
        assert_within(ops.layernorm(x[1, 2, 3], gamma, beta, eps=1e-3), ref[1, 2, 3], tol[1, 2, 3], "rank 1")
        assert ops.layernorm(x, gamma, beta, eps=1e-3, out=x) is x  # y may equal x
    assert_within(x, ref, tol, "in place")


def test_layernorm_constant_rows_give_beta(rng):
    # var = 0: (x - mean) is exactly 0, so every output is beta, not NaN
    x = np.full((3, 50), 7.25, F32)
    gamma, beta = rng.standard_normal(50, dtype=F32), rng.standard_normal(50, dtype=F32)
    for variant in kernels.runnable_variants("layernorm"):
        with forced("layernorm", variant):
            np.testing.assert_allclose(ops.layernorm(x, gamma, beta, eps=0.0 + 1e-6), np.broadcast_to(beta, x.shape),
                                       rtol=1e-6, atol=1e-6, err_msg=variant)


# ------------------------------------------------------------------------- linear

LINEAR_SHAPES = [(SIZES[i], rotate(i, 3), rotate(i, 5)) for i in range(len(SIZES))]  # (rows, in, out)


def linear_ref(x, W, b):
    y = x.astype(np.float64) @ W.astype(np.float64).T
    mag = np.abs(x.astype(np.float64)) @ np.abs(W.astype(np.float64)).T
    if b is not None:
        y = y + b
        mag = mag + np.abs(b.astype(np.float64))
    return y, mag


@pytest.mark.parametrize("rows,n_in,n_out", LINEAR_SHAPES, ids=[f"{r}x{i}x{o}" for r, i, o in LINEAR_SHAPES])
@pytest.mark.parametrize("variant", variant_params("linear"))
def test_linear(variant, rows, n_in, n_out, rng):
    x = rng.standard_normal((rows, n_in), dtype=F32)
    W = rng.standard_normal((n_out, n_in), dtype=F32)
    b = rng.standard_normal(n_out, dtype=F32) if rows % 2 else None
    with forced("linear", variant):
        got = ops.linear(x, W, b)
    ref, mag = linear_ref(x, W, b)
    assert_within(got, ref, RTOL * np.abs(ref) + 8 * math.sqrt(n_in) * U32 * mag, "linear")


@pytest.mark.parametrize("variant", variant_params("linear"))
def test_linear_leading_axes(variant, rng):
    x = rng.standard_normal((2, 5, 33), dtype=F32)
    W, b = rng.standard_normal((19, 33), dtype=F32), rng.standard_normal(19, dtype=F32)
    ref, mag = linear_ref(x, W, b)
    tol = RTOL * np.abs(ref) + 8 * math.sqrt(33) * U32 * mag
    with forced("linear", variant):
        assert_within(ops.linear(x, W, b), ref, tol, "rank 3")
        assert_within(ops.linear(x[1, 4], W, b), ref[1, 4], tol[1, 4], "rank 1")
        out = np.empty((2, 5, 19), F32)
        assert ops.linear(x, W, b, out=out) is out
    assert_within(out, ref, tol, "out=")


@pytest.mark.parametrize("rows,n_in,n_out", LINEAR_SHAPES, ids=[f"{r}x{i}x{o}" for r, i, o in LINEAR_SHAPES])
@pytest.mark.parametrize("variant", variant_params("layernorm_linear"))
def test_layernorm_linear(variant, rows, n_in, n_out, rng):
    x = (rng.standard_normal((rows, n_in)) * 1.5 - 0.25).astype(F32)
    gamma, beta = rng.standard_normal(n_in, dtype=F32), rng.standard_normal(n_in, dtype=F32)
    if rows % 3 == 0:
        beta = None
    W = rng.standard_normal((n_out, n_in), dtype=F32)
    b = rng.standard_normal(n_out, dtype=F32) if rows % 2 else None
    with forced("layernorm_linear", variant):
        got = ops.layernorm_linear(x, gamma, beta, W, b, eps=1e-5)
    normed, scale = layernorm_ref(x, gamma, beta, 1e-5)
    ref = normed @ W.astype(np.float64).T + (0 if b is None else b)
    mag = scale @ np.abs(W.astype(np.float64)).T + (0 if b is None else np.abs(b))
    assert_within(got, ref, RTOL * np.abs(ref) + 16 * math.sqrt(n_in) * U32 * mag, "layernorm_linear")


def test_layernorm_linear_equals_the_two_step_path(rng):
    x = rng.standard_normal((4, 3, 64), dtype=F32)
    gamma, beta = rng.standard_normal(64, dtype=F32), rng.standard_normal(64, dtype=F32)
    W, b = rng.standard_normal((48, 64), dtype=F32), rng.standard_normal(48, dtype=F32)
    fused = ops.layernorm_linear(x, gamma, beta, W, b, eps=1e-4)
    two_step = ops.linear(ops.layernorm(x, gamma, beta, eps=1e-4), W, b)
    assert fused.shape == (4, 3, 48)
    np.testing.assert_allclose(fused, two_step, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------- gemm

GEMM_SHAPES = [(SIZES[i], rotate(i, 2), rotate(i, 4)) for i in range(len(SIZES))]  # (m, n, k)


def gemm_ref(a_op, b_op, alpha, beta, c):
    a64, b64 = a_op.astype(np.float64), b_op.astype(np.float64)
    ref = alpha * (a64 @ b64)
    mag = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c is not None and beta != 0:
        ref = ref + beta * c.astype(np.float64)
        mag = mag + abs(beta) * np.abs(c.astype(np.float64))
    return ref, mag


@pytest.mark.parametrize("trans_b", [False, True], ids=["B", "Bt"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["A", "At"])
@pytest.mark.parametrize("m,n,k", GEMM_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in GEMM_SHAPES])
@pytest.mark.parametrize("variant", variant_params("gemm"))
def test_gemm(variant, m, n, k, trans_a, trans_b, rng):
    # Stored (C-contiguous) matrices; the kernel sees them through the transpose flags.
    a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=F32)
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=F32)
    c = rng.standard_normal((m, n), dtype=F32)
    alpha, beta = 0.75, -0.5
    with forced("gemm", variant):
        got = ops.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    ref, mag = gemm_ref(a.T if trans_a else a, b.T if trans_b else b, alpha, beta, c)
    assert_within(got, ref, RTOL * np.abs(ref) + 8 * math.sqrt(k) * U32 * mag, "gemm")


@pytest.mark.parametrize("variant", variant_params("gemm"))
def test_gemm_beta_zero_ignores_nan_in_c(variant, rng):
    a, b = rng.standard_normal((13, 7), dtype=F32), rng.standard_normal((7, 9), dtype=F32)
    c = np.full((13, 9), np.nan, F32)
    with forced("gemm", variant):
        got = ops.gemm(a, b, c, alpha=2.0, beta=0.0)
        out = np.full((13, 9), np.nan, F32)
        ops.gemm(a, b, out=out)  # no c at all: out's NaNs are not read either
    ref, mag = gemm_ref(a, b, 2.0, 0.0, None)
    assert_within(got, ref, RTOL * np.abs(ref) + 8 * math.sqrt(7) * U32 * mag, "beta=0")
    assert_within(out, ref / 2, RTOL * np.abs(ref) + 8 * math.sqrt(7) * U32 * mag, "c=None")


def _gemm_view_cases(rng):
    big_a = rng.standard_normal((40, 50), dtype=F32)
    big_b = rng.standard_normal((60, 40), dtype=F32)
    return {  # name: (a [17, 30], b [30, 23])
        "row-strided": (big_a[:17, 3:33], big_b[:30, 7:30]),
        "F-contiguous": (np.ascontiguousarray(big_a[:30, :17]).T, np.ascontiguousarray(big_b[:23, :30]).T),
        "transposed row-strided": (big_a[:30, :17].T, big_b[:23, :30].T),
        "arbitrary strides": (big_a[::2, ::3][:17, :10].repeat(3, axis=1)[:, :30], big_b[::2, ::-1][:30, :23]),
    }


@pytest.mark.parametrize("case", ["row-strided", "F-contiguous", "transposed row-strided", "arbitrary strides"])
def test_gemm_accepts_views(case, rng):
    a, b = _gemm_view_cases(rng)[case]
    assert a.shape == (17, 30) and b.shape == (30, 23)
    ref, mag = gemm_ref(a, b, 1.0, 0.0, None)
    tol = RTOL * np.abs(ref) + 8 * math.sqrt(30) * U32 * mag
    assert_within(ops.gemm(a, b), ref, tol, case)
    # the same views through the transpose flags: op(x) = x.T
    assert_within(ops.gemm(b, a, trans_a=True, trans_b=True).T, ref, tol, case + " through the flags")


def test_gemm_accumulates_in_place(rng):
    a, b = rng.standard_normal((17, 30), dtype=F32), rng.standard_normal((30, 23), dtype=F32)
    acc = rng.standard_normal((17, 23), dtype=F32)
    ref, mag = gemm_ref(a, b, 1.5, 1.0, acc)
    assert ops.gemm(a, b, acc, alpha=1.5, beta=1.0, out=acc) is acc  # c is out
    assert_within(acc, ref, RTOL * np.abs(ref) + 8 * math.sqrt(30) * U32 * mag, "c is out")
    c = rng.standard_normal((17, 23), dtype=F32)
    c_before = c.copy()
    out = np.empty((17, 23), F32)
    ops.gemm(a, b, c, beta=-1.0, out=out)  # c is read, never written
    np.testing.assert_array_equal(c, c_before)
    ref, mag = gemm_ref(a, b, 1.0, -1.0, c)
    assert_within(out, ref, RTOL * np.abs(ref) + 8 * math.sqrt(30) * U32 * mag, "c and out")


@pytest.mark.parametrize("m,n", [(1, 1), (3, 4), (17, 33)])
@pytest.mark.parametrize("variant", variant_params("gemm"))
def test_gemm_with_k_zero_is_beta_times_c(variant, m, n, rng):
    c = rng.standard_normal((m, n), dtype=F32)
    a, b = np.zeros((m, 0), F32), np.zeros((0, n), F32)
    with forced("gemm", variant):
        got = ops.gemm(a, b, c, alpha=1.0, beta=2.0)
        zeros = ops.gemm(a, b, np.full((m, n), np.nan, F32), beta=0.0)
    np.testing.assert_array_equal(got, 2 * c)  # one exact multiplication per element
    np.testing.assert_array_equal(zeros, np.zeros((m, n), F32))


# ------------------------------------------------------------------------- activations

def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


ACTIVATIONS = {
    # op name in the dispatch table: (python call, float64 reference)
    "relu": (lambda x, **kw: ops.relu(x, **kw), lambda x: np.maximum(x, 0.0)),
    "sigmoid": (lambda x, **kw: ops.sigmoid(x, **kw), lambda x: 1.0 / (1.0 + np.exp(-x))),
    "tanh": (lambda x, **kw: ops.tanh(x, **kw), np.tanh),
    "gelu": (lambda x, **kw: ops.gelu(x, **kw), lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))),
    "gelu_tanh": (
        lambda x, **kw: ops.gelu(x, approximate="tanh", **kw),
        lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    ),
}
SPECIALS = np.array(
    [0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 0.5, -0.5, 3.0, -3.0, 9.0, -9.0, 20.0, -20.0, 50.0, -50.0,
     88.0, -88.0, 100.0, -100.0, 1e4, -1e4, 3e38, -3e38], dtype=F32)


def _activation_tol(op, ref):
    if op == "relu":
        return np.zeros_like(ref)  # exact
    return RTOL * np.abs(ref) + 1e-6


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op,variant", op_variant_params(ACTIVATIONS))
def test_activation(op, variant, n, rng):
    call, ref_fn = ACTIVATIONS[op]
    x = (rng.standard_normal(n) * 4).astype(F32)
    with forced(op, variant):
        got = call(x)
    ref = ref_fn(x.astype(np.float64))
    assert got.shape == x.shape and got.dtype == F32
    assert_within(got, ref, _activation_tol(op, ref), op)


@pytest.mark.parametrize("op,variant", op_variant_params(ACTIVATIONS))
def test_activation_extreme_inputs_stay_finite(op, variant, rng):
    # Finite inputs must give finite, accurate outputs: no overflow to inf/inf = NaN.
    x = np.concatenate([SPECIALS, rng.permutation(np.tile(SPECIALS, 40))]).astype(F32)  # vector body and tail
    call, ref_fn = ACTIVATIONS[op]
    with forced(op, variant):
        got = call(x)
    with np.errstate(over="ignore"):
        ref = ref_fn(x.astype(np.float64))
    assert np.isfinite(got).all(), f"{op}/{variant}: non-finite output for {x[~np.isfinite(got)][:5]}"
    assert_within(got, ref, _activation_tol(op, ref), op)


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
def test_activation_any_shape_and_in_place(op, rng):
    call, ref_fn = ACTIVATIONS[op]
    for shape in [(), (0,), (4, 0), (2, 3, 5)]:
        x = rng.standard_normal(shape).astype(F32)
        ref = ref_fn(x.astype(np.float64))
        got = call(x)
        assert got.shape == shape
        assert_within(got, ref, _activation_tol(op, ref), f"{op} {shape}")
        assert call(x, out=x) is x  # y may equal x
        assert_within(x, ref, _activation_tol(op, ref), f"{op} {shape} in place")


# ------------------------------------------------------------------------- softmax

def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("offset", [0.0, 1e4, -1e4], ids=["centered", "plus1e4", "minus1e4"])
@pytest.mark.parametrize("dim", SIZES)
@pytest.mark.parametrize("variant", variant_params("softmax"))
def test_softmax(variant, dim, offset, rng):
    rows = rotate(SIZES.index(dim), 3)
    x = (rng.standard_normal((rows, dim)) * 5 + offset).astype(F32)
    with forced("softmax", variant):
        got = ops.softmax(x)
    ref = softmax_ref(x)
    assert_within(got, ref, (RTOL + 4 * math.sqrt(dim) * U32) * np.abs(ref) + 1e-12, "softmax")
    np.testing.assert_allclose(got.sum(-1, dtype=np.float64), 1.0, rtol=0, atol=1e-5)


def test_softmax_last_axis_of_any_rank_and_in_place(rng):
    x = rng.standard_normal((2, 3, 17), dtype=F32)
    ref = softmax_ref(x)
    assert_within(ops.softmax(x), ref, 1e-5 * ref + 1e-12, "rank 3")
    assert ops.softmax(x, out=x) is x
    assert_within(x, ref, 1e-5 * ref + 1e-12, "in place")


# ------------------------------------------------------------------------- threads

def test_kernels_and_error_messages_from_many_threads(rng):
    x = rng.standard_normal((64, 96), dtype=F32)
    W, b = rng.standard_normal((80, 96), dtype=F32), rng.standard_normal(80, dtype=F32)
    expected = ops.linear(x, W, b)
    table = rng.standard_normal((10, 4), dtype=F32)
    failures = []

    def worker(k):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(ops.linear(x, W, b), expected)
                try:
                    ops.embedding(table, [0, 1, 10 + k])
                except nerve.InputError as exc:
                    # the message is thread-local: it names this thread's own bad id
                    assert f"id[2] = {10 + k} " in str(exc), str(exc)
                else:
                    raise AssertionError("no error for an out-of-range id")
        except BaseException as exc:  # collected, re-raised in the main thread
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


# ------------------------------------------------------------------------- depthwise (through a session)

def _depthwise_case(c, size, kernel, stride, dil, rng):
    """A depthwise Conv model, its input and a float64 reference over the zero-padded input."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    pad = (kernel - 1) * dil // 2
    sh, sw = stride
    w = rng.standard_normal((c, 1, kernel, kernel)).astype(F32)
    b = rng.standard_normal(c).astype(F32)
    x = rng.standard_normal((1, c) + size).astype(F32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, pads=[pad] * 4, strides=[sh, sw],
                            dilations=[dil, dil])
    g = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (xp.shape[2] - dil * (kernel - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dil * (kernel - 1) - 1) // sw + 1
    want = np.zeros((1, c, oh, ow)) + b[None, :, None, None]
    for i in range(kernel):
        for j in range(kernel):
            want += w[None, :, 0, i, j, None, None] * xp[:, :, i * dil:i * dil + sh * (oh - 1) + 1:sh,
                                                          j * dil:j * dil + sw * (ow - 1) + 1:sw]
    return model, x, want, 1e-5 * np.abs(want) + 4 * kernel * np.finfo(F32).eps * 8


@pytest.mark.parametrize("variant", variant_params("depthwise"))
@pytest.mark.parametrize("size,kernel,stride,dil", [((56, 56), 7, (1, 1), 1), ((13, 97), 3, (1, 1), 1),
                                                     ((14, 14), 5, (2, 1), 1), ((9, 70), 3, (1, 1), 2),
                                                     ((1, 1), 3, (1, 1), 1), ((28, 29), 3, (2, 2), 1),
                                                     ((7, 7), 5, (2, 2), 1), ((13, 40), 3, (1, 2), 2)])
def test_depthwise_conv(variant, size, kernel, stride, dil, rng, tmp_path):
    """A depthwise Conv (the dispatched kernel "depthwise", stride-1 columns or a column
    stride of 2 over the plane's phase rows) under each variant against a float64 reference
    over the zero-padded input. (The shapes "depthwise_rows" takes run it, below: forced to
    its reference here, which op conv leaves to this path.)"""
    model, x, want, tol = _depthwise_case(5, size, kernel, stride, dil, rng)
    with forced("depthwise", variant), forced("depthwise_rows", "ref"):
        got = nerve.Session(model, cache=False).run({"x": x})["y"]
    assert_within(got, want, tol, "depthwise")


@pytest.mark.parametrize("variant", variant_params("depthwise_channels"))
@pytest.mark.parametrize("c,size,kernel,stride,dil", [(37, (7, 7), 3, (1, 1), 1), (16, (14, 14), 3, (2, 2), 1),
                                                      (5, (12, 9), 5, (1, 1), 1), (21, (10, 100), 3, (2, 2), 2),
                                                      (48, (1, 1), 3, (1, 1), 1), (9, (20, 16), 7, (1, 1), 1)])
def test_depthwise_conv_channel_vectors(variant, c, size, kernel, stride, dil, rng, tmp_path):
    """Depthwise convs with narrow outputs (the dispatched "depthwise_channels": vectors across
    channels, a partial block of them) under each variant against the float64 reference; the
    reference variant runs where the plane kernel is the reference too."""
    model, x, want, tol = _depthwise_case(c, size, kernel, stride, dil, rng)
    with forced("depthwise_channels", variant), forced("depthwise", "ref" if variant == "ref" else
                                                       nerve.kernels.selected("depthwise")), \
            forced("depthwise_rows", "ref"):
        got = nerve.Session(model, cache=False).run({"x": x})["y"]
    assert_within(got, want, tol, "depthwise_channels")


@pytest.mark.parametrize("variant", variant_params("depthwise_rows"))
@pytest.mark.parametrize("c,size,kernel,stride,dil", [(5, (112, 112), 3, (2, 2), 1), (3, (57, 57), 3, (1, 1), 1),
                                                      (17, (7, 7), 3, (1, 1), 1), (4, (29, 45), 5, (2, 2), 1),
                                                      (3, (56, 56), 7, (1, 1), 1), (6, (13, 20), 7, (2, 2), 1),
                                                      (2, (1, 33), 3, (1, 1), 1), (9, (14, 14), 5, (1, 1), 1),
                                                      (7, (20, 20), 5, (1, 1), 2), (3, (11, 37), 3, (1, 1), 2),
                                                      (2, (17, 23), 7, (1, 1), 2)])
def test_depthwise_conv_rows(variant, c, size, kernel, stride, dil, rng):
    """Depthwise convs the dispatched "depthwise_rows" takes (3x3, 5x5, 7x7; stride 1 or 2, or
    dilation 2 at stride 1; taps read straight from x with masked loads at the edges) under
    each variant against the float64 reference; the reference variant leaves them to the
    plane or channel path, whose bits an FMA variant must give (test_kernels.c)."""
    model, x, want, tol = _depthwise_case(c, size, kernel, stride, dil, rng)
    with forced("depthwise_rows", variant):
        got = nerve.Session(model, cache=False).run({"x": x})["y"]
    assert_within(got, want, tol, "depthwise_rows")


# ------------------------------------------------------------------------- hard_swish, silu (through a session)

@pytest.mark.parametrize("variant", variant_params("hard_swish"))  # silu has the same variants
@pytest.mark.parametrize("n", [1, 13, 127, 1025])
def test_hard_swish_and_silu(variant, n, rng):
    """The plan's HardSwish and its SiLU (Sigmoid then Mul, fused into one op) under each
    variant, against float64; hard_swish is the reference's arithmetic bit for bit, so every
    variant gives the same bits; the SiLU kernel equals the unfused Sigmoid and Mul."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = (rng.standard_normal((1, n)) * 6).astype(F32)
    x[0, :min(n, 4)] = [3.0, -3.0, 0.0, -0.0][:min(n, 4)]
    nodes = [helper.make_node("HardSwish", ["x"], ["hs"]), helper.make_node("Sigmoid", ["x"], ["sg"]),
             helper.make_node("Mul", ["x", "sg"], ["silu"])]
    g = helper.make_graph(nodes, "act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("hs", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("silu", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x64 = x.astype(np.float64)
    want_hs = x64 * np.clip(x64 * F32(1 / 6) + 0.5, 0.0, 1.0)
    want_silu = x64 / (1.0 + np.exp(-x64))
    assert kernels.variants("silu") == kernels.variants("hard_swish")
    with forced("hard_swish", variant), forced("silu", variant), forced("sigmoid", variant):
        got = nerve.Session(model, cache=False).run({"x": x})
        unfused = nerve.Session(model, cache=False, fuse=False).run({"x": x})
    # x·(1/6) + 1/2 rounds to float32 (an absolute error of ~ulp(1/2) in the clamp, times x)
    assert_within(got["hs"], want_hs, 1e-6 * np.abs(x64) + 1e-30, "hard_swish")
    assert_within(got["silu"], want_silu, 1e-5 * np.abs(want_silu) + 1e-30, "silu")
    np.testing.assert_array_equal(got["silu"], unfused["silu"])  # x · sigmoid(x) = what Sigmoid then Mul give
    with forced("hard_swish", "ref"):
        ref_hs = nerve.Session(model, cache=False).run({"x": x})["hs"]
    np.testing.assert_array_equal(got["hs"], ref_hs)


# ------------------------------------------------------------------------- maxpool (through a session)

def _max_pool_numpy(x, k, s, pads, out_hw):
    """Max over each window of x [N, C, H, W], positions outside the plane left out, as
    nerve's pools define it: the direct loop m = v > m ? v : m from the type's lowest, so a
    NaN never wins and a window of NaN or -inf only gives -FLT_MAX. (onnxruntime has no one
    rule there: its 1x2 and 1x3 pools disagree on such windows.)"""
    lowest = -np.finfo(F32).max if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), -np.inf, x)
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = k, s, pads[:2]
    y = np.empty((n, c) + out_hw, x.dtype)
    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            y0, x0 = oy * sh - ph, ox * sw - pw
            win = x[:, :, max(y0, 0):max(min(y0 + kh, h), 0), max(x0, 0):max(min(x0 + kw, w), 0)]
            y[:, :, oy, ox] = win.max(axis=(2, 3), initial=lowest)
    return y


@pytest.mark.parametrize("variant", variant_params("maxpool"))
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
@pytest.mark.parametrize("shape, k, s, pads, ceil", [
    ((1, 3, 111, 111), (3, 3), (2, 2), (0, 0, 0, 0), 1),     # SqueezeNet's pools (ceil_mode)
    ((2, 5, 28, 28), (3, 3), (1, 1), (1, 1, 1, 1), 0),       # Inception's stride-1 pools
    ((1, 4, 13, 97), (2, 2), (2, 2), (0, 0, 1, 1), 0),
    ((1, 2, 9, 127), (5, 5), (1, 1), (2, 2, 2, 2), 0),       # YOLO's SPPF
    ((1, 3, 27, 257), (3, 3), (3, 3), (1, 1, 1, 1), 1),
    ((1, 2, 7, 1025), (2, 3), (1, 2), (1, 0, 0, 2), 0),
])
def test_max_pool_every_variant(variant, dtype, shape, k, s, pads, ceil, rng):
    """MaxPool of float32 (with NaN and -inf among the values) and of uint8 / int8 codes
    (QOperator models pool codes) under each maxpool variant, through a session, against
    numpy, and equal to the band path that the reference variant selects."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    elem = {np.float32: TensorProto.FLOAT, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s), pads=list(pads),
                            ceil_mode=ceil)
    g = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    if dtype == np.float32:
        x = (rng.standard_normal(shape) * 3).astype(F32)
        x.flat[rng.integers(0, x.size, x.size // 13)] = np.nan
        x.flat[rng.integers(0, x.size, x.size // 29)] = -np.inf
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    with forced("maxpool", variant):
        got = nerve.Session(model, cache=False).run({"x": x})["y"]
    with forced("maxpool", "ref"):
        band = nerve.Session(model, cache=False).run({"x": x})["y"]
    rnd = math.ceil if ceil else math.floor
    out_hw = [int(rnd((shape[2 + i] + pads[i] + pads[2 + i] - k[i]) / s[i])) + 1 for i in range(2)]
    # ceil_mode drops a last window that would start past the input and its leading padding
    out_hw = tuple(o - 1 if (o - 1) * s[i] >= shape[2 + i] + pads[i] else o for i, o in enumerate(out_hw))
    want = _max_pool_numpy(x, k, s, pads, out_hw)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, band)  # the band path, which the reference variant selects
