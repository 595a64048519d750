"""Word error rate and real-time factor of a recogniser on a corpus from asr_corpus.py.

    python bench/asr_corpus.py --out /tmp/asr_corpus --count 20
    python bench/asr_eval.py --corpus /tmp/asr_corpus [--engine nerve|pocketsphinx] [--by-voice]

nerve: the whole pipeline (nerve.asr.Recognizer: VAD, Moonshine on nerve; the finals
joined). pocketsphinx: the classic peer (nerve.asr.peers.pocketsphinx_recognize).
Every file is decoded twice: free (the engine's own language model) and with words= the
corpus vocabulary (asr_corpus.VOCABULARY: any sequence of those words). The table gives the
pooled WER (bench/wer.py: errors over reference words, numbers compared as words) and the
RTF (decode seconds / audio seconds, by the wall clock and by the decoding thread's CPU
time, which moves less on a shared machine; model loading excluded) per condition (clean, noisy) and
per synthesis engine. --hyps FILE writes every hypothesis as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from nerve.bench import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import asr_corpus  # noqa: E402
from wer import WordErrors, word_errors  # noqa: E402

RATE = 16000
_recognizers = {}


PRECISION = "fp32"  # --precision (nerve only)


def nerve_recognize(samples_16k: np.ndarray, words=None):
    """(text, seconds) of nerve's whole pipeline on one recording."""
    import nerve

    key = tuple(words) if words is not None else None
    rec = _recognizers.get(key)
    if rec is None:
        rec = _recognizers[key] = nerve.asr.Recognizer(words=words, partial_ms=0, precision=PRECISION)
    t0 = time.perf_counter()
    finals = rec.transcribe(samples_16k, sample_rate=RATE)
    return " ".join(e.text for e in finals), time.perf_counter() - t0


def pocketsphinx_recognize(samples_16k: np.ndarray, words=None):
    from nerve.asr.peers import pocketsphinx_recognize as recognize

    return recognize(samples_16k, words)


ENGINES = {"nerve": nerve_recognize, "pocketsphinx": pocketsphinx_recognize}


def _version(peer: str) -> str:
    try:
        from importlib.metadata import version
        return f"{peer} {version(peer)}"
    except Exception:
        return peer


class _Tally:
    def __init__(self):
        self.files = 0
        self.audio_s = 0.0
        self.errors = {"free": WordErrors(), "words": WordErrors()}
        self.decode_s = {"free": 0.0, "words": 0.0}
        self.cpu_s = {"free": 0.0, "words": 0.0}

    def add(self, mode, errors, seconds, cpu_seconds):
        self.errors[mode] = self.errors[mode] + errors
        self.decode_s[mode] += seconds
        self.cpu_s[mode] += cpu_seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path, help="directory with manifest.jsonl")
    ap.add_argument("--engine", default="nerve", choices=sorted(ENGINES))
    ap.add_argument("--limit", type=int, help="decode only the first N files of the manifest")
    ap.add_argument("--by-voice", action="store_true", help="also one row per voice")
    ap.add_argument("--hyps", type=Path, help="write the hypotheses here (JSON lines)")
    ap.add_argument("--precision", default="fp32", help="nerve's precision (fp32, int8, w4a32, w4a8[:gN])")
    args = ap.parse_args(argv)
    global PRECISION
    PRECISION = args.precision

    recognize = ENGINES[args.engine]
    rows = asr_corpus.load_manifest(args.corpus)[:args.limit]
    words = asr_corpus.VOCABULARY
    tallies = defaultdict(_Tally)
    hyps = open(args.hyps, "w") if args.hyps else None
    recognize(np.zeros(1600, np.float32))             # load the models outside the timing
    recognize(np.zeros(1600, np.float32), words=words)
    for n, row in enumerate(rows, 1):
        x, rate = asr_corpus.read_wav(args.corpus / row["path"])
        if x.ndim == 2:
            x = x.mean(axis=1)
        x = asr_corpus.resample(x, rate, RATE)
        audio_s = len(x) / RATE
        condition = "clean" if row["snr_db"] is None else f"snr{row['snr_db']:g}"
        engine, _, _ = row["voice"].partition(":")
        keys = [("all", ""), (condition, ""), (condition, engine)]
        if args.by_voice:
            keys.append((condition, row["voice"]))
        out = dict(row)
        for mode, w in (("free", None), ("words", words)):
            cpu0 = time.thread_time()
            text, seconds = recognize(x, words=w)
            cpu_seconds = time.thread_time() - cpu0
            errors = word_errors(row["text"], text)
            for k in keys:
                tallies[k].add(mode, errors, seconds, cpu_seconds)
            out[f"hyp_{mode}"] = text
            out[f"seconds_{mode}"] = round(seconds, 4)
        for k in keys:
            tallies[k].files += 1
            tallies[k].audio_s += audio_s
        if hyps:
            hyps.write(json.dumps(out) + "\n")
        if n % 20 == 0:
            print(f"  {n}/{len(rows)}", file=sys.stderr)
    if hyps:
        hyps.close()

    print(f"{_version(args.engine)} on {args.corpus} ({len(rows)} files); {cpu_model()}, {os.cpu_count()} CPUs")
    print("WER: pooled (S+D+I)/N over reference words; RTF: decode seconds / audio seconds, wall "
          "clock and the decoding thread's CPU time (wall/cpu);\n"
          f"free: the engine's own language model; words: any sequence of the {len(words)} vocabulary words")
    head = f"{'subset':36s} {'files':>5s} {'audio s':>8s} {'WER free':>9s} {'WER words':>10s} " \
           f"{'S/D/I free':>12s} {'S/D/I words':>12s} {'RTF free':>12s} {'RTF words':>12s}"
    print(head)
    print("-" * len(head))

    def order(key):
        cond, sub = key
        return (cond == "all", cond, sub != "", sub.count(":"), sub)

    for key in sorted(tallies, key=order):
        t = tallies[key]
        cond, sub = key
        label = cond if not sub else f"  {cond} {sub}"
        sdi = {m: f"{e.substitutions}/{e.deletions}/{e.insertions}" for m, e in t.errors.items()}
        print(f"{label:36s} {t.files:5d} {t.audio_s:8.1f} {t.errors['free'].wer:9.3f} "
              f"{t.errors['words'].wer:10.3f} {sdi['free']:>12s} {sdi['words']:>12s} "
              + " ".join(f"{t.decode_s[m] / t.audio_s:6.3f}/{t.cpu_s[m] / t.audio_s:.3f}".rjust(12)
                         for m in ("free", "words")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
