"""``nerve bench quant``: quantized linear layers (W4, W8) against fp32 and onnxruntime's
quantized MatMuls, single-threaded, in one process.

For each weight shape (out x in: W is [out, in], y = x·Wᵀ; 4096x4096, 11008x4096, 4096x11008)
and batch (1: GEMV, 8 and 32: small GEMM) it times

  * nerve fp32: ``nerve.ops.linear(x, W)``;
  * nerve W4: ``quantize_w4(W, group_size=G, method="minmax").linear(x, activations=A,
    layout=L)`` for G in (32, 64), A "fp32" (w4a32) or "int8" (w4a8), L packed or unpacked;
  * nerve W8: an ONNX model whose weight is int8 dequantised in the graph (Cast, Mul by a
    per-output scale, MatMul), twice: in ``nerve.Session()`` (precision fp32) its plan runs
    ``linear_w8`` (int8 weights, fp32 activations; batches up to 16), in
    ``nerve.Session(precision="int8")`` ``linear_w8a8`` (int8 activations too; every batch);
    the op is read from the session;
  * onnxruntime (1 intra-op and 1 inter-op thread): fp32 MatMul; com.microsoft MatMulNBits
    (4 bits, block 32, the same weights as nerve's group-32 W4) at accuracy_level 0 (fp32
    compute) and 4 (int8 compute); DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul
    (the same int8 weights as nerve's W8); and nerve's W8 model itself (which onnxruntime
    folds to an fp32 MatMul).

Each engine's output is checked once per shape and batch against float64 x·Wdeqᵀ with the
weight that engine holds (cosine >= 0.999, or >= 0.99 where the activations are int8).

Timing: per shape and batch every engine is sampled in rounds (the order reversed every other
round, so drift of the machine hits all alike); a sample loops the call for about 50 ms (10
ms with quick); median and p90 are over the samples; a ratio is the median over rounds of
(the other engine's time / this engine's time): > 1 means this row is faster. Times include
the Python call. Weights are streamed from memory, as in a decoder that reads every layer
once per token: each engine cycles through enough copies of its weight (distinct bytes where
nerve's weight store would share them) that one cycle holds at least twice the last-level
cache. GB/s is the weight's bytes (values and scales, in the layout the engine reads) per
median call; "% copy" puts it next to ``np.copyto`` of 256 MiB (bytes read + written per
second). There are no thresholds: the command reports.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import kernels, ops
from .bench import _bytes, _sampler, format_table, last_level_cache_bytes, machine
from .quant import quantize_w4

__all__ = ["run", "format_report", "SHAPES", "BATCHES", "GROUPS"]

MiB = 1 << 20
SHAPES: Tuple[Tuple[int, int], ...] = ((4096, 4096), (11008, 4096), (4096, 11008))  # (out, in)
QUICK_SHAPES: Tuple[Tuple[int, int], ...] = ((4096, 4096),)
BATCHES: Tuple[int, ...] = (1, 8, 32)
GROUPS: Tuple[int, ...] = (32, 64)
ORT_BLOCK = 32  # MatMulNBits block_size: nerve's group-32 W4 holds the same weights
W8_MAX_ROWS = 16  # compiler/passes.py: linear_w8 (precision fp32) up to this many rows
COPY_BYTES = 256 * MiB
_DEFAULT_LLC = 32 * MiB
_MAX_COPIES = 8
COS_FP32 = 0.999  # fp32 activations: the only error is float rounding
COS_INT8 = 0.99  # int8 activations: their quantisation error too


# ------------------------------------------------------------------------- peers (onnx models)

def _ort():
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _onnx_model(nodes, k: int, inits: Dict[str, np.ndarray], rows="rows", ms_domain: bool = False):
    """An opset-17 model y = f(x), x float [rows, k] (rows symbolic, or an int)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [rows, k])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.asarray(v), name) for name, v in inits.items()])
    opsets = [h.make_opsetid("", 17)] + ([h.make_opsetid("com.microsoft", 1)] if ms_domain else [])
    m = h.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def _fp32_model(W: np.ndarray):
    from onnx import helper as h

    return _onnx_model([h.make_node("MatMul", ["x", "Wt"], ["y"])], W.shape[1], {"Wt": np.ascontiguousarray(W.T)})


def _nbits_model(w4, accuracy_level: int):
    """MatMulNBits (4 bits, block 32, no zero points: ORT's default zero point 8) holding
    exactly the weights of w4 (symmetric, group 32): B[n, block, j] = (q[2j] + 8) | (q[2j+1] + 8) << 4."""
    from onnx import helper as h

    n, k = w4.shape
    q = w4.q.astype(np.uint8) + np.uint8(8)  # [-8, 7] -> [0, 15] (int8 -> uint8 wraps, then + 8)
    pairs = q.reshape(n, k // ORT_BLOCK, ORT_BLOCK // 2, 2)
    blob = (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)
    scales = w4.scales.astype(np.float32).reshape(-1)
    node = h.make_node("MatMulNBits", ["x", "B", "scales"], ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                       block_size=ORT_BLOCK, accuracy_level=accuracy_level)
    m = _onnx_model([node], k, {"B": blob, "scales": scales}, ms_domain=True)
    return m, blob.nbytes + scales.nbytes


def _matmulinteger_model(qt: np.ndarray, s: np.ndarray):
    """DynamicQuantizeLinear(x) -> MatMulInteger(xq, qt int8 [in, out], x zero point, 0) ->
    Cast float -> Mul by x scale · s[out]."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             h.make_node("MatMulInteger", ["xq", "B", "xz", "bz"], ["yi"]),
             h.make_node("Cast", ["yi"], ["yf"], to=T.FLOAT),
             h.make_node("Mul", ["xs", "ws"], ["sc"]),
             h.make_node("Mul", ["yf", "sc"], ["y"])]
    return _onnx_model(nodes, qt.shape[0], {"B": qt, "bz": np.array(0, np.int8), "ws": s})


def _w8_model(qt: np.ndarray, s: np.ndarray):
    """y = x · (Cast(qt) * s): the int8 weight [in, out] dequantised in the graph."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Cast", ["q"], ["qf"], to=T.FLOAT), h.make_node("Mul", ["qf", "s"], ["W"]),
             h.make_node("MatMul", ["x", "W"], ["y"])]
    return _onnx_model(nodes, qt.shape[0], {"q": qt, "s": s})


def _ort_session(ort, model_bytes: bytes):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(["y"], {"x": x})[0]


def _quantize_w8(W: np.ndarray):
    """Per-output symmetric int8: (q [out, in] int8, s [out] float32), W ~ q * s[:, None]."""
    amax = np.abs(W).max(axis=1)
    s = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(W / s[:, None]), -127, 127).astype(np.int8)
    return q, s


# ------------------------------------------------------------------------- engines

class _Engine:
    """One way of computing y = x·Wᵀ: calls (one per copy of the weight, cycled), the bytes
    of one copy of its weight, which dequantised weight it must match, and its peers."""

    def __init__(self, name: str, runtime: str, scheme: str, calls: List[Callable], weight_bytes: int,
                 ref: str, min_cos: float, **info):
        self.name, self.runtime, self.scheme = name, runtime, scheme
        self.calls, self.weight_bytes, self.ref, self.min_cos = calls, int(weight_bytes), ref, min_cos
        self.info = info
        self.peers: Dict[str, str] = {}  # label -> engine name
        self._i = 0

    def call(self, x):
        self._i = (self._i + 1) % len(self.calls)
        return self.calls[self._i](x)


def _copies(nbytes: int, llc: int, cold: bool) -> int:
    """Copies of a weight of nbytes so that one cycle through them holds >= 2x the LLC."""
    if not cold:
        return 1
    return max(1, min(_MAX_COPIES, math.ceil(2 * llc / max(nbytes, 1))))


def _nerve_w8_sessions(q: np.ndarray, s: np.ndarray, n_copies: int, bound: int, tmp: str,
                       precision: str, make_model=None) -> Tuple[List, List]:
    """n_copies nerve.Sessions (at precision, rows up to bound) of the W8 model (or
    make_model(qt, s)'s); copy i has its output columns rotated by i (distinct bytes: nerve's
    weight store shares equal ones). Returns (sessions, their op lists)."""
    import onnx

    from .session import Session

    sessions, op_lists = [], []
    for i in range(n_copies):
        qi, si = (q, s) if i == 0 else (np.roll(q, i, axis=0), np.roll(s, i))
        path = os.path.join(tmp, f"w8_{bound}_{i}.onnx")
        onnx.save((make_model or _w8_model)(np.ascontiguousarray(qi.T), si), path)
        sess = Session(path, precision=precision, dims={"rows": bound}, cache=False, threads=1)
        os.unlink(path)
        sessions.append(sess)
        op_lists.append([(o["type"], o["kernel"]) for o in sess.ops()])
    return sessions, op_lists


def _build_engines(W: np.ndarray, batches: Sequence[int], llc: int, cold: bool, ort, tmp: str):
    """(engines, {ref name: dequantised float32 weight [out, in]})."""
    n, k = W.shape
    engines: List[_Engine] = []
    weights: Dict[str, np.ndarray] = {"fp32": W}

    c = _copies(W.nbytes, llc, cold)
    Ws = [W] + [W.copy() for _ in range(c - 1)]
    engines.append(_Engine("nerve fp32", "nerve", "fp32", [lambda x, w=w: ops.linear(x, w) for w in Ws],
                           W.nbytes, "fp32", COS_FP32, kernel=kernels.selected("linear")))

    w4s = {}
    for g in GROUPS:
        if k % g:
            continue
        w4 = quantize_w4(W, group_size=g, method="minmax")
        w4s[g] = w4
        weights[f"w4g{g}"] = w4.dequantize()
        c = _copies(w4.nbytes("packed"), llc, cold)
        copies = [w4] + [type(w4)(w4.q.copy(), w4.scales.copy(), None, g) for _ in range(c - 1)]
        for w in copies:
            w.packed  # noqa: B018 - packed once here, not inside the timing
        for act, scheme, min_cos in (("fp32", "w4a32", COS_FP32), ("int8", "w4a8", COS_INT8)):
            for layout in ("packed", "unpacked"):
                engines.append(_Engine(
                    f"nerve {scheme} g{g} {layout}", "nerve", scheme,
                    [lambda x, w=w, a=act, lay=layout: w.linear(x, None, activations=a, layout=lay) for w in copies],
                    w4.nbytes(layout), f"w4g{g}", min_cos, group=g, layout=layout, activations=act,
                    kernel=kernels.selected("linear_w4a32" if act == "fp32" else "linear_w4a8")))

    q8, s8 = _quantize_w8(W)
    weights["w8"] = q8.astype(np.float32) * s8[:, None]
    w8_bytes = q8.nbytes + s8.nbytes
    c8 = _copies(w8_bytes, llc, cold)
    have_onnx = True
    try:
        import onnx  # noqa: F401 - the W8 model and the peers are ONNX graphs
    except ImportError:
        have_onnx = False
    if have_onnx:
        for precision, bound, rows in (("fp32", W8_MAX_ROWS, [b for b in batches if b <= W8_MAX_ROWS]),
                                       ("int8", max(batches), list(batches))):
            if not rows:
                continue
            sessions, op_lists = _nerve_w8_sessions(q8, s8, c8, bound, tmp, precision)
            op_types = "+".join(t for t, _ in op_lists[0])
            int8_act = "linear_w8a8" in op_types
            scheme = "w8a8" if int8_act else "w8"
            engines.append(_Engine(
                f"nerve {scheme} ({op_types})", "nerve", scheme,
                [lambda x, s=s: s.run({"x": x})["y"] for s in sessions], w8_bytes, "w8",
                COS_INT8 if int8_act else COS_FP32, batches=rows, plan_ops=op_lists[0], rows_bound=bound,
                activations="int8" if int8_act else "fp32"))
    if ort is not None and have_onnx:
        fp32_bytes = _fp32_model(W).SerializeToString()
        engines.append(_Engine("ORT MatMul fp32", "onnxruntime", "fp32",
                               [_ort_session(ort, fp32_bytes) for _ in range(_copies(W.nbytes, llc, cold))],
                               W.nbytes, "fp32", COS_FP32))
        del fp32_bytes
        if 32 in w4s:
            for acc in (0, 4):
                model, nbytes = _nbits_model(w4s[32], acc)
                data = model.SerializeToString()
                engines.append(_Engine(f"ORT MatMulNBits acc{acc}", "onnxruntime", f"w4 acc{acc}",
                                       [_ort_session(ort, data) for _ in range(_copies(nbytes, llc, cold))],
                                       nbytes, "w4g32", COS_FP32 if acc == 0 else COS_INT8, accuracy_level=acc,
                                       block_size=ORT_BLOCK))
        qt = np.ascontiguousarray(q8.T)
        data = _matmulinteger_model(qt, s8).SerializeToString()
        engines.append(_Engine("ORT MatMulInteger", "onnxruntime", "w8a8",
                               [_ort_session(ort, data) for _ in range(c8)], w8_bytes, "w8", COS_INT8))
        # the same quantize_dynamic graph through nerve (op matmul_integer: onnxruntime's integers)
        sessions, op_lists = _nerve_w8_sessions(q8, s8, c8, max(batches), tmp, "fp32", _matmulinteger_model)
        engines.append(_Engine("nerve MatMulInteger", "nerve", "w8a8 (MatMulInteger)", [lambda x, s=s: s.run({"x": x})["y"]
                                                                          for s in sessions],
                               w8_bytes, "w8", COS_INT8, plan_ops=op_lists[0], rows_bound=max(batches),
                               activations="int8"))
        # nerve's W8 model as it is; onnxruntime folds Cast and Mul into an fp32 weight
        data = _w8_model(qt, s8).SerializeToString()
        engines.append(_Engine("ORT w8 model (folded fp32)", "onnxruntime", "fp32 (folded)",
                               [_ort_session(ort, data) for _ in range(_copies(W.nbytes, llc, cold))],
                               W.nbytes, "w8", COS_FP32))
        del data, qt

    by_name = {e.name: e for e in engines}
    for e in engines:
        if e.name == "nerve fp32" and "ORT MatMul fp32" in by_name:
            e.peers["MatMul"] = "ORT MatMul fp32"
        elif e.scheme in ("w4a32", "w4a8"):
            for acc in (0, 4):
                if f"ORT MatMulNBits acc{acc}" in by_name:
                    e.peers[f"acc{acc}"] = f"ORT MatMulNBits acc{acc}"
        elif e.runtime == "nerve" and e.scheme in ("w8", "w8a8", "w8a8 (MatMulInteger)") \
                and "ORT MatMulInteger" in by_name:
            e.peers["MMInt"] = "ORT MatMulInteger"
    return engines, weights


# ------------------------------------------------------------------------- measuring

def _cosine(got: np.ndarray, ref: np.ndarray) -> float:
    g = np.asarray(got, np.float64).ravel()
    r = np.asarray(ref, np.float64).ravel()
    den = float(np.linalg.norm(g) * np.linalg.norm(r))
    return float(g @ r / den) if den > 0 else float(np.array_equal(g, r))


def _copy_bandwidth(repeat: int) -> Dict[str, float]:
    """np.copyto of a 256 MiB float32 array: (bytes read + written) per second, median."""
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # warm-up: pages mapped
    times = []
    for _ in range(max(3, repeat)):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {"bytes": COPY_BYTES, "median_ms": t * 1e3, "gbps": 2 * COPY_BYTES / t / 1e9}


def _p90(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values), 90))


def _measure(engines: List[_Engine], x: np.ndarray, repeat: int, sample_s: float) -> Dict[str, List[float]]:
    """Seconds per call of every engine over `repeat` rounds (one sample each per round)."""
    samplers, inner = [], []
    for e in engines:
        sample = _sampler(lambda e=e: e.call(x))
        sample(len(e.calls))  # warm-up: every copy once (page faults, ORT's first run)
        t1 = sample(max(1, len(e.calls)))
        samplers.append(sample)
        inner.append(max(1, math.ceil(sample_s / max(t1, 1e-7))))
    times: Dict[str, List[float]] = {e.name: [] for e in engines}
    order = list(range(len(engines)))
    for r in range(repeat):
        for i in (order if r % 2 == 0 else order[::-1]):
            times[engines[i].name].append(samplers[i](inner[i]))
    for e, n_inner in zip(engines, inner):
        e.info["_inner"] = n_inner
    return times


def _ratio(times: Dict[str, List[float]], other: str, this: str) -> Optional[float]:
    if other not in times or this not in times:
        return None
    return statistics.median(a / b for a, b in zip(times[other], times[this]))


def _bench_shape(n: int, k: int, batches: Sequence[int], repeat: int, sample_s: float, llc: int, cold: bool,
                 copy_gbps: float, rng, ort) -> List[Dict[str, object]]:
    W = rng.standard_normal((n, k), dtype=np.float32)
    xs = {b: rng.standard_normal((b, k), dtype=np.float32) for b in batches}
    rows_out = []
    with tempfile.TemporaryDirectory(prefix="nerve-bench-quant-") as tmp:
        engines, weights = _build_engines(W, batches, llc, cold, ort, tmp)
    # references: float64 x·Wdeqᵀ for every dequantised weight, all batches at once
    X = np.concatenate([xs[b] for b in batches]).astype(np.float64)
    refs: Dict[str, Dict[int, np.ndarray]] = {}
    for key, wd in weights.items():
        full = X @ wd.T.astype(np.float64)
        start = 0
        refs[key] = {}
        for b in batches:
            refs[key][b] = full[start:start + b]
            start += b
        del full
    del weights
    gc.collect()
    for b in batches:
        active = [e for e in engines if b in e.info.get("batches", batches)]
        checks = {}
        for e in active:
            cos = _cosine(e.calls[0](xs[b]), refs[e.ref][b])
            checks[e.name] = {"cosine": cos, "min_cosine": e.min_cos, "ok": bool(cos >= e.min_cos),
                              "reference": f"float64 x·Wᵀ, W = {e.ref} weight"}
        times = _measure(active, xs[b], repeat, sample_s)
        for e in active:
            t = times[e.name]
            med = statistics.median(t)
            gbps = e.weight_bytes / med / 1e9
            info = {key: v for key, v in e.info.items() if not key.startswith("_") and key != "batches"}
            rows_out.append({
                "shape": [n, k], "batch": b, "engine": e.name, "runtime": e.runtime, "scheme": e.scheme,
                "median_ms": med * 1e3, "p90_ms": _p90(t) * 1e3, "samples": len(t), "inner": e.info["_inner"],
                "copies": len(e.calls), "weight_bytes": e.weight_bytes,
                "streamed": bool(len(e.calls) * e.weight_bytes >= 2 * llc), "gbps": gbps,
                "pct_copy": 100.0 * gbps / copy_gbps if copy_gbps else None,
                "vs_fp32": None if e.name == "nerve fp32" else _ratio(times, "nerve fp32", e.name),
                "vs_peers": {label: _ratio(times, other, e.name) for label, other in e.peers.items()},
                "check": checks[e.name], **info,
            })
    del engines
    gc.collect()
    return rows_out


# ------------------------------------------------------------------------- driver

def run(repeat: Optional[int] = None, quick: bool = False, seed: int = 0,
        shapes: Optional[Sequence[Tuple[int, int]]] = None, batches: Sequence[int] = BATCHES,
        cold: bool = True) -> Dict[str, object]:
    """Runs the benchmark; returns a dict (see format_report). shapes: (out, in) pairs
    (default SHAPES, or QUICK_SHAPES with quick); cold=False times hot weights (one copy)."""
    if repeat is None:
        repeat = 5 if quick else 15
    repeat = max(1, int(repeat))
    sample_s = 0.01 if quick else 0.05
    shapes = tuple(tuple(int(v) for v in s) for s in (shapes or (QUICK_SHAPES if quick else SHAPES)))
    batches = tuple(int(b) for b in batches)
    llc_known = last_level_cache_bytes()
    llc = llc_known or _DEFAULT_LLC
    ort = _ort()
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    copy = _copy_bandwidth(repeat)
    rows: List[Dict[str, object]] = []
    for n, k in shapes:
        rows += _bench_shape(n, k, batches, repeat, sample_s, llc, cold, copy["gbps"], rng, ort)
    return {
        "machine": machine(),
        "onnxruntime": getattr(ort, "__version__", None),
        "threads": 1,
        "repeat": repeat,
        "quick": bool(quick),
        "cold": bool(cold),
        "llc_bytes": llc_known,
        "sample_ms": sample_s * 1e3,
        "shapes": [list(s) for s in shapes],
        "batches": list(batches),
        "copy": copy,
        "rows": rows,
        "checks_passed": all(r["check"]["ok"] for r in rows),
        "headlines": _headlines(rows),
        "seconds": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------- report

def _shape_str(shape) -> str:
    return f"{shape[0]}x{shape[1]}"


def _x(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _headlines(rows: List[Dict[str, object]]) -> List[str]:
    lines = []
    shapes = []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    for shape in shapes:
        here = [r for r in rows if r["shape"] == shape]
        s = _shape_str(shape)
        gemv_w4 = [r for r in here if r["batch"] == 1 and r["runtime"] == "nerve" and r["scheme"] in ("w4a32", "w4a8")]
        if gemv_w4:
            best = min(gemv_w4, key=lambda r: r["median_ms"])
            p = best["vs_peers"]
            lines.append(f"w4 GEMV (batch 1) vs MatMulNBits: {_x(p.get('acc0'))} (acc 0), {_x(p.get('acc4'))} (acc 4)"
                         f"  -- {s}, {best['engine']} (fastest nerve W4)")
            like = {(r["activations"], r["group"], r["layout"]): r for r in gemv_w4}
            a32, a8 = like.get(("fp32", 32, "packed")), like.get(("int8", 32, "packed"))
            if a32 and a8:
                lines.append(f"  like for like, g32 packed: w4a32 {_x(a32['vs_peers'].get('acc0'))} vs acc 0, "
                             f"w4a8 {_x(a8['vs_peers'].get('acc4'))} vs acc 4")
            pct = best["pct_copy"]
            lines.append(f"w4 GEMV bandwidth: {'n/a' if pct is None else f'{pct:.0f}%'} of copy"
                         f"  -- {s}, {best['engine']}: {best['gbps']:.1f} GB/s")
        w8 = {r["batch"]: r for r in here if r["runtime"] == "nerve" and r["scheme"] == "w8a8"}
        if 1 in w8 and w8[1]["pct_copy"] is not None:
            lines.append(f"w8a8 GEMV bandwidth: {w8[1]['pct_copy']:.0f}% of copy  -- {s}: {w8[1]['gbps']:.1f} GB/s")
        gemm = [b for b in (8, 32) if b in w8]
        if gemm:
            parts = [f"{_x(w8[b]['vs_fp32'])} (batch {b}, {'+'.join(t for t, _ in w8[b]['plan_ops'])})" for b in gemm]
            lines.append(f"w8a8 GEMM vs nerve fp32 at batch 8/32: {', '.join(parts)}  -- {s}")
    return lines


def format_report(result: Dict[str, object]) -> str:
    """The human-readable report of run()'s result."""
    mach = result["machine"]
    copy = result["copy"]
    lines = [
        f"nerve {mach['nerve_version']} bench quant -- 1 thread, median and p90 of {result['repeat']} samples of "
        f"~{result['sample_ms']:.0f} ms" + (" (quick)" if result["quick"] else ""),
        f"machine: {mach['cpu_model']}, {mach['cores']} logical cores, {mach['arch']}, "
        f"last-level cache {_bytes(result['llc_bytes'])}; onnxruntime {result['onnxruntime'] or 'not installed'}",
        f"kernels: linear {mach['kernels'].get('linear')}, linear_w4a32 {mach['kernels'].get('linear_w4a32')}, "
        f"linear_w4a8 {mach['kernels'].get('linear_w4a8')}, linear_w8 {mach['kernels'].get('linear_w8')}, "
        f"linear_w8a8 {mach['kernels'].get('linear_w8a8')}",
        f"copy bandwidth: np.copyto of {_bytes(copy['bytes'])} float32, {copy['gbps']:.1f} GB/s (read + write)",
        "weights " + ("streamed from memory (each engine cycles through copies of its weight holding >= 2x the "
                      "last-level cache)" if result["cold"] else "hot (one copy: as cache-resident as they fit)"),
        "shape = out x in (W [out, in], y = x·Wᵀ); x fp32 = nerve fp32 time / this time, x peer = the ORT peer's "
        "time / this time (> 1: this row is faster); peers: w4 rows MatMulNBits block 32 at accuracy_level 0 and 4, "
        "w8 rows MatMulInteger, nerve fp32 MatMul; GB/s = weight bytes (values + scales) per call; % copy can pass "
        "100%: the copy's bytes are read and written, a product's weight only read",
        "",
    ]

    def peers(r):
        return ", ".join(f"{_x(v)} {label}" for label, v in r["vs_peers"].items()) or ""

    table = []
    for r in result["rows"]:
        c = r["check"]
        table.append([
            _shape_str(r["shape"]), r["batch"], r["engine"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}",
            "" if r["vs_fp32"] is None else _x(r["vs_fp32"]), peers(r),
            f"{r['gbps']:.1f}" + ("" if r["streamed"] or not result["cold"] else "*"),
            "" if r["pct_copy"] is None else f"{r['pct_copy']:.0f}%",
            f"{c['cosine']:.5f}" + ("" if c["ok"] else " FAIL"),
        ])
    lines.append(format_table(["shape", "batch", "engine", "median ms", "p90 ms", "x fp32", "x peer", "GB/s",
                               "% copy", "cos vs ref"], table, align="lrlrrrlrrr"))
    unfused = {}
    for r in result["rows"]:
        ops_ = [t for t, _ in r.get("plan_ops", [])]
        if r["runtime"] == "nerve" and r["scheme"] in ("w8", "w8a8") and ops_ not in (["linear_w8"], ["linear_w8a8"]):
            unfused.setdefault(_shape_str(r["shape"]), "+".join(ops_))
    for shape, ops_ in unfused.items():
        lines.append(f"note: {shape}: nerve's W8 plan runs {ops_}, not linear_w8/linear_w8a8 (the int8 weight's "
                     "Cast and Mul were not folded: the weight is dequantised on every run)")
    if result["cold"] and not all(r["streamed"] for r in result["rows"]):
        lines.append(f"* the copies of this weight ({_MAX_COPIES} at most) hold less than 2x the last-level cache: "
                     "partly cache-resident")
    lines.append("")
    lines += result["headlines"]
    lines.append("output checks (cosine to float64 x·Wdeqᵀ, >= 0.999 fp32 activations, >= 0.99 int8): "
                 + ("all passed" if result["checks_passed"] else "SOME FAILED (marked FAIL)"))
    lines.append(f"total {result['seconds']:.1f} s")
    return "\n".join(lines)
