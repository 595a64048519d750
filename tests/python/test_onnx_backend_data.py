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
    (r"test_(AvgPool|MaxPool)3d", "3-D pooling is not supported"),
    (r"test_Conv3d", "3-D convolution is not supported"),
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
