"""GridSample (x [N, C, H, W] sampled at grid [N, Ho, Wo, 2]) in every mode, padding and
corner alignment, at opset 16 (bilinear/bicubic) and 20 (linear/cubic), on grids reaching
well outside [-1, 1], exact corners and awkward sizes (an axis of 1): against onnxruntime,
and onnx's reference implementation where they agree on the definition (the reference clamps
a cubic coordinate to the border; onnxruntime and PyTorch clamp its taps: nerve follows
them, as models come from PyTorch)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import nerve
from helpers import ort_run

CASES = [(16, m, p, a) for m, p, a in itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [0, 1])]
CASES += [(20, m, p, a) for m, p, a in itertools.product(["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1])]


def _model(opset, mode, padding, align):
    g = h.make_graph([h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding,
                                  align_corners=align)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3, "h", "w"]),
                      h.make_tensor_value_info("g", T.FLOAT, [2, "ho", "wo", 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    return m


@pytest.mark.parametrize("opset, mode, padding, align", CASES)
def test_grid_sample(tmp_path, rng, opset, mode, padding, align):
    m = _model(opset, mode, padding, align)
    onnx.save(m, tmp_path / "m.onnx")
    sess = nerve.Session(tmp_path / "m.onnx", cache=False)  # dims bound by the first feeds, then grown
    for H, W, Ho, Wo in ((5, 7, 4, 6), (6, 1, 2, 5), (9, 8, 3, 3)):
        x = rng.standard_normal((2, 3, H, W)).astype(np.float32)
        grid = (rng.random((2, Ho, Wo, 2)) * 3.2 - 1.6).astype(np.float32)
        grid[0, 0, 0], grid[0, 0, 1], grid[1, 0, 0] = (-1, -1), (1, 1), (0, 0)
        feeds = {"x": x, "g": grid}
        got = sess.run(feeds)["y"]
        np.testing.assert_allclose(got, ort_run(m, feeds)["y"], rtol=1e-5, atol=1e-5)
        if opset >= 20 and not (mode == "cubic" and padding == "border") and min(H, W) > 1:
            np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5, atol=1e-5)


def test_grid_sample_refuses_what_it_does_not_do(tmp_path):
    g = h.make_graph([h.make_node("GridSample", ["x", "g"], ["y"], name="gs3d")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 4, 4]),
                      h.make_tensor_value_info("g", T.FLOAT, [1, 2, 2, 2, 3])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(nerve.ModelError, match="gs3d.*2 spatial axes"):
        nerve.compile(tmp_path / "m.onnx", cache=False)
