"""Sessions at N threads with every core free, then with one core kept busy by another
process (a spinning loop, standing in for an app's audio capture or control loop): median
and p99 of Session.run per model, and runs per second. A pool that waits for a descheduled
worker shows up in the second half as p99s of whole scheduler slices.

    python bench/threads_under_load.py [--threads 2] [--seconds 1] [MODEL.onnx ...]

Without models: openWakeWord's (the openwakeword 0.5.1 wheel, `make` installs it) and the
silero VAD, with random inputs of their documented shapes.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import time

import numpy as np
import onnx

import nerve
from nerve.asr.vad import silero_vad_path
from nerve.bench import cpu_model
from nerve.errors import ModelError


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _package_file(package: str, rel: str):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], rel)
    return path if os.path.exists(path) else None


def default_models():
    models = []
    for rel in ("melspectrogram.onnx", "embedding_model.onnx", "hey_jarvis_v0.1.onnx"):
        path = _package_file("openwakeword", f"resources/models/{rel}")
        if path:
            models.append(path)
    try:
        models.append(str(silero_vad_path()))
    except ModelError:
        pass  # the silero-vad wheel is not installed
    return models


def feeds_for(path: str, rng):
    """Random feeds for every graph input; symbolic dims become 1, or 1760 / 512 for an audio
    input's samples (the sizes openWakeWord and silero feed)."""
    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    feeds, dims = {}, {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = []
        for d in t.shape.dim:
            n = d.dim_value or (1760 if d.dim_param == "samples" else 512 if d.dim_param == "sequence" else 1)
            if d.dim_param:
                dims[d.dim_param] = n
            shape.append(n)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if vi.name == "sr":
            feeds[vi.name] = np.array(16000, dtype)
        elif dtype.kind == "f":
            feeds[vi.name] = (rng.standard_normal(shape) * 0.1).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype)
    return feeds, dims


def timed(session, feeds, seconds: float):
    session.run(feeds)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        session.run(feeds)
        times.append(time.perf_counter() - t)
    return np.median(times) * 1e6, np.percentile(times, 99) * 1e6, len(times) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    models = args.models or default_models()
    if not models:
        raise SystemExit("no models given and neither openwakeword nor silero-vad is installed")
    rng = np.random.default_rng(0)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, nerve {nerve.__version__}, threads={args.threads}")
    print(f"{'model':34s} {'free: median':>13s} {'p99':>9s} {'runs/s':>8s}   {'busy: median':>13s} {'p99':>9s} {'runs/s':>8s}")
    for path in models:
        feeds, dims = feeds_for(path, rng)
        session = nerve.Session(path, dims=dims, threads=args.threads, cache=False)
        free = timed(session, feeds, args.seconds)
        spinner = multiprocessing.Process(target=_spin, args=(args.seconds + 1.0,))
        spinner.start()
        time.sleep(0.2)
        try:
            busy = timed(session, feeds, args.seconds)
        finally:
            spinner.join()
        print(f"{os.path.basename(path)[:34]:34s} {free[0]:11.1f}us {free[1]:7.0f}us {free[2]:8.0f}   "
              f"{busy[0]:11.1f}us {busy[1]:7.0f}us {busy[2]:8.0f}")


if __name__ == "__main__":
    main()
