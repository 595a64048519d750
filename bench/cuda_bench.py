"""GPU benchmarks of nerve's CUDA kernels, each against a peer measured in the same run.

  python bench/cuda_bench.py [--device 0] [--repeat 21] [--quick]

(a) W4 linear, packed and unpacked, at 1..64 rows: time per call and the weight bytes it
    streams per second, next to a device-to-device copy of the same bytes (the bandwidth
    ceiling of a bandwidth-bound kernel); this is what settles the layout rule of
    docs/CUDA.md ("ratio" = copy time / kernel time at equal bytes: 1.0 = at the ceiling).
(b) fused layernorm+linear, fp32 and fp16, 1..256 rows, against the fp32 weight copy
    and, when CuPy is installed, CuPy's (cuBLAS) layernorm-then-matmul.
Every call is synchronous (nerve's calls return once the result is written), so small
shapes include launch and synchronisation (~10 us); medians over interleaved repeats.
Prints a table; the device is named in its first line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import nerve
from nerve import cuda
from nerve.quant import quantize_w4


def _median_us(fn, repeat: int) -> float:
    fn()  # warm-up: first-launch module load, caches
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _copy_us(dev: int, nbytes: int, repeat: int) -> float:
    src = cuda.DeviceArray((nbytes,), np.uint8, dev)
    dst = cuda.DeviceArray((nbytes,), np.uint8, dev)
    lib, ffi = nerve._lib, nerve._ffi

    def run():
        nerve._native.check(lib.nrv_cuda_copy(dev, ffi.cast("void *", dst.ptr), ffi.cast("void *", src.ptr), nbytes))

    return _median_us(run, repeat)


def bench_w4(dev: int, repeat: int, quick: bool) -> None:
    shapes = [(4096, 4096), (11008, 4096)] if quick else [(4096, 4096), (11008, 4096), (16384, 16384)]
    rows_list = (1, 4, 16, 64)
    print("(a) W4 linear (w4a32, group 64) vs a device-to-device copy of the weight bytes")
    print(f"{'out x in':>13} {'rows':>5} {'layout':>9} {'us':>9} {'weight GB/s':>12} {'copy GB/s':>10} {'ratio':>6}")
    rng = np.random.default_rng(0)
    for n_out, n_in in shapes:
        w4 = quantize_w4(rng.standard_normal((n_out, n_in)).astype(np.float32), group_size=64, method="minmax")
        for layout in ("packed", "unpacked"):
            values = w4.packed if layout == "packed" else w4.q
            nbytes = values.nbytes + w4.scales.nbytes
            copy_us = _copy_us(dev, nbytes, repeat)
            q_dev = cuda.DeviceArray.from_host(values, dev)
            s_dev = cuda.DeviceArray.from_host(w4.scales, dev)
            for rows in rows_list:
                x = cuda.DeviceArray.from_host(rng.standard_normal((rows, n_in)).astype(np.float32), dev)
                y = cuda.DeviceArray((rows, n_out), np.float32, dev)
                d = nerve._ffi.new("nrv_w4_weight *")
                d.out, d.group = n_out, 64
                setattr(d, "in", n_in)
                d.layout = nerve._lib.NRV_W4_PACKED if layout == "packed" else nerve._lib.NRV_W4_UNPACKED
                d.q = nerve._ffi.cast("void *", q_dev.ptr)
                d.scales = nerve._ffi.cast("const uint16_t *", s_dev.ptr)

                def run(x=x, y=y, d=d, rows=rows):
                    nerve._native.check(nerve._lib.nrv_cuda_linear_w4(
                        dev, nerve._ffi.cast("float *", x.ptr), rows, d, nerve._ffi.NULL,
                        nerve._ffi.cast("float *", y.ptr), nerve._ffi.NULL))

                us = _median_us(run, repeat)
                print(f"{n_out:>6}x{n_in:<6} {rows:>5} {layout:>9} {us:>9.1f} {nbytes / us / 1e3:>12.1f} "
                      f"{nbytes / copy_us / 1e3:>10.1f} {copy_us / us:>6.2f}")


def bench_layernorm_linear(dev: int, repeat: int, quick: bool) -> None:
    try:
        import cupy
    except ImportError:
        cupy = None
    print("\n(b) fused layernorm+linear vs a copy of W's bytes" + (" and CuPy (cuBLAS) layernorm then matmul"
                                                                    if cupy else " (CuPy absent: no cuBLAS peer)"))
    print(f"{'out x in':>13} {'rows':>5} {'dtype':>7} {'us':>9} {'copy us':>8} {'cuBLAS us':>10}")
    rng = np.random.default_rng(1)
    for n_out, n_in in ((1024, 1024), (4096, 1024)) if quick else ((1024, 1024), (4096, 1024), (4096, 4096)):
        W = rng.standard_normal((n_out, n_in)).astype(np.float32)
        g = np.ones(n_in, np.float32)
        W_d, g_d = cuda.DeviceArray.from_host(W, dev), cuda.DeviceArray.from_host(g, dev)
        copy_us = _copy_us(dev, W.nbytes, repeat)
        for rows in (1, 16, 256):
            for dtype in (np.float32, np.float16):
                x_d = cuda.DeviceArray.from_host(rng.standard_normal((rows, n_in)).astype(dtype), dev)
                y_d = cuda.DeviceArray((rows, n_out), dtype, dev)
                us = _median_us(lambda: cuda.layernorm_linear(x_d, g_d, None, W_d, None, device=dev, out=y_d), repeat)
                peer = float("nan")
                if cupy is not None:
                    xc = cupy.asarray(x_d)
                    Wc = cupy.asarray(W_d).astype(dtype)

                    def ref():
                        xf = xc.astype(cupy.float32)
                        xn = (xf - xf.mean(-1, keepdims=True)) / cupy.sqrt(xf.var(-1, keepdims=True) + 1e-5)
                        (xn.astype(dtype) @ Wc.T).sum()
                        cupy.cuda.runtime.deviceSynchronize()

                    peer = _median_us(ref, repeat)
                print(f"{n_out:>6}x{n_in:<6} {rows:>5} {np.dtype(dtype).name:>7} {us:>9.1f} {copy_us:>8.1f} "
                      f"{peer:>10.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--quick", action="store_true", help="fewer shapes (gpu-check.sh)")
    args = ap.parse_args(argv)
    if cuda.device_count() == 0:
        print(f"cuda_bench: no CUDA device: {cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    dev = cuda.devices()[args.device]
    sel = cuda.select(args.device)
    print(f"device {args.device}: {dev['name']}, sm_{dev['cc_major']}{dev['cc_minor']}, {dev['sm_count']} SMs, "
          f"{dev['total_memory'] / 2**30:.0f} GiB; nerve {nerve.__version__}; W4 layouts "
          f"{sel['w4']['gemv_layout']}/{sel['w4']['gemm_layout']}, memory {sel['memory']}\n")
    bench_w4(args.device, args.repeat, args.quick)
    bench_layernorm_linear(args.device, args.repeat, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
