"""DLPack import in nerve.cuda: what runs without a GPU.

A DLPack export from a CUDA device is read from the producer's capsule (nerve.cuda's
_from_dlpack): the struct layout, byte offsets, strides, element types and the refusals are
checked here on numpy's CPU exports, parsed as if CPU were an accepted device (the only
difference from a CUDA export is the device type field). The GPU calls that take such
arrays in place run in tests/python/test_cuda_kernels.py when a GPU is present.
"""
import numpy as np
import pytest

import nerve
from nerve import cuda

CPU = {1: "CPU"}


def parse(arr):
    ptr, shape, typestr, strides, capsule = cuda._from_dlpack(arr, "x", "test", device_types=CPU)
    assert capsule is not None
    return ptr, shape, typestr, strides


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.uint16])
@pytest.mark.parametrize("shape", [(1,), (3, 13), (2, 5, 7), (0, 4)])
def test_dlpack_struct_is_read_as_numpy_sees_it(dtype, shape):
    arr = (np.arange(int(np.prod(shape))) % 100).astype(dtype).reshape(shape)
    ptr, got_shape, typestr, strides = parse(arr)
    assert ptr == arr.ctypes.data
    assert got_shape == shape
    assert np.dtype(typestr) == np.dtype(dtype)
    assert strides is None or strides == arr.strides or arr.size <= 1


def test_dlpack_view_offsets_and_strides():
    base = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    view = base[2:, 3:]  # starts 23 floats in, rows 10 floats apart
    ptr, shape, _, strides = parse(view)
    assert ptr == base.ctypes.data + 23 * 4 == view.ctypes.data
    assert shape == (4, 7) and strides == (40, 4)


class OnGpu:
    """A CPU export that claims a CUDA device (as a JAX or TensorFlow GPU array would)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (2, 0)


def test_a_dlpack_gpu_array_is_a_device_array_numpy_is_not():
    assert cuda._is_device_array(OnGpu(np.zeros(3, np.float32)))
    assert not cuda._is_device_array(np.zeros(3, np.float32))
    # the capsule's own device type is what counts: this one is host memory
    with pytest.raises(nerve.InputError, match="DLPack device type 1, not GPU memory"):
        cuda._arg(OnGpu(np.zeros(3, np.float32)), "x", "test", (np.float32,))


def test_a_dlpack_argument_is_taken_in_place_and_checked(monkeypatch):
    monkeypatch.setitem(cuda._DL_DEVICE_TYPES, 1, "CPU (for this test)")
    arr = np.ones((3, 5), np.float32)
    got = cuda._arg(OnGpu(arr), "x", "test", (np.float32,), ndim=2)
    assert isinstance(got, cuda._DeviceArray)
    assert got.ptr == arr.ctypes.data and got.shape == (3, 5) and got.dtype == np.float32
    with pytest.raises(nerve.InputError, match="not C-contiguous"):
        cuda._arg(OnGpu(np.zeros((4, 8), np.float32)[:, ::2]), "x", "test", (np.float32,))
    with pytest.raises(nerve.InputError, match="dtype float16, expected float32"):
        cuda._arg(OnGpu(np.zeros(4, np.float16)), "x", "test", (np.float32,))
    with pytest.raises(nerve.InputError, match="2 dimension"):
        cuda._arg(OnGpu(np.zeros(4, np.float32)), "x", "test", (np.float32,), ndim=2)


def test_dlpack_refuses_other_element_types():
    with pytest.raises(nerve.InputError, match=r"DLPack dtype \(code 2, bits 64"):
        parse(np.zeros(3, np.float64))
    with pytest.raises(nerve.InputError, match=r"DLPack dtype \(code 0, bits 32"):
        parse(np.zeros(3, np.int32))


def test_dlpack_host_export_is_not_gpu_memory():
    with pytest.raises(nerve.InputError, match="DLPack device type 1, not GPU memory"):
        cuda._from_dlpack(np.zeros(3, np.float32), "x", "test")


def test_dlpack_strides_are_converted_to_bytes():
    strided = np.zeros((4, 8), np.float32)[:, ::2]
    _, _, _, strides = parse(strided)
    assert strides == (32, 8)
