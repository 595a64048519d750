"""Provenance: a record of every run that is enough to run it again and check the result.

    sess = nerve.Session("vad.onnx", dims=..., log="runs.jsonl")
    ...                                   # every sess.run appends one JSON line
    $ nerve replay runs.jsonl             # re-runs each line, confirms its outputs

Each line holds the plan's SHA-256, the SHA-256 (and dtype, shape) of every input and output,
the kernel variant each op ran with, and the time. The bytes needed to replay are kept next to
the log, content-addressed so a stream of identical chunks or one plan costs its bytes once:
``runs.jsonl.d/plans/<sha256>.nrv`` and ``runs.jsonl.d/arrays/<sha256>.npy``. An input
omitted because the session carries it as state is recorded as ``"carried"``; replay runs the
lines of one session in order, so carried state is rebuilt exactly.

Replay compares output hashes: equal bytes when the same kernels run. On a machine whose
kernels differ (another CPU), it reports the kernels that changed and compares the outputs
numerically instead (rtol 1e-4, atol 1e-5).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Mapping

import numpy as np

from .errors import InputError, ModelError

__all__ = ["RunLog", "replay", "array_sha256"]


def array_sha256(a: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}{list(a.shape)}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class RunLog:
    """Appends one line per run to path; stores plans and arrays under path + '.d'."""

    def __init__(self, path, session):
        self.path = Path(path)
        self.store = Path(str(self.path) + ".d")
        (self.store / "plans").mkdir(parents=True, exist_ok=True)
        (self.store / "arrays").mkdir(parents=True, exist_ok=True)
        self.session_id = hashlib.sha256(f"{os.getpid()}-{id(session)}-{time.time_ns()}".encode()).hexdigest()[:16]
        plan_file = self.store / "plans" / f"{session.plan.hash}.nrv"
        if not plan_file.exists():
            session.plan.save(plan_file)
        self.plan_hash = session.plan.hash
        self.kernels = [f"{op['type']}:{op['kernel']}" for op in session.ops() if op["kernel"]]
        self.seq = 0

    def _keep(self, a: np.ndarray) -> str:
        digest = array_sha256(a)
        f = self.store / "arrays" / f"{digest}.npy"
        if not f.exists():
            tmp = f.with_suffix(".tmp.npy")
            np.save(tmp, a, allow_pickle=False)
            os.replace(tmp, f)
        return digest

    def record(self, feeds: Mapping[str, np.ndarray], carried: List[str], outputs: Mapping[str, np.ndarray]) -> None:
        line = {
            "session": self.session_id,
            "seq": self.seq,
            "time": time.time(),
            "plan": self.plan_hash,
            "inputs": {k: {"sha256": self._keep(np.asarray(v)), "dtype": str(np.asarray(v).dtype),
                           "shape": list(np.asarray(v).shape)} for k, v in feeds.items()},
            "carried": list(carried),
            "kernels": self.kernels,
            "outputs": {k: {"sha256": self._keep(v), "dtype": str(v.dtype), "shape": list(v.shape)}
                        for k, v in outputs.items()},
        }
        self.seq += 1
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def replay(log_path, rtol: float = 1e-4, atol: float = 1e-5) -> Dict[str, object]:
    """Re-runs every line of a run log; returns {'runs', 'identical' (same bytes), 'close' (other
    bytes, within rtol/atol), 'mismatched': [{line, max_abs_diff}], 'kernel_changes': [...]}."""
    from .session import Plan, Session

    log_path = Path(log_path)
    store = Path(str(log_path) + ".d")
    try:
        lines = [json.loads(x) for x in log_path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read run log {log_path}: {exc}") from exc
    sessions: Dict[str, Session] = {}
    report = {"runs": 0, "identical": 0, "close": 0, "mismatched": [], "kernel_changes": []}
    for n, line in enumerate(lines, 1):
        sid = line["session"]
        if sid not in sessions:
            plan_file = store / "plans" / f"{line['plan']}.nrv"
            if not plan_file.is_file():
                raise ModelError(f"line {n}: plan {line['plan'][:12]}… is missing from {store / 'plans'}")
            sess = Session(Plan.load(plan_file))
            if sess.hash != line["plan"]:
                raise ModelError(f"line {n}: {plan_file} does not hash to {line['plan']}")
            sessions[sid] = sess
            now = [f"{op['type']}:{op['kernel']}" for op in sess.ops() if op["kernel"]]
            if now != line["kernels"]:
                report["kernel_changes"].append({"line": n, "recorded": sorted(set(line["kernels"]) - set(now)),
                                                 "now": sorted(set(now) - set(line["kernels"]))})
        sess = sessions[sid]
        feeds = {}
        for name, meta in line["inputs"].items():
            f = store / "arrays" / f"{meta['sha256']}.npy"
            if not f.is_file():
                raise InputError(f"line {n}: input '{name}' ({meta['sha256'][:12]}…) is missing from {f.parent}")
            arr = np.load(f, allow_pickle=False)
            if array_sha256(arr) != meta["sha256"]:
                raise InputError(f"line {n}: {f} was modified (hash differs)")
            feeds[name] = arr
        outs = sess.run(feeds)
        report["runs"] += 1
        identical = all(array_sha256(outs[k]) == m["sha256"] for k, m in line["outputs"].items() if k in outs)
        if identical and set(outs) == set(line["outputs"]):
            report["identical"] += 1
            continue
        # different bytes: fine only where the numbers agree (other kernels, e.g. another CPU)
        worst = {}
        ok = set(outs) == set(line["outputs"])
        for k, m in line["outputs"].items():
            if k not in outs:
                continue
            want = np.load(store / "arrays" / f"{m['sha256']}.npy", allow_pickle=False)
            got = outs[k]
            if got.shape != want.shape or got.dtype != want.dtype:
                ok = False
                worst[k] = f"shape/dtype {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
                continue
            if got.dtype.kind == "f":
                close = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
                diff = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
            else:
                close = bool(np.array_equal(got, want))
                diff = 0.0 if close else float("inf")
            ok = ok and close
            worst[k] = diff
        if ok:
            report["close"] += 1
        else:
            report["mismatched"].append({"line": n, "max_abs_diff": worst})
    return report
