"""The speech commands of the ``nerve`` CLI (registered by nerve.cli).

    nerve models fetch moonshine-base [--wheel FILE]     download, verify and compile, once
    nerve models list
    nerve asr FILE.wav|FILE.flac [--json] [--partials] [--words FILE] [--phrases FILE] [--digits]
    arecord -f S16_LE -r 16000 -c 1 | nerve asr -        raw s16le 16 kHz mono from stdin
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np

SLICE_S = 0.1  # files are fed in 100 ms slices, as a live source would deliver them


def add_commands(commands) -> None:
    models = commands.add_parser("models", help="speech models: fetch once into the user cache, list")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION")
    msub.required = True
    fetch = msub.add_parser("fetch", help="download (pip), verify (SHA-256) and compile a model")
    fetch.add_argument("name", metavar="NAME", help="moonshine-base or moonshine-tiny")
    fetch.add_argument("--wheel", metavar="FILE.whl", help="use this wheel instead of downloading it")
    fetch.add_argument("--force", action="store_true", help="fetch again even if present")
    fetch.set_defaults(func=_cmd_models_fetch)
    cal = msub.add_parser("calibrate", help="gather a model's layer statistics for GPTQ INT4 weights "
                                            "(precision 'w4a8:gptq'); stored with the model")
    cal.add_argument("name", metavar="NAME", help="moonshine-base or moonshine-tiny")
    cal.add_argument("--audio", action="append", metavar="FILE",
                     help="recordings like the ones to recognise (default: the real readings in the "
                          "moonshine-voice wheel); longer ones are cut into 15 s pieces")
    cal.add_argument("--seconds", type=float, default=None, help="use at most this much audio (default 75)")
    cal.add_argument("--force", action="store_true", help="calibrate again even if stored")
    cal.set_defaults(func=_cmd_models_calibrate)
    lst = msub.add_parser("list", help="known models and whether they are fetched")
    lst.set_defaults(func=_cmd_models_list)

    asr = commands.add_parser("asr", help="speech to text: a WAV or FLAC file, or '-' for raw s16le 16 kHz mono on stdin")
    asr.add_argument("source", metavar="FILE|-")
    asr.add_argument("--json", action="store_true", help="JSON lines, then a summary line")
    asr.add_argument("--partials", action="store_true", help="also print partial results (always on for '-')")
    asr.add_argument("--words", metavar="FILE", help="only these words (one or more per line)")
    asr.add_argument("--phrases", metavar="FILE", help="only these phrases (one per line)")
    asr.add_argument("--digits", action="store_true", help="numbers as digits (default: words)")
    asr.add_argument("--model", default="moonshine-base", help="moonshine-base (default) or moonshine-tiny")
    asr.add_argument("--int8", action="store_true",
                     help="int8 weights and activations (~2.3x faster, same WER on our sets; = --precision int8)")
    asr.add_argument("--precision", default=None, metavar="P",
                     help="fp32 (default), fp16, int8, w8a32, w4a32 or w4a8 (INT4 weights; nerve.precision); w4a8:gptq after "
                          "`nerve models calibrate`")
    asr.add_argument("--threads", type=int, default=1)
    asr.add_argument("--beam", type=int, default=None, help="beam width (default 1; 2 with --words/--phrases)")
    asr.set_defaults(func=_cmd_asr)


def _cmd_models_fetch(args) -> int:
    from .models import fetch
    from .recognizer import shared_model

    fetch(args.name, wheel=args.wheel, force=args.force)
    t0 = time.perf_counter()
    shared_model(args.name)  # compiles the plans into the plan cache now, not on first use
    print(f"{args.name}: ready (plans compiled or found in the cache in {time.perf_counter() - t0:.1f} s)",
          file=sys.stderr)
    return 0


def _cmd_models_calibrate(args) -> int:
    from .. import audio
    from . import calibrate as cal

    path = cal.calibration_file(args.name)
    if path.is_file() and not args.force:
        print(f"{args.name}: calibration already stored in {path} (--force to redo)", file=sys.stderr)
        return 0
    seconds = args.seconds or cal.DEFAULT_SECONDS
    if args.audio:
        step = int(cal.CHUNK_S * 16000)
        pieces = []
        for f in args.audio:
            x = audio.load_audio(f)
            pieces += [x[i:i + step] for i in range(0, len(x), step)]
        total, chosen = 0.0, []
        for p in pieces:
            if total < seconds:
                chosen.append(p)
                total += len(p) / 16000
    else:
        chosen = cal.default_audio(seconds)
    t0 = time.perf_counter()
    hessians = cal.calibrate(args.name, chosen)
    cal.save(hessians, path)
    print(f"{args.name}: {sum(len(p) for p in chosen) / 16000:.0f} s of audio, "
          f"{sum(len(v) for v in hessians.values())} layers, in {time.perf_counter() - t0:.0f} s -> {path}",
          file=sys.stderr)
    return 0


def _cmd_models_list(args) -> int:
    from ..errors import ModelError
    from .models import MODELS, model_dir

    for name, spec in MODELS.items():
        try:
            where = str(model_dir(name))
        except ModelError:
            where = f"not fetched (nerve models fetch {name})"
        print(f"{name}  {spec.package}  {where}")
    return 0


def _read_list(path: Optional[str], what: str) -> Optional[List[str]]:
    if path is None:
        return None
    from ..errors import InputError

    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"--{what}: cannot read {path}: {exc}") from exc
    lines = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if what == "words":
        return [w for ln in lines for w in ln.split()]
    return lines


def _stdin_slices(bytes_per_slice: int):
    pending = b""
    stdin = sys.stdin.buffer
    while True:
        block = stdin.read1(bytes_per_slice) if hasattr(stdin, "read1") else stdin.read(bytes_per_slice)
        if not block:
            break
        pending += block
        whole = len(pending) // 2 * 2
        if whole:
            yield np.frombuffer(pending[:whole], np.int16)
            pending = pending[whole:]


def _cmd_asr(args) -> int:
    from ..audio import iter_audio
    from .recognizer import Recognizer

    live = args.source == "-"
    rec = Recognizer(args.model, words=_read_list(args.words, "words"), phrases=_read_list(args.phrases, "phrases"),
                     partial_ms=320 if (args.partials or live) else 0, threads=args.threads, beam=args.beam,
                     numbers="digits" if args.digits else "words",
                     precision=args.precision or ("int8" if args.int8 else "fp32"))
    if live:
        rate, slices = 16000, _stdin_slices(int(16000 * SLICE_S) * 2)
    else:
        rate, blocks = iter_audio(args.source, block_frames=48000 * 10)  # never the whole file in memory
        step = max(int(rate * SLICE_S), 1)
        slices = (block[i:i + step] for block in blocks for i in range(0, len(block), step))
    stream = rec.create_stream(sample_rate=rate)
    compute = 0.0

    def show(events) -> None:
        for ev in events:
            if args.json:
                print(json.dumps(ev.to_json()), flush=True)
            elif ev.type == "partial":
                print(f"  ... {ev.text}", flush=True)
            else:
                print(f"[{ev.start_s:7.2f} - {ev.end_s:7.2f}] {ev.text}", flush=True)

    for piece in slices:
        t0 = time.perf_counter()
        events = stream.accept_waveform(piece)
        compute += time.perf_counter() - t0
        show(events)
    t0 = time.perf_counter()
    events = stream.finish()
    compute += time.perf_counter() - t0
    show(events)
    audio_s = stream.position_s
    summary = {"type": "summary", "audio_s": round(audio_s, 3),
               "rtf": round(compute / audio_s, 4) if audio_s else None,
               "first_final_latency_ms": (round(stream.first_final_latency_ms, 1)
                                          if stream.first_final_latency_ms is not None else None)}
    stream.close()
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        lat = summary["first_final_latency_ms"]
        print(f"audio {audio_s:.2f} s, real-time factor {summary['rtf']}"
              + (f", first final {lat} ms after its endpoint" if lat is not None else ""), file=sys.stderr)
    return 0
