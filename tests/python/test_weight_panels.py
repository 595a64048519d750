"""Weights packed as panels at compile time (kernels.h): convs (op conv_packed, the gemm
variant's `panels` kernel) and linears (op linear_panels, its `rows_panels` kernel, with the
fused layernorm too). Which ops take them, that they match a float64 reference at awkward
sizes (outputs across whole and partial 64-wide panels, groups, strides, dilations, uneven
pads, 1-D and 2-D, batches, fused activations, symbolic sizes), bit-identical across thread
counts, that the plan holds the panels instead of the fp32 weight, and that a malformed
panel weight is a clear error."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402
from nerve.compiler.graph import Op, Program, Value  # noqa: E402
from nerve.compiler.passes import panels_floats  # noqa: E402
from nerve.session import run_program_once  # noqa: E402


def _conv_model(w, b, x_shape, act=None, **attrs):
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if b is not None else []), ["c" if act else "y"], **attrs)]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "leaky":
        nodes.append(helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2))
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif act in ("hardswish", "sigmoid", "tanh"):
        op_type = {"hardswish": "HardSwish", "sigmoid": "Sigmoid", "tanh": "Tanh"}[act]
        nodes.append(helper.make_node(op_type, ["c"], ["y"]))
    inits = [numpy_helper.from_array(w, "w")]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "b"))
    if act == "clip":
        inits += [numpy_helper.from_array(np.float32(-0.5), "lo"), numpy_helper.from_array(np.float32(0.75), "hi")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv_act_ref(x, w, b, group, strides, dil, pads, act):
    """_conv_ref, then the activation _conv_model appends (relu, clip to [-0.5, 0.75], or
    leaky with slope 0.2)."""
    want = _conv_ref(x, w, b, group, strides, dil, pads)
    if act == "relu":
        return np.maximum(want, 0.0)
    if act == "leaky":
        return np.where(want < 0, 0.2 * want, want)
    if act in ("silu", "sigmoid"):
        s = 1.0 / (1.0 + np.exp(-want))
        return want * s if act == "silu" else s
    if act == "hardswish":
        return want * np.clip(want / 6.0 + 0.5, 0.0, 1.0)
    if act == "tanh":
        return np.tanh(want)
    return np.clip(want, -0.5, 0.75) if act == "clip" else want


def _conv_ref(x, w, b, group, strides, dil, pads):
    """float64 convolution, NC[H]W, pads = begins + ends (ONNX order)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    sr = x.ndim - 2
    if sr == 1:
        x, w = x[:, :, None, :], w[:, :, None, :]
        strides, dil, pads = [1] + list(strides), [1] + list(dil), [0, pads[0], 0, pads[1]]
    n, c, ih, iw = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for gi in range(group):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        for ki in range(kh):
            for kj in range(kw):
                r0, c0 = ki * dil[0], kj * dil[1]
                patch = xs[:, :, r0:r0 + strides[0] * (oh - 1) + 1:strides[0], c0:c0 + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, gi * mg:(gi + 1) * mg] += np.einsum("ncij,mc->nmij", patch, w[gi * mg:(gi + 1) * mg, :, ki, kj])
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y[:, :, 0, :] if sr == 1 else y


def _op_types(sess):
    return [o["type"] for o in sess.ops()]


CASES = [
    # x shape, M, kernel, group, strides, dilations, pads, act
    ((1, 5, 13, 11), 30, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), None),          # one partial panel (32 wide)
    ((2, 7, 9, 10), 65, (3, 3), 1, (1, 1), (1, 1), (1, 0, 1, 2), "relu"),        # a 64 panel + one of 16; uneven pads
    ((1, 24, 17, 19), 97, (3, 3), 1, (2, 2), (1, 1), (1, 1, 1, 1), "clip"),       # stride 2 (phases)
    ((1, 9, 21, 16), 130, (5, 3), 1, (3, 2), (2, 1), (2, 1, 3, 0), None),        # strides 3x2, dilation, 5x3
    ((1, 80, 12, 12), 96, (3, 3), 2, (1, 1), (1, 1), (1, 1, 1, 1), "relu"),      # 2 groups of 48 outputs
    ((1, 3, 37, 41), 127, (7, 7), 1, (2, 2), (1, 1), (3, 3, 3, 3), None),        # a stem: 3 input channels
    ((1, 300, 9, 9), 1025, (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), None),       # pointwise with a 1.2 MB weight
    ((1, 128, 17, 15), 257, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "relu"),    # 1.2 MB 3x3, 3 blocks of positions
    ((1, 96, 14, 13), 61, (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), "clip"),      # pointwise, small weight, 182 positions
    ((2, 13, 257), 47, (5,), 1, (1,), (1,), (2, 2), "relu"),                     # 1-D
    ((1, 40, 97), 63, (3,), 1, (2,), (3,), (0, 4), None),                        # 1-D, stride 2, dilation 3
    ((1, 6, 5, 4), 31, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), None),           # 20 positions
    ((1, 72, 12, 8), 72, (3, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), "leaky"),      # no padding, stride 1: x read in place
    ((1, 48, 11, 8), 70, (1, 3), 1, (1, 1), (1, 1), (0, 1, 0, 1), "leaky"),      # a row of 8 padded to 10
    ((2, 16, 40), 40, (3,), 1, (1,), (2,), (0, 0), "leaky"),                     # 1-D, no padding, dilation 2
    ((1, 200, 6, 16), 150, (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), None),       # 3 panels x halves of the positions
    ((1, 40, 7, 9), 170, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "relu"),       # the same, 3x3
    ((1, 200, 3, 4), 384, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), None),        # 12 positions: 6 panels, one each
    ((1, 8, 16, 52), 28, (3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "relu"),       # 832 positions: cuts on lines of y
]


@pytest.mark.parametrize("x_shape,m,kernel,group,strides,dil,pads,act", CASES)
def test_conv_panels_match_float64(tmp_path, rng, x_shape, m, kernel, group, strides, dil, pads, act):
    c = x_shape[1]
    fan = c // group * int(np.prod(kernel))
    w = (rng.standard_normal((m, c // group) + kernel) / np.sqrt(fan)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if m % 2 else None
    model = _conv_model(w, b, x_shape, act, kernel_shape=list(kernel), group=group, strides=list(strides),
                        dilations=list(dil), pads=list(pads))
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert _op_types(sess) == ["conv_packed"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = _conv_act_ref(x, w, b, group, strides, dil, pads, act)
    got = sess.run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.sqrt(fan))
    # the split of the panels and positions among threads changes no bit
    for threads in (1, 3, 4):
        np.testing.assert_array_equal(nerve.Session(path, cache=False, threads=threads).run({"x": x})["y"], got)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_position_gives_the_same_bits_wherever_it_falls(tmp_path, rng, threads):
    """With a weight past L2 (300 -> 1025, 1.2 MB) the first position of a block streams the
    panels in one pass and the others take the micro-tiles: the same multiply-add chain, so a
    pointwise conv's output at a pixel has the same bits whether that pixel comes first (the
    image cropped to start there) or in the middle."""
    w = (rng.standard_normal((1025, 300, 1, 1)) / np.sqrt(300)).astype(np.float32)
    x = rng.standard_normal((1, 300, 9, 9)).astype(np.float32)
    whole = nerve.Session(_conv_model(w, None, x.shape), cache=False, threads=threads)
    assert _op_types(whole) == ["conv_packed"]
    got = whole.run({"x": x})["y"]
    for row in (1, 4):
        crop = np.ascontiguousarray(x[:, :, row:])
        part = nerve.Session(_conv_model(w, None, crop.shape), cache=False, threads=threads).run({"x": crop})["y"]
        np.testing.assert_array_equal(part, got[:, :, row:])


def test_conv_panels_with_symbolic_sizes(tmp_path, rng):
    """The scratch is reserved at the dims' bounds; smaller runs use part of it."""
    w = (rng.standard_normal((70, 12, 3, 3)) / 6).astype(np.float32)
    model = _conv_model(w, None, (1, 12, "h", "w"), "relu", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    path = tmp_path / "sym.onnx"
    path.write_bytes(model.SerializeToString())
    sess = nerve.Session(path, dims={"h": 40, "w": 33}, cache=False)
    assert _op_types(sess) == ["conv_packed"]
    for hw in ((40, 33), (7, 30), (1, 1), (23, 2)):
        x = rng.standard_normal((1, 12) + hw).astype(np.float32)
        want = np.maximum(_conv_ref(x, w, None, 1, (1, 1), (1, 1), (1, 1, 1, 1)), 0.0)
        np.testing.assert_allclose(sess.run({"x": x})["y"], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("x_shape,m,kernel,group", [
    ((1, 32, 20, 20), 32, (3, 3), 32),   # depthwise: its own direct loop
    ((1, 64, 20, 20), 64, (3, 3), 8),    # 8 outputs per group: panels of 16 would be half zeros
    ((1, 16, 20, 20), 17, (3, 3), 1),    # 17 outputs: a panel of 32, nearly half zeros
    ((1, 64, 20, 20), 128, (1, 1), 1),   # pointwise with a small weight: the GEMM on x itself
])
def test_convs_that_keep_the_implicit_gemm(tmp_path, rng, x_shape, m, kernel, group):
    w = (rng.standard_normal((m, x_shape[1] // group) + kernel) * 0.1).astype(np.float32)
    pads = [k // 2 for k in kernel] * 2
    model = _conv_model(w, None, x_shape, None, kernel_shape=list(kernel), group=group, pads=pads)
    sess = nerve.Session(model, cache=False)
    assert _op_types(sess) == ["conv"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], _conv_ref(x, w, None, group, (1, 1), (1, 1), pads),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("x_shape, m, kernel, group, strides, dil, act, b", [
    ((1, 6, 3, 3), 32, (3, 3), 1, (1, 1), (1, 1), None, False),      # 9 positions
    ((2, 129, 4), 128, (3,), 1, (1,), (1,), "relu", True),          # silero's first conv, 2 images
    ((1, 64, 7), 70, (3,), 1, (2,), (1,), "clip", True),            # stride 2: 4 positions, 70 outputs
    ((1, 32, 4, 4), 64, (3, 3), 2, (1, 1), (2, 2), None, True),     # groups of 32 outputs, dilation 2
    ((1, 300, 2, 2), 96, (1, 1), 1, (1, 1), (1, 1), "relu", False),  # pointwise, 4 positions
])
def test_few_position_convs_take_panels_through_their_rows(tmp_path, rng, x_shape, m, kernel, group, strides, dil,
                                                           act, b):
    """At most 16 output positions (a streaming model's frames): conv_packed, whose transposed
    im2col rows go through linear_panels (op_conv.c conv_group_rows); float64 reference."""
    w = (rng.standard_normal((m, x_shape[1] // group) + kernel) * 0.1).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32) if b else None
    pads = [k // 2 for k in kernel] * 2
    model = _conv_model(w, bias, x_shape, act, kernel_shape=list(kernel), group=group, pads=pads,
                        strides=list(strides), dilations=list(dil))
    sess = nerve.Session(model, cache=False)
    assert _op_types(sess) == ["conv_packed"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = _conv_act_ref(x, w, bias, group, strides, dil, pads, act)
    np.testing.assert_allclose(sess.run({"x": x})["y"], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("x_shape, m, kernel, dil, act, op", [
    ((1, 24, 30, 12), 24, (3, 1), (1, 1), "leaky", "conv"),  # 24 outputs: the implicit GEMM
    ((1, 72, 14, 8), 72, (3, 3), (1, 2), "leaky", "conv_packed"),
    ((2, 48, 9, 7), 70, (2, 3), (2, 1), "relu", "conv_packed"),
    ((1, 40, 33), 17, (5,), (1,), "clip", "conv"),            # 1-D, 17 outputs
])
def test_unpadded_stride_one_convs_read_x_in_place(tmp_path, rng, monkeypatch, x_shape, m, kernel, dil, act, op):
    """Without padding or stride a conv's phases would be a copy of x, so both GEMM paths read
    x itself (op_conv.c conv_phases): against float64, and the panels (activation in the
    kernel's store) give the bits of the plain conv (activation in its epilogue); x is left
    as it was, whether a graph input or an op's output."""
    c, sr = x_shape[1], len(kernel)
    w = (rng.standard_normal((m, c) + kernel) / np.sqrt(c * np.prod(kernel))).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    model = _conv_model(w, b, x_shape, act, kernel_shape=list(kernel), dilations=list(dil), pads=[0] * (2 * sr))
    x = rng.standard_normal(x_shape).astype(np.float32)
    x_before = x.copy()
    sess = nerve.Session(model, cache=False)
    assert _op_types(sess) == [op]
    got = sess.run({"x": x})["y"]
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_allclose(got, _conv_act_ref(x, w, b, 1, (1,) * sr, dil, [0] * (2 * sr), act),
                               rtol=1e-5, atol=2e-5 * np.sqrt(c * np.prod(kernel)))
    monkeypatch.setenv("NERVE_CONV_PANELS", "0")
    plain = nerve.Session(model, cache=False)
    assert _op_types(plain) == ["conv"]
    np.testing.assert_array_equal(plain.run({"x": x})["y"], got)
    # the conv's input an op's output (an arena buffer), run twice: the same bits
    relu_first = _conv_model(w, b, x_shape, act, kernel_shape=list(kernel), dilations=list(dil), pads=[0] * (2 * sr))
    relu_first.graph.node.insert(0, helper.make_node("Relu", ["x"], ["xr"]))
    relu_first.graph.node[1].input[0] = "xr"
    inner = nerve.Session(relu_first, cache=False)
    want = plain.run({"x": np.maximum(x, 0)})["y"]
    for _ in range(2):
        np.testing.assert_array_equal(inner.run({"x": x})["y"], want)


@pytest.mark.parametrize("act", ["silu", "hardswish", "sigmoid", "tanh"])
def test_conv_panels_with_other_fused_activations(tmp_path, rng, monkeypatch, act):
    """An activation the panels do not apply as they store (SiLU, HardSwish, sigmoid, tanh)
    runs in the conv's epilogue on each block of outputs: the float64 values, the plain conv's
    bits, and the same bits on 3 threads. 400 positions span several of the kernel's blocks,
    70 outputs a whole panel and a partial one."""
    w = (rng.standard_normal((70, 20, 3, 3)) / np.sqrt(180)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    model = _conv_model(w, b, (1, 20, 20, 20), act, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    x = (2 * rng.standard_normal((1, 20, 20, 20))).astype(np.float32)
    sess = nerve.Session(model, cache=False)
    assert _op_types(sess) == ["conv_packed"]
    got = sess.run({"x": x})["y"]
    np.testing.assert_allclose(got, _conv_act_ref(x, w, b, 1, (1, 1), (1, 1), [1, 1, 1, 1], act), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(nerve.Session(model, cache=False, threads=3).run({"x": x})["y"], got)
    monkeypatch.setenv("NERVE_CONV_PANELS", "0")
    plain = nerve.Session(model, cache=False)
    assert _op_types(plain) == ["conv"]
    np.testing.assert_array_equal(plain.run({"x": x})["y"], got)


def test_conv_panels_replace_the_fp32_weight_and_can_be_turned_off(tmp_path, rng, monkeypatch):
    w = (rng.standard_normal((100, 30, 3, 3)) * 0.1).astype(np.float32)  # panels: 112 rows of 270
    model = _conv_model(w, None, (1, 30, 16, 16), None, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    x = rng.standard_normal((1, 30, 16, 16)).astype(np.float32)
    packed = nerve.Session(model, cache=False)
    assert packed.memory_report()["weight_bytes"] == 4 * panels_floats(100, 270) == 4 * 112 * 270
    monkeypatch.setenv("NERVE_CONV_PANELS", "0")
    plain = nerve.Session(model, cache=False)
    assert _op_types(plain) == ["conv"]
    assert plain.memory_report()["weight_bytes"] == w.nbytes
    np.testing.assert_allclose(packed.run({"x": x})["y"], plain.run({"x": x})["y"], rtol=1e-5, atol=1e-5)


def _run_conv_packed(panels: np.ndarray, m: int, kernel=(3, 3)):
    x = Value("x", np.float32, (1, 4, 6, 6), const=np.ones((1, 4, 6, 6), np.float32))
    wv = Value("w", np.float32, panels.shape, const=panels)
    y = Value("y", np.float32, (1, m, 6, 6))
    scratch = Value("s", np.uint8, (1 << 16,))
    op = Op("conv_packed", [x, wv, None], [y], iattr=[2, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, m] + list(kernel),
            fattr=[0, 0], scratch=scratch, name="bad_conv")
    y.producer = op
    return run_program_once(Program(ops=[op], inputs=[], outputs=[y], symbols={}, binds=[]))[0]


def test_conv_packed_checks_its_panels():
    """The panels' size must be the one M and K give (a truncated or foreign weight is refused
    by name before anything is read); the right size runs."""
    k = 4 * 9
    good = np.zeros(panels_floats(20, k), np.float32)
    assert _run_conv_packed(good, 20).shape == (1, 20, 6, 6)
    with pytest.raises(nerve.NerveError, match="weight panels have"):
        _run_conv_packed(good[:-1].copy(), 20)
    with pytest.raises(nerve.NerveError, match="weight panels have"):
        _run_conv_packed(good, 40)  # another M


def _linear_model(w, b, x_shape, ln=None, act=None):
    """x · wᵀ (+ b) as MatMul + Add, optionally after a LayerNormalization (gamma, beta) and
    followed by an activation."""
    nodes, inits = [], [numpy_helper.from_array(np.ascontiguousarray(w.T), "wt")]
    src = "x"
    if ln is not None:
        nodes.append(helper.make_node("LayerNormalization", ["x", "g"] + (["be"] if ln[1] is not None else []), ["n"],
                                      axis=-1, epsilon=1e-5))
        inits.append(numpy_helper.from_array(ln[0], "g"))
        if ln[1] is not None:
            inits.append(numpy_helper.from_array(ln[1], "be"))
        src = "n"
    nodes.append(helper.make_node("MatMul", [src, "wt"], ["mm"]))
    last = "mm"
    if b is not None:
        nodes.append(helper.make_node("Add", ["mm", "b"], ["lin"]))
        inits.append(numpy_helper.from_array(b, "b"))
        last = "lin"
    if act == "gelu":
        nodes.append(helper.make_node("Gelu", [last], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def _linear_ref(x, w, b, ln, act):
    x = x.astype(np.float64)
    if ln is not None:
        mean = x.mean(-1, keepdims=True)
        x = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * ln[0]
        if ln[1] is not None:
            x = x + ln[1]
    y = x @ w.astype(np.float64).T
    if b is not None:
        y = y + b
    if act == "gelu":
        from math import erf
        y = 0.5 * y * (1.0 + np.vectorize(erf)(y / np.sqrt(2.0)))
    return y


LINEAR_CASES = [
    # x shape, out, layernorm (None, "beta", "gamma"), act
    ((32, 13), 97, None, None),
    ((2, 37, 130), 65, None, "gelu"),
    ((1, 100, 257), 300, "beta", None),
    ((75, 64), 31, "gamma", None),
    ((3, 20, 96), 384, "beta", "gelu"),
    ((40, 1025), 64, None, None),
]


@pytest.mark.parametrize("x_shape,n,ln,act", LINEAR_CASES)
def test_linear_panels_match_float64(tmp_path, rng, x_shape, n, ln, act):
    k = x_shape[-1]
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if n % 2 else None
    lnp = None
    if ln is not None:
        lnp = (rng.uniform(0.5, 1.5, k).astype(np.float32), rng.standard_normal(k).astype(np.float32) if ln == "beta"
               else None)
    path = tmp_path / "lin.onnx"
    path.write_bytes(_linear_model(w, b, x_shape, lnp, act).SerializeToString())
    sess = nerve.Session(path, cache=False)
    assert _op_types(sess) == ["layernorm_linear_panels" if ln else "linear_panels"]
    x = (rng.standard_normal(x_shape) + 0.5).astype(np.float32)
    got = sess.run({"x": x})["y"]
    want = _linear_ref(x, w, b, lnp, act)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-5 * np.sqrt(k))
    # the split of the panels and rows among threads changes no bit
    for threads in (1, 3, 4):
        np.testing.assert_array_equal(nerve.Session(path, cache=False, threads=threads).run({"x": x})["y"], got)


def test_linears_that_keep_their_weight(tmp_path, rng):
    """A decode step's few rows with fewer than 32 outputs keep the row-major weight the dot
    kernels stream (with 32 or more, panels win there: test_few_rows_go_to_panels), and so do
    13-31 rows (the outer-product path) and narrow layers (panels nearly half zeros); a weight
    another op also reads (a tied embedding) is not doubled."""
    w = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32)
    few_outputs = nerve.Session(_linear_model(w[:20], None, (1, 8, 48)), cache=False)
    assert _op_types(few_outputs) == ["linear"]
    mid = nerve.Session(_linear_model(w, None, (1, 20, 48)), cache=False)
    assert _op_types(mid) == ["linear"]
    narrow = nerve.Session(_linear_model(w[:17], None, (1, 64, 48)), cache=False)  # 17 outputs: a panel of 32
    assert _op_types(narrow) == ["linear"]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [40])
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["e"]),
                           helper.make_node("Gemm", ["e", "table"], ["y"], transB=1)], "tied", [ids],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "table")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = nerve.Session(m, cache=False)
    assert "linear" in _op_types(sess)  # the table's bytes, stored once for both (by content)
    y = sess.run({"ids": np.arange(40) % 64})["y"]
    np.testing.assert_allclose(y, w[np.arange(40) % 64] @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, n, k", [(1, 128, 32), (4, 64, 48), (12, 300, 17), (1, 1024, 256)])
def test_few_rows_go_to_panels(tmp_path, rng, rows, n, k):
    """1-12 rows (a streaming step) with 32 or more outputs: panels, which beat the dot
    kernels' horizontal sums there (bench/RESULTS.md stop 33); the same numbers as onnxruntime."""
    w = (rng.standard_normal((n, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    m = _linear_model(w, b, (1, rows, k))
    sess = nerve.Session(m, cache=False)
    assert _op_types(sess) == ["linear_panels"]
    x = rng.standard_normal((1, rows, k)).astype(np.float32)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(sess.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, k, ln, rows", [(97, 257, False, 7), (300, 40, True, 5), (64, 130, False, 12),
                                        (8210, 1024, False, 3), (4100, 520, True, 7), (2100, 1000, False, 13)])
def test_one_row_gives_the_bits_of_that_row_among_many(tmp_path, rng, n, k, ln, rows):
    """A one-row product (a decode or streaming step) reads each panel block in one pass; so
    does, on AVX2, the first row of a weight of 4 MiB or more (every row at 2-4 rows, 8210 x
    1024 here), the other rows sharing the micro-tiles, as all rows do below 4 MiB. Same
    chain of multiply-adds per output either way: row r alone equals row r of the many-row
    product bit for bit, and both are within float64's budget."""
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    lnp = (rng.uniform(0.5, 1.5, k).astype(np.float32), None) if ln else None
    x = (rng.standard_normal((rows, k)) + 0.25).astype(np.float32)
    many = nerve.Session(_linear_model(w, b, (rows, k), lnp, None), cache=False, threads=1)
    one = nerve.Session(_linear_model(w, b, (1, k), lnp, None), cache=False, threads=1)
    kind = "layernorm_linear_panels" if ln else "linear_panels"
    assert _op_types(many) == [kind] and _op_types(one) == [kind]
    got = many.run({"x": x})["y"]
    np.testing.assert_allclose(got, _linear_ref(x, w, b, lnp, None), rtol=1e-5, atol=3e-5 * np.sqrt(k))
    for r in (0, rows // 2, rows - 1):
        np.testing.assert_array_equal(one.run({"x": x[r:r + 1]})["y"][0], got[r])


def test_linear_panels_check_their_operands():
    """A panel weight of the wrong size, beta without gamma: clear errors naming the op."""
    x = Value("x", np.float32, (40, 36), const=np.ones((40, 36), np.float32))
    y = Value("y", np.float32, (40, 20))

    def run(panels, n, extra=(), op_type="linear_panels"):
        wv = Value("w", np.float32, panels.shape, const=panels)
        op = Op(op_type, [x, wv, None] + list(extra), [y], iattr=[0, n], fattr=[0, 0, 1e-5], name="bad_lin")
        y.producer = op
        return run_program_once(Program(ops=[op], inputs=[], outputs=[y], symbols={}, binds=[]))[0]

    good = np.zeros(panels_floats(20, 36), np.float32)
    assert run(good, 20).shape == (40, 20)
    with pytest.raises(nerve.NerveError, match="weight panels have"):
        run(good[:-16].copy(), 20)
    beta = Value("beta", np.float32, (36,), const=np.zeros(36, np.float32))
    with pytest.raises(nerve.NerveError, match="beta without gamma"):
        run(good, 20, [None, beta])
    gamma = Value("gamma", np.float32, (36,), const=np.ones(36, np.float32))
    assert run(good, 20, [gamma, beta], "layernorm_linear_panels").shape == (40, 20)
    with pytest.raises(nerve.NerveError, match="only for layernorm_linear_panels"):
        run(good, 20, [gamma])
    with pytest.raises(nerve.NerveError, match="gamma is required"):
        run(good, 20, op_type="layernorm_linear_panels")

