"""``nerve bench asr``: the speech pipeline on this machine, next to its peers in the same run.

For each recording (the example WAVs and the real recording shipped with the model by
default): nerve's whole pipeline (resample -> VAD -> Moonshine on nerve, finals only), then on
the very segments nerve's VAD found, the same Moonshine model and decode loop on onnxruntime,
and PocketSphinx (its bundled English model) with a grammar over the command words. nerve runs
in several columns (default_columns: Moonshine base at fp32 — onnxruntime's arithmetic — int8
and INT4 weights, and Moonshine tiny at int8), their passes interleaved so drift of the machine
hits all alike. Times are medians over ``repeat`` passes;
RTF = compute seconds / audio seconds, one thread.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..audio import load_audio, read_audio
from ..bench import cpu_model
from .moonshine import SAMPLE_RATE
from .recognizer import Recognizer

__all__ = ["run", "format_report", "default_audio"]


def default_audio() -> List[Path]:
    from .models import model_file

    from ..bench import example_audio_dir
    from ..errors import InputError

    try:
        files = sorted(Path(example_audio_dir()).glob("*.wav"))
    except InputError:
        files = []  # an installed package: the model's own recording only
    return files + [model_file("moonshine-base", "test-data/beckett.wav")]


PRECISIONS = ("fp32", "int8")  # a model's columns: onnxruntime's arithmetic, and the fast one


def default_columns(model: Optional[str] = None) -> List[Tuple[str, str]]:
    """The (model, precision) pairs `nerve bench asr` times: for one named model, fp32 and
    int8; by default Moonshine base at fp32, int8 and INT4 weights (w4a8, with GPTQ when
    `nerve models calibrate moonshine-base` has stored its statistics) and tiny at int8."""
    if model is not None:
        return [(model, p) for p in PRECISIONS]
    from .calibrate import stored

    w4 = "w4a8:gptq" if stored("moonshine-base") is not None else "w4a8"
    return [("moonshine-base", p) for p in PRECISIONS + (w4,)] + [("moonshine-tiny", "int8")]


def _label(model: str, precision: str) -> str:
    """A column's name: the precision for Moonshine base, 'tiny int8' for another model."""
    return precision if model == "moonshine-base" else f"{model.replace('moonshine-', '')} {precision}"


def _nerve_pass(rec: Recognizer, samples: np.ndarray, rate: int):
    """One pass of the whole pipeline over a recording: (seconds, finals, stage seconds, memory)."""
    stream = rec.create_stream(sample_rate=rate)
    before = dict(stream.decoder.seconds)
    t0 = time.perf_counter()
    events = stream.accept_waveform(samples) + stream.finish()
    spent = time.perf_counter() - t0
    stages = dict(stream.stage_seconds)
    for k in ("encoder", "decoder"):
        stages[k] = stream.decoder.seconds[k] - before[k]
    memory = stream.memory_report()
    stream.close()
    return spent, [e for e in events if e.type == "final"], stages, memory


def run(files: Optional[Sequence[str]] = None, repeat: int = 3, words: Optional[Sequence[str]] = None,
        peers: Sequence[str] = ("onnxruntime", "pocketsphinx"), precisions: Optional[Sequence[str]] = None,
        model: Optional[str] = None) -> Dict[str, object]:
    """nerve at each column (passes interleaved per recording), then the peers on the segments
    the first column's VAD cut, with its model. Columns: `model` (default Moonshine base) at
    each of `precisions`, or with neither given default_columns()."""
    from .peers import ort_decoder, pocketsphinx_recognize

    paths = [Path(f) for f in files] if files else default_audio()
    if precisions:
        columns = [(model or "moonshine-base", p) for p in dict.fromkeys(precisions)]
    else:
        columns = default_columns(model)
    recs = {_label(m, p): Recognizer(model=m, partial_ms=0, precision=p) for m, p in columns}
    labels = list(recs)
    first = recs[labels[0]]
    model = first.model
    rows = []
    totals = {"audio_s": 0.0, "nerve": {p: 0.0 for p in labels}, "onnxruntime": 0.0, "pocketsphinx": 0.0}
    stages = {p: {"resample": 0.0, "vad": 0.0, "encoder": 0.0, "decoder": 0.0} for p in labels}
    ort = ort_decoder(model) if "onnxruntime" in peers else None
    for rec in recs.values():
        rec.transcribe(np.zeros(SAMPLE_RATE, np.float32), sample_rate=SAMPLE_RATE)  # warm (load weights)
    peak: Dict[str, Dict[str, int]] = {p: {} for p in labels}
    for path in paths:
        samples, rate = read_audio(str(path))
        audio_s = len(samples) / rate
        runs = {p: [] for p in labels}
        finals, last_stages = {}, {}
        for _ in range(repeat):
            for p, rec in recs.items():
                spent, finals[p], last_stages[p], memory = _nerve_pass(rec, samples, rate)
                runs[p].append(spent)
                for k, v in memory.items():
                    peak[p][k] = max(peak[p].get(k, 0), v)
        x16 = load_audio(samples, sample_rate=rate, target_rate=SAMPLE_RATE)
        segments = [x16[round(e.start_s * SAMPLE_RATE):round(e.end_s * SAMPLE_RATE)] for e in finals[labels[0]]]
        row = {"file": path.name, "audio_s": round(audio_s, 2),
               "nerve": {p: {"s": statistics.median(runs[p]), "text": " | ".join(e.text for e in finals[p])}
                         for p in labels}}
        if ort is not None:
            t_ort, texts = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                texts = [first._text(ort.transcribe(seg).text) for seg in segments]
                t_ort.append(time.perf_counter() - t0)
            row["onnxruntime_s"] = statistics.median(t_ort)
            row["onnxruntime_text"] = " | ".join(texts)
            totals["onnxruntime"] += row["onnxruntime_s"]
        if "pocketsphinx" in peers:
            try:
                t_ps, texts = 0.0, []
                for seg in segments:
                    text, spent = pocketsphinx_recognize(seg, words)
                    texts.append(text)
                    t_ps += spent
                row["pocketsphinx_s"] = t_ps
                row["pocketsphinx_text"] = " | ".join(texts)
                totals["pocketsphinx"] += t_ps
            except ImportError as exc:
                row["pocketsphinx_text"] = f"(not run: {exc})"
        totals["audio_s"] += audio_s
        for p in labels:
            totals["nerve"][p] += row["nerve"][p]["s"]
            for k in stages[p]:
                stages[p][k] += last_stages[p].get(k, 0.0)
        rows.append(row)
    return {"machine": cpu_model(), "threads": 1, "model": model.name, "precisions": labels,
            "columns": [{"label": _label(m, p), "model": m, "precision": p} for m, p in columns], "repeat": repeat,
            "rows": rows, "totals": totals, "stages_s": stages, "pool_peak_bytes": peak}


def format_report(r: Dict[str, object]) -> str:
    t = r["totals"]
    audio = t["audio_s"] or 1.0
    precisions = r["precisions"]
    lines = [f"nerve bench asr — {r['machine']}, 1 thread, "
             f"median of {r['repeat']}; onnxruntime ({r.get('model', 'moonshine-base')}) and pocketsphinx on the "
             f"segments nerve {precisions[0]}'s VAD cut",
             ""]
    cols = [f"nerve {p} ms" for p in precisions] + ["ort ms", "sphinx ms"]
    lines.append(f"{'file':28} {'audio s':>7} " + " ".join(f"{c:>{max(9, len(c))}}" for c in cols))
    for row in r["rows"]:
        vals = [row["nerve"][p]["s"] for p in precisions] + [row.get("onnxruntime_s", float("nan")),
                                                             row.get("pocketsphinx_s", float("nan"))]
        lines.append(f"{row['file'][:28]:28} {row['audio_s']:7.2f} "
                     + " ".join(f"{v * 1e3:{max(9, len(c))}.1f}" for v, c in zip(vals, cols)))
    lines.append("")
    lines.append("RTF  " + "   ".join(f"nerve {p} {t['nerve'][p] / audio:.4f}" for p in precisions)
                 + f"   onnxruntime (same model, same segments, decode only) {t['onnxruntime'] / audio:.4f}"
                 f"   pocketsphinx {t['pocketsphinx'] / audio:.4f}")
    same_model = [c["label"] for c in r.get("columns", []) if c["model"] == r.get("model")] or precisions
    if t["onnxruntime"]:  # a ratio only where nerve runs the model onnxruntime ran
        lines.append("nerve whole pipeline vs onnxruntime model+decode: "
                     + ", ".join(f"{p} {t['onnxruntime'] / t['nerve'][p]:.2f}x faster" for p in same_model))
    for p in precisions:
        lines.append(f"stages {p} (s, last pass): " + ", ".join(f"{k} {v:.3f}" for k, v in r["stages_s"][p].items()))
    for p in precisions:
        lines.append(f"stream memory {p} (bytes): "
                     + ", ".join(f"{k} {v}" for k, v in sorted(r["pool_peak_bytes"][p].items())))
    lines.append("(weights_used sums the stream's plans, counting a weight shared by two plans in each; the "
                 "process holds one copy, shared by every stream of a model)")
    lines.append("")
    for row in r["rows"]:
        lines.append(f"{row['file']}:")
        width = max(len("pocketsphinx"), *(len("nerve " + p) for p in precisions)) + 1
        for p in precisions:
            lines.append(f"  {'nerve ' + p:{width}}{row['nerve'][p]['text']}")
        if "onnxruntime_text" in row:
            lines.append(f"  {'onnxruntime':{width}}{row['onnxruntime_text']}")
        if "pocketsphinx_text" in row:
            lines.append(f"  {'pocketsphinx':{width}}{row['pocketsphinx_text']}")
    return "\n".join(lines)
