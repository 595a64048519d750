"""``nerve bench ops``: kernel speed on this machine, each number next to a peer measured in
the same run.

(a) embedding gather bandwidth next to memcpy bandwidth (``np.copyto`` of the same number of
    bytes) for rows of 256 B, 1 KiB, 4 KiB and 16 KiB, random ids over a float32 table at
    least 4x the last-level cache;
(b) fused ``layernorm_linear`` against ``layernorm`` then ``linear``;
(c) for each op, the variant the dispatch table chose against the scalar reference "ref".

Every time is the median over ``repeat`` samples; a sample loops the call until it lasts a
few milliseconds. Each comparison runs its two sides in interleaved pairs (alternating
which goes first) and reports the median of the per-pair ratios, so the drift of a shared
machine hits both sides alike. Times include the Python call (argument checks, a few microseconds). There
are no thresholds: the command reports.
"""

from __future__ import annotations

import contextlib
import glob
import os
import platform
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import info as nerve_info
from . import kernels, ops
from ._marshal import empty_aligned

__all__ = ["machine", "last_level_cache_bytes", "run", "format_report"]

MiB = 1 << 20
GiB = 1 << 30
ROW_BYTES = (256, 1024, 4096, 16384)
FUSED_ROWS = (1, 4, 16, 64)
FUSED_SHAPES = ((384, 1536), (1024, 1024))
_DEFAULT_LLC = 32 * MiB
_TABLE_CAP = 1 * GiB  # keeps the default run within ~2 GiB of RAM


# ------------------------------------------------------------------------- the machine

def example_audio_dir() -> "os.PathLike":
    """The repository's examples/audio (the command recordings the speech benchmarks use): in
    the working directory (a checkout, where `make` runs) or beside this source tree. An
    installed package does not carry them: InputError says what to do."""
    from pathlib import Path

    from .errors import InputError

    for folder in (Path.cwd() / "examples" / "audio", Path(__file__).resolve().parents[2] / "examples" / "audio"):
        if folder.is_dir() and any(folder.glob("*.wav")):
            return folder
    raise InputError("the example recordings (examples/audio/*.wav of the nerve repository) were not found: run "
                     "from the repository's folder, or give the recordings to use (--audio)")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key in ("model name", "Hardware", "Model", "cpu model", "Processor"):
        if fields.get(key):
            return fields[key]
    try:  # aarch64 boards (Jetson, Raspberry Pi) name themselves in the device tree
        with open("/proc/device-tree/model", "rb") as f:
            board = f.read().rstrip(b"\0").decode("utf-8", errors="replace").strip()
    except OSError:
        board = ""
    if board:
        return board
    if "CPU implementer" in fields:  # aarch64 without a model name
        return f"ARM implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
    return platform.processor() or platform.machine() or "unknown"


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale


def last_level_cache_bytes() -> Optional[int]:
    """Size of cpu0's last-level data/unified cache from sysfs, None if unknown."""
    best = None
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(index, "level")) as f:
                level = int(f.read())
            with open(os.path.join(index, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if best is None or (level, size) > best:
            best = (level, size)
    return best[1] if best else None


def machine() -> Dict[str, object]:
    """CPU model, logical cores, architecture, last-level cache, kernel selection."""
    desc = nerve_info()
    llc = last_level_cache_bytes()
    return {
        "cpu_model": cpu_model(),
        "cores": desc["cpu"]["count"],
        "arch": desc["cpu"]["arch"],
        "features": desc["cpu"]["features"],
        "llc_bytes": llc,
        "nerve_version": desc["version"],
        "kernels": desc["kernels"],
    }


# ------------------------------------------------------------------------- timing

def median_us(fn: Callable[[], object], n: int, warmup: int = 1) -> float:
    """Median wall time of n calls of fn, in microseconds, after `warmup` untimed calls (the
    bench/ scripts' one-call timing)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def _sampler(fn: Callable[[], object], context: Optional[Callable[[], object]] = None):
    """A function inner -> seconds per call of fn, looping it `inner` times (inside
    `context()`, e.g. a forced kernel variant, when given)."""

    def sample(inner: int) -> float:
        with context() if context else contextlib.nullcontext():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            return (time.perf_counter() - t0) / inner

    return sample


def _paired_times(sample_a, sample_b, repeat: int, sample_s: float):
    """Times two samplers in interleaved pairs, alternating which goes first, so drift of
    the machine (other load, clock, cache state) hits both alike. Returns (median seconds
    per call of a, of b, median over pairs of b/a)."""
    inner = []
    for sample in (sample_a, sample_b):
        sample(1)  # warm-up: page faults, dispatch resolution
        inner.append(max(1, int(sample_s / max(sample(1), 1e-7))))
    t_a, t_b, ratios = [], [], []
    for i in range(repeat):
        if i % 2 == 0:
            a, b = sample_a(inner[0]), sample_b(inner[1])
        else:
            b, a = sample_b(inner[1]), sample_a(inner[0])
        t_a.append(a)
        t_b.append(b)
        ratios.append(b / a)
    return statistics.median(t_a), statistics.median(t_b), statistics.median(ratios)


# ------------------------------------------------------------------------- (a) embedding

def _bench_embedding(repeat: int, quick: bool, sample_s: float, rng) -> Dict[str, object]:
    llc = last_level_cache_bytes()
    llc_known = llc is not None
    llc = llc or _DEFAULT_LLC
    if quick:
        table_bytes = 16 * MiB
        out_bytes = 1 * MiB
    else:
        table_bytes = max(4 * llc, 64 * MiB)
        out_bytes = 16 * MiB
    capped = table_bytes > _TABLE_CAP
    table_bytes = min(table_bytes, _TABLE_CAP)
    table_bytes -= table_bytes % max(ROW_BYTES)
    flat = np.full(table_bytes // 4, 0.5, dtype=np.float32)  # written once: pages are mapped
    out_flat = empty_aligned((out_bytes // 4,))
    # Enough different id sets that one round of them gathers more than the LLC holds,
    # so repeated calls do not find their rows in cache.
    n_sets = 2 if quick else max(2, -(-2 * llc // out_bytes) + 1)
    rows_out = []
    for row_bytes in ROW_BYTES:
        dim = row_bytes // 4
        table = flat.reshape(-1, dim)
        n_ids = out_bytes // row_bytes
        id_sets = [rng.integers(0, table.shape[0], n_ids, dtype=np.int64) for _ in range(n_sets)]
        out = out_flat[: n_ids * dim].reshape(n_ids, dim)
        state = {"i": 0}

        def gather():
            state["i"] = (state["i"] + 1) % n_sets
            ops.embedding(table, id_sets[state["i"]], out=out)

        copy_elems = n_ids * dim
        n_regions = max(1, flat.size // copy_elems)
        cstate = {"i": 0}

        def copy():
            # A different region of the table each call, as the gather reads scattered rows.
            cstate["i"] = (cstate["i"] + 7) % n_regions
            start = cstate["i"] * copy_elems
            np.copyto(out_flat[:copy_elems], flat[start: start + copy_elems])

        t_copy, t_gather, time_ratio = _paired_times(_sampler(copy), _sampler(gather), repeat, sample_s)
        nbytes = n_ids * row_bytes
        rows_out.append({
            "row_bytes": row_bytes, "dim": dim, "ids": n_ids, "bytes": nbytes,
            "embedding_gbps": nbytes / t_gather / 1e9, "memcpy_gbps": nbytes / t_copy / 1e9,
            "ratio": 1.0 / time_ratio,  # median over pairs of memcpy time / gather time
        })
    return {
        "table_bytes": table_bytes, "llc_bytes": llc if llc_known else None, "table_capped": capped,
        "variant": kernels.selected("embedding"), "rows": rows_out,
    }


# ------------------------------------------------------------------------- (b) fused

def _bench_fused(repeat: int, quick: bool, sample_s: float, rng) -> List[Dict[str, object]]:
    results = []
    shapes = FUSED_SHAPES
    row_counts = FUSED_ROWS if not quick else (1, 16)
    for n_in, n_out in shapes:
        W = rng.standard_normal((n_out, n_in), dtype=np.float32)
        b = rng.standard_normal(n_out, dtype=np.float32)
        gamma = rng.standard_normal(n_in, dtype=np.float32)
        beta = rng.standard_normal(n_in, dtype=np.float32)
        for rows in row_counts:
            x = rng.standard_normal((rows, n_in), dtype=np.float32)
            y = empty_aligned((rows, n_out))
            tmp = empty_aligned(x.shape)

            def fused():
                ops.layernorm_linear(x, gamma, beta, W, b, out=y)

            def unfused():
                ops.layernorm(x, gamma, beta, out=tmp)
                ops.linear(tmp, W, b, out=y)

            t_fused, t_unfused, ratio = _paired_times(_sampler(fused), _sampler(unfused), repeat, sample_s)
            results.append({
                "rows": rows, "in": n_in, "out": n_out, "fused_us": t_fused * 1e6,
                "unfused_us": t_unfused * 1e6, "ratio": ratio,
            })
    return results


# ------------------------------------------------------------------------- (c) variants

def _op_workloads(quick: bool, rng) -> Dict[str, tuple]:
    """op name -> (description, zero-argument callable running that op)."""
    s = 4 if quick else 1  # quick: sizes divided by s (and by s*s for 2-D work)
    rows, dim = 256 // s, 1024 // s
    n_act = (1 << 20) // (s * s)
    table_rows, table_dim, n_ids = 65536 // (s * s), 256, 16384 // (s * s)

    def f32(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    table = f32(table_rows, table_dim)
    table16 = table.astype(np.float16)
    table8 = rng.integers(-127, 128, (table_rows, table_dim), dtype=np.int8)
    scales = rng.random(table_rows, dtype=np.float32)
    ids = rng.integers(0, table_rows, n_ids, dtype=np.int64)
    emb_out = empty_aligned((n_ids, table_dim))
    x, gamma, beta = f32(rows, dim), f32(dim), f32(dim)
    lin_rows = 64 // s
    xl, W, b = f32(lin_rows, dim), f32(dim, dim), f32(dim)
    yl = empty_aligned((lin_rows, dim))
    y = empty_aligned(x.shape)
    g = 256 // s
    ga, gb, gc = f32(g, g), f32(g, g), empty_aligned((g, g))
    xa, ya = f32(n_act), empty_aligned((n_act,))
    emb = f"{n_ids} ids x {table_dim} from {table_rows} rows"
    return {
        "embedding": (emb + " f32", lambda: ops.embedding(table, ids, out=emb_out)),
        "embedding_f16": (emb + " f16", lambda: ops.embedding(table16, ids, out=emb_out)),
        "embedding_q8": (emb + " i8", lambda: ops.embedding(table8, ids, out=emb_out, row_scales=scales)),
        "layernorm": (f"[{rows}, {dim}]", lambda: ops.layernorm(x, gamma, beta, out=y)),
        "linear": (f"[{lin_rows}, {dim}] x [{dim}, {dim}]", lambda: ops.linear(xl, W, b, out=yl)),
        "layernorm_linear": (f"[{lin_rows}, {dim}] x [{dim}, {dim}]",
                             lambda: ops.layernorm_linear(xl, gamma, beta, W, b, out=yl)),
        "gemm": (f"{g}x{g}x{g}", lambda: ops.gemm(ga, gb, out=gc)),
        "gelu": (f"{n_act} elements", lambda: ops.gelu(xa, out=ya)),
        "gelu_tanh": (f"{n_act} elements", lambda: ops.gelu(xa, approximate="tanh", out=ya)),
        "relu": (f"{n_act} elements", lambda: ops.relu(xa, out=ya)),
        "sigmoid": (f"{n_act} elements", lambda: ops.sigmoid(xa, out=ya)),
        "tanh": (f"{n_act} elements", lambda: ops.tanh(xa, out=ya)),
        "softmax": (f"[{rows}, {dim}]", lambda: ops.softmax(x, out=y)),
    }


def _bench_variants(repeat: int, quick: bool, sample_s: float, rng) -> List[Dict[str, object]]:
    workloads = _op_workloads(quick, rng)
    results = []
    for op in kernels.ops():
        if op not in workloads:
            results.append({"op": op, "workload": "(no workload in this bench)", "variant": kernels.selected(op),
                            "variant_us": None, "ref_us": None, "ratio": None})
            continue
        desc, fn = workloads[op]
        chosen = kernels.selected(op)
        t_fast, t_ref, ratio = _paired_times(
            _sampler(fn, lambda: kernels.force(op, chosen)),
            _sampler(fn, lambda: kernels.force(op, "ref")), repeat, sample_s)
        results.append({"op": op, "workload": desc, "variant": chosen, "variant_us": t_fast * 1e6,
                        "ref_us": t_ref * 1e6, "ratio": ratio})
    return results


# ------------------------------------------------------------------------- driver

def run(repeat: Optional[int] = None, quick: bool = False, seed: int = 0) -> Dict[str, object]:
    """Runs the three benchmarks and returns their results as a dict (see format_report)."""
    if repeat is None:
        repeat = 3 if quick else 11
    repeat = max(1, int(repeat))
    sample_s = 0.002 if quick else 0.01
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    result = {
        "machine": machine(),
        "repeat": repeat,
        "quick": bool(quick),
        "embedding": _bench_embedding(repeat, quick, sample_s, rng),
        "fused": _bench_fused(repeat, quick, sample_s, rng),
        "variants": _bench_variants(repeat, quick, sample_s, rng),
    }
    result["seconds"] = time.perf_counter() - started
    return result


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """Aligned text table; ``align`` has one letter per column, 'l' or 'r' (default: the
    first column left, the others right)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(values):
        return "  ".join(v.rjust(w) if a == "r" else v.ljust(w) for v, w, a in zip(values, widths, align)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _bytes(n: Optional[int]) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_report(result: Dict[str, object]) -> str:
    """The human-readable report of run()'s result."""
    mach = result["machine"]
    emb = result["embedding"]
    lines = [
        f"nerve {mach['nerve_version']} bench ops -- median of {result['repeat']} samples"
        + (" (quick)" if result["quick"] else ""),
        f"machine: {mach['cpu_model']}, {mach['cores']} logical cores, {mach['arch']}, "
        f"last-level cache {_bytes(mach['llc_bytes'])}",
        "",
        f"(a) embedding gather vs memcpy (np.copyto of the same bytes); float32 table of "
        f"{_bytes(emb['table_bytes'])}"
        + (" (capped)" if emb["table_capped"] else "")
        + f", random ids, variant '{emb['variant']}'",
    ]
    lines.append(format_table(
        ["row", "ids", "bytes", "embedding GB/s", "memcpy GB/s", "ratio"],
        [[_bytes(r["row_bytes"]), r["ids"], _bytes(r["bytes"]), f"{r['embedding_gbps']:.2f}",
          f"{r['memcpy_gbps']:.2f}", f"{r['ratio']:.2f}"] for r in emb["rows"]],
        align="rrrrrr",
    ))
    lines += ["", "(b) fused layernorm_linear vs layernorm then linear (ratio = unfused / fused time)"]
    lines.append(format_table(
        ["in", "out", "rows", "fused us", "unfused us", "ratio"],
        [[r["in"], r["out"], r["rows"], f"{r['fused_us']:.1f}", f"{r['unfused_us']:.1f}", f"{r['ratio']:.2f}"]
         for r in result["fused"]],
        align="rrrrrr",
    ))
    lines += ["", "(c) chosen variant vs the scalar reference 'ref' (ratio = ref / variant time)"]

    def us(v):
        return "-" if v is None else f"{v:.1f}"

    lines.append(format_table(
        ["op", "workload", "variant", "variant us", "ref us", "ratio"],
        [[r["op"], r["workload"], r["variant"], us(r["variant_us"]), us(r["ref_us"]),
          "-" if r["ratio"] is None else f"{r['ratio']:.2f}"] for r in result["variants"]],
        align="lllrrr",
    ))
    lines += ["", f"total {result['seconds']:.1f} s"]
    return "\n".join(lines)
