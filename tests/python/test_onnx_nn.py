"""ONNX neural-network operators through the compiler (onnx_ops_nn.py) against onnxruntime:
pooling, global pooling, BatchNormalization (folded into a Conv or as channel_affine),
InstanceNormalization, LSTM and GRU, STFT (and the DFT-basis conv that becomes an FFT),
ConvTranspose, Resize/Upsample; and the clear failures for what is not supported."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402
from helpers import older_ort_differs  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def _model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs: [(name, shape)] float32 (shape entries may be dim_param strings); outputs: names.
    inits: [(name, array)]."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # onnx's shape inference disagrees with ORT on some ceil_mode shapes
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def check(tmp_path, model, feed_sets, dims=None, rtol=RTOL, atol=ATOL, reference=None):
    """Compiles model with nerve and compares every output with onnxruntime (or with
    reference(feeds) -> {name: array} when given), for each feeds dict in feed_sets (several:
    runs at different sizes of the symbolic dims). Returns the session."""
    if isinstance(feed_sets, dict):
        feed_sets = [feed_sets]
    sess = nerve.Session(_save(tmp_path, model), dims=dims, cache=False)
    for feeds in feed_sets:
        got = sess.run(feeds)
        want = reference(feeds) if reference is not None else _ort(model, feeds)
        assert set(got) == set(want)
        for name, ref in want.items():
            assert got[name].shape == ref.shape, (name, got[name].shape, ref.shape)
            np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol, err_msg=name)
    return sess


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- pooling

def _ceil_average_needs_verified_ort(op, attrs):
    if op == "AveragePool" and attrs.get("ceil_mode") and attrs.get("count_include_pad"):
        older_ort_differs("with count_include_pad=1 it divides an AveragePool window that ceil_mode extends "
                          "past the padding by another count than the window's input and padding elements")


POOL_CASES = [
    # (op, input shape, attrs, opset)
    ("MaxPool", (2, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 2, 1]), 17),
    ("MaxPool", (1, 5, 7, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 2], ceil_mode=1), 17),
    ("MaxPool", (1, 3, 13, 7), dict(kernel_shape=[2, 3], dilations=[2, 3], strides=[1, 2], pads=[1, 2, 0, 1]), 17),
    ("MaxPool", (2, 3, 7, 7), dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[2, 2], ceil_mode=1), 17),
    ("MaxPool", (1, 3, 13), dict(kernel_shape=[3], strides=[2], pads=[2, 1], ceil_mode=1), 17),
    ("MaxPool", (2, 3, 13), dict(kernel_shape=[1], strides=[2]), 17),
    ("MaxPool", (1, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_UPPER"), 17),
    ("MaxPool", (1, 3, 7, 13), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_LOWER"), 17),
    ("MaxPool", (1, 3, 7, 1), dict(kernel_shape=[2, 1], strides=[1, 1], auto_pad="VALID"), 17),
    ("MaxPool", (1, 3, 8, 7), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="VALID", ceil_mode=1), 17),
    ("AveragePool", (1, 3, 8, 7), dict(kernel_shape=[3, 3], strides=[3, 2], auto_pad="SAME_UPPER", ceil_mode=1), 17),
    # ceil_mode where the last ceil window would start in the right padding (dropped)
    ("MaxPool", (1, 3, 4, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], ceil_mode=1), 17),
    # wide planes (the separable path's vector loops and its stride-2 gather, edges in both pads)
    ("MaxPool", (1, 4, 37, 113), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 17),
    ("MaxPool", (1, 2, 29, 90), dict(kernel_shape=[5, 4], strides=[3, 2], dilations=[1, 2], pads=[2, 3, 2, 0],
                                      ceil_mode=1), 17),
    ("MaxPool", (1, 2, 11, 61), dict(kernel_shape=[2, 5], strides=[1, 3], pads=[0, 2, 1, 2]), 17),
    ("MaxPool", (1, 3, 301), dict(kernel_shape=[4], strides=[2], pads=[1, 2]), 17),
    ("AveragePool", (1, 3, 4, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2], ceil_mode=1,
                                       count_include_pad=1), 17),
    ("AveragePool", (2, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 2, 1]), 17),
    ("AveragePool", (2, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 2, 1],
                                        count_include_pad=1), 17),
    ("AveragePool", (1, 5, 7, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 2], ceil_mode=1), 17),
    ("AveragePool", (1, 5, 7, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 2], ceil_mode=1,
                                        count_include_pad=1), 17),
    ("AveragePool", (2, 3, 13), dict(kernel_shape=[3], strides=[2], pads=[1, 2], count_include_pad=1), 17),
    ("AveragePool", (2, 3, 13), dict(kernel_shape=[2], strides=[2], pads=[0, 1], ceil_mode=1), 17),
    ("AveragePool", (1, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_UPPER"), 17),
    ("AveragePool", (1, 3, 7, 13), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_LOWER",
                                        count_include_pad=1), 17),
    ("AveragePool", (1, 3, 1, 13), dict(kernel_shape=[1, 3], strides=[1, 1]), 17),
    ("AveragePool", (1, 3, 13, 7), dict(kernel_shape=[2, 3], dilations=[2, 2], strides=[1, 2], pads=[1, 1, 1, 0]), 19),
    ("AveragePool", (1, 3, 13, 7), dict(kernel_shape=[2, 3], dilations=[3, 2], strides=[2, 1], pads=[1, 1, 1, 2],
                                        ceil_mode=1, count_include_pad=1), 19),
    # a window larger than the input, ceil_mode: one output over the whole plane (torch's
    # AvgPool2d(kernel, ceil_mode=True) as a global pool: HF EfficientNet's 2560 over 7 x 7)
    ("AveragePool", (1, 4, 7, 7), dict(kernel_shape=[20, 20], strides=[20, 20], ceil_mode=1), 17),
    ("AveragePool", (1, 4, 7, 5), dict(kernel_shape=[9, 9], strides=[9, 9], pads=[1, 1, 0, 0], ceil_mode=1,
                                       count_include_pad=1), 17),
    ("MaxPool", (1, 4, 6, 9), dict(kernel_shape=[8, 12], strides=[8, 12], ceil_mode=1), 17),
]


@pytest.mark.parametrize("op, shape, attrs, opset", POOL_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL_CASES)])
def test_pool(tmp_path, rng, op, shape, attrs, opset):
    _ceil_average_needs_verified_ort(op, attrs)
    m = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", shape)], ["y"], opset=opset)
    sess = check(tmp_path, m, {"x": _rand(rng, *shape)})
    assert [o["type"] for o in sess.ops()] == ["pool"]


POOL3D_CASES = [
    ("MaxPool", (1, 3, 6, 9, 11), dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[0, 1, 1, 1, 1, 1])),
    ("MaxPool", (2, 2, 7, 8, 9), dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], dilations=[2, 1, 1], ceil_mode=1)),
    ("MaxPool", (1, 4, 5, 6, 7), dict(kernel_shape=[3, 3, 3], strides=[1, 1, 1], auto_pad="SAME_UPPER")),
    ("AveragePool", (1, 3, 6, 9, 11), dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])),
    ("AveragePool", (1, 3, 6, 9, 11), dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                           count_include_pad=1)),
    ("AveragePool", (2, 2, 7, 8, 9), dict(kernel_shape=[3, 2, 2], strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0],
                                          ceil_mode=1)),
    ("AveragePool", (2, 2, 7, 8, 9), dict(kernel_shape=[3, 2, 2], strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0],
                                          ceil_mode=1, count_include_pad=1)),
    ("AveragePool", (1, 8, 4, 7, 7), dict(kernel_shape=[4, 7, 7])),  # a video net's final pool
]


@pytest.mark.parametrize("op, shape, attrs", POOL3D_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL3D_CASES)])
def test_pool_3d(tmp_path, rng, op, shape, attrs):
    """3-D pools as a (H, W) pool then a depth pool, no copies between: onnxruntime's numbers
    (averages divided per axis, so a rounding apart)."""
    _ceil_average_needs_verified_ort(op, attrs)
    m = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", shape)], ["y"], opset=19)
    sess = check(tmp_path, m, {"x": _rand(rng, *shape)})
    assert [o["type"] for o in sess.ops()] == ["pool", "pool"]


@pytest.mark.parametrize("width", [997, 4500])  # the separable path; a row too wide for it (direct loop)
def test_maxpool_skips_nan(tmp_path, rng, width):
    """NaN inputs are skipped and a window of NaN and padding only gives -FLT_MAX, the same in
    the separable path and the direct loop (a float64 reference over the padded windows)."""
    x = rng.standard_normal((1, 2, 6, width)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[0, 1, :2, :9] = np.nan  # whole windows of NaN (with the padding)
    model = _model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2],
                                     pads=[1, 1, 1, 1])], [("x", list(x.shape))], ["y"])
    got = nerve.Session(_save(tmp_path, model), cache=False).run({"x": x})["y"]
    lowest = np.finfo(np.float32).min
    xp = np.pad(np.where(np.isnan(x), lowest, x).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)),
                constant_values=lowest)
    oh, ow = (xp.shape[2] - 2) // 2 + 1, (xp.shape[3] - 3) // 2 + 1
    want = np.full((1, 2, oh, ow), lowest)
    for i in range(2):
        for j in range(3):
            want = np.maximum(want, xp[:, :, i:i + 2 * (oh - 1) + 1:2, j:j + 2 * (ow - 1) + 1:2])
    assert not np.isnan(got).any() and (got == lowest).any()
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_symbolic_dims(tmp_path, rng, op):
    """Batch and width symbolic; ceil_mode with a right pad large enough that the drop rule
    depends on the width (min of two expressions), run at the bounds and below."""
    attrs = dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 2], ceil_mode=1)
    if op == "AveragePool":
        attrs["count_include_pad"] = 1
    m = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", ["N", 3, 7, "W"])], ["y"])
    feeds = [{"x": _rand(rng, n, 3, 7, w)} for n, w in ((2, 13), (1, 5), (2, 4), (1, 3), (2, 8))]
    check(tmp_path, m, feeds, dims={"N": 2, "W": 13})


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("shape", [(2, 3, 7, 13), (1, 5, 13), (2, 3, 1, 1), (1, 3, 2, 3, 5)])
def test_global_pool(tmp_path, rng, op, shape):
    m = _model([helper.make_node(op, ["x"], ["y"])], [("x", shape)], ["y"])
    check(tmp_path, m, {"x": _rand(rng, *shape)})


def test_global_pool_symbolic(tmp_path, rng):
    m = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", ["N", 5, "H", 7])], ["y"])
    check(tmp_path, m, [{"x": _rand(rng, 2, 5, 13, 7)}, {"x": _rand(rng, 1, 5, 3, 7)}], dims={"N": 2, "H": 13})


# ---------------------------------------------------------------- normalisation


def _bn_params(rng, c):
    return [("scale", rng.uniform(0.5, 2.0, c).astype(np.float32)),
            ("bias", rng.standard_normal(c).astype(np.float32)),
            ("mean", rng.standard_normal(c).astype(np.float32)),
            ("var", rng.uniform(0.1, 2.0, c).astype(np.float32))]


@pytest.mark.parametrize("shape", [(2, 3, 7, 13), (1, 5, 13), (2, 5), (1, 3, 2, 3, 5)])
def test_batchnorm_channel_affine(tmp_path, rng, shape):
    c = shape[1]
    bn = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)
    m = _model([bn], [("x", shape)], ["y"], inits=_bn_params(rng, c))
    sess = check(tmp_path, m, {"x": _rand(rng, *shape)})
    assert [o["type"] for o in sess.ops()] == ["channel_affine"]


def test_batchnorm_symbolic_batch(tmp_path, rng):
    bn = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])
    m = _model([bn], [("x", ["N", 3, 7])], ["y"], inits=_bn_params(rng, 3))
    check(tmp_path, m, [{"x": _rand(rng, 2, 3, 7)}, {"x": _rand(rng, 1, 3, 7)}], dims={"N": 2})


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("sr", [1, 2])
def test_batchnorm_folds_into_conv(tmp_path, rng, with_bias, sr):
    c, m_out = 3, 5
    k = [3] * sr
    conv_ins = ["x", "w"] + (["b"] if with_bias else [])
    nodes = [helper.make_node("Conv", conv_ins, ["c"], pads=[1] * (2 * sr), strides=[2] * sr, name="conv0"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], name="bn0")]
    inits = [("w", _rand(rng, m_out, c, *k))] + ([("b", _rand(rng, m_out))] if with_bias else []) \
        + _bn_params(rng, m_out)
    spatial = [7, 13][:sr] if sr == 2 else [13]
    model = _model(nodes, [("x", ["N", c] + spatial)], ["y"], inits=inits)
    sess = check(tmp_path, model, [{"x": _rand(rng, 2, c, *spatial)}, {"x": _rand(rng, 1, c, *spatial)}],
                 dims={"N": 2})
    ops = sess.ops()
    assert [o["type"] for o in ops] in (["conv"], ["conv_packed"])  # BN folded: one fp32 conv
    assert "bn0" in ops[0]["name"]


@pytest.mark.parametrize("x_shape,m,strides,group", [
    (["N", 6, 9, 11], 8, [2, 3], 1),     # symbolic batch, strides 2 x 3
    ([1, 8, 13, 7], 12, [3, 1], 2),      # two groups, stride along one axis
    ([1, 5, 17], 7, [2], 1),             # 1-D
    ([1, 3, 1, 9], 5, [1, 2], 1),        # one row
])
def test_strided_pointwise_conv_multiplies_the_picked_inputs(tmp_path, rng, x_shape, m, strides, group):
    """A 1x1 conv with strides (ResNet's downsampling shortcut) compiles to a slice of every
    stride-th input and a pointwise conv (no stride phases of the whole input), with its
    residual Add and Relu still fused."""
    sr = len(x_shape) - 2
    c = x_shape[1]
    out_sp = [-(-d // st) for d, st in zip(x_shape[2:], strides)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=strides, group=group),
             helper.make_node("Add", ["c", "s"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = _model(nodes, [("x", x_shape), ("s", [x_shape[0], m] + out_sp)], ["y"],
                   inits=[("w", _rand(rng, m, c // group, *[1] * sr)), ("b", _rand(rng, m))])
    batches = (2, 1) if x_shape[0] == "N" else (1,)
    feeds = [{"x": _rand(rng, n, *x_shape[1:]), "s": _rand(rng, n, m, *out_sp)} for n in batches]
    sess = check(tmp_path, model, feeds, dims={"N": 2} if x_shape[0] == "N" else None)
    assert [o["type"] for o in sess.ops()] in (["slice", "conv"], ["slice", "conv_packed"])


def test_batchnorm_after_conv_with_another_reader_is_not_folded(tmp_path, rng):
    """The conv's output is also a graph output and read by a second node: BN must not change it."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
             helper.make_node("Relu", ["c"], ["r"])]
    inits = [("w", _rand(rng, 5, 3, 3, 3))] + _bn_params(rng, 5)
    model = _model(nodes, [("x", (1, 3, 7, 7))], ["y", "r", "c"], inits=inits)
    sess = check(tmp_path, model, {"x": _rand(rng, 1, 3, 7, 7)})
    assert "channel_affine" in [o["type"] for o in sess.ops()]


@pytest.mark.parametrize("group, m_out, kernel, pads", [(1, 5, (2, 3), [0, 1, 2, 1]), (3, 6, (3, 3), [1, 1, 1, 1]),
                                                      (3, 3, (3, 3), [1, 0, 1, 2]), (1, 5, (1, 1), [0, 0, 0, 0])])
def test_batchnorm_then_relu_after_conv(tmp_path, rng, group, m_out, kernel, pads):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=pads, group=group),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = [("w", _rand(rng, m_out, 3 // group, *kernel)), ("b", _rand(rng, m_out))] + _bn_params(rng, m_out)
    model = _model(nodes, [("x", (2, 3, 7, 13))], ["y"], inits=inits)
    sess = check(tmp_path, model, {"x": _rand(rng, 2, 3, 7, 13)})
    assert [o["type"] for o in sess.ops()] in (["conv"], ["conv_packed"])


def _instancenorm_ref(x, s, b, eps):
    x = x.astype(np.float64)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * s.reshape(shp) + b.reshape(shp)


@pytest.mark.parametrize("shape", [(2, 3, 7, 13), (1, 5, 13), (2, 3, 1), (1, 3, 2, 3, 5)])
def test_instancenorm(tmp_path, rng, shape):
    c = shape[1]
    s, b = _rand(rng, c), _rand(rng, c)
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)
    m = _model([node], [("x", shape)], ["y"], inits=[("s", s), ("b", b)])
    x = _rand(rng, *shape) * 3 + 1
    # with one position per channel the exact result is the bias, which onnxruntime misses by
    # ~1e-5 (it folds the mean into the shift: cancellation); there, a float64 reference only
    if np.prod(shape[2:]) > 1:
        check(tmp_path, m, {"x": x})
    check(tmp_path, m, {"x": x}, reference=lambda f: {"y": _instancenorm_ref(f["x"], s, b, 1e-4)})


def test_instancenorm_symbolic_and_runtime_params(tmp_path, rng):
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    m = _model([node], [("x", ["N", 3, "L"]), ("s", [3]), ("b", [3])], ["y"])
    feeds = [{"x": _rand(rng, n, 3, l), "s": _rand(rng, 3), "b": _rand(rng, 3)} for n, l in ((2, 13), (1, 7))]
    check(tmp_path, m, feeds, dims={"N": 2, "L": 13})


# ---------------------------------------------------------------- LSTM / GRU


def _rnn_model(rng, kind, seq, batch, inp, hid, direction="forward", with_b=True, init=False, seq_lens=None,
               peep=False, symbolic=False, **attrs):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    dirs = 2 if direction == "bidirectional" else 1
    batch_first = attrs.get("layout", 0) == 1  # X [batch, seq, input], states [batch, dirs, hidden]
    inits = [("W", _rand(rng, dirs, gates * hid, inp) * 0.5), ("R", _rand(rng, dirs, gates * hid, hid) * 0.5)]
    names = ["X", "W", "R"]
    if with_b:
        inits.append(("B", _rand(rng, dirs, 2 * gates * hid) * 0.5))
        names.append("B")
    else:
        names.append("")
    if seq_lens is not None:
        inits.append(("sl", np.array(seq_lens, np.int32)))
        names.append("sl")
    else:
        names.append("")
    x_shape = [seq, batch, inp] if not symbolic else ["S", "N", inp]
    state_shape = [dirs, "N" if symbolic else batch, hid]
    x_feed, state_feed = [seq, batch, inp], [dirs, batch, hid]
    if batch_first:
        x_shape, state_shape = [x_shape[1], x_shape[0], inp], [state_shape[1], dirs, hid]
        x_feed, state_feed = [batch, seq, inp], [batch, dirs, hid]
    inputs = [("X", x_shape)]
    feeds = {"X": _rand(rng, *x_feed)}
    if init:
        names.append("h0")
        inputs.append(("h0", state_shape))
        feeds["h0"] = _rand(rng, *state_feed)
        if kind == "LSTM":
            names.append("c0")
            inputs.append(("c0", state_shape))
            feeds["c0"] = _rand(rng, *state_feed)
    if peep:
        while len(names) < 7:
            names.append("")
        inits.append(("P", _rand(rng, dirs, 3 * hid) * 0.5))
        names.append("P")
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"] if kind == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(kind, names, outs, hidden_size=hid, direction=direction, name="rnn0", **attrs)
    return _model([node], inputs, outs, inits=inits), feeds


RNN_CASES = [
    # (seq, batch, input, hidden, direction, with_b, init, seq_lens, attrs)
    (5, 3, 4, 8, "forward", True, False, None, {}),
    (5, 3, 4, 8, "reverse", True, True, None, {}),
    (5, 3, 7, 17, "bidirectional", True, True, None, {}),
    (1, 1, 3, 1, "forward", False, False, None, {}),
    (5, 1, 3, 1, "bidirectional", False, True, None, {}),
    (5, 3, 4, 8, "forward", True, True, [5, 2, 3], {}),
    (5, 3, 4, 8, "reverse", False, False, [1, 5, 3], {}),
    (5, 3, 5, 17, "bidirectional", True, True, [3, 5, 1], {}),
    (5, 3, 4, 8, "forward", True, False, None, {"clip": 0.5}),
    (5, 3, 4, 8, "bidirectional", True, True, [4, 2, 5], {"clip": 1.5}),
    (1, 3, 4, 17, "reverse", True, True, None, {}),
    # wide enough for R's panels (select_rnn_panels: hidden >= 16), several rows per step
    (4, 2, 6, 32, "bidirectional", True, True, [4, 1], {}),
    (3, 5, 8, 48, "forward", True, False, None, {"clip": 2.0}),
]


@pytest.mark.parametrize("seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs", RNN_CASES)
def test_lstm(tmp_path, rng, seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs):
    m, feeds = _rnn_model(rng, "LSTM", seq, batch, inp, hid, direction, with_b, init, seq_lens, **attrs)
    sess = check(tmp_path, m, feeds)
    assert [o["type"] for o in sess.ops()] == ["lstm"]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("extra", [{}, {"input_forget": 1}, {"clip": 0.7}])
def test_lstm_peepholes_and_input_forget(tmp_path, rng, direction, extra):
    m, feeds = _rnn_model(rng, "LSTM", 5, 3, 4, 8, direction, True, True, [5, 3, 4], peep=True, **extra)
    check(tmp_path, m, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs", RNN_CASES)
def test_gru(tmp_path, rng, lbr, seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs):
    m, feeds = _rnn_model(rng, "GRU", seq, batch, inp, hid, direction, with_b, init, seq_lens,
                          linear_before_reset=lbr, **attrs)
    sess = check(tmp_path, m, feeds)
    assert [o["type"] for o in sess.ops()] == ["gru"]


@pytest.mark.parametrize("kind, n_in", [("LSTM", 11), ("GRU", 9), ("RNN", 7)])
def test_rnn_recurrent_weight_goes_as_panels(tmp_path, rng, kind, n_in):
    """From hidden 16 on, R also goes into the plan as panels (the step's product streams
    them); below, it does not. Outputs as onnxruntime's either way."""
    m, feeds = _rnn_model(rng, kind, 4, 2, 6, 24, "bidirectional", True, True, None)
    sess = check(tmp_path, m, feeds)
    assert [len(o["inputs"]) for o in sess.ops()] == [n_in]
    m, feeds = _rnn_model(rng, kind, 4, 2, 6, 8, "bidirectional", True, True, None)
    assert [len(o["inputs"]) for o in check(tmp_path, m, feeds).ops()] != [n_in]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("path", ["panels", "int8", "plain"])
def test_rnn_steps_split_over_threads_give_the_same_bits(tmp_path, rng, monkeypatch, kind, path):
    """A wide RNN's step product (here 4·260 or 3·260 rows of R, 260 deep) is shared out over
    the session's threads in whole panels of 64 rows, each output computed as on one thread:
    the same bits at 1 and 3 threads, and onnxruntime's result. R as panels (with a batch of
    3), as int8 codes (precision "int8") or as plain rows (NERVE_CONV_PANELS=0; those two
    split only a batch of one). The projection of every step's input (4 steps x 48 inputs to
    4·260 or 3·260 gates) is cut along its outputs over the threads too."""
    if path == "plain":
        monkeypatch.setenv("NERVE_CONV_PANELS", "0")
    batch = 3 if path == "panels" else 1
    m, feeds = _rnn_model(rng, kind, 4, batch, 48, 260, "bidirectional", True, True, None)
    precision = "int8" if path == "int8" else "fp32"
    path_onnx = _save(tmp_path, m)
    one = nerve.Session(path_onnx, cache=False, threads=1, precision=precision)
    three = nerve.Session(path_onnx, cache=False, threads=3, precision=precision)
    got = one.run(feeds)
    for name, value in three.run(feeds).items():
        np.testing.assert_array_equal(value, got[name], err_msg=name)
    if path != "int8":  # int8 R against onnxruntime: test_linear_w8.py
        for name, ref in _ort(m, feeds).items():  # 260-deep sums of unit weights: fp32 order noise ~1e-5
            np.testing.assert_allclose(got[name], ref, rtol=RTOL, atol=5e-5, err_msg=name)


@pytest.mark.parametrize("acts", [None, ["Relu"], ["Sigmoid"]])
@pytest.mark.parametrize("seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs", RNN_CASES)
def test_elman_rnn(tmp_path, rng, acts, seq, batch, inp, hid, direction, with_b, init, seq_lens, attrs):
    """ONNX RNN (torch.nn.RNN's export): h = f(x·Wᵀ + h·Rᵀ + Wb + Rb), f one per direction."""
    if acts is not None:
        attrs = dict(attrs, activations=acts * (2 if direction == "bidirectional" else 1))
    m, feeds = _rnn_model(rng, "RNN", seq, batch, inp, hid, direction, with_b, init, seq_lens, **attrs)
    sess = check(tmp_path, m, feeds)
    assert [o["type"] for o in sess.ops()] == ["rnn"]


def test_elman_rnn_activation_per_direction(tmp_path, rng):
    m, feeds = _rnn_model(rng, "RNN", 6, 2, 5, 9, "bidirectional", True, True, [6, 3], activations=["Relu", "Tanh"])
    check(tmp_path, m, feeds)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction, init, seq_lens", [("forward", False, None), ("bidirectional", True, [4, 2, 5])])
def test_rnn_batch_first(tmp_path, rng, kind, direction, init, seq_lens):
    """layout = 1 (X [batch, seq, input], Y [batch, seq, dirs, hidden], states [batch, dirs,
    hidden]): the layout-0 op between transposes. onnxruntime runs layout 0 only: the
    reference is its run of the same weights at layout 0, on transposed feeds."""
    seed = int(rng.integers(1 << 31))  # both models draw the same weights
    m0, feeds0 = _rnn_model(np.random.default_rng(seed), kind, 5, 3, 4, 8, direction, True, init, seq_lens)
    m1, _ = _rnn_model(np.random.default_rng(seed), kind, 5, 3, 4, 8, direction, True, init, seq_lens, layout=1)
    feeds1 = {k: v.transpose(1, 0, 2) for k, v in feeds0.items()}  # the same numbers, batch first

    def reference(_):
        want = _ort(m0, feeds0)
        return {k: v.transpose(2, 0, 1, 3) if k == "Y" else v.transpose(1, 0, 2) for k, v in want.items()}

    check(tmp_path, m1, feeds1, reference=reference)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_symbolic_dims_and_default_activations(tmp_path, rng, kind):
    acts = ["Sigmoid", "Tanh", "Tanh"] if kind == "LSTM" else ["Sigmoid", "Tanh"]
    m, _ = _rnn_model(rng, kind, 5, 3, 4, 8, "bidirectional", True, True, symbolic=True, activations=acts * 2)
    feeds = []
    for s, n in ((5, 3), (2, 1), (1, 2)):
        f = {"X": _rand(rng, s, n, 4), "h0": _rand(rng, 2, n, 8)}
        if kind == "LSTM":
            f["c0"] = _rand(rng, 2, n, 8)
        feeds.append(f)
    check(tmp_path, m, feeds, dims={"S": 5, "N": 3})


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_only_some_outputs_and_runtime_seq_lens(tmp_path, rng, kind):
    """Y unused (empty name), Y_h only; sequence_lens fed at run time (int32)."""
    gates = 4 if kind == "LSTM" else 3
    node = helper.make_node(kind, ["X", "W", "R", "B", "sl"], ["", "Y_h"], hidden_size=8)
    inits = [("W", _rand(rng, 1, gates * 8, 4)), ("R", _rand(rng, 1, gates * 8, 8)), ("B", _rand(rng, 1, 2 * gates * 8))]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 3, 4]),
         helper.make_tensor_value_info("sl", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    check(tmp_path, m, [{"X": _rand(rng, 5, 3, 4), "sl": np.array(l, np.int32)} for l in ([5, 1, 3], [2, 5, 4])])


@pytest.mark.parametrize("runtime", [False, True])
def test_rnn_int64_sequence_lens(tmp_path, rng, runtime):
    """sequence_lens given as int64 (ONNX says int32; exporters slip): a constant is converted at
    compile time, a runtime input is cast. Compared with onnxruntime on the int32 model."""
    lens = np.array([3, 5, 1], np.int64)
    m32, feeds = _rnn_model(rng, "GRU", 5, 3, 4, 8, "bidirectional", True, True, lens.astype(np.int32))
    want = _ort(m32, feeds)
    m64 = onnx.ModelProto()
    m64.CopyFrom(m32)
    g = m64.graph
    if runtime:
        del g.initializer[[t.name for t in g.initializer].index("sl")]
        g.input.append(helper.make_tensor_value_info("sl", TensorProto.INT64, [3]))
        feeds = dict(feeds, sl=lens)
    else:
        g.initializer[[t.name for t in g.initializer].index("sl")].CopyFrom(numpy_helper.from_array(lens, "sl"))
    check(tmp_path, m64, feeds, reference=lambda f: want)


# ---------------------------------------------------------------- clear failures


def _expect_model_error(tmp_path, model, *words):
    with pytest.raises(nerve.ModelError) as exc:
        nerve.Session(_save(tmp_path, model), cache=False)
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_pool_window_larger_than_input_needs_ceil_mode(tmp_path):
    """Without ceil_mode (or short by a whole stride) no window fits: a clear error."""
    for attrs in (dict(kernel_shape=[9, 9], strides=[9, 9]), dict(kernel_shape=[9, 9], strides=[2, 2], ceil_mode=1)):
        m = _model([helper.make_node("AveragePool", ["x"], ["y"], name="gp", **attrs)], [("x", (1, 2, 5, 5))], ["y"])
        path = tmp_path / "m.onnx"
        path.write_bytes(m.SerializeToString())
        with pytest.raises(nerve.ModelError, match="gp.*window .9. is larger than the padded input .5."):
            nerve.Session(path, cache=False)


MAXPOOL_INDEX_CASES = [
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 8, 7), dict(kernel_shape=[2, 3], strides=[2, 1], ceil_mode=1, storage_order=1)),
    ((1, 2, 10, 9), dict(kernel_shape=[2, 2], dilations=[2, 3], pads=[0, 1, 1, 0])),
    ((2, 4, 13), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 2], pads=[0, 1, 0, 1, 1, 1])),
]


def _pool_index_model(shape, attrs, unpool=None):
    """MaxPool with its Indices output (and, with unpool = its attributes plus an optional
    output_shape, a MaxUnpool of them): outputs y, idx (or the unpooled u)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], **attrs)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("idx", TensorProto.INT64, None)]
    inits = []
    if unpool is not None:
        unpool = dict(unpool)
        out_shape = unpool.pop("output_shape", None)
        ins = ["y", "idx"] + (["os"] if out_shape is not None else [])
        if out_shape is not None:
            inits.append(numpy_helper.from_array(np.array(out_shape, np.int64), "os"))
        nodes.append(helper.make_node("MaxUnpool", ins, ["u"], **unpool))
        outs = [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outs,
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("shape, attrs", MAXPOOL_INDEX_CASES, ids=[str(c[0]) for c in MAXPOOL_INDEX_CASES])
def test_maxpool_indices(tmp_path, rng, shape, attrs):
    """MaxPool's Indices output (flat positions in x, row- or column-major planes) and values
    against onnxruntime, 1-D to 3-D, pads, dilations, ceil_mode."""
    sess = check(tmp_path, _pool_index_model(shape, attrs), {"x": _rand(rng, *shape)})
    assert [o["type"] for o in sess.ops()] == ["maxpool_argmax"]


@pytest.mark.parametrize("shape, pool, unpool", [
    ((2, 3, 8, 10), dict(kernel_shape=[2, 2], strides=[2, 2]), dict(kernel_shape=[2, 2], strides=[2, 2])),
    # SegNet/ENet on odd sizes: torch's MaxUnpool2d(output_size=...) gives output_shape, and the
    # indices are positions in it
    ((1, 4, 7, 9), dict(kernel_shape=[2, 2], strides=[2, 2]),
     dict(kernel_shape=[2, 2], strides=[2, 2], output_shape=[1, 4, 7, 9])),
    ((1, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1]), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
])
def test_maxpool_then_unpool(tmp_path, rng, shape, pool, unpool):
    sess = check(tmp_path, _pool_index_model(shape, pool, unpool), {"x": _rand(rng, *shape)})
    assert [o["type"] for o in sess.ops()] == ["maxpool_argmax", "max_unpool"]


def test_max_unpool_refuses_an_index_outside_the_output(tmp_path, rng):
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="unpool0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                                            helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    sess = nerve.Session(_save(tmp_path, m), cache=False)
    x = _rand(rng, 1, 1, 2, 2)
    good = np.array([0, 3, 9, 15], np.int64).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(sess.run({"x": x, "i": good})["y"].reshape(-1)[[0, 3, 9, 15]], x.reshape(-1))
    with pytest.raises(nerve.InputError, match=r"unpool0.*index 16 at position 2"):
        sess.run({"x": x, "i": np.array([0, 3, 16, 5], np.int64).reshape(1, 1, 2, 2)})
    with pytest.raises(nerve.InputError, match=r"index -1 at position 0"):
        sess.run({"x": x, "i": np.array([-1, 3, 1, 5], np.int64).reshape(1, 1, 2, 2)})


def test_rnn_layout_2_fails(tmp_path, rng):
    m, _ = _rnn_model(rng, "LSTM", 5, 3, 4, 8, layout=2)
    _expect_model_error(tmp_path, m, "rnn0", "layout")


@pytest.mark.parametrize("kind, acts", [("LSTM", ["Sigmoid", "Relu", "Tanh"]), ("GRU", ["HardSigmoid", "Tanh"]),
                                        ("RNN", ["LeakyRelu"]), ("RNN", ["Tanh", "Tanh"])])
def test_rnn_non_default_activations_fail(tmp_path, rng, kind, acts):
    m, _ = _rnn_model(rng, kind, 5, 3, 4, 8, activations=acts)
    _expect_model_error(tmp_path, m, "rnn0", "activations")


def test_batchnorm_training_mode_fails(tmp_path, rng):
    bn = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], training_mode=1,
                          name="bn1")
    m = _model([bn], [("x", (1, 3, 5))], ["y"], inits=_bn_params(rng, 3))
    _expect_model_error(tmp_path, m, "bn1", "training_mode")


# ---------------------------------------------------------------- DFT-basis conv -> rdft

def _dft_basis(n, bins, sign, window):
    """A conv weight [2 * bins, 1, n] holding [window·cos; sign·window·sin] in float32, the
    way exported STFT front ends (silero VAD) store their transform."""
    angle = 2 * np.pi * np.outer(np.arange(bins), np.arange(n)) / n
    return np.concatenate([window * np.cos(angle), sign * window * np.sin(angle)])[:, None, :].astype(np.float32)


def _stft_conv_model(w, stride, pads, bias=None):
    inits = [("w", w)] + ([("b", bias)] if bias is not None else [])
    conv = helper.make_node("Conv", ["x", "w"] + (["b"] if bias is not None else []), ["y"], strides=[stride],
                            pads=list(pads))
    return _model([conv], [("x", ["batch", 1, "len"])], ["y"], inits)


@pytest.mark.parametrize("n, bins, sign, stride, pads, batch, length", [
    (256, 129, -1, 128, (0, 0), 1, 640),   # silero VAD's STFT
    (64, 33, 1, 16, (32, 32), 2, 301),
    (512, 200, -1, 160, (0, 511), 1, 1000),
    (8, 5, 1, 3, (2, 0), 3, 23),
    (4, 3, -1, 1, (0, 0), 1, 4),
])
def test_dft_basis_conv_runs_as_an_fft(tmp_path, rng, n, bins, sign, stride, pads, batch, length):
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)) * rng.uniform(0.5, 1.0, n)  # any window
    model = _stft_conv_model(_dft_basis(n, bins, sign, window), stride, pads)
    x = _rand(rng, batch, 1, length)
    sess = check(tmp_path, model, {"x": x}, dims={"batch": batch, "len": length}, rtol=1e-4, atol=2e-5 * np.sqrt(n))
    assert [op["type"] for op in sess.ops()] == ["rdft"]
    # against float64 too: the FFT is no less exact than the conv it replaces
    frames = (length + sum(pads) - n) // stride + 1
    xp = np.pad(x[:, 0].astype(np.float64), ((0, 0), pads))
    seg = np.stack([xp[:, f * stride:f * stride + n] for f in range(frames)], axis=1) * window  # [B, F, n]
    spec = np.fft.rfft(seg, axis=-1)[..., :bins]
    want = np.concatenate([spec.real, -sign * spec.imag], axis=-1).transpose(0, 2, 1)
    got = sess.run({"x": x})["y"]
    assert np.abs(got - want).max() <= 1e-6 * np.sqrt(n) * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("case", ["perturbed", "odd_width", "bias", "two_channels", "dilated", "too_many_bins"])
def test_conv_that_is_not_a_dft_stays_a_conv(tmp_path, rng, case):
    n, bins = 32, 17
    window = np.hanning(n)
    w = _dft_basis(n, bins, -1, window)
    bias, stride, x_ch, dil = None, 8, 1, 1
    if case == "perturbed":
        w[5, 0, 7] += 1e-3
    elif case == "odd_width":
        n = 30
        w = _dft_basis(n, 16, -1, np.hanning(n))
    elif case == "bias":
        bias = _rand(rng, 2 * bins)
    elif case == "two_channels":
        w = np.concatenate([w, w], axis=1)
        x_ch = 2
    elif case == "dilated":
        dil = 2
    elif case == "too_many_bins":
        w = _dft_basis(n, n // 2 + 2, -1, window)
    inits = [("w", w)] + ([("b", bias)] if bias is not None else [])
    conv = helper.make_node("Conv", ["x", "w"] + (["b"] if bias is not None else []), ["y"], strides=[stride],
                            dilations=[dil])
    model = _model([conv], [("x", [1, x_ch, 97])], ["y"], inits)
    sess = check(tmp_path, model, {"x": _rand(rng, 1, x_ch, 97)})
    assert [op["type"] for op in sess.ops()] in (["conv"], ["conv_packed"])  # a convolution, not an rdft


# ---------------------------------------------------------------- STFT

@pytest.mark.parametrize("n, step, window, onesided, length, fft", [
    (512, 160, "hann", 1, 16000, True),    # torch.stft(n_fft=512, hop=160) as exported at opset 17
    (256, 128, "hann", 1, 1000, True),
    (400, 160, "hann", 1, 4000, False),    # not a power of two: stays a conv
    (64, 17, None, 1, 300, True),          # frame_length only: rectangular window
    (32, 8, "rand", 0, 100, False),        # two-sided: all 32 bins (more than N/2 + 1: a conv)
])
def test_stft(tmp_path, rng, n, step, window, onesided, length, fft):
    inits = [("step", np.array(step, np.int64)), ("flen", np.array(n, np.int64))]
    ins = ["x", "step", "", "flen"]
    if window == "hann":
        inits.append(("win", (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)))
        ins[2] = "win"
    elif window == "rand":
        inits.append(("win", rng.uniform(0, 1, n).astype(np.float32)))
        ins[2] = "win"
    node = helper.make_node("STFT", ins, ["y"], onesided=onesided)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "len", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, k) for k, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = _rand(rng, 2, length, 1)
    win = next((a for k, a in inits if k == "win"), np.ones(n, np.float32)).astype(np.float64)

    def stft_float64(feeds):
        sig = feeds["x"][..., 0].astype(np.float64)
        frames = np.stack([sig[:, f * step:f * step + n] * win
                           for f in range((length - n) // step + 1)], axis=1)
        spec = np.fft.rfft(frames, axis=-1) if onesided else np.fft.fft(frames, axis=-1)
        return {"y": np.stack([spec.real, spec.imag], axis=-1)}

    ref = stft_float64({"x": x})["y"]
    # The reference is float64 (onnxruntime's own fp32 DFT is ~1e-3 off at n=400); the bound
    # is fp32 rounding of an n-term sum: a few eps * sqrt(n) * the spectrum's peak.
    atol = 4 * np.finfo(np.float32).eps * np.sqrt(n) * np.abs(ref).max()
    sess = check(tmp_path, model, {"x": x}, dims={"len": length}, rtol=1e-5, atol=atol,
                 reference=stft_float64)
    ort_y = _ort(model, {"x": x})["y"]   # the reference reads STFT as onnxruntime does
    assert ort_y.shape == ref.shape
    np.testing.assert_allclose(ort_y, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    types = [op["type"] for op in sess.ops()]
    assert ("rdft" in types) == fft and bool({"conv", "conv_packed"} & set(types)) == (not fft), types


def test_stft_refuses_what_it_cannot_run(tmp_path):
    def model(signal_shape, window_is_input=False):
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, signal_shape)]
        inits = [numpy_helper.from_array(np.array(4, np.int64), "step")]
        if window_is_input:
            ins.append(helper.make_tensor_value_info("win", TensorProto.FLOAT, [16]))
        else:
            inits.append(numpy_helper.from_array(np.ones(16, np.float32), "win"))
        g = helper.make_graph([helper.make_node("STFT", ["x", "step", "win"], ["y"])], "g", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return _save(tmp_path, m)
    with pytest.raises(nerve.ModelError, match="complex"):
        nerve.Session(model([1, 64, 2]), cache=False)
    with pytest.raises(nerve.ModelError, match="window must be a constant"):
        nerve.Session(model([1, 64, 1], window_is_input=True), cache=False)


# ---------------------------------------------------------------- ConvTranspose

CONVT_CASES = [
    # (x shape, w shape, attrs, bias)
    ((2, 3, 5, 7), (3, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True),
    ((1, 6, 4, 5), (6, 2, 3, 2), dict(group=3, dilations=[2, 1], strides=[1, 3], pads=[0, 1, 2, 0]), True),
    ((1, 4, 13), (4, 5, 4), dict(strides=[4]), False),                # the usual 1-D upsampler, k == s
    # kernel == stride in 2-D (U-Net and DB-head upsampling): the taps tile y, written once
    ((2, 3, 5, 11), (3, 4, 2, 2), dict(strides=[2, 2]), True),        # 2 x 4-pair steps and a tail
    ((1, 4, 3, 4), (4, 2, 2, 3), dict(strides=[2, 3], group=2), False),
    ((1, 2, 4, 6), (2, 3, 3, 3), dict(strides=[3, 3]), True),
    ((2, 5, 9), (5, 1, 5), dict(group=5, strides=[2], pads=[2, 2], output_padding=[1]), True),  # depthwise
    ((1, 3, 6, 5), (3, 2, 4, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER"), True),
    ((1, 3, 6, 5), (3, 2, 4, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER"), False),
    ((1, 2, 5, 4), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[14, 9]), True),
    ((1, 0, 4), (0, 3, 2), dict(strides=[2]), True),                  # no input channel: bias only
    ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8]), True),  # past the full conv: bias
    ((1, 2, 5), (2, 3, 1), dict(strides=[2], auto_pad="SAME_UPPER"), True),          # stride > kernel
    ((1, 2, 5), (2, 3, 1), dict(strides=[2], auto_pad="SAME_LOWER"), True),          # ... the extra one first
    # 3-D (3D U-Net decoders): a 2-D transposed conv per depth tap, its planes spread and summed
    ((1, 4, 3, 5, 6), (4, 3, 2, 2, 2), dict(strides=[2, 2, 2]), True),
    ((2, 3, 4, 5, 3), (3, 2, 3, 3, 3), dict(strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1],
                                            output_padding=[1, 0, 1]), True),
    ((1, 6, 3, 4, 4), (6, 1, 3, 2, 2), dict(group=3, dilations=[2, 1, 1], strides=[1, 2, 2],
                                            pads=[3, 0, 0, 2, 1, 0]), False),
    ((1, 2, 2, 3, 3), (2, 2, 3, 3, 3), dict(strides=[2, 2, 2], auto_pad="SAME_UPPER"), True),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), dict(strides=[3, 1, 1], output_shape=[8, 4, 4]), True),
]


@pytest.mark.parametrize("xs, ws, attrs, bias", CONVT_CASES)
def test_conv_transpose(tmp_path, rng, xs, ws, attrs, bias):
    inits = [("w", _rand(rng, *ws))] + ([("b", _rand(rng, ws[1] * attrs.get("group", 1)))] if bias else [])
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
    model = _model([node], [("x", list(xs))], ["y"], inits)
    sess = check(tmp_path, model, {"x": _rand(rng, *xs)})
    kinds = [op["type"] for op in sess.ops()]
    if len(xs) == 5:  # one 2-D transposed conv per depth tap whose planes reach the output
        s, dl = attrs.get("strides", [1])[0], attrs.get("dilations", [1])[0]
        pb = attrs.get("pads", [0] * 6)[0]
        reach = [t for t in range(ws[2]) if t * dl - pb + s * (xs[2] - 1) >= 0]
        assert kinds.count("conv_transpose") == len(reach)
    else:
        assert kinds == ["conv_transpose"]


def test_conv_transpose_symbolic_length_and_fused_relu(tmp_path, rng):
    w, b = _rand(rng, 4, 3, 5), _rand(rng, 3)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[3], pads=[1, 2]),
             helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, [("x", [1, 4, "len"])], ["y"], [("w", w), ("b", b)])
    sess = check(tmp_path, model, [{"x": _rand(rng, 1, 4, n)} for n in (40, 1, 17)], dims={"len": 40})
    assert [op["type"] for op in sess.ops()] == ["conv_transpose"]   # the Relu fused into it


def test_conv_transpose_threads_give_the_same_bits(tmp_path, rng):
    w, b = _rand(rng, 16, 8, 4, 4), _rand(rng, 8)
    model = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                   [("x", [1, 16, 19, 17])], ["y"], [("w", w), ("b", b)])
    path = _save(tmp_path, model)
    x = _rand(rng, 1, 16, 19, 17)
    one = nerve.Session(path, cache=False).run({"x": x})["y"]
    two = nerve.Session(path, cache=False, threads=2).run({"x": x})["y"]
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, _ort(model, {"x": x})["y"], rtol=RTOL, atol=1e-4)


def test_conv_transpose_refuses_what_it_cannot_run(tmp_path, rng):
    def session(attrs, ws=(2, 3, 3), w_input=False):
        inits = [] if w_input else [("w", _rand(rng, *ws))]
        ins = [("x", [1, 2, 8])] + ([("w", list(ws))] if w_input else [])
        m = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], ins, ["y"], inits)
        return nerve.Session(_save(tmp_path, m), cache=False)
    with pytest.raises(nerve.ModelError, match="weights must be constants"):
        session({}, w_input=True)
    with pytest.raises(nerve.ModelError, match="output_padding"):
        session(dict(strides=[2], output_padding=[2]))
    with pytest.raises(nerve.ModelError, match="channels"):
        session({}, ws=(3, 3, 3))


# ---------------------------------------------------------------- Resize

RESIZE_CASES = [
    # (x shape, attrs, scales, sizes, opset)
    ((1, 3, 5, 7), dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 2, 2], None, 13),                                        # torch nearest, scale_factor=2
    ((2, 3, 5, 7), dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
     [1, 1, 2, 3], None, 13),                                        # torch bilinear, align_corners=False
    ((1, 2, 6, 5), dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [1, 2, 11, 3], 13),
    ((1, 2, 9, 8), dict(mode="cubic", exclude_outside=1), None, [1, 2, 5, 13], 13),
    ((1, 2, 9, 8), dict(mode="cubic", cubic_coeff_a=-0.5), [1, 1, 1.7, 0.6], None, 13),
    ((1, 3, 10, 9), dict(mode="nearest", nearest_mode="round_prefer_ceil"), [1, 1, 0.6, 0.45], None, 13),
    ((1, 3, 10, 9), dict(mode="nearest"), [1, 1, 2.5, 1.3], None, 13),
    ((2, 3, 11), dict(mode="linear"), [1, 2.0, 0.5], None, 13),       # a channel axis too
    ((1, 2, 4, 6), dict(mode="linear", axes=[2, 3], coordinate_transformation_mode="half_pixel_symmetric"),
     None, [7, 5], 19),
    # nearest over the last two axes runs in one pass: 2x repeats (vector steps and tails,
    # odd widths), other whole factors, the width or the height alone, half_pixel's 2x
    # (the same repeat), a rank-2 and a rank-5 tensor
    ((2, 3, 6, 37), dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 2, 2], None, 13),
    ((1, 2, 5, 9), dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 3, 3], None, 13),
    ((1, 2, 5, 21), dict(mode="nearest"), [1, 1, 1, 2], None, 13),
    ((1, 2, 5, 21), dict(mode="nearest"), [1, 1, 2, 1], None, 13),
    ((1, 2, 7, 19), dict(mode="nearest"), [1, 1, 2, 2], None, 13),
    ((7, 13), dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [2, 2], None, 13),
    ((2, 1, 2, 3, 11), dict(mode="nearest", nearest_mode="floor"), None, [2, 1, 2, 5, 20], 13),
    ((1, 1, 3, 4), dict(mode="nearest"), [1, 1, 2, 3], None, 10),     # Resize-10: asymmetric, legacy rounding
    ((1, 1, 6, 8), dict(mode="nearest"), [1, 1, 0.5, 0.4], None, 10),
    ((1, 1, 3, 4), dict(mode="linear"), [1, 1, 2, 2], None, 10),
]


@pytest.mark.parametrize("xs, attrs, scales, sizes, opset", RESIZE_CASES)
def test_resize(tmp_path, rng, xs, attrs, scales, sizes, opset):
    inits = []
    if opset < 11:
        ins = ["x", "scales"]
    else:
        ins = ["x", "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
        while ins[-1] == "":
            ins.pop()
    if scales is not None:
        inits.append(("scales", np.array(scales, np.float32)))
    if sizes is not None:
        inits.append(("sizes", np.array(sizes, np.int64)))
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    model = _model([node], [("x", list(xs))], ["y"], inits, opset=opset)
    sess = check(tmp_path, model, {"x": _rand(rng, *xs)})
    assert [op["type"] for op in sess.ops()] == ["resize"]


ANTIALIAS_CASES = [
    # (x shape, attrs, scales, sizes): torchvision's Resize(antialias=True) and PIL-like shrinks
    ((1, 3, 37, 50), dict(mode="linear"), [1, 1, 0.3, 0.45], None),
    ((1, 3, 37, 50), dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), [1, 1, 0.3, 0.45], None),
    ((2, 3, 64, 48), dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), None, [2, 3, 13, 7]),
    ((1, 2, 40, 33), dict(mode="cubic", coordinate_transformation_mode="half_pixel_symmetric"), None, [1, 2, 9, 12]),
    ((1, 3, 20, 20), dict(mode="linear"), [1, 1, 1.5, 0.5], None),    # one axis grows: plain linear there
    ((1, 2, 9, 31), dict(mode="linear", axes=[3], coordinate_transformation_mode="align_corners"), None, [4]),
]


@pytest.mark.parametrize("xs, attrs, scales, sizes", ANTIALIAS_CASES)
def test_resize_antialias(tmp_path, rng, xs, attrs, scales, sizes):
    """antialias=1: a shrink's filter stretched by 1/scale, as one product per resized axis
    with a weight matrix made at compile time; onnxruntime's numbers."""
    ins = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    inits = [("scales", np.array(scales, np.float32))] if scales is not None else [("sizes", np.array(sizes, np.int64))]
    node = helper.make_node("Resize", ins, ["y"], antialias=1, **attrs)
    model = _model([node], [("x", list(xs))], ["y"], inits, opset=18)
    sess = check(tmp_path, model, {"x": _rand(rng, *xs)})
    assert "linear" in [op["type"] for op in sess.ops()] and "resize" not in [op["type"] for op in sess.ops()]


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("xs, sizes", [((1, 3, 20, 30), [1, 3, 10, 10]), ((1, 2, 7, 5), [1, 2, 12, 9])])
def test_resize_keep_aspect_ratio(tmp_path, rng, policy, mode, xs, sizes):
    """sizes with keep_aspect_ratio_policy: one scale for the axes (the largest that fits, or
    the smallest that covers), each extent the product rounded."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, keep_aspect_ratio_policy=policy,
                            axes=[2, 3])
    model = _model([node], [("x", list(xs))], ["y"], [("sizes", np.array(sizes[2:], np.int64))], opset=18)
    check(tmp_path, model, {"x": _rand(rng, *xs)})


def test_upsample_opset9(tmp_path, rng):
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
    model = _model([node], [("x", [1, 2, 3, 5])], ["y"], [("scales", np.array([1, 1, 2, 2], np.float32))], opset=9)
    check(tmp_path, model, {"x": _rand(rng, 1, 2, 3, 5)})


def test_resize_sizes_from_shape_arithmetic(tmp_path, rng):
    """As torch exports interpolate(size=2 * x.shape[-1]) on a dynamic length: Shape, Slice,
    Mul and Concat feed sizes; the plan binds the length per run."""
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Slice", ["shp", "start", "end"], ["len"]),
             helper.make_node("Mul", ["len", "two"], ["len2"]),
             helper.make_node("Slice", ["shp", "zero", "start"], ["nc"]),
             helper.make_node("Concat", ["nc", "len2"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                              coordinate_transformation_mode="pytorch_half_pixel")]
    inits = [("start", np.array([2], np.int64)), ("end", np.array([3], np.int64)),
             ("two", np.array([2], np.int64)), ("zero", np.array([0], np.int64))]
    model = _model(nodes, [("x", [1, 3, "len"])], ["y"], inits, opset=13)
    sess = check(tmp_path, model, [{"x": _rand(rng, 1, 3, n)} for n in (50, 1, 23)], dims={"len": 50})
    assert "resize" in [op["type"] for op in sess.ops()]


def test_resize_refuses_what_it_cannot_run(tmp_path):
    def session(attrs, opset=13, scales=(1, 1, 2, 2)):
        m = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)], [("x", [1, 1, 4, 4])], ["y"],
                   [("scales", np.array(scales, np.float32))], opset=opset)
        return nerve.Session(_save(tmp_path, m), cache=False)
    with pytest.raises(nerve.ModelError, match="tf_crop_and_resize"):
        session(dict(coordinate_transformation_mode="tf_crop_and_resize"))
    with pytest.raises(nerve.ModelError, match="antialias"):
        session(dict(mode="nearest", antialias=1), opset=18, scales=(1, 1, 0.5, 0.5))
    with pytest.raises(nerve.ModelError, match="scale"):
        session({}, scales=(1, 1, -2, 2))


# ---------------------------------------------------------------- GroupNormalization, LpNormalization, pixel shuffle

@pytest.mark.parametrize("shape, groups, opset", [((2, 6, 5, 7), 3, 18), ((1, 8, 13), 2, 18), ((2, 6, 5, 7), 3, 21),
                                                  ((1, 12, 3, 4), 12, 21), ((1, 4, 9), 1, 21)])
def test_group_normalization(tmp_path, rng, shape, groups, opset):
    c = shape[1]
    n_affine = groups if opset < 21 else c
    inits = [("scale", _rand(rng, n_affine)), ("bias", _rand(rng, n_affine))]
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=1e-4)
    model = _model([node], [("x", list(shape))], ["y"], inits, opset=opset)
    check(tmp_path, model, {"x": _rand(rng, *shape) * 3 + 1}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p, axis", [(2, -1), (1, 1), (2, 0)])
def test_lp_normalization(tmp_path, rng, p, axis):
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)
    x = _rand(rng, 3, 5, 7)
    x[1] = 0  # zero slices along every axis: a zero norm gives 0 (onnxruntime), not 0 / 0
    x[:, 2] = 0
    x[..., 4] = 0
    check(tmp_path, _model([node], [("x", [3, 5, 7])], ["y"]), {"x": x})


@pytest.mark.parametrize("op, shape, block, mode", [("DepthToSpace", (2, 12, 3, 5), 2, "DCR"),
                                                    ("DepthToSpace", (1, 18, 2, 3), 3, "CRD"),
                                                    ("SpaceToDepth", (2, 3, 6, 4), 2, None),
                                                    ("SpaceToDepth", (2, 3, 6, 4), 2, "DCR"),
                                                    ("SpaceToDepth", (1, 2, 9, 6), 3, "CRD")])
def test_pixel_shuffle(tmp_path, rng, op, shape, block, mode):
    attrs = {"blocksize": block} | ({"mode": mode} if mode else {})
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    opset = 28 if op == "SpaceToDepth" and mode else 17  # SpaceToDepth's mode: opset 28
    sess = check(tmp_path, _model([node], [("x", list(shape))], ["y"], opset=opset), {"x": _rand(rng, *shape)},
                 rtol=0, atol=0)
    assert [o["type"] for o in sess.ops()] == ["transpose"]


# ---------------------------------------------------------------- LRN

@pytest.mark.parametrize("shape, size, attrs", [
    ((2, 7, 5, 6), 3, {}),                                             # AlexNet-like defaults
    ((1, 13, 4, 3), 5, dict(alpha=2e-4, beta=0.75, bias=1.0)),         # Inception v1's
    ((2, 6, 9), 4, dict(alpha=0.5, beta=0.5, bias=2.0)),               # even window, 1-D input
    ((1, 3, 2, 2, 2), 7, dict(alpha=1.0, beta=1.5, bias=0.5)),         # window wider than C, 3-D
])
def test_lrn(tmp_path, rng, shape, size, attrs):
    """Against onnxruntime where it runs LRN (odd size, 4-D), else the ONNX formula in float64."""
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)], [("x", list(shape))], ["y"])

    def formula(feeds):
        x = feeds["x"].astype(np.float64)
        c, before = x.shape[1], (size - 1) // 2
        sq = np.stack([np.sum(x[:, max(0, i - before):min(c, i + size - before)] ** 2, axis=1) for i in range(c)], 1)
        a, b, k = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
        return {"y": (x / (k + a / size * sq) ** b).astype(np.float32)}

    use_ort = size % 2 == 1 and len(shape) == 4
    check(tmp_path, m, {"x": _rand(rng, *shape) * 3}, reference=None if use_ort else formula)
    if use_ort:  # the formula agrees with onnxruntime where both run
        check(tmp_path, m, {"x": _rand(rng, *shape) * 3}, reference=formula)


# ---------------------------------------------------------------- Pad folded into Conv


@pytest.mark.parametrize("group, kernel, stride, pads, value, folded", [
    (6, 3, 2, [0, 0, 0, 1, 0, 0, 1, 1], 0.0, True),   # TF-style "same" before a strided depthwise conv
    (1, 3, 1, [0, 0, 1, 2, 0, 0, 2, 1], 0.0, True),   # a dense conv, uneven pads
    (1, 3, 1, [0, 0, 1, 1, 0, 0, 1, 1], 0.5, False),  # a non-zero pad value is data
    (1, 3, 1, [0, 1, 1, 1, 0, 0, 1, 1], 0.0, False),  # a padded channel is not the conv's padding
])
def test_pad_folds_into_conv(tmp_path, rng, group, kernel, stride, pads, value, folded):
    """Pad(constant 0 on the spatial axes) → Conv becomes the conv's own padding, the padded
    copy never made; other pads stay ops. Against onnxruntime."""
    c_in = 6 + (pads[1] + pads[5])
    w = _rand(rng, 6, c_in // group, kernel, kernel)
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["xp"], mode="constant"),
             helper.make_node("Conv", ["xp", "w"], ["y"], group=group, strides=[stride, stride])]
    m = _model(nodes, [("x", (1, 6, 15, 17))], ["y"],
               inits=[("w", w), ("pads", np.array(pads, np.int64)), ("value", np.array(value, np.float32))])
    sess = check(tmp_path, m, {"x": _rand(rng, 1, 6, 15, 17)})
    assert ("pad" not in [o["type"] for o in sess.ops()]) == folded


def test_pad_read_twice_is_not_folded(tmp_path, rng):
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], mode="constant"),
             helper.make_node("Conv", ["xp", "w"], ["y"]), helper.make_node("Relu", ["xp"], ["r"])]
    m = _model(nodes, [("x", (1, 3, 8, 8))], ["y", "r"],
               inits=[("w", _rand(rng, 4, 3, 3, 3)), ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    sess = check(tmp_path, m, {"x": _rand(rng, 1, 3, 8, 8)})
    assert "pad" in [o["type"] for o in sess.ops()]


# ---------------------------------------------------------------- Pad by shape arithmetic


def _pad_to_multiple_nodes(legacy):
    """x [1, C, L] padded at the end of L to a multiple of 4, the pads computed from x's shape
    as torch writes them: the dynamo exporter concatenates the dims directly; the TorchScript
    one builds torch's (begin, end) pad list and reverses it into ONNX order with
    ConstantOfShape, Reshape to [n, 2], a backwards Slice, Transpose and Reshape."""
    i64 = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(  # noqa: E731
        np.array(v, np.int64), name))
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=2, end=3),
             i64("four", [4]), helper.make_node("Mod", ["shape", "four"], ["rem"]),
             helper.make_node("Sub", ["four", "rem"], ["short"]), helper.make_node("Mod", ["short", "four"], ["extra"])]
    if not legacy:
        nodes += [i64("zeros5", [0, 0, 0, 0, 0]), helper.make_node("Concat", ["zeros5", "extra"], ["pads"], axis=0)]
    else:
        nodes += [i64("zero1", [0]), helper.make_node("Concat", ["zero1", "extra"], ["torch_pads"], axis=0),  # (L: 0, extra)
                  i64("n_missing", [4]), helper.make_node("ConstantOfShape", ["n_missing"], ["fill"],
                                                          value=numpy_helper.from_array(np.array([0], np.int64))),
                  helper.make_node("Concat", ["torch_pads", "fill"], ["all"], axis=0),
                  i64("table", [-1, 2]), helper.make_node("Reshape", ["all", "table"], ["pairs"]),
                  i64("st", [-1]), i64("en", [-(2 ** 62)]), i64("ax", [0]), i64("step", [-1]),
                  helper.make_node("Slice", ["pairs", "st", "en", "ax", "step"], ["reversed"]),
                  helper.make_node("Transpose", ["reversed"], ["cols"], perm=[1, 0]),
                  i64("flat", [-1]), helper.make_node("Reshape", ["cols", "flat"], ["pads"])]
    return nodes + [helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")]


@pytest.mark.parametrize("legacy", [False, True])
def test_pad_from_shape_arithmetic(tmp_path, rng, legacy):
    """Pads that follow the sizes (SEW pads its sequence to a multiple of its squeeze factor)
    are evaluated per run; the TorchScript pad-list idiom keeps them known through Slice and
    Transpose. Against onnxruntime at several lengths."""
    m = _model(_pad_to_multiple_nodes(legacy), [("x", (1, 3, "L"))], ["y"])
    sess = check(tmp_path, m, [{"x": _rand(rng, 1, 3, n)} for n in (13, 8, 5, 22)], dims={"L": 22})
    assert "pad" in [o["type"] for o in sess.ops()]
    assert sess.run({"x": _rand(rng, 1, 3, 9)})["y"].shape == (1, 3, 12)


# ---------------------------------------------------------------- residual sums fused into convs

@pytest.mark.parametrize("c, m, k, spatial, group, act, note", [
    (8, 24, 1, (20, 21), 1, "Relu", "pointwise: the GEMM on x, its epilogue"),
    (16, 16, 3, (9, 11), 1, "Relu", "direct (implicit GEMM), junk columns dropped into y"),
    (96, 64, 1, (14, 13), 1, None, "pointwise with few positions: weight panels"),
    (200, 48, 1, (9, 10), 1, "Relu", "depth 200: the panels' and the GEMM's depth blocks differ"),
    (32, 32, 3, (12, 12), 1, "Clip", "3x3 on weight panels"),
    (24, 24, 3, (7, 9), 24, "Relu", "depthwise: the sum in a pass after the path"),
    (6, 10, 3, (3, 3), 1, "LeakyRelu", "few positions: the rows path, then the sum"),
    (5, 7, 3, (40,), 1, "Relu", "1-D"),
])
def test_conv_residual_sum_is_fused_with_the_add_bits(tmp_path, rng, c, m, k, spatial, group, act, note):
    """Conv -> Add(residual) [-> activation] becomes one conv with the residual as its sum:
    the same bits as the unfused ops (nerve, fusion off) and onnxruntime's values, for either
    operand order of the Add and a batch of 2."""
    sr = len(spatial)
    pads = [k // 2] * (2 * sr)
    for conv_first in (True, False):
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=pads, group=group)]
        nodes.append(helper.make_node("Add", ["c", "r"] if conv_first else ["r", "c"], ["s" if act else "y"]))
        if act == "Clip":
            nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["y"]))
        elif act:
            nodes.append(helper.make_node(act, ["s"], ["y"], **({"alpha": 0.1} if act == "LeakyRelu" else {})))
        fan = c // group * k ** sr  # unit-gain weights: the sums carry no cancellation beyond fp32's
        inits = [("w", _rand(rng, m, c // group, *([k] * sr)) / np.float32(np.sqrt(fan))), ("b", _rand(rng, m))]
        if act == "Clip":
            inits += [("lo", np.array(-0.5, np.float32)), ("hi", np.array(1.5, np.float32))]
        model = _model(nodes, [("x", ["N", c, *spatial]), ("r", ["N", m, *spatial])], ["y"], inits=inits)
        feeds = {"x": _rand(rng, 2, c, *spatial), "r": _rand(rng, 2, m, *spatial)}
        sess = check(tmp_path, model, feeds, dims={"N": 2})
        ops = sess.ops()
        assert [o["type"] for o in ops] in (["conv"], ["conv_packed"]), (note, ops)
        unfused = nerve.Session(_save(tmp_path, model), dims={"N": 2}, cache=False, fuse=False)
        assert len(unfused.ops()) > 1
        np.testing.assert_array_equal(sess.run(feeds)["y"], unfused.run(feeds)["y"])


def test_conv_sums_of_two_convs_and_a_residual_computed_later(tmp_path, rng):
    """Add(conv_a, conv_b): one conv takes the other's output as its sum; a residual computed
    after the conv in the graph's order moves the conv to the Add; a conv already carrying an
    activation keeps its Add."""
    w = [_rand(rng, 8, 8, 3, 3) / np.float32(np.sqrt(72)) for _ in range(3)]  # unit gain: no cancellation
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1] * 4),
             helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1] * 4),
             helper.make_node("Add", ["a", "b"], ["ab"]),
             helper.make_node("Conv", ["ab", "wc"], ["c"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["ab"], ["late"]),           # after conv c in the graph
             helper.make_node("Add", ["c", "late"], ["y"]),
             helper.make_node("Conv", ["y", "wa"], ["d"], pads=[1] * 4),
             helper.make_node("Relu", ["d"], ["dr"]),
             helper.make_node("Add", ["dr", "y"], ["z"])]              # a Relu before the Add: not fused
    model = _model(nodes, [("x", (1, 8, 10, 10))], ["z"], inits=[("wa", w[0]), ("wb", w[1]), ("wc", w[2])])
    feeds = {"x": _rand(rng, 1, 8, 10, 10)}
    sess = check(tmp_path, model, feeds)
    types = [o["type"] for o in sess.ops()]
    assert types.count("binary") == 1 and types.count("unary") == 1, types
    unfused = nerve.Session(_save(tmp_path, model), cache=False, fuse=False)
    np.testing.assert_array_equal(sess.run(feeds)["z"], unfused.run(feeds)["z"])


# ---------------------------------------------------------------- Col2Im

def _col2im_reference(x, image, block, strides, dil, pads):
    """numpy float64: each block's values added at their positions in the padded image."""
    sr = len(image)
    n, ck, L = x.shape
    c = ck // int(np.prod(block))
    padded = [image[i] + pads[i] + pads[sr + i] for i in range(sr)]
    grid = [(padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(sr)]
    y = np.zeros([n, c] + padded)
    cols = x.astype(np.float64).reshape([n, c] + list(block) + grid)
    for tap in np.ndindex(*block):
        for pos in np.ndindex(*grid):
            at = tuple(pos[i] * strides[i] + tap[i] * dil[i] for i in range(sr))
            y[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + tap + pos]
    return y[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(sr))]


@pytest.mark.parametrize("n, c, image, block, attrs", [
    (1, 2, [5, 5], [2, 2], {}),
    (2, 3, [9, 8], [3, 2], dict(strides=[2, 3], dilations=[1, 2], pads=[1, 0, 2, 1])),
    (1, 4, [7, 11], [2, 3], dict(strides=[3, 2], pads=[0, 1, 1, 0])),
    # an iSTFT's overlap-add: frames of 64 samples every 16, 'center' padding cut away
    (1, 1, [1, 256], [1, 64], dict(strides=[1, 16], pads=[0, 32, 0, 32])),
    (2, 1, [200], [40], dict(strides=[10], pads=[20, 20])),  # one axis
])
def test_col2im(tmp_path, rng, n, c, image, block, attrs):
    sr = len(image)
    strides, dil = attrs.get("strides", [1] * sr), attrs.get("dilations", [1] * sr)
    pads = attrs.get("pads", [0] * 2 * sr)
    grid = [(image[i] + pads[i] + pads[sr + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(sr)]
    x = _rand(rng, n, c * int(np.prod(block)), int(np.prod(grid)))
    inits = [("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    model = _model([node], [("x", list(x.shape))], ["y"], inits, opset=18)
    want = _col2im_reference(x, image, block, strides, dil, pads)
    sess = check(tmp_path, model, {"x": x}, reference=lambda feeds: {"y": want.astype(np.float32)})
    assert [o["type"] for o in sess.ops()] == ["col2im"]
    if sr == 2:  # onnxruntime agrees (it runs 2-D images)
        np.testing.assert_allclose(sess.run({"x": x})["y"], _ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- RoiAlign

@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("opset, coord", [(16, "half_pixel"), (16, "output_half_pixel"), (10, None)])
@pytest.mark.parametrize("ratio, scale, out", [(0, 0.25, (7, 7)), (2, 1.0, (3, 5))])
def test_roi_align(tmp_path, rng, mode, opset, coord, ratio, scale, out):
    """Regions inside, across the border, tiny and wider than the map, on two images, against
    onnxruntime (its max mode: the largest weighted corner of each sample)."""
    x = _rand(rng, 2, 3, 13, 17)
    img = np.array([13, 17]) / scale
    lo = rng.uniform(-0.2, 0.9, (9, 2)) * img[::-1]
    size = rng.uniform(0.02, 0.8, (9, 2)) * img[::-1]
    rois = np.concatenate([lo, lo + size], axis=1).astype(np.float32)
    rois[0] = [-20, -20, 5 / scale, 4 / scale]                 # starts outside the map
    rois[1] = [1, 1, 1.2, 1.1]                                  # smaller than a cell
    batch = rng.integers(0, 2, 9).astype(np.int64)
    attrs = dict(mode=mode, output_height=out[0], output_width=out[1], sampling_ratio=ratio, spatial_scale=scale)
    if coord is not None:
        attrs["coordinate_transformation_mode"] = coord
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 13, 17]),
                                            helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["r", 4]),
                                            helper.make_tensor_value_info("batch", TensorProto.INT64, ["r"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    sess = check(tmp_path, m, [{"x": x, "rois": rois, "batch": batch}, {"x": x, "rois": rois[:2], "batch": batch[:2]}],
                 dims={"r": 9})
    with pytest.raises(nerve.InputError, match="batch"):
        sess.run({"x": x, "rois": rois[:3], "batch": np.array([0, 2, 1], np.int64)})


# ---------------------------------------------------------------- DeformConv

@pytest.mark.parametrize("xs, ws, attrs, with_bias, with_mask", [
    ((1, 3, 9, 11), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True, False),
    ((2, 4, 8, 7), (6, 2, 3, 2), dict(group=2, offset_group=2, strides=[2, 1], dilations=[1, 2],
                                      pads=[1, 0, 0, 2]), True, True),                  # DCNv2: masked
    ((1, 6, 10, 10), (3, 6, 1, 1), dict(offset_group=3), False, True),
])
def test_deform_conv(tmp_path, rng, xs, ws, attrs, with_bias, with_mask):
    """Offsets up to 3 cells (many samples leave the map and read zero) against onnxruntime;
    zero offsets and a mask of ones give the plain Conv."""
    kernel = list(ws[2:])
    pads = attrs.get("pads", [0, 0, 0, 0])
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [(xs[2 + i] + pads[i] + pads[2 + i] - dl[i] * (kernel[i] - 1) - 1) // st[i] + 1 for i in range(2)]
    og, taps = attrs.get("offset_group", 1), kernel[0] * kernel[1]
    offset = (rng.standard_normal((xs[0], og * 2 * taps) + tuple(out)) * 1.5).astype(np.float32)
    ins = ["x", "w", "offset"] + (["b"] if with_bias else ([""] if with_mask else [])) + (["mask"] if with_mask else [])
    inits = [("w", _rand(rng, *ws))] + ([("b", _rand(rng, ws[0]))] if with_bias else [])
    feeds = {"x": _rand(rng, *xs), "offset": offset}
    inputs = [("x", list(xs)), ("offset", list(offset.shape))]
    if with_mask:
        feeds["mask"] = rng.uniform(0, 1, (xs[0], og * taps) + tuple(out)).astype(np.float32)
        inputs.append(("mask", list(feeds["mask"].shape)))
    node = helper.make_node("DeformConv", ins, ["y"], kernel_shape=kernel, **attrs)
    model = _model([node], inputs, ["y"], inits, opset=19)
    sess = check(tmp_path, model, feeds)
    assert [o["type"] for o in sess.ops()] == ["deform_conv"]
    plain = _model([helper.make_node("Conv", ["x", "w"] + (["b"] if with_bias else []), ["y"], kernel_shape=kernel,
                                     **{k: v for k, v in attrs.items() if k != "offset_group"})],
                   [("x", list(xs))], ["y"], inits, opset=19)
    zero = dict(feeds, offset=np.zeros_like(offset))
    if with_mask:
        zero["mask"] = np.ones_like(feeds["mask"])
    np.testing.assert_allclose(sess.run(zero)["y"], _ort(plain, {"x": feeds["x"]})["y"], rtol=RTOL, atol=ATOL)
