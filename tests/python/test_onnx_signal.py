"""ONNX's signal operators through the compiler (onnx_ops_signal.py): DFT (real and complex,
forward and inverse, onesided, dft_length shorter and longer than the signal, opsets 17 and
20), the window generators and MelWeightMatrix (constants of the plan), and an ONNX-native
log-mel front end built from them — against onnxruntime. (STFT: test_onnx_nn.py.)"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402


def _run_both(tmp_path, nodes, inputs, outputs, inits, opset, feeds, dims=None):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), k) for k, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 19 else 9
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    sess = nerve.Session(path, dims=dims or {}, cache=False)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = dict(zip(outputs, ref.run(None, feeds)))
    return sess, sess.run(feeds), want


def _close(got, want, n):
    """fp32 sums of n terms against onnxruntime's: a few eps·sqrt(n) of the largest value."""
    for k in want:
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        scale = max(float(np.abs(want[k]).max()), 1.0)
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=8 * np.finfo(np.float32).eps * np.sqrt(n) * scale,
                                   err_msg=k)


@pytest.mark.parametrize("shape, axis, length, inverse, onesided, opset", [
    ((2, 64, 1), 1, None, 0, 0, 17),      # real, full spectrum
    ((2, 64, 1), 1, None, 0, 1, 17),      # real, onesided
    ((3, 50, 2), 1, None, 0, 0, 17),      # complex
    ((3, 50, 2), 1, None, 1, 0, 17),      # inverse
    ((1, 40, 1), 1, 64, 0, 1, 17),        # dft_length > signal: zero padded
    ((1, 40, 1), 1, 32, 0, 0, 17),        # dft_length < signal: cut
    ((2, 5, 24, 1), 2, None, 0, 1, 17),   # a batch axis before and after
    ((2, 24, 5, 2), 1, None, 1, 0, 20),   # opset 20: axis as an input
    ((2, 5, 24, 1), -2, 30, 0, 0, 20),
])
def test_dft(tmp_path, rng, shape, axis, length, inverse, onesided, opset):
    x = rng.standard_normal(shape).astype(np.float32)
    inits, ins = [], ["x"]
    ins.append("len" if length else "")
    if length:
        inits.append(("len", np.array(length, np.int64)))
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        ins.append("axis")
        inits.append(("axis", np.array(axis, np.int64)))
    else:
        attrs["axis"] = axis
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("DFT", ins, ["y"], **attrs)
    _, got, ort_y = _run_both(tmp_path, [node], [("x", list(shape))], ["y"], inits, opset, {"x": x})
    # reference: numpy's FFT in float64 (onnxruntime's own fp32 DFT is a few 1e-5 off at
    # lengths that are not powers of two); onnxruntime fixes the layout and the conventions
    sig = np.moveaxis(x.astype(np.float64), axis, -2)
    sig = sig[..., 0] + 1j * sig[..., 1] if shape[-1] == 2 else sig[..., 0]
    n = length or sig.shape[-1]
    spec = np.fft.ifft(sig, n=n, axis=-1) if inverse else np.fft.fft(sig, n=n, axis=-1)
    if onesided:
        spec = spec[..., :n // 2 + 1]
    ref = np.moveaxis(np.stack([spec.real, spec.imag], axis=-1), -2, axis)
    assert ort_y["y"].shape == ref.shape
    np.testing.assert_allclose(ort_y["y"], ref, rtol=0, atol=1e-3 * max(np.abs(ref).max(), 1.0))
    _close(got, {"y": ref}, shape[axis] * shape[-1])


@pytest.mark.parametrize("shape, length", [
    ((2, 33, 2), None),      # 33 bins -> 64 samples (the default, an even length)
    ((1, 33, 2), 65),        # an odd length: no Nyquist bin
    ((3, 20, 2), 64),        # fewer bins than the length needs: the rest are zeros
    ((1, 40, 2), 30),        # more bins than the length reads: cut
    ((2, 17, 1), None),      # a real-only spectrum
])
def test_dft_inverse_onesided_is_irfft(tmp_path, rng, shape, length):
    """Opset 20's inverse + onesided DFT (a one-sided spectrum back to a real signal, what a
    vocoder's iSTFT does) against numpy's irfft in float64 (and onnxruntime's where it agrees).
    The imaginary parts of bin 0 and of the Nyquist bin are ignored, as irfft does."""
    x = rng.standard_normal(shape).astype(np.float32)
    inits, ins = [("axis", np.array(1, np.int64))], ["x", "len" if length else "", "axis"]
    if length:
        inits.append(("len", np.array(length, np.int64)))
    graph = helper.make_graph(
        [helper.make_node("DFT", ins, ["y"], inverse=1, onesided=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(a), k) for k, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    got = nerve.Session(tmp_path / "m.onnx", cache=False).run({"x": x})["y"]
    spec = x[..., 0].astype(np.float64) + (1j * x[..., 1] if shape[-1] == 2 else 0)
    n = length or 2 * (shape[1] - 1)
    ref = np.fft.irfft(spec, n=n, axis=1)[..., None]
    assert got.shape == ref.shape
    _close({"y": got}, {"y": ref}, 2 * shape[1])
    if shape[-1] == 2 and shape[1] == n // 2 + 1:
        # onnxruntime agrees where the bins are the length's (complex spectra); where they are
        # fewer or more it departs from numpy's, torch's and ONNX's reference irfft
        so = ort.SessionOptions()
        so.log_severity_level = 3
        want = ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})[0]
        _close({"y": got}, {"y": want}, 2 * shape[1])


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size, periodic", [(400, 1), (512, 0), (1, 1), (7, 0)])
def test_windows(tmp_path, op, size, periodic):
    node = helper.make_node(op, ["size"], ["w"], periodic=periodic)
    sess, got, want = _run_both(tmp_path, [node], [], ["w"], [("size", np.array(size, np.int64))], 17, {})
    np.testing.assert_allclose(got["w"], want["w"], rtol=0, atol=2e-7)
    assert sess.memory_report()["weight_bytes"] >= 4 * size   # a constant of the plan, no op


@pytest.mark.parametrize("mels, dft_length, rate, lo, hi", [
    (80, 400, 16000, 0.0, 8000.0), (40, 512, 16000, 20.0, 7600.0), (64, 1024, 44100, 50.0, 14000.0),
    (8, 64, 8000, 0.0, 3000.0)])
def test_mel_weight_matrix(tmp_path, mels, dft_length, rate, lo, hi):
    inits = [("m", np.array(mels, np.int64)), ("n", np.array(dft_length, np.int64)), ("r", np.array(rate, np.int64)),
             ("lo", np.array(lo, np.float32)), ("hi", np.array(hi, np.float32))]
    node = helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["w"])
    _, got, want = _run_both(tmp_path, [node], [], ["w"], inits, 17, {})
    assert got["w"].shape == want["w"].shape == (dft_length // 2 + 1, mels)
    np.testing.assert_allclose(got["w"], want["w"], rtol=0, atol=1e-6)


def _mel_filters_from(tmp_path, mels, n):
    """onnxruntime's MelWeightMatrix (test_mel_weight_matrix checks nerve's against it)."""
    inits = [("m", np.array(mels, np.int64)), ("n", np.array(n, np.int64)), ("r", np.array(16000, np.int64)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(8000.0, np.float32))]
    node = helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["w"])
    _, _, want = _run_both(tmp_path, [node], [], ["w"], inits, 17, {})
    return want["w"].astype(np.float64)


def test_log_mel_front_end(tmp_path, rng):
    """A whisper-style front end written in ONNX ops only: HannWindow -> STFT -> power ->
    MatMul with MelWeightMatrix -> Log; the window and the filters fold into constants, the
    STFT runs as an FFT."""
    n, hop, mels = 400, 160, 80
    nodes = [helper.make_node("HannWindow", ["n"], ["win"]),
             helper.make_node("STFT", ["x", "hop", "win", "n"], ["spec"], onesided=1),
             helper.make_node("Mul", ["spec", "spec"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
             helper.make_node("MelWeightMatrix", ["mels", "n", "rate", "lo", "hi"], ["fb"]),
             helper.make_node("MatMul", ["power", "fb"], ["mel"]),
             helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
             helper.make_node("Log", ["mel_eps"], ["logmel"])]
    inits = [("n", np.array(n, np.int64)), ("hop", np.array(hop, np.int64)), ("last", np.array([-1], np.int64)),
             ("mels", np.array(mels, np.int64)), ("rate", np.array(16000, np.int64)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(8000.0, np.float32)),
             ("eps", np.array(1e-6, np.float32))]
    x = (rng.standard_normal((1, 16000, 1)) * 0.1).astype(np.float32)
    sess, got, want = _run_both(tmp_path, nodes, [("x", [1, "len", 1])], ["logmel"], inits, 17, {"x": x},
                                dims={"len": 16000})
    frames = (16000 - n) // hop + 1
    assert got["logmel"].shape == want["logmel"].shape == (1, frames, mels)
    # float64 reference of the same pipeline (onnxruntime's fp32 STFT at n = 400 is ~1e-3 off,
    # which the log amplifies where a mel band is nearly empty)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
    sig = x[0, :, 0].astype(np.float64)
    power = np.abs(np.fft.rfft(np.stack([sig[f * hop:f * hop + n] * win for f in range(frames)]), axis=-1)) ** 2
    mel = power @ _mel_filters_from(tmp_path, mels, n)
    # compared as energies: fp32 sums are good to ~1e-7 of the loudest band, which the log
    # turns into large differences in nearly empty bands
    atol = 1e-7 * mel.max()
    np.testing.assert_allclose(np.exp(got["logmel"][0]), mel + 1e-6, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(np.exp(want["logmel"][0]), mel + 1e-6, rtol=1e-2, atol=100 * atol)  # onnxruntime
    types = [o["type"] for o in sess.ops()]
    assert {"conv", "conv_packed", "rdft"} & set(types)


def test_signal_ops_refuse_what_they_cannot_run(tmp_path):
    def compile_(nodes, inputs, inits, opset=17):
        graph = helper.make_graph(nodes, "g",
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  initializer=[numpy_helper.from_array(np.asarray(a), k) for k, a in inits])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        path = tmp_path / "bad.onnx"
        path.write_bytes(m.SerializeToString())
        return nerve.Session(path, dims={"n": 8}, cache=False)
    with pytest.raises(nerve.ModelError, match="onesided"):
        compile_([helper.make_node("DFT", ["x"], ["y"], onesided=1)], [("x", [1, 8, 2])], [])  # complex, forward
    with pytest.raises(nerve.ModelError, match="known when the model is compiled"):
        compile_([helper.make_node("DFT", ["x"], ["y"])], [("x", [1, "n", 1])], [])
    with pytest.raises(nerve.ModelError, match="last axis"):
        compile_([helper.make_node("DFT", ["x"], ["y"])], [("x", [1, 8, 3])], [])
    with pytest.raises(nerve.ModelError, match="edge"):
        compile_([helper.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"])], [],
                 [("m", np.array(8, np.int64)), ("d", np.array(64, np.int64)), ("r", np.array(8000, np.int64)),
                  ("lo", np.array(500.0, np.float32)), ("hi", np.array(100.0, np.float32))])


def test_istft_as_vocoders_export_it(tmp_path, rng):
    """A Vocos-style "same"-padding iSTFT as torch's dynamo exporter writes it: irfft of the
    spectrum (DFT inverse + onesided), a Hann window, Col2Im's overlap-add, the padding cut,
    divided by the window's own overlap-add. Against onnxruntime and numpy."""
    n_fft, hop, frames = 256, 64, 50
    pad = (n_fft - hop) // 2
    out_len = (frames - 1) * hop + n_fft
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    env = np.zeros(out_len)
    for f in range(frames):
        env[f * hop:f * hop + n_fft] += window.astype(np.float64) ** 2
    nodes = [helper.make_node("DFT", ["spec", "n", "axis"], ["frames"], inverse=1, onesided=1),  # [1, n_fft, T, 1]
             helper.make_node("Squeeze", ["frames", "last"], ["sig"]),
             helper.make_node("Mul", ["sig", "win"], ["windowed"]),
             helper.make_node("Col2Im", ["windowed", "image", "block"], ["folded"], strides=[1, hop]),
             helper.make_node("Slice", ["folded", "starts", "ends", "axes"], ["cut"]),
             helper.make_node("Div", ["cut", "envelope"], ["y"])]
    inits = [("n", np.array(n_fft, np.int64)), ("axis", np.array(1, np.int64)), ("last", np.array([3], np.int64)),
             ("win", window.reshape(1, n_fft, 1)), ("image", np.array([1, out_len], np.int64)),
             ("block", np.array([1, n_fft], np.int64)), ("starts", np.array([pad], np.int64)),
             ("ends", np.array([out_len - pad], np.int64)), ("axes", np.array([3], np.int64)),
             ("envelope", env[pad:out_len - pad].astype(np.float32))]
    spec = rng.standard_normal((1, n_fft // 2 + 1, frames, 2)).astype(np.float32)
    sess, got, want = _run_both(tmp_path, nodes, [("spec", list(spec.shape))], ["y"], inits, 20, {"spec": spec})
    c = spec[..., 0].astype(np.float64) + 1j * spec[..., 1]
    frames_ref = np.fft.irfft(c, n=n_fft, axis=1) * window[None, :, None]
    full = np.zeros(out_len)
    for f in range(frames):
        full[f * hop:f * hop + n_fft] += frames_ref[0, :, f]
    ref = (full[pad:out_len - pad] / env[pad:out_len - pad]).reshape(1, 1, 1, -1)  # the edges' 0/0 cut first
    _close(got, {"y": ref}, n_fft)
    _close(got, want, n_fft)
    assert "col2im" in {o["type"] for o in sess.ops()}
