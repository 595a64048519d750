"""The real models the onnx wheel ships with their inputs and outputs (onnx/backend/test/data:
PyTorch's own converted modules and operators, and the hand-made "simple" graphs): each one
compiled by nerve and run on its stored inputs must give its stored outputs, or fail at
compile time with a ModelError that names what nerve does not support. The unsupported
kinds are listed here, so a new failure, a crash or a wrong number is a test failure."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import nerve  # noqa: E402
from nerve.compiler.onnx_import import dim_symbol  # noqa: E402

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CASES = sorted(d for kind in ("pytorch-converted", "pytorch-operator", "simple")
               for d in glob.glob(os.path.join(DATA, kind, "test_*")))

# what nerve does not do, by case name -> the words its ModelError must contain
UNSUPPORTED = [
    # float64 inputs (these hold values past float32's range): nerve computes float64 only where
    # the model makes it from float32 data
    (r"test_operator_add(_size1)?(_right|_singleton)?_broadcast$|test_operator_addconstant", "float64"),
    (r"test_expand_shape_model", "must be known when the model is compiled"),
    (r"test_gradient_of_add", "ai.onnx.preview.training"),
    (r"test_sequence_model8", "split must be known when the model is compiled"),  # split sizes fed at run time
    (r"test_strnorm_model", "StringNormalizer"),
]


def _tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


@pytest.mark.skipif(not CASES, reason="this onnx wheel ships no backend test data")
@pytest.mark.parametrize("case", CASES, ids=lambda d: f"{os.path.basename(os.path.dirname(d))}/{os.path.basename(d)}")
def test_backend_data_case(case):
    name = os.path.basename(case)
    model = onnx.load(os.path.join(case, "model.onnx"))
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    data = sorted(glob.glob(os.path.join(case, "test_data_set_*")))[0]
    feeds = {vi.name: _tensor(os.path.join(data, f"input_{i}.pb")) for i, vi in enumerate(inputs)}
    want = [_tensor(os.path.join(data, f"output_{i}.pb")) for i in range(len(model.graph.output))]
    dims = {dim_symbol(vi.name, k, d): feeds[vi.name].shape[k]
            for vi in inputs for k, d in enumerate(vi.type.tensor_type.shape.dim) if dim_symbol(vi.name, k, d)}
    expected_error = next((words for pattern, words in UNSUPPORTED if re.match(pattern, name)), None)
    if expected_error is not None:
        with pytest.raises(nerve.ModelError, match=re.escape(expected_error)):
            nerve.Session(os.path.join(case, "model.onnx"), dims=dims, cache=False)
        return
    got = nerve.Session(os.path.join(case, "model.onnx"), dims=dims, cache=False).run(feeds)
    for out, ref in zip(model.graph.output, want):
        g = got[out.name]
        assert g.shape == ref.shape and g.dtype == ref.dtype, (out.name, g.shape, g.dtype, ref.shape, ref.dtype)
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=out.name)
        else:
            np.testing.assert_array_equal(g, ref, err_msg=out.name)


# The onnx wheel's "light" model zoo: AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
# ShuffleNet, SqueezeNet, VGG-19, ZFNet-512 as exported for the ONNX model zoo (opset 9: LRN,
# BatchNormalization, Sum, Dropout, channel shuffles, Concat trees), with every weight made by a
# ConstantOfShape of 0.02, so every class comes out alike. Here each fill becomes a random
# initializer (He-scaled; 1-D parameters in [0.5, 1), which keeps BatchNormalization's variance
# positive) and a final Softmax is dropped, so the logits of a random image are compared with
# onnxruntime's. The three with 100-500 MB of fully connected weights are left out.
LIGHT = os.path.join(DATA, "light")
LIGHT_MODELS = ["densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet"]


def _light_with_weights(name, rng):
    model = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    known = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            known[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    kept, weights = [], []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in known:
            shape = [int(d) for d in known[node.input[0]]]
            if len(shape) == 1:
                w = rng.uniform(0.5, 1.0, shape)
            else:
                w = rng.standard_normal(shape) * np.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))
            weights.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.initializer.extend(weights)
    last = kept[-1]
    assert last.output[0] == model.graph.output[0].name
    if last.op_type == "Softmax":  # DenseNet-121 ends at its classifier's Conv
        kept.pop()
        del model.graph.output[:]
        model.graph.output.append(onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None))
    model.graph.node.extend(kept)
    return model


@pytest.mark.skipif(not os.path.isdir(LIGHT), reason="this onnx wheel ships no light models")
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_zoo_model_matches_onnxruntime(name, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(sum(map(ord, name)))
    model = _light_with_weights(name, rng)
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    feed_name = next(vi.name for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer})
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {feed_name: x})[0]
    got = nerve.Session(path, cache=False).run({feed_name: x})[model.graph.output[0].name]
    assert got.shape == want.shape and np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert np.argmax(got) == np.argmax(want)
