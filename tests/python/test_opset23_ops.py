"""ONNX opset 23's transformer ops (torch's dynamo exporter writes them from opset_version=23):
RMSNormalization, RotaryEmbedding (halves or interleaved pairs, partial rotation, 3-D input
with num_heads, position_ids), Attention (4-D and 3-D, grouped K/V heads, past K/V with the
present outputs, is_causal after the past, boolean and float masks, a fully masked row,
softcap, scale, qk_matmul_output). Each against onnx's reference implementation and
onnxruntime on fresh random inputs, with symbolic sequence lengths run at two sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import nerve
from helpers import older_ort_differs, ort_run

F32 = np.float32


def _model(node, inputs, outputs):
    g = h.make_graph([node], "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, None) for n, t in outputs])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 23)])
    m.ir_version = 10
    return m


def _check(tmp_path, m, feeds_list, dims=None):
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    sess = nerve.Session(path, dims=dims, cache=False)
    for feeds in feeds_list:
        got = sess.run(feeds)
        ref = dict(zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, feeds)))
        ort = ort_run(m, feeds)
        for name, want in ref.items():
            assert got[name].shape == want.shape, name
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=f"{name} vs onnx.reference")
            np.testing.assert_allclose(got[name], ort[name], rtol=1e-5, atol=1e-5, err_msg=f"{name} vs onnxruntime")
    return sess


def _randn(rng, *shape):
    return rng.standard_normal(shape).astype(F32)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(tmp_path, rng, axis):
    scale_shape = [5, 16] if axis == 1 else [16]
    m = _model(h.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-4),
               [("x", T.FLOAT, [2, "n", 16]) if axis == -1 else ("x", T.FLOAT, [2, 5, 16]), ("s", T.FLOAT, scale_shape)],
               [("y", T.FLOAT)])
    n = [7, 3] if axis == -1 else [5, 5]
    _check(tmp_path, m, [{"x": _randn(rng, 2, k, 16), "s": _randn(rng, *scale_shape)} for k in n],
           dims={"n": 7} if axis == -1 else None)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [0, 6])
def test_rotary_embedding_4d(tmp_path, rng, interleaved, rot):
    half = (rot or 10) // 2
    m = _model(h.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], interleaved=interleaved,
                           rotary_embedding_dim=rot),
               [("x", T.FLOAT, [2, 3, "seq", 10]), ("c", T.FLOAT, [2, "seq", half]), ("s", T.FLOAT, [2, "seq", half])],
               [("y", T.FLOAT)])
    _check(tmp_path, m, [{"x": _randn(rng, 2, 3, n, 10), "c": _randn(rng, 2, n, half), "s": _randn(rng, 2, n, half)}
                         for n in (9, 4)], dims={"seq": 9})


def test_rotary_embedding_3d_with_position_ids(tmp_path, rng):
    m = _model(h.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=3),
               [("x", T.FLOAT, [2, "seq", 24]), ("c", T.FLOAT, [10, 4]), ("s", T.FLOAT, [10, 4]),
                ("p", T.INT64, [2, "seq"])], [("y", T.FLOAT)])
    _check(tmp_path, m, [{"x": _randn(rng, 2, n, 24), "c": _randn(rng, 10, 4), "s": _randn(rng, 10, 4),
                          "p": rng.integers(0, 10, (2, n)).astype(np.int64)} for n in (5, 2)], dims={"seq": 5})


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_grouped_heads_with_past(tmp_path, rng, causal):
    B, Hq, Hkv, D = 2, 4, 2, 8
    m = _model(h.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pres_k", "pres_v"], is_causal=causal),
               [("q", T.FLOAT, [B, Hq, "s", D]), ("k", T.FLOAT, [B, Hkv, "s", D]), ("v", T.FLOAT, [B, Hkv, "s", D]),
                ("pk", T.FLOAT, [B, Hkv, "p", D]), ("pv", T.FLOAT, [B, Hkv, "p", D])],
               [("y", T.FLOAT), ("pres_k", T.FLOAT), ("pres_v", T.FLOAT)])
    feeds = [{"q": _randn(rng, B, Hq, s, D), "k": _randn(rng, B, Hkv, s, D), "v": _randn(rng, B, Hkv, s, D),
              "pk": _randn(rng, B, Hkv, p, D), "pv": _randn(rng, B, Hkv, p, D)} for s, p in ((5, 3), (1, 6))]
    _check(tmp_path, m, feeds, dims={"s": 5, "p": 6})


def test_attention_3d_boolean_mask_softcap_and_weights(tmp_path, rng):
    """3-D Q/K/V with head counts, a boolean mask with one row fully masked (zeros, not NaN),
    softcap, an explicit scale and the softmax weights as the 4th output."""
    B, S, T_, H, D = 2, 5, 7, 4, 8
    m = _model(h.make_node("Attention", ["q", "k", "v", "m"], ["y", "", "", "w"], q_num_heads=H, kv_num_heads=H,
                           softcap=2.0, scale=0.3, qk_matmul_output_mode=3),
               [("q", T.FLOAT, [B, S, H * D]), ("k", T.FLOAT, [B, T_, H * D]), ("v", T.FLOAT, [B, T_, H * D]),
                ("m", T.BOOL, [B, 1, S, T_])], [("y", T.FLOAT), ("w", T.FLOAT)])
    mask = rng.random((B, 1, S, T_)) < 0.7
    mask[0, 0, 1, :] = False
    older_ort_differs("its Attention adds the mask before the softcap (the ONNX reference caps first), so "
                      "masked positions keep a weight")
    feeds = {"q": _randn(rng, B, S, H * D), "k": _randn(rng, B, T_, H * D), "v": _randn(rng, B, T_, H * D), "m": mask}
    sess = _check(tmp_path, m, [feeds])
    assert np.all(sess.run(feeds)["w"][0, :, 1] == 0)


def test_attention_float_mask(tmp_path, rng):
    B, S, T_, H, D = 1, 4, 6, 2, 8
    m = _model(h.make_node("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=H, kv_num_heads=H),
               [("q", T.FLOAT, [B, S, H * D]), ("k", T.FLOAT, [B, T_, H * D]), ("v", T.FLOAT, [B, T_, H * D]),
                ("m", T.FLOAT, [S, T_])], [("y", T.FLOAT)])
    _check(tmp_path, m, [{"q": _randn(rng, B, S, H * D), "k": _randn(rng, B, T_, H * D),
                          "v": _randn(rng, B, T_, H * D), "m": _randn(rng, S, T_)}])


def test_unsupported_forms_name_the_node(tmp_path):
    m = _model(h.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], name="rope"),
               [("x", T.FLOAT, [1, 5, 24]), ("c", T.FLOAT, [1, 5, 4]), ("s", T.FLOAT, [1, 5, 4])], [("y", T.FLOAT)])
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(nerve.ModelError, match="rope.*num_heads"):
        nerve.compile(tmp_path / "m.onnx", cache=False)
