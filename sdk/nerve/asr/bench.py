"""``nerve bench asr``: the speech pipeline on this machine, next to its peers in the same run.

For each recording (the example WAVs and the real recording shipped with the model by
default): nerve's whole pipeline (resample -> VAD -> Moonshine on nerve, finals only), then on
the very segments nerve's VAD found, the same Moonshine model and decode loop on onnxruntime,
and PocketSphinx (its bundled English model) with a grammar over the command words. Times are
medians over ``repeat`` passes; RTF = compute seconds / audio seconds, one thread.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..audio import load_audio, read_wav
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


def run(files: Optional[Sequence[str]] = None, repeat: int = 3, words: Optional[Sequence[str]] = None,
        peers: Sequence[str] = ("onnxruntime", "pocketsphinx"), precision: str = "fp32",
        model: str = "moonshine-base") -> Dict[str, object]:
    from .peers import ort_decoder, pocketsphinx_recognize

    paths = [Path(f) for f in files] if files else default_audio()
    rec = Recognizer(model=model, partial_ms=0, precision=precision)
    model = rec.model
    rows = []
    totals = {"audio_s": 0.0, "nerve": 0.0, "onnxruntime": 0.0, "pocketsphinx": 0.0}
    stages = {"resample": 0.0, "vad": 0.0, "encoder": 0.0, "decoder": 0.0}
    ort = ort_decoder(model) if "onnxruntime" in peers else None
    rec.transcribe(np.zeros(SAMPLE_RATE, np.float32), sample_rate=SAMPLE_RATE)  # warm (load weights)
    peak = {}
    for path in paths:
        samples, rate = read_wav(str(path))
        audio_s = len(samples) / rate
        runs, finals, stream_stages = [], None, None
        for _ in range(repeat):
            stream = rec.create_stream(sample_rate=rate)
            before = dict(stream.decoder.seconds)
            t0 = time.perf_counter()
            events = stream.accept_waveform(samples) + stream.finish()
            runs.append(time.perf_counter() - t0)
            finals = [e for e in events if e.type == "final"]
            stream_stages = dict(stream.stage_seconds)
            stream_stages["encoder"] = stream.decoder.seconds["encoder"] - before["encoder"]
            stream_stages["decoder"] = stream.decoder.seconds["decoder"] - before["decoder"]
            for k, v in stream.memory_report().items():
                peak[k] = max(peak.get(k, 0), v)
            stream.close()
        t_nerve = statistics.median(runs)
        x16 = load_audio(samples, sample_rate=rate, target_rate=SAMPLE_RATE)
        segments = [x16[round(e.start_s * SAMPLE_RATE):round(e.end_s * SAMPLE_RATE)] for e in finals]
        row = {"file": path.name, "audio_s": round(audio_s, 2), "nerve_s": t_nerve,
               "nerve_text": " | ".join(e.text for e in finals)}
        if ort is not None:
            t_ort, texts = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                texts = [rec._text(ort.transcribe(seg).text) for seg in segments]
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
        totals["nerve"] += t_nerve
        for k in stages:
            stages[k] += stream_stages.get(k, 0.0)
        rows.append(row)
    return {"machine": cpu_model(), "threads": 1, "model": model.name, "precision": precision, "repeat": repeat, "rows": rows, "totals": totals,
            "stages_s": stages, "pool_peak_bytes": peak}


def format_report(r: Dict[str, object]) -> str:
    t = r["totals"]
    audio = t["audio_s"] or 1.0
    lines = [f"nerve bench asr — {r['machine']}, 1 thread, {r.get('model', 'moonshine-base')}, "
             f"nerve precision {r['precision']}, "
             f"median of {r['repeat']}", ""]
    head = f"{'file':28} {'audio s':>7} {'nerve ms':>9} {'ort ms':>8} {'sphinx ms':>9}"
    lines.append(head)
    for row in r["rows"]:
        lines.append(f"{row['file'][:28]:28} {row['audio_s']:7.2f} {row['nerve_s'] * 1e3:9.1f} "
                     f"{row.get('onnxruntime_s', float('nan')) * 1e3:8.1f} "
                     f"{row.get('pocketsphinx_s', float('nan')) * 1e3:9.1f}")
    lines.append("")
    lines.append(f"RTF  nerve {t['nerve'] / audio:.4f}   onnxruntime (same model, same segments, decode only) "
                 f"{t['onnxruntime'] / audio:.4f}   pocketsphinx {t['pocketsphinx'] / audio:.4f}")
    if t["onnxruntime"]:
        lines.append(f"nerve whole pipeline vs onnxruntime model+decode: {t['onnxruntime'] / t['nerve']:.2f}x faster")
    st = r["stages_s"]
    lines.append("stages (s, last pass): " + ", ".join(f"{k} {v:.3f}" for k, v in st.items()))
    lines.append("stream memory (bytes): " + ", ".join(f"{k} {v}" for k, v in sorted(r["pool_peak_bytes"].items()))
                 + " (weights are shared by every stream of the model)")
    lines.append("")
    for row in r["rows"]:
        lines.append(f"{row['file']}:")
        lines.append(f"  nerve        {row['nerve_text']}")
        if "onnxruntime_text" in row:
            lines.append(f"  onnxruntime  {row['onnxruntime_text']}")
        if "pocketsphinx_text" in row:
            lines.append(f"  pocketsphinx {row['pocketsphinx_text']}")
    return "\n".join(lines)
