"""Sessions: a compiled plan loaded into libnerve and run in one native call.

    sess = nerve.Session("model.onnx", dims={"sequence": 576})   # compiled on load, cached
    out = sess.run({"input": x, "state": s, "sr": np.array(16000)})

    plan = nerve.compile("model.onnx", dims={...})   # -> Plan
    plan.save("model.nrv"); nerve.Session("model.nrv")

The plan is produced by :mod:`nerve.compiler` (Python) and executed by ``native/src/plan``
(C). Compiled plans are cached under ``$XDG_CACHE_HOME/nerve/plans`` keyed by the SHA-256 of
the model bytes and the compile options (``NERVE_PLAN_CACHE=0`` or ``cache=False`` disables).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._native import check, ffi, lib, to_str
from . import precision as precision_scheme
from .errors import InputError, ModelError, UnboundDimsError

if TYPE_CHECKING:  # annotations only: the runtime never imports onnx
    import onnx

__all__ = ["Session", "Plan", "compile", "run_program_once", "cache_dir", "MemoryBudget", "Reservation"]

_DTYPE_OF_CODE = {0: np.float32, 1: np.float16, 2: np.int8, 3: np.int32, 4: np.int64, 5: np.uint8, 6: np.bool_,
                  7: np.float64}
_CODE_OF_DTYPE = {np.dtype(v): k for k, v in _DTYPE_OF_CODE.items()}
_STORAGE = {0: "arena", 1: "weight", 2: "input", 3: "state"}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nerve"


class Plan:
    """A compiled plan: the bytes of a ``.nrv`` file."""

    def __init__(self, data: bytes, source: str = ""):
        self.data = bytes(data)
        self.source = source

    @property
    def hash(self) -> str:
        """SHA-256 (hex) over the plan's metadata and weights, as stored in its header."""
        return self.data[56:88].hex()

    def save(self, path: Union[str, os.PathLike]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, self.data)
        return path

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Plan":
        try:
            return cls(Path(path).read_bytes(), str(path))
        except OSError as exc:
            raise ModelError(f"cannot read plan {path}: {exc}") from exc

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        return f"<nerve.Plan {len(self.data)} bytes sha256={self.hash[:12]}… from {self.source or '?'}>"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _json_key_part(obj) -> str:
    if isinstance(obj, np.ndarray):  # by content, never numpy's abbreviated repr
        return f"{obj.dtype.str}{obj.shape}:{hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()}"
    return str(obj)


_FINGERPRINT: Optional[bytes] = None


def _compiler_fingerprint() -> bytes:
    """Digest of the compiler's own sources and the plan format: a cached plan is reused only
    by the compiler that made it (an edited pass must not be served a stale plan). The
    quantizer (quant.py: W4/W8 codes, GPTQ) and the precision names are part of it: they
    decide a quantized plan's weights."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        h = hashlib.sha256(b"nrv3")
        here = Path(__file__).parent
        for f in sorted((here / "compiler").glob("*.py")) + [here / "quant.py", here / "precision.py"]:
            h.update(f.name.encode() + f.read_bytes())
        _FINGERPRINT = h.digest()
    return _FINGERPRINT


def _options_key(options: Mapping) -> str:
    return json.dumps({k: options[k] for k in sorted(options)}, sort_keys=True, default=_json_key_part)


def compile(model: Union[str, os.PathLike, bytes, "onnx.ModelProto"], *, dims: Optional[Mapping[str, int]] = None,
            state: Optional[Mapping[str, str]] = None, fuse: bool = True, cache: bool = True,
            constants: Optional[Mapping[str, object]] = None,
            outputs: Optional[Sequence[str]] = None, precision: str = "fp32",
            layers: Optional[Mapping[str, str]] = None, hessians: Optional[Mapping[str, np.ndarray]] = None) -> Plan:
    """Compiles an ONNX model (``.onnx``, or ONNX Runtime's ``.ort``; a path, or the model in
    memory as an ``onnx.ModelProto`` or its bytes — then without external data) into a
    :class:`Plan`.

    dims: upper bounds of the model's symbolic dimensions (``{"sequence": 576}``); memory is
    planned for them and each run may use any size up to them.
    state: ``{output_name: input_name}`` pairs carried from one run to the next inside the
    session (the output is written where the next run reads the input: no copy).
    fuse: apply the fusion passes (layernorm, gelu, linear, conv+activation, ...).
    constants: ``{input_name: value}`` inputs fixed at compile time (folded; an ``If`` on one
    is specialised, so e.g. a merged decoder's first and next steps become two lean plans).
    outputs: the output names to keep (default all); what only the others need is dropped.
    precision: "fp32" (default: matches onnxruntime's fp32 within float rounding), "int8"/"w8a8"
    (every linear's weight int8, its activations quantised per row: linear_w8a8), "w4a32" or
    "w4a8" (linear layers get group-wise INT4 weights, quantised at compile time; ":g32"/
    ":g128" picks the group) — the list and the trade-offs: :mod:`nerve.precision`.
    layers: per-layer overrides {linear op name (as ``Session.ops()`` names it): "fp32" |
    "int8" | "w8a32" | "w4a32" | "w4a8"}: what :func:`nerve.quantize`'s policies produce.
    hessians: {linear layer name: Σ xᵀx over calibration inputs} (:class:`nerve.quant.LinearTaps`):
    at a W4 precision those layers are quantized with GPTQ's error compensation.
    """
    precision_scheme.parse(precision)
    if precision_scheme.calibrated(precision) and not hessians:
        raise InputError(f"precision {precision!r} asks for GPTQ weights: give hessians= (calibration statistics "
                         "from nerve.quant.LinearTaps, or nerve.asr.calibrate for speech models)")
    from .compiler import compile_onnx, passes  # the compiler imports onnx: only when compiling

    if _in_memory(model):  # onnx.ModelProto or its serialized bytes: no folder for external data
        model_bytes = bytes(model) if isinstance(model, (bytes, bytearray, memoryview)) else model.SerializeToString()
        path, model_dir = Path("<in-memory model>"), None
    else:
        path = Path(model)
        model_dir = path.parent
        try:
            model_bytes = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"cannot read model {path}: {exc}") from exc
    options = {"dims": dict(dims or {}), "state": dict(state or {}), "fuse": bool(fuse), "precision": precision,
               "w8": os.environ.get("NERVE_W8", "1").strip() != "0",  # passes.select_linear_w8
               "w8a8": os.environ.get("NERVE_W8A8", "0").strip() == "1",  # passes.select_linear_w8a8
               "w8a8_conv": passes.w8a8_convs_mode()}
    if constants:
        options["constants"] = {k: np.asarray(v) for k, v in constants.items()}
    if outputs is not None:
        options["outputs"] = list(outputs)
    if layers:
        options["layers"] = dict(layers)
    if hessians:
        digest = hashlib.sha256()
        for name in sorted(hessians):
            digest.update(name.encode() + b"|" + np.ascontiguousarray(hessians[name], np.float64).tobytes())
        options["hessians_sha256"] = digest.hexdigest()
    key = hashlib.sha256(model_bytes + _options_key(options).encode() + _compiler_fingerprint()).hexdigest()
    use_cache = cache and os.environ.get("NERVE_PLAN_CACHE", "1") != "0"
    cached = cache_dir() / "plans" / f"{key}.nrv"
    if use_cache and cached.is_file():
        return Plan(cached.read_bytes(), str(path))
    onnx_bytes = model_bytes
    if model_bytes[4:8] == b"ORTM":  # ONNX Runtime's flatbuffer format: read into ONNX first
        from .compiler.ort_format import load_ort
        onnx_bytes = load_ort(model_bytes).SerializeToString()
    data = compile_onnx(onnx_bytes, model_dir, hessians=hessians,
                        **{k: v for k, v in options.items() if k not in ("w8", "w8a8", "w8a8_conv", "hessians_sha256")})
    plan = Plan(data, str(path))
    if use_cache:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(cached, data)
        except OSError:
            pass  # a read-only cache is not an error
    return plan


def _in_memory(model) -> bool:
    """An ONNX model given in memory (onnx.ModelProto, or its bytes) rather than a path."""
    return isinstance(model, (bytes, bytearray, memoryview)) or hasattr(model, "SerializeToString")


_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


def _parse_bytes(value: Union[int, str], what: str) -> int:
    """Bytes from an int or a string like "64MB", "1.5 GiB", "500kB"."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
        return int(value)
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        num = text.rstrip("kmgib")
        unit = text[len(num):]
        try:
            n = float(num) * _UNITS[unit]
        except (ValueError, KeyError):
            n = -1
        if n > 0:
            return int(n)
    raise InputError(f"{what} must be a positive number of bytes or a size like '64MB' / '1.5GiB', got {value!r}")


def _weight_bytes(plan: Plan) -> int:
    raw = ffi.new("nrv_session_memory *")
    native = _Native(plan.data)
    check(lib.nrv_session_memory_get(native.ptr, raw))
    return int(raw.weight_bytes)


def _fit_memory(plan: Plan, compile_args: dict, precision: str, limit: int):
    """(plan, report) for Session(memory_limit=limit): the requested precision when its weights
    fit; else every linear layer W4 (w4a32 for an fp32 request, w4a8 otherwise) and then, layer
    by layer from the smallest, as many layers back at the requested precision as the limit
    allows. OutOfMemoryError when even all-W4 weights do not fit."""
    from .errors import OutOfMemoryError

    got = _weight_bytes(plan)
    if got <= limit:
        return plan, {"limit": limit, "weight_bytes": got, "fallback": None,
                      "why": f"{precision}: its {got} weight bytes fit in {limit}"}
    scheme, group = precision_scheme.parse(precision)
    if scheme in ("w4a32", "w4a8"):
        raise OutOfMemoryError(f"memory_limit: the weights need {got} bytes at {precision}, the lowest precision "
                               f"nerve has; the limit is {limit}")
    low = f"{'w4a32' if scheme in ('fp32', 'fp16', 'w8a32') else 'w4a8'}:g{group}"  # float activations stay float
    low_plan = compile(precision=low, **compile_args)
    floor = _weight_bytes(low_plan)
    if floor > limit:
        raise OutOfMemoryError(f"memory_limit: the weights need {floor} bytes even with every linear layer at {low} "
                               f"({got} at {precision}); the limit is {limit}")
    sess = Session(low_plan)
    sizes = {o["name"]: 4 * n * k for o in sess.ops() if o["type"].startswith("linear_w4")
             for n, k in [_w4_dims(sess, o)]}
    kept: List[str] = []
    spare = limit - floor
    for name in sorted(sizes, key=lambda nm: sizes[nm]):  # the most layers back for the bytes
        extra = sizes[name] - (sizes[name] // 8 + 2 * (sizes[name] // 4 // group))
        if extra <= spare:
            kept.append(name)
            spare -= extra
    chosen = low_plan
    while kept:
        chosen = compile(precision=low, layers={nm: "fp32" for nm in kept}, **compile_args)
        if _weight_bytes(chosen) <= limit:
            break
        kept.pop()  # the estimate was short (e.g. a layer stored int8): give back the largest
        chosen = low_plan
    wb = _weight_bytes(chosen)
    return chosen, {"limit": limit, "weight_bytes": wb, "fallback": low, "kept": list(kept),
                    "why": f"{precision} needs {got} weight bytes, over the limit {limit}: every linear layer at "
                           f"{low} ({floor} bytes), then {len(kept)} of {len(sizes)} back as the model stores "
                           f"them, smallest first, while they fit ({wb} bytes)"}


class MemoryBudget:
    """Bytes shared by sessions and other holders (a stream's KV cache, a second model's
    buffers) on a device with little memory (seed §3.3).

        budget = nerve.MemoryBudget("96MB")
        asr = nerve.Session("model.onnx", budget=budget, priority=0, on_memory_change=print)
        with budget.reserve(40 << 20, "kv cache of stream 2"):   # sessions step down to make room
            ...

    A session attached to the budget counts its current weight bytes. When a reservation (or a
    session joining) would go over the limit, attached sessions step down (Session.step_down:
    linear layers to INT4, smallest first) — lowest ``priority`` first, then the heaviest —
    until it fits; each one's ``on_memory_change`` is told. OutOfMemoryError, with nothing
    reserved, when even that cannot make room. Releasing a reservation does not step sessions
    back up by itself: call ``session.set_memory_limit(...)`` when the room is back.
    Thread-safe."""

    def __init__(self, limit: Union[int, str]):
        import threading

        self.limit = _parse_bytes(limit, "limit")
        self._sessions: List[tuple] = []  # (priority, order, weakref to a Session)
        self._reserved: Dict[int, tuple] = {}
        self._lock = threading.RLock()
        self._order = 0

    def _live(self) -> List["Session"]:
        out = []
        for entry in list(self._sessions):
            sess = entry[2]()
            if sess is None:
                self._sessions.remove(entry)
            else:
                out.append(sess)
        return out

    @property
    def used(self) -> int:
        with self._lock:
            return sum(s.weight_bytes for s in self._live()) + sum(n for n, _ in self._reserved.values())

    def _make_room(self, need: int, exclude=None) -> None:
        """Steps sessions down until used + need fits (the lock is held)."""
        from .errors import OutOfMemoryError

        over = self.used + need - self.limit
        if over <= 0:
            return
        order = sorted((e for e in self._sessions if e[2]() is not None and e[2]() is not exclude),
                       key=lambda e: (e[0], -e[2]().weight_bytes))
        for _prio, _n, ref in order:
            sess = ref()
            try:
                sess.step_down(min(over, sess.weight_bytes - 1))
            except OutOfMemoryError:
                pass  # already as small as it gets: try the next one
            over = self.used + need - self.limit
            if over <= 0:
                return
        raise OutOfMemoryError(f"memory budget: {need} more bytes do not fit in {self.limit} ({self.used} in use "
                               f"after every session stepped down as far as it can)")

    def _attach(self, session: "Session", priority: int) -> None:
        import weakref

        with self._lock:
            self._order += 1
            self._sessions.append((int(priority), self._order, weakref.ref(session)))
            over = self.used - self.limit
            if over > 0:  # the newcomer fits itself first, then the others make room
                try:
                    session.step_down(over)
                except Exception:  # noqa: BLE001 - any failure: let the others try
                    pass
                self._make_room(0)

    def reserve(self, nbytes: int, what: str = "") -> "Reservation":
        """Holds nbytes for something other than a session's weights; sessions step down to
        make room. Use as a context manager or call ``release()``."""
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise InputError(f"nbytes must be a non-negative int, got {nbytes!r}")
        with self._lock:
            self._make_room(int(nbytes))
            self._order += 1
            self._reserved[self._order] = (int(nbytes), what)
            return Reservation(self, self._order, int(nbytes), what)

    def _release(self, key: int) -> None:
        with self._lock:
            self._reserved.pop(key, None)

    def report(self) -> dict:
        with self._lock:
            return {"limit": self.limit, "used": self.used,
                    "sessions": [{"priority": p, "weight_bytes": r().weight_bytes,
                                  "precision": r().precision,
                                  "memory_limit": r().memory_choice} for p, _n, r in self._sessions if r() is not None],
                    "reserved": [{"bytes": n, "what": w} for n, w in self._reserved.values()]}


class Reservation:
    """Bytes held in a MemoryBudget until released (or the with-block ends)."""

    def __init__(self, budget: MemoryBudget, key: int, nbytes: int, what: str):
        self.budget, self._key, self.nbytes, self.what = budget, key, nbytes, what

    def release(self) -> None:
        self.budget._release(self._key)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _w4_dims(sess: "Session", op: dict):
    """(N, K) of a linear_w4 op: its values tensor is [N, K/2] (packed) or [N, K]."""
    t = sess.tensors()[op["inputs"][1]]
    n, cols = t["shape"]
    return int(n), int(cols) * (2 if t["dtype"] == np.uint8 else 1)


def default_threads() -> int:
    """Threads a Session uses when none are given: NERVE_THREADS when set, else the physical
    cores among the CPUs this process may run on (its affinity mask: what taskset or a
    container's cpuset allows), as onnxruntime's default does. Two threads on the two
    hardware threads of one core share its FMA units, and a spinning one slows the other."""
    env = os.environ.get("NERVE_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise InputError(f"NERVE_THREADS must be a positive integer, got {env!r}")
        return int(env)
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    return max(1, physical_cores(cpus))


def physical_cores(cpus: Sequence[int], sysfs: Union[str, os.PathLike] = "/sys/devices/system/cpu") -> int:
    """How many cores the logical CPUs ``cpus`` are on: the distinct sets of hardware threads
    (sysfs ``topology/thread_siblings_list``) they belong to; ``len(cpus)`` where that is not
    readable (another OS, a sandbox). Sibling sets rather than (package, core id): arm64
    kernels may number cores per cluster with no package, which would merge distinct cores."""
    cores = set()
    for cpu in cpus:
        try:
            cores.add((Path(sysfs) / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return len(cores)


class _Native:
    """Owns one nrv_session_t."""

    def __init__(self, data: bytes):
        out = ffi.new("nrv_session_t **")
        buf = ffi.from_buffer(data)
        check(lib.nrv_session_create(buf, len(data), out))
        self.ptr = ffi.gc(out[0], lib.nrv_session_free)

    def io(self, is_output: bool) -> List[dict]:
        n = (lib.nrv_session_output_count if is_output else lib.nrv_session_input_count)(self.ptr)
        infos = []
        for i in range(n):
            raw = ffi.new("nrv_io_info *")
            check(lib.nrv_session_io_info(self.ptr, int(is_output), i, raw))
            dims = []
            for k in range(raw.rank):
                dims.append(int(raw.dims[k]) if raw.dims[k] >= 0 else (to_str(raw.dim_names[k]) or "?"))
            bounds = {to_str(raw.dim_names[k]): int(raw.dim_bounds[k]) for k in range(raw.rank) if raw.dims[k] < 0}
            infos.append({"name": to_str(raw.name), "dtype": np.dtype(_DTYPE_OF_CODE[raw.dtype]), "shape": dims,
                          "bounds": bounds, "state_partner": int(raw.state_partner)})
        return infos


def _run_native(native: _Native, feeds_c, n_in: int, outs_c, n_out: int) -> None:
    check(lib.nrv_session_run(native.ptr, feeds_c, n_in, outs_c, n_out))


_NP_DTYPE = {k: np.dtype(v) for k, v in _DTYPE_OF_CODE.items()}


def _copy_out(t, dest: Optional[np.ndarray] = None, name: str = "") -> np.ndarray:
    """The run's output t (which points into the session's memory) copied into dest, or into
    a fresh array. dest passed _check_out's checks; its shape is checked here, as an output's
    symbolic dims are known only after the run."""
    shape = tuple(t.dims[0:t.rank])
    if dest is None:
        dest = np.empty(shape, _NP_DTYPE[t.dtype])
    elif dest.shape != shape:
        raise InputError(f"out[{name!r}] has shape {list(dest.shape)}, this run's output {list(shape)}: nothing was "
                         "written to it (the run itself happened: a session's state moved on)")
    if dest.nbytes:
        ffi.memmove(dest, t.data, dest.nbytes)
    return dest


def _check_out(out: Mapping[str, np.ndarray], returned: Mapping[str, dict], output_names: Sequence[str]) -> None:
    """Refuses, before the run, an `out` that names no returned output (returned: their infos
    by name) or holds an array the output cannot be copied into (not an ndarray, another
    dtype, not C-contiguous, read-only, a shape no run can have)."""
    for name, dest in out.items():
        info = returned.get(name)
        if info is None:
            raise InputError(f"out names {name!r}: " + ("an output the session keeps as state (it is not returned)"
                                                        if name in output_names else f"not an output of the model "
                                                        f"(outputs: {sorted(returned)})"))
        if not isinstance(dest, np.ndarray):
            raise InputError(f"out[{name!r}] must be a numpy array, got {type(dest).__name__}")
        if dest.dtype != info["dtype"]:
            raise InputError(f"out[{name!r}] has dtype {dest.dtype}, the output is {info['dtype']}")
        if not dest.flags.c_contiguous or not dest.flags.writeable:
            raise InputError(f"out[{name!r}] must be C-contiguous and writable")
        fixed = info["shape"]  # ints, and the names of symbolic dims
        if dest.ndim != len(fixed) or any(isinstance(d, int) and d != n for d, n in zip(fixed, dest.shape)):
            raise InputError(f"out[{name!r}] has shape {list(dest.shape)}, the output's is {fixed}")


def run_program_once(prog) -> List[np.ndarray]:
    """Serialises a feed-less program, runs it once, returns its outputs (constant folding)."""
    from .compiler.planfile import serialize

    native = _Native(serialize(prog))
    n_out = len(prog.outputs)
    outs = ffi.new("nrv_tensor[]", max(n_out, 1))
    _run_native(native, ffi.NULL, 0, outs, n_out)
    return [_copy_out(outs[i]) for i in range(n_out)]


class Session:
    """A model loaded for inference.

    ``model``: an ``.onnx`` file (compiled on load; cached), an ``onnx.ModelProto`` or its
    bytes, a ``.nrv`` plan, or a :class:`Plan`. ``dims``/``state``/``constants``/``outputs``:
    see :func:`compile` (ignored for a ready plan). Symbolic dims ``dims`` leaves unbound are bound by the first run's
    feeds (the plan is compiled then; :meth:`run` says when it recompiles); ``log=`` and
    ``budget=`` need every bound up front.
    ``device="cpu"``; ``precision`` one of :mod:`nerve.precision` (see :func:`compile`); ``threads`` is the
    number of threads for the big ops: by default one per physical core this process may run
    on (:func:`default_threads`, as onnxruntime does), 1 for a predictable single core (the
    benchmarks' goals are measured at one thread). Results are the same bits at any count.
    ``log``: a JSON-lines provenance log (see :mod:`nerve.provenance`); ``nerve replay LOG``
    re-runs it and confirms the outputs.
    ``memory_limit`` (bytes, or "64MB", "1.5GiB"): when the weights at ``precision`` do not fit,
    every linear layer takes INT4 weights and then as many layers as fit go back to
    ``precision``, smallest first; ``memory_report()["layers"]`` names each layer's precision
    and ``["memory_limit"]`` the choice and why (OutOfMemoryError if even INT4 does not fit).
    ``budget`` (a :class:`MemoryBudget` shared with other sessions and reservations such as a
    stream's KV cache): when it runs short, sessions step down by themselves (lowest
    ``priority`` first) the same way, and ``on_memory_change(report)`` is called with the new
    choice; :meth:`set_memory_limit` / :meth:`step_down` do it on request.
    """

    def __init__(self, model: Union[str, os.PathLike, bytes, "onnx.ModelProto", Plan], device: str = "cpu",
                 precision: str = "fp32",
                 threads: Optional[int] = None, *, dims: Optional[Mapping[str, int]] = None,
                 state: Optional[Mapping[str, str]] = None, fuse: bool = True, cache: bool = True,
                 constants: Optional[Mapping[str, object]] = None, outputs: Optional[Sequence[str]] = None,
                 log: Optional[Union[str, os.PathLike]] = None, memory_limit: Union[int, str, None] = None,
                 budget: Optional["MemoryBudget"] = None, priority: int = 0,
                 on_memory_change: Optional[Callable[[dict], None]] = None):
        if device != "cpu":
            raise InputError(f"device {device!r} is not supported by Session yet (use 'cpu')")
        precision_scheme.parse(precision)
        if threads is None:
            threads = default_threads()
        if not isinstance(threads, int) or threads < 1:
            raise InputError(f"threads must be a positive int, got {threads!r}")
        self.threads = threads
        self.precision = precision
        self._compile_args: Optional[dict] = None  # what set_precision recompiles from
        # symbolic dims the caller gave no bound for: bound from the feeds of the first run,
        # and raised when a later stateless run feeds more (see run())
        self._dims_from_feeds: List[str] = []
        self._specs: Optional[List[dict]] = None  # the model's inputs as declared, for those dims
        self._memory_limit = None
        self.memory_choice: Optional[dict] = None  # what memory_limit chose, and why
        plan: Optional[Plan] = None
        if isinstance(model, Plan):
            plan = model
        elif not _in_memory(model) and str(model).endswith(".nrv"):
            plan = Plan.load(model)
        else:
            self._compile_args = dict(model=model, dims=dict(dims or {}), state=state, fuse=fuse, cache=cache,
                                      constants=constants, outputs=outputs)
            try:
                plan = compile(precision=precision, **self._compile_args)
            except UnboundDimsError as exc:
                if log is not None or budget is not None:
                    raise UnboundDimsError(f"{exc.message} (log= and budget= need the plan when the session "
                                           "is made)", exc.dims, exc.inputs, exc.outputs) from None
                self._dims_from_feeds, self._specs = exc.dims, exc.inputs
                self.input_names = [s["name"] for s in exc.inputs]
                self.output_names = exc.outputs
        if memory_limit is not None:
            if self._compile_args is None:
                raise InputError("memory_limit needs the model file: a compiled plan holds one precision")
            self._memory_limit = _parse_bytes(memory_limit, "memory_limit")
        if plan is not None:
            self._use_plan(plan)
        self._log = None
        if log is not None:
            from .provenance import RunLog

            self._log = RunLog(log, self)
        self.on_memory_change = on_memory_change
        self.budget = budget
        if budget is not None:
            budget._attach(self, priority)

    def _use_plan(self, plan: Plan) -> None:
        """Loads plan (fitted to memory_limit first) as the session's only plan and sets up its
        inputs and outputs."""
        if self._memory_limit is not None:
            plan, self.memory_choice = _fit_memory(plan, self._compile_args, self.precision, self._memory_limit)
        self.plan = plan
        self._native = self._new_native(plan)
        self._by_precision = {self.precision: (plan, self._native)}
        self._inputs = self._native.io(False)
        self._outputs = self._native.io(True)
        self.input_names = [i["name"] for i in self._inputs]
        self.output_names = [o["name"] for o in self._outputs]
        self._input_index = {n: i for i, n in enumerate(self.input_names)}
        self._feeds_c = ffi.new("nrv_tensor[]", max(len(self._inputs), 1))
        self._outs_c = ffi.new("nrv_tensor[]", max(len(self._outputs), 1))
        # results skip outputs that feed a state input: the session keeps them
        self._returned = [i for i, o in enumerate(self._outputs) if o["state_partner"] < 0]
        self._returned_by_name = {self._outputs[i]["name"]: self._outputs[i] for i in self._returned}
        self._state_inputs = {self._inputs[i]["name"] for i in range(len(self._inputs))
                              if self._inputs[i]["state_partner"] >= 0}
        self._input_plan = [(i, info["name"], info["dtype"], info["name"] in self._state_inputs)
                            for i, info in enumerate(self._inputs)]
        self._fed_shapes: List[Optional[tuple]] = [None] * len(self._inputs)
        for i, info in enumerate(self._inputs):
            self._feeds_c[i].dtype = _CODE_OF_DTYPE[info["dtype"]]  # a feed of another dtype is refused

    # attributes a session made without bounds for its symbolic dims gets at its first run
    _PLAN_ATTRS = frozenset({"plan", "_native", "_by_precision", "_inputs", "_outputs", "_input_index",
                             "_feeds_c", "_outs_c", "_returned", "_returned_by_name", "_state_inputs",
                             "_input_plan", "_fed_shapes"})

    def __getattr__(self, name: str):
        # only called for attributes not set: before the first run of a session whose dims
        # are bound by its feeds, everything that needs the plan ends here
        if name in Session._PLAN_ATTRS and self.__dict__.get("_dims_from_feeds"):
            raise self._unbound_error()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _planned(self) -> bool:
        """False until the first run of a session whose feeds bind its dims."""
        return "plan" in self.__dict__

    def _unbound_error(self) -> InputError:
        return InputError(f"the model's symbolic dims {self.__dict__['_dims_from_feeds']} are bound by the first "
                          "run's feeds and the plan is compiled then: run() first, or give dims=")

    def _bind_dims(self, feeds: Mapping[str, np.ndarray]) -> bool:
        """Compiles the plan for the symbolic dims the caller left unbound, each at least the
        size the feeds have (the first run; later, a stateless run that feeds more). Returns
        False when the bounds would not change."""
        from .modeltools import dims_from_feeds

        unknown = [k for k in feeds if k not in self.input_names]
        if unknown:
            raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {self.input_names}")
        fed = dims_from_feeds(self._specs, {k: np.asarray(v) for k, v in feeds.items()}, {})
        dims = dict(self._compile_args["dims"])
        missing = [d for d in self._dims_from_feeds if d not in fed and d not in dims]
        if missing:
            declared = {s["name"]: s["shape"] for s in self._specs}
            raise InputError(f"the model's symbolic dims {missing} are bound by the feeds, but no fed input has "
                             f"them (inputs: {declared}); feed those inputs, or give dims=")
        for d in self._dims_from_feeds:
            dims[d] = max(dims.get(d, 0), fed.get(d, 0))
        if self._planned and dims == self._compile_args["dims"]:
            return False
        self._compile_args["dims"] = dims
        self._use_plan(compile(precision=self.precision, **self._compile_args))
        return True

    # ---- memory pressure

    @property
    def weight_bytes(self) -> int:
        """Weight bytes of the plan the session runs now (memory_report()["weight_bytes"])."""
        raw = ffi.new("nrv_session_memory *")
        check(lib.nrv_session_memory_get(self._native.ptr, raw))
        return int(raw.weight_bytes)

    def set_memory_limit(self, limit: Union[int, str]) -> dict:
        """Fits the weights of the session's precision into ``limit`` bytes between runs, as
        ``memory_limit=`` does at creation (every linear layer INT4, then layers back smallest
        first while they fit), and switches to that plan: weights it shares with the current
        one are not reloaded, and the plans of other precisions this session held are dropped
        (their weights are freed unless another session uses them). State carried between runs
        starts afresh. A larger limit steps back up. Returns the choice (as
        ``memory_report()["memory_limit"]``) and passes it to ``on_memory_change`` when the
        plan changed. OutOfMemoryError when even INT4 weights do not fit (nothing changes)."""
        if self._compile_args is None:
            raise InputError("set_memory_limit needs the session's model file: a compiled plan holds one precision")
        if not self._planned:
            raise self._unbound_error()
        base = compile(precision=self.precision, **self._compile_args)
        plan, choice = _fit_memory(base, self._compile_args, self.precision, _parse_bytes(limit, "limit"))
        changed = plan.data != self.plan.data
        if changed:
            native = self._new_native(plan)
            if native.io(False) != self._inputs or native.io(True) != self._outputs:
                raise ModelError("the refitted plan's inputs/outputs differ (a compiler bug: please report)")
            self.plan, self._native = plan, native
            self._by_precision = {self.precision: (plan, native)}
            self._fed_shapes = [None] * len(self._inputs)
        self.memory_choice = choice
        if changed and self.on_memory_change is not None:
            self.on_memory_change(dict(choice))
        return dict(choice)

    def step_down(self, free_bytes: int) -> dict:
        """Frees at least ``free_bytes`` of weights by moving layers to INT4
        (:meth:`set_memory_limit` with the current weight bytes less ``free_bytes``)."""
        if not isinstance(free_bytes, (int, np.integer)) or free_bytes <= 0:
            raise InputError(f"free_bytes must be a positive int, got {free_bytes!r}")
        return self.set_memory_limit(max(self.weight_bytes - int(free_bytes), 1))

    def _new_native(self, plan: Plan) -> "_Native":
        native = _Native(plan.data)
        if self.threads > 1:
            check(lib.nrv_session_set_threads(native.ptr, self.threads))
        return native

    def set_precision(self, precision: str) -> None:
        """Switches the precision later runs use (:mod:`nerve.precision`: "fp32", "int8",
        "w4a32", "w4a8", ...) without reloading the model. The first switch to a precision
        compiles its plan (from the plan cache when it was made before; weight-only and
        dynamic-activation schemes need no calibration data) and loads only the weights that
        differ: weights are shared by content with the plans already loaded. Later switches
        are instant, and switching back gives bit-identical outputs to before. State carried
        between runs (``state=``) is kept per precision: switch between independent runs, or
        call :meth:`reset_state` after a switch. The session must have been made from a model
        file (a ready plan holds one precision)."""
        precision_scheme.parse(precision)
        if precision == self.precision:
            return
        if not self._planned:  # dims bound by the first run: it compiles at this precision
            self.precision = precision
            return
        if precision not in self._by_precision:
            if self._compile_args is None:
                raise InputError("set_precision needs the session's model file: this session was made from a "
                                 f"compiled plan, which holds one precision ({self.precision!r})")
            plan = compile(precision=precision, **self._compile_args)
            native = self._new_native(plan)
            if native.io(False) != self._inputs or native.io(True) != self._outputs:
                raise ModelError(f"the {precision!r} plan's inputs/outputs differ from the {self.precision!r} "
                                 "plan's (a compiler bug: please report)")
            self._by_precision[precision] = (plan, native)
        self.plan, self._native = self._by_precision[precision]
        self.precision = precision

    # op type -> the precision it computes at (memory_report()["layers"])
    _OP_PRECISION = {"linear": "fp32", "layernorm_linear": "fp32", "conv": "fp32", "conv_packed": "fp32", "linear_panels": "fp32", "layernorm_linear_panels": "fp32", "linear_w8": "w8a32",
                     "linear_w8a8": "w8a8", "conv_w8a8": "w8a8", "linear_w4a32": "w4a32", "linear_w4a8": "w4a8", "linear_f16": "fp16",
                     "gather_q8": "w8 (embedding)", "matmul_integer": "w8a8 (integer, as the model's)"}

    @property
    def inputs(self) -> List[dict]:
        """Name, dtype, shape (ints, or the name of a symbolic dim) and bounds of each input
        (before the first run of a session whose dims its feeds bind: the bounds given, and
        state_partner None)."""
        if not self._planned and self._specs is not None:
            given = self._compile_args["dims"]
            return [{"name": s["name"], "dtype": s["dtype"], "shape": list(s["shape"]),
                     "bounds": {d: given[d] for d in s["shape"] if isinstance(d, str) and d in given},
                     "state_partner": None} for s in self._specs]
        return [dict(i) for i in self._inputs]

    @property
    def outputs(self) -> List[dict]:
        return [dict(o) for o in self._outputs]

    @property
    def hash(self) -> str:
        return to_str(lib.nrv_session_hash(self._native.ptr))

    def run(self, feeds: Mapping[str, np.ndarray],
            out: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
        """Runs the plan on feeds (name -> array, exactly the input's dtype) and returns
        {output name: array}. Inputs bound to a state may be omitted after the first run:
        they then read what the previous run wrote (its state output is not returned).
        A session made without bounds for the model's symbolic dims compiles its plan at the
        first run, for the feeds' sizes; a later run that feeds more recompiles it for the
        larger sizes, unless the session carries state (then the first sizes are the bounds).

        out: {output name: array} to copy those outputs into, returned as they are, instead of
        fresh arrays (the output's dtype and shape, C-contiguous, writable; checked before the
        run, a symbolic dim after it). A loop that passes the same arrays allocates nothing
        per run: a fresh array of tens of MiB costs more in page faults than the copy itself."""
        if self._dims_from_feeds and not self._planned:
            self._bind_dims(feeds)
        if out:
            _check_out(out, self._returned_by_name, self.output_names)
        keep = self._bind(feeds)
        try:
            _run_native(self._native, self._feeds_c, len(self._inputs), self._outs_c, len(self._outputs))
        except InputError as exc:
            beyond = exc.status_name == "NRV_ERR_SHAPE" and "beyond the bound" in exc.message
            if beyond and self._dims_from_feeds and self._state_inputs:
                raise InputError(f"{exc.message}; this session carries state, so the first run's feeds bound its "
                                 f"dims {self._dims_from_feeds} for good: give dims= with the largest sizes it will "
                                 "see (a KV cache: the longest context)", exc.status, exc.status_name) from None
            if not beyond or not self._dims_from_feeds or not self._bind_dims(feeds):
                raise
            keep = self._bind(feeds)
            _run_native(self._native, self._feeds_c, len(self._inputs), self._outs_c, len(self._outputs))
        del keep  # the feeds had to live through the run
        outs_c = self._outs_c
        out = out or {}
        names = self.output_names
        result = {names[i]: _copy_out(outs_c[i], out.get(names[i]), names[i]) for i in self._returned}
        if self._log is not None:
            self._log.record({k: v for k, v in feeds.items()},
                             [n for _, n, _, st in self._input_plan if st and feeds.get(n) is None], result)
        return result

    def decode_greedy(self, feeds: Mapping[str, np.ndarray], first_token: int, end_token: int, max_tokens: int,
                      vocab: int, token_input: str = "input_ids", logits_output: str = "logits",
                      repeat_limit: int = 0):
        """Greedy decoding in one native call (nrv_session_decode_greedy): this session's plan
        is one decoder step whose caches are state pairs. Step 0 runs on ``feeds`` with the
        token ``first_token``; each later step feeds the argmax of the previous logits (ids
        below ``vocab``) and reads the caches from the session. Returns (tokens, logprobs,
        stopped): tokens[0] is first_token; stopped is "end", "length" or "repetition"."""
        for name, where in ((token_input, self._input_index), (logits_output, self.output_names)):
            if name not in where:
                raise InputError(f"decode_greedy: the plan has no {name!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InputError(f"decode_greedy: max_tokens must be >= 1, got {max_tokens!r}")
        keep = self._bind({**feeds, token_input: np.zeros((1, 1), np.int64)})
        opts = ffi.new("nrv_greedy_options *")
        opts.token_input = self._input_index[token_input]
        opts.logits_output = self.output_names.index(logits_output)
        opts.vocab, opts.first_token, opts.end_token = int(vocab), int(first_token), int(end_token)
        opts.max_tokens, opts.repeat_limit = int(max_tokens), int(repeat_limit)
        tokens = np.empty(max_tokens, np.int64)
        logprobs = np.empty(max_tokens, np.float32)
        n, why = ffi.new("int32_t *"), ffi.new("int32_t *")
        check(lib.nrv_session_decode_greedy(self._native.ptr, self._feeds_c, len(self._inputs), opts,
                                            ffi.from_buffer("int64_t[]", tokens), ffi.from_buffer("float[]", logprobs), n, why))
        del keep
        return (tokens[:n[0]].tolist(), logprobs[:n[0]].tolist(), ("end", "length", "repetition")[why[0]])

    def _bind(self, feeds: Mapping[str, np.ndarray]) -> list:
        """Points the native feed array at `feeds`; returns the arrays to keep alive meanwhile."""
        unknown = [k for k in feeds if k not in self._input_index]
        if unknown:
            raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {self.input_names}")
        keep = []
        feeds_c = self._feeds_c
        shapes = self._fed_shapes
        for i, name, dtype, is_state in self._input_plan:
            t = feeds_c[i]
            arr = feeds.get(name)
            if arr is None:
                if not is_state:
                    raise InputError(f"input '{name}' was not fed (inputs: {self.input_names})")
                t.data = ffi.NULL
                t.rank = 0
                shapes[i] = None
                continue
            if type(arr) is not np.ndarray:
                arr = np.asarray(arr)
            if arr.dtype != dtype:
                raise InputError(f"input '{name}' must be {dtype}, got {arr.dtype}")
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
            keep.append(arr)
            t.data = ffi.from_buffer(arr) if arr.size else ffi.NULL
            shape = arr.shape
            if shape != shapes[i]:  # the dims only change when the caller's shapes do
                if len(shape) > 8:
                    raise InputError(f"input '{name}' has rank {len(shape)} (nerve supports up to 8)")
                t.rank = len(shape)
                if shape:
                    t.dims[0:len(shape)] = shape
                shapes[i] = shape
        return keep

    def reset_state(self) -> None:
        """Forgets the carried state: the next run must feed every state input."""
        check(lib.nrv_session_reset_state(self._native.ptr))

    def memory_report(self) -> Dict[str, object]:
        """Bytes this session holds, from nerve's exact pool counters: weights, the activation
        arena (planned once for the dims' bounds), state buffers, and the pools' capacities."""
        raw = ffi.new("nrv_session_memory *")
        check(lib.nrv_session_memory_get(self._native.ptr, raw))
        report = {
            "weight_bytes": int(raw.weight_bytes),
            "arena_bytes": int(raw.arena_bytes),
            "state_bytes": int(raw.state_bytes),
            "pools": {
                "weights": {"allocated": int(raw.weight_bytes), "loaded": int(raw.weight_loaded_bytes),
                            "shared": int(raw.weight_bytes - raw.weight_loaded_bytes)},
                "arena": {"capacity": int(raw.arena_pool_capacity), "allocated": int(raw.arena_bytes)},
                "state": {"capacity": int(raw.state_pool_capacity), "allocated": int(raw.state_bytes)},
            },
        }
        # the arena is one planned block: its peak is its size
        report["peak_bytes"] = report["arena_bytes"]
        report["total_bytes"] = report["weight_bytes"] + report["arena_bytes"] + report["state_bytes"]
        report["precision"] = self.precision
        if self.memory_choice is not None:
            report["memory_limit"] = dict(self.memory_choice)
        report["layers"] = {o["name"]: self._OP_PRECISION[o["type"]] for o in self.ops()
                            if o["type"] in self._OP_PRECISION}
        return report

    def ops(self) -> List[dict]:
        """The plan's ops after fusion, with the kernel variant chosen on this machine."""
        n = lib.nrv_session_op_count(self._native.ptr)
        out = []
        raw = ffi.new("nrv_op_info *")
        for i in range(n):
            check(lib.nrv_session_op_info(self._native.ptr, i, raw))
            out.append({"type": to_str(raw.type), "name": to_str(raw.name), "kernel": to_str(raw.kernel) or "",
                        "inputs": [int(getattr(raw, "in")[k]) for k in range(min(raw.n_in, 16))],
                        "outputs": [int(raw.out[k]) for k in range(min(raw.n_out, 16))],
                        "scratch": int(raw.scratch), "calls": int(raw.calls), "total_ns": int(raw.total_ns)})
        return out

    def profile(self, enable: bool = True) -> None:
        """Per-op timing on/off (counters reset); read them back with ops() (calls, total_ns)."""
        check(lib.nrv_session_profile(self._native.ptr, int(enable)))

    def tensors(self) -> List[dict]:
        n = lib.nrv_session_tensor_count(self._native.ptr)
        out = []
        raw = ffi.new("nrv_tensor_info *")
        for i in range(n):
            check(lib.nrv_session_tensor_info(self._native.ptr, i, raw))
            out.append({"name": to_str(raw.name), "dtype": np.dtype(_DTYPE_OF_CODE[raw.dtype]),
                        "storage": _STORAGE.get(raw.storage, "?"), "ref": int(raw.ref), "offset": int(raw.offset),
                        "capacity": int(raw.capacity), "shape": [int(raw.dims[k]) for k in range(raw.rank)]})
        return out
