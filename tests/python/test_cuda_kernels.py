"""The CUDA kernels (fused layernorm+linear, W4 packed and unpacked) through nerve.cuda,
nerve.ops and W4Weight.linear: against float64 references on fresh random inputs at awkward
sizes, with every kernel path forced (NERVE_FORCE_CC, layouts, row counts on both sides of
the selection's thresholds). Without a GPU the GPU checks are skipped with the backend's
reason, and the argument checks (which refuse bad input before any device is needed) and
the no-device error still run."""

import numpy as np
import pytest

import nerve
from nerve import cuda
from nerve.quant import quantize_w4

HAVE_GPU = cuda.device_count() > 0
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"no CUDA device: {cuda.unavailable_reason()}")

SIZES = (1, 3, 13, 97, 127, 257, 1025)


def _ln_ref(x, gamma, beta, W, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    xn = (x - mu) / np.sqrt(var + eps) * gamma + (0 if beta is None else beta)
    y = xn @ W.astype(np.float64).T
    return y + (0 if b is None else b), np.abs(xn) @ np.abs(W.astype(np.float64)).T


# ---- without a GPU: argument checks and the no-device error


def test_device_argument_forms():
    assert cuda.device_index("cuda") == 0 and cuda.device_index("cuda:2") == 2 and cuda.device_index(1) == 1
    for bad in ("gpu", "cuda:", "cuda:x", True, 1.0):
        with pytest.raises(nerve.InputError, match="device must be"):
            cuda.device_index(bad)


def test_bad_arguments_are_refused_before_the_device(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    g = np.ones(8, np.float32)
    W = rng.standard_normal((5, 8)).astype(np.float32)
    with pytest.raises(nerve.InputError, match="float64"):
        cuda.layernorm_linear(x.astype(np.float64), g, None, W)
    with pytest.raises(nerve.InputError, match="gamma has shape"):
        cuda.layernorm_linear(x, np.ones(7, np.float32), None, W)
    with pytest.raises(nerve.InputError, match="W has shape|features"):
        cuda.layernorm_linear(x, g, None, W[:, :7].copy())
    with pytest.raises(nerve.InputError, match="b has shape"):
        cuda.layernorm_linear(x, g, None, W, np.zeros(4, np.float32))
    w4 = quantize_w4(rng.standard_normal((4, 64)).astype(np.float32), group_size=32)
    with pytest.raises(nerve.InputError, match="weight takes 64"):
        cuda.linear_w4(np.zeros((2, 32), np.float32), w4)
    with pytest.raises(nerve.InputError, match="W4Weight"):
        cuda.linear_w4(np.zeros((2, 64), np.float32), np.zeros((4, 64), np.int8))
    with pytest.raises(nerve.InputError, match="layout must be"):
        cuda.linear_w4(np.zeros((2, 64), np.float32), w4, layout="nibbles")
    with pytest.raises(nerve.InputError, match="fp32 activations"):
        w4.linear(np.zeros((2, 64), np.float32), activations="int8", device="cuda")


@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU error; this machine has a GPU")
def test_without_gpu_the_error_names_the_reason(rng):
    x = rng.standard_normal((2, 8)).astype(np.float32)
    W = rng.standard_normal((3, 8)).astype(np.float32)
    with pytest.raises(nerve.NerveError) as info:
        nerve.ops.layernorm_linear(x, np.ones(8, np.float32), None, W, device="cuda")
    assert "CUDA" in str(info.value) or "cuda" in str(info.value)
    w4 = quantize_w4(rng.standard_normal((4, 64)).astype(np.float32), group_size=32)
    with pytest.raises(nerve.NerveError):
        w4.linear(np.zeros((1, 64), np.float32), layout="packed", device="cuda")


# ---- on a GPU


@needs_gpu
@pytest.mark.parametrize("rows", (1, 3, 16, 17, 97))
@pytest.mark.parametrize("n_in,n_out", ((13, 7), (127, 257), (1025, 97)))
def test_layernorm_linear_fp32(rng, rows, n_in, n_out):
    x = (rng.standard_normal((rows, n_in)) * 3 + 1).astype(np.float32)
    g = rng.uniform(0.5, 1.5, n_in).astype(np.float32)
    beta = rng.standard_normal(n_in).astype(np.float32)
    W = rng.standard_normal((n_out, n_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    y = nerve.ops.layernorm_linear(x, g, beta, W, b, eps=1e-5, device="cuda")
    ref, mag = _ln_ref(x, g, beta, W, b, 1e-5)
    assert y.dtype == np.float32 and y.shape == (rows, n_out)
    np.testing.assert_array_less(np.abs(y - ref), mag * (n_in + 8) * 2.0 ** -23 + 1e-6)


@needs_gpu
@pytest.mark.parametrize("rows", (1, 16, 17, 130))
@pytest.mark.parametrize("cc", ("7.0", "8.9", ""))
def test_layernorm_linear_fp16_warp_and_tensor_cores(rng, monkeypatch, rows, cc):
    monkeypatch.setenv("NERVE_FORCE_CC", cc)
    n_in, n_out = 257, 97
    x = rng.standard_normal((rows, n_in)).astype(np.float16)
    g = rng.uniform(0.5, 1.5, n_in).astype(np.float32)
    W = (rng.standard_normal((n_out, n_in)) / 16).astype(np.float32)
    y = cuda.layernorm_linear(x, g, None, W, None)
    ref, mag = _ln_ref(x.astype(np.float32), g, None, W, None, 1e-5)
    assert y.dtype == np.float16
    # fp16 output rounding plus, on tensor cores (rows > 16), fp16 operands: 2^-10 relative each
    tol = mag * 2.0 ** -9 + np.abs(ref) * 2.0 ** -10 + 1e-3
    np.testing.assert_array_less(np.abs(y.astype(np.float64) - ref), tol)


@needs_gpu
@pytest.mark.parametrize("layout", ("packed", "unpacked"))
@pytest.mark.parametrize("group", (32, 64, 128))
@pytest.mark.parametrize("rows", (1, 3, 8, 9, 97))
@pytest.mark.parametrize("n_in,n_out", ((128, 13), (1024, 257), (4096, 127)))
def test_linear_w4_matches_the_reference(rng, layout, group, rows, n_in, n_out):
    if n_in % group:
        pytest.skip("group does not divide the width")
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    w4 = quantize_w4(w, group_size=group, symmetric=rows % 2 == 0)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    y = w4.linear(x, b, layout=layout, device="cuda")
    wd = w4.dequantize().astype(np.float64)
    ref = x.astype(np.float64) @ wd.T + b
    mag = np.abs(x.astype(np.float64)) @ np.abs(wd).T + np.abs(b)
    np.testing.assert_array_less(np.abs(y - ref), mag * (n_in + 8) * 2.0 ** -24 + 1e-6)
    cpu = w4.linear(x, b, layout=layout)
    np.testing.assert_allclose(y, cpu, rtol=0, atol=float((mag * (n_in + 8) * 2.0 ** -23).max()))


@needs_gpu
@pytest.mark.parametrize("cc", ("7.0", "7.5", "8.0", "8.7", "9.0"))
def test_linear_w4_every_forced_capability(rng, monkeypatch, cc):
    monkeypatch.setenv("NERVE_FORCE_CC", cc)
    w4 = quantize_w4(rng.standard_normal((257, 1024)).astype(np.float32), group_size=64)
    for rows in (1, 13):
        x = rng.standard_normal((rows, 1024)).astype(np.float32)
        y = w4.linear(x, device="cuda")
        ref = x.astype(np.float64) @ w4.dequantize().astype(np.float64).T
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-3)


class _FakeDeviceArray:
    """Something with __cuda_array_interface__ (what CuPy/PyTorch expose); its pointer is
    never dereferenced: these inputs are refused before any device is touched."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x1000, False),
                                         "strides": strides, "version": 3}


def test_device_array_inputs_are_checked():
    g = _FakeDeviceArray((8,))
    W = _FakeDeviceArray((4, 8))
    with pytest.raises(nerve.InputError, match="device dtype '<f8'"):
        cuda.layernorm_linear(_FakeDeviceArray((2, 8), "<f8"), g, None, W)
    with pytest.raises(nerve.InputError, match="not C-contiguous"):
        cuda.layernorm_linear(_FakeDeviceArray((2, 8), "<f4", strides=(4, 8)), g, None, W)
    with pytest.raises(nerve.InputError, match="int8"):
        cuda.layernorm_linear(_FakeDeviceArray((2, 8), "|i1"), g, None, W)
    with pytest.raises(nerve.InputError, match="gamma has shape"):
        cuda.layernorm_linear(_FakeDeviceArray((2, 8)), _FakeDeviceArray((7,)), None, W)
    with pytest.raises(nerve.InputError, match="out must be"):
        cuda.layernorm_linear(_FakeDeviceArray((2, 8)), g, None, W, out=_FakeDeviceArray((2, 5)))


def test_device_array_needs_a_device_and_a_known_dtype():
    with pytest.raises(nerve.InputError, match="dtype float64"):
        cuda.DeviceArray((3,), np.float64)
    with pytest.raises(nerve.InputError, match="negative"):
        cuda.DeviceArray((-1, 3))
    if not HAVE_GPU:
        with pytest.raises(nerve.NerveError):
            cuda.DeviceArray((3,))


@needs_gpu
def test_device_arrays_round_trip_and_stay_on_the_device(rng):
    x = rng.standard_normal((13, 97)).astype(np.float32)
    xd = cuda.DeviceArray.from_host(x)
    np.testing.assert_array_equal(xd.to_host(), x)
    g = cuda.DeviceArray.from_host(np.ones(97, np.float32))
    W = rng.standard_normal((31, 97)).astype(np.float32)
    yd = cuda.layernorm_linear(xd, g, None, cuda.DeviceArray.from_host(W))
    assert isinstance(yd, cuda.DeviceArray) and yd.shape == (13, 31)
    np.testing.assert_allclose(yd.to_host(), nerve.ops.layernorm_linear(x, np.ones(97, np.float32), None, W),
                               rtol=1e-4, atol=1e-4)


def test_host_buffer_without_gpu_or_with_bad_arguments():
    with pytest.raises(nerve.InputError, match="dtype float64"):
        cuda.HostBuffer((3,), np.float64)
    if not HAVE_GPU:
        with pytest.raises(nerve.NerveError):
            cuda.HostBuffer((3,))
        assert cuda.bytes_copied() == 0


@needs_gpu
@pytest.mark.parametrize("memory", ("zero_copy", "pinned"))
def test_host_buffers_copy_exactly_what_their_mode_says(rng, monkeypatch, memory):
    """The zero-copy path moves no byte; the pinned path moves exactly x in and y out.
    Weights are uploaded first (DeviceArray) so only the per-run buffers are counted."""
    monkeypatch.setenv("NERVE_CUDA_MEMORY", memory)
    n_in, n_out, rows = 257, 97, 3
    W = rng.standard_normal((n_out, n_in)).astype(np.float32)
    Wd = cuda.DeviceArray.from_host(W)
    gd = cuda.DeviceArray.from_host(np.ones(n_in, np.float32))
    x = cuda.HostBuffer((rows, n_in))
    y = cuda.HostBuffer((rows, n_out))
    assert x.mode == memory and y.mode == memory
    for _ in range(3):  # a stream of chunks: the CPU writes in place each time
        chunk = rng.standard_normal((rows, n_in)).astype(np.float32)
        x.array[...] = chunk
        before = cuda.bytes_copied()
        cuda.layernorm_linear(x, gd, None, Wd, None, out=y)
        moved = cuda.bytes_copied() - before
        assert moved == (0 if memory == "zero_copy" else x.nbytes + y.nbytes)
        np.testing.assert_allclose(y.array, nerve.ops.layernorm_linear(chunk, np.ones(n_in, np.float32), None, W),
                                   rtol=1e-4, atol=1e-4)


def test_memory_report_has_a_device_side():
    rep = nerve.memory_report()["cuda"]
    assert set(rep["totals"]) >= {"buffers", "device_bytes", "pinned_host_bytes", "bytes_copied"}
    if not HAVE_GPU:
        assert rep["buffers"] == [] and rep["totals"]["device_bytes"] == 0


@needs_gpu
def test_memory_report_counts_device_memory_exactly():
    import gc

    before = nerve.memory_report()["cuda"]["totals"]["device_bytes"]
    a = cuda.DeviceArray((1000, 3), np.float32)
    h = cuda.HostBuffer((77,), np.float16)
    rep = nerve.memory_report()["cuda"]
    mine = [b for b in rep["buffers"] if b["shape"] in ((1000, 3), (77,))]
    assert {b["what"] for b in mine} == {"DeviceArray", "HostBuffer"}
    arr = next(b for b in mine if b["what"] == "DeviceArray")
    assert arr["allocated"] >= 12000 and arr["capacity"] >= arr["allocated"]
    del a, h, mine, arr
    gc.collect()
    assert nerve.memory_report()["cuda"]["totals"]["device_bytes"] == before
